# What a newcomer meets in the first hour: the tool says what it does, what
# it waits for and what went wrong, and refuses the usual slips. Each check
# is of a message or a behaviour that was silent or wrong before.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
"$TQ" init >/dev/null

has() { # FILE TEXT WHAT: FILE has a line containing TEXT
    grep -qF -- "$2" "$1" || fail "$3: no '$2' in: $(cat "$1")"
}

# ---- 2. tq work says what it is doing ---------------------------------------
handler say.sh 'echo "to stderr: $(cat)" >&2; [ "$TQ_QUEUE" != bad ]'
"$TQ" enqueue --queue v hello >/dev/null
expect_exit 0 "$TQ" work --queue v --concurrency 3 --drain --verbose -- "$T/say.sh"
has "$T/err" "started: queue v; concurrency 3; store " "start line"
has "$T/err" "($ENGINE); command $T/say.sh; draining" "start line names engine and command"
has "$T/err" "attempt 1 done in " "--verbose: the job's end"
has "$T/err" "stderr: to stderr: hello" "--verbose: the handler's stderr"
# Without --verbose, neither.
"$TQ" enqueue --queue v again >/dev/null
expect_exit 0 "$TQ" work --queue v --drain -- "$T/say.sh"
grep -q "stderr:\|done in" "$T/err" && fail "not verbose, yet: $(cat "$T/err")"
# A failure says what follows: a retry, or dead.
"$TQ" queue bad --max-attempts 2 --backoff 0 >/dev/null
"$TQ" enqueue --queue bad x >/dev/null
expect_exit 0 "$TQ" work --queue bad --drain -- "$T/say.sh"
has "$T/err" "attempt 1 of 2 failed: exit status 1: to stderr: x; retry in 0s" "first failure"
has "$T/err" "attempt 2 of 2 failed: exit status 1: to stderr: x; dead, no attempts left" \
    "last failure"

# ---- 3. the default queue ------------------------------------------------------
"$TQ" enqueue --queue mail a >/dev/null
"$TQ" enqueue --queue mail b >/dev/null
expect_exit 0 "$TQ" work --drain -- true
has "$T/err" "queue 'default' is empty, but 2 job(s) are ready in other queues: mail (2)" \
    "a worker on an empty default queue"
expect_eq "$(grep -c "is empty" "$T/err")" 1 "said once"
# A worker on a queue with work says nothing of the others.
"$TQ" enqueue x >/dev/null
expect_exit 0 "$TQ" work --drain -- true
grep -q "is empty" "$T/err" && fail "said with work to do: $(cat "$T/err")"
"$TQ" cancel $(sql "SELECT id FROM $JOBS WHERE queue = 'mail'") >/dev/null

# ---- 4. a drain that waits says why --------------------------------------------
"$TQ" enqueue --queue later --delay 2s soon >/dev/null
expect_exit 0 "$TQ" work --queue later --drain -- true
has "$T/err" "draining: waiting for 1 delayed job(s), next due " "drain waiting"
expect_eq "$(grep -c "draining: waiting" "$T/err")" 1 "said once per wait"
"$TQ" work --help >"$T/help"
has "$T/help" "ready (due or delayed)" "--help says due or delayed"
# ... and everything a handler is given, and where its stdout goes.
for v in TQ_JOB_ID TQ_QUEUE TQ_ATTEMPT TQ_CLAIM TQ_GROUP TQ_PARENTS TQ_PARENTS_DONE \
    TQ_PARENTS_FAILED _FILE TRACEPARENT \
    TQ_CONTROL_FD "the job's result in a queue with --results"; do
    grep -q -- "$v" "$T/help" || fail "tq work --help does not mention $v"
done
has "$SRC/README.md" "ready (due or delayed)" "the README says due or delayed"

