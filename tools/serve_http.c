/*
 * serve_http.c - `tq serve`'s HTTP plumbing, on libmicrohttpd: the daemon
 * and its limits, the deadline a request must arrive within (a thread
 * watches the open connections), a request's body and its form token,
 * the Host check on loopback, and the responses with their headers. A
 * whole request goes to serve_get or serve_post (serve_routes.c). Called
 * by cmd/serve.c, which starts the daemon and the watchdog.
 */
#define _GNU_SOURCE
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    BODY_MAX = 4096,  /* the most a POST body may be */
    CONN_MAX = 256,   /* connections in all */
    CONN_PER_IP = 32, /* connections from one address */
    IDLE_S = 10,      /* a connection silent this long is closed */
};
/* The longest a request may take to arrive whole, from the connection's
 * start or the end of the response before it. */
#define REQUEST_US ((int64_t)10000000)

/* ---- the request deadline ------------------------------------------------ */

/*
 * libmicrohttpd's own timeout counts only silence: a client that sent a
 * header line every few seconds kept its connection for as long as it
 * liked, and 256 such clients held every slot. So a request must arrive
 * whole (request line, headers and body) within REQUEST_US of its start:
 * the connection's opening, or the end of the response before it on a
 * connection kept alive. The thread serve_watchdog() shuts down the socket of a
 * connection past that; libmicrohttpd sees its stream end and closes the
 * connection itself. It owns the descriptor: a close() here would let the
 * kernel give the number to another file while libmicrohttpd still uses it.
 *
 * Each open connection has a conn in s->conns (its socket context) from
 * on_connection's STARTED to its CLOSED. libmicrohttpd calls CLOSED before
 * it closes the socket, so while s->wmu is held every fd in the list is
 * still its connection's own. Every field of a conn is s->wmu's.
 */
typedef struct conn {
    struct conn *prev, *next;
    server *s;
    MHD_socket fd;
    int64_t since; /* mono_us(): when the current request began */
    int waiting;   /* the current request has not arrived whole */
} conn;

static void conn_add(server *s, struct MHD_Connection *c, void **socket_context)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn *k = ci ? calloc(1, sizeof *k) : NULL;
    if (!k) {
        if (ci) /* untimed, it could be held for ever: refused instead */
            shutdown(ci->connect_fd, SHUT_RDWR);
        return;
    }
    k->s = s;
    k->fd = ci->connect_fd;
    k->since = mono_us();
    k->waiting = 1;
    pthread_mutex_lock(&s->wmu);
    k->next = s->conns;
    if (k->next)
        k->next->prev = k;
    s->conns = k;
    pthread_mutex_unlock(&s->wmu);
    *socket_context = k;
}

static void conn_remove(server *s, conn *k)
{
    pthread_mutex_lock(&s->wmu);
    if (k->prev)
        k->prev->next = k->next;
    else
        s->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    pthread_mutex_unlock(&s->wmu);
    free(k);
}

/* MHD_OPTION_NOTIFY_CONNECTION, in the thread that serves the connection. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_add(s, c, socket_context);
    } else if (*socket_context) {
        conn_remove(s, *socket_context);
        *socket_context = NULL;
    }
}

/* Starts the clock of the connection's next request (waiting = 1), or
 * stops it: the request has arrived whole, or is answered before it did. */
static void request_clock(struct MHD_Connection *c, int waiting)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *k = ci ? ci->socket_context : NULL;
    if (!k)
        return;
    pthread_mutex_lock(&k->s->wmu);
    k->waiting = waiting;
    if (waiting)
        k->since = mono_us();
    pthread_mutex_unlock(&k->s->wmu);
}

/* Shuts down each connection whose request is late, then sleeps until the
 * next deadline in the list, REQUEST_US at most. No deadline set while it
 * sleeps comes sooner: a clock started at t ends at t + REQUEST_US. */
void *serve_watchdog(void *arg)
{
    server *s = arg;
    pthread_mutex_lock(&s->wmu);
    while (!s->wstop) {
        int64_t now = mono_us(), wake = now + REQUEST_US;
        for (conn *k = s->conns; k; k = k->next) {
            int64_t due = k->since + REQUEST_US;
            if (!k->waiting)
                continue;
            if (due <= now) {
                shutdown(k->fd, SHUT_RDWR);
                k->waiting = 0; /* once is enough: libmicrohttpd closes it */
            } else if (due < wake) {
                wake = due;
            }
        }
        struct timespec ts = serve_mono_at(wake);
        pthread_cond_timedwait(&s->wcv, &s->wmu, &ts);
    }
    pthread_mutex_unlock(&s->wmu);
    return NULL;
}

/* ---- requests ------------------------------------------------------------ */

