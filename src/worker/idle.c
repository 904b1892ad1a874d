/*
 * idle.c - what an idle worker reads of the store, and when. A fleet of
 * workers with nothing to do should cost the server nothing; a worker that
 * polled claims, settings, schedules and leases made six transactions a
 * second each.
 *
 * A worker is idle (tq__idle_update) when nothing runs, is held or waits to
 * be sent, it is neither stopping nor draining, and it listens to an engine
 * whose notifications say what changed (notify_drain): jobs inserted or
 * ready again in one of its queues, queue settings or schedules changed
 * (PostgreSQL's triggers of migration 16; on SQLite, any other
 * connection's commit). An idle worker then reads the store only when
 * something is due:
 *   a claim: when notified of jobs; when the first ready job of its queues
 *     is due, which each idle claim looks up in its own transaction
 *     (tq__claim.look); after a change, at the busy pace of the idle
 *     backoff; and every idle_wait at the latest;
 *   the rescue of expired leases: when the first lease of a running job
 *     ends, as the last claim's look found it, and every idle_wait;
 *   the queues' settings and the schedules: at most each second after a
 *     change, as a busy worker reads them, and every idle_wait;
 *   its registration's heartbeat: at its own pace (a third of its lease).
 * idle_wait is IDLE_WAIT_US, or the shortest lease of its queues if that is
 * shorter: a job claimed after the idle worker's last look cannot have
 * seen its lease end before then.
 * A busy worker claims whenever a slot is free and reads settings,
 * schedules and expired leases each second, as the loop's comment says.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#define IDLE_WAIT_US 30000000LL

/* The longest an idle worker goes without reading the store. */
static int64_t idle_wait(const tq_worker *w)
{
    int64_t wait = IDLE_WAIT_US;
    for (size_t i = 0; i < w->nqueues; i++)
        if (w->qinfo[i].lease_us > 0 && w->qinfo[i].lease_us < wait)
            wait = w->qinfo[i].lease_us;
    return wait;
}

