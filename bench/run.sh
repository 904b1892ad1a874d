#!/usr/bin/env bash
# bench/run.sh - tq's whole benchmark in one invocation, so every ratio
# compares runs made on the same machine at the same time.
#
# For SQLite (synchronous=FULL) and PostgreSQL (a throwaway cluster started
# here: unix socket only, fsync on; stopped on exit), 1, 4 and 16 worker
# processes, 20,000 and 200,000 no-op jobs: `tq bench` beside the plain
# references bench/ref_sqlite.c and bench/ref_pg.c (the same claim/ack
# pattern written directly, 1 job per claim and 100 per claim and per
# acknowledgement), and the PostgreSQL reference on tq's own table. Then:
# enqueue one job per call against bulk; the enqueue-to-start latency of
# idle workers; the process rate with 1,000,000 finished rows kept against
# an empty table; `tq work -- true` against a bare spawn-and-wait loop
# (bench/ref_spawn.c); a queue with a per-group concurrency limit, and one
# with a rate limit above the achievable, against the same queue without;
# every job storing a 1 KiB result against none; the time from a fan-in's
# last parent's end to its child's start, 10,000 parents against 1; a
# worker's peak memory; and (full runs) 1,000,000
# PostgreSQL jobs in a row (bench/sustained.sh).
#
# Writes docs/bench/results.csv, docs/bench/extras.csv,
# docs/bench/sustained.csv (full runs) and docs/bench/throughput.png
# (gnuplot), and prints the tables.
#
# usage: bench/run.sh [--quick] [BUILD_DIR]
#   --quick   20,000 jobs only (about 5 minutes instead of about 20)
set -euo pipefail
quick=0
if [ "${1:-}" = --quick ]; then
    quick=1
    shift
fi
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../docs/bench
sizes="20000 200000"
[ $quick = 1 ] && sizes=20000
command -v gnuplot >/dev/null || { echo "bench/run.sh: needs gnuplot (make bench installs it)" >&2; exit 1; }
for b in tq ref_sqlite ref_pg ref_spawn; do
    [ -x "$build/$b" ] || { echo "bench/run.sh: $build/$b not built (make build)" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/tq-run.XXXXXX)
chmod 755 "$dir"
trap 'bash "$here/../tests/pg/cluster.sh" stop "$dir/pg"; rm -rf "$dir"' EXIT
bash "$here/../tests/pg/cluster.sh" start "$dir/pg" >/dev/null
pg="postgresql:///postgres?host=$dir/pg&user=tq"
export PGOPTIONS="-c client_min_messages=warning"
mkdir -p "$out"
tq=$build/tq
seq_=0

