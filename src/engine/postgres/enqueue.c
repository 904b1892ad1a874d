/*
 * postgres/enqueue.c - the PostgreSQL engine: enqueue: plain, keyed and bulk inserts,
 * with their parents.
 */
#include "pg_int.h"

/* clang-format off */

/* The predicate of jobs_unique (migration 7), word for word: the rows
 * whose unique_key is held. */
#define UNIQUE_HELD                                                                      \
    "unique_key IS NOT NULL"                                                             \
    " AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0"                   \
    "      OR unique_scope = 'active' AND state IN ('ready', 'running'))"

/* A keyed enqueue into key column col (with more columns and values),
 * against the unique index of predicate held, ending in action. */
#define ENQUEUE_KEYED(col, more_cols, more_vals, held, action)                           \
    "INSERT INTO TQ.jobs AS j (queue, payload, priority, run_at, max_attempts,"          \
    " traceparent, job_group, timeout_us, " col ", unique_until" more_cols ")"           \
    " VALUES ($1, $2, $3,"                                                               \
    "  CASE WHEN $4::int8 = 0 THEN now() + " DUR("$5") " ELSE " TS("$4") " END,"         \
    "  $6::int4, $7, $8, $9::int8, $10,"                                                 \
    "  CASE WHEN $11::int8 > 0 THEN now() + " DUR("$11") " END"                          \
    more_vals ")"                                                                        \
    " ON CONFLICT (queue, " col ") WHERE " held action

#define REPLACE_READY                                                                    \
    " DO UPDATE SET payload = EXCLUDED.payload, run_at = EXCLUDED.run_at,"               \
    " priority = EXCLUDED.priority WHERE j.state = 'ready'"                              \
    " RETURNING id, xmax = 0, " US("now()") ", txid_current()"

/* How long an enqueue whose COMMIT lost the connection keeps trying to
 * learn its outcome (enqueue_settle): a server restarting after a crash is
 * back within it. */
#define SETTLE_US 15000000LL


const char *const tq__pg_sql_enqueue[S_COUNT] = {
    /* Many rows in one statement: payloads as one bytea[] parameter. */
    [S_ENQUEUE_MANY] =
        "INSERT INTO TQ.jobs (queue, payload, priority, run_at, max_attempts, traceparent,"
        " job_group, timeout_us)"
        " SELECT $1, p.payload, $3,"
        "        CASE WHEN $4::int8 = 0 THEN now() + " DUR("$5") " ELSE " TS("$4") " END,"
        "        $6::int4, $7::text, $8::text, $9::int8"
        " FROM unnest($2::bytea[]) WITH ORDINALITY AS p (payload, n)"
        " ORDER BY p.n"
        " RETURNING id, " US("now()") ", txid_current()",
    /* Keyed: $10 the key, $11 how long it holds at most (0: no limit), $12
     * the scope of a unique_key (migration 7). A conflict target names its
     * index's predicate word for word, and so does the look-up of the kept
     * job. A replace updates the kept job only while it is ready, in the
     * same statement as the insert it replaces, and says which happened
     * (xmax is 0 in a row this statement inserted). */
    [S_ENQUEUE_KEY] = ENQUEUE_KEYED("dedup_key", "", "", "dedup_key IS NOT NULL",
                                    " DO NOTHING RETURNING id, " US("now()")
                                    ", txid_current()"),
    [S_FIND_KEY] = "SELECT id FROM TQ.jobs WHERE queue = $1 AND dedup_key = $2",
    [S_ENQUEUE_UKEY] = ENQUEUE_KEYED("unique_key", ", unique_scope", ", $12",
                                     UNIQUE_HELD,
                                     " DO NOTHING RETURNING id, " US("now()")
                                     ", txid_current()"),
    [S_FIND_UKEY] = "SELECT id FROM TQ.jobs WHERE queue = $1 AND unique_key = $2"
                    " AND " UNIQUE_HELD,
    [S_REPLACE_KEY] = ENQUEUE_KEYED("dedup_key", "", "", "dedup_key IS NOT NULL",
                                    REPLACE_READY),
    [S_REPLACE_UKEY] = ENQUEUE_KEYED("unique_key", ", unique_scope", ", $12",
                                     UNIQUE_HELD, REPLACE_READY),
    /* Before a keyed insert: holders of the key whose time is up let it go
     * (migration 7). */
    [S_EXPIRE_KEY] = "SELECT TQ.expire_key($1, $2)",
    /* The first of the parents $1 that does not exist (NULL: none). */
    [S_DEPS_MISSING] = "SELECT min(a) FROM unnest($1::int8[]) a"
                       " WHERE NOT EXISTS (SELECT 1 FROM TQ.jobs WHERE id = a)",
    /* Parents $1 of each of the children $2, released when $3 ('done' or
     * 'ended'). */
    [S_DEPS_ADD] = "INSERT INTO TQ.deps (parent, child, release_when)"
                   " SELECT p, c, $3 FROM unnest($2::int8[]) c, unnest($1::int8[]) p",
    /* A waiting $1 (retried by hand) that something holds (dep_blocker)
     * is cancelled again, by that. */
    [S_DEPS_HOLD] = "UPDATE TQ.jobs j SET state = 'cancelled', finished_at = now(),"
                    " (cancelled_by, last_error) = (SELECT b.id, b.why"
                    " FROM TQ.dep_blocker(j.id, j.waiting_for) b)"
                    " WHERE j.id = $1 AND j.state = 'waiting' AND (SELECT b.id"
                    " FROM TQ.dep_blocker(j.id, j.waiting_for) b) IS NOT NULL",
};
/* clang-format on */

