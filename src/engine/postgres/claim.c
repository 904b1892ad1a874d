/*
 * postgres/claim.c - the PostgreSQL engine: claim statements and the exchange that
 * runs them with the acknowledgements.
 */
#include "pg_int.h"

/* clang-format off */

/* The queue orders (DESIGN.md, Orders), each written once, in its ready
 * index's order so that a claim is a seek: FIFO_BY(t) orders by the
 * columns of row t (t ending in its dot, or ""), FIFO by the row's own. */
#define FIFO_BY(t) " ORDER BY " t "priority DESC, " t "run_at, " t "id"
#define FIFO       FIFO_BY(UNORDERED)
#define LIFO       " ORDER BY priority DESC, id DESC"
#define UNORDERED  ""

#define STR_(x)      #x

#define STR(x)       STR_(x)

#define RESCUE_LIMIT 1000 /* expired leases put back per statement */

/* A claim returns only what the claimer does not know (tq__claimed_cols):
 * each column left out is one less to form, send and read per claimed row
 * (RETURNING all of them cost ~10 % at 16 workers). */
#define CLAIMED_COLS                                                                     \
    "j.id, j.payload, j.priority, j.attempts, COALESCE(j.max_attempts, $5::int4),"       \
    " coalesce(j.dedup_key, j.unique_key), j.last_error, j.created_at, j.run_at,"        \
    " j.started_at, j.lease_until, j.claims, j.traceparent, j.job_group, j.snoozes,"     \
    " j.nparents, j.timeout_us"

/*
 * A claim: $1 queue, $2 how many, $3 worker, $4 lease, $5 the queue's max
 * attempts as the claimer knows it, $6 true to start the jobs or false to
 * hold them, $7 the worker's registration (tq__claim.worker_since) or 0.
 * A start charges the attempt unless the job is out of them (the worker
 * then ends it unrun); so does a hold of a job whose claims ended twice in
 * a rescue with no start recorded (engine.h). A paused queue
 * yields nothing, and so does one with concurrency limits (CLAIM_LIMITED
 * claims there): the NOT EXISTS is uncorrelated, run once per claim.
 */
#define CHARGE                                                                           \
    "(($6::bool OR j.unknown_starts >= 2)"                                               \
    " AND j.attempts < COALESCE(j.max_attempts, $5::int4))"

#define CLAIM(order_by)                                                                  \
    "WITH picked AS MATERIALIZED ("                                                      \
    "  SELECT id FROM TQ.jobs"                                                           \
    "  WHERE queue = $1 AND state = 'ready' AND run_at <= now()"                         \
    "    AND NOT EXISTS (SELECT 1 FROM TQ.queues WHERE name = $1"                        \
    "        AND (paused OR max_running > 0 OR max_running_per_group > 0"                \
    "             OR rate_limit > 0))"                                                   \
    "  " order_by                                                                        \
    "  LIMIT $2"                                                                         \
    "  FOR UPDATE SKIP LOCKED)"                                                          \
    CLAIM_UPDATE("now()")

/* A limited claim's lim and busy (CLAIM_LIMITED says what they hold). */
#define LIMITS                                                                           \
    "(SELECT max_running_per_group AS per_group,"                                        \
    "    least(CASE WHEN paused THEN 0"                                                  \
    "         WHEN max_running > 0 THEN greatest(0, least($2::int8,"                     \
    "              max_running - (SELECT count(*) FROM TQ.jobs WHERE state = 'running'"  \
    "                             AND queue = $1 AND lease_until IS NOT NULL)))"         \
    "         ELSE $2::int8 END,"                                                        \
    "      CASE WHEN rate_limit > 0 THEN floor(" RATE_TOKENS("clock_timestamp()") ")::int8" \
    "           ELSE $2::int8 END) AS room,"                                             \
    "    clock_timestamp() AS at"                                                        \
    "    FROM TQ.queues WHERE name = $1),"                                               \
    " busy AS MATERIALIZED (SELECT job_group, count(*) AS n FROM TQ.jobs"               \
    "    WHERE state = 'running' AND queue = $1 AND lease_until IS NOT NULL"             \
    "      AND job_group IS NOT NULL AND (SELECT per_group FROM lim) > 0"                \
    "    GROUP BY job_group),"

/*
 * The claim of a LIFO queue with a group limit (the other orders' is
 * CLAIM_GROUPS or CLAIM_CHAIN; without a group limit, CLAIM_ROOM), with
 * CLAIM's parameters, as SQLite's CLAIM_LIMITED says (lim, busy, cand,
 * picked), then its rate's tokens taken (taken; only when it claimed any,
 * as SQLite's S_RATE_TAKE says). The room is counted by the clock once the
 * lock is held, not at the transaction's start; the tokens are taken by
 * the clock once the claimed rows are (the bucket only gained since), the
 * moment the jobs' starts trail (S_RATE_WAIT says it). The counts are
 * only right if no other claim of the queue commits between this
 * statement's snapshot and its own commit: S_LIMIT_LOCK, sent just before
 * it in the same transaction, serialises the limited claims of a queue,
 * and this statement's snapshot is taken after the lock was granted.
 */
