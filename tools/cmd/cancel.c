/*
 * cancel.c - `tq cancel ID...`: ready, running or waiting jobs cancelled,
 * with the waiting jobs enqueued after them: all of them, or none. Called
 * by tq.c's command table; tq retry (retry.c) undoes it.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

/* tq retry's options, which tq cancel refuses one by one: in the table so
 * that getopt reads a command line as it always has ("--d" is ambiguous,
 * "--queue" without a value needs one, before either is refused). */
static const cli_opt opts[] = {CLI_OPT_REFUSED("dead", 0), CLI_OPT_REFUSED("queue", 1),
                               CLI_OPT_END};

static const char usage[] = "tq cancel ID... [-d|--db URL]";
static const char help[] = "Cancels ready, running or waiting jobs, and the "
                           "waiting jobs enqueued\nafter them: all of them, or "
                           "none when one is unknown or finished.\n";

typedef struct cancel_args {
    int64_t *ids; /* nids of them */
    size_t nids;
} cancel_args;

/* After the options: 0, or the exit code of a bad command line. */
static int cancel_parse(void *args, const char **url, int argc, char **argv)
{
    cancel_args *a = args;
    (void)url;
    if (optind >= argc) {
        cli_error("cancel", "expected one or more job IDs");
        return EXIT_USAGE;
    }
    return cli_job_ids(&cmd_cancel, argc, argv, &a->ids, &a->nids);
}

static int cancel_run(void *args, tq *db)
{
    const cancel_args *a = args;
    int ex = 0;
    int rc = tq_job_cancel_ids(db, a->ids, a->nids); /* all or none */
    if (rc)
        ex = cli_fail("cancel", db, rc);
    for (size_t i = 0; !rc && i < a->nids; i++)
        printf("%lld cancelled\n", (long long)a->ids[i]);
    return ex;
}

static void cancel_done(void *args)
{
    free(((cancel_args *)args)->ids);
}

CLI_COMMAND(cancel, "cancel ready or running jobs", CLI_OPEN, NULL, opts, usage, help,
            cancel_done);
