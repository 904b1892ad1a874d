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

static void print_job_line(const tq_job *j)
{
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

static int list_run(void *args, tq *db)
{
    const list_args *a = args;
    int ex = 0;
    tq_job *jobs;
    size_t nj;
    int rc = tq_job_list(&jobs, &nj, db, &a->lo);
    if (rc) {
        ex = cli_fail("list", db, rc);
    } else {
        if (a->json) {
            json_t *arr = json_array();
            for (size_t i = 0; i < nj; i++)
                json_array_append_new(arr, cli_job_json(&jobs[i], 1));
            ex = cli_print_json(arr);
        } else if (nj == 0) {
            printf("no jobs\n");
        } else {
            printf(JOB_ROW "\n", "ID", "QUEUE", "STATE", "ATTEMPTS", "CREATED",
                   "PAYLOAD");
            for (size_t i = 0; i < nj; i++)
                print_job_line(&jobs[i]);
        }
        tq_job_array_free(jobs, nj);
    }
    return ex;
}

CLI_COMMAND(list, "list jobs", CLI_OPEN, &defaults, opts, usage, help, NULL);
