/*
 * serve.h - what the files of `tq serve` share: the server's state, what
 * it keeps of the finished jobs it read, what one request gathers, and
 * the calls between the parts. The command (cmd/serve.c) starts the
 * server; serve_http.c speaks HTTP and hands each whole request to the
 * routes (serve_routes.c); serve_gather.c reads the store for them and
 * serve_render.c writes /metrics and /api/overview from what it read.
 */
#ifndef TQ_SERVE_H
#define TQ_SERVE_H

#include "cli.h"

#include <microhttpd.h>

#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

enum {
    TOKEN_MAX = 1024, /* the longest token */
    HISTORY_MIN = 60, /* minutes of the done-per-minute chart */
    RECENT = 256,     /* durations kept per queue for the percentiles */
    HIST_N = 12,      /* buckets of tq_job_duration_seconds, +Inf aside */
    NSLOW = 4,        /* states the counter thread counts (serve_gather.c) */
};

/* The upper bounds of tq_job_duration_seconds' buckets, in seconds: HIST_N
 * of them (serve_gather.c). */
extern const double serve_hist_le[HIST_N];

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
    int64_t wal_held_since;  /* wall clock: a scrape first saw it held; 0: not */

    /* The count of kept finished jobs, by the thread serve_counter(). */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    int stop, recount;
    tq *cdb;
    tq_count *kept[NSLOW];
    size_t nkept[NSLOW];
    int64_t counted_at, count_us; /* wall clock; how long it took */
    char count_err[256];

    /* The open connections, whose requests the thread serve_watchdog()
     * times (serve_http.c). */
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

/* One queue's row of a gathering. */
typedef struct qrow {
    const tq_queue_info *info; /* NULL: a queue with jobs but no row */
    char name[65];
    int64_t count[TQ_STATE_COUNT];
    int64_t delayed, oldest_due_us;
    qstat *seen;
} qrow;

/* Everything /metrics and /api/overview show, as one request read it. */
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
    tq_wal_info wal; /* a SQLite store's log (have_wal) */
    int have_wal;
    int64_t wal_held_since;
} gathering;

/* One request's state, from its headers to its answer. */
typedef struct request {
    struct MHD_PostProcessor *pp;
    size_t body; /* bytes of body seen */
    int too_big; /* over BODY_MAX */
    char form_token[TOKEN_MAX + 1];
    size_t form_token_len;
    int form_token_long; /* too long, or given twice: not the token */
    int form_tokens;
} request;

static inline int64_t serve_clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
#define now_us()  serve_clock_us(CLOCK_REALTIME)
#define mono_us() serve_clock_us(CLOCK_MONOTONIC)

/* A time of mono_us() as pthread_cond_timedwait wants it, for the
 * condition variables whose clock is CLOCK_MONOTONIC (cmd/serve.c). */
static inline struct timespec serve_mono_at(int64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000),
                          .tv_nsec = (long)(us % 1000000 * 1000)};
    return ts;
}

/* serve_gather.c: the store's side. */
/* Reads what finished since the last read (s->mu held). */
int serve_read_finished(server *s);
/* Counts the kept finished and waiting jobs on s->cdb, into s->kept. */
void serve_count_finished(server *s);
/* The thread that counts them again now and then, or when asked. */
void *serve_counter(void *arg);
void serve_ask_recount(server *s);
/* A new connection in *h after a failure rc that lost it. */
void serve_reconnect(server *s, tq **h, int rc);
/* Everything /metrics and /api/overview show (s->mu held); freed by
 * serve_gathering_free. */
int serve_gather(server *s, gathering *g);
void serve_gathering_free(gathering *g);

/* serve_render.c: what a gathering says. */
void serve_render_metrics(FILE *f, server *s, const gathering *g);
json_t *serve_overview_json(server *s, const gathering *g);

/* serve_http.c: HTTP. */
/* libmicrohttpd's threads over s, listening on addr; NULL after saying
 * why not. */
struct MHD_Daemon *serve_start_http(server *s, const char *listen,
                                    struct sockaddr_storage *addr);
/* The thread that closes connections whose request is late. */
void *serve_watchdog(void *arg);
/* Sends body (taken: freed by the library when sent, unless persistent). */
enum MHD_Result serve_send_body(struct MHD_Connection *c, unsigned status,
                                const char *ctype, void *body, size_t len,
                                int persistent);
enum MHD_Result serve_send_json(struct MHD_Connection *c, unsigned status, json_t *v);
enum MHD_Result serve_send_error(struct MHD_Connection *c, unsigned status,
                                 const char *msg);
/* A decimal integer of min to max, nothing else (no sign, no space): 0, or
 * -1. */
int serve_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out);

/* serve_routes.c: what a whole request asks for, answered. */
enum MHD_Result serve_get(server *s, struct MHD_Connection *c, const char *url);
enum MHD_Result serve_post(server *s, struct MHD_Connection *c, const char *url,
                           const request *r);

#endif
