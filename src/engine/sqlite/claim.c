/*
 * sqlite/claim.c - the SQLite engine: claim statements and the exchange that runs
 * them with the acknowledgements.
 */
#include "sqlite_int.h"

/* clang-format off */

/* The queue orders (DESIGN.md, Orders), each written once, in its ready
 * index's order so that a claim is a seek: FIFO_BY(t) orders by the
 * columns of row t (t ending in its dot, or ""), FIFO by the row's own. */
#define FIFO_BY(t) " ORDER BY " t "priority DESC, " t "run_at, " t "id"
#define FIFO       FIFO_BY(UNORDERED)
#define LIFO       " ORDER BY priority DESC, id DESC"
#define UNORDERED  ""

/*
 * A claim: ?1 queue, ?2 now, ?3 how many, ?4 worker, ?5 lease end, ?6 the
 * queue's max attempts as the claimer knows it, ?7 1 to start the jobs or
 * 0 to hold them (and CLAIM_CHAIN's ?8, tq__claim.chain), ?9 the worker's
 * registration (tq__claim.worker_since) or NULL. A start
 * charges the attempt unless the job is out of them (the worker then ends
 * it unrun); so does a hold of a job whose claims ended twice in a rescue
 * with no start recorded (engine.h). A paused queue yields nothing, and so
 * does a queue with concurrency or rate limits (CLAIM_ROOM,
 * CLAIM_GROUPS, CLAIM_CHAIN and CLAIM_LIMITED claim there).
 *
 * Each kind is two statements in the claim's transaction: the pick, a
 * SELECT of the rows it takes as they will be once claimed (CLAIMED: only
 * what the claimer does not know, tq__claimed_cols), then S_CLAIM_MARK,
 * which claims exactly those rows (?10: their ids, a JSON array). Not one
 * UPDATE ... RETURNING: SQLite reads every column of each old row for a
 * RETURNING clause and keeps the rows in a temporary table until the end,
 * which cost a plain queue's claim a sixth of its instructions.
 */
#define CHARGE                                                                           \
    "((?7 OR unknown_starts >= 2) AND attempts < COALESCE(max_attempts, ?6))"

#define CLAIM_SET                                                                        \
    "UPDATE tq_jobs SET"                                                                 \
    "  state = 'running',"                                                               \
    "  claims = claims + 1,"                                                             \
    "  attempts = attempts + " CHARGE ","                                                \
    "  started_at = CASE WHEN " CHARGE " THEN ?2 END,"                                   \
    "  unknown_starts = CASE WHEN " CHARGE " THEN 0 ELSE unknown_starts END,"            \
    "  worker = ?4,"                                                                     \
    "  worker_since = ?9,"                                                               \
    "  lease_until = ?5,"                                                                \
    "  finished_at = NULL"

/* The picked rows as CLAIM_SET leaves them. */
#define CLAIMED                                                                          \
    "SELECT id, payload, priority, attempts + " CHARGE ", COALESCE(max_attempts, ?6),"   \
    "  coalesce(dedup_key, unique_key), last_error, created_at, run_at,"                 \
    "  CASE WHEN " CHARGE " THEN ?2 END, ?5, claims + 1, traceparent, job_group,"        \
    "  snoozes, nparents, timeout_us FROM tq_jobs"

/* The picks of the limited kinds: the rows of their CTE picked. */
#define CLAIMED_PICKED " " CLAIMED " WHERE id IN (SELECT id FROM picked)"

#define CLAIM(order_by)                                                                  \
    CLAIMED                                                                              \
    " WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2"                             \
    "   AND NOT EXISTS (SELECT 1 FROM tq_queues WHERE name = ?1"                         \
    "       AND (paused OR max_running > 0 OR max_running_per_group > 0"                 \
    "            OR rate_limit > 0))"                                                    \
    " " order_by                                                                         \
    " LIMIT ?3"

#define RATE_TOKENS RATE_TOKENS_AT("?2")

