/*
 * test_sqlite.c - what only the SQLite engine promises: the claim of each
 * order is an index search with no sort, also beside 100,000 done rows; the
 * LIFO index exists while a queue is LIFO; an acknowledgement builds no
 * temporary table; a plain INSERT from any program enqueues; the file is in
 * WAL mode; a store newer than this build is refused, an older one upgrades.
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
#include "upgrade.h"

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
    char q[8192];
    sqlite3_stmt *s;
    assert_true((size_t)snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", sql) < sizeof q);
    assert_int_equal(sqlite3_prepare_v2(h, q, -1, &s, NULL), SQLITE_OK);
    out[0] = '\0';
    while (sqlite3_step(s) == SQLITE_ROW) {
        strncat(out, (const char *)sqlite3_column_text(s, 3), len - strlen(out) - 2);
        strncat(out, "\n", len - strlen(out) - 1);
    }
    sqlite3_finalize(s);
}

/* The plan of a limited claim (kind 1), or a chain's (kind 2; LIFO's is
 * the limited one): see check_plans. */
static void limited_plan_ok(const char *plan, tq_order order, int kind, const char *when)
{
    const int lifo = order == TQ_LIFO;
    if (strstr(plan, "SCAN tq_jobs\n") || strstr(plan, "SCAN j\n") ||
        (lifo && !strstr(plan, "SEARCH j USING INDEX tq_jobs_ready_lifo")) ||
        (!lifo && (!strstr(plan, "SEARCH tq_jobs USING INDEX tq_jobs_ready_group "
                                 "(queue=? AND job_group>?)") ||
                   !strstr(plan, "SEARCH tq_jobs USING INDEX tq_jobs_ready_group "
                                 "(queue=? AND job_group=?)") ||
                   (!strstr(plan, "SEARCH tq_jobs USING INDEX tq_jobs_ready_fifo "
                                  "(queue=?)") &&
                    (order == TQ_FIFO ||
                     !strstr(plan, "SEARCH tq_jobs USING INDEX tq_jobs_ready_lifo "
                                   "(queue=?)"))))) ||
        !strstr(plan, "SCAN tq_jobs USING INDEX tq_jobs_running\n") ||
        !strstr(plan, "SEARCH tq_jobs USING INTEGER PRIMARY KEY"))
        fail_msg("%s, order %s, %s: unexpected plan:\n%s", when, tq_order_name(order),
                 kind == 1 ? "limited" : "chain", plan);
}

static void check_plans(sqlite3 *h, const char *when)
{
    static const char *const want[] = {"tq_jobs_ready_fifo", "tq_jobs_ready_lifo", NULL};
    /* Every kind's picked rows are claimed by id. */
    char mark[1024];
    plan_of(h, tq__sqlite_claim_mark_sql(), mark, sizeof mark);
    if (!strstr(mark, "SEARCH tq_jobs USING INTEGER PRIMARY KEY") ||
        strstr(mark, "SCAN tq_jobs"))
        fail_msg("%s: the claim should mark rows by id:\n%s", when, mark);
    for (int order = TQ_FIFO; order <= TQ_UNORDERED; order++) {
        char plan[8192];
        plan_of(h, tq__sqlite_claim_sql((tq_order)order, 0), plan, sizeof plan);
        /* A search through a ready-row index; never a scan of the table and
         * never a sort. */
        if (strstr(plan, "TEMP B-TREE") || strstr(plan, "SCAN tq_jobs\n") ||
            !strstr(plan, "tq_jobs_ready_") ||
            (want[order] && !strstr(plan, want[order])))
            fail_msg("%s, order %s: unexpected plan:\n%s", when,
                     tq_order_name((tq_order)order), plan);
        if (!strstr(plan, "SEARCH tq_jobs USING INDEX tq_jobs_ready_"))
            fail_msg("%s: the pick should search the ready index:\n%s", when, plan);
        /* The limited claim: the running rows through the running-row
         * index; no table scan. LIFO: the same search for its candidates
         * (it sorts only those, at most 4 x a batch + 32). The others: the
         * groups with ready jobs walked in the group index, a seek each for
         * the next group and for a group's first jobs, and the jobs
         * without a group from the head of the ready index; a chain's
         * claim too (its groups' chains are such seeks). */
        exec(h, tq__sqlite_group_index_sql()); /* as a grouped claim does */
        for (int kind = 1; kind <= 2; kind++) {
            plan_of(h, tq__sqlite_claim_sql((tq_order)order, kind), plan, sizeof plan);
            limited_plan_ok(plan, (tq_order)order, kind, when);
        }
        /* Without a group limit: as the plain claim, and the running rows
         * (max_running) through the running-row index. */
        plan_of(h, tq__sqlite_claim_sql((tq_order)order, 3), plan, sizeof plan);
        if (strstr(plan, "TEMP B-TREE") || strstr(plan, "SCAN tq_jobs\n") ||
            (want[order] && !strstr(plan, want[order])) ||
            !strstr(plan, "SEARCH tq_jobs USING INDEX tq_jobs_ready_") ||
            !strstr(plan, "SCAN tq_jobs USING INDEX tq_jobs_running\n") ||
            !strstr(plan, "SEARCH tq_jobs USING INTEGER PRIMARY KEY"))
            fail_msg("%s, order %s, limited without groups: unexpected plan:\n%s", when,
                     tq_order_name((tq_order)order), plan);
    }
}

