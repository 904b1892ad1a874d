# The worker's log says what the store decided. A run whose job was
# cancelled and retried while it ran fails, and its result is refused: the
# log says the result was discarded, never "failed ... dead". And a stop
# with --grace 0 says that running jobs get no grace (not "1us").
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue ol --lease 1h >/dev/null
# The first claim waits for a go, then fails; later claims succeed.
handler h.sh '
if [ "$TQ_CLAIM" = 1 ]; then
    echo started >"'"$T"'/started"
    while [ ! -e "'"$T"'/go" ]; do sleep 0.05; done
    echo "first run fails" >&2
    exit 1
fi'
id=$("$TQ" enqueue --queue ol --max-attempts 1 job)
bg "$TQ" work --queue ol --name ow -- "$T/h.sh" 2>"$T/ow.log"
w=$BG
wait_for 10 test -e "$T/started"
"$TQ" cancel "$id" >/dev/null
"$TQ" retry "$id" >/dev/null
touch "$T/go"
wait_for 20 grep -q "result discarded" "$T/ow.log"
wait_for 20 sh -c "[ \"\$('$TQ' show $id --json | jq -r .state)\" = done ]"
kill -TERM "$w"
wait_rc "$w"
! grep -q "attempt 1 of 1 failed" "$T/ow.log" || fail "the log calls a refused result a failure: $(cat "$T/ow.log")"

# --grace 0.
handler slow.sh 'sleep 30'
"$TQ" enqueue --queue gz job >/dev/null
bg "$TQ" work --queue gz --name gw --grace 0 -- "$T/slow.sh" 2>"$T/gw.log"
w=$BG
wait_for 10 sh -c "[ \"\$('$TQ' stats --queue gz --json | jq .counts.running)\" = 1 ]"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "exit of the worker stopped with no grace"
grep -q "stopped now, no grace" "$T/gw.log" || fail "no grace line: $(cat "$T/gw.log")"
! grep -q "1us" "$T/gw.log" || fail "$(cat "$T/gw.log")"

# The stop line names each way a run ended, as the docs do: two jobs that
# fail once and then succeed are "failed and retried", not "failed"; a
# discard, a snooze and a job out of attempts are said as such.
handler once.sh '
case "$(cat)" in
retry) [ "$TQ_ATTEMPT" -ge 2 ] || exit 1 ;;
dead) exit 1 ;;
discard) echo discard no >&"$TQ_CONTROL_FD" ;;
snooze) [ -e "'"$T"'/snoozed" ] || { touch "'"$T"'/snoozed"; echo snooze 0s >&"$TQ_CONTROL_FD"; } ;;
esac'
"$TQ" queue so --backoff 0 --max-attempts 2 >/dev/null
for p in retry retry dead discard snooze ok; do "$TQ" enqueue --queue so "$p" >/dev/null; done
"$TQ" work --queue so --drain -- "$T/once.sh" 2>"$T/so.log" || fail "worker: $(cat "$T/so.log")"
grep -q "stopped: 10 claimed, 4 done, 3 failed and retried, 1 dead, 1 discarded, 1 snoozed$" "$T/so.log" ||
    fail "the stop line: $(grep stopped "$T/so.log")"
# A job done on its second attempt: tq list shows no error beside it, tq
# show calls its first attempt's error an earlier one.
"$TQ" list --queue so --state done >"$T/list"
! grep -q "error:" "$T/list" || fail "tq list shows an error on a done job: $(cat "$T/list")"
"$TQ" list --queue so --state dead | grep -q "error: exit status 1" || fail "tq list hides a dead job's error"
r=$("$TQ" list --queue so --state done --json | jq -r '.[] | select(.attempts == 2) | .id' | head -1)
"$TQ" show "$r" | grep -q "^earlier error: exit status 1" || fail "tq show of a job done on retry: $("$TQ" show "$r")"
echo ok
