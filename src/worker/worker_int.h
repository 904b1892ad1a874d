/*
 * worker_int.h - what the parts of the worker pool share, never installed.
 *
 * The pool (tq_worker_*, include/tq.h) is one handle, struct tq_worker,
 * whose state is split into the parts' own structs, one part a file:
 *   create.c     tq_worker_new and tq_worker_free: options, allocation;
 *   loop.c       tq_worker_run: the loop, a short list of phases;
 *   held.c       the held jobs: claimed ahead, started in order, given back;
 *   slots.c      what runs in the slots: counts, starts recorded or not;
 *   command.c    the command runner: a child process per job;
 *   callback.c   the callback runner: the pool's threads, tq_handler_*;
 *   acks.c       how a run ended, as a pending acknowledgement;
 *   exchange.c   the exchange with the store: acks and claims in one;
 *   heartbeat.c  leases renewed, the name registered, expired ones rescued;
 *   limits.c     the queues' settings, how fresh, and what they let it hold;
 *   notes.c      what an idle worker says of the store;
 *   idle.c       what an idle worker reads of the store, and when;
 *   retain.c     finished jobs past their queue's retention deleted.
 * The two runners are one table of operations (tq__runner): no part asks
 * which one it runs with.
 *
 * Names shared between these files carry the tq__ prefix (STYLE.md).
 */
#ifndef TQ_WORKER_INT_H
#define TQ_WORKER_INT_H

#include "../engine/engine.h"
#include "../reaper.h"
#include "../spawn.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>

#define ACK_DELAY_US 10000LL /* longest an acknowledgement waits */
#define ACK_BATCH    512     /* most acknowledgements waiting */
#define CMD_PATH_MAX 4096
#define OUTPUT_PENDING_MAX                                                               \
    (64 << 20)                        /* results' bytes waiting to be sent: no           \
                                         start while more wait */
#define START_RETRY_MIN_US 100000LL   /* a handler that cannot start: try again */
#define START_RETRY_MAX_US 5000000LL  /* after this, doubling up to this */
#define START_PROBE_US     1000000LL  /* one more slot per this without a failure */
#define START_PROGRAM_US   10000000LL /* the program cannot run: give up after */
#define START_MACHINE_US   60000000LL /* nothing can start, nothing runs: after */
/* The first wait before a reconnection, or a write to a full disk, is
 * tried again; a heartbeat that did not go through is tried after it. */
#define RECONNECT_MIN_US 100000LL
/* A rate-limited queue's held jobs (see "Holding" in loop.c) must start
 * within this of the moment the store took their tokens: most of the
 * rate's margin (tq__rate_burst), the rest being for a command's exec. */
#define LIMITED_HOLD_US (TQ__RATE_MARGIN_US * 4 / 5)
/* A busy worker's pace (an idle one's: idle.c): the queues' settings read,
 * schedules looked at, expired leases rescued, at least this often. */
#define REFRESH_EVERY_US   1000000LL
#define SCHEDULES_EVERY_US 1000000LL
#define RESCUE_EVERY_US    1000000LL
/* A worker that could not make the connection it listens on tries again
 * this often, polling meanwhile (tq__listen). */
#define LISTEN_AGAIN_US 5000000LL

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
    size_t qi;           /* index of the job's queue */
    int64_t started;     /* monotonic */
    int start_recorded;  /* the store has charged this run's attempt */
    int64_t timeout_us;  /* the run's limit (held_job.timeout_us) */
    int64_t deadline;    /* monotonic; 0: no timeout */
    int64_t deadline_at; /* callback mode: the same by the wall clock */
    int64_t kill_at;     /* monotonic; SIGKILL the group then; 0: not set */
    int timed_out;       /* the timeout fired */
    int lost;            /* a heartbeat found the lease gone */
    int release;         /* killed by a stop: give the job back unspent */
    int lingering;       /* the handler exited, processes of its group did not */
    tq__child child;     /* command mode */
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
    /* command mode: the files of TQ_PARENTS(_DONE, _FAILED)_FILE, removed
     * with the slot */
    char *parents_files[3];
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
    /* How long its run may take (exchange.c, run_timeout: the job's own
     * timeout, else its queue's, else the worker's); 0: no limit. */
    int64_t timeout_us;
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

typedef struct tq__runner tq__runner;

