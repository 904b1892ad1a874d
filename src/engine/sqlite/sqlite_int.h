/*
 * sqlite_int.h - what the files of the SQLite engine share: its statements' ids,
 * its connection, and the helpers that run statements. Private to sqlite/.
 */
#ifndef TQ_ENGINE_SQLITE_INT_H
#define TQ_ENGINE_SQLITE_INT_H

#define _DEFAULT_SOURCE
#include "../engine.h"

#include <sqlite3.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* clang-format off */
/* A job is out of attempts when it has started as many as it may; inc is
 * what the statement adds to attempts meanwhile. */
#define OUT_OF_ATTEMPTS(inc)                                                             \
    "attempts + " inc " >= COALESCE(max_attempts, (SELECT q.max_attempts FROM"          \
    " tq_queues q WHERE q.name = tq_jobs.queue), 3)"

/* A queue's rate-limit bucket (migration 10): its tokens now (?2), and
 * how many it gains a microsecond. */
#define RATE_REFILL                                                                      \
    "(max(rate_limit - rate_burst, 1) * 1.0 / (rate_period_us + 10000))"

#define RATE_TOKENS_AT(now)                                                              \
    "min(rate_burst, rate_tokens + max(0, " now " - rate_at) * " RATE_REFILL ")"
/* clang-format on */

_Static_assert(TQ__RATE_MARGIN_US == 10000, "RATE_REFILL spells out the margin");

/* The ids of the prepared statements: engine.h's lists, then this engine's own
 * (each one's text is in the file of its concern: see the tables below). */
/* clang-format off */
enum stmt_id {
    TQ__CLAIM_STMTS(TQ__CLAIM_STMT_ID)
    TQ__SHARED_STMTS(TQ__STMT_ID)
    /* This engine's own: */
    S_BEGIN,
    S_COMMIT,
    S_SAVEPOINT,
    S_SAVEPOINT_RELEASE,
    S_SAVEPOINT_UNDO,
    S_ENQUEUED,
    S_BARRIER,
    S_ROLLBACK,
    S_CLAIM_MARK,
    S_DONE,
    S_DONE_DELETE,
    S_DONE_RESULT,
    S_RELEASE,
    S_BEAT,
    S_ENQUEUE,
    S_REPLACE,
    S_EXPIRE_UKEY,
    S_JOB_FINISHED_AT,
    S_RETIRE_PICK,
    S_LIFO_INDEX,
    S_LIFO_INDEX_DROP,
    S_GROUP_INDEX,
    S_GROUP_INDEX_DROP,
    S_INDEXES_NEEDED,
    S_DATA_VERSION,
    S_JOBS_SEQ,
    S_SCHEDULE_MOVE,
    S_SCHEDULE_BUSY,
    S_SCHEDULE_ENQUEUE,
    S_SCHEDULE_JOB,
    S_DEPS_ANY,
    S_DEPS_RELEASE,
    S_DEPS_END_COUNT,
    S_DEPS_END_MARK,
    S_DEPS_END_RECOUNT,
    S_DEPS_END_UNMARK,
    S_DEPS_CANCEL,
    S_DEPS_RESTORE,
    S_DEPS_DROP,
    S_DEPS_DEAD_SINCE,
    S_DEPS_DEAD_PARENTS,
    S_DEPS_GC,
    S_COUNT
};
/* clang-format on */

typedef struct conn {
    sqlite3 *h;
    tq *db;
    /* h is the caller's (tq_open_opts.conn): left open, its settings left
     * alone. tx: what this handle has begun and not yet ended (begin), so
     * that a rollback on the caller's connection undoes only that. */
    int borrowed;
    enum { TX_NONE, TX_OWN, TX_SAVEPOINT } tx;
    int busy_timeout_ms;
    int64_t busy_started; /* monotonic, when the current wait began */
    sqlite3_stmt *stmt[S_COUNT];
    dev_t dev; /* the store file opened (sqlite_same_store) */
    ino_t ino;
    /* Wake-ups (sqlite_listen): the inotify descriptor watching the -wal
     * file, what was last seen of other connections' commits and inserts,
     * and the next look when a write was not visible yet. */
    int notify_fd, notify_wd;
    int64_t seen_version, seen_seq;
    int64_t look_at; /* monotonic; 0: none due */
    int look_step;
} conn;

/* clang-format off */
#define C(db) ((conn *)(db)->conn)
/* clang-format on */

