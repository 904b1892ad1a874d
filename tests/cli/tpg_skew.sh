# Clock skew between hosts changes nothing on PostgreSQL: leases and
# schedules use the server's clock. Workers and producers here run with a
# host clock two hours off (faketime).
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = postgres ] || fail "this test needs TQ_TEST_ENGINE=postgres"
# libfaketime is preloaded; a sanitizer build must not insist on coming first.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
# libfaketime preloaded directly (not the faketime wrapper, which forks), so
# the PID that bg records is tq's own.
libfaketime=$(ls /usr/lib/*/faketime/libfaketime.so.1 | head -1)
ahead() { LD_PRELOAD=$libfaketime FAKETIME='+2h' "$@"; }
behind() { LD_PRELOAD=$libfaketime FAKETIME='-2h' "$@"; }
"$TQ" init >/dev/null
"$TQ" queue s --lease 3s >/dev/null
handler rec.sh 'echo "$TQ_JOB_ID $TQ_ATTEMPT" >> "'"$T"'/runs"; sleep "$(cat)"'

# A producer two hours behind: --delay counts from the server's now.
late=$(behind "$TQ" enqueue --queue s --delay 20s 0)
due=$("$TQ" enqueue --queue s 0)
# A worker two hours ahead: must not take the delayed job early, nor see
# anyone's fresh lease as long expired.
bg ahead "$TQ" work --queue s --name fast-clock --poll 100ms -- "$T/rec.sh" 2>"$T/ahead.log"
w=$BG
wait_for 20 sh -c "grep -q '^$due ' '$T/runs'"
sleep 2
expect_eq "$(job "$late" state)" ready "delayed job under a skewed producer and worker"

# A long job held by a normal-clock worker (heartbeats every second) while
# the fast-clock worker rescues every second.
long=$("$TQ" enqueue --queue s 5)
kill -TERM "$w"
wait_rc "$w"
"$TQ" work --queue s --name normal --drain --poll 100ms -- "$T/rec.sh" 2>"$T/normal.log" &
n=$!
BG_PIDS+=("$n")
bg ahead "$TQ" work --queue s --name fast-clock2 --poll 100ms -- "$T/rec.sh" 2>"$T/ahead2.log"
w=$BG
wait_for 30 sh -c "[ \"\$('$TQ' show $long --json | jq -r .state)\" = done ]"
kill -TERM "$w"
wait_rc "$w"
kill -TERM "$n" 2>/dev/null || true
wait_rc "$n"
expect_eq "$(grep -c "^$long " "$T/runs")" 1 "runs of the long job"
expect_eq "$(job "$long" attempts)" 1 "attempts of the long job"
grep -q "rescued" "$T/ahead2.log" && fail "the fast-clock worker rescued a live lease"
echo ok
