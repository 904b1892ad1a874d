/*
 * progress.c - a progress line on stderr for the commands a person may wait
 * for at a terminal (tq enqueue --lines, tq prune, tq bench, tq work
 * --drain). It is drawn only when stderr is a terminal and the command was
 * not asked for --json, redrawn at most every PROGRESS_EVERY_US, and erased
 * before the command prints its summary: pipes, logs and CI see nothing of
 * it.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_EVERY_US 100000LL

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void cli_progress_start(cli_progress *p, const char *what, int json)
{
    memset(p, 0, sizeof *p);
    p->on = !json && isatty(2);
    p->start_us = mono_us();
    snprintf(p->what, sizeof p->what, "%s", what);
}

void cli_progress_show(cli_progress *p, int64_t done, int64_t total, const char *extra)
{
    if (!p->on)
        return;
    const int64_t now = mono_us();
    if (p->shown && now - p->last_us < PROGRESS_EVERY_US)
        return;
    p->last_us = now;
    p->shown = 1;
    const double secs = (double)(now - p->start_us) / 1e6;
    const double rate = secs > 0 ? (double)done / secs : 0;
    char line[256];
    int n = snprintf(line, sizeof line, "%s %lld", p->what, (long long)done);
    if (total > 0 && n < (int)sizeof line) {
        n += snprintf(line + n, sizeof line - (size_t)n, " of %lld (%d%%)",
                      (long long)total, (int)(done * 100 / total));
        if (rate > 0 && done < total && n < (int)sizeof line)
            n += snprintf(line + n, sizeof line - (size_t)n, ", %.0fs left",
                          (double)(total - done) / rate + 0.5);
    }
    if (n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ", %.0f/s", rate);
    if (extra && *extra && n < (int)sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, ", %s", extra);
    /* \r and erase to the end of the line: one line, redrawn in place */
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (p->on && p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = 0;
}
