# Retention in the store: tq queue Q --retain-done DUR --retain-dead DUR;
# a running worker of the queue deletes its finished jobs once they are
# older (dead and cancelled ones by --retain-dead), keeps the younger ones
# and every other queue's; 0 keeps them again until pruned; bad values are
# refused and change nothing.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
count() { sql "SELECT count(*) FROM $JOBS WHERE queue = '$1'${2:+ AND state = '$2'}"; }

expect_exit 0 "$TQ" queue r --retain-done 5s --retain-dead 5s --max-attempts 1
expect_exit 0 "$TQ" queue d --retain-dead 5s --max-attempts 1
expect_exit 0 "$TQ" queue k --max-attempts 1
expect_eq "$("$TQ" queue r --json | jq -c '[.retain_done_us, .retain_dead_us]')" \
    "[5000000,5000000]" "the settings, as --json gives them"
"$TQ" queue | grep -q "^r .*done kept 5s, dead kept 5s" || fail "tq queue: $("$TQ" queue)"
"$TQ" queue | grep "^k " | grep -q "done kept\|dead kept" && fail "k keeps nothing: $("$TQ" queue)"

handler h.sh '[ "$(cat)" != bad ]'
for q in r d k; do
    seq 30 | "$TQ" enqueue --queue "$q" --lines >/dev/null
    printf 'bad\nbad\n' | "$TQ" enqueue --queue "$q" --lines >/dev/null
done
c=$("$TQ" enqueue --queue d x)
"$TQ" cancel "$c" >/dev/null
expect_exit 0 "$TQ" work --queue r --queue d --queue k --concurrency 4 --drain -- "$T/h.sh"
for q in r d k; do
    expect_eq "$(count "$q" done) $(count "$q" dead)" "30 2" "queue $q ran"
done
sleep 5.2 # all of them older than 5s (the drain above kept them: younger)

# One that finished just now is younger than that: kept.
y=$("$TQ" enqueue --queue r young)
expect_exit 0 "$TQ" work --queue r --drain -- "$T/h.sh"
"$TQ" work --queue r --queue d --queue k --poll 50ms -- "$T/h.sh" 2>"$T/worker.log" &
wpid=$!
for _ in $(seq 100); do
    [ "$(count r)" = 1 ] && [ "$(count d dead)$(count d cancelled)" = 00 ] && break
    sleep 0.1
done
kill -TERM "$wpid"
wait "$wpid" || fail "the worker: $(cat "$T/worker.log")"
expect_eq "$(count r)" 1 "r: only the young one left"
expect_eq "$(job "$y" state)" done "the young one"
expect_eq "$(count d done) $(count d dead) $(count d cancelled)" "30 0 0" \
    "d: dead and cancelled gone, done kept"
expect_eq "$(count k)" 32 "k keeps everything"

# Under load, with kill -9: three workers of a queue that keeps done jobs
# 1s run 600 jobs (each run recorded) while one of them is killed and
# started again, five times; every job ran, and once all of them finished
# more than a second ago, none is left: a retention deletes what is done,
# never what is still to run.
"$TQ" queue load --retain-done 1s --lease 2s --backoff 0 >/dev/null
handler rec.sh 'cat >/dev/null; echo "$TQ_JOB_ID" >>"'"$T"'/runs"; sleep 0.01'
seq 600 | "$TQ" enqueue --queue load --lines >/dev/null
first=$(sql "SELECT min(id) FROM $JOBS WHERE queue = 'load'")
declare -A wpid
start_worker() {
    bg "$TQ" work --queue load --name "$1" --concurrency 2 --poll 50ms --quiet -- \
        "$T/rec.sh" 2>>"$T/$1.log"
    wpid[$1]=$BG
}
start_worker w1
start_worker w2
start_worker w3
for _ in 1 2 3 4 5; do
    sleep 0.3
    kill -9 "${wpid[w2]}"
    wait_rc "${wpid[w2]}"
    start_worker w2
done
left_load() { [ "$(count load)" = 0 ]; }
wait_for 60 left_load
for w in w1 w2 w3; do
    kill -TERM "${wpid[$w]}"
    wait_rc "${wpid[$w]}"
done
expect_eq "$(sort -un "$T/runs" | wc -l)" 600 "every job ran"
expect_eq "$(sort -un "$T/runs" | head -1) $(sort -un "$T/runs" | tail -1)" \
    "$first $((first + 599))" "the jobs that ran are those enqueued"

# 0: kept until pruned again.
expect_exit 0 "$TQ" queue r --retain-done 0 --retain-dead 0
"$TQ" queue | grep "^r " | grep -q "done kept\|dead kept" && fail "r still keeps: $("$TQ" queue)"

# Bad values: one line, exit 2, nothing stored.
before=$(fingerprint)
for bad in "--retain-done 500ms" "--retain-done -1s" "--retain-dead 3651d" "--retain-dead x"; do
    # shellcheck disable=SC2086
    expect_exit 2 "$TQ" queue r $bad
    expect_eq "$(wc -l <"$T/err")" 1 "lines for $bad"
done
[ "$(fingerprint)" = "$before" ] || fail "a refused setting changed the store"
echo ok
