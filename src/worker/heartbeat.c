/*
 * heartbeat.c - what keeps the worker's claims its own: the heartbeat that
 * extends the leases of its running and held jobs and its registration
 * (fenced; lost ones are stopped or dropped), the bound on any wait for the
 * store that the heartbeat's period sets, the registration of its name at
 * creation (taken over from a holder that is provably gone, whose jobs are
 * put back), and the rescue of expired leases. Called by the loop
 * (maintain_leases) and by tq_worker_new.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How often the leases are renewed: a third of the shortest one held. */
static int64_t beat_every_us(const tq_worker *w)
{
    const int64_t shortest = w->live.beat_lease_us < w->live.lease_us
                                 ? w->live.beat_lease_us
                                 : w->live.lease_us;
    return shortest / 3;
}

/*
 * How long the store may stay silent before the connection counts as lost
 * (engines with a network connection): a heartbeat period, so that a beat
 * lost to a hung connection is followed by a new connection and a beat
 * that still renews the leases, but never under WAIT_LIMIT_MIN_US, so that
 * a slow statement on a busy server is not taken for a hang.
 */
#define WAIT_LIMIT_MIN_US 2000000LL
int tq__set_wait_limit(tq_worker *w)
{
    if (!(w->db->engine->caps & TQ__CAP_NETWORK))
        return 0;
    int64_t us = beat_every_us(w);
    return w->db->engine->set_wait_limit(w->db,
                                         us > WAIT_LIMIT_MIN_US ? us : WAIT_LIMIT_MIN_US);
}

/* A beat for every running job (the first *nrun of *n) and every held
 * one, taken in one critical section; NULL when out of memory. */
static tq__ack *beats_of(tq_worker *w, size_t *n, size_t *nrun)
{
    w->run->lock(w);
    size_t cap = (size_t)w->concurrency + w->held.n;
    tq__ack *acks = calloc(cap ? cap : 1, sizeof *acks);
    *n = *nrun = 0;
    if (acks)
        *n = *nrun = tq__running_beats(w, acks, 0);
    for (size_t i = 0; i < w->held.n && acks; i++) {
        const held_job *h = tq__held_at(w, i);
        acks[(*n)++] = (tq__ack){.id = h->job.id,
                                 .claim = h->job.claim,
                                 .kind = TQ__ACK_BEAT,
                                 .delay_us = w->qinfo[h->qi].lease_us};
    }
    w->run->unlock(w);
    return acks;
}

/* The lost ones of a beat sent at sent (lost[0..nlost)) are marked if they
 * run, dropped if held; the other held jobs are dated by this beat. */
static void forget_lost(tq_worker *w, const tq__ack *lost, size_t nlost, int64_t sent)
{
    /* In one critical section: the lost ones are marked or dropped, the
     * other held jobs dated by this beat (every held job now was held
     * when the beat was taken: only this thread adds any). */
    w->run->lock(w);
    for (int i = 0; i < w->concurrency && nlost; i++) {
        slot *s = &w->slots[i];
        for (size_t k = 0; k < nlost && s->state == SLOT_RUNNING && !s->lost; k++)
            if (tq__same_claim(&lost[k], &s->job))
                tq__slot_lost(w, s);
    }
    size_t kept = 0, count = w->held.n;
    for (size_t i = 0; i < count; i++) { /* keep the rest, in order */
        held_job h = *tq__held_at(w, i);
        size_t k = 0;
        while (k < nlost && !tq__same_claim(&lost[k], &h.job))
            k++;
        if (k == nlost) {
            h.lease_us = w->qinfo[h.qi].lease_us; /* as the beat asked */
            h.lease_end = sent + h.lease_us;
            *tq__held_at(w, kept++) = h;
            continue;
        }
        w->counters.lost++;
        tq__job_clear(&h.job);
    }
    w->held.n = kept;
    if (kept) /* a renewed lease may let a thread waiting for one start it */
        w->run->held_changed(w);
    w->run->unlock(w);
    for (size_t k = 0; k < nlost; k++) /* logged unlocked: sinks may block */
        tq__worker_log(
            w, TQ_LOG_WARN,
            "job %lld: lease lost (expired and taken, or cancelled); stopping it",
            (long long)lost[k].id);
}

/* The store took the beats (acks[0..n), the first nrun of running jobs),
 * sent at sent: the next beat is paced by the shortest lease they granted,
 * the starts they carried are recorded, and the lost ones forgotten. */
