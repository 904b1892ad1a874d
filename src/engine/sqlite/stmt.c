/*
 * sqlite/stmt.c - the SQLite engine: statement helpers: errors, preparing and
 * running statements, reading job rows.
 */
#include "sqlite_int.h"

/* clang-format off */
const char *const tq__sqlite_sql_stmt[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    /* begin, commit and rollback inside the caller's transaction */
    [S_SAVEPOINT] = "SAVEPOINT tq_savepoint",
    [S_SAVEPOINT_RELEASE] = "RELEASE tq_savepoint",
    [S_SAVEPOINT_UNDO] = "ROLLBACK TO tq_savepoint",
};
/* clang-format on */

/* ---- errors and statements --------------------------------------------- */

/*
 * Why SQLite found the store read-only, in words an operator can act on:
 * which of the store's files this process may not write. A -shm or -wal
 * file left by a process that could not write the store keeps that mode
 * after the store's own is fixed, and SQLite does not say so.
 */
void tq__sqlite_readonly_why(const char *path, char *buf, size_t len)
{
    static const char *const suffix[] = {"", "-wal", "-shm"};
    char f[4200];
    buf[0] = '\0';
    for (size_t i = 0; i < 3 && path && *path; i++) {
        snprintf(f, sizeof f, "%s%s", path, suffix[i]);
        if (access(f, F_OK) == 0 && access(f, W_OK) != 0) {
            snprintf(buf, len,
                     i ? ": '%s' is not writable by this user (left by a process that "
                         "could not write the store? fix its mode, or remove it while "
                         "no process has the store open)"
                       : ": '%s' is not writable by this user",
                     f);
            return;
        }
    }
}

int tq__sqlite_fail_rc(tq *db, int src, const char *what)
{
    conn *c = C(db);
    const char *msg = c && c->h ? sqlite3_errmsg(c->h) : sqlite3_errstr(src);
    int prim = src & 0xff;
    if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED)
        return tq__seterr(db, TQ_EBUSY, "%s: the store stayed locked for %d ms (%s)",
                          what, c ? c->busy_timeout_ms : 0, msg);
    if (prim == SQLITE_NOMEM)
        return tq__seterr(db, TQ_ENOMEM, "%s: out of memory", what);
    if (prim == SQLITE_TOOBIG)
        return tq__seterr(db, TQ_ETOOBIG, "%s: %s", what, msg);
    /* SQLite says SQLITE_FULL for a full database or journal file, and an
     * I/O error for other writes that found no room (the shared memory). */
    if (prim == SQLITE_FULL ||
        (prim == SQLITE_IOERR && c && c->h && sqlite3_system_errno(c->h) == ENOSPC))
        return tq__seterr(db, TQ_EFULL, "%s: disk full (%s)", what, msg);
    if (strstr(msg, "no such table") || strstr(msg, "no such column"))
        return tq__seterr(db, TQ_ESCHEMA,
                          "%s: the store has no tq schema (%s): run tq init", what, msg);
    if (prim == SQLITE_CONSTRAINT)
        return tq__seterr(db, TQ_EINVAL, "%s: rejected by the store (%s)", what, msg);
    if (prim == SQLITE_READONLY && c && c->h) {
        char why[4600];
        tq__sqlite_readonly_why(sqlite3_db_filename(c->h, "main"), why, sizeof why);
        return tq__seterr(db, TQ_EDB, "%s: %s%s", what, msg, why);
    }
    return tq__seterr(db, TQ_EDB, "%s: %s", what, msg);
}

/* Ends what this handle began (on its own connection: whatever is open).
 * Inside the caller's transaction, back to the savepoint, the caller's
 * transaction still open; never the caller's own transaction. */
void tq__sqlite_rollback(tq *db)
{
    conn *c = C(db);
    const int tx = c->tx;
    c->tx = TX_NONE;
    if (sqlite3_get_autocommit(c->h) || (c->borrowed && tx == TX_NONE))
        return;
    char keep[sizeof db->errmsg];
    memcpy(keep, db->errmsg, sizeof keep); /* keep the first error */
    if (tx != TX_SAVEPOINT)
        exec_id(db, S_ROLLBACK, "rolling back");
    else if (!exec_id(db, S_SAVEPOINT_UNDO, "rolling back"))
        exec_id(db, S_SAVEPOINT_RELEASE, "rolling back");
    memcpy(db->errmsg, keep, sizeof keep);
}

