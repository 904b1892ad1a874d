/*
 * sqlite/admin.c - the SQLite engine: administration: queue settings, one job's view,
 * retry, cancel, prune, worker registrations.
 */
#include "sqlite_int.h"

/* clang-format off */

/* A job row (tq__all_cols). */
#define JOB_COLS                                                                         \
    "id, queue, payload, state, priority, attempts, COALESCE(max_attempts, (SELECT"      \
    " q.max_attempts FROM tq_queues q WHERE q.name = tq_jobs.queue), 3),"                \
    " coalesce(dedup_key, unique_key),"                                                   \
    " worker, last_error, created_at, run_at, started_at, finished_at, lease_until,"     \
    " claims, traceparent, job_group, snoozes, progress, progress_text, length(result),"  \
    " nparents, waiting_for, timeout_us"

/* A queue's settings, in the order tq__queue_from_row reads them. */
#define QUEUE_COLS                                                                       \
    "name, ord, lease_us, max_attempts, backoff_base_us, backoff_cap_us, keep_done,"     \
    " paused, max_running, max_running_per_group, rate_limit, rate_period_us, "          \
    "rate_burst, max_snoozes, results, timeout_us, retain_done_us, retain_dead_us"


const char *const tq__sqlite_sql_admin[S_COUNT] = {
    [S_QUEUE_ENSURE] = "INSERT OR IGNORE INTO tq_queues (name) VALUES (?1)",
    [S_QUEUE_UPDATE] =
        "UPDATE tq_queues SET ord = coalesce(?2, ord),"
        " lease_us = coalesce(?3, lease_us),"
        " max_attempts = coalesce(?4, max_attempts),"
        " backoff_base_us = coalesce(?5, backoff_base_us),"
        " backoff_cap_us = coalesce(?6, backoff_cap_us),"
        " keep_done = coalesce(?7, keep_done), paused = coalesce(?8, paused),"
        " max_running = coalesce(?9, max_running),"
        " max_running_per_group = coalesce(?10, max_running_per_group),"
        " rate_limit = coalesce(?11, rate_limit),"
        " rate_period_us = coalesce(?12, rate_period_us),"
        " rate_burst = coalesce(?13, rate_burst),"
        " max_snoozes = coalesce(?15, max_snoozes),"
        " results = coalesce(?16, results),"
        " timeout_us = coalesce(?17, timeout_us),"
        " retain_done_us = coalesce(?18, retain_done_us),"
        " retain_dead_us = coalesce(?19, retain_dead_us),"
        /* A new rate starts full; a rate changed (or set again) keeps the
         * tokens it had, up to its new burst: setting it over and over
         * must not grant a burst each time. */
        " rate_tokens = CASE WHEN ?11 IS NULL THEN rate_tokens"
        "  WHEN rate_limit = 0 THEN ?13 ELSE min(?13, " RATE_TOKENS_AT(
            "?14") ") END,"
                   " rate_at = CASE WHEN ?11 IS NULL THEN rate_at ELSE max(rate_at, ?14) "
                   "END"
                   " WHERE name = ?1",
    [S_QUEUE_GET] = "SELECT " QUEUE_COLS " FROM tq_queues WHERE name = ?1",
    [S_QUEUE_LIST] = "SELECT " QUEUE_COLS " FROM tq_queues ORDER BY name",
    [S_JOB_GET] = "SELECT " JOB_COLS " FROM tq_jobs WHERE id = ?1",
    [S_JOB_LIST] = "SELECT " JOB_COLS " FROM tq_jobs"
                   " WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2)"
                   " AND id < ?4 ORDER BY id DESC LIMIT ?3",
    /* One state's list along that state's index, so that a few jobs in it
     * among a million finished ones cost what they are: unfinished states
     * by id, newest first; waiting ones through the dependency rows, newest
     * child first (SQLite keeps no index of waiting jobs); finished states
     * newest finished first, the page after ?4 starting below its
     * finished_at ?5. */
    [S_JOB_LIST_READY] = "SELECT " JOB_COLS " FROM tq_jobs INDEXED BY tq_jobs_ready_fifo"
                         " WHERE state = 'ready' AND (?1 IS NULL OR queue = ?1)"
                         " AND id < ?4 ORDER BY id DESC LIMIT ?3",
    [S_JOB_LIST_RUNNING] = "SELECT " JOB_COLS " FROM tq_jobs INDEXED BY tq_jobs_running"
                           " WHERE state = 'running' AND (?1 IS NULL OR queue = ?1)"
                           " AND id < ?4 ORDER BY id DESC LIMIT ?3",
    [S_JOB_LIST_WAITING] = "SELECT " JOB_COLS " FROM tq_deps d INDEXED BY tq_deps_child"
                           " CROSS JOIN tq_jobs ON tq_jobs.id = d.child"
                           " WHERE state = 'waiting' AND (?1 IS NULL OR queue = ?1)"
                           " AND d.child < ?4 GROUP BY d.child ORDER BY d.child DESC"
                           " LIMIT ?3",
    [S_JOB_FINISHED_AT] = "SELECT finished_at FROM tq_jobs WHERE id = ?1 AND state = ?2"
                          " AND finished_at IS NOT NULL",
    [S_JOB_LIST_FINISHED] = "SELECT " JOB_COLS " FROM tq_jobs INDEXED BY tq_jobs_finished"
                            " WHERE state = ?2 AND finished_at IS NOT NULL"
                            " AND (?1 IS NULL OR queue = ?1) AND finished_at <= ?5"
                            " AND (finished_at < ?5 OR id < ?4)"
                            " ORDER BY finished_at DESC, id DESC LIMIT ?3",
    [S_JOB_STATE] = "SELECT state FROM tq_jobs WHERE id = ?1",
    [S_JOB_RESULT] = "SELECT state, result FROM tq_jobs WHERE id = ?1",
    /* A job retried by hand does not take a scoped key back (migration 7):
     * another job may hold it by now. */
    [S_RETRY_ONE] = "UPDATE tq_jobs SET attempts = 0, run_at = ?2, cancelled_by = NULL,"
                    " state = CASE WHEN waiting_for > 0 THEN 'waiting' ELSE 'ready' END,"
                    " finished_at = NULL, lease_until = NULL, unknown_starts = 0,"
                    " snoozes = 0, progress = NULL, progress_text = NULL,"
                    " unique_scope = CASE WHEN unique_key IS NOT NULL THEN 'expired' END"
                    " WHERE id = ?1 AND state IN ('dead', 'cancelled')",
    [S_RETRY_DEAD] = "UPDATE tq_jobs SET attempts = 0, run_at = ?2, cancelled_by = NULL,"
                     " state = CASE WHEN waiting_for > 0 THEN 'waiting' ELSE 'ready' END,"
                     " finished_at = NULL, lease_until = NULL, unknown_starts = 0,"
                     " snoozes = 0, progress = NULL, progress_text = NULL,"
                     " unique_scope = CASE WHEN unique_key IS NOT NULL THEN 'expired' END"
                     " WHERE state = 'dead' AND finished_at IS NOT NULL"
                     " AND (?1 IS NULL OR queue = ?1)",
    [S_CANCEL] = "UPDATE tq_jobs SET state = 'cancelled', finished_at = ?2,"
                 " lease_until = NULL"
                 " WHERE id = ?1 AND state IN ('ready', 'running', 'waiting')",
    [S_PRUNE] = "DELETE FROM tq_jobs WHERE id IN (SELECT id FROM tq_jobs"
                " WHERE state = ?1 AND finished_at IS NOT NULL AND finished_at < ?2"
                " LIMIT ?3)",
    /* Retention (tq__sqlite_retire): the jobs of queue ?4 in state ?1
     * that finished at or after ?2 and before ?3, oldest first, ?5 at
     * most, read outside the write transaction (a walk over rows other
     * queues keep holds no lock); then those of the ids ?2 (a JSON array)
     * still so, deleted: one retried meanwhile and finished again is
     * younger now. */
    [S_RETIRE_PICK] = "SELECT id, finished_at FROM tq_jobs INDEXED BY tq_jobs_finished"
                      " WHERE state = ?1 AND finished_at IS NOT NULL AND finished_at >= ?2"
                      " AND finished_at < ?3 AND queue = ?4 ORDER BY finished_at LIMIT ?5",
    [S_RETIRE] = "DELETE FROM tq_jobs WHERE id IN (SELECT value FROM json_each(?2))"
                 " AND state = ?1 AND finished_at IS NOT NULL AND finished_at < ?3"
                 " AND queue = ?4",
    [S_WORKER_GET] = "SELECT heartbeat_at, lease_us, coalesce(stopped_at, 0), host, pid,"
                     " coalesce(host_id, ''), started_at, coalesce(reaper_pid, 0)"
                     " FROM tq_workers WHERE name = ?1",
    [S_WORKER_PUT] = "INSERT INTO tq_workers (name, host, pid, started_at, heartbeat_at,"
                     " stopped_at, lease_us, host_id, reaper_pid)"
                     " VALUES (?1, ?2, ?3, ?4, ?4, NULL, ?5, ?6, ?7)"
                     " ON CONFLICT (name) DO UPDATE SET host = excluded.host,"
                     " pid = excluded.pid, started_at = excluded.started_at,"
                     " heartbeat_at = excluded.heartbeat_at, stopped_at = NULL,"
                     " lease_us = excluded.lease_us, host_id = excluded.host_id,"
                     " reaper_pid = excluded.reaper_pid",
    /* Only the registration that is mine (engine.h). */
    [S_WORKER_BEAT] = "UPDATE tq_workers SET heartbeat_at = ?2, lease_us = ?7,"
                      " reaper_pid = ?8"
                      " WHERE name = ?1 AND pid = ?3 AND host = ?4"
                      " AND coalesce(host_id, '') = ?5 AND started_at = ?6",
    [S_WORKER_STOP] = "UPDATE tq_workers SET stopped_at = ?2, heartbeat_at = ?2"
                      " WHERE name = ?1 AND pid = ?3 AND host = ?4"
                      " AND coalesce(host_id, '') = ?5 AND started_at = ?6",
    [S_WORKER_LIST] = "SELECT name, host, pid, started_at, heartbeat_at,"
                      " coalesce(stopped_at, 0), lease_us, coalesce(host_id, ''),"
                      " coalesce(reaper_pid, 0)"
                      " FROM tq_workers ORDER BY name",
    /* Gone since its heartbeat's lease ran out, or since it stopped. */
    [S_WORKER_PRUNE] = "DELETE FROM tq_workers"
                       " WHERE coalesce(stopped_at, heartbeat_at + lease_us) < ?1",
    /* AUTOINCREMENT's high-water mark: it grows with every insert, from
     * tq or plain SQL, and never goes back (even when rows are deleted). */
    [S_JOBS_SEQ] =
        "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'tq_jobs'",
    [S_JOB_PARENTS] = "SELECT d.parent, " PARENT_END ", d.release_when = 'ended'"
                      " FROM tq_deps d LEFT JOIN tq_jobs p ON p.id = d.parent"
                      " WHERE d.child = ?1 ORDER BY d.parent",
};
/* clang-format on */

