/*
 * engine.h - the interface every storage engine implements.
 *
 * Shared code (api.c, worker/) calls an engine only through this table
 * and asks caps, never an engine's name. Each engine is one folder
 * (sqlite/, postgres/) holding its SQL in files named by concern, and one
 * `const struct tq__engine` definition (sqlite/sqlite.c,
 * postgres/postgres.c). Engines own "now": SQLite uses the
 * machine's clock, PostgreSQL the server's now(), so callers pass durations
 * (lease, delay, backoff), never absolute times, except where a user gave
 * one (tq_enqueue_opts.run_at).
 *
 * Every function sets tq_errmsg(db) through tq__seterr on failure.
 */
#ifndef TQ_ENGINE_H
#define TQ_ENGINE_H

#include "../tq_int.h"
#include "../url.h"

#include <string.h>

/*
 * Where each field of a job row is, by column number, in the engines' job
 * rows (JOB_COLS), and in what a claim returns (CLAIMED_COLS: only what the
 * claimer does not know). -1: not in the row, which is then a claimed one:
 * running, not finished, its queue and worker those of the claim.
 */
typedef struct tq__job_cols {
    int id, queue, payload, state, priority, attempts, max_attempts, key, worker,
        last_error, created_at, run_at, started_at, finished_at, lease_until, claim,
        traceparent, group, snoozes, progress, progress_text, result_len, nparents,
        waiting_for, timeout;
} tq__job_cols;

static const tq__job_cols tq__all_cols = {0,  1,  2,  3,  4,  5,  6,  7,  8,
                                          9,  10, 11, 12, 13, 14, 15, 16, 17,
                                          18, 19, 20, 21, 22, 23, 24};
static const tq__job_cols tq__claimed_cols = {0,  -1, 1,  -1, 2,  3,  4,  5,  -1,
                                              6,  7,  8,  9,  -1, 10, 11, 12, 13,
                                              14, -1, -1, -1, 15, -1, 16};

/*
 * What a worker reports about one claimed job. The values are part of the
 * PostgreSQL engine's grouped acknowledgement (its kinds array), so they are
 * pinned here: never renumber them.
 */
typedef enum tq__ack_kind {
    TQ__ACK_DONE = 0,    /* finished: done (or deleted if the queue drops done rows) */
    TQ__ACK_FAIL = 1,    /* failed: ready after delay_us, or dead when out of attempts */
    TQ__ACK_RELEASE = 2, /* given back: ready, the run's attempt not spent */
    TQ__ACK_BEAT = 3,    /* still held: lease_until = now + delay_us */
    /* The handler's word (control.h), each one statement of its own: */
    TQ__ACK_SNOOZE = 4,  /* ready at now + delay_us, attempt given back, snoozes + 1 */
    TQ__ACK_DISCARD = 5, /* dead at once, error its last_error */
    TQ__ACK_PROGRESS = 6 /* still running: progress and error (its text) stored */
} tq__ack_kind;

/*
 * One fenced change to a claimed job.
 *
 * THE FENCING RULE. Every claim adds one to the row's `claims` counter, and
 * the claim's value of it (tq_job.claim) is the claim's token: it names
 * that one claim of that row forever, because the counter never goes down
 * and is never reset (retry resets `attempts`, release gives an attempt
 * back; neither touches `claims`). Every statement that changes a claimed
 * job must carry `state = 'running' AND worker = ? AND claims = ?` in its
 * WHERE clause, with the worker name and token of the claim. A row that no
 * longer matches belongs to another claim (or was cancelled, retried,
 * rescued); the change is skipped and result is TQ_ELOST. The worker name
 * stays in the fence although the token alone is unique: after a failover
 * to a replica that lost the last commits, a row's counter can repeat a
 * value some worker still holds, and the name tells the two claims apart.
 * An editor adding a new kind of acknowledgement must keep that predicate.
 *
 * STARTS. A claim is a start (the job runs at once: its attempt is charged
 * and started_at set by the claim) or a hold (claimed ahead: started_at
 * NULL, nothing charged). A held job's start is recorded by the first
 * acknowledgement that carries started_us > 0 for it, which charges the
 * attempt and sets started_at = now - started_us if the store has not
 * recorded a start for this claim yet (started_at IS NULL), so sending it
 * twice counts once. On a running row, started_at IS NOT NULL means "this
 * claim's attempt is charged": release gives it back, and the rescues give
 * back nothing for a claim that never started (the job keeps its place).
 *
 * A crash within ACK_DELAY_US of a held job's start loses the record of
 * it: the rescue cannot tell a run that started from one that did not.
 * So that a job that kills its worker at once cannot loop uncharged, each
 * claim that ends (rescued, or failed unrun) with no start recorded adds one to the row's
 * unknown_starts, a recorded start resets it, and a hold of a row with unknown_starts >=
 * 2 is charged like a start: at most three such claims per attempt.
 */
