/*
 * enqueue.c - `tq enqueue`: adds one job (its payload an argument or
 * stdin), or one job per line of stdin with --lines, with its key, delay,
 * priority, group, trace context and parents. Called by tq.c's command
 * table.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The forms --at takes (tq_time_parse), said alike in --help and errors. */
#define TIME_FORMS                                                                       \
    "YYYY-MM-DD[THH:MM[:SS[.FRACTION]]][Z|+HH:MM] (no zone: local time) or @UNIXSECONDS"

static const char usage[] =
    "tq enqueue [-q|--queue Q] [--key K [--unique queued|active|stored] "
    "[--unique-for DUR] [--on-conflict ignore|replace]] "
    "[--delay DUR | --at TIME] [--priority N] [--max-attempts N] [--group G] "
    "[--traceparent TP] [--after ID,... | --after-file FILE] [--when done|ended] "
    "[--timeout DUR] "
    "[-j|--json] "
    "(PAYLOAD | - | --lines) [-d|--db URL]";
static const char help[] =
    "Adds a job to queue Q (default: the queue named 'default') and prints "
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
    "--when ended (with --after: a batch's callback): the job waits until every "
    "parent\nended, done, dead or cancelled, and runs whatever the ends were; "
    "its handler\nfinds them in TQ_PARENTS_DONE and TQ_PARENTS_FAILED (dead or "
    "cancelled).\n--when done, the default: as --after says.\n"
    "--timeout DUR: how long one run of the job may take (its handler is then "
    "stopped\nand the run fails), over its queue's --timeout and the "
    "worker's.\n"
    "DUR is a number with a unit (us, ms, s, m, h, d), fractions and sums\nallowed: "
    "250ms, 30s, 5m, 1.5h, 7d, 1h30m.\nTIME is " TIME_FORMS ";\na date alone is its "
    "midnight.\n";

typedef struct idlist {
    int64_t *v;
    size_t n, cap;
} idlist;

typedef struct enqueue_args {
    const char *queue;
    tq_enqueue_opts eo; /* its after: the ids of after */
    idlist after;
    const char *payload; /* the PAYLOAD argument ("-": stdin); NULL with --lines */
    unsigned char *read; /* stdin's payload, for "-" */
    size_t len;          /* the payload's */
    int after_stdin, lines, has_delay, key_opts, json, has_when;
} enqueue_args;

/* ---- the payload and --lines ------------------------------------------- */

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

/* ---- the parents: --after and --after-file ------------------------------- */

/* The ids of --after (commas between) or --after-file (commas or white
 * space between), appended to *v: 0, or EXIT_USAGE after one line. */
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

/* --after ID,...: 0, or the exit code after one line. */
static int opt_after(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    enqueue_args *a = args;
    int ex = add_ids(&a->after, arg, "--after");
    if (ex)
        return ex;
    if (!a->after.n) {
        cli_error("enqueue", "--after needs at least one job id");
        return EXIT_USAGE;
    }
    return 0;
}

/* --after-file FILE: 0, or the exit code after one line. */
static int opt_after_file(void *args, const cli_opt *opt, const char *path)
{
    (void)opt;
    enqueue_args *a = args;
    const size_t had = a->after.n;
    a->after_stdin |= strcmp(path, "-") == 0;
    int ex = add_ids_file(&a->after, path);
    if (ex)
        return ex;
    if (a->after.n == had) {
        cli_error("enqueue", "--after-file %s holds no job id", path);
        return EXIT_USAGE;
    }
    return 0;
}

/* --when done|ended: 0, or the exit code after one line. */
static int opt_when(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    enqueue_args *a = args;
    if (strcmp(arg, "done") && strcmp(arg, "ended")) {
        cli_error("enqueue", "unknown --when '%s': use done or ended", arg);
        return EXIT_USAGE;
    }
    a->eo.after_ended = strcmp(arg, "ended") == 0;
    a->has_when = 1;
    return 0;
}

/* ---- the options --------------------------------------------------------- */

static int opt_at(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    if (tq_time_parse(&((enqueue_args *)args)->eo.run_at, arg)) {
        cli_error("enqueue",
                  "invalid time '%s' for --at: use " TIME_FORMS ", from 1970 to 9999",
                  arg);
        return EXIT_USAGE;
    }
    return 0;
}

/* --unique, --unique-for and --on-conflict: marked as the key's options
 * (key_opts). */
