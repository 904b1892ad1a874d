# Lease expiry and fencing: worker A is frozen (SIGSTOP) past its lease; B
# rescues the job and completes it; A, thawed, finishes its stale attempt
# with a failure, and the fence keeps B's result.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue l --lease 2s --backoff 0 >/dev/null
handler h.sh 'echo "$TQ_ATTEMPT" >> "'"$T"'/runs"; if [ "$TQ_ATTEMPT" = 1 ]; then sleep 4; touch "'"$T"'/a_finished"; exit 1; fi; exit 0'
id=$("$TQ" enqueue --queue l job)
bg "$TQ" work --queue l --name A -- "$T/h.sh" 2>"$T/A.log"
a=$BG
wait_for 10 test -s "$T/runs"
# Frozen once the store has recorded the start (within ~10 ms of it): a
# worker lost sooner is not charged for a start it could not report.
wait_for 10 sh -c "[ \$('$TQ' show $id --json | jq .attempts) = 1 ]"
freeze "$a"
# B starts while A is frozen; after A's lease expires, B takes the job.
"$TQ" work --queue l --name B --drain --poll 100ms -- "$T/h.sh" 2>"$T/B.log"
expect_eq "$(job "$id" state)" done "after B"
expect_eq "$(job "$id" worker)" B "owner"
expect_eq "$(job "$id" attempts)" 2 attempts
grep -q "lease expired" <<<"$("$TQ" list --json | jq -r '.[0].last_error')" ||
    grep -q "rescued" "$T/B.log" || fail "B did not rescue: $(cat "$T/B.log")"
# Let A's handler (attempt 1) finish and fail, then thaw A.
wait_for 15 test -e "$T/a_finished"
kill -CONT "$a"
sleep 1.5
kill -TERM "$a"
wait_rc "$a"
expect_eq "$RC" 0 "A exit"
# A's late failure changed nothing.
expect_eq "$(job "$id" state)" done "state after A's late result"
expect_eq "$(job "$id" worker)" B "owner after A's late result"
expect_eq "$(job "$id" attempts)" 2 "attempts after A's late result"
expect_eq "$(tr '\n' ' ' <"$T/runs")" "1 2 " runs
grep -q "lease" "$T/A.log" || fail "A did not notice its lost lease: $(cat "$T/A.log")"
echo ok