/* Whether the store has an index of that name. */
static int has_index(sqlite3 *h, const char *name)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT count(*) FROM sqlite_schema"
                                        " WHERE type = 'index' AND name = ?1",
                                        -1, &s, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int n = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return n;
}

/* tq_queue_set of o on a handle of its own. */
static void set_queue(const char *path, const char *queue, const tq_queue_opts *o)
{
    tq *db;
    assert_int_equal(tq_open(&db, path, NULL), 0);
    assert_int_equal(tq_queue_set(db, queue, o), 0);
    tq_close(db);
}

static void set_order(const char *path, const char *queue, tq_order order)
{
    tq_queue_opts o = {.version = TQ_QUEUE_OPTS_VERSION, .set = TQ_SET_ORDER};
    o.order = order;
    set_queue(path, queue, &o);
}

static void claim_plans_use_ready_index(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    new_store(path, sizeof path);
    set_order(path, "lifo-queue", TQ_LIFO); /* the LIFO index exists */
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

static void set_group_limit(const char *path, const char *queue, int limit)
{
    tq_queue_opts o = {.version = TQ_QUEUE_OPTS_VERSION,
                       .set = TQ_SET_MAX_RUNNING_PER_GROUP};
    o.max_running_per_group = limit;
    set_queue(path, queue, &o);
}

/* The group index is kept only while a queue has a per-group limit; a
 * limit set by plain SQL gets it at the queue's first claim, which then
 * keeps the limit. */
static void group_index_follows_queues(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    new_store(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_false(has_index(h, "tq_jobs_ready_group"));
    set_group_limit(path, "a", 1);
    assert_true(has_index(h, "tq_jobs_ready_group"));
    set_group_limit(path, "b", 2);
    set_group_limit(path, "a", 0); /* "b" still needs it */
    assert_true(has_index(h, "tq_jobs_ready_group"));
    set_group_limit(path, "b", 0);
    assert_false(has_index(h, "tq_jobs_ready_group"));

    exec(h,
         "INSERT INTO tq_queues (name, max_running_per_group) VALUES ('g', 1);"
         "INSERT INTO tq_jobs (queue, payload, job_group) VALUES ('g', 'g1 first', 'g1'),"
         " ('g', 'g1 second', 'g1'), ('g', 'g2 first', 'g2');");
    assert_false(has_index(h, "tq_jobs_ready_group"));
    tq *db;
    assert_int_equal(tq_open(&db, path, NULL), 0);
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "g", "w", 10), 0);
    /* tq_job_claim reads the queue's settings: one job of each group. */
    assert_int_equal(n, 2);
    tq_job_array_free(jobs, n);
    assert_true(has_index(h, "tq_jobs_ready_group"));
    tq_close(db);
    sqlite3_close(h);
}

/* The LIFO index is kept only while a queue needs it; FIFO and unordered
 * claims stay index searches without it. */
