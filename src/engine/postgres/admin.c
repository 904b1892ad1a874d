/*
 * postgres/admin.c - the PostgreSQL engine: administration: queue settings, one job's
 * view, retry, cancel, prune, worker registrations.
 */
#include "pg_int.h"

/* clang-format off */

/* Job rows come back in binary, timestamps as they are stored (g_time). */
#define JOB_COLS                                                                         \
    "j.id, j.queue, j.payload, j.state, j.priority, j.attempts,"                         \
    " COALESCE(j.max_attempts, (SELECT q.max_attempts FROM TQ.queues q"                  \
    " WHERE q.name = j.queue), 3), coalesce(j.dedup_key, j.unique_key), j.worker,"       \
    " j.last_error, j.created_at, j.run_at, j.started_at, j.finished_at, j.lease_until," \
    " j.claims, j.traceparent, j.job_group, j.snoozes, j.progress, j.progress_text,"     \
    " octet_length(j.result), j.nparents, j.waiting_for, j.timeout_us"

/* A queue's settings, in the order tq__queue_from_row reads them. */
#define QUEUE_COLS                                                                       \
    "name, ord, lease_us, max_attempts, backoff_base_us, backoff_cap_us, keep_done, "    \
    "paused, max_running, max_running_per_group, rate_limit, rate_period_us, "           \
    "rate_burst,"                                                                        \
    " max_snoozes, results, timeout_us, retain_done_us, retain_dead_us"