#define CLAIM_LIMITED(order_by)                                                          \
    "WITH lim AS MATERIALIZED " LIMITS                                                   \
    " cand AS MATERIALIZED (SELECT id, job_group, priority, run_at,"                     \
    "    " GROUP_BUSY " AS busy FROM TQ.jobs j"                                          \
    "    WHERE queue = $1 AND state = 'ready' AND run_at <= now()"                       \
    "      AND " GROUP_BUSY " < (SELECT greatest(per_group, 1) FROM lim)"                \
    "    " order_by                                                                      \
    "    LIMIT coalesce((SELECT CASE WHEN per_group > 0 THEN 4 * room + 32 ELSE room END" \
    "                    FROM lim), 0)"                                                  \
    "    FOR UPDATE OF j SKIP LOCKED),"                                                  \
    " picked AS MATERIALIZED (SELECT id FROM (SELECT id, job_group, priority, run_at,"   \
    "    busy, row_number() OVER (PARTITION BY job_group " order_by ") AS rn FROM cand)" \
    "    c WHERE job_group IS NULL OR busy + rn <= (SELECT per_group FROM lim)"          \
    "       OR (SELECT per_group FROM lim) = 0"                                          \
    "    " order_by                                                                      \
    "    LIMIT coalesce((SELECT room FROM lim), 0)),"                                    \
    " claimed AS (" CLAIM_UPDATE("(SELECT at FROM lim)") "),"                            \
    " taken AS " TAKEN                                                                   \
    " SELECT * FROM claimed"

/* A limited claim's last steps: the jobs picked are claimed, and the
 * rate's tokens taken (CLAIM_LIMITED says when). */
#define TAKEN                                                                            \
    "(UPDATE TQ.queues SET rate_at = greatest(rate_at, c.t),"                            \
    "    rate_tokens = greatest(0, " RATE_TOKENS("c.t") " - c.n)"                        \
    "    FROM (SELECT greatest(clock_timestamp(), (SELECT at FROM lim)) AS t,"           \
    "                 count(*) AS n FROM claimed) c"                                     \
    "    WHERE name = $1 AND rate_limit > 0 AND c.n > 0)"

/* The limited claim of a FIFO or unordered queue, as SQLite's CLAIM_GROUPS
 * says, its rows locked once picked (PICK). */
#define CLAIM_GROUPS(order_by)                                                           \
    "WITH RECURSIVE lim AS MATERIALIZED " LIMITS                                         \
    " head AS MATERIALIZED (SELECT id, job_group, priority, run_at FROM TQ.jobs"         \
    "    WHERE queue = $1 AND state = 'ready' AND run_at <= now() " order_by             \
    "    LIMIT coalesce((SELECT CASE WHEN per_group > 0 THEN room + 64"              \
    "                    ELSE room END FROM lim), 0)),"                                  \
    " fit AS MATERIALIZED (SELECT f.id, f.priority, f.run_at FROM (SELECT h.id,"         \
    "      h.job_group, h.priority, h.run_at, coalesce(b.n, 0) AS busy, row_number()"   \
    "      OVER (PARTITION BY h.job_group" FIFO_BY("h.") ")"                              \
    "      AS rn FROM head h LEFT JOIN busy b ON b.job_group = h.job_group) f, lim"      \
    "    WHERE f.job_group IS NULL OR lim.per_group = 0"                                 \
    "       OR f.busy + f.rn <= lim.per_group),"                                         \
    " walk AS MATERIALIZED (SELECT per_group > 0 AND (SELECT count(*) FROM fit) < room"  \
    "      AND (SELECT count(*) FROM head) = room + 64 AS w FROM lim),"              \
    GROUP_WALK("FROM walk WHERE w")                                                      \
    " roomy AS MATERIALIZED (SELECT g, lim.per_group"                                    \
    "      - coalesce((SELECT n FROM busy WHERE busy.job_group = grp.g), 0) AS k"        \
    "    FROM grp CROSS JOIN lim WHERE grp.g IS NOT NULL),"                              \
    " cand AS (SELECT id, priority, run_at FROM fit WHERE NOT (SELECT w FROM walk)"      \
    "    UNION ALL SELECT h.id, h.priority, h.run_at FROM roomy,"                        \
    "    LATERAL " FIRST_DUE("id, priority, run_at", "roomy.g", "roomy.k") " h"         \
    "    WHERE roomy.k > 0"                                                              \
    "    UNION ALL SELECT id, priority, run_at FROM head"                                \
    "      WHERE job_group IS NULL AND (SELECT w FROM walk)),"                           \
    " picked AS MATERIALIZED " PICK("SELECT id FROM cand " order_by                      \
                                    " LIMIT coalesce((SELECT room FROM lim), 0)") ","   \
    " claimed AS (" CLAIM_UPDATE("(SELECT at FROM lim)") "),"                            \
    " taken AS " TAKEN                                                                   \
    " SELECT * FROM claimed"

/* The limited claim of a queue without a group limit, as SQLite's
 * CLAIM_ROOM says, its rows locked as CLAIM locks them. */
#define CLAIM_ROOM(order_by)                                                             \
    "WITH lim AS MATERIALIZED " LIMITS                                                   \
    " picked AS MATERIALIZED (SELECT id FROM TQ.jobs"                                    \
    "    WHERE queue = $1 AND state = 'ready' AND run_at <= now() " order_by             \
    "    LIMIT coalesce((SELECT CASE WHEN per_group = 0 THEN room ELSE 0 END"            \
    "                    FROM lim), 0)"                                                  \
    "    FOR UPDATE SKIP LOCKED),"                                                       \
    " claimed AS (" CLAIM_UPDATE("(SELECT at FROM lim)") "),"                            \
    " taken AS " TAKEN                                                                   \
    " SELECT * FROM claimed"

