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

typedef struct shared {
    _Atomic int64_t busy_retries;
    _Atomic int64_t lost_acks;    /* acks refused by the fence */
    _Atomic int64_t out_of_range; /* handler saw an id we did not enqueue */
    _Atomic int64_t peak_own_kb;  /* largest worker peak RSS, without runs[] */
    int64_t first_id;
    int64_t njobs;
    int64_t per_round;                         /* --rounds: jobs per round, else 0 */
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

/* An idle worker for the latency phase: runs until SIGTERM. */
static int run_idle_worker(const char *url, const char *queue, int index, latency *lat)
{
    tq *db = NULL;
    tq_worker *w = NULL;
    char name[128];
    const char *queues[1] = {queue};
    stop_on_sigterm();
    int rc = tq_open(&db, url, NULL);
    snprintf(name, sizeof name, "%s.w%d", queue, index);
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.queues = queues;
    o.nqueues = 1;
    o.name = name;
    o.handler = stamp_handler;
    o.handler_ud = lat;
    if (!rc)
        rc = tq_worker_new(&w, db, &o);
    resident_ready(w);
    if (!rc)
        rc = tq_worker_run(w);
    resident_worker = NULL;
    if (rc)
        cli_error("bench", "idle worker %d: %s", index, tq_errmsg(db));
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
    snprintf(name, sizeof name, "%s.w%d", queue, index);
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.queues = queues;
    o.nqueues = 1;
    o.name = name;
    o.concurrency = concurrency;
    o.prefetch = prefetch;
    o.drain = !sh->per_round; /* --rounds: until SIGTERM */
    o.poll_max_us = 20000;
    o.handler = noop_handler;
    o.handler_ud = sh;
    if (sh->per_round)
        stop_on_sigterm();
    rc = tq_worker_new(&w, db, &o);
    if (sh->per_round)
        resident_ready(w);
    if (!rc)
        rc = tq_worker_run(w);
    resident_worker = NULL;
    if (rc)
        cli_error("bench", "worker %d: %s", index, tq_errmsg(db));
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

/* Enqueues n jobs in transactions of up to batch; the first id ever goes to
 * sh->first_id, the last to *last_id, and *enqueued grows by n. */
static int enqueue_jobs(tq *db, const char *queue, tq_payload *items, size_t batch,
                        long long n, shared *sh, long long *enqueued, int64_t *last_id)
{
    int64_t ids[BATCH_MAX];
    for (long long done = 0; done < n;) {
        size_t k = n - done < (long long)batch ? (size_t)(n - done) : batch;
        int rc = tq_job_enqueue_batch(ids, db, queue, items, k, NULL);
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

int cmd_bench(int argc, char **argv)
{
    static const char usage[] =
        "tq bench [--jobs N] [--workers W] [--concurrency C] "
        "[--prefetch N] [--enqueue-batch N] [--payload BYTES] "
        "[--latency-jobs N] [--lease DUR] [--delete-done] [--rounds R] "
        "[--json] [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"jobs", required_argument, NULL, 'n'},
                                       {"workers", required_argument, NULL, 'w'},
                                       {"concurrency", required_argument, NULL, 'c'},
                                       {"prefetch", required_argument, NULL, 'f'},
                                       {"enqueue-batch", required_argument, NULL, 'b'},
                                       {"payload", required_argument, NULL, 'p'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"latency-jobs", required_argument, NULL, 'l'},
                                       {"lease", required_argument, NULL, 'L'},
                                       {"delete-done", no_argument, NULL, 'd'},
                                       {"rounds", required_argument, NULL, 'r'},
                                       {0}};
    const char *url = NULL;
    long long njobs = 20000, nworkers = 8, conc = 1, psize = 16, nlat = 100,
              prefetch = -1, ebatch = BATCH_MAX, rounds = 1;
    int c, json = 0, ex = 0, delete_done = 0;
    int64_t lease_us = 30000000;
    char tmpdir[] = "/tmp/tq-bench-XXXXXX", tmpdb[64] = "";

    static const cli_cmd me = {
        .name = "bench",
        .usage = usage,
        .help = "Enqueues N jobs (default 20000) into a fresh queue, runs W worker\n"
                "processes (default 8) with a no-op handler until drained, checks\n"
                "that every job ran exactly once, and reports rates and latency.\n"
                "Then measures enqueue-to-start latency: --latency-jobs jobs (100)\n"
                "enqueued one at a time to W idle workers.\n"
                "--enqueue-batch N: jobs per enqueue transaction (1 to 1000; 1000).\n"
                "--prefetch N: jobs a worker may claim ahead of its free slots\n"
                "(default 2048, 0: none).\n"
                "--delete-done: the queue deletes finished jobs' rows (keep_done 0).\n"
                "--rounds R: a sustained run of R x N jobs (1 to 1000; 1): the workers\n"
                "start first and stay up, jobs are enqueued while they work (at most\n"
                "N ahead), and the rate of every N jobs in a row is reported.\n"
                "Without --db (or $TQ_DB) it uses a throwaway SQLite file.\n"
                "Exits 1 if any job was lost or ran twice.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        switch (c) {
        case 'n':
            if (cli_int("bench", "--jobs", optarg, 1, 100000000, &njobs))
                return EXIT_USAGE;
            break;
        case 'w':
            if (cli_int("bench", "--workers", optarg, 1, 256, &nworkers))
                return EXIT_USAGE;
            break;
        case 'c':
            if (cli_int("bench", "--concurrency", optarg, 1, TQ_CONCURRENCY_MAX, &conc))
                return EXIT_USAGE;
            break;
        case 'f':
            if (cli_int("bench", "--prefetch", optarg, 0, TQ_PREFETCH_MAX, &prefetch))
                return EXIT_USAGE;
            break;
        case 'b':
            if (cli_int("bench", "--enqueue-batch", optarg, 1, BATCH_MAX, &ebatch))
                return EXIT_USAGE;
            break;
        case 'p':
            if (cli_int("bench", "--payload", optarg, 0, TQ_PAYLOAD_MAX_DEFAULT, &psize))
                return EXIT_USAGE;
            break;
        case 'j':
            json = 1;
            break;
        case 'd':
            delete_done = 1;
            break;
        case 'r':
            if (cli_int("bench", "--rounds", optarg, 1, ROUNDS_MAX, &rounds))
                return EXIT_USAGE;
            break;
        case 'l':
            if (cli_int("bench", "--latency-jobs", optarg, 0, 100000, &nlat))
                return EXIT_USAGE;
            break;
        case 'L':
            if (cli_duration("bench", "--lease", optarg, &lease_us))
                return EXIT_USAGE;
            break;
        default:
            return cli_bad_option(&me, argv);
        }
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    if (njobs * rounds > 100000000) {
        cli_error("bench", "--jobs times --rounds is %lld; at most 100000000",
                  njobs * rounds);
        return EXIT_USAGE;
    }
    if (!url)
        url = getenv("TQ_DB");
    if (!url || !*url) {
        if (!mkdtemp(tmpdir)) {
            cli_error("bench", "cannot make a temporary directory: %s", strerror(errno));
            return EXIT_RUNTIME;
        }
        snprintf(tmpdb, sizeof tmpdb, "%s/bench.db", tmpdir);
        url = tmpdb;
    }

    /* Store and a fresh queue. */
    tq *db = NULL;
    tq_open_opts oo = TQ_OPEN_OPTS_INIT;
    oo.create = 1;
    int rc = tq_open(&db, url, &oo);
    if (!rc)
        rc = tq_init(db);
    char store[512];
    snprintf(store, sizeof store, "%s", tq_store_name(db));
    char queue[64];
    snprintf(queue, sizeof queue, "bench.%lld.%ld", (long long)time(NULL),
             (long)getpid());
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_LEASE | TQ_SET_KEEP_DONE;
    qo.lease_us = lease_us;
    qo.keep_done = !delete_done;
    if (!rc)
        rc = tq_queue_set(db, queue, &qo);
    if (rc) {
        ex = cli_fail("bench", db, rc);
        tq_close(db);
        goto cleanup;
    }

    /* Enqueue in batches (1000 by default), one transaction each: all of
     * them now, or with --rounds the first batch now and the rest while the
     * workers run. */
    const long long total = njobs * rounds;
    size_t shsize = sizeof(shared) + (size_t)total * sizeof(uint32_t);
    shared *sh =
        mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        cli_error("bench", "mmap: %s", strerror(errno));
        tq_close(db);
        ex = EXIT_RUNTIME;
        goto cleanup;
    }
    const size_t batch = (size_t)ebatch;
    tq_payload items[BATCH_MAX];
    char *payload = malloc((size_t)psize + 1);
    if (!payload) {
        cli_error("bench", "out of memory for a %lld-byte payload", (long long)psize);
        tq_close(db);
        munmap(sh, shsize);
        ex = EXIT_RUNTIME;
        goto cleanup;
    }
    memset(payload, 'x', (size_t)psize);
    for (int i = 0; i < BATCH_MAX; i++)
        items[i] = (tq_payload){payload, (size_t)psize};
    sh->njobs = total;
    sh->per_round = rounds > 1 ? njobs : 0;
    long long enqueued = 0;
    int64_t t0 = now_us(), last_id = 0;
    rc = enqueue_jobs(db, queue, items, batch,
                      rounds > 1 ? (long long)batch < total ? (long long)batch : total
                                 : total,
                      sh, &enqueued, &last_id);
    int64_t t_enq = now_us() - t0;
    if (rc) {
        ex = cli_fail("bench", db, rc);
        tq_close(db);
        free(payload);
        munmap(sh, shsize);
        goto cleanup;
    }
    tq_close(db); /* no connection may cross fork() */
    db = NULL;

    /* Work. */
    pid_t pids[256];
    int started = 0, worker_fail = 0;
    fflush(NULL);
    t0 = now_us();
    for (int i = 0; i < nworkers; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(run_worker(url, queue, i, (int)conc,
                             prefetch < 0    ? 0
                             : prefetch == 0 ? -1
                                             : (int)prefetch,
                             sh));
        if (p < 0) {
            cli_error("bench", "fork: %s", strerror(errno));
            worker_fail = 1;
            break;
        }
        pids[started++] = p;
    }
    if (rounds > 1 && !worker_fail) {
        int64_t t_feed = now_us();
        if (!(rc = tq_open(&db, url, NULL)))
            rc = feed(db, queue, items, batch, total, sh, &enqueued, &last_id, pids,
                      started, &worker_fail);
        t_enq = now_us() - t_feed; /* paced by the workers */
        if (rc) {
            cli_fail("bench", db, rc);
            worker_fail = 1;
        }
        tq_close(db);
        db = NULL;
        for (int i = 0; i < started; i++)
            if (pids[i] > 0)
                kill(pids[i], SIGTERM);
    }
    reap(pids, started, 0, &worker_fail);
    int64_t t_work = now_us() - t0;
    if (rounds > 1 && atomic_load(&sh->round_end[rounds]))
        t_work = atomic_load(&sh->round_end[rounds]) - t0; /* the last job started */
    free(payload);
    if (last_id - sh->first_id + 1 != enqueued) {
        /* Ids are consecutive when no one else writes meanwhile; the
         * counters assume it. */
        cli_error("bench", "another writer interleaved with the enqueue; run on a "
                           "quiet store");
        munmap(sh, shsize);
        ex = EXIT_RUNTIME;
        goto cleanup;
    }
    /* The largest worker's peak resident memory, without runs[] if /proc
     * tells (own_peak_rss_kb). */
    struct rusage ru;
    long peak_rss_kb = getrusage(RUSAGE_CHILDREN, &ru) == 0 ? ru.ru_maxrss : 0;
    if (atomic_load(&sh->peak_own_kb) > 0)
        peak_rss_kb = (long)atomic_load(&sh->peak_own_kb);

    /* Verify: every job ran exactly once. */
    int64_t lost = 0, dups = 0, ran = 0;
    for (int64_t i = 0; i < total; i++) {
        uint32_t r = atomic_load(&sh->runs[i]);
        ran += r;
        if (r == 0)
            lost++;
        else if (r > 1)
            dups += r - 1;
    }
    /* And the store agrees: all done (or, deleting done rows, none left). */
    int64_t done_in_store = -1, p50 = 0, p99 = 0;
    if (!(rc = tq_open(&db, url, NULL))) {
        tq_stats st;
        int64_t *d = NULL;
        size_t nd = 0;
        if (!(rc = tq_stats_get(&st, db, queue))) {
            done_in_store = st.count[TQ_DONE];
            if (delete_done) { /* every row gone: all done */
                int64_t left = 0;
                for (int k = 0; k < TQ_STATE_COUNT; k++)
                    left += st.count[k];
                done_in_store = total - left;
            }
        }
        if (!rc && !(rc = tq_job_durations(&d, &nd, db, queue, (size_t)total))) {
            p50 = tq_percentile(d, nd, 0.50);
            p99 = tq_percentile(d, nd, 0.99);
            tq_free(d);
        }
    }
    if (rc)
        cli_fail("bench", db, rc);
    tq_close(db);

    int64_t lat50 = 0, lat99 = 0;
    if (nlat > 0 && measure_latency(url, (int)nworkers, (int)nlat, &lat50, &lat99))
        worker_fail = 1;

    double enq_rate = (double)total / ((double)t_enq / 1e6);
    double proc_rate = (double)total / ((double)t_work / 1e6);
    double round_rate[ROUNDS_MAX];
    for (long long k = 1; k <= rounds && rounds > 1; k++) {
        int64_t a = k == 1 ? t0 : atomic_load(&sh->round_end[k - 1]),
                b = atomic_load(&sh->round_end[k]);
        round_rate[k - 1] = a && b > a ? (double)njobs / ((double)(b - a) / 1e6) : 0;
    }
    int64_t busy = atomic_load(&sh->busy_retries);
    if (json) {
        json_t *o = json_object();
        json_object_set_new(
            o, "engine",
            json_string(strncmp(url, "postgres", 8) ? "sqlite" : "postgres"));
        json_object_set_new(o, "jobs", json_integer(total));
        json_object_set_new(o, "workers", json_integer(nworkers));
        json_object_set_new(o, "concurrency", json_integer(conc));
        json_object_set_new(o, "prefetch",
                            json_integer(prefetch < 0 ? TQ_PREFETCH_DEFAULT : prefetch));
        json_object_set_new(o, "done", json_integer(done_in_store));
        json_object_set_new(o, "ran", json_integer(ran));
        json_object_set_new(o, "lost", json_integer(lost));
        json_object_set_new(o, "duplicates", json_integer(dups));
        json_object_set_new(o, "enqueue_per_s", json_real(enq_rate));
        json_object_set_new(o, "enqueue_batch", json_integer(ebatch));
        json_object_set_new(o, "worker_peak_rss_kb", json_integer(peak_rss_kb));
        json_object_set_new(o, "process_per_s", json_real(proc_rate));
        json_object_set_new(o, "enqueue_s", json_real((double)t_enq / 1e6));
        json_object_set_new(o, "process_s", json_real((double)t_work / 1e6));
        json_object_set_new(o, "latency_p50_us", json_integer(p50));
        json_object_set_new(o, "latency_p99_us", json_integer(p99));
        json_object_set_new(o, "busy_retries", json_integer(busy));
        json_object_set_new(o, "start_latency_jobs", json_integer(nlat));
        json_object_set_new(o, "start_latency_p50_us", json_integer(lat50));
        json_object_set_new(o, "start_latency_p99_us", json_integer(lat99));
        json_object_set_new(o, "fenced_acks", json_integer(atomic_load(&sh->lost_acks)));
        if (rounds > 1) {
            json_t *a = json_array();
            for (long long k = 0; k < rounds; k++)
                json_array_append_new(a, json_real(round_rate[k]));
            json_object_set_new(o, "rounds", json_integer(rounds));
            json_object_set_new(o, "round_per_s", a);
        }
        char *s = json_dumps(o, JSON_PRESERVE_ORDER);
        json_decref(o);
        if (s)
            puts(s);
        free(s);
    } else {
        char a[24], b[24];
        printf("tq bench: %lld jobs, %lld worker processes x %lld slots, store %s\n",
               total, nworkers, conc, tmpdb[0] ? "(temporary SQLite file)" : store);
        printf("  enqueue   %10.0f jobs/s  (%.2fs, batches of %d%s)\n", enq_rate,
               (double)t_enq / 1e6, (int)batch,
               rounds > 1 ? ", paced by the workers" : "");
        printf("  process   %10.0f jobs/s  (%.2fs)\n", proc_rate, (double)t_work / 1e6);
        if (rounds > 1) {
            printf("  per round of %lld (jobs/s):", njobs);
            for (long long k = 0; k < rounds; k++)
                printf(" %.0f", round_rate[k]);
            printf("\n");
        }
        printf("  start-to-done latency  p50 %s  p99 %s\n",
               tq_duration_format(a, sizeof a, p50),
               tq_duration_format(b, sizeof b, p99));
        printf("  busy retries %lld\n", (long long)busy);
        if (nlat > 0)
            printf(
                "  enqueue-to-start latency, idle workers  p50 %s  p99 %s  (%lld jobs)\n",
                tq_duration_format(a, sizeof a, lat50),
                tq_duration_format(b, sizeof b, lat99), nlat);
        printf("  done %lld  lost %lld  duplicates %lld\n", (long long)done_in_store,
               (long long)lost, (long long)dups);
    }
    if (lost || dups || worker_fail || done_in_store != total ||
        atomic_load(&sh->out_of_range)) {
        if (lost || dups)
            cli_error("bench", "FAILED: %lld lost, %lld duplicates", (long long)lost,
                      (long long)dups);
        else
            cli_error("bench",
                      "FAILED: a worker failed or the store shows %lld of %lld "
                      "done",
                      (long long)done_in_store, total);
        ex = EXIT_RUNTIME;
    }
    munmap(sh, shsize);
cleanup:
    if (tmpdb[0]) {
        char p[96];
        unlink(tmpdb);
        snprintf(p, sizeof p, "%s-wal", tmpdb);
        unlink(p);
        snprintf(p, sizeof p, "%s-shm", tmpdb);
        unlink(p);
        rmdir(tmpdir);
    }
    return ex;
}