const char *const tq__pg_sql_admin[S_COUNT] = {
    [S_QUEUE_ENSURE] = "INSERT INTO TQ.queues (name) VALUES ($1) ON CONFLICT DO NOTHING",
    [S_QUEUE_UPDATE] = "UPDATE TQ.queues SET ord = coalesce($2, ord),"
                       " lease_us = coalesce($3::int8, lease_us),"
                       " max_attempts = coalesce($4::int4, max_attempts),"
                       " backoff_base_us = coalesce($5::int8, backoff_base_us),"
                       " backoff_cap_us = coalesce($6::int8, backoff_cap_us),"
                       " keep_done = coalesce($7::bool, keep_done),"
                       " paused = coalesce($8::bool, paused),"
                       " max_running = coalesce($9::int4, max_running),"
                       " max_running_per_group = coalesce($10::int4,"
                       "                                  max_running_per_group),"
                       " rate_limit = coalesce($11::int8, rate_limit),"
                       " rate_period_us = coalesce($12::int8, rate_period_us),"
                       " rate_burst = coalesce($13::int8, rate_burst),"
                       " max_snoozes = coalesce($14::int4, max_snoozes),"
                       " results = coalesce($15::bool, results),"
                       " timeout_us = coalesce($16::int8, timeout_us),"
                       " retain_done_us = coalesce($17::int8, retain_done_us),"
                       " retain_dead_us = coalesce($18::int8, retain_dead_us),"
                       /* As SQLite's S_QUEUE_UPDATE says. */
                       " rate_tokens = CASE WHEN $11::int8 IS NULL THEN rate_tokens"
                       "  WHEN rate_limit = 0 THEN $13::int8"
                       "  ELSE least($13::int8, " RATE_TOKENS("clock_timestamp()") ") END,"
                       " rate_at = CASE WHEN $11::int8 IS NULL THEN rate_at"
                       "           ELSE greatest(rate_at, clock_timestamp()) END"
                       " WHERE name = $1",
    [S_QUEUE_GET] = "SELECT " QUEUE_COLS " FROM TQ.queues WHERE name = $1",
    [S_QUEUE_LIST] = "SELECT " QUEUE_COLS " FROM TQ.queues ORDER BY name",
    [S_JOB_GET] = "SELECT " JOB_COLS " FROM TQ.jobs j WHERE j.id = $1",
    [S_JOB_LIST] = "SELECT " JOB_COLS " FROM TQ.jobs j"
                   " WHERE ($1::text IS NULL OR j.queue = $1)"
                   " AND ($2::text IS NULL OR j.state = $2)"
                   " AND j.id < $4 ORDER BY j.id DESC LIMIT $3",
    /* One state's list along that state's partial index (a literal state,
     * so that the generic plan can use it): unfinished states by id, newest
     * first; finished states newest finished first, the page after job $4
     * below it (none when it is no longer in the state). */
    [S_JOB_LIST_READY] = "SELECT " JOB_COLS " FROM TQ.jobs j WHERE j.state = 'ready'"
                         " AND ($1::text IS NULL OR j.queue = $1)"
                         " AND j.id < $3 ORDER BY j.id DESC LIMIT $2",
    [S_JOB_LIST_RUNNING] = "SELECT " JOB_COLS " FROM TQ.jobs j WHERE j.state = 'running'"
                           " AND j.lease_until IS NOT NULL"
                           " AND ($1::text IS NULL OR j.queue = $1)"
                           " AND j.id < $3 ORDER BY j.id DESC LIMIT $2",
    [S_JOB_LIST_WAITING] = "SELECT " JOB_COLS " FROM TQ.jobs j WHERE j.state = 'waiting'"
                           " AND ($1::text IS NULL OR j.queue = $1)"
                           " AND j.id < $3 ORDER BY j.id DESC LIMIT $2",
    [S_JOB_LIST_FINISHED] =
        "SELECT " JOB_COLS " FROM TQ.jobs j WHERE j.state = $4"
        " AND j.finished_at IS NOT NULL AND ($1::text IS NULL OR j.queue = $1)"
        " AND ($3::int8 IS NULL OR (j.finished_at, j.id) < (SELECT b.finished_at, b.id"
        "   FROM TQ.jobs b WHERE b.id = $3 AND b.state = $4))"
        " ORDER BY j.finished_at DESC, j.id DESC LIMIT $2",
    [S_JOB_STATE] = "SELECT state FROM TQ.jobs WHERE id = $1",
    [S_JOB_RESULT] = "SELECT state, result FROM TQ.jobs WHERE id = $1",
    /* Dependencies (engine.h, DEPENDENCIES; migration 13's triggers). */
    [S_JOB_PARENTS] = "SELECT d.parent, " PARENT_END ", d.release_when = 'ended'"
                      " FROM TQ.deps d LEFT JOIN TQ.jobs p ON p.id = d.parent"
                      " WHERE d.child = $1 ORDER BY d.parent",
    /* A job retried by hand does not take a scoped key back (migration 7). */
    /* A job that a parent still holds (dep_blocker: a cancelled child
     * retried alone) is cancelled again by it in the same update, its
     * state never leaving cancelled: so the triggers do not bring back,
     * and cancel again, what its children counted (as SQLite, which holds
     * it before its children are looked at). */
    [S_RETRY_ONE] = "UPDATE TQ.jobs j SET attempts = 0, run_at = now(),"
                    " (state, cancelled_by, last_error, finished_at) = (SELECT"
                    "  CASE WHEN b.id IS NOT NULL THEN 'cancelled'"
                    "   WHEN j.waiting_for > 0 THEN 'waiting' ELSE 'ready' END, b.id,"
                    "  CASE WHEN b.id IS NOT NULL THEN b.why ELSE j.last_error END,"
                    "  CASE WHEN b.id IS NOT NULL THEN now() END"
                    "  FROM TQ.dep_blocker(j.id, j.waiting_for) b),"
                    " unique_scope = CASE WHEN unique_key IS NOT NULL THEN 'expired' END,"
                    " lease_until = NULL, unknown_starts = 0,"
                    " snoozes = 0, progress = NULL, progress_text = NULL"
                    " WHERE id = $1 AND state IN ('dead', 'cancelled')",
    [S_RETRY_DEAD] = "UPDATE TQ.jobs SET attempts = 0, run_at = now(), cancelled_by = NULL,"
                     " state = CASE WHEN waiting_for > 0 THEN 'waiting' ELSE 'ready' END,"
                     " unique_scope = CASE WHEN unique_key IS NOT NULL THEN 'expired' END,"
                     " finished_at = NULL, lease_until = NULL, unknown_starts = 0,"
                     " snoozes = 0, progress = NULL, progress_text = NULL"
                     " WHERE state = 'dead' AND finished_at IS NOT NULL"
                     " AND ($1::text IS NULL OR queue = $1)",
    [S_CANCEL] = "UPDATE TQ.jobs SET state = 'cancelled', finished_at = now(),"
                 " lease_until = NULL"
                 " WHERE id = $1 AND state IN ('ready', 'running', 'waiting')",
    [S_PRUNE] = "DELETE FROM TQ.jobs WHERE id IN (SELECT id FROM TQ.jobs"
                " WHERE state = $1 AND finished_at IS NOT NULL"
                " AND finished_at < now() - " DUR("$2") " LIMIT $3)",
    /* Retention (tq__pg_retire): $1 the state, $2 where to start, $3 how
     * long its jobs are kept, $4 the queue, $5 how many at most; oldest
     * first, none another transaction holds (a retry, another worker's
     * retention). How many, the last one's finish and the cutoff. */
    [S_RETIRE] = "WITH gone AS (DELETE FROM TQ.jobs WHERE id IN (SELECT id FROM TQ.jobs"
                 " WHERE state = $1 AND finished_at IS NOT NULL"
                 " AND finished_at >= " TS("$2") " AND finished_at < now() - " DUR("$3")
                 " AND queue = $4 ORDER BY finished_at LIMIT $5 FOR UPDATE SKIP LOCKED)"
                 " RETURNING finished_at)"
                 " SELECT count(*), coalesce(" US("max(finished_at)") ", 0),"
                 " " US("now() - " DUR("$3")) " FROM gone",
    /* Registration: a new name is inserted, else its row is locked and
     * read, then taken over (pg_worker_register). */
    [S_WORKER_NEW] =
        "INSERT INTO TQ.workers (name, host, pid, started_at, heartbeat_at, stopped_at,"
        "                        lease_us, host_id, reaper_pid)"
        " VALUES ($1, $2, $3, now(), now(), NULL, $4, $5, $6)"
        " ON CONFLICT (name) DO NOTHING"
        " RETURNING " US("started_at"),
    [S_WORKER_GET] =
        "SELECT host, pid,"
        "  (stopped_at IS NULL AND"
        "   heartbeat_at > now() - lease_us * interval '1 microsecond'),"
        "  coalesce(host_id, ''), " US("started_at") ", " US("heartbeat_at") ","
        "  coalesce(" US("stopped_at") ", 0), lease_us, coalesce(reaper_pid, 0)"
        " FROM TQ.workers WHERE name = $1"
        " FOR UPDATE",
    [S_WORKER_PUT] =
        "UPDATE TQ.workers SET"
        "  host = $2, pid = $3, heartbeat_at = now(),"
        "  started_at = greatest(now(), started_at + interval '1 microsecond'),"
        "  stopped_at = NULL, lease_us = $4, host_id = $5, reaper_pid = $6"
        " WHERE name = $1"
        " RETURNING " US("started_at"),
    /* Only the registration that is mine (engine.h). */
    [S_WORKER_BEAT] = "UPDATE TQ.workers SET heartbeat_at = now(), lease_us = $6,"
                      " reaper_pid = $7"
                      " WHERE name = $1 AND pid = $2 AND host = $3"
                      " AND coalesce(host_id, '') = $4 AND started_at = " TS("$5"),
    [S_WORKER_STOP] = "UPDATE TQ.workers SET stopped_at = now(), heartbeat_at = now()"
                      " WHERE name = $1 AND pid = $2 AND host = $3"
                      " AND coalesce(host_id, '') = $4 AND started_at = " TS("$5"),
    [S_WORKER_LIST] =
        "SELECT name, host, pid, " US("started_at") ", " US("heartbeat_at") ","
        "  coalesce(" US("stopped_at") ", 0), lease_us,"
        "  (stopped_at IS NULL AND"
        "   heartbeat_at > now() - lease_us * interval '1 microsecond'),"
        "  coalesce(host_id, ''), coalesce(reaper_pid, 0)"
        " FROM TQ.workers ORDER BY name",
    /* Gone since its heartbeat's lease ran out, or since it stopped. */
    [S_WORKER_PRUNE] =
        "DELETE FROM TQ.workers"
        " WHERE coalesce(stopped_at, heartbeat_at + " DUR("lease_us") ")"
        "   < now() - " DUR("$1"),
};
/* clang-format on */

