/*
 * cli.h - what the tool's files share: option parsing, opening the store,
 * errors, escaping of store text and JSON (cli.c), the --lines input
 * (lines.c), the progress line (progress.c), and the commands, one file
 * each under tools/cmd/, that tq.c's table names. The tool links only the
 * public library; everything here is presentation.
 */
#ifndef TQ_CLI_H
#define TQ_CLI_H

#include "tq.h"

#include <getopt.h>
#include <jansson.h>
#include <stddef.h>
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
/* tq --db URL COMMAND: URL is the command's store as if it had --db URL
 * (and TQ_DB, for what it starts). */
void cli_global_db(const char *url);
/* tq_open of url failed with rc: says so, naming the store and where its
 * name came from (cli_url) when the message does not; the exit code. */
int cli_open_failed(const char *cmd, tq *db, int rc, const char *url);
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

/*
 * A command: one defined at the bottom of each tools/cmd/NAME.c, listed in
 * tq.c's table, and run by main() the same way for each. main() fills an
 * arguments struct of size bytes with defaults (zeroes when NULL) and
 * reads the command's options into it by opts (cli_parse; NULL for a
 * command that reads its own, as tq cron does after its subcommand). Then
 * parse reads the arguments after them (argv[0] is the command's name,
 * optind the first argument, the --db given in *url), checking all it can
 * before the store is touched; each step returns 0, -1 after printing
 * --help (the command exits 0), or the exit code of a bad command line.
 * Then, when open says so, main() opens the store at the URL (cli_url) for
 * run, and closes it after (a command that opens its own connections
 * keeps the URL in its arguments); run does the work and returns the exit
 * code. done, when set, frees what parse allocated, whatever happened.
 */
enum { CLI_OPEN_NONE, CLI_OPEN, CLI_OPEN_CREATE };
struct cli_opt;
typedef struct cli_command {
    const char *name;           /* "stats" */
    const char *what;           /* its line in tq --help */
    const char *usage;          /* the line after "usage: " */
    const char *help;           /* what --help prints after it */
    size_t size;                /* of its arguments' struct */
    const void *defaults;       /* its arguments before the options, or NULL */
    const struct cli_opt *opts; /* its options, or NULL: parse reads them */
    int open;                   /* CLI_OPEN_*: whether main() opens the store for run */
    int (*parse)(void *args, const char **url, int argc, char **argv);
    int (*run)(void *args, tq *db); /* db NULL with CLI_OPEN_NONE */
    void (*done)(void *args);
} cli_command;

/* The definition of cmd_NAME, at the bottom of tools/cmd/NAME.c, whose
 * arguments are a NAME_args, starting as DEFAULTS (or NULL), with the
 * options of the table OPTS, read by NAME_parse and used by NAME_run;
 * DONE frees what parse allocated, or is NULL. */
#define CLI_COMMAND(NAME, WHAT, OPEN, DEFAULTS, OPTS, USAGE, HELP, DONE)                 \
    const cli_command cmd_##NAME = {.name = #NAME,                                       \
                                    .what = WHAT,                                        \
                                    .usage = USAGE,                                      \
                                    .help = HELP,                                        \
                                    .size = sizeof(NAME##_args),                         \
                                    .defaults = DEFAULTS,                                \
                                    .opts = OPTS,                                        \
                                    .open = OPEN,                                        \
                                    .parse = NAME##_parse,                               \
                                    .run = NAME##_run,                                   \
                                    .done = DONE}

/* NAME_parse, for a command that takes nothing after its options
 * (cli_no_args). */
