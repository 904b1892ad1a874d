/*
 * fuzz.h - what every fuzz target shares: the entry point libFuzzer (or
 * replay.c) calls, and a check that aborts with a message, so a broken
 * property is a crash libFuzzer keeps and a replay that fails.
 */
#ifndef TQ_FUZZ_H
#define TQ_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                            \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: property broken: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* The input as a NUL-terminated string (cut at its first NUL); free it. */
static inline char *fuzz_string(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Formats a value taken from the input's first 8 bytes into a buffer of
 * a size taken from its 9th (up to 40): the text must end inside the
 * buffer, and nothing past it may be written. */
static inline void fuzz_check_format(char *(*format)(char *, size_t, int64_t),
                                     const uint8_t *data, size_t size)
{
    int64_t v = 0;
    memcpy(&v, data, size < sizeof v ? size : sizeof v);
    size_t len = size > 8 ? data[8] % 41 : 32;
    char buf[48];
    memset(buf, 'x', sizeof buf);
    if (len > 0) {
        format(buf, len, v);
        FUZZ_CHECK(memchr(buf, '\0', len) != NULL, "format of %lld into %zu",
                   (long long)v, len);
    }
    for (size_t i = len; i < sizeof buf; i++)
        FUZZ_CHECK(buf[i] == 'x', "format of %lld wrote past %zu", (long long)v, len);
}

#endif
