# Dependencies: tq enqueue --after. A diamond runs in order; a job with
# 10,000 parents runs once, after the last of them is done, whichever of
# four workers finishes it, and gets their ids (TQ_PARENTS_FILE); a dead
# parent cancels its descendants and a retry of it brings them back; a
# cancelled waiting job cancels its children; unknown parents and bad ids
# are refused with nothing stored; plain SQL adds parents as docs/sql.md
# shows, and the store refuses parents added to a claimed job.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
id_of() { "$TQ" enqueue --json "$@" | jq -r .id; }
LOG=$T/runs

# A handler that logs "start ID" and "end ID" around a short sleep, and
# what it was told of its parents.
handler h.sh '
echo "start $TQ_JOB_ID ${TQ_PARENTS:-none}" >>"'"$T"'/runs"
sleep 0.1
echo "end $TQ_JOB_ID" >>"'"$T"'/runs"'
at() { grep -n "^$1 $2\( \|$\)" "$LOG" | cut -d: -f1; } # line of "start|end ID"

# 1. A diamond: A -> B, A -> C, (B, C) -> D.
a=$(id_of --queue dia A)
b=$(id_of --queue dia --after "$a" B)
c=$(id_of --queue dia --after "$a" C)
d=$(id_of --queue dia --after "$b,$c" D)
expect_eq "$(job "$b" state) $(job "$d" state)" "waiting waiting" "children before their parents ran"
expect_eq "$(job "$d" parents) $(job "$d" waiting_for)" "2 2" "D's parents"
expect_eq "$("$TQ" show "$d" --json | jq -c .parent_ids)" "[$b,$c]" "D's parent ids"
expect_eq "$("$TQ" stats --queue dia --json | jq .counts.waiting)" 3 "tq stats --json: waiting"
"$TQ" stats --queue dia | grep -q "^waiting *3$" || fail "tq stats does not count 3 waiting"
"$TQ" list --state waiting --queue dia | grep -c waiting | grep -qx 3 || fail "tq list --state waiting"
"$TQ" work --queue dia --concurrency 4 --drain -- "$T/h.sh" 2>>"$T/work.log" || fail "the worker failed"
for j in "$a" "$b" "$c" "$d"; do expect_eq "$(job "$j" state)" done "job $j"; done
[ "$(at end "$a")" -lt "$(at start "$b")" ] && [ "$(at end "$a")" -lt "$(at start "$c")" ] ||
    fail "B or C started before A ended: $(cat "$LOG")"
[ "$(at end "$b")" -lt "$(at start "$d")" ] && [ "$(at end "$c")" -lt "$(at start "$d")" ] ||
    fail "D started before B and C ended: $(cat "$LOG")"
grep -q "^start $d $b,$c$" "$LOG" || fail "D's handler did not get TQ_PARENTS=$b,$c: $(cat "$LOG")"
grep -q "^start $a none$" "$LOG" || fail "A's handler got a TQ_PARENTS"
expect_eq "$(grep -c "^start" "$LOG")" 4 "runs of the diamond"

# 2. A parent already done does not hold a child back.
e=$(id_of --queue dia --after "$a,$d" E)
expect_eq "$(job "$e" state) $(job "$e" waiting_for)" "ready 0" "a child of done parents"

# 3. Bad input: nothing stored.
before=$(fingerprint)
expect_exit 1 "$TQ" enqueue --queue dia --after "$a,999999" X
grep -q "parent job 999999 does not exist" "$T/err" || fail "unknown parent: $(cat "$T/err")"
for bad in 0 -3 abc "1,,x" "$a;2"; do
    expect_exit 2 "$TQ" enqueue --queue dia --after "$bad" X
    grep -q "invalid job id" "$T/err" || fail "--after '$bad': $(cat "$T/err")"
done
expect_exit 2 "$TQ" enqueue --queue dia --after "$a" --key k X
expect_exit 2 "$TQ" enqueue --queue dia --after-file "$T/none" X
expect_eq "$(fingerprint)" "$before" "the store after refused enqueues"

# 4. A dead parent cancels its descendants; a retry brings them back.
p=$(id_of --queue cas --max-attempts 1 P)
k1=$(id_of --queue cas --after "$p" K1)
k2=$(id_of --queue cas --after "$k1" K2)
other=$(id_of --queue cas O)
k3=$(id_of --queue cas --after "$p,$other" K3)
handler fail.sh 'case "$(cat)" in P) exit 3 ;; *) exit 0 ;; esac'
"$TQ" work --queue cas --drain -- "$T/fail.sh" 2>>"$T/work.log" || fail "the worker failed"
expect_eq "$(job "$p" state)" dead "the failing parent"
expect_eq "$(job "$k1" state) $(job "$k1" last_error)" "cancelled parent job $p ended dead" "child"
expect_eq "$(job "$k2" state) $(job "$k2" last_error)" "cancelled parent job $k1 ended cancelled" \
    "grandchild"
