/*
 * bench.c - `tq bench`: the stress run of the seeds (many workers thrown at
 * one queue, checking for blocking and double processing), as a command.
 *
 * It makes a fresh queue, enqueues N jobs in batches, forks W worker
 * processes that each run the library's worker pool with an in-process
 * no-op handler until the queue is drained, and checks that every job ran
 * exactly once. The check does not trust the store: every handler call
 * bumps a counter for its job id in memory shared by all the processes,
 * and the parent counts zeros (lost) and counts above one (duplicates).
 *
 * With --rounds R it is a sustained run instead: the workers start first and
 * stay up, the parent enqueues R x N jobs while they work, never more than N
 * ahead of them, and the rate of each N jobs in a row is reported (the
 * handler stamps the time the N-th, 2N-th, ... job starts).
 *
 * Called by tq.c's command table.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { ROUNDS_MAX = 1000 };

static const char usage[] =
    "tq bench [--jobs N] [--workers W] [-c|--concurrency C] "
    "[--prefetch N] [--enqueue-batch N] [--payload BYTES] "
    "[--latency-jobs N] [--lease DUR] [--delete-done | --retain-done DUR] [--rounds R] "
    "[--groups G] [--max-running N] [--max-running-per-group N] [--rate N/DUR] "
    "[--result BYTES] [-j|--json] [-d|--db URL]";
static const char help[] =
    "Enqueues N jobs (default 20000) into a fresh queue, runs W worker\n"
    "processes (default 8) with a no-op handler until drained, checks\n"
    "that every job ran exactly once, and reports rates and latency.\n"
    "Then measures enqueue-to-start latency: --latency-jobs jobs (100)\n"
    "enqueued one at a time to W idle workers.\n"
    "--enqueue-batch N: jobs per enqueue transaction (1 to 1000; 1000).\n"
    "--prefetch N: jobs a worker may claim ahead of its free slots\n"
    "(default 2048, 0: none).\n"
    "--delete-done: the queue deletes finished jobs' rows (keep_done 0);\n"
    "--retain-done DUR: its workers delete them DUR after they finished.\n"
    "--rounds R: a sustained run of R x N jobs (1 to 1000; 1): the workers\n"
    "start first and stay up, jobs are enqueued while they work (at most\n"
    "N ahead), and the rate of every N jobs in a row is reported.\n"
    "--groups G: the jobs take G groups in turn, 10 in a row "
    "each;\n--max-running N, --max-running-per-group N, --rate N/DUR: the "
    "queue's\nlimits (tq queue).\n"
    "--result BYTES: every job's handler stores a result of BYTES bytes.\n"
    "Without --db (or $TQ_DB) it uses a throwaway SQLite file.\n"
    "Exits 1 if any job was lost or ran twice.\n";

typedef struct shared {
    _Atomic int64_t busy_retries;
    _Atomic int64_t lost_acks;    /* acks refused by the fence */
    _Atomic int64_t out_of_range; /* handler saw an id we did not enqueue */
    _Atomic int64_t peak_own_kb;  /* largest worker peak RSS, without runs[] */
    int64_t first_id;
    int64_t njobs;
    int64_t per_round;                         /* --rounds: jobs per round, else 0 */
    int64_t groups;                            /* --groups, else 0 */
    int64_t result_bytes;                      /* --result: each job's result, else 0 */
    _Atomic int64_t ran;                       /* handler calls so far */
    _Atomic int64_t round_end[ROUNDS_MAX + 1]; /* monotonic us the k-th round ended */
    _Atomic uint32_t runs[]; /* per job: how many times its handler ran */
} shared;

static int64_t clock_us(clockid_t which)
{
    struct timespec ts;
    clock_gettime(which, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Intervals on the monotonic clock; start stamps shared between processes
 * on the wall clock. */
static int64_t now_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}
static int64_t wall_us(void)
{
    return clock_us(CLOCK_REALTIME);
}

static int noop_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    shared *sh = ud;
    (void)err;
    (void)errlen;
    int64_t i = job->id - sh->first_id;
    if (i < 0 || i >= sh->njobs) {
        atomic_fetch_add(&sh->out_of_range, 1);
        return 0;
    }
    atomic_fetch_add(&sh->runs[i], 1);
    if (sh->result_bytes) {
        static const char result[TQ_RESULT_MAX];
        tq_handler_result(job, result, (size_t)sh->result_bytes);
    }
    int64_t n = atomic_fetch_add(&sh->ran, 1) + 1;
    if (sh->per_round && n % sh->per_round == 0 && n / sh->per_round <= ROUNDS_MAX)
        atomic_store(&sh->round_end[n / sh->per_round], now_us());
    return 0;
}

