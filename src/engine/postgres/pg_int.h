/*
 * pg_int.h - what the files of the PostgreSQL engine share: its statements' ids,
 * its connection, and the helpers that run statements. Private to postgres/.
 */
#ifndef TQ_ENGINE_PG_INT_H
#define TQ_ENGINE_PG_INT_H

#define _GNU_SOURCE /* memmem */
#include "../engine.h"

#include <libpq-fe.h>

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* clang-format off */
/* Timestamps out as int8 microseconds; absolute microseconds in. */
#define US(col)      "(extract(epoch from " col ") * 1000000)::int8"

#define TS(p)        "('epoch'::timestamptz + " p "::int8 * interval '1 microsecond')"

#define DUR(p)       "(" p "::int8 * interval '1 microsecond')"

/* A job is out of attempts when it has started as many as it may; inc is
 * what the statement adds to attempts meanwhile. */
#define OUT_OF_ATTEMPTS(inc)                                                             \
    "j.attempts + " inc " >= COALESCE(j.max_attempts, (SELECT q.max_attempts"           \
    " FROM TQ.queues q WHERE q.name = j.queue), 3)"

/* A queue's rate-limit bucket (migration 10): its tokens at time at, and
 * how many it gains a microsecond. */
#define RATE_REFILL                                                                      \
    "(greatest(rate_limit - rate_burst, 1)::float8 / (rate_period_us + 10000))"
/* clang-format on */

_Static_assert(TQ__RATE_MARGIN_US == 10000, "RATE_REFILL spells out the margin");

/* clang-format off */
#define RATE_TOKENS(at)                                                                  \
    "least(rate_burst, rate_tokens + greatest(0, extract(epoch FROM " at " - rate_at)"   \
    "::float8 * 1e6) * " RATE_REFILL ")"
/* clang-format on */

/* The ids of the prepared statements: engine.h's lists, then this engine's own
 * (each one's text is in the file of its concern: see the tables below). */
/* clang-format off */
enum stmt_id {
    TQ__CLAIM_STMTS(TQ__CLAIM_STMT_ID)
    S_CLAIM_RATE_FIFO,
    S_CLAIM_RATE_LIFO,
    S_CLAIM_RATE_ANY,
    TQ__SHARED_STMTS(TQ__STMT_ID)
    /* This engine's own: */
    S_LIMIT_LOCK,
    S_PLAN,
    S_PLAN_GROUP,
    S_PLAN_CLAIM,
    S_ACK_RESULTS,
    S_ACK_MANY,
    S_ACK_DONE,
    S_ACK_DELETE,
    S_ENQUEUE_MANY,
    S_REPLACE_KEY,
    S_REPLACE_UKEY,
    S_DEPS_MISSING,
    S_WORKER_NEW,
    S_CLOCK,
    S_SCHEDULE_FIRE,
    S_COUNT
};
/* clang-format on */

typedef struct conn {
    PGconn *pg;
    /* pg is the caller's (tq_open_opts.conn): not reconnected, not closed,
     * its session settings left alone, its statements named "tq<gen>_<id>".
     * tx: what this handle has begun and not yet ended (tq__pg_begin_sql),
     * so that a rollback on the caller's connection undoes only that. */
    int borrowed;
    /* Behind a pooler in transaction mode (tq_pool=transaction): each
     * transaction may run on another server session, so this one keeps
     * none: statements are sent whole, unnamed (text: each one's, for this
     * schema), no session settings, and notifications come on listen_pg, a
     * connection of its own to listen_url (tq_listen), or not at all. */
    int pooled;
    char *text[S_COUNT];
    char *listen_url;
    PGconn *listen_pg;
    enum { TX_NONE, TX_OWN, TX_SAVEPOINT } tx;
    unsigned gen;
    char *schema;
    char where[256];                 /* the redacted URL, for messages */
    char listen_where[256];          /* listen_url's, likewise */
    unsigned char prepared[S_COUNT]; /* per stmt_id: prepared in this session */
    int64_t wait_us;                 /* set_wait_limit; 0: none */
    int hung;                        /* the last wait ran past it; until reconnected */
    /* With a wait limit: this session's backend, to end it from the next
     * session after a hang (its half-sent transaction may hold locks). */
    int backend_pid;
    char backend_start[64];
} conn;

