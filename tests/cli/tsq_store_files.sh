# The store's files under a worker or a command, as an operator may leave
# them (SQLite only):
#  - deleted, or replaced by another store, while a worker runs: the worker
#    notices (it would otherwise go on with a file nobody else sees) and
#    exits with one line;
#  - not writable: tq init says so instead of "store ready", and a -shm
#    file left unwritable (after the store's own mode was fixed) is named
#    in the message.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

# Deleted, and a new store made under the same name.
bg "$TQ" work --queue d -- true 2>"$T/w1.log"
w=$BG
wait_for 10 grep -q started "$T/w1.log"
rm -f "$TQ_DB" "$TQ_DB-wal" "$TQ_DB-shm"
"$TQ" init >/dev/null
id=$("$TQ" enqueue --queue d x)
wait_for 10 grep -q "replaced by another file while in use" "$T/w1.log"
wait_rc "$w"
expect_eq "$RC" 1 "exit status of a worker whose store was replaced"
expect_eq "$(job "$id" state)" ready "the job in the new store"

# Deleted, nothing in its place.
bg "$TQ" work --queue d -- true 2>"$T/w2.log"
w=$BG
wait_for 10 grep -q started "$T/w2.log"
rm -f "$TQ_DB" "$TQ_DB-wal" "$TQ_DB-shm"
wait_for 10 grep -q "was deleted while in use" "$T/w2.log"
wait_rc "$w"
expect_eq "$RC" 1 "exit status of a worker whose store was deleted"

# Not writable (root writes anything: the checks run as nobody).
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -m 777 "$T/ro"
    cp "$TQ" "$T/ro/tq"
    chmod 755 "$T/ro/tq"
    as_nobody() { su nobody -s /bin/bash -c "cd '$T/ro' && TQ_DB='$T/ro/s.db' $*"; }
    as_nobody ./tq init >/dev/null
    as_nobody chmod 444 s.db
    set +e
    as_nobody ./tq init >"$T/out" 2>"$T/err"
    rc=$?
    set -e
    [ "$rc" != 0 ] || fail "tq init succeeded on a store it cannot write: $(cat "$T/out")"
    grep -q "is read-only" "$T/err" || fail "tq init: $(cat "$T/err")"
    grep -q "store ready" "$T/out" && fail "tq init said the store is ready"
    # A reader leaves -shm and -wal with the store's mode; fixing the
    # store's own mode is then not enough, and the message says why.
    as_nobody ./tq stats >/dev/null
    as_nobody chmod 644 s.db
    [ -e "$T/ro/s.db-shm" ] || fail "no -shm file was left"
    set +e
    as_nobody ./tq enqueue x >"$T/out" 2>"$T/err"
    rc=$?
    set -e
    [ "$rc" != 0 ] || fail "enqueue succeeded with an unwritable -shm"
    grep -q "s.db-shm' is not writable" "$T/err" || fail "the message does not name the file: $(cat "$T/err")"
    as_nobody rm s.db-shm s.db-wal
    as_nobody ./tq enqueue x >/dev/null || fail "enqueue after the -shm was removed"
fi
echo ok
