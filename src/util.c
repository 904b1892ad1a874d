/*
 * util.c - errors, clocks, durations, times, backoff, jobs' memory and
 * small helpers, below both the API (api.c, worker/) and the engines. Called from every
 * other file of the library and exported in part through tq.h for the tool.
 */
#define _DEFAULT_SOURCE /* timegm */
#include "tq_int.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *tq_strerror(int code)
{
    switch (code) {
#define TQ_ERRNO_CASE(name, c, text)                                                     \
    case c:                                                                              \
        return text;
        TQ_ERRNO_MAP(TQ_ERRNO_CASE)
#undef TQ_ERRNO_CASE
    case TQ_OK:
        return "success";
    case TQ_DUP:
        return "duplicate key: the existing job was kept";
    case TQ_REPLACED:
        return "duplicate key: the kept ready job took the new payload";
    default:
        return "unknown error";
    }
}

/* A message is one line, as tools print it: what follows a line break
 * (libpq's "\n\tIs the server running...?") goes on after "; ", and
 * trailing breaks go. */
static void one_line(char *s, size_t size)
{
    char buf[sizeof((tq *)0)->errmsg];
    size_t o = 0;
    for (const char *p = s; *p && o + 3 < sizeof buf;) {
        if (*p != '\n' && *p != '\r') {
            buf[o++] = *p++;
            continue;
        }
        while (*p == '\n' || *p == '\r' || *p == '\t' || *p == ' ')
            p++;
        if (*p && o > 0) {
            buf[o++] = ';';
            buf[o++] = ' ';
        }
    }
    buf[o] = '\0';
    snprintf(s, size, "%s", buf);
}

int tq__seterr(tq *db, int code, const char *fmt, ...)
{
    if (db) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(db->errmsg, sizeof db->errmsg, fmt, ap);
        va_end(ap);
        one_line(db->errmsg, sizeof db->errmsg);
    }
    return code;
}

void tq__clearerr(tq *db)
{
    if (db)
        db->errmsg[0] = '\0';
}

const char *tq_errmsg(const tq *db)
{
    if (!db)
        return "no handle (out of memory?)";
    return db->errmsg;
}

void tq_free(void *p)
{
    free(p);
}

int64_t tq__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t tq__mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void tq__sleep_us(int64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

size_t tq__utf8_seq(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    /* The ranges of the second byte that keep a lead byte valid (Unicode,
     * table 3-7); every later byte is 80..BF. */
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

char *tq_utf8_clean(const char *s)
{
    return tq__utf8_clean(s);
}

/* Whether p starts a character that reorders the text shown around it:
 * U+200E, U+200F, U+202A..U+202E, U+2066..U+2069 (the bidirectional
 * marks, embeddings, overrides and isolates). */
static int bidi_control(const unsigned char *p)
{
    if (p[0] != 0xe2)
        return 0;
    return (p[1] == 0x80 &&
            (p[2] == 0x8e || p[2] == 0x8f || (p[2] >= 0xaa && p[2] <= 0xae))) ||
           (p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9);
}

char *tq_text_printable(const char *s)
{
    char *clean = tq__utf8_clean(s);
    if (!clean)
        return NULL;
    /* At most 4 characters for each byte: "\xNN". */
    char *out = malloc(4 * strlen(clean) + 1), *o = out;
    if (!out) {
        free(clean);
        return NULL;
    }
    for (const unsigned char *p = (const unsigned char *)clean; *p; p++) {
        const char *named = *p == 0x1b   ? "\\e"
                            : *p == '\n' ? "\\n"
                            : *p == '\r' ? "\\r"
                            : *p == '\t' ? "\\t"
                                         : NULL;
        if (named)
            o += sprintf(o, "%s", named);
        else if (*p < 0x20 || *p == 0x7f)
            o += sprintf(o, "\\x%02x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) /* U+0080..U+009F */
            o += sprintf(o, "\\xc2\\x%02x", *++p);
        else if (bidi_control(p)) { /* written \uXXXX: it cannot reorder the line */
            o += sprintf(
                o, "\\u%04x",
                (unsigned)((p[0] & 0x0f) << 12 | (p[1] & 0x3f) << 6 | (p[2] & 0x3f)));
            p += 2;
        } else
            *o++ = (char)*p;
    }
    *o = '\0';
    free(clean);
    return out;
}

size_t tq__utf8_cut(const char *p, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)p[max] & 0xC0) == 0x80)
        max--;
    return max;
}

char *tq__utf8_clean(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), bad = 0;
    for (size_t i = 0, k; i < n; i += k ? k : 1)
        if (!(k = tq__utf8_seq(p + i, n - i)))
            bad++;
    char *out = malloc(n + 3 * bad + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0, k; i < n; i += k ? k : 1) {
        if ((k = tq__utf8_seq(p + i, n - i))) {
            memcpy(o, p + i, k);
            o += k;
        } else {
            o += sprintf(o, "\\x%02x", p[i]);
        }
    }
    *o = '\0';
    return out;
}

