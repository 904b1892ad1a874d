/*
 * worker.c - the worker pool: claims jobs, runs them (a command per job, or
 * a C callback on the pool's threads), acknowledges how they ended, keeps
 * their leases alive, and rescues jobs that dead workers left behind.
 * Called by tq_worker_* users: `tq work`, `tq bench`, embedding programs.
 *
 * One thread owns the store connection and runs a poll loop; that is the
 * "one writer per process" of DESIGN.md. Each pass of the loop:
 *   1. collects finished jobs into a list of pending acknowledgements;
 *   2. sends those acks and claims as many jobs as there are free slots in
 *      ONE engine exchange (one transaction), so a busy worker pays one
 *      commit per batch, not two per job;
 *   3. heartbeats running jobs (fenced) and its own registration, rescues
 *      expired leases now and then;
 *   4. sleeps in poll() until a child writes, reads, exits, a callback
 *      finishes, a stop is asked for, or the next timer is due. When idle
 *      it backs off (1 ms doubling to poll_max) instead of spinning.
 * A crash between 1 and 2 loses only unsent acks; those jobs come back when
 * their lease expires, which is the at-least-once promise.
 */
#define _GNU_SOURCE
#include "engine/engine.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RESCUE_EVERY_US    1000000LL
#define REFRESH_EVERY_US   1000000LL
#define KILL_AFTER_TERM_US 1000000LL /* on stop: SIGTERM, then SIGKILL */

typedef enum slot_state {
    SLOT_FREE = 0,
    SLOT_RUNNING,  /* child running or callback queued/running */
    SLOT_FINISHED, /* callback returned; result waiting for the loop */
} slot_state;

typedef struct slot {
    slot_state state;
    tq_job job;
    size_t qi;        /* index of the job's queue */
    int64_t deadline; /* monotonic; 0: no timeout */
    int64_t kill_at;  /* monotonic; SIGKILL the group then; 0: not set */
    int timed_out;    /* the timeout fired */
    int lost;         /* a heartbeat found the lease gone */
    int release;      /* killed by a stop: give the job back unspent */
    tq__child child;  /* command mode */
    int cb_rc;        /* callback mode: handler's return */
    char cb_err[512];
} slot;

typedef struct pending_ack {
    tq__ack ack;
    char *error; /* owned; ack.error points here */
} pending_ack;

struct tq_worker {
    tq *db;
    char *name;
    char **queues;
    size_t nqueues;
    tq_queue_info *qinfo;
    char **argv;
    tq_handler_fn handler;
    void *handler_ud;
    void (*log)(void *ud, int level, const char *msg);
    void *log_ud;
    int concurrency, drain;
    int64_t timeout_us, grace_us, poll_max_us;
    int64_t lease_us; /* the longest lease of its queues: its own liveness */

    slot *slots;
    pending_ack *acks;
    size_t nacks, cap_acks;
    size_t next_queue; /* round robin start for claims */

    int wake[2]; /* self-pipe: stop requests and finished callbacks */
    volatile sig_atomic_t stop_requested;

    /* Callback mode: a queue of slot indices for the threads, guarded by mu. */
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t *runq;
    size_t runq_head, runq_len;
    int threads_quit;

    /* After TQ_ECONN: reconnecting, with capped exponential backoff. */
    int disconnected;
    int64_t reconnect_at, reconnect_backoff;

    tq_worker_counters counters;
};

