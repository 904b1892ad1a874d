#!/usr/bin/env bash
# bench/regress.sh - this build against an older one, in one invocation:
# whether a change made a plain queue slower.
#
# Builds REV (a commit, tag or branch) in a throwaway worktree, then runs
# `tq bench --jobs J --workers W` with both binaries in alternated pairs
# (old then new, new then old, ...), each run on a fresh store, for each
# engine and worker count asked, and prints each build's median jobs/s,
# the ratio of the medians and the median of the pairs' ratios (the
# figure to quote: each pair ran side by side, under the same load).
# With --callgrind it also counts instructions (valgrind's callgrind, one
# 1-worker run per build and engine; they do not vary from run to run as
# timings do): the enqueue's and the worker loop's, per job.
#
# usage: bench/regress.sh [--pairs N] [--jobs J] [--workers "1 4 16"]
#                         [--engine sqlite|postgres|both] [--callgrind]
#                         REV [BUILD_DIR]
#   --pairs N    alternated pairs per row (default 7; 0: --callgrind only)
#   --jobs J     jobs per run (default 20000)
#   --workers    worker counts, one row each (default "4")
#   --engine     default sqlite
#   --callgrind  also instructions per job (needs valgrind)
#   BUILD_DIR    this build (default build; make build)
# Example: bench/regress.sh --pairs 7 --workers "1 4 16" 1f7bc44
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
pairs=7 jobs=20000 workers=4 engines=sqlite callgrind=0
bench_options --pairs=pairs --jobs=jobs --workers=workers --engine=engines \
    --callgrind=callgrind=1 -- "$@"
set -- "${bench_args[@]}"
[ $# -ge 1 ] || { echo "usage: bench/regress.sh [options] REV [BUILD_DIR] (--help)" >&2; exit 2; }
rev=$1
build=$(cd "${2:-build}" && pwd)
root=$bench_root
for e in $engines; do
    case $e in sqlite | postgres) ;; *) echo "bench/regress.sh: no engine '$e'" >&2; exit 2 ;; esac
done
[ -x "$build/tq" ] || { echo "bench/regress.sh: $build/tq not built (make build)" >&2; exit 1; }
[ $callgrind = 0 ] || command -v valgrind >/dev/null ||
    { echo "bench/regress.sh: --callgrind needs valgrind (apt-get install valgrind)" >&2; exit 1; }
sha=$(git -C "$root" rev-parse --verify --quiet "$rev^{commit}") ||
    { echo "bench/regress.sh: '$rev' is not a commit here" >&2; exit 2; }

bench_scratch regress
cleanup() {
    bench_cluster_stop
    git -C "$root" worktree remove --force "$dir/old" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

echo "building $rev (${sha:0:10}) in $dir/old (log: $dir/old.log)"
git -C "$root" worktree add --detach "$dir/old" "$sha" >"$dir/old.log" 2>&1
cmake -S "$dir/old" -B "$dir/old/build" >>"$dir/old.log" 2>&1
cmake --build "$dir/old/build" -j "$(nproc)" --target tq_tool >>"$dir/old.log" 2>&1 ||
    { tail -30 "$dir/old.log"; echo "bench/regress.sh: $rev does not build" >&2; exit 1; }
old=$dir/old/build/tq new=$build/tq

case " $engines " in *" postgres "*)
    bench_cluster_start
    export PGOPTIONS="-c client_min_messages=warning" ;;
esac
seq_=0
store() { # ENGINE: sets url to a fresh store's
    seq_=$((seq_ + 1))
    if [ "$1" = sqlite ]; then url=$dir/s$seq_.db; else
        url="$pg&tq_schema=r$seq_"
    fi
}
drop() { # URL: a PostgreSQL store's schema goes (its rows would slow the next)
    case $1 in postgresql:*)
        psql -q -h "$dir/pg" -U tq -d postgres \
            -c "DROP SCHEMA IF EXISTS ${1##*tq_schema=} CASCADE" >/dev/null ;;
    *) rm -f "$1" "$1-wal" "$1-shm" ;;
    esac
}
rate() { # TQ ENGINE WORKERS: one run's jobs/s
    "$1" bench --db "$url" --jobs "$jobs" --workers "$3" --latency-jobs 0 --json |
        jq '.process_per_s | round'
    drop "$url"
}

