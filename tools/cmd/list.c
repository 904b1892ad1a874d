/*
 * list.c - `tq list`: jobs newest first, of a state or a queue, one line
 * each with a printable preview of the payload. Called by tq.c's command
 * table.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "tq list [--state S] [-q|--queue Q] [--limit N] [-j|--json] [-d|--db URL]";
static const char help[] = "Lists jobs, newest first (by id; with --state done, dead or\n"
                           "cancelled, the latest finished first; default\n"
                           "limit 100).\n";

typedef struct list_args {
    tq_list_opts lo;
    int json;
} list_args;

/* A one-line, printable preview of a payload. */
static void preview(char *buf, size_t len, const unsigned char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < len; i++)
        buf[k++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
    if (n > 0 && k + 4 >= len)
        memcpy(buf + k - 3, "...", 3);
    buf[k] = '\0';
}

#define JOB_ROW "%-8s %-16s %-9s %-8s %-24s %s"

static void print_job_header(void)
{
    printf(JOB_ROW "\n", "ID", "QUEUE", "STATE", "ATTEMPTS", "CREATED", "PAYLOAD");
}

static void print_job_line(const void *row)
{
    const tq_job *j = row;
    char pv[41], t[40], id[24], attempts[24], queue[260];
    preview(pv, sizeof pv, j->payload, j->payload_len);
    snprintf(id, sizeof id, "%lld", (long long)j->id);
    snprintf(attempts, sizeof attempts, "%d/%d", j->attempts, j->max_attempts);
    printf(JOB_ROW, id, cli_text(queue, sizeof queue, j->queue), tq_state_name(j->state),
           attempts, tq_time_format(t, sizeof t, j->created_at), pv);
    if (j->progress >= 0 && j->state == TQ_RUNNING) {
        printf("  progress: %d%%", j->progress);
        if (j->progress_text && *j->progress_text) {
            putchar(' ');
            cli_put_text(stdout, j->progress_text);
        }
    }
    if (j->last_error && j->state != TQ_DONE) { /* a done job's is an earlier run's */
        fputs("  error: ", stdout);
        cli_put_text(stdout, j->last_error);
    }
    putchar('\n');
}

/* --state S. */
static int opt_state(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_state st;
    if (tq_state_parse(&st, arg)) {
        cli_error("list",
                  "unknown state '%s': use ready, running, done, dead, cancelled or "
                  "waiting",
                  arg);
        return EXIT_USAGE;
    }
    ((list_args *)args)->lo.state = (int)st;
    return 0;
}

static const list_args defaults = {.lo = TQ_LIST_OPTS_INIT};

static const cli_opt opts[] = {CLI_OPT_CALLBACK(0, "state", 1, opt_state, 0),
                               CLI_OPT_QUEUE('q', "queue", list_args, lo.queue),
                               CLI_OPT_INT(0, "limit", list_args, lo.limit, 1, 1000000),
                               CLI_OPT_FLAG('j', "json", list_args, json, 1),
                               CLI_OPT_END};

CLI_PARSE_NO_ARGS(list)

static int jobs_read(void **rows, size_t *n, tq *db, const void *lo)
{
    tq_job *jobs = NULL;
    int rc = tq_job_list(&jobs, n, db, lo);
    *rows = jobs;
    return rc;
}

/* A job for --json, with its payload. */
static json_t *job_json(const void *row)
{
    return cli_job_json(row, 1);
}

static void jobs_free(void *rows, size_t n)
{
    tq_job_array_free(rows, n);
}

static const cli_rows job_rows = {sizeof(tq_job), jobs_read, job_json, jobs_free};
static const cli_listing jobs_listing = {"list", &job_rows, print_job_header,
                                         print_job_line, "no jobs"};

static int list_run(void *args, tq *db)
{
    const list_args *a = args;
    return cli_list(db, &jobs_listing, &a->lo, a->json);
}

CLI_COMMAND(list, "list jobs", CLI_OPEN, &defaults, opts, usage, help, NULL);