/* The latency phase: start times stamped by the handler, per job index. */
typedef struct latency {
    int n;
    _Atomic int64_t started[]; /* wall clock us, 0 until the job starts */
} latency;

static int stamp_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    latency *lat = ud;
    (void)err, (void)errlen;
    int i = atoi((const char *)job->payload);
    if (i >= 0 && i < lat->n)
        atomic_store(&lat->started[i], wall_us());
    return 0;
}

/* The worker a process runs until SIGTERM (latency phase, --rounds). */
static tq_worker *volatile resident_worker;

static void stop_resident(int sig)
{
    (void)sig;
    if (resident_worker)
        tq_worker_stop(resident_worker);
}

static void sigterm_mask(int how)
{
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(how, &term, NULL);
}

/* SIGTERM stays blocked from here until resident_ready(): the parent may
 * send it while this worker is still starting (a --rounds feed can finish
 * before a slow worker has registered), and a stop that found no worker yet
 * would be lost and leave the parent waiting forever. Held, it is delivered
 * once the worker exists, and tq_worker_run returns at once. */
static void stop_on_sigterm(void)
{
    sigterm_mask(SIG_BLOCK);
    struct sigaction sa = {.sa_handler = stop_resident};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

/* The worker w (NULL if it could not start) now takes SIGTERM. */
static void resident_ready(tq_worker *w)
{
    resident_worker = w;
    sigterm_mask(SIG_UNBLOCK);
}

/* Runs w, which tq_worker_new made with result rc: taking SIGTERM while it
 * runs if resident. Its result, a failure said as WHAT INDEX's. */
static int drive_worker(tq *db, tq_worker *w, int rc, int resident, const char *what,
                        int index)
{
    if (resident)
        resident_ready(w);
    if (!rc)
        rc = tq_worker_run(w);
    resident_worker = NULL;
    if (rc)
        cli_error("bench", "%s %d: %s", what, index, tq_errmsg(db));
    return rc;
}

/* A bench worker's options: of its one queue (*queues), named
 * QUEUE.wINDEX into name, calling h with ud. */
static tq_worker_opts worker_opts(char (*name)[128], const char **queues, int index,
                                  tq_handler_fn h, void *ud)
{
    snprintf(*name, sizeof *name, "%s.w%d", queues[0], index);
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.queues = queues;
    o.nqueues = 1;
    o.name = *name;
    o.handler = h;
    o.handler_ud = ud;
    return o;
}

/* An idle worker for the latency phase: runs until SIGTERM. */
static int run_idle_worker(const char *url, const char *queue, int index, latency *lat)
{
    tq *db = NULL;
    tq_worker *w = NULL;
    char name[128];
    const char *queues[1] = {queue};
    stop_on_sigterm();
    int rc = tq_open(&db, url, NULL);
    tq_worker_opts o = worker_opts(&name, queues, index, stamp_handler, lat);
    if (!rc)
        rc = tq_worker_new(&w, db, &o);
    rc = drive_worker(db, w, rc, 1, "idle worker", index);
    tq_worker_free(w);
    tq_close(db);
    return rc ? EXIT_RUNTIME : 0;
}

/*
 * Enqueue-to-start latency with idle workers: nworkers wait on a fresh
 * queue; jobs are enqueued one at a time, each once the previous one has
 * started and the workers have been idle for 20 ms. Latency is from the
 * return of the enqueue (its commit) to the handler's start.
 */
static int measure_latency(const char *url, int nworkers, int njobs, int64_t *p50,
                           int64_t *p99)
{
    char queue[64];
    tq *db = NULL;
    size_t size = sizeof(latency) + (size_t)njobs * sizeof(int64_t);
    latency *lat =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (lat == MAP_FAILED)
        return EXIT_RUNTIME;
    lat->n = njobs;
    snprintf(queue, sizeof queue, "benchlat.%lld.%ld", (long long)time(NULL),
             (long)getpid());
    pid_t pids[256];
    int started = 0, ex = 0;
    fflush(NULL);
    for (int i = 0; i < nworkers; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(run_idle_worker(url, queue, i, lat));
        if (p > 0)
            pids[started++] = p;
    }
    int64_t *delays = calloc((size_t)njobs, sizeof *delays);
    int rc = delays ? tq_open(&db, url, NULL) : TQ_ENOMEM;
    struct timespec idle = {0, 20000000}, tick = {0, 200000};
    nanosleep(&(struct timespec){0, 300000000}, NULL); /* let them register */
    for (int i = 0; i < njobs && !rc; i++) {
        char payload[16];
        int64_t id;
        snprintf(payload, sizeof payload, "%d", i);
        nanosleep(&idle, NULL);
        rc = tq_job_enqueue(&id, db, queue, payload, strlen(payload), NULL);
        int64_t enq = wall_us();
        for (int64_t waited = 0; !rc && !atomic_load(&lat->started[i]); waited += 200) {
            if (waited > 10000000) {
                cli_error("bench", "latency job %d did not start within 10s", i);
                rc = TQ_EBUSY;
                break;
            }
            nanosleep(&tick, NULL);
        }
        if (!rc)
            delays[i] = atomic_load(&lat->started[i]) - enq;
    }
    if (rc) {
        if (delays)
            cli_fail("bench", db, rc);
        else
            cli_error("bench", "out of memory");
        ex = EXIT_RUNTIME;
    }
    tq_close(db);
    for (int i = 0; i < started; i++)
        kill(pids[i], SIGTERM);
    for (int i = 0; i < started; i++) {
        int st;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            ex = EXIT_RUNTIME;
    }
    /* A start stamped before the enqueue returned is a negative delay:
     * count it as zero. */
    for (int i = 0; i < njobs && delays; i++)
        if (delays[i] < 0)
            delays[i] = 0;
    *p50 = delays ? tq_percentile(delays, (size_t)njobs, 0.50) : 0;
    *p99 = delays ? tq_percentile(delays, (size_t)njobs, 0.99) : 0;
    free(delays);
    munmap(lat, size);
    return ex;
}

enum { BATCH_MAX = 1000 }; /* most jobs per enqueue transaction */

/* This process's peak resident memory without its shared memory pages,
 * in KiB, or -1 if /proc does not say. The shared pages are runs[] below,
 * 4 bytes per job: at 200,000 jobs they alone add ~0.8 MiB to every worker
 * that touches them, which is the bench's bookkeeping, not the worker's. */
static int64_t own_peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long hwm = -1, shmem = -1, v;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmHWM: %lld kB", &v) == 1)
            hwm = v;
        else if (sscanf(line, "RssShmem: %lld kB", &v) == 1)
            shmem = v;
    }
    fclose(f);
    return hwm >= 0 && shmem >= 0 ? hwm - shmem : -1;
}

