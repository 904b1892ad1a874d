#!/usr/bin/env bash
# tq bench on PostgreSQL at 1, 4 and 16 worker processes, with the
# enqueue-to-start latency of idle workers, beside the plain reference
# (bench/ref_pg.c: the same claim/ack pattern written directly with libpq,
# one job per claim, and 100 per claim and per acknowledgement), all in one
# invocation against a throwaway cluster (started here like the tests' one:
# unix socket only, fsync on; stopped on exit). Prints a markdown table.
#
# usage: bench/postgres.sh [JOBS] [BUILD_DIR]     (defaults: 20000, build)
set -euo pipefail
jobs=${1:-20000}
build=${2:-build}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_scratch pgbench
trap 'bench_cluster_stop; rm -rf "$dir"' EXIT
bench_cluster_start
url=$pg

printf '| workers | tq jobs/s | reference 1/claim | tq / ref 1 | reference 100/claim | tq / ref 100 | tq enqueue jobs/s | tq start-to-done p50 / p99 | tq enqueue-to-start p50 / p99 (idle) | lost | duplicates |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for w in 1 4 16; do
    r=$("$build/tq" bench --db "$url&tq_schema=b$w" --jobs "$jobs" --workers "$w" \
        --latency-jobs 200 --json)
    r1=$("$build/ref_pg" "$url" ref1_$w "$jobs" "$w" 1 | jq .process_per_s)
    r100=$("$build/ref_pg" "$url" ref100_$w "$jobs" "$w" 100 | jq .process_per_s)
    jq -r --argjson r1 "$r1" --argjson r100 "$r100" '"| \(.workers) | \(.process_per_s | floor) | \($r1) | \(.process_per_s / $r1 * 100 | floor / 100) | \($r100) | \(.process_per_s / $r100 * 100 | floor / 100) | \(.enqueue_per_s | floor) | \(.latency_p50_us)us / \(.latency_p99_us)us | \(.start_latency_p50_us)us / \(.start_latency_p99_us)us | \(.lost) | \(.duplicates) |"' <<<"$r"
done
