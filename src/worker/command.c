/*
 * command.c - the command runner (tq__runner_command): each job is a child
 * process started in a free slot by the loop (tq__child_start, spawn.c),
 * with the payload on its stdin, polled by the loop, its stderr, control
 * channel and stdout read as it runs, and acknowledged once its process
 * group has ended. Timeouts and stops end it with SIGTERM, then SIGKILL;
 * the reaper (reaper.c) ends the groups if the worker dies. No thread: the
 * loop alone touches the slots, so the table's lock is nothing.
 * Called through w->run by the loop and the other parts.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KILL_AFTER_TERM_US 1000000LL /* on stop: SIGTERM, then SIGKILL */
#define DRAIN_PASS_MAX     65536     /* most stderr bytes read per slot and pass */
#define DRAIN_END_MAX      1048576   /* and once the handler's group ended */

/* A line a command handler wrote to its control channel (NULL: one too
 * long). What it says waits in the slot; a line that says nothing
 * sensible is logged once per job and otherwise ignored. */
static void control_line(void *ud, const char *line, size_t len)
{
    slot *s = ud;
    tq__ctl_msg *m = &s->owner->cmd.ctl_msg;
    char why[160];
    int r = line ? tq__control_parse(m, line, len, why, sizeof why) : -1;
    if (!line)
        snprintf(why, sizeof why, "a line longer than %d bytes", TQ__CONTROL_LINE_MAX);
    if (r < 0) {
        if (!s->ctl_warned) {
            char *raw = line ? tq__memdup(line, len < 80 ? len : 80, 1) : NULL;
            char *shown = raw ? tq_text_printable(raw) : NULL;
            tq__worker_log(
                s->owner, TQ_LOG_WARN,
                "job %lld: ignored on its control channel: %s%s%s%s (said once "
                "per job)",
                (long long)s->job.id, why, shown ? " in '" : "", shown ? shown : "",
                shown ? "'" : "");
            free(shown);
            free(raw);
        }
        s->ctl_warned = 1;
        return;
    }
    if (r == 0)
        return;
    switch (m->verb) {
    case TQ__CTL_PROGRESS:
        s->progress = m->pct;
        /* parse kept it within TQ__PROGRESS_TEXT_MAX, cut between characters */
        memcpy(s->progress_text, m->text, strlen(m->text) + 1);
        s->progress_dirty = 1;
        s->owner->acks.progress_said = 1;
        break;
    case TQ__CTL_SNOOZE:
        s->word = TQ__CTL_SNOOZE;
        s->snooze_us = m->delay_us;
        break;
    case TQ__CTL_DISCARD: {
        free(s->word_text); /* out of memory: a discard with no reason is one */
        s->word_text = tq__strdup(m->text);
        s->word = TQ__CTL_DISCARD;
        break;
    }
    }
}

/* With log_jobs: a line a command handler wrote to stderr, escaped. */
static void stderr_line(void *ud, const char *line, size_t len)
{
    const slot *s = ud;
    char *raw = tq__memdup(line, len, 1);
    char *text = raw ? tq_text_printable(raw) : NULL;
    tq__worker_log(s->owner, TQ_LOG_DEBUG, "job %lld stderr: %s", (long long)s->job.id,
                   text ? text : "(out of memory)");
    free(text);
    free(raw);
}

/* The longest list of parent ids a handler gets in one variable of its
 * environment; a longer one goes to a file (the variable's name with
 * _FILE). */
#define PARENTS_ENV_MAX 8192

/* Appends to text at *k "name=" the n ids with commas between, or, over
 * PARENTS_ENV_MAX, "name_FILE=" a file of them, one a line (its path in
 * *file, removed with the slot), and its NUL. 0, or the reason in err. */
