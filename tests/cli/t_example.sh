# The embedding example builds (it is part of the build) and runs.
. "$(dirname "$0")/lib.sh"
: "${TQ_EMBED:?}"
"$TQ_EMBED" "$T/embed.db" >"$T/out" || fail "embed: $(cat "$T/out")"
grep -q "handled 4 jobs: 4 done, 1 failed attempts" "$T/out" || fail "$(cat "$T/out")"
echo ok