/* ---- enqueue ------------------------------------------------------------- */

/* The text form of a bytea[] holding items: {"\\x6869",...}. */
char *tq__pg_bytea_array(const tq_payload *items, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t size = 3;
    for (size_t i = 0; i < n; i++)
        size += items[i].len * 2 + 6;
    char *out = malloc(size), *o = out;
    if (!out)
        return NULL;
    *o++ = '{';
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = items[i].data;
        if (i)
            *o++ = ',';
        memcpy(o, "\"\\\\x", 4);
        o += 4;
        for (size_t k = 0; k < items[i].len; k++) {
            *o++ = hex[b[k] >> 4];
            *o++ = hex[b[k] & 15];
        }
        *o++ = '"';
    }
    *o++ = '}';
    *o = '\0';
    return out;
}

static void enqueue_common(params *p, const tq_enqueue_opts *o)
{
    p_i64(p, o->priority);
    p_i64(p, o->run_at);
    p_i64(p, o->delay_us);
    if (o->max_attempts > 0)
        p_i64(p, o->max_attempts);
    else
        p_text(p, NULL);
    p_text(p, o->traceparent);
    p_text(p, o->group);
    if (o->timeout_us > 0)
        p_i64(p, o->timeout_us);
    else
        p_text(p, NULL);
}

/* The parents of new jobs (o->after), in their transaction: before the
 * insert (so that a refused one takes no id either), all must exist; then
 * the n jobs ids get them, and the trigger of TQ.deps (migration 13) does
 * the rest. */
static int add_parents(tq *db, const int64_t *ids, size_t n, const tq_enqueue_opts *o)
{
    int rc;
    char *parents = tq__pg_int_array(o->after, o->nafter),
         *children = tq__pg_int_array(ids, n);
    if (!parents || !children) {
        rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        goto out;
    }
    params p = {0};
    p_text(&p, parents);
    if (!n) {
        PGresult *r = tq__pg_run(db, S_DEPS_MISSING, &p, &rc, "adding parents");
        if (r && PQntuples(r) && !PQgetisnull(r, 0, 0))
            rc = tq__seterr(db, TQ_ENOTFOUND, "parent job %lld does not exist",
                            (long long)g_i64(r, 0, 0));
        PQclear(r);
        goto out;
    }
    p_text(&p, children);
    p_text(&p, o->after_ended ? "ended" : "done");
    rc = tq__pg_run_count(db, S_DEPS_ADD, &p, NULL, "adding parents");
out:
    free(parents);
    free(children);
    return rc;
}

