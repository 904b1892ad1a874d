/*
 * url.c - parses store URLs and picks the engine. Called by tq_open.
 *
 *   jobs.db, ./jobs.db, /var/lib/tq.db     SQLite file
 *   sqlite:PATH[?synchronous=normal|full&busy_timeout=MS]
 *   postgres://... or postgresql://...     PostgreSQL (libpq URI); tq's own
 *       parameters are removed before the URI reaches libpq: tq_schema=NAME
 *       picks the schema (default "tq"); tq_pool=transaction says a pooler
 *       in transaction mode is in between (no session state: no prepared
 *       statements, no session settings, no LISTEN); tq_listen=URL
 *       (%XX-encoded) is where a worker listens for new jobs, directly.
 *
 * No message produced here contains a password.
 */
#include "url.h"

#include <ctype.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tq__url_free(tq__url *u)
{
    if (!u)
        return;
    free(u->path);
    free(u->conninfo);
    free(u->schema);
    free(u->listen);
    memset(u, 0, sizeof *u);
}

/* Whether p starts a parameter (at the start, or after '?', '&' or, in a
 * libpq keyword/value string, a space) whose key, with %XX decoded and in
 * any case, ends in "password" (password, sslpassword, pass%77ord, as
 * libpq would read them) or is tq_listen: the length of its key, else 0. */
static size_t password_key(const char *url, const char *p)
{
    if (!(p == url || p[-1] == '?' || p[-1] == '&' || p[-1] == ' '))
        return 0;
    char key[64];
    size_t k = 0, i = 0;
    while (p[i] && p[i] != '=') {
        int c = (unsigned char)p[i];
        if (!isalnum(c) && c != '_' && c != '%')
            return 0; /* not a key: a URL's start, say */
        if (c == '%' && isxdigit((unsigned char)p[i + 1]) &&
            isxdigit((unsigned char)p[i + 2])) {
            char hex[3] = {p[i + 1], p[i + 2], '\0'};
            c = (int)strtol(hex, NULL, 16);
            i += 3;
        } else {
            i++;
        }
        if (k == sizeof key - 1)
            return 0; /* no keyword is that long */
        key[k++] = (char)tolower(c);
    }
    key[k] = '\0';
    /* tq_listen's value is a URL of its own, %XX-encoded: hidden whole. */
    if (p[i] == '=' && strcmp(key, "tq_listen") == 0)
        return i;
    return p[i] == '=' && k >= 8 && strcmp(key + k - 8, "password") == 0 ? i : 0;
}

void tq__url_redact(char *buf, size_t len, const char *url)
{
    /* scheme://user:password@host -> scheme://user:***@host, and every
     * parameter whose key ends in password -> KEY=***. Written out one piece at a
     * time, each cut to what buf has room for. */
    const char *scheme = strstr(url, "://");
    const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    const char *colon = NULL;
    if (at)
        for (const char *p = scheme + 3; p < at && !colon; p++)
            if (*p == ':')
                colon = p;
    size_t o = 0;
    if (len == 0)
        return;
    for (const char *p = url; *p && o + 1 < len;) {
        const char *put = NULL;
        size_t kl;
        if (p == colon) {
            put = ":***";
            p = at;
        } else if ((kl = password_key(url, p)) > 0) {
            for (size_t i = 0; i <= kl && o + 1 < len; i++) /* the key and '=' */
                buf[o++] = p[i];
            put = "***";
            for (p += kl + 1; *p && *p != '&' && *p != ' ';)
                p++;
        }
        if (put) {
            for (; *put && o + 1 < len; put++)
                buf[o++] = *put;
            continue;
        }
        buf[o++] = *p++;
    }
    buf[o] = '\0';
}

/* text as a message may show it: passwords hidden, cut to fit buf. */
static const char *shown(char *buf, size_t len, const char *text)
{
    /* A piece with ':' or '@' may be the middle of a user:password@ that
     * only the whole URL shows as such (make fuzz found "sqlite:x://t?a:pw@"
     * echoed as "a:pw@"): not shown at all. */
    if (strpbrk(text, ":@")) {
        snprintf(buf, len, "(%zu characters, not shown)", strlen(text));
        return buf;
    }
    tq__url_redact(buf, len, text);
    return buf;
}

/* q: the parameters after '?', split in place at each '&' (no tokenizer
 * state: two threads may open stores at once). */