/* A limited claim's lim and busy (CLAIM_LIMITED says what they hold). */
#define LIMITS                                                                           \
    "(SELECT max_running_per_group AS per_group,"                                        \
    "    min(CASE WHEN paused THEN 0"                                                    \
    "         WHEN max_running > 0 THEN max(0, min(?3, max_running - (SELECT count(*)"   \
    "              FROM tq_jobs WHERE state = 'running' AND queue = ?1)))"               \
    "         ELSE ?3 END,"                                                              \
    "        CASE WHEN rate_limit > 0 THEN CAST(" RATE_TOKENS " AS INTEGER)"             \
    "             ELSE ?3 END) AS room"                                                  \
    "    FROM tq_queues WHERE name = ?1),"                                               \
    " busy AS MATERIALIZED (SELECT job_group, count(*) AS n FROM tq_jobs"                \
    "    WHERE state = 'running' AND queue = ?1 AND job_group IS NOT NULL"               \
    "      AND (SELECT per_group FROM lim) > 0"                                          \
    "    GROUP BY job_group),"

/*
 * The claim of a LIFO queue with a group limit (the other orders' is
 * CLAIM_GROUPS or CLAIM_CHAIN; without a group limit, CLAIM_ROOM), with
 * CLAIM's parameters. lim: how many may start (room: ?3, or what
 * max_running leaves, 0 when paused; no more than the rate's whole
 * tokens) and the group limit. busy: the running jobs of each group, with
 * a group limit (the queue's running rows, through tq_jobs_running: no
 * index of their own, which every update of every job would pay for).
 * cand: the first ready rows in the queue's order whose group has room;
 * with a group limit 4 x room + 32 of them, so that a batch can still fill
 * when several share a group. picked: of those, in order, the ones that fit
 * their group counting the batch's own earlier picks (rn), at most room.
 * One transaction: nothing runs between the counts and the update (SQLite
 * has one writer; PostgreSQL's form locks the queue first).
 */
#define CLAIM_LIMITED(order_by)                                                          \
    "WITH lim AS MATERIALIZED " LIMITS                                                   \
    " cand AS (SELECT j.id, j.job_group, j.priority, j.run_at, coalesce(b.n, 0) AS busy" \
    "    FROM tq_jobs j LEFT JOIN busy b ON b.job_group = j.job_group"                   \
    "    WHERE j.queue = ?1 AND j.state = 'ready' AND j.run_at <= ?2"                    \
    "      AND coalesce(b.n, 0) < (SELECT max(per_group, 1) FROM lim)"                   \
    "    " order_by                                                                      \
    "    LIMIT coalesce((SELECT CASE WHEN per_group > 0 THEN 4 * room + 32 ELSE room END" \
    "                    FROM lim), 0)),"                                                \
    " picked AS (SELECT id FROM (SELECT id, job_group, priority, run_at, busy,"          \
    "    row_number() OVER (PARTITION BY job_group " order_by ") AS rn FROM cand)"       \
    "    WHERE job_group IS NULL OR busy + rn <= (SELECT per_group FROM lim)"            \
    "       OR (SELECT per_group FROM lim) = 0"                                          \
    "    " order_by                                                                      \
    "    LIMIT coalesce((SELECT room FROM lim), 0))"                                     \
    CLAIMED_PICKED

/*
 * The limited claim of a FIFO or unordered queue, with CLAIM_LIMITED's
 * parameters, lim and busy. Without a group limit: the first room ready
 * rows. With one, first the head of the queue: of its first room + 64
 * ready rows (head), those that fit their group (fit: counting the group's
 * running jobs and its earlier rows here). When that is not room jobs and
 * the head was full (walk), full groups' jobs fill the head of the queue
 * (a customer's thousand jobs): then, rather than step over them, the
 * claim finds the groups with room wherever their jobs are. grp walks the
 * distinct groups with ready jobs in tq_jobs_ready_group (one seek each),
 * roomy keeps those with room (k: how many more of it may run), heads
 * takes each one's first k jobs; the jobs without a group come from the
 * head (they have no index of their own, which would cost every job of
 * every queue). picked: the first room of these in the queue's order.
 * The cost is the head's rows, and, only when full groups fill the head,
 * a seek per group with ready jobs.
 */