/*
 * The claim of a queue whose only limit is a rate, by a claimer that holds
 * what it claims (tq__claim.start unset): CLAIM's, without the lock and
 * without tokens, for no more than the bucket's whole tokens as this
 * statement sees them (none from an empty one: nothing is written).
 * rate_take then takes the tokens, in the same transaction, and gives back
 * what it found none for.
 */
#define CLAIM_RATE(order_by)                                                             \
    "WITH picked AS MATERIALIZED ("                                                      \
    "  SELECT id FROM TQ.jobs"                                                           \
    "  WHERE queue = $1 AND state = 'ready' AND run_at <= now()"                         \
    "    AND NOT EXISTS (SELECT 1 FROM TQ.queues WHERE name = $1"                        \
    "        AND (paused OR max_running > 0 OR max_running_per_group > 0))"              \
    "  " order_by                                                                        \
    "  LIMIT least($2::int8, coalesce((SELECT floor(" RATE_TOKENS("clock_timestamp()")   \
    "      )::int8 FROM TQ.queues WHERE name = $1 AND rate_limit > 0), $2::int8))"       \
    "  FOR UPDATE SKIP LOCKED)"                                                          \
    CLAIM_UPDATE("now()")

/* The claim of a FIFO or unordered queue for a claimer that runs a group's
 * jobs one after another ($8 of them, tq__claim.chain), as SQLite's
 * CLAIM_CHAIN says; here LATERAL keeps each chain in the queue's order,
 * so the first room of cand are the ones to take. */
#define CLAIM_CHAIN(order_by)                                                            \
    "WITH RECURSIVE lim AS MATERIALIZED " LIMITS                                         \
    " head AS MATERIALIZED (SELECT id, job_group, row_number() OVER"                     \
    "      (" FIFO ") AS pos FROM TQ.jobs"                                               \
    "    WHERE queue = $1 AND state = 'ready' AND run_at <= now() " order_by             \
    "    LIMIT coalesce((SELECT room + 64 FROM lim), 0)),"                               \
    " slots AS MATERIALIZED (SELECT g, id FROM (SELECT NULL::text AS g, id, pos"         \
    "      FROM head WHERE job_group IS NULL"                                            \
    "      UNION ALL SELECT job_group, NULL::int8, min(pos) FROM head"                   \
    "      WHERE job_group IS NOT NULL AND " ROOMY("head.job_group")                     \
    "      GROUP BY job_group) s ORDER BY pos),"                                         \
    GROUP_WALK("FROM lim WHERE (SELECT count(*) FROM head) = lim.room + 64")             \
    " walked AS (SELECT grp.g, f.priority, f.run_at, f.id FROM grp CROSS JOIN LATERAL "  \
    FIRST_DUE("priority, run_at, id", "grp.g", "1") " f"                                 \
    "    WHERE grp.g IS NOT NULL AND " ROOMY("grp.g")                                    \
    "      AND NOT EXISTS (SELECT 1 FROM slots WHERE slots.g = grp.g)),"                 \
    " cand AS (SELECT c.id FROM slots CROSS JOIN LATERAL (SELECT slots.id AS id"         \
    "      WHERE slots.g IS NULL UNION ALL " FIRST_DUE("id", "slots.g", "$8") ") c"                      \
    "    UNION ALL SELECT c.id FROM (SELECT g FROM walked" FIFO                         \
    "      LIMIT (SELECT room FROM lim)) w"                                            \
    "    CROSS JOIN LATERAL " FIRST_DUE("id", "w.g", "$8") " c),"                                        \
    " picked AS MATERIALIZED " PICK("SELECT id FROM cand"                                \
                                    " LIMIT coalesce((SELECT room FROM lim), 0)") ","   \
    " claimed AS (" CLAIM_UPDATE("(SELECT at FROM lim)") "),"                            \
    " taken AS " TAKEN                                                                   \
    " SELECT * FROM claimed"

/* The columns cols of the first n ready jobs of group g due now, in the
 * queue's order: a scan of jobs_ready_group. */
#define FIRST_DUE(cols, g, n)                                                            \
    "(SELECT " cols " FROM TQ.jobs WHERE queue = $1 AND state = 'ready'"                 \
    "  AND job_group = " g " AND run_at <= now()"                                        \
    "  " FIFO " LIMIT " n ")"

/* grp: the distinct groups with ready jobs in name order, a seek each in
 * jobs_ready_group, starting from the row the FROM clause from gives. */
#define GROUP_WALK(from)                                                                 \
    " grp AS (SELECT (SELECT job_group FROM TQ.jobs WHERE queue = $1"                    \
    "      AND state = 'ready' AND job_group IS NOT NULL ORDER BY job_group LIMIT 1) AS g" \
    "    " from                                                                          \
    "    UNION ALL SELECT (SELECT job_group FROM TQ.jobs WHERE queue = $1"               \
    "      AND state = 'ready' AND job_group > grp.g ORDER BY job_group LIMIT 1)"        \
    "    FROM grp WHERE grp.g IS NOT NULL),"

/* Whether group g has room (its running jobs, busy, are fewer than the
 * limit). */
#define ROOMY(g)                                                                         \
    "NOT EXISTS (SELECT 1 FROM busy b WHERE b.job_group = " g                            \
    "  AND b.n >= (SELECT per_group FROM lim))"

/* The rows of the ids a query picked, locked (a row another transaction
 * holds is left, and one no longer ready once its lock came is not taken),
 * looked up by id: the state is tested in a form no index's predicate
 * matches, or a planner that expects a one-row table reads a whole ready
 * index for them (1.7 s for 2,000 ids; or every row of the table, each
 * compared with every id: 5 s). */