# A fresh store: prints its URL; $2 names a PostgreSQL schema.
store() {
    seq_=$((seq_ + 1))
    if [ "$1" = sqlite ]; then echo "$dir/s$seq_.db"; else echo "$pg&tq_schema=s$seq_"; fi
}
schema_of() { sed -n 's/.*tq_schema=\([a-z0-9_]*\).*/\1/p' <<<"$1"; }
ref() { # ENGINE JOBS WORKERS BATCH: jobs/s of the plain reference
    seq_=$((seq_ + 1))
    if [ "$1" = sqlite ]; then
        "$build/ref_sqlite" "$dir/r$seq_.db" "$2" "$3" "$4" | jq .process_per_s
        rm -f "$dir/r$seq_.db"*
    else
        "$build/ref_pg" "$pg" "r$seq_" "$2" "$3" "$4" | jq .process_per_s
    fi
}
# Removes a store after its run: schemas left in the cluster would keep
# autovacuum busy during the runs after them.
drop() {
    if [[ $1 == postgresql:* ]]; then
        psql -X -q "$pg" -c "DROP SCHEMA IF EXISTS $(schema_of "$1") CASCADE"
    else
        rm -f "$1" "$1"-wal "$1"-shm
    fi
}
# fan_in ENGINE N [WHEN]: microseconds from the end of the last of N parents
# to the start of the job enqueued after them all (--when WHEN: done, the
# default, or ended, a batch's callback), with 4 workers draining.
fan_in() {
    local url p c
    url=$(store "$1")
    "$tq" init --db "$url" >/dev/null
    seq 1 "$2" | "$tq" enqueue --db "$url" --queue f --lines --json | jq -r '.ids[]' >"$dir/parents"
    c=$("$tq" enqueue --db "$url" --queue f --after-file "$dir/parents" --when "${3:-done}" child)
    for p in 1 2 3 4; do
        "$tq" work --db "$url" --queue f --name "f$p" --concurrency 4 --drain --quiet -- true &
    done
    wait
    if [ "$1" = sqlite ]; then
        sqlite3 "$url" "SELECT c.started_at - max(p.finished_at) FROM tq_jobs c, tq_deps d,
            tq_jobs p WHERE c.id = $c AND d.child = c.id AND p.id = d.parent"
    else
        psql -X -At "$pg" -c "SELECT (extract(epoch FROM c.started_at - max(p.finished_at))
            * 1000000)::int8 FROM $(schema_of "$url").jobs c, $(schema_of "$url").deps d,
            $(schema_of "$url").jobs p WHERE c.id = $c AND d.child = c.id AND p.id = d.parent
            GROUP BY c.started_at"
    fi
    drop "$url"
}
bench() { # URL ARGS...: tq bench's JSON, then the store is dropped
    local url=$1
    shift
    "$tq" bench --db "$url" --json "$@"
    drop "$url"
}
ratio() { jq -n "($1) / ($2) * 100 | round / 100"; }

csv=$out/results.csv
echo "engine,jobs,workers,tq_per_s,ref1_per_s,ref100_per_s,tq_vs_ref1,tq_vs_ref100,enqueue_bulk_per_s,start_to_done_p50_us,start_to_done_p99_us,worker_peak_rss_kb" >"$csv"
for engine in sqlite postgres; do
    for n in $sizes; do
        for w in 1 4 16; do
            t=$(bench "$(store $engine)" --jobs "$n" --workers "$w" --latency-jobs 0)
            r1=$(ref $engine "$n" "$w" 1)
            r100=$(ref $engine "$n" "$w" 100)
            tp=$(jq .process_per_s <<<"$t")
            printf '%s,%s,%s,%.0f,%.0f,%.0f,%s,%s,%.0f,%s,%s,%s\n' $engine "$n" "$w" "$tp" \
                "$r1" "$r100" "$(ratio "$tp" "$r1")" "$(ratio "$tp" "$r100")" \
                "$(jq .enqueue_per_s <<<"$t")" "$(jq .latency_p50_us <<<"$t")" \
                "$(jq .latency_p99_us <<<"$t")" "$(jq .worker_peak_rss_kb <<<"$t")" >>"$csv"
            tail -1 "$csv" >&2
        done
    done
done

