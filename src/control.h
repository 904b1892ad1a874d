/*
 * control.h - the control channel a command handler may write to (file
 * descriptor 3, TQ_CONTROL_FD): lines of "progress PCT [TEXT]",
 * "snooze DUR" or "discard TEXT". The reader cuts the byte stream into
 * lines; the parser turns one line into a message. Both are pure (no
 * I/O, no global state), so they are fuzzed as they are (fuzz_control).
 * worker/command.c owns the pipe and decides what each message does to the job.
 */
#ifndef TQ_CONTROL_H
#define TQ_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#define TQ__CONTROL_FD        3                /* the handler's end of the channel */
#define TQ__CONTROL_LINE_MAX  1024             /* bytes of one line, newline excluded */
#define TQ__PROGRESS_TEXT_MAX 200              /* bytes of progress text kept */
#define TQ__SNOOZE_MAX_US     31536000000000LL /* 365 days */

typedef enum tq__ctl_verb {
    TQ__CTL_PROGRESS = 1,
    TQ__CTL_SNOOZE,
    TQ__CTL_DISCARD
} tq__ctl_verb;

typedef struct tq__ctl_msg {
    tq__ctl_verb verb;
    int pct;          /* PROGRESS: 0 to 100 */
    int64_t delay_us; /* SNOOZE: 0 to TQ__SNOOZE_MAX_US */
    /* PROGRESS: the text (at most TQ__PROGRESS_TEXT_MAX bytes, cut at a
     * character's start), DISCARD: the reason; "" when none. Bytes as the
     * handler wrote them, without NUL: the caller makes them valid UTF-8. */
    char text[TQ__CONTROL_LINE_MAX + 1];
} tq__ctl_msg;

/* Parses one line (len bytes, no newline; a final '\r' is ignored).
 * Returns 1 with *out set, 0 for a line to ignore silently (empty or only
 * blanks), or -1 with the reason in why (malformed, unknown verb). */
int tq__control_parse(tq__ctl_msg *out, const char *line, size_t len, char *why,
                      size_t whylen);

/* The error of a snooze past its queue's max_snoozes (a failure). */
void tq__ctl_snooze_limit(char *buf, size_t len, int snoozes, const char *queue);

/* Cuts a byte stream into lines. Start zeroed. */
typedef struct tq__ctl_reader {
    char buf[TQ__CONTROL_LINE_MAX];
    size_t len;
    int overlong; /* the line being read is past the limit: dropped */
} tq__ctl_reader;

/* Called for each whole line (without its newline), or with line NULL
 * once for each line longer than TQ__CONTROL_LINE_MAX, which is dropped. */
typedef void tq__ctl_line_fn(void *ud, const char *line, size_t len);

/* Feeds n bytes. */
void tq__ctl_feed(tq__ctl_reader *r, const char *p, size_t n, tq__ctl_line_fn *fn,
                  void *ud);
/* At the end of the stream: a last line without its newline counts. */
void tq__ctl_end(tq__ctl_reader *r, tq__ctl_line_fn *fn, void *ud);

#endif
