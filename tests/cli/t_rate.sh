# Rate limits, kept by the store for every worker: --rate 20/1s, 4 workers
# with 4 slots each, 60 no-op jobs (some from plain SQL): the run takes at
# least 2.5 s, no 1-second window of the handlers' log sees more than 20
# starts, and every job ran exactly once. Bad rates change nothing.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null

handler h.sh 'echo "S $(date +%s%N) $TQ_JOB_ID" >>"'"$T"'/log"'

"$TQ" queue r --rate 20/1s >/dev/null
seq 1 50 | "$TQ" enqueue --queue r --lines >/dev/null
for i in $(seq 51 60); do
    sql "INSERT INTO $JOBS (queue, payload) VALUES ('r', $(payload_sql "$i"))"
done

start=$(date +%s%N)
pids=()
for w in 1 2 3 4; do
    bg "$TQ" work --queue r --concurrency 4 --drain --name "w$w" -- "$T/h.sh" \
        2>>"$T/work.log"
    pids+=("$BG")
done
wait_ok "a worker" "${pids[@]}"
took_ms=$((($(date +%s%N) - start) / 1000000))

expect_eq "$(grep -c '^S' "$T/log")" 60 "starts logged"
expect_eq "$(awk '{ print $3 }' "$T/log" | sort | uniq -d | wc -l)" 0 "jobs started twice"
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'r' AND state = 'done'")" 60 \
    "done jobs"
[ "$took_ms" -ge 2500 ] || fail "60 jobs at 20/1s took ${took_ms} ms (want >= 2500)"
# The most starts in any window [t, t + 1 s) that begins at a start.
most=$(awk '{ print $2 }' "$T/log" | sort -n | awk '
    { t[NR] = $1 }
    END { j = 1; for (i = 1; i <= NR; i++) {
              while (j <= NR && t[j] < t[i] + 1000000000) j++
              if (j - i > top) top = j - i }
          print top + 0 }')
[ "$most" -le 20 ] || fail "$most starts in one second (rate 20/1s)"

# Bad rates: one line, exit 2, the queue as it was.
for bad in 5 x/s 0/s -1/s 5/0.5ms 5/xyz 5/ /s 1000000001/s; do
    expect_exit 2 "$TQ" queue r --rate "$bad"
    grep -q "tq queue: .*rate" "$T/err" || fail "--rate $bad: no message naming the rate"
done
expect_eq "$("$TQ" queue r --json | jq -c '[.rate_limit, .rate_period_us, .rate_burst]')" \
    "[20,1000000,1]" "rate after bad input"
expect_eq "$("$TQ" queue r --rate 100/m --json | jq -c '[.rate_limit, .rate_period_us]')" \
    "[100,60000000]" "a bare unit is one of it"
expect_eq "$("$TQ" queue r --rate 0 --json | jq -c '.rate_limit')" 0 "--rate 0 removes it"
echo "ok: 60 jobs at 20/1s in ${took_ms} ms, at most $most starts in a second"
