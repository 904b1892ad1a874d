/*
 * result.c - `tq result ID`: a done job's result on stdout, byte for byte.
 * Called by tq.c's command table.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const cli_opt opts[] = {CLI_OPT_END};

static const char usage[] = "tq result ID [-d|--db URL]";
static const char help[] =
    "Writes the result of a done job to stdout, byte for byte: what its "
    "handler\nwrote to stdout, in a queue with --results (or what a C "
    "handler set).\nExit 1 when the job is not done or has no result.\n";

typedef struct result_args {
    int64_t id;
} result_args;

CLI_PARSE_JOB_ID(result)

static int result_run(void *args, tq *db)
{
    const result_args *a = args;
    int ex = 0;
    void *res;
    size_t len;
    int rc = tq_job_result(&res, &len, db, a->id);
    if (rc) {
        ex = cli_fail("result", db, rc);
    } else {
        if (fwrite(res, 1, len, stdout) != len || fflush(stdout) != 0) {
            cli_error("result", "cannot write the result: %s", strerror(errno));
            ex = 1;
        }
        tq_free(res);
    }
    return ex;
}

CLI_COMMAND(result, "print a done job's result", CLI_OPEN, NULL, opts, usage, help, NULL);
