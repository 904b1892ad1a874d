/*
 * postgres/stmt.c - the PostgreSQL engine: statement helpers: errors, preparing and
 * running statements, reading job rows.
 */
#include "pg_int.h"

/* clang-format off */

/* A binary timestamptz is int8 microseconds since 2000-01-01 UTC; the API
 * counts from 1970 (NULL stays 0). Reading it as it is spares the server a
 * numeric extract(epoch) per column and row. */
#define PG_EPOCH_US 946684800000000LL

/* clang-format on */

/* ---- errors ------------------------------------------------------------ */

static int classify(PGconn *pg, const PGresult *r)
{
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    /*
     * Every error the server sends carries a SQLSTATE; one without it is
     * libpq's own, which after connecting means the connection is gone or out
     * of step. libpq does not always say so in PQstatus: a backend killed by
     * an immediate shutdown can leave CONNECTION_OK with "server closed the
     * connection unexpectedly". Either way the cure is a new connection.
     */
    if (PQstatus(pg) != CONNECTION_OK || !st)
        return TQ_ECONN;
    if (strcmp(st, "40001") == 0 || strcmp(st, "40P01") == 0 || strcmp(st, "55P03") == 0)
        return TQ_EBUSY;
    if (strncmp(st, "08", 2) == 0 || strcmp(st, "57P01") == 0 ||
        strcmp(st, "57P02") == 0 || strcmp(st, "57P03") == 0)
        return TQ_ECONN;
    if (strcmp(st, "42P01") == 0 || strcmp(st, "3F000") == 0 || strcmp(st, "42883") == 0)
        return TQ_ESCHEMA;
    if (strncmp(st, "23", 2) == 0 || strncmp(st, "22", 2) == 0)
        return TQ_EINVAL;
    if (strcmp(st, "53200") == 0)
        return TQ_ENOMEM;
    if (strcmp(st, "53100") == 0)
        return TQ_EFULL;
    return TQ_EDB;
}

/* Sets db's message from a failed result (or the connection) and returns
 * the code. Messages never contain the URL's password. */
int tq__pg_fail_res(tq *db, PGresult *r, const char *what)
{
    conn *c = C(db);
    if (c->hung) {
        PQclear(r);
        return tq__seterr(
            db, TQ_ECONN,
            "%s: no answer from %s within %.1f s; the connection was dropped", what,
            tq__pg_where(c), (double)c->wait_us / 1e6);
    }
    int code = classify(c->pg, r);
    const char *msg = r ? PQresultErrorMessage(r) : "";
    if (!msg || !*msg)
        msg = PQerrorMessage(c->pg);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        n--;
    if (code == TQ_ESCHEMA)
        tq__seterr(db, code, "%s: the store has no tq schema '%s' (%.*s): run tq init",
                   what, c->schema, (int)n, msg);
    else if (code == TQ_ECONN)
        tq__seterr(db, code, "%s: lost the connection to %s: %.*s", what, tq__pg_where(c),
                   (int)n, msg);
    else if (code == TQ_EFULL)
        tq__seterr(db, code, "%s: disk full on the server (%.*s)", what, (int)n, msg);
    else
        tq__seterr(db, code, "%s: %.*s", what, (int)n, msg);
    PQclear(r);
    return code;
}

/* ---- waiting for the server ---------------------------------------------- */

/*
 * libpq's blocking calls wait forever on a connection that hangs without
 * closing (a silent network, a stopped proxy), and TCP keepalives do not
 * help while the peer's kernel still answers. So every wait for a result
 * goes through get_result: with a wait limit set, a server silent for
 * longer is taken as gone. The socket is shut down, so that libpq sees the
 * connection end and no later call on it blocks, and fail_res reports
 * TQ_ECONN: the worker reconnects, as after any lost connection.
 */
static void await_result(tq *db)
{
    conn *c = C(db);
    if (c->wait_us <= 0 || c->hung)
        return;
    /* Silence, not the whole answer, is timed: the deadline moves on with
     * every arrival. PQconsumeInput before each poll also takes what TLS
     * has already buffered, which the socket would not show; a result
     * already read costs no system call. */
    int64_t deadline = tq__mono_us() + c->wait_us;
    while (PQisBusy(c->pg) && PQconsumeInput(c->pg) && PQisBusy(c->pg)) {
        int64_t left = deadline - tq__mono_us();
        if (left <= 0) {
            c->hung = 1;
            shutdown(PQsocket(c->pg), SHUT_RDWR);
            PQconsumeInput(c->pg);
            return;
        }
        struct pollfd p = {.fd = PQsocket(c->pg), .events = POLLIN};
        int n = poll(&p, 1, (int)((left + 999) / 1000));
        if (n < 0 && errno != EINTR)
            return; /* PQgetResult says what failed */
        if (n > 0)
            deadline = tq__mono_us() + c->wait_us;
    }
    /* A result is complete, or PQconsumeInput failed (the connection is
     * gone: PQgetResult says so). */
}

