/*
 * sqlite.c - the SQLite engine: one file, many worker processes on one
 * machine. Called only through tq__engine_sqlite (engine.h).
 *
 * Writers serialise on SQLite's single write lock, so every write is a
 * short BEGIN IMMEDIATE transaction (taking the lock up front, so a
 * transaction never has to upgrade a read snapshot and fail with
 * SQLITE_BUSY_SNAPSHOT), and throughput comes from doing more per
 * transaction: batched enqueue, acknowledgements and the next claim share
 * one transaction (exchange). WAL lets readers run beside the writer.
 * Lock waits go through our own busy handler, which sleeps with a capped
 * backoff (never spins) and counts the waits for tq bench.
 *
 * Times are INTEGER microseconds since the epoch from this machine's clock;
 * there is only one machine, so there is no skew to guard against.
 *
 * Idle workers are woken by enqueues without polling the file in a tight
 * loop (sqlite_listen): every commit writes the -wal file, which inotify
 * watches; a write is confirmed as another connection's insert by
 * PRAGMA data_version and the tq_jobs sequence, so plain-SQL producers
 * wake workers too.
 */
#define _DEFAULT_SOURCE
#include "engine.h"

#include <sqlite3.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*
 * SCHEMA VERSION. The store records the version it was built to in
 * tq_meta('schema_version'). To change the schema:
 *   1. append a new entry to `migrations`, as literal text (never edit a
 *      shipped one, nor build one from macros other code uses);
 *   2. bump TQ__SCHEMA_VERSION (tq_int.h) to the new count, and give every
 *      other engine the same migration;
 *   3. keep every statement below working on the new schema;
 *   4. add a test that upgrades a store made by the previous version.
 * Migrations run in one BEGIN IMMEDIATE transaction, so concurrent tq init
 * runs serialise and the second one finds nothing to do.
 */
#define SCHEMA_VERSION TQ__SCHEMA_VERSION

/* The schema reads best as SQL laid out by hand. */
/* clang-format off */

/* The claim of each order is a seek in a ready-row index: finished rows
 * never enter one, however many are kept. The FIFO one also serves
 * unordered queues; the LIFO one exists only while some queue is LIFO
 * (sync_lifo_index), since every index costs every enqueue and claim. */
#define READY_LIFO_INDEX                                                                 \
    "tq_jobs_ready_lifo ON tq_jobs (queue, priority, id, run_at)  WHERE state = 'ready'"

/* Each migration is literal text, never built from macros the statements
 * below share: a store that ran a migration must be the same whatever the
 * code around it becomes. Plain INSERTs get their times from the DEFAULTs
 * (microseconds since the epoch from julianday) and create their queue by
 * trigger. */
static const char *const migrations[SCHEMA_VERSION] = {
    /* 1: the first schema. */
    "CREATE TABLE tq_meta ("
    "  key TEXT PRIMARY KEY,"
    "  value TEXT NOT NULL);"
    "CREATE TABLE tq_queues ("
    "  name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64"
    " AND name NOT GLOB '*[^A-Za-z0-9_.-]*'),"
    "  ord TEXT NOT NULL DEFAULT 'fifo' CHECK (ord IN ('fifo','lifo','unordered')),"
    "  lease_us INTEGER NOT NULL DEFAULT 30000000,"
    "  max_attempts INTEGER NOT NULL DEFAULT 3,"
    "  backoff_base_us INTEGER NOT NULL DEFAULT 1000000,"
    "  backoff_cap_us INTEGER NOT NULL DEFAULT 3600000000,"
    "  keep_done INTEGER NOT NULL DEFAULT 1,"
    "  paused INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL"
    " DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)));"
    /* AUTOINCREMENT: an id is never reused, even after the newest job was
     * pruned, so an id names one job forever. */
    "CREATE TABLE tq_jobs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  queue TEXT NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 64"
    " AND queue NOT GLOB '*[^A-Za-z0-9_.-]*'),"
    "  state TEXT NOT NULL DEFAULT 'ready'"
    "    CHECK (state IN ('ready','running','done','dead','cancelled')),"
    "  priority INTEGER NOT NULL DEFAULT 0,"
    "  run_at INTEGER NOT NULL"
    " DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  payload BLOB NOT NULL DEFAULT x'',"
    "  dedup_key TEXT,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER,"
    "  worker TEXT,"
    "  created_at INTEGER NOT NULL"
    " DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  started_at INTEGER,"
    "  finished_at INTEGER,"
    "  lease_until INTEGER,"
    "  last_error TEXT);"
    "CREATE INDEX tq_jobs_ready_fifo ON tq_jobs (queue, priority DESC, run_at, id)"
    "  WHERE state = 'ready';"
    "CREATE INDEX tq_jobs_ready_lifo ON tq_jobs (queue, priority DESC, id DESC, run_at)"
    "  WHERE state = 'ready';"
    "CREATE INDEX tq_jobs_running ON tq_jobs (lease_until) WHERE state = 'running';"
    "CREATE INDEX tq_jobs_finished ON tq_jobs (state, finished_at)"
    "  WHERE finished_at IS NOT NULL;"
    "CREATE UNIQUE INDEX tq_jobs_dedup ON tq_jobs (queue, dedup_key)"
    "  WHERE dedup_key IS NOT NULL;"
    "CREATE TRIGGER tq_jobs_new_queue AFTER INSERT ON tq_jobs BEGIN"
    "  INSERT OR IGNORE INTO tq_queues (name) VALUES (NEW.queue);"
    "END;"
    "CREATE TABLE tq_workers ("
    "  name TEXT PRIMARY KEY,"
    "  host TEXT NOT NULL,"
    "  pid INTEGER NOT NULL,"
    "  started_at INTEGER NOT NULL,"
    "  heartbeat_at INTEGER NOT NULL,"
    "  stopped_at INTEGER,"
    "  lease_us INTEGER NOT NULL);",
    /* 2: PostgreSQL's jobs table changed its queue CHECK and storage
     * settings. Nothing to do here: SQLite evaluates a CHECK on UPDATE only
     * when the statement changes a column it names, so the name check costs
     * the hot path nothing. */
    "SELECT 1;",
    /* 3: the LIFO index ascending, read backward by the LIFO claim, as on
     * PostgreSQL: a descending one takes every new job at the left end of
     * its queue's range, where B-tree splits leave pages half full. */
    "DROP INDEX tq_jobs_ready_lifo;"
    "CREATE INDEX tq_jobs_ready_lifo ON tq_jobs (queue, priority, id, run_at)"
    "  WHERE state = 'ready';",
    /* 4: PostgreSQL's jobs_running now covers leased rows, so that its
     * planner cannot drive acknowledgements from it. SQLite looks a row up
     * by its rowid whenever a statement names one, so nothing changes. */
    "SELECT 1;",
    /* 5: the state CHECK as a chain of comparisons. Every claim and every
     * acknowledgement changes state, and SQLite evaluated `state IN (five
     * constants)` by building a temporary index of the five for each row
     * it moved (tq bench, SQLite, 100,000 jobs, 4 workers: ~75k -> ~86k
     * jobs/s without it). A CHECK cannot be altered, so the table is
     * rebuilt, keeping the AUTOINCREMENT counter; the LIFO index comes
     * back only if a queue is LIFO (sqlite_init, sync_lifo_index). */
    "CREATE TABLE tq_jobs_v5 ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  queue TEXT NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 64"
    " AND queue NOT GLOB '*[^A-Za-z0-9_.-]*'),"
    "  state TEXT NOT NULL DEFAULT 'ready'"
    "    CHECK (state = 'ready' OR state = 'running' OR"
    " state = 'done' OR state = 'dead' OR state = 'cancelled'),"
    "  priority INTEGER NOT NULL DEFAULT 0,"
    "  run_at INTEGER NOT NULL"
    " DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  payload BLOB NOT NULL DEFAULT x'',"
    "  dedup_key TEXT,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER,"
    "  worker TEXT,"
    "  created_at INTEGER NOT NULL"
    " DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  started_at INTEGER,"
    "  finished_at INTEGER,"
    "  lease_until INTEGER,"
    "  last_error TEXT);"
    "INSERT INTO tq_jobs_v5 ("
    "id, queue, state, priority, run_at, payload, dedup_key, attempts, max_attempts,"
    " worker, created_at, started_at, finished_at, lease_until, last_error) SELECT id,"
    " queue, state, priority, run_at, payload, dedup_key, attempts, max_attempts,"
    " worker, created_at, started_at, finished_at, lease_until, last_error"
    " FROM tq_jobs;"
    "DELETE FROM sqlite_sequence WHERE name = 'tq_jobs_v5';"
    "INSERT INTO sqlite_sequence (name, seq)"
    "  SELECT 'tq_jobs_v5', seq FROM sqlite_sequence WHERE name = 'tq_jobs';"
    "DROP TABLE tq_jobs;"
    "ALTER TABLE tq_jobs_v5 RENAME TO tq_jobs;"
    "CREATE INDEX tq_jobs_ready_fifo ON tq_jobs (queue, priority DESC, run_at, id)"
    "  WHERE state = 'ready';"
    "CREATE INDEX tq_jobs_running ON tq_jobs (lease_until) WHERE state = 'running';"
    "CREATE INDEX tq_jobs_finished ON tq_jobs (state, finished_at)"
    "  WHERE finished_at IS NOT NULL;"
    "CREATE UNIQUE INDEX tq_jobs_dedup ON tq_jobs (queue, dedup_key)"
    "  WHERE dedup_key IS NOT NULL;"
    "CREATE TRIGGER tq_jobs_new_queue AFTER INSERT ON tq_jobs BEGIN"
    "  INSERT OR IGNORE INTO tq_queues (name) VALUES (NEW.queue);"
    "END;",
    /* 6: the fence's claim counter, and CHECKs for what plain SQL could
     * otherwise write and no statement handles: a running row without a
     * lease (no rescue would ever find it), a priority beyond 32 bits (read
     * back as another number). Rows that break them are mended on the way:
     * a leaseless running row gets an expired lease (the next rescue puts
     * it back), a priority is clamped. Workers get the host identity that
     * tells a dead holder of a name from a live one in another container.
     * unknown_starts bounds poison jobs whose worker dies before their start
     * is recorded (engine.h, STARTS). Written out in full, as every
     * migration must be: the table as of version 6, its indexes and its
     * trigger. */
    "CREATE TABLE tq_jobs_v6 ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  queue TEXT NOT NULL DEFAULT 'default'"
    "    CHECK (length(queue) BETWEEN 1 AND 64 AND queue NOT GLOB '*[^A-Za-z0-9_.-]*'),"
    "  state TEXT NOT NULL DEFAULT 'ready'"
    "    CHECK (state = 'ready' OR state = 'running' OR state = 'done' OR"
    "           state = 'dead' OR state = 'cancelled'),"
    "  priority INTEGER NOT NULL DEFAULT 0"
    "    CHECK (priority BETWEEN -2147483648 AND 2147483647),"
    "  run_at INTEGER NOT NULL"
    "    DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  payload BLOB NOT NULL DEFAULT x'',"
    "  dedup_key TEXT,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER,"
    "  worker TEXT,"
    "  created_at INTEGER NOT NULL"
    "    DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  started_at INTEGER,"
    "  finished_at INTEGER,"
    "  lease_until INTEGER,"
    "  last_error TEXT,"
    "  claims INTEGER NOT NULL DEFAULT 0,"
    "  unknown_starts INTEGER NOT NULL DEFAULT 0,"
    "  CHECK (state <> 'running' OR lease_until IS NOT NULL)"
    ");"
    "INSERT INTO tq_jobs_v6 (id, queue, state, priority, run_at, payload, dedup_key,"
    "  attempts, max_attempts, worker, created_at, started_at, finished_at, lease_until,"
    "  last_error, claims)"
    " SELECT id, queue, state, max(-2147483648, min(2147483647, priority)), run_at,"
    "  payload, dedup_key, attempts, max_attempts, worker, created_at, started_at,"
    "  finished_at,"
    "  CASE WHEN state = 'running' AND lease_until IS NULL THEN 0 ELSE lease_until END,"
    "  last_error, 0"
    " FROM tq_jobs;"
    "DELETE FROM sqlite_sequence WHERE name = 'tq_jobs_v6';"
    "INSERT INTO sqlite_sequence (name, seq)"
    "  SELECT 'tq_jobs_v6', seq FROM sqlite_sequence WHERE name = 'tq_jobs';"
    "DROP TABLE tq_jobs;"
    "ALTER TABLE tq_jobs_v6 RENAME TO tq_jobs;"
    "CREATE INDEX tq_jobs_ready_fifo ON tq_jobs (queue, priority DESC, run_at, id)"
    "  WHERE state = 'ready';"
    "CREATE INDEX tq_jobs_running ON tq_jobs (lease_until) WHERE state = 'running';"
    "CREATE INDEX tq_jobs_finished ON tq_jobs (state, finished_at)"
    "  WHERE finished_at IS NOT NULL;"
    "CREATE UNIQUE INDEX tq_jobs_dedup ON tq_jobs (queue, dedup_key)"
    "  WHERE dedup_key IS NOT NULL;"
    "CREATE TRIGGER tq_jobs_new_queue AFTER INSERT ON tq_jobs BEGIN"
    "  INSERT OR IGNORE INTO tq_queues (name) VALUES (NEW.queue);"
    "END;"
    "ALTER TABLE tq_workers ADD COLUMN host_id TEXT;",
    /* 7: keys with a scope (tq_unique). A key held while its job is queued
     * or active lives in unique_key with unique_scope, under a unique index
     * whose predicate follows the row: a queued job holds its key until its
     * first claim (claims only grows, so it never takes it back), an active
     * one until it is done, dead or cancelled (a retry by hand marks it
     * 'expired': it does not take its key back either). So no change of
     * state can ever collide in that index, and a job leaves it, freeing
     * the key, in the same statement that moves it on. dedup_key and its
     * index are unchanged: stored keys, and the INSERTs producers already
     * have, keep working. unique_until frees a key by time: a keyed enqueue
     * first moves holders whose time is up out of both indexes (scope
     * 'expired', the key kept in unique_key for the record); see
     * S_EXPIRE_KEY. (Not a trigger: one, even with a WHEN that is false,
     * costs every insert a sub-program: 12 % more instructions enqueueing
     * and 9.6 % in the worker, docs/benchmarks.md.)
     * The CHECK names only columns no hot statement writes, so SQLite does
     * not test it there; a unique_key needs a scope an index knows. */
    "ALTER TABLE tq_jobs ADD COLUMN unique_key TEXT;"
    "ALTER TABLE tq_jobs ADD COLUMN unique_scope TEXT"
    "  CHECK (unique_key IS NULL AND unique_scope IS NULL"
    "         OR unique_scope IS NOT NULL AND (unique_scope = 'queued'"
    "            OR unique_scope = 'active' OR unique_scope = 'expired'));"
    "ALTER TABLE tq_jobs ADD COLUMN unique_until INTEGER;"
    "CREATE UNIQUE INDEX tq_jobs_unique ON tq_jobs (queue, unique_key)"
    "  WHERE unique_key IS NOT NULL"
    "  AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0"
    "       OR unique_scope = 'active' AND state IN ('ready', 'running'));",
    /* 8: a W3C trace context per job (tq_enqueue_opts.traceparent), given
     * to its handler. The API checks its form; a worker passes on only a
     * value of that form, whatever plain SQL wrote. */
    "ALTER TABLE tq_jobs ADD COLUMN traceparent TEXT;",
    /* 9: concurrency limits (tq_queue_info.max_running, per group). A job's
     * group is set once, at enqueue. The limited claim (CLAIM_LIMITED)
     * counts running rows through tq_jobs_running; an index of running rows
     * by group cost every job 18 more VM instructions an update (+3.3 %
     * instructions in the worker) for the sake of limited queues alone. */
    "ALTER TABLE tq_jobs ADD COLUMN job_group TEXT"
    "  CHECK (job_group IS NULL OR length(CAST(job_group AS BLOB)) BETWEEN 1 AND 255);"
    "ALTER TABLE tq_queues ADD COLUMN max_running INTEGER NOT NULL DEFAULT 0"
    "  CHECK (max_running >= 0);"
    "ALTER TABLE tq_queues ADD COLUMN max_running_per_group INTEGER NOT NULL DEFAULT 0"
    "  CHECK (max_running_per_group >= 0);",
    /* 10: rate limits (tq_queue_info.rate_limit): a token bucket per queue,
     * rate_tokens as of rate_at, taken from by the limited claims
     * (S_RATE_TAKE) in their transaction; tq__rate_burst says why these
     * numbers keep every window. */
    "ALTER TABLE tq_queues ADD COLUMN rate_limit INTEGER NOT NULL DEFAULT 0"
    "  CHECK (rate_limit >= 0);"
    "ALTER TABLE tq_queues ADD COLUMN rate_period_us INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE tq_queues ADD COLUMN rate_burst INTEGER NOT NULL DEFAULT 1"
    "  CHECK (rate_burst >= 1 AND (rate_limit = 0 OR rate_period_us > 0));"
    "ALTER TABLE tq_queues ADD COLUMN rate_tokens REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE tq_queues ADD COLUMN rate_at INTEGER NOT NULL DEFAULT 0"
    "  CHECK (rate_tokens >= 0 AND rate_tokens <= rate_burst);",
    /* 11: periodic jobs (tq_schedule_set). A schedule's next_slot moves on
     * only forward and only by compare-and-set (S_SCHEDULE_MOVE), in the
     * transaction that writes the slot's job, so one worker wins each slot
     * and no slot comes twice; the job carries its schedule and slot. (Not
     * under a unique index as well: a partial one on the jobs table cost
     * every job 2.8 % more instructions to enqueue and 1.8 % to work,
     * docs/benchmarks.md.) */
    "CREATE TABLE tq_schedules ("
    "  name TEXT PRIMARY KEY NOT NULL"
    "    CHECK (length(name) BETWEEN 1 AND 64 AND name NOT GLOB '*[^A-Za-z0-9_.-]*'),"
    "  queue TEXT NOT NULL"
    "    CHECK (length(queue) BETWEEN 1 AND 64 AND queue NOT GLOB '*[^A-Za-z0-9_.-]*'),"
    "  spec TEXT NOT NULL,"
    "  tz TEXT NOT NULL DEFAULT 'UTC',"
    "  payload BLOB NOT NULL DEFAULT x'',"
    "  priority INTEGER NOT NULL DEFAULT 0"
    "    CHECK (priority BETWEEN -2147483648 AND 2147483647),"
    "  overlap_skip INTEGER NOT NULL DEFAULT 0,"
    "  next_slot INTEGER NOT NULL,"
    "  last_slot INTEGER,"
    "  last_job INTEGER);"
    "ALTER TABLE tq_jobs ADD COLUMN schedule TEXT;"
    "ALTER TABLE tq_jobs ADD COLUMN slot INTEGER;",
    /* 12: what a handler says on its control channel (control.h): how
     * often a job snoozed, bounded by its queue's max_snoozes, and the
     * progress its running handler last reported. */
    "ALTER TABLE tq_jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0"
    "  CHECK (snoozes >= 0);"
    "ALTER TABLE tq_jobs ADD COLUMN progress INTEGER"
    "  CHECK (progress IS NULL OR progress BETWEEN 0 AND 100);"
    "ALTER TABLE tq_jobs ADD COLUMN progress_text TEXT;"
    "ALTER TABLE tq_queues ADD COLUMN max_snoozes INTEGER NOT NULL DEFAULT 100"
    "  CHECK (max_snoozes >= 0);"
    /* and what a done job's handler gave back (tq_job_result), and the
     * queue setting that makes a command's stdout that result. */
    "ALTER TABLE tq_jobs ADD COLUMN result BLOB;"
    "ALTER TABLE tq_queues ADD COLUMN results INTEGER NOT NULL DEFAULT 0;",
    /* 13: dependencies (engine.h, DEPENDENCIES). A new state, waiting,
     * which the state CHECK must allow: SQLite changes a CHECK only by
     * building the table again (as migration 6 did), written out in full
     * with its indexes and trigger. nparents and waiting_for count a
     * child's parents, all and not yet done; cancelled_by names the parent
     * whose end cancelled it. tq_deps holds one row per parent of a child;
     * its trigger keeps the child's counts and state, for tq and plain SQL
     * alike (it costs only dependency inserts), and refuses a parent that
     * is not older than its child (so there are no cycles) and parents for
     * a job that has children already (whose state it would not pass
     * on). What a parent's end does
     * to its children is this engine's code (deps_settle), not a trigger on
     * tq_jobs: one, even never firing, costs every state change a
     * sub-program (+48 % per acknowledgement statement, +9.8 % in the
     * worker, docs/benchmarks.md). */
    "CREATE TABLE tq_jobs_v13 ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  queue TEXT NOT NULL DEFAULT 'default'"
    "    CHECK (length(queue) BETWEEN 1 AND 64 AND queue NOT GLOB '*[^A-Za-z0-9_.-]*'),"
    "  state TEXT NOT NULL DEFAULT 'ready'"
    "    CHECK (state = 'ready' OR state = 'running' OR state = 'done' OR"
    "           state = 'dead' OR state = 'cancelled' OR state = 'waiting'),"
    "  priority INTEGER NOT NULL DEFAULT 0"
    "    CHECK (priority BETWEEN -2147483648 AND 2147483647),"
    "  run_at INTEGER NOT NULL"
    "    DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  payload BLOB NOT NULL DEFAULT x'',"
    "  dedup_key TEXT,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER,"
    "  worker TEXT,"
    "  created_at INTEGER NOT NULL"
    "    DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),"
    "  started_at INTEGER,"
    "  finished_at INTEGER,"
    "  lease_until INTEGER,"
    "  last_error TEXT,"
    "  claims INTEGER NOT NULL DEFAULT 0,"
    "  unknown_starts INTEGER NOT NULL DEFAULT 0,"
    "  unique_key TEXT,"
    "  unique_scope TEXT"
    "    CHECK (unique_key IS NULL AND unique_scope IS NULL"
    "           OR unique_scope IS NOT NULL AND (unique_scope = 'queued'"
    "              OR unique_scope = 'active' OR unique_scope = 'expired')),"
    "  unique_until INTEGER,"
    "  traceparent TEXT,"
    "  job_group TEXT"
    "    CHECK (job_group IS NULL OR length(CAST(job_group AS BLOB)) BETWEEN 1 AND 255),"
    "  schedule TEXT,"
    "  slot INTEGER,"
    "  snoozes INTEGER NOT NULL DEFAULT 0 CHECK (snoozes >= 0),"
    "  progress INTEGER CHECK (progress IS NULL OR progress BETWEEN 0 AND 100),"
    "  progress_text TEXT,"
    "  result BLOB,"
    "  nparents INTEGER NOT NULL DEFAULT 0,"
    "  waiting_for INTEGER NOT NULL DEFAULT 0,"
    "  cancelled_by INTEGER,"
    "  CHECK (state <> 'running' OR lease_until IS NOT NULL)"
    ");"
    "INSERT INTO tq_jobs_v13 (id, queue, state, priority, run_at, payload, dedup_key,"
    "  attempts, max_attempts, worker, created_at, started_at, finished_at, lease_until,"
    "  last_error, claims, unknown_starts, unique_key, unique_scope, unique_until,"
    "  traceparent, job_group, schedule, slot, snoozes, progress, progress_text, result)"
    " SELECT id, queue, state, priority, run_at, payload, dedup_key,"
    "  attempts, max_attempts, worker, created_at, started_at, finished_at, lease_until,"
    "  last_error, claims, unknown_starts, unique_key, unique_scope, unique_until,"
    "  traceparent, job_group, schedule, slot, snoozes, progress, progress_text, result"
    " FROM tq_jobs;"
    "DELETE FROM sqlite_sequence WHERE name = 'tq_jobs_v13';"
    "INSERT INTO sqlite_sequence (name, seq)"
    "  SELECT 'tq_jobs_v13', seq FROM sqlite_sequence WHERE name = 'tq_jobs';"
    "DROP TABLE tq_jobs;"
    "ALTER TABLE tq_jobs_v13 RENAME TO tq_jobs;"
    "CREATE INDEX tq_jobs_ready_fifo ON tq_jobs (queue, priority DESC, run_at, id)"
    "  WHERE state = 'ready';"
    "CREATE INDEX tq_jobs_running ON tq_jobs (lease_until) WHERE state = 'running';"
    "CREATE INDEX tq_jobs_finished ON tq_jobs (state, finished_at)"
    "  WHERE finished_at IS NOT NULL;"
    "CREATE UNIQUE INDEX tq_jobs_dedup ON tq_jobs (queue, dedup_key)"
    "  WHERE dedup_key IS NOT NULL;"
    "CREATE UNIQUE INDEX tq_jobs_unique ON tq_jobs (queue, unique_key)"
    "  WHERE unique_key IS NOT NULL"
    "  AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0"
    "       OR unique_scope = 'active' AND state IN ('ready', 'running'));"
    "CREATE TRIGGER tq_jobs_new_queue AFTER INSERT ON tq_jobs BEGIN"
    "  INSERT OR IGNORE INTO tq_queues (name) VALUES (NEW.queue);"
    "END;"
    "CREATE TABLE tq_deps ("
    "  parent INTEGER NOT NULL,"
    "  child INTEGER NOT NULL,"
    "  PRIMARY KEY (parent, child)"
    ") WITHOUT ROWID;"
    "CREATE INDEX tq_deps_child ON tq_deps (child, parent);"
    "CREATE TRIGGER tq_deps_new AFTER INSERT ON tq_deps BEGIN"
    "  SELECT RAISE(ABORT, 'tq: a job''s parents are older jobs (smaller ids)')"
    "   WHERE NEW.parent >= NEW.child;"
    "  SELECT RAISE(ABORT, 'tq: add a job''s parents before its children')"
    "   WHERE EXISTS (SELECT 1 FROM tq_deps WHERE parent = NEW.child);"
    "  SELECT RAISE(ABORT, 'tq: a parent job does not exist')"
    "   WHERE NOT EXISTS (SELECT 1 FROM tq_jobs WHERE id = NEW.parent);"
    "  SELECT RAISE(ABORT, 'tq: a job gets its parents before its first claim')"
    "   WHERE NOT EXISTS (SELECT 1 FROM tq_jobs WHERE id = NEW.child AND claims = 0"
    "                     AND state IN ('ready', 'waiting', 'cancelled'));"
    "  UPDATE tq_jobs SET"
    "    nparents = nparents + 1,"
    "    waiting_for = waiting_for + (p.state <> 'done'),"
    "    state = CASE WHEN tq_jobs.state = 'cancelled' THEN 'cancelled'"
    "                 WHEN p.state IN ('dead', 'cancelled') THEN 'cancelled'"
    "                 WHEN tq_jobs.waiting_for + (p.state <> 'done') > 0 THEN 'waiting'"
    "                 ELSE 'ready' END,"
    "    cancelled_by = CASE WHEN tq_jobs.state <> 'cancelled'"
    "                         AND p.state IN ('dead', 'cancelled')"
    "                        THEN p.id ELSE tq_jobs.cancelled_by END,"
    "    last_error = CASE WHEN tq_jobs.state <> 'cancelled'"
    "                       AND p.state IN ('dead', 'cancelled')"
    "                      THEN 'parent job ' || p.id || ' is ' || p.state"
    "                      ELSE tq_jobs.last_error END,"
    "    finished_at = CASE WHEN tq_jobs.state <> 'cancelled'"
    "                        AND p.state IN ('dead', 'cancelled')"
    "                       THEN CAST((julianday('now') - 2440587.5) * 86400000000"
    "                                 AS INTEGER)"
    "                       ELSE tq_jobs.finished_at END"
    "   FROM (SELECT id, state FROM tq_jobs WHERE id = NEW.parent) AS p"
    "   WHERE tq_jobs.id = NEW.child;"
    "END;"
    /* A dependency is counted once (INSERT OR REPLACE would count it
     * again), never changed, and deleted only with its child. */
    "CREATE TRIGGER tq_deps_once BEFORE INSERT ON tq_deps BEGIN"
    "  SELECT RAISE(ABORT, 'tq: that parent is counted already')"
    "   WHERE EXISTS (SELECT 1 FROM tq_deps WHERE parent = NEW.parent"
    "                 AND child = NEW.child);"
    "END;"
    "CREATE TRIGGER tq_deps_fixed BEFORE UPDATE ON tq_deps BEGIN"
    "  SELECT RAISE(ABORT, 'tq: dependencies do not change; they go with their child');"
    "END;"
    "CREATE TRIGGER tq_deps_kept BEFORE DELETE ON tq_deps BEGIN"
    "  SELECT RAISE(ABORT, 'tq: dependencies do not change; they go with their child')"
    "   WHERE EXISTS (SELECT 1 FROM tq_jobs WHERE id = OLD.child);"
    "END;",
    /* 14: the ready jobs of each group, in FIFO order, for the claim of a
     * queue with a per-group limit (CLAIM_GROUPS, CLAIM_CHAIN). Only rows
     * with a group enter it: jobs without one, in any queue, pay nothing
     * for it. */
    "CREATE INDEX tq_jobs_ready_group"
    "  ON tq_jobs (queue, job_group, priority DESC, run_at, id)"
    "  WHERE job_group IS NOT NULL AND state = 'ready';",
    /* 15: the registration that claimed a running job (tq__claim.
     * worker_since: its worker row's started_at), so that a worker taking
     * over the name of one that is gone puts back that one's jobs alone,
     * not those an earlier holder of the name may still be running. */
    "ALTER TABLE tq_jobs ADD COLUMN worker_since INTEGER;"
    /* and the process that ends a worker's handler groups when it dies
     * (reaper.h), which a worker taking its name over waits for. */
    "ALTER TABLE tq_workers ADD COLUMN reaper_pid INTEGER;",
};

