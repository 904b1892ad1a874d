/*
 * sqlite/deps.c - the SQLite engine: dependencies (engine.h, DEPENDENCIES): released,
 * cancelled and restored children.
 */
#include "sqlite_int.h"

/* clang-format off */

/* What holds a cancelled or waiting child (the row tq_jobs) from running:
 * a parent it needs done that is dead or cancelled, or, when it counts
 * more parents than exist and hold it, one that was deleted; no row when
 * nothing does. */
#define BLOCKER                                                                          \
    "SELECT x.id, x.why FROM ("                                                          \
    " SELECT p.id AS id, 'parent job ' || p.id || ' is ' || p.state AS why, 0 AS o"      \
    "  FROM tq_deps e JOIN tq_jobs p ON p.id = e.parent"                                 \
    "  WHERE e.child = tq_jobs.id AND e.release_when = 'done'"                            \
    "  AND p.state IN ('dead', 'cancelled')"                                             \
    " UNION ALL"                                                                         \
    " SELECT e.parent, 'parent job ' || e.parent || ' no longer exists', 1"              \
    "  FROM tq_deps e WHERE e.child = tq_jobs.id AND e.parent_state IS NULL"             \
    "  AND NOT EXISTS (SELECT 1 FROM tq_jobs p WHERE p.id = e.parent)"                   \
    "  AND tq_jobs.waiting_for > (SELECT count(*) FROM tq_deps f"                        \
    "      JOIN tq_jobs q ON q.id = f.parent WHERE f.child = tq_jobs.id"                 \
    "      AND CASE WHEN f.release_when = 'done' THEN q.state <> 'done'"                 \
    "          ELSE f.parent_state IS NULL END)"                                         \
    ") AS x ORDER BY x.o, x.id LIMIT 1"

/* A child counts a parent off: one fewer to wait for, and ready, due no
 * earlier than ?2, at the last. */
#define COUNT_OFF                                                                        \
    "waiting_for = waiting_for - 1,"                                                     \
    " state = CASE WHEN state = 'waiting' AND waiting_for = 1 THEN 'ready'"              \
    "         ELSE state END,"                                                           \
    " run_at = CASE WHEN state = 'waiting' AND waiting_for = 1 THEN max(run_at, ?2)"     \
    "          ELSE run_at END"

/* How job ?1 ended: ?3 when given, else its state if dead or cancelled;
 * NULL when it has not. */
#define ENDED_AS                                                                         \
    "coalesce(?3, (SELECT state FROM tq_jobs WHERE id = ?1"                              \
    " AND state IN ('dead', 'cancelled')))"

/* Job ?1 is not ended (retried, and not held again). */
#define NOT_ENDED                                                                        \
    "EXISTS (SELECT 1 FROM tq_jobs p WHERE p.id = ?1"                                    \
    " AND p.state IN ('ready', 'running', 'waiting'))"


