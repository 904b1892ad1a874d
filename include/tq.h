/*
 * tq.h - the public API of tq, a job queue that lives in a SQL table.
 *
 * A store is one database (a SQLite file or a PostgreSQL database) that
 * holds the tq tables. Producers enqueue jobs into named queues; workers
 * claim jobs, run them and acknowledge how they ended. Every acknowledgement
 * of a claimed job is fenced: it applies only while the row is still
 * running under the same claim (tq_job.claim, a token no later claim of the
 * row repeats) and worker name.
 *
 * Conventions used throughout:
 *  - Every fallible call returns int: 0 on success, a negative TQ_E* code
 *    on failure. A few calls return a positive informational code (TQ_DUP).
 *    tq_strerror() gives the static text of a code, tq_errmsg() the detailed
 *    message of the last failure on a handle.
 *  - Out-parameters come first and are named out.
 *  - Anything returned through a pointer-to-pointer is owned by the caller
 *    and released by its one matching *_free function, which accepts NULL.
 *  - String and byte arguments are borrowed for the duration of the call;
 *    the library copies whatever it keeps.
 *  - A tq handle is not thread-safe: use one handle per thread (or per
 *    process, which is what the worker pool does).
 *  - Times are microseconds since the Unix epoch (int64_t), durations are
 *    microseconds. All lease and schedule arithmetic uses the store's clock.
 */
#ifndef TQ_H
#define TQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TQ_VERSION "0.6.0"

/* Result codes. The one list of codes and their messages. */
#define TQ_ERRNO_MAP(X)                                                                  \
    X(EINVAL, -1, "invalid argument")                                                    \
    X(ENOMEM, -2, "out of memory")                                                       \
    X(EBUSY, -3, "the store is busy (lock timeout or serialization failure)")            \
    X(ELOST, -4, "lease lost: the job is no longer held by this worker")                 \
    X(ENOTFOUND, -5, "not found")                                                        \
    X(ESTATE, -6, "the job is not in a state that allows this")                          \
    X(ESCHEMA, -7, "the store has no tq schema or a newer one: run tq init")             \
    X(EDB, -8, "database error")                                                         \
    X(ECONN, -9, "cannot connect to the store")                                          \
    X(ETOOBIG, -10, "payload larger than the store's limit")                             \
    X(EINUSE, -11, "worker name held by a live worker")                                  \
    X(ENOTSUP, -12, "not supported by this engine or build")                             \
    X(ESYS, -13, "system call failed")                                                   \
    X(EFULL, -14, "disk full: the store cannot grow")                                    \
    X(EREFUSED, -15,                                                                     \
      "the store refused the connection (authentication, no such database)")             \
    X(EUNKNOWN, -16, "the outcome is unknown: the change may or may not be stored")

enum {
#define TQ_ERRNO_ENUM(name, code, text) TQ_##name = (code),
    TQ_ERRNO_MAP(TQ_ERRNO_ENUM)
#undef TQ_ERRNO_ENUM
        TQ_OK = 0,
    /* tq_job_enqueue: the (queue, key) pair already exists; *out holds the
     * id of the job that was kept. Not an error. */
    TQ_DUP = 1,
    /* tq_job_enqueue with TQ_ON_CONFLICT_REPLACE: the key's kept job was
     * ready and took this payload, run time and priority; *out is its id. */
    TQ_REPLACED = 2
};

/*
 * RESULTS. A call that returns int returns 0 (TQ_OK) or a negative TQ_E*
 * code, and tq_errmsg(db) says why in one line. Any call that reaches the
 * store may return what the store can say: TQ_ECONN (it cannot be reached,
 * or went away), TQ_EBUSY (a lock or serialization timeout: try again),
 * TQ_ESCHEMA (no tq schema, or a newer one), TQ_EDB (anything else it
 * said) and TQ_ENOMEM; one that writes also TQ_EFULL. Bad arguments are
 * TQ_EINVAL, found before anything is written. The comments below name the
 * other codes each call returns.
 */

/* Static text for a result code; never NULL. */
const char *tq_strerror(int code);

/* Job states, as stored in the state column. */
typedef enum tq_state {
    TQ_READY = 0,
    TQ_RUNNING,
    TQ_DONE,
    TQ_DEAD,
    TQ_CANCELLED,
    /* Enqueued with parents (tq_enqueue_opts.after) not all done yet: it
     * becomes ready when the last of them is done, and is cancelled when
     * one ends dead or cancelled. */
    TQ_WAITING,
    TQ_STATE_COUNT
} tq_state;

/* "ready", "running", ...; NULL for an out-of-range value. */
const char *tq_state_name(tq_state s);
/* Parses a state name; returns 0 and sets *out, or TQ_EINVAL. */
int tq_state_parse(tq_state *out, const char *name);

typedef enum tq_order { TQ_FIFO = 0, TQ_LIFO, TQ_UNORDERED } tq_order;
const char *tq_order_name(tq_order o);
int tq_order_parse(tq_order *out, const char *name);

/* ---- Store ------------------------------------------------------------- */

typedef struct tq tq;

#define TQ_OPEN_OPTS_VERSION 1
typedef struct tq_open_opts {
    int version;
    /* Create the store if it does not exist (SQLite: the file, mode 0600).
     * Without it, opening a missing store fails with TQ_ECONN. */
    int create;
} tq_open_opts;
#define TQ_OPEN_OPTS_INIT                                                                \
    {                                                                                    \
        TQ_OPEN_OPTS_VERSION, 0                                                          \
    }