/* ---- queues -------------------------------------------------------------- */

/* x as a parameter when set, else NULL: the column keeps its value. */
static void p_opt(params *p, unsigned set, int64_t x)
{
    if (set)
        p_i64(p, x);
    else
        p_text(p, NULL);
}

static void p_opt_bool(params *p, unsigned set, int x)
{
    p_text(p, set ? (x ? "true" : "false") : NULL);
}

static int read_queue(tq *db, const PGresult *r, int row, void *out, void *arg)
{
    (void)db, (void)arg;
    char name[80], ord[16];
    int64_t v[TQ__QUEUE_NUMBERS];
    g_strbuf(r, row, 0, name, sizeof name);
    g_strbuf(r, row, 1, ord, sizeof ord);
    for (int i = 0; i < TQ__QUEUE_NUMBERS; i++)
        v[i] = g_i64(r, row, 2 + i);
    tq__queue_from_row(out, name, ord, v);
    return 0;
}

int tq__pg_queue_set(tq *db, const char *name, const tq_queue_opts *o)
{
    int rc;
    params p = {0};
    if ((rc = begin(db)))
        return rc;
    p_text(&p, name);
    if ((rc = tq__pg_run_count(db, S_QUEUE_ENSURE, &p, NULL, "creating the queue")))
        goto fail;
    memset(&p, 0, sizeof p);
    p_text(&p, name);
    const unsigned set = o->set;
    int64_t period_us, burst;
    tq__queue_bucket(&period_us, &burst, o);
    p_text(&p, set & TQ_SET_ORDER ? tq_order_name(o->order) : NULL);
    p_opt(&p, set & TQ_SET_LEASE, o->lease_us);
    p_opt(&p, set & TQ_SET_MAX_ATTEMPTS, o->max_attempts);
    p_opt(&p, set & TQ_SET_BACKOFF, o->backoff_base_us);
    p_opt(&p, set & TQ_SET_BACKOFF, o->backoff_cap_us);
    p_opt_bool(&p, set & TQ_SET_KEEP_DONE, o->keep_done);
    p_opt_bool(&p, set & TQ_SET_PAUSED, o->paused);
    p_opt(&p, set & TQ_SET_MAX_RUNNING, o->max_running);
    p_opt(&p, set & TQ_SET_MAX_RUNNING_PER_GROUP, o->max_running_per_group);
    p_opt(&p, set & TQ_SET_RATE, o->rate_limit);
    p_opt(&p, set & TQ_SET_RATE, period_us);
    p_opt(&p, set & TQ_SET_RATE, burst);
    p_opt(&p, set & TQ_SET_MAX_SNOOZES, o->max_snoozes);
    p_opt_bool(&p, set & TQ_SET_RESULTS, o->results);
    p_opt(&p, set & TQ_SET_TIMEOUT, o->timeout_us);
    p_opt(&p, set & TQ_SET_RETAIN_DONE, o->retain_done_us);
    p_opt(&p, set & TQ_SET_RETAIN_DEAD, o->retain_dead_us);
    if ((rc = tq__pg_run_count(db, S_QUEUE_UPDATE, &p, NULL, "changing the queue")))
        goto fail;
    return commit(db);
fail:
    tq__pg_rollback(db);
    return rc;
}

