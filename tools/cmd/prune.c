/*
 * prune.c - `tq prune`: deletes jobs that finished (done, dead or
 * cancelled) longer ago than a duration, in batches. Called by tq.c's
 * command table.
 */
#include "cli.h"

#include <stdio.h>

static const char usage[] =
    "tq prune --older-than DUR [--state done|dead|cancelled]... [-d|--db URL]";
static const char help[] = "Deletes finished jobs (default: done, dead and "
                           "cancelled) that finished before now - DUR.\n";

typedef struct prune_args {
    int64_t age;
    int have_age;
    unsigned mask; /* 1 << state, for each state pruned */
} prune_args;

/* --state S, one of the finished ones: into the mask. */
static int opt_state(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_state st;
    if (tq_state_parse(&st, arg) ||
        (st != TQ_DONE && st != TQ_DEAD && st != TQ_CANCELLED)) {
        cli_error("prune", "invalid state '%s': use done, dead or cancelled", arg);
        return EXIT_USAGE;
    }
    ((prune_args *)args)->mask |= 1u << st;
    return 0;
}

static const cli_opt opts[] = {
    CLI_OPT_DURATION_MARK(0, "older-than", prune_args, age, have_age, 1),
    CLI_OPT_CALLBACK(0, "state", 1, opt_state, 0), CLI_OPT_END};

/* After the options: 0, or the exit code of a bad command line. */
static int prune_parse(void *args, const char **url, int argc, char **argv)
{
    prune_args *a = args;
    int ex;
    (void)url;
    if (!a->have_age) {
        cli_error("prune", "--older-than DUR is required");
        return EXIT_USAGE;
    }
    if ((ex = cli_no_args(&cmd_prune, argc, argv, optind)))
        return ex;
    if (!a->mask)
        a->mask = (1u << TQ_DONE) | (1u << TQ_DEAD) | (1u << TQ_CANCELLED);
    return 0;
}

static int prune_run(void *args, tq *db)
{
    const prune_args *a = args;
    int ex = 0;
    /* In transactions of PRUNE_BATCH rows of each state, so that workers
     * of the same store wait no longer than one of them takes; on a
     * terminal, how many so far. */
    enum { PRUNE_BATCH = 10000 };
    cli_progress pr;
    cli_progress_start(&pr, "pruned", 0);
    int64_t n = 0, got = 0;
    int rc;
    do {
        rc = tq_job_prune_batch(&got, db, a->age, a->mask, PRUNE_BATCH);
        n += got;
        cli_progress_show(&pr, n, -1, NULL);
    } while (!rc && got >= PRUNE_BATCH);
    cli_progress_end(&pr);
    if (rc) {
        cli_error("prune", "%s; %lld job(s) were pruned before it", cli_reason(db, rc),
                  (long long)n);
        ex = cli_exit_code(rc);
    } else {
        printf("pruned %lld job(s)\n", (long long)n);
    }
    return ex;
}

CLI_COMMAND(prune, "delete old finished jobs", CLI_OPEN, NULL, opts, usage, help, NULL);
