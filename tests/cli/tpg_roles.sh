# Least privilege on PostgreSQL: tq init --grant-producer / --grant-worker,
# tried with real roles that log in with a password. A producer enqueues
# (tq enqueue, a plain INSERT) and can do nothing else; a worker runs tq work
# end to end and cannot change settings or the schema; a grant to a role
# that does not exist changes nothing; no password reaches any output.
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = postgres ] || fail "this test needs TQ_TEST_ENGINE=postgres"
pgdir=$(sed -e 's/.*host=\([^&]*\).*/\1/' <<<"$TQ_TEST_PG_URL")
P=${SCHEMA}_producer
W=${SCHEMA}_worker
sql "CREATE ROLE $P LOGIN PASSWORD 'pw-s3cret-p'; CREATE ROLE $W LOGIN PASSWORD 'pw-s3cret-w'"
trap 'sql "DROP SCHEMA IF EXISTS $SCHEMA CASCADE; DROP ROLE IF EXISTS $P; DROP ROLE IF EXISTS $W" \
    >/dev/null 2>&1 || true; cleanup' EXIT
as() { echo "postgresql://$1:pw-s3cret-${2}@/postgres?host=$pgdir&tq_schema=$SCHEMA"; }
psql_as() { psql -X -q -v ON_ERROR_STOP=1 -At "postgresql://$1@/postgres?host=$pgdir" -c "$2"; }
# denied ROLE SQL: the statement fails for lack of privilege.
denied() {
    if psql_as "$1" "$2" >"$T/out" 2>"$T/err"; then fail "$1 may: $2"; fi
    grep -qE "permission denied|must be owner" "$T/err" || fail "$1: $2: $(cat "$T/err")"
}

# A role that does not exist: an error, and no schema.
expect_exit 1 "$TQ" init --grant-producer "$P" --grant-worker "nosuch_$SCHEMA"
grep -q "granting to role 'nosuch_$SCHEMA'.*does not exist" "$T/err" || fail "message: $(cat "$T/err")"
expect_eq "$(sql "SELECT count(*) FROM pg_namespace WHERE nspname = '$SCHEMA'")" 0 "schemas"

"$TQ" init --grant-producer "$P" --grant-worker "$W" >"$T/init.out"
grep -q "granted to $W: worker" "$T/init.out" || fail "init said: $(cat "$T/init.out")"
"$TQ" queue r --lease 10s >/dev/null

# The producer.
export TQ_DB
TQ_DB=$(as "$P" p)
id=$("$TQ" enqueue --queue r one 2>>"$T/all.err")
expect_eq "$("$TQ" enqueue --queue r --key k two 2>>"$T/all.err")" \
    "$("$TQ" enqueue --queue r --key k two-again 2>>"$T/all.err")" "a duplicate key's id"
seq 1 20 | "$TQ" enqueue --lines --queue r >/dev/null 2>>"$T/all.err"
psql_as "$P" "INSERT INTO $SCHEMA.jobs (queue, payload) VALUES ('r', convert_to('plain', 'UTF8'))"
psql_as "$P" "INSERT INTO $SCHEMA.jobs (queue, payload) VALUES ('new', convert_to('x', 'UTF8'))"
expect_eq "$(sql "SELECT count(*) FROM $SCHEMA.queues WHERE name = 'new'")" 1 "queue made by a plain INSERT"
denied "$P" "UPDATE $SCHEMA.jobs SET state = 'done'"
denied "$P" "DELETE FROM $SCHEMA.jobs"
denied "$P" "SELECT payload FROM $SCHEMA.jobs"
denied "$P" "UPDATE $SCHEMA.queues SET paused = true"
before=$(fingerprint)
expect_exit 1 "$TQ" work --queue r --drain -- true
grep -q "permission denied" "$T/err" || fail "producer worked: $(cat "$T/err")"
cat "$T/err" >>"$T/all.err"
expect_exit 1 "$TQ" queue r --lease 1s
cat "$T/err" >>"$T/all.err"
expect_eq "$(fingerprint)" "$before" "store after the producer's refused work and settings"

# The worker.
TQ_DB=$(as "$W" w)
"$TQ" work --queue r --name rw --drain --quiet -- "$TQ_HISTORY" run "$T/runs" rw 2>>"$T/all.err"
expect_eq "$(sql "SELECT count(*) FROM $SCHEMA.jobs WHERE queue = 'r' AND state <> 'done'")" 0 \
    "jobs the worker left"
history_check r "$T/runs" --all-done
expect_exit 1 "$TQ" queue r --lease 1s
cat "$T/err" >>"$T/all.err"
expect_exit 1 "$TQ" enqueue --queue r nope
cat "$T/err" >>"$T/all.err"
denied "$W" "DROP TABLE $SCHEMA.jobs"
denied "$W" "ALTER TABLE $SCHEMA.jobs ADD COLUMN x int"
denied "$W" "TRUNCATE $SCHEMA.jobs"
denied "$W" "INSERT INTO $SCHEMA.jobs (queue) VALUES ('r')"
denied "$W" "UPDATE $SCHEMA.queues SET lease_us = 1"

# No message shows the password, also one that names the store.
expect_exit 1 "$TQ" stats --db "postgresql://$W:pw-s3cret-w@/nosuchdb?host=$pgdir"
grep -q "postgresql://$W:\*\*\*@/nosuchdb" "$T/err" || fail "message: $(cat "$T/err")"
cat "$T/err" >>"$T/all.err"
if grep -r "s3cret" "$T" --include='*.err' --include='*.out' --include='out' --include='err' -l; then
    fail "a password in the output"
fi
echo ok
