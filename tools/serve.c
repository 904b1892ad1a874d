/*
 * serve.c - `tq serve`: an HTTP server over the store, on libmicrohttpd.
 *
 *   GET  /metrics              Prometheus text exposition format
 *   GET  /                     the dashboard (tools/serve/, compiled in)
 *   GET  /api/overview         what the dashboard shows: queues with their
 *                              counts, chart and durations; workers
 *   GET  /api/queues           tq queue --json
 *   GET  /api/workers          tq workers --json
 *   GET  /api/schedules        tq cron list --json
 *   GET  /api/jobs             tq list --json (payloads cut), paged by
 *                              ?state= &queue= &before=ID &limit=
 *   GET  /api/jobs/ID          tq show --json
 *   POST /api/jobs/ID/retry    /api/jobs/ID/cancel
 *   POST /api/queues/Q/pause   /api/queues/Q/resume   /api/queues/Q/retry-dead
 *                              only with the token (--token-file), which
 *                              comes as "Authorization: Bearer T", as
 *                              "X-TQ-Token: T" or as a form field "token"
 *
 * What a request counts. Ready and running jobs are counted by each
 * request, each along its own index: they cost what is in flight.
 * Finished jobs are kept by the million, so no request walks them: each
 * reads only what finished since the one before (tq_finished_since: the
 * counters, the duration histogram, the chart of done jobs per minute),
 * and a thread on a connection of its own counts every kept done, dead and
 * cancelled job, and the waiting ones (which SQLite finds through every
 * dependency row kept), now and then (the gauges; an action asks it for a
 * new count at once).
 */
#define _GNU_SOURCE
#include "cli.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

/* The dashboard's files (serve_assets.c, made by cmake/embed.cmake). */
extern const unsigned char asset_dashboard_html[], asset_dashboard_css[],
    asset_dashboard_js[];
extern const size_t asset_dashboard_html_len, asset_dashboard_css_len,
    asset_dashboard_js_len;

enum {
    BODY_MAX = 4096,       /* the most a POST body may be */
    TOKEN_MAX = 1024,      /* the longest token */
    SETTLE_US = 1000000,   /* tq_finished_since's settling time */
    HISTORY_MIN = 60,      /* minutes of the done-per-minute chart */
    RECENT = 256,          /* durations kept per queue for the percentiles */
    PAYLOAD_PREVIEW = 256, /* bytes of a payload a job list shows */
    LIST_MAX = 500,        /* jobs one page may ask for */
    CONN_MAX = 256,        /* connections in all */
    CONN_PER_IP = 32,      /* connections from one address */
    IDLE_S = 10,           /* a connection silent this long is closed */
};
/* The longest a request may take to arrive whole, from the connection's
 * start or the end of the response before it. */
#define REQUEST_US ((int64_t)10000000)

/* The buckets of tq_job_duration_seconds (upper bounds, in seconds). */
static const double hist_le[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                                 1,     5,     10,   30,   60,  300};
#define HIST_N (sizeof hist_le / sizeof hist_le[0])

/* The finished states, in the order of every [3] below. */
static const tq_state fin[3] = {TQ_DONE, TQ_DEAD, TQ_CANCELLED};
/* What the counter thread counts: the finished states, and waiting (on
 * SQLite, a walk of the dependency rows kept). */
static const tq_state slow[4] = {TQ_DONE, TQ_DEAD, TQ_CANCELLED, TQ_WAITING};
#define NSLOW 4

/* What this server has seen of one queue's finished jobs. */
typedef struct qstat {
    char name[65];
    int64_t finished[3];      /* read since the start: the _total counters */
    int64_t hist[HIST_N + 1]; /* done jobs' durations by bucket; last: +Inf */
    double dur_sum;           /* seconds */
    int64_t minute_no[HISTORY_MIN], minute_n[HISTORY_MIN]; /* a ring by minute */
    int64_t recent[RECENT]; /* the latest done jobs' durations (a ring) */
    size_t nrecent, recent_at;
} qstat;

typedef struct server {
    pthread_mutex_t mu; /* db, q, the reading position, scrape_us */
    tq *db;
    qstat *q;
    size_t nq, capq;
    int64_t at_us, after_id; /* tq_finished_since's position */
    int seeding;             /* reading the hour before the start: chart only */
    int64_t scrape_us;       /* the last scrape's gathering */

    /* The count of kept finished jobs, by the thread counter(). */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    int stop, recount;
    tq *cdb;
    tq_count *kept[NSLOW];
    size_t nkept[NSLOW];
    int64_t counted_at, count_us; /* wall clock; how long it took */
    char count_err[256];

    /* The open connections, whose requests the thread watchdog() times. */
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    int wstop;
    struct conn *conns;

    const char *url;   /* the store, to connect again */
    const char *token; /* NULL: no actions */
    int loopback;      /* listening on a loopback address */
    size_t token_len;
    int64_t started_at;
} server;

/* ---- small helpers ---------------------------------------------------- */

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
#define now_us()  clock_us(CLOCK_REALTIME)
#define mono_us() clock_us(CLOCK_MONOTONIC)

/* A time of mono_us() as pthread_cond_timedwait wants it, for the
 * condition variables made by cond_init_mono. */
static struct timespec mono_at(int64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000),
                          .tv_nsec = (long)(us % 1000000 * 1000)};
    return ts;
}

/* A condition variable whose timed waits follow CLOCK_MONOTONIC, so that a
 * change of the wall clock neither stretches nor cuts them. */
static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* Equal in a time that depends only on want's length, not on where they
 * differ. */
