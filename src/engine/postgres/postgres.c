/*
 * postgres/postgres.c - the PostgreSQL engine: many worker hosts sharing
 * one queue. Called only through tq__engine_postgres (engine.h), defined at
 * the bottom: open, close, reconnect and notifications here, the rest in
 * the files of this folder, by concern (schema.c, claim.c, ack.c, rate.c,
 * enqueue.c, admin.c, stats.c, cron.c; stmt.c runs their statements).
 *
 * Everything lives in one schema (default "tq", set with tq_schema=NAME in
 * the URL). The SQL names it "TQ."; tq__pg_prepare() substitutes the real
 * schema, which url.c has restricted to [a-z0-9_], so no quoting issue can
 * arise. Values are always bound as parameters.
 *
 * The claim is PostgreSQL's READPAST + UPDLOCK: a MATERIALIZED CTE picks up
 * to n ready rows with FOR UPDATE SKIP LOCKED, and UPDATE ... FROM marks
 * exactly those. (UPDATE ... WHERE id IN (SELECT ... SKIP LOCKED LIMIT n)
 * may run as a semi-join that re-executes the subquery per outer row and
 * claims more than n.) Every time is the server's now(), so clock skew
 * between worker hosts changes nothing; the API's microseconds since the
 * epoch are converted at the boundary (job rows read in binary, see g_time;
 * US() out elsewhere, TS() in).
 */
#include "pg_int.h"

/* clang-format off */

/* Every session's settings, on connect and on reconnect. No JIT: every
 * statement here touches a handful of rows, and the planner settings S_PLAN
 * makes (a sort it cannot avoid, like the limited claim's, then costs
 * 10^10 on paper) would have it compile each claim: 0.5 s apiece. */
#define SESSION_SETUP                                                                    \
    "SET client_min_messages = warning; SET TIME ZONE 'UTC'; SET jit = off"


const char *const tq__pg_sql_postgres[S_COUNT] = {
    /* Periodic jobs, as SQLite's statements of the same names say; slots
     * are the server's clock. */
    [S_CLOCK] = "SELECT " US("clock_timestamp()"),
};
/* clang-format on */

/* ---- open, close, init --------------------------------------------------- */

static void pg_close(tq *db)
{
    conn *c = C(db);
    if (!c)
        return;
    if (c->borrowed)
        tq__pg_unprepare(db);
    else
        PQfinish(c->pg);
    PQfinish(c->listen_pg);
    for (int id = 0; id < S_COUNT; id++)
        free(c->text[id]);
    free(c->listen_url);
    free(c->schema);
    free(c);
    db->conn = NULL;
}

