/*
 * cron.c - periodic jobs' schedules (cron.h).
 *
 * Local times are computed here, not by the C library: localtime_r and
 * mktime read one process-wide zone (TZ), and a worker serves schedules of
 * many zones, perhaps from several threads. A zone is its TZif file from
 * the system's database (RFC 8536): its transitions, then its POSIX rule
 * for the years after the last one.
 */
#include "cron.h"

#include "../include/tq.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DAY_S       86400
#define SEARCH_DAYS (9 * 366) /* a 29 February can be eight years away */

static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (len)
        vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- civil dates (proleptic Gregorian, days since 1970-01-01) ----------- */

static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* 0 Sunday ... 6 Saturday; 1970-01-01 was a Thursday. */
static int weekday(int64_t days)
{
    int64_t w = (days + 4) % 7;
    return (int)(w < 0 ? w + 7 : w);
}

static int leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int month_days(int64_t y, int m)
{
    static const int n[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : n[m - 1];
}

static int64_t floor_div(int64_t a, int64_t b)
{
    const int64_t q = a / b;
    return a % b != 0 && (a < 0) != (b < 0) ? q - 1 : q;
}

/* ---- the spec ------------------------------------------------------------- */

typedef struct field {
    const char *what;
    int lo, hi;
    const char *const *names; /* three letters each, for lo, lo + 1, ... */
} field;

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                          "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const day_names[] = {"sun", "mon", "tue", "wed",
                                        "thu", "fri", "sat", NULL};

static const field F_SEC = {"second", 0, 59, NULL};
static const field F_MIN = {"minute", 0, 59, NULL};
static const field F_HOUR = {"hour", 0, 23, NULL};
static const field F_DOM = {"day of month", 1, 31, NULL};
static const field F_MON = {"month", 1, 12, month_names};
static const field F_DOW = {"day of week", 0, 7, day_names}; /* 7 is Sunday too */

/* A number or a name at *p, advancing it. */
static int field_value(const field *f, const char **p, const char *end, int *out,
                       char *err, size_t errlen)
{
    const char *s = *p;
    if (s < end && isdigit((unsigned char)*s)) {
        long v = 0;
        while (s < end && isdigit((unsigned char)*s) && v < 1000)
            v = v * 10 + (*s++ - '0');
        if (v < f->lo || v > f->hi)
            return fail(err, errlen, "%s %ld is out of range %d-%d", f->what, v, f->lo,
                        f->hi);
        *out = (int)v;
        *p = s;
        return 0;
    }
    for (int i = 0; f->names && f->names[i]; i++)
        if (end - s >= 3 && strncasecmp(s, f->names[i], 3) == 0 &&
            (end - s == 3 || !isalpha((unsigned char)s[3]))) {
            *out = f->lo + i;
            *p = s + 3;
            return 0;
        }
    return fail(err, errlen, "unexpected '%.*s' in the %s field", (int)(end - s), s,
                f->what);
}

/* One field, [text, end): a list of *, N or N-M, each with an optional
 * /STEP (N/STEP is N-max/STEP). */
static int parse_field(const field *f, const char *text, const char *end, uint64_t *bits,
                       int *star, char *err, size_t errlen)
{
    *bits = 0;
    *star = text < end && *text == '*';
    const char *p = text;
    for (;;) {
        int a, b, step = 1, range = 1;
        const char *item = p;
        if (p < end && *p == '*') {
            a = f->lo;
            b = f->hi == 7 ? 6 : f->hi;
            p++;
        } else {
            if (field_value(f, &p, end, &a, err, errlen))
                return -1;
            b = a;
            range = p < end && *p == '-';
            if (range) {
                p++;
                if (field_value(f, &p, end, &b, err, errlen))
                    return -1;
                if (b < a)
                    return fail(err, errlen, "%s range '%.*s' runs backwards", f->what,
                                (int)(p - item), item);
            }
        }
        if (p < end && *p == '/') {
            const char *s = ++p;
            long v = 0;
            while (p < end && isdigit((unsigned char)*p) && v < 1000)
                v = v * 10 + (*p++ - '0');
            if (p == s || v < 1 || v > f->hi)
                return fail(err, errlen, "bad step '%.*s' in the %s field",
                            (int)(p - s + (p == s && p < end)), s, f->what);
            step = (int)v;
            if (!range) /* N/STEP: from N on */
                b = f->hi;
        }
        for (int v = a; v <= b; v += step)
            *bits |= 1ULL << (f->hi == 7 && v == 7 ? 0 : v);
        if (p == end)
            return 0;
        if (*p != ',' || p + 1 == end)
            return fail(err, errlen, "unexpected '%.*s' in the %s field", (int)(end - p),
                        p, f->what);
        p++;
    }
}

