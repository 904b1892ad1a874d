/*
 * sqlite/sqlite.c - the SQLite engine: one file, many worker processes on
 * one machine. Called only through tq__engine_sqlite (engine.h), defined at
 * the bottom: open, close, busy waits and wake-ups here, the rest in the
 * files of this folder, by concern (schema.c, claim.c, ack.c, deps.c,
 * enqueue.c, admin.c, stats.c, cron.c; stmt.c runs their statements).
 *
 * Writers serialise on SQLite's single write lock, so every write is a
 * short BEGIN IMMEDIATE transaction (taking the lock up front, so a
 * transaction never has to upgrade a read snapshot and fail with
 * SQLITE_BUSY_SNAPSHOT), and throughput comes from doing more per
 * transaction: batched enqueue, acknowledgements and the next claim share
 * one transaction (exchange). WAL lets readers run beside the writer.
 * Lock waits go through our own busy handler, which sleeps with a capped
 * backoff (never spins) and counts the waits for tq bench.
 *
 * Times are INTEGER microseconds since the epoch from this machine's clock;
 * there is only one machine, so there is no skew to guard against.
 *
 * Idle workers are woken by enqueues without polling the file in a tight
 * loop (sqlite_listen): every commit writes the -wal file, which inotify
 * watches; a write is confirmed as another connection's insert by
 * PRAGMA data_version and the tq_jobs sequence, so plain-SQL producers
 * wake workers too.
 */
#include "sqlite_int.h"

/* clang-format off */
const char *const tq__sqlite_sql_sqlite[S_COUNT] = {
    [S_DATA_VERSION] = "PRAGMA data_version",
};
/* clang-format on */

/* ---- busy handling ------------------------------------------------------ */

/*
 * Sleeps between attempts to take the write lock: 500us doubling to 16ms,
 * with jitter so that many waiting processes do not wake in step. Gives up
 * after busy_timeout_ms. Every call is one "busy retry" in tq bench.
 *
 * Why so long: a durable commit holds the lock ~0.3ms here, so with W
 * waiters the expected wait is about W * 0.3ms. Short sleeps (50us to 2ms
 * was measured) make the waiters steal CPU from the lock holder on a small
 * machine: 8 workers fell to 0.6x the plain reference (bench/workers.sh);
 * with these sleeps they reach 1.3x. Measure again before changing them.
 */
static int busy_handler(void *arg, int count)
{
    conn *c = arg;
    int64_t now = tq__mono_us();
    if (count == 0)
        c->busy_started = now;
    else if (now - c->busy_started >= (int64_t)c->busy_timeout_ms * 1000)
        return 0;
    c->db->busy_retries++;
    int64_t us = 500LL << (count < 6 ? count : 6);
    if (us > 16000)
        us = 16000;
    us = us / 2 + (int64_t)(tq__random() * (double)(us / 2));
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
    return 1;
}

/* ---- open, close, init ------------------------------------------------- */

static void sqlite_close(tq *db)
{
    conn *c = C(db);
    if (!c)
        return;
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(c->stmt[i]);
    if (!c->borrowed)
        sqlite3_close(c->h);
    if (c->notify_fd >= 0)
        close(c->notify_fd);
    free(c);
    db->conn = NULL;
}

/* A store path whose directory is missing: "directory 'D' does not
 * exist" into buf and 1 (tq init would not help: it creates the file, not
 * its directory); else 0. */
static int missing_dir(const char *path, char *buf, size_t len)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path || (size_t)(slash - path) >= sizeof dir)
        return 0;
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    struct stat st;
    if (stat(dir, &st) == 0 || errno != ENOENT)
        return 0;
    snprintf(buf, len, "directory '%s' does not exist", dir);
    return 1;
}

/* Creates the file with mode 0600 so that the store, and the -wal and -shm
 * files SQLite derives from its mode, are private to their owner. */
static int create_private(tq *db, const char *path)
{
    char why[4200];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == EEXIST)
        return 0;
    if (errno == ENOENT && missing_dir(path, why, sizeof why))
        return tq__seterr(db, TQ_ECONN, "cannot create the store '%s': %s", path, why);
    return tq__seterr(db, TQ_ECONN, "cannot create the store '%s': %s", path,
                      strerror(errno));
}

/* The caller's connection h as the store url names (tq_open_opts.conn): the
 * same file, or TQ_EINVAL. Its settings are left as the caller made them. */
