/*
 * create.c - a worker pool's making and unmaking: tq_worker_new checks the
 * options, allocates the parts, reads the queues' settings, starts the
 * runner (w->run) and registers the worker's name; tq_worker_free undoes
 * it all, whatever state the worker was left in. Also the small public
 * calls on the handle (tq_worker_name, tq_worker_counters_get,
 * tq_worker_stop) and the log every part writes to (tq__worker_log).
 * Called by tq_worker_* users: `tq work`, `tq bench`, embedding programs.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Stopped workers are forgotten after this by default (forget_stopped),
 * and at most after this (tq_worker_prune's bound). */
#define FORGET_STOPPED_US (86400LL * 1000000)
#define FORGET_MAX_US     (3650LL * 86400 * 1000000)

/* A line for the options' log sink, if there is one. */
void tq__worker_log(tq_worker *w, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (!w->log)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    w->log(w->log_ud, level, msg);
}

static char **dup_strv(const char *const *v, size_t n)
{
    char **out = calloc(n + 1, sizeof *out);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!(out[i] = tq__strdup(v[i]))) {
            for (size_t j = 0; j < i; j++)
                free(out[j]);
            free(out);
            return NULL;
        }
    return out;
}

static void free_strv(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static int check_worker_name(tq *db, const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > 127)
        return tq__seterr(db, TQ_EINVAL, "worker name must be 1 to 127 bytes");
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return tq__seterr(db, TQ_EINVAL, "worker name has a control character");
    return 0;
}

/* The options, before anything is allocated: TQ_EINVAL and why. path gets
 * the program a command names (CMD_PATH_MAX bytes). */
static int check_opts(tq *db, const tq_worker_opts *o, char *path)
{
    if (!o || (!o->handler == !o->argv))
        return tq__seterr(db, TQ_EINVAL,
                          "a worker needs exactly one of a handler and a command");
    if (o->argv && !o->argv[0])
        return tq__seterr(db, TQ_EINVAL, "the handler command is empty");
    char why[512];
    if (o->argv && tq__command_path(path, CMD_PATH_MAX, o->argv[0], why, sizeof why))
        return tq__seterr(db, TQ_EINVAL, "%s", why);
    if (o->concurrency < 0 || o->concurrency > TQ_CONCURRENCY_MAX)
        return tq__seterr(db, TQ_EINVAL,
                          "concurrency must be between 1 and %d (0 means 1)",
                          TQ_CONCURRENCY_MAX);
    if (o->timeout_us < 0 || o->grace_us < 0 || o->poll_max_us < 0)
        return tq__seterr(db, TQ_EINVAL, "durations cannot be negative");
    const int prefetch = o->version >= 2 ? o->prefetch : 0;
    if (prefetch < -1 || prefetch > TQ_PREFETCH_MAX)
        return tq__seterr(db, TQ_EINVAL, "prefetch must be between -1 and %d",
                          TQ_PREFETCH_MAX);
    if (o->version >= 5 &&
        (o->forget_stopped_us < -1 || o->forget_stopped_us > FORGET_MAX_US))
        return tq__seterr(
            db, TQ_EINVAL,
            "forgetting stopped workers: after 0 to 3650 days, or never (-1)");
    if (o->drain < 0 || o->drain > TQ_DRAIN_DUE)
        return tq__seterr(db, TQ_EINVAL, "drain is 0, TQ_DRAIN_ALL or TQ_DRAIN_DUE");
    if (o->version >= 4 && o->all_queues && o->nqueues)
        return tq__seterr(db, TQ_EINVAL,
                          "a worker serves named queues or all of them, not both");
    for (size_t i = 0; i < o->nqueues; i++)
        if (tq_name_check(o->queues[i]))
            return tq__seterr(db, TQ_EINVAL,
                              "invalid queue name '%.80s': use 1 to 64 letters, "
                              "digits, '_', '.' or '-'",
                              o->queues[i]);
    return 0;
}

