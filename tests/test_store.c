/*
 * test_store.c - the conformance suite: every behaviour the docs promise
 * of a store, through the public API only. Compiled once and run against
 * each engine: TQ_TEST_ENGINE=sqlite (default) gives each test a fresh
 * SQLite file; TQ_TEST_ENGINE=postgres with TQ_TEST_PG_URL gives each test
 * a fresh schema in that database.
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check.h"
#include "pg_url.h"
#include "scratch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tq.h"

#include <libpq-fe.h>
#include <sqlite3.h>

/* ---- fixtures ------------------------------------------------------------ */

static char tmpdir[64];
static int store_seq;

/* A URL naming a store no test has used. */
static void fresh_url(char *buf, size_t len)
{
    test_store_url(buf, len, NULL, 't', tmpdir, ++store_seq);
}

typedef struct fx {
    char url[512];
    tq *db;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    fresh_url(f->url, sizeof f->url);
    if (tq_open(&f->db, f->url, &o) || tq_init(f->db)) {
        fprintf(stderr, "setup: %s\n", tq_errmsg(f->db));
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tq_close(f->db);
    free(f);
    return 0;
}

#define DB (((fx *)*state)->db)
/* Asserts a tq call on the fixture's handle returned 0 (check.h). */
#define OK(call) OK_ON(DB, call)

static int64_t enq(void **state, const char *queue, const char *payload)
{
    int64_t id = 0;
    OK(tq_job_enqueue(&id, DB, queue, payload, strlen(payload), NULL));
    assert_true(id > 0);
    return id;
}

/* Enqueues payload into queue with eo, which must be refused as a duplicate
 * (TQ_DUP); the id of the job that holds the key. */
static int64_t dup_of(void **state, const char *queue, const char *payload,
                      const tq_enqueue_opts *eo)
{
    int64_t id = 0;
    assert_int_equal(tq_job_enqueue(&id, DB, queue, payload, strlen(payload), eo),
                     TQ_DUP);
    return id;
}

/* Enqueues n jobs of payload into queue in one batch; their ids into ids. */
static void enq_batch(void **state, int64_t *ids, const char *queue, const char *payload,
                      size_t n)
{
    tq_payload *items = calloc(n, sizeof *items);
    assert_non_null(items);
    for (size_t i = 0; i < n; i++)
        items[i] = (tq_payload){payload, strlen(payload)};
    OK(tq_job_enqueue_batch(ids, DB, queue, items, n, NULL));
    free(items);
}

/* Enqueues the jobs PREFIX1 to PREFIXn into queue, in that order. */
static void enq_numbered(void **state, const char *queue, const char *prefix, int n)
{
    for (int i = 1; i <= n; i++) {
        char p[16];
        snprintf(p, sizeof p, "%s%d", prefix, i);
        enq(state, queue, p);
    }
}

static tq_job *get(void **state, int64_t id)
{
    tq_job *j = NULL;
    OK(tq_job_get(&j, DB, id));
    return j;
}

static tq_state state_of(void **state, int64_t id)
{
    tq_job *j = get(state, id);
    tq_state s = j->state;
    tq_job_free(j);
    return s;
}

/* Claims exactly one job as worker and returns it. */
static tq_job *claim1(void **state, const char *queue, const char *worker)
{
    tq_job *jobs = NULL;
    size_t n = 0;
    OK(tq_job_claim(&jobs, &n, DB, queue, worker, 1));
    assert_int_equal(n, 1);
    return jobs;
}

static size_t claim_n(void **state, const char *queue, size_t max)
{
    tq_job *jobs = NULL;
    size_t n = 0;
    OK(tq_job_claim(&jobs, &n, DB, queue, "w", max));
    tq_job_array_free(jobs, n);
    return n;
}

/* Claims up to max jobs of queue as worker in one call: they must be the n
 * jobs of want, in that order. The caller frees them. */
static tq_job *claim_ids(void **state, const char *queue, const char *worker, size_t max,
                         const int64_t *want, size_t n)
{
    tq_job *jobs = NULL;
    size_t got = 0;
    OK(tq_job_claim(&jobs, &got, DB, queue, worker, max));
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(jobs[i].id, want[i]);
    return jobs;
}

static void set_queue(void **state, const char *name, unsigned set, tq_order order,
                      int64_t lease_us, int max_attempts, int64_t base, int64_t cap)
{
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = set;
    o.order = order;
    o.lease_us = lease_us;
    o.max_attempts = max_attempts;
    o.backoff_base_us = base;
    o.backoff_cap_us = cap;
    OK(tq_queue_set(DB, name, &o));
}

/* Microseconds of clock: CLOCK_REALTIME for times the store keeps,
 * CLOCK_MONOTONIC for spans. */
static int64_t clock_us(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Claims one job of queue as worker, lets it run run_ms, and completes it. */
static void run1(void **state, const char *queue, const char *worker, int run_ms)
{
    tq_job *j = claim1(state, queue, worker);
    sleep_ms(run_ms);
    OK(tq_job_complete(DB, j));
    tq_job_free(j);
}

/* ---- the life of a job ----------------------------------------------------- */

static void enqueue_claim_complete(void **state)
{
    int64_t a = enq(state, "q", "one"), b = enq(state, "q", "two");
    enq(state, "q", "three");
    tq_job *jobs = claim_ids(state, "q", "w1", 2, (const int64_t[]){a, b}, 2);
    assert_string_equal((char *)jobs[0].payload, "one");
    assert_int_equal(jobs[0].payload_len, 3);
    assert_int_equal(jobs[0].state, TQ_RUNNING);
    assert_int_equal(jobs[0].attempts, 1);
    assert_int_equal(jobs[0].max_attempts, 3);
    assert_string_equal(jobs[0].worker, "w1");
    assert_string_equal(jobs[0].queue, "q");
    assert_int_equal(jobs[0].finished_at, 0);
    assert_true(jobs[0].lease_until > jobs[0].started_at);
    /* Times are microseconds since 1970, as the job row holds them. */
    int64_t wall = (int64_t)time(NULL) * 1000000;
    assert_true(jobs[0].created_at > wall - 60000000 &&
                jobs[0].created_at < wall + 60000000);
    assert_true(jobs[0].started_at >= jobs[0].created_at);
    tq_job *as_stored = get(state, a);
    assert_int_equal(as_stored->started_at, jobs[0].started_at);
    assert_int_equal(as_stored->lease_until, jobs[0].lease_until);
    assert_int_equal(as_stored->run_at, jobs[0].run_at);
    tq_job_free(as_stored);
    OK(tq_job_complete(DB, &jobs[0]));
    tq_job *j = get(state, a);
    assert_int_equal(j->state, TQ_DONE);
    assert_true(j->finished_at >= j->started_at && j->started_at > 0);
    assert_int_equal(j->lease_until, 0);
    tq_job_free(j);
    assert_int_equal(state_of(state, b), TQ_RUNNING);
    tq_job_array_free(jobs, 2);
    assert_int_equal(claim_n(state, "q", 10), 1);
    assert_int_equal(claim_n(state, "q", 10), 0); /* nothing ready: not an error */
    assert_int_equal(claim_n(state, "nosuchqueue", 10), 0);
}

static void fencing(void **state)
{
    int64_t id = enq(state, "q", "x");
    tq_job *j = claim1(state, "q", "w1");
    tq_job other = *j;

    /* Another worker name, or another attempt, cannot touch it. */
    other.worker = "w2";
    assert_int_equal(tq_job_complete(DB, &other), TQ_ELOST);
    assert_int_equal(tq_job_fail(DB, &other, "no"), TQ_ELOST);
    assert_int_equal(tq_job_heartbeat(DB, &other), TQ_ELOST);
    assert_int_equal(tq_job_release(DB, &other), TQ_ELOST);
    other.worker = j->worker;
    other.claim = j->claim + 1;
    assert_int_equal(tq_job_complete(DB, &other), TQ_ELOST);
    assert_int_equal(state_of(state, id), TQ_RUNNING);

    /* After the job went back and was claimed again, the old claim is dead. */
    OK(tq_job_release(DB, j));
    tq_job *again = claim1(state, "q", "w2");
    assert_int_equal(again->attempts, 1); /* release did not spend it */
    assert_int_equal(tq_job_complete(DB, j), TQ_ELOST);
    assert_int_equal(tq_job_fail(DB, j, "late"), TQ_ELOST);
    tq_job *now = get(state, id);
    assert_int_equal(now->state, TQ_RUNNING);
    assert_string_equal(now->worker, "w2");
    assert_null(now->last_error);
    tq_job_free(now);
    OK(tq_job_complete(DB, again));
    assert_int_equal(tq_job_complete(DB, again), TQ_ELOST); /* only once */
    assert_int_equal(state_of(state, id), TQ_DONE);
    tq_job_free(again);
    tq_job_free(j);
}

/* Cancel and retry put a job back with its attempts reset; claimed again by
 * the same worker it runs at attempt 1 once more, but under a new claim:
 * the cancelled run's acknowledgements and heartbeats are refused. */
static void fence_survives_cancel_and_retry(void **state)
{
    int64_t id = enq(state, "q", "x");
    tq_job *first = claim1(state, "q", "w");
    OK(tq_job_cancel(DB, id));
    OK(tq_job_retry(DB, id));
    tq_job *second = claim1(state, "q", "w");
    assert_int_equal(first->attempts, 1);
    assert_int_equal(second->attempts, 1);
    assert_true(second->claim > first->claim);
    assert_int_equal(tq_job_heartbeat(DB, first), TQ_ELOST);
    assert_int_equal(tq_job_complete(DB, first), TQ_ELOST);
    assert_int_equal(tq_job_fail(DB, first, "stale"), TQ_ELOST);
    assert_int_equal(tq_job_release(DB, first), TQ_ELOST);
    tq_job *now = get(state, id);
    assert_int_equal(now->state, TQ_RUNNING);
    assert_int_equal(now->claim, second->claim);
    assert_null(now->last_error);
    tq_job_free(now);
    OK(tq_job_heartbeat(DB, second));
    OK(tq_job_complete(DB, second));
    assert_int_equal(state_of(state, id), TQ_DONE);
    tq_job_free(first);
    tq_job_free(second);
}

static void fail_retry_then_dead(void **state)
{
    set_queue(state, "p", TQ_SET_MAX_ATTEMPTS | TQ_SET_BACKOFF, TQ_FIFO, 0, 3, 0, 0);
    int64_t id = enq(state, "p", "poison");
    for (int attempt = 1; attempt <= 3; attempt++) {
        tq_job *j = claim1(state, "p", "w");
        assert_int_equal(j->attempts, attempt);
        OK(tq_job_fail(DB, j, "it broke"));
        tq_job_free(j);
        tq_job *g = get(state, id);
        assert_string_equal(g->last_error, "it broke");
        assert_int_equal(g->state, attempt < 3 ? TQ_READY : TQ_DEAD);
        if (attempt == 3)
            assert_true(g->finished_at > 0);
        tq_job_free(g);
    }
    assert_int_equal(claim_n(state, "p", 10), 0); /* dead is not claimed */
}

static void job_max_attempts_overrides_queue(void **state)
{
    set_queue(state, "p", TQ_SET_BACKOFF, TQ_FIFO, 0, 0, 0, 0);
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    eo.max_attempts = 1;
    int64_t id;
    OK(tq_job_enqueue(&id, DB, "p", "x", 1, &eo));
    tq_job *j = claim1(state, "p", "w");
    assert_int_equal(j->max_attempts, 1);
    OK(tq_job_fail(DB, j, "once"));
    tq_job_free(j);
    assert_int_equal(state_of(state, id), TQ_DEAD);
}

static void backoff_delays_retry(void **state)
{
    set_queue(state, "b", TQ_SET_BACKOFF, TQ_FIFO, 0, 0, 20000000, 40000000);
    int64_t id = enq(state, "b", "x");
    tq_job *j = claim1(state, "b", "w");
    int64_t before = clock_us(CLOCK_REALTIME);
    OK(tq_job_fail(DB, j, "later"));
    tq_job_free(j);
    tq_job *g = get(state, id);
    assert_int_equal(g->state, TQ_READY);
    /* First retry: between base/2 and base from now. */
    assert_in_range(g->run_at - before, 10000000 - 1000000, 20000000 + 1000000);
    tq_job_free(g);
    assert_int_equal(claim_n(state, "b", 1), 0);
}

static void heartbeat_extends_lease(void **state)
{
    set_queue(state, "h", TQ_SET_LEASE, TQ_FIFO, 5000000, 0, 0, 0);
    int64_t id = enq(state, "h", "x");
    tq_job *j = claim1(state, "h", "w");
    sleep_ms(50);
    OK(tq_job_heartbeat(DB, j));
    tq_job *g = get(state, id);
    assert_true(g->lease_until > j->lease_until);
    assert_in_range(g->lease_until - clock_us(CLOCK_REALTIME), 4000000, 5100000);
    tq_job_free(g);
    tq_job_free(j);
}

static void expired_lease_rescued(void **state)
{
    set_queue(state, "r", TQ_SET_LEASE | TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 1000000, 2, 0, 0);
    int64_t id = enq(state, "r", "x");
    tq_job *j = claim1(state, "r", "w1");
    int64_t n = -1;
    OK(tq_rescue_expired(&n, DB));
    assert_int_equal(n, 0); /* not yet expired */
    sleep_ms(1200);
    OK(tq_rescue_expired(&n, DB));
    assert_int_equal(n, 1);
    tq_job *g = get(state, id);
    assert_int_equal(g->state, TQ_READY);
    assert_non_null(strstr(g->last_error, "lease expired"));
    tq_job_free(g);
    assert_int_equal(tq_job_complete(DB, j), TQ_ELOST); /* fenced out */
    tq_job_free(j);

    /* The second expiry uses up the attempts: dead. */
    j = claim1(state, "r", "w2");
    assert_int_equal(j->attempts, 2);
    sleep_ms(1200);
    OK(tq_rescue_expired(&n, DB));
    assert_int_equal(n, 1);
    assert_int_equal(state_of(state, id), TQ_DEAD);
    tq_job_free(j);
}

/* ---- enqueue options -------------------------------------------------------- */

static void dedup_keys(void **state)
{
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t a, c;
    eo.key = "order-17";
    OK(tq_job_enqueue(&a, DB, "q", "first", 5, &eo));
    assert_int_equal(dup_of(state, "q", "second", &eo), a);
    tq_job *j = get(state, a);
    assert_string_equal((char *)j->payload, "first"); /* the first row is kept */
    assert_string_equal(j->key, "order-17");
    tq_job_free(j);
    OK(tq_job_enqueue(&c, DB, "other", "x", 1, &eo)); /* keys are per queue */
    assert_int_not_equal(c, a);
    /* Still a duplicate after the job finished (the row is kept). */
    run1(state, "q", "w", 0);
    assert_int_equal(dup_of(state, "q", "third", &eo), a);
    tq_list_opts lo = TQ_LIST_OPTS_INIT;
    tq_job *all;
    size_t n;
    OK(tq_job_list(&all, &n, DB, &lo));
    assert_int_equal(n, 2);
    tq_job_array_free(all, n);
}

/* Keys with a scope (tq_unique): held while queued (ready, unclaimed) or
 * active (ready or running), by time with unique_for, replaced when ready. */
static void unique_scopes(void **state)
{
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t a, b, c;
    eo.key = "k";

    /* queued: the first claim frees the key, for good. */
    eo.unique = TQ_UNIQUE_QUEUED;
    OK(tq_job_enqueue(&a, DB, "uq", "1", 1, &eo));
    assert_int_equal(dup_of(state, "uq", "2", &eo), a);
    tq_job *j = claim1(state, "uq", "w");
    OK(tq_job_enqueue(&c, DB, "uq", "3", 1, &eo));
    assert_int_not_equal(c, a);
    OK(tq_job_fail(DB, j, "again")); /* back to ready: it does not take the key back */
    tq_job_free(j);
    assert_int_equal(state_of(state, a), TQ_READY);
    assert_int_equal(dup_of(state, "uq", "4", &eo), c);

    /* active: held while ready or running; free once done or cancelled. */
    eo.unique = TQ_UNIQUE_ACTIVE;
    OK(tq_job_enqueue(&a, DB, "ua", "1", 1, &eo));
    j = claim1(state, "ua", "w");
    assert_int_equal(dup_of(state, "ua", "2", &eo), a);
    OK(tq_job_complete(DB, j));
    tq_job_free(j);
    OK(tq_job_enqueue(&c, DB, "ua", "3", 1, &eo));
    assert_int_not_equal(c, a);
    OK(tq_job_cancel(DB, c));
    OK(tq_job_enqueue(&b, DB, "ua", "4", 1, &eo));
    OK(tq_job_retry(DB, c)); /* retried by hand: ready, without the key */
    assert_int_equal(state_of(state, c), TQ_READY);
    assert_int_equal(dup_of(state, "ua", "5", &eo), b);
    /* Stored keys are another set: the same text is free there. */
    eo.unique = TQ_UNIQUE_STORED;
    OK(tq_job_enqueue(&c, DB, "ua", "6", 1, &eo));
    assert_int_not_equal(c, b);

    /* replace: a ready kept job takes the payload, run time and priority. */
    eo.unique = TQ_UNIQUE_QUEUED;
    eo.key = "r";
    eo.on_conflict = TQ_ON_CONFLICT_REPLACE;
    OK(tq_job_enqueue(&a, DB, "ur", "old", 3, &eo));
    eo.priority = 5;
    eo.delay_us = 60000000;
    assert_int_equal(tq_job_enqueue(&b, DB, "ur", "new", 3, &eo), TQ_REPLACED);
    assert_int_equal(b, a);
    j = get(state, a);
    assert_string_equal((char *)j->payload, "new");
    assert_int_equal(j->priority, 5);
    assert_true(j->run_at > clock_us(CLOCK_REALTIME) + 50000000);
    assert_string_equal(j->key, "r");
    tq_job_free(j);
    /* ... but a running one is left alone (active), as is a done one
     * (stored). */
    eo.unique = TQ_UNIQUE_ACTIVE;
    eo.delay_us = 0;
    OK(tq_job_enqueue(&a, DB, "ur2", "old", 3, &eo));
    j = claim1(state, "ur2", "w");
    assert_int_equal(dup_of(state, "ur2", "new", &eo), a);
    OK(tq_job_complete(DB, j));
    tq_job_free(j);
    j = get(state, a);
    assert_string_equal((char *)j->payload, "old");
    tq_job_free(j);
    eo.unique = TQ_UNIQUE_STORED;
    OK(tq_job_enqueue(&a, DB, "ur3", "old", 3, &eo));
    run1(state, "ur3", "w", 0);
    assert_int_equal(dup_of(state, "ur3", "new", &eo), a);

    /* unique_for: the key is free that long after the kept job's enqueue,
     * whatever its state; the kept job keeps its key for the record. */
    for (int scope = TQ_UNIQUE_STORED; scope <= TQ_UNIQUE_ACTIVE; scope++) {
        tq_enqueue_opts t = TQ_ENQUEUE_OPTS_INIT;
        char q[16];
        snprintf(q, sizeof q, "ut%d", scope);
        t.key = "t";
        t.unique = (tq_unique)scope;
        t.unique_for_us = 300000;
        OK(tq_job_enqueue(&a, DB, q, "1", 1, &t));
        assert_int_equal(dup_of(state, q, "2", &t), a);
        sleep_ms(400);
        OK(tq_job_enqueue(&c, DB, q, "3", 1, &t));
        assert_int_not_equal(c, a);
        assert_int_equal(dup_of(state, q, "4", &t), c);
        j = get(state, a);
        assert_string_equal(j->key, "t");
        tq_job_free(j);
    }

    /* A running kept job whose time is up keeps its key until it ends
     * (expiring it would lock a row a worker is about to acknowledge). */
    tq_enqueue_opts r = TQ_ENQUEUE_OPTS_INIT;
    r.key = "run";
    r.unique = TQ_UNIQUE_ACTIVE;
    r.unique_for_us = 200000;
    OK(tq_job_enqueue(&a, DB, "utr", "1", 1, &r));
    j = claim1(state, "utr", "w");
    sleep_ms(300);
    assert_int_equal(dup_of(state, "utr", "2", &r), a);
    OK(tq_job_complete(DB, j));
    tq_job_free(j);
    OK(tq_job_enqueue(&c, DB, "utr", "3", 1, &r));
    assert_int_not_equal(c, a);

    /* Bad options change nothing. */
    tq_enqueue_opts bad = TQ_ENQUEUE_OPTS_INIT;
    bad.unique = TQ_UNIQUE_QUEUED; /* without a key */
    assert_int_equal(tq_job_enqueue(&a, DB, "ub", "x", 1, &bad), TQ_EINVAL);
    bad.key = "x";
    bad.unique = (tq_unique)7;
    assert_int_equal(tq_job_enqueue(&a, DB, "ub", "x", 1, &bad), TQ_EINVAL);
    bad.unique = TQ_UNIQUE_QUEUED;
    bad.unique_for_us = -1;
    assert_int_equal(tq_job_enqueue(&a, DB, "ub", "x", 1, &bad), TQ_EINVAL);
    assert_int_equal(claim_n(state, "ub", 10), 0);

    /* A caller built against version 1 of the options: stored keys. */
    struct {
        int version;
        const char *key;
        int64_t delay_us, run_at;
        int priority, max_attempts;
    } v1 = {1, "v1", 0, 0, 0, 0};
    OK(tq_job_enqueue(&a, DB, "uv", "1", 1, (const tq_enqueue_opts *)(void *)&v1));
    assert_int_equal(dup_of(state, "uv", "2", (const tq_enqueue_opts *)(void *)&v1), a);
}

/* A trace context is stored with the job and comes back with its claim,
 * for a callback handler; a malformed one is refused. */
static void traceparent_travels(void **state)
{
    static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t id, none;
    eo.traceparent = tp;
    OK(tq_job_enqueue(&id, DB, "tp", "x", 1, &eo));
    OK(tq_job_enqueue(&none, DB, "tp", "y", 1, NULL));
    tq_job *j = claim1(state, "tp", "w");
    assert_int_equal(j->id, id);
    assert_non_null(j->traceparent);
    assert_string_equal(j->traceparent, tp);
    tq_job_free(j);
    j = claim1(state, "tp", "w");
    assert_null(j->traceparent);
    tq_job_free(j);
    j = get(state, id);
    assert_string_equal(j->traceparent, tp);
    tq_job_free(j);
    eo.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7";
    assert_int_equal(tq_job_enqueue(&id, DB, "tp", "z", 1, &eo), TQ_EINVAL);
    tq_payload two[2] = {{"a", 1}, {"b", 1}};
    int64_t ids[2];
    eo.traceparent = tp;
    OK(tq_job_enqueue_batch(ids, DB, "tpb", two, 2, &eo));
    j = get(state, ids[1]);
    assert_string_equal(j->traceparent, tp);
    tq_job_free(j);
}

/* Timeouts in the store: a queue's setting and a job's own (plain, keyed
 * and batch enqueues) are stored and come back with a claim and a read;
 * callers of an older struct version cannot set them; bad values are
 * refused. */
static void timeouts_stored(void **state)
{
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    tq_queue_info q;
    qo.set = TQ_SET_TIMEOUT;
    qo.timeout_us = 90000000;
    OK(tq_queue_set(DB, "to", &qo));
    OK(tq_queue_get(&q, DB, "to"));
    assert_int_equal(q.timeout_us, 90000000);
    qo.version = 4; /* before the field: the bit is not read */
    qo.timeout_us = 5;
    OK(tq_queue_set(DB, "to", &qo));
    OK(tq_queue_get(&q, DB, "to"));
    assert_int_equal(q.timeout_us, 90000000);
    qo.version = TQ_QUEUE_OPTS_VERSION;
    qo.timeout_us = -1;
    assert_int_equal(tq_queue_set(DB, "to", &qo), TQ_EINVAL);
    qo.timeout_us = 3651LL * 86400 * 1000000;
    assert_int_equal(tq_queue_set(DB, "to", &qo), TQ_EINVAL);
    OK(tq_queue_get(&q, DB, "to"));
    assert_int_equal(q.timeout_us, 90000000);

    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t own, none, keyed, old, batch[2];
    eo.timeout_us = 7000000;
    OK(tq_job_enqueue(&own, DB, "to", "a", 1, &eo));
    OK(tq_job_enqueue(&none, DB, "to", "b", 1, NULL));
    eo.key = "k";
    eo.unique = TQ_UNIQUE_ACTIVE;
    eo.timeout_us = 8000000;
    OK(tq_job_enqueue(&keyed, DB, "to", "c", 1, &eo));
    tq_enqueue_opts v4 = eo;
    v4.version = 4;
    v4.key = NULL;
    v4.unique = TQ_UNIQUE_STORED;
    OK(tq_job_enqueue(&old, DB, "to", "d", 1, &v4));
    tq_payload two[2] = {{"e", 1}, {"f", 1}};
    eo.key = NULL;
    eo.unique = TQ_UNIQUE_STORED;
    eo.timeout_us = 9000000;
    OK(tq_job_enqueue_batch(batch, DB, "to", two, 2, &eo));
    const int64_t want[][2] = {{own, 7000000}, {none, 0},           {keyed, 8000000},
                               {old, 0},       {batch[0], 9000000}, {batch[1], 9000000}};
    for (size_t i = 0; i < 6; i++) {
        tq_job *j = claim1(state, "to", "w");
        assert_int_equal(j->id, want[i][0]); /* FIFO: in enqueue order */
        assert_int_equal(j->timeout_us, want[i][1]);
        tq_job_free(j);
        j = get(state, want[i][0]);
        assert_int_equal(j->timeout_us, want[i][1]);
        tq_job_free(j);
    }
    eo.timeout_us = -1;
    assert_int_equal(tq_job_enqueue(&own, DB, "to", "x", 1, &eo), TQ_EINVAL);
    eo.timeout_us = 3651LL * 86400 * 1000000;
    assert_int_equal(tq_job_enqueue(&own, DB, "to", "x", 1, &eo), TQ_EINVAL);
    assert_int_equal(claim_n(state, "to", 10), 0);
}

static void delayed_not_claimed_early(void **state)
{
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t late, due;
    eo.delay_us = 30000000;
    OK(tq_job_enqueue(&late, DB, "d", "later", 5, &eo));
    assert_int_equal(claim_n(state, "d", 10), 0);
    eo.delay_us = 0;
    eo.run_at = clock_us(CLOCK_REALTIME) - 1000000; /* absolute, already due */
    OK(tq_job_enqueue(&due, DB, "d", "now", 3, &eo));
    tq_job *j = claim1(state, "d", "w");
    assert_int_equal(j->id, due);
    tq_job_free(j);
    assert_int_equal(state_of(state, late), TQ_READY);
    assert_int_equal(claim_n(state, "d", 10), 0);
}

static int64_t enq_pri(void **state, const char *q, const char *p, int pri)
{
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t id;
    eo.priority = pri;
    OK(tq_job_enqueue(&id, DB, q, p, strlen(p), &eo));
    return id;
}

static void claim_order(void **state, const char *q, const int64_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tq_job *j = claim1(state, q, "w");
        if (j->id != want[i])
            fail_msg("queue %s claim %zu: got job %lld, want %lld", q, i,
                     (long long)j->id, (long long)want[i]);
        tq_job_free(j);
    }
}

static void orders_and_priority(void **state)
{
    set_queue(state, "lifo", TQ_SET_ORDER, TQ_LIFO, 0, 0, 0, 0);
    int64_t f1 = enq_pri(state, "fifo", "a", 0), f2 = enq_pri(state, "fifo", "b", 0),
            f3 = enq_pri(state, "fifo", "c", 5), f4 = enq_pri(state, "fifo", "d", 0);
    int64_t fifo_want[] = {f3, f1, f2, f4};
    claim_order(state, "fifo", fifo_want, 4);

    int64_t l1 = enq_pri(state, "lifo", "a", 0), l2 = enq_pri(state, "lifo", "b", 0),
            l3 = enq_pri(state, "lifo", "c", -1), l4 = enq_pri(state, "lifo", "d", 0);
    int64_t lifo_want[] = {l4, l2, l1, l3};
    claim_order(state, "lifo", lifo_want, 4);

    set_queue(state, "any", TQ_SET_ORDER, TQ_UNORDERED, 0, 0, 0, 0);
    for (int i = 0; i < 5; i++)
        enq(state, "any", "x");
    assert_int_equal(claim_n(state, "any", 3), 3);
    assert_int_equal(claim_n(state, "any", 3), 2);
}

static void batch_claim_returns_queue_order(void **state)
{
    int64_t a = enq_pri(state, "q", "a", 0), b = enq_pri(state, "q", "b", 9),
            c = enq_pri(state, "q", "c", 0);
    tq_job_array_free(claim_ids(state, "q", "w", 10, (const int64_t[]){b, a, c}, 3), 3);
}

static void paused_queue(void **state)
{
    enq(state, "pq", "x");
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_PAUSED;
    o.paused = 1;
    OK(tq_queue_set(DB, "pq", &o));
    assert_int_equal(claim_n(state, "pq", 1), 0);
    o.paused = 0;
    OK(tq_queue_set(DB, "pq", &o));
    assert_int_equal(claim_n(state, "pq", 1), 1);
}

static void queue_settings_round_trip(void **state)
{
    tq_queue_info q;
    enq(state, "auto", "x"); /* created with defaults on first enqueue */
    OK(tq_queue_get(&q, DB, "auto"));
    assert_int_equal(q.order, TQ_FIFO);
    assert_int_equal(q.lease_us, 30000000);
    assert_int_equal(q.max_attempts, 3);
    assert_int_equal(q.keep_done, 1);
    assert_int_equal(q.paused, 0);
    set_queue(state, "auto", TQ_SET_ORDER | TQ_SET_LEASE | TQ_SET_BACKOFF, TQ_LIFO,
              90000000, 0, 0, 5000000);
    OK(tq_queue_get(&q, DB, "auto"));
    assert_int_equal(q.order, TQ_LIFO);
    assert_int_equal(q.lease_us, 90000000);
    assert_int_equal(q.max_attempts, 3); /* untouched */
    assert_int_equal(q.backoff_base_us, 0);
    assert_int_equal(q.backoff_cap_us, 5000000);
    assert_int_equal(tq_queue_get(&q, DB, "nope"), TQ_ENOTFOUND);
    tq_queue_info *v;
    size_t n;
    OK(tq_queue_list(&v, &n, DB));
    assert_int_equal(n, 1);
    tq_free(v);
}

/* ---- concurrency limits ---------------------------------------------------- */

static void set_limits(void **state, const char *queue, int max_running, int per_group)
{
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_MAX_RUNNING | TQ_SET_MAX_RUNNING_PER_GROUP;
    o.max_running = max_running;
    o.max_running_per_group = per_group;
    OK(tq_queue_set(DB, queue, &o));
}

static int64_t enq_group(void **state, const char *queue, const char *payload,
                         const char *group)
{
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t id = 0;
    eo.group = group;
    OK(tq_job_enqueue(&id, DB, queue, payload, strlen(payload), &eo));
    return id;
}

/* Claims up to max and returns the payloads claimed, in order, joined by
 * spaces (the jobs stay running). */
static const char *claimed(void **state, const char *queue, size_t max, tq_job **keep,
                           size_t *nkeep)
{
    static char out[256];
    tq_job *jobs = NULL;
    size_t n = 0;
    OK(tq_job_claim(&jobs, &n, DB, queue, "w", max));
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(out, " ");
        strncat(out, (char *)jobs[i].payload, 16);
        keep[(*nkeep)++] = get(state, jobs[i].id);
    }
    tq_job_array_free(jobs, n);
    return out;
}

