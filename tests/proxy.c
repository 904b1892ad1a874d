/*
 * proxy.c - a TCP proxy for the hung-connection and slow-store tests
 * (tpg_hang.sh, tpg_slow.sh).
 *
 *   proxy PORTFILE SOCKET [DELAY_MS]
 *
 * Listens on 127.0.0.1 (a port of the kernel's choosing, written to
 * PORTFILE once listening) and forwards every connection to the unix
 * socket SOCKET (a PostgreSQL server's). On SIGUSR1 it freezes every
 * connection open at that moment: from then on it neither reads, writes
 * nor closes them, so their peers see a connection that hangs, with both
 * kernels still acknowledging what little fits in their buffers. New
 * connections are forwarded as before. With DELAY_MS, what the server
 * sends reaches the client that much later (a server far away: every
 * round trip takes DELAY_MS more). SIGTERM ends it.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAIRS 256

/* What the server sent, due at the client at due (monotonic ms). */
typedef struct chunk {
    long long due;
    size_t len;
    char *data;
} chunk;

typedef struct pair {
    int fd[2]; /* client, server; -1 when closed */
    int frozen;
    chunk *late; /* DELAY_MS: the server's chunks on their way, oldest first */
    size_t nlate;
} pair;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static volatile sig_atomic_t freeze_requested, quit;

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        freeze_requested = 1;
    else
        quit = 1;
}

static void die(const char *what)
{
    fprintf(stderr, "proxy: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int listen_loopback(const char *portfile)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
        die("listening on 127.0.0.1");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", portfile);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 || fclose(f) ||
        rename(tmp, portfile))
        die(portfile);
    return fd;
}

static int connect_unix(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path)
        return -1;
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int write_all(int to, const char *buf, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, n - off);
        if (w <= 0)
            return 0;
        off += (size_t)w;
    }
    return 1;
}

/* Moves what one side of pr sent to the other (the server's, after delay
 * ms); 0 when that side closed. */
static int forward(pair *pr, int side, int delay)
{
    char buf[65536];
    ssize_t n = read(pr->fd[side], buf, sizeof buf);
    if (n <= 0)
        return 0;
    if (side == 0 || delay <= 0)
        return write_all(pr->fd[!side], buf, (size_t)n);
    chunk *v = realloc(pr->late, (pr->nlate + 1) * sizeof *v);
    char *d = malloc((size_t)n);
    if (!v || !d)
        die("out of memory");
    memcpy(d, buf, (size_t)n);
    pr->late = v;
    pr->late[pr->nlate++] = (chunk){now_ms() + delay, (size_t)n, d};
    return 1;
}

/* Sends the server's chunks that are due; 0 when the client is gone. Sets
 * *next to the earliest due time left (unchanged when none). */
static int deliver(pair *pr, long long now, long long *next)
{
    size_t k = 0;
    int ok = 1;
    while (k < pr->nlate && pr->late[k].due <= now) {
        ok = ok && write_all(pr->fd[0], pr->late[k].data, pr->late[k].len);
        free(pr->late[k++].data);
    }
    if (k) /* (never with no array: memmove's NULL is undefined even for 0) */
        memmove(pr->late, pr->late + k, (pr->nlate - k) * sizeof *pr->late);
    pr->nlate -= k;
    if (pr->nlate && (*next < 0 || pr->late[0].due < *next))
        *next = pr->late[0].due;
    return ok;
}

static void close_pair(pair *pr)
{
    close(pr->fd[0]);
    close(pr->fd[1]);
    pr->fd[0] = pr->fd[1] = -1;
    for (size_t k = 0; k < pr->nlate; k++)
        free(pr->late[k].data);
    pr->nlate = 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fputs("usage: proxy PORTFILE SOCKET [DELAY_MS]\n", stderr);
        return 2;
    }
    const int delay = argc == 4 ? atoi(argv[3]) : 0;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int lfd = listen_loopback(argv[1]);
    static pair pairs[MAX_PAIRS];
    int npairs = 0, frozen = 0;

    while (!quit) {
        if (freeze_requested) {
            freeze_requested = 0;
            for (int i = 0; i < npairs; i++)
                if (pairs[i].fd[0] >= 0 && !pairs[i].frozen) {
                    pairs[i].frozen = 1;
                    frozen++;
                }
            fprintf(stderr, "proxy: %d connection(s) frozen\n", frozen);
        }
        long long next = -1, now = now_ms();
        for (int i = 0; i < npairs; i++)
            if (pairs[i].fd[0] >= 0 && !pairs[i].frozen &&
                !deliver(&pairs[i], now, &next))
                close_pair(&pairs[i]);
        struct pollfd p[1 + 2 * MAX_PAIRS];
        int who[1 + 2 * MAX_PAIRS], n = 0;
        p[n] = (struct pollfd){.fd = lfd, .events = POLLIN};
        who[n++] = -1;
        for (int i = 0; i < npairs; i++) {
            if (pairs[i].fd[0] < 0 || pairs[i].frozen)
                continue;
            for (int s = 0; s < 2; s++) {
                p[n] = (struct pollfd){.fd = pairs[i].fd[s], .events = POLLIN};
                who[n++] = 2 * i + s;
            }
        }
        int wait = next < 0 ? 1000 : (int)(next - now > 0 ? next - now : 0);
        if (poll(p, (nfds_t)n, wait) < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        for (int k = 0; k < n; k++) {
            if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (who[k] < 0) {
                int c = accept(lfd, NULL, NULL);
                if (c < 0)
                    continue;
                int s = connect_unix(argv[2]);
                if (s < 0 || npairs == MAX_PAIRS) {
                    close(c);
                    if (s >= 0)
                        close(s);
                    continue;
                }
                pairs[npairs++] = (pair){{c, s}, 0, NULL, 0};
                continue;
            }
            pair *pr = &pairs[who[k] / 2];
            int side = who[k] % 2;
            if (pr->fd[0] >= 0 && !forward(pr, side, delay))
                close_pair(pr);
        }
    }
    return 0;
}
