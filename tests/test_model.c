/*
 * test_model.c - the job state machine against a model of it: many seeds of
 * random operation sequences on a real store, with several workers driven
 * step by step by the test, and after every step the whole store compared
 * with what the model says each row must be.
 *
 * The workers here are virtual: each keeps what worker.c keeps (jobs
 * claimed and held, jobs running and whether the store has recorded their
 * start, acknowledgements not yet sent) and speaks to the engine the way
 * worker.c does, through the engine's exchange. Their operations are
 * claims (starts and holds), starting a held job, finishing one (done or
 * failed), giving one back, sending what is pending, heartbeats, crashing
 * and restarting under their name. Beside them: enqueues through the API
 * and by plain SQL, cancel, retry, retry of all dead jobs, prune, pause and
 * resume, lowering and raising max attempts, keeping or deleting finished
 * rows, and lease expiry (plain SQL moving a running job's lease into the
 * past, which is what time passing does to it) followed by the rescue.
 *
 * After every step: every acknowledgement's result is the one the model
 * predicts (applied, or refused by the fence), every claim took exactly
 * the jobs the model says in the queue's order, and every row's state,
 * attempts, claim count, worker, start and last error are the model's. The
 * model is DESIGN.md's state machine with the rules of engine.h (THE
 * FENCING RULE, STARTS); so these hold: no job is in two runs at once that
 * both could be acknowledged; an acknowledgement applies to the run that
 * made it or is refused; no attempt is charged to a run that did not
 * start; no row is in a state the model forbids. At the end of each seed
 * every worker crashes and restarts, and every ready job must be claimed.
 *
 * Run against each engine like test_store (TQ_TEST_ENGINE, TQ_TEST_PG_URL).
 * TQ_MODEL_SEEDS (default 300) seeds of TQ_MODEL_STEPS (default 60) steps;
 * TQ_MODEL_SEED=N replays one seed, printing every step. A failure prints
 * its seed and the steps that led to it.
 */
#define _DEFAULT_SOURCE
#include "pg_url.h"
#include "scratch.h"

#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/engine/engine.h"

enum { MAX_JOBS = 64, NWORKERS = 3, MAX_HELD = 32, MAX_PENDING = 64 };
#define QUEUE "m"

/* ---- the model ----------------------------------------------------------- */

typedef struct mrow {
    int64_t id;
    int exists;
    tq_state state;
    int attempts;
    int64_t claims;
    int started;    /* running: the store recorded this claim's start */
    int unknown;    /* claims rescued with no start recorded since the last start */
    int worker;     /* last claimer, -1: none */
    int expired;    /* running: its lease is in the past */
    int64_t run_at; /* logical time: the order of due ready rows */
    char error[96]; /* last_error, "" for none */
    int snoozes;    /* the handler's snoozes since enqueue or retry */
    int result;     /* done with a result (3 bytes) */
    int progress;   /* the last progress reported, -1: none */
} mrow;

/* A job as a virtual worker knows it. */
typedef struct vjob {
    int64_t id, claim;
    int attempts,
        max;      /* as the claim returned them; attempts counts this run once started */
    int recorded; /* running: the store has recorded its start */
} vjob;

typedef struct vack {
    int64_t id, claim, started_us;
    tq__ack_kind kind;
    int delete_done;
    int progress;
    int with_result; /* DONE: with a result of 3 bytes */
    char error[96];
} vack;

typedef struct vworker {
    char name[8];
    vjob held[MAX_HELD], running[MAX_HELD];
    int nheld, nrunning;
    vack pending[MAX_PENDING];
    int npending;
    /* Its registration (tq__claim.worker_since), new at each restart: the
     * rescue at a restart takes the last one's jobs, which are all it has
     * under the name (each restart takes them all). */
    int64_t since;
} vworker;

typedef struct model {
    mrow rows[MAX_JOBS];
    int nrows;
    int paused, max_attempts, keep_done;
    int64_t tick;
    vworker w[NWORKERS];
} model;

/* ---- the store ------------------------------------------------------------ */

static int is_postgres;
static const char *pg_base;
static char sqlite_path[256];
static char schema[64];

typedef struct store {
    tq *db;
    sqlite3 *h; /* SQLite: a second connection, as any other program */
    PGconn *pg; /* PostgreSQL: likewise */
} store;

static unsigned long long rng;
static unsigned rnd(unsigned n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return n ? (unsigned)((rng >> 33) % n) : 0;
}

/* ---- failure reporting ------------------------------------------------------ */

static char steps[64][160];
static int nsteps, verbose;
static unsigned long long cur_seed;
static int cur_step;

static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(steps[nsteps % 64], sizeof steps[0], fmt, ap);
    va_end(ap);
    if (verbose)
        printf("  %3d %s\n", cur_step, steps[nsteps % 64]);
    nsteps++;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "test_model: seed %llu, step %d: ", cur_seed, cur_step);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nthe last steps (replay with TQ_MODEL_SEED=%llu):\n", cur_seed);
    for (int i = nsteps > 64 ? nsteps - 64 : 0; i < nsteps; i++)
        fprintf(stderr, "  %s\n", steps[i % 64]);
    exit(1);
}

