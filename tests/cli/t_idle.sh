# An idle worker reads the store only when something is due (idle.c), and
# misses nothing it would have seen polling: a new job, a delayed job at
# its time, a job retried or put back, a pause lifted, a new schedule, and
# a job whose worker died, at its lease's end. Its own safety look comes
# every 12 s here (the queue's lease), so each of these happening within a
# few seconds shows it was told or timed, not found by that look.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue idle --lease 12s --max-attempts 1 >/dev/null
# Runs: "PAYLOAD SECONDS" per run; a payload "fail-X" fails its first run,
# "hang" sleeps.
handler rec.sh '
read -r p
echo "$p $(date +%s.%N)" >>"'"$T"'/runs"
case $p in
fail-*) [ -e "'"$T"'/$p" ] || { touch "'"$T"'/$p"; exit 1; } ;;
hang) sleep 600 ;;
esac
exit 0'
bg "$TQ" work --queue idle -- "$T/rec.sh" 2>"$T/w.log"
w=$BG
sleep 3 # idle now

# started PAYLOAD AFTER WITHIN [NTH]: PAYLOAD's NTH run (default the first)
# started between AFTER and AFTER + WITHIN (seconds since the epoch).
started() {
    wait_for $(($3 + 10)) sh -c "[ \$(grep -c '^$1 ' '$T/runs') -ge ${4:-1} ]"
    local at
    at=$(grep "^$1 " "$T/runs" | tail -1 | cut -d' ' -f2)
    awk -v a="$at" -v t="$2" -v w="$3" 'BEGIN { exit !(a >= t && a - t < w) }' ||
        fail "$1 started $(awk -v a="$at" -v t="$2" 'BEGIN { print a - t }') s after, not within $3 s"
}

t=$(date +%s.%N)
"$TQ" enqueue --queue idle new >/dev/null
started new "$t" 3

t=$(date +%s.%N)
"$TQ" enqueue --queue idle --delay 4s delayed >/dev/null
started delayed "$(awk -v t="$t" 'BEGIN { printf "%.6f", t + 4 }')" 4

id=$("$TQ" enqueue --queue idle fail-1)
wait_for 10 sh -c "[ \"\$('$TQ' show $id --json | jq -r .state)\" = dead ]"
sleep 2
t=$(date +%s.%N)
"$TQ" retry "$id" >/dev/null
started fail-1 "$t" 4 2

"$TQ" queue idle --pause >/dev/null
"$TQ" enqueue --queue idle paused >/dev/null
sleep 3
expect_eq "$(grep -c '^paused ' "$T/runs" || true)" 0 "runs of a job of a paused queue"
t=$(date +%s.%N)
"$TQ" queue idle --resume >/dev/null
started paused "$t" 4

t=$(date +%s.%N)
"$TQ" cron set tick --queue idle --schedule '@every 2s' --payload tick >/dev/null
started tick "$t" 5
"$TQ" cron rm tick >/dev/null

# A second worker takes a job and dies; the idle one puts it back when its
# lease ends (12 s after its claim at most) and runs it.
"$TQ" queue idle --max-attempts 2 >/dev/null
freeze "$w"
bg "$TQ" work --queue idle --name doomed -- "$T/rec.sh" 2>"$T/doomed.log"
doomed=$BG
hid=$("$TQ" enqueue --queue idle hang)
wait_for 10 grep -q "^hang " "$T/runs"
t=$(date +%s.%N)
kill -KILL "$doomed"
wait_rc "$doomed"
kill -CONT "$w"
wait_for 30 sh -c "[ \$(grep -c '^hang ' '$T/runs') = 2 ]"
again=$(grep '^hang ' "$T/runs" | tail -1 | cut -d' ' -f2)
awk -v a="$again" -v t="$t" 'BEGIN { exit !(a - t < 12 + 4) }' ||
    fail "the dead worker's job ran again $(awk -v a="$again" -v t="$t" 'BEGIN { print a - t }') s after, past its lease's end"
grep -q "rescued 1 job" "$T/w.log" || fail "the idle worker did not rescue: $(cat "$T/w.log")"
"$TQ" cancel "$hid" >/dev/null
stop_ok "$w"
echo ok