static void logf_(tq_worker *w, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void logf_(tq_worker *w, int level, const char *fmt, ...)
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

/* ---- callback threads --------------------------------------------------- */

static void *thread_main(void *arg)
{
    tq_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->threads_quit && w->runq_len == 0)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->runq_len == 0)
            break; /* quitting and nothing left */
        size_t i = w->runq[w->runq_head];
        w->runq_head = (w->runq_head + 1) % (size_t)w->concurrency;
        w->runq_len--;
        slot *s = &w->slots[i];
        pthread_mutex_unlock(&w->mu);

        s->cb_err[0] = '\0';
        int rc = w->handler(w->handler_ud, &s->job, s->cb_err, sizeof s->cb_err);

        pthread_mutex_lock(&w->mu);
        s->cb_rc = rc;
        s->state = SLOT_FINISHED;
        pthread_mutex_unlock(&w->mu);
        char b = 'j';
        while (write(w->wake[1], &b, 1) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int start_threads(tq_worker *w)
{
    w->threads = calloc((size_t)w->concurrency, sizeof *w->threads);
    w->runq = calloc((size_t)w->concurrency, sizeof *w->runq);
    if (!w->threads || !w->runq)
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    for (int i = 0; i < w->concurrency; i++) {
        int e = pthread_create(&w->threads[i], NULL, thread_main, w);
        if (e)
            return tq__seterr(w->db, TQ_ESYS, "cannot start a thread: %s", strerror(e));
        w->nthreads++;
    }
    return 0;
}

static void stop_threads(tq_worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->threads_quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    w->nthreads = 0;
}

/* ---- creation ------------------------------------------------------------ */

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

/* Reads the settings of every queue; an unknown queue gets the defaults
 * (it will be created by its first enqueue). */
static int refresh_queues(tq_worker *w)
{
    for (size_t i = 0; i < w->nqueues; i++) {
        int rc = w->db->engine->queue_get(w->db, w->queues[i], &w->qinfo[i]);
        if (rc == TQ_ENOTFOUND)
            tq__queue_defaults(&w->qinfo[i], w->queues[i]);
        else if (rc)
            return rc;
    }
    return 0;
}

static void free_slot(slot *s)
{
    tq__child_close(&s->child);
    free(s->job.queue);
    free(s->job.payload);
    free(s->job.key);
    free(s->job.worker);
    free(s->job.last_error);
    memset(s, 0, sizeof *s);
    s->child.in_fd = s->child.err_fd = s->child.pidfd = -1;
}

void tq_worker_free(tq_worker *w)
{
    if (!w)
        return;
    if (w->nthreads)
        stop_threads(w);
    if (w->name && w->db && w->db->conn)
        w->db->engine->worker_stop(w->db, w->name);
    if (w->slots)
        for (int i = 0; i < w->concurrency; i++)
            free_slot(&w->slots[i]);
    for (size_t i = 0; i < w->nacks; i++)
        free(w->acks[i].error);
    free(w->acks);
    free(w->slots);
    free(w->runq);
    free(w->threads);
    free(w->qinfo);
    free_strv(w->queues);
    free_strv(w->argv);
    free(w->name);
    if (w->wake[0] >= 0)
        close(w->wake[0]);
    if (w->wake[1] >= 0)
        close(w->wake[1]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* Whether the registered holder of a name ran on this host and its process
 * no longer exists. (A reused pid makes us wait for the lease instead.) */
static int holder_is_dead(const tq_worker_info *h, const char *host)
{
    if (strcmp(h->host, host) != 0 || h->pid <= 0 || h->pid == getpid())
        return 0;
    return kill((pid_t)h->pid, 0) == -1 && errno == ESRCH;
}

int tq_worker_new(tq_worker **out, tq *db, const tq_worker_opts *o)
{
    static const char *const default_queue[] = {"default"};
    char host[100] = "localhost", name[128];
    int rc;

    *out = NULL;
    tq__clearerr(db);
    if (!o || (!o->handler == !o->argv))
        return tq__seterr(db, TQ_EINVAL,
                          "a worker needs exactly one of a handler and a command");
    if (o->argv && !o->argv[0])
        return tq__seterr(db, TQ_EINVAL, "the handler command is empty");
    if (o->concurrency < 0 || o->concurrency > 1024)
        return tq__seterr(db, TQ_EINVAL, "concurrency must be between 1 and 1024");
    if (o->timeout_us < 0 || o->grace_us < 0 || o->poll_max_us < 0)
        return tq__seterr(db, TQ_EINVAL, "durations cannot be negative");
    const char *const *queues = o->nqueues ? o->queues : default_queue;
    size_t nqueues = o->nqueues ? o->nqueues : 1;
    for (size_t i = 0; i < nqueues; i++)
        if (tq_name_check(queues[i]))
            return tq__seterr(db, TQ_EINVAL,
                              "invalid queue name '%.80s': use 1 to 64 letters, "
                              "digits, '_', '.' or '-'",
                              queues[i]);
    gethostname(host, sizeof host - 1);
    if (o->name)
        snprintf(name, sizeof name, "%s", o->name);
    else
        snprintf(name, sizeof name, "%s:%ld", host, (long)getpid());
    if ((rc = check_worker_name(db, o->name ? o->name : name)))
        return rc;

    tq_worker *w = calloc(1, sizeof *w);
    if (!w)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    w->wake[0] = w->wake[1] = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->db = db;
    w->concurrency = o->concurrency ? o->concurrency : 1;
    w->drain = o->drain;
    w->timeout_us = o->timeout_us;
    w->grace_us = o->grace_us ? o->grace_us : 10000000;
    w->poll_max_us = o->poll_max_us ? o->poll_max_us : 500000;
    w->handler = o->handler;
    w->handler_ud = o->handler_ud;
    w->log = o->log;
    w->log_ud = o->log_ud;
    w->nqueues = nqueues;
    w->name = tq__strdup(name);
    w->queues = dup_strv(queues, nqueues);
    w->qinfo = calloc(nqueues, sizeof *w->qinfo);
    w->slots = calloc((size_t)w->concurrency, sizeof *w->slots);
    if (o->argv) {
        size_t n = 0;
        while (o->argv[n])
            n++;
        w->argv = dup_strv(o->argv, n);
    }
    if (!w->name || !w->queues || !w->qinfo || !w->slots || (o->argv && !w->argv)) {
        rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < w->concurrency; i++)
        w->slots[i].child.in_fd = w->slots[i].child.err_fd = w->slots[i].child.pidfd = -1;
    if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK)) {
        rc = tq__seterr(db, TQ_ESYS, "pipe: %s", strerror(errno));
        goto fail;
    }
    if ((rc = refresh_queues(w)))
        goto fail;
    w->lease_us = 0;
    for (size_t i = 0; i < nqueues; i++)
        if (w->qinfo[i].lease_us > w->lease_us)
            w->lease_us = w->qinfo[i].lease_us;

    tq_worker_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.name, sizeof info.name, "%s", w->name);
    snprintf(info.host, sizeof info.host, "%s", host);
    info.pid = getpid();
    info.lease_us = w->lease_us;
    tq_worker_info holder;
    memset(&holder, 0, sizeof holder);
    rc = db->engine->worker_register(db, &info, 0, &holder);
    if (rc == TQ_EINUSE && holder_is_dead(&holder, host)) {
        /* kill -9 leaves a fresh heartbeat behind; on the holder's own host
         * we can see that its process is gone and take the name over. */
        logf_(w, TQ_LOG_WARN,
              "worker name held by pid %lld on this host, which is gone: taking over",
              (long long)holder.pid);
        rc = db->engine->worker_register(db, &info, 1, &holder);
    }
    if (rc) {
        free(w->name); /* not ours: do not mark it stopped */
        w->name = NULL;
        goto fail;
    }
    /* Pick up my own unfinished business: whatever this name still holds
     * was interrupted by a crash of the previous holder. */
    int64_t n = 0;
    if ((rc = db->engine->rescue(db, w->name, &n)))
        goto fail;
    if (n)
        logf_(w, TQ_LOG_WARN, "put back %lld job(s) left running under this worker name",
              (long long)n);
    if ((db->engine->caps & TQ__CAP_NOTIFY) && db->engine->listen(db)) {
        logf_(w, TQ_LOG_WARN, "cannot listen for new jobs, polling only: %s",
              tq_errmsg(db));
        tq__clearerr(db);
    }
    if (w->handler && (rc = start_threads(w)))
        goto fail;
    *out = w;
    return 0;
fail:
    tq_worker_free(w);
    return rc;
}

