/*
 * pg_url.h - the URL of a PostgreSQL store for a test, by schema. tq opens
 * it through the pooler when the tests run behind one (TQ_TEST_PG_POOL_URL,
 * from tests/pg/bouncer.sh), else at the server (TQ_TEST_PG_URL); a test's
 * own libpq connections, which stand for other programs, always go to the
 * server. Also the URL of a fresh store on the engine a test program runs
 * against (TQ_TEST_ENGINE).
 */
#ifndef TQ_TEST_PG_URL_H
#define TQ_TEST_PG_URL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Whether the tests run on PostgreSQL (TQ_TEST_ENGINE=postgres), not SQLite. */
static inline int test_on_postgres(void)
{
    const char *e = getenv("TQ_TEST_ENGINE");
    return e && strcmp(e, "postgres") == 0;
}

/* buf gets the URL of this process's store number seq: on PostgreSQL the
 * schema TAG<pid>_<seq> (its name also into schema[40], when not NULL), on
 * SQLite the file DIR/s<seq>.db. */
static inline void test_store_url(char *buf, size_t len, char schema[40], char tag,
                                  const char *dir, int seq)
{
    if (test_on_postgres()) {
        char name[40];
        snprintf(name, sizeof name, "%c%d_%d", tag, (int)getpid(), seq);
        test_pg_url(buf, len, name);
        if (schema)
            memcpy(schema, name, sizeof name);
    } else {
        snprintf(buf, len, "%s/s%d.db", dir, seq);
    }
}

#endif
