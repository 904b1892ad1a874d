/*
 * fuzz_name.c - identifiers: queue and worker names (tq_name_check), job
 * states and orders. A name is 1 to 64 of [A-Za-z0-9_.-]; a state or an
 * order parses only from its own printed name.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_string(data, size);
    int ok = tq_name_check(s) == 0;
    FUZZ_CHECK(ok == reference_name(s), "name '%s' accepted: %d", s, ok);

    tq_state st;
    if (tq_state_parse(&st, s) == 0)
        FUZZ_CHECK(strcmp(tq_state_name(st), s) == 0, "state '%s'", s);
    tq_order o;
    if (tq_order_parse(&o, s) == 0)
        FUZZ_CHECK(strcmp(tq_order_name(o), s) == 0, "order '%s'", s);
    free(s);
    return 0;
}
