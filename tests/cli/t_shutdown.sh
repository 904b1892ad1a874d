# SIGTERM: stop claiming, let running jobs finish within --grace; past the
# grace, kill them and put their jobs back without spending the attempt.
. "$(dirname "$0")/lib.sh"

# stopped_within PID SIGNAL MARK LIMIT WHAT: once the worker's handler wrote
# MARK, the worker gets SIGNAL and must exit 0 in under LIMIT seconds.
stopped_within() {
    wait_for 10 test -s "$3"
    local start=$SECONDS
    kill "-$2" "$1"
    wait_rc "$1"
    expect_eq "$RC" 0 "exit on SIG$2 ($5)"
    [ $((SECONDS - start)) -lt "$4" ] || fail "$5: the stop took $((SECONDS - start)) s"
}
"$TQ" init >/dev/null
handler quick.sh 'echo start >> "'"$T"'/quick"; sleep 1; echo end >> "'"$T"'/quick"'
a=$("$TQ" enqueue --queue s one)
b=$("$TQ" enqueue --queue s two)
bg "$TQ" work --queue s --concurrency 1 --grace 10s -- "$T/quick.sh"
w=$BG
wait_for 10 test -s "$T/quick"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "exit on SIGTERM"
expect_eq "$(job "$a" state)" done "running job finished within grace"
expect_eq "$(job "$b" state)" ready "no new job claimed after SIGTERM"
expect_eq "$(job "$b" attempts)" 0 "untouched job"

handler stuck.sh 'echo start >> "'"$T"'/stuck"; sleep 60'
c=$("$TQ" enqueue --queue t stuck)
bg "$TQ" work --queue t --grace 1s -- "$T/stuck.sh"
stopped_within "$BG" INT "$T/stuck" 10 "a stuck handler's grace"
expect_eq "$(job "$c" state)" ready "killed job released"
expect_eq "$(job "$c" attempts)" 0 "release does not spend the attempt"
# Short jobs make a worker hold some claimed ahead; on SIGTERM those go
# back unspent: nothing stays running, every job not done is ready with no
# attempt spent, and none ran twice.
seq 1 3000 | "$TQ" enqueue --lines --queue h >/dev/null
bg "$TQ" work --queue h --concurrency 2 -- "$TQ_RECORD" "$T/held.runs"
w=$BG
wait_for 30 sh -c "[ \$(wc -l < '$T/held.runs' 2>/dev/null || echo 0) -gt 300 ]"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "exit on SIGTERM with held jobs"
s=$("$TQ" stats --queue h --json)
expect_eq "$(jq .counts.running <<<"$s")" 0 "running after stop"
expect_eq "$(($(jq .counts.done <<<"$s") + $(jq .counts.ready <<<"$s")))" 3000 "done + ready"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'h' AND state = 'ready' AND attempts <> 0")" 0 "ready jobs with a spent attempt"
expect_eq "$(cut -d" " -f1 "$T/held.runs" | sort | uniq -d | wc -l)" 0 "jobs run twice"
expect_eq "$(wc -l < "$T/held.runs")" "$(jq .counts.done <<<"$s")" "runs = done"

# A worker that stops on an error gives back what it holds while the store
# can still be reached: its running job (handler killed) and the jobs it
# held go back to ready at once, unspent, instead of waiting for a lease.
# The error here: the queues table is renamed under the running worker, so
# its next reading of the settings fails.
"$TQ" queue e --lease 1h >/dev/null
handler long.sh 'echo start >> "'"$T"'/long"; sleep 60'
e1=$("$TQ" enqueue --queue e one)
bg "$TQ" work --queue e --poll 100ms -- "$T/long.sh" 2>"$T/e.log"
w=$BG
wait_for 10 test -s "$T/long"
if [ "$ENGINE" = postgres ]; then
    sql "ALTER TABLE $SCHEMA.queues RENAME TO queues_away"
else
    sql "ALTER TABLE tq_queues RENAME TO tq_queues_away"
fi
wait_rc "$w"
expect_eq "$RC" 1 "exit of a worker whose store lost a table"
if [ "$ENGINE" = postgres ]; then
    sql "ALTER TABLE $SCHEMA.queues_away RENAME TO queues"
else
    sql "ALTER TABLE tq_queues_away RENAME TO tq_queues"
fi
grep -q "gave back 1 job" "$T/e.log" || fail "no give-back line: $(cat "$T/e.log")"
expect_eq "$(job "$e1" state)" ready "the running job after the error"
expect_eq "$(job "$e1" attempts)" 0 "its attempts"

# The handler's whole process group is gone (a killed child may linger a
# moment as a zombie).
while read -r p; do wait_for 5 sh -c "! kill -0 -- -$p"; done <"$T/handler.pids"

# --grace 0 means no grace (it used to mean the default, 10 s): the handler
# gets SIGTERM as soon as the worker is asked to stop.
handler long.sh 'echo started >> "'"$T"'/g0.runs"; sleep 30'
g0=$("$TQ" enqueue --queue g0 job)
bg "$TQ" work --queue g0 --name g0w --grace 0 --quiet -- "$T/long.sh"
stopped_within "$BG" TERM "$T/g0.runs" 5 "--grace 0"
expect_eq "$(job "$g0" state)" ready "the job after a stop with no grace"
echo ok