#define CLI_PARSE_NO_ARGS(NAME)                                                          \
    static int NAME##_parse(void *args, const char **url, int argc, char **argv)         \
    {                                                                                    \
        (void)args, (void)url;                                                           \
        return cli_no_args(&cmd_##NAME, argc, argv, optind);                             \
    }

/* NAME_parse, for a command whose one argument is a job ID, read into
 * NAME_args.id (cli_one_job_id). */
#define CLI_PARSE_JOB_ID(NAME)                                                           \
    static int NAME##_parse(void *args, const char **url, int argc, char **argv)         \
    {                                                                                    \
        (void)url;                                                                       \
        return cli_one_job_id(&cmd_##NAME, argc, argv, &((NAME##_args *)args)->id);      \
    }

/*
 * A command's options, declared (git's parse-options): a table of
 * cli_opt, one an option, ended by CLI_OPT_END, which cli_parse reads the
 * command line by into the command's arguments struct. Each names its
 * long option, its short letter or 0, its kind, and the field it fills
 * (offsetof): a string, a flag (an int set to a value), an integer within
 * a range, a duration (one that cannot be 0 says why: .zero), a queue
 * name (checked at once), or a callback for the odd ones. An option may also mark that it
 * was given: its bits ORed into an unsigned (or int) field (tq_queue_opts.set, a "given"
 * flag).
 * --db (-d) and --help come first in every command's, added by cli_parse.
 */
typedef enum cli_opt_kind {
    CLI_OPT_NONE, /* the end of the table */
    CLI_STRING,   /* const char *: the value */
    CLI_FLAG,     /* int: value, no argument */
    CLI_INT,      /* int, long long, int64_t or size_t: min to max (cli_int) */
    CLI_DURATION, /* int64_t microseconds (cli_duration) */
    CLI_QUEUE,    /* const char *: a valid queue name (cli_queue_name) */
    CLI_CALLBACK  /* fn; a NULL fn: known to getopt but refused */
} cli_opt_kind;

struct cli_opt;
/* A callback option's value (NULL for one without) into args: 0, -1 for
 * an option the command does not take here (said: "unknown option"), or
 * the exit code after one line. */
typedef int cli_opt_fn(void *args, const struct cli_opt *opt, const char *arg);

typedef struct cli_opt {
    const char *name;   /* the long option, without "--" */
    int letter;         /* the short one, or 0 */
    cli_opt_kind kind;  /* CLI_* */
    size_t off, size;   /* the field in the arguments struct */
    long long min, max; /* CLI_INT's range */
    long long value;    /* CLI_FLAG's value; a CLI_CALLBACK's to read */
    const char *zero;   /* CLI_DURATION: when set, 0 is refused with this line */
    int arg; /* CLI_CALLBACK: whether it takes a value (2: optional, as --name=VALUE) */
    cli_opt_fn *fn;  /* CLI_CALLBACK's */
    size_t mark_off; /* when given: mark ORed into the field here */
    unsigned mark;
} cli_opt;

#define CLI_OPT_(S, L, K) .name = L, .letter = S, .kind = K
#define CLI_FIELD(T, F)   .off = offsetof(T, F), .size = sizeof(((T *)0)->F)
#define CLI_MARK(T, F, M) .mark_off = offsetof(T, F), .mark = M
#define CLI_OPT_STRING(S, L, T, F)                                                       \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_STRING), CLI_FIELD(T, F)                                      \
    }
#define CLI_OPT_QUEUE(S, L, T, F)                                                        \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_QUEUE), CLI_FIELD(T, F)                                       \
    }
#define CLI_OPT_FLAG(S, L, T, F, V)                                                      \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_FLAG), CLI_FIELD(T, F), .value = V                            \
    }
#define CLI_OPT_INT(S, L, T, F, MIN, MAX)                                                \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_INT), CLI_FIELD(T, F), .min = MIN, .max = MAX                 \
    }
#define CLI_OPT_DURATION(S, L, T, F)                                                     \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_DURATION), CLI_FIELD(T, F)                                    \
    }
/* ARG: whether it takes a value; V: for FN to read (opt->value). */
#define CLI_OPT_CALLBACK(S, L, ARG, FN, V)                                               \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_CALLBACK), .arg = ARG, .fn = FN, .value = V                   \
    }
/* An option getopt must know (to read the command line as another
 * command's, "--d" ambiguous, "--queue" needing a value) that this one
 * refuses. */
#define CLI_OPT_REFUSED(L, ARG) CLI_OPT_CALLBACK(0, L, ARG, NULL, 0)
/* The kinds above, marking in MF that they were given. */
#define CLI_OPT_FLAG_MARK(S, L, T, F, V, MF, M)                                          \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_FLAG), CLI_FIELD(T, F), .value = V, CLI_MARK(T, MF, M)        \
    }
