/*
 * fuzz_name.c - identifiers: queue and worker names (tq_name_check), job
 * states and orders, W3C trace contexts (tq_traceparent_check). A name is
 * 1 to 64 of [A-Za-z0-9_.-]; a state or an order parses only from its own
 * printed name; a traceparent is four '-'-separated lowercase hex fields of
 * 2, 32, 16 and 2 digits, ids not all zero, version not ff, and more fields
 * only after a version other than 00.
 */
#include "fuzz.h"

#include "tq.h"

static int reference_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* The traceparent rule, written another way: by splitting on '-'. */
static int reference_traceparent(const char *s)
{
    static const size_t widths[4] = {2, 32, 16, 2};
    size_t n = strlen(s);
    if (n > 256)
        return 0;
    const char *p = s;
    for (int f = 0; f < 4; f++) {
        size_t w = strspn(p, "0123456789abcdef");
        if (w != widths[f] || (f < 3 && p[w] != '-'))
            return 0;
        if ((f == 1 || f == 2) && strspn(p, "0") == w)
            return 0;
        p += w + (f < 3);
    }
    if (strncmp(s, "ff", 2) == 0)
        return 0;
    if (*p == '\0')
        return 1;
    return *p == '-' && strncmp(s, "00", 2) != 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_string(data, size);
    int ok = tq_name_check(s) == 0;
    FUZZ_CHECK(ok == reference_name(s), "name '%s' accepted: %d", s, ok);

    int tp = tq_traceparent_check(s) == 0;
    FUZZ_CHECK(tp == reference_traceparent(s), "traceparent '%s' accepted: %d", s, tp);

    tq_state st;
    if (tq_state_parse(&st, s) == 0)
        FUZZ_CHECK(strcmp(tq_state_name(st), s) == 0, "state '%s'", s);
    tq_order o;
    if (tq_order_parse(&o, s) == 0)
        FUZZ_CHECK(strcmp(tq_order_name(o), s) == 0, "order '%s'", s);
    free(s);
    return 0;
}
