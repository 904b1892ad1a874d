/*
 * slots.c - what runs in the worker's slots: a slot freed, how many run, how
 * many may start (start_room, with the slowdown start_failed sets while
 * handlers cannot start), and the starts the store has not recorded yet
 * (beats of them for the next exchange, and what its answer says of them).
 * Called by the runners, the exchange, the heartbeat and the loop; the
 * slots are guarded by the runner's lock.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Empties slot s for its next job: what its run owned (a command's child
 * and pipes, a callback's result, the handler's word) is released. */
void tq__free_slot(slot *s)
{
    struct tq_worker *owner = s->owner;
    /* A group still running (the worker is being freed mid-run) stays the
     * reaper's, which ends it when the worker lets it go. */
    if (s->child.pid > 0 && s->child.group_done)
        tq__reaper_forget(owner->cmd.reaper.fd, s->child.pid);
    tq__child_close(&s->child);
    tq__job_clear(&s->job);
    free(s->word_text);
    free(s->output);
    for (int i = 0; i < 3; i++)
        if (s->parents_files[i]) {
            unlink(s->parents_files[i]);
            free(s->parents_files[i]);
        }
    memset(s, 0, sizeof *s);
    s->owner = owner;
    s->child.in_fd = s->child.err_fd = s->child.ctl_fd = s->child.out_fd =
        s->child.pidfd = -1;
}

/*
 * A job starts in slot s (the caller holds mu in callback mode): the run's
 * attempt is the store's count plus this one, unless the claim recorded the
 * start already (started_at set, attempt charged: a hold charged up front,
 * engine.h). An unrecorded start goes to the store with a later exchange.
 */
void tq__mark_start(tq_worker *w, slot *s)
{
    s->start_recorded = s->job.started_at != 0;
    if (s->start_recorded)
        return;
    s->job.attempts++;
    if (w->starts.unrecorded++ == 0)
        w->starts.unrecorded_since = s->started;
}

/* Jobs started and not yet turned into acks: running slots and, in callback
 * mode, results not yet collected (command mode has none: the loop reaps
 * its children and turns them into acks at once). */
int tq__running_count_locked(const tq_worker *w)
{
    int n = 0;
    for (int i = 0; i < w->concurrency; i++)
        n += w->slots[i].state != SLOT_FREE;
    return n + (int)w->cb.nresults;
}

int tq__running_count(tq_worker *w)
{
    w->run->lock(w);
    int n = tq__running_count_locked(w);
    w->run->unlock(w);
    return n;
}

/*
 * Command mode: how many jobs may run now. All slots, unless handlers
 * failed to start lately: then none until the retry time, and after it
 * as many as ran when the last start failed; once a start worked again,
 * one more for every START_PROBE_US since the failure, until the cap is
 * gone.
 */
int tq__start_room(tq_worker *w, int64_t now)
{
    if (!w->starts.cap)
        return w->concurrency;
    if (now < w->starts.retry_at)
        return 0;
    if (w->starts.failing_since) /* no start worked since the last failure */
        return w->starts.cap;
    int64_t room = w->starts.cap + (now - w->starts.last_fail) / START_PROBE_US;
    if (room < w->concurrency)
        return (int)room;
    w->starts.cap = 0;
    tq__worker_log(w, TQ_LOG_INFO, "handlers start again: up to %d at once",
                   w->concurrency);
    return w->concurrency;
}

/*
 * A handler could not start (why: the reason, program: the program itself
 * cannot be run). That is the worker's trouble or the machine's, never the
 * job's: the job went back unspent, and starts slow down (start_room)
 * while the cause lasts, said once. A program that cannot run for
 * START_PROGRAM_US (a deploy replacing it takes less) will not come back
 * by itself, nor will a machine on which nothing could start for
 * START_MACHINE_US while nothing of ours ran: the worker then stops as on
 * SIGTERM and returns the reason.
 */