char *tq__put_i64(char *p, int64_t v)
{
    char digits[20];
    size_t k = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do
        digits[k++] = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *p++ = '-';
    while (k)
        *p++ = digits[--k];
    return p;
}

char *tq__strdup(const char *s)
{
    return s ? tq__memdup(s, strlen(s) + 1, 0) : NULL;
}

/* Copies len bytes and appends `extra` zero bytes (for a NUL terminator). */
void *tq__memdup(const void *p, size_t len, size_t extra)
{
    unsigned char *q = malloc(len + extra ? len + extra : 1);
    if (!q)
        return NULL;
    if (len)
        memcpy(q, p, len);
    memset(q + len, 0, extra);
    return q;
}

/* The names of tq_state, tq_order and tq_unique, in their order: a name
 * from a value (NULL out of range), and a value from a name (-1: none). */
static const char *const state_names[TQ_STATE_COUNT] = {"ready", "running",   "done",
                                                        "dead",  "cancelled", "waiting"};
static const char *const order_names[] = {"fifo", "lifo", "unordered"};
static const char *const unique_names[] = {"stored", "queued", "active"};

static const char *name_at(const char *const *names, int n, int v)
{
    return v >= 0 && v < n ? names[v] : NULL;
}

static int name_index(const char *const *names, int n, const char *name)
{
    for (int i = 0; name && i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

/* tq_state_name and tq_state_parse, and the same pair for tq_order and
 * tq_unique: a value's name from NAMES, and the value of a name. */
#define NAMED_VALUES(type, names, n)                                                     \
    const char *type##_name(type v)                                                      \
    {                                                                                    \
        return name_at(names, n, (int)v);                                                \
    }                                                                                    \
                                                                                         \
    int type##_parse(type *out, const char *name)                                        \
    {                                                                                    \
        int i = name_index(names, n, name);                                              \
        if (i >= 0)                                                                      \
            *out = (type)i;                                                              \
        return i >= 0 ? 0 : TQ_EINVAL;                                                   \
    }

NAMED_VALUES(tq_state, state_names, TQ_STATE_COUNT)
NAMED_VALUES(tq_order, order_names, 3)
NAMED_VALUES(tq_unique, unique_names, 3)

int tq_name_check(const char *name)
{
    size_t n = 0;
    if (!name)
        return TQ_EINVAL;
    for (const char *p = name; *p; p++, n++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || c == '_' || c == '.' || c == '-') || c > 127)
            return TQ_EINVAL;
    }
    return n >= 1 && n <= 64 ? 0 : TQ_EINVAL;
}

/* ---- durations --------------------------------------------------------- */

/* n lowercase hex digits at s, not all zero if nonzero is set. */
static int hex_field(const char *s, size_t n, int nonzero)
{
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
        any |= s[i] != '0';
    }
    return !nonzero || any;
}

int tq_traceparent_check(const char *v)
{
    /* version "-" trace-id "-" parent-id "-" flags: 2, 32, 16, 2 hex digits
     * (W3C Trace Context). A version other than 00 may add fields after a
     * '-'; ff is invalid. */
    size_t n = v ? strnlen(v, 257) : 0;
    if (n < 55 || n > 256 || !hex_field(v, 2, 0) || v[2] != '-' ||
        !hex_field(v + 3, 32, 1) || v[35] != '-' || !hex_field(v + 36, 16, 1) ||
        v[52] != '-' || !hex_field(v + 53, 2, 0) || strncmp(v, "ff", 2) == 0)
        return TQ_EINVAL;
    if (n > 55 && (strncmp(v, "00", 2) == 0 || v[55] != '-'))
        return TQ_EINVAL;
    return 0;
}