/*
 * Opens a store. url is "PATH", "sqlite:PATH" (optionally followed by
 * "?synchronous=normal&busy_timeout=MS"), or "postgres://..." where that
 * engine is built in. opts may be NULL. On failure *out may still be set to
 * a handle whose tq_errmsg() explains; free it with tq_close(). Not
 * thread-safe with respect to the returned handle. TQ_EINVAL for a
 * malformed URL, TQ_ENOTSUP for an engine this build lacks, TQ_ECONN for a
 * store that cannot be opened (or, without opts->create, does not exist):
 * on PostgreSQL, a server that may answer if asked again (not running or
 * not reachable yet, starting up, full). TQ_EREFUSED: a server that
 * answered no (authentication, no such database or role): asking again
 * will not help.
 */
int tq_open(tq **out, const char *url, const tq_open_opts *opts);
void tq_close(tq *db);

/* The message of the last failure on db (never NULL; "" after success).
 * Borrowed until the next call on db. */
const char *tq_errmsg(const tq *db);
/* The engine name of an open handle: "sqlite" or "postgres". */
const char *tq_engine_name(const tq *db);
/* The store's URL as given to tq_open, with any password replaced by "***";
 * safe to print or log. Borrowed until tq_close. */
const char *tq_store_name(const tq *db);

/* Creates or upgrades the schema. Idempotent; safe to run concurrently. */
int tq_init(tq *db);

/* Least privilege on PostgreSQL: what tq_init_grants gives a role. */
typedef enum tq_grant_kind {
    TQ_GRANT_PRODUCER, /* enqueue (tq_job_enqueue or a plain INSERT): nothing else */
    TQ_GRANT_WORKER    /* run tq work: claim, acknowledge, register (it may
                          update and delete jobs); no enqueue, no queue
                          settings, no schema changes */
} tq_grant_kind;
typedef struct tq_grant {
    const char *role; /* an existing role */
    tq_grant_kind kind;
} tq_grant;
/* tq_init, then the n grants, in one transaction: a role that does not
 * exist (or any other failure) changes nothing. Needs the schema's owner.
 * TQ_ENOTSUP with grants on SQLite, which has no roles (the file's
 * permissions decide who may do anything at all). */
int tq_init_grants(tq *db, const tq_grant *grants, size_t n);
/* The schema version this library writes. */
int tq_schema_version(void);

/* Largest payload accepted by tq_job_enqueue, in bytes. */
#define TQ_PAYLOAD_MAX_DEFAULT (1024 * 1024)

/* ---- Queues ------------------------------------------------------------ */

/* Names: 1 to 64 of letters, digits, '_', '.', '-'. Returns 0 or TQ_EINVAL. */
int tq_name_check(const char *name);

typedef struct tq_queue_info {
    char name[65];
    tq_order order;
    int64_t lease_us;        /* default 30 s */
    int max_attempts;        /* default 3 */
    int64_t backoff_base_us; /* default 1 s; 0 retries at once */
    int64_t backoff_cap_us;  /* default 1 h */
    int keep_done;           /* default 1: keep finished rows */
    int paused;              /* default 0 */
    /* Concurrency limits, across every worker and host (0: none): at most
     * max_running jobs of the queue are running at once, and at most
     * max_running_per_group of each group (tq_enqueue_opts.group; jobs
     * without a group count only against max_running). A job a worker has
     * claimed ahead counts as running. */
    int max_running;
    int max_running_per_group;
    /* A rate limit, across every worker and host (rate_limit 0: none): at
     * most rate_limit jobs of the queue start in any window of
     * rate_period_us. Kept as a token bucket in the store (burst: what may
     * start at once, after a quiet spell); in the long run starts come at
     * (rate_limit - burst) per period, at least one. */
    int64_t rate_limit;
    int64_t rate_period_us;
    int64_t rate_burst;
    /* How often one job may snooze (a handler's "snooze DUR": back to
     * ready later, its attempt given back) before a snooze counts as a
     * failure instead. Default 100. */
    int max_snoozes;
    /* Whether a command handler's stdout becomes its job's result (kept
     * when the job is done; tq_job_result). Default 0: stdout is the
     * worker's. */
    int results;
} tq_queue_info;

/* Bits of tq_queue_opts.set naming the fields to change. */
enum {
    TQ_SET_ORDER = 1 << 0,
    TQ_SET_LEASE = 1 << 1,
    TQ_SET_MAX_ATTEMPTS = 1 << 2,
    TQ_SET_BACKOFF = 1 << 3,
    TQ_SET_KEEP_DONE = 1 << 4,
    TQ_SET_PAUSED = 1 << 5,
    TQ_SET_MAX_RUNNING = 1 << 6,           /* version 2 */
    TQ_SET_MAX_RUNNING_PER_GROUP = 1 << 7, /* version 2 */
    TQ_SET_RATE = 1 << 8,                  /* version 3 */
    TQ_SET_MAX_SNOOZES = 1 << 9,           /* version 4 */
    TQ_SET_RESULTS = 1 << 10               /* version 4 */
};

