/*
 * tq.c - the command-line tool: a thin layer over the public library.
 * main() and the commands on the store (init, queue, enqueue, stats, list,
 * show, retry, cancel, prune, workers); tq work and tq bench have files of
 * their own, and what all of them share is cli.c. Each command parses its
 * arguments, validates them before touching the store, prints results
 * (text or JSON) and maps failures to exit codes: 0 success, 1 failure at
 * run time, 2 bad usage or input. A rejected command changes nothing in
 * the store.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- tq init ------------------------------------------------------------ */

#define MAX_GRANTS 32

static int cmd_init(int argc, char **argv)
{
    static const char usage[] =
        "tq init [--grant-producer ROLE]... [--grant-worker ROLE]... [--db URL]";
    static const struct option lo[] = {{"grant-producer", required_argument, NULL, 'P'},
                                       {"grant-worker", required_argument, NULL, 'W'},
                                       CLI_COMMON_OPTS,
                                       {0}};
    const char *url = NULL;
    tq_grant grants[MAX_GRANTS];
    size_t ngrants = 0;
    int c, ex = 0;
    static const cli_cmd me = {
        .name = "init",
        .usage = usage,
        .help = "Creates the tq schema in the store, or upgrades it. Safe to run again.\n"
                "PostgreSQL: --grant-producer ROLE lets ROLE enqueue and nothing else;\n"
                "--grant-worker ROLE lets ROLE run tq work, and not change queue "
                "settings\n"
                "or the schema. The schema and the grants are one transaction.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        if (c == 'P' || c == 'W') {
            if (ngrants == MAX_GRANTS) {
                cli_error("init", "at most %d grants at once", MAX_GRANTS);
                return EXIT_USAGE;
            }
            grants[ngrants++] =
                (tq_grant){optarg, c == 'W' ? TQ_GRANT_WORKER : TQ_GRANT_PRODUCER};
        } else {
            return cli_bad_option(&me, argv);
        }
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    url = cli_url(url);
    if (ngrants && !cli_is_postgres(url)) {
        /* Before opening: opening a SQLite store that is not there creates it. */
        cli_error("init",
                  "--grant-producer and --grant-worker are for PostgreSQL stores: SQLite "
                  "has no roles (the file's permissions decide)");
        return EXIT_USAGE;
    }
    tq *db = cli_open("init", url, 1, &ex);
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

#define QUEUE_ROW "%-24s %-9s %-7s %-8s %-14s %-11s %-18s %-14s %s\n"

static void print_queue_header(void)
{
    printf(QUEUE_ROW, "QUEUE", "ORDER", "LEASE", "ATTEMPTS", "BACKOFF", "DONE ROWS",
           "RUNNING AT MOST", "STARTS AT MOST", "STATUS");
}

static void print_queue(const tq_queue_info *q)
{
    char l[24], b[24], cap[24], backoff[52], attempts[16], limits[48] = "-",
                                                           rate[48] = "-";
    snprintf(backoff, sizeof backoff, "%s:%s",
             tq_duration_format(b, sizeof b, q->backoff_base_us),
             tq_duration_format(cap, sizeof cap, q->backoff_cap_us));
    snprintf(attempts, sizeof attempts, "%d", q->max_attempts);
    if (q->max_running && q->max_running_per_group)
        snprintf(limits, sizeof limits, "%d, %d/group", q->max_running,
                 q->max_running_per_group);
    else if (q->max_running)
        snprintf(limits, sizeof limits, "%d", q->max_running);
    else if (q->max_running_per_group)
        snprintf(limits, sizeof limits, "%d/group", q->max_running_per_group);
    if (q->rate_limit)
        snprintf(rate, sizeof rate, "%lld/%s", (long long)q->rate_limit,
                 tq_duration_format(b, sizeof b, q->rate_period_us));
    /* The status, and the settings of the control channel and results
     * where they are not the defaults. */
    char status[64];
    int n = snprintf(status, sizeof status, "%s", q->paused ? "paused" : "active");
    if (q->results)
        n += snprintf(status + n, sizeof status - (size_t)n, ", results");
    if (q->max_snoozes != 100)
        snprintf(status + n, sizeof status - (size_t)n, ", %d snoozes", q->max_snoozes);
    char name[260];
    printf(QUEUE_ROW, cli_text(name, sizeof name, q->name), tq_order_name(q->order),
           tq_duration_format(l, sizeof l, q->lease_us), attempts, backoff,
           q->keep_done ? "kept" : "deleted", limits, rate, status);
}

/* --backoff BASE[:CAP] into qo (a cap of 1h, or BASE if that is more, when
 * none is given); -1 after saying what is wrong. */
static int parse_backoff(const char *arg, tq_queue_opts *qo)
{
    char base[64];
    const char *colon = strchr(arg, ':');
    size_t bl = colon ? (size_t)(colon - arg) : strlen(arg);
    if (bl >= sizeof base) {
        cli_error("queue", "invalid backoff '%s'", arg);
        return -1;
    }
    memcpy(base, arg, bl);
    base[bl] = '\0';
    if (cli_duration("queue", "--backoff", base, &qo->backoff_base_us))
        return -1;
    qo->backoff_cap_us = 3600 * 1000000LL;
    if (colon && cli_duration("queue", "--backoff cap", colon + 1, &qo->backoff_cap_us))
        return -1;
    if (!colon && qo->backoff_base_us > qo->backoff_cap_us)
        qo->backoff_cap_us = qo->backoff_base_us;
    qo->set |= TQ_SET_BACKOFF;
    return 0;
}

/* With name: creates or changes that queue and shows it; without: lists
 * them all. Returns the exit code. */
static int queue_apply(tq *db, const char *name, const tq_queue_opts *qo, int json)
{
    int rc, ex = 0;
    if (name) {
        tq_queue_info q;
        /* Whether it is new, for the word "created": a queue made by someone
         * else between the two calls is called created too, which is true
         * of the moment it was looked for. */
        int existed = tq_queue_get(&q, db, name) == 0;
        if ((rc = tq_queue_set(db, name, qo)) || (rc = tq_queue_get(&q, db, name))) {
            ex = cli_fail("queue", db, rc);
        } else if (json) {
            json_t *o = cli_queue_json(&q);
            json_object_set_new(o, "created", json_boolean(!existed));
            ex = cli_print_json(o);
        } else {
            if (!existed)
                printf("created queue '%s'\n", name);
            print_queue_header();
            print_queue(&q);
        }
    } else {
        tq_queue_info *v;
        size_t nq;
        if ((rc = tq_queue_list(&v, &nq, db))) {
            ex = cli_fail("queue", db, rc);
        } else if (json) {
            json_t *a = json_array();
            for (size_t i = 0; i < nq; i++)
                json_array_append_new(a, cli_queue_json(&v[i]));
            ex = cli_print_json(a);
        } else {
            if (nq)
                print_queue_header();
            for (size_t i = 0; i < nq; i++)
                print_queue(&v[i]);
            if (nq == 0)
                printf("no queues yet\n");
        }
        if (!rc)
            tq_free(v);
    }
    return ex;
}

static int cmd_queue(int argc, char **argv)
{
    static const char usage[] =
        "tq queue [NAME [--order fifo|lifo|unordered] [--lease DUR] "
        "[--max-attempts N] [--backoff BASE[:CAP]] [--keep-done|--delete-done] "
        "[--pause|--resume] [--max-running N] [--max-running-per-group N] "
        "[--rate N/DUR] [--max-snoozes N] [--results|--no-results]] [--json] [--db URL]";
    static const struct option lo[] = {
        CLI_COMMON_OPTS,
        {"max-running", required_argument, NULL, 'M'},
        {"max-running-per-group", required_argument, NULL, 'G'},
        {"rate", required_argument, NULL, 'R'},
        {"max-snoozes", required_argument, NULL, 'S'},
        {"results", no_argument, NULL, 'T'},
        {"no-results", no_argument, NULL, 'U'},
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
    static const cli_cmd me = {
        .name = "queue",
        .usage = usage,
        .help = "Without NAME, lists the queues. With NAME, creates the queue "
                "(defaults: fifo,\nlease 30s, 3 attempts, backoff 1s:1h, keep "
                "done rows) and applies the options.\n"
                "--max-running N: at most N jobs of the queue run at once, across "
                "every worker\nand host; --max-running-per-group N: at most N of "
                "each group (tq enqueue\n--group G). 0 removes a limit.\n"
                "--rate N/DUR (e.g. 100/s, 20/1m): at most N jobs of the queue start "
                "in any\nwindow of DUR, across every worker and host; 0 removes it. "
                "Over time starts come\nat N less the burst per DUR (the burst: what "
                "10ms of the rate allows, at least\n1, at most N/2). Workers claim "
                "no jobs ahead for a queue with --max-running\n(or a LIFO queue with "
                "a per-group limit), and for a rate-limited one only what\nstarts "
                "within 8ms. With 1 per group, a worker may claim several jobs of a "
                "group\nand run them one after another: they show as running.\n"
                "--max-snoozes N (default 100): how often one job may snooze (a "
                "handler's\n\"snooze DUR\") before a snooze counts as a failure.\n"
                "--results: a command handler's stdout becomes its job's result (kept "
                "when the\njob is done, at most 1 MiB: tq result ID); --no-results "
                "(the default): its\nstdout is the worker's.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        switch (c) {
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
        case 'b':
            if (parse_backoff(optarg, &qo))
                return EXIT_USAGE;
            break;
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
        case 'M':
            if (cli_int("queue", "--max-running", optarg, 0, 1000000, &n))
                return EXIT_USAGE;
            qo.max_running = (int)n;
            qo.set |= TQ_SET_MAX_RUNNING;
            break;
        case 'G':
            if (cli_int("queue", "--max-running-per-group", optarg, 0, 1000000, &n))
                return EXIT_USAGE;
            qo.max_running_per_group = (int)n;
            qo.set |= TQ_SET_MAX_RUNNING_PER_GROUP;
            break;
        case 'R':
            if (cli_rate("queue", optarg, &qo.rate_limit, &qo.rate_period_us))
                return EXIT_USAGE;
            qo.set |= TQ_SET_RATE;
            break;
        case 'S':
            if (cli_int("queue", "--max-snoozes", optarg, 0, 1000000, &n))
                return EXIT_USAGE;
            qo.max_snoozes = (int)n;
            qo.set |= TQ_SET_MAX_SNOOZES;
            break;
        case 'T':
        case 'U':
            qo.results = c == 'T';
            qo.set |= TQ_SET_RESULTS;
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
    if (argc - optind > 1) {
        cli_error("queue", "unexpected argument '%s'", argv[optind + 1]);
        return EXIT_USAGE;
    }
    const char *name = optind < argc ? argv[optind] : NULL;
    if (!name && qo.set) {
        cli_error("queue", "settings need a queue NAME");
        return EXIT_USAGE;
    }
    if (name && (ex = cli_queue_name("queue", name)))
        return ex;
    tq *db = cli_open("queue", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    ex = queue_apply(db, name, &qo, json);
    tq_close(db);
    return ex;
}

/* ---- tq enqueue ----------------------------------------------------------- */

/* The forms --at takes (tq_time_parse), said alike in --help and errors. */
#define TIME_FORMS                                                                       \
    "YYYY-MM-DDTHH:MM[:SS[.FRACTION]][Z|+HH:MM] (no zone: local time) or @UNIXSECONDS"

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

/* What --lines did: stored jobs (the ids, when --json), and the batch that
 * failed (nothing of it stored) or whose outcome is unknown. */
typedef struct lines_outcome {
    size_t stored, failed, unknown;
    int64_t first, last;                 /* of the stored ones */
    int64_t unknown_first, unknown_last; /* the ids they have if stored */
    json_t *ids;                         /* --json: every stored id */
} lines_outcome;

/* One batch's ids into the outcome, as stored. */
static void lines_stored(lines_outcome *r, const int64_t *ids, size_t n)
{
    if (!r->first)
        r->first = ids[0];
    r->last = ids[n - 1];
    for (size_t i = 0; r->ids && i < n; i++)
        json_array_append_new(r->ids, json_integer(ids[i]));
    r->stored += n;
}

/* The outcome on stdout (--json, always) or as the one line on success. A
 * failure's line (stderr) says the same counts. */
static int lines_report(lines_outcome *r, int ex)
{
    if (r->ids) {
        json_t *o = json_object();
        json_object_set_new(o, "count", json_integer((json_int_t)r->stored));
        json_object_set_new(o, "ids", r->ids);
        r->ids = NULL;
        json_object_set_new(o, "failed", json_integer((json_int_t)r->failed));
        json_object_set_new(o, "unknown", json_integer((json_int_t)r->unknown));
        json_t *u = json_array();
        if (r->unknown) {
            json_array_append_new(u, json_integer(r->unknown_first));
            json_array_append_new(u, json_integer(r->unknown_last));
        }
        json_object_set_new(o, "unknown_ids", u);
        int jx = cli_print_json(o);
        return ex ? ex : jx;
    }
    if (ex)
        return ex;
    if (r->stored == 1)
        printf("enqueued 1 job: id %lld\n", (long long)r->first);
    else if (r->stored)
        printf("enqueued %zu jobs: first id %lld, last id %lld\n", r->stored,
               (long long)r->first, (long long)r->last);
    else
        printf("enqueued 0 jobs\n");
    return 0;
}

/* A batch that did not go through: one line with what is known of every
 * job read so far, and the exit code (EXIT_UNKNOWN when the batch may or
 * may not be stored). */
static int lines_failed(tq *db, int rc, lines_outcome *r, const int64_t *ids, size_t n)
{
    char stored[96] = "";
    if (r->stored)
        snprintf(stored, sizeof stored, " (ids %lld to %lld)", (long long)r->first,
                 (long long)r->last);
    if (rc == TQ_EUNKNOWN) {
        r->unknown = n;
        r->unknown_first = ids[0];
        r->unknown_last = ids[n - 1];
    } else {
        r->failed = n;
    }
    cli_error("enqueue",
              "%s; %zu job(s) stored before it%s, %zu failed (not stored), "
              "%zu unknown (may or may not be stored); the rest of the input "
              "was not read",
              cli_reason(db, rc), r->stored, stored, r->failed, r->unknown);
    return cli_exit_code(rc);
}

/* --lines: one job per line, in transactions of `batch` jobs. Other
 * producers may enqueue meanwhile, so the ids are not a range: said as a
 * count with the first and last, or every one with --json. */
static int enqueue_lines(tq *db, const char *queue, const tq_enqueue_opts *eo, int json)
{
    enum { BATCH = 1000 };
    tq_payload items[BATCH];
    char *lines[BATCH];
    size_t n = 0;
    int64_t ids[BATCH];
    cli_lines in = {.in = stdin};
    int ex = 0;
    lines_outcome r = {.ids = json ? json_array() : NULL};
    /* On a terminal: the jobs so far, and how far into the input when it is
     * a file. */
    cli_progress pr;
    cli_progress_start(&pr, "enqueued", json);
    struct stat st;
    const off_t size = fstat(0, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0;
    off_t read_bytes = 0;

    for (;;) {
        char *line;
        size_t len;
        int more = cli_lines_next(&in, &line, &len);
        if (more < 0) {
            cli_error("enqueue", "reading stdin: %s; %zu jobs were enqueued before it",
                      strerror(errno), r.stored);
            ex = EXIT_RUNTIME;
            break;
        }
        if (more) {
            if (len > TQ_PAYLOAD_MAX_DEFAULT) {
                cli_error("enqueue",
                          "line %zu is over the payload limit of %d bytes; "
                          "%zu jobs were enqueued before it",
                          in.lineno, TQ_PAYLOAD_MAX_DEFAULT, r.stored);
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
            read_bytes += (off_t)len + 1;
        }
        if (n == BATCH || (!more && n > 0)) {
            int rc = tq_job_enqueue_batch(ids, db, queue, items, n, eo);
            for (size_t i = 0; i < n; i++)
                free(lines[i]);
            if (rc) {
                ex = lines_failed(db, rc, &r, ids, n);
                n = 0;
                break;
            }
            lines_stored(&r, ids, n);
            n = 0;
            char how_far[48] = "";
            if (size > 0)
                snprintf(how_far, sizeof how_far, "%d%% of the input",
                         (int)(read_bytes >= size ? 100 : read_bytes * 100 / size));
            cli_progress_show(&pr, (int64_t)r.stored, -1, how_far);
        }
        if (!more)
            break;
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    cli_lines_free(&in);
    cli_progress_end(&pr);
    ex = lines_report(&r, ex);
    json_decref(r.ids);
    return ex;
}

/* The ids of --after (commas between) or --after-file (commas or white
 * space between), appended to *v: 0, or EXIT_USAGE after one line. */
typedef struct idlist {
    int64_t *v;
    size_t n, cap;
} idlist;

static int add_ids(idlist *l, const char *text, const char *from)
{
    const char *p = text;
    for (;;) {
        while (*p == ',' || (*p && strchr(" \t\r\n", *p)))
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < 1 ||
            (*end && *end != ',' && !strchr(" \t\r\n", *end))) {
            size_t k = strcspn(p, ", \t\r\n");
            cli_error("enqueue", "invalid job id '%.*s' in %s: ids are positive integers",
                      (int)(k > 40 ? 40 : k), p, from);
            return EXIT_USAGE;
        }
        if (l->n == TQ_AFTER_MAX) {
            cli_error("enqueue", "more than %d parents in %s", TQ_AFTER_MAX, from);
            return EXIT_USAGE;
        }
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 16;
            int64_t *nv = realloc(l->v, cap * sizeof *nv);
            if (!nv) {
                cli_error("enqueue", "out of memory");
                return EXIT_RUNTIME;
            }
            l->v = nv;
            l->cap = cap;
        }
        l->v[l->n++] = v;
        p = end;
    }
    return 0;
}

static int add_ids_file(idlist *l, const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        cli_error("enqueue", "cannot read --after-file %s: %s", path, strerror(errno));
        return EXIT_USAGE;
    }
    char *text = NULL;
    size_t cap = 0, n = 0;
    int ex = 0;
    for (;;) {
        if (cap - n < 4096) {
            char *t = realloc(text, cap ? 2 * cap : 8192);
            if (!t) {
                cli_error("enqueue", "out of memory");
                ex = EXIT_RUNTIME;
                break;
            }
            text = t;
            cap = cap ? 2 * cap : 8192;
        }
        size_t got = fread(text + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (!ex && ferror(f)) {
        cli_error("enqueue", "cannot read --after-file %s: %s", path, strerror(errno));
        ex = EXIT_USAGE;
    }
    if (f != stdin)
        fclose(f);
    if (!ex) {
        text[n] = '\0';
        if (memchr(text, '\0', n)) {
            cli_error("enqueue", "--after-file %s holds a NUL byte", path);
            ex = EXIT_USAGE;
        } else {
            ex = add_ids(l, text, "--after-file");
        }
    }
    free(text);
    return ex;
}

/* What the options of tq enqueue say together: 0, or EXIT_USAGE after one
 * line. */
static int enqueue_check(const char *queue, const tq_enqueue_opts *eo, int lines,
                         int has_delay, int key_opts, int argc, char **argv)
{
    if (has_delay && eo->run_at) {
        cli_error("enqueue", "--delay and --at cannot be used together");
        return EXIT_USAGE;
    }
    if (cli_queue_name("enqueue", queue))
        return EXIT_USAGE;
    if (eo->key && (strlen(eo->key) < 1 || strlen(eo->key) > 255)) {
        cli_error("enqueue", "the key must be 1 to 255 bytes");
        return EXIT_USAGE;
    }
    if (eo->group && (strlen(eo->group) < 1 || strlen(eo->group) > 255)) {
        cli_error("enqueue", "the group must be 1 to 255 bytes");
        return EXIT_USAGE;
    }
    if (lines && optind != argc) {
        cli_error("enqueue", "--lines takes no PAYLOAD argument: got '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    if (!lines && optind == argc) {
        cli_error("enqueue", "expected one PAYLOAD argument (- for stdin, or --lines)");
        return EXIT_USAGE;
    }
    if (!lines && optind < argc - 1) {
        /* "--delay 5 minutes x": say what came, and the likely slip. */
        char got[160] = "";
        size_t k = 0;
        for (int i = optind; i < argc && i < optind + 3 && k < sizeof got; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, " '%.30s'", argv[i]);
        cli_error("enqueue",
                  "expected one PAYLOAD, got %d arguments:%s%s; %squote a payload "
                  "with spaces",
                  argc - optind, got, argc - optind > 3 ? " ..." : "",
                  has_delay ? "--delay takes one DUR such as 5m; " : "");
        return EXIT_USAGE;
    }
    if (lines && eo->key) {
        cli_error("enqueue", "--key cannot be used with --lines");
        return EXIT_USAGE;
    }
    if (!eo->key && key_opts) {
        cli_error("enqueue", "--unique, --unique-for and --on-conflict go with --key");
        return EXIT_USAGE;
    }
    if (eo->key && eo->nafter) {
        cli_error("enqueue", "--key cannot be used with --after");
        return EXIT_USAGE;
    }
    return 0;
}

/* One job; prints its id (a duplicate key's kept job, said on stderr, or
 * in the JSON). Returns the exit code. */
static int enqueue_one(tq *db, const char *queue, const void *data, size_t len,
                       const tq_enqueue_opts *eo, int json)
{
    int64_t id = 0;
    int rc = tq_job_enqueue(&id, db, queue, data, len, eo);
    if (rc == TQ_EUNKNOWN && json) {
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(id));
        json_object_set_new(o, "unknown", json_true());
        cli_print_json(o);
    }
    if (rc && rc != TQ_DUP && rc != TQ_REPLACED)
        return cli_fail("enqueue", db, rc);
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(id));
        json_object_set_new(o, "duplicate", json_boolean(rc != 0));
        json_object_set_new(o, "replaced", json_boolean(rc == TQ_REPLACED));
        return cli_print_json(o);
    }
    printf("%lld\n", (long long)id);
    tq_job *j = NULL;
    char why[520];
    if (eo->nafter && tq_job_get(&j, db, id) == 0 && j->state == TQ_CANCELLED)
        fprintf(stderr, "tq enqueue: job %lld is cancelled at once: %s\n", (long long)id,
                j->last_error ? cli_text(why, sizeof why, j->last_error)
                              : "a parent is dead or cancelled");
    tq_job_free(j);
    if (rc == TQ_DUP)
        fprintf(stderr,
                "tq enqueue: duplicate key '%s' (unique while %s): job %lld was kept\n",
                eo->key, tq_unique_name(eo->unique), (long long)id);
    else if (rc == TQ_REPLACED)
        fprintf(
            stderr,
            "tq enqueue: duplicate key '%s': ready job %lld took this payload and run "
            "time\n",
            eo->key, (long long)id);
    return 0;
}

static int enqueue_run(const char *queue, tq_enqueue_opts *eo, const char *url, int lines,
                       int has_delay, int key_opts, int json, int argc, char **argv);

static int cmd_enqueue(int argc, char **argv)
{
    static const char usage[] =
        "tq enqueue [--queue Q] [--key K [--unique queued|active|stored] "
        "[--unique-for DUR] [--on-conflict ignore|replace]] [--delay DUR | --at TIME] "
        "[--priority N] [--max-attempts N] [--group G] [--traceparent TP] "
        "[--after ID,... | --after-file FILE] [--json] (PAYLOAD | - | --lines) [--db "
        "URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"queue", required_argument, NULL, 'q'},
                                       {"key", required_argument, NULL, 'k'},
                                       {"delay", required_argument, NULL, 'd'},
                                       {"at", required_argument, NULL, 'a'},
                                       {"priority", required_argument, NULL, 'p'},
                                       {"max-attempts", required_argument, NULL, 'm'},
                                       {"lines", no_argument, NULL, 'L'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"unique", required_argument, NULL, 'u'},
                                       {"unique-for", required_argument, NULL, 'U'},
                                       {"on-conflict", required_argument, NULL, 'c'},
                                       {"traceparent", required_argument, NULL, 't'},
                                       {"group", required_argument, NULL, 'g'},
                                       {"after", required_argument, NULL, 'A'},
                                       {"after-file", required_argument, NULL, 'F'},
                                       {0}};
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    idlist after = {0};
    int after_stdin = 0;
    const char *url = NULL, *queue = "default";
    int c, ex = 0, lines = 0, has_delay = 0, json = 0, key_opts = 0;
    long long n;
    static const cli_cmd me = {
        .name = "enqueue",
        .usage = usage,
        .help = "Adds a job to queue Q (default: the queue named 'default') and prints "
                "its id.\nPAYLOAD '-' reads the payload from stdin; --lines reads one "
                "job per line\nand prints how many, with the first and last id "
                "(--json: every id).\n--key K: no other job of the queue with key K "
                "while the kept one is\n--unique stored (in the table: the default), "
                "queued (ready, until its first\nclaim) or active (ready or running); "
                "--unique-for DUR also frees the key DUR\nafter the kept job's enqueue. "
                "A duplicate prints the kept job's id; with\n--on-conflict replace a "
                "ready kept job takes the new payload and run time.\n"
                "--traceparent TP (default: $TRACEPARENT, if set): a W3C trace context "
                "stored\nwith the job and given to its handler as TRACEPARENT.\n"
                "--group G: the job's group, which the queue's --max-running-per-group "
                "counts\n(one customer, one account); TQ_GROUP in its handler's "
                "environment.\n"
                "--after ID,...: the job waits until every one of those jobs is done, "
                "then\nbecomes ready; one that ends dead or cancelled cancels it (and "
                "its own\nchildren); a retry of that one brings them back. "
                "--after-file FILE reads the ids\nfrom FILE (- for stdin), separated by "
                "commas, spaces or lines. The handler\nfinds them in TQ_PARENTS, or in "
                "the file TQ_PARENTS_FILE when there are many.\n"
                "DUR is a number with a unit:\n250ms, 30s, 5m, 2h, 7d, 1h30m. "
                "TIME is " TIME_FORMS ".\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        switch (c) {
        case 'q':
            queue = optarg;
            break;
        case 'k':
            eo.key = optarg;
            break;
        case 'd':
            if (cli_duration("enqueue", "--delay", optarg, &eo.delay_us)) {
                ex = EXIT_USAGE;
                goto out;
            }
            has_delay = 1;
            break;
        case 'a':
            if (tq_time_parse(&eo.run_at, optarg)) {
                cli_error("enqueue",
                          "invalid time '%s' for --at: use " TIME_FORMS
                          ", from 1970 to 9999",
                          optarg);
                ex = EXIT_USAGE;
                goto out;
            }
            break;
        case 'p':
            if (cli_int("enqueue", "--priority", optarg, -1000000, 1000000, &n)) {
                ex = EXIT_USAGE;
                goto out;
            }
            eo.priority = (int)n;
            break;
        case 'm':
            if (cli_int("enqueue", "--max-attempts", optarg, 1, 1000, &n)) {
                ex = EXIT_USAGE;
                goto out;
            }
            eo.max_attempts = (int)n;
            break;
        case 'L':
            lines = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 'u':
            key_opts = 1;
            if (tq_unique_parse(&eo.unique, optarg)) {
                cli_error("enqueue",
                          "unknown uniqueness '%s': use queued, active or stored",
                          optarg);
                ex = EXIT_USAGE;
                goto out;
            }
            break;
        case 'U':
            key_opts = 1;
            if (cli_duration("enqueue", "--unique-for", optarg, &eo.unique_for_us)) {
                ex = EXIT_USAGE;
                goto out;
            }
            if (!eo.unique_for_us) {
                cli_error("enqueue", "--unique-for needs a duration above 0");
                ex = EXIT_USAGE;
                goto out;
            }
            break;
        case 't':
            eo.traceparent = optarg;
            break;
        case 'g':
            eo.group = optarg;
            break;
        case 'A':
            if ((ex = add_ids(&after, optarg, "--after")))
                goto out;
            if (!after.n) {
                cli_error("enqueue", "--after needs at least one job id");
                ex = EXIT_USAGE;
                goto out;
            }
            break;
        case 'F': {
            const size_t had = after.n;
            after_stdin |= strcmp(optarg, "-") == 0;
            if ((ex = add_ids_file(&after, optarg)))
                goto out;
            if (after.n == had) {
                cli_error("enqueue", "--after-file %s holds no job id", optarg);
                ex = EXIT_USAGE;
                goto out;
            }
            break;
        }
        case 'c':
            key_opts = 1;
            if (strcmp(optarg, "ignore") && strcmp(optarg, "replace")) {
                cli_error("enqueue",
                          "unknown on-conflict action '%s': use ignore or replace",
                          optarg);
                ex = EXIT_USAGE;
                goto out;
            }
            eo.on_conflict = strcmp(optarg, "replace") ? TQ_ON_CONFLICT_IGNORE
                                                       : TQ_ON_CONFLICT_REPLACE;
            break;
        default:
            ex = cli_bad_option(&me, argv);
            goto out;
        }
    }
    if (c == CLI_OPTS_EXIT)
        goto out;
    eo.after = after.v;
    eo.nafter = after.n;
    if (after_stdin && (lines || (optind < argc && strcmp(argv[optind], "-") == 0))) {
        cli_error("enqueue", "--after-file - and a payload from stdin (- or --lines) "
                             "cannot share stdin");
        ex = EXIT_USAGE;
        goto out;
    }
    ex = enqueue_run(queue, &eo, url, lines, has_delay, key_opts, json, argc, argv);
out:
    free(after.v);
    return ex;
}

/* tq enqueue once its options are read. */
static int enqueue_run(const char *queue, tq_enqueue_opts *eo_, const char *url,
                       int lines, int has_delay, int key_opts, int json, int argc,
                       char **argv)
{
    tq_enqueue_opts eo = *eo_;
    int ex;
    /* A producer running inside a trace passes it on without a word. */
    const char *from = "--traceparent";
    if (!eo.traceparent && getenv("TRACEPARENT") && *getenv("TRACEPARENT")) {
        eo.traceparent = getenv("TRACEPARENT");
        from = "$TRACEPARENT";
    }
    if (eo.traceparent && tq_traceparent_check(eo.traceparent)) {
        cli_error("enqueue",
                  "invalid traceparent '%.80s' (from %s): expected "
                  "00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zero",
                  eo.traceparent, from);
        return EXIT_USAGE;
    }
    if ((ex = enqueue_check(queue, &eo, lines, has_delay, key_opts, argc, argv)))
        return ex;

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
    tq *db = cli_open("enqueue", cli_url(url), 0, &ex);
    if (!db) {
        free(payload);
        return ex;
    }
    if (lines) {
        ex = enqueue_lines(db, queue, &eo, json);
    } else {
        const void *data = payload ? (const void *)payload : argv[optind];
        ex = enqueue_one(db, queue, data, len, &eo, json);
    }
    free(payload);
    tq_close(db);
    return ex;
}

/* ---- tq stats ------------------------------------------------------------- */

/* Human output: empty states in words, never as a 0us that means nothing. */
static void print_stats(const tq_stats *st, const char *queue)
{
    char a[24], b[24], d[24], e[24];
    printf("queue:     %s\n", queue ? queue : "(all)");
    for (int i = 0; i < TQ_STATE_COUNT; i++)
        printf("%-10s %lld\n", tq_state_name((tq_state)i), (long long)st->count[i]);
    const int64_t due = st->count[TQ_READY] - st->delayed;
    if (due > 0)
        printf("oldest ready: %s",
               tq_duration_format(a, sizeof a, st->oldest_ready_age_us));
    else if (st->delayed)
        printf("oldest ready: none due");
    else
        printf("oldest ready: none ready");
    if (st->delayed)
        printf("; %lld delayed, next in %s", (long long)st->delayed,
               tq_duration_format(a, sizeof a,
                                  st->next_due_in_us > 0 ? st->next_due_in_us : 0));
    putchar('\n');
    printf("done in the last minute: %lld\n", (long long)st->done_last_minute);
    if (st->recent)
        printf("durations of the last %zu done: p50 %s  p95 %s  max %s\n", st->recent,
               tq_duration_format(b, sizeof b, st->p50_us),
               tq_duration_format(d, sizeof d, st->p95_us),
               tq_duration_format(e, sizeof e, st->max_us));
    else
        printf("durations: no finished jobs yet\n");
    for (size_t i = 0; i < st->nlongest; i++) {
        char w[520];
        printf("running longest: job %lld on %s for %s\n", (long long)st->longest[i].id,
               cli_text(w, sizeof w, st->longest[i].worker),
               tq_duration_format(a, sizeof a, st->longest[i].running_us));
    }
}

static int cmd_stats(int argc, char **argv)
{
    static const char usage[] = "tq stats [--queue Q] [--json] [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"queue", required_argument, NULL, 'q'},
                                       {"json", no_argument, NULL, 'j'},
                                       {0}};
    const char *url = NULL, *queue = NULL;
    int c, ex = 0, json = 0;
    static const cli_cmd me = {
        .name = "stats",
        .usage = usage,
        .help = "Counts by state, age of the oldest ready job, jobs done in "
                "the last minute,\ndurations of the last 1000 done jobs, and "
                "the longest-running jobs.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        if (c == 'q')
            queue = optarg;
        else if (c == 'j')
            json = 1;
        else
            return cli_bad_option(&me, argv);
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    if (queue && (ex = cli_queue_name("stats", queue)))
        return ex;
    tq *db = cli_open("stats", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    tq_stats st;
    tq_queue_info qi;
    int rc = queue ? tq_queue_get(&qi, db, queue) : 0;
    if (rc == TQ_ENOTFOUND) {
        cli_error("stats", "no queue named '%s' (tq queue lists them)", queue);
        tq_close(db);
        return EXIT_RUNTIME;
    }
    if (!rc)
        rc = tq_stats_get(&st, db, queue);
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
        json_object_set_new(o, "delayed", json_integer(st.delayed));
        json_object_set_new(o, "next_due_in_us",
                            st.delayed ? json_integer(st.next_due_in_us) : json_null());
        json_object_set_new(o, "done_last_minute", json_integer(st.done_last_minute));
        json_object_set_new(o, "recent_done", json_integer((json_int_t)st.recent));
        json_object_set_new(o, "duration_p50_us", json_integer(st.p50_us));
        json_object_set_new(o, "duration_p95_us", json_integer(st.p95_us));
        json_object_set_new(o, "duration_max_us", json_integer(st.max_us));
        for (size_t i = 0; i < st.nlongest; i++) {
            json_t *l = json_object();
            json_object_set_new(l, "id", json_integer(st.longest[i].id));
            json_object_set_new(l, "worker", cli_json_text(st.longest[i].worker));
            json_object_set_new(l, "running_us", json_integer(st.longest[i].running_us));
            json_array_append_new(longest, l);
        }
        json_object_set_new(o, "longest_running", longest);
        ex = cli_print_json(o);
    } else {
        print_stats(&st, queue);
    }
    tq_close(db);
    return ex;
}

/* ---- tq list / show --------------------------------------------------------- */

#define JOB_ROW "%-8s %-16s %-9s %-8s %-24s %s"

static void print_job_line(const tq_job *j)
{
    char pv[41], t[40], id[24], attempts[24], queue[260];
    preview(pv, sizeof pv, j->payload, j->payload_len);
    snprintf(id, sizeof id, "%lld", (long long)j->id);
    snprintf(attempts, sizeof attempts, "%d/%d", j->attempts, j->max_attempts);
    printf(JOB_ROW, id, cli_text(queue, sizeof queue, j->queue), tq_state_name(j->state),
           attempts, tq_time_format(t, sizeof t, j->created_at), pv);
    if (j->progress >= 0 && j->state == TQ_RUNNING) {
        printf("  progress: %d%%", j->progress);
        if (j->progress_text && *j->progress_text) {
            putchar(' ');
            cli_put_text(stdout, j->progress_text);
        }
    }
    if (j->last_error) {
        fputs("  error: ", stdout);
        cli_put_text(stdout, j->last_error);
    }
    putchar('\n');
}

static int cmd_list(int argc, char **argv)
{
    static const char usage[] =
        "tq list [--state S] [--queue Q] [--limit N] [--json] [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"state", required_argument, NULL, 's'},
                                       {"queue", required_argument, NULL, 'q'},
                                       {"limit", required_argument, NULL, 'n'},
                                       {"json", no_argument, NULL, 'j'},
                                       {0}};
    tq_list_opts lo2 = TQ_LIST_OPTS_INIT;
    const char *url = NULL;
    int c, ex = 0, json = 0;
    long long n;
    static const cli_cmd me = {
        .name = "list",
        .usage = usage,
        .help = "Lists jobs, newest first (by id; with --state done, dead or\n"
                "cancelled, the latest finished first; default\n"
                "limit 100).\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        switch (c) {
        case 's': {
            tq_state st;
            if (tq_state_parse(&st, optarg)) {
                cli_error("list",
                          "unknown state '%s': use ready, running, done, dead, "
                          "cancelled or waiting",
                          optarg);
                return EXIT_USAGE;
            }
            lo2.state = (int)st;
            break;
        }
        case 'q':
            if (cli_queue_name("list", optarg))
                return EXIT_USAGE;
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
            return cli_bad_option(&me, argv);
        }
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    tq *db = cli_open("list", cli_url(url), 0, &ex);
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
                json_array_append_new(a, cli_job_json(&jobs[i], 1));
            ex = cli_print_json(a);
        } else if (nj == 0) {
            printf("no jobs\n");
        } else {
            printf(JOB_ROW "\n", "ID", "QUEUE", "STATE", "ATTEMPTS", "CREATED",
                   "PAYLOAD");
            for (size_t i = 0; i < nj; i++)
                print_job_line(&jobs[i]);
        }
        tq_job_array_free(jobs, nj);
    }
    tq_close(db);
    return ex;
}