typedef struct tq__ack {
    int64_t id;
    int64_t claim; /* the claim's token (tq_job.claim) */
    tq__ack_kind kind;
    int64_t delay_us;  /* FAIL: backoff; BEAT: lease length; SNOOZE: delay */
    const char *error; /* FAIL, DISCARD: last_error; PROGRESS: its text; or NULL */
    int progress;      /* PROGRESS: 0 to 100 */
    /* DONE (kept): the job's result, output_len bytes, or NULL for none
     * (then the plain statements, which leave the column alone). */
    const void *output;
    size_t output_len;
    int delete_done;    /* DONE: delete the row instead of keeping it */
    int64_t started_us; /* > 0: the job's handler started this long ago */
    int result;         /* out: 0 applied, TQ_ELOST fenced out */
} tq__ack;

/*
 * DEPENDENCIES. A job enqueued after parents has one row per parent in the
 * store's dependency table (parent, child, release_when, parent_state),
 * kept as long as the child is, and counts in waiting_for its parents that
 * still hold it: for a dependency released when the parent is 'done' (the
 * default), parents not done; for one released when it 'ended'
 * (tq_enqueue_opts.after_ended), parents whose end it has not counted
 * (parent_state NULL). Each engine keeps these rules in the transaction
 * that changes the parent, whoever changes it (acknowledgements, rescues,
 * cancels, retries; PostgreSQL by triggers, also for plain SQL; SQLite in
 * its own code, since a trigger on the jobs table costs every job's
 * update):
 *   - a parent that becomes done takes one from each child's waiting_for,
 *     once (done is final), and a waiting child at 0 becomes ready, due no
 *     earlier than now;
 *   - a parent that becomes dead or cancelled cancels its waiting
 *     children that need it done (cancelled_by = the parent, last_error
 *     naming it), and so theirs in turn;
 *   - a parent that becomes done, dead or cancelled (directly or by that
 *     cascade) is counted off by each child that waits for its end and has
 *     not counted it, as above, and parent_state records that end;
 *   - a parent retried out of dead or cancelled puts the children it
 *     cancelled back to waiting, and so theirs in turn, unless another of
 *     a child's parents is dead or cancelled, which then holds it; and
 *     each of those (the parent and the children back) counts again in the
 *     children that wait for its end, counted it, and have not been
 *     claimed (ready ones wait again; parent_state back to NULL), so that
 *     a retry of a parent and such a child together, in either order,
 *     leaves the child waiting. A child claimed already keeps the end it
 *     counted.
 * A dependency row inserted (at enqueue; plain SQL inserts them after the
 * child) counts its parent in the child's nparents and, unless it is done
 * (or for 'ended', ended: then parent_state records how), waiting_for, and
 * sets the child waiting, ready or (a dead or cancelled parent it needs
 * done) cancelled; one naming a job that does not exist, or a child
 * already claimed, is refused.
 */

/* The end a child counted of its parent (the row d of the dependency
 * table, p the parent's job, absent once deleted), as job_parents gives
 * it: for a child that waits for its end, the end it counted, else the
 * parent's state; for one that needs it done, its state (a parent
 * deleted after it was done: done). */
#define PARENT_END                                                                       \
    "CASE WHEN d.release_when = 'ended' THEN coalesce(d.parent_state, p.state, 'ready')" \
    " ELSE coalesce(p.state, 'done') END"

/* What one queue holds that is not finished (tq__engine.active). */
typedef struct tq__active {
    char queue[65];
    int64_t due;            /* ready, and due */
    int64_t delayed;        /* ready, due later */
    int64_t running;        /* claimed, by any worker */
    int64_t next_due_in_us; /* delayed: when the soonest is due, from now */
} tq__active;

