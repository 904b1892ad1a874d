/*
 * record.c - a handler for the process tests that must run thousands of
 * jobs fast: appends "TQ_JOB_ID TQ_ATTEMPT NAME TQ_CLAIM" to the file
 * argv[1] in one O_APPEND write (atomic between processes), and exits 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char line[256];
    const char *id = getenv("TQ_JOB_ID"), *attempt = getenv("TQ_ATTEMPT"),
               *claim = getenv("TQ_CLAIM");
    if (argc < 2 || !id || !attempt || !claim)
        return 2;
    int n = snprintf(line, sizeof line, "%s %s %s %s\n", id, attempt,
                     argc > 2 ? argv[2] : "-", claim);
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        return 1;
    return close(fd) != 0;
}