/* tq show's line of a job's parents: how many, how many it waits for, and
 * the first ids. */
static void show_parents(tq *db, const tq_job *j)
{
    printf("parents:      %lld", (long long)j->nparents);
    if (j->state == TQ_WAITING)
        printf(", waiting for %lld", (long long)j->waiting_for);
    int64_t *v = NULL;
    size_t n = 0;
    if (tq_job_parents(&v, &n, db, j->id) == 0 && n) {
        fputs(" (", stdout);
        for (size_t i = 0; i < n && i < 10; i++)
            printf(i ? " %lld" : "%lld", (long long)v[i]);
        fputs(n > 10 ? " ...)" : ")", stdout);
    }
    tq_free(v);
    putchar('\n');
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
        CLI_COMMON_OPTS, {"json", no_argument, NULL, 'j'}, {0}};
    const char *url = NULL;
    int c, ex = 0, json = 0;
    int64_t id;
    static const cli_cmd me = {
        .name = "show", .usage = usage, .help = "Shows one job with its payload.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        if (c == 'j')
            json = 1;
        else
            return cli_bad_option(&me, argv);
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if (optind != argc - 1) {
        cli_error("show", "expected one job ID");
        return EXIT_USAGE;
    }
    if (parse_id("show", argv[optind], &id))
        return EXIT_USAGE;
    tq *db = cli_open("show", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    tq_job *j;
    int rc = tq_job_get(&j, db, id);
    if (rc) {
        ex = cli_fail("show", db, rc);
    } else if (json) {
        ex = cli_print_json(cli_job_show_json(db, j));
        tq_job_free(j);
    } else {
        char t[40], d[24], queue[260];
        printf("id:           %lld\nqueue:        %s\nstate:        %s\n",
               (long long)j->id, cli_text(queue, sizeof queue, j->queue),
               tq_state_name(j->state));
        printf("priority:     %d\nattempts:     %d of %d\nclaims:       %lld\n",
               j->priority, j->attempts, j->max_attempts, (long long)j->claim);
        if (j->key) {
            fputs("key:          ", stdout);
            cli_put_text(stdout, j->key);
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
            cli_put_text(stdout, j->worker);
            putchar('\n');
        }
        if (j->traceparent) {
            fputs("traceparent:  ", stdout);
            cli_put_text(stdout, j->traceparent);
            putchar('\n');
        }
        if (j->group) {
            fputs("group:        ", stdout);
            cli_put_text(stdout, j->group);
            putchar('\n');
        }
        if (j->snoozes)
            printf("snoozes:      %d\n", j->snoozes);
        if (j->nparents)
            show_parents(db, j);
        if (j->result_len >= 0)
            printf("result:       %lld bytes (tq result %lld)\n",
                   (long long)j->result_len, (long long)j->id);
        if (j->progress >= 0) {
            printf("progress:     %d%%", j->progress);
            if (j->progress_text && *j->progress_text) {
                putchar(' ');
                cli_put_text(stdout, j->progress_text);
            }
            putchar('\n');
        }
        if (j->last_error) {
            fputs("last error:   ", stdout);
            cli_put_text(stdout, j->last_error);
            putchar('\n');
        }
        /* Escaped, line by line, as any text from the store (tq show --json
         * and tq result give the bytes). */
        printf("payload:      %zu bytes\n", j->payload_len);
        cli_put_lines(stdout, j->payload, j->payload_len);
        tq_job_free(j);
    }
    tq_close(db);
    return ex;
}

static int cmd_result(int argc, char **argv)
{
    static const char usage[] = "tq result ID [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS, {0}};
    const char *url = NULL;
    int c, ex = 0;
    int64_t id;
    static const cli_cmd me = {
        .name = "result",
        .usage = usage,
        .help = "Writes the result of a done job to stdout, byte for byte: what its "
                "handler\nwrote to stdout, in a queue with --results (or what a C "
                "handler set).\nExit 1 when the job is not done or has no result.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0)
        return cli_bad_option(&me, argv);
    if (c == CLI_OPTS_EXIT)
        return ex;
    if (optind != argc - 1) {
        cli_error("result", "expected one job ID");
        return EXIT_USAGE;
    }
    if (parse_id("result", argv[optind], &id))
        return EXIT_USAGE;
    tq *db = cli_open("result", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    void *res;
    size_t len;
    int rc = tq_job_result(&res, &len, db, id);
    if (rc) {
        ex = cli_fail("result", db, rc);
    } else {
        if (fwrite(res, 1, len, stdout) != len || fflush(stdout) != 0) {
            cli_error("result", "cannot write the result: %s", strerror(errno));
            ex = 1;
        }
        tq_free(res);
    }
    tq_close(db);
    return ex;
}

/* After a retry or cancel: the job's id and the state it is in now (a
 * retried job with parents not done waits; one that a dead parent holds
 * is cancelled again, and says by what). */
static void print_moved(tq *db, int64_t id, int cancel)
{
    tq_job *j = NULL;
    if (cancel || tq_job_get(&j, db, id) != 0) {
        printf("%lld %s\n", (long long)id, cancel ? "cancelled" : "ready");
    } else if (j->state == TQ_CANCELLED && j->last_error) {
        printf("%lld cancelled again: ", (long long)id);
        cli_put_text(stdout, j->last_error);
        putchar('\n');
    } else {
        printf("%lld %s\n", (long long)id, tq_state_name(j->state));
    }
    tq_job_free(j);
}

/* ---- tq retry / cancel / prune ------------------------------------------ */

static int cmd_retry_cancel(int argc, char **argv, int cancel)
{
    const char *cmd = cancel ? "cancel" : "retry";
    const char *usage = cancel ? "tq cancel ID... [--db URL]"
                               : "tq retry (ID... | --dead [--queue Q]) [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"dead", no_argument, NULL, 'd'},
                                       {"queue", required_argument, NULL, 'q'},
                                       {0}};
    const char *url = NULL, *queue = NULL;
    int c, ex = 0, dead = 0;
    const cli_cmd me = {.name = cmd,
                        .usage = usage,
                        .help = cancel ? "Cancels ready, running or waiting jobs, and "
                                         "the waiting jobs enqueued\nafter them: all of "
                                         "them, or none when one is unknown or "
                                         "finished.\n"
                                       : "Puts dead or cancelled jobs back to ready "
                                         "with their attempts reset:\nall of them, or "
                                         "none when one is unknown or in another "
                                         "state.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        if (c == 'd' && !cancel)
            dead = 1;
        else if (c == 'q' && !cancel)
            queue = optarg;
        else
            return cli_bad_option(&me, argv);
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if (queue && !dead) {
        cli_error(cmd, "--queue only goes with --dead");
        return EXIT_USAGE;
    }
    if (queue && (ex = cli_queue_name(cmd, queue)))
        return ex;
    if (dead == (optind < argc)) {
        cli_error(cmd, dead ? "--dead takes no job IDs" : "expected one or more job IDs");
        return EXIT_USAGE;
    }
    int64_t ids[argc > 0 ? argc : 1];
    int nids = 0;
    for (int i = optind; i < argc; i++)
        if (parse_id(cmd, argv[i], &ids[nids++]))
            return EXIT_USAGE;
    tq *db = cli_open(cmd, cli_url(url), 0, &ex);
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
    if (nids) { /* all or none */
        int rc = cancel ? tq_job_cancel_ids(db, ids, (size_t)nids)
                        : tq_job_retry_ids(db, ids, (size_t)nids);
        if (rc)
            ex = cli_fail(cmd, db, rc);
        for (int i = 0; !rc && i < nids; i++)
            print_moved(db, ids[i], cancel);
    }
    tq_close(db);
    return ex;
}

static int cmd_prune(int argc, char **argv)
{
    static const char usage[] =
        "tq prune --older-than DUR [--state done|dead|cancelled]... [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"older-than", required_argument, NULL, 'o'},
                                       {"state", required_argument, NULL, 's'},
                                       {0}};
    const char *url = NULL;
    int c, ex = 0, have_age = 0;
    int64_t age = 0;
    unsigned mask = 0;
    static const cli_cmd me = {.name = "prune",
                               .usage = usage,
                               .help = "Deletes finished jobs (default: done, dead and "
                                       "cancelled) that finished before now - DUR.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        switch (c) {
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
            return cli_bad_option(&me, argv);
        }
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if (!have_age) {
        cli_error("prune", "--older-than DUR is required");
        return EXIT_USAGE;
    }
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    if (!mask)
        mask = (1u << TQ_DONE) | (1u << TQ_DEAD) | (1u << TQ_CANCELLED);
    tq *db = cli_open("prune", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    /* In transactions of PRUNE_BATCH rows of each state, so that workers
     * of the same store wait no longer than one of them takes; on a
     * terminal, how many so far. */
    enum { PRUNE_BATCH = 10000 };
    cli_progress pr;
    cli_progress_start(&pr, "pruned", 0);
    int64_t n = 0, got = 0;
    int rc;
    do {
        rc = tq_job_prune_batch(&got, db, age, mask, PRUNE_BATCH);
        n += got;
        cli_progress_show(&pr, n, -1, NULL);
    } while (!rc && got >= PRUNE_BATCH);
    cli_progress_end(&pr);
    if (rc) {
        cli_error("prune", "%s; %lld job(s) were pruned before it", cli_reason(db, rc),
                  (long long)n);
        ex = cli_exit_code(rc);
    } else {
        printf("pruned %lld job(s)\n", (long long)n);
    }
    tq_close(db);
    return ex;
}

/* ---- tq workers ------------------------------------------------------------- */

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

static int cmd_workers(int argc, char **argv)
{
    static const char usage[] = "tq workers [--prune DUR] [--json] [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"json", no_argument, NULL, 'j'},
                                       {"prune", required_argument, NULL, 'p'},
                                       {0}};
    const char *url = NULL;
    int c, ex = 0, json = 0, prune = 0;
    int64_t age = 0;
    static const cli_cmd me = {
        .name = "workers",
        .usage = usage,
        .help = "Lists registered workers: alive, stopped or gone (silent past their "
                "lease).\n--prune DUR first removes those stopped or gone for longer "
                "than DUR;\nlive workers are never removed.\n"};
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'p') {
            if (cli_duration("workers", "--prune", optarg, &age))
                return EXIT_USAGE;
            prune = 1;
        } else {
            return cli_bad_option(&me, argv);
        }
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    tq *db = cli_open("workers", cli_url(url), 0, &ex);
    if (!db)
        return ex;
    int64_t n = 0;
    int rc = prune ? tq_worker_prune(&n, db, age) : 0;
    if (rc) {
        ex = cli_fail("workers", db, rc);
    } else {
        if (prune && !json) {
            char d[24];
            printf("pruned %lld worker(s) stopped or gone for over %s\n", (long long)n,
                   tq_duration_format(d, sizeof d, age));
        }
        ex = print_workers(db, json);
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
    {"result", cmd_result, "print a done job's result"},
    {"retry", NULL, "put dead or cancelled jobs back to ready"},
    {"cancel", NULL, "cancel ready or running jobs"},
    {"prune", cmd_prune, "delete old finished jobs"},
    {"workers", cmd_workers, "list registered workers, or prune old ones"},
    {"cron", cmd_cron, "periodic jobs: set, list or remove a schedule"},
    {"serve", cmd_serve, "an HTTP server: metrics, a dashboard, JSON and actions"},
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
    fprintf(f, "\n'tq COMMAND --help' (or 'tq help COMMAND') describes each.\n");
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
    const char *names[sizeof commands / sizeof commands[0]];
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
        names[k] = commands[k].name;
    const char *near = cli_nearest(name, names, sizeof names / sizeof names[0]);
    if (near)
        cli_error(NULL, "unknown command '%s' (did you mean '%s'?)", name, near);
    else
        cli_error(NULL, "unknown command '%s' (see tq --help)", name);
    return EXIT_USAGE;
}
