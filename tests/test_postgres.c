/*
 * test_postgres.c - what only the PostgreSQL engine promises: the claim of
 * each order is an index scan of the ready-row index with no Sort, also
 * beside 100,000 done rows, and claims never more than asked; expired-lease
 * rescue and the drain check scan jobs_running in order, a worker's start
 * rescue reads it on a table never analyzed, and group
 * acknowledgements look rows up by id whatever ANALYZE saw; two hosts
 * running tq init at once are safe; a plain INSERT with a bad queue name
 * fails; a version 1 store migrates. Needs TQ_TEST_PG_URL (CTest starts a
 * throwaway cluster).
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/engine/engine.h"
#include "upgrade.h"

static const char *base;

static PGconn *pg(void)
{
    PGconn *c = PQconnectdb(base);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect: %s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static void exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

/* The plan of EXPLAIN (COSTS OFF) sql, one line per row, into plan. */
static void explain(PGconn *c, const char *sql, char *plan, size_t size)
{
    size_t len = strlen(sql) + 32;
    char *text = malloc(len);
    assert_non_null(text);
    snprintf(text, len, "EXPLAIN (COSTS OFF) %s", sql);
    PGresult *r = PQexec(c, text);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%.200s: %s", text, PQerrorMessage(c));
    free(text);
    plan[0] = '\0';
    for (int i = 0; i < PQntuples(r); i++) {
        strncat(plan, PQgetvalue(r, i, 0), size - strlen(plan) - 2);
        strcat(plan, "\n");
    }
    PQclear(r);
}

/* sql fails with SQLSTATE state. */
static void expect_refused(PGconn *c, const char *sql, const char *state)
{
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SQLSTATE), state);
    PQclear(r);
}

/* The store of schema, made older by the caller: opening it asks for tq
 * init, which brings it up to date. Its URL goes to url; the handle that ran
 * the init is returned open. */
static tq *upgraded(char *url, size_t len, const char *schema)
{
    tq *db;
    snprintf(url, len, "%s&tq_schema=%s", base, schema);
    assert_int_equal(tq_open(&db, url, NULL), TQ_ESCHEMA); /* asks for tq init */
    tq_close(db);
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    assert_int_equal(tq_open(&db, url, &o), 0);
    assert_int_equal(tq_init(db), 0);
    return db;
}

/* sql returns one row whose columns read, in order, as want[]. */
static void expect_row(PGconn *c, const char *sql, int n, const char *const *want)
{
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    for (int i = 0; i < n; i++)
        assert_string_equal(PQgetvalue(r, 0, i), want[i]);
    PQclear(r);
}

