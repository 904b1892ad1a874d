/*
 * history.c - the history checker of the fault tests.
 *
 *   history run LOG WORKER [MS | LO-HI] [RC]
 *       A handler: appends a start line to LOG, sleeps MS milliseconds (or
 *       a random time between LO and HI), appends a finish line and exits
 *       RC (default 0). Each line is one O_APPEND write, so lines of
 *       concurrent handlers never mix, and a handler killed mid-run leaves
 *       a start without a finish:
 *           S JOB CLAIM ATTEMPT WORKER MICROSECONDS
 *           F JOB CLAIM ATTEMPT WORKER MICROSECONDS RC
 *
 *   history kill LOG WORKER
 *       Appends "K WORKER MICROSECONDS": the test killed WORKER (kill -9)
 *       and waited for it; a run of WORKER that started before and has no
 *       finish line ended then (a handler dies with its worker).
 *
 *   history check LOG ROWS [--lease MS] [--faulted WORKER]... [--all-done]
 *       Checks the runs in LOG against the store's rows (ROWS: one
 *       "ID STATE CLAIMS" line per job, as `tq list --json` gives them),
 *       prints a one-line summary and exits 0, or prints every violation
 *       and exits 1. The rules:
 *         1. One claim, one run: no claim of a job starts twice.
 *         2. Runs of a job in claim order never overlap (a killed worker's
 *            unfinished run ends at its kill line), unless the earlier
 *            run's worker was faulted (--faulted: killed, frozen or cut
 *            off) and the later run began at least a third of the lease
 *            after it (the earliest a lease can expire: a worker starts a
 *            job only while a third of its lease remains).
 *         3. Attempts never go down from one claim to the next, and go up
 *            after a run that finished on a worker that was neither faulted
 *            nor killed (its start was reported; such a worker's run may
 *            have been cut off before its start reached the store, and
 *            then the rerun carries the same attempt, as designed).
 *         4. A run that did not finish was on a worker killed after it
 *            started, or on a faulted one.
 *         5. Every job the store says is done has a finished, successful
 *            run under the claim the row holds: the result in the row is
 *            that run's, never a fenced-out one's. (With --all-done, every
 *            row must be done.)
 *         6. Every job that ran is in the store.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FAULTED    16
#define MAX_KILLS      4096
#define MAX_VIOLATIONS 20 /* printed; the rest are counted */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void append(const char *path, const char *line, size_t n)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, n) != (ssize_t)n || close(fd) != 0) {
        fprintf(stderr, "history: %s: %s\n", path, strerror(errno));
        exit(2);
    }
}

/* ---- run ------------------------------------------------------------------ */