static int token_equal(const char *given, size_t glen, const char *want, size_t wlen)
{
    unsigned char d = glen != wlen;
    for (size_t i = 0; i < wlen; i++)
        d |= (unsigned char)(want[i] ^ (i < glen ? given[i] : 0));
    return d == 0;
}

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
    while (b < HIST_N && sec > hist_le[b])
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
static int read_finished(server *s)
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
static void reconnect(server *s, tq **h, int rc)
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

static void count_finished(server *s)
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
        reconnect(s, &s->cdb, rc);
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
static void *counter(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->cmu);
    while (!s->stop) {
        int64_t wait = s->count_us * 50;
        if (wait < 10000000)
            wait = 10000000;
        struct timespec ts = mono_at(mono_us() + wait);
        while (!s->stop && !s->recount)
            if (pthread_cond_timedwait(&s->ccv, &s->cmu, &ts) == ETIMEDOUT)
                break;
        if (s->stop)
            break;
        s->recount = 0;
        pthread_mutex_unlock(&s->cmu);
        count_finished(s);
        pthread_mutex_lock(&s->cmu);
    }
    pthread_mutex_unlock(&s->cmu);
    return NULL;
}

static void ask_recount(server *s)
{
    pthread_mutex_lock(&s->cmu);
    s->recount = 1;
    pthread_cond_signal(&s->ccv);
    pthread_mutex_unlock(&s->cmu);
}

/* ---- the request deadline ------------------------------------------------ */

/*
 * libmicrohttpd's own timeout counts only silence: a client that sent a
 * header line every few seconds kept its connection for as long as it
 * liked, and 256 such clients held every slot. So a request must arrive
 * whole (request line, headers and body) within REQUEST_US of its start:
 * the connection's opening, or the end of the response before it on a
 * connection kept alive. The thread watchdog() shuts down the socket of a
 * connection past that; libmicrohttpd sees its stream end and closes the
 * connection itself. It owns the descriptor: a close() here would let the
 * kernel give the number to another file while libmicrohttpd still uses it.
 *
 * Each open connection has a conn in s->conns (its socket context) from
 * on_connection's STARTED to its CLOSED. libmicrohttpd calls CLOSED before
 * it closes the socket, so while s->wmu is held every fd in the list is
 * still its connection's own. Every field of a conn is s->wmu's.
 */
typedef struct conn {
    struct conn *prev, *next;
    server *s;
    MHD_socket fd;
    int64_t since; /* mono_us(): when the current request began */
    int waiting;   /* the current request has not arrived whole */
} conn;

static void conn_add(server *s, struct MHD_Connection *c, void **socket_context)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn *k = ci ? calloc(1, sizeof *k) : NULL;
    if (!k) {
        if (ci) /* untimed, it could be held for ever: refused instead */
            shutdown(ci->connect_fd, SHUT_RDWR);
        return;
    }
    k->s = s;
    k->fd = ci->connect_fd;
    k->since = mono_us();
    k->waiting = 1;
    pthread_mutex_lock(&s->wmu);
    k->next = s->conns;
    if (k->next)
        k->next->prev = k;
    s->conns = k;
    pthread_mutex_unlock(&s->wmu);
    *socket_context = k;
}

static void conn_remove(server *s, conn *k)
{
    pthread_mutex_lock(&s->wmu);
    if (k->prev)
        k->prev->next = k->next;
    else
        s->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    pthread_mutex_unlock(&s->wmu);
    free(k);
}

/* MHD_OPTION_NOTIFY_CONNECTION, in the thread that serves the connection. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_add(s, c, socket_context);
    } else if (*socket_context) {
        conn_remove(s, *socket_context);
        *socket_context = NULL;
    }
}

/* Starts the clock of the connection's next request (waiting = 1), or
 * stops it: the request has arrived whole, or is answered before it did. */
static void request_clock(struct MHD_Connection *c, int waiting)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *k = ci ? ci->socket_context : NULL;
    if (!k)
        return;
    pthread_mutex_lock(&k->s->wmu);
    k->waiting = waiting;
    if (waiting)
        k->since = mono_us();
    pthread_mutex_unlock(&k->s->wmu);
}

/* Shuts down each connection whose request is late, then sleeps until the
 * next deadline in the list, REQUEST_US at most. No deadline set while it
 * sleeps comes sooner: a clock started at t ends at t + REQUEST_US. */
static void *watchdog(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->wmu);
    while (!s->wstop) {
        int64_t now = mono_us(), wake = now + REQUEST_US;
        for (conn *k = s->conns; k; k = k->next) {
            int64_t due = k->since + REQUEST_US;
            if (!k->waiting)
                continue;
            if (due <= now) {
                shutdown(k->fd, SHUT_RDWR);
                k->waiting = 0; /* once is enough: libmicrohttpd closes it */
            } else if (due < wake) {
                wake = due;
            }
        }
        struct timespec ts = mono_at(wake);
        pthread_cond_timedwait(&s->wcv, &s->wmu, &ts);
    }
    pthread_mutex_unlock(&s->wmu);
    return NULL;
}

/* ---- what a request gathers -------------------------------------------- */

/* One queue's row of a gathering. */
typedef struct qrow {
    const tq_queue_info *info; /* NULL: a queue with jobs but no row */
    char name[65];
    int64_t count[TQ_STATE_COUNT];
    int64_t delayed, oldest_due_us;
    qstat *seen;
} qrow;

typedef struct gathering {
    tq_queue_info *queues;
    size_t nqueues;
    qrow *rows;
    size_t nrows;
    tq_worker_info *workers;
    size_t nworkers;
    tq_count *by_worker;
    size_t nby_worker;
    int64_t counted_at, count_us;
    int have_count;
    int64_t took_us;
} gathering;

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
    snprintf(r->name, sizeof r->name, "%s", name);
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

