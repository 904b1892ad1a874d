/*
 * held.c - the held jobs: claimed ahead of a free slot (see "Holding" in
 * loop.c), kept in a ring in claim order, started oldest first as they may
 * (pop_startable, pop_serial: a chain's jobs wait for their group), and
 * given back unstarted when they may no longer start (release_held,
 * give_back_short, drop_late). Called by the runners, which start them, by
 * the exchange, which fills the ring (take_jobs), and by the loop.
 * The ring is guarded by the runner's lock (callback threads take from it).
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <string.h>

static held_job pop_held(tq_worker *w)
{
    held_job h = w->held.ring[w->held.head];
    w->held.head = (w->held.head + 1) % w->held.cap;
    w->held.n--;
    return h;
}

/* Whether held job h passed its start_by (pop_startable). */
static int too_late(const held_job *h, int64_t now)
{
    return h->start_by && now > h->start_by;
}

/* Whether held job h's lease leaves it time to start (pop_startable). */
static int lease_left(const held_job *h, int64_t now)
{
    return h->lease_end - now >= h->lease_us / 3;
}

/* Whether a job of held job h's group runs in this worker (the caller
 * holds mu in callback mode). */
static int group_running(const tq_worker *w, const held_job *h)
{
    for (int i = 0; i < w->concurrency; i++) {
        const slot *s = &w->slots[i];
        if (s->state == SLOT_RUNNING && s->qi == h->qi && s->job.group &&
            strcmp(s->job.group, h->job.group) == 0)
            return 1;
    }
    return 0;
}

/*
 * The first held job after the oldest (which waits for its group) that may
 * start now, taken out of the ring with the order of the others kept, or 0
 * when none may. Jobs too late to start stay where they are until they are
 * the oldest. The walk passes over the jobs of the groups that run here:
 * at most a chain (tq__claim.chain) for each slot.
 */
static int pop_serial(tq_worker *w, int64_t now, held_job *out)
{
    for (size_t i = 1; i < w->held.n; i++) {
        const held_job *h = tq__held_at(w, i);
        if (too_late(h, now) || !lease_left(h, now) ||
            (h->serial && group_running(w, h)) || !tq__settings_fresh(w, h, now))
            continue;
        held_job found = *h;
        for (size_t k = i; k > 0; k--)
            *tq__held_at(w, k) = *tq__held_at(w, k - 1);
        pop_held(w);
        *out = found;
        return 1;
    }
    return 0;
}

/* A held job starts now (under mu in callback mode): the time since the
 * one before counts towards avg_start_gap_us if more were held then (they
 * waited for this worker), and if it is shorter than LIMITED_HOLD_US: a
 * longer one waited for something else (a pause, results not yet sent, a
 * ring emptied by give-backs), and a worker that slow to start holds none
 * of them anyway. Returns 1. */
static int held_started(tq_worker *w, int64_t now)
{
    const int64_t gap = now > w->pace.last_held_start ? now - w->pace.last_held_start : 1;
    if (w->pace.held_after_start && gap < LIMITED_HOLD_US)
        w->pace.avg_start_gap_us =
            w->pace.avg_start_gap_us ? (w->pace.avg_start_gap_us * 7 + gap) / 8 : gap;
    w->pace.last_held_start = now;
    w->pace.held_after_start = w->held.n > 0;
    return 1;
}

/*
 * The next held job to start (the caller holds mu in callback mode), or 0
 * when none is left. A job starts only while at least a third of its lease
 * is surely left: then the worker has that long to report the start before
 * the store may give the job to another worker. Jobs whose leases ran
 * shorter (heartbeats failed: the store was unreachable), and those not
 * started by their start_by, are set aside for the loop to give back
 * (give_back_short); the release is fenced, so it changes nothing if they
 * were taken meanwhile.
 */
