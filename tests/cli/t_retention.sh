# Retention in the store: tq queue Q --retain-done DUR --retain-dead DUR;
# a running worker of the queue deletes its finished jobs once they are
# older (dead and cancelled ones by --retain-dead), keeps the younger ones
# and every other queue's; 0 keeps them again until pruned; bad values are
# refused and change nothing.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
count() { sql "SELECT count(*) FROM $JOBS WHERE queue = '$1'${2:+ AND state = '$2'}"; }

expect_exit 0 "$TQ" queue r --retain-done 2s --retain-dead 2s --max-attempts 1
expect_exit 0 "$TQ" queue d --retain-dead 2s --max-attempts 1
expect_exit 0 "$TQ" queue k --max-attempts 1
expect_eq "$("$TQ" queue r --json | jq -c '[.retain_done_us, .retain_dead_us]')" \
    "[2000000,2000000]" "the settings, as --json gives them"
"$TQ" queue | grep -q "^r .*done kept 2s, dead kept 2s" || fail "tq queue: $("$TQ" queue)"
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
sleep 2.2 # all of them older than 2s

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
