/*
 * queue.c - `tq queue`: lists the queues, or creates one and changes its
 * settings (order, lease, attempts, backoff, limits, pause, results,
 * timeout, retention).
 * Called by tq.c's command table.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "tq queue [NAME [--order fifo|lifo|unordered] [--lease DUR] "
    "[--max-attempts N] [--backoff BASE[:CAP]] [--keep-done|--delete-done] "
    "[--pause|--resume] [--max-running N] [--max-running-per-group N] "
    "[--rate N/DUR] [--max-snoozes N] [--results|--no-results] [--timeout DUR] "
    "[--retain-done DUR] [--retain-dead DUR]] [-j|--json] "
    "[-d|--db URL]";
static const char help[] =
    "Without NAME, lists the queues. With NAME, creates the queue "
    "(defaults: fifo,\nlease 30s, 3 attempts, backoff 1s:1h, keep "
    "done rows) and applies the options.\n"
    "--max-running N: at most N jobs of the queue run at once, across "
    "every worker\nand host; --max-running-per-group N: at most N of "
    "each group (tq enqueue\n--group G). 0 removes a limit.\n"
    "--rate N/DUR (e.g. 100/s, 20/1m): at most N jobs of the queue start "
    "in any\nwindow of DUR, across every worker and host; 0 removes it. "
    "Over time starts come\nat N less the burst per DUR (the burst: what "
    "10ms of the rate allows, at least\n1, at most N/2). Workers claim "
    "no jobs ahead for a queue with --max-running\n(or a LIFO queue with "
    "a per-group limit), and for a rate-limited one only what\nstarts "
    "within 8ms. With 1 per group, a worker may claim several jobs of a "
    "group\nand run them one after another: they show as running.\n"
    "--max-snoozes N (default 100): how often one job may snooze (a "
    "handler's\n\"snooze DUR\") before a snooze counts as a failure.\n"
    "--results: a command handler's stdout becomes its job's result (kept "
    "when the\njob is done, at most 1 MiB: tq result ID); --no-results "
    "(the default): its\nstdout is the worker's.\n"
    "--timeout DUR: how long one run of a job may take: its handler is then "
    "stopped\n(SIGTERM, SIGKILL after the worker's --grace) and the run "
    "fails. A job's own\n(tq enqueue --timeout) wins, a worker's "
    "--timeout is the fallback; 0 removes it.\n"
    "--retain-done DUR, --retain-dead DUR: the workers serving the queue "
    "delete its\ndone jobs, and its dead and cancelled ones, DUR after they "
    "finished (at least\n1s; 0, the default, keeps them until tq prune).\n";

typedef struct queue_args {
    const char *name; /* NULL: list them all */
    tq_queue_opts qo;
    int json;
} queue_args;

#define QUEUE_ROW "%-24s %-9s %-7s %-8s %-14s %-11s %-18s %-14s %s\n"

static void print_queue_header(void)
{
    printf(QUEUE_ROW, "QUEUE", "ORDER", "LEASE", "ATTEMPTS", "BACKOFF", "DONE ROWS",
           "RUNNING AT MOST", "STARTS AT MOST", "STATUS");
}

