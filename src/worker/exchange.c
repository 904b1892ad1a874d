/*
 * exchange.c - the worker's exchange with the store: the pending acks, the
 * starts not yet recorded and a claim go in ONE engine exchange (one
 * transaction), whose claimed jobs become held ones (take_jobs); the loop's
 * claim_jobs and send_acks phases decide when. Also the store errors a
 * worker rides out (ride_out): busy, a full disk, a lost connection and
 * its reconnection. Called by the loop, the heartbeat and the settings.
 */
#define _GNU_SOURCE
#include "worker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECONNECT_MAX_US  10000000LL
#define FULL_RETRY_MAX_US 5000000LL

/*
 * The store errors a worker rides out, returning 0 for them: busy (try
 * again on the next pass), a full disk (the same, saying so once until a
 * write goes through: the handlers' results wait, and are sent once there
 * is room) and, for engines that can reconnect, a lost
 * connection (one log line, then reconnect with backoff while the running
 * handlers carry on; their acknowledgements wait and are sent, fenced, once
 * connected). Anything else is returned.
 */
int tq__ride_out(tq_worker *w, int rc)
{
    if (rc == TQ_EBUSY) {
        tq__worker_log(w, TQ_LOG_WARN, "store busy, will retry: %s", tq_errmsg(w->db));
        return 0;
    }
    if (rc == TQ_EFULL) {
        if (!w->store.full)
            tq__worker_log(w, TQ_LOG_WARN, "%s; will retry until there is room",
                           tq_errmsg(w->db));
        w->store.full = 1;
        /* Not at once: 100 ms, doubling up to 5 s. */
        w->store.full_backoff =
            w->store.full_backoff ? w->store.full_backoff * 2 : RECONNECT_MIN_US;
        if (w->store.full_backoff > FULL_RETRY_MAX_US)
            w->store.full_backoff = FULL_RETRY_MAX_US;
        w->store.full_retry_at = tq__mono_us() + w->store.full_backoff;
        return 0;
    }
    if (rc == TQ_ECONN && (w->db->engine->caps & TQ__CAP_NETWORK)) {
        if (!w->store.disconnected) {
            tq__worker_log(w, TQ_LOG_WARN, "%s; reconnecting", tq_errmsg(w->db));
            w->store.disconnected = 1;
            w->store.reconnect_backoff = 0;
            w->store.reconnect_at = tq__mono_us();
        }
        return 0;
    }
    return rc;
}

/* One reconnection attempt when due; returns 1 once connected again. */
int tq__try_reconnect(tq_worker *w, int64_t now)
{
    tq *db = w->db;
    if (now < w->store.reconnect_at)
        return 0;
    if (db->engine->reconnect(db) != 0) {
        /* Doubling, up to a tenth of the shortest lease: back within that
         * of the store's return, while the jobs' leases still hold. */
        int64_t most = RECONNECT_MAX_US;
        for (size_t i = 0; i < w->nqueues; i++)
            if (w->qinfo[i].lease_us / 10 < most)
                most = w->qinfo[i].lease_us / 10;
        if (most < RECONNECT_MIN_US)
            most = RECONNECT_MIN_US;
        w->store.reconnect_backoff = w->store.reconnect_backoff
                                         ? w->store.reconnect_backoff * 2
                                         : RECONNECT_MIN_US;
        if (w->store.reconnect_backoff > most)
            w->store.reconnect_backoff = most;
        w->store.reconnect_at = now + w->store.reconnect_backoff;
        tq__worker_log(w, TQ_LOG_DEBUG, "%s", tq_errmsg(db));
        return 0;
    }
    w->store.disconnected = 0;
    w->live.beat_failed = 1; /* beat at once; no rescue before that beat */
    w->live.last_beat = 0;
    tq__listen(w);
    tq__idle_heard(w, 1, 1); /* what was said meanwhile is lost: look at all */
    tq__clearerr(db);
    tq__worker_log(w, TQ_LOG_WARN,
                   "reconnected to the store; %zu acknowledgement(s) to send", w->acks.n);
    return 1;
}

/* How often the log is looked at, and for how long it must be held back
 * (tq_wal_info.held) before the worker says so. */
#define WAL_LOOK_EVERY_US 5000000LL
#define WAL_SAY_AFTER_US  10000000LL

/*
 * A reader that keeps a transaction open on a SQLite store (a connection
 * left in BEGIN, a long report) holds its snapshot's frames in the -wal
 * file: no checkpoint can copy past them, the log cannot restart, and it
 * grows with every job, each read slower for it. The worker cannot end
 * that transaction, but says so once it has lasted (a warning with the
 * log's size and since when), and again when it ends; the log is then cut
 * back (TQ__WAL_LIMIT) at its next restart.
 */
