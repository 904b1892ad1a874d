# A W3C trace context travels with the job: from --traceparent or the
# producer's TRACEPARENT, through the store, to the handler's TRACEPARENT;
# malformed values are refused, and a job without one does not inherit
# the worker's.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
TP1=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TP2=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00
WORKER_TP=00-11111111111111111111111111111111-2222222222222222-01

a=$("$TQ" enqueue --queue tp --traceparent "$TP1" a)
b=$(TRACEPARENT=$TP2 "$TQ" enqueue --queue tp b)
c=$(env -u TRACEPARENT "$TQ" enqueue --queue tp c)
expect_eq "$(job "$a" traceparent)" "$TP1" "stored from --traceparent"
expect_eq "$(job "$b" traceparent)" "$TP2" "stored from TRACEPARENT"
expect_eq "$(job "$c" traceparent)" null "none"
"$TQ" show "$a" | grep -q "^traceparent:  $TP1$" || fail "tq show: $("$TQ" show "$a")"
TRACEPARENT=$TP2 "$TQ" enqueue --queue tpl --lines <<<$'x\ny' >/dev/null
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'tpl' AND traceparent = '$TP2'")" 2 \
    "--lines takes the producer's trace context"

# Plain SQL: a valid value is passed on, anything else is not.
pay=$(payload_sql p)
sql "INSERT INTO $JOBS (queue, payload, traceparent) VALUES ('tp', $pay, '$TP1')"
sql "INSERT INTO $JOBS (queue, payload, traceparent) VALUES ('tp', $pay, 'not-a-trace')"

handler show.sh 'echo "$TQ_JOB_ID ${TRACEPARENT:-none}" >>"'"$T"'/seen"'
expect_exit 0 env TRACEPARENT="$WORKER_TP" "$TQ" work --queue tp --drain -- "$T/show.sh"
expect_eq "$(grep -c . "$T/seen")" 5 "handler runs"
expect_eq "$(grep "^$a " "$T/seen")" "$a $TP1" "handler of a"
expect_eq "$(grep "^$b " "$T/seen")" "$b $TP2" "handler of b"
expect_eq "$(grep "^$c " "$T/seen")" "$c none" "a job without one, under a worker with one"
expect_eq "$(grep -c " $TP1$" "$T/seen")" 2 "a's and the plain-SQL job's"
expect_eq "$(grep -c " none$" "$T/seen")" 2 "c's and the malformed plain-SQL one's"
grep -q "$WORKER_TP" "$T/seen" && fail "the worker's own trace context reached a job"

# Malformed: one line, exit 2, nothing stored.
before=$(fingerprint)
for v in "00-zz" "00-00000000000000000000000000000000-00f067aa0ba902b7-01" \
    "${TP1^^}" "$TP1-extra"; do
    expect_exit 2 "$TQ" enqueue --queue tp --traceparent "$v" x
    expect_eq "$(wc -l <"$T/err")" 1 "lines for '$v'"
    grep -q "invalid traceparent" "$T/err" || fail "message for '$v': $(cat "$T/err")"
done
expect_exit 2 env TRACEPARENT=garbage "$TQ" enqueue --queue tp x
grep -q "from \$TRACEPARENT" "$T/err" || fail "the message does not say where: $(cat "$T/err")"
[ "$(fingerprint)" = "$before" ] || fail "a refused enqueue changed the store"
echo ok
