/*
 * fuzz_lines.c - the input of `tq enqueue --lines` (tools/lines.c), against
 * a plain re-statement of its rule: split at "\n", drop one "\r" before
 * it, skip empty lines. Every payload and every line number must agree.
 */
#define _POSIX_C_SOURCE 200809L
#include "fuzz.h"

#include "../../tools/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* glibc's fmemopen refuses a zero-length buffer: read one byte short
     * of a one-byte buffer instead. */
    uint8_t empty = 0;
    FILE *f = fmemopen(size ? (void *)data : &empty, size ? size : 1, "r");
    FUZZ_CHECK(f != NULL, "fmemopen of %zu bytes", size);
    if (!size)
        (void)fgetc(f);
    cli_lines in = {.in = f};
    size_t at = 0, lineno = 0, count = 0;
    for (;;) {
        /* The reference: the next non-empty line from `at`. */
        const uint8_t *want = NULL;
        size_t want_len = 0;
        while (at < size && !want) {
            const uint8_t *nl = memchr(data + at, '\n', size - at);
            size_t end = nl ? (size_t)(nl - data) : size;
            size_t len = end - at;
            if (len > 0 && data[at + len - 1] == '\r')
                len--;
            lineno++;
            if (len > 0) {
                want = data + at;
                want_len = len;
            }
            at = nl ? end + 1 : size;
        }
        char *line;
        size_t len;
        int more = cli_lines_next(&in, &line, &len);
        FUZZ_CHECK(more >= 0, "read error");
        if (!want) {
            FUZZ_CHECK(!more, "an extra line after %zu", count);
            break;
        }
        FUZZ_CHECK(more == 1, "line %zu missing", count + 1);
        FUZZ_CHECK(len == want_len && memcmp(line, want, len) == 0,
                   "line %zu: %zu bytes, expected %zu", count + 1, len, want_len);
        FUZZ_CHECK(line[len] == '\0', "line %zu not terminated", count + 1);
        FUZZ_CHECK(in.lineno == lineno, "line number %zu, expected %zu", in.lineno,
                   lineno);
        count++;
    }
    cli_lines_free(&in);
    fclose(f);
    return 0;
}