static int opt_unique(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    if (tq_unique_parse(&((enqueue_args *)args)->eo.unique, arg)) {
        cli_error("enqueue", "unknown uniqueness '%s': use queued, active or stored",
                  arg);
        return EXIT_USAGE;
    }
    return 0;
}

static int opt_on_conflict(void *args, const cli_opt *opt, const char *arg)
{
    (void)opt;
    if (strcmp(arg, "ignore") && strcmp(arg, "replace")) {
        cli_error("enqueue", "unknown on-conflict action '%s': use ignore or replace",
                  arg);
        return EXIT_USAGE;
    }
    ((enqueue_args *)args)->eo.on_conflict =
        strcmp(arg, "replace") ? TQ_ON_CONFLICT_IGNORE : TQ_ON_CONFLICT_REPLACE;
    return 0;
}

#define KEY_OPTION(L, FN)                                                                \
    {                                                                                    \
        CLI_OPT_(0, L, CLI_CALLBACK), .arg = 1, .fn = FN,                                \
                                      CLI_MARK(enqueue_args, key_opts, 1)                \
    }

static const enqueue_args defaults = {.queue = "default", .eo = TQ_ENQUEUE_OPTS_INIT};

static const cli_opt opts[] = {
    CLI_OPT_STRING('q', "queue", enqueue_args, queue),
    CLI_OPT_STRING(0, "key", enqueue_args, eo.key),
    CLI_OPT_DURATION_MARK(0, "delay", enqueue_args, eo.delay_us, has_delay, 1),
    CLI_OPT_CALLBACK(0, "at", 1, opt_at, 0),
    CLI_OPT_INT(0, "priority", enqueue_args, eo.priority, -1000000, 1000000),
    CLI_OPT_INT(0, "max-attempts", enqueue_args, eo.max_attempts, 1, 1000),
    CLI_OPT_FLAG(0, "lines", enqueue_args, lines, 1),
    CLI_OPT_FLAG('j', "json", enqueue_args, json, 1),
    KEY_OPTION("unique", opt_unique),
    {CLI_OPT_(0, "unique-for", CLI_DURATION), CLI_FIELD(enqueue_args, eo.unique_for_us),
     .zero = "--unique-for needs a duration above 0",
     CLI_MARK(enqueue_args, key_opts, 1)},
    KEY_OPTION("on-conflict", opt_on_conflict),
    CLI_OPT_STRING(0, "traceparent", enqueue_args, eo.traceparent),
    CLI_OPT_STRING(0, "group", enqueue_args, eo.group),
    CLI_OPT_CALLBACK(0, "after", 1, opt_after, 0),
    CLI_OPT_CALLBACK(0, "after-file", 1, opt_after_file, 0),
    CLI_OPT_CALLBACK(0, "when", 1, opt_when, 0),
    {CLI_OPT_(0, "timeout", CLI_DURATION), CLI_FIELD(enqueue_args, eo.timeout_us),
     .zero = "--timeout needs a duration above 0 (without it: the queue's)"},
    CLI_OPT_END};

/* A producer running inside a trace passes it on without a word: the
 * trace context, from --traceparent or $TRACEPARENT, checked. */
static int enqueue_traceparent(tq_enqueue_opts *eo)
{
    const char *from = "--traceparent";
    if (!eo->traceparent && getenv("TRACEPARENT") && *getenv("TRACEPARENT")) {
        eo->traceparent = getenv("TRACEPARENT");
        from = "$TRACEPARENT";
    }
    if (eo->traceparent && tq_traceparent_check(eo->traceparent)) {
        cli_error("enqueue",
                  "invalid traceparent '%.80s' (from %s): expected "
                  "00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zero",
                  eo->traceparent, from);
        return EXIT_USAGE;
    }
    return 0;
}

/* What the arguments say, "--delay 5 minutes x" or not: 0, or EXIT_USAGE
 * after one line. */