int tq__cron_parse(tq__cron *c, const char *spec, char *err, size_t errlen)
{
    static const struct {
        const char *name, *spec;
    } macros[] = {{"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
                  {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
                  {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
                  {"@hourly", "0 * * * *"}};
    memset(c, 0, sizeof *c);
    if (!spec || !*spec)
        return fail(err, errlen, "empty schedule");
    if (strlen(spec) > TQ__CRON_SPEC_MAX)
        return fail(err, errlen, "schedule longer than %d bytes", TQ__CRON_SPEC_MAX);
    if (strncmp(spec, "@every", 6) == 0 && (spec[6] == ' ' || spec[6] == '\t')) {
        const char *d = spec + 6;
        while (*d == ' ' || *d == '\t')
            d++;
        int64_t us;
        if (tq_duration_parse(&us, d) || us < 1000000 || us % 1000000 ||
            us > 3650LL * DAY_S * 1000000)
            return fail(err, errlen,
                        "@every takes whole seconds from 1s to 3650d, as in @every 10s");
        c->every_us = us;
        return 0;
    }
    if (spec[0] == '@') {
        for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
            if (strcmp(spec, macros[i].name) == 0)
                return tq__cron_parse(c, macros[i].spec, err, errlen);
        return fail(err, errlen,
                    "unknown '%s': use @hourly, @daily, @weekly, @monthly, @yearly or "
                    "@every DURATION",
                    spec);
    }
    const char *start[7], *end[7];
    int n = 0;
    for (const char *p = spec; *p;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        if (n == 6)
            return fail(err, errlen, "more than 6 fields");
        start[n] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        end[n++] = p;
    }
    if (n != 5 && n != 6)
        return fail(err, errlen,
                    "a schedule has 5 fields (minute hour day-of-month month "
                    "day-of-week), 6 with seconds first, or is @hourly, @daily, "
                    "@weekly, @monthly, @yearly or @every DURATION");
    const field *fields[6] = {&F_SEC, &F_MIN, &F_HOUR, &F_DOM, &F_MON, &F_DOW};
    uint64_t bits[6] = {1}; /* 5 fields: second 0 */
    int star[6] = {0};
    for (int i = 0; i < n; i++) {
        int k = i + (n == 5);
        if (parse_field(fields[k], start[i], end[i], &bits[k], &star[k], err, errlen))
            return -1;
    }
    c->sec = bits[0];
    c->min = bits[1];
    c->hour = (uint32_t)bits[2];
    c->dom = (uint32_t)bits[3];
    c->mon = (uint16_t)bits[4];
    c->dow = (uint8_t)bits[5];
    c->dom_star = star[3];
    c->dow_star = star[5];
    if (tq__cron_next(c, NULL, 0) < 0)
        return fail(err, errlen, "'%s' never happens", spec);
    return 0;
}

static int day_matches(const tq__cron *c, int64_t day, int dom, int mon)
{
    if (!(c->mon & (1u << mon)))
        return 0;
    const int d = (c->dom >> dom) & 1, w = (c->dow >> weekday(day)) & 1;
    return c->dom_star || c->dow_star ? d && w : d || w;
}

/* ---- zones ---------------------------------------------------------------- */

/* A POSIX TZ rule's date: Mm.w.d, Jn (1-365, no 29 February) or n (0-365). */
typedef struct rule_date {
    char kind; /* 'M', 'J' or 'n' */
    int m, w, d;
    int64_t time; /* seconds after local midnight; may be negative or past 24h */
} rule_date;

typedef struct posix_rule {
    int64_t std_off, dst_off; /* seconds east of UTC */
    int has_dst;
    rule_date start, end;
} posix_rule;

struct tq__zone {
    size_t n;
    int64_t *at;  /* transitions, UTC seconds, ascending */
    int32_t *off; /* the offset from each on */
    int32_t off0; /* before the first */
    int has_rule;
    posix_rule rule;
};

static int64_t rule_day(const rule_date *r, int64_t y)
{
    const int64_t jan1 = days_from_civil(y, 1, 1);
    if (r->kind == 'J')
        return jan1 + r->d - 1 + (leap(y) && r->d >= 60);
    if (r->kind == 'n')
        return jan1 + r->d;
    const int64_t first = days_from_civil(y, r->m, 1);
    int64_t day = first + (r->d - weekday(first) + 7) % 7 + 7 * (r->w - 1);
    while (day >= first + month_days(y, r->m))
        day -= 7;
    return day;
}

static int64_t rule_offset(const posix_rule *r, int64_t t)
{
    if (!r->has_dst)
        return r->std_off;
    int64_t y;
    int m, d;
    civil_from_days(floor_div(t + r->std_off, DAY_S), &y, &m, &d);
    const int64_t start = rule_day(&r->start, y) * DAY_S + r->start.time - r->std_off;
    const int64_t end = rule_day(&r->end, y) * DAY_S + r->end.time - r->dst_off;
    const int dst = start < end ? t >= start && t < end : !(t >= end && t < start);
    return dst ? r->dst_off : r->std_off;
}

int64_t tq__zone_offset(const tq__zone *z, int64_t t)
{
    if (!z)
        return 0;
    if (z->has_rule && (z->n == 0 || t >= z->at[z->n - 1]))
        return rule_offset(&z->rule, t);
    if (z->n == 0 || t < z->at[0])
        return z->off0;
    size_t lo = 0, hi = z->n; /* the last transition at or before t */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->at[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return z->off[lo];
}

/* [+-]hh[:mm[:ss]] at *p: seconds, advancing *p; -1 on a bad form. */
static int posix_hms(const char **p, int64_t *out)
{
    const char *s = *p;
    int sign = 1;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    int64_t v = 0, part = 0;
    for (int k = 0; k < 3; k++) {
        if (!isdigit((unsigned char)*s))
            return -1;
        part = 0;
        for (int i = 0; i < 3 && isdigit((unsigned char)*s); i++)
            part = part * 10 + (*s++ - '0');
        v = v * 60 + part;
        if (*s != ':') {
            for (int r = k; r < 2; r++)
                v *= 60;
            break;
        }
        s++;
    }
    *out = sign * v;
    *p = s;
    return 0;
}

static int posix_name(const char **p)
{
    const char *s = *p;
    if (*s == '<') {
        while (*s && *s != '>')
            s++;
        if (*s != '>')
            return -1;
        *p = s + 1;
        return 0;
    }
    while (isalpha((unsigned char)*s))
        s++;
    if (s - *p < 3)
        return -1;
    *p = s;
    return 0;
}

static int posix_date(const char **p, rule_date *r)
{
    const char *s = *p;
    char *e;
    memset(r, 0, sizeof *r);
    r->time = 7200;
    if (*s == 'M') {
        r->kind = 'M';
        r->m = (int)strtol(s + 1, &e, 10);
        if (*e != '.')
            return -1;
        r->w = (int)strtol(e + 1, &e, 10);
        if (*e != '.')
            return -1;
        r->d = (int)strtol(e + 1, &e, 10);
        if (r->m < 1 || r->m > 12 || r->w < 1 || r->w > 5 || r->d < 0 || r->d > 6)
            return -1;
    } else {
        r->kind = *s == 'J' ? 'J' : 'n';
        if (*s == 'J')
            s++;
        if (!isdigit((unsigned char)*s))
            return -1;
        r->d = (int)strtol(s, &e, 10);
        if (r->d > 365 || (r->kind == 'J' && r->d < 1))
            return -1;
    }
    if (*e == '/') {
        const char *t = e + 1;
        if (posix_hms(&t, &r->time))
            return -1;
        e = (char *)t;
    }
    *p = e;
    return 0;
}

/* The TZ string of a TZif footer, e.g. CET-1CEST,M3.5.0,M10.5.0/3. */
static int posix_parse(const char *s, posix_rule *r)
{
    int64_t off;
    memset(r, 0, sizeof *r);
    if (posix_name(&s) || posix_hms(&s, &off))
        return -1;
    r->std_off = -off; /* POSIX counts west */
    if (!*s)
        return 0;
    if (posix_name(&s))
        return -1;
    r->has_dst = 1;
    r->dst_off = r->std_off + 3600;
    if (*s && *s != ',') {
        if (posix_hms(&s, &off))
            return -1;
        r->dst_off = -off;
    }
    if (!*s) { /* no rule: the US one, as POSIX leaves it to the system */
        s = ",M3.2.0,M11.1.0";
    }
    if (*s++ != ',' || posix_date(&s, &r->start) || *s++ != ',' ||
        posix_date(&s, &r->end) || *s)
        return -1;
    return 0;
}

static int64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    if (n == 4)
        return (int32_t)(uint32_t)v;
    return (int64_t)v;
}

/* The TZif data in buf: 0, or -1 if it is not well formed. */
static int tzif_parse(tq__zone *z, const unsigned char *buf, size_t len)
{
    if (len < 44 || memcmp(buf, "TZif", 4) != 0)
        return -1;
    const unsigned char *p = buf, *end = buf + len;
    int tsize = 4;
    for (int pass = 0; pass < 2; pass++) {
        if (end - p < 44 || memcmp(p, "TZif", 4) != 0)
            return -1;
        const int version = p[4];
        int64_t cnt[6];
        for (int i = 0; i < 6; i++)
            cnt[i] = (int64_t)(uint32_t)be(p + 20 + 4 * i, 4);
        const int64_t isut = cnt[0], isstd = cnt[1], leapcnt = cnt[2], timecnt = cnt[3],
                      typecnt = cnt[4], charcnt = cnt[5];
        if (timecnt > 100000 || typecnt < 1 || typecnt > 256 || charcnt > 65536 ||
            leapcnt > 100000 || isut > 256 || isstd > 256)
            return -1;
        const int64_t body = timecnt * tsize + timecnt + typecnt * 6 + charcnt +
                             leapcnt * (tsize + 4) + isstd + isut;
        p += 44;
        if (end - p < body)
            return -1;
        if (pass == 0 && version >= '2') { /* skip to the 64-bit block */
            p += body;
            tsize = 8;
            continue;
        }
        const unsigned char *times = p, *idx = p + timecnt * tsize,
                            *types = idx + timecnt;
        z->n = (size_t)timecnt;
        z->at = malloc((z->n + 1) * sizeof *z->at);
        z->off = malloc((z->n + 1) * sizeof *z->off);
        if (!z->at || !z->off)
            return -1;
        for (int64_t i = 0; i < timecnt; i++) {
            if (idx[i] >= typecnt)
                return -1;
            z->at[i] = be(times + i * tsize, tsize);
            z->off[i] = (int32_t)be(types + idx[i] * 6, 4);
            if (i && z->at[i] <= z->at[i - 1])
                return -1;
        }
        z->off0 = (int32_t)be(types, 4);
        p += body;
        if (tsize == 8 && p < end && *p == '\n') { /* the footer */
            const unsigned char *nl = memchr(p + 1, '\n', (size_t)(end - p - 1));
            if (!nl || nl - p - 1 > 127)
                return -1;
            char tz[128];
            memcpy(tz, p + 1, (size_t)(nl - p - 1));
            tz[nl - p - 1] = '\0';
            if (tz[0]) {
                if (posix_parse(tz, &z->rule))
                    return -1;
                z->has_rule = 1;
            }
        }
        return 0;
    }
    return -1;
}

void tq__zone_free(tq__zone *z)
{
    if (!z)
        return;
    free(z->at);
    free(z->off);
    free(z);
}

int tq__zone_load(tq__zone **out, const char *name, char *err, size_t errlen)
{
    *out = NULL;
    if (!name || strcmp(name, "UTC") == 0)
        return 0;
    size_t len = strlen(name);
    /* Not right/... (leap seconds counted: slots off by half a minute),
     * nor localtime or posixrules (another zone on each host). */
    if (strncmp(name, "right/", 6) == 0 || strcmp(name, "localtime") == 0 ||
        strcmp(name, "posixrules") == 0)
        return fail(err, errlen,
                    "time zone '%s' is not a place: use a name such as Europe/Berlin",
                    name);
    if (len == 0 || len > TQ__ZONE_NAME_MAX || name[0] == '/' || strstr(name, "..") ||
        strspn(name,
               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/_+-") !=
            len)
        return fail(err, errlen,
                    "invalid time zone '%s': use a name such as Europe/Berlin", name);
    const char *dir = getenv("TZDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, errlen, "unknown time zone '%s' (no %s: %s)", name, path,
                    strerror(errno));
    unsigned char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    tq__zone *z = calloc(1, sizeof *z);
    if (!buf || !z || tzif_parse(z, buf, n)) {
        free(buf);
        tq__zone_free(z);
        return fail(err, errlen, "unknown time zone '%s' (%s is not a time-zone file)",
                    name, path);
    }
    free(buf);
    *out = z;
    return 0;
}

/* ---- slots ---------------------------------------------------------------- */

/* The first UTC second whose local time in z is local, or 0 when that local
 * time does not exist. Offsets change at most once within a day either
 * side, so the offsets a day before and after are the only candidates. */
static int local_to_utc(const tq__zone *z, int64_t local, int64_t *out)
{
    const int64_t cand[2] = {tq__zone_offset(z, local - DAY_S),
                             tq__zone_offset(z, local + DAY_S)};
    int found = 0;
    for (int i = 0; i < 2; i++) {
        const int64_t t = local - cand[i];
        if (tq__zone_offset(z, t) == cand[i] && (!found || t < *out)) {
            *out = t;
            found = 1;
        }
    }
    return found;
}

int64_t tq__cron_next(const tq__cron *c, const tq__zone *z, int64_t after_us)
{
    if (c->every_us > 0) {
        return (floor_div(after_us, c->every_us) + 1) * c->every_us;
    }
    const int64_t after = floor_div(after_us, 1000000);
    const int64_t from =
        after + tq__zone_offset(z, after) + 1; /* local, strictly after */
    int64_t day = floor_div(from, DAY_S);
    for (int n = 0; n < SEARCH_DAYS; n++, day++) {
        int64_t y;
        int m, d;
        civil_from_days(day, &y, &m, &d);
        if (!(c->mon & (1u << m))) { /* on to the next month */
            day += month_days(y, m) - d;
            continue;
        }
        if (!day_matches(c, day, d, m))
            continue;
        const int64_t base = day * DAY_S;
        for (int h = 0; h < 24; h++) {
            if (!(c->hour >> h & 1) || base + h * 3600 + 3599 < from)
                continue;
            for (int mi = 0; mi < 60; mi++) {
                const int64_t hm = base + h * 3600 + mi * 60;
                if (!(c->min >> mi & 1) || hm + 59 < from)
                    continue;
                for (int s = 0; s < 60; s++) {
                    int64_t t = 0;
                    if (!(c->sec >> s & 1) || hm + s < from ||
                        !local_to_utc(z, hm + s, &t) || t <= after)
                        continue;
                    return t * 1000000;
                }
            }
        }
    }
    return -1;
}

int64_t tq__cron_last(const tq__cron *c, const tq__zone *z, int64_t since_us,
                      int64_t now_us)
{
    if (since_us > now_us)
        return -1;
    if (c->every_us > 0) {
        int64_t s = tq__cron_next(c, z, now_us) - c->every_us;
        return s >= since_us ? s : -1;
    }
    /* Back from now in widening windows, so that a long gap (a schedule
     * every second, no worker for a month) costs no walk over every slot
     * missed; then forward to the last one. */
    static const int64_t window_s[] = {
        60, 3600, DAY_S, 32LL * DAY_S, 367LL * DAY_S, (int64_t)SEARCH_DAYS * DAY_S};
    for (size_t i = 0; i < sizeof window_s / sizeof window_s[0]; i++) {
        int64_t from = now_us - window_s[i] * 1000000;
        const int last_window = from <= since_us - 1;
        if (last_window)
            from = since_us - 1;
        int64_t s = tq__cron_next(c, z, from);
        if (s >= 0 && s <= now_us) {
            for (;;) {
                int64_t nx = tq__cron_next(c, z, s);
                if (nx < 0 || nx > now_us)
                    return s;
                s = nx;
            }
        }
        if (last_window)
            break;
    }
    return -1;
}
