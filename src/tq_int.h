/*
 * tq_int.h - declarations shared by the library's files, never installed.
 *
 * Names here carry the tq__ prefix. The tq handle is defined here so that
 * engines can keep their connection in it and report errors through it.
 */
#ifndef TQ_INT_H
#define TQ_INT_H

#include "tq.h"

#include <stdarg.h>
#include <stdbool.h>

struct tq__engine;

/* The schema version every engine writes (see each engine's migration
 * list for the procedure to change it). */
#define TQ__SCHEMA_VERSION 18

/* A new queue's tq_queue_info.max_snoozes (migration 12's DEFAULT). */
#define TQ__MAX_SNOOZES_DEFAULT 100

struct tq {
    const struct tq__engine *engine;
    void *conn;           /* the engine's connection state */
    int64_t payload_max;  /* bytes */
    int64_t busy_retries; /* lock waits seen by the engine, for stats */
    int borrowed;         /* conn uses the caller's connection (tq_open_opts.conn) */
    char name[512];       /* the URL with any password hidden */
    char errmsg[1024];
};

/* Sets db's message from fmt and returns code, so callers can write
 * "return tq__seterr(db, TQ_EINVAL, ...)". db may be NULL. */
int tq__seterr(tq *db, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void tq__clearerr(tq *db);

/* Wall clock in microseconds since the epoch, and a monotonic clock. */
int64_t tq__now_us(void);
int64_t tq__mono_us(void);
/* Sleeps us microseconds (a signal does not cut it short). */
void tq__sleep_us(int64_t us);

/* Checked allocation helpers: never abort, return NULL on failure. */
char *tq__strdup(const char *s);
void *tq__memdup(const void *p, size_t len, size_t extra);
/* Writes v in decimal at p (at most 20 bytes, no NUL) and returns the end:
 * the id lists the engines send, where sprintf was 2 % of a worker. */
char *tq__put_i64(char *p, int64_t v);

/* The length of the valid UTF-8 sequence at s (1 to 4), or 0 when s does
 * not start one (a stray byte, an overlong form, a surrogate, beyond
 * U+10FFFF, or cut short by the end at n). */
size_t tq__utf8_seq(const unsigned char *s, size_t n);
/* How many of the n bytes at p to keep for at most max: n, or max moved
 * back to where a character starts. */
size_t tq__utf8_cut(const char *p, size_t n, size_t max);
/* A copy of s that is valid UTF-8 (what PostgreSQL's text requires): each
 * byte that does not belong to a valid sequence, a character cut at either
 * end included, is written as the four characters \xNN. NULL when out of
 * memory. */
char *tq__utf8_clean(const char *s);

/*
 * Backoff before retry number `attempt` (1 = first retry after the first
 * failure): min(cap, base * 2^(attempt-1)), with "equal jitter": half fixed,
 * half uniform random, so retries of many jobs that failed together spread
 * out. base 0 gives 0. rnd is a uniform value in [0, 1).
 */
int64_t tq__backoff_us(int64_t base_us, int64_t cap_us, int attempt, double rnd);

/* A uniform random number in [0, 1) from a per-process generator. */
double tq__random(void);

/* Whether db is a handle tq_open opened: 0, its last error cleared; else
 * TQ_EINVAL (NULL, or a handle whose open failed, which then says why in
 * tq_errmsg). Every public call that uses the store starts with it. */
int tq__usable(tq *db);

/* Sorts claimed jobs for starting: those whose start the claim recorded
 * (started_at set) first, each part in the queue's order. Engines return
 * claimed jobs in any order; the layer above sorts them, and an engine that
 * must know the order itself (PostgreSQL's rate_take) calls this too: it
 * lives below both, in engine/common.c. */
void tq__jobs_sort(tq_job *jobs, size_t n, tq_order order);

/* Frees what a job owns and zeroes it (the job itself is not freed). */
void tq__job_clear(tq_job *j);

/* Whether a claimed job that has not started may not run: its attempts are
 * used up (a lowered max_attempts, or a row written by plain SQL). The
 * worker ends such a job as failed without running it. */
int tq__job_out_of_attempts(const tq_job *j);

/* The verdict on the schema version a store records (0: none). for_init:
 * only a newer store is refused (an older one is upgraded). */

/* A schedule row as the engines read it: copies every field into *s
 * (payload malloc'd); TQ_ENOMEM. */
int tq__schedule_fill(tq *db, tq_schedule *s, const char *name, const char *queue,
                      const char *spec, const char *tz, const void *payload, size_t len,
                      int priority, int overlap_skip, int64_t next_us, int64_t last_us,
                      int64_t last_job);

/* The defaults of a new queue. */
void tq__queue_defaults(tq_queue_info *q, const char *name);
/* Whether a queue has concurrency or rate limits: its claims take the
 * limited statement (tq__claim.limited). */
static inline int tq__queue_limited(const tq_queue_info *q)
{
    return q->max_running > 0 || q->max_running_per_group > 0 || q->rate_limit > 0;
}

/*
 * A rate limit's token bucket: at most n starts in any window of period
 * needs burst + refill x period <= n, since a window sees at most the
 * tokens held at its start and those refilled in it. The burst lets a
 * claim take a batch: what 10 ms of the rate allows, at least 1 and at
 * most half of n. The refill is n - burst (at least 1) per period plus
 * TQ__RATE_MARGIN_US: so a window longer than the period by that margin
 * still sees at most n, room for the jitter between a claim and the start
 * its handler notes (the engines' RATE_REFILL).
 */
#define TQ__RATE_MARGIN_US 10000
static inline int64_t tq__rate_burst(int64_t n, int64_t period_us)
{
    int64_t b = (n * 10000 + period_us - 1) / period_us;
    if (b > n / 2)
        b = n / 2;
    return b < 1 ? 1 : b;
}

#endif /* TQ_INT_H */