#define CLI_OPT_INT_MARK(S, L, T, F, MIN, MAX, MF, M)                                    \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_INT), CLI_FIELD(T, F), .min = MIN, .max = MAX,                \
                                                  CLI_MARK(T, MF, M)                     \
    }
#define CLI_OPT_DURATION_MARK(S, L, T, F, MF, M)                                         \
    {                                                                                    \
        CLI_OPT_(S, L, CLI_DURATION), CLI_FIELD(T, F), CLI_MARK(T, MF, M)                \
    }
#define CLI_OPT_END                                                                      \
    {                                                                                    \
        .name = NULL                                                                     \
    }

/*
 * Every option of a command (main() reads them before its parse function,
 * tq cron's parse for its subcommand), with getopt_long over the table and
 * --db and --help: the options in any order among the arguments (until
 * "--"), long ones also by an unambiguous prefix (--queu), short ones
 * grouped or with their value attached (-jq mail, -qmail). --db's value
 * goes into *url. Returns 0 when all are read (optind at the first
 * argument), -1 after printing --help (the command exits 0), or the exit
 * code after one line: an unknown or ambiguous option, a missing value, a
 * bad one.
 */
int cli_parse(const cli_command *cmd, int argc, char **argv, const cli_opt *opts,
              const char **url, void *args);
/* Of n choices, the one word is most likely a typo of (a small edit
 * distance), or NULL. */
const char *cli_nearest(const char *word, const char *const *choices, size_t n);
/* 0 when argv has nothing from index from on; else says so, EXIT_USAGE. */
int cli_no_args(const cli_command *cmd, int argc, char **argv, int from);

/* A job id argument into *out; -1 after a usage error. */
int cli_job_id(const char *cmd, const char *text, int64_t *out);
/* The job IDs of argv from optind on into *ids, n of them (*ids the
 * caller's to free): 0, or the exit code after one line. */
int cli_job_ids(const cli_command *cmd, int argc, char **argv, int64_t **ids, size_t *n);
/* The one argument, a job ID, of tq show and tq result into *out: 0, or
 * EXIT_USAGE after one line. */
int cli_one_job_id(const cli_command *cmd, int argc, char **argv, int64_t *out);
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
/*
 * A list the store keeps, read whole: the queues, the workers, the
 * schedules (cli_*_rows), or the jobs a tq_list_opts picks (tools/cmd/list.c).
 * read puts the rows, each size bytes, in *rows (arg: what picks them, or
 * NULL); json gives a row's object, as --json and tq serve's /api/ lists
 * show it; release frees what read gave.
 */
typedef struct cli_rows {
    size_t size;
    int (*read)(void **rows, size_t *n, tq *db, const void *arg);
    json_t *(*json)(const void *row);
    void (*release)(void *rows, size_t n);
} cli_rows;
extern const cli_rows cli_queue_rows, cli_worker_rows, cli_schedule_rows;
/*
 * How a listing command (tq list, queue, workers, cron) shows its rows:
 * with --json an array of each row's object; else a header line and a line
 * a row, or one line saying there are none.
 */
typedef struct cli_listing {
    const char *cmd;               /* the command, in its errors */
    const cli_rows *rows;          /* what it lists */
    void (*header)(void);          /* the line above the rows */
    void (*line)(const void *row); /* a row's line */
    const char *none;              /* the line for no rows */
} cli_listing;
/* Reads l's rows (picked by arg) from db and shows them, as JSON if json:
 * the exit code. */
int cli_list(tq *db, const cli_listing *l, const void *arg, int json);
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
/* Counts by state as an object keyed by the states' names. */
json_t *cli_counts_json(const int64_t count[TQ_STATE_COUNT]);
/* tq cron list --json's object for one schedule. */
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

/* The commands, each in tools/cmd/NAME.c, in tq.c's table. */
extern const cli_command cmd_init, cmd_queue, cmd_enqueue, cmd_work, cmd_stats, cmd_list,
    cmd_show, cmd_result, cmd_retry, cmd_cancel, cmd_prune, cmd_workers, cmd_cron,
    cmd_serve, cmd_bench, cmd_version;

#endif
