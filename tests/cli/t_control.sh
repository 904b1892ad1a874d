# The control channel: a command handler writes lines to descriptor 3
# (TQ_CONTROL_FD). Progress shows while the job runs and stays with it once
# done; a snooze puts the job back for later without spending its attempt,
# up to the queue's --max-snoozes; a discard ends it dead with attempts
# left; a handler whose job was cancelled while it ran changes nothing with
# what it says; lines that say nothing sensible are logged once per job and
# change nothing; a handler that closes the channel works as before.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

# Each run logs "RUN id payload time_ns", then does what its payload says.
handler h.sh '
[ "$TQ_CONTROL_FD" = 3 ] || { echo "no TQ_CONTROL_FD" >&2; exit 1; }
p=$(cat)
echo "RUN $TQ_JOB_ID $p $(date +%s%N)" >>"'"$T"'/runs"
wait_file() { i=0; while [ ! -e "'"$T"'/$1" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done; }
case "$p" in
progress)
    echo "progress 40 reading rows" >&3
    wait_file go
    echo "progress 100 all rows" >&3 ;;
snooze)
    if [ ! -e "'"$T"'/snoozed.$TQ_JOB_ID" ]; then
        : >"'"$T"'/snoozed.$TQ_JOB_ID"
        echo "snooze 1s" >&3
    fi ;;
always-snooze)
    echo "snooze 0s" >&3 ;;
discard)
    echo "discard no such customer" >&3
    exit 1 ;;
noise)
    printf "bogus\nprogress 200\nsnooze\n\n" >&3
    head -c 3000 /dev/zero | tr "\0" x >&3
    printf "\nprogress 7 fine\n" >&3 ;;
chatty)
    i=0; while [ $i -lt 3000 ]; do echo "progress $((i % 100)) step $i"; i=$((i + 1)); done >&3 ;;
closed)
    exec 3>&- ;;
bare)
    echo "snooze 5" >&3 ;;
trap-snooze)
    echo "snooze 1h" >&3
    trap "exit 0" TERM
    : >"'"$T"'/trap.started"
    sleep 20 & wait ;;
trap-discard)
    echo "discard bad row" >&3
    trap "exit 1" TERM
    sleep 20 & wait ;;
slow-ok)
    trap "echo oops >&2; exit 0" TERM
    sleep 20 & wait ;;
late)
    : >"'"$T"'/late.started"
    wait_file go-late
    echo "snooze 1h" >&3 ;;
esac
exit 0'

# Progress: seen while running, the last one kept once done.
prog=$(ids_of c progress)
bg "$TQ" work --queue c --drain --name w1 -- "$T/h.sh" 2>>"$T/work.log"
w1=$BG
wait_for 10 sh -c "'$TQ' list --state running | grep -q 'progress: 40% reading rows'"
expect_eq "$(job "$prog" progress)" 40 "progress while running"
expect_eq "$(job "$prog" progress_text)" "reading rows" "progress text while running"
"$TQ" show "$prog" | grep -q '^progress:     40% reading rows$' || fail "tq show: no progress"
: >"$T/go"
wait_rc "$w1"
expect_eq "$RC" 0 "exit code of the worker"
expect_eq "$(job "$prog" state) $(job "$prog" progress) $(job "$prog" progress_text)" \
    "done 100 all rows" "progress once done"

# Snooze, discard, noise, a chatty handler and a closed channel, with 4
# slots; and a queue whose jobs may snooze once.
"$TQ" queue once --max-snoozes 1 --max-attempts 2 --backoff 0 >/dev/null
"$TQ" queue c --max-attempts 3 >/dev/null
ids=$(ids_of c snooze discard noise chatty closed bare)
read -r sn di no ch cl ba <<<"$ids"
on=$(ids_of once always-snooze)
bg "$TQ" work --queue c --queue once --concurrency 4 --drain --name w2 -- "$T/h.sh" \
    2>>"$T/work.log"
wait_rc "$BG"
expect_eq "$RC" 0 "exit code of the worker"

