/*
 * show.c - `tq show ID`: one job, every field a person may ask about, and
 * its payload escaped line by line (--json: the bytes, the result and the
 * parents' ids). Called by tq.c's command table.
 */
#include "cli.h"

#include <stdio.h>

static const char usage[] = "tq show ID [-j|--json] [-d|--db URL]";
static const char help[] = "Shows one job with its payload.\n";

typedef struct show_args {
    int64_t id;
    int json;
} show_args;

/* "label" and text from the store, escaped, as one line (none for NULL). */
static void show_text(const char *label, const char *s)
{
    if (!s)
        return;
    fputs(label, stdout);
    cli_put_text(stdout, s);
    putchar('\n');
}

/* tq show's line of a job's parents: how many, how many it waits for, and
 * the first ids; for a job that waits for their end (a batch's callback),
 * how many ended done and failed so far. */
static void show_parents(tq *db, const tq_job *j)
{
    tq_parent *v = NULL;
    size_t n = 0, done = 0, failed = 0;
    int ended = 0;
    if (tq_job_parent_ends(&v, &n, db, j->id))
        n = 0;
    for (size_t i = 0; i < n; i++) {
        ended |= v[i].when_ended;
        done += v[i].state == TQ_DONE;
        failed += v[i].state == TQ_DEAD || v[i].state == TQ_CANCELLED;
    }
    printf("parents:      %lld%s", (long long)j->nparents, ended ? " (when ended)" : "");
    if (j->state == TQ_WAITING)
        printf(", waiting for %lld", (long long)j->waiting_for);
    if (n) {
        fputs(" (", stdout);
        for (size_t i = 0; i < n && i < 10; i++)
            printf(i ? " %lld" : "%lld", (long long)v[i].id);
        fputs(n > 10 ? " ...)" : ")", stdout);
    }
    if (ended)
        printf("; %zu done, %zu failed", done, failed);
    tq_free(v);
    putchar('\n');
}

/* The times of a job's life: created, due, started, finished, leased. */
static void show_times(const tq_job *j)
{
    char t[40], d[24];
    printf("created:      %s\n", tq_time_format(t, sizeof t, j->created_at));
    printf("run at:       %s\n", tq_time_format(t, sizeof t, j->run_at));
    if (j->started_at)
        printf("started:      %s\n", tq_time_format(t, sizeof t, j->started_at));
    if (j->finished_at)
        printf("finished:     %s\n", tq_time_format(t, sizeof t, j->finished_at));
    if (j->finished_at && j->started_at && j->state == TQ_DONE)
        printf("duration:     %s\n",
               tq_duration_format(d, sizeof d, j->finished_at - j->started_at));
    if (j->lease_until)
        printf("lease until:  %s\n", tq_time_format(t, sizeof t, j->lease_until));
}

static void show_job(tq *db, const tq_job *j)
{
    char queue[260];
    printf("id:           %lld\nqueue:        %s\nstate:        %s\n", (long long)j->id,
           cli_text(queue, sizeof queue, j->queue), tq_state_name(j->state));
    printf("priority:     %d\nattempts:     %d of %d\nclaims:       %lld\n", j->priority,
           j->attempts, j->max_attempts, (long long)j->claim);
    show_text("key:          ", j->key);
    show_times(j);
    show_text("worker:       ", j->worker);
    show_text("traceparent:  ", j->traceparent);
    show_text("group:        ", j->group);
    if (j->snoozes)
        printf("snoozes:      %d\n", j->snoozes);
    char d[32];
    if (j->timeout_us > 0)
        printf("timeout:      %s\n", tq_duration_format(d, sizeof d, j->timeout_us));
    if (j->nparents)
        show_parents(db, j);
    if (j->result_len >= 0)
        printf("result:       %lld bytes (tq result %lld)\n", (long long)j->result_len,
               (long long)j->id);
    if (j->progress >= 0) {
        printf("progress:     %d%%", j->progress);
        if (j->progress_text && *j->progress_text) {
            putchar(' ');
            cli_put_text(stdout, j->progress_text);
        }
        putchar('\n');
    }
    /* A done job's error is an earlier attempt's, not how it ended. */
    show_text(j->state == TQ_DONE ? "earlier error: " : "last error:   ", j->last_error);
    /* Escaped, line by line, as any text from the store (tq show --json
     * and tq result give the bytes). */
    printf("payload:      %zu bytes\n", j->payload_len);
    cli_put_lines(stdout, j->payload, j->payload_len);
}

static const cli_opt opts[] = {CLI_OPT_FLAG('j', "json", show_args, json, 1),
                               CLI_OPT_END};

CLI_PARSE_JOB_ID(show)

static int show_run(void *args, tq *db)
{
    const show_args *a = args;
    int ex = 0;
    tq_job *j;
    int rc = tq_job_get(&j, db, a->id);
    if (rc) {
        ex = cli_fail("show", db, rc);
    } else {
        if (a->json)
            ex = cli_print_json(cli_job_show_json(db, j));
        else
            show_job(db, j);
        tq_job_free(j);
    }
    return ex;
}

CLI_COMMAND(show, "show one job", CLI_OPEN, NULL, opts, usage, help, NULL);
