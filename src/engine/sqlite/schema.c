/*
 * sqlite/schema.c - the SQLite engine: schema: its migrations, tq init (and the
 * grants), the version check.
 */
#include "sqlite_int.h"

/* clang-format off */

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

/* The claim of each order is a seek in a ready-row index: finished rows
 * never enter one, however many are kept. The FIFO one also serves
 * unordered queues; the LIFO one exists only while some queue is LIFO,
 * and the group one (the ready jobs of each group, for the claims of a
 * queue with a per-group limit: CLAIM_GROUPS, CLAIM_CHAIN) only while some
 * queue has a per-group limit (sync_indexes): every index costs every
 * enqueue and every change of state, used or not (the group one cost a
 * plain queue's worker 2 % of its instructions). */
#define READY_LIFO_INDEX                                                                 \
    "tq_jobs_ready_lifo ON tq_jobs (queue, priority, id, run_at)  WHERE state = 'ready'"
#define READY_GROUP_INDEX                                                                \
    "tq_jobs_ready_group ON tq_jobs (queue, job_group, priority DESC, run_at, id)"     \
    "  WHERE job_group IS NOT NULL AND state = 'ready'"


const char *const tq__sqlite_sql_schema[S_COUNT] = {
    [S_SCHEMA_VERSION] = "SELECT value FROM tq_meta WHERE key = 'schema_version'",
    /* Prepared once, stepped before every LIFO (grouped) claim: a no-op
     * while the index exists, and SQLite prepares it again (finding the
     * index gone) if the schema changed meanwhile. */
    [S_LIFO_INDEX] = "CREATE INDEX IF NOT EXISTS " READY_LIFO_INDEX,
    [S_LIFO_INDEX_DROP] = "DROP INDEX IF EXISTS tq_jobs_ready_lifo",
    [S_GROUP_INDEX] = "CREATE INDEX IF NOT EXISTS " READY_GROUP_INDEX,
    [S_GROUP_INDEX_DROP] = "DROP INDEX IF EXISTS tq_jobs_ready_group",
    /* Whether some queue is LIFO, and whether some queue has a per-group
     * limit. */
    [S_INDEXES_NEEDED] = "SELECT EXISTS (SELECT 1 FROM tq_queues WHERE ord = 'lifo'),"
                         " EXISTS (SELECT 1 FROM tq_queues WHERE max_running_per_group > 0)",
};
/* clang-format on */

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
    /* 16: PostgreSQL's notifications of jobs ready again and of changed
     * settings. Nothing to do here: an idle worker sees every other
     * connection's commit (PRAGMA data_version, sqlite_notify_drain). */
    "SELECT 1;",
    /* 17: timeouts in the store: a queue's (0: none) and a job's own
     * (NULL: its queue's), the job's winning, the worker's the fallback
     * (tq_queue_info.timeout_us). Plain-SQL producers may set a job's.
     * And retention: how long a queue's finished jobs are kept (0: until
     * pruned), which its workers apply (worker/retain.c). */
    "ALTER TABLE tq_queues ADD COLUMN timeout_us INTEGER NOT NULL DEFAULT 0"
    "  CHECK (timeout_us >= 0);"
    "ALTER TABLE tq_jobs ADD COLUMN timeout_us INTEGER;"
    "ALTER TABLE tq_queues ADD COLUMN retain_done_us INTEGER NOT NULL DEFAULT 0"
    "  CHECK (retain_done_us >= 0);"
    "ALTER TABLE tq_queues ADD COLUMN retain_dead_us INTEGER NOT NULL DEFAULT 0"
    "  CHECK (retain_dead_us >= 0);",
    /* 18: what releases a child (engine.h, DEPENDENCIES): its parent done
     * (release_when 'done', as before), or its parent's end, whatever it is
     * ('ended': done, dead or cancelled, tq enqueue --when ended). For the
     * latter, parent_state is the end that counted the parent off (NULL
     * while it has not): so it counts once however often the parent is
     * retried, and the child's handler finds it after the parent's row is
     * gone. The insert trigger sets it (never the inserter), and only it
     * may change. */
    "ALTER TABLE tq_deps ADD COLUMN release_when TEXT NOT NULL DEFAULT 'done'"
    "  CHECK (release_when = 'done' OR release_when = 'ended');"
    "ALTER TABLE tq_deps ADD COLUMN parent_state TEXT"
    "  CHECK (parent_state IS NULL OR parent_state = 'done' OR parent_state = 'dead'"
    "         OR parent_state = 'cancelled');"
    "DROP TRIGGER tq_deps_new;"
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
    "  UPDATE tq_deps SET parent_state = CASE WHEN NEW.release_when = 'ended' THEN"
    "     (SELECT state FROM tq_jobs WHERE id = NEW.parent"
    "      AND state IN ('done', 'dead', 'cancelled')) END"
    "   WHERE parent = NEW.parent AND child = NEW.child"
    "   AND (NEW.release_when = 'ended' OR NEW.parent_state IS NOT NULL);"
    "  UPDATE tq_jobs SET"
    "    nparents = nparents + 1,"
    "    waiting_for = waiting_for + p.holds,"
    "    state = CASE WHEN tq_jobs.state = 'cancelled' THEN 'cancelled'"
    "                 WHEN p.bad THEN 'cancelled'"
    "                 WHEN tq_jobs.waiting_for + p.holds > 0 THEN 'waiting'"
    "                 ELSE 'ready' END,"
    "    cancelled_by = CASE WHEN tq_jobs.state <> 'cancelled' AND p.bad"
    "                        THEN p.id ELSE tq_jobs.cancelled_by END,"
    "    last_error = CASE WHEN tq_jobs.state <> 'cancelled' AND p.bad"
    "                      THEN 'parent job ' || p.id || ' is ' || p.state"
    "                      ELSE tq_jobs.last_error END,"
    "    finished_at = CASE WHEN tq_jobs.state <> 'cancelled' AND p.bad"
    "                       THEN CAST((julianday('now') - 2440587.5) * 86400000000"
    "                                 AS INTEGER)"
    "                       ELSE tq_jobs.finished_at END"
    "   FROM (SELECT id, state,"
    "          CASE WHEN NEW.release_when = 'ended'"
    "               THEN state NOT IN ('done', 'dead', 'cancelled')"
    "               ELSE state <> 'done' END AS holds,"
    "          NEW.release_when = 'done' AND state IN ('dead', 'cancelled') AS bad"
    "         FROM tq_jobs WHERE id = NEW.parent) AS p"
    "   WHERE tq_jobs.id = NEW.child;"
    "END;"
    "DROP TRIGGER tq_deps_fixed;"
    "CREATE TRIGGER tq_deps_fixed BEFORE UPDATE OF parent, child, release_when ON tq_deps"
    " BEGIN"
    "  SELECT RAISE(ABORT, 'tq: dependencies do not change; they go with their child');"
    "END;",
};

