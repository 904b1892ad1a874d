/*
 * sqlite/ack.c - the SQLite engine: acknowledgements: the fenced statements that end
 * or extend a claimed job.
 */
#include "sqlite_int.h"

/* clang-format off */

/* The fence every change to a claimed job carries (engine.h). */
#define FENCE " WHERE id = ?1 AND state = 'running' AND worker = ?2 AND claims = ?3"

/* An acknowledgement's record of a start (engine.h, STARTS): ?5 is
 * started_us, ?4 now. STARTED is 1 when it charges the attempt. */
#define STARTED "(?5 > 0 AND started_at IS NULL)"

#define RECORD_START                                                                     \
    " attempts = attempts + " STARTED ","                                                \
    " started_at = COALESCE(started_at, CASE WHEN ?5 > 0 THEN ?4 - ?5 END),"             \
    " unknown_starts = CASE WHEN ?5 > 0 THEN 0 ELSE unknown_starts END"


const char *const tq__sqlite_sql_ack[S_COUNT] = {
    /* Acknowledgements: ?1 id, ?2 worker, ?3 claim, ?4 now, ?5 started_us,
     * ?6 delay (FAIL: backoff, BEAT: lease), ?7 error. */
    [S_DONE] =
        "UPDATE tq_jobs SET"
        "  state = 'done',"
        "  finished_at = ?4,"
        "  lease_until = NULL,"
        RECORD_START
        FENCE,
    [S_DONE_DELETE] = "DELETE FROM tq_jobs" FENCE,
    /* Done with a result, ?8. */
    [S_DONE_RESULT] =
        "UPDATE tq_jobs SET"
        "  state = 'done',"
        "  finished_at = ?4,"
        "  lease_until = NULL,"
        "  result = ?8,"
        RECORD_START
        FENCE,
    /* A failure of a claim that never started (ended unrun: its attempts
     * were used up) charges nothing, but counts like a rescue of one
     * (engine.h, STARTS). */
    [S_FAIL] =
        "UPDATE tq_jobs SET"
        "  state = CASE WHEN " OUT_OF_ATTEMPTS(STARTED) " THEN 'dead' ELSE 'ready' END,"
        "  finished_at = CASE WHEN " OUT_OF_ATTEMPTS(STARTED) " THEN ?4 END,"
        "  run_at = CASE WHEN " OUT_OF_ATTEMPTS(STARTED) " THEN run_at ELSE ?4 + ?6 END,"
        "  last_error = ?7,"
        "  lease_until = NULL, progress = NULL, progress_text = NULL,"
        "  attempts = attempts + " STARTED ","
        "  started_at = COALESCE(started_at, CASE WHEN ?5 > 0 THEN ?4 - ?5 END),"
        "  unknown_starts = CASE WHEN ?5 > 0 THEN 0"
        "                   WHEN started_at IS NULL THEN unknown_starts + 1"
        "                   ELSE unknown_starts END"
        FENCE,
    /* The run's attempt back, if the store charged it (a start it never
     * heard of charged nothing). */
    [S_RELEASE] =
        "UPDATE tq_jobs SET"
        "  state = 'ready',"
        "  attempts = max(0, attempts - (started_at IS NOT NULL)),"
        "  lease_until = NULL, progress = NULL, progress_text = NULL"
        FENCE,
    [S_BEAT] =
        "UPDATE tq_jobs SET"
        "  lease_until = ?4 + ?6,"
        RECORD_START
        FENCE,
    /* The handler's word (control.h). A snooze is a release to later that
     * counts: the run's attempt back if the store charged it, ready at now
     * + ?6, one more snooze (the worker keeps max_snoozes). */
    [S_SNOOZE] =
        "UPDATE tq_jobs SET"
        "  state = 'ready',"
        "  run_at = ?4 + ?6,"
        "  attempts = max(0, attempts - (started_at IS NOT NULL)),"
        "  snoozes = snoozes + 1,"
        "  unknown_starts = CASE WHEN ?5 > 0 THEN 0 ELSE unknown_starts END,"
        "  lease_until = NULL, progress = NULL, progress_text = NULL"
        FENCE,
    /* A discard ends the job dead, whatever attempts it has left; the run
     * counts as one. */
    [S_DISCARD] =
        "UPDATE tq_jobs SET"
        "  state = 'dead',"
        "  finished_at = ?4,"
        "  last_error = ?7,"
        "  lease_until = NULL,"
        RECORD_START
        FENCE,
    [S_PROGRESS] = "UPDATE tq_jobs SET progress = ?8, progress_text = ?7" FENCE,
};
/* clang-format on */

/* One fenced ack at now; waited: how long the exchange waited for the
 * write lock before now. */
int tq__sqlite_apply_ack(tq *db, const char *worker, tq__ack *a, int64_t now,
                         int64_t waited)
{
    static const enum stmt_id ids[] = {S_DONE,   S_FAIL,    S_RELEASE, S_BEAT,
                                       S_SNOOZE, S_DISCARD, S_PROGRESS};
    enum stmt_id id = ids[a->kind];
    if (a->kind == TQ__ACK_DONE && a->delete_done)
        id = S_DONE_DELETE;
    else if (a->kind == TQ__ACK_DONE && a->output)
        id = S_DONE_RESULT;
    int rc;
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, a->id);
    sqlite3_bind_text(s, 2, worker, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, a->claim);
    if (id != S_DONE_DELETE && id != S_RELEASE && id != S_PROGRESS) {
        sqlite3_bind_int64(s, 4, now);
        /* A start is dated from the call (now - started_us), not from
         * when the write lock came. */
        sqlite3_bind_int64(s, 5, a->started_us > 0 ? a->started_us + waited : 0);
    }
    if (id == S_FAIL || id == S_BEAT || id == S_SNOOZE)
        sqlite3_bind_int64(s, 6, a->delay_us);
    if (id == S_FAIL || id == S_DISCARD || id == S_PROGRESS)
        bind_text(s, 7, a->error);
    if (id == S_PROGRESS)
        sqlite3_bind_int(s, 8, a->progress);
    if (id == S_DONE_RESULT)
        sqlite3_bind_blob64(s, 8, a->output, a->output_len, SQLITE_STATIC);
    if ((rc = run(db, s, "acknowledging a job")))
        return rc;
    a->result = sqlite3_changes(C(db)->h) == 1 ? 0 : TQ_ELOST;
    return 0;
}
