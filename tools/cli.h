/*
 * cli.h - what the tool's files share (cli.c, lines.c) and the commands
 * that live in files of their own (work.c, bench.c). The tool links only
 * the public library; everything here is presentation.
 */
#ifndef TQ_CLI_H
#define TQ_CLI_H

#include "tq.h"

#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 a failure at run time (nothing of it done), 2
 * bad usage or input, 3 an outcome unknown (TQ_EUNKNOWN: a change that may
 * or may not be stored). */
enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_UNKNOWN = 3 };

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
/* Whether url names a PostgreSQL store (else it is SQLite's). */
int cli_is_postgres(const char *url);
/* Parses an integer within [min, max]; prints a usage error and returns -1
 * on failure. */
int cli_int(const char *cmd, const char *opt, const char *text, long long min,
            long long max, long long *out);
int cli_duration(const char *cmd, const char *opt, const char *text, int64_t *out);
/* --rate N/DUR (a bare unit is one of it: 100/s), or 0 or none for no
 * limit (*n 0); -1 after saying what is wrong. */
int cli_rate(const char *cmd, const char *text, int64_t *n, int64_t *period_us);

/* What a command is called and says of itself. */
typedef struct cli_cmd {
    const char *name;      /* "stats" */
    const char *usage;     /* the line after "usage: " */
    const char *help;      /* what --help prints after it */
    const char *optstring; /* getopt's; NULL: ":" ("+:" stops at the first argument) */
} cli_cmd;

/* Options every command takes: first in its struct option table. */
#define CLI_COMMON_OPTS                                                                  \
    {"db", required_argument, NULL, 'D'},                                                \
    {                                                                                    \
        "help", no_argument, NULL, 'h'                                                   \
    }

enum { CLI_OPTS_END = -1, CLI_OPTS_EXIT = -2 };
/*
 * The option-parsing prologue of every command: the next option of its
 * own (getopt_long over lo), after taking --db into *url. CLI_OPTS_END when
 * all are read; CLI_OPTS_EXIT with *ex set when the command is over: 0
 * after printing --help, EXIT_USAGE after one line on a bad option.
 */
int cli_option(const cli_cmd *cmd, int argc, char **argv, const struct option *lo,
               const char **url, int *ex);
/* Of n choices, the one word is most likely a typo of (a small edit
 * distance), or NULL. */
const char *cli_nearest(const char *word, const char *const *choices, size_t n);
/* An option the table knows that this command does not take. */
int cli_bad_option(const cli_cmd *cmd, char **argv);
/* 0 when argv has nothing from index from on; else says so, EXIT_USAGE. */
int cli_no_args(const cli_cmd *cmd, int argc, char **argv, int from);

/* 0 for a valid queue name; else says why, EXIT_USAGE. */
int cli_queue_name(const char *cmd, const char *name);
/* Opens the store; prints the failure and returns NULL on error. */
tq *cli_open(const char *cmd, const char *url, int create, int *exit_code);
/*
 * Text from the store, for a human's terminal: every line of output that
 * carries such text (names, errors, keys, groups, progress, schedules,
 * payloads) passes it through one of these, so that what a handler, a
 * plain-SQL writer or a worker role put there cannot move the cursor,
 * retitle the terminal, reorder a line or fake one (tq_text_printable:
 * control characters, C1 controls and bidirectional overrides as escapes,
 * invalid UTF-8 as \xNN). cli_text writes it into buf (len bytes, cut with
 * "..." when longer) and returns buf, for a printf %s; cli_put_text writes
 * it to f; cli_put_lines writes n bytes as lines, each escaped, NUL bytes
 * as \x00, ending in a newline.
 */
const char *cli_text(char *buf, size_t len, const char *s);
void cli_put_text(FILE *f, const char *s);
void cli_put_lines(FILE *f, const void *p, size_t n);
/* Prints v (and frees it); 0, or EXIT_RUNTIME if it cannot be printed. */
int cli_print_json(json_t *v);
/* Text from the store as a JSON string, always: text that is not valid
 * UTF-8 (jansson would refuse it, and the field would go missing) has its
 * invalid bytes as \xNN. NULL is null. */
json_t *cli_json_text(const char *s);
/* A time as ISO 8601 UTC, or null for 0. */
json_t *cli_json_time(int64_t us);
/* A job as JSON, with its payload (as text, or payload_base64) if asked. */
json_t *cli_job_json(const tq_job *j, int with_payload);
/* Bytes as o's key: text when valid UTF-8, else base64 under KEY_base64. */
void cli_json_bytes(json_t *o, const char *key, const void *p, size_t n);
/* tq show --json: the job with its payload, its result and its parents'
 * ids (read from db). */
json_t *cli_job_show_json(tq *db, const tq_job *j);
/* tq queue --json's object for one queue, and tq workers --json's for one
 * worker, whose status is "alive", "stopped" or "gone". */
json_t *cli_queue_json(const tq_queue_info *q);
json_t *cli_worker_json(const tq_worker_info *w);
/* tq cron list --json's object for one schedule (cron.c). */
json_t *cli_schedule_json(const tq_schedule *s);
const char *cli_worker_status(const tq_worker_info *w);

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

/* Commands in files of their own. */
/* A progress line on stderr (progress.c): drawn only on a terminal and
 * never with --json; cli_progress_end erases it before the summary. */
typedef struct cli_progress {
    int on, shown;
    int64_t start_us, last_us;
    char what[48];
} cli_progress;
void cli_progress_start(cli_progress *p, const char *what, int json);
/* done of total (total <= 0: unknown), with the rate since the start and,
 * when the total is known, the time left; extra (or NULL) after them.
 * Redraws at most ten times a second. */
void cli_progress_show(cli_progress *p, int64_t done, int64_t total, const char *extra);
void cli_progress_end(cli_progress *p);

int cmd_work(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_cron(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
