/*
 * loop.c - the worker pool's loop (tq_worker_run): claims jobs, runs them
 * (a command per job, or a C callback on the pool's threads: w->run),
 * acknowledges how they ended, keeps their leases alive, and rescues jobs
 * that dead workers left behind. Called by tq_worker_* users: `tq work`,
 * `tq bench`, embedding programs; the parts it calls are listed in
 * worker_int.h.
 *
 * One thread owns the store connection and runs a poll loop; that is the
 * "one writer per process" of DESIGN.md. Each pass of the loop
 * (tq_worker_run) calls these phases in turn, the loop's state living in
 * struct tq_worker (in its parts' structs, worker_int.h) and what a pass
 * learns in struct pass; each phase lives with the part it serves
 * (maintain_settings in limits.c, claim_jobs and send_acks in exchange.c,
 * maintain_leases in heartbeat.c, the runner's in command.c or callback.c),
 * the others here:
 *   stop_if_asked      a stop begins: held jobs go back, the grace starts;
 *   reap_and_start     finished jobs become pending acknowledgements, held
 *                      jobs (claimed ahead, see below) start in the freed
 *                      slots;
 *   store_unavailable  while the connection is lost or the disk full, only
 *                      the handlers are serviced: the pass ends there;
 *   maintain_settings  the queues' settings, the store still the one opened;
 *   claim_jobs         when slots are free or the held jobs run low, the
 *                      pending acks and the claims that refill slots and
 *                      holds go in ONE engine exchange (one transaction);
 *   send_acks          otherwise acks wait, at most ACK_DELAY_US or
 *                      ACK_BATCH of them, so a busy worker pays one commit
 *                      per batch;
 *   maintain_leases    heartbeats for running and held jobs (fenced) and the
 *                      registration; expired leases rescued now and then;
 *   run_schedules      the due slots of periodic jobs enqueued;
 *   tq__retain         finished jobs past their queue's retention deleted
 *                      (retain.c);
 *   w->run->enforce    timeouts and the stop's grace: SIGTERM, then SIGKILL;
 *   finished           stopped, or drained;
 *   next_wakeup        then poll() until a child writes, reads, exits, a
 *                      callback finishes, a stop is asked for, or the next
 *                      timer is due. A claim that found nothing backs off
 *                      (1 ms doubling to poll_max) instead of spinning.
 * An idle worker (idle.c: nothing to run, listening) claims, rescues and
 * reads settings and schedules only when told of a change or when
 * something comes due, instead of at each pass and each second.
 * Holding: a worker claims beyond its free slots about PREFETCH_WINDOW_US of
 * work (from the mean run time of its recent jobs, at most opts.prefetch),
 * so short jobs go in batches and slow jobs are not hoarded; none while a
 * queue it serves has a limit on how many run (serves_limited), and while
 * one has a rate limit only what starts within LIMITED_HOLD_US of the
 * claim. Every claim
 * is a hold (engine.h, STARTS): a job's start is recorded by its own
 * acknowledgement, or, once it has run ACK_DELAY_US, by the next exchange,
 * so a crash charges no attempt to jobs that never started. Held jobs keep
 * their leases alive like running ones; on stop, or when their queue is
 * paused, they are released unspent.
 * A crash loses only unsent acks; those jobs come back when their lease
 * expires, which is the at-least-once promise.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

/* Lowers *t to due_in, the time until something is due (at least 1 us). */
static void sooner(int64_t *t, int64_t due_in)
{
    if (due_in < 1)
        due_in = 1;
    if (due_in < *t)
        *t = due_in;
}

/* Sleeps until something happens or timeout_us passes. */
static void wait_events(tq_worker *w, int64_t timeout_us)
{
    struct pollfd fds[2 + 5 * TQ_CONCURRENCY_MAX]; /* wake, notify, 5 per slot */
    nfds_t n = 0;
    fds[n++] = (struct pollfd){w->loop.wake[0], POLLIN, 0};
    int nfd = (w->db->engine->caps & TQ__CAP_NOTIFY) && !w->store.disconnected &&
                      w->loop.listening
                  ? w->db->engine->notify_fd(w->db)
                  : -1;
    if (nfd >= 0)
        fds[n++] = (struct pollfd){nfd, POLLIN, 0};
    n += w->run->watch(w, fds + n, &timeout_us);
    int ms = (int)((timeout_us + 999) / 1000);
    if (poll(fds, n, ms) > 0 && (fds[0].revents & POLLIN)) {
        char buf[64];
        while (read(w->loop.wake[0], buf, sizeof buf) > 0)
            ;
    }
}

