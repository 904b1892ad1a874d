# An idle SQLite worker is woken by an enqueue (inotify on the -wal file,
# confirmed by PRAGMA data_version and the job sequence) instead of finding
# it at its next poll, also when a plain-SQL producer inserts the row.
# The worker polls at most once an hour here; after 12 s of idling its
# backoff has it asleep until about 16 s after its start, so a job that
# starts within 3 s of the insert was started by the wake-up, not a poll.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue wake >/dev/null
handler stamp.sh 'date +%s.%N >>"'"$T"'/started"'
bg "$TQ" work --queue wake --poll 1h -- "$T/stamp.sh" 2>"$T/w.log"
w=$BG
sleep 12
plain_insert wake "by plain SQL" COMMIT
at=$(date +%s.%N)
wait_for 30 test -s "$T/started"
took=$(awk -v a="$at" '{ print $1 - a; exit }' "$T/started")
awk -v t="$took" 'BEGIN { exit !(t < 3) }' ||
    fail "the job started ${took}s after its insert: the worker was not woken"
grep -q "polling only" "$T/w.log" && fail "the worker could not listen: $(cat "$T/w.log")"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "worker exit"
echo "started ${took}s after the insert"
echo ok