void tq__watch_wal(tq_worker *w, int64_t now)
{
    worker_store *st = &w->store;
    tq_wal_info wal;
    if (now - st->wal_looked < WAL_LOOK_EVERY_US ||
        w->db->engine->checkpoint(w->db, &wal) != 0)
        return;
    st->wal_looked = now;
    const int held = wal.held;
    char since[40], mb[24];
    snprintf(mb, sizeof mb, "%lld MB", (long long)(wal.bytes >> 20));
    if (held && !st->wal_held_since) {
        st->wal_held_since = now;
    } else if (held && !st->wal_said && now - st->wal_held_since >= WAL_SAY_AFTER_US) {
        tq_time_format(since, sizeof since, tq__now_us() - (now - st->wal_held_since));
        tq__worker_log(
            w, TQ_LOG_WARN,
            "the store's -wal file is %s and growing: since %s a reader's open "
            "transaction (a connection left in BEGIN, a long read) holds back "
            "its checkpoint, and every job is slower for it; end that "
            "transaction (docs/operations.md)",
            mb, since);
        st->wal_said = 1;
    } else if (!held && st->wal_held_since) {
        if (st->wal_said)
            tq__worker_log(w, TQ_LOG_INFO,
                           "the store's checkpoint is no longer held back (-wal file %s; "
                           "cut back at the log's next restart)",
                           mb);
        st->wal_held_since = 0;
        st->wal_said = 0;
    }
}

/* After any write that went through: a full disk has room again. */
void tq__store_wrote(tq_worker *w)
{
    if (!w->store.full)
        return;
    w->store.full = 0;
    w->store.full_backoff = 0;
    tq__worker_log(w, TQ_LOG_WARN, "the store has room again");
}

/*
 * The store refused an exchange that carried handlers' error texts. They
 * are valid UTF-8 without NUL (add_ack), which both engines take; a store
 * may still refuse one (a trigger or a constraint of its owner's, a limit
 * on its size), and one job's text must not stop the worker: the texts of
 * the pending acks (acks[0..nacks), mirrored there) are replaced by a
 * fixed one, and the reason goes to the log. Returns whether any was.
 */
static const char text_refused[] = "the store refused this job's error text; see the "
                                   "worker's log";
static const char result_refused[] = "the store refused this job's result; see the "
                                     "worker's log";
static int drop_error_texts(tq_worker *w, tq__ack *acks, size_t nacks)
{
    size_t n = 0;
    for (size_t i = 0; i < nacks; i++) {
        if (w->acks.v[i].output) { /* a result the store may refuse too: a failure */
            free(w->acks.v[i].output);
            w->acks.v[i].output = NULL;
            w->acks.v[i].ack.output = acks[i].output = NULL;
            w->acks.v[i].ack.kind = acks[i].kind = TQ__ACK_FAIL;
            w->acks.v[i].ack.delay_us = acks[i].delay_us = 1000000;
            w->acks.v[i].ack.error = acks[i].error = result_refused;
            n++;
            continue;
        }
        if (!w->acks.v[i].error)
            continue;
        free(w->acks.v[i].error);
        w->acks.v[i].error = NULL;
        /* a progress goes without its text; an error text says why */
        w->acks.v[i].ack.error = acks[i].error =
            acks[i].kind == TQ__ACK_PROGRESS ? NULL : text_refused;
        n++;
    }
    if (n) {
        char *why = tq_text_printable(tq_errmsg(w->db));
        tq__worker_log(w, TQ_LOG_WARN,
                       "the store refused %zu job(s)' error text or result (%.300s); "
                       "sending without them (a job whose result it refused fails)",
                       n, why ? why : "out of memory");
        free(why);
    }
    return n > 0;
}

/* The longest a run may take: what tq_queue_set and tq_job_enqueue
 * accept, for a value plain SQL wrote (its deadline must not overflow). */
#define RUN_TIMEOUT_MAX_US (3650LL * 86400 * 1000000)

/* How long a run of job (of queue qi) may take: the job's own timeout,
 * else its queue's, else the worker's; 0: no limit. */
static int64_t run_timeout(const tq_worker *w, size_t qi, const tq_job *job)
{
    const int64_t t = job->timeout_us > 0           ? job->timeout_us
                      : w->qinfo[qi].timeout_us > 0 ? w->qinfo[qi].timeout_us
                                                    : w->timeout_us;
    return t > RUN_TIMEOUT_MAX_US ? RUN_TIMEOUT_MAX_US : t;
}

