/*
 * serve_routes.c - what `tq serve` answers, once a request has arrived
 * whole (serve_http.c calls serve_get and serve_post):
 *
 *   GET  /metrics              Prometheus text exposition format
 *   GET  /                     the dashboard (tools/serve/, compiled in)
 *   GET  /api/overview         what the dashboard shows: queues with their
 *                              counts, chart and durations; workers
 *   GET  /api/queues           tq queue --json
 *   GET  /api/workers          tq workers --json
 *   GET  /api/schedules        tq cron list --json
 *   GET  /api/jobs             tq list --json (payloads cut), paged by
 *                              ?state= &queue= &before=ID &limit=
 *   GET  /api/jobs/ID          tq show --json
 *   POST /api/jobs/ID/retry    /api/jobs/ID/cancel
 *   POST /api/queues/Q/pause   /api/queues/Q/resume   /api/queues/Q/retry-dead
 *                              only with the token (--token-file), which
 *                              comes as "Authorization: Bearer T", as
 *                              "X-TQ-Token: T" or as a form field "token"
 */
#define _GNU_SOURCE
#include "serve.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    PAYLOAD_PREVIEW = 256, /* bytes of a payload a job list shows */
    LIST_MAX = 500,        /* jobs one page may ask for */
};

/* The dashboard's files (serve_assets.c, made by cmake/embed.cmake). */
extern const unsigned char asset_dashboard_html[], asset_dashboard_css[],
    asset_dashboard_js[];
extern const size_t asset_dashboard_html_len, asset_dashboard_css_len,
    asset_dashboard_js_len;

/* ---- failures ------------------------------------------------------------ */

/* A library failure: 404 for what does not exist, 400 for what the
 * library refused, 503 for a store that is busy or gone, else 500. */
static enum MHD_Result send_failure(struct MHD_Connection *c, server *s, int rc)
{
    /* Called with s->mu held, so the message is this request's. */
    tq *db = s->db;
    unsigned status = rc == TQ_ENOTFOUND                   ? MHD_HTTP_NOT_FOUND
                      : rc == TQ_EINVAL || rc == TQ_ESTATE ? MHD_HTTP_CONFLICT
                      : rc == TQ_EBUSY || rc == TQ_ECONN   ? MHD_HTTP_SERVICE_UNAVAILABLE
                                                         : MHD_HTTP_INTERNAL_SERVER_ERROR;
    if (rc == TQ_EINVAL)
        status = MHD_HTTP_BAD_REQUEST;
    const char *msg = tq_errmsg(db);
    fprintf(stderr, "tq serve: %s\n", msg && *msg ? msg : tq_strerror(rc));
    enum MHD_Result ret =
        serve_send_error(c, status, msg && *msg ? msg : tq_strerror(rc));
    serve_reconnect(s, &s->db, rc);
    return ret;
}

/* ---- GET ----------------------------------------------------------------- */

/* /api/jobs?state=&queue=&before=&limit=: a page of jobs, payloads cut. */
static enum MHD_Result api_jobs(server *s, struct MHD_Connection *c)
{
    tq_list_opts o = TQ_LIST_OPTS_INIT;
    const char *state = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state");
    const char *queue = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "queue");
    const char *before = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "before");
    const char *limit = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    int64_t v;
    tq_state st;
    if (state && *state) {
        if (tq_state_parse(&st, state))
            return serve_send_error(c, MHD_HTTP_BAD_REQUEST, "unknown state");
        o.state = (int)st;
    }
    if (queue && *queue) {
        if (tq_name_check(queue))
            return serve_send_error(c, MHD_HTTP_BAD_REQUEST, "bad queue name");
        o.queue = queue;
    }
    if (before && *before) {
        if (serve_parse_i64(before, 1, INT64_MAX, &v))
            return serve_send_error(c, MHD_HTTP_BAD_REQUEST, "before: expected a job id");
        o.before_id = v;
    }
    o.limit = 50;
    if (limit && *limit) {
        if (serve_parse_i64(limit, 1, LIST_MAX, &v))
            return serve_send_error(c, MHD_HTTP_BAD_REQUEST, "limit: expected 1 to 500");
        o.limit = (size_t)v;
    }
    tq_job *jobs;
    size_t n;
    pthread_mutex_lock(&s->mu);
    int rc = tq_job_list(&jobs, &n, s->db, &o);
    enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return ret;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        tq_job *j = &jobs[i];
        size_t keep = j->payload_len;
        if (keep > PAYLOAD_PREVIEW) { /* cut where a UTF-8 character starts */
            keep = PAYLOAD_PREVIEW;
            const unsigned char *b = j->payload;
            for (int k = 0; k < 3 && (b[keep] & 0xC0) == 0x80; k++)
                keep--; /* binary stays cut at 256: base64, as cli_json_bytes decides */
        }
        json_t *jo = cli_job_json(j, 0);
        cli_json_bytes(jo, "payload", j->payload, keep);
        json_object_set_new(jo, "payload_cut", json_boolean(keep < j->payload_len));
        json_array_append_new(a, jo);
    }
    tq_job_array_free(jobs, n);
    return serve_send_json(c, MHD_HTTP_OK, a);
}

