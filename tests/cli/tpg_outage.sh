# PostgreSQL connection loss: a crash-restart of the server in the middle of
# a run, and backends terminated under running workers. Workers log one
# line, reconnect with backoff and carry on; every job is done, none lost,
# and none run twice (the outages are shorter than the lease).
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = postgres ] || fail "this test needs TQ_TEST_ENGINE=postgres"
pgdir=$(sed -e 's/.*host=\([^&]*\).*/\1/' <<<"$TQ_TEST_PG_URL")
"$TQ" init >/dev/null

# 1. pg_ctl restart -m immediate in the middle of tq bench (enough jobs that
# the run is still going when the restart lands: tens of thousands a second).
"$TQ" bench --jobs 100000 --workers 4 --lease 10s --latency-jobs 0 --json \
    >"$T/bench.json" 2>"$T/bench.log" &
b=$!
BG_PIDS+=("$b")
wait_for 60 sh -c "[ \$(psql -X -At '$TQ_TEST_PG_URL' -c \"select count(*) from $SCHEMA.jobs where state = 'done'\" 2>/dev/null || echo 0) -gt 3000 ]"
bash "$(dirname "$0")/../pg/cluster.sh" restart "$pgdir"
wait_rc "$b"
r=$(cat "$T/bench.json")
[ "$RC" = 0 ] || fail "bench after a server crash exited $RC: $r $(cat "$T/bench.log")"
expect_eq "$(jq .done <<<"$r")" 100000 "done after restart"
expect_eq "$(jq .lost <<<"$r")" 0 "lost after restart"
expect_eq "$(jq .duplicates <<<"$r")" 0 "duplicates after restart"

# 2. pg_terminate_backend on the workers' connections, twice.
seq 1 600 | "$TQ" enqueue --lines --queue t >/dev/null
bg "$TQ" work --queue t --name A --concurrency 4 --drain -- "$TQ_HISTORY" run "$T/runs" A 10 \
    2>"$T/A.log"
a=$BG
for cut in 1 2; do
    wait_for 60 sh -c "[ \$(grep -c ^F '$T/runs' 2>/dev/null || echo 0) -gt $((cut * 150)) ]"
    sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()" >/dev/null
done
wait_rc "$a"
expect_eq "$RC" 0 "worker exit"
expect_eq "$("$TQ" stats --queue t --json | jq .counts.done)" 600 "done after terminations"
# The cuts are shorter than the lease: no run may overlap or repeat.
history_check t "$T/runs" --all-done
expect_eq "$(grep ^S "$T/runs" | cut -d' ' -f2 | sort | uniq -d | wc -l)" 0 "jobs run twice"
n=$(grep -c "reconnecting" "$T/A.log" || true)
[ "$n" -ge 1 ] && [ "$n" -le 2 ] || fail "expected one log line per cut, got $n: $(cat "$T/A.log")"
grep -q "reconnected to the store" "$T/A.log" || fail "no reconnection: $(cat "$T/A.log")"

# 3. Enqueues cut by a crash-restart: a batch whose COMMIT lost the
# connection asks the server, once it is back, how that transaction ended.
# What tq enqueue --lines prints is what is stored: its count, or, when it
# could not find out (exit 3), a count of unknown jobs that covers the
# difference. (A build that took every lost COMMIT for a failure printed
# 1,000 fewer jobs than were stored now and then.)
seq 1 300000 >"$T/many"
for round in 1 2 3 4 5 6; do
    "$TQ" enqueue --lines --json --queue "cut$round" <"$T/many" >"$T/cut.json" 2>"$T/cut.err" &
    e=$!
    BG_PIDS+=("$e")
    sleep "0.$((RANDOM % 6 + 2))"
    bash "$(dirname "$0")/../pg/cluster.sh" restart "$pgdir"
    wait_rc "$e"
    case $RC in 0 | 1 | 3) ;; *) fail "round $round: enqueue exited $RC: $(cat "$T/cut.err")" ;; esac
    said=$(jq .count "$T/cut.json")
    unknown=$(jq .unknown "$T/cut.json")
    stored=$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'cut$round'")
    echo "round $round: exit $RC, said $said stored and $unknown unknown; $stored stored"
    [ "$stored" -ge "$said" ] && [ "$stored" -le $((said + unknown)) ] ||
        fail "round $round: said $said (+$unknown unknown), stored $stored: $(cat "$T/cut.err")"
    # Every id it printed is there.
    jq -r '.ids[]' "$T/cut.json" | sort -n >"$T/cut.ids"
    sql "SELECT id FROM $JOBS WHERE queue = 'cut$round' ORDER BY id" | sort -n >"$T/cut.rows"
    expect_eq "$(comm -23 "$T/cut.ids" "$T/cut.rows" | wc -l)" 0 "round $round: printed ids not stored"
done
echo ok