static void beat_answered(tq_worker *w, tq__ack *acks, size_t n, size_t nrun,
                          int64_t sent)
{
    size_t nlost = 0;
    w->live.beat_lease_us = INT64_MAX;
    for (size_t k = 0; k < n; k++)
        if (acks[k].delay_us < w->live.beat_lease_us)
            w->live.beat_lease_us = acks[k].delay_us;
    tq__starts_recorded(w, acks, nrun);
    for (size_t k = 0; k < n; k++)
        if (acks[k].result == TQ_ELOST)
            acks[nlost++] = acks[k];
    forget_lost(w, acks, nlost, sent);
}

/* The registration's beat, unless another process has the name now. */
static int beat_name(tq_worker *w)
{
    if (w->name_taken)
        return 0;
    int rc = w->db->engine->worker_beat(w->db, &w->me);
    if (rc != TQ_EINUSE)
        return rc;
    /* Our registration lapsed (the worker stalled or was cut off past
     * its lease) and another process took the name: two workers must
     * not share one, so this one stops as on SIGTERM and says so. */
    tq__worker_log(w, TQ_LOG_ERROR,
                   "worker name '%s' has been registered by another process: stopping",
                   w->name);
    w->name_taken = 1;
    w->loop.stop_requested = 1;
    return 0;
}

/* Extends the lease of every running and held job (one fenced exchange),
 * recording the starts the store has not heard of. Of the lost ones
 * (expired and taken, or cancelled): running ones are marked (their result
 * is discarded) and their commands stopped, held ones are dropped. In
 * callback mode the threads move jobs meanwhile, so the lost ones are found
 * again by their claim. The next beat is paced by the shortest lease this
 * one granted. */
static int heartbeat(tq_worker *w)
{
    size_t n, nrun;
    tq__ack *acks = beats_of(w, &n, &nrun);
    if (!acks)
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    const int64_t sent = tq__mono_us();
    int rc = n ? w->db->engine->exchange(w->db, w->name, acks, n, NULL, NULL, NULL) : 0;
    if (n && !rc)
        tq__store_wrote(w);
    if (!rc)
        beat_answered(w, acks, n, nrun, sent);
    free(acks);
    return rc ? rc : beat_name(w);
}

/* Every RESCUE_EVERY_US (idle: when idle.c says), once the beat went
 * through and the results that ended before it are in (maintain_leases):
 * jobs whose lease expired are put back, or end dead. */
static int rescue_expired(tq_worker *w, int64_t now)
{
    tq *db = w->db;
    int rc, claimed;
    if (w->store.disconnected || w->loop.stopping || !tq__idle_rescue_due(w, now) ||
        w->live.beat_failed)
        return 0;
    if ((rc = w->run->collect(w)) || (rc = tq__give_back_short(w)))
        return rc;
    if (w->acks.n && (rc = tq__ride_out(w, tq__exchange(w, NULL, 0, &claimed))))
        return rc;
    if (w->store.disconnected || w->acks.n)
        return 0;
    int64_t n = 0;
    if ((rc = tq__ride_out(w, db->engine->rescue(db, NULL, 0, &n))))
        return rc;
    if (n)
        tq__worker_log(w, TQ_LOG_WARN, "rescued %lld job(s) whose lease expired",
                       (long long)n);
    w->live.last_rescue = now;
    if (w->loop.idle)
        tq__idle_rescued(w, now);
    return 0;
}

/*
 * The jobs' leases and the worker's own registration, then the rescue of
 * expired leases, but only once this worker's own leases are renewed and
 * the results of jobs that ended before that renewal are in: after the
 * store was out of reach, its own jobs' leases may have run out while it
 * ran them, and a rescue first would take them back from under it.
 */
int tq__maintain_leases(tq_worker *w, pass *p)
{
    int rc;
    const int64_t now = p->now = tq__mono_us();
    p->beat_every = beat_every_us(w);
    if (now - w->live.last_beat >= p->beat_every) {
        int hb = heartbeat(w);
        if ((rc = tq__ride_out(w, hb)))
            return rc;
        /* A beat that did not go through is tried again soon. */
        w->live.beat_failed = hb != 0;
        w->live.last_beat = hb ? now - p->beat_every + RECONNECT_MIN_US : now;
    }
    return rescue_expired(w, now);
}

/*
 * What identifies the processes this one can see: the kernel's boot id and
 * this process's PID namespace ("boot-id/pid:[inode]"). Two workers with
 * the same host_id can tell by kill(pid, 0) whether the other's process
 * exists; a hostname cannot say that (containers and cloned machines share
 * hostnames, and PIDs repeat across namespaces). "" when /proc cannot say.
 */