/* One worker process: returns its exit code. */
static int run_worker(const char *url, const char *queue, int index, int concurrency,
                      int prefetch, shared *sh)
{
    tq *db = NULL;
    tq_worker *w = NULL;
    char name[128];
    const char *queues[1] = {queue};
    int rc = tq_open(&db, url, NULL);
    if (rc) {
        cli_error("bench", "worker %d: %s", index, tq_errmsg(db));
        tq_close(db);
        return EXIT_RUNTIME;
    }
    tq_worker_opts o = worker_opts(&name, queues, index, noop_handler, sh);
    o.concurrency = concurrency;
    o.prefetch = prefetch;
    o.drain = !sh->per_round; /* --rounds: until SIGTERM */
    o.poll_max_us = 20000;
    if (sh->per_round)
        stop_on_sigterm();
    rc = tq_worker_new(&w, db, &o);
    rc = drive_worker(db, w, rc, sh->per_round, "worker", index);
    if (w) {
        tq_worker_counters k;
        tq_worker_counters_get(&k, w);
        atomic_fetch_add(&sh->busy_retries, k.busy_retries);
        atomic_fetch_add(&sh->lost_acks, k.lost);
    }
    tq_worker_free(w);
    tq_close(db);
    int64_t own = own_peak_rss_kb(), seen = atomic_load(&sh->peak_own_kb);
    while (own > seen && !atomic_compare_exchange_weak(&sh->peak_own_kb, &seen, own))
        ;
    return rc ? EXIT_RUNTIME : 0;
}

/* Jobs of one group enqueued in a row with --groups: the groups take turns
 * in blocks of this many, as jobs of many customers arrive. */
#define GROUP_BLOCK 10 /* --help says so */

/* Enqueues n jobs in transactions of up to batch (with --groups, of one
 * group's block); the first id ever goes to sh->first_id, the last to
 * *last_id, and *enqueued grows by n. */