#define TQ_QUEUE_OPTS_VERSION 4
typedef struct tq_queue_opts {
    int version;
    unsigned set; /* TQ_SET_* bits: which fields below apply */
    tq_order order;
    int64_t lease_us;
    int max_attempts;
    int64_t backoff_base_us;
    int64_t backoff_cap_us;
    int keep_done;
    int paused;
    /* Version 2: 0 to 1000000; 0 removes the limit. */
    int max_running;
    int max_running_per_group;
    /* Version 3: rate_limit 0 (no limit) to 1000000000 jobs per
     * rate_period_us, 1 ms to 3650 days. */
    int64_t rate_limit;
    int64_t rate_period_us;
    /* Version 4: 0 to 1000000 (0: a snooze always counts as a failure). */
    int max_snoozes;
    int results; /* 1: command handlers' stdout is their job's result */
} tq_queue_opts;
#define TQ_QUEUE_OPTS_INIT                                                               \
    {                                                                                    \
        TQ_QUEUE_OPTS_VERSION, 0, TQ_FIFO, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0            \
    }

/* Creates the queue with defaults if missing, then applies opts (may be
 * NULL). Values are validated before anything is written: TQ_EINVAL. */
int tq_queue_set(tq *db, const char *name, const tq_queue_opts *opts);
/* TQ_ENOTFOUND if the queue does not exist. */
int tq_queue_get(tq_queue_info *out, tq *db, const char *name);
/* All queues by name; *out is freed with tq_free(). */
int tq_queue_list(tq_queue_info **out, size_t *out_n, tq *db);

/* ---- Jobs -------------------------------------------------------------- */

/*
 * How long a job holds its key (tq_enqueue_opts.unique): no other job of
 * the queue may be enqueued with the same key while the kept job is
 *   TQ_UNIQUE_STORED  in the table at all (until it is pruned or deleted);
 *   TQ_UNIQUE_QUEUED  ready (from its claim on the key is free again);
 *   TQ_UNIQUE_ACTIVE  ready or running (free once it is done, dead or
 *                     cancelled).
 * STORED keys and QUEUED/ACTIVE keys are two separate sets (two columns:
 * dedup_key, and unique_key with unique_scope): the same text in both does
 * not collide.
 */
typedef enum tq_unique {
    TQ_UNIQUE_STORED = 0,
    TQ_UNIQUE_QUEUED,
    TQ_UNIQUE_ACTIVE
} tq_unique;
/* "stored", "queued", "active"; NULL for an out-of-range value. */
const char *tq_unique_name(tq_unique u);
int tq_unique_parse(tq_unique *out, const char *name);

/* What an enqueue whose key is held does (tq_enqueue_opts.on_conflict). */
typedef enum tq_on_conflict {
    TQ_ON_CONFLICT_IGNORE = 0, /* nothing is written: TQ_DUP */
    /* the kept job, if it is ready, takes the new payload, run time and
     * priority (a debounce: the latest payload wins, one run): TQ_REPLACED;
     * a kept job that is not ready (running, or finished under
     * TQ_UNIQUE_STORED) is left alone: TQ_DUP */
    TQ_ON_CONFLICT_REPLACE
} tq_on_conflict;

#define TQ_ENQUEUE_OPTS_VERSION 4
typedef struct tq_enqueue_opts {
    int version;
    const char *key;  /* dedup key or NULL; 1 to 255 bytes */
    int64_t delay_us; /* run no earlier than now + delay_us (store clock) */
    int64_t run_at;   /* if non-zero: absolute time, overrides delay_us */
    int priority;     /* higher runs first; default 0 */
    int max_attempts; /* 0: the queue's setting */
    /* Version 2. With a key only: */
    tq_unique unique;      /* how long the key holds; default TQ_UNIQUE_STORED */
    int64_t unique_for_us; /* > 0: the key is also free this long after the
                              kept job's enqueue (unless it is running then) */
    tq_on_conflict on_conflict;
    /* A W3C trace context ("00-<32 hex>-<16 hex>-<2 hex>", as
     * tq_traceparent_check accepts) stored with the job and given to its
     * handler (TRACEPARENT in a command's environment, tq_job.traceparent
     * for a callback), or NULL. */
    const char *traceparent;
    /* Version 3: the job's group within its queue (1 to 255 bytes) or NULL:
     * what the queue's max_running_per_group counts, e.g. a customer id. */
    const char *group;
    /* Version 4: the job's parents, nafter ids of jobs that exist (up to
     * TQ_AFTER_MAX, repeats ignored; not with a key). The job waits
     * (TQ_WAITING) until every one of them is done, then becomes ready; a
     * parent that ends dead or cancelled, or already has, cancels it
     * (tq_job.last_error names that parent), and its own children with it;
     * a retry of that parent brings them back to waiting. Each job of a
     * batch gets the same parents. */
    const int64_t *after;
    size_t nafter;
} tq_enqueue_opts;
#define TQ_ENQUEUE_OPTS_INIT                                                             \
    {                                                                                    \
        TQ_ENQUEUE_OPTS_VERSION, NULL, 0, 0, 0, 0, TQ_UNIQUE_STORED, 0,                  \
            TQ_ON_CONFLICT_IGNORE, NULL, NULL, NULL, 0                                   \
    }

/* The most parents a job may have. */
#define TQ_AFTER_MAX 100000

