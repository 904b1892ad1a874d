/*
 * prune.c - `tq prune`: deletes jobs that finished (done, dead or
 * cancelled) longer ago than a duration, in batches. Called by tq.c's
 * command table.
 */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static const struct option opts[] = {CLI_COMMON_OPTS,
                                     {"older-than", required_argument, NULL, 'o'},
                                     {"state", required_argument, NULL, 's'},
                                     {0}};

static const char usage[] =
    "tq prune --older-than DUR [--state done|dead|cancelled]... [--db URL]";
static const char help[] = "Deletes finished jobs (default: done, dead and "
                           "cancelled) that finished before now - DUR.\n";

typedef struct prune_args {
    int64_t age;
    int have_age;
    unsigned mask; /* 1 << state, for each state pruned */
} prune_args;

/* One option into args (cli_options). */
static int prune_option(void *args, int c)
{
    prune_args *a = args;
    tq_state st;
    switch (c) {
    case 'o':
        if (cli_duration("prune", "--older-than", optarg, &a->age))
            return EXIT_USAGE;
        a->have_age = 1;
        return 0;
    case 's':
        if (tq_state_parse(&st, optarg) ||
            (st != TQ_DONE && st != TQ_DEAD && st != TQ_CANCELLED)) {
            cli_error("prune", "invalid state '%s': use done, dead or cancelled", optarg);
            return EXIT_USAGE;
        }
        a->mask |= 1u << st;
        return 0;
    default:
        return -1;
    }
}

/* 0, -1 after --help, or the exit code of a bad command line. */
static int prune_parse(void *args, const char **url, int argc, char **argv)
{
    prune_args *a = args;
    int ex = cli_options(&cmd_prune, argc, argv, opts, url, prune_option, a);
    if (ex)
        return ex;
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

CLI_COMMAND(prune, "delete old finished jobs", CLI_OPEN, usage, help, NULL);
