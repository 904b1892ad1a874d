/*
 * api.c - the public API's entry points (tq.h) but the worker pool's, and
 * the rules no engine owns: opening a store, validating every input before
 * it reaches an engine, backoff, and the single-job acknowledgement calls.
 * Called by users of tq.h (the tool, embedding programs) and, for claims
 * and acks, by the worker pool (worker/).
 */
#include "cron.h"
#include "control.h"
#include "engine/engine.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct tq__engine *engine_for(tq__engine_kind kind)
{
    switch (kind) {
    case TQ__SQLITE:
        return &tq__engine_sqlite;
    case TQ__POSTGRES:
#ifdef TQ_WITH_POSTGRES
        return &tq__engine_postgres;
#else
        return NULL;
#endif
    }
    return NULL;
}

/* The schema-version rule, for both engines: a store newer than this build
 * is never touched; outside tq init, an older one (or none) is refused. */
static int check_version(tq *db, int version, int for_init)
{
    if (version > TQ__SCHEMA_VERSION)
        return tq__seterr(db, TQ_ESCHEMA,
                          "the store has schema version %d, newer than this tq (%d): "
                          "upgrade tq",
                          version, TQ__SCHEMA_VERSION);
    if (for_init)
        return 0;
    if (version == 0)
        return tq__seterr(db, TQ_ESCHEMA,
                          "the store has no tq schema: run tq init first");
    if (version < TQ__SCHEMA_VERSION)
        return tq__seterr(db, TQ_ESCHEMA,
                          "the store has schema version %d, older than this tq (%d): run "
                          "tq init to upgrade it",
                          version, TQ__SCHEMA_VERSION);
    return 0;
}

/*
 * Whether db is a handle that tq_open opened: 0, its last error cleared;
 * else TQ_EINVAL (a NULL handle, or one whose open failed), with the
 * reason in tq_errmsg where there is a handle to hold it. Every public
 * call that uses the store starts with it (USABLE), so that a failed or
 * NULL handle gets an error, never a crash.
 */
#define NOT_OPEN "the store is not open"
int tq__usable(tq *db)
{
    if (!db)
        return TQ_EINVAL;
    if (db->engine && db->conn) {
        tq__clearerr(db);
        return 0;
    }
    if (strncmp(db->errmsg, NOT_OPEN, strlen(NOT_OPEN)) != 0) {
        char why[sizeof db->errmsg];
        memcpy(why, db->errmsg, sizeof why);
        tq__seterr(db, TQ_EINVAL, NOT_OPEN " (tq_open failed%s%.900s)",
                   why[0] ? ": " : "", why);
    }
    return TQ_EINVAL;
}
#define USABLE(db)                                                                       \
    do {                                                                                 \
        int usable_rc_ = tq__usable(db);                                                 \
        if (usable_rc_)                                                                  \
            return usable_rc_;                                                           \
    } while (0)

/* USABLE, and job is a claimed job (a tq_job_claim's): TQ_EINVAL if not. */
#define CLAIMED(db, job)                                                                 \
    do {                                                                                 \
        USABLE(db);                                                                      \
        if (!(job) || !(job)->worker || !(job)->queue)                                   \
            return tq__seterr(db, TQ_EINVAL, "not a claimed job");                       \
    } while (0)

int tq_open(tq **out, const char *url, const tq_open_opts *opts)
{
    tq__url u;
    tq *db = calloc(1, sizeof *db);
    *out = db;
    if (!db)
        return TQ_ENOMEM;
    db->payload_max = TQ_PAYLOAD_MAX_DEFAULT;
    tq__url_redact(db->name, sizeof db->name, url ? url : "");
    int rc = tq__url_parse(&u, db, url);
    if (rc)
        goto done;
    db->engine = engine_for(u.kind);
    if (!db->engine) {
        rc = tq__seterr(db, TQ_ENOTSUP, "this build of tq has no PostgreSQL engine");
        goto done;
    }
    void *borrow = opts && opts->version >= 2 ? opts->conn : NULL;
    rc = db->engine->open(db, &u, opts && opts->create, borrow);
    db->borrowed = borrow != NULL;
    if (rc) {
        db->engine = NULL; /* nothing to close */
        goto done;
    }
    if (!(opts && opts->create)) {
        int version = 0;
        if (!(rc = db->engine->schema_version(db, &version)))
            rc = check_version(db, version, 0);
        if (rc) {
            db->engine->close(db);
            db->engine = NULL;
            goto done;
        }
    }
    tq__clearerr(db);
done:
    tq__url_free(&u);
    return rc;
}

void tq_close(tq *db)
{
    if (!db)
        return;
    if (db->engine && db->conn)
        db->engine->close(db);
    free(db);
}

const char *tq_engine_name(const tq *db)
{
    return db && db->engine ? db->engine->name : "none";
}

int tq_schema_version(void)
{
    return TQ__SCHEMA_VERSION;
}

const char *tq_store_name(const tq *db)
{
    return db ? db->name : "";
}

int tq_init(tq *db)
{
    return tq_init_grants(db, NULL, 0);
}

int tq_init_grants(tq *db, const tq_grant *grants, size_t n)
{
    USABLE(db);
    for (size_t i = 0; i < n; i++)
        if (!grants[i].role || !grants[i].role[0] ||
            (grants[i].kind != TQ_GRANT_PRODUCER && grants[i].kind != TQ_GRANT_WORKER))
            return tq__seterr(db, TQ_EINVAL, "grant %zu: a role name and a kind", i + 1);
    int found = 0, rc = db->engine->init(db, grants, n, &found);
    return rc == TQ_ESCHEMA && found ? check_version(db, found, 1) : rc;
}

/* ---- queues ------------------------------------------------------------ */

