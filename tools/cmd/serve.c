/*
 * serve.c - `tq serve`: an HTTP server over the store, on libmicrohttpd,
 * with Prometheus metrics, a dashboard, the JSON it reads and token-guarded
 * actions (serve_routes.c lists the routes). Called by tq.c's command
 * table. This file reads the options, opens the store twice (requests; the
 * counter thread), and runs the threads until SIGINT or SIGTERM; the
 * other parts are serve_http.c, serve_routes.c, serve_gather.c and
 * serve_render.c (serve.h).
 *
 * What a request counts. Ready and running jobs are counted by each
 * request, each along its own index: they cost what is in flight.
 * Finished jobs are kept by the million, so no request walks them: each
 * reads only what finished since the one before (tq_finished_since: the
 * counters, the duration histogram, the chart of done jobs per minute),
 * and a thread on a connection of its own counts every kept done, dead and
 * cancelled job, and the waiting ones (which SQLite finds through every
 * dependency row kept), now and then (the gauges; an action asks it for a
 * new count at once).
 */
#define _GNU_SOURCE
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "tq serve [--listen ADDR:PORT] [--token-file FILE] [-d|--db URL]";
static const char help[] =
    "Serves the store over HTTP until SIGINT or SIGTERM:\n"
    "  /             a dashboard: queues, workers, dead jobs, one job's detail\n"
    "  /metrics      Prometheus metrics (tq_jobs, tq_oldest_ready_age_seconds,\n"
    "                tq_jobs_finished_total, tq_job_duration_seconds, "
    "tq_workers)\n"
    "  /api/...      the JSON the dashboard reads (overview, queues, workers,\n"
    "                schedules, jobs?state=&queue=&before=&limit=, jobs/ID)\n"
    "Actions (retry or cancel a job; pause, resume or retry the dead jobs of a\n"
    "queue) are POSTs to /api/jobs/ID/retry|cancel and\n"
    "/api/queues/NAME/pause|resume|retry-dead, with the token as\n"
    "'Authorization: Bearer TOKEN'. Without --token-file they answer 403.\n\n"
    "  --listen ADDR:PORT  where to listen (default 127.0.0.1:8080; port 0:\n"
    "                      any free one); on an address that is not\n"
    "                      loopback it warns unless a token is set\n"
    "  --token-file FILE   the token for actions: FILE's first line, 16 to\n"
    "                      1024 characters (- for stdin)\n";

typedef struct serve_args {
    const char *url, *listen;
    const char *token_file;
    struct sockaddr_storage addr; /* --listen's */
    socklen_t addrlen;
    int loopback;
    char *token; /* --token-file's first line, or NULL */
} serve_args;

/* ---- the options ----------------------------------------------------------- */

/* --token-file: its first line, without the line end; -1 after saying
 * what is wrong. */
static int read_token(const char *path, char **out)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        cli_error("serve", "--token-file %s: %s", path, strerror(errno));
        return -1;
    }
    char buf[TOKEN_MAX + 2];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int err = ferror(f) ? errno : 0;
    if (f != stdin)
        fclose(f);
    if (err) {
        cli_error("serve", "--token-file %s: %s", path, strerror(err));
        return -1;
    }
    if (memchr(buf, '\0', n)) {
        cli_error("serve", "--token-file %s: the token has a NUL byte", path);
        return -1;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    n = strlen(buf);
    if (n > TOKEN_MAX) {
        cli_error("serve", "--token-file %s: the token is longer than %d bytes", path,
                  TOKEN_MAX);
        return -1;
    }
    if (n < 16) {
        cli_error("serve", "--token-file %s: the token needs at least 16 characters",
                  path);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] <= ' ' || (unsigned char)buf[i] >= 0x7f) {
            cli_error("serve",
                      "--token-file %s: the token must be printable ASCII without "
                      "spaces",
                      path);
            return -1;
        }
    *out = strdup(buf);
    return *out ? 0 : -1;
}

/* ADDR:PORT ([ADDR]:PORT for IPv6) into *out; -1 after saying why not. */
static int parse_listen(const char *text, struct sockaddr_storage *out, socklen_t *len,
                        int *loopback)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || strlen(text) >= sizeof host) {
        cli_error("serve", "--listen '%s': expected ADDRESS:PORT, e.g. 127.0.0.1:8080",
                  text);
        return -1;
    }
    size_t hl = (size_t)(colon - text);
    memcpy(host, text, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    int64_t port;
    if (serve_parse_i64(colon + 1, 0, 65535, &port)) {
        cli_error("serve", "--listen '%s': the port must be 0 to 65535", text);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE},
                    *res;
    int e = getaddrinfo(host, colon + 1, &hints, &res);
    if (e) {
        cli_error("serve", "--listen '%s': %s", text, gai_strerror(e));
        return -1;
    }
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    if (out->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)out;
        *loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)out;
        *loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}

static const serve_args defaults = {.listen = "127.0.0.1:8080"};

static const cli_opt opts[] = {CLI_OPT_STRING(0, "listen", serve_args, listen),
                               CLI_OPT_STRING(0, "token-file", serve_args, token_file),
                               CLI_OPT_END};