/* clang-format on */

/* clang-format off */

/* A job is out of attempts when it has started as many as it may; inc is
 * what the statement adds to attempts meanwhile. */
#define OUT_OF_ATTEMPTS(inc)                                                             \
    "attempts + " inc " >= COALESCE(max_attempts, (SELECT q.max_attempts FROM"          \
    " tq_queues q WHERE q.name = tq_jobs.queue), 3)"

/* The fence every change to a claimed job carries (engine.h). */
#define FENCE " WHERE id = ?1 AND state = 'running' AND worker = ?2 AND claims = ?3"

/* An acknowledgement's record of a start (engine.h, STARTS): ?5 is
 * started_us, ?4 now. STARTED is 1 when it charges the attempt. */
#define STARTED "(?5 > 0 AND started_at IS NULL)"
#define RECORD_START                                                                     \
    " attempts = attempts + " STARTED ","                                                \
    " started_at = COALESCE(started_at, CASE WHEN ?5 > 0 THEN ?4 - ?5 END),"             \
    " unknown_starts = CASE WHEN ?5 > 0 THEN 0 ELSE unknown_starts END"

/* The predicate of tq_jobs_unique (migration 7), word for word: the rows
 * whose unique_key is held. */
#define UNIQUE_HELD                                                                      \
    "unique_key IS NOT NULL"                                                             \
    " AND (unique_scope = 'queued' AND state = 'ready' AND claims = 0"                   \
    "      OR unique_scope = 'active' AND state IN ('ready', 'running'))"

/* A job row (tq__all_cols). */
#define JOB_COLS                                                                         \
    "id, queue, payload, state, priority, attempts, COALESCE(max_attempts, (SELECT"      \
    " q.max_attempts FROM tq_queues q WHERE q.name = tq_jobs.queue), 3),"                \
    " coalesce(dedup_key, unique_key),"                                                   \
    " worker, last_error, created_at, run_at, started_at, finished_at, lease_until,"     \
    " claims, traceparent, job_group, snoozes, progress, progress_text, length(result),"  \
    " nparents, waiting_for"

/*
 * A claim: ?1 queue, ?2 now, ?3 how many, ?4 worker, ?5 lease end, ?6 the
 * queue's max attempts as the claimer knows it, ?7 1 to start the jobs or
 * 0 to hold them (and CLAIM_CHAIN's ?8, tq__claim.chain), ?9 the worker's
 * registration (tq__claim.worker_since) or NULL. A start
 * charges the attempt unless the job is out of them (the worker then ends
 * it unrun); so does a hold of a job whose claims ended twice in a rescue
 * with no start recorded (engine.h). A paused queue yields nothing, and so
 * does a queue with concurrency or rate limits (CLAIM_ROOM,
 * CLAIM_GROUPS, CLAIM_CHAIN and CLAIM_LIMITED claim there). It returns
 * only what the claimer does not know (tq__claimed_cols).
 */
#define CHARGE                                                                           \
    "((?7 OR unknown_starts >= 2) AND attempts < COALESCE(max_attempts, ?6))"
#define CLAIM_SET                                                                        \
    "UPDATE tq_jobs SET"                                                                 \
    "  state = 'running',"                                                               \
    "  claims = claims + 1,"                                                             \
    "  attempts = attempts + " CHARGE ","                                                \
    "  started_at = CASE WHEN " CHARGE " THEN ?2 END,"                                   \
    "  unknown_starts = CASE WHEN " CHARGE " THEN 0 ELSE unknown_starts END,"            \
    "  worker = ?4,"                                                                     \
    "  worker_since = ?9,"                                                               \
    "  lease_until = ?5,"                                                                \
    "  finished_at = NULL"
#define CLAIM_RETURNING                                                                  \
    " RETURNING id, payload, priority, attempts, COALESCE(max_attempts, ?6),"            \
    "  coalesce(dedup_key, unique_key), last_error, created_at, run_at, started_at,"     \
    "  lease_until, claims, traceparent, job_group, snoozes, nparents"
#define CLAIM(order_by)                                                                  \
    CLAIM_SET                                                                            \
    " WHERE id IN (SELECT id FROM tq_jobs"                                               \
    "              WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2"                \
    "                AND NOT EXISTS (SELECT 1 FROM tq_queues WHERE name = ?1"            \
    "                    AND (paused OR max_running > 0 OR max_running_per_group > 0"     \
    "                         OR rate_limit > 0))"                                       \
    "              " order_by                                                            \
    "              LIMIT ?3)"                                                            \
    CLAIM_RETURNING

/* A queue's rate-limit bucket (migration 10): its tokens now (?2), and
 * how many it gains a microsecond. */
#define RATE_REFILL                                                                      \
    "(max(rate_limit - rate_burst, 1) * 1.0 / (rate_period_us + 10000))"
#define RATE_TOKENS_AT(now)                                                              \
    "min(rate_burst, rate_tokens + max(0, " now " - rate_at) * " RATE_REFILL ")"
#define RATE_TOKENS RATE_TOKENS_AT("?2")
_Static_assert(TQ__RATE_MARGIN_US == 10000, "RATE_REFILL spells out the margin");

/* A limited claim's lim and busy (CLAIM_LIMITED says what they hold). */
#define LIMITS                                                                           \
    "(SELECT max_running_per_group AS per_group,"                                        \
    "    min(CASE WHEN paused THEN 0"                                                    \
    "         WHEN max_running > 0 THEN max(0, min(?3, max_running - (SELECT count(*)"   \
    "              FROM tq_jobs WHERE state = 'running' AND queue = ?1)))"               \
    "         ELSE ?3 END,"                                                              \
    "        CASE WHEN rate_limit > 0 THEN CAST(" RATE_TOKENS " AS INTEGER)"             \
    "             ELSE ?3 END) AS room"                                                  \
    "    FROM tq_queues WHERE name = ?1),"                                               \
    " busy AS MATERIALIZED (SELECT job_group, count(*) AS n FROM tq_jobs"                \
    "    WHERE state = 'running' AND queue = ?1 AND job_group IS NOT NULL"               \
    "      AND (SELECT per_group FROM lim) > 0"                                          \
    "    GROUP BY job_group),"

/*
 * The claim of a LIFO queue with a group limit (the other orders' is
 * CLAIM_GROUPS or CLAIM_CHAIN; without a group limit, CLAIM_ROOM), with
 * CLAIM's parameters. lim: how many may start (room: ?3, or what
 * max_running leaves, 0 when paused; no more than the rate's whole
 * tokens) and the group limit. busy: the running jobs of each group, with
 * a group limit (the queue's running rows, through tq_jobs_running: no
 * index of their own, which every update of every job would pay for).
 * cand: the first ready rows in the queue's order whose group has room;
 * with a group limit 4 x room + 32 of them, so that a batch can still fill
 * when several share a group. picked: of those, in order, the ones that fit
 * their group counting the batch's own earlier picks (rn), at most room.
 * One statement: nothing runs between the counts and the update (SQLite
 * has one writer; PostgreSQL's form locks the queue first).
 */
#define CLAIM_LIMITED(order_by)                                                          \
    "WITH lim AS MATERIALIZED " LIMITS                                                   \
    " cand AS (SELECT j.id, j.job_group, j.priority, j.run_at, coalesce(b.n, 0) AS busy" \
    "    FROM tq_jobs j LEFT JOIN busy b ON b.job_group = j.job_group"                   \
    "    WHERE j.queue = ?1 AND j.state = 'ready' AND j.run_at <= ?2"                    \
    "      AND coalesce(b.n, 0) < (SELECT max(per_group, 1) FROM lim)"                   \
    "    " order_by                                                                      \
    "    LIMIT coalesce((SELECT CASE WHEN per_group > 0 THEN 4 * room + 32 ELSE room END" \
    "                    FROM lim), 0)),"                                                \
    " picked AS (SELECT id FROM (SELECT id, job_group, priority, run_at, busy,"          \
    "    row_number() OVER (PARTITION BY job_group " order_by ") AS rn FROM cand)"       \
    "    WHERE job_group IS NULL OR busy + rn <= (SELECT per_group FROM lim)"            \
    "       OR (SELECT per_group FROM lim) = 0"                                          \
    "    " order_by                                                                      \
    "    LIMIT coalesce((SELECT room FROM lim), 0))"                                     \
    CLAIM_SET " WHERE id IN (SELECT id FROM picked)" CLAIM_RETURNING

/*
 * The limited claim of a FIFO or unordered queue, with CLAIM_LIMITED's
 * parameters, lim and busy. Without a group limit: the first room ready
 * rows. With one, first the head of the queue: of its first room + 64
 * ready rows (head), those that fit their group (fit: counting the group's
 * running jobs and its earlier rows here). When that is not room jobs and
 * the head was full (walk), full groups' jobs fill the head of the queue
 * (a customer's thousand jobs): then, rather than step over them, the
 * claim finds the groups with room wherever their jobs are. grp walks the
 * distinct groups with ready jobs in tq_jobs_ready_group (one seek each),
 * roomy keeps those with room (k: how many more of it may run), heads
 * takes each one's first k jobs; the jobs without a group come from the
 * head (they have no index of their own, which would cost every job of
 * every queue). picked: the first room of these in the queue's order.
 * The cost is the head's rows, and, only when full groups fill the head,
 * a seek per group with ready jobs.
 */