/* The claim half of an exchange. */
typedef struct tq__claim {
    const char *queue;
    tq_order order;
    int64_t lease_us;
    int max_attempts; /* the queue's, as the claimer knows it */
    size_t max;
    /* Start the claimed jobs (charge an attempt, unless one is out of them:
     * that one comes back held), or hold them (see STARTS above). */
    int start;
    /* Whether the claim applies the queue's concurrency limits, as the
     * store has them. A claim without (the worker's, for a queue it knows
     * has none: the cheaper statement) takes nothing from a queue that has
     * limits. */
    int limited;
    /* Whether a limited claim's queue has a group limit, as the claimer
     * knows it: without one, the cheaper statement that counts no groups
     * (CLAIM_ROOM), which takes nothing from a queue that has one. */
    int grouped;
    /* Whether the queue has a rate limit, as the claimer knows it: a
     * limited claim then also asks when the next token is due. (The claim
     * keeps the rate whatever this says.) */
    int rate;
    /* Whether the queue has a limit on its running jobs (max_running), as
     * the claimer knows it. (Either way the claim keeps the store's.) */
    int capped;
    /* A limited claim of a FIFO or unordered queue: when > 1 (CLAIM_CHAIN),
     * it may take up to this many jobs of a group with room, however many
     * of that group may run at once, whole chains of few groups rather than
     * some of every group, and the claimer runs the claimed jobs of a group
     * one at a time (its other running jobs of that group included): the
     * others of the group wait in the claimer, counted as running by
     * everyone else, so the group never runs more than its limit. 0 or 1:
     * no more of a group than may run at once (CLAIM_GROUPS). */
    size_t chain;
    /* Out, from a limited claim of a queue with a rate limit: > 0 when the
     * rate stopped it (no token left), how long until the next token; and
     * how long after the exchange began (by a clock started no earlier than
     * the call) the store took the claim's tokens: the jobs' starts trail
     * their tokens by no more than they trail that moment. 0 when not
     * known. */
    int64_t rate_wait_us, taken_after_us;
    /* The claimer's registration (the started_at of its worker's row, which
     * never repeats for a name: engine worker_register), recorded in each
     * job it claims, so that a rescue of that registration takes its jobs
     * and no others of the name; 0: none (tq_job_claim). */
    int64_t worker_since;
    /* Out, from a limited claim that took jobs: whether the store's queue
     * has a rate limit, whatever rate said (its jobs must then start soon,
     * a limit set since the claimer last read the queue's settings). */
    int rate_found;
    /* In: look, in the claim's transaction, for what an idle claimer waits
     * for (S_SOONEST; not with a claim of a queue whose only limit is a
     * rate). Out: how long until the queue's first ready job is due (<= 0:
     * one is due now, that this claim did not take: held back by a limit,
     * or taken by it), and until the first lease of any running job ends
     * (<= 0: one has ended, not yet rescued); TQ__NEVER when there is none
     * or the engine did not look. */
    int look;
    int64_t due_in, lease_in;
} tq__claim;

/* A claim's limited, grouped, rate and capped, from the queue's settings q
 * as the claimer read them. */
static inline void tq__claim_limits(tq__claim *c, const tq_queue_info *q)
{
    c->limited = tq__queue_limited(q);
    c->grouped = q->max_running_per_group > 0;
    c->rate = q->rate_limit > 0;
    c->capped = q->max_running > 0;
}

/* Which statement a claim takes (the values are the plan tests' kinds:
 * never renumber them). */
enum tq__claim_kind {
    TQ__CLAIM_PLAIN = 0,  /* without limits: CLAIM, the cheapest */
    TQ__CLAIM_GROUPS = 1, /* limited, with a group limit: CLAIM_GROUPS (LIFO:
                             CLAIM_LIMITED) */
    TQ__CLAIM_CHAIN = 2,  /* a chain's (tq__claim.chain): CLAIM_CHAIN (LIFO
                             queues have none: CLAIM_LIMITED) */
    TQ__CLAIM_ROOM = 3,   /* limited, without a group limit: CLAIM_ROOM */
    TQ__CLAIM_RATE = 4    /* PostgreSQL's own: a hold of a queue whose only
                             limit is a rate (CLAIM_RATE) */
};

static inline enum tq__claim_kind tq__claim_kind(const tq__claim *c)
{
    return !c->limited                           ? TQ__CLAIM_PLAIN
           : !c->grouped                         ? TQ__CLAIM_ROOM
           : c->chain > 1 && c->order != TQ_LIFO ? TQ__CLAIM_CHAIN
                                                 : TQ__CLAIM_GROUPS;
}

/* The claim statements stand at the head of each engine's statement ids
 * (enum stmt_id), by kind, then order (FIFO, LIFO, unordered; a chain has
 * no LIFO one), then PostgreSQL's S_CLAIM_RATE_{FIFO,LIFO,ANY}: X(id,
 * TEXT, ORDER), where each engine's claim.c defines TEXT(ORDER), the
 * statement of that kind for that queue order. */