#define CLAIM_GROUPS(order_by)                                                           \
    "WITH RECURSIVE lim AS MATERIALIZED " LIMITS                                         \
    " head AS MATERIALIZED (SELECT id, job_group, priority, run_at FROM tq_jobs"         \
    "    WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2 " order_by                \
    "    LIMIT coalesce((SELECT CASE WHEN per_group > 0 THEN room + 64"              \
    "                    ELSE room END FROM lim), 0)),"                                  \
    " fit AS MATERIALIZED (SELECT id, priority, run_at FROM (SELECT h.id, h.job_group,"  \
    "      h.priority, h.run_at, coalesce(b.n, 0) AS busy, row_number() OVER"           \
    "      (PARTITION BY h.job_group" FIFO_BY("h.") ") AS rn"                             \
    "      FROM head h LEFT JOIN busy b ON b.job_group = h.job_group)"                   \
    "    WHERE job_group IS NULL OR (SELECT per_group FROM lim) = 0"                     \
    "       OR busy + rn <= (SELECT per_group FROM lim)),"                               \
    " walk AS MATERIALIZED (SELECT per_group > 0 AND (SELECT count(*) FROM fit) < room"  \
    "      AND (SELECT count(*) FROM head) = room + 64 AS w FROM lim),"              \
    GROUP_WALK("(SELECT w FROM walk)")                                                   \
    " roomy AS (SELECT g, (SELECT per_group FROM lim)"                                   \
    "      - coalesce((SELECT n FROM busy WHERE job_group = g), 0) AS k"                 \
    "    FROM grp WHERE g IS NOT NULL),"                                                 \
    " heads AS (SELECT j.id, j.job_group, j.priority, j.run_at, r.k"                     \
    "    FROM roomy r, tq_jobs j WHERE r.k > 0"                                          \
    "      AND j.id IN " FIRST_DUE("r.g", "(SELECT per_group FROM lim)") "),"            \
    " cand AS (SELECT id, priority, run_at FROM fit WHERE NOT (SELECT w FROM walk)"      \
    "    UNION ALL SELECT id, priority, run_at FROM (SELECT id, priority, run_at, k,"    \
    "      row_number() OVER (PARTITION BY job_group" FIFO ")"                           \
    "      AS rn FROM heads) WHERE rn <= k"                                              \
    "    UNION ALL SELECT id, priority, run_at FROM head"                                \
    "      WHERE job_group IS NULL AND (SELECT w FROM walk)),"                           \
    " picked AS (SELECT id FROM cand " order_by                                          \
    "    LIMIT coalesce((SELECT room FROM lim), 0))"                                     \
    CLAIMED_PICKED

/* The limited claim of a queue without a group limit (as the claimer knows
 * it; one that has one gets nothing), with CLAIM_LIMITED's parameters and
 * lim: the first room ready rows, as CLAIM takes them. */
#define CLAIM_ROOM(order_by)                                                             \
    "WITH lim AS MATERIALIZED " LIMITS                                                   \
    " picked AS (SELECT id FROM tq_jobs"                                                 \
    "    WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2 " order_by                \
    "    LIMIT coalesce((SELECT CASE WHEN per_group = 0 THEN room ELSE 0 END"            \
    "                    FROM lim), 0))"                                                 \
    CLAIMED_PICKED

