/*
 * test_exchange.c - the engines' batched hot path, below the public API: one
 * exchange carrying acknowledgements of every kind (some fenced out) and a
 * claim, and one carrying a thousand. Run against each engine like
 * test_store (TQ_TEST_ENGINE, TQ_TEST_PG_URL).
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pg_url.h"
#include "scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/engine/engine.h"

static char tmpdir[64];
static int store_seq;

static int setup(void **state)
{
    char url[512];
    tq *db = NULL;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    test_store_url(url, sizeof url, NULL, 'x', tmpdir, ++store_seq);
    if (tq_open(&db, url, &o) || tq_init(db)) {
        fprintf(stderr, "setup: %s\n", tq_errmsg(db));
        tq_close(db);
        return -1;
    }
    *state = db;
    return 0;
}

static int teardown(void **state)
{
    tq_close(*state);
    return 0;
}

#define OK(db, call)                                                                     \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != 0)                                                                    \
            fail_msg("%s -> %d: %s", #call, rc_, tq_errmsg(db));                         \
    } while (0)

static int64_t enqueue(tq *db, const char *queue, int i)
{
    char p[32];
    int64_t id = 0;
    snprintf(p, sizeof p, "job %d", i);
    OK(db, tq_job_enqueue(&id, db, queue, p, strlen(p), NULL));
    return id;
}

/* Claims up to max jobs of queue as worker "w", a claimer that runs up to
 * chain jobs of a group one after another (tq__claim.chain; 0: none) if the
 * queue is limited; returns how many, in the queue's order. */
static size_t claim_chain(tq *db, const char *queue, size_t max, size_t chain,
                          tq_job **out)
{
    tq__claim c = {.queue = queue,
                   .order = TQ_FIFO,
                   .lease_us = 30000000,
                   .max_attempts = 3,
                   .max = max,
                   .start = 1,
                   .chain = chain};
    tq_queue_info q;
    OK(db, tq_queue_get(&q, db, queue));
    tq__claim_limits(&c, &q);
    size_t n = 0;
    OK(db, db->engine->exchange(db, "w", NULL, 0, &c, out, &n));
    tq__jobs_sort(*out, n, TQ_FIFO);
    return n;
}

/* Claims up to max jobs of queue as worker "w"; returns how many. */
static size_t claim(tq *db, const char *queue, size_t max, tq_job **out)
{
    return claim_chain(db, queue, max, 0, out);
}

static tq_job *get(tq *db, int64_t id)
{
    tq_job *j = NULL;
    OK(db, tq_job_get(&j, db, id));
    return j;
}

static void expect_state(tq *db, int64_t id, tq_state want)
{
    tq_job *j = get(db, id);
    assert_int_equal(j->state, want);
    tq_job_free(j);
}

static tq__ack ack(const tq_job *j, tq__ack_kind kind)
{
    tq__ack a = {.id = j->id, .claim = j->claim, .kind = kind, .result = -1};
    return a;
}