/* A queue's or a schedule's name (what), as tq_name_check wants it. */
static int check_name(tq *db, const char *what, const char *name)
{
    if (tq_name_check(name))
        return tq__seterr(db, TQ_EINVAL,
                          "invalid %s name '%.80s': use 1 to 64 letters, "
                          "digits, '_', '.' or '-'",
                          what, name ? name : "(null)");
    return 0;
}

static int check_queue_name(tq *db, const char *name)
{
    return check_name(db, "queue", name);
}

/* Bounds that keep every computed time inside int64 microseconds. */
#define MAX_DURATION_US (3650LL * 86400 * 1000000) /* ten years */
/* The settings a caller of tq_queue_opts version 4 or older cannot set. */
#define NEW_IN_5 (TQ_SET_TIMEOUT | TQ_SET_RETAIN_DONE | TQ_SET_RETAIN_DEAD)

static int bad_retention(int64_t us)
{
    return us != 0 && (us < 1000000 || us > MAX_DURATION_US);
}

int tq_queue_set(tq *db, const char *name, const tq_queue_opts *o)
{
    tq_queue_opts none = TQ_QUEUE_OPTS_INIT;
    USABLE(db);
    int rc = check_queue_name(db, name);
    if (rc)
        return rc;
    if (!o)
        o = &none;
    if ((o->set & TQ_SET_ORDER) && !tq_order_name(o->order))
        return tq__seterr(db, TQ_EINVAL, "unknown queue order %d", (int)o->order);
    if ((o->set & TQ_SET_LEASE) &&
        (o->lease_us < 1000000 || o->lease_us > MAX_DURATION_US))
        return tq__seterr(db, TQ_EINVAL, "lease must be between 1s and 3650d");
    if ((o->set & TQ_SET_MAX_ATTEMPTS) && (o->max_attempts < 1 || o->max_attempts > 1000))
        return tq__seterr(db, TQ_EINVAL, "max attempts must be between 1 and 1000");
    if (o->set & TQ_SET_BACKOFF) {
        if (o->backoff_base_us < 0 || o->backoff_base_us > MAX_DURATION_US ||
            o->backoff_cap_us < 0 || o->backoff_cap_us > MAX_DURATION_US)
            return tq__seterr(db, TQ_EINVAL, "backoff must be between 0 and 3650d");
        if (o->backoff_cap_us < o->backoff_base_us)
            return tq__seterr(db, TQ_EINVAL, "backoff cap is smaller than its base");
    }
    /* An older caller's struct ends before the fields its version lacks:
     * those are never read, and never set. */
    tq_queue_opts v = TQ_QUEUE_OPTS_INIT;
    if (o->version >= 5) {
        v = *o;
    } else if (o->version == 4) {
        memcpy(&v, o, offsetof(tq_queue_opts, timeout_us));
        v.set &= ~(unsigned)NEW_IN_5;
    } else if (o->version == 3) {
        memcpy(&v, o, offsetof(tq_queue_opts, max_snoozes));
        v.set &= ~(unsigned)(TQ_SET_MAX_SNOOZES | NEW_IN_5);
    } else if (o->version == 2) {
        memcpy(&v, o, offsetof(tq_queue_opts, rate_limit));
        v.set &= ~(unsigned)(TQ_SET_RATE | TQ_SET_MAX_SNOOZES | NEW_IN_5);
    } else {
        memcpy(&v, o, offsetof(tq_queue_opts, max_running));
        v.set &= ~(unsigned)(TQ_SET_MAX_RUNNING | TQ_SET_MAX_RUNNING_PER_GROUP |
                             TQ_SET_RATE | TQ_SET_MAX_SNOOZES | NEW_IN_5);
    }
    v.version = TQ_QUEUE_OPTS_VERSION;
    if (((v.set & TQ_SET_MAX_RUNNING) &&
         (v.max_running < 0 || v.max_running > 1000000)) ||
        ((v.set & TQ_SET_MAX_RUNNING_PER_GROUP) &&
         (v.max_running_per_group < 0 || v.max_running_per_group > 1000000)))
        return tq__seterr(db, TQ_EINVAL,
                          "a concurrency limit must be between 0 (none) and 1000000");
    if ((v.set & TQ_SET_RATE) &&
        (v.rate_limit < 0 || v.rate_limit > 1000000000 ||
         (v.rate_limit > 0 &&
          (v.rate_period_us < 1000 || v.rate_period_us > MAX_DURATION_US))))
        return tq__seterr(db, TQ_EINVAL,
                          "a rate limit must be 0 (none) to 1000000000 jobs per 1ms to "
                          "3650d");
    if ((v.set & TQ_SET_MAX_SNOOZES) && (v.max_snoozes < 0 || v.max_snoozes > 1000000))
        return tq__seterr(db, TQ_EINVAL, "max snoozes must be between 0 and 1000000");
    if ((v.set & TQ_SET_TIMEOUT) && (v.timeout_us < 0 || v.timeout_us > MAX_DURATION_US))
        return tq__seterr(db, TQ_EINVAL, "a timeout must be between 0 (none) and 3650d");
    if (((v.set & TQ_SET_RETAIN_DONE) && bad_retention(v.retain_done_us)) ||
        ((v.set & TQ_SET_RETAIN_DEAD) && bad_retention(v.retain_dead_us)))
        return tq__seterr(
            db, TQ_EINVAL,
            "a retention must be 0 (kept until pruned) or between 1s and 3650d");
    return db->engine->queue_set(db, name, &v);
}

int tq_queue_get(tq_queue_info *out, tq *db, const char *name)
{
    USABLE(db);
    int rc = check_queue_name(db, name);
    return rc ? rc : db->engine->queue_get(db, name, out);
}

int tq_queue_list(tq_queue_info **out, size_t *out_n, tq *db)
{
    USABLE(db);
    *out = NULL;
    *out_n = 0;
    return db->engine->queue_list(db, out, out_n);
}

/* ---- enqueue ----------------------------------------------------------- */

