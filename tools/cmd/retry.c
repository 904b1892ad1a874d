/*
 * retry.c - `tq retry`: dead or cancelled jobs back to ready, all of the
 * ids given or none, or every dead job (of a queue) with --dead. Called by
 * tq.c's command table; tq cancel (cancel.c) is its opposite.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static const char usage[] = "tq retry (ID... | --dead [-q|--queue Q]) [-d|--db URL]";
static const char help[] = "Puts dead or cancelled jobs back to ready with "
                           "their attempts reset:\nall of them, or none when "
                           "one is unknown or in another state.\n";

typedef struct retry_args {
    const char *queue;
    int dead;
    int64_t *ids; /* nids of them */
    size_t nids;
} retry_args;

static const cli_opt opts[] = {CLI_OPT_FLAG(0, "dead", retry_args, dead, 1),
                               CLI_OPT_STRING('q', "queue", retry_args, queue),
                               CLI_OPT_END};

/* After the options: 0, or the exit code of a bad command line. */
static int retry_parse(void *args, const char **url, int argc, char **argv)
{
    retry_args *a = args;
    int ex;
    (void)url;
    if (a->queue && !a->dead) {
        cli_error("retry", "--queue only goes with --dead");
        return EXIT_USAGE;
    }
    if (a->queue && (ex = cli_queue_name("retry", a->queue)))
        return ex;
    if (a->dead == (optind < argc)) {
        cli_error("retry",
                  a->dead ? "--dead takes no job IDs" : "expected one or more job IDs");
        return EXIT_USAGE;
    }
    return cli_job_ids(&cmd_retry, argc, argv, &a->ids, &a->nids);
}

/* After a retry: the job's id and the state it is in now (a retried job
 * with parents not done waits; one that a dead parent holds is cancelled
 * again, and says by what). */
static void print_retried(tq *db, int64_t id)
{
    tq_job *j = NULL;
    if (tq_job_get(&j, db, id) != 0) {
        printf("%lld ready\n", (long long)id);
    } else if (j->state == TQ_CANCELLED && j->last_error) {
        printf("%lld cancelled again: ", (long long)id);
        cli_put_text(stdout, j->last_error);
        putchar('\n');
    } else {
        printf("%lld %s\n", (long long)id, tq_state_name(j->state));
    }
    tq_job_free(j);
}

static int retry_run(void *args, tq *db)
{
    const retry_args *a = args;
    int ex = 0;
    if (a->dead) {
        int64_t n = 0;
        int rc = tq_job_retry_dead(&n, db, a->queue);
        if (rc)
            ex = cli_fail("retry", db, rc);
        else
            printf("%lld dead job(s) back to ready\n", (long long)n);
    }
    if (a->nids) { /* all or none */
        int rc = tq_job_retry_ids(db, a->ids, a->nids);
        if (rc)
            ex = cli_fail("retry", db, rc);
        for (size_t i = 0; !rc && i < a->nids; i++)
            print_retried(db, a->ids[i]);
    }
    return ex;
}

static void retry_done(void *args)
{
    free(((retry_args *)args)->ids);
}

CLI_COMMAND(retry, "put dead or cancelled jobs back to ready", CLI_OPEN, NULL, opts,
            usage, help, retry_done);
