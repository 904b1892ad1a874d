#!/usr/bin/env bash
# bench/pressure.sh - the queue's rate under the pressures a busy database
# puts on it, each against a clean run in the same invocation:
#
#   postgres held     a session of the same database idle in a transaction
#                     that holds the xmin horizon (BEGIN; SELECT
#                     txid_current();), as an operator's mistake would, for
#                     the whole run; ended server-side (pg_terminate_backend)
#   postgres readers  four REPEATABLE READ sessions in a loop, each
#                     transaction counting the table and its ready jobs, then
#                     holding its snapshot 1.5 s (overlapping: the horizon
#                     moves, but never far)
#   sqlite reader     a connection holding a read transaction for the whole
#                     run (the WAL cannot be reset behind it)
#
# Each run is `tq bench --rounds R --jobs N --workers 4` on a fresh store
# (workers that stay up, jobs enqueued while they work): the rate of the
# whole run and of its last three rounds, and after it, the pressure still
# on, the dead row versions a VACUUM cannot remove and the table's size with
# its indexes (PostgreSQL) or the -wal file's size (SQLite). Prints a markdown table with each pressure's ratio to the clean
# run, and writes every round's rate to pressure.csv (and pressure.svg with
# gnuplot) in the current directory.
#
# PostgreSQL runs against a throwaway cluster started here (unix socket
# only, stopped on exit) unless PG_URL is given.
#
# usage: bench/pressure.sh [--rounds R] [--jobs N] [--engine sqlite|postgres|both]
#                          [BUILD_DIR]
#   defaults: 20 rounds of 50,000 jobs (1,000,000; about 15 minutes on 2
#   cores), both engines, build. --rounds 4 --jobs 25000 for a quick look.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
rounds=20 per=50000 engines="sqlite postgres"
bench_options --rounds=rounds --jobs=per --engine=engines -- "$@"
bench_build "${bench_args[0]:-build}"
export PGOPTIONS="-c client_min_messages=warning"

bench_scratch pressure
holder_pid="" # the process keeping the horizon or the read open
holder_engine=""
readers=()
cleanup() {
    stop_pressure
    bench_cluster_stop
    rm -rf "$dir"
}
trap cleanup EXIT

# ---- pressures: each starts in the background and is ended by stop_pressure --

# A session that holds a transaction open: psql (or sqlite3) reading
# statements from a FIFO this shell keeps open on fd 3.
hold_open() { # ENGINE URL_OR_FILE FIRST_STATEMENTS
    mkfifo "$dir/hold.fifo"
    if [ "$1" = postgres ]; then
        psql -X -q -At "$2" <"$dir/hold.fifo" >"$dir/hold.out" 2>&1 &
    else
        sqlite3 "$2" <"$dir/hold.fifo" >"$dir/hold.out" 2>&1 &
    fi
    holder_pid=$!
    holder_engine=$1
    exec 3>"$dir/hold.fifo"
    printf '%s\n' "$3" >&3
    for _ in $(seq 100); do # until it answered: the transaction is open
        [ "$(wc -l <"$dir/hold.out")" -ge 2 ] && return 0
        sleep 0.1
    done
    echo "pressure.sh: the holding session did not answer: $(cat "$dir/hold.out")" >&2
    exit 1
}

start_pressure() { # ENGINE PRESSURE STORE
    case $2 in
    held) hold_open postgres "$pg" "BEGIN; SELECT pg_backend_pid(); SELECT txid_current();" ;;
    reader) hold_open sqlite "$3" "BEGIN; SELECT count(*) FROM tq_jobs; SELECT 1;" ;;
    readers)
        local schema=${3##*tq_schema=}
        for i in 1 2 3 4; do
            (while :; do
                psql -X -q "$pg" -c "BEGIN ISOLATION LEVEL REPEATABLE READ" \
                    -c "SELECT count(*) FROM $schema.jobs" \
                    -c "SELECT count(*) FROM $schema.jobs WHERE state = 'ready'" \
                    -c "SELECT pg_sleep(1.5)" -c "COMMIT" >/dev/null 2>&1 || sleep 0.2
            done) &
            readers+=($!)
            sleep 0.4 # overlapping, not in step
        done ;;
    esac
}