/*
 * Takes claimed jobs (those whose start the claim recorded first, see
 * tq__jobs_sort) into the held ring, and starts what can start. start_by:
 * the jobs' (0: none), but at_once_by for those the free slots take. A job out
 * of attempts is ended as failed without running (tq__job_out_of_attempts).
 * The claims asked for no more than the ring has room for.
 */
static int take_jobs(tq_worker *w, size_t qi, tq_job *jobs, size_t n, int64_t sent,
                     int64_t lease_us, int64_t start_by, int64_t at_once_by, int chain,
                     int confirms)
{
    int rc = 0;
    size_t taken = 0;
    const int room = start_by ? tq__start_room(w, tq__mono_us()) : 0;
    w->run->lock(w);
    /* Jobs for the slots free now (counted with the held ones, under the
     * same lock) start at once: they get at_once_by instead. */
    const int free_slots = room - tq__running_count_locked(w);
    /* A claim that took jobs saw the queue unpaused, and its limits as the
     * worker knew them, unless it found a rate the worker did not know of:
     * then its held jobs wait for the settings to be read. */
    if (n && confirms)
        tq__settings_seen_locked(w, qi, sent, tq__mono_us());
    else if (n)
        w->settings.until[qi] = 0;
    size_t at_once = free_slots > 0 && (size_t)free_slots > w->held.n
                         ? (size_t)free_slots - w->held.n
                         : 0;
    for (size_t i = 0; i < n && !rc; i++) {
        held_job h = {jobs[i], qi, lease_us, sent + lease_us, 0, 0, 0};
        h.timeout_us = run_timeout(w, qi, &h.job);
        h.serial = chain && h.job.group;
        memset(&jobs[i], 0, sizeof jobs[i]); /* now ours */
        if (tq__job_out_of_attempts(&h.job)) {
            char why[96];
            snprintf(why, sizeof why, "not run: its %d attempt(s) were used up",
                     h.job.max_attempts);
            rc = tq__add_held_ack(w, &h, TQ__ACK_FAIL, why);
            tq__job_clear(&h.job);
        } else if (w->held.n < w->held.cap) {
            h.start_by = at_once ? at_once_by : start_by;
            if (at_once)
                at_once--;
            *tq__held_at(w, w->held.n++) = h;
            taken++;
            if (h.start_by &&
                (!w->held.start_by_next || h.start_by < w->held.start_by_next))
                w->held.start_by_next = h.start_by;
        } else { /* cannot happen */
            tq__job_clear(&h.job);
            rc = tq__seterr(w->db, TQ_EINVAL, "no room for claimed jobs");
        }
    }
    if (taken)
        w->run->held_changed(w);
    w->run->unlock(w);
    return rc ? rc : w->run->start_held(w);
}

/* The engine's exchange of acks[0..n) and the claim (may be NULL); once
 * more without the handlers' texts if the store refused them. */
static int send_exchange(tq_worker *w, tq__ack *acks, size_t nacks, size_t n,
                         tq__claim *claim, tq_job **jobs, size_t *njobs)
{
    int rc = w->db->engine->exchange(w->db, w->name, acks, n, claim, jobs, njobs);
    if ((rc == TQ_EINVAL || rc == TQ_EDB) && drop_error_texts(w, acks, nacks))
        rc = w->db->engine->exchange(w->db, w->name, acks, n, claim, jobs, njobs);
    if (!rc)
        tq__store_wrote(w);
    return rc;
}

/* The store took the pending acks (acks[0..nacks), mirrored there): each
 * is counted, a failure logged (log_end), and the pending ones emptied. */
