/*
 * reaper.h - a small process that outlives its worker to end the process
 * groups of the worker's handlers when the worker dies by any signal (kill
 * -9 included), before any lease of their jobs can expire.
 *
 * PR_SET_PDEATHSIG reaches a handler process only, not what it started. So
 * a command-mode worker (worker.c) forks one reaper. Each handler, in its
 * own process group, tells the reaper that group before it execs (spawn.c:
 * the registration precedes anything the handler can start), and the
 * worker tells it when the group is done (tq__reaper_forget). The reaper
 * reads until the worker's end of their socket closes, which happens when
 * the worker exits, however it exits; then it sends SIGKILL to every group it
 * still knows and exits. A process that leaves its group (setsid) is out
 * of its reach, as it is out of the worker's.
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
/* What a handler's child side writes, before it execs: its group, pgid,
 * is the reaper's to end. Async-signal-safe: only a send(2). */
void tq__reaper_watch(int fd, pid_t pgid);
/* Group pgid is done (nothing of it runs user code any more): the reaper
 * forgets it, so that it never signals a group id the kernel handed out
 * again. */
void tq__reaper_forget(tq__reaper *r, pid_t pgid);
/* Closes the socket (the reaper then ends whatever groups it still knows)
 * and waits for the reaper to exit. */
void tq__reaper_stop(tq__reaper *r);

#endif
