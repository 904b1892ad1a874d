/*
 * url.h - store URLs: which engine, and its parameters.
 */
#ifndef TQ_URL_H
#define TQ_URL_H

#include "tq_int.h"

typedef enum tq__engine_kind { TQ__SQLITE = 0, TQ__POSTGRES } tq__engine_kind;

typedef struct tq__url {
    tq__engine_kind kind;
    char *path;          /* SQLite: the file path */
    int sync_normal;     /* SQLite: synchronous=NORMAL instead of FULL */
    int busy_timeout_ms; /* SQLite: how long a write waits for the lock */
    char *conninfo;      /* PostgreSQL: the URL as given, for libpq */
    char *schema;        /* PostgreSQL: schema name, default "tq" */
    int pooled;          /* PostgreSQL: tq_pool=transaction (no session state) */
    char *listen;        /* PostgreSQL: tq_listen, where workers LISTEN; or NULL */
} tq__url;

/* Parses url into out (which the caller frees with tq__url_free). Messages
 * go to db and never contain a password. */
int tq__url_parse(tq__url *out, tq *db, const char *url);
void tq__url_free(tq__url *u);
/* Copies url into buf with any password replaced by "***". */
void tq__url_redact(char *buf, size_t len, const char *url);

#endif
