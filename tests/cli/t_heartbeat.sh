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
echo ok