/* /api/jobs/ID: as tq show --json. */
static enum MHD_Result api_job(server *s, struct MHD_Connection *c, int64_t id)
{
    tq_job *j;
    pthread_mutex_lock(&s->mu);
    int rc = tq_job_get(&j, s->db, id);
    json_t *o = rc ? NULL : cli_job_show_json(s->db, j);
    enum MHD_Result ret = rc == TQ_ENOTFOUND
                              ? serve_send_error(c, MHD_HTTP_NOT_FOUND, "no such job")
                          : rc ? send_failure(c, s, rc)
                               : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return ret;
    tq_job_free(j);
    return serve_send_json(c, MHD_HTTP_OK, o);
}

/* The dashboard's files, by path. */
static const struct asset {
    const char *path, *ctype;
    const unsigned char *data;
    const size_t *len;
} assets[] = {
    {"/", "text/html; charset=utf-8", asset_dashboard_html, &asset_dashboard_html_len},
    {"/index.html", "text/html; charset=utf-8", asset_dashboard_html,
     &asset_dashboard_html_len},
    {"/dashboard.css", "text/css; charset=utf-8", asset_dashboard_css,
     &asset_dashboard_css_len},
    {"/dashboard.js", "text/javascript; charset=utf-8", asset_dashboard_js,
     &asset_dashboard_js_len},
};

/* /metrics, or /api/overview: one gathering of the store, rendered. */
static enum MHD_Result api_gathered(server *s, struct MHD_Connection *c, int metrics)
{
    gathering g;
    char *buf = NULL;
    size_t len = 0;
    json_t *o = NULL;
    pthread_mutex_lock(&s->mu);
    int rc = serve_gather(s, &g);
    if (!rc && metrics) {
        FILE *f = open_memstream(&buf, &len);
        if (f) {
            serve_render_metrics(f, s, &g);
            fclose(f);
        }
    } else if (!rc) {
        o = serve_overview_json(s, &g);
    }
    enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return ret;
    serve_gathering_free(&g);
    if (!metrics)
        return serve_send_json(c, MHD_HTTP_OK, o);
    if (!buf)
        return MHD_NO;
    return serve_send_body(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                           buf, len, 0);
}

/* The lists of /api/queues, /api/workers and /api/schedules: each read
 * from the store into rows, then each row as its command's --json shows
 * it. */
typedef struct list_route {
    const char *path;
    const cli_rows *rows;
} list_route;

static const list_route lists[] = {
    {"/api/queues", &cli_queue_rows},
    {"/api/workers", &cli_worker_rows},
    {"/api/schedules", &cli_schedule_rows},
};

static enum MHD_Result api_list(server *s, struct MHD_Connection *c, const list_route *l)
{
    void *rows = NULL;
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    int rc = l->rows->read(&rows, &n, s->db, NULL);
    enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return ret;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, l->rows->json((const char *)rows + i * l->rows->size));
    l->rows->release(rows, n);
    return serve_send_json(c, MHD_HTTP_OK, a);
}

/* GET: what the path names. */
enum MHD_Result serve_get(server *s, struct MHD_Connection *c, const char *url)
{
    int64_t id;
    for (size_t i = 0; i < sizeof assets / sizeof assets[0]; i++)
        if (strcmp(url, assets[i].path) == 0)
            return serve_send_body(c, MHD_HTTP_OK, assets[i].ctype,
                                   (void *)assets[i].data, *assets[i].len, 1);
    if (strcmp(url, "/metrics") == 0 || strcmp(url, "/api/overview") == 0)
        return api_gathered(s, c, url[1] == 'm');
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        if (strcmp(url, lists[i].path) == 0)
            return api_list(s, c, &lists[i]);
    if (strcmp(url, "/api/jobs") == 0)
        return api_jobs(s, c);
    if (strncmp(url, "/api/jobs/", 10) == 0 &&
        serve_parse_i64(url + 10, 1, INT64_MAX, &id) == 0)
        return api_job(s, c, id);
    return serve_send_error(c, MHD_HTTP_NOT_FOUND, "not found");
}

