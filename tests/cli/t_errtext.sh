# Error text a handler writes is kept as valid UTF-8 on both engines, so one
# job's stderr can never stop a worker (PostgreSQL's text refuses invalid
# bytes): the tail of "é" repeated, cut inside a character at both ends;
# stray invalid bytes; a NUL. Each job ends dead with its text, invalid
# bytes written as \xNN, and the worker drains the queue and exits 0. And
# JSON output keeps every field of text made invalid by plain SQL.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue u --max-attempts 1 >/dev/null
handler cut.sh 'n=$(cat); yes é | head -c "$n" >&2; exit 1'
handler raw.sh 'printf "before \377\376 after" >&2; exit 1'
handler nul.sh 'printf "a\000b" >&2; exit 1'
# 3,003 bytes of "é\n": the 2,048 kept start on the second byte of an é.
cut=$("$TQ" enqueue --queue u 3003)
"$TQ" work --queue u --drain --quiet -- "$T/cut.sh" 2>"$T/w1.log" || fail "worker stopped: $(cat "$T/w1.log")"
raw=$("$TQ" enqueue --queue u x)
"$TQ" work --queue u --drain --quiet -- "$T/raw.sh" 2>"$T/w2.log" || fail "worker stopped: $(cat "$T/w2.log")"
nul=$("$TQ" enqueue --queue u x)
"$TQ" work --queue u --drain --quiet -- "$T/nul.sh" 2>"$T/w3.log" || fail "worker stopped: $(cat "$T/w3.log")"
for id in $cut $raw $nul; do
    expect_eq "$(job "$id" state)" dead "job $id"
done
# The cut text: the stray byte at the cut escaped, whole characters after.
e=$(job "$cut" last_error)
grep -q '^exit status 1: \\xa9$' <<<"$e" || fail "cut: ${e:0:40}"
expect_eq "$(grep -c '^é$' <<<"$e")" "$(($(wc -l <<<"$e") - 1))" "lines of whole characters"
expect_eq "$(job "$raw" last_error)" 'exit status 1: before \xff\xfe after' "raw"
expect_eq "$(job "$nul" last_error)" 'exit status 1: a\x00b' "nul"

# Terminal control in the text: tq show, tq list and the worker's log
# print it escaped, on one line, so a handler can neither clear the screen, retitle the
# terminal nor fake a line of output.
handler esc.sh 'printf "\033[2J\033]0;pwned\007\n fake log line \302\233" >&2; exit 1'
esc=$("$TQ" enqueue --queue u x)
"$TQ" work --queue u --drain -- "$T/esc.sh" 2>"$T/w4.log" || fail "worker stopped: $(cat "$T/w4.log")"
# The worker's log: the failure on one line, escaped.
grep -q "$(printf '\033')" "$T/w4.log" && fail "an escape character reached the log"
expect_eq "$(grep -c 'fake log line' "$T/w4.log")" 1 "log lines with the text"
grep -q '^ fake log line' "$T/w4.log" && fail "the log has a line of the handler's"
"$TQ" show "$esc" >"$T/show"
grep -q "$(printf '\033')" "$T/show" && fail "an escape character reached the terminal"
expect_eq "$(grep '^last error:' "$T/show")" \
    'last error:   exit status 1: \e[2J\e]0;pwned\x07\n fake log line \xc2\x9b' "tq show"
"$TQ" list --queue u --state dead >"$T/list"
expect_eq "$(grep -c 'fake log line' "$T/list")" 1 "tq list lines with the text"
grep -q "^ fake log line" "$T/list" && fail "tq list printed a line of the handler's"

# A store that refuses one job's text anyway (here a trigger of its owner's):
# that job fails with a fixed text (so do jobs acknowledged in the same
# exchange), the worker goes on and says why in its log.
if [ "$ENGINE" = postgres ]; then
    sql "CREATE FUNCTION $SCHEMA.no_boom() RETURNS trigger LANGUAGE plpgsql AS
         \$\$ BEGIN IF NEW.last_error LIKE '%boom%' THEN RAISE EXCEPTION 'no boom here'; END IF;
         RETURN NEW; END \$\$;
         CREATE TRIGGER no_boom BEFORE UPDATE ON $JOBS FOR EACH ROW EXECUTE FUNCTION $SCHEMA.no_boom()"
else
    sql "CREATE TRIGGER no_boom BEFORE UPDATE OF last_error ON $JOBS
         WHEN NEW.last_error LIKE '%boom%' BEGIN SELECT RAISE(ABORT, 'no boom here'); END"
fi
handler echo.sh 'cat >&2; exit 1'
"$TQ" queue r --max-attempts 1 >/dev/null
ids=()
for p in one boom two; do ids+=("$("$TQ" enqueue --queue r "$p")"); done
"$TQ" work --queue r --drain -- "$T/echo.sh" 2>"$T/w5.log" || fail "worker stopped: $(cat "$T/w5.log")"
expect_eq "$(job "${ids[1]}" last_error)" "the store refused this job's error text; see the worker's log" "refused text"
expect_eq "$(job "${ids[1]}" state)" dead "the refused job"
for id in "${ids[@]}"; do expect_eq "$(job "$id" state)" dead "job $id"; done
case $(job "${ids[2]}" last_error) in
"exit status 1: two" | "the store refused this job's error text; see the worker's log") ;;
*) fail "a later job's text: $(job "${ids[2]}" last_error)" ;;
esac
grep -q "refused 1 job(s)' error text.*no boom here" "$T/w5.log" || fail "the log does not say why"
if [ "$ENGINE" = postgres ]; then
    sql "DROP TRIGGER no_boom ON $JOBS"
else
    sql "DROP TRIGGER no_boom"
fi

# Text a plain-SQL writer left invalid (SQLite's text takes any bytes): every
# field is still in the JSON output, its invalid bytes as \xNN.
if [ "$ENGINE" = sqlite ]; then
    sql "UPDATE $JOBS SET last_error = CAST(x'6162ff' AS TEXT), worker = CAST(x'77fe' AS TEXT),
         dedup_key = CAST(x'6bc3' AS TEXT) WHERE id = $raw"
    expect_eq "$(job "$raw" last_error)" 'ab\xff' "last_error in tq show --json"
    expect_eq "$(job "$raw" worker)" 'w\xfe' "worker in tq show --json"
    expect_eq "$(job "$raw" key)" 'k\xc3' "key in tq show --json"
    expect_eq "$("$TQ" list --queue u --json | jq -r ".[] | select(.id == $raw) | .last_error")" \
        'ab\xff' "last_error in tq list --json"
fi
echo ok
