/*
 * postgres/cron.c - the PostgreSQL engine: periodic jobs: the schedules' statements.
 */
#include "pg_int.h"

/* clang-format off */
const char *const tq__pg_sql_cron[S_COUNT] = {
    [S_SCHEDULE_PUT] =
        "INSERT INTO TQ.schedules (name, queue, spec, tz, payload, priority, overlap_skip,"
        " next_slot) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO UPDATE"
        " SET queue = excluded.queue, spec = excluded.spec, tz = excluded.tz,"
        " payload = excluded.payload, priority = excluded.priority,"
        " overlap_skip = excluded.overlap_skip,"
        " next_slot = greatest(excluded.next_slot, TQ.schedules.last_slot + 1)",
    [S_SCHEDULE_REMOVE] = "DELETE FROM TQ.schedules WHERE name = $1",
    [S_SCHEDULE_LIST] = "SELECT name, queue, spec, tz, payload, priority, overlap_skip,"
                        " next_slot, last_slot, last_job FROM TQ.schedules ORDER BY name",
    [S_SCHEDULE_FIRE] = "SELECT TQ.fire_schedule($1, $2, $3, $4, $5, $6)",
};
/* clang-format on */

/* ---- periodic jobs ------------------------------------------------------ */

int tq__pg_schedule_put(tq *db, const char *name, const tq_schedule_opts *o,
                        int64_t next_us)
{
    params p = {0};
    p_text(&p, name);
    p_text(&p, o->queue);
    p_text(&p, o->spec);
    p_text(&p, o->tz ? o->tz : "UTC");
    p_bytes(&p, o->payload, o->payload_len);
    p_i64(&p, o->priority);
    p_text(&p, o->overlap_skip ? "true" : "false");
    p_i64(&p, next_us);
    return tq__pg_run_count(db, S_SCHEDULE_PUT, &p, NULL, "saving the schedule");
}

int tq__pg_schedule_remove(tq *db, const char *name)
{
    params p = {0};
    int64_t n = 0;
    p_text(&p, name);
    int rc = tq__pg_run_count(db, S_SCHEDULE_REMOVE, &p, &n, "removing the schedule");
    if (!rc && n == 0)
        rc = tq__seterr(db, TQ_ENOTFOUND, "no schedule named '%s'", name);
    return rc;
}

static int read_schedule(tq *db, const PGresult *r, int row, void *out, void *arg)
{
    char name[80], queue[80], spec[160], tz[80];
    (void)arg;
    g_strbuf(r, row, 0, name, sizeof name);
    g_strbuf(r, row, 1, queue, sizeof queue);
    g_strbuf(r, row, 2, spec, sizeof spec);
    g_strbuf(r, row, 3, tz, sizeof tz);
    return tq__schedule_fill(db, out, name, queue, spec, tz, PQgetvalue(r, row, 4),
                             (size_t)PQgetlength(r, row, 4), (int)g_i64(r, row, 5),
                             (int)g_i64(r, row, 6), g_i64(r, row, 7), g_i64(r, row, 8),
                             g_i64(r, row, 9));
}

static void free_schedules(void *v, size_t n)
{
    tq_schedule_array_free(v, n);
}

int tq__pg_schedule_list(tq *db, tq_schedule **out, size_t *out_n)
{
    int rc;
    *out = tq__pg_rows(db, S_SCHEDULE_LIST, NULL, "listing schedules", sizeof **out,
                       read_schedule, NULL, free_schedules, out_n, &rc);
    return rc;
}

int tq__pg_schedule_fire(tq *db, const tq_schedule *s, int64_t slot_us, int64_t next_us,
                         int64_t *job)
{
    int rc;
    params p = {0};
    p_text(&p, s->name);
    p_i64(&p, s->next_slot_us);
    p_i64(&p, slot_us);
    p_i64(&p, next_us);
    p_text(&p, s->spec);
    p_text(&p, s->tz);
    PGresult *r = tq__pg_run(db, S_SCHEDULE_FIRE, &p, &rc, "enqueueing a periodic job");
    *job = r && PQntuples(r) ? g_i64(r, 0, 0) : 0;
    PQclear(r);
    return rc;
}
