/*
 * cli.h - helpers shared by the tool's files (tq.c, bench.c). The tool
 * links only the public library; everything here is presentation.
 */
#ifndef TQ_CLI_H
#define TQ_CLI_H

#include "tq.h"

#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 a failure at run time, 2 bad usage or input. */
enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Prints "tq CMD: message" on stderr. */
void cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Reports a library failure on stderr; returns the exit code for it. */
int cli_fail(const char *cmd, tq *db, int rc);
/* A library failure's message, and the exit code for it. */
const char *cli_reason(tq *db, int rc);
int cli_exit_code(int rc);
/* The store URL: --db if given, else $TQ_DB, else "tq.db". */
const char *cli_url(const char *given);
/* Parses an integer within [min, max]; prints a usage error and returns -1
 * on failure. */
int cli_int(const char *cmd, const char *opt, const char *text, long long min,
            long long max, long long *out);
int cli_duration(const char *cmd, const char *opt, const char *text, int64_t *out);

/* The input of --lines (lines.c): one payload per line, "\n" or "\r\n"
 * ending each, empty lines skipped. Start with {.in = stream}. */
typedef struct cli_lines {
    FILE *in;
    char *buf;
    size_t cap;
    size_t lineno; /* of the line last returned, empty lines counted */
} cli_lines;
/* 1 with the next payload in *line and *len (valid until the next call),
 * 0 at the end of the input, -1 on a read error (errno says which). */
int cli_lines_next(cli_lines *r, char **line, size_t *len);
void cli_lines_free(cli_lines *r);

int cmd_bench(int argc, char **argv);

#endif