/* 0 for a valid W3C traceparent: version 00 (or a later version, 00's four
 * fields first), lowercase hex, a trace id and a parent id not all zero;
 * else TQ_EINVAL. */
int tq_traceparent_check(const char *value);

/*
 * Enqueues one job; the queue is created with defaults if unknown. On return
 * of 0 the job is durable and *out holds its id. With a key that the queue
 * holds (see tq_unique), nothing is written, *out holds the kept job's id
 * and TQ_DUP is returned, or, with TQ_ON_CONFLICT_REPLACE and a ready kept
 * job, that job is updated and TQ_REPLACED returned. The rule is the
 * store's (a unique index; the time limit is a statement before the
 * insert), so it holds against concurrent producers and plain-SQL INSERTs
 * alike. A kept job that is running when its unique_for_us has passed
 * keeps its key until it ends. opts may be NULL. TQ_EINVAL for a
 * bad queue name, key or option, TQ_ETOOBIG for a payload over the store's
 * limit.
 * Any other error means nothing was stored, except TQ_EUNKNOWN: the commit
 * failed in a way that may have stored the job after all, and the library
 * could not find out (SQLite: the disk kept failing; PostgreSQL: the
 * connection broke at the commit and, for 15 s, no new one could ask the
 * server how that transaction ended). *out then holds the id the job has
 * if it was stored; tq_errmsg says so. A job enqueued with a key can be
 * enqueued again safely after any failure.
 */
int tq_job_enqueue(int64_t *out, tq *db, const char *queue, const void *payload,
                   size_t len, const tq_enqueue_opts *opts);

typedef struct tq_payload {
    const void *data;
    size_t len;
} tq_payload;

/*
 * Enqueues n jobs with the same options (no key) in one transaction: all or
 * none. out, if not NULL, receives n ids in order. TQ_EINVAL, TQ_ETOOBIG
 * and TQ_EUNKNOWN as tq_job_enqueue (with TQ_EUNKNOWN, out holds the ids
 * the jobs have if they were stored).
 */
int tq_job_enqueue_batch(int64_t *out, tq *db, const char *queue, const tq_payload *items,
                         size_t n, const tq_enqueue_opts *opts);

/* One job as read from the store. Owned by the caller; see tq_job_free. */
typedef struct tq_job {
    int64_t id;
    char *queue;
    unsigned char *payload; /* NUL-terminated for convenience; len excludes */
    size_t payload_len;
    tq_state state;
    int priority;
    int attempts;     /* runs started, including the current one */
    int max_attempts; /* effective: the job's own or its queue's */
    char *key;        /* or NULL */
    char *worker;     /* last worker to claim it, or NULL */
    char *last_error; /* or NULL */
    /* started_at is 0 while a worker holds the job claimed ahead, unstarted. */
    int64_t created_at, run_at, started_at, finished_at, lease_until; /* 0: unset */
    /* How many times the job has been claimed, ever: never reset, never
     * lowered. For a claimed job, the token its acknowledgements are fenced
     * by. */
    int64_t claim;
    char *traceparent; /* the trace context enqueued with it, or NULL */
    char *group;       /* its group (tq_enqueue_opts.group), or NULL */
    int snoozes;       /* times its handler snoozed it (reset by retry) */
    /* What its running handler last reported (tq_job_progress, or
     * "progress PCT TEXT" on a command's control channel): 0 to 100, or -1
     * for none; cleared when a run ends other than done or discarded. Not
     * filled in for
     * a claimed job. */
    int progress;
    char *progress_text; /* or NULL */
    /* The size of its result (tq_job_result), or -1 when it has none. */
    int64_t result_len;
    /* How many parents it was enqueued after (tq_job_parents lists them),
     * and of those, how many are not done yet. */
    int64_t nparents;
    int64_t waiting_for;
} tq_job;

/* Largest result a job keeps, in bytes: a command's stdout past it fails
 * the job (and nothing of it is stored). */
#define TQ_RESULT_MAX (1024 * 1024)

/* Frees one job returned by tq_job_get (accepts NULL). */
void tq_job_free(tq_job *job);
/* Frees an array of n jobs returned by claim or list (accepts NULL). */
void tq_job_array_free(tq_job *jobs, size_t n);

/* TQ_ENOTFOUND if there is no such job. */
int tq_job_get(tq_job **out, tq *db, int64_t id);

/*
 * Claims up to max ready jobs of queue whose run_at has come, in the queue's
 * order, for the named worker: each becomes running with attempts + 1 and a
 * lease of the queue's length. *out_n may be 0 (nothing ready; not an error),
 * and then *out is NULL.
 * A paused queue yields nothing; a queue with concurrency limits yields
 * no more than they leave room for.
 */
int tq_job_claim(tq_job **out, size_t *out_n, tq *db, const char *queue,
                 const char *worker, size_t max);

/* A malloc'd copy of s that is valid UTF-8: each byte that is not part of
 * a valid character is written as the four characters \xNN (what tq does
 * with handler output it keeps). For printing or encoding text read from
 * the store, which plain SQL may have filled with anything. NULL when out of
 * memory. */
char *tq_utf8_clean(const char *s);
/* The same, for a terminal or a log line: also control characters (C0, DEL
 * and C1, such as the one-byte CSI) escaped, as \e, \n, \r, \t or \xNN,
 * so text a handler wrote can neither move the cursor nor fake a line. */