/*
 * Leaving with an error: the handlers are killed, and their jobs, the held
 * ones and the acknowledgements not yet sent go to the store in one last
 * exchange if it can still be reached, so that nothing waits for a lease
 * to expire; what could not be sent is said in the log. Callback handlers
 * cannot be killed: their results come back by lease. db's message (the
 * error being returned) is kept.
 */
static void give_back(tq_worker *w)
{
    tq *db = w->db;
    char keep[sizeof db->errmsg];
    memcpy(keep, db->errmsg, sizeof keep);
    int rc = w->run->abandon(w), claimed;
    if (!rc)
        rc = tq__release_held(w, (held_sel){.qi = SIZE_MAX}, NULL);
    if (!rc)
        rc = tq__give_back_short(w);
    size_t n = w->acks.n;
    if (!rc && n && !w->store.disconnected)
        rc = tq__exchange(w, NULL, 0, &claimed);
    if (w->acks.n)
        tq__worker_log(
            w, TQ_LOG_WARN,
            "%zu job(s) could not be given back (%s); they come back when their "
            "leases expire",
            w->acks.n,
            w->store.disconnected ? "no connection to the store" : tq_errmsg(db));
    else if (n)
        tq__worker_log(w, TQ_LOG_INFO, "gave back %zu job(s) before stopping", n);
    memcpy(db->errmsg, keep, sizeof keep);
}

/* A stop was asked for: claim nothing more, give back the held jobs, and
 * give the running ones the grace time; asked again, end the grace now:
 * the handlers are killed and their jobs go back unspent. */
static int stop_if_asked(tq_worker *w, int64_t now)
{
    int rc = 0;
    if (w->loop.stop_requested && !w->loop.stopping) {
        char d[32];
        int running = tq__running_count(w);
        w->loop.stopping = 1;
        w->loop.stop_at = now + w->grace_us;
        if (running && w->grace_us < 1000) /* --grace 0: the tool's 1 us */
            tq__worker_log(
                w, TQ_LOG_INFO,
                "stopping: no new jobs; %d running job(s) stopped now, no grace",
                running);
        else if (running)
            tq__worker_log(w, TQ_LOG_INFO,
                           "stopping: no new jobs; %d running job(s) get %s to finish",
                           running, tq_duration_format(d, sizeof d, w->grace_us));
        else
            tq__worker_log(w, TQ_LOG_INFO, "stopping: no new jobs; nothing running");
        rc = tq__release_held(w, (held_sel){.qi = SIZE_MAX}, NULL);
    }
    if (w->loop.stop_now && w->loop.stopping && !w->loop.stopped_now) {
        w->loop.stopped_now = 1;
        w->run->stop_now(w, now);
    }
    return rc;
}

/* Finished jobs become pending acks; held jobs start in the freed slots;
 * held jobs whose lease ran short, or not started by their start_by, go
 * back. */
static int reap_and_start(tq_worker *w)
{
    int rc;
    if ((rc = w->run->collect(w)) ||
        (rc = tq__send_progress(w, tq__mono_us(), &w->acks.progress_next)) ||
        (rc = tq__refresh_stale(w)) || (rc = w->run->start_held(w)) ||
        (rc = tq__drop_late(w, tq__mono_us())) || (rc = tq__give_back_short(w)))
        return rc;
    return 0;
}

/*
 * While the store cannot be written to (the connection is lost and not
 * back yet, or the disk is full until the next try), a pass only keeps the
 * handlers serviced and sleeps; a stop completes once nothing runs (on a
 * full disk, once the grace time is over too), what could not be sent
 * being left to the leases. Returns 1 when the pass is over, with *leave
 * set when the loop is.
 */
static int store_unavailable(tq_worker *w, const pass *p, int *leave)
{
    const int64_t now = p->now;
    int64_t t;
    if (w->store.disconnected && !tq__try_reconnect(w, now)) {
        t = 50000;
        sooner(&t, w->store.reconnect_at - now);
    } else if (w->store.full && now < w->store.full_retry_at) {
        t = w->store.full_retry_at - now;
    } else {
        return 0;
    }
    w->run->enforce(w, now, w->loop.stopping ? w->loop.stop_at : 0);
    if (w->loop.stopping && tq__running_count(w) == 0 &&
        (w->store.disconnected || now >= w->loop.stop_at)) {
        if (!w->store.disconnected)
            tq__worker_log(
                w, TQ_LOG_WARN,
                "stopping with %zu result(s) unsaved (the disk is full); those jobs "
                "come back when their leases expire",
                w->acks.n);
        *leave = 1; /* unsent acks: those jobs come back by lease */
        return 1;
    }
    if (w->loop.stopping)
        sooner(&t, w->loop.stop_at - now);
    wait_events(w, t);
    return 1;
}