const char *tq_worker_name(const tq_worker *w)
{
    return w->name;
}

void tq_worker_counters_get(tq_worker_counters *out, const tq_worker *w)
{
    *out = w->counters;
    out->busy_retries = w->db->busy_retries;
}

void tq_worker_stop(tq_worker *w)
{
    int saved = errno;
    w->stop_requested = 1;
    char b = 's';
    ssize_t r = write(w->wake[1], &b, 1);
    (void)r;
    errno = saved;
}

/* ---- the loop ------------------------------------------------------------ */

static int add_ack(tq_worker *w, const slot *s, tq__ack_kind kind, const char *error)
{
    if (w->nacks == w->cap_acks) {
        size_t cap = w->cap_acks ? w->cap_acks * 2 : 16;
        pending_ack *v = realloc(w->acks, cap * sizeof *v);
        if (!v)
            return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
        w->acks = v;
        w->cap_acks = cap;
    }
    pending_ack *p = &w->acks[w->nacks];
    memset(p, 0, sizeof *p);
    p->ack.id = s->job.id;
    p->ack.attempt = s->job.attempts;
    p->ack.kind = kind;
    if (kind == TQ__ACK_DONE)
        p->ack.delete_done = !w->qinfo[s->qi].keep_done;
    if (kind == TQ__ACK_FAIL) {
        const tq_queue_info *q = &w->qinfo[s->qi];
        p->ack.delay_us = tq__backoff_us(q->backoff_base_us, q->backoff_cap_us,
                                         s->job.attempts, tq__random());
        if (error && !(p->error = tq__strdup(error)))
            return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
        p->ack.error = p->error;
    }
    w->nacks++;
    return 0;
}

