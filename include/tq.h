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
 * TQ_EINVAL, found before anything is written; the store's own checks (a
 * constraint, or on PostgreSQL a value it cannot take) may refuse a value
 * with TQ_EINVAL too, and the transaction then writes nothing. Only the
 * enqueue calls return TQ_EUNKNOWN. The comments below name the other codes
 * each call returns ("a code of the store's" means the ones above), and its
 * results other than 0: TQ_DUP and TQ_REPLACED, counts and arrays through
 * out-parameters, NULL from the calls that return a pointer. Calls that
 * take no tq handle set no message.
 */

/* Returns the static text of a result code: of every TQ_E* code, TQ_OK,
 * TQ_DUP and TQ_REPLACED, and "unknown error" for any other value. Never
 * NULL; not to be freed. */
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

/* The name of a state: "ready", "running", "done", "dead", "cancelled" or
 * "waiting". Returns static text, or NULL for an out-of-range value. */
const char *tq_state_name(tq_state s);
/* Parses a state name as tq_state_name gives it (lower case, exactly).
 * Returns 0 and sets *out, or TQ_EINVAL for NULL or an unknown name (*out
 * is then left alone). */
int tq_state_parse(tq_state *out, const char *name);

/* The order in which a queue's ready jobs are claimed (tq_queue_info). */
typedef enum tq_order { TQ_FIFO = 0, TQ_LIFO, TQ_UNORDERED } tq_order;
/* The name of an order: "fifo", "lifo" or "unordered". Returns static
 * text, or NULL for an out-of-range value. */
const char *tq_order_name(tq_order o);
/* Parses an order name as tq_order_name gives it (lower case, exactly).
 * Returns 0 and sets *out, or TQ_EINVAL for NULL or an unknown name (*out
 * is then left alone). */
int tq_order_parse(tq_order *out, const char *name);

/* ---- Store ------------------------------------------------------------- */

typedef struct tq tq;

#define TQ_OPEN_OPTS_VERSION 2
typedef struct tq_open_opts {
    int version;
    /* Create the store if it does not exist (SQLite: the file, mode 0600).
     * Without it, opening a missing store fails with TQ_ECONN. */
    int create;
    /* Version 2. A connection the caller opened to the store the URL names,
     * to use instead of opening one: a sqlite3 * for a SQLite URL, a PGconn *
     * for a PostgreSQL one (NULL: tq opens its own). See "Your own
     * connection" below. */
    void *conn;
} tq_open_opts;
#define TQ_OPEN_OPTS_INIT                                                                \
    {                                                                                    \
        TQ_OPEN_OPTS_VERSION, 0, NULL                                                    \
    }

/*
 * Opens a store. url is "PATH", "sqlite:PATH" (optionally followed by
 * "?synchronous=normal&busy_timeout=MS"), or "postgres://..." (or
 * "postgresql://...") where that engine is built in, with tq's own
 * parameters tq_schema, tq_pool and tq_listen (docs/stores.md). opts may
 * be NULL.
 * Without opts->create the store's schema must be this library's
 * (tq_schema_version); with it the schema is not looked at, so that
 * tq_init can create or upgrade it.
 *
 * *out is set on every return but one: when the handle itself cannot be
 * allocated (TQ_ENOMEM), *out is NULL. The caller owns the handle and frees
 * it with tq_close, after a failure too: a handle whose open failed serves
 * tq_errmsg (which says why), tq_store_name, tq_engine_name and tq_close;
 * every other call on it, or on a NULL handle, returns TQ_EINVAL ("the
 * store is not open", with the open's reason), never crashes. A handle is
 * not thread-safe: one thread uses it at a time.
 *
 * Returns 0 on success, or: TQ_EINVAL for a missing or malformed URL (an
 * unknown scheme or parameter included), or an opts->conn that is not a
 * usable connection to the store it names (SQLite: another file;
 * PostgreSQL: not connected, busy or in pipeline mode); TQ_ENOTSUP for an engine this
 * build lacks; TQ_ECONN for a store that cannot be opened (or, on SQLite
 * without opts->create, does not exist): on PostgreSQL, a server that may
 * answer if asked again (not running or not reachable yet, starting up,
 * full); TQ_EREFUSED for a PostgreSQL server that answered no
 * (authentication, no such database or role): asking again will not help;
 * TQ_ESCHEMA, without opts->create, for a store with no tq schema or an
 * older or newer one; TQ_ENOMEM; or a code of the store's.
 */
int tq_open(tq **out, const char *url, const tq_open_opts *opts);

/*
 * Your own connection (tq_open_opts.conn): a job's end in the caller's own
 * transaction, so that it commits with the effect the caller wrote there,
 * or neither does (docs/library.md walks through it).
 *
 * While the caller's connection is in a transaction, every call on the
 * handle runs inside it and commits nothing (a write, as a savepoint); the
 * caller's COMMIT or ROLLBACK decides. Outside a transaction each call
 * commits on its own. Claim first, outside the transaction (on any handle),
 * then begin, write the effect, end the job, commit. Any failure inside the
 * transaction means roll back: TQ_ELOST says the lease ran out and the job
 * went back (it runs again unless cancelled); another failure may have left
 * the transaction aborted or gone. tq_job_claim and tq_job_heartbeat refuse
 * to run inside the caller's transaction (TQ_EINVAL), and tq_worker_new
 * refuses such a handle. On PostgreSQL the end is dated at the
 * transaction's start.
 *
 * tq leaves the connection's settings alone (on SQLite give it a busy
 * timeout and begin with BEGIN IMMEDIATE), never reconnects it (a lost
 * connection is TQ_ECONN) and never closes it: tq_close the handle first.
 * On PostgreSQL the handle's prepared statements have names of its own
 * ("tq<N>_..."), deallocated by tq_close.
 */