static int borrow_open(tq *db, const tq__url *url, sqlite3 *h)
{
    conn *c = C(db);
    const char *file = sqlite3_db_filename(h, "main");
    struct stat mine, named;
    if (!file || !*file || stat(file, &mine) != 0 || stat(url->path, &named) != 0 ||
        mine.st_dev != named.st_dev || mine.st_ino != named.st_ino)
        return tq__seterr(db, TQ_EINVAL,
                          "the connection given (tq_open_opts.conn) is not to the store "
                          "'%s'",
                          url->path);
    c->h = h;
    c->borrowed = 1;
    c->dev = mine.st_dev;
    c->ino = mine.st_ino;
    return 0;
}

static int sqlite_in_caller_tx(tq *db)
{
    return C(db)->borrowed && !sqlite3_get_autocommit(C(db)->h);
}

/* A claim names the rows it picked as one JSON array (json_each,
 * S_CLAIM_MARK): built into SQLite from 3.38 unless left out
 * (SQLITE_OMIT_JSON), in 3.35 to 3.37 only with SQLITE_ENABLE_JSON1. Said
 * at open rather than at the first claim, which would stop the worker. */
static int check_json(tq *db)
{
    sqlite3_stmt *s = NULL;
    int src =
        sqlite3_prepare_v2(C(db)->h, "SELECT value FROM json_each('[]')", -1, &s, NULL);
    sqlite3_finalize(s);
    return src == SQLITE_OK
               ? 0
               : tq__seterr(db, TQ_ENOTSUP,
                            "this SQLite (%s) has no JSON functions (json_each), which "
                            "tq's claims need: use SQLite 3.38 or later, or one built "
                            "with SQLITE_ENABLE_JSON1",
                            sqlite3_libversion());
}

static int sqlite_open(tq *db, const tq__url *url, int create, void *borrow)
{
    int rc;
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    c->db = db;
    c->busy_timeout_ms = url->busy_timeout_ms;
    c->notify_fd = c->notify_wd = -1;
    db->conn = c;
    if (borrow) {
        if ((rc = borrow_open(db, url, borrow)) || (rc = check_json(db)))
            sqlite_close(db);
        return rc;
    }

    if (create && (rc = create_private(db, url->path)))
        goto fail;
    int src = sqlite3_open_v2(url->path, &c->h,
                              SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        struct stat st;
        char why[4200];
        if (missing_dir(url->path, why, sizeof why))
            rc = tq__seterr(db, TQ_ECONN, "no store at '%s': %s", url->path, why);
        else if (stat(url->path, &st) != 0)
            rc = tq__seterr(db, TQ_ECONN, "no store at '%s' (%s): create it with tq init",
                            url->path, strerror(errno));
        else
            rc = tq__seterr(db, TQ_ECONN, "cannot open the store '%s': %s", url->path,
                            c->h ? sqlite3_errmsg(c->h) : sqlite3_errstr(src));
        goto fail;
    }
    sqlite3_extended_result_codes(c->h, 1);
    sqlite3_busy_handler(c->h, busy_handler, c);
    struct stat st;
    if (stat(url->path, &st) == 0) {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
    }
    /* A -wal file that grew behind a reader (TQ__WAL_LIMIT) shrinks back to
     * the limit at the first commit after the log restarts. */
    char pragmas[160];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA synchronous = %s; PRAGMA foreign_keys = OFF;"
             " PRAGMA journal_size_limit = %lld;",
             url->sync_normal ? "NORMAL" : "FULL", (long long)TQ__WAL_LIMIT);
    src = sqlite3_exec(c->h, pragmas, NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        rc = tq__sqlite_fail_rc(db, src, "configuring the connection");
        goto fail;
    }
    if ((rc = check_json(db)))
        goto fail;
    return 0;
fail:
    sqlite_close(db);
    return rc;
}

/* ---- wake-ups ------------------------------------------------------------ */

/* Other connections' commits so far (data_version), and the jobs ever
 * inserted (the sequence). */
static int data_version(tq *db, int64_t *out)
{
    return tq__sqlite_query_int(db, S_DATA_VERSION, NULL, 0, out,
                                "reading the data version");
}

static int jobs_seq(tq *db, int64_t *out)
{
    return tq__sqlite_query_int(db, S_JOBS_SEQ, NULL, 0, out, "reading the job sequence");
}

