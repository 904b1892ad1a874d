/*
 * limits.c - the queues' settings as the worker last read them, and what
 * they allow: a held job starts only while they are fresh (settings_seen,
 * settings_fresh: the 50 ms gate), the worker reads them again when they
 * are not (refresh_stale) and now and then (maintain_settings), and gives
 * back what they no longer let start; how many jobs it holds (hold_target:
 * none while a queue has a concurrency limit, few and soon-started under a
 * rate limit) and how many of a group a claim takes (chain_of). Called by
 * the held jobs, the exchange, the runners and the loop.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <stdlib.h>
#include <string.h>

#define PREFETCH_WINDOW_US 20000LL /* hold about this much work beyond the slots */
/* A held job starts only while what the worker knows of its queue's
 * settings is this recent (settings_fresh): the bound on how long after a
 * pause, or a new limit or rate, commits a job may still start under the
 * old settings; or, where the store took longer than this to answer, until
 * SETTINGS_ANSWER_US after its answer (else a slow store would let nothing
 * start). */
#define SETTINGS_FRESH_US  50000LL
#define SETTINGS_ANSWER_US 20000LL

/* The store said that queue qi's settings (every queue's for SIZE_MAX) are
 * as the worker has them, in an exchange sent at sent, whose answer came at
 * answered: its held jobs may start until settings_until says. Called once
 * what they may no longer do is given back (release_unstartable), so that
 * no callback thread starts a job under settings about to be acted on. */
void tq__settings_seen_locked(tq_worker *w, size_t qi, int64_t sent, int64_t answered)
{
    int64_t until = sent + SETTINGS_FRESH_US;
    if (answered + SETTINGS_ANSWER_US > until)
        until = answered + SETTINGS_ANSWER_US;
    for (size_t i = 0; i < w->nqueues; i++)
        if ((qi == SIZE_MAX || i == qi) && until > w->settings.until[i])
            w->settings.until[i] = until;
}

/* settings_seen_locked, taking the lock. */
void tq__settings_seen(tq_worker *w, size_t qi, int64_t sent, int64_t answered)
{
    w->run->lock(w);
    tq__settings_seen_locked(w, qi, sent, answered);
    w->run->unlock(w);
}

/* Whether held job h's queue's settings are fresh enough for it to start
 * (SETTINGS_FRESH_US); if not, the loop is asked to read them (the caller
 * holds mu in callback mode). */
int tq__settings_fresh(tq_worker *w, const held_job *h, int64_t now)
{
    if (now <= w->settings.until[h->qi])
        return 1;
    if (!w->settings.stale)
        w->run->wake_loop(w);
    w->settings.stale = 1;
    return 0;
}

/* A queue found by an all_queues worker joins the end of its queues, with
 * settings never fresh yet. The arrays grow under the runner's lock: a
 * callback thread reads them (settings_fresh, add_held_ack) under it.
 * TQ_ENOMEM. */
static int add_queue(tq_worker *w, const tq_queue_info *q)
{
    const size_t n = w->nqueues;
    char *name = tq__strdup(q->name);
    char **queues = name ? realloc(w->queues, (n + 2) * sizeof *queues) : NULL;
    if (queues)
        w->queues = queues;
    tq_queue_info *qinfo = queues ? realloc(w->qinfo, (n + 1) * sizeof *qinfo) : NULL;
    int64_t *until = NULL;
    w->run->lock(w);
    if (qinfo) {
        w->qinfo = qinfo;
        until = realloc(w->settings.until, (n + 1) * sizeof *until);
    }
    if (until) {
        w->settings.until = until;
        until[n] = 0;
        qinfo[n] = *q;
        queues[n] = name;
        queues[n + 1] = NULL;
        w->nqueues = n + 1;
    }
    w->run->unlock(w);
    if (!until) {
        free(name);
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    }
    return 0;
}

/* An all_queues worker's read of the settings: every queue the store has,
 * those it did not know joining its queues (add_queue). */
static int read_every_queue(tq_worker *w)
{
    tq_queue_info *all = NULL; /* set only on success */
    size_t n = 0;
    int rc = w->db->engine->queue_list(w->db, &all, &n);
    for (size_t k = 0; !rc && k < n; k++) {
        size_t i = 0;
        while (i < w->nqueues && strcmp(w->queues[i], all[k].name) != 0)
            i++;
        if (i == w->nqueues)
            rc = add_queue(w, &all[k]);
        else
            w->qinfo[i] = all[k];
    }
    free(all);
    return rc;
}

/* Reads the settings of every queue; an unknown queue gets the defaults
 * (it will be created by its first enqueue). The registration's lease
 * (w->live.lease_us, sent with the next heartbeat) grows to the longest of
 * theirs and never shrinks: the name stays held at least as long as any
 * job's lease this worker renewed, so that no one takes it over and puts
 * those jobs back while this worker, merely stalled, may still run them. */
