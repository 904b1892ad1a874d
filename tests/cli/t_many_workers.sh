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
for p in "${pids[@]}"; do
    wait_rc "$p"
    expect_eq "$RC" 0 "worker exit"
done
expect_eq "$(lines "$T/runs")" $N "handler runs"
expect_eq "$(cut -d' ' -f1 "$T/runs" | sort | uniq -d | wc -l)" 0 "jobs run twice"
expect_eq "$(cut -d' ' -f2 "$T/runs" | sort -n | uniq | wc -l)" $N "distinct payloads"
expect_eq "$("$TQ" stats --queue many --json | jq .counts.done)" $N "done"
# Every worker took part.
expect_eq "$("$TQ" list --queue many --limit $N --json | jq '[.[].worker] | unique | length')" 8 "workers used"
echo ok