static int enqueue_jobs(tq *db, const char *queue, tq_payload *items, size_t batch,
                        long long n, shared *sh, long long *enqueued, int64_t *last_id)
{
    int64_t ids[BATCH_MAX];
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    char group[32];
    for (long long done = 0; done < n;) {
        size_t k = n - done < (long long)batch ? (size_t)(n - done) : batch;
        if (sh->groups) {
            size_t left = GROUP_BLOCK - (size_t)(*enqueued % GROUP_BLOCK);
            k = k < left ? k : left;
            snprintf(group, sizeof group, "g%lld",
                     (long long)(*enqueued / GROUP_BLOCK % sh->groups));
            eo.group = group;
        }
        int rc = tq_job_enqueue_batch(ids, db, queue, items, k, &eo);
        if (rc)
            return rc;
        if (*enqueued == 0)
            sh->first_id = ids[0];
        *last_id = ids[k - 1];
        done += (long long)k;
        *enqueued += (long long)k;
    }
    return 0;
}

/* Waits for the workers in pids (all of them, or with WNOHANG those that
 * have exited), marking each reaped one -1; *failed = 1 if one did not exit
 * with 0. Returns how many it reaped. */
static int reap(pid_t *pids, int n, int options, int *failed)
{
    int reaped = 0, st;
    for (int i = 0; i < n; i++) {
        if (pids[i] <= 0)
            continue;
        pid_t r;
        while ((r = waitpid(pids[i], &st, options)) < 0 && errno == EINTR)
            ;
        if (r != pids[i])
            continue;
        pids[i] = -1;
        reaped++;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            *failed = 1;
    }
    return reaped;
}

/* --rounds: enqueue the rest of the jobs while the workers run, never more
 * than one round ahead of the jobs started, and return once all have
 * started, a worker has exited (*worker_fail) or none started for 2 min. */
static int feed(tq *db, const char *queue, tq_payload *items, size_t batch,
                long long total, shared *sh, long long *enqueued, int64_t *last_id,
                pid_t *pids, int nworkers, int *worker_fail)
{
    int64_t last_ran = -1, progress_at = now_us();
    struct timespec tick = {0, 1000000};
    for (;;) {
        int64_t ran = atomic_load(&sh->ran);
        if (*enqueued < total && *enqueued - ran < sh->per_round) {
            long long n = total - *enqueued < (long long)batch ? total - *enqueued
                                                               : (long long)batch;
            int rc = enqueue_jobs(db, queue, items, batch, n, sh, enqueued, last_id);
            if (rc)
                return rc;
            continue;
        }
        if (ran >= total)
            return 0;
        if (reap(pids, nworkers, WNOHANG, worker_fail)) {
            *worker_fail = 1; /* a resident worker never leaves by itself */
            return 0;
        }
        int64_t now = now_us();
        if (ran != last_ran) {
            last_ran = ran;
            progress_at = now;
        } else if (now - progress_at > 120000000) {
            cli_error("bench", "no job started for 2 minutes (%lld of %lld)",
                      (long long)ran, total);
            *worker_fail = 1;
            return 0;
        }
        nanosleep(&tick, NULL);
    }
}

/* ---- tq bench: parse, set up, work, verify, report ------------------------ */

/* What was asked for. */
typedef struct bench_cfg {
    const char *url;
    long long njobs, nworkers, conc, psize, nlat, prefetch, ebatch, rounds;
    long long groups, max_running, max_per_group, result_bytes;
    int64_t rate, rate_period_us;
    int json, delete_done;
    int64_t lease_us, retain_done_us;
} bench_cfg;

/* One run: its store and queue, the counters the workers share, and what
 * was measured. */
typedef struct bench_args {
    bench_cfg c;
    char tmpdir[32], tmpdb[64], store[512], queue[64];
    shared *sh;
    size_t shsize;
    char *payload;
    tq_payload items[BATCH_MAX];
    long long total, enqueued;
    int64_t last_id, t0, t_enq, t_work;
    int worker_fail;
    long peak_rss_kb;
    int64_t lost, dups, ran, done_in_store, p50, p99, lat50, lat99;
    double enq_rate, proc_rate, round_rate[ROUNDS_MAX];
} bench_args;

static int opt_rate(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    bench_cfg *c = &((bench_args *)args)->c;
    return cli_rate("bench", arg, &c->rate, &c->rate_period_us) ? EXIT_USAGE : 0;
}