/* PQgetResult within the wait limit; NULL after a hang, as at the end. */
PGresult *tq__pg_get_result(tq *db)
{
    await_result(db);
    return C(db)->hung ? NULL : PQgetResult(C(db)->pg);
}

/* What PQexec and its kind return, for a command sent with PQsend* (sent:
 * what that returned): the first error, else the last result. NULL when
 * sending failed or the server did not answer in time. */
PGresult *tq__pg_exec_result(tq *db, int sent)
{
    PGresult *keep = NULL, *r;
    if (!sent)
        return NULL;
    while ((r = tq__pg_get_result(db))) {
        if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
            PQclear(r);
            continue;
        }
        PQclear(keep);
        keep = r;
    }
    if (C(db)->hung) {
        PQclear(keep);
        return NULL;
    }
    return keep;
}

/* ---- statements -------------------------------------------------------- */

/* sql with every "TQ." replaced by "<schema>."; malloc'd. */
char *tq__pg_with_schema(const char *text, const char *schema)
{
    size_t sl = strlen(schema), n = 0;
    for (const char *p = text; (p = strstr(p, "TQ.")); p += 3)
        n++;
    char *out = malloc(strlen(text) + n * sl + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = text;;) {
        const char *hit = strstr(p, "TQ.");
        size_t k = hit ? (size_t)(hit - p) : strlen(p);
        memcpy(o, p, k);
        o += k;
        if (!hit)
            break;
        memcpy(o, schema, sl);
        o += sl;
        *o++ = '.';
        p = hit + 3;
    }
    *o = '\0';
    return out;
}

/* Prepares statement id on this connection, once; behind a pooler in
 * transaction mode, only its text (tq__pg_send sends it whole). */
int tq__pg_prepare(tq *db, enum stmt_id id, const char *what)
{
    conn *c = C(db);
    char name[24];
    if (c->prepared[id])
        return 0;
    if (c->pooled) { /* nothing named: the text, kept, is sent whole each time */
        if (!c->text[id] &&
            !(c->text[id] = tq__pg_with_schema(tq__pg_sql(id), c->schema)))
            return tq__seterr(db, TQ_ENOMEM, "out of memory");
        c->prepared[id] = 1;
        return 0;
    }
    char *text = tq__pg_with_schema(tq__pg_sql(id), c->schema);
    if (!text)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    stmt_name(C(db), name, id);
    PGresult *r = tq__pg_exec_result(db, PQsendPrepare(c->pg, name, text, 0, NULL));
    free(text);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return tq__pg_fail_res(db, r, what);
    PQclear(r);
    c->prepared[id] = 1;
    return 0;
}

/* Sends prepared statement id with p (may be NULL), results in binary: by
 * its name, or behind a pooler as an unnamed statement. PQsend*'s answer. */
int tq__pg_send(tq *db, enum stmt_id id, const params *p)
{
    conn *c = C(db);
    const int n = p ? p->n : 0;
    const char *const *v = p ? p->v : NULL;
    const int *len = p ? p->len : NULL, *fmt = p ? p->fmt : NULL;
    if (c->pooled)
        return PQsendQueryParams(c->pg, c->text[id], n, NULL, v, len, fmt, 1);
    char name[24];
    stmt_name(c, name, id);
    return PQsendQueryPrepared(c->pg, name, n, v, len, fmt, 1);
}

PGresult *tq__pg_run(tq *db, enum stmt_id id, const params *p, int *rc, const char *what)
{
    if ((*rc = tq__pg_prepare(db, id, what)))
        return NULL;
    PGresult *r = tq__pg_exec_result(db, tq__pg_send(db, id, p));
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        *rc = tq__pg_fail_res(db, r, what);
        return NULL;
    }
    *rc = 0;
    return r;
}

/* Runs text and drops its answer: what the caller does next does not
 * depend on it (db's message keeps a failure). */
static void quiet(tq *db, const char *text)
{
    PQclear(tq__pg_exec_result(db, PQsendQuery(C(db)->pg, text)));
}

/*
 * Forgets the statements this handle prepared, to be prepared again: all of
 * the session's on tq's own connection (DEALLOCATE ALL), only its own on
 * the caller's. There, inside the caller's transaction, under a savepoint
 * (a name the caller deallocated must not abort the caller's transaction),
 * and not at all when the connection cannot take a statement now (a failed
 * transaction, a query of the caller's under way, lost): then they go with
 * the session.
 */