/* The store keeps the limits, whoever claims: every way a job stops
 * running (done, failed, released, cancelled, rescued) frees its place. */
static void concurrency_limits(void **state)
{
    tq_job *run[48];
    size_t nrun = 0;
    tq_queue_info q;

    /* Per queue (with the shortest lease, for the rescue below). */
    set_queue(state, "lim", TQ_SET_LEASE, TQ_FIFO, 1000000, 0, 0, 0);
    set_limits(state, "lim", 3, 0);
    OK(tq_queue_get(&q, DB, "lim"));
    assert_int_equal(q.max_running, 3);
    assert_int_equal(q.max_running_per_group, 0);
    enq_numbered(state, "lim", "j", 8);
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "j1 j2 j3");
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "");
    OK(tq_job_complete(DB, run[0]));
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "j4");
    OK(tq_job_release(DB, run[1]));
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "j2");
    OK(tq_job_cancel(DB, run[2]->id));
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "j5");
    OK(tq_job_fail(DB, run[3], "boom")); /* j4 back after its backoff */
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "j6");
    int64_t n = 0;
    sleep_ms(1100);
    OK(tq_rescue_expired(&n, DB)); /* j2, j5, j6 back to ready */
    assert_int_equal(n, 3);
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "j2 j5 j6");
    set_limits(state, "lim", 0, 0); /* no limit: the rest at once (j4 due by now) */
    assert_string_equal(claimed(state, "lim", 10, run, &nrun), "j7 j8 j4");

    /* Per group, a batch counting its own picks; jobs without a group
     * count against max_running only. */
    set_limits(state, "grp", 0, 1);
    enq_group(state, "grp", "a1", "A");
    enq_group(state, "grp", "a2", "A");
    enq_group(state, "grp", "b1", "B");
    enq(state, "grp", "n1");
    enq_group(state, "grp", "a3", "A");
    enq_group(state, "grp", "c1", "C");
    enq(state, "grp", "n2");
    size_t first = nrun;
    assert_string_equal(claimed(state, "grp", 10, run, &nrun), "a1 b1 n1 c1 n2");
    assert_string_equal(run[first]->group, "A");
    assert_null(run[first + 2]->group);
    assert_string_equal(claimed(state, "grp", 10, run, &nrun), "");
    OK(tq_job_complete(DB, run[first + 1])); /* b1: A is still busy */
    assert_string_equal(claimed(state, "grp", 10, run, &nrun), "");
    OK(tq_job_complete(DB, run[first])); /* a1 */
    assert_string_equal(claimed(state, "grp", 10, run, &nrun), "a2");

    /* A full group's jobs fill the head of the queue (room + 64 ready rows,
     * CLAIM_GROUPS): the claim finds the other groups' first jobs behind
     * them, as many as fit each group; a job without a group behind them
     * waits (it has no index of its own). */
    set_limits(state, "flood", 0, 2);
    for (int i = 0; i < 100; i++)
        enq_group(state, "flood", "f", "F");
    enq_group(state, "flood", "b1", "B");
    enq(state, "flood", "n1");
    enq_group(state, "flood", "c1", "C");
    enq_group(state, "flood", "c2", "C");
    enq_group(state, "flood", "c3", "C");
    assert_string_equal(claimed(state, "flood", 2, run, &nrun), "f f");
    assert_string_equal(claimed(state, "flood", 10, run, &nrun), "b1 c1 c2");
    assert_string_equal(claimed(state, "flood", 10, run, &nrun), "");

    /* Both: two per group, three in all. */
    set_limits(state, "both", 3, 2);
    enq_group(state, "both", "a1", "A");
    enq_group(state, "both", "a2", "A");
    enq_group(state, "both", "a3", "A");
    enq_group(state, "both", "b1", "B");
    enq_group(state, "both", "b2", "B");
    assert_string_equal(claimed(state, "both", 10, run, &nrun), "a1 a2 b1");
    assert_string_equal(claimed(state, "both", 10, run, &nrun), "");
    set_limits(state, "both", 4, 2);
    assert_string_equal(claimed(state, "both", 10, run, &nrun), "b2");

    /* A batch enqueue carries the group; bad limits and groups are refused. */
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    tq_payload items[2] = {{"x", 1}, {"y", 1}};
    int64_t ids[2];
    eo.group = "G";
    OK(tq_job_enqueue_batch(ids, DB, "batch", items, 2, &eo));
    tq_job *j = get(state, ids[1]);
    assert_string_equal(j->group, "G");
    tq_job_free(j);
    char big[300];
    memset(big, 'g', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    eo.group = big;
    assert_int_equal(tq_job_enqueue(ids, DB, "batch", "z", 1, &eo), TQ_EINVAL);
    eo.group = "";
    assert_int_equal(tq_job_enqueue(ids, DB, "batch", "z", 1, &eo), TQ_EINVAL);
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_MAX_RUNNING;
    o.max_running = -1;
    assert_int_equal(tq_queue_set(DB, "batch", &o), TQ_EINVAL);
    OK(tq_queue_get(&q, DB, "batch"));
    assert_int_equal(q.max_running, 0);
    /* A caller built against the version-1 struct never sets a limit. */
    o.version = 1;
    o.max_running = 5;
    OK(tq_queue_set(DB, "batch", &o));
    OK(tq_queue_get(&q, DB, "batch"));
    assert_int_equal(q.max_running, 0);

    for (size_t i = 0; i < nrun; i++)
        tq_job_free(run[i]);
}