static int ids_var(char *text, size_t *k, const char *name, const int64_t *ids, size_t n,
                   char **file, int64_t job, char *err, size_t errlen)
{
    const size_t at = *k;
    *k += (size_t)sprintf(text + *k, "%s=", name);
    for (size_t i = 0; i < n; i++)
        *k += (size_t)sprintf(text + *k, i ? ",%lld" : "%lld", (long long)ids[i]);
    if (*k - at <= PARENTS_ENV_MAX) {
        *k += 1; /* its NUL, written by sprintf */
        return 0;
    }
    const char *dir = getenv("TMPDIR");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tq-parents-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkostemp(path, O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    int bad = !f;
    for (size_t i = 0; i < n && !bad; i++)
        bad = fprintf(f, "%lld\n", (long long)ids[i]) < 0;
    if (f)
        bad = fclose(f) != 0 || bad;
    else if (fd >= 0)
        close(fd);
    if (bad || !(*file = tq__strdup(path))) {
        snprintf(err, errlen, "cannot write the parents of job %lld to %.100s: %s",
                 (long long)job, path, strerror(errno ? errno : ENOMEM));
        if (fd >= 0)
            unlink(path);
        return TQ_ESYS;
    }
    *k = at + (size_t)sprintf(text + at, "%s_FILE=%s", name, path) + 1;
    return 0;
}

/* For a command whose job has parents, its environment's extra variables
 * (tq__child_start): TQ_PARENTS, the ids of all of them, TQ_PARENTS_DONE of
 * those done and TQ_PARENTS_FAILED of those dead or cancelled (as the job
 * counted them: tq_job_parent_ends), each with commas between or in a file
 * (ids_var); *out NULL for a job without. 0, or the reason in err. */
static int parents_env(tq_worker *w, slot *s, char **out, char *err, size_t errlen)
{
    *out = NULL;
    if (s->job.nparents <= 0)
        return 0;
    tq_parent *v = NULL;
    size_t n = 0;
    int rc = tq_job_parent_ends(&v, &n, w->db, s->job.id);
    if (rc) {
        snprintf(err, errlen, "cannot read the parents of job %lld: %s",
                 (long long)s->job.id, tq_errmsg(w->db));
        return rc;
    }
    /* the ids of all, then those done, then those failed */
    int64_t *ids = malloc((3 * n + 1) * sizeof *ids);
    const size_t cap = 3 * (n * 21 + PATH_MAX + 32) + 1;
    char *text = malloc(cap);
    if (!ids || !text) {
        free(ids);
        free(text);
        tq_free(v);
        snprintf(err, errlen, "out of memory");
        return TQ_ENOMEM;
    }
    size_t ndone = 0, nfailed = 0;
    for (size_t i = 0; i < n; i++) {
        ids[i] = v[i].id;
        if (v[i].state == TQ_DONE)
            ids[n + ndone++] = v[i].id;
    }
    for (size_t i = 0; i < n; i++)
        if (v[i].state == TQ_DEAD || v[i].state == TQ_CANCELLED)
            ids[n + ndone + nfailed++] = v[i].id;
    tq_free(v);
    static const char *const names[] = {"TQ_PARENTS", "TQ_PARENTS_DONE",
                                        "TQ_PARENTS_FAILED"};
    const int64_t *from[] = {ids, ids + n, ids + n + ndone};
    const size_t count[] = {n, ndone, nfailed};
    size_t k = 0;
    for (int i = 0; i < 3 && !rc; i++)
        rc = ids_var(text, &k, names[i], from[i], count[i], &s->parents_files[i],
                     s->job.id, err, errlen);
    free(ids);
    if (rc) {
        free(text);
        return rc;
    }
    text[k] = '\0'; /* the list's end */
    *out = text;
    return 0;
}

/* Command mode: a slot whose child is gone (or never started: then no
 * start is recorded, and a held job is not charged for it). */
static int finish_slot(tq_worker *w, slot *s, int ok, const char *error)
{
    const int64_t began = s->child.pid > 0 ? s->started : 0;
    /* The handler's word counts unless the worker ended it: a timeout, or a
     * stop that killed it (one it outlived, exiting by itself after the
     * stop's SIGTERM, leaves its word standing). */
    const int exited = s->child.pid > 0 && s->child.exited && WIFEXITED(s->child.status);
    const tq__ctl_verb word = s->timed_out || (s->release && !exited) ? 0 : s->word;
    const int release = s->release && !word;
    outcome o = {.job = {s->job.id, s->job.claim, began, s->job.attempts, s->qi},
                 .max_attempts = s->job.max_attempts,
                 .snoozes = s->job.snoozes,
                 .ran_us = tq__mono_us() - s->started,
                 .lost = s->lost,
                 .release = release,
                 .ok = ok,
                 .error = word == TQ__CTL_DISCARD ? s->word_text : error,
                 .word = word,
                 .snooze_us = s->snooze_us};
    if (!s->start_recorded)
        w->starts.unrecorded--; /* the ack records it */
    /* A results queue's command: its stdout is the result of a done job,
     * and a done job whose stdout is over the limit is a failure. */
    char over[160];
    if (s->child.captured && !word && !release && !s->timed_out &&
        (s->child.out_seen > TQ_RESULT_MAX || s->child.out_failed)) {
        /* Its stdout was closed at the limit: what it did next (a SIGPIPE
         * death, say) is not the story. */
        if (s->child.out_failed)
            snprintf(over, sizeof over, "out of memory for the job's result");
        else
            snprintf(over, sizeof over,
                     "its stdout, the job's result, is over %d bytes; not kept",
                     TQ_RESULT_MAX);
        o.ok = ok = 0;
        o.error = over;
    } else if (s->child.captured && ok && !word) {
        o.has_output = 1;
        o.output = s->child.out;
        o.output_len = s->child.out_len;
        s->child.out = NULL;
    }
    int rc = 0;
    /* Its last progress stays with a job that ends done or discarded. */
    if (s->progress_dirty && !s->lost && !release &&
        ((ok && !word) || word == TQ__CTL_DISCARD))
        rc = tq__queue_progress(w, s);
    if (!rc)
        rc = tq__finish(w, &o);
    free(o.output); /* not taken: the run did not end done */
    tq__free_slot(s);
    return rc;
}

/* Whether a child died of a signal that stops a worker. While the worker
 * stops, such a death is the stop reaching the handler (a supervisor that
 * signals every process it started, or a terminal's Ctrl-C), not a failure
 * of the job: the job is released, its attempt given back. */
static int killed_by_stop(const tq__child *c)
{
    if (!WIFSIGNALED(c->status))
        return 0;
    int sig = WTERMSIG(c->status);
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

/*
 * Command mode, once the handler exited: whether its job is over. The job
 * is its process group, as a service is its control group to a service
 * manager: what the handler left running there (a background process, a
 * child that ignored the timeout's SIGTERM) gets SIGTERM, and SIGKILL once
 * the grace time is over, and the job is acknowledged only then, so that a
 * job handed back never runs beside a copy of itself. The handler's exit
 * status alone says how the job went.
 */
static int group_ended(tq_worker *w, slot *s)
{
    if (tq__child_group_done(&s->child))
        return 1;
    if (!s->lingering) {
        s->lingering = 1;
        tq__worker_log(
            w, TQ_LOG_WARN,
            "job %lld: the handler exited and left processes running; ending them",
            (long long)s->job.id);
        if (!s->kill_at) { /* else a SIGTERM went already, and SIGKILL is due */
            tq__child_kill(&s->child, SIGTERM);
            s->kill_at = tq__mono_us() + w->grace_us;
        }
    }
    return tq__child_group_done(&s->child);
}

/* Collects children that exited. */
static int collect(tq_worker *w)
{
    char err[TQ__TAIL_MAX + 256];
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        tq__child_feed(&s->child);
        tq__child_drain(&s->child, DRAIN_PASS_MAX);
        tq__child_control(&s->child, DRAIN_PASS_MAX, 0);
        tq__child_output(&s->child, DRAIN_PASS_MAX);
        if (!tq__child_reap(&s->child) || !group_ended(w, s))
            continue;
        /* The rest: what the pipes held when the group ended (a process
         * that left the group may still write: not forever). */
        tq__child_drain(&s->child, DRAIN_END_MAX);
        tq__child_control(&s->child, DRAIN_END_MAX, 1);
        tq__child_output(&s->child, DRAIN_END_MAX);
        size_t off = 0;
        if (s->timed_out) {
            char d[32];
            off = (size_t)snprintf(err, 64, "timed out after %s, then ",
                                   tq_duration_format(d, sizeof d, s->timeout_us));
        }
        /* after a timeout even an exit 0 is said */
        tq__child_describe(&s->child, err + off, sizeof err - off, s->timed_out);
        if (w->loop.stop_requested && !s->timed_out && killed_by_stop(&s->child))
            s->release = 1;
        int rc = finish_slot(w, s, !s->timed_out && err[0] == '\0', err);
        if (rc)
            return rc;
    }
    return 0;
}

/* Command mode: starts job in a free slot. */
static int start_job(tq_worker *w, const held_job *h)
{
    const size_t qi = h->qi;
    slot *s = NULL;
    char err[256];
    for (int i = 0; i < w->concurrency && !s; i++)
        if (w->slots[i].state == SLOT_FREE)
            s = &w->slots[i];
    if (!s) /* cannot happen: jobs start only in free slots */
        return tq__seterr(w->db, TQ_EINVAL, "no free slot for a claimed job");
    s->job = h->job;
    s->qi = qi;
    s->state = SLOT_RUNNING;
    s->started = tq__mono_us();
    tq__mark_start(w, s);
    s->timeout_us = h->timeout_us;
    s->deadline = h->timeout_us ? s->started + h->timeout_us : 0;
    char *parents = NULL;
    int why = parents_env(w, s, &parents, err, sizeof err);
    if (!why)
        why = tq__child_start(&s->child, w->cmd.path, (const char *const *)w->cmd.argv,
                              &s->job, parents, w->qinfo[qi].results, w->cmd.reaper.fd,
                              err, sizeof err);
    free(parents);
    if (why) {
        s->release = 1;
        int rc = finish_slot(w, s, 0, NULL);
        tq__start_failed(w, why == TQ_EINVAL, err);
        return rc;
    }
    if (w->log_jobs) {
        s->child.on_line = stderr_line;
        s->child.line_ud = s;
    }
    s->child.on_control = control_line;
    s->child.control_ud = s;
    w->starts.failing_since = 0;
    w->starts.backoff = 0;
    return 0;
}

/* Command mode: starts held jobs, oldest first, while slots are free; if a
 * held job waits for its queue's settings, reads them and goes on. */
static int start_held(tq_worker *w)
{
    int rc = 0, free_slots = tq__free_slot_count(w);
    held_job h;
    for (int round = 0; round < 2 && !rc; round++) {
        while (!rc && !w->loop.stop_requested && free_slots > 0 &&
               tq__pop_startable(w, &h)) {
            free_slots--;
            rc = start_job(w, &h);
            if (w->starts.cap) /* a start failed: the room is smaller now */
                free_slots = tq__free_slot_count(w);
        }
        if (rc || !w->settings.stale || free_slots <= 0)
            break;
        rc = tq__refresh_stale(w);
    }
    return rc;
}

/* Timeouts and the stop deadline: signal children whose time is up. */
static void enforce_deadlines(tq_worker *w, int64_t now, int64_t stop_at)
{
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        if (s->child.exited) { /* only its group is left: see group_ended */
            if (s->kill_at && now >= s->kill_at) {
                tq__child_kill(&s->child, SIGKILL);
                s->kill_at = 0;
            }
            continue;
        }
        if (s->deadline && now >= s->deadline && !s->timed_out) {
            s->timed_out = 1;
            tq__child_kill(&s->child, SIGTERM);
            s->kill_at = now + w->grace_us;
        }
        if (stop_at && now >= stop_at && !s->release && !s->timed_out) {
            s->release = 1;
            tq__child_kill(&s->child, SIGTERM);
            s->kill_at = now + KILL_AFTER_TERM_US;
        }
        if (s->kill_at && now >= s->kill_at) {
            tq__child_kill(&s->child, SIGKILL);
            s->kill_at = 0;
        }
    }
}