char *tq_text_printable(const char *s);

/* Fenced acknowledgements: each applies only if the job is still running
 * under the same claim (job->claim) by job->worker, else TQ_ELOST (and
 * nothing changes). */
int tq_job_complete(tq *db, const tq_job *job);
/* Failure: back to ready after the queue's backoff, or dead when attempts
 * are used up. error (may be NULL) becomes last_error, as valid UTF-8: a
 * byte that is not part of a valid character is written as \xNN. */
int tq_job_fail(tq *db, const tq_job *job, const char *error);
/* Extends the lease by the queue's lease length from now. */
int tq_job_heartbeat(tq *db, const tq_job *job);
/* Gives the job back to ready without spending the attempt. */
int tq_job_release(tq *db, const tq_job *job);

/* What a handler may say of its job besides done or failed, fenced like
 * the acknowledgements above (TQ_ELOST when the job is no longer held under
 * its claim). A command handler run by tq_worker_run says the same by
 * writing lines to its control channel, descriptor 3 (TQ_CONTROL_FD):
 * "progress PCT [TEXT]", "snooze DUR", "discard TEXT". */
/* Stores the running job's progress, pct 0 to 100, and text (NULL, or
 * what fits in 200 bytes, kept as valid UTF-8): shown by tq show and tq
 * list. It stays when the job ends done or discarded and is cleared when
 * its run ends any other way (failed, snoozed, released, rescued). */
int tq_job_progress(tq *db, const tq_job *job, int pct, const char *text);
/* Back to ready at now + delay_us (0 to 365 days) without spending the
 * attempt, counting one snooze. A job that has snoozed its queue's
 * max_snoozes times fails instead, as tq_job_fail with a message that
 * says so. */
int tq_job_snooze(tq *db, const tq_job *job, int64_t delay_us);
/* Dead at once, whatever attempts are left, with reason (NULL: "discarded
 * by its handler") as its last error: for input that can never succeed. */
int tq_job_discard(tq *db, const tq_job *job, const char *reason);

/* Reads the result of job id into *out (result_len bytes, and a NUL after
 * them for convenience; freed with tq_free): what its handler gave, kept
 * once the job is done. TQ_ENOTFOUND for an unknown id, TQ_ESTATE when the
 * job has none (not done, or it gave none), each with a message. */
int tq_job_result(void **out, size_t *out_len, tq *db, int64_t id);
/* tq_job_complete with a result (len bytes, at most TQ_RESULT_MAX:
 * TQ_ETOOBIG, and nothing changes). */
int tq_job_complete_result(tq *db, const tq_job *job, const void *data, size_t len);

/* The ids of the parents job id was enqueued after (tq_enqueue_opts.after),
 * ascending, into *out (freed with tq_free; NULL when none). TQ_ENOTFOUND
 * for an unknown id. */
int tq_job_parents(int64_t **out, size_t *out_n, tq *db, int64_t id);

/* Manual management. Each returns TQ_ENOTFOUND for an unknown id and
 * TQ_ESTATE when the job is in a state the action does not apply to. */
/* dead or cancelled -> ready, attempts reset to 0. */
int tq_job_retry(tq *db, int64_t id);
/* ready or running -> cancelled. */
int tq_job_cancel(tq *db, int64_t id);
/* The same for n jobs (an id given twice counts once), all or none: when
 * one of them is unknown or in the wrong state, nothing changes and the
 * message names that one. One transaction. */
int tq_job_retry_ids(tq *db, const int64_t *ids, size_t n);
int tq_job_cancel_ids(tq *db, const int64_t *ids, size_t n);
/* All dead jobs (of queue, or of every queue if NULL) -> ready. */
int tq_job_retry_dead(int64_t *out_count, tq *db, const char *queue);

#define TQ_LIST_OPTS_VERSION 2
typedef struct tq_list_opts {
    int version;
    const char *queue; /* NULL: all */
    int state;         /* a tq_state, or -1 for all */
    size_t limit;      /* 0: 100 */
    /* Version 2: only jobs with a smaller id (0: no bound), for paging:
     * the next page starts before the last id of this one. */
    int64_t before_id;
} tq_list_opts;
#define TQ_LIST_OPTS_INIT                                                                \
    {                                                                                    \
        TQ_LIST_OPTS_VERSION, NULL, -1, 0, 0                                             \
    }

/* Newest first: by id, or for a finished state (done, dead, cancelled) by
 * when they finished (before_id then pages below that job's finish, and
 * gives nothing once the job has left the state). A list of one state
 * walks that state's index, so it costs what that state holds (waiting on
 * SQLite: the dependency rows kept). Payloads are included. */
int tq_job_list(tq_job **out, size_t *out_n, tq *db, const tq_list_opts *opts);

/* Deletes finished jobs (states in state_mask, bit (1 << tq_state)) that
 * finished before now - older_than_us. TQ_EINVAL for a mask with a state
 * that is not finished. */
int tq_job_prune(int64_t *out_count, tq *db, int64_t older_than_us, unsigned state_mask);
/* The same for at most limit rows of each state in the mask, in one
 * transaction (limit 0: all): called until it prunes fewer, it keeps each
 * transaction short beside running workers (tq prune does, 10,000 at a
 * time). */
int tq_job_prune_batch(int64_t *out_count, tq *db, int64_t older_than_us,
                       unsigned state_mask, int64_t limit);