static void host_identity(char *buf, size_t len)
{
    char boot[64] = "", ns[64] = "";
    buf[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (n <= 0 || !boot[0])
        return;
    ns[n] = '\0';
    snprintf(buf, len, "%s/%s", boot, ns);
}

/* The kernel's inode number of the initial PID namespace (PROC_PID_INIT_INO). */
#define PID_NS_INIT 4026531836ULL

/* HOST:PID names one process on one host; in a PID namespace of its own (a
 * container), the namespace's inode number is added, since sibling
 * containers may share a hostname and both run their worker as PID 1. */
void tq_worker_default_name(char *buf, size_t len)
{
    char host[100] = "localhost", ns[64];
    gethostname(host, sizeof host - 1);
    unsigned long long ino = 0;
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (n > 0) {
        ns[n] = '\0';
        if (sscanf(ns, "pid:[%llu]", &ino) != 1)
            ino = 0;
    }
    if (ino && ino != PID_NS_INIT)
        snprintf(buf, len, "%s:%ld@%llu", host, (long)getpid(), ino);
    else
        snprintf(buf, len, "%s:%ld", host, (long)getpid());
}

/* Whether process pid runs no more: none exists, or it is a zombie. */
static int process_gone(int64_t pid)
{
    if (kill((pid_t)pid, 0) == -1)
        return errno == ESRCH;
    char path[40], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')');
    return paren && paren[1] == ' ' && paren[2] == 'Z';
}

/* Whether the registered holder of a name is provably gone: it ran where
 * this process can see its PID (the same host_id) and no such process
 * runs, nor its reaper (reaper.h): once the reaper is gone too, every
 * handler group it knew has been sent SIGKILL. A reaper outlives its worker
 * by a moment: it is given REAPER_WAIT_US. Otherwise only the heartbeat's
 * age counts. (A reused pid makes us wait for the lease instead.) */
#define REAPER_WAIT_US 2000000LL
static int holder_is_dead(const tq_worker_info *h, const char *host_id)
{
    if (!host_id[0] || strcmp(h->host_id, host_id) != 0 || h->pid <= 0 ||
        h->pid == getpid() || !process_gone(h->pid))
        return 0;
    const int64_t until = tq__mono_us() + REAPER_WAIT_US;
    while (h->reaper_pid > 0 && !process_gone(h->reaper_pid)) {
        if (tq__mono_us() > until)
            return 0;
        tq__sleep_us(10000);
    }
    return 1;
}

/*
 * Registers the worker's name (tq_worker_new): refused while a live worker
 * holds it, taken over from a holder that is provably gone, whose jobs
 * still running under the name are then put back at once.
 */
int tq__register_name(tq_worker *w, const char *host)
{
    tq *db = w->db;
    int rc;
    tq_worker_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.name, sizeof info.name, "%s", w->name);
    snprintf(info.host, sizeof info.host, "%s", host);
    host_identity(info.host_id, sizeof info.host_id);
    info.pid = getpid();
    info.lease_us = w->live.lease_us;
    info.reaper_pid = w->cmd.reaper.pid;
    tq_worker_info holder;
    rc = db->engine->worker_register(db, &info, NULL, &holder);
    /* Whether the name's previous holder is provably gone: it stopped, or
     * it ran where we can see its PID and that process no longer exists
     * (kill -9 leaves a fresh heartbeat behind). A name no worker has
     * registered says nothing of whoever claimed jobs under it through the
     * API: those come back by lease. */
    int gone =
        holder.name[0] && (holder.stopped_at || holder_is_dead(&holder, info.host_id));
    if (rc == TQ_EINUSE && gone) {
        tq__worker_log(
            w, TQ_LOG_WARN,
            "worker name held by pid %lld on this host, which is gone: taking over",
            (long long)holder.pid);
        tq_worker_info was = holder;
        /* Only if it is still that holder: two starting at once cannot
         * both take it over. */
        rc = db->engine->worker_register(db, &info, &was, &holder);
    }
    if (rc == TQ_EINUSE) {
        char lease[32];
        rc = tq__seterr(
            db, TQ_EINUSE,
            "worker name '%s' is held by a live worker (%s pid %lld, lease %s): "
            "pick another --name or wait for its lease to pass",
            w->name, holder.host, (long long)holder.pid,
            tq_duration_format(lease, sizeof lease, holder.lease_us));
    }
    if (rc) {
        free(w->name); /* not ours: do not mark it stopped */
        w->name = NULL;
        return rc;
    }
    w->me = info;
    /* Pick up my own unfinished business: whatever this name still holds
     * was interrupted by a crash of the previous holder. Only when that
     * holder is provably gone: one merely silent for longer than its lease
     * (stalled, cut off) may still be running jobs whose leases it extended
     * beyond that, and those come back when the leases expire. */
    int64_t n = 0;
    if (gone && (rc = db->engine->rescue(db, w->name, holder.started_at, &n)))
        return rc;
    if (n)
        tq__worker_log(w, TQ_LOG_WARN,
                       "put back %lld job(s) left running under this worker name",
                       (long long)n);
    return 0;
}
