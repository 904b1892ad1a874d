# lib.sh - helpers for the command-line tests. Each test script sources it,
# gets a scratch directory $T with a store $TQ_DB, and the tool as $TQ.
# Background processes started with `bg` are killed (by PID) on exit.
set -euo pipefail
: "${TQ:?set TQ to the tq binary}"
mkdir -p "${TQ_TEST_TMP:-/tmp}"
T=$(mktemp -d "${TQ_TEST_TMP:-/tmp}/t.XXXXXX")
chmod 755 "$T"
ENGINE=${TQ_TEST_ENGINE:-sqlite}
if [ "$ENGINE" = postgres ]; then
    : "${TQ_TEST_PG_URL:?set TQ_TEST_PG_URL for the postgres engine}"
    SCHEMA="t_$(basename "$T" | tr -dc 'a-z0-9' | head -c 12)_$$"
    # tq through the pooler when the tests run behind one; psql always direct
    export TQ_DB="${TQ_TEST_PG_POOL_URL:-$TQ_TEST_PG_URL}&tq_schema=$SCHEMA"
    JOBS="$SCHEMA.jobs"
else
    export TQ_DB="$T/store.db"
    JOBS=tq_jobs
fi
BG_PIDS=()

# Runs SQL on the store, as any other program would: with a busy timeout,
# since a worker may hold the write lock for a moment.
sql() {
    if [ "$ENGINE" = postgres ]; then
        psql -X -q -v ON_ERROR_STOP=1 -At "$TQ_TEST_PG_URL" -c "$1"
    else
        sqlite3 "$TQ_DB" ".timeout 10000" "$1"
    fi
}

# payload_sql TEXT: TEXT as a payload value in SQL (bytea on PostgreSQL).
payload_sql() {
    if [ "$ENGINE" = postgres ]; then
        echo "convert_to('$1', 'UTF8')"
    else
        echo "'$1'"
    fi
}

# plain_insert QUEUE TEXT COMMIT|ROLLBACK: docs/sql.md's producer INSERT,
# inside a transaction that commits or rolls back.
plain_insert() {
    sql "BEGIN; INSERT INTO $JOBS (queue, payload) VALUES ('$1', $(payload_sql "$2")); $3;"
}

# ids_of QUEUE PAYLOAD...: enqueues a job of each PAYLOAD into QUEUE, in
# order, and prints their ids on one line.
ids_of() {
    local queue=$1 p id ids=()
    shift
    for p in "$@"; do
        id=$("$TQ" enqueue --queue "$queue" --json "$p" | jq -r .id) || return
        ids+=("$id")
    done
    echo "${ids[*]}"
}

cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do
        kill -CONT "$p" 2>/dev/null || true
        kill -KILL "$p" 2>/dev/null || true
    done
    if [ -f "$T/handler.pids" ]; then
        while read -r p; do kill -KILL -- "-$p" 2>/dev/null || true; done <"$T/handler.pids"
    fi
    if [ "$ENGINE" = postgres ]; then
        sql "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true
    fi
    # A test's own last step (say, unmounting), once its processes are gone.
    if declare -F cleanup_hook >/dev/null; then cleanup_hook || true; fi
    [ -n "${KEEP:-}" ] || rm -rf "$T" # KEEP=1: left to read (logs, runs)
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in "$T"/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
    done
    exit 1
}

expect_eq() { # ACTUAL EXPECTED WHAT
    [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
}

# expect_exit CODE CMD...: runs CMD, output in $T/out and $T/err.
expect_exit() {
    local want=$1 got
    shift
    set +e
    "$@" >"$T/out" 2>"$T/err"
    got=$?
    set -e
    [ "$got" = "$want" ] || fail "'$*' exited $got, expected $want; stderr: $(cat "$T/err")"
}

# Starts a command in the background, remembering its PID in $BG.
bg() {
    "$@" &
    BG=$!
    BG_PIDS+=("$BG")
}

# wait_for SECONDS CMD...: polls CMD every 50 ms until it succeeds.
wait_for() {
    local limit=$1 i=0
    shift
    while ! "$@" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt $((limit * 20)) ] || fail "timed out waiting for: $*"
        sleep 0.05
    done
}

# Waits for a background PID and returns its exit code in $RC. The PID is
# forgotten: once reaped it may name someone else's process.
wait_rc() {
    set +e
    wait "$1"
    RC=$?
    set -e
    local i
    for i in "${!BG_PIDS[@]}"; do
        [ "${BG_PIDS[$i]}" != "$1" ] || unset 'BG_PIDS[i]'
    done
}

# wait_ok WHAT PID...: waits for each PID (wait_rc); each must exit 0.
wait_ok() {
    local what=$1 p
    shift
    for p in "$@"; do
        wait_rc "$p"
        expect_eq "$RC" 0 "exit code of $what"
    done
}

# drained SECONDS QUEUE: waits until QUEUE has no job ready or running.
drained() {
    wait_for "$1" sh -c "[ \$('$TQ' stats --queue $2 --json | jq '.counts.ready + .counts.running') = 0 ]"
}

