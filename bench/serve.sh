#!/usr/bin/env bash
# What tq serve costs, on both engines, in one invocation (PostgreSQL: a
# throwaway cluster, as the tests start one; stopped on exit).
#
# 1. Scrapes over a store keeping 1,000,000 finished jobs (990,000 done and
#    10,000 dead over the last two hours, ten queues): /metrics and
#    /api/overview fetched SCRAPES times each, timed by curl (request to
#    last byte) and by the server itself (tq_scrape_duration_seconds: its
#    reads of the store); how long the server took to start; and the
#    background count of the finished rows (tq_finished_count_duration_seconds).
# 2. Workers beside a scraper: tq bench (JOBS no-op jobs, 4 workers) alone,
#    and with tq serve on the same store scraped every second, in PAIRS
#    alternating pairs; the ratio of the process rates (median of pairs).
#
# usage: bench/serve.sh [BUILD_DIR] [SCRAPES] [PAIRS] [JOBS]
#        (defaults: build 50 5 200000; ENGINES="sqlite postgres"). Prints a
#        markdown table, and each pair's rates on stderr.
set -euo pipefail
build=${1:-build}
scrapes=${2:-50}
pairs=${3:-5}
jobs=${4:-200000}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
tq=$(cd "$build" && pwd)/tq
bench_scratch servebench
serve_pid=""
cleanup() {
    [ -z "$serve_pid" ] || kill -TERM "$serve_pid" 2>/dev/null || true
    bench_cluster_stop
    rm -rf "$dir"
}
trap cleanup EXIT
bench_cluster_start

start_serve() { # URL: starts tq serve on URL, sets $base
    "$tq" serve --db "$1" --listen 127.0.0.1:0 >"$dir/serve.out" 2>"$dir/serve.log" &
    serve_pid=$!
    for _ in $(seq 1 600); do
        grep -q "listening on" "$dir/serve.out" && break
        sleep 0.1
    done
    base=$(grep -o 'http://127.0.0.1:[0-9]*' "$dir/serve.out")
}
stop_serve() {
    kill -TERM "$serve_pid"
    wait "$serve_pid" || true
    serve_pid=""
}
# p50 and p95 of the numbers on stdin, in ms with one decimal.
pct() { sort -g | awk '{ v[NR] = $1 } END { printf "%.1f / %.1f", v[int(NR * 0.5 + 0.5)] * 1000, v[int(NR * 0.95 + 0.5)] * 1000 }'; }
# The middle value (the lower of the middle two of an even count), not
# lib.sh's mean of them.
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

fill() { # ENGINE URL: 1,000,000 finished jobs
    if [ "$1" = sqlite ]; then
        sqlite3 "$2" "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c
            WHERE i < 1000000), t(now) AS (SELECT CAST((julianday('now') - 2440587.5)
            * 86400000000 AS INTEGER))
            INSERT INTO tq_jobs (queue, state, payload, attempts, created_at, started_at,
              finished_at, run_at)
            SELECT 'q' || (i % 10), CASE WHEN i % 100 = 0 THEN 'dead' ELSE 'done' END,
              randomblob(40), 1, now - (1000000 - i) * 7200, now - (1000000 - i) * 7200 + 100,
              now - (1000000 - i) * 7200 + 2000 + (i % 50) * 100, now - (1000000 - i) * 7200
            FROM c, t"
    else
        psql -X -q -v ON_ERROR_STOP=1 "$pg" -c "INSERT INTO serve1m.jobs (queue, state,
            payload, attempts, created_at, started_at, finished_at, run_at)
            SELECT 'q' || (i % 10), CASE WHEN i % 100 = 0 THEN 'dead' ELSE 'done' END,
              convert_to(md5(i::text), 'UTF8'), 1, t, t + interval '100 microseconds',
              t + (2000 + (i % 50) * 100) * interval '1 microsecond', t
            FROM generate_series(1, 1000000) i,
              LATERAL (SELECT now() - (1000000 - i) * interval '7200 microseconds' AS t) x"
        psql -X -q -v ON_ERROR_STOP=1 "$pg" -c "VACUUM ANALYZE serve1m.jobs"
    fi
}

printf '| engine | server start | /metrics p50 / p95 (curl) | /metrics p50 / p95 (store reads) | /api/overview p50 / p95 (curl) | background count of 1M finished | bench alone jobs/s | bench scraped every 1 s jobs/s | ratio |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for engine in ${ENGINES:-sqlite postgres}; do
    if [ $engine = sqlite ]; then url=$dir/big.db; else url="$pg&tq_schema=serve1m"; fi
    "$tq" init --db "$url" >/dev/null
    fill $engine "$url"
    t0=$(date +%s.%N)
    start_serve "$url"
    started=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')
    : >"$dir/curl_m"
    : >"$dir/self_m"
    : >"$dir/curl_o"
    for _ in $(seq 1 "$scrapes"); do
        curl -sS -o "$dir/m" -w '%{time_total}\n' "$base/metrics" >>"$dir/curl_m"
        awk '$1 == "tq_scrape_duration_seconds" { print $2 }' "$dir/m" >>"$dir/self_m"
        curl -sS -o /dev/null -w '%{time_total}\n' "$base/api/overview" >>"$dir/curl_o"
    done
    count=$(awk '$1 == "tq_finished_count_duration_seconds" { printf "%.0f ms", $2 * 1000 }' "$dir/m")
    stop_serve
    # The workers, alone and scraped, on a store of their own.
    if [ $engine = sqlite ]; then burl=$dir/bench.db; else burl="$pg&tq_schema=servebench"; fi
    "$tq" init --db "$burl" >/dev/null
    : >"$dir/alone"
    : >"$dir/scraped"
    : >"$dir/ratios"
    for p in $(seq 1 "$pairs"); do
        for mode in alone scraped; do
            [ $((p % 2)) = 1 ] || mode=$([ $mode = alone ] && echo scraped || echo alone)
            if [ $mode = scraped ]; then
                start_serve "$burl"
                (while :; do curl -s -o /dev/null "$base/metrics"; sleep 1; done) &
                scraper=$!
            fi
            "$tq" bench --db "$burl" --jobs "$jobs" --workers 4 --latency-jobs 0 --json |
                jq .process_per_s >>"$dir/$mode"
            if [ $mode = scraped ]; then
                kill "$scraper"
                wait "$scraper" 2>/dev/null || true
                stop_serve
            fi
        done
        a=$(tail -1 "$dir/alone")
        s=$(tail -1 "$dir/scraped")
        awk -v s="$s" -v a="$a" 'BEGIN { print s / a }' >>"$dir/ratios"
        echo "$engine pair $p: alone $a, scraped $s jobs/s" >&2
    done
    printf '| %s | %.1f s | %s ms | %s ms | %s ms | %s | %.0f | %.0f | %.2f |\n' $engine "$started" \
        "$(pct <"$dir/curl_m")" "$(pct <"$dir/self_m")" "$(pct <"$dir/curl_o")" "$count" \
        "$(median <"$dir/alone")" "$(median <"$dir/scraped")" "$(median <"$dir/ratios")"
done
