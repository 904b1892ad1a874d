# A batch's callback under kill -9 (tq enqueue --after ... --when ended):
# 1,000 parents, one in seven of which its handler discards (dead for
# good), worked by two workers of which one is killed at a random instant
# and started again, round after round; their child waits for the end of
# every parent in a queue of its own. The child runs once, after the last
# parent ended, and finds which parents were done and which failed. A
# plain-SQL child that waits for the ends cannot claim one early.
. "$(dirname "$0")/lib.sh"
if [ "$ENGINE" = sqlite ]; then ROUNDS=20; else ROUNDS=12; fi
ldd "$TQ" | grep -q libasan && ROUNDS=$((ROUNDS / 2))
N=1000
"$TQ" init >/dev/null
"$TQ" queue f --lease 2s --backoff 0 --max-attempts 1000 >/dev/null
seq 1 $N | "$TQ" enqueue --queue f --lines --json | jq -r '.ids[]' >"$T/parents"
kid=$("$TQ" enqueue --queue c --after-file "$T/parents" --when ended callback)
expect_eq "$(job "$kid" state) $(job "$kid" waiting_for) $(job "$kid" parents_when)" \
    "waiting $N ended" "the callback waits for every parent"
# Those the handler discards: the payloads 7, 14, ...
paste -d' ' "$T/parents" <(seq 1 $N) | awk '$2 % 7 == 0 { print $1 }' >"$T/want_failed"
paste -d' ' "$T/parents" <(seq 1 $N) | awk '$2 % 7 != 0 { print $1 }' >"$T/want_done"

handler parent.sh 'p=$(cat); echo "$TQ_JOB_ID" >>"'"$T"'/runs"
[ $((p % 7)) -eq 0 ] && echo "discard payload $p fails for good" >&3
exit 0'
handler child.sh 'echo "$TQ_JOB_ID $TQ_CLAIM" >>"'"$T"'/child"
ids() { if [ -n "${2:-}" ]; then tr "\n" , <"$2"; else printf %s "$1"; fi; }
ids "${TQ_PARENTS_DONE-}" "${TQ_PARENTS_DONE_FILE:-}" >"'"$T"'/got_done"
ids "${TQ_PARENTS_FAILED-}" "${TQ_PARENTS_FAILED_FILE:-}" >"'"$T"'/got_failed"'
bg "$TQ" work --queue c --name kid --quiet -- "$T/child.sh" 2>>"$T/kid.log"
kidw=$BG

declare -A wpid
start_worker() {
    bg "$TQ" work --queue f --name "$1" --concurrency 4 --quiet -- "$T/parent.sh" \
        2>>"$T/$1.log"
    wpid[$1]=$BG
}
start_worker w1
start_worker w2
kill_rounds $ROUNDS start_worker
ended() {
    [ "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'f' AND state IN ('done', 'dead')")" = $N ]
}
wait_for 120 ended
wait_for 30 test -s "$T/child"
sleep 0.5 # a second run would show by now
stop_ok "${wpid[w1]}" "${wpid[w2]}" "$kidw"

expect_eq "$(wc -l <"$T/child")" 1 "runs of the callback"
expect_eq "$(job "$kid" state) $(job "$kid" waiting_for) $(job "$kid" claims)" "done 0 1" \
    "the callback after the rounds"
expect_eq "$(sort -u "$T/runs" | wc -l)" $N "parents that ran"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'f' AND state = 'dead'")" \
    "$(wc -l <"$T/want_failed")" "parents dead"
expect_eq "$(tr , '\n' <"$T/got_done" | sort -n)" "$(sort -n "$T/want_done")" \
    "the parents the callback found done"
expect_eq "$(tr , '\n' <"$T/got_failed" | sort -n)" "$(sort -n "$T/want_failed")" \
    "the parents the callback found failed"
"$TQ" show "$kid" --json >"$T/show.json"
expect_eq "$(jq '.parents_failed | length' "$T/show.json") $(jq '.parents_done | length' "$T/show.json")" \
    "$(wc -l <"$T/want_failed") $(wc -l <"$T/want_done")" "tq show --json's ends"
if [ "$ENGINE" = postgres ]; then DEPS=$SCHEMA.deps; else DEPS=tq_deps; fi
early=$(sql "SELECT count(*) FROM $JOBS p, $DEPS d, $JOBS c WHERE d.child = $kid
    AND p.id = d.parent AND c.id = $kid AND p.finished_at > c.started_at")
expect_eq "$early" 0 "parents that ended after the callback started"

# Plain SQL: a child waiting for the end of a running parent and a dead
# one, whose insert claims the running one ended: the store counts what is.
run=$("$TQ" enqueue --queue g run)
dead=$(head -1 "$T/want_failed")
if [ "$ENGINE" = postgres ]; then
    sql "WITH c AS (INSERT INTO $JOBS (queue, payload) VALUES ('g', $(payload_sql sql)) RETURNING id)
        INSERT INTO $DEPS (parent, child, release_when, parent_state)
        SELECT p, c.id, 'ended', 'done' FROM c, unnest(ARRAY[$dead, $run]::int8[]) p"
else
    sql "BEGIN; INSERT INTO tq_jobs (queue, payload) VALUES ('g', 'sql');
        INSERT INTO tq_deps (parent, child, release_when, parent_state)
        VALUES ($dead, last_insert_rowid(), 'ended', 'done'),
               ($run, last_insert_rowid(), 'ended', 'done'); COMMIT;"
fi
plain=$(sql "SELECT max(id) FROM $JOBS WHERE queue = 'g'")
expect_eq "$(job "$plain" state) $(job "$plain" waiting_for)" "waiting 1" \
    "the plain-SQL child waits for the running parent"
expect_eq "$(jq -c '[.parents_done, .parents_failed]' <("$TQ" show "$plain" --json))" \
    "[[],[$dead]]" "the plain-SQL child's ends so far"
sql "UPDATE $DEPS SET release_when = 'done' WHERE child = $plain" 2>"$T/err" &&
    fail "an UPDATE changed what releases a child"
grep -q "dependencies do not change" "$T/err" || fail "the UPDATE's refusal: $(cat "$T/err")"
"$TQ" work --queue g --drain --quiet -- true
expect_eq "$(job "$plain" state)" done "the plain-SQL child, once its parent ended"
echo "ok: $ROUNDS kills, $(wc -l <"$T/runs") parent runs for $N parents"
