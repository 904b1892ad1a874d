/*
 * spawn.c - runs a handler command for a job without a shell. Called by the
 * worker pool (worker/command.c), which polls the descriptors kept in tq__child.
 *
 * The payload is never put on a command line: it goes to the child's stdin
 * through a non-blocking pipe, so a payload larger than the pipe buffer
 * does not stall the worker. Each child gets its own process group so that
 * a timeout or shutdown can signal everything it started, and it enters
 * that group before any signal sent to the worker's group can reach it
 * (child_exec). That group is the job: when the handler exits, whatever it
 * left running in its group is ended too (worker/command.c) before the job is
 * acknowledged. A handler's group does not outlive its worker: if the
 * worker dies (kill -9, a crash), the kernel sends the handler SIGKILL, and
 * the worker's reaper (reaper.h), told of the group before the handler
 * execs, sends the whole group SIGKILL, so a worker restarted under the
 * same name can put the job back at once without any of it still running.
 * The child is started with vfork, as posix_spawn does, so
 * its cost does not grow with the worker's memory; the command's path is
 * resolved once, when the worker starts (tq__command_path).
 */
#define _GNU_SOURCE /* pipe2, vfork */
#include "spawn.h"

#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int tq__pidfd_open(pid_t pid)
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
           strncmp(e, "TQ_ATTEMPT=", 11) == 0 || strncmp(e, "TQ_CLAIM=", 9) == 0 ||
           strncmp(e, "TRACEPARENT=", 12) == 0 || strncmp(e, "TQ_GROUP=", 9) == 0 ||
           strncmp(e, "TQ_CONTROL_FD=", 14) == 0 || strncmp(e, "TQ_PARENTS", 10) == 0;
}

/* How many strings extra holds (each ended by its NUL, the list by an
 * empty one), and their bytes with their NULs. */
static size_t extra_count(const char *extra, size_t *bytes)
{
    size_t n = 0;
    *bytes = 0;
    for (const char *e = extra; e && *e; e += strlen(e) + 1, n++)
        *bytes += strlen(e) + 1;
    return n;
}

/* environ without any inherited TQ_JOB_ID/TQ_QUEUE/TQ_ATTEMPT/TQ_CLAIM,
 * TQ_GROUP, TQ_PARENTS* or TRACEPARENT, plus this job's values (its
 * group when it has one; its trace context only when it has one of the
 * valid form: plain SQL may have written anything) and extra. One
 * allocation: pointers first, then the strings. */
static char **job_environ(const tq_job *job, const char *extra)
{
    size_t n = 0;
    while (environ[n])
        n++;
    const int trace = job->traceparent && !tq_traceparent_check(job->traceparent);
    size_t extra_bytes, nextra = extra_count(extra, &extra_bytes);
    size_t more = 7 * 96 + strlen(job->queue) + (trace ? strlen(job->traceparent) : 0) +
                  (job->group ? strlen(job->group) : 0) + extra_bytes;
    char **env = malloc((n + 8 + nextra) * sizeof *env + more);
    if (!env)
        return NULL;
    char *buf = (char *)(env + n + 8 + nextra);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_job_var(environ[i]))
            env[k++] = environ[i];
    env[k++] = buf;
    buf += sprintf(buf, "TQ_JOB_ID=%lld", (long long)job->id) + 1;
    env[k++] = buf;
    buf += sprintf(buf, "TQ_QUEUE=%s", job->queue) + 1;
    env[k++] = buf;
    buf += sprintf(buf, "TQ_ATTEMPT=%d", job->attempts) + 1;
    env[k++] = buf;
    buf += sprintf(buf, "TQ_CLAIM=%lld", (long long)job->claim) + 1;
    env[k++] = buf;
    buf += sprintf(buf, "TQ_CONTROL_FD=%d", TQ__CONTROL_FD) + 1;
    if (job->group) {
        env[k++] = buf;
        buf += sprintf(buf, "TQ_GROUP=%s", job->group) + 1;
    }
    if (trace) {
        env[k++] = buf;
        buf += sprintf(buf, "TRACEPARENT=%s", job->traceparent) + 1;
    }
    for (const char *e = extra; e && *e; e += strlen(e) + 1) {
        env[k++] = buf;
        buf = stpcpy(buf, e) + 1;
    }
    env[k] = NULL;
    return env;
}

/* Signals a handler starts with at their default action: the worker
 * ignores SIGPIPE and catches its stop signals, and exec keeps ignored
 * ones ignored. The job-control ones are those a terminal or a supervisor
 * sends to a whole process group. */
static const int reset_signals[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                    SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP,
                                    SIGTTIN, SIGTTOU, SIGWINCH};

