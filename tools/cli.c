/*
 * cli.c - what the tool's commands share (tools/cmd/, and tq serve's
 * files): opening the store, escaping the store's text for a terminal,
 * JSON output, and errors as one line with the exit code that goes with
 * them. Their options are read by options.c.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *cmd, const char *fmt, ...)
{
    /* One write, so lines of concurrent processes do not interleave; the
     * message escaped, as it may carry text from the store. */
    char line[2048], msg[1024];
    int n = snprintf(line, sizeof line, "tq%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cli_text(line + n, sizeof line - (size_t)n - 1, msg);
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

const char *cli_text(char *buf, size_t len, const char *s)
{
    char *p = tq_text_printable(s ? s : "");
    if (!p) {
        snprintf(buf, len, "(out of memory)");
        return buf;
    }
    size_t n = strlen(p);
    if (n < len) {
        memcpy(buf, p, n + 1);
    } else if (len > 3) { /* cut at a character's start: escapes are ASCII */
        size_t k = len - 4;
        while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80)
            k--;
        memcpy(buf, p, k);
        memcpy(buf + k, "...", 4);
    } else if (len) {
        buf[0] = '\0';
    }
    free(p);
    return buf;
}

void cli_put_text(FILE *f, const char *s)
{
    char *p = tq_text_printable(s ? s : "");
    fputs(p ? p : "(out of memory)", f);
    free(p);
}

void cli_put_lines(FILE *f, const void *data, size_t n)
{
    const char *p = data, *end = p + n;
    char *line = malloc(n + 1);
    if (!line) {
        fputs("(out of memory)\n", f);
        return;
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        /* a NUL would end the text early: each part, then \x00 */
        for (const char *q = p; q <= stop;) {
            const char *z = memchr(q, '\0', (size_t)(stop - q));
            const char *e = z ? z : stop;
            memcpy(line, q, (size_t)(e - q));
            line[e - q] = '\0';
            cli_put_text(f, line);
            if (!z)
                break;
            fputs("\\x00", f);
            q = z + 1;
        }
        fputc('\n', f);
        p = nl ? nl + 1 : end;
    }
    free(line);
}

const char *cli_reason(tq *db, int rc)
{
    return db && *tq_errmsg(db) ? tq_errmsg(db) : tq_strerror(rc);
}

int cli_exit_code(int rc)
{
    return rc == TQ_EINVAL || rc == TQ_ETOOBIG ? EXIT_USAGE
           : rc == TQ_EUNKNOWN                 ? EXIT_UNKNOWN
                                               : EXIT_RUNTIME;
}

/* Where the last URL cli_url gave came from, for cli_open's messages:
 * NULL for --db, else how the store was chosen. */
static const char *url_source;
static const char *global_db; /* tq --db URL COMMAND (cli_global_db) */

void cli_global_db(const char *url)
{
    setenv("TQ_DB", url, 1); /* the command's, and its handlers' */
    global_db = url;
}

const char *cli_url(const char *given)
{
    url_source = NULL;
    if (given)
        return given;
    if (global_db && strcmp(global_db, getenv("TQ_DB") ? getenv("TQ_DB") : "") == 0)
        return global_db; /* tq --db URL COMMAND: a --db too */
    const char *env = getenv("TQ_DB");
    if (env && *env) {
        url_source = "came from TQ_DB";
        return env;
    }
    url_source = "is the default: neither --db nor TQ_DB is set";
    return "tq.db";
}

int cli_is_postgres(const char *url)
{
    return strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0;
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
    /* A bare number would be seconds to the library; on a command line it
     * is more often the first half of "--delay 5 minutes", whose second
     * half would silently become the payload. 0 needs no unit. */
    if (text[strspn(text, "0123456789.")] == '\0' && strspn(text, "0") != strlen(text)) {
        cli_error(cmd,
                  "invalid duration '%s' for %s: a number needs a unit, as in %ss, "
                  "%sm, %sh or %sd",
                  text, opt, text, text, text, text);
        return -1;
    }
    if (tq_duration_parse(out, text)) {
        cli_error(cmd,
                  "invalid duration '%s' for %s: use e.g. 250ms, 30s, 5m, 2h, "
                  "7d or 1h30m",
                  text, opt);
        return -1;
    }
    return 0;
}