#define CLAIM_GROUPS(order_by)                                                           \
    "WITH RECURSIVE lim AS MATERIALIZED " LIMITS                                         \
    " head AS MATERIALIZED (SELECT id, job_group, priority, run_at FROM tq_jobs"         \
    "    WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2 " order_by                \
    "    LIMIT coalesce((SELECT CASE WHEN per_group > 0 THEN room + 64"              \
    "                    ELSE room END FROM lim), 0)),"                                  \
    " fit AS MATERIALIZED (SELECT id, priority, run_at FROM (SELECT h.id, h.job_group,"  \
    "      h.priority, h.run_at, coalesce(b.n, 0) AS busy, row_number() OVER"           \
    "      (PARTITION BY h.job_group ORDER BY h.priority DESC, h.run_at, h.id) AS rn"    \
    "      FROM head h LEFT JOIN busy b ON b.job_group = h.job_group)"                   \
    "    WHERE job_group IS NULL OR (SELECT per_group FROM lim) = 0"                     \
    "       OR busy + rn <= (SELECT per_group FROM lim)),"                               \
    " walk AS MATERIALIZED (SELECT per_group > 0 AND (SELECT count(*) FROM fit) < room"  \
    "      AND (SELECT count(*) FROM head) = room + 64 AS w FROM lim),"              \
    GROUP_WALK("(SELECT w FROM walk)")                                                   \
    " roomy AS (SELECT g, (SELECT per_group FROM lim)"                                   \
    "      - coalesce((SELECT n FROM busy WHERE job_group = g), 0) AS k"                 \
    "    FROM grp WHERE g IS NOT NULL),"                                                 \
    " heads AS (SELECT j.id, j.job_group, j.priority, j.run_at, r.k"                     \
    "    FROM roomy r, tq_jobs j WHERE r.k > 0"                                          \
    "      AND j.id IN " FIRST_DUE("r.g", "(SELECT per_group FROM lim)") "),"            \
    " cand AS (SELECT id, priority, run_at FROM fit WHERE NOT (SELECT w FROM walk)"      \
    "    UNION ALL SELECT id, priority, run_at FROM (SELECT id, priority, run_at, k,"    \
    "      row_number() OVER (PARTITION BY job_group ORDER BY priority DESC, run_at, id)" \
    "      AS rn FROM heads) WHERE rn <= k"                                              \
    "    UNION ALL SELECT id, priority, run_at FROM head"                                \
    "      WHERE job_group IS NULL AND (SELECT w FROM walk)),"                           \
    " picked AS (SELECT id FROM cand " order_by                                          \
    "    LIMIT coalesce((SELECT room FROM lim), 0))"                                     \
    CLAIM_SET " WHERE id IN (SELECT id FROM picked)" CLAIM_RETURNING

/* The limited claim of a queue without a group limit (as the claimer knows
 * it; one that has one gets nothing), with CLAIM_LIMITED's parameters and
 * lim: the first room ready rows, as CLAIM takes them. */
#define CLAIM_ROOM(order_by)                                                             \
    "WITH lim AS MATERIALIZED " LIMITS                                                   \
    " picked AS (SELECT id FROM tq_jobs"                                                 \
    "    WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2 " order_by                \
    "    LIMIT coalesce((SELECT CASE WHEN per_group = 0 THEN room ELSE 0 END"            \
    "                    FROM lim), 0))"                                                 \
    CLAIM_SET " WHERE id IN (SELECT id FROM picked)" CLAIM_RETURNING

/*
 * The claim of a FIFO or unordered queue for a claimer that runs a group's
 * jobs one at a time, ?8 > 1 of them in a row (tq__claim.chain), with
 * CLAIM_LIMITED's parameters, lim and busy: whole chains of few groups
 * rather than a few jobs of every group, so that the other claimers find
 * groups of their own. slots: the head of the queue (its first room + 64
 * ready rows) in its order, each job without a group, and each group with
 * room where its first job stands; for a group, its first ?8 ready jobs
 * (FIRST_DUE). Only when those do not fill room and the head is full (a
 * group's backlog fills it) come the groups with room found elsewhere
 * (grp, as CLAIM_GROUPS walks them; walked: each one's first job), oldest
 * first. The slots are read in order until room + ?8 jobs are (the
 * nested loops keep their outer order, and a chain has at most ?8: every
 * one that starts within the first room is whole), and of those the
 * first room in slot and queue order are taken (a chain comes in id
 * order: a claim that ends within one takes its first jobs, not its
 * oldest ids). The LIMITs keep the ORDER BYs, which SQLite drops from a
 * subquery without one.
 */
#define CLAIM_CHAIN(order_by)                                                            \
    "WITH RECURSIVE lim AS MATERIALIZED " LIMITS                                         \
    " head AS MATERIALIZED (SELECT id, job_group, priority, run_at FROM tq_jobs"         \
    "    WHERE queue = ?1 AND state = 'ready' AND run_at <= ?2 " order_by                \
    "    LIMIT coalesce((SELECT room + 64 FROM lim), 0)),"                               \
    " slots AS MATERIALIZED (SELECT g, id, pos FROM (SELECT job_group AS g,"             \
    "      CASE WHEN job_group IS NULL THEN id END AS id, min(pos) AS pos FROM"          \
    "      (SELECT id, job_group, row_number() OVER"                                     \
    "        (ORDER BY priority DESC, run_at, id) AS pos FROM head) h"                   \
    "      WHERE job_group IS NULL OR " ROOMY("h.job_group")                             \
    "      GROUP BY coalesce(job_group, id))"                                            \
    "    ORDER BY pos LIMIT (SELECT room + 64 FROM lim)),"                             \
    GROUP_WALK("(SELECT count(*) FROM head) = (SELECT room + 64 FROM lim)")              \
    " walked AS (SELECT grp.g AS g, f.priority, f.run_at, f.id FROM grp, tq_jobs f"      \
    "    WHERE grp.g IS NOT NULL AND " ROOMY("grp.g")                                    \
    "      AND NOT EXISTS (SELECT 1 FROM slots WHERE slots.g = grp.g)"                   \
    "      AND f.id = " FIRST_DUE("grp.g", "1") "),"                                     \
    " cand AS (SELECT s.pos, j.id, j.priority, j.run_at FROM slots s, tq_jobs j"         \
    "    WHERE j.id IN (SELECT s.id WHERE s.g IS NULL"                                   \
    "      UNION ALL SELECT * FROM " FIRST_DUE("s.g", "?8") ")"                                    \
    "    UNION ALL SELECT (SELECT room + 64 FROM lim) + w.r, j.id, j.priority, j.run_at" \
    "    FROM (SELECT g, row_number() OVER (ORDER BY priority DESC, run_at, id) AS r"    \
    "      FROM walked ORDER BY r LIMIT (SELECT room FROM lim)) w, tq_jobs j"            \
    "    WHERE j.id IN " FIRST_DUE("w.g", "?8") "),"                                               \
    " picked AS (SELECT id FROM (SELECT * FROM cand"                                     \
    "      LIMIT coalesce((SELECT room FROM lim), 0) + ?8)"                              \
    "    ORDER BY pos, priority DESC, run_at, id"                                        \
    "    LIMIT coalesce((SELECT room FROM lim), 0))"                                     \
    CLAIM_SET " WHERE id IN (SELECT id FROM picked)" CLAIM_RETURNING
/* The ids of the first n ready jobs of group g due now (?2), in the
 * queue's order: a seek in tq_jobs_ready_group. */
#define FIRST_DUE(g, n)                                                                  \
    "(SELECT id FROM tq_jobs WHERE queue = ?1 AND state = 'ready' AND job_group = " g    \
    "  AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT " n ")"
/* grp: the distinct groups with ready jobs in name order, a seek each in
 * tq_jobs_ready_group, when the condition holds. */
#define GROUP_WALK(when)                                                                 \
    " grp(g) AS (SELECT (SELECT job_group FROM tq_jobs WHERE queue = ?1"                 \
    "      AND state = 'ready' AND job_group IS NOT NULL ORDER BY job_group LIMIT 1)"    \
    "    WHERE " when                                                                    \
    "    UNION ALL SELECT (SELECT job_group FROM tq_jobs WHERE queue = ?1"               \
    "      AND state = 'ready' AND job_group > grp.g ORDER BY job_group LIMIT 1)"        \
    "    FROM grp WHERE g IS NOT NULL),"
/* Whether group g has room (its running jobs, busy, are fewer than the
 * limit). */
#define ROOMY(g)                                                                         \
    "NOT EXISTS (SELECT 1 FROM busy b WHERE b.job_group = " g                            \
    "  AND b.n >= (SELECT per_group FROM lim))"

/* What a rescue does to a running row: back to ready, or dead when its
 * started run used the last attempt; a claim that never started is put
 * back as it was (no attempt was charged, last_error kept). ?1 is now. */
#define RESCUE(why)                                                                      \
    "UPDATE tq_jobs SET"                                                                 \
    "  state = CASE WHEN started_at IS NOT NULL AND " OUT_OF_ATTEMPTS("0")               \
    "          THEN 'dead' ELSE 'ready' END,"                                            \
    "  finished_at = CASE WHEN started_at IS NOT NULL AND " OUT_OF_ATTEMPTS("0")         \
    "                THEN ?1 END,"                                                       \
    "  last_error = CASE WHEN started_at IS NULL THEN last_error ELSE " why " END,"      \
    "  unknown_starts = unknown_starts + (started_at IS NULL),"                          \
    "  lease_until = NULL, progress = NULL, progress_text = NULL"

/* clang-format on */

/* clang-format off */

/* What holds a cancelled or waiting child (the row tq_jobs) from running:
 * a parent that is dead or cancelled, or, when it counts more parents not
 * done than exist, one that was deleted; no row when nothing does. */
#define BLOCKER                                                                          \
    "SELECT x.id, x.why FROM ("                                                          \
    " SELECT p.id AS id, 'parent job ' || p.id || ' is ' || p.state AS why, 0 AS o"      \
    "  FROM tq_deps e JOIN tq_jobs p ON p.id = e.parent"                                 \
    "  WHERE e.child = tq_jobs.id AND p.state IN ('dead', 'cancelled')"                  \
    " UNION ALL"                                                                         \
    " SELECT e.parent, 'parent job ' || e.parent || ' no longer exists', 1"              \
    "  FROM tq_deps e WHERE e.child = tq_jobs.id"                                        \
    "  AND NOT EXISTS (SELECT 1 FROM tq_jobs p WHERE p.id = e.parent)"                   \
    "  AND tq_jobs.waiting_for > (SELECT count(*) FROM tq_deps f"                        \
    "      JOIN tq_jobs q ON q.id = f.parent"                                            \
    "      WHERE f.child = tq_jobs.id AND q.state <> 'done')"                            \
    ") AS x ORDER BY x.o, x.id LIMIT 1"

/* clang-format on */

/* A queue's settings (read_queue). */
#define QUEUE_COLS                                                                       \
    "name, ord, lease_us, max_attempts, backoff_base_us, backoff_cap_us, keep_done,"     \
    " paused, max_running, max_running_per_group, rate_limit, rate_period_us, "          \
    "rate_burst, max_snoozes, results"

/* One prepared statement per entry; SQL lives here, one place each. */
enum stmt_id {
    S_BEGIN,
    S_COMMIT,
    S_ENQUEUED,
    S_BARRIER,
    S_ROLLBACK,
    S_CLAIM_FIFO,
    S_CLAIM_LIFO,
    S_CLAIM_ANY,
    S_CLAIM_LIMITED_FIFO,
    S_CLAIM_LIMITED_LIFO,
    S_CLAIM_LIMITED_ANY,
    S_CLAIM_CHAIN_FIFO,
    S_CLAIM_CHAIN_ANY,
    S_CLAIM_ROOM_FIFO,
    S_CLAIM_ROOM_LIFO,
    S_CLAIM_ROOM_ANY,
    S_RATE_TAKE,
    S_RATE_WAIT,
    S_DONE,
    S_DONE_DELETE,
    S_DONE_RESULT,
    S_FAIL,
    S_RELEASE,
    S_BEAT,
    S_SNOOZE,
    S_DISCARD,
    S_PROGRESS,
    S_RESCUE_EXPIRED,
    S_RESCUE_WORKER,
    S_ENQUEUE,
    S_ENQUEUE_KEY,
    S_FIND_KEY,
    S_ENQUEUE_UKEY,
    S_FIND_UKEY,
    S_REPLACE,
    S_EXPIRE_KEY,
    S_EXPIRE_UKEY,
    S_QUEUE_ENSURE,
    S_QUEUE_UPDATE,
    S_QUEUE_GET,
    S_QUEUE_LIST,
    S_PENDING,
    S_JOB_GET,
    S_JOB_LIST,
    S_JOB_LIST_READY,
    S_JOB_LIST_RUNNING,
    S_JOB_LIST_WAITING,
    S_JOB_FINISHED_AT,
    S_JOB_LIST_FINISHED,
    S_JOB_STATE,
    S_JOB_RESULT,
    S_RETRY_ONE,
    S_RETRY_DEAD,
    S_CANCEL,
    S_PRUNE,
    S_COUNTS,
    S_OLDEST_READY,
    S_DELAYED,
    S_ACTIVE,
    S_DONE_SINCE,
    S_LONGEST,
    S_DURATIONS,
    S_COUNT_READY,
    S_COUNT_RUNNING,
    S_COUNT_RUNNING_BY_WORKER,
    S_COUNT_WAITING,
    S_COUNT_FINISHED,
    S_FINISHED_SINCE,
    S_WORKER_GET,
    S_WORKER_PUT,
    S_WORKER_BEAT,
    S_WORKER_STOP,
    S_WORKER_LIST,
    S_WORKER_PRUNE,
    S_SCHEMA_VERSION,
    S_LIFO_INDEX,
    S_LIFO_INDEX_DROP,
    S_ANY_LIFO,
    S_DATA_VERSION,
    S_JOBS_SEQ,
    S_SCHEDULE_PUT,
    S_SCHEDULE_REMOVE,
    S_SCHEDULE_LIST,
    S_SCHEDULE_MOVE,
    S_SCHEDULE_BUSY,
    S_SCHEDULE_ENQUEUE,
    S_SCHEDULE_JOB,
    S_DEPS_ANY,
    S_DEPS_ADD,
    S_DEPS_RELEASE,
    S_DEPS_CANCEL,
    S_DEPS_RESTORE,
    S_DEPS_HOLD,
    S_DEPS_DROP,
    S_DEPS_DEAD_SINCE,
    S_DEPS_DEAD_PARENTS,
    S_DEPS_GC,
    S_JOB_PARENTS,
    S_COUNT
};