const char *const tq__sqlite_sql_deps[S_COUNT] = {
    /* Dependencies (engine.h, DEPENDENCIES; deps_settle). Whether the
     * store has any: every rule below is skipped while it has none. */
    [S_DEPS_ANY] = "SELECT EXISTS (SELECT 1 FROM tq_deps)",
    /* Its trigger (migration 18) counts the parent in the child; ?3 says
     * what releases it ('done' or 'ended'). */
    [S_DEPS_ADD] = "INSERT INTO tq_deps (parent, child, release_when) VALUES (?1, ?2, ?3)",
    /* ?1 became done, at ?2: the children that need it done count it off,
     * once per parent, as done is final. */
    [S_DEPS_RELEASE] = "UPDATE tq_jobs SET " COUNT_OFF
                       " WHERE id IN (SELECT child FROM tq_deps WHERE parent = ?1"
                       " AND release_when = 'done') AND waiting_for > 0",
    /* ?1 ended, at ?2, as ?3 (NULL: its state, if dead or cancelled): the
     * children that wait for its end and have not counted it count it off
     * (S_DEPS_END_MARK then says they have). */
    [S_DEPS_END_COUNT] = "UPDATE tq_jobs SET " COUNT_OFF
                         " WHERE id IN (SELECT child FROM tq_deps WHERE parent = ?1"
                         " AND release_when = 'ended' AND parent_state IS NULL)"
                         " AND waiting_for > 0 AND " ENDED_AS " IS NOT NULL",
    [S_DEPS_END_MARK] = "UPDATE tq_deps SET parent_state = " ENDED_AS
                        " WHERE parent = ?1 AND release_when = 'ended'"
                        " AND parent_state IS NULL AND " ENDED_AS " IS NOT NULL",
    /* ?1, retried (no longer ended), counts again in the children that
     * waited for its end and have not been claimed yet (ready, waiting or
     * cancelled: a ready one waits again), whatever the order a retry of
     * both takes them in (S_DEPS_END_UNMARK then forgets the end it
     * counted). A child claimed already keeps the end it counted. */
    [S_DEPS_END_RECOUNT] =
        "UPDATE tq_jobs SET waiting_for = waiting_for + 1,"
        " state = CASE WHEN state = 'ready' THEN 'waiting' ELSE state END"
        " WHERE id IN (SELECT child FROM tq_deps WHERE parent = ?1"
        " AND release_when = 'ended' AND parent_state IS NOT NULL)"
        " AND state IN ('ready', 'waiting', 'cancelled') AND claims = 0 AND " NOT_ENDED,
    [S_DEPS_END_UNMARK] = "UPDATE tq_deps SET parent_state = NULL"
                          " WHERE parent = ?1 AND release_when = 'ended'"
                          " AND parent_state IS NOT NULL AND EXISTS (SELECT 1"
                          " FROM tq_jobs c WHERE c.id = tq_deps.child"
                          " AND c.state IN ('ready', 'waiting', 'cancelled')"
                          " AND c.claims = 0) AND " NOT_ENDED,
    /* ?1, if dead or cancelled, cancels its waiting children that need it
     * done, at ?2. */
    [S_DEPS_CANCEL] =
        "UPDATE tq_jobs SET state = 'cancelled', cancelled_by = ?1, finished_at = ?2,"
        " last_error = 'parent job ' || ?1 || ' ended ' || p.state"
        " FROM (SELECT state FROM tq_jobs WHERE id = ?1"
        "       AND state IN ('dead', 'cancelled')) AS p"
        " WHERE tq_jobs.id IN (SELECT child FROM tq_deps WHERE parent = ?1"
        " AND release_when = 'done') AND tq_jobs.state = 'waiting' RETURNING id",
    /* ?1, retried, brings back the children it cancelled, unless
     * something else holds one (BLOCKER): they stay cancelled by that. */
    [S_DEPS_RESTORE] =
        "UPDATE tq_jobs SET (state, cancelled_by, last_error, finished_at) = (SELECT"
        "  CASE WHEN b.id IS NOT NULL THEN 'cancelled'"
        "       WHEN tq_jobs.waiting_for > 0 THEN 'waiting' ELSE 'ready' END,"
        "  b.id, b.why, CASE WHEN b.id IS NOT NULL THEN tq_jobs.finished_at END"
        "  FROM (SELECT 1) LEFT JOIN (" BLOCKER ") AS b ON 1)"
        " WHERE id IN (SELECT child FROM tq_deps WHERE parent = ?1)"
        " AND state = 'cancelled' AND cancelled_by = ?1 RETURNING id, state",
    /* A waiting ?1 (retried by hand) that something holds is cancelled
     * again, at ?2, by that. */
    [S_DEPS_HOLD] = "UPDATE tq_jobs SET state = 'cancelled', finished_at = ?2,"
                    " (cancelled_by, last_error) = (" BLOCKER ")"
                    " WHERE id = ?1 AND state = 'waiting' AND EXISTS (" BLOCKER ")",
    /* A child deleted (done, in a queue that keeps none): its
     * dependencies go with it. */
    [S_DEPS_DROP] = "DELETE FROM tq_deps WHERE child = ?1",
    /* Parents a rescue at ?1 ended dead. */
    [S_DEPS_DEAD_SINCE] = "SELECT id FROM tq_jobs WHERE state = 'dead'"
                          " AND finished_at IS NOT NULL AND finished_at >= ?1"
                          " AND EXISTS (SELECT 1 FROM tq_deps WHERE parent = tq_jobs.id)",
    /* Parents S_RETRY_DEAD is about to retry (?1 its queue or NULL). */
    [S_DEPS_DEAD_PARENTS] =
        "SELECT id FROM tq_jobs WHERE state = 'dead'"
        " AND finished_at IS NOT NULL AND (?1 IS NULL OR queue = ?1)"
        " AND EXISTS (SELECT 1 FROM tq_deps WHERE parent = tq_jobs.id)",
    /* A dependency goes with its child. */
    [S_DEPS_GC] = "DELETE FROM tq_deps WHERE child NOT IN (SELECT id FROM tq_jobs)",
};
/* clang-format on */