static tq *store(const char *schema)
{
    char url[512];
    tq *db = NULL;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    snprintf(url, sizeof url, "%s&tq_schema=%s", base, schema);
    PGconn *c = pg();
    char drop[128];
    snprintf(drop, sizeof drop, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
    exec(c, drop);
    PQfinish(c);
    if (tq_open(&db, url, &o) || tq_init(db))
        fail_msg("store %s: %s", schema, tq_errmsg(db));
    return db;
}

/* Engine SQL t with "TQ." standing for schema s. */
static char *in_schema(const char *t, const char *s)
{
    char *out = malloc(strlen(t) * 2 + 1), *o = out;
    for (const char *p = t; *p;) {
        if (strncmp(p, "TQ.", 3) == 0) {
            o += sprintf(o, "%s.", s);
            p += 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

/* A queue name as long as tq bench's: it makes the FIFO ready index the
 * bigger of the two, which is what tipped an unanalyzed claim plan. */
#define LONG_QUEUE "bench.1795374808.28451"

/* The plan of a claim of queue in schema, as a worker runs it: in an
 * exchange, after its planner settings (EXPLAIN only: nothing is claimed).
 * kind: 0 without limits, 1 limited, 2 a chain's, 3 limited without groups,
 * 4 a rate's with its tokens taken (tq__postgres_claim_sql). */
static void claim_plan(PGconn *c, const char *schema, const char *queue, tq_order order,
                       int kind, char *plan, size_t size)
{
    char *q = in_schema(tq__postgres_claim_sql(order, kind), schema);
    char *prep = malloc(strlen(q) + 256);
    assert_non_null(prep);
    /* A chain's claim (CLAIM_CHAIN; LIFO has none) takes its length. */
    const int chain = kind == 2 && order != TQ_LIFO;
    sprintf(prep, "PREPARE claim (text, int8, text, int8, int4, bool, int8%s) AS %s",
            chain ? ", int8" : "", q);
    free(q);
    exec(c, prep);
    sprintf(prep, "EXECUTE claim ('%s', 10, 'w', 30000000, 3, true, 0%s)", queue,
            chain ? ", 4" : "");
    exec(c, "BEGIN");
    exec(c, tq__postgres_plan_sql());
    explain(c, prep, plan, size);
    exec(c, "COMMIT");
    exec(c, "DEALLOCATE claim");
    free(prep);
}

/* Whether a limited claim's plan looks its picks up by id (PICK): jobs_pkey
 * with the ids as its condition. */
static int picks_by_id(const char *plan)
{
    const char *p = strstr(plan, "Index Scan using jobs_pkey on jobs j\n");
    if (!p)
        return 0;
    p = strchr(p, '\n') + 1;
    p += strspn(p, " ");
    return strncmp(p, "Index Cond: (id = ANY ", 22) == 0;
}

static void check_plans(PGconn *c, const char *schema, const char *queue,
                        const char *when)
{
    static const char *const want[] = {"jobs_ready_fifo", "jobs_ready_lifo",
                                       "jobs_ready_"};
    for (int order = TQ_FIFO; order <= TQ_UNORDERED; order++) {
        char plan[8192];
        /* The plain claim, and a rate's once its tokens were taken (kind 4,
         * CLAIM_RATE). */
        for (int kind = 0; kind <= 4; kind += 4) {
            claim_plan(c, schema, queue, (tq_order)order, kind, plan, sizeof plan);
            if (strstr(plan, "Sort") || strstr(plan, "Seq Scan on jobs") ||
                !strstr(plan, want[order]) || !strstr(plan, "LockRows") ||
                !strstr(plan, "CTE Scan on picked"))
                fail_msg("%s, order %s, kind %d: unexpected plan:\n%s", when,
                         tq_order_name((tq_order)order), kind, plan);
        }
        /* The limited claim: the same ordered index scan for its candidates
         * (LIFO sorts only those, at most 4 x a batch + 32; the others only
         * the jobs without a group at the head and the groups' first jobs,
         * found in jobs_ready_group), the running rows through
         * jobs_running; no table scan. The orders but LIFO look their
         * picks up by id (PICK says what else a planner did). */
        /* Without a group limit (kind 3): as the plain claim, and the
         * running rows (max_running) through jobs_running. */
        claim_plan(c, schema, queue, (tq_order)order, 3, plan, sizeof plan);
        if (strstr(plan, "Sort") || strstr(plan, "Seq Scan") || strstr(plan, "Bitmap") ||
            !strstr(plan, want[order]) || !strstr(plan, "LockRows") ||
            !strstr(plan, "Index Scan using jobs_running on jobs") ||
            !strstr(plan, "CTE Scan on picked"))
            fail_msg("%s, order %s, limited without groups: unexpected plan:\n%s", when,
                     tq_order_name((tq_order)order), plan);
        for (int kind = 1; kind <= 2; kind++) {
            claim_plan(c, schema, queue, (tq_order)order, kind, plan, sizeof plan);
            if (strstr(plan, "Seq Scan") || strstr(plan, "Bitmap") ||
                !strstr(plan, want[order]) || !strstr(plan, "LockRows") ||
                (order != TQ_LIFO && !strstr(plan, "jobs_ready_group on jobs")) ||
                !strstr(plan, "Index Scan using jobs_running on jobs") ||
                !strstr(plan, "CTE Scan on picked") ||
                (order != TQ_LIFO && !picks_by_id(plan)))
                fail_msg("%s, order %s, %s: unexpected plan:\n%s", when,
                         tq_order_name((tq_order)order), kind == 1 ? "limited" : "chain",
                         plan);
        }
    }
}

static void claim_plans_use_ready_index(void **state)
{
    (void)state;
    tq *db = store("plans");
    PGconn *c = pg();
    check_plans(c, "plans", "q", "empty table");
    exec(c, "INSERT INTO plans.jobs (queue, state, payload, attempts, started_at,"
            " finished_at) SELECT 'q', 'done', 'p', 1, now(), now()"
            " FROM generate_series(1, 100000)");
    exec(c, "INSERT INTO plans.jobs (queue, payload) VALUES ('q', 'r1'), ('q', 'r2')");
    check_plans(c, "plans", "q", "100000 done rows");
    exec(c, "ANALYZE plans.jobs");
    check_plans(c, "plans", "q", "100000 done rows, analyzed");
    PQfinish(c);
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), 0);
    assert_int_equal(n, 2);
    assert_string_equal((char *)jobs[0].payload, "r1");
    tq_job_array_free(jobs, n);
    tq_close(db);

    /* A burst into a table with no statistics yet (a new queue table, or one
     * analyzed between bursts): the planner expects one ready row, so reading
     * them all through the other ready index and sorting them looks as cheap
     * as the ordered scan (with a long queue name the FIFO index is the
     * bigger one, and that tips it), and would sort the whole backlog for
     * every claim. */
    db = store("burst");
    c = pg();
    for (int i = 0; i < 20; i++)
        exec(c, "INSERT INTO burst.jobs (queue, payload) SELECT"
                " '" LONG_QUEUE "', 'b' FROM generate_series(1, 1000)");
    check_plans(c, "burst", LONG_QUEUE, "20000 ready rows, no statistics");
    PQfinish(c);
    tq_close(db);
}

/* Many claimers at once, each asking for k: nobody gets more than k, no job
 * is handed out twice, and together they get them all. */
typedef struct claimer {
    char url[512];
    int k, got, over;
    int64_t ids[4000];
} claimer;

/* A claiming thread's own handle on the store at url (NULL if it did not
 * open) and its worker name, made of its argument arg. */
static tq *thread_open(const char *url, const void *arg, char *name, size_t len)
{
    tq *db = NULL;
    snprintf(name, len, "w%p", arg);
    if (tq_open(&db, url, NULL)) {
        tq_close(db);
        return NULL;
    }
    return db;
}

static void *claim_loop(void *arg)
{
    claimer *c = arg;
    char name[32];
    tq *db = thread_open(c->url, arg, name, sizeof name);
    if (!db)
        return NULL;
    for (;;) {
        tq_job *jobs;
        size_t n;
        if (tq_job_claim(&jobs, &n, db, "lim", name, (size_t)c->k))
            break;
        if (n == 0)
            break;
        if ((int)n > c->k)
            c->over++;
        for (size_t i = 0; i < n && c->got < 4000; i++)
            c->ids[c->got++] = jobs[i].id;
        tq_job_array_free(jobs, n);
    }
    tq_close(db);
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A queue whose only limit is a rate: a worker's claim (which holds its
 * jobs) takes its rows first and its tokens after them (CLAIM_RATE,
 * rate_take); a claim that starts its jobs (tq_job_claim) takes the tokens
 * as it counts them. Claimers of both kinds racing on one queue take no
 * more than the rate allows, and no job twice; the jobs a claim finds no
 * token for go back to ready, unspent. */
typedef struct rate_claimer {
    char url[512];
    int64_t until_us;
    int holds, got, failed;
    int64_t ids[2000];
} rate_claimer;

static int64_t mono_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* A claim as a worker makes it of a queue it knows has a rate and no other
 * limit: its jobs held, not started. */
static int hold_claim(tq *db, const char *queue, size_t max, tq_job **jobs, size_t *n,
                      tq__claim *c)
{
    *c = (tq__claim){.queue = queue,
                     .order = TQ_FIFO,
                     .lease_us = 3600000000LL,
                     .max_attempts = 3,
                     .max = max,
                     .limited = 1,
                     .rate = 1};
    return db->engine->exchange(db, "holder", NULL, 0, c, jobs, n);
}

static void *rate_loop(void *arg)
{
    rate_claimer *c = arg;
    char name[32];
    tq *db = thread_open(c->url, arg, name, sizeof name);
    if (!db) {
        c->failed = 1;
        return NULL;
    }
    while (mono_us() < c->until_us) {
        tq_job *jobs;
        size_t n;
        tq__claim cl;
        if (c->holds ? hold_claim(db, "r", 50, &jobs, &n, &cl)
                     : tq_job_claim(&jobs, &n, db, "r", name, 50)) {
            c->failed = 1;
            break;
        }
        for (size_t i = 0; i < n && c->got < 2000; i++)
            c->ids[c->got++] = jobs[i].id;
        tq_job_array_free(jobs, n);
    }
    tq_close(db);
    return NULL;
}

/* A worker's claim of up to 10 of queue "back", from a thread, while
 * session c holds the queue's lock: it takes its rows and waits for the
 * lock; then c runs between (an UPDATE) and lets go. */
typedef struct back_claim {
    const char *url;
    int rc;
    size_t n;
} back_claim;

static void *back_loop(void *arg)
{
    back_claim *b = arg;
    tq *db = NULL;
    tq_job *jobs = NULL;
    tq__claim cl;
    b->rc = tq_open(&db, b->url, NULL);
    if (!b->rc)
        b->rc = hold_claim(db, "back", 10, &jobs, &b->n, &cl);
    if (!b->rc)
        tq_job_array_free(jobs, b->n);
    tq_close(db);
    return NULL;
}

static int64_t count_of(PGconn *c, const char *sql);

static size_t claim_back_around(PGconn *c, const char *url, const char *between)
{
    exec(c, "SELECT pg_advisory_lock('rates.queues'::regclass::oid::int4,"
            " hashtext('back'))");
    back_claim bc = {.url = url};
    pthread_t t;
    pthread_create(&t, NULL, back_loop, &bc);
    for (int i = 0;
         count_of(
             c,
             "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
             " AND NOT granted AND classid = 'rates.queues'::regclass::oid"
             " AND objid::int8 = (hashtext('back')::int8 + 4294967296) % 4294967296") ==
         0;
         i++) {
        if (i == 1000)
            fail_msg("the claim never waited for the queue's lock");
        usleep(10000);
    }
    exec(c, between);
    exec(c, "SELECT pg_advisory_unlock('rates.queues'::regclass::oid::int4,"
            " hashtext('back'))");
    pthread_join(t, NULL);
    assert_int_equal(bc.rc, 0);
    return bc.n;
}

static int64_t count_of(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    int64_t v = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static void rate_claims_take_tokens_after_rows(void **state)
{
    (void)state;
    enum { N = 3000, T = 6 };
    tq *db = store("rates");
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_RATE;
    o.rate_limit = 2000; /* a burst of 20, then 1,960 a second */
    o.rate_period_us = 1000000;
    assert_int_equal(tq_queue_set(db, "r", &o), 0);
    tq_payload items[N];
    for (int i = 0; i < N; i++)
        items[i] = (tq_payload){"x", 1};
    assert_int_equal(tq_job_enqueue_batch(NULL, db, "r", items, N, NULL), 0);
    static rate_claimer cs[T];
    pthread_t th[T];
    const int64_t t0 = mono_us();
    for (int i = 0; i < T; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        snprintf(cs[i].url, sizeof cs[i].url, "%s&tq_schema=rates", base);
        cs[i].until_us = t0 + 400000;
        cs[i].holds = i % 3 != 0; /* two of three as workers claim */
        pthread_create(&th[i], NULL, rate_loop, &cs[i]);
    }
    static int64_t all[T * 2000];
    int total = 0, held = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(cs[i].failed, 0);
        for (int k = 0; k < cs[i].got; k++)
            all[total++] = cs[i].ids[k];
        held += cs[i].holds ? cs[i].got : 0;
    }
    const int64_t took = mono_us() - t0;
    /* The burst, and what the rate refills in the time they claimed. */
    const int64_t most = 20 + took * 1960 / 1000000 + 1;
    print_message(
        "%d claimed (%d held) in %lld ms by %d claimers (the rate allows %lld)\n", total,
        held, (long long)took / 1000, T, (long long)most);
    assert_true(held > 20);
    assert_true(total <= most);
    qsort(all, (size_t)total, sizeof all[0], cmp64);
    for (int i = 1; i < total; i++)
        assert_true(all[i] != all[i - 1]);
    PGconn *c = pg();
    /* What they claimed is running, the rest ready: none went back spent. */
    assert_int_equal(count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'r'"
                                 " AND state = 'running'"),
                     total);
    assert_int_equal(count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'r'"
                                 " AND state = 'ready' AND attempts = 0"),
                     N - total);

    /* A full bucket of 10 and 30 jobs: a claim of up to 30 takes the first
     * 10 and says when the next token is due. */
    o.rate_limit = 1000;
    assert_int_equal(tq_queue_set(db, "few", &o), 0);
    for (int i = 0; i < 30; i++)
        assert_int_equal(tq_job_enqueue(NULL, db, "few", "f", 1, NULL), 0);
    const int64_t first =
        count_of(c, "SELECT min(id) FROM rates.jobs WHERE queue = 'few'");
    tq_job *jobs;
    size_t n;
    tq__claim cl;
    assert_int_equal(hold_claim(db, "few", 30, &jobs, &n, &cl), 0);
    assert_int_equal(n, 10);
    for (size_t i = 0; i < n; i++)
        assert_true(jobs[i].id >= first && jobs[i].id <= first + 9 &&
                    !jobs[i].started_at);
    tq_job_array_free(jobs, n);
    assert_true(cl.rate_found && cl.rate_wait_us > 0);
    assert_int_equal(count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'few'"
                                 " AND state = 'running'"),
                     10);
    assert_int_equal(count_of(c, "SELECT floor(rate_tokens) FROM rates.queues"
                                 " WHERE name = 'few'"),
                     0);
    /* From an empty bucket (no refill for an hour) nothing is claimed,
     * nothing written, and the answer says when the next token is due. */
    exec(c, "UPDATE rates.queues SET rate_tokens = 0, rate_at = now() + interval '1 hour'"
            " WHERE name = 'few'");
    assert_int_equal(hold_claim(db, "few", 30, &jobs, &n, &cl), 0);
    tq_job_array_free(jobs, n);
    assert_int_equal(n, 0);
    assert_true(cl.rate_found && cl.rate_wait_us > 0);
    assert_int_equal(count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'few'"
                                 " AND state = 'ready' AND claims = 0"),
                     20);

    /* Tokens short at the take (another claim took them meanwhile): the
     * jobs beyond them go back as they were before the claim. A session
     * holds the queue's lock while the claim takes its rows and waits for
     * it; meanwhile the bucket is left 3 tokens and no refill (its time an
     * hour ahead). The last 4 jobs had two claims end with no start known,
     * so the claim charged them an attempt (CHARGE) and they come first
     * (tq__jobs_sort): 3 are kept, and the 4th's charge is undone. */
    assert_int_equal(tq_queue_set(db, "back", &o), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(tq_job_enqueue(NULL, db, "back", "b", 1, NULL), 0);
    exec(c, "UPDATE rates.jobs SET unknown_starts = 2 WHERE id > (SELECT max(id) - 4"
            " FROM rates.jobs WHERE queue = 'back')");
    assert_int_equal(
        claim_back_around(c, cs[0].url,
                          "UPDATE rates.queues SET rate_tokens = 3, rate_at ="
                          " now() + interval '1 hour' WHERE name = 'back'"),
        3);
    assert_int_equal(count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'back'"
                                 " AND state = 'running' AND claims = 1 AND attempts = 1"
                                 " AND id > (SELECT max(id) - 4 FROM rates.jobs"
                                 " WHERE queue = 'back')"),
                     3);
    assert_int_equal(count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'back'"
                                 " AND state = 'ready' AND claims = 0 AND attempts = 0"
                                 " AND started_at IS NULL AND lease_until IS NULL"),
                     7);
    assert_int_equal(
        count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'back'"
                    " AND state = 'ready' AND unknown_starts = 2 AND id >"
                    " (SELECT max(id) - 4 FROM rates.jobs WHERE queue = 'back')"),
        1);

    /* Paused between: none kept, all back as they were. */
    exec(c, "UPDATE rates.queues SET rate_tokens = 10 WHERE name = 'back'");
    assert_int_equal(claim_back_around(c, cs[0].url,
                                       "UPDATE rates.queues SET paused = true"
                                       " WHERE name = 'back'"),
                     0);
    assert_int_equal(count_of(c, "SELECT count(*) FROM rates.jobs WHERE queue = 'back'"
                                 " AND state = 'ready' AND claims = 0 AND attempts = 0"),
                     7);

    /* A queue without a rate (the claimer's settings are stale): all kept. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(tq_job_enqueue(NULL, db, "none", "n", 1, NULL), 0);
    assert_int_equal(hold_claim(db, "none", 30, &jobs, &n, &cl), 0);
    tq_job_array_free(jobs, n);
    assert_int_equal(n, 5);
    assert_true(!cl.rate_found && cl.rate_wait_us == 0);
    PQfinish(c);
    tq_close(db);
}

/* 100,000 jobs of queue in schema's table that worker "w" runs, their
 * leases 1 ms apart from lease_from (an SQL time) on; then ANALYZE. */