static void lifo_index_follows_queues(void **state)
{
    (void)state;
    char path[128], plan[4096];
    sqlite3 *h;
    new_store(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_false(has_index(h, "tq_jobs_ready_lifo"));
    for (int order = TQ_FIFO; order <= TQ_UNORDERED; order += 2) {
        plan_of(h, tq__sqlite_claim_sql((tq_order)order, 0), plan, sizeof plan);
        if (!strstr(plan, "tq_jobs_ready_fifo") || strstr(plan, "TEMP B-TREE"))
            fail_msg("order %s without a LIFO queue:\n%s", tq_order_name((tq_order)order),
                     plan);
    }

    set_order(path, "stack", TQ_LIFO);
    assert_true(has_index(h, "tq_jobs_ready_lifo"));
    set_order(path, "other", TQ_FIFO); /* "stack" still needs it */
    assert_true(has_index(h, "tq_jobs_ready_lifo"));
    set_order(path, "stack", TQ_UNORDERED);
    assert_false(has_index(h, "tq_jobs_ready_lifo"));

    /* A queue made LIFO by plain SQL gets the index at its first claim,
     * and the claim takes the newest job. */
    exec(h, "UPDATE tq_queues SET ord = 'lifo' WHERE name = 'stack';"
            "INSERT INTO tq_jobs (queue, payload) VALUES ('stack', 'old'),"
            " ('stack', 'new');");
    assert_false(has_index(h, "tq_jobs_ready_lifo"));
    tq *db;
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_open(&db, path, NULL), 0);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "stack", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_string_equal((char *)jobs[0].payload, "new");
    tq_job_array_free(jobs, n);
    assert_true(has_index(h, "tq_jobs_ready_lifo"));
    /* Dropped behind a connection that prepared its claims: made again. */
    exec(h, "DROP INDEX tq_jobs_ready_lifo");
    assert_int_equal(tq_job_claim(&jobs, &n, db, "stack", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_string_equal((char *)jobs[0].payload, "old");
    tq_job_array_free(jobs, n);
    assert_true(has_index(h, "tq_jobs_ready_lifo"));
    tq_close(db);
    sqlite3_close(h);
}

/* The temporary tables (OpenEphemeral) the program of sql opens. */
static int temp_tables(sqlite3 *h, const char *sql)
{
    char q[4096];
    sqlite3_stmt *s;
    snprintf(q, sizeof q, "EXPLAIN %s", sql);
    assert_int_equal(sqlite3_prepare_v2(h, q, -1, &s, NULL), SQLITE_OK);
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW)
        n += !strcmp((const char *)sqlite3_column_text(s, 1), "OpenEphemeral");
    sqlite3_finalize(s);
    return n;
}

/* Acknowledging a job builds no temporary table; schema 4's state CHECK,
 * an IN list of five values, built one for every row a statement moved. */
static void ack_program_has_no_temp_table(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    new_store(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(temp_tables(h, tq__sqlite_ack_sql()), 0);
    sqlite3_close(h);

    /* The same acknowledgement as schema 4 knew it (fenced by attempt). */
    assert_int_equal(sqlite3_open(":memory:", &h), SQLITE_OK);
    for (int v = 1; v <= 4; v++)
        exec(h, tq__sqlite_migration(v));
    assert_int_equal(temp_tables(h, "UPDATE tq_jobs SET state = 'done', finished_at = ?4,"
                                    " lease_until = NULL WHERE id = ?1 AND"
                                    " state = 'running' AND worker = ?2 AND"
                                    " attempts = ?3"),
                     1);
    sqlite3_close(h);
}

/* A store made by schema version (its migrations as shipped), recorded as
 * that version and filled by rows (SQL), at path. */
static void old_store(char *path, size_t len, int version, const char *rows)
{
    sqlite3 *h;
    char meta[96];
    snprintf(path, len, "%s/v%d.db", dir, version);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    exec(h, "PRAGMA journal_mode = WAL; BEGIN");
    for (int v = 1; v <= version; v++)
        exec(h, tq__sqlite_migration(v));
    snprintf(meta, sizeof meta,
             "INSERT INTO tq_meta (key, value) VALUES ('schema_version', '%d')", version);
    exec(h, meta);
    exec(h, rows);
    exec(h, "COMMIT");
    sqlite3_close(h);
}

/* tq init over the store at path; the handle it leaves open. */
static tq *upgraded(const char *path)
{
    tq *db;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    assert_int_equal(tq_open(&db, path, &o), 0);
    assert_int_equal(tq_init(db), 0);
    return db;
}

static int64_t count_of(sqlite3 *h, const char *sql)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* A claim claims every row it picked or none: a row someone else's
 * trigger keeps from changing fails the claim, which leaves every job
 * ready, as it was. */
static void claim_marks_all_it_picked(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    new_store(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    exec(h,
         "INSERT INTO tq_jobs (id, queue, payload) VALUES (1, 'q', 'a'), (2, 'q', 'b'),"
         " (3, 'q', 'c');"
         "CREATE TRIGGER keep_two BEFORE UPDATE ON tq_jobs WHEN OLD.id = 2"
         " BEGIN SELECT RAISE(IGNORE); END;");
    tq *db;
    tq_job *jobs = NULL;
    size_t n = 0;
    assert_int_equal(tq_open(&db, path, NULL), 0);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), TQ_EDB);
    assert_non_null(strstr(tq_errmsg(db), "2 of the 3 ready jobs picked were claimed"));
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs"
                                 " WHERE state = 'ready' AND claims = 0"),
                     3);
    exec(h, "DROP TRIGGER keep_two");
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), 0);
    assert_int_equal(n, 3);
    tq_job_array_free(jobs, n);
    tq_close(db);
    sqlite3_close(h);
}

/* A store made by schema 4 comes up to the current schema with every row,
 * the id counter, the checks, the trigger and the indexes. */
