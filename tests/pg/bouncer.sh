#!/usr/bin/env bash
# A throwaway PgBouncer in front of the throwaway cluster (cluster.sh), as a
# fleet runs it: transaction pooling, a pool far smaller than the clients.
# `start DIR PGDIR` listens on a unix socket in DIR only (port 6432, no
# TCP) and pools sessions to the server whose socket is in PGDIR; `stop DIR`
# stops it and removes DIR. TQ_PGB_POOL (default 8) is the pool: server
# sessions per database and user. As root, PgBouncer runs as the postgres
# user (it refuses root). The URL it prints is for tq: the pooled one, with
# tq_pool=transaction and tq_listen naming the server's own socket. Its
# server sessions run in the time zone Pacific/Chatham (UTC+12:45 or
# +13:45), where tq sets none: what tq stores and shows must not depend on
# the session's zone.
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
command -v pgbouncer >/dev/null || { echo "pgbouncer not installed (make deps)" >&2; exit 1; }
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
stop() {
    [ -f "$dir/pgbouncer.pid" ] || return 0
    local pid
    pid=$(cat "$dir/pgbouncer.pid")
    kill -INT "$pid" 2>/dev/null || return 0
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}
case $cmd in
start)
    pgdir=${3:?PostgreSQL socket directory}
    stop
    rm -rf "$dir"
    mkdir -p "$dir"
    echo '"tq" ""' >"$dir/users.txt"
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=$pgdir port=5432 timezone=Pacific/Chatham

[pgbouncer]
listen_addr =
listen_port = 6432
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/users.txt
admin_users = tq
pool_mode = transaction
default_pool_size = ${TQ_PGB_POOL:-8}
max_client_conn = 2000
max_db_connections = ${TQ_PGB_POOL:-8}
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
log_connections = 0
log_disconnections = 0
EOF
    [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
    as_pg pgbouncer -d "$dir/pgbouncer.ini" || { cat "$dir/pgbouncer.log" >&2; exit 1; }
    for _ in $(seq 100); do
        [ -S "$dir/.s.PGSQL.6432" ] && break
        sleep 0.1
    done
    [ -S "$dir/.s.PGSQL.6432" ] || { cat "$dir/pgbouncer.log" >&2; exit 1; }
    echo "PgBouncer running: postgresql:///postgres?host=$dir&port=6432&user=tq"
    ;;
stop)
    stop
    rm -rf "$dir"
    ;;
*)
    echo "usage: bouncer.sh start DIR PGDIR | stop DIR" >&2
    exit 2
    ;;
esac
