/*
 * postgres/stats.c - the PostgreSQL engine: statistics: counts by state, oldest ready,
 * durations, throughput.
 */
#include "pg_int.h"

/* clang-format off */
const char *const tq__pg_sql_stats[S_COUNT] = {
    [S_COUNTS] = "SELECT state, count(*) FROM TQ.jobs"
                 " WHERE ($1::text IS NULL OR queue = $1) GROUP BY state",
    [S_OLDEST_READY] = "SELECT (extract(epoch from now() - min(run_at)) * 1000000)::int8"
                       " FROM TQ.jobs WHERE state = 'ready' AND run_at <= now()"
                       " AND ($1::text IS NULL OR queue = $1)",
    [S_DELAYED] =
        "SELECT count(*),"
        "  coalesce((extract(epoch from min(run_at) - now()) * 1000000)::int8, 0)"
        " FROM TQ.jobs WHERE state = 'ready' AND run_at > now()"
        " AND ($1::text IS NULL OR queue = $1)",
    [S_ACTIVE] =
        "SELECT queue,"
        "  count(*) FILTER (WHERE state = 'ready' AND run_at <= now()),"
        "  count(*) FILTER (WHERE state = 'ready' AND run_at > now()),"
        "  count(*) FILTER (WHERE state = 'running'),"
        "  coalesce((extract(epoch from"
        "    min(run_at) FILTER (WHERE state = 'ready' AND run_at > now()) - now())"
        "    * 1000000)::int8, 0)"
        " FROM TQ.jobs WHERE state IN ('ready', 'running')"
        " GROUP BY queue ORDER BY queue",
    [S_DONE_SINCE] =
        "SELECT count(*) FROM TQ.jobs WHERE state = 'done'"
        " AND finished_at IS NOT NULL AND finished_at >= now() - " DUR("$2")
        " AND ($1::text IS NULL OR queue = $1)",
    [S_LONGEST] = "SELECT id, coalesce(worker, ''),"
                  " (extract(epoch from now() - started_at) * 1000000)::int8"
                  " FROM TQ.jobs WHERE state = 'running' AND lease_until IS NOT NULL"
                  " AND started_at IS NOT NULL AND ($1::text IS NULL OR queue = $1)"
                  " ORDER BY started_at LIMIT 5",
    [S_DURATIONS] =
        "SELECT (extract(epoch from finished_at - started_at) * 1000000)::int8"
        " FROM TQ.jobs WHERE state = 'done' AND finished_at IS NOT NULL"
        " AND started_at IS NOT NULL AND ($1::text IS NULL OR queue = $1)"
        " ORDER BY finished_at DESC LIMIT $2",
    /* Monitoring (tq_count_jobs), each along its state's partial index
     * (a running job always has a lease). */
    [S_COUNT_READY] =
        "SELECT queue, count(*), count(*) FILTER (WHERE run_at > now()),"
        " coalesce(" US("now() - min(run_at) FILTER (WHERE run_at <= now())") ", 0)"
        " FROM TQ.jobs WHERE state = 'ready' GROUP BY queue",
    [S_COUNT_RUNNING] = "SELECT queue, count(*), 0, 0 FROM TQ.jobs"
                        " WHERE state = 'running' AND lease_until IS NOT NULL GROUP BY queue",
    [S_COUNT_RUNNING_BY_WORKER] =
        "SELECT coalesce(worker, ''), count(*), 0, 0 FROM TQ.jobs"
        " WHERE state = 'running' AND lease_until IS NOT NULL GROUP BY 1",
    [S_COUNT_WAITING] = "SELECT queue, count(*), 0, 0 FROM TQ.jobs"
                        " WHERE state = 'waiting' GROUP BY queue",
    [S_COUNT_FINISHED] = "SELECT queue, count(*), 0, 0 FROM TQ.jobs"
                         " WHERE state = $1 AND finished_at IS NOT NULL GROUP BY queue",
    /* tq_finished_since, one state at a time, in the index's order. */
    [S_FINISHED_SINCE] =
        "SELECT id, queue, " US("finished_at") ","
        " coalesce(" US("finished_at - started_at") ", -1) FROM TQ.jobs"
        " WHERE state = $1 AND finished_at IS NOT NULL"
        " AND (finished_at, id) > (" TS("$2") ", $3) AND finished_at <= " TS("$4")
        " ORDER BY finished_at, id LIMIT $5",
};
/* clang-format on */

/* ---- stats --------------------------------------------------------------- */

