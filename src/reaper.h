/*
 * reaper.h - a small process that outlives its worker to end the process
 * groups of the worker's handlers when the worker dies by any signal (kill
 * -9 included), before any lease of their jobs can expire.
 *
 * PR_SET_PDEATHSIG reaches a handler process only, not what it started. So
 * a command-mode worker (worker/command.c) forks one reaper, in a session of its
 * own, so that a signal to the worker's whole process group (a shell's kill
 * of a job, timeout -s KILL) does not take it along. Each handler, in its
 * own process group, tells the reaper that group before it execs (spawn.c:
 * the registration precedes anything the handler can start), and the
 * worker tells it when the group is done (tq__reaper_forget). When the
 * worker dies, however it dies, the reaper learns it (its socket's end
 * closes; its pidfd becomes readable, should a fork of the worker still
 * hold that end), sends SIGKILL to every group it still knows, and exits.
 * The worker's registration names the reaper too, so that a worker taking
 * the name over from a dead one waits for its reaper to be gone: its
 * handlers are then over. A process that leaves its group (setsid) is out
 * of reach, as it is out of the worker's.
 */
#ifndef TQ_REAPER_H
#define TQ_REAPER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct tq__reaper {
    pid_t pid; /* 0: none */
    int fd;    /* the worker's end of their socket, close-on-exec; -1: none */
} tq__reaper;

/* Forks the reaper. On failure writes why into err and returns -1, with
 * r->pid 0 and r->fd -1. */
int tq__reaper_start(tq__reaper *r, char *err, size_t errlen);
/* What a handler's child side sends, before it execs: its group, pgid, is
 * the reaper's to end. Async-signal-safe: only a send(2). */
void tq__reaper_watch(int fd, pid_t pgid);
/* Group pgid is done (nothing of it runs user code any more, or it never
 * ran): the reaper forgets it, so that it never signals a group id the
 * kernel handed out again. -1 when the reaper is gone. */
int tq__reaper_forget(int fd, pid_t pgid);
/* Whether the reaper exited (reaped here; r->pid is then 0). */
int tq__reaper_gone(tq__reaper *r);
/* Tells the reaper to end whatever groups it still knows and exit, and
 * waits for it. */
void tq__reaper_stop(tq__reaper *r);

#endif
