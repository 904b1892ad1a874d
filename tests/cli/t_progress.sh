# Progress on long commands: on a terminal (a pty, by script(1)) tq enqueue
# --lines, tq prune, tq bench and tq work --drain draw a progress line on
# stderr, redrawn in place and erased before the summary; in a pipe, or with
# --json, there is none.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

# on_tty CMD: runs CMD (a shell command line) with a terminal for its
# stdin, stdout and stderr; what it wrote to that terminal in $T/tty.
on_tty() {
    script -qec "$1" /dev/null >"$T/tty" 2>&1 || fail "on a terminal: '$1' failed: $(cat "$T/tty")"
}
has() { grep -qaF -- "$1" "$T/tty" || fail "$2: no '$1' in: $(tr '\r\033' '|~' <"$T/tty" | tail -c 400)"; }
erase=$'\r\033[K'

seq 1 30000 >"$T/lines"
on_tty "'$TQ' enqueue --queue p --lines <'$T/lines'"
has "enqueued 1000, " "enqueue --lines"
has "% of the input" "enqueue --lines: how far into the file"
has "${erase}enqueued 30000 jobs: first id" "enqueue --lines: erased before its summary"
"$TQ" enqueue --queue p2 --lines <"$T/lines" >"$T/out" 2>"$T/err"
expect_eq "$(grep -c $'\r' "$T/err")" 0 "progress in a pipe"
on_tty "'$TQ' enqueue --queue p3 --lines --json <'$T/lines'"
expect_eq "$(grep -ca $'\r\033' "$T/tty")" 0 "progress with --json"
grep -qa '"count": *30000' "$T/tty" || grep -qa '"count":30000' "$T/tty" ||
    fail "--json on a terminal: $(head -c 200 "$T/tty")"

# tq prune: in batches of 10,000, counted as it goes.
if [ "$ENGINE" = postgres ]; then
    sql "UPDATE $JOBS SET state = 'done', started_at = now(), finished_at = now() - interval '1 hour' WHERE queue IN ('p', 'p2')"
else
    sql "UPDATE $JOBS SET state = 'done', started_at = 1, finished_at = 2 WHERE queue IN ('p', 'p2')"
fi
on_tty "'$TQ' prune --older-than 1m"
has "pruned 10000, " "prune"
has "${erase}pruned 60000 job(s)" "prune: erased before its summary"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue IN ('p', 'p2')")" 0 "rows left after prune"

# tq bench: the jobs run so far, of how many.
on_tty "'$TQ' bench --jobs 4000 --workers 2 --latency-jobs 0"
has "ran " "bench"
has " of 4000 (" "bench: of how many"

# tq work --drain: done, failed and left.
handler h.sh 'sleep 0.01'
seq 1 150 | "$TQ" enqueue --queue w --lines >/dev/null
# (stdout elsewhere: handlers print there, and would run into the line)
on_tty "'$TQ' work --queue w --drain --concurrency 2 -- '$T/h.sh' >'$T/hout'"
has "done " "work --drain"
has " left" "work --drain: what is left"
has "failed" "work --drain: failures"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'w' AND state = 'done'")" 150 \
    "jobs done by the drain"
seq 1 20 | "$TQ" enqueue --queue w2 --lines >/dev/null
"$TQ" work --queue w2 --drain -- "$T/h.sh" >"$T/out" 2>"$T/err"
expect_eq "$(grep -c $'\r' "$T/err")" 0 "work --drain's progress in a pipe"
# Handlers printing to the same terminal: no line to run into.
seq 1 20 | "$TQ" enqueue --queue w3 --lines >/dev/null
on_tty "'$TQ' work --queue w3 --drain -- '$T/h.sh'"
expect_eq "$(grep -ca $'\r\033' "$T/tty")" 0 "work --drain's line with handlers on the terminal"
echo "ok: progress lines on a terminal, none in pipes or with --json"