/* clang-format off */
#define C(db) ((conn *)(db)->conn)

/* The server a message about c->pg names: tq_listen's while pg_listen
 * runs its LISTEN there. */
static inline const char *tq__pg_where(const conn *c)
{
    return c->listen_pg && c->pg == c->listen_pg ? c->listen_where : c->where;
}
/* clang-format on */

typedef struct params {
    const char *v[20]; /* the most a statement takes: 18 (S_QUEUE_UPDATE) */
    int len[20];
    int fmt[20];
    char buf[20][24];
    int n;
} params;

/* clang-format off */
#define P_MAX (int)(sizeof((params *)0)->v / sizeof((params *)0)->v[0])
/* clang-format on */

/*
 * One exchange is one pipeline: BEGIN, its planner settings (S_PLAN,
 * S_PLAN_GROUP before grouped acks, S_PLAN_CLAIM after them), the acks as at
 * most two grouped statements (done/release/beat rows; deleted rows) plus
 * one per failure (each carries its own error text), the claim, COMMIT and
 * a Sync, sent together: one round trip and one commit however
 * many jobs it carries.
 */
typedef struct pipeline {
    tq *db;
    size_t n;           /* statements sent, BEGIN and COMMIT included */
    enum stmt_id *what; /* per statement: S_COUNT for BEGIN/COMMIT */
    size_t *ack;        /* per S_FAIL statement: its ack */
} pipeline;

/* One exchange (pg_exchange) as it goes through the pipeline. */
typedef struct exchange_state {
    const char *worker;
    tq__ack *acks;
    size_t nacks;
    tq__claim *claim; /* NULL: acknowledgements only */
    /* Whether the claim is CLAIM_RATE's, its tokens taken by rate_take
     * once the rows are claimed: the transaction stays open for it. */
    int rate_after;
    size_t kept; /* of the jobs claimed, those rate_take found tokens for */
    /* idx: the "many" group from the front, the delete group at the back. */
    size_t *idx, nmany, ndel;
    size_t *ridx, nres; /* done with a result: a group of their own */
    uint64_t singles;   /* the statements of its one-job acks (single_stmt), as bits */
    enum stmt_id many;  /* S_ACK_DONE when the group is all done */
    char *arrays[14];   /* the groups' array parameters */
    tq_job *jobs;
    size_t njobs;
} exchange_state;

/* The files that hold statements: each one's tq__pg_sql_<file>, by stmt_id
 * (NULL: another file's), and the text of statement id, wherever it is. A
 * new file with statements is added here. */
/* clang-format off */
#define PG_SQL_FILES(X) \
    X(ack) X(admin) X(claim) X(cron) X(enqueue) X(postgres) X(rate) X(schema) X(stats)
/* clang-format on */
#define PG_SQL_DECLARE(file) extern const char *const tq__pg_sql_##file[S_COUNT];
PG_SQL_FILES(PG_SQL_DECLARE)
const char *tq__pg_sql(enum stmt_id id);

int tq__pg_fail_res(tq *db, PGresult *r, const char *what);
PGresult *tq__pg_get_result(tq *db);
PGresult *tq__pg_exec_result(tq *db, int sent);
char *tq__pg_with_schema(const char *text, const char *schema);
int tq__pg_prepare(tq *db, enum stmt_id id, const char *what);
PGresult *tq__pg_run(tq *db, enum stmt_id id, const params *p, int *rc, const char *what);
int tq__pg_send(tq *db, enum stmt_id id, const params *p);
int tq__pg_run_count(tq *db, enum stmt_id id, const params *p, int64_t *changed,
                     const char *what);
/* Fills one element of a tq__pg_rows array from row row of r. */
typedef int (*tq__pg_fill)(tq *db, const PGresult *r, int row, void *out, void *arg);
void *tq__pg_rows(tq *db, enum stmt_id id, const params *p, const char *what, size_t size,
                  tq__pg_fill fill, void *arg, void (*free_rows)(void *v, size_t n),
                  size_t *out_n, int *rc);
