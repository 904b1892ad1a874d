# cancel, retry (one, and --dead), prune.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
"$TQ" queue m --max-attempts 1 >/dev/null
a=$("$TQ" enqueue --queue m a)
b=$("$TQ" enqueue --queue m b)
"$TQ" cancel "$a" >/dev/null
expect_eq "$(job "$a" state)" cancelled cancel
expect_exit 1 "$TQ" cancel "$a"
grep -q "cancelled: cannot cancel" "$T/err" || fail "message: $(cat "$T/err")"
"$TQ" work --queue m --drain --quiet -- false
expect_eq "$(job "$b" state)" dead "failed once, max 1"
expect_eq "$("$TQ" retry --dead --queue m)" "1 dead job(s) back to ready" "retry --dead"
expect_eq "$(job "$b" state)" ready "after retry --dead"
expect_eq "$(job "$b" attempts)" 0 "attempts reset"
"$TQ" retry "$a" >/dev/null
expect_eq "$(job "$a" state)" ready "retry of a cancelled job"
"$TQ" work --queue m --drain --quiet -- true
expect_eq "$("$TQ" stats --queue m --json | jq .counts.done)" 2 done
expect_eq "$("$TQ" prune --older-than 1h)" "pruned 0 job(s)" "nothing old enough"
sleep 0.1
expect_eq "$("$TQ" prune --older-than 0s --state dead)" "pruned 0 job(s)" "no dead jobs"
expect_eq "$("$TQ" prune --older-than 0s)" "pruned 2 job(s)" prune
expect_exit 1 "$TQ" show "$a"
echo ok
