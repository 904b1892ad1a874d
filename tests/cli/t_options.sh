# The command line's options (tools/options.c): short forms of the common
# ones, tq -v and tq version, abbreviations of long options and the
# refusal of an ambiguous one.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

# ---- short options: -q -c -n -d -j -------------------------------------------
"$TQ" enqueue -q q one >/dev/null
"$TQ" enqueue -qq two >/dev/null
expect_exit 0 "$TQ" work -c 2 -q q -n w1 --drain -- true
grep -q "w1 info: started: queue q; concurrency 2" "$T/err" || fail "log: $(head -1 "$T/err")"
expect_eq "$("$TQ" stats -q q -j | jq .counts.done)" 2 "jobs done by the worker of short options"
expect_eq "$("$TQ" workers -j | jq -r '.[].name')" w1 "the worker's name (-n)"
expect_eq "$("$TQ" list -jq q | jq length)" 2 "grouped short options (-jq q)"
expect_exit 0 "$TQ" -d "$T/other.db" init
expect_eq "$("$TQ" list -d "$T/other.db" -j)" "[]" "-d after the command"
expect_eq "$("$TQ" -d "$T/other.db" enqueue x)" 1 "-d before the command"
for c in enqueue work stats list; do
    "$TQ" "$c" --help | head -1 | grep -qF -- "-q|--queue" || fail "tq $c --help shows no -q"
done
"$TQ" work --help | head -1 | grep -qF -- "[-c|--concurrency N]" || fail "work --help: no -c"
expect_exit 2 "$TQ" enqueue -q
expect_eq "$(cat "$T/err")" "tq enqueue: option '-q' needs a value (see tq enqueue --help)" \
    "short option without its value"
expect_exit 2 "$TQ" enqueue -x y
expect_eq "$(cat "$T/err")" "tq enqueue: unknown option '-x' (see tq enqueue --help)" \
    "unknown short option"
expect_exit 2 "$TQ" work -c 0 -- true
grep -q "invalid value '0' for --concurrency" "$T/err" || fail "-c 0: $(cat "$T/err")"

# ---- tq -v, tq version ------------------------------------------------------------
v=$("$TQ" --version)
[[ $v == "tq "[0-9]* ]] || fail "tq --version: $v"
expect_eq "$("$TQ" -v)" "$v" "tq -v"
expect_eq "$("$TQ" version)" "$v" "tq version"
"$TQ" --help | grep -q "^  version " || fail "tq --help does not list version"
expect_exit 2 "$TQ" version extra

# ---- abbreviations: unambiguous ones taken, ambiguous ones refused -------------
id=$("$TQ" enqueue --queu mail x)
expect_eq "$(job "$id" queue)" mail "--queu is --queue"
id=$("$TQ" enqueue --prio=5 --q mail y)
expect_eq "$(job "$id" priority)" 5 "--prio=5 is --priority=5"
before=$(fingerprint)
expect_exit 2 "$TQ" retry --d
expect_eq "$(cat "$T/err")" "tq retry: ambiguous option '--d' (could be --db or --dead)" \
    "an ambiguous abbreviation"
expect_exit 2 "$TQ" queue mail --max-run 2
expect_eq "$(cat "$T/err")" \
    "tq queue: ambiguous option '--max-run' (could be --max-running or --max-running-per-group)" \
    "an ambiguous abbreviation of a setting"
expect_exit 2 "$TQ" enqueue --u stored --key k z
grep -q "could be --unique or --unique-for" "$T/err" || fail "--u: $(cat "$T/err")"
expect_eq "$(fingerprint)" "$before" "the store after refused options"
expect_exit 0 "$TQ" queue mail --max-running 2 # a whole name is never ambiguous
expect_eq "$("$TQ" queue -j | jq '.[] | select(.name == "mail") | .max_running')" 2 \
    "--max-running"

# ---- --forget-stopped: which stopped workers a worker's start forgets ----------
expect_exit 2 "$TQ" work --forget-stopped 0 -- true
grep -q "give at least 1s, or never" "$T/err" || fail "--forget-stopped 0: $(cat "$T/err")"
expect_exit 2 "$TQ" work --forget-stopped soon -- true
expect_exit 0 "$TQ" work -q none -n f1 --drain -- true
sleep 1.2
expect_exit 0 "$TQ" work -q none -n f2 --drain --forget-stopped never -- true
names() { "$TQ" workers -j | jq -r '[.[].name | select(startswith("f"))] | sort | join(" ")'; }
expect_eq "$(names)" "f1 f2" "never: the worker stopped a second ago is kept"
expect_exit 0 "$TQ" work -q none -n f3 --drain --forget-stopped 1s -- true
expect_eq "$(names)" "f2 f3" "1s: the one stopped over a second ago is forgotten"
echo ok