static int check_enqueue(tq *db, const char *queue, const tq_enqueue_opts *o)
{
    int rc = check_queue_name(db, queue);
    if (rc)
        return rc;
    if (o->key && (strlen(o->key) < 1 || strlen(o->key) > 255))
        return tq__seterr(db, TQ_EINVAL, "dedup key must be 1 to 255 bytes");
    if (o->group && (strlen(o->group) < 1 || strlen(o->group) > 255))
        return tq__seterr(db, TQ_EINVAL, "group must be 1 to 255 bytes");
    if (o->delay_us < 0 || o->delay_us > MAX_DURATION_US)
        return tq__seterr(db, TQ_EINVAL, "delay must be between 0 and 3650d");
    if (o->run_at < 0 || o->run_at > 253402300799LL * 1000000)
        return tq__seterr(db, TQ_EINVAL, "run-at time out of range");
    if (o->max_attempts < 0 || o->max_attempts > 1000)
        return tq__seterr(db, TQ_EINVAL,
                          "max attempts must be between 1 and 1000 (0: the queue's)");
    if (o->priority < -1000000 || o->priority > 1000000)
        return tq__seterr(db, TQ_EINVAL, "priority must be between -1000000 and 1000000");
    if ((unsigned)o->unique > TQ_UNIQUE_ACTIVE)
        return tq__seterr(db, TQ_EINVAL, "unknown uniqueness %d", (int)o->unique);
    if ((unsigned)o->on_conflict > TQ_ON_CONFLICT_REPLACE)
        return tq__seterr(db, TQ_EINVAL, "unknown on-conflict action %d",
                          (int)o->on_conflict);
    if (o->unique_for_us < 0 || o->unique_for_us > MAX_DURATION_US)
        return tq__seterr(db, TQ_EINVAL, "unique-for must be between 0 and 3650d");
    if (o->timeout_us < 0 || o->timeout_us > MAX_DURATION_US)
        return tq__seterr(db, TQ_EINVAL,
                          "a timeout must be between 0 (the queue's) and 3650d");
    if (o->traceparent && tq_traceparent_check(o->traceparent))
        return tq__seterr(db, TQ_EINVAL,
                          "invalid traceparent '%.80s': expected "
                          "00-<32 hex digits>-<16 hex digits>-<2 hex digits>, "
                          "lowercase, ids not all zero",
                          o->traceparent);
    if (!o->key && (o->unique || o->unique_for_us || o->on_conflict))
        return tq__seterr(db, TQ_EINVAL, "uniqueness and on-conflict options need a key");
    if (o->nafter && !o->after)
        return tq__seterr(db, TQ_EINVAL, "%zu parents without their ids", o->nafter);
    if (o->nafter > TQ_AFTER_MAX)
        return tq__seterr(db, TQ_EINVAL, "%zu parents: a job may have at most %d",
                          o->nafter, TQ_AFTER_MAX);
    if (o->nafter && o->key)
        return tq__seterr(db, TQ_EINVAL, "a job with parents cannot carry a key");
    if (o->after_ended && !o->nafter)
        return tq__seterr(db, TQ_EINVAL, "waiting for the parents' end needs parents");
    for (size_t i = 0; i < o->nafter; i++)
        if (o->after[i] <= 0)
            return tq__seterr(db, TQ_EINVAL, "parent id %lld: ids are positive",
                              (long long)o->after[i]);
    return 0;
}

static int cmp_id(const void *a, const void *b);

/* o's parents ascending and distinct, as the engines take them: a copy in
 * *mine (freed by the caller) when they were not already. */
static int sort_after(tq *db, tq_enqueue_opts *o, int64_t **mine)
{
    *mine = NULL;
    size_t i = 1;
    while (i < o->nafter && o->after[i - 1] < o->after[i])
        i++;
    if (i >= o->nafter)
        return 0;
    int64_t *v = malloc(o->nafter * sizeof *v);
    if (!v)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    memcpy(v, o->after, o->nafter * sizeof *v);
    qsort(v, o->nafter, sizeof *v, cmp_id);
    size_t n = 1;
    for (size_t k = 1; k < o->nafter; k++)
        if (v[k] != v[n - 1])
            v[n++] = v[k];
    o->after = *mine = v;
    o->nafter = n;
    return 0;
}

/* The caller's options as this version's struct: the fields an older
 * caller's struct lacks keep their defaults. */
static tq_enqueue_opts enqueue_opts(const tq_enqueue_opts *given)
{
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    if (!given)
        return o;
    if (given->version >= 6) {
        o = *given;
    } else if (given->version == 5) {
        memcpy(&o, given, offsetof(tq_enqueue_opts, after_ended));
    } else if (given->version == 4) {
        memcpy(&o, given, offsetof(tq_enqueue_opts, timeout_us));
    } else if (given->version == 3) {
        memcpy(&o, given, offsetof(tq_enqueue_opts, after));
    } else if (given->version == 2) {
        memcpy(&o, given, offsetof(tq_enqueue_opts, group));
    } else {
        o.key = given->key;
        o.delay_us = given->delay_us;
        o.run_at = given->run_at;
        o.priority = given->priority;
        o.max_attempts = given->max_attempts;
    }
    o.version = TQ_ENQUEUE_OPTS_VERSION;
    return o;
}

static int check_payload(tq *db, const void *data, size_t len)
{
    if (!data && len)
        return tq__seterr(db, TQ_EINVAL, "a payload of %zu bytes without its bytes", len);
    if ((int64_t)len > db->payload_max)
        return tq__seterr(db, TQ_ETOOBIG,
                          "payload of %zu bytes is over the limit of %lld bytes", len,
                          (long long)db->payload_max);
    return 0;
}

