#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: `start DIR` runs initdb in
# DIR and starts a server listening on a unix socket in DIR only (no TCP),
# fsync on; `stop DIR` stops it and removes DIR. CTest runs these as the
# setup and cleanup fixtures of every postgres-labelled test, so the server
# is stopped also when tests fail. As root, the server runs as the postgres
# user (initdb refuses root). TQ_PG_MAX_CONNECTIONS (default 200) sets its
# max_connections (bench/idle.sh runs more workers than that).
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$bindir/pg_ctl" ] || { echo "PostgreSQL server not installed (make deps)" >&2; exit 1; }
opts="-c listen_addresses='' -k $dir -p 5432 -c fsync=on"
opts+=" -c max_connections=${TQ_PG_MAX_CONNECTIONS:-200}"
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
stop() {
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 ||
            as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
}
case $cmd in
start)
    stop # a cluster left by an interrupted run
    rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_pg "$bindir/initdb" -D "$dir/data" -U tq --auth=trust -E UTF8 --no-locale \
        >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "$opts" start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "PostgreSQL running: postgresql:///postgres?host=$dir&user=tq"
    ;;
stop)
    stop
    # A backend that crashed put every session through recovery ("the
    # database system is in recovery mode" in other tests): its log is
    # kept beside the cluster as DIR-crash.log, and the lines said.
    if [ -f "$dir/server.log" ] &&
        grep -q "terminated by signal" "$dir/server.log"; then
        cp "$dir/server.log" "$dir-crash.log"
        echo "cluster.sh: a server process crashed during the run (log: $dir-crash.log):" >&2
        grep -B2 -A6 "terminated by signal" "$dir/server.log" | head -60 >&2
    fi
    rm -rf "$dir"
    ;;
restart) # a crash and restart: every connection is cut, recovery runs
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 60 restart \
        -o "$opts" >/dev/null
    ;;
*)
    echo "usage: cluster.sh start|stop|restart DIR" >&2
    exit 2
    ;;
esac