/* Closes db's connection and frees it. db may be NULL, or a handle whose
 * tq_open failed. Free any worker on db (tq_worker_free) first. Returns
 * nothing. */
void tq_close(tq *db);

/* Returns the message of the last failure on db: one line, never NULL, ""
 * after a success. Borrowed until the next call on db or tq_close. For a
 * NULL db, a static text saying there is no handle. */
const char *tq_errmsg(const tq *db);
/* Returns the engine name of an open handle: "sqlite" or "postgres";
 * "none" for NULL or a handle whose tq_open failed. Static text, never
 * NULL. */
const char *tq_engine_name(const tq *db);
/* Returns the store's URL as given to tq_open (cut at 511 bytes), with any
 * password replaced by "***"; safe to print or log. Set even when tq_open
 * failed; "" for a NULL db. Borrowed until tq_close; never NULL. */
const char *tq_store_name(const tq *db);

/*
 * Creates the schema, or upgrades it to this library's version, in one
 * transaction (SQLite also switches the file to WAL first). Idempotent;
 * safe to run concurrently. Returns 0 on success, or: TQ_ESCHEMA when the
 * store's schema is newer than this library's (nothing is changed);
 * TQ_ECONN on SQLite for a store file this process may only read; or a
 * code of the store's.
 */
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
/*
 * tq_init, then the n grants (grants may be NULL when n is 0), in one
 * transaction: a role that does not exist (or any other failure) changes
 * nothing. Needs the schema's owner. Returns 0 on success, or: TQ_EINVAL
 * for a grant without a role name or with an unknown kind (checked before
 * anything else); TQ_ENOTSUP with grants on SQLite, which has no roles (the
 * file's permissions decide who may do anything at all); TQ_EDB on
 * PostgreSQL for a role that does not exist, or a user who may not grant;
 * or as tq_init.
 */
int tq_init_grants(tq *db, const tq_grant *grants, size_t n);
/* The schema version this library writes and tq_open requires. Returns it;
 * cannot fail. */
int tq_schema_version(void);

/* Largest payload accepted by tq_job_enqueue, in bytes. */
#define TQ_PAYLOAD_MAX_DEFAULT (1024 * 1024)

/* ---- Queues ------------------------------------------------------------ */

/* Whether name is a valid queue or schedule name: 1 to 64 of the ASCII
 * letters and digits, '_', '.' and '-'. Returns 0 if it is, else TQ_EINVAL
 * (NULL included). */
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
    /* How long one run of a job may take before its handler is stopped
     * (a command: SIGTERM, then SIGKILL after the worker's grace; a
     * callback is given the deadline, tq_handler_deadline), the run failing
     * with "timed out": a job's own timeout (tq_enqueue_opts.timeout_us)
     * wins, then this, then the worker's (tq_worker_opts.timeout_us).
     * Default 0: none of the queue's. */
    int64_t timeout_us;
    /* Retention: how long finished jobs of the queue are kept, done ones
     * and dead or cancelled ones, after they finished; then the workers
     * serving the queue delete them, a small batch at a time (as
     * tq_job_prune_batch would). Default 0: kept until pruned or deleted
     * (keep_done 0 deletes done jobs at once, whatever this says). */
    int64_t retain_done_us;
    int64_t retain_dead_us;
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
    TQ_SET_RESULTS = 1 << 10,              /* version 4 */
    TQ_SET_TIMEOUT = 1 << 11,              /* version 5 */
    TQ_SET_RETAIN_DONE = 1 << 12,          /* version 5 */
    TQ_SET_RETAIN_DEAD = 1 << 13           /* version 5 */
};

#define TQ_QUEUE_OPTS_VERSION 5
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
    /* Version 5: 0 (none) to 3650 days (tq_queue_info.timeout_us). */
    int64_t timeout_us;
    /* Version 5: 0 (kept until pruned) or 1 s to 3650 days
     * (tq_queue_info.retain_done_us). */
    int64_t retain_done_us;
    int64_t retain_dead_us;
} tq_queue_opts;
#define TQ_QUEUE_OPTS_INIT                                                               \
    {                                                                                    \
        TQ_QUEUE_OPTS_VERSION, 0, TQ_FIFO, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0   \
    }

/*
 * Creates the queue with defaults if missing, then applies the fields of
 * opts that opts->set names, in one transaction. opts may be NULL (the
 * queue is only created); fields past the end of opts->version's struct
 * are never read. Returns 0 on success, or: TQ_EINVAL for an invalid name
 * or a value out of range (checked before anything is written); or a code
 * of the store's.
 */
int tq_queue_set(tq *db, const char *name, const tq_queue_opts *opts);
/* Reads queue name's settings into *out (left alone on failure). Returns 0
 * on success, or: TQ_EINVAL for an invalid name; TQ_ENOTFOUND if the queue
 * does not exist; or a code of the store's. */
int tq_queue_get(tq_queue_info *out, tq *db, const char *name);
/* All queues by name: *out_n of them in *out, the caller's, freed with
 * tq_free whatever *out_n is (NULL and 0 on failure). Returns 0 on success
 * or a code of the store's. */
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
/* The name of a uniqueness: "stored", "queued" or "active". Returns static
 * text, or NULL for an out-of-range value. */
const char *tq_unique_name(tq_unique u);
/* Parses a name as tq_unique_name gives it (lower case, exactly). Returns 0
 * and sets *out, or TQ_EINVAL for NULL or an unknown name (*out is then
 * left alone). */
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

