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

#endif
