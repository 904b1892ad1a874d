/*
 * reaper.c - the process that ends a dead worker's handler groups (what and
 * why: reaper.h). Started by tq_worker_new for command-mode workers.
 *
 * The two talk over a local socket pair of datagrams that keep their
 * bounds (SOCK_SEQPACKET), so that a message is one record, and a send to a
 * reaper that is gone fails with EPIPE instead of raising SIGPIPE in a
 * program that embeds the worker. A record is one int32: a positive value
 * is a process group to end if the worker dies, a negative one the same
 * group done, 0 the worker's stop (end them all now, and exit). The
 * reaper's side runs in a fork of the worker, which may have other
 * threads: from fork to exit it makes only system calls.
 */
#define _GNU_SOURCE
#include "reaper.h"

#include "spawn.h"

#include <errno.h>
#include <poll.h>
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

/* Takes one record: 1 to go on, 0 when it is time to end the groups. */
static int take(int32_t rec, size_t *n)
{
    if (rec == 0)
        return 0;
    size_t i = 0;
    pid_t g = rec > 0 ? rec : -rec;
    while (i < *n && groups[i] != g)
        i++;
    if (rec < 0 && i < *n)
        groups[i] = groups[--*n];
    else if (rec > 0 && i == *n && *n < GROUPS_MAX)
        groups[(*n)++] = g;
    return 1;
}

/* The reaper: records until the worker stops or dies, then SIGKILL to
 * every group still known. It lives in a session of its own and ignores
 * the signals a terminal or a supervisor sends: it ends only when the
 * worker has. */
_Noreturn static void reaper_main(int fd, pid_t worker)
{
    static const int ignored[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGPIPE, SIGUSR1,
                                  SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU, SIGWINCH};
    struct sigaction ign = {.sa_handler = SIG_IGN};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        sigaction(ignored[i], &ign, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    close_others(fd);
    if (chdir("/") != 0) { /* hold no mount busy; harmless if it fails */
    }
    prctl(PR_SET_NAME, "tq-reaper");
    /* Opened after the fork: the worker may already be gone (then the
     * pidfd fails, and its socket's end has closed or soon will). */
    struct pollfd p[2] = {{fd, POLLIN, 0}, {tq__pidfd_open(worker), POLLIN, 0}};
    const nfds_t np = p[1].fd >= 0 ? 2 : 1;
    size_t n = 0;
    for (int on = getppid() == worker; on;) {
        if (poll(p, np, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (np == 2 && p[1].revents) /* the worker exited */
            break;
        int32_t rec = 0;
        ssize_t k = recv(fd, &rec, sizeof rec, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0) /* the worker's end closed: it exited */
            break;
        if (k == sizeof rec)
            on = take(rec, &n);
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
    const pid_t worker = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        reaper_main(p[0], worker);
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

static int record(int fd, int32_t rec)
{
    if (fd < 0)
        return -1;
    for (;;) {
        if (send(fd, &rec, sizeof rec, MSG_NOSIGNAL) == (ssize_t)sizeof rec)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

void tq__reaper_watch(int fd, pid_t pgid)
{
    record(fd, (int32_t)pgid);
}

int tq__reaper_forget(int fd, pid_t pgid)
{
    return pgid > 0 ? record(fd, -(int32_t)pgid) : 0;
}

int tq__reaper_gone(tq__reaper *r)
{
    if (r->pid <= 0)
        return 1;
    if (waitpid(r->pid, NULL, WNOHANG) != r->pid)
        return 0;
    r->pid = 0;
    return 1;
}

void tq__reaper_stop(tq__reaper *r)
{
    record(r->fd, 0);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->pid > 0)
        while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    r->pid = 0;
}
