# Behind a pooler in transaction mode (tests/pg/bouncer.sh; every other
# PostgreSQL test runs through it too): what only a pooled store shows.
# Without tq_listen a worker says it polls and still runs every job; with
# it, an idle worker hears of a new job on its own session to the server,
# and listens again when that session is ended. The pooler's sessions run
# in another time zone than UTC, which changes no time tq stores or shows.
. "$(dirname "$0")/lib.sh"
[ -n "${TQ_TEST_PG_POOL_URL:-}" ] || fail "run behind the pooler (TQ_TEST_PG_POOL_URL)"
pooler_psql=$(sed -E 's/&tq_[a-z]+=[^&]*//g' <<<"$TQ_TEST_PG_POOL_URL")
expect_eq "$(psql -X -At "$pooler_psql" -c 'SHOW TimeZone')" Pacific/Chatham \
    "the pooled sessions' time zone"
"$TQ" init >/dev/null
"$TQ" queue q --lease 30s >/dev/null # an idle worker's own look: every 30 s
handler rec.sh '
read -r p
echo "$p $(date +%s.%N)" >>"'"$T"'/runs"'

# started PAYLOAD AFTER WITHIN: PAYLOAD started within WITHIN seconds of AFTER.
started() {
    wait_for $(($3 + 10)) grep -q "^$1 " "$T/runs"
    local at
    at=$(grep "^$1 " "$T/runs" | cut -d' ' -f2)
    awk -v a="$at" -v t="$2" -v w="$3" 'BEGIN { exit !(a >= t && a - t < w) }' ||
        fail "$1 started $(awk -v a="$at" -v t="$2" 'BEGIN { print a - t }') s after, not within $3 s"
}

# ---- times, in a session zone of UTC+12:45 or +13:45 ------------------------
id=$("$TQ" enqueue -q q --at 2030-01-01T00:00:00Z at)
expect_eq "$(job "$id" run_at)" 2030-01-01T00:00:00.000Z "run_at shown"
expect_eq "$(sql "SELECT extract(epoch FROM run_at)::int8 FROM $JOBS WHERE id = $id")" \
    1893456000 "run_at stored"
"$TQ" cancel "$id" >/dev/null

# ---- no tq_listen: polling, said, and every job runs ------------------------
nolisten=$(sed -E 's/&tq_listen=[^&]*//' <<<"$TQ_DB")
bg env TQ_DB="$nolisten" "$TQ" work --queue q --poll 1s -- "$T/rec.sh" 2>"$T/poll.log"
p=$BG
sleep 2
t=$(date +%s.%N)
"$TQ" enqueue -q q polled >/dev/null
started polled "$t" 4
grep -q "polling only.*tq_listen" "$T/poll.log" ||
    fail "no word of polling: $(cat "$T/poll.log")"
stop_ok "$p"

# ---- tq_listen: told at once, and again after its session is ended ----------
bg "$TQ" work --queue q -- "$T/rec.sh" 2>"$T/w.log"
w=$BG
# listening [OLD]: one session to the server waits in LISTEN for this
# store, idle, and it is not the session OLD; its pid in $LISTENER.
listening() {
    LISTENER=$(sql "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity
                    WHERE query = 'LISTEN tq_$SCHEMA' AND state = 'idle'")
    [ -n "$LISTENER" ] && [ "${LISTENER// /}" = "$LISTENER" ] && [ "$LISTENER" != "${1:-}" ]
}
wait_for 10 listening
sleep 2 # idle
t=$(date +%s.%N)
"$TQ" enqueue -q q told >/dev/null
started told "$t" 3
old=$LISTENER
expect_eq "$(sql "SELECT pg_terminate_backend($old)")" t "the listening session ended"
wait_for 15 listening "$old"
sleep 2
t=$(date +%s.%N)
"$TQ" enqueue -q q told-again >/dev/null
started told-again "$t" 3
grep -q "lost the connection" "$T/w.log" || fail "the loss not said: $(cat "$T/w.log")"
stop_ok "$w"
grep -q "tq_listen=\*\*\*" "$T/w.log" || fail "tq_listen's URL shown: $(head -1 "$T/w.log")"

# ---- the server refuses the listening session for a while -------------------
# tq_listen reaches the server through a socket of this test's own (a link
# to the server's), taken away while the session is ended: the worker polls
# meanwhile and listens again once it can.
mkdir "$T/sock"
pgdir=$(sed -E 's/.*host=([^&]*).*/\1/' <<<"$TQ_TEST_PG_URL")
ln -s "$pgdir/.s.PGSQL.5432" "$T/sock/.s.PGSQL.5432"
own=$(jq -rn --arg u "postgresql:///postgres?host=$T/sock&user=tq" '$u | @uri')
bg env TQ_DB="$(sed -E 's/&tq_listen=[^&]*//' <<<"$TQ_DB")&tq_listen=$own" \
    "$TQ" work --queue q --poll 1s -- "$T/rec.sh" 2>"$T/w2.log"
w=$BG
wait_for 10 listening
old=$LISTENER
rm "$T/sock/.s.PGSQL.5432"
expect_eq "$(sql "SELECT pg_terminate_backend($old)")" t "the listening session ended"
wait_for 15 grep -q "cannot listen for new jobs, polling only until it can" "$T/w2.log"
# What went wrong is said of the listening session's server, not the pooler.
grep "cannot listen" "$T/w2.log" | grep -q "host=$T/sock" ||
    fail "the listening server not named: $(grep "cannot listen" "$T/w2.log")"
"$TQ" enqueue -q q while-polling >/dev/null
wait_for 5 grep -q "^while-polling " "$T/runs"
ln -s "$pgdir/.s.PGSQL.5432" "$T/sock/.s.PGSQL.5432"
wait_for 15 listening "$old"
grep -q "listening for new jobs again" "$T/w2.log" || fail "not said: $(cat "$T/w2.log")"
sleep 2
t=$(date +%s.%N)
"$TQ" enqueue -q q told-third >/dev/null
started told-third "$t" 3
stop_ok "$w"
expect_eq "$(wc -l <"$T/runs")" 5 "runs"