runs() { grep -c "^RUN $1 " "$T/runs"; }
expect_eq "$(job "$sn" state) $(job "$sn" attempts) $(job "$sn" snoozes) $(runs "$sn")" \
    "done 1 1 2" "snoozed job: state, attempts, snoozes, runs"
gap=$(grep "^RUN $sn " "$T/runs" | awk '{ t[NR] = $4 } END { print int((t[2] - t[1]) / 1000000) }')
[ "$gap" -ge 1000 ] || fail "a 1s snooze ran again after ${gap} ms"
expect_eq "$(job "$di" state) $(job "$di" attempts) $(runs "$di")" "dead 1 1" \
    "discarded job: state, attempts, runs"
expect_eq "$(job "$di" last_error)" "no such customer" "discarded job's error"
expect_eq "$(job "$no" state) $(job "$no" progress)" "done 7" "noisy job: state, progress"
expect_eq "$(grep -c "job $no: ignored on its control channel" "$T/work.log")" 1 \
    "bad lines said once per job"
expect_eq "$(job "$ch" state) $(job "$ch" progress) $(job "$ch" progress_text)" \
    "done 99 step 2999" "chatty job: the last progress"
expect_eq "$(job "$cl" state)" done "a handler that closed the channel"
expect_eq "$(job "$ba" state) $(job "$ba" snoozes)" "done 0" "a snooze without a unit"
grep -q "job $ba: ignored on its control channel: snooze needs a unit" "$T/work.log" ||
    fail "a snooze without a unit: not said"
expect_eq "$(job "$on" state) $(job "$on" attempts) $(job "$on" snoozes) $(runs "$on")" \
    "dead 2 1 3" "a job out of snoozes: state, attempts, snoozes, runs"
job "$on" last_error | grep -q "snoozed 1 time(s), the most queue 'once' allows" ||
    fail "out of snoozes: error '$(job "$on" last_error)'"

# A handler whose job was cancelled while it ran: its snooze changes nothing.
la=$(ids_of c late)
bg "$TQ" work --queue c --drain --name w3 -- "$T/h.sh" 2>>"$T/work.log"
w3=$BG
wait_for 10 test -e "$T/late.started"
"$TQ" cancel "$la" >/dev/null
: >"$T/go-late"
wait_rc "$w3"
expect_eq "$(job "$la" state) $(job "$la" snoozes)" "cancelled 0" "a snooze after a cancel"

# A stop the handlers outlive (they trap SIGTERM and exit by themselves):
# what they said still counts.
ts=$(ids_of t trap-snooze)
td=$(ids_of t trap-discard)
bg "$TQ" work --queue t --concurrency 2 --grace 1s --name w4 -- "$T/h.sh" 2>>"$T/work.log"
w4=$BG
wait_for 10 test -e "$T/trap.started"
sleep 0.3
kill -TERM "$w4"
wait_rc "$w4"
expect_eq "$(job "$ts" state) $(job "$ts" snoozes) $(job "$ts" attempts)" "ready 1 0" \
    "a snooze said before a stop the handler outlived"
expect_eq "$(job "$td" state) $(job "$td" last_error)" "dead bad row" \
    "a discard said before a stop the handler outlived"

# A timeout whose SIGTERM the handler answers with exit 0: said in full.
"$TQ" queue slow --max-attempts 1 >/dev/null
so=$(ids_of slow slow-ok)
"$TQ" work --queue slow --drain --timeout 1s --grace 1s -- "$T/h.sh" 2>>"$T/work.log"
expect_eq "$(job "$so" state)" dead "a job that timed out"
expect_eq "$(job "$so" last_error)" "timed out after 1s, then exit status 0: oops" \
    "the error of a timeout answered with exit 0"

# Bad settings: exit 2, the queue as it was.
for bad in -1 x 1000001; do
    expect_exit 2 "$TQ" queue once --max-snoozes "$bad"
    grep -q "max-snoozes" "$T/err" || fail "--max-snoozes $bad: no message naming it"
done
expect_eq "$("$TQ" queue once --json | jq .max_snoozes)" 1 "max snoozes after bad input"
echo "ok: progress, snooze (again after ${gap} ms), discard, noise, cancel"
