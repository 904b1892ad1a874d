# The history checker (tests/history.c) itself: it passes a clean history
# and names each kind of violation in crafted ones, so the fault tests that
# rely on it cannot pass by checking nothing.
. "$(dirname "$0")/lib.sh"
H=$TQ_HISTORY

# check NAME WANT OPTIONS...: runs the checker over $T/NAME.log and
# $T/NAME.rows; WANT is "ok" or a text its violations must contain.
check() {
    local name=$1 want=$2
    shift 2
    set +e
    "$H" check "$T/$name.log" "$T/$name.rows" "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    set -e
    if [ "$want" = ok ]; then
        [ $rc = 0 ] || fail "$name: expected ok, got $rc: $(cat "$T/err")"
        grep -q ": ok$" "$T/out" || fail "$name: no summary: $(cat "$T/out")"
    else
        [ $rc = 1 ] || fail "$name: expected a violation, got $rc: $(cat "$T/out" "$T/err")"
        grep -q "$want" "$T/err" || fail "$name: expected '$want', got: $(cat "$T/err")"
    fi
}

# A clean run: job 1 once; job 2 failed on A, retried on B.
printf 'S 1 1 1 A 1000\nF 1 1 1 A 2000 0\nS 2 1 1 A 1000\nF 2 1 1 A 1500 1\nS 2 2 2 B 3000000\nF 2 2 2 B 3000100 0\n' >"$T/clean.log"
printf '1 done 1\n2 done 2\n' >"$T/clean.rows"
check clean ok --all-done
expect_eq "$(cat "$T/out")" "history: 2 jobs, 3 runs, 1 reruns (0 overlapping a faulted worker's run), 2 rows: ok" summary

# A frozen worker's run overlapped by the rerun, a lease later.
printf 'S 1 1 1 A 0\nS 1 2 2 B 2000000\nF 1 2 2 B 2000100 0\nF 1 1 1 A 4000000 1\n' >"$T/frozen.log"
printf '1 done 2\n' >"$T/frozen.rows"
check frozen ok --lease 2000 --faulted A
check frozen "was not faulted" --lease 2000
cp "$T/frozen.rows" "$T/early.rows"
sed 's/^S 1 2 2 B 2000000/S 1 2 2 B 100000/' "$T/frozen.log" >"$T/early.log"
check early "before its lease could expire" --lease 2000 --faulted A

# A killed worker's unfinished run ends at its kill line; restarted under
# its name, it may rerun the job at once, under the same attempt.
printf 'S 1 1 1 A 0\nK A 100\nS 1 2 1 A 200\nF 1 2 1 A 300 0\n' >"$T/killed.log"
printf '1 done 2\n' >"$T/killed.rows"
check killed ok
# The rerun started before the kill, or the killed run's handler lived on.
printf 'S 1 1 1 A 0\nS 1 2 1 A 200\nF 1 2 1 A 300 0\nK A 400\n' >"$T/prekill.log"
cp "$T/killed.rows" "$T/prekill.rows"
check prekill "started while claim 1 on A ran"
printf 'S 1 1 1 A 0\nK A 100\nS 1 2 1 A 200\nF 1 2 1 A 300 0\nF 1 1 1 A 500 0\n' >"$T/orphan.log"
cp "$T/killed.rows" "$T/orphan.rows"
check orphan "started while claim 1 on A ran"

# One claim run twice.
printf 'S 1 1 1 A 0\nF 1 1 1 A 10 0\nS 1 1 1 B 20\nF 1 1 1 B 30 0\n' >"$T/twice.log"
printf '1 done 1\n' >"$T/twice.rows"
check twice "claim 1 started twice"

# The row holds a claim that never ran, or one whose run failed (a late,
# fenced-out result would look like this).
printf 'S 1 1 1 A 0\nF 1 1 1 A 10 0\n' >"$T/stale.log"
printf '1 done 2\n' >"$T/stale.rows"
check stale "claim 2, which never ran"
printf 'S 1 1 1 A 0\nF 1 1 1 A 10 1\n' >"$T/failed.log"
printf '1 done 1\n' >"$T/failed.rows"
check failed "whose run failed"

# Attempts that go down, or repeat after a finished run.
printf 'S 1 1 2 A 0\nF 1 1 2 A 10 1\nS 1 2 1 A 20\nF 1 2 1 A 30 0\n' >"$T/down.log"
printf '1 done 2\n' >"$T/down.rows"
check down "attempt went down"
printf 'S 1 1 1 A 0\nF 1 1 1 A 10 1\nS 1 2 1 A 20\nF 1 2 1 A 30 0\n' >"$T/same.log"
cp "$T/down.rows" "$T/same.rows"
check same "reran attempt 1"
check same ok --faulted A

# A run that never finished, a job missing from the store, not all done.
printf 'S 1 1 1 A 0\nS 2 1 1 A 0\nF 2 1 1 A 10 0\n' >"$T/lost.log"
printf '1 ready 1\n' >"$T/lost.rows"
check lost "never finished"
check lost "job 2 ran but is not in the store"
check lost "job 1 is ready, not done" --all-done

# Garbage in either file is reported, not skipped.
printf 'S 1 1 1 A\n' >"$T/junk.log"
printf '1 done\n' >"$T/junk.rows"
check junk "not a history line"
check junk "not an 'ID STATE CLAIMS' line"
echo ok