static const bench_args defaults = {.c = {.njobs = 20000,
                                          .nworkers = 8,
                                          .conc = 1,
                                          .psize = 16,
                                          .nlat = 100,
                                          .prefetch = -1,
                                          .ebatch = BATCH_MAX,
                                          .rounds = 1,
                                          .lease_us = 30000000}};

#define INT_OPT(S, L, F, MIN, MAX) CLI_OPT_INT(S, L, bench_args, c.F, MIN, MAX)
static const cli_opt opts[] = {
    INT_OPT(0, "jobs", njobs, 1, 100000000),
    INT_OPT(0, "workers", nworkers, 1, 256),
    INT_OPT('c', "concurrency", conc, 1, TQ_CONCURRENCY_MAX),
    INT_OPT(0, "prefetch", prefetch, 0, TQ_PREFETCH_MAX),
    INT_OPT(0, "enqueue-batch", ebatch, 1, BATCH_MAX),
    INT_OPT(0, "payload", psize, 0, TQ_PAYLOAD_MAX_DEFAULT),
    CLI_OPT_FLAG('j', "json", bench_args, c.json, 1),
    INT_OPT(0, "latency-jobs", nlat, 0, 100000),
    CLI_OPT_DURATION(0, "lease", bench_args, c.lease_us),
    CLI_OPT_FLAG(0, "delete-done", bench_args, c.delete_done, 1),
    CLI_OPT_DURATION(0, "retain-done", bench_args, c.retain_done_us),
    INT_OPT(0, "rounds", rounds, 1, ROUNDS_MAX),
    INT_OPT(0, "groups", groups, 0, 1000000),
    INT_OPT(0, "max-running", max_running, 0, 1000000),
    INT_OPT(0, "max-running-per-group", max_per_group, 0, 1000000),
    CLI_OPT_CALLBACK(0, "rate", 1, opt_rate, 0),
    INT_OPT(0, "result", result_bytes, 0, TQ_RESULT_MAX),
    CLI_OPT_END};

/* After the options: 0, or the exit code of a bad command line. */
static int bench_parse(void *args, const char **url, int argc, char **argv)
{
    bench_cfg *c = &((bench_args *)args)->c;
    int ex = cli_no_args(&cmd_bench, argc, argv, optind);
    if (ex)
        return ex;
    c->url = *url; /* none: $TQ_DB, else a throwaway file (bench_setup) */
    if (c->njobs * c->rounds > 100000000) {
        cli_error("bench", "--jobs times --rounds is %lld; at most 100000000",
                  c->njobs * c->rounds);
        return EXIT_USAGE;
    }
    return 0;
}

/* The store (a throwaway SQLite file without --db or $TQ_DB), a fresh
 * queue, the shared counters, and the jobs enqueued in batches (1000 by
 * default), one transaction each: all of them now, or with --rounds the
 * first batch now and the rest while the workers run. */
static int bench_setup(bench_args *b)
{
    const bench_cfg *c = &b->c;
    if (!b->c.url)
        b->c.url = getenv("TQ_DB");
    if (!b->c.url || !*b->c.url) {
        snprintf(b->tmpdir, sizeof b->tmpdir, "/tmp/tq-bench-XXXXXX");
        if (!mkdtemp(b->tmpdir)) {
            b->tmpdir[0] = '\0';
            cli_error("bench", "cannot make a temporary directory: %s", strerror(errno));
            return EXIT_RUNTIME;
        }
        snprintf(b->tmpdb, sizeof b->tmpdb, "%s/bench.db", b->tmpdir);
        b->c.url = b->tmpdb;
    }
    tq *db = NULL;
    tq_open_opts oo = TQ_OPEN_OPTS_INIT;
    oo.create = 1;
    int rc = tq_open(&db, c->url, &oo), ex = 0;
    if (!rc)
        rc = tq_init(db);
    snprintf(b->store, sizeof b->store, "%s", tq_store_name(db));
    snprintf(b->queue, sizeof b->queue, "bench.%lld.%ld", (long long)time(NULL),
             (long)getpid());
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_LEASE | TQ_SET_KEEP_DONE | TQ_SET_MAX_RUNNING |
             TQ_SET_MAX_RUNNING_PER_GROUP | TQ_SET_RATE | TQ_SET_RETAIN_DONE;
    qo.retain_done_us = c->retain_done_us;
    qo.lease_us = c->lease_us;
    qo.keep_done = !c->delete_done;
    qo.max_running = (int)c->max_running;
    qo.max_running_per_group = (int)c->max_per_group;
    qo.rate_limit = c->rate;
    qo.rate_period_us = c->rate_period_us;
    if (!rc)
        rc = tq_queue_set(db, b->queue, &qo);
    if (rc) {
        ex = cli_fail("bench", db, rc);
        tq_close(db);
        return ex;
    }
    b->total = c->njobs * c->rounds;
    b->shsize = sizeof(shared) + (size_t)b->total * sizeof(uint32_t);
    b->sh =
        mmap(NULL, b->shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b->sh == MAP_FAILED) {
        b->sh = NULL;
        cli_error("bench", "mmap: %s", strerror(errno));
        tq_close(db);
        return EXIT_RUNTIME;
    }
    if (!(b->payload = malloc((size_t)c->psize + 1))) {
        cli_error("bench", "out of memory for a %lld-byte payload", (long long)c->psize);
        tq_close(db);
        return EXIT_RUNTIME;
    }
    memset(b->payload, 'x', (size_t)c->psize);
    for (int i = 0; i < BATCH_MAX; i++)
        b->items[i] = (tq_payload){b->payload, (size_t)c->psize};
    b->sh->njobs = b->total;
    b->sh->per_round = c->rounds > 1 ? c->njobs : 0;
    b->sh->groups = c->groups;
    b->sh->result_bytes = c->result_bytes;
    const long long batch = c->ebatch,
                    first = c->rounds > 1 && batch < b->total ? batch : b->total;
    b->t0 = now_us();
    rc = enqueue_jobs(db, b->queue, b->items, (size_t)batch, first, b->sh, &b->enqueued,
                      &b->last_id);
    b->t_enq = now_us() - b->t0;
    if (rc)
        ex = cli_fail("bench", db, rc);
    tq_close(db); /* no connection may cross fork() */
    return ex;
}

