/*
 * check.h - an assertion on a tq call that prints the store's message when
 * it fails. Include it after cmocka.h and tq.h.
 */
#ifndef TQ_TEST_CHECK_H
#define TQ_TEST_CHECK_H

/* Asserts call returned 0, printing db's message otherwise. */
#define OK_ON(db, call)                                                                  \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != 0)                                                                    \
            fail_msg("%s -> %d (%s): %s", #call, rc_, tq_strerror(rc_), tq_errmsg(db));  \
    } while (0)

#endif
