/*
 * ref_sqlite.c - the plain reference for tq's SQLite numbers: the same
 * queue pattern written directly with sqlite3, nothing else. W processes
 * each loop: claim up to B ready rows (BEGIN IMMEDIATE; UPDATE ... WHERE id
 * IN (SELECT ... LIMIT B) RETURNING id; COMMIT), then mark them done in one
 * more transaction. WAL, synchronous=FULL (or NORMAL), SQLite's own busy
 * timeout. Prints one JSON line.
 *
 * usage: ref_sqlite DBFILE JOBS WORKERS BATCH [normal]
 */
#define _DEFAULT_SOURCE
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void must(int rc, sqlite3 *h, const char *what)
{
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "ref_sqlite: %s: %s\n", what, sqlite3_errmsg(h));
        exit(1);
    }
}

static sqlite3 *open_db(const char *path, int normal)
{
    sqlite3 *h;
    must(sqlite3_open(path, &h), h, "open");
    sqlite3_busy_timeout(h, 60000);
    must(sqlite3_exec(h, normal ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL",
                      NULL, NULL, NULL),
         h, "pragma");
    return h;
}

static int worker(const char *path, int batch, int normal)
{
    sqlite3 *h = open_db(path, normal);
    sqlite3_stmt *claim, *done;
    must(sqlite3_prepare_v2(h,
                            "UPDATE jobs SET state = 1, started_at = ?2 WHERE id IN"
                            " (SELECT id FROM jobs WHERE state = 0 ORDER BY id LIMIT ?1)"
                            " RETURNING id",
                            -1, &claim, NULL),
         h, "prepare claim");
    must(sqlite3_prepare_v2(h,
                            "UPDATE jobs SET state = 2, finished_at = ?2 WHERE id = ?1",
                            -1, &done, NULL),
         h, "prepare done");
    sqlite3_int64 *ids = malloc(sizeof *ids * (size_t)batch);
    for (;;) {
        int n = 0, rc;
        must(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), h, "begin");
        sqlite3_bind_int(claim, 1, batch);
        sqlite3_bind_double(claim, 2, now());
        while ((rc = sqlite3_step(claim)) == SQLITE_ROW)
            ids[n++] = sqlite3_column_int64(claim, 0);
        must(rc, h, "claim");
        sqlite3_reset(claim);
        must(sqlite3_exec(h, "COMMIT", NULL, NULL, NULL), h, "commit");
        if (n == 0)
            break;
        /* the no-op "work" happens here */
        must(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), h, "begin");
        for (int i = 0; i < n; i++) {
            sqlite3_bind_int64(done, 1, ids[i]);
            sqlite3_bind_double(done, 2, now());
            must(sqlite3_step(done), h, "done");
            sqlite3_reset(done);
        }
        must(sqlite3_exec(h, "COMMIT", NULL, NULL, NULL), h, "commit");
    }
    free(ids);
    sqlite3_finalize(claim);
    sqlite3_finalize(done);
    sqlite3_close(h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: ref_sqlite DBFILE JOBS WORKERS BATCH [normal]\n");
        return 2;
    }
    const char *path = argv[1];
    int jobs = atoi(argv[2]), workers = atoi(argv[3]), batch = atoi(argv[4]);
    int normal = argc > 5 && strcmp(argv[5], "normal") == 0;
    if (jobs < 1 || workers < 1 || batch < 1) {
        fprintf(stderr, "ref_sqlite: JOBS, WORKERS and BATCH must be positive\n");
        return 2;
    }
    unlink(path);
    sqlite3 *h = open_db(path, normal);
    must(sqlite3_exec(h,
                      "PRAGMA journal_mode=WAL;"
                      "CREATE TABLE jobs (id INTEGER PRIMARY KEY, state INTEGER NOT NULL,"
                      " payload BLOB NOT NULL, started_at REAL, finished_at REAL);"
                      "CREATE INDEX jobs_ready ON jobs (id) WHERE state = 0;",
                      NULL, NULL, NULL),
         h, "schema");
    sqlite3_stmt *ins;
    must(sqlite3_prepare_v2(h, "INSERT INTO jobs (state, payload) VALUES (0, ?1)", -1,
                            &ins, NULL),
         h, "prepare insert");
    double t0 = now();
    must(sqlite3_exec(h, "BEGIN", NULL, NULL, NULL), h, "begin");
    for (int i = 0; i < jobs; i++) {
        sqlite3_bind_blob(ins, 1, "xxxxxxxxxxxxxxxx", 16, SQLITE_STATIC);
        must(sqlite3_step(ins), h, "insert");
        sqlite3_reset(ins);
    }
    must(sqlite3_exec(h, "COMMIT", NULL, NULL, NULL), h, "commit");
    double t_enq = now() - t0;
    sqlite3_finalize(ins);
    sqlite3_close(h);

    t0 = now();
    for (int i = 0; i < workers; i++)
        if (fork() == 0)
            _exit(worker(path, batch, normal));
    int failed = 0, st;
    while (wait(&st) > 0)
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    double t_work = now() - t0;

    h = open_db(path, normal);
    sqlite3_stmt *cnt;
    sqlite3_prepare_v2(h, "SELECT count(*) FROM jobs WHERE state = 2", -1, &cnt, NULL);
    sqlite3_step(cnt);
    int done = sqlite3_column_int(cnt, 0);
    sqlite3_finalize(cnt);
    sqlite3_close(h);
    printf("{\"jobs\": %d, \"workers\": %d, \"batch\": %d, \"done\": %d,"
           " \"enqueue_per_s\": %.0f, \"process_per_s\": %.0f}\n",
           jobs, workers, batch, done, jobs / t_enq, jobs / t_work);
    return failed || done != jobs;
}