/* A stack of job ids, for rules that pass from a job to its children. */
typedef struct idstack {
    int64_t *v;
    size_t n, cap;
} idstack;

/* The files that hold statements: each one's tq__sqlite_sql_<file>, by
 * stmt_id (NULL: another file's), and the text of statement id, wherever
 * it is. A new file with statements is added here. */
/* clang-format off */
#define SQLITE_SQL_FILES(X) \
    X(ack) X(admin) X(claim) X(cron) X(deps) X(enqueue) X(schema) X(sqlite) X(stats) \
    X(stmt)
/* clang-format on */
#define SQLITE_SQL_DECLARE(file) extern const char *const tq__sqlite_sql_##file[S_COUNT];
SQLITE_SQL_FILES(SQLITE_SQL_DECLARE)
const char *tq__sqlite_sql(enum stmt_id id);

void tq__sqlite_readonly_why(const char *path, char *buf, size_t len);
int tq__sqlite_fail_rc(tq *db, int src, const char *what);
void tq__sqlite_rollback(tq *db);
int tq__sqlite_schema_version(tq *db, int *version);
int tq__sqlite_sync_indexes(tq *db);
int tq__sqlite_init(tq *db, const tq_grant *grants, size_t n, int *found);
void *tq__sqlite_grow(tq *db, void *v, size_t n, size_t *cap, size_t size, int *rc);
/* Fills one element of a tq__sqlite_rows array from the row s is on. */
typedef int (*tq__sqlite_fill)(tq *db, sqlite3_stmt *s, void *row, void *arg);
void *tq__sqlite_rows(tq *db, sqlite3_stmt *s, size_t size, tq__sqlite_fill fill,
                      void *arg, void (*free_rows)(void *v, size_t n), const char *what,
                      size_t *out_n, int *rc);
int tq__sqlite_queue_set(tq *db, const char *name, const tq_queue_opts *o);
int tq__sqlite_queue_get(tq *db, const char *name, tq_queue_info *out);
int tq__sqlite_queue_list(tq *db, tq_queue_info **out, size_t *out_n);
int tq__sqlite_enqueue(tq *db, const char *queue, const tq_payload *items, size_t n,
                       const tq_enqueue_opts *o, int64_t *ids, int *dup);
int tq__sqlite_collect_jobs(tq *db, sqlite3_stmt *s, const tq__job_cols *c,
                            const char *queue, const char *worker, const char *what,
                            tq_job **out, size_t *out_n);
int tq__sqlite_deps_any(tq *db, int *any);
int tq__sqlite_push_returned(tq *db, sqlite3_stmt *s, idstack *st, const char *what);
int tq__sqlite_deps_cancel(tq *db, int64_t id, int64_t now);
int tq__sqlite_deps_restore(tq *db, int64_t id, int64_t now);
int tq__sqlite_deps_settle(tq *db, const tq__ack *acks, size_t nacks, int64_t now);
int tq__sqlite_deps_cancel_each(tq *db, sqlite3_stmt *s, int64_t now);
int tq__sqlite_apply_ack(tq *db, const char *worker, tq__ack *a, int64_t now,
                         int64_t waited);
enum stmt_id tq__sqlite_claim_id(tq_order order, enum tq__claim_kind kind);
int tq__sqlite_exchange(tq *db, const char *worker, tq__ack *acks, size_t nacks,
                        tq__claim *claim, tq_job **out, size_t *out_n);
int tq__sqlite_rescue(tq *db, const char *worker, int64_t since, int64_t *count);
int tq__sqlite_query_int(tq *db, enum stmt_id id, const char *t1, int64_t i2,
                         int64_t *out, const char *what);
int tq__sqlite_pending(tq *db, const char *queue, int *out);
int tq__sqlite_pending_due(tq *db, const char *queue, int *out);
int tq__sqlite_peek(tq *db, const char *queue, int64_t *due_in, int64_t *lease_in);
int tq__sqlite_job_get(tq *db, int64_t id, tq_job **out);
int tq__sqlite_job_result(tq *db, int64_t id, void **out, size_t *len, int *state);
int tq__sqlite_job_list(tq *db, const tq_list_opts *o, tq_job **out, size_t *out_n);
int tq__sqlite_job_parents(tq *db, int64_t id, tq_parent **out, size_t *out_n);
int tq__sqlite_state_of(tq *db, int64_t id, int *state);
int tq__sqlite_job_retry(tq *db, const int64_t *ids, size_t n, const char *queue,
                         int64_t *count, size_t *bad, int *state);
