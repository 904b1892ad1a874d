# The job state machine under the operations that used to break it, each
# reproduced with real processes: a fence that cancel and retry cannot
# repeat, attempts charged only to runs that started, a name that means one
# process, a stop signal sent to the whole process group, pause honoured by
# the claim, rows plain SQL may not write, lowered attempts, and a handler
# that finishes its job when told to stop.
. "$(dirname "$0")/lib.sh"
: "${TQ_RECORD:?}"
"$TQ" init >/dev/null

state() { job "$1" state; }
is_state() { [ "$(state "$1")" = "$2" ]; } # ID STATE
settled() { # ID: neither ready nor running
    local s
    s=$(state "$1")
    [ "$s" != ready ] && [ "$s" != running ]
}

# 1. Cancel then retry while the worker runs the job: the retried run gets
# a new claim, so the cancelled run (failing after 2 s, with one attempt
# allowed) can neither record its failure nor keep its lease; the retried
# run's result is the one kept.
"$TQ" queue cr --max-attempts 1 --lease 3s >/dev/null
handler cr.sh 'if mkdir "'"$T"'/cr.first" 2>/dev/null; then sleep 2; exit 1; fi; sleep 3'
id=$("$TQ" enqueue --queue cr job)
bg "$TQ" work --queue cr --name crw --concurrency 2 --poll 50ms -- "$T/cr.sh" 2>"$T/cr.log"
w=$BG
wait_for 10 test -d "$T/cr.first"
"$TQ" cancel "$id" >/dev/null
"$TQ" retry "$id" >/dev/null
wait_for 20 settled "$id"
sleep 0.5
expect_eq "$(state "$id")" done "cancelled-then-retried job"
expect_eq "$(job "$id" attempts)" 1 "attempts of the retried run"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "worker exit (cancel and retry)"

# 2. kill -9 of a worker holding jobs claimed ahead: with one attempt
# allowed, a job that ends dead must have started (be in the handler's
# log); the jobs it held unstarted go back unspent and run.
"$TQ" queue hc --max-attempts 1 >/dev/null
seq 1 3000 | "$TQ" enqueue --lines --queue hc >/dev/null
bg "$TQ" work --queue hc --name hcw --concurrency 4 --quiet -- "$TQ_RECORD" "$T/hc.runs"
w=$BG
wait_for 60 sh -c "[ \$(wc -l < '$T/hc.runs' 2>/dev/null || echo 0) -gt 600 ]"
# Frozen first, so that every handler it started has written its line
# before the kill (a handler dies with its worker): the log then names
# every job that started.
freeze "$w"
sleep 0.3
kill -9 "$w"
wait_rc "$w"
"$TQ" work --queue hc --name hcw --concurrency 4 --drain --quiet -- "$TQ_RECORD" "$T/hc.runs"
sql "SELECT id FROM $JOBS WHERE queue = 'hc' AND state = 'dead'" | sort >"$T/hc.dead"
cut -d' ' -f1 "$T/hc.runs" | sort -u >"$T/hc.ran"
expect_eq "$(comm -23 "$T/hc.dead" "$T/hc.ran" | wc -l)" 0 "dead jobs that never started"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'hc' AND state IN ('done', 'dead')")" 3000 "done + dead"
sql "SELECT id FROM $JOBS WHERE queue = 'hc'" | sort >"$T/hc.all"
expect_eq "$(comm -13 "$T/hc.ran" "$T/hc.all" | wc -l)" 0 "jobs that never ran"

# 3. A live worker's name is not taken over from another PID namespace on
# the same host, where its PID means nothing.
if unshare --pid --fork --mount-proc true 2>/dev/null; then
    "$TQ" queue ns >/dev/null
    handler ns.sh 'echo "$TQ_ATTEMPT" >> "'"$T"'/ns.runs"; sleep 4'
    id=$("$TQ" enqueue --queue ns job)
    bg "$TQ" work --queue ns --name mailer -- "$T/ns.sh"
    w=$BG
    wait_for 10 test -s "$T/ns.runs"
    expect_exit 1 unshare --pid --fork --mount-proc "$TQ" work --queue ns --name mailer \
        --drain -- "$T/ns.sh"
    grep -q "held by a live worker" "$T/err" || fail "no refusal: $(cat "$T/err")"
    wait_for 20 settled "$id"
    expect_eq "$(state "$id")" done "job of the live worker"
    expect_eq "$(lines "$T/ns.runs")" 1 "runs of the live worker's job"
    kill -TERM "$w"
    wait_rc "$w"
else
    echo "note: unshare --pid is not permitted here; the PID-namespace case is not run"
fi

# 4. A stop signal sent to the worker's whole process group (timeout(1)
# does that, as do terminals and supervisors) never fails a job: handlers
# are in their own group before they can receive it, and one killed by it
# while the worker stops is released, its attempt given back.
seq 1 100000 | "$TQ" enqueue --lines --queue gs >/dev/null
for i in 1 2 3 4 5 6 7 8; do
    set +e
    timeout -s INT 0.7 "$TQ" work --queue gs --concurrency 4 --quiet -- true
    set -e