int tq__pg_simple(tq *db, const char *text, const char *what);
void tq__pg_rollback(tq *db);
int tq__pg_exec_params(tq *db, const char *text, int n, const char *const *values,
                       PGresult **out, const char *what);
int tq__pg_init(tq *db, const tq_grant *grants, size_t ngrants, int *found);
int tq__pg_queue_set(tq *db, const char *name, const tq_queue_opts *o);
int tq__pg_queue_get(tq *db, const char *name, tq_queue_info *out);
int tq__pg_queue_list(tq *db, tq_queue_info **out, size_t *out_n);
char *tq__pg_bytea_array(const tq_payload *items, size_t n);
int tq__pg_enqueue(tq *db, const char *queue, const tq_payload *items, size_t n,
                   const tq_enqueue_opts *o, int64_t *ids, int *dup);
int tq__pg_read_jobs(tq *db, PGresult *r, const tq__job_cols *c, const char *queue,
                     const char *worker, tq_job **out, size_t *out_n);
char *tq__pg_int_array(const int64_t *v, size_t n);
int tq__pg_pipe_send(pipeline *pl, enum stmt_id id, const params *p, size_t ack);
int tq__pg_pipe_sql(pipeline *pl, const char *text);
int tq__pg_pipe_group(pipeline *pl, enum stmt_id id, const char *worker,
                      const tq__ack *acks, const size_t *idx, size_t n, char **arrays);
void tq__pg_mark_applied(const PGresult *r, tq__ack *acks, const size_t *idx, size_t n);
enum stmt_id tq__pg_claim_id(tq_order order, enum tq__claim_kind kind);
int tq__pg_rate_after(const tq__claim *c);
int tq__pg_exchange_read(tq *db, const pipeline *pl, exchange_state *x, int rc);
int tq__pg_rate_take(tq *db, exchange_state *x);
int tq__pg_exchange(tq *db, const char *worker, tq__ack *acks, size_t nacks,
                    tq__claim *claim, tq_job **out, size_t *out_n);
int tq__pg_rescue(tq *db, const char *worker, int64_t since, int64_t *count);
int tq__pg_query_i64(tq *db, enum stmt_id id, const params *p, int64_t *out,
                     const char *what);
int tq__pg_pending(tq *db, const char *queue, int *out);
int tq__pg_pending_due(tq *db, const char *queue, int *out);
int tq__pg_job_get(tq *db, int64_t id, tq_job **out);
int tq__pg_job_result(tq *db, int64_t id, void **out, size_t *len, int *state);
int tq__pg_job_parents(tq *db, int64_t id, tq_parent **out, size_t *out_n);
int tq__pg_job_list(tq *db, const tq_list_opts *o, tq_job **out, size_t *out_n);
int tq__pg_job_retry(tq *db, const int64_t *ids, size_t n, const char *queue,
                     int64_t *count, size_t *bad, int *state);
int tq__pg_job_cancel(tq *db, const int64_t *ids, size_t n, int64_t *count, size_t *bad,
                      int *state);
int tq__pg_retire(tq *db, const char *queue, const int64_t keep[TQ_STATE_COUNT],
                  int64_t after[TQ_STATE_COUNT], int64_t limit,
                  int64_t count[TQ_STATE_COUNT]);
int tq__pg_prune(tq *db, int64_t older_than_us, unsigned mask, int64_t limit,
                 int64_t *count);
int tq__pg_stats(tq *db, const char *queue, tq_stats *out);
int tq__pg_active(tq *db, tq__active **out, size_t *out_n);
int tq__pg_durations(tq *db, const char *queue, size_t limit, int64_t **out,
                     size_t *out_n);
int tq__pg_count_jobs(tq *db, tq_state st, int by_worker, tq_count **out, size_t *out_n);
int tq__pg_finished_since(tq *db, tq_state st, int64_t at, int64_t after_id, int64_t upto,
                          size_t limit, tq_finished *out, size_t *out_n);