/*
 * Periodic jobs: every worker enqueues the due slots of every schedule
 * (the store lets one of them win each slot), then looks again at the
 * soonest next slot, or in a second for schedules set meanwhile (idle: when
 * told of a change, or after idle.c's wait). A failure
 * other than the store's being out of reach is said (once a minute) and
 * does not stop the worker: a role without the grants still runs jobs.
 */
static int run_schedules(tq_worker *w, const pass *p)
{
    if (w->store.disconnected || w->loop.stopping || p->now < w->loop.schedules_at)
        return 0;
    int64_t n = 0, next = -1;
    int rc = tq_schedule_run(w->db, &n, &next);
    const int64_t every = tq__idle_every(w, SCHEDULES_EVERY_US);
    w->loop.schedules_ran = p->now;
    w->loop.schedules_at = p->now + (next >= 0 && next < every ? next + 1000 : every);
    if (rc == TQ_ECONN || rc == TQ_EBUSY || rc == TQ_EFULL)
        return tq__ride_out(w, rc);
    /* A failure of the store's own (a role without the grants) is not
     * tried again each second: each would be an error in its log. A
     * schedule this host cannot read (TQ_EINVAL) stops none of the others. */
    if (rc && rc != TQ_EINVAL)
        w->loop.schedules_at = p->now + 60000000;
    if (rc &&
        (!w->loop.schedules_warned || p->now - w->loop.schedules_warned >= 60000000)) {
        tq__worker_log(w, TQ_LOG_WARN, "periodic jobs not enqueued: %s",
                       tq_errmsg(w->db));
        w->loop.schedules_warned = p->now;
    }
    if (n) { /* its own: no notification tells it (SQLite) */
        w->loop.claim_at = 0;
        tq__worker_log(w, TQ_LOG_DEBUG, "enqueued %lld periodic job(s)", (long long)n);
    }
    return 0;
}

/* Whether the loop is over: a stop with nothing left running or unsent,
 * or, draining, nothing of its queues left ready or running anywhere. */
static int finished(tq_worker *w, const pass *p, int *done)
{
    tq *db = w->db;
    *done = w->loop.stopping && p->running == 0 && w->acks.n == 0;
    if (*done || w->store.disconnected || w->loop.stopping)
        return 0;
    if (!w->drain || p->running || p->nheld || w->acks.n || p->claimed) {
        tq__note_waiting(w, p, 0);
        tq__note_empty(w, p, 0);
        return 0;
    }
    int pending = 0, rc = 0;
    int64_t asked;
    if (w->all_queues) /* a queue made since the last read counts too */
        rc = tq__refresh_queues(w, &asked);
    for (size_t i = 0; i < w->nqueues && !pending && !rc; i++)
        rc = w->drain == TQ_DRAIN_DUE
                 ? db->engine->pending_due(db, w->queues[i], &pending)
                 : db->engine->pending(db, w->queues[i], &pending);
    if (rc)
        pending = 1;
    *done = !pending;
    if ((rc = tq__ride_out(w, rc)))
        return rc;
    tq__note_waiting(w, p, !*done);
    if (*done)
        tq__note_empty(w, p, 1);
    return 0;
}

/* A notification of new jobs in the worker's queues with a slot free
 * means: claim now; of a change: idle.c's. */
static int take_notifications(tq_worker *w, const pass *p, int *notified)
{
    tq *db = w->db;
    int k = 0, changed = 0, rc = 0;
    *notified = 0;
    /* Only while a new job could start at once: a slot free and nothing
     * held to fill it. A busy worker claims as its slots free up anyway,
     * and leaves the notifications queued (inotify merges repeats) rather
     * than wake for every commit of every other worker. */
    w->loop.listening = !w->loop.stopping && p->free_slots > 0 && p->nheld == 0;
    w->loop.notify_look_at = 0;
    if (w->loop.listen_again_at && p->now >= w->loop.listen_again_at &&
        !w->store.disconnected) {
        tq__listen(w);
        if (w->loop.can_listen) /* told of nothing meanwhile: claim, read */
            tq__idle_heard(w, 1, 1);
    }
    if (!(db->engine->caps & TQ__CAP_NOTIFY) || !w->loop.listening)
        return 0;
    int64_t again = 0;
    const char *const *mine = w->all_queues ? NULL : (const char *const *)w->queues;
    if ((rc = tq__ride_out(
             w, db->engine->notify_drain(db, mine, w->nqueues, &k, &changed, &again))))
        return rc;
    w->loop.notify_look_at = again > 0 ? p->now + again : 0;
    *notified = k > 0; /* listening: a slot is free */
    tq__idle_heard(w, k > 0, changed);
    return 0;
}