/* clang-format off */
#define TQ__CLAIM_STMTS(X)                                                               \
    X(S_CLAIM_FIFO, CLAIM, FIFO)                                                         \
    X(S_CLAIM_LIFO, CLAIM, LIFO)                                                         \
    X(S_CLAIM_ANY, CLAIM, UNORDERED)                                                     \
    X(S_CLAIM_GROUPS_FIFO, CLAIM_GROUPS, FIFO)                                           \
    X(S_CLAIM_LIMITED_LIFO, CLAIM_LIMITED, LIFO)                                         \
    X(S_CLAIM_GROUPS_ANY, CLAIM_GROUPS, UNORDERED)                                       \
    X(S_CLAIM_CHAIN_FIFO, CLAIM_CHAIN, FIFO)                                             \
    X(S_CLAIM_CHAIN_ANY, CLAIM_CHAIN, UNORDERED)                                         \
    X(S_CLAIM_ROOM_FIFO, CLAIM_ROOM, FIFO)                                               \
    X(S_CLAIM_ROOM_LIFO, CLAIM_ROOM, LIFO)                                               \
    X(S_CLAIM_ROOM_ANY, CLAIM_ROOM, UNORDERED)
/* clang-format on */

/* Whether order and kind name a claim statement, of an engine whose last
 * kind is last (for the plan tests' tq__*_claim_sql). */
static inline int tq__claim_known(tq_order order, int kind, enum tq__claim_kind last)
{
    return (unsigned)order < 3 && (unsigned)kind <= (unsigned)last;
}

/* The list's order, as tq__claim_stmt's table has it (each engine's enum
 * stmt_id begins with the list). */
#define TQ__CLAIM_STMT_PLACE(id, text, order) TQ__PLACE_##id,
enum tq__claim_stmt_place { TQ__CLAIM_STMTS(TQ__CLAIM_STMT_PLACE) };
_Static_assert(TQ__PLACE_S_CLAIM_FIFO == 0 && TQ__PLACE_S_CLAIM_LIMITED_LIFO == 4 &&
                   TQ__PLACE_S_CLAIM_CHAIN_ANY == 7 && TQ__PLACE_S_CLAIM_ROOM_ANY == 10,
               "the claim statements are in tq__claim_stmt's places");

/* The place of the claim statement of an order and a kind among them. */
static inline int tq__claim_stmt(tq_order order, enum tq__claim_kind kind)
{
    static const unsigned char at[5][3] = {
        {0, 1, 2}, {3, 4, 5}, {6, 4, 7}, {8, 9, 10}, {11, 12, 13}};
    return at[kind][order];
}

/* The other statements both engines have, each with its own text in the
 * file of its concern: they follow the claim statements in each engine's
 * enum stmt_id, then that engine's own. (The acknowledgements that go one
 * job at a time come first: PostgreSQL keeps their ids as bits of a
 * 64-bit mask.) */
/* clang-format off */
#define TQ__SHARED_STMTS(X)                                                              \
    X(S_FAIL) X(S_SNOOZE) X(S_DISCARD) X(S_PROGRESS)                                     \
    X(S_RATE_TAKE) X(S_RATE_WAIT)                                                        \
    X(S_RESCUE_EXPIRED) X(S_RESCUE_WORKER)                                               \
    X(S_ENQUEUE_KEY) X(S_FIND_KEY) X(S_ENQUEUE_UKEY) X(S_FIND_UKEY) X(S_EXPIRE_KEY)      \
    X(S_QUEUE_ENSURE) X(S_QUEUE_UPDATE) X(S_QUEUE_GET) X(S_QUEUE_LIST)                   \
    X(S_PENDING) X(S_PENDING_DUE) X(S_SOONEST)                                           \
    X(S_JOB_GET) X(S_JOB_LIST) X(S_JOB_LIST_READY) X(S_JOB_LIST_RUNNING)                 \
    X(S_JOB_LIST_WAITING) X(S_JOB_LIST_FINISHED) X(S_JOB_STATE) X(S_JOB_RESULT)          \
    X(S_JOB_PARENTS) X(S_DEPS_ADD) X(S_DEPS_HOLD)                                        \
    X(S_RETRY_ONE) X(S_RETRY_DEAD) X(S_CANCEL) X(S_PRUNE) X(S_RETIRE)                    \
    X(S_COUNTS) X(S_OLDEST_READY) X(S_DELAYED) X(S_ACTIVE) X(S_DONE_SINCE)               \
    X(S_LONGEST) X(S_DURATIONS)                                                          \
    X(S_COUNT_READY) X(S_COUNT_RUNNING) X(S_COUNT_RUNNING_BY_WORKER)                     \
    X(S_COUNT_WAITING) X(S_COUNT_FINISHED) X(S_FINISHED_SINCE)                           \
    X(S_WORKER_GET) X(S_WORKER_PUT) X(S_WORKER_BEAT) X(S_WORKER_STOP)                    \
    X(S_WORKER_LIST) X(S_WORKER_PRUNE)                                                   \
    X(S_SCHEMA_VERSION)                                                                  \
    X(S_SCHEDULE_PUT) X(S_SCHEDULE_REMOVE) X(S_SCHEDULE_LIST)

/* The statement that lists jobs in state (job_list; < 0: any), and the one
 * that counts the jobs in state st (count_jobs), of those ids. */