# ---- 5. argument traps -----------------------------------------------------------
before=$(fingerprint)
# A command line given as one word: no shell splits it, and the error says so.
expect_exit 2 "$TQ" work -- "./send-mail.sh --fast"
has "$T/err" "no shell runs it: give the program and its arguments as separate words" "a handler with a space"
expect_exit 2 "$TQ" work -- ./no-such-handler
! grep -q "no shell" "$T/err" || fail "the shell hint without a space: $(cat "$T/err")"
expect_exit 2 "$TQ" enqueue --delay 5 minutes
has "$T/err" "invalid duration '5' for --delay: a number needs a unit, as in 5s, 5m" "bare number"
expect_exit 2 "$TQ" enqueue --delay 5m minutes payload
expect_eq "$(cat "$T/err")" "tq enqueue: expected one PAYLOAD, got 2 arguments: 'minutes' 'payload'; --delay takes one DUR such as 5m; quote a payload with spaces" "argument count"
expect_exit 2 "$TQ" enqueue a b c d
has "$T/err" "got 4 arguments: 'a' 'b' 'c' ..." "many arguments"
expect_exit 0 "$TQ" help enqueue
has "$T/out" "usage: tq enqueue" "tq help enqueue"
expect_exit 2 "$TQ" enqeue x
expect_eq "$(cat "$T/err")" "tq: unknown command 'enqeue' (did you mean 'enqueue'?)" "command typo"
expect_exit 2 "$TQ" enqueue --dealy 5s x
expect_eq "$(cat "$T/err")" "tq enqueue: unknown option '--dealy' (did you mean '--delay'?)" \
    "option typo"
expect_exit 2 "$TQ" work --concurency 2 -- true
has "$T/err" "did you mean '--concurrency'?" "option typo in work"
expect_exit 2 "$TQ" frobnicate
expect_eq "$(cat "$T/err")" "tq: unknown command 'frobnicate' (see tq --help)" "no near command"
expect_exit 2 "$TQ" help frobnicate
expect_exit 2 "$TQ" queue q --lease 30
has "$T/err" "a number needs a unit" "bare lease"
# The --at error gives the forms --help gives.
expect_exit 2 "$TQ" enqueue --at tomorrow x
forms=$(sed -E "s/.*use (.*), from 1970.*/\1/" "$T/err")
"$TQ" enqueue --help >"$T/help"
tr -d '\n' <"$T/help" | grep -qF "$forms" || fail "--at forms differ: '$forms' vs $(cat "$T/help")"
[ "$(fingerprint)" = "$before" ] || fail "a refused command changed the store"
expect_exit 0 "$TQ" work --grace 0 --drain --queue none -- true # 0 needs no unit

# ---- 8. empty states and headers -------------------------------------------------
"$TQ" enqueue --queue later2 --delay 10m x >/dev/null
"$TQ" stats --queue later2 >"$T/out"
has "$T/out" "oldest ready: none due; 1 delayed, next in " "only delayed jobs"
has "$T/out" "durations: no finished jobs yet" "no finished jobs"
expect_exit 1 "$TQ" stats --queue nosuchqueue
expect_eq "$(cat "$T/err")" "tq stats: no queue named 'nosuchqueue' (tq queue lists them)" \
    "stats of a queue that does not exist"
expect_exit 0 "$TQ" list --queue nosuchqueue
expect_eq "$(cat "$T/out")" "no jobs" "an empty list"
"$TQ" list --queue bad >"$T/out"
expect_eq "$(head -1 "$T/out" | tr -s ' ')" "ID QUEUE STATE ATTEMPTS CREATED PAYLOAD" "list header"
expect_exit 0 "$TQ" queue mial
expect_eq "$(head -1 "$T/out")" "created queue 'mial'" "a new queue is said"
expect_eq "$(sed -n 2p "$T/out" | tr -s ' ')" \
    "QUEUE ORDER LEASE ATTEMPTS BACKOFF DONE ROWS RUNNING AT MOST STARTS AT MOST STATUS" "queue header"
