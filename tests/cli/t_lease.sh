# Lease expiry and fencing: worker A is frozen (SIGSTOP) past its lease; B
# rescues the job and completes it; A, thawed, finishes its stale attempt
# with a failure, and the fence keeps B's result (TQ_ELOST, logged once).
# The runs are checked by the history checker.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue l --lease 2s --backoff 0 >/dev/null
# Attempt 1 runs 4 s and fails; attempt 2 succeeds at once. $1: the worker.
handler h.sh 'if [ "$TQ_ATTEMPT" = 1 ]; then exec "'"$TQ_HISTORY"'" run "'"$T"'/runs" "$1" 4000 1; fi
exec "'"$TQ_HISTORY"'" run "'"$T"'/runs" "$1"'
id=$("$TQ" enqueue --queue l job)
bg "$TQ" work --queue l --name A -- "$T/h.sh" A 2>"$T/A.log"
a=$BG
wait_for 10 test -s "$T/runs"
# Frozen once the store has recorded the start (within ~10 ms of it): a
# worker lost sooner is not charged for a start it could not report.
wait_for 10 sh -c "[ \$('$TQ' show $id --json | jq .attempts) = 1 ]"
freeze "$a"
# B starts while A is frozen; after A's lease expires, B takes the job.
"$TQ" work --queue l --name B --drain --poll 100ms -- "$T/h.sh" B 2>"$T/B.log"
expect_eq "$(job "$id" state)" done "after B"
expect_eq "$(job "$id" worker)" B "owner"
expect_eq "$(job "$id" attempts)" 2 attempts
grep -q "lease expired" <<<"$("$TQ" list --json | jq -r '.[0].last_error')" ||
    grep -q "rescued" "$T/B.log" || fail "B did not rescue: $(cat "$T/B.log")"
# Let A's handler (attempt 1) finish and fail, then thaw A.
wait_for 15 grep -q "^F $id 1 1 A" "$T/runs"
kill -CONT "$a"
sleep 1.5
kill -TERM "$a"
wait_rc "$a"
expect_eq "$RC" 0 "A exit"
# A's late failure changed nothing.
expect_eq "$(job "$id" state)" done "state after A's late result"
expect_eq "$(job "$id" worker)" B "owner after A's late result"
expect_eq "$(job "$id" attempts)" 2 "attempts after A's late result"
expect_eq "$(grep -c "job $id: lease was lost before its result was saved" "$T/A.log")" 1 \
    "A's log lines about its lost lease"
expect_eq "$(cut -d' ' -f1,3,4,5 "$T/runs" | tr '\n' ' ')" "S 1 1 A S 2 2 B F 2 2 B F 1 1 A " runs
history_check l "$T/runs" --lease 2000 --faulted A --all-done
echo ok
