/*
 * cron.h - periodic jobs' schedules: the spec parser, time zones from the
 * system's database (TZif files, with their POSIX rule for the years after
 * the last transition), and the next slot of a schedule. No global state:
 * nothing here reads TZ or calls tzset, so threads may use it freely.
 */
#ifndef TQ_CRON_H
#define TQ_CRON_H

#include <stddef.h>
#include <stdint.h>

/* A parsed spec: the set of each field as bits, or a fixed period. */
typedef struct tq__cron {
    uint64_t sec, min; /* bits 0-59 */
    uint32_t hour;     /* bits 0-23 */
    uint32_t dom;      /* bits 1-31 */
    uint16_t mon;      /* bits 1-12 */
    uint8_t dow;       /* bits 0-6, Sunday 0 */
    /* The day fields as cron reads them: a day matches both when either
     * starts with '*', else either one. */
    int dom_star, dow_star;
    int64_t every_us; /* @every: the period, > 0; the fields are unused */
} tq__cron;

/* Longest spec and zone name a schedule keeps. */
#define TQ__CRON_SPEC_MAX 127
#define TQ__ZONE_NAME_MAX 63

/* 0, or -1 with why in err: a spec that never fires is refused too. */
int tq__cron_parse(tq__cron *c, const char *spec, char *err, size_t errlen);

typedef struct tq__zone tq__zone;

/* The zone name (an IANA name such as Europe/Berlin, read from the system's
 * time-zone database; "UTC" needs no file): 0 and *out (NULL for UTC,
 * else freed with tq__zone_free), or -1 with why in err. */
int tq__zone_load(tq__zone **out, const char *name, char *err, size_t errlen);
void tq__zone_free(tq__zone *z);
/* Seconds east of UTC at UTC time t (seconds); z NULL: UTC. */
int64_t tq__zone_offset(const tq__zone *z, int64_t t);

/*
 * The first slot of c strictly after after_us (microseconds since the
 * epoch, UTC), in z's local time; -1 if none within nine years. A local
 * time that does not exist (the hour skipped when clocks go forward) is no
 * slot; one that happens twice (clocks going back) is one slot, at its
 * first occurrence. @every slots are the multiples of the period since the
 * epoch, whatever the zone.
 */
int64_t tq__cron_next(const tq__cron *c, const tq__zone *z, int64_t after_us);

/* The most recent slot at or before now_us, from since_us on (a slot at
 * since_us or later); -1 if there is none. */
int64_t tq__cron_last(const tq__cron *c, const tq__zone *z, int64_t since_us,
                      int64_t now_us);

#endif /* TQ_CRON_H */
