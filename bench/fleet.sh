#!/usr/bin/env bash
# bench/fleet.sh - a fleet on one PostgreSQL: many worker processes through
# a PgBouncer in transaction mode against a few connected directly, in one
# invocation. A throwaway cluster and pooler are started here (unix sockets
# only, stopped on exit). In alternated pairs, each run on a fresh schema:
#   direct   `tq bench --jobs J --workers D` on the server's own socket;
#   pooled   `tq bench --jobs J --workers W` through the pooler (a pool of
#            P server sessions), tq_pool=transaction, with tq_listen;
# and, to price the unnamed statements a pooled store sends, D workers on
# the server's own socket with tq_pool=transaction (no pooler) against the
# direct runs. Prints every run, each row's median jobs/s and the median
# of the pairs' ratios. Every run must process every job exactly once
# (tq bench's done/lost/duplicates), or the script fails.
#
# usage: bench/fleet.sh [--jobs 200000] [--workers 200] [--direct 16]
#                       [--pool 20] [--pairs 3] [BUILD_DIR]
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
jobs=200000 workers=200 direct=16 pool=20 pairs=3
bench_options --jobs=jobs --workers=workers --direct=direct --pool=pool --pairs=pairs -- "$@"
bench_build "${bench_args[0]:-build}"
command -v pgbouncer >/dev/null || "$bench_root/scripts/deps.sh" pgbouncer

bench_scratch fleet
cleanup() {
    bash "$bench_root/tests/pg/bouncer.sh" stop "$dir/pgb" >/dev/null 2>&1 || true
    bench_cluster_stop
    rm -rf "$dir"
}
trap cleanup EXIT
# Room for every worker's listening session beside the pool.
bench_cluster_start $((workers + direct + pool + 20))
TQ_PGB_POOL=$pool bash "$bench_root/tests/pg/bouncer.sh" start "$dir/pgb" "$dir/pg" >/dev/null
server=$pg
listen=$(jq -rn --arg u "$server" '$u | @uri')
pooled="postgresql:///postgres?host=$dir/pgb&port=6432&user=tq&tq_pool=transaction&tq_listen=$listen"

n=0
# run NAME URL WORKERS: one tq bench; its jobs/s appended to $dir/NAME.
run() {
    n=$((n + 1))
    local out rate
    out=$(TQ_DB="$2&tq_schema=f$n" "$tq" bench --jobs "$jobs" --workers "$3" 2>&1) ||
        { echo "$out" >&2; echo "fleet.sh: $1 failed" >&2; exit 1; }
    grep -q "done $jobs  lost 0  duplicates 0" <<<"$out" ||
        { echo "$out" >&2; echo "fleet.sh: $1 did not run every job once" >&2; exit 1; }
    rate=$(awk '/^  process/ { print $2 }' <<<"$out")
    echo "$rate" >>"$dir/$1"
    printf '  %-9s %3d workers  %8d jobs/s\n' "$1" "$3" "$rate"
}
echo "fleet.sh: $jobs jobs a run; $workers workers through a pool of $pool, $direct direct"
for i in $(seq "$pairs"); do
    if ((i % 2)); then
        run direct "$server" "$direct"
        run pooled "$pooled" "$workers"
        run unnamed "$server&tq_pool=transaction" "$direct"
    else
        run unnamed "$server&tq_pool=transaction" "$direct"
        run pooled "$pooled" "$workers"
        run direct "$server" "$direct"
    fi
done
ratios() { paste "$dir/$1" "$dir/direct" | awk '{ printf "%.3f\n", $1 / $2 }' | median; }
echo
printf 'median jobs/s: direct %s, pooled %s, unnamed %s\n' \
    "$(median <"$dir/direct")" "$(median <"$dir/pooled")" "$(median <"$dir/unnamed")"
printf 'pooled (%d workers, pool %d) / direct (%d): %s (median of the pairs)\n' \
    "$workers" "$pool" "$direct" "$(ratios pooled)"
printf 'unnamed statements (tq_pool=transaction, no pooler) / direct: %s\n' "$(ratios unnamed)"
