/*
 * serve_render.c - what `tq serve` says of a gathering (serve_gather.c):
 * /metrics in the Prometheus text exposition format, and /api/overview,
 * the JSON the dashboard draws. Called by serve_routes.c.
 */
#define _GNU_SOURCE
#include "serve.h"

#include <string.h>

/* The finished states, in the order of every [3] of a qstat. */
static const tq_state fin[3] = {TQ_DONE, TQ_DEAD, TQ_CANCELLED};

/* ---- /metrics ---------------------------------------------------------- */

/* A label value as the exposition format wants it. */
static void put_label(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(f, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A sample's name and its queue label, up to the label's closing quote. */
static void queue_sample(FILE *f, const char *metric, const char *queue)
{
    fprintf(f, "%s{queue=\"", metric);
    put_label(f, queue);
}

/* The gauges of each queue: jobs by state, delayed, oldest due, paused. */
static void metrics_queues(FILE *f, const gathering *g)
{
    head(f, "tq_jobs", "gauge",
         "Jobs by queue and state: ready and running as of this scrape; waiting, done, "
         "dead and cancelled as of tq_finished_counted_age_seconds ago.");
    for (size_t i = 0; i < g->nrows; i++)
        for (int st = 0; st < TQ_STATE_COUNT; st++) {
            int counted = st != TQ_READY && st != TQ_RUNNING; /* by the thread */
            if (counted && !g->have_count)
                continue;
            queue_sample(f, "tq_jobs", g->rows[i].name);
            fprintf(f, "\",state=\"%s\"} %lld\n", tq_state_name((tq_state)st),
                    (long long)g->rows[i].count[st]);
        }
    head(f, "tq_jobs_delayed", "gauge", "Ready jobs not due yet, by queue.");
    for (size_t i = 0; i < g->nrows; i++) {
        queue_sample(f, "tq_jobs_delayed", g->rows[i].name);
        fprintf(f, "\"} %lld\n", (long long)g->rows[i].delayed);
    }
    head(f, "tq_oldest_ready_age_seconds", "gauge",
         "How long the oldest due ready job of the queue has been due (0: none).");
    for (size_t i = 0; i < g->nrows; i++) {
        queue_sample(f, "tq_oldest_ready_age_seconds", g->rows[i].name);
        fprintf(f, "\"} %.6f\n", (double)g->rows[i].oldest_due_us / 1e6);
    }
    head(f, "tq_queue_paused", "gauge", "1 when the queue is paused.");
    for (size_t i = 0; i < g->nrows; i++) {
        queue_sample(f, "tq_queue_paused", g->rows[i].name);
        fprintf(f, "\"} %d\n", g->rows[i].info && g->rows[i].info->paused);
    }
}

/* What this server read finishing: the counters and the histogram. */
static void metrics_finished(FILE *f, const gathering *g)
{
    head(f, "tq_jobs_finished_total", "counter",
         "Jobs that finished since this server started, by queue and state, as it "
         "read them: not those deleted when done, retried or pruned before it read "
         "them, or committed over a second after they finished.");
    for (size_t i = 0; i < g->nrows; i++)
        for (int k = 0; k < 3; k++) {
            const qstat *q = g->rows[i].seen;
            queue_sample(f, "tq_jobs_finished_total", g->rows[i].name);
            fprintf(f, "\",state=\"%s\"} %lld\n", tq_state_name(fin[k]),
                    (long long)(q ? q->finished[k] : 0));
        }
    head(f, "tq_job_duration_seconds", "histogram",
         "Run time of done jobs (started to finished) since this server started.");
    for (size_t i = 0; i < g->nrows; i++) {
        const qstat *q = g->rows[i].seen;
        int64_t cum = 0;
        for (size_t b = 0; b <= HIST_N; b++) {
            cum += q ? q->hist[b] : 0;
            queue_sample(f, "tq_job_duration_seconds_bucket", g->rows[i].name);
            if (b < HIST_N)
                fprintf(f, "\",le=\"%g\"} %lld\n", serve_hist_le[b], (long long)cum);
            else
                fprintf(f, "\",le=\"+Inf\"} %lld\n", (long long)cum);
        }
        queue_sample(f, "tq_job_duration_seconds_sum", g->rows[i].name);
        fprintf(f, "\"} %.6f\n", q ? q->dur_sum : 0.0);
        queue_sample(f, "tq_job_duration_seconds_count", g->rows[i].name);
        fprintf(f, "\"} %lld\n", (long long)cum);
    }
}

/* The workers by status, and this server's own gauges. */
static void metrics_server(FILE *f, server *s, const gathering *g)
{
    int64_t by[3] = {0, 0, 0};
    for (size_t i = 0; i < g->nworkers; i++)
        by[g->workers[i].alive ? 0 : g->workers[i].stopped_at ? 1 : 2]++;
    head(f, "tq_workers", "gauge",
         "Registered workers by status: alive, stopped, or gone (silent past their "
         "lease).");
    fprintf(f, "tq_workers{status=\"alive\"} %lld\n", (long long)by[0]);
    fprintf(f, "tq_workers{status=\"stopped\"} %lld\n", (long long)by[1]);
    fprintf(f, "tq_workers{status=\"gone\"} %lld\n", (long long)by[2]);
    if (g->have_count) {
        head(f, "tq_finished_counted_age_seconds", "gauge",
             "How old the count of waiting, done, dead and cancelled jobs is.");
        fprintf(f, "tq_finished_counted_age_seconds %.3f\n",
                (double)(now_us() - g->counted_at) / 1e6);
        head(f, "tq_finished_count_duration_seconds", "gauge",
             "How long the last count of waiting, done, dead and cancelled jobs took.");
        fprintf(f, "tq_finished_count_duration_seconds %.6f\n",
                (double)g->count_us / 1e6);
    }
    if (g->have_wal) {
        head(f, "tq_sqlite_wal_bytes", "gauge",
             "The size of the SQLite store's -wal file.");
        fprintf(f, "tq_sqlite_wal_bytes %lld\n", (long long)g->wal.bytes);
        head(f, "tq_sqlite_checkpoint_held", "gauge",
             "1 while a reader's open transaction holds the store's checkpoint back "
             "(the -wal file grows; docs/operations.md).");
        fprintf(f, "tq_sqlite_checkpoint_held %d\n", g->wal.held);
        head(
            f, "tq_sqlite_checkpoint_held_seconds", "gauge",
            "For how long this server has seen the checkpoint held back (0: it is not).");
        fprintf(f, "tq_sqlite_checkpoint_held_seconds %.3f\n",
                g->wal_held_since ? (double)(now_us() - g->wal_held_since) / 1e6 : 0.0);
    }
    head(f, "tq_serve_start_time_seconds", "gauge", "When this server started.");
    fprintf(f, "tq_serve_start_time_seconds %.3f\n", (double)s->started_at / 1e6);
    head(f, "tq_scrape_duration_seconds", "gauge",
         "How long this scrape took to read the store.");
    fprintf(f, "tq_scrape_duration_seconds %.6f\n", (double)g->took_us / 1e6);
}

void serve_render_metrics(FILE *f, server *s, const gathering *g)
{
    metrics_queues(f, g);
    metrics_finished(f, g);
    metrics_server(f, s, g);
}

/* ---- /api/overview ------------------------------------------------------ */

json_t *serve_overview_json(server *s, const gathering *g)
{
    json_t *o = json_object();
    char now_buf[40];
    int64_t now = now_us();
    json_object_set_new(o, "version", json_string(TQ_VERSION));
    json_object_set_new(o, "engine", json_string(tq_engine_name(s->db)));
    json_object_set_new(o, "store", cli_json_text(tq_store_name(s->db)));
    json_object_set_new(o, "now",
                        json_string(tq_time_format(now_buf, sizeof now_buf, now)));
    json_object_set_new(o, "actions", json_boolean(s->token != NULL));
    json_object_set_new(o, "finished_counted_at", cli_json_time(g->counted_at));
    json_object_set_new(o, "gather_us", json_integer(g->took_us));
    json_t *qs = json_array();
    int64_t this_minute = now / 60000000;
    for (size_t i = 0; i < g->nrows; i++) {
        const qrow *r = &g->rows[i];
        const qstat *q = r->seen;
        json_t *j = json_object(), *chart = json_array(), *totals = json_object();
        json_object_set_new(j, "name", cli_json_text(r->name));
        json_object_set_new(j, "paused", json_boolean(r->info && r->info->paused));
        json_object_set_new(j, "timeout_us",
                            json_integer(r->info ? r->info->timeout_us : 0));
        json_object_set_new(j, "retain_done_us",
                            json_integer(r->info ? r->info->retain_done_us : 0));
        json_object_set_new(j, "retain_dead_us",
                            json_integer(r->info ? r->info->retain_dead_us : 0));
        json_object_set_new(j, "counts", cli_counts_json(r->count));
        json_object_set_new(j, "delayed", json_integer(r->delayed));
        json_object_set_new(j, "oldest_ready_age_us", json_integer(r->oldest_due_us));
        for (int64_t m = this_minute - HISTORY_MIN + 1; m <= this_minute; m++) {
            size_t slot = (size_t)(m % HISTORY_MIN);
            json_array_append_new(
                chart,
                json_integer(q && q->minute_no[slot] == m ? q->minute_n[slot] : 0));
        }
        json_object_set_new(j, "done_per_minute", chart);
        for (int k = 0; k < 3; k++)
            json_object_set_new(totals, tq_state_name(fin[k]),
                                json_integer(q ? q->finished[k] : 0));
        json_object_set_new(j, "finished_total", totals);
        int64_t d[RECENT];
        size_t nd = q ? q->nrecent : 0;
        if (nd)
            memcpy(d, q->recent, nd * sizeof d[0]);
        json_object_set_new(j, "recent", json_integer((json_int_t)nd));
        json_object_set_new(j, "p50_us", json_integer(tq_percentile(d, nd, 0.50)));
        json_object_set_new(j, "p95_us", json_integer(tq_percentile(d, nd, 0.95)));
        json_array_append_new(qs, j);
    }
    json_object_set_new(o, "queues", qs);
    json_t *ws = json_array();
    for (size_t i = 0; i < g->nworkers; i++) {
        json_t *w = cli_worker_json(&g->workers[i]);
        int64_t running = 0;
        for (size_t k = 0; k < g->nby_worker; k++)
            if (strcmp(g->by_worker[k].name, g->workers[i].name) == 0)
                running = g->by_worker[k].n;
        json_object_set_new(w, "running", json_integer(running));
        json_array_append_new(ws, w);
    }
    json_object_set_new(o, "workers", ws);
    return o;
}
