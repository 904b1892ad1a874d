#!/usr/bin/env bash
# tq bench on SQLite at 1, 4 and 8 worker processes, beside the plain
# reference (bench/ref_sqlite.c: the same claim/ack pattern written directly
# with sqlite3, one job per claim), all in one invocation so the ratios
# compare runs on the same machine at the same time.
#
# usage: bench/workers.sh [JOBS] [BUILD_DIR]     (defaults: 20000, build)
set -euo pipefail
jobs=${1:-20000}
build=${2:-build}
tq=$build/tq
ref=$build/ref_sqlite
dir=$(mktemp -d /tmp/tq-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT

printf '| workers | tq jobs/s | reference jobs/s | tq / reference | tq enqueue jobs/s | tq p50 | tq p99 | busy retries | lost | duplicates |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for w in 1 4 8; do
    t=$("$tq" bench --db "$dir/tq$w.db" --jobs "$jobs" --workers "$w" --json)
    r=$("$ref" "$dir/ref$w.db" "$jobs" "$w" 1)
    tp=$(jq .process_per_s <<<"$t")
    rp=$(jq .process_per_s <<<"$r")
    printf '| %d | %.0f | %.0f | %.2f | %.0f | %sus | %sus | %s | %s | %s |\n' "$w" "$tp" "$rp" \
        "$(jq -n "$tp / $rp")" "$(jq .enqueue_per_s <<<"$t")" \
        "$(jq .latency_p50_us <<<"$t")" "$(jq .latency_p99_us <<<"$t")" \
        "$(jq .busy_retries <<<"$t")" "$(jq .lost <<<"$t")" "$(jq .duplicates <<<"$t")"
done