/* The worker processes, until the queue is drained (or, with --rounds,
 * until every round was fed and done). */
static void bench_work(bench_args *b)
{
    const bench_cfg *c = &b->c;
    pid_t pids[256];
    int started = 0;
    fflush(NULL);
    b->t0 = now_us();
    for (int i = 0; i < c->nworkers; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(run_worker(c->url, b->queue, i, (int)c->conc,
                             c->prefetch < 0    ? 0
                             : c->prefetch == 0 ? -1
                                                : (int)c->prefetch,
                             b->sh));
        if (p < 0) {
            cli_error("bench", "fork: %s", strerror(errno));
            b->worker_fail = 1;
            break;
        }
        pids[started++] = p;
    }
    if (c->rounds > 1 && !b->worker_fail) {
        tq *db = NULL;
        int64_t t_feed = now_us();
        int rc = tq_open(&db, c->url, NULL);
        if (!rc)
            rc = feed(db, b->queue, b->items, (size_t)c->ebatch, b->total, b->sh,
                      &b->enqueued, &b->last_id, pids, started, &b->worker_fail);
        b->t_enq = now_us() - t_feed; /* paced by the workers */
        if (rc) {
            cli_fail("bench", db, rc);
            b->worker_fail = 1;
        }
        tq_close(db);
        for (int i = 0; i < started; i++)
            if (pids[i] > 0)
                kill(pids[i], SIGTERM);
    }
    /* On a terminal, the jobs run so far while the workers drain. */
    cli_progress pr;
    cli_progress_start(&pr, "ran", c->json);
    if (pr.on) {
        struct timespec tick = {0, 2000000};
        int left = started;
        while (left > 0) {
            left -= reap(pids, started, WNOHANG, &b->worker_fail);
            cli_progress_show(&pr, atomic_load(&b->sh->ran), b->total, NULL);
            if (left > 0)
                nanosleep(&tick, NULL);
        }
        cli_progress_end(&pr);
    }
    reap(pids, started, 0, &b->worker_fail);
    b->t_work = now_us() - b->t0;
    if (c->rounds > 1 && atomic_load(&b->sh->round_end[c->rounds]))
        b->t_work =
            atomic_load(&b->sh->round_end[c->rounds]) - b->t0; /* the last start */
    /* The largest worker's peak resident memory, without runs[] if /proc
     * tells (own_peak_rss_kb). */
    struct rusage ru;
    b->peak_rss_kb = getrusage(RUSAGE_CHILDREN, &ru) == 0 ? ru.ru_maxrss : 0;
    if (atomic_load(&b->sh->peak_own_kb) > 0)
        b->peak_rss_kb = (long)atomic_load(&b->sh->peak_own_kb);
}