int cli_rate(const char *cmd, const char *text, int64_t *n, int64_t *period_us)
{
    char num[32], dur[64];
    long long v;
    *n = *period_us = 0;
    if (strcmp(text, "0") == 0 || strcmp(text, "none") == 0)
        return 0;
    const char *slash = strchr(text, '/');
    size_t nl = slash ? (size_t)(slash - text) : 0;
    if (!slash || nl == 0 || nl >= sizeof num || strlen(slash + 1) + 2 > sizeof dur) {
        cli_error(cmd, "invalid rate '%s': use N/DURATION, as in 100/s or 20/1m, or 0",
                  text);
        return -1;
    }
    memcpy(num, text, nl);
    num[nl] = '\0';
    snprintf(dur, sizeof dur, "%s%s", isalpha((unsigned char)slash[1]) ? "1" : "",
             slash + 1);
    if (cli_int(cmd, "--rate", num, 1, 1000000000, &v) ||
        cli_duration(cmd, "--rate period", dur, period_us))
        return -1;
    *n = v;
    return 0;
}

/* Opens the store; prints the failure and returns NULL on error. */
int cli_open_failed(const char *cmd, tq *db, int rc, const char *url)
{
    /* Which store, when the message does not say, and where its name came
     * from when no --db gave it. */
    const char *why = cli_reason(db, rc), *name = db ? tq_store_name(db) : url;
    const int named = name && *name && strstr(why, name);
    if (named && !url_source)
        cli_error(cmd, "%s", why);
    else if (url_source)
        cli_error(cmd, "%s (%s%s %s)", why, named ? "" : "the store ", name, url_source);
    else
        cli_error(cmd, "%s (the store is %s)", why, name);
    return cli_exit_code(rc);
}

tq *cli_open(const char *cmd, const char *url, int create, int *exit_code)
{
    tq *db = NULL;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = create;
    int rc = tq_open(&db, url, &o);
    if (rc) {
        *exit_code = cli_open_failed(cmd, db, rc, url);
        tq_close(db);
        return NULL;
    }
    return db;
}

int cli_print_json(json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(v);
    if (!s)
        return EXIT_RUNTIME;
    puts(s);
    free(s);
    return 0;
}

int cli_list(tq *db, const cli_listing *l, const void *arg, int json)
{
    void *v = NULL;
    size_t n = 0;
    int rc = l->rows->read(&v, &n, db, arg);
    if (rc)
        return cli_fail(l->cmd, db, rc);
    const char *row = v, *end = row + n * l->rows->size;
    int ex = 0;
    if (json) {
        json_t *a = json_array();
        for (const char *r = row; r < end; r += l->rows->size)
            json_array_append_new(a, l->rows->json(r));
        ex = cli_print_json(a);
    } else {
        if (n)
            l->header();
        else
            printf("%s\n", l->none);
        for (const char *r = row; r < end; r += l->rows->size)
            l->line(r);
    }
    l->rows->release(v, n);
    return ex;
}

/* cli_NAME_rows: the rows of type ROW that LIST reads, each as JSON. */
#define STORE_ROWS(NAME, ROW, LIST, JSON, RELEASE)                                       \
    static int NAME##_read(void **rows, size_t *n, tq *db, const void *arg)              \
    {                                                                                    \
        (void)arg;                                                                       \
        ROW *v = NULL;                                                                   \
        int rc = LIST(&v, n, db);                                                        \
        *rows = v;                                                                       \
        return rc;                                                                       \
    }                                                                                    \
                                                                                         \
    static json_t *NAME##_json(const void *row)                                          \
    {                                                                                    \
        return JSON(row);                                                                \
    }                                                                                    \
                                                                                         \
    const cli_rows cli_##NAME##_rows = {sizeof(ROW), NAME##_read, NAME##_json, RELEASE}

static void rows_free(void *rows, size_t n)
{
    (void)n;
    tq_free(rows);
}

static void schedules_free(void *rows, size_t n)
{
    tq_schedule_array_free(rows, n);
}

STORE_ROWS(queue, tq_queue_info, tq_queue_list, cli_queue_json, rows_free);
STORE_ROWS(worker, tq_worker_info, tq_worker_list, cli_worker_json, rows_free);
STORE_ROWS(schedule, tq_schedule, tq_schedule_list, cli_schedule_json, schedules_free);

/* Text from the store as a JSON string, always: jansson refuses invalid
 * UTF-8 (and the field would silently go missing), so such text is given
 * with its invalid bytes as \xNN. NULL text is null. */
json_t *cli_json_text(const char *s)
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

json_t *cli_json_time(int64_t us)
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

void cli_json_bytes(json_t *o, const char *key, const void *p, size_t n)
{
    json_t *s = json_stringn((const char *)(p ? p : ""), n);
    if (s) {
        json_object_set_new(o, key, s);
        return;
    }
    char k[64], *b = base64(p, n); /* not UTF-8 */
    snprintf(k, sizeof k, "%s_base64", key);
    json_object_set_new(o, k, b ? json_string(b) : json_null());
    free(b);
}