/* Puts back running jobs whose lease expired: to ready, or to dead when
 * their attempts are used up. */
int tq_rescue_expired(int64_t *out_count, tq *db);

/* ---- Periodic jobs ----------------------------------------------------- */

/*
 * A schedule enqueues one job into its queue at each of its slots, exactly
 * once however many workers run: every worker (tq_work, any host) enqueues
 * the slots that are due, and a slot's job is written in the same
 * transaction that moves the schedule on, which one worker wins. After a
 * time without workers only the most recent missed slot is enqueued.
 *
 * spec: five cron fields (minute hour day-of-month month day-of-week, with
 * lists, ranges, steps and the names jan-dec, sun-sat; a day matches both
 * day fields when either starts with '*', else either), six with seconds
 * first, @yearly, @monthly, @weekly, @daily, @hourly, or @every DURATION
 * (whole seconds; slots at the multiples of it since the epoch). tz: a name
 * from the system's time-zone database (NULL or "UTC": UTC); a local time
 * skipped when clocks go forward is no slot, one repeated when they go back
 * is one slot, at its first occurrence. Slot times are the store's clock.
 */
#define TQ_SCHEDULE_OPTS_VERSION 1
typedef struct tq_schedule_opts {
    int version;
    const char *queue; /* required */
    const char *spec;  /* required */
    const char *tz;    /* NULL: UTC */
    const void *payload;
    size_t payload_len;
    int priority;
    /* Skip a slot while the job of the schedule's previous slot is still
     * ready or running (else each slot enqueues its job regardless). */
    int overlap_skip;
} tq_schedule_opts;
#define TQ_SCHEDULE_OPTS_INIT                                                            \
    {                                                                                    \
        TQ_SCHEDULE_OPTS_VERSION, NULL, NULL, NULL, NULL, 0, 0, 0                        \
    }

typedef struct tq_schedule {
    char name[65];
    char queue[65];
    char spec[128];
    char tz[64];
    void *payload; /* payload_len bytes, NUL-terminated */
    size_t payload_len;
    int priority;
    int overlap_skip;
    int64_t next_slot_us; /* the next slot to enqueue */
    int64_t last_slot_us; /* the last one enqueued or skipped; 0: none yet */
    int64_t last_job;     /* the job of the last slot enqueued; 0: none */
} tq_schedule;

/* Creates or replaces schedule name (1 to 64 of the queue-name letters);
 * its first slot is the first after now. A bad spec, zone or name:
 * TQ_EINVAL, nothing stored. */
int tq_schedule_set(tq *db, const char *name, const tq_schedule_opts *opts);
/* TQ_ENOTFOUND if there is no such schedule. */
int tq_schedule_remove(tq *db, const char *name);
/* All schedules by name; freed with tq_schedule_array_free(). */
int tq_schedule_list(tq_schedule **out, size_t *out_n, tq *db);
void tq_schedule_array_free(tq_schedule *v, size_t n);
/* Enqueues the due slots of every schedule (what workers do): *out_enqueued
 * jobs (may be NULL); *out_next_us (may be NULL) how long until the next
 * slot of any schedule, from now (-1: no schedule). */
int tq_schedule_run(tq *db, int64_t *out_enqueued, int64_t *out_next_us);
/* The first slot of spec in zone tz strictly after after_us (microseconds
 * since the epoch): 0 and *out_us, or TQ_EINVAL with the reason in msg. */
int tq_schedule_next(int64_t *out_us, const char *spec, const char *tz, int64_t after_us,
                     char *msg, size_t msglen);

/* ---- Stats ------------------------------------------------------------- */

typedef struct tq_stats {
    int64_t count[TQ_STATE_COUNT]; /* jobs by state */
    int64_t oldest_ready_age_us;   /* age of the oldest due ready job, or 0
                                      (count[TQ_READY] - delayed are due) */
    int64_t done_last_minute;
    size_t recent;                  /* done jobs the durations below were taken from */
    int64_t p50_us, p95_us, max_us; /* started_at to finished_at */
    size_t nlongest;
    struct {
        int64_t id;
        char worker[128];
        int64_t running_us;
    } longest[5];           /* running jobs, longest first */
    int64_t delayed;        /* ready jobs not due yet (a delay, --at, a backoff) */
    int64_t next_due_in_us; /* when the soonest of those is due, from now */
} tq_stats;

/* Stats for one queue, or all queues when queue is NULL. */
int tq_stats_get(tq_stats *out, tq *db, const char *queue);

/*
 * Durations (finished_at - started_at) of up to limit most recently finished
 * done jobs of queue (NULL: all), in no particular order. *out is freed with
 * tq_free().
 */
int tq_job_durations(int64_t **out, size_t *out_n, tq *db, const char *queue,
                     size_t limit);

/* The value at fraction q (0..1) of n values; sorts v in place. 0 if n = 0. */
int64_t tq_percentile(int64_t *v, size_t n, double q);

/* ---- Monitoring (what tq serve reads) ------------------------------------ */

/* Jobs of one state, by queue (or, for running jobs, by worker). */
typedef struct tq_count {
    char name[129]; /* the queue, or the worker */
    int64_t n;
    /* TQ_READY only: how many of the n are not due yet, and how long the
     * oldest that is due has been due, by the store's clock (0: none). */
    int64_t delayed, oldest_due_us;
} tq_count;

