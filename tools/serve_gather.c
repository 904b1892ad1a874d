/*
 * serve_gather.c - what `tq serve` reads of the store: the finished jobs
 * it has seen by queue (read since the last request, never walked again),
 * the thread that counts the kept finished and waiting jobs now and then
 * on a connection of its own, and the gathering each request of /metrics
 * or /api/overview reads. Called by serve_routes.c and cmd/serve.c.
 */
#define _GNU_SOURCE
#include "serve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { SETTLE_US = 1000000 }; /* tq_finished_since's settling time */

const double serve_hist_le[HIST_N] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                                      1,     5,     10,   30,   60,  300};

/* What the counter thread counts: the finished states, and waiting (on
 * SQLite, a walk of the dependency rows kept). */
static const tq_state slow[NSLOW] = {TQ_DONE, TQ_DEAD, TQ_CANCELLED, TQ_WAITING};

/* ---- the finished jobs seen ----------------------------------------------- */

static int qstat_cmp(const void *key, const void *q)
{
    return strcmp(key, ((const qstat *)q)->name);
}

/* The queue's entry (s->q is kept sorted by name), added when missing. */
static qstat *qstat_get(server *s, const char *name)
{
    qstat *q = s->nq ? bsearch(name, s->q, s->nq, sizeof *s->q, qstat_cmp) : NULL;
    if (q)
        return q;
    if (s->nq == s->capq) {
        size_t cap = s->capq ? 2 * s->capq : 16;
        qstat *nq = realloc(s->q, cap * sizeof *nq);
        if (!nq)
            return NULL;
        s->q = nq;
        s->capq = cap;
    }
    size_t at = 0;
    while (at < s->nq && strcmp(s->q[at].name, name) < 0)
        at++;
    memmove(&s->q[at + 1], &s->q[at], (s->nq - at) * sizeof *s->q);
    s->nq++;
    q = &s->q[at];
    memset(q, 0, sizeof *q);
    snprintf(q->name, sizeof q->name, "%s", name);
    return q;
}

static void note_finished(server *s, const tq_finished *f)
{
    qstat *q = qstat_get(s, f->queue);
    if (!q)
        return;
    int k = f->state == TQ_DONE ? 0 : f->state == TQ_DEAD ? 1 : 2;
    if (!s->seeding) /* counters start at 0, as a restarted process's do */
        q->finished[k]++;
    if (f->state != TQ_DONE)
        return;
    int64_t minute = f->finished_at / 60000000;
    size_t slot = (size_t)(minute % HISTORY_MIN);
    if (q->minute_no[slot] != minute) {
        q->minute_no[slot] = minute;
        q->minute_n[slot] = 0;
    }
    q->minute_n[slot]++;
    if (f->duration_us < 0)
        return;
    double sec = (double)f->duration_us / 1e6;
    size_t b = 0;
    while (b < HIST_N && sec > serve_hist_le[b])
        b++;
    if (!s->seeding) {
        q->hist[b]++;
        q->dur_sum += sec;
    }
    q->recent[q->recent_at] = f->duration_us;
    q->recent_at = (q->recent_at + 1) % RECENT;
    if (q->nrecent < RECENT)
        q->nrecent++;
}

/* Reads what finished since the last read (s->mu held). */
int serve_read_finished(server *s)
{
    for (;;) {
        tq_finished *v;
        size_t n;
        int rc =
            tq_finished_since(&v, &n, s->db, &s->at_us, &s->after_id, SETTLE_US, 10000);
        if (rc)
            return rc;
        for (size_t i = 0; i < n; i++)
            note_finished(s, &v[i]);
        tq_free(v);
        if (!n || s->after_id == INT64_MAX) /* read up to the settled end */
            return 0;
    }
}

/* After a call failed for a lost connection (a PostgreSQL server
 * restarted, an idle session ended): a new one for the next call. The
 * handle's owner calls it (s->mu held for s->db; the counter thread for
 * s->cdb). */
