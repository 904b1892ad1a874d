# Keys with a scope: the store keeps the rule (a unique index, a trigger),
# so it holds for producers racing each other and for plain-SQL INSERTs.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

held() { # QUEUE KEY: rows of the queue that hold a scoped KEY now
    sql "SELECT count(*) FROM $JOBS WHERE queue = '$1' AND unique_key = '$2'
         AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0
              OR unique_scope = 'active' AND state IN ('ready', 'running'))"
}

# 1. Producers racing on one key, for each scope: one row holds it, and
# every producer was told that row's id.
for scope in queued active stored; do
    for p in $(seq 1 8); do
        (for i in $(seq 1 15); do
            "$TQ" enqueue --queue race-$scope --key hot --unique $scope "p$p-$i" 2>/dev/null
        done >"$T/ids.$scope.$p") &
    done
    wait
    expect_eq "$(cat "$T"/ids.$scope.* | sort -u | wc -l)" 1 "ids told to 120 racing producers ($scope)"
    expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'race-$scope'")" 1 \
        "rows after 120 racing enqueues ($scope)"
done

# 2. Racing replaces: still one row; its payload is one of theirs.
for p in $(seq 1 6); do
    (for i in $(seq 1 10); do
        "$TQ" enqueue --queue deb --key d --unique queued --on-conflict replace "r$p-$i" \
            2>/dev/null
    done >/dev/null) &
done
wait
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'deb'")" 1 "rows after racing replaces"
# Debounce: the latest payload wins, one run.
for i in 1 2 3 4 5; do
    "$TQ" enqueue --queue deb --key d --unique queued --on-conflict replace "v$i" 2>"$T/err" >/dev/null
done
grep -q "took this payload and run time" "$T/err" || fail "replace not said: $(cat "$T/err")"
handler record.sh 'cat >>"'"$T"'/ran"; echo >>"'"$T"'/ran"'
expect_exit 0 "$TQ" work --queue deb --drain -- "$T/record.sh"
expect_eq "$(cat "$T/ran")" v5 "what the debounced job ran with"

# 3. The scopes, from the command line: queued frees the key at the claim,
# active at the end, --unique-for after the time.
a=$("$TQ" enqueue --queue sc --key k --unique active one)
expect_exit 0 "$TQ" enqueue --queue sc --key k --unique active two
expect_eq "$(cat "$T/out")" "$a" "active: the kept job's id"
grep -q "duplicate key 'k' (unique while active): job $a was kept" "$T/err" ||
    fail "duplicate not said: $(cat "$T/err")"
expect_exit 0 "$TQ" work --queue sc --drain -- true
b=$("$TQ" enqueue --queue sc --key k --unique active three)
[ "$b" != "$a" ] || fail "active: the key still held after the job was done"
expect_exit 0 "$TQ" enqueue --queue tf --key t --unique-for 1s one --json
t1=$(jq .id "$T/out")
expect_exit 0 "$TQ" enqueue --queue tf --key t --unique-for 1s two --json
expect_eq "$(jq -c '[.id, .duplicate]' "$T/out")" "[$t1,true]" "--unique-for: held"
sleep 1.2
expect_exit 0 "$TQ" enqueue --queue tf --key t --unique-for 1s three --json
expect_eq "$(jq .duplicate "$T/out")" false "--unique-for: free after the time"
expect_eq "$(job "$t1" key)" t "the expired job keeps its key for the record"

# 4. Plain SQL, as docs/sql.md writes it: a scoped key's INSERT names the
# index's predicate; a second one does nothing; a bad scope is refused.
payload=$(payload_sql x)
for i in 1 2 3; do
    sql "INSERT INTO $JOBS (queue, payload, unique_key, unique_scope)
         VALUES ('plain', $payload, 'pk', 'queued')
         ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL
           AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0
                OR unique_scope = 'active' AND state IN ('ready', 'running'))
         DO NOTHING"
done
expect_eq "$(held plain pk)" 1 "plain-SQL inserts of one scoped key"
expect_exit 0 "$TQ" enqueue --queue plain --key pk --unique queued y
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'plain'")" 1 "tq after plain SQL"
set +e
sql "INSERT INTO $JOBS (queue, payload, unique_key, unique_scope) VALUES ('plain', $payload, 'q', 'nope')" \
    2>"$T/sqlerr"
rc=$?
set -e
[ $rc != 0 ] || fail "a bad scope was accepted"
grep -q "unique_scope" "$T/sqlerr" || fail "message: $(cat "$T/sqlerr")"
set +e # a key without a scope would hold nothing: refused too
sql "INSERT INTO $JOBS (queue, payload, unique_key) VALUES ('plain', $payload, 'q')" 2>/dev/null
rc=$?
set -e
[ $rc != 0 ] || fail "a unique_key without a scope was accepted"

# A time limit, for plain SQL: the producer lets an expired holder go first,
# as docs/sql.md shows (SQLite: an UPDATE; PostgreSQL: tq.expire_key).
if [ "$ENGINE" = postgres ]; then
    until_sql="now() + interval '1 second'"
    now_sql="now()"
else
    until_sql="CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) + 1000000"
    now_sql="CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
fi
plain_timed() {
    if [ "$ENGINE" = postgres ]; then
        sql "SELECT $SCHEMA.expire_key('pt', 'tk')" >/dev/null
    else
        sql "UPDATE $JOBS SET unique_scope = 'expired'
             WHERE queue = 'pt' AND unique_key = 'tk' AND unique_key IS NOT NULL
               AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0
                    OR unique_scope = 'active' AND state IN ('ready', 'running'))
               AND unique_until <= $now_sql AND state <> 'running'"
    fi
    sql "INSERT INTO $JOBS (queue, payload, unique_key, unique_scope, unique_until)
         VALUES ('pt', $payload, 'tk', 'active', $until_sql)
         ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL
           AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0
                OR unique_scope = 'active' AND state IN ('ready', 'running'))
         DO NOTHING"
}
plain_timed
plain_timed
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'pt'")" 1 "plain SQL, within the time"
sleep 1.2
plain_timed
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'pt'")" 2 "plain SQL, after the time"
expect_eq "$(held pt tk)" 1 "holders after the time"
before=$(fingerprint)

# 5. Bad input: one line, exit 2, nothing changed.
for args in "--unique sometimes --key k x" "--unique queued x" "--key k --on-conflict merge x" \
    "--key k --unique-for 0 x" "--key k --unique-for 5 x" "--on-conflict replace x"; do
    # shellcheck disable=SC2086
    expect_exit 2 "$TQ" enqueue --queue bad $args
    expect_eq "$(wc -l <"$T/err")" 1 "lines for enqueue $args"
done
[ "$(fingerprint)" = "$before" ] || fail "a refused enqueue changed the store"
echo ok
