/*
 * sqlite/stats.c - the SQLite engine: statistics: counts by state, oldest ready,
 * durations, throughput.
 */
#include "sqlite_int.h"

/* clang-format off */
const char *const tq__sqlite_sql_stats[S_COUNT] = {
    [S_COUNTS] = "SELECT state, count(*) FROM tq_jobs WHERE (?1 IS NULL OR queue = ?1)"
                 " GROUP BY state",
    [S_OLDEST_READY] = "SELECT min(run_at) FROM tq_jobs WHERE state = 'ready'"
                       " AND run_at <= ?2 AND (?1 IS NULL OR queue = ?1)",
    [S_DELAYED] = "SELECT count(*), min(run_at) FROM tq_jobs WHERE state = 'ready'"
                  " AND run_at > ?2 AND (?1 IS NULL OR queue = ?1)",
    [S_ACTIVE] = "SELECT queue, sum(state = 'ready' AND run_at <= ?1),"
                 " sum(state = 'ready' AND run_at > ?1), sum(state = 'running'),"
                 " min(CASE WHEN state = 'ready' AND run_at > ?1 THEN run_at END)"
                 " FROM tq_jobs WHERE state IN ('ready', 'running')"
                 " GROUP BY queue ORDER BY queue",
    [S_DONE_SINCE] = "SELECT count(*) FROM tq_jobs WHERE state = 'done'"
                     " AND finished_at IS NOT NULL AND finished_at >= ?2"
                     " AND (?1 IS NULL OR queue = ?1)",
    [S_LONGEST] = "SELECT id, coalesce(worker, ''), started_at FROM tq_jobs"
                  " WHERE state = 'running' AND started_at IS NOT NULL"
                  " AND (?1 IS NULL OR queue = ?1) ORDER BY started_at LIMIT 5",
    [S_DURATIONS] = "SELECT finished_at - started_at FROM tq_jobs"
                    " WHERE state = 'done' AND finished_at IS NOT NULL"
                    " AND started_at IS NOT NULL AND (?1 IS NULL OR queue = ?1)"
                    " ORDER BY finished_at DESC LIMIT ?2",
    /* Monitoring (tq_count_jobs): each along its state's index. SQLite
     * has no index of waiting jobs; the dependency table names them. */
    [S_COUNT_READY] = "SELECT queue, count(*), sum(run_at > ?1),"
                      " coalesce(?1 - min(CASE WHEN run_at <= ?1 THEN run_at END), 0)"
                      " FROM tq_jobs WHERE state = 'ready' GROUP BY queue",
    [S_COUNT_RUNNING] = "SELECT queue, count(*) FROM tq_jobs WHERE state = 'running'"
                        " GROUP BY queue",
    [S_COUNT_RUNNING_BY_WORKER] = "SELECT coalesce(worker, ''), count(*) FROM tq_jobs"
                                  " WHERE state = 'running' GROUP BY 1",
    [S_COUNT_WAITING] = "SELECT queue, count(*) FROM tq_jobs"
                        " WHERE id IN (SELECT child FROM tq_deps) AND state = 'waiting'"
                        " GROUP BY queue",
    [S_COUNT_FINISHED] = "SELECT queue, count(*) FROM tq_jobs"
                         " WHERE state = ?1 AND finished_at IS NOT NULL GROUP BY queue",
    /* tq_finished_since, one state at a time, in the index's order. */
    [S_FINISHED_SINCE] =
        "SELECT id, queue, finished_at, coalesce(finished_at - started_at, -1)"
        " FROM tq_jobs WHERE state = ?1 AND finished_at IS NOT NULL"
        " AND finished_at >= ?2 AND (finished_at > ?2 OR id > ?3)"
        " AND finished_at <= ?4 ORDER BY finished_at, id LIMIT ?5",
};
/* clang-format on */

/* ---- stats ------------------------------------------------------------- */

/* Statement id with queue (NULL: every queue) bound as ?1, as each that
 * reads a queue's numbers takes it: NULL, with *rc set, when it cannot be
 * prepared. */
static sqlite3_stmt *queue_stmt(tq *db, enum stmt_id id, const char *queue, int *rc)
{
    sqlite3_stmt *s = stmt(db, id, rc);
    if (s)
        bind_text(s, 1, queue);
    return s;
}