#define PICK(ids)                                                                        \
    "(SELECT j.id FROM TQ.jobs j WHERE j.id = ANY (ARRAY(" ids "))"                      \
    "  AND coalesce(j.state, '') = 'ready' FOR UPDATE OF j SKIP LOCKED)"

/* How many jobs of row j's group run (busy: none without a group limit). */
#define GROUP_BUSY                                                                       \
    "coalesce((SELECT n FROM busy WHERE busy.job_group = j.job_group), 0)"

#define CLAIM_UPDATE(start)                                                              \
    " UPDATE TQ.jobs j SET"                                                              \
    "  state = 'running',"                                                               \
    "  claims = j.claims + 1,"                                                           \
    "  attempts = j.attempts + " CHARGE "::int4,"                                        \
    "  started_at = CASE WHEN " CHARGE " THEN " start " END,"                            \
    "  unknown_starts = CASE WHEN " CHARGE " THEN 0 ELSE j.unknown_starts END,"          \
    "  worker = $3,"                                                                     \
    "  worker_since = nullif($7::int8, 0),"                                             \
    "  lease_until = now() + " DUR("$4") ","                                             \
    "  finished_at = NULL"                                                               \
    " FROM picked WHERE j.id = picked.id"                                                \
    " RETURNING " CLAIMED_COLS

/* What a rescue does to a running row: back to ready, or dead when its
 * started run used the last attempt; a claim that never started is put
 * back as it was (no attempt was charged, last_error kept). */
#define RESCUE(why)                                                                      \
    "UPDATE TQ.jobs j SET"                                                               \
    "  state = CASE WHEN j.started_at IS NOT NULL AND " OUT_OF_ATTEMPTS("0")             \
    "          THEN 'dead' ELSE 'ready' END,"                                            \
    "  finished_at = CASE WHEN j.started_at IS NOT NULL AND " OUT_OF_ATTEMPTS("0")       \
    "                THEN now() END,"                                                    \
    "  last_error = CASE WHEN j.started_at IS NULL THEN j.last_error ELSE " why " END,"  \
    "  unknown_starts = j.unknown_starts + (j.started_at IS NULL)::int4,"                \
    "  lease_until = NULL, progress = NULL, progress_text = NULL"


/* The claim statements, one per kind and queue order (engine.h). */
#define CLAIM_SQL(id, text, order) [id] = text(order),
const char *const tq__pg_sql_claim[S_COUNT] = {
    TQ__CLAIM_STMTS(CLAIM_SQL)
    [S_CLAIM_RATE_FIFO] = CLAIM_RATE(FIFO),
    [S_CLAIM_RATE_LIFO] = CLAIM_RATE(LIFO),
    [S_CLAIM_RATE_ANY] = CLAIM_RATE(UNORDERED),
    /* Before a limited claim, $1 the queue: a lock on the queue, held to
     * the end of the transaction (and before S_RATE_TAKE). Always, not only
     * when this statement sees limits: two claims could each miss a limit
     * set between their lock statement and their claim. An advisory lock: a
     * worker role may update only the bucket's columns of the queues table,
     * which lets it lock a row (S_RATE_TAKE does) but was granted long
     * after this. Its first key is this schema's (the table's oid), so
     * schemas do not collide. */
    [S_LIMIT_LOCK] =
        "SELECT pg_advisory_xact_lock('TQ.queues'::regclass::oid::int4, hashtext($1))",
    /* Opens every exchange, for the rest of its transaction: the hot path
     * takes rows by id or in its ready index's order, never by reading the
     * table or sorting a backlog. Whatever ANALYZE last saw of a queue table
     * is soon wrong, and when it expects one ready or running row (a new
     * table, or one analyzed between bursts) those plans cost the same on
     * paper: a claim read every ready row through the other ready index
     * and sorted them, an acknowledgement scanned the table and compared
     * each running row with each acknowledged one (500 x 1,000 per batch;
     * tq bench, 20,000 jobs, 1 worker: 41k -> 23k jobs/s). */
    [S_PLAN] = "SELECT set_config('enable_seqscan', 'off', true),"
               " set_config('enable_bitmapscan', 'off', true),"
               " set_config('enable_sort', 'off', true),"
               " set_config('enable_incremental_sort', 'off', true),"
               " set_config('jit', 'off', true)", /* SESSION_SETUP says why */
    /* And around the grouped acknowledgements, no nested loop: the jobs
     * side, expected at one row, was taken as the outer one and each of
     * its rows compared with every acknowledged id (2,049 ids on a 20,000
     * row table: 4,196,352 rows removed by the join filter, 0.7-1.4 s an
     * acknowledgement). Without it the rows are looked up by id = ANY and
     * joined to their ids by hash. The claim wants its nested loop back. */
    [S_PLAN_GROUP] = "SELECT set_config('enable_nestloop', 'off', true)",
    [S_PLAN_CLAIM] = "SELECT set_config('enable_nestloop', 'on', true)",
    /* Every worker runs this each second. The ordered, limited scan walks
     * jobs_running as an index scan, which marks the entries of dead row
     * versions (every job that ran leaves one) so later scans skip them; the
     * plain WHERE was planned as a bitmap scan that visited every dead
     * version's heap page each time: 650 ms per call after 600,000 jobs
     * (bench/sustained.sh). pg_rescue repeats it while it fills the limit. */
    [S_RESCUE_EXPIRED] =
        "WITH expired AS MATERIALIZED ("
        "  SELECT id FROM TQ.jobs"
        "  WHERE state = 'running' AND lease_until < now()"
        "  ORDER BY lease_until"
        "  LIMIT " STR(RESCUE_LIMIT)
        "  FOR UPDATE SKIP LOCKED) "
        RESCUE("'lease expired under worker ' || coalesce(j.worker, '?')")
        " FROM expired WHERE j.id = expired.id",
    [S_RESCUE_WORKER] =
        RESCUE("'worker ' || j.worker || ' restarted while running it'")
        " WHERE j.state = 'running' AND j.worker = $1 AND j.lease_until IS NOT NULL"
        "   AND j.worker_since = $2::int8",
    /* Draining workers ask this while others finish. The running half is
     * an ordered index scan from the newest lease (where live running rows
     * are), not EXISTS, which PostgreSQL plans as a bitmap scan visiting
     * the heap page of every dead version in jobs_running: 40 ms after
     * 100,000 jobs, asked by every idle worker at the end of a run. */
    [S_PENDING] = "SELECT EXISTS (SELECT 1 FROM TQ.jobs WHERE queue = $1 AND"
                  " state = 'ready') OR (SELECT 1 FROM TQ.jobs WHERE state = 'running'"
                  " AND queue = $1 AND lease_until IS NOT NULL"
                  " ORDER BY lease_until DESC LIMIT 1) IS NOT NULL"
                  " OR EXISTS (SELECT 1 FROM TQ.jobs WHERE queue = $1"
                  " AND state = 'waiting')",
    /* A ready job due now, along the ready index's queue. */
    [S_PENDING_DUE] = "SELECT EXISTS (SELECT 1 FROM TQ.jobs WHERE queue = $1 AND"
                      " state = 'ready' AND run_at <= now())",
    /* What an idle worker waits for (tq__claim.look): 0 when a ready job of
     * queue $1 is due (found at the first such entry of its ready index: a
     * backlog held back by a limit costs one), else when the first is due;
     * the first lease to end, the first entry of jobs_running. NULL: none. */
    [S_SOONEST] = "SELECT CASE WHEN EXISTS (SELECT 1 FROM TQ.jobs WHERE queue = $1"
                  " AND state = 'ready' AND run_at <= now()) THEN 0"
                  " ELSE (SELECT " US("min(run_at)") " FROM TQ.jobs"
                  " WHERE queue = $1 AND state = 'ready') - " US("now()") " END,"
                  " (SELECT " US("lease_until") " FROM TQ.jobs"
                  " WHERE lease_until IS NOT NULL ORDER BY lease_until LIMIT 1) - " US("now()"),
};
/* clang-format on */

