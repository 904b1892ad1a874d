/*
 * test_owntx.c - a job's end in the caller's own transaction, on the caller's
 * own connection (tq_open_opts.conn): the effect a program writes and the
 * job's completion commit together or not at all. On SQLite by default; on
 * PostgreSQL with TQ_TEST_ENGINE=postgres and TQ_TEST_PG_URL, each test in
 * a fresh schema.
 *
 * The last test is the proof: child processes run the jobs, each writing its
 * effect and completing the job in one transaction, and are killed with
 * SIGKILL at chosen points and at random moments; after each kill the
 * expired leases are rescued and the jobs run again. At the end every job
 * is done and has exactly one effect: never none, never two.
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "pg_url.h"
#include "scratch.h"
#include "tq.h"

/* ---- the caller's own connection, on either engine -------------------------- */

typedef struct native {
    sqlite3 *lite;
    PGconn *pg;
} native;

typedef struct fx {
    char url[512];
    char table[96]; /* the effects table: "effects", or "SCHEMA.effects" */
    tq *db;         /* a handle of tq's own, to look from outside */
    native own;     /* the caller's connection */
} fx;

static char tmpdir[64];
static int store_seq;

static native native_open(const fx *f)
{
    native n = {0};
    if (test_on_postgres()) {
        n.pg = PQconnectdb(getenv("TQ_TEST_PG_URL"));
        if (PQstatus(n.pg) != CONNECTION_OK)
            fail_msg("connecting: %s", PQerrorMessage(n.pg));
    } else {
        if (sqlite3_open(f->url, &n.lite) != SQLITE_OK)
            fail_msg("opening %s", f->url);
        sqlite3_busy_timeout(n.lite, 10000);
    }
    return n;
}

static void native_close(native *n)
{
    sqlite3_close(n->lite);
    PQfinish(n->pg);
    *n = (native){0};
}

static void *native_conn(const native *n)
{
    return n->pg ? (void *)n->pg : (void *)n->lite;
}

/* sql with each @ replaced by the effects table's name. */
static void with_table(char *out, size_t len, const char *sql, const fx *f)
{
    size_t o = 0;
    for (; *sql && o + sizeof f->table < len; sql++)
        if (*sql == '@')
            o += (size_t)snprintf(out + o, len - o, "%s", f->table);
        else
            out[o++] = *sql;
    out[o] = '\0';
}

/* Runs sql (@: the effects table); returns 0 when it ran. */
static int native_exec(const native *n, const fx *f, const char *sql)
{
    char text[512];
    with_table(text, sizeof text, sql, f);
    if (n->lite)
        return sqlite3_exec(n->lite, text, NULL, NULL, NULL) != SQLITE_OK;
    PGresult *r = PQexec(n->pg, text);
    const int bad =
        PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK;
    PQclear(r);
    return bad;
}

#define EXEC(n, sql)                                                                     \
    do {                                                                                 \
        if (native_exec((n), f, (sql)))                                                  \
            fail_msg("%s failed", (sql));                                                \
    } while (0)

/* Runs the one statement sql (@: the effects table) with nparams values
 * bound: $1 a job's id, $2 a note; *out (may be NULL) gets its row's first
 * column. Returns 0 when it ran. */
static int native_bound(const native *n, const fx *f, const char *sql, int nparams,
                        int64_t id, const char *note, int64_t *out)
{
    char text[512], idtext[24];
    int bad = 1;
    with_table(text, sizeof text, sql, f);
    if (n->lite) {
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(n->lite, text, -1, &s, NULL) == SQLITE_OK) {
            if (nparams > 0)
                sqlite3_bind_int64(s, 1, id);
            if (nparams > 1)
                sqlite3_bind_text(s, 2, note, -1, SQLITE_STATIC);
            const int src = sqlite3_step(s);
            if (src == SQLITE_ROW && out)
                *out = sqlite3_column_int64(s, 0);
            bad = src != SQLITE_ROW && src != SQLITE_DONE;
        }
        sqlite3_finalize(s);
        return bad;
    }
    snprintf(idtext, sizeof idtext, "%lld", (long long)id);
    const char *values[] = {idtext, note};
    PGresult *r = PQexecParams(n->pg, text, nparams, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && out)
        *out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    bad = PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK;
    PQclear(r);
    return bad;
}