int tq_job_enqueue(int64_t *out, tq *db, const char *queue, const void *payload,
                   size_t len, const tq_enqueue_opts *opts)
{
    tq_enqueue_opts o = enqueue_opts(opts);
    tq_payload item = {payload, len};
    int64_t id = 0, *after = NULL;
    int dup = 0;

    USABLE(db);
    int rc = check_enqueue(db, queue, &o);
    if (!rc)
        rc = check_payload(db, payload, len);
    if (!rc)
        rc = sort_after(db, &o, &after);
    /* A duplicate whose kept row was deleted between the engine's insert
     * and its look-up of the kept id (a delete-done acknowledgement, a
     * prune, on an engine where those run beside us) has no id to report:
     * the key is free again, so the insert is tried again. */
    for (int tries = 0; !rc; tries++) {
        rc = db->engine->enqueue(db, queue, &item, 1, &o, &id, &dup);
        /* Parents are locked (PostgreSQL): a deadlock with a worker
         * finishing them rolled everything back, and may be tried again. */
        if (rc == TQ_EBUSY && o.nafter && (db->engine->caps & TQ__CAP_NETWORK) &&
            tries < 5) {
            USABLE(db);
            rc = 0;
            continue;
        }
        if (rc || !dup || id != 0)
            break;
        if (tries == 100)
            rc = tq__seterr(db, TQ_EBUSY,
                            "the job kept under key '%s' kept vanishing; try again",
                            o.key);
    }
    free(after);
    if (rc && rc != TQ_EUNKNOWN)
        return rc;
    if (out) /* with TQ_EUNKNOWN: the id it has if it is stored */
        *out = id;
    return rc ? rc : dup == 2 ? TQ_REPLACED : dup ? TQ_DUP : 0;
}

int tq_job_enqueue_batch(int64_t *out, tq *db, const char *queue, const tq_payload *items,
                         size_t n, const tq_enqueue_opts *opts)
{
    tq_enqueue_opts o = enqueue_opts(opts);
    USABLE(db);
    if (o.key)
        return tq__seterr(db, TQ_EINVAL, "a batch enqueue cannot carry a dedup key");
    int rc = check_enqueue(db, queue, &o);
    if (rc)
        return rc;
    if (n && !items)
        return tq__seterr(db, TQ_EINVAL, "%zu jobs without their payloads", n);
    for (size_t i = 0; i < n; i++)
        if ((rc = check_payload(db, items[i].data, items[i].len)))
            return rc;
    if (n == 0)
        return 0;
    int64_t *after;
    if ((rc = sort_after(db, &o, &after)))
        return rc;
    if (o.nafter && n > (size_t)TQ_AFTER_MAX * 10 / o.nafter) {
        free(after);
        return tq__seterr(db, TQ_EINVAL,
                          "%zu jobs of %zu parents each: at most %d dependencies in one "
                          "batch",
                          n, o.nafter, TQ_AFTER_MAX * 10);
    }
    int64_t *ids = out ? out : malloc(n * sizeof *ids);
    if (!ids) {
        free(after);
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    }
    int dup = 0;
    for (int tries = 0; tries < 6; tries++) { /* as tq_job_enqueue says */
        rc = db->engine->enqueue(db, queue, items, n, &o, ids, &dup);
        if (rc != TQ_EBUSY || !o.nafter || !(db->engine->caps & TQ__CAP_NETWORK))
            break;
    }
    if (ids != out)
        free(ids);
    free(after);
    return rc;
}

/* ---- claims and acknowledgements -------------------------------------- */

int tq__job_out_of_attempts(const tq_job *j)
{
    return j->started_at == 0 && j->attempts >= j->max_attempts;
}

int tq_job_get(tq_job **out, tq *db, int64_t id)
{
    USABLE(db);
    *out = NULL;
    return db->engine->job_get(db, id, out);
}

/* Ends claimed jobs that may not run (tq__job_out_of_attempts) as failed,
 * unrun, and drops them from jobs. */
static int end_unrunnable(tq *db, const char *worker, tq_job *jobs, size_t *n)
{
    size_t kept = 0;
    int rc = 0;
    for (size_t i = 0; i < *n; i++) {
        if (!tq__job_out_of_attempts(&jobs[i])) {
            jobs[kept++] = jobs[i];
            continue;
        }
        char why[96];
        snprintf(why, sizeof why, "not run: its %d attempt(s) were used up",
                 jobs[i].max_attempts);
        tq__ack a = {
            .id = jobs[i].id, .claim = jobs[i].claim, .kind = TQ__ACK_FAIL, .error = why};
        if (!rc)
            rc = db->engine->exchange(db, worker, &a, 1, NULL, NULL, NULL);
        tq__job_clear(&jobs[i]);
    }
    *n = kept;
    return rc;
}

/*
 * What a handle on the caller's connection does not do inside the caller's
 * transaction: a claim there would hold the job (and a limited queue's
 * lock) until the caller commits, and a rollback would take back its claim
 * number, which a later claim would then reuse (the fence must never
 * repeat); a heartbeat there would not be seen until the caller commits.
 */
static int outside_caller_tx(tq *db, const char *what)
{
    return tq__seterr(db, TQ_EINVAL,
                      "%s cannot run inside the caller's transaction "
                      "(tq_open_opts.conn): make it outside one",
                      what);
}

int tq_job_claim(tq_job **out, size_t *out_n, tq *db, const char *queue,
                 const char *worker, size_t max)
{
    tq_queue_info q;
    *out = NULL;
    *out_n = 0;
    USABLE(db);
    if (!worker || !*worker || strlen(worker) > 127)
        return tq__seterr(db, TQ_EINVAL, "worker name must be 1 to 127 bytes");
    if (db->borrowed && db->engine->in_caller_tx(db))
        return outside_caller_tx(db, "a claim");
    int rc = tq_queue_get(&q, db, queue);
    if (rc == TQ_ENOTFOUND)
        return 0; /* no such queue: nothing ready */
    if (rc || q.paused || max == 0)
        return rc;
    /* A limit set since q was read: the plain claim takes nothing. */
    tq__claim c = {.queue = queue,
                   .order = q.order,
                   .lease_us = q.lease_us,
                   .max_attempts = q.max_attempts,
                   .max = max,
                   .start = 1};
    tq__claim_limits(&c, &q);
    tq_job *jobs = NULL;
    size_t n = 0;
    if ((rc = db->engine->exchange(db, worker, NULL, 0, &c, &jobs, &n)))
        return rc;
    tq__jobs_sort(jobs, n, q.order);
    if ((rc = end_unrunnable(db, worker, jobs, &n)) || n == 0) {
        tq_job_array_free(jobs, n);
        return rc;
    }
    *out = jobs;
    *out_n = n;
    return 0;
}