/*
 * The claim of a FIFO or unordered queue for a claimer that runs a group's
 * jobs one at a time, ?8 > 1 of them in a row (tq__claim.chain), with
 * CLAIM_LIMITED's parameters, lim and busy: whole chains of few groups
 * rather than a few jobs of every group, so that the other claimers find
 * groups of their own. slots: the head of the queue (its first room + 64
 * ready rows) in its order, each job without a group, and each group with
 * room where its first job stands; for a group, its first ?8 ready jobs
 * (FIRST_DUE). Only when those do not fill room and the head is full (a
 * group's backlog fills it) come the groups with room found elsewhere
 * (grp, as CLAIM_GROUPS walks them; walked: each one's first job), oldest
 * first. The slots are read in order until room + ?8 jobs are (the
 * nested loops keep their outer order, and a chain has at most ?8: every
 * one that starts within the first room is whole), and of those the
 * first room in slot and queue order are taken (a chain comes in id
 * order: a claim that ends within one takes its first jobs, not its
 * oldest ids). The LIMITs keep the ORDER BYs, which SQLite drops from a
 * subquery without one.
 */
#define CLAIM_CHAIN(order_by)                                                            \
    "WITH RECURSIVE lim AS MATERIALIZED " LIMITS                                         \
    " head AS MATERIALIZED (SELECT id, job_group, priority, run_at FROM tq_jobs"         \
    "    WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2 " order_by                \
    "    LIMIT coalesce((SELECT room + 64 FROM lim), 0)),"                               \
    " slots AS MATERIALIZED (SELECT g, id, pos FROM (SELECT job_group AS g,"             \
    "      CASE WHEN job_group IS NULL THEN id END AS id, min(pos) AS pos FROM"          \
    "      (SELECT id, job_group, row_number() OVER"                                     \
    "        (" FIFO ") AS pos FROM head) h"                                             \
    "      WHERE job_group IS NULL OR " ROOMY("h.job_group")                             \
    "      GROUP BY coalesce(job_group, id))"                                            \
    "    ORDER BY pos LIMIT (SELECT room + 64 FROM lim)),"                             \
    GROUP_WALK("(SELECT count(*) FROM head) = (SELECT room + 64 FROM lim)")              \
    " walked AS (SELECT grp.g AS g, f.priority, f.run_at, f.id FROM grp, tq_jobs f"      \
    "    WHERE grp.g IS NOT NULL AND " ROOMY("grp.g")                                    \
    "      AND NOT EXISTS (SELECT 1 FROM slots WHERE slots.g = grp.g)"                   \
    "      AND f.id = " FIRST_DUE("grp.g", "1") "),"                                     \
    " cand AS (SELECT s.pos, j.id, j.priority, j.run_at FROM slots s, tq_jobs j"         \
    "    WHERE j.id IN (SELECT s.id WHERE s.g IS NULL"                                   \
    "      UNION ALL SELECT * FROM " FIRST_DUE("s.g", "?8") ")"                                    \
    "    UNION ALL SELECT (SELECT room + 64 FROM lim) + w.r, j.id, j.priority, j.run_at" \
    "    FROM (SELECT g, row_number() OVER (" FIFO ") AS r"                              \
    "      FROM walked ORDER BY r LIMIT (SELECT room FROM lim)) w, tq_jobs j"            \
    "    WHERE j.id IN " FIRST_DUE("w.g", "?8") "),"                                               \
    " picked AS (SELECT id FROM (SELECT * FROM cand"                                     \
    "      LIMIT coalesce((SELECT room FROM lim), 0) + ?8)"                              \
    "    ORDER BY pos, priority DESC, run_at, id"                                        \
    "    LIMIT coalesce((SELECT room FROM lim), 0))"                                     \
    CLAIMED_PICKED

/* The ids of the first n ready jobs of group g due now (?2), in the
 * queue's order: a seek in tq_jobs_ready_group. */
#define FIRST_DUE(g, n)                                                                  \
    "(SELECT id FROM tq_jobs WHERE queue = ?1 AND state = 'ready' AND job_group = " g    \
    "  AND run_at <= ?2" FIFO " LIMIT " n ")"