/* ---- queues ------------------------------------------------------------ */

static int read_queue(tq *db, sqlite3_stmt *s, void *row, void *arg)
{
    (void)db, (void)arg;
    int64_t v[TQ__QUEUE_NUMBERS];
    for (int i = 0; i < TQ__QUEUE_NUMBERS; i++)
        v[i] = sqlite3_column_int64(s, 2 + i);
    tq__queue_from_row(row, (const char *)sqlite3_column_text(s, 0),
                       (const char *)sqlite3_column_text(s, 1), v);
    return 0;
}

/* Begins a transaction and prepares statement id in it with name (a
 * queue's, a worker's) bound as ?1: NULL when either fails, the transaction
 * rolled back and the code in *rc. */
static sqlite3_stmt *begin_named(tq *db, enum stmt_id id, const char *name, int *rc)
{
    sqlite3_stmt *s;
    if ((*rc = begin(db)))
        return NULL;
    if (!(s = stmt(db, id, rc))) {
        tq__sqlite_rollback(db);
        return NULL;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    return s;
}

int tq__sqlite_queue_set(tq *db, const char *name, const tq_queue_opts *o)
{
    int rc;
    sqlite3_stmt *s = begin_named(db, S_QUEUE_ENSURE, name, &rc);
    if (!s)
        return rc;
    if ((rc = run(db, s, "creating the queue")))
        goto fail;
    if (!(s = stmt(db, S_QUEUE_UPDATE, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (o->set & TQ_SET_ORDER)
        sqlite3_bind_text(s, 2, tq_order_name(o->order), -1, SQLITE_STATIC);
    if (o->set & TQ_SET_LEASE)
        sqlite3_bind_int64(s, 3, o->lease_us);
    if (o->set & TQ_SET_MAX_ATTEMPTS)
        sqlite3_bind_int(s, 4, o->max_attempts);
    if (o->set & TQ_SET_BACKOFF) {
        sqlite3_bind_int64(s, 5, o->backoff_base_us);
        sqlite3_bind_int64(s, 6, o->backoff_cap_us);
    }
    if (o->set & TQ_SET_KEEP_DONE)
        sqlite3_bind_int(s, 7, !!o->keep_done);
    if (o->set & TQ_SET_PAUSED)
        sqlite3_bind_int(s, 8, !!o->paused);
    if (o->set & TQ_SET_MAX_RUNNING)
        sqlite3_bind_int(s, 9, o->max_running);
    if (o->set & TQ_SET_MAX_RUNNING_PER_GROUP)
        sqlite3_bind_int(s, 10, o->max_running_per_group);
    if (o->set & TQ_SET_RATE) {
        int64_t period_us, burst;
        tq__queue_bucket(&period_us, &burst, o);
        sqlite3_bind_int64(s, 11, o->rate_limit);
        sqlite3_bind_int64(s, 12, period_us);
        sqlite3_bind_int64(s, 13, burst);
        sqlite3_bind_int64(s, 14, tq__now_us());
    }
    if (o->set & TQ_SET_MAX_SNOOZES)
        sqlite3_bind_int(s, 15, o->max_snoozes);
    if (o->set & TQ_SET_RESULTS)
        sqlite3_bind_int(s, 16, !!o->results);
    if (o->set & TQ_SET_TIMEOUT)
        sqlite3_bind_int64(s, 17, o->timeout_us);
    if (o->set & TQ_SET_RETAIN_DONE)
        sqlite3_bind_int64(s, 18, o->retain_done_us);
    if (o->set & TQ_SET_RETAIN_DEAD)
        sqlite3_bind_int64(s, 19, o->retain_dead_us);
    if ((rc = run(db, s, "changing the queue")))
        goto fail;
    if ((o->set & (TQ_SET_ORDER | TQ_SET_MAX_RUNNING_PER_GROUP)) &&
        (rc = tq__sqlite_sync_indexes(db)))
        goto fail;
    return commit(db);
fail:
    tq__sqlite_rollback(db);
    return rc;
}

int tq__sqlite_queue_get(tq *db, const char *name, tq_queue_info *out)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_QUEUE_GET, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        read_queue(db, s, out, NULL);
    else if (src == SQLITE_DONE)
        rc = tq__seterr(db, TQ_ENOTFOUND, "no queue named '%s'", name);
    else
        rc = tq__sqlite_fail_rc(db, src, "reading the queue");
    done_with(s);
    return rc;
}

int tq__sqlite_queue_list(tq *db, tq_queue_info **out, size_t *out_n)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_QUEUE_LIST, &rc);
    *out = tq__sqlite_rows(db, s, sizeof **out, read_queue, NULL, NULL, "listing queues",
                           out_n, &rc);
    return rc;
}

int tq__sqlite_job_get(tq *db, int64_t id, tq_job **out)
{
    int rc;
    tq_job *v = NULL;
    size_t n = 0;
    sqlite3_stmt *s = stmt(db, S_JOB_GET, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    if ((rc = tq__sqlite_collect_jobs(db, s, &tq__all_cols, NULL, NULL, "reading the job",
                                      &v, &n)))
        return rc;
    if (n == 0) {
        free(v);
        return tq__seterr(db, TQ_ENOTFOUND, "no job with id %lld", (long long)id);
    }
    *out = v;
    return 0;
}

/* Statement sid, ?1 the job id, stepped once (*src: how that went); NULL
 * with the error in *rc when it cannot be had. */
static sqlite3_stmt *job_step(tq *db, enum stmt_id sid, int64_t id, int *src, int *rc)
{
    sqlite3_stmt *s = stmt(db, sid, rc);
    if (s) {
        sqlite3_bind_int64(s, 1, id);
        *src = sqlite3_step(s);
    }
    return s;
}

int tq__sqlite_job_result(tq *db, int64_t id, void **out, size_t *len, int *state)
{
    int rc, src;
    *out = NULL;
    *len = 0;
    *state = -1;
    sqlite3_stmt *s = job_step(db, S_JOB_RESULT, id, &src, &rc);
    if (!s)
        return rc;
    if (src == SQLITE_ROW) {
        tq_state st = TQ_READY;
        tq_state_parse(&st, (const char *)sqlite3_column_text(s, 0));
        *state = (int)st;
        if (st == TQ_DONE && sqlite3_column_type(s, 1) != SQLITE_NULL) {
            *len = (size_t)sqlite3_column_bytes(s, 1);
            if (!(*out = tq__memdup(sqlite3_column_blob(s, 1), *len, 1)))
                rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        }
        src = sqlite3_step(s);
    }
    if (!rc && src != SQLITE_DONE)
        rc = tq__sqlite_fail_rc(db, src, "reading the job's result");
    done_with(s);
    return rc;
}

int tq__sqlite_job_list(tq *db, const tq_list_opts *o, tq_job **out, size_t *out_n)
{
    int rc;
    const char *state = o->state >= 0 ? tq_state_name((tq_state)o->state) : NULL;
    int64_t before_at = INT64_MAX;
    enum stmt_id id = TQ__JOB_LIST_STMT(o->state);
    if (id == S_JOB_LIST_FINISHED && o->before_id != INT64_MAX) {
        /* The page after a job that is no longer in the state is empty. */
        sqlite3_stmt *f = stmt(db, S_JOB_FINISHED_AT, &rc);
        if (!f)
            return rc;
        sqlite3_bind_int64(f, 1, o->before_id);
        sqlite3_bind_text(f, 2, state, -1, SQLITE_STATIC);
        int src = sqlite3_step(f);
        if (src == SQLITE_ROW)
            before_at = sqlite3_column_int64(f, 0);
        done_with(f);
        if (src == SQLITE_DONE)
            return 0;
        if (src != SQLITE_ROW)
            return tq__sqlite_fail_rc(db, src, "listing jobs");
    }
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    bind_text(s, 1, o->queue);
    bind_text(s, 2, state);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)o->limit);
    sqlite3_bind_int64(s, 4, o->before_id);
    if (id == S_JOB_LIST_FINISHED)
        sqlite3_bind_int64(s, 5, before_at);
    return tq__sqlite_collect_jobs(db, s, &tq__all_cols, NULL, NULL, "listing jobs", out,
                                   out_n);
}

