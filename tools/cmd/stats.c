/*
 * stats.c - `tq stats`: counts by state, the age of the oldest ready job,
 * recent durations and the longest-running jobs, of one queue or all.
 * Called by tq.c's command table.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>

static const char usage[] = "tq stats [-q|--queue Q] [-j|--json] [-d|--db URL]";
static const char help[] = "Counts by state, age of the oldest ready job, jobs "
                           "done in the last minute,\ndurations of the last "
                           "1000 done jobs, and the longest-running jobs.\n";

typedef struct stats_args {
    const char *queue; /* queue NULL: all of them */
    int json;
} stats_args;

/* Human output: empty states in words, never as a 0us that means nothing. */
static void print_stats(const tq_stats *st, const char *queue)
{
    char a[24], b[24], d[24], e[24];
    printf("queue:     %s\n", queue ? queue : "(all)");
    for (int i = 0; i < TQ_STATE_COUNT; i++)
        printf("%-10s %lld\n", tq_state_name((tq_state)i), (long long)st->count[i]);
    const int64_t due = st->count[TQ_READY] - st->delayed;
    if (due > 0)
        printf("oldest ready: %s",
               tq_duration_format(a, sizeof a, st->oldest_ready_age_us));
    else if (st->delayed)
        printf("oldest ready: none due");
    else
        printf("oldest ready: none ready");
    if (st->delayed)
        printf("; %lld delayed, next in %s", (long long)st->delayed,
               tq_duration_format(a, sizeof a,
                                  st->next_due_in_us > 0 ? st->next_due_in_us : 0));
    putchar('\n');
    printf("done in the last minute: %lld\n", (long long)st->done_last_minute);
    if (st->recent)
        printf("durations of the last %zu done: p50 %s  p95 %s  max %s\n", st->recent,
               tq_duration_format(b, sizeof b, st->p50_us),
               tq_duration_format(d, sizeof d, st->p95_us),
               tq_duration_format(e, sizeof e, st->max_us));
    else
        printf("durations: no finished jobs yet\n");
    for (size_t i = 0; i < st->nlongest; i++) {
        char w[520];
        printf("running longest: job %lld on %s for %s\n", (long long)st->longest[i].id,
               cli_text(w, sizeof w, st->longest[i].worker),
               tq_duration_format(a, sizeof a, st->longest[i].running_us));
    }
}

static json_t *stats_json(const tq_stats *st, const char *queue)
{
    json_t *o = json_object(), *longest = json_array();
    json_object_set_new(o, "queue", queue ? json_string(queue) : json_null());
    json_object_set_new(o, "counts", cli_counts_json(st->count));
    json_object_set_new(o, "oldest_ready_age_us", json_integer(st->oldest_ready_age_us));
    json_object_set_new(o, "delayed", json_integer(st->delayed));
    json_object_set_new(o, "next_due_in_us",
                        st->delayed ? json_integer(st->next_due_in_us) : json_null());
    json_object_set_new(o, "done_last_minute", json_integer(st->done_last_minute));
    json_object_set_new(o, "recent_done", json_integer((json_int_t)st->recent));
    json_object_set_new(o, "duration_p50_us", json_integer(st->p50_us));
    json_object_set_new(o, "duration_p95_us", json_integer(st->p95_us));
    json_object_set_new(o, "duration_max_us", json_integer(st->max_us));
    for (size_t i = 0; i < st->nlongest; i++) {
        json_t *l = json_object();
        json_object_set_new(l, "id", json_integer(st->longest[i].id));
        json_object_set_new(l, "worker", cli_json_text(st->longest[i].worker));
        json_object_set_new(l, "running_us", json_integer(st->longest[i].running_us));
        json_array_append_new(longest, l);
    }
    json_object_set_new(o, "longest_running", longest);
    return o;
}

static const cli_opt opts[] = {CLI_OPT_STRING('q', "queue", stats_args, queue),
                               CLI_OPT_FLAG('j', "json", stats_args, json, 1),
                               CLI_OPT_END};

/* After the options: 0, or the exit code of a bad command line. */
static int stats_parse(void *args, const char **url, int argc, char **argv)
{
    stats_args *a = args;
    (void)url;
    int ex = cli_no_args(&cmd_stats, argc, argv, optind);
    if (!ex && a->queue)
        ex = cli_queue_name("stats", a->queue);
    return ex;
}

static int stats_run(void *args, tq *db)
{
    const stats_args *a = args;
    int ex = 0;
    tq_stats st;
    tq_queue_info qi;
    int rc = a->queue ? tq_queue_get(&qi, db, a->queue) : 0;
    if (rc == TQ_ENOTFOUND) {
        cli_error("stats", "no queue named '%s' (tq queue lists them)", a->queue);
        return EXIT_RUNTIME;
    }
    if (!rc)
        rc = tq_stats_get(&st, db, a->queue);
    if (rc)
        ex = cli_fail("stats", db, rc);
    else if (a->json)
        ex = cli_print_json(stats_json(&st, a->queue));
    else
        print_stats(&st, a->queue);
    return ex;
}

CLI_COMMAND(stats, "counts, ages and durations", CLI_OPEN, NULL, opts, usage, help, NULL);
