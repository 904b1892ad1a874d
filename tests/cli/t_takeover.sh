# A worker name taken over never reruns the jobs of a holder that may
# still be running them. Each part fails on a build where the name's
# registration kept the lease it started with, or where the rescue at a
# takeover put back every job the name held.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
LOG=$T/history

running() { # QUEUE N: N jobs of QUEUE have started
    [ "$(grep -c "^S" "$LOG" 2>/dev/null)" -ge "$2" ] &&
        [ "$(sql "SELECT count(*) FROM $JOBS WHERE queue = '$1' AND state = 'running'")" -ge "$2" ]
}
# The running jobs of QUEUE whose lease ends more than 30 s from now.
long_leases() {
    if [ "$ENGINE" = postgres ]; then
        sql "SELECT count(*) FROM $JOBS WHERE queue = '$1' AND state = 'running'
             AND lease_until > now() + interval '30 s'"
    else
        sql "SELECT count(*) FROM tq_jobs WHERE queue = '$1' AND state = 'running'
             AND lease_until > (julianday('now') - 2440587.5) * 86400000000 + 30000000"
    fi
}
alive() { # NAME PID: the registered worker NAME is alive and is PID
    "$TQ" workers --json >"$T/workers.out" &&
        jq -e --arg n "$1" --argjson p "$2" \
            '.[] | select(.name == $n and .status == "alive" and .pid == $p)' \
            "$T/workers.out" >/dev/null
}
work() { # QUEUE LABEL MS: a worker named shared-QUEUE whose runs log as LABEL
    bg "$TQ" work --queue "$1" --name "shared-$1" --concurrency 2 --quiet -- \
        "$TQ_HISTORY" run "$LOG" "$2" "$3" 2>>"$T/$2.log"
}

# 1. The registration's lease follows the queue's. A starts on a queue
# whose lease is 2 s, which is then raised to 60 s: A renews its jobs for
# 60 s and its name for as long. Frozen 3 s, it still holds the name: B
# and C are refused (a build that kept the 2 s let B take the name, and C,
# after B's kill -9, put back A's live jobs and ran them beside A's).
"$TQ" queue up --lease 2s >/dev/null
for i in 1 2; do "$TQ" enqueue --queue up "job $i" >/dev/null; done
work up A 15000
a=$BG
wait_for 20 running up 2
"$TQ" queue up --lease 60s >/dev/null
renewed() { [ "$(long_leases up)" = 2 ]; }
wait_for 20 renewed
sleep 1.5 # the heartbeat that renews the jobs renews the name too
freeze "$a"
sleep 3 # past the 2 s the name was first registered for
for who in B C; do
    work up "$who" 15000
    b=$BG
    sleep 2
    if kill -0 "$b" 2>/dev/null; then # it took the name: a crash of it
        kill -9 "$b"
        wait_rc "$b"
        "$TQ_HISTORY" kill "$LOG" "$who"
    else
        wait_rc "$b"
        expect_eq "$RC" 1 "exit of worker $who, refused the name"
        grep -q "held by a live worker" "$T/$who.log" || fail "$who: $(cat "$T/$who.log")"
    fi
done
kill -CONT "$a"
# A finishes its two runs (or, where its jobs were taken, stops them).
finished() { [ "$(grep -c '^F' "$LOG")" -ge 2 ] || ! kill -0 "$a" 2>/dev/null; }
wait_for 40 finished
kill -TERM "$a" 2>/dev/null || true
wait_rc "$a"
history_check up "$LOG" --lease 60000 --faulted A

# 2. A takeover rescues the registration that is gone and no other. A2's
# registration lapses (made to look silent past its lease) while it runs
# two jobs leased for a minute; B2 takes the name over, claims a third job
# and is killed; C2, finding B2 gone, puts back B2's job alone and runs it.
# A2's jobs run once, on A2, which then stops: its name was taken.
: >"$LOG"
"$TQ" queue lap --lease 60s >/dev/null
for i in 1 2; do "$TQ" enqueue --queue lap "job $i" >/dev/null; done
work lap A2 6000
a=$BG
wait_for 20 running lap 2
freeze "$a"
if [ "$ENGINE" = postgres ]; then
    sql "UPDATE $SCHEMA.workers SET heartbeat_at = now() - interval '1 day'
         WHERE name = 'shared-lap'"
else
    sql "UPDATE tq_workers SET heartbeat_at = 0 WHERE name = 'shared-lap'"
fi
work lap B2 20000
b=$BG
wait_for 20 alive shared-lap "$b"
"$TQ" enqueue --queue lap "job 3" >/dev/null
wait_for 20 running lap 3
kill -9 "$b"
wait_rc "$b"
"$TQ_HISTORY" kill "$LOG" B2
work lap C2 200
c=$BG
wait_for 20 alive shared-lap "$c"
grep -q "put back 1 job" "$T/C2.log" || fail "C2 put back: $(cat "$T/C2.log")"
kill -CONT "$a"
wait_for 30 sh -c "[ \$(grep -c '^F' '$LOG') -ge 3 ]"
wait_rc "$a"
expect_eq "$RC" 1 "exit of A2, whose name was taken"
kill -TERM "$c"
wait_rc "$c"
history_check lap "$LOG" --lease 60000 --faulted A2 --all-done
echo ok