void tq__pg_unprepare(tq *db)
{
    conn *c = C(db);
    const PGTransactionStatusType t = PQtransactionStatus(c->pg);
    if (c->pooled) {
        /* nothing named on any session */
    } else if (!c->borrowed) {
        quiet(db, "DEALLOCATE ALL");
    } else if (t == PQTRANS_IDLE || t == PQTRANS_INTRANS) {
        char text[48] = "DEALLOCATE ";
        if (t == PQTRANS_INTRANS)
            quiet(db, "SAVEPOINT tq_unprepare");
        for (int id = 0; id < S_COUNT; id++)
            if (c->prepared[id]) {
                stmt_name(c, text + 11, (enum stmt_id)id);
                quiet(db, text);
            }
        if (t == PQTRANS_INTRANS)
            quiet(db, PQtransactionStatus(c->pg) == PQTRANS_INERROR
                          ? "ROLLBACK TO SAVEPOINT tq_unprepare;"
                            " RELEASE SAVEPOINT tq_unprepare"
                          : "RELEASE SAVEPOINT tq_unprepare");
    }
    memset(c->prepared, 0, sizeof c->prepared);
}

/* Runs statement id for one number into *out (may be NULL): the first
 * row's first column (0 with no row) when row, else the rows it changed. */
static int run_i64(tq *db, enum stmt_id id, const params *p, int64_t *out, int row,
                   const char *what)
{
    int rc;
    PGresult *r = tq__pg_run(db, id, p, &rc, what);
    if (!r)
        return rc;
    if (out && row)
        *out = PQntuples(r) ? g_i64(r, 0, 0) : 0;
    else if (out)
        *out = strtoll(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return 0;
}

/* Runs and discards; *changed gets the affected row count. */
int tq__pg_run_count(tq *db, enum stmt_id id, const params *p, int64_t *changed,
                     const char *what)
{
    return run_i64(db, id, p, changed, 0, what);
}

/* One row, one int8/bool column. */
int tq__pg_query_i64(tq *db, enum stmt_id id, const params *p, int64_t *out,
                     const char *what)
{
    return run_i64(db, id, p, out, 1, what);
}

int tq__pg_simple(tq *db, const char *text, const char *what)
{
    PGresult *r = tq__pg_exec_result(db, PQsendQuery(C(db)->pg, text));
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        return tq__pg_fail_res(db, r, what);
    PQclear(r);
    return 0;
}

/* Ends what this handle began (on tq's own connection: whatever is open).
 * Inside the caller's transaction, back to the savepoint, the caller's
 * transaction still open; never the caller's own transaction. */
void tq__pg_rollback(tq *db)
{
    conn *c = C(db);
    const int tx = c->tx;
    c->tx = TX_NONE;
    if (PQtransactionStatus(c->pg) == PQTRANS_IDLE || (c->borrowed && tx == TX_NONE))
        return;
    char keep[sizeof db->errmsg];
    memcpy(keep, db->errmsg, sizeof keep);
    const char *sql = tx == TX_SAVEPOINT ? "ROLLBACK TO SAVEPOINT tq_savepoint;"
                                           " RELEASE SAVEPOINT tq_savepoint"
                                         : "ROLLBACK";
    quiet(db, sql);
    memcpy(db->errmsg, keep, sizeof keep);
}

/* Runs statement id and reads its rows, one element of size bytes a row,
 * filled by fill(db, r, row, element, arg), into a new array (of *out_n;
 * zeroed, with room for one more), which it returns. On failure: NULL, the
 * error in *rc, and free_rows(array, rows) has released what the rows hold
 * and the array (NULL: free it). */
void *tq__pg_rows(tq *db, enum stmt_id id, const params *p, const char *what, size_t size,
                  tq__pg_fill fill, void *arg, void (*free_rows)(void *v, size_t n),
                  size_t *out_n, int *rc)
{
    PGresult *r = tq__pg_run(db, id, p, rc, what);
    if (!r)
        return NULL;
    const int n = PQntuples(r);
    char *v = calloc((size_t)n + 1, size);
    if (!v)
        *rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
    for (int i = 0; i < n && !*rc; i++)
        *rc = fill(db, r, i, v + (size_t)i * size, arg);
    PQclear(r);
    if (*rc) {
        if (free_rows)
            free_rows(v, (size_t)n);
        else
            free(v);
        return NULL;
    }
    *out_n = (size_t)n;
    return v;
}

/* ---- binary columns ------------------------------------------------------ */

static int64_t g_time(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : g_i64(r, row, col) + PG_EPOCH_US;
}

static char *g_str(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return NULL;
    return tq__memdup(PQgetvalue(r, row, col), (size_t)PQgetlength(r, row, col), 1);
}

/* ---- jobs ---------------------------------------------------------------- */

static char *g_str_or(const PGresult *r, int row, int col, const char *known)
{
    return col < 0 ? tq__strdup(known) : g_str(r, row, col);
}

/* Appends the jobs in the rows of r (JOB_COLS, or CLAIMED_COLS of a claim
 * on queue by worker) to the array *out of *out_n (NULL and 0 for a new
 * one); frees r. On failure the array is as it was. */
int tq__pg_read_jobs(tq *db, PGresult *r, const tq__job_cols *c, const char *queue,
                     const char *worker, tq_job **out, size_t *out_n)
{
    const size_t n = (size_t)PQntuples(r), base = *out_n;
    if (n == 0) { /* like SQLite: no rows, no new array */
        PQclear(r);
        return 0;
    }
    tq_job *v = realloc(*out, (base + n + 1) * sizeof *v);
    if (!v) {
        PQclear(r);
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    }
    *out = v;
    memset(v + base, 0, (n + 1) * sizeof *v);
    for (int i = 0; i < (int)n; i++) {
        tq_job *j = &v[base + (size_t)i];
        j->id = g_i64(r, i, c->id);
        j->queue = g_str_or(r, i, c->queue, queue);
        j->payload_len = (size_t)PQgetlength(r, i, c->payload);
        j->payload = tq__memdup(PQgetvalue(r, i, c->payload), j->payload_len, 1);
        if (c->state < 0) {
            j->state = TQ_RUNNING;
        } else {
            tq_state st = TQ_READY;
            char state[16];
            g_strbuf(r, i, c->state, state, sizeof state);
            tq_state_parse(&st, state);
            j->state = st;
        }
        j->priority = (int)g_i64(r, i, c->priority);
        j->attempts = (int)g_i64(r, i, c->attempts);
        j->max_attempts = (int)g_i64(r, i, c->max_attempts);
        j->key = g_str(r, i, c->key);
        j->worker = g_str_or(r, i, c->worker, worker);
        j->last_error = g_str(r, i, c->last_error);
        j->created_at = g_time(r, i, c->created_at);
        j->run_at = g_time(r, i, c->run_at);
        j->started_at = g_time(r, i, c->started_at);
        j->finished_at = c->finished_at < 0 ? 0 : g_time(r, i, c->finished_at);
        j->lease_until = g_time(r, i, c->lease_until);
        j->claim = g_i64(r, i, c->claim);
        j->traceparent = g_str(r, i, c->traceparent);
        j->group = g_str(r, i, c->group);
        j->snoozes = (int)g_i64(r, i, c->snoozes);
        j->progress = c->progress < 0 || PQgetisnull(r, i, c->progress)
                          ? -1
                          : (int)g_i64(r, i, c->progress);
        j->progress_text = c->progress_text < 0 ? NULL : g_str(r, i, c->progress_text);
        j->nparents = g_i64(r, i, c->nparents);
        j->waiting_for = c->waiting_for < 0 ? 0 : g_i64(r, i, c->waiting_for);
        j->timeout_us = g_i64(r, i, c->timeout); /* NULL: 0, its queue's */
        j->result_len = c->result_len < 0 || PQgetisnull(r, i, c->result_len)
                            ? -1
                            : g_i64(r, i, c->result_len);
        if (!j->queue || !j->payload || (!PQgetisnull(r, i, c->key) && !j->key) ||
            (c->progress_text >= 0 && !PQgetisnull(r, i, c->progress_text) &&
             !j->progress_text) ||
            (!PQgetisnull(r, i, c->traceparent) && !j->traceparent) ||
            (!PQgetisnull(r, i, c->group) && !j->group) ||
            (c->worker >= 0 && !PQgetisnull(r, i, c->worker) && !j->worker) ||
            (c->worker < 0 && !j->worker) ||
            (!PQgetisnull(r, i, c->last_error) && !j->last_error)) {
            PQclear(r);
            for (size_t k = base; k <= base + (size_t)i; k++)
                tq__job_clear(&v[k]);
            return tq__seterr(db, TQ_ENOMEM, "out of memory");
        }
    }
    PQclear(r);
    *out_n = base + n;
    return 0;
}

const char *tq__pg_sql(enum stmt_id id)
{
#define PG_SQL_TABLE(file) tq__pg_sql_##file,
    static const char *const *const tables[] = {PG_SQL_FILES(PG_SQL_TABLE)};
    return tq__sql_find(tables, sizeof tables / sizeof *tables, (int)id);
}