/* Applies one fenced ack for a job the caller claimed. */
static int ack_one(tq *db, const tq_job *job, tq__ack *a)
{
    USABLE(db);
    if (!job || !job->worker)
        return tq__seterr(db, TQ_EINVAL, "not a claimed job");
    int rc = db->engine->exchange(db, job->worker, a, 1, NULL, NULL, NULL);
    if (rc)
        return rc;
    if (a->result)
        return tq__seterr(db, a->result,
                          "job %lld is no longer held by worker '%s' under claim %lld",
                          (long long)job->id, job->worker, (long long)job->claim);
    return 0;
}

/* An ack carrying a text (kept as valid UTF-8, as the worker keeps it). */
static int ack_text(tq *db, const tq_job *job, tq__ack *a, const char *text)
{
    char *clean = text ? tq__utf8_clean(text) : NULL;
    if (text && !clean)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    a->error = clean;
    int rc = ack_one(db, job, a);
    free(clean);
    return rc;
}

static int queue_of(tq *db, const tq_job *job, tq_queue_info *q)
{
    int rc = tq_queue_get(q, db, job->queue);
    if (rc == TQ_ENOTFOUND) {
        tq__queue_defaults(q, job->queue);
        rc = 0;
    }
    return rc;
}

/* Done, with a result (output, len bytes) or without (output NULL). */
static int complete(tq *db, const tq_job *job, const void *output, size_t len)
{
    tq_queue_info q;
    int rc = queue_of(db, job, &q);
    if (rc)
        return rc;
    tq__ack a = {.id = job->id,
                 .claim = job->claim,
                 .kind = TQ__ACK_DONE,
                 .delete_done = !q.keep_done,
                 .output = output,
                 .output_len = len};
    return ack_one(db, job, &a);
}

int tq_job_complete(tq *db, const tq_job *job)
{
    CLAIMED(db, job);
    return complete(db, job, NULL, 0);
}

int tq_job_complete_result(tq *db, const tq_job *job, const void *data, size_t len)
{
    CLAIMED(db, job);
    if (!data && len)
        return tq__seterr(db, TQ_EINVAL, "a result of %zu bytes without its bytes", len);
    if (len > TQ_RESULT_MAX)
        return tq__seterr(db, TQ_ETOOBIG, "a result of %zu bytes is over the %d allowed",
                          len, TQ_RESULT_MAX);
    return complete(db, job, data ? data : "", len);
}

int tq_job_result(void **out, size_t *out_len, tq *db, int64_t id)
{
    int state;
    USABLE(db);
    *out = NULL;
    *out_len = 0;
    int rc = db->engine->job_result(db, id, out, out_len, &state);
    if (rc || *out)
        return rc;
    if (state < 0)
        return tq__seterr(db, TQ_ENOTFOUND, "no job with id %lld", (long long)id);
    if (state != TQ_DONE)
        return tq__seterr(db, TQ_ESTATE,
                          "job %lld is %s: a job has a result once it is done",
                          (long long)id, tq_state_name((tq_state)state));
    return tq__seterr(db, TQ_ESTATE,
                      "job %lld is done without a result (its queue keeps a command's "
                      "stdout only with tq queue Q --results)",
                      (long long)id);
}

int tq_job_parent_ends(tq_parent **out, size_t *out_n, tq *db, int64_t id)
{
    USABLE(db);
    *out = NULL;
    *out_n = 0;
    int rc = db->engine->job_parents(db, id, out, out_n);
    if (rc == TQ_ENOTFOUND)
        return tq__seterr(db, TQ_ENOTFOUND, "no job with id %lld", (long long)id);
    return rc;
}

int tq_job_parents(int64_t **out, size_t *out_n, tq *db, int64_t id)
{
    tq_parent *v;
    size_t n;
    *out = NULL;
    *out_n = 0;
    int rc = tq_job_parent_ends(&v, &n, db, id);
    if (rc || !n)
        return rc;
    int64_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; ids && i < n; i++)
        ids[i] = v[i].id;
    free(v);
    if (!ids)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    *out = ids;
    *out_n = n;
    return 0;
}

int tq_job_fail(tq *db, const tq_job *job, const char *error)
{
    CLAIMED(db, job);
    tq_queue_info q;
    int rc = queue_of(db, job, &q);
    if (rc)
        return rc;
    int64_t delay =
        tq__backoff_us(q.backoff_base_us, q.backoff_cap_us, job->attempts, tq__random());
    tq__ack a = {
        .id = job->id, .claim = job->claim, .kind = TQ__ACK_FAIL, .delay_us = delay};
    return ack_text(db, job, &a, error);
}

int tq_job_heartbeat(tq *db, const tq_job *job)
{
    CLAIMED(db, job);
    if (db->borrowed && db->engine->in_caller_tx(db))
        return outside_caller_tx(db, "a heartbeat");
    tq_queue_info q;
    int rc = queue_of(db, job, &q);
    if (rc)
        return rc;
    tq__ack a = {
        .id = job->id, .claim = job->claim, .kind = TQ__ACK_BEAT, .delay_us = q.lease_us};
    return ack_one(db, job, &a);
}

int tq_job_release(tq *db, const tq_job *job)
{
    CLAIMED(db, job);
    tq__ack a = {.id = job->id, .claim = job->claim, .kind = TQ__ACK_RELEASE};
    return ack_one(db, job, &a);
}

