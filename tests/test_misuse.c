/*
 * test_misuse.c - the C library cannot crash its caller through a handle:
 * every function of tq.h that takes a store handle, given NULL or a handle
 * whose tq_open failed (the README's snippet on a file never initialised),
 * returns an error code, and tq_errmsg says why; run under ASan in
 * make test, where a bad read would stop it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tq.h"

/* Every call of tq.h that takes a tq *, on db: each must fail. */
static void every_call_fails(tq *db)
{
    int64_t id = 0, n64 = 0, at = 0, after = 0, next = 0;
    size_t n = 0;
    tq_queue_info qi;
    tq_queue_info *qv = NULL;
    tq_job *j = NULL;
    tq_job claimed = {.id = 1, .queue = "q", .worker = "w", .claim = 1};
    void *bytes = NULL;
    int64_t *ids = NULL;
    tq_parent *ends = NULL;
    tq_schedule *sv = NULL;
    tq_stats st;
    tq_count *cv = NULL;
    tq_finished *fv = NULL;
    tq_worker_info *wv = NULL;
    const int64_t one[] = {1};
    const tq_payload items[] = {{"p", 1}};
    tq_schedule_opts so = TQ_SCHEDULE_OPTS_INIT;
    so.queue = "q";
    so.spec = "@hourly";
    const tq_grant grant = {"r", TQ_GRANT_WORKER};

#define FAILS(call) assert_int_not_equal((call), 0)
    FAILS(tq_init(db));
    FAILS(tq_init_grants(db, &grant, 1));
    FAILS(tq_queue_set(db, "q", NULL));
    FAILS(tq_queue_get(&qi, db, "q"));
    FAILS(tq_queue_list(&qv, &n, db));
    FAILS(tq_job_enqueue(&id, db, "q", "p", 1, NULL));
    FAILS(tq_job_enqueue_batch(&id, db, "q", items, 1, NULL));
    FAILS(tq_job_get(&j, db, 1));
    FAILS(tq_job_claim(&j, &n, db, "q", "w", 1));
    FAILS(tq_job_complete(db, &claimed));
    FAILS(tq_job_complete_result(db, &claimed, "r", 1));
    FAILS(tq_job_fail(db, &claimed, "e"));
    FAILS(tq_job_heartbeat(db, &claimed));
    FAILS(tq_job_release(db, &claimed));
    FAILS(tq_job_progress(db, &claimed, 50, "half"));
    FAILS(tq_job_snooze(db, &claimed, 1000));
    FAILS(tq_job_discard(db, &claimed, "no"));
    FAILS(tq_job_result(&bytes, &n, db, 1));
    FAILS(tq_job_parents(&ids, &n, db, 1));
    FAILS(tq_job_parent_ends(&ends, &n, db, 1));
    FAILS(tq_job_retry(db, 1));
    FAILS(tq_job_cancel(db, 1));
    FAILS(tq_job_retry_ids(db, one, 1));
    FAILS(tq_job_cancel_ids(db, one, 1));
    FAILS(tq_job_retry_dead(&n64, db, NULL));
    FAILS(tq_job_list(&j, &n, db, NULL));
    FAILS(tq_job_prune(&n64, db, 0, 1u << TQ_DONE));
    FAILS(tq_job_prune_batch(&n64, db, 0, 1u << TQ_DONE, 10));
    FAILS(tq_rescue_expired(&n64, db));
    FAILS(tq_schedule_set(db, "s", &so));
    FAILS(tq_schedule_remove(db, "s"));
    FAILS(tq_schedule_list(&sv, &n, db));
    FAILS(tq_schedule_run(db, &n64, &next));
    FAILS(tq_stats_get(&st, db, NULL));
    tq_wal_info wal;
    FAILS(tq_wal_check(&wal, db));
    FAILS(tq_job_durations(&ids, &n, db, NULL, 10));
    FAILS(tq_count_jobs(&cv, &n, db, TQ_READY, 0));
    FAILS(tq_finished_since(&fv, &n, db, &at, &after, 0, 10));
    FAILS(tq_worker_list(&wv, &n, db));
    FAILS(tq_worker_prune(&n64, db, 0));
    tq_worker *w = (tq_worker *)1; /* must be set to NULL */
    const char *argv[] = {"true", NULL};
    tq_worker_opts wo = TQ_WORKER_OPTS_INIT;
    wo.argv = argv;
    FAILS(tq_worker_new(&w, db, &wo));
    assert_null(w);
#undef FAILS
    /* The handle's own accessors answer something printable. */
    assert_non_null(tq_errmsg(db));
    assert_non_null(tq_engine_name(db));
    assert_non_null(tq_store_name(db));
}

/* The README's snippet on a store that was never initialised: tq_open fails
 * but gives a handle, and every later call on it fails cleanly, saying the
 * store is not open and why. */
static void failed_handle(void **state)
{
    (void)state;
    tq *db = NULL;
    assert_int_not_equal(tq_open(&db, "/nonexistent-dir/jobs.db", NULL), 0);
    assert_non_null(db);
    char why[1024];
    snprintf(why, sizeof why, "%s", tq_errmsg(db));
    assert_true(why[0] != '\0');
    every_call_fails(db);
    assert_non_null(strstr(tq_errmsg(db), "the store is not open"));
    assert_non_null(strstr(tq_errmsg(db), why)); /* the open's reason kept */
    tq_close(db);
}

static void null_handle(void **state)
{
    (void)state;
    every_call_fails(NULL);
    tq_close(NULL);
}

/* NULL where a job, a worker or an array belongs: an error or nothing, no
 * crash. */
static void null_arguments(void **state)
{
    (void)state;
    tq_job_free(NULL);
    tq_job_array_free(NULL, 3);
    tq_schedule_array_free(NULL, 3);
    tq_free(NULL);
    tq_worker_free(NULL);
    /* A worker handle that is NULL. */
    assert_int_equal(tq_worker_run(NULL), TQ_EINVAL);
    tq_worker_stop(NULL);
    assert_null(tq_worker_name(NULL));
    tq_worker_counters c;
    memset(&c, 0xff, sizeof c);
    tq_worker_counters_get(&c, NULL);
    assert_int_equal(c.claimed + c.done + c.failed + c.lost + c.released, 0);
    /* A payload's bytes missing. */
    tq *db = NULL;
    int64_t id;
    const tq_payload none[] = {{NULL, 5}};
    assert_int_equal(
        tq_open(&db, ":memory:",
                &(tq_open_opts){.version = TQ_OPEN_OPTS_VERSION, .create = 1}),
        0);
    assert_int_equal(tq_init(db), 0);
    assert_int_equal(tq_job_enqueue(&id, db, "q", NULL, 5, NULL), TQ_EINVAL);
    assert_int_equal(tq_job_enqueue_batch(&id, db, "q", none, 1, NULL), TQ_EINVAL);
    assert_int_equal(tq_job_enqueue_batch(&id, db, "q", NULL, 1, NULL), TQ_EINVAL);
    tq_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_handle),
        cmocka_unit_test(null_handle),
        cmocka_unit_test(null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