static void gathering_free(gathering *g)
{
    tq_free(g->queues);
    free(g->rows);
    tq_free(g->workers);
    tq_free(g->by_worker);
}

/* Everything /metrics and /api/overview show (s->mu held). */
static int gather(server *s, gathering *g)
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
        rc = read_finished(s);
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
        gathering_free(g);
        return rc;
    }
    rows_merge(g);
    for (size_t i = 0; i < g->nrows; i++) /* info points into queues: still valid */
        g->rows[i].seen =
            s->nq ? bsearch(g->rows[i].name, s->q, s->nq, sizeof *s->q, qstat_cmp) : NULL;
    g->took_us = mono_us() - t0;
    s->scrape_us = g->took_us;
    return 0;
}

/* ---- /metrics ---------------------------------------------------------- */

/* A label value as the exposition format wants it. */
static void put_label(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(f, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_metrics(FILE *f, server *s, const gathering *g)
{
    head(f, "tq_jobs", "gauge",
         "Jobs by queue and state: ready and running as of this scrape; waiting, done, "
         "dead and cancelled as of tq_finished_counted_age_seconds ago.");
    for (size_t i = 0; i < g->nrows; i++)
        for (int st = 0; st < TQ_STATE_COUNT; st++) {
            int counted = st != TQ_READY && st != TQ_RUNNING; /* by the thread */
            if (counted && !g->have_count)
                continue;
            fputs("tq_jobs{queue=\"", f);
            put_label(f, g->rows[i].name);
            fprintf(f, "\",state=\"%s\"} %lld\n", tq_state_name((tq_state)st),
                    (long long)g->rows[i].count[st]);
        }
    head(f, "tq_jobs_delayed", "gauge", "Ready jobs not due yet, by queue.");
    for (size_t i = 0; i < g->nrows; i++) {
        fputs("tq_jobs_delayed{queue=\"", f);
        put_label(f, g->rows[i].name);
        fprintf(f, "\"} %lld\n", (long long)g->rows[i].delayed);
    }
    head(f, "tq_oldest_ready_age_seconds", "gauge",
         "How long the oldest due ready job of the queue has been due (0: none).");
    for (size_t i = 0; i < g->nrows; i++) {
        fputs("tq_oldest_ready_age_seconds{queue=\"", f);
        put_label(f, g->rows[i].name);
        fprintf(f, "\"} %.6f\n", (double)g->rows[i].oldest_due_us / 1e6);
    }
    head(f, "tq_queue_paused", "gauge", "1 when the queue is paused.");
    for (size_t i = 0; i < g->nrows; i++) {
        fputs("tq_queue_paused{queue=\"", f);
        put_label(f, g->rows[i].name);
        fprintf(f, "\"} %d\n", g->rows[i].info && g->rows[i].info->paused);
    }
    head(f, "tq_jobs_finished_total", "counter",
         "Jobs that finished since this server started, by queue and state, as it "
         "read them: not those deleted when done, retried or pruned before it read "
         "them, or committed over a second after they finished.");
    for (size_t i = 0; i < g->nrows; i++)
        for (int k = 0; k < 3; k++) {
            const qstat *q = g->rows[i].seen;
            fputs("tq_jobs_finished_total{queue=\"", f);
            put_label(f, g->rows[i].name);
            fprintf(f, "\",state=\"%s\"} %lld\n", tq_state_name(fin[k]),
                    (long long)(q ? q->finished[k] : 0));
        }
    head(f, "tq_job_duration_seconds", "histogram",
         "Run time of done jobs (started to finished) since this server started.");
    for (size_t i = 0; i < g->nrows; i++) {
        const qstat *q = g->rows[i].seen;
        int64_t cum = 0;
        for (size_t b = 0; b <= HIST_N; b++) {
            cum += q ? q->hist[b] : 0;
            fputs("tq_job_duration_seconds_bucket{queue=\"", f);
            put_label(f, g->rows[i].name);
            if (b < HIST_N)
                fprintf(f, "\",le=\"%g\"} %lld\n", hist_le[b], (long long)cum);
            else
                fprintf(f, "\",le=\"+Inf\"} %lld\n", (long long)cum);
        }
        fputs("tq_job_duration_seconds_sum{queue=\"", f);
        put_label(f, g->rows[i].name);
        fprintf(f, "\"} %.6f\n", q ? q->dur_sum : 0.0);
        fputs("tq_job_duration_seconds_count{queue=\"", f);
        put_label(f, g->rows[i].name);
        fprintf(f, "\"} %lld\n", (long long)cum);
    }
    int64_t by[3] = {0, 0, 0};
    for (size_t i = 0; i < g->nworkers; i++)
        by[g->workers[i].alive ? 0 : g->workers[i].stopped_at ? 1 : 2]++;
    head(f, "tq_workers", "gauge",
         "Registered workers by status: alive, stopped, or gone (silent past their "
         "lease).");
    fprintf(f, "tq_workers{status=\"alive\"} %lld\n", (long long)by[0]);
    fprintf(f, "tq_workers{status=\"stopped\"} %lld\n", (long long)by[1]);
    fprintf(f, "tq_workers{status=\"gone\"} %lld\n", (long long)by[2]);
    if (g->have_count) {
        head(f, "tq_finished_counted_age_seconds", "gauge",
             "How old the count of waiting, done, dead and cancelled jobs is.");
        fprintf(f, "tq_finished_counted_age_seconds %.3f\n",
                (double)(now_us() - g->counted_at) / 1e6);
        head(f, "tq_finished_count_duration_seconds", "gauge",
             "How long the last count of waiting, done, dead and cancelled jobs took.");
        fprintf(f, "tq_finished_count_duration_seconds %.6f\n",
                (double)g->count_us / 1e6);
    }
    head(f, "tq_serve_start_time_seconds", "gauge", "When this server started.");
    fprintf(f, "tq_serve_start_time_seconds %.3f\n", (double)s->started_at / 1e6);
    head(f, "tq_scrape_duration_seconds", "gauge",
         "How long this scrape took to read the store.");
    fprintf(f, "tq_scrape_duration_seconds %.6f\n", (double)g->took_us / 1e6);
}

/* ---- /api/overview ------------------------------------------------------ */

static json_t *overview_json(server *s, const gathering *g)
{
    json_t *o = json_object();
    char now_buf[40];
    int64_t now = now_us();
    json_object_set_new(o, "version", json_string(TQ_VERSION));
    json_object_set_new(o, "engine", json_string(tq_engine_name(s->db)));
    json_object_set_new(o, "store", cli_json_text(tq_store_name(s->db)));
    json_object_set_new(o, "now",
                        json_string(tq_time_format(now_buf, sizeof now_buf, now)));
    json_object_set_new(o, "actions", json_boolean(s->token != NULL));
    json_object_set_new(o, "finished_counted_at", cli_json_time(g->counted_at));
    json_object_set_new(o, "gather_us", json_integer(g->took_us));
    json_t *qs = json_array();
    int64_t this_minute = now / 60000000;
    for (size_t i = 0; i < g->nrows; i++) {
        const qrow *r = &g->rows[i];
        const qstat *q = r->seen;
        json_t *j = json_object(), *counts = json_object(), *chart = json_array(),
               *totals = json_object();
        json_object_set_new(j, "name", cli_json_text(r->name));
        json_object_set_new(j, "paused", json_boolean(r->info && r->info->paused));
        for (int st = 0; st < TQ_STATE_COUNT; st++)
            json_object_set_new(counts, tq_state_name((tq_state)st),
                                json_integer(r->count[st]));
        json_object_set_new(j, "counts", counts);
        json_object_set_new(j, "delayed", json_integer(r->delayed));
        json_object_set_new(j, "oldest_ready_age_us", json_integer(r->oldest_due_us));
        for (int64_t m = this_minute - HISTORY_MIN + 1; m <= this_minute; m++) {
            size_t slot = (size_t)(m % HISTORY_MIN);
            json_array_append_new(
                chart,
                json_integer(q && q->minute_no[slot] == m ? q->minute_n[slot] : 0));
        }
        json_object_set_new(j, "done_per_minute", chart);
        for (int k = 0; k < 3; k++)
            json_object_set_new(totals, tq_state_name(fin[k]),
                                json_integer(q ? q->finished[k] : 0));
        json_object_set_new(j, "finished_total", totals);
        int64_t d[RECENT];
        size_t nd = q ? q->nrecent : 0;
        if (nd)
            memcpy(d, q->recent, nd * sizeof d[0]);
        json_object_set_new(j, "recent", json_integer((json_int_t)nd));
        json_object_set_new(j, "p50_us", json_integer(tq_percentile(d, nd, 0.50)));
        json_object_set_new(j, "p95_us", json_integer(tq_percentile(d, nd, 0.95)));
        json_array_append_new(qs, j);
    }
    json_object_set_new(o, "queues", qs);
    json_t *ws = json_array();
    for (size_t i = 0; i < g->nworkers; i++) {
        json_t *w = cli_worker_json(&g->workers[i]);
        int64_t running = 0;
        for (size_t k = 0; k < g->nby_worker; k++)
            if (strcmp(g->by_worker[k].name, g->workers[i].name) == 0)
                running = g->by_worker[k].n;
        json_object_set_new(w, "running", json_integer(running));
        json_array_append_new(ws, w);
    }
    json_object_set_new(o, "workers", ws);
    return o;
}

/* ---- requests ------------------------------------------------------------ */

typedef struct request {
    struct MHD_PostProcessor *pp;
    size_t body; /* bytes of body seen */
    int too_big; /* over BODY_MAX */
    char form_token[TOKEN_MAX + 1];
    size_t form_token_len;
    int form_token_long; /* too long, or given twice: not the token */
    int form_tokens;
} request;

static enum MHD_Result on_form(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *filename, const char *content_type,
                               const char *transfer_encoding, const char *data,
                               uint64_t off, size_t size)
{
    (void)kind, (void)filename, (void)content_type, (void)transfer_encoding;
    request *r = cls;
    if (!key || strcmp(key, "token") != 0) /* a multipart part may have no name */
        return MHD_YES;
    if (off == 0 && r->form_tokens++) /* a second token field: none counts */
        r->form_token_long = 1;
    if (off + size > TOKEN_MAX) {
        r->form_token_long = 1;
        return MHD_YES;
    }
    if (size)
        memcpy(r->form_token + off, data, size);
    if (off + size > r->form_token_len)
        r->form_token_len = (size_t)(off + size);
    return MHD_YES;
}

/* MHD_OPTION_NOTIFY_COMPLETED: the request is answered (or given up). */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)toe;
    request *r = *con_cls;
    request_clock(c, 1); /* the next request on this connection has its own */
    if (r) {
        if (r->pp)
            MHD_destroy_post_processor(r->pp);
        free(r);
        *con_cls = NULL;
    }
}