/* Turns a finished slot into a pending ack and frees it. */
static int finish_slot(tq_worker *w, slot *s, int ok, const char *error)
{
    int rc = 0;
    if (s->lost) {
        /* Someone else holds the job now (or it was cancelled): its result
         * must not be recorded. The fence would refuse it anyway. */
        w->counters.lost++;
        logf_(w, TQ_LOG_WARN, "job %lld: lease was lost; result discarded",
              (long long)s->job.id);
    } else if (s->release) {
        rc = add_ack(w, s, TQ__ACK_RELEASE, NULL);
    } else if (ok) {
        rc = add_ack(w, s, TQ__ACK_DONE, NULL);
    } else {
        logf_(w, TQ_LOG_INFO, "job %lld attempt %d failed: %.300s", (long long)s->job.id,
              s->job.attempts, error);
        rc = add_ack(w, s, TQ__ACK_FAIL, error);
    }
    free_slot(s);
    return rc;
}

/* Collects children that exited and callbacks that returned. */
static int collect(tq_worker *w)
{
    char err[TQ__TAIL_MAX + 256];
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        int rc = 0;
        if (s->state == SLOT_RUNNING && w->argv) {
            tq__child_feed(&s->child);
            tq__child_drain(&s->child);
            if (!tq__child_reap(&s->child))
                continue;
            tq__child_drain(&s->child);
            size_t off = 0;
            if (s->timed_out) {
                char d[32];
                off = (size_t)snprintf(err, 64, "timed out after %s, then ",
                                       tq_duration_format(d, sizeof d, w->timeout_us));
            }
            tq__child_describe(&s->child, err + off, sizeof err - off);
            rc = finish_slot(w, s, !s->timed_out && err[0] == '\0', err);
        } else if (w->handler) {
            pthread_mutex_lock(&w->mu);
            int finished = s->state == SLOT_FINISHED;
            pthread_mutex_unlock(&w->mu);
            if (!finished)
                continue;
            if (s->cb_rc && !s->cb_err[0])
                snprintf(s->cb_err, sizeof s->cb_err, "handler returned %d", s->cb_rc);
            rc = finish_slot(w, s, s->cb_rc == 0, s->cb_err);
        }
        if (rc)
            return rc;
    }
    return 0;
}