/* ---- rate limits ------------------------------------------------------------ */

static void set_rate(void **state, const char *queue, int64_t n, int64_t period_us)
{
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_RATE;
    o.rate_limit = n;
    o.rate_period_us = period_us;
    OK(tq_queue_set(DB, queue, &o));
}

/* The store keeps the rate, whoever claims: a claim takes the bucket's
 * whole tokens and no more, the bucket refills at its rate, ending a job
 * gives nothing back, and the rate combines with the other limits. */
static void rate_limits(void **state)
{
    tq_job *run[16];
    size_t nrun = 0;
    tq_queue_info q;

    /* 4 an hour: a burst of 1 (what 10 ms allow, at least 1), then 3 an
     * hour. */
    set_rate(state, "slow", 4, 3600 * 1000000LL);
    OK(tq_queue_get(&q, DB, "slow"));
    assert_int_equal(q.rate_limit, 4);
    assert_int_equal(q.rate_period_us, 3600 * 1000000LL);
    assert_int_equal(q.rate_burst, 1);
    enq_numbered(state, "slow", "r", 6);
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), "r1");
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), "");
    OK(tq_job_complete(DB, run[0])); /* a start is spent, done or not */
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), "");
    set_rate(state, "slow", 4, 3600 * 1000000LL); /* set again: no new burst */
    set_rate(state, "slow", 8, 3600 * 1000000LL); /* changed: none either */
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), "");
    /* With a concurrency limit too: the tighter of the two. */
    set_limits(state, "slow", 1, 0);
    set_rate(state, "slow", 0, 0);
    set_rate(state, "slow", 4, 3600 * 1000000LL); /* a new rate: a full bucket */
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), "r2");
    set_rate(state, "slow", 0, 0);
    set_rate(state, "slow", 4, 3600 * 1000000LL);
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), ""); /* r2 runs */
    OK(tq_job_complete(DB, run[1]));
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), "r3");
    set_limits(state, "slow", 0, 0);
    OK(tq_job_complete(DB, run[2]));
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), ""); /* no token */
    set_rate(state, "slow", 0, 0); /* no limit: the rest at once */
    OK(tq_queue_get(&q, DB, "slow"));
    assert_int_equal(q.rate_limit, 0);
    assert_string_equal(claimed(state, "slow", 10, run, &nrun), "r4 r5 r6");

    /* 1000 a second: a burst of 10 (10 ms of it), then 990 a second. */
    set_rate(state, "fast", 1000, 1000000);
    for (int i = 0; i < 60; i++)
        enq(state, "fast", "f");
    const int64_t t0 = clock_us(CLOCK_MONOTONIC);
    assert_int_equal(claim_n(state, "fast", 50), 10);
    size_t again = claim_n(state, "fast", 50);
    const int64_t t1 = clock_us(CLOCK_MONOTONIC);
    assert_true(again <= (size_t)((t1 - t0) * 990 / 1000000 + 1));
    sleep_ms(30); /* refills the burst: never more than 10 at once */
    size_t later = claim_n(state, "fast", 50);
    assert_true(later >= 1 && later <= 10);

    /* Bad rates are refused, and change nothing. */
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_RATE;
    o.rate_limit = -1;
    o.rate_period_us = 1000000;
    assert_int_equal(tq_queue_set(DB, "fast", &o), TQ_EINVAL);
    o.rate_limit = 5;
    o.rate_period_us = 999; /* under 1 ms */
    assert_int_equal(tq_queue_set(DB, "fast", &o), TQ_EINVAL);
    o.rate_limit = 1000000001;
    o.rate_period_us = 1000000;
    assert_int_equal(tq_queue_set(DB, "fast", &o), TQ_EINVAL);
    OK(tq_queue_get(&q, DB, "fast"));
    assert_int_equal(q.rate_limit, 1000);
    assert_int_equal(q.rate_burst, 10);

    for (size_t i = 0; i < nrun; i++)
        tq_job_free(run[i]);
}

/* ---- periodic jobs ------------------------------------------------------------ */

/* Sleeps until just past the next whole second of the store's clock
 * (slots of @every 1s fall on whole seconds). */
static void sleep_past_second(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    sleep_ms((int)((1000000000L - t.tv_nsec) / 1000000) + 50);
}

static size_t jobs_of(void **state, const char *queue)
{
    tq_job *v;
    size_t n;
    tq_list_opts lo = TQ_LIST_OPTS_INIT;
    lo.queue = queue;
    OK(tq_job_list(&v, &n, DB, &lo));
    tq_job_array_free(v, n);
    return n;
}

typedef struct racer {
    const char *url;
    int64_t enqueued;
    int failed;
} racer;

/* Another process's worth of enqueuing: its own handle, running the
 * schedules as fast as it can for 2.5 s. */
static void *race_schedules(void *arg)
{
    racer *r = arg;
    tq *db = NULL;
    if (tq_open(&db, r->url, NULL)) {
        r->failed = 1;
        tq_close(db);
        return NULL;
    }
    const int64_t end = clock_us(CLOCK_MONOTONIC) + 2500000;
    while (clock_us(CLOCK_MONOTONIC) < end) {
        int64_t n = 0;
        int rc = tq_schedule_run(db, &n, NULL);
        if (rc && rc != TQ_EBUSY)
            r->failed = 1;
        r->enqueued += n;
        usleep(2000);
    }
    tq_close(db);
    return NULL;
}

/* Each slot once, however many run the schedules at once; only the most
 * recent slot missed; overlap skip; bad input stores nothing. */
static void periodic_jobs(void **state)
{
    tq_schedule_opts so = TQ_SCHEDULE_OPTS_INIT;
    tq_schedule *v;
    size_t n;
    int64_t enq = -1, next = -1;
    so.queue = "cron";
    so.spec = "@every 1s";
    so.payload = "tick";
    so.payload_len = 4;
    OK(tq_schedule_set(DB, "tick", &so));
    OK(tq_schedule_list(&v, &n, DB));
    assert_int_equal(n, 1);
    assert_string_equal(v[0].name, "tick");
    assert_string_equal(v[0].spec, "@every 1s");
    assert_string_equal(v[0].tz, "UTC");
    assert_int_equal(v[0].next_slot_us % 1000000, 0);
    assert_int_equal(v[0].last_job, 0);
    tq_schedule_array_free(v, n);

    /* Four handles race for 2.5 s: one job per slot passed, never two. */
    racer r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){((fx *)*state)->url, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, race_schedules, &r[i]), 0);
    }
    int64_t total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_false(r[i].failed);
        total += r[i].enqueued;
    }
    assert_true(total >= 2 && total <= 3);
    assert_int_equal(jobs_of(state, "cron"), (size_t)total);
    tq_job *j = claim1(state, "cron", "w");
    assert_string_equal((char *)j->payload, "tick");
    tq_job_free(j);

    /* Missed slots: two or three pass, one job, for the most recent. */
    OK(tq_schedule_run(DB, &enq, &next));
    sleep_ms(2600);
    OK(tq_schedule_run(DB, &enq, &next));
    assert_int_equal(enq, 1);
    assert_true(next > 0 && next <= 1000000);
    OK(tq_schedule_list(&v, &n, DB));
    assert_int_equal(v[0].next_slot_us - v[0].last_slot_us, 1000000);
    assert_true(v[0].last_job > 0);
    tq_schedule_array_free(v, n);

    /* Overlap skip: no job while the last one is ready or running. */
    so.queue = "skip";
    so.overlap_skip = 1;
    OK(tq_schedule_remove(DB, "tick"));
    OK(tq_schedule_set(DB, "tock", &so));
    sleep_past_second();
    OK(tq_schedule_run(DB, &enq, NULL));
    assert_int_equal(enq, 1);
    sleep_past_second();
    OK(tq_schedule_run(DB, &enq, NULL));
    assert_int_equal(enq, 0); /* the first is still ready */
    j = claim1(state, "skip", "w");
    sleep_past_second();
    OK(tq_schedule_run(DB, &enq, NULL));
    assert_int_equal(enq, 0); /* now running */
    OK(tq_job_complete(DB, j));
    tq_job_free(j);
    sleep_past_second();
    OK(tq_schedule_run(DB, &enq, NULL));
    assert_int_equal(enq, 1);
    assert_int_equal(jobs_of(state, "skip"), 2);

    /* Bad input: refused, nothing stored. */
    so.spec = "61 * * * *";
    assert_int_equal(tq_schedule_set(DB, "other", &so), TQ_EINVAL);
    so.spec = "* * 31 2 *";
    assert_int_equal(tq_schedule_set(DB, "other", &so), TQ_EINVAL);
    so.spec = "@daily";
    so.tz = "Nowhere/Atlantis";
    assert_int_equal(tq_schedule_set(DB, "other", &so), TQ_EINVAL);
    so.tz = "America/New_York";
    assert_int_equal(tq_schedule_set(DB, "no good", &so), TQ_EINVAL);
    so.queue = "bad queue";
    assert_int_equal(tq_schedule_set(DB, "other", &so), TQ_EINVAL);
    OK(tq_schedule_list(&v, &n, DB));
    assert_int_equal(n, 1);
    tq_schedule_array_free(v, n);
    so.queue = "q";
    OK(tq_schedule_set(DB, "other", &so));
    OK(tq_schedule_list(&v, &n, DB));
    assert_int_equal(n, 2);
    assert_string_equal(v[0].tz, "America/New_York");
    tq_schedule_array_free(v, n);
    OK(tq_schedule_remove(DB, "other"));
    assert_int_equal(tq_schedule_remove(DB, "other"), TQ_ENOTFOUND);
    OK(tq_schedule_remove(DB, "tock"));
    OK(tq_schedule_run(DB, &enq, &next));
    assert_int_equal(next, -1);
}

/* keep_done of queue: 0 deletes its jobs as they are done. */
static void set_keep_done(void **state, const char *queue, int keep)
{
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_KEEP_DONE;
    o.keep_done = keep;
    OK(tq_queue_set(DB, queue, &o));
}

static void delete_done_rows(void **state)
{
    set_keep_done(state, "tmp", 0);
    int64_t id = enq(state, "tmp", "x");
    run1(state, "tmp", "w", 0);
    tq_job *g = NULL;
    assert_int_equal(tq_job_get(&g, DB, id), TQ_ENOTFOUND);
}

static void payloads(void **state)
{
    /* Bytes, not strings: NULs and high bytes survive. */
    unsigned char bin[300];
    for (int i = 0; i < 300; i++)
        bin[i] = (unsigned char)(i * 7);
    int64_t id;
    OK(tq_job_enqueue(&id, DB, "bin", bin, sizeof bin, NULL));
    tq_job *j = claim1(state, "bin", "w");
    assert_int_equal(j->payload_len, sizeof bin);
    assert_memory_equal(j->payload, bin, sizeof bin);
    tq_job_free(j);
    OK(tq_job_enqueue(&id, DB, "bin", "", 0, NULL)); /* empty is fine */

    /* The limit: exactly 1 MiB is accepted, one byte more is not. */
    char *big = calloc(1, TQ_PAYLOAD_MAX_DEFAULT + 1);
    OK(tq_job_enqueue(&id, DB, "big", big, TQ_PAYLOAD_MAX_DEFAULT, NULL));
    assert_int_equal(
        tq_job_enqueue(&id, DB, "big2", big, TQ_PAYLOAD_MAX_DEFAULT + 1, NULL),
        TQ_ETOOBIG);
    assert_non_null(strstr(tq_errmsg(DB), "limit"));
    tq_payload items[2] = {{"ok", 2}, {big, TQ_PAYLOAD_MAX_DEFAULT + 1}};
    assert_int_equal(tq_job_enqueue_batch(NULL, DB, "big3", items, 2, NULL), TQ_ETOOBIG);
    free(big);
    tq_queue_info q;
    assert_int_equal(tq_queue_get(&q, DB, "big2"), TQ_ENOTFOUND); /* nothing written */
    assert_int_equal(tq_queue_get(&q, DB, "big3"), TQ_ENOTFOUND);
}

static void batch_enqueue(void **state)
{
    tq_payload items[500];
    char buf[500][8];
    int64_t ids[500];
    for (int i = 0; i < 500; i++) {
        snprintf(buf[i], sizeof buf[i], "%d", i);
        items[i] = (tq_payload){buf[i], strlen(buf[i])};
    }
    OK(tq_job_enqueue_batch(ids, DB, "batch", items, 500, NULL));
    for (int i = 1; i < 500; i++)
        assert_true(ids[i] > ids[i - 1]);
    tq_job *j = get(state, ids[123]);
    assert_string_equal((char *)j->payload, "123");
    tq_job_free(j);
    assert_int_equal(claim_n(state, "batch", 1000), 500);
}

/* ---- management -------------------------------------------------------------- */

static void cancel_and_retry(void **state)
{
    int64_t a = enq(state, "m", "a"), b = enq(state, "m", "b");
    OK(tq_job_cancel(DB, a));
    tq_job *g = get(state, a);
    assert_int_equal(g->state, TQ_CANCELLED);
    assert_true(g->finished_at > 0);
    tq_job_free(g);
    assert_int_equal(tq_job_cancel(DB, a), TQ_ESTATE);
    assert_int_equal(tq_job_cancel(DB, 999999), TQ_ENOTFOUND);
    assert_int_equal(tq_job_retry(DB, b), TQ_ESTATE); /* ready: nothing to retry */
    assert_int_equal(tq_job_retry(DB, 999999), TQ_ENOTFOUND);

    /* Cancelling a running job fences its worker out. */
    tq_job *j = claim1(state, "m", "w");
    assert_int_equal(j->id, b);
    OK(tq_job_cancel(DB, b));
    assert_int_equal(tq_job_complete(DB, j), TQ_ELOST);
    assert_int_equal(state_of(state, b), TQ_CANCELLED);
    tq_job_free(j);

    OK(tq_job_retry(DB, a));
    g = get(state, a);
    assert_int_equal(g->state, TQ_READY);
    assert_int_equal(g->attempts, 0);
    assert_int_equal(g->finished_at, 0);
    tq_job_free(g);
    assert_int_equal(claim_n(state, "m", 10), 1);
}

