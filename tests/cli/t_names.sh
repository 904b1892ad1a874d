# A worker name means one process: workers started with the same new name
# at the same instant, again and again, leave exactly one running.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
for i in $(seq 1 30); do
    "$TQ" work --queue twins --name "twin$i" --quiet -- true 2>"$T/a.err" &
    a=$!
    "$TQ" work --queue twins --name "twin$i" --quiet -- true 2>"$T/b.err" &
    b=$!
    BG_PIDS+=("$a" "$b")
    # One of them is refused at once; the other runs until stopped.
    wait_for 20 sh -c "! kill -0 $a 2>/dev/null || ! kill -0 $b 2>/dev/null"
    sleep 0.2
    alive=0
    for p in $a $b; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    expect_eq "$alive" 1 "workers running under twin$i"
    cat "$T/a.err" "$T/b.err" | grep -q "held by a live worker" ||
        fail "no refusal for twin$i: $(cat "$T/a.err" "$T/b.err")"
    kill -TERM "$a" "$b" 2>/dev/null || true
    wait "$a" "$b" 2>/dev/null || true
done

# A worker frozen past its lease loses its name to a new one; when it wakes,
# its heartbeat finds the name taken: it stops, says so and exits 1, and
# the new holder keeps the name (its registration is not marked stopped).
"$TQ" queue fz --lease 3s >/dev/null
alive() { # NAME PID: the registered worker NAME is alive and is PID
    "$TQ" workers --json >"$T/workers.log" &&
        jq -e --arg n "$1" --argjson p "$2" \
            '.[] | select(.name == $n and .status == "alive" and .pid == $p)' \
            "$T/workers.log" >/dev/null
}
bg "$TQ" work --queue fz --name frozen -- true 2>"$T/old.log"
old=$BG
wait_for 20 alive frozen "$old"
freeze "$old"
sleep 4 # past its 3 s lease
bg "$TQ" work --queue fz --name frozen --quiet -- true 2>"$T/new.log"
new=$BG
wait_for 20 alive frozen "$new"
kill -CONT "$old"
wait_rc "$old"
expect_eq "$RC" 1 "exit of the worker whose name was taken"
grep -q "registered by another process" "$T/old.log" || fail "no message: $(cat "$T/old.log")"
kill -0 "$new" || fail "the new holder stopped"
expect_eq "$("$TQ" workers --json | jq -r '.[] | select(.name == "frozen") | .status')" alive "the name's status"
kill -TERM "$new"
wait_rc "$new"
expect_eq "$RC" 0 "exit of the new holder"

# Default names are unique across PID namespaces: two workers, each PID 1
# of a sibling namespace on this host (two containers with one hostname),
# run side by side under names that tell them apart.
if unshare --pid --fork --mount-proc true 2>/dev/null; then
    for i in 1 2; do
        bg unshare --pid --fork --mount-proc --kill-child "$TQ" work --queue pidns \
            --quiet -- true 2>"$T/ns$i.log"
        ns[$i]=$BG
    done
    two_alive() {
        [ "$("$TQ" workers --json | jq '[.[] | select(.status == "alive" and .pid == 1)] | length')" = 2 ]
    }
    wait_for 20 two_alive
    names=$("$TQ" workers --json | jq -r '.[] | select(.pid == 1) | .name')
    grep -qx "$(hostname):1@[0-9]*" <<<"$names" || fail "default names: $names"
    for i in 1 2; do # (unshare itself ignores SIGTERM while its child runs)
        w=$(pgrep -P "${ns[$i]}") || fail "worker $i stopped: $(cat "$T/ns$i.log")"
        kill -TERM "$w"
        wait_rc "${ns[$i]}"
        expect_eq "$RC" 0 "exit of worker $i"
    done
else
    echo "note: unshare --pid is not permitted here; the PID-namespace case is not run"
fi
echo ok