static int running_count(const tq_worker *w)
{
    int n = 0;
    for (int i = 0; i < w->concurrency; i++)
        n += w->slots[i].state != SLOT_FREE;
    return n;
}

static int start_job(tq_worker *w, size_t qi, tq_job *job)
{
    slot *s = NULL;
    for (int i = 0; i < w->concurrency && !s; i++)
        if (w->slots[i].state == SLOT_FREE)
            s = &w->slots[i];
    if (!s) /* cannot happen: we never claim more than the free slots */
        return tq__seterr(w->db, TQ_EINVAL, "no free slot for a claimed job");
    s->job = *job;
    s->qi = qi;
    s->state = SLOT_RUNNING;
    w->counters.claimed++;
    if (w->argv) {
        char err[256];
        if (w->timeout_us)
            s->deadline = tq__mono_us() + w->timeout_us;
        if (tq__child_start(&s->child, (const char *const *)w->argv, &s->job, err,
                            sizeof err)) {
            s->child.exited = 1;
            s->child.status = 127 << 8;
            return finish_slot(w, s, 0, err);
        }
        return 0;
    }
    size_t idx = (size_t)(s - w->slots);
    pthread_mutex_lock(&w->mu);
    w->runq[(w->runq_head + w->runq_len) % (size_t)w->concurrency] = idx;
    w->runq_len++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Sends the pending acks (and claims, if claim is set). On failure the acks
 * stay pending for the next pass. */
static int exchange(tq_worker *w, const tq__claim *claim, size_t qi, int *claimed)
{
    tq__ack stack[64], *acks = stack;
    tq_job *jobs = NULL;
    size_t n = 0, nacks = w->nacks;
    *claimed = 0;
    if (nacks > 64 && !(acks = malloc(nacks * sizeof *acks)))
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < nacks; i++)
        acks[i] = w->acks[i].ack;
    int rc = w->db->engine->exchange(w->db, w->name, acks, nacks, claim, &jobs, &n);
    if (!rc) {
        for (size_t i = 0; i < nacks; i++) {
            if (acks[i].result == TQ_ELOST) {
                w->counters.lost++;
                logf_(w, TQ_LOG_WARN,
                      "job %lld: lease was lost before its result was saved; "
                      "result discarded",
                      (long long)acks[i].id);
            } else if (acks[i].kind == TQ__ACK_DONE) {
                w->counters.done++;
            } else if (acks[i].kind == TQ__ACK_FAIL) {
                w->counters.failed++;
            } else if (acks[i].kind == TQ__ACK_RELEASE) {
                w->counters.released++;
            }
            free(w->acks[i].error);
        }
        w->nacks = 0;
        for (size_t i = 0; i < n && !rc; i++) {
            rc = start_job(w, qi, &jobs[i]);
            memset(&jobs[i], 0, sizeof jobs[i]); /* now owned by a slot */
        }
        tq_job_array_free(jobs, n);
        *claimed = (int)n;
    }
    if (acks != stack)
        free(acks);
    return rc;
}

/* Extends the lease of every running job (one fenced exchange); marks the
 * lost ones and stops their handlers. */