static void retry_all_dead(void **state)
{
    set_queue(state, "x", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    set_queue(state, "y", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    const char *qs[] = {"x", "x", "y"};
    for (int i = 0; i < 3; i++) {
        enq(state, qs[i], "p");
        tq_job *j = claim1(state, qs[i], "w");
        OK(tq_job_fail(DB, j, "e"));
        tq_job_free(j);
    }
    int64_t n = 0;
    OK(tq_job_retry_dead(&n, DB, "x"));
    assert_int_equal(n, 2);
    OK(tq_job_retry_dead(&n, DB, NULL));
    assert_int_equal(n, 1);
    OK(tq_job_retry_dead(&n, DB, NULL));
    assert_int_equal(n, 0);
}

static void prune_finished(void **state)
{
    set_queue(state, "q", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    int64_t done = enq(state, "q", "d"), dead = enq(state, "q", "x"),
            ready = enq(state, "q", "r");
    tq_job *j = claim1(state, "q", "w");
    OK(tq_job_complete(DB, j));
    tq_job_free(j);
    j = claim1(state, "q", "w");
    OK(tq_job_fail(DB, j, "e"));
    tq_job_free(j);
    int64_t n = -1;
    OK(tq_job_prune(&n, DB, 3600000000LL, 1u << TQ_DONE)); /* none that old */
    assert_int_equal(n, 0);
    sleep_ms(5);
    OK(tq_job_prune(&n, DB, 0, 1u << TQ_DEAD));
    assert_int_equal(n, 1);
    tq_job *g = NULL;
    assert_int_equal(tq_job_get(&g, DB, dead), TQ_ENOTFOUND);
    assert_int_equal(state_of(state, done), TQ_DONE);
    OK(tq_job_prune(&n, DB, 0, (1u << TQ_DONE) | (1u << TQ_CANCELLED)));
    assert_int_equal(n, 1);
    assert_int_equal(state_of(state, ready), TQ_READY); /* never pruned */
    assert_int_equal(tq_job_prune(&n, DB, 0, 1u << TQ_READY), TQ_EINVAL);
}

static void stats_and_list(void **state)
{
    for (int i = 0; i < 4; i++)
        enq(state, "s", "x");
    enq(state, "t", "y");
    for (int i = 0; i < 2; i++)
        run1(state, "s", "w", 2);
    tq_job *running = claim1(state, "s", "busy-worker");
    tq_stats st;
    OK(tq_stats_get(&st, DB, "s"));
    assert_int_equal(st.count[TQ_READY], 1);
    assert_int_equal(st.count[TQ_RUNNING], 1);
    assert_int_equal(st.count[TQ_DONE], 2);
    assert_int_equal(st.done_last_minute, 2);
    assert_int_equal(st.recent, 2);
    assert_true(st.p50_us >= 2000 && st.max_us >= st.p50_us);
    assert_int_equal(st.nlongest, 1);
    assert_int_equal(st.longest[0].id, running->id);
    assert_string_equal(st.longest[0].worker, "busy-worker");
    OK(tq_stats_get(&st, DB, NULL));
    assert_int_equal(st.count[TQ_READY], 2);

    tq_list_opts lo = TQ_LIST_OPTS_INIT;
    tq_job *v;
    size_t n;
    lo.state = TQ_DONE;
    OK(tq_job_list(&v, &n, DB, &lo));
    assert_int_equal(n, 2);
    assert_true(v[0].id > v[1].id); /* newest first */
    tq_job_array_free(v, n);
    lo.state = -1;
    lo.queue = "t";
    OK(tq_job_list(&v, &n, DB, &lo));
    assert_int_equal(n, 1);
    assert_string_equal((char *)v[0].payload, "y");
    tq_job_array_free(v, n);
    lo.queue = NULL;
    lo.limit = 3;
    OK(tq_job_list(&v, &n, DB, &lo));
    assert_int_equal(n, 3);
    tq_job_array_free(v, n);
    tq_job_free(running);
}

/* ---- monitoring (what tq serve reads) ------------------------------------------ */

static int64_t count_of(void **state, tq_state st, int by_worker, const char *name,
                        tq_count *out)
{
    tq_count *v;
    size_t n;
    int64_t found = 0;
    OK(tq_count_jobs(&v, &n, DB, st, by_worker));
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0) {
            found = v[i].n;
            if (out)
                *out = v[i];
        }
    tq_free(v);
    return found;
}

/* Every finished job from position (*at, *id) on, limit at a time, into ids. */
static size_t read_all_finished(void **state, int64_t *at, int64_t *id, int64_t settle_us,
                                size_t limit, int64_t *ids, tq_state *states, size_t cap)
{
    size_t got = 0;
    for (;;) {
        tq_finished *v;
        size_t n;
        OK(tq_finished_since(&v, &n, DB, at, id, settle_us, limit));
        for (size_t i = 0; i < n; i++) {
            assert_true(got < cap);
            if (got) /* in (finished_at, id) order, each once */
                assert_true(ids[got - 1] != v[i].id);
            ids[got] = v[i].id;
            states[got++] = v[i].state;
            assert_string_equal(v[i].queue, "m");
            if (v[i].state == TQ_DONE)
                assert_true(v[i].duration_us >= 2000);
        }
        tq_free(v);
        if (n < limit)
            return got;
    }
}

static void monitoring(void **state)
{
    set_queue(state, "m", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    int64_t ids[6];
    for (int i = 0; i < 6; i++)
        ids[i] = enq(state, "m", "x");
    tq_job *running = claim1(state, "m", "w1");
    for (int i = 0; i < 2; i++)
        run1(state, "m", "w2", 2);
    tq_job *j = claim1(state, "m", "w2");
    OK(tq_job_fail(DB, j, "boom"));
    tq_job_free(j);
    OK(tq_job_cancel(DB, ids[4]));
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.delay_us = 3600000000LL;
    int64_t later;
    OK(tq_job_enqueue(&later, DB, "m", "l", 1, &o));
    tq_enqueue_opts c = TQ_ENQUEUE_OPTS_INIT;
    c.after = &ids[5];
    c.nafter = 1;
    int64_t child;
    OK(tq_job_enqueue(&child, DB, "n", "c", 1, &c));

    tq_count rd;
    assert_int_equal(count_of(state, TQ_READY, 0, "m", &rd), 2);
    assert_int_equal(rd.delayed, 1);
    assert_true(rd.oldest_due_us >= 0 && rd.oldest_due_us < 60000000);
    assert_int_equal(count_of(state, TQ_RUNNING, 0, "m", NULL), 1);
    assert_int_equal(count_of(state, TQ_RUNNING, 1, "w1", NULL), 1);
    assert_int_equal(count_of(state, TQ_RUNNING, 1, "w2", NULL), 0);
    assert_int_equal(count_of(state, TQ_WAITING, 0, "n", NULL), 1);
    assert_int_equal(count_of(state, TQ_WAITING, 0, "m", NULL), 0);
    assert_int_equal(count_of(state, TQ_DONE, 0, "m", NULL), 2);
    assert_int_equal(count_of(state, TQ_DEAD, 0, "m", NULL), 1);
    assert_int_equal(count_of(state, TQ_CANCELLED, 0, "m", NULL), 1);
    tq_count *v;
    size_t n;
    assert_int_equal(tq_count_jobs(&v, &n, DB, TQ_DONE, 1), TQ_EINVAL);
    assert_int_equal(tq_count_jobs(&v, &n, DB, (tq_state)99, 0), TQ_EINVAL);

    /* What finished: all four, in order, then nothing more until another. */
    int64_t at = 0, after = 0, got[16];
    tq_state sts[16];
    size_t k = read_all_finished(state, &at, &after, 0, 100, got, sts, 16);
    assert_int_equal(k, 4);
    size_t by[TQ_STATE_COUNT] = {0};
    for (size_t i = 0; i < k; i++)
        by[sts[i]]++;
    assert_int_equal(by[TQ_DONE], 2);
    assert_int_equal(by[TQ_DEAD], 1);
    assert_int_equal(by[TQ_CANCELLED], 1);
    assert_int_equal(read_all_finished(state, &at, &after, 0, 100, got, sts, 16), 0);
    sleep_ms(2);
    OK(tq_job_complete(DB, running));
    assert_int_equal(read_all_finished(state, &at, &after, 0, 100, got, sts, 16), 1);
    assert_int_equal(got[0], running->id);
    tq_job_free(running);
    /* One at a time: the same five, in the same order as all at once. */
    int64_t all[16], one[16];
    at = after = 0;
    assert_int_equal(read_all_finished(state, &at, &after, 0, 100, all, sts, 16), 5);
    at = after = 0;
    assert_int_equal(read_all_finished(state, &at, &after, 0, 1, one, sts, 16), 5);
    assert_memory_equal(all, one, 5 * sizeof all[0]);
    /* Not settled yet: nothing, and the next read still finds them. */
    at = after = 0;
    assert_int_equal(
        read_all_finished(state, &at, &after, 3600000000LL, 100, got, sts, 16), 0);
    assert_int_equal(read_all_finished(state, &at, &after, 0, 100, got, sts, 16), 5);
    tq_finished *f;
    assert_int_equal(tq_finished_since(&f, &n, DB, &at, &after, -1, 1), TQ_EINVAL);

    /* A list pages by id. */
    tq_list_opts lo = TQ_LIST_OPTS_INIT;
    tq_job *jobs;
    lo.queue = "m";
    lo.limit = 4;
    OK(tq_job_list(&jobs, &n, DB, &lo));
    assert_int_equal(n, 4);
    lo.before_id = jobs[3].id;
    tq_job_array_free(jobs, n);
    OK(tq_job_list(&jobs, &n, DB, &lo));
    assert_int_equal(n, 3);
    assert_int_equal(jobs[0].id, ids[2]);
    assert_int_equal(jobs[2].id, ids[0]);
    tq_job_array_free(jobs, n);
}

/* ---- bad input changes nothing ---------------------------------------------- */

static void bad_input_rejected(void **state)
{
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    int64_t id;
    enq(state, "keep", "x");
    assert_int_equal(tq_queue_set(DB, "bad name", NULL), TQ_EINVAL);
    assert_int_equal(tq_queue_set(DB, "", NULL), TQ_EINVAL);
    o.set = TQ_SET_LEASE;
    o.lease_us = 0;
    assert_int_equal(tq_queue_set(DB, "keep", &o), TQ_EINVAL);
    o.set = TQ_SET_MAX_ATTEMPTS;
    o.max_attempts = 0;
    assert_int_equal(tq_queue_set(DB, "keep", &o), TQ_EINVAL);
    o.set = TQ_SET_BACKOFF;
    o.backoff_base_us = 10;
    o.backoff_cap_us = 5;
    assert_int_equal(tq_queue_set(DB, "keep", &o), TQ_EINVAL);
    o.set = TQ_SET_ORDER;
    o.order = (tq_order)7;
    assert_int_equal(tq_queue_set(DB, "keep", &o), TQ_EINVAL);
    assert_int_equal(tq_job_enqueue(&id, DB, "a/b", "x", 1, NULL), TQ_EINVAL);
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    eo.delay_us = -1;
    assert_int_equal(tq_job_enqueue(&id, DB, "keep", "x", 1, &eo), TQ_EINVAL);
    eo.delay_us = 0;
    eo.key = "";
    assert_int_equal(tq_job_enqueue(&id, DB, "keep", "x", 1, &eo), TQ_EINVAL);

    tq_queue_info *v;
    size_t n;
    OK(tq_queue_list(&v, &n, DB));
    assert_int_equal(n, 1);
    assert_int_equal(v[0].lease_us, 30000000);
    assert_int_equal(v[0].max_attempts, 3);
    assert_int_equal(v[0].order, TQ_FIFO);
    tq_free(v);
    tq_list_opts lo = TQ_LIST_OPTS_INIT;
    tq_job *jobs;
    OK(tq_job_list(&jobs, &n, DB, &lo));
    assert_int_equal(n, 1);
    tq_job_array_free(jobs, n);
}

static void open_errors(void **state)
{
    (void)state;
    tq *db = NULL;
    assert_int_equal(tq_open(&db, "mysql://h/x", NULL), TQ_EINVAL);
    assert_non_null(strstr(tq_errmsg(db), "unsupported"));
    tq_close(db);
    if (getenv("TQ_TEST_ENGINE") && strcmp(getenv("TQ_TEST_ENGINE"), "postgres") == 0)
        return;
    char path[128];
    struct stat st;
    /* No such directory. */
    snprintf(path, sizeof path, "%s/no/such/dir/x.db", tmpdir);
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    assert_int_equal(tq_open(&db, path, &o), TQ_ECONN);
    assert_non_null(strstr(tq_errmsg(db), path));
    tq_close(db);
    /* A missing store is not created by a non-init open. */
    snprintf(path, sizeof path, "%s/missing.db", tmpdir);
    assert_int_equal(tq_open(&db, path, NULL), TQ_ECONN);
    tq_close(db);
    assert_int_not_equal(stat(path, &st), 0);
    /* A store without the schema says so. */
    o.create = 1;
    snprintf(path, sizeof path, "%s/empty.db", tmpdir);
    assert_int_equal(tq_open(&db, path, &o), 0);
    tq_close(db);
    assert_int_equal(tq_open(&db, path, NULL), TQ_ESCHEMA);
    assert_non_null(strstr(tq_errmsg(db), "tq init"));
    tq_close(db);
    /* A new store is private to its owner. */
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
}

static void init_is_idempotent(void **state)
{
    int64_t id = enq(state, "q", "x");
    OK(tq_init(DB));
    OK(tq_init(DB));
    assert_int_equal(state_of(state, id), TQ_READY);
}

/* ---- the worker pool ---------------------------------------------------------- */

/* The options of a worker that drains the one queue queues[0] with
 * handler (handler_ud ud), concurrency jobs at once (0: 1). */
static tq_worker_opts drainer(const char *const *queues, int concurrency,
                              tq_handler_fn handler, void *ud)
{
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.queues = queues;
    o.nqueues = 1;
    o.concurrency = concurrency;
    o.drain = 1;
    o.handler = handler;
    o.handler_ud = ud;
    return o;
}

/* Runs a worker with opts o until it returns (o->drain); its counters. */
static tq_worker_counters run_counted(void **state, const tq_worker_opts *o)
{
    tq_worker *w;
    tq_worker_counters k;
    OK(tq_worker_new(&w, DB, o));
    OK(tq_worker_run(w));
    tq_worker_counters_get(&k, w);
    tq_worker_free(w);
    return k;
}

#define POOL_JOBS 400
typedef struct pool_ctx {
    int64_t first;
    _Atomic int runs[POOL_JOBS];
    _Atomic int fail_first; /* fail attempt 1 of every job id % 10 == 0 */
} pool_ctx;

static int pool_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    pool_ctx *c = ud;
    int64_t i = job->id - c->first;
    if (i >= 0 && i < POOL_JOBS)
        atomic_fetch_add(&c->runs[i], 1);
    if (atomic_load(&c->fail_first) && i % 10 == 0 && job->attempts == 1) {
        snprintf(err, errlen, "first attempt of %lld fails", (long long)job->id);
        return 1;
    }
    return 0;
}

static void worker_pool_callbacks(void **state)
{
    static pool_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    atomic_store(&ctx.fail_first, 1);
    set_queue(state, "pool", TQ_SET_BACKOFF, TQ_FIFO, 0, 0, 0, 0);
    int64_t ids[POOL_JOBS];
    enq_batch(state, ids, "pool", "p", POOL_JOBS);
    ctx.first = ids[0];

    const char *queues[] = {"pool"};
    tq_worker_opts o = drainer(queues, 4, pool_handler, &ctx);
    o.name = "pool-worker";
    tq_worker_counters k = run_counted(state, &o);
    for (int i = 0; i < POOL_JOBS; i++)
        assert_int_equal(atomic_load(&ctx.runs[i]), i % 10 == 0 ? 2 : 1);
    assert_int_equal(k.done, POOL_JOBS);
    assert_int_equal(k.failed, POOL_JOBS / 10);
    assert_int_equal(k.retried, POOL_JOBS / 10); /* each failed once, then was done */
    assert_int_equal(k.dead + k.discarded + k.snoozed, 0);
    assert_int_equal(k.lost, 0);
    tq_stats st;
    OK(tq_stats_get(&st, DB, "pool"));
    assert_int_equal(st.count[TQ_DONE], POOL_JOBS);
    tq_job *j = get(state, ids[10]);
    assert_int_equal(j->attempts, 2);
    assert_string_equal(j->worker, "pool-worker");
    tq_job_free(j);
}

static int failing_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    (void)ud;
    snprintf(err, errlen, "attempt %d fails", job->attempts);
    return 1;
}

/* A job that fails for good counts as retried until its last attempt, and
 * then as dead (tq_worker_counters). */
static void worker_counts_dead(void **state)
{
    set_queue(state, "doomed", TQ_SET_MAX_ATTEMPTS | TQ_SET_BACKOFF, TQ_FIFO, 0, 2, 0, 0);
    int64_t id;
    for (int i = 0; i < 3; i++)
        OK(tq_job_enqueue(&id, DB, "doomed", "p", 1, NULL));
    const char *queues[] = {"doomed"};
    tq_worker_opts o = drainer(queues, 0, failing_handler, NULL);
    tq_worker_counters k = run_counted(state, &o);
    assert_int_equal(k.retried, 3);
    assert_int_equal(k.dead, 3);
    assert_int_equal(k.failed, 6);
    assert_int_equal(k.done + k.discarded + k.snoozed, 0);
}

static int ok_handler(void *ud, const tq_job *job, char *err, size_t errlen);

/* Whether tq_worker_list has a worker named name. */
static int listed(void **state, const char *name)
{
    tq_worker_info *v;
    size_t n;
    int found = 0;
    OK(tq_worker_list(&v, &n, DB));
    for (size_t i = 0; i < n; i++)
        found |= strcmp(v[i].name, name) == 0;
    tq_free(v);
    return found;
}

/* A worker's start forgets workers stopped longer than forget_stopped_us
 * ago (default a day; -1 never), and no live one. */
static void worker_forgets_stopped(void **state)
{
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.handler = ok_handler;
    o.name = "gone";
    tq_worker *w, *live;
    OK(tq_worker_new(&w, DB, &o));
    tq_worker_free(w); /* stopped */
    o.name = "live";
    OK(tq_worker_new(&live, DB, &o)); /* the default: a day */
    sleep_ms(20);
    assert_true(listed(state, "gone"));
    o.name = "keeper";
    o.forget_stopped_us = -1;
    OK(tq_worker_new(&w, DB, &o));
    tq_worker_free(w);
    assert_true(listed(state, "gone"));
    sleep_ms(20);
    o.name = "sweeper";
    o.forget_stopped_us = 10000; /* 10 ms */
    OK(tq_worker_new(&w, DB, &o));
    assert_false(listed(state, "gone"));
    assert_false(listed(state, "keeper"));
    assert_true(listed(state, "live")); /* alive: never */
    tq_worker_free(w);
    tq_worker_free(live);
    o.forget_stopped_us = -2;
    assert_int_equal(tq_worker_new(&w, DB, &o), TQ_EINVAL);
}

/* C handlers say the same as a command's control channel (tq_handler_*):
 * of 60 jobs, every third snoozes once (and then runs again, done), every
 * fifth that does not snooze is discarded although it returns 0, every job
 * reports progress; a call from outside a handler, or for another job, is
 * refused. */
#define WORD_JOBS 60
typedef struct word_ctx {
    int64_t first;
    _Atomic int runs[WORD_JOBS];
    _Atomic int refused; /* calls that were refused as they should be */
} word_ctx;

static int word_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    word_ctx *c = ud;
    (void)err, (void)errlen;
    int64_t i = job->id - c->first;
    if (i < 0 || i >= WORD_JOBS)
        return 1;
    int run = atomic_fetch_add(&c->runs[i], 1);
    tq_job other = *job;
    if (tq_handler_progress(&other, 1, NULL) == TQ_EINVAL &&
        tq_handler_progress(job, 101, NULL) == TQ_EINVAL)
        atomic_fetch_add(&c->refused, 1);
    char text[32];
    snprintf(text, sizeof text, "job %lld", (long long)job->id);
    if (tq_handler_progress(job, 50, "half") || tq_handler_progress(job, 90, text))
        return 1;
    if (i % 3 == 0 && run == 0)
        return tq_handler_snooze(job, 0) ? 1 : 0;
    if (i % 3 != 0 && i % 5 == 0)
        return tq_handler_discard(job, "not wanted") ? 1 : 0;
    return 0;
}

