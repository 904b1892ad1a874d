# kill -9 during a fan-in: 3,000 parents worked by two workers, one of which
# is killed at a random instant and started again, round after round, while
# their child waits in a queue of its own whose worker is never killed.
# However the kills cut the parents' acknowledgements (and the release of
# the child that is part of them), the child runs once, after every parent
# is done, and waits for no parent that is done; the SQLite store passes
# PRAGMA integrity_check.
. "$(dirname "$0")/lib.sh"
if [ "$ENGINE" = sqlite ]; then ROUNDS=40; else ROUNDS=25; fi
ldd "$TQ" | grep -q libasan && ROUNDS=$((ROUNDS / 2))
N=3000
"$TQ" init >/dev/null
"$TQ" queue f --lease 2s --backoff 0 --max-attempts 1000 >/dev/null
seq 1 $N | "$TQ" enqueue --queue f --lines --json | jq -r '.ids[]' >"$T/parents"
kid=$("$TQ" enqueue --queue c --after-file "$T/parents" child)
expect_eq "$(job "$kid" waiting_for)" $N "the child waits for every parent"

handler child.sh 'echo "child $TQ_JOB_ID $TQ_CLAIM" >>"'"$T"'/child"'
bg "$TQ" work --queue c --name kid --quiet -- "$T/child.sh" 2>>"$T/kid.log"
kidw=$BG

declare -A wpid
start_worker() {
    bg "$TQ" work --queue f --name "$1" --concurrency 4 --quiet -- "$TQ_RECORD" "$T/runs" "$1" \
        2>>"$T/$1.log"
    wpid[$1]=$BG
}
intact() {
    if [ "$ENGINE" = sqlite ]; then
        expect_eq "$(sqlite3 "$TQ_DB" 'PRAGMA integrity_check')" ok "integrity after round $1"
    fi
}
start_worker w1
start_worker w2
kill_rounds $ROUNDS start_worker intact
done_parents() { [ "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'f' AND state = 'done'")" = $N ]; }
wait_for 120 done_parents
wait_for 30 test -s "$T/child"
sleep 0.5 # a second run would show by now
stop_ok "${wpid[w1]}" "${wpid[w2]}" "$kidw"

expect_eq "$(wc -l <"$T/child")" 1 "runs of the child"
expect_eq "$(job "$kid" state) $(job "$kid" waiting_for) $(job "$kid" claims)" "done 0 1" \
    "the child after the rounds"
expect_eq "$(cut -d' ' -f1 "$T/runs" | sort -u | wc -l)" $N "parents that ran"
if [ "$ENGINE" = postgres ]; then
    early=$(sql "SELECT count(*) FROM $JOBS p, $SCHEMA.deps d, $JOBS c WHERE d.child = $kid
        AND p.id = d.parent AND c.id = $kid AND p.finished_at > c.started_at")
else
    early=$(sql "SELECT count(*) FROM tq_jobs p, tq_deps d, tq_jobs c WHERE d.child = $kid
        AND p.id = d.parent AND c.id = $kid AND p.finished_at > c.started_at")
fi
expect_eq "$early" 0 "parents that ended after the child started"
echo "ok: $ROUNDS kills, $(wc -l <"$T/runs") parent runs for $N parents"
