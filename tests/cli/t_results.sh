# Results: in a queue with --results a command handler's stdout becomes its
# done job's result, byte for byte (tq result), shown by tq show and in
# --json (as text when it is UTF-8, else base64); over 1 MiB the job fails
# and nothing of it is kept; a failed, snoozed or discarded run keeps none.
# Without --results stdout is the worker's, as before.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

handler h.sh '
p=$(cat)
case "$p" in
text) printf "total: 42\n" ;;
binary) printf "a\000b\377c" ;;
empty) ;;
big) head -c 1100000 /dev/zero ;;
flood) yes ;;
exact) head -c 1048576 /dev/zero | tr "\0" y ;;
fail) echo "half a result"; exit 3 ;;
discard) echo "no"; echo "discard unwanted" >&3 ;;
*) echo "payload $p" ;;
esac'

"$TQ" queue res --results --max-attempts 1 >/dev/null
"$TQ" queue res | grep -q "active, results$" || fail "tq queue does not say the queue keeps results"
expect_eq "$("$TQ" queue res --json | jq .results)" true "the queue's setting"
ids=$(ids_of res text binary empty big flood exact fail discard)
read -r tx bi em big fl ex fa di <<<"$ids"
"$TQ" work --queue res --concurrency 3 --drain -- "$T/h.sh" >"$T/stdout" 2>>"$T/work.log" ||
    fail "the worker failed"

"$TQ" result "$tx" >"$T/r.text"
printf "total: 42\n" | cmp - "$T/r.text" || fail "text result differs"
"$TQ" result "$bi" >"$T/r.bin"
printf "a\000b\377c" | cmp - "$T/r.bin" || fail "binary result differs"
expect_eq "$("$TQ" result "$em" | wc -c)" 0 "empty result"
expect_eq "$(job "$em" result_bytes)" 0 "empty result's size"
expect_eq "$("$TQ" result "$ex" | wc -c)" 1048576 "a result of exactly 1 MiB"
expect_eq "$(job "$tx" result)" "total: 42" "--json result as text"
expect_eq "$(job "$bi" result_base64)" "YQBi/2M=" "--json result in base64"
expect_eq "$(job "$bi" result)" null "--json: no text for a binary result"
"$TQ" show "$tx" | grep -q "^result:       10 bytes (tq result $tx)$" || fail "tq show: no result line"

expect_eq "$(job "$big" state)" dead "a job whose result is over 1 MiB"
job "$big" last_error | grep -q "over 1048576 bytes" || fail "over 1 MiB: error '$(job "$big" last_error)'"
expect_eq "$(job "$big" result_bytes)" null "nothing of a result over 1 MiB"
# A handler that writes without end: its stdout is closed at the limit.
expect_eq "$(job "$fl" state) $(job "$fl" result_bytes)" "dead null" "a flood of stdout"
job "$fl" last_error | grep -q "over 1048576 bytes" || fail "flood: error '$(job "$fl" last_error)'"
for j in "$fa" "$di"; do
    expect_eq "$(job "$j" state) $(job "$j" result_bytes)" "dead null" "job $j: no result"
    expect_exit 1 "$TQ" result "$j"
    grep -q "job $j is dead: a job has a result once it is done" "$T/err" || fail "tq result $j: $(cat "$T/err")"
done
expect_eq "$(wc -c <"$T/stdout")" 0 "worker's stdout with --results"

# Without --results: stdout is the worker's; no result.
pl=$(ids_of plain hello)
"$TQ" work --queue plain --drain -- "$T/h.sh" >"$T/stdout" 2>>"$T/work.log"
expect_eq "$(cat "$T/stdout")" "payload hello" "the handler's stdout without --results"
expect_exit 1 "$TQ" result "$pl"
grep -q "done without a result" "$T/err" || fail "tq result without one: $(cat "$T/err")"
expect_exit 1 "$TQ" result 999999
grep -q "no job with id 999999" "$T/err" || fail "tq result of no job: $(cat "$T/err")"
expect_exit 2 "$TQ" result
expect_exit 2 "$TQ" result x
"$TQ" queue res --no-results >/dev/null
expect_eq "$("$TQ" queue res --json | jq .results)" false "--no-results"
echo "ok: results text, binary, empty, 1 MiB; over 1 MiB fails; none without --results"
