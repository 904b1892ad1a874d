# shellcheck shell=bash disable=SC2034 # sets variables for the scripts that source it
# bench/lib.sh - what the bench scripts share, sourced by them after
# `set -euo pipefail`: their option loop, the build they run, their scratch
# directory and a throwaway PostgreSQL cluster.
#
# bench_name is the script's name in messages, bench_root the checkout the
# scripts stand in.
bench_name=$(basename "$0")
bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# bench_options SPEC... -- "$@": the script's options. A SPEC is
# --option=VAR (VAR takes the value after the option) or --option=VAR=VALUE
# (a flag: VAR is set to VALUE); --engine both stands for "sqlite postgres".
# -h/--help prints the script's opening comment; any other option is
# refused. What follows the options is left in
# the array bench_args.
bench_options() {
    local -A value=() flag=()
    local spec opt var
    while [ "$1" != -- ]; do
        spec=$1
        shift
        opt=${spec%%=*} var=${spec#*=}
        if [[ $var == *=* ]]; then flag[$opt]=$var; else value[$opt]=$var; fi
    done
    shift
    while [ $# -gt 0 ]; do
        case $1 in
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*)
            if [ -n "${value[$1]+set}" ]; then
                if [ "$1" = --engine ] && [ "$2" = both ]; then
                    printf -v "${value[$1]}" '%s' "sqlite postgres"
                else
                    printf -v "${value[$1]}" '%s' "$2"
                fi
                shift 2
            elif [ -n "${flag[$1]+set}" ]; then
                printf -v "${flag[$1]%%=*}" '%s' "${flag[$1]#*=}"
                shift
            else
                echo "$bench_name: unknown option $1 (see --help)" >&2
                exit 2
            fi ;;
        *) break ;;
        esac
    done
    bench_args=("$@")
}

# bench_build [BUILD_DIR]: sets build (absolute; default build) and tq, the
# binary the script runs, which must have been built.
bench_build() {
    build=$(cd "${1:-build}" && pwd)
    tq=$build/tq
    [ -x "$tq" ] || { echo "$bench_name: no $tq (make build)" >&2; exit 2; }
}

# bench_scratch WHAT: sets dir to a new directory /tmp/tq-WHAT.XXXXXX that
# the cluster's server may enter. The script removes it on exit.
bench_scratch() {
    dir=$(mktemp -d "/tmp/tq-$1.XXXXXX")
    chmod 755 "$dir"
}

# bench_cluster_start [MAX_CONNECTIONS]: a throwaway cluster in $dir/pg
# (tests/pg/cluster.sh: unix socket only, fsync on); sets pg to its URL and
# pg_started to 1. bench_cluster_stop, in the script's cleanup, stops it if
# it was started.
pg_started=0
bench_cluster_start() {
    env ${1:+TQ_PG_MAX_CONNECTIONS=$1} \
        bash "$bench_root/tests/pg/cluster.sh" start "$dir/pg" >/dev/null
    pg_started=1
    pg="postgresql:///postgres?host=$dir/pg&user=tq"
}
bench_cluster_stop() {
    [ $pg_started = 0 ] || bash "$bench_root/tests/pg/cluster.sh" stop "$dir/pg" >/dev/null 2>&1 || true
}

# The median of the numbers on stdin (the mean of the middle two of an even
# count).
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
