/*
 * init.c - `tq init`: creates the tq schema in the store or upgrades it,
 * and on PostgreSQL grants roles what producers or workers need. Called by
 * tq.c's command table.
 */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

#define MAX_GRANTS 32

static const char usage[] =
    "tq init [--grant-producer ROLE]... [--grant-worker ROLE]... [-d|--db URL]";
static const char help[] =
    "Creates the tq schema in the store, or upgrades it. Safe to run again.\n"
    "PostgreSQL: --grant-producer ROLE lets ROLE enqueue and nothing else;\n"
    "--grant-worker ROLE lets ROLE run tq work, and not change queue "
    "settings\n"
    "or the schema. The schema and the grants are one transaction.\n";

typedef struct init_args {
    tq_grant grants[MAX_GRANTS];
    size_t ngrants;
} init_args;

/* --grant-producer ROLE, --grant-worker ROLE (the kind in opt->value). */
static int opt_grant(void *args, const cli_opt *opt, const char *role)
{
    init_args *a = args;
    if (a->ngrants == MAX_GRANTS) {
        cli_error("init", "at most %d grants at once", MAX_GRANTS);
        return EXIT_USAGE;
    }
    a->grants[a->ngrants++] = (tq_grant){role, (tq_grant_kind)opt->value};
    return 0;
}

static const cli_opt opts[] = {
    CLI_OPT_CALLBACK(0, "grant-producer", 1, opt_grant, TQ_GRANT_PRODUCER),
    CLI_OPT_CALLBACK(0, "grant-worker", 1, opt_grant, TQ_GRANT_WORKER), CLI_OPT_END};

/* After the options: 0, or the exit code of a bad command line. */
static int init_parse(void *args, const char **url, int argc, char **argv)
{
    init_args *a = args;
    int ex = cli_no_args(&cmd_init, argc, argv, optind);
    if (ex)
        return ex;
    if (a->ngrants && !cli_is_postgres(cli_url(*url))) {
        /* Before opening: opening a SQLite store that is not there creates it. */
        cli_error("init",
                  "--grant-producer and --grant-worker are for PostgreSQL stores: SQLite "
                  "has no roles (the file's permissions decide)");
        return EXIT_USAGE;
    }
    return 0;
}

static int init_run(void *args, tq *db)
{
    const init_args *a = args;
    int ex = 0;
    int rc = tq_init_grants(db, a->grants, a->ngrants);
    if (rc)
        ex = cli_fail("init", db, rc);
    else
        printf("store ready: %s (%s, schema version %d)\n", tq_store_name(db),
               tq_engine_name(db), tq_schema_version());
    for (size_t i = 0; !rc && i < a->ngrants; i++)
        printf("granted to %s: %s\n", a->grants[i].role,
               a->grants[i].kind == TQ_GRANT_WORKER ? "worker" : "producer");
    return ex;
}

CLI_COMMAND(init, "create or upgrade the schema", CLI_OPEN_CREATE, NULL, opts, usage,
            help, NULL);