expect_eq "$(job "$k3" state) $(job "$other" state)" "cancelled done" "a child of a dead and a done parent"
# A child enqueued after a dead parent is cancelled at once, and says so.
k4=$("$TQ" enqueue --queue cas --after "$p" K4 2>"$T/err")
expect_eq "$(job "$k4" state)" cancelled "a child of a dead parent"
grep -q "job $k4 is cancelled at once: parent job $p is dead" "$T/err" || fail "enqueue: $(cat "$T/err")"
expect_eq "$("$TQ" retry "$k1")" "$k1 cancelled again: parent job $p is dead" "retry of a held child"
"$TQ" retry "$p" >/dev/null
for j in "$k1" "$k2" "$k3" "$k4"; do
    expect_eq "$(job "$j" state) $(job "$j" last_error)" "waiting null" "job $j after its parent's retry"
done
handler ok.sh 'cat >/dev/null'
"$TQ" work --queue cas --drain -- "$T/ok.sh" 2>>"$T/work.log" || fail "the worker failed"
for j in "$p" "$k1" "$k2" "$k3" "$k4"; do expect_eq "$(job "$j" state)" done "job $j"; done

# 5. Cancelling a waiting job cancels its children.
r=$(id_of --queue can R)
w1=$(id_of --queue can --after "$r" W1)
w2=$(id_of --queue can --after "$w1" W2)
expect_eq "$("$TQ" cancel "$w1")" "$w1 cancelled" "tq cancel of a waiting job"
expect_eq "$(job "$w2" state) $(job "$w2" last_error)" "cancelled parent job $w1 ended cancelled" \
    "the child of a cancelled job"
expect_eq "$(job "$r" state)" ready "the parent of a cancelled job"

# 6. Plain SQL: the child, then its parents, in one transaction.
x=$(id_of --queue sql X)
y=$(id_of --queue sql Y)
if [ "$ENGINE" = postgres ]; then
    sql "WITH c AS (INSERT INTO $JOBS (queue, payload) VALUES ('sql', convert_to('Z', 'UTF8'))
         RETURNING id)
         INSERT INTO $SCHEMA.deps (parent, child) SELECT p, c.id FROM c, unnest(ARRAY[$x, $y]) p"
    z=$(sql "SELECT max(id) FROM $JOBS")
    sql "INSERT INTO $SCHEMA.deps (parent, child) VALUES (0, $z)" 2>"$T/err" &&
        fail "the store took an unknown parent"
    grep -q "parent job 0 does not exist" "$T/err" || fail "plain SQL: $(cat "$T/err")"
else
    sql "BEGIN; INSERT INTO tq_jobs (queue, payload) VALUES ('sql', 'Z');
         INSERT INTO tq_deps (parent, child) VALUES ($x, last_insert_rowid()),
                                                    ($y, last_insert_rowid()); COMMIT;"
    z=$(sql "SELECT max(id) FROM tq_jobs")
    sql "INSERT INTO tq_deps (parent, child) VALUES (0, $z)" 2>"$T/err" &&
        fail "the store took an unknown parent"
    grep -q "a parent job does not exist" "$T/err" || fail "plain SQL: $(cat "$T/err")"
fi
expect_eq "$(job "$z" state) $(job "$z" parents)" "waiting 2" "a child inserted by plain SQL"
"$TQ" work --queue sql --drain -- "$T/h.sh" 2>>"$T/work.log" || fail "the worker failed"
expect_eq "$(job "$z" state)" done "the plain-SQL child"
grep -q "^start $z $x,$y$" "$LOG" || fail "the plain-SQL child's TQ_PARENTS"
if [ "$ENGINE" = postgres ]; then
    sql "INSERT INTO $SCHEMA.deps (parent, child) VALUES ($a, $k4)" 2>"$T/err" &&
        fail "the store gave a claimed job a parent"
else
    sql "INSERT INTO tq_deps (parent, child) VALUES ($a, $k4)" 2>"$T/err" &&
        fail "the store gave a claimed job a parent"
fi
if [ "$ENGINE" = postgres ]; then
    grep -q "a job gets its parents in the transaction that inserts it" "$T/err" ||
        fail "late parent: $(cat "$T/err")"
else
    grep -q "a job gets its parents before its first claim" "$T/err" || fail "late parent: $(cat "$T/err")"
fi
# Parents for a job that has children already: refused, nothing stored.
before=$(sql "SELECT count(*) FROM $JOBS")
if [ "$ENGINE" = postgres ]; then
    sql "INSERT INTO $JOBS (queue, payload) VALUES ('sql', '\x43'), ('sql', '\x47');
         INSERT INTO $SCHEMA.deps (parent, child) SELECT max(id) - 1, max(id) FROM $JOBS;
         INSERT INTO $SCHEMA.deps (parent, child) SELECT $x, max(id) - 1 FROM $JOBS" \
        2>"$T/err" && fail "the store gave parents to a job with children"