void serve_reconnect(server *s, tq **h, int rc)
{
    tq *n = NULL;
    if (rc != TQ_ECONN)
        return;
    if (tq_open(&n, s->url, NULL) == 0) {
        tq_close(*h);
        *h = n;
        fprintf(stderr, "tq serve: connected to the store again\n");
    } else {
        tq_close(n);
    }
}

/* ---- the count of finished jobs ---------------------------------------- */

void serve_count_finished(server *s)
{
    tq_count *v[NSLOW] = {NULL};
    size_t n[NSLOW] = {0};
    int64_t t0 = mono_us();
    int rc = 0;
    for (int k = 0; k < NSLOW && !rc; k++)
        rc = tq_count_jobs(&v[k], &n[k], s->cdb, slow[k], 0);
    int64_t took = mono_us() - t0;
    char err[256] = "";
    if (rc) {
        snprintf(err, sizeof err, "%s", tq_errmsg(s->cdb));
        serve_reconnect(s, &s->cdb, rc);
    }
    pthread_mutex_lock(&s->cmu);
    if (rc) {
        snprintf(s->count_err, sizeof s->count_err, "%s", err);
        for (int k = 0; k < NSLOW; k++)
            tq_free(v[k]);
    } else {
        s->count_err[0] = '\0';
        for (int k = 0; k < NSLOW; k++) {
            tq_free(s->kept[k]);
            s->kept[k] = v[k];
            s->nkept[k] = n[k];
        }
        s->counted_at = now_us();
        s->count_us = took;
    }
    pthread_mutex_unlock(&s->cmu);
}

/* Counts again every 10 s, or 50 times as long as a count takes (so it
 * keeps under 2 % of a core), or at once when an action asks. */
void *serve_counter(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->cmu);
    while (!s->stop) {
        int64_t wait = s->count_us * 50;
        if (wait < 10000000)
            wait = 10000000;
        struct timespec ts = serve_mono_at(mono_us() + wait);
        while (!s->stop && !s->recount)
            if (pthread_cond_timedwait(&s->ccv, &s->cmu, &ts) == ETIMEDOUT)
                break;
        if (s->stop)
            break;
        s->recount = 0;
        pthread_mutex_unlock(&s->cmu);
        serve_count_finished(s);
        pthread_mutex_lock(&s->cmu);
    }
    pthread_mutex_unlock(&s->cmu);
    return NULL;
}

void serve_ask_recount(server *s)
{
    pthread_mutex_lock(&s->cmu);
    s->recount = 1;
    pthread_cond_signal(&s->ccv);
    pthread_mutex_unlock(&s->cmu);
}

/* ---- what a request gathers -------------------------------------------- */