/* A callback finds its run's deadline (tq_handler_deadline): the job's own
 * timeout, else its queue's, else the worker's, from the handler's start;
 * 0 with none, and for a job it is not running. */
typedef struct deadline_ctx {
    int64_t own, plain;                   /* the two jobs */
    _Atomic int64_t left_own, left_plain; /* deadline - now, in the handler */
    _Atomic int foreign;                  /* the deadline of a copy: 0 */
} deadline_ctx;

static int deadline_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    deadline_ctx *c = ud;
    (void)err, (void)errlen;
    const int64_t d = tq_handler_deadline(job), now = clock_us(CLOCK_REALTIME);
    tq_job copy = *job;
    if (tq_handler_deadline(&copy) != 0)
        atomic_fetch_add(&c->foreign, 1);
    atomic_store(job->id == c->own ? &c->left_own : &c->left_plain, d ? d - now : 0);
    return 0;
}

static void run_deadlines(void **state, deadline_ctx *c, const char *queue,
                          int64_t worker_timeout_us)
{
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    eo.timeout_us = 5000000;
    OK(tq_job_enqueue(&c->own, DB, queue, "own", 3, &eo));
    c->plain = enq(state, queue, "plain");
    atomic_store(&c->left_own, -1);
    atomic_store(&c->left_plain, -1);
    const char *queues[] = {queue};
    tq_worker_opts o = drainer(queues, 2, deadline_handler, c);
    o.timeout_us = worker_timeout_us;
    tq_worker_counters k = run_counted(state, &o);
    assert_int_equal(k.done, 2);
    assert_int_equal(atomic_load(&c->foreign), 0);
}

static void handler_deadlines(void **state)
{
    static deadline_ctx c;
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_TIMEOUT;
    qo.timeout_us = 2000000;
    OK(tq_queue_set(DB, "dl", &qo));
    run_deadlines(state, &c, "dl", 3000000); /* the queue's over the worker's */
    assert_in_range(atomic_load(&c.left_own), 4000000, 5000000);
    assert_in_range(atomic_load(&c.left_plain), 1000000, 2000000);
    run_deadlines(state, &c, "dl_none", 3000000); /* the worker's */
    assert_in_range(atomic_load(&c.left_own), 4000000, 5000000);
    assert_in_range(atomic_load(&c.left_plain), 2000000, 3000000);
    run_deadlines(state, &c, "dl_none", 0); /* none */
    assert_in_range(atomic_load(&c.left_own), 4000000, 5000000);
    assert_int_equal(atomic_load(&c.left_plain), 0);
    tq_job fake = {.id = c.own};
    assert_int_equal(tq_handler_deadline(&fake), 0); /* not in a handler */
}

static void worker_pool_handler_words(void **state)
{
    static word_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    int64_t ids[WORD_JOBS];
    enq_batch(state, ids, "words", "w", WORD_JOBS);
    ctx.first = ids[0];
    tq_job fake = {.id = ids[0]};
    assert_int_equal(tq_handler_snooze(&fake, 0), TQ_EINVAL); /* not in a handler */

    const char *queues[] = {"words"};
    tq_worker_opts o = drainer(queues, 4, word_handler, &ctx);
    tq_worker_counters k = run_counted(state, &o);
    /* Each end counted as what it was: 20 snoozes (i % 3 == 0), 8
     * discards (i % 5 == 0 but not i % 3 == 0), the rest and the snoozed
     * ones' second runs done. */
    assert_int_equal(k.snoozed, 20);
    assert_int_equal(k.discarded, 8);
    assert_int_equal(k.failed, 8);
    assert_int_equal(k.retried + k.dead, 0);
    assert_int_equal(k.done, WORD_JOBS - 8);
    assert_int_equal(k.released, 20);
    int runs = 0;
    for (int i = 0; i < WORD_JOBS; i++) {
        tq_job *j = get(state, ids[i]);
        const int snoozed = i % 3 == 0, discarded = !snoozed && i % 5 == 0;
        runs += atomic_load(&ctx.runs[i]);
        assert_int_equal(atomic_load(&ctx.runs[i]), snoozed ? 2 : 1);
        assert_int_equal(j->snoozes, snoozed);
        assert_int_equal(j->attempts, 1);
        assert_int_equal(j->state, discarded ? TQ_DEAD : TQ_DONE);
        if (discarded)
            assert_string_equal(j->last_error, "not wanted");
        char text[32];
        snprintf(text, sizeof text, "job %lld", (long long)j->id);
        assert_int_equal(j->progress, 90);
        assert_string_equal(j->progress_text, text);
        tq_job_free(j);
    }
    assert_int_equal(atomic_load(&ctx.refused), runs);
}

/* A worker that cannot reach the store starts no held job: a held job
 * starts only while a third of its lease is surely left, and only while the
 * store said its queue's settings (not paused) within SETTINGS_FRESH_US.
 * The store is locked by another connection for longer than the lease while
 * slow jobs are held: none starts during the lock; they go back unstarted,
 * and run once, after it. */
#define HOLD_QUICK 40
#define HOLD_SLOW  4
typedef struct hold_ctx {
    int64_t first;
    _Atomic int runs[HOLD_QUICK + HOLD_SLOW];
    _Atomic int64_t slow_started[HOLD_SLOW];
} hold_ctx;

static int hold_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    hold_ctx *c = ud;
    (void)err, (void)errlen;
    int64_t i = job->id - c->first;
    if (i < 0 || i >= HOLD_QUICK + HOLD_SLOW)
        return 1;
    atomic_fetch_add(&c->runs[i], 1);
    if (i >= HOLD_QUICK) {
        atomic_store(&c->slow_started[i - HOLD_QUICK], clock_us(CLOCK_REALTIME));
        sleep_ms(1500);
    }
    return 0;
}

typedef struct locker {
    const char *url;
    int ms;
    int64_t from, to; /* wall clock of the lock */
    int ok;
} locker;

/* Holds the store's jobs table locked for l->ms from another connection,
 * as any other program could. */
static void *lock_store(void *arg)
{
    locker *l = arg;
    const char *schema = strstr(l->url, "tq_schema=");
    if (schema) {
        char conninfo[512], sql[160];
        snprintf(conninfo, sizeof conninfo, "%s", getenv("TQ_TEST_PG_URL"));
        snprintf(sql, sizeof sql, "BEGIN; LOCK TABLE %s.jobs IN ACCESS EXCLUSIVE MODE",
                 schema + 10);
        PGconn *pg = PQconnectdb(conninfo);
        PGresult *r = PQexec(pg, sql);
        l->ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        l->from = clock_us(CLOCK_REALTIME);
        sleep_ms(l->ms);
        l->to = clock_us(CLOCK_REALTIME);
        PQclear(PQexec(pg, "COMMIT"));
        PQfinish(pg);
    } else {
        sqlite3 *db = NULL;
        l->ok = sqlite3_open(l->url, &db) == SQLITE_OK &&
                sqlite3_busy_timeout(db, 5000) == 0 &&
                sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK;
        l->from = clock_us(CLOCK_REALTIME);
        sleep_ms(l->ms);
        l->to = clock_us(CLOCK_REALTIME);
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(db);
    }
    return NULL;
}

typedef struct run_args {
    tq_worker *w;
    int rc;
} run_args;

static void *run_worker(void *arg)
{
    run_args *a = arg;
    a->rc = tq_worker_run(a->w);
    return NULL;
}

/* A worker of every queue (tq_worker_opts.all_queues) runs the jobs of
 * every queue once, one made while it runs too, keeps a queue's limit and
 * leaves a paused queue alone; it cannot also be given queues. */
#define ALLQ_JOBS 160
typedef struct allq_ctx {
    _Atomic int runs[ALLQ_JOBS + 1]; /* by id: a fresh store's start at 1 */
    _Atomic int lim_running, lim_most;
} allq_ctx;

static int allq_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    allq_ctx *c = ud;
    (void)err;
    (void)errlen;
    if (job->id >= 1 && job->id <= ALLQ_JOBS)
        atomic_fetch_add(&c->runs[job->id], 1);
    if (strcmp(job->queue, "aq-lim") == 0) {
        int now = atomic_fetch_add(&c->lim_running, 1) + 1;
        for (int most = atomic_load(&c->lim_most); now > most;)
            if (atomic_compare_exchange_weak(&c->lim_most, &most, now))
                break;
        sleep_ms(2);
        atomic_fetch_sub(&c->lim_running, 1);
    }
    return 0;
}

/* Waits up to 30 s until queue q of db has n jobs done. */
static void wait_done(tq *db, const char *q, int64_t n)
{
    tq_stats st = {0};
    for (int i = 0; i < 3000; i++) {
        OK_ON(db, tq_stats_get(&st, db, q));
        if (st.count[TQ_DONE] >= n)
            break;
        sleep_ms(10);
    }
    assert_int_equal(st.count[TQ_DONE], n);
}

static void worker_all_queues(void **state)
{
    static allq_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    fx *f = *state;
    int64_t id;
    static const struct {
        const char *queue;
        int jobs;
    } load[] = {{"aq-a", 40}, {"aq-b", 40}, {"aq-lim", 30}, {"aq-paused", 5}};
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_MAX_RUNNING;
    qo.max_running = 1;
    OK(tq_queue_set(DB, "aq-lim", &qo));
    qo.set = TQ_SET_PAUSED;
    qo.paused = 1;
    OK(tq_queue_set(DB, "aq-paused", &qo));
    int64_t paused[2] = {0, 0}; /* the paused queue's first and last ids */
    for (size_t q = 0; q < sizeof load / sizeof *load; q++)
        for (int i = 0; i < load[q].jobs; i++) {
            OK(tq_job_enqueue(&id, DB, load[q].queue, "p", 1, NULL));
            if (strcmp(load[q].queue, "aq-paused") == 0)
                paused[i > 0] = id;
        }

    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    const char *queues[] = {"aq-a"};
    o.all_queues = 1;
    o.queues = queues;
    o.nqueues = 1;
    o.concurrency = 4;
    o.handler = allq_handler;
    o.handler_ud = &ctx;
    run_args a = {0};
    assert_int_equal(tq_worker_new(&a.w, DB, &o), TQ_EINVAL); /* not both */
    assert_null(a.w);
    o.queues = NULL;
    o.nqueues = 0;
    OK(tq_worker_new(&a.w, DB, &o));
    pthread_t wt;
    assert_int_equal(pthread_create(&wt, NULL, run_worker, &a), 0);
    tq *db2;
    OK_ON(db2, tq_open(&db2, f->url, NULL));
    wait_done(db2, "aq-a", 40);
    wait_done(db2, "aq-b", 40);
    wait_done(db2, "aq-lim", 30);
    /* A queue made while the worker runs is found. */
    for (int i = 0; i < 45; i++)
        OK_ON(db2, tq_job_enqueue(&id, db2, "aq-late", "p", 1, NULL));
    wait_done(db2, "aq-late", 45);
    tq_worker_stop(a.w);
    pthread_join(wt, NULL);
    OK(a.rc);
    tq_worker_free(a.w);
    tq_stats st;
    OK_ON(db2, tq_stats_get(&st, db2, "aq-paused"));
    assert_int_equal(st.count[TQ_READY], 5);
    tq_close(db2);
    assert_true(id <= ALLQ_JOBS);
    for (int64_t i = 1; i <= id; i++) /* every job once, the paused ones never */
        assert_int_equal(atomic_load(&ctx.runs[i]),
                         i >= paused[0] && i <= paused[1] ? 0 : 1);
    assert_int_equal(atomic_load(&ctx.lim_most), 1);
}

/* Retention (tq_queue_info.retain_done_us, retain_dead_us): a running
 * worker deletes the finished jobs of its queues once they are older than
 * their queue keeps them, in batches (more than one here), done ones and
 * dead or cancelled ones each by their own setting; it keeps what is
 * younger, what its queue keeps until pruned, and every other queue's. */
#define RETAIN_OLD 1100
static int retain_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    (void)ud;
    if (strcmp((const char *)job->payload, "bad") != 0)
        return 0;
    snprintf(err, errlen, "bad");
    return 1;
}

static void set_retention(void **state, const char *queue, int64_t done_us,
                          int64_t dead_us)
{
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_RETAIN_DONE | TQ_SET_RETAIN_DEAD | TQ_SET_MAX_ATTEMPTS;
    qo.retain_done_us = done_us;
    qo.retain_dead_us = dead_us;
    qo.max_attempts = 1;
    OK(tq_queue_set(DB, queue, &qo));
}