int tq__pop_startable(tq_worker *w, held_job *out)
{
    int64_t now = tq__mono_us();
    if (w->acks.output_pending > OUTPUT_PENDING_MAX)
        return 0; /* the results of finished jobs wait for the store */
    while (w->held.n) {
        const held_job *h = tq__held_at(w, 0);
        const int expired = too_late(h, now);
        if (!expired && lease_left(h, now)) {
            if (!tq__settings_fresh(w, h, now))
                return 0;
            if (h->serial && group_running(w, h))
                return pop_serial(w, now, out) && held_started(w, now);
            *out = pop_held(w);
            return held_started(w, now);
        }
        if (w->held.nshort == w->held.cap)
            return 0; /* full: it waits in the ring until the loop empties it */
        w->held.nexpired += expired;
        w->held.shorts[w->held.nshort++] = pop_held(w);
        w->run->wake_loop(w);
    }
    return 0;
}

static int held_goes(const held_job *h, const held_sel *sel)
{
    if (sel->qi != SIZE_MAX && h->qi != sel->qi)
        return 0;
    if ((sel->unbounded_only && h->start_by) || (sel->chained_only && !h->serial))
        return 0;
    return !sel->late_at || (h->start_by && sel->late_at > h->start_by);
}

/* Gives back unstarted the held jobs sel picks (on stop, when a queue is
 * paused or rate-limited, when too late to start), keeping the rest in
 * order and the soonest start_by among them; *gone (if not NULL): how
 * many went. */
int tq__release_held(tq_worker *w, held_sel sel, size_t *gone)
{
    int rc = 0;
    size_t n = 0;
    w->run->lock(w);
    size_t kept = 0, count = w->held.n;
    int64_t next = 0;
    for (size_t i = 0; i < count; i++) {
        held_job h = *tq__held_at(w, i);
        if (rc || !held_goes(&h, &sel)) {
            if (h.start_by && (!next || h.start_by < next))
                next = h.start_by;
            *tq__held_at(w, kept++) = h;
            continue;
        }
        rc = tq__add_held_ack(w, &h, TQ__ACK_RELEASE, NULL);
        tq__job_clear(&h.job);
        n++;
    }
    w->held.n = kept;
    w->held.start_by_next = next;
    w->run->unlock(w);
    if (gone)
        *gone = n;
    return rc;
}

/* Held jobs of a rate-limited queue went back, not started in time: the
 * next claims hold fewer (limited_claimed). */
static void note_late(tq_worker *w, size_t n)
{
    w->pace.limited_expired = 1;
    tq__worker_log(w, TQ_LOG_DEBUG,
                   "%zu held job(s) of a limited queue given back unstarted: not started "
                   "within %lld ms of their claim",
                   n, (long long)LIMITED_HOLD_US / 1000);
}

/* Gives back the held jobs not started by their start_by (pop_startable
 * finds only those at the head of the ring). */
int tq__drop_late(tq_worker *w, int64_t now)
{
    if (!w->held.start_by_next || now <= w->held.start_by_next)
        return 0;
    size_t n = 0;
    int rc = tq__release_held(w, (held_sel){.qi = SIZE_MAX, .late_at = now}, &n);
    if (n)
        note_late(w, n);
    return rc;
}

/* Gives back the held jobs pop_startable set aside, and says so. */
int tq__give_back_short(tq_worker *w)
{
    int rc = 0;
    w->run->lock(w);
    size_t n = w->held.nshort, expired = w->held.nexpired;
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = tq__add_held_ack(w, &w->held.shorts[i], TQ__ACK_RELEASE, NULL);
        tq__job_clear(&w->held.shorts[i].job);
    }
    w->held.nshort = w->held.nexpired = 0;
    if (n && w->held.n)
        w->run->held_changed(w); /* some may have waited for room */
    w->run->unlock(w);
    if (n > expired)
        tq__worker_log(w, TQ_LOG_WARN,
                       "%zu held job(s) given back unstarted: less than a third of their "
                       "lease was surely left (heartbeats could not reach the store)",
                       n - expired);
    if (expired)
        note_late(w, expired);
    return rc;
}

/* The number of held jobs (the threads take them in callback mode). */
size_t tq__held_count(tq_worker *w)
{
    w->run->lock(w);
    size_t n = w->held.n;
    w->run->unlock(w);
    return n;
}