static int pg_schema_version(tq *db, int *version)
{
    int rc;
    *version = 0;
    PGresult *r =
        tq__pg_run(db, S_SCHEMA_VERSION, NULL, &rc, "reading the schema version");
    if (!r) /* no schema or no meta table */
        return rc == TQ_ESCHEMA ? 0 : rc;
    *version = PQntuples(r) ? atoi(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    return 0;
}

static void ignore_notice(void *arg, const char *msg)
{
    (void)arg, (void)msg;
}

/*
 * Whether a failed connection may work when tried again: the server is not
 * there yet (refused, no socket, no route, a name not resolved yet, a
 * timeout) or not ready (starting, stopping, recovering, full). libpq gives
 * no SQLSTATE for a failed connection, so this goes by its words and the
 * server's (in English: a server whose lc_messages is another language is
 * taken at its word, refused). libpq tries each address of a host in turn
 * and says how each failed, a line "connection to server ... failed: ..."
 * each: one refusal among them (authentication, no such database or role,
 * SSL settings) means a server answered no, and waiting cannot fix it:
 * TQ_EREFUSED.
 */
static int attempt_may_pass(const char *msg, size_t len)
{
    static const char *const transient[] = {
        "Connection refused",
        "No such file or directory", /* the unix socket, before the server */
        "timeout expired",
        "Connection timed out",
        "could not translate host name",
        "Temporary failure in name resolution",
        "Network is unreachable",
        "No route to host",
        "Connection reset",
        "server closed the connection unexpectedly",
        "the database system is starting up",
        "the database system is shutting down",
        "the database system is in recovery mode",
        "the database system is not yet accepting connections",
        "the database system is not accepting connections",
        "too many clients already",
        "remaining connection slots are reserved",
    };
    for (size_t i = 0; i < sizeof transient / sizeof transient[0]; i++)
        if (memmem(msg, len, transient[i], strlen(transient[i])))
            return 1;
    return 0;
}

static int connect_may_pass(const char *msg)
{
    static const char start[] = "connection to server";
    const char *p = msg;
    while (*p) {
        /* One attempt: up to the next line that starts another. */
        const char *end = p + 1;
        while (*end && !(end[-1] == '\n' && strncmp(end, start, sizeof start - 1) == 0))
            end++;
        if (!attempt_may_pass(p, (size_t)(end - p)))
            return 0;
        p = end;
    }
    return p != msg;
}

/* The caller's connection (tq_open_opts.conn), its session as the caller
 * set it: times cross the boundary as epoch microseconds, so its time zone
 * changes nothing. Its statements get names no other handle on it has. */
static int borrow_open(tq *db, PGconn *pg)
{
    static _Atomic unsigned handles;
    conn *c = C(db);
    if (PQstatus(pg) != CONNECTION_OK || PQpipelineStatus(pg) != PQ_PIPELINE_OFF ||
        PQisBusy(pg))
        return tq__seterr(db, TQ_EINVAL,
                          "the connection given (tq_open_opts.conn) is not ready: "
                          "connected, idle, not in pipeline mode");
    c->pg = pg;
    c->borrowed = 1;
    c->gen = ++handles;
    return 0;
}

static int pg_in_caller_tx(tq *db)
{
    return C(db)->borrowed && PQtransactionStatus(C(db)->pg) != PQTRANS_IDLE;
}

/*
 * A new connection to conninfo (where: how messages name it) into *out,
 * with bounds on a network that fails silently, each overridden by the
 * same parameter in the URL (it comes after them): give up connecting after
 * 10 s; probe an idle connection after 30 s and drop it after 3 probes 10 s
 * apart go unanswered (a dead host, a dropped route); drop it when data
 * sent stays unacknowledged for 30 s. A connection that hangs with its
 * peer's kernel still answering is get_result's business.
 */
static int connect_to(tq *db, const char *conninfo, const char *where, PGconn **out)
{
    const char *keys[] = {"keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "connect_timeout",
                          "dbname",
                          NULL};
    const char *vals[] = {"1", "30", "10", "3", "30000", "10", conninfo, NULL};
    if (getenv("PGCONNECT_TIMEOUT")) { /* the environment's wins too */
        keys[5] = "dbname", vals[5] = conninfo;
        keys[6] = vals[6] = NULL;
    }
    PGconn *pg = PQconnectdbParams(keys, vals, 1);
    if (!pg || PQstatus(pg) != CONNECTION_OK) {
        const char *m = pg ? PQerrorMessage(pg) : "out of memory";
        size_t n = strlen(m);
        while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
            n--;
        int rc = !pg ? TQ_ENOMEM : connect_may_pass(m) ? TQ_ECONN : TQ_EREFUSED;
        tq__seterr(db, rc, "cannot connect to %s: %.*s", where, (int)n, m);
        PQfinish(pg);
        return rc;
    }
    /* Notices (e.g. "schema already exists") are not for our users. */
    PQsetNoticeProcessor(pg, ignore_notice, NULL);
    *out = pg;
    return 0;
}

static int pg_open(tq *db, const tq__url *url, int create, void *borrow)
{
    (void)create; /* the schema is created by init, and checked by tq_open */
    int rc;
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    db->conn = c;
    tq__url_redact(c->where, sizeof c->where, url->conninfo);
    c->schema = tq__strdup(url->schema);
    c->pooled = url->pooled;
    c->listen_url = url->listen ? tq__strdup(url->listen) : NULL;
    if (c->listen_url)
        tq__url_redact(c->listen_where, sizeof c->listen_where, c->listen_url);
    if (!c->schema || (url->listen && !c->listen_url)) {
        pg_close(db);
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    }
    if (borrow) {
        if ((rc = borrow_open(db, borrow)))
            pg_close(db);
        return rc;
    }
    rc = connect_to(db, url->conninfo, c->where, &c->pg);
    if (!rc && !c->pooled)
        rc = tq__pg_simple(db, SESSION_SETUP, "configuring the session");
    if (rc)
        pg_close(db);
    return rc;
}

/* ---- notifications ------------------------------------------------------ */

/*
 * Listens on the connection's own session, or, with tq_listen, on a
 * connection of its own to that URL (made again when it was lost). Behind
 * a pooler in transaction mode without one, not at all: the session that
 * heard LISTEN would be any client's next.
 */
static int pg_listen(tq *db)
{
    conn *c = C(db);
    char text[128];
    /* A channel is an identifier, not a parameter; the schema is [a-z0-9_]. */
    snprintf(text, sizeof text, "LISTEN tq_%s", c->schema);
    if (!c->listen_url && c->pooled)
        return tq__seterr(db, TQ_EINVAL,
                          "behind a pooler in transaction mode (tq_pool=transaction) "
                          "a worker hears of new jobs only on a connection of its own "
                          "to the server (tq_listen=URL)");
    if (!c->listen_url)
        return tq__pg_simple(db, text, "listening for new jobs");
    if (c->listen_pg && PQstatus(c->listen_pg) == CONNECTION_OK)
        return 0;
    PQfinish(c->listen_pg);
    c->listen_pg = NULL;
    int rc = connect_to(db, c->listen_url, c->listen_where, &c->listen_pg);
    if (rc)
        return rc;
    /* Swapped in for the wait: one statement, within the wait limit. */
    PGconn *pg = c->pg;
    const int hung = c->hung;
    c->pg = c->listen_pg;
    rc = tq__pg_simple(db, text, "listening for new jobs (tq_listen)");
    c->pg = pg;
    c->hung = hung; /* a hang there was the listening connection's: dropped */
    if (rc) {
        PQfinish(c->listen_pg);
        c->listen_pg = NULL;
    }
    return rc;
}

/*
 * The server's side of a wait limit of us (0: none, the session's default
 * again): a transaction of this session left idle for longer (its client
 * frozen, or cut off between requests) ends the session, so that its row
 * locks do not outlive the client. The server arms that timeout only once
 * it has answered a whole request, so a pipeline cut off halfway is ended
 * from the next session instead (pg_reconnect), which needs this session's
 * identity: its backend's pid and start.
 */
static int apply_wait_limit(tq *db, int64_t us)
{
    conn *c = C(db);
    PGresult *r;
    char ms[32];
    snprintf(ms, sizeof ms, "%lld", (long long)(us / 1000));
    const char *v[] = {ms};
    if (c->pooled) /* the pooler's idle_transaction_timeout (operations.md) */
        return 0;
    if (!us)
        return tq__pg_simple(db, "RESET idle_in_transaction_session_timeout",
                             "resetting the wait limit");
    int rc = tq__pg_exec_params(
        db,
        "SELECT set_config('idle_in_transaction_session_timeout', $1, false),"
        " backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        1, v, &r, "setting the wait limit");
    if (rc)
        return rc;
    c->backend_pid = PQbackendPID(c->pg);
    snprintf(c->backend_start, sizeof c->backend_start, "%s",
             PQntuples(r) ? PQgetvalue(r, 0, 1) : "");
    PQclear(r);
    return 0;
}

/* From a new session: ends the one a hang left behind, if it is still
 * there (same pid and start). Best effort: its locks go with it. */
static void end_old_session(tq *db, int pid, const char *start)
{
    char p[16];
    snprintf(p, sizeof p, "%d", pid);
    const char *v[] = {p, start};
    char keep[sizeof db->errmsg];
    memcpy(keep, db->errmsg, sizeof keep);
    tq__pg_exec_params(db,
                       "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                       " WHERE pid = $1::int AND backend_start::text = $2",
                       2, v, NULL, "ending the session left behind");
    memcpy(db->errmsg, keep, sizeof keep);
}

int tq__pg_reconnect(tq *db)
{
    conn *c = C(db);
    if (c->borrowed)
        return tq__seterr(db, TQ_ECONN,
                          "the connection to %s is lost; it is the caller's "
                          "(tq_open_opts.conn), which tq does not reconnect",
                          c->where);
    int old_pid = c->hung ? c->backend_pid : 0;
    char old_start[sizeof c->backend_start];
    memcpy(old_start, c->backend_start, sizeof old_start);
    PQreset(c->pg);
    if (PQstatus(c->pg) != CONNECTION_OK) {
        const char *m = PQerrorMessage(c->pg);
        size_t n = strlen(m);
        while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
            n--;
        return tq__seterr(db, TQ_ECONN, "cannot reconnect to %s: %.*s", c->where, (int)n,
                          m);
    }
    /* a new session has no prepared statements */
    memset(c->prepared, 0, sizeof c->prepared);
    c->hung = 0;
    int rc = c->pooled ? 0 : tq__pg_simple(db, SESSION_SETUP, "configuring the session");
    if (!rc && c->wait_us)
        rc = apply_wait_limit(db, c->wait_us);
    if (!rc && old_pid && old_start[0])
        end_old_session(db, old_pid, old_start);
    return rc;
}

static int pg_set_wait_limit(tq *db, int64_t us)
{
    conn *c = C(db);
    int64_t was = c->wait_us;
    if (us == was)
        return 0;
    if (c->hung) { /* the next session gets it (pg_reconnect) */
        c->wait_us = us;
        return 0;
    }
    /* The change itself waits no longer than the larger limit allows. */
    c->wait_us = was && us ? (was > us ? was : us) : (was ? was : us);
    int rc = apply_wait_limit(db, us);
    c->wait_us = us;
    return rc;
}

/* Where notifications arrive; -1: nowhere (pg_listen). */
static PGconn *listening(const conn *c)
{
    return c->listen_pg ? c->listen_pg : c->listen_url || c->pooled ? NULL : c->pg;
}

static int pg_notify_fd(tq *db)
{
    PGconn *l = listening(C(db));
    return l ? PQsocket(l) : -1;
}

/* A notification names the queue whose jobs became ready (inserted, put
 * back, retried, released by their parents); an empty one says that queue
 * settings or schedules changed (TQ.changed, migration 16). */
static int pg_notify_drain(tq *db, const char *const *queues, size_t nqueues, int *count,
                           int *changed, int64_t *again_us)
{
    conn *c = C(db);
    PGconn *l = listening(c);
    PGnotify *n;
    *count = *changed = 0;
    *again_us = 0;
    if (!l)
        return 0;
    if (l == c->listen_pg && (!PQconsumeInput(l) || PQstatus(l) != CONNECTION_OK)) {
        /* Reconnecting listens again (pg_listen), and a worker back from a
         * reconnection claims at once: nothing missed is left waiting. */
        const char *m = PQerrorMessage(l);
        return tq__seterr(db, TQ_ECONN,
                          "reading notifications: lost the connection to %s: %.*s",
                          c->listen_where, (int)strcspn(m, "\n"), m);
    }
    if (l == c->pg && !PQconsumeInput(l))
        return tq__pg_fail_res(db, NULL, "reading notifications");
    while ((n = PQnotifies(l))) {
        size_t i = 0;
        while (queues && i < nqueues && strcmp(queues[i], n->extra))
            i++;
        if (!n->extra[0])
            *changed = 1;
        else if (!queues || i < nqueues)
            (*count)++;
        PQfreemem(n);
    }
    return 0;
}

const char *tq__postgres_claim_sql(tq_order order, int kind)
{
    return tq__claim_known(order, kind, TQ__CLAIM_RATE)
               ? tq__pg_sql(tq__pg_claim_id(order, kind))
               : NULL;
}

const char *tq__postgres_plan_sql(void)
{
    return tq__pg_sql(S_PLAN);
}

const char *tq__postgres_group_plan_sql(void)
{
    return tq__pg_sql(S_PLAN_GROUP);
}

const char *tq__postgres_rescue_sql(void)
{
    return tq__pg_sql(S_RESCUE_EXPIRED);
}

const char *tq__postgres_pending_sql(void)
{
    return tq__pg_sql(S_PENDING);
}

const char *tq__postgres_ack_sql(void)
{
    return tq__pg_sql(S_ACK_DONE);
}

/* A server's database is not a file that can be swapped under a session. */
static int pg_same_store(tq *db)
{
    (void)db;
    return 0;
}

/* The server keeps its own write-ahead log, checkpointed by itself. */
static int pg_checkpoint(tq *db, tq_wal_info *out)
{
    (void)db;
    *out = (tq_wal_info){0};
    return 0;
}

static int pg_clock(tq *db, int64_t *now_us)
{
    int rc;
    PGresult *r = tq__pg_run(db, S_CLOCK, NULL, &rc, "reading the store's clock");
    if (!r)
        return rc;
    *now_us = g_i64(r, 0, 0);
    PQclear(r);
    return 0;
}

const struct tq__engine tq__engine_postgres = {
    .name = "postgres",
    .caps = TQ__CAP_NOTIFY | TQ__CAP_NETWORK,
    .open = pg_open,
    .close = pg_close,
    .init = tq__pg_init,
    .schema_version = pg_schema_version,
    .in_caller_tx = pg_in_caller_tx,
    .queue_set = tq__pg_queue_set,
    .queue_get = tq__pg_queue_get,
    .queue_list = tq__pg_queue_list,
    .enqueue = tq__pg_enqueue,
    .exchange = tq__pg_exchange,
    .rescue = tq__pg_rescue,
    .pending = tq__pg_pending,
    .pending_due = tq__pg_pending_due,
    .job_get = tq__pg_job_get,
    .job_result = tq__pg_job_result,
    .job_list = tq__pg_job_list,
    .job_parents = tq__pg_job_parents,
    .job_retry = tq__pg_job_retry,
    .job_cancel = tq__pg_job_cancel,
    .prune = tq__pg_prune,
    .retire = tq__pg_retire,
    .worker_prune = tq__pg_worker_prune,
    .stats = tq__pg_stats,
    .active = tq__pg_active,
    .durations = tq__pg_durations,
    .count_jobs = tq__pg_count_jobs,
    .finished_since = tq__pg_finished_since,
    .worker_register = tq__pg_worker_register,
    .worker_beat = tq__pg_worker_beat,
    .worker_stop = tq__pg_worker_stop,
    .worker_list = tq__pg_worker_list,
    .same_store = pg_same_store,
    .checkpoint = pg_checkpoint,
    .listen = pg_listen,
    .reconnect = tq__pg_reconnect,
    .set_wait_limit = pg_set_wait_limit,
    .notify_fd = pg_notify_fd,
    .notify_drain = pg_notify_drain,
    .clock = pg_clock,
    .schedule_put = tq__pg_schedule_put,
    .schedule_remove = tq__pg_schedule_remove,
    .schedule_list = tq__pg_schedule_list,
    .schedule_fire = tq__pg_schedule_fire,
};