/* grp: the distinct groups with ready jobs in name order, a seek each in
 * tq_jobs_ready_group, when the condition holds. */
#define GROUP_WALK(when)                                                                 \
    " grp(g) AS (SELECT (SELECT job_group FROM tq_jobs WHERE queue = ?1"                 \
    "      AND state = 'ready' AND job_group IS NOT NULL ORDER BY job_group LIMIT 1)"    \
    "    WHERE " when                                                                    \
    "    UNION ALL SELECT (SELECT job_group FROM tq_jobs WHERE queue = ?1"               \
    "      AND state = 'ready' AND job_group > grp.g ORDER BY job_group LIMIT 1)"        \
    "    FROM grp WHERE g IS NOT NULL),"

/* Whether group g has room (its running jobs, busy, are fewer than the
 * limit). */
#define ROOMY(g)                                                                         \
    "NOT EXISTS (SELECT 1 FROM busy b WHERE b.job_group = " g                            \
    "  AND b.n >= (SELECT per_group FROM lim))"

/* What a rescue does to a running row: back to ready, or dead when its
 * started run used the last attempt; a claim that never started is put
 * back as it was (no attempt was charged, last_error kept). ?1 is now. */
#define RESCUE(why)                                                                      \
    "UPDATE tq_jobs SET"                                                                 \
    "  state = CASE WHEN started_at IS NOT NULL AND " OUT_OF_ATTEMPTS("0")               \
    "          THEN 'dead' ELSE 'ready' END,"                                            \
    "  finished_at = CASE WHEN started_at IS NOT NULL AND " OUT_OF_ATTEMPTS("0")         \
    "                THEN ?1 END,"                                                       \
    "  last_error = CASE WHEN started_at IS NULL THEN last_error ELSE " why " END,"      \
    "  unknown_starts = unknown_starts + (started_at IS NULL),"                          \
    "  lease_until = NULL, progress = NULL, progress_text = NULL"


/* The claim statements, one per kind and queue order (engine.h). */
#define CLAIM_SQL(id, text, order) [id] = text(order),
const char *const tq__sqlite_sql_claim[S_COUNT] = {
    TQ__CLAIM_STMTS(CLAIM_SQL)
    /* The rows a pick took, by id (?10, a JSON array), claimed; still
     * ready, or the count tells (mark_claimed). +state: a test of each row
     * found by id, never a reason to walk a ready index instead. */
    [S_CLAIM_MARK] = CLAIM_SET " WHERE id IN (SELECT value FROM json_each(?10))"
                     " AND +state = 'ready'",
    /* After a limited claim took ?3 jobs (> 0), in its transaction: the
     * rate's tokens less those, as of ?2 now. Not after a claim that took
     * none: a write would wake every idle worker (they watch the store's
     * changes), whose claims would wake it again. */
    [S_RATE_TAKE] = "UPDATE tq_queues SET rate_tokens = max(0.0, " RATE_TOKENS " - ?3),"
                    " rate_at = max(rate_at, ?2) WHERE name = ?1 AND rate_limit > 0",
    /* Then how long, from ?2, until the rate has a whole token (0: it has
     * one, or the queue has no rate limit). */
    [S_RATE_WAIT] = "SELECT CASE WHEN t >= 1 THEN 0"
                    " ELSE CAST((1 - t) / " RATE_REFILL " AS INTEGER) + 1 END"
                    " FROM (SELECT " RATE_TOKENS " AS t, rate_limit, rate_burst,"
                    " rate_period_us FROM tq_queues WHERE name = ?1 AND rate_limit > 0)",
    [S_RESCUE_EXPIRED] =
        RESCUE("'lease expired under worker ' || coalesce(worker, '?')")
        " WHERE state = 'running' AND lease_until < ?1",
    [S_RESCUE_WORKER] =
        RESCUE("'worker ' || worker || ' restarted while running it'")
        " WHERE state = 'running' AND worker = ?2 AND worker_since = ?3",
    /* Waiting jobs through their dependencies, newest first (where waiting
     * ones are): an index of waiting rows cost every job's enqueue 1.2 %
     * more instructions and its worker 1.7 %, for draining workers alone.
     * CROSS JOIN keeps the dependencies outside: the planner read every
     * job. */
    [S_PENDING] =
        "SELECT EXISTS (SELECT 1 FROM tq_jobs WHERE queue = ?1 AND"
        " state = 'ready') OR EXISTS (SELECT 1 FROM tq_jobs WHERE"
        " queue = ?1 AND state = 'running') OR EXISTS (SELECT 1 FROM tq_deps d CROSS"
        " JOIN tq_jobs c ON c.id = d.child WHERE c.state = 'waiting'"
        " AND c.queue = ?1 ORDER BY d.child DESC)",
    /* A ready job due now (?2), along the ready index's queue. */
    [S_PENDING_DUE] = "SELECT EXISTS (SELECT 1 FROM tq_jobs WHERE queue = ?1 AND"
                      " state = 'ready' AND run_at <= ?2)",
    /* What an idle worker waits for, from ?2 now (tq__claim.look): 0 when a
     * ready job of queue ?1 is due (found at the first such entry of its
     * ready index: a backlog held back by a limit costs one), else when the
     * first is due; the first lease to end, the first entry of
     * tq_jobs_running. NULL: none. */
    [S_SOONEST] = "SELECT CASE WHEN EXISTS (SELECT 1 FROM tq_jobs WHERE queue = ?1"
                  " AND state = 'ready' AND run_at <= ?2) THEN 0"
                  " ELSE (SELECT min(run_at) FROM tq_jobs WHERE queue = ?1"
                  " AND state = 'ready') - ?2 END, (SELECT min(lease_until)"
                  " FROM tq_jobs WHERE state = 'running') - ?2",
};
/* clang-format on */