/* What an enqueue's transaction was: its server process (pid), its start
 * (began, the now() its rows carry as created_at) and its id (xid), once
 * its insert answered. */
typedef struct enqueue_tx {
    int pid;
    int64_t began, xid;
} enqueue_tx;

/* What one settling look (enqueue_settle) found. */
typedef enum settled {
    SETTLE_AGAIN,
    SETTLE_STORED,
    SETTLE_NOT_STORED,
    SETTLE_UNKNOWN
} settled;

/* The result of sql with a as $1 and b as $2: NULL when it failed (the
 * look is made again later). */
static PGresult *settle_ask(tq *db, const char *sql, const char *a, const char *b,
                            const char *what)
{
    PGresult *r = NULL;
    const char *v[] = {a, b};
    return tq__pg_exec_params(db, sql, 2, v, &r, what) ? NULL : r;
}

static settled settle_look(tq *db, const enqueue_tx *tx, const char *queue,
                           const int64_t *ids, size_t n)
{
    char p[16], b[24], x[24];
    snprintf(p, sizeof p, "%d", tx->pid);
    snprintf(b, sizeof b, "%lld", (long long)tx->began);
    snprintf(x, sizeof x, "%lld", (long long)tx->xid);
    PGresult *r =
        settle_ask(db,
                   "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                   " WHERE pid = $1::int AND xact_start = " TS("$2"),
                   p, b, "ending the session left behind");
    if (!r)
        return SETTLE_AGAIN;
    const int running = atoi(PQgetvalue(r, 0, 0)) > 0;
    PQclear(r);
    if (running) /* ended now; its end is asked about next time */
        return SETTLE_AGAIN;
    if (n) {
        char *arr = tq__pg_int_array(ids, n);
        if (!arr)
            return SETTLE_AGAIN;
        const char *rows[] = {arr, queue, b};
        int e =
            tq__pg_exec_params(db,
                               "SELECT count(*) FROM TQ.jobs WHERE id = ANY ($1::int8[])"
                               " AND queue = $2 AND created_at = " TS("$3"),
                               3, rows, &r, "looking for the jobs");
        free(arr);
        if (e)
            return SETTLE_AGAIN;
        const int64_t found = atoll(PQgetvalue(r, 0, 0));
        PQclear(r);
        if (found == (int64_t)n)
            return SETTLE_STORED;
    }
    /* Not all there: deleted since (done in a delete-done queue, pruned), or
     * never committed. The server says which, unless it restarted since: a
     * transaction id whose commit never reached its disk may be handed out
     * again, to another transaction. */
    if (!(r = settle_ask(db,
                         "SELECT coalesce(txid_status($1::int8), ''),"
                         " pg_postmaster_start_time() > " TS("$2"),
                         x, b, "asking how the transaction ended")))
        return SETTLE_AGAIN;
    const char *st = PQgetvalue(r, 0, 0);
    const int restarted = PQgetvalue(r, 0, 1)[0] == 't';
    const int committed = strcmp(st, "committed") == 0, aborted = !strcmp(st, "aborted");
    PQclear(r);
    if (committed)
        return restarted ? SETTLE_UNKNOWN : SETTLE_STORED;
    if (aborted || (restarted && *st)) /* a crash ended it uncommitted */
        return SETTLE_NOT_STORED;
    return *st ? SETTLE_AGAIN : SETTLE_UNKNOWN; /* ending; or too old to say */
}