#define TQ__JOB_LIST_STMT(state)                                                         \
    ((state) < 0             ? S_JOB_LIST                                                \
     : (state) == TQ_READY   ? S_JOB_LIST_READY                                          \
     : (state) == TQ_RUNNING ? S_JOB_LIST_RUNNING                                        \
     : (state) == TQ_WAITING ? S_JOB_LIST_WAITING                                        \
                             : S_JOB_LIST_FINISHED)
#define TQ__COUNT_STMT(st, by_worker)                                                    \
    ((st) == TQ_READY     ? S_COUNT_READY                                                \
     : (st) == TQ_WAITING ? S_COUNT_WAITING                                              \
     : (st) != TQ_RUNNING ? S_COUNT_FINISHED                                             \
     : (by_worker)        ? S_COUNT_RUNNING_BY_WORKER                                    \
                          : S_COUNT_RUNNING)

/* For the engines' enum stmt_id: the ids of those lists. */
#define TQ__CLAIM_STMT_ID(id, text, order) id,
#define TQ__STMT_ID(id)                    id,
/* clang-format on */

/*
 * What an engine can do beyond the required entries, said one way: a bit
 * here, and the entries that go with it set, or NULL without the bit.
 * Callers test the bit, never the pointer. Every other entry is required
 * (an engine with nothing to do for one gives a stub).
 */
enum {
    TQ__CAP_NOTIFY = 1 << 0, /* listen, notify_fd, notify_drain: woken by enqueues */
    TQ__CAP_NETWORK =
        1 << 1, /* reconnect, set_wait_limit: a connection that can be lost */
};

/* The size SQLite's -wal file is cut back to once its log restarts
 * (journal_size_limit): four times what its automatic checkpoint lets it
 * reach (1,000 pages of 4 KiB). */
#define TQ__WAL_LIMIT (16LL << 20)
/* Past this many pages (four times the automatic checkpoint's), pages a
 * checkpoint could not copy say a reader holds the log back (tq_wal_info). */
#define TQ__WAL_HELD_FRAMES 4000

/* tq__claim.due_in and lease_in: "there is none". */
#define TQ__NEVER INT64_MAX

struct tq__engine {
    const char *name;
    unsigned caps;

    /* borrow: the caller's connection to use instead of opening one
     * (tq_open_opts.conn), left open by close; NULL: open one. */
    int (*open)(tq *db, const tq__url *url, int create, void *borrow);
    void (*close)(tq *db);
    /* Creates or upgrades the schema, and gives the roles their grants
     * (tq_init_grants), all in one transaction. A store whose schema is
     * newer than this build's is left alone: TQ_ESCHEMA, with its version
     * in *found (the layer above words the message). */
    int (*init)(tq *db, const tq_grant *grants, size_t n, int *found);
    /* The schema version the store records: 0 when it has no tq schema. */
    int (*schema_version)(tq *db, int *version);
    /* Whether db uses the caller's connection (tq_open_opts.conn) and the
     * caller has a transaction open on it. */
    int (*in_caller_tx)(tq *db);

    int (*queue_set)(tq *db, const char *name, const tq_queue_opts *o);
    int (*queue_get)(tq *db, const char *name, tq_queue_info *out);
    int (*queue_list)(tq *db, tq_queue_info **out, size_t *out_n);

    /* n jobs, one transaction. key applies only when n == 1; with a
     * duplicate key *dup is set and ids[0] is the existing id. o->after:
     * ascending and distinct (no key then); each job gets those parents
     * (see DEPENDENCIES below), TQ_ENOTFOUND with a message naming the
     * first that does not exist, and nothing is written. */
    int (*enqueue)(tq *db, const char *queue, const tq_payload *items, size_t n,
                   const tq_enqueue_opts *o, int64_t *ids, int *dup);

    /*
     * The hot path: in one transaction, apply the fenced acks (may be none)
     * and then claim up to claim->max jobs of a queue that is not paused
     * (claim may be NULL). Claimed jobs come back in any order: the layer
     * above sorts them (tq__jobs_sort).
     */
    int (*exchange)(tq *db, const char *worker, tq__ack *acks, size_t nacks,
                    tq__claim *claim, tq_job **out, size_t *out_n);

    /* Running jobs back to ready, or dead when out of attempts (a claim
     * that never started goes back to ready unspent): those claimed under
     * worker by its registration since (tq__claim.worker_since; any lease)
     * if worker is not NULL, else those whose lease expired. */
    int (*rescue)(tq *db, const char *worker, int64_t since, int64_t *count);
    /* Whether any job of queue is ready (due or not) or running. */
    int (*pending)(tq *db, const char *queue, int *out);
    /* Whether any job of queue is ready and due now (tq work --drain=due). */
    int (*pending_due)(tq *db, const char *queue, int *out);
    /* What a claim's look finds (tq__claim.look: due_in, lease_in), without
     * a claim, when reading is cheaper than claiming: SQLite's, whose claim
     * takes the write lock; NULL where a notification says what changed
     * (PostgreSQL). */
    int (*peek)(tq *db, const char *queue, int64_t *due_in, int64_t *lease_in);

