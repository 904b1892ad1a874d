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
echo ok
