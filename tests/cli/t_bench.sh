# 8 worker processes, 20,000 jobs: each ran exactly once (tq bench counts
# every handler call in shared memory, independently of the store).
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