int tq_duration_parse(int64_t *out_us, const char *text)
{
    static const struct {
        const char *unit;
        int64_t us;
    } units[] = {{"ms", 1000},          {"us", 1},           {"s", 1000000},
                 {"m", 60 * 1000000LL}, {"h", 3600000000LL}, {"d", 86400000000LL}};
    const char *p = text;
    int64_t total = 0;
    int parts = 0;

    if (!text || !*text)
        return TQ_EINVAL;
    while (*p) {
        if (!isdigit((unsigned char)*p))
            return TQ_EINVAL;
        /* DIGITS[.DIGITS]: no sign, exponent or hex, which strtod allows.
         * The whole part is counted exactly; the fraction is cut to 1 us. */
        int64_t whole = 0;
        double frac = 0, scale = 1;
        for (; isdigit((unsigned char)*p); p++)
            if (__builtin_mul_overflow(whole, 10, &whole) ||
                __builtin_add_overflow(whole, *p - '0', &whole))
                return TQ_EINVAL;
        if (*p == '.') {
            p++;
            if (!isdigit((unsigned char)*p))
                return TQ_EINVAL;
            for (; isdigit((unsigned char)*p); p++)
                frac += (*p - '0') * (scale /= 10);
        }
        int64_t mult = 0;
        if (!*p) {
            if (parts > 0)
                return TQ_EINVAL; /* "1h30" is ambiguous */
            mult = 1000000;       /* a plain number is seconds */
        } else {
            for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
                size_t ul = strlen(units[i].unit);
                if (strncmp(p, units[i].unit, ul) == 0 &&
                    !isalpha((unsigned char)p[ul])) {
                    mult = units[i].us;
                    p += ul;
                    break;
                }
            }
            if (!mult)
                return TQ_EINVAL;
        }
        int64_t us;
        if (__builtin_mul_overflow(whole, mult, &us) ||
            __builtin_add_overflow(us, (int64_t)(frac * (double)mult), &us) ||
            __builtin_add_overflow(total, us, &total))
            return TQ_EINVAL;
        parts++;
    }
    *out_us = total;
    return 0;
}

char *tq_duration_format(char *buf, size_t len, int64_t us)
{
    const char *sign = us < 0 ? "-" : "";
    double a = us < 0 ? -(double)us : (double)us;
    if (us == 0)
        snprintf(buf, len, "0s"); /* nothing, said in the unit people use */
    else if (a < 1000)
        snprintf(buf, len, "%s%.0fus", sign, a);
    else if (a < 1000000)
        snprintf(buf, len, "%s%.3gms", sign, a / 1e3);
    else if (a < 60e6)
        snprintf(buf, len, "%s%.3gs", sign, a / 1e6);
    else if (a < 3600e6)
        snprintf(buf, len, "%s%.3gm", sign, a / 60e6);
    else if (a < 86400e6)
        snprintf(buf, len, "%s%.3gh", sign, a / 3600e6);
    else
        snprintf(buf, len, "%s%.3gd", sign, a / 86400e6);
    return buf;
}

/* ---- absolute times ---------------------------------------------------- */

#define TIME_MAX_S 253402300799LL /* 9999-12-31T23:59:59Z */

int tq_time_parse(int64_t *out_us, const char *text)
{
    struct tm tm;
    int n = 0, sec = 0;
    char tail[16] = "";

    if (!text || !*text)
        return TQ_EINVAL;
    if (text[0] == '@') {
        char *end;
        errno = 0;
        long long s = strtoll(text + 1, &end, 10);
        if (errno || end == text + 1 || *end || s < 0 || s > TIME_MAX_S)
            return TQ_EINVAL;
        *out_us = (int64_t)s * 1000000;
        return 0;
    }
    /* A date alone, or with a zone: its first moment ("YYYY-MM-DD[Z|+HH:MM]"). */
    char midnight[40];
    if (strlen(text) >= 10 && strlen(text) <= 16 && text[4] == '-' && text[7] == '-' &&
        (text[10] == '\0' || text[10] == 'Z' || text[10] == '+' || text[10] == '-')) {
        snprintf(midnight, sizeof midnight, "%.10sT00:00%s", text, text + 10);
        return tq_time_parse(out_us, midnight);
    }
    memset(&tm, 0, sizeof tm);
    if (sscanf(text, "%4d-%2d-%2d%*1[T ]%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &n) != 5)
        return TQ_EINVAL;
    const char *p = text + n;
    int64_t frac_us = 0;
    if (*p == ':') {
        int m = 0;
        if (sscanf(p, ":%2d%n", &sec, &m) != 1 || m != 3)
            return TQ_EINVAL;
        p += m;
        /* .FRACTION of a second, as tq prints times; cut to 1 us. */
        if (*p == '.') {
            int64_t scale = 100000;
            if (!isdigit((unsigned char)*++p))
                return TQ_EINVAL;
            for (; isdigit((unsigned char)*p); p++, scale /= 10)
                frac_us += (*p - '0') * scale;
        }
    }
    if (strlen(p) >= sizeof tail)
        return TQ_EINVAL;
    strcpy(tail, p);
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || sec > 60 || tm.tm_year < 1970)
        return TQ_EINVAL;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = sec;
    time_t t;
    if (tail[0] == '\0') {
        tm.tm_isdst = -1;
        t = mktime(&tm);
    } else if (strcmp(tail, "Z") == 0) {
        t = timegm(&tm);
    } else {
        int hh, mm, k = 0;
        if ((tail[0] != '+' && tail[0] != '-') ||
            sscanf(tail + 1, "%2d:%2d%n", &hh, &mm, &k) != 2 || k != 5 || tail[1 + k] ||
            hh > 23 || mm > 59)
            return TQ_EINVAL;
        t = timegm(&tm);
        int off = (hh * 60 + mm) * 60;
        t += tail[0] == '+' ? -off : off;
    }
    /* The same range as @SECONDS: from 1970 to the end of 9999, in UTC. */
    if (t == (time_t)-1 || t < 0 || t > TIME_MAX_S)
        return TQ_EINVAL;
    *out_us = (int64_t)t * 1000000 + frac_us;
    return 0;
}

char *tq_time_format(char *buf, size_t len, int64_t us)
{
    /* Rounded down, also before 1970: -1 us is 23:59:59.999 of 1969-12-31. */
    int64_t sec = us / 1000000, sub = us % 1000000;
    if (sub < 0) { /* (us - sub) would overflow near INT64_MIN: make fuzz */
        sub += 1000000;
        sec--;
    }
    time_t t = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(buf, len, "@%lld.%06lld", (long long)t, (long long)sub);
        return buf;
    }
    snprintf(buf, len, "%04lld-%02d-%02dT%02d:%02d:%02d.%03dZ",
             (long long)tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (int)(sub / 1000));
    return buf;
}

