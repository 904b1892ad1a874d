/*
 * lines.c - the input of `tq enqueue --lines` (cmd/enqueue.c; fuzzed by
 * tests/fuzz/fuzz_lines.c): one payload per line.
 *
 * A line ends at "\n"; a "\r" before it is dropped too, so files written on
 * Windows give the same payloads. Empty lines are skipped; the last line
 * needs no end. Any other byte, NUL included, belongs to the payload.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <stdlib.h>

int cli_lines_next(cli_lines *r, char **line, size_t *len)
{
    for (;;) {
        ssize_t n = getline(&r->buf, &r->cap, r->in);
        if (n < 0)
            return ferror(r->in) ? -1 : 0;
        r->lineno++;
        if (n > 0 && r->buf[n - 1] == '\n')
            r->buf[--n] = '\0';
        if (n > 0 && r->buf[n - 1] == '\r')
            r->buf[--n] = '\0';
        if (n == 0)
            continue;
        *line = r->buf;
        *len = (size_t)n;
        return 1;
    }
}

void cli_lines_free(cli_lines *r)
{
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
}