/* The claim statement of a queue order and a kind (not TQ__CLAIM_RATE: the
 * ids begin with engine.h's list, without PostgreSQL's). */
enum stmt_id tq__sqlite_claim_id(tq_order order, enum tq__claim_kind kind)
{
    return (enum stmt_id)tq__claim_stmt(order, kind);
}

/* A limited claim's rate: the n jobs it took from the bucket (if the
 * queue has a rate), and, when the claimer knows of a rate, how long until
 * the next token (c->rate_wait_us). */
static int take_tokens(tq *db, tq__claim *c, int64_t now, size_t n)
{
    int rc;
    sqlite3_stmt *s;
    if (n) {
        if (!(s = stmt(db, S_RATE_TAKE, &rc)))
            return rc;
        sqlite3_bind_text(s, 1, c->queue, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, now);
        sqlite3_bind_int64(s, 3, (sqlite3_int64)n);
        if ((rc = run(db, s, "claiming jobs")))
            return rc;
        c->rate_found = sqlite3_changes(C(db)->h) > 0;
    }
    return c->rate ? tq__sqlite_query_int(db, S_RATE_WAIT, c->queue, now,
                                          &c->rate_wait_us, "claiming jobs")
                   : 0;
}

/* The parameters a pick and its mark share (CLAIM_SET's): ?2 now, ?4
 * worker, ?5 lease end, ?6 max attempts, ?7 start, ?9 registration. */
static void bind_claim(sqlite3_stmt *s, const char *worker, const tq__claim *c,
                       int64_t now)
{
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_text(s, 4, worker, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, now + c->lease_us);
    sqlite3_bind_int(s, 6, c->max_attempts);
    sqlite3_bind_int(s, 7, !!c->start);
    if (c->worker_since)
        sqlite3_bind_int64(s, 9, c->worker_since);
    else
        sqlite3_bind_null(s, 9);
}

/* Claims the n jobs a pick took (S_CLAIM_MARK, with the pick's
 * parameters): every one of them, or the transaction fails. */