/* After the options: 0, or the exit code of a bad command line. */
static int serve_parse(void *args, const char **url, int argc, char **argv)
{
    serve_args *a = args;
    int ex = cli_no_args(&cmd_serve, argc, argv, optind);
    if (ex)
        return ex;
    a->url = cli_url(*url);
    if (parse_listen(a->listen, &a->addr, &a->addrlen, &a->loopback))
        return EXIT_USAGE;
    if (a->token_file && read_token(a->token_file, &a->token))
        return EXIT_USAGE;
    return 0;
}

/* ---- the server ------------------------------------------------------------ */

/* A condition variable whose timed waits follow CLOCK_MONOTONIC, so that a
 * change of the wall clock neither stretches nor cuts them. */
static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* The line the tests (and people) wait for, once the server answers. */
static void announce(const server *s, struct MHD_Daemon *d, const char *listen,
                     const char *store)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char shown[300];
    snprintf(shown, sizeof shown, "%.*s:%u", (int)(strrchr(listen, ':') - listen), listen,
             di ? di->port : 0);
    if (!s->loopback && !s->token)
        fprintf(stderr,
                "tq serve: warning: %s is not a loopback address and no token is "
                "set: anyone who can reach it sees the store's jobs\n",
                listen);
    printf("tq serve: listening on http://%s/ (store %s; actions %s)\n", shown, store,
           s->token ? "on, with the token" : "off");
    fflush(stdout);
}

/* Sets *flag under mu, wakes the thread t waiting on cv, and joins it. */
static void stop_thread(pthread_mutex_t *mu, pthread_cond_t *cv, int *flag, pthread_t t)
{
    pthread_mutex_lock(mu);
    *flag = 1;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
    pthread_join(t, NULL);
}

/* Serves until SIGINT or SIGTERM: libmicrohttpd's threads, and
 * serve_counter() and serve_watchdog() beside them. Returns the exit
 * status. */
static int serve_until_stopped(server *s, const char *listen,
                               struct sockaddr_storage *addr)
{
    /* Stop signals go to sigwait below, in this thread only: blocked here,
     * before any other thread starts, they are blocked in all of them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t counter_thread, watch_thread;
    if (pthread_create(&counter_thread, NULL, serve_counter, s)) {
        cli_error("serve", "cannot start a thread");
        return EXIT_RUNTIME;
    }
    int ex = 0;
    if (pthread_create(&watch_thread, NULL, serve_watchdog, s)) {
        cli_error("serve", "cannot start a thread");
        ex = EXIT_RUNTIME;
        goto stop_counter;
    }
    /* Read before the HTTP threads start: a reconnect there replaces s->db. */
    char store[600];
    snprintf(store, sizeof store, "%s", tq_store_name(s->db));
    struct MHD_Daemon *d = serve_start_http(s, listen, addr);
    if (!d) {
        ex = EXIT_RUNTIME;
        goto stop_watch;
    }
    announce(s, d, listen, store);
    int sig;
    sigwait(&stop, &sig);
    fprintf(stderr, "tq serve: stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_stop_daemon(d);
stop_watch:
    stop_thread(&s->wmu, &s->wcv, &s->wstop, watch_thread);
stop_counter:
    stop_thread(&s->cmu, &s->ccv, &s->stop, counter_thread);
    return ex;
}

/* The server over the store at url: its locks, and its two connections
 * (requests; the counter thread). 0, or the exit code after saying why
 * not. */
static int server_open(server *s, const serve_args *a)
{
    int ex = 0;
    *s = (server){.url = a->url,
                  .token = a->token,
                  .token_len = a->token ? strlen(a->token) : 0,
                  .loopback = a->loopback};
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->cmu, NULL);
    pthread_mutex_init(&s->wmu, NULL);
    cond_init_mono(&s->ccv);
    cond_init_mono(&s->wcv);
    s->started_at = now_us();
    s->db = cli_open("serve", a->url, 0, &ex);
    if (s->db)
        s->cdb = cli_open("serve", a->url, 0, &ex);
    return ex;
}

static void server_close(server *s)
{
    for (int k = 0; k < NSLOW; k++)
        tq_free(s->kept[k]);
    free(s->q);
    tq_close(s->cdb);
    tq_close(s->db);
    pthread_cond_destroy(&s->wcv);
    pthread_mutex_destroy(&s->wmu);
    pthread_cond_destroy(&s->ccv);
    pthread_mutex_destroy(&s->cmu);
    pthread_mutex_destroy(&s->mu);
}

/* The first count, and the last hour of finished jobs, before serving. */
static int server_seed(server *s)
{
    serve_count_finished(s);
    if (s->count_err[0]) {
        cli_error("serve", "counting finished jobs: %s", s->count_err);
        return EXIT_RUNTIME;
    }
    s->at_us = now_us() - (int64_t)HISTORY_MIN * 60000000;
    s->seeding = 1;
    int rc = serve_read_finished(s);
    s->seeding = 0;
    return rc ? cli_fail("serve", s->db, rc) : 0;
}

static int serve_run(void *args, tq *unused)
{
    (void)unused; /* it opens two connections of its own */
    serve_args *a = args;
    server s;
    int ex = server_open(&s, a);
    if (s.cdb && !(ex = server_seed(&s)))
        ex = serve_until_stopped(&s, a->listen, &a->addr);
    server_close(&s);
    return ex;
}

static void serve_done(void *args)
{
    free(((serve_args *)args)->token);
}

CLI_COMMAND(serve, "an HTTP server: metrics, a dashboard, JSON and actions",
            CLI_OPEN_NONE, &defaults, opts, usage, help, serve_done);
