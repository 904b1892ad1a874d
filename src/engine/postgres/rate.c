/*
 * postgres/rate.c - the PostgreSQL engine: rate limits: the bucket's statements and the
 * tokens taken after a claim.
 */
#include "pg_int.h"

/* clang-format off */
const char *const tq__pg_sql_rate[S_COUNT] = {
    /* After a limited claim, in its transaction: how long until its queue's
     * rate has a whole token (none: no rate limit), and how long after the
     * transaction's start the claim took its tokens (the bucket's time, if
     * it took any: the lock may have been waited for). */
    [S_RATE_WAIT] = "SELECT CASE WHEN t >= 1 THEN 0"
                    " ELSE ((1 - t) / " RATE_REFILL ")::int8 + 1 END,"
                    " (extract(epoch FROM rate_at - now()) * 1e6)::int8"
                    " FROM (SELECT " RATE_TOKENS("clock_timestamp()") " AS t, rate_limit,"
                    " rate_burst, rate_period_us, rate_at FROM TQ.queues"
                    " WHERE name = $1 AND rate_limit > 0) s",
    /* After CLAIM_RATE, in its transaction and behind S_LIMIT_LOCK: the
     * tokens for the jobs it claimed, $3 their ids in the order they are to
     * be kept (tq__jobs_sort's: those the claim charged, then the queue's
     * order) and $4 their claims ($1 the queue, $2 the worker), as many as
     * the bucket has whole ones as of the moment its row is locked, none if
     * the queue was paused or given other limits since (the locked claims
     * count running jobs, and these were not there to count); the jobs
     * beyond those are put back as they were before the claim (its claim
     * and any attempt it charged undone: no one saw them claimed). Always
     * one row: how many it kept (all of them when the queue has no rate
     * now), how long until the bucket has a whole token again (0: it has
     * one, or no rate), how long after the transaction's start the tokens
     * were taken, and whether the queue has a rate. */
    [S_RATE_TAKE] =
        "WITH b AS MATERIALIZED (SELECT name, rate_limit, rate_period_us, rate_burst,"
        "    rate_tokens, rate_at, paused OR max_running > 0 OR max_running_per_group > 0"
        "    AS shut FROM TQ.queues WHERE name = $1 FOR NO KEY UPDATE),"
        " g AS MATERIALIZED (SELECT *, CASE WHEN shut THEN 0"
        "      WHEN rate_limit = 0 THEN cardinality($3::int8[])"
        "      ELSE least(floor(t)::int8, cardinality($3::int8[])) END AS n"
        "    FROM (SELECT *, " RATE_TOKENS("at") " AS t"
        "          FROM (SELECT *, clock_timestamp() AS at FROM b) c) s),"
        " taken AS (UPDATE TQ.queues q SET rate_at = greatest(g.rate_at, g.at),"
        "    rate_tokens = g.t - g.n FROM g"
        "    WHERE q.name = g.name AND g.rate_limit > 0 AND g.n > 0),"
        " back AS (UPDATE TQ.jobs j SET state = 'ready', claims = j.claims - 1,"
        "    attempts = j.attempts - (j.started_at IS NOT NULL)::int4,"
        "    unknown_starts = CASE WHEN j.started_at IS NOT NULL"
        "                     THEN greatest(j.unknown_starts, 2) ELSE j.unknown_starts END,"
        "    started_at = NULL, lease_until = NULL"
        "    FROM (SELECT * FROM unnest($3::int8[], $4::int8[]) WITH ORDINALITY"
        "          AS u (id, c, k) WHERE k > (SELECT n FROM g)) a"
        "    WHERE j.id = a.id AND j.state = 'running' AND j.worker = $2"
        "      AND j.claims = a.c)"
        " SELECT coalesce(n, cardinality($3::int8[])),"
        "   CASE WHEN rate_limit IS NULL OR rate_limit = 0 OR t - n >= 1 THEN 0"
        "   ELSE ((1 - (t - n)) / " RATE_REFILL ")::int8 + 1 END,"
        "   coalesce((extract(epoch FROM at - now()) * 1e6)::int8, 0),"
        "   coalesce(rate_limit > 0, false)"
        " FROM (SELECT 1 AS one) o LEFT JOIN g ON true",
};
/* clang-format on */

