/*
 * test_sqlite.c - what only the SQLite engine promises: the claim of each
 * order is an index search with no sort, also beside 100,000 done rows; a
 * plain INSERT from any program enqueues; the file is in WAL mode; a store
 * newer than this build is refused.
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "scratch.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/engine/engine.h"

static char dir[64];
static int seq;

static void new_store(char *path, size_t len)
{
    tq *db = NULL;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    snprintf(path, len, "%s/p%d.db", dir, ++seq);
    assert_int_equal(tq_open(&db, path, &o), 0);
    assert_int_equal(tq_init(db), 0);
    tq_close(db);
}

static void exec(sqlite3 *h, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err);
}

/* The plan of sql, one detail per line. */
static void plan_of(sqlite3 *h, const char *sql, char *out, size_t len)
{
    char q[4096];
    sqlite3_stmt *s;
    snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", sql);
    assert_int_equal(sqlite3_prepare_v2(h, q, -1, &s, NULL), SQLITE_OK);
    out[0] = '\0';
    while (sqlite3_step(s) == SQLITE_ROW) {
        strncat(out, (const char *)sqlite3_column_text(s, 3), len - strlen(out) - 2);
        strncat(out, "\n", len - strlen(out) - 1);
    }
    sqlite3_finalize(s);
}

static void check_plans(sqlite3 *h, const char *when)
{
    static const char *const want[] = {"tq_jobs_ready_fifo", "tq_jobs_ready_lifo", NULL};
    for (int order = TQ_FIFO; order <= TQ_UNORDERED; order++) {
        char plan[4096];
        plan_of(h, tq__sqlite_claim_sql((tq_order)order), plan, sizeof plan);
        /* A search through a ready-row index; never a scan of the table and
         * never a sort. */
        if (strstr(plan, "TEMP B-TREE") || strstr(plan, "SCAN tq_jobs\n") ||
            !strstr(plan, "tq_jobs_ready_") ||
            (want[order] && !strstr(plan, want[order])))
            fail_msg("%s, order %s: unexpected plan:\n%s", when,
                     tq_order_name((tq_order)order), plan);
        if (!strstr(plan, "SEARCH tq_jobs USING INTEGER PRIMARY KEY"))
            fail_msg("%s: the update should find rows by id:\n%s", when, plan);
    }
}

static void claim_plans_use_ready_index(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    new_store(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    check_plans(h, "empty table");
    exec(
        h,
        "BEGIN;"
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)"
        " INSERT INTO tq_jobs (queue, state, payload, attempts, started_at, finished_at)"
        " SELECT 'q', 'done', 'p', 1, x, x + 5 FROM c;"
        "INSERT INTO tq_jobs (queue, payload) VALUES ('q', 'ready1'), ('q', 'ready2');"
        "COMMIT;");
    check_plans(h, "100000 done rows");
    exec(h, "ANALYZE");
    check_plans(h, "100000 done rows, analyzed");
    sqlite3_close(h);

    /* And the claim finds the two ready rows among them. */
    tq *db;
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_open(&db, path, NULL), 0);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), 0);
    assert_int_equal(n, 2);
    assert_string_equal((char *)jobs[0].payload, "ready1");
    tq_job_array_free(jobs, n);
    tq_close(db);
}

static void plain_insert_enqueues(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    new_store(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    /* What a producer in any language writes, in its own transaction. */
    exec(h, "BEGIN; INSERT INTO tq_jobs (queue, payload) VALUES ('mail', 'hi'); COMMIT;");
    exec(h, "BEGIN; INSERT INTO tq_jobs (queue, payload) VALUES ('mail', 'never');"
            " ROLLBACK;");
    /* The store's own checks hold for plain SQL too. */
    assert_int_not_equal(
        sqlite3_exec(h, "INSERT INTO tq_jobs (queue, payload) VALUES ('bad name', 'x')",
                     NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_not_equal(
        sqlite3_exec(h, "INSERT INTO tq_jobs (queue, state) VALUES ('mail', 'bogus')",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(h);

    tq *db;
    tq_job *jobs;
    size_t n;
    tq_queue_info q;
    assert_int_equal(tq_open(&db, path, NULL), 0);
    assert_int_equal(tq_queue_get(&q, db, "mail"), 0); /* created by the trigger */
    assert_int_equal(tq_job_claim(&jobs, &n, db, "mail", "w", 10), 0);
    assert_int_equal(n, 1);
    assert_string_equal((char *)jobs[0].payload, "hi");
    assert_int_equal(jobs[0].max_attempts, 3);
    assert_int_equal(tq_job_complete(db, &jobs[0]), 0);
    tq_job_array_free(jobs, n);
    tq_close(db);
}

static void wal_and_version(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    sqlite3_stmt *s;
    new_store(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &s, NULL);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "wal");
    sqlite3_finalize(s);
    exec(h, "UPDATE tq_meta SET value = '99' WHERE key = 'schema_version'");
    sqlite3_close(h);
    tq *db = NULL;
    assert_int_equal(tq_open(&db, path, NULL), TQ_ESCHEMA);
    assert_non_null(strstr(tq_errmsg(db), "newer"));
    tq_close(db);
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    assert_int_equal(tq_open(&db, path, &o), 0);
    assert_int_equal(tq_init(db), TQ_ESCHEMA); /* init does not downgrade */
    tq_close(db);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/tq-sqlite-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(claim_plans_use_ready_index),
        cmocka_unit_test(plain_insert_enqueues),
        cmocka_unit_test(wal_and_version),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (scratch_remove(dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return failed;
}