int tq__pg_worker_register(tq *db, tq_worker_info *w, const tq_worker_info *expect,
                           tq_worker_info *holder);
int tq__pg_worker_beat(tq *db, const tq_worker_info *me);
int tq__pg_worker_stop(tq *db, const tq_worker_info *me);
int tq__pg_worker_prune(tq *db, int64_t older_than_us, int64_t *count);
int tq__pg_worker_list(tq *db, tq_worker_info **out, size_t *out_n);
int tq__pg_reconnect(tq *db);
void tq__pg_unprepare(tq *db);
int tq__pg_schedule_put(tq *db, const char *name, const tq_schedule_opts *o,
                        int64_t next_us);
int tq__pg_schedule_remove(tq *db, const char *name);
int tq__pg_schedule_list(tq *db, tq_schedule **out, size_t *out_n);
int tq__pg_schedule_fire(tq *db, const tq_schedule *s, int64_t slot_us, int64_t next_us,
                         int64_t *job);

static inline void p_text(params *p, const char *s)
{
    assert(p->n < P_MAX);
    p->v[p->n] = s;
    p->len[p->n] = 0;
    p->fmt[p->n++] = 0;
}

static inline void p_i64(params *p, int64_t x)
{
    assert(p->n < P_MAX);
    snprintf(p->buf[p->n], sizeof p->buf[0], "%lld", (long long)x);
    p_text(p, p->buf[p->n]);
}

static inline void p_bytes(params *p, const void *data, size_t len)
{
    assert(p->n < P_MAX);
    p->v[p->n] = data ? data : "";
    p->len[p->n] = (int)len;
    p->fmt[p->n++] = 1;
}

/* Runs a prepared statement (preparing it on first use). Returns the result
 * on success; NULL with the error set in *rc. Results are binary. */
static inline void stmt_name(const conn *c, char name[24], enum stmt_id id)
{
    if (c->borrowed)
        snprintf(name, 24, "tq%u_%d", c->gen, (int)id);
    else
        snprintf(name, 24, "tq_%d", (int)id);
}

/* A transaction's first and last words: BEGIN and COMMIT, or, on the
 * caller's connection while the caller has a transaction open, a
 * savepoint inside it, which commits nothing (the caller's COMMIT does).
 * BEGIN names the isolation tq's statements are written for: a default
 * set for the role or database, or left on a pooled session by another
 * client, would otherwise apply (serializable: claims failing and retried,
 * at a third of the rate). */
static inline const char *tq__pg_begin_sql(tq *db)
{
    conn *c = C(db);
    c->tx =
        c->borrowed && PQtransactionStatus(c->pg) != PQTRANS_IDLE ? TX_SAVEPOINT : TX_OWN;
    return c->tx == TX_SAVEPOINT ? "SAVEPOINT tq_savepoint"
                                 : "BEGIN ISOLATION LEVEL READ COMMITTED";
}

static inline const char *tq__pg_commit_sql(const tq *db)
{
    return C(db)->tx == TX_SAVEPOINT ? "RELEASE SAVEPOINT tq_savepoint" : "COMMIT";
}

static inline int begin(tq *db)
{
    return tq__pg_simple(db, tq__pg_begin_sql(db), "starting a transaction");
}

static inline int commit(tq *db)
{
    int rc = tq__pg_simple(db, tq__pg_commit_sql(db), "committing");
    if (!rc)
        C(db)->tx = TX_NONE;
    return rc;
}

static inline int64_t g_i64(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return 0;
    const unsigned char *b = (const unsigned char *)PQgetvalue(r, row, col);
    int len = PQgetlength(r, row, col);
    uint64_t v = 0;
    for (int i = 0; i < len; i++)
        v = v << 8 | b[i];
    if (len == 4) /* int4: sign-extend; int8 and bool need nothing */
        return (int32_t)(uint32_t)v;
    return (int64_t)v;
}

static inline void g_strbuf(const PGresult *r, int row, int col, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s", PQgetlength(r, row, col), PQgetvalue(r, row, col));
}

#endif /* TQ_ENGINE_PG_INT_H */