# stop_ok PID...: SIGTERM each worker; each must exit 0.
stop_ok() {
    local p
    for p in "$@"; do
        kill -TERM "$p"
        wait_rc "$p"
        expect_eq "$RC" 0 "exit code of worker $p after SIGTERM"
    done
}

# kill_rounds N START [CHECK]: N rounds in which, after 0.1 to 0.3 s, one
# of two workers w1 and w2 (each started by `START NAME`, which records its
# PID in the caller's associative array wpid) is killed with SIGKILL,
# reaped, CHECK run with the round's number (when given), and started
# again.
kill_rounds() {
    local r v
    for r in $(seq 1 "$1"); do
        sleep "0.$((RANDOM % 3 + 1))"
        v=w$((RANDOM % 2 + 1))
        kill -KILL "${wpid[$v]}" 2>/dev/null || true
        wait_rc "${wpid[$v]}"
        [ -z "${3:-}" ] || "$3" "$r"
        "$2" "$v"
    done
}

# runs_once FILE FIELD N: FILE logs N handler runs, a line each, the job's
# id in field FIELD (cut -d' '), and no job ran twice.
runs_once() {
    expect_eq "$(lines "$1")" "$3" "handler runs"
    expect_eq "$(cut -d' ' -f"$2" "$1" | sort | uniq -d | wc -l)" 0 "jobs run twice"
}

# freeze PID: SIGSTOP a worker at a moment it holds no SQLite write
# transaction: one frozen inside BEGIN IMMEDIATE would keep every other
# process of the store waiting for the lock (a PostgreSQL worker holds row
# locks only inside single statements).
freeze() {
    local i
    for i in $(seq 1 100); do
        kill -STOP "$1"
        if [ "$ENGINE" = postgres ] ||
            sqlite3 "$TQ_DB" ".timeout 0" "BEGIN IMMEDIATE; ROLLBACK;" 2>/dev/null; then
            return 0
        fi
        kill -CONT "$1"
        sleep 0.02
    done
    fail "could not freeze $1 outside a write transaction"
}

job() { # ID FIELD: one field of `tq show ID --json`
    "$TQ" show "$1" --json | jq -r ".$2"
}

lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# The whole store as text: equal fingerprints mean nothing changed.
fingerprint() {
    if [ "$ENGINE" = postgres ]; then
        pg_dump --no-owner --schema="$SCHEMA" "$TQ_TEST_PG_URL" |
            grep -v -e '^--' -e '^\\restrict' -e '^\\unrestrict' |
            sha256sum | cut -d' ' -f1
    else
        sqlite3 "$TQ_DB" .dump | sha256sum | cut -d' ' -f1
    fi
}

# A handler script: sh with the given body, recording its PID so cleanup can
# end its process group.
handler() { # NAME BODY
    printf '#!/bin/sh\necho $$ >> "%s/handler.pids"\n%s\n' "$T" "$2" >"$T/$1"
    chmod +x "$T/$1"
}

# history_check QUEUE LOG [--lease MS] [--faulted WORKER]... [--all-done]:
# the history checker (tests/history.c) over the runs its handlers logged
# in LOG and the rows of QUEUE; prints its summary, fails the test on any
# violation.
history_check() {
    local queue=$1 log=$2
    shift 2
    sql "SELECT id, state, claims FROM $JOBS WHERE queue = '$queue'" | tr '|' ' ' >"$T/history.rows"
    "$TQ_HISTORY" check "$log" "$T/history.rows" "$@" || fail "the history checker found violations"
}

# faulty P ERRNO CMD...: runs CMD with each of its writes (pwrite) and
# syncs (fdatasync, fsync) failing with probability P (0 to 1) and errno
# ERRNO (5 EIO, 28 ENOSPC), by libfiu's POSIX preload library; only those
# of $FAULT_POINTS when set (say "sync/fdatasync sync/fsync"). This is what
# fiu-run -x does, written out so that a sanitized tq gets its runtime
# loaded first (and LeakSanitizer ignores the preload library's own
# allocation).
faulty() {
    local p=$1 e=$2 point enable="" fiu=/usr/lib/fiu asan
    shift 2
    [ -e $fiu/fiu_posix_preload.so ] || fail "libfiu is missing: scripts/deps.sh installs fiu-utils"
    asan=$(ldd "$TQ" | awk '/libasan/ { print $3 }')
    echo "leak:fiu_run_preload.so" >"$T/lsan.supp"
    for point in ${FAULT_POINTS:-rw/pwrite sync/fdatasync sync/fsync}; do
        enable+="enable_random name=posix/io/$point,probability=$p,failinfo=$e"$'\n'
    done
    # (symbolize=0: the suppression matches the module; symbolizing every
    # exit's stacks to match it would cost a third of a second each.)
    FIU_ENABLE=$enable FIU_CTRL_FIFO="" ASAN_OPTIONS="${ASAN_OPTIONS:-}:symbolize=0" \
        LSAN_OPTIONS="suppressions=$T/lsan.supp:print_suppressions=0" \
        LD_PRELOAD="$asan $fiu/fiu_run_preload.so $fiu/fiu_posix_preload.so" "$@"
}