static int heartbeat(tq_worker *w)
{
    tq__ack *acks = calloc((size_t)w->concurrency, sizeof *acks);
    slot **of = calloc((size_t)w->concurrency, sizeof *of);
    size_t n = 0;
    int rc = 0;
    if (!acks || !of) {
        rc = tq__seterr(w->db, TQ_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state == SLOT_FREE || s->lost)
            continue;
        tq__ack a = {
            s->job.id, s->job.attempts, TQ__ACK_BEAT, w->qinfo[s->qi].lease_us, NULL, 0,
            0};
        acks[n] = a;
        of[n++] = s;
    }
    if (n && (rc = w->db->engine->exchange(w->db, w->name, acks, n, NULL, NULL, NULL)))
        goto done;
    for (size_t k = 0; k < n; k++) {
        if (acks[k].result != TQ_ELOST)
            continue;
        of[k]->lost = 1;
        logf_(w, TQ_LOG_WARN,
              "job %lld: lease lost (expired and taken, or cancelled); "
              "stopping its handler",
              (long long)of[k]->job.id);
        if (w->argv) {
            tq__child_kill(&of[k]->child, SIGTERM);
            of[k]->kill_at = tq__mono_us() + w->grace_us;
        }
    }
    rc = w->db->engine->worker_beat(w->db, w->name);
done:
    free(acks);
    free(of);
    return rc;
}

/* Timeouts and the stop deadline: signal children whose time is up. */
static void enforce_deadlines(tq_worker *w, int64_t now, int64_t stop_at)
{
    if (!w->argv)
        return;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING || s->child.exited)
            continue;
        if (s->deadline && now >= s->deadline && !s->timed_out) {
            s->timed_out = 1;
            tq__child_kill(&s->child, SIGTERM);
            s->kill_at = now + w->grace_us;
        }
        if (stop_at && now >= stop_at && !s->release && !s->timed_out) {
            s->release = 1;
            tq__child_kill(&s->child, SIGTERM);
            s->kill_at = now + KILL_AFTER_TERM_US;
        }
        if (s->kill_at && now >= s->kill_at) {
            tq__child_kill(&s->child, SIGKILL);
            s->kill_at = 0;
        }
    }
}

/* Sleeps until something happens or timeout_us passes. */
static void wait_events(tq_worker *w, int64_t timeout_us)
{
    struct pollfd fds[1 + 3 * 1024];
    nfds_t n = 0;
    int need_reap_poll = 0;
    fds[n++] = (struct pollfd){w->wake[0], POLLIN, 0};
    int nfd = (w->db->engine->caps & TQ__CAP_NOTIFY) && !w->disconnected
                  ? w->db->engine->notify_fd(w->db)
                  : -1;
    if (nfd >= 0)
        fds[n++] = (struct pollfd){nfd, POLLIN, 0};
    if (w->argv)
        for (int i = 0; i < w->concurrency; i++) {
            tq__child *c = &w->slots[i].child;
            if (w->slots[i].state != SLOT_RUNNING)
                continue;
            if (c->pidfd >= 0)
                fds[n++] = (struct pollfd){c->pidfd, POLLIN, 0};
            else
                need_reap_poll = 1;
            if (c->in_fd >= 0)
                fds[n++] = (struct pollfd){c->in_fd, POLLOUT, 0};
            if (c->err_fd >= 0)
                fds[n++] = (struct pollfd){c->err_fd, POLLIN, 0};
        }
    if (need_reap_poll && timeout_us > 10000)
        timeout_us = 10000;
    int ms = (int)((timeout_us + 999) / 1000);
    if (poll(fds, n, ms) > 0 && (fds[0].revents & POLLIN)) {
        char buf[64];
        while (read(w->wake[0], buf, sizeof buf) > 0)
            ;
    }
}

#define RECONNECT_MIN_US 100000LL
#define RECONNECT_MAX_US 10000000LL

/*
 * The store errors a worker rides out, returning 0 for them: busy (try
 * again on the next pass) and, for engines that can reconnect, a lost
 * connection (one log line, then reconnect with backoff while the running
 * handlers carry on; their acknowledgements wait and are sent, fenced, once
 * connected). Anything else is returned.
 */
static int ride_out(tq_worker *w, int rc)
{
    if (rc == TQ_EBUSY) {
        logf_(w, TQ_LOG_WARN, "store busy, will retry: %s", tq_errmsg(w->db));
        return 0;
    }
    if (rc == TQ_ECONN && w->db->engine->reconnect) {
        if (!w->disconnected) {
            logf_(w, TQ_LOG_WARN, "%s; reconnecting", tq_errmsg(w->db));
            w->disconnected = 1;
            w->reconnect_backoff = 0;
            w->reconnect_at = tq__mono_us();
        }
        return 0;
    }
    return rc;
}