[ "$pairs" -gt 0 ] || workers="" # --pairs 0: instructions only
[ -z "$workers" ] ||
    printf '\n%-9s %7s %9s %11s %11s %7s %11s\n' engine workers pairs "$rev" this ratio "pair med."
for e in $engines; do
    for w in $workers; do
        : >"$dir/a" && : >"$dir/b" && : >"$dir/r"
        for i in $(seq 1 "$pairs"); do
            if [ $((i % 2)) = 1 ]; then
                store "$e" && a=$(rate "$old" "$e" "$w")
                store "$e" && b=$(rate "$new" "$e" "$w")
            else
                store "$e" && b=$(rate "$new" "$e" "$w")
                store "$e" && a=$(rate "$old" "$e" "$w")
            fi
            echo "$a" >>"$dir/a" && echo "$b" >>"$dir/b"
            jq -n "$b / $a" >>"$dir/r"
        done
        ma=$(median <"$dir/a") mb=$(median <"$dir/b") mr=$(median <"$dir/r")
        printf '%-9s %7s %9s %11.0f %11.0f %7.3f %11.3f\n' "$e" "$w" "$pairs" "$ma" "$mb" \
            "$(jq -n "$mb / $ma")" "$mr"
        echo "          runs $rev: $(sort -n "$dir/a" | tr '\n' ' ')"
        echo "          runs this: $(sort -n "$dir/b" | tr '\n' ' ')"
    done
done

[ $callgrind = 1 ] || exit 0
# One 1-worker run per build under callgrind, every process traced: the
# instructions of the enqueue (tq_job_enqueue_batch, inclusive) and of the
# worker's loop (tq_worker_run, inclusive), per job. (A forked worker's
# profile also holds what its parent did before the fork: whole-process
# totals would count the enqueue twice.)
counts() { # TQ ENGINE OUT: "ENQUEUE WORKER" instructions per job
    local out=$3
    mkdir -p "$out"
    "$1" init --db "$url" >/dev/null
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$out/cg.%p" \
        "$1" bench --db "$url" --jobs "$jobs" --workers 1 --latency-jobs 0 >"$out/log" 2>&1
    drop "$url"
    local f enq=0 run=0 v
    for f in "$out"/cg.*; do
        callgrind_annotate --inclusive=yes "$f" >"$f.txt" 2>/dev/null
        v=$(awk '/:tq_job_enqueue_batch / { gsub(",", "", $1); print $1; exit }' "$f.txt")
        [ -n "$v" ] && [ "$v" -gt "$enq" ] && enq=$v
        v=$(awk '/:tq_worker_run / { gsub(",", "", $1); print $1; exit }' "$f.txt")
        [ -n "$v" ] && [ "$v" -gt "$run" ] && run=$v
    done
    [ "$enq" -gt 0 ] && [ "$run" -gt 0 ] ||
        { echo "bench/regress.sh: no enqueue or worker found under callgrind ($out)" >&2; exit 1; }
    awk -v n="$jobs" -v e="$enq" -v r="$run" 'BEGIN { printf "%.0f %.0f\n", e / n, r / n }'
}
printf '\n%-9s %-9s %13s %13s %7s\n' engine process "$rev" this ratio
for e in $engines; do
    store "$e"
    read -r oe ow <<<"$(counts "$old" "$e" "$dir/cg-old-$e")"
    store "$e"
    read -r ne nw <<<"$(counts "$new" "$e" "$dir/cg-new-$e")"
    [ -n "$ow" ] && [ -n "$nw" ] || exit 1
    printf '%-9s %-9s %13s %13s %7.3f\n' "$e" enqueue "$oe" "$ne" "$(jq -n "$ne / $oe")"
    printf '%-9s %-9s %13s %13s %7.3f\n' "$e" worker "$ow" "$nw" "$(jq -n "$nw / $ow")"
done
echo "(instructions per job, callgrind, $jobs jobs, 1 worker)"
