/*
 * test_unit.c - unit tests of the logic no engine owns: durations, times,
 * backoff, names, URL parsing and redaction, percentiles.
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "../src/tq_int.h"
#include "../src/cron.h"
#include "../src/url.h"

static void durations_parse(void **state)
{
    (void)state;
    int64_t us = -1;
    assert_int_equal(tq_duration_parse(&us, "250ms"), 0);
    assert_int_equal(us, 250000);
    assert_int_equal(tq_duration_parse(&us, "30s"), 0);
    assert_int_equal(us, 30000000);
    assert_int_equal(tq_duration_parse(&us, "5m"), 0);
    assert_int_equal(us, 300000000);
    assert_int_equal(tq_duration_parse(&us, "2h"), 0);
    assert_int_equal(us, 7200000000LL);
    assert_int_equal(tq_duration_parse(&us, "7d"), 0);
    assert_int_equal(us, 604800000000LL);
    assert_int_equal(tq_duration_parse(&us, "1h30m"), 0);
    assert_int_equal(us, 5400000000LL);
    assert_int_equal(tq_duration_parse(&us, "1.5s"), 0);
    assert_int_equal(us, 1500000);
    assert_int_equal(tq_duration_parse(&us, "10"), 0); /* plain: seconds */
    assert_int_equal(us, 10000000);
    assert_int_equal(tq_duration_parse(&us, "0"), 0);
    assert_int_equal(us, 0);
}

static void durations_reject(void **state)
{
    (void)state;
    const char *bad[] = {"",     "s",     "-5s",
                         "5x",   "5 s",   "1h30",
                         "abc",  "5sec",  "99999999999999999999d",
                         "1e3s", "0x10s", ".5s",
                         "1.s.", NULL};
    for (int i = 0; bad[i]; i++) {
        int64_t us = 42;
        assert_int_equal(tq_duration_parse(&us, bad[i]), TQ_EINVAL);
        assert_int_equal(us, 42); /* untouched on failure */
    }
    assert_int_equal(tq_duration_parse(NULL, NULL), TQ_EINVAL);
}

static void durations_format(void **state)
{
    (void)state;
    char b[32];
    assert_string_equal(tq_duration_format(b, sizeof b, 500), "500us");
    assert_string_equal(tq_duration_format(b, sizeof b, 0), "0s");
    assert_string_equal(tq_duration_format(b, sizeof b, 250000), "250ms");
    assert_string_equal(tq_duration_format(b, sizeof b, 1500000), "1.5s");
    assert_string_equal(tq_duration_format(b, sizeof b, 120000000), "2m");
}