/* One reconnection attempt when due; returns 1 once connected again. */
static int try_reconnect(tq_worker *w, int64_t now)
{
    tq *db = w->db;
    if (now < w->reconnect_at)
        return 0;
    if (db->engine->reconnect(db) != 0) {
        w->reconnect_backoff =
            w->reconnect_backoff ? w->reconnect_backoff * 2 : RECONNECT_MIN_US;
        if (w->reconnect_backoff > RECONNECT_MAX_US)
            w->reconnect_backoff = RECONNECT_MAX_US;
        w->reconnect_at = now + w->reconnect_backoff;
        logf_(w, TQ_LOG_DEBUG, "%s", tq_errmsg(db));
        return 0;
    }
    w->disconnected = 0;
    if ((db->engine->caps & TQ__CAP_NOTIFY) && db->engine->listen(db))
        logf_(w, TQ_LOG_WARN, "cannot listen for new jobs, polling only: %s",
              tq_errmsg(db));
    tq__clearerr(db);
    logf_(w, TQ_LOG_WARN, "reconnected to the store; %zu acknowledgement(s) to send",
          w->nacks);
    return 1;
}

static int64_t min_pos(int64_t a, int64_t b)
{
    if (a <= 0)
        return b;
    if (b <= 0)
        return a;
    return a < b ? a : b;
}