int tq__pg_stats(tq *db, const char *queue, tq_stats *out)
{
    int rc;
    params p = {0};
    p_text(&p, queue);
    /* One snapshot, so the numbers agree with each other (in the caller's
     * transaction, when the caller has one open on its connection, as
     * that transaction's isolation level has it). */
    const int own = PQtransactionStatus(C(db)->pg) == PQTRANS_IDLE;
    if (own && (rc = tq__pg_simple(db, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                                   "starting a read")))
        return rc;
    C(db)->tx = own ? TX_OWN : TX_NONE;
    PGresult *r = tq__pg_run(db, S_COUNTS, &p, &rc, "counting jobs");
    if (!r)
        goto done;
    for (int i = 0; i < PQntuples(r); i++) {
        char name[16];
        tq_state st;
        g_strbuf(r, i, 0, name, sizeof name);
        if (tq_state_parse(&st, name) == 0)
            out->count[st] = g_i64(r, i, 1);
    }
    PQclear(r);
    if ((rc = tq__pg_query_i64(db, S_OLDEST_READY, &p, &out->oldest_ready_age_us,
                               "reading stats")))
        goto done;
    if (!(r = tq__pg_run(db, S_DELAYED, &p, &rc, "reading stats")))
        goto done;
    if (PQntuples(r)) {
        out->delayed = g_i64(r, 0, 0);
        out->next_due_in_us = g_i64(r, 0, 1);
    }
    PQclear(r);
    params p2 = {0};
    p_text(&p2, queue);
    p_i64(&p2, 60000000);
    if ((rc = tq__pg_query_i64(db, S_DONE_SINCE, &p2, &out->done_last_minute,
                               "reading stats")))
        goto done;
    if (!(r = tq__pg_run(db, S_LONGEST, &p, &rc, "reading stats")))
        goto done;
    for (int i = 0; i < PQntuples(r) && i < 5; i++) {
        out->longest[i].id = g_i64(r, i, 0);
        g_strbuf(r, i, 1, out->longest[i].worker, sizeof out->longest[i].worker);
        out->longest[i].running_us = g_i64(r, i, 2);
        out->nlongest++;
    }
    PQclear(r);
done:
    if (rc && own)
        tq__pg_rollback(db);
    else if (own)
        rc = commit(db);
    return rc;
}

static int read_active(tq *db, const PGresult *r, int i, void *out, void *arg)
{
    (void)db, (void)arg;
    tq__active *a = out;
    g_strbuf(r, i, 0, a->queue, sizeof a->queue);
    a->due = g_i64(r, i, 1);
    a->delayed = g_i64(r, i, 2);
    a->running = g_i64(r, i, 3);
    a->next_due_in_us = g_i64(r, i, 4);
    return 0;
}

int tq__pg_active(tq *db, tq__active **out, size_t *out_n)
{
    int rc;
    *out = tq__pg_rows(db, S_ACTIVE, NULL, "counting active jobs", sizeof **out,
                       read_active, NULL, NULL, out_n, &rc);
    return rc;
}

static int read_duration(tq *db, const PGresult *r, int i, void *out, void *arg)
{
    (void)db, (void)arg;
    *(int64_t *)out = g_i64(r, i, 0);
    return 0;
}

int tq__pg_durations(tq *db, const char *queue, size_t limit, int64_t **out,
                     size_t *out_n)
{
    params p = {0};
    int rc;
    p_text(&p, queue);
    p_i64(&p, (int64_t)limit);
    *out = tq__pg_rows(db, S_DURATIONS, &p, "reading durations", sizeof **out,
                       read_duration, NULL, NULL, out_n, &rc);
    return rc;
}

static int read_count(tq *db, const PGresult *r, int i, void *out, void *arg)
{
    (void)db, (void)arg;
    tq_count *c = out;
    g_strbuf(r, i, 0, c->name, sizeof c->name);
    c->n = g_i64(r, i, 1);
    c->delayed = g_i64(r, i, 2);
    c->oldest_due_us = g_i64(r, i, 3);
    return 0;
}

int tq__pg_count_jobs(tq *db, tq_state st, int by_worker, tq_count **out, size_t *out_n)
{
    params p = {0};
    int rc;
    enum stmt_id id = TQ__COUNT_STMT(st, by_worker);
    if (id == S_COUNT_FINISHED)
        p_text(&p, tq_state_name(st));
    *out = tq__pg_rows(db, id, &p, "counting jobs", sizeof **out, read_count, NULL, NULL,
                       out_n, &rc);
    return rc;
}

int tq__pg_finished_since(tq *db, tq_state st, int64_t at, int64_t after_id, int64_t upto,
                          size_t limit, tq_finished *out, size_t *out_n)
{
    int rc;
    params p = {0};
    p_text(&p, tq_state_name(st));
    p_i64(&p, at);
    p_i64(&p, after_id);
    p_i64(&p, upto);
    p_i64(&p, (int64_t)limit);
    PGresult *r = tq__pg_run(db, S_FINISHED_SINCE, &p, &rc, "reading finished jobs");
    if (!r)
        return rc;
    size_t n = (size_t)PQntuples(r);
    for (size_t i = 0; i < n && i < limit; i++) {
        out[i].id = g_i64(r, (int)i, 0);
        g_strbuf(r, (int)i, 1, out[i].queue, sizeof out[i].queue);
        out[i].state = st;
        out[i].finished_at = g_i64(r, (int)i, 2);
        out[i].duration_us = g_i64(r, (int)i, 3);
    }
    PQclear(r);
    *out_n = n < limit ? n : limit;
    return 0;
}
