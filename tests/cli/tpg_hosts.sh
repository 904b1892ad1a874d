# Many hosts: four workers with distinct names (four app servers) share one
# PostgreSQL queue: 20,000 jobs, each exactly once. Then kill -9 one of them
# mid-run: the others rescue its jobs after the lease; none is lost, and a
# job that ran twice has the second claim on record.
. "$(dirname "$0")/lib.sh"
[ "$ENGINE" = postgres ] || fail "this test needs TQ_TEST_ENGINE=postgres"
: "${TQ_RECORD:?}"
N=20000
"$TQ" init >/dev/null
"$TQ" queue h --lease 3s >/dev/null
seq 1 $N | "$TQ" enqueue --lines --queue h >/dev/null
pids=()
for host in app1 app2 app3 app4; do
    bg "$TQ" work --queue h --name $host --concurrency 4 --drain --quiet -- \
        "$TQ_RECORD" "$T/runs" $host
    pids+=("$BG")
done
wait_ok "a worker" "${pids[@]}"
runs_once "$T/runs" 1 $N
expect_eq "$("$TQ" stats --queue h --json | jq .counts.done)" $N done
expect_eq "$(cut -d' ' -f3 "$T/runs" | sort -u | tr '\n' ' ')" "app1 app2 app3 app4 " "hosts used"

# kill -9 one host mid-run: the history checker (tests/history.c) checks
# every run (a job may run again only under a new claim, after the killed
# host's lease) and every row.
seq 1 4000 | "$TQ" enqueue --lines --queue k >/dev/null
"$TQ" queue k --lease 3s >/dev/null
pids=()
for host in app1 app2 app3 app4; do
    bg "$TQ" work --queue k --name $host --concurrency 4 --drain --quiet -- \
        "$TQ_HISTORY" run "$T/history" $host
    pids+=("$BG")
done
wait_for 60 sh -c "[ \$(grep -c '^F .* app3 ' '$T/history' 2>/dev/null || echo 0) -gt 50 ]"
kill -9 "${pids[2]}"
for p in "${pids[@]}"; do wait_rc "$p"; done
expect_eq "$("$TQ" stats --queue k --json | jq .counts.done)" 4000 "done after kill -9"
history_check k "$T/history" --lease 3000 --faulted app3 --all-done
echo ok