/* The parents first: whether the job exists is a question only when it
 * has none (a worker asks this of jobs that have some). */
int tq__sqlite_job_parents(tq *db, int64_t id, tq_parent **out, size_t *out_n)
{
    int rc, src, state = 0;
    sqlite3_stmt *s = stmt(db, S_JOB_PARENTS, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    tq_parent *v = NULL;
    size_t n = 0, cap = 0;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            tq_parent *w = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
            if (!w) {
                rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
                break;
            }
            v = w;
        }
        v[n] = (tq_parent){.id = sqlite3_column_int64(s, 0),
                           .when_ended = sqlite3_column_int(s, 2)};
        if (tq_state_parse(&v[n].state, (const char *)sqlite3_column_text(s, 1)))
            v[n].state = TQ_READY;
        n++;
    }
    if (!rc && src != SQLITE_DONE)
        rc = tq__sqlite_fail_rc(db, src, "reading the parents of a job");
    done_with(s);
    if (!rc && !n)
        rc = tq__sqlite_state_of(db, id, &state);
    if (!rc && state < 0)
        rc = TQ_ENOTFOUND;
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *out_n = n;
    return 0;
}

/* After an update of one job by id changed nothing: the state the job is
 * in, or -1 when there is none. */
int tq__sqlite_state_of(tq *db, int64_t id, int *state)
{
    int rc, src;
    tq_state st;
    sqlite3_stmt *s = job_step(db, S_JOB_STATE, id, &src, &rc);
    if (!s)
        return rc;
    *state = src == SQLITE_ROW &&
                     tq_state_parse(&st, (const char *)sqlite3_column_text(s, 0)) == 0
                 ? (int)st
                 : -1;
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        rc = tq__sqlite_fail_rc(db, src, "reading the job");
    done_with(s);
    return rc;
}

