# Timeouts in the store: a queue's (tq queue --timeout) and a job's own
# (tq enqueue --timeout, or a plain-SQL row's timeout_us), the job's
# winning, the worker's --timeout the fallback; a run past its limit is
# stopped (SIGTERM) and fails "timed out after <its limit>". Every job's
# outcome is counted. Bad values are refused and change nothing.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

# Each handler run sleeps as long as its payload says (in tenths of a
# second) and records its job id once it got through.
handler nap.sh 'sleep "$(awk "{ printf \"%.1f\", \$1 / 10 }")"; echo "$TQ_JOB_ID" >>"'"$T"'/ran"'
enq() { "$TQ" enqueue --queue "$@"; }

# Queue t1: a 1s timeout of its own. a naps 3s (over it), b 3s with its own
# 5s (the job's wins), c 0.2s (well within).
expect_exit 0 "$TQ" queue t1 --timeout 1s --max-attempts 1
expect_eq "$("$TQ" queue --json | jq -r '.[] | select(.name == "t1") | .timeout_us')" 1000000 \
    "the queue's timeout, as --json gives it"
"$TQ" queue | grep -q "^t1 .*timeout 1s" || fail "tq queue does not show it: $("$TQ" queue)"
a=$(enq t1 30)
b=$(enq t1 --timeout 5s 30)
c=$(enq t1 2)
expect_eq "$(job "$b" timeout_us)" 5000000 "b's own timeout, stored"
expect_eq "$(job "$a" timeout_us)" 0 "a has none of its own"
"$TQ" show "$b" | grep -q "^timeout:      5s$" || fail "tq show: $("$TQ" show "$b")"
# A plain-SQL producer may set a job's own: 4s over the queue's 1s.
pay=$(payload_sql 25)
sql "INSERT INTO $JOBS (queue, payload, timeout_us) VALUES ('t1', $pay, 4000000)"
d=$(sql "SELECT max(id) FROM $JOBS WHERE queue = 't1'")
# The worker's own --timeout (10s) is only the fallback: a still times out.
expect_exit 0 "$TQ" work --queue t1 --concurrency 4 --timeout 10s --drain -- "$T/nap.sh"
expect_eq "$(job "$a" state)" dead "a ran past its queue's 1s"
job "$a" last_error | grep -q "^timed out after 1s" || fail "a's error: $(job "$a" last_error)"
expect_eq "$(job "$b" state)" done "b's own 5s won over the queue's 1s"
expect_eq "$(job "$c" state)" done "c ran within"
expect_eq "$(job "$d" state)" done "the plain-SQL job's own 4s won"
expect_eq "$(sort -n "$T/ran" | tr '\n' ' ')" "$(printf '%s\n' "$b" "$c" "$d" | sort -n | tr '\n' ' ')" \
    "the handlers that got through"

# Queue t2 has none: the worker's --timeout is the fallback, and a job's
# own is still the job's.
: >"$T/ran"
e=$(enq t2 --max-attempts 1 20)
f=$(enq t2 --max-attempts 1 --timeout 3s 20)
expect_exit 0 "$TQ" work --queue t2 --concurrency 2 --timeout 500ms --drain -- "$T/nap.sh"
expect_eq "$(job "$e" state)" dead "e: the worker's 500ms"
job "$e" last_error | grep -q "^timed out after 500ms" || fail "e's error: $(job "$e" last_error)"
expect_eq "$(job "$f" state)" done "f: its own 3s"
expect_eq "$(cat "$T/ran")" "$f" "only f got through"

# 0 removes the queue's timeout: the worker's (none here) applies again.
: >"$T/ran"
expect_exit 0 "$TQ" queue t1 --timeout 0
expect_eq "$("$TQ" queue t1 --json | jq -r .timeout_us)" 0 "removed"
g=$(enq t1 15)
expect_exit 0 "$TQ" work --queue t1 --drain -- "$T/nap.sh"
expect_eq "$(job "$g" state)" done "without a timeout, 1.5s is fine"

# Bad values: one line, exit 2, nothing stored.
before=$(fingerprint)
for bad in "--timeout" "--timeout -1s" "--timeout abc" "--timeout 0" "--timeout 3651d"; do
    # shellcheck disable=SC2086
    expect_exit 2 "$TQ" enqueue --queue t1 $bad x
    expect_eq "$(wc -l <"$T/err")" 1 "lines for enqueue $bad"
done
for bad in "--timeout" "--timeout -1s" "--timeout 3651d"; do
    # shellcheck disable=SC2086
    expect_exit 2 "$TQ" queue t1 $bad
    expect_eq "$(wc -l <"$T/err")" 1 "lines for queue $bad"
done
[ "$(fingerprint)" = "$before" ] || fail "a refused command changed the store"
echo ok