json_t *cli_job_json(const tq_job *j, int with_payload)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(j->id));
    json_object_set_new(o, "queue", cli_json_text(j->queue));
    json_object_set_new(o, "state", json_string(tq_state_name(j->state)));
    json_object_set_new(o, "priority", json_integer(j->priority));
    json_object_set_new(o, "attempts", json_integer(j->attempts));
    json_object_set_new(o, "max_attempts", json_integer(j->max_attempts));
    json_object_set_new(o, "claims", json_integer(j->claim));
    json_object_set_new(o, "key", cli_json_text(j->key));
    json_object_set_new(o, "worker", cli_json_text(j->worker));
    json_object_set_new(o, "last_error", cli_json_text(j->last_error));
    json_object_set_new(o, "traceparent", cli_json_text(j->traceparent));
    json_object_set_new(o, "group", cli_json_text(j->group));
    json_object_set_new(o, "snoozes", json_integer(j->snoozes));
    json_object_set_new(o, "parents", json_integer(j->nparents));
    json_object_set_new(o, "waiting_for", json_integer(j->waiting_for));
    json_object_set_new(o, "timeout_us",
                        json_integer(j->timeout_us > 0 ? j->timeout_us : 0));
    json_object_set_new(o, "progress",
                        j->progress >= 0 ? json_integer(j->progress) : json_null());
    json_object_set_new(o, "progress_text", cli_json_text(j->progress_text));
    json_object_set_new(o, "created_at", cli_json_time(j->created_at));
    json_object_set_new(o, "run_at", cli_json_time(j->run_at));
    json_object_set_new(o, "started_at", cli_json_time(j->started_at));
    json_object_set_new(o, "finished_at", cli_json_time(j->finished_at));
    json_object_set_new(o, "lease_until", cli_json_time(j->lease_until));
    if (j->finished_at && j->started_at && j->state == TQ_DONE)
        json_object_set_new(o, "duration_us",
                            json_integer(j->finished_at - j->started_at));
    json_object_set_new(o, "payload_bytes", json_integer((json_int_t)j->payload_len));
    if (with_payload)
        cli_json_bytes(o, "payload", j->payload, j->payload_len);
    json_object_set_new(o, "result_bytes",
                        j->result_len >= 0 ? json_integer(j->result_len) : json_null());
    return o;
}

