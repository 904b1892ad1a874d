/*
 * callback.c - the callback runner (tq__runner_callback): a C handler run
 * on the pool's threads, one a slot. Each thread takes held jobs itself
 * (pop_startable) and hands back results under the lock, so a stream of
 * short jobs costs no thread switch per job; the loop collects them
 * (collect_results). Also tq_handler_*, which a handler calls from its
 * thread about its job. Called through w->run by the loop and the other
 * parts, and by handlers.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* With mu held: one byte on the self-pipe, unless one is on its way. */
static void wake_loop_locked(tq_worker *w)
{
    if (w->cb.wake_pending)
        return;
    w->cb.wake_pending = 1;
    char b = 'j';
    while (write(w->loop.wake[1], &b, 1) < 0 && errno == EINTR)
        ;
}

/* With mu held. On no memory the result is dropped: the job comes back
 * when its lease expires. */
static void push_result(tq_worker *w, slot *s, int rc, const char *err, int64_t ran)
{
    if (w->cb.nresults == w->cb.cap_results) {
        size_t cap = w->cb.cap_results ? w->cb.cap_results * 2 : 64;
        cb_result *v = realloc(w->cb.results, cap * sizeof *v);
        if (!v)
            return;
        w->cb.results = v;
        w->cb.cap_results = cap;
    }
    cb_result *r = &w->cb.results[w->cb.nresults++];
    r->id = s->job.id;
    r->claim = s->job.claim;
    r->attempt = s->job.attempts;
    r->max_attempts = s->job.max_attempts;
    r->start_recorded = s->start_recorded;
    r->qi = s->qi;
    r->rc = rc;
    r->lost = s->lost;
    r->ran_us = ran;
    r->started = s->started;
    r->snoozes = s->job.snoozes;
    r->word = s->word;
    r->snooze_us = s->snooze_us;
    if (s->word == TQ__CTL_DISCARD) { /* its reason is the error */
        r->error = s->word_text;
        s->word_text = NULL;
    } else {
        r->error = err[0] ? tq__strdup(err) : NULL;
    }
    r->output = s->output;
    r->output_len = s->output_len;
    s->output = NULL;
    r->progress = s->progress_dirty ? s->progress : -1;
    r->progress_text = s->progress_dirty ? tq__strdup(s->progress_text) : NULL;
}

/* The slot whose callback this thread runs, for tq_handler_*. */
static _Thread_local slot *current_slot;

/* The running slot of job, when called from its callback; else NULL. */
static slot *slot_of(const tq_job *job)
{
    slot *s = current_slot;
    return s && job && &s->job == job ? s : NULL;
}

int64_t tq_handler_deadline(const tq_job *job)
{
    const slot *s = slot_of(job);
    return s ? s->deadline_at : 0;
}

int tq_handler_progress(const tq_job *job, int pct, const char *text)
{
    slot *s = slot_of(job);
    if (!s || pct < 0 || pct > 100)
        return TQ_EINVAL;
    const size_t n = text ? tq__utf8_cut(text, strlen(text), TQ__PROGRESS_TEXT_MAX) : 0;
    pthread_mutex_lock(&s->owner->cb.mu);
    s->progress = pct;
    if (n)
        memcpy(s->progress_text, text, n);
    s->progress_text[n] = '\0';
    s->progress_dirty = 1;
    s->owner->acks.progress_said = 1;
    pthread_mutex_unlock(&s->owner->cb.mu);
    return 0;
}

int tq_handler_result(const tq_job *job, const void *data, size_t len)
{
    slot *s = slot_of(job);
    if (!s || (!data && len))
        return TQ_EINVAL;
    if (len > TQ_RESULT_MAX) {
        free(s->output);
        s->output = NULL;
        return TQ_ETOOBIG;
    }
    void *copy = tq__memdup(data ? data : "", len, 1);
    if (!copy)
        return TQ_ENOMEM;
    free(s->output); /* only this thread touches it until push_result */
    s->output = copy;
    s->output_len = len;
    return 0;
}

int tq_handler_snooze(const tq_job *job, int64_t delay_us)
{
    slot *s = slot_of(job);
    if (!s || delay_us < 0 || delay_us > TQ__SNOOZE_MAX_US)
        return TQ_EINVAL;
    s->word = TQ__CTL_SNOOZE; /* only this thread reads it, in push_result */
    s->snooze_us = delay_us;
    return 0;
}