expect_exit 0 "$TQ" queue mial --lease 1m
grep -q created "$T/out" && fail "an existing queue said created"
"$TQ" workers >"$T/out"
expect_eq "$(head -1 "$T/out" | tr -s ' ')" "NAME STATUS PID STARTED HEARTBEAT" "workers header"
n=$("$TQ" workers --json | jq length)
[ "$n" -gt 3 ] || fail "expected the stopped workers of this test, got $n"
# Stopped rows go with --prune; a live worker stays, however old.
"$TQ" queue live --lease 5s >/dev/null
bg "$TQ" work --queue live --name live-one -- true
live=$BG
wait_for 10 sh -c "'$TQ' workers --json | jq -e 'any(.[]; .name == \"live-one\" and .status == \"alive\")' >/dev/null"
sleep 1
expect_exit 0 "$TQ" workers --prune 1ms
has "$T/out" "pruned $((n)) worker(s) stopped or gone for over 1ms" "prune count"
expect_eq "$("$TQ" workers --json | jq -r '.[].name')" live-one "what prune left"
kill -TERM "$live"
wait_rc "$live"

# ---- 9. the README's promises --------------------------------------------------------
a=$("$TQ" enqueue --queue m one)
b=$("$TQ" enqueue --queue m two)
before=$(fingerprint)
expect_exit 1 "$TQ" cancel "$a" 99999
expect_eq "$(cat "$T/err")" "tq cancel: no job with id 99999; none of the 2 jobs was cancelled" \
    "cancel names the bad id"
expect_eq "$(job "$a" state)" ready "cancel is all or nothing"
[ "$(fingerprint)" = "$before" ] || fail "a refused cancel changed the store"
expect_exit 0 "$TQ" cancel "$a" "$b"
expect_eq "$(job "$a" state),$(job "$b" state)" cancelled,cancelled "cancel of both"
c=$("$TQ" enqueue --queue m three)
before=$(fingerprint)
expect_exit 1 "$TQ" retry "$a" "$c" "$b"
expect_eq "$(cat "$T/err")" "tq retry: job $c is ready: cannot retry it; none of the 3 jobs was retried" \
    "retry names the job in the wrong state"
[ "$(fingerprint)" = "$before" ] || fail "a refused retry changed the store"
expect_exit 0 "$TQ" retry "$a" "$b" "$a"
expect_eq "$(job "$a" state),$(job "$b" state)" ready,ready "retry of both (one named twice)"

# --lines: the count with the first and last id, or every id with --json;
# two producers at once take interleaved ids, and each says its own.
seq 1 3000 | sed 's/^/p1-/' >"$T/p1"
seq 1 3000 | sed 's/^/p2-/' >"$T/p2"
"$TQ" enqueue --queue il --lines --json <"$T/p1" >"$T/p1.json" &
p1=$!
"$TQ" enqueue --queue il --lines <"$T/p2" >"$T/p2.out"
wait "$p1"
expect_eq "$(jq .count "$T/p1.json")" 3000 "--json count"
expect_eq "$(jq '.ids | unique | length' "$T/p1.json")" 3000 "--json ids"
text=$([ "$ENGINE" = postgres ] && echo "convert_from(payload, 'UTF8')" || echo "CAST(payload AS TEXT)")
expect_eq "$(jq -r '.ids[]' "$T/p1.json" | sort -n | sha256sum)" \
    "$(sql "SELECT id FROM $JOBS WHERE queue = 'il' AND $text LIKE 'p1-%' ORDER BY id" | sha256sum)" \
    "--json ids are the producer's rows"
first=$(sql "SELECT min(id) FROM $JOBS WHERE queue = 'il' AND $text LIKE 'p2-%'")
last=$(sql "SELECT max(id) FROM $JOBS WHERE queue = 'il' AND $text LIKE 'p2-%'")
expect_eq "$(cat "$T/p2.out")" "enqueued 3000 jobs: first id $first, last id $last" "--lines summary"
expect_exit 0 "$TQ" enqueue --json --key k1 x
expect_eq "$(jq -c .duplicate "$T/out")" false "enqueue --json"
expect_exit 0 "$TQ" enqueue --json --key k1 x
expect_eq "$(jq -c .duplicate "$T/out")" true "enqueue --json of a duplicate"

