/*
 * proxy.c - a TCP proxy for the hung-connection test (tpg_hang.sh).
 *
 *   proxy PORTFILE SOCKET
 *
 * Listens on 127.0.0.1 (a port of the kernel's choosing, written to
 * PORTFILE once listening) and forwards every connection to the unix
 * socket SOCKET (a PostgreSQL server's). On SIGUSR1 it freezes every
 * connection open at that moment: from then on it neither reads, writes
 * nor closes them, so their peers see a connection that hangs, with both
 * kernels still acknowledging what little fits in their buffers. New
 * connections are forwarded as before. SIGTERM ends it.
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
#include <unistd.h>

#define MAX_PAIRS 256

typedef struct pair {
    int fd[2]; /* client, server; -1 when closed */
    int frozen;
} pair;

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

/* Moves what one side sent to the other; 0 when that side closed. */
static int forward(int from, int to)
{
    char buf[65536];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0)
        return 0;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0)
            return 0;
        off += w;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fputs("usage: proxy PORTFILE SOCKET\n", stderr);
        return 2;
    }
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
        if (poll(p, (nfds_t)n, 1000) < 0) {
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
                pairs[npairs++] = (pair){{c, s}, 0};
                continue;
            }
            pair *pr = &pairs[who[k] / 2];
            int side = who[k] % 2;
            if (pr->fd[0] >= 0 && !forward(pr->fd[side], pr->fd[!side])) {
                close(pr->fd[0]);
                close(pr->fd[1]);
                pr->fd[0] = pr->fd[1] = -1;
            }
        }
    }
    return 0;
}