int tq__sqlite_job_cancel(tq *db, const int64_t *ids, size_t n, int64_t *count,
                          size_t *bad, int *state);
int tq__sqlite_retire(tq *db, const char *queue, const int64_t keep[TQ_STATE_COUNT],
                      int64_t after[TQ_STATE_COUNT], int64_t limit,
                      int64_t count[TQ_STATE_COUNT]);
int tq__sqlite_prune(tq *db, int64_t older_than_us, unsigned mask, int64_t limit,
                     int64_t *count);
int tq__sqlite_stats(tq *db, const char *queue, tq_stats *out);
int tq__sqlite_count_jobs(tq *db, tq_state st, int by_worker, tq_count **out,
                          size_t *out_n);
int tq__sqlite_finished_since(tq *db, tq_state st, int64_t at, int64_t after_id,
                              int64_t upto, size_t limit, tq_finished *out,
                              size_t *out_n);
int tq__sqlite_active(tq *db, tq__active **out, size_t *out_n);
int tq__sqlite_durations(tq *db, const char *queue, size_t limit, int64_t **out,
                         size_t *out_n);
int tq__sqlite_worker_register(tq *db, tq_worker_info *w, const tq_worker_info *expect,
                               tq_worker_info *holder);
int tq__sqlite_worker_beat(tq *db, const tq_worker_info *me);
int tq__sqlite_worker_stop(tq *db, const tq_worker_info *me);
int tq__sqlite_worker_list(tq *db, tq_worker_info **out, size_t *out_n);
int tq__sqlite_worker_prune(tq *db, int64_t older_than_us, int64_t *count);
int tq__sqlite_schedule_put(tq *db, const char *name, const tq_schedule_opts *o,
                            int64_t next_us);
int tq__sqlite_schedule_remove(tq *db, const char *name);
int tq__sqlite_schedule_list(tq *db, tq_schedule **out, size_t *out_n);
int tq__sqlite_schedule_fire(tq *db, const tq_schedule *sc, int64_t slot_us,
                             int64_t next_us, int64_t *job);

/* The prepared statement for id, reset and with no bindings. */
static inline sqlite3_stmt *stmt(tq *db, enum stmt_id id, int *rc)
{
    conn *c = C(db);
    if (!c->stmt[id]) {
        int src = sqlite3_prepare_v3(c->h, tq__sqlite_sql(id), -1,
                                     SQLITE_PREPARE_PERSISTENT, &c->stmt[id], NULL);
        if (src != SQLITE_OK) {
            *rc = tq__sqlite_fail_rc(db, src, "preparing a statement");
            return NULL;
        }
    }
    *rc = 0;
    return c->stmt[id];
}

static inline void done_with(sqlite3_stmt *s)
{
    if (s) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
}

/* Runs a statement that returns no rows. */
static inline int run(tq *db, sqlite3_stmt *s, const char *what)
{
    int src = sqlite3_step(s);
    int rc =
        src == SQLITE_DONE || src == SQLITE_ROW ? 0 : tq__sqlite_fail_rc(db, src, what);
    done_with(s);
    return rc;
}

static inline int exec_id(tq *db, enum stmt_id id, const char *what)
{
    int rc;
    sqlite3_stmt *s = stmt(db, id, &rc);
    return s ? run(db, s, what) : rc;
}

/* A write transaction: BEGIN IMMEDIATE, or, on the caller's connection
 * while the caller has one open, a savepoint inside it, which commits
 * nothing (the caller's COMMIT does). */
static inline int begin(tq *db)
{
    conn *c = C(db);
    c->tx = c->borrowed && !sqlite3_get_autocommit(c->h) ? TX_SAVEPOINT : TX_OWN;
    return exec_id(db, c->tx == TX_SAVEPOINT ? S_SAVEPOINT : S_BEGIN,
                   "starting a transaction");
}

static inline int commit(tq *db)
{
    conn *c = C(db);
    int rc =
        exec_id(db, c->tx == TX_SAVEPOINT ? S_SAVEPOINT_RELEASE : S_COMMIT, "committing");
    if (!rc)
        c->tx = TX_NONE;
    return rc;
}

/* Binds text, or NULL when s is NULL. */
static inline void bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

#endif /* TQ_ENGINE_SQLITE_INT_H */