/* The held jobs (held.c): claimed and not yet started. */
typedef struct worker_held {
    /* A ring of cap (prefetch + concurrency), oldest at head. */
    held_job *ring;
    size_t head, n, cap, prefetch;
    /* Held jobs whose leases ran too short to start them, or that were not
     * started by their start_by (pop_startable), until the
     * loop gives them back: room for cap; nexpired of them for the
     * latter reason. The soonest start_by of a held job: 0 when none has
     * one. */
    held_job *shorts;
    size_t nshort, nexpired;
    int64_t start_by_next;
} worker_held;

/* How many jobs to hold (limits.c): what the worker measures of its jobs
 * (their run times in finish, their starts in held_started), and what a
 * rate limit lets it hold. */
typedef struct worker_pace {
    int64_t avg_run_us; /* moving mean of recent run times; 0: none yet */
    /* Moving mean of the time between two starts of held jobs while more
     * were held: how fast this worker starts them, whatever they run (0:
     * not known yet); when the last one started, and whether more were
     * held then (held_started). */
    int64_t avg_start_gap_us, last_held_start;
    int held_after_start;
    /* The most jobs held while a queue has a rate limit (limited_target),
     * and whether some went back unstarted since the last claim. */
    size_t limited_cap;
    int limited_expired;
    int64_t rate_retry_at; /* monotonic: a rate limit has a token again then */
} worker_pace;

/* The queues' settings as the worker last read them (limits.c). */
typedef struct worker_settings {
    /* Per queue, until when (monotonic) its held jobs may start: the store
     * said its settings are as qinfo has them (a read of them, or a claim
     * that took jobs from it: each claim checks the pause and the limits)
     * in an exchange sent at S and answered at A, and it is now no later
     * than S + SETTINGS_FRESH_US or A + SETTINGS_ANSWER_US (settings_seen).
     * Guarded by mu in callback mode. */
    int64_t *until;
    int stale;   /* a held job waits for them to be read (mu) */
    int changed; /* a notification said they changed: read within a second */
    int64_t last_refresh, last_upkeep;
} worker_settings;

/* The pending acknowledgements (acks.c), sent by exchange.c. */
typedef struct worker_acks {
    pending_ack *v;
    size_t n, cap;
    int64_t since; /* monotonic time of the oldest pending ack */
    /* Bytes of results in pending acks: past OUTPUT_PENDING_MAX (the store
     * out of reach) no held job starts. Read by the callback threads. */
    _Atomic size_t output_pending;
    /* A running handler reported progress not yet queued as an ack: set by
     * the handlers (callback threads under mu), cleared by send_progress. */
    _Atomic int progress_said;
    int64_t progress_next; /* monotonic: a handler's progress may be written */
} worker_acks;

/* The handlers' starts (slots.c): those the store has not recorded yet,
 * and the slowdown while handlers cannot start. */
typedef struct worker_starts {
    /* Running jobs whose start the store has not recorded yet (guarded by
     * mu in callback mode), and since when there have been some. */
    size_t unrecorded;
    int64_t unrecorded_since;
    /* Handlers that cannot start, for a cause of the worker's or the
     * machine's (start_failed): at most cap jobs run (0: no cap),
     * one more for every START_PROBE_US since the last failure, and none
     * start before retry_at. */
    int cap;
    int64_t last_fail, retry_at, backoff;
    int64_t failing_since; /* no start worked since; 0: the last one did */
    int gave_up;           /* stopping: why says why */
    char why[320];
} worker_starts;

/* The worker's liveness (heartbeat.c). */
typedef struct worker_live {
    int64_t lease_us; /* the longest lease its queues had: its own liveness */
    /* Heartbeats: the shortest lease granted since the last one (by a
     * claim or a beat) paces the next, so that a queue's lease shortened
     * meanwhile cannot outrun it. */
    int64_t beat_lease_us, last_beat;
    int beat_failed; /* the last heartbeat did not go through */
    int64_t last_rescue;
} worker_live;

/* The store's state as the worker rides it out (exchange.c: ride_out). */
typedef struct worker_store {
    int full;                            /* riding out TQ_EFULL: said so once */
    int64_t full_backoff, full_retry_at; /* and when to write again */
    /* After TQ_ECONN: reconnecting, with capped exponential backoff. */
    int disconnected;
    int64_t reconnect_at, reconnect_backoff;
    /* The write-ahead log's checkpoint (watch_wal): when last looked at,
     * since when a reader holds it back (0: it does not), said or not. */
    int64_t wal_looked, wal_held_since;
    int wal_said;
} worker_store;