/* How long to sleep: backing off after a claim that found nothing;
 * otherwise until an event (a handler finishing wakes the loop) or the
 * next timer. */
static int64_t next_wakeup(tq_worker *w, const pass *p)
{
    const int64_t now = p->now;
    int64_t timeout = w->poll_max_us;
    if (p->tried) {
        w->loop.idle_us = w->loop.idle_us ? w->loop.idle_us * 2 : 1000;
        if (w->loop.idle_us > w->poll_max_us)
            w->loop.idle_us = w->poll_max_us;
        timeout = w->loop.idle_us;
    }
    tq__idle_timers(w, p, &timeout);
    if (w->acks.n)
        sooner(&timeout, w->acks.since + ACK_DELAY_US - now);
    if (w->acks.progress_next)
        sooner(&timeout, w->acks.progress_next - now);
    if (p->unrecorded)
        sooner(&timeout, p->unrecorded_since + ACK_DELAY_US - now);
    if (p->running || p->nheld)
        sooner(&timeout, w->live.last_beat + p->beat_every - now);
    if (p->running)
        sooner(&timeout, w->run->due_in(w, now));
    if (w->starts.cap) /* starts resume, or one more may start */
        sooner(&timeout,
               w->starts.retry_at > now ? w->starts.retry_at - now : START_PROBE_US);
    if (w->loop.stopping)
        sooner(&timeout, w->loop.stop_at - now);
    if (w->loop.notify_look_at)
        sooner(&timeout, w->loop.notify_look_at - now);
    if (w->pace.rate_retry_at > now)
        sooner(&timeout, w->pace.rate_retry_at - now);
    if (w->held.start_by_next) /* held jobs too late to start go back then */
        sooner(&timeout, w->held.start_by_next + 1 - now);
    if (!w->loop.stopping)
        sooner(&timeout, w->loop.schedules_at - now);
    tq__retain_timer(w, now, &timeout);
    /* A connection lost this pass (idle a moment ago, say): its first try
     * comes at once, not at the idle worker's next look. */
    if (w->store.disconnected)
        sooner(&timeout, w->store.reconnect_at - now);
    if (w->loop.listen_again_at > now) /* one put off for jobs: at their end */
        sooner(&timeout, w->loop.listen_again_at - now);
    return timeout;
}

/*
 * The loop: one pass per wake-up, each the phases above in the order the
 * file's opening comment gives. A phase returns an error only for what the
 * worker cannot ride out; the store errors it rides out leave it
 * disconnected or waiting for room, and the pass ends early.
 */
int tq_worker_run(tq_worker *w)
{
    if (!w)
        return TQ_EINVAL;
    tq *db = w->db;
    int rc = 0;
    w->live.last_beat = tq__mono_us();

    /* A handler that exits without reading its stdin must not kill us. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
    sigaction(SIGPIPE, &ign, &old_pipe);

    for (;;) {
        pass p = {.now = tq__mono_us(), .due_in = TQ__NEVER, .lease_in = TQ__NEVER};
        int leave = 0, notified = 0;
        if ((rc = stop_if_asked(w, p.now)) || (rc = reap_and_start(w)))
            break;
        p.free_slots = tq__free_slot_count(w);
        if (store_unavailable(w, &p, &leave)) {
            if (leave)
                break;
            continue;
        }
        tq__idle_update(w, &p);
        if ((rc = tq__maintain_settings(w, &p)) || (rc = tq__idle_peek(w, &p)))
            break;
        if (w->store.disconnected)
            continue;
        if ((rc = tq__send_acks(w, &p, tq__claim_jobs(w, &p))))
            break;
        if (w->store.disconnected)
            continue;
        if ((rc = tq__maintain_leases(w, &p)) || (rc = run_schedules(w, &p)) ||
            (rc = tq__retain(w, &p)))
            break;
        w->run->enforce(w, p.now, w->loop.stopping ? w->loop.stop_at : 0);
        if ((rc = finished(w, &p, &leave)) || leave)
            break;
        if (w->store.disconnected)
            continue;
        if ((rc = take_notifications(w, &p, &notified)))
            break;
        if (p.claimed || notified) { /* more may be waiting: no sleep */
            w->loop.idle_us = 0;
            continue;
        }
        wait_events(w, next_wakeup(w, &p));
    }

    if (rc)
        give_back(w);
    sigaction(SIGPIPE, &old_pipe, NULL);
    if (!rc && w->starts.gave_up)
        rc = tq__seterr(db, TQ_ESYS, "%s", w->starts.why);
    if (!rc && w->name_taken)
        rc = tq__seterr(db, TQ_EINUSE,
                        "worker name '%s' was registered by another process while this "
                        "one ran; stopped",
                        w->name);
    return rc;
}