/* A management update (tq__manage), in its own transaction: with ids, ?1
 * each id, else ?1 the queue text; ?2 is now. Then what it does to the
 * children of the jobs it changed (engine.h, DEPENDENCIES): a cancel
 * cancels them, a retry brings them back. */
typedef struct manage_ctx {
    enum stmt_id id;
    const int64_t *ids;
    const char *queue;
    int64_t now;
    int any;      /* whether the store has dependencies at all */
    idstack dead; /* S_RETRY_DEAD: the parents it retries */
} manage_ctx;

static int manage_begin(tq *db, void *ctx)
{
    manage_ctx *m = ctx;
    sqlite3_stmt *s;
    int rc = begin(db);
    if (rc)
        return rc;
    m->now = tq__now_us();
    if ((rc = tq__sqlite_deps_any(db, &m->any)) || !m->any || m->ids)
        goto done;
    if ((s = stmt(db, S_DEPS_DEAD_PARENTS, &rc))) {
        bind_text(s, 1, m->queue);
        rc = tq__sqlite_push_returned(db, s, &m->dead, "reading dependencies");
    }
done:
    if (rc)
        tq__sqlite_rollback(db);
    return rc;
}

static int manage_update(tq *db, void *ctx, size_t i, int64_t *changed)
{
    const manage_ctx *m = ctx;
    int rc;
    sqlite3_stmt *s = stmt(db, m->id, &rc);
    if (!s)
        return rc;
    if (m->ids)
        sqlite3_bind_int64(s, 1, m->ids[i]);
    else
        bind_text(s, 1, m->queue);
    sqlite3_bind_int64(s, 2, m->now);
    if (!(rc = run(db, s, m->id == S_CANCEL ? "cancel" : "retry")))
        *changed = sqlite3_changes(C(db)->h);
    return rc;
}

