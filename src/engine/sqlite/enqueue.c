/*
 * sqlite/enqueue.c - the SQLite engine: enqueue: plain, keyed and bulk inserts, with
 * their parents.
 */
#include "sqlite_int.h"

/* clang-format off */

/* The predicate of tq_jobs_unique (migration 7), word for word: the rows
 * whose unique_key is held. */
#define UNIQUE_HELD                                                                      \
    "unique_key IS NOT NULL"                                                             \
    " AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0"                   \
    "      OR unique_scope = 'active' AND state IN ('ready', 'running'))"

#define SETTLE_TRIES 3


const char *const tq__sqlite_sql_enqueue[S_COUNT] = {
    /* After an enqueue's COMMIT failed (enqueue_settle): how many of its
     * rows are there, and a write whose commit makes sure they never will
     * be. */
    [S_ENQUEUED] = "SELECT count(*) FROM tq_jobs WHERE id BETWEEN ?1 AND ?2"
                   " AND queue = ?3 AND created_at = ?4",
    [S_BARRIER] = "INSERT OR REPLACE INTO tq_meta (key, value)"
                  " VALUES ('commit_barrier', ?1)",
    [S_ENQUEUE] = "INSERT INTO tq_jobs (queue, payload, priority, run_at,"
                  " max_attempts, created_at, traceparent, job_group, timeout_us)"
                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?10, ?11, ?12)",
    /* Keyed: ?7 the key, ?8 unique_until (NULL: none), ?9 the scope of a
     * unique_key (migration 7). A conflict target names its index's
     * predicate word for word, and so does the look-up of the kept job. */
    [S_ENQUEUE_KEY] =
        "INSERT INTO tq_jobs (queue, payload, priority, run_at, max_attempts,"
        " created_at, dedup_key, unique_until, traceparent, job_group, timeout_us)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?10, ?11, ?12)"
        " ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING",
    [S_FIND_KEY] = "SELECT id FROM tq_jobs WHERE queue = ?1 AND dedup_key = ?2",
    [S_ENQUEUE_UKEY] =
        "INSERT INTO tq_jobs (queue, payload, priority, run_at, max_attempts,"
        " created_at, unique_key, unique_until, unique_scope, traceparent, job_group,"
        " timeout_us)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
        " ON CONFLICT (queue, unique_key) WHERE " UNIQUE_HELD " DO NOTHING",
    [S_FIND_UKEY] = "SELECT id FROM tq_jobs WHERE queue = ?1 AND unique_key = ?2"
                    " AND " UNIQUE_HELD,
    /* On conflict, replace: the kept job takes the new payload, run time and
     * priority if it is ready (same transaction as the failed insert). */
    [S_REPLACE] = "UPDATE tq_jobs SET payload = ?2, run_at = ?3, priority = ?4"
                  " WHERE id = ?1 AND state = 'ready'",
    /* Before a keyed insert: the holder of ?2 whose unique_until (?3 now)
     * has passed lets the key go (migration 7), unless it is running (as
     * on PostgreSQL, where expiring it would lock a worker's row);
     * plain-SQL producers run the same UPDATE first, as the README shows. */
    [S_EXPIRE_KEY] =
        "UPDATE tq_jobs SET unique_key = dedup_key, unique_scope = 'expired',"
        " dedup_key = NULL WHERE queue = ?1 AND dedup_key = ?2"
        " AND dedup_key IS NOT NULL AND unique_until <= ?3 AND state <> 'running'",
    [S_EXPIRE_UKEY] = "UPDATE tq_jobs SET unique_scope = 'expired'"
                      " WHERE queue = ?1 AND unique_key = ?2 AND " UNIQUE_HELD
                      " AND unique_until <= ?3 AND state <> 'running'",
};
/* clang-format on */

/* ---- enqueue ----------------------------------------------------------- */

/* What every enqueue statement takes: ?1 queue, ?2 payload, ?3 priority,
 * ?4 run_at, ?5 max_attempts (NULL: the queue's), ?6 created_at, ?10 the
 * trace context, ?11 the group and ?12 the timeout (NULL: the queue's). */