else
    sql "BEGIN; INSERT INTO tq_jobs (queue, payload) VALUES ('sql', 'C'), ('sql', 'G');
         INSERT INTO tq_deps (parent, child) SELECT max(id) - 1, max(id) FROM tq_jobs;
         INSERT INTO tq_deps (parent, child) SELECT $x, max(id) - 1 FROM tq_jobs; COMMIT;" \
        2>"$T/err" && fail "the store gave parents to a job with children"
fi
grep -q "add a job's parents before its children" "$T/err" || fail "parents after children: $(cat "$T/err")"
expect_eq "$(sql "SELECT count(*) FROM $JOBS")" "$before" "jobs after a refused plain-SQL insert"
# A dependency is counted once, and kept while its child is.
for q in "INSERT OR REPLACE INTO tq_deps (parent, child) VALUES ($x, $z)" \
    "UPDATE tq_deps SET parent = $y WHERE child = $z" "DELETE FROM tq_deps WHERE child = $z"; do
    [ "$ENGINE" = postgres ] && q=$(sed "s/INSERT OR REPLACE INTO tq_deps/INSERT INTO $SCHEMA.deps/;
        s/tq_deps/$SCHEMA.deps/" <<<"$q")
    sql "$q" 2>"$T/err" && fail "the store took: $q"
    grep -q "counted already\|do not change\|duplicate key" "$T/err" || fail "$q: $(cat "$T/err")"
done
expect_eq "$(job "$z" parents)" 2 "the plain-SQL child's parents after refused changes"
: >"$T/empty"
expect_exit 2 "$TQ" enqueue --queue sql --after-file "$T/empty" X
grep -q "holds no job id" "$T/err" || fail "empty --after-file: $(cat "$T/err")"
# A parent newer than its child would allow a cycle.
sql "INSERT INTO $([ "$ENGINE" = postgres ] && echo "$SCHEMA.deps" || echo tq_deps) (parent, child)
     VALUES ($z, $x)" 2>"$T/err" && fail "the store took a parent newer than its child"
grep -q "parents are older jobs" "$T/err" || fail "newer parent: $(cat "$T/err")"

# 7. Fan-in: 10,000 parents, four workers; the child runs once, after all,
# and finds them all in TQ_PARENTS_FILE and TQ_PARENTS_DONE_FILE (over 8 KiB
# each), and none failed.
N=10000
seq 1 $N | "$TQ" enqueue --queue fan --lines --json | jq -r '.ids[]' >"$T/parents"
expect_eq "$(wc -l <"$T/parents")" $N "parents enqueued"
handler child.sh '
echo "child $TQ_JOB_ID $(wc -l <"$TQ_PARENTS_FILE") $(sort -n "$TQ_PARENTS_FILE" | sha256sum | cut -c1-16)" \
    "$(sort -n "$TQ_PARENTS_DONE_FILE" | sha256sum | cut -c1-16) failed=${TQ_PARENTS_FAILED-unset}" >>"'"$T"'/fan"'
kid=$("$TQ" enqueue --queue fan --after-file "$T/parents" CHILD)
expect_eq "$(job "$kid" state) $(job "$kid" waiting_for)" "waiting $N" "the fan-in child"
handler fan.sh 'if [ "$(cat)" = CHILD ]; then exec "'"$T"'/child.sh"; else exec "'"$TQ_RECORD"'" "'"$T"'/fan" p; fi'
for i in 1 2 3 4; do
    TMPDIR=$T bg "$TQ" work --queue fan --name "f$i" --concurrency 4 --drain --quiet -- "$T/fan.sh" \
        2>>"$T/fan$i.log"
    pids[$i]=$BG
done
for i in 1 2 3 4; do
    wait_rc "${pids[$i]}"
    expect_eq "$RC" 0 "fan-in worker $i"
done
expect_eq "$(grep -c '^child ' "$T/fan")" 1 "runs of the fan-in child"
expect_eq "$(grep -c ' p ' "$T/fan")" $N "runs of the parents"
expect_eq "$(tail -1 "$T/fan" | cut -d' ' -f1-3)" "child $kid $N" "the child ran last, told of every parent"
expect_eq "$(tail -1 "$T/fan" | cut -d' ' -f4-6)" \
    "$(sort -n "$T/parents" | sha256sum | cut -c1-16) $(sort -n "$T/parents" | sha256sum | cut -c1-16) failed=" \
    "the parents' ids the child got, all done"
expect_eq "$(grep ' p ' "$T/fan" | cut -d' ' -f1 | sort -u | wc -l)" $N "distinct parents that ran"
expect_eq "$(job "$kid" state)" done "the fan-in child"
ls "$T"/tq-parents-* >/dev/null 2>&1 && fail "TQ_PARENTS_FILE left behind"
echo "ok"