static const char *const sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    /* After an enqueue's COMMIT failed (enqueue_settle): how many of its
     * rows are there, and a write whose commit makes sure they never will
     * be. */
    [S_ENQUEUED] = "SELECT count(*) FROM tq_jobs WHERE id BETWEEN ?1 AND ?2"
                   " AND queue = ?3 AND created_at = ?4",
    [S_BARRIER] = "INSERT OR REPLACE INTO tq_meta (key, value)"
                  " VALUES ('commit_barrier', ?1)",
    [S_ROLLBACK] = "ROLLBACK",
    [S_CLAIM_FIFO] = CLAIM(" ORDER BY priority DESC, run_at, id"),
    [S_CLAIM_LIFO] = CLAIM(" ORDER BY priority DESC, id DESC"),
    [S_CLAIM_ANY] = CLAIM(""),
    [S_CLAIM_LIMITED_FIFO] = CLAIM_GROUPS(" ORDER BY priority DESC, run_at, id"),
    [S_CLAIM_LIMITED_LIFO] = CLAIM_LIMITED(" ORDER BY priority DESC, id DESC"),
    [S_CLAIM_LIMITED_ANY] = CLAIM_GROUPS(""),
    [S_CLAIM_CHAIN_FIFO] = CLAIM_CHAIN(" ORDER BY priority DESC, run_at, id"),
    [S_CLAIM_CHAIN_ANY] = CLAIM_CHAIN(""),
    [S_CLAIM_ROOM_FIFO] = CLAIM_ROOM(" ORDER BY priority DESC, run_at, id"),
    [S_CLAIM_ROOM_LIFO] = CLAIM_ROOM(" ORDER BY priority DESC, id DESC"),
    [S_CLAIM_ROOM_ANY] = CLAIM_ROOM(""),
    /* After a limited claim took ?3 jobs (> 0), in its transaction: the
     * rate's tokens less those, as of ?2 now. Not after a claim that took
     * none: a write would wake every idle worker (they watch the store's
     * changes), whose claims would wake it again. */
    [S_RATE_TAKE] = "UPDATE tq_queues SET rate_tokens = max(0.0, " RATE_TOKENS " - ?3),"
                    " rate_at = max(rate_at, ?2) WHERE name = ?1 AND rate_limit > 0",
    /* Then how long, from ?2, until the rate has a whole token (0: it has
     * one, or the queue has no rate limit). */
    [S_RATE_WAIT] = "SELECT CASE WHEN t >= 1 THEN 0"
                    " ELSE CAST((1 - t) / " RATE_REFILL " AS INTEGER) + 1 END"
                    " FROM (SELECT " RATE_TOKENS " AS t, rate_limit, rate_burst,"
                    " rate_period_us FROM tq_queues WHERE name = ?1 AND rate_limit > 0)",
    /* clang-format off */
    /* Acknowledgements: ?1 id, ?2 worker, ?3 claim, ?4 now, ?5 started_us,
     * ?6 delay (FAIL: backoff, BEAT: lease), ?7 error. */
    [S_DONE] =
        "UPDATE tq_jobs SET"
        "  state = 'done',"
        "  finished_at = ?4,"
        "  lease_until = NULL,"
        RECORD_START
        FENCE,
    [S_DONE_DELETE] = "DELETE FROM tq_jobs" FENCE,
    /* Done with a result, ?8. */
    [S_DONE_RESULT] =
        "UPDATE tq_jobs SET"
        "  state = 'done',"
        "  finished_at = ?4,"
        "  lease_until = NULL,"
        "  result = ?8,"
        RECORD_START
        FENCE,
    /* A failure of a claim that never started (ended unrun: its attempts
     * were used up) charges nothing, but counts like a rescue of one
     * (engine.h, STARTS). */
    [S_FAIL] =
        "UPDATE tq_jobs SET"
        "  state = CASE WHEN " OUT_OF_ATTEMPTS(STARTED) " THEN 'dead' ELSE 'ready' END,"
        "  finished_at = CASE WHEN " OUT_OF_ATTEMPTS(STARTED) " THEN ?4 END,"
        "  run_at = CASE WHEN " OUT_OF_ATTEMPTS(STARTED) " THEN run_at ELSE ?4 + ?6 END,"
        "  last_error = ?7,"
        "  lease_until = NULL, progress = NULL, progress_text = NULL,"
        "  attempts = attempts + " STARTED ","
        "  started_at = COALESCE(started_at, CASE WHEN ?5 > 0 THEN ?4 - ?5 END),"
        "  unknown_starts = CASE WHEN ?5 > 0 THEN 0"
        "                   WHEN started_at IS NULL THEN unknown_starts + 1"
        "                   ELSE unknown_starts END"
        FENCE,
    /* The run's attempt back, if the store charged it (a start it never
     * heard of charged nothing). */
    [S_RELEASE] =
        "UPDATE tq_jobs SET"
        "  state = 'ready',"
        "  attempts = max(0, attempts - (started_at IS NOT NULL)),"
        "  lease_until = NULL, progress = NULL, progress_text = NULL"
        FENCE,
    [S_BEAT] =
        "UPDATE tq_jobs SET"
        "  lease_until = ?4 + ?6,"
        RECORD_START
        FENCE,
    /* The handler's word (control.h). A snooze is a release to later that
     * counts: the run's attempt back if the store charged it, ready at now
     * + ?6, one more snooze (the worker keeps max_snoozes). */
    [S_SNOOZE] =
        "UPDATE tq_jobs SET"
        "  state = 'ready',"
        "  run_at = ?4 + ?6,"
        "  attempts = max(0, attempts - (started_at IS NOT NULL)),"
        "  snoozes = snoozes + 1,"
        "  unknown_starts = CASE WHEN ?5 > 0 THEN 0 ELSE unknown_starts END,"
        "  lease_until = NULL, progress = NULL, progress_text = NULL"
        FENCE,
    /* A discard ends the job dead, whatever attempts it has left; the run
     * counts as one. */
    [S_DISCARD] =
        "UPDATE tq_jobs SET"
        "  state = 'dead',"
        "  finished_at = ?4,"
        "  last_error = ?7,"
        "  lease_until = NULL,"
        RECORD_START
        FENCE,
    [S_PROGRESS] = "UPDATE tq_jobs SET progress = ?8, progress_text = ?7" FENCE,
    [S_RESCUE_EXPIRED] =
        RESCUE("'lease expired under worker ' || coalesce(worker, '?')")
        " WHERE state = 'running' AND lease_until < ?1",
    [S_RESCUE_WORKER] =
        RESCUE("'worker ' || worker || ' restarted while running it'")
        " WHERE state = 'running' AND worker = ?2 AND worker_since = ?3",
    /* clang-format on */
    [S_ENQUEUE] = "INSERT INTO tq_jobs (queue, payload, priority, run_at,"
                  " max_attempts, created_at, traceparent, job_group)"
                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?10, ?11)",
    /* Keyed: ?7 the key, ?8 unique_until (NULL: none), ?9 the scope of a
     * unique_key (migration 7). A conflict target names its index's
     * predicate word for word, and so does the look-up of the kept job. */
    [S_ENQUEUE_KEY] =
        "INSERT INTO tq_jobs (queue, payload, priority, run_at, max_attempts,"
        " created_at, dedup_key, unique_until, traceparent, job_group)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?10, ?11)"
        " ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING",
    [S_FIND_KEY] = "SELECT id FROM tq_jobs WHERE queue = ?1 AND dedup_key = ?2",
    [S_ENQUEUE_UKEY] =
        "INSERT INTO tq_jobs (queue, payload, priority, run_at, max_attempts,"
        " created_at, unique_key, unique_until, unique_scope, traceparent, job_group)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        " ON CONFLICT (queue, unique_key) WHERE " UNIQUE_HELD " DO NOTHING",
    [S_FIND_UKEY] = "SELECT id FROM tq_jobs WHERE queue = ?1 AND unique_key = ?2"
                    " AND " UNIQUE_HELD,
    /* On conflict, replace: the kept job takes the new payload, run time and
     * priority if it is ready (same transaction as the failed insert). */
    [S_REPLACE] = "UPDATE tq_jobs SET payload = ?2, run_at = ?3, priority = ?4"
                  " WHERE id = ?1 AND state = 'ready'",
    /* Before a keyed insert: the holder of ?2 whose unique_until (?3 now)
     * has passed lets the key go (migration 7), unless it is running (as
     * on PostgreSQL, where expiring it would lock a worker's row);
     * plain-SQL producers run the same UPDATE first, as the README shows. */
    [S_EXPIRE_KEY] =
        "UPDATE tq_jobs SET unique_key = dedup_key, unique_scope = 'expired',"
        " dedup_key = NULL WHERE queue = ?1 AND dedup_key = ?2"
        " AND dedup_key IS NOT NULL AND unique_until <= ?3 AND state <> 'running'",
    [S_EXPIRE_UKEY] = "UPDATE tq_jobs SET unique_scope = 'expired'"
                      " WHERE queue = ?1 AND unique_key = ?2 AND " UNIQUE_HELD
                      " AND unique_until <= ?3 AND state <> 'running'",
    [S_QUEUE_ENSURE] = "INSERT OR IGNORE INTO tq_queues (name) VALUES (?1)",
    [S_QUEUE_UPDATE] =
        "UPDATE tq_queues SET ord = coalesce(?2, ord),"
        " lease_us = coalesce(?3, lease_us),"
        " max_attempts = coalesce(?4, max_attempts),"
        " backoff_base_us = coalesce(?5, backoff_base_us),"
        " backoff_cap_us = coalesce(?6, backoff_cap_us),"
        " keep_done = coalesce(?7, keep_done), paused = coalesce(?8, paused),"
        " max_running = coalesce(?9, max_running),"
        " max_running_per_group = coalesce(?10, max_running_per_group),"
        " rate_limit = coalesce(?11, rate_limit),"
        " rate_period_us = coalesce(?12, rate_period_us),"
        " rate_burst = coalesce(?13, rate_burst),"
        " max_snoozes = coalesce(?15, max_snoozes),"
        " results = coalesce(?16, results),"
        /* A new rate starts full; a rate changed (or set again) keeps the
         * tokens it had, up to its new burst: setting it over and over
         * must not grant a burst each time. */
        " rate_tokens = CASE WHEN ?11 IS NULL THEN rate_tokens"
        "  WHEN rate_limit = 0 THEN ?13 ELSE min(?13, " RATE_TOKENS_AT(
            "?14") ") END,"
                   " rate_at = CASE WHEN ?11 IS NULL THEN rate_at ELSE max(rate_at, ?14) "
                   "END"
                   " WHERE name = ?1",
    [S_QUEUE_GET] = "SELECT " QUEUE_COLS " FROM tq_queues WHERE name = ?1",
    [S_QUEUE_LIST] = "SELECT " QUEUE_COLS " FROM tq_queues ORDER BY name",
    /* Waiting jobs through their dependencies, newest first (where waiting
     * ones are): an index of waiting rows cost every job's enqueue 1.2 %
     * more instructions and its worker 1.7 %, for draining workers alone.
     * CROSS JOIN keeps the dependencies outside: the planner read every
     * job. */
    [S_PENDING] =
        "SELECT EXISTS (SELECT 1 FROM tq_jobs WHERE queue = ?1 AND"
        " state = 'ready') OR EXISTS (SELECT 1 FROM tq_jobs WHERE"
        " queue = ?1 AND state = 'running') OR EXISTS (SELECT 1 FROM tq_deps d CROSS"
        " JOIN tq_jobs c ON c.id = d.child WHERE c.state = 'waiting'"
        " AND c.queue = ?1 ORDER BY d.child DESC)",
    [S_JOB_GET] = "SELECT " JOB_COLS " FROM tq_jobs WHERE id = ?1",
    [S_JOB_LIST] = "SELECT " JOB_COLS " FROM tq_jobs"
                   " WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2)"
                   " AND id < ?4 ORDER BY id DESC LIMIT ?3",
    /* One state's list along that state's index, so that a few jobs in it
     * among a million finished ones cost what they are: unfinished states
     * by id, newest first; waiting ones through the dependency rows, newest
     * child first (SQLite keeps no index of waiting jobs); finished states
     * newest finished first, the page after ?4 starting below its
     * finished_at ?5. */
    [S_JOB_LIST_READY] = "SELECT " JOB_COLS " FROM tq_jobs INDEXED BY tq_jobs_ready_fifo"
                         " WHERE state = 'ready' AND (?1 IS NULL OR queue = ?1)"
                         " AND id < ?4 ORDER BY id DESC LIMIT ?3",
    [S_JOB_LIST_RUNNING] = "SELECT " JOB_COLS " FROM tq_jobs INDEXED BY tq_jobs_running"
                           " WHERE state = 'running' AND (?1 IS NULL OR queue = ?1)"
                           " AND id < ?4 ORDER BY id DESC LIMIT ?3",
    [S_JOB_LIST_WAITING] = "SELECT " JOB_COLS " FROM tq_deps d INDEXED BY tq_deps_child"
                           " CROSS JOIN tq_jobs ON tq_jobs.id = d.child"
                           " WHERE state = 'waiting' AND (?1 IS NULL OR queue = ?1)"
                           " AND d.child < ?4 GROUP BY d.child ORDER BY d.child DESC"
                           " LIMIT ?3",
    [S_JOB_FINISHED_AT] = "SELECT finished_at FROM tq_jobs WHERE id = ?1 AND state = ?2"
                          " AND finished_at IS NOT NULL",
    [S_JOB_LIST_FINISHED] = "SELECT " JOB_COLS " FROM tq_jobs INDEXED BY tq_jobs_finished"
                            " WHERE state = ?2 AND finished_at IS NOT NULL"
                            " AND (?1 IS NULL OR queue = ?1) AND finished_at <= ?5"
                            " AND (finished_at < ?5 OR id < ?4)"
                            " ORDER BY finished_at DESC, id DESC LIMIT ?3",
    [S_JOB_STATE] = "SELECT state FROM tq_jobs WHERE id = ?1",
    [S_JOB_RESULT] = "SELECT state, result FROM tq_jobs WHERE id = ?1",
    /* A job retried by hand does not take a scoped key back (migration 7):
     * another job may hold it by now. */
    [S_RETRY_ONE] = "UPDATE tq_jobs SET attempts = 0, run_at = ?2, cancelled_by = NULL,"
                    " state = CASE WHEN waiting_for > 0 THEN 'waiting' ELSE 'ready' END,"
                    " finished_at = NULL, lease_until = NULL, unknown_starts = 0,"
                    " snoozes = 0, progress = NULL, progress_text = NULL,"
                    " unique_scope = CASE WHEN unique_key IS NOT NULL THEN 'expired' END"
                    " WHERE id = ?1 AND state IN ('dead', 'cancelled')",
    [S_RETRY_DEAD] = "UPDATE tq_jobs SET attempts = 0, run_at = ?2, cancelled_by = NULL,"
                     " state = CASE WHEN waiting_for > 0 THEN 'waiting' ELSE 'ready' END,"
                     " finished_at = NULL, lease_until = NULL, unknown_starts = 0,"
                     " snoozes = 0, progress = NULL, progress_text = NULL,"
                     " unique_scope = CASE WHEN unique_key IS NOT NULL THEN 'expired' END"
                     " WHERE state = 'dead' AND finished_at IS NOT NULL"
                     " AND (?1 IS NULL OR queue = ?1)",
    [S_CANCEL] = "UPDATE tq_jobs SET state = 'cancelled', finished_at = ?2,"
                 " lease_until = NULL"
                 " WHERE id = ?1 AND state IN ('ready', 'running', 'waiting')",
    [S_PRUNE] = "DELETE FROM tq_jobs WHERE id IN (SELECT id FROM tq_jobs"
                " WHERE state = ?1 AND finished_at IS NOT NULL AND finished_at < ?2"
                " LIMIT ?3)",
    [S_COUNTS] = "SELECT state, count(*) FROM tq_jobs WHERE (?1 IS NULL OR queue = ?1)"
                 " GROUP BY state",
    [S_OLDEST_READY] = "SELECT min(run_at) FROM tq_jobs WHERE state = 'ready'"
                       " AND run_at <= ?2 AND (?1 IS NULL OR queue = ?1)",
    [S_DELAYED] = "SELECT count(*), min(run_at) FROM tq_jobs WHERE state = 'ready'"
                  " AND run_at > ?2 AND (?1 IS NULL OR queue = ?1)",
    [S_ACTIVE] = "SELECT queue, sum(state = 'ready' AND run_at <= ?1),"
                 " sum(state = 'ready' AND run_at > ?1), sum(state = 'running'),"
                 " min(CASE WHEN state = 'ready' AND run_at > ?1 THEN run_at END)"
                 " FROM tq_jobs WHERE state IN ('ready', 'running')"
                 " GROUP BY queue ORDER BY queue",
    [S_DONE_SINCE] = "SELECT count(*) FROM tq_jobs WHERE state = 'done'"
                     " AND finished_at IS NOT NULL AND finished_at >= ?2"
                     " AND (?1 IS NULL OR queue = ?1)",
    [S_LONGEST] = "SELECT id, coalesce(worker, ''), started_at FROM tq_jobs"
                  " WHERE state = 'running' AND started_at IS NOT NULL"
                  " AND (?1 IS NULL OR queue = ?1) ORDER BY started_at LIMIT 5",
    [S_DURATIONS] = "SELECT finished_at - started_at FROM tq_jobs"
                    " WHERE state = 'done' AND finished_at IS NOT NULL"
                    " AND started_at IS NOT NULL AND (?1 IS NULL OR queue = ?1)"
                    " ORDER BY finished_at DESC LIMIT ?2",
    /* Monitoring (tq_count_jobs): each along its state's index. SQLite
     * has no index of waiting jobs; the dependency table names them. */
    [S_COUNT_READY] = "SELECT queue, count(*), sum(run_at > ?1),"
                      " coalesce(?1 - min(CASE WHEN run_at <= ?1 THEN run_at END), 0)"
                      " FROM tq_jobs WHERE state = 'ready' GROUP BY queue",
    [S_COUNT_RUNNING] = "SELECT queue, count(*) FROM tq_jobs WHERE state = 'running'"
                        " GROUP BY queue",
    [S_COUNT_RUNNING_BY_WORKER] = "SELECT coalesce(worker, ''), count(*) FROM tq_jobs"
                                  " WHERE state = 'running' GROUP BY 1",
    [S_COUNT_WAITING] = "SELECT queue, count(*) FROM tq_jobs"
                        " WHERE id IN (SELECT child FROM tq_deps) AND state = 'waiting'"
                        " GROUP BY queue",
    [S_COUNT_FINISHED] = "SELECT queue, count(*) FROM tq_jobs"
                         " WHERE state = ?1 AND finished_at IS NOT NULL GROUP BY queue",
    /* tq_finished_since, one state at a time, in the index's order. */
    [S_FINISHED_SINCE] =
        "SELECT id, queue, finished_at, coalesce(finished_at - started_at, -1)"
        " FROM tq_jobs WHERE state = ?1 AND finished_at IS NOT NULL"
        " AND finished_at >= ?2 AND (finished_at > ?2 OR id > ?3)"
        " AND finished_at <= ?4 ORDER BY finished_at, id LIMIT ?5",
    [S_WORKER_GET] = "SELECT heartbeat_at, lease_us, coalesce(stopped_at, 0), host, pid,"
                     " coalesce(host_id, ''), started_at, coalesce(reaper_pid, 0)"
                     " FROM tq_workers WHERE name = ?1",
    [S_WORKER_PUT] = "INSERT INTO tq_workers (name, host, pid, started_at, heartbeat_at,"
                     " stopped_at, lease_us, host_id, reaper_pid)"
                     " VALUES (?1, ?2, ?3, ?4, ?4, NULL, ?5, ?6, ?7)"
                     " ON CONFLICT (name) DO UPDATE SET host = excluded.host,"
                     " pid = excluded.pid, started_at = excluded.started_at,"
                     " heartbeat_at = excluded.heartbeat_at, stopped_at = NULL,"
                     " lease_us = excluded.lease_us, host_id = excluded.host_id,"
                     " reaper_pid = excluded.reaper_pid",
    /* Only the registration that is mine (engine.h). */
    [S_WORKER_BEAT] = "UPDATE tq_workers SET heartbeat_at = ?2, lease_us = ?7,"
                      " reaper_pid = ?8"
                      " WHERE name = ?1 AND pid = ?3 AND host = ?4"
                      " AND coalesce(host_id, '') = ?5 AND started_at = ?6",
    [S_WORKER_STOP] = "UPDATE tq_workers SET stopped_at = ?2, heartbeat_at = ?2"
                      " WHERE name = ?1 AND pid = ?3 AND host = ?4"
                      " AND coalesce(host_id, '') = ?5 AND started_at = ?6",
    [S_WORKER_LIST] = "SELECT name, host, pid, started_at, heartbeat_at,"
                      " coalesce(stopped_at, 0), lease_us, coalesce(host_id, ''),"
                      " coalesce(reaper_pid, 0)"
                      " FROM tq_workers ORDER BY name",
    /* Gone since its heartbeat's lease ran out, or since it stopped. */
    [S_WORKER_PRUNE] = "DELETE FROM tq_workers"
                       " WHERE coalesce(stopped_at, heartbeat_at + lease_us) < ?1",
    [S_SCHEMA_VERSION] = "SELECT value FROM tq_meta WHERE key = 'schema_version'",
    /* Prepared once, stepped before every LIFO claim: a no-op while the
     * index exists, and SQLite prepares it again (finding the index gone)
     * if the schema changed meanwhile. */
    [S_LIFO_INDEX] = "CREATE INDEX IF NOT EXISTS " READY_LIFO_INDEX,
    [S_LIFO_INDEX_DROP] = "DROP INDEX IF EXISTS tq_jobs_ready_lifo",
    [S_ANY_LIFO] = "SELECT EXISTS (SELECT 1 FROM tq_queues WHERE ord = 'lifo')",
    [S_DATA_VERSION] = "PRAGMA data_version",
    /* AUTOINCREMENT's high-water mark: it grows with every insert, from
     * tq or plain SQL, and never goes back (even when rows are deleted). */
    [S_JOBS_SEQ] =
        "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'tq_jobs'",
    /* Periodic jobs (migration 11). A schedule set again keeps its record
     * of the last slot and job. */
    [S_SCHEDULE_PUT] =
        "INSERT INTO tq_schedules (name, queue, spec, tz, payload, priority, "
        "overlap_skip,"
        " next_slot) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (name) DO UPDATE"
        " SET queue = excluded.queue, spec = excluded.spec, tz = excluded.tz,"
        " payload = excluded.payload, priority = excluded.priority,"
        " overlap_skip = excluded.overlap_skip,"
        " next_slot = max(excluded.next_slot, coalesce(last_slot + 1, 0))",
    [S_SCHEDULE_REMOVE] = "DELETE FROM tq_schedules WHERE name = ?1",
    [S_SCHEDULE_LIST] = "SELECT name, queue, spec, tz, payload, priority, overlap_skip,"
                        " next_slot, last_slot, last_job FROM tq_schedules ORDER BY name",
    /* ?1 name, ?2 the next slot it was read with, ?3 the one after, ?4 the
     * slot being taken: moves only if no one else moved it since. */
    [S_SCHEDULE_MOVE] = "UPDATE tq_schedules SET next_slot = ?3,"
                        " last_slot = CASE WHEN ?4 >= 0 THEN ?4 ELSE last_slot END"
                        " WHERE name = ?1 AND next_slot = ?2 AND spec = ?5 AND tz = ?6",
    [S_SCHEDULE_BUSY] = "SELECT EXISTS (SELECT 1 FROM tq_schedules s JOIN tq_jobs j"
                        " ON j.id = s.last_job WHERE s.name = ?1 AND s.overlap_skip"
                        " AND j.state IN ('ready', 'running'))",
    [S_SCHEDULE_ENQUEUE] =
        "INSERT INTO tq_jobs (queue, payload, priority, schedule, slot)"
        " SELECT queue, payload, priority, name, ?2 FROM tq_schedules WHERE name = ?1",
    [S_SCHEDULE_JOB] = "UPDATE tq_schedules SET last_job = ?2 WHERE name = ?1",
    /* Dependencies (engine.h, DEPENDENCIES; deps_settle). Whether the
     * store has any: every rule below is skipped while it has none. */
    [S_DEPS_ANY] = "SELECT EXISTS (SELECT 1 FROM tq_deps)",
    /* Its trigger (migration 13) counts the parent in the child. */
    [S_DEPS_ADD] = "INSERT INTO tq_deps (parent, child) VALUES (?1, ?2)",
    /* ?1 became done, at ?2: once per parent, as done is final. */
    [S_DEPS_RELEASE] =
        "UPDATE tq_jobs SET waiting_for = waiting_for - 1,"
        " state = CASE WHEN state = 'waiting' AND waiting_for = 1 THEN 'ready'"
        "         ELSE state END,"
        " run_at = CASE WHEN state = 'waiting' AND waiting_for = 1 THEN max(run_at, ?2)"
        "          ELSE run_at END"
        " WHERE id IN (SELECT child FROM tq_deps WHERE parent = ?1) AND waiting_for > 0",
    /* ?1, if dead or cancelled, cancels its waiting children at ?2. */
    [S_DEPS_CANCEL] =
        "UPDATE tq_jobs SET state = 'cancelled', cancelled_by = ?1, finished_at = ?2,"
        " last_error = 'parent job ' || ?1 || ' ended ' || p.state"
        " FROM (SELECT state FROM tq_jobs WHERE id = ?1"
        "       AND state IN ('dead', 'cancelled')) AS p"
        " WHERE tq_jobs.id IN (SELECT child FROM tq_deps WHERE parent = ?1)"
        " AND tq_jobs.state = 'waiting' RETURNING id",
    /* ?1, retried, brings back the children it cancelled, unless
     * something else holds one (BLOCKER): they stay cancelled by that. */
    [S_DEPS_RESTORE] =
        "UPDATE tq_jobs SET (state, cancelled_by, last_error, finished_at) = (SELECT"
        "  CASE WHEN b.id IS NOT NULL THEN 'cancelled'"
        "       WHEN tq_jobs.waiting_for > 0 THEN 'waiting' ELSE 'ready' END,"
        "  b.id, b.why, CASE WHEN b.id IS NOT NULL THEN tq_jobs.finished_at END"
        "  FROM (SELECT 1) LEFT JOIN (" BLOCKER ") AS b ON 1)"
        " WHERE id IN (SELECT child FROM tq_deps WHERE parent = ?1)"
        " AND state = 'cancelled' AND cancelled_by = ?1 RETURNING id, state",
    /* A waiting ?1 (retried by hand) that something holds is cancelled
     * again, at ?2, by that. */
    [S_DEPS_HOLD] = "UPDATE tq_jobs SET state = 'cancelled', finished_at = ?2,"
                    " (cancelled_by, last_error) = (" BLOCKER ")"
                    " WHERE id = ?1 AND state = 'waiting' AND EXISTS (" BLOCKER ")",
    /* A child deleted (done, in a queue that keeps none): its
     * dependencies go with it. */
    [S_DEPS_DROP] = "DELETE FROM tq_deps WHERE child = ?1",
    /* Parents a rescue at ?1 ended dead. */
    [S_DEPS_DEAD_SINCE] = "SELECT id FROM tq_jobs WHERE state = 'dead'"
                          " AND finished_at IS NOT NULL AND finished_at >= ?1"
                          " AND EXISTS (SELECT 1 FROM tq_deps WHERE parent = tq_jobs.id)",
    /* Parents S_RETRY_DEAD is about to retry (?1 its queue or NULL). */
    [S_DEPS_DEAD_PARENTS] =
        "SELECT id FROM tq_jobs WHERE state = 'dead'"
        " AND finished_at IS NOT NULL AND (?1 IS NULL OR queue = ?1)"
        " AND EXISTS (SELECT 1 FROM tq_deps WHERE parent = tq_jobs.id)",
    /* A dependency goes with its child. */
    [S_DEPS_GC] = "DELETE FROM tq_deps WHERE child NOT IN (SELECT id FROM tq_jobs)",
    [S_JOB_PARENTS] = "SELECT parent FROM tq_deps WHERE child = ?1 ORDER BY parent",
};