    int (*job_get)(tq *db, int64_t id, tq_job **out);
    /* Job id's result into *out (malloc'd, NUL after its *len bytes) when
     * it is done and has one; else *out NULL and *state the job's state
     * (-1: no such job). */
    int (*job_result)(tq *db, int64_t id, void **out, size_t *len, int *state);
    int (*job_list)(tq *db, const tq_list_opts *o, tq_job **out, size_t *out_n);
    /* Job id's parents, ascending, each with the end its child counted
     * (PARENT_END), into *out (malloc'd; NULL when none); TQ_ENOTFOUND,
     * without a message, for an unknown id. */
    int (*job_parents)(tq *db, int64_t id, tq_parent **out, size_t *out_n);
    /*
     * The n jobs ids[] (distinct), all or none, in one transaction: retry
     * puts dead or cancelled ones back to ready, cancel cancels ready or
     * running ones. When one of them cannot change, nothing does: *count
     * is 0, *bad its index and *state the state it was found in, in the
     * same transaction (-1: there is no such job); the layer above says
     * why. retry with n == 0: every dead job of queue (NULL: all queues).
     */
    int (*job_retry)(tq *db, const int64_t *ids, size_t n, const char *queue,
                     int64_t *count, size_t *bad, int *state);
    int (*job_cancel)(tq *db, const int64_t *ids, size_t n, int64_t *count, size_t *bad,
                      int *state);
    /* limit > 0: at most limit rows (of each state in the mask). */
    int (*prune)(tq *db, int64_t older_than_us, unsigned state_mask, int64_t limit,
                 int64_t *count);
    /*
     * Retention (worker/retain.c), in one transaction: for each finished
     * state st whose keep[st] > 0, deletes up to limit jobs of queue in
     * that state that finished at or after after[st] (the store's clock)
     * and longer than keep[st] ago, oldest first; count[st] how many.
     * On success after[st] becomes where the next call may start: the last
     * one deleted when it deleted limit, else the cutoff less
     * TQ__RETIRE_LAG_US (a job that finished before it may commit after).
     */
    int (*retire)(tq *db, const char *queue, const int64_t keep[TQ_STATE_COUNT],
                  int64_t after[TQ_STATE_COUNT], int64_t limit,
                  int64_t count[TQ_STATE_COUNT]);
    /* Deletes the registrations of workers stopped, or silent past their
     * lease, for longer than older_than_us. */
    int (*worker_prune)(tq *db, int64_t older_than_us, int64_t *count);

    /* Everything of tq_stats but the duration percentiles. */
    int (*stats)(tq *db, const char *queue, tq_stats *out);
    /* Every queue that has jobs ready or running, by name: how many of
     * each, for the worker's notes on what it waits for (not a hot path:
     * it counts every such row). *out is freed with free(). */
    int (*active)(tq *db, tq__active **out, size_t *out_n);
    int (*durations)(tq *db, const char *queue, size_t limit, int64_t **out,
                     size_t *out_n);
    /* tq_count_jobs (*out malloc'd), and one state's part of
     * tq_finished_since: up to limit jobs in state st that finished after
     * (at, after_id) and no later than upto, in (finished_at, id) order,
     * into out (room for limit). */
    int (*count_jobs)(tq *db, tq_state st, int by_worker, tq_count **out, size_t *out_n);
    int (*finished_since)(tq *db, tq_state st, int64_t at, int64_t after_id, int64_t upto,
                          size_t limit, tq_finished *out, size_t *out_n);

    /*
     * Register w->name. *holder gets the row the name had before (name ""
     * when it had none), alive or not. Without expect: EINUSE if that row's
     * heartbeat is fresher than its lease and it has not stopped. With
     * expect (a holder the caller found gone): take the name over only if
     * the row is still that holder (same pid, host_id and started_at),
     * else EINUSE, without a message: the caller words it from *holder.
     * On success w->started_at is the registration's, the store's clock,
     * and later than any the name had before (the holder's plus 1 at
     * least): (name, started_at) names one registration forever.
     */
    int (*worker_register)(tq *db, tq_worker_info *w, const tq_worker_info *expect,
                           tq_worker_info *holder);
    /* Refresh the registration's heartbeat and its lease (me->lease_us),
     * or mark it stopped: only while the name is still registered to me
     * (same pid, host, host_id and started_at); TQ_EINUSE (without a
     * message) when another process has registered it since. */
    int (*worker_beat)(tq *db, const tq_worker_info *me);
    int (*worker_stop)(tq *db, const tq_worker_info *me);
    /* 0 while the store the handle opened is still the one its address
     * names; else why not (a store file deleted or replaced under it). */
    int (*same_store)(tq *db);
    /* A passive checkpoint of the store's write-ahead log, and what it
     * found (tq_wal_check; all zero for an engine without a log of its
     * own). */
    int (*checkpoint)(tq *db, tq_wal_info *out);
    int (*worker_list)(tq *db, tq_worker_info **out, size_t *out_n);

