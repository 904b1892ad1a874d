# A store far away: the worker talks to PostgreSQL through a proxy that
# holds every answer back 60 ms (each claim, settings read and
# acknowledgement then takes a round trip or three longer than the 50 ms
# within which a held job's queue settings must have been confirmed). Jobs
# held ahead still start, right after each answer, and every job is done
# once: a slow store slows the worker, and stops nothing. (A build that
# counted the 50 ms from before each request started none of them.)
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = postgres ] || fail "this test needs TQ_TEST_ENGINE=postgres"
pgdir=$(sed -e 's/.*host=\([^&]*\).*/\1/' <<<"$TQ_TEST_PG_URL")
"$TQ" init >/dev/null
for q in s1 s2 s3; do "$TQ" queue $q --lease 30s >/dev/null; done
bg "$TQ_PROXY" "$T/port" "$pgdir/.s.PGSQL.5432" 60 2>"$T/proxy.log"
wait_for 10 test -s "$T/port"
far="postgresql://tq@127.0.0.1:$(cat "$T/port")/postgres?tq_schema=$SCHEMA"
for q in s1 s2 s3; do seq 1 20 | "$TQ" enqueue --lines --queue $q >/dev/null; done
# Three queues, each read in turn: the reads alone take longer than 50 ms.
timeout 60 "$TQ" work --db "$far" --queue s1 --queue s2 --queue s3 --name far \
    --concurrency 2 --drain --quiet -- "$TQ_HISTORY" run "$T/runs" far 30 2>"$T/far.log" ||
    fail "the worker did not drain: $(cat "$T/far.log")"
for q in s1 s2 s3; do
    expect_eq "$("$TQ" stats --queue $q --json | jq .counts.done)" 20 "done in $q"
done
sql "SELECT id, state, claims FROM $JOBS" | tr '|' ' ' >"$T/rows"
"$TQ_HISTORY" check "$T/runs" "$T/rows" --all-done || fail "the history checker found violations"
echo "ok"
