/*
 * replay.c - runs a fuzz target over files instead of under libFuzzer, so
 * the committed corpus is a regression test of the normal build (and of
 * the AddressSanitizer build). Arguments are files or directories of files;
 * each file is one input. Exits 0 when every input went through; a target
 * that finds a broken property aborts, and the test fails.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!bad)
        LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return bad ? -1 : 0;
}

static int run_path(const char *path, size_t *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        rc = run_path(sub, count);
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0)
            return 1;
    if (count == 0) {
        fprintf(stderr, "no inputs in the corpus given\n");
        return 1;
    }
    printf("%zu inputs replayed\n", count);
    return 0;
}
