/*
 * acks.c - the pending acknowledgements: how a run ended (an outcome, from
 * either runner), a held job given back, or a handler's progress, each
 * turned into a fenced ack that waits for the next exchange (exchange.c);
 * and the line logged once the store has taken a failure (log_end).
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROGRESS_EVERY_US 1000000LL /* most one job's progress is written */

/* Appends a pending ack of kind for job j: a failure's backoff and a done
 * job's deletion as its queue's settings say, and error (a failure's, a
 * discard's reason, a progress's text) copied. */
static int add_ack(tq_worker *w, const ack_of *j, tq__ack_kind kind, const char *error)
{
    if (w->acks.n == w->acks.cap) {
        size_t cap = w->acks.cap ? w->acks.cap * 2 : 16;
        pending_ack *v = realloc(w->acks.v, cap * sizeof *v);
        if (!v)
            return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
        w->acks.v = v;
        w->acks.cap = cap;
    }
    pending_ack *p = &w->acks.v[w->acks.n];
    memset(p, 0, sizeof *p);
    if (w->acks.n == 0)
        w->acks.since = tq__mono_us();
    p->ack.id = j->id;
    p->ack.claim = j->claim;
    p->ack.kind = kind;
    p->started = j->started;
    if (kind == TQ__ACK_DONE)
        p->ack.delete_done = !w->qinfo[j->qi].keep_done;
    if (kind == TQ__ACK_FAIL) {
        const tq_queue_info *q = &w->qinfo[j->qi];
        p->ack.delay_us = tq__backoff_us(q->backoff_base_us, q->backoff_cap_us,
                                         j->attempt, tq__random());
    }
    if (kind == TQ__ACK_FAIL || kind == TQ__ACK_DISCARD || kind == TQ__ACK_PROGRESS) {
        /* Handlers write what they like: kept as valid UTF-8, which
         * PostgreSQL's text insists on (and JSON output too). */
        if (error && !(p->error = tq__utf8_clean(error)))
            return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
        p->ack.error = p->error;
    }
    w->acks.n++;
    return 0;
}

/* A held job given back unstarted, or ended unrun. */
int tq__add_held_ack(tq_worker *w, const held_job *h, tq__ack_kind kind,
                     const char *error)
{
    ack_of j = {h->job.id, h->job.claim, 0, h->job.attempts, h->qi};
    int rc = add_ack(w, &j, kind, error);
    if (!rc) { /* for the counters: a job ended unrun out of attempts is dead */
        w->acks.v[w->acks.n - 1].attempt = h->job.attempts;
        w->acks.v[w->acks.n - 1].max_attempts = h->job.max_attempts;
    }
    return rc;
}

/*
 * A failure or a discard, in the log, once the store took it (a result it
 * fenced out is logged as discarded instead): the handler's text escaped to
 * one line, and what becomes of the job (the store decides, with the
 * queue's settings as they are then; the job's as claimed say the same
 * unless they changed since).
 */
void tq__log_end(tq_worker *w, const pending_ack *p)
{
    char *text = tq_text_printable(p->error ? p->error : "");
    char then[64], d[32];
    if (p->ack.kind == TQ__ACK_DISCARD)
        tq__worker_log(w, TQ_LOG_INFO, "job %lld attempt %d discarded: %.300s; dead",
                       (long long)p->ack.id, p->attempt, text ? text : "(out of memory)");
    if (p->ack.kind != TQ__ACK_FAIL)
        goto done;
    if (p->attempt >= p->max_attempts)
        snprintf(then, sizeof then, "dead, no attempts left");
    else
        snprintf(then, sizeof then, "retry in %s",
                 tq_duration_format(d, sizeof d, p->ack.delay_us));
    tq__worker_log(w, TQ_LOG_INFO, "job %lld attempt %d of %d failed: %.300s; %s",
                   (long long)p->ack.id, p->attempt, p->max_attempts,
                   text ? text : "(out of memory)", then);
done:
    free(text);
}

/* The pending ack just added (a failure or a discard) will be logged as
 * the store takes it. */
static void log_when_taken(tq_worker *w, const outcome *o)
{
    pending_ack *p = &w->acks.v[w->acks.n - 1];
    p->attempt = o->job.attempt;
    p->max_attempts = o->max_attempts;
}

/* A run whose handler said how its job ends: snoozed (back to ready
 * later, the attempt given back), unless the job snoozed as often as its
 * queue allows, which makes this one a failure; or discarded (dead). */
static int said(tq_worker *w, outcome *o)
{
    const tq_queue_info *q = &w->qinfo[o->job.qi];
    char d[32], why[200];
    if (o->word == TQ__CTL_DISCARD) {
        const char *text = o->error && *o->error ? o->error : "discarded by its handler";
        int rc = add_ack(w, &o->job, TQ__ACK_DISCARD, text);
        if (!rc)
            log_when_taken(w, o);
        return rc;
    }
    if (o->snoozes >= q->max_snoozes) {
        tq__ctl_snooze_limit(why, sizeof why, o->snoozes, q->name);
        outcome f = *o;
        f.word = 0;
        f.ok = 0;
        f.error = why;
        return tq__finish(w, &f);
    }
    int rc = add_ack(w, &o->job, TQ__ACK_SNOOZE, NULL);
    if (rc)
        return rc;
    w->acks.v[w->acks.n - 1].ack.delay_us = o->snooze_us;
    if (w->log_jobs)
        tq__worker_log(w, TQ_LOG_DEBUG,
                       "job %lld attempt %d snoozed for %s (snooze %d of %d)",
                       (long long)o->job.id, o->job.attempt,
                       tq_duration_format(d, sizeof d, o->snooze_us), o->snoozes + 1,
                       q->max_snoozes);
    return 0;
}