int tq__postgres_settle_look(tq *db, int pid, int64_t began, int64_t xid,
                             const char *queue, const int64_t *ids, size_t n)
{
    _Static_assert(SETTLE_AGAIN == 0 && SETTLE_STORED == 1 && SETTLE_NOT_STORED == 2 &&
                       SETTLE_UNKNOWN == 3,
                   "tq__postgres_settle_look's numbers");
    const enqueue_tx tx = {pid, began, xid};
    return (int)settle_look(db, &tx, queue, ids, n);
}

/*
 * An enqueue whose COMMIT lost the connection (TQ_ECONN, fail) may have
 * been stored: the server may have committed before the connection broke,
 * or may still be committing. A new connection finds out (settle_look):
 * whether the old session is still in that transaction (then it is ended,
 * and asked again); once it is not, whether the jobs ids[0..n) are there,
 * created at the transaction's start (stored: 0; their ids alone would not
 * do, for the same reason as below); and if not, how the server says the
 * transaction ended (committed: stored, its rows deleted since; aborted:
 * nothing was stored, the COMMIT's error stands), unless the server
 * restarted since, when a committed answer may be another transaction's
 * that got the same id. n 0: a keyed replace, which has no row of its own.
 * Until SETTLE_US have passed without an answer (the server unreachable),
 * or when it cannot be known: TQ_EUNKNOWN. Behind a connection pooler or a
 * multi-host URL the new connection may not reach the old session's
 * server process; then the answer comes from the transaction id alone.
 */
static int enqueue_settle(tq *db, int fail, const enqueue_tx *tx, const char *queue,
                          const int64_t *ids, size_t n)
{
    char first[sizeof db->errmsg];
    memcpy(first, db->errmsg, sizeof first);
    if (C(db)->tx == TX_SAVEPOINT) /* no commit of ours: the caller's was to come */
        return tq__seterr(db, fail, "%s; nothing was stored", first);
    if (C(db)->borrowed) /* no new connection to ask on: the caller's is lost */
        return tq__enqueue_unknown(db, first, ids, n);
    const int64_t until = tq__mono_us() + SETTLE_US;
    settled found = SETTLE_AGAIN;
    for (int64_t pause = 20000;; pause = pause < 640000 ? 2 * pause : pause) {
        if (!tq__pg_reconnect(db) &&
            (found = settle_look(db, tx, queue, ids, n)) != SETTLE_AGAIN)
            break;
        if (tq__mono_us() + pause > until)
            break;
        tq__sleep_us(pause);
    }
    if (found == SETTLE_STORED) {
        tq__clearerr(db);
        return 0;
    }
    if (found == SETTLE_NOT_STORED) {
        tq__seterr(db, fail, "%s; nothing was stored", first);
        return fail;
    }
    return tq__enqueue_unknown(db, first, ids, n);
}

/* The keyed path (engine.h), in the open transaction: inserted, or the
 * kept job's id with *dup 1, or 2 when the kept job took the new payload. */
