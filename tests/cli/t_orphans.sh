# A handler's process group does not outlive its worker: kill -9 of a worker
# whose handler started a child (a shell's background job, a pipeline)
# ends that child within a second, through the worker's reaper, so the job
# put back at the restart never runs beside a copy of itself. A handler
# that left its group (setsid) is out of reach, as documented.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue orph --lease 1h >/dev/null
# Its first claim starts children and waits for them; a later run records whether
# any earlier run's child is still alive beside it.
handler h.sh '
for p in $(cat "'"$T"'/children" 2>/dev/null); do
    grep -qs "^[0-9]* (.*) [^Z] " "/proc/$p/stat" &&
        echo "job $TQ_JOB_ID: child $p still runs" >>"'"$T"'/beside"
done
if [ "$TQ_CLAIM" = 1 ]; then
    sleep 30 &
    echo $! >>"'"$T"'/children"
    sleep 30 | cat &
    echo $! >>"'"$T"'/children"
    wait
fi
echo "$TQ_JOB_ID" >>"'"$T"'/done"'
gone() { [ ! -e "/proc/$1" ] || grep -q '^[0-9]* (.*) Z ' "/proc/$1/stat"; }
all_gone() {
    local p
    for p in $(cat "$T/children"); do gone "$p" || return 1; done
}

# Round 1: kill -9 of the worker. Round 2: kill -9 of the worker's whole
# process group (a shell killing a job, timeout -s KILL), which its reaper,
# in a session of its own, is not part of. Round 3: the reaper itself is
# killed first; the worker starts a new one within a second, told of the
# running groups, and that one does the work.
for round in 1 2 3; do
    : >"$T/children"
    id=$("$TQ" enqueue --queue orph "round $round")
    bg setsid "$TQ" work --queue orph --name orph --concurrency 2 -- "$T/h.sh" 2>"$T/w$round.log"
    w=$BG
    wait_for 10 sh -c "[ \$(wc -l <'$T/children') -ge 2 ]"
    if [ $round = 3 ]; then
        r=$(pgrep -P "$w" -x tq-reaper)
        kill -9 "$r"
        wait_for 10 grep -q "reaper was gone: started a new one" "$T/w$round.log"
    fi
    if [ $round = 2 ]; then kill -9 -- "-$w"; else kill -9 "$w"; fi
    wait_rc "$w"
    # Within a second of the worker's death, nothing of the group is left.
    for i in $(seq 1 20); do
        all_gone && break
        sleep 0.05
    done
    all_gone || fail "round $round: the handler's children outlived their worker: $(cat "$T/children")"
    # The restart puts the job back at once and runs it alone.
    "$TQ" work --queue orph --name orph --drain --quiet -- "$T/h.sh" 2>"$T/restart.log"
    expect_eq "$(job "$id" state)" done "round $round: state"
done
[ ! -s "$T/beside" ] || fail "a rerun ran beside an earlier run's child: $(cat "$T/beside")"
expect_eq "$(wc -l <"$T/done")" 3 "runs that finished"

# A worker that stops normally leaves no reaper behind.
bg "$TQ" work --queue idle --name calm --quiet -- true
w=$BG
wait_for 10 sh -c "'$TQ' workers --json | jq -e '.[] | select(.name == \"calm\" and .status == \"alive\")'"
reaper=$(pgrep -P "$w" -x tq-reaper || true)
[ -n "$reaper" ] || fail "no reaper beside the worker"
expect_eq "$("$TQ" workers --json | jq '.[] | select(.name == "calm") | .reaper_pid')" "$reaper" \
    "the reaper the registration names"
kill -TERM "$w"
wait_rc "$w"
expect_eq "$RC" 0 "exit of the stopped worker"
wait_for 5 gone "$reaper"
echo ok