int tq__pg_queue_get(tq *db, const char *name, tq_queue_info *out)
{
    int rc;
    params p = {0};
    p_text(&p, name);
    PGresult *r = tq__pg_run(db, S_QUEUE_GET, &p, &rc, "reading the queue");
    if (!r)
        return rc;
    if (PQntuples(r))
        read_queue(db, r, 0, out, NULL);
    else
        rc = tq__seterr(db, TQ_ENOTFOUND, "no queue named '%s'", name);
    PQclear(r);
    return rc;
}

int tq__pg_queue_list(tq *db, tq_queue_info **out, size_t *out_n)
{
    int rc;
    *out = tq__pg_rows(db, S_QUEUE_LIST, NULL, "listing queues", sizeof **out, read_queue,
                       NULL, NULL, out_n, &rc);
    return rc;
}

int tq__pg_job_get(tq *db, int64_t id, tq_job **out)
{
    int rc;
    params p = {0};
    tq_job *v = NULL;
    size_t n = 0;
    p_i64(&p, id);
    PGresult *r = tq__pg_run(db, S_JOB_GET, &p, &rc, "reading the job");
    if (!r || (rc = tq__pg_read_jobs(db, r, &tq__all_cols, NULL, NULL, &v, &n)))
        return rc;
    if (n == 0) {
        free(v);
        return tq__seterr(db, TQ_ENOTFOUND, "no job with id %lld", (long long)id);
    }
    *out = v;
    return 0;
}

