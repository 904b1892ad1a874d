/*
 * embed.c - a C program that embeds tq without the tool: it creates a store,
 * enqueues jobs, and runs a worker pool with a C callback until the queue
 * is drained. Build: cc embed.c -ltq. Run: ./embed [STORE] (default
 * embed.db).
 *
 * The handler "resizes images": it fails the first attempt of every job
 * whose payload ends in ".bad", to show retries.
 */
#include <tq.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int handled;

static int resize(void *ud, const tq_job *job, char *err, size_t errlen)
{
    (void)ud;
    const char *name = (const char *)job->payload;
    size_t n = job->payload_len;
    if (n > 4 && memcmp(name + n - 4, ".bad", 4) == 0 && job->attempts == 1) {
        snprintf(err, errlen, "cannot read %s", name);
        return 1;
    }
    pthread_mutex_lock(&mu);
    handled++;
    pthread_mutex_unlock(&mu);
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "embed.db";
    const char *files[] = {"a.png", "b.png", "c.bad", "d.png"};
    tq_open_opts oo = TQ_OPEN_OPTS_INIT;
    tq *db = NULL;
    tq_worker *w = NULL;
    int rc;

    oo.create = 1;
    if ((rc = tq_open(&db, url, &oo)) || (rc = tq_init(db)))
        goto fail;

    /* A queue that retries at once, so the example finishes quickly. */
    tq_queue_opts qo = TQ_QUEUE_OPTS_INIT;
    qo.set = TQ_SET_BACKOFF;
    if ((rc = tq_queue_set(db, "images", &qo)))
        goto fail;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        int64_t id;
        if ((rc = tq_job_enqueue(&id, db, "images", files[i], strlen(files[i]), NULL)) <
            0)
            goto fail;
        printf("enqueued job %lld: %s\n", (long long)id, files[i]);
    }

    const char *queues[] = {"images"};
    tq_worker_opts wo = TQ_WORKER_OPTS_INIT;
    wo.queues = queues;
    wo.nqueues = 1;
    wo.concurrency = 2;
    wo.drain = 1;
    wo.handler = resize;
    if ((rc = tq_worker_new(&w, db, &wo)) || (rc = tq_worker_run(w)))
        goto fail;
    tq_worker_counters k;
    tq_worker_counters_get(&k, w);
    printf("handled %d jobs: %lld done, %lld failed attempts\n", handled,
           (long long)k.done, (long long)k.failed);
    tq_worker_free(w);
    tq_close(db);
    return handled == 4 && k.done == 4 && k.failed == 1 ? 0 : 1;
fail:
    fprintf(stderr, "embed: %s\n", tq_errmsg(db));
    tq_worker_free(w);
    tq_close(db);
    return 1;
}
