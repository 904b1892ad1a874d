/*
 * control.c - the control channel's line reader and parser (control.h).
 * Called by worker/command.c for what a command handler writes to descriptor 3.
 *
 * A handler is any program, written by anyone: every line is checked here
 * and anything unexpected is a reason string, never a crash or a stall.
 * Lines are bounded (TQ__CONTROL_LINE_MAX), so a handler that writes
 * without end costs the worker a fixed buffer.
 */
#include "control.h"

#include "tq_int.h"

#include <stdio.h>
#include <string.h>

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The word at *p (up to a blank or the end), advancing past it and the
 * blanks after it. */
static size_t word(const char **p, const char *end, const char **start)
{
    *start = *p;
    while (*p < end && !blank(**p))
        (*p)++;
    size_t n = (size_t)(*p - *start);
    while (*p < end && blank(**p))
        (*p)++;
    return n;
}

static int is(const char *w, size_t n, const char *verb)
{
    return n == strlen(verb) && memcmp(w, verb, n) == 0;
}

/* "0" to "100", with an optional '%'. */
static int parse_pct(const char *w, size_t n, int *out)
{
    if (n && w[n - 1] == '%')
        n--;
    if (n == 0 || n > 3)
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i] < '0' || w[i] > '9')
            return -1;
        v = v * 10 + (w[i] - '0');
    }
    if (v > 100)
        return -1;
    *out = v;
    return 0;
}

/* Copies the rest of the line as the message's text, at most max bytes,
 * cut where a character starts. */
static void take_text(tq__ctl_msg *m, const char *p, const char *end, size_t max)
{
    size_t n = tq__utf8_cut(p, (size_t)(end - p), max);
    memcpy(m->text, p, n);
    m->text[n] = '\0';
}

int tq__control_parse(tq__ctl_msg *out, const char *line, size_t len, char *why,
                      size_t whylen)
{
    const char *end = line + len, *p = line, *w;
    if (len > TQ__CONTROL_LINE_MAX) {
        snprintf(why, whylen, "a line longer than %d bytes", TQ__CONTROL_LINE_MAX);
        return -1;
    }
    if (memchr(line, '\0', len)) {
        snprintf(why, whylen, "a line with a NUL byte");
        return -1;
    }
    if (end > p && end[-1] == '\r')
        end--;
    while (p < end && blank(*p))
        p++;
    if (p == end)
        return 0;
    out->pct = 0;
    out->delay_us = 0;
    out->text[0] = '\0';
    size_t n = word(&p, end, &w);
    if (is(w, n, "progress")) {
        const char *arg;
        size_t an = word(&p, end, &arg);
        if (parse_pct(arg, an, &out->pct)) {
            snprintf(why, whylen, "progress needs a percentage from 0 to 100 first");
            return -1;
        }
        out->verb = TQ__CTL_PROGRESS;
        take_text(out, p, end, TQ__PROGRESS_TEXT_MAX);
        return 1;
    }
    if (is(w, n, "snooze")) {
        const char *arg;
        size_t an = word(&p, end, &arg);
        char dur[32];
        if (an == 0 || an >= sizeof dur || p != end) {
            snprintf(why, whylen, "snooze needs one duration (30s, 5m, 1h)");
            return -1;
        }
        memcpy(dur, arg, an);
        dur[an] = '\0';
        if (strspn(dur, "0123456789") == an && strcmp(dur, "0") != 0) {
            snprintf(why, whylen,
                     "snooze needs a unit after its number, as in 30s or 5m");
            return -1;
        }
        if (tq_duration_parse(&out->delay_us, dur) || out->delay_us > TQ__SNOOZE_MAX_US) {
            snprintf(why, whylen, "snooze needs a duration up to 365d (30s, 5m, 1h)");
            return -1;
        }
        out->verb = TQ__CTL_SNOOZE;
        return 1;
    }
    if (is(w, n, "discard")) {
        out->verb = TQ__CTL_DISCARD;
        take_text(out, p, end, TQ__CONTROL_LINE_MAX);
        return 1;
    }
    snprintf(why, whylen, "unknown verb '%.*s' (progress, snooze, discard)",
             (int)(n > 32 ? 32 : n), w);
    return -1;
}

void tq__ctl_snooze_limit(char *buf, size_t len, int snoozes, const char *queue)
{
    snprintf(
        buf, len,
        "snoozed %d time(s), the most queue '%s' allows (tq queue %s --max-snoozes N)",
        snoozes, queue, queue);
}

void tq__ctl_feed(tq__ctl_reader *r, const char *p, size_t n, tq__ctl_line_fn *fn,
                  void *ud)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (r->overlong)
                fn(ud, NULL, 0);
            else
                fn(ud, r->buf, r->len);
            r->len = 0;
            r->overlong = 0;
        } else if (r->len < sizeof r->buf) {
            r->buf[r->len++] = p[i];
        } else {
            r->overlong = 1;
        }
    }
}

void tq__ctl_end(tq__ctl_reader *r, tq__ctl_line_fn *fn, void *ud)
{
    if (r->overlong)
        fn(ud, NULL, 0);
    else if (r->len)
        fn(ud, r->buf, r->len);
    r->len = 0;
    r->overlong = 0;
}
