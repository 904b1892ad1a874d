/*
 * scratch.h - a scratch directory for a test program: made with mkdtemp,
 * removed at the end without a shell. The tests only create files in it.
 */
#ifndef TQ_TEST_SCRATCH_H
#define TQ_TEST_SCRATCH_H

#include <dirent.h>
#include <stdio.h>
#include <unistd.h>

/* Removes dir and the files in it; returns 0 on success. */
static int scratch_remove(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    int rc = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' || (e->d_name[1] && e->d_name[1] != '.')) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            rc |= unlink(path);
        }
    closedir(d);
    return rc | rmdir(dir);
}

#endif