/* ---- dependencies (engine.h, DEPENDENCIES) ----------------------------- */

/* Whether the store has any dependency: the rules below cost nothing
 * while it has none. */
int tq__sqlite_deps_any(tq *db, int *any)
{
    int64_t v = 0;
    int rc = tq__sqlite_query_int(db, S_DEPS_ANY, NULL, 0, &v, "reading dependencies");
    *any = v != 0;
    return rc;
}

static int idstack_push(tq *db, idstack *st, int64_t id)
{
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 16;
        int64_t *v = realloc(st->v, cap * sizeof *v);
        if (!v)
            return tq__seterr(db, TQ_ENOMEM, "out of memory");
        st->v = v;
        st->cap = cap;
    }
    st->v[st->n++] = id;
    return 0;
}

/* Runs s (?1 bound to a job by the caller's loop) and pushes every id it
 * returns. */
int tq__sqlite_push_returned(tq *db, sqlite3_stmt *s, idstack *st, const char *what)
{
    int src, rc = 0;
    while ((src = sqlite3_step(s)) == SQLITE_ROW)
        if ((rc = idstack_push(db, st, sqlite3_column_int64(s, 0))))
            break;
    if (!rc && src != SQLITE_DONE)
        rc = tq__sqlite_fail_rc(db, src, what);
    done_with(s);
    return rc;
}

/* Statement id with job bound as ?1 and now as ?2 (release, cancel and
 * hold take these): NULL, with *rc set, when it cannot be prepared. */
static sqlite3_stmt *job_stmt(tq *db, enum stmt_id id, int64_t job, int64_t now, int *rc)
{
    sqlite3_stmt *s = stmt(db, id, rc);
    if (s) {
        sqlite3_bind_int64(s, 1, job);
        sqlite3_bind_int64(s, 2, now);
    }
    return s;
}

/* Runs step[0] for job (?1; ?2 now and ?3 ended in the statements that
 * take them), then, only when it changed a child, step[1], which records
 * that in the dependencies of the same children (none changed: nothing to
 * record, and one statement less on an acknowledgement). */
static int count_then_mark(tq *db, const enum stmt_id step[2], int64_t job, int64_t now,
                           const char *ended, const char *what)
{
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        sqlite3_stmt *s = stmt(db, step[i], &rc);
        if (!s)
            return rc;
        sqlite3_bind_int64(s, 1, job);
        if (sqlite3_bind_parameter_count(s) >= 3) {
            sqlite3_bind_int64(s, 2, now);
            bind_text(s, 3, ended);
        }
        if ((rc = run(db, s, what)) || !sqlite3_changes(C(db)->h))
            return rc;
    }
    return 0;
}

/* Parent, ended now as ended (NULL: its state, if dead or cancelled; not
 * ended, nothing): the children waiting for its end count it off, once. */
static int deps_end(tq *db, int64_t parent, int64_t now, const char *ended)
{
    static const enum stmt_id steps[2] = {S_DEPS_END_COUNT, S_DEPS_END_MARK};
    return count_then_mark(db, steps, parent, now, ended,
                           "releasing the children of a job");
}

/* Parent, done now: its children count it off. */
static int deps_release(tq *db, int64_t parent, int64_t now)
{
    int rc;
    sqlite3_stmt *s = job_stmt(db, S_DEPS_RELEASE, parent, now, &rc);
    if (!s || (rc = run(db, s, "releasing the children of a job")))
        return rc;
    return deps_end(db, parent, now, "done");
}