/* The edit distance of a and b (insertions, deletions, substitutions and
 * swaps of neighbours), for suggesting what a typo meant. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

const char *cli_nearest(const char *word, const char *const *choices, size_t n)
{
    size_t len = strlen(word), most = len < 6 ? 1 : 2, best = SIZE_MAX;
    const char *pick = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = distance(word, choices[i]);
        if (d <= most && d < best) {
            best = d;
            pick = choices[i];
        }
    }
    return pick;
}

int cli_job_id(const char *cmd, const char *text, int64_t *out)
{
    long long v;
    if (cli_int(cmd, "job id", text, 1, INT64_MAX, &v))
        return -1;
    *out = v;
    return 0;
}

int cli_job_ids(const cli_command *cmd, int argc, char **argv, int64_t **ids, size_t *n)
{
    *n = 0;
    *ids = malloc((size_t)(argc > optind ? argc - optind : 1) * sizeof **ids);
    if (!*ids) {
        cli_error(cmd->name, "out of memory");
        return EXIT_RUNTIME;
    }
    for (int i = optind; i < argc; i++)
        if (cli_job_id(cmd->name, argv[i], &(*ids)[(*n)++]))
            return EXIT_USAGE;
    return 0;
}

int cli_one_job_id(const cli_command *cmd, int argc, char **argv, int64_t *out)
{
    if (optind != argc - 1) {
        cli_error(cmd->name, "expected one job ID");
        return EXIT_USAGE;
    }
    return cli_job_id(cmd->name, argv[optind], out) ? EXIT_USAGE : 0;
}

int cli_queue_name(const char *cmd, const char *name)
{
    if (!tq_name_check(name))
        return 0;
    cli_error(cmd,
              "invalid queue name '%s': use 1 to 64 letters, digits, '_', '.' or '-'",
              name);
    return EXIT_USAGE;
}

json_t *cli_queue_json(const tq_queue_info *q)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", cli_json_text(q->name));
    json_object_set_new(o, "order", json_string(tq_order_name(q->order)));
    json_object_set_new(o, "lease_us", json_integer(q->lease_us));
    json_object_set_new(o, "max_attempts", json_integer(q->max_attempts));
    json_object_set_new(o, "backoff_base_us", json_integer(q->backoff_base_us));
    json_object_set_new(o, "backoff_cap_us", json_integer(q->backoff_cap_us));
    json_object_set_new(o, "keep_done", json_boolean(q->keep_done));
    json_object_set_new(o, "paused", json_boolean(q->paused));
    json_object_set_new(o, "max_running", json_integer(q->max_running));
    json_object_set_new(o, "max_running_per_group",
                        json_integer(q->max_running_per_group));
    json_object_set_new(o, "rate_limit", json_integer(q->rate_limit));
    json_object_set_new(o, "rate_period_us", json_integer(q->rate_period_us));
    json_object_set_new(o, "rate_burst", json_integer(q->rate_burst));
    json_object_set_new(o, "max_snoozes", json_integer(q->max_snoozes));
    json_object_set_new(o, "results", json_boolean(q->results));
    json_object_set_new(o, "timeout_us", json_integer(q->timeout_us));
    json_object_set_new(o, "retain_done_us", json_integer(q->retain_done_us));
    json_object_set_new(o, "retain_dead_us", json_integer(q->retain_dead_us));
    return o;
}

json_t *cli_counts_json(const int64_t count[TQ_STATE_COUNT])
{
    json_t *o = json_object();
    for (int i = 0; i < TQ_STATE_COUNT; i++)
        json_object_set_new(o, tq_state_name((tq_state)i), json_integer(count[i]));
    return o;
}

json_t *cli_worker_json(const tq_worker_info *w)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", cli_json_text(w->name));
    json_object_set_new(o, "host", cli_json_text(w->host));
    json_object_set_new(o, "pid", json_integer(w->pid));
    json_object_set_new(o, "reaper_pid", json_integer(w->reaper_pid));
    json_object_set_new(o, "status", json_string(cli_worker_status(w)));
    json_object_set_new(o, "started_at", cli_json_time(w->started_at));
    json_object_set_new(o, "heartbeat_at", cli_json_time(w->heartbeat_at));
    json_object_set_new(o, "stopped_at", cli_json_time(w->stopped_at));
    return o;
}

json_t *cli_schedule_json(const tq_schedule *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", cli_json_text(s->name));
    json_object_set_new(o, "queue", cli_json_text(s->queue));
    json_object_set_new(o, "schedule", cli_json_text(s->spec));
    json_object_set_new(o, "tz", cli_json_text(s->tz));
    json_object_set_new(o, "payload", cli_json_text(s->payload));
    json_object_set_new(o, "priority", json_integer(s->priority));
    json_object_set_new(o, "overlap", json_string(s->overlap_skip ? "skip" : "allow"));
    json_object_set_new(o, "next_slot", cli_json_time(s->next_slot_us));
    json_object_set_new(o, "last_slot", cli_json_time(s->last_slot_us));
    json_object_set_new(o, "last_job",
                        s->last_job ? json_integer(s->last_job) : json_null());
    return o;
}

const char *cli_worker_status(const tq_worker_info *w)
{
    return w->alive ? "alive" : w->stopped_at ? "stopped" : "gone";
}

json_t *cli_job_show_json(tq *db, const tq_job *j)
{
    json_t *o = cli_job_json(j, 1);
    void *res = NULL;
    size_t len = 0;
    if (j->result_len >= 0 && tq_job_result(&res, &len, db, j->id) == 0)
        cli_json_bytes(o, "result", res, len);
    tq_free(res);
    tq_parent *parents = NULL;
    size_t np = 0;
    if (j->nparents && tq_job_parent_ends(&parents, &np, db, j->id) == 0) {
        /* every parent, those done, those failed (dead or cancelled), as
         * the job counts them */
        json_t *a[3] = {json_array(), json_array(), json_array()};
        int ended = 0;
        for (size_t i = 0; i < np; i++) {
            const tq_state st = parents[i].state;
            json_array_append_new(a[0], json_integer(parents[i].id));
            if (st == TQ_DONE || st == TQ_DEAD || st == TQ_CANCELLED)
                json_array_append_new(a[st == TQ_DONE ? 1 : 2],
                                      json_integer(parents[i].id));
            ended |= parents[i].when_ended;
        }
        json_object_set_new(o, "parent_ids", a[0]);
        json_object_set_new(o, "parents_done", a[1]);
        json_object_set_new(o, "parents_failed", a[2]);
        json_object_set_new(o, "parents_when", json_string(ended ? "ended" : "done"));
    }
    tq_free(parents);
    return o;
}
