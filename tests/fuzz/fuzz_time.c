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

    fuzz_check_format(tq_time_format, data, size);
    free(s);
    return 0;
}