static void print_queue(const void *row)
{
    const tq_queue_info *q = row;
    char l[24], b[24], cap[24], backoff[52], attempts[16], limits[48] = "-",
                                                           rate[48] = "-";
    snprintf(backoff, sizeof backoff, "%s:%s",
             tq_duration_format(b, sizeof b, q->backoff_base_us),
             tq_duration_format(cap, sizeof cap, q->backoff_cap_us));
    snprintf(attempts, sizeof attempts, "%d", q->max_attempts);
    if (q->max_running && q->max_running_per_group)
        snprintf(limits, sizeof limits, "%d, %d/group", q->max_running,
                 q->max_running_per_group);
    else if (q->max_running)
        snprintf(limits, sizeof limits, "%d", q->max_running);
    else if (q->max_running_per_group)
        snprintf(limits, sizeof limits, "%d/group", q->max_running_per_group);
    if (q->rate_limit)
        snprintf(rate, sizeof rate, "%lld/%s", (long long)q->rate_limit,
                 tq_duration_format(b, sizeof b, q->rate_period_us));
    /* The status, and the settings of the control channel and results
     * where they are not the defaults. */
    char status[160], t[24];
    int n = snprintf(status, sizeof status, "%s", q->paused ? "paused" : "active");
    if (q->results)
        n += snprintf(status + n, sizeof status - (size_t)n, ", results");
    if (q->max_snoozes != 100)
        n += snprintf(status + n, sizeof status - (size_t)n, ", %d snoozes",
                      q->max_snoozes);
    if (q->timeout_us)
        n += snprintf(status + n, sizeof status - (size_t)n, ", timeout %s",
                      tq_duration_format(t, sizeof t, q->timeout_us));
    if (q->retain_done_us)
        n += snprintf(status + n, sizeof status - (size_t)n, ", done kept %s",
                      tq_duration_format(t, sizeof t, q->retain_done_us));
    if (q->retain_dead_us)
        snprintf(status + n, sizeof status - (size_t)n, ", dead kept %s",
                 tq_duration_format(t, sizeof t, q->retain_dead_us));
    char name[260];
    printf(QUEUE_ROW, cli_text(name, sizeof name, q->name), tq_order_name(q->order),
           tq_duration_format(l, sizeof l, q->lease_us), attempts, backoff,
           q->keep_done ? "kept" : "deleted", limits, rate, status);
}

/* --backoff BASE[:CAP] (a cap of 1h, or BASE if that is more, when none
 * is given). */
static int opt_backoff(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_queue_opts *qo = &((queue_args *)args)->qo;
    char base[64];
    const char *colon = strchr(arg, ':');
    size_t bl = colon ? (size_t)(colon - arg) : strlen(arg);
    if (bl >= sizeof base) {
        cli_error("queue", "invalid backoff '%s'", arg);
        return EXIT_USAGE;
    }
    memcpy(base, arg, bl);
    base[bl] = '\0';
    if (cli_duration("queue", "--backoff", base, &qo->backoff_base_us))
        return EXIT_USAGE;
    qo->backoff_cap_us = 3600 * 1000000LL;
    if (colon && cli_duration("queue", "--backoff cap", colon + 1, &qo->backoff_cap_us))
        return EXIT_USAGE;
    if (!colon && qo->backoff_base_us > qo->backoff_cap_us)
        qo->backoff_cap_us = qo->backoff_base_us;
    return 0;
}

static int opt_order(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    if (tq_order_parse(&((queue_args *)args)->qo.order, arg)) {
        cli_error("queue", "unknown order '%s': use fifo, lifo or unordered", arg);
        return EXIT_USAGE;
    }
    return 0;
}

static int opt_rate(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_queue_opts *qo = &((queue_args *)args)->qo;
    return cli_rate("queue", arg, &qo->rate_limit, &qo->rate_period_us) ? EXIT_USAGE : 0;
}

/* A setting: the option, marking its bit in qo.set. */
#define SET_FLAG(L, F, V, BIT) CLI_OPT_FLAG_MARK(0, L, queue_args, qo.F, V, qo.set, BIT)
#define SET_LIMIT(L, F, BIT)                                                             \
    CLI_OPT_INT_MARK(0, L, queue_args, qo.F, 0, 1000000, qo.set, BIT)
#define SET_CALLBACK(L, FN, BIT)                                                         \
    {                                                                                    \
        CLI_OPT_(0, L, CLI_CALLBACK), .arg = 1, .fn = FN,                                \
                                      CLI_MARK(queue_args, qo.set, BIT)                  \
    }