int tq__refresh_queues(tq_worker *w, int64_t *asked)
{
    *asked = tq__mono_us();
    int rc = w->all_queues ? read_every_queue(w) : 0;
    for (size_t i = 0; !w->all_queues && !rc && i < w->nqueues; i++) {
        rc = w->db->engine->queue_get(w->db, w->queues[i], &w->qinfo[i]);
        if (rc == TQ_ENOTFOUND) {
            tq__queue_defaults(&w->qinfo[i], w->queues[i]);
            rc = 0;
        }
    }
    for (size_t i = 0; !rc && i < w->nqueues; i++)
        if (w->qinfo[i].lease_us > w->live.lease_us)
            w->live.lease_us = w->me.lease_us = w->qinfo[i].lease_us;
    return rc;
}

/* Whether a worker holds none of queue q's jobs beyond its free slots
 * (serves_limited says why). */
static int holds_none(const tq_queue_info *q)
{
    return q->max_running > 0 || (q->max_running_per_group > 0 && q->order == TQ_LIFO);
}

/*
 * How many jobs of one group a claim of queue q may take, to run one after
 * another (tq__claim.chain): none but in a FIFO or unordered queue whose
 * only limit is one at a time per group, and there a slot's share of the
 * jobs held (target), so that one group's chain keeps no more than one
 * slot busy for PREFETCH_WINDOW_US. (A queue with a higher group limit
 * runs more of a group at once, which a chain would not; a rate limit
 * bounds how late a job may start.)
 */
size_t tq__chain_of(const tq_worker *w, const tq_queue_info *q, size_t target)
{
    const size_t n = target / (size_t)w->concurrency;
    if (q->max_running_per_group != 1 || q->max_running > 0 || q->rate_limit > 0 ||
        q->order == TQ_LIFO || n < 2)
        return 0;
    return n;
}

/* After the settings were read again: held jobs of a paused queue go back
 * at once instead of starting, and so do those of a queue that holds none
 * (serves_limited: claimed ahead before its limit was seen, a chain, say,
 * they count as running and keep their places from the other workers), a
 * rate-limited queue's held jobs without a start_by (claimed ahead before
 * the rate was seen, they took no tokens: a rate-limited claim's jobs
 * start at once, or within LIMITED_HOLD_US, or go back), and a chain's
 * held jobs once the queue claims none (chain_of: its group limit raised,
 * say, while the chain keeps the group to one at a time). */
static int release_unstartable(tq_worker *w)
{
    int rc = 0;
    for (size_t qi = 0; qi < w->nqueues && !rc; qi++) {
        const tq_queue_info *q = &w->qinfo[qi];
        const int all = q->paused || holds_none(q);
        if (all || q->rate_limit > 0)
            rc = tq__release_held(w, (held_sel){.qi = qi, .unbounded_only = !all}, NULL);
        else if (!tq__chain_of(w, q, SIZE_MAX))
            rc = tq__release_held(w, (held_sel){.qi = qi, .chained_only = 1}, NULL);
    }
    return rc;
}

/* Reads every queue's settings again, gives back the held jobs that may no
 * longer start (release_unstartable), and then lets the rest start; *read
 * (may be NULL) says whether the store answered. */
static int reread_settings(tq_worker *w, int *read)
{
    int64_t asked;
    int rc = tq__refresh_queues(w, &asked);
    if (read)
        *read = !rc;
    if (rc)
        return tq__ride_out(w, rc);
    const int64_t answered = tq__mono_us();
    if ((rc = release_unstartable(w)))
        return rc;
    tq__settings_seen(w, SIZE_MAX, asked, answered);
    return 0;
}

/* Held jobs wait for their queues' settings to be read (settings_fresh):
 * they are read now, and the ones that may still start, start. */
int tq__refresh_stale(tq_worker *w)
{
    w->run->lock(w);
    const int stale = w->settings.stale;
    w->settings.stale = 0;
    w->run->unlock(w);
    if (!stale || w->store.disconnected)
        return 0;
    int rc = reread_settings(w, NULL);
    if (!rc) {
        w->run->lock(w);
        w->run->held_changed(w);
        w->run->unlock(w);
    }
    return rc;
}

/* Each second: the store is still the one opened, and the runner's and
 * the log's upkeep; the queues' settings (held jobs of a paused queue go
 * back) each second too, or, idle, when a change was heard (within a
 * second) or after idle.c's wait; and the bound on every wait for the
 * store. */
int tq__maintain_settings(tq_worker *w, const pass *p)
{
    tq *db = w->db;
    int rc;
    if (!w->loop.stopping && p->now - w->settings.last_upkeep >= REFRESH_EVERY_US) {
        if ((rc = db->engine->same_store(db)))
            return rc;
        w->run->upkeep(w);
        tq__watch_wal(w, p->now);
        w->settings.last_upkeep = p->now;
    }
    const int64_t every =
        w->settings.changed ? REFRESH_EVERY_US : tq__idle_every(w, REFRESH_EVERY_US);
    int read = 0;
    if (!w->loop.stopping && p->now - w->settings.last_refresh >= every) {
        if ((rc = reread_settings(w, &read)))
            return rc;
        w->settings.last_refresh = p->now;
    }
    if (read && w->settings.changed) { /* a pause lifted, say */
        tq__idle_settings_read(w);
        w->settings.changed = 0;
    }
    return tq__ride_out(w, tq__set_wait_limit(w));
}