static void mixed_batch(void **state)
{
    tq *db = *state;
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_KEEP_DONE;
    qo.keep_done = 0; /* finished rows are deleted */
    OK(db, tq_queue_set(db, "d", &qo));
    for (int i = 0; i < 8; i++)
        enqueue(db, "q", i);
    int64_t gone = enqueue(db, "d", 99);
    tq_job *q = NULL, *d = NULL;
    assert_int_equal(claim(db, "q", 8, &q), 8);
    assert_int_equal(claim(db, "d", 8, &d), 1);
    OK(db, tq_job_cancel(db, q[6].id));

    tq__ack a[10];
    a[0] = ack(&q[0], TQ__ACK_DONE);
    a[1] = ack(&q[1], TQ__ACK_DONE);
    a[2] = ack(&q[2], TQ__ACK_DONE);
    a[2].claim = 2; /* not the claim it holds: fenced out */
    a[3] = ack(&q[3], TQ__ACK_RELEASE);
    a[4] = ack(&q[4], TQ__ACK_FAIL);
    a[4].error = "it \"broke\", {badly}\\";
    a[5] = ack(&q[5], TQ__ACK_BEAT);
    a[5].delay_us = 3600000000LL;
    a[6] = ack(&q[6], TQ__ACK_DONE); /* cancelled meanwhile: fenced out */
    a[7] = ack(&d[0], TQ__ACK_DONE);
    a[7].delete_done = 1;
    a[8] = ack(&q[7], TQ__ACK_DONE);
    a[9] = ack(&q[7], TQ__ACK_FAIL); /* the same job twice: one applies */
    a[9].claim = 7;

    /* The claim in the same exchange sees the acks: the released and the
     * failed job (backoff 0) are ready again, in queue order. */
    tq__claim c = {.queue = "q",
                   .order = TQ_FIFO,
                   .lease_us = 30000000,
                   .max_attempts = 3,
                   .max = 10,
                   .start = 1};
    tq_job *again = NULL;
    size_t n = 0;
    OK(db, db->engine->exchange(db, "w", a, 10, &c, &again, &n));
    tq__jobs_sort(again, n, TQ_FIFO);
    const int expect[10] = {0, 0, TQ_ELOST, 0, 0, 0, TQ_ELOST, 0, 0, TQ_ELOST};
    for (int i = 0; i < 10; i++)
        if (a[i].result != expect[i])
            fail_msg("ack %d: result %d, expected %d", i, a[i].result, expect[i]);
    assert_int_equal(n, 2);
    assert_int_equal(again[0].id, q[3].id);
    assert_int_equal(again[0].attempts, 1); /* the release did not spend one */
    assert_int_equal(again[1].id, q[4].id);
    assert_int_equal(again[1].attempts, 2);
    assert_string_equal(again[1].last_error, a[4].error);

    tq_job *j = get(db, q[0].id);
    assert_int_equal(j->state, TQ_DONE);
    assert_true(j->finished_at >= j->started_at && j->finished_at > 0);
    tq_job_free(j);
    expect_state(db, q[2].id, TQ_RUNNING);
    j = get(db, q[5].id);
    assert_int_equal(j->state, TQ_RUNNING);
    assert_true(j->lease_until - j->started_at > 3000000000LL);
    tq_job_free(j);
    expect_state(db, q[6].id, TQ_CANCELLED);
    expect_state(db, q[7].id, TQ_DONE);
    j = NULL;
    assert_int_equal(tq_job_get(&j, db, gone), TQ_ENOTFOUND);
    tq_job_array_free(q, 8);
    tq_job_array_free(d, 1);
    tq_job_array_free(again, n);
}

static void thousand_in_one(void **state)
{
    tq *db = *state;
    enum { N = 1000 };
    tq_payload items[N];
    int64_t ids[N];
    for (int i = 0; i < N; i++)
        items[i] = (tq_payload){"p", 1};
    OK(db, tq_job_enqueue_batch(ids, db, "big", items, N, NULL));
    tq_job *jobs = NULL;
    assert_int_equal(claim(db, "big", N + 5, &jobs), N);
    tq__ack *a = calloc(N, sizeof *a);
    for (int i = 0; i < N; i++)
        a[i] = ack(&jobs[i], i % 10 == 9 ? TQ__ACK_RELEASE : TQ__ACK_DONE);
    OK(db, db->engine->exchange(db, "w", a, N, NULL, NULL, NULL));
    for (int i = 0; i < N; i++)
        assert_int_equal(a[i].result, 0);
    tq_stats st;
    OK(db, tq_stats_get(&st, db, "big"));
    assert_int_equal(st.count[TQ_DONE], N - N / 10);
    assert_int_equal(st.count[TQ_READY], N / 10);
    assert_int_equal(st.count[TQ_RUNNING], 0);
    /* Acking them again changes nothing: every one is fenced out. */
    OK(db, db->engine->exchange(db, "w", a, N, NULL, NULL, NULL));
    for (int i = 0; i < N; i++)
        assert_int_equal(a[i].result, TQ_ELOST);
    free(a);
    tq_job_array_free(jobs, N);
}

/* The payloads of jobs[0..n), joined by spaces (into out). */
static const char *payloads(const tq_job *jobs, size_t n, char *out, size_t size)
{
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), size - strlen(out), "%s%.*s", i ? " " : "",
                 (int)jobs[i].payload_len, (const char *)jobs[i].payload);
    return out;
}

static int64_t enqueue_at(tq *db, const char *queue, const char *payload,
                          const char *group, int priority)
{
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t id = 0;
    eo.group = group;
    eo.priority = priority;
    OK(db, tq_job_enqueue(&id, db, queue, payload, strlen(payload), &eo));
    return id;
}

static int64_t enqueue_in(tq *db, const char *queue, const char *payload,
                          const char *group)
{
    return enqueue_at(db, queue, payload, group, 0);
}

/* Claims as chain_claims_whole_groups does; returns the payloads. */
static const char *chain_claimed(tq *db, const char *queue, size_t max, size_t chain,
                                 tq_job **jobs, size_t *n)
{
    static char out[256];
    *n = claim_chain(db, queue, max, chain, jobs);
    return payloads(*jobs, *n, out, sizeof out);
}

/*
 * A claimer that runs a group's jobs one after another (CLAIM_CHAIN) takes,
 * in the order they stand at the head of the queue, the jobs without a
 * group and whole chains of the groups with room (each where its first job
 * stands), rather than a few jobs of every group; when those do not fill
 * the claim and full groups fill the head, it finds the other groups
 * behind them, oldest first.
 */
