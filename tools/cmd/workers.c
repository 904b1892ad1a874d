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

static int print_workers(tq *db, int json)
{
    tq_worker_info *v;
    size_t n;
    int rc = tq_worker_list(&v, &n, db);
    if (rc)
        return cli_fail("workers", db, rc);
    json_t *a = json_array();
    if (!json && n)
        printf(WORKER_ROW, "NAME", "STATUS", "PID", "STARTED", "HEARTBEAT");
    else if (!json)
        printf("no workers\n");
    for (size_t i = 0; i < n; i++) {
        const char *status = cli_worker_status(&v[i]);
        char t1[40], t2[40], pid[24], name[520];
        if (json) {
            json_array_append_new(a, cli_worker_json(&v[i]));
        } else {
            snprintf(pid, sizeof pid, "%lld", (long long)v[i].pid);
            printf(WORKER_ROW, cli_text(name, sizeof name, v[i].name), status, pid,
                   tq_time_format(t1, sizeof t1, v[i].started_at),
                   tq_time_format(t2, sizeof t2, v[i].heartbeat_at));
        }
    }
    tq_free(v);
    if (json)
        return cli_print_json(a);
    json_decref(a);
    return 0;
}

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
        ex = print_workers(db, a->json);
    }
    return ex;
}

CLI_COMMAND(workers, "list registered workers, or prune old ones", CLI_OPEN, NULL, opts,
            usage, help, NULL);