/* Every job ran exactly once, by the workers' counters, and the store
 * agrees; then the enqueue-to-start latency and the rates. 0, or the exit
 * code when the run cannot be judged. */
static int bench_verify(bench_args *b)
{
    const bench_cfg *c = &b->c;
    if (b->last_id - b->sh->first_id + 1 != b->enqueued) {
        /* Ids are consecutive when no one else writes meanwhile; the
         * counters assume it. */
        cli_error("bench", "another writer interleaved with the enqueue; run on a "
                           "quiet store");
        return EXIT_RUNTIME;
    }
    for (int64_t i = 0; i < b->total; i++) {
        uint32_t r = atomic_load(&b->sh->runs[i]);
        b->ran += r;
        if (r == 0)
            b->lost++;
        else if (r > 1)
            b->dups += r - 1;
    }
    /* All done in the store (or, deleting done rows, none left). */
    tq *db = NULL;
    b->done_in_store = -1;
    int rc = tq_open(&db, c->url, NULL);
    if (!rc) {
        tq_stats st;
        int64_t *d = NULL;
        size_t nd = 0;
        if (!(rc = tq_stats_get(&st, db, b->queue))) {
            b->done_in_store = st.count[TQ_DONE];
            if (c->delete_done || c->retain_done_us) { /* rows gone: done */
                int64_t left = 0;
                for (int k = 0; k < TQ_STATE_COUNT; k++)
                    left += st.count[k];
                b->done_in_store += b->total - left;
            }
        }
        if (!rc && !(rc = tq_job_durations(&d, &nd, db, b->queue, (size_t)b->total))) {
            b->p50 = tq_percentile(d, nd, 0.50);
            b->p99 = tq_percentile(d, nd, 0.99);
            tq_free(d);
        }
    }
    if (rc)
        cli_fail("bench", db, rc);
    tq_close(db);
    if (c->nlat > 0 &&
        measure_latency(c->url, (int)c->nworkers, (int)c->nlat, &b->lat50, &b->lat99))
        b->worker_fail = 1;
    b->enq_rate = (double)b->total / ((double)b->t_enq / 1e6);
    b->proc_rate = (double)b->total / ((double)b->t_work / 1e6);
    for (long long k = 1; k <= c->rounds && c->rounds > 1; k++) {
        int64_t from = k == 1 ? b->t0 : atomic_load(&b->sh->round_end[k - 1]),
                to = atomic_load(&b->sh->round_end[k]);
        b->round_rate[k - 1] =
            from && to > from ? (double)c->njobs / ((double)(to - from) / 1e6) : 0;
    }
    return 0;
}

static void bench_report_json(const bench_args *b)
{
    const bench_cfg *c = &b->c;
    json_t *o = json_object();
    json_object_set_new(
        o, "engine", json_string(strncmp(c->url, "postgres", 8) ? "sqlite" : "postgres"));
    json_object_set_new(o, "jobs", json_integer(b->total));
    json_object_set_new(o, "workers", json_integer(c->nworkers));
    json_object_set_new(o, "concurrency", json_integer(c->conc));
    json_object_set_new(
        o, "prefetch", json_integer(c->prefetch < 0 ? TQ_PREFETCH_DEFAULT : c->prefetch));
    json_object_set_new(o, "done", json_integer(b->done_in_store));
    json_object_set_new(o, "ran", json_integer(b->ran));
    json_object_set_new(o, "lost", json_integer(b->lost));
    json_object_set_new(o, "duplicates", json_integer(b->dups));
    json_object_set_new(o, "enqueue_per_s", json_real(b->enq_rate));
    json_object_set_new(o, "enqueue_batch", json_integer(c->ebatch));
    json_object_set_new(o, "groups", json_integer(c->groups));
    json_object_set_new(o, "max_running", json_integer(c->max_running));
    json_object_set_new(o, "max_running_per_group", json_integer(c->max_per_group));
    json_object_set_new(o, "rate_limit", json_integer(c->rate));
    json_object_set_new(o, "rate_period_us", json_integer(c->rate_period_us));
    json_object_set_new(o, "worker_peak_rss_kb", json_integer(b->peak_rss_kb));
    json_object_set_new(o, "process_per_s", json_real(b->proc_rate));
    json_object_set_new(o, "enqueue_s", json_real((double)b->t_enq / 1e6));
    json_object_set_new(o, "process_s", json_real((double)b->t_work / 1e6));
    json_object_set_new(o, "latency_p50_us", json_integer(b->p50));
    json_object_set_new(o, "latency_p99_us", json_integer(b->p99));
    json_object_set_new(o, "busy_retries",
                        json_integer(atomic_load(&b->sh->busy_retries)));
    json_object_set_new(o, "start_latency_jobs", json_integer(c->nlat));
    json_object_set_new(o, "start_latency_p50_us", json_integer(b->lat50));
    json_object_set_new(o, "start_latency_p99_us", json_integer(b->lat99));
    json_object_set_new(o, "fenced_acks", json_integer(atomic_load(&b->sh->lost_acks)));
    if (c->rounds > 1) {
        json_t *a = json_array();
        for (long long k = 0; k < c->rounds; k++)
            json_array_append_new(a, json_real(b->round_rate[k]));
        json_object_set_new(o, "rounds", json_integer(c->rounds));
        json_object_set_new(o, "round_per_s", a);
    }
    char *s = json_dumps(o, JSON_PRESERVE_ORDER);
    json_decref(o);
    if (s)
        puts(s);
    free(s);
}

