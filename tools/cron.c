/*
 * cron.c - tq cron: periodic jobs' schedules (set, list, rm), a thin layer
 * over tq_schedule_* in the library. Workers enqueue the slots.
 */
#include "cli.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "tq cron set NAME --queue Q --schedule SPEC [--payload P] [--tz ZONE] "
    "[--overlap skip|allow] [--priority N] | tq cron list [--json] | tq cron rm NAME "
    "[--db URL]";
static const char help[] =
    "Periodic jobs. Each slot of a schedule enqueues one job into its queue,\n"
    "once however many workers run: running workers (tq work, any host)\n"
    "enqueue the due slots; after a time without workers, only the most recent\n"
    "missed slot. SPEC: 5 cron fields (minute hour day-of-month month\n"
    "day-of-week: lists, ranges, steps, jan-dec, sun-sat), 6 with seconds first,\n"
    "@hourly, @daily, @weekly, @monthly, @yearly, or @every DUR (whole seconds).\n"
    "--tz ZONE (default UTC): a name from the system's time-zone database; a\n"
    "local time skipped by a clock change is no slot, a repeated one fires once.\n"
    "--overlap skip: no job for a slot while the previous slot's job is still\n"
    "ready or running (default allow). Setting an existing NAME replaces it.\n";

static const cli_cmd me = {.name = "cron", .usage = usage, .help = help};

json_t *cli_schedule_json(const tq_schedule *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", cli_json_text(s->name));
    json_object_set_new(o, "queue", cli_json_text(s->queue));
    json_object_set_new(o, "schedule", cli_json_text(s->spec));
    json_object_set_new(o, "tz", cli_json_text(s->tz));
    json_object_set_new(o, "payload", cli_json_text(s->payload));
    json_object_set_new(o, "priority", json_integer(s->priority));
    json_object_set_new(o, "overlap", json_string(s->overlap_skip ? "skip" : "allow"));
    json_object_set_new(o, "next_slot", cli_json_time(s->next_slot_us));
    json_object_set_new(o, "last_slot", cli_json_time(s->last_slot_us));
    json_object_set_new(o, "last_job",
                        s->last_job ? json_integer(s->last_job) : json_null());
    return o;
}

#define CRON_ROW "%-20s %-16s %-20s %-16s %-8s %-24s %s\n"

static int cron_list(tq *db, int json)
{
    tq_schedule *v;
    size_t n;
    int rc = tq_schedule_list(&v, &n, db);
    if (rc)
        return cli_fail("cron", db, rc);
    json_t *a = json_array();
    if (!json && n)
        printf(CRON_ROW, "NAME", "QUEUE", "SCHEDULE", "TZ", "OVERLAP", "NEXT SLOT",
               "LAST JOB");
    else if (!json)
        printf("no schedules\n");
    for (size_t i = 0; i < n; i++) {
        char t[40], job[24] = "-", name[260], queue[260], spec[520], tz[260];
        if (json) {
            json_array_append_new(a, cli_schedule_json(&v[i]));
            continue;
        }
        if (v[i].last_job)
            snprintf(job, sizeof job, "%lld", (long long)v[i].last_job);
        printf(CRON_ROW, cli_text(name, sizeof name, v[i].name),
               cli_text(queue, sizeof queue, v[i].queue),
               cli_text(spec, sizeof spec, v[i].spec), cli_text(tz, sizeof tz, v[i].tz),
               v[i].overlap_skip ? "skip" : "allow",
               tq_time_format(t, sizeof t, v[i].next_slot_us), job);
    }
    tq_schedule_array_free(v, n);
    if (json)
        return cli_print_json(a);
    json_decref(a);
    return 0;
}