#define TQ_ENQUEUE_OPTS_VERSION 6
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
    /* Version 5: how long one run of the job may take, over its queue's
     * and the worker's (tq_queue_info.timeout_us); 0 (the default): its
     * queue's. Up to 3650 days. */
    int64_t timeout_us;
    /* Version 6, with after: nonzero makes the job wait for every parent
     * to end, whatever the end (done, dead or cancelled: a batch's
     * callback), instead of being done: no parent's end cancels it, and
     * its handler reads the ends (tq_job_parent_ends; a command's
     * TQ_PARENTS_DONE and TQ_PARENTS_FAILED). */
    int after_ended;
} tq_enqueue_opts;
#define TQ_ENQUEUE_OPTS_INIT                                                             \
    {                                                                                    \
        TQ_ENQUEUE_OPTS_VERSION, NULL, 0, 0, 0, 0, TQ_UNIQUE_STORED, 0,                  \
            TQ_ON_CONFLICT_IGNORE, NULL, NULL, NULL, 0, 0, 0                             \
    }

/* The most parents a job may have. */
#define TQ_AFTER_MAX 100000

/* Whether value is a valid W3C traceparent: version 00 (or a later version
 * but ff, 00's four fields first, at most 256 bytes), lowercase hex, a
 * trace id and a parent id not all zero. Returns 0 if it is, else TQ_EINVAL
 * (NULL included). */
int tq_traceparent_check(const char *value);

/*
 * Enqueues one job, its payload len bytes at payload (copied); the queue is
 * created with defaults if unknown. opts may be NULL, and so may out. On
 * return of 0 the job is durable and *out holds its id. With a key that the
 * queue holds (see tq_unique), nothing is written, *out holds the kept
 * job's id and TQ_DUP is returned, or, with TQ_ON_CONFLICT_REPLACE and a
 * ready kept job, that job is updated and TQ_REPLACED returned. The rule is
 * the store's (a unique index; the time limit is a statement before the
 * insert), so it holds against concurrent producers and plain-SQL INSERTs
 * alike. A kept job that is running when its unique_for_us has passed
 * keeps its key until it ends.
 *
 * Returns 0, TQ_DUP or TQ_REPLACED (none of them an error), or: TQ_EINVAL
 * for a bad queue name, key, group, traceparent or option; TQ_ETOOBIG for
 * a payload over TQ_PAYLOAD_MAX_DEFAULT bytes; TQ_ENOTFOUND when a parent
 * (opts->after) does not exist; TQ_EBUSY also when the key's kept job kept
 * being deleted under the call; TQ_EUNKNOWN (below); or a code of the
 * store's. Any error but TQ_EUNKNOWN means nothing was stored, and *out is
 * left alone. TQ_EUNKNOWN: the commit failed in a way that may have stored
 * the job after all, and the library could not find out (SQLite: the disk
 * kept failing; PostgreSQL: the connection broke at the commit and, for
 * 15 s, no new one could ask the server how that transaction ended). *out
 * then holds the id the job has if it was stored; tq_errmsg says so. A job
 * enqueued with a key can be enqueued again safely after any failure.
 */
int tq_job_enqueue(int64_t *out, tq *db, const char *queue, const void *payload,
                   size_t len, const tq_enqueue_opts *opts);

typedef struct tq_payload {
    const void *data;
    size_t len;
} tq_payload;

/*
 * Enqueues n jobs with the same options (no key) in one transaction: all or
 * none. Each item's bytes are copied. out, if not NULL, has room for n ids
 * and receives them in order. n 0 checks the options and writes nothing.
 * Returns 0 on success, or: TQ_EINVAL as tq_job_enqueue, and for a key or
 * for more than TQ_AFTER_MAX * 10 parent links in all (n times
 * opts->nafter); TQ_ETOOBIG when any payload is over the limit;
 * TQ_ENOTFOUND when a parent does not exist; TQ_EUNKNOWN as tq_job_enqueue
 * (out then holds the ids the jobs have if they were stored); or a code of
 * the store's. After any other error nothing was stored and what out holds
 * is unspecified.
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
    /* Its own timeout (tq_enqueue_opts.timeout_us), or 0: its queue's. */
    int64_t timeout_us;
} tq_job;

/* Largest result a job keeps, in bytes: a command's stdout past it fails
 * the job (and nothing of it is stored). */
#define TQ_RESULT_MAX (1024 * 1024)

/* Frees one job returned by tq_job_get and what it owns (accepts NULL).
 * Returns nothing. */
void tq_job_free(tq_job *job);
/* Frees an array of n jobs returned by tq_job_claim or tq_job_list, n the
 * count they gave (accepts NULL). Returns nothing. */
void tq_job_array_free(tq_job *jobs, size_t n);

/* Reads job id into *out, the caller's, freed with tq_job_free (NULL on
 * failure). Returns 0 on success, or: TQ_ENOTFOUND if there is no such
 * job; or a code of the store's. */
int tq_job_get(tq_job **out, tq *db, int64_t id);

/*
 * Claims up to max ready jobs of queue whose run_at has come, in the
 * queue's order, for the named worker (1 to 127 bytes; it becomes
 * job->worker): each becomes running with attempts + 1 and a lease of the
 * queue's length. A paused queue yields nothing; a queue with concurrency
 * or rate limits yields no more than they leave room for. A claimed job
 * whose attempts were already used up (a lowered max_attempts, a row
 * written by plain SQL) is failed at once, unrun, and not returned.
 *
 * *out (*out_n jobs) is the caller's, freed with tq_job_array_free; each
 * job is acknowledged by passing it, as returned, to the calls below.
 * Returns 0 on success, also when nothing was claimed (*out_n 0, *out
 * NULL: nothing due, max 0, or a queue that is paused or does not exist),
 * or: TQ_EINVAL for an invalid queue or worker name, or on a handle of the
 * caller's connection while the caller has a transaction open ("Your own
 * connection"); or a code of the store's.
 */