typedef struct conn {
    sqlite3 *h;
    tq *db;
    int busy_timeout_ms;
    int64_t busy_started; /* monotonic, when the current wait began */
    sqlite3_stmt *stmt[S_COUNT];
    dev_t dev; /* the store file opened (sqlite_same_store) */
    ino_t ino;
    /* Wake-ups (sqlite_listen): the inotify descriptor watching the -wal
     * file, what was last seen of other connections' commits and inserts,
     * and the next look when a write was not visible yet. */
    int notify_fd, notify_wd;
    int64_t seen_version, seen_seq;
    int64_t look_at; /* monotonic; 0: none due */
    int look_step;
} conn;

#define C(db) ((conn *)(db)->conn)

/* ---- errors and statements --------------------------------------------- */

/*
 * Why SQLite found the store read-only, in words an operator can act on:
 * which of the store's files this process may not write. A -shm or -wal
 * file left by a process that could not write the store keeps that mode
 * after the store's own is fixed, and SQLite does not say so.
 */
static void readonly_why(const char *path, char *buf, size_t len)
{
    static const char *const suffix[] = {"", "-wal", "-shm"};
    char f[4200];
    buf[0] = '\0';
    for (size_t i = 0; i < 3 && path && *path; i++) {
        snprintf(f, sizeof f, "%s%s", path, suffix[i]);
        if (access(f, F_OK) == 0 && access(f, W_OK) != 0) {
            snprintf(buf, len,
                     i ? ": '%s' is not writable by this user (left by a process that "
                         "could not write the store? fix its mode, or remove it while "
                         "no process has the store open)"
                       : ": '%s' is not writable by this user",
                     f);
            return;
        }
    }
}

static int fail_rc(tq *db, int src, const char *what)
{
    conn *c = C(db);
    const char *msg = c && c->h ? sqlite3_errmsg(c->h) : sqlite3_errstr(src);
    int prim = src & 0xff;
    if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED)
        return tq__seterr(db, TQ_EBUSY, "%s: the store stayed locked for %d ms (%s)",
                          what, c ? c->busy_timeout_ms : 0, msg);
    if (prim == SQLITE_NOMEM)
        return tq__seterr(db, TQ_ENOMEM, "%s: out of memory", what);
    if (prim == SQLITE_TOOBIG)
        return tq__seterr(db, TQ_ETOOBIG, "%s: %s", what, msg);
    /* SQLite says SQLITE_FULL for a full database or journal file, and an
     * I/O error for other writes that found no room (the shared memory). */
    if (prim == SQLITE_FULL ||
        (prim == SQLITE_IOERR && c && c->h && sqlite3_system_errno(c->h) == ENOSPC))
        return tq__seterr(db, TQ_EFULL, "%s: disk full (%s)", what, msg);
    if (strstr(msg, "no such table") || strstr(msg, "no such column"))
        return tq__seterr(db, TQ_ESCHEMA,
                          "%s: the store has no tq schema (%s): run tq init", what, msg);
    if (prim == SQLITE_CONSTRAINT)
        return tq__seterr(db, TQ_EINVAL, "%s: rejected by the store (%s)", what, msg);
    if (prim == SQLITE_READONLY && c && c->h) {
        char why[4600];
        readonly_why(sqlite3_db_filename(c->h, "main"), why, sizeof why);
        return tq__seterr(db, TQ_EDB, "%s: %s%s", what, msg, why);
    }
    return tq__seterr(db, TQ_EDB, "%s: %s", what, msg);
}

/* The prepared statement for id, reset and with no bindings. */
static sqlite3_stmt *stmt(tq *db, enum stmt_id id, int *rc)
{
    conn *c = C(db);
    if (!c->stmt[id]) {
        int src = sqlite3_prepare_v3(c->h, sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                     &c->stmt[id], NULL);
        if (src != SQLITE_OK) {
            *rc = fail_rc(db, src, "preparing a statement");
            return NULL;
        }
    }
    *rc = 0;
    return c->stmt[id];
}

static void done_with(sqlite3_stmt *s)
{
    if (s) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
}

/* Runs a statement that returns no rows. */
static int run(tq *db, sqlite3_stmt *s, const char *what)
{
    int src = sqlite3_step(s);
    int rc = src == SQLITE_DONE || src == SQLITE_ROW ? 0 : fail_rc(db, src, what);
    done_with(s);
    return rc;
}

static int exec_id(tq *db, enum stmt_id id, const char *what)
{
    int rc;
    sqlite3_stmt *s = stmt(db, id, &rc);
    return s ? run(db, s, what) : rc;
}

static int begin(tq *db)
{
    return exec_id(db, S_BEGIN, "starting a transaction");
}

static int commit(tq *db)
{
    return exec_id(db, S_COMMIT, "committing");
}

static void rollback(tq *db)
{
    if (!sqlite3_get_autocommit(C(db)->h)) {
        char keep[sizeof db->errmsg];
        memcpy(keep, db->errmsg, sizeof keep); /* keep the first error */
        exec_id(db, S_ROLLBACK, "rolling back");
        memcpy(db->errmsg, keep, sizeof keep);
    }
}

/* Binds text, or NULL when s is NULL. */
static void bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, i);
}

static char *col_strdup(sqlite3_stmt *s, int i)
{
    if (sqlite3_column_type(s, i) == SQLITE_NULL)
        return NULL;
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? tq__strdup((const char *)t) : NULL;
}

/* ---- busy handling ------------------------------------------------------ */

/*
 * Sleeps between attempts to take the write lock: 500us doubling to 16ms,
 * with jitter so that many waiting processes do not wake in step. Gives up
 * after busy_timeout_ms. Every call is one "busy retry" in tq bench.
 *
 * Why so long: a durable commit holds the lock ~0.3ms here, so with W
 * waiters the expected wait is about W * 0.3ms. Short sleeps (50us to 2ms
 * was measured) make the waiters steal CPU from the lock holder on a small
 * machine: 8 workers fell to 0.6x the plain reference (bench/workers.sh);
 * with these sleeps they reach 1.3x. Measure again before changing them.
 */
static int busy_handler(void *arg, int count)
{
    conn *c = arg;
    int64_t now = tq__mono_us();
    if (count == 0)
        c->busy_started = now;
    else if (now - c->busy_started >= (int64_t)c->busy_timeout_ms * 1000)
        return 0;
    c->db->busy_retries++;
    int64_t us = 500LL << (count < 6 ? count : 6);
    if (us > 16000)
        us = 16000;
    us = us / 2 + (int64_t)(tq__random() * (double)(us / 2));
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
    return 1;
}

/* ---- open, close, init ------------------------------------------------- */

static int sqlite_schema_version(tq *db, int *version)
{
    int rc;
    *version = 0;
    sqlite3_stmt *s = stmt(db, S_SCHEMA_VERSION, &rc);
    if (!s) /* no tq_meta table */
        return rc == TQ_ESCHEMA ? 0 : rc;
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        *version = sqlite3_column_int(s, 0);
    else if (src != SQLITE_DONE)
        rc = fail_rc(db, src, "reading the schema version");
    done_with(s);
    return rc;
}

static void sqlite_close(tq *db)
{
    conn *c = C(db);
    if (!c)
        return;
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(c->stmt[i]);
    sqlite3_close(c->h);
    if (c->notify_fd >= 0)
        close(c->notify_fd);
    free(c);
    db->conn = NULL;
}

/* A store path whose directory is missing: "directory 'D' does not
 * exist" into buf and 1 (tq init would not help: it creates the file, not
 * its directory); else 0. */
static int missing_dir(const char *path, char *buf, size_t len)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path || (size_t)(slash - path) >= sizeof dir)
        return 0;
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    struct stat st;
    if (stat(dir, &st) == 0 || errno != ENOENT)
        return 0;
    snprintf(buf, len, "directory '%s' does not exist", dir);
    return 1;
}

/* Creates the file with mode 0600 so that the store, and the -wal and -shm
 * files SQLite derives from its mode, are private to their owner. */
static int create_private(tq *db, const char *path)
{
    char why[4200];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == EEXIST)
        return 0;
    if (errno == ENOENT && missing_dir(path, why, sizeof why))
        return tq__seterr(db, TQ_ECONN, "cannot create the store '%s': %s", path, why);
    return tq__seterr(db, TQ_ECONN, "cannot create the store '%s': %s", path,
                      strerror(errno));
}

static int sqlite_open(tq *db, const tq__url *url, int create)
{
    int rc;
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    c->db = db;
    c->busy_timeout_ms = url->busy_timeout_ms;
    c->notify_fd = c->notify_wd = -1;
    db->conn = c;

    if (create && (rc = create_private(db, url->path)))
        goto fail;
    int src = sqlite3_open_v2(url->path, &c->h,
                              SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        struct stat st;
        char why[4200];
        if (missing_dir(url->path, why, sizeof why))
            rc = tq__seterr(db, TQ_ECONN, "no store at '%s': %s", url->path, why);
        else if (stat(url->path, &st) != 0)
            rc = tq__seterr(db, TQ_ECONN, "no store at '%s' (%s): create it with tq init",
                            url->path, strerror(errno));
        else
            rc = tq__seterr(db, TQ_ECONN, "cannot open the store '%s': %s", url->path,
                            c->h ? sqlite3_errmsg(c->h) : sqlite3_errstr(src));
        goto fail;
    }
    sqlite3_extended_result_codes(c->h, 1);
    sqlite3_busy_handler(c->h, busy_handler, c);
    struct stat st;
    if (stat(url->path, &st) == 0) {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
    }
    const char *pragmas = url->sync_normal
                              ? "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF;"
                              : "PRAGMA synchronous = FULL; PRAGMA foreign_keys = OFF;";
    src = sqlite3_exec(c->h, pragmas, NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        rc = fail_rc(db, src, "configuring the connection");
        goto fail;
    }
    return 0;
fail:
    sqlite_close(db);
    return rc;
}

/* The LIFO index exists exactly while some queue is LIFO: the FIFO and
 * unordered claims never read it, and it would cost them an index entry
 * written at every enqueue and removed at every claim. A LIFO queue made
 * by plain SQL gets it at its first claim (sqlite_exchange). */
static int sync_lifo_index(tq *db)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_ANY_LIFO, &rc);
    if (!s)
        return rc;
    int src = sqlite3_step(s), any = src == SQLITE_ROW && sqlite3_column_int(s, 0);
    done_with(s);
    if (src != SQLITE_ROW)
        return fail_rc(db, src, "looking for LIFO queues");
    return exec_id(db, any ? S_LIFO_INDEX : S_LIFO_INDEX_DROP, "keeping the LIFO index");
}

static int sqlite_init(tq *db, const tq_grant *grants, size_t n, int *found)
{
    conn *c = C(db);
    char *err = NULL;
    int rc, version = 0;

    if (n)
        return tq__seterr(db, TQ_ENOTSUP,
                          "cannot grant to '%s': SQLite has no roles (who may write the "
                          "file may do everything: use its permissions)",
                          grants[0].role);
    /* SQLite opens a file it may not write read-only, without a word; an
     * up-to-date schema then needs no write to find it ready. */
    if (sqlite3_db_readonly(c->h, "main") == 1) {
        char why[4600];
        const char *path = sqlite3_db_filename(c->h, "main");
        readonly_why(path, why, sizeof why);
        return tq__seterr(db, TQ_ECONN, "the store '%s' is read-only%s", path,
                          why[0] ? why : " for this user");
    }

    /* WAL is a property of the file; switching needs no other connection
     * to be writing, and is a no-op when it is already on. */
    int src = sqlite3_exec(c->h, "PRAGMA journal_mode = WAL", NULL, NULL, &err);
    sqlite3_free(err);
    if (src != SQLITE_OK)
        return fail_rc(db, src, "switching to WAL");
    if ((rc = begin(db)))
        return rc;
    sqlite3_stmt *s = NULL;
    src = sqlite3_prepare_v2(c->h, sql[S_SCHEMA_VERSION], -1, &s, NULL);
    if (src == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            version = sqlite3_column_int(s, 0);
        sqlite3_finalize(s);
    } /* else: no tq_meta yet, version 0 */
    if (version > SCHEMA_VERSION) {
        *found = version;
        rc = TQ_ESCHEMA;
        goto fail;
    }
    for (int v = version; v < SCHEMA_VERSION; v++) {
        src = sqlite3_exec(c->h, migrations[v], NULL, NULL, NULL);
        if (src != SQLITE_OK) {
            rc = fail_rc(db, src, "creating the schema");
            goto fail;
        }
    }
    if (version < SCHEMA_VERSION) {
        sqlite3_stmt *put = NULL;
        src = sqlite3_prepare_v2(c->h,
                                 "INSERT OR REPLACE INTO tq_meta (key, value)"
                                 " VALUES ('schema_version', ?1)",
                                 -1, &put, NULL);
        if (src == SQLITE_OK) {
            sqlite3_bind_int(put, 1, SCHEMA_VERSION);
            src = sqlite3_step(put);
        }
        sqlite3_finalize(put);
        if (src != SQLITE_DONE) {
            rc = fail_rc(db, src, "recording the schema version");
            goto fail;
        }
    }
    /* Statements prepared against the old schema are stale. */
    for (int i = 0; i < S_COUNT; i++) {
        sqlite3_finalize(c->stmt[i]);
        c->stmt[i] = NULL;
    }
    if ((rc = sync_lifo_index(db)))
        goto fail;
    return commit(db);
fail:
    rollback(db);
    return rc;
}

/* v with room for element n (of size bytes; *cap allocated), grown by
 * doubling from 8: NULL with TQ_ENOMEM in *rc, v left as it was. */
static void *grow(tq *db, void *v, size_t n, size_t *cap, size_t size, int *rc)
{
    if (n < *cap)
        return v;
    size_t want = *cap ? *cap * 2 : 8;
    void *nv = realloc(v, want * size);
    if (!nv) {
        *rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        return NULL;
    }
    *cap = want;
    return nv;
}

/* ---- queues ------------------------------------------------------------ */

static void read_queue(sqlite3_stmt *s, tq_queue_info *q)
{
    tq_order order = TQ_FIFO;
    tq__queue_defaults(q, (const char *)sqlite3_column_text(s, 0));
    tq_order_parse(&order, (const char *)sqlite3_column_text(s, 1));
    q->order = order;
    q->lease_us = sqlite3_column_int64(s, 2);
    q->max_attempts = sqlite3_column_int(s, 3);
    q->backoff_base_us = sqlite3_column_int64(s, 4);
    q->backoff_cap_us = sqlite3_column_int64(s, 5);
    q->keep_done = sqlite3_column_int(s, 6);
    q->paused = sqlite3_column_int(s, 7);
    q->max_running = sqlite3_column_int(s, 8);
    q->max_running_per_group = sqlite3_column_int(s, 9);
    q->rate_limit = sqlite3_column_int64(s, 10);
    q->rate_period_us = sqlite3_column_int64(s, 11);
    q->rate_burst = q->rate_limit ? sqlite3_column_int64(s, 12) : 0;
    q->max_snoozes = sqlite3_column_int(s, 13);
    q->results = sqlite3_column_int(s, 14);
}

