# Disk full (SQLite): the store lives on a 2 MiB tmpfs that a ballast file
# fills up. An enqueue then fails cleanly, saying "disk full", one line and
# exit 1; the store stays readable and intact; the workers running then say
# so (once each time they find it full) and wait: one stopped meanwhile
# (SIGTERM) leaves after its grace time with its results unsaved (their
# jobs come back by lease), the other carries on when space comes back;
# every job ends done, and the history checker passes. Without the right to mount (or with TQ_TEST_NO_MOUNT set),
# ENOSPC is injected into the enqueues with libfiu instead (the workers are
# then not tested).
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = sqlite ] || fail "this test is for the SQLite engine"
mkdir "$T/tiny"
if [ -z "${TQ_TEST_NO_MOUNT:-}" ] && mount -t tmpfs -o size=2m tmpfs "$T/tiny" 2>/dev/null; then
    mounted=1
    cleanup_hook() { umount "$T/tiny"; }
    export TQ_DB="$T/tiny/store.db"
    # All but 256 KiB: a few enqueues go through before one finds no room.
    fill() {
        local avail
        avail=$(df --output=avail -B1 "$T/tiny" | tail -1)
        fallocate -l $((avail - 262144)) "$T/tiny/ballast"
    }
    unfill() { rm -f "$T/tiny/ballast"; }
    enqueue() { "$TQ" enqueue --queue "$1" -; }
else
    mounted=0
    echo "no tmpfs mount here: injecting ENOSPC with libfiu"
    full=0
    fill() { full=1; }
    unfill() { full=0; }
    enqueue() {
        if [ $full = 1 ]; then
            faulty 1 28 "$TQ" enqueue --queue "$1" -
        else
            "$TQ" enqueue --queue "$1" -
        fi
    }
fi
"$TQ" init >/dev/null
"$TQ" queue d --lease 30s >/dev/null
"$TQ" queue t --lease 3s >/dev/null
# Two workers, each with its own queue, with jobs of 0.3 to 0.6 s (d) and
# 1.5 to 2.5 s (t), so that their results come back while the disk is full
# (the WAL only grows here: a 2 MiB disk never reaches a checkpoint, so
# every commit needs room).
bg "$TQ" work --queue d --name dw --concurrency 2 --quiet -- \
    "$TQ_HISTORY" run "$T/runs.d" dw 300-600 2>"$T/dw.log"
dw=$BG
bg "$TQ" work --queue t --name tw --concurrency 2 --grace 1s --quiet -- \
    "$TQ_HISTORY" run "$T/runs.t" tw 1500-2500 2>"$T/tw.log"
tw=$BG
for q in d t; do
    wait_for 30 sh -c "'$TQ' workers --json | jq -e '.[] | select(.name == \"${q}w\" and .status == \"alive\")' >/dev/null"
done
ids=()
for q in d t d t d t d t; do
    ids+=("$(echo "job for $q" | enqueue $q)")
done

# Fill the disk, then enqueue 32 KiB payloads until one fails.
fill
failed=0
for i in $(seq 1 200); do
    set +e
    head -c 24000 /dev/urandom | base64 -w0 | enqueue d >"$T/out" 2>"$T/err"
    rc=$?
    set -e
    if [ $rc = 0 ]; then
        ids+=("$(cat "$T/out")")
        continue
    fi
    expect_eq "$rc" 1 "exit code of an enqueue on a full disk"
    expect_eq "$(wc -l <"$T/err")" 1 "lines of its message"
    grep -q "disk full" "$T/err" || fail "not a disk-full message: $(cat "$T/err")"
    failed=1
    break
done
expect_eq "$failed" 1 "an enqueue failed on the full disk"
echo "full after ${#ids[@]} enqueue(s): $(cat "$T/err")"

# Still readable and intact while full.
"$TQ" stats --json >/dev/null || fail "stats on a full disk"
expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check while full"

if [ $mounted = 1 ]; then
    # Both workers hit the full disk with their results, and say so once.
    for q in d t; do
        wait_for 30 grep -q "disk full" "$T/${q}w.log"
    done
    # One stopped while full leaves after its grace time.
    kill -TERM "$tw"
    wait_for 30 sh -c "! kill -0 $tw 2>/dev/null"
    wait_rc "$tw"
    expect_eq "$RC" 0 "exit of the worker stopped on a full disk"
    grep -q "stopping with [0-9]* result(s) unsaved (the disk is full)" "$T/tw.log" ||
        fail "no word of the unsaved results: $(cat "$T/tw.log")"
fi

# Room again: everything acknowledged runs, new work is taken.
unfill
ids+=("$(echo after | enqueue d)")
"$TQ" work --queue t --name t2 --drain --quiet -- "$TQ_HISTORY" run "$T/runs.t" t2
wait_for 60 sh -c "[ \$('$TQ' stats --json | jq '.counts.ready + .counts.running') = 0 ]"
kill -TERM "$dw"
wait_rc "$dw"
expect_eq "$RC" 0 "worker exit"
if [ $mounted = 1 ]; then
    # Said once for each time it found the disk full, not at every retry:
    # as often as it found room again (a commit can squeeze into space
    # freed meanwhile, and the next one find none, before the ballast goes).
    full_lines=$(grep -c "disk full" "$T/dw.log")
    room_lines=$(grep -c "the store has room again" "$T/dw.log")
    [ "$full_lines" -ge 1 ] || fail "no word of the full disk: $(cat "$T/dw.log")"
    expect_eq "$room_lines" "$full_lines" "worker lines about the full disk and about room again"
fi
expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check after"
for id in "${ids[@]}"; do
    expect_eq "$(job "$id" state)" done "job $id"
done
history_check d "$T/runs.d" --all-done
history_check t "$T/runs.t" --all-done --faulted tw --lease 3000
echo "ok (tmpfs: $mounted)"
