# A queue's new settings bind every start within SETTINGS_FRESH_US (50 ms)
# of their commit: a worker starts a job it holds (claimed ahead) only
# while the store said, that recently, that the queue is as the worker
# believes (a read of the settings, or a claim that took jobs from it); or,
# where the store took longer than 30 ms to answer that read or claim,
# within 20 ms of its answer. The checks below allow BOUND_US: 50 ms, and
# 50 more for the answers of a busy machine (a SQLite claim waits for the
# write lock).
# Starts are dated by the worker (started_at, its clock: the store's own
# on the same machine), the commit by the end of `tq queue`.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
BOUND_US=100000

now_us() { date +%s%6N; }
# started_us QUEUE: the start of every job of QUEUE that started, in
# microseconds since the epoch, one a line.
started_us() {
    if [ "$ENGINE" = postgres ]; then
        sql "SELECT (extract(epoch FROM started_at) * 1000000)::int8 FROM $JOBS
             WHERE queue = '$1' AND started_at IS NOT NULL ORDER BY 1"
    else
        sql "SELECT started_at FROM tq_jobs WHERE queue = '$1'
             AND started_at IS NOT NULL ORDER BY 1"
    fi
}

# 1. Jobs held behind a long one. Short jobs first (the worker learns to
# hold a few ahead), then one that runs 0.5 s with more held behind it; the
# queue is paused meanwhile: when the long job ends, none of the held ones
# starts, whatever the worker's last settings read said. (A worker that
# read its settings once a second started them.)
"$TQ" queue held --lease 1h >/dev/null
handler long.sh 'read -r p; echo "$p" >>"'"$T"'/held.runs"; [ "$p" != long ] || sleep 0.5'
{ seq 1 30; echo long; seq 31 60; } | "$TQ" enqueue --lines --queue held >/dev/null
bg "$TQ" work --queue held --name hw --prefetch 4 --quiet -- "$T/long.sh"
w=$BG
wait_for 10 grep -qx long "$T/held.runs"
held() { [ "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'held' AND state = 'running'")" -ge 2 ]; }
held || fail "no job held behind the long one"
"$TQ" queue held --pause >/dev/null
sleep 1.5 # the long job ends 0.5 s after it began
expect_eq "$(tail -1 "$T/held.runs")" long "the last job started, the paused queue's held ones after it"
"$TQ" queue held --resume >/dev/null
wait_for 20 sh -c "[ \$(wc -l <'$T/held.runs') -ge 61 ]"
kill -TERM "$w"
wait_rc "$w"

# 2. A busy queue paused: four workers taking short jobs as fast as they
# can; no job starts later than the bound after the pause returned.
"$TQ" queue busy --lease 1h >/dev/null
seq 1 200000 | "$TQ" enqueue --lines --queue busy >/dev/null
for i in 1 2 3 4; do
    bg "$TQ" work --queue busy --name "b$i" --concurrency 4 --quiet -- \
        "$TQ_HISTORY" run "$T/busy.log" "b$i" 0
    ws[$i]=$BG
done
wait_for 30 sh -c "[ \$('$TQ' stats --queue busy --json | jq .counts.done) -gt 300 ]"
"$TQ" queue busy --pause >/dev/null
paused=$(now_us)
sleep 0.5
last=$(started_us busy | tail -1)
echo "busy queue: last start $(((last - paused) / 1000)) ms after the pause returned"
[ "$last" -le $((paused + BOUND_US)) ] ||
    fail "a job started $(((last - paused) / 1000)) ms after the pause (allowed: 100 ms)"

# 3. A limit set on the busy queue: once the bound has passed, the jobs
# that start run one at a time (those started before may still run).
"$TQ" queue busy --max-running 1 >/dev/null
set_at=$(now_us)
"$TQ" queue busy --resume >/dev/null
sleep 2
for i in 1 2 3 4; do kill -TERM "${ws[$i]}"; done
for i in 1 2 3 4; do wait_rc "${ws[$i]}"; done
if [ "$ENGINE" = postgres ]; then
    sql "SELECT id FROM $JOBS WHERE queue = 'busy'
         AND started_at > to_timestamp($((set_at + BOUND_US)) / 1e6)"
else
    sql "SELECT id FROM tq_jobs WHERE queue = 'busy' AND started_at > $((set_at + BOUND_US))"
fi | sort >"$T/after.ids"
[ -s "$T/after.ids" ] || fail "no job ran under the limit"
# Their runs as the handlers saw them (inside the worker's own), by start.
awk 'NR == FNR { want[$1] = 1; next }
     $1 == "S" && ($2 in want) { s[$2] = $6 }
     $1 == "F" && ($2 in want) { f[$2] = $6 }
     END { for (j in s) print s[j], f[j] }' "$T/after.ids" "$T/busy.log" | sort -n >"$T/after"
overlaps=$(awk 'NR > 1 && $1 < end { n++ } { end = $2 } END { print n + 0 }' "$T/after")
echo "limit: $(wc -l <"$T/after") jobs started after the bound, $overlaps overlapping"
expect_eq "$overlaps" 0 "jobs started after the bound that ran beside one another"
echo ok