/*
 * The child side of vfork: only system calls, writing nothing of the
 * parent's but *err, and never returning. It moves into its own process
 * group first; a signal sent to the worker's group before that (a Ctrl-C,
 * a supervisor's stop) is pending here, blocked, and is discarded by
 * setting its action to SIG_IGN, before the defaults and the mask are
 * restored for the handler.
 */
_Noreturn static void child_exec(const char *path, char *const *argv, char *const *env,
                                 const int fds[4], pid_t worker, int reaper,
                                 volatile int *err)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, def = {.sa_handler = SIG_DFL};
    sigset_t none;
    if (setpgid(0, 0) != 0)
        goto fail;
    /* Dies with the worker; a worker killed before this line is gone. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        goto fail;
    if (getppid() != worker)
        _exit(127);
    /* Before anything of the handler runs: its group is the reaper's to
     * end should the worker die (reaper.h). */
    tq__reaper_watch(reaper, getpid());
    for (size_t i = 0; i < sizeof reset_signals / sizeof reset_signals[0]; i++) {
        sigaction(reset_signals[i], &ign, NULL);
        sigaction(reset_signals[i], &def, NULL);
    }
    /* stdin, stdout (unless it stays the worker's), stderr, then the
     * control channel, each dup2 after the last use of the descriptor it
     * may replace; one already in place only loses its close-on-exec. */
    for (int fd = 0; fd <= TQ__CONTROL_FD; fd++) {
        if (fds[fd] < 0)
            continue;
        if (fds[fd] == fd ? fcntl(fd, F_SETFD, 0) != 0 : dup2(fds[fd], fd) < 0)
            goto fail;
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(path, argv, env);
fail:
    *err = errno;
    _exit(127);
}

/* vfork and exec, in a frame of its own so that nothing of the caller's is
 * live across vfork. No handler of ours may run in the child, which shares
 * our memory until it execs: every signal is blocked around it. */
static pid_t spawn(const char *path, char *const *argv, char *const *env,
                   const int fds[4], int reaper, volatile int *err, int *fork_errno)
{
    sigset_t all, old;
    pid_t self = getpid();
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = vfork();
    if (pid == 0)
        child_exec(path, argv, env, fds, self, reaper, err);
    *fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return pid;
}

/* An exec error that names the program as the cause: it will not go away
 * by waiting for descriptors, processes or memory. */
static int program_error(int e)
{
    return e == ENOENT || e == EACCES || e == EPERM || e == ENOEXEC || e == EISDIR ||
           e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG || e == ETXTBSY ||
           e == ELIBBAD;
}

/*
 * A handler's stdout is the worker's, unless nobody reads that any more (a
 * pipe whose reader is gone, a hung-up terminal): then /dev/null, so that
 * a handler that prints is not killed by SIGPIPE for the worker's
 * surroundings. Returns a descriptor for /dev/null in that case, else -1.
 */
static int stdout_for_handler(void)
{
    struct pollfd p = {.fd = 1, .events = POLLOUT};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLERR | POLLHUP | POLLNVAL)))
        return -1;
    return open("/dev/null", O_WRONLY | O_CLOEXEC);
}

int tq__child_start(tq__child *c, const char *path, const char *const *argv,
                    const tq_job *job, const char *extra, int capture, int reaper,
                    char *err, size_t errlen)
{
    int in[2] = {-1, -1}, er[2] = {-1, -1}, ctl[2] = {-1, -1}, op[2] = {-1, -1};
    char **env = NULL;
    volatile int child_err = 0;

    memset(c, 0, sizeof *c);
    c->pidfd = c->in_fd = c->err_fd = c->ctl_fd = c->out_fd = -1;
    if (pipe2(in, O_CLOEXEC) || pipe2(er, O_CLOEXEC) || pipe2(ctl, O_CLOEXEC) ||
        (capture && pipe2(op, O_CLOEXEC))) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto fail_pipes;
    }
    if (!(env = job_environ(job, extra))) {
        snprintf(err, errlen, "out of memory");
        goto fail_pipes;
    }
    int fork_errno = 0, out = capture ? op[1] : stdout_for_handler();
    const int fds[TQ__CONTROL_FD + 1] = {in[0], out, er[1], ctl[1]};
    pid_t pid =
        spawn(path, (char *const *)argv, env, fds, reaper, &child_err, &fork_errno);
    free(env);
    if (out >= 0)
        close(out); /* op[1] when captured */
    op[1] = -1;
    close(in[0]);
    close(er[1]);
    close(ctl[1]);
    if (pid < 0 || child_err) {
        int e = pid < 0 ? fork_errno : child_err;
        snprintf(err, errlen, "cannot start '%s': %s", argv[0], strerror(e));
        if (pid > 0) { /* it told the reaper of its group before exec failed */
            waitpid(pid, NULL, 0);
            tq__reaper_forget(reaper, pid);
        }
        close(in[1]);
        close(er[0]);
        close(ctl[0]);
        if (op[0] >= 0)
            close(op[0]);
        c->pid = 0;
        return pid > 0 && program_error(e) ? TQ_EINVAL : TQ_ESYS;
    }
    c->pid = pid;
    c->in_fd = in[1];
    c->err_fd = er[0];
    c->ctl_fd = ctl[0];
    c->out_fd = op[0];
    c->captured = capture;
    if (c->out_fd >= 0)
        fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->in_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->ctl_fd, F_SETFL, O_NONBLOCK);
    c->pidfd = tq__pidfd_open(c->pid);
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
        if (ctl[i] >= 0)
            close(ctl[i]);
        if (op[i] >= 0)
            close(op[i]);
    }
    return TQ_ESYS;
}

