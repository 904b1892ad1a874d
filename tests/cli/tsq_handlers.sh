# Handlers that misbehave, and a machine that says no, cannot make a job run
# twice at once or charge a job for the worker's trouble (the engine plays
# no part: SQLite only).
#  - A handler's process group is the job: what the handler leaves running
#    (a child that ignores the timeout's SIGTERM, a background process of a
#    handler that succeeded, a child left at a shutdown) is ended before the
#    job is acknowledged or handed back.
#  - A handler the worker cannot start (out of descriptors, out of
#    processes, the program deleted) puts its job back unspent; the worker
#    slows down, and stops with one line when the program is gone for good.
#  - A directory is refused as the handler at start.
#  - A worker whose stdout nobody reads any more does not get its handlers
#    killed by SIGPIPE.
# Limits are set with ulimit inside the test's own subshells.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue g --max-attempts 1 >/dev/null

# A process that exited, or was killed and not yet reaped (a zombie runs
# nothing).
gone() {
    local st
    st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 0
    [ -z "$st" ] || [ "$st" = Z ]
}

# A child that ignores SIGTERM outlives the handler that timed out: it is
# killed after the grace time, and only then is the job acknowledged.
handler stubborn.sh "sh -c 'trap \"\" TERM; echo \$\$ > \"$T/child.pid\"; exec sleep 61' & wait"
id=$("$TQ" enqueue --queue g x)
"$TQ" work --queue g --drain --timeout 1s --grace 1s -- "$T/stubborn.sh" 2>"$T/w1.log" ||
    fail "worker: $(cat "$T/w1.log")"
child=$(cat "$T/child.pid")
gone "$child" || fail "the handler's child outlived its job"
expect_eq "$(job "$id" state)" dead "the timed-out job"
grep -q "left processes running" "$T/w1.log" || fail "the log does not say what was ended"

# A shutdown: the job goes back to ready only once the child is gone.
rm -f "$T/child.pid"
id=$("$TQ" enqueue --queue g x)
bg "$TQ" work --queue g --grace 1s -- "$T/stubborn.sh" 2>"$T/w2.log"
w=$BG
wait_for 10 test -s "$T/child.pid"
child=$(cat "$T/child.pid")
kill -TERM "$w"
# Until the worker exits, the job is running or its child is gone.
while kill -0 "$w" 2>/dev/null; do
    state=$(job "$id" state)
    [ "$state" = running ] || gone "$child" || fail "job $state while its child still runs"
    sleep 0.05
done
wait_rc "$w"
gone "$child" || fail "the handler's child outlived the worker's stop"
expect_eq "$(job "$id" state)" ready "the job handed back"
expect_eq "$(job "$id" attempts)" 0 "attempts of the job handed back"

# A handler that succeeded and left a background process: the job is done,
# the process ended with it.
handler background.sh "sleep 30 & echo \$! > \"$T/bg.pid\"; exit 0"
id=$("$TQ" enqueue --queue g x)
"$TQ" work --queue g --drain -- "$T/background.sh" 2>"$T/w3.log" || fail "worker: $(cat "$T/w3.log")"
expect_eq "$(job "$id" state)" done "the job with a background process"
gone "$(cat "$T/bg.pid")" || fail "the background process outlived its job"

# A directory as the handler: refused at start, nothing claimed.
id=$("$TQ" enqueue --queue g x)
expect_exit 2 "$TQ" work --queue g --drain -- "$T"
grep -q "is a directory" "$T/err" || fail "no reason given: $(cat "$T/err")"
expect_eq "$(job "$id" state)" ready "the job after a refused start"
expect_eq "$(job "$id" claims)" 0 "claims after a refused start"
"$TQ" cancel "$id" >/dev/null

# Out of descriptors: 30 slots where only a few handlers fit. No job is
# charged for it; all are done on their first attempt, and the cause is
# logged once.
"$TQ" queue fd --max-attempts 1 >/dev/null
for i in $(seq 1 150); do echo "$i"; done | "$TQ" enqueue --queue fd --lines >/dev/null
(ulimit -n 40 && exec "$TQ" work --queue fd --concurrency 30 --drain -- sleep 0.02) 2>"$T/w4.log" ||
    fail "worker: $(cat "$T/w4.log")"
expect_eq "$(sql "SELECT state || ':' || attempts || ':' || count(*) FROM $JOBS WHERE queue = 'fd' GROUP BY state, attempts")" \
    "done:1:150" "jobs out of descriptors"
expect_eq "$(grep -c 'Too many open files' "$T/w4.log")" 1 "log lines for the cause"

# Out of processes (a user's process limit; root has none): the same.
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -m 777 "$T/np"
    cp "$TQ" "$T/np/tq"
    chmod 755 "$T/np/tq"
    np="$T/np/store.db"
    TQ_DB=$np "$TQ" init >/dev/null
    TQ_DB=$np "$TQ" queue p --max-attempts 1 >/dev/null
    for i in $(seq 1 40); do echo "$i"; done | TQ_DB=$np "$TQ" enqueue --queue p --lines >/dev/null
    chown -R nobody "$T/np"
    # (LeakSanitizer's checker would itself need a process.)
    su nobody -s /bin/bash -c "ulimit -u 6 && ASAN_OPTIONS=\${ASAN_OPTIONS:-}:detect_leaks=0 \
        TQ_DB='$np' exec '$T/np/tq' work --queue p --concurrency 20 --drain -- sleep 0.05" \
        2>"$T/w5.log" || fail "worker: $(cat "$T/w5.log")"
    expect_eq "$(TQ_DB=$np "$TQ" stats --json | jq -r '"\(.counts.ready) \(.counts.done) \(.counts.dead)"')" \
        "0 40 0" "jobs out of processes"
    grep -q 'Resource temporarily unavailable' "$T/w5.log" || fail "the limit was never hit"
fi

# The program deleted while the worker runs: jobs go back unspent, and the
# worker stops with one line once it stayed gone (10 s). A binary, not a
# script: a script's interpreter opens it after the exec, so deleting it
# can also fail a run that did start (the handler's own failure).
cp "$(command -v sleep)" "$T/quick"
"$TQ" queue del --max-attempts 1 >/dev/null
for i in $(seq 1 100); do echo "$i"; done | "$TQ" enqueue --queue del --lines >/dev/null
bg "$TQ" work --queue del --concurrency 4 -- "$T/quick" 0.02 2>"$T/w6.log"
w=$BG
some_done() { [ "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'del' AND state = 'done'")" -gt 5 ]; }
wait_for 10 some_done
rm "$T/quick"
wait_rc "$w"
expect_eq "$RC" 1 "exit status of a worker whose handler is gone"
grep -q "cannot start '$T/quick': No such file or directory (for .*); stopping" "$T/w6.log" ||
    fail "no reason given"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'del' AND state NOT IN ('done', 'ready')")" 0 \
    "jobs neither done nor ready"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'del' AND state = 'ready' AND attempts > 0")" 0 \
    "ready jobs charged"

# A worker whose stdout is a pipe nobody reads: its handlers print anyway.
"$TQ" queue out --max-attempts 1 >/dev/null
id=$("$TQ" enqueue --queue out x)
exec 4> >(exit 0)
sleep 0.2 # the reader is gone
"$TQ" work --queue out --drain -- sh -c 'echo to stdout; echo more' >&4 2>"$T/w7.log" ||
    fail "worker: $(cat "$T/w7.log")"
exec 4>&-
expect_eq "$(job "$id" state)" done "the job of a handler that printed"
echo ok