static const cli_opt opts[] = {
    SET_LIMIT("max-running", max_running, TQ_SET_MAX_RUNNING),
    SET_LIMIT("max-running-per-group", max_running_per_group,
              TQ_SET_MAX_RUNNING_PER_GROUP),
    SET_CALLBACK("rate", opt_rate, TQ_SET_RATE),
    SET_LIMIT("max-snoozes", max_snoozes, TQ_SET_MAX_SNOOZES),
    SET_FLAG("results", results, 1, TQ_SET_RESULTS),
    SET_FLAG("no-results", results, 0, TQ_SET_RESULTS),
    CLI_OPT_DURATION_MARK(0, "timeout", queue_args, qo.timeout_us, qo.set,
                          TQ_SET_TIMEOUT),
    CLI_OPT_DURATION_MARK(0, "retain-done", queue_args, qo.retain_done_us, qo.set,
                          TQ_SET_RETAIN_DONE),
    CLI_OPT_DURATION_MARK(0, "retain-dead", queue_args, qo.retain_dead_us, qo.set,
                          TQ_SET_RETAIN_DEAD),
    SET_CALLBACK("order", opt_order, TQ_SET_ORDER),
    CLI_OPT_DURATION_MARK(0, "lease", queue_args, qo.lease_us, qo.set, TQ_SET_LEASE),
    CLI_OPT_INT_MARK(0, "max-attempts", queue_args, qo.max_attempts, 1, 1000, qo.set,
                     TQ_SET_MAX_ATTEMPTS),
    SET_CALLBACK("backoff", opt_backoff, TQ_SET_BACKOFF),
    SET_FLAG("keep-done", keep_done, 1, TQ_SET_KEEP_DONE),
    SET_FLAG("delete-done", keep_done, 0, TQ_SET_KEEP_DONE),
    SET_FLAG("pause", paused, 1, TQ_SET_PAUSED),
    SET_FLAG("resume", paused, 0, TQ_SET_PAUSED),
    CLI_OPT_FLAG('j', "json", queue_args, json, 1),
    CLI_OPT_END};

static const queue_args defaults = {.qo = TQ_QUEUE_OPTS_INIT};

/* After the options: 0, or the exit code of a bad command line. */
static int queue_parse(void *args, const char **url, int argc, char **argv)
{
    queue_args *a = args;
    int ex;
    (void)url;
    if (argc - optind > 1) {
        cli_error("queue", "unexpected argument '%s'", argv[optind + 1]);
        return EXIT_USAGE;
    }
    a->name = optind < argc ? argv[optind] : NULL;
    if (!a->name && a->qo.set) {
        cli_error("queue", "settings need a queue NAME");
        return EXIT_USAGE;
    }
    if (a->name && (ex = cli_queue_name("queue", a->name)))
        return ex;
    return 0;
}

/* Creates or changes the queue and shows it. Returns the exit code. */
static int queue_set(tq *db, const char *name, const tq_queue_opts *qo, int json)
{
    int rc, ex = 0;
    tq_queue_info q;
    /* Whether it is new, for the word "created": a queue made by someone
     * else between the two calls is called created too, which is true
     * of the moment it was looked for. */
    int existed = tq_queue_get(&q, db, name) == 0;
    if ((rc = tq_queue_set(db, name, qo)) || (rc = tq_queue_get(&q, db, name))) {
        ex = cli_fail("queue", db, rc);
    } else if (json) {
        json_t *o = cli_queue_json(&q);
        json_object_set_new(o, "created", json_boolean(!existed));
        ex = cli_print_json(o);
    } else {
        if (!existed)
            printf("created queue '%s'\n", name);
        print_queue_header();
        print_queue(&q);
    }
    return ex;
}

static const cli_listing queues_listing = {"queue", &cli_queue_rows, print_queue_header,
                                           print_queue, "no queues yet"};

static int queue_run(void *args, tq *db)
{
    const queue_args *a = args;
    return a->name ? queue_set(db, a->name, &a->qo, a->json)
                   : cli_list(db, &queues_listing, NULL, a->json);
}

CLI_COMMAND(queue, "list queues, or create or change one", CLI_OPEN, &defaults, opts,
            usage, help, NULL);