extras=$out/extras.csv
echo "engine,measure,tq,reference,ratio" >"$extras"
extra() { echo "$1,$2,$3,$4,$(ratio "$3" "$4")" >>"$extras"; tail -1 "$extras" >&2; }
for engine in sqlite postgres; do
    # Enqueue: one job per call (one transaction each) against bulk.
    one=$(bench "$(store $engine)" --jobs 5000 --workers 1 --enqueue-batch 1 --latency-jobs 0 |
        jq .enqueue_per_s)
    bulk=$(bench "$(store $engine)" --jobs 20000 --workers 1 --latency-jobs 0 | jq .enqueue_per_s)
    extra $engine "enqueue jobs/s: one per call vs bulk (1000 per call)" "$one" "$bulk"

    # Enqueue-to-start latency with 4 idle workers (p50 and p99, us).
    l=$(bench "$(store $engine)" --jobs 1000 --workers 4 --latency-jobs 300)
    extra $engine "idle enqueue-to-start p50 us vs p99 us" "$(jq .start_latency_p50_us <<<"$l")" \
        "$(jq .start_latency_p99_us <<<"$l")"

    # 1,000,000 finished rows kept, against an empty table.
    full=$(store $engine)
    "$tq" init --db "$full" >/dev/null
    if [ $engine = sqlite ]; then
        sqlite3 "$full" "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c
            WHERE i < 1000000) INSERT INTO tq_jobs (queue, state, payload, attempts,
            started_at, finished_at) SELECT 'old', 'done', x'78', 1, 1, 2 FROM c; ANALYZE;"
    else
        s=$(schema_of "$full")
        psql -X -q "$pg" -c "INSERT INTO $s.jobs (queue, state, payload, attempts, started_at,
            finished_at) SELECT 'old', 'done', '\\x78', 1, now(), now()
            FROM generate_series(1, 1000000)" -c "VACUUM ANALYZE $s.jobs"
    fi
    e=$(bench "$(store $engine)" --jobs 20000 --workers 4 --latency-jobs 0 | jq .process_per_s)
    f=$(bench "$full" --jobs 20000 --workers 4 --latency-jobs 0 | jq .process_per_s)
    extra $engine "process jobs/s with 4 workers: 1000000 finished rows kept vs empty table" "$f" "$e"

    # tq work -- true against a bare spawn-and-wait loop of true.
    u=$(store $engine)
    "$tq" init --db "$u" >/dev/null
    seq 1 2000 | "$tq" enqueue --db "$u" --lines --queue t >/dev/null
    t0=$(date +%s.%N)
    "$tq" work --db "$u" --queue t --drain --quiet -- true
    t1=$(date +%s.%N)
    tw=$(jq -n "2000 / ($t1 - $t0)")
    extra $engine "commands/s: tq work -- true vs bare spawn loop" "$tw" \
        "$("$build/ref_spawn" 2000 true | jq .per_s)"
    drop "$u"

    # Concurrency limits: 100 groups taking turns 10 jobs at a time, 4
    # workers x 4 slots, at most 1 running per group, against the same queue
    # without the limit, with its claim-ahead (the default) and without
    # (what a limited queue gives up).
    g="--jobs 20000 --workers 4 --concurrency 4 --groups 100 --latency-jobs 0"
    lim=$(bench "$(store $engine)" $g --max-running-per-group 1 | jq .process_per_s)
    free=$(bench "$(store $engine)" $g | jq .process_per_s)
    free0=$(bench "$(store $engine)" $g --prefetch 0 | jq .process_per_s)
    extra $engine "jobs/s over 100 groups: max 1 running per group vs no limit" "$lim" "$free"
    extra $engine "jobs/s over 100 groups: max 1 running per group vs no limit and no claim-ahead" \
        "$lim" "$free0"
    # A rate limit far above what the workers reach (1,000,000 a second):
    # what the bucket and the shorter claim-ahead (5 ms) cost.
    r="--jobs 20000 --workers 4 --concurrency 4 --latency-jobs 0"
    rated=$(bench "$(store $engine)" $r --rate 1000000/s | jq .process_per_s)
    free=$(bench "$(store $engine)" $r | jq .process_per_s)
    free0=$(bench "$(store $engine)" $r --prefetch 0 | jq .process_per_s)
    extra $engine "jobs/s with a rate limit above the achievable (1000000/s) vs no limit" "$rated" "$free"
    extra $engine "jobs/s with a rate limit above the achievable (1000000/s) vs no limit and no claim-ahead" \
        "$rated" "$free0"
    # Every job storing a 1 KiB result, against the same run without.
    res=$(bench "$(store $engine)" $r --result 1024 | jq .process_per_s)
    extra $engine "jobs/s with a 1 KiB result per job vs none" "$res" "$free"
    # A fan-in: from the end of the last of 10,000 parents to the start of
    # their child (the store's own times), 4 workers, against one parent.
    extra $engine "fan-in us from the last parent's end to the child's start: 10000 parents vs 1" \
        "$(fan_in $engine 10000)" "$(fan_in $engine 1)"
    # The same for a batch's callback (--when ended), against the fan-in.
    extra $engine "batch us from the last parent's end to the callback's start: 10000 parents, --when ended vs done" \
        "$(fan_in $engine 10000 ended)" "$(fan_in $engine 10000)"