/* A row for name, appended (gather merges rows of one name). */
static qrow *row_add(gathering *g, size_t *cap, const char *name)
{
    if (g->nrows == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        qrow *nr = realloc(g->rows, nc * sizeof *nr);
        if (!nr)
            return NULL;
        g->rows = nr;
        *cap = nc;
    }
    qrow *r = &g->rows[g->nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%.*s", (int)sizeof r->name - 1, name);
    return r;
}

static int row_cmp(const void *a, const void *b)
{
    return strcmp(((const qrow *)a)->name, ((const qrow *)b)->name);
}

/* Sorts the rows by name and folds each name's into one: every source
 * sets fields of its own, so the sum is the whole. */
static void rows_merge(gathering *g)
{
    if (!g->nrows)
        return;
    qsort(g->rows, g->nrows, sizeof *g->rows, row_cmp);
    size_t o = 0;
    for (size_t i = 0; i < g->nrows; i++) {
        qrow *r = &g->rows[i];
        if (o && strcmp(g->rows[o - 1].name, r->name) == 0) {
            qrow *m = &g->rows[o - 1];
            if (!m->info)
                m->info = r->info;
            for (int st = 0; st < TQ_STATE_COUNT; st++)
                m->count[st] += r->count[st];
            m->delayed += r->delayed;
            m->oldest_due_us += r->oldest_due_us;
        } else {
            g->rows[o++] = *r;
        }
    }
    g->nrows = o;
}

void serve_gathering_free(gathering *g)
{
    tq_free(g->queues);
    free(g->rows);
    tq_free(g->workers);
    tq_free(g->by_worker);
}

/* A SQLite store's log, as a checkpoint finds it, and since when (as far
 * as this server has seen) a reader holds it back. Not worth failing a
 * scrape for: without it, the gauges are left out. */
static void gather_wal(server *s, gathering *g)
{
    if (strcmp(tq_engine_name(s->db), "sqlite") != 0 || tq_wal_check(&g->wal, s->db))
        return;
    g->have_wal = 1;
    if (!g->wal.held)
        s->wal_held_since = 0;
    else if (!s->wal_held_since)
        s->wal_held_since = now_us();
    g->wal_held_since = s->wal_held_since;
}

/* Everything /metrics and /api/overview show (s->mu held). */
int serve_gather(server *s, gathering *g)
{
    static const tq_state live[] = {TQ_READY, TQ_RUNNING};
    int64_t t0 = mono_us();
    size_t cap = 0;
    memset(g, 0, sizeof *g);
    int rc = tq_queue_list(&g->queues, &g->nqueues, s->db);
    for (size_t i = 0; !rc && i < g->nqueues; i++) {
        qrow *r = row_add(g, &cap, g->queues[i].name);
        if (!r)
            rc = TQ_ENOMEM;
        else
            r->info = &g->queues[i];
    }
    for (size_t k = 0; !rc && k < sizeof live / sizeof live[0]; k++) {
        tq_count *v;
        size_t n;
        if ((rc = tq_count_jobs(&v, &n, s->db, live[k], 0)))
            break;
        for (size_t i = 0; i < n; i++) {
            qrow *r = row_add(g, &cap, v[i].name);
            if (!r) {
                rc = TQ_ENOMEM;
                break;
            }
            r->count[live[k]] = v[i].n;
            if (live[k] == TQ_READY) {
                r->delayed = v[i].delayed;
                r->oldest_due_us = v[i].oldest_due_us;
            }
        }
        tq_free(v);
    }
    if (!rc)
        rc = serve_read_finished(s);
    if (!rc)
        rc = tq_worker_list(&g->workers, &g->nworkers, s->db);
    if (!rc)
        rc = tq_count_jobs(&g->by_worker, &g->nby_worker, s->db, TQ_RUNNING, 1);
    pthread_mutex_lock(&s->cmu);
    g->have_count = s->counted_at != 0;
    g->counted_at = s->counted_at;
    g->count_us = s->count_us;
    for (int k = 0; !rc && k < NSLOW; k++)
        for (size_t i = 0; !rc && i < s->nkept[k]; i++) {
            qrow *r = row_add(g, &cap, s->kept[k][i].name);
            if (r)
                r->count[slow[k]] = s->kept[k][i].n;
            else
                rc = TQ_ENOMEM;
        }
    pthread_mutex_unlock(&s->cmu);
    for (size_t i = 0; !rc && i < s->nq; i++)
        if (!row_add(g, &cap, s->q[i].name))
            rc = TQ_ENOMEM;
    if (rc) {
        serve_gathering_free(g);
        return rc;
    }
    rows_merge(g);
    gather_wal(s, g);
    for (size_t i = 0; i < g->nrows; i++) /* info points into queues: still valid */
        g->rows[i].seen =
            s->nq ? bsearch(g->rows[i].name, s->q, s->nq, sizeof *s->q, qstat_cmp) : NULL;
    g->took_us = mono_us() - t0;
    s->scrape_us = g->took_us;
    return 0;
}