/* The one integer sql returns (@: the effects table). */
static int64_t native_int(const native *n, const fx *f, const char *sql)
{
    int64_t v = -1;
    if (native_bound(n, f, sql, 0, 0, NULL, &v) || v < 0)
        fail_msg("%s returned nothing", sql);
    return v;
}

/* The effects written for job id. */
static int64_t effects_of(const fx *f, int64_t id)
{
    int64_t v = -1;
    if (native_bound(&f->own, f, "SELECT count(*) FROM @ WHERE job = $1", 1, id, NULL,
                     &v))
        fail_msg("counting the effects of job %lld", (long long)id);
    return v;
}

/* Writes job id's effect, noted as note. Returns 0 when it ran. */
static int write_effect(const native *n, const fx *f, int64_t id, const char *note)
{
    return native_bound(n, f, "INSERT INTO @ VALUES ($1, $2)", 2, id, note, NULL);
}

/* A tq handle on the caller's connection n. */
static tq *borrow(const fx *f, const native *n)
{
    tq *mine = NULL;
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.conn = native_conn(n);
    if (tq_open(&mine, f->url, &o))
        fail_msg("borrowing: %s", tq_errmsg(mine));
    return mine;
}

/* ---- fixtures ------------------------------------------------------------ */

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    char schema[40];
    test_store_url(f->url, sizeof f->url, schema, 'o', tmpdir, ++store_seq);
    if (test_on_postgres())
        snprintf(f->table, sizeof f->table, "%s.effects", schema);
    else
        snprintf(f->table, sizeof f->table, "effects");
    if (tq_open(&f->db, f->url, &o) || tq_init(f->db)) {
        fprintf(stderr, "setup: %s\n", tq_errmsg(f->db));
        return -1;
    }
    f->own = native_open(f);
    if (native_exec(&f->own, f, "CREATE TABLE @ (job bigint NOT NULL, note text)"))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    native_close(&f->own);
    tq_close(f->db);
    free(f);
    return 0;
}

#define F  ((fx *)*state)
#define DB (F->db)

static int64_t enq(void **state, const char *queue)
{
    int64_t id = 0;
    OK_ON(DB, tq_job_enqueue(&id, DB, queue, "x", 1, NULL));
    return id;
}

static tq_job *claim1(tq *db, const char *queue, const char *worker)
{
    tq_job *jobs = NULL;
    size_t n = 0;
    OK_ON(db, tq_job_claim(&jobs, &n, db, queue, worker, 1));
    assert_int_equal(n, 1);
    return jobs;
}

/* Most tests' start: a job of "mail", a handle on the caller's connection,
 * and the job claimed as "w1" on claimer (the borrowing handle when NULL). */
typedef struct claimed {
    int64_t id;
    tq *mine;
    tq_job *job;
} claimed;

static claimed claim_one(void **state, tq *claimer)
{
    fx *f = *state;
    claimed c = {.id = enq(state, "mail"), .mine = borrow(f, &f->own)};
    c.job = claim1(claimer ? claimer : c.mine, "mail", "w1");
    assert_int_equal(c.job->id, c.id);
    return c;
}

static void claimed_free(claimed *c)
{
    tq_job_array_free(c->job, 1);
    tq_close(c->mine);
}

/* The state of job id, seen from tq's own handle; -1 when it is gone. */
static int state_of(void **state, int64_t id)
{
    tq_job *j = NULL;
    int rc = tq_job_get(&j, DB, id);
    if (rc == TQ_ENOTFOUND)
        return -1;
    OK_ON(DB, rc);
    int s = (int)j->state;
    tq_job_free(j);
    return s;
}