int tq__pg_job_result(tq *db, int64_t id, void **out, size_t *len, int *state)
{
    int rc = 0;
    params p = {0};
    *out = NULL;
    *len = 0;
    *state = -1;
    p_i64(&p, id);
    PGresult *r = tq__pg_run(db, S_JOB_RESULT, &p, &rc, "reading the job's result");
    if (!r)
        return rc;
    if (PQntuples(r) == 1) {
        char st[16];
        tq_state s = TQ_READY;
        g_strbuf(r, 0, 0, st, sizeof st);
        tq_state_parse(&s, st);
        *state = (int)s;
        if (s == TQ_DONE && !PQgetisnull(r, 0, 1)) {
            *len = (size_t)PQgetlength(r, 0, 1);
            if (!(*out = tq__memdup(PQgetvalue(r, 0, 1), *len, 1)))
                rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        }
    }
    PQclear(r);
    return rc;
}

static int state_of(tq *db, int64_t id, int *state);

/* As SQLite's: the parents first, the job's existence only without any. */
int tq__pg_job_parents(tq *db, int64_t id, tq_parent **out, size_t *out_n)
{
    int rc, state = 0;
    params p = {0};
    p_i64(&p, id);
    PGresult *r = tq__pg_run(db, S_JOB_PARENTS, &p, &rc, "reading the parents of a job");
    if (!r)
        return rc;
    size_t n = (size_t)PQntuples(r);
    if (!n) {
        PQclear(r);
        if ((rc = state_of(db, id, &state)))
            return rc;
        return state < 0 ? TQ_ENOTFOUND : 0;
    }
    if (n && !(*out = malloc(n * sizeof **out))) {
        PQclear(r);
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        tq_parent *e = &(*out)[i];
        char name[16];
        g_strbuf(r, (int)i, 1, name, sizeof name);
        *e = (tq_parent){.id = g_i64(r, (int)i, 0),
                         .when_ended = g_i64(r, (int)i, 2) != 0};
        if (tq_state_parse(&e->state, name))
            e->state = TQ_READY;
    }
    *out_n = n;
    PQclear(r);
    return 0;
}

int tq__pg_job_list(tq *db, const tq_list_opts *o, tq_job **out, size_t *out_n)
{
    int rc;
    params p = {0};
    const char *state = o->state >= 0 ? tq_state_name((tq_state)o->state) : NULL;
    enum stmt_id id = TQ__JOB_LIST_STMT(o->state);
    p_text(&p, o->queue);
    if (id == S_JOB_LIST)
        p_text(&p, state);
    p_i64(&p, (int64_t)o->limit);
    if (id == S_JOB_LIST_FINISHED && o->before_id == INT64_MAX)
        p_text(&p, NULL); /* no page before */
    else
        p_i64(&p, o->before_id);
    if (id == S_JOB_LIST_FINISHED)
        p_text(&p, state);
    PGresult *r = tq__pg_run(db, id, &p, &rc, "listing jobs");
    return r ? tq__pg_read_jobs(db, r, &tq__all_cols, NULL, NULL, out, out_n) : rc;
}

/* After an update of one job by id changed nothing: the state the job is
 * in, or -1 when there is none. (Read after the update's own transaction:
 * what it says is a state the job was in after the update.) */
static int state_of(tq *db, int64_t id, int *state)
{
    int rc;
    tq_state st;
    params p = {0};
    p_i64(&p, id);
    PGresult *r = tq__pg_run(db, S_JOB_STATE, &p, &rc, "reading the job");
    if (!r)
        return rc;
    *state = PQntuples(r) && tq_state_parse(&st, PQgetvalue(r, 0, 0)) == 0 ? (int)st : -1;
    PQclear(r);
    return 0;
}

/* A management update (tq__manage), in its own transaction: with ids, $1
 * each id, else $1 the queue. The rest of engine.h's DEPENDENCIES is the
 * triggers'. */
typedef struct manage_ctx {
    enum stmt_id id;
    const int64_t *ids;
    const char *queue;
} manage_ctx;

static int manage_begin(tq *db, void *ctx)
{
    (void)ctx;
    return begin(db);
}

static int manage_update(tq *db, void *ctx, size_t i, int64_t *changed)
{
    const manage_ctx *m = ctx;
    params p = {0};
    if (m->ids)
        p_i64(&p, m->ids[i]);
    else
        p_text(&p, m->queue);
    return tq__pg_run_count(db, m->id, &p, changed,
                            m->id == S_CANCEL ? "cancel" : "retry");
}

