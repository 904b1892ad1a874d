/*
 * worker.c - the worker pool: claims jobs, runs them (a command per job, or
 * a C callback on the pool's threads), acknowledges how they ended, keeps
 * their leases alive, and rescues jobs that dead workers left behind.
 * Called by tq_worker_* users: `tq work`, `tq bench`, embedding programs.
 *
 * One thread owns the store connection and runs a poll loop; that is the
 * "one writer per process" of DESIGN.md. Each pass of the loop
 * (tq_worker_run) calls these phases in turn, the loop's state living in
 * struct tq_worker and what a pass learns in struct pass:
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
 *   enforce_deadlines  timeouts and the stop's grace: SIGTERM, then SIGKILL;
 *   finished           stopped, or drained;
 *   next_wakeup        then poll() until a child writes, reads, exits, a
 *                      callback finishes, a stop is asked for, or the next
 *                      timer is due. When idle it backs off (1 ms doubling
 *                      to poll_max) instead of spinning.
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
#include "engine/engine.h"
#include "reaper.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RESCUE_EVERY_US    1000000LL
#define REFRESH_EVERY_US   1000000LL
#define SCHEDULES_EVERY_US 1000000LL /* new schedules are seen within this */
#define KILL_AFTER_TERM_US 1000000LL /* on stop: SIGTERM, then SIGKILL */
#define PREFETCH_WINDOW_US 20000LL   /* hold about this much work beyond the slots */
#define ACK_DELAY_US       10000LL   /* longest an acknowledgement waits */
#define ACK_BATCH          512       /* most acknowledgements waiting */
#define CMD_PATH_MAX       4096
#define NOTE_EVERY_US      10000000LL /* an idle worker's notes (note_waiting) */
#define NOTE_WAIT_US       1000000LL  /* a drain's wait worth a note */
#define DRAIN_PASS_MAX     65536      /* most stderr bytes read per slot and pass */
#define DRAIN_END_MAX      1048576    /* and once the handler's group ended */
#define PROGRESS_EVERY_US  1000000LL  /* most one job's progress is written */
#define OUTPUT_PENDING_MAX                                                               \
    (64 << 20)                        /* results' bytes waiting to be sent: no           \
                                         start while more wait */
#define START_RETRY_MIN_US 100000LL   /* a handler that cannot start: try again */
#define START_RETRY_MAX_US 5000000LL  /* after this, doubling up to this */
#define START_PROBE_US     1000000LL  /* one more slot per this without a failure */
#define START_PROGRAM_US   10000000LL /* the program cannot run: give up after */
#define START_MACHINE_US   60000000LL /* nothing can start, nothing runs: after */
/* A held job starts only while what the worker knows of its queue's
 * settings is this recent (settings_fresh): the bound on how long after a
 * pause, or a new limit or rate, commits a job may still start under the
 * old settings; or, where the store took longer than this to answer, until
 * SETTINGS_ANSWER_US after its answer (else a slow store would let nothing
 * start). */
#define SETTINGS_FRESH_US  50000LL
#define SETTINGS_ANSWER_US 20000LL
/* A rate-limited queue's held jobs (see "Holding" above) must start within
 * this of the moment the store took their tokens: most of the rate's
 * margin (tq__rate_burst), the rest being for a command's exec. */
#define LIMITED_HOLD_US (TQ__RATE_MARGIN_US * 4 / 5)

typedef enum slot_state {
    SLOT_FREE = 0,
    SLOT_RUNNING, /* child running, or callback running on the slot's thread */
} slot_state;

/*
 * A slot runs one job at a time. Command mode: the loop starts a child in a
 * free slot. Callback mode: slot i belongs to thread i, which takes held jobs
 * itself and hands back results, so a stream of short jobs costs no thread
 * switch per job; those fields and the held ring are then guarded by mu.
 */
typedef struct slot {
    struct tq_worker *owner;
    slot_state state;
    tq_job job;
    size_t qi;          /* index of the job's queue */
    int64_t started;    /* monotonic */
    int start_recorded; /* the store has charged this run's attempt */
    int64_t deadline;   /* monotonic; 0: no timeout */
    int64_t kill_at;    /* monotonic; SIGKILL the group then; 0: not set */
    int timed_out;      /* the timeout fired */
    int lost;           /* a heartbeat found the lease gone */
    int release;        /* killed by a stop: give the job back unspent */
    int lingering;      /* the handler exited, processes of its group did not */
    tq__child child;    /* command mode */
    /* What the handler said on its control channel (control.h): the last
     * snooze or discard decides how the job ends (snooze_us, word_text);
     * the last progress waits in progress* until it may be written (at
     * most once per PROGRESS_EVERY_US, at progress_at). */
    tq__ctl_verb word; /* 0: none */
    int64_t snooze_us;
    char *word_text;
    int progress, progress_dirty;
    char progress_text[TQ__PROGRESS_TEXT_MAX + 1];
    int64_t progress_at; /* monotonic: when one was last queued */
    int ctl_warned;      /* a bad line was logged for this job */
    void *output;        /* callback mode: the result it set, or NULL */
    size_t output_len;
    char *parents_file; /* command mode: TQ_PARENTS_FILE, removed with the slot */
} slot;

/* A callback's outcome, from its thread to the loop. */
typedef struct cb_result {
    int64_t id, claim, ran_us, started; /* started: monotonic */
    int attempt, max_attempts, rc, lost, start_recorded, snoozes;
    size_t qi;
    char *error; /* owned; NULL if the handler gave none */
    /* What the handler said (tq_handler_*): its word, the discard's reason
     * in error, and its last progress if not yet written (owned, or NULL). */
    tq__ctl_verb word;
    int64_t snooze_us;
    int progress;
    char *progress_text;
    void *output; /* owned: the result it set (tq_handler_result), or NULL */
    size_t output_len;
} cb_result;

/* A job claimed ahead of a free slot. */
typedef struct held_job {
    tq_job job;
    size_t qi;
    /* The lease the store last granted it, and the monotonic time by which
     * that has surely run out: when the exchange that granted or renewed it
     * was sent, plus the lease. */
    int64_t lease_us, lease_end;
    /* Monotonic: the job must start by then, or it goes back unstarted (a
     * rate-limited queue's: LIMITED_HOLD_US after the store took its
     * token, or for the slots free at its claim after the claim's answer);
     * 0: no such bound. */
    int64_t start_by;
    /* Claimed in a chain (tq__claim.chain): it waits while a job of its
     * group runs in this worker (pop_startable). */
    int serial;
} held_job;

typedef struct pending_ack {
    tq__ack ack;
    char *error;     /* owned; ack.error points here */
    void *output;    /* owned; ack.output points here */
    int64_t started; /* the run's start (ack_of), for ack.started_us */
    /* A failure's or a discard's, for the line logged once the store has
     * taken it (log_end): the run's attempt, and the job's max_attempts as
     * claimed. */
    int attempt, max_attempts;
} pending_ack;

struct tq_worker {
    tq *db;
    char *name;
    char **queues;
    size_t nqueues;
    tq_queue_info *qinfo;
    /* Per queue, until when (monotonic) its held jobs may start: the store
     * said its settings are as qinfo has them (a read of them, or a claim
     * that took jobs from it: each claim checks the pause and the limits)
     * in an exchange sent at S and answered at A, and it is now no later
     * than S + SETTINGS_FRESH_US or A + SETTINGS_ANSWER_US (settings_seen).
     * Guarded by mu in callback mode. */
    int64_t *settings_until;
    int stale_settings; /* a held job waits for them to be read (mu) */
    char **argv;
    char path[CMD_PATH_MAX]; /* the program argv[0] names (tq__command_path) */
    tq_handler_fn handler;
    void *handler_ud;
    void (*log)(void *ud, int level, const char *msg);
    void *log_ud;
    int concurrency, drain, log_jobs;
    int64_t timeout_us, grace_us, poll_max_us;
    int64_t lease_us; /* the longest lease its queues had: its own liveness */

    slot *slots;
    pending_ack *acks;
    size_t nacks, cap_acks;
    int64_t acks_since; /* monotonic time of the oldest pending ack */

    /* Jobs claimed and not yet started: a ring of cap_held (prefetch +
     * concurrency), oldest at held_head. */
    held_job *held;
    size_t held_head, nheld, cap_held, prefetch;
    /* Held jobs whose leases ran too short to start them, or that were not
     * started by their start_by (pop_startable), until the
     * loop gives them back: room for cap_held; nexpired of them for the
     * latter reason. The soonest start_by of a held job: 0 when none has
     * one. */
    held_job *short_held;
    size_t nshort, nexpired;
    int64_t start_by_next;
    /* The most jobs held while a queue has a rate limit (limited_target),
     * and whether some went back unstarted since the last claim. */
    size_t limited_cap;
    int limited_expired;
    /* Running jobs whose start the store has not recorded yet (guarded by
     * mu in callback mode), and since when there have been some. */
    size_t unrecorded;
    int64_t unrecorded_since;
    /* Heartbeats: the shortest lease granted since the last one (by a
     * claim or a beat) paces the next, so that a queue's lease shortened
     * meanwhile cannot outrun it. */
    int64_t beat_lease_us, last_beat;
    int beat_failed;                     /* the last heartbeat did not go through */
    int store_full;                      /* riding out TQ_EFULL: said so once */
    int64_t full_backoff, full_retry_at; /* and when to write again */
    /* Handlers that cannot start, for a cause of the worker's or the
     * machine's (start_failed): at most start_cap jobs run (0: no cap),
     * one more for every START_PROBE_US since the last failure, and none
     * start before start_retry_at. */
    int start_cap;
    int64_t start_last_fail, start_retry_at, start_backoff;
    int64_t start_failing_since; /* no start worked since; 0: the last one did */
    int start_gave_up;           /* stopping: start_why says why */
    char start_why[320];
    int64_t avg_run_us; /* moving mean of recent run times; 0: none yet */
    /* Moving mean of the time between two starts of held jobs while more
     * were held: how fast this worker starts them, whatever they run (0:
     * not known yet); when the last one started, and whether more were
     * held then (held_started). */
    int64_t avg_start_gap_us, last_held_start;
    int held_after_start;
    /* Bytes of results in pending acks: past OUTPUT_PENDING_MAX (the store
     * out of reach) no held job starts. Read by the callback threads. */
    _Atomic size_t output_pending;
    size_t next_queue; /* round robin start for claims */

    tq_worker_info me; /* the registration: what makes the name mine */
    int name_taken;    /* another process registered the name since */
    int wake[2];       /* self-pipe: stop requests and finished callbacks */
    tq__reaper reaper; /* command mode: ends the handlers' groups if we die */
    volatile sig_atomic_t stop_requested; /* by tq_worker_stop, or the worker */
    volatile sig_atomic_t stop_asked;     /* tq_worker_stop was called */
    volatile sig_atomic_t stop_now;       /* and called again: no more grace */

    /* Callback mode: threads take held jobs (cv signals new ones) and hand
     * back results; they wake the loop when the held jobs run below
     * low_water, when they go idle, or when results pile up. */
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cb_result *results, *spare; /* the loop reads one while threads fill the other */
    size_t nresults, cap_results, cap_spare;
    size_t low_water;
    int wake_pending, threads_quit;

    /* After TQ_ECONN: reconnecting, with capped exponential backoff. */
    int disconnected;
    int64_t reconnect_at, reconnect_backoff;

    /* The loop's own state from pass to pass (tq_worker_run). */
    int stopping;    /* a stop was asked for and begun */
    int stopped_now; /* and then ended at once (stop_now) */
    int64_t stop_at; /* monotonic: the end of its grace time */
    /* What an idle worker said of the store (note_empty, note_waiting). */
    int said_empty, said_waiting;
    int64_t empty_checked, wait_checked; /* monotonic: when each note last looked */
    int64_t waiting_since;  /* monotonic: when this drain's wait began; 0: none */
    int64_t idle_us;        /* backoff of claims that found nothing */
    int64_t notify_look_at; /* monotonic: the engine asked to drain again then */
    int64_t rate_retry_at;  /* monotonic: a rate limit has a token again then */
    int64_t progress_next;  /* monotonic: a handler's progress may be written */
    /* A running handler reported progress not yet queued as an ack: set by
     * the handlers (callback threads under mu), cleared by send_progress. */
    _Atomic int progress_said;
    tq__ctl_msg ctl_msg;      /* control_line's: too big for its stack */
    int64_t schedules_at;     /* monotonic: when to enqueue due periodic jobs */
    int64_t schedules_warned; /* monotonic: when their failure was last said */
    int listening;            /* a new job could start now: notifications matter */
    int64_t last_rescue, last_refresh;

    /* tq_worker_counters, atomic: tq_worker_counters_get may be called
     * from another thread while the loop runs. */
    struct {
        _Atomic int64_t claimed, done, failed, lost, released;
    } counters;
};

