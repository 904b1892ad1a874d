/*
 * fuzz_cron.c - schedule specs (tq__cron_parse, tq__cron_next,
 * tq__cron_last). Whatever is accepted has a slot after a fixed time, in
 * UTC and in a zone with clock changes; a slot is the first one after the
 * moment just before it; the most recent slot up to a slot is that slot;
 * refusals say why.
 */
#include "fuzz.h"

#include "../../src/cron.h"

static void check_in(const tq__cron *c, const tq__zone *z, const char *s, int64_t after)
{
    int64_t next = tq__cron_next(c, z, after);
    if (!z)
        FUZZ_CHECK(next > after, "'%s': no slot after %lld", s, (long long)after);
    if (next < 0)
        return; /* in a zone, every slot may fall in skipped hours */
    FUZZ_CHECK(next > after, "'%s': slot %lld not after %lld", s, (long long)next,
               (long long)after);
    FUZZ_CHECK(next % 1000000 == 0, "'%s': slot %lld not on a second", s,
               (long long)next);
    FUZZ_CHECK(tq__cron_next(c, z, next - 1) == next, "'%s': %lld is not a slot", s,
               (long long)next);
    FUZZ_CHECK(tq__cron_last(c, z, after, next) == next, "'%s': last up to %lld", s,
               (long long)next);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_string(data, size);
    char why[200] = "";
    tq__cron c;
    static tq__zone *berlin;
    static int loaded;
    if (!loaded) {
        loaded = 1;
        if (tq__zone_load(&berlin, "Europe/Berlin", why, sizeof why))
            berlin = NULL; /* no time-zone database here: UTC only */
    }
    if (tq__cron_parse(&c, s, why, sizeof why) == 0) {
        check_in(&c, NULL, s, 1767225600000000LL);   /* 2026-01-01 */
        check_in(&c, berlin, s, 1792886400000000LL); /* 2026-10-25, clocks go back */
    } else {
        FUZZ_CHECK(why[0] != '\0', "'%s' refused without a reason", s);
    }
    free(s);
    return 0;
}
