# kill -9 a worker mid-job: its handler dies with it. Restarted under the
# same name, it puts its own job back at once (long before the lease), and
# the job completes.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue c --lease 1h >/dev/null
handler h.sh 'echo "$TQ_ATTEMPT" >> "'"$T"'/runs"; if [ "$TQ_ATTEMPT" = 1 ]; then sleep 60; fi'
id=$("$TQ" enqueue --queue c job)
bg "$TQ" work --queue c --name app1 -- "$T/h.sh"
w=$BG
wait_for 10 test -s "$T/runs"
# Killed once the store has recorded the start (within ~10 ms of it).
wait_for 10 sh -c "[ \$('$TQ' show $id --json | jq .attempts) = 1 ]"
expect_eq "$(job "$id" state)" running "before the crash"
kill -9 "$w"
wait_rc "$w"
# The handler (sh) and what it started die with their worker, so the restart can put the
# job back at once (what is left is ended here all the same).
h=$(head -1 "$T/handler.pids")
gone() { [ ! -e "/proc/$1" ] || grep -q '^[0-9]* (.*) Z ' "/proc/$1/stat"; }
wait_for 5 gone "$h"
while read -r p; do kill -KILL -- "-$p" 2>/dev/null || true; done <"$T/handler.pids"
# Another name cannot take the job: its lease has an hour left.
"$TQ" work --queue c --name other --drain --poll 100ms --quiet -- "$T/h.sh" &
o=$!
sleep 1.5
expect_eq "$(job "$id" state)" running "another worker must wait for the lease"
kill -TERM $o
wait_rc $o
expect_eq "$RC" 0 "other worker exit"
# The same name picks up its own unfinished business at start.
start=$(date +%s)
"$TQ" work --queue c --name app1 --drain -- "$T/h.sh" 2>"$T/restart.log"
[ $(($(date +%s) - start)) -lt 30 ] || fail "restart waited for the lease"
grep -q "put back 1 job" "$T/restart.log" || fail "restart did not report the job: $(cat "$T/restart.log")"
expect_eq "$(job "$id" state)" done state
expect_eq "$(job "$id" attempts)" 2 attempts
expect_eq "$(tr '\n' ' ' <"$T/runs")" "1 2 " runs

# A live worker's name cannot be taken.
bg "$TQ" work --queue idle --name app2 --quiet -- true
a=$BG
wait_for 10 sh -c "'$TQ' workers --json | jq -e '.[] | select(.name == \"app2\" and .status == \"alive\")'"
expect_exit 1 "$TQ" work --queue idle --name app2 -- true
grep -q "held by a live worker" "$T/err" || fail "no EINUSE message: $(cat "$T/err")"
kill -TERM "$a"
wait_rc "$a"
expect_eq "$RC" 0 "app2 exit"
echo ok
