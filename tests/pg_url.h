/*
 * pg_url.h - the URL of a PostgreSQL store for a test, by schema. tq opens
 * it through the pooler when the tests run behind one (TQ_TEST_PG_POOL_URL,
 * from tests/pg/bouncer.sh), else at the server (TQ_TEST_PG_URL); a test's
 * own libpq connections, which stand for other programs, always go to the
 * server.
 */
#ifndef TQ_TEST_PG_URL_H
#define TQ_TEST_PG_URL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* buf gets the store URL for schema; 0, or -1 when no URL is set. */
static inline int test_pg_url(char *buf, size_t len, const char *schema)
{
    const char *base = getenv("TQ_TEST_PG_POOL_URL");
    if (!base || !*base)
        base = getenv("TQ_TEST_PG_URL");
    if (!base)
        return -1;
    snprintf(buf, len, "%s%stq_schema=%s", base, strchr(base, '?') ? "&" : "?", schema);
    return 0;
}

#endif
