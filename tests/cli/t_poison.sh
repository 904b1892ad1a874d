# A job that always fails is dead after exactly max attempts, with the tail
# of its stderr as last_error; a timeout counts as a failure.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue p --max-attempts 3 --backoff 0 >/dev/null
handler h.sh 'echo "$TQ_ATTEMPT" >> "'"$T"'/runs"; echo "cannot parse payload" >&2; exit 7'
id=$("$TQ" enqueue --queue p poison)
"$TQ" work --queue p --drain --quiet -- "$T/h.sh"
expect_eq "$(tr '\n' ' ' <"$T/runs")" "1 2 3 " attempts
expect_eq "$(job "$id" state)" dead state
expect_eq "$(job "$id" attempts)" 3 "attempts recorded"
expect_eq "$(job "$id" last_error)" "exit status 7: cannot parse payload" last_error

# --timeout: SIGTERM, then SIGKILL after --grace, for a handler that ignores
# SIGTERM.
"$TQ" queue t --max-attempts 1 >/dev/null
handler slow.sh 'trap "" TERM; sleep 30'
id=$("$TQ" enqueue --queue t slow)
start=$(date +%s)
"$TQ" work --queue t --drain --timeout 1s --grace 1s --quiet -- "$T/slow.sh"
[ $(($(date +%s) - start)) -lt 20 ] || fail "timeout did not kill the handler"
expect_eq "$(job "$id" state)" dead "timed out job"
job "$id" last_error | grep -q "timed out after 1s" || fail "last_error: $(job "$id" last_error)"

# A handler killed by a signal is a failure too.
handler sig.sh 'kill -9 $$'
id=$("$TQ" enqueue --queue t sig)
"$TQ" work --queue t --drain --quiet -- "$T/sig.sh"
job "$id" last_error | grep -q "killed by signal 9" || fail "last_error: $(job "$id" last_error)"
echo ok