static void running_rows(PGconn *c, const char *schema, const char *queue,
                         const char *lease_from)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s.jobs (queue, state, payload, attempts, worker, started_at,"
             " lease_until) SELECT '%s', 'running', 'p', 1, 'w', now(),"
             " %s + g * interval '1 ms' FROM generate_series(1, 100000) g",
             schema, queue, lease_from);
    exec(c, sql);
    snprintf(sql, sizeof sql, "ANALYZE %s.jobs", schema);
    exec(c, sql);
}

/* Every worker rescues expired leases each second: the statement must walk
 * jobs_running in order as an index scan (which marks the entries of dead
 * row versions), never a bitmap scan visiting every entry's heap page, also
 * when the index holds many rows. */
static void rescue_plan_is_ordered_index_scan(void **state)
{
    (void)state;
    tq *db = store("resplan");
    PGconn *c = pg();
    running_rows(c, "resplan", "q", "now() - interval '1 hour'");
    char *q = in_schema(tq__postgres_rescue_sql(), "resplan"), plan[8192];
    explain(c, q, plan, sizeof plan);
    free(q);
    if (!strstr(plan, "Index Scan using jobs_running") || strstr(plan, "Bitmap") ||
        strstr(plan, "Sort"))
        fail_msg("unexpected rescue plan:\n%s", plan);
    /* And it puts back all of them, more than one statement's limit. */
    int64_t n = 0;
    assert_int_equal(tq_rescue_expired(&n, db), 0);
    assert_int_equal(n, 100000);
    expect_row(c,
               "SELECT count(*) FROM resplan.jobs WHERE state = 'ready'"
               " AND lease_until IS NULL AND attempts = 1",
               1, (const char *[]){"100000"});
    PQfinish(c);
    tq_close(db);
}

/* One int8 from sql (the first column of its first row). */
static long long query_ll(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* A worker's start puts back what an earlier process of its name left
 * running. On a table never analyzed the planner took 99.5 % of the rows
 * for leased ones and read the whole table, for every worker that started
 * (100,000 rows: ~250 ms each). It must read jobs_running, and take only
 * its own rows. */
/* Session c inserts n jobs into settle.jobs in a transaction left open:
 * its pid, start and id, and the ids, as an enqueue's insert returns them. */
static void open_insert(PGconn *c, int n, int *pid, int64_t *began, int64_t *xid,
                        int64_t *ids)
{
    exec(c, "BEGIN");
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO settle.jobs (queue, payload) SELECT 'q', 'p'"
             " FROM generate_series(1, %d) RETURNING id,"
             " (extract(epoch FROM now()) * 1000000)::int8, txid_current()",
             n);
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    for (int i = 0; i < n; i++)
        ids[i] = atoll(PQgetvalue(r, i, 0));
    *began = atoll(PQgetvalue(r, 0, 1));
    *xid = atoll(PQgetvalue(r, 0, 2));
    PQclear(r);
    *pid = PQbackendPID(c);
}

/*
 * The settling of an enqueue whose COMMIT lost its connection
 * (enqueue_settle), one look at a time, against real transactions: one
 * still open in its session is ended and asked about again; a committed
 * one is stored, also once its rows were deleted (a delete-done queue's
 * worker ran them, a prune); an aborted one stored nothing; and rows that
 * are someone else's (the same ids, another creation time) do not count.
 */
static void enqueue_settles_after_a_lost_commit(void **state)
{
    (void)state;
    tq *db = store("settle");
    PGconn *a = pg();
    int pid;
    int64_t began, xid, ids[3];
    /* Open: its session is ended, and then it never committed. */
    open_insert(a, 3, &pid, &began, &xid, ids);
    assert_int_equal(tq__postgres_settle_look(db, pid, began, xid, "q", ids, 3), 0);
    int found = 0; /* again while the ended session is still going */
    for (int i = 0; i < 500 && !found; i++) {
        if (i)
            usleep(10000);
        found = tq__postgres_settle_look(db, pid, began, xid, "q", ids, 3);
    }
    assert_int_equal(found, 2);
    PQfinish(a);
    a = pg();
    expect_row(a, "SELECT count(*) FROM settle.jobs", 1, (const char *[]){"0"});
    /* Committed: stored, with its rows or without. */
    open_insert(a, 3, &pid, &began, &xid, ids);
    exec(a, "COMMIT");
    assert_int_equal(tq__postgres_settle_look(db, pid, began, xid, "q", ids, 3), 1);
    exec(a, "DELETE FROM settle.jobs");
    assert_int_equal(tq__postgres_settle_look(db, pid, began, xid, "q", ids, 3), 1);
    /* Rolled back: not stored, though rows of another time hold its ids. */
    open_insert(a, 2, &pid, &began, &xid, ids);
    exec(a, "ROLLBACK");
    char sql[200];
    snprintf(sql, sizeof sql,
             "INSERT INTO settle.jobs (id, queue, payload) OVERRIDING SYSTEM VALUE"
             " VALUES (%lld, 'q', 'x'), (%lld, 'q', 'x')",
             (long long)ids[0], (long long)ids[1]);
    exec(a, sql);
    assert_int_equal(tq__postgres_settle_look(db, pid, began, xid, "q", ids, 2), 2);
    PQfinish(a);
    tq_close(db);
}

static void worker_rescue_reads_running_index(void **state)
{
    (void)state;
    tq *db = store("wresc");
    tq_close(db);
    PGconn *c = pg();
    exec(c, "ALTER TABLE wresc.jobs SET (autovacuum_enabled = false)");
    exec(c, "INSERT INTO wresc.jobs (queue, state, payload, attempts, started_at,"
            " finished_at) SELECT 'q', 'done', 'p', 1, now(), now()"
            " FROM generate_series(1, 100000)");
    exec(c, "INSERT INTO wresc.jobs (queue, state, payload, attempts, worker,"
            " worker_since, started_at, lease_until) SELECT 'q', 'running', 'p', 1,"
            " CASE WHEN g <= 3 THEN 'w' ELSE 'v' END, 0, now(),"
            " now() + interval '1 h' FROM generate_series(1, 5) g");
    char url[512];
    snprintf(url, sizeof url, "%s&tq_schema=wresc", base);
    assert_int_equal(tq_open(&db, url, NULL), 0);
    int64_t n = -1;
    assert_int_equal(db->engine->rescue(db, "w", 0, &n), 0);
    assert_int_equal(n, 3);
    tq_close(db); /* its backend reports its statistics as it ends */
    long long scans = 0;
    for (int i = 0; i < 200 && scans == 0; i++) {
        exec(c, "SELECT pg_stat_clear_snapshot()");
        scans =
            query_ll(c, "SELECT idx_scan FROM pg_stat_user_indexes"
                        " WHERE schemaname = 'wresc' AND indexrelname = 'jobs_running'");
        if (scans == 0)
            usleep(50000);
    }
    if (scans == 0)
        fail_msg("the worker's rescue did not read jobs_running");
    expect_row(c,
               "SELECT seq_tup_read FROM pg_stat_user_tables"
               " WHERE schemaname = 'wresc' AND relname = 'jobs'",
               1, (const char *[]){"0"});
    /* Only now: this count reads the whole table itself, and this session
     * reports that to the statistics as soon as it goes idle a second
     * after its last report. */
    expect_row(c,
               "SELECT count(*) FILTER (WHERE worker = 'w' AND state = 'ready'),"
               " count(*) FILTER (WHERE worker = 'v' AND state = 'running')"
               " FROM wresc.jobs",
               2, (const char *[]){"3", "2"});
    PQfinish(c);
}

/* Prepares sql (with TQ. standing for schema) as name_args, e.g. "p (text)",
 * and makes the session plan it as a worker's connection ends up doing:
 * one generic plan, whatever the parameters. */
static void prepare_generic(PGconn *c, const char *name_args, const char *sql,
                            const char *schema)
{
    char *q = in_schema(sql, schema), prep[2048];
    snprintf(prep, sizeof prep, "PREPARE %s AS %s", name_args, q);
    free(q);
    exec(c, prep);
    exec(c, "SET plan_cache_mode = force_generic_plan");
}