/* The ids begin with engine.h's list, then this engine's rate claims. */
_Static_assert(S_CLAIM_RATE_FIFO == 11 && S_CLAIM_RATE_ANY == 13,
               "the rate claims are in tq__claim_stmt's places");

/* The claim statement of a queue order and a kind. */
enum stmt_id tq__pg_claim_id(tq_order order, enum tq__claim_kind kind)
{
    return (enum stmt_id)tq__claim_stmt(order, kind);
}

static enum stmt_id claim_stmt(const exchange_state *x)
{
    return tq__pg_claim_id(x->claim->order,
                           x->rate_after ? TQ__CLAIM_RATE : tq__claim_kind(x->claim));
}

/* Whether a claim takes its queue's tokens after its rows (CLAIM_RATE,
 * rate_take): its queue, as the claimer knows it, has a rate and no other
 * limit, and the claimer holds the jobs (starts them itself later). */
int tq__pg_rate_after(const tq__claim *c)
{
    return c->limited && c->rate && !c->grouped && !c->capped && !c->start;
}

/* The statement of an ack that goes one job at a time (those that carry a
 * text, and the rare ones), else S_COUNT: it goes in a group. */
_Static_assert(S_FAIL < 64 && S_SNOOZE < 64 && S_DISCARD < 64 && S_PROGRESS < 64,
               "exchange_state.singles holds them as bits");
static enum stmt_id single_stmt(const tq__ack *a)
{
    switch (a->kind) {
    case TQ__ACK_FAIL:
        return S_FAIL;
    case TQ__ACK_SNOOZE:
        return S_SNOOZE;
    case TQ__ACK_DISCARD:
        return S_DISCARD;
    case TQ__ACK_PROGRESS:
        return S_PROGRESS;
    default:
        return S_COUNT;
    }
}

static int prepare_singles(tq *db, uint64_t ids)
{
    int rc = 0;
    for (int id = 0; id < 64 && id < S_COUNT && !rc; id++)
        if (ids & (1ull << id))
            rc = tq__pg_prepare(db, (enum stmt_id)id, "acknowledging a job");
    return rc;
}

/* Sends acks[i], one of those single_stmt names. */
static int pipe_single(pipeline *pl, const char *worker, const tq__ack *a, size_t i)
{
    params p = {0};
    p_i64(&p, a->id);
    p_text(&p, worker);
    p_i64(&p, a->claim);
    const int64_t started = a->started_us > 0 ? a->started_us : 0;
    switch (a->kind) {
    case TQ__ACK_FAIL:
        p_i64(&p, a->delay_us);
        p_text(&p, a->error);
        p_i64(&p, started);
        break;
    case TQ__ACK_SNOOZE:
        p_i64(&p, a->delay_us);
        p_i64(&p, started);
        break;
    case TQ__ACK_DISCARD:
        p_text(&p, a->error);
        p_i64(&p, started);
        break;
    default: /* TQ__ACK_PROGRESS */
        p_i64(&p, a->progress);
        p_text(&p, a->error);
        break;
    }
    return tq__pg_pipe_send(pl, single_stmt(a), &p, i);
}