/* Command mode (command.c). */
typedef struct worker_command {
    char **argv;
    char path[CMD_PATH_MAX]; /* the program argv[0] names (tq__command_path) */
    tq__reaper reaper;       /* ends the handlers' groups if we die */
    tq__ctl_msg ctl_msg;     /* control_line's: too big for its stack */
} worker_command;

/* Callback mode (callback.c): threads take held jobs (cv signals new ones)
 * and hand back results; they wake the loop when the held jobs run below
 * low_water, when they go idle, or when results pile up. */
typedef struct worker_callback {
    tq_handler_fn handler;
    void *handler_ud;
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cb_result *results, *spare; /* the loop reads one while threads fill the other */
    size_t nresults, cap_results, cap_spare;
    size_t low_water;
    int wake_pending, threads_quit;
} worker_callback;

/* The loop's own state from pass to pass (loop.c: tq_worker_run). */
typedef struct worker_loop {
    int wake[2]; /* self-pipe: stop requests and finished callbacks */
    volatile sig_atomic_t stop_requested; /* by tq_worker_stop, or the worker */
    volatile sig_atomic_t stop_asked;     /* tq_worker_stop was called */
    volatile sig_atomic_t stop_now;       /* and called again: no more grace */
    int stopping;                         /* a stop was asked for and begun */
    int stopped_now;                      /* and then ended at once (stop_now) */
    int64_t stop_at;                      /* monotonic: the end of its grace time */
    int64_t idle_us;                      /* backoff of claims that found nothing */
    int64_t notify_look_at;   /* monotonic: the engine asked to drain again then */
    int64_t schedules_at;     /* monotonic: when to enqueue due periodic jobs */
    int64_t schedules_warned; /* monotonic: when their failure was last said */
    int64_t schedules_ran;    /* monotonic: when they were last run */
    int listening;            /* a new job could start now: notifications matter */
    int can_listen;           /* the engine's listen went through on this connection */
    int64_t listen_again_at;  /* monotonic: try listening again then (0: no) */
    int listen_failed;        /* the last try failed (said once) */
    size_t next_queue;        /* round robin start for claims */
    /* Idle (idle.c): this pass, and when it next claims (0: each pass) and
     * rescues, and when it last claimed; a peek asked for by a change, and
     * when it last peeked; monotonic. */
    int idle, peek_asked;
    int64_t claim_at, rescue_at, claim_last, peek_last;
} worker_loop;

/* Retention (retain.c): for each queue served (by index, grown as an
 * all_queues worker finds more), when its next turn is due (monotonic; 0:
 * at once), how long it waits after a turn that deleted nothing, when its
 * starts last went back to the beginning, and where each state's next
 * delete starts (the store's clock: engine.h, retire). */
typedef struct retain_queue {
    int64_t at, idle_gap, walked;
    int64_t after[TQ_STATE_COUNT];
} retain_queue;
typedef struct worker_retain {
    retain_queue *q;
    size_t n;
    int64_t warned; /* monotonic: when a failure was last said */
} worker_retain;

/* What an idle worker said of the store (notes.c: note_empty, note_waiting). */
typedef struct worker_notes {
    int said_empty, said_waiting;
    int64_t empty_checked, wait_checked; /* monotonic: when each note last looked */
    int64_t waiting_since; /* monotonic: when this drain's wait began; 0: none */
} worker_notes;

struct tq_worker {
    /* What it was made with (create.c), read by every part. */
    tq *db;
    char *name;
    char **queues; /* all_queues: as found, in the order found (limits.c) */
    size_t nqueues;
    tq_queue_info *qinfo;
    int all_queues;
    int64_t forget_stopped_us; /* -1: never */
    const tq__runner *run;     /* how jobs run: command.c or callback.c */
    void (*log)(void *ud, int level, const char *msg);
    void *log_ud;
    int concurrency, drain, log_jobs;
    int64_t timeout_us, grace_us, poll_max_us;
    tq_worker_info me; /* the registration: what makes the name mine */
    int name_taken;    /* another process registered the name since */