static void chain_claims_whole_groups(void **state)
{
    tq *db = *state;
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_MAX_RUNNING_PER_GROUP;
    o.max_running_per_group = 1;
    OK(db, tq_queue_set(db, "c", &o));
    OK(db, tq_queue_set(db, "o", &o));
    OK(db, tq_queue_set(db, "w", &o));
    static const char *const order[][2] = {
        {"a1", "A"}, {"b1", "B"}, {"n1", NULL}, {"a2", "A"}, {"c1", "C"}, {"b2", "B"},
        {"a3", "A"}, {"c2", "C"}, {"c3", "C"},  {"b3", "B"}, {"n2", NULL}};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        enqueue_in(db, "c", order[i][0], order[i][1]);
    tq_job *a, *c, *none, *again;
    size_t na, nc, nnone, nagain;
    /* A's chain of 2, B's, then n1 (room 5). */
    assert_string_equal(chain_claimed(db, "c", 5, 2, &a, &na), "a1 b1 n1 a2 b2");
    /* A and B run: C's chain and n2. Then every group runs. */
    assert_string_equal(chain_claimed(db, "c", 10, 2, &c, &nc), "c1 c2 n2");
    assert_string_equal(chain_claimed(db, "c", 10, 2, &none, &nnone), "");
    /* A's chain done (n1 too): A has room again, B and C still run. */
    tq__ack acks[3] = {ack(&a[0], TQ__ACK_DONE), ack(&a[2], TQ__ACK_DONE),
                       ack(&a[3], TQ__ACK_DONE)};
    OK(db, db->engine->exchange(db, "w", acks, 3, NULL, NULL, NULL));
    assert_string_equal(chain_claimed(db, "c", 10, 2, &again, &nagain), "a3");
    tq_job_array_free(a, na);
    tq_job_array_free(c, nc);
    tq_job_array_free(none, nnone);
    tq_job_array_free(again, nagain);

    /* A group's job ahead of more jobs without a group than the claim
     * takes is not passed over. */
    enqueue_in(db, "o", "x1", "X");
    for (int i = 0; i < 10; i++)
        enqueue_in(db, "o", "u", NULL);
    assert_string_equal(chain_claimed(db, "o", 5, 2, &a, &na), "x1 u u u u");
    tq_job_array_free(a, na);

    /* A claim that ends within a chain takes the group's first jobs in
     * the queue's order (here by priority), not its oldest. */
    OK(db, tq_queue_set(db, "p", &o));
    enqueue_at(db, "p", "a-low", "A", 0);
    enqueue_at(db, "p", "a-high", "A", 9);
    enqueue_at(db, "p", "n", NULL, 5);
    enqueue_at(db, "p", "b", "B", 0);
    assert_string_equal(chain_claimed(db, "p", 1, 2, &a, &na), "a-high");
    tq_job_array_free(a, na);
    assert_string_equal(chain_claimed(db, "p", 2, 2, &a, &na), "n b");
    tq_job_array_free(a, na);

    /* F's jobs fill the head (room + 64 rows) once F runs; Y's one job
     * there does not fill the claim: the others behind, oldest first. */
    for (int i = 0; i < 30; i++)
        enqueue_in(db, "w", "f", "F");
    enqueue_in(db, "w", "y1", "Y");
    for (int i = 0; i < 40; i++)
        enqueue_in(db, "w", "f", "F");
    enqueue_in(db, "w", "z1", "Z");
    enqueue_in(db, "w", "g1", "G");
    enqueue_in(db, "w", "g2", "G");
    enqueue_in(db, "w", "h1", "H");
    assert_string_equal(chain_claimed(db, "w", 1, 2, &a, &na), "f");
    assert_string_equal(chain_claimed(db, "w", 4, 2, &c, &nc), "y1 z1 g1 g2");
    tq_job_array_free(a, na);
    tq_job_array_free(c, nc);
}

/* Taking over a name from a holder found gone succeeds only while the
 * name still shows that holder: of two workers that both found it gone,
 * the second is refused instead of taking the name from the first. */