int tq__sqlite_stats(tq *db, const char *queue, tq_stats *out)
{
    int rc, src;
    const int64_t now = tq__now_us();
    int64_t v;

    /* One read transaction, so the numbers agree with each other (the
     * caller's, when the caller has one open on its connection). */
    const int own = sqlite3_get_autocommit(C(db)->h);
    if (own && sqlite3_exec(C(db)->h, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return tq__sqlite_fail_rc(db, sqlite3_errcode(C(db)->h), "starting a read");
    sqlite3_stmt *s = queue_stmt(db, S_COUNTS, queue, &rc);
    if (!s)
        goto done;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_state st;
        if (tq_state_parse(&st, (const char *)sqlite3_column_text(s, 0)) == 0)
            out->count[st] = sqlite3_column_int64(s, 1);
    }
    done_with(s);
    if (src != SQLITE_DONE) {
        rc = tq__sqlite_fail_rc(db, src, "counting jobs");
        goto done;
    }
    if ((rc = tq__sqlite_query_int(db, S_OLDEST_READY, queue, now, &v, "reading stats")))
        goto done;
    out->oldest_ready_age_us = v ? now - v : 0;
    if (!(s = queue_stmt(db, S_DELAYED, queue, &rc)))
        goto done;
    sqlite3_bind_int64(s, 2, now);
    if ((src = sqlite3_step(s)) == SQLITE_ROW) {
        out->delayed = sqlite3_column_int64(s, 0);
        if (out->delayed)
            out->next_due_in_us = sqlite3_column_int64(s, 1) - now;
    }
    done_with(s);
    if (src != SQLITE_ROW) {
        rc = tq__sqlite_fail_rc(db, src, "reading stats");
        goto done;
    }
    if ((rc = tq__sqlite_query_int(db, S_DONE_SINCE, queue, now - 60000000, &v,
                                   "reading stats")))
        goto done;
    out->done_last_minute = v;
    if (!(s = queue_stmt(db, S_LONGEST, queue, &rc)))
        goto done;
    while ((src = sqlite3_step(s)) == SQLITE_ROW && out->nlongest < 5) {
        size_t i = out->nlongest++;
        out->longest[i].id = sqlite3_column_int64(s, 0);
        snprintf(out->longest[i].worker, sizeof out->longest[i].worker, "%s",
                 (const char *)sqlite3_column_text(s, 1));
        out->longest[i].running_us = now - sqlite3_column_int64(s, 2);
    }
    done_with(s);
done:
    if (own)
        sqlite3_exec(C(db)->h, "COMMIT", NULL, NULL, NULL);
    return rc;
}

/* A row of a count (*id the statement's: only S_COUNT_READY has more
 * than the name and how many). */
static int read_count(tq *db, sqlite3_stmt *s, void *row, void *id)
{
    (void)db;
    tq_count *c = row;
    snprintf(c->name, sizeof c->name, "%s", (const char *)sqlite3_column_text(s, 0));
    c->n = sqlite3_column_int64(s, 1);
    if (*(const enum stmt_id *)id == S_COUNT_READY) {
        c->delayed = sqlite3_column_int64(s, 2);
        c->oldest_due_us = sqlite3_column_int64(s, 3);
    }
    return 0;
}

int tq__sqlite_count_jobs(tq *db, tq_state st, int by_worker, tq_count **out,
                          size_t *out_n)
{
    int rc;
    enum stmt_id id = TQ__COUNT_STMT(st, by_worker);
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    if (id == S_COUNT_READY)
        sqlite3_bind_int64(s, 1, tq__now_us());
    else if (id == S_COUNT_FINISHED)
        sqlite3_bind_text(s, 1, tq_state_name(st), -1, SQLITE_STATIC);
    *out = tq__sqlite_rows(db, s, sizeof **out, read_count, &id, NULL, "counting jobs",
                           out_n, &rc);
    return rc;
}

int tq__sqlite_finished_since(tq *db, tq_state st, int64_t at, int64_t after_id,
                              int64_t upto, size_t limit, tq_finished *out, size_t *out_n)
{
    int rc, src;
    sqlite3_stmt *s = stmt(db, S_FINISHED_SINCE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, tq_state_name(st), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, at);
    sqlite3_bind_int64(s, 3, after_id);
    sqlite3_bind_int64(s, 4, upto);
    sqlite3_bind_int64(s, 5, (sqlite3_int64)limit);
    size_t n = 0;
    while (n < limit && (src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_finished *f = &out[n++];
        f->id = sqlite3_column_int64(s, 0);
        snprintf(f->queue, sizeof f->queue, "%s",
                 (const char *)sqlite3_column_text(s, 1));
        f->state = st;
        f->finished_at = sqlite3_column_int64(s, 2);
        f->duration_us = sqlite3_column_int64(s, 3);
    }
    if (n == limit)
        src = SQLITE_DONE;
    done_with(s);
    if (src != SQLITE_DONE)
        return tq__sqlite_fail_rc(db, src, "reading finished jobs");
    *out_n = n;
    return 0;
}

/* A queue's row of S_ACTIVE; *now_us the time of the count. */
static int read_active(tq *db, sqlite3_stmt *s, void *row, void *now_us)
{
    (void)db;
    tq__active *a = row;
    snprintf(a->queue, sizeof a->queue, "%s", sqlite3_column_text(s, 0));
    a->due = sqlite3_column_int64(s, 1);
    a->delayed = sqlite3_column_int64(s, 2);
    a->running = sqlite3_column_int64(s, 3);
    a->next_due_in_us =
        a->delayed ? sqlite3_column_int64(s, 4) - *(const int64_t *)now_us : 0;
    return 0;
}

int tq__sqlite_active(tq *db, tq__active **out, size_t *out_n)
{
    int rc;
    int64_t now = tq__now_us();
    sqlite3_stmt *s = stmt(db, S_ACTIVE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, now);
    *out = tq__sqlite_rows(db, s, sizeof **out, read_active, &now, NULL,
                           "counting active jobs", out_n, &rc);
    return rc;
}

static int read_duration(tq *db, sqlite3_stmt *s, void *row, void *arg)
{
    (void)db, (void)arg;
    *(int64_t *)row = sqlite3_column_int64(s, 0);
    return 0;
}

int tq__sqlite_durations(tq *db, const char *queue, size_t limit, int64_t **out,
                         size_t *out_n)
{
    int rc;
    sqlite3_stmt *s = queue_stmt(db, S_DURATIONS, queue, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 2, (sqlite3_int64)limit);
    *out = tq__sqlite_rows(db, s, sizeof **out, read_duration, NULL, NULL,
                           "reading durations", out_n, &rc);
    return rc;
}
