/*
 * fuzz_duration.c - durations (tq_duration_parse, tq_duration_format).
 * Whatever is accepted is not negative; a plain "DIGITS[UNIT]" gives
 * exactly DIGITS times the unit; formatting any value into any buffer
 * stays inside it and ends with a NUL.
 */
#include "fuzz.h"

#include "tq.h"

/* The value of a plain "DIGITS[UNIT]" of at most 15 digits; -2 when it is
 * too large for 64 bits (it must be refused); -1 for any other text. */
static int64_t reference(const char *s)
{
    static const struct {
        const char *unit;
        int64_t us;
    } units[] = {{"", 1000000},       {"us", 1},       {"ms", 1000},
                 {"s", 1000000},      {"m", 60000000}, {"h", 3600000000LL},
                 {"d", 86400000000LL}};
    int64_t v = 0;
    size_t n = 0;
    for (; s[n] >= '0' && s[n] <= '9' && n <= 15; n++)
        v = v * 10 + (s[n] - '0');
    if (n == 0 || n > 15)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(s + n, units[i].unit) == 0) {
            int64_t us;
            return __builtin_mul_overflow(v, units[i].us, &us) ? -2 : us;
        }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_string(data, size);
    int64_t us = -1;
    if (tq_duration_parse(&us, s) == 0)
        FUZZ_CHECK(us >= 0, "'%s' gave %lld", s, (long long)us);
    int64_t want = reference(s);
    if (want == -2)
        FUZZ_CHECK(tq_duration_parse(&us, s) != 0, "'%s' accepted as %lld", s,
                   (long long)us);
    if (want >= 0) {
        FUZZ_CHECK(tq_duration_parse(&us, s) == 0, "'%s' refused", s);
        FUZZ_CHECK(us == want, "'%s' gave %lld, expected %lld", s, (long long)us,
                   (long long)want);
    }

    fuzz_check_format(tq_duration_format, data, size);
    free(s);
    return 0;
}
