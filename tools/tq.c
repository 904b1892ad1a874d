/*
 * tq.c - the command-line tool: a thin layer over the public library.
 * Parses arguments, validates them before touching the store, prints
 * results (text or JSON) and maps failures to exit codes: 0 success,
 * 1 failure at run time, 2 bad usage or input. A rejected command changes
 * nothing in the store.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- shared helpers ----------------------------------------------------- */

void cli_error(const char *cmd, const char *fmt, ...)
{
    /* One write, so lines of concurrent processes do not interleave. */
    char line[2048];
    int n = snprintf(line, sizeof line, "tq%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
    fflush(stderr);
}

int cli_fail(const char *cmd, tq *db, int rc)
{
    cli_error(cmd, "%s", cli_reason(db, rc));
    return cli_exit_code(rc);
}

const char *cli_reason(tq *db, int rc)
{
    return db && *tq_errmsg(db) ? tq_errmsg(db) : tq_strerror(rc);
}

int cli_exit_code(int rc)
{
    return rc == TQ_EINVAL || rc == TQ_ETOOBIG ? EXIT_USAGE : EXIT_RUNTIME;
}

const char *cli_url(const char *given)
{
    if (given)
        return given;
    const char *env = getenv("TQ_DB");
    return env && *env ? env : "tq.db";
}

int cli_int(const char *cmd, const char *opt, const char *text, long long min,
            long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        cli_error(cmd, "invalid value '%s' for %s: expected an integer from %lld to %lld",
                  text, opt, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_duration(const char *cmd, const char *opt, const char *text, int64_t *out)
{
    if (tq_duration_parse(out, text)) {
        cli_error(cmd,
                  "invalid duration '%s' for %s: use e.g. 250ms, 30s, 5m, 2h, "
                  "7d or 1h30m",
                  text, opt);
        return -1;
    }
    return 0;
}

/* Opens the store; prints the failure and returns NULL on error. */
static tq *open_store(const char *cmd, const char *url, int create, int *exit_code)
{
    tq *db = NULL;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = create;
    int rc = tq_open(&db, url, &o);
    if (rc) {
        *exit_code = cli_fail(cmd, db, rc);
        tq_close(db);
        return NULL;
    }
    return db;
}

static int print_json(json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(v);
    if (!s)
        return EXIT_RUNTIME;
    puts(s);
    free(s);
    return 0;
}

/* Text from the store as a JSON string, always: jansson refuses invalid
 * UTF-8 (and the field would silently go missing), so such text is given
 * with its invalid bytes as \xNN. NULL text is null. */
static json_t *json_text(const char *s)
{
    if (!s)
        return json_null();
    json_t *j = json_string(s);
    if (j)
        return j;
    char *clean = tq_utf8_clean(s);
    j = clean ? json_string(clean) : NULL;
    free(clean);
    return j ? j : json_null();
}

static json_t *time_json(int64_t us)
{
    char buf[40];
    return us ? json_string(tq_time_format(buf, sizeof buf, us)) : json_null();
}

static char *base64(const unsigned char *p, size_t n)
{
    static const char tbl[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        *o++ = tbl[v >> 18 & 63];
        *o++ = tbl[v >> 12 & 63];
        *o++ = i + 1 < n ? tbl[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tbl[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static json_t *job_json(const tq_job *j, int with_payload)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(j->id));
    json_object_set_new(o, "queue", json_text(j->queue));
    json_object_set_new(o, "state", json_string(tq_state_name(j->state)));
    json_object_set_new(o, "priority", json_integer(j->priority));
    json_object_set_new(o, "attempts", json_integer(j->attempts));
    json_object_set_new(o, "max_attempts", json_integer(j->max_attempts));
    json_object_set_new(o, "claims", json_integer(j->claim));
    json_object_set_new(o, "key", json_text(j->key));
    json_object_set_new(o, "worker", json_text(j->worker));
    json_object_set_new(o, "last_error", json_text(j->last_error));
    json_object_set_new(o, "created_at", time_json(j->created_at));
    json_object_set_new(o, "run_at", time_json(j->run_at));
    json_object_set_new(o, "started_at", time_json(j->started_at));
    json_object_set_new(o, "finished_at", time_json(j->finished_at));
    json_object_set_new(o, "lease_until", time_json(j->lease_until));
    if (j->finished_at && j->started_at && j->state == TQ_DONE)
        json_object_set_new(o, "duration_us",
                            json_integer(j->finished_at - j->started_at));
    json_object_set_new(o, "payload_bytes", json_integer((json_int_t)j->payload_len));
    if (with_payload) {
        json_t *s = json_stringn((const char *)j->payload, j->payload_len);
        if (s) {
            json_object_set_new(o, "payload", s);
        } else { /* not UTF-8 */
            char *b = base64(j->payload, j->payload_len);
            json_object_set_new(o, "payload_base64", b ? json_string(b) : json_null());
            free(b);
        }
    }
    return o;
}

/* A one-line, printable preview of a payload. */
static void preview(char *buf, size_t len, const unsigned char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < len; i++)
        buf[k++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '.';
    if (n > 0 && k + 4 >= len)
        memcpy(buf + k - 3, "...", 3);
    buf[k] = '\0';
}

/* Options every command takes. */
#define COMMON_LONGOPTS                                                                  \
    {"db", required_argument, NULL, 'D'},                                                \
    {                                                                                    \
        "help", no_argument, NULL, 'h'                                                   \
    }

/* getopt returned '?' or ':': one line saying what was wrong. */
static int bad_option(const char *cmd, char **argv, int c)
{
    const char *arg = argv[optind - 1];
    if (c == ':')
        cli_error(cmd, "option '%s' needs a value (see tq %s --help)", arg, cmd);
    else
        cli_error(cmd, "unknown option '%s' (see tq %s --help)", arg, cmd);
    return EXIT_USAGE;
}

static int show_help(const char *usage, const char *text)
{
    printf("usage: %s\n%s", usage, text);
    return 0;
}

/* ---- tq init ------------------------------------------------------------ */

#define MAX_GRANTS 32

static int cmd_init(int argc, char **argv)
{
    static const char usage[] =
        "tq init [--grant-producer ROLE]... [--grant-worker ROLE]... [--db URL]";
    static const struct option lo[] = {{"grant-producer", required_argument, NULL, 'P'},
                                       {"grant-worker", required_argument, NULL, 'W'},
                                       COMMON_LONGOPTS,
                                       {0}};
    const char *url = NULL;
    tq_grant grants[MAX_GRANTS];
    size_t ngrants = 0;
    int c, ex = 0;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 'D') {
            url = optarg;
        } else if (c == 'P' || c == 'W') {
            if (ngrants == MAX_GRANTS) {
                cli_error("init", "at most %d grants at once", MAX_GRANTS);
                return EXIT_USAGE;
            }
            grants[ngrants++] =
                (tq_grant){optarg, c == 'W' ? TQ_GRANT_WORKER : TQ_GRANT_PRODUCER};
        } else if (c == 'h') {
            return show_help(
                usage,
                "Creates the tq schema in the store, or upgrades it. Safe to run again.\n"
                "PostgreSQL: --grant-producer ROLE lets ROLE enqueue and nothing else;\n"
                "--grant-worker ROLE lets ROLE run tq work, and not change queue "
                "settings\n"
                "or the schema. The schema and the grants are one transaction.\n");
        } else {
            return bad_option("init", argv, c);
        }
    }
    if (optind < argc) {
        cli_error("init", "unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    url = cli_url(url);
    if (ngrants && strncmp(url, "postgres://", 11) != 0 &&
        strncmp(url, "postgresql://", 13) != 0) {
        /* Before opening: opening a SQLite store that is not there creates it. */
        cli_error("init",
                  "--grant-producer and --grant-worker are for PostgreSQL stores: SQLite "
                  "has no roles (the file's permissions decide)");
        return EXIT_USAGE;
    }
    tq *db = open_store("init", url, 1, &ex);
    if (!db)
        return ex;
    int rc = tq_init_grants(db, grants, ngrants);
    if (rc)
        ex = cli_fail("init", db, rc);
    else
        printf("store ready: %s (%s, schema version %d)\n", tq_store_name(db),
               tq_engine_name(db), tq_schema_version());
    for (size_t i = 0; !rc && i < ngrants; i++)
        printf("granted to %s: %s\n", grants[i].role,
               grants[i].kind == TQ_GRANT_WORKER ? "worker" : "producer");
    tq_close(db);
    return ex;
}

/* ---- tq queue ------------------------------------------------------------- */

static void print_queue(const tq_queue_info *q)
{
    char l[24], b[24], cap[24];
    printf("%-24s %-9s lease=%-6s max_attempts=%-3d backoff=%s:%s %s%s\n", q->name,
           tq_order_name(q->order), tq_duration_format(l, sizeof l, q->lease_us),
           q->max_attempts, tq_duration_format(b, sizeof b, q->backoff_base_us),
           tq_duration_format(cap, sizeof cap, q->backoff_cap_us),
           q->keep_done ? "keep-done" : "delete-done", q->paused ? " paused" : "");
}

static json_t *queue_json(const tq_queue_info *q)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_text(q->name));
    json_object_set_new(o, "order", json_string(tq_order_name(q->order)));
    json_object_set_new(o, "lease_us", json_integer(q->lease_us));
    json_object_set_new(o, "max_attempts", json_integer(q->max_attempts));
    json_object_set_new(o, "backoff_base_us", json_integer(q->backoff_base_us));
    json_object_set_new(o, "backoff_cap_us", json_integer(q->backoff_cap_us));
    json_object_set_new(o, "keep_done", json_boolean(q->keep_done));
    json_object_set_new(o, "paused", json_boolean(q->paused));
    return o;
}

static int cmd_queue(int argc, char **argv)
{
    static const char usage[] =
        "tq queue [NAME [--order fifo|lifo|unordered] [--lease DUR] "
        "[--max-attempts N] [--backoff BASE[:CAP]] [--keep-done|--delete-done] "
        "[--pause|--resume]] [--json] [--db URL]";
    static const struct option lo[] = {COMMON_LONGOPTS,
                                       {"order", required_argument, NULL, 'o'},
                                       {"lease", required_argument, NULL, 'l'},
                                       {"max-attempts", required_argument, NULL, 'm'},
                                       {"backoff", required_argument, NULL, 'b'},
                                       {"keep-done", no_argument, NULL, 'k'},
                                       {"delete-done", no_argument, NULL, 'K'},
                                       {"pause", no_argument, NULL, 'p'},
                                       {"resume", no_argument, NULL, 'r'},
                                       {"json", no_argument, NULL, 'j'},
                                       {0}};
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    const char *url = NULL;
    int c, ex = 0, json = 0;
    long long n;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        switch (c) {
        case 'D':
            url = optarg;
            break;
        case 'h':
            return show_help(
                usage, "Without NAME, lists the queues. With NAME, creates the queue "
                       "(defaults: fifo,\nlease 30s, 3 attempts, backoff 1s:1h, keep "
                       "done rows) and applies the options.\n");
        case 'o':
            if (tq_order_parse(&qo.order, optarg)) {
                cli_error("queue", "unknown order '%s': use fifo, lifo or unordered",
                          optarg);
                return EXIT_USAGE;
            }
            qo.set |= TQ_SET_ORDER;
            break;
        case 'l':
            if (cli_duration("queue", "--lease", optarg, &qo.lease_us))
                return EXIT_USAGE;
            qo.set |= TQ_SET_LEASE;
            break;
        case 'm':
            if (cli_int("queue", "--max-attempts", optarg, 1, 1000, &n))
                return EXIT_USAGE;
            qo.max_attempts = (int)n;
            qo.set |= TQ_SET_MAX_ATTEMPTS;
            break;
        case 'b': {
            char base[64];
            const char *colon = strchr(optarg, ':');
            size_t bl = colon ? (size_t)(colon - optarg) : strlen(optarg);
            if (bl >= sizeof base) {
                cli_error("queue", "invalid backoff '%s'", optarg);
                return EXIT_USAGE;
            }
            memcpy(base, optarg, bl);
            base[bl] = '\0';
            if (cli_duration("queue", "--backoff", base, &qo.backoff_base_us))
                return EXIT_USAGE;
            qo.backoff_cap_us = 3600 * 1000000LL;
            if (colon &&
                cli_duration("queue", "--backoff cap", colon + 1, &qo.backoff_cap_us))
                return EXIT_USAGE;
            if (!colon && qo.backoff_base_us > qo.backoff_cap_us)
                qo.backoff_cap_us = qo.backoff_base_us;
            qo.set |= TQ_SET_BACKOFF;
            break;
        }
        case 'k':
        case 'K':
            qo.keep_done = c == 'k';
            qo.set |= TQ_SET_KEEP_DONE;
            break;
        case 'p':
        case 'r':
            qo.paused = c == 'p';
            qo.set |= TQ_SET_PAUSED;
            break;
        case 'j':
            json = 1;
            break;
        default:
            return bad_option("queue", argv, c);
        }
    }
    if (argc - optind > 1) {
        cli_error("queue", "unexpected argument '%s'", argv[optind + 1]);
        return EXIT_USAGE;
    }
    const char *name = optind < argc ? argv[optind] : NULL;
    if (!name && qo.set) {
        cli_error("queue", "settings need a queue NAME");
        return EXIT_USAGE;
    }
    if (name && tq_name_check(name)) {
        cli_error("queue",
                  "invalid queue name '%s': use 1 to 64 letters, digits, "
                  "'_', '.' or '-'",
                  name);
        return EXIT_USAGE;
    }
    tq *db = open_store("queue", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    int rc;
    if (name) {
        tq_queue_info q;
        if ((rc = tq_queue_set(db, name, &qo)) || (rc = tq_queue_get(&q, db, name)))
            ex = cli_fail("queue", db, rc);
        else if (json)
            ex = print_json(queue_json(&q));
        else
            print_queue(&q);
    } else {
        tq_queue_info *v;
        size_t nq;
        if ((rc = tq_queue_list(&v, &nq, db))) {
            ex = cli_fail("queue", db, rc);
        } else if (json) {
            json_t *a = json_array();
            for (size_t i = 0; i < nq; i++)
                json_array_append_new(a, queue_json(&v[i]));
            ex = print_json(a);
        } else {
            for (size_t i = 0; i < nq; i++)
                print_queue(&v[i]);
            if (nq == 0)
                printf("no queues yet\n");
        }
        if (!rc)
            tq_free(v);
    }
    tq_close(db);
    return ex;
}

/* ---- tq enqueue ----------------------------------------------------------- */

/* Reads all of stdin, up to max bytes (one more is an error). */
static int read_stdin(const char *cmd, unsigned char **out, size_t *out_len, size_t max)
{
    size_t cap = 65536, n = 0;
    unsigned char *buf = malloc(cap);
    if (!buf)
        return EXIT_RUNTIME;
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return EXIT_RUNTIME;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (n > max) {
            cli_error(cmd, "payload on stdin is over the limit of %zu bytes", max);
            free(buf);
            return EXIT_USAGE;
        }
        if (r == 0)
            break;
    }
    if (ferror(stdin)) {
        cli_error(cmd, "reading stdin: %s", strerror(errno));
        free(buf);
        return EXIT_RUNTIME;
    }
    *out = buf;
    *out_len = n;
    return 0;
}

/* --lines: one job per line, in transactions of `batch` jobs. */
static int enqueue_lines(tq *db, const char *queue, const tq_enqueue_opts *eo)
{
    enum { BATCH = 1000 };
    tq_payload items[BATCH];
    char *lines[BATCH];
    size_t n = 0, total = 0;
    int64_t first = 0, last = 0, ids[BATCH];
    cli_lines in = {.in = stdin};
    int ex = 0, tty = isatty(2);

    for (;;) {
        char *line;
        size_t len;
        int more = cli_lines_next(&in, &line, &len);
        if (more < 0) {
            cli_error("enqueue", "reading stdin: %s; %zu jobs were enqueued before it",
                      strerror(errno), total);
            ex = EXIT_RUNTIME;
            break;
        }
        if (more) {
            if (len > TQ_PAYLOAD_MAX_DEFAULT) {
                cli_error("enqueue",
                          "line %zu is over the payload limit of %d bytes; "
                          "%zu jobs were enqueued before it",
                          in.lineno, TQ_PAYLOAD_MAX_DEFAULT, total);
                ex = EXIT_USAGE;
                break;
            }
            if (!(lines[n] = malloc(len + 1))) {
                ex = EXIT_RUNTIME;
                break;
            }
            memcpy(lines[n], line, len + 1);
            items[n].data = lines[n];
            items[n].len = len;
            n++;
        }
        if (n == BATCH || (!more && n > 0)) {
            int rc = tq_job_enqueue_batch(ids, db, queue, items, n, eo);
            for (size_t i = 0; i < n; i++)
                free(lines[i]);
            if (rc) {
                cli_error("enqueue", "%s; %zu job(s) were enqueued before the failure",
                          cli_reason(db, rc), total);
                ex = cli_exit_code(rc);
                n = 0;
                break;
            }
            if (!first)
                first = ids[0];
            last = ids[n - 1];
            total += n;
            n = 0;
            if (tty)
                fprintf(stderr, "\renqueued %zu jobs", total);
        }
        if (!more)
            break;
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    cli_lines_free(&in);
    if (tty && total)
        fputc('\n', stderr);
    if (!ex) {
        if (total)
            printf("enqueued %zu jobs, ids %lld..%lld\n", total, (long long)first,
                   (long long)last);
        else
            printf("enqueued 0 jobs\n");
    }
    return ex;
}

static int cmd_enqueue(int argc, char **argv)
{
    static const char usage[] =
        "tq enqueue [--queue Q] [--key K] [--delay DUR | --at TIME] [--priority N] "
        "[--max-attempts N] (PAYLOAD | - | --lines) [--db URL]";
    static const struct option lo[] = {COMMON_LONGOPTS,
                                       {"queue", required_argument, NULL, 'q'},
                                       {"key", required_argument, NULL, 'k'},
                                       {"delay", required_argument, NULL, 'd'},
                                       {"at", required_argument, NULL, 'a'},
                                       {"priority", required_argument, NULL, 'p'},
                                       {"max-attempts", required_argument, NULL, 'm'},
                                       {"lines", no_argument, NULL, 'L'},
                                       {0}};
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    const char *url = NULL, *queue = "default";
    int c, ex = 0, lines = 0, has_delay = 0;
    long long n;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        switch (c) {
        case 'D':
            url = optarg;
            break;
        case 'h':
            return show_help(
                usage, "Adds a job and prints its id. PAYLOAD '-' reads the payload "
                       "from stdin;\n--lines reads one job per line. A duplicate "
                       "--key prints the kept job's id.\nTIME is "
                       "YYYY-MM-DDTHH:MM[:SS][Z|+HH:MM] or @UNIXSECONDS.\n");
        case 'q':
            queue = optarg;
            break;
        case 'k':
            eo.key = optarg;
            break;
        case 'd':
            if (cli_duration("enqueue", "--delay", optarg, &eo.delay_us))
                return EXIT_USAGE;
            has_delay = 1;
            break;
        case 'a':
            if (tq_time_parse(&eo.run_at, optarg)) {
                cli_error("enqueue",
                          "invalid time '%s' for --at: use YYYY-MM-DDTHH:MM[:SS][Z] "
                          "or @UNIXSECONDS, from 1970 to 9999",
                          optarg);
                return EXIT_USAGE;
            }
            break;
        case 'p':
            if (cli_int("enqueue", "--priority", optarg, -1000000, 1000000, &n))
                return EXIT_USAGE;
            eo.priority = (int)n;
            break;
        case 'm':
            if (cli_int("enqueue", "--max-attempts", optarg, 1, 1000, &n))
                return EXIT_USAGE;
            eo.max_attempts = (int)n;
            break;
        case 'L':
            lines = 1;
            break;
        default:
            return bad_option("enqueue", argv, c);
        }
    }
    if (has_delay && eo.run_at) {
        cli_error("enqueue", "--delay and --at cannot be used together");
        return EXIT_USAGE;
    }
    if (tq_name_check(queue)) {
        cli_error("enqueue",
                  "invalid queue name '%s': use 1 to 64 letters, digits, "
                  "'_', '.' or '-'",
                  queue);
        return EXIT_USAGE;
    }
    if (eo.key && (strlen(eo.key) < 1 || strlen(eo.key) > 255)) {
        cli_error("enqueue", "the key must be 1 to 255 bytes");
        return EXIT_USAGE;
    }
    if (lines ? optind != argc : optind != argc - 1) {
        cli_error("enqueue", lines ? "--lines takes no PAYLOAD argument"
                                   : "expected one PAYLOAD argument (or - for stdin)");
        return EXIT_USAGE;
    }
    if (lines && eo.key) {
        cli_error("enqueue", "--key cannot be used with --lines");
        return EXIT_USAGE;
    }

    unsigned char *payload = NULL;
    size_t len = 0;
    if (!lines) {
        const char *arg = argv[optind];
        if (strcmp(arg, "-") == 0) {
            if ((ex = read_stdin("enqueue", &payload, &len, TQ_PAYLOAD_MAX_DEFAULT)))
                return ex;
        } else {
            len = strlen(arg);
            if (len > TQ_PAYLOAD_MAX_DEFAULT) {
                cli_error("enqueue", "payload of %zu bytes is over the limit of %d bytes",
                          len, TQ_PAYLOAD_MAX_DEFAULT);
                return EXIT_USAGE;
            }
        }
    }
    tq *db = open_store("enqueue", cli_url(url), 0, &ex);
    if (!db) {
        free(payload);
        return ex;
    }
    if (lines) {
        ex = enqueue_lines(db, queue, &eo);
    } else {
        int64_t id = 0;
        const void *data = payload ? (const void *)payload : argv[optind];
        int rc = tq_job_enqueue(&id, db, queue, data, len, &eo);
        if (rc == TQ_DUP) {
            printf("%lld\n", (long long)id);
            fprintf(stderr, "tq enqueue: duplicate key '%s': job %lld was kept\n", eo.key,
                    (long long)id);
        } else if (rc) {
            ex = cli_fail("enqueue", db, rc);
        } else {
            printf("%lld\n", (long long)id);
        }
    }
    free(payload);
    tq_close(db);
    return ex;
}

/* ---- tq work -------------------------------------------------------------- */

static tq_worker *volatile the_worker;

static void on_stop_signal(int sig)
{
    (void)sig;
    tq_worker *w = the_worker;
    if (w)
        tq_worker_stop(w);
}

static int log_level = TQ_LOG_INFO;

static void work_log(void *ud, int level, const char *msg)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    struct timespec ts;
    char t[40];
    if (level > log_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    tq_time_format(t, sizeof t, (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
    fprintf(stderr, "%s %s %s: %s\n", t, (const char *)ud, names[level], msg);
}

/* Whether argv0 can be run: a path that is executable, or found in PATH. */
static int command_exists(const char *argv0)
{
    if (strchr(argv0, '/'))
        return access(argv0, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    char buf[4096];
    for (const char *p = path;;) {
        const char *e = strchr(p, ':');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf, sizeof buf, "%.*s/%s", (int)l, l ? p : ".", argv0);
        struct stat st;
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
            return 1;
        if (!e)
            return 0;
        p = e + 1;
    }
}

static int cmd_work(int argc, char **argv)
{
    static const char usage[] =
        "tq work [--queue Q]... [--concurrency N] [--prefetch N] [--name WORKER] "
        "[--drain] [--timeout DUR] [--grace DUR] [--poll DUR] [--verbose|--quiet] "
        "[--db URL] "
        "-- COMMAND [ARG...]";
    static const struct option lo[] = {COMMON_LONGOPTS,
                                       {"queue", required_argument, NULL, 'q'},
                                       {"concurrency", required_argument, NULL, 'c'},
                                       {"prefetch", required_argument, NULL, 'p'},
                                       {"name", required_argument, NULL, 'n'},
                                       {"drain", no_argument, NULL, 'd'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"grace", required_argument, NULL, 'g'},
                                       {"poll", required_argument, NULL, 'P'},
                                       {"verbose", no_argument, NULL, 'v'},
                                       {"quiet", no_argument, NULL, 'Q'},
                                       {0}};
    tq_worker_opts wo = TQ_WORKER_OPTS_INIT;
    const char *url = NULL;
    const char *queues[64];
    size_t nq = 0;
    long long n;
    int c, ex = 0;
    wo.concurrency = 1;
    while ((c = getopt_long(argc, argv, "+:", lo, NULL)) != -1) {
        switch (c) {
        case 'D':
            url = optarg;
            break;
        case 'h':
            return show_help(
                usage,
                "Runs COMMAND (no shell) once per job: payload on stdin, TQ_JOB_ID,\n"
                "TQ_QUEUE and TQ_ATTEMPT in the environment. Exit 0 is done; anything\n"
                "else, a signal or the --timeout (SIGTERM, then SIGKILL after --grace)\n"
                "is a failure. --drain exits once nothing is ready or running.\n"
                "SIGTERM/SIGINT: stop claiming, let running jobs finish within --grace\n"
                "(default 10s), then kill them and put their jobs back.\n"
                "--prefetch N: claim up to N jobs ahead of free slots when jobs are\n"
                "short (about 20 ms of work; default 2048, 0: none).\n");
        case 'q':
            if (nq == 64) {
                cli_error("work", "at most 64 queues");
                return EXIT_USAGE;
            }
            if (tq_name_check(optarg)) {
                cli_error("work",
                          "invalid queue name '%s': use 1 to 64 letters, digits, "
                          "'_', '.' or '-'",
                          optarg);
                return EXIT_USAGE;
            }
            queues[nq++] = optarg;
            break;
        case 'c':
            if (cli_int("work", "--concurrency", optarg, 1, TQ_CONCURRENCY_MAX, &n))
                return EXIT_USAGE;
            wo.concurrency = (int)n;
            break;
        case 'p':
            if (cli_int("work", "--prefetch", optarg, 0, 65536, &n))
                return EXIT_USAGE;
            wo.prefetch = n ? (int)n : -1;
            break;
        case 'n':
            wo.name = optarg;
            break;
        case 'd':
            wo.drain = 1;
            break;
        case 't':
            if (cli_duration("work", "--timeout", optarg, &wo.timeout_us))
                return EXIT_USAGE;
            break;
        case 'g':
            if (cli_duration("work", "--grace", optarg, &wo.grace_us))
                return EXIT_USAGE;
            if (wo.grace_us == 0) /* none, as said: the library's 0 is its default */
                wo.grace_us = 1;
            break;
        case 'P':
            if (cli_duration("work", "--poll", optarg, &wo.poll_max_us))
                return EXIT_USAGE;
            if (wo.poll_max_us == 0) {
                cli_error("work",
                          "--poll 0 would poll without a pause: give at least 1ms");
                return EXIT_USAGE;
            }
            break;
        case 'v':
            log_level = TQ_LOG_DEBUG;
            break;
        case 'Q':
            log_level = TQ_LOG_WARN;
            break;
        default:
            return bad_option("work", argv, c);
        }
    }
    if (optind >= argc) {
        cli_error("work", "no COMMAND given: tq work [options] -- COMMAND [ARG...]");
        return EXIT_USAGE;
    }
    if (!command_exists(argv[optind])) {
        cli_error("work", "command '%s' not found or not executable", argv[optind]);
        return EXIT_USAGE;
    }
    if (wo.name && (strlen(wo.name) < 1 || strlen(wo.name) > 127)) {
        cli_error("work", "--name must be 1 to 127 bytes");
        return EXIT_USAGE;
    }
    wo.queues = nq ? queues : NULL;
    wo.nqueues = nq;
    wo.argv = (const char *const *)&argv[optind];
    wo.log = work_log;
    /* The default name, as the library would make it, so logs can show it. */
    char name[128];
    if (!wo.name) {
        char host[100] = "localhost";
        gethostname(host, sizeof host - 1);
        snprintf(name, sizeof name, "%s:%ld", host, (long)getpid());
        wo.name = name;
    } else {
        snprintf(name, sizeof name, "%s", wo.name);
    }
    wo.log_ud = name;

    tq *db = open_store("work", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    tq_worker *w = NULL;
    int rc = tq_worker_new(&w, db, &wo);
    if (rc) {
        ex = cli_fail("work", db, rc);
        tq_close(db);
        return ex;
    }
    the_worker = w;
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    work_log(name, TQ_LOG_INFO, "started");
    rc = tq_worker_run(w);
    the_worker = NULL;
    tq_worker_counters k;
    tq_worker_counters_get(&k, w);
    if (rc)
        ex = cli_fail("work", db, rc);
    char msg[256];
    snprintf(msg, sizeof msg,
             "stopped: %lld claimed, %lld done, %lld failed, %lld released, %lld lost",
             (long long)k.claimed, (long long)k.done, (long long)k.failed,
             (long long)k.released, (long long)k.lost);
    work_log(name, TQ_LOG_INFO, msg);
    tq_worker_free(w);
    tq_close(db);
    return ex;
}

/* ---- tq stats ------------------------------------------------------------- */

static int cmd_stats(int argc, char **argv)
{
    static const char usage[] = "tq stats [--queue Q] [--json] [--db URL]";
    static const struct option lo[] = {COMMON_LONGOPTS,
                                       {"queue", required_argument, NULL, 'q'},
                                       {"json", no_argument, NULL, 'j'},
                                       {0}};
    const char *url = NULL, *queue = NULL;
    int c, ex = 0, json = 0;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 'D')
            url = optarg;
        else if (c == 'q')
            queue = optarg;
        else if (c == 'j')
            json = 1;
        else if (c == 'h')
            return show_help(
                usage, "Counts by state, age of the oldest ready job, jobs done in "
                       "the last minute,\ndurations of the last 1000 done jobs, and "
                       "the longest-running jobs.\n");
        else
            return bad_option("stats", argv, c);
    }
    if (optind < argc) {
        cli_error("stats", "unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    if (queue && tq_name_check(queue)) {
        cli_error("stats", "invalid queue name '%s'", queue);
        return EXIT_USAGE;
    }
    tq *db = open_store("stats", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    tq_stats st;
    int rc = tq_stats_get(&st, db, queue);
    if (rc) {
        ex = cli_fail("stats", db, rc);
    } else if (json) {
        json_t *o = json_object(), *counts = json_object(), *longest = json_array();
        json_object_set_new(o, "queue", queue ? json_string(queue) : json_null());
        for (int i = 0; i < TQ_STATE_COUNT; i++)
            json_object_set_new(counts, tq_state_name((tq_state)i),
                                json_integer(st.count[i]));
        json_object_set_new(o, "counts", counts);
        json_object_set_new(o, "oldest_ready_age_us",
                            json_integer(st.oldest_ready_age_us));
        json_object_set_new(o, "done_last_minute", json_integer(st.done_last_minute));
        json_object_set_new(o, "recent_done", json_integer((json_int_t)st.recent));
        json_object_set_new(o, "duration_p50_us", json_integer(st.p50_us));
        json_object_set_new(o, "duration_p95_us", json_integer(st.p95_us));
        json_object_set_new(o, "duration_max_us", json_integer(st.max_us));
        for (size_t i = 0; i < st.nlongest; i++) {
            json_t *l = json_object();
            json_object_set_new(l, "id", json_integer(st.longest[i].id));
            json_object_set_new(l, "worker", json_text(st.longest[i].worker));
            json_object_set_new(l, "running_us", json_integer(st.longest[i].running_us));
            json_array_append_new(longest, l);
        }
        json_object_set_new(o, "longest_running", longest);
        ex = print_json(o);
    } else {
        char a[24], b[24], d[24], e[24];
        printf("queue:     %s\n", queue ? queue : "(all)");
        for (int i = 0; i < TQ_STATE_COUNT; i++)
            printf("%-10s %lld\n", tq_state_name((tq_state)i), (long long)st.count[i]);
        printf("oldest ready: %s\n",
               tq_duration_format(a, sizeof a, st.oldest_ready_age_us));
        printf("done in the last minute: %lld\n", (long long)st.done_last_minute);
        printf("durations of the last %zu done: p50 %s  p95 %s  max %s\n", st.recent,
               tq_duration_format(b, sizeof b, st.p50_us),
               tq_duration_format(d, sizeof d, st.p95_us),
               tq_duration_format(e, sizeof e, st.max_us));
        for (size_t i = 0; i < st.nlongest; i++)
            printf("running longest: job %lld on %s for %s\n",
                   (long long)st.longest[i].id, st.longest[i].worker,
                   tq_duration_format(a, sizeof a, st.longest[i].running_us));
    }
    tq_close(db);
    return ex;
}

/* ---- tq list / show --------------------------------------------------------- */

/* Text from the store, for a terminal (tq_text_printable): what a handler
 * or a plain-SQL writer put there cannot move the cursor, retitle the
 * terminal or fake a line of output. */
static void put_text(const char *s)
{
    char *p = tq_text_printable(s);
    fputs(p ? p : "(out of memory)", stdout);
    free(p);
}

static void print_job_line(const tq_job *j)
{
    char pv[41], t[40];
    preview(pv, sizeof pv, j->payload, j->payload_len);
    printf("%-8lld %-16s %-9s %d/%-3d %-24s %s", (long long)j->id, j->queue,
           tq_state_name(j->state), j->attempts, j->max_attempts,
           tq_time_format(t, sizeof t, j->created_at), pv);
    if (j->last_error) {
        fputs("  error: ", stdout);
        put_text(j->last_error);
    }
    putchar('\n');
}

static int cmd_list(int argc, char **argv)
{
    static const char usage[] =
        "tq list [--state S] [--queue Q] [--limit N] [--json] [--db URL]";
    static const struct option lo[] = {COMMON_LONGOPTS,
                                       {"state", required_argument, NULL, 's'},
                                       {"queue", required_argument, NULL, 'q'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"json", no_argument, NULL, 'j'},
                                       {0}};
    tq_list_opts lo2 = TQ_LIST_OPTS_INIT;
    const char *url = NULL;
    int c, ex = 0, json = 0;
    long long n;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        switch (c) {
        case 'D':
            url = optarg;
            break;
        case 'h':
            return show_help(usage, "Lists jobs, newest first (default limit 100).\n");
        case 's': {
            tq_state st;
            if (tq_state_parse(&st, optarg)) {
                cli_error("list",
                          "unknown state '%s': use ready, running, done, dead "
                          "or cancelled",
                          optarg);
                return EXIT_USAGE;
            }
            lo2.state = (int)st;
            break;
        }
        case 'q':
            if (tq_name_check(optarg)) {
                cli_error("list", "invalid queue name '%s'", optarg);
                return EXIT_USAGE;
            }
            lo2.queue = optarg;
            break;
        case 'n':
            if (cli_int("list", "--limit", optarg, 1, 1000000, &n))
                return EXIT_USAGE;
            lo2.limit = (size_t)n;
            break;
        case 'j':
            json = 1;
            break;
        default:
            return bad_option("list", argv, c);
        }
    }
    if (optind < argc) {
        cli_error("list", "unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    tq *db = open_store("list", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    tq_job *jobs;
    size_t nj;
    int rc = tq_job_list(&jobs, &nj, db, &lo2);
    if (rc) {
        ex = cli_fail("list", db, rc);
    } else {
        if (json) {
            json_t *a = json_array();
            for (size_t i = 0; i < nj; i++)
                json_array_append_new(a, job_json(&jobs[i], 1));
            ex = print_json(a);
        } else {
            for (size_t i = 0; i < nj; i++)
                print_job_line(&jobs[i]);
        }
        tq_job_array_free(jobs, nj);
    }
    tq_close(db);
    return ex;
}

/* Parses a job id argument; prints a usage error on failure. */
static int parse_id(const char *cmd, const char *text, int64_t *out)
{
    long long v;
    if (cli_int(cmd, "job id", text, 1, INT64_MAX, &v))
        return -1;
    *out = v;
    return 0;
}

static int cmd_show(int argc, char **argv)
{
    static const char usage[] = "tq show ID [--json] [--db URL]";
    static const struct option lo[] = {
        COMMON_LONGOPTS, {"json", no_argument, NULL, 'j'}, {0}};
    const char *url = NULL;
    int c, ex = 0, json = 0;
    int64_t id;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 'D')
            url = optarg;
        else if (c == 'j')
            json = 1;
        else if (c == 'h')
            return show_help(usage, "Shows one job with its payload.\n");
        else
            return bad_option("show", argv, c);
    }
    if (optind != argc - 1) {
        cli_error("show", "expected one job ID");
        return EXIT_USAGE;
    }
    if (parse_id("show", argv[optind], &id))
        return EXIT_USAGE;
    tq *db = open_store("show", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    tq_job *j;
    int rc = tq_job_get(&j, db, id);
    if (rc) {
        ex = cli_fail("show", db, rc);
    } else if (json) {
        ex = print_json(job_json(j, 1));
        tq_job_free(j);
    } else {
        char t[40], d[24];
        printf("id:           %lld\nqueue:        %s\nstate:        %s\n",
               (long long)j->id, j->queue, tq_state_name(j->state));
        printf("priority:     %d\nattempts:     %d of %d\nclaims:       %lld\n",
               j->priority, j->attempts, j->max_attempts, (long long)j->claim);
        if (j->key) {
            fputs("key:          ", stdout);
            put_text(j->key);
            putchar('\n');
        }
        printf("created:      %s\n", tq_time_format(t, sizeof t, j->created_at));
        printf("run at:       %s\n", tq_time_format(t, sizeof t, j->run_at));
        if (j->started_at)
            printf("started:      %s\n", tq_time_format(t, sizeof t, j->started_at));
        if (j->finished_at)
            printf("finished:     %s\n", tq_time_format(t, sizeof t, j->finished_at));
        if (j->finished_at && j->started_at && j->state == TQ_DONE)
            printf("duration:     %s\n",
                   tq_duration_format(d, sizeof d, j->finished_at - j->started_at));
        if (j->lease_until)
            printf("lease until:  %s\n", tq_time_format(t, sizeof t, j->lease_until));
        if (j->worker) {
            fputs("worker:       ", stdout);
            put_text(j->worker);
            putchar('\n');
        }
        if (j->last_error) {
            fputs("last error:   ", stdout);
            put_text(j->last_error);
            putchar('\n');
        }
        printf("payload:      %zu bytes\n", j->payload_len);
        fwrite(j->payload, 1, j->payload_len, stdout);
        if (j->payload_len && j->payload[j->payload_len - 1] != '\n')
            putchar('\n');
        tq_job_free(j);
    }
    tq_close(db);
    return ex;
}

/* ---- tq retry / cancel / prune ------------------------------------------ */

static int cmd_retry_cancel(int argc, char **argv, int cancel)
{
    const char *cmd = cancel ? "cancel" : "retry";
    const char *usage = cancel ? "tq cancel ID... [--db URL]"
                               : "tq retry (ID... | --dead [--queue Q]) [--db URL]";
    static const struct option lo[] = {COMMON_LONGOPTS,
                                       {"dead", no_argument, NULL, 'd'},
                                       {"queue", required_argument, NULL, 'q'},
                                       {0}};
    const char *url = NULL, *queue = NULL;
    int c, ex = 0, dead = 0;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 'D')
            url = optarg;
        else if (c == 'd' && !cancel)
            dead = 1;
        else if (c == 'q' && !cancel)
            queue = optarg;
        else if (c == 'h')
            return show_help(usage, cancel ? "Cancels ready or running jobs.\n"
                                           : "Puts dead or cancelled jobs back to ready "
                                             "with their attempts reset.\n");
        else
            return bad_option(cmd, argv, c);
    }
    if (queue && !dead) {
        cli_error(cmd, "--queue only goes with --dead");
        return EXIT_USAGE;
    }
    if (queue && tq_name_check(queue)) {
        cli_error(cmd, "invalid queue name '%s'", queue);
        return EXIT_USAGE;
    }
    if (dead == (optind < argc)) {
        cli_error(cmd, dead ? "--dead takes no job IDs" : "expected one or more job IDs");
        return EXIT_USAGE;
    }
    int64_t ids[argc > 0 ? argc : 1];
    int nids = 0;
    for (int i = optind; i < argc; i++)
        if (parse_id(cmd, argv[i], &ids[nids++]))
            return EXIT_USAGE;
    tq *db = open_store(cmd, cli_url(url), 0, &ex);
    if (!db)
        return ex;
    if (dead) {
        int64_t n = 0;
        int rc = tq_job_retry_dead(&n, db, queue);
        if (rc)
            ex = cli_fail(cmd, db, rc);
        else
            printf("%lld dead job(s) back to ready\n", (long long)n);
    }
    for (int i = 0; i < nids; i++) {
        int rc = cancel ? tq_job_cancel(db, ids[i]) : tq_job_retry(db, ids[i]);
        if (rc)
            ex = cli_fail(cmd, db, rc);
        else
            printf("%lld %s\n", (long long)ids[i], cancel ? "cancelled" : "ready");
    }
    tq_close(db);
    return ex;
}

static int cmd_prune(int argc, char **argv)
{
    static const char usage[] =
        "tq prune --older-than DUR [--state done|dead|cancelled]... [--db URL]";
    static const struct option lo[] = {COMMON_LONGOPTS,
                                       {"older-than", required_argument, NULL, 'o'},
                                       {"state", required_argument, NULL, 's'},
                                       {0}};
    const char *url = NULL;
    int c, ex = 0, have_age = 0;
    int64_t age = 0;
    unsigned mask = 0;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        switch (c) {
        case 'D':
            url = optarg;
            break;
        case 'h':
            return show_help(usage, "Deletes finished jobs (default: done, dead and "
                                    "cancelled) that finished before now - DUR.\n");
        case 'o':
            if (cli_duration("prune", "--older-than", optarg, &age))
                return EXIT_USAGE;
            have_age = 1;
            break;
        case 's': {
            tq_state st;
            if (tq_state_parse(&st, optarg) ||
                (st != TQ_DONE && st != TQ_DEAD && st != TQ_CANCELLED)) {
                cli_error("prune", "invalid state '%s': use done, dead or cancelled",
                          optarg);
                return EXIT_USAGE;
            }
            mask |= 1u << st;
            break;
        }
        default:
            return bad_option("prune", argv, c);
        }
    }
    if (!have_age) {
        cli_error("prune", "--older-than DUR is required");
        return EXIT_USAGE;
    }
    if (optind < argc) {
        cli_error("prune", "unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    if (!mask)
        mask = (1u << TQ_DONE) | (1u << TQ_DEAD) | (1u << TQ_CANCELLED);
    tq *db = open_store("prune", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    int64_t n = 0;
    int rc = tq_job_prune(&n, db, age, mask);
    if (rc)
        ex = cli_fail("prune", db, rc);
    else
        printf("pruned %lld job(s)\n", (long long)n);
    tq_close(db);
    return ex;
}

/* ---- tq workers ------------------------------------------------------------- */

static int cmd_workers(int argc, char **argv)
{
    static const char usage[] = "tq workers [--json] [--db URL]";
    static const struct option lo[] = {
        COMMON_LONGOPTS, {"json", no_argument, NULL, 'j'}, {0}};
    const char *url = NULL;
    int c, ex = 0, json = 0;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (c == 'D')
            url = optarg;
        else if (c == 'j')
            json = 1;
        else if (c == 'h')
            return show_help(usage,
                             "Lists registered workers: alive, stopped or gone.\n");
        else
            return bad_option("workers", argv, c);
    }
    if (optind < argc) {
        cli_error("workers", "unexpected argument '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    tq *db = open_store("workers", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    tq_worker_info *v;
    size_t n;
    int rc = tq_worker_list(&v, &n, db);
    if (rc) {
        ex = cli_fail("workers", db, rc);
    } else {
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) {
            const char *status = v[i].alive        ? "alive"
                                 : v[i].stopped_at ? "stopped"
                                                   : "gone";
            char t1[40], t2[40];
            if (json) {
                json_t *o = json_object();
                json_object_set_new(o, "name", json_text(v[i].name));
                json_object_set_new(o, "host", json_text(v[i].host));
                json_object_set_new(o, "pid", json_integer(v[i].pid));
                json_object_set_new(o, "status", json_string(status));
                json_object_set_new(o, "started_at", time_json(v[i].started_at));
                json_object_set_new(o, "heartbeat_at", time_json(v[i].heartbeat_at));
                json_object_set_new(o, "stopped_at", time_json(v[i].stopped_at));
                json_array_append_new(a, o);
            } else {
                printf("%-32s %-7s pid %-7lld started %s  heartbeat %s\n", v[i].name,
                       status, (long long)v[i].pid,
                       tq_time_format(t1, sizeof t1, v[i].started_at),
                       tq_time_format(t2, sizeof t2, v[i].heartbeat_at));
            }
        }
        if (json)
            ex = print_json(a);
        else
            json_decref(a);
        tq_free(v);
    }
    tq_close(db);
    return ex;
}

/* ---- main ------------------------------------------------------------------ */

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} commands[] = {
    {"init", cmd_init, "create or upgrade the schema"},
    {"queue", cmd_queue, "list queues, or create or change one"},
    {"enqueue", cmd_enqueue, "add a job (or one per line with --lines)"},
    {"work", cmd_work, "run a command for each job"},
    {"stats", cmd_stats, "counts, ages and durations"},
    {"list", cmd_list, "list jobs"},
    {"show", cmd_show, "show one job"},
    {"retry", NULL, "put dead or cancelled jobs back to ready"},
    {"cancel", NULL, "cancel ready or running jobs"},
    {"prune", cmd_prune, "delete old finished jobs"},
    {"workers", cmd_workers, "list registered workers"},
    {"bench", cmd_bench, "enqueue and process N jobs, check each ran once"},
};

static int usage_main(FILE *f)
{
    fprintf(f,
            "usage: tq [--db URL] COMMAND [OPTIONS]\n\n"
            "A job queue that lives in a SQL table. The store is --db URL, else $TQ_DB,\n"
            "else ./tq.db: a SQLite file path, sqlite:PATH, or postgres://...\n\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "\n'tq COMMAND --help' describes each.\n");
    return f == stdout ? 0 : EXIT_USAGE;
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
        if (strcmp(argv[i], "--db") == 0 && i + 1 < argc) {
            db_before = argv[i + 1];
            i += 2;
        } else if (strncmp(argv[i], "--db=", 5) == 0) {
            db_before = argv[i] + 5;
            i++;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            return usage_main(stdout);
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("tq %s\n", TQ_VERSION);
            return 0;
        } else {
            cli_error(NULL, "unknown option '%s' (see tq --help)", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (i >= argc)
        return usage_main(stderr);
    if (db_before)
        setenv("TQ_DB", db_before, 1);
    const char *name = argv[i];
    if (strcmp(name, "help") == 0)
        return usage_main(stdout);
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
        if (strcmp(name, commands[k].name) != 0)
            continue;
        int sub_argc = argc - i;
        char **sub_argv = argv + i;
        optind = 1;
        opterr = 0;
        if (strcmp(name, "retry") == 0)
            return cmd_retry_cancel(sub_argc, sub_argv, 0);
        if (strcmp(name, "cancel") == 0)
            return cmd_retry_cancel(sub_argc, sub_argv, 1);
        return commands[k].fn(sub_argc, sub_argv);
    }
    cli_error(NULL, "unknown command '%s' (see tq --help)", name);
    return EXIT_USAGE;
}
