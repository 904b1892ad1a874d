# lib.sh - helpers for the command-line tests. Each test script sources it,
# gets a scratch directory $T with a store $TQ_DB, and the tool as $TQ.
# Background processes started with `bg` are killed (by PID) on exit.
set -euo pipefail
: "${TQ:?set TQ to the tq binary}"
mkdir -p "${TQ_TEST_TMP:-/tmp}"
T=$(mktemp -d "${TQ_TEST_TMP:-/tmp}/t.XXXXXX")
export TQ_DB="$T/store.db"
BG_PIDS=()

cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do
        kill -CONT "$p" 2>/dev/null || true
        kill -KILL "$p" 2>/dev/null || true
    done
    if [ -f "$T/handler.pids" ]; then
        while read -r p; do kill -KILL -- "-$p" 2>/dev/null || true; done <"$T/handler.pids"
    fi
    rm -rf "$T"
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

# Waits for a background PID and returns its exit code in $RC.
wait_rc() {
    set +e
    wait "$1"
    RC=$?
    set -e
}

job() { # ID FIELD: one field of `tq show ID --json`
    "$TQ" show "$1" --json | jq -r ".$2"
}

lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# The whole store as text: equal fingerprints mean nothing changed.
fingerprint() {
    sqlite3 "$TQ_DB" .dump | sha256sum | cut -d' ' -f1
}

# A handler script: sh with the given body, recording its PID so cleanup can
# end its process group.
handler() { # NAME BODY
    printf '#!/bin/sh\necho $$ >> "%s/handler.pids"\n%s\n' "$T" "$2" >"$T/$1"
    chmod +x "$T/$1"
}
