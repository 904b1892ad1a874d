/*
 * retain.c - retention in the store (tq_queue_info.retain_done_us,
 * retain_dead_us): a worker deletes the finished jobs of the queues it
 * serves once they are older than their queue keeps them, as `tq prune`
 * would, a small batch of each state per turn (engine retire: one short
 * transaction), so that no turn holds the store for long. A turn that
 * found a full batch comes again at the next pass, one that found some
 * after the queue's period, one that found none after twice its last wait
 * (to a minute): an idle worker of a queue with retention costs a
 * transaction a minute for it. Each state's deletes start where the last
 * one ended (the engine's cursor), so a turn reads only what finished
 * since, not the rows other queues keep; every RETAIN_REWALK_US they start
 * from the beginning again, for a job that committed long after it
 * finished. Every worker of a queue does this: on PostgreSQL they skip
 * each other's rows, on SQLite one waits for the other's short
 * transaction. Called by the loop (loop.c).
 */
#include "worker_int.h"

#include <stdlib.h>
#include <string.h>

#define RETAIN_BATCH      500               /* jobs per state per turn */
#define RETAIN_MIN_GAP_US 1000000LL         /* the shortest period */
#define RETAIN_MAX_GAP_US 60000000LL        /* the longest */
#define RETAIN_REWALK_US  (600LL * 1000000) /* starts back at the beginning */
#define RETAIN_WARN_US    60000000LL        /* a failure said at most this often */

static const int finished_states[] = {TQ_DONE, TQ_DEAD, TQ_CANCELLED};

/* How long queue q keeps jobs in state st (0: until pruned). */
static int64_t keep_of(const tq_queue_info *q, int st)
{
    return st == TQ_DONE ? q->retain_done_us : q->retain_dead_us;
}

/* A queue's period between turns that delete: a quarter of what it keeps
 * (the shorter of the two), within the bounds. */
static int64_t period_of(const tq_queue_info *q)
{
    int64_t keep = q->retain_done_us;
    if (!keep || (q->retain_dead_us && q->retain_dead_us < keep))
        keep = q->retain_dead_us;
    keep /= 4;
    return keep < RETAIN_MIN_GAP_US   ? RETAIN_MIN_GAP_US
           : keep > RETAIN_MAX_GAP_US ? RETAIN_MAX_GAP_US
                                      : keep;
}

/* The state of queue qi, the array grown to the queues known. NULL: no
 * memory (tq__retain stops the worker, as its other parts do). */
static retain_queue *state_of(tq_worker *w, size_t qi)
{
    worker_retain *r = &w->retain;
    if (qi >= r->n) {
        retain_queue *v = realloc(r->q, w->nqueues * sizeof *v);
        if (!v)
            return NULL;
        memset(v + r->n, 0, (w->nqueues - r->n) * sizeof *v);
        r->q = v;
        r->n = w->nqueues;
    }
    return &r->q[qi];
}

/* One turn of queue qi: its deletes, and when the next one is due. */
static int turn(tq_worker *w, size_t qi, retain_queue *r, int64_t now)
{
    const tq_queue_info *q = &w->qinfo[qi];
    int64_t keep[TQ_STATE_COUNT] = {0}, count[TQ_STATE_COUNT] = {0};
    for (size_t i = 0; i < sizeof finished_states / sizeof *finished_states; i++)
        keep[finished_states[i]] = keep_of(q, finished_states[i]);
    if (now - r->walked >= RETAIN_REWALK_US) {
        memset(r->after, 0, sizeof r->after);
        r->walked = now;
    }
    int rc = w->db->engine->retire(w->db, q->name, keep, r->after, RETAIN_BATCH, count);
    if (rc)
        return rc;
    int64_t n = 0;
    int full = 0;
    for (int st = 0; st < TQ_STATE_COUNT; st++) {
        n += count[st];
        full |= count[st] >= RETAIN_BATCH;
    }
    const int64_t period = period_of(q);
    if (full) {
        r->at = now; /* more: at the next pass */
        r->idle_gap = 0;
    } else if (n) {
        r->at = now + period;
        r->idle_gap = 0;
    } else {
        r->idle_gap = r->idle_gap ? r->idle_gap * 2 : period;
        if (r->idle_gap > RETAIN_MAX_GAP_US)
            r->idle_gap = RETAIN_MAX_GAP_US;
        r->at = now + r->idle_gap;
    }
    if (n)
        tq__worker_log(w, TQ_LOG_DEBUG,
                       "queue %s: deleted %lld done, %lld dead and %lld cancelled job(s) "
                       "past its retention",
                       q->name, (long long)count[TQ_DONE], (long long)count[TQ_DEAD],
                       (long long)count[TQ_CANCELLED]);
    return 0;
}

/*
 * The turns due this pass, one per queue that keeps its finished jobs for
 * a while. The store out of reach or busy is ridden out as the loop does;
 * any other failure (a role that may not delete jobs) is said once a
 * minute and tried again then, and stops nothing else.
 */
int tq__retain(tq_worker *w, const pass *p)
{
    if (w->store.disconnected || w->loop.stopping)
        return 0;
    for (size_t qi = 0; qi < w->nqueues; qi++) {
        const tq_queue_info *q = &w->qinfo[qi];
        if (!q->retain_done_us && !q->retain_dead_us)
            continue;
        retain_queue *r = state_of(w, qi);
        if (!r)
            return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
        if (p->now < r->at)
            continue;
        int rc = turn(w, qi, r, p->now);
        if (rc == TQ_ECONN || rc == TQ_EBUSY || rc == TQ_EFULL) {
            r->at = p->now + RETAIN_MIN_GAP_US; /* not at every pass */
            return tq__ride_out(w, rc);
        }
        if (rc) {
            r->at = p->now + RETAIN_WARN_US;
            if (!w->retain.warned || p->now - w->retain.warned >= RETAIN_WARN_US) {
                tq__worker_log(
                    w, TQ_LOG_WARN,
                    "queue %s: finished jobs past its retention not deleted: %s", q->name,
                    tq_errmsg(w->db));
                w->retain.warned = p->now;
            }
        }
    }
    return 0;
}

/* Lowers *timeout to the next turn due. */
void tq__retain_timer(const tq_worker *w, int64_t now, int64_t *timeout)
{
    if (w->loop.stopping)
        return;
    for (size_t qi = 0; qi < w->nqueues; qi++) {
        const tq_queue_info *q = &w->qinfo[qi];
        if (!q->retain_done_us && !q->retain_dead_us)
            continue;
        const int64_t at = qi < w->retain.n ? w->retain.q[qi].at : 0;
        const int64_t in = at > now ? at - now : 0;
        if (in < *timeout)
            *timeout = in > 0 ? in : 1;
    }
}

void tq__retain_free(tq_worker *w)
{
    free(w->retain.q);
    w->retain.q = NULL;
    w->retain.n = 0;
}
