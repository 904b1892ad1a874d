/*
 * ref_spawn.c - the plain reference for `tq work -- true`: start a command
 * N times, one after another, with posix_spawnp and waitpid, nothing else.
 * Prints one JSON line.
 *
 * usage: ref_spawn N COMMAND [ARG...]
 */
#define _DEFAULT_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[1]) : 0;
    if (n < 1) {
        fprintf(stderr, "usage: ref_spawn N COMMAND [ARG...]\n");
        return 2;
    }
    double t0 = now();
    for (int i = 0; i < n; i++) {
        pid_t pid;
        int st;
        if (posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2, environ) != 0 ||
            waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "ref_spawn: %s failed\n", argv[2]);
            return 1;
        }
    }
    printf("{\"runs\": %d, \"per_s\": %.1f}\n", n, n / (now() - t0));
    return 0;
}