static void acks_taken(tq_worker *w, const tq__ack *acks, size_t nacks)
{
    for (size_t i = 0; i < nacks; i++) {
        if (acks[i].kind == TQ__ACK_PROGRESS) {
            /* lost or not, the run's own end says what became of it */
        } else if (acks[i].result == TQ_ELOST) {
            w->counters.lost++;
            tq__worker_log(w, TQ_LOG_WARN,
                           "job %lld: lease was lost before its result was saved; "
                           "result discarded",
                           (long long)acks[i].id);
        } else if (acks[i].kind == TQ__ACK_DONE) {
            w->counters.done++;
        } else if (acks[i].kind == TQ__ACK_FAIL || acks[i].kind == TQ__ACK_DISCARD) {
            const pending_ack *p = &w->acks.v[i];
            w->counters.failed++;
            if (acks[i].kind == TQ__ACK_DISCARD)
                w->counters.discarded++;
            else if (p->attempt >= p->max_attempts)
                w->counters.dead++;
            else
                w->counters.retried++;
            if (w->log)
                tq__log_end(w, p);
        } else if (acks[i].kind == TQ__ACK_RELEASE || acks[i].kind == TQ__ACK_SNOOZE) {
            w->counters.released++;
            if (acks[i].kind == TQ__ACK_SNOOZE)
                w->counters.snoozed++;
        }
        free(w->acks.v[i].error);
        free(w->acks.v[i].output);
    }
    w->acks.n = 0;
    const int held_back = w->acks.output_pending > OUTPUT_PENDING_MAX;
    w->acks.output_pending = 0;
    if (held_back) { /* threads waiting may start held jobs again */
        w->run->lock(w);
        w->run->held_changed(w);
        w->run->unlock(w);
    }
}

/* The store took the beats of unrecorded starts (beats[0..nbeats)) and the
 * claim: the next heartbeat is paced by the shortest lease they granted. */
static void beats_taken(tq_worker *w, const tq__claim *claim, const tq__ack *beats,
                        size_t nbeats)
{
    tq__starts_recorded(w, beats, nbeats); /* also dates the next beats */
    if (claim && claim->max && claim->lease_us < w->live.beat_lease_us)
        w->live.beat_lease_us = claim->lease_us;
    for (size_t i = 0; i < nbeats; i++)
        if (beats[i].delay_us < w->live.beat_lease_us)
            w->live.beat_lease_us = beats[i].delay_us;
}

/* The n jobs the claim (sent at sent) took from queue qi, held in the
 * order they start in (take_jobs). */
static int take_claimed(tq_worker *w, const tq__claim *claim, size_t qi, tq_job *jobs,
                        size_t n, int64_t sent)
{
    w->counters.claimed += (int64_t)n;
    tq__jobs_sort(jobs, n, claim ? claim->order : TQ_FIFO);
    /* A rate-limited claim's jobs beyond the free slots must start
     * within LIMITED_HOLD_US of the moment the store took their
     * tokens, which was no sooner than taken_after_us after the
     * sending. Those in the free slots start now, as they always did,
     * trailing their tokens by the commit and the answer: within
     * LIMITED_HOLD_US of the answer (unless starts are held back: a
     * handler that cannot start, results waiting for the store), or
     * they go back too. Not from the tokens: a slow disk would send
     * every claim's jobs back. */
    const int rated = claim && (claim->rate || claim->rate_found);
    return take_jobs(w, qi, jobs, n, sent, claim ? claim->lease_us : 0,
                     rated ? sent + claim->taken_after_us + LIMITED_HOLD_US : 0,
                     rated ? tq__mono_us() + LIMITED_HOLD_US : 0,
                     claim && claim->chain > 1,
                     !claim || !(claim->rate_found && !claim->rate));
}

/* Sends the pending acks, the starts the store has not recorded yet, and
 * the claim (may be NULL). On failure the acks stay pending for the next
 * pass. */
int tq__exchange(tq_worker *w, tq__claim *claim, size_t qi, int *claimed)
{
    tq__ack stack[64], *acks = stack;
    tq_job *jobs = NULL;
    size_t n = 0, nacks = w->acks.n, nbeats = 0;
    *claimed = 0;
    size_t cap = nacks + (size_t)w->concurrency;
    if (cap > 64 && !(acks = malloc(cap * sizeof *acks)))
        return tq__seterr(w->db, TQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < nacks; i++) {
        acks[i] = w->acks.v[i].ack;
        acks[i].started_us =
            w->acks.v[i].started ? tq__started_ago(w->acks.v[i].started) : 0;
    }
    w->run->lock(w);
    if (w->starts.unrecorded)
        nbeats = tq__running_beats(w, acks + nacks, 1);
    w->run->unlock(w);
    if (nacks + nbeats == 0 && !claim) { /* nothing to send after all */
        tq__starts_recorded(w, NULL, 0);
        if (acks != stack)
            free(acks);
        return 0;
    }
    const int64_t sent = tq__mono_us();
    int rc = send_exchange(w, acks, nacks, nacks + nbeats, claim, &jobs, &n);
    if (!rc) {
        acks_taken(w, acks, nacks);
        beats_taken(w, claim, acks + nacks, nbeats);
        rc = take_claimed(w, claim, qi, jobs, n, sent);
        tq_job_array_free(jobs, n);
        *claimed = (int)n;
    }
    if (acks != stack)
        free(acks);
    return rc;
}