if [ "$ENGINE" = sqlite ]; then
    # A message names the store, and where its name came from unless --db
    # gave it.
    mkdir "$T/here" && touch "$T/here/tq.db" "$T/empty.db"
    (cd "$T/here" && env -u TQ_DB "$TQ" stats) 2>"$T/err" && fail "stats on an empty file"
    expect_eq "$(cat "$T/err")" "tq stats: the store has no tq schema: run tq init first (the store tq.db is the default: neither --db nor TQ_DB is set)" "the default store named"
    (cd "$T/here" && TQ_DB="$T/empty.db" "$TQ" work -- true) 2>"$T/err" && fail "work on an empty file"
    expect_eq "$(cat "$T/err")" "tq work: the store has no tq schema: run tq init first (the store $T/empty.db came from TQ_DB)" "TQ_DB named"
    expect_exit 1 "$TQ" stats --db "$T/empty.db"
    expect_eq "$(cat "$T/err")" "tq stats: the store has no tq schema: run tq init first (the store is $T/empty.db)" "--db named"
    expect_exit 1 "$TQ" --db "$T/no/such/dir/x.db" stats
    expect_eq "$(cat "$T/err")" "tq stats: no store at '$T/no/such/dir/x.db': directory '$T/no/such/dir' does not exist" \
        "a store in a missing directory"
    expect_exit 1 "$TQ" --db "$T/no/x.db" init
    has "$T/err" "directory '$T/no' does not exist" "init in a missing directory"
else
    # libpq's two-line errors are one line.
    pgdir=$(sed -E 's/.*host=([^&]*).*/\1/' <<<"$TQ_TEST_PG_URL")
    expect_exit 1 "$TQ" --db "postgresql:///postgres?host=$T/nosock&user=tq" stats
    expect_eq "$(wc -l <"$T/err")" 1 "lines of a connection error"
    has "$T/err" "No such file or directory; Is the server running locally" "folded"

    # ---- 7. a worker started before its server waits for it ----------------------
    mkdir -p "$T/sock"
    url="postgresql:///postgres?host=$T/sock&user=tq&tq_schema=$SCHEMA"
    "$TQ" enqueue --queue early e >/dev/null
    bg "$TQ" --db "$url" work --queue early --drain -- true 2>"$T/early.log"
    w=$BG
    wait_for 10 grep -q "waiting for the store: cannot connect" "$T/early.log"
    ln -s "$pgdir/.s.PGSQL.5432" "$T/sock/.s.PGSQL.5432" # the server "comes up"
    wait_rc "$w"
    expect_eq "$RC" 0 "the early worker, once the server is up"
    expect_eq "$(sql "SELECT state FROM $JOBS WHERE queue = 'early'")" done "its job"
    has "$T/early.log" "next try in 100ms" "the first wait is logged"
    # What waiting cannot fix ends it at once.
    start=$(date +%s)
    expect_exit 1 "$TQ" --db "postgresql:///nosuchdb?host=$pgdir&user=tq" work --drain -- true
    [ $(($(date +%s) - start)) -lt 5 ] || fail "waited for a database that does not exist"
    has "$T/err" 'database "nosuchdb" does not exist' "no such database"
    grep -q "waiting for the store" "$T/err" && fail "waited: $(cat "$T/err")"
    expect_exit 1 "$TQ" --db "postgresql:///postgres?host=$pgdir&user=tq&tq_schema=noschema" \
        work --drain -- true
    has "$T/err" "no tq schema" "no schema"
    # A stop signal while waiting ends the wait.
    bg "$TQ" --db "postgresql:///postgres?host=$T/nothere&user=tq" work -- true 2>"$T/w2.log"
    w=$BG
    wait_for 10 grep -q "waiting for the store" "$T/w2.log"
    kill -TERM "$w"
    wait_rc "$w"
    expect_eq "$RC" 0 "stopped while waiting"
    has "$T/w2.log" "stopped while waiting for the store" "said"