/* Turns a finished run into a pending ack. */
int tq__finish(tq_worker *w, outcome *o)
{
    char d[32];
    int rc;
    int64_t ran = o->ran_us > 0 ? o->ran_us : 1;
    if (o->job.started) /* a run that never started says nothing of jobs */
        w->pace.avg_run_us =
            w->pace.avg_run_us ? (w->pace.avg_run_us * 7 + ran) / 8 : ran;
    if (o->lost) {
        /* Someone else holds the job now (or it was cancelled): its result
         * must not be recorded. The fence would refuse it anyway. */
        w->counters.lost++;
        tq__worker_log(w, TQ_LOG_WARN, "job %lld: lease was lost; result discarded",
                       (long long)o->job.id);
        return 0;
    }
    /* A handler that finished its job when told to stop (it trapped the
     * signal and exited 0) did the job: done, not run again. */
    if (o->ok && !o->word) {
        if (w->log_jobs)
            tq__worker_log(w, TQ_LOG_DEBUG, "job %lld attempt %d done in %s",
                           (long long)o->job.id, o->job.attempt,
                           tq_duration_format(d, sizeof d, ran));
        if ((rc = add_ack(w, &o->job, TQ__ACK_DONE, NULL)))
            return rc;
        if (o->has_output) { /* the ack owns it now */
            pending_ack *p = &w->acks.v[w->acks.n - 1];
            p->output = o->output;
            p->ack.output = o->output ? o->output : "";
            p->ack.output_len = o->output_len;
            o->output = NULL;
            w->acks.output_pending += o->output_len;
        }
        return 0;
    }
    if (o->release) {
        if (w->log_jobs && o->job.started)
            tq__worker_log(w, TQ_LOG_DEBUG,
                           "job %lld attempt %d stopped after %s: back to ready, unspent",
                           (long long)o->job.id, o->job.attempt,
                           tq_duration_format(d, sizeof d, ran));
        return add_ack(w, &o->job, TQ__ACK_RELEASE, NULL);
    }
    if (o->word)
        return said(w, o);
    if ((rc = add_ack(w, &o->job, TQ__ACK_FAIL, o->error)))
        return rc;
    log_when_taken(w, o);
    return 0;
}

/* The progress a handler last reported, as a pending ack (fenced
 * like any: a handler whose job was taken back changes nothing). It
 * carries no start: the store records that through the run's own acks. */
int tq__progress_ack(tq_worker *w, const ack_of *j, int pct, const char *text)
{
    /* One pending progress per run: while the store cannot be reached,
     * the newest replaces the last instead of piling up. */
    for (size_t i = 0; i < w->acks.n; i++) {
        pending_ack *p = &w->acks.v[i];
        if (p->ack.kind != TQ__ACK_PROGRESS || p->ack.id != j->id ||
            p->ack.claim != j->claim)
            continue;
        char *clean = text ? tq__utf8_clean(text) : NULL;
        if (text && !clean)
            return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
        free(p->error);
        p->error = clean;
        p->ack.error = clean;
        p->ack.progress = pct;
        return 0;
    }
    int rc = add_ack(w, j, TQ__ACK_PROGRESS, text);
    if (!rc)
        w->acks.v[w->acks.n - 1].ack.progress = pct;
    return rc;
}

/* A slot's last progress, as progress_ack queues it. */
int tq__queue_progress(tq_worker *w, slot *s)
{
    ack_of j = {s->job.id, s->job.claim, 0, s->job.attempts, s->qi};
    int rc = tq__progress_ack(w, &j, s->progress, s->progress_text);
    if (!rc) {
        s->progress_dirty = 0;
        s->progress_at = tq__mono_us();
    }
    return rc;
}

/* Queues the progress of running handlers that may be written now (in
 * callback mode the threads report it under mu); *next_us: when the next
 * one may (0: none waits). */
int tq__send_progress(tq_worker *w, int64_t now, int64_t *next_us)
{
    int rc = 0;
    *next_us = 0;
    if (!w->acks.progress_said) /* the usual pass: no handler reported any */
        return 0;
    w->run->lock(w);
    w->acks.progress_said = 0;
    for (int i = 0; !rc && i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING || !s->progress_dirty || s->lost)
            continue;
        const int64_t due = s->progress_at ? s->progress_at + PROGRESS_EVERY_US : 0;
        if (due > now) {
            if (!*next_us || due < *next_us)
                *next_us = due;
            w->acks.progress_said = 1; /* still to write */
            continue;
        }
        rc = tq__queue_progress(w, s);
    }
    if (rc)
        w->acks.progress_said = 1;
    w->run->unlock(w);
    return rc;
}
