/*
 * postgres/ack.c - the PostgreSQL engine: acknowledgements: the fenced statements
 * that end or extend a claimed job.
 */
#include "pg_int.h"

/* clang-format off */

/* The fence every change to a claimed job carries (engine.h). */
#define FENCE                                                                            \
    " WHERE j.id = $1 AND j.state = 'running' AND j.worker = $2 AND j.claims = $3"

/* The group form: ids in $2, joined to the row of each (S_PLAN_GROUP). */
#define FENCE_MANY                                                                       \
    " WHERE j.id = ANY($2) AND j.id = a.id AND j.state = 'running' AND j.worker = $1"    \
    " AND j.claims = a.c"

/* An acknowledgement's record of a start (engine.h, STARTS): s is the
 * started_us it carries. STARTED(s) is 1 when it charges the attempt. */
#define STARTED(s) "(" s "::int8 > 0 AND j.started_at IS NULL)::int4"

#define RECORD_START(s)                                                                  \
    " attempts = j.attempts + " STARTED(s) ","                                           \
    " started_at = COALESCE(j.started_at,"                                               \
    "                       CASE WHEN " s "::int8 > 0 THEN now() - " DUR(s) " END),"     \
    " unknown_starts = CASE WHEN " s "::int8 > 0 THEN 0 ELSE j.unknown_starts END"


