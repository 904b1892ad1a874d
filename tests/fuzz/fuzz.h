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

#endif
