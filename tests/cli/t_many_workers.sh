# 8 `tq work` processes with command handlers share one queue: every job
# runs exactly once, none is lost.
. "$(dirname "$0")/lib.sh"
N=2000
"$TQ" init >/dev/null
seq 1 $N | "$TQ" enqueue --lines --queue many >/dev/null
handler h.sh 'echo "$TQ_JOB_ID $(cat)" >> "'"$T"'/runs"'
pids=()
for i in 1 2 3 4 5 6 7 8; do
    bg "$TQ" work --queue many --name "w$i" --concurrency 2 --drain --quiet -- "$T/h.sh"
    pids+=("$BG")
done
wait_ok "a worker" "${pids[@]}"
runs_once "$T/runs" 1 $N
expect_eq "$(cut -d' ' -f2 "$T/runs" | sort -n | uniq | wc -l)" $N "distinct payloads"
expect_eq "$("$TQ" stats --queue many --json | jq .counts.done)" $N "done"
# Every worker took part.
expect_eq "$("$TQ" list --queue many --limit $N --json | jq '[.[].worker] | unique | length')" 8 "workers used"
echo ok