/* The options as the worker keeps them, the defaults filled in; nothing
 * is allocated yet but the handle, and nothing can fail. */
static void take_options(tq_worker *w, tq *db, const tq_worker_opts *o)
{
    w->run = o->argv ? &tq__runner_command : &tq__runner_callback;
    w->loop.wake[0] = w->loop.wake[1] = -1;
    w->cmd.reaper.fd = -1;
    /* The callback runner's lock, made in either mode: free destroys it. */
    pthread_mutex_init(&w->cb.mu, NULL);
    pthread_cond_init(&w->cb.cv, NULL);
    w->db = db;
    w->concurrency = o->concurrency ? o->concurrency : 1;
    w->drain = o->drain;
    w->log_jobs = o->version >= 3 ? o->log_jobs : 0;
    w->all_queues = o->version >= 4 && o->all_queues;
    w->forget_stopped_us = o->version < 5 || o->forget_stopped_us == 0
                               ? FORGET_STOPPED_US
                               : o->forget_stopped_us;
    w->timeout_us = o->timeout_us;
    w->grace_us = o->grace_us ? o->grace_us : 10000000;
    w->poll_max_us = o->poll_max_us ? o->poll_max_us : 500000;
    w->cb.handler = o->handler;
    w->cb.handler_ud = o->handler_ud;
    w->log = o->log;
    w->log_ud = o->log_ud;
    w->cb.low_water = 1;
    w->live.beat_lease_us = INT64_MAX;
}

/* The parts' memory: the copies of the name, the queues and the command
 * (path: the program it names), the settings, the slots and the held
 * ring. TQ_ENOMEM. */
static int allocate(tq_worker *w, const tq_worker_opts *o, const char *name,
                    const char *path)
{
    static const char *const default_queue[] = {"default"};
    const int prefetch = o->version >= 2 ? o->prefetch : 0;
    const char *const *queues = o->nqueues ? o->queues : default_queue;
    /* Every queue: none yet, the first settings' read finds them. */
    size_t nqueues = w->all_queues ? 0 : o->nqueues ? o->nqueues : 1;
    w->nqueues = nqueues;
    w->name = tq__strdup(name);
    w->queues = dup_strv(queues, nqueues);
    w->qinfo = calloc(nqueues + 1, sizeof *w->qinfo);
    w->settings.until = calloc(nqueues + 1, sizeof *w->settings.until);
    w->slots = calloc((size_t)w->concurrency, sizeof *w->slots);
    w->held.prefetch = prefetch == 0  ? TQ_PREFETCH_DEFAULT
                       : prefetch < 0 ? 0
                                      : (size_t)prefetch;
    w->held.cap = w->held.prefetch + (size_t)w->concurrency;
    w->pace.limited_cap = (size_t)w->concurrency; /* then as found */
    w->held.ring = calloc(w->held.cap, sizeof *w->held.ring);
    w->held.shorts = calloc(w->held.cap, sizeof *w->held.shorts);
    if (o->argv) {
        size_t n = 0;
        while (o->argv[n])
            n++;
        w->cmd.argv = dup_strv(o->argv, n);
        memcpy(w->cmd.path, path, sizeof w->cmd.path);
    }
    if (!w->name || !w->queues || !w->qinfo || !w->settings.until || !w->slots ||
        !w->held.ring || !w->held.shorts || (o->argv && !w->cmd.argv))
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    for (int i = 0; i < w->concurrency; i++) {
        w->slots[i].owner = w;
        w->slots[i].child.in_fd = w->slots[i].child.err_fd = w->slots[i].child.ctl_fd =
            w->slots[i].child.out_fd = w->slots[i].child.pidfd = -1;
    }
    return 0;
}

/* Whether a listen may wait on a new connection now (PostgreSQL's
 * tq_listen: up to its connect timeout, this thread blocked): not while
 * jobs run or are held here, whose leases need this thread's beats. */