int tq_job_progress(tq *db, const tq_job *job, int pct, const char *text)
{
    CLAIMED(db, job);
    if (pct < 0 || pct > 100)
        return tq__seterr(db, TQ_EINVAL, "progress must be between 0 and 100");
    char cut[TQ__PROGRESS_TEXT_MAX + 1];
    if (text) {
        size_t n = tq__utf8_cut(text, strlen(text), TQ__PROGRESS_TEXT_MAX);
        memcpy(cut, text, n);
        cut[n] = '\0';
        text = cut;
    }
    tq__ack a = {.id = job->id, .claim = job->claim, .kind = TQ__ACK_PROGRESS};
    a.progress = pct;
    return ack_text(db, job, &a, text);
}

int tq_job_snooze(tq *db, const tq_job *job, int64_t delay_us)
{
    CLAIMED(db, job);
    if (delay_us < 0 || delay_us > TQ__SNOOZE_MAX_US)
        return tq__seterr(db, TQ_EINVAL, "a snooze must be between 0 and 365d");
    tq_queue_info q;
    int rc = queue_of(db, job, &q);
    if (rc)
        return rc;
    if (job->snoozes >= q.max_snoozes) {
        char why[200];
        tq__ctl_snooze_limit(why, sizeof why, job->snoozes, q.name);
        return tq_job_fail(db, job, why);
    }
    tq__ack a = {.id = job->id, .claim = job->claim, .kind = TQ__ACK_SNOOZE};
    a.delay_us = delay_us;
    return ack_one(db, job, &a);
}

int tq_job_discard(tq *db, const tq_job *job, const char *reason)
{
    CLAIMED(db, job);
    tq__ack a = {.id = job->id, .claim = job->claim, .kind = TQ__ACK_DISCARD};
    return ack_text(db, job, &a, reason && *reason ? reason : "discarded by its handler");
}

/* ---- management -------------------------------------------------------- */

/* A retry or cancel of n jobs changed nothing because of job id: why,
 * from the state the engine found it in (-1: none). */
static int why_unchanged(tq *db, int64_t id, int state, const char *action, size_t n)
{
    char rest[80] = "";
    if (n > 1)
        snprintf(rest, sizeof rest, "; none of the %zu jobs was %s", n,
                 strcmp(action, "cancel") == 0 ? "cancelled" : "retried");
    if (state < 0)
        return tq__seterr(db, TQ_ENOTFOUND, "no job with id %lld%s", (long long)id, rest);
    return tq__seterr(db, TQ_ESTATE, "job %lld is %s: cannot %s it%s", (long long)id,
                      tq_state_name((tq_state)state), action, rest);
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Retry or cancel of the jobs ids[], all or none: checked, sorted and
 * made distinct (naming a job twice is naming it), then one transaction. */
static int manage_ids(tq *db, const int64_t *ids, size_t n, int cancel)
{
    const char *action = cancel ? "cancel" : "retry";
    USABLE(db);
    if (n == 0 || !ids)
        return tq__seterr(db, TQ_EINVAL, "no job ids to %s", action);
    for (size_t i = 0; i < n; i++)
        if (ids[i] <= 0)
            return tq__seterr(db, TQ_EINVAL, "job ids are positive integers");
    int64_t *v = tq__memdup(ids, n * sizeof *ids, 0);
    if (!v)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    qsort(v, n, sizeof *v, cmp_id);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || v[i] != v[k - 1])
            v[k++] = v[i];
    int64_t changed = 0;
    size_t bad = 0;
    int state = -1;
    int rc = cancel ? db->engine->job_cancel(db, v, k, &changed, &bad, &state)
                    : db->engine->job_retry(db, v, k, NULL, &changed, &bad, &state);
    if (!rc && changed == 0)
        rc = why_unchanged(db, v[bad], state, action, k);
    free(v);
    return rc;
}

int tq_job_retry(tq *db, int64_t id)
{
    return manage_ids(db, &id, 1, 0);
}

int tq_job_retry_ids(tq *db, const int64_t *ids, size_t n)
{
    return manage_ids(db, ids, n, 0);
}

int tq_job_retry_dead(int64_t *out_count, tq *db, const char *queue)
{
    int64_t n = 0;
    size_t bad;
    USABLE(db);
    if (queue) {
        int rc = check_queue_name(db, queue);
        if (rc)
            return rc;
    }
    int state, rc = db->engine->job_retry(db, NULL, 0, queue, &n, &bad, &state);
    if (out_count)
        *out_count = n;
    return rc;
}

int tq_job_cancel(tq *db, int64_t id)
{
    return manage_ids(db, &id, 1, 1);
}

int tq_job_cancel_ids(tq *db, const int64_t *ids, size_t n)
{
    return manage_ids(db, ids, n, 1);
}

int tq_job_list(tq_job **out, size_t *out_n, tq *db, const tq_list_opts *opts)
{
    tq_list_opts o = TQ_LIST_OPTS_INIT;
    *out = NULL;
    *out_n = 0;
    USABLE(db);
    if (opts && opts->version >= 2)
        o = *opts;
    else if (opts) /* version 1 ends at limit */
        memcpy(&o, opts, offsetof(tq_list_opts, limit) + sizeof o.limit);
    o.version = TQ_LIST_OPTS_VERSION;
    if (o.before_id < 0)
        return tq__seterr(db, TQ_EINVAL, "before_id must not be negative");
    if (o.before_id == 0)
        o.before_id = INT64_MAX;
    if (o.queue) {
        int rc = check_queue_name(db, o.queue);
        if (rc)
            return rc;
    }
    if (o.state < -1 || o.state >= TQ_STATE_COUNT)
        return tq__seterr(db, TQ_EINVAL, "unknown job state %d", o.state);
    if (o.limit == 0)
        o.limit = 100;
    return db->engine->job_list(db, &o, out, out_n);
}