static enum MHD_Result on_form(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *filename, const char *content_type,
                               const char *transfer_encoding, const char *data,
                               uint64_t off, size_t size)
{
    (void)kind, (void)filename, (void)content_type, (void)transfer_encoding;
    request *r = cls;
    if (!key || strcmp(key, "token") != 0) /* a multipart part may have no name */
        return MHD_YES;
    if (off == 0 && r->form_tokens++) /* a second token field: none counts */
        r->form_token_long = 1;
    if (off + size > TOKEN_MAX) {
        r->form_token_long = 1;
        return MHD_YES;
    }
    if (size)
        memcpy(r->form_token + off, data, size);
    if (off + size > r->form_token_len)
        r->form_token_len = (size_t)(off + size);
    return MHD_YES;
}

/* MHD_OPTION_NOTIFY_COMPLETED: the request is answered (or given up). */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)toe;
    request *r = *con_cls;
    request_clock(c, 1); /* the next request on this connection has its own */
    if (r) {
        if (r->pp)
            MHD_destroy_post_processor(r->pp);
        free(r);
        *con_cls = NULL;
    }
}

static void add_common_headers(struct MHD_Response *resp, const char *ctype)
{
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(
        resp, "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
}

enum MHD_Result serve_send_body(struct MHD_Connection *c, unsigned status,
                                const char *ctype, void *body, size_t len, int persistent)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body, persistent ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        if (!persistent)
            free(body);
        return MHD_NO;
    }
    add_common_headers(resp, ctype);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, "Allow", "GET, HEAD, POST");
    request_clock(c, 0); /* libmicrohttpd reads no more of an answered request */
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result serve_send_json(struct MHD_Connection *c, unsigned status, json_t *v)
{
    static char oom[] = "{\"error\":\"out of memory\"}";
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!s)
        return serve_send_body(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json", oom,
                               sizeof oom - 1, 1);
    return serve_send_body(c, status, "application/json", s, strlen(s), 0);
}

enum MHD_Result serve_send_error(struct MHD_Connection *c, unsigned status,
                                 const char *msg)
{
    json_t *o = json_object();
    json_object_set_new(o, "error", cli_json_text(msg));
    return serve_send_json(c, status, o);
}

int serve_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (!text || !*text || *text == '+' || *text == '-' || *text == ' ')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* On a loopback address, only a Host that names one: a page elsewhere
 * whose name a DNS answer turned into 127.0.0.1 (DNS rebinding) cannot read
 * the store through a browser. */
static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind, (void)value;
    if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        ++*(int *)cls;
    return MHD_YES;
}

static int host_ok(const server *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!s->loopback || !h)
        return 1;
    int hosts = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_host, &hosts);
    if (hosts != 1)
        return 0;
    char name[64];
    size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":");
    if (n >= sizeof name)
        return 0;
    memcpy(name, h, n);
    name[n] = '\0';
    struct in_addr a;
    return strcasecmp(name, "localhost") == 0 || strcmp(name, "[::1]") == 0 ||
           (inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *s = cls;
    request *r = *con_cls;
    int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (!r) { /* the headers are in: the body, if any, comes next */
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        *con_cls = r;
        if (!host_ok(s, c))
            return serve_send_error(c, MHD_HTTP_FORBIDDEN,
                                    "this server answers to localhost");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        int64_t len;
        /* (one that does not parse is the HTTP library's to refuse) */
        if (cl && serve_parse_i64(cl, 0, INT64_MAX, &len) == 0 && len > BODY_MAX) {
            r->too_big = 1; /* answered before the body is read */
            return serve_send_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
                                    "request body too large");
        }
        if (is_post && s->token) /* NULL when the body is not a form */
            r->pp = MHD_create_post_processor(c, 1024, on_form, r);
        return MHD_YES;
    }
    if (*upload_size) {
        r->body += *upload_size;
        if (r->body > BODY_MAX) /* a chunked body grown too large: hang up */
            return MHD_NO;
        if (r->pp)
            MHD_post_process(r->pp, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    /* The request is in whole: its answer may take longer than the deadline
     * (a store that is slow to answer), and is not the client's doing. */
    request_clock(c, 0);
    if (strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
        strcmp(method, MHD_HTTP_METHOD_HEAD) == 0)
        return r->body ? serve_send_error(c, MHD_HTTP_BAD_REQUEST, "a GET has no body")
                       : serve_get(s, c, url);
    if (is_post)
        return serve_post(s, c, url, r);
    return serve_send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fputs("tq serve: ", stderr);
    vfprintf(stderr, fmt, ap);
}

struct MHD_Daemon *serve_start_http(server *s, const char *listen,
                                    struct sockaddr_storage *addr)
{
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    errno = 0;
    /* Slow clients: a connection silent for IDLE_S is closed, a request
     * that has not arrived whole within REQUEST_US too (on_connection and
     * serve_watchdog()), and one address holds at most CONN_PER_IP connections,
     * so that a few addresses cannot take every slot for that long. */
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
                         on_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)addr,
                         MHD_OPTION_THREAD_POOL_SIZE, 4u, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)CONN_MAX, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                         (unsigned)CONN_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)IDLE_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                         (size_t)32768, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!d)
        cli_error("serve", "cannot listen on %s: %s", listen,
                  errno ? strerror(errno) : "the HTTP server did not start");
    return d;
}