/* ---- POST ---------------------------------------------------------------- */

/* Equal in a time that depends only on want's length, not on where they
 * differ. */
static int token_equal(const char *given, size_t glen, const char *want, size_t wlen)
{
    unsigned char d = glen != wlen;
    for (size_t i = 0; i < wlen; i++)
        d |= (unsigned char)(want[i] ^ (i < glen ? given[i] : 0));
    return d == 0;
}

/* The token the request carries, if any. */
static int has_token(server *s, struct MHD_Connection *c, const request *r)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && strncasecmp(h, "Bearer ", 7) == 0)
        return token_equal(h + 7, strlen(h + 7), s->token, s->token_len);
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-TQ-Token");
    if (h)
        return token_equal(h, strlen(h), s->token, s->token_len);
    if (r->form_token_len && !r->form_token_long)
        return token_equal(r->form_token, r->form_token_len, s->token, s->token_len);
    return 0;
}

/* POST /api/jobs/ID/ACTION or /api/queues/NAME/ACTION. */
enum MHD_Result serve_post(server *s, struct MHD_Connection *c, const char *url,
                           const request *r)
{
    char what[80], act[16];
    const char *slash;
    int is_job = strncmp(url, "/api/jobs/", 10) == 0;
    int is_queue = strncmp(url, "/api/queues/", 12) == 0;
    const char *rest = is_job ? url + 10 : is_queue ? url + 12 : NULL;
    if (!rest || !(slash = strchr(rest, '/')) || (size_t)(slash - rest) >= sizeof what ||
        strlen(slash + 1) >= sizeof act)
        return serve_send_error(c, MHD_HTTP_NOT_FOUND, "not found");
    memcpy(what, rest, (size_t)(slash - rest));
    what[slash - rest] = '\0';
    snprintf(act, sizeof act, "%s", slash + 1);
    int64_t id = 0;
    if (is_job ? serve_parse_i64(what, 1, INT64_MAX, &id) ||
                     (strcmp(act, "retry") != 0 && strcmp(act, "cancel") != 0)
               : tq_name_check(what) ||
                     (strcmp(act, "pause") != 0 && strcmp(act, "resume") != 0 &&
                      strcmp(act, "retry-dead") != 0))
        return serve_send_error(c, MHD_HTTP_NOT_FOUND, "not found");
    if (!s->token)
        return serve_send_error(c, MHD_HTTP_FORBIDDEN,
                                "actions are off: start tq serve with --token-file");
    if (r->too_big)
        return serve_send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large");
    if (!has_token(s, c, r))
        return serve_send_error(c, MHD_HTTP_FORBIDDEN, "a valid token is needed");
    int rc;
    int64_t count = 0;
    json_t *o = json_object();
    pthread_mutex_lock(&s->mu);
    if (is_job) {
        rc = act[0] == 'r' ? tq_job_retry(s->db, id) : tq_job_cancel(s->db, id);
        json_object_set_new(o, "id", json_integer(id));
    } else {
        tq_queue_info qi;
        rc = tq_queue_get(&qi, s->db, what);
        if (!rc && strcmp(act, "retry-dead") == 0) {
            rc = tq_job_retry_dead(&count, s->db, what);
            json_object_set_new(o, "retried", json_integer(count));
        } else if (!rc) {
            tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
            qo.set = TQ_SET_PAUSED;
            qo.paused = act[0] == 'p';
            rc = tq_queue_set(s->db, what, &qo);
        }
        json_object_set_new(o, "queue", json_string(what));
    }
    enum MHD_Result ret = rc ? send_failure(c, s, rc) : MHD_YES;
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        json_decref(o);
        return ret;
    }
    fprintf(stderr, "tq serve: %s %s\n", act, what);
    serve_ask_recount(s);
    json_object_set_new(o, "done", json_string(act));
    return serve_send_json(c, MHD_HTTP_OK, o);
}