static void add_common_headers(struct MHD_Response *resp, const char *ctype)
{
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(
        resp, "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
}

/* Sends body (taken: freed by the library when sent, unless persistent). */
static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status,
                                 const char *ctype, void *body, size_t len,
                                 int persistent)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body, persistent ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        if (!persistent)
            free(body);
        return MHD_NO;
    }
    add_common_headers(resp, ctype);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, "Allow", "GET, HEAD, POST");
    request_clock(c, 0); /* libmicrohttpd reads no more of an answered request */
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *v)
{
    static char oom[] = "{\"error\":\"out of memory\"}";
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!s)
        return send_body(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json", oom,
                         sizeof oom - 1, 1);
    return send_body(c, status, "application/json", s, strlen(s), 0);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status,
                                  const char *msg)
{
    json_t *o = json_object();
    json_object_set_new(o, "error", cli_json_text(msg));
    return send_json(c, status, o);
}

/* A library failure: 404 for what does not exist, 400 for what the
 * library refused, 503 for a store that is busy or gone, else 500. */
static enum MHD_Result send_failure(struct MHD_Connection *c, server *s, int rc)
{
    /* Called with s->mu held, so the message is this request's. */
    tq *db = s->db;
    unsigned status = rc == TQ_ENOTFOUND                   ? MHD_HTTP_NOT_FOUND
                      : rc == TQ_EINVAL || rc == TQ_ESTATE ? MHD_HTTP_CONFLICT
                      : rc == TQ_EBUSY || rc == TQ_ECONN   ? MHD_HTTP_SERVICE_UNAVAILABLE
                                                         : MHD_HTTP_INTERNAL_SERVER_ERROR;
    if (rc == TQ_EINVAL)
        status = MHD_HTTP_BAD_REQUEST;
    const char *msg = tq_errmsg(db);
    fprintf(stderr, "tq serve: %s\n", msg && *msg ? msg : tq_strerror(rc));
    enum MHD_Result ret = send_error(c, status, msg && *msg ? msg : tq_strerror(rc));
    reconnect(s, &s->db, rc);
    return ret;
}

