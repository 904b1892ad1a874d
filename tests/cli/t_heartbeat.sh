# The heartbeat keeps a job that runs longer than its lease from being taken
# by another worker; cancelling a running job stops its handler.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue hb --lease 2s >/dev/null
handler slow.sh 'echo "$TQ_ATTEMPT" >> "'"$T"'/runs"; sleep 5'
id=$("$TQ" enqueue --queue hb long)
bg "$TQ" work --queue hb --name A --drain --poll 100ms -- "$T/slow.sh" 2>"$T/A.log"
a=$BG
wait_for 10 test -s "$T/runs"
# B polls all the while the job runs 2.5 leases long.
"$TQ" work --queue hb --name B --drain --poll 100ms -- "$T/slow.sh" 2>"$T/B.log"
wait_rc "$a"
expect_eq "$RC" 0 "A exit"
expect_eq "$(lines "$T/runs")" 1 "runs of a job kept alive by heartbeats"
expect_eq "$(job "$id" state)" done state
expect_eq "$(job "$id" worker)" A worker
expect_eq "$(job "$id" attempts)" 1 attempts

# Cancel while running: the next heartbeat finds the job gone and stops it.
"$TQ" queue c --lease 3s >/dev/null
handler stuck.sh 'echo started >> "'"$T"'/stuck"; exec sleep 60'
c=$("$TQ" enqueue --queue c stuck)
bg "$TQ" work --queue c --name C --drain -- "$T/stuck.sh" 2>"$T/C.log"
w=$BG
wait_for 10 test -s "$T/stuck"
"$TQ" cancel "$c" >/dev/null
start=$(date +%s)
wait_rc "$w"
expect_eq "$RC" 0 "worker exit after the cancel"
[ $(($(date +%s) - start)) -lt 15 ] || fail "the cancelled handler kept running"
grep -q "lease lost" "$T/C.log" || fail "no lost-lease line: $(cat "$T/C.log")"
expect_eq "$(job "$c" state)" cancelled "state after cancel"

# A queue's lease shortened while a worker runs: the worker paces its
# heartbeats by the lease each claim and beat actually granted, not by the
# lease it saw at start, so a healthy job is not taken by another worker.
"$TQ" queue lq --lease 30s >/dev/null
handler sleepy.sh 'echo "$TQ_ATTEMPT" >> "'"$T"'/lq.runs"; sleep 8'
bg "$TQ" work --queue lq --name LA --poll 100ms -- "$T/sleepy.sh" 2>"$T/LA.log"
a=$BG
sleep 1 # A has read the 30 s lease
"$TQ" queue lq --lease 3s >/dev/null
sleep 1.5 # and its settings since
id=$("$TQ" enqueue --queue lq job)
wait_for 10 test -s "$T/lq.runs"
bg "$TQ" work --queue lq --name LB --poll 100ms -- "$T/sleepy.sh" 2>"$T/LB.log"
b=$BG
wait_for 20 sh -c "[ \"\$('$TQ' show $id --json | jq -r .state)\" = done ]"
kill -TERM "$a" "$b"
wait_rc "$a"
wait_rc "$b"
expect_eq "$(lines "$T/lq.runs")" 1 "runs of a job under a shortened lease"
expect_eq "$(job "$id" worker)" LA "worker of that job"
echo ok