static void retention(void **state)
{
    fx *f = *state;
    set_retention(state, "ret", 5000000, 0);      /* done: 5 s; dead: kept */
    set_retention(state, "ret_dead", 0, 5000000); /* the other way round */
    set_retention(state, "keep", 0, 0);
    tq_queue_info q;
    OK(tq_queue_get(&q, DB, "ret"));
    assert_int_equal(q.retain_done_us, 5000000);
    assert_int_equal(q.retain_dead_us, 0);
    int64_t ids[RETAIN_OLD], id, cancelled;
    enq_batch(state, ids, "ret", "ok", RETAIN_OLD);
    for (int i = 0; i < 2; i++) {
        OK(tq_job_enqueue(&id, DB, "ret", "bad", 3, NULL));
        OK(tq_job_enqueue(&id, DB, "ret_dead", "bad", 3, NULL));
    }
    for (int i = 0; i < 3; i++)
        OK(tq_job_enqueue(&id, DB, "ret_dead", "ok", 2, NULL));
    for (int i = 0; i < 4; i++)
        OK(tq_job_enqueue(&id, DB, "keep", "bad", 3, NULL));
    OK(tq_job_enqueue(&cancelled, DB, "ret_dead", "ok", 2, NULL));
    OK(tq_job_cancel(DB, cancelled));
    const char *queues[] = {"ret", "ret_dead", "keep"};
    tq_worker_opts o = drainer(queues, 4, retain_handler, NULL);
    o.nqueues = 3;
    tq_worker_counters k = run_counted(state, &o);
    assert_int_equal(k.done, RETAIN_OLD + 3);
    assert_int_equal(k.dead, 8);
    sleep_ms(5300); /* all of them past 5 s (the first worker kept them: younger) */
    int64_t young = enq(state, "ret", "young");
    tq_job *j = claim1(state, "ret", "w");
    OK(tq_job_complete(DB, j));
    tq_job_free(j);

    o.drain = 0;
    o.poll_max_us = 10000;
    run_args a = {0};
    OK(tq_worker_new(&a.w, DB, &o));
    pthread_t wt;
    assert_int_equal(pthread_create(&wt, NULL, run_worker, &a), 0);
    tq *db2;
    OK_ON(db2, tq_open(&db2, f->url, NULL));
    tq_stats ret, dead;
    for (int tries = 0; tries < 400; tries++) { /* up to 20 s */
        OK_ON(db2, tq_stats_get(&ret, db2, "ret"));
        OK_ON(db2, tq_stats_get(&dead, db2, "ret_dead"));
        if (ret.count[TQ_DONE] <= 1 &&
            dead.count[TQ_DEAD] + dead.count[TQ_CANCELLED] == 0)
            break;
        sleep_ms(50);
    }
    tq_worker_stop(a.w);
    pthread_join(wt, NULL);
    OK(a.rc);
    tq_worker_free(a.w);
    assert_int_equal(ret.count[TQ_DONE], 1); /* the young one */
    assert_int_equal(ret.count[TQ_DEAD], 2);
    assert_int_equal(dead.count[TQ_DONE], 3);
    assert_int_equal(dead.count[TQ_DEAD] + dead.count[TQ_CANCELLED], 0);
    OK_ON(db2, tq_stats_get(&ret, db2, "keep"));
    assert_int_equal(ret.count[TQ_DEAD], 4);
    tq_close(db2);
    assert_int_equal(state_of(state, young), TQ_DONE);
    assert_int_equal(tq_job_get(&j, DB, ids[0]), TQ_ENOTFOUND);
    assert_int_equal(tq_job_get(&j, DB, cancelled), TQ_ENOTFOUND);

    /* Out of range, or under a second: refused, nothing changed. */
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_RETAIN_DONE;
    qo.retain_done_us = 999999;
    assert_int_equal(tq_queue_set(DB, "ret", &qo), TQ_EINVAL);
    qo.retain_done_us = -1;
    assert_int_equal(tq_queue_set(DB, "ret", &qo), TQ_EINVAL);
    qo.set = TQ_SET_RETAIN_DEAD;
    qo.retain_dead_us = 3651LL * 86400 * 1000000;
    assert_int_equal(tq_queue_set(DB, "ret", &qo), TQ_EINVAL);
    OK(tq_queue_get(&q, DB, "ret"));
    assert_int_equal(q.retain_done_us, 5000000);
    assert_int_equal(q.retain_dead_us, 0);
}

static void worker_starts_only_young_holds(void **state)
{
    static hold_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    fx *f = *state;
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_LEASE | TQ_SET_BACKOFF;
    qo.lease_us = 3000000;
    qo.backoff_base_us = 0;
    OK(tq_queue_set(DB, "held", &qo));
    int64_t ids[HOLD_QUICK + HOLD_SLOW];
    enq_batch(state, ids, "held", "p", HOLD_QUICK + HOLD_SLOW);
    ctx.first = ids[0];

    const char *queues[] = {"held"};
    tq_worker_opts o = drainer(queues, 1, hold_handler, &ctx);
    o.prefetch = 8;
    o.name = "held-worker";
    run_args a = {0};
    OK(tq_worker_new(&a.w, DB, &o));
    pthread_t wt, lt;
    assert_int_equal(pthread_create(&wt, NULL, run_worker, &a), 0);
    /* The first slow job runs, and the others are held by now. */
    for (int i = 0; i < 1000 && !atomic_load(&ctx.slow_started[0]); i++)
        sleep_ms(5);
    assert_true(atomic_load(&ctx.slow_started[0]) > 0);
    locker l = {f->url, 4500, 0, 0, 0};
    assert_int_equal(pthread_create(&lt, NULL, lock_store, &l), 0);
    pthread_join(lt, NULL);
    pthread_join(wt, NULL);
    assert_true(l.ok);
    OK(a.rc);
    tq_worker_free(a.w);

    int inside = 0, after = 0;
    for (int i = 0; i < HOLD_SLOW; i++) {
        int64_t t = atomic_load(&ctx.slow_started[i]);
        inside += t > l.from && t < l.to;
        after += t >= l.to;
    }
    for (int i = 0; i < HOLD_QUICK + HOLD_SLOW; i++)
        assert_int_equal(atomic_load(&ctx.runs[i]), 1);
    assert_int_equal(inside, 0);            /* no word from the store: none started */
    assert_int_equal(after, HOLD_SLOW - 1); /* all but the first, once, after it */
    tq_stats st;
    OK(tq_stats_get(&st, DB, "held"));
    assert_int_equal(st.count[TQ_DONE], HOLD_QUICK + HOLD_SLOW);
}

static int ok_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    (void)job, (void)err, (void)errlen;
    atomic_fetch_add((_Atomic int *)ud, 1);
    return 0;
}

static void worker_name_in_use(void **state)
{
    _Atomic int runs = 0;
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.name = "unique";
    o.handler = ok_handler;
    o.handler_ud = &runs;
    o.drain = 1;
    tq_worker *w1, *w2 = NULL;
    OK(tq_worker_new(&w1, DB, &o));
    /* A second handle on the same store: another process would do the same. */
    tq *db2;
    OK(tq_open(&db2, ((fx *)*state)->url, NULL));
    assert_int_equal(tq_worker_new(&w2, db2, &o), TQ_EINUSE);
    assert_non_null(strstr(tq_errmsg(db2), "unique"));
    assert_null(w2);
    tq_worker_info *v;
    size_t n;
    OK(tq_worker_list(&v, &n, DB));
    assert_int_equal(n, 1);
    assert_string_equal(v[0].name, "unique");
    assert_int_equal(v[0].alive, 1);
    tq_free(v);
    tq_worker_free(w1); /* marks it stopped: the name is free again */
    OK(tq_worker_new(&w2, db2, &o));
    tq_worker_free(w2);
    tq_close(db2);
}

/* A handler whose process dies at once, as if killed: no acknowledgement
 * and no stop reach the store. */
static int dying_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    (void)ud, (void)job, (void)err, (void)errlen;
    _exit(3);
}

static void worker_resumes_own_jobs(void **state)
{
    _Atomic int runs = 0;
    set_queue(state, "default", TQ_SET_LEASE, TQ_FIFO, 3600000000LL, 0, 0, 0);
    int64_t id = enq(state, "default", "x");
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.name = "crashy";
    o.handler = ok_handler;
    o.handler_ud = &runs;
    o.drain = 1;
    /* A worker named "crashy" claimed the job and died while running it
     * (another process, killed: its registration looks alive). */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        tq *db;
        tq_worker *w;
        tq_worker_opts c = o;
        c.handler = dying_handler;
        _exit(tq_open(&db, ((fx *)*state)->url, NULL) || tq_worker_new(&w, db, &c) ||
                      tq_worker_run(w)
                  ? 1
                  : 2);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    assert_int_equal(state_of(state, id), TQ_RUNNING);
    tq_worker *w;
    OK(tq_worker_new(&w, DB, &o)); /* puts it back at once, not after the hour */
    assert_int_equal(state_of(state, id), TQ_READY);
    OK(tq_worker_run(w));
    tq_worker_free(w);
    tq_job *g = get(state, id);
    assert_int_equal(g->state, TQ_DONE);
    /* The dead worker's run charged an attempt only if its start reached
     * the store before it died (within ACK_DELAY_US it does not: engine.h,
     * STARTS; a slow build may take longer): one or two in all. */
    assert_true(g->attempts == 1 || g->attempts == 2);
    tq_job_free(g);
    assert_int_equal(atomic_load(&runs), 1);

    /* A name no worker registered says nothing of whoever claimed under it
     * through the API, which may still be running the job: it stays. */
    int64_t other = enq(state, "default", "y");
    tq_job *j = claim1(state, "default", "ghost");
    tq_job_free(j);
    o.name = "ghost";
    o.drain = 0;
    OK(tq_worker_new(&w, DB, &o));
    assert_int_equal(state_of(state, other), TQ_RUNNING);
    tq_worker_free(w);
}

static void worker_stop_from_thread(void **state)
{
    _Atomic int runs = 0;
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    o.handler = ok_handler;
    o.handler_ud = &runs;
    o.poll_max_us = 10000;
    tq_worker *w;
    OK(tq_worker_new(&w, DB, &o));
    tq_worker_stop(w); /* asked before it runs: returns at once, cleanly */
    OK(tq_worker_run(w));
    tq_worker_free(w);
    assert_int_equal(atomic_load(&runs), 0);
}

static void worker_bad_options(void **state)
{
    tq_worker *w = NULL;
    tq_worker_opts o = TQ_WORKER_OPTS_INIT;
    assert_int_equal(tq_worker_new(&w, DB, &o), TQ_EINVAL); /* no handler */
    o.handler = ok_handler;
    const char *bad[] = {"no way"};
    o.queues = bad;
    o.nqueues = 1;
    assert_int_equal(tq_worker_new(&w, DB, &o), TQ_EINVAL);
    o.nqueues = 0;
    o.concurrency = -1;
    assert_int_equal(tq_worker_new(&w, DB, &o), TQ_EINVAL);
    assert_null(w);
    /* The message says what is accepted, 0 included. */
    o.concurrency = TQ_CONCURRENCY_MAX + 1;
    assert_int_equal(tq_worker_new(&w, DB, &o), TQ_EINVAL);
    assert_string_equal(tq_errmsg(DB),
                        "concurrency must be between 1 and 1024 (0 means 1)");
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    eo.max_attempts = -1;
    int64_t id;
    assert_int_equal(tq_job_enqueue(&id, DB, "q", "x", 1, &eo), TQ_EINVAL);
    assert_non_null(strstr(tq_errmsg(DB), "(0: the queue's)"));
    o.concurrency = 0;
    const char *const dir[] = {"/tmp", NULL};
    o.handler = NULL;
    o.argv = dir; /* a directory is no handler */
    assert_int_equal(tq_worker_new(&w, DB, &o), TQ_EINVAL);
    assert_non_null(strstr(tq_errmsg(DB), "is a directory"));
    const char *const missing[] = {"tq-no-such-command", NULL};
    o.argv = missing;
    assert_int_equal(tq_worker_new(&w, DB, &o), TQ_EINVAL);
    assert_non_null(strstr(tq_errmsg(DB), "not found in PATH"));
    tq_worker_info *v;
    size_t n;
    OK(tq_worker_list(&v, &n, DB));
    assert_int_equal(n, 0); /* nothing registered */
    tq_free(v);
}

/* What a handler may say besides done or failed (tq_job_snooze,
 * tq_job_discard, tq_job_progress; a command says it on descriptor 3):
 * each fenced; a snooze gives the attempt back and counts, up to the
 * queue's max_snoozes, then fails; a discard ends the job dead; progress
 * stays with a done or discarded job and goes with a run that goes back to
 * ready; a retry starts the count again. */
static void handler_words(void **state)
{
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_MAX_SNOOZES | TQ_SET_BACKOFF;
    qo.max_snoozes = 2;
    qo.backoff_base_us = qo.backoff_cap_us = 0;
    OK(tq_queue_set(DB, "w", &qo));
    tq_queue_info q;
    OK(tq_queue_get(&q, DB, "w"));
    assert_int_equal(q.max_snoozes, 2);

    /* Snoozes: the attempt back, one more snooze each, until the third. */
    int64_t id = enq(state, "w", "snoozy");
    for (int i = 1; i <= 2; i++) {
        tq_job *j = claim1(state, "w", "w1");
        assert_int_equal(j->attempts, 1);
        assert_int_equal(j->snoozes, i - 1);
        OK(tq_job_progress(DB, j, 10 * i, "working"));
        OK(tq_job_snooze(DB, j, 0));
        assert_int_equal(tq_job_snooze(DB, j, 0), TQ_ELOST); /* the fence */
        assert_int_equal(tq_job_progress(DB, j, 99, "late"), TQ_ELOST);
        tq_job_free(j);
        j = get(state, id);
        assert_int_equal(j->state, TQ_READY);
        assert_int_equal(j->attempts, 0);
        assert_int_equal(j->snoozes, i);
        assert_int_equal(j->progress, -1); /* gone with the run */
        assert_null(j->progress_text);
        tq_job_free(j);
    }
    tq_job *j = claim1(state, "w", "w1");
    OK(tq_job_snooze(DB, j, 0)); /* the third: a failure */
    tq_job_free(j);
    j = get(state, id);
    assert_int_equal(j->state, TQ_READY);
    assert_int_equal(j->attempts, 1);
    assert_int_equal(j->snoozes, 2);
    assert_non_null(strstr(j->last_error, "snoozed 2 time(s)"));
    tq_job_free(j);
    /* A retry by hand counts snoozes from 0 again. */
    j = claim1(state, "w", "w1");
    OK(tq_job_discard(DB, j, "no such customer"));
    tq_job_free(j);
    OK(tq_job_retry(DB, id));
    j = get(state, id);
    assert_int_equal(j->snoozes, 0);
    tq_job_free(j);

    /* A snooze to later: not claimable until then. */
    j = claim1(state, "w", "w1");
    OK(tq_job_snooze(DB, j, 3600 * 1000000LL));
    tq_job_free(j);
    assert_int_equal(claim_n(state, "w", 10), 0);
    j = get(state, id);
    assert_true(j->run_at > j->created_at + 3500 * 1000000LL);
    tq_job_free(j);

    /* A discard: dead with attempts left, its progress kept. */
    int64_t bad = enq(state, "w", "bad");
    j = claim1(state, "w", "w1");
    OK(tq_job_progress(DB, j, 30, "parsed the header"));
    OK(tq_job_discard(DB, j, NULL));
    tq_job_free(j);
    j = get(state, bad);
    assert_int_equal(j->state, TQ_DEAD);
    assert_int_equal(j->attempts, 1);
    assert_string_equal(j->last_error, "discarded by its handler");
    assert_int_equal(j->progress, 30);
    assert_string_equal(j->progress_text, "parsed the header");
    tq_job_free(j);

    /* Progress: kept when done, cleared by a failure back to ready, cut
     * at 200 bytes between characters, and never outside 0 to 100. */
    int64_t ok = enq(state, "w", "ok"), flaky = enq(state, "w", "flaky");
    j = claim1(state, "w", "w1");
    char long_text[300];
    memset(long_text, 'a', sizeof long_text);
    memcpy(long_text + 199, "\xc3\xa9", 2); /* an e-acute across byte 200 */
    long_text[sizeof long_text - 1] = '\0';
    OK(tq_job_progress(DB, j, 100, long_text));
    assert_int_equal(tq_job_progress(DB, j, 101, NULL), TQ_EINVAL);
    assert_int_equal(tq_job_progress(DB, j, -1, NULL), TQ_EINVAL);
    assert_int_equal(tq_job_snooze(DB, j, -1), TQ_EINVAL);
    OK(tq_job_complete(DB, j));
    tq_job_free(j);
    j = get(state, ok);
    assert_int_equal(j->state, TQ_DONE);
    assert_int_equal(j->progress, 100);
    assert_int_equal(strlen(j->progress_text), 199);
    tq_job_free(j);
    j = claim1(state, "w", "w1");
    assert_int_equal(j->id, flaky);
    OK(tq_job_progress(DB, j, 50, NULL));
    OK(tq_job_fail(DB, j, "boom"));
    tq_job_free(j);
    j = get(state, flaky);
    assert_int_equal(j->state, TQ_READY);
    assert_int_equal(j->progress, -1);
    tq_job_free(j);

    /* Bad settings change nothing. */
    qo.set = TQ_SET_MAX_SNOOZES;
    qo.max_snoozes = -1;
    assert_int_equal(tq_queue_set(DB, "w", &qo), TQ_EINVAL);
    OK(tq_queue_get(&q, DB, "w"));
    assert_int_equal(q.max_snoozes, 2);
}

/* Results: stored byte for byte with a done job (tq_job_complete_result),
 * read back by tq_job_result; an empty result is one; a job that is not
 * done, or done without one, has none; too big is refused with nothing
 * changed; the queue's results setting round-trips. */