static int manage_after(tq *db, void *ctx, size_t i)
{
    const manage_ctx *m = ctx;
    params p = {0};
    if (m->id != S_RETRY_ONE)
        return 0;
    p_i64(&p, m->ids[i]);
    return tq__pg_run_count(db, S_DEPS_HOLD, &p, NULL, "retry");
}

static const tq__manage_ops manage_ops = {
    .begin = manage_begin,
    .update = manage_update,
    .after = manage_after,
    .state_of = state_of,
    .commit = commit,
    .rollback = tq__pg_rollback,
};

int tq__pg_job_retry(tq *db, const int64_t *ids, size_t n, const char *queue,
                     int64_t *count, size_t *bad, int *state)
{
    manage_ctx m = {n ? S_RETRY_ONE : S_RETRY_DEAD, n ? ids : NULL, queue};
    return tq__manage(db, &manage_ops, &m, ids, n, count, bad, state);
}

int tq__pg_job_cancel(tq *db, const int64_t *ids, size_t n, int64_t *count, size_t *bad,
                      int *state)
{
    manage_ctx m = {S_CANCEL, n ? ids : NULL, NULL};
    return tq__manage(db, &manage_ops, &m, ids, n, count, bad, state);
}

int tq__pg_retire(tq *db, const char *queue, const int64_t keep[TQ_STATE_COUNT],
                  int64_t after[TQ_STATE_COUNT], int64_t limit,
                  int64_t count[TQ_STATE_COUNT])
{
    int64_t next[TQ_STATE_COUNT];
    int rc = begin(db);
    for (int st = 0; st < TQ_STATE_COUNT && !rc; st++) {
        count[st] = 0;
        next[st] = after[st];
        if (keep[st] <= 0)
            continue;
        params p = {0};
        p_text(&p, tq_state_name((tq_state)st));
        p_i64(&p, after[st]);
        p_i64(&p, keep[st]);
        p_text(&p, queue);
        p_i64(&p, limit);
        PGresult *r = tq__pg_run(db, S_RETIRE, &p, &rc, "deleting finished jobs");
        if (!r)
            break;
        count[st] = g_i64(r, 0, 0);
        next[st] =
            tq__retire_next(after[st], count[st], limit, g_i64(r, 0, 1), g_i64(r, 0, 2));
        PQclear(r);
    }
    if (rc || (rc = commit(db))) {
        tq__pg_rollback(db);
        return rc;
    }
    memcpy(after, next, sizeof next);
    return 0;
}

/* A prune (tq__prune): the jobs of each state finished longer than
 * older_us ago, at most limit of them when limit > 0. */
typedef struct prune_ctx {
    int64_t older_us, limit;
} prune_ctx;

static int prune_state(tq *db, void *ctx, size_t st, int64_t *changed)
{
    const prune_ctx *c = ctx;
    params p = {0};
    p_text(&p, tq_state_name((tq_state)st));
    p_i64(&p, c->older_us);
    if (c->limit > 0)
        p_i64(&p, c->limit);
    else
        p_text(&p, NULL); /* LIMIT NULL: all */
    return tq__pg_run_count(db, S_PRUNE, &p, changed, "pruning");
}

static const tq__manage_ops prune_ops = {
    .begin = manage_begin,
    .update = prune_state,
    .commit = commit,
    .rollback = tq__pg_rollback,
};

int tq__pg_prune(tq *db, int64_t older_than_us, unsigned mask, int64_t limit,
                 int64_t *count)
{
    prune_ctx c = {older_than_us, limit};
    return tq__prune(db, &prune_ops, &c, mask, count);
}

/* ---- workers ------------------------------------------------------------- */

/*
 * A name never registered has no row to lock, so two first registrations
 * at once would both pass a SELECT ... FOR UPDATE: the insert comes first,
 * and the second of two concurrent inserts waits for the first to commit,
 * then finds its row (READ COMMITTED: each statement sees what committed
 * before it) and locks it.
 */
