/*
 * cron.c - `tq cron`: periodic jobs' schedules (set, list, rm), a thin
 * layer over tq_schedule_* in the library. Workers enqueue the slots.
 * Called by tq.c's command table.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "tq cron set NAME -q|--queue Q --schedule SPEC [--payload P] [--tz ZONE] "
    "[--overlap skip|allow] [--priority N] | tq cron list [-j|--json] | tq cron rm NAME "
    "[-d|--db URL]";
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

typedef enum cron_sub { CRON_SET, CRON_LIST, CRON_RM } cron_sub;

typedef struct cron_args {
    cron_sub sub;
    const char *name; /* set's and rm's */
    tq_schedule_opts so;
    int json;
} cron_args;

static const cron_args defaults = {.so = TQ_SCHEDULE_OPTS_INIT};

#define CRON_ROW "%-20s %-16s %-20s %-16s %-8s %-24s %s\n"

static void print_schedule_header(void)
{
    printf(CRON_ROW, "NAME", "QUEUE", "SCHEDULE", "TZ", "OVERLAP", "NEXT SLOT",
           "LAST JOB");
}

static void print_schedule(const void *row)
{
    const tq_schedule *c = row;
    char t[40], job[24] = "-", name[260], queue[260], spec[520], tz[260];
    if (c->last_job)
        snprintf(job, sizeof job, "%lld", (long long)c->last_job);
    printf(CRON_ROW, cli_text(name, sizeof name, c->name),
           cli_text(queue, sizeof queue, c->queue), cli_text(spec, sizeof spec, c->spec),
           cli_text(tz, sizeof tz, c->tz), c->overlap_skip ? "skip" : "allow",
           tq_time_format(t, sizeof t, c->next_slot_us), job);
}

static const cli_listing schedules_listing = {
    "cron", &cli_schedule_rows, print_schedule_header, print_schedule, "no schedules"};

/* tq cron set's --payload P, and --overlap skip|allow. */
static int opt_payload(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    tq_schedule_opts *so = &((cron_args *)args)->so;
    so->payload = arg;
    so->payload_len = strlen(arg);
    return 0;
}

static int opt_overlap(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    if (strcmp(arg, "skip") != 0 && strcmp(arg, "allow") != 0) {
        cli_error("cron", "unknown --overlap '%s': use skip or allow", arg);
        return EXIT_USAGE;
    }
    ((cron_args *)args)->so.overlap_skip = strcmp(arg, "skip") == 0;
    return 0;
}

static const cli_opt set_opts[] = {
    CLI_OPT_STRING('q', "queue", cron_args, so.queue),
    CLI_OPT_STRING(0, "schedule", cron_args, so.spec),
    CLI_OPT_CALLBACK(0, "payload", 1, opt_payload, 0),
    CLI_OPT_STRING(0, "tz", cron_args, so.tz),
    CLI_OPT_CALLBACK(0, "overlap", 1, opt_overlap, 0),
    CLI_OPT_INT(0, "priority", cron_args, so.priority, -2147483647 - 1LL, 2147483647),
    CLI_OPT_FLAG('j', "json", cron_args, json, 1),
    CLI_OPT_END};

/* What tq cron set was given, checked before the store is opened: a bad
 * spec or zone is a usage error (exit 2), and opening a SQLite store that
 * is not there would create it. 0, or EXIT_USAGE after one line. */
static int set_check(const cron_args *a)
{
    const tq_schedule_opts *so = &a->so;
    if (!so->queue || !so->spec) {
        cli_error("cron", "cron set needs --queue Q and --schedule SPEC");
        return EXIT_USAGE;
    }
    char why[240];
    int64_t next;
    if (tq_name_check(a->name)) {
        cli_error("cron",
                  "invalid schedule name '%s': use 1 to 64 letters, digits, '_', "
                  "'.' or '-'",
                  a->name);
        return EXIT_USAGE;
    }
    if (cli_queue_name("cron", so->queue))
        return EXIT_USAGE;
    if (tq_schedule_next(&next, so->spec, so->tz, 0, why, sizeof why)) {
        if (strstr(why, "time zone"))
            cli_error("cron", "%s", why);
        else
            cli_error("cron", "invalid schedule '%s': %s", so->spec, why);
        return EXIT_USAGE;
    }
    return 0;
}