static char *col_strdup(sqlite3_stmt *s, int i)
{
    if (sqlite3_column_type(s, i) == SQLITE_NULL)
        return NULL;
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? tq__strdup((const char *)t) : NULL;
}

/* v with room for element n (of size bytes; *cap allocated), grown by
 * doubling from 8: NULL with TQ_ENOMEM in *rc, v left as it was. */
void *tq__sqlite_grow(tq *db, void *v, size_t n, size_t *cap, size_t size, int *rc)
{
    if (n < *cap)
        return v;
    size_t want = *cap ? *cap * 2 : 8;
    void *nv = realloc(v, want * size);
    if (!nv) {
        *rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        return NULL;
    }
    *cap = want;
    return nv;
}

/* Steps s (the statement stmt gave: NULL, its error already in *rc) to the
 * end, one element of size bytes a row, zeroed, then filled by fill(db, s,
 * element, arg), into a new array (of *out_n; NULL when there are none),
 * which it returns. On failure: NULL, the error in *rc, and
 * free_rows(array, rows filled or being filled) has released what the rows
 * hold and the array (NULL: free it). */
void *tq__sqlite_rows(tq *db, sqlite3_stmt *s, size_t size, tq__sqlite_fill fill,
                      void *arg, void (*free_rows)(void *v, size_t n), const char *what,
                      size_t *out_n, int *rc)
{
    int src = SQLITE_DONE;
    size_t n = 0, cap = 0;
    char *v = NULL;
    if (!s)
        return NULL;
    *rc = 0;
    while (!*rc && (src = sqlite3_step(s)) == SQLITE_ROW) {
        char *nv = tq__sqlite_grow(db, v, n, &cap, size, rc);
        if (!nv)
            break;
        v = nv;
        memset(v + n * size, 0, size);
        *rc = fill(db, s, v + n++ * size, arg);
    }
    if (!*rc && src != SQLITE_DONE)
        *rc = tq__sqlite_fail_rc(db, src, what);
    done_with(s);
    if (*rc) {
        if (free_rows)
            free_rows(v, n);
        else
            free(v);
        return NULL;
    }
    *out_n = n;
    return v;
}

/* ---- jobs -------------------------------------------------------------- */

static char *col_strdup_or(sqlite3_stmt *s, int i, const char *known)
{
    return i < 0 ? tq__strdup(known) : col_strdup(s, i);
}

/* Reads a job row (where c says; a claimed one on queue by worker) into j
 * (zeroed by the caller). */