void tq__start_failed(tq_worker *w, int program, const char *why)
{
    const int64_t now = tq__mono_us();
    const int running = tq__running_count(w);
    if (!w->starts.cap)
        tq__worker_log(
            w, TQ_LOG_WARN,
            "%s; the job goes back unspent, and jobs start more slowly while this "
            "lasts",
            why);
    if (!w->starts.failing_since)
        w->starts.failing_since = now;
    w->starts.backoff = w->starts.backoff ? w->starts.backoff * 2 : START_RETRY_MIN_US;
    if (w->starts.backoff > START_RETRY_MAX_US)
        w->starts.backoff = START_RETRY_MAX_US;
    w->starts.retry_at = now + w->starts.backoff;
    w->starts.last_fail = now;
    w->starts.cap = running > 0 ? running : 1;
    const int64_t failing = now - w->starts.failing_since;
    if (!w->starts.gave_up && ((program && failing >= START_PROGRAM_US) ||
                               (running == 0 && failing >= START_MACHINE_US))) {
        char d[32];
        snprintf(w->starts.why, sizeof w->starts.why, "%s (for %s); stopping", why,
                 tq_duration_format(d, sizeof d, failing));
        tq__worker_log(w, TQ_LOG_ERROR, "%s", w->starts.why);
        w->starts.gave_up = 1;
        w->loop.stop_requested = 1;
    }
}

/* Slots a job may start in now (start_room). */
int tq__free_slot_count(tq_worker *w)
{
    int n = tq__start_room(w, tq__mono_us()) - tq__running_count(w);
    return n > 0 ? n : 0;
}

/*
 * Appends to acks (room for concurrency more) a beat of lease lease_us for
 * every running job (or, unrecorded_only, for every running job whose start
 * the store has not recorded, once one of those has run ACK_DELAY_US: a
 * job that ends sooner records its start with its own acknowledgement, and
 * all go at once so that staggered starts do not make an exchange each).
 * Each carries how long ago it started, so the store records the start if
 * it has not (engine.h, STARTS). With mu held in callback mode.
 */
size_t tq__running_beats(tq_worker *w, tq__ack *acks, int unrecorded_only)
{
    size_t n = 0;
    if (unrecorded_only) {
        int64_t oldest = INT64_MAX;
        for (int i = 0; i < w->concurrency; i++) {
            const slot *s = &w->slots[i];
            if (s->state == SLOT_RUNNING && !s->lost && !s->start_recorded &&
                s->started < oldest)
                oldest = s->started;
        }
        if (oldest == INT64_MAX || tq__mono_us() - oldest < ACK_DELAY_US)
            return 0;
    }
    for (int i = 0; i < w->concurrency; i++) {
        const slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING || s->lost || (unrecorded_only && s->start_recorded))
            continue;
        acks[n++] = (tq__ack){.id = s->job.id,
                              .claim = s->job.claim,
                              .kind = TQ__ACK_BEAT,
                              .delay_us = w->qinfo[s->qi].lease_us,
                              .started_us = tq__started_ago(s->started)};
    }
    return n;
}

/* With mu held in callback mode: the store refused an acknowledgement of
 * the job running in s (its lease expired and it went to another claim, or
 * it was cancelled): its result will be discarded, its command is stopped,
 * and its start is no longer one to record. */
void tq__slot_lost(tq_worker *w, slot *s)
{
    s->lost = 1;
    if (!s->start_recorded) {
        s->start_recorded = 1;
        w->starts.unrecorded--;
    }
    w->run->lost(w, s);
}

/* The beats of running_beats came back: those runs' starts are recorded,
 * or their claims are lost. The slots may have moved on meanwhile
 * (callback threads), so each is found again by its claim. The starts
 * still unrecorded are those made since: the oldest of them dates the next
 * exchange. */
void tq__starts_recorded(tq_worker *w, const tq__ack *beats, size_t n)
{
    w->run->lock(w);
    int64_t oldest = INT64_MAX;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING || s->start_recorded)
            continue;
        size_t k = 0;
        while (k < n && !tq__same_claim(&beats[k], &s->job))
            k++;
        if (k < n && beats[k].result == 0) {
            s->start_recorded = 1;
            w->starts.unrecorded--;
        } else if (k < n) {
            tq__slot_lost(w, s);
        } else if (s->started < oldest) {
            oldest = s->started;
        }
    }
    if (w->starts.unrecorded)
        w->starts.unrecorded_since = oldest == INT64_MAX ? tq__mono_us() : oldest;
    w->run->unlock(w);
}

/* Running jobs whose start the store has not recorded yet, and since when
 * there have been some. */
size_t tq__unrecorded_count(tq_worker *w, int64_t *since)
{
    w->run->lock(w);
    size_t n = w->starts.unrecorded;
    *since = w->starts.unrecorded_since;
    w->run->unlock(w);
    return n;
}