/* Watches the -wal file, which every commit writes. (It exists while any
 * connection has the store open in WAL mode, ours included; should it be
 * replaced, the watch is made again: see sqlite_notify_drain.) */
static int watch_wal(tq *db)
{
    conn *c = C(db);
    const char *wal = sqlite3_filename_wal(sqlite3_db_filename(c->h, "main"));
    if (!wal || !*wal)
        return tq__seterr(db, TQ_ENOTSUP, "a store in memory has no file to watch");
    c->notify_wd = inotify_add_watch(c->notify_fd, wal, IN_MODIFY);
    if (c->notify_wd < 0)
        return tq__seterr(db, TQ_ESYS, "cannot watch '%s': %s", wal, strerror(errno));
    return 0;
}

static int sqlite_listen(tq *db)
{
    conn *c = C(db);
    if (c->notify_fd < 0 && (c->notify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
        return tq__seterr(db, TQ_ESYS, "inotify: %s", strerror(errno));
    if (c->notify_wd < 0) {
        int rc = watch_wal(db);
        if (rc)
            return rc;
    }
    c->look_at = 0;
    int rc = data_version(db, &c->seen_version);
    return rc ? rc : jobs_seq(db, &c->seen_seq);
}

static int sqlite_notify_fd(tq *db)
{
    return C(db)->notify_fd;
}

/*
 * A write to the -wal file is seen before the commit it belongs to is
 * visible: the writer syncs the file, then publishes the commit in the
 * shared index, which no event reports. So a write with nothing new to see
 * is looked at again 1, 2, 4, ... 64 ms later (own commits, which
 * data_version does not count, cost those few looks too); a commit of
 * another connection's with no insert in it (an acknowledgement, a
 * heartbeat) ends the looking.
 */
static int sqlite_notify_drain(tq *db, const char *const *queues, size_t nqueues,
                               int *count, int *changed, int64_t *again_us)
{
    conn *c = C(db);
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int wrote = 0, gone = 0;
    ssize_t n;
    (void)queues; /* an insert is not told by queue: any of them wakes */
    (void)nqueues;
    *count = *changed = 0;
    *again_us = 0;
    if (c->notify_fd < 0)
        return 0;
    while ((n = read(c->notify_fd, buf, sizeof buf)) > 0)
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            wrote |= (e->mask & (IN_MODIFY | IN_Q_OVERFLOW)) != 0;
            gone |= (e->mask & IN_IGNORED) != 0;
            p += sizeof *e + e->len;
        }
    if (gone) { /* the file went (a checkpoint that deleted it): watch the new one */
        c->notify_wd = -1;
        wrote = 1;
        if (watch_wal(db))
            tq__clearerr(db); /* polling covers it until the next listen */
    }
    const int64_t now = tq__mono_us();
    if (wrote) {
        c->look_at = now;
        c->look_step = 0;
    }
    if (!c->look_at)
        return 0;
    if (now < c->look_at) {
        *again_us = c->look_at - now;
        return 0;
    }
    int64_t version, seq;
    int rc = data_version(db, &version);
    if (rc)
        return rc;
    if (version != c->seen_version) { /* another connection committed */
        c->seen_version = version;
        c->look_at = 0;
        *changed = 1;
        if ((rc = jobs_seq(db, &seq)))
            return rc;
        if (seq > c->seen_seq)
            *count = seq - c->seen_seq > 1000 ? 1000 : (int)(seq - c->seen_seq);
        c->seen_seq = seq;
        return 0;
    }
    if (c->look_step < 7) { /* not visible yet, or our own */
        c->look_at = now + (1000LL << c->look_step++);
        *again_us = c->look_at - now;
    } else {
        c->look_at = 0;
    }
    return 0;
}

const char *tq__sqlite_claim_sql(tq_order order, int kind)
{
    return tq__claim_known(order, kind, TQ__CLAIM_ROOM)
               ? tq__sqlite_sql(tq__sqlite_claim_id(order, kind))
               : NULL;
}

const char *tq__sqlite_group_index_sql(void)
{
    return tq__sqlite_sql(S_GROUP_INDEX);
}

const char *tq__sqlite_claim_mark_sql(void)
{
    return tq__sqlite_sql(S_CLAIM_MARK);
}

const char *tq__sqlite_ack_sql(void)
{
    return tq__sqlite_sql(S_DONE);
}

/*
 * A store file deleted, or replaced by another (a restore, a `tq init`
 * after rm), while a connection has it open: SQLite goes on with the file
 * it opened, which nobody else sees any more. What the path names now is
 * compared with what was opened.
 */
/* A passive checkpoint: copies what no reader's snapshot holds back, waits
 * for nobody. (Another connection's checkpoint under way: nothing known.) */
static int sqlite_checkpoint(tq *db, tq_wal_info *out)
{
    conn *c = C(db);
    int frames = 0, backfilled = 0;
    *out = (tq_wal_info){0};
    int src = sqlite3_wal_checkpoint_v2(c->h, "main", SQLITE_CHECKPOINT_PASSIVE, &frames,
                                        &backfilled);
    if (src == SQLITE_BUSY || frames < 0)
        return 0;
    if (src != SQLITE_OK)
        return tq__sqlite_fail_rc(db, src, "checkpointing the store");
    char wal[4200];
    struct stat st;
    snprintf(wal, sizeof wal, "%s-wal", sqlite3_db_filename(c->h, "main"));
    out->bytes = stat(wal, &st) == 0 ? (int64_t)st.st_size : 0;
    out->frames = frames;
    out->backfilled = backfilled;
    out->held = frames > TQ__WAL_HELD_FRAMES && backfilled < frames;
    return 0;
}

static int sqlite_same_store(tq *db)
{
    conn *c = C(db);
    const char *path = sqlite3_db_filename(c->h, "main");
    struct stat st;
    if (!path || !*path || !c->ino)
        return 0; /* in memory: nothing to lose */
    if (stat(path, &st) != 0)
        return errno == ENOENT
                   ? tq__seterr(db, TQ_ECONN, "the store '%s' was deleted while in use",
                                path)
                   : 0;
    if (st.st_dev != c->dev || st.st_ino != c->ino)
        return tq__seterr(db, TQ_ECONN,
                          "the store '%s' was replaced by another file while in use",
                          path);
    return 0;
}

static int sqlite_clock(tq *db, int64_t *now_us)
{
    (void)db;
    *now_us = tq__now_us();
    return 0;
}

const struct tq__engine tq__engine_sqlite = {
    .name = "sqlite",
    .caps = TQ__CAP_NOTIFY,
    .open = sqlite_open,
    .close = sqlite_close,
    .init = tq__sqlite_init,
    .schema_version = tq__sqlite_schema_version,
    .in_caller_tx = sqlite_in_caller_tx,
    .queue_set = tq__sqlite_queue_set,
    .queue_get = tq__sqlite_queue_get,
    .queue_list = tq__sqlite_queue_list,
    .enqueue = tq__sqlite_enqueue,
    .exchange = tq__sqlite_exchange,
    .rescue = tq__sqlite_rescue,
    .peek = tq__sqlite_peek,
    .pending = tq__sqlite_pending,
    .pending_due = tq__sqlite_pending_due,
    .job_get = tq__sqlite_job_get,
    .job_result = tq__sqlite_job_result,
    .job_list = tq__sqlite_job_list,
    .job_parents = tq__sqlite_job_parents,
    .job_retry = tq__sqlite_job_retry,
    .job_cancel = tq__sqlite_job_cancel,
    .prune = tq__sqlite_prune,
    .retire = tq__sqlite_retire,
    .worker_prune = tq__sqlite_worker_prune,
    .stats = tq__sqlite_stats,
    .active = tq__sqlite_active,
    .durations = tq__sqlite_durations,
    .count_jobs = tq__sqlite_count_jobs,
    .finished_since = tq__sqlite_finished_since,
    .worker_register = tq__sqlite_worker_register,
    .worker_beat = tq__sqlite_worker_beat,
    .worker_stop = tq__sqlite_worker_stop,
    .worker_list = tq__sqlite_worker_list,
    .same_store = sqlite_same_store,
    .checkpoint = sqlite_checkpoint,
    .listen = sqlite_listen,
    .notify_fd = sqlite_notify_fd,
    .notify_drain = sqlite_notify_drain,
    .clock = sqlite_clock,
    .schedule_put = tq__sqlite_schedule_put,
    .schedule_remove = tq__sqlite_schedule_remove,
    .schedule_list = tq__sqlite_schedule_list,
    .schedule_fire = tq__sqlite_schedule_fire,
};