done
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'gs' AND last_error IS NOT NULL")" 0 "jobs failed by the group's stop signal"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'gs' AND state = 'ready' AND attempts <> 0")" 0 "ready jobs with a spent attempt"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'gs' AND state = 'running'")" 0 "jobs left running"

# 5. A paused queue: the claim itself refuses it, so a job enqueued right
# after the pause does not run, however fresh the worker's settings are.
"$TQ" queue pz >/dev/null
bg "$TQ" work --queue pz --poll 20ms --quiet -- "$TQ_RECORD" "$T/pz.runs"
w=$BG
id=$("$TQ" enqueue --queue pz warm)
wait_for 10 is_state "$id" done
for i in 1 2 3; do
    "$TQ" queue pz --pause >/dev/null
    id=$("$TQ" enqueue --queue pz "paused $i")
    sleep 1.5
    expect_eq "$(state "$id")" ready "job enqueued after pause $i"
    "$TQ" queue pz --resume >/dev/null
    wait_for 10 is_state "$id" done
done
kill -TERM "$w"
wait_rc "$w"

# 6. Rows the state machine has no way out of are refused by the table
# itself: a running row without a lease (no rescue would find it).
if sql "INSERT INTO $JOBS (queue, state, payload, worker) VALUES ('rl', 'running', 'x', 'w')" 2>"$T/err"; then
    fail "a running row without a lease was accepted"
fi
grep -qi "constraint" "$T/err" || fail "no constraint named: $(cat "$T/err")"
if [ "$ENGINE" = sqlite ]; then # PostgreSQL's int4 refuses it by type
    if sql "INSERT INTO $JOBS (queue, payload, priority) VALUES ('rl', 'x', 2147483648)" 2>/dev/null; then
        fail "a priority beyond 32 bits was accepted"
    fi
fi
expect_exit 0 "$TQ" work --queue rl --drain --quiet -- true

# 7. Attempts lowered below what a waiting job has used: it ends dead,
# unrun, instead of running once more.
"$TQ" queue la --max-attempts 3 >/dev/null
id=$("$TQ" enqueue --queue la job)
sql "UPDATE $JOBS SET attempts = 1 WHERE id = $id"
"$TQ" queue la --max-attempts 1 >/dev/null
"$TQ" work --queue la --drain --quiet -- "$TQ_RECORD" "$T/la.runs"
expect_eq "$(lines "$T/la.runs")" 0 "runs of a job out of attempts"
expect_eq "$(state "$id")" dead "job out of attempts"
expect_eq "$(job "$id" attempts)" 1 "its attempts"
job "$id" last_error | grep -q "used up" || fail "last_error: $(job "$id" last_error)"

# 8. A handler that traps the stop's SIGTERM and exits 0 finished its job:
# done, not released to run again.
handler trap.sh 'trap "echo caught >> \"'"$T"'/trap.log\"; exit 0" TERM; echo start >> "'"$T"'/trap.log"; sleep 30 & wait'
id=$("$TQ" enqueue --queue tt job)
bg "$TQ" work --queue tt --grace 1s --quiet -- "$T/trap.sh"
w=$BG
wait_for 10 test -s "$T/trap.log"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "worker exit (trapping handler)"
grep -q caught "$T/trap.log" || fail "the handler did not see SIGTERM"
expect_eq "$(state "$id")" done "job whose handler exited 0 on SIGTERM"
expect_eq "$(job "$id" attempts)" 1 "its attempts"

# 9. A poison job that kills its worker (here: kill -9 of the handler's
# parent) before its start can be recorded still spends its attempts and
# ends dead: a claim of a job rescued twice with no start recorded is
# charged up front. Two workers restarted in loops, as a supervisor would,
# under their names.
"$TQ" queue pb --max-attempts 2 >/dev/null
handler pb.sh 'if [ "$(cat)" = poison ]; then echo "$TQ_CLAIM" >> "'"$T"'/pb.runs"; kill -9 $PPID; sleep 1; fi'
{ seq 1 300; echo poison; seq 301 600; } | "$TQ" enqueue --lines --queue pb >/dev/null
supervise() { # NAME: restart a worker until it drains, at most 12 times
    local i
    for i in $(seq 1 12); do
        "$TQ" work --queue pb --name "$1" --concurrency 2 --drain --quiet -- "$T/pb.sh" \
            2>>"$T/pb.log" && return 0
    done
    echo "$1 restarted 12 times without draining" >>"$T/pb.log"
}
supervise pb1 &
s1=$!
supervise pb2 &
s2=$!
wait $s1 $s2
grep -q "without draining" "$T/pb.log" && fail "the poison job kept killing workers"
if [ "$ENGINE" = postgres ]; then
    pid=$(sql "SELECT id FROM $JOBS WHERE queue = 'pb' AND payload = 'poison'::bytea")
else
    pid=$(sql "SELECT id FROM $JOBS WHERE queue = 'pb' AND CAST(payload AS TEXT) = 'poison'")
fi
expect_eq "$(state "$pid")" dead "the poison job"
expect_eq "$(job "$pid" attempts)" 2 "its attempts"
runs=$(lines "$T/pb.runs")
[ "$runs" -le 6 ] || fail "the poison job ran $runs times with 2 attempts allowed"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'pb' AND state IN ('done', 'dead')")" 601 "jobs finished"
echo ok