/* What limits the worker's queues have, as it last read their settings,
 * for how many jobs it holds: 2 when one has a concurrency limit that
 * held jobs would take from other workers, 1 when one has a rate limit,
 * 0 when none has either. A per-group limit alone is 0 in FIFO and
 * unordered queues: a held job takes its group's slot, but the claim
 * finds the groups with room wherever their jobs are (CLAIM_GROUPS,
 * CLAIM_CHAIN), and no more than PREFETCH_WINDOW_US of work is held. A
 * LIFO queue's claim steps over the full groups' jobs, so it holds none. */
static int serves_limited(const tq_worker *w)
{
    int most = 0;
    for (size_t i = 0; i < w->nqueues; i++) {
        const tq_queue_info *q = &w->qinfo[i];
        if (holds_none(q))
            return 2;
        if (q->rate_limit > 0)
            most = 1;
    }
    return most;
}

/* How many jobs to hold beyond the running ones: about PREFETCH_WINDOW_US of
 * work at the recent mean run time, none until a job has finished. */
static size_t target_held(const tq_worker *w)
{
    if (!w->held.prefetch || !w->pace.avg_run_us)
        return 0;
    int64_t n = (int64_t)w->concurrency * PREFETCH_WINDOW_US / w->pace.avg_run_us;
    return n > (int64_t)w->held.prefetch ? w->held.prefetch : (size_t)n;
}

/*
 * How many jobs to hold while a queue has a rate limit: a held job took
 * its token at the claim, so it must start within LIMITED_HOLD_US of the
 * claim (to start later would let a window of the rate see more starts
 * than it allows) or go back unstarted, its token spent. So no more than
 * half that time of work at the recent mean run time (none for jobs that
 * run longer), nor than it starts in half that time when jobs wait for it
 * (avg_start_gap_us: short jobs start no faster than a worker can hand them
 * out, which the run time does not show; tq bench, PostgreSQL, a rate far
 * above the achievable, claims that take their tokens after their rows:
 * 0.73 -> 0.84 of the same queue without it, median of 12 alternated
 * runs), and no more than the worker was found to start in time
 * (limited_claimed).
 */
static size_t limited_target(tq_worker *w)
{
    if (!w->held.prefetch || !w->pace.avg_run_us)
        return 0;
    int64_t n = (int64_t)w->concurrency * (LIMITED_HOLD_US / 2) / w->pace.avg_run_us;
    w->run->lock(w); /* the threads start held jobs in callback mode */
    const int64_t gap = w->pace.avg_start_gap_us;
    w->run->unlock(w);
    if (gap && n > (LIMITED_HOLD_US / 2) / gap)
        n = (LIMITED_HOLD_US / 2) / gap;
    if (n > (int64_t)w->pace.limited_cap)
        n = (int64_t)w->pace.limited_cap;
    return (size_t)n;
}

/* How many jobs to hold beyond the running ones (claim_jobs): none while
 * stopping. Held jobs take the slots that free up before any claim. While
 * one of the queues has a limit on how many run (serves_limited), none are
 * held: a held job counts as running, and would keep its place from
 * workers with free slots while the limited queue waited for the others to
 * run dry. With a rate limit, fewer, that must start soon. */
size_t tq__hold_target(tq_worker *w)
{
    const int limits = serves_limited(w);
    return w->loop.stopping || limits == 2 ? 0
           : limits == 1                   ? limited_target(w)
                                           : target_held(w);
}

/* After a rate-limited queue's claim of up to room jobs: the cap on held
 * jobs halves when some went back unstarted since the claim before (down
 * to none), grows by a quarter when the claim got all it asked for, and
 * otherwise comes down to twice what it got (the rate had no more tokens,
 * or the queue no more jobs). */
void tq__limited_claimed(tq_worker *w, size_t room, size_t claimed)
{
    size_t cap = w->pace.limited_cap;
    if (w->pace.limited_expired)
        cap /= 2;
    else if (claimed >= room)
        cap = cap + cap / 4 + 1 < w->held.prefetch ? cap + cap / 4 + 1 : w->held.prefetch;
    else if (cap > 2 * claimed)
        cap = 2 * claimed;
    w->pace.limited_cap = cap;
    w->pace.limited_expired = 0;
}

/* Callback mode: threads wake the loop to claim more when the held jobs
 * fall below half the target (command mode's loop claims without). */
void tq__set_low_water(tq_worker *w, size_t target)
{
    w->run->lock(w);
    w->cb.low_water = target / 2 > 1 ? target / 2 : 1;
    w->run->unlock(w);
}