static int mark_claimed(tq *db, const char *worker, const tq__claim *c, int64_t now,
                        const tq_job *jobs, size_t n)
{
    if (!n)
        return 0;
    char *ids = malloc(n * 22 + 2), *p = ids;
    if (!ids)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        *p++ = i ? ',' : '[';
        p = tq__put_i64(p, jobs[i].id);
    }
    strcpy(p, "]");
    int rc;
    sqlite3_stmt *s = stmt(db, S_CLAIM_MARK, &rc);
    if (s) {
        bind_claim(s, worker, c, now);
        sqlite3_bind_text(s, 10, ids, -1, SQLITE_STATIC);
        rc = run(db, s, "claiming jobs");
    }
    free(ids);
    /* Nothing of tq's runs between the pick and the mark; a trigger of
     * someone else's on tq_jobs could. */
    if (!rc && (size_t)sqlite3_changes(C(db)->h) != n)
        rc = tq__seterr(db, TQ_EDB,
                        "claiming jobs: %d of the %zu ready jobs picked were claimed "
                        "(a trigger on tq_jobs?)",
                        sqlite3_changes(C(db)->h), n);
    return rc;
}

/* One claim of an exchange: appends the claimed jobs to *jobs. entered:
 * when the exchange began (monotonic). */
static int claim_jobs(tq *db, const char *worker, tq__claim *c, int64_t now,
                      int64_t entered, tq_job **jobs, size_t *njobs)
{
    int rc;
    if (c->order == TQ_LIFO &&
        (rc = exec_id(db, S_LIFO_INDEX, "creating the LIFO index")))
        return rc;
    if (c->grouped && (rc = exec_id(db, S_GROUP_INDEX, "creating the group index")))
        return rc;
    sqlite3_stmt *s = stmt(db, tq__sqlite_claim_id(c->order, tq__claim_kind(c)), &rc);
    if (!s)
        return rc;
    bind_claim(s, worker, c, now);
    sqlite3_bind_text(s, 1, c->queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)c->max);
    if (tq__claim_kind(c) == TQ__CLAIM_CHAIN)
        sqlite3_bind_int64(s, 8, (sqlite3_int64)c->chain);
    const size_t before = *njobs;
    if ((rc = tq__sqlite_collect_jobs(db, s, &tq__claimed_cols, c->queue, worker,
                                      "claiming jobs", jobs, njobs)) ||
        (rc = mark_claimed(db, worker, c, now, *jobs + before, *njobs - before)))
        return rc;
    if (!c->limited)
        return 0;
    /* The tokens are taken as of now, after the claim's own work (the
     * bucket had them sooner, and only gained since): the moment the
     * jobs' starts trail, no sooner than taken_after_us into the call. */
    c->taken_after_us = tq__mono_us() - entered;
    const int64_t at = tq__now_us();
    return take_tokens(db, c, at > now ? at : now, *njobs - before); /* a clock step */
}

/* Column col of S_SOONEST's row: TQ__NEVER when NULL. */
static int64_t in_or_never(sqlite3_stmt *s, int col)
{
    return sqlite3_column_type(s, col) == SQLITE_NULL ? TQ__NEVER
                                                      : sqlite3_column_int64(s, col);
}

/* What an idle claimer of queue waits for, as of now (S_SOONEST). */
static int soonest(tq *db, const char *queue, int64_t now, int64_t *due_in,
                   int64_t *lease_in)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_SOONEST, &rc);
    if (!s)
        return rc;
    bind_text(s, 1, queue);
    sqlite3_bind_int64(s, 2, now);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        *due_in = in_or_never(s, 0);
        *lease_in = in_or_never(s, 1);
    } else {
        rc = tq__sqlite_fail_rc(db, src, "looking for the next job");
    }
    done_with(s);
    return rc;
}

