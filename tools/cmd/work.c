/*
 * work.c - `tq work`: a worker pool that runs a command per job, stopped
 * by SIGTERM or SIGINT (its handler only asks the pool to stop), logging
 * one line per event on stderr. Called by tq.c's command table.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static tq_worker *volatile the_worker;
/* A stop signal before the worker runs (while waiting for the store). */
static volatile sig_atomic_t stop_early;

static void on_stop_signal(int sig)
{
    (void)sig;
    tq_worker *w = the_worker;
    if (w)
        tq_worker_stop(w); /* a second one stops now */
    else
        stop_early = 1;
}

static int log_level = TQ_LOG_INFO;

/* tq work --drain on a terminal: a progress line (jobs done, left, rate)
 * kept below the log by drain_progress's thread; log lines erase it first,
 * under progress_mu. */
static pthread_mutex_t progress_mu = PTHREAD_MUTEX_INITIALIZER;
static cli_progress progress;

static void work_log(void *ud, int level, const char *msg)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    struct timespec ts;
    char t[40];
    if (level > log_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    tq_time_format(t, sizeof t, (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
    /* The library's stopping line, with what the second signal does here. */
    const char *hint = strncmp(msg, "stopping: ", 10) == 0 && strstr(msg, "to finish")
                           ? " (Ctrl-C again to stop now)"
                           : "";
    /* A message may carry text from the store (a job's error, a name, the
     * server's words about a value) or a handler's stderr: escaped. */
    pthread_mutex_lock(&progress_mu);
    cli_progress_end(&progress);
    fprintf(stderr, "%s ", t);
    cli_put_text(stderr, ud);
    fprintf(stderr, " %s: ", names[level]);
    cli_put_text(stderr, msg);
    fprintf(stderr, "%s\n", hint);
    pthread_mutex_unlock(&progress_mu);
}

static const char usage[] =
    "tq work [-q|--queue Q]... [--all-queues] [-c|--concurrency N] [--prefetch N] "
    "[-n|--name WORKER] [--drain[=due]] [--timeout DUR] [--grace DUR] [--poll DUR] "
    "[--forget-stopped DUR|never] [--verbose|--quiet] [-d|--db URL] -- COMMAND [ARG...]";
static const char help[] =
    "Runs COMMAND (no shell) once per job of the queues Q (default: the "
    "queue\nnamed 'default'): payload on stdin; TQ_JOB_ID, TQ_QUEUE, TQ_ATTEMPT, "
    "TQ_CLAIM, and\nwhen the job has them TQ_GROUP, TQ_PARENTS, TQ_PARENTS_DONE, "
    "TQ_PARENTS_FAILED\n(each past 8 KiB: a file, named by the same with _FILE) and "
    "TRACEPARENT in the\nenvironment. "
    "Exit 0 is done; anything else, a signal or a timeout (the job's\nown, its "
    "queue's, else --timeout: SIGTERM, then SIGKILL after --grace) is a\n"
    "failure. The handler's stdout is the worker's, or\nthe job's result in a "
    "queue with --results; its stderr's tail becomes the\njob's last error "
    "(--verbose also logs each line).\n"
    "Descriptor 3 (TQ_CONTROL_FD) takes lines: 'progress PCT [TEXT]', "
    "'snooze DUR'\n(back to ready later, attempt not spent), 'discard "
    "TEXT' (dead at once).\n"
    "--all-queues: every queue of the store instead, those created while it "
    "runs\ntoo, each keeping its order, pause, limits and rate.\n"
    "--drain exits once nothing in the queues is ready (due or delayed), "
    "running or\nwaiting for its parents; --drain=due once nothing is due now "
    "and nothing runs\nhere, leaving delayed and waiting jobs for later.\n"
    "SIGTERM/SIGINT: stop claiming, "
    "let running jobs finish "
    "within --grace\n(default 10s), then kill them and put their jobs "
    "back; a second one kills\nthem at once (their jobs go back too).\n"
    "--verbose: log each job's end and its handler's stderr; --quiet: "
    "warnings only.\n--prefetch N: claim up to N jobs ahead of free slots "
    "when jobs are\nshort (about 20 ms of work; default 2048, 0: none).\n"
    "--forget-stopped DUR: at its start, forget workers stopped or silent for "
    "longer\n(default 1d; never: keep them for tq workers --prune).\n"
    "PostgreSQL: a server not up yet is waited for (the wait is logged).\n";

typedef struct drain_watch {
    tq_worker *w;
    const char *url;
    const tq_worker_opts *wo;
    pthread_t thread;
    int started;
    _Atomic int quit;
} drain_watch;

/* Every 100 ms the worker's counts; every second what is left in its
 * queues (ready or running, on every worker), read on a connection of its
 * own. */
static void *drain_progress(void *arg)
{
    drain_watch *d = arg;
    tq *db = NULL;
    int64_t left = -1, looked = -10, done_then = 0;
    const struct timespec tick = {0, 100000000};
    if (tq_open(&db, d->url, NULL)) {
        tq_close(db);
        db = NULL;
    }
    for (int64_t i = 0; !d->quit; i++) {
        tq_worker_counters k;
        tq_worker_counters_get(&k, d->w);
        if (db && i - looked >= 10) { /* the store's count, once a second */
            int64_t n = 0;
            tq_stats st;
            size_t nq = d->wo->all_queues ? 1 : d->wo->nqueues ? d->wo->nqueues : 1;
            for (size_t q = 0; q < nq; q++) {
                const char *name = d->wo->all_queues ? NULL
                                   : d->wo->nqueues  ? d->wo->queues[q]
                                                     : "default";
                if (tq_stats_get(&st, db, name) == 0)
                    n += st.count[TQ_READY] + st.count[TQ_RUNNING];
            }
            left = n;
            done_then = k.done;
            looked = i;
        }
        /* What was left then, less what this worker did since: never more
         * than the total with what it did. */
        int64_t left_now = left - (k.done - done_then);
        char extra[96];
        if (left >= 0)
            snprintf(extra, sizeof extra, "%lld failed, %lld left", (long long)k.failed,
                     (long long)(left_now > 0 ? left_now : 0));
        else
            snprintf(extra, sizeof extra, "%lld failed", (long long)k.failed);
        pthread_mutex_lock(&progress_mu);
        cli_progress_show(&progress, k.done, -1, extra);
        pthread_mutex_unlock(&progress_mu);
        nanosleep(&tick, NULL);
    }
    tq_close(db);
    return NULL;
}

enum { QUEUES_MAX = 64 };

/* What tq work was asked for: the pool's options (its queues in queues)
 * and how much to log. */
typedef struct work_args {
    const char *url;
    tq_worker_opts wo;
    const char *queues[QUEUES_MAX];
    int log_level;
} work_args;

/* --queue Q, again for each queue. */
static int opt_queue(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    work_args *a = args;
    if (a->wo.nqueues == QUEUES_MAX) {
        cli_error("work", "at most 64 queues");
        return EXIT_USAGE;
    }
    if (cli_queue_name("work", arg))
        return EXIT_USAGE;
    a->queues[a->wo.nqueues++] = arg;
    return 0;
}

/* --prefetch N: 0 is none (the library's -1; its 0 is the default). */
static int opt_prefetch(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    long long n;
    if (cli_int("work", "--prefetch", arg, 0, TQ_PREFETCH_MAX, &n))
        return EXIT_USAGE;
    ((work_args *)args)->wo.prefetch = n ? (int)n : -1;
    return 0;
}

/* --grace DUR: 0 is none, as said (the library's 0 is its default). */
/* --drain, or --drain=due: drain the due jobs only (TQ_DRAIN_DUE). */
static int opt_drain(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_worker_opts *wo = &((work_args *)args)->wo;
    if (!arg || strcmp(arg, "all") == 0) {
        wo->drain = TQ_DRAIN_ALL;
    } else if (strcmp(arg, "due") == 0) {
        wo->drain = TQ_DRAIN_DUE;
    } else {
        cli_error("work", "invalid value '%s' for --drain: use --drain or --drain=due",
                  arg);
        return EXIT_USAGE;
    }
    return 0;
}

/* --forget-stopped DUR, or never (wo.forget_stopped_us -1). */
static int opt_forget(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_worker_opts *wo = &((work_args *)args)->wo;
    if (strcmp(arg, "never") == 0) {
        wo->forget_stopped_us = -1;
        return 0;
    }
    if (cli_duration("work", "--forget-stopped", arg, &wo->forget_stopped_us))
        return EXIT_USAGE;
    if (wo->forget_stopped_us == 0) {
        cli_error("work", "--forget-stopped 0 would forget workers still stopping: give "
                          "at least 1s, or never");
        return EXIT_USAGE;
    }
    return 0;
}

static int opt_grace(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_worker_opts *wo = &((work_args *)args)->wo;
    if (cli_duration("work", "--grace", arg, &wo->grace_us))
        return EXIT_USAGE;
    if (wo->grace_us == 0)
        wo->grace_us = 1;
    return 0;
}

static const work_args defaults = {.wo = TQ_WORKER_OPTS_INIT, .log_level = TQ_LOG_INFO};

static const cli_opt opts[] = {
    CLI_OPT_CALLBACK('q', "queue", 1, opt_queue, 0),
    CLI_OPT_INT('c', "concurrency", work_args, wo.concurrency, 1, TQ_CONCURRENCY_MAX),
    CLI_OPT_CALLBACK(0, "prefetch", 1, opt_prefetch, 0),
    CLI_OPT_STRING('n', "name", work_args, wo.name),
    CLI_OPT_CALLBACK(0, "drain", 2, opt_drain, 0),
    CLI_OPT_DURATION(0, "timeout", work_args, wo.timeout_us),
    CLI_OPT_CALLBACK(0, "grace", 1, opt_grace, 0),
    {CLI_OPT_(0, "poll", CLI_DURATION), CLI_FIELD(work_args, wo.poll_max_us),
     .zero = "--poll 0 would poll without a pause: give at least 1ms"},
    /* --verbose also logs each job's end (wo.log_jobs, which --quiet
     * after it leaves on) */
    CLI_OPT_FLAG_MARK(0, "verbose", work_args, log_level, TQ_LOG_DEBUG, wo.log_jobs, 1),
    CLI_OPT_FLAG(0, "quiet", work_args, log_level, TQ_LOG_WARN),
    CLI_OPT_FLAG(0, "all-queues", work_args, wo.all_queues, 1),
    CLI_OPT_CALLBACK(0, "forget-stopped", 1, opt_forget, 0),
    CLI_OPT_END};

/* After the options: 0, or the exit code of a bad command line. */
static int work_parse(void *args, const char **url, int argc, char **argv)
{
    work_args *a = args;
    tq_worker_opts *wo = &a->wo;
    if (!wo->concurrency) /* no -c */
        wo->concurrency = 1;
    if (wo->all_queues && wo->nqueues) {
        cli_error("work", "--all-queues and --queue cannot be used together");
        return EXIT_USAGE;
    }
    if (optind >= argc) {
        cli_error("work", "no COMMAND given: tq work [options] -- COMMAND [ARG...]");
        return EXIT_USAGE;
    }
    if (wo->name && (strlen(wo->name) < 1 || strlen(wo->name) > 127)) {
        cli_error("work", "--name must be 1 to 127 bytes");
        return EXIT_USAGE;
    }
    wo->queues = wo->nqueues ? a->queues : NULL;
    wo->argv = (const char *const *)&argv[optind];
    a->url = cli_url(*url);
    return 0;
}

/*
 * Opens the store, waiting for a PostgreSQL server that is not up yet
 * (workers started by systemd, Compose or Kubernetes often come before
 * their database): each failure that may pass (TQ_ECONN) is logged with the
 * wait before the next try, 100 ms doubling to 10 s, as a running worker
 * reconnects. Anything else (authentication, no such database, no schema,
 * a bad URL) ends it at once, as does SIGTERM or SIGINT meanwhile.
 */
static tq *open_waiting(const char *url, const char *name, int *ex)
{
    const int network = cli_is_postgres(url);
    int64_t wait_us = 100000;
    for (;;) {
        tq *db = NULL;
        tq_open_opts o = TQ_OPEN_OPTS_INIT;
        int rc = tq_open(&db, url, &o);
        if (!rc)
            return db;
        if (stop_early) { /* a signal cut the connecting short */
            tq_close(db);
            break;
        }
        if (!network || rc != TQ_ECONN) {
            *ex = cli_open_failed("work", db, rc, url);
            tq_close(db);
            return NULL;
        }
        char msg[1200], d[24];
        snprintf(msg, sizeof msg, "waiting for the store: %s; next try in %s",
                 cli_reason(db, rc), tq_duration_format(d, sizeof d, wait_us));
        tq_close(db);
        work_log((void *)name, TQ_LOG_WARN, msg);
        /* In slices, so that a signal between the check and the sleep is
         * heard within one. */
        for (int64_t slept = 0; slept < wait_us && !stop_early; slept += 50000) {
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
        }
        if (stop_early)
            break;
        wait_us = wait_us * 2 > 10000000 ? 10000000 : wait_us * 2;
    }
    work_log((void *)name, TQ_LOG_INFO, "stopped while waiting for the store");
    *ex = 0;
    return NULL;
}

/* The start line: what this worker runs, on what, from where. */
static void log_start(const char *name, tq *db, const tq_worker_opts *wo)
{
    char msg[1024], queues[400] = "";
    size_t k = 0;
    for (size_t i = 0; i < (wo->nqueues ? wo->nqueues : 1) && k < sizeof queues; i++)
        k += (size_t)snprintf(queues + k, sizeof queues - k, "%s%s", i ? ", " : "",
                              wo->nqueues ? wo->queues[i] : "default");
    if (wo->all_queues)
        snprintf(queues, sizeof queues, "all");
    snprintf(msg, sizeof msg,
             "started: queue%s %s; concurrency %d; store %s (%s); command %s%s",
             wo->nqueues > 1 || wo->all_queues ? "s" : "", queues, wo->concurrency,
             tq_store_name(db), tq_engine_name(db), wo->argv[0],
             wo->drain ? "; draining" : "");
    work_log((void *)name, TQ_LOG_INFO, msg);
}

/* Each command slot holds up to five descriptors (stdin, stderr, the
 * control channel, a result's stdout, a pidfd): the soft limit raised as
 * far as that needs (within the hard one), no further, since the handlers
 * inherit it. */
static void raise_nofile(int concurrency)
{
    struct rlimit nofile;
    const rlim_t need = 5 * (rlim_t)(concurrency > 0 ? concurrency : 1) + 64;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < need) {
        nofile.rlim_cur = need < nofile.rlim_max ? need : nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
}

/* From here on a stop signal is ours: while waiting for the store it ends
 * the wait; once the worker runs it stops it. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM); /* one at a time: two are two stops */
    sigaddset(&sa.sa_mask, SIGINT);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* Whether --drain's progress line stays off: it is drawn only on a
 * terminal, and not where handlers print: their stdout on the same
 * terminal would run into the line (unless every queue keeps stdout as
 * results). */
static int progress_quiet(tq *db, const tq_worker_opts *wo)
{
    int quiet = !wo->drain;
    tq_queue_info *v;
    size_t n;
    if (!quiet && isatty(1) && wo->all_queues) { /* those there now */
        if (tq_queue_list(&v, &n, db))
            return 1;
        for (size_t i = 0; i < n; i++)
            quiet |= !v[i].results;
        tq_free(v);
        return quiet;
    }
    for (size_t i = 0; !quiet && isatty(1) && i < (wo->nqueues ? wo->nqueues : 1); i++) {
        tq_queue_info q;
        quiet = tq_queue_get(&q, db, wo->nqueues ? wo->queues[i] : "default") != 0 ||
                !q.results;
    }
    return quiet;
}

/* Runs the worker until it is stopped or drained, with --drain's progress
 * line beside it on a terminal. */
static int run_worker(tq *db, tq_worker *w, const char *url, const tq_worker_opts *wo)
{
    drain_watch watch = {.w = w, .url = url, .wo = wo};
    cli_progress_start(&progress, "done", progress_quiet(db, wo));
    if (progress.on)
        watch.started = pthread_create(&watch.thread, NULL, drain_progress, &watch) == 0;
    int rc = tq_worker_run(w);
    if (watch.started) {
        watch.quit = 1;
        pthread_join(watch.thread, NULL);
    }
    pthread_mutex_lock(&progress_mu);
    cli_progress_end(&progress);
    progress.on = 0;
    pthread_mutex_unlock(&progress_mu);
    return rc;
}

/* The stop line: what this worker did, each way a run ended named as the
 * docs name it (docs/guarantees.md), those that did not happen left out. */
static void log_stop(const char *name, tq_worker *w)
{
    tq_worker_counters k;
    tq_worker_counters_get(&k, w);
    const struct {
        int64_t n;
        const char *what;
    } ends[] = {{k.retried, "failed and retried"},    {k.dead, "dead"},
                {k.discarded, "discarded"},           {k.snoozed, "snoozed"},
                {k.released - k.snoozed, "released"}, {k.lost, "lost"}};
    char msg[320];
    int n = snprintf(msg, sizeof msg, "stopped: %lld claimed, %lld done",
                     (long long)k.claimed, (long long)k.done);
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++)
        if (ends[i].n && n > 0 && (size_t)n < sizeof msg)
            n += snprintf(msg + n, sizeof msg - (size_t)n, ", %lld %s",
                          (long long)ends[i].n, ends[i].what);
    work_log((void *)name, TQ_LOG_INFO, msg);
}

/* Runs a worker pool per the options until it is stopped (SIGTERM, SIGINT)
 * or drained, logging one line per event. */
static int work_run(void *args, tq *unused)
{
    (void)unused; /* the store is opened here, waiting for it */
    work_args *a = args;
    tq_worker_opts *wo = &a->wo;
    int ex = 0;
    log_level = a->log_level;
    raise_nofile(wo->concurrency);
    wo->log = work_log;
    /* The default name, as the library would make it, so logs can show it. */
    char name[128];
    if (!wo->name) {
        tq_worker_default_name(name, sizeof name);
        wo->name = name;
    } else {
        snprintf(name, sizeof name, "%s", wo->name);
    }
    wo->log_ud = name;
    catch_stop_signals();
    tq *db = open_waiting(a->url, name, &ex);
    if (!db)
        return ex;
    tq_worker *w = NULL;
    int rc = tq_worker_new(&w, db, wo);
    if (rc) {
        ex = cli_fail("work", db, rc);
        tq_close(db);
        return ex;
    }
    the_worker = w;
    log_start(name, db, wo);
    if (stop_early) /* a signal came before the worker could hear it */
        tq_worker_stop(w);
    rc = run_worker(db, w, a->url, wo);
    the_worker = NULL;
    if (rc)
        ex = cli_fail("work", db, rc);
    log_stop(name, w);
    tq_worker_free(w);
    tq_close(db);
    return ex;
}

CLI_COMMAND(work, "run a command for each job", CLI_OPEN_NONE, &defaults, opts, usage,
            help, NULL);
