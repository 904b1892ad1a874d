/*
 * version.c - `tq version`: what `tq --version` (or -v) prints, for those
 * who ask it as a command. Called by tq.c's command table, which prints
 * the same for the options.
 */
#include "cli.h"

#include <stdio.h>

static const char usage[] = "tq version";
static const char help[] = "Prints tq's version, as tq --version (or tq -v) does.\n";

typedef struct version_args {
    int unused;
} version_args;

static const cli_opt opts[] = {CLI_OPT_END};

CLI_PARSE_NO_ARGS(version)

static int version_run(void *args, tq *db)
{
    (void)args, (void)db;
    printf("tq %s\n", TQ_VERSION);
    return 0;
}

CLI_COMMAND(version, "print tq's version", CLI_OPEN_NONE, NULL, opts, usage, help, NULL);