static void upgrade_from_version_4(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    old_store(
        path, sizeof path, 4,
        "INSERT INTO tq_queues (name, ord) VALUES ('stack', 'lifo');"
        "INSERT INTO tq_jobs (queue, payload, dedup_key) VALUES ('q', 'a', 'k1'),"
        " ('q', 'b', NULL), ('stack', 'c', NULL), ('q', 'gone', NULL);"
        "UPDATE tq_jobs SET state = 'done', attempts = 1, finished_at = 7 WHERE id = 1;"
        "UPDATE tq_jobs SET state = 'running', attempts = 1, worker = 'w',"
        " lease_until = 9 WHERE id = 2;"
        "DELETE FROM tq_jobs WHERE id = 4;"); /* the newest id was pruned */
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_true(has_index(h, "tq_jobs_ready_lifo"));
    sqlite3_close(h);

    tq *db;
    assert_int_equal(tq_open(&db, path, NULL), TQ_ESCHEMA); /* init first */
    tq_close(db);
    tq_close(upgraded(path));

    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(count_of(h, "SELECT value FROM tq_meta"
                                 " WHERE key = 'schema_version'"),
                     TQ__SCHEMA_VERSION);
    assert_int_equal(count_of(h,
                              "SELECT count(*) FROM tq_jobs"
                              " WHERE (id, state, payload) IN (VALUES (1, 'done', 'a'),"
                              " (2, 'running', 'b'), (3, 'ready', 'c'))"),
                     3);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs WHERE id = 2 AND"
                                 " worker = 'w' AND lease_until = 9 AND attempts = 1"),
                     1);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs"), 3);
    assert_int_equal(count_of(h,
                              "SELECT count(*) FROM sqlite_schema WHERE name IN"
                              " ('tq_jobs_ready_fifo', 'tq_jobs_ready_lifo',"
                              " 'tq_jobs_running', 'tq_jobs_finished', 'tq_jobs_dedup',"
                              " 'tq_jobs_new_queue')"),
                     6);
    assert_int_equal(count_of(h, "SELECT count(*) FROM sqlite_schema"
                                 " WHERE name LIKE '%v5%'"),
                     0);
    /* The checks hold. */
    assert_int_not_equal(
        sqlite3_exec(h, "INSERT INTO tq_jobs (queue, state) VALUES ('q', 'bogus')", NULL,
                     NULL, NULL),
        SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(h,
                                      "INSERT INTO tq_jobs (queue, dedup_key)"
                                      " VALUES ('q', 'k1')",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    /* A new job gets an id never used before, and its queue by trigger. */
    exec(h, "INSERT INTO tq_jobs (queue, payload) VALUES ('fresh', 'd')");
    assert_int_equal(count_of(h, "SELECT max(id) FROM tq_jobs"), 5);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_queues WHERE name = 'fresh'"),
                     1);
    check_plans(h, "upgraded store");
    sqlite3_close(h);
}

/* Version 6 adds the claim counter and the checks a running row's lease
 * and a priority's range get; a version 5 store's rows that break them are
 * mended on the way, and the rest are kept as they were. */
static void upgrade_from_version_5(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    old_store(
        path, sizeof path, 5,
        "INSERT INTO tq_jobs (id, queue, state, payload, attempts, worker, started_at,"
        "  lease_until) VALUES (1, 'q', 'running', 'leased', 1, 'w', 5, 9),"
        "  (2, 'q', 'running', 'stranded', 1, 'w', 5, NULL);"
        "INSERT INTO tq_jobs (id, queue, payload, priority)"
        "  VALUES (3, 'q', 'big', 2147483648), (4, 'q', 'small', -2147483649);"
        "INSERT INTO tq_workers (name, host, pid, started_at, heartbeat_at, lease_us)"
        "  VALUES ('w', 'h', 1, 1, 1, 30000000);");
    tq *db = upgraded(path);
    int64_t n = 0;
    assert_int_equal(tq_rescue_expired(&n, db), 0);
    assert_int_equal(n, 2); /* both leases are in the past, the stranded one too */
    tq_close(db);

    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs WHERE claims = 0"
                                 " AND unknown_starts = 0"),
                     4);
    assert_int_equal(count_of(h, "SELECT priority FROM tq_jobs WHERE id = 3"),
                     2147483647);
    assert_int_equal(count_of(h, "SELECT priority FROM tq_jobs WHERE id = 4"),
                     -2147483648LL);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_workers WHERE host_id IS NULL"),
                     1);
    static const char *const refused[] = {
        "INSERT INTO tq_jobs (queue, state, payload) VALUES ('q', 'running', 'x')",
        "INSERT INTO tq_jobs (queue, payload, priority) VALUES ('q', 'x', 2147483648)",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_int_equal(sqlite3_exec(h, refused[i], NULL, NULL, NULL),
                         SQLITE_CONSTRAINT);
    sqlite3_close(h);
}

/* A store made by schema 6 takes keys with a scope (migration 7): its
 * stored keys hold as before, scoped keys work beside them, the claim is
 * still a seek, and plain SQL cannot write a scope no index knows. */