static int parse_i64(const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (!text || !*text || *text == '+' || *text == '-' || *text == ' ')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static enum MHD_Result api_jobs(server *s, struct MHD_Connection *c)
{
    tq_list_opts o = TQ_LIST_OPTS_INIT;
    const char *state = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state");
    const char *queue = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "queue");
    const char *before = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "before");
    const char *limit = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    int64_t v;
    tq_state st;
    if (state && *state) {
        if (tq_state_parse(&st, state))
            return send_error(c, MHD_HTTP_BAD_REQUEST, "unknown state");
        o.state = (int)st;
    }
    if (queue && *queue) {
        if (tq_name_check(queue))
            return send_error(c, MHD_HTTP_BAD_REQUEST, "bad queue name");
        o.queue = queue;
    }
    if (before && *before) {
        if (parse_i64(before, 1, INT64_MAX, &v))
            return send_error(c, MHD_HTTP_BAD_REQUEST, "before: expected a job id");
        o.before_id = v;
    }
    o.limit = 50;
    if (limit && *limit) {
        if (parse_i64(limit, 1, LIST_MAX, &v))
            return send_error(c, MHD_HTTP_BAD_REQUEST, "limit: expected 1 to 500");
        o.limit = (size_t)v;
    }
    tq_job *jobs;
    size_t n;
    pthread_mutex_lock(&s->mu);
    int rc = tq_job_list(&jobs, &n, s->db, &o);
    enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return ret;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        tq_job *j = &jobs[i];
        size_t keep = j->payload_len;
        if (keep > PAYLOAD_PREVIEW) { /* cut where a UTF-8 character starts */
            keep = PAYLOAD_PREVIEW;
            const unsigned char *b = j->payload;
            for (int k = 0; k < 3 && (b[keep] & 0xC0) == 0x80; k++)
                keep--; /* binary stays cut at 256: base64, as cli_json_bytes decides */
        }
        json_t *jo = cli_job_json(j, 0);
        cli_json_bytes(jo, "payload", j->payload, keep);
        json_object_set_new(jo, "payload_cut", json_boolean(keep < j->payload_len));
        json_array_append_new(a, jo);
    }
    tq_job_array_free(jobs, n);
    return send_json(c, MHD_HTTP_OK, a);
}

static enum MHD_Result api_job(server *s, struct MHD_Connection *c, int64_t id)
{
    tq_job *j;
    pthread_mutex_lock(&s->mu);
    int rc = tq_job_get(&j, s->db, id);
    json_t *o = rc ? NULL : cli_job_show_json(s->db, j);
    enum MHD_Result ret = rc == TQ_ENOTFOUND
                              ? send_error(c, MHD_HTTP_NOT_FOUND, "no such job")
                          : rc ? send_failure(c, s, rc)
                               : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return ret;
    tq_job_free(j);
    return send_json(c, MHD_HTTP_OK, o);
}

