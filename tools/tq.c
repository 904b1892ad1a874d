/*
 * tq.c - the command-line tool: a thin layer over the public library.
 * main(), the table of commands, how each one runs, and the global help.
 * Each command lives in a file of its own, tools/cmd/NAME.c, defined by
 * CLI_COMMAND at its bottom (cli.h): a parse function fills a struct from
 * the arguments and validates them before the store is touched, and a run
 * function does the work, prints results (text or JSON) and maps failures
 * to exit codes: 0 success, 1 failure at run time, 2 bad usage or input, 3
 * an outcome unknown. A rejected command changes nothing in the store.
 * What they share is cli.c.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The commands, in the order the global help lists them. */
static const cli_command *const commands[] = {
    &cmd_init, &cmd_queue,  &cmd_enqueue, &cmd_work,    &cmd_stats, &cmd_list,
    &cmd_show, &cmd_result, &cmd_retry,   &cmd_cancel,  &cmd_prune, &cmd_workers,
    &cmd_cron, &cmd_serve,  &cmd_bench,   &cmd_version,
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static int usage_main(FILE *f)
{
    fprintf(f,
            "usage: tq [-d|--db URL] COMMAND [OPTIONS]\n"
            "       tq -v|--version\n\n"
            "A job queue that lives in a SQL table. The store is --db URL, else $TQ_DB,\n"
            "else ./tq.db: a SQLite file path, sqlite:PATH, or postgres://...\n\n"
            "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i]->name, commands[i]->what);
    fprintf(f, "\n'tq COMMAND --help' (or 'tq help COMMAND') describes each.\n");
    return f == stdout ? 0 : EXIT_USAGE;
}

/* A command, as every one runs (cli.h): its defaults, its options, parse,
 * open the store if it says so, run; its exit code. */
static int command_run(const cli_command *c, int argc, char **argv)
{
    const char *url = NULL;
    tq *db = NULL;
    void *args = calloc(1, c->size);
    if (!args) {
        cli_error(c->name, "out of memory");
        return EXIT_RUNTIME;
    }
    if (c->defaults)
        memcpy(args, c->defaults, c->size);
    optind = 1;
    opterr = 0;
    int ex = c->opts ? cli_parse(c, argc, argv, c->opts, &url, args) : 0;
    if (!ex)
        ex = c->parse(args, &url, argc, argv);
    if (!ex && c->open != CLI_OPEN_NONE)
        db = cli_open(c->name, cli_url(url), c->open == CLI_OPEN_CREATE, &ex);
    if (!ex)
        ex = c->run(args, db);
    tq_close(db);
    if (c->done)
        c->done(args);
    free(args);
    return ex < 0 ? 0 : ex;
}

/* Standard descriptors a parent closed are /dev/null, so that no file the
 * store or a handler's pipes open takes their place and their meaning. */
static void std_fds_open(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF &&
            open("/dev/null", fd ? O_WRONLY : O_RDONLY) != fd)
            exit(EXIT_FAILURE);
}

int main(int argc, char **argv)
{
    const char *db_before = NULL;
    int i = 1;
    std_fds_open();
    /* tq --db URL COMMAND ...: a --db before the command applies to it. */
    while (i < argc && argv[i][0] == '-') {
        if ((strcmp(argv[i], "--db") == 0 || strcmp(argv[i], "-d") == 0) &&
            i + 1 < argc) {
            db_before = argv[i + 1];
            i += 2;
        } else if (strncmp(argv[i], "--db=", 5) == 0) {
            db_before = argv[i] + 5;
            i++;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            return usage_main(stdout);
        } else if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-v") == 0) {
            return cmd_version.run(NULL, NULL);
        } else {
            cli_error(NULL, "unknown option '%s' (see tq --help)", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (i >= argc)
        return usage_main(stderr);
    if (db_before)
        cli_global_db(db_before);
    const char *name = argv[i];
    static char help_opt[] = "--help";
    char *help_argv[] = {NULL, help_opt, NULL};
    if (strcmp(name, "help") == 0) {
        if (i + 1 >= argc)
            return usage_main(stdout);
        /* tq help CMD: as tq CMD --help */
        name = help_argv[0] = argv[i + 1];
        argv = help_argv;
        argc = 2;
        i = 0;
    }
    const char *names[NCOMMANDS];
    for (size_t k = 0; k < NCOMMANDS; k++) {
        if (strcmp(name, commands[k]->name) == 0)
            return command_run(commands[k], argc - i, argv + i);
        names[k] = commands[k]->name;
    }
    const char *near = cli_nearest(name, names, NCOMMANDS);
    if (near)
        cli_error(NULL, "unknown command '%s' (did you mean '%s'?)", name, near);
    else
        cli_error(NULL, "unknown command '%s' (see tq --help)", name);
    return EXIT_USAGE;
}