/* The descriptors of the running children (5 per slot at most) for the
 * loop's poll(); a group that lingers, or a child without a pidfd, is
 * looked at again within 10 ms. */
static nfds_t watch_children(tq_worker *w, struct pollfd *fds, int64_t *timeout_us)
{
    nfds_t n = 0;
    int need_reap_poll = 0;
    for (int i = 0; i < w->concurrency; i++) {
        tq__child *c = &w->slots[i].child;
        if (w->slots[i].state != SLOT_RUNNING)
            continue;
        if (c->exited) /* its group lingers: look again soon */
            need_reap_poll = 1;
        else if (c->pidfd >= 0)
            fds[n++] = (struct pollfd){c->pidfd, POLLIN, 0};
        else
            need_reap_poll = 1;
        if (c->in_fd >= 0)
            fds[n++] = (struct pollfd){c->in_fd, POLLOUT, 0};
        if (c->err_fd >= 0)
            fds[n++] = (struct pollfd){c->err_fd, POLLIN, 0};
        if (c->ctl_fd >= 0)
            fds[n++] = (struct pollfd){c->ctl_fd, POLLIN, 0};
        if (c->out_fd >= 0)
            fds[n++] = (struct pollfd){c->out_fd, POLLIN, 0};
    }
    if (need_reap_poll && *timeout_us > 10000)
        *timeout_us = 10000;
    return n;
}