int tq__pg_worker_register(tq *db, tq_worker_info *w, const tq_worker_info *expect,
                           tq_worker_info *holder)
{
    int rc;
    params p = {0};
    memset(holder, 0, sizeof *holder);
    p_text(&p, w->name);
    p_text(&p, w->host);
    p_i64(&p, w->pid);
    p_i64(&p, w->lease_us);
    p_text(&p, w->host_id);
    p_i64(&p, w->reaper_pid);
    if ((rc = begin(db)))
        return rc;
    PGresult *r = tq__pg_run(db, S_WORKER_NEW, &p, &rc, "registering the worker");
    if (!r)
        goto fail;
    if (PQntuples(r) == 1) { /* a new name */
        w->started_at = g_i64(r, 0, 0);
        PQclear(r);
        return commit(db);
    }
    PQclear(r);
    params g = {0};
    p_text(&g, w->name);
    if (!(r = tq__pg_run(db, S_WORKER_GET, &g, &rc, "registering the worker")))
        goto fail;
    if (PQntuples(r)) {
        snprintf(holder->name, sizeof holder->name, "%s", w->name);
        g_strbuf(r, 0, 0, holder->host, sizeof holder->host);
        holder->pid = g_i64(r, 0, 1);
        holder->alive = (int)g_i64(r, 0, 2);
        g_strbuf(r, 0, 3, holder->host_id, sizeof holder->host_id);
        holder->started_at = g_i64(r, 0, 4);
        holder->heartbeat_at = g_i64(r, 0, 5);
        holder->stopped_at = g_i64(r, 0, 6);
        holder->lease_us = g_i64(r, 0, 7);
        holder->reaper_pid = g_i64(r, 0, 8);
    }
    PQclear(r);
    if (holder->name[0] && (expect ? !tq__same_holder(holder, expect) : holder->alive)) {
        rc = TQ_EINUSE; /* worded by the caller, from *holder */
        goto fail;
    }
    if (!(r = tq__pg_run(db, S_WORKER_PUT, &p, &rc, "registering the worker")))
        goto fail;
    w->started_at = PQntuples(r) == 1 ? g_i64(r, 0, 0) : 0;
    PQclear(r);
    return commit(db);
fail:
    tq__pg_rollback(db);
    return rc;
}

static int worker_touch(tq *db, enum stmt_id id, const tq_worker_info *me)
{
    params p = {0};
    int64_t n = 0;
    p_text(&p, me->name);
    p_i64(&p, me->pid);
    p_text(&p, me->host);
    p_text(&p, me->host_id);
    p_i64(&p, me->started_at);
    if (id == S_WORKER_BEAT) {
        p_i64(&p, me->lease_us);
        p_i64(&p, me->reaper_pid);
    }
    int rc = tq__pg_run_count(db, id, &p, &n, "updating the worker");
    return !rc && n == 0 ? TQ_EINUSE : rc; /* worded by the caller */
}

int tq__pg_worker_beat(tq *db, const tq_worker_info *me)
{
    return worker_touch(db, S_WORKER_BEAT, me);
}

int tq__pg_worker_stop(tq *db, const tq_worker_info *me)
{
    return worker_touch(db, S_WORKER_STOP, me);
}

int tq__pg_worker_prune(tq *db, int64_t older_than_us, int64_t *count)
{
    params p = {0};
    p_i64(&p, older_than_us);
    return tq__pg_run_count(db, S_WORKER_PRUNE, &p, count, "pruning workers");
}

static int read_worker(tq *db, const PGresult *r, int i, void *out, void *arg)
{
    (void)db, (void)arg;
    tq_worker_info *w = out;
    g_strbuf(r, i, 0, w->name, sizeof w->name);
    g_strbuf(r, i, 1, w->host, sizeof w->host);
    w->pid = g_i64(r, i, 2);
    w->started_at = g_i64(r, i, 3);
    w->heartbeat_at = g_i64(r, i, 4);
    w->stopped_at = g_i64(r, i, 5);
    w->lease_us = g_i64(r, i, 6);
    w->alive = (int)g_i64(r, i, 7);
    g_strbuf(r, i, 8, w->host_id, sizeof w->host_id);
    w->reaper_pid = g_i64(r, i, 9);
    return 0;
}

int tq__pg_worker_list(tq *db, tq_worker_info **out, size_t *out_n)
{
    int rc;
    *out = tq__pg_rows(db, S_WORKER_LIST, NULL, "listing workers", sizeof **out,
                       read_worker, NULL, NULL, out_n, &rc);
    return rc;
}