static void bench_report_text(const bench_args *b)
{
    const bench_cfg *c = &b->c;
    char x[24], y[24];
    printf("tq bench: %lld jobs, %lld worker processes x %lld slots, store %s\n",
           b->total, c->nworkers, c->conc,
           b->tmpdb[0] ? "(temporary SQLite file)" : b->store);
    printf("  enqueue   %10.0f jobs/s  (%.2fs, batches of %d%s)\n", b->enq_rate,
           (double)b->t_enq / 1e6, (int)c->ebatch,
           c->rounds > 1 ? ", paced by the workers" : "");
    printf("  process   %10.0f jobs/s  (%.2fs)\n", b->proc_rate, (double)b->t_work / 1e6);
    if (c->rounds > 1) {
        printf("  per round of %lld (jobs/s):", c->njobs);
        for (long long k = 0; k < c->rounds; k++)
            printf(" %.0f", b->round_rate[k]);
        printf("\n");
    }
    printf("  start-to-done latency  p50 %s  p99 %s\n",
           tq_duration_format(x, sizeof x, b->p50),
           tq_duration_format(y, sizeof y, b->p99));
    printf("  busy retries %lld\n", (long long)atomic_load(&b->sh->busy_retries));
    if (c->nlat > 0)
        printf("  enqueue-to-start latency, idle workers  p50 %s  p99 %s  (%lld jobs)\n",
               tq_duration_format(x, sizeof x, b->lat50),
               tq_duration_format(y, sizeof y, b->lat99), c->nlat);
    printf("  done %lld  lost %lld  duplicates %lld\n", (long long)b->done_in_store,
           (long long)b->lost, (long long)b->dups);
}

/* The report, and the verdict: EXIT_RUNTIME if a job was lost or ran
 * twice, a worker failed, or the store disagrees. */
static int bench_report(const bench_args *b)
{
    if (b->c.json)
        bench_report_json(b);
    else
        bench_report_text(b);
    if (!b->lost && !b->dups && !b->worker_fail && b->done_in_store == b->total &&
        !atomic_load(&b->sh->out_of_range))
        return 0;
    if (b->lost || b->dups)
        cli_error("bench", "FAILED: %lld lost, %lld duplicates", (long long)b->lost,
                  (long long)b->dups);
    else
        cli_error("bench", "FAILED: a worker failed or the store shows %lld of %lld done",
                  (long long)b->done_in_store, b->total);
    return EXIT_RUNTIME;
}

static void bench_cleanup(bench_args *b)
{
    free(b->payload);
    if (b->sh)
        munmap(b->sh, b->shsize);
    if (b->tmpdb[0]) {
        char p[96];
        unlink(b->tmpdb);
        snprintf(p, sizeof p, "%s-wal", b->tmpdb);
        unlink(p);
        snprintf(p, sizeof p, "%s-shm", b->tmpdb);
        unlink(p);
    }
    if (b->tmpdir[0])
        rmdir(b->tmpdir);
}

/* Sets up, works, verifies and reports: the exit code. */
static int bench_run(void *args, tq *unused)
{
    (void)unused; /* its processes open their own */
    bench_args *b = args;
    int ex = bench_setup(b);
    if (!ex) {
        bench_work(b);
        if (!(ex = bench_verify(b)))
            ex = bench_report(b);
    }
    bench_cleanup(b);
    return ex;
}

CLI_COMMAND(bench, "enqueue and process N jobs, check each ran once", CLI_OPEN_NONE,
            &defaults, opts, usage, help, NULL);
