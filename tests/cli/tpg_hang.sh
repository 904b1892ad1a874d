# A PostgreSQL connection that hangs instead of closing: the worker talks to
# the server through a proxy (tests/proxy.c) that, mid-run, stops forwarding
# its connection without closing it. The worker notices within its wait
# limit (a heartbeat period, at least 2 s: here the lease is 6 s, so 2 s),
# logs it, reconnects through the proxy, and finishes every job; the history
# checker passes (the hang is shorter than the lease, so nothing reruns).
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = postgres ] || fail "this test needs TQ_TEST_ENGINE=postgres"
pgdir=$(sed -e 's/.*host=\([^&]*\).*/\1/' <<<"$TQ_TEST_PG_URL")
"$TQ" init >/dev/null
"$TQ" queue h --lease 6s >/dev/null
bg "$TQ_PROXY" "$T/port" "$pgdir/.s.PGSQL.5432" 2>"$T/proxy.log"
proxy=$BG
wait_for 10 test -s "$T/port"
# (The server trusts local connections: the password only has to stay hidden.)
via_proxy="postgresql://tq:pw-s3cret-h@127.0.0.1:$(cat "$T/port")/postgres?tq_schema=$SCHEMA"

seq 1 400 | "$TQ" enqueue --lines --queue h >/dev/null
bg "$TQ" work --db "$via_proxy" --queue h --name hw --concurrency 2 --drain -- \
    "$TQ_HISTORY" run "$T/runs" hw 20 2>"$T/hw.log"
w=$BG
wait_for 60 sh -c "[ \$(grep -c ^F '$T/runs') -gt 100 ]"
kill -USR1 "$proxy"
t0=$(date +%s%N)
wait_for 60 grep -q "reconnected to the store" "$T/hw.log"
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q "no answer from .* within 2.0 s; the connection was dropped; reconnecting" "$T/hw.log" ||
    fail "the hang was not reported: $(cat "$T/hw.log")"
grep -q "s3cret" "$T/hw.log" && fail "a password in the log: $(cat "$T/hw.log")"
grep -q "tq:\*\*\*@127.0.0.1" "$T/hw.log" || fail "the store is not named: $(cat "$T/hw.log")"
wait_rc "$w"
expect_eq "$RC" 0 "worker exit"
expect_eq "$("$TQ" stats --queue h --json | jq .counts.done)" 400 "done after the hang"
history_check h "$T/runs" --all-done
echo "ok: hang noticed and reconnected after $ms ms"