static int enqueue_keyed(tq *db, const char *queue, const tq_payload *item,
                         const tq_enqueue_opts *o, int64_t *ids, int *dup, enqueue_tx *tx)
{
    int rc;
    params p = {0};
    const int scoped = o->unique != TQ_UNIQUE_STORED;
    const int replace = o->on_conflict == TQ_ON_CONFLICT_REPLACE;
    p_text(&p, queue);
    p_text(&p, o->key);
    if ((rc = tq__pg_run_count(db, S_EXPIRE_KEY, &p, NULL, "freeing an expired key")))
        return rc;
    memset(&p, 0, sizeof p);
    p_text(&p, queue);
    p_bytes(&p, item->data, item->len);
    enqueue_common(&p, o);
    p_text(&p, o->key);
    p_i64(&p, o->unique_for_us);
    if (scoped)
        p_text(&p, tq_unique_name(o->unique));
    static const enum stmt_id insert[2][2] = {{S_ENQUEUE_KEY, S_ENQUEUE_UKEY},
                                              {S_REPLACE_KEY, S_REPLACE_UKEY}};
    PGresult *r = tq__pg_run(db, insert[replace][scoped], &p, &rc, "enqueueing");
    if (!r)
        return rc;
    ids[0] = PQntuples(r) ? g_i64(r, 0, 0) : 0;
    if (ids[0] && replace && !g_i64(r, 0, 1))
        *dup = 2;
    if (ids[0]) {
        tx->began = g_i64(r, 0, replace ? 2 : 1);
        tx->xid = g_i64(r, 0, replace ? 3 : 2);
    }
    PQclear(r);
    if (ids[0] == 0) {
        memset(&p, 0, sizeof p);
        p_text(&p, queue);
        p_text(&p, o->key);
        if (!(r = tq__pg_run(db, scoped ? S_FIND_UKEY : S_FIND_KEY, &p, &rc,
                             "finding the kept job")))
            return rc;
        ids[0] = PQntuples(r) ? g_i64(r, 0, 0) : 0;
        PQclear(r);
        *dup = 1;
    }
    return 0;
}

/* Jobs items[0..k), k at most 1000, in one statement of the open
 * transaction; their ids into ids[0..k), ascending. */
static int enqueue_many(tq *db, const char *queue, const tq_payload *items, size_t k,
                        const tq_enqueue_opts *o, int64_t *ids, enqueue_tx *tx)
{
    int rc;
    char *arr = tq__pg_bytea_array(items, k);
    if (!arr)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    params p = {0};
    p_text(&p, queue);
    p_text(&p, arr);
    enqueue_common(&p, o);
    PGresult *r = tq__pg_run(db, S_ENQUEUE_MANY, &p, &rc, "enqueueing");
    free(arr);
    if (!r)
        return rc;
    if ((size_t)PQntuples(r) != k) {
        rc = tq__seterr(db, TQ_EDB, "enqueue returned %d ids for %zu jobs", PQntuples(r),
                        k);
        PQclear(r);
        return rc;
    }
    /* Identity values grow in insertion order, which is the array's. */
    for (size_t i = 0; i < k; i++)
        ids[i] = g_i64(r, (int)i, 0);
    if (k) {
        tx->began = g_i64(r, 0, 1);
        tx->xid = g_i64(r, 0, 2);
    }
    PQclear(r);
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            int64_t t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
        }
    return 0;
}

int tq__pg_enqueue(tq *db, const char *queue, const tq_payload *items, size_t n,
                   const tq_enqueue_opts *o, int64_t *ids, int *dup)
{
    int rc;
    enqueue_tx tx = {.pid = PQbackendPID(C(db)->pg)};
    *dup = 0;
    if ((rc = begin(db)))
        return rc;
    if (o->key && n == 1) {
        if ((rc = enqueue_keyed(db, queue, items, o, ids, dup, &tx)))
            goto fail;
        /* A duplicate kept wrote nothing; a replace wrote no row of its own. */
        if ((rc = commit(db)) == TQ_ECONN && tx.xid && *dup != 1)
            rc = enqueue_settle(db, rc, &tx, queue, ids, *dup ? 0 : 1);
        return rc;
    }
    if (o->nafter && (rc = add_parents(db, NULL, 0, o)))
        goto fail;
    /* Up to 1000 rows per statement, all in one transaction. */
    for (size_t at = 0; at < n; at += 1000)
        if ((rc = enqueue_many(db, queue, items + at, n - at < 1000 ? n - at : 1000, o,
                               ids + at, &tx)))
            goto fail;
    if (o->nafter && (rc = add_parents(db, ids, n, o)))
        goto fail;
    if ((rc = commit(db)) == TQ_ECONN && tx.xid)
        rc = enqueue_settle(db, rc, &tx, queue, ids, n);
    return rc;
fail:
    tq__pg_rollback(db);
    return rc;
}