static void upgrade_from_version_6(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    old_store(
        path, sizeof path, 6,
        "INSERT INTO tq_queues (name, ord) VALUES ('stack', 'lifo');"
        "CREATE INDEX tq_jobs_ready_lifo ON tq_jobs (queue, priority, id, run_at)"
        " WHERE state = 'ready';" /* as a LIFO queue has it */
        "INSERT INTO tq_jobs (queue, payload, dedup_key) VALUES ('q', 'kept', 'k1'),"
        " ('q', 'plain', NULL);");
    tq *db = upgraded(path);
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t id;
    eo.key = "k1";
    assert_int_equal(tq_job_enqueue(&id, db, "q", "again", 5, &eo), TQ_DUP);
    assert_int_equal(id, 1);
    eo.unique = TQ_UNIQUE_QUEUED;
    int64_t scoped;
    assert_int_equal(tq_job_enqueue(&scoped, db, "q", "scoped", 6, &eo), 0);
    assert_int_equal(tq_job_enqueue(&id, db, "q", "scoped", 6, &eo), TQ_DUP);
    assert_int_equal(id, scoped);
    tq_close(db);

    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_true(has_index(h, "tq_jobs_unique"));
    check_plans(h, "store upgraded from 6");
    /* The INSERT producers already had still works, as documented. */
    exec(h, "INSERT INTO tq_jobs (queue, payload, dedup_key) VALUES ('q', 'x', 'k1')"
            " ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING");
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs WHERE dedup_key = 'k1'"),
                     1);
    assert_int_equal(sqlite3_exec(h,
                                  "INSERT INTO tq_jobs (queue, payload, unique_key,"
                                  " unique_scope) VALUES ('q', 'x', 'u', 'bogus')",
                                  NULL, NULL, NULL),
                     SQLITE_CONSTRAINT);
    assert_int_equal(sqlite3_exec(h,
                                  "INSERT INTO tq_jobs (queue, payload, unique_key,"
                                  " unique_scope) VALUES ('q', 'x', 'k1', 'queued')",
                                  NULL, NULL, NULL),
                     SQLITE_CONSTRAINT); /* held by the scoped job */
    sqlite3_close(h);
}

/* A store of schema 7 gains the jobs' trace context (migration 8), its
 * rows read back without one. */
static void upgrade_from_version_7(void **state)
{
    (void)state;
    char path[128];
    old_store(path, sizeof path, 7,
              "INSERT INTO tq_jobs (queue, payload) VALUES ('q', 'old')");
    tq *db = upgraded(path);
    tq_job *j;
    assert_int_equal(tq_job_get(&j, db, 1), 0);
    assert_null(j->traceparent);
    assert_string_equal((char *)j->payload, "old");
    tq_job_free(j);
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t id;
    eo.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert_int_equal(tq_job_enqueue(&id, db, "q", "new", 3, &eo), 0);
    assert_int_equal(tq_job_get(&j, db, id), 0);
    assert_string_equal(j->traceparent, eo.traceparent);
    tq_job_free(j);
    tq_close(db);
}

/* A store of schema 8 takes groups and concurrency limits (migration 9):
 * a job from before has no group and still runs; a queue from before has
 * no limit until one is set, and then the claim keeps to it. */
static void upgrade_from_version_8(void **state)
{
    (void)state;
    char path[128];
    old_store(path, sizeof path, 8,
              "INSERT INTO tq_jobs (queue, payload) VALUES ('q', 'old'), ('q', 'old2')");
    tq *db = upgraded(path);
    tq_queue_info q;
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.max_running, 0);
    assert_int_equal(q.max_running_per_group, 0);
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_MAX_RUNNING;
    qo.max_running = 1;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    tq_enqueue_opts eo = TQ_ENQUEUE_OPTS_INIT;
    int64_t id;
    eo.group = "acct-1";
    assert_int_equal(tq_job_enqueue(&id, db, "q", "new", 3, &eo), 0);
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), 0);
    assert_int_equal(n, 1); /* max_running 1 */
    assert_string_equal((char *)jobs[0].payload, "old");
    assert_null(jobs[0].group);
    tq_job_array_free(jobs, n);
    tq_job *j;
    assert_int_equal(tq_job_get(&j, db, id), 0);
    assert_string_equal(j->group, "acct-1");
    tq_job_free(j);
    tq_close(db);
}

/* A store of schema 9 takes rate limits (migration 10): a queue from
 * before has none until one is set, and then the claim keeps to it; a
 * version-2 caller's options never set one. */
static void upgrade_from_version_9(void **state)
{
    (void)state;
    char path[128];
    old_store(path, sizeof path, 9,
              "INSERT INTO tq_jobs (queue, payload) VALUES ('q', 'a'), ('q', 'b'),"
              " ('q', 'c')");
    tq *db = upgraded(path);
    tq_queue_info q;
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.rate_limit, 0);
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.version = 2; /* ends before the rate: ignored */
    qo.set = TQ_SET_RATE;
    qo.rate_limit = 1;
    qo.rate_period_us = 3600 * 1000000LL;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.rate_limit, 0);
    qo.version = TQ_QUEUE_OPTS_VERSION;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), 0);
    assert_int_equal(n, 1); /* one an hour */
    assert_string_equal((char *)jobs[0].payload, "a");
    tq_job_array_free(jobs, n);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 10), 0);
    assert_int_equal(n, 0);
    tq_close(db);
}