static int manage_after(tq *db, void *ctx, size_t i)
{
    const manage_ctx *m = ctx;
    if (!m->any)
        return 0;
    return m->id == S_CANCEL ? tq__sqlite_deps_cancel(db, m->ids[i], m->now)
                             : tq__sqlite_deps_restore(db, m->ids[i], m->now);
}

static int manage_finish(tq *db, void *ctx)
{
    const manage_ctx *m = ctx;
    int rc = 0;
    for (size_t i = 0; i < m->dead.n && !rc; i++)
        rc = tq__sqlite_deps_restore(db, m->dead.v[i], m->now);
    return rc;
}

static const tq__manage_ops manage_ops = {
    .begin = manage_begin,
    .update = manage_update,
    .after = manage_after,
    .finish = manage_finish,
    .state_of = tq__sqlite_state_of,
    .commit = commit,
    .rollback = tq__sqlite_rollback,
};

static int manage(tq *db, manage_ctx *m, size_t n, int64_t *count, size_t *bad,
                  int *state)
{
    int rc = tq__manage(db, &manage_ops, m, m->ids, n, count, bad, state);
    free(m->dead.v);
    return rc;
}

int tq__sqlite_job_retry(tq *db, const int64_t *ids, size_t n, const char *queue,
                         int64_t *count, size_t *bad, int *state)
{
    manage_ctx m = {n ? S_RETRY_ONE : S_RETRY_DEAD, n ? ids : NULL, queue, 0, 0, {0}};
    return manage(db, &m, n, count, bad, state);
}