/* Idle draining workers ask whether anything is ready or running: the
 * running half must be an ordered scan of jobs_running from the newest
 * lease (its generic plan, as the worker runs it), not a bitmap scan, and
 * the answer must be right for each queue. */
static void pending_plan_is_ordered_index_scan(void **state)
{
    (void)state;
    tq *db = store("pendplan");
    PGconn *c = pg();
    running_rows(c, "pendplan", "busy", "now()");
    char plan[8192];
    prepare_generic(c, "pend (text)", tq__postgres_pending_sql(), "pendplan");
    explain(c, "EXECUTE pend ('idle')", plan, sizeof plan);
    if (!strstr(plan, "Index Scan Backward using jobs_running") || strstr(plan, "Bitmap"))
        fail_msg("unexpected drain-check plan:\n%s", plan);
    int pending = -1;
    assert_int_equal(db->engine->pending(db, "busy", &pending), 0);
    assert_int_equal(pending, 1);
    assert_int_equal(db->engine->pending(db, "idle", &pending), 0);
    assert_int_equal(pending, 0);
    assert_int_equal(tq_job_enqueue(NULL, db, "idle", "x", 1, NULL), 0);
    assert_int_equal(db->engine->pending(db, "idle", &pending), 0);
    assert_int_equal(pending, 1);
    PQfinish(c);
    tq_close(db);
}

/* A group acknowledgement names its rows by id: its plan must look each
 * one up by the primary key, also when the statistics were taken while
 * nothing ran (autovacuum analyzes between bursts) and thousands of rows
 * are running now. Planned from jobs_running, every ack walked all the
 * running rows: 4 workers fell from ~47k to ~20k jobs/s. */
static void ack_plan_is_id_lookup(void **state)
{
    (void)state;
    tq *db = store("ackplan");
    PGconn *c = pg();
    exec(c, "INSERT INTO ackplan.jobs (queue, state, payload, attempts, worker,"
            " started_at, finished_at) SELECT 'q', 'done', 'p', 1, 'w', now(), now()"
            " FROM generate_series(1, 100000)");
    exec(c, "ANALYZE ackplan.jobs");
    exec(c, "INSERT INTO ackplan.jobs (queue, state, payload, attempts, worker,"
            " started_at, lease_until, claims) SELECT 'q', 'running', 'p', 1, 'w', now(),"
            " now() + interval '1 hour', 1 FROM generate_series(1, 5000)");
    char plan[8192];
    prepare_generic(c, "ack (text, int8[], int8[], int8[])", tq__postgres_ack_sql(),
                    "ackplan");
    explain(c, "EXECUTE ack ('w', '{1,2}', '{1,1}', '{0,0}')", plan, sizeof plan);
    if (!strstr(plan, "using jobs_pkey") || strstr(plan, "jobs_running"))
        fail_msg("unexpected ack plan:\n%s", plan);
    /* The statement still fences: only the running rows of worker w under
     * the given claim are acknowledged. */
    exec(c, "UPDATE ackplan.jobs SET worker = 'other' WHERE id = 100002");
    PGresult *r = PQexec(c, "EXECUTE ack ('w', '{100001,100002,100003,1}', '{1,1,2,1}',"
                            " '{0,0,0,0}')");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    assert_string_equal(PQgetvalue(r, 0, 0), "1");
    PQclear(r);
    expect_row(c,
               "SELECT string_agg(id || ':' || state, ',' ORDER BY id) FROM ackplan.jobs"
               " WHERE id IN (1, 100001, 100002, 100003)",
               1, (const char *[]){"1:done,100001:done,100002:running,100003:running"});
    PQfinish(c);
    tq_close(db);
}

/* The same on a table with no statistics yet, as a worker's first
 * acknowledgements are planned (custom plans, inside an exchange): the
 * planner expects one running row, and without the exchange's settings it
 * scanned the table and compared every running row with every
 * acknowledged one. */
static void ack_plan_without_statistics(void **state)
{
    (void)state;
    enum { RUNNING = 2049 };
    tq *db = store("ackfresh");
    PGconn *c = pg();
    for (int i = 0; i < 20; i++)
        exec(c, "INSERT INTO ackfresh.jobs (queue, payload) SELECT"
                " '" LONG_QUEUE "', 'p' FROM generate_series(1, 1000)");
    exec(c, "UPDATE ackfresh.jobs SET state = 'running', worker = 'w', attempts = 1,"
            " started_at = now(), lease_until = now() + interval '1 hour', claims = 1"
            " WHERE id <= 2049");
    char *q = in_schema(tq__postgres_ack_sql(), "ackfresh"), prep[2048], plan[16384];
    snprintf(prep, sizeof prep, "PREPARE ack (text, int8[], int8[], int8[]) AS %s", q);
    free(q);
    exec(c, prep);
    exec(c, "SET plan_cache_mode = force_custom_plan");
    /* A worker's usual group, and the most it may hold at once. */
    static const int sizes[] = {500, RUNNING};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        static char ids[RUNNING * 6], atts[RUNNING * 2 + 2], run[RUNNING * 10 + 64];
        char *pi = ids, *pa = atts;
        for (int i = 1; i <= sizes[k]; i++) {
            pi += sprintf(pi, "%s%d", i > 1 ? "," : "{", i);
            pa += sprintf(pa, "%s1", i > 1 ? "," : "{");
        }
        snprintf(run, sizeof run, "EXECUTE ack ('w', '%s}', '%s}', '%s}')", ids, atts,
                 atts);
        exec(c, "BEGIN");
        exec(c, tq__postgres_plan_sql());
        exec(c, tq__postgres_group_plan_sql());
        explain(c, run, plan, sizeof plan);
        exec(c, "ROLLBACK");
        if (!strstr(plan, "Index Scan using jobs_pkey") || strstr(plan, "Seq Scan") ||
            strstr(plan, "Join Filter") || !strstr(plan, "Index Cond"))
            fail_msg("unexpected plan acknowledging %d jobs:\n%s", sizes[k], plan);
    }
    PQfinish(c);
    tq_close(db);
}

static void claims_never_exceed_limit(void **state)
{
    (void)state;
    enum { N = 3000, T = 6 };
    tq *db = store("lim");
    tq_payload items[N];
    for (int i = 0; i < N; i++)
        items[i] = (tq_payload){"x", 1};
    assert_int_equal(tq_job_enqueue_batch(NULL, db, "lim", items, N, NULL), 0);
    tq_close(db);
    static claimer cs[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        snprintf(cs[i].url, sizeof cs[i].url, "%s&tq_schema=lim", base);
        cs[i].k = 1 + i * 7;
        pthread_create(&th[i], NULL, claim_loop, &cs[i]);
    }
    static int64_t all[N * 2];
    int total = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(cs[i].over, 0);
        for (int k = 0; k < cs[i].got; k++)
            all[total++] = cs[i].ids[k];
    }
    assert_int_equal(total, N);
    qsort(all, (size_t)total, sizeof all[0], cmp64);
    for (int i = 1; i < total; i++)
        assert_true(all[i] != all[i - 1]);
}

static void *init_store(void *arg)
{
    tq *db = NULL;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    intptr_t rc = tq_open(&db, arg, &o);
    if (!rc)
        rc = tq_init(db);
    tq_close(db);
    return (void *)rc;
}

static void concurrent_init(void **state)
{
    (void)state;
    char url[512];
    PGconn *c = pg();
    exec(c, "DROP SCHEMA IF EXISTS racy CASCADE");
    PQfinish(c);
    snprintf(url, sizeof url, "%s&tq_schema=racy", base);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, init_store, url);
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        assert_int_equal((intptr_t)rc, 0);
    }
    tq *db = NULL;
    assert_int_equal(tq_open(&db, url, NULL), 0);
    int64_t id;
    assert_int_equal(tq_job_enqueue(&id, db, "q", "x", 1, NULL), 0);
    tq_close(db);
}

/* The name rule is kept where queues are made: a plain INSERT of a job with
 * a bad queue name fails (the trigger adds the name to TQ.queues, which
 * checks it) and leaves nothing behind. */