static int64_t at_most(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The schedules looked at again at the busy pace (SCHEDULES_EVERY_US after
 * the last look), if not sooner. */
static void schedules_soon(tq_worker *w)
{
    w->loop.schedules_at =
        at_most(w->loop.schedules_at, w->loop.schedules_ran + SCHEDULES_EVERY_US);
}

int64_t tq__idle_every(const tq_worker *w, int64_t busy_us)
{
    return w->loop.idle ? idle_wait(w) : busy_us;
}

/* Whether the worker is idle this pass (the opening comment). Leaving
 * idleness, what it put off is due at the busy pace; entering it, a claim
 * goes out at once (and looks). */
void tq__idle_update(tq_worker *w, const pass *p)
{
    const int was = w->loop.idle;
    w->loop.idle = (w->db->engine->caps & TQ__CAP_NOTIFY) && w->loop.can_listen &&
                   !w->store.disconnected && !w->loop.stopping && !w->drain &&
                   p->free_slots > 0 && w->acks.n == 0 && tq__running_count(w) == 0 &&
                   tq__held_count(w) == 0;
    if (w->loop.idle && !was) {
        w->loop.claim_at = 0;
        w->loop.peek_asked = 0;
        w->loop.rescue_at = p->now + idle_wait(w);
    } else if (!w->loop.idle && was) {
        schedules_soon(w);
    }
}

int tq__idle_may_claim(const tq_worker *w, int64_t now)
{
    return !w->loop.idle || now >= w->loop.claim_at;
}

/* When to rescue, at now, for a lease that ends in lease_in (<= 0: it has
 * ended): then, but not sooner than a busy worker's pace, for a lease that
 * ended may be in another worker's rescue, whose row lock ours skips. */
static int64_t rescue_time(const tq_worker *w, int64_t now, int64_t lease_in)
{
    const int64_t at = now + (lease_in > 0 ? lease_in : 0),
                  soonest = w->live.last_rescue + RESCUE_EVERY_US;
    return at > soonest ? at : soonest;
}

/* After the pass's claims: when an idle worker claims again and rescues,
 * from what its claims' looks found (p->due_in, p->lease_in). A claim that
 * took jobs, or a ready job due now that none took (a limit, a rate, or a
 * claim of another worker's in between), leaves the claims to the idle
 * backoff's pace; a claim that was due and found every queue paused waits
 * for a change. */
void tq__idle_plan(tq_worker *w, const pass *p)
{
    if (!w->loop.idle || !tq__idle_may_claim(w, p->now))
        return;
    const int64_t now = tq__mono_us(), wait = idle_wait(w);
    if (!p->tried) {
        w->loop.claim_at = now + wait;
        return;
    }
    w->loop.claim_last = now;
    w->loop.peek_asked = 0; /* the claims just looked */
    w->loop.rescue_at = rescue_time(w, now, at_most(p->lease_in, wait));
    w->loop.claim_at = p->claimed || p->due_in <= 0 ? 0 : now + at_most(p->due_in, wait);
}

/* What notify_drain heard: jobs (claim now), or a change (the settings and
 * schedules at the busy pace; a claim at the idle backoff's, or, where the
 * engine can peek, a look at that pace, and a claim if it finds a job due). */
void tq__idle_heard(tq_worker *w, int jobs, int changed)
{
    if (jobs)
        w->loop.claim_at = 0;
    if (!changed)
        return;
    w->settings.changed = 1;
    schedules_soon(w);
    if (w->db->engine->peek)
        w->loop.peek_asked = 1;
    else if (w->loop.claim_at)
        w->loop.claim_at = at_most(w->loop.claim_at, w->loop.claim_last + w->poll_max_us);
}

/* The settings were read after a change: an idle worker claims (a pause
 * lifted, a limit raised), or, where the engine can peek (a change there
 * may be only another worker's heartbeat), peeks now. */
void tq__idle_settings_read(tq_worker *w)
{
    if (w->db->engine->peek) {
        w->loop.peek_asked = 1;
        w->loop.peek_last = 0;
    } else {
        w->loop.claim_at = 0;
    }
}

/* When an idle worker peeks next (peek_asked): at the idle backoff's pace. */
static int64_t peek_at(const tq_worker *w)
{
    return w->loop.peek_last + w->poll_max_us;
}

/*
 * SQLite: any other connection's commit may have made a job ready (put
 * back, retried, rescued, a plain-SQL update) or may be only another idle
 * worker's heartbeat. Rather than claim, which takes the write lock every
 * other worker waits for, an idle worker reads what its claims would look
 * for, and claims only for a job due now.
 */
int tq__idle_peek(tq_worker *w, const pass *p)
{
    if (!w->loop.idle || !w->loop.peek_asked || p->now < peek_at(w))
        return 0;
    int64_t due = TQ__NEVER, lease = TQ__NEVER;
    int rc = 0;
    for (size_t i = 0; i < w->nqueues && !rc; i++) {
        int64_t d, l;
        if (w->qinfo[i].paused)
            continue;
        if (!(rc = w->db->engine->peek(w->db, w->queues[i], &d, &l))) {
            due = at_most(due, d);
            lease = at_most(lease, l);
        }
    }
    const int64_t now = tq__mono_us();
    w->loop.peek_last = now; /* failed too: again at the backoff's pace */
    if (rc)
        return tq__ride_out(w, rc);
    w->loop.peek_asked = 0;
    if (due <= 0)
        w->loop.claim_at = 0;
    else if (due != TQ__NEVER)
        w->loop.claim_at = at_most(w->loop.claim_at, now + due);
    if (lease != TQ__NEVER)
        w->loop.rescue_at = at_most(w->loop.rescue_at, rescue_time(w, now, lease));
    return 0;
}

int tq__idle_rescue_due(const tq_worker *w, int64_t now)
{
    return w->loop.idle ? now >= w->loop.rescue_at
                        : now - w->live.last_rescue >= RESCUE_EVERY_US;
}

/* An idle worker rescued at now: it claims what it put back, if anything,
 * and looks to learn which lease ends next (the one it timed the rescue by
 * may have been renewed since): the next rescue is that look's to say. */
void tq__idle_rescued(tq_worker *w, int64_t now)
{
    w->loop.rescue_at = now + idle_wait(w);
    w->loop.claim_at = 0;
}

/* The timers an idle worker sleeps until (next_wakeup), lowering *timeout:
 * its next claim, rescue, settings and registration beat. */
void tq__idle_timers(const tq_worker *w, const pass *p, int64_t *timeout)
{
    if (!w->loop.idle)
        return;
    const int64_t now = p->now;
    int64_t t = *timeout;
    if (w->loop.claim_at > now)
        t = w->loop.claim_at - now; /* not the backoff's: the claim is planned */
    if (!w->live.beat_failed)       /* else no rescue: the beat's retry wakes it */
        t = at_most(t, w->loop.rescue_at - now);
    if (w->loop.peek_asked)
        t = at_most(t, peek_at(w) - now);
    t = at_most(t, w->settings.last_refresh +
                       (w->settings.changed ? REFRESH_EVERY_US : idle_wait(w)) - now);
    t = at_most(t, w->live.last_beat + p->beat_every - now);
    *timeout = t < 1 ? 1 : t;
}