int tq__sqlite_job_cancel(tq *db, const int64_t *ids, size_t n, int64_t *count,
                          size_t *bad, int *state)
{
    manage_ctx m = {S_CANCEL, n ? ids : NULL, NULL, 0, 0, {0}};
    return manage(db, &m, n, count, bad, state);
}

/* A prune (tq__prune): the jobs of each state finished before cutoff,
 * at most limit of them when limit > 0; then the dependency rows of the
 * jobs gone. */
typedef struct prune_ctx {
    int64_t older_us, limit, cutoff;
    const int64_t *count;
} prune_ctx;

static int prune_begin(tq *db, void *ctx)
{
    prune_ctx *c = ctx;
    int rc = begin(db);
    c->cutoff = tq__now_us() - c->older_us;
    return rc;
}

static int prune_state(tq *db, void *ctx, size_t st, int64_t *changed)
{
    const prune_ctx *c = ctx;
    int rc;
    sqlite3_stmt *s = stmt(db, S_PRUNE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, tq_state_name((tq_state)st), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, c->cutoff);
    sqlite3_bind_int64(s, 3, c->limit > 0 ? c->limit : -1);
    if (!(rc = run(db, s, "pruning")))
        *changed = sqlite3_changes(C(db)->h);
    return rc;
}

static int prune_deps(tq *db, void *ctx)
{
    const prune_ctx *c = ctx;
    int rc, any = 0;
    if (*c->count && (rc = tq__sqlite_deps_any(db, &any)))
        return rc;
    return any ? exec_id(db, S_DEPS_GC, "pruning dependencies") : 0;
}

static const tq__manage_ops prune_ops = {
    .begin = prune_begin,
    .update = prune_state,
    .finish = prune_deps,
    .commit = commit,
    .rollback = tq__sqlite_rollback,
};

int tq__sqlite_prune(tq *db, int64_t older_than_us, unsigned mask, int64_t limit,
                     int64_t *count)
{
    prune_ctx c = {older_than_us, limit, 0, count};
    return tq__prune(db, &prune_ops, &c, mask, count);
}

