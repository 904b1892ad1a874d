/*
 * fuzz_url.c - store URLs (tq__url_parse) and their redaction
 * (tq__url_redact). Parsing never crashes or leaks, and its messages never
 * hold the password of a "scheme://user:PASSWORD@host" URL; redaction
 * stays inside its buffer, ends with a NUL, and leaves neither that
 * password nor the value of any password= parameter.
 */
#include "fuzz.h"

#include "../../src/url.h"

/* For "scheme://user:PASSWORD@..." (libpq takes the first '@' before any
 * '/'): the URL up to the ':' copied into head, and ":PASSWORD@" into
 * secret; 0 when there is no such password. */
static int userinfo_password(const char *url, char *head, char *secret)
{
    const char *p = strstr(url, "://");
    if (!p)
        return 0;
    p += 3;
    const char *at = p;
    while (*at && *at != '@' && *at != '/')
        at++;
    if (*at != '@')
        return 0;
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (!colon)
        return 0;
    memcpy(head, url, (size_t)(colon - url));
    head[colon - url] = '\0';
    memcpy(secret, colon, (size_t)(at - colon + 1));
    secret[at - colon + 1] = '\0';
    return 1;
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* Every password= that starts a parameter in the redacted text has the
 * value "***" (or a cut-off part of it at the end of the buffer). */
static void check_parameters(const char *red, const char *url)
{
    for (const char *p = red; (p = strstr(p, "password=")); p++) {
        if (!(p == red || p[-1] == '?' || p[-1] == '&' || p[-1] == ' '))
            continue;
        const char *v = p + 9;
        size_t n = strcspn(v, "& ");
        FUZZ_CHECK(n <= 3 && strncmp(v, "***", n) == 0 && (n == 3 || !v[n]),
                   "'%s' redacted as '%s'", url, red);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = fuzz_string(data, size);
    char *head = malloc(size + 1), *secret = malloc(size + 2);
    FUZZ_CHECK(head && secret, "malloc");
    int has_secret = userinfo_password(url, head, secret);

    tq db;
    memset(&db, 0, sizeof db);
    tq__url u;
    if (tq__url_parse(&u, &db, url) != 0 && has_secret && strlen(secret) > 2)
        FUZZ_CHECK(count(db.errmsg, secret) < count(url, secret),
                   "message '%s' shows the password", db.errmsg);
    tq__url_free(&u);

    /* With room enough: the password is gone (the ":PASSWORD@" found
     * occurs fewer times); more may be hidden than the password. */
    size_t top = size + 16 < 600 ? size + 16 : 600;
    char *red = malloc(3 * size + 64);
    FUZZ_CHECK(red != NULL, "malloc");
    tq__url_redact(red, 3 * size + 64, url);
    check_parameters(red, url);
    if (has_secret && secret[1] != '*')
        FUZZ_CHECK(count(red, secret) < count(url, secret), "'%s' redacted as '%s'", url,
                   red);

    /* Into a buffer of every size from 1 to a little past the URL's
     * length, canaries after it. */
    for (size_t len = 1; len <= top; len += len < 40 ? 1 : 37) {
        memset(red, '#', top + 8);
        tq__url_redact(red, len, url);
        FUZZ_CHECK(memchr(red, '\0', len) != NULL, "'%s' into %zu: no NUL", url, len);
        for (size_t i = len; i < top + 8; i++)
            FUZZ_CHECK(red[i] == '#', "'%s' into %zu: wrote at %zu", url, len, i);
        check_parameters(red, url);
        if (has_secret && strlen(secret) > 2 && secret[1] != '*')
            FUZZ_CHECK(strncmp(red, url, strlen(head) + 2) != 0,
                       "'%s' into %zu: '%s' shows the password", url, len, red);
    }
    free(red);
    free(head);
    free(secret);
    free(url);
    return 0;
}
