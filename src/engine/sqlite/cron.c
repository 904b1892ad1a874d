/*
 * sqlite/cron.c - the SQLite engine: periodic jobs: the schedules' statements.
 */
#include "sqlite_int.h"

/* clang-format off */
const char *const tq__sqlite_sql_cron[S_COUNT] = {
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
};
/* clang-format on */

/* ---- periodic jobs ------------------------------------------------------ */

int tq__sqlite_schedule_put(tq *db, const char *name, const tq_schedule_opts *o,
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

int tq__sqlite_schedule_remove(tq *db, const char *name)
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

static int read_schedule(tq *db, sqlite3_stmt *s, void *row, void *arg)
{
    (void)arg;
    return tq__schedule_fill(
        db, row, (const char *)sqlite3_column_text(s, 0),
        (const char *)sqlite3_column_text(s, 1), (const char *)sqlite3_column_text(s, 2),
        (const char *)sqlite3_column_text(s, 3), sqlite3_column_blob(s, 4),
        (size_t)sqlite3_column_bytes(s, 4), sqlite3_column_int(s, 5),
        sqlite3_column_int(s, 6), sqlite3_column_int64(s, 7), sqlite3_column_int64(s, 8),
        sqlite3_column_int64(s, 9));
}

static void free_schedules(void *v, size_t n)
{
    tq_schedule_array_free(v, n);
}

int tq__sqlite_schedule_list(tq *db, tq_schedule **out, size_t *out_n)
{
    int rc;
    sqlite3_stmt *s = stmt(db, S_SCHEDULE_LIST, &rc);
    *out = tq__sqlite_rows(db, s, sizeof **out, read_schedule, NULL, free_schedules,
                           "listing schedules", out_n, &rc);
    return rc;
}

int tq__sqlite_schedule_fire(tq *db, const tq_schedule *sc, int64_t slot_us,
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
    if ((rc = tq__sqlite_query_int(db, S_SCHEDULE_BUSY, name, 0, &busy,
                                   "enqueueing a periodic job")))
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
    tq__sqlite_rollback(db);
    *job = 0;
    return rc;
}