/* ---- backoff and randomness -------------------------------------------- */

int64_t tq__backoff_us(int64_t base_us, int64_t cap_us, int attempt, double rnd)
{
    if (base_us <= 0 || attempt < 1)
        return 0;
    int64_t d = base_us;
    for (int i = 1; i < attempt && d < cap_us; i++)
        d = d > INT64_MAX / 2 ? INT64_MAX : d * 2;
    if (cap_us > 0 && d > cap_us)
        d = cap_us;
    /* Equal jitter: between d/2 and d. */
    return d / 2 + (int64_t)(rnd * (double)(d - d / 2));
}

static _Thread_local uint64_t rng_state;

double tq__random(void)
{
    if (rng_state == 0)
        rng_state = ((uint64_t)tq__mono_us() << 20) ^ (uint64_t)getpid() ^
                    (uint64_t)(uintptr_t)&rng_state;
    /* xorshift64*: plenty for jitter, not for secrets. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

int64_t tq_percentile(int64_t *v, size_t n, double q);

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t tq_percentile(int64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_i64);
    if (q <= 0)
        return v[0];
    if (q >= 1)
        return v[n - 1];
    /* Nearest rank. */
    size_t rank = (size_t)(q * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

int tq__schedule_fill(tq *db, tq_schedule *s, const char *name, const char *queue,
                      const char *spec, const char *tz, const void *payload, size_t len,
                      int priority, int overlap_skip, int64_t next_us, int64_t last_us,
                      int64_t last_job)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    snprintf(s->queue, sizeof s->queue, "%s", queue ? queue : "");
    snprintf(s->spec, sizeof s->spec, "%s", spec ? spec : "");
    snprintf(s->tz, sizeof s->tz, "%s", tz ? tz : "UTC");
    if (!(s->payload = malloc(len + 1)))
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    if (len)
        memcpy(s->payload, payload, len);
    ((char *)s->payload)[len] = '\0';
    s->payload_len = len;
    s->priority = priority;
    s->overlap_skip = !!overlap_skip;
    s->next_slot_us = next_us;
    s->last_slot_us = last_us;
    s->last_job = last_job;
    return 0;
}

void tq_schedule_array_free(tq_schedule *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i].payload);
    free(v);
}

void tq__queue_defaults(tq_queue_info *q, const char *name)
{
    memset(q, 0, sizeof *q);
    snprintf(q->name, sizeof q->name, "%s", name ? name : "");
    q->order = TQ_FIFO;
    q->lease_us = 30 * 1000000LL;
    q->max_attempts = 3;
    q->backoff_base_us = 1000000;
    q->backoff_cap_us = 3600 * 1000000LL;
    q->keep_done = 1;
    q->paused = 0;
    q->max_snoozes = TQ__MAX_SNOOZES_DEFAULT;
}

/* ---- jobs' memory (the engines fill tq_job, the API hands it out) ------ */

void tq_job_free(tq_job *job)
{
    tq_job_array_free(job, job ? 1 : 0);
}

void tq__job_clear(tq_job *j)
{
    free(j->queue);
    free(j->payload);
    free(j->key);
    free(j->worker);
    free(j->last_error);
    free(j->traceparent);
    free(j->group);
    free(j->progress_text);
    memset(j, 0, sizeof *j);
}

void tq_job_array_free(tq_job *jobs, size_t n)
{
    if (!jobs)
        return;
    for (size_t i = 0; i < n; i++)
        tq__job_clear(&jobs[i]);
    free(jobs);
}