static int sqlite_queue_set(tq *db, const char *name, const tq_queue_opts *o)
{
    int rc;
    sqlite3_stmt *s;
    if ((rc = begin(db)))
        return rc;
    if (!(s = stmt(db, S_QUEUE_ENSURE, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if ((rc = run(db, s, "creating the queue")))
        goto fail;
    if (!(s = stmt(db, S_QUEUE_UPDATE, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (o->set & TQ_SET_ORDER)
        sqlite3_bind_text(s, 2, tq_order_name(o->order), -1, SQLITE_STATIC);
    if (o->set & TQ_SET_LEASE)
        sqlite3_bind_int64(s, 3, o->lease_us);
    if (o->set & TQ_SET_MAX_ATTEMPTS)
        sqlite3_bind_int(s, 4, o->max_attempts);
    if (o->set & TQ_SET_BACKOFF) {
        sqlite3_bind_int64(s, 5, o->backoff_base_us);
        sqlite3_bind_int64(s, 6, o->backoff_cap_us);
    }
    if (o->set & TQ_SET_KEEP_DONE)
        sqlite3_bind_int(s, 7, !!o->keep_done);
    if (o->set & TQ_SET_PAUSED)
        sqlite3_bind_int(s, 8, !!o->paused);
    if (o->set & TQ_SET_MAX_RUNNING)
        sqlite3_bind_int(s, 9, o->max_running);
    if (o->set & TQ_SET_MAX_RUNNING_PER_GROUP)
        sqlite3_bind_int(s, 10, o->max_running_per_group);
    if (o->set & TQ_SET_RATE) { /* the bucket: S_QUEUE_UPDATE says */
        const int on = o->rate_limit > 0;
        sqlite3_bind_int64(s, 11, o->rate_limit);
        sqlite3_bind_int64(s, 12, on ? o->rate_period_us : 0);
        sqlite3_bind_int64(s, 13,
                           on ? tq__rate_burst(o->rate_limit, o->rate_period_us) : 1);
        sqlite3_bind_int64(s, 14, tq__now_us());
    }
    if (o->set & TQ_SET_MAX_SNOOZES)
        sqlite3_bind_int(s, 15, o->max_snoozes);
    if (o->set & TQ_SET_RESULTS)
        sqlite3_bind_int(s, 16, !!o->results);
    if ((rc = run(db, s, "changing the queue")))
        goto fail;
    if ((o->set & TQ_SET_ORDER) && (rc = sync_lifo_index(db)))
        goto fail;
    return commit(db);
fail:
    rollback(db);
    return rc;
}

static int sqlite_queue_get(tq *db, const char *name, tq_queue_info *out)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_QUEUE_GET, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        read_queue(s, out);
    else if (src == SQLITE_DONE)
        rc = tq__seterr(db, TQ_ENOTFOUND, "no queue named '%s'", name);
    else
        rc = fail_rc(db, src, "reading the queue");
    done_with(s);
    return rc;
}

static int sqlite_queue_list(tq *db, tq_queue_info **out, size_t *out_n)
{
    int rc, src;
    size_t n = 0, cap = 0;
    tq_queue_info *v = NULL;
    sqlite3_stmt *s = stmt(db, S_QUEUE_LIST, &rc);
    if (!s)
        return rc;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_queue_info *nv = grow(db, v, n, &cap, sizeof *v, &rc);
        if (!nv)
            goto fail;
        v = nv;
        read_queue(s, &v[n++]);
    }
    if (src != SQLITE_DONE) {
        rc = fail_rc(db, src, "listing queues");
        goto fail;
    }
    done_with(s);
    *out = v;
    *out_n = n;
    return 0;
fail:
    done_with(s);
    free(v);
    return rc;
}

/* ---- enqueue ----------------------------------------------------------- */

/* What every enqueue statement takes: ?1 queue, ?2 payload, ?3 priority,
 * ?4 run_at, ?5 max_attempts (NULL: the queue's), ?6 created_at, ?10 the
 * trace context and ?11 the group. */
static void bind_job(sqlite3_stmt *s, const char *queue, const tq_payload *item,
                     const tq_enqueue_opts *o, int64_t now, int64_t run_at)
{
    sqlite3_bind_text(s, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(s, 2, item->data ? item->data : "", item->len, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, o->priority);
    sqlite3_bind_int64(s, 4, run_at);
    if (o->max_attempts > 0)
        sqlite3_bind_int(s, 5, o->max_attempts);
    else
        sqlite3_bind_null(s, 5);
    sqlite3_bind_int64(s, 6, now);
    bind_text(s, 10, o->traceparent);
    bind_text(s, 11, o->group);
}

/* The keyed half of an enqueue, in its transaction: the insert, or the
 * kept job's id in ids[0] and *dup 1, or 2 when it took the new payload
 * (TQ_ON_CONFLICT_REPLACE). A kept job that cannot be found (deleted
 * meanwhile) leaves ids[0] 0: the layer above tries again. */
static int enqueue_keyed(tq *db, const char *queue, const tq_payload *item,
                         const tq_enqueue_opts *o, int64_t now, int64_t run_at,
                         int64_t *ids, int *dup)
{
    int rc;
    sqlite3 *h = C(db)->h;
    const int scoped = o->unique != TQ_UNIQUE_STORED;
    sqlite3_stmt *s = stmt(db, scoped ? S_EXPIRE_UKEY : S_EXPIRE_KEY, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, o->key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, now);
    if ((rc = run(db, s, "freeing an expired key")))
        return rc;
    if (!(s = stmt(db, scoped ? S_ENQUEUE_UKEY : S_ENQUEUE_KEY, &rc)))
        return rc;
    bind_job(s, queue, item, o, now, run_at);
    sqlite3_bind_text(s, 7, o->key, -1, SQLITE_STATIC);
    if (o->unique_for_us > 0)
        sqlite3_bind_int64(s, 8, now + o->unique_for_us);
    if (scoped)
        sqlite3_bind_text(s, 9, tq_unique_name(o->unique), -1, SQLITE_STATIC);
    if ((rc = run(db, s, "enqueueing")))
        return rc;
    if (sqlite3_changes(h)) {
        ids[0] = sqlite3_last_insert_rowid(h);
        return 0;
    }
    /* The key is held: report the kept job (IGNORE_DUP_KEY), or replace. */
    if (!(s = stmt(db, scoped ? S_FIND_UKEY : S_FIND_KEY, &rc)))
        return rc;
    sqlite3_bind_text(s, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, o->key, -1, SQLITE_STATIC);
    int src = sqlite3_step(s);
    ids[0] = src == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    done_with(s);
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        return fail_rc(db, src, "finding the kept job");
    *dup = 1;
    if (!ids[0] || o->on_conflict != TQ_ON_CONFLICT_REPLACE)
        return 0;
    if (!(s = stmt(db, S_REPLACE, &rc)))
        return rc;
    sqlite3_bind_int64(s, 1, ids[0]);
    sqlite3_bind_blob64(s, 2, item->data ? item->data : "", item->len, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, run_at);
    sqlite3_bind_int(s, 4, o->priority);
    if ((rc = run(db, s, "replacing the kept job")))
        return rc;
    if (sqlite3_changes(h))
        *dup = 2;
    return 0;
}

static int state_of(tq *db, int64_t id, int *state);

/* The parents of a new job (o->after) in its transaction: all must exist;
 * the trigger of tq_deps (migration 13) does the rest. */
static int add_parents(tq *db, int64_t child, const tq_enqueue_opts *o, int checked)
{
    int rc, state;
    for (size_t i = 0; i < o->nafter && !checked; i++) {
        if ((rc = state_of(db, o->after[i], &state)))
            return rc;
        if (state < 0)
            return tq__seterr(db, TQ_ENOTFOUND, "parent job %lld does not exist",
                              (long long)o->after[i]);
    }
    sqlite3_stmt *s = stmt(db, S_DEPS_ADD, &rc);
    if (!s)
        return rc;
    for (size_t i = 0; i < o->nafter; i++) {
        sqlite3_bind_int64(s, 1, o->after[i]);
        sqlite3_bind_int64(s, 2, child);
        int src = sqlite3_step(s);
        sqlite3_reset(s);
        if (src != SQLITE_DONE) {
            rc = fail_rc(db, src, "adding a parent");
            break;
        }
    }
    done_with(s);
    return rc;
}

#define SETTLE_TRIES 3

/*
 * An enqueue's COMMIT that failed may still have stored its jobs: a WAL
 * commit writes its frames, commit frame last, then syncs them, and a
 * failed sync leaves a whole transaction in the WAL file that no
 * connection sees (the WAL index never counted it) but that a later
 * recovery of the WAL, once every connection has closed, replays. The next
 * transaction to commit writes over those frames and breaks their checksum
 * chain, after which they are gone for good. So a failed COMMIT of n jobs
 * (ids[0] to ids[n-1], contiguous: one writer) made at created is settled
 * by one more write transaction, holding the write lock, so that no one
 * commits or recovers meanwhile: if the jobs are visible they are stored
 * (0); if not, a small write is committed, and once that commit succeeds
 * they never will be: the COMMIT's error stands (fail). When that write
 * cannot commit either (SETTLE_TRIES times), the jobs may or may not be
 * stored: TQ_EUNKNOWN, unless the first failure was a write that found no
 * room or failed (the commit frame, written last, then never became whole).
 * n 0: a keyed replace, which wrote no row of its own to look for: once the
 * small write commits, it did not happen either.
 */
static int enqueue_settle(tq *db, int fail, const char *queue, const int64_t *ids,
                          size_t n, int64_t created)
{
    const int ext = sqlite3_extended_errcode(C(db)->h);
    const int written = ext != SQLITE_FULL && ext != SQLITE_IOERR_WRITE;
    char first[sizeof db->errmsg];
    memcpy(first, db->errmsg, sizeof first);
    /* A few tries: a write that fails now and then may pass the next time. */
    for (int tries = 0; tries < SETTLE_TRIES; tries++) {
        rollback(db);
        int rc = begin(db);
        int64_t found = n ? -1 : 0; /* a replace: no rows of its own */
        sqlite3_stmt *s;
        if (!rc && n && (s = stmt(db, S_ENQUEUED, &rc))) {
            sqlite3_bind_int64(s, 1, ids[0]);
            sqlite3_bind_int64(s, 2, ids[n - 1]);
            sqlite3_bind_text(s, 3, queue, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 4, created);
            int src = sqlite3_step(s);
            if (src == SQLITE_ROW)
                found = sqlite3_column_int64(s, 0);
            else
                rc = fail_rc(db, src, "looking for the jobs");
            done_with(s);
        }
        if (n && found == (int64_t)n) { /* the commit went through after all */
            rollback(db);
            tq__clearerr(db);
            return 0;
        }
        if (found == 0 && (s = stmt(db, S_BARRIER, &rc))) {
            sqlite3_bind_int64(s, 1, tq__now_us());
            if (!(rc = run(db, s, "writing after the failed commit")) &&
                !(rc = commit(db))) {
                tq__seterr(db, fail, "%s; nothing was stored", first);
                return fail;
            }
        }
    }
    rollback(db);
    if (!written) {
        tq__seterr(db, fail, "%s", first);
        return fail;
    }
    if (!n)
        return tq__seterr(db, TQ_EUNKNOWN,
                          "%s; the kept job may or may not have taken the new payload",
                          first);
    return tq__seterr(db, TQ_EUNKNOWN,
                      "%s; the jobs may or may not be stored (ids %lld to %lld): "
                      "enqueue with a key to retry safely",
                      first, (long long)ids[0], (long long)ids[n - 1]);
}

static int sqlite_enqueue(tq *db, const char *queue, const tq_payload *items, size_t n,
                          const tq_enqueue_opts *o, int64_t *ids, int *dup)
{
    int rc;
    sqlite3 *h = C(db)->h;
    sqlite3_stmt *s;

    *dup = 0;
    if ((rc = begin(db)))
        return rc;
    const int64_t now = tq__now_us();
    const int64_t run_at = o->run_at ? o->run_at : now + o->delay_us;
    if (o->key && n == 1) {
        if ((rc = enqueue_keyed(db, queue, &items[0], o, now, run_at, ids, dup)))
            goto fail;
        /* A duplicate kept wrote nothing; a replace wrote no row of its own. */
        if ((rc = commit(db)) && *dup != 1)
            rc = enqueue_settle(db, rc, queue, ids, *dup ? 0 : 1, now);
        return rc;
    }
    if (!(s = stmt(db, S_ENQUEUE, &rc)))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        bind_job(s, queue, &items[i], o, now, run_at);
        int src = sqlite3_step(s);
        sqlite3_reset(s);
        if (src != SQLITE_DONE) {
            rc = fail_rc(db, src, "enqueueing");
            done_with(s);
            goto fail;
        }
        ids[i] = sqlite3_last_insert_rowid(h);
    }
    done_with(s);
    for (size_t i = 0; i < n && o->nafter; i++)
        if ((rc = add_parents(db, ids[i], o, i > 0)))
            goto fail;
    if ((rc = commit(db)) && n)
        rc = enqueue_settle(db, rc, queue, ids, n, now);
    return rc;
fail:
    rollback(db);
    return rc;
}

/* ---- jobs -------------------------------------------------------------- */

static char *col_strdup_or(sqlite3_stmt *s, int i, const char *known)
{
    return i < 0 ? tq__strdup(known) : col_strdup(s, i);
}

/* Reads a job row (where c says; a claimed one on queue by worker) into j
 * (zeroed by the caller). */
static int read_job(tq *db, sqlite3_stmt *s, const tq__job_cols *c, const char *queue,
                    const char *worker, tq_job *j)
{
    j->id = sqlite3_column_int64(s, c->id);
    j->queue = col_strdup_or(s, c->queue, queue);
    const void *p = sqlite3_column_blob(s, c->payload);
    j->payload_len = (size_t)sqlite3_column_bytes(s, c->payload);
    j->payload = tq__memdup(p, j->payload_len, 1);
    if (c->state < 0) {
        j->state = TQ_RUNNING;
    } else {
        tq_state st = TQ_READY;
        tq_state_parse(&st, (const char *)sqlite3_column_text(s, c->state));
        j->state = st;
    }
    j->priority = sqlite3_column_int(s, c->priority);
    j->attempts = sqlite3_column_int(s, c->attempts);
    j->max_attempts = sqlite3_column_int(s, c->max_attempts);
    j->key = col_strdup(s, c->key);
    j->worker = col_strdup_or(s, c->worker, worker);
    j->last_error = col_strdup(s, c->last_error);
    j->created_at = sqlite3_column_int64(s, c->created_at);
    j->run_at = sqlite3_column_int64(s, c->run_at);
    j->started_at = sqlite3_column_int64(s, c->started_at);
    j->finished_at = c->finished_at < 0 ? 0 : sqlite3_column_int64(s, c->finished_at);
    j->lease_until = sqlite3_column_int64(s, c->lease_until);
    j->claim = sqlite3_column_int64(s, c->claim);
    j->traceparent = col_strdup(s, c->traceparent);
    j->group = col_strdup(s, c->group);
    j->snoozes = sqlite3_column_int(s, c->snoozes);
    j->progress = c->progress < 0 || sqlite3_column_type(s, c->progress) == SQLITE_NULL
                      ? -1
                      : sqlite3_column_int(s, c->progress);
    j->progress_text = c->progress_text < 0 ? NULL : col_strdup(s, c->progress_text);
    j->result_len =
        c->result_len < 0 || sqlite3_column_type(s, c->result_len) == SQLITE_NULL
            ? -1
            : sqlite3_column_int64(s, c->result_len);
    j->nparents = sqlite3_column_int64(s, c->nparents);
    j->waiting_for = c->waiting_for < 0 ? 0 : sqlite3_column_int64(s, c->waiting_for);
    if (!j->queue || !j->payload ||
        (c->progress_text >= 0 &&
         sqlite3_column_type(s, c->progress_text) != SQLITE_NULL && !j->progress_text) ||
        (sqlite3_column_type(s, c->traceparent) != SQLITE_NULL && !j->traceparent) ||
        (sqlite3_column_type(s, c->group) != SQLITE_NULL && !j->group) ||
        (sqlite3_column_type(s, c->key) != SQLITE_NULL && !j->key) ||
        (c->worker < 0
             ? !j->worker
             : sqlite3_column_type(s, c->worker) != SQLITE_NULL && !j->worker) ||
        (sqlite3_column_type(s, c->last_error) != SQLITE_NULL && !j->last_error))
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    return 0;
}

/* Steps s to the end, appending every row to the job array *out of *out_n
 * (NULL and 0 for a new one). On failure the array is as it was. */
static int collect_jobs(tq *db, sqlite3_stmt *s, const tq__job_cols *c, const char *queue,
                        const char *worker, const char *what, tq_job **out, size_t *out_n)
{
    size_t n = *out_n, cap = *out_n;
    tq_job *v = *out;
    int src, rc = 0;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_job *nv = grow(db, v, n, &cap, sizeof *v, &rc);
        if (!nv)
            break;
        v = *out = nv; /* perhaps moved: the caller's array is this one now */
        memset(&v[n], 0, sizeof v[n]);
        rc = read_job(db, s, c, queue, worker, &v[n++]);
        if (rc)
            break;
    }
    if (!rc && src != SQLITE_DONE)
        rc = fail_rc(db, src, what);
    done_with(s);
    if (rc) { /* the rows this call added go; the array and those before stay */
        for (size_t i = *out_n; i < n; i++)
            tq__job_clear(&v[i]);
        return rc;
    }
    *out_n = n;
    return 0;
}

/* ---- dependencies (engine.h, DEPENDENCIES) ----------------------------- */

static int query_int(tq *db, enum stmt_id id, const char *t1, int64_t i2, int64_t *out,
                     const char *what);

/* Whether the store has any dependency: the rules below cost nothing
 * while it has none. */
static int deps_any(tq *db, int *any)
{
    int64_t v = 0;
    int rc = query_int(db, S_DEPS_ANY, NULL, 0, &v, "reading dependencies");
    *any = v != 0;
    return rc;
}

/* A stack of job ids, for rules that pass from a job to its children. */
typedef struct idstack {
    int64_t *v;
    size_t n, cap;
} idstack;

static int idstack_push(tq *db, idstack *st, int64_t id)
{
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 16;
        int64_t *v = realloc(st->v, cap * sizeof *v);
        if (!v)
            return tq__seterr(db, TQ_ENOMEM, "out of memory");
        st->v = v;
        st->cap = cap;
    }
    st->v[st->n++] = id;
    return 0;
}

/* Runs s (?1 bound to a job by the caller's loop) and pushes every id it
 * returns. */
static int push_returned(tq *db, sqlite3_stmt *s, idstack *st, const char *what)
{
    int src, rc = 0;
    while ((src = sqlite3_step(s)) == SQLITE_ROW)
        if ((rc = idstack_push(db, st, sqlite3_column_int64(s, 0))))
            break;
    if (!rc && src != SQLITE_DONE)
        rc = fail_rc(db, src, what);
    done_with(s);
    return rc;
}

/* Parent, done now: its children count it off. */
static int deps_release(tq *db, int64_t parent, int64_t now)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_DEPS_RELEASE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, parent);
    sqlite3_bind_int64(s, 2, now);
    return run(db, s, "releasing the children of a job");
}

/* Job id, if dead or cancelled, cancels its waiting descendants. */
static int deps_cancel(tq *db, int64_t id, int64_t now)
{
    idstack st = {0};
    int rc = idstack_push(db, &st, id);
    while (!rc && st.n) {
        sqlite3_stmt *s = stmt(db, S_DEPS_CANCEL, &rc);
        if (!s)
            break;
        sqlite3_bind_int64(s, 1, st.v[--st.n]);
        sqlite3_bind_int64(s, 2, now);
        rc = push_returned(db, s, &st, "cancelling the children of a job");
    }
    free(st.v);
    return rc;
}

/* Job id, retried: if it waits and something holds it (BLOCKER), it is
 * cancelled again; the descendants it cancelled come back unless something
 * holds them. */
static int deps_restore(tq *db, int64_t id, int64_t now)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_DEPS_HOLD, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, now);
    if ((rc = run(db, s, "retrying a job")))
        return rc;
    idstack st = {0};
    rc = idstack_push(db, &st, id);
    while (!rc && st.n) {
        if (!(s = stmt(db, S_DEPS_RESTORE, &rc)))
            break;
        sqlite3_bind_int64(s, 1, st.v[--st.n]);
        int src = SQLITE_DONE;
        while (!rc && (src = sqlite3_step(s)) == SQLITE_ROW)
            if (strcmp((const char *)sqlite3_column_text(s, 1), "cancelled") != 0)
                rc = idstack_push(db, &st, sqlite3_column_int64(s, 0));
        if (!rc && src != SQLITE_DONE)
            rc = fail_rc(db, src, "restoring the children of a job");
        done_with(s);
    }
    free(st.v);
    return rc;
}

/* After an exchange's acknowledgements: what the applied ones that ended
 * a job do to its children. */
static int deps_settle(tq *db, const tq__ack *acks, size_t nacks, int64_t now)
{
    int rc = 0, any = -1;
    for (size_t i = 0; i < nacks && !rc; i++) {
        const tq__ack *a = &acks[i];
        if (a->result || (a->kind != TQ__ACK_DONE && a->kind != TQ__ACK_FAIL &&
                          a->kind != TQ__ACK_DISCARD))
            continue;
        if (any < 0 && (rc = deps_any(db, &any)))
            break;
        if (!any)
            break;
        rc = a->kind == TQ__ACK_DONE ? deps_release(db, a->id, now)
                                     : deps_cancel(db, a->id, now);
        if (!rc && a->kind == TQ__ACK_DONE && a->delete_done) {
            sqlite3_stmt *s = stmt(db, S_DEPS_DROP, &rc);
            if (s) {
                sqlite3_bind_int64(s, 1, a->id);
                rc = run(db, s, "dropping the dependencies of a job");
            }
        }
    }
    return rc;
}

/* Runs s (its parameters bound) and cancels the descendants of each job it
 * returns. */
static int deps_cancel_each(tq *db, sqlite3_stmt *s, int64_t now)
{
    idstack st = {0};
    int rc = push_returned(db, s, &st, "reading dependencies");
    for (size_t i = 0; i < st.n && !rc; i++)
        rc = deps_cancel(db, st.v[i], now);
    free(st.v);
    return rc;
}

/* One fenced ack at now; waited: how long the exchange waited for the
 * write lock before now. */