/* The soonest deadline of a running child (a timeout, a SIGKILL due), from
 * now; INT64_MAX: none. */
static int64_t next_deadline(tq_worker *w, int64_t now)
{
    int64_t due = INT64_MAX;
    for (int i = 0; i < w->concurrency; i++) {
        const slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        if (s->deadline && !s->timed_out && s->deadline - now < due)
            due = s->deadline - now;
        if (s->kill_at && s->kill_at - now < due)
            due = s->kill_at - now;
    }
    return due;
}

/* A second stop: the grace ends now. */
static void kill_now(tq_worker *w, int64_t now)
{
    int killed = 0;
    w->loop.stop_at = now;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        /* A handler that has exited said how its job went (only its
         * group is left to end); a timeout's failure stands too. The
         * others are cut short: their jobs go back. */
        if (!tq__child_reap(&s->child) && !s->timed_out) {
            s->release = 1;
            killed++;
        }
        tq__child_kill(&s->child, SIGKILL);
        s->kill_at = 0;
    }
    tq__worker_log(w, TQ_LOG_INFO,
                   "stopping now: killed %d handler(s); their jobs go back to ready",
                   killed);
}

/* Leaving with an error: every handler is killed, and its job given back
 * unspent (give_back). */
static int kill_all(tq_worker *w)
{
    int rc = 0;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state != SLOT_RUNNING)
            continue;
        tq__child_kill(&s->child, SIGKILL);
        while (!tq__child_reap(&s->child))
            usleep(1000);
        s->release = 1;
        if (!rc)
            rc = finish_slot(w, s, 0, "the worker stopped on an error");
    }
    return rc;
}