/* GET: what the path names. */
static enum MHD_Result get(server *s, struct MHD_Connection *c, const char *url)
{
    int64_t id;
    if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
        return send_body(c, MHD_HTTP_OK, "text/html; charset=utf-8",
                         (void *)asset_dashboard_html, asset_dashboard_html_len, 1);
    if (strcmp(url, "/dashboard.css") == 0)
        return send_body(c, MHD_HTTP_OK, "text/css; charset=utf-8",
                         (void *)asset_dashboard_css, asset_dashboard_css_len, 1);
    if (strcmp(url, "/dashboard.js") == 0)
        return send_body(c, MHD_HTTP_OK, "text/javascript; charset=utf-8",
                         (void *)asset_dashboard_js, asset_dashboard_js_len, 1);
    if (strcmp(url, "/metrics") == 0 || strcmp(url, "/api/overview") == 0) {
        int metrics = url[1] == 'm';
        gathering g;
        char *buf = NULL;
        size_t len = 0;
        json_t *o = NULL;
        pthread_mutex_lock(&s->mu);
        int rc = gather(s, &g);
        if (!rc && metrics) {
            FILE *f = open_memstream(&buf, &len);
            if (f) {
                render_metrics(f, s, &g);
                fclose(f);
            }
        } else if (!rc) {
            o = overview_json(s, &g);
        }
        enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
        pthread_mutex_unlock(&s->mu);
        if (rc)
            return ret;
        gathering_free(&g);
        if (!metrics)
            return send_json(c, MHD_HTTP_OK, o);
        if (!buf)
            return MHD_NO;
        return send_body(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", buf,
                         len, 0);
    }
    if (strcmp(url, "/api/queues") == 0) {
        tq_queue_info *v;
        size_t n;
        pthread_mutex_lock(&s->mu);
        int rc = tq_queue_list(&v, &n, s->db);
        enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
        pthread_mutex_unlock(&s->mu);
        if (rc)
            return ret;
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(a, cli_queue_json(&v[i]));
        tq_free(v);
        return send_json(c, MHD_HTTP_OK, a);
    }
    if (strcmp(url, "/api/workers") == 0) {
        tq_worker_info *v;
        size_t n;
        pthread_mutex_lock(&s->mu);
        int rc = tq_worker_list(&v, &n, s->db);
        enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
        pthread_mutex_unlock(&s->mu);
        if (rc)
            return ret;
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(a, cli_worker_json(&v[i]));
        tq_free(v);
        return send_json(c, MHD_HTTP_OK, a);
    }
    if (strcmp(url, "/api/schedules") == 0) {
        tq_schedule *v;
        size_t n;
        pthread_mutex_lock(&s->mu);
        int rc = tq_schedule_list(&v, &n, s->db);
        enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
        pthread_mutex_unlock(&s->mu);
        if (rc)
            return ret;
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(a, cli_schedule_json(&v[i]));
        tq_schedule_array_free(v, n);
        return send_json(c, MHD_HTTP_OK, a);
    }
    if (strcmp(url, "/api/jobs") == 0)
        return api_jobs(s, c);
    if (strncmp(url, "/api/jobs/", 10) == 0 &&
        parse_i64(url + 10, 1, INT64_MAX, &id) == 0)
        return api_job(s, c, id);
    return send_error(c, MHD_HTTP_NOT_FOUND, "not found");
}

/* The token the request carries, if any. */
static int has_token(server *s, struct MHD_Connection *c, const request *r)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && strncasecmp(h, "Bearer ", 7) == 0)
        return token_equal(h + 7, strlen(h + 7), s->token, s->token_len);
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-TQ-Token");
    if (h)
        return token_equal(h, strlen(h), s->token, s->token_len);
    if (r->form_token_len && !r->form_token_long)
        return token_equal(r->form_token, r->form_token_len, s->token, s->token_len);
    return 0;
}

/* POST /api/jobs/ID/ACTION or /api/queues/NAME/ACTION. */
static enum MHD_Result post(server *s, struct MHD_Connection *c, const char *url,
                            const request *r)
{
    char what[80], act[16];
    const char *slash;
    int is_job = strncmp(url, "/api/jobs/", 10) == 0;
    int is_queue = strncmp(url, "/api/queues/", 12) == 0;
    const char *rest = is_job ? url + 10 : is_queue ? url + 12 : NULL;
    if (!rest || !(slash = strchr(rest, '/')) || (size_t)(slash - rest) >= sizeof what ||
        strlen(slash + 1) >= sizeof act)
        return send_error(c, MHD_HTTP_NOT_FOUND, "not found");
    memcpy(what, rest, (size_t)(slash - rest));
    what[slash - rest] = '\0';
    snprintf(act, sizeof act, "%s", slash + 1);
    int64_t id = 0;
    if (is_job ? parse_i64(what, 1, INT64_MAX, &id) ||
                     (strcmp(act, "retry") != 0 && strcmp(act, "cancel") != 0)
               : tq_name_check(what) ||
                     (strcmp(act, "pause") != 0 && strcmp(act, "resume") != 0 &&
                      strcmp(act, "retry-dead") != 0))
        return send_error(c, MHD_HTTP_NOT_FOUND, "not found");
    if (!s->token)
        return send_error(c, MHD_HTTP_FORBIDDEN,
                          "actions are off: start tq serve with --token-file");
    if (r->too_big)
        return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large");
    if (!has_token(s, c, r))
        return send_error(c, MHD_HTTP_FORBIDDEN, "a valid token is needed");
    int rc;
    int64_t count = 0;
    json_t *o = json_object();
    pthread_mutex_lock(&s->mu);
    if (is_job) {
        rc = act[0] == 'r' ? tq_job_retry(s->db, id) : tq_job_cancel(s->db, id);
        json_object_set_new(o, "id", json_integer(id));
    } else {
        tq_queue_info qi;
        rc = tq_queue_get(&qi, s->db, what);
        if (!rc && strcmp(act, "retry-dead") == 0) {
            rc = tq_job_retry_dead(&count, s->db, what);
            json_object_set_new(o, "retried", json_integer(count));
        } else if (!rc) {
            tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
            qo.set = TQ_SET_PAUSED;
            qo.paused = act[0] == 'p';
            rc = tq_queue_set(s->db, what, &qo);
        }
        json_object_set_new(o, "queue", json_string(what));
    }
    enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        json_decref(o);
        return ret;
    }
    fprintf(stderr, "tq serve: %s %s\n", act, what);
    ask_recount(s);
    json_object_set_new(o, "done", json_string(act));
    return send_json(c, MHD_HTTP_OK, o);
}

/* On a loopback address, only a Host that names one: a page elsewhere
 * whose name a DNS answer turned into 127.0.0.1 (DNS rebinding) cannot read
 * the store through a browser. */
static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind, (void)value;
    if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        ++*(int *)cls;
    return MHD_YES;
}