int tq_job_claim(tq_job **out, size_t *out_n, tq *db, const char *queue,
                 const char *worker, size_t max);

/* A copy of s (not NULL) that is valid UTF-8: each byte that is not part
 * of a valid character is written as the four characters \xNN (what tq
 * does with handler output it keeps). For printing or encoding text read
 * from the store, which plain SQL may have filled with anything. Returns
 * the copy, the caller's, freed with tq_free; NULL when out of memory. */
char *tq_utf8_clean(const char *s);
/* The same, for a terminal or a log line: also control characters (C0, DEL
 * and C1, such as the one-byte CSI) escaped, as \e, \n, \r, \t or \xNN,
 * and the bidirectional controls as \uXXXX, so text a handler wrote can
 * neither move the cursor nor fake or reorder a line. Returns the copy,
 * freed with tq_free; NULL when out of memory. */
char *tq_text_printable(const char *s);

/*
 * Fenced acknowledgements. Each call below takes a job as tq_job_claim
 * returned it (borrowed for the call) and applies only if the job is still
 * running under the same claim (job->claim) by job->worker; else it
 * returns TQ_ELOST and nothing changes. Each also returns TQ_EINVAL for a
 * job that has no worker (not a claimed one), and any code of the store's.
 * Those that need the queue's settings (complete, fail, heartbeat, snooze)
 * read them first; a queue that no longer exists counts with the defaults.
 */
/* Done: the job becomes done, or is deleted when its queue keeps no
 * finished rows; a waiting child whose parents are now all done becomes
 * ready. Returns 0 on success, or TQ_ELOST or TQ_EINVAL as above, or a
 * code of the store's. */
int tq_job_complete(tq *db, const tq_job *job);
/* Failure: back to ready after the queue's backoff, or dead when attempts
 * are used up. error (may be NULL) becomes last_error, as valid UTF-8: a
 * byte that is not part of a valid character is written as \xNN. Returns 0
 * on success, or TQ_ELOST or TQ_EINVAL as above, TQ_ENOMEM, or a code of
 * the store's. */
int tq_job_fail(tq *db, const tq_job *job, const char *error);
/* Extends the lease by the queue's lease length from now. Returns 0 on
 * success, or TQ_ELOST or TQ_EINVAL as above (also inside the caller's
 * transaction, as tq_job_claim), or a code of the store's. */
int tq_job_heartbeat(tq *db, const tq_job *job);
/* Gives the job back to ready without spending the attempt. Returns 0 on
 * success, or TQ_ELOST or TQ_EINVAL as above, or a code of the store's. */
int tq_job_release(tq *db, const tq_job *job);

/* What a handler may say of its job besides done or failed, fenced like
 * the acknowledgements above (TQ_ELOST when the job is no longer held under
 * its claim). A command handler run by tq_worker_run says the same by
 * writing lines to its control channel, descriptor 3 (TQ_CONTROL_FD):
 * "progress PCT [TEXT]", "snooze DUR", "discard TEXT". */
/* Stores the running job's progress, pct 0 to 100, and text (NULL, or
 * what fits in 200 bytes, kept as valid UTF-8): shown by tq show and tq
 * list. It stays when the job ends done or discarded and is cleared when
 * its run ends any other way (failed, snoozed, released, rescued). Returns
 * 0 on success, or: TQ_EINVAL for pct out of range (or as above); TQ_ELOST;
 * TQ_ENOMEM; or a code of the store's. */
int tq_job_progress(tq *db, const tq_job *job, int pct, const char *text);
/* Back to ready at now + delay_us (0 to 365 days) without spending the
 * attempt, counting one snooze. A job that has snoozed its queue's
 * max_snoozes times (as job->snoozes says) fails instead, as tq_job_fail
 * with a message that says so, and the result is tq_job_fail's: 0 then
 * means the job was failed. Returns 0 on success, or: TQ_EINVAL for a
 * delay out of range (or as above); TQ_ELOST; or a code of the store's. */
int tq_job_snooze(tq *db, const tq_job *job, int64_t delay_us);
/* Dead at once, whatever attempts are left, with reason (NULL or "":
 * "discarded by its handler") as its last error: for input that can never
 * succeed. Returns 0 on success, or TQ_ELOST or TQ_EINVAL as above,
 * TQ_ENOMEM, or a code of the store's. */
int tq_job_discard(tq *db, const tq_job *job, const char *reason);

/* Reads the result of job id into *out (*out_len bytes, and a NUL after
 * them for convenience; the caller's, freed with tq_free; NULL on
 * failure): what its handler gave, kept once the job is done. Returns 0 on
 * success, or: TQ_ENOTFOUND for an unknown id; TQ_ESTATE when the job has
 * none (not done, or it gave none), each with a message; or a code of the
 * store's. */
int tq_job_result(void **out, size_t *out_len, tq *db, int64_t id);
/* tq_job_complete with a result: len bytes at data (NULL when len is 0),
 * stored unless the queue keeps no finished rows. Returns as
 * tq_job_complete, and TQ_EINVAL for NULL data with len > 0 or TQ_ETOOBIG
 * for len over TQ_RESULT_MAX, checked first: nothing changes. */
int tq_job_complete_result(tq *db, const tq_job *job, const void *data, size_t len);