static const char *begin_sql(void)
{
    return test_on_postgres() ? "BEGIN" : "BEGIN IMMEDIATE";
}

/* Begins a transaction on the caller's connection and writes job id's
 * effect in it. */
static void begin_effect(const fx *f, int64_t id)
{
    EXEC(&f->own, begin_sql());
    if (write_effect(&f->own, f, id, "sent"))
        fail_msg("writing the effect of job %lld", (long long)id);
}

/* ---- the effect and the end, together -------------------------------------- */

/* Completed in the caller's transaction: nothing shows until the caller
 * commits, then both do. */
static void t_complete_commits_with_effect(void **state)
{
    fx *f = F;
    tq_queue_opts q = TQ_QUEUE_OPTS_INIT;
    q.set = TQ_SET_KEEP_DONE;
    q.keep_done = 1;
    OK_ON(DB, tq_queue_set(DB, "mail", &q));
    claimed c = claim_one(state, NULL);
    begin_effect(f, c.id);
    OK_ON(c.mine, tq_job_complete(c.mine, c.job));
    /* Nothing of tq's left in the caller's transaction: no savepoint, no
     * setting of its planner's. */
    assert_true(native_exec(&f->own, f, "SAVEPOINT callers; RELEASE tq_savepoint") != 0);
    if (test_on_postgres()) {
        EXEC(&f->own, "ROLLBACK TO callers");
        assert_int_equal(native_int(&f->own, f,
                                    "SELECT (current_setting('enable_seqscan') = 'on'"
                                    " AND current_setting('enable_sort') = 'on')::int"),
                         1);
    }
    /* From outside: not done yet, no effect yet. */
    assert_int_equal(state_of(state, c.id), TQ_RUNNING);
    native other = native_open(f);
    assert_int_equal(native_int(&other, f, "SELECT count(*) FROM @"), 0);
    EXEC(&f->own, "COMMIT");
    tq_job *got = NULL;
    OK_ON(DB, tq_job_get(&got, DB, c.id));
    assert_int_equal(got->state, TQ_DONE);
    assert_true(got->finished_at >= got->started_at); /* begun after the claim */
    tq_job_free(got);
    assert_int_equal(native_int(&other, f, "SELECT count(*) FROM @"), 1);
    assert_int_equal(effects_of(f, c.id), 1);
    native_close(&other);
    claimed_free(&c);
}

/* The caller's rollback undoes the end too: the job is still the caller's,
 * under the same claim. Once the claim is no longer the caller's (its lease
 * ran out and the job went back), the end is TQ_ELOST inside the
 * transaction, which the caller rolls back. */
static void t_rollback_undoes_both(void **state)
{
    fx *f = F;
    claimed c = claim_one(state, DB); /* claimed on another handle */
    begin_effect(f, c.id);
    OK_ON(c.mine, tq_job_complete(c.mine, c.job));
    EXEC(&f->own, "ROLLBACK");
    assert_int_equal(effects_of(f, c.id), 0);
    assert_int_equal(state_of(state, c.id), TQ_RUNNING);

    OK_ON(DB, tq_job_release(DB, c.job)); /* as a rescue would */
    begin_effect(f, c.id);
    assert_int_equal(tq_job_complete(c.mine, c.job), TQ_ELOST);
    EXEC(&f->own, "ROLLBACK");
    assert_int_equal(effects_of(f, c.id), 0);
    assert_int_equal(state_of(state, c.id), TQ_READY);
    claimed_free(&c);
}

/* An enqueue in the caller's transaction is the caller's too; one the
 * store rejects undoes only itself, and the caller's transaction goes on. */