static int host_ok(const server *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!s->loopback || !h)
        return 1;
    int hosts = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_host, &hosts);
    if (hosts != 1)
        return 0;
    char name[64];
    size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":");
    if (n >= sizeof name)
        return 0;
    memcpy(name, h, n);
    name[n] = '\0';
    struct in_addr a;
    return strcasecmp(name, "localhost") == 0 || strcmp(name, "[::1]") == 0 ||
           (inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *s = cls;
    request *r = *con_cls;
    int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (!r) { /* the headers are in: the body, if any, comes next */
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        *con_cls = r;
        if (!host_ok(s, c))
            return send_error(c, MHD_HTTP_FORBIDDEN, "this server answers to localhost");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        int64_t len;
        /* (one that does not parse is the HTTP library's to refuse) */
        if (cl && parse_i64(cl, 0, INT64_MAX, &len) == 0 && len > BODY_MAX) {
            r->too_big = 1; /* answered before the body is read */
            return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large");
        }
        if (is_post && s->token) /* NULL when the body is not a form */
            r->pp = MHD_create_post_processor(c, 1024, on_form, r);
        return MHD_YES;
    }
    if (*upload_size) {
        r->body += *upload_size;
        if (r->body > BODY_MAX) /* a chunked body grown too large: hang up */
            return MHD_NO;
        if (r->pp)
            MHD_post_process(r->pp, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    /* The request is in whole: its answer may take longer than the deadline
     * (a store that is slow to answer), and is not the client's doing. */
    request_clock(c, 0);
    if (strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
        strcmp(method, MHD_HTTP_METHOD_HEAD) == 0)
        return r->body ? send_error(c, MHD_HTTP_BAD_REQUEST, "a GET has no body")
                       : get(s, c, url);
    if (is_post)
        return post(s, c, url, r);
    return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fputs("tq serve: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* ---- the command ---------------------------------------------------------- */

/* --token-file: its first line, without the line end; -1 after saying
 * what is wrong. */
static int read_token(const char *path, char **out)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        cli_error("serve", "--token-file %s: %s", path, strerror(errno));
        return -1;
    }
    char buf[TOKEN_MAX + 2];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int err = ferror(f) ? errno : 0;
    if (f != stdin)
        fclose(f);
    if (err) {
        cli_error("serve", "--token-file %s: %s", path, strerror(err));
        return -1;
    }
    if (memchr(buf, '\0', n)) {
        cli_error("serve", "--token-file %s: the token has a NUL byte", path);
        return -1;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    n = strlen(buf);
    if (n > TOKEN_MAX) {
        cli_error("serve", "--token-file %s: the token is longer than %d bytes", path,
                  TOKEN_MAX);
        return -1;
    }
    if (n < 16) {
        cli_error("serve", "--token-file %s: the token needs at least 16 characters",
                  path);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] <= ' ' || (unsigned char)buf[i] >= 0x7f) {
            cli_error("serve",
                      "--token-file %s: the token must be printable ASCII without "
                      "spaces",
                      path);
            return -1;
        }
    *out = strdup(buf);
    return *out ? 0 : -1;
}

/* ADDR:PORT ([ADDR]:PORT for IPv6) into *out; -1 after saying why not. */
static int parse_listen(const char *text, struct sockaddr_storage *out, socklen_t *len,
                        int *loopback)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || strlen(text) >= sizeof host) {
        cli_error("serve", "--listen '%s': expected ADDRESS:PORT, e.g. 127.0.0.1:8080",
                  text);
        return -1;
    }
    size_t hl = (size_t)(colon - text);
    memcpy(host, text, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    int64_t port;
    if (parse_i64(colon + 1, 0, 65535, &port)) {
        cli_error("serve", "--listen '%s': the port must be 0 to 65535", text);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE},
                    *res;
    int e = getaddrinfo(host, colon + 1, &hints, &res);
    if (e) {
        cli_error("serve", "--listen '%s': %s", text, gai_strerror(e));
        return -1;
    }
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    if (out->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)out;
        *loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)out;
        *loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}

/* libmicrohttpd's threads over s, listening on addr; NULL after saying why
 * not. */
static struct MHD_Daemon *start_http(server *s, const char *listen,
                                     struct sockaddr_storage *addr)
{
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    errno = 0;
    /* Slow clients: a connection silent for IDLE_S is closed, a request
     * that has not arrived whole within REQUEST_US too (on_connection and
     * watchdog()), and one address holds at most CONN_PER_IP connections,
     * so that a few addresses cannot take every slot for that long. */
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
                         on_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)addr,
                         MHD_OPTION_THREAD_POOL_SIZE, 4u, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)CONN_MAX, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                         (unsigned)CONN_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)IDLE_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                         (size_t)32768, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!d)
        cli_error("serve", "cannot listen on %s: %s", listen,
                  errno ? strerror(errno) : "the HTTP server did not start");
    return d;
}

/* The line the tests (and people) wait for, once the server answers. */
static void announce(const server *s, struct MHD_Daemon *d, const char *listen,
                     const char *store)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char shown[300];
    snprintf(shown, sizeof shown, "%.*s:%u", (int)(strrchr(listen, ':') - listen), listen,
             di ? di->port : 0);
    if (!s->loopback && !s->token)
        fprintf(stderr,
                "tq serve: warning: %s is not a loopback address and no token is "
                "set: anyone who can reach it sees the store's jobs\n",
                listen);
    printf("tq serve: listening on http://%s/ (store %s; actions %s)\n", shown, store,
           s->token ? "on, with the token" : "off");
    fflush(stdout);
}

/* Sets *flag under mu, wakes the thread t waiting on cv, and joins it. */
static void stop_thread(pthread_mutex_t *mu, pthread_cond_t *cv, int *flag, pthread_t t)
{
    pthread_mutex_lock(mu);
    *flag = 1;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
    pthread_join(t, NULL);
}