    /* TQ__CAP_NOTIFY only: start listening for enqueues;
     * the descriptor that becomes readable when a notification may have
     * arrived; and take the arrived ones, *count of them that concern
     * queues[0..nqueues) (NULL: any queue). Notifications are
     * a hint to claim now: they are lost while disconnected, so workers
     * still poll. *changed: something else was written since the last
     * drain that may change what a worker does (queue settings or
     * schedules; on SQLite, any other connection's commit: a job put back
     * or retried, too). *again_us > 0: a sign of a change the engine could
     * not confirm yet; call notify_drain again after that long even if the
     * descriptor stays quiet. */
    int (*listen)(tq *db);
    /* TQ__CAP_NETWORK only: connect again after TQ_ECONN; prepared
     * statements and LISTENs are gone. */
    int (*reconnect)(tq *db);
    /* TQ__CAP_NETWORK only: from now on, a server silent for longer than us while an
     * answer is awaited means the connection is lost (TQ_ECONN; the connection is
     * dropped, reconnect makes a new one), and the server ends this session if it leaves
     * a transaction idle that long. 0: wait as long as it takes. */
    int (*set_wait_limit)(tq *db, int64_t us);
    int (*notify_fd)(tq *db);
    int (*notify_drain)(tq *db, const char *const *queues, size_t nqueues, int *count,
                        int *changed, int64_t *again_us);

    /* Periodic jobs (cron.c finds the slots). The store's clock, in
     * microseconds since the epoch (PostgreSQL's server clock). */
    int (*clock)(tq *db, int64_t *now_us);
    /* Creates or replaces a schedule, its next slot next_us. */
    int (*schedule_put)(tq *db, const char *name, const tq_schedule_opts *o,
                        int64_t next_us);
    int (*schedule_remove)(tq *db, const char *name); /* TQ_ENOTFOUND */
    int (*schedule_list)(tq *db, tq_schedule **out, size_t *out_n);
    /* In one transaction: moves schedule s (as listed) from its next slot
     * to next_us, recording slot_us as its last (nothing at all when it no
     * longer has that next slot, spec and zone: someone else took the slot,
     * or the schedule was set again since), and enqueues the
     * slot's job, from the schedule as it is now, unless it skips overlaps
     * and its last job is still ready or running; slot_us -1: moves it on
     * and enqueues nothing. *job: the job's id, 0 when none was enqueued. */
    int (*schedule_fire)(tq *db, const tq_schedule *s, int64_t slot_us, int64_t next_us,
                         int64_t *job);
};

/* An enqueue whose commit (of ids[0..n), or n 0: of a keyed job kept)
 * went unanswered and could not be settled: TQ_EUNKNOWN, its message
 * first, then what may or may not have been stored (common.c). */
int tq__enqueue_unknown(tq *db, const char *first, const int64_t *ids, size_t n);

/*
 * A management update of jobs (job_retry, job_cancel) by the rules both
 * engines keep (common.c): with ids, each of ids[0..n) in turn, children
 * before parents (a child's id is larger: a cancel or retry of both must
 * not find the child already moved by its parent's), all or none (engine
 * job_retry); with n 0, one update of a queue's jobs. The engine gives the
 * steps, ctx its state:
 */
typedef struct tq__manage_ops {
    /* Opens the transaction, and reads what the updates need; on failure
     * nothing is left open. */
    int (*begin)(tq *db, void *ctx);
    /* Updates ids[i] (n 0: the queue's jobs, i 0); *changed: rows changed. */
    int (*update)(tq *db, void *ctx, size_t i, int64_t *changed);
    /* With ids, after ids[i] changed: what that does to its children (or
     * NULL). */
    int (*after)(tq *db, void *ctx, size_t i);
    /* After all the updates, before the commit (or NULL). */
    int (*finish)(tq *db, void *ctx);
    /* Job id's state, -1 when there is none (one of ids did not change). */
    int (*state_of)(tq *db, int64_t id, int *state);
    int (*commit)(tq *db);
    void (*rollback)(tq *db);
} tq__manage_ops;

