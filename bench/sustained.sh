#!/usr/bin/env bash
# bench/sustained.sh - does the PostgreSQL rate stay flat as the jobs table
# ages? 1,000,000 jobs processed in a row by 4 workers that stay up (tq bench
# --rounds 10 --jobs 100000: jobs are enqueued while the workers run, at
# most 100,000 ahead of them), with the rate of every 100,000 reported, so
# every round works beside the done rows and dead row versions of the ones
# before. Run three times in one invocation: with tq's table settings
# (migration 2 in src/engine/postgres/schema.c), with PostgreSQL's defaults (the
# same table, its storage options reset), and with tq's settings on a queue
# that deletes finished jobs (tq bench --delete-done).
#
# Prints "settings,round,jobs_per_s" lines, then for each settings the first
# round, the last round and last / first.
#
# usage: bench/sustained.sh PG_URL [BUILD_DIR] [ROUNDS] [JOBS_PER_ROUND]
set -euo pipefail
url=${1:?usage: bench/sustained.sh PG_URL [BUILD_DIR] [ROUNDS] [JOBS_PER_ROUND]}
build=${2:-build}
rounds=${3:-10}
per=${4:-100000}
tq=$build/tq
export PGOPTIONS="-c client_min_messages=warning"

summary=""
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for settings in tq defaults delete_done; do
    schema=sustained_$settings
    psql -X -q "$url" -c "DROP SCHEMA IF EXISTS $schema CASCADE"
    "$tq" init --db "$url&tq_schema=$schema" >/dev/null
    if [ "$settings" = defaults ]; then
        psql -X -q "$url" -c "ALTER TABLE $schema.jobs RESET (fillfactor,
            autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
            autovacuum_vacuum_cost_limit, autovacuum_analyze_scale_factor)"
    fi
    "$tq" bench --db "$url&tq_schema=$schema" --jobs "$per" --rounds "$rounds" \
        --workers 4 --latency-jobs 0 $([ "$settings" = delete_done ] && echo --delete-done) \
        --json >"$tmp"
    jq -r --arg s "$settings" '.round_per_s | to_entries[] |
        "\($s),\(.key + 1),\(.value | round)"' "$tmp"
    first=$(jq '.round_per_s[0] | round' "$tmp")
    last=$(jq '.round_per_s[-1] | round' "$tmp")
    dead=$(psql -X -At "$url" -c "SELECT n_dead_tup || ' dead rows, ' || autovacuum_count
        || ' autovacuums, ' || pg_size_pretty(pg_total_relation_size(relid))
        FROM pg_stat_user_tables WHERE schemaname = '$schema' AND relname = 'jobs'")
    summary+="$settings: first round $first jobs/s, last $last, last/first "
    summary+="$(jq -n "$last / $first * 100 | round / 100") (after: $dead)"$'\n'
    psql -X -q "$url" -c "DROP SCHEMA $schema CASCADE"
done
printf '%s' "$summary"
