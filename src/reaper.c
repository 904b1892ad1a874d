/*
 * reaper.c - the process that ends a dead worker's handler groups (what and
 * why: reaper.h). Started by tq_worker_new for command-mode workers.
 *
 * The two talk over a local socket pair of datagrams that keep their
 * bounds (SOCK_SEQPACKET), so that a message is one record, and a send to a
 * reaper that is gone fails with EPIPE instead of raising SIGPIPE in a
 * program that embeds the worker. A record is one int32: a positive value
 * is a process group to end if the worker dies, a negative one the same
 * group done. The reaper's side runs in a fork of the worker, which may
 * have other threads: from fork to exit it makes only system calls.
 */
#define _GNU_SOURCE /* close_range */
#include "reaper.h"

#include "../include/tq.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* A slot runs one handler group at a time. */
#define GROUPS_MAX TQ_CONCURRENCY_MAX

static pid_t groups[GROUPS_MAX];

/* Closes every descriptor but keep. */
static void close_others(int keep)
{
#ifdef SYS_close_range
    if ((keep == 0 || syscall(SYS_close_range, 0U, (unsigned)keep - 1, 0U) == 0) &&
        syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0U) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (int fd = 0; fd < (max > 0 ? max : 1024); fd++)
        if (fd != keep)
            close(fd);
}

/* The reaper: records until the worker's end closes, then SIGKILL to every
 * group still known. Signals that a terminal or a supervisor sends to the
 * worker's process group are ignored: the worker decides on those, and
 * the reaper ends only when the worker has. */
_Noreturn static void reaper_main(int fd)
{
    static const int ignored[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGPIPE, SIGUSR1,
                                  SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU, SIGWINCH};
    struct sigaction ign = {.sa_handler = SIG_IGN};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        sigaction(ignored[i], &ign, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    close_others(fd);
    if (chdir("/") != 0) { /* hold no mount busy; harmless if it fails */
    }
    prctl(PR_SET_NAME, "tq-reaper");
    size_t n = 0;
    for (;;) {
        int32_t rec = 0;
        ssize_t k = recv(fd, &rec, sizeof rec, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) /* the worker's end closed: it exited */
            break;
        if (k != sizeof rec)
            continue;
        if (rec > 0 && n < GROUPS_MAX) {
            groups[n++] = rec;
        } else if (rec < 0) {
            for (size_t i = 0; i < n; i++)
                if (groups[i] == -rec) {
                    groups[i] = groups[--n];
                    break;
                }
        }
    }
    for (size_t i = 0; i < n; i++)
        kill(-groups[i], SIGKILL);
    _exit(0);
}

int tq__reaper_start(tq__reaper *r, char *err, size_t errlen)
{
    int p[2];
    r->pid = 0;
    r->fd = -1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        reaper_main(p[0]);
    }
    int e = errno;
    close(p[0]);
    if (pid < 0) {
        close(p[1]);
        snprintf(err, errlen, "fork: %s", strerror(e));
        return -1;
    }
    r->pid = pid;
    r->fd = p[1];
    return 0;
}

static void record(int fd, int32_t rec)
{
    if (fd < 0)
        return;
    while (send(fd, &rec, sizeof rec, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
}

void tq__reaper_watch(int fd, pid_t pgid)
{
    record(fd, (int32_t)pgid);
}

void tq__reaper_forget(tq__reaper *r, pid_t pgid)
{
    if (pgid > 0)
        record(r->fd, -(int32_t)pgid);
}

void tq__reaper_stop(tq__reaper *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->pid > 0)
        while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    r->pid = 0;
}
