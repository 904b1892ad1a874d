/*
 * spawn.c - runs a handler command for a job without a shell. Called by the
 * worker pool (worker.c), which polls the descriptors kept in tq__child.
 *
 * The payload is never put on a command line: it goes to the child's stdin
 * through a non-blocking pipe, so a payload larger than the pipe buffer
 * does not stall the worker. Each child gets its own process group so that
 * a timeout or shutdown can signal everything it started.
 */
#define _GNU_SOURCE /* pipe2 */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    return -1;
#endif
}

static int is_job_var(const char *e)
{
    return strncmp(e, "TQ_JOB_ID=", 10) == 0 || strncmp(e, "TQ_QUEUE=", 9) == 0 ||
           strncmp(e, "TQ_ATTEMPT=", 11) == 0;
}

/* environ without any inherited TQ_JOB_ID/TQ_QUEUE/TQ_ATTEMPT, plus this
 * job's values. One allocation: pointers first, then the three strings. */
static char **job_environ(const tq_job *job)
{
    size_t n = 0;
    while (environ[n])
        n++;
    size_t extra = 3 * 96 + strlen(job->queue);
    char **env = malloc((n + 4) * sizeof *env + extra);
    if (!env)
        return NULL;
    char *buf = (char *)(env + n + 4);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_job_var(environ[i]))
            env[k++] = environ[i];
    env[k++] = buf;
    buf += sprintf(buf, "TQ_JOB_ID=%lld", (long long)job->id) + 1;
    env[k++] = buf;
    buf += sprintf(buf, "TQ_QUEUE=%s", job->queue) + 1;
    env[k++] = buf;
    sprintf(buf, "TQ_ATTEMPT=%d", job->attempts);
    env[k] = NULL;
    return env;
}

int tq__child_start(tq__child *c, const char *const *argv, const tq_job *job, char *err,
                    size_t errlen)
{
    int in[2] = {-1, -1}, er[2] = {-1, -1}, src;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, defs;
    char **env = NULL;

    memset(c, 0, sizeof *c);
    c->pidfd = c->in_fd = c->err_fd = -1;
    if (pipe2(in, O_CLOEXEC) || pipe2(er, O_CLOEXEC)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto fail_pipes;
    }
    if (!(env = job_environ(job))) {
        snprintf(err, errlen, "out of memory");
        goto fail_pipes;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, er[1], 2);
    posix_spawnattr_init(&at);
    sigemptyset(&none);
    sigemptyset(&defs);
    const int reset[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP, SIGQUIT,
                         SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM};
    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
        sigaddset(&defs, reset[i]);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &defs);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    src = posix_spawnp(&c->pid, argv[0], &fa, &at, (char *const *)argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(env);
    close(in[0]);
    close(er[1]);
    if (src != 0) {
        snprintf(err, errlen, "cannot start '%s': %s", argv[0], strerror(src));
        close(in[1]);
        close(er[0]);
        c->pid = 0;
        return TQ_ESYS;
    }
    c->in_fd = in[1];
    c->err_fd = er[0];
    fcntl(c->in_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
    c->pidfd = open_pidfd(c->pid);
    c->payload = job->payload;
    c->len = job->payload_len;
    tq__child_feed(c);
    return 0;

fail_pipes:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (er[i] >= 0)
            close(er[i]);
    }
    return TQ_ESYS;
}

void tq__child_feed(tq__child *c)
{
    while (c->in_fd >= 0 && c->off < c->len) {
        ssize_t n = write(c->in_fd, c->payload + c->off, c->len - c->off);
        if (n > 0) {
            c->off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            return; /* wait for POLLOUT */
        } else {
            break; /* EPIPE: the handler does not read stdin; fine */
        }
    }
    if (c->in_fd >= 0) {
        close(c->in_fd);
        c->in_fd = -1;
    }
}

void tq__child_drain(tq__child *c)
{
    char buf[4096];
    while (c->err_fd >= 0) {
        ssize_t n = read(c->err_fd, buf, sizeof buf);
        if (n > 0) {
            /* Keep the last TQ__TAIL_MAX bytes. */
            size_t add = (size_t)n;
            if (add > TQ__TAIL_MAX) {
                memcpy(c->tail, buf + add - TQ__TAIL_MAX, TQ__TAIL_MAX);
                c->tail_len = TQ__TAIL_MAX;
                continue;
            }
            if (c->tail_len + add > sizeof c->tail) {
                size_t keep = TQ__TAIL_MAX - add;
                memmove(c->tail, c->tail + c->tail_len - keep, keep);
                c->tail_len = keep;
            }
            memcpy(c->tail + c->tail_len, buf, add);
            c->tail_len += add;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            return;
        } else {
            close(c->err_fd);
            c->err_fd = -1;
        }
    }
}

int tq__child_reap(tq__child *c)
{
    if (c->exited)
        return 1;
    if (c->pid <= 0)
        return 0;
    int st;
    pid_t r = waitpid(c->pid, &st, WNOHANG);
    if (r == c->pid) {
        c->exited = 1;
        c->status = st;
    }
    return c->exited;
}

void tq__child_kill(tq__child *c, int sig)
{
    if (c->pid > 0 && !c->exited)
        kill(-c->pid, sig);
}

void tq__child_describe(const tq__child *c, char *buf, size_t len)
{
    char why[64];
    if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
        buf[0] = '\0';
        return;
    }
    if (WIFEXITED(c->status))
        snprintf(why, sizeof why, "exit status %d", WEXITSTATUS(c->status));
    else if (WIFSIGNALED(c->status))
        snprintf(why, sizeof why, "killed by signal %d (%s)", WTERMSIG(c->status),
                 strsignal(WTERMSIG(c->status)));
    else
        snprintf(why, sizeof why, "ended with status %d", c->status);
    /* The tail starts at a line boundary when one is near. */
    size_t from = c->tail_len > TQ__TAIL_MAX ? c->tail_len - TQ__TAIL_MAX : 0;
    const char *t = c->tail + from;
    size_t tl = c->tail_len - from;
    while (tl > 0 && (t[tl - 1] == '\n' || t[tl - 1] == '\r'))
        tl--;
    if (tl)
        snprintf(buf, len, "%s: %.*s", why, (int)tl, t);
    else
        snprintf(buf, len, "%s", why);
}

void tq__child_close(tq__child *c)
{
    if (c->in_fd >= 0)
        close(c->in_fd);
    if (c->err_fd >= 0)
        close(c->err_fd);
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->in_fd = c->err_fd = c->pidfd = -1;
}