    /* The parts' own state, each in its file. */
    slot *slots; /* concurrency of them (slots.c) */
    worker_held held;
    worker_pace pace;
    worker_settings settings;
    worker_acks acks;
    worker_starts starts;
    worker_live live;
    worker_store store;
    worker_command cmd;
    worker_callback cb;
    worker_loop loop;
    worker_notes notes;
    worker_retain retain;

    /* tq_worker_counters, atomic: tq_worker_counters_get may be called
     * from another thread while the loop runs. */
    struct {
        _Atomic int64_t claimed, done, failed, lost, released;
        _Atomic int64_t retried, dead, discarded, snoozed;
    } counters;
};

/*
 * How jobs run: a command per job, in a child process the loop polls
 * (command.c), or a C callback on the pool's threads, one a slot
 * (callback.c). The two are one table of operations (curl's Curl_ssl,
 * SQLite's sqlite3_io_methods), each defined at the bottom of its file;
 * the loop and the other parts call the runner only through w->run.
 */
struct tq__runner {
    /* tq_worker_new, before the registration (which names the reaper):
     * the handlers' reaper, or the threads. */
    int (*start)(tq_worker *w);
    /* tq_worker_free, first: no handler runs on a thread any more. */
    void (*join)(tq_worker *w);
    /* tq_worker_free, last: what the runner owns. */
    void (*free)(tq_worker *w);
    /* What the threads share with the loop (the slots, the held jobs, the
     * settings' freshness, the starts to record) is touched between lock
     * and unlock; in command mode the loop alone touches it. */
    void (*lock)(tq_worker *w);
    void (*unlock)(tq_worker *w);
    /* With the lock: held jobs may start now (new ones, renewed leases,
     * fresh settings, room for results): whoever waits for them looks. */
    void (*held_changed)(tq_worker *w);
    /* With the lock, from whoever starts held jobs: the loop has work (a
     * held job set aside, settings to read, more to claim). */
    void (*wake_loop)(tq_worker *w);
    /* Starts held jobs in the free slots (reap_and_start, take_jobs). */
    int (*start_held)(tq_worker *w);
    /* Runs that ended become pending acks (finish). */
    int (*collect)(tq_worker *w);
    /* With the lock: the run in s lost its lease (slot_lost); stopped if
     * it can be. */
    void (*lost)(tq_worker *w, slot *s);
    /* Timeouts and the stop's grace, which ends at stop_at (0: none). */
    void (*enforce)(tq_worker *w, int64_t now, int64_t stop_at);
    /* A second stop (stop_if_asked): no more grace. */
    void (*stop_now)(tq_worker *w, int64_t now);
    /* Leaving on an error (give_back): the running jobs ended and given
     * back, as far as they can be. */
    int (*abandon)(tq_worker *w);
    /* Now and then (maintain_settings). */
    void (*upkeep)(tq_worker *w);
    /* What the loop's poll() also waits for: fills fds, returns how many,
     * and may shorten *timeout_us. */
    nfds_t (*watch)(tq_worker *w, struct pollfd *fds, int64_t *timeout_us);
    /* While jobs run: how soon (from now) the loop must look at them
     * again; INT64_MAX: no sooner than anything else. */
    int64_t (*due_in)(tq_worker *w, int64_t now);
};

extern const tq__runner tq__runner_command, tq__runner_callback;

/* What an acknowledgement says about a job: which claim, and when its run
 * started (monotonic; 0: it never started). The store is told how long ago
 * that was when the ack is sent (exchange), so that the start it records is
 * the start, however long the ack waited. */
typedef struct ack_of {
    int64_t id, claim, started;
    int attempt; /* the run's, for the backoff */
    size_t qi;
} ack_of;

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
    /* An idle worker's claims' looks (tq__claim.look): the soonest of them;
     * TQ__NEVER when none looked or found anything. */
    int64_t due_in, lease_in;
} pass;

/* The i-th held job, oldest first (held.c's ring). */
static inline held_job *tq__held_at(tq_worker *w, size_t i)
{
    return &w->held.ring[(w->held.head + i) % w->held.cap];
}

/* Whether ack a is about job j's claim. */
static inline int tq__same_claim(const tq__ack *a, const tq_job *j)
{
    return a->id == j->id && a->claim == j->claim;
}

/* How long ago a run started, as an acknowledgement carries it (at least 1:
 * 0 would mean "never started"). */
static inline int64_t tq__started_ago(int64_t started)
{
    int64_t ago = tq__mono_us() - started;
    return ago > 0 ? ago : 1;
}