/* Command mode: a reaper that died (killed by hand, by the OOM killer) is
 * replaced, and told of the groups running now; the next heartbeat names
 * the new one. */
static void keep_reaper(tq_worker *w)
{
    if (!tq__reaper_gone(&w->cmd.reaper))
        return;
    tq__reaper_stop(&w->cmd.reaper);
    char why[128];
    if (tq__reaper_start(&w->cmd.reaper, why, sizeof why)) {
        tq__worker_log(w, TQ_LOG_WARN,
                       "the handlers' reaper is gone and cannot be started again (%s): a "
                       "crash of this worker would leave its handlers' processes running",
                       why);
        w->me.reaper_pid = 0;
        return;
    }
    tq__worker_log(w, TQ_LOG_WARN, "the handlers' reaper was gone: started a new one");
    w->me.reaper_pid = w->cmd.reaper.pid;
    for (int i = 0; i < w->concurrency; i++) {
        const tq__child *c = &w->slots[i].child;
        if (w->slots[i].state == SLOT_RUNNING && c->pid > 0 && !c->group_done)
            tq__reaper_watch(w->cmd.reaper.fd, c->pid);
    }
}

/* Before the registration, which names it (tq_worker_new). */
static int start_reaper(tq_worker *w)
{
    char why[128];
    if (tq__reaper_start(&w->cmd.reaper, why, sizeof why))
        return tq__seterr(w->db, TQ_ESYS, "starting the handlers' reaper: %s", why);
    return 0;
}

/* A group still running when the worker is freed stays the reaper's, which
 * ends it as it stops (free_slot made it forget the others). */
static void stop_reaper(tq_worker *w)
{
    tq__reaper_stop(&w->cmd.reaper);
}

/* What command mode needs no lock for, no thread to join, no one to wake:
 * the loop alone touches the slots and the held jobs, and starts them. */
static void nothing(tq_worker *w)
{
    (void)w;
}

/* A lost job's command is stopped: SIGTERM, then SIGKILL after the grace
 * (enforce_deadlines); its result will be discarded. */
static void stop_lost(tq_worker *w, slot *s)
{
    tq__child_kill(&s->child, SIGTERM);
    s->kill_at = tq__mono_us() + w->grace_us;
}

const tq__runner tq__runner_command = {
    .start = start_reaper,
    .join = nothing,
    .free = stop_reaper,
    .lock = nothing,
    .unlock = nothing,
    .held_changed = nothing,
    .wake_loop = nothing,
    .start_held = start_held,
    .collect = collect,
    .lost = stop_lost,
    .enforce = enforce_deadlines,
    .stop_now = kill_now,
    .abandon = kill_all,
    .upkeep = keep_reaper,
    .watch = watch_children,
    .due_in = next_deadline,
};
