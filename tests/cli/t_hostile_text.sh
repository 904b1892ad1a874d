# Text from the store never drives the operator's terminal: hostile text
# written by plain SQL (as a worker role or a producer could) into every
# text column a human output shows reaches the screen escaped, from every
# command that prints it. The check fails on any byte below 0x20 but a
# newline or tab, DEL, a C1 control (U+0080 to U+009F), or a bidirectional
# override or isolate.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue hq --lease 1h >/dev/null
"$TQ" cron set hourly --queue hq --schedule @hourly >/dev/null
for i in 1 2 3; do "$TQ" enqueue --queue hq "job $i" >/dev/null; done
"$TQ" enqueue --queue hq --key k1 "keyed" >/dev/null
bg "$TQ" work --queue idle --name honest --quiet -- true
w=$BG
wait_for 10 sh -c "'$TQ' workers --json | jq -e '.[] | select(.name == \"honest\")' >/dev/null"

# ESC [2J (clear), a BEL, a C1 CSI (U+009B), DEL, a right-to-left override
# (U+202E) and an isolate (U+2066), and a carriage return that would
# overwrite the line.
if [ "$ENGINE" = postgres ]; then
    bad="E'x\\x1b[2J\\x07' || chr(155) || E'\\x7f' || chr(8238) || chr(8294) || E'\\rfake'"
    pay="convert_to($bad, 'UTF8')"
    W=$SCHEMA.workers
    S=$SCHEMA.schedules
else
    bad="'x' || char(27) || '[2J' || char(7) || char(155) || char(127) || char(8238) || char(8294) || char(13) || 'fake'"
    pay="CAST($bad AS BLOB)"
    W=tq_workers
    S=tq_schedules
fi
if [ "$ENGINE" = postgres ]; then
    sql "UPDATE $JOBS SET state = 'running', started_at = now(),
         lease_until = now() + interval '1 h', worker = $bad, progress = 50,
         progress_text = $bad WHERE id = 1"
else
    sql "UPDATE tq_jobs SET state = 'running', started_at = 1,
         lease_until = 9000000000000000, worker = $bad, progress = 50,
         progress_text = $bad WHERE id = 1"
fi
sql "UPDATE $JOBS SET last_error = $bad, job_group = $bad, traceparent = $bad,
     payload = $pay WHERE id = 2"
sql "UPDATE $JOBS SET state = 'dead', last_error = $bad, finished_at = created_at WHERE id = 3"
sql "UPDATE $JOBS SET dedup_key = $bad WHERE id = 4"
sql "UPDATE $W SET name = $bad, host = $bad WHERE name = 'honest'"
sql "UPDATE $S SET spec = $bad, tz = $bad WHERE name = 'hourly'"

# clean FILE WHAT: no forbidden byte in FILE.
clean() {
    if LC_ALL=C grep -naP '[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]' "$1" >"$T/hits"; then
        fail "$2 printed raw control text: $(od -c "$T/hits" | head -5)"
    fi
}
n=0
for cmd in "show 1" "show 2" "show 3" "show 4" "list" "list --state running" \
    "list --state dead" "stats" "stats --queue hq" "workers" "cron list" "queue"; do
    # shellcheck disable=SC2086
    "$TQ" $cmd >"$T/out" 2>&1 || fail "tq $cmd exited $?: $(cat "$T/out")"
    clean "$T/out" "tq $cmd"
    n=$((n + 1))
done
# Each hostile text did reach an output, escaped (\e for ESC).
"$TQ" show 2 >"$T/show2"
grep -qF '\e[2J' "$T/show2" || fail "show 2 lost the text: $(cat "$T/show2")"
"$TQ" workers >"$T/workers"
grep -qF '\e[2J' "$T/workers" || fail "workers lost the name: $(cat "$T/workers")"
"$TQ" cron list >"$T/cron"
grep -qF '\e[2J' "$T/cron" || fail "cron list lost the schedule: $(cat "$T/cron")"
"$TQ" stats --queue hq >"$T/stats"
grep -qF '\e[2J' "$T/stats" || fail "stats lost the worker: $(cat "$T/stats")"
kill -TERM "$w"
wait_rc "$w"
# The worker's log (a failed job's error, a handler's stderr with --verbose)
# is escaped too.
handler loud.sh 'printf "\033]0;retitled\007\033[2J boom\n" >&2; exit 1'
"$TQ" enqueue --queue loud --max-attempts 1 x >/dev/null
"$TQ" work --queue loud --drain --verbose -- "$T/loud.sh" 2>"$T/work.log" || true
clean "$T/work.log" "tq work's log"
grep -qF '\e[2J boom' "$T/work.log" || fail "the log lost the handler's line: $(cat "$T/work.log")"
echo "ok: $((n + 1)) outputs checked"
