# The handler's word and results under kill -9: 300 jobs in a queue with
# results, handlers that snooze on their job's first claim, report
# progress and print a result naming their payload; two workers, one killed
# and restarted every few tenths of a second for 40 rounds. At the end every
# job is done, its result is its own (no run's word or output reached
# another job, or a job after its claim was taken back), it snoozed at most
# once, and the store is intact.
. "$(dirname "$0")/lib.sh"
ROUNDS=${TQ_KILL_ROUNDS:-40}
Q=wc
"$TQ" init >/dev/null
"$TQ" queue $Q --results --lease 2s --backoff 0 --max-attempts 1000 >/dev/null
seq 1 300 | "$TQ" enqueue --queue $Q --lines >/dev/null

handler h.sh '
p=$(cat)
echo "progress 50 half of $p" >&3
if [ "$TQ_CLAIM" = 1 ]; then echo "snooze 0s" >&3; exit 0; fi
sleep 0.0$((TQ_JOB_ID % 5))
printf "r:%s" "$p"'

declare -A wpid
start_worker() {
    bg "$TQ" work --queue $Q --name "$1" --concurrency 3 --quiet -- "$T/h.sh" 2>>"$T/$1.log"
    wpid[$1]=$BG
}
start_worker w1
start_worker w2
for ((r = 1; r <= ROUNDS; r++)); do
    sleep "0.$((RANDOM % 4 + 1))"
    w=w$((RANDOM % 2 + 1))
    kill -9 "${wpid[$w]}"
    wait_rc "${wpid[$w]}"
    start_worker "$w"
    if [ "$ENGINE" = sqlite ]; then
        ok=$(sqlite3 "$TQ_DB" ".timeout 10000" "PRAGMA integrity_check")
        [ "$ok" = ok ] || fail "round $r: integrity_check: $ok"
    fi
done
drained 120 "$Q"
stop_ok "${wpid[w1]}" "${wpid[w2]}"

expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$Q' AND state = 'done'")" 300 "done jobs"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$Q' AND snoozes > 1")" 0 \
    "jobs snoozed more than once"
if [ "$ENGINE" = postgres ]; then
    bad=$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$Q'
               AND result IS DISTINCT FROM convert_to('r:', 'UTF8') || payload")
else
    bad=$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$Q'
               AND (result IS NULL OR CAST(result AS TEXT) <> 'r:' || CAST(payload AS TEXT))")
fi
expect_eq "$bad" 0 "jobs whose result is not their own"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$Q' AND progress_text IS NOT NULL
                  AND progress_text <> 'half of ' || $( [ "$ENGINE" = postgres ] &&
                      echo "convert_from(payload, 'UTF8')" || echo "CAST(payload AS TEXT)")")" 0 \
    "jobs whose progress is not their own"
if [ "$ENGINE" = sqlite ]; then
    expect_eq "$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")" ok "integrity_check at the end"
fi
echo "ok: $ROUNDS kills; 300 jobs done with their own results," \
    "$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$Q' AND snoozes = 1") snoozed once"