/* After a handler that was not found: a name with a space in it is most
 * likely a command line given as one word, which no shell will split. */
static void no_shell_hint(char *err, size_t errlen, const char *name)
{
    size_t n = strlen(err);
    if (strchr(name, ' ') && n < errlen)
        snprintf(
            err + n, errlen - n,
            " (no shell runs it: give the program and its arguments as separate "
            "words, as in -- ./send-mail.sh --fast, not -- './send-mail.sh --fast')");
}

int tq__command_path(char *out, size_t len, const char *name, char *err, size_t errlen)
{
    struct stat st;
    if (strchr(name, '/')) {
        if (snprintf(out, len, "%s", name) >= (int)len) {
            snprintf(err, errlen, "the handler's path is too long");
            return TQ_EINVAL;
        }
    } else {
        const char *path = getenv("PATH");
        if (!path || !*path)
            path = "/usr/local/bin:/usr/bin:/bin";
        int found = 0;
        for (const char *p = path; !found;) {
            const char *end = strchr(p, ':');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            /* An empty entry is the current directory. */
            int w = n ? snprintf(out, len, "%.*s/%s", (int)n, p, name)
                      : snprintf(out, len, "./%s", name);
            if (w > 0 && w < (int)len && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
                access(out, X_OK) == 0)
                found = 1;
            if (!end)
                break;
            p = end + 1;
        }
        if (!found) {
            snprintf(err, errlen, "handler '%s' not found in PATH", name);
            no_shell_hint(err, errlen, name);
            return TQ_EINVAL;
        }
    }
    if (stat(out, &st) != 0) {
        snprintf(err, errlen, "handler '%s': %s", out, strerror(errno));
        no_shell_hint(err, errlen, name);
        return TQ_EINVAL;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "handler '%s' is a directory", out);
        return TQ_EINVAL;
    }
    if (access(out, X_OK) != 0) {
        snprintf(err, errlen, "handler '%s' is not executable: %s", out, strerror(errno));
        return TQ_EINVAL;
    }
    return 0;
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

/* Hands stderr to on_line a line at a time. */
static void split_lines(tq__child *c, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n')
            c->line[c->line_len++] = p[i];
        if (p[i] == '\n' || c->line_len == sizeof c->line) {
            c->on_line(c->line_ud, c->line, c->line_len);
            c->line_len = 0;
        }
    }
}

/*
 * Reads what *fd has, at most about max bytes (then 1: more may be there),
 * through buf (len bytes), handing each chunk to take, which may close *fd
 * to stop. At the end of the stream (or an error) closes *fd, calls
 * at_end if any, and returns 0; 0 too when nothing more is there yet.
 */
static int read_some(tq__child *c, int *fd, size_t max, char *buf, size_t len,
                     void (*take)(tq__child *c, const char *p, size_t n),
                     void (*at_end)(tq__child *c))
{
    for (size_t got = 0; *fd >= 0; got += len) {
        if (got >= max)
            return 1;
        ssize_t n = read(*fd, buf, len);
        if (n > 0) {
            take(c, buf, (size_t)n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            return 0;
        } else {
            close(*fd);
            *fd = -1;
            if (at_end)
                at_end(c);
        }
    }
    return 0;
}

/* stderr: lines to on_line, and the last TQ__TAIL_MAX bytes kept. */
static void take_err(tq__child *c, const char *buf, size_t add)
{
    if (c->on_line)
        split_lines(c, buf, add);
    if (add > TQ__TAIL_MAX) {
        memcpy(c->tail, buf + add - TQ__TAIL_MAX, TQ__TAIL_MAX);
        c->tail_len = TQ__TAIL_MAX;
        return;
    }
    if (c->tail_len + add > sizeof c->tail) {
        size_t keep = TQ__TAIL_MAX - add;
        memmove(c->tail, c->tail + c->tail_len - keep, keep);
        c->tail_len = keep;
    }
    memcpy(c->tail + c->tail_len, buf, add);
    c->tail_len += add;
}

static void err_ended(tq__child *c)
{
    if (c->on_line && c->line_len) /* a last line without its newline */
        c->on_line(c->line_ud, c->line, c->line_len);
    c->line_len = 0;
}

int tq__child_drain(tq__child *c, size_t max)
{
    char buf[4096];
    return read_some(c, &c->err_fd, max, buf, sizeof buf, take_err, err_ended);
}

static void stop_output(tq__child *c)
{
    close(c->out_fd);
    c->out_fd = -1;
}

/* stdout: the job's result, kept whole up to TQ_RESULT_MAX; past that,
 * nothing is kept and reading stops. */
static void take_out(tq__child *c, const char *buf, size_t add)
{
    c->out_seen += add;
    if (c->out_seen > TQ_RESULT_MAX) { /* too much: nothing is kept */
        stop_output(c);
        return;
    }
    if (c->out_len + add > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + add)
            cap *= 2;
        if (cap > TQ_RESULT_MAX)
            cap = TQ_RESULT_MAX;
        unsigned char *p = realloc(c->out, cap);
        if (!p) {
            c->out_failed = 1;
            stop_output(c);
            return;
        }
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, buf, add);
    c->out_len += add;
}

