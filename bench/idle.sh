#!/usr/bin/env bash
# bench/idle.sh - what idle workers cost: N `tq work` processes with nothing
# to do, for S seconds once all of them have registered and settled, on each
# engine. PostgreSQL: the server's transactions a second
# (pg_stat_database.xact_commit, in all and per worker) and the CPU its
# processes used; both engines: the CPU the workers used. An idle worker
# reads the store every 30 s at the latest (src/worker/idle.c), so S should
# span two of those. A throwaway cluster is started here (unix socket only,
# stopped on exit), with room for N workers.
#
# usage: bench/idle.sh [--workers "20 200"] [--seconds 60]
#                      [--engine sqlite|postgres|both] [BUILD_DIR]
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
counts="20 200" seconds=60 engines="sqlite postgres"
bench_options --workers=counts --seconds=seconds --engine=engines -- "$@"
bench_build "${bench_args[0]:-build}"
export PGOPTIONS="-c client_min_messages=warning"
hz=$(getconf CLK_TCK)

bench_scratch idle
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    bench_cluster_stop
    rm -rf "$dir"
}
trap cleanup EXIT

# CPU ticks (user + system) used so far by the processes given.
ticks() {
    local sum=0 p f
    for p in "$@"; do
        f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        f=${f##*) } # past the command name, which may hold spaces
        read -r -a v <<<"$f"
        sum=$((sum + v[11] + v[12]))
    done
    echo "$sum"
}
server_pids() { # the postmaster and its children (the backends among them)
    local pm
    pm=$(head -1 "$dir/pg/data/postmaster.pid")
    echo "$pm"
    pgrep -P "$pm" || true
}
commits() { psql -X -At "$pg" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'"; }

printf '| engine | idle workers | transactions/s | per worker | server CPU (%% of a core) | workers CPU (%% of a core) |\n'
printf '|---|---|---|---|---|---|\n'
for engine in $engines; do
    if [ "$engine" = postgres ] && [ $pg_started = 0 ]; then
        most=0
        for n in $counts; do [ "$n" -le $most ] || most=$n; done
        bench_cluster_start $((most + 20))
    fi
    for n in $counts; do
        if [ "$engine" = postgres ]; then
            store="$pg&tq_schema=idle_$n"
        else
            store="$dir/idle_$n.db"
        fi
        "$tq" init --db "$store" >/dev/null
        pids=()
        for i in $(seq "$n"); do
            "$tq" work --db "$store" --queue idle --name "idle-$i" --quiet -- true \
                2>>"$dir/workers.log" &
            pids+=($!)
        done
        # All started and registered, then 15 s to settle: an idle backend
        # reports its transactions to pg_stat_database up to 10 s late.
        for _ in $(seq 600); do
            [ "$("$tq" workers --db "$store" --json | jq '[.[] | select(.status == "alive")] | length')" -ge "$n" ] && break
            sleep 0.1
        done
        sleep 15
        w0=$(ticks "${pids[@]}")
        if [ "$engine" = postgres ]; then
            # shellcheck disable=SC2046
            s0=$(ticks $(server_pids))
            c0=$(commits)
        fi
        sleep "$seconds"
        w1=$(ticks "${pids[@]}")
        wcpu=$(jq -n "($w1 - $w0) / $hz / $seconds * 100 | . * 10 | round / 10")
        if [ "$engine" = postgres ]; then
            c1=$(commits)
            # shellcheck disable=SC2046
            s1=$(ticks $(server_pids))
            tps=$(jq -n "($c1 - $c0 - 1) / $seconds | . * 10 | round / 10")
            per=$(jq -n "$tps / $n | . * 100 | round / 100")
            scpu=$(jq -n "($s1 - $s0) / $hz / $seconds * 100 | . * 10 | round / 10")
        else
            tps=- per=- scpu=-
        fi
        printf '| %s | %s | %s | %s | %s | %s |\n' "$engine" "$n" "$tps" "$per" "$scpu" "$wcpu"
        for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
        pids=()
    done
done
