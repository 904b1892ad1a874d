# Bad input: one clear line on stderr, a non-zero exit (2 for usage), and
# the store unchanged.
. "$(dirname "$0")/lib.sh"

"$TQ" init >/dev/null
"$TQ" enqueue --queue q keep >/dev/null
"$TQ" queue q --lease 40s >/dev/null
before=$(fingerprint)

bad() { # CODE ARGS...: expect exit CODE, one line on stderr, store unchanged
    local code=$1
    shift
    expect_exit "$code" "$@"
    [ "$(wc -l <"$T/err")" = 1 ] || fail "'$*' printed $(wc -l <"$T/err") lines: $(cat "$T/err")"
    grep -q '^tq' "$T/err" || fail "'$*': message does not say tq: $(cat "$T/err")"
    [ "$(fingerprint)" = "$before" ] || fail "'$*' changed the store"
}

bad 2 "$TQ" bogus
bad 2 "$TQ" --bogus stats
bad 2 "$TQ" enqueue --bogus x
bad 2 "$TQ" enqueue --queue
bad 2 "$TQ" enqueue --delay 5x x
bad 2 "$TQ" enqueue --delay -5s x
bad 2 "$TQ" enqueue --at tomorrow x
bad 2 "$TQ" enqueue --delay 5s --at @1 x
bad 2 "$TQ" enqueue --queue 'bad name' x
bad 2 "$TQ" enqueue --queue "$(printf 'q%.0s' $(seq 65))" x
bad 2 "$TQ" enqueue --priority abc x
bad 2 "$TQ" enqueue --max-attempts 0 x
bad 2 "$TQ" enqueue --key '' x
bad 2 "$TQ" enqueue
bad 2 "$TQ" enqueue a b
bad 2 "$TQ" enqueue --lines x
bad 2 sh -c "head -c 1048577 /dev/zero | '$TQ' enqueue -"
bad 2 sh -c "head -c 1048577 /dev/zero | tr '\\0' x | '$TQ' enqueue --lines"
bad 2 "$TQ" queue q --order random
bad 2 "$TQ" queue q --lease 0s
bad 2 "$TQ" queue q --lease forever
bad 2 "$TQ" queue q --max-attempts 0
bad 2 "$TQ" queue q --backoff 10s:1s
bad 2 "$TQ" queue 'no/slash' --pause
bad 2 "$TQ" queue --order lifo
bad 2 "$TQ" list --state bogus
bad 2 "$TQ" list --limit 0
bad 2 "$TQ" show abc
bad 2 "$TQ" show
bad 1 "$TQ" show 999999
bad 1 "$TQ" cancel 999999
bad 1 "$TQ" retry 999999
bad 1 "$TQ" retry 1 # a ready job: nothing to retry
bad 2 "$TQ" retry
bad 2 "$TQ" prune
bad 2 "$TQ" prune --older-than 1d --state ready
bad 2 "$TQ" prune --older-than soon
bad 2 "$TQ" work -- /no/such/command
bad 2 "$TQ" work --concurrency 0 -- true
bad 2 "$TQ" work --timeout 1y -- true
bad 2 "$TQ" work --poll 0 -- true
bad 2 "$TQ" work
bad 2 "$TQ" --db 'mysql://h/db' stats
[ "$ENGINE" = sqlite ] && bad 2 "$TQ" --db "$TQ_DB?synchronous=off" stats
bad 2 "$TQ" bench --jobs 0
bad 1 "$TQ" --db "$T/no/such/dir/x.db" init
[ -e "$T/no" ] && fail "init created a directory"
bad 1 "$TQ" --db "$T/missing.db" enqueue x
[ -e "$T/missing.db" ] && fail "enqueue created a store"
bad 2 "$TQ" --db "$T/missing.db" init --grant-worker someone
[ -e "$T/missing.db" ] && fail "init with grants created a SQLite store"
bad 2 "$TQ" init --grant-producer
bad 1 "$TQ" --db "$T/missing.db" stats

# A password in a URL is never echoed.
expect_exit 2 "$TQ" --db 'mysql://u:hunter2@h/db' stats
grep -q hunter2 "$T/err" && fail "password in message"
# (libpq would quote a bad %-escape, password and all.)
bad 2 "$TQ" --db 'postgresql://u:hunter2%zz@/postgres' stats
grep -q hunter2 "$T/err" && fail "password in message: $(cat "$T/err")"
if [ "$ENGINE" = postgres ]; then
    # A store URL with a password: in errors and in normal output, hidden.
    rest=${TQ_TEST_PG_URL#postgresql:///postgres} # ?host=...&user=...
    pw_url="postgresql://tq:hunter2@/postgres$rest"
    expect_exit 1 "$TQ" --db "postgresql://tq:hunter2@/nosuchdb$rest" stats
    grep -q hunter2 "$T/out" "$T/err" && fail "password in output: $(cat "$T/err")"
    grep -q 'tq:\*\*\*@' "$T/err" || fail "URL not shown redacted: $(cat "$T/err")"
    expect_exit 0 "$TQ" --db "$pw_url&tq_schema=$SCHEMA" init
    grep -q hunter2 "$T/out" "$T/err" && fail "password in init output"
    expect_exit 0 "$TQ" --db "$pw_url&tq_schema=$SCHEMA" work --drain --verbose -- true
    grep -q hunter2 "$T/out" "$T/err" && fail "password in worker log"
    before=$(fingerprint)
    # tq's own URL parameters: a bad pool mode, a misspelt name, refused.
    bad 2 "$TQ" --db "$TQ_DB&tq_pool=statement" enqueue x
    grep -q "bad tq_pool.*transaction" "$T/err" || fail "tq_pool: $(cat "$T/err")"
    bad 2 "$TQ" --db "$TQ_DB&tq_lisen=x" enqueue x
    grep -q "unknown store URL parameter 'tq_lisen'" "$T/err" || fail "tq_lisen: $(cat "$T/err")"
fi

# Every command has --help.
for c in init queue enqueue work stats list show retry cancel prune workers bench; do
    expect_exit 0 "$TQ" "$c" --help
    grep -q "^usage: tq $c" "$T/out" || fail "$c --help"
done
expect_exit 0 "$TQ" --help
[ "$(fingerprint)" = "$before" ] || fail "store changed"
echo "ok"