int tq_handler_discard(const tq_job *job, const char *reason)
{
    slot *s = slot_of(job);
    if (!s)
        return TQ_EINVAL;
    char *text = tq__strdup(reason && *reason ? reason : "discarded by its handler");
    if (!text)
        return TQ_ENOMEM;
    free(s->word_text);
    s->word_text = text;
    s->word = TQ__CTL_DISCARD;
    return 0;
}

static void *thread_main(void *arg)
{
    slot *s = arg;
    tq_worker *w = s->owner;
    char err[512];
    pthread_mutex_lock(&w->cb.mu);
    for (;;) {
        held_job h;
        while (!w->cb.threads_quit && !tq__pop_startable(w, &h))
            pthread_cond_wait(&w->cb.cv, &w->cb.mu);
        if (w->cb.threads_quit)
            break;
        s->job = h.job;
        s->qi = h.qi;
        s->lost = 0;
        s->state = SLOT_RUNNING;
        s->started = tq__mono_us();
        s->timeout_us = h.timeout_us;
        s->deadline_at = h.timeout_us ? tq__now_us() + h.timeout_us : 0;
        s->word = 0;
        s->progress_dirty = 0;
        s->progress_at = 0;
        free(s->output);
        s->output = NULL;
        tq__mark_start(w, s);
        if (w->held.n < w->cb.low_water)
            wake_loop_locked(w); /* time to claim more */
        pthread_mutex_unlock(&w->cb.mu);

        err[0] = '\0';
        current_slot = s;
        int rc = w->cb.handler(w->cb.handler_ud, &s->job, err, sizeof err);
        current_slot = NULL;
        int64_t ran = tq__mono_us() - s->started;

        pthread_mutex_lock(&w->cb.mu);
        push_result(w, s, rc, err, ran);
        if (!s->start_recorded)
            w->starts.unrecorded--; /* its acknowledgement records the start */
        tq__job_clear(&s->job);
        s->state = SLOT_FREE;
        if (w->held.n == 0 || w->cb.nresults >= ACK_BATCH)
            wake_loop_locked(w);
    }
    pthread_mutex_unlock(&w->cb.mu);
    return NULL;
}

/* One thread a slot (tq_worker_new): each waits for a held job it may
 * start. */
static int start_threads(tq_worker *w)
{
    w->cb.threads = calloc((size_t)w->concurrency, sizeof *w->cb.threads);
    if (!w->cb.threads)
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    for (int i = 0; i < w->concurrency; i++) {
        int e = pthread_create(&w->cb.threads[i], NULL, thread_main, &w->slots[i]);
        if (e)
            return tq__seterr(w->db, TQ_ESYS, "cannot start a thread: %s", strerror(e));
        w->cb.nthreads++;
    }
    return 0;
}

/* tq_worker_free: each thread ends once its callback has returned, and is
 * joined. */
static void stop_threads(tq_worker *w)
{
    if (!w->cb.nthreads) /* none started: tq_worker_new failed first */
        return;
    pthread_mutex_lock(&w->cb.mu);
    w->cb.threads_quit = 1;
    pthread_cond_broadcast(&w->cb.cv);
    pthread_mutex_unlock(&w->cb.mu);
    for (int i = 0; i < w->cb.nthreads; i++)
        pthread_join(w->cb.threads[i], NULL);
    w->cb.nthreads = 0;
}