/* The read half of one state's part of a retention (engine.h, retire):
 * up to limit ids, as a JSON array in *ids (malloc'd), how many, and the
 * last one's finished_at. */
static int retire_pick(tq *db, const char *queue, int st, int64_t from, int64_t cutoff,
                       int64_t limit, char **ids, int64_t *n, int64_t *last)
{
    int rc, src;
    sqlite3_stmt *s = stmt(db, S_RETIRE_PICK, &rc);
    char *v = s ? malloc((size_t)limit * 22 + 3) : NULL, *p = v;
    if (!v) {
        if (s)
            done_with(s);
        return s ? tq__seterr(db, TQ_ENOMEM, "out of memory") : rc;
    }
    sqlite3_bind_text(s, 1, tq_state_name((tq_state)st), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, from);
    sqlite3_bind_int64(s, 3, cutoff);
    sqlite3_bind_text(s, 4, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, limit);
    *n = 0;
    *last = from;
    *p++ = '[';
    while ((src = sqlite3_step(s)) == SQLITE_ROW && *n < limit) {
        if (*n)
            *p++ = ',';
        p = tq__put_i64(p, sqlite3_column_int64(s, 0));
        *last = sqlite3_column_int64(s, 1);
        ++*n;
    }
    strcpy(p, "]");
    done_with(s);
    if (src != SQLITE_DONE && src != SQLITE_ROW) {
        free(v);
        return tq__sqlite_fail_rc(db, src, "reading finished jobs");
    }
    *ids = v;
    return 0;
}

int tq__sqlite_retire(tq *db, const char *queue, const int64_t keep[TQ_STATE_COUNT],
                      int64_t after[TQ_STATE_COUNT], int64_t limit,
                      int64_t count[TQ_STATE_COUNT])
{
    char *ids[TQ_STATE_COUNT] = {0};
    int64_t next[TQ_STATE_COUNT], picked[TQ_STATE_COUNT] = {0}, total = 0, deleted = 0;
    int rc = 0, any = 0;
    const int64_t now = tq__now_us();
    for (int st = 0; st < TQ_STATE_COUNT && !rc; st++) {
        int64_t last = 0;
        count[st] = 0;
        next[st] = after[st];
        if (keep[st] > 0 && !(rc = retire_pick(db, queue, st, after[st], now - keep[st],
                                               limit, &ids[st], &picked[st], &last)))
            next[st] =
                tq__retire_next(after[st], picked[st], limit, last, now - keep[st]);
    }
    for (int st = 0; st < TQ_STATE_COUNT && !rc; st++)
        total += picked[st];
    if (rc || !total)
        goto out;
    if ((rc = begin(db)))
        goto out;
    for (int st = 0; st < TQ_STATE_COUNT && !rc; st++) {
        sqlite3_stmt *s;
        if (!picked[st] || !(s = stmt(db, S_RETIRE, &rc)))
            continue;
        sqlite3_bind_text(s, 1, tq_state_name((tq_state)st), -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, ids[st], -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, now - keep[st]);
        sqlite3_bind_text(s, 4, queue, -1, SQLITE_STATIC);
        if (!(rc = run(db, s, "deleting finished jobs")))
            deleted += count[st] = sqlite3_changes(C(db)->h);
    }
    /* The dependency rows of the jobs gone, as a prune does. */
    if (!rc && deleted && !(rc = tq__sqlite_deps_any(db, &any)) && any)
        rc = exec_id(db, S_DEPS_GC, "deleting dependencies");
    if (rc || (rc = commit(db)))
        tq__sqlite_rollback(db);
out:
    for (int st = 0; st < TQ_STATE_COUNT; st++)
        free(ids[st]);
    if (rc)
        memset(count, 0, TQ_STATE_COUNT * sizeof *count);
    else
        memcpy(after, next, sizeof next);
    return rc;
}

/* ---- workers ----------------------------------------------------------- */