/*
 * The claim of a queue whose only limit is a rate (rate_after) takes its
 * rows first, as a claim without limits does, alongside other workers'
 * claims, and its tokens after them, in the same transaction: the lock its
 * queue's limited claims take one at a time (S_LIMIT_LOCK), held for one
 * short statement and the commit, where a claim that counts its tokens
 * first holds it through the claim of all its rows (tq bench, PostgreSQL,
 * a rate above what is achieved, 12 alternated runs: 0.69 of the same queue
 * without it that way, 0.73 this way). The tokens are taken as late as
 * before, just before the commit, so the claimed jobs' starts trail them
 * no more; the jobs they do not cover go back as they were, before anyone
 * sees them claimed (when tokens run short, the claim that takes the lock
 * first keeps its rows, not the one whose rows come first in the queue).
 * Without jobs it only reads when the next token is due (S_RATE_WAIT).
 * Commits the transaction exchange_send left open, and keeps the first
 * x->kept of x->jobs.
 */
int tq__pg_rate_take(tq *db, exchange_state *x)
{
    PGconn *pg = C(db)->pg;
    enum stmt_id what[4]; /* the lock and S_RATE_TAKE, or S_RATE_WAIT; the look; COMMIT */
    size_t ack[4];
    pipeline pl = {db, 0, what, ack};
    char *ids = NULL, *claims = NULL;
    int rc = 0;
    x->kept = x->njobs;
    if (x->njobs) {
        /* The queue's first ones are those kept (the worker sorts them the
         * same way). */
        tq__jobs_sort(x->jobs, x->njobs, x->claim->order);
        int64_t *v = malloc(x->njobs * sizeof *v);
        for (size_t i = 0; v && i < x->njobs; i++)
            v[i] = x->jobs[i].id;
        ids = v ? tq__pg_int_array(v, x->njobs) : NULL;
        for (size_t i = 0; v && i < x->njobs; i++)
            v[i] = x->jobs[i].claim;
        claims = v ? tq__pg_int_array(v, x->njobs) : NULL;
        free(v);
        if (!ids || !claims)
            rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
    }
    if (!rc && !PQenterPipelineMode(pg))
        rc = tq__pg_fail_res(db, NULL, "starting a pipeline");
    if (rc) {
        free(ids);
        free(claims);
        return rc;
    }
    params p = {0};
    p_text(&p, x->claim->queue);
    if (x->njobs) {
        rc = tq__pg_pipe_send(&pl, S_LIMIT_LOCK, &p, 0);
        p_text(&p, x->worker);
        p_text(&p, ids);
        p_text(&p, claims);
        if (!rc)
            rc = tq__pg_pipe_send(&pl, S_RATE_TAKE, &p, 0);
    } else { /* none: the bucket may be empty, and say when it is not */
        rc = tq__pg_pipe_send(&pl, S_RATE_WAIT, &p, 0);
    }
    if (!rc && x->claim->look) {
        params q = {0};
        p_text(&q, x->claim->queue);
        rc = tq__pg_pipe_send(&pl, S_SOONEST, &q, 0);
    }
    if (!rc)
        rc = tq__pg_pipe_sql(&pl, tq__pg_commit_sql(db));
    if (!PQpipelineSync(pg))
        rc = rc ? rc : tq__pg_fail_res(db, NULL, "sending to the store");
    else
        rc = tq__pg_exchange_read(db, &pl, x, rc);
    free(ids);
    free(claims);
    if (!rc)
        while (x->njobs > x->kept)
            tq__job_clear(&x->jobs[--x->njobs]);
    return rc;
}