static int parse_sqlite_params(tq__url *u, tq *db, char *q)
{
    char red[256];
    for (char *tok = q, *next; tok; tok = next) {
        next = strchr(tok, '&');
        if (next)
            *next++ = '\0';
        if (!*tok)
            continue; /* "a=1&&b=2", or a trailing '&' */
        char *eq = strchr(tok, '=');
        if (!eq)
            return tq__seterr(db, TQ_EINVAL,
                              "bad store URL parameter '%s': expected NAME=VALUE",
                              shown(red, sizeof red, tok));
        *eq = '\0';
        const char *v = eq + 1;
        if (strcmp(tok, "synchronous") == 0) {
            if (strcmp(v, "normal") == 0 || strcmp(v, "NORMAL") == 0)
                u->sync_normal = 1;
            else if (strcmp(v, "full") == 0 || strcmp(v, "FULL") == 0)
                u->sync_normal = 0;
            else
                return tq__seterr(db, TQ_EINVAL,
                                  "bad synchronous value '%s': use full or normal",
                                  shown(red, sizeof red, v));
        } else if (strcmp(tok, "busy_timeout") == 0) {
            char *end;
            long ms = strtol(v, &end, 10);
            if (*v == '\0' || *end || ms < 0 || ms > 3600000)
                return tq__seterr(db, TQ_EINVAL,
                                  "bad busy_timeout '%s': milliseconds, 0 to 3600000",
                                  shown(red, sizeof red, v));
            u->busy_timeout_ms = (int)ms;
        } else {
            return tq__seterr(db, TQ_EINVAL,
                              "unknown store URL parameter '%s' (known: "
                              "synchronous, busy_timeout)",
                              shown(red, sizeof red, tok));
        }
    }
    return 0;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Where a PostgreSQL URI's query starts ('?'), as libpq finds it: after
 * the userinfo, which ends at an '@' met before any '/' (a password may
 * hold a '?'); NULL without one. */
static char *query_of(char *uri)
{
    char *start = strstr(uri, "://") + 3, *p = start;
    while (*p && *p != '@' && *p != '/')
        p++;
    return strchr(*p == '@' ? p + 1 : start, '?');
}

/* No bad %-escape in text: libpq quotes one in its message, password or
 * not. Not echoed here either. */
static int check_escapes(tq *db, const char *text, const char *what)
{
    for (const char *p = text; (p = strchr(p, '%')); p++)
        if (!is_hex(p[1]) || !is_hex(p[2]) || (p[1] == '0' && p[2] == '0'))
            return tq__seterr(db, TQ_EINVAL,
                              "bad %s: each '%%' must start a %%XX escape (two hex "
                              "digits, not %%00)",
                              what);
    return 0;
}

/* A %XX-encoded value, decoded in place (parse_postgres has checked every
 * escape). */
static void percent_decode(char *s)
{
    char *o = s;
    for (const char *p = s; *p; o++) {
        if (*p == '%') {
            char hex[3] = {p[1], p[2], '\0'};
            *o = (char)strtol(hex, NULL, 16);
            p += 3;
        } else {
            *o = *p++;
        }
    }
    *o = '\0';
}

/* One of tq's own parameters of a PostgreSQL URL, key=value (value
 * %XX-decoded). Values are not echoed: in a URL whose userinfo runs past
 * the '?', a value may hold the password. */
static int postgres_param(tq__url *u, tq *db, const char *key, char *value)
{
    /* A value with a bare '?' or '=' was not encoded: its '&'s have cut
     * it, and the rest went to the server's URL (a host, say). */
    if (strcmp(key, "tq_listen") == 0 && strpbrk(value, "?="))
        return tq__seterr(db, TQ_EINVAL,
                          "bad tq_listen in store URL: %%XX-encode the URL it gives "
                          "(its ':' '/' '?' '=' '&' as %%3A %%2F %%3F %%3D %%26)");
    percent_decode(value);
    const size_t n = strlen(value);
    if (strcmp(key, "tq_schema") == 0) {
        if (n == 0 || n > 48) /* the channel tq_<schema> must fit in 63 */
            return tq__seterr(db, TQ_EINVAL,
                              "bad tq_schema in store URL: 1 to 48 characters");
        for (const char *c = value; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
                return tq__seterr(db, TQ_EINVAL,
                                  "bad tq_schema in store URL: lower-case letters, "
                                  "digits and '_'");
        free(u->schema);
        return (u->schema = tq__strdup(value))
                   ? 0
                   : tq__seterr(db, TQ_ENOMEM, "out of memory");
    }
    if (strcmp(key, "tq_pool") == 0) {
        if (strcmp(value, "transaction") && strcmp(value, "session") &&
            strcmp(value, "none"))
            return tq__seterr(db, TQ_EINVAL,
                              "bad tq_pool in store URL: transaction (behind a pooler "
                              "in transaction mode), session or none");
        u->pooled = strcmp(value, "transaction") == 0;
        return 0;
    }
    if (strcmp(key, "tq_listen") == 0) {
        if (strncmp(value, "postgres://", 11) && strncmp(value, "postgresql://", 13))
            return tq__seterr(
                db, TQ_EINVAL,
                "bad tq_listen in store URL: a postgres:// URL (%%XX-encoded) "
                "that reaches the server itself, not through the pooler");
        int rc = check_escapes(db, value, "tq_listen URL (once decoded)");
        if (rc)
            return rc;
        free(u->listen);
        return (u->listen = tq__strdup(value))
                   ? 0
                   : tq__seterr(db, TQ_ENOMEM, "out of memory");
    }
    return tq__seterr(db, TQ_EINVAL,
                      "unknown store URL parameter '%s' (tq's own: tq_schema, tq_pool, "
                      "tq_listen)",
                      key);
}

static int parse_postgres(tq__url *u, tq *db, const char *url)
{
    u->kind = TQ__POSTGRES;
    int rc = check_escapes(db, url, "store URL");
    if (rc)
        return rc;
    u->conninfo = tq__strdup(url);
    u->schema = tq__strdup("tq");
    if (!u->conninfo || !u->schema)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    /* Pull tq's own parameters (tq_NAME=VALUE) out of the query string:
     * libpq refuses keys it does not know. */
    for (char *p = query_of(u->conninfo); p && *p;) {
        char *end = p + 1 + strcspn(p + 1, "&");
        if (strncmp(p + 1, "tq_", 3) != 0) {
            p = end;
            continue;
        }
        char param[1024];
        size_t len = (size_t)(end - (p + 1));
        if (len >= sizeof param)
            return tq__seterr(db, TQ_EINVAL,
                              "a tq_ parameter of the store URL is too long");
        memcpy(param, p + 1, len);
        param[len] = '\0';
        char *eq = strchr(param, '=');
        if (!eq)
            return tq__seterr(db, TQ_EINVAL,
                              "bad store URL parameter: tq_%.40s without '=VALUE'",
                              param + 3);
        *eq = '\0';
        rc = postgres_param(u, db, param, eq + 1);
        memset(param, 0, sizeof param); /* it may have held a password */
        if (rc)
            return rc;
        /* Removed with its leading '?' or '&'; a following '&' becomes
         * the '?' when it was the first. */
        if (*p == '?' && *end == '&')
            end++;
        memmove(*p == '?' ? p + 1 : p, end, strlen(end) + 1);
        if (*p == '?' && !p[1])
            *p = '\0';
        else if (*p != '?' && *p != '&')
            break; /* the end */
    }
    return 0;
}

int tq__url_parse(tq__url *u, tq *db, const char *url)
{
    memset(u, 0, sizeof *u);
    u->busy_timeout_ms = 10000;
    if (!url || !*url)
        return tq__seterr(db, TQ_EINVAL, "no store given: use --db URL or set TQ_DB");
    if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0)
        return parse_postgres(u, db, url);

    const char *path = url;
    if (strncmp(url, "sqlite:", 7) == 0) {
        path = url + 7;
        if (strncmp(path, "//", 2) == 0)
            path += 2; /* sqlite:///abs/path -> /abs/path */
    } else if (strstr(url, "://")) {
        /* Only the scheme is shown: in a URL tq cannot parse, it cannot
         * tell where a password is either (make fuzz found one that
         * redaction missed). */
        size_t n = strcspn(url, ":");
        int plain = n > 0 && n <= 32;
        for (size_t i = 0; plain && i < n; i++)
            plain = (url[i] >= 'a' && url[i] <= 'z') ||
                    (url[i] >= 'A' && url[i] <= 'Z') ||
                    (url[i] >= '0' && url[i] <= '9') || strchr("+.-", url[i]);
        if (!plain)
            return tq__seterr(db, TQ_EINVAL,
                              "unsupported store URL (not shown): use a file path, "
                              "sqlite:PATH or postgres://...");
        return tq__seterr(db, TQ_EINVAL,
                          "unsupported store URL scheme '%.*s': use a file path, "
                          "sqlite:PATH or postgres://...",
                          (int)n, url);
    }
    u->kind = TQ__SQLITE;
    u->path = tq__strdup(path);
    if (!u->path)
        return tq__seterr(db, TQ_ENOMEM, "out of memory");
    char *q = strchr(u->path, '?');
    if (q) {
        *q++ = '\0';
        int rc = parse_sqlite_params(u, db, q);
        if (rc)
            return rc;
    }
    if (!*u->path) {
        char red[256];
        return tq__seterr(db, TQ_EINVAL, "store URL '%s' has no file path",
                          shown(red, sizeof red, url));
    }
    return 0;
}