/* Whether the exchange's own pipeline looks for what an idle claimer
 * waits for (a claim that takes its tokens after its rows looks in
 * tq__pg_rate_take's, which commits). */
static int looks(const exchange_state *x)
{
    return x->claim && x->claim->look && !x->rate_after;
}

/* Sorts the acks into the grouped statements and prepares every statement
 * the exchange will send (statements cannot be prepared inside a
 * pipeline). */
static int exchange_prepare(tq *db, exchange_state *x)
{
    size_t nother = 0;
    int rc;
    for (size_t i = 0; i < x->nacks; i++) {
        tq__ack *a = &x->acks[i];
        a->result = TQ_ELOST; /* until the store says otherwise */
        if (single_stmt(a) != S_COUNT)
            x->singles |= 1ull << single_stmt(a);
        else if (a->kind == TQ__ACK_DONE && a->delete_done)
            x->idx[x->nacks - ++x->ndel] = i;
        else if (a->kind == TQ__ACK_DONE && a->output)
            x->ridx[x->nres++] = i;
        else
            x->idx[x->nmany++] = i;
        nother += a->kind == TQ__ACK_RELEASE || a->kind == TQ__ACK_BEAT;
    }
    /* All of the group done (the usual case): the simpler statement. */
    x->many = nother ? S_ACK_MANY : S_ACK_DONE;
    const int grouped = x->nmany || x->ndel || x->nres;
    if ((x->nmany && (rc = tq__pg_prepare(db, x->many, "acknowledging jobs"))) ||
        (x->ndel && (rc = tq__pg_prepare(db, S_ACK_DELETE, "acknowledging jobs"))) ||
        (x->nres && (rc = tq__pg_prepare(db, S_ACK_RESULTS, "acknowledging jobs"))) ||
        (rc = prepare_singles(db, x->singles)) ||
        (rc = tq__pg_prepare(db, S_PLAN, "exchanging with the store")) ||
        (grouped &&
         ((rc = tq__pg_prepare(db, S_PLAN_GROUP, "exchanging with the store")) ||
          (rc = tq__pg_prepare(db, S_PLAN_CLAIM, "exchanging with the store")))))
        return rc;
    const int limited = x->claim && x->claim->limited;
    if (x->claim &&
        ((rc = tq__pg_prepare(db, claim_stmt(x), "claiming jobs")) ||
         (limited && (rc = tq__pg_prepare(db, S_LIMIT_LOCK, "claiming jobs"))) ||
         (limited && (rc = tq__pg_prepare(db, S_RATE_WAIT, "claiming jobs"))) ||
         (x->rate_after && (rc = tq__pg_prepare(db, S_RATE_TAKE, "claiming jobs"))) ||
         (x->claim->look && (rc = tq__pg_prepare(db, S_SOONEST, "claiming jobs")))))
        return rc;
    return 0;
}

/* BEGIN, the plan settings, progress, the three groups, one statement per
 * failure, snooze or discard,
 * the claim, COMMIT: into the pipeline, not waiting for any answer. */
static int exchange_send(pipeline *pl, exchange_state *x)
{
    const params none = {0};
    const int grouped = x->nmany || x->ndel || x->nres;
    int rc;
    if ((rc = tq__pg_pipe_sql(pl, tq__pg_begin_sql(pl->db))))
        return rc;
    /* The planner settings last to the end of the transaction, which inside
     * the caller's is the caller's: none there (it claims nothing). */
    const int plan = C(pl->db)->tx != TX_SAVEPOINT;
    if (plan && (rc = tq__pg_pipe_send(pl, S_PLAN, &none, 0)))
        return rc;
    /* Progress first: a job's last progress and its end may come in one
     * exchange, and the end's fence leaves no running row to report on. */
    for (size_t i = 0; i < x->nacks && !rc; i++)
        if (x->acks[i].kind == TQ__ACK_PROGRESS)
            rc = pipe_single(pl, x->worker, &x->acks[i], i);
    if (rc || (plan && grouped && (rc = tq__pg_pipe_send(pl, S_PLAN_GROUP, &none, 0))) ||
        (x->nmany && (rc = tq__pg_pipe_group(pl, x->many, x->worker, x->acks, x->idx,
                                             x->nmany, x->arrays))) ||
        (x->ndel &&
         (rc = tq__pg_pipe_group(pl, S_ACK_DELETE, x->worker, x->acks,
                                 x->idx + x->nacks - x->ndel, x->ndel, x->arrays + 5))) ||
        (x->nres && (rc = tq__pg_pipe_group(pl, S_ACK_RESULTS, x->worker, x->acks,
                                            x->ridx, x->nres, x->arrays + 7))))
        return rc;
    for (size_t i = 0; i < x->nacks && !rc; i++)
        if (x->acks[i].kind != TQ__ACK_PROGRESS && single_stmt(&x->acks[i]) != S_COUNT)
            rc = pipe_single(pl, x->worker, &x->acks[i], i);
    if (!rc && x->claim && grouped)
        rc = tq__pg_pipe_send(pl, S_PLAN_CLAIM, &none, 0);
    const int locked = x->claim && x->claim->limited && !x->rate_after;
    if (!rc && locked) {
        params p = {0};
        p_text(&p, x->claim->queue);
        rc = tq__pg_pipe_send(pl, S_LIMIT_LOCK, &p, 0);
    }
    if (!rc && x->claim) {
        params p = {0};
        p_text(&p, x->claim->queue);
        p_i64(&p, (int64_t)x->claim->max);
        p_text(&p, x->worker);
        p_i64(&p, x->claim->lease_us);
        p_i64(&p, x->claim->max_attempts);
        p_text(&p, x->claim->start ? "true" : "false");
        p_i64(&p, x->claim->worker_since);
        if (!x->rate_after && tq__claim_kind(x->claim) == TQ__CLAIM_CHAIN)
            p_i64(&p, (int64_t)x->claim->chain);
        rc = tq__pg_pipe_send(pl, claim_stmt(x), &p, 0);
    }
    /* Whatever the claimer knows of the rate: rate_found. */
    if (!rc && locked) {
        params p = {0};
        p_text(&p, x->claim->queue);
        rc = tq__pg_pipe_send(pl, S_RATE_WAIT, &p, 0);
    }
    if (!rc && looks(x)) {
        params p = {0};
        p_text(&p, x->claim->queue);
        rc = tq__pg_pipe_send(pl, S_SOONEST, &p, 0);
    }
    /* rate_take commits. */
    return rc || x->rate_after ? rc : tq__pg_pipe_sql(pl, tq__pg_commit_sql(pl->db));
}