/* The ids of the parents job id was enqueued after (tq_enqueue_opts.after),
 * ascending, into *out (*out_n of them; the caller's, freed with tq_free;
 * NULL when none). Returns 0 on success, also for a job without parents,
 * or: TQ_ENOTFOUND for an unknown id; or a code of the store's. */
int tq_job_parents(int64_t **out, size_t *out_n, tq *db, int64_t id);

/* A parent of a job, as the job counts it (tq_job_parent_ends). */
typedef struct tq_parent {
    int64_t id;
    /* For a child that waits for the parent's end (when_ended): the end
     * it counted (TQ_DONE, TQ_DEAD or TQ_CANCELLED), which stays as it was
     * if the parent is retried after the child's first claim; before, the
     * parent's state. For a child that needs it done: the parent's state
     * (TQ_DONE also once its row is deleted). */
    tq_state state;
    int when_ended; /* the child waits for its end (tq_enqueue_opts.after_ended) */
} tq_parent;

/* Job id's parents, ascending, each with its end as the job counts it,
 * into *out (*out_n of them; the caller's, freed with tq_free; NULL when
 * none). A handler's way to the outcomes of a batch it waited for.
 * Returns as tq_job_parents. */
int tq_job_parent_ends(tq_parent **out, size_t *out_n, tq *db, int64_t id);

/* Manual management. Each returns TQ_ENOTFOUND for an unknown id and
 * TQ_ESTATE when the job is in a state the action does not apply to. */
/* Dead or cancelled -> ready (or waiting, while some of its parents are
 * not done; cancelled again when one of them is dead or cancelled),
 * attempts and snoozes reset to 0; the children its end cancelled come
 * back. Returns 0 on success, or: TQ_EINVAL for an id that is not
 * positive; TQ_ENOTFOUND; TQ_ESTATE for a job that is not dead or
 * cancelled; or a code of the store's. */
int tq_job_retry(tq *db, int64_t id);
/* Ready, waiting or running -> cancelled, with its waiting children. A
 * running job's holder finds TQ_ELOST at its next acknowledgement. Returns
 * 0 on success, or: TQ_EINVAL for an id that is not positive;
 * TQ_ENOTFOUND; TQ_ESTATE for a job that is done, dead or cancelled; or a
 * code of the store's. */
int tq_job_cancel(tq *db, int64_t id);
/* The same for n jobs (an id given twice counts once), all or none: when
 * one of them is unknown or in the wrong state, nothing changes and the
 * message names that one. One transaction. Returns 0 on success, or:
 * TQ_EINVAL for no ids (n 0 or ids NULL) or one that is not positive;
 * TQ_ENOTFOUND or TQ_ESTATE as tq_job_retry; TQ_ENOMEM; or a code of the
 * store's. */
int tq_job_retry_ids(tq *db, const int64_t *ids, size_t n);
/* tq_job_cancel for n jobs, as tq_job_retry_ids: all or none, one
 * transaction. Returns 0 on success, or: TQ_EINVAL for no ids or one that
 * is not positive; TQ_ENOTFOUND or TQ_ESTATE as tq_job_cancel; TQ_ENOMEM;
 * or a code of the store's. */
int tq_job_cancel_ids(tq *db, const int64_t *ids, size_t n);
/* Every dead job (of queue, or of every queue if NULL), as tq_job_retry
 * does, in one transaction; *out_count (may be NULL) gets how many.
 * Returns 0 on success, also when there were none, or: TQ_EINVAL for an
 * invalid queue name; or a code of the store's. */
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

/* Jobs as opts says (NULL: every queue and state, 100 jobs), newest first:
 * by id, or for a finished state (done, dead, cancelled) by when they
 * finished (before_id then pages below that job's finish, and gives
 * nothing once the job has left the state). A list of one state walks that
 * state's index, so it costs what that state holds (waiting on SQLite: the
 * dependency rows kept). Payloads are included. *out (*out_n jobs) is the
 * caller's, freed with tq_job_array_free(*out, *out_n) whatever the call
 * returned. Returns 0 on success, also for an empty page, or: TQ_EINVAL
 * for an invalid queue name, a state out of range or a negative before_id;
 * or a code of the store's. */
int tq_job_list(tq_job **out, size_t *out_n, tq *db, const tq_list_opts *opts);

/* Deletes finished jobs (states in state_mask, bit (1 << tq_state)) that
 * finished before now - older_than_us, in one transaction; *out_count (may
 * be NULL) gets how many on success. Returns 0 on success, or: TQ_EINVAL
 * for an age outside 0 to 3650 days, or a mask that is empty or has a
 * state that is not finished; or a code of the store's. */
int tq_job_prune(int64_t *out_count, tq *db, int64_t older_than_us, unsigned state_mask);
/* The same for at most limit rows of each state in the mask, in one
 * transaction (limit 0: all): called until it prunes fewer, it keeps each
 * transaction short beside running workers (tq prune does, 10,000 at a
 * time). Returns as tq_job_prune, and TQ_EINVAL for a negative limit. */
int tq_job_prune_batch(int64_t *out_count, tq *db, int64_t older_than_us,
                       unsigned state_mask, int64_t limit);