static void t_enqueue_in_transaction(void **state)
{
    fx *f = F;
    tq *mine = borrow(f, &f->own);
    int64_t id = 0, bad = 0;
    tq_stats st = {0};
    EXEC(&f->own, begin_sql());
    OK_ON(mine, tq_job_enqueue(&id, mine, "mail", "a", 1, NULL));
    OK_ON(mine, tq_stats_get(&st, mine, "mail")); /* in the caller's transaction */
    assert_int_equal(st.count[TQ_READY], 1);
    assert_int_equal(state_of(state, id), -1); /* not seen outside it */
    EXEC(&f->own, "ROLLBACK");
    assert_int_equal(state_of(state, id), -1);

    EXEC(&f->own, begin_sql());
    EXEC(&f->own, "INSERT INTO @ VALUES (1, 'before')");
    OK_ON(mine, tq_job_enqueue(&id, mine, "mail", "a", 1, NULL));
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    const int64_t missing = id + 1000;
    o.after = &missing;
    o.nafter = 1;
    assert_int_equal(tq_job_enqueue(&bad, mine, "mail", "b", 1, &o), TQ_ENOTFOUND);
    EXEC(&f->own, "INSERT INTO @ VALUES (1, 'after')");
    EXEC(&f->own, "COMMIT");
    assert_int_equal(effects_of(f, 1), 2);
    assert_int_equal(state_of(state, id), TQ_READY);
    /* A read after those leaves no transaction open behind it. */
    OK_ON(mine, tq_stats_get(&st, mine, "mail"));
    assert_int_equal(st.count[TQ_READY], 1);
    if (test_on_postgres())
        assert_int_equal(PQtransactionStatus(f->own.pg), PQTRANS_IDLE);
    else
        assert_true(sqlite3_get_autocommit(f->own.lite));
    tq_close(mine);
}

/* A parent's end in the caller's transaction releases its child, and
 * keeps its result, with the caller's commit and not before; a rollback
 * leaves the child waiting and the parent running. */
static void t_children_wait_for_the_commit(void **state)
{
    fx *f = F;
    int64_t parent = enq(state, "mail"), child = 0;
    tq_enqueue_opts o = TQ_ENQUEUE_OPTS_INIT;
    o.after = &parent;
    o.nafter = 1;
    OK_ON(DB, tq_job_enqueue(&child, DB, "mail", "c", 1, &o));
    tq *mine = borrow(f, &f->own);
    tq_job *job = claim1(mine, "mail", "w1");
    assert_int_equal(job->id, parent);
    for (int commit = 0; commit < 2; commit++) {
        begin_effect(f, parent);
        OK_ON(mine, tq_job_complete_result(mine, job, "42", 2));
        assert_int_equal(state_of(state, child), TQ_WAITING);
        EXEC(&f->own, commit ? "COMMIT" : "ROLLBACK");
        assert_int_equal(state_of(state, parent), commit ? TQ_DONE : TQ_RUNNING);
        assert_int_equal(state_of(state, child), commit ? TQ_READY : TQ_WAITING);
        assert_int_equal(effects_of(f, parent), commit);
    }
    void *r = NULL;
    size_t len = 0;
    OK_ON(DB, tq_job_result(&r, &len, DB, parent));
    assert_int_equal(len, 2);
    assert_memory_equal(r, "42", 2);
    tq_free(r);
    tq_job_array_free(job, 1);
    tq_close(mine);
}

/* Outside a transaction each call commits on its own; the handle leaves the
 * connection open and, on PostgreSQL, no statement of its own behind. */