/* A column of S_SOONEST's row: TQ__NEVER when NULL. */
static int64_t in_or_never(const PGresult *r, int col)
{
    return PQgetisnull(r, 0, col) ? TQ__NEVER : g_i64(r, 0, col);
}

/* One statement's answer: which acks it applied, or the claimed jobs. */
static int exchange_take(tq *db, const pipeline *pl, size_t q, PGresult *r,
                         exchange_state *x)
{
    int rc = 0;
    switch (pl->what[q]) {
    case S_ACK_MANY:
    case S_ACK_DONE:
        tq__pg_mark_applied(r, x->acks, x->idx, x->nmany);
        break;
    case S_ACK_DELETE:
        tq__pg_mark_applied(r, x->acks, x->idx + x->nacks - x->ndel, x->ndel);
        break;
    case S_ACK_RESULTS:
        tq__pg_mark_applied(r, x->acks, x->ridx, x->nres);
        break;
    case S_FAIL:
    case S_SNOOZE:
    case S_DISCARD:
    case S_PROGRESS:
        x->acks[pl->ack[q]].result =
            strtoll(PQcmdTuples(r), NULL, 10) == 1 ? 0 : TQ_ELOST;
        break;
    case S_COUNT: /* BEGIN, COMMIT */
    case S_PLAN:
    case S_PLAN_GROUP:
    case S_PLAN_CLAIM:
    case S_LIMIT_LOCK:
        break;
    case S_RATE_TAKE:
        x->kept = (size_t)g_i64(r, 0, 0);
        x->claim->rate_wait_us = g_i64(r, 0, 1);
        x->claim->taken_after_us = g_i64(r, 0, 2) > 0 ? g_i64(r, 0, 2) : 0;
        x->claim->rate_found = g_i64(r, 0, 3) != 0;
        break;
    case S_RATE_WAIT:
        x->claim->rate_found = PQntuples(r) > 0;
        x->claim->rate_wait_us = PQntuples(r) ? g_i64(r, 0, 0) : 0;
        x->claim->taken_after_us = PQntuples(r) ? g_i64(r, 0, 1) : 0;
        if (x->claim->taken_after_us < 0) /* it took none: an older rate_at */
            x->claim->taken_after_us = 0;
        break;
    case S_SOONEST:
        x->claim->due_in = in_or_never(r, 0);
        x->claim->lease_in = in_or_never(r, 1);
        break;
    default: /* the claim: read_jobs takes r */
        return tq__pg_read_jobs(db, r, &tq__claimed_cols, x->claim->queue, x->worker,
                                &x->jobs, &x->njobs);
    }
    PQclear(r);
    return rc;
}

/* Each statement's result, then NULL; after all of them the Sync. An
 * error aborts the rest: the first is kept (rc may hold one already, from
 * sending). */
int tq__pg_exchange_read(tq *db, const pipeline *pl, exchange_state *x, int rc)
{
    PGconn *pg = C(db)->pg;
    for (size_t q = 0; q < pl->n; q++) {
        PGresult *r = tq__pg_get_result(db);
        ExecStatusType st = PQresultStatus(r);
        if (!r)
            return rc ? rc : tq__pg_fail_res(db, NULL, "reading from the store");
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            if (!rc && st != PGRES_PIPELINE_ABORTED)
                rc = tq__pg_fail_res(db, r, "exchanging with the store");
            else
                PQclear(r);
        } else if (rc) {
            PQclear(r);
        } else {
            rc = exchange_take(db, pl, q, r, x);
        }
        if ((r = tq__pg_get_result(db))) { /* not the end of that statement */
            PQclear(r);
            return rc ? rc : tq__seterr(db, TQ_EDB, "unexpected result from the store");
        }
    }
    PGresult *r = tq__pg_get_result(db);
    if (PQresultStatus(r) != PGRES_PIPELINE_SYNC) {
        if (!rc)
            return tq__pg_fail_res(db, r, "reading from the store");
        PQclear(r);
        return rc;
    }
    PQclear(r);
    if (!PQexitPipelineMode(pg))
        rc = rc ? rc : tq__pg_fail_res(db, NULL, "ending a pipeline");
    else if (rc && PQtransactionStatus(pg) == PQTRANS_INERROR)
        tq__pg_rollback(db);
    return rc;
}