static void bind_job(sqlite3_stmt *s, const char *queue, const tq_payload *item,
                     const tq_enqueue_opts *o, int64_t now, int64_t run_at)
{
    sqlite3_bind_text(s, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(s, 2, item->data ? item->data : "", item->len, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, o->priority);
    sqlite3_bind_int64(s, 4, run_at);
    if (o->max_attempts > 0)
        sqlite3_bind_int(s, 5, o->max_attempts);
    else
        sqlite3_bind_null(s, 5);
    sqlite3_bind_int64(s, 6, now);
    bind_text(s, 10, o->traceparent);
    bind_text(s, 11, o->group);
    if (o->timeout_us > 0)
        sqlite3_bind_int64(s, 12, o->timeout_us);
    else
        sqlite3_bind_null(s, 12);
}

/* The keyed half of an enqueue, in its transaction: the insert, or the
 * kept job's id in ids[0] and *dup 1, or 2 when it took the new payload
 * (TQ_ON_CONFLICT_REPLACE). A kept job that cannot be found (deleted
 * meanwhile) leaves ids[0] 0: the layer above tries again. */
static int enqueue_keyed(tq *db, const char *queue, const tq_payload *item,
                         const tq_enqueue_opts *o, int64_t now, int64_t run_at,
                         int64_t *ids, int *dup)
{
    int rc;
    sqlite3 *h = C(db)->h;
    const int scoped = o->unique != TQ_UNIQUE_STORED;
    sqlite3_stmt *s = stmt(db, scoped ? S_EXPIRE_UKEY : S_EXPIRE_KEY, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, o->key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, now);
    if ((rc = run(db, s, "freeing an expired key")))
        return rc;
    if (!(s = stmt(db, scoped ? S_ENQUEUE_UKEY : S_ENQUEUE_KEY, &rc)))
        return rc;
    bind_job(s, queue, item, o, now, run_at);
    sqlite3_bind_text(s, 7, o->key, -1, SQLITE_STATIC);
    if (o->unique_for_us > 0)
        sqlite3_bind_int64(s, 8, now + o->unique_for_us);
    if (scoped)
        sqlite3_bind_text(s, 9, tq_unique_name(o->unique), -1, SQLITE_STATIC);
    if ((rc = run(db, s, "enqueueing")))
        return rc;
    if (sqlite3_changes(h)) {
        ids[0] = sqlite3_last_insert_rowid(h);
        return 0;
    }
    /* The key is held: report the kept job (IGNORE_DUP_KEY), or replace. */
    if (!(s = stmt(db, scoped ? S_FIND_UKEY : S_FIND_KEY, &rc)))
        return rc;
    sqlite3_bind_text(s, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, o->key, -1, SQLITE_STATIC);
    int src = sqlite3_step(s);
    ids[0] = src == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    done_with(s);
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        return tq__sqlite_fail_rc(db, src, "finding the kept job");
    *dup = 1;
    if (!ids[0] || o->on_conflict != TQ_ON_CONFLICT_REPLACE)
        return 0;
    if (!(s = stmt(db, S_REPLACE, &rc)))
        return rc;
    sqlite3_bind_int64(s, 1, ids[0]);
    sqlite3_bind_blob64(s, 2, item->data ? item->data : "", item->len, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, run_at);
    sqlite3_bind_int(s, 4, o->priority);
    if ((rc = run(db, s, "replacing the kept job")))
        return rc;
    if (sqlite3_changes(h))
        *dup = 2;
    return 0;
}

/* The parents of a new job (o->after) in its transaction: all must exist;
 * the trigger of tq_deps (migration 13) does the rest. */
static int add_parents(tq *db, int64_t child, const tq_enqueue_opts *o, int checked)
{
    int rc, state;
    for (size_t i = 0; i < o->nafter && !checked; i++) {
        if ((rc = tq__sqlite_state_of(db, o->after[i], &state)))
            return rc;
        if (state < 0)
            return tq__seterr(db, TQ_ENOTFOUND, "parent job %lld does not exist",
                              (long long)o->after[i]);
    }
    sqlite3_stmt *s = stmt(db, S_DEPS_ADD, &rc);
    if (!s)
        return rc;
    for (size_t i = 0; i < o->nafter; i++) {
        sqlite3_bind_int64(s, 1, o->after[i]);
        sqlite3_bind_int64(s, 2, child);
        bind_text(s, 3, o->after_ended ? "ended" : "done");
        int src = sqlite3_step(s);
        sqlite3_reset(s);
        if (src != SQLITE_DONE) {
            rc = tq__sqlite_fail_rc(db, src, "adding a parent");
            break;
        }
    }
    done_with(s);
    return rc;
}

/*
 * An enqueue's COMMIT that failed may still have stored its jobs: a WAL
 * commit writes its frames, commit frame last, then syncs them, and a
 * failed sync leaves a whole transaction in the WAL file that no
 * connection sees (the WAL index never counted it) but that a later
 * recovery of the WAL, once every connection has closed, replays. The next
 * transaction to commit writes over those frames and breaks their checksum
 * chain, after which they are gone for good. So a failed COMMIT of n jobs
 * (ids[0] to ids[n-1], contiguous: one writer) made at created is settled
 * by one more write transaction, holding the write lock, so that no one
 * commits or recovers meanwhile: if the jobs are visible they are stored
 * (0); if not, a small write is committed, and once that commit succeeds
 * they never will be: the COMMIT's error stands (fail). When that write
 * cannot commit either (SETTLE_TRIES times), the jobs may or may not be
 * stored: TQ_EUNKNOWN, unless the first failure was a write that found no
 * room or failed (the commit frame, written last, then never became whole).
 * n 0: a keyed replace, which wrote no row of its own to look for: once the
 * small write commits, it did not happen either.
 */
static int enqueue_settle(tq *db, int fail, const char *queue, const int64_t *ids,
                          size_t n, int64_t created)
{
    if (C(db)->tx == TX_SAVEPOINT) { /* no commit of ours: the caller's is to come */
        tq__sqlite_rollback(db);
        return fail;
    }
    const int ext = sqlite3_extended_errcode(C(db)->h);
    const int written = ext != SQLITE_FULL && ext != SQLITE_IOERR_WRITE;
    char first[sizeof db->errmsg];
    memcpy(first, db->errmsg, sizeof first);
    /* A few tries: a write that fails now and then may pass the next time. */
    for (int tries = 0; tries < SETTLE_TRIES; tries++) {
        tq__sqlite_rollback(db);
        int rc = begin(db);
        int64_t found = n ? -1 : 0; /* a replace: no rows of its own */
        sqlite3_stmt *s;
        if (!rc && n && (s = stmt(db, S_ENQUEUED, &rc))) {
            sqlite3_bind_int64(s, 1, ids[0]);
            sqlite3_bind_int64(s, 2, ids[n - 1]);
            sqlite3_bind_text(s, 3, queue, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 4, created);
            int src = sqlite3_step(s);
            if (src == SQLITE_ROW)
                found = sqlite3_column_int64(s, 0);
            else
                rc = tq__sqlite_fail_rc(db, src, "looking for the jobs");
            done_with(s);
        }
        if (n && found == (int64_t)n) { /* the commit went through after all */
            tq__sqlite_rollback(db);
            tq__clearerr(db);
            return 0;
        }
        if (found == 0 && (s = stmt(db, S_BARRIER, &rc))) {
            sqlite3_bind_int64(s, 1, tq__now_us());
            if (!(rc = run(db, s, "writing after the failed commit")) &&
                !(rc = commit(db))) {
                tq__seterr(db, fail, "%s; nothing was stored", first);
                return fail;
            }
        }
    }
    tq__sqlite_rollback(db);
    if (!written) {
        tq__seterr(db, fail, "%s", first);
        return fail;
    }
    return tq__enqueue_unknown(db, first, ids, n);
}

int tq__sqlite_enqueue(tq *db, const char *queue, const tq_payload *items, size_t n,
                       const tq_enqueue_opts *o, int64_t *ids, int *dup)
{
    int rc;
    sqlite3 *h = C(db)->h;
    sqlite3_stmt *s;

    *dup = 0;
    if ((rc = begin(db)))
        return rc;
    const int64_t now = tq__now_us();
    const int64_t run_at = o->run_at ? o->run_at : now + o->delay_us;
    if (o->key && n == 1) {
        if ((rc = enqueue_keyed(db, queue, &items[0], o, now, run_at, ids, dup)))
            goto fail;
        /* A duplicate kept wrote nothing; a replace wrote no row of its own. */
        if ((rc = commit(db)) && *dup != 1)
            rc = enqueue_settle(db, rc, queue, ids, *dup ? 0 : 1, now);
        return rc;
    }
    if (!(s = stmt(db, S_ENQUEUE, &rc)))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        bind_job(s, queue, &items[i], o, now, run_at);
        int src = sqlite3_step(s);
        sqlite3_reset(s);
        if (src != SQLITE_DONE) {
            rc = tq__sqlite_fail_rc(db, src, "enqueueing");
            done_with(s);
            goto fail;
        }
        ids[i] = sqlite3_last_insert_rowid(h);
    }
    done_with(s);
    for (size_t i = 0; i < n && o->nafter; i++)
        if ((rc = add_parents(db, ids[i], o, i > 0)))
            goto fail;
    if ((rc = commit(db)) && n)
        rc = enqueue_settle(db, rc, queue, ids, n, now);
    return rc;
fail:
    tq__sqlite_rollback(db);
    return rc;
}