const char *const tq__pg_sql_ack[S_COUNT] = {
    /* A failure, one statement per job for its error text: $1 id, $2
     * worker, $3 claim, $4 backoff, $5 error, $6 started_us. A failure of a
     * claim that never started (ended unrun: its attempts were used up)
     * charges nothing, but counts like a rescue of one (engine.h, STARTS). */
    [S_FAIL] =
        "UPDATE TQ.jobs j SET"
        "  state = CASE WHEN " OUT_OF_ATTEMPTS(STARTED("$6")) " THEN 'dead'"
        "          ELSE 'ready' END,"
        "  finished_at = CASE WHEN " OUT_OF_ATTEMPTS(STARTED("$6")) " THEN now() END,"
        "  run_at = CASE WHEN " OUT_OF_ATTEMPTS(STARTED("$6")) " THEN j.run_at"
        "           ELSE now() + " DUR("$4") " END,"
        "  last_error = $5,"
        "  lease_until = NULL, progress = NULL, progress_text = NULL,"
        "  attempts = j.attempts + " STARTED("$6") ","
        "  started_at = COALESCE(j.started_at,"
        "                        CASE WHEN $6::int8 > 0 THEN now() - " DUR("$6") " END),"
        "  unknown_starts = CASE WHEN $6::int8 > 0 THEN 0"
        "                   WHEN j.started_at IS NULL THEN j.unknown_starts + 1"
        "                   ELSE j.unknown_starts END"
        FENCE,
    /* The handler's word, as SQLite's S_SNOOZE, S_DISCARD and S_PROGRESS
     * say: $1 id, $2 worker, $3 claim, then the snooze's $4 delay and $5
     * started_us; the discard's $4 error and $5 started_us; the progress's
     * $4 percentage and $5 text. */
    [S_SNOOZE] =
        "UPDATE TQ.jobs j SET"
        "  state = 'ready',"
        "  run_at = now() + " DUR("$4") ","
        "  attempts = greatest(0, j.attempts - (j.started_at IS NOT NULL)::int4),"
        "  snoozes = j.snoozes + 1,"
        "  unknown_starts = CASE WHEN $5::int8 > 0 THEN 0 ELSE j.unknown_starts END,"
        "  lease_until = NULL, progress = NULL, progress_text = NULL"
        FENCE,
    [S_DISCARD] =
        "UPDATE TQ.jobs j SET"
        "  state = 'dead',"
        "  finished_at = now(),"
        "  last_error = $4,"
        "  lease_until = NULL,"
        RECORD_START("$5")
        FENCE,
    [S_PROGRESS] = "UPDATE TQ.jobs j SET progress = $4::int4, progress_text = $5" FENCE,
    /* A group of done jobs with results: S_ACK_DONE with a fourth array,
     * the results, kept apart so that jobs without one pay nothing. */
    [S_ACK_RESULTS] =
        "UPDATE TQ.jobs j SET"
        "  state = 'done',"
        "  finished_at = now(),"
        "  lease_until = NULL,"
        "  result = a.r,"
        RECORD_START("a.s")
        " FROM unnest($2::int8[], $3::int8[], $4::int8[], $5::bytea[])"
        "   WITH ORDINALITY AS a (id, c, s, r, n)"
        FENCE_MANY
        " RETURNING a.n",
    /*
     * A group of done (kept), release and beat acks in one statement: $1
     * worker; the arrays hold id, claim, kind (TQ__ACK_* as numbers: 0
     * done, 2 release, 3 beat; asserted below), lease length (beats) and
     * started_us; RETURNING names the
     * ones the fence let through, by position. A release gives back the
     * attempt the store charged for the run (none if it never heard of its
     * start).
     */
    [S_ACK_MANY] =
        "UPDATE TQ.jobs j SET"
        "  state = CASE a.k WHEN 0 THEN 'done'"
        "                   WHEN 2 THEN 'ready'"
        "          ELSE j.state END,"
        "  finished_at = CASE a.k WHEN 0 THEN now()"
        "                ELSE j.finished_at END,"
        "  attempts = CASE a.k WHEN 2"
        "               THEN greatest(0, j.attempts - (j.started_at IS NOT NULL)::int4)"
        "             ELSE j.attempts + " STARTED("a.s") " END,"
        "  started_at = CASE a.k WHEN 2 THEN j.started_at"
        "               ELSE COALESCE(j.started_at,"
        "                             CASE WHEN a.s > 0 THEN now() - " DUR("a.s") " END)"
        "               END,"
        "  unknown_starts = CASE WHEN a.k <> 2 AND a.s > 0 THEN 0"
        "                   ELSE j.unknown_starts END,"
        "  lease_until = CASE a.k WHEN 3 THEN now() + " DUR("a.d") " END,"
        "  progress = CASE a.k WHEN 2 THEN NULL ELSE j.progress END,"
        "  progress_text = CASE a.k WHEN 2 THEN NULL ELSE j.progress_text END"
        " FROM unnest($2::int8[], $3::int8[], $4::int4[], $5::int8[], $6::int8[])"
        "   WITH ORDINALITY AS a (id, c, k, d, s, n)"
        FENCE_MANY
        " RETURNING a.n",
    /* The usual group, all done: S_ACK_MANY without the per-kind CASEs and
     * two of its five arrays. */
    [S_ACK_DONE] =
        "UPDATE TQ.jobs j SET"
        "  state = 'done',"
        "  finished_at = now(),"
        "  lease_until = NULL,"
        RECORD_START("a.s")
        " FROM unnest($2::int8[], $3::int8[], $4::int8[])"
        "   WITH ORDINALITY AS a (id, c, s, n)"
        FENCE_MANY
        " RETURNING a.n",
    [S_ACK_DELETE] =
        "DELETE FROM TQ.jobs j"
        " USING unnest($2::int8[], $3::int8[]) WITH ORDINALITY AS a (id, c, n)"
        FENCE_MANY
        " RETURNING a.n",
};
/* clang-format on */

_Static_assert(TQ__ACK_DONE == 0 && TQ__ACK_RELEASE == 2 && TQ__ACK_BEAT == 3,
               "S_ACK_MANY spells the acknowledgement kinds as these numbers");

/* The text form of an int8[]/int4[]: {1,2,3}; malloc'd. */
char *tq__pg_int_array(const int64_t *v, size_t n)
{
    char *out = malloc(n * 21 + 3), *o = out;
    if (!out)
        return NULL;
    *o++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *o++ = ',';
        o = tq__put_i64(o, v[i]);
    }
    *o++ = '}';
    *o = '\0';
    return out;
}