done
# What tq's table costs, apart from tq: the reference's own statements on
# a table made by tq init, against the reference on its minimal table.
for w in 4 16; do
    t=$(store postgres)
    "$tq" init --db "$t" >/dev/null
    on_tq=$("$build/ref_pg" "$pg" "$(schema_of "$t")" 20000 $w 100 tq | jq .process_per_s)
    extra postgres "reference jobs/s with $w workers and 100 per claim: on tq's table vs its minimal table" \
        "$on_tq" "$(ref postgres 20000 $w 100)"
done
# Full runs only: 1,000,000 jobs in a row on PostgreSQL, tq's table settings
# against the defaults, and with finished rows deleted (bench/sustained.sh).
if [ $quick = 0 ]; then
    bash "$here/sustained.sh" "$pg" "$build" 2>/dev/null | tee "$dir/sustained.txt" >&2
    echo "settings,round,jobs_per_s" >"$out/sustained.csv"
    grep -E '^(tq|defaults|delete_done),[0-9]+,' "$dir/sustained.txt" >>"$out/sustained.csv"
    for settings in tq defaults delete_done; do
        first=$(awk -F, -v s=$settings '$1 == s && $2 == 1 { print $3 }' "$out/sustained.csv")
        last=$(awk -F, -v s=$settings '$1 == s { r = $3 } END { print r }' "$out/sustained.csv")
        case $settings in
        tq) label="tq's table settings" ;;
        defaults) label="default table settings" ;;
        *) label="tq's table settings and finished rows deleted" ;;
        esac
        extra postgres "sustained with $label: jobs/s in the last vs first of 10 rounds of 100000" "$last" "$first"
    done
fi
for engine in sqlite postgres; do
    small=$(awk -F, -v e=$engine '$1 == e && $2 == 20000 && $3 == 4 { print $12 }' "$csv")
    big=$(awk -F, -v e=$engine '$1 == e && $2 == 200000 && $3 == 4 { print $12 }' "$csv")
    [ -n "$big" ] && extra $engine "worker peak RSS KiB with 4 workers: 200000 jobs vs 20000 jobs" "$big" "$small"
done

# The chart: jobs/s at 20,000 jobs, tq beside both references.
awk -F, 'NR > 1 && $2 == 20000 { print $1 "-" $3 "w", $4, $5, $6 }' "$csv" >"$dir/chart.dat"
gnuplot <<EOF
set terminal pngcairo size 900,500 font ",10"
set output "$out/throughput.png"
set title "no-op jobs processed per second, 20,000 jobs (log scale; higher is better)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [100:*]
set ylabel "jobs/s"
set key top left
set grid ytics
plot "$dir/chart.dat" using 2:xtic(1) title "tq", '' using 3 title "reference, 1 per claim", '' using 4 title "reference, 100 per claim"
EOF

echo
echo "| engine | jobs | workers | tq jobs/s | ref 1/claim | ref 100/claim | tq / ref 1 | tq / ref 100 | enqueue (bulk) | start-to-done p50 / p99 | worker peak RSS |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %sus / %sus | %s KiB |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }' "$csv"
echo
echo "| engine | measure | tq | reference | ratio |"
echo "|---|---|---|---|---|"
awk -F, 'NR > 1 { printf "| %s | %s | %.0f | %.0f | %s |\n", $1, $2, $3, $4, $5 }' "$extras"