/*
 * Jobs in state by queue, in one query along the state's index: ready and
 * running cost what those jobs are; the finished states (done, dead,
 * cancelled) walk every job kept in that state, and waiting on SQLite
 * every dependency row kept (SQLite keeps no index of waiting jobs), so a
 * monitor counts those less often. by_worker (TQ_RUNNING only): by the
 * worker holding them instead. Queues without such jobs are left out.
 * *out is freed with tq_free().
 */
int tq_count_jobs(tq_count **out, size_t *out_n, tq *db, tq_state state, int by_worker);

/* A job that finished, as tq_finished_since gives it. */
typedef struct tq_finished {
    int64_t id;
    char queue[65];
    tq_state state;      /* done, dead or cancelled */
    int64_t finished_at; /* the store's clock */
    int64_t duration_us; /* finished_at - started_at; -1 when it never started */
} tq_finished;

/*
 * Jobs that finished after the position (*at_us, *after_id) and at least
 * settle_us before the store's clock now, in (finished_at, id) order, at
 * most limit of them (0: 10,000). The position moves to the last one
 * given, or past every job that finished by now - settle_us when fewer
 * than limit came: call again with it to read what finished since. Start
 * at (when, 0) for what finished after when. settle_us gives transactions that
 * stamped finished_at before they committed time to commit (a second is
 * plenty). Jobs deleted when done (a queue that keeps none) are not seen.
 */
int tq_finished_since(tq_finished **out, size_t *out_n, tq *db, int64_t *at_us,
                      int64_t *after_id, int64_t settle_us, size_t limit);

/* ---- Workers ----------------------------------------------------------- */

typedef struct tq_worker_info {
    char name[128];
    char host[128];
    /* The machine's boot id and the worker's PID namespace: two workers with
     * the same host_id see the same processes. "" when unknown. */
    char host_id[128];
    int64_t pid;
    int64_t started_at, heartbeat_at, stopped_at; /* stopped_at 0: not stopped */
    int64_t lease_us; /* heartbeat older than this: the worker is gone */
    int alive;        /* heartbeat fresher than lease_us and not stopped */
    /* The process (a command-mode worker's) that ends the worker's handler
     * groups when the worker dies; 0: none. */
    int64_t reaper_pid;
} tq_worker_info;

int tq_worker_list(tq_worker_info **out, size_t *out_n, tq *db);
/* Deletes the registrations of workers that stopped, or went silent past
 * their lease, longer than older_than_us ago (their names are free to take
 * anyway); live workers are never touched. *out_count: how many. */
int tq_worker_prune(int64_t *out_count, tq *db, int64_t older_than_us);

typedef struct tq_worker tq_worker;

/*
 * A C handler: runs one job, returns 0 for done or non-zero for failure, in
 * which case it may write a message into err (errlen bytes, NUL-terminated).
 * Called from the pool's own threads, at most opts.concurrency at once.
 */
typedef int (*tq_handler_fn)(void *ud, const tq_job *job, char *err, size_t errlen);

/* Called by a C handler, from within its call and for the job it was
 * given, to say what a command handler says on its control channel
 * (descriptor 3); TQ_EINVAL from anywhere else or for a value out of
 * range. Progress (0 to 100, text cut at 200 bytes) is written within a
 * second, fenced, as tq_job_progress does. A snooze (0 to 365 days) or a
 * discard decides how the job ends, whatever the handler then returns:
 * as tq_job_snooze and tq_job_discard do; the last one said counts. */
int tq_handler_progress(const tq_job *job, int pct, const char *text);
/* The job's result, kept if the handler then returns done: len bytes, at
 * most TQ_RESULT_MAX (else TQ_ETOOBIG, and none is kept). Copied:
 * data may go once this returns. Stored whatever the queue's results
 * setting, which is about commands' stdout, unless the queue deletes
 * finished rows. */
int tq_handler_result(const tq_job *job, const void *data, size_t len);
int tq_handler_snooze(const tq_job *job, int64_t delay_us);
int tq_handler_discard(const tq_job *job, const char *reason);

/* Log levels passed to tq_worker_opts.log. */
enum { TQ_LOG_ERROR = 0, TQ_LOG_WARN, TQ_LOG_INFO, TQ_LOG_DEBUG };