/* One claim of up to room jobs from queue qi (target: how many the worker
 * holds), carrying the pending acks; what it learned goes to p and to the
 * settings. */
static int claim_queue(tq_worker *w, pass *p, size_t qi, size_t room, size_t target)
{
    const tq_queue_info *q = &w->qinfo[qi];
    /* Holds, all of them (engine.h, STARTS): each start is
     * recorded once it happened. */
    tq__claim c = {.queue = w->queues[qi],
                   .order = q->order,
                   .lease_us = q->lease_us,
                   .max_attempts = q->max_attempts,
                   .max = room,
                   .chain = tq__chain_of(w, q, target),
                   .worker_since = w->me.started_at};
    tq__claim_limits(&c, q);
    c.look = w->loop.idle;
    int claimed = 0;
    int rc = tq__exchange(w, &c, qi, &claimed);
    if (!rc && c.due_in < p->due_in)
        p->due_in = c.due_in;
    if (!rc && c.lease_in < p->lease_in)
        p->lease_in = c.lease_in;
    if (!rc && c.rate_found && !c.rate) /* a rate set since: read the settings now */
        w->settings.last_refresh = 0;
    if (!rc && c.rate)
        tq__limited_claimed(w, room, (size_t)claimed);
    /* A rate limit stopped it: claim again when a token is due,
     * not at the idle backoff's pace. */
    if (!rc && c.rate_wait_us > 0) {
        const int64_t now = tq__mono_us(), at = now + c.rate_wait_us;
        if (w->pace.rate_retry_at <= now || at < w->pace.rate_retry_at)
            w->pace.rate_retry_at = at;
    }
    p->tried = 1;
    p->claimed += claimed;
    return rc;
}

/*
 * Claims when a slot is free (nothing is held then) or the held jobs have
 * run below half their target: enough to fill the slots and the target,
 * one exchange per queue, carrying the pending acks. Returns the store's
 * answer as it came (send_acks rides it out).
 */
int tq__claim_jobs(tq_worker *w, pass *p)
{
    int rc = 0;
    const size_t target = tq__hold_target(w);
    tq__set_low_water(w, target);
    size_t nheld = tq__held_count(w);
    if (!w->store.disconnected && !w->loop.stopping && w->nqueues &&
        (p->free_slots > 0 || 2 * nheld < target) && tq__idle_may_claim(w, p->now)) {
        for (size_t k = 0; k < w->nqueues && !rc; k++) {
            size_t qi = (w->loop.next_queue + k) % w->nqueues;
            size_t room = (size_t)p->free_slots + target;
            room = room > nheld ? room - nheld : 0;
            if (room == 0)
                break;
            if (w->qinfo[qi].paused)
                continue;
            rc = claim_queue(w, p, qi, room, target);
            p->free_slots = tq__free_slot_count(w);
            nheld = tq__held_count(w);
        }
        w->loop.next_queue = (w->loop.next_queue + 1) % w->nqueues;
        if (!rc) /* else the next pass claims again */
            tq__idle_plan(w, p);
    }
    /* From here on the loop starts nothing, so these only go down
     * (callback threads may start a held job: only while one is held). */
    p->running = tq__running_count(w);
    p->nheld = tq__held_count(w);
    return rc;
}

/*
 * Acks alone, when no claim carried them: when they have waited long
 * enough or are many, when stopping, and when nothing runs (so that drain
 * sees them); and starts the store has not recorded, once they have waited
 * as long. rc is the claims' answer; the store errors a worker rides out
 * come back as 0.
 */
int tq__send_acks(tq_worker *w, pass *p, int rc)
{
    const int64_t now = p->now;
    int claimed;
    p->unrecorded = tq__unrecorded_count(w, &p->unrecorded_since);
    if (!w->store.disconnected && !rc && !p->tried &&
        ((w->acks.n &&
          (w->loop.stopping || w->acks.n >= ACK_BATCH ||
           now - w->acks.since >= ACK_DELAY_US || (p->running == 0 && p->nheld == 0))) ||
         (p->unrecorded && now - p->unrecorded_since >= ACK_DELAY_US)))
        rc = tq__exchange(w, NULL, 0, &claimed);
    rc = tq__ride_out(w, rc);
    /* as the exchange left it */
    p->unrecorded = tq__unrecorded_count(w, &p->unrecorded_since);
    return rc;
}