/* Serves until SIGINT or SIGTERM: libmicrohttpd's threads, and counter()
 * and watchdog() beside them. Returns the exit status. */
static int serve_until_stopped(server *s, const char *listen,
                               struct sockaddr_storage *addr)
{
    /* Stop signals go to sigwait below, in this thread only: blocked here,
     * before any other thread starts, they are blocked in all of them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t counter_thread, watch_thread;
    if (pthread_create(&counter_thread, NULL, counter, s)) {
        cli_error("serve", "cannot start a thread");
        return EXIT_RUNTIME;
    }
    int ex = 0;
    if (pthread_create(&watch_thread, NULL, watchdog, s)) {
        cli_error("serve", "cannot start a thread");
        ex = EXIT_RUNTIME;
        goto stop_counter;
    }
    /* Read before the HTTP threads start: a reconnect there replaces s->db. */
    char store[600];
    snprintf(store, sizeof store, "%s", tq_store_name(s->db));
    struct MHD_Daemon *d = start_http(s, listen, addr);
    if (!d) {
        ex = EXIT_RUNTIME;
        goto stop_watch;
    }
    announce(s, d, listen, store);
    int sig;
    sigwait(&stop, &sig);
    fprintf(stderr, "tq serve: stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_stop_daemon(d);
stop_watch:
    stop_thread(&s->wmu, &s->wcv, &s->wstop, watch_thread);
stop_counter:
    stop_thread(&s->cmu, &s->ccv, &s->stop, counter_thread);
    return ex;
}

int cmd_serve(int argc, char **argv)
{
    static const char usage[] =
        "tq serve [--listen ADDR:PORT] [--token-file FILE] [--db URL]";
    static const struct option lo[] = {CLI_COMMON_OPTS,
                                       {"listen", required_argument, NULL, 'l'},
                                       {"token-file", required_argument, NULL, 't'},
                                       {0}};
    static const cli_cmd me = {
        .name = "serve",
        .usage = usage,
        .help =
            "Serves the store over HTTP until SIGINT or SIGTERM:\n"
            "  /             a dashboard: queues, workers, dead jobs, one job's detail\n"
            "  /metrics      Prometheus metrics (tq_jobs, tq_oldest_ready_age_seconds,\n"
            "                tq_jobs_finished_total, tq_job_duration_seconds, "
            "tq_workers)\n"
            "  /api/...      the JSON the dashboard reads (overview, queues, workers,\n"
            "                schedules, jobs?state=&queue=&before=&limit=, jobs/ID)\n"
            "Actions (retry or cancel a job; pause, resume or retry the dead jobs of a\n"
            "queue) are POSTs to /api/jobs/ID/retry|cancel and\n"
            "/api/queues/NAME/pause|resume|retry-dead, with the token as\n"
            "'Authorization: Bearer TOKEN'. Without --token-file they answer 403.\n\n"
            "  --listen ADDR:PORT  where to listen (default 127.0.0.1:8080; port 0:\n"
            "                      any free one); on an address that is not\n"
            "                      loopback it warns unless a token is set\n"
            "  --token-file FILE   the token for actions: FILE's first line, 16 to\n"
            "                      1024 characters (- for stdin)\n"};
    const char *url = NULL, *listen = "127.0.0.1:8080", *token_file = NULL;
    int c, ex = 0;
    while ((c = cli_option(&me, argc, argv, lo, &url, &ex)) > 0) {
        if (c == 'l')
            listen = optarg;
        else if (c == 't')
            token_file = optarg;
        else
            return cli_bad_option(&me, argv);
    }
    if (c == CLI_OPTS_EXIT)
        return ex;
    if ((ex = cli_no_args(&me, argc, argv, optind)))
        return ex;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int loopback;
    if (parse_listen(listen, &addr, &addrlen, &loopback))
        return EXIT_USAGE;
    char *token = NULL;
    if (token_file && read_token(token_file, &token))
        return EXIT_USAGE;

    server s = {.url = cli_url(url),
                .token = token,
                .token_len = token ? strlen(token) : 0,
                .loopback = loopback};
    pthread_mutex_init(&s.mu, NULL);
    pthread_mutex_init(&s.cmu, NULL);
    pthread_mutex_init(&s.wmu, NULL);
    cond_init_mono(&s.ccv);
    cond_init_mono(&s.wcv);
    s.started_at = now_us();
    s.db = cli_open("serve", cli_url(url), 0, &ex);
    if (s.db)
        s.cdb = cli_open("serve", cli_url(url), 0, &ex);
    if (!s.cdb) {
        tq_close(s.db);
        free(token);
        return ex;
    }
    /* The first count, and the last hour of finished jobs, before serving. */
    count_finished(&s);
    if (s.count_err[0]) {
        cli_error("serve", "counting finished jobs: %s", s.count_err);
        ex = EXIT_RUNTIME;
        goto out;
    }
    s.at_us = now_us() - (int64_t)HISTORY_MIN * 60000000;
    s.seeding = 1;
    int rc = read_finished(&s);
    s.seeding = 0;
    if (rc) {
        ex = cli_fail("serve", s.db, rc);
        goto out;
    }

    ex = serve_until_stopped(&s, listen, &addr);
out:
    for (int k = 0; k < NSLOW; k++)
        tq_free(s.kept[k]);
    free(s.q);
    tq_close(s.cdb);
    tq_close(s.db);
    free(token);
    pthread_cond_destroy(&s.wcv);
    pthread_mutex_destroy(&s.wmu);
    pthread_cond_destroy(&s.ccv);
    pthread_mutex_destroy(&s.cmu);
    pthread_mutex_destroy(&s.mu);
    return ex;
}