static void t_outside_transaction(void **state)
{
    fx *f = F;
    claimed c = claim_one(state, NULL);
    tq *again = borrow(f, &f->own); /* two handles on one connection */
    OK_ON(again, tq_job_complete(again, c.job));
    assert_int_not_equal(state_of(state, c.id), TQ_RUNNING);
    if (test_on_postgres()) /* the caller's own prepared statements stay */
        EXEC(&f->own, "PREPARE callers AS SELECT 1");
    OK_ON(again, tq_init(again));
    int64_t id;
    OK_ON(c.mine, tq_job_enqueue(&id, c.mine, "mail", "b", 1, NULL));
    OK_ON(again, tq_job_enqueue(&id, again, "mail", "c", 1, NULL));
    if (test_on_postgres())
        assert_int_equal(native_int(&f->own, f,
                                    "SELECT count(*) FROM pg_prepared_statements"
                                    " WHERE name = 'callers'"),
                         1);
    claimed_free(&c);
    tq_close(again);
    EXEC(&f->own, "INSERT INTO @ VALUES (7, 'still open')");
    assert_int_equal(effects_of(f, 7), 1);
    if (test_on_postgres())
        assert_int_equal(native_int(&f->own, f,
                                    "SELECT count(*) FROM pg_prepared_statements"
                                    " WHERE name LIKE 'tq%'"),
                         0);
}

/* What a borrowing handle will not do, and a connection to another store. */
static void t_refusals(void **state)
{
    fx *f = F;
    tq *mine = borrow(f, &f->own);
    tq_worker *w = NULL;
    tq_worker_opts wo = TQ_WORKER_OPTS_INIT;
    const char *argv[] = {"true", NULL};
    wo.argv = argv;
    assert_int_equal(tq_worker_new(&w, mine, &wo), TQ_EINVAL);
    assert_null(w);
    assert_non_null(strstr(tq_errmsg(mine), "connection of its own"));
    /* No claim and no heartbeat inside the caller's transaction; the
     * transaction goes on. */
    int64_t id = enq(state, "mail");
    tq_job *job = claim1(DB, "mail", "w1"), *none = NULL;
    size_t n = 9;
    EXEC(&f->own, begin_sql());
    assert_int_equal(tq_job_claim(&none, &n, mine, "mail", "w2", 1), TQ_EINVAL);
    assert_int_equal(n, 0);
    assert_non_null(strstr(tq_errmsg(mine), "inside the caller's transaction"));
    assert_int_equal(tq_job_heartbeat(mine, job), TQ_EINVAL);
    EXEC(&f->own, "INSERT INTO @ VALUES (3, 'goes on')");
    EXEC(&f->own, "COMMIT");
    assert_int_equal(effects_of(f, 3), 1);
    assert_int_equal(state_of(state, id), TQ_RUNNING);
    OK_ON(mine, tq_job_heartbeat(mine, job)); /* outside it */
    tq_job_array_free(job, 1);
    tq_close(mine);
    if (test_on_postgres())
        return;
    char other[128];
    snprintf(other, sizeof other, "%s/other%d.db", tmpdir, store_seq);
    tq_open_opts o = TQ_OPEN_OPTS_INIT;
    o.create = 1;
    tq *db = NULL;
    OK_ON(db, tq_open(&db, other, &o));
    tq_close(db);
    o.create = 0;
    o.conn = f->own.lite;
    assert_int_equal(tq_open(&db, other, &o), TQ_EINVAL);
    assert_non_null(strstr(tq_errmsg(db), "is not to the store"));
    tq_close(db);
    unlink(other);
}

/* ---- killed between the effect and the commit -------------------------------- */

/* Where a child stops to be killed: after the effect, after the end (both
 * in the open transaction), after the commit; or nowhere (runs on). */
enum stop { STOP_EFFECT, STOP_ENDED, STOP_COMMITTED, STOP_NONE };

/* A child's life: run the jobs of "kill" one by one, each effect and end in
 * one transaction; at stop, say so on fd and wait to be killed. Leaves when
 * no job is left to claim. */
