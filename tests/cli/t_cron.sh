# Periodic jobs: 3 workers with a schedule of @every 1s for 10 s enqueue
# 10 +- 1 jobs, no slot twice; --overlap skip with a handler slower than
# the period never runs two at once; bad schedules exit 2 and store
# nothing; list and rm.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

handler h.sh 'echo "S $(date +%s%N) $TQ_JOB_ID $(cat)" >>"'"$T"'/log"'

# run SECONDS QUEUE HANDLER: 3 workers on QUEUE for SECONDS, then SIGTERM.
run() {
    local pids=() p
    for w in 1 2 3; do
        bg "$TQ" work --queue "$2" --concurrency 2 --name "w$w-$2" -- "$3" 2>>"$T/work.log"
        pids+=("$BG")
    done
    sleep "$1"
    for p in "${pids[@]}"; do kill -TERM "$p"; done
    wait_ok "a worker of $2" "${pids[@]}"
}

# 1. Every second, three workers, ten seconds.
expect_exit 0 "$TQ" cron set tick --queue t --schedule '@every 1s' --payload tock
grep -q '^tick *t *@every 1s *UTC *allow' "$T/out" || fail "cron set prints the schedule"
run 10 t "$T/h.sh"
n=$(sql "SELECT count(*) FROM $JOBS WHERE schedule = 'tick'")
[ "$n" -ge 9 ] && [ "$n" -le 11 ] || fail "@every 1s for 10 s enqueued $n jobs (want 10 +- 1)"
expect_eq "$(sql "SELECT count(DISTINCT slot) FROM $JOBS WHERE schedule = 'tick'")" "$n" \
    "distinct slots"
expect_eq "$(grep -c ' tock$' "$T/log")" "$(sql "SELECT count(*) FROM $JOBS WHERE schedule = 'tick' AND state = 'done'")" \
    "handlers run, with the payload"
expect_eq "$(awk '{ print $3 }' "$T/log" | sort | uniq -d | wc -l)" 0 "jobs run twice"
expect_exit 0 "$TQ" cron rm tick

# 2. Overlap skip: a handler of 2.5 s, a slot each second: never two at once.
handler slow.sh 'echo "S $(date +%s%N)" >>"'"$T"'/slow"
sleep 2.5
echo "E $(date +%s%N)" >>"'"$T"'/slow"'
expect_exit 0 "$TQ" cron set slow --queue s --schedule '* * * * * *' --overlap skip
run 7 s "$T/slow.sh"
top=$(sort -k2,2n "$T/slow" | awk '$1 == "S" { c++; if (c > t) t = c } $1 == "E" { c-- } END { print t + 0 }')
expect_eq "$top" 1 "jobs of an overlap-skip schedule running at once"
starts=$(grep -c '^S' "$T/slow")
[ "$starts" -ge 2 ] && [ "$starts" -le 3 ] || fail "overlap skip: $starts starts in 7 s (want 2 or 3)"
expect_eq "$("$TQ" cron list --json | jq -r '.[0].overlap')" skip "overlap in --json"

# 3. Bad input: one line, exit 2, nothing stored.
before=$("$TQ" cron list --json | jq length)
for bad in '61 * * * *' '* * 31 2 *' '* * *' '@every 0s' '@sometimes' '1-2-3 * * * *'; do
    expect_exit 2 "$TQ" cron set bad --queue q --schedule "$bad"
    expect_eq "$(wc -l <"$T/err")" 1 "lines of the message for '$bad'"
done
expect_exit 2 "$TQ" cron set bad --queue q --schedule '@daily' --tz Mars/Olympus_Mons
grep -q "unknown time zone 'Mars/Olympus_Mons'" "$T/err" || fail "unknown zone message"
expect_exit 2 "$TQ" cron set 'bad name' --queue q --schedule '@daily'
expect_exit 2 "$TQ" cron set bad --queue 'bad queue' --schedule '@daily'
expect_exit 2 "$TQ" cron set bad --queue q
expect_exit 2 "$TQ" cron set bad --queue q --schedule '@daily' --overlap sometimes
expect_exit 2 "$TQ" cron frobnicate
expect_eq "$("$TQ" cron list --json | jq length)" "$before" "schedules after bad input"
expect_exit 1 "$TQ" cron rm nothing-here
grep -q "no schedule named 'nothing-here'" "$T/err" || fail "rm of a missing schedule"

# 4. A zone, a listing, removal.
expect_exit 0 "$TQ" cron set berlin --queue q --schedule '30 2 * * *' --tz Europe/Berlin --json
expect_eq "$(jq -r '.tz + " " + .schedule' "$T/out")" "Europe/Berlin 30 2 * * *" "cron set --json"
expect_exit 0 "$TQ" cron rm berlin
expect_exit 0 "$TQ" cron rm slow
expect_exit 0 "$TQ" cron list
expect_eq "$(cat "$T/out")" "no schedules" "cron list when empty"
echo "ok: $n jobs from @every 1s in 10 s, overlap skip peak $top"