static int cmd_run(int argc, char **argv)
{
    const char *id = getenv("TQ_JOB_ID"), *claim = getenv("TQ_CLAIM"),
               *attempt = getenv("TQ_ATTEMPT");
    if (argc < 2 || !id || !claim || !attempt) {
        fprintf(stderr,
                "usage: history run LOG WORKER [MS|LO-HI] [RC] (as a tq handler)\n");
        return 2;
    }
    const char *log = argv[0], *worker = argv[1];
    long lo = 0, hi = 0;
    int rc = argc > 3 ? atoi(argv[3]) : 0;
    if (argc > 2 && sscanf(argv[2], "%ld-%ld", &lo, &hi) < 2)
        hi = lo;
    char line[256];
    int n = snprintf(line, sizeof line, "S %s %s %s %s %lld\n", id, claim, attempt,
                     worker, (long long)now_us());
    append(log, line, (size_t)n);
    if (hi > 0) {
        srand((unsigned)(getpid() ^ now_us()));
        long ms = lo + (hi > lo ? rand() % (hi - lo + 1) : 0);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    n = snprintf(line, sizeof line, "F %s %s %s %s %lld %d\n", id, claim, attempt, worker,
                 (long long)now_us(), rc);
    append(log, line, (size_t)n);
    return rc;
}

/* ---- check ---------------------------------------------------------------- */

typedef struct run {
    long long job, claim;
    int attempt;
    char worker[64];
    int64_t start, finish; /* finish 0: no finish line */
    int64_t killed;        /* no finish line: when its worker was killed */
    int rc;
} run;

typedef struct row {
    long long id, claims;
    char state[16];
} row;

static struct {
    int64_t lease_us;
    const char *faulted[MAX_FAULTED];
    int nfaulted;
    struct {
        char worker[64];
        int64_t at;
    } kills[MAX_KILLS]; /* in the order of the log, so of time */
    int nkills;
    int violations;
} ck;

static void violation(const char *fmt, ...)
{
    if (ck.violations++ < MAX_VIOLATIONS) {
        va_list ap;
        va_start(ap, fmt);
        fputs("history: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

static int faulted(const char *worker)
{
    for (int i = 0; i < ck.nfaulted; i++)
        if (strcmp(ck.faulted[i], worker) == 0)
            return 1;
    return 0;
}

/* When r's worker was first killed after r started, or never (0): for a
 * run with no finish line, when it ended. */
static int64_t killed_at(const run *r)
{
    for (int i = 0; i < ck.nkills; i++)
        if (ck.kills[i].at >= r->start && strcmp(ck.kills[i].worker, r->worker) == 0)
            return ck.kills[i].at;
    return 0;
}

static int by_job_claim(const void *a, const void *b)
{
    const run *x = a, *y = b;
    if (x->job != y->job)
        return x->job < y->job ? -1 : 1;
    return x->claim < y->claim ? -1 : x->claim > y->claim;
}

static int by_id(const void *a, const void *b)
{
    const row *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return p;
    *cap = *cap ? *cap * 2 : 1024;
    p = realloc(p, *cap * size);
    if (!p) {
        fputs("history: out of memory\n", stderr);
        exit(2);
    }
    return p;
}

static FILE *open_or_die(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "history: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return f;
}

/* Reads LOG into runs sorted by (job, claim), one per claim: a start line
 * and, if it came, its finish line. */
static run *read_runs(const char *path, size_t *count)
{
    FILE *f = open_or_die(path);
    run *starts = NULL, *ends = NULL;
    size_t ns = 0, ne = 0, cs = 0, ce = 0;
    char line[512], kind;
    for (int lineno = 1; fgets(line, sizeof line, f); lineno++) {
        run r = {0};
        long long t;
        int got = sscanf(line, "%c %lld %lld %d %63s %lld %d", &kind, &r.job, &r.claim,
                         &r.attempt, r.worker, &t, &r.rc);
        if (kind == 'K' && ck.nkills < MAX_KILLS &&
            sscanf(line, "K %63s %lld", ck.kills[ck.nkills].worker, &t) == 2) {
            ck.kills[ck.nkills++].at = t;
        } else if (kind == 'S' && got == 6) {
            r.start = t;
            starts = grow(starts, &cs, ns, sizeof *starts);
            starts[ns++] = r;
        } else if (kind == 'F' && got == 7) {
            r.finish = t;
            ends = grow(ends, &ce, ne, sizeof *ends);
            ends[ne++] = r;
        } else {
            violation("%s:%d: not a history line: %s", path, lineno, line);
        }
    }
    fclose(f);
    qsort(starts, ns, sizeof *starts, by_job_claim);
    qsort(ends, ne, sizeof *ends, by_job_claim);
    size_t out = 0, e = 0;
    for (size_t i = 0; i < ns; i++) {
        if (out && by_job_claim(&starts[out - 1], &starts[i]) == 0) {
            violation("job %lld: claim %lld started twice (on %s and on %s)",
                      starts[i].job, starts[i].claim, starts[out - 1].worker,
                      starts[i].worker);
            continue;
        }
        starts[out] = starts[i];
        for (; e < ne && by_job_claim(&ends[e], &starts[out]) < 0; e++)
            violation("job %lld: claim %lld finished without starting", ends[e].job,
                      ends[e].claim);
        if (e < ne && by_job_claim(&ends[e], &starts[out]) == 0) {
            starts[out].finish = ends[e].finish;
            starts[out].rc = ends[e].rc;
            e++;
        } else {
            starts[out].killed = killed_at(&starts[out]);
        }
        out++;
    }
    for (; e < ne; e++)
        violation("job %lld: claim %lld finished without starting", ends[e].job,
                  ends[e].claim);
    free(ends);
    *count = out;
    return starts;
}

static row *read_rows(const char *path, size_t *count)
{
    FILE *f = open_or_die(path);
    row *rows = NULL;
    size_t n = 0, cap = 0;
    char line[256];
    for (int lineno = 1; fgets(line, sizeof line, f); lineno++) {
        row r = {0};
        if (sscanf(line, "%lld %15s %lld", &r.id, r.state, &r.claims) != 3) {
            violation("%s:%d: not an 'ID STATE CLAIMS' line: %s", path, lineno, line);
            continue;
        }
        rows = grow(rows, &cap, n, sizeof *rows);
        rows[n++] = r;
    }
    fclose(f);
    qsort(rows, n, sizeof *rows, by_id);
    *count = n;
    return rows;
}

/* Rules 2-4 for two consecutive claims of one job. Returns 1 when the later
 * run overlapped the earlier (allowed) one. */
static int check_pair(const run *a, const run *b)
{
    int64_t end = a->finish ? a->finish : a->killed;
    int overlap = !end || b->start < end;
    if (overlap) {
        if (!faulted(a->worker))
            violation(
                "job %lld: claim %lld on %s started while claim %lld on %s ran, and %s "
                "was not faulted",
                b->job, b->claim, b->worker, a->claim, a->worker, a->worker);
        else if (b->start - a->start < ck.lease_us / 3)
            violation(
                "job %lld: claim %lld on %s started %lld ms after claim %lld on %s, "
                "before its lease could expire",
                b->job, b->claim, b->worker, (long long)(b->start - a->start) / 1000,
                a->claim, a->worker);
    }
    if (b->attempt < a->attempt)
        violation("job %lld: attempt went down from %d (claim %lld) to %d (claim %lld)",
                  a->job, a->attempt, a->claim, b->attempt, b->claim);
    else if (b->attempt == a->attempt && a->finish && !faulted(a->worker) &&
             !killed_at(a))
        violation("job %lld: claim %lld reran attempt %d after it finished on %s", b->job,
                  b->claim, b->attempt, a->worker);
    return overlap;
}

static int cmd_check(int argc, char **argv)
{
    int all_done = 0;
    if (argc < 2) {
        fputs("usage: history check LOG ROWS [--lease MS] [--faulted WORKER]... "
              "[--all-done]\n",
              stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lease") == 0 && i + 1 < argc)
            ck.lease_us = atoll(argv[++i]) * 1000;
        else if (strcmp(argv[i], "--faulted") == 0 && i + 1 < argc &&
                 ck.nfaulted < MAX_FAULTED)
            ck.faulted[ck.nfaulted++] = argv[++i];
        else if (strcmp(argv[i], "--all-done") == 0)
            all_done = 1;
        else {
            fprintf(stderr, "history: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    size_t nruns, nrows;
    run *runs = read_runs(argv[0], &nruns);
    row *rows = read_rows(argv[1], &nrows);

    size_t jobs = 0, reruns = 0, overlaps = 0;
    for (size_t i = 0; i < nruns; i++) {
        const run *r = &runs[i];
        int first = i == 0 || runs[i - 1].job != r->job;
        if (first)
            jobs++;
        else {
            reruns++;
            overlaps += (size_t)check_pair(&runs[i - 1], r);
        }
        if (!r->finish && !r->killed && !faulted(r->worker))
            violation(
                "job %lld: claim %lld on %s never finished, and %s was neither killed "
                "nor faulted",
                r->job, r->claim, r->worker, r->worker);
        row key = {.id = r->job};
        if (first && !bsearch(&key, rows, nrows, sizeof *rows, by_id))
            violation("job %lld ran but is not in the store", r->job);
    }
    for (size_t i = 0; i < nrows; i++) {
        const row *w = &rows[i];
        if (all_done && strcmp(w->state, "done") != 0)
            violation("job %lld is %s, not done", w->id, w->state);
        if (strcmp(w->state, "done") != 0)
            continue;
        run key = {.job = w->id, .claim = w->claims};
        const run *r = bsearch(&key, runs, nruns, sizeof *runs, by_job_claim);
        if (!r)
            violation("job %lld is done under claim %lld, which never ran", w->id,
                      w->claims);
        else if (!r->finish || r->rc != 0)
            violation("job %lld is done under claim %lld, whose run %s", w->id, w->claims,
                      r->finish ? "failed" : "never finished");
    }
    if (ck.violations > MAX_VIOLATIONS)
        fprintf(stderr, "history: ... and %d more\n", ck.violations - MAX_VIOLATIONS);
    printf("history: %zu jobs, %zu runs, %zu reruns (%zu overlapping a faulted worker's "
           "run), "
           "%zu rows: %s\n",
           jobs, nruns, reruns, overlaps, nrows, ck.violations ? "VIOLATED" : "ok");
    free(runs);
    free(rows);
    return ck.violations ? 1 : 0;
}

static int cmd_kill(int argc, char **argv)
{
    if (argc != 2) {
        fputs("usage: history kill LOG WORKER\n", stderr);
        return 2;
    }
    char line[128];
    int n = snprintf(line, sizeof line, "K %s %lld\n", argv[1], (long long)now_us());
    append(argv[0], line, (size_t)n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "kill") == 0)
        return cmd_kill(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "check") == 0)
        return cmd_check(argc - 2, argv + 2);
    fputs(
        "usage: history run LOG WORKER [MS|LO-HI] [RC]\n"
        "       history kill LOG WORKER\n"
        "       history check LOG ROWS [--lease MS] [--faulted WORKER]... [--all-done]\n",
        stderr);
    return 2;
}