#define TQ_WORKER_OPTS_VERSION 3
#define TQ_PREFETCH_DEFAULT    2048
#define TQ_PREFETCH_MAX        65536 /* most jobs one worker claims ahead */
#define TQ_CONCURRENCY_MAX     1024  /* most slots of one worker */
typedef struct tq_worker_opts {
    int version;
    const char *const *queues; /* names; NULL or nqueues 0: {"default"} */
    size_t nqueues;
    const char *name;    /* NULL: "host:pid" */
    int concurrency;     /* jobs at once, 1 to TQ_CONCURRENCY_MAX; 0: 1 */
    int drain;           /* return once nothing in the queues is ready or running */
    int64_t timeout_us;  /* per job (commands only); 0: none */
    int64_t grace_us;    /* on stop, and from SIGTERM to SIGKILL; 0: 10 s */
    int64_t poll_max_us; /* longest idle sleep between polls; 0: 500 ms */
    /* Exactly one of handler and argv. argv is a NULL-terminated command run
     * without a shell, payload on stdin, TQ_JOB_ID, TQ_QUEUE, TQ_ATTEMPT,
     * TQ_CLAIM and TQ_CONTROL_FD in its environment, its control channel on
     * descriptor 3 (tq_job_progress says what it may write there), its
     * stdout the job's result in a queue with results (else the worker's),
     * in its own process group, which ends with the job:
     * what the command leaves running there gets SIGTERM when it exits,
     * SIGKILL after grace_us, before the job is acknowledged. A command that
     * cannot be started (descriptors, processes, the program gone) puts
     * its job back unspent; see tq_worker_run. */
    tq_handler_fn handler;
    void *handler_ud;
    const char *const *argv;
    /* Optional log sink; the library never prints. */
    void (*log)(void *ud, int level, const char *msg);
    void *log_ud;
    /* Version 2. Most jobs claimed ahead of free slots, so that short jobs
     * are claimed and acknowledged in batches: 0: TQ_PREFETCH_DEFAULT;
     * -1: none. A worker
     * holds fewer when its jobs are slow (about 20 ms of work), keeps their
     * leases alive like running ones and releases them unspent on stop. */
    int prefetch;
    /* Version 3. Log each job's end (id, attempt, outcome, run time) and,
     * for a command, each line it writes to stderr, at TQ_LOG_DEBUG
     * (failures are logged at TQ_LOG_INFO either way). */
    int log_jobs;
} tq_worker_opts;
#define TQ_WORKER_OPTS_INIT                                                              \
    {                                                                                    \
        TQ_WORKER_OPTS_VERSION, NULL, 0, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL,    \
            NULL, 0, 0                                                                   \
    }

/* Counters of one run, readable after tq_worker_run returns. */
typedef struct tq_worker_counters {
    int64_t claimed, done, failed, lost, released, busy_retries;
} tq_worker_counters;

/*
 * Creates a worker pool on db, which it uses exclusively until
 * tq_worker_free. Registers the name in the store: TQ_EINUSE if a live worker
 * holds it (heartbeat fresher than its lease, not stopped). A holder that
 * ran on this machine in this PID namespace (the same host_id) and whose
 * process is gone (kill -9) is not alive; of any other holder only the
 * heartbeat's age counts. Jobs still running under this name (a previous
 * crash) are put back at once, their attempt counted if they had started,
 * when the previous holder is provably gone (stopped, or dead as above, or
 * never registered); otherwise they come back when their leases expire.
 */
int tq_worker_new(tq_worker **out, tq *db, const tq_worker_opts *opts);
/* Runs until stopped (or drained, with opts.drain). While it runs SIGPIPE
 * is ignored in the whole process (a handler that stops reading its stdin
 * must not end the worker); the disposition it had is restored on return.
 * Returns 0 on a clean stop; TQ_ESYS after stopping because the command could not be
 * started for 10 s (the program gone or not executable), or nothing could start for a
 * minute while nothing ran; TQ_ECONN when a SQLite store's file was deleted or replaced
 * while it ran. */
int tq_worker_run(tq_worker *w);
/* Asks a running pool to stop: claim nothing more, let running jobs finish
 * within the grace period, then kill them and release their jobs. A second
 * call while it stops ends the grace at once: command handlers are killed
 * (SIGKILL to their process groups) and their jobs released unspent;
 * callback handlers, which cannot be killed, are still waited for.
 * Async-signal-safe and thread-safe. */
void tq_worker_stop(tq_worker *w);
/* Safe from any thread while tq_worker_run runs (busy_retries excepted,
 * which is read after it returns). */
void tq_worker_counters_get(tq_worker_counters *out, const tq_worker *w);
/* The worker's registered name; borrowed until tq_worker_free. */
const char *tq_worker_name(const tq_worker *w);
/* The name tq_worker_new gives a worker of this process when its options
 * name none, into out (len bytes, NUL-terminated, cut if short): HOST:PID,
 * or HOST:PID@NS (the PID namespace's inode number) in a PID namespace of
 * its own, where a sibling container with the same hostname may run its
 * worker under the same PID. */
void tq_worker_default_name(char *out, size_t len);
/* Marks the worker stopped in the store and frees it (accepts NULL). */
void tq_worker_free(tq_worker *w);

/* ---- Utilities used by the tool, exported for any caller ---------------- */

/* Parses "250ms", "30s", "5m", "2h", "7d", compounds like "1h30m", or a
 * plain number of seconds. Returns 0 or TQ_EINVAL. */
int tq_duration_parse(int64_t *out_us, const char *text);
/* Formats a duration compactly ("1.5s", "250ms"); returns buf. */
char *tq_duration_format(char *buf, size_t len, int64_t us);
/* Parses "YYYY-MM-DDTHH:MM[:SS[.FRACTION]][Z|+HH:MM]" (no zone: local
 * time; the form tq_time_format prints) or "@SECONDS", from 1970 to the end
 * of 9999. Returns 0 or TQ_EINVAL. */
int tq_time_parse(int64_t *out_us, const char *text);
/* Formats as "YYYY-MM-DDTHH:MM:SS.mmmZ"; returns buf. */
char *tq_time_format(char *buf, size_t len, int64_t us);

/* Frees memory returned by tq (arrays of queue info, durations, ...). */
void tq_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* TQ_H */