static void worker_log(tq_worker *w, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void worker_log(tq_worker *w, int level, const char *fmt, ...)
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

/* ---- held jobs ------------------------------------------------------------ */

static held_job *held_at(tq_worker *w, size_t i)
{
    return &w->held[(w->held_head + i) % w->cap_held];
}

static held_job pop_held(tq_worker *w)
{
    held_job h = w->held[w->held_head];
    w->held_head = (w->held_head + 1) % w->cap_held;
    w->nheld--;
    return h;
}

static void wake_loop_locked(tq_worker *w);

/* Whether held job h passed its start_by (pop_startable). */
static int too_late(const held_job *h, int64_t now)
{
    return h->start_by && now > h->start_by;
}

/* The store said that queue qi's settings (every queue's for SIZE_MAX) are
 * as the worker has them, in an exchange sent at sent, whose answer came at
 * answered: its held jobs may start until settings_until says. Called once
 * what they may no longer do is given back (release_unstartable), so that
 * no callback thread starts a job under settings about to be acted on. */
static void settings_seen_locked(tq_worker *w, size_t qi, int64_t sent, int64_t answered)
{
    int64_t until = sent + SETTINGS_FRESH_US;
    if (answered + SETTINGS_ANSWER_US > until)
        until = answered + SETTINGS_ANSWER_US;
    for (size_t i = 0; i < w->nqueues; i++)
        if ((qi == SIZE_MAX || i == qi) && until > w->settings_until[i])
            w->settings_until[i] = until;
}

static void settings_seen(tq_worker *w, size_t qi, int64_t sent, int64_t answered)
{
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    settings_seen_locked(w, qi, sent, answered);
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
}

/* Whether held job h's queue's settings are fresh enough for it to start
 * (SETTINGS_FRESH_US); if not, the loop is asked to read them (the caller
 * holds mu in callback mode). */
static int settings_fresh(tq_worker *w, const held_job *h, int64_t now)
{
    if (now <= w->settings_until[h->qi])
        return 1;
    if (!w->stale_settings && w->handler)
        wake_loop_locked(w);
    w->stale_settings = 1;
    return 0;
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
    for (size_t i = 1; i < w->nheld; i++) {
        const held_job *h = held_at(w, i);
        if (too_late(h, now) || !lease_left(h, now) ||
            (h->serial && group_running(w, h)) || !settings_fresh(w, h, now))
            continue;
        held_job found = *h;
        for (size_t k = i; k > 0; k--)
            *held_at(w, k) = *held_at(w, k - 1);
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
    const int64_t gap = now > w->last_held_start ? now - w->last_held_start : 1;
    if (w->held_after_start && gap < LIMITED_HOLD_US)
        w->avg_start_gap_us =
            w->avg_start_gap_us ? (w->avg_start_gap_us * 7 + gap) / 8 : gap;
    w->last_held_start = now;
    w->held_after_start = w->nheld > 0;
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
static int pop_startable(tq_worker *w, held_job *out)
{
    int64_t now = tq__mono_us();
    if (w->output_pending > OUTPUT_PENDING_MAX)
        return 0; /* the results of finished jobs wait for the store */
    while (w->nheld) {
        const held_job *h = held_at(w, 0);
        const int expired = too_late(h, now);
        if (!expired && lease_left(h, now)) {
            if (!settings_fresh(w, h, now))
                return 0;
            if (h->serial && group_running(w, h))
                return pop_serial(w, now, out) && held_started(w, now);
            *out = pop_held(w);
            return held_started(w, now);
        }
        if (w->nshort == w->cap_held)
            return 0; /* full: it waits in the ring until the loop empties it */
        w->nexpired += expired;
        w->short_held[w->nshort++] = pop_held(w);
        if (w->handler)
            wake_loop_locked(w);
    }
    return 0;
}

/*
 * A job starts in slot s (the caller holds mu in callback mode): the run's
 * attempt is the store's count plus this one, unless the claim recorded the
 * start already (started_at set, attempt charged: a hold charged up front,
 * engine.h). An unrecorded start goes to the store with a later exchange.
 */
static void mark_start(tq_worker *w, slot *s)
{
    s->start_recorded = s->job.started_at != 0;
    if (s->start_recorded)
        return;
    s->job.attempts++;
    if (w->unrecorded++ == 0)
        w->unrecorded_since = s->started;
}

/* ---- callback threads --------------------------------------------------- */

/* With mu held: one byte on the self-pipe, unless one is on its way. */
static void wake_loop_locked(tq_worker *w)
{
    if (w->wake_pending)
        return;
    w->wake_pending = 1;
    char b = 'j';
    while (write(w->wake[1], &b, 1) < 0 && errno == EINTR)
        ;
}

/* With mu held. On no memory the result is dropped: the job comes back
 * when its lease expires. */
static void push_result(tq_worker *w, slot *s, int rc, const char *err, int64_t ran)
{
    if (w->nresults == w->cap_results) {
        size_t cap = w->cap_results ? w->cap_results * 2 : 64;
        cb_result *v = realloc(w->results, cap * sizeof *v);
        if (!v)
            return;
        w->results = v;
        w->cap_results = cap;
    }
    cb_result *r = &w->results[w->nresults++];
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

int tq_handler_progress(const tq_job *job, int pct, const char *text)
{
    slot *s = slot_of(job);
    if (!s || pct < 0 || pct > 100)
        return TQ_EINVAL;
    const size_t n = text ? tq__utf8_cut(text, strlen(text), TQ__PROGRESS_TEXT_MAX) : 0;
    pthread_mutex_lock(&s->owner->mu);
    s->progress = pct;
    if (n)
        memcpy(s->progress_text, text, n);
    s->progress_text[n] = '\0';
    s->progress_dirty = 1;
    s->owner->progress_said = 1;
    pthread_mutex_unlock(&s->owner->mu);
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
    pthread_mutex_lock(&w->mu);
    for (;;) {
        held_job h;
        while (!w->threads_quit && !pop_startable(w, &h))
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->threads_quit)
            break;
        s->job = h.job;
        s->qi = h.qi;
        s->lost = 0;
        s->state = SLOT_RUNNING;
        s->started = tq__mono_us();
        s->word = 0;
        s->progress_dirty = 0;
        s->progress_at = 0;
        free(s->output);
        s->output = NULL;
        mark_start(w, s);
        if (w->nheld < w->low_water)
            wake_loop_locked(w); /* time to claim more */
        pthread_mutex_unlock(&w->mu);

        err[0] = '\0';
        current_slot = s;
        int rc = w->handler(w->handler_ud, &s->job, err, sizeof err);
        current_slot = NULL;
        int64_t ran = tq__mono_us() - s->started;

        pthread_mutex_lock(&w->mu);
        push_result(w, s, rc, err, ran);
        if (!s->start_recorded)
            w->unrecorded--; /* its acknowledgement records the start */
        tq__job_clear(&s->job);
        s->state = SLOT_FREE;
        if (w->nheld == 0 || w->nresults >= ACK_BATCH)
            wake_loop_locked(w);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int start_threads(tq_worker *w)
{
    w->threads = calloc((size_t)w->concurrency, sizeof *w->threads);
    if (!w->threads)
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    for (int i = 0; i < w->concurrency; i++) {
        int e = pthread_create(&w->threads[i], NULL, thread_main, &w->slots[i]);
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
 * (it will be created by its first enqueue). The registration's lease
 * (w->lease_us, sent with the next heartbeat) grows to the longest of
 * theirs and never shrinks: the name stays held at least as long as any
 * job's lease this worker renewed, so that no one takes it over and puts
 * those jobs back while this worker, merely stalled, may still run them. */
static int refresh_queues(tq_worker *w, int64_t *asked)
{
    *asked = tq__mono_us();
    for (size_t i = 0; i < w->nqueues; i++) {
        int rc = w->db->engine->queue_get(w->db, w->queues[i], &w->qinfo[i]);
        if (rc == TQ_ENOTFOUND)
            tq__queue_defaults(&w->qinfo[i], w->queues[i]);
        else if (rc)
            return rc;
        if (w->qinfo[i].lease_us > w->lease_us)
            w->lease_us = w->me.lease_us = w->qinfo[i].lease_us;
    }
    return 0;
}

static void free_slot(slot *s)
{
    struct tq_worker *owner = s->owner;
    /* A group still running (the worker is being freed mid-run) stays the
     * reaper's, which ends it when the worker lets it go. */
    if (s->child.pid > 0 && s->child.group_done)
        tq__reaper_forget(owner->reaper.fd, s->child.pid);
    tq__child_close(&s->child);
    tq__job_clear(&s->job);
    free(s->word_text);
    free(s->output);
    if (s->parents_file) {
        unlink(s->parents_file);
        free(s->parents_file);
    }
    memset(s, 0, sizeof *s);
    s->owner = owner;
    s->child.in_fd = s->child.err_fd = s->child.ctl_fd = s->child.out_fd =
        s->child.pidfd = -1;
}

/* How often the leases are renewed: a third of the shortest one held. */
static int64_t beat_every_us(const tq_worker *w)
{
    return (w->beat_lease_us < w->lease_us ? w->beat_lease_us : w->lease_us) / 3;
}

/*
 * How long the store may stay silent before the connection counts as lost
 * (engines with a network connection): a heartbeat period, so that a beat
 * lost to a hung connection is followed by a new connection and a beat
 * that still renews the leases, but never under WAIT_LIMIT_MIN_US, so that
 * a slow statement on a busy server is not taken for a hang.
 */
#define WAIT_LIMIT_MIN_US 2000000LL
static int set_wait_limit(tq_worker *w)
{
    if (!(w->db->engine->caps & TQ__CAP_NETWORK))
        return 0;
    int64_t us = beat_every_us(w);
    return w->db->engine->set_wait_limit(w->db,
                                         us > WAIT_LIMIT_MIN_US ? us : WAIT_LIMIT_MIN_US);
}

/* After any write that went through: a full disk has room again. */
static void store_wrote(tq_worker *w)
{
    if (!w->store_full)
        return;
    w->store_full = 0;
    w->full_backoff = 0;
    worker_log(w, TQ_LOG_WARN, "the store has room again");
}

void tq_worker_free(tq_worker *w)
{
    if (!w)
        return;
    if (w->nthreads)
        stop_threads(w);
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
            free_slot(&w->slots[i]);
    for (size_t i = 0; i < w->nacks; i++) {
        free(w->acks[i].error);
        free(w->acks[i].output);
    }
    for (size_t i = 0; i < w->nheld; i++)
        tq__job_clear(&w->held[(w->held_head + i) % w->cap_held].job);
    free(w->held);
    for (size_t i = 0; i < w->nshort; i++)
        tq__job_clear(&w->short_held[i].job);
    free(w->short_held);
    for (size_t i = 0; i < w->nresults; i++) {
        free(w->results[i].error);
        free(w->results[i].progress_text);
        free(w->results[i].output);
    }
    free(w->results);
    free(w->spare);
    free(w->acks);
    free(w->slots);
    free(w->threads);
    free(w->qinfo);
    free(w->settings_until);
    free_strv(w->queues);
    free_strv(w->argv);
    free(w->name);
    tq__reaper_stop(&w->reaper);
    if (w->wake[0] >= 0)
        close(w->wake[0]);
    if (w->wake[1] >= 0)
        close(w->wake[1]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/*
 * What identifies the processes this one can see: the kernel's boot id and
 * this process's PID namespace ("boot-id/pid:[inode]"). Two workers with
 * the same host_id can tell by kill(pid, 0) whether the other's process
 * exists; a hostname cannot say that (containers and cloned machines share
 * hostnames, and PIDs repeat across namespaces). "" when /proc cannot say.
 */
static void host_identity(char *buf, size_t len)
{
    char boot[64] = "", ns[64] = "";
    buf[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (n <= 0 || !boot[0])
        return;
    ns[n] = '\0';
    snprintf(buf, len, "%s/%s", boot, ns);
}

/* The kernel's inode number of the initial PID namespace (PROC_PID_INIT_INO). */
#define PID_NS_INIT 4026531836ULL

/* HOST:PID names one process on one host; in a PID namespace of its own (a
 * container), the namespace's inode number is added, since sibling
 * containers may share a hostname and both run their worker as PID 1. */
void tq_worker_default_name(char *buf, size_t len)
{
    char host[100] = "localhost", ns[64];
    gethostname(host, sizeof host - 1);
    unsigned long long ino = 0;
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (n > 0) {
        ns[n] = '\0';
        if (sscanf(ns, "pid:[%llu]", &ino) != 1)
            ino = 0;
    }
    if (ino && ino != PID_NS_INIT)
        snprintf(buf, len, "%s:%ld@%llu", host, (long)getpid(), ino);
    else
        snprintf(buf, len, "%s:%ld", host, (long)getpid());
}

/* Whether process pid runs no more: none exists, or it is a zombie. */
static int process_gone(int64_t pid)
{
    if (kill((pid_t)pid, 0) == -1)
        return errno == ESRCH;
    char path[40], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')');
    return paren && paren[1] == ' ' && paren[2] == 'Z';
}

/* Whether the registered holder of a name is provably gone: it ran where
 * this process can see its PID (the same host_id) and no such process
 * runs, nor its reaper (reaper.h): once the reaper is gone too, every
 * handler group it knew has been sent SIGKILL. A reaper outlives its worker
 * by a moment: it is given REAPER_WAIT_US. Otherwise only the heartbeat's
 * age counts. (A reused pid makes us wait for the lease instead.) */
#define REAPER_WAIT_US 2000000LL
static int holder_is_dead(const tq_worker_info *h, const char *host_id)
{
    if (!host_id[0] || strcmp(h->host_id, host_id) != 0 || h->pid <= 0 ||
        h->pid == getpid() || !process_gone(h->pid))
        return 0;
    const int64_t until = tq__mono_us() + REAPER_WAIT_US;
    while (h->reaper_pid > 0 && !process_gone(h->reaper_pid)) {
        if (tq__mono_us() > until)
            return 0;
        tq__sleep_us(10000);
    }
    return 1;
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
    char why[256];
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
    for (size_t i = 0; i < o->nqueues; i++)
        if (tq_name_check(o->queues[i]))
            return tq__seterr(db, TQ_EINVAL,
                              "invalid queue name '%.80s': use 1 to 64 letters, "
                              "digits, '_', '.' or '-'",
                              o->queues[i]);
    return 0;
}

/*
 * Registers the worker's name (tq_worker_new): refused while a live worker
 * holds it, taken over from a holder that is provably gone, whose jobs
 * still running under the name are then put back at once.
 */
static int register_name(tq_worker *w, const char *host)
{
    tq *db = w->db;
    int rc;
    tq_worker_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.name, sizeof info.name, "%s", w->name);
    snprintf(info.host, sizeof info.host, "%s", host);
    host_identity(info.host_id, sizeof info.host_id);
    info.pid = getpid();
    info.lease_us = w->lease_us;
    info.reaper_pid = w->reaper.pid;
    tq_worker_info holder;
    rc = db->engine->worker_register(db, &info, NULL, &holder);
    /* Whether the name's previous holder is provably gone: it stopped, or
     * it ran where we can see its PID and that process no longer exists
     * (kill -9 leaves a fresh heartbeat behind). A name no worker has
     * registered says nothing of whoever claimed jobs under it through the
     * API: those come back by lease. */
    int gone =
        holder.name[0] && (holder.stopped_at || holder_is_dead(&holder, info.host_id));
    if (rc == TQ_EINUSE && gone) {
        worker_log(
            w, TQ_LOG_WARN,
            "worker name held by pid %lld on this host, which is gone: taking over",
            (long long)holder.pid);
        tq_worker_info was = holder;
        /* Only if it is still that holder: two starting at once cannot
         * both take it over. */
        rc = db->engine->worker_register(db, &info, &was, &holder);
    }
    if (rc == TQ_EINUSE) {
        char lease[32];
        rc = tq__seterr(
            db, TQ_EINUSE,
            "worker name '%s' is held by a live worker (%s pid %lld, lease %s): "
            "pick another --name or wait for its lease to pass",
            w->name, holder.host, (long long)holder.pid,
            tq_duration_format(lease, sizeof lease, holder.lease_us));
    }
    if (rc) {
        free(w->name); /* not ours: do not mark it stopped */
        w->name = NULL;
        return rc;
    }
    w->me = info;
    /* Pick up my own unfinished business: whatever this name still holds
     * was interrupted by a crash of the previous holder. Only when that
     * holder is provably gone: one merely silent for longer than its lease
     * (stalled, cut off) may still be running jobs whose leases it extended
     * beyond that, and those come back when the leases expire. */
    int64_t n = 0;
    if (gone && (rc = db->engine->rescue(db, w->name, holder.started_at, &n)))
        return rc;
    if (n)
        worker_log(w, TQ_LOG_WARN,
                   "put back %lld job(s) left running under this worker name",
                   (long long)n);
    return 0;
}

int tq_worker_new(tq_worker **out, tq *db, const tq_worker_opts *o)
{
    static const char *const default_queue[] = {"default"};
    char host[100] = "localhost", name[128];
    int rc;

    *out = NULL;
    tq__clearerr(db);
    char path[CMD_PATH_MAX] = "";
    if ((rc = check_opts(db, o, path)))
        return rc;
    const int prefetch = o->version >= 2 ? o->prefetch : 0;
    const char *const *queues = o->nqueues ? o->queues : default_queue;
    size_t nqueues = o->nqueues ? o->nqueues : 1;
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
    w->wake[0] = w->wake[1] = -1;
    w->reaper.fd = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->db = db;
    w->concurrency = o->concurrency ? o->concurrency : 1;
    w->drain = o->drain;
    w->log_jobs = o->version >= 3 ? o->log_jobs : 0;
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
    w->settings_until = calloc(nqueues, sizeof *w->settings_until);
    w->slots = calloc((size_t)w->concurrency, sizeof *w->slots);
    w->prefetch = prefetch == 0  ? TQ_PREFETCH_DEFAULT
                  : prefetch < 0 ? 0
                                 : (size_t)prefetch;
    w->cap_held = w->prefetch + (size_t)w->concurrency;
    w->limited_cap = (size_t)w->concurrency; /* then as found */
    w->held = calloc(w->cap_held, sizeof *w->held);
    w->short_held = calloc(w->cap_held, sizeof *w->short_held);
    w->low_water = 1;
    w->beat_lease_us = INT64_MAX;
    if (o->argv) {
        size_t n = 0;
        while (o->argv[n])
            n++;
        w->argv = dup_strv(o->argv, n);
        memcpy(w->path, path, sizeof path);
    }
    if (!w->name || !w->queues || !w->qinfo || !w->settings_until || !w->slots ||
        !w->held || !w->short_held || (o->argv && !w->argv)) {
        rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < w->concurrency; i++) {
        w->slots[i].owner = w;
        w->slots[i].child.in_fd = w->slots[i].child.err_fd = w->slots[i].child.ctl_fd =
            w->slots[i].child.out_fd = w->slots[i].child.pidfd = -1;
    }
    if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK)) {
        rc = tq__seterr(db, TQ_ESYS, "pipe: %s", strerror(errno));
        goto fail;
    }
    int64_t asked;
    if ((rc = refresh_queues(w, &asked)))
        goto fail;
    settings_seen(w, SIZE_MAX, asked, tq__mono_us()); /* nothing is held yet */
    /* Every later wait for the store is bounded, registering included. */
    if ((rc = set_wait_limit(w)))
        goto fail;
    /* Before the registration, which names it. */
    char why[128];
    if (w->argv && tq__reaper_start(&w->reaper, why, sizeof why)) {
        rc = tq__seterr(db, TQ_ESYS, "starting the handlers' reaper: %s", why);
        goto fail;
    }

    if ((rc = register_name(w, host)))
        goto fail;
    if ((db->engine->caps & TQ__CAP_NOTIFY) && db->engine->listen(db)) {
        worker_log(w, TQ_LOG_WARN, "cannot listen for new jobs, polling only: %s",
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
    out->claimed = w->counters.claimed;
    out->done = w->counters.done;
    out->failed = w->counters.failed;
    out->lost = w->counters.lost;
    out->released = w->counters.released;
    out->busy_retries = w->db->busy_retries;
}

void tq_worker_stop(tq_worker *w)
{
    int saved = errno;
    if (w->stop_asked) /* the worker's own stops (start_failed, ...) do not count */
        w->stop_now = 1;
    w->stop_asked = 1;
    w->stop_requested = 1;
    char b = 's';
    ssize_t r = write(w->wake[1], &b, 1);
    (void)r;
    errno = saved;
}

/* ---- the loop ------------------------------------------------------------ */

/* What an acknowledgement says about a job: which claim, and when its run
 * started (monotonic; 0: it never started). The store is told how long ago
 * that was when the ack is sent (exchange), so that the start it records is
 * the start, however long the ack waited. */
typedef struct ack_of {
    int64_t id, claim, started;
    int attempt; /* the run's, for the backoff */
    size_t qi;
} ack_of;

static int add_ack(tq_worker *w, const ack_of *j, tq__ack_kind kind, const char *error)
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
    if (w->nacks == 0)
        w->acks_since = tq__mono_us();
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
    w->nacks++;
    return 0;
}

/* A held job given back unstarted, or ended unrun. */
static int add_held_ack(tq_worker *w, const held_job *h, tq__ack_kind kind,
                        const char *error)
{
    ack_of j = {h->job.id, h->job.claim, 0, h->job.attempts, h->qi};
    return add_ack(w, &j, kind, error);
}

/* How a run ended, from either mode. */
typedef struct outcome {
    ack_of job;
    int max_attempts; /* the job's, as claimed: whether a failure ends it */
    int snoozes;      /* the job's, as claimed */
    int64_t ran_us;
    int lost, release, ok;
    const char *error;
    /* The handler's word, which decides over ok: a snooze (snooze_us) or a
     * discard (error its reason). */
    tq__ctl_verb word;
    int64_t snooze_us;
    /* The job's result when it is done (has_output; output may be NULL
     * for an empty one): taken over by the ack, which frees it. */
    int has_output;
    void *output;
    size_t output_len;
} outcome;

/*
 * A failure or a discard, in the log, once the store took it (a result it
 * fenced out is logged as discarded instead): the handler's text escaped to
 * one line, and what becomes of the job (the store decides, with the
 * queue's settings as they are then; the job's as claimed say the same
 * unless they changed since).
 */
static void log_end(tq_worker *w, const pending_ack *p)
{
    char *text = tq_text_printable(p->error ? p->error : "");
    char then[64], d[32];
    if (p->ack.kind == TQ__ACK_DISCARD)
        worker_log(w, TQ_LOG_INFO, "job %lld attempt %d discarded: %.300s; dead",
                   (long long)p->ack.id, p->attempt, text ? text : "(out of memory)");
    if (p->ack.kind != TQ__ACK_FAIL)
        goto done;
    if (p->attempt >= p->max_attempts)
        snprintf(then, sizeof then, "dead, no attempts left");
    else
        snprintf(then, sizeof then, "retry in %s",
                 tq_duration_format(d, sizeof d, p->ack.delay_us));
    worker_log(w, TQ_LOG_INFO, "job %lld attempt %d of %d failed: %.300s; %s",
               (long long)p->ack.id, p->attempt, p->max_attempts,
               text ? text : "(out of memory)", then);
done:
    free(text);
}

/* The pending ack just added (a failure or a discard) will be logged as
 * the store takes it. */
static void log_when_taken(tq_worker *w, const outcome *o)
{
    pending_ack *p = &w->acks[w->nacks - 1];
    p->attempt = o->job.attempt;
    p->max_attempts = o->max_attempts;
}

static int finish(tq_worker *w, outcome *o);

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
        return finish(w, &f);
    }
    int rc = add_ack(w, &o->job, TQ__ACK_SNOOZE, NULL);
    if (rc)
        return rc;
    w->acks[w->nacks - 1].ack.delay_us = o->snooze_us;
    if (w->log_jobs)
        worker_log(w, TQ_LOG_DEBUG,
                   "job %lld attempt %d snoozed for %s (snooze %d of %d)",
                   (long long)o->job.id, o->job.attempt,
                   tq_duration_format(d, sizeof d, o->snooze_us), o->snoozes + 1,
                   q->max_snoozes);
    return 0;
}

/* Turns a finished run into a pending ack. */
static int finish(tq_worker *w, outcome *o)
{
    char d[32];
    int rc;
    int64_t ran = o->ran_us > 0 ? o->ran_us : 1;
    if (o->job.started) /* a run that never started says nothing of jobs */
        w->avg_run_us = w->avg_run_us ? (w->avg_run_us * 7 + ran) / 8 : ran;
    if (o->lost) {
        /* Someone else holds the job now (or it was cancelled): its result
         * must not be recorded. The fence would refuse it anyway. */
        w->counters.lost++;
        worker_log(w, TQ_LOG_WARN, "job %lld: lease was lost; result discarded",
                   (long long)o->job.id);
        return 0;
    }
    /* A handler that finished its job when told to stop (it trapped the
     * signal and exited 0) did the job: done, not run again. */
    if (o->ok && !o->word) {
        if (w->log_jobs)
            worker_log(w, TQ_LOG_DEBUG, "job %lld attempt %d done in %s",
                       (long long)o->job.id, o->job.attempt,
                       tq_duration_format(d, sizeof d, ran));
        if ((rc = add_ack(w, &o->job, TQ__ACK_DONE, NULL)))
            return rc;
        if (o->has_output) { /* the ack owns it now */
            pending_ack *p = &w->acks[w->nacks - 1];
            p->output = o->output;
            p->ack.output = o->output ? o->output : "";
            p->ack.output_len = o->output_len;
            o->output = NULL;
            w->output_pending += o->output_len;
        }
        return 0;
    }
    if (o->release) {
        if (w->log_jobs && o->job.started)
            worker_log(w, TQ_LOG_DEBUG,
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

/* How long ago a run started, as an acknowledgement carries it (at least 1:
 * 0 would mean "never started"). */
static int64_t started_ago(int64_t started)
{
    int64_t ago = tq__mono_us() - started;
    return ago > 0 ? ago : 1;
}

/* The progress a handler last reported, as a pending ack (fenced
 * like any: a handler whose job was taken back changes nothing). It
 * carries no start: the store records that through the run's own acks. */
static int progress_ack(tq_worker *w, const ack_of *j, int pct, const char *text)
{
    /* One pending progress per run: while the store cannot be reached,
     * the newest replaces the last instead of piling up. */
    for (size_t i = 0; i < w->nacks; i++) {
        pending_ack *p = &w->acks[i];
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
        w->acks[w->nacks - 1].ack.progress = pct;
    return rc;
}

/* A slot's last progress, as progress_ack queues it. */
static int queue_progress(tq_worker *w, slot *s)
{
    ack_of j = {s->job.id, s->job.claim, 0, s->job.attempts, s->qi};
    int rc = progress_ack(w, &j, s->progress, s->progress_text);
    if (!rc) {
        s->progress_dirty = 0;
        s->progress_at = tq__mono_us();
    }
    return rc;
}

/* Queues the progress of running handlers that may be written now (in
 * callback mode the threads report it under mu); *next_us: when the next
 * one may (0: none waits). */
static int send_progress(tq_worker *w, int64_t now, int64_t *next_us)
{
    int rc = 0;
    *next_us = 0;
    if (!w->progress_said) /* the usual pass: no handler reported any */
        return 0;
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    w->progress_said = 0;
    for (int i = 0; !rc && i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING || !s->progress_dirty || s->lost)
            continue;
        const int64_t due = s->progress_at ? s->progress_at + PROGRESS_EVERY_US : 0;
        if (due > now) {
            if (!*next_us || due < *next_us)
                *next_us = due;
            w->progress_said = 1; /* still to write */
            continue;
        }
        rc = queue_progress(w, s);
    }
    if (rc)
        w->progress_said = 1;
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    return rc;
}

/* A line a command handler wrote to its control channel (NULL: one too
 * long). What it says waits in the slot; a line that says nothing
 * sensible is logged once per job and otherwise ignored. */
static void control_line(void *ud, const char *line, size_t len)
{
    slot *s = ud;
    tq__ctl_msg *m = &s->owner->ctl_msg;
    char why[160];
    int r = line ? tq__control_parse(m, line, len, why, sizeof why) : -1;
    if (!line)
        snprintf(why, sizeof why, "a line longer than %d bytes", TQ__CONTROL_LINE_MAX);
    if (r < 0) {
        if (!s->ctl_warned) {
            char *raw = line ? tq__memdup(line, len < 80 ? len : 80, 1) : NULL;
            char *shown = raw ? tq_text_printable(raw) : NULL;
            worker_log(s->owner, TQ_LOG_WARN,
                       "job %lld: ignored on its control channel: %s%s%s%s (said once "
                       "per job)",
                       (long long)s->job.id, why, shown ? " in '" : "",
                       shown ? shown : "", shown ? "'" : "");
            free(shown);
            free(raw);
        }
        s->ctl_warned = 1;
        return;
    }
    if (r == 0)
        return;
    switch (m->verb) {
    case TQ__CTL_PROGRESS:
        s->progress = m->pct;
        /* parse kept it within TQ__PROGRESS_TEXT_MAX, cut between characters */
        memcpy(s->progress_text, m->text, strlen(m->text) + 1);
        s->progress_dirty = 1;
        s->owner->progress_said = 1;
        break;
    case TQ__CTL_SNOOZE:
        s->word = TQ__CTL_SNOOZE;
        s->snooze_us = m->delay_us;
        break;
    case TQ__CTL_DISCARD: {
        free(s->word_text); /* out of memory: a discard with no reason is one */
        s->word_text = tq__strdup(m->text);
        s->word = TQ__CTL_DISCARD;
        break;
    }
    }
}

/* Command mode: a slot whose child is gone (or never started: then no
 * start is recorded, and a held job is not charged for it). */
static int finish_slot(tq_worker *w, slot *s, int ok, const char *error)
{
    const int64_t began = s->child.pid > 0 ? s->started : 0;
    /* The handler's word counts unless the worker ended it: a timeout, or a
     * stop that killed it (one it outlived, exiting by itself after the
     * stop's SIGTERM, leaves its word standing). */
    const int exited = s->child.pid > 0 && s->child.exited && WIFEXITED(s->child.status);
    const tq__ctl_verb word = s->timed_out || (s->release && !exited) ? 0 : s->word;
    const int release = s->release && !word;
    outcome o = {.job = {s->job.id, s->job.claim, began, s->job.attempts, s->qi},
                 .max_attempts = s->job.max_attempts,
                 .snoozes = s->job.snoozes,
                 .ran_us = tq__mono_us() - s->started,
                 .lost = s->lost,
                 .release = release,
                 .ok = ok,
                 .error = word == TQ__CTL_DISCARD ? s->word_text : error,
                 .word = word,
                 .snooze_us = s->snooze_us};
    if (!s->start_recorded)
        w->unrecorded--; /* the ack records it */
    /* A results queue's command: its stdout is the result of a done job,
     * and a done job whose stdout is over the limit is a failure. */
    char over[160];
    if (s->child.captured && !word && !release && !s->timed_out &&
        (s->child.out_seen > TQ_RESULT_MAX || s->child.out_failed)) {
        /* Its stdout was closed at the limit: what it did next (a SIGPIPE
         * death, say) is not the story. */
        if (s->child.out_failed)
            snprintf(over, sizeof over, "out of memory for the job's result");
        else
            snprintf(over, sizeof over,
                     "its stdout, the job's result, is over %d bytes; not kept",
                     TQ_RESULT_MAX);
        o.ok = ok = 0;
        o.error = over;
    } else if (s->child.captured && ok && !word) {
        o.has_output = 1;
        o.output = s->child.out;
        o.output_len = s->child.out_len;
        s->child.out = NULL;
    }
    int rc = 0;
    /* Its last progress stays with a job that ends done or discarded. */
    if (s->progress_dirty && !s->lost && !release &&
        ((ok && !word) || word == TQ__CTL_DISCARD))
        rc = queue_progress(w, s);
    if (!rc)
        rc = finish(w, &o);
    free(o.output); /* not taken: the run did not end done */
    free_slot(s);
    return rc;
}

/* Callback mode: the results the threads handed back. */
static int collect_results(tq_worker *w)
{
    pthread_mutex_lock(&w->mu);
    cb_result *v = w->results;
    size_t n = w->nresults, cap = w->cap_results;
    w->results = w->spare;
    w->cap_results = w->cap_spare;
    w->nresults = 0;
    w->wake_pending = 0;
    pthread_mutex_unlock(&w->mu);
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
            rc = progress_ack(w, &j, v[i].progress, v[i].progress_text);
        }
        if (!rc)
            rc = finish(w, &o);
        free(o.output); /* not taken: the run did not end done */
        free(v[i].error);
        free(v[i].progress_text);
    }
    w->spare = v; /* only the loop touches the spare */
    w->cap_spare = cap;
    return rc;
}

/* Whether a child died of a signal that stops a worker. While the worker
 * stops, such a death is the stop reaching the handler (a supervisor that
 * signals every process it started, or a terminal's Ctrl-C), not a failure
 * of the job: the job is released, its attempt given back. */
static int killed_by_stop(const tq__child *c)
{
    if (!WIFSIGNALED(c->status))
        return 0;
    int sig = WTERMSIG(c->status);
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

/*
 * Command mode, once the handler exited: whether its job is over. The job
 * is its process group, as a service is its control group to a service
 * manager: what the handler left running there (a background process, a
 * child that ignored the timeout's SIGTERM) gets SIGTERM, and SIGKILL once
 * the grace time is over, and the job is acknowledged only then, so that a
 * job handed back never runs beside a copy of itself. The handler's exit
 * status alone says how the job went.
 */
static int group_ended(tq_worker *w, slot *s)
{
    if (tq__child_group_done(&s->child))
        return 1;
    if (!s->lingering) {
        s->lingering = 1;
        worker_log(w, TQ_LOG_WARN,
                   "job %lld: the handler exited and left processes running; ending them",
                   (long long)s->job.id);
        if (!s->kill_at) { /* else a SIGTERM went already, and SIGKILL is due */
            tq__child_kill(&s->child, SIGTERM);
            s->kill_at = tq__mono_us() + w->grace_us;
        }
    }
    return tq__child_group_done(&s->child);
}

/* Collects children that exited and callbacks that returned. */
static int collect(tq_worker *w)
{
    char err[TQ__TAIL_MAX + 256];
    if (w->handler)
        return collect_results(w);
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        tq__child_feed(&s->child);
        tq__child_drain(&s->child, DRAIN_PASS_MAX);
        tq__child_control(&s->child, DRAIN_PASS_MAX, 0);
        tq__child_output(&s->child, DRAIN_PASS_MAX);
        if (!tq__child_reap(&s->child) || !group_ended(w, s))
            continue;
        /* The rest: what the pipes held when the group ended (a process
         * that left the group may still write: not forever). */
        tq__child_drain(&s->child, DRAIN_END_MAX);
        tq__child_control(&s->child, DRAIN_END_MAX, 1);
        tq__child_output(&s->child, DRAIN_END_MAX);
        size_t off = 0;
        if (s->timed_out) {
            char d[32];
            off = (size_t)snprintf(err, 64, "timed out after %s, then ",
                                   tq_duration_format(d, sizeof d, w->timeout_us));
        }
        /* after a timeout even an exit 0 is said */
        tq__child_describe(&s->child, err + off, sizeof err - off, s->timed_out);
        if (w->stop_requested && !s->timed_out && killed_by_stop(&s->child))
            s->release = 1;
        int rc = finish_slot(w, s, !s->timed_out && err[0] == '\0', err);
        if (rc)
            return rc;
    }
    return 0;
}

/* Jobs started and not yet turned into acks: running slots and, in callback
 * mode, results not yet collected. */
static int running_count_locked(const tq_worker *w)
{
    int n = 0;
    for (int i = 0; i < w->concurrency; i++)
        n += w->slots[i].state != SLOT_FREE;
    return w->handler ? n + (int)w->nresults : n;
}

static int running_count(tq_worker *w)
{
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    int n = running_count_locked(w);
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    return n;
}

/*
 * Command mode: how many jobs may run now. All slots, unless handlers
 * failed to start lately: then none until the retry time, and after it
 * as many as ran when the last start failed; once a start worked again,
 * one more for every START_PROBE_US since the failure, until the cap is
 * gone.
 */
static int start_room(tq_worker *w, int64_t now)
{
    if (!w->start_cap)
        return w->concurrency;
    if (now < w->start_retry_at)
        return 0;
    if (w->start_failing_since) /* no start worked since the last failure */
        return w->start_cap;
    int64_t room = w->start_cap + (now - w->start_last_fail) / START_PROBE_US;
    if (room < w->concurrency)
        return (int)room;
    w->start_cap = 0;
    worker_log(w, TQ_LOG_INFO, "handlers start again: up to %d at once", w->concurrency);
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
static void start_failed(tq_worker *w, int program, const char *why)
{
    const int64_t now = tq__mono_us();
    const int running = running_count(w);
    if (!w->start_cap)
        worker_log(w, TQ_LOG_WARN,
                   "%s; the job goes back unspent, and jobs start more slowly while this "
                   "lasts",
                   why);
    if (!w->start_failing_since)
        w->start_failing_since = now;
    w->start_backoff = w->start_backoff ? w->start_backoff * 2 : START_RETRY_MIN_US;
    if (w->start_backoff > START_RETRY_MAX_US)
        w->start_backoff = START_RETRY_MAX_US;
    w->start_retry_at = now + w->start_backoff;
    w->start_last_fail = now;
    w->start_cap = running > 0 ? running : 1;
    const int64_t failing = now - w->start_failing_since;
    if (!w->start_gave_up && ((program && failing >= START_PROGRAM_US) ||
                              (running == 0 && failing >= START_MACHINE_US))) {
        char d[32];
        snprintf(w->start_why, sizeof w->start_why, "%s (for %s); stopping", why,
                 tq_duration_format(d, sizeof d, failing));
        worker_log(w, TQ_LOG_ERROR, "%s", w->start_why);
        w->start_gave_up = 1;
        w->stop_requested = 1;
    }
}

/* With log_jobs: a line a command handler wrote to stderr, escaped. */
static void stderr_line(void *ud, const char *line, size_t len)
{
    const slot *s = ud;
    char *raw = tq__memdup(line, len, 1);
    char *text = raw ? tq_text_printable(raw) : NULL;
    worker_log(s->owner, TQ_LOG_DEBUG, "job %lld stderr: %s", (long long)s->job.id,
               text ? text : "(out of memory)");
    free(text);
    free(raw);
}

/* The longest TQ_PARENTS a handler gets in its environment; more parents
 * go to a file (TQ_PARENTS_FILE). */
#define PARENTS_ENV_MAX 8192

/* For a command whose job has parents: "TQ_PARENTS=" their ids with commas
 * between, or "TQ_PARENTS_FILE=" a file of them, one a line, removed with
 * the slot; *out NULL for a job without. 0, or the reason in err. */
static int parents_env(tq_worker *w, slot *s, char **out, char *err, size_t errlen)
{
    *out = NULL;
    if (s->job.nparents <= 0)
        return 0;
    int64_t *v = NULL;
    size_t n = 0;
    int rc = tq_job_parents(&v, &n, w->db, s->job.id);
    if (rc) {
        snprintf(err, errlen, "cannot read the parents of job %lld: %s",
                 (long long)s->job.id, tq_errmsg(w->db));
        return rc;
    }
    const size_t cap = n * 21 + PATH_MAX + 32;
    char *text = malloc(cap);
    if (!text) {
        tq_free(v);
        snprintf(err, errlen, "out of memory");
        return TQ_ENOMEM;
    }
    size_t k = (size_t)sprintf(text, "TQ_PARENTS=");
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(text + k, i ? ",%lld" : "%lld", (long long)v[i]);
    if (k > PARENTS_ENV_MAX) {
        const char *dir = getenv("TMPDIR");
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/tq-parents-XXXXXX", dir && *dir ? dir : "/tmp");
        int fd = mkostemp(path, O_CLOEXEC);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        int bad = !f;
        for (size_t i = 0; i < n && !bad; i++)
            bad = fprintf(f, "%lld\n", (long long)v[i]) < 0;
        if (f)
            bad = fclose(f) != 0 || bad;
        else if (fd >= 0)
            close(fd);
        if (bad || !(s->parents_file = tq__strdup(path))) {
            snprintf(err, errlen, "cannot write the parents of job %lld to %.100s: %s",
                     (long long)s->job.id, path, strerror(errno ? errno : ENOMEM));
            if (fd >= 0)
                unlink(path);
            free(text);
            tq_free(v);
            return TQ_ESYS;
        }
        snprintf(text, cap, "TQ_PARENTS_FILE=%s", path);
    }
    tq_free(v);
    *out = text;
    return 0;
}

/* Command mode: starts job in a free slot. */
static int start_job(tq_worker *w, size_t qi, tq_job *job)
{
    slot *s = NULL;
    char err[256];
    for (int i = 0; i < w->concurrency && !s; i++)
        if (w->slots[i].state == SLOT_FREE)
            s = &w->slots[i];
    if (!s) /* cannot happen: jobs start only in free slots */
        return tq__seterr(w->db, TQ_EINVAL, "no free slot for a claimed job");
    s->job = *job;
    s->qi = qi;
    s->state = SLOT_RUNNING;
    s->started = tq__mono_us();
    mark_start(w, s);
    if (w->timeout_us)
        s->deadline = s->started + w->timeout_us;
    char *parents = NULL;
    int why = parents_env(w, s, &parents, err, sizeof err);
    if (!why)
        why =
            tq__child_start(&s->child, w->path, (const char *const *)w->argv, &s->job,
                            parents, w->qinfo[qi].results, w->reaper.fd, err, sizeof err);
    free(parents);
    if (why) {
        s->release = 1;
        int rc = finish_slot(w, s, 0, NULL);
        start_failed(w, why == TQ_EINVAL, err);
        return rc;
    }
    if (w->log_jobs) {
        s->child.on_line = stderr_line;
        s->child.line_ud = s;
    }
    s->child.on_control = control_line;
    s->child.control_ud = s;
    w->start_failing_since = 0;
    w->start_backoff = 0;
    return 0;
}

/* How many jobs to hold beyond the running ones: about PREFETCH_WINDOW_US of
 * work at the recent mean run time, none until a job has finished. */
static size_t target_held(const tq_worker *w)
{
    if (!w->prefetch || !w->avg_run_us)
        return 0;
    int64_t n = (int64_t)w->concurrency * PREFETCH_WINDOW_US / w->avg_run_us;
    return n > (int64_t)w->prefetch ? w->prefetch : (size_t)n;
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
    if (!w->prefetch || !w->avg_run_us)
        return 0;
    int64_t n = (int64_t)w->concurrency * (LIMITED_HOLD_US / 2) / w->avg_run_us;
    if (w->handler) /* the threads start held jobs */
        pthread_mutex_lock(&w->mu);
    const int64_t gap = w->avg_start_gap_us;
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    if (gap && n > (LIMITED_HOLD_US / 2) / gap)
        n = (LIMITED_HOLD_US / 2) / gap;
    if (n > (int64_t)w->limited_cap)
        n = (int64_t)w->limited_cap;
    return (size_t)n;
}

/* After a rate-limited queue's claim of up to room jobs: the cap on held
 * jobs halves when some went back unstarted since the claim before (down
 * to none), grows by a quarter when the claim got all it asked for, and
 * otherwise comes down to twice what it got (the rate had no more tokens,
 * or the queue no more jobs). */
static void limited_claimed(tq_worker *w, size_t room, size_t claimed)
{
    size_t cap = w->limited_cap;
    if (w->limited_expired)
        cap /= 2;
    else if (claimed >= room)
        cap = cap + cap / 4 + 1 < w->prefetch ? cap + cap / 4 + 1 : w->prefetch;
    else if (cap > 2 * claimed)
        cap = 2 * claimed;
    w->limited_cap = cap;
    w->limited_expired = 0;
}

/* The number of held jobs (the threads take them in callback mode). */
static size_t held_count(tq_worker *w)
{
    if (!w->handler)
        return w->nheld;
    pthread_mutex_lock(&w->mu);
    size_t n = w->nheld;
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* Callback mode: threads wake the loop to claim more when the held jobs
 * fall below half the target. */
static void set_low_water(tq_worker *w, size_t target)
{
    if (!w->handler)
        return;
    pthread_mutex_lock(&w->mu);
    w->low_water = target / 2 > 1 ? target / 2 : 1;
    pthread_mutex_unlock(&w->mu);
}

/* Slots a job may start in now (start_room). */
static int free_slot_count(tq_worker *w)
{
    int n = start_room(w, tq__mono_us()) - running_count(w);
    return n > 0 ? n : 0;
}

static int release_unstartable(tq_worker *w);
static int ride_out(tq_worker *w, int rc);

/* Reads every queue's settings again, gives back the held jobs that may no
 * longer start (release_unstartable), and then lets the rest start. */
static int reread_settings(tq_worker *w)
{
    int64_t asked;
    int rc = refresh_queues(w, &asked);
    if (rc)
        return ride_out(w, rc);
    const int64_t answered = tq__mono_us();
    if ((rc = release_unstartable(w)))
        return rc;
    settings_seen(w, SIZE_MAX, asked, answered);
    return 0;
}

/* Held jobs wait for their queues' settings to be read (settings_fresh):
 * they are read now, and the ones that may still start, start. */
static int refresh_stale(tq_worker *w)
{
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    const int stale = w->stale_settings;
    w->stale_settings = 0;
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    if (!stale || w->disconnected)
        return 0;
    int rc = reread_settings(w);
    if (!rc && w->handler) {
        pthread_mutex_lock(&w->mu);
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    return rc;
}

/* Command mode: starts held jobs, oldest first, while slots are free; if a
 * held job waits for its queue's settings, reads them and goes on. */
static int start_held(tq_worker *w)
{
    if (w->handler)
        return 0; /* the threads take them */
    int rc = 0, free_slots = free_slot_count(w);
    held_job h;
    for (int round = 0; round < 2 && !rc; round++) {
        while (!rc && !w->stop_requested && free_slots > 0 && pop_startable(w, &h)) {
            free_slots--;
            rc = start_job(w, h.qi, &h.job);
            if (w->start_cap) /* a start failed: the room is smaller now */
                free_slots = free_slot_count(w);
        }
        if (rc || !w->stale_settings || free_slots <= 0)
            break;
        rc = refresh_stale(w);
    }
    return rc;
}

/*
 * Takes claimed jobs (those whose start the claim recorded first, see
 * tq__jobs_sort) into the held ring, and starts what can start. start_by:
 * the jobs' (0: none), but at_once_by for those the free slots take. A job out
 * of attempts is ended as failed without running (tq__job_out_of_attempts).
 * The claims asked for no more than the ring has room for.
 */
static int take_jobs(tq_worker *w, size_t qi, tq_job *jobs, size_t n, int64_t sent,
                     int64_t lease_us, int64_t start_by, int64_t at_once_by, int chain,
                     int confirms)
{
    int rc = 0;
    size_t taken = 0;
    const int room = start_by ? start_room(w, tq__mono_us()) : 0;
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    /* Jobs for the slots free now (counted with the held ones, under the
     * same lock) start at once: they get at_once_by instead. */
    const int free_slots = room - running_count_locked(w);
    /* A claim that took jobs saw the queue unpaused, and its limits as the
     * worker knew them, unless it found a rate the worker did not know of:
     * then its held jobs wait for the settings to be read. */
    if (n && confirms)
        settings_seen_locked(w, qi, sent, tq__mono_us());
    else if (n)
        w->settings_until[qi] = 0;
    size_t at_once = free_slots > 0 && (size_t)free_slots > w->nheld
                         ? (size_t)free_slots - w->nheld
                         : 0;
    for (size_t i = 0; i < n && !rc; i++) {
        held_job h = {jobs[i], qi, lease_us, sent + lease_us, 0, 0};
        h.serial = chain && h.job.group;
        memset(&jobs[i], 0, sizeof jobs[i]); /* now ours */
        if (tq__job_out_of_attempts(&h.job)) {
            char why[96];
            snprintf(why, sizeof why, "not run: its %d attempt(s) were used up",
                     h.job.max_attempts);
            rc = add_held_ack(w, &h, TQ__ACK_FAIL, why);
            tq__job_clear(&h.job);
        } else if (w->nheld < w->cap_held) {
            h.start_by = at_once ? at_once_by : start_by;
            if (at_once)
                at_once--;
            *held_at(w, w->nheld++) = h;
            taken++;
            if (h.start_by && (!w->start_by_next || h.start_by < w->start_by_next))
                w->start_by_next = h.start_by;
        } else { /* cannot happen */
            tq__job_clear(&h.job);
            rc = tq__seterr(w->db, TQ_EINVAL, "no room for claimed jobs");
        }
    }
    if (w->handler) {
        if (taken)
            pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    return rc ? rc : start_held(w);
}

/* Which held jobs release_held gives back: those of queue qi (every
 * queue's when SIZE_MAX); with unbounded_only, only those without a
 * start_by (claimed as a queue without limits); with chained_only, only
 * those claimed in a chain; with late_at, only those whose start_by
 * passed before it. */
typedef struct held_sel {
    size_t qi;
    int unbounded_only, chained_only;
    int64_t late_at;
} held_sel;

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
static int release_held(tq_worker *w, held_sel sel, size_t *gone)
{
    int rc = 0;
    size_t n = 0;
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    size_t kept = 0, count = w->nheld;
    int64_t next = 0;
    for (size_t i = 0; i < count; i++) {
        held_job h = *held_at(w, i);
        if (rc || !held_goes(&h, &sel)) {
            if (h.start_by && (!next || h.start_by < next))
                next = h.start_by;
            *held_at(w, kept++) = h;
            continue;
        }
        rc = add_held_ack(w, &h, TQ__ACK_RELEASE, NULL);
        tq__job_clear(&h.job);
        n++;
    }
    w->nheld = kept;
    w->start_by_next = next;
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    if (gone)
        *gone = n;
    return rc;
}

/* Held jobs of a rate-limited queue went back, not started in time: the
 * next claims hold fewer (limited_claimed). */
static void note_late(tq_worker *w, size_t n)
{
    w->limited_expired = 1;
    worker_log(w, TQ_LOG_DEBUG,
               "%zu held job(s) of a limited queue given back unstarted: not started "
               "within %lld ms of their claim",
               n, (long long)LIMITED_HOLD_US / 1000);
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
static size_t chain_of(const tq_worker *w, const tq_queue_info *q, size_t target)
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
            rc = release_held(w, (held_sel){.qi = qi, .unbounded_only = !all}, NULL);
        else if (!chain_of(w, q, SIZE_MAX))
            rc = release_held(w, (held_sel){.qi = qi, .chained_only = 1}, NULL);
    }
    return rc;
}

/* Gives back the held jobs not started by their start_by (pop_startable
 * finds only those at the head of the ring). */
static int drop_late(tq_worker *w, int64_t now)
{
    if (!w->start_by_next || now <= w->start_by_next)
        return 0;
    size_t n = 0;
    int rc = release_held(w, (held_sel){.qi = SIZE_MAX, .late_at = now}, &n);
    if (n)
        note_late(w, n);
    return rc;
}

static int same_claim(const tq__ack *a, const tq_job *j)
{
    return a->id == j->id && a->claim == j->claim;
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
static size_t running_beats(tq_worker *w, tq__ack *acks, int unrecorded_only)
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
                              .started_us = started_ago(s->started)};
    }
    return n;
}

/* With mu held in callback mode: the store refused an acknowledgement of
 * the job running in s (its lease expired and it went to another claim, or
 * it was cancelled): its result will be discarded, its command is stopped,
 * and its start is no longer one to record. */
static void slot_lost(tq_worker *w, slot *s)
{
    s->lost = 1;
    if (!s->start_recorded) {
        s->start_recorded = 1;
        w->unrecorded--;
    }
    if (w->argv) {
        tq__child_kill(&s->child, SIGTERM);
        s->kill_at = tq__mono_us() + w->grace_us;
    }
}

/* The beats of running_beats came back: those runs' starts are recorded,
 * or their claims are lost. The slots may have moved on meanwhile
 * (callback threads), so each is found again by its claim. The starts
 * still unrecorded are those made since: the oldest of them dates the next
 * exchange. */
static void starts_recorded(tq_worker *w, const tq__ack *beats, size_t n)
{
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    int64_t oldest = INT64_MAX;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING || s->start_recorded)
            continue;
        size_t k = 0;
        while (k < n && !same_claim(&beats[k], &s->job))
            k++;
        if (k < n && beats[k].result == 0) {
            s->start_recorded = 1;
            w->unrecorded--;
        } else if (k < n) {
            slot_lost(w, s);
        } else if (s->started < oldest) {
            oldest = s->started;
        }
    }
    if (w->unrecorded)
        w->unrecorded_since = oldest == INT64_MAX ? tq__mono_us() : oldest;
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
}

/*
 * The store refused an exchange that carried handlers' error texts. They
 * are valid UTF-8 without NUL (add_ack), which both engines take; a store
 * may still refuse one (a trigger or a constraint of its owner's, a limit
 * on its size), and one job's text must not stop the worker: the texts of
 * the pending acks (acks[0..nacks), mirrored there) are replaced by a
 * fixed one, and the reason goes to the log. Returns whether any was.
 */
static const char text_refused[] = "the store refused this job's error text; see the "
                                   "worker's log";
static const char result_refused[] = "the store refused this job's result; see the "
                                     "worker's log";
static int drop_error_texts(tq_worker *w, tq__ack *acks, size_t nacks)
{
    size_t n = 0;
    for (size_t i = 0; i < nacks; i++) {
        if (w->acks[i].output) { /* a result the store may refuse too: a failure */
            free(w->acks[i].output);
            w->acks[i].output = NULL;
            w->acks[i].ack.output = acks[i].output = NULL;
            w->acks[i].ack.kind = acks[i].kind = TQ__ACK_FAIL;
            w->acks[i].ack.delay_us = acks[i].delay_us = 1000000;
            w->acks[i].ack.error = acks[i].error = result_refused;
            n++;
            continue;
        }
        if (!w->acks[i].error)
            continue;
        free(w->acks[i].error);
        w->acks[i].error = NULL;
        /* a progress goes without its text; an error text says why */
        w->acks[i].ack.error = acks[i].error =
            acks[i].kind == TQ__ACK_PROGRESS ? NULL : text_refused;
        n++;
    }
    if (n) {
        char *why = tq_text_printable(tq_errmsg(w->db));
        worker_log(w, TQ_LOG_WARN,
                   "the store refused %zu job(s)' error text or result (%.300s); "
                   "sending without them (a job whose result it refused fails)",
                   n, why ? why : "out of memory");
        free(why);
    }
    return n > 0;
}

/* Sends the pending acks, the starts the store has not recorded yet, and
 * the claim (may be NULL). On failure the acks stay pending for the next
 * pass. */
static int exchange(tq_worker *w, tq__claim *claim, size_t qi, int *claimed)
{
    tq__ack stack[64], *acks = stack;
    tq_job *jobs = NULL;
    size_t n = 0, nacks = w->nacks, nbeats = 0;
    *claimed = 0;
    size_t cap = nacks + (size_t)w->concurrency;
    if (cap > 64 && !(acks = malloc(cap * sizeof *acks)))
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < nacks; i++) {
        acks[i] = w->acks[i].ack;
        acks[i].started_us = w->acks[i].started ? started_ago(w->acks[i].started) : 0;
    }
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    if (w->unrecorded)
        nbeats = running_beats(w, acks + nacks, 1);
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    if (nacks + nbeats == 0 && !claim) { /* nothing to send after all */
        starts_recorded(w, NULL, 0);
        if (acks != stack)
            free(acks);
        return 0;
    }
    const int64_t sent = tq__mono_us();
    int rc =
        w->db->engine->exchange(w->db, w->name, acks, nacks + nbeats, claim, &jobs, &n);
    if ((rc == TQ_EINVAL || rc == TQ_EDB) && drop_error_texts(w, acks, nacks))
        rc = w->db->engine->exchange(w->db, w->name, acks, nacks + nbeats, claim, &jobs,
                                     &n);
    if (!rc)
        store_wrote(w);
    if (!rc) {
        for (size_t i = 0; i < nacks; i++) {
            if (acks[i].kind == TQ__ACK_PROGRESS) {
                /* lost or not, the run's own end says what became of it */
            } else if (acks[i].result == TQ_ELOST) {
                w->counters.lost++;
                worker_log(w, TQ_LOG_WARN,
                           "job %lld: lease was lost before its result was saved; "
                           "result discarded",
                           (long long)acks[i].id);
            } else if (acks[i].kind == TQ__ACK_DONE) {
                w->counters.done++;
            } else if (acks[i].kind == TQ__ACK_FAIL || acks[i].kind == TQ__ACK_DISCARD) {
                w->counters.failed++;
                if (w->log)
                    log_end(w, &w->acks[i]);
            } else if (acks[i].kind == TQ__ACK_RELEASE ||
                       acks[i].kind == TQ__ACK_SNOOZE) {
                w->counters.released++;
            }
            free(w->acks[i].error);
            free(w->acks[i].output);
        }
        w->nacks = 0;
        const int held_back = w->output_pending > OUTPUT_PENDING_MAX;
        w->output_pending = 0;
        if (held_back && w->handler) { /* threads waiting may start held jobs again */
            pthread_mutex_lock(&w->mu);
            pthread_cond_broadcast(&w->cv);
            pthread_mutex_unlock(&w->mu);
        }
        starts_recorded(w, acks + nacks, nbeats); /* also dates the next beats */
        if (claim && claim->max && claim->lease_us < w->beat_lease_us)
            w->beat_lease_us = claim->lease_us;
        for (size_t i = nacks; i < nacks + nbeats; i++)
            if (acks[i].delay_us < w->beat_lease_us)
                w->beat_lease_us = acks[i].delay_us;
        w->counters.claimed += (int64_t)n;
        tq__jobs_sort(jobs, n, claim ? claim->order : TQ_FIFO);
        /* A rate-limited claim's jobs beyond the free slots must start
         * within LIMITED_HOLD_US of the moment the store took their
         * tokens, which was no sooner than taken_after_us after the
         * sending. Those in the free slots start now, as they always did,
         * trailing their tokens by the commit and the answer: within
         * LIMITED_HOLD_US of the answer (unless starts are held back: a
         * handler that cannot start, results waiting for the store), or
         * they go back too. Not from the tokens: a slow disk would send
         * every claim's jobs back. */
        const int rated = claim && (claim->rate || claim->rate_found);
        rc = take_jobs(w, qi, jobs, n, sent, claim ? claim->lease_us : 0,
                       rated ? sent + claim->taken_after_us + LIMITED_HOLD_US : 0,
                       rated ? tq__mono_us() + LIMITED_HOLD_US : 0,
                       claim && claim->chain > 1,
                       !claim || !(claim->rate_found && !claim->rate));
        tq_job_array_free(jobs, n);
        *claimed = (int)n;
    }
    if (acks != stack)
        free(acks);
    return rc;
}

/* Extends the lease of every running and held job (one fenced exchange),
 * recording the starts the store has not heard of. Of the lost ones
 * (expired and taken, or cancelled): running ones are marked (their result
 * is discarded) and their commands stopped, held ones are dropped. In
 * callback mode the threads move jobs meanwhile, so the lost ones are found
 * again by their claim. The next beat is paced by the shortest lease this
 * one granted. */
static int heartbeat(tq_worker *w)
{
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    size_t cap = (size_t)w->concurrency + w->nheld, n = 0, nlost = 0, nrun = 0;
    tq__ack *acks = calloc(cap ? cap : 1, sizeof *acks);
    if (acks)
        n = nrun = running_beats(w, acks, 0);
    for (size_t i = 0; i < w->nheld && acks; i++) {
        const held_job *h = held_at(w, i);
        acks[n++] = (tq__ack){.id = h->job.id,
                              .claim = h->job.claim,
                              .kind = TQ__ACK_BEAT,
                              .delay_us = w->qinfo[h->qi].lease_us};
    }
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    if (!acks)
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    const int64_t sent = tq__mono_us();
    int rc = n ? w->db->engine->exchange(w->db, w->name, acks, n, NULL, NULL, NULL) : 0;
    if (n && !rc)
        store_wrote(w);
    if (!rc) {
        w->beat_lease_us = INT64_MAX;
        for (size_t k = 0; k < n; k++)
            if (acks[k].delay_us < w->beat_lease_us)
                w->beat_lease_us = acks[k].delay_us;
        starts_recorded(w, acks, nrun);
    }
    for (size_t k = 0; k < n && !rc; k++)
        if (acks[k].result == TQ_ELOST)
            acks[nlost++] = acks[k];
    if (!rc) {
        /* In one critical section: the lost ones are marked or dropped, the
         * other held jobs dated by this beat (every held job now was held
         * when the beat was taken: only this thread adds any). */
        if (w->handler)
            pthread_mutex_lock(&w->mu);
        for (int i = 0; i < w->concurrency && nlost; i++) {
            slot *s = &w->slots[i];
            for (size_t k = 0; k < nlost && s->state == SLOT_RUNNING && !s->lost; k++)
                if (same_claim(&acks[k], &s->job))
                    slot_lost(w, s);
        }
        size_t kept = 0, count = w->nheld;
        for (size_t i = 0; i < count; i++) { /* keep the rest, in order */
            held_job h = *held_at(w, i);
            size_t k = 0;
            while (k < nlost && !same_claim(&acks[k], &h.job))
                k++;
            if (k == nlost) {
                h.lease_us = w->qinfo[h.qi].lease_us; /* as the beat asked */
                h.lease_end = sent + h.lease_us;
                *held_at(w, kept++) = h;
                continue;
            }
            w->counters.lost++;
            tq__job_clear(&h.job);
        }
        w->nheld = kept;
        if (w->handler) {
            if (kept) /* a renewed lease may let a thread waiting for one start it */
                pthread_cond_broadcast(&w->cv);
            pthread_mutex_unlock(&w->mu);
        }
        for (size_t k = 0; k < nlost; k++) /* logged unlocked: sinks may block */
            worker_log(
                w, TQ_LOG_WARN,
                "job %lld: lease lost (expired and taken, or cancelled); stopping it",
                (long long)acks[k].id);
    }
    free(acks);
    if (!rc && !w->name_taken &&
        (rc = w->db->engine->worker_beat(w->db, &w->me)) == TQ_EINUSE) {
        /* Our registration lapsed (the worker stalled or was cut off past
         * its lease) and another process took the name: two workers must
         * not share one, so this one stops as on SIGTERM and says so. */
        worker_log(w, TQ_LOG_ERROR,
                   "worker name '%s' has been registered by another process: stopping",
                   w->name);
        w->name_taken = 1;
        w->stop_requested = 1;
        rc = 0;
    }
    return rc;
}

/* Timeouts and the stop deadline: signal children whose time is up. */
static void enforce_deadlines(tq_worker *w, int64_t now, int64_t stop_at)
{
    if (!w->argv)
        return;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        if (s->child.exited) { /* only its group is left: see group_ended */
            if (s->kill_at && now >= s->kill_at) {
                tq__child_kill(&s->child, SIGKILL);
                s->kill_at = 0;
            }
            continue;
        }
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
    struct pollfd fds[2 + 5 * TQ_CONCURRENCY_MAX]; /* wake, notify, 5 per slot */
    nfds_t n = 0;
    int need_reap_poll = 0;
    fds[n++] = (struct pollfd){w->wake[0], POLLIN, 0};
    int nfd = (w->db->engine->caps & TQ__CAP_NOTIFY) && !w->disconnected && w->listening
                  ? w->db->engine->notify_fd(w->db)
                  : -1;
    if (nfd >= 0)
        fds[n++] = (struct pollfd){nfd, POLLIN, 0};
    if (w->argv)
        for (int i = 0; i < w->concurrency; i++) {
            tq__child *c = &w->slots[i].child;
            if (w->slots[i].state != SLOT_RUNNING)
                continue;
            if (c->exited) /* its group lingers: look again soon */
                need_reap_poll = 1;
            else if (c->pidfd >= 0)
                fds[n++] = (struct pollfd){c->pidfd, POLLIN, 0};
            else
                need_reap_poll = 1;
            if (c->in_fd >= 0)
                fds[n++] = (struct pollfd){c->in_fd, POLLOUT, 0};
            if (c->err_fd >= 0)
                fds[n++] = (struct pollfd){c->err_fd, POLLIN, 0};
            if (c->ctl_fd >= 0)
                fds[n++] = (struct pollfd){c->ctl_fd, POLLIN, 0};
            if (c->out_fd >= 0)
                fds[n++] = (struct pollfd){c->out_fd, POLLIN, 0};
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

#define RECONNECT_MIN_US  100000LL
#define RECONNECT_MAX_US  10000000LL
#define FULL_RETRY_MAX_US 5000000LL

/*
 * The store errors a worker rides out, returning 0 for them: busy (try
 * again on the next pass), a full disk (the same, saying so once until a
 * write goes through: the handlers' results wait, and are sent once there
 * is room) and, for engines that can reconnect, a lost
 * connection (one log line, then reconnect with backoff while the running
 * handlers carry on; their acknowledgements wait and are sent, fenced, once
 * connected). Anything else is returned.
 */
static int ride_out(tq_worker *w, int rc)
{
    if (rc == TQ_EBUSY) {
        worker_log(w, TQ_LOG_WARN, "store busy, will retry: %s", tq_errmsg(w->db));
        return 0;
    }
    if (rc == TQ_EFULL) {
        if (!w->store_full)
            worker_log(w, TQ_LOG_WARN, "%s; will retry until there is room",
                       tq_errmsg(w->db));
        w->store_full = 1;
        /* Not at once: 100 ms, doubling up to 5 s. */
        w->full_backoff = w->full_backoff ? w->full_backoff * 2 : RECONNECT_MIN_US;
        if (w->full_backoff > FULL_RETRY_MAX_US)
            w->full_backoff = FULL_RETRY_MAX_US;
        w->full_retry_at = tq__mono_us() + w->full_backoff;
        return 0;
    }
    if (rc == TQ_ECONN && (w->db->engine->caps & TQ__CAP_NETWORK)) {
        if (!w->disconnected) {
            worker_log(w, TQ_LOG_WARN, "%s; reconnecting", tq_errmsg(w->db));
            w->disconnected = 1;
            w->reconnect_backoff = 0;
            w->reconnect_at = tq__mono_us();
        }
        return 0;
    }
    return rc;
}

/* Gives back the held jobs pop_startable set aside, and says so. */
static int give_back_short(tq_worker *w)
{
    int rc = 0;
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    size_t n = w->nshort, expired = w->nexpired;
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = add_held_ack(w, &w->short_held[i], TQ__ACK_RELEASE, NULL);
        tq__job_clear(&w->short_held[i].job);
    }
    w->nshort = w->nexpired = 0;
    if (w->handler) {
        if (n && w->nheld)
            pthread_cond_broadcast(&w->cv); /* some may have waited for room */
        pthread_mutex_unlock(&w->mu);
    }
    if (n > expired)
        worker_log(w, TQ_LOG_WARN,
                   "%zu held job(s) given back unstarted: less than a third of their "
                   "lease was surely left (heartbeats could not reach the store)",
                   n - expired);
    if (expired)
        note_late(w, expired);
    return rc;
}

/* One reconnection attempt when due; returns 1 once connected again. */
static int try_reconnect(tq_worker *w, int64_t now)
{
    tq *db = w->db;
    if (now < w->reconnect_at)
        return 0;
    if (db->engine->reconnect(db) != 0) {
        /* Doubling, up to a tenth of the shortest lease: back within that
         * of the store's return, while the jobs' leases still hold. */
        int64_t most = RECONNECT_MAX_US;
        for (size_t i = 0; i < w->nqueues; i++)
            if (w->qinfo[i].lease_us / 10 < most)
                most = w->qinfo[i].lease_us / 10;
        if (most < RECONNECT_MIN_US)
            most = RECONNECT_MIN_US;
        w->reconnect_backoff =
            w->reconnect_backoff ? w->reconnect_backoff * 2 : RECONNECT_MIN_US;
        if (w->reconnect_backoff > most)
            w->reconnect_backoff = most;
        w->reconnect_at = now + w->reconnect_backoff;
        worker_log(w, TQ_LOG_DEBUG, "%s", tq_errmsg(db));
        return 0;
    }
    w->disconnected = 0;
    w->beat_failed = 1; /* beat at once; no rescue before that beat */
    w->last_beat = 0;
    if ((db->engine->caps & TQ__CAP_NOTIFY) && db->engine->listen(db))
        worker_log(w, TQ_LOG_WARN, "cannot listen for new jobs, polling only: %s",
                   tq_errmsg(db));
    tq__clearerr(db);
    worker_log(w, TQ_LOG_WARN, "reconnected to the store; %zu acknowledgement(s) to send",
               w->nacks);
    return 1;
}

/* Lowers *t to due_in, the time until something is due (at least 1 us). */
static void sooner(int64_t *t, int64_t due_in)
{
    if (due_in < 1)
        due_in = 1;
    if (due_in < *t)
        *t = due_in;
}

/* Running jobs whose start the store has not recorded yet, and since when
 * there have been some. */
static size_t unrecorded_count(tq_worker *w, int64_t *since)
{
    if (w->handler)
        pthread_mutex_lock(&w->mu);
    size_t n = w->unrecorded;
    *since = w->unrecorded_since;
    if (w->handler)
        pthread_mutex_unlock(&w->mu);
    return n;
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
    int rc = 0, claimed;
    for (int i = 0; i < w->concurrency && w->argv; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        tq__child_kill(&s->child, SIGKILL);
        while (!tq__child_reap(&s->child))
            usleep(1000);
        s->release = 1;
        if (!rc)
            rc = finish_slot(w, s, 0, "the worker stopped on an error");
    }
    if (!rc)
        rc = release_held(w, (held_sel){.qi = SIZE_MAX}, NULL);
    if (!rc)
        rc = give_back_short(w);
    size_t n = w->nacks;
    if (!rc && n && !w->disconnected)
        rc = exchange(w, NULL, 0, &claimed);
    if (w->nacks)
        worker_log(w, TQ_LOG_WARN,
                   "%zu job(s) could not be given back (%s); they come back when their "
                   "leases expire",
                   w->nacks,
                   w->disconnected ? "no connection to the store" : tq_errmsg(db));
    else if (n)
        worker_log(w, TQ_LOG_INFO, "gave back %zu job(s) before stopping", n);
    memcpy(db->errmsg, keep, sizeof keep);
}

/* ---- the phases of a pass ------------------------------------------------ */

/* What one pass of the loop (tq_worker_run) learned, for the phases after
 * the one that learned it. */
typedef struct pass {
    int64_t now;       /* monotonic; taken again before the leases */
    int free_slots;    /* slots a job may start in (free_slot_count) */
    int claimed;       /* jobs this pass's claims took */
    int tried;         /* a claim went to the store */
    int running;       /* after the claims, from when nothing starts */
    size_t nheld;      /* likewise */
    size_t unrecorded; /* running jobs whose start the store lacks */
    int64_t unrecorded_since, beat_every;
} pass;

/* A stop was asked for: claim nothing more, give back the held jobs, and
 * give the running ones the grace time; asked again, end the grace now:
 * the handlers are killed and their jobs go back unspent. */
static int stop_if_asked(tq_worker *w, int64_t now)
{
    int rc = 0;
    if (w->stop_requested && !w->stopping) {
        char d[32];
        int running = running_count(w);
        w->stopping = 1;
        w->stop_at = now + w->grace_us;
        if (running && w->grace_us < 1000) /* --grace 0: the tool's 1 us */
            worker_log(w, TQ_LOG_INFO,
                       "stopping: no new jobs; %d running job(s) stopped now, no grace",
                       running);
        else if (running)
            worker_log(w, TQ_LOG_INFO,
                       "stopping: no new jobs; %d running job(s) get %s to finish",
                       running, tq_duration_format(d, sizeof d, w->grace_us));
        else
            worker_log(w, TQ_LOG_INFO, "stopping: no new jobs; nothing running");
        rc = release_held(w, (held_sel){.qi = SIZE_MAX}, NULL);
    }
    if (w->stop_now && w->stopping && !w->stopped_now) {
        int killed = 0;
        w->stopped_now = 1;
        if (w->argv) /* callbacks cannot be cut short: their grace stands */
            w->stop_at = now;
        for (int i = 0; w->argv && i < w->concurrency; i++) {
            slot *s = &w->slots[i];
            if (s->state != SLOT_RUNNING)
                continue;
            /* A handler that has exited said how its job went (only its
             * group is left to end); a timeout's failure stands too. The
             * others are cut short: their jobs go back. */
            if (!tq__child_reap(&s->child) && !s->timed_out) {
                s->release = 1;
                killed++;
            }
            tq__child_kill(&s->child, SIGKILL);
            s->kill_at = 0;
        }
        if (w->argv)
            worker_log(w, TQ_LOG_INFO,
                       "stopping now: killed %d handler(s); their jobs go back to ready",
                       killed);
        else if (running_count(w))
            worker_log(w, TQ_LOG_WARN,
                       "stopping now: callback handlers cannot be killed; waiting for "
                       "them");
    }
    return rc;
}

/* Finished jobs become pending acks; held jobs start in the freed slots;
 * held jobs whose lease ran short, or not started by their start_by, go
 * back. */
static int reap_and_start(tq_worker *w)
{
    int rc;
    if ((rc = collect(w)) || (rc = send_progress(w, tq__mono_us(), &w->progress_next)) ||
        (rc = refresh_stale(w)) || (rc = start_held(w)) ||
        (rc = drop_late(w, tq__mono_us())) || (rc = give_back_short(w)))
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
    if (w->disconnected && !try_reconnect(w, now)) {
        t = 50000;
        sooner(&t, w->reconnect_at - now);
    } else if (w->store_full && now < w->full_retry_at) {
        t = w->full_retry_at - now;
    } else {
        return 0;
    }
    enforce_deadlines(w, now, w->stopping ? w->stop_at : 0);
    if (w->stopping && running_count(w) == 0 && (w->disconnected || now >= w->stop_at)) {
        if (!w->disconnected)
            worker_log(
                w, TQ_LOG_WARN,
                "stopping with %zu result(s) unsaved (the disk is full); those jobs "
                "come back when their leases expire",
                w->nacks);
        *leave = 1; /* unsent acks: those jobs come back by lease */
        return 1;
    }
    if (w->stopping)
        sooner(&t, w->stop_at - now);
    wait_events(w, t);
    return 1;
}

/* Now and then: the store is still the one opened, the queues' settings
 * (held jobs of a paused queue go back), and the bound on every wait for
 * the store. */
/* Command mode: a reaper that died (killed by hand, by the OOM killer) is
 * replaced, and told of the groups running now; the next heartbeat names
 * the new one. */
static void keep_reaper(tq_worker *w)
{
    if (!w->argv || !tq__reaper_gone(&w->reaper))
        return;
    tq__reaper_stop(&w->reaper);
    char why[128];
    if (tq__reaper_start(&w->reaper, why, sizeof why)) {
        worker_log(w, TQ_LOG_WARN,
                   "the handlers' reaper is gone and cannot be started again (%s): a "
                   "crash of this worker would leave its handlers' processes running",
                   why);
        w->me.reaper_pid = 0;
        return;
    }
    worker_log(w, TQ_LOG_WARN, "the handlers' reaper was gone: started a new one");
    w->me.reaper_pid = w->reaper.pid;
    for (int i = 0; i < w->concurrency; i++) {
        const tq__child *c = &w->slots[i].child;
        if (w->slots[i].state == SLOT_RUNNING && c->pid > 0 && !c->group_done)
            tq__reaper_watch(w->reaper.fd, c->pid);
    }
}

static int maintain_settings(tq_worker *w, const pass *p)
{
    tq *db = w->db;
    int rc;
    if (!w->stopping && p->now - w->last_refresh >= REFRESH_EVERY_US) {
        if ((rc = db->engine->same_store(db)) || (rc = reread_settings(w)))
            return rc;
        keep_reaper(w);
        w->last_refresh = p->now;
    }
    return ride_out(w, set_wait_limit(w));
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

/*
 * Claims when a slot is free (nothing is held then) or the held jobs have
 * run below half their target: enough to fill the slots and the target,
 * one exchange per queue, carrying the pending acks. Returns the store's
 * answer as it came (send_acks rides it out).
 */
static int claim_jobs(tq_worker *w, pass *p)
{
    int rc = 0;
    /* Held jobs take the slots that free up before any claim. While one of
     * the queues has a limit on how many run (serves_limited), none are
     * held: a held job counts as running, and would keep its place from
     * workers with free slots while the limited queue waited for the
     * others to run dry. With a rate limit, fewer, that must start soon. */
    const int limits = serves_limited(w);
    const size_t target = w->stopping || limits == 2 ? 0
                          : limits == 1              ? limited_target(w)
                                                     : target_held(w);
    set_low_water(w, target);
    size_t nheld = held_count(w);
    if (!w->disconnected && !w->stopping && (p->free_slots > 0 || 2 * nheld < target)) {
        for (size_t k = 0; k < w->nqueues && !rc; k++) {
            size_t qi = (w->next_queue + k) % w->nqueues;
            const tq_queue_info *q = &w->qinfo[qi];
            size_t room = (size_t)p->free_slots + target;
            room = room > nheld ? room - nheld : 0;
            if (room == 0)
                break;
            if (q->paused)
                continue;
            /* Holds, all of them (engine.h, STARTS): each start is
             * recorded once it happened. */
            tq__claim c = {.queue = w->queues[qi],
                           .order = q->order,
                           .lease_us = q->lease_us,
                           .max_attempts = q->max_attempts,
                           .max = room,
                           .chain = chain_of(w, q, target),
                           .worker_since = w->me.started_at};
            tq__claim_limits(&c, q);
            int claimed = 0;
            rc = exchange(w, &c, qi, &claimed);
            if (!rc && c.rate_found && !c.rate)
                w->last_refresh = 0; /* a rate set since: read the settings now */
            if (!rc && c.rate)
                limited_claimed(w, room, (size_t)claimed);
            /* A rate limit stopped it: claim again when a token is due,
             * not at the idle backoff's pace. */
            if (!rc && c.rate_wait_us > 0) {
                const int64_t now = tq__mono_us(), at = now + c.rate_wait_us;
                if (w->rate_retry_at <= now || at < w->rate_retry_at)
                    w->rate_retry_at = at;
            }
            p->tried = 1;
            p->claimed += claimed;
            p->free_slots = free_slot_count(w);
            nheld = held_count(w);
        }
        w->next_queue = (w->next_queue + 1) % w->nqueues;
    }
    /* From here on the loop starts nothing, so these only go down
     * (callback threads may start a held job: only while one is held). */
    p->running = running_count(w);
    p->nheld = held_count(w);
    return rc;
}

/*
 * Acks alone, when no claim carried them: when they have waited long
 * enough or are many, when stopping, and when nothing runs (so that drain
 * sees them); and starts the store has not recorded, once they have waited
 * as long. rc is the claims' answer; the store errors a worker rides out
 * come back as 0.
 */
static int send_acks(tq_worker *w, pass *p, int rc)
{
    const int64_t now = p->now;
    int claimed;
    p->unrecorded = unrecorded_count(w, &p->unrecorded_since);
    if (!w->disconnected && !rc && !p->tried &&
        ((w->nacks &&
          (w->stopping || w->nacks >= ACK_BATCH || now - w->acks_since >= ACK_DELAY_US ||
           (p->running == 0 && p->nheld == 0))) ||
         (p->unrecorded && now - p->unrecorded_since >= ACK_DELAY_US)))
        rc = exchange(w, NULL, 0, &claimed);
    rc = ride_out(w, rc);
    /* as the exchange left it */
    p->unrecorded = unrecorded_count(w, &p->unrecorded_since);
    return rc;
}

/*
 * The jobs' leases and the worker's own registration, then the rescue of
 * expired leases, but only once this worker's own leases are renewed and
 * the results of jobs that ended before that renewal are in: after the
 * store was out of reach, its own jobs' leases may have run out while it
 * ran them, and a rescue first would take them back from under it.
 */
static int maintain_leases(tq_worker *w, pass *p)
{
    tq *db = w->db;
    int rc, claimed;
    const int64_t now = p->now = tq__mono_us();
    p->beat_every = beat_every_us(w);
    if (now - w->last_beat >= p->beat_every) {
        int hb = heartbeat(w);
        if ((rc = ride_out(w, hb)))
            return rc;
        /* A beat that did not go through is tried again soon. */
        w->beat_failed = hb != 0;
        w->last_beat = hb ? now - p->beat_every + RECONNECT_MIN_US : now;
    }
    if (w->disconnected || w->stopping || now - w->last_rescue < RESCUE_EVERY_US ||
        w->beat_failed)
        return 0;
    if ((rc = collect(w)) || (rc = give_back_short(w)))
        return rc;
    if (w->nacks && (rc = ride_out(w, exchange(w, NULL, 0, &claimed))))
        return rc;
    if (w->disconnected || w->nacks)
        return 0;
    int64_t n = 0;
    if ((rc = ride_out(w, db->engine->rescue(db, NULL, 0, &n))))
        return rc;
    if (n)
        worker_log(w, TQ_LOG_WARN, "rescued %lld job(s) whose lease expired",
                   (long long)n);
    w->last_rescue = now;
    return 0;
}

/*
 * Periodic jobs: every worker enqueues the due slots of every schedule
 * (the store lets one of them win each slot), then looks again at the
 * soonest next slot, or in a second for schedules set meanwhile. A failure
 * other than the store's being out of reach is said (once a minute) and
 * does not stop the worker: a role without the grants still runs jobs.
 */
static int run_schedules(tq_worker *w, const pass *p)
{
    if (w->disconnected || w->stopping || p->now < w->schedules_at)
        return 0;
    int64_t n = 0, next = -1;
    int rc = tq_schedule_run(w->db, &n, &next);
    w->schedules_at =
        p->now +
        (next >= 0 && next < SCHEDULES_EVERY_US ? next + 1000 : SCHEDULES_EVERY_US);
    if (rc == TQ_ECONN || rc == TQ_EBUSY || rc == TQ_EFULL)
        return ride_out(w, rc);
    /* A failure of the store's own (a role without the grants) is not
     * tried again each second: each would be an error in its log. A
     * schedule this host cannot read (TQ_EINVAL) stops none of the others. */
    if (rc && rc != TQ_EINVAL)
        w->schedules_at = p->now + 60000000;
    if (rc && (!w->schedules_warned || p->now - w->schedules_warned >= 60000000)) {
        worker_log(w, TQ_LOG_WARN, "periodic jobs not enqueued: %s", tq_errmsg(w->db));
        w->schedules_warned = p->now;
    }
    if (n)
        worker_log(w, TQ_LOG_DEBUG, "enqueued %lld periodic job(s)", (long long)n);
    return 0;
}

/* The index of queue name among the worker's, or -1. */
static int queue_index(const tq_worker *w, const char *name)
{
    for (size_t i = 0; i < w->nqueues; i++)
        if (strcmp(w->queues[i], name) == 0)
            return (int)i;
    return -1;
}

/* Appends to buf (a line being built) what fmt says, after ", " if buf
 * has something already. */
static void append(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used && used + 2 < len)
        used += (size_t)snprintf(buf + used, len - used, ", ");
    va_list ap;
    va_start(ap, fmt);
    if (used < len)
        vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* What the store holds beyond this worker's claims, for its notes: due
 * jobs of other queues (named in list), and of its own queues what is
 * delayed (the soonest due in next), running elsewhere, or ready in a
 * paused queue. */
typedef struct outlook {
    int64_t mine, others, delayed, running, paused, next;
    char list[256];
} outlook;

/* Counts every ready and running row (engine active): asked rarely. A
 * failure only loses the note: -1, the error cleared. */
static int look_around(tq_worker *w, outlook *o)
{
    tq__active *v = NULL;
    size_t n = 0;
    memset(o, 0, sizeof *o);
    o->next = INT64_MAX;
    if (w->db->engine->active(w->db, &v, &n)) {
        tq__clearerr(w->db);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        int qi = queue_index(w, v[i].queue);
        if (qi < 0) {
            o->others += v[i].due;
            if (v[i].due)
                append(o->list, sizeof o->list, "%s (%lld)", v[i].queue,
                       (long long)v[i].due);
            continue;
        }
        o->mine += v[i].due + v[i].delayed + v[i].running;
        o->delayed += v[i].delayed;
        o->running += v[i].running;
        if (w->qinfo[qi].paused)
            o->paused += v[i].due;
        if (v[i].delayed && v[i].next_due_in_us < o->next)
            o->next = v[i].next_due_in_us;
    }
    free(v);
    return 0;
}

/*
 * An idle worker that has claimed nothing yet and finds nothing pending in
 * its queues says once when other queues hold due jobs (a newcomer's jobs
 * in 'mail' and a worker on 'default'), looking again each
 * 6 * NOTE_EVERY_US until it did. known_empty: the caller has just found
 * nothing pending in its queues.
 */
static void note_empty(tq_worker *w, const pass *p, int known_empty)
{
    int pending = 0;
    outlook o;
    if (w->said_empty || w->counters.claimed || !p->tried || p->running || p->nheld ||
        w->disconnected ||
        (w->empty_checked && p->now - w->empty_checked < 6 * NOTE_EVERY_US))
        return;
    w->empty_checked = p->now;
    /* The index seeks of pending before any count. */
    for (size_t i = 0; !known_empty && i < w->nqueues && !pending; i++)
        if (w->db->engine->pending(w->db, w->queues[i], &pending))
            pending = 1;
    tq__clearerr(w->db);
    if (pending || look_around(w, &o) || o.mine || !o.others)
        return;
    w->said_empty = 1;
    char names[200] = "";
    for (size_t i = 0; i < w->nqueues; i++)
        append(names, sizeof names, "'%s'", w->queues[i]);
    worker_log(w, TQ_LOG_WARN,
               "%s %s %s empty, but %lld job(s) are ready in other queues: %s; this "
               "worker takes jobs from %s only (tq work --queue Q)",
               w->nqueues > 1 ? "queues" : "queue", names, w->nqueues > 1 ? "are" : "is",
               (long long)o.others, o.list, names);
}

/*
 * A draining worker that waits (its queues hold jobs it cannot take yet)
 * says what for, once per wait, once the wait has lasted NOTE_WAIT_US (the
 * other workers' last jobs of a run are not worth a note), and at most
 * every NOTE_EVERY_US (a backlog of delayed jobs coming due one by one
 * ends a wait with each).
 */
static void note_waiting(tq_worker *w, const pass *p, int waiting)
{
    const int64_t now = p->now;
    outlook o;
    char what[320] = "", d[32], t[40];
    if (!waiting) {
        w->waiting_since = 0;
        w->said_waiting = 0;
        return;
    }
    if (!w->waiting_since)
        w->waiting_since = now;
    if (w->said_waiting || w->disconnected || now - w->waiting_since < NOTE_WAIT_US ||
        (w->wait_checked && now - w->wait_checked < NOTE_EVERY_US))
        return;
    w->wait_checked = now;
    w->said_waiting = 1;
    if (look_around(w, &o))
        return;
    if (o.delayed)
        append(what, sizeof what, "%lld delayed job(s), next due %s (in %s)",
               (long long)o.delayed, tq_time_format(t, sizeof t, tq__now_us() + o.next),
               tq_duration_format(d, sizeof d, o.next > 0 ? o.next : 0));
    if (o.running)
        append(what, sizeof what, "%lld job(s) running on other workers",
               (long long)o.running);
    if (o.paused)
        append(what, sizeof what, "%lld ready job(s) of a paused queue",
               (long long)o.paused);
    /* Nothing ready or running, and still something to wait for: jobs
     * whose parents (in other queues) are not done. */
    if (!what[0])
        append(what, sizeof what,
               "jobs waiting for their parents (tq list --state waiting)");
    worker_log(w, TQ_LOG_INFO, "draining: waiting for %s", what);
}

/* Whether the loop is over: a stop with nothing left running or unsent,
 * or, draining, nothing of its queues left ready or running anywhere. */
static int finished(tq_worker *w, const pass *p, int *done)
{
    tq *db = w->db;
    *done = w->stopping && p->running == 0 && w->nacks == 0;
    if (*done || w->disconnected || w->stopping)
        return 0;
    if (!w->drain || p->running || p->nheld || w->nacks || p->claimed) {
        note_waiting(w, p, 0);
        note_empty(w, p, 0);
        return 0;
    }
    int pending = 0, rc = 0;
    for (size_t i = 0; i < w->nqueues && !pending && !rc; i++)
        rc = db->engine->pending(db, w->queues[i], &pending);
    if (rc)
        pending = 1;
    *done = !pending;
    if ((rc = ride_out(w, rc)))
        return rc;
    note_waiting(w, p, !*done);
    if (*done)
        note_empty(w, p, 1);
    return 0;
}

/* A notification of new jobs (PostgreSQL) with a slot free means: claim
 * now. */
static int take_notifications(tq_worker *w, const pass *p, int *notified)
{
    tq *db = w->db;
    int k = 0, rc = 0;
    *notified = 0;
    /* Only while a new job could start at once: a slot free and nothing
     * held to fill it. A busy worker claims as its slots free up anyway,
     * and leaves the notifications queued (inotify merges repeats) rather
     * than wake for every commit of every other worker. */
    w->listening = !w->stopping && p->free_slots > 0 && p->nheld == 0;
    w->notify_look_at = 0;
    if (!(db->engine->caps & TQ__CAP_NOTIFY) || !w->listening)
        return 0;
    int64_t again = 0;
    if ((rc = ride_out(w, db->engine->notify_drain(db, &k, &again))))
        return rc;
    w->notify_look_at = again > 0 ? p->now + again : 0;
    *notified = k > 0; /* listening: a slot is free */
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
        w->idle_us = w->idle_us ? w->idle_us * 2 : 1000;
        if (w->idle_us > w->poll_max_us)
            w->idle_us = w->poll_max_us;
        timeout = w->idle_us;
    }
    if (w->nacks)
        sooner(&timeout, w->acks_since + ACK_DELAY_US - now);
    if (w->progress_next)
        sooner(&timeout, w->progress_next - now);
    if (p->unrecorded)
        sooner(&timeout, p->unrecorded_since + ACK_DELAY_US - now);
    if (p->running || p->nheld)
        sooner(&timeout, w->last_beat + p->beat_every - now);
    if (p->running && w->handler) /* results come back without a wake */
        sooner(&timeout, ACK_DELAY_US);
    /* Command mode only: callback slots have no deadlines, and their
     * threads own them (reading them here would race). */
    for (int i = 0; p->running && w->argv && i < w->concurrency; i++) {
        const slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        if (s->deadline && !s->timed_out)
            sooner(&timeout, s->deadline - now);
        if (s->kill_at)
            sooner(&timeout, s->kill_at - now);
    }
    if (w->start_cap) /* starts resume, or one more may start */
        sooner(&timeout,
               w->start_retry_at > now ? w->start_retry_at - now : START_PROBE_US);
    if (w->stopping)
        sooner(&timeout, w->stop_at - now);
    if (w->notify_look_at)
        sooner(&timeout, w->notify_look_at - now);
    if (w->rate_retry_at > now)
        sooner(&timeout, w->rate_retry_at - now);
    if (w->start_by_next) /* held jobs too late to start go back then */
        sooner(&timeout, w->start_by_next + 1 - now);
    if (!w->stopping)
        sooner(&timeout, w->schedules_at - now);
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
    tq *db = w->db;
    int rc = 0;
    w->last_beat = tq__mono_us();

    /* A handler that exits without reading its stdin must not kill us. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
    sigaction(SIGPIPE, &ign, &old_pipe);

    for (;;) {
        pass p = {.now = tq__mono_us()};
        int leave = 0, notified = 0;
        if ((rc = stop_if_asked(w, p.now)) || (rc = reap_and_start(w)))
            break;
        p.free_slots = free_slot_count(w);
        if (store_unavailable(w, &p, &leave)) {
            if (leave)
                break;
            continue;
        }
        if ((rc = maintain_settings(w, &p)))
            break;
        if (w->disconnected)
            continue;
        if ((rc = send_acks(w, &p, claim_jobs(w, &p))))
            break;
        if (w->disconnected)
            continue;
        if ((rc = maintain_leases(w, &p)) || (rc = run_schedules(w, &p)))
            break;
        enforce_deadlines(w, p.now, w->stopping ? w->stop_at : 0);
        if ((rc = finished(w, &p, &leave)) || leave)
            break;
        if (w->disconnected)
            continue;
        if ((rc = take_notifications(w, &p, &notified)))
            break;
        if (p.claimed || notified) { /* more may be waiting: no sleep */
            w->idle_us = 0;
            continue;
        }
        wait_events(w, next_wakeup(w, &p));
    }

    if (rc)
        give_back(w);
    sigaction(SIGPIPE, &old_pipe, NULL);
    if (!rc && w->start_gave_up)
        rc = tq__seterr(db, TQ_ESYS, "%s", w->start_why);
    if (!rc && w->name_taken)
        rc = tq__seterr(db, TQ_EINUSE,
                        "worker name '%s' was registered by another process while this "
                        "one ran; stopped",
                        w->name);
    return rc;
}