static void plain_inserts_check_queue_names(void **state)
{
    (void)state;
    tq *db = store("names");
    PGconn *c = pg();
    static const char *const bad[] = {
        "INSERT INTO names.jobs (queue, payload) VALUES ('bad name', 'x')",
        "INSERT INTO names.jobs (queue, payload) VALUES ('ok', 'x'), ('no;', 'y')",
        "INSERT INTO names.jobs (queue, payload) VALUES ('', 'x')",
        "INSERT INTO names.jobs (queue, payload) VALUES (repeat('a', 65), 'x')",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refused(c, bad[i], "23514");
    expect_row(c,
               "SELECT (SELECT count(*) FROM names.jobs),"
               " (SELECT count(*) FROM names.queues)",
               2, (const char *[]){"0", "0"});
    exec(c, "INSERT INTO names.jobs (queue, payload) VALUES ('a.b-c_9', 'x')");
    expect_row(c, "SELECT count(*) FROM names.jobs WHERE queue = 'a.b-c_9'", 1,
               (const char *[]){"1"});
    PQfinish(c);
    tq_close(db);
}

/* tq's transactions run at READ COMMITTED, what its statements are
 * written for, whatever the session's default: here serializable, as a
 * role's or database's setting, or a pooled session another client left
 * so, would make it. A trigger records the isolation of the transaction
 * that inserts a job. */
static void transactions_read_committed(void **state)
{
    (void)state;
    tq_close(store("iso"));
    PGconn *c = pg();
    exec(c, "CREATE TABLE iso.seen (level text)");
    exec(c, "CREATE FUNCTION iso.note() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN INSERT INTO iso.seen VALUES"
            " (current_setting('transaction_isolation')); RETURN NEW; END $$");
    exec(c, "CREATE TRIGGER note BEFORE INSERT ON iso.jobs"
            " FOR EACH ROW EXECUTE FUNCTION iso.note()");
    char url[640];
    snprintf(url, sizeof url,
             "%s&options=-c%%20default_transaction_isolation%%3Dserializable"
             "&tq_schema=iso",
             base);
    /* The premise: a session of that URL defaults to serializable. */
    char plain[640];
    snprintf(plain, sizeof plain,
             "%s&options=-c%%20default_transaction_isolation%%3Dserializable", base);
    PGconn *s = PQconnectdb(plain);
    expect_row(s, "SHOW default_transaction_isolation", 1,
               (const char *[]){"serializable"});
    PQfinish(s);
    tq *db = NULL;
    if (tq_open(&db, url, NULL))
        fail_msg("open: %s", tq_errmsg(db));
    int64_t id = 0;
    if (tq_job_enqueue(&id, db, "q", "x", 1, NULL))
        fail_msg("enqueue: %s", tq_errmsg(db));
    tq_close(db);
    expect_row(c, "SELECT string_agg(level, ',') FROM iso.seen", 1,
               (const char *[]){"read committed"});
    PQfinish(c);
}

/* A keyed enqueue whose kept row vanishes between the insert that found
 * the key taken and the look-up of the kept id (a delete-done
 * acknowledgement or a prune committing in between) inserts again instead
 * of reporting a duplicate with id 0. The test makes that happen every
 * time: a statement trigger, fired by the conflicting INSERT, deletes the
 * kept row. */
static void keyed_enqueue_when_the_kept_row_vanishes(void **state)
{
    (void)state;
    tq *db = store("vanish");
    int64_t kept = 0, id = 0;
    assert_int_equal(tq_job_enqueue(&kept, db, "q", "old", 3,
                                    &(tq_enqueue_opts){.version = 1, .key = "k"}),
                     0);
    PGconn *c = pg();
    exec(c, "CREATE FUNCTION vanish.drop_old() RETURNS trigger LANGUAGE plpgsql AS $f$"
            " BEGIN DELETE FROM vanish.jobs WHERE payload = 'old'; RETURN NULL; END $f$;"
            "CREATE TRIGGER drop_old AFTER INSERT ON vanish.jobs"
            "  FOR EACH STATEMENT EXECUTE FUNCTION vanish.drop_old()");
    int rc = tq_job_enqueue(&id, db, "q", "new", 3,
                            &(tq_enqueue_opts){.version = 1, .key = "k"});
    if (rc != 0)
        fail_msg("enqueue -> %d (%s), id %lld", rc, tq_errmsg(db), (long long)id);
    assert_true(id > kept);
    expect_row(c, "SELECT count(*), min(convert_from(payload, 'UTF8')) FROM vanish.jobs",
               2, (const char *[]){"1", "new"});
    PQfinish(c);
    tq_close(db);
}

/* A store made by schema version 1 (regex CHECK on jobs.queue, default
 * table settings, descending LIFO index, jobs_running on state) is brought to the current
 * version by tq init, keeping its jobs. */
/* Takes a store of schema s back to what schema 6 made: migrations 8 and
 * 7 undone, the insert trigger's function as 6 had it. */
/* Undo migrations 18 (what releases a child: its columns and the trigger
 * on them go, and release_children takes its old arguments again; the
 * functions it replaced stay as 18 wrote them, for migration 18 writes
 * them over), 17 (timeouts), 16 (the notifications of jobs ready again
 * and of changes), 15 (the claiming registration), 14 (the group index), 13
 * (dependencies), 12 (the control channel), 11 (periodic jobs) and 10
 * (rate limits). */
#define UNDO_18                                                                          \
    "DROP TRIGGER deps_fixed ON TQ.deps;"                                                \
    "CREATE TRIGGER deps_fixed BEFORE UPDATE OR DELETE ON TQ.deps FOR EACH ROW"          \
    "  EXECUTE FUNCTION TQ.deps_fixed();"                                                \
    "ALTER TABLE TQ.deps DROP COLUMN release_when, DROP COLUMN parent_state;"            \
    "DROP FUNCTION TQ.release_children(int8, text, text);"                               \
    "CREATE FUNCTION TQ.release_children(parent_id int8, channel text) RETURNS void"     \
    "  LANGUAGE sql AS 'SELECT NULL';"
#define UNDO_17                                                                          \
    UNDO_18                                                                              \
    "DROP TRIGGER queues_changed ON TQ.queues;"                                          \
    "CREATE TRIGGER queues_changed AFTER INSERT OR DELETE OR UPDATE OF ord, lease_us,"   \
    "  max_attempts, backoff_base_us, backoff_cap_us, keep_done, paused, max_running,"   \
    "  max_running_per_group, rate_limit, rate_period_us, rate_burst, max_snoozes,"      \
    "  results ON TQ.queues FOR EACH ROW EXECUTE FUNCTION TQ.changed();"                 \
    "ALTER TABLE TQ.queues DROP COLUMN timeout_us, DROP COLUMN retain_done_us,"          \
    "  DROP COLUMN retain_dead_us;"                                                      \
    "ALTER TABLE TQ.jobs DROP COLUMN timeout_us;"
#define UNDO_16                                                                          \
    UNDO_17                                                                              \
    "DROP TRIGGER jobs_ready_again ON TQ.jobs; DROP FUNCTION TQ.ready_again();"          \
    "DROP TRIGGER queues_changed ON TQ.queues;"                                          \
    "DROP TRIGGER schedules_changed ON TQ.schedules; DROP FUNCTION TQ.changed();"
#define UNDO_15                                                                          \
    UNDO_16                                                                              \
    "ALTER TABLE TQ.jobs DROP COLUMN worker_since;"                                      \
    "ALTER TABLE TQ.workers DROP COLUMN reaper_pid;"
#define UNDO_14 UNDO_15 "DROP INDEX TQ.jobs_ready_group;"
#define UNDO_13                                                                          \
    UNDO_14                                                                              \
    "DROP TABLE TQ.deps;"                                                                \
    "DROP TRIGGER jobs_moved ON TQ.jobs; DROP TRIGGER jobs_deleted ON TQ.jobs;"          \
    "DROP FUNCTION TQ.deps_added(); DROP FUNCTION TQ.job_moved();"                       \
    "DROP FUNCTION TQ.job_deleted(); DROP FUNCTION TQ.release_children(int8, text);"     \
    "DROP FUNCTION TQ.dep_blocker(int8, int8); DROP FUNCTION TQ.deps_fixed();"           \
    "DROP INDEX TQ.jobs_waiting;"                                                        \
    "ALTER TABLE TQ.jobs DROP COLUMN nparents, DROP COLUMN waiting_for,"                 \
    "  DROP COLUMN cancelled_by, DROP COLUMN has_children,"                              \
    "  DROP CONSTRAINT jobs_state_check;"                                                \
    "ALTER TABLE TQ.jobs ADD CONSTRAINT jobs_state_check"                                \
    "  CHECK (state IN ('ready','running','done','dead','cancelled'));"
#define UNDO_12                                                                          \
    UNDO_13                                                                              \
    "ALTER TABLE TQ.jobs DROP COLUMN snoozes, DROP COLUMN progress,"                     \
    "  DROP COLUMN progress_text, DROP COLUMN result;"                                   \
    "ALTER TABLE TQ.queues DROP COLUMN max_snoozes, DROP COLUMN results;"
#define UNDO_11                                                                          \
    UNDO_12 "DROP TABLE TQ.schedules;"                                                   \
            "DROP FUNCTION TQ.fire_schedule(text, int8, int8, int8, text, text);"        \
            "ALTER TABLE TQ.jobs DROP COLUMN schedule, DROP COLUMN slot;"
#define UNDO_10                                                                          \
    UNDO_11 "ALTER TABLE TQ.queues DROP COLUMN rate_limit, DROP COLUMN rate_period_us,"  \
            "  DROP COLUMN rate_burst, DROP COLUMN rate_tokens, DROP COLUMN rate_at;"

static void back_to_6(PGconn *c, const char *s)
{
    char *q = in_schema(
        UNDO_10 "ALTER TABLE TQ.jobs DROP COLUMN job_group;"
                "ALTER TABLE TQ.queues DROP COLUMN max_running,"
                "  DROP COLUMN max_running_per_group;"
                "ALTER TABLE TQ.jobs DROP COLUMN traceparent;"
                "DROP FUNCTION TQ.expire_key(text, text);"
                "CREATE OR REPLACE FUNCTION TQ.new_queues() RETURNS trigger"
                "  LANGUAGE plpgsql AS $f$ BEGIN"
                "  INSERT INTO TQ.queues (name) SELECT DISTINCT queue FROM new_jobs"
                "   ON CONFLICT DO NOTHING;"
                "  PERFORM pg_notify('tq_' || TG_TABLE_SCHEMA, q)"
                "   FROM (SELECT DISTINCT queue AS q FROM new_jobs) s;"
                "  RETURN NULL; END $f$;"
                "DROP INDEX TQ.jobs_unique;"
                "ALTER TABLE TQ.jobs DROP COLUMN unique_key,"
                "  DROP COLUMN unique_scope, DROP COLUMN unique_until;",
        s);
    exec(c, q);
    free(q);
}

static void version_1_store_migrates(void **state)
{
    (void)state;
    char url[512];
    tq *db = store("old");
    int64_t id;
    assert_int_equal(tq_job_enqueue(&id, db, "q", "kept", 4, NULL), 0);
    tq_close(db);
    PGconn *c = pg();
    back_to_6(c, "old"); /* then 6 ... 2 */
    exec(c, "ALTER TABLE old.jobs DROP CONSTRAINT jobs_queue_check;"
            "ALTER TABLE old.jobs ADD CONSTRAINT jobs_queue_check"
            "  CHECK (queue ~ '^[A-Za-z0-9_.-]{1,64}$');"
            "ALTER TABLE old.jobs RESET (fillfactor, autovacuum_vacuum_scale_factor,"
            "  autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);"
            "DROP INDEX old.jobs_ready_lifo;"
            "CREATE INDEX jobs_ready_lifo ON old.jobs (queue, priority DESC, id DESC)"
            "  WHERE state = 'ready';"
            "DROP INDEX old.jobs_running;"
            "CREATE INDEX jobs_running ON old.jobs (lease_until) WHERE state = 'running';"
            "ALTER TABLE old.jobs DROP COLUMN claims;"
            "ALTER TABLE old.jobs DROP COLUMN unknown_starts;"
            "ALTER TABLE old.jobs DROP CONSTRAINT jobs_running_leased;"
            "ALTER TABLE old.jobs DROP CONSTRAINT jobs_run_at_finite;"
            "ALTER TABLE old.workers DROP COLUMN host_id;"
            "UPDATE old.meta SET value = '1' WHERE key = 'schema_version'");
    /* What plain SQL could write before version 6, mended by it. */
    exec(c,
         "INSERT INTO old.jobs (id, queue, state, payload, attempts, worker,"
         "  started_at) VALUES (1000, 'q', 'running', 'stranded', 1, 'w', now());"
         "INSERT INTO old.jobs (id, queue, payload, run_at)"
         "  VALUES (1001, 'q', 'past', '-infinity'), (1002, 'q', 'never', 'infinity')");
    db = upgraded(url, sizeof url, "old");
    tq_close(db);
    PGresult *r =
        PQexec(c, "SELECT (SELECT value FROM old.meta WHERE key = 'schema_version'),"
                  " (SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                  "   WHERE conname = 'jobs_queue_check'"
                  "   AND conrelid = 'old.jobs'::regclass),"
                  " (SELECT array_to_string(reloptions, ',') FROM pg_class"
                  "   WHERE oid = 'old.jobs'::regclass),"
                  " (SELECT payload FROM old.jobs ORDER BY id LIMIT 1),"
                  " (SELECT pg_get_indexdef('old.jobs_ready_lifo'::regclass)),"
                  " (SELECT pg_get_indexdef('old.jobs_running'::regclass))");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(atoi(PQgetvalue(r, 0, 0)), TQ__SCHEMA_VERSION);
    assert_null(strstr(PQgetvalue(r, 0, 1), "~"));
    assert_non_null(strstr(PQgetvalue(r, 0, 1), "octet_length"));
    assert_non_null(strstr(PQgetvalue(r, 0, 2), "autovacuum_vacuum_scale_factor"));
    assert_string_equal(PQgetvalue(r, 0, 3), "\\x6b657074");
    assert_non_null(strstr(PQgetvalue(r, 0, 4), "(queue, priority, id)"));
    assert_non_null(strstr(PQgetvalue(r, 0, 5), "WHERE (lease_until IS NOT NULL)"));
    PQclear(r);
    expect_row(c,
               "SELECT (SELECT lease_until <= now() FROM old.jobs WHERE id = 1000),"
               " (SELECT run_at <= now() FROM old.jobs WHERE id = 1001),"
               " (SELECT run_at > now() + interval '1000 years' FROM old.jobs"
               "   WHERE id = 1002),"
               " (SELECT count(*) FROM old.jobs WHERE claims <> 0)",
               4, (const char *[]){"t", "t", "t", "0"});
    /* The stranded row is rescued like any expired lease. */
    assert_int_equal(tq_open(&db, url, NULL), 0);
    int64_t n = 0;
    assert_int_equal(tq_rescue_expired(&n, db), 0);
    assert_int_equal(n, 1);
    tq_close(db);
    /* And the table now refuses both for plain SQL. */
    static const char *const bad[] = {
        "INSERT INTO old.jobs (queue, state, payload) VALUES ('q', 'running', 'x')",
        "INSERT INTO old.jobs (queue, payload, run_at) VALUES ('q', 'x', '-infinity')",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refused(c, bad[i], "23514");
    PQfinish(c);
}

/* Takes the store of schema back to an older version: runs undo (a
 * migration's reverse, written for schema "tq") there and records the
 * version, as a store made by an older tq would read. */
static void make_older(PGconn *c, const char *schema, const char *undo, int version)
{
    char *sql = in_schema(undo, schema), meta[160];
    exec(c, sql);
    free(sql);
    snprintf(meta, sizeof meta,
             "UPDATE %s.meta SET value = '%d' WHERE key = 'schema_version'", schema,
             version);
    exec(c, meta);
}

/* A login role (made anew) granted a worker's rights on db's store. */
static void worker_role(PGconn *c, tq *db, const char *role)
{
    char sql[200];
    snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS %s; CREATE ROLE %s LOGIN", role, role);
    exec(c, sql);
    const tq_grant g = {role, TQ_GRANT_WORKER};
    assert_int_equal(tq_init_grants(db, &g, 1), 0);
}

/* A handle on the store at url as role, a login role. */
static tq *open_as(const char *url, const char *role)
{
    char as[600];
    tq *db = NULL;
    snprintf(as, sizeof as, "%s&user=%s", url, role);
    assert_int_equal(tq_open(&db, as, NULL), 0);
    return db;
}

/* A store of schema made as an older tq made it: jobs "old" jobs of queue
 * q, a worker role granted on it, then taken back to version (make_older)
 * and brought up to date by tq init (upgraded: its URL to url). */
static tq *older_store(PGconn *c, char *url, size_t len, const char *schema,
                       const char *undo, int version, int jobs, const char *role)
{
    tq *db = store(schema);
    int64_t id;
    for (int i = 0; i < jobs; i++)
        assert_int_equal(tq_job_enqueue(&id, db, "q", "old", 3, NULL), 0);
    worker_role(c, db, role);
    tq_close(db);
    make_older(c, schema, undo, version);
    return upgraded(url, len, schema);
}

/* A store of schema 8 takes groups and concurrency limits (migration 9):
 * its jobs and queues keep working, a limit set afterwards holds, and plain
 * SQL can write a group but not an empty one. */
static void version_8_store_migrates(void **state)
{
    (void)state;
    char url[512];
    tq *db = store("v8");
    int64_t id;
    assert_int_equal(tq_job_enqueue(&id, db, "q", "old", 3, NULL), 0);
    assert_int_equal(tq_job_enqueue(&id, db, "q", "old2", 4, NULL), 0);
    tq_close(db);
    PGconn *c = pg();
    make_older(c, "v8", UNDO_10, 8);
    exec(c, "ALTER TABLE v8.jobs DROP COLUMN job_group;"
            "ALTER TABLE v8.queues DROP COLUMN max_running,"
            "  DROP COLUMN max_running_per_group");
    db = upgraded(url, sizeof url, "v8");
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_MAX_RUNNING;
    qo.max_running = 1;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    exec(c, "INSERT INTO v8.jobs (queue, payload, job_group) VALUES ('q', 'sql', 'g1')");
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), 0);
    assert_int_equal(n, 1);
    assert_string_equal((char *)jobs[0].payload, "old");
    assert_null(jobs[0].group);
    tq_job_array_free(jobs, n);
    tq_close(db);
    expect_row(c, "SELECT job_group FROM v8.jobs WHERE payload = 'sql'", 1,
               (const char *[]){"g1"});
    expect_refused(
        c, "INSERT INTO v8.jobs (queue, payload, job_group) VALUES ('q', 'x', '')",
        "23514");
    PQfinish(c);
}

