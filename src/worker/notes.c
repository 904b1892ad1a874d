/*
 * notes.c - what an idle worker says of the store: that other queues hold
 * the jobs it waits for (note_empty), or what a draining worker waits for
 * (note_waiting), looked up rarely (look_around). Called by the loop's
 * finished phase.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOTE_EVERY_US 10000000LL /* an idle worker's notes (note_waiting) */
#define NOTE_WAIT_US  1000000LL  /* a drain's wait worth a note */

/* The index of queue name among the worker's, or -1. */
static int queue_index(const tq_worker *w, const char *name)
{
    for (size_t i = 0; i < w->nqueues; i++)
        if (strcmp(w->queues[i], name) == 0)
            return (int)i;
    return -1;
}

/* Appends to buf (a line being built) what fmt says, after ", " if buf
 * has something already. */
static void append(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used && used + 2 < len)
        used += (size_t)snprintf(buf + used, len - used, ", ");
    va_list ap;
    va_start(ap, fmt);
    if (used < len)
        vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* What the store holds beyond this worker's claims, for its notes: due
 * jobs of other queues (named in list), and of its own queues what is
 * delayed (the soonest due in next), running elsewhere, or ready in a
 * paused queue. */
typedef struct outlook {
    int64_t mine, others, delayed, running, paused, next;
    char list[256];
} outlook;

/* Counts every ready and running row (engine active): asked rarely. A
 * failure only loses the note: -1, the error cleared. */
static int look_around(tq_worker *w, outlook *o)
{
    tq__active *v = NULL;
    size_t n = 0;
    memset(o, 0, sizeof *o);
    o->next = INT64_MAX;
    if (w->db->engine->active(w->db, &v, &n)) {
        tq__clearerr(w->db);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        int qi = queue_index(w, v[i].queue);
        if (qi < 0) {
            o->others += v[i].due;
            if (v[i].due)
                append(o->list, sizeof o->list, "%s (%lld)", v[i].queue,
                       (long long)v[i].due);
            continue;
        }
        o->mine += v[i].due + v[i].delayed + v[i].running;
        o->delayed += v[i].delayed;
        o->running += v[i].running;
        if (w->qinfo[qi].paused)
            o->paused += v[i].due;
        if (v[i].delayed && v[i].next_due_in_us < o->next)
            o->next = v[i].next_due_in_us;
    }
    free(v);
    return 0;
}

/*
 * An idle worker that has claimed nothing yet and finds nothing pending in
 * its queues says once when other queues hold due jobs (a newcomer's jobs
 * in 'mail' and a worker on 'default'), looking again each
 * 6 * NOTE_EVERY_US until it did. known_empty: the caller has just found
 * nothing pending in its queues.
 */
void tq__note_empty(tq_worker *w, const pass *p, int known_empty)
{
    int pending = 0;
    outlook o;
    if (w->all_queues || w->notes.said_empty || w->counters.claimed || !p->tried ||
        p->running || p->nheld || w->store.disconnected ||
        (w->notes.empty_checked && p->now - w->notes.empty_checked < 6 * NOTE_EVERY_US))
        return;
    w->notes.empty_checked = p->now;
    /* The index seeks of pending before any count. */
    for (size_t i = 0; !known_empty && i < w->nqueues && !pending; i++)
        if (w->db->engine->pending(w->db, w->queues[i], &pending))
            pending = 1;
    tq__clearerr(w->db);
    if (pending || look_around(w, &o) || o.mine || !o.others)
        return;
    w->notes.said_empty = 1;
    char names[200] = "";
    for (size_t i = 0; i < w->nqueues; i++)
        append(names, sizeof names, "'%s'", w->queues[i]);
    tq__worker_log(w, TQ_LOG_WARN,
                   "%s %s %s empty, but %lld job(s) are ready in other queues: %s; this "
                   "worker takes jobs from %s only (tq work --queue Q)",
                   w->nqueues > 1 ? "queues" : "queue", names,
                   w->nqueues > 1 ? "are" : "is", (long long)o.others, o.list, names);
}

/*
 * A draining worker that waits (its queues hold jobs it cannot take yet)
 * says what for, once per wait, once the wait has lasted NOTE_WAIT_US (the
 * other workers' last jobs of a run are not worth a note), and at most
 * every NOTE_EVERY_US (a backlog of delayed jobs coming due one by one
 * ends a wait with each).
 */
void tq__note_waiting(tq_worker *w, const pass *p, int waiting)
{
    const int64_t now = p->now;
    outlook o;
    char what[320] = "", d[32], t[40];
    if (!waiting) {
        w->notes.waiting_since = 0;
        w->notes.said_waiting = 0;
        return;
    }
    if (!w->notes.waiting_since)
        w->notes.waiting_since = now;
    if (w->notes.said_waiting || w->store.disconnected ||
        now - w->notes.waiting_since < NOTE_WAIT_US ||
        (w->notes.wait_checked && now - w->notes.wait_checked < NOTE_EVERY_US))
        return;
    w->notes.wait_checked = now;
    w->notes.said_waiting = 1;
    if (look_around(w, &o))
        return;
    if (o.delayed)
        append(what, sizeof what, "%lld delayed job(s), next due %s (in %s)",
               (long long)o.delayed, tq_time_format(t, sizeof t, tq__now_us() + o.next),
               tq_duration_format(d, sizeof d, o.next > 0 ? o.next : 0));
    if (o.running)
        append(what, sizeof what, "%lld job(s) running on other workers",
               (long long)o.running);
    if (o.paused)
        append(what, sizeof what, "%lld ready job(s) of a paused queue",
               (long long)o.paused);
    /* Nothing ready or running, and still something to wait for: jobs
     * whose parents (in other queues) are not done. */
    if (!what[0])
        append(what, sizeof what,
               "jobs waiting for their parents (tq list --state waiting)");
    tq__worker_log(w, TQ_LOG_INFO, "draining: waiting for %s", what);
}
