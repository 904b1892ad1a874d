# Disk full (SQLite): the store lives on a 2 MiB tmpfs that a ballast file
# fills up. An enqueue then fails cleanly, saying "disk full", one line and
# exit 1; the store stays readable and intact; the worker running meanwhile
# rides it out (saying so once), and work resumes when space comes back.
# Without the right to mount (or with TQ_TEST_NO_MOUNT set), ENOSPC is
# injected with libfiu instead.
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = sqlite ] || fail "this test is for the SQLite engine"
Q=d
mkdir "$T/tiny"
if [ -z "${TQ_TEST_NO_MOUNT:-}" ] && mount -t tmpfs -o size=2m tmpfs "$T/tiny" 2>/dev/null; then
    mounted=1
    trap 'umount "$T/tiny" 2>/dev/null || true; cleanup' EXIT
    export TQ_DB="$T/tiny/store.db"
    # All but 256 KiB: a few enqueues go through before one finds no room.
    fill() {
        local avail
        avail=$(df --output=avail -B1 "$T/tiny" | tail -1)
        fallocate -l $((avail - 262144)) "$T/tiny/ballast"
    }
    unfill() { rm -f "$T/tiny/ballast"; }
    enqueue() { "$TQ" enqueue --queue $Q -; }
else
    mounted=0
    echo "no tmpfs mount here: injecting ENOSPC with libfiu"
    full=0
    fill() { full=1; }
    unfill() { full=0; }
    enqueue() {
        if [ $full = 1 ]; then
            faulty 1 28 "$TQ" enqueue --queue $Q -
        else
            "$TQ" enqueue --queue $Q -
        fi
    }
fi
"$TQ" init >/dev/null
"$TQ" queue $Q --lease 30s >/dev/null
# Jobs of 0.2 to 0.5 s, so that results come back while the disk is full.
bg "$TQ" work --queue $Q --name dw --concurrency 2 --quiet -- \
    "$TQ_HISTORY" run "$T/runs" dw 200-500 2>"$T/dw.log"
w=$BG
# Filled only once the worker has the store open: in WAL mode the first
# connection creates the shared-memory file, which needs room (while one
# is open, others read without writing anything).
wait_for 30 sh -c "'$TQ' workers --json | jq -e '.[] | select(.name == \"dw\" and .status == \"alive\")' >/dev/null"

# Fill the disk, then enqueue 32 KiB payloads until one fails.
fill
ids=()
failed=0
for i in $(seq 1 200); do
    set +e
    head -c 24000 /dev/urandom | base64 -w0 | enqueue >"$T/out" 2>"$T/err"
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
"$TQ" stats --queue $Q --json >/dev/null || fail "stats on a full disk"
expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check while full"

# Room again: everything acknowledged runs, new work is taken.
unfill
id=$(echo after | enqueue) || fail "enqueue once there is room: $(cat "$T/err")"
ids+=("$id")
wait_for 60 sh -c "[ \$('$TQ' stats --queue $Q --json | jq '.counts.ready + .counts.running') = 0 ]"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "worker exit"
if grep -q "disk full" "$T/dw.log"; then
    expect_eq "$(grep -c "disk full" "$T/dw.log")" 1 "worker lines about the full disk"
    grep -q "the store has room again" "$T/dw.log" || fail "no recovery line: $(cat "$T/dw.log")"
fi
expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check after"
for id in "${ids[@]}"; do
    expect_eq "$(job "$id" state)" done "job $id"
done
history_check $Q "$T/runs" --all-done
echo "ok (tmpfs: $mounted; worker: $(grep -c "disk full" "$T/dw.log") disk-full line)"