int tq__child_output(tq__child *c, size_t max)
{
    char buf[16384];
    return read_some(c, &c->out_fd, max, buf, sizeof buf, take_out, NULL);
}

static void no_line(void *ud, const char *line, size_t len)
{
    (void)ud;
    (void)line;
    (void)len;
}

int tq__child_control(tq__child *c, size_t max, int end)
{
    char buf[4096];
    tq__ctl_line_fn *fn = c->on_control ? c->on_control : no_line;
    int more = 0;
    for (size_t got = 0; c->ctl_fd >= 0; got += sizeof buf) {
        if (got >= max) {
            more = 1;
            break;
        }
        ssize_t n = read(c->ctl_fd, buf, sizeof buf);
        if (n > 0) {
            tq__ctl_feed(&c->control, buf, (size_t)n, fn, c->control_ud);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            break;
        } else {
            close(c->ctl_fd);
            c->ctl_fd = -1;
            end = 1;
        }
    }
    if (end && more) /* cut off mid-stream: a last part-line is not one */
        c->control = (tq__ctl_reader){0};
    else if (end)
        tq__ctl_end(&c->control, fn, c->control_ud);
    return more;
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

/*
 * The group outlives its leader while anything the handler started runs:
 * its id is the leader's pid, which the kernel does not hand out again
 * while the group has a member. Once the group is empty the id could in
 * principle be reused, but only after the pid space wrapped around between
 * two passes of the worker's loop; and the group is not signalled again
 * once it is known to be done.
 */
void tq__child_kill(tq__child *c, int sig)
{
    if (c->pid <= 0 || c->group_done)
        return;
    if (kill(-c->pid, sig) != 0 && errno == ESRCH)
        c->group_done = 1;
    else if (sig == SIGKILL)
        c->group_done = 1; /* no process of it runs user code again */
}

int tq__child_group_done(tq__child *c)
{
    if (c->pid > 0 && !c->group_done && c->exited && kill(-c->pid, 0) != 0 &&
        errno == ESRCH)
        c->group_done = 1;
    return c->group_done;
}

void tq__child_describe(const tq__child *c, char *buf, size_t len, int always)
{
    char why[64];
    if (!always && WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
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
    /* The last TQ__TAIL_MAX bytes: they may start inside a line, or inside
     * a character. */
    size_t from = c->tail_len > TQ__TAIL_MAX ? c->tail_len - TQ__TAIL_MAX : 0;
    const char *t = c->tail + from;
    size_t tl = c->tail_len - from;
    while (tl > 0 && (t[tl - 1] == '\n' || t[tl - 1] == '\r'))
        tl--;
    size_t o = (size_t)snprintf(buf, len, tl ? "%s: " : "%s", why);
    /* A NUL in the output would end the text early: written as \x00
     * (the worker makes the rest valid UTF-8). */
    for (size_t i = 0; i < tl && o + 5 < len; i++) {
        if (t[i])
            buf[o++] = t[i];
        else
            o += (size_t)snprintf(buf + o, len - o, "\\x00");
    }
    if (o < len)
        buf[o] = '\0';
}

void tq__child_close(tq__child *c)
{
    if (c->in_fd >= 0)
        close(c->in_fd);
    if (c->err_fd >= 0)
        close(c->err_fd);
    if (c->ctl_fd >= 0)
        close(c->ctl_fd);
    if (c->out_fd >= 0)
        close(c->out_fd);
    if (c->pidfd >= 0)
        close(c->pidfd);
    free(c->out);
    c->out = NULL;
    c->in_fd = c->err_fd = c->ctl_fd = c->out_fd = c->pidfd = -1;
}
