# I/O errors (SQLite), injected with libfiu's POSIX preload: the store's
# writes (pwrite) and syncs (fdatasync, fsync) fail at random with EIO or
# ENOSPC, in producers and in workers. Every enqueue either succeeds, or
# says why in one line and exits 1 having stored nothing, or exits 3 saying
# it may or may not have stored its jobs; a worker either carries on or exits 1
# with a last line that names the error; afterwards the store passes
# PRAGMA integrity_check, every acknowledged enqueue is in it, and the
# history checker (tests/history.c) passes once a clean worker finished.
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = sqlite ] || fail "this test is for the SQLite engine"
Q=io
"$TQ" init >/dev/null
"$TQ" queue $Q --lease 2s --backoff 0 --max-attempts 100 >/dev/null

# expect_clean_failure WHAT RC ERRFILE: exit 1 (or 3, an enqueue's outcome
# unknown, when it says so), and a last line naming an I/O error or a full
# disk (and no sanitizer report, crash or abort).
expect_clean_failure() {
    [ "$2" = 1 ] || { [ "$2" = 3 ] && grep -q "may or may not be stored" "$3"; } ||
        fail "$1 exited $2: $(cat "$3")"
    tail -1 "$3" | grep -qE "disk I/O error|disk full" || fail "$1: unclear last line: $(cat "$3")"
    ! grep -qE "Sanitizer|runtime error|Assertion" "$3" || fail "$1: $(cat "$3")"
}

# 0. Syncs alone failing, often: a commit's frames are then written but not
# synced, and a later recovery of the WAL could bring them back. Every
# enqueue that exits 1 (failed) must have stored nothing; those that exit 3
# (outcome unknown) are counted. (A build that said "failed" for such
# commits stored some of them after all.)
ok=0 failed=0 unknown=0
for i in $(seq 1 120); do
    set +e
    FAULT_POINTS="sync/fdatasync sync/fsync" faulty 0.15 5 \
        "$TQ" enqueue --queue sync "sync $i" >"$T/out" 2>"$T/err"
    rc=$?
    set -e
    case $rc in
    0) ok=$((ok + 1)) ;;
    1) failed=$((failed + 1)); echo "sync $i" >>"$T/failed" ;;
    3) unknown=$((unknown + 1)) ;;
    *) fail "enqueue $i exited $rc: $(cat "$T/err")" ;;
    esac
    [ $rc = 0 ] || expect_clean_failure "enqueue $i" $rc "$T/err"
done
# Opened afresh (the WAL recovered, where it was left), the store holds
# none of the failed ones.
sqlite3 "$TQ_DB" "SELECT CAST(payload AS TEXT) FROM tq_jobs WHERE queue = 'sync'" |
    sort >"$T/sync.stored"
sort "$T/failed" >"$T/failed.sorted"
stored_anyway=$(comm -12 "$T/failed.sorted" "$T/sync.stored" | wc -l)
echo "enqueues with failing syncs: $ok stored, $failed failed, $unknown unknown"
expect_eq "$stored_anyway" 0 "enqueues that said they failed but were stored"
[ "$failed" -gt 0 ] || fail "no enqueue failed: the faults did not reach the commits"
expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check after the syncs"

# 1. Producers: 200 enqueues (single jobs and batches of 20), each under
# faults. The id or ids each printed on success are recorded.
ok=0 bad=0
for i in $(seq 1 200); do
    e=$((i % 2 ? 5 : 28))
    set +e
    if [ $((i % 3)) = 0 ]; then
        seq "$((i * 100))" "$((i * 100 + 19))" |
            faulty 0.05 $e "$TQ" enqueue --lines --json --queue $Q >"$T/out" 2>"$T/err"
    else
        faulty 0.05 $e "$TQ" enqueue --json --queue $Q "$((i * 100))" >"$T/out" 2>"$T/err"
    fi
    rc=$?
    set -e
    if [ $rc = 0 ]; then # {"id": ID} or {"count": N, "ids": [...]}
        jq -r '.ids[]? // .id' "$T/out" >>"$T/acked"
        ok=$((ok + 1))
    else
        expect_clean_failure "enqueue $i" $rc "$T/err"
        expect_eq "$(wc -l <"$T/err")" 1 "lines of enqueue $i's message"
        bad=$((bad + 1))
    fi
done
echo "enqueues under faults: $ok succeeded, $bad failed cleanly"
[ $ok -gt 0 ] && [ $bad -gt 0 ] || fail "expected both outcomes, got $ok ok and $bad failed"
expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check after the producers"

# 2. Workers under faults, one after another under one name (each start
# puts back what the last one left running), each until it drains or fails.
carried=0 stopped=0
for i in $(seq 1 12); do
    set +e
    # (The handler sheds the preload: the faults are tq's, and a sanitizer
    # runtime loaded into every handler would only slow the test down.)
    faulty 0.004 $((i % 2 ? 5 : 28)) "$TQ" work --queue $Q --name fw --concurrency 2 --drain \
        --quiet -- env -u LD_PRELOAD -u FIU_ENABLE "$TQ_HISTORY" run "$T/runs" fw 2>"$T/fw.err"
    rc=$?
    set -e
    # Its handlers are over (a stopping worker ends them): a run of it with
    # no finish line ended here, and the next worker may rerun the job at once.
    "$TQ_HISTORY" kill "$T/runs" fw
    if [ $rc = 0 ]; then
        carried=$((carried + 1))
    else
        expect_clean_failure "worker $i" $rc "$T/fw.err"
        stopped=$((stopped + 1))
    fi
    expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check after worker $i"
done
echo "workers under faults: $carried drained, $stopped stopped on an error"

# 3. A clean worker finishes the rest; then every acknowledged job is done,
# and the runs pass the history checker (fw was cut off by its errors).
"$TQ" work --queue $Q --name clean --concurrency 2 --drain --quiet -- \
    "$TQ_HISTORY" run "$T/runs" clean
expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check at the end"
sql "SELECT id FROM $JOBS WHERE queue = '$Q' AND state = 'done'" | sort >"$T/done"
sort "$T/acked" >"$T/acked.sorted"
expect_eq "$(comm -23 "$T/acked.sorted" "$T/done" | wc -l)" 0 "acknowledged jobs not done"
history_check $Q "$T/runs" --lease 2000 --faulted fw --all-done
echo ok