/* Puts back running jobs whose lease expired: to ready, or to dead when
 * their attempts are used up (which cancels their waiting children);
 * *out_count (may be NULL) gets how many. SQLite does it in one
 * transaction, PostgreSQL in batches of their own, so that a failure there
 * may follow batches already put back. Returns 0 on success or a code of
 * the store's. */
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
 * its first slot is the first after now. opts is required; its strings and
 * payload are copied. Returns 0 on success, or: TQ_EINVAL, nothing stored,
 * for an invalid name or queue name, no opts, a bad spec or zone (one this
 * host's time-zone database lacks included), a spec with no slot ahead,
 * or a payload over TQ_PAYLOAD_MAX_DEFAULT bytes (TQ_EINVAL here, not
 * TQ_ETOOBIG) or NULL with a length; or a code of the store's. */
int tq_schedule_set(tq *db, const char *name, const tq_schedule_opts *opts);
/* Removes schedule name (the jobs it enqueued stay). Returns 0 on success,
 * or: TQ_EINVAL for an invalid name; TQ_ENOTFOUND if there is no such
 * schedule; or a code of the store's. */
int tq_schedule_remove(tq *db, const char *name);
/* All schedules by name: *out_n of them in *out, the caller's, freed with
 * tq_schedule_array_free(*out, *out_n) (NULL and 0 on failure). Returns 0
 * on success or a code of the store's. */
int tq_schedule_list(tq_schedule **out, size_t *out_n, tq *db);
/* Frees an array of n schedules from tq_schedule_list, their payloads
 * included (accepts NULL). Returns nothing. */
void tq_schedule_array_free(tq_schedule *v, size_t n);
/* Enqueues the due slots of every schedule (what workers do): *out_enqueued
 * jobs (may be NULL); *out_next_us (may be NULL) how long until the next
 * slot of any schedule, from now (-1: no schedule). Both are set once the
 * schedules and the store's clock could be read. A schedule that fails
 * stops none of the others (but a lost connection ends the round). Returns
 * 0 when every due one ran, else the first failure's code, with its
 * message: TQ_EINVAL for a schedule whose spec or zone this host cannot
 * read (a zone missing from its time-zone database), or a code of the
 * store's. */
int tq_schedule_run(tq *db, int64_t *out_enqueued, int64_t *out_next_us);
/* The first slot of spec in zone tz (NULL: UTC) strictly after after_us
 * (microseconds since the epoch), computed here, without a store. Returns 0
 * and sets *out_us, or TQ_EINVAL for a bad spec or zone, or no slot within
 * nine years, with the reason in msg (msglen bytes, NUL-terminated; msglen
 * may be 0). */
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

/* Stats for one queue, or all queues when queue is NULL, into *out (zeroed
 * first; a queue without jobs, or none of that name, gives zeros). The
 * durations are those of the 1000 most recently finished done jobs.
 * Returns 0 on success, or: TQ_EINVAL for an invalid queue name; or a code
 * of the store's. */
int tq_stats_get(tq_stats *out, tq *db, const char *queue);

/* A SQLite store's write-ahead log (its -wal file), after a checkpoint. */
typedef struct tq_wal_info {
    int64_t bytes;      /* the -wal file's size */
    int64_t frames;     /* pages written to it since it last started over */
    int64_t backfilled; /* of those, copied into the store */
    /* 1 when a reader's open transaction holds the checkpoint back: past
     * 4,000 pages (four times SQLite's automatic checkpoint) with pages the
     * checkpoint could not copy. The file then grows with every job and
     * every read is slower for it, until that transaction ends
     * (docs/operations.md). */
    int held;
} tq_wal_info;

/* Runs a passive checkpoint of db's store (it copies what no reader holds
 * back and waits for nobody) and fills *out; on PostgreSQL, whose server
 * keeps its own log, all zero. Workers do this every 5 seconds and log a
 * warning once the checkpoint has been held back for 10. Returns 0 on
 * success (also when another connection's checkpoint was under way: *out
 * all zero), or a code of the store's. */
int tq_wal_check(tq_wal_info *out, tq *db);

/*
 * Durations (finished_at - started_at) of up to limit most recently finished
 * done jobs of queue (NULL: all), in no particular order (limit 0: none).
 * *out (*out_n values) is the caller's, freed with tq_free whatever
 * *out_n is (NULL and 0 on failure). Returns 0 on success, or: TQ_EINVAL
 * for an invalid queue name; or a code of the store's.
 */
int tq_job_durations(int64_t **out, size_t *out_n, tq *db, const char *queue,
                     size_t limit);

/* The value at fraction q (0..1) of n values, by nearest rank (q <= 0: the
 * smallest, q >= 1: the largest); sorts v in place. Returns it, or 0 if n
 * is 0; cannot fail. */
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
 * *out (*out_n counts) is the caller's, freed with tq_free whatever *out_n
 * is (NULL and 0 on failure). Returns 0 on success, or: TQ_EINVAL for a
 * state out of range, or by_worker with a state other than TQ_RUNNING; or
 * a code of the store's.
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
 * *out (*out_n jobs) is the caller's, freed with tq_free whatever *out_n
 * is (NULL and 0 on failure); the position moves only on success.
 * Returns 0 on success, also when nothing finished, or: TQ_EINVAL for a
 * settle_us outside 0 to 3650 days or a limit too large; or a code of the
 * store's.
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

/* Every registered worker, by name, alive or not (alive as of the store's
 * clock now): *out_n of them in *out, the caller's, freed with tq_free
 * whatever *out_n is (NULL and 0 on failure). Returns 0 on success or a
 * code of the store's. */
int tq_worker_list(tq_worker_info **out, size_t *out_n, tq *db);
/* Deletes the registrations of workers that stopped, or went silent past
 * their lease, longer than older_than_us ago (their names are free to take
 * anyway); live workers are never touched. *out_count (may be NULL): how
 * many. Returns 0 on success, or: TQ_EINVAL for an age outside 0 to 3650
 * days; or a code of the store's. */
int tq_worker_prune(int64_t *out_count, tq *db, int64_t older_than_us);

typedef struct tq_worker tq_worker;

/*
 * A C handler: runs one job, returns 0 for done or non-zero for failure, in
 * which case it may write a message into err (errlen bytes, NUL-terminated).
 * Called from the pool's own threads, at most opts.concurrency at once.
 */
typedef int (*tq_handler_fn)(void *ud, const tq_job *job, char *err, size_t errlen);

/*
 * Called by a C handler, from within its call and for the job it was given
 * (that very pointer), to say what a command handler says on its control
 * channel (descriptor 3). Each returns TQ_EINVAL from anywhere else. None
 * reaches the store or sets a message: the worker sends what was said. A
 * snooze or a discard decides how the job ends, whatever the handler then
 * returns: as tq_job_snooze and tq_job_discard do; the last one said
 * counts.
 */
/* Progress, pct 0 to 100 and text (NULL, or cut at 200 bytes), written
 * within a second, fenced, as tq_job_progress does. Returns 0, or
 * TQ_EINVAL for pct out of range (or as above). */
int tq_handler_progress(const tq_job *job, int pct, const char *text);
/* The job's result, kept if the handler then returns done: len bytes (data
 * may be NULL when len is 0), at most TQ_RESULT_MAX. Copied: data may go
 * once this returns; a later call replaces it. Stored whatever the queue's
 * results setting, which is about commands' stdout, unless the queue
 * deletes finished rows. Returns 0, or: TQ_EINVAL for NULL data with len >
 * 0 (or as above); TQ_ETOOBIG for len over TQ_RESULT_MAX, after which no
 * result is kept, an earlier one neither; TQ_ENOMEM. */
int tq_handler_result(const tq_job *job, const void *data, size_t len);
/* Snooze: back to ready after delay_us (0 to 365 days), the attempt not
 * spent, as tq_job_snooze (its max_snoozes included). Returns 0, or
 * TQ_EINVAL for a delay out of range (or as above). */
int tq_handler_snooze(const tq_job *job, int64_t delay_us);
/* Discard: dead at once with reason (copied; NULL or "": "discarded by its
 * handler"), as tq_job_discard. Returns 0, or: TQ_EINVAL as above;
 * TQ_ENOMEM. */
int tq_handler_discard(const tq_job *job, const char *reason);
/* When this run's time is up (tq_queue_info.timeout_us: the job's own
 * timeout, its queue's, or the worker's), in microseconds since the epoch
 * by this machine's clock, counted from the handler's start; 0 when it has
 * none. A callback cannot be stopped from outside, so the worker does not
 * try: one that should end on time reads this and returns before it (an
 * error, or a snooze), and what it returns after it counts as it would
 * before. Returns 0 too for a job not being run by a worker's callback. */
int64_t tq_handler_deadline(const tq_job *job);

/* Log levels passed to tq_worker_opts.log. */
enum { TQ_LOG_ERROR = 0, TQ_LOG_WARN, TQ_LOG_INFO, TQ_LOG_DEBUG };

#define TQ_WORKER_OPTS_VERSION 5
#define TQ_PREFETCH_DEFAULT    2048
#define TQ_PREFETCH_MAX        65536 /* most jobs one worker claims ahead */
#define TQ_CONCURRENCY_MAX     1024  /* most slots of one worker */
enum { TQ_DRAIN_ALL = 1, TQ_DRAIN_DUE = 2 };

typedef struct tq_worker_opts {
    int version;
    const char *const *queues; /* names; NULL or nqueues 0: {"default"} */
    size_t nqueues;
    const char *name; /* NULL: "host:pid" */
    int concurrency;  /* jobs at once, 1 to TQ_CONCURRENCY_MAX; 0: 1 */
    /* TQ_DRAIN_ALL (1): return once nothing in the queues is ready (due or
     * delayed), running or waiting for its parents; TQ_DRAIN_DUE (2):
     * once no job of them is due now and none runs on this worker,
     * leaving delayed and waiting jobs for later; 0: run until stopped. */
    int drain;
    /* A run's time limit when neither the job nor its queue sets one
     * (tq_queue_info.timeout_us); 0: none. */
    int64_t timeout_us;
    int64_t grace_us;    /* on stop, and from SIGTERM to SIGKILL; 0: 10 s */
    int64_t poll_max_us; /* longest sleep between polls while polling; 0: 500 ms */
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
    /* Version 4. Serve every queue of the store, those made while it runs
     * too (seen within a second), instead of queues (which must then be
     * empty). Each pass of the worker claims from the queues in turn, in
     * the order of their names, starting one queue further each pass, as it
     * does for named queues; each queue keeps its order, pause, limits and
     * rate. */
    int all_queues;
    /* Version 5. At its start the worker forgets the registrations of
     * workers stopped, or silent past their lease, for longer than this
     * (tq_worker_prune), so that restarts do not pile up in tq_worker_list:
     * 0: a day; -1: never. (A PostgreSQL role granted TQ_GRANT_WORKER may
     * not delete them: its workers forget none.) */
    int64_t forget_stopped_us;
} tq_worker_opts;
#define TQ_WORKER_OPTS_INIT                                                              \
    {                                                                                    \
        TQ_WORKER_OPTS_VERSION, NULL, 0, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL,    \
            NULL, 0, 0, 0, 0                                                             \
    }

/* Counters of one run, readable after tq_worker_run returns. Each ended
 * run counts once, as the store took its end: done; failed (retried, dead
 * or discarded: the three below add up to it); released (given back
 * unspent, snoozed included); or lost (its lease was gone, the result
 * thrown away). */
typedef struct tq_worker_counters {
    int64_t claimed, done, failed, lost, released, busy_retries;
    int64_t retried;   /* failed, to run again after its backoff */
    int64_t dead;      /* failed with no attempt left */
    int64_t discarded; /* dead at its handler's word */
    int64_t snoozed;   /* back to ready later at its handler's word */
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
 *
 * opts is required; its strings are copied (handler_ud and log_ud are
 * passed on as given). *out (NULL on failure) is the caller's, freed with
 * tq_worker_free; db stays the caller's and must outlive it. Returns 0 on
 * success, or: TQ_EINVAL for a NULL out, a db that is NULL, whose
 * tq_open failed or that uses the caller's connection (opts->conn), or bad
 * options (none or both of handler and
 * argv, a command not found or not executable, a concurrency, duration or
 * prefetch out of range, an invalid queue or worker name, queues given
 * with all_queues); TQ_EINUSE if a
 * live worker holds the name; TQ_ESYS when a pipe, the handlers' reaper or
 * a handler thread cannot be started; TQ_ENOMEM; or a code of the store's.
 */
int tq_worker_new(tq_worker **out, tq *db, const tq_worker_opts *opts);
/*
 * Runs until stopped (or drained, with opts.drain). While it runs SIGPIPE
 * is ignored in the whole process (a handler that stops reading its stdin
 * must not end the worker); the disposition it had is restored on return.
 * It rides out TQ_EBUSY, TQ_EFULL and, on PostgreSQL, TQ_ECONN
 * (reconnecting). Returns 0 on a clean stop, also one that found the store
 * out of reach or full and left unsent results to the leases (the log says
 * so), or: TQ_ESYS after stopping because the command could not be
 * started for 10 s (the program gone or not executable), or nothing could
 * start for a minute while nothing ran; TQ_EINUSE after stopping because
 * another process registered the worker's name while it ran; TQ_ECONN when
 * a SQLite store's file was deleted or replaced while it ran; or another
 * code of the store's it cannot ride out (TQ_ESCHEMA, TQ_EDB, TQ_ENOMEM,
 * ...), after killing its command handlers and giving back what it holds;
 * TQ_EINVAL for a NULL w.
 */
int tq_worker_run(tq_worker *w);
/* Asks a running pool to stop: claim nothing more, let running jobs finish
 * within the grace period, then kill them and release their jobs. A second
 * call while it stops ends the grace at once: command handlers are killed
 * (SIGKILL to their process groups) and their jobs released unspent;
 * callback handlers, which cannot be killed, are still waited for.
 * Async-signal-safe and thread-safe; does nothing for NULL. Returns
 * nothing; tq_worker_run's result says how the run ended. */
void tq_worker_stop(tq_worker *w);
/* Copies the run's counters into *out. Safe from any thread while
 * tq_worker_run runs (busy_retries excepted, which is read after it
 * returns). Zeroes *out for a NULL w. Returns nothing. */
void tq_worker_counters_get(tq_worker_counters *out, const tq_worker *w);
/* Returns the worker's registered name, borrowed until tq_worker_free;
 * never NULL for a worker tq_worker_new made, NULL for NULL. */
const char *tq_worker_name(const tq_worker *w);
/* The name tq_worker_new gives a worker of this process when its options
 * name none, into out (len bytes, NUL-terminated, cut if short): HOST:PID,
 * or HOST:PID@NS (the PID namespace's inode number) in a PID namespace of
 * its own, where a sibling container with the same hostname may run its
 * worker under the same PID. Returns nothing. */
void tq_worker_default_name(char *out, size_t len);
/* Marks the worker stopped in the store (unless another process has taken
 * its name since) and frees it (accepts NULL), after tq_worker_run has
 * returned or instead of running it. Callback handlers still running are
 * waited for. db is the caller's again, as it came. Returns nothing: a
 * failure to mark the stop is not reported (the registration then lapses
 * with its lease). */
void tq_worker_free(tq_worker *w);

/* ---- Utilities used by the tool, exported for any caller ---------------- */

/* Parses "250ms", "30s", "5m", "2h", "7d" (also "us" and fractions such as
 * "1.5s"), compounds like "1h30m", or a plain number of seconds. Returns 0
 * and sets *out_us, or TQ_EINVAL for anything else (NULL, "", an unknown
 * unit, "1h30", an overflow; *out_us is then left alone). */
int tq_duration_parse(int64_t *out_us, const char *text);
/* Formats a duration compactly ("1.5s", "250ms", "0s"; a negative one with a
 * '-') into buf, len bytes, cut if short. Returns buf. */
char *tq_duration_format(char *buf, size_t len, int64_t us);
/* Parses "YYYY-MM-DDTHH:MM[:SS[.FRACTION]][Z|+HH:MM]" (no zone: local
 * time; the form tq_time_format prints), a date alone
 * "YYYY-MM-DD[Z|+HH:MM]" (its first moment, 00:00) or "@SECONDS", from
 * 1970 to the end of 9999. Returns 0 and sets *out_us, or TQ_EINVAL (*out_us is then left
 * alone). */
int tq_time_parse(int64_t *out_us, const char *text);
/* Formats as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into buf, len bytes, cut if
 * short; a time the C library cannot convert as "@SECONDS.MICROSECONDS".
 * Returns buf. */
char *tq_time_format(char *buf, size_t len, int64_t us);

/* Frees what the comments above say to free with tq_free (arrays of queue
 * info, counts, workers, finished jobs and durations, a job's result or
 * parents, the strings of tq_utf8_clean and tq_text_printable); accepts
 * NULL. Returns nothing. */
void tq_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* TQ_H */