static void results(void **state)
{
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_RESULTS;
    qo.results = 1;
    OK(tq_queue_set(DB, "res", &qo));
    tq_queue_info q;
    OK(tq_queue_get(&q, DB, "res"));
    assert_int_equal(q.results, 1);

    static const unsigned char bin[] = {'o', 'k', 0, 0xff, 0xc3, '\n'};
    int64_t a = enq(state, "res", "a"), b = enq(state, "res", "b"),
            c = enq(state, "res", "c"), d = enq(state, "res", "d");
    tq_job *j = claim1(state, "res", "w");
    OK(tq_job_complete_result(DB, j, bin, sizeof bin));
    tq_job_free(j);
    j = claim1(state, "res", "w");
    OK(tq_job_complete_result(DB, j, NULL, 0)); /* empty, but a result */
    tq_job_free(j);
    j = claim1(state, "res", "w");
    OK(tq_job_complete(DB, j)); /* none */
    tq_job_free(j);
    j = claim1(state, "res", "w");
    char *big = calloc(1, TQ_RESULT_MAX + 1);
    assert_int_equal(tq_job_complete_result(DB, j, big, TQ_RESULT_MAX + 1), TQ_ETOOBIG);
    free(big);
    assert_int_equal(state_of(state, d), TQ_RUNNING);
    OK(tq_job_release(DB, j));
    tq_job_free(j);

    void *out;
    size_t len;
    OK(tq_job_result(&out, &len, DB, a));
    assert_int_equal(len, sizeof bin);
    assert_memory_equal(out, bin, sizeof bin);
    tq_free(out);
    OK(tq_job_result(&out, &len, DB, b));
    assert_int_equal(len, 0);
    tq_free(out);
    assert_int_equal(tq_job_result(&out, &len, DB, c), TQ_ESTATE);
    assert_non_null(strstr(tq_errmsg(DB), "without a result"));
    assert_int_equal(tq_job_result(&out, &len, DB, d), TQ_ESTATE);
    assert_non_null(strstr(tq_errmsg(DB), "is ready"));
    assert_int_equal(tq_job_result(&out, &len, DB, d + 1000), TQ_ENOTFOUND);
    j = get(state, a);
    assert_int_equal(j->result_len, (int64_t)sizeof bin);
    tq_job_free(j);
    j = get(state, b);
    assert_int_equal(j->result_len, 0);
    tq_job_free(j);
    j = get(state, c);
    assert_int_equal(j->result_len, -1);
    tq_job_free(j);
    qo.set = TQ_SET_RESULTS;
    qo.results = 0;
    OK(tq_queue_set(DB, "res", &qo));
    OK(tq_queue_get(&q, DB, "res"));
    assert_int_equal(q.results, 0);
}

/* A C handler's result (tq_handler_result) is kept with its done job, the
 * last one set counting; one over the limit is refused; a failed job keeps
 * none. */
static int result_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    (void)ud, (void)err, (void)errlen;
    char text[32];
    int n = snprintf(text, sizeof text, "result of %s", (const char *)job->payload);
    if (tq_handler_result(job, "first", 5))
        return 1;
    static const char big[TQ_RESULT_MAX + 1];
    if (tq_handler_result(job, big, sizeof big) != TQ_ETOOBIG ||
        tq_handler_result(job, NULL, 1) != TQ_EINVAL)
        return 1;
    if (tq_handler_result(job, text, (size_t)n))
        return 1;
    return strcmp((const char *)job->payload, "fail") == 0;
}

static void worker_pool_results(void **state)
{
    set_queue(state, "cbres", TQ_SET_BACKOFF | TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    int64_t ok = enq(state, "cbres", "ok"), bad = enq(state, "cbres", "fail");
    const char *queues[] = {"cbres"};
    tq_worker_opts o = drainer(queues, 2, result_handler, NULL);
    tq_worker *w;
    OK(tq_worker_new(&w, DB, &o));
    OK(tq_worker_run(w));
    tq_worker_free(w);
    void *out;
    size_t len;
    OK(tq_job_result(&out, &len, DB, ok));
    assert_int_equal(len, strlen("result of ok"));
    assert_memory_equal(out, "result of ok", len);
    tq_free(out);
    assert_int_equal(state_of(state, bad), TQ_DEAD);
    assert_int_equal(tq_job_result(&out, &len, DB, bad), TQ_ESTATE);
}

/* ---- dependencies ---------------------------------------------------------- */

static int64_t enq_after_when(void **state, const char *queue, const char *payload,
                              const int64_t *after, size_t n, int ended)
{
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.after = after;
    o.nafter = n;
    o.after_ended = ended;
    int64_t id = 0;
    OK(tq_job_enqueue(&id, DB, queue, payload, strlen(payload), &o));
    return id;
}

static int64_t enq_after(void **state, const char *queue, const char *payload,
                         const int64_t *after, size_t n)
{
    return enq_after_when(state, queue, payload, after, n, 0);
}

/* A job waits for n (at most 8) more parents, and counts them so far
 * with the ends want (TQ_WAITING: not ended yet, whatever its state). */
static void expect_batch(void **state, int64_t id, tq_state job_state,
                         int64_t waiting_for, const int64_t *parents,
                         const tq_state *want, size_t n)
{
    tq_job *j = get(state, id);
    assert_int_equal(j->state, job_state);
    assert_int_equal(j->waiting_for, waiting_for);
    assert_null(j->last_error);
    tq_job_free(j);
    tq_parent *v;
    size_t got;
    OK(tq_job_parent_ends(&v, &got, DB, id));
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(v[i].id, parents[i]);
        assert_true(v[i].when_ended);
        if (want[i] == TQ_WAITING)
            assert_true(v[i].state != TQ_DONE && v[i].state != TQ_DEAD &&
                        v[i].state != TQ_CANCELLED);
        else
            assert_int_equal(v[i].state, want[i]);
    }
    tq_free(v);
}

/* Claims every claimable job of queue (one-letter payloads), checks they
 * spell want in order of their letters, and completes them. */
static void run_all(void **state, const char *queue, const char *want)
{
    tq_job *jobs;
    size_t n;
    OK(tq_job_claim(&jobs, &n, DB, queue, "w", 100));
    char got[64];
    size_t m = 0;
    for (size_t i = 0; i < n && m < sizeof got - 1; i++) {
        size_t k = m++;
        for (; k > 0 && got[k - 1] > (char)jobs[i].payload[0]; k--)
            got[k] = got[k - 1];
        got[k] = (char)jobs[i].payload[0];
    }
    got[m] = '\0';
    for (size_t i = 0; i < n; i++)
        OK(tq_job_complete(DB, &jobs[i]));
    tq_job_array_free(jobs, n);
    assert_string_equal(got, want);
}

/* A diamond (A -> B, C -> D) runs in its order; a parent that fails for
 * good cancels its descendants, naming itself; a retry of it brings them
 * back; parents done before the enqueue do not hold a child back. */
/* Claims the one job of queue and fails it (its queue allows one
 * attempt: dead). */
static void held_fail(void **state, const char *queue)
{
    tq_job *j = claim1(state, queue, "w");
    OK(tq_job_fail(DB, j, "broken"));
    tq_job_array_free(j, 1);
}

static void dependencies(void **state)
{
    int64_t a = enq(state, "d", "A");
    int64_t b = enq_after(state, "d", "B", &a, 1);
    int64_t c = enq_after(state, "d", "C", &a, 1);
    int64_t bc[] = {c, b, c}; /* any order, repeats ignored */
    int64_t d = enq_after(state, "d", "D", bc, 3);
    tq_job *j = get(state, d);
    assert_int_equal(j->state, TQ_WAITING);
    assert_int_equal(j->nparents, 2);
    assert_int_equal(j->waiting_for, 2);
    tq_job_free(j);
    int64_t *v;
    size_t n;
    OK(tq_job_parents(&v, &n, DB, d));
    assert_int_equal(n, 2);
    assert_int_equal(v[0], b);
    assert_int_equal(v[1], c);
    tq_free(v);
    OK(tq_job_parents(&v, &n, DB, a));
    assert_int_equal(n, 0);
    assert_int_equal(tq_job_parents(&v, &n, DB, d + 100), TQ_ENOTFOUND);
    tq_stats st;
    OK(tq_stats_get(&st, DB, "d"));
    assert_int_equal(st.count[TQ_WAITING], 3);
    assert_int_equal(st.count[TQ_READY], 1);
    run_all(state, "d", "A");
    run_all(state, "d", "BC");
    j = get(state, d);
    assert_int_equal(j->state, TQ_READY);
    assert_int_equal(j->waiting_for, 0);
    tq_job_free(j);
    run_all(state, "d", "D");
    int64_t done2[] = {a, d};
    int64_t e = enq_after(state, "d", "E", done2, 2);
    assert_int_equal(state_of(state, e), TQ_READY);
    run_all(state, "d", "E");

    /* A dead parent, its child and grandchild; another child also waits
     * for a parent that is done meanwhile. */
    set_queue(state, "k", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    int64_t p = enq(state, "k", "P"), o = enq(state, "k", "O");
    int64_t k1 = enq_after(state, "k", "K", &p, 1);
    int64_t k2 = enq_after(state, "k", "L", &k1, 1);
    int64_t po[] = {p, o};
    int64_t k3 = enq_after(state, "k", "M", po, 2);
    tq_job *jobs;
    OK(tq_job_claim(&jobs, &n, DB, "k", "w", 10));
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].id == p)
            OK(tq_job_fail(DB, &jobs[i], "broken"));
        else
            OK(tq_job_complete(DB, &jobs[i]));
    }
    tq_job_array_free(jobs, n);
    char why[64];
    const int64_t cancelled[][2] = {{k1, p}, {k2, k1}, {k3, p}};
    for (size_t i = 0; i < 3; i++) {
        j = get(state, cancelled[i][0]);
        assert_int_equal(j->state, TQ_CANCELLED);
        snprintf(why, sizeof why, "parent job %lld ended %s", (long long)cancelled[i][1],
                 cancelled[i][1] == p ? "dead" : "cancelled");
        assert_string_equal(j->last_error, why);
        assert_true(j->finished_at > 0);
        tq_job_free(j);
    }
    /* A child of a dead parent is cancelled at once. */
    int64_t k4 = enq_after(state, "k", "N", &p, 1);
    j = get(state, k4);
    assert_int_equal(j->state, TQ_CANCELLED);
    snprintf(why, sizeof why, "parent job %lld is dead", (long long)p);
    assert_string_equal(j->last_error, why);
    tq_job_free(j);
    /* Retrying a cancelled child alone: its parent is still dead. */
    OK(tq_job_retry(DB, k1));
    assert_int_equal(state_of(state, k1), TQ_CANCELLED);
    OK(tq_job_retry(DB, p));
    const int64_t back[] = {k1, k2, k3, k4};
    for (size_t i = 0; i < 4; i++) {
        j = get(state, back[i]);
        assert_int_equal(j->state, TQ_WAITING);
        assert_null(j->last_error);
        assert_int_equal(j->finished_at, 0);
        tq_job_free(j);
    }
    run_all(state, "k", "P");
    run_all(state, "k", "KMN");
    run_all(state, "k", "L");

    /* Cancelling a waiting job cancels its children; retrying it brings
     * them back. */
    int64_t r = enq(state, "c", "R");
    int64_t w1 = enq_after(state, "c", "W", &r, 1);
    int64_t w2 = enq_after(state, "c", "X", &w1, 1);
    OK(tq_job_cancel(DB, w1));
    assert_int_equal(state_of(state, w2), TQ_CANCELLED);
    assert_int_equal(state_of(state, r), TQ_READY);
    OK(tq_job_retry(DB, w1));
    assert_int_equal(state_of(state, w1), TQ_WAITING);
    assert_int_equal(state_of(state, w2), TQ_WAITING);
    /* A parent and its child in one call, either way round. */
    int64_t both[] = {w1, w2};
    OK(tq_job_cancel_ids(DB, both, 2));
    assert_int_equal(state_of(state, w2), TQ_CANCELLED);
    OK(tq_job_retry_ids(DB, both, 2));
    assert_int_equal(state_of(state, w1), TQ_WAITING);
    assert_int_equal(state_of(state, w2), TQ_WAITING);
    run_all(state, "c", "R");
    run_all(state, "c", "W");
    run_all(state, "c", "X");

    /* A chain of 300: the head's end reaches the tail, and so does its
     * retry (no recursion to run out of). */
    enum { CHAIN = 300 };
    int64_t chain[CHAIN];
    chain[0] = enq(state, "chain", "h");
    for (int i = 1; i < CHAIN; i++)
        chain[i] = enq_after(state, "chain", "t", &chain[i - 1], 1);
    OK(tq_job_cancel(DB, chain[0]));
    j = get(state, chain[CHAIN - 1]);
    assert_int_equal(j->state, TQ_CANCELLED);
    snprintf(why, sizeof why, "parent job %lld ended cancelled",
             (long long)chain[CHAIN - 2]);
    assert_string_equal(j->last_error, why);
    tq_job_free(j);
    OK(tq_job_retry(DB, chain[0]));
    assert_int_equal(state_of(state, chain[CHAIN - 1]), TQ_WAITING);
    OK(tq_job_cancel(DB, chain[0]));

    /* A dead parent pruned: its cancelled child, retried, is held by it. */
    set_queue(state, "pr", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    int64_t dp = enq(state, "pr", "D");
    int64_t dc = enq_after(state, "pr", "E", &dp, 1);
    held_fail(state, "pr");
    assert_int_equal(state_of(state, dc), TQ_CANCELLED);
    int64_t pruned = 0;
    OK(tq_job_prune(&pruned, DB, 0, 1u << TQ_DEAD));
    assert_int_equal(pruned, 1);
    OK(tq_job_retry(DB, dc));
    j = get(state, dc);
    assert_int_equal(j->state, TQ_CANCELLED);
    snprintf(why, sizeof why, "parent job %lld no longer exists", (long long)dp);
    assert_string_equal(j->last_error, why);
    tq_job_free(j);
}

/* Parents that end by other paths: a queue that deletes done rows, a
 * rescue out of attempts (dead), a retry of all dead jobs; a batch gets
 * the same parents; unknown parents are refused with nothing stored;
 * pruning a child takes its dependencies with it. */
static void dependencies_other_paths(void **state)
{
    set_keep_done(state, "gone", 0);
    int64_t g = enq(state, "gone", "G");
    tq_payload items[3] = {{"a", 1}, {"b", 1}, {"c", 1}};
    int64_t kids[3];
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    eo.after = &g;
    eo.nafter = 1;
    OK(tq_job_enqueue_batch(kids, DB, "kids", items, 3, &eo));
    for (int i = 0; i < 3; i++)
        assert_int_equal(state_of(state, kids[i]), TQ_WAITING);
    run_all(state, "gone", "G");
    tq_job *j;
    assert_int_equal(tq_job_get(&j, DB, g), TQ_ENOTFOUND);
    for (int i = 0; i < 3; i++)
        assert_int_equal(state_of(state, kids[i]), TQ_READY);
    run_all(state, "kids", "abc");

    set_queue(state, "lease", TQ_SET_LEASE | TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 1000000, 1, 0,
              0);
    int64_t l = enq(state, "lease", "L");
    int64_t lc = enq_after(state, "lease", "M", &l, 1);
    tq_job *held = claim1(state, "lease", "w");
    tq_job_array_free(held, 1);
    sleep_ms(1100);
    int64_t rescued = 0;
    OK(tq_rescue_expired(&rescued, DB));
    assert_int_equal(rescued, 1);
    assert_int_equal(state_of(state, l), TQ_DEAD);
    assert_int_equal(state_of(state, lc), TQ_CANCELLED);
    int64_t count = 0;
    OK(tq_job_retry_dead(&count, DB, "lease"));
    assert_int_equal(count, 1);
    assert_int_equal(state_of(state, lc), TQ_WAITING);

    /* Refused: nothing stored. */
    int64_t bad[] = {l, l + 1000};
    tq_stats before, after;
    OK(tq_stats_get(&before, DB, NULL));
    int64_t id = 0;
    eo.after = bad;
    eo.nafter = 2;
    assert_int_equal(tq_job_enqueue(&id, DB, "lease", "x", 1, &eo), TQ_ENOTFOUND);
    assert_non_null(strstr(tq_errmsg(DB), "does not exist"));
    assert_int_equal(tq_job_enqueue_batch(NULL, DB, "lease", items, 3, &eo),
                     TQ_ENOTFOUND);
    int64_t zero = 0;
    eo.after = &zero;
    eo.nafter = 1;
    assert_int_equal(tq_job_enqueue(&id, DB, "lease", "x", 1, &eo), TQ_EINVAL);
    eo.after = &l;
    eo.key = "k";
    assert_int_equal(tq_job_enqueue(&id, DB, "lease", "x", 1, &eo), TQ_EINVAL);
    OK(tq_stats_get(&after, DB, NULL));
    for (int s = 0; s < TQ_STATE_COUNT; s++)
        assert_int_equal(after.count[s], before.count[s]);

    /* Prune the children: their dependencies go; the parents stay. */
    run_all(state, "lease", "L");
    run_all(state, "lease", "M");
    OK(tq_job_prune(&count, DB, 0, 1u << TQ_DONE));
    assert_true(count >= 2);
}

/* A child that waits for its parents' end (tq_enqueue_opts.after_ended, a
 * batch's callback): released by any end, counting each once however
 * often a parent is retried before, and not after; the cascade of a dead
 * parent stops at it and releases it; parents ended before its enqueue
 * count at once; the ends it counted outlive a deleted parent. */