int tq__pg_pipe_send(pipeline *pl, enum stmt_id id, const params *p, size_t ack)
{
    tq *db = pl->db;
    const int ok = id == S_COUNT ? PQsendQueryParams(C(db)->pg, p->v[0], 0, NULL, NULL,
                                                     NULL, NULL, 0)
                                 : tq__pg_send(db, id, p);
    if (!ok)
        return tq__pg_fail_res(pl->db, NULL, "sending to the store");
    pl->what[pl->n] = id;
    pl->ack[pl->n++] = ack;
    return 0;
}

int tq__pg_pipe_sql(pipeline *pl, const char *text)
{
    params p = {0};
    p_text(&p, text);
    return tq__pg_pipe_send(pl, S_COUNT, &p, 0);
}

/* The arrays of the grouped acknowledgements, by statement: which field
 * of tq__ack each one carries. */
enum ack_field { F_ID, F_CLAIM, F_KIND, F_LEASE, F_STARTED };
static const enum ack_field many_cols[] = {F_ID, F_CLAIM, F_KIND, F_LEASE, F_STARTED};
static const enum ack_field done_cols[] = {F_ID, F_CLAIM, F_STARTED};
static const enum ack_field delete_cols[] = {F_ID, F_CLAIM};

static int64_t ack_field(const tq__ack *a, enum ack_field f)
{
    switch (f) {
    case F_ID:
        return a->id;
    case F_CLAIM:
        return a->claim;
    case F_KIND:
        return (int64_t)a->kind;
    case F_LEASE:
        return a->kind == TQ__ACK_BEAT ? a->delay_us : 0;
    case F_STARTED:
        return a->started_us > 0 ? a->started_us : 0;
    }
    return 0;
}

/* Sends a grouped ack statement over acks[idx[0..n)]: worker, then one
 * int8[] per field the statement takes, and for S_ACK_RESULTS the results
 * as a bytea[]. arrays gets them (freed by the caller), at most 5. */
int tq__pg_pipe_group(pipeline *pl, enum stmt_id id, const char *worker,
                      const tq__ack *acks, const size_t *idx, size_t n, char **arrays)
{
    /* S_ACK_RESULTS takes what S_ACK_DONE does, then the results */
    const enum ack_field *cols = id == S_ACK_MANY                          ? many_cols
                                 : id == S_ACK_DONE || id == S_ACK_RESULTS ? done_cols
                                                                           : delete_cols;
    const int ncols = id == S_ACK_MANY ? (int)(sizeof many_cols / sizeof *cols)
                      : id == S_ACK_DONE || id == S_ACK_RESULTS
                          ? (int)(sizeof done_cols / sizeof *cols)
                          : (int)(sizeof delete_cols / sizeof *cols);
    const int nbytea = id == S_ACK_RESULTS;
    int64_t *col = malloc(n * sizeof *col);
    params p = {0};
    p_text(&p, worker);
    for (int c = 0; c < ncols && col; c++) {
        for (size_t j = 0; j < n; j++)
            col[j] = ack_field(&acks[idx[j]], cols[c]);
        if (!(arrays[c] = tq__pg_int_array(col, n)))
            break;
        p_text(&p, arrays[c]);
    }
    free(col);
    tq_payload *res = nbytea && p.n == 1 + ncols ? malloc(n * sizeof *res) : NULL;
    if (res) {
        for (size_t j = 0; j < n; j++)
            res[j] = (tq_payload){acks[idx[j]].output, acks[idx[j]].output_len};
        if ((arrays[ncols] = tq__pg_bytea_array(res, n)))
            p_text(&p, arrays[ncols]);
        free(res);
    }
    if (p.n != 1 + ncols + nbytea)
        return tq__seterr(pl->db, TQ_ENOMEM, "out of memory");
    return tq__pg_pipe_send(pl, id, &p, 0);
}

/* Marks acks[idx[k - 1]] applied for each position k that r returned. */
void tq__pg_mark_applied(const PGresult *r, tq__ack *acks, const size_t *idx, size_t n)
{
    for (int row = 0; row < PQntuples(r); row++) {
        int64_t k = g_i64(r, row, 0);
        if (k >= 1 && (size_t)k <= n)
            acks[idx[k - 1]].result = 0;
    }
}
