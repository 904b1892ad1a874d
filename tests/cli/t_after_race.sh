# Producers racing workers: while three workers finish 2,000 parents, two
# producers enqueue 300 children, each after 5 parents drawn at random
# (ready, running or done by then), and a fourth worker runs the children
# as they become ready. A child added while its last parent's
# acknowledgement commits must still be released, once: at the end every
# child ran exactly once, after every one of its parents had finished, and
# none is left waiting.
. "$(dirname "$0")/lib.sh"
N=2000
KIDS=150 # per producer
"$TQ" init >/dev/null
seq 1 $N | "$TQ" enqueue --queue p --lines --json | jq -r '.ids[]' >"$T/parents"
mapfile -t P <"$T/parents"

# Parents take 20 ms each, so that the producers' children land among
# them (ready, running and done), which the end checks.
handler parent.sh 'sleep 0.02; exec "'"$TQ_RECORD"'" "'"$T"'/runs" p'
for w in 1 2 3; do
    bg "$TQ" work --queue p --name "p$w" --concurrency 4 --drain --quiet -- "$T/parent.sh" \
        2>>"$T/p$w.log"
    pw[$w]=$BG
done
producer() {
    local i j ids
    for i in $(seq 1 $KIDS); do
        ids=""
        for j in 1 2 3 4 5; do ids="$ids${ids:+,}${P[$((RANDOM % N))]}"; done
        "$TQ" enqueue --queue c --after "$ids" "kid $1 $i" >>"$T/kids$1" 2>>"$T/producer$1.log" ||
            echo "enqueue failed" >>"$T/producer$1.log"
    done
}
bg producer 1
pr1=$BG
bg producer 2
pr2=$BG
bg "$TQ" work --queue c --name kids --concurrency 4 --quiet -- "$TQ_RECORD" "$T/runs" c \
    2>>"$T/kids.log"
kw=$BG
for p in "$pr1" "$pr2" "${pw[1]}" "${pw[2]}" "${pw[3]}"; do
    wait_rc "$p"
    expect_eq "$RC" 0 "process $p"
done
grep -q "enqueue failed" "$T"/producer*.log && fail "an enqueue failed: $(cat "$T"/producer*.log)"
expect_eq "$(cat "$T/kids1" "$T/kids2" | wc -l)" $((2 * KIDS)) "children enqueued"
all_done() {
    [ "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'c' AND state = 'done'")" = $((2 * KIDS)) ]
}
wait_for 60 all_done
kill -TERM "$kw"
wait_rc "$kw"
expect_eq "$RC" 0 "the children's worker"

expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE state <> 'done'")" 0 "jobs not done"
expect_eq "$(grep -c ' c ' "$T/runs")" $((2 * KIDS)) "runs of the children"
expect_eq "$(grep ' c ' "$T/runs" | cut -d' ' -f1 | sort -u | wc -l)" $((2 * KIDS)) \
    "distinct children that ran"
if [ "$ENGINE" = postgres ]; then D=$SCHEMA.deps; else D=tq_deps; fi
expect_eq "$(sql "SELECT count(*) FROM $JOBS c, $D d, $JOBS p WHERE c.queue = 'c'
    AND d.child = c.id AND p.id = d.parent AND p.finished_at > c.started_at")" 0 \
    "parents that finished after their child started"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'c' AND waiting_for <> 0")" 0 \
    "children still counting a parent"
# The race was run: many children came while one of their parents had not
# finished.
early=$(sql "SELECT count(DISTINCT c.id) FROM $JOBS c, $D d, $JOBS p WHERE c.queue = 'c'
    AND d.child = c.id AND p.id = d.parent AND p.finished_at > c.created_at")
[ "$early" -ge 30 ] || fail "only $early children came before a parent finished"
echo "ok: $early of $((2 * KIDS)) children enqueued before one of their parents finished"