int tq__sqlite_schema_version(tq *db, int *version)
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
        rc = tq__sqlite_fail_rc(db, src, "reading the schema version");
    done_with(s);
    return rc;
}

/* The LIFO index exists exactly while some queue is LIFO, the group index
 * while some queue has a per-group limit: the other claims never read
 * them, and they would cost them an index entry written at every enqueue
 * and removed at every claim. A queue made LIFO or limited by plain SQL
 * gets its index at its first claim (sqlite_exchange). */
int tq__sqlite_sync_indexes(tq *db)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_INDEXES_NEEDED, &rc);
    if (!s)
        return rc;
    int src = sqlite3_step(s);
    const int lifo = src == SQLITE_ROW && sqlite3_column_int(s, 0),
              group = src == SQLITE_ROW && sqlite3_column_int(s, 1);
    done_with(s);
    if (src != SQLITE_ROW)
        return tq__sqlite_fail_rc(db, src, "looking for the indexes queues need");
    if ((rc = exec_id(db, lifo ? S_LIFO_INDEX : S_LIFO_INDEX_DROP,
                      "keeping the LIFO index")))
        return rc;
    return exec_id(db, group ? S_GROUP_INDEX : S_GROUP_INDEX_DROP,
                   "keeping the group index");
}

int tq__sqlite_init(tq *db, const tq_grant *grants, size_t n, int *found)
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
        tq__sqlite_readonly_why(path, why, sizeof why);
        return tq__seterr(db, TQ_ECONN, "the store '%s' is read-only%s", path,
                          why[0] ? why : " for this user");
    }

    /* WAL is a property of the file; switching needs no other connection
     * to be writing, and is a no-op when it is already on. */
    int src = sqlite3_exec(c->h, "PRAGMA journal_mode = WAL", NULL, NULL, &err);
    sqlite3_free(err);
    if (src != SQLITE_OK)
        return tq__sqlite_fail_rc(db, src, "switching to WAL");
    if ((rc = begin(db)))
        return rc;
    sqlite3_stmt *s = NULL;
    src = sqlite3_prepare_v2(c->h, tq__sqlite_sql(S_SCHEMA_VERSION), -1, &s, NULL);
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
            rc = tq__sqlite_fail_rc(db, src, "creating the schema");
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
            rc = tq__sqlite_fail_rc(db, src, "recording the schema version");
            goto fail;
        }
    }
    /* Statements prepared against the old schema are stale. */
    for (int i = 0; i < S_COUNT; i++) {
        sqlite3_finalize(c->stmt[i]);
        c->stmt[i] = NULL;
    }
    if ((rc = tq__sqlite_sync_indexes(db)))
        goto fail;
    return commit(db);
fail:
    tq__sqlite_rollback(db);
    return rc;
}

const char *tq__sqlite_migration(int version)
{
    return version >= 1 && version <= SCHEMA_VERSION ? migrations[version - 1] : NULL;
}