static int listen_may_wait(tq_worker *w)
{
    w->run->lock(w);
    const int busy = tq__running_count_locked(w) > 0 || w->held.n > 0;
    w->run->unlock(w);
    return !busy;
}

/* Listens for new jobs, if the engine can; w->loop.can_listen says whether
 * it does (a worker that cannot polls, and is never idle: idle.c). Called
 * at the start, after each reconnection, and while it could not listen:
 * when due (listen_again_at; take_notifications). With jobs running or
 * held it waits until they are done; a connection for it that could not
 * be made (the server may take connections later than the pooler) is
 * tried again every LISTEN_AGAIN_US, said once. */
void tq__listen(tq_worker *w)
{
    tq *db = w->db;
    w->loop.can_listen = 0;
    w->loop.listen_again_at = 0;
    if (!(db->engine->caps & TQ__CAP_NOTIFY))
        return;
    if (!listen_may_wait(w)) {
        w->loop.listen_again_at = tq__mono_us();
        return;
    }
    int rc = db->engine->listen(db);
    if (rc) {
        const int retry = rc == TQ_ECONN || rc == TQ_EBUSY;
        if (retry)
            w->loop.listen_again_at = tq__mono_us() + LISTEN_AGAIN_US;
        tq__worker_log(w, w->loop.listen_failed && retry ? TQ_LOG_DEBUG : TQ_LOG_WARN,
                       "cannot listen for new jobs, polling only%s: %s",
                       retry ? " until it can" : "", tq_errmsg(db));
        w->loop.listen_failed = 1;
        tq__clearerr(db);
        return;
    }
    if (w->loop.listen_failed)
        tq__worker_log(w, TQ_LOG_INFO, "listening for new jobs again");
    w->loop.listen_failed = 0;
    w->loop.can_listen = 1;
}

/* Stopped workers' registrations older than forget_stopped_us go, as
 * tq_worker_prune would delete them: a worker that cannot (a PostgreSQL
 * worker role may not delete) carries on, saying so only in a debug line. */
static void forget_stopped(tq_worker *w)
{
    int64_t n = 0;
    if (w->forget_stopped_us < 0)
        return;
    if (w->db->engine->worker_prune(w->db, w->forget_stopped_us, &n))
        tq__worker_log(w, TQ_LOG_DEBUG, "stopped workers not forgotten: %s",
                       tq_errmsg(w->db));
    else if (n)
        tq__worker_log(w, TQ_LOG_DEBUG, "forgot %lld stopped worker(s)", (long long)n);
    tq__clearerr(w->db);
}

/* The worker meets the system and the store: its wake pipe, the queues'
 * settings, the bound on its waits, the runner, its name registered on
 * host, and new jobs listened for. */
static int start(tq_worker *w, const char *host)
{
    tq *db = w->db;
    int rc;
    if (pipe2(w->loop.wake, O_CLOEXEC | O_NONBLOCK))
        return tq__seterr(db, TQ_ESYS, "pipe: %s", strerror(errno));
    int64_t asked;
    if ((rc = tq__refresh_queues(w, &asked)))
        return rc;
    tq__settings_seen(w, SIZE_MAX, asked, tq__mono_us()); /* nothing is held yet */
    /* Every later wait for the store is bounded, registering included. */
    if ((rc = tq__set_wait_limit(w)))
        return rc;
    /* Before the registration, which names the reaper. */
    if ((rc = w->run->start(w)))
        return rc;
    if ((rc = tq__register_name(w, host)))
        return rc;
    forget_stopped(w);
    tq__listen(w);
    return 0;
}