/* Job id, if dead or cancelled, cancels its waiting descendants that need
 * it (or theirs) done, and releases those that wait for its end. */
int tq__sqlite_deps_cancel(tq *db, int64_t id, int64_t now)
{
    idstack st = {0};
    int rc = idstack_push(db, &st, id);
    while (!rc && st.n) {
        const int64_t job = st.v[--st.n];
        if ((rc = deps_end(db, job, now, NULL)))
            break;
        sqlite3_stmt *s = job_stmt(db, S_DEPS_CANCEL, job, now, &rc);
        if (!s)
            break;
        rc = tq__sqlite_push_returned(db, s, &st, "cancelling the children of a job");
    }
    free(st.v);
    return rc;
}

/* Job id, no longer ended (retried, or brought back): the children that
 * wait for its end and counted it wait for it again, unless claimed. */
static int deps_unend(tq *db, int64_t id)
{
    static const enum stmt_id steps[2] = {S_DEPS_END_RECOUNT, S_DEPS_END_UNMARK};
    return count_then_mark(db, steps, id, 0, NULL, "restoring the children of a job");
}

/* Job id, retried: if it waits and something holds it (BLOCKER), it is
 * cancelled again; the descendants it cancelled come back unless something
 * holds them. */
int tq__sqlite_deps_restore(tq *db, int64_t id, int64_t now)
{
    int rc;
    sqlite3_stmt *s = job_stmt(db, S_DEPS_HOLD, id, now, &rc);
    if (!s)
        return rc;
    if ((rc = run(db, s, "retrying a job")))
        return rc;
    idstack st = {0};
    rc = idstack_push(db, &st, id);
    while (!rc && st.n) {
        const int64_t job = st.v[--st.n];
        if ((rc = deps_unend(db, job)) || !(s = stmt(db, S_DEPS_RESTORE, &rc)))
            break;
        sqlite3_bind_int64(s, 1, job);
        int src = SQLITE_DONE;
        while (!rc && (src = sqlite3_step(s)) == SQLITE_ROW)
            if (strcmp((const char *)sqlite3_column_text(s, 1), "cancelled") != 0)
                rc = idstack_push(db, &st, sqlite3_column_int64(s, 0));
        if (!rc && src != SQLITE_DONE)
            rc = tq__sqlite_fail_rc(db, src, "restoring the children of a job");
        done_with(s);
    }
    free(st.v);
    return rc;
}

/* After an exchange's acknowledgements: what the applied ones that ended
 * a job do to its children. */
int tq__sqlite_deps_settle(tq *db, const tq__ack *acks, size_t nacks, int64_t now)
{
    int rc = 0, any = -1;
    for (size_t i = 0; i < nacks && !rc; i++) {
        const tq__ack *a = &acks[i];
        if (a->result || (a->kind != TQ__ACK_DONE && a->kind != TQ__ACK_FAIL &&
                          a->kind != TQ__ACK_DISCARD))
            continue;
        if (any < 0 && (rc = tq__sqlite_deps_any(db, &any)))
            break;
        if (!any)
            break;
        rc = a->kind == TQ__ACK_DONE ? deps_release(db, a->id, now)
                                     : tq__sqlite_deps_cancel(db, a->id, now);
        if (!rc && a->kind == TQ__ACK_DONE && a->delete_done) {
            sqlite3_stmt *s = stmt(db, S_DEPS_DROP, &rc);
            if (s) {
                sqlite3_bind_int64(s, 1, a->id);
                rc = run(db, s, "dropping the dependencies of a job");
            }
        }
    }
    return rc;
}

/* Runs s (its parameters bound) and cancels the descendants of each job it
 * returns. */
int tq__sqlite_deps_cancel_each(tq *db, sqlite3_stmt *s, int64_t now)
{
    idstack st = {0};
    int rc = tq__sqlite_push_returned(db, s, &st, "reading dependencies");
    for (size_t i = 0; i < st.n && !rc; i++)
        rc = tq__sqlite_deps_cancel(db, st.v[i], now);
    free(st.v);
    return rc;
}