static void dependencies_when_ended(void **state)
{
    const tq_state W = TQ_WAITING;
    set_queue(state, "b", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    int64_t p[3] = {enq(state, "b", "A"), enq(state, "b", "B"), enq(state, "bc", "C")};
    int64_t k = enq_after_when(state, "bk", "K", p, 3, 1);
    int64_t g = enq_after(state, "bk", "G", &k, 1); /* needs K done */
    expect_batch(state, k, TQ_WAITING, 3, p, (tq_state[]){W, W, W}, 3);
    OK(tq_job_cancel(DB, p[2]));
    expect_batch(state, k, TQ_WAITING, 2, p, (tq_state[]){W, W, TQ_CANCELLED}, 3);
    /* B dead, retried (counted again), dead again: counted once. */
    tq_job *a = claim1(state, "b", "w"); /* A runs on */
    assert_int_equal(a->id, p[0]);
    held_fail(state, "b");
    expect_batch(state, k, TQ_WAITING, 1, p, (tq_state[]){W, TQ_DEAD, TQ_CANCELLED}, 3);
    OK(tq_job_retry(DB, p[1]));
    expect_batch(state, k, TQ_WAITING, 2, p, (tq_state[]){W, W, TQ_CANCELLED}, 3);
    held_fail(state, "b");
    expect_batch(state, k, TQ_WAITING, 1, p, (tq_state[]){W, TQ_DEAD, TQ_CANCELLED}, 3);
    assert_int_equal(state_of(state, g), TQ_WAITING);
    /* A done: K is ready. C retried before K's first claim: K waits for
     * it again; C cancelled again releases it. Once K is claimed, a retry
     * of C leaves it be. */
    OK(tq_job_complete(DB, a));
    tq_job_array_free(a, 1);
    const tq_state ended[] = {TQ_DONE, TQ_DEAD, TQ_CANCELLED};
    expect_batch(state, k, TQ_READY, 0, p, ended, 3);
    OK(tq_job_retry(DB, p[2]));
    expect_batch(state, k, TQ_WAITING, 1, p, (tq_state[]){TQ_DONE, TQ_DEAD, W}, 3);
    OK(tq_job_cancel(DB, p[2]));
    expect_batch(state, k, TQ_READY, 0, p, ended, 3);
    tq_job *kj = claim1(state, "bk", "w");
    assert_int_equal(kj->id, k);
    OK(tq_job_retry(DB, p[2]));
    assert_int_equal(state_of(state, k), TQ_RUNNING);
    OK(tq_job_complete(DB, kj));
    tq_job_array_free(kj, 1);
    run_all(state, "bk", "G");

    /* Parents and their callback cancelled together, then retried
     * together (the children first, as a retry of many takes them): the
     * callback waits for both parents again. */
    int64_t q2[2] = {enq(state, "bq", "P"), enq(state, "bq", "Q")};
    int64_t cb = enq_after_when(state, "bq", "R", q2, 2, 1);
    const int64_t all[] = {q2[0], q2[1], cb};
    OK(tq_job_cancel_ids(DB, all, 3));
    expect_batch(state, cb, TQ_CANCELLED, 0, q2, (tq_state[]){TQ_CANCELLED, TQ_CANCELLED},
                 2);
    OK(tq_job_retry_ids(DB, all, 3));
    expect_batch(state, cb, TQ_WAITING, 2, q2, (tq_state[]){W, W}, 2);
    run_all(state, "bq", "PQ");
    expect_batch(state, cb, TQ_READY, 0, q2, (tq_state[]){TQ_DONE, TQ_DONE}, 2);
    run_all(state, "bq", "R");

    /* X dead cancels Y (which needs it done); Y's end releases Z, which
     * waits for Y's end alone, and counts in Z2, which waits for V too. X
     * retried: Y waits again, and so do Z and Z2 for it. */
    set_queue(state, "x", TQ_SET_MAX_ATTEMPTS, TQ_FIFO, 0, 1, 0, 0);
    int64_t x = enq(state, "x", "X"), v = enq(state, "xv", "V");
    int64_t y = enq_after(state, "xy", "Y", &x, 1);
    int64_t z = enq_after_when(state, "xz", "Z", &y, 1, 1);
    int64_t yv[] = {v, y}; /* ascending, as they are listed */
    int64_t z2 = enq_after_when(state, "xz", "2", yv, 2, 1);
    held_fail(state, "x");
    assert_int_equal(state_of(state, y), TQ_CANCELLED);
    expect_batch(state, z, TQ_READY, 0, &y, (tq_state[]){TQ_CANCELLED}, 1);
    /* Y retried alone while X is dead stays cancelled, and Z as it was
     * (its place in the queue too). */
    tq_job *zj = get(state, z);
    const int64_t z_due = zj->run_at;
    tq_job_free(zj);
    OK(tq_job_retry(DB, y));
    assert_int_equal(state_of(state, y), TQ_CANCELLED);
    expect_batch(state, z, TQ_READY, 0, &y, (tq_state[]){TQ_CANCELLED}, 1);
    zj = get(state, z);
    assert_int_equal(zj->run_at, z_due);
    tq_job_free(zj);
    expect_batch(state, z2, TQ_WAITING, 1, yv, (tq_state[]){W, TQ_CANCELLED}, 2);
    OK(tq_job_retry(DB, x));
    assert_int_equal(state_of(state, y), TQ_WAITING);
    expect_batch(state, z, TQ_WAITING, 1, &y, (tq_state[]){W}, 1);
    expect_batch(state, z2, TQ_WAITING, 2, yv, (tq_state[]){W, W}, 2);
    run_all(state, "x", "X");
    run_all(state, "xy", "Y");
    run_all(state, "xv", "V");
    expect_batch(state, z2, TQ_READY, 0, yv, (tq_state[]){TQ_DONE, TQ_DONE}, 2);
    run_all(state, "xz", "2Z");

    /* Parents ended before the enqueue (dead, cancelled) count at once;
     * one done after it in a queue that keeps no done row: its end is still
     * known. */
    set_keep_done(state, "gone2", 0);
    int64_t d = enq(state, "gone2", "D");
    int64_t dead = enq(state, "x", "Q");
    held_fail(state, "x");
    int64_t cancelled = enq(state, "xc", "C");
    OK(tq_job_cancel(DB, cancelled));
    int64_t r = enq(state, "run", "R");
    tq_job *held = claim1(state, "run", "w");
    int64_t early[] = {d, dead, cancelled, r};
    int64_t e = enq_after_when(state, "xe", "E", early, 4, 1);
    expect_batch(state, e, TQ_WAITING, 2, early,
                 (tq_state[]){W, TQ_DEAD, TQ_CANCELLED, W}, 4);
    run_all(state, "gone2", "D");
    expect_batch(state, e, TQ_WAITING, 1, early,
                 (tq_state[]){TQ_DONE, TQ_DEAD, TQ_CANCELLED, W}, 4);
    OK(tq_job_complete(DB, held));
    tq_job_array_free(held, 1);
    expect_batch(state, e, TQ_READY, 0, early,
                 (tq_state[]){TQ_DONE, TQ_DEAD, TQ_CANCELLED, TQ_DONE}, 4);

    /* Without parents it means nothing: refused. */
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.after_ended = 1;
    int64_t id;
    assert_int_equal(tq_job_enqueue(&id, DB, "xe", "F", 1, &o), TQ_EINVAL);
    /* A caller built against version 5 has no after_ended: whatever
     * follows its struct is not read, and the old rule holds (a child of
     * a dead parent is cancelled at once). */
    o.version = 5;
    o.after = &dead;
    o.nafter = 1;
    OK(tq_job_enqueue(&id, DB, "xe", "G", 1, &o));
    assert_int_equal(state_of(state, id), TQ_CANCELLED);
}

/* A job with 2,000 parents, run by a pool of four workers: every parent
 * runs once, and the child once, after all of them. */
#define FAN 2000
typedef struct fan_ctx {
    int64_t first, child;
    _Atomic int runs[FAN];
    _Atomic int done; /* parents finished */
    _Atomic int child_runs;
    _Atomic int child_early; /* the child started before every parent ended */
    _Atomic int64_t child_parents;
} fan_ctx;

static int fan_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    fan_ctx *c = ud;
    (void)err, (void)errlen;
    if (job->id == c->child) {
        atomic_fetch_add(&c->child_runs, 1);
        if (atomic_load(&c->done) != FAN)
            atomic_fetch_add(&c->child_early, 1);
        atomic_store(&c->child_parents, job->nparents);
        return 0;
    }
    int64_t i = job->id - c->first;
    if (i < 0 || i >= FAN)
        return 1;
    atomic_fetch_add(&c->runs[i], 1);
    atomic_fetch_add(&c->done, 1); /* before the acknowledgement */
    return 0;
}

static void *fan_worker(void *arg)
{
    tq_worker *w = arg;
    return (void *)(intptr_t)tq_worker_run(w);
}

/* Runs n draining callback workers of queue, each on its own connection
 * and thread (named PREFIX0, PREFIX1, ...), until all have ended well;
 * *sum (if not NULL): their counters added up. */
#define MAX_POOL_WORKERS 4
static void run_workers(void **state, const char *queue, int n, int concurrency,
                        const char *prefix, tq_handler_fn handler, void *ud,
                        tq_worker_counters *sum)
{
    const char *queues[] = {queue};
    tq *dbs[MAX_POOL_WORKERS];
    tq_worker *w[MAX_POOL_WORKERS];
    pthread_t t[MAX_POOL_WORKERS];
    assert_true(n <= MAX_POOL_WORKERS);
    for (int i = 0; i < n; i++) {
        OK(tq_open(&dbs[i], ((fx *)*state)->url, NULL));
        char name[16];
        snprintf(name, sizeof name, "%s%d", prefix, i);
        tq_worker_opts o = drainer(queues, concurrency, handler, ud);
        o.name = name;
        OK(tq_worker_new(&w[i], dbs[i], &o));
        assert_int_equal(pthread_create(&t[i], NULL, fan_worker, w[i]), 0);
    }
    if (sum)
        memset(sum, 0, sizeof *sum);
    for (int i = 0; i < n; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        assert_int_equal((int)(intptr_t)rc, 0);
        tq_worker_counters k;
        tq_worker_counters_get(&k, w[i]);
        if (sum) {
            sum->claimed += k.claimed;
            sum->done += k.done;
            sum->failed += k.failed;
            sum->lost += k.lost;
            sum->released += k.released;
            sum->busy_retries += k.busy_retries;
        }
        tq_worker_free(w[i]);
        tq_close(dbs[i]);
    }
}

static void dependencies_fan_in(void **state)
{
    static fan_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    static int64_t ids[FAN];
    enq_batch(state, ids, "fan", "p", FAN);
    ctx.first = ids[0];
    ctx.child = enq_after(state, "fan", "child", ids, FAN);
    run_workers(state, "fan", 4, 4, "fan", fan_handler, &ctx, NULL);
    for (int i = 0; i < FAN; i++)
        assert_int_equal(atomic_load(&ctx.runs[i]), 1);
    assert_int_equal(atomic_load(&ctx.child_runs), 1);
    assert_int_equal(atomic_load(&ctx.child_early), 0);
    assert_int_equal(atomic_load(&ctx.child_parents), FAN);
    assert_int_equal(state_of(state, ctx.child), TQ_DONE);
}

/* ---- limited queues hold jobs ahead ------------------------------------------ */

/*
 * Limits as the handlers see them, with jobs fast enough that workers
 * claim them in batches: 2 workers x 2 slots, no-op callbacks. A rate of
 * 300 per 100 ms (a burst of 30), whose jobs are claimed ahead of the free
 * slots and must start within a few ms: no window of 100 ms sees more than
 * 300 starts. At most 1 running per group over 20 groups (5 jobs in a row
 * each): never 2 of a group in handlers at once. Every job runs once.
 */
#define LIM_JOBS   1500
#define LIM_GROUPS 20
typedef struct lim_ctx {
    int64_t first;
    _Atomic int runs[LIM_JOBS];
    _Atomic int64_t started[LIM_JOBS]; /* monotonic us */
    _Atomic int in_group[LIM_GROUPS];
    _Atomic int overlaps; /* a handler found its group's other job running */
} lim_ctx;

static int lim_handler(void *ud, const tq_job *job, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    lim_ctx *c = ud;
    int64_t i = job->id - c->first;
    if (i < 0 || i >= LIM_JOBS)
        return 0;
    atomic_fetch_add(&c->runs[i], 1);
    atomic_store(&c->started[i], clock_us(CLOCK_MONOTONIC));
    if (job->group) {
        int g = atoi(job->group + 1);
        if (atomic_fetch_add(&c->in_group[g], 1) != 0)
            atomic_fetch_add(&c->overlaps, 1);
        const int64_t until =
            clock_us(CLOCK_MONOTONIC) + 30; /* a little work, overlapping more */
        while (clock_us(CLOCK_MONOTONIC) < until)
            ;
        atomic_fetch_sub(&c->in_group[g], 1);
    }
    return 0;
}

static void run_lim_workers(void **state, const char *queue, lim_ctx *ctx)
{
    tq_worker_counters k;
    run_workers(state, queue, 2, 2, "lim", lim_handler, ctx, &k);
    for (int i = 0; i < LIM_JOBS; i++)
        assert_int_equal(atomic_load(&ctx->runs[i]), 1);
    /* Held jobs that went back unstarted were claimed again. */
    assert_int_equal(k.done, LIM_JOBS);
    assert_int_equal(k.claimed - k.released, LIM_JOBS);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void limits_with_fast_jobs(void **state)
{
    static lim_ctx ctx;
    static tq_payload items[LIM_JOBS];
    static int64_t ids[LIM_JOBS];
    static int64_t t[LIM_JOBS];
    for (int i = 0; i < LIM_JOBS; i++)
        items[i] = (tq_payload){"p", 1};

    memset(&ctx, 0, sizeof ctx);
    set_rate(state, "rated", 300, 100000);
    OK(tq_job_enqueue_batch(ids, DB, "rated", items, LIM_JOBS, NULL));
    ctx.first = ids[0];
    run_lim_workers(state, "rated", &ctx);
    for (int i = 0; i < LIM_JOBS; i++)
        t[i] = atomic_load(&ctx.started[i]);
    qsort(t, LIM_JOBS, sizeof t[0], cmp_i64);
    int most = 0;
    for (int i = 0, j = 0; i < LIM_JOBS; i++) {
        while (j < LIM_JOBS && t[j] < t[i] + 100000)
            j++;
        if (j - i > most)
            most = j - i;
    }
    print_message("rate 300/100ms: at most %d starts in 100 ms, %lld ms in all\n", most,
                  (long long)(t[LIM_JOBS - 1] - t[0]) / 1000);
    assert_true(most <= 300);

    memset(&ctx, 0, sizeof ctx);
    set_limits(state, "grouped", 0, 1);
    for (int i = 0; i < LIM_JOBS; i += 5) {
        char group[8];
        snprintf(group, sizeof group, "g%d", i / 5 % LIM_GROUPS);
        tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
        eo.group = group;
        OK(tq_job_enqueue_batch(ids + i, DB, "grouped", items, 5, &eo));
    }
    ctx.first = ids[0];
    for (int i = 1; i < LIM_JOBS; i++)
        assert_int_equal(ids[i], ids[0] + i);
    run_lim_workers(state, "grouped", &ctx);
    assert_int_equal(atomic_load(&ctx.overlaps), 0);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tq-test-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(enqueue_claim_complete),
        T(monitoring),
        T(fencing),
        T(fence_survives_cancel_and_retry),
        T(fail_retry_then_dead),
        T(job_max_attempts_overrides_queue),
        T(backoff_delays_retry),
        T(heartbeat_extends_lease),
        T(expired_lease_rescued),
        T(dedup_keys),
        T(unique_scopes),
        T(traceparent_travels),
        T(timeouts_stored),
        T(delayed_not_claimed_early),
        T(orders_and_priority),
        T(batch_claim_returns_queue_order),
        T(paused_queue),
        T(concurrency_limits),
        T(rate_limits),
        T(periodic_jobs),
        T(handler_words),
        T(results),
        T(queue_settings_round_trip),
        T(delete_done_rows),
        T(payloads),
        T(batch_enqueue),
        T(cancel_and_retry),
        T(retry_all_dead),
        T(prune_finished),
        T(stats_and_list),
        T(bad_input_rejected),
        T(open_errors),
        T(init_is_idempotent),
        T(worker_pool_callbacks),
        T(worker_counts_dead),
        T(worker_forgets_stopped),
        T(worker_all_queues),
        T(retention),
        T(limits_with_fast_jobs),
        T(worker_pool_handler_words),
        T(handler_deadlines),
        T(worker_pool_results),
        T(dependencies),
        T(dependencies_other_paths),
        T(dependencies_fan_in),
        T(dependencies_when_ended),
        T(worker_starts_only_young_holds),
        T(worker_name_in_use),
        T(worker_resumes_own_jobs),
        T(worker_stop_from_thread),
        T(worker_bad_options),
#undef T
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (scratch_remove(tmpdir) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return failed;
}