#define CHECK_EQ(got, want, what)                                                        \
    do {                                                                                 \
        long long g_ = (long long)(got), w_ = (long long)(want);                         \
        if (g_ != w_)                                                                    \
            die("%s: got %lld, the model says %lld", what, g_, w_);                      \
    } while (0)

static void ok(store *s, int rc, const char *what)
{
    if (rc)
        die("%s failed: %d (%s): %s", what, rc, tq_strerror(rc), tq_errmsg(s->db));
}

/* ---- raw SQL: what a plain producer or time itself does ------------------- */

static void raw_sqlite(store *s, const char *sql, int64_t a, int64_t b, int64_t *out)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->h, sql, -1, &st, NULL) != SQLITE_OK)
        die("%s: %s", sql, sqlite3_errmsg(s->h));
    if (sqlite3_bind_parameter_count(st) >= 1)
        sqlite3_bind_int64(st, 1, a);
    if (sqlite3_bind_parameter_count(st) >= 2)
        sqlite3_bind_int64(st, 2, b);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (out)
            *out = sqlite3_column_int64(st, 0);
    if (rc != SQLITE_DONE)
        die("%s: %s", sql, sqlite3_errmsg(s->h));
    sqlite3_finalize(st);
}

static void raw_pg(store *s, const char *sql, int64_t a, int64_t *out)
{
    char text[512], arg[24];
    size_t o = 0; /* sql with "TQ." standing for the schema */
    for (const char *p = sql; *p && o + sizeof schema + 2 < sizeof text;)
        if (strncmp(p, "TQ.", 3) == 0) {
            o += (size_t)snprintf(text + o, sizeof text - o, "%s.", schema);
            p += 3;
        } else {
            text[o++] = *p++;
        }
    text[o] = '\0';
    snprintf(arg, sizeof arg, "%lld", (long long)a);
    const char *v[] = {arg};
    int n = strstr(text, "$1") ? 1 : 0;
    PGresult *r = PQexecParams(s->pg, text, n, NULL, v, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        die("%s: %s", text, PQerrorMessage(s->pg));
    if (out && PQntuples(r))
        *out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
}

/* A plain producer's INSERT, with the table's default times. SQLite's
 * 'now' has millisecond precision, so its run_at can sort before an API
 * enqueue made earlier in the same millisecond: a millisecond apart on
 * either side, the model's order is the store's. */
static int64_t plain_insert(store *s)
{
    int64_t id = 0;
    if (!is_postgres)
        usleep(1100);
    if (is_postgres)
        raw_pg(s,
               "INSERT INTO TQ.jobs (queue, payload) VALUES ('" QUEUE "', 'plain')"
               " RETURNING id",
               0, &id);
    else
        raw_sqlite(s,
                   "INSERT INTO tq_jobs (queue, payload) VALUES ('" QUEUE "', 'plain')"
                   " RETURNING id",
                   0, 0, &id);
    if (!is_postgres)
        usleep(1100);
    return id;
}

static void expire_lease(store *s, int64_t id)
{
    if (is_postgres)
        raw_pg(s,
               "UPDATE TQ.jobs SET lease_until = now() - interval '1 second'"
               " WHERE id = $1",
               id, NULL);
    else
        raw_sqlite(s, "UPDATE tq_jobs SET lease_until = ?2 WHERE id = ?1", id,
                   tq__now_us() - 1000000, NULL);
}

static void reset_store(store *s)
{
    if (is_postgres) {
        raw_pg(s, "DELETE FROM TQ.jobs", 0, NULL);
        raw_pg(s, "DELETE FROM TQ.queues", 0, NULL);
        raw_pg(s, "DELETE FROM TQ.workers", 0, NULL);
    } else
        sqlite3_exec(s->h,
                     "DELETE FROM tq_jobs; DELETE FROM tq_queues; DELETE FROM tq_workers",
                     NULL, NULL, NULL);
}

/* ---- the model's rules ------------------------------------------------------ */

static mrow *row_of(model *m, int64_t id)
{
    for (int i = 0; i < m->nrows; i++)
        if (m->rows[i].id == id && m->rows[i].exists)
            return &m->rows[i];
    return NULL;
}

static mrow *add_row(model *m, int64_t id)
{
    if (m->nrows == MAX_JOBS)
        die("model full");
    mrow *r = &m->rows[m->nrows++];
    memset(r, 0, sizeof *r);
    r->id = id;
    r->exists = 1;
    r->state = TQ_READY;
    r->worker = -1;
    r->run_at = ++m->tick;
    r->progress = -1;
    return r;
}

static int worker_index(const model *m, const char *name)
{
    for (int i = 0; i < NWORKERS; i++)
        if (strcmp(m->w[i].name, name) == 0)
            return i;
    return -1;
}

/* What the store does with one acknowledgement (engine.h): the fence, the
 * start record, then the kind. Returns 0 or TQ_ELOST. */
static int model_ack(model *m, int w, const vack *a, int64_t now_tick)
{
    mrow *r = row_of(m, a->id);
    if (!r || r->state != TQ_RUNNING || r->worker != w || r->claims != a->claim)
        return TQ_ELOST;
    int inc = a->started_us > 0 && !r->started;
    if (a->started_us > 0 && a->kind != TQ__ACK_RELEASE)
        r->unknown = 0;
    switch (a->kind) {
    case TQ__ACK_DONE:
        if (a->delete_done) {
            r->exists = 0;
            return 0;
        }
        r->attempts += inc;
        r->state = TQ_DONE;
        r->result = a->with_result;
        break;
    case TQ__ACK_FAIL:
        if (a->started_us == 0 && !r->started)
            r->unknown++; /* a claim ended unstarted */
        r->attempts += inc;
        r->state = r->attempts >= m->max_attempts ? TQ_DEAD : TQ_READY;
        if (r->state == TQ_READY)
            r->run_at = now_tick;
        snprintf(r->error, sizeof r->error, "%s", a->error);
        r->progress = -1;
        break;
    case TQ__ACK_RELEASE: /* gives back what the store charged; records nothing */
        r->attempts -= r->started && r->attempts > 0;
        r->state = TQ_READY;
        r->progress = -1;
        return 0;
    case TQ__ACK_SNOOZE: /* a release to later that counts */
        r->attempts -= r->started && r->attempts > 0;
        r->state = TQ_READY;
        r->run_at = now_tick;
        r->snoozes++;
        r->progress = -1;
        return 0;
    case TQ__ACK_DISCARD:
        r->attempts += inc;
        r->state = TQ_DEAD;
        snprintf(r->error, sizeof r->error, "%s", a->error);
        break;
    case TQ__ACK_PROGRESS: /* carries no start */
        r->progress = a->progress;
        return 0;
    case TQ__ACK_BEAT:
        r->attempts += inc;
        r->expired = 0;
        break;
    }
    r->started |= inc;
    return 0;
}

/* The rescue of one running row, expired or left by a restarted worker. */
static void model_rescue_row(model *m, mrow *r, const char *why)
{
    if (r->started) {
        snprintf(r->error, sizeof r->error, "%s", why);
        r->state = r->attempts >= m->max_attempts ? TQ_DEAD : TQ_READY;
    } else {
        r->state = TQ_READY;
        r->unknown++;
    }
    r->expired = 0;
    r->progress = -1;
}

static int cmp_due(const void *a, const void *b)
{
    const mrow *x = *(const mrow *const *)a, *y = *(const mrow *const *)b;
    if (x->run_at != y->run_at)
        return x->run_at < y->run_at ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The rows a claim takes: the due ready ones in the queue's order. */
static int model_claim(model *m, int w, int n, int start, mrow **out)
{
    mrow *ready[MAX_JOBS];
    int nready = 0, k = 0;
    if (m->paused)
        return 0;
    for (int i = 0; i < m->nrows; i++)
        if (m->rows[i].exists && m->rows[i].state == TQ_READY)
            ready[nready++] = &m->rows[i];
    qsort(ready, (size_t)nready, sizeof *ready, cmp_due);
    for (; k < n && k < nready; k++) {
        mrow *r = ready[k];
        r->state = TQ_RUNNING;
        r->claims++;
        r->worker = w;
        r->expired = 0;
        r->started = (start || r->unknown >= 2) && r->attempts < m->max_attempts;
        r->attempts += r->started;
        if (r->started)
            r->unknown = 0;
        out[k] = r;
    }
    return k;
}

/* ---- comparing the store with the model -------------------------------------- */

static void compare(store *s, model *m)
{
    tq_job *jobs = NULL;
    size_t n = 0;
    tq_list_opts o = TQ_LIST_OPTS_INIT;
    o.queue = QUEUE;
    o.limit = 1000;
    ok(s, tq_job_list(&jobs, &n, s->db, &o), "listing jobs");
    int live = 0;
    for (int i = 0; i < m->nrows; i++)
        live += m->rows[i].exists;
    CHECK_EQ(n, live, "rows in the store");
    for (size_t i = 0; i < n; i++) {
        const tq_job *j = &jobs[i];
        mrow *r = row_of(m, j->id);
        char what[64];
        if (!r)
            die("job %lld is in the store, not in the model", (long long)j->id);
#define FIELD(got, want, name)                                                           \
    snprintf(what, sizeof what, "job %lld: " name, (long long)j->id);                    \
    CHECK_EQ(got, want, what)
        FIELD(j->state, r->state, "state");
        FIELD(j->attempts, r->attempts, "attempts");
        FIELD(j->claim, r->claims, "claims");
        FIELD(j->snoozes, r->snoozes, "snoozes");
        FIELD(j->progress, r->progress, "progress");
        FIELD(j->result_len, r->result ? 3 : -1, "result");
        if (r->state == TQ_RUNNING) {
            FIELD(j->started_at != 0, r->started, "start recorded");
            FIELD(worker_index(m, j->worker ? j->worker : ""), r->worker, "worker");
            FIELD(j->lease_until != 0, 1, "lease held");
        } else {
            FIELD(j->lease_until, 0, "lease held");
        }
        const char *e = j->last_error ? j->last_error : "";
        if (strcmp(e, r->error) != 0)
            die("job %lld: last_error '%s', the model says '%s'", (long long)j->id, e,
                r->error);
#undef FIELD
    }
    tq_job_array_free(jobs, n);
    /* No two runs anywhere could both be acknowledged. */
    for (int i = 0; i < m->nrows; i++) {
        const mrow *r = &m->rows[i];
        int holders = 0;
        for (int w = 0; w < NWORKERS; w++) {
            const vworker *v = &m->w[w];
            for (int k = 0; k < v->nheld; k++)
                holders += v->held[k].id == r->id && v->held[k].claim == r->claims &&
                           r->worker == w && r->state == TQ_RUNNING && r->exists;
            for (int k = 0; k < v->nrunning; k++)
                holders += v->running[k].id == r->id &&
                           v->running[k].claim == r->claims && r->worker == w &&
                           r->state == TQ_RUNNING && r->exists;
        }
        if (holders > 1)
            die("job %lld is held by %d runs that could all be acknowledged",
                (long long)r->id, holders);
    }
}

/* ---- virtual workers --------------------------------------------------------- */

static void remove_at(vjob *v, int *n, int i)
{
    v[i] = v[--*n];
}

static void push_ack(vworker *v, const vjob *j, tq__ack_kind kind, int started,
                     const char *error, int delete_done)
{
    if (v->npending == MAX_PENDING)
        die("pending acknowledgements full");
    vack *a = &v->pending[v->npending++];
    memset(a, 0, sizeof *a);
    a->id = j->id;
    a->claim = j->claim;
    a->kind = kind;
    a->started_us = started ? 1 + rnd(1000000) : 0;
    a->delete_done = delete_done;
    if (error)
        snprintf(a->error, sizeof a->error, "%s", error);
}

/* A heartbeat of job j (started_us: its start, 0 for a held one) into *ack,
 * as a worker sends one; returns what the model says its result is. */
static int beat(model *m, int w, tq__ack *ack, const vjob *j, int64_t started_us,
                int64_t tick)
{
    vack b = {
        .id = j->id, .claim = j->claim, .kind = TQ__ACK_BEAT, .started_us = started_us};
    *ack = (tq__ack){.id = b.id,
                     .claim = b.claim,
                     .kind = TQ__ACK_BEAT,
                     .delay_us = 3600000000LL,
                     .started_us = b.started_us,
                     .result = -1};
    return model_ack(m, w, &b, tick);
}

/*
 * One exchange, as worker.c sends it: the pending acknowledgements, a beat
 * for every running job whose start the store has not recorded, then a
 * claim of up to n jobs, held as worker.c claims them or started as
 * tq_job_claim does (start). Checks every result against the model and
 * files the claimed jobs.
 */
static void exchange(store *s, model *m, int w, int n_claim, int start)
{
    vworker *v = &m->w[w];
    tq__ack acks[MAX_PENDING + MAX_HELD];
    int want[MAX_PENDING + MAX_HELD], n = 0;
    const int64_t now_tick = ++m->tick;
    for (int i = 0; i < v->npending; i++) {
        const vack *a = &v->pending[i];
        acks[n] = (tq__ack){.id = a->id,
                            .claim = a->claim,
                            .kind = a->kind,
                            .error = a->error[0] ? a->error : NULL,
                            .delete_done = a->delete_done,
                            .started_us = a->started_us,
                            .progress = a->progress,
                            .output = a->with_result ? "res" : NULL,
                            .output_len = a->with_result ? 3 : 0,
                            .result = -1};
        want[n++] = model_ack(m, w, a, now_tick);
    }
    int first_beat = n;
    for (int i = 0; i < v->nrunning; i++) {
        if (v->running[i].recorded)
            continue;
        want[n] = beat(m, w, &acks[n], &v->running[i], 1 + rnd(1000), now_tick);
        n++;
    }
    mrow *claimed[MAX_JOBS];
    int nc = model_claim(m, w, n_claim, start, claimed);
    /* The limited claims (counting groups or not, a chain's, a rate's
     * that takes its tokens after its rows), on a queue without limits,
     * claim as the plain one does: the model checks each. */
    tq__claim c = {.queue = QUEUE,
                   .order = TQ_FIFO,
                   .lease_us = 3600000000LL,
                   .max_attempts = m->max_attempts,
                   .max = (size_t)n_claim,
                   .start = start,
                   .limited = (int)rnd(2),
                   .grouped = (int)rnd(2),
                   .rate = (int)rnd(2),
                   .capped = (int)rnd(2),
                   .chain = rnd(2) ? 0 : 2 + (size_t)rnd(3),
                   .worker_since = v->since};
    tq_job *jobs = NULL;
    size_t got = 0;
    ok(s,
       s->db->engine->exchange(s->db, v->name, acks, (size_t)n, n_claim ? &c : NULL,
                               &jobs, &got),
       "exchange");
    for (int i = 0; i < n; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s: acknowledgement %d (job %lld kind %d) result",
                 v->name, i, (long long)acks[i].id, (int)acks[i].kind);
        CHECK_EQ(acks[i].result, want[i], what);
    }
    v->npending = 0;
    for (int i = first_beat; i < n; i++)
        for (int k = 0; k < v->nrunning; k++)
            if (v->running[k].id == acks[i].id && v->running[k].claim == acks[i].claim)
                v->running[k].recorded = acks[i].result == 0;
    /* Beats refused: those runs are lost; the worker drops them. */
    for (int i = first_beat; i < n; i++)
        if (acks[i].result)
            for (int k = 0; k < v->nrunning; k++)
                if (v->running[k].id == acks[i].id &&
                    v->running[k].claim == acks[i].claim)
                    remove_at(v->running, &v->nrunning, k--);
    CHECK_EQ(got, nc, "jobs claimed");
    /* The engine returns them in any order: the claims' own, by id. */
    for (int i = 0; i < nc; i++) {
        const tq_job *j = NULL;
        for (size_t k = 0; k < got && !j; k++)
            if (jobs[k].id == claimed[i]->id)
                j = &jobs[k];
        if (!j)
            die("the model's claim of job %lld is not in the store's claim",
                (long long)claimed[i]->id);
        CHECK_EQ(j->claim, claimed[i]->claims, "claimed job's claim");
        CHECK_EQ(j->attempts, claimed[i]->attempts, "claimed job's attempts");
        CHECK_EQ(j->started_at != 0, claimed[i]->started, "claimed job's start");
        vjob vj = {j->id, j->claim, j->attempts, j->max_attempts, 1};
        if (j->started_at) {
            if (v->nrunning == MAX_HELD)
                die("too many running");
            v->running[v->nrunning++] = vj;
        } else {
            if (v->nheld == MAX_HELD)
                die("too many held");
            v->held[v->nheld++] = vj;
        }
    }
    tq_job_array_free(jobs, got);
    note("%s exchange: %d acks/beats, claims %d%s -> %d", v->name, n, n_claim,
         start ? " started" : "", nc);
}

/* Heartbeats of everything a worker holds, as worker.c sends them: running
 * jobs carry their start, held ones do not. Refused ones are dropped. */
static void heartbeat(store *s, model *m, int w)
{
    vworker *v = &m->w[w];
    tq__ack acks[2 * MAX_HELD];
    int want[2 * MAX_HELD], n = 0;
    const int64_t now_tick = ++m->tick;
    for (int i = 0; i < v->nrunning + v->nheld; i++) {
        const vjob *j = i < v->nrunning ? &v->running[i] : &v->held[i - v->nrunning];
        want[n] = beat(m, w, &acks[n], j, i < v->nrunning ? 1 + rnd(1000) : 0, now_tick);
        n++;
    }
    if (n)
        ok(s, s->db->engine->exchange(s->db, v->name, acks, (size_t)n, NULL, NULL, NULL),
           "heartbeat");
    for (int i = 0; i < n; i++)
        CHECK_EQ(acks[i].result, want[i], "heartbeat result");
    for (int i = n - 1; i >= 0; i--) {
        if (i < v->nrunning) {
            if (acks[i].result)
                remove_at(v->running, &v->nrunning, i);
            else
                v->running[i].recorded = 1;
        } else if (acks[i].result) {
            remove_at(v->held, &v->nheld, i - v->nrunning);
        }
    }
    note("%s heartbeat: %d", v->name, n);
}

/* A random one of the n jobs of list, copied into *j: its index, or -1 if
 * none. */
static int pick(const vjob *list, int n, vjob *j)
{
    if (!n)
        return -1;
    int i = (int)rnd((unsigned)n);
    *j = list[i];
    return i;
}

/* A held job starts (worker.c: mark_start), or ends unrun when its attempts
 * are used up (take_jobs). */
static void start_held(vworker *v)
{
    vjob j;
    int i = pick(v->held, v->nheld, &j);
    if (i < 0)
        return;
    remove_at(v->held, &v->nheld, i);
    if (j.attempts >= j.max) {
        char why[96];
        snprintf(why, sizeof why, "not run: its %d attempt(s) were used up", j.max);
        push_ack(v, &j, TQ__ACK_FAIL, 0, why, 0);
        note("%s: job %lld out of attempts, ends unrun", v->name, (long long)j.id);
        return;
    }
    if (rnd(10) == 0) { /* its command could not be started */
        push_ack(v, &j, TQ__ACK_FAIL, 0, "cannot start the handler", 0);
        note("%s: job %lld could not start", v->name, (long long)j.id);
        return;
    }
    j.attempts++;
    j.recorded = 0;
    v->running[v->nrunning++] = j;
    note("%s starts held job %lld (claim %lld)", v->name, (long long)j.id,
         (long long)j.claim);
}

static void finish_one(model *m, int w)
{
    vworker *v = &m->w[w];
    vjob j;
    int i = pick(v->running, v->nrunning, &j);
    if (i < 0)
        return;
    unsigned how = rnd(14);
    if (how == 13) { /* not the end: its handler reports progress */
        char text[32];
        snprintf(text, sizeof text, "step %d", cur_step);
        push_ack(v, &j, TQ__ACK_PROGRESS, 0, text, 0);
        v->pending[v->npending - 1].progress = (int)rnd(101);
        note("%s: job %lld reports progress", v->name, (long long)j.id);
        return;
    }
    remove_at(v->running, &v->nrunning, i);
    if (how == 10 || how == 11) {
        push_ack(v, &j, TQ__ACK_SNOOZE, 1, NULL, 0);
        note("%s: job %lld snoozed", v->name, (long long)j.id);
    } else if (how == 12) {
        char err[96];
        snprintf(err, sizeof err, "discarded at step %d", cur_step);
        push_ack(v, &j, TQ__ACK_DISCARD, 1, err, 0);
        note("%s: job %lld discarded", v->name, (long long)j.id);
    } else if (how < 5) {
        push_ack(v, &j, TQ__ACK_DONE, 1, NULL, !m->keep_done);
        v->pending[v->npending - 1].with_result = rnd(2);
        note("%s: job %lld done", v->name, (long long)j.id);
    } else if (how < 9) {
        char err[96];
        snprintf(err, sizeof err, "failed at step %d", cur_step);
        push_ack(v, &j, TQ__ACK_FAIL, 1, err, 0);
        note("%s: job %lld failed", v->name, (long long)j.id);
    } else {
        push_ack(v, &j, TQ__ACK_RELEASE, 1, NULL, 0);
        note("%s: job %lld stopped and released", v->name, (long long)j.id);
    }
}

static void release_held(model *m, int w)
{
    vworker *v = &m->w[w];
    while (v->nheld) {
        push_ack(v, &v->held[0], TQ__ACK_RELEASE, 0, NULL, 0);
        remove_at(v->held, &v->nheld, 0);
    }
    note("%s releases its held jobs", v->name);
}

/* kill -9: everything the worker knew is gone; then, sometimes, a restart
 * under the same name puts back what the store says it still holds. */
static void crash(store *s, model *m, int w, int restart)
{
    vworker *v = &m->w[w];
    v->nheld = v->nrunning = v->npending = 0;
    if (!restart) {
        note("%s crashes", v->name);
        return;
    }
    int64_t count = 0, want = 0;
    char why[96];
    snprintf(why, sizeof why, "worker %s restarted while running it", v->name);
    for (int i = 0; i < m->nrows; i++) {
        mrow *r = &m->rows[i];
        if (r->exists && r->state == TQ_RUNNING && r->worker == w) {
            model_rescue_row(m, r, why);
            want++;
        }
    }
    ok(s, s->db->engine->rescue(s->db, v->name, v->since, &count), "restart rescue");
    v->since++;
    CHECK_EQ(count, want, "jobs put back at restart");
    note("%s crashes and restarts: %lld put back", v->name, (long long)want);
}

/* ---- the other actors ---------------------------------------------------------- */

static void set_queue(store *s, unsigned set, int value)
{
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = set;
    o.paused = o.keep_done = value;
    o.max_attempts = value;
    ok(s, tq_queue_set(s->db, QUEUE, &o), "setting the queue");
}

static int64_t random_row(model *m)
{
    int live[MAX_JOBS], n = 0;
    for (int i = 0; i < m->nrows; i++)
        if (m->rows[i].exists)
            live[n++] = i;
    return n ? m->rows[live[rnd((unsigned)n)]].id : 0;
}

/* What a retry does to a row of the model. */
static void retried(mrow *r, int64_t tick)
{
    r->state = TQ_READY;
    r->attempts = 0;
    r->unknown = 0;
    r->snoozes = 0;
    r->progress = -1;
    r->run_at = tick;
}

/* tq_job_cancel (retry 0) or tq_job_retry (1) of a random row: allowed
 * from the states the model says, and then changing the row as it says. */
static void cancel_or_retry(store *s, model *m, int retry)
{
    int64_t id = random_row(m);
    if (!id)
        return;
    mrow *r = row_of(m, id);
    unsigned from =
        retry ? 1u << TQ_DEAD | 1u << TQ_CANCELLED : 1u << TQ_READY | 1u << TQ_RUNNING;
    int rc = retry ? tq_job_retry(s->db, id) : tq_job_cancel(s->db, id);
    CHECK_EQ(rc, from & 1u << r->state ? 0 : TQ_ESTATE, retry ? "retry" : "cancel");
    if (!rc && retry) {
        retried(r, ++m->tick);
    } else if (!rc) {
        r->state = TQ_CANCELLED;
        r->expired = 0;
    }
    note("%s %lld -> %d", retry ? "retry" : "cancel", (long long)id, rc);
}

static void retry_dead(store *s, model *m)
{
    int64_t n = 0, want = 0, t = ++m->tick;
    for (int i = 0; i < m->nrows; i++) {
        mrow *r = &m->rows[i];
        if (r->exists && r->state == TQ_DEAD) {
            retried(r, t);
            want++;
        }
    }
    ok(s, tq_job_retry_dead(&n, s->db, QUEUE), "retry of dead jobs");
    CHECK_EQ(n, want, "dead jobs retried");
    note("retry --dead: %lld", (long long)n);
}

static void prune(store *s, model *m)
{
    int64_t n = 0, want = 0;
    for (int i = 0; i < m->nrows; i++) {
        mrow *r = &m->rows[i];
        if (r->exists &&
            (r->state == TQ_DONE || r->state == TQ_DEAD || r->state == TQ_CANCELLED)) {
            r->exists = 0;
            want++;
        }
    }
    const unsigned mask = (1u << TQ_DONE) | (1u << TQ_DEAD) | (1u << TQ_CANCELLED);
    ok(s, tq_job_prune(&n, s->db, 0, mask), "prune");
    CHECK_EQ(n, want, "jobs pruned");
    note("prune: %lld", (long long)n);
}

static void expire_and_rescue(store *s, model *m)
{
    int running[MAX_JOBS], n = 0;
    for (int i = 0; i < m->nrows; i++)
        if (m->rows[i].exists && m->rows[i].state == TQ_RUNNING)
            running[n++] = i;
    if (n && rnd(3)) {
        mrow *r = &m->rows[running[rnd((unsigned)n)]];
        expire_lease(s, r->id);
        r->expired = 1;
        note("lease of job %lld expires", (long long)r->id);
    }
    if (rnd(2))
        return;
    int64_t count = 0, want = 0;
    for (int i = 0; i < m->nrows; i++) {
        mrow *r = &m->rows[i];
        if (r->exists && r->state == TQ_RUNNING && r->expired) {
            char why[96];
            snprintf(why, sizeof why, "lease expired under worker %s",
                     m->w[r->worker].name);
            model_rescue_row(m, r, why);
            want++;
        }
    }
    ok(s, tq_rescue_expired(&count, s->db), "rescue");
    CHECK_EQ(count, want, "expired leases rescued");
    note("rescue: %lld", (long long)count);
}

static void enqueue(store *s, model *m)
{
    if (m->nrows >= MAX_JOBS - 1)
        return;
    int64_t id = 0;
    if (rnd(3)) {
        ok(s, tq_job_enqueue(&id, s->db, QUEUE, "api", 3, NULL), "enqueue");
    } else {
        id = plain_insert(s);
    }
    add_row(m, id);
    note("enqueue %lld", (long long)id);
}

/* ---- one seed --------------------------------------------------------------------- */

static void step(store *s, model *m)
{
    int w = (int)rnd(NWORKERS);
    unsigned op = rnd(100);
    if (op < 14)
        enqueue(s, m);
    else if (op < 30)
        exchange(s, m, w, 1 + (int)rnd(4), rnd(4) == 0);
    else if (op < 42)
        start_held(&m->w[w]);
    else if (op < 56)
        finish_one(m, w);
    else if (op < 64)
        exchange(s, m, w, 0, 0);
    else if (op < 68)
        heartbeat(s, m, w);
    else if (op < 70)
        release_held(m, w);
    else if (op < 73)
        crash(s, m, w, (int)rnd(3));
    else if (op < 80)
        expire_and_rescue(s, m);
    else if (op < 84)
        cancel_or_retry(s, m, 0);
    else if (op < 88)
        cancel_or_retry(s, m, 1);
    else if (op < 89)
        retry_dead(s, m);
    else if (op < 90)
        prune(s, m);
    else if (op < 93) {
        m->paused = !m->paused;
        set_queue(s, TQ_SET_PAUSED, m->paused);
        note(m->paused ? "pause" : "resume");
    } else if (op < 97) {
        m->max_attempts = 1 + (int)rnd(4);
        set_queue(s, TQ_SET_MAX_ATTEMPTS, m->max_attempts);
        note("max attempts %d", m->max_attempts);
    } else {
        m->keep_done = !m->keep_done;
        set_queue(s, TQ_SET_KEEP_DONE, m->keep_done);
        note(m->keep_done ? "keep done rows" : "delete done rows");
    }
}

/* The end of a seed: every worker restarts (nothing is held any more),
 * the queue is resumed, and a fresh claim must take every ready job. */
static void settle(store *s, model *m)
{
    for (int w = 0; w < NWORKERS; w++)
        crash(s, m, w, 1);
    if (m->paused) {
        m->paused = 0;
        set_queue(s, TQ_SET_PAUSED, 0);
    }
    compare(s, m);
    int ready = 0;
    for (int i = 0; i < m->nrows; i++)
        ready += m->rows[i].exists && m->rows[i].state == TQ_READY;
    exchange(s, m, 0, MAX_HELD, 0);
    CHECK_EQ(m->w[0].nheld + m->w[0].nrunning, ready < MAX_HELD ? ready : MAX_HELD,
             "ready jobs claimable");
    compare(s, m);
}

static void run_seed(store *s, unsigned long long seed, int nsteps_per_seed)
{
    model *m = calloc(1, sizeof *m);
    if (!m)
        die("out of memory");
    cur_seed = seed;
    rng = seed * 2654435761ULL + 1;
    nsteps = 0;
    reset_store(s);
    m->max_attempts = 3;
    m->keep_done = 1;
    for (int w = 0; w < NWORKERS; w++) {
        snprintf(m->w[w].name, sizeof m->w[w].name, "w%d", w);
        m->w[w].since = 1;
    }
    tq_queue_opts o = TQ_QUEUE_OPTS_INIT;
    o.set = TQ_SET_BACKOFF | TQ_SET_LEASE | TQ_SET_MAX_ATTEMPTS;
    o.backoff_base_us = o.backoff_cap_us = 0; /* a failed job is due at once */
    o.lease_us = 3600000000LL;
    o.max_attempts = 3;
    ok(s, tq_queue_set(s->db, QUEUE, &o), "creating the queue");
    for (cur_step = 0; cur_step < nsteps_per_seed; cur_step++) {
        step(s, m);
        compare(s, m);
    }
    settle(s, m);
    free(m);
}

/* ---- main ---------------------------------------------------------------------------
 */

static unsigned long long env_num(const char *name, unsigned long long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

int main(void)
{
    char url[512], dir[64] = "/tmp/tq-model.XXXXXX";
    store s = {0};
    const char *engine = getenv("TQ_TEST_ENGINE");
    is_postgres = engine && strcmp(engine, "postgres") == 0;
    if (is_postgres) {
        pg_base = getenv("TQ_TEST_PG_URL");
        if (!pg_base) {
            fprintf(stderr, "test_model: set TQ_TEST_PG_URL\n");
            return 1;
        }
        snprintf(schema, sizeof schema, "model_%d", (int)getpid());
        test_pg_url(url, sizeof url, schema);
    } else {
        if (!mkdtemp(dir))
            return 1;
        snprintf(sqlite_path, sizeof sqlite_path, "%s/model.db", dir);
        /* Durability is not what this test is about. */
        snprintf(url, sizeof url, "sqlite:%s?synchronous=normal", sqlite_path);
    }
    tq_open_opts oo = TQ_OPEN_OPTS_INIT;
    oo.create = 1;
    if (tq_open(&s.db, url, &oo) || tq_init(s.db)) {
        fprintf(stderr, "test_model: %s\n", tq_errmsg(s.db));
        return 1;
    }
    if (is_postgres) {
        s.pg = PQconnectdb(pg_base);
        if (PQstatus(s.pg) != CONNECTION_OK) {
            fprintf(stderr, "test_model: %s", PQerrorMessage(s.pg));
            return 1;
        }
        PQclear(PQexec(s.pg, "SET client_min_messages = warning"));
    } else {
        if (sqlite3_open(sqlite_path, &s.h) != SQLITE_OK)
            return 1;
        sqlite3_busy_timeout(s.h, 10000);
    }

    const unsigned long long one = env_num("TQ_MODEL_SEED", 0);
    const unsigned long long seeds = one ? 1 : env_num("TQ_MODEL_SEEDS", 300);
    const int steps_per_seed = (int)env_num("TQ_MODEL_STEPS", 60);
    verbose = one != 0;
    for (unsigned long long k = 0; k < seeds; k++) {
        unsigned long long seed = one ? one : k + 1;
        if (verbose)
            printf("seed %llu\n", seed);
        run_seed(&s, seed, steps_per_seed);
    }
    printf("test_model: %s, %llu seed(s) of %d steps: the store matched the model after "
           "every step\n",
           is_postgres ? "postgres" : "sqlite", seeds, steps_per_seed);

    tq_close(s.db);
    if (is_postgres) {
        char drop[128];
        snprintf(drop, sizeof drop, "DROP SCHEMA %s CASCADE", schema);
        PQclear(PQexec(s.pg, drop));
        PQfinish(s.pg);
    } else {
        sqlite3_close(s.h);
        scratch_remove(dir);
    }
    return 0;
}