/* engine.h: peek. One statement, a read: no write lock. */
int tq__sqlite_peek(tq *db, const char *queue, int64_t *due_in, int64_t *lease_in)
{
    return soonest(db, queue, tq__now_us(), due_in, lease_in);
}

int tq__sqlite_exchange(tq *db, const char *worker, tq__ack *acks, size_t nacks,
                        tq__claim *claim, tq_job **out, size_t *out_n)
{
    int rc;
    tq_job *jobs = NULL;
    size_t njobs = 0;

    if (out) {
        *out = NULL;
        *out_n = 0;
    }
    const int64_t entered = tq__mono_us(), asked = tq__now_us();
    if (claim)
        claim->due_in = claim->lease_in = TQ__NEVER;
    if ((rc = begin(db)))
        return rc;
    const int64_t now = tq__now_us();
    for (size_t i = 0; i < nacks; i++)
        if ((rc = tq__sqlite_apply_ack(db, worker, &acks[i], now,
                                       now > asked ? now - asked : 0)))
            goto fail;
    if ((rc = tq__sqlite_deps_settle(db, acks, nacks, now)))
        goto fail;
    if (claim && claim->max > 0 &&
        (rc = claim_jobs(db, worker, claim, now, entered, &jobs, &njobs)))
        goto fail;
    if (claim && claim->max > 0 && claim->look &&
        (rc = soonest(db, claim->queue, now, &claim->due_in, &claim->lease_in)))
        goto fail;
    if ((rc = commit(db)))
        goto fail;
    if (out) {
        *out = jobs;
        *out_n = njobs;
    } else {
        tq_job_array_free(jobs, njobs);
    }
    return 0;
fail:
    tq__sqlite_rollback(db);
    tq_job_array_free(jobs, njobs);
    for (size_t i = 0; i < nacks; i++)
        acks[i].result = 0;
    return rc;
}

int tq__sqlite_rescue(tq *db, const char *worker, int64_t since, int64_t *count)
{
    /* The time is taken before the wait for the lock: a rescue decided
     * while the leases still held must not take them once the lock came,
     * perhaps seconds later (the caller may hold those very jobs, their
     * results waiting behind this statement). PostgreSQL's now() is the
     * transaction's start, the same. */
    const int64_t now = tq__now_us();
    int rc;
    sqlite3_stmt *s;
    if ((rc = begin(db)))
        return rc;
    if (!(s = stmt(db, worker ? S_RESCUE_WORKER : S_RESCUE_EXPIRED, &rc)))
        goto fail;
    sqlite3_bind_int64(s, 1, now);
    if (worker) {
        sqlite3_bind_text(s, 2, worker, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, since);
    }
    if ((rc = run(db, s, "rescuing jobs")))
        goto fail;
    *count = sqlite3_changes(C(db)->h);
    int any = 0;
    if (*count && (rc = tq__sqlite_deps_any(db, &any)))
        goto fail;
    if (any) {
        if (!(s = stmt(db, S_DEPS_DEAD_SINCE, &rc)))
            goto fail;
        sqlite3_bind_int64(s, 1, now);
        if ((rc = tq__sqlite_deps_cancel_each(db, s, now)))
            goto fail;
    }
    return commit(db);
fail:
    tq__sqlite_rollback(db);
    return rc;
}

/* Whether statement id (an EXISTS over queue's jobs, ?2 now) finds one. */
static int queue_has(tq *db, enum stmt_id id, const char *queue, int *out,
                     const char *what)
{
    int64_t v = 0;
    int rc = tq__sqlite_query_int(db, id, queue, tq__now_us(), &v, what);
    *out = v != 0;
    return rc;
}

int tq__sqlite_pending_due(tq *db, const char *queue, int *out)
{
    return queue_has(db, S_PENDING_DUE, queue, out, "checking for due jobs");
}

int tq__sqlite_pending(tq *db, const char *queue, int *out)
{
    return queue_has(db, S_PENDING, queue, out, "checking for pending jobs");
}