stop_pressure() {
    if [ -n "$holder_pid" ]; then
        local backend
        backend=$(sed -n 1p "$dir/hold.out" 2>/dev/null || true)
        # A held PostgreSQL horizon ends server-side: killing psql would
        # leave its backend idle in the transaction a while.
        if [ "$holder_engine" = postgres ] && [[ $backend =~ ^[0-9]+$ ]]; then
            psql -X -q "$pg" -c "SELECT pg_terminate_backend($backend)" >/dev/null || true
        fi
        exec 3>&- || true
        kill "$holder_pid" 2>/dev/null || true
        wait "$holder_pid" 2>/dev/null || true
        holder_pid=""
        rm -f "$dir/hold.fifo" "$dir/hold.out"
    fi
    for p in "${readers[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    readers=()
}

# ---- one run --------------------------------------------------------------

# What a run left, the pressure still on: the dead row versions a VACUUM
# then cannot remove and the table's size with its indexes (PostgreSQL), or
# the -wal file's size (SQLite).
left_behind() { # ENGINE STORE
    if [ "$1" = postgres ]; then
        local schema=${2##*tq_schema=}
        psql -X -q "$pg" -c "VACUUM $schema.jobs"
        psql -X -At "$pg" -c "SELECT n_dead_tup || ',' ||
            pg_total_relation_size(relid) / 1048576 FROM pg_stat_user_tables
            WHERE schemaname = '$schema' AND relname = 'jobs'"
    else
        echo ",$(($(stat -c %s "$2-wal" 2>/dev/null || echo 0) / 1048576))"
    fi
}

run() { # ENGINE PRESSURE -> "whole,last3,dead,mb", rounds into the CSV
    local engine=$1 pressure=$2 store
    if [ "$engine" = postgres ]; then
        store="$pg&tq_schema=p_$pressure"
        psql -X -q "$pg" -c "DROP SCHEMA IF EXISTS p_$pressure CASCADE"
    else
        store="$dir/$pressure.db"
    fi
    "$tq" init --db "$store" >/dev/null
    [ "$pressure" = clean ] || start_pressure "$engine" "$pressure" "$store"
    "$tq" bench --db "$store" --rounds "$rounds" --jobs "$per" --workers 4 \
        --latency-jobs 0 --json >"$dir/run.json"
    local after
    after=$(left_behind "$engine" "$store")
    stop_pressure
    jq -r --arg e "$engine" --arg p "$pressure" \
        '.round_per_s | to_entries[] | "\($e),\($p),\(.key + 1),\(.value | round)"' \
        "$dir/run.json" >>pressure.csv
    jq -r --arg after "$after" '(.round_per_s | .[-3:] | add / length | round) as $l |
        "\(.process_per_s | round),\($l),\($after)"' "$dir/run.json"
    [ "$engine" = sqlite ] || psql -X -q "$pg" -c "DROP SCHEMA p_$pressure CASCADE"
}

echo "engine,pressure,round,jobs_per_s" >pressure.csv
printf '| engine | run | jobs/s, whole run | vs clean | last 3 rounds | vs clean | dead rows VACUUM keeps | table+indexes MB (PG) / WAL MB (SQLite) |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for engine in $engines; do
    if [ "$engine" = postgres ]; then
        pg=${PG_URL:-}
        [ -n "$pg" ] || bench_cluster_start
        pressures="clean held readers"
    else
        pressures="clean reader"
    fi
    clean=""
    for p in $pressures; do
        IFS=, read -r whole last dead mb <<<"$(run "$engine" "$p")"
        [ -n "$clean" ] || clean="$whole,$last"
        IFS=, read -r cw cl <<<"$clean"
        printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$engine" "$p" "$whole" \
            "$(jq -n "$whole / $cw * 100 | round / 100")" "$last" \
            "$(jq -n "$last / $cl * 100 | round / 100")" "${dead:--}" "$mb"
    done
done
if command -v gnuplot >/dev/null; then
    gnuplot -e "set terminal svg size 900,500; set output 'pressure.svg';
        set datafile separator ','; set key outside; set xlabel 'round ($per jobs)';
        set ylabel 'jobs/s';
        plot for [k in 'sqlite,clean sqlite,reader postgres,clean postgres,held postgres,readers']
        '< grep \"^'.k.',\" pressure.csv' using 3:4 with linespoints title k" 2>/dev/null || true
fi