static int enqueue_check_args(const enqueue_args *a, int argc, char **argv)
{
    if (a->lines && optind != argc) {
        cli_error("enqueue", "--lines takes no PAYLOAD argument: got '%s'", argv[optind]);
        return EXIT_USAGE;
    }
    if (!a->lines && optind == argc) {
        cli_error("enqueue", "expected one PAYLOAD argument (- for stdin, or --lines)");
        return EXIT_USAGE;
    }
    if (!a->lines && optind < argc - 1) {
        /* "--delay 5 minutes x": say what came, and the likely slip. */
        char got[160] = "";
        size_t k = 0;
        for (int i = optind; i < argc && i < optind + 3 && k < sizeof got; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, " '%.30s'", argv[i]);
        cli_error("enqueue",
                  "expected one PAYLOAD, got %d arguments:%s%s; %squote a payload "
                  "with spaces",
                  argc - optind, got, argc - optind > 3 ? " ..." : "",
                  a->has_delay ? "--delay takes one DUR such as 5m; " : "");
        return EXIT_USAGE;
    }
    return 0;
}

/* What the options of tq enqueue say together: 0, or EXIT_USAGE after one
 * line. */
static int enqueue_check(const enqueue_args *a, int argc, char **argv)
{
    const tq_enqueue_opts *eo = &a->eo;
    if (a->has_delay && eo->run_at) {
        cli_error("enqueue", "--delay and --at cannot be used together");
        return EXIT_USAGE;
    }
    if (cli_queue_name("enqueue", a->queue))
        return EXIT_USAGE;
    if (eo->key && (strlen(eo->key) < 1 || strlen(eo->key) > 255)) {
        cli_error("enqueue", "the key must be 1 to 255 bytes");
        return EXIT_USAGE;
    }
    if (eo->group && (strlen(eo->group) < 1 || strlen(eo->group) > 255)) {
        cli_error("enqueue", "the group must be 1 to 255 bytes");
        return EXIT_USAGE;
    }
    if (enqueue_check_args(a, argc, argv))
        return EXIT_USAGE;
    if (a->lines && eo->key) {
        cli_error("enqueue", "--key cannot be used with --lines");
        return EXIT_USAGE;
    }
    if (!eo->key && a->key_opts) {
        cli_error("enqueue", "--unique, --unique-for and --on-conflict go with --key");
        return EXIT_USAGE;
    }
    if (eo->key && eo->nafter) {
        cli_error("enqueue", "--key cannot be used with --after");
        return EXIT_USAGE;
    }
    if (a->has_when && !eo->nafter) {
        cli_error("enqueue", "--when goes with --after or --after-file");
        return EXIT_USAGE;
    }
    return 0;
}

/* The payload: stdin's for "-" (into *buf), else the argument's length. */
static int enqueue_payload(const enqueue_args *a, unsigned char **buf, size_t *len)
{
    if (strcmp(a->payload, "-") == 0)
        return read_stdin("enqueue", buf, len, TQ_PAYLOAD_MAX_DEFAULT);
    *len = strlen(a->payload);
    if (*len > TQ_PAYLOAD_MAX_DEFAULT) {
        cli_error("enqueue", "payload of %zu bytes is over the limit of %d bytes", *len,
                  TQ_PAYLOAD_MAX_DEFAULT);
        return EXIT_USAGE;
    }
    return 0;
}

/* After the options: 0, or the exit code of a bad command line. */
static int enqueue_parse(void *args, const char **url, int argc, char **argv)
{
    enqueue_args *a = args;
    int ex;
    (void)url;
    a->eo.after = a->after.v;
    a->eo.nafter = a->after.n;
    if (a->after_stdin &&
        (a->lines || (optind < argc && strcmp(argv[optind], "-") == 0))) {
        cli_error("enqueue", "--after-file - and a payload from stdin (- or --lines) "
                             "cannot share stdin");
        return EXIT_USAGE;
    }
    if ((ex = enqueue_traceparent(&a->eo)) || (ex = enqueue_check(a, argc, argv)))
        return ex;
    a->payload = a->lines ? NULL : argv[optind];
    /* stdin's payload read now: one too long is a usage error, before the
     * store is opened */
    return a->lines ? 0 : enqueue_payload(a, &a->read, &a->len);
}

/* ---- the run ------------------------------------------------------------- */

static int enqueue_run(void *args, tq *db)
{
    const enqueue_args *a = args;
    if (a->lines)
        return enqueue_lines(db, a->queue, &a->eo, a->json);
    const void *data = a->read ? (const void *)a->read : a->payload;
    return enqueue_one(db, a->queue, data, a->len, &a->eo, a->json);
}

static void enqueue_done(void *args)
{
    enqueue_args *a = args;
    free(a->after.v);
    free(a->read);
}

CLI_COMMAND(enqueue, "add a job (or one per line with --lines)", CLI_OPEN, &defaults,
            opts, usage, help, enqueue_done);