/* A store of schema 10 takes periodic jobs (migration 11): a job from
 * before belongs to no schedule; a schedule's slot is enqueued once. */
static void upgrade_from_version_10(void **state)
{
    (void)state;
    char path[128];
    old_store(path, sizeof path, 10,
              "INSERT INTO tq_jobs (queue, payload) VALUES ('q', 'old')");
    tq *db = upgraded(path);
    tq_schedule_opts so = TQ_SCHEDULE_OPTS_INIT;
    so.queue = "q";
    so.spec = "@every 1s";
    assert_int_equal(tq_schedule_set(db, "tick", &so), 0);
    usleep(1100000);
    int64_t n = 0;
    assert_int_equal(tq_schedule_run(db, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tq_schedule_run(db, &n, NULL), 0);
    assert_int_equal(n, 0);
    tq_close(db);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs WHERE schedule IS NULL"),
                     1);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs WHERE schedule = 'tick'"),
                     1);
    sqlite3_close(h);
}

/* A store of schema 11 takes the control channel's columns (migration 12):
 * its jobs have not snoozed and report no progress, its queues allow 100
 * snoozes, and a snooze, a progress and a discard work on its old rows;
 * plain SQL cannot write a progress outside 0 to 100. */
static void upgrade_from_version_11(void **state)
{
    (void)state;
    char path[128];
    old_store(path, sizeof path, 11,
              "INSERT INTO tq_jobs (id, queue, payload) VALUES (1, 'q', 'old'),"
              " (2, 'q', 'old2')");
    tq *db = upgraded(path);
    tq_queue_info q;
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.max_snoozes, 100);
    assert_int_equal(q.results, 0);
    tq_job *jobs, *j;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w", 2), 0);
    assert_int_equal(n, 2);
    assert_int_equal(jobs[0].id, 1);
    assert_int_equal(jobs[0].snoozes, 0);
    control_words(db, jobs, n);
    void *res;
    size_t len;
    assert_int_equal(tq_job_result(&res, &len, db, 2), 0);
    assert_int_equal(len, 2);
    assert_memory_equal(res, "42", 2);
    tq_free(res);
    assert_int_equal(tq_job_get(&j, db, 1), 0);
    assert_int_equal(j->state, TQ_DEAD);
    assert_int_equal(j->progress, 40);
    assert_string_equal(j->progress_text, "reading");
    assert_string_equal(j->last_error, "bad input");
    assert_int_equal(j->result_len, -1);
    tq_job_free(j);
    assert_int_equal(tq_job_get(&j, db, 2), 0);
    assert_int_equal(j->state, TQ_DONE);
    assert_int_equal(j->snoozes, 1);
    assert_int_equal(j->attempts, 1);
    assert_int_equal(j->progress, -1);
    assert_int_equal(j->result_len, 2);
    tq_job_free(j);
    tq_close(db);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(h, "UPDATE tq_jobs SET progress = 101", NULL, NULL, NULL),
        SQLITE_CONSTRAINT);
    sqlite3_close(h);
}

/* A store of schema 12 is built again with the waiting state (migration
 * 13): every row keeps every column, the id counter holds, the indexes,
 * the unique keys and the queue trigger come back, and its old jobs can be
 * parents. */