/* tq cron set NAME ...: 0, -1 after --help, or the exit code of a bad
 * command line. */
static int set_parse(cron_args *a, const char **url, int argc, char **argv)
{
    int ex = cli_parse(&cmd_cron, argc, argv, set_opts, url, a);
    if (ex)
        return ex;
    if (optind >= argc) {
        cli_error("cron", "cron set needs a NAME (see tq cron --help)");
        return EXIT_USAGE;
    }
    a->name = argv[optind];
    if ((ex = cli_no_args(&cmd_cron, argc, argv, optind + 1)))
        return ex;
    return set_check(a);
}

/* tq cron list's --json (rm takes none). */
static int opt_list_json(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt, (void)arg;
    cron_args *a = args;
    if (a->sub != CRON_LIST)
        return -1;
    a->json = 1;
    return 0;
}

static const cli_opt other_opts[] = {CLI_OPT_CALLBACK('j', "json", 0, opt_list_json, 0),
                                     CLI_OPT_END};

/* tq cron list, and tq cron rm NAME: 0, -1 after --help, or the exit code
 * of a bad command line. */
static int other_parse(cron_args *a, const char **url, int argc, char **argv)
{
    int ex = cli_parse(&cmd_cron, argc, argv, other_opts, url, a);
    if (ex)
        return ex;
    if (a->sub == CRON_RM) {
        if (optind >= argc) {
            cli_error("cron", "cron rm needs a NAME");
            return EXIT_USAGE;
        }
        a->name = argv[optind++];
    }
    return cli_no_args(&cmd_cron, argc, argv, optind);
}

/* The subcommand, then its options: 0, -1 after --help, or the exit code
 * of a bad command line. */
static int cron_parse(void *args, const char **url, int argc, char **argv)
{
    cron_args *a = args;
    const char *sub = argc > 1 ? argv[1] : "";
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        printf("usage: %s\n%s", usage, help);
        return -1;
    }
    optind = 1;
    if (strcmp(sub, "set") == 0) {
        a->sub = CRON_SET;
        return set_parse(a, url, argc - 1, argv + 1);
    }
    if (strcmp(sub, "list") == 0 || strcmp(sub, "rm") == 0) {
        a->sub = sub[0] == 'l' ? CRON_LIST : CRON_RM;
        return other_parse(a, url, argc - 1, argv + 1);
    }
    cli_error("cron", "%s '%s': use tq cron set, list or rm (see tq cron --help)",
              *sub ? "unknown subcommand" : "missing subcommand", sub);
    return EXIT_USAGE;
}

/* tq cron set: the schedule stored, then shown (--json: that one). */
static int set_run(tq *db, const cron_args *a)
{
    int ex = 0, rc = tq_schedule_set(db, a->name, &a->so);
    if (rc)
        return cli_fail("cron", db, rc);
    if (!a->json)
        return cli_list(db, &schedules_listing, NULL, 0);
    tq_schedule *v;
    size_t nv;
    if ((rc = tq_schedule_list(&v, &nv, db)))
        return cli_fail("cron", db, rc);
    for (size_t i = 0; i < nv; i++)
        if (strcmp(v[i].name, a->name) == 0)
            ex = cli_print_json(cli_schedule_json(&v[i]));
    tq_schedule_array_free(v, nv);
    return ex;
}

static int cron_run(void *args, tq *db)
{
    const cron_args *a = args;
    int ex = 0, rc;
    if (a->sub == CRON_SET) {
        ex = set_run(db, a);
    } else if (a->sub == CRON_LIST) {
        ex = cli_list(db, &schedules_listing, NULL, a->json);
    } else if ((rc = tq_schedule_remove(db, a->name))) {
        ex = cli_fail("cron", db, rc);
    } else {
        printf("removed schedule '%s'\n", a->name);
    }
    return ex;
}

/* Its options are read by its subcommand's parse (set_opts, other_opts). */
CLI_COMMAND(cron, "periodic jobs: set, list or remove a schedule", CLI_OPEN, &defaults,
            NULL, usage, help, NULL);
