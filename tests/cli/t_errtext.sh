# Error text a handler writes is kept as valid UTF-8 on both engines, so one
# job's stderr can never stop a worker (PostgreSQL's text refuses invalid
# bytes): the tail of "é" repeated, cut inside a character at both ends;
# stray invalid bytes; a NUL. Each job ends dead with its text, invalid
# bytes written as \xNN, and the worker drains the queue and exits 0.
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
echo ok