int tq__sqlite_worker_register(tq *db, tq_worker_info *w, const tq_worker_info *expect,
                               tq_worker_info *holder)
{
    int rc;
    sqlite3_stmt *s;
    memset(holder, 0, sizeof *holder);
    if ((rc = begin(db)))
        return rc;
    const int64_t now = tq__now_us();
    if (!(s = stmt(db, S_WORKER_GET, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, w->name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) {
        snprintf(holder->name, sizeof holder->name, "%s", w->name);
        holder->heartbeat_at = sqlite3_column_int64(s, 0);
        holder->lease_us = sqlite3_column_int64(s, 1);
        holder->stopped_at = sqlite3_column_int64(s, 2);
        snprintf(holder->host, sizeof holder->host, "%s",
                 (const char *)sqlite3_column_text(s, 3));
        holder->pid = sqlite3_column_int64(s, 4);
        snprintf(holder->host_id, sizeof holder->host_id, "%s",
                 (const char *)sqlite3_column_text(s, 5));
        holder->started_at = sqlite3_column_int64(s, 6);
        holder->reaper_pid = sqlite3_column_int64(s, 7);
        holder->alive =
            !holder->stopped_at && now - holder->heartbeat_at < holder->lease_us;
    }
    done_with(s);
    if (holder->name[0] && (expect ? !tq__same_holder(holder, expect) : holder->alive)) {
        rc = TQ_EINUSE; /* worded by the caller, from *holder */
        goto fail;
    }
    if (!(s = stmt(db, S_WORKER_PUT, &rc)))
        goto fail;
    /* Later than the name's last registration, whatever the clock did. */
    w->started_at =
        holder->name[0] && holder->started_at >= now ? holder->started_at + 1 : now;
    sqlite3_bind_text(s, 1, w->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, w->host, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, w->pid);
    sqlite3_bind_int64(s, 4, w->started_at);
    sqlite3_bind_int64(s, 5, w->lease_us);
    sqlite3_bind_text(s, 6, w->host_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 7, w->reaper_pid);
    if ((rc = run(db, s, "registering the worker")))
        goto fail;
    return commit(db);
fail:
    tq__sqlite_rollback(db);
    return rc;
}

static int worker_touch(tq *db, enum stmt_id id, const tq_worker_info *me)
{
    int rc;
    sqlite3_stmt *s = begin_named(db, id, me->name, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 2, tq__now_us());
    sqlite3_bind_int64(s, 3, me->pid);
    sqlite3_bind_text(s, 4, me->host, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, me->host_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, me->started_at);
    if (sqlite3_bind_parameter_count(s) >= 8) { /* the heartbeat */
        sqlite3_bind_int64(s, 7, me->lease_us);
        sqlite3_bind_int64(s, 8, me->reaper_pid);
    }
    if ((rc = run(db, s, "updating the worker")))
        goto fail;
    if (sqlite3_changes(C(db)->h) == 0) {
        rc = TQ_EINUSE; /* worded by the caller */
        goto fail;
    }
    return commit(db);
fail:
    tq__sqlite_rollback(db);
    return rc;
}

int tq__sqlite_worker_beat(tq *db, const tq_worker_info *me)
{
    return worker_touch(db, S_WORKER_BEAT, me);
}

int tq__sqlite_worker_stop(tq *db, const tq_worker_info *me)
{
    return worker_touch(db, S_WORKER_STOP, me);
}

/* A worker's row of S_WORKER_LIST; *now_us the time of the list. */
static int read_worker(tq *db, sqlite3_stmt *s, void *row, void *now_us)
{
    (void)db;
    tq_worker_info *w = row;
    const int64_t now = *(const int64_t *)now_us;
    snprintf(w->name, sizeof w->name, "%s", sqlite3_column_text(s, 0));
    snprintf(w->host, sizeof w->host, "%s", sqlite3_column_text(s, 1));
    snprintf(w->host_id, sizeof w->host_id, "%s", sqlite3_column_text(s, 7));
    w->pid = sqlite3_column_int64(s, 2);
    w->started_at = sqlite3_column_int64(s, 3);
    w->heartbeat_at = sqlite3_column_int64(s, 4);
    w->stopped_at = sqlite3_column_int64(s, 5);
    w->lease_us = sqlite3_column_int64(s, 6);
    w->reaper_pid = sqlite3_column_int64(s, 8);
    w->alive = !w->stopped_at && now - w->heartbeat_at < w->lease_us;
    return 0;
}

int tq__sqlite_worker_list(tq *db, tq_worker_info **out, size_t *out_n)
{
    int rc;
    int64_t now = tq__now_us();
    sqlite3_stmt *s = stmt(db, S_WORKER_LIST, &rc);
    *out = tq__sqlite_rows(db, s, sizeof **out, read_worker, &now, NULL,
                           "listing workers", out_n, &rc);
    return rc;
}

int tq__sqlite_worker_prune(tq *db, int64_t older_than_us, int64_t *count)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_WORKER_PRUNE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, tq__now_us() - older_than_us);
    if (!(rc = run(db, s, "pruning workers")))
        *count = sqlite3_changes(C(db)->h);
    return rc;
}