/* A store of schema 9 takes rate limits (migration 10), and a worker role
 * granted before it may take the tokens it needs (a worker role may update
 * a queue's bucket and nothing else of it). */
static void version_9_store_migrates(void **state)
{
    (void)state;
    char url[512];
    PGconn *c = pg();
    tq *db = older_store(c, url, sizeof url, "v9", UNDO_10, 9, 30, "tq_v9_worker");
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_RATE;
    qo.rate_limit = 1000; /* an hour: a burst of 1, then one each 3.6 s */
    qo.rate_period_us = 3600 * 1000000LL;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    tq_close(db);
    db = open_as(url, "tq_v9_worker");
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 30), 0);
    assert_int_equal(n, 1);
    tq_job_array_free(jobs, n);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 30), 0);
    assert_int_equal(n, 0); /* the bucket was written: no token left */
    /* A worker's claim locks the queue's row to take its token (S_RATE_TAKE),
     * which the role's grant on the bucket's columns allows. */
    exec(c, "UPDATE v9.queues SET rate_tokens = 1, rate_at = now() WHERE name = 'q'");
    tq__claim cl;
    assert_int_equal(hold_claim(db, "q", 30, &jobs, &n, &cl), 0);
    assert_int_equal(n, 1);
    tq_job_array_free(jobs, n);
    assert_true(cl.rate_found);
    tq_close(db);
    expect_refused(c, "SET ROLE tq_v9_worker; UPDATE v9.queues SET rate_limit = 0",
                   "42501");
    exec(c, "RESET ROLE");
    PQfinish(c);
}

/* A store of schema 10 takes periodic jobs (migration 11), and a worker
 * role granted before it may enqueue their slots. */
static void version_10_store_migrates(void **state)
{
    (void)state;
    char url[512];
    PGconn *c = pg();
    tq *db = older_store(c, url, sizeof url, "v10", UNDO_11, 10, 0, "tq_v10_worker");
    tq_schedule_opts so = TQ_SCHEDULE_OPTS_INIT;
    so.queue = "fresh";
    so.spec = "@every 1s";
    assert_int_equal(tq_schedule_set(db, "tick", &so), 0);
    tq_close(db);
    usleep(1100000);
    db = open_as(url, "tq_v10_worker");
    int64_t n = 0;
    assert_int_equal(tq_schedule_run(db, &n, NULL), 0);
    assert_int_equal(n, 1);
    tq_close(db);
    expect_row(c, "SELECT count(*), min(schedule) FROM v10.jobs WHERE queue = 'fresh'", 2,
               (const char *[]){"1", "tick"});
    expect_refused(c, "SET ROLE tq_v10_worker; UPDATE v10.schedules SET spec = '@daily'",
                   "42501");
    exec(c, "RESET ROLE");
    expect_refused(c, "SET ROLE tq_v10_worker; INSERT INTO v10.jobs (queue) VALUES ('x')",
                   "42501");
    exec(c, "RESET ROLE");
    PQfinish(c);
}