fi
# A SQLite store that is not there is not waited for (tq init makes it).
expect_exit 1 "$TQ" --db "$T/missing.db" work --drain -- true
grep -q "waiting for the store" "$T/err" && fail "waited for a missing SQLite store"

# ---- 6. a second Ctrl-C stops now -------------------------------------------------
handler slow.sh 'echo started >>"'"$T"'/slow"; sleep 60'
s=$("$TQ" enqueue --queue slow s)
bg "$TQ" work --queue slow --grace 30s -- "$T/slow.sh" 2>"$T/slow.log"
w=$BG
wait_for 10 test -s "$T/slow"
kill -INT "$w"
wait_for 10 grep -q "stopping:" "$T/slow.log"
has "$T/slow.log" "1 running job(s) get 30s to finish (Ctrl-C again to stop now)" "stopping line"
start=$(date +%s)
kill -INT "$w"
wait_rc "$w"
expect_eq "$RC" 0 "exit after the second SIGINT"
[ $(($(date +%s) - start)) -lt 10 ] || fail "the second SIGINT did not stop now"
has "$T/slow.log" "stopping now: killed 1 handler(s)" "said"
expect_eq "$(job "$s" state),$(job "$s" attempts)" ready,0 "the job back, unspent"

# A handler that had already failed, and only left a process behind, is not
# given back by the second stop: its failure stands.
handler linger.sh 'echo ran >>"'"$T"'/linger"; (trap "" TERM; exec sleep 60) & exit 1'
"$TQ" queue lq --max-attempts 1 >/dev/null
l=$("$TQ" enqueue --queue lq x)
bg "$TQ" work --queue lq --grace 30s -- "$T/linger.sh" 2>"$T/linger.log"
w=$BG
wait_for 10 grep -q "left processes running" "$T/linger.log"
kill -INT "$w"
wait_for 10 grep -q "stopping:" "$T/linger.log"
kill -INT "$w"
wait_rc "$w"
expect_eq "$RC" 0 "exit after two SIGINTs"
expect_eq "$(job "$l" state)" dead "the failed job whose process lingered"

# --verbose with a handler that floods stderr: the worker's loop goes on
# (here: its timeout fires).
"$TQ" queue flood --max-attempts 1 >/dev/null
"$TQ" enqueue --queue flood x >/dev/null
handler flood.sh 'exec yes "a line of stderr" >&2'
start=$(date +%s)
expect_exit 0 "$TQ" work --queue flood --drain --verbose --timeout 1s --grace 1s -- "$T/flood.sh"
[ $(($(date +%s) - start)) -lt 60 ] || fail "the flood held the worker"
grep -q "timed out after 1s" "$T/err" || fail "no timeout: $(tail -c 300 "$T/err")"
rm -f "$T/err"

# ---- --help, README and the man page say the same ----------------------------------
for c in init queue enqueue work stats list show retry cancel prune workers bench; do
    "$TQ" "$c" --help | head -1 | grep -oE -- '--[a-z-]+' | sort -u | while read -r opt; do
        [ "$opt" = --db ] || [ "$opt" = --help ] && continue
        grep -qF -- "$(sed 's/-/\\-/g' <<<"$opt")" "$SRC/docs/tq.1" ||
            fail "tq $c $opt is not in docs/tq.1"
    done
done
grep -q "peak memory" "$SRC/docs/tq.1" && ! grep -q "json.*peak\|peak.*json" "$SRC/docs/tq.1" &&
    fail "the man page promises a peak-memory line"
echo ok
