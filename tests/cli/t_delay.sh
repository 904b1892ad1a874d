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
echo ok
