# Concurrency limits, kept by the store for every worker: 4 workers with 4
# slots each, handlers that log their start and end; never more running at
# once than the queue allows, per queue and per group, and every job ran
# exactly once. Groups come from tq enqueue --group and from plain SQL.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

handler h.sh 'echo "S $(date +%s%N) $TQ_JOB_ID ${TQ_GROUP:--}" >>"'"$T"'/log"
sleep 0.2
echo "E $(date +%s%N) $TQ_JOB_ID ${TQ_GROUP:--}" >>"'"$T"'/log"'

# run QUEUE [HANDLER]: 4 workers x 4 slots drain QUEUE with HANDLER (h.sh);
# all must exit 0.
run() {
    local pids=() p
    for w in 1 2 3 4; do
        bg "$TQ" work --queue "$1" --concurrency 4 --drain --name "w$w-$1" -- \
            "$T/${2:-h.sh}" 2>>"$T/work.log"
        pids+=("$BG")
    done
    wait_ok "a worker of $1" "${pids[@]}"
}

# peaks LOG: "TOTAL GROUPMAX" - the most handlers running at once, and the
# most of one group at once, from the start and end lines.
peaks() {
    sort -k2,2n "$1" | awk '
        $1 == "S" { cur++; if (cur > top) top = cur
                    if ($4 != "-") { g[$4]++; if (g[$4] > gtop) gtop = g[$4] } }
        $1 == "E" { cur--; if ($4 != "-") g[$4]-- }
        END { print top + 0, gtop + 0 }'
}

# Each of N jobs of QUEUE started once and ended once, and is done.
ran_once() {
    expect_eq "$(awk '$1 == "S" { print $3 }' "$T/log" | sort | uniq -d | wc -l)" 0 \
        "jobs of $1 started twice"
    expect_eq "$(grep -c '^S' "$T/log")" "$2" "starts logged for $1"
    expect_eq "$(grep -c '^E' "$T/log")" "$2" "ends logged for $1"
    expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$1' AND state = 'done'")" \
        "$2" "done jobs of $1"
}

# 1. At most 3 of the queue at once (16 slots would run 16): the peak is 3.
"$TQ" queue lim --max-running 3 >/dev/null
seq 1 30 | "$TQ" enqueue --queue lim --lines >/dev/null
run lim
ran_once lim 30
expect_eq "$(peaks "$T/log")" "3 0" "peak running in lim (max-running 3)"

# 2. At most 1 per group and 4 in all, groups enqueued in blocks (without
# the group limit the first 4 would all be of one group); the last group's
# jobs come from plain SQL.
: >"$T/log"
"$TQ" queue grp --max-running 4 --max-running-per-group 1 >/dev/null
for g in g1 g2 g3 g4 g5; do
    for i in $(seq 1 8); do "$TQ" enqueue --queue grp --group "$g" "$g-$i" >/dev/null; done
done
for i in $(seq 1 8); do
    sql "INSERT INTO $JOBS (queue, payload, job_group) VALUES ('grp', $(payload_sql "g6-$i"), 'g6')"
done
"$TQ" enqueue --queue grp nogroup >/dev/null
run grp
ran_once grp 49
read -r top gtop < <(peaks "$T/log")
expect_eq "$gtop" 1 "peak running of one group (max-running-per-group 1)"
[ "$top" -ge 2 ] && [ "$top" -le 4 ] || fail "peak running in grp: $top (want 2 to 4)"
expect_eq "$(awk '$1 == "S" && $4 == "g6"' "$T/log" | wc -l)" 8 "plain-SQL jobs run with their group"

# 3. A worker serving a limited queue beside a busy one: the limited jobs
# run as slots free up, not once the busy queue has run dry (jobs held
# ahead for the busy queue would take every slot that frees up).
handler mixed.sh '[ "$TQ_QUEUE" = l ] && sleep 0.1
echo "$TQ_QUEUE $(date +%s%N)" >>"'"$T"'/mixed"'
"$TQ" queue l --max-running 2 >/dev/null
seq 1 600 | "$TQ" enqueue --queue u --lines >/dev/null
seq 1 6 | "$TQ" enqueue --queue l --lines >/dev/null
expect_exit 0 "$TQ" work --queue u --queue l --concurrency 4 --drain -- "$T/mixed.sh"
last_l=$(awk '$1 == "l" { t = $2 } END { print t }' "$T/mixed")
last_u=$(awk '$1 == "u" { t = $2 } END { print t }' "$T/mixed")
expect_eq "$(grep -c '^l ' "$T/mixed")" 6 "limited jobs run beside a busy queue"
[ "$last_l" -lt "$last_u" ] ||
    fail "the limited queue's jobs waited for the busy queue to run dry"

# 4. Short jobs, one at a time per group and no other limit: the workers
# claim several jobs of a group at once (chains, run one after another by
# the worker that claimed them), yet no two of a group ever run at once.
handler fast.sh 'echo "S $(date +%s%N) $TQ_JOB_ID ${TQ_GROUP:--}" >>"'"$T"'/log"
echo "E $(date +%s%N) $TQ_JOB_ID ${TQ_GROUP:--}" >>"'"$T"'/log"'
: >"$T/log"
"$TQ" queue chain --max-running-per-group 1 >/dev/null
for g in c1 c2 c3 c4 c5 c6; do
    seq 1 40 | "$TQ" enqueue --queue chain --group "$g" --lines >/dev/null
done
run chain fast.sh
ran_once chain 240
read -r top gtop < <(peaks "$T/log")
expect_eq "$gtop" 1 "peak running of one group, short jobs (max-running-per-group 1)"

# 5. Removing the limits lets the workers run 16 at once again.
: >"$T/log"
"$TQ" queue lim --max-running 0 >/dev/null
seq 1 32 | "$TQ" enqueue --queue lim --lines >/dev/null
run lim
read -r top gtop < <(peaks "$T/log")
[ "$top" -gt 3 ] || fail "without a limit the peak stayed at $top"
echo "ok: peaks 3 (max-running 3), 1 per group, $top without a limit"