int tq__manage(tq *db, const tq__manage_ops *ops, void *ctx, const int64_t *ids, size_t n,
               int64_t *count, size_t *bad, int *state);
/* A prune (engine prune) by the same steps, in one transaction: update
 * deletes the old rows of each state st of mask (i = st), *count the rows
 * it deleted, then finish; state_of and after are not used. */
int tq__prune(tq *db, const tq__manage_ops *ops, void *ctx, unsigned mask,
              int64_t *count);

/* The text of statement id in the first of the n tables (each file's, by
 * statement id) that has it; NULL when none does (common.c). */
const char *tq__sql_find(const char *const *const *tables, size_t n, int id);

/* A queue's settings from its row (both engines' QUEUE_COLS): its name,
 * its order as text, then the numbers of the columns after them, in the
 * order QUEUE_COLS lists them (common.c). The rules that are not SQL are
 * kept here once: a queue without a rate limit reads as having no burst. */
/* How far behind its cutoff a retention's next start stays (engine
 * retire): a job may commit a little after the time it finished at. */
#define TQ__RETIRE_LAG_US 1000000LL

/* Where a retention's next start goes after a call that deleted n of at
 * most limit jobs, the last one finished at last, its cutoff cutoff: never
 * back. */
static inline int64_t tq__retire_next(int64_t after, int64_t n, int64_t limit,
                                      int64_t last, int64_t cutoff)
{
    const int64_t next = n >= limit ? last : cutoff - TQ__RETIRE_LAG_US;
    return next > after ? next : after;
}

enum { TQ__QUEUE_NUMBERS = 16 };
void tq__queue_from_row(tq_queue_info *q, const char *name, const char *order,
                        const int64_t v[TQ__QUEUE_NUMBERS]);

/* The token bucket a queue_set of a rate stores (S_QUEUE_UPDATE): the
 * limit's period and its burst; a limit of 0 (none), or no rate in o,
 * keeps no period and a burst of 1 (and divides by no period of 0). */
static inline void tq__queue_bucket(int64_t *period_us, int64_t *burst,
                                    const tq_queue_opts *o)
{
    const int on = (o->set & TQ_SET_RATE) && o->rate_limit > 0;
    *period_us = on ? o->rate_period_us : 0;
    *burst = on ? tq__rate_burst(o->rate_limit, o->rate_period_us) : 1;
}

/* For worker_register: whether the holder found is the one expected. */
static inline int tq__same_holder(const tq_worker_info *h, const tq_worker_info *expect)
{
    return h->pid == expect->pid && h->started_at == expect->started_at &&
           strcmp(h->host_id, expect->host_id) == 0;
}

extern const struct tq__engine tq__engine_sqlite;
/* For the plan tests: the SQLite claim statement of an order and a kind
 * (enum tq__claim_kind; TQ__CLAIM_RATE is PostgreSQL's). */
const char *tq__sqlite_claim_sql(tq_order order, int kind);
/* For the plan tests: the statement that claims the rows a claim picked. */
const char *tq__sqlite_claim_mark_sql(void);
/* For the plan tests: what a grouped claim runs first (the group index). */
const char *tq__sqlite_group_index_sql(void);
/* For the plan tests: the acknowledgement of one done job. */
const char *tq__sqlite_ack_sql(void);
/* For the upgrade test: the SQL that takes a store to version (1-based). */
const char *tq__sqlite_migration(int version);
#ifdef TQ_WITH_POSTGRES
extern const struct tq__engine tq__engine_postgres;
/* For the plan tests: the PostgreSQL claim statement of an order and a
 * kind (enum tq__claim_kind), with "TQ." standing for the schema. */
const char *tq__postgres_claim_sql(tq_order order, int kind);
/* For the plan tests: the planner settings each exchange starts with. */
const char *tq__postgres_plan_sql(void);
/* For the plan tests: the setting sent before grouped acknowledgements. */
const char *tq__postgres_group_plan_sql(void);
/* For the plan tests: the statement that puts back expired leases. */
const char *tq__postgres_rescue_sql(void);
/* For the plan tests: the drain check (is anything ready or running). */
const char *tq__postgres_pending_sql(void);
/* For the plan tests: the group acknowledgement of done jobs. */
const char *tq__postgres_ack_sql(void);
/* For the tests: one look of an enqueue's settling after a lost COMMIT, at
 * the transaction of server process pid that began at began (its now(), in
 * microseconds) with id xid, which inserted ids[0..n) into queue: 0 look
 * again, 1 stored, 2 not stored, 3 unknown. */
int tq__postgres_settle_look(tq *db, int pid, int64_t began, int64_t xid,
                             const char *queue, const int64_t *ids, size_t n);
#endif

#endif /* TQ_ENGINE_H */
