# A reader holding a SQLite store's checkpoint back (SQLite only): another
# connection keeps a read transaction open while a worker runs jobs, so the
# -wal file cannot restart and grows. The worker says so (the -wal file's
# size, since when, what to do), and so does tq serve's /metrics; both say
# so again once the reader is gone, and the -wal file is cut back to its
# limit (16 MB) at the log's next restart.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" enqueue --queue w warm-up >/dev/null

# The reader: sqlite3 in a transaction that has read, fed from a FIFO that
# a sleeping process keeps open, so that it stays in it until that ends.
# (Not through bg: a background command keeps only its own redirections.)
mkfifo "$T/reader.in"
sqlite3 "$TQ_DB" <"$T/reader.in" >"$T/reader.out" &
reader=$!
BG_PIDS+=("$reader")
sleep 600 >"$T/reader.in" &
keeper=$!
BG_PIDS+=("$keeper")
echo "BEGIN; SELECT count(*) FROM tq_jobs;" >"$T/reader.in"
wait_for 10 grep -q . "$T/reader.out"

bg "$TQ" work --queue w --concurrency 4 -- true 2>"$T/w.log"
w=$BG
# 30,000 jobs write some 60 MB of frames the reader holds back.
for i in 1 2; do
    seq 15000 | "$TQ" enqueue --queue w --lines >/dev/null
done
drained 120 w
wait_for 30 grep -q "holds back its checkpoint" "$T/w.log"
grep -q "the store's -wal file is [0-9]* MB and growing: since .* a reader's open transaction" \
    "$T/w.log" || fail "the warning: $(grep -m1 'holds back' "$T/w.log")"
grep -q "docs/operations.md" "$T/w.log" || fail "the warning names no fix"
big=$(stat -c %s "$TQ_DB-wal")
[ "$big" -gt $((16 << 20)) ] || fail "the -wal file did not grow behind the reader: $big bytes"

# tq serve's /metrics says so too.
"$TQ" serve --listen 127.0.0.1:0 >"$T/serve.out" 2>"$T/serve.log" &
BG=$!
BG_PIDS+=("$BG")
serve=$BG
wait_for 30 grep -q "listening on" "$T/serve.out"
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/serve.out")
metric() { curl -fsS "$url/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
expect_eq "$(metric tq_sqlite_checkpoint_held)" 1 "tq_sqlite_checkpoint_held under the reader"
[ "$(metric tq_sqlite_wal_bytes)" -gt $((16 << 20)) ] || fail "tq_sqlite_wal_bytes"
sleep 1.1
held=$(metric tq_sqlite_checkpoint_held_seconds)
[ "${held%%.*}" -ge 1 ] || fail "tq_sqlite_checkpoint_held_seconds after a second: $held"

# The reader ends: the worker says so, and the log restarts and is cut back.
kill "$keeper"
wait_rc "$keeper"
wait_rc "$reader"
wait_for 30 grep -q "checkpoint is no longer held back" "$T/w.log"
expect_eq "$(metric tq_sqlite_checkpoint_held)" 0 "tq_sqlite_checkpoint_held once the reader ended"
expect_eq "$(metric tq_sqlite_checkpoint_held_seconds)" 0.000 "held seconds once it ended"
kill -TERM "$serve"
wait_rc "$serve"
for i in 1 2 3; do # a few commits: one restarts the log, the next cuts it
    "$TQ" enqueue --queue w after >/dev/null
    sleep 0.2
done
drained 30 w
wait_for 20 sh -c "[ \$(stat -c %s '$TQ_DB-wal') -le $((16 << 20)) ]"
stop_ok "$w"
expect_eq "$(grep -c 'holds back its checkpoint' "$T/w.log")" 1 "warnings said"
echo ok