int tq_job_prune(int64_t *out_count, tq *db, int64_t older_than_us, unsigned state_mask)
{
    return tq_job_prune_batch(out_count, db, older_than_us, state_mask, 0);
}

int tq_job_prune_batch(int64_t *out_count, tq *db, int64_t older_than_us,
                       unsigned state_mask, int64_t limit)
{
    const unsigned finished = (1u << TQ_DONE) | (1u << TQ_DEAD) | (1u << TQ_CANCELLED);
    int64_t n = 0;
    USABLE(db);
    if (older_than_us < 0 || older_than_us > MAX_DURATION_US)
        return tq__seterr(db, TQ_EINVAL, "age must be between 0 and 3650d");
    if (state_mask == 0 || (state_mask & ~finished))
        return tq__seterr(db, TQ_EINVAL,
                          "only done, dead and cancelled jobs can be pruned");
    if (limit < 0)
        return tq__seterr(db, TQ_EINVAL, "a batch of %lld rows", (long long)limit);
    int rc = db->engine->prune(db, older_than_us, state_mask, limit, &n);
    if (out_count)
        *out_count = n;
    return rc;
}

int tq_rescue_expired(int64_t *out_count, tq *db)
{
    int64_t n = 0;
    USABLE(db);
    int rc = db->engine->rescue(db, NULL, 0, &n);
    if (out_count)
        *out_count = n;
    return rc;
}

/* ---- stats ------------------------------------------------------------- */

int tq_wal_check(tq_wal_info *out, tq *db)
{
    USABLE(db);
    if (!out)
        return tq__seterr(db, TQ_EINVAL, "no place for the answer");
    return db->engine->checkpoint(db, out);
}

int tq_stats_get(tq_stats *out, tq *db, const char *queue)
{
    int64_t *d = NULL;
    size_t n = 0;
    memset(out, 0, sizeof *out);
    USABLE(db);
    if (queue) {
        int rc = check_queue_name(db, queue);
        if (rc)
            return rc;
    }
    int rc = db->engine->stats(db, queue, out);
    if (!rc)
        rc = db->engine->durations(db, queue, 1000, &d, &n);
    if (!rc) {
        out->recent = n;
        out->p50_us = tq_percentile(d, n, 0.50);
        out->p95_us = tq_percentile(d, n, 0.95);
        out->max_us = n ? d[n - 1] : 0;
    }
    free(d);
    return rc;
}

int tq_job_durations(int64_t **out, size_t *out_n, tq *db, const char *queue,
                     size_t limit)
{
    *out = NULL;
    *out_n = 0;
    USABLE(db);
    if (queue) {
        int rc = check_queue_name(db, queue);
        if (rc)
            return rc;
    }
    return db->engine->durations(db, queue, limit, out, out_n);
}

int tq_count_jobs(tq_count **out, size_t *out_n, tq *db, tq_state state, int by_worker)
{
    *out = NULL;
    *out_n = 0;
    USABLE(db);
    if (!tq_state_name(state))
        return tq__seterr(db, TQ_EINVAL, "no such state: %d", (int)state);
    if (by_worker && state != TQ_RUNNING)
        return tq__seterr(db, TQ_EINVAL, "only running jobs are counted by worker");
    return db->engine->count_jobs(db, state, by_worker, out, out_n);
}