static void takeover_needs_the_same_holder(void **state)
{
    tq *db = *state;
    tq_worker_info gone = {0}, a = {0}, b = {0}, seen, again;
    snprintf(gone.name, sizeof gone.name, "twin");
    snprintf(gone.host, sizeof gone.host, "h");
    snprintf(gone.host_id, sizeof gone.host_id, "boot/pid:[1]");
    gone.pid = 999999;
    gone.lease_us = 3600000000LL;
    a = b = gone;
    a.pid = 1001;
    b.pid = 1002;
    OK(db, db->engine->worker_register(db, &gone, NULL, &seen));
    assert_string_equal(seen.name, ""); /* a new name: no holder before */
    /* Both find the live-looking holder... */
    assert_int_equal(db->engine->worker_register(db, &a, NULL, &seen), TQ_EINUSE);
    assert_int_equal(seen.pid, 999999);
    assert_int_equal(db->engine->worker_register(db, &b, NULL, &again), TQ_EINUSE);
    /* ...and both decide it is gone: the first takes the name over. */
    OK(db, db->engine->worker_register(db, &a, &seen, &again));
    assert_int_equal(again.pid, 999999);
    assert_int_equal(db->engine->worker_register(db, &b, &seen, &again), TQ_EINUSE);
    assert_int_equal(again.pid, 1001);
    tq_worker_info *v = NULL;
    size_t n = 0;
    OK(db, tq_worker_list(&v, &n, db));
    assert_int_equal(n, 1);
    assert_int_equal(v[0].pid, 1001);
    assert_string_equal(v[0].host_id, "boot/pid:[1]");
    tq_free(v);
}

/* Claims up to max jobs of queue "q" as worker name under registration
 * since; returns how many. */
static size_t claim_as(tq *db, const char *name, int64_t since, size_t max, tq_job **out)
{
    tq__claim c = {.queue = "q",
                   .order = TQ_FIFO,
                   .lease_us = 3600000000LL,
                   .max_attempts = 3,
                   .max = max,
                   .start = 1,
                   .worker_since = since};
    size_t n = 0;
    OK(db, db->engine->exchange(db, name, NULL, 0, &c, out, &n));
    return n;
}

/*
 * A name held by one registration (a), lapsed while its process still ran
 * jobs, then taken by a second (b): the rescue of b, gone, puts back b's
 * jobs alone, and a's stay running under their leases. Each registration
 * of a name is later than the one before, and a heartbeat of the earlier
 * one no longer counts, even from the same pid and host.
 */
static void rescue_takes_one_registration(void **state)
{
    tq *db = *state;
    tq_worker_info a = {0}, b, seen;
    snprintf(a.name, sizeof a.name, "shared");
    snprintf(a.host, sizeof a.host, "h");
    snprintf(a.host_id, sizeof a.host_id, "boot/pid:[1]");
    a.pid = 4242;
    a.lease_us = 3600000000LL;
    b = a;
    OK(db, db->engine->worker_register(db, &a, NULL, &seen));
    assert_true(a.started_at > 0);
    for (int i = 0; i < 6; i++)
        enqueue(db, "q", i);
    tq_job *ja = NULL, *jb = NULL;
    assert_int_equal(claim_as(db, "shared", a.started_at, 2, &ja), 2);
    /* b takes the name over (as from a holder found gone). */
    tq_worker_info holder, was;
    assert_int_equal(db->engine->worker_register(db, &b, NULL, &holder), TQ_EINUSE);
    assert_true(holder.started_at == a.started_at);
    OK(db, db->engine->worker_register(db, &b, &holder, &was));
    assert_true(b.started_at > a.started_at);
    assert_int_equal(claim_as(db, "shared", b.started_at, 3, &jb), 3);
    assert_int_equal(db->engine->worker_beat(db, &a), TQ_EINUSE);
    OK(db, db->engine->worker_beat(db, &b));
    /* A third finds b gone and puts back b's jobs. */
    int64_t n = -1;
    OK(db, db->engine->rescue(db, "shared", b.started_at, &n));
    assert_int_equal(n, 3);
    for (int i = 0; i < 2; i++)
        expect_state(db, ja[i].id, TQ_RUNNING);
    for (int i = 0; i < 3; i++)
        expect_state(db, jb[i].id, TQ_READY);
    /* a's jobs are still a's: their acknowledgements apply. */
    tq__ack done[2] = {ack(&ja[0], TQ__ACK_DONE), ack(&ja[1], TQ__ACK_DONE)};
    OK(db, db->engine->exchange(db, "shared", done, 2, NULL, NULL, NULL));
    assert_int_equal(done[0].result, 0);
    assert_int_equal(done[1].result, 0);
    tq_job_array_free(ja, 2);
    tq_job_array_free(jb, 3);
}

int main(void)
{
    int rc;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tq-exchange.XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(mixed_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(thousand_in_one, setup, teardown),
        cmocka_unit_test_setup_teardown(takeover_needs_the_same_holder, setup, teardown),
        cmocka_unit_test_setup_teardown(chain_claims_whole_groups, setup, teardown),
        cmocka_unit_test_setup_teardown(rescue_takes_one_registration, setup, teardown),
    };
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    scratch_remove(tmpdir);
    return rc;
}
