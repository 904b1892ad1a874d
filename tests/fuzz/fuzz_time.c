/*
 * fuzz_time.c - absolute times (tq_time_parse, tq_time_format). Whatever
 * is accepted lies between 1970 and 9999; what tq prints for it parses
 * back to the same instant, so a time shown by `tq show` can be given to
 * `--at`; formatting any value stays inside its buffer.
 */
#include "fuzz.h"

#include "tq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_string(data, size);
    int64_t us = -1, again = -1;
    char buf[64];
    if (tq_time_parse(&us, s) == 0) {
        FUZZ_CHECK(us >= 0 && us <= 253402300799999999LL, "'%s' gave %lld", s,
                   (long long)us);
        tq_time_format(buf, sizeof buf, us);
        FUZZ_CHECK(tq_time_parse(&again, buf) == 0, "'%s' printed as '%s', refused", s,
                   buf);
        /* The printed form keeps milliseconds. */
        FUZZ_CHECK(again == us - us % 1000, "'%s' gave %lld, its print '%s' %lld", s,
                   (long long)us, buf, (long long)again);
    }

    int64_t v = 0;
    memcpy(&v, data, size < sizeof v ? size : sizeof v);
    size_t len = size > 8 ? data[8] % 41 : 40;
    memset(buf, 'x', sizeof buf);
    if (len > 0) {
        tq_time_format(buf, len, v);
        FUZZ_CHECK(memchr(buf, '\0', len) != NULL, "format of %lld into %zu",
                   (long long)v, len);
    }
    for (size_t i = len; i < sizeof buf; i++)
        FUZZ_CHECK(buf[i] == 'x', "format of %lld wrote past %zu", (long long)v, len);
    free(s);
    return 0;
}