static void times_parse(void **state)
{
    (void)state;
    int64_t us;
    assert_int_equal(tq_time_parse(&us, "2026-01-02T03:04:05Z"), 0);
    assert_int_equal(us, 1767323045LL * 1000000);
    assert_int_equal(tq_time_parse(&us, "2026-01-02T05:04:05+02:00"), 0);
    assert_int_equal(us, 1767323045LL * 1000000);
    assert_int_equal(tq_time_parse(&us, "2026-01-02 03:04Z"), 0);
    assert_int_equal(us, 1767323040LL * 1000000);
    assert_int_equal(tq_time_parse(&us, "2026-01-02Z"), 0); /* a date: its midnight */
    assert_int_equal(us, 1767312000LL * 1000000);
    assert_int_equal(tq_time_parse(&us, "2026-01-02+01:00"), 0);
    assert_int_equal(us, (1767312000LL - 3600) * 1000000);
    assert_int_equal(tq_time_parse(&us, "@1700000000"), 0);
    assert_int_equal(us, 1700000000LL * 1000000);
    const char *bad[] = {"",
                         "tomorrow",
                         "2026-13-01T00:00Z",
                         "2026-01-01T25:00Z",
                         "2026-01-01T00:00Q",
                         "@",
                         "@-5",
                         "@12x",
                         "1969-12-31T00:00Z",
                         "2026-01-32",
                         "2026-01-0",
                         "2026-01-02X",
                         NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(tq_time_parse(&us, bad[i]), TQ_EINVAL);
    char b[40];
    assert_string_equal(tq_time_format(b, sizeof b, 1767323045123000LL),
                        "2026-01-02T03:04:05.123Z");
}

static void backoff_bounds(void **state)
{
    (void)state;
    const int64_t base = 1000000, cap = 60000000;
    assert_int_equal(tq__backoff_us(0, cap, 3, 0.5), 0); /* base 0: at once */
    for (int attempt = 1; attempt <= 40; attempt++) {
        int64_t full = base;
        for (int i = 1; i < attempt && full < cap; i++)
            full *= 2;
        if (full > cap)
            full = cap;
        int64_t lo = tq__backoff_us(base, cap, attempt, 0.0);
        int64_t hi = tq__backoff_us(base, cap, attempt, 0.999999);
        assert_int_equal(lo, full / 2);
        assert_true(hi <= full && hi >= full - 1 - full / 1000);
        for (int k = 0; k < 50; k++) {
            int64_t d = tq__backoff_us(base, cap, attempt, tq__random());
            assert_in_range(d, full / 2, full);
        }
    }
}

static void random_range(void **state)
{
    (void)state;
    double lo = 1, hi = 0;
    for (int i = 0; i < 10000; i++) {
        double r = tq__random();
        assert_true(r >= 0.0 && r < 1.0);
        if (r < lo)
            lo = r;
        if (r > hi)
            hi = r;
    }
    assert_true(lo < 0.01 && hi > 0.99); /* spread over the range */
}

static void names(void **state)
{
    (void)state;
    assert_int_equal(tq_name_check("emails"), 0);
    assert_int_equal(tq_name_check("a.b_c-D9"), 0);
    char n64[65], n65[66];
    memset(n64, 'a', 64);
    n64[64] = '\0';
    memset(n65, 'a', 65);
    n65[65] = '\0';
    assert_int_equal(tq_name_check(n64), 0);
    assert_int_equal(tq_name_check(n65), TQ_EINVAL);
    const char *bad[] = {"", "a b", "a/b", "a;drop", "é", "a\n", "a'b", NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(tq_name_check(bad[i]), TQ_EINVAL);
    assert_int_equal(tq_name_check(NULL), TQ_EINVAL);
}

static void traceparents(void **state)
{
    (void)state;
    static const char *const good[] = {
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later-fields",
    };
    static const char *const bad[] = {
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",      /* no flags */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   /* uppercase */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   /* zero trace */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   /* zero parent */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* version ff */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", /* 00 with more */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  /* no '-' */
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (tq_traceparent_check(good[i]))
            fail_msg("refused: %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!tq_traceparent_check(bad[i]))
            fail_msg("accepted: %s", bad[i]);
    assert_int_equal(tq_traceparent_check(NULL), TQ_EINVAL);
}

static void states_orders(void **state)
{
    (void)state;
    for (int i = 0; i < TQ_STATE_COUNT; i++) {
        tq_state s;
        assert_int_equal(tq_state_parse(&s, tq_state_name((tq_state)i)), 0);
        assert_int_equal(s, i);
    }
    tq_order o;
    assert_int_equal(tq_order_parse(&o, "lifo"), 0);
    assert_int_equal(o, TQ_LIFO);
    assert_int_equal(tq_order_parse(&o, "LIFO"), TQ_EINVAL);
    assert_int_equal(tq_order_parse(&o, "random"), TQ_EINVAL);
    assert_null(tq_state_name(TQ_STATE_COUNT));
}

static void urls(void **state)
{
    (void)state;
    tq__url u;
    assert_int_equal(tq__url_parse(&u, NULL, "jobs.db"), 0);
    assert_int_equal(u.kind, TQ__SQLITE);
    assert_string_equal(u.path, "jobs.db");
    assert_int_equal(u.sync_normal, 0);
    tq__url_free(&u);

    assert_int_equal(
        tq__url_parse(&u, NULL, "sqlite:/tmp/x.db?synchronous=normal&busy_timeout=500"),
        0);
    assert_string_equal(u.path, "/tmp/x.db");
    assert_int_equal(u.sync_normal, 1);
    assert_int_equal(u.busy_timeout_ms, 500);
    tq__url_free(&u);

    assert_int_equal(tq__url_parse(&u, NULL, "sqlite:///abs/x.db"), 0);
    assert_string_equal(u.path, "/abs/x.db");
    tq__url_free(&u);

    assert_int_equal(tq__url_parse(&u, NULL, "postgres://u:pw@h/db?tq_schema=q1"), 0);
    assert_int_equal(u.kind, TQ__POSTGRES);
    assert_string_equal(u.schema, "q1");
    assert_string_equal(u.conninfo, "postgres://u:pw@h/db");
    tq__url_free(&u);

    assert_int_equal(
        tq__url_parse(&u, NULL, "postgresql://h/db?sslmode=disable&tq_schema=a_b"), 0);
    assert_string_equal(u.schema, "a_b");
    assert_string_equal(u.conninfo, "postgresql://h/db?sslmode=disable");
    tq__url_free(&u);

    /* tq's own parameters anywhere in the query, the rest left for libpq
     * in their order; tq_listen's value %XX-decoded. */
    assert_int_equal(
        tq__url_parse(&u, NULL,
                      "postgresql://h:6432/db?tq_pool=transaction&sslmode=require"
                      "&tq_listen=postgresql%3A%2F%2Fh%3A5432%2Fdb%3Fa%3D1%26b%3D2"
                      "&connect_timeout=5&tq_schema=s1"),
        0);
    assert_string_equal(u.conninfo,
                        "postgresql://h:6432/db?sslmode=require&connect_timeout=5");
    assert_int_equal(u.pooled, 1);
    assert_string_equal(u.listen, "postgresql://h:5432/db?a=1&b=2");
    assert_string_equal(u.schema, "s1");
    tq__url_free(&u);
    assert_int_equal(tq__url_parse(&u, NULL, "postgresql://h/db?tq_pool=session"), 0);
    assert_string_equal(u.conninfo, "postgresql://h/db");
    assert_int_equal(u.pooled, 0);
    assert_null(u.listen);
    tq__url_free(&u);

    /* A password holding a '?': the query is where libpq finds it. */
    assert_int_equal(tq__url_parse(&u, NULL, "postgresql://u:p?w@h/db?tq_schema=s2"), 0);
    assert_string_equal(u.conninfo, "postgresql://u:p?w@h/db");
    assert_string_equal(u.schema, "s2");
    tq__url_free(&u);

    const char *bad[] = {
        "", "mysql://h/db",
        /* not encoded: its own '&user=' would go to the server's URL */
        "postgres://h/db?tq_listen=postgresql:///db?host=/s&user=tq",
        "postgres://h/db?tq_listen=host%3Dh",
        "postgres://h/db?tq_listen=postgresql%3A%2F%2Fu%3A50%25off%40h%2Fdb",
        "postgres://h/db?tq_listen=postgresql%3A%2F%2Fh%2Fdb%3Fx%3D%2500",
        "postgres://h/db?x=%00", "postgres://h/db?tq_pool=statement",
        "postgres://h/db?tq_pool",
        "postgres://h/db?tq_listen=", "postgres://h/db?sslmode=require&tq_lisen=x",
        "sqlite:", "sqlite:x.db?synchronous=off", "x.db?busy_timeout=-1", "x.db?bogus=1",
        "postgres://h/db?tq_schema=Bad-Name", NULL};
    for (int i = 0; bad[i]; i++) {
        assert_int_equal(tq__url_parse(&u, NULL, bad[i]), TQ_EINVAL);
        tq__url_free(&u);
    }
}

static void redaction(void **state)
{
    (void)state;
    char b[256];
    tq__url_redact(b, sizeof b, "postgres://alice:s3cret@db.example/q");
    assert_null(strstr(b, "s3cret"));
    assert_string_equal(b, "postgres://alice:***@db.example/q");
    tq__url_redact(b, sizeof b, "postgres://h/q?password=s3cret&sslmode=require");
    assert_null(strstr(b, "s3cret"));
    assert_non_null(strstr(b, "sslmode=require"));
    /* tq_listen is a URL of its own, password and all: hidden whole. */
    tq__url_redact(
        b, sizeof b,
        "postgres://h/q?tq_listen=postgresql%3A%2F%2Ftq%3Ahunter2%40h%2Fq&x=1");
    assert_null(strstr(b, "hunter2"));
    assert_string_equal(b, "postgres://h/q?tq_listen=***&x=1");
    tq__url_redact(b, sizeof b, "jobs.db");
    assert_string_equal(b, "jobs.db");
    /* A password shorter than its mask, in a buffer that is exactly full:
     * the mask never writes past the end (it used to move the tail right
     * past it; AddressSanitizer watches this one). */
    static const char short_pw[] = "postgres://h/q?password=a&sslmode=require&x=yyyyyy";
    char *exact = malloc(sizeof short_pw);
    assert_non_null(exact);
    tq__url_redact(exact, sizeof short_pw, short_pw);
    assert_int_equal(strlen(exact), sizeof short_pw - 1);
    assert_string_equal(exact, "postgres://h/q?password=***&sslmode=require&x=yyyy");
    free(exact);
    /* Every password parameter, and both forms at once. */
    tq__url_redact(b, sizeof b, "postgres://u:pw@h/q?password=one&password=two");
    assert_string_equal(b, "postgres://u:***@h/q?password=***&password=***");
    tq__url_redact(b, 4, "postgres://u:pw@h");
    assert_string_equal(b, "pos");
    /* Any key libpq reads as one ending in "password": sslpassword, an
     * encoded key, any case; not a key that only starts with it. */
    tq__url_redact(b, sizeof b,
                   "postgres://h/q?sslpassword=k1&pass%77ord=k2&PASSWORD=k3&passwordx=v");
    assert_string_equal(b, "postgres://h/q?sslpassword=***&pass%77ord=***&PASSWORD=***"
                           "&passwordx=v");
    tq__url_redact(b, sizeof b, "host=h password=k4 dbname=q");
    assert_string_equal(b, "host=h password=*** dbname=q");
}

static void percentiles(void **state)
{
    (void)state;
    int64_t v[100];
    for (int i = 0; i < 100; i++)
        v[i] = 100 - i; /* 100..1, unsorted */
    assert_int_equal(tq_percentile(v, 100, 0.50), 50);
    assert_int_equal(tq_percentile(v, 100, 0.99), 99);
    assert_int_equal(tq_percentile(v, 100, 1.0), 100);
    assert_int_equal(tq_percentile(v, 100, 0.0), 1);
    assert_int_equal(tq_percentile(v, 0, 0.5), 0);
    int64_t one = 7;
    assert_int_equal(tq_percentile(&one, 1, 0.99), 7);
}

static void job_sort(void **state)
{
    (void)state;
    tq_job j[4];
    memset(j, 0, sizeof j);
    int64_t ids[] = {3, 1, 4, 2};
    int pri[] = {0, 0, 5, 0};
    for (int i = 0; i < 4; i++) {
        j[i].id = ids[i];
        j[i].priority = pri[i];
        j[i].run_at = 100;
    }
    tq__jobs_sort(j, 4, TQ_FIFO);
    assert_int_equal(j[0].id, 4);
    assert_int_equal(j[1].id, 1);
    assert_int_equal(j[2].id, 2);
    assert_int_equal(j[3].id, 3);
    tq__jobs_sort(j, 4, TQ_LIFO);
    assert_int_equal(j[0].id, 4);
    assert_int_equal(j[1].id, 3);
    assert_int_equal(j[3].id, 1);
}

typedef struct text_case {
    const char *in, *out;
} text_case;

/* Each case's in, through f, gives its out. */
static void check_text(char *(*f)(const char *), const text_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *got = f(cases[i].in);
        assert_non_null(got);
        assert_string_equal(got, cases[i].out);
        free(got);
    }
}

/* Error text is kept as valid UTF-8: valid text unchanged, every other
 * byte (a stray one, a character cut short, an overlong form, a surrogate,
 * beyond U+10FFFF) as \xNN. */
static void utf8_clean(void **state)
{
    (void)state;
    static const text_case cases[] = {
        {"plain", "plain"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"\xa9 from yes \xc3", "\\xa9 from yes \\xc3"}, /* cut at both ends */
        {"\xc0\xaf", "\\xc0\\xaf"},                     /* overlong '/' */
        {"\xed\xa0\x80", "\\xed\\xa0\\x80"},            /* a surrogate */
        {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},   /* beyond U+10FFFF */
        {"\xe2\x82x", "\\xe2\\x82x"},                   /* cut short, then text */
        {"\xff\xfe", "\\xff\\xfe"},
        {"", ""},
    };
    check_text(tq__utf8_clean, cases, sizeof cases / sizeof cases[0]);
}

/* For terminals and logs: control characters escaped as well. */
static void text_printable(void **state)
{
    (void)state;
    static const text_case cases[] = {
        {"plain caf\xc3\xa9", "plain caf\xc3\xa9"},
        {"\033[2J\033]0;pwned\007\n fake", "\\e[2J\\e]0;pwned\\x07\\n fake"},
        {"a\tb\rc\x7f", "a\\tb\\rc\\x7f"},
        {"csi \xc2\x9b nbsp \xc2\xa0", "csi \\xc2\\x9b nbsp \xc2\xa0"}, /* C1 only */
        {"bad \xff", "bad \\xff"},
        /* bidirectional overrides and isolates, which reorder a line; other
         * characters of the same block stay */
        {"evil\xe2\x80\xaetxt.exe", "evil\\u202etxt.exe"},
        {"\xe2\x81\xa6x\xe2\x81\xa9 \xe2\x80\x8f", "\\u2066x\\u2069 \\u200f"},
        {"dash \xe2\x80\x94 ok", "dash \xe2\x80\x94 ok"},
    };
    check_text(tq_text_printable, cases, sizeof cases / sizeof cases[0]);
}

static void errors(void **state)
{
    (void)state;
    assert_string_equal(tq_strerror(TQ_ELOST),
                        "lease lost: the job is no longer held by this worker");
    assert_string_equal(tq_strerror(TQ_OK), "success");
    assert_string_equal(tq_strerror(-999), "unknown error");
    /* Every code has its own text. */
    for (int a = TQ_EFULL; a <= TQ_EINVAL; a++)
        for (int b = a + 1; b <= TQ_EINVAL; b++)
            assert_string_not_equal(tq_strerror(a), tq_strerror(b));
}

/* ---- periodic jobs' slots ------------------------------------------------- */

static int64_t at(const char *iso)
{
    int64_t us = 0;
    if (tq_time_parse(&us, iso))
        fail_msg("bad time in the table: %s", iso);
    return us;
}

/* The next slot against a table: both changes of clocks in Europe/Berlin
 * and America/New_York (a slot in the skipped hour is none, one in the
 * repeated hour fires once, at its first occurrence), month ends, leap
 * days, the day fields' rule, seconds, names, macros, @every. */
static void cron_next_slots(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *tz, *after, *want;
    } t[] = {
        {"30 2 * * *", "Europe/Berlin", "2026-03-28T12:00Z", "2026-03-30T00:30Z"},
        {"30 2 * * *", "Europe/Berlin", "2026-10-24T12:00Z", "2026-10-25T00:30Z"},
        {"30 2 * * *", "Europe/Berlin", "2026-10-25T00:30Z", "2026-10-26T01:30Z"},
        {"*/30 * * * *", "Europe/Berlin", "2026-10-25T00:15Z", "2026-10-25T00:30Z"},
        {"*/30 * * * *", "Europe/Berlin", "2026-10-25T00:30Z", "2026-10-25T02:00Z"},
        {"*/30 * * * *", "Europe/Berlin", "2026-10-25T01:10Z", "2026-10-25T02:00Z"},
        {"*/30 * * * *", "Europe/Berlin", "2026-03-29T00:45Z", "2026-03-29T01:00Z"},
        {"0 12 * * *", "Europe/Berlin", "2026-07-01T00:00Z", "2026-07-01T10:00Z"},
        {"0 12 * * *", "Europe/Berlin", "2026-12-01T00:00Z", "2026-12-01T11:00Z"},
        {"0 2 * * *", "America/New_York", "2026-03-07T12:00Z", "2026-03-09T06:00Z"},
        {"30 1 * * *", "America/New_York", "2026-10-31T12:00Z", "2026-11-01T05:30Z"},
        {"30 1 * * *", "America/New_York", "2026-11-01T05:30Z", "2026-11-02T06:30Z"},
        {"0 3 * * *", "America/New_York", "2026-03-08T00:00Z", "2026-03-08T07:00Z"},
        {"0 9 * * *", "America/New_York", "2031-07-01T00:00Z", "2031-07-01T13:00Z"},
        {"0 9 * * *", "Europe/Berlin", "2045-01-10T00:00Z", "2045-01-10T08:00Z"},
        {"0 0 31 * *", "UTC", "2026-04-01T00:00Z", "2026-05-31T00:00Z"},
        {"0 0 29 2 *", NULL, "2026-03-01T00:00Z", "2028-02-29T00:00Z"},
        {"0 0 L * *", NULL, NULL, NULL}, /* refused */
        {"0 0 13 * 5", NULL, "2026-11-25T00:00Z", "2026-11-27T00:00Z"},
        {"0 0 13 * 5", NULL, "2026-12-11T12:00Z", "2026-12-13T00:00Z"},
        {"0 0 */10 * *", NULL, "2026-01-21T00:00Z", "2026-01-31T00:00Z"},
        {"*/15 * * * * *", NULL, "2026-01-01T00:00:07Z", "2026-01-01T00:00:15Z"},
        {"0 9 * jan-mar mon-fri", NULL, "2026-03-31T09:00Z", "2027-01-01T09:00Z"},
        {"0 9 * * sun,7", NULL, "2026-11-25T00:00Z", "2026-11-29T09:00Z"},
        {"5-5/10 0 * * *", NULL, "2026-01-01T00:06Z", "2026-01-02T00:05Z"},
        {"50/5 0 * * *", NULL, "2026-01-01T00:51Z", "2026-01-01T00:55Z"},
        {"@hourly", "Europe/Berlin", "2026-01-01T00:59:59Z", "2026-01-01T01:00Z"},
        {"@daily", "America/New_York", "2026-01-01T12:00Z", "2026-01-02T05:00Z"},
        {"@monthly", NULL, "2026-12-15T00:00Z", "2027-01-01T00:00Z"},
        {"@every 10s", "Europe/Berlin", "2026-01-01T00:00:07Z", "2026-01-01T00:00:10Z"},
        {"@every 10s", NULL, "2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int64_t got = 0;
        char why[200] = "";
        if (!t[i].after) {
            assert_int_equal(tq_schedule_next(&got, t[i].spec, NULL, 0, why, sizeof why),
                             TQ_EINVAL);
            continue;
        }
        int rc =
            tq_schedule_next(&got, t[i].spec, t[i].tz, at(t[i].after), why, sizeof why);
        if (rc || got != at(t[i].want)) {
            char g[64];
            fail_msg("%s (%s) after %s: want %s, got %s %s", t[i].spec,
                     t[i].tz ? t[i].tz : "UTC", t[i].after, t[i].want,
                     rc ? "error" : tq_time_format(g, sizeof g, got), why);
        }
    }
}

/* The most recent missed slot, never a burst; bad specs and zones say why. */
static void cron_last_and_refusals(void **state)
{
    (void)state;
    tq__cron c;
    tq__zone *z = NULL;
    char why[200];
    assert_int_equal(tq__cron_parse(&c, "*/5 * * * *", why, sizeof why), 0);
    assert_int_equal(tq__zone_load(&z, "Europe/Berlin", why, sizeof why), 0);
    assert_int_equal(
        tq__cron_last(&c, z, at("2026-01-01T00:00Z"), at("2026-01-09T10:07Z")),
        at("2026-01-09T10:05Z"));
    assert_int_equal(
        tq__cron_last(&c, z, at("2026-01-09T10:06Z"), at("2026-01-09T10:07Z")), -1);
    tq__zone_free(z);
    assert_int_equal(tq__cron_parse(&c, "0 0 1 1 *", why, sizeof why), 0);
    assert_int_equal(
        tq__cron_last(&c, NULL, at("2020-01-01T00:00Z"), at("2026-06-01T00:00Z")),
        at("2026-01-01T00:00Z"));
    assert_int_equal(tq__cron_parse(&c, "@every 1s", why, sizeof why), 0);
    assert_int_equal(
        tq__cron_last(&c, NULL, at("2020-01-01T00:00Z"), at("2026-06-01T00:00:01.5Z")),
        at("2026-06-01T00:00:01Z"));
    static const char *const bad[] = {
        "61 * * * *",
        "* * 31 2 *",
        "* * 30 2 *",
        "* * * *",
        "* * * * * * *",
        "a * * * *",
        "5-1 * * * *",
        "*/0 * * * *",
        "1, * * * *",
        "@every 0s",
        "@every 1.5s",
        "@often",
        "",
        "* 24 * * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "1-2-3 * * * *",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tq__cron_parse(&c, bad[i], why, sizeof why) == 0)
            fail_msg("'%s' was accepted", bad[i]);
    assert_int_equal(tq__cron_parse(&c, "61 * * * *", why, sizeof why), -1);
    assert_string_equal(why, "minute 61 is out of range 0-59");
    assert_int_equal(tq__cron_parse(&c, "* * 31 2 *", why, sizeof why), -1);
    assert_non_null(strstr(why, "never happens"));
    assert_int_equal(tq__zone_load(&z, "Mars/Olympus", why, sizeof why), -1);
    assert_non_null(strstr(why, "unknown time zone 'Mars/Olympus'"));
    assert_int_equal(tq__zone_load(&z, "../etc/passwd", why, sizeof why), -1);
    assert_int_equal(tq__zone_load(&z, "/etc/passwd", why, sizeof why), -1);
    assert_int_equal(tq__zone_load(&z, "right/Europe/Berlin", why, sizeof why), -1);
    assert_int_equal(tq__zone_load(&z, "localtime", why, sizeof why), -1);
    assert_int_equal(tq__zone_load(&z, "UTC", why, sizeof why), 0);
    assert_null(z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(utf8_clean),
        cmocka_unit_test(text_printable),
        cmocka_unit_test(durations_parse),
        cmocka_unit_test(durations_reject),
        cmocka_unit_test(durations_format),
        cmocka_unit_test(times_parse),
        cmocka_unit_test(backoff_bounds),
        cmocka_unit_test(random_range),
        cmocka_unit_test(names),
        cmocka_unit_test(states_orders),
        cmocka_unit_test(traceparents),
        cmocka_unit_test(urls),
        cmocka_unit_test(redaction),
        cmocka_unit_test(percentiles),
        cmocka_unit_test(job_sort),
        cmocka_unit_test(errors),
        cmocka_unit_test(cron_next_slots),
        cmocka_unit_test(cron_last_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