static int read_job(tq *db, sqlite3_stmt *s, const tq__job_cols *c, const char *queue,
                    const char *worker, tq_job *j)
{
    j->id = sqlite3_column_int64(s, c->id);
    j->queue = col_strdup_or(s, c->queue, queue);
    const void *p = sqlite3_column_blob(s, c->payload);
    j->payload_len = (size_t)sqlite3_column_bytes(s, c->payload);
    j->payload = tq__memdup(p, j->payload_len, 1);
    if (c->state < 0) {
        j->state = TQ_RUNNING;
    } else {
        tq_state st = TQ_READY;
        tq_state_parse(&st, (const char *)sqlite3_column_text(s, c->state));
        j->state = st;
    }
    j->priority = sqlite3_column_int(s, c->priority);
    j->attempts = sqlite3_column_int(s, c->attempts);
    j->max_attempts = sqlite3_column_int(s, c->max_attempts);
    j->key = col_strdup(s, c->key);
    j->worker = col_strdup_or(s, c->worker, worker);
    j->last_error = col_strdup(s, c->last_error);
    j->created_at = sqlite3_column_int64(s, c->created_at);
    j->run_at = sqlite3_column_int64(s, c->run_at);
    j->started_at = sqlite3_column_int64(s, c->started_at);
    j->finished_at = c->finished_at < 0 ? 0 : sqlite3_column_int64(s, c->finished_at);
    j->lease_until = sqlite3_column_int64(s, c->lease_until);
    j->claim = sqlite3_column_int64(s, c->claim);
    j->traceparent = col_strdup(s, c->traceparent);
    j->group = col_strdup(s, c->group);
    j->snoozes = sqlite3_column_int(s, c->snoozes);
    j->progress = c->progress < 0 || sqlite3_column_type(s, c->progress) == SQLITE_NULL
                      ? -1
                      : sqlite3_column_int(s, c->progress);
    j->progress_text = c->progress_text < 0 ? NULL : col_strdup(s, c->progress_text);
    j->result_len =
        c->result_len < 0 || sqlite3_column_type(s, c->result_len) == SQLITE_NULL
            ? -1
            : sqlite3_column_int64(s, c->result_len);
    j->nparents = sqlite3_column_int64(s, c->nparents);
    j->waiting_for = c->waiting_for < 0 ? 0 : sqlite3_column_int64(s, c->waiting_for);
    j->timeout_us = sqlite3_column_int64(s, c->timeout); /* NULL: 0, its queue's */
    if (!j->queue || !j->payload ||
        (c->progress_text >= 0 &&
         sqlite3_column_type(s, c->progress_text) != SQLITE_NULL && !j->progress_text) ||
        (sqlite3_column_type(s, c->traceparent) != SQLITE_NULL && !j->traceparent) ||
        (sqlite3_column_type(s, c->group) != SQLITE_NULL && !j->group) ||
        (sqlite3_column_type(s, c->key) != SQLITE_NULL && !j->key) ||
        (c->worker < 0
             ? !j->worker
             : sqlite3_column_type(s, c->worker) != SQLITE_NULL && !j->worker) ||
        (sqlite3_column_type(s, c->last_error) != SQLITE_NULL && !j->last_error))
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    return 0;
}

/* Steps s to the end, appending every row to the job array *out of *out_n
 * (NULL and 0 for a new one). On failure the array is as it was. */
int tq__sqlite_collect_jobs(tq *db, sqlite3_stmt *s, const tq__job_cols *c,
                            const char *queue, const char *worker, const char *what,
                            tq_job **out, size_t *out_n)
{
    size_t n = *out_n, cap = *out_n;
    tq_job *v = *out;
    int src, rc = 0;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_job *nv = tq__sqlite_grow(db, v, n, &cap, sizeof *v, &rc);
        if (!nv)
            break;
        v = *out = nv; /* perhaps moved: the caller's array is this one now */
        memset(&v[n], 0, sizeof v[n]);
        rc = read_job(db, s, c, queue, worker, &v[n++]);
        if (rc)
            break;
    }
    if (!rc && src != SQLITE_DONE)
        rc = tq__sqlite_fail_rc(db, src, what);
    done_with(s);
    if (rc) { /* the rows this call added go; the array and those before stay */
        for (size_t i = *out_n; i < n; i++)
            tq__job_clear(&v[i]);
        return rc;
    }
    *out_n = n;
    return 0;
}

/* Runs a one-row, one-integer query with ?1 text (or NULL) and ?2 int64. */
int tq__sqlite_query_int(tq *db, enum stmt_id id, const char *t1, int64_t i2,
                         int64_t *out, const char *what)
{
    int rc;
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    bind_text(s, 1, t1);
    if (sqlite3_bind_parameter_count(s) >= 2)
        sqlite3_bind_int64(s, 2, i2);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (src == SQLITE_DONE)
        *out = 0;
    else
        rc = tq__sqlite_fail_rc(db, src, what);
    done_with(s);
    return rc;
}

const char *tq__sqlite_sql(enum stmt_id id)
{
#define SQLITE_SQL_TABLE(file) tq__sqlite_sql_##file,
    static const char *const *const tables[] = {SQLITE_SQL_FILES(SQLITE_SQL_TABLE)};
    return tq__sql_find(tables, sizeof tables / sizeof *tables, (int)id);
}