static void child_run(const fx *f, enum stop stop, int fd)
{
    native n = native_open(f);
    tq *mine = borrow(f, &n);
    char worker[32];
    snprintf(worker, sizeof worker, "child-%d", (int)getpid());
    for (;;) {
        tq_job *job = NULL;
        size_t got = 0;
        if (tq_job_claim(&job, &got, mine, "kill", worker, 1) || got == 0)
            break;
        if (native_exec(&n, f, begin_sql()) || write_effect(&n, f, job->id, worker))
            _exit(3);
        if (stop == STOP_EFFECT && write(fd, "e", 1) == 1)
            pause();
        const int rc = tq_job_complete(mine, job);
        if (rc && rc != TQ_ELOST)
            _exit(4);
        if (stop == STOP_ENDED && write(fd, "d", 1) == 1)
            pause();
        if (native_exec(&n, f, rc ? "ROLLBACK" : "COMMIT"))
            _exit(5);
        if (stop == STOP_COMMITTED && write(fd, "c", 1) == 1)
            pause();
        tq_job_array_free(job, 1);
    }
    tq_close(mine);
    native_close(&n);
    _exit(0);
}

/* Starts a child at stop; for a stop, waits for it to get there. */
static pid_t child_start(const fx *f, enum stop stop)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        child_run(f, stop, p[1]);
    }
    close(p[1]);
    char c;
    if (stop != STOP_NONE)
        assert_int_equal(read(p[0], &c, 1), 1);
    close(p[0]);
    return pid;
}

static void kill_child(pid_t pid)
{
    int status;
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
}

/* Every job: done with one effect, or not done with none; returns how many
 * are done. */
static int check_jobs(void **state, const int64_t *ids, int n)
{
    int done = 0;
    for (int i = 0; i < n; i++) {
        const int s = state_of(state, ids[i]);
        const int64_t e = effects_of(F, ids[i]);
        if (s == TQ_DONE ? e != 1 : e != 0)
            fail_msg("job %lld is %s with %lld effects", (long long)ids[i],
                     tq_state_name((tq_state)s), (long long)e);
        done += s == TQ_DONE;
    }
    return done;
}

/* Waits out the leases of killed children and puts their jobs back. */
static void rescue(void **state)
{
    int64_t n = 0;
    usleep(1050 * 1000);
    OK_ON(DB, tq_rescue_expired(&n, DB));
}

static void t_killed_between_effect_and_commit(void **state)
{
    enum { JOBS = 40 };
    tq_queue_opts q = TQ_QUEUE_OPTS_INIT;
    q.set = TQ_SET_KEEP_DONE | TQ_SET_LEASE | TQ_SET_MAX_ATTEMPTS;
    q.keep_done = 1;
    q.lease_us = 1000 * 1000; /* the shortest */
    q.max_attempts = 1000;    /* every kill costs an attempt */
    OK_ON(DB, tq_queue_set(DB, "kill", &q));
    int64_t ids[JOBS];
    for (int i = 0; i < JOBS; i++)
        ids[i] = enq(state, "kill");

    /* At each point, twice: in the transaction neither shows; after the
     * commit both do. */
    int done = 0;
    for (int round = 0; round < 6; round++) {
        const enum stop stop = (enum stop)(round % 3);
        kill_child(child_start(F, stop));
        const int now = check_jobs(state, ids, JOBS);
        assert_int_equal(now, done + (stop == STOP_COMMITTED));
        done = now;
        rescue(state);
    }
    /* At random moments, while a child runs the jobs one after another. */
    srand((unsigned)getpid());
    for (int round = 0; round < 6; round++) {
        pid_t pid = child_start(F, STOP_NONE);
        usleep((useconds_t)(rand() % 40000));
        kill_child(pid);
        const int now = check_jobs(state, ids, JOBS);
        assert_true(now >= done); /* a done job stays done */
        done = now;
        rescue(state);
    }
    /* Then one child runs what is left to the end. */
    int status;
    pid_t pid = child_start(F, STOP_NONE);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(check_jobs(state, ids, JOBS), JOBS);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tq-owntx-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
#define T(test) cmocka_unit_test_setup_teardown(test, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(t_complete_commits_with_effect),
        T(t_rollback_undoes_both),
        T(t_enqueue_in_transaction),
        T(t_outside_transaction),
        T(t_refusals),
        T(t_children_wait_for_the_commit),
        T(t_killed_between_effect_and_commit),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    return failed | scratch_remove(tmpdir);
}
