/*
 * common.c - what the engines share that is not SQL, below the interface:
 * the order claimed jobs start in (tq__jobs_sort), the words of an
 * enqueue whose commit went unanswered, the steps of a retry or cancel
 * (tq__manage) and of a prune (tq__prune), reading a queue's row
 * (tq__queue_from_row), finding a statement's text (tq__sql_find). Called by the engines
 * and by the layer above (api.c, worker.c); it calls nothing above it.
 */
#include "engine.h"

#include <stdlib.h>

/* Claimed jobs whose start the claim recorded come first (engine.h,
 * STARTS), then the queue's order. */
static int cmp_started(const tq_job *x, const tq_job *y)
{
    return (y->started_at != 0) - (x->started_at != 0);
}

/* Started first, then higher priority first: 0 when both tie. */
static int cmp_head(const tq_job *x, const tq_job *y)
{
    int c = cmp_started(x, y);
    if (c || x->priority == y->priority)
        return c;
    return x->priority > y->priority ? -1 : 1;
}

static int cmp_fifo(const void *a, const void *b)
{
    const tq_job *x = a, *y = b;
    int c = cmp_head(x, y);
    if (c)
        return c;
    if (x->run_at != y->run_at)
        return x->run_at < y->run_at ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int cmp_lifo(const void *a, const void *b)
{
    const tq_job *x = a, *y = b;
    int c = cmp_head(x, y);
    return c ? c : (x->id < y->id) - (x->id > y->id);
}

static int cmp_unordered(const void *a, const void *b)
{
    return cmp_started(a, b);
}

void tq__jobs_sort(tq_job *jobs, size_t n, tq_order order)
{
    if (n > 1)
        qsort(jobs, n, sizeof *jobs,
              order == TQ_LIFO   ? cmp_lifo
              : order == TQ_FIFO ? cmp_fifo
                                 : cmp_unordered);
}

int tq__enqueue_unknown(tq *db, const char *first, const int64_t *ids, size_t n)
{
    if (!n)
        return tq__seterr(db, TQ_EUNKNOWN,
                          "%s; the kept job may or may not have taken the new payload",
                          first);
    return tq__seterr(db, TQ_EUNKNOWN,
                      "%s; the jobs may or may not be stored (ids %lld to %lld): "
                      "enqueue with a key to retry safely",
                      first, (long long)ids[0], (long long)ids[n - 1]);
}

/* After the updates went as rc says: the engine's last step, or the
 * rollback when something failed. */
static int end_steps(tq *db, const tq__manage_ops *ops, void *ctx, int rc)
{
    if (!rc && ops->finish)
        rc = ops->finish(db, ctx);
    if (rc)
        ops->rollback(db);
    return rc;
}

int tq__manage(tq *db, const tq__manage_ops *ops, void *ctx, const int64_t *ids, size_t n,
               int64_t *count, size_t *bad, int *state)
{
    int rc;
    *count = 0;
    if ((rc = ops->begin(db, ctx)))
        return rc;
    for (size_t k = 0; k < (n ? n : 1) && !rc; k++) {
        const size_t i = n ? n - 1 - k : 0;
        int64_t changed = 0;
        if ((rc = ops->update(db, ctx, i, &changed)))
            break;
        if (n && changed == 0) { /* that one cannot change: none do */
            *bad = i;
            *count = 0;
            rc = ops->state_of(db, ids[i], state);
            ops->rollback(db);
            return rc;
        }
        *count += changed;
        if (n && ops->after)
            rc = ops->after(db, ctx, i);
    }
    if ((rc = end_steps(db, ops, ctx, rc))) {
        *count = 0;
        return rc;
    }
    return ops->commit(db);
}

int tq__prune(tq *db, const tq__manage_ops *ops, void *ctx, unsigned mask, int64_t *count)
{
    int rc;
    *count = 0;
    if ((rc = ops->begin(db, ctx)))
        return rc;
    for (int st = 0; st < TQ_STATE_COUNT && !rc; st++) {
        int64_t n = 0;
        if ((mask & (1u << st)) && !(rc = ops->update(db, ctx, (size_t)st, &n)))
            *count += n;
    }
    return (rc = end_steps(db, ops, ctx, rc)) ? rc : ops->commit(db);
}

void tq__queue_from_row(tq_queue_info *q, const char *name, const char *order,
                        const int64_t v[TQ__QUEUE_NUMBERS])
{
    tq_order o = TQ_FIFO;
    tq__queue_defaults(q, name);
    tq_order_parse(&o, order);
    q->order = o;
    q->lease_us = v[0];
    q->max_attempts = (int)v[1];
    q->backoff_base_us = v[2];
    q->backoff_cap_us = v[3];
    q->keep_done = (int)v[4];
    q->paused = (int)v[5];
    q->max_running = (int)v[6];
    q->max_running_per_group = (int)v[7];
    q->rate_limit = v[8];
    q->rate_period_us = v[9];
    q->rate_burst = q->rate_limit ? v[10] : 0;
    q->max_snoozes = (int)v[11];
    q->results = (int)v[12];
    q->timeout_us = v[13];
    q->retain_done_us = v[14];
    q->retain_dead_us = v[15];
}

const char *tq__sql_find(const char *const *const *tables, size_t n, int id)
{
    for (size_t i = 0; i < n; i++)
        if (tables[i][id])
            return tables[i][id];
    return NULL;
}