/* A store of schema 12 takes dependencies (migration 13): a producer role
 * and a worker role granted before it may enqueue after its old jobs and
 * run them; plain SQL cannot write a state the check does not know. */
static void version_12_store_migrates(void **state)
{
    (void)state;
    char url[512];
    tq *db = store("v12");
    int64_t old[2], id;
    for (int i = 0; i < 2; i++)
        assert_int_equal(tq_job_enqueue(&old[i], db, "q", "old", 3, NULL), 0);
    PGconn *c = pg();
    exec(c, "DROP ROLE IF EXISTS tq_v12_worker; CREATE ROLE tq_v12_worker LOGIN;"
            "DROP ROLE IF EXISTS tq_v12_producer; CREATE ROLE tq_v12_producer LOGIN");
    const tq_grant g[] = {{"tq_v12_worker", TQ_GRANT_WORKER},
                          {"tq_v12_producer", TQ_GRANT_PRODUCER}};
    assert_int_equal(tq_init_grants(db, g, 2), 0);
    tq_close(db);
    make_older(c, "v12", UNDO_13, 12);
    exec(c, "REVOKE ALL ON v12.jobs FROM tq_v12_worker, tq_v12_producer");
    exec(c, "GRANT SELECT, UPDATE, DELETE ON v12.jobs TO tq_v12_worker;"
            "GRANT INSERT, SELECT (id, queue, dedup_key, unique_key, unique_scope, state,"
            " claims) ON v12.jobs TO tq_v12_producer");
    db = upgraded(url, sizeof url, "v12");
    tq_close(db);
    db = open_as(url, "tq_v12_producer");
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.after = old;
    o.nafter = 2;
    int rc = tq_job_enqueue(&id, db, "q", "child", 5, &o);
    if (rc)
        fail_msg("enqueue after old jobs as a producer -> %d: %s", rc, tq_errmsg(db));
    tq_close(db);
    db = open_as(url, "tq_v12_worker");
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 5), 0);
    assert_int_equal(n, 2); /* the old ones; the child waits */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tq_job_complete(db, &jobs[i]), 0);
    tq_job_array_free(jobs, n);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 5), 0);
    assert_int_equal(n, 1);
    assert_int_equal(jobs[0].id, id);
    assert_int_equal(jobs[0].nparents, 2);
    int64_t *parents;
    size_t np;
    assert_int_equal(tq_job_parents(&parents, &np, db, id), 0);
    assert_int_equal(np, 2);
    assert_int_equal(parents[0], old[0]);
    assert_int_equal(parents[1], old[1]);
    tq_free(parents);
    assert_int_equal(tq_job_complete(db, &jobs[0]), 0);
    tq_job_array_free(jobs, n);
    tq_close(db);
    expect_refused(c, "UPDATE v12.jobs SET state = 'bogus'", "23514");
    expect_row(c, "SELECT string_agg(state, ' ' ORDER BY id) FROM v12.jobs", 1,
               (const char *[]){"done done done"});
    PQfinish(c);
}

/* A store of schema 13 gains the index of each group's ready jobs
 * (migration 14), holding exactly the ready rows with a group, and its
 * per-group limits hold through the claim that walks it. */
/* A store of version 14 with a job running under a worker's name: after
 * tq init it runs on, its claim unknown to any registration, so that a
 * worker taking the name over leaves it to its lease; new claims record
 * theirs. */
/* The notifications on c so far: their payloads, each followed by '|',
 * into buf. */
static void heard(PGconn *c, char *buf, size_t size)
{
    PGnotify *n;
    buf[0] = '\0';
    PQclear(PQexec(c, "SELECT 1")); /* a round trip: what was sent has come */
    PQconsumeInput(c);
    while ((n = PQnotifies(c))) {
        snprintf(buf + strlen(buf), size - strlen(buf), "%s|", n->extra);
        PQfreemem(n);
    }
}

/* A store of version 15 gains migration 16's notifications, which idle
 * workers wait on: a job that becomes ready by an update (put back, a
 * dead one retried, a run_at brought forward) names its queue; a queue's
 * settings or a schedule changed send an empty one; what workers write
 * as they run (claims, acknowledgements, a rate's bucket, a schedule's
 * slot) and the queue every enqueue ensures send none. */
static void version_15_store_migrates(void **state)
{
    (void)state;
    char url[512], got[256];
    tq *db = store("v15");
    tq_close(db);
    PGconn *c = pg(), *l = pg();
    make_older(c, "v15", UNDO_16, 15);
    db = upgraded(url, sizeof url, "v15");
    exec(l, "LISTEN tq_v15");
    int64_t a, b;
    assert_int_equal(tq_job_enqueue(&a, db, "q", "a", 1, NULL), 0);
    assert_int_equal(tq_job_enqueue(&b, db, "r", "b", 1, NULL), 0);
    heard(l, got, sizeof got);
    /* Each a new queue (a change: workers of every queue read them again),
     * and its insert. */
    assert_string_equal(got, "|q||r|");
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tq_job_complete(db, &jobs[0]), 0);
    tq_job_array_free(jobs, n);
    exec(c, "UPDATE v15.queues SET rate_tokens = 1, rate_at = now() WHERE name = 'q'");
    exec(c, "INSERT INTO v15.queues (name) VALUES ('q') ON CONFLICT DO NOTHING");
    exec(c, "UPDATE v15.jobs SET run_at = run_at + interval '1 hour' WHERE queue = 'r'");
    heard(l, got, sizeof got);
    assert_string_equal(got, ""); /* a claim, an ack, a bucket, a later run_at */
    exec(c, "UPDATE v15.jobs SET run_at = now() WHERE queue = 'r'");
    heard(l, got, sizeof got);
    assert_string_equal(got, "r|"); /* brought forward */
    assert_int_equal(tq_job_claim(&jobs, &n, db, "r", "w", 1), 0);
    assert_int_equal(n, 1);
    tq_job_array_free(jobs, n);
    /* As S_RATE_TAKE puts back what its tokens do not cover: unseen. */
    exec(c, "UPDATE v15.jobs SET state = 'ready', claims = claims - 1,"
            " lease_until = NULL WHERE queue = 'r'");
    heard(l, got, sizeof got);
    assert_string_equal(got, "");
    assert_int_equal(tq_job_claim(&jobs, &n, db, "r", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tq_job_release(db, &jobs[0]), 0);
    tq_job_array_free(jobs, n);
    heard(l, got, sizeof got);
    assert_string_equal(got, "r|"); /* put back */
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.paused = 1;
    qo.set = TQ_SET_PAUSED;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    heard(l, got, sizeof got);
    assert_string_equal(got, "|");
    tq_schedule_opts so = {.version = 1, .queue = "q", .spec = "@hourly"};
    assert_int_equal(tq_schedule_set(db, "hourly", &so), 0);
    heard(l, got, sizeof got);
    assert_string_equal(got, "|");
    exec(c, "UPDATE v15.schedules SET next_slot = next_slot + 1");
    heard(l, got, sizeof got);
    assert_string_equal(got, ""); /* a slot taken */
    tq_close(db);
    PQfinish(l);
    PQfinish(c);
}

/* A store of version 16 takes timeouts (migration 17): its jobs in every
 * state are kept, with no timeout of their own, its queue with none; a
 * timeout set afterwards is a changed setting idle workers hear of. */
static void version_16_store_migrates(void **state)
{
    (void)state;
    char url[512], got[256];
    tq *db = store("v16");
    int64_t id[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(tq_job_enqueue(&id[i], db, "q", "x", 1, NULL), 0);
    tq_close(db);
    PGconn *c = pg(), *l = pg();
    exec(c, "UPDATE v16.jobs SET state = 'running', attempts = 1, worker = 'w',"
            " claims = 1, lease_until = now() + interval '1 hour' WHERE id = (SELECT"
            " min(id) + 1 FROM v16.jobs);"
            "UPDATE v16.jobs SET state = 'done', finished_at = now()"
            " WHERE id = (SELECT min(id) + 2 FROM v16.jobs);"
            "UPDATE v16.jobs SET state = 'dead', finished_at = now()"
            " WHERE id = (SELECT min(id) + 3 FROM v16.jobs);"
            "UPDATE v16.jobs SET state = 'cancelled', finished_at = now()"
            " WHERE id = (SELECT min(id) + 4 FROM v16.jobs);"
            "UPDATE v16.jobs SET state = 'waiting', waiting_for = 1"
            " WHERE id = (SELECT min(id) + 5 FROM v16.jobs);");
    make_older(c, "v16", UNDO_17, 16);
    db = upgraded(url, sizeof url, "v16");
    static const tq_state want[] = {TQ_READY, TQ_RUNNING,   TQ_DONE,
                                    TQ_DEAD,  TQ_CANCELLED, TQ_WAITING};
    for (int i = 0; i < 6; i++) {
        tq_job *j;
        assert_int_equal(tq_job_get(&j, db, id[i]), 0);
        assert_int_equal(j->state, want[i]);
        assert_int_equal(j->timeout_us, 0);
        tq_job_free(j);
    }
    tq_queue_info q;
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.timeout_us, 0);
    assert_int_equal(q.retain_done_us, 0);
    assert_int_equal(q.retain_dead_us, 0);
    exec(l, "LISTEN tq_v16");
    /* The trigger names the new columns: an UPDATE of one alone is heard
     * (tq_queue_set's UPDATE names every column). */
    exec(c, "UPDATE v16.queues SET timeout_us = 1 WHERE name = 'q'");
    heard(l, got, sizeof got);
    assert_string_equal(got, "|");
    exec(c, "UPDATE v16.queues SET retain_dead_us = 1000000 WHERE name = 'q'");
    heard(l, got, sizeof got);
    assert_string_equal(got, "|");
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_TIMEOUT;
    qo.timeout_us = 60000000;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    heard(l, got, sizeof got);
    assert_string_equal(got, "|");
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.timeout_us, 60000000);
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w2", 10), 0);
    assert_int_equal(n, 1);
    assert_int_equal(jobs[0].id, id[0]);
    tq_job_array_free(jobs, n);
    tq_close(db);
    PQfinish(l);
    PQfinish(c);
}

