# tq work --all-queues: one worker of every queue of the store, those
# created while it runs too, each job run exactly once; a paused queue's
# jobs stay ready; with --queue it is a usage error, said before the store
# is opened.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
handler run.sh "echo \"\$TQ_QUEUE \$TQ_JOB_ID\" >> '$T/runs'"
ran_at_least() { [ "$(lines "$T/runs")" -ge "$1" ]; }

# ---- with --queue: exit 2, one line, nothing opened ----------------------------
expect_exit 2 "$TQ" work --all-queues --queue a -- true
expect_eq "$(cat "$T/err")" "tq work: --all-queues and --queue cannot be used together" \
    "--all-queues with --queue"
expect_exit 2 env TQ_DB="$T/none.db" "$TQ" work -q a --all-queues --drain -- true
[ ! -e "$T/none.db" ] || fail "the usage error opened (and made) the store"

# ---- three queues, a paused one, and one made while the worker runs -----------
for q in a b c; do
    for i in $(seq 1 20); do "$TQ" enqueue --queue "$q" "$q$i" >/dev/null; done
done
"$TQ" queue held --pause >/dev/null
h1=$("$TQ" enqueue --queue held h1)
h2=$("$TQ" enqueue --queue held h2)

bg "$TQ" work --all-queues --concurrency 4 -- "$T/run.sh" 2>"$T/all.log"
w=$BG
wait_for 30 ran_at_least 60
"$TQ" queue late >/dev/null
for i in $(seq 1 10); do "$TQ" enqueue --queue late "late$i" >/dev/null; done
wait_for 30 ran_at_least 70
sleep 0.3 # a job run twice would show by now
stop_ok "$w"
grep -q "started: queues all;" "$T/all.log" || fail "start line: $(head -1 "$T/all.log")"
runs_once "$T/runs" 2 70
for q in a b c; do
    expect_eq "$(grep -c "^$q " "$T/runs")" 20 "runs of queue $q"
done
expect_eq "$(grep -c "^late " "$T/runs")" 10 "runs of the queue made while it ran"
expect_eq "$("$TQ" stats --queue held --json | jq .counts.ready)" 2 "the paused queue's jobs"

# ---- --drain: every queue's jobs, then it exits ----------------------------------
# (A paused queue's ready jobs would hold a drain, as with --queue: the
# worker says it waits for them.)
"$TQ" cancel "$h1" "$h2" >/dev/null
for i in $(seq 1 5); do "$TQ" enqueue --queue b "b-more$i" >/dev/null; done
for i in $(seq 1 5); do "$TQ" enqueue --queue fresh "fresh$i" >/dev/null; done
expect_exit 0 timeout 60 "$TQ" work --all-queues --drain -c 2 -- "$T/run.sh"
runs_once "$T/runs" 2 80
expect_eq "$(grep -c "^fresh " "$T/runs")" 5 "runs of queue fresh"
expect_eq "$("$TQ" stats --json | jq .counts.done)" 80 "done in the store"
echo ok