static int apply_ack(tq *db, const char *worker, tq__ack *a, int64_t now, int64_t waited)
{
    static const enum stmt_id ids[] = {S_DONE,   S_FAIL,    S_RELEASE, S_BEAT,
                                       S_SNOOZE, S_DISCARD, S_PROGRESS};
    enum stmt_id id = ids[a->kind];
    if (a->kind == TQ__ACK_DONE && a->delete_done)
        id = S_DONE_DELETE;
    else if (a->kind == TQ__ACK_DONE && a->output)
        id = S_DONE_RESULT;
    int rc;
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, a->id);
    sqlite3_bind_text(s, 2, worker, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, a->claim);
    if (id != S_DONE_DELETE && id != S_RELEASE && id != S_PROGRESS) {
        sqlite3_bind_int64(s, 4, now);
        /* A start is dated from the call (now - started_us), not from
         * when the write lock came. */
        sqlite3_bind_int64(s, 5, a->started_us > 0 ? a->started_us + waited : 0);
    }
    if (id == S_FAIL || id == S_BEAT || id == S_SNOOZE)
        sqlite3_bind_int64(s, 6, a->delay_us);
    if (id == S_FAIL || id == S_DISCARD || id == S_PROGRESS)
        bind_text(s, 7, a->error);
    if (id == S_PROGRESS)
        sqlite3_bind_int(s, 8, a->progress);
    if (id == S_DONE_RESULT)
        sqlite3_bind_blob64(s, 8, a->output, a->output_len, SQLITE_STATIC);
    if ((rc = run(db, s, "acknowledging a job")))
        return rc;
    a->result = sqlite3_changes(C(db)->h) == 1 ? 0 : TQ_ELOST;
    return 0;
}

/* The claim statement of a queue order and a kind (tq__claim_kind). */
static enum stmt_id claim_id(tq_order order, int kind)
{
    static const enum stmt_id ids[4][3] = {
        {S_CLAIM_FIFO, S_CLAIM_LIFO, S_CLAIM_ANY},
        {S_CLAIM_LIMITED_FIFO, S_CLAIM_LIMITED_LIFO, S_CLAIM_LIMITED_ANY},
        {S_CLAIM_CHAIN_FIFO, S_CLAIM_LIMITED_LIFO, S_CLAIM_CHAIN_ANY},
        {S_CLAIM_ROOM_FIFO, S_CLAIM_ROOM_LIFO, S_CLAIM_ROOM_ANY}};
    return ids[kind][order];
}

/* A limited claim's rate: the n jobs it took from the bucket (if the
 * queue has a rate), and, when the claimer knows of a rate, how long until
 * the next token (c->rate_wait_us). */
static int take_tokens(tq *db, tq__claim *c, int64_t now, size_t n)
{
    int rc;
    sqlite3_stmt *s;
    if (n) {
        if (!(s = stmt(db, S_RATE_TAKE, &rc)))
            return rc;
        sqlite3_bind_text(s, 1, c->queue, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, now);
        sqlite3_bind_int64(s, 3, (sqlite3_int64)n);
        if ((rc = run(db, s, "claiming jobs")))
            return rc;
        c->rate_found = sqlite3_changes(C(db)->h) > 0;
    }
    return c->rate ? query_int(db, S_RATE_WAIT, c->queue, now, &c->rate_wait_us,
                               "claiming jobs")
                   : 0;
}

/* One claim of an exchange: appends the claimed jobs to *jobs. entered:
 * when the exchange began (monotonic). */
static int claim_jobs(tq *db, const char *worker, tq__claim *c, int64_t now,
                      int64_t entered, tq_job **jobs, size_t *njobs)
{
    int rc;
    if (c->order == TQ_LIFO &&
        (rc = exec_id(db, S_LIFO_INDEX, "creating the LIFO index")))
        return rc;
    sqlite3_stmt *s = stmt(db, claim_id(c->order, tq__claim_kind(c)), &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, c->queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)c->max);
    sqlite3_bind_text(s, 4, worker, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, now + c->lease_us);
    sqlite3_bind_int(s, 6, c->max_attempts);
    sqlite3_bind_int(s, 7, !!c->start);
    if (tq__claim_kind(c) == 2) /* CLAIM_CHAIN */
        sqlite3_bind_int64(s, 8, (sqlite3_int64)c->chain);
    if (c->worker_since)
        sqlite3_bind_int64(s, 9, c->worker_since);
    else
        sqlite3_bind_null(s, 9);
    const size_t before = *njobs;
    if ((rc = collect_jobs(db, s, &tq__claimed_cols, c->queue, worker, "claiming jobs",
                           jobs, njobs)))
        return rc;
    if (!c->limited)
        return 0;
    /* The tokens are taken as of now, after the claim's own work (the
     * bucket had them sooner, and only gained since): the moment the
     * jobs' starts trail, no sooner than taken_after_us into the call. */
    c->taken_after_us = tq__mono_us() - entered;
    const int64_t at = tq__now_us();
    return take_tokens(db, c, at > now ? at : now, *njobs - before); /* a clock step */
}

static int sqlite_exchange(tq *db, const char *worker, tq__ack *acks, size_t nacks,
                           tq__claim *claim, tq_job **out, size_t *out_n)
{
    int rc;
    tq_job *jobs = NULL;
    size_t njobs = 0;

    if (out) {
        *out = NULL;
        *out_n = 0;
    }
    const int64_t entered = tq__mono_us(), asked = tq__now_us();
    if ((rc = begin(db)))
        return rc;
    const int64_t now = tq__now_us();
    for (size_t i = 0; i < nacks; i++)
        if ((rc = apply_ack(db, worker, &acks[i], now, now > asked ? now - asked : 0)))
            goto fail;
    if ((rc = deps_settle(db, acks, nacks, now)))
        goto fail;
    if (claim && claim->max > 0 &&
        (rc = claim_jobs(db, worker, claim, now, entered, &jobs, &njobs)))
        goto fail;
    if ((rc = commit(db)))
        goto fail;
    if (out) {
        *out = jobs;
        *out_n = njobs;
    } else {
        tq_job_array_free(jobs, njobs);
    }
    return 0;
fail:
    rollback(db);
    tq_job_array_free(jobs, njobs);
    for (size_t i = 0; i < nacks; i++)
        acks[i].result = 0;
    return rc;
}

static int sqlite_rescue(tq *db, const char *worker, int64_t since, int64_t *count)
{
    /* The time is taken before the wait for the lock: a rescue decided
     * while the leases still held must not take them once the lock came,
     * perhaps seconds later (the caller may hold those very jobs, their
     * results waiting behind this statement). PostgreSQL's now() is the
     * transaction's start, the same. */
    const int64_t now = tq__now_us();
    int rc;
    sqlite3_stmt *s;
    if ((rc = begin(db)))
        return rc;
    if (!(s = stmt(db, worker ? S_RESCUE_WORKER : S_RESCUE_EXPIRED, &rc)))
        goto fail;
    sqlite3_bind_int64(s, 1, now);
    if (worker) {
        sqlite3_bind_text(s, 2, worker, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, since);
    }
    if ((rc = run(db, s, "rescuing jobs")))
        goto fail;
    *count = sqlite3_changes(C(db)->h);
    int any = 0;
    if (*count && (rc = deps_any(db, &any)))
        goto fail;
    if (any) {
        if (!(s = stmt(db, S_DEPS_DEAD_SINCE, &rc)))
            goto fail;
        sqlite3_bind_int64(s, 1, now);
        if ((rc = deps_cancel_each(db, s, now)))
            goto fail;
    }
    return commit(db);
fail:
    rollback(db);
    return rc;
}

/* Runs a one-row, one-integer query with ?1 text (or NULL) and ?2 int64. */
static int query_int(tq *db, enum stmt_id id, const char *t1, int64_t i2, int64_t *out,
                     const char *what)
{
    int rc;
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    bind_text(s, 1, t1);
    if (sqlite3_bind_parameter_count(s) >= 2)
        sqlite3_bind_int64(s, 2, i2);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (src == SQLITE_DONE)
        *out = 0;
    else
        rc = fail_rc(db, src, what);
    done_with(s);
    return rc;
}

static int sqlite_pending(tq *db, const char *queue, int *out)
{
    int64_t v = 0;
    int rc = query_int(db, S_PENDING, queue, 0, &v, "checking for pending jobs");
    *out = v != 0;
    return rc;
}

static int sqlite_job_get(tq *db, int64_t id, tq_job **out)
{
    int rc;
    tq_job *v = NULL;
    size_t n = 0;
    sqlite3_stmt *s = stmt(db, S_JOB_GET, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    if ((rc = collect_jobs(db, s, &tq__all_cols, NULL, NULL, "reading the job", &v, &n)))
        return rc;
    if (n == 0) {
        free(v);
        return tq__seterr(db, TQ_ENOTFOUND, "no job with id %lld", (long long)id);
    }
    *out = v;
    return 0;
}

static int sqlite_job_result(tq *db, int64_t id, void **out, size_t *len, int *state)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_JOB_RESULT, &rc);
    *out = NULL;
    *len = 0;
    *state = -1;
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        tq_state st = TQ_READY;
        tq_state_parse(&st, (const char *)sqlite3_column_text(s, 0));
        *state = (int)st;
        if (st == TQ_DONE && sqlite3_column_type(s, 1) != SQLITE_NULL) {
            *len = (size_t)sqlite3_column_bytes(s, 1);
            if (!(*out = tq__memdup(sqlite3_column_blob(s, 1), *len, 1)))
                rc = tq__seterr(db, TQ_ENOMEM, "out of memory");
        }
        src = sqlite3_step(s);
    }
    if (!rc && src != SQLITE_DONE)
        rc = fail_rc(db, src, "reading the job's result");
    done_with(s);
    return rc;
}

static int sqlite_job_list(tq *db, const tq_list_opts *o, tq_job **out, size_t *out_n)
{
    int rc;
    const char *state = o->state >= 0 ? tq_state_name((tq_state)o->state) : NULL;
    int64_t before_at = INT64_MAX;
    enum stmt_id id = o->state < 0             ? S_JOB_LIST
                      : o->state == TQ_READY   ? S_JOB_LIST_READY
                      : o->state == TQ_RUNNING ? S_JOB_LIST_RUNNING
                      : o->state == TQ_WAITING ? S_JOB_LIST_WAITING
                                               : S_JOB_LIST_FINISHED;
    if (id == S_JOB_LIST_FINISHED && o->before_id != INT64_MAX) {
        /* The page after a job that is no longer in the state is empty. */
        sqlite3_stmt *f = stmt(db, S_JOB_FINISHED_AT, &rc);
        if (!f)
            return rc;
        sqlite3_bind_int64(f, 1, o->before_id);
        sqlite3_bind_text(f, 2, state, -1, SQLITE_STATIC);
        int src = sqlite3_step(f);
        if (src == SQLITE_ROW)
            before_at = sqlite3_column_int64(f, 0);
        done_with(f);
        if (src == SQLITE_DONE)
            return 0;
        if (src != SQLITE_ROW)
            return fail_rc(db, src, "listing jobs");
    }
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    bind_text(s, 1, o->queue);
    bind_text(s, 2, state);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)o->limit);
    sqlite3_bind_int64(s, 4, o->before_id);
    if (id == S_JOB_LIST_FINISHED)
        sqlite3_bind_int64(s, 5, before_at);
    return collect_jobs(db, s, &tq__all_cols, NULL, NULL, "listing jobs", out, out_n);
}

/* The parents first: whether the job exists is a question only when it
 * has none (a worker asks this of jobs that have some). */
static int sqlite_job_parents(tq *db, int64_t id, int64_t **out, size_t *out_n)
{
    int rc, state = 0;
    sqlite3_stmt *s = stmt(db, S_JOB_PARENTS, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    idstack st = {0};
    if (!(rc = push_returned(db, s, &st, "reading the parents of a job")) && !st.n)
        rc = state_of(db, id, &state);
    if (!rc && state < 0)
        rc = TQ_ENOTFOUND;
    if (rc) {
        free(st.v);
        return rc;
    }
    *out = st.v;
    *out_n = st.n;
    return 0;
}

/* After an update of one job by id changed nothing: the state the job is
 * in, or -1 when there is none. */
static int state_of(tq *db, int64_t id, int *state)
{
    int rc;
    tq_state st;
    sqlite3_stmt *s = stmt(db, S_JOB_STATE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    int src = sqlite3_step(s);
    *state = src == SQLITE_ROW &&
                     tq_state_parse(&st, (const char *)sqlite3_column_text(s, 0)) == 0
                 ? (int)st
                 : -1;
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        rc = fail_rc(db, src, "reading the job");
    done_with(s);
    return rc;
}

/* Runs a management update in its own transaction: with ids, ?1 each id
 * (all or none: see engine.h), else ?1 the queue text; ?2 is now. Then
 * what it does to the children of the jobs it changed (engine.h,
 * DEPENDENCIES): a cancel cancels them, a retry brings them back. */
static int manage(tq *db, enum stmt_id id, const int64_t *ids, size_t n,
                  const char *queue, int64_t *count, size_t *bad, int *state,
                  const char *action)
{
    int rc, any = 0;
    sqlite3_stmt *s;
    idstack dead = {0}; /* S_RETRY_DEAD: the parents it retries */
    *count = 0;
    if ((rc = begin(db)))
        return rc;
    const int64_t now = tq__now_us();
    if ((rc = deps_any(db, &any)))
        goto fail;
    if (any && !n) {
        if (!(s = stmt(db, S_DEPS_DEAD_PARENTS, &rc)))
            goto fail;
        bind_text(s, 1, queue);
        if ((rc = push_returned(db, s, &dead, "reading dependencies")))
            goto fail;
    }
    /* Children before parents (a child's id is larger): a cancel or retry
     * of both must not find the child already moved by its parent's. */
    for (size_t k = 0; k < (n ? n : 1) && !rc; k++) {
        const size_t i = n ? n - 1 - k : 0;
        if (!(s = stmt(db, id, &rc)))
            break;
        if (n)
            sqlite3_bind_int64(s, 1, ids[i]);
        else
            bind_text(s, 1, queue);
        sqlite3_bind_int64(s, 2, now);
        if ((rc = run(db, s, action)))
            break;
        int changed = sqlite3_changes(C(db)->h);
        if (n && changed == 0) { /* that one cannot change: none do */
            *bad = i;
            *count = 0;
            rc = state_of(db, ids[i], state);
            rollback(db);
            free(dead.v);
            return rc;
        }
        *count += changed;
        if (any && n)
            rc = id == S_CANCEL ? deps_cancel(db, ids[i], now)
                                : deps_restore(db, ids[i], now);
    }
    for (size_t i = 0; i < dead.n && !rc; i++)
        rc = deps_restore(db, dead.v[i], now);
    if (rc)
        goto fail;
    free(dead.v);
    return commit(db);
fail:
    *count = 0;
    rollback(db);
    free(dead.v);
    return rc;
}

static int sqlite_job_retry(tq *db, const int64_t *ids, size_t n, const char *queue,
                            int64_t *count, size_t *bad, int *state)
{
    return manage(db, n ? S_RETRY_ONE : S_RETRY_DEAD, ids, n, queue, count, bad, state,
                  "retry");
}

static int sqlite_job_cancel(tq *db, const int64_t *ids, size_t n, int64_t *count,
                             size_t *bad, int *state)
{
    return manage(db, S_CANCEL, ids, n, NULL, count, bad, state, "cancel");
}

static int sqlite_prune(tq *db, int64_t older_than_us, unsigned mask, int64_t limit,
                        int64_t *count)
{
    int rc;
    *count = 0;
    if ((rc = begin(db)))
        return rc;
    const int64_t cutoff = tq__now_us() - older_than_us;
    for (int st = 0; st < TQ_STATE_COUNT; st++) {
        if (!(mask & (1u << st)))
            continue;
        sqlite3_stmt *s = stmt(db, S_PRUNE, &rc);
        if (!s)
            goto fail;
        sqlite3_bind_text(s, 1, tq_state_name((tq_state)st), -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, cutoff);
        sqlite3_bind_int64(s, 3, limit > 0 ? limit : -1);
        if ((rc = run(db, s, "pruning")))
            goto fail;
        *count += sqlite3_changes(C(db)->h);
    }
    int any = 0;
    if (*count && (rc = deps_any(db, &any)))
        goto fail;
    if (any && (rc = exec_id(db, S_DEPS_GC, "pruning dependencies")))
        goto fail;
    return commit(db);
fail:
    rollback(db);
    return rc;
}

/* ---- stats ------------------------------------------------------------- */

static int sqlite_stats(tq *db, const char *queue, tq_stats *out)
{
    int rc, src;
    const int64_t now = tq__now_us();
    int64_t v;

    /* One read transaction, so the numbers agree with each other. */
    if (sqlite3_exec(C(db)->h, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return fail_rc(db, sqlite3_errcode(C(db)->h), "starting a read");
    sqlite3_stmt *s = stmt(db, S_COUNTS, &rc);
    if (!s)
        goto done;
    bind_text(s, 1, queue);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_state st;
        if (tq_state_parse(&st, (const char *)sqlite3_column_text(s, 0)) == 0)
            out->count[st] = sqlite3_column_int64(s, 1);
    }
    done_with(s);
    if (src != SQLITE_DONE) {
        rc = fail_rc(db, src, "counting jobs");
        goto done;
    }
    if ((rc = query_int(db, S_OLDEST_READY, queue, now, &v, "reading stats")))
        goto done;
    out->oldest_ready_age_us = v ? now - v : 0;
    if (!(s = stmt(db, S_DELAYED, &rc)))
        goto done;
    bind_text(s, 1, queue);
    sqlite3_bind_int64(s, 2, now);
    if ((src = sqlite3_step(s)) == SQLITE_ROW) {
        out->delayed = sqlite3_column_int64(s, 0);
        if (out->delayed)
            out->next_due_in_us = sqlite3_column_int64(s, 1) - now;
    }
    done_with(s);
    if (src != SQLITE_ROW) {
        rc = fail_rc(db, src, "reading stats");
        goto done;
    }
    if ((rc = query_int(db, S_DONE_SINCE, queue, now - 60000000, &v, "reading stats")))
        goto done;
    out->done_last_minute = v;
    if (!(s = stmt(db, S_LONGEST, &rc)))
        goto done;
    bind_text(s, 1, queue);
    while ((src = sqlite3_step(s)) == SQLITE_ROW && out->nlongest < 5) {
        size_t i = out->nlongest++;
        out->longest[i].id = sqlite3_column_int64(s, 0);
        snprintf(out->longest[i].worker, sizeof out->longest[i].worker, "%s",
                 (const char *)sqlite3_column_text(s, 1));
        out->longest[i].running_us = now - sqlite3_column_int64(s, 2);
    }
    done_with(s);
done:
    sqlite3_exec(C(db)->h, "COMMIT", NULL, NULL, NULL);
    return rc;
}

static int sqlite_count_jobs(tq *db, tq_state st, int by_worker, tq_count **out,
                             size_t *out_n)
{
    int rc, src;
    enum stmt_id id = st == TQ_READY     ? S_COUNT_READY
                      : st == TQ_WAITING ? S_COUNT_WAITING
                      : st != TQ_RUNNING ? S_COUNT_FINISHED
                      : by_worker        ? S_COUNT_RUNNING_BY_WORKER
                                         : S_COUNT_RUNNING;
    sqlite3_stmt *s = stmt(db, id, &rc);
    if (!s)
        return rc;
    if (id == S_COUNT_READY)
        sqlite3_bind_int64(s, 1, tq__now_us());
    else if (id == S_COUNT_FINISHED)
        sqlite3_bind_text(s, 1, tq_state_name(st), -1, SQLITE_STATIC);
    size_t n = 0, cap = 0;
    tq_count *v = NULL;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            tq_count *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                src = SQLITE_NOMEM;
                break;
            }
            v = nv;
        }
        tq_count *c = &v[n++];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", (const char *)sqlite3_column_text(s, 0));
        c->n = sqlite3_column_int64(s, 1);
        if (id == S_COUNT_READY) {
            c->delayed = sqlite3_column_int64(s, 2);
            c->oldest_due_us = sqlite3_column_int64(s, 3);
        }
    }
    done_with(s);
    if (src != SQLITE_DONE) {
        free(v);
        return fail_rc(db, src, "counting jobs");
    }
    *out = v;
    *out_n = n;
    return 0;
}