/* A store of version 17 takes what releases a child (migration 18): its
 * dependencies are kept, each released when its parent is done as
 * before, and the rules go on for them; a child that waits for its
 * parents' end can be added. */
static void version_17_store_migrates(void **state)
{
    (void)state;
    char url[512];
    tq *db = store("v17");
    int64_t ab[2], child;
    for (int i = 0; i < 2; i++)
        assert_int_equal(tq_job_enqueue(&ab[i], db, "q", "x", 1, NULL), 0);
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.after = ab;
    o.nafter = 2;
    assert_int_equal(tq_job_enqueue(&child, db, "c", "c", 1, &o), 0);
    tq_close(db);
    PGconn *c = pg();
    make_older(c, "v17", UNDO_18, 17);
    db = upgraded(url, sizeof url, "v17");
    expect_row(
        c,
        "SELECT count(*) FILTER (WHERE release_when = 'done' AND parent_state IS NULL),"
        " (SELECT count(*) FROM pg_proc WHERE proname = 'release_children'"
        "  AND pronamespace = 'v17'::regnamespace) FROM v17.deps",
        2, (const char *[]){"2", "1"});
    dependencies_after_upgrade(db, ab, child);
    tq_close(db);
    PQfinish(c);
}

static void version_14_store_migrates(void **state)
{
    (void)state;
    char url[512];
    tq *db = store("v14");
    int64_t ids[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(tq_job_enqueue(&ids[i], db, "q", "j", 1, NULL), 0);
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 1), 0);
    assert_int_equal(n, 1);
    tq_job_array_free(jobs, n);
    tq_close(db);
    PGconn *c = pg();
    make_older(c, "v14", UNDO_15, 14);
    db = upgraded(url, sizeof url, "v14");
    expect_row(
        c,
        "SELECT count(*) FILTER (WHERE state = 'running' AND worker_since IS NULL),"
        " count(*) FILTER (WHERE state = 'ready') FROM v14.jobs",
        2, (const char *[]){"1", "1"});
    check_plans(c, "v14", "q", "store upgraded from 14");
    tq__claim cl = {.queue = "q",
                    .order = TQ_FIFO,
                    .lease_us = 30000000,
                    .max_attempts = 3,
                    .max = 5,
                    .start = 1,
                    .worker_since = 1700000000000000LL};
    assert_int_equal(db->engine->exchange(db, "w", NULL, 0, &cl, &jobs, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(jobs[0].id, ids[1]);
    tq_job_array_free(jobs, n);
    int64_t back = -1;
    assert_int_equal(db->engine->rescue(db, "w", 1700000000000000LL, &back), 0);
    assert_int_equal(back, 1);
    expect_row(c, "SELECT string_agg(state, ',' ORDER BY id) FROM v14.jobs", 1,
               (const char *[]){"running,ready"});
    tq_close(db);
    PQfinish(c);
}

static void version_13_store_migrates(void **state)
{
    (void)state;
    char url[512];
    tq *db = store("v13");
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_MAX_RUNNING_PER_GROUP;
    qo.max_running_per_group = 1;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    static const char *const groups[] = {"g1", "g1", "g2", NULL, "g2"};
    int64_t ids[5];
    for (int i = 0; i < 5; i++) {
        tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
        o.group = groups[i];
        assert_int_equal(tq_job_enqueue(&ids[i], db, "q", "j", 1, &o), 0);
    }
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_int_equal(jobs[0].id, ids[0]);
    tq_job_array_free(jobs, n);
    tq_close(db);
    PGconn *c = pg();
    make_older(c, "v13", UNDO_14, 13);
    db = upgraded(url, sizeof url, "v13");
    expect_row(c,
               "SELECT count(*) FROM pg_indexes WHERE schemaname = 'v13'"
               " AND indexname = 'jobs_ready_group'",
               1, (const char *[]){"1"});
    check_plans(c, "v13", "q", "store upgraded from 13");
    /* g1 is full; g2 gives its first job; the job without a group comes. */
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w2", 10), 0);
    assert_int_equal(n, 2);
    assert_int_equal(jobs[0].id, ids[2]);
    assert_int_equal(jobs[1].id, ids[3]);
    tq_job_array_free(jobs, n);
    tq_close(db);
    PQfinish(c);
}

/* A store of schema 11 takes the control channel (migration 12), and a
 * worker role granted before it may snooze, discard and report progress;
 * plain SQL cannot write a progress outside 0 to 100. */
static void version_11_store_migrates(void **state)
{
    (void)state;
    char url[512];
    PGconn *c = pg();
    tq *db = older_store(c, url, sizeof url, "v11", UNDO_12, 11, 2, "tq_v11_worker");
    tq_queue_info q;
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.max_snoozes, 100);
    tq_close(db);
    db = open_as(url, "tq_v11_worker");
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 2), 0);
    assert_int_equal(n, 2);
    control_words(db, jobs, n);
    tq_close(db);
    expect_row(c,
               "SELECT string_agg(state || ' ' || snoozes || ' ' || attempts || ' '"
               " || coalesce(progress::text, '-') || ' ' || coalesce(last_error, '-')"
               " || ' ' || coalesce(convert_from(result, 'UTF8'), '-'),"
               " ', ' ORDER BY id) FROM v11.jobs",
               1, (const char *[]){"dead 0 1 40 bad input -, done 1 1 - - 42"});
    expect_row(c, "SELECT results FROM v11.queues WHERE name = 'q'", 1,
               (const char *[]){"f"});
    expect_refused(c, "UPDATE v11.jobs SET progress = 101", "23514");
    PQfinish(c);
}

/* A store of schema 6 takes keys with a scope (migration 7): stored keys
 * hold as before, and the INSERT producers had still works; scoped keys
 * work beside them; plain SQL cannot write a scope no index knows, nor a
 * second holder of a scoped key; the claim is still an index scan. */
static void version_6_store_migrates(void **state)
{
    (void)state;
    char url[512];
    tq *db = store("v6");
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t kept, id, scoped;
    eo.key = "k1";
    assert_int_equal(tq_job_enqueue(&kept, db, "q", "kept", 4, &eo), 0);
    tq_close(db);
    PGconn *c = pg();
    back_to_6(c, "v6");
    exec(c, "UPDATE v6.meta SET value = '6' WHERE key = 'schema_version'");
    db = upgraded(url, sizeof url, "v6");
    assert_int_equal(tq_job_enqueue(&id, db, "q", "again", 5, &eo), TQ_DUP);
    assert_int_equal(id, kept);
    eo.unique = TQ_UNIQUE_ACTIVE;
    assert_int_equal(tq_job_enqueue(&scoped, db, "q", "scoped", 6, &eo), 0);
    assert_int_equal(tq_job_enqueue(&id, db, "q", "scoped", 6, &eo), TQ_DUP);
    assert_int_equal(id, scoped);
    tq_close(db);
    exec(c, "INSERT INTO v6.jobs (queue, payload, dedup_key) VALUES ('q', 'x', 'k1')"
            " ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING");
    expect_row(c, "SELECT count(*) FROM v6.jobs WHERE dedup_key = 'k1'", 1,
               (const char *[]){"1"});
    static const struct {
        const char *sql, *state;
    } bad[] = {
        {"INSERT INTO v6.jobs (queue, payload, unique_key, unique_scope)"
         " VALUES ('q', 'x', 'u', 'bogus')",
         "23514"},
        {"INSERT INTO v6.jobs (queue, payload, unique_key, unique_scope)"
         " VALUES ('q', 'x', 'k1', 'queued')",
         "23505"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refused(c, bad[i].sql, bad[i].state);
    check_plans(c, "v6", "q", "store upgraded from 6");
    PQfinish(c);
}

int main(void)
{
    base = getenv("TQ_TEST_PG_URL");
    if (!base) {
        fprintf(stderr, "test_postgres: set TQ_TEST_PG_URL\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(claim_plans_use_ready_index),
        cmocka_unit_test(rescue_plan_is_ordered_index_scan),
        cmocka_unit_test(worker_rescue_reads_running_index),
        cmocka_unit_test(pending_plan_is_ordered_index_scan),
        cmocka_unit_test(ack_plan_is_id_lookup),
        cmocka_unit_test(ack_plan_without_statistics),
        cmocka_unit_test(claims_never_exceed_limit),
        cmocka_unit_test(rate_claims_take_tokens_after_rows),
        cmocka_unit_test(concurrent_init),
        cmocka_unit_test(plain_inserts_check_queue_names),
        cmocka_unit_test(transactions_read_committed),
        cmocka_unit_test(keyed_enqueue_when_the_kept_row_vanishes),
        cmocka_unit_test(version_1_store_migrates),
        cmocka_unit_test(version_6_store_migrates),
        cmocka_unit_test(version_15_store_migrates),
        cmocka_unit_test(version_16_store_migrates),
        cmocka_unit_test(version_17_store_migrates),
        cmocka_unit_test(version_8_store_migrates),
        cmocka_unit_test(version_9_store_migrates),
        cmocka_unit_test(version_10_store_migrates),
        cmocka_unit_test(version_11_store_migrates),
        cmocka_unit_test(version_12_store_migrates),
        cmocka_unit_test(version_13_store_migrates),
        cmocka_unit_test(version_14_store_migrates),
        cmocka_unit_test(enqueue_settles_after_a_lost_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
