# 8 worker processes, 20,000 jobs: each ran exactly once (tq bench counts
# every handler call in shared memory, independently of the store). Then
# with --delete-done: the same, and no row of the queue left in the store
# (bench counts what is left; any row makes "done" fall short and exit 1).
# Then --rounds (a sustained run with resident workers), and a bad --rounds.
. "$(dirname "$0")/lib.sh"
"$TQ" bench --jobs 20000 --workers 8 --json >"$T/bench.json" 2>"$T/bench.log" ||
    fail "bench exited non-zero: $(cat "$T/bench.json")"
r=$(cat "$T/bench.json")
expect_eq "$(echo "$r" | jq .jobs)" 20000 jobs
expect_eq "$(echo "$r" | jq .workers)" 8 workers
expect_eq "$(echo "$r" | jq .done)" 20000 "done in store"
expect_eq "$(echo "$r" | jq .ran)" 20000 "handler calls"
expect_eq "$(echo "$r" | jq .lost)" 0 lost
expect_eq "$(echo "$r" | jq .duplicates)" 0 duplicates
echo "$r" | jq -e '.enqueue_per_s > 0 and .process_per_s > 0' >/dev/null || fail "rates"
echo "ok: $r"
"$TQ" bench --jobs 3000 --workers 4 --delete-done --latency-jobs 0 --json >"$T/del.json" \
    2>"$T/del.log" || fail "bench --delete-done exited non-zero: $(cat "$T/del.json" "$T/del.log")"
d=$(cat "$T/del.json")
expect_eq "$(echo "$d" | jq .done)" 3000 "done (rows deleted)"
expect_eq "$(echo "$d" | jq .ran)" 3000 "handler calls, deleting"
expect_eq "$(echo "$d" | jq .duplicates)" 0 "duplicates, deleting"
echo "ok: $d"
# --rounds: the workers stay up while 4 x 2,000 jobs are enqueued, at most
# one round ahead; every job ran once and each round has a rate. Enqueues of
# 100 keep the feeder's write transactions short: under the sanitizers on a
# loaded machine one of 1,000 held SQLite's lock for over a second, and a
# worker starting meanwhile gave up after the 10 s busy timeout.
"$TQ" bench --jobs 2000 --rounds 4 --workers 3 --latency-jobs 0 --enqueue-batch 100 --json >"$T/rounds.json" \
    2>"$T/rounds.log" || fail "bench --rounds exited non-zero: $(cat "$T/rounds.json" "$T/rounds.log")"
s=$(cat "$T/rounds.json")
expect_eq "$(echo "$s" | jq .jobs)" 8000 "jobs, rounds"
expect_eq "$(echo "$s" | jq .done)" 8000 "done, rounds"
expect_eq "$(echo "$s" | jq .ran)" 8000 "handler calls, rounds"
expect_eq "$(echo "$s" | jq .duplicates)" 0 "duplicates, rounds"
expect_eq "$(echo "$s" | jq '[.round_per_s[] | select(. > 0)] | length')" 4 "rounds with a rate"
echo "ok: $s"
"$TQ" bench --jobs 2000 --rounds 0 >"$T/r0.out" 2>&1 && fail "--rounds 0 accepted"
grep -q "rounds" "$T/r0.out" || fail "--rounds 0: no clear message: $(cat "$T/r0.out")"
