/*
 * fuzz_control.c - the control channel (tq__ctl_feed, tq__ctl_end,
 * tq__control_parse): any bytes a handler writes to descriptor 3. Lines
 * are bounded and never hold a newline; the stream cut anywhere gives the
 * same lines; an accepted message is within its bounds, its text a
 * prefix of what followed the verb with no NUL and no character cut in
 * two; a refusal says why.
 */
#define _GNU_SOURCE /* memmem */
#include "fuzz.h"

#include "../../src/control.h"
#include "../../src/tq_int.h"

typedef struct seen {
    uint64_t hash; /* of every line and refusal, in order */
    size_t lines;
} seen;

static void on_line(void *ud, const char *line, size_t len)
{
    seen *s = ud;
    s->lines++;
    s->hash = s->hash * 1099511628211ULL + (line ? len + 1 : 0);
    if (!line)
        return;
    FUZZ_CHECK(len <= TQ__CONTROL_LINE_MAX, "a line of %zu bytes", len);
    FUZZ_CHECK(!memchr(line, '\n', len), "a newline inside a line");
    for (size_t i = 0; i < len; i++)
        s->hash = s->hash * 31 + (unsigned char)line[i];
    tq__ctl_msg m;
    char why[160] = "";
    int r = tq__control_parse(&m, line, len, why, sizeof why);
    FUZZ_CHECK(r >= -1 && r <= 1, "parse returned %d", r);
    if (r < 0) {
        FUZZ_CHECK(why[0] != '\0', "a refusal without a reason");
        return;
    }
    if (r == 0)
        return;
    size_t tl = strlen(m.text);
    FUZZ_CHECK(!memchr(line, '\0', len), "accepted a line with a NUL");
    switch (m.verb) {
    case TQ__CTL_PROGRESS:
        FUZZ_CHECK(m.pct >= 0 && m.pct <= 100, "progress %d", m.pct);
        FUZZ_CHECK(tl <= TQ__PROGRESS_TEXT_MAX, "progress text of %zu bytes", tl);
        break;
    case TQ__CTL_SNOOZE:
        FUZZ_CHECK(m.delay_us >= 0 && m.delay_us <= TQ__SNOOZE_MAX_US, "snooze %lld",
                   (long long)m.delay_us);
        FUZZ_CHECK(tl == 0, "snooze with text");
        break;
    case TQ__CTL_DISCARD:
        break;
    default:
        FUZZ_CHECK(0, "verb %d", (int)m.verb);
    }
    if (tl) {
        const char *at = memmem(line, len, m.text, tl);
        FUZZ_CHECK(at != NULL, "text not from the line");
        /* A character is never cut in two: the byte after the text, if
         * any, does not continue one. */
        size_t after = (size_t)(at - line) + tl;
        if (after < len)
            FUZZ_CHECK(((unsigned char)line[after] & 0xC0) != 0x80 ||
                           ((unsigned char)m.text[tl - 1] & 0x80) == 0,
                       "text cut inside a character");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    seen whole = {0}, cut = {0};
    tq__ctl_reader r = {0};
    tq__ctl_feed(&r, (const char *)data, size, on_line, &whole);
    tq__ctl_end(&r, on_line, &whole);
    size_t at = size ? data[0] % (size + 1) : 0;
    tq__ctl_reader r2 = {0};
    tq__ctl_feed(&r2, (const char *)data, at, on_line, &cut);
    tq__ctl_feed(&r2, (const char *)data + at, size - at, on_line, &cut);
    tq__ctl_end(&r2, on_line, &cut);
    FUZZ_CHECK(whole.lines == cut.lines && whole.hash == cut.hash,
               "cut at %zu: %zu lines, whole: %zu", at, cut.lines, whole.lines);
    return 0;
}
