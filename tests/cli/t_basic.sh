# The everyday flow: init, enqueue (arg, stdin, lines, dedup), a handler
# that sees its payload and environment, list/show/stats, plain-SQL enqueue.
. "$(dirname "$0")/lib.sh"

expect_exit 0 "$TQ" init
grep -q "store ready" "$T/out" || fail "init output: $(cat "$T/out")"
[ "$ENGINE" = sqlite ] && expect_eq "$(stat -c %a "$TQ_DB")" 600 "store file mode"
expect_exit 0 "$TQ" init # idempotent

id1=$("$TQ" enqueue --queue mail 'hello world')
id2=$(printf 'from\nstdin' | "$TQ" enqueue --queue mail -)
expect_exit 0 "$TQ" enqueue --queue mail --key order-1 'first'
kid=$(cat "$T/out")
expect_exit 0 "$TQ" enqueue --queue mail --key order-1 'second'
expect_eq "$(cat "$T/out")" "$kid" "duplicate prints the kept id"
grep -q "duplicate" "$T/err" || fail "duplicate not reported"
expect_eq "$(job "$kid" payload)" first "the first row is kept"
printf 'l1\nl2\n\nl3\n' | "$TQ" enqueue --lines --queue mail >"$T/out"
grep -q "enqueued 3 jobs" "$T/out" || fail "--lines: $(cat "$T/out")"

# Plain SQL, as any producer would enqueue inside its own transaction.
plain_insert mail 'from sql' COMMIT
plain_insert mail 'rolled back' ROLLBACK

expect_eq "$("$TQ" stats --queue mail --json | jq .counts.ready)" 7 "ready count"

# The handler gets the payload on stdin and the job in its environment.
handler h.sh 'out="'"$T"'/seen.$TQ_JOB_ID"; cat > "$out"; printf "\n%s %s %s\n" "$TQ_JOB_ID" "$TQ_QUEUE" "$TQ_ATTEMPT" >> "$out"'
expect_exit 0 "$TQ" work --queue mail --drain --concurrency 3 -- "$T/h.sh"
expect_eq "$(ls "$T"/seen.* | wc -l)" 7 "handler runs"
expect_eq "$(head -c 11 "$T/seen.$id1")" "hello world" "payload on stdin"
expect_eq "$(tail -1 "$T/seen.$id1")" "$id1 mail 1" "environment"
expect_eq "$(head -2 "$T/seen.$id2" | tr '\n' '|')" "from|stdin|" "stdin payload"
grep -rq "from sql" "$T"/seen.* || fail "the plain-SQL job did not run"
grep -rq "rolled back" "$T"/seen.* && fail "a rolled-back insert ran"

expect_eq "$(job "$id1" state)" done "state after work"
[ "$(job "$id1" duration_us)" -ge 0 ] || fail "no duration"
expect_eq "$("$TQ" list --queue mail --state done --json | jq length)" 7 "list done"
expect_eq "$("$TQ" list --limit 2 --json | jq length)" 2 "list --limit"
s=$("$TQ" stats --json)
expect_eq "$(echo "$s" | jq .counts.done)" 7 "stats done"
expect_eq "$(echo "$s" | jq .done_last_minute)" 7 "done in the last minute"
expect_eq "$(echo "$s" | jq .recent_done)" 7 "recent durations"
"$TQ" stats | grep -q "p95" || fail "text stats"
"$TQ" show "$id1" | grep -q "state:        done" || fail "text show"
"$TQ" workers --json | jq -e '.[0].status == "stopped"' >/dev/null || fail "worker listed as stopped"

# Queue settings.
"$TQ" queue mail --order lifo --lease 45s --max-attempts 5 --backoff 2s:1m --delete-done --pause >/dev/null
q=$("$TQ" queue mail --json)
expect_eq "$(echo "$q" | jq -c '[.order,.lease_us,.max_attempts,.backoff_base_us,.backoff_cap_us,.keep_done,.paused]')" \
    '["lifo",45000000,5,2000000,60000000,false,true]' "queue settings"
"$TQ" queue mail --resume --keep-done >/dev/null
expect_eq "$("$TQ" queue --json | jq -r '[.[].name] | join(",")')" "mail" "queue list"
# One worker serves several queues.
"$TQ" enqueue --queue one a1 >/dev/null
"$TQ" enqueue --queue two b1 >/dev/null
"$TQ" enqueue --queue two b2 >/dev/null
handler both.sh 'echo "$TQ_QUEUE" >> "'"$T"'/both"'
"$TQ" work --queue one --queue two --drain --quiet -- "$T/both.sh"
expect_eq "$(sort "$T/both" | tr '\n' ' ')" "one two two " "jobs of both queues"
echo "ok"