static int cron_set(int argc, char **argv)
{
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"queue", required_argument, NULL, 'q'},
                                       {"schedule", required_argument, NULL, 's'},
                                       {"payload", required_argument, NULL, 'p'},
                                       {"tz", required_argument, NULL, 'z'},
                                       {"overlap", required_argument, NULL, 'o'},
                                       {"priority", required_argument, NULL, 'P'},
                                       {"json", no_argument, NULL, 'j'},
                                       {0}};
    tq_schedule_opts so = TQ_SCHEDULE_OPTS_INIT;
    const char *url = NULL;
    int c, ex = 0, json = 0;
    long long n;
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        switch (c) {
        case 'q':
            so.queue = optarg;
            break;
        case 's':
            so.spec = optarg;
            break;
        case 'p':
            so.payload = optarg;
            so.payload_len = strlen(optarg);
            break;
        case 'z':
            so.tz = optarg;
            break;
        case 'o':
            if (strcmp(optarg, "skip") != 0 && strcmp(optarg, "allow") != 0) {
                cli_error("cron", "unknown --overlap '%s': use skip or allow", optarg);
                return EXIT_USAGE;
            }
            so.overlap_skip = strcmp(optarg, "skip") == 0;
            break;
        case 'P':
            if (cli_int("cron", "--priority", optarg, -2147483647 - 1LL, 2147483647, &n))
                return EXIT_USAGE;
            so.priority = (int)n;
            break;
        case 'j':
            json = 1;
            break;
        default:
            return cli_bad_option(&me, argv);
        }
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if (optind >= argc) {
        cli_error("cron", "cron set needs a NAME (see tq cron --help)");
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    if ((ex = cli_no_args(&me, argc, argv, optind + 1)))
        return ex;
    if (!so.queue || !so.spec) {
        cli_error("cron", "cron set needs --queue Q and --schedule SPEC");
        return EXIT_USAGE;
    }
    /* Checked before the store is opened: a bad spec or zone is a usage
     * error (exit 2), and opening a SQLite store that is not there would
     * create it. */
    char why[240];
    int64_t next;
    if (tq_name_check(name)) {
        cli_error("cron",
                  "invalid schedule name '%s': use 1 to 64 letters, digits, '_', "
                  "'.' or '-'",
                  name);
        return EXIT_USAGE;
    }
    if ((ex = cli_queue_name("cron", so.queue)))
        return ex;
    if (tq_schedule_next(&next, so.spec, so.tz, 0, why, sizeof why)) {
        if (strstr(why, "time zone"))
            cli_error("cron", "%s", why);
        else
            cli_error("cron", "invalid schedule '%s': %s", so.spec, why);
        return EXIT_USAGE;
    }
    tq *db = cli_open("cron", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    int rc = tq_schedule_set(db, name, &so);
    if (rc) {
        ex = cli_fail("cron", db, rc);
    } else if (json) {
        tq_schedule *v;
        size_t nv;
        if ((rc = tq_schedule_list(&v, &nv, db))) {
            ex = cli_fail("cron", db, rc);
        } else {
            for (size_t i = 0; i < nv; i++)
                if (strcmp(v[i].name, name) == 0)
                    ex = cli_print_json(cli_schedule_json(&v[i]));
            tq_schedule_array_free(v, nv);
        }
    } else {
        ex = cron_list(db, 0);
    }
    tq_close(db);
    return ex;
}

static int cron_other(int argc, char **argv, int remove)
{
    static const struct option lo[] = {
        CLI_COMMON_OPTS, {"json", no_argument, NULL, 'j'}, {0}};
    const char *url = NULL;
    int c, ex = 0, json = 0;
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        if (c == 'j' && !remove)
            json = 1;
        else
            return cli_bad_option(&me, argv);
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    const char *name = NULL;
    if (remove) {
        if (optind >= argc) {
            cli_error("cron", "cron rm needs a NAME");
            return EXIT_USAGE;
        }
        name = argv[optind++];
    }
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    tq *db = cli_open("cron", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    int rc = remove ? tq_schedule_remove(db, name) : 0;
    if (rc)
        ex = cli_fail("cron", db, rc);
    else if (remove)
        printf("removed schedule '%s'\n", name);
    else
        ex = cron_list(db, json);
    tq_close(db);
    return ex;
}

int cmd_cron(int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : "";
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        printf("usage: %s\n%s", usage, help);
        return 0;
    }
    optind = 1;
    if (strcmp(sub, "set") == 0)
        return cron_set(argc - 1, argv + 1);
    if (strcmp(sub, "list") == 0)
        return cron_other(argc - 1, argv + 1, 0);
    if (strcmp(sub, "rm") == 0)
        return cron_other(argc - 1, argv + 1, 1);
    cli_error("cron", "%s '%s': use tq cron set, list or rm (see tq cron --help)",
              *sub ? "unknown subcommand" : "missing subcommand", sub);
    return EXIT_USAGE;
}
