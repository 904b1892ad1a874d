# kill -9 during commits, 1,000 rounds (below): a producer enqueues in batches and
# two workers acknowledge in groups, and each round one of the three is
# killed at a random instant (they commit all the time, so many kills land
# inside a commit) and started again. Every round the SQLite store passes
# PRAGMA integrity_check; at the end every batch whose enqueue returned
# success is in the store, every job is done, and the history checker
# (tests/history.c) passes over every run.
. "$(dirname "$0")/lib.sh"
# 1,000 rounds on SQLite, whose commits are file writes a kill can cut;
# 300 on PostgreSQL, where a kill only drops a client connection. A third
# of that under the sanitizers, whose pass looks for memory errors.
if [ "$ENGINE" = sqlite ]; then ROUNDS=1000; else ROUNDS=300; fi
ldd "$TQ" | grep -q libasan && ROUNDS=$((ROUNDS / 3))
ROUNDS=${TQ_KILL_ROUNDS:-$ROUNDS}
Q=kr
"$TQ" init >/dev/null
"$TQ" queue $Q --lease 5s --backoff 0 --max-attempts 1000 >/dev/null
LOG=$T/history

# The producer: a loop of `tq enqueue --lines` of 10 new payloads each; a
# batch is recorded as acknowledged only when its enqueue exited 0.
producer() {
    local n=0 c
    while :; do
        seq $((n + 1)) $((n + 10)) >"$T/batch"
        "$TQ" enqueue --lines --queue $Q <"$T/batch" >/dev/null 2>>"$T/producer.log" &
        c=$!
        echo $c >"$T/producer.child"
        if wait $c; then cat "$T/batch" >>"$T/acked"; fi
        n=$((n + 10))
        sleep 0.05
    done
}
bg producer
prod=$BG

declare -A wpid
start_worker() {
    bg "$TQ" work --queue $Q --name "$1" --concurrency 2 --quiet -- "$TQ_HISTORY" run "$LOG" "$1" \
        2>>"$T/$1.log"
    wpid[$1]=$BG
}
start_worker w1
start_worker w2
wait_for 30 test -s "$T/acked"

for ((r = 1; r <= ROUNDS; r++)); do
    sleep "0.0$((RANDOM % 5 + 1))"
    case $((RANDOM % 3)) in
    0) # the producer's enqueue, if one is running (ours: a child of the loop)
        c=$(cat "$T/producer.child")
        if [ "$(cut -d' ' -f4 "/proc/$c/stat" 2>/dev/null)" = "$prod" ] &&
            grep -q enqueue "/proc/$c/cmdline" 2>/dev/null; then
            kill -9 "$c" 2>/dev/null || true
        fi
        ;;
    *)
        w=w$((RANDOM % 2 + 1))
        kill -9 "${wpid[$w]}"
        wait_rc "${wpid[$w]}"
        "$TQ_HISTORY" kill "$LOG" "$w"
        start_worker "$w"
        ;;
    esac
    if [ "$ENGINE" = sqlite ]; then
        ok=$(sqlite3 "$TQ_DB" ".timeout 10000" "PRAGMA integrity_check")
        [ "$ok" = ok ] || fail "round $r: integrity_check: $ok"
    fi
done

kill -TERM "$prod"
wait_rc "$prod"
# An enqueue it had started ends on its own: wait for it (at most 10 s).
c=$(cat "$T/producer.child")
for _ in $(seq 200); do
    grep -q enqueue "/proc/$c/cmdline" 2>/dev/null || break
    sleep 0.05
done
# Drain: the jobs of the last killed workers come back at once (their names
# restarted) or after their 5 s lease.
drained 120 "$Q"
stop_ok "${wpid[w1]}" "${wpid[w2]}"

if [ "$ENGINE" = postgres ]; then
    sql "SELECT convert_from(payload, 'UTF8') FROM $JOBS WHERE queue = '$Q'" | sort >"$T/stored"
else
    ok=$(sqlite3 "$TQ_DB" "PRAGMA integrity_check")
    expect_eq "$ok" ok "integrity_check at the end"
    sql "SELECT CAST(payload AS TEXT) FROM $JOBS WHERE queue = '$Q'" | sort >"$T/stored"
fi
sort "$T/acked" >"$T/acked.sorted"
expect_eq "$(comm -23 "$T/acked.sorted" "$T/stored" | wc -l)" 0 "acknowledged enqueues missing"
expect_eq "$(uniq -d "$T/stored" | wc -l)" 0 "payloads stored twice"
history_check $Q "$LOG" --all-done
echo "ok: $ROUNDS rounds, $(wc -l <"$T/acked") jobs acknowledged, $(wc -l <"$T/stored") stored, $(grep -c ^K "$LOG") worker kills"
