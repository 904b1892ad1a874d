/*
 * upgrade.h - what the upgrade tests of both engines (test_sqlite.c,
 * test_postgres.c) do alike to a store they brought up to date. Include it
 * after cmocka.h and tq.h.
 */
#ifndef TQ_TEST_UPGRADE_H
#define TQ_TEST_UPGRADE_H

#include <stddef.h>

/* The control channel on the two jobs of queue "q" the caller claimed
 * (jobs, n of them): the first reports progress 40 "reading" and is
 * discarded ("bad input"), the second snoozes, is claimed again and is done
 * with the result "42". Frees jobs. */
static void control_words(tq *db, tq_job *jobs, size_t n)
{
    assert_int_equal(tq_job_progress(db, &jobs[0], 40, "reading"), 0);
    assert_int_equal(tq_job_discard(db, &jobs[0], "bad input"), 0);
    assert_int_equal(tq_job_snooze(db, &jobs[1], 0), 0);
    tq_job_array_free(jobs, n);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tq_job_complete_result(db, &jobs[0], "42", 2), 0);
    tq_job_array_free(jobs, n);
}

/* Migration 18 on a store whose job child waited for parents[0] and
 * parents[1] (queue "q", ready, in that order) before it: the old rule
 * goes on (the first parent done counts off, the second cancelled cancels
 * the child), and a child that waits for their end comes ready at once,
 * counting a done and a cancelled end. */
static void dependencies_after_upgrade(tq *db, const int64_t parents[2], int64_t child)
{
    tq_job *jobs, *j;
    size_t n;
    assert_int_equal(tq_job_get(&j, db, child), 0);
    assert_int_equal(j->state, TQ_WAITING);
    assert_int_equal(j->waiting_for, 2);
    tq_job_free(j);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_int_equal(jobs[0].id, parents[0]);
    assert_int_equal(tq_job_complete(db, &jobs[0]), 0);
    tq_job_array_free(jobs, n);
    assert_int_equal(tq_job_cancel(db, parents[1]), 0);
    assert_int_equal(tq_job_get(&j, db, child), 0);
    assert_int_equal(j->state, TQ_CANCELLED);
    assert_int_equal(j->waiting_for, 1);
    tq_job_free(j);
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.after = parents;
    o.nafter = 2;
    o.after_ended = 1;
    int64_t id;
    assert_int_equal(tq_job_enqueue(&id, db, "c", "d", 1, &o), 0);
    tq_parent *v;
    assert_int_equal(tq_job_parent_ends(&v, &n, db, id), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].state, TQ_DONE);
    assert_int_equal(v[1].state, TQ_CANCELLED);
    tq_free(v);
    assert_int_equal(tq_job_get(&j, db, id), 0);
    assert_int_equal(j->state, TQ_READY);
    tq_job_free(j);
}

#endif