/* create.c */
void tq__worker_log(tq_worker *w, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void tq__listen(tq_worker *w);

/* loop.c's phases, in their parts. */
int tq__claim_jobs(tq_worker *w, pass *p);
int tq__send_acks(tq_worker *w, pass *p, int rc);
int tq__maintain_settings(tq_worker *w, const pass *p);
int tq__maintain_leases(tq_worker *w, pass *p);
void tq__note_empty(tq_worker *w, const pass *p, int known_empty);
void tq__note_waiting(tq_worker *w, const pass *p, int waiting);

/* idle.c: what an idle worker reads of the store, and when. */
/* retain.c */
int tq__retain(tq_worker *w, const pass *p);
void tq__retain_timer(const tq_worker *w, int64_t now, int64_t *timeout);
void tq__retain_free(tq_worker *w);

void tq__idle_update(tq_worker *w, const pass *p);
int64_t tq__idle_every(const tq_worker *w, int64_t busy_us);
int tq__idle_may_claim(const tq_worker *w, int64_t now);
void tq__idle_plan(tq_worker *w, const pass *p);
void tq__idle_heard(tq_worker *w, int jobs, int changed);
int tq__idle_peek(tq_worker *w, const pass *p);
void tq__idle_settings_read(tq_worker *w);
int tq__idle_rescue_due(const tq_worker *w, int64_t now);
void tq__idle_rescued(tq_worker *w, int64_t now);
void tq__idle_timers(const tq_worker *w, const pass *p, int64_t *timeout);

/* held.c */
int tq__pop_startable(tq_worker *w, held_job *out);
int tq__release_held(tq_worker *w, held_sel sel, size_t *gone);
int tq__give_back_short(tq_worker *w);
int tq__drop_late(tq_worker *w, int64_t now);
size_t tq__held_count(tq_worker *w);

/* slots.c */
void tq__free_slot(slot *s);
void tq__mark_start(tq_worker *w, slot *s);
int tq__running_count_locked(const tq_worker *w);
int tq__running_count(tq_worker *w);
int tq__start_room(tq_worker *w, int64_t now);
int tq__free_slot_count(tq_worker *w);
void tq__start_failed(tq_worker *w, int program, const char *why);
size_t tq__running_beats(tq_worker *w, tq__ack *acks, int unrecorded_only);
void tq__slot_lost(tq_worker *w, slot *s);
void tq__starts_recorded(tq_worker *w, const tq__ack *beats, size_t n);
size_t tq__unrecorded_count(tq_worker *w, int64_t *since);

/* acks.c */
int tq__add_held_ack(tq_worker *w, const held_job *h, tq__ack_kind kind,
                     const char *error);
int tq__finish(tq_worker *w, outcome *o);
void tq__log_end(tq_worker *w, const pending_ack *p);
int tq__progress_ack(tq_worker *w, const ack_of *j, int pct, const char *text);
int tq__queue_progress(tq_worker *w, slot *s);
int tq__send_progress(tq_worker *w, int64_t now, int64_t *next_us);

/* exchange.c */
int tq__exchange(tq_worker *w, tq__claim *claim, size_t qi, int *claimed);
int tq__ride_out(tq_worker *w, int rc);
void tq__watch_wal(tq_worker *w, int64_t now);
int tq__try_reconnect(tq_worker *w, int64_t now);
void tq__store_wrote(tq_worker *w);

/* heartbeat.c */
int tq__set_wait_limit(tq_worker *w);
int tq__register_name(tq_worker *w, const char *host);

/* limits.c */
int tq__refresh_queues(tq_worker *w, int64_t *asked);
void tq__settings_seen_locked(tq_worker *w, size_t qi, int64_t sent, int64_t answered);
void tq__settings_seen(tq_worker *w, size_t qi, int64_t sent, int64_t answered);
int tq__settings_fresh(tq_worker *w, const held_job *h, int64_t now);
int tq__refresh_stale(tq_worker *w);
size_t tq__hold_target(tq_worker *w);
size_t tq__chain_of(const tq_worker *w, const tq_queue_info *q, size_t target);
void tq__limited_claimed(tq_worker *w, size_t room, size_t claimed);
void tq__set_low_water(tq_worker *w, size_t target);

#endif /* TQ_WORKER_INT_H */