static int finished_cmp(const void *a, const void *b)
{
    const tq_finished *x = a, *y = b;
    if (x->finished_at != y->finished_at)
        return x->finished_at < y->finished_at ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Each finished state along its own index, merged: a read of what
 * finished in a window costs what is in the window. */
int tq_finished_since(tq_finished **out, size_t *out_n, tq *db, int64_t *at_us,
                      int64_t *after_id, int64_t settle_us, size_t limit)
{
    static const tq_state fin[] = {TQ_DONE, TQ_DEAD, TQ_CANCELLED};
    enum { NFIN = sizeof fin / sizeof fin[0] };
    *out = NULL;
    *out_n = 0;
    USABLE(db);
    if (settle_us < 0 || settle_us > MAX_DURATION_US)
        return tq__seterr(db, TQ_EINVAL, "settle time must be between 0 and 3650d");
    if (!limit)
        limit = 10000;
    if (limit > SIZE_MAX / sizeof(tq_finished) / NFIN)
        return tq__seterr(db, TQ_EINVAL, "limit too large");
    int64_t now;
    int rc = db->engine->clock(db, &now);
    if (rc)
        return rc;
    const int64_t upto = now - settle_us;
    if (*at_us > upto || (*at_us == upto && *after_id == INT64_MAX))
        return 0; /* nothing can have settled since */
    tq_finished *v = malloc(NFIN * limit * sizeof *v);
    if (!v)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    size_t n = 0;
    int full = 0;
    for (size_t i = 0; i < NFIN && !rc; i++) {
        size_t got = 0;
        rc = db->engine->finished_since(db, fin[i], *at_us, *after_id, upto, limit, v + n,
                                        &got);
        n += got;
        full |= got == limit;
    }
    if (rc) {
        free(v);
        return rc;
    }
    qsort(v, n, sizeof *v, finished_cmp);
    if (full) { /* a state may have more after its last: stop at the limit */
        n = limit;
        *at_us = v[n - 1].finished_at;
        *after_id = v[n - 1].id;
    } else {
        *at_us = upto;
        *after_id = INT64_MAX;
    }
    *out = v;
    *out_n = n;
    return 0;
}

int tq_worker_prune(int64_t *out_count, tq *db, int64_t older_than_us)
{
    int64_t n = 0;
    USABLE(db);
    if (older_than_us < 0 || older_than_us > MAX_DURATION_US)
        return tq__seterr(db, TQ_EINVAL, "age must be between 0 and 3650d");
    int rc = db->engine->worker_prune(db, older_than_us, &n);
    if (out_count)
        *out_count = n;
    return rc;
}

int tq_worker_list(tq_worker_info **out, size_t *out_n, tq *db)
{
    *out = NULL;
    *out_n = 0;
    USABLE(db);
    return db->engine->worker_list(db, out, out_n);
}

/* ---- periodic jobs ------------------------------------------------------ */

/* A schedule's spec and zone, parsed: 0, or TQ_EINVAL with why. */
static int schedule_rules(tq *db, const char *spec, const char *tz, tq__cron *c,
                          tq__zone **z)
{
    char why[200];
    if (tq__cron_parse(c, spec, why, sizeof why))
        return tq__seterr(db, TQ_EINVAL, "invalid schedule '%.130s': %s",
                          spec ? spec : "", why);
    if (tq__zone_load(z, tz, why, sizeof why))
        return tq__seterr(db, TQ_EINVAL, "%s", why);
    return 0;
}

int tq_schedule_set(tq *db, const char *name, const tq_schedule_opts *o)
{
    tq__cron c;
    tq__zone *z = NULL;
    int64_t now, next;
    USABLE(db);
    int rc = check_name(db, "schedule", name);
    if (rc)
        return rc;
    if (!o || o->version < 1)
        return tq__seterr(db, TQ_EINVAL, "a schedule needs its options (queue and spec)");
    if (o->payload_len > TQ_PAYLOAD_MAX_DEFAULT || (o->payload_len && !o->payload))
        return tq__seterr(db, TQ_EINVAL, "a schedule's payload is at most %d bytes",
                          TQ_PAYLOAD_MAX_DEFAULT);
    if ((rc = check_queue_name(db, o->queue)) ||
        (rc = schedule_rules(db, o->spec, o->tz, &c, &z)))
        return rc;
    if (!(rc = db->engine->clock(db, &now))) {
        next = tq__cron_next(&c, z, now);
        rc = next < 0
                 ? tq__seterr(db, TQ_EINVAL, "schedule '%s' has no slot ahead", o->spec)
                 : db->engine->schedule_put(db, name, o, next);
    }
    tq__zone_free(z);
    return rc;
}

int tq_schedule_remove(tq *db, const char *name)
{
    USABLE(db);
    int rc = check_name(db, "schedule", name);
    return rc ? rc : db->engine->schedule_remove(db, name);
}

int tq_schedule_list(tq_schedule **out, size_t *out_n, tq *db)
{
    *out = NULL;
    *out_n = 0;
    USABLE(db);
    return db->engine->schedule_list(db, out, out_n);
}

/* One schedule at now: its due slot enqueued (*job), and its next slot. A
 * schedule whose spec or zone does not read here (a zone missing from this
 * host's database) is TQ_EINVAL, saying which. */
static int run_schedule(tq *db, const tq_schedule *s, int64_t now, int64_t *job,
                        int64_t *next)
{
    tq__cron c;
    tq__zone *z = NULL;
    *job = 0;
    *next = s->next_slot_us;
    if (s->next_slot_us > now)
        return 0;
    if (schedule_rules(db, s->spec, s->tz, &c, &z)) {
        char why[sizeof db->errmsg];
        snprintf(why, sizeof why, "%s", tq_errmsg(db));
        *next = -1;
        return tq__seterr(db, TQ_EINVAL, "schedule '%s' not run: %.900s", s->name, why);
    }
    /* The most recent slot missed, not a burst of them (-1 when none is
     * due since next_slot, which a schedule set again keeps after its last
     * slot and need not be a slot: the schedule only moves on); then the
     * first after now. */
    int64_t slot = tq__cron_last(&c, z, s->next_slot_us, now);
    int64_t after = tq__cron_next(&c, z, now);
    tq__zone_free(z);
    if (after < 0) /* none in nine years: look again then */
        after = now + 9LL * 366 * 86400 * 1000000;
    *next = after;
    return db->engine->schedule_fire(db, s, slot, after, job);
}

int tq_schedule_run(tq *db, int64_t *out_enqueued, int64_t *out_next_us)
{
    tq_schedule *v;
    size_t n;
    int64_t now, soonest = -1, enqueued = 0;
    USABLE(db);
    int rc = db->engine->schedule_list(db, &v, &n);
    if (!rc && (rc = db->engine->clock(db, &now)))
        tq_schedule_array_free(v, n);
    if (rc)
        return rc;
    /* One schedule failing stops none of the others; the first failure
     * is the answer, its message kept. */
    char first[sizeof db->errmsg] = "";
    for (size_t i = 0; i < n; i++) {
        int64_t job = 0, next = -1;
        int one = run_schedule(db, &v[i], now, &job, &next);
        if (one && !rc) {
            rc = one;
            snprintf(first, sizeof first, "%s", tq_errmsg(db));
        }
        if (one == TQ_ECONN)
            break;
        enqueued += job != 0;
        if (next >= 0 && (soonest < 0 || next < soonest))
            soonest = next;
    }
    if (rc)
        tq__seterr(db, rc, "%s", first);
    tq_schedule_array_free(v, n);
    if (out_enqueued)
        *out_enqueued = enqueued;
    if (out_next_us)
        *out_next_us = soonest < 0 ? -1 : soonest > now ? soonest - now : 0;
    return rc;
}

int tq_schedule_next(int64_t *out_us, const char *spec, const char *tz, int64_t after_us,
                     char *msg, size_t msglen)
{
    tq__cron c;
    tq__zone *z = NULL;
    char why[200];
    if (tq__cron_parse(&c, spec, why, sizeof why) ||
        tq__zone_load(&z, tz, why, sizeof why)) {
        if (msglen)
            snprintf(msg, msglen, "%s", why);
        return TQ_EINVAL;
    }
    *out_us = tq__cron_next(&c, z, after_us);
    tq__zone_free(z);
    if (*out_us < 0) {
        if (msglen)
            snprintf(msg, msglen, "no slot within nine years");
        return TQ_EINVAL;
    }
    return 0;
}