static int sqlite_finished_since(tq *db, tq_state st, int64_t at, int64_t after_id,
                                 int64_t upto, size_t limit, tq_finished *out,
                                 size_t *out_n)
{
    int rc, src;
    sqlite3_stmt *s = stmt(db, S_FINISHED_SINCE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, tq_state_name(st), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, at);
    sqlite3_bind_int64(s, 3, after_id);
    sqlite3_bind_int64(s, 4, upto);
    sqlite3_bind_int64(s, 5, (sqlite3_int64)limit);
    size_t n = 0;
    while (n < limit && (src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_finished *f = &out[n++];
        f->id = sqlite3_column_int64(s, 0);
        snprintf(f->queue, sizeof f->queue, "%s",
                 (const char *)sqlite3_column_text(s, 1));
        f->state = st;
        f->finished_at = sqlite3_column_int64(s, 2);
        f->duration_us = sqlite3_column_int64(s, 3);
    }
    if (n == limit)
        src = SQLITE_DONE;
    done_with(s);
    if (src != SQLITE_DONE)
        return fail_rc(db, src, "reading finished jobs");
    *out_n = n;
    return 0;
}

static int sqlite_active(tq *db, tq__active **out, size_t *out_n)
{
    int rc, src;
    size_t n = 0, cap = 0;
    tq__active *v = NULL;
    const int64_t now = tq__now_us();
    sqlite3_stmt *s = stmt(db, S_ACTIVE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, now);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq__active *nv = grow(db, v, n, &cap, sizeof *v, &rc);
        if (!nv) {
            done_with(s);
            free(v);
            return rc;
        }
        v = nv;
        tq__active *a = &v[n++];
        snprintf(a->queue, sizeof a->queue, "%s", sqlite3_column_text(s, 0));
        a->due = sqlite3_column_int64(s, 1);
        a->delayed = sqlite3_column_int64(s, 2);
        a->running = sqlite3_column_int64(s, 3);
        a->next_due_in_us = a->delayed ? sqlite3_column_int64(s, 4) - now : 0;
    }
    done_with(s);
    if (src != SQLITE_DONE) {
        free(v);
        return fail_rc(db, src, "counting active jobs");
    }
    *out = v;
    *out_n = n;
    return 0;
}

static int sqlite_durations(tq *db, const char *queue, size_t limit, int64_t **out,
                            size_t *out_n)
{
    int rc, src;
    size_t n = 0, cap = limit < 1024 ? limit : 1024;
    int64_t *v = malloc((cap ? cap : 1) * sizeof *v);
    sqlite3_stmt *s = stmt(db, S_DURATIONS, &rc);
    if (!s || !v) {
        free(v);
        return s ? tq__seterr(db, TQ_ENOMEM, "out of memory") : rc;
    }
    bind_text(s, 1, queue);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)limit);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            cap *= 2;
            int64_t *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                done_with(s);
                free(v);
                return tq__seterr(db, TQ_ENOMEM, "out of memory");
            }
            v = nv;
        }
        v[n++] = sqlite3_column_int64(s, 0);
    }
    done_with(s);
    if (src != SQLITE_DONE) {
        free(v);
        return fail_rc(db, src, "reading durations");
    }
    *out = v;
    *out_n = n;
    return 0;
}

/* ---- workers ----------------------------------------------------------- */

static int sqlite_worker_register(tq *db, tq_worker_info *w, const tq_worker_info *expect,
                                  tq_worker_info *holder)
{
    int rc;
    sqlite3_stmt *s;
    memset(holder, 0, sizeof *holder);
    if ((rc = begin(db)))
        return rc;
    const int64_t now = tq__now_us();
    if (!(s = stmt(db, S_WORKER_GET, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, w->name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) {
        snprintf(holder->name, sizeof holder->name, "%s", w->name);
        holder->heartbeat_at = sqlite3_column_int64(s, 0);
        holder->lease_us = sqlite3_column_int64(s, 1);
        holder->stopped_at = sqlite3_column_int64(s, 2);
        snprintf(holder->host, sizeof holder->host, "%s",
                 (const char *)sqlite3_column_text(s, 3));
        holder->pid = sqlite3_column_int64(s, 4);
        snprintf(holder->host_id, sizeof holder->host_id, "%s",
                 (const char *)sqlite3_column_text(s, 5));
        holder->started_at = sqlite3_column_int64(s, 6);
        holder->reaper_pid = sqlite3_column_int64(s, 7);
        holder->alive =
            !holder->stopped_at && now - holder->heartbeat_at < holder->lease_us;
    }
    done_with(s);
    if (holder->name[0] && (expect ? !tq__same_holder(holder, expect) : holder->alive)) {
        rc = TQ_EINUSE; /* worded by the caller, from *holder */
        goto fail;
    }
    if (!(s = stmt(db, S_WORKER_PUT, &rc)))
        goto fail;
    /* Later than the name's last registration, whatever the clock did. */
    w->started_at =
        holder->name[0] && holder->started_at >= now ? holder->started_at + 1 : now;
    sqlite3_bind_text(s, 1, w->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, w->host, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, w->pid);
    sqlite3_bind_int64(s, 4, w->started_at);
    sqlite3_bind_int64(s, 5, w->lease_us);
    sqlite3_bind_text(s, 6, w->host_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 7, w->reaper_pid);
    if ((rc = run(db, s, "registering the worker")))
        goto fail;
    return commit(db);
fail:
    rollback(db);
    return rc;
}

static int worker_touch(tq *db, enum stmt_id id, const tq_worker_info *me)
{
    int rc;
    sqlite3_stmt *s;
    if ((rc = begin(db)))
        return rc;
    if (!(s = stmt(db, id, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, me->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, tq__now_us());
    sqlite3_bind_int64(s, 3, me->pid);
    sqlite3_bind_text(s, 4, me->host, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, me->host_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, me->started_at);
    if (sqlite3_bind_parameter_count(s) >= 8) { /* the heartbeat */
        sqlite3_bind_int64(s, 7, me->lease_us);
        sqlite3_bind_int64(s, 8, me->reaper_pid);
    }
    if ((rc = run(db, s, "updating the worker")))
        goto fail;
    if (sqlite3_changes(C(db)->h) == 0) {
        rc = TQ_EINUSE; /* worded by the caller */
        goto fail;
    }
    return commit(db);
fail:
    rollback(db);
    return rc;
}

static int sqlite_worker_beat(tq *db, const tq_worker_info *me)
{
    return worker_touch(db, S_WORKER_BEAT, me);
}

static int sqlite_worker_stop(tq *db, const tq_worker_info *me)
{
    return worker_touch(db, S_WORKER_STOP, me);
}

static int sqlite_worker_list(tq *db, tq_worker_info **out, size_t *out_n)
{
    int rc, src;
    size_t n = 0, cap = 0;
    tq_worker_info *v = NULL;
    const int64_t now = tq__now_us();
    sqlite3_stmt *s = stmt(db, S_WORKER_LIST, &rc);
    if (!s)
        return rc;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_worker_info *nv = grow(db, v, n, &cap, sizeof *v, &rc);
        if (!nv) {
            done_with(s);
            free(v);
            return rc;
        }
        v = nv;
        tq_worker_info *w = &v[n++];
        memset(w, 0, sizeof *w);
        snprintf(w->name, sizeof w->name, "%s", sqlite3_column_text(s, 0));
        snprintf(w->host, sizeof w->host, "%s", sqlite3_column_text(s, 1));
        snprintf(w->host_id, sizeof w->host_id, "%s", sqlite3_column_text(s, 7));
        w->pid = sqlite3_column_int64(s, 2);
        w->started_at = sqlite3_column_int64(s, 3);
        w->heartbeat_at = sqlite3_column_int64(s, 4);
        w->stopped_at = sqlite3_column_int64(s, 5);
        w->lease_us = sqlite3_column_int64(s, 6);
        w->reaper_pid = sqlite3_column_int64(s, 8);
        w->alive = !w->stopped_at && now - w->heartbeat_at < w->lease_us;
    }
    done_with(s);
    if (src != SQLITE_DONE) {
        free(v);
        return fail_rc(db, src, "listing workers");
    }
    *out = v;
    *out_n = n;
    return 0;
}

static int sqlite_worker_prune(tq *db, int64_t older_than_us, int64_t *count)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_WORKER_PRUNE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, tq__now_us() - older_than_us);
    if (!(rc = run(db, s, "pruning workers")))
        *count = sqlite3_changes(C(db)->h);
    return rc;
}

/* ---- wake-ups ------------------------------------------------------------ */

/* Other connections' commits so far (data_version), and the jobs ever
 * inserted (the sequence). */
static int data_version(tq *db, int64_t *out)
{
    return query_int(db, S_DATA_VERSION, NULL, 0, out, "reading the data version");
}

static int jobs_seq(tq *db, int64_t *out)
{
    return query_int(db, S_JOBS_SEQ, NULL, 0, out, "reading the job sequence");
}

/* Watches the -wal file, which every commit writes. (It exists while any
 * connection has the store open in WAL mode, ours included; should it be
 * replaced, the watch is made again: see sqlite_notify_drain.) */
static int watch_wal(tq *db)
{
    conn *c = C(db);
    const char *wal = sqlite3_filename_wal(sqlite3_db_filename(c->h, "main"));
    if (!wal || !*wal)
        return tq__seterr(db, TQ_ENOTSUP, "a store in memory has no file to watch");
    c->notify_wd = inotify_add_watch(c->notify_fd, wal, IN_MODIFY);
    if (c->notify_wd < 0)
        return tq__seterr(db, TQ_ESYS, "cannot watch '%s': %s", wal, strerror(errno));
    return 0;
}

static int sqlite_listen(tq *db)
{
    conn *c = C(db);
    if (c->notify_fd < 0 && (c->notify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
        return tq__seterr(db, TQ_ESYS, "inotify: %s", strerror(errno));
    if (c->notify_wd < 0) {
        int rc = watch_wal(db);
        if (rc)
            return rc;
    }
    c->look_at = 0;
    int rc = data_version(db, &c->seen_version);
    return rc ? rc : jobs_seq(db, &c->seen_seq);
}

static int sqlite_notify_fd(tq *db)
{
    return C(db)->notify_fd;
}

/*
 * A write to the -wal file is seen before the commit it belongs to is
 * visible: the writer syncs the file, then publishes the commit in the
 * shared index, which no event reports. So a write with nothing new to see
 * is looked at again 1, 2, 4, ... 64 ms later (own commits, which
 * data_version does not count, cost those few looks too); a commit of
 * another connection's with no insert in it (an acknowledgement, a
 * heartbeat) ends the looking.
 */
static int sqlite_notify_drain(tq *db, int *count, int64_t *again_us)
{
    conn *c = C(db);
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int wrote = 0, gone = 0;
    ssize_t n;
    *count = 0;
    *again_us = 0;
    if (c->notify_fd < 0)
        return 0;
    while ((n = read(c->notify_fd, buf, sizeof buf)) > 0)
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            wrote |= (e->mask & (IN_MODIFY | IN_Q_OVERFLOW)) != 0;
            gone |= (e->mask & IN_IGNORED) != 0;
            p += sizeof *e + e->len;
        }
    if (gone) { /* the file went (a checkpoint that deleted it): watch the new one */
        c->notify_wd = -1;
        wrote = 1;
        if (watch_wal(db))
            tq__clearerr(db); /* polling covers it until the next listen */
    }
    const int64_t now = tq__mono_us();
    if (wrote) {
        c->look_at = now;
        c->look_step = 0;
    }
    if (!c->look_at)
        return 0;
    if (now < c->look_at) {
        *again_us = c->look_at - now;
        return 0;
    }
    int64_t version, seq;
    int rc = data_version(db, &version);
    if (rc)
        return rc;
    if (version != c->seen_version) { /* another connection committed */
        c->seen_version = version;
        c->look_at = 0;
        if ((rc = jobs_seq(db, &seq)))
            return rc;
        if (seq > c->seen_seq)
            *count = seq - c->seen_seq > 1000 ? 1000 : (int)(seq - c->seen_seq);
        c->seen_seq = seq;
        return 0;
    }
    if (c->look_step < 7) { /* not visible yet, or our own */
        c->look_at = now + (1000LL << c->look_step++);
        *again_us = c->look_at - now;
    } else {
        c->look_at = 0;
    }
    return 0;
}

const char *tq__sqlite_claim_sql(tq_order order, int kind)
{
    return (unsigned)order < 3 && (unsigned)kind < 4 ? sql[claim_id(order, kind)] : NULL;
}

const char *tq__sqlite_ack_sql(void)
{
    return sql[S_DONE];
}

const char *tq__sqlite_migration(int version)
{
    return version >= 1 && version <= SCHEMA_VERSION ? migrations[version - 1] : NULL;
}

/*
 * A store file deleted, or replaced by another (a restore, a `tq init`
 * after rm), while a connection has it open: SQLite goes on with the file
 * it opened, which nobody else sees any more. What the path names now is
 * compared with what was opened.
 */
static int sqlite_same_store(tq *db)
{
    conn *c = C(db);
    const char *path = sqlite3_db_filename(c->h, "main");
    struct stat st;
    if (!path || !*path || !c->ino)
        return 0; /* in memory: nothing to lose */
    if (stat(path, &st) != 0)
        return errno == ENOENT
                   ? tq__seterr(db, TQ_ECONN, "the store '%s' was deleted while in use",
                                path)
                   : 0;
    if (st.st_dev != c->dev || st.st_ino != c->ino)
        return tq__seterr(db, TQ_ECONN,
                          "the store '%s' was replaced by another file while in use",
                          path);
    return 0;
}

/* ---- periodic jobs ------------------------------------------------------ */

static int sqlite_clock(tq *db, int64_t *now_us)
{
    (void)db;
    *now_us = tq__now_us();
    return 0;
}

static int sqlite_schedule_put(tq *db, const char *name, const tq_schedule_opts *o,
                               int64_t next_us)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_SCHEDULE_PUT, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, o->queue, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, o->spec, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, o->tz ? o->tz : "UTC", -1, SQLITE_STATIC);
    sqlite3_bind_blob64(s, 5, o->payload ? o->payload : "", o->payload_len,
                        SQLITE_STATIC);
    sqlite3_bind_int(s, 6, o->priority);
    sqlite3_bind_int(s, 7, !!o->overlap_skip);
    sqlite3_bind_int64(s, 8, next_us);
    return run(db, s, "saving the schedule");
}

static int sqlite_schedule_remove(tq *db, const char *name)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_SCHEDULE_REMOVE, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if ((rc = run(db, s, "removing the schedule")))
        return rc;
    return sqlite3_changes(C(db)->h)
               ? 0
               : tq__seterr(db, TQ_ENOTFOUND, "no schedule named '%s'", name);
}

static int sqlite_schedule_list(tq *db, tq_schedule **out, size_t *out_n)
{
    int rc, src;
    size_t n = 0, cap = 0;
    tq_schedule *v = NULL;
    sqlite3_stmt *s = stmt(db, S_SCHEDULE_LIST, &rc);
    if (!s)
        return rc;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        tq_schedule *nv = grow(db, v, n, &cap, sizeof *v, &rc);
        if (!nv)
            goto fail;
        v = nv;
        rc = tq__schedule_fill(
            db, &v[n++], (const char *)sqlite3_column_text(s, 0),
            (const char *)sqlite3_column_text(s, 1),
            (const char *)sqlite3_column_text(s, 2),
            (const char *)sqlite3_column_text(s, 3), sqlite3_column_blob(s, 4),
            (size_t)sqlite3_column_bytes(s, 4), sqlite3_column_int(s, 5),
            sqlite3_column_int(s, 6), sqlite3_column_int64(s, 7),
            sqlite3_column_int64(s, 8), sqlite3_column_int64(s, 9));
        if (rc)
            goto fail;
    }
    if (src != SQLITE_DONE) {
        rc = fail_rc(db, src, "listing schedules");
        goto fail;
    }
    done_with(s);
    *out = v;
    *out_n = n;
    return 0;
fail:
    done_with(s);
    tq_schedule_array_free(v, n);
    return rc;
}

static int sqlite_schedule_fire(tq *db, const tq_schedule *sc, int64_t slot_us,
                                int64_t next_us, int64_t *job)
{
    const char *name = sc->name;
    int rc;
    int64_t busy = 0;
    sqlite3_stmt *s;
    *job = 0;
    if ((rc = begin(db)))
        return rc;
    if (!(s = stmt(db, S_SCHEDULE_MOVE, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, sc->next_slot_us);
    sqlite3_bind_int64(s, 3, next_us);
    sqlite3_bind_int64(s, 4, slot_us);
    sqlite3_bind_text(s, 5, sc->spec, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, sc->tz, -1, SQLITE_STATIC);
    if ((rc = run(db, s, "enqueueing a periodic job")))
        goto fail;
    /* Another worker took the slot; or there is none to take. */
    if (sqlite3_changes(C(db)->h) == 0 || slot_us < 0)
        return commit(db);
    if ((rc =
             query_int(db, S_SCHEDULE_BUSY, name, 0, &busy, "enqueueing a periodic job")))
        goto fail;
    if (busy) /* overlap skip: the slot passes without a job */
        return commit(db);
    if (!(s = stmt(db, S_SCHEDULE_ENQUEUE, &rc)))
        goto fail;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, slot_us);
    if ((rc = run(db, s, "enqueueing a periodic job")))
        goto fail;
    if (sqlite3_changes(C(db)->h) == 1) {
        *job = sqlite3_last_insert_rowid(C(db)->h);
        if (!(s = stmt(db, S_SCHEDULE_JOB, &rc)))
            goto fail;
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, *job);
        if ((rc = run(db, s, "enqueueing a periodic job")))
            goto fail;
    }
    if ((rc = commit(db)))
        goto fail;
    return 0;
fail:
    rollback(db);
    *job = 0;
    return rc;
}

const struct tq__engine tq__engine_sqlite = {
    .name = "sqlite",
    .caps = TQ__CAP_NOTIFY,
    .open = sqlite_open,
    .close = sqlite_close,
    .init = sqlite_init,
    .schema_version = sqlite_schema_version,
    .queue_set = sqlite_queue_set,
    .queue_get = sqlite_queue_get,
    .queue_list = sqlite_queue_list,
    .enqueue = sqlite_enqueue,
    .exchange = sqlite_exchange,
    .rescue = sqlite_rescue,
    .pending = sqlite_pending,
    .job_get = sqlite_job_get,
    .job_result = sqlite_job_result,
    .job_list = sqlite_job_list,
    .job_parents = sqlite_job_parents,
    .job_retry = sqlite_job_retry,
    .job_cancel = sqlite_job_cancel,
    .prune = sqlite_prune,
    .worker_prune = sqlite_worker_prune,
    .stats = sqlite_stats,
    .active = sqlite_active,
    .durations = sqlite_durations,
    .count_jobs = sqlite_count_jobs,
    .finished_since = sqlite_finished_since,
    .worker_register = sqlite_worker_register,
    .worker_beat = sqlite_worker_beat,
    .worker_stop = sqlite_worker_stop,
    .worker_list = sqlite_worker_list,
    .same_store = sqlite_same_store,
    .listen = sqlite_listen,
    .notify_fd = sqlite_notify_fd,
    .notify_drain = sqlite_notify_drain,
    .clock = sqlite_clock,
    .schedule_put = sqlite_schedule_put,
    .schedule_remove = sqlite_schedule_remove,
    .schedule_list = sqlite_schedule_list,
    .schedule_fire = sqlite_schedule_fire,
};
