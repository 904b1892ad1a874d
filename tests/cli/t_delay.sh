# A delayed job is not claimed before its time; --at works as well.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
handler h.sh 'date +%s.%N >> "'"$T"'/ran"'
t0=$(date +%s.%N)
id=$("$TQ" enqueue --delay 2s later)
past=$("$TQ" enqueue --at "@$(($(date +%s) - 60))" past)
"$TQ" work --drain --quiet -- "$T/h.sh"
expect_eq "$(lines "$T/ran")" 2 runs
last=$(tail -1 "$T/ran")
awk -v a="$t0" -v b="$last" 'BEGIN { exit !(b - a >= 2.0) }' || fail "ran after $(awk -v a="$t0" -v b="$last" 'BEGIN{print b-a}')s, before its delay"
s=$("$TQ" show "$id" --json)
[[ "$(echo "$s" | jq -r .started_at)" > "$(echo "$s" | jq -r .run_at)" ]] || fail "started before run_at: $s"
expect_eq "$(job "$past" state)" done "past --at"

# A date alone is its midnight (local time without a zone); a fraction of
# an hour is a duration.
d=$("$TQ" enqueue --queue dates --at 2031-05-06Z d)
expect_eq "$(job "$d" run_at)" 2031-05-06T00:00:00.000Z "--at DATE"
d=$(TZ=Etc/GMT-2 "$TQ" enqueue --queue dates --at 2031-05-06 d)
expect_eq "$(job "$d" run_at)" 2031-05-05T22:00:00.000Z "--at DATE, local time"
before=$(date +%s)
d=$("$TQ" enqueue --queue dates --delay 1.5h d)
run_at=$(date -d "$(job "$d" run_at)" +%s)
[ $((run_at - before)) -ge 5399 ] && [ $((run_at - before)) -le 5405 ] ||
    fail "--delay 1.5h ran at $(job "$d" run_at), $((run_at - before)) s on"
expect_exit 2 "$TQ" enqueue --queue dates --at 2031-13-06 d

# --drain=due runs what is due and leaves the delayed and the waiting jobs:
# a plain --drain would wait for them (an hour here).
handler due.sh 'cat >> "'"$T"'/due.runs"; echo >> "'"$T"'/due.runs"'
"$TQ" enqueue --queue dd now >/dev/null
late=$("$TQ" enqueue --queue dd --delay 1h later)
kid=$("$TQ" enqueue --queue dd --after "$late" child)
start=$SECONDS
timeout 30 "$TQ" work --queue dd --drain=due -- "$T/due.sh" 2>"$T/dd.log" ||
    fail "--drain=due did not end: $(cat "$T/dd.log")"
[ $((SECONDS - start)) -lt 20 ] || fail "--drain=due took $((SECONDS - start)) s"
expect_eq "$(tr -d '\n' <"$T/due.runs")" now "--drain=due ran the due job only"
expect_eq "$(job "$late" state) $(job "$kid" state)" "ready waiting" "delayed and waiting jobs left"
expect_exit 2 "$TQ" work --queue dd --drain=soon -- "$T/due.sh"
grep -qF "invalid value 'soon' for --drain: use --drain or --drain=due" "$T/err" || fail "--drain=soon: $(cat "$T/err")"
echo ok