/* Callback mode: the results the threads handed back. */
static int collect_results(tq_worker *w)
{
    pthread_mutex_lock(&w->cb.mu);
    cb_result *v = w->cb.results;
    size_t n = w->cb.nresults, cap = w->cb.cap_results;
    w->cb.results = w->cb.spare;
    w->cb.cap_results = w->cb.cap_spare;
    w->cb.nresults = 0;
    w->cb.wake_pending = 0;
    pthread_mutex_unlock(&w->cb.mu);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char msg[64];
        const char *error = v[i].error;
        if (v[i].rc && !error) {
            snprintf(msg, sizeof msg, "handler returned %d", v[i].rc);
            error = msg;
        }
        outcome o = {.job = {v[i].id, v[i].claim, v[i].started, v[i].attempt, v[i].qi},
                     .max_attempts = v[i].max_attempts,
                     .snoozes = v[i].snoozes,
                     .ran_us = v[i].ran_us,
                     .lost = v[i].lost,
                     .ok = v[i].rc == 0,
                     .error = error,
                     .word = v[i].word,
                     .snooze_us = v[i].snooze_us,
                     .has_output = v[i].output != NULL,
                     .output = v[i].output,
                     .output_len = v[i].output_len};
        /* Its last progress stays with a job that ends done or discarded. */
        if (!rc && v[i].progress >= 0 && !v[i].lost &&
            ((o.ok && !o.word) || o.word == TQ__CTL_DISCARD)) {
            ack_of j = {v[i].id, v[i].claim, 0, v[i].attempt, v[i].qi};
            rc = tq__progress_ack(w, &j, v[i].progress, v[i].progress_text);
        }
        if (!rc)
            rc = tq__finish(w, &o);
        free(o.output); /* not taken: the run did not end done */
        free(v[i].error);
        free(v[i].progress_text);
    }
    w->cb.spare = v; /* only the loop touches the spare */
    w->cb.cap_spare = cap;
    return rc;
}

/* A second stop: callbacks cannot be cut short: their grace stands. */
static void wait_for_callbacks(tq_worker *w, int64_t now)
{
    (void)now;
    if (tq__running_count(w))
        tq__worker_log(
            w, TQ_LOG_WARN,
            "stopping now: callback handlers cannot be killed; waiting for them");
}

/* Callback slots have no deadlines, and their threads own them (reading
 * them from the loop would race); their results come back without a wake:
 * the loop looks for them every ACK_DELAY_US. */
static int64_t results_due(tq_worker *w, int64_t now)
{
    (void)w;
    (void)now;
    return ACK_DELAY_US;
}

/* The results not collected (the worker freed mid-run), and the threads'
 * handles. */
static void free_results(tq_worker *w)
{
    for (size_t i = 0; i < w->cb.nresults; i++) {
        free(w->cb.results[i].error);
        free(w->cb.results[i].progress_text);
        free(w->cb.results[i].output);
    }
    free(w->cb.results);
    free(w->cb.spare);
    free(w->cb.threads);
}

static void lock(tq_worker *w)
{
    pthread_mutex_lock(&w->cb.mu);
}

static void unlock(tq_worker *w)
{
    pthread_mutex_unlock(&w->cb.mu);
}

/* With mu held: the threads waiting for a startable held job look again. */
static void signal_threads(tq_worker *w)
{
    pthread_cond_broadcast(&w->cb.cv);
}

/* The threads take held jobs themselves (thread_main). */
static int threads_start_them(tq_worker *w)
{
    (void)w;
    return 0;
}

/* A callback cannot be cut short: its result is discarded when it returns
 * (finish). */
static void let_run(tq_worker *w, slot *s)
{
    (void)w;
    (void)s;
}

/* Callbacks have no timeouts, and no signal ends them: a stop's grace
 * stands until they return. */
static void no_deadlines(tq_worker *w, int64_t now, int64_t stop_at)
{
    (void)w;
    (void)now;
    (void)stop_at;
}

/* Leaving on an error: callback handlers cannot be killed; their results
 * come back by lease. */
static int leave_running(tq_worker *w)
{
    (void)w;
    return 0;
}

static void no_upkeep(tq_worker *w)
{
    (void)w;
}

/* The threads wake the loop through its self-pipe: nothing else to poll. */
static nfds_t no_descriptors(tq_worker *w, struct pollfd *fds, int64_t *timeout_us)
{
    (void)w;
    (void)fds;
    (void)timeout_us;
    return 0;
}

const tq__runner tq__runner_callback = {
    .start = start_threads,
    .join = stop_threads,
    .free = free_results,
    .lock = lock,
    .unlock = unlock,
    .held_changed = signal_threads,
    .wake_loop = wake_loop_locked,
    .start_held = threads_start_them,
    .collect = collect_results,
    .lost = let_run,
    .enforce = no_deadlines,
    .stop_now = wait_for_callbacks,
    .abandon = leave_running,
    .upkeep = no_upkeep,
    .watch = no_descriptors,
    .due_in = results_due,
};