static void upgrade_from_version_12(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    old_store(path, sizeof path, 12,
              "INSERT INTO tq_queues (name, ord) VALUES ('stack', 'lifo');"
              "INSERT INTO tq_jobs (id, queue, payload, dedup_key, job_group,"
              " traceparent, schedule, slot, snoozes) VALUES"
              " (1, 'q', 'a', 'k1', 'g', 'tp', 's', 5, 2),"
              " (2, 'q', 'b', NULL, NULL, NULL, NULL, NULL, 0),"
              " (3, 'stack', 'c', NULL, NULL, NULL, NULL, NULL, 0),"
              " (4, 'q', 'gone', NULL, NULL, NULL, NULL, NULL, 0);"
              "INSERT INTO tq_jobs (id, queue, payload, unique_key, unique_scope)"
              " VALUES (5, 'q', 'u', 'uk', 'active');"
              "UPDATE tq_jobs SET state = 'done', attempts = 1, finished_at = 7,"
              " result = x'00ff', progress = 100, progress_text = 'all' WHERE id = 1;"
              "UPDATE tq_jobs SET state = 'running', attempts = 1, worker = 'w',"
              " lease_until = 9, claims = 3, unknown_starts = 1 WHERE id = 2;"
              "DELETE FROM tq_jobs WHERE id = 4;");
    tq_close(upgraded(path));
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(
        count_of(h, "SELECT count(*) FROM tq_jobs WHERE id = 1 AND state = 'done'"
                    " AND payload = 'a' AND dedup_key = 'k1' AND job_group = 'g'"
                    " AND traceparent = 'tp' AND schedule = 's' AND slot = 5"
                    " AND snoozes = 2 AND result = x'00ff' AND progress = 100"
                    " AND progress_text = 'all' AND finished_at = 7 AND nparents = 0"),
        1);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs WHERE id = 2"
                                 " AND state = 'running' AND worker = 'w'"
                                 " AND lease_until = 9 AND claims = 3"
                                 " AND unknown_starts = 1"),
                     1);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs"), 4);
    assert_int_equal(count_of(h,
                              "SELECT count(*) FROM sqlite_schema WHERE name IN"
                              " ('tq_jobs_ready_fifo', 'tq_jobs_ready_lifo',"
                              " 'tq_jobs_running', 'tq_jobs_finished', 'tq_jobs_dedup',"
                              " 'tq_jobs_unique', 'tq_jobs_new_queue', 'tq_deps',"
                              " 'tq_deps_child', 'tq_deps_new', 'tq_deps_once',"
                              " 'tq_deps_fixed', 'tq_deps_kept')"),
                     13);
    assert_int_equal(count_of(h, "SELECT count(*) FROM sqlite_schema"
                                 " WHERE name LIKE '%v13%'"),
                     0);
    /* The keys still hold, and the checks. */
    assert_int_not_equal(sqlite3_exec(h,
                                      "INSERT INTO tq_jobs (queue, dedup_key)"
                                      " VALUES ('q', 'k1')",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(h,
                                      "INSERT INTO tq_jobs (queue, unique_key,"
                                      " unique_scope) VALUES ('q', 'uk', 'active')",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    assert_int_not_equal(
        sqlite3_exec(h, "INSERT INTO tq_jobs (queue, state) VALUES ('q', 'bogus')", NULL,
                     NULL, NULL),
        SQLITE_OK);
    check_plans(h, "store upgraded from 12");
    sqlite3_close(h);

    /* A new job gets a new id, and the old ones can be its parents. */
    tq *db = upgraded(path);
    const int64_t parents[] = {1, 3};
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.after = parents;
    o.nafter = 2;
    int64_t id;
    assert_int_equal(tq_job_enqueue(&id, db, "q", "d", 1, &o), 0);
    assert_int_equal(id, 6);
    tq_job *j, *jobs;
    size_t n;
    assert_int_equal(tq_job_get(&j, db, id), 0);
    assert_int_equal(j->state, TQ_WAITING);
    assert_int_equal(j->nparents, 2);
    assert_int_equal(j->waiting_for, 1);
    tq_job_free(j);
    assert_int_equal(tq_job_claim(&jobs, &n, db, "stack", "w", 1), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tq_job_complete(db, &jobs[0]), 0);
    tq_job_array_free(jobs, n);
    assert_int_equal(tq_job_get(&j, db, id), 0);
    assert_int_equal(j->state, TQ_READY);
    assert_int_equal(j->waiting_for, 0);
    tq_job_free(j);
    tq_close(db);
}

/* A store of schema 13 gains the index of each group's ready jobs
 * (migration 14), holding exactly the ready rows with a group, and its
 * per-group limits hold through the claim that walks it. */
static void upgrade_from_version_13(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    old_store(path, sizeof path, 13,
              "INSERT INTO tq_queues (name, max_running_per_group) VALUES ('q', 1);"
              "INSERT INTO tq_queues (name, ord) VALUES ('stack', 'lifo');"
              "INSERT INTO tq_jobs (id, queue, payload, job_group) VALUES"
              " (1, 'q', 'a', 'g1'), (2, 'q', 'b', 'g1'), (3, 'q', 'c', 'g2'),"
              " (4, 'q', 'd', NULL), (5, 'q', 'e', 'g2'), (6, 'q', 'f', 'g3');"
              "UPDATE tq_jobs SET state = 'running', attempts = 1, worker = 'w',"
              " lease_until = 4000000000000000, claims = 1 WHERE id = 1;"
              "UPDATE tq_jobs SET state = 'done', finished_at = 7 WHERE id = 6;");
    tq *db = upgraded(path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs INDEXED BY"
                                 " tq_jobs_ready_group WHERE queue = 'q'"
                                 " AND state = 'ready' AND job_group IS NOT NULL"),
                     3);
    check_plans(h, "store upgraded from 13");
    sqlite3_close(h);
    /* g1 is full; g2 gives its first job; the job without a group comes. */
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w2", 10), 0);
    assert_int_equal(n, 2);
    assert_int_equal(jobs[0].id, 3);
    assert_int_equal(jobs[1].id, 4);
    tq_job_array_free(jobs, n);
    tq_close(db);
}

/* A store of schema 16 takes timeouts (migration 17): its jobs in every
 * state are kept, with no timeout of their own, and so are its queues,
 * with none; both can be set after. */
static void upgrade_from_version_16(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    old_store(path, sizeof path, 16,
              "INSERT INTO tq_queues (name) VALUES ('q');"
              "INSERT INTO tq_queues (name, ord) VALUES ('stack', 'lifo');"
              "INSERT INTO tq_jobs (id, queue, payload, state) VALUES"
              " (1, 'q', 'a', 'ready'), (2, 'q', 'b', 'ready'), (3, 'q', 'c', 'ready'),"
              " (4, 'q', 'd', 'ready'), (5, 'q', 'e', 'ready'), (6, 'q', 'f', 'ready');"
              "UPDATE tq_jobs SET state = 'running', attempts = 1, worker = 'w',"
              " lease_until = 4000000000000000, claims = 1 WHERE id = 2;"
              "UPDATE tq_jobs SET state = 'done', finished_at = 7 WHERE id = 3;"
              "UPDATE tq_jobs SET state = 'dead', finished_at = 7 WHERE id = 4;"
              "UPDATE tq_jobs SET state = 'cancelled', finished_at = 7 WHERE id = 5;"
              "UPDATE tq_jobs SET state = 'waiting', waiting_for = 1 WHERE id = 6;");
    tq *db = upgraded(path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(count_of(h, "SELECT count(*) FROM tq_jobs WHERE timeout_us IS NULL"),
                     6);
    check_plans(h, "store upgraded from 16");
    sqlite3_close(h);
    static const tq_state want[] = {TQ_READY, TQ_RUNNING,   TQ_DONE,
                                    TQ_DEAD,  TQ_CANCELLED, TQ_WAITING};
    for (int64_t id = 1; id <= 6; id++) {
        tq_job *j;
        assert_int_equal(tq_job_get(&j, db, id), 0);
        assert_int_equal(j->state, want[id - 1]);
        assert_int_equal(j->timeout_us, 0);
        tq_job_free(j);
    }
    tq_queue_info q;
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.timeout_us, 0);
    assert_int_equal(q.retain_done_us, 0);
    assert_int_equal(q.retain_dead_us, 0);
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_TIMEOUT;
    qo.timeout_us = 60000000;
    assert_int_equal(tq_queue_set(db, "q", &qo), 0);
    assert_int_equal(tq_queue_get(&q, db, "q"), 0);
    assert_int_equal(q.timeout_us, 60000000);
    tq_job *jobs;
    size_t n;
    assert_int_equal(tq_job_claim(&jobs, &n, db, "q", "w2", 10), 0);
    assert_int_equal(n, 1);
    assert_int_equal(jobs[0].id, 1);
    assert_int_equal(jobs[0].timeout_us, 0);
    tq_job_array_free(jobs, n);
    tq_close(db);
}

/* A store of schema 17 takes what releases a child (migration 18): its
 * dependencies are kept, each released when its parent is done as
 * before, and the rules go on for them; a child that waits for its
 * parents' end can be added. */
static void upgrade_from_version_17(void **state)
{
    (void)state;
    char path[128];
    sqlite3 *h;
    old_store(path, sizeof path, 17,
              "INSERT INTO tq_queues (name, ord) VALUES ('stack', 'lifo');"
              "INSERT INTO tq_jobs (id, queue, payload) VALUES"
              " (1, 'q', 'a'), (2, 'q', 'b'), (3, 'c', 'c');"
              "INSERT INTO tq_deps (parent, child) VALUES (1, 3), (2, 3);");
    tq *db = upgraded(path);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(count_of(h,
                              "SELECT count(*) FROM tq_deps WHERE release_when = 'done'"
                              " AND parent_state IS NULL"),
                     2);
    check_plans(h, "store upgraded from 17");
    sqlite3_close(h);
    dependencies_after_upgrade(db, (const int64_t[]){1, 2}, 3);
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
        cmocka_unit_test(lifo_index_follows_queues),
        cmocka_unit_test(group_index_follows_queues),
        cmocka_unit_test(claim_marks_all_it_picked),
        cmocka_unit_test(ack_program_has_no_temp_table),
        cmocka_unit_test(upgrade_from_version_4),
        cmocka_unit_test(upgrade_from_version_5),
        cmocka_unit_test(upgrade_from_version_6),
        cmocka_unit_test(upgrade_from_version_7),
        cmocka_unit_test(upgrade_from_version_8),
        cmocka_unit_test(upgrade_from_version_9),
        cmocka_unit_test(upgrade_from_version_10),
        cmocka_unit_test(upgrade_from_version_11),
        cmocka_unit_test(upgrade_from_version_12),
        cmocka_unit_test(upgrade_from_version_13),
        cmocka_unit_test(upgrade_from_version_16),
        cmocka_unit_test(upgrade_from_version_17),
        cmocka_unit_test(wal_and_version),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (scratch_remove(dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return failed;
}
