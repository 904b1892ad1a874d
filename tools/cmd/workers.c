/*
 * workers.c - `tq workers`: the registered workers, alive, stopped or
 * gone, after pruning those stopped or gone for long if asked. Called by
 * tq.c's command table.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>

static const char usage[] = "tq workers [--prune DUR] [-j|--json] [-d|--db URL]";
static const char help[] =
    "Lists registered workers: alive, stopped or gone (silent past their "
    "lease).\n--prune DUR first removes those stopped or gone for longer "
    "than DUR;\nlive workers are never removed.\n";

typedef struct workers_args {
    int json, prune;
    int64_t age; /* --prune's */
} workers_args;

#define WORKER_ROW "%-32s %-7s %-8s %-24s %s\n"

static void print_worker_header(void)
{
    printf(WORKER_ROW, "NAME", "STATUS", "PID", "STARTED", "HEARTBEAT");
}

static void print_worker(const void *row)
{
    const tq_worker_info *w = row;
    char t1[40], t2[40], pid[24], name[520];
    snprintf(pid, sizeof pid, "%lld", (long long)w->pid);
    printf(WORKER_ROW, cli_text(name, sizeof name, w->name), cli_worker_status(w), pid,
           tq_time_format(t1, sizeof t1, w->started_at),
           tq_time_format(t2, sizeof t2, w->heartbeat_at));
}

static const cli_listing workers_listing = {
    "workers", &cli_worker_rows, print_worker_header, print_worker, "no workers"};

static const cli_opt opts[] = {
    CLI_OPT_FLAG('j', "json", workers_args, json, 1),
    CLI_OPT_DURATION_MARK(0, "prune", workers_args, age, prune, 1), CLI_OPT_END};

CLI_PARSE_NO_ARGS(workers)

static int workers_run(void *args, tq *db)
{
    const workers_args *a = args;
    int ex = 0;
    int64_t n = 0;
    int rc = a->prune ? tq_worker_prune(&n, db, a->age) : 0;
    if (rc) {
        ex = cli_fail("workers", db, rc);
    } else {
        if (a->prune && !a->json) {
            char d[24];
            printf("pruned %lld worker(s) stopped or gone for over %s\n", (long long)n,
                   tq_duration_format(d, sizeof d, a->age));
        }
        ex = cli_list(db, &workers_listing, NULL, a->json);
    }
    return ex;
}

CLI_COMMAND(workers, "list registered workers, or prune old ones", CLI_OPEN, NULL, opts,
            usage, help, NULL);
