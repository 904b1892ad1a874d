/*
 * spawn.h - one handler command run for one job, driven by the worker's poll
 * loop: feed the payload to stdin, keep the tail of stderr, notice exit.
 */
#ifndef TQ_SPAWN_H
#define TQ_SPAWN_H

#include "control.h"
#include "tq_int.h"

#include <sys/types.h>

#define TQ__TAIL_MAX 2048 /* bytes of stderr kept for last_error */

typedef struct tq__child {
    pid_t pid;  /* also the process group id; 0 when not running */
    int pidfd;  /* readable when the child exits, or -1 (then poll waitpid) */
    int in_fd;  /* write end of the child's stdin, -1 once all is written */
    int err_fd; /* read end of the child's stderr, -1 at EOF */
    int ctl_fd; /* read end of its control channel (descriptor 3), -1 at EOF */
    int out_fd; /* read end of its stdout when captured as the result, or -1 */
    /* The captured stdout: out_len bytes kept (out, malloc'd), out_seen
     * read in all; past TQ_RESULT_MAX nothing more is kept. */
    unsigned char *out;
    size_t out_len, out_cap, out_seen;
    int captured;                 /* stdout is the job's result */
    int out_failed;               /* no memory for it */
    const unsigned char *payload; /* borrowed from the job */
    size_t len, off;
    char tail[TQ__TAIL_MAX * 2];
    size_t tail_len;
    int exited, status; /* waitpid status once exited */
    int group_done;     /* no process of the group is left, or all got SIGKILL */
    /* Optional, set after tq__child_start: each line of stderr (without its
     * newline; a line longer than line[] comes in pieces) as it arrives. */
    void (*on_line)(void *ud, const char *line, size_t len);
    void *line_ud;
    char line[512];
    size_t line_len;
    /* Set after tq__child_start: each line of the control channel, as
     * tq__ctl_feed hands it (NULL for an over-long line). */
    tq__ctl_line_fn *on_control;
    void *control_ud;
    tq__ctl_reader control;
} tq__child;

/* Starts the program at path (no shell) with argv in a new process group,
 * which it gives the reaper whose socket is reaper (reaper.h; -1: none)
 * before it execs, with the job's payload on stdin, the write end of a pipe as descriptor
 * 3 (its control channel) and TQ_JOB_ID, TQ_QUEUE, TQ_ATTEMPT, TQ_CONTROL_FD in its
 * environment, and extra ("NAME=value" strings, e.g. TQ_PARENTS, each ended by
 * its NUL and the list by an empty one) unless NULL. capture: its stdout
 * is a pipe the caller reads as the job's result (tq__child_output), else the caller's
 * stdout. On failure writes the reason into err and returns TQ_EINVAL when the program
 * itself cannot be run (gone, not executable, not a program), TQ_ESYS when the machine
 * said no (descriptors, processes, memory). Neither says anything about the job. */
int tq__child_start(tq__child *c, const char *path, const char *const *argv,
                    const tq_job *job, const char *extra, int capture, int reaper,
                    char *err, size_t errlen);
/* Finds the program a handler command names (in PATH unless name has a
 * '/'), into out: a regular file this process may execute. On failure
 * writes the reason into err and returns TQ_EINVAL. */
int tq__command_path(char *out, size_t len, const char *name, char *err, size_t errlen);
/* Writes more payload; closes stdin when done or when the child stops
 * reading. */
void tq__child_feed(tq__child *c);
/* Reads what stderr has, keeping the tail: at most max bytes, so that a
 * handler writing without end cannot hold the caller's loop. Returns 1
 * when it stopped at max with more perhaps waiting, else 0. */
int tq__child_drain(tq__child *c, size_t max);
/* Reads what the control channel has, at most max bytes, handing each
 * line to on_control; at its end (the handler and all it started closed
 * it) the last line without a newline too. Returns 1 when it stopped at
 * max with more perhaps waiting, else 0. end: the handler is over, so take
 * a last unfinished line now, whether or not the channel is closed. */
int tq__child_control(tq__child *c, size_t max, int end);
/* Reads what the captured stdout has, at most max bytes; returns 1 when it
 * stopped at max with more perhaps waiting, else 0. Past TQ_RESULT_MAX
 * (out_seen says so) or out of memory (out_failed) it closes the pipe: the
 * handler's next write gets EPIPE or SIGPIPE. */
int tq__child_output(tq__child *c, size_t max);
/* Reaps the child if it exited; returns 1 once it has. */
int tq__child_reap(tq__child *c);
/* Sends sig to the child's process group, as long as any of it may be
 * left (the leader may have exited). After SIGKILL none of it runs again:
 * the group counts as done. */
void tq__child_kill(tq__child *c, int sig);
/* After the child was reaped: whether its process group is done (nothing
 * the handler started is left, or all of it got SIGKILL). */
int tq__child_group_done(tq__child *c);
/* Describes a finished child: "" for success (unless always: then "exit
 * status 0" too), else why it failed; then the tail of its stderr. */
void tq__child_describe(const tq__child *c, char *buf, size_t len, int always);
/* A descriptor that becomes readable when process pid exits, or -1 (no
 * pidfd_open on this kernel). Only a system call: safe in a fork's child. */
int tq__pidfd_open(pid_t pid);
/* Closes the descriptors (after reaping). */
void tq__child_close(tq__child *c);

#endif