/* After a failed exchange on the caller's connection, which tq does not
 * reconnect (that would end the pipeline): the rest of the pipeline's
 * results read and dropped, so that the connection leaves pipeline mode.
 * Bounded: a lost connection gives no more. */
static void pipeline_abandon(tq *db)
{
    PGconn *pg = C(db)->pg;
    for (int left = 64; left > 0 && PQpipelineStatus(pg) != PQ_PIPELINE_OFF; left--) {
        if (PQexitPipelineMode(pg) || PQstatus(pg) != CONNECTION_OK)
            break;
        PGresult *r = PQgetResult(pg);
        if (!r && !(r = PQgetResult(pg))) /* between two statements' results */
            break;
        PQclear(r);
    }
}

/*
 * The hot path (engine.h): the acknowledgements and the claim in one
 * transaction, sent as one pipeline and read back in one round trip
 * (and rate_take's, for a queue whose only limit is a rate).
 */
int tq__pg_exchange(tq *db, const char *worker, tq__ack *acks, size_t nacks,
                    tq__claim *claim, tq_job **out, size_t *out_n)
{
    PGconn *pg = C(db)->pg;
    exchange_state x = {.worker = worker,
                        .acks = acks,
                        .nacks = nacks,
                        .claim = claim && claim->max > 0 ? claim : NULL};
    int rc = 0;
    if (out) {
        *out = NULL;
        *out_n = 0;
    }
    if (claim)
        claim->due_in = claim->lease_in = TQ__NEVER;
    x.idx = malloc((2 * nacks + 1) * sizeof *x.idx);
    x.ridx = x.idx ? x.idx + nacks : NULL;
    /* At most: BEGIN, three settings, three groups, the lock, the claim,
     * the rate's wait, the look, COMMIT, and one statement per other ack. */
    pipeline pl = {db, 0, malloc((nacks + 12) * sizeof *pl.what),
                   malloc((nacks + 12) * sizeof *pl.ack)};
    if (!x.idx || !pl.what || !pl.ack) {
        rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        goto done;
    }
    x.rate_after = x.claim && tq__pg_rate_after(x.claim);
    if ((rc = exchange_prepare(db, &x)))
        goto done;
    if (!PQenterPipelineMode(pg)) {
        rc = tq__pg_fail_res(db, NULL, "starting a pipeline");
        goto done;
    }
    rc = exchange_send(&pl, &x);
    if (!PQpipelineSync(pg)) {
        rc = rc ? rc : tq__pg_fail_res(db, NULL, "sending to the store");
        goto done; /* the connection is gone; reconnecting ends the pipeline */
    }
    rc = tq__pg_exchange_read(db, &pl, &x, rc);
    if (!rc && x.rate_after)
        rc = tq__pg_rate_take(db, &x);
done:
    if (!rc)
        C(db)->tx = TX_NONE; /* committed */
    if (rc && C(db)->borrowed)
        pipeline_abandon(db);
    if (rc && PQpipelineStatus(pg) == PQ_PIPELINE_OFF)
        tq__pg_rollback(db); /* left open, not aborted: a claim read wrong, say */
    free(x.idx);
    free(pl.what);
    free(pl.ack);
    for (int c = 0; c < 14; c++)
        free(x.arrays[c]);
    if (rc) {
        tq_job_array_free(x.jobs, x.njobs);
        for (size_t i = 0; i < nacks; i++)
            acks[i].result = 0;
        return rc;
    }
    if (out) {
        *out = x.jobs;
        *out_n = x.njobs;
    } else {
        tq_job_array_free(x.jobs, x.njobs);
    }
    return 0;
}

int tq__pg_rescue(tq *db, const char *worker, int64_t since, int64_t *count)
{
    params p = {0};
    if (worker) {
        /* Under the claim's planner settings: on a table not yet analyzed
         * the planner takes 99.5 % of the rows for leased ones, and every
         * worker's start read the whole table (tq bench, 100,000 jobs, 16
         * workers: a sequential scan of 100,000 rows each, ~250 ms). */
        p_text(&p, worker);
        p_i64(&p, since);
        int rc;
        if ((rc = begin(db)) ||
            (rc = tq__pg_run_count(db, S_PLAN, NULL, NULL, "rescuing jobs")) ||
            (rc = tq__pg_run_count(db, S_RESCUE_WORKER, &p, count, "rescuing jobs"))) {
            tq__pg_rollback(db);
            return rc;
        }
        return commit(db);
    }
    int64_t n;
    int rc;
    *count = 0;
    do {
        n = 0;
        rc = tq__pg_run_count(db, S_RESCUE_EXPIRED, &p, &n, "rescuing jobs");
        *count += n;
    } while (!rc && n == RESCUE_LIMIT);
    return rc;
}

/* Whether statement id (an EXISTS over queue's jobs) finds one. */
static int queue_has(tq *db, enum stmt_id id, const char *queue, int *out,
                     const char *what)
{
    params p = {0};
    int64_t v = 0;
    p_text(&p, queue);
    int rc = tq__pg_query_i64(db, id, &p, &v, what);
    *out = v != 0;
    return rc;
}

int tq__pg_pending_due(tq *db, const char *queue, int *out)
{
    return queue_has(db, S_PENDING_DUE, queue, out, "checking for due jobs");
}

int tq__pg_pending(tq *db, const char *queue, int *out)
{
    return queue_has(db, S_PENDING, queue, out, "checking for pending jobs");
}