int tq_worker_new(tq_worker **out, tq *db, const tq_worker_opts *o)
{
    char host[100] = "localhost", name[128], path[CMD_PATH_MAX] = "";
    int rc;

    if (!out)
        return db ? tq__seterr(db, TQ_EINVAL, "no place for the worker") : TQ_EINVAL;
    *out = NULL;
    if ((rc = tq__usable(db)) || (rc = check_opts(db, o, path)))
        return rc;
    if (db->borrowed)
        return tq__seterr(db, TQ_EINVAL,
                          "a worker needs a handle with a connection of its own, not "
                          "the caller's (tq_open_opts.conn)");
    gethostname(host, sizeof host - 1);
    if (o->name)
        snprintf(name, sizeof name, "%s", o->name);
    else
        tq_worker_default_name(name, sizeof name);
    if ((rc = check_worker_name(db, o->name ? o->name : name)))
        return rc;

    tq_worker *w = calloc(1, sizeof *w);
    if (!w)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    take_options(w, db, o);
    if ((rc = allocate(w, o, name, path)) || (rc = start(w, host)))
        goto fail;
    *out = w;
    return 0;
fail:
    tq_worker_free(w);
    return rc;
}

void tq_worker_free(tq_worker *w)
{
    if (!w)
        return;
    w->run->join(w);
    if (w->name && w->db && w->db->conn && !w->name_taken)
        w->db->engine->worker_stop(w->db, &w->me);
    if (w->db && w->db->conn && (w->db->engine->caps & TQ__CAP_NETWORK)) {
        /* The handle is the caller's again: no limit, as it came. */
        char keep[sizeof w->db->errmsg];
        memcpy(keep, w->db->errmsg, sizeof keep);
        w->db->engine->set_wait_limit(w->db, 0);
        memcpy(w->db->errmsg, keep, sizeof keep);
    }
    if (w->slots)
        for (int i = 0; i < w->concurrency; i++)
            tq__free_slot(&w->slots[i]);
    for (size_t i = 0; i < w->acks.n; i++) {
        free(w->acks.v[i].error);
        free(w->acks.v[i].output);
    }
    for (size_t i = 0; i < w->held.n; i++)
        tq__job_clear(&w->held.ring[(w->held.head + i) % w->held.cap].job);
    free(w->held.ring);
    for (size_t i = 0; i < w->held.nshort; i++)
        tq__job_clear(&w->held.shorts[i].job);
    free(w->held.shorts);
    free(w->acks.v);
    free(w->slots);
    free(w->qinfo);
    free(w->settings.until);
    tq__retain_free(w);
    free_strv(w->queues);
    free_strv(w->cmd.argv);
    free(w->name);
    w->run->free(w);
    if (w->loop.wake[0] >= 0)
        close(w->loop.wake[0]);
    if (w->loop.wake[1] >= 0)
        close(w->loop.wake[1]);
    pthread_mutex_destroy(&w->cb.mu);
    pthread_cond_destroy(&w->cb.cv);
    free(w);
}

const char *tq_worker_name(const tq_worker *w)
{
    return w ? w->name : NULL;
}

void tq_worker_counters_get(tq_worker_counters *out, const tq_worker *w)
{
    if (!out)
        return;
    if (!w) {
        *out = (tq_worker_counters){0};
        return;
    }
    out->claimed = w->counters.claimed;
    out->done = w->counters.done;
    out->failed = w->counters.failed;
    out->lost = w->counters.lost;
    out->released = w->counters.released;
    out->retried = w->counters.retried;
    out->dead = w->counters.dead;
    out->discarded = w->counters.discarded;
    out->snoozed = w->counters.snoozed;
    out->busy_retries = w->db->busy_retries;
}

void tq_worker_stop(tq_worker *w)
{
    if (!w)
        return;
    int saved = errno;
    if (w->loop.stop_asked) /* the worker's own stops (start_failed, ...) do not count */
        w->loop.stop_now = 1;
    w->loop.stop_asked = 1;
    w->loop.stop_requested = 1;
    char b = 's';
    ssize_t r = write(w->loop.wake[1], &b, 1);
    (void)r;
    errno = saved;
}