int tq_worker_run(tq_worker *w)
{
    tq *db = w->db;
    int rc = 0, stopping = 0;
    int64_t idle_us = 0, stop_at = 0, last_rescue = 0, last_refresh = 0;
    int64_t min_lease = INT64_MAX;
    for (size_t i = 0; i < w->nqueues; i++)
        if (w->qinfo[i].lease_us < min_lease)
            min_lease = w->qinfo[i].lease_us;
    const int64_t beat_every = min_lease / 3;
    int64_t last_beat = tq__mono_us();

    /* A handler that exits without reading its stdin must not kill us. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
    sigaction(SIGPIPE, &ign, &old_pipe);

    for (;;) {
        int64_t now = tq__mono_us();
        int claimed = 0;

        if (w->stop_requested && !stopping) {
            stopping = 1;
            stop_at = now + w->grace_us;
            logf_(w, TQ_LOG_INFO,
                  "stopping: no new jobs; %d running job(s) get %.1fs to finish",
                  running_count(w), (double)w->grace_us / 1e6);
        }
        if ((rc = collect(w)))
            break;
        int free_slots = w->concurrency - running_count(w);

        if (w->disconnected && !try_reconnect(w, now)) {
            /* Meanwhile: keep the handlers serviced, stop when asked. */
            enforce_deadlines(w, now, stopping ? stop_at : 0);
            if (stopping && running_count(w) == 0)
                break; /* unsent acks: those jobs come back by lease */
            int64_t t = min_pos(w->reconnect_at - now, 50000);
            if (stopping)
                t = min_pos(t, stop_at - now);
            wait_events(w, t > 0 ? t : 1000);
            continue;
        }

        if (!stopping && now - last_refresh >= REFRESH_EVERY_US) {
            if ((rc = ride_out(w, refresh_queues(w))))
                break;
            last_refresh = now;
        }
        if (!w->disconnected && !stopping && now - last_rescue >= RESCUE_EVERY_US) {
            int64_t n = 0;
            if ((rc = ride_out(w, db->engine->rescue(db, NULL, &n))))
                break;
            if (n)
                logf_(w, TQ_LOG_WARN, "rescued %lld job(s) whose lease expired",
                      (long long)n);
            last_rescue = now;
        }

        /* Acks and claims: one exchange per queue with free slots. */
        int any_claimed = 0, sent = 0;
        if (!w->disconnected && !stopping && free_slots > 0) {
            for (size_t k = 0; k < w->nqueues && free_slots > 0 && !rc; k++) {
                size_t qi = (w->next_queue + k) % w->nqueues;
                const tq_queue_info *q = &w->qinfo[qi];
                if (q->paused)
                    continue;
                tq__claim c = {w->queues[qi], q->order, q->lease_us, q->max_attempts,
                               (size_t)free_slots};
                rc = exchange(w, &c, qi, &claimed);
                sent = 1;
                free_slots -= claimed;
                any_claimed += claimed;
            }
            w->next_queue = (w->next_queue + 1) % w->nqueues;
        }
        if (!w->disconnected && !rc && !sent && w->nacks)
            rc = exchange(w, NULL, 0, &claimed);
        if ((rc = ride_out(w, rc)))
            break;
        if (w->disconnected)
            continue;

        now = tq__mono_us();
        if (now - last_beat >= beat_every) {
            rc = running_count(w) > 0 ? heartbeat(w)
                                      : db->engine->worker_beat(db, w->name);
            if ((rc = ride_out(w, rc)))
                break;
            last_beat = now;
        }
        enforce_deadlines(w, now, stopping ? stop_at : 0);

        int running = running_count(w);
        if (stopping && running == 0 && w->nacks == 0)
            break;
        if (!w->disconnected && w->drain && !stopping && running == 0 && w->nacks == 0 &&
            any_claimed == 0) {
            int pending = 0;
            for (size_t i = 0; i < w->nqueues && !pending && !rc; i++)
                rc = db->engine->pending(db, w->queues[i], &pending);
            if (rc)
                pending = 1;
            if ((rc = ride_out(w, rc)))
                break;
            if (!pending)
                break;
        }
        if (w->disconnected)
            continue;

        /* A notification of new jobs (PostgreSQL) means: claim now. */
        int notified = 0;
        if ((db->engine->caps & TQ__CAP_NOTIFY) && !stopping) {
            int k = 0;
            if ((rc = ride_out(w, db->engine->notify_drain(db, &k))))
                break;
            notified = k > 0 && free_slots > 0;
        }

        /* How long to sleep. */
        int64_t timeout;
        if (any_claimed || w->nacks || notified) {
            idle_us = 0;
            timeout = 0;
        } else {
            idle_us = idle_us ? idle_us * 2 : 1000;
            if (idle_us > w->poll_max_us)
                idle_us = w->poll_max_us;
            timeout = free_slots > 0 && !stopping ? idle_us : w->poll_max_us;
        }
        if (running) {
            timeout = min_pos(timeout, last_beat + beat_every - now);
            for (int i = 0; i < w->concurrency; i++) {
                slot *s = &w->slots[i];
                if (s->state != SLOT_RUNNING)
                    continue;
                if (s->deadline && !s->timed_out)
                    timeout = min_pos(timeout, s->deadline - now);
                if (s->kill_at)
                    timeout = min_pos(timeout, s->kill_at - now);
            }
            if (stopping)
                timeout = min_pos(timeout, stop_at - now);
        }
        if (timeout > 0 || (!any_claimed && !w->nacks && !notified))
            wait_events(w, timeout > 0 ? timeout : 1);
    }

    /* Leaving with an error: give back what we can, so nothing waits for a
     * lease to expire. */
    if (rc) {
        char keep[sizeof db->errmsg];
        memcpy(keep, db->errmsg, sizeof keep);
        for (int i = 0; i < w->concurrency; i++) {
            slot *s = &w->slots[i];
            if (s->state == SLOT_RUNNING && w->argv) {
                tq__child_kill(&s->child, SIGKILL);
                while (!tq__child_reap(&s->child))
                    usleep(1000);
            }
        }
        memcpy(db->errmsg, keep, sizeof keep);
    }
    sigaction(SIGPIPE, &old_pipe, NULL);
    return rc;
}
