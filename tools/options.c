/*
 * options.c - the command line's options, read as git's parse-options
 * reads them: each command declares a table of cli_opt (cli.h), and
 * cli_parse reads argv by it into the command's arguments struct, with
 * --db (-d) and --help for every command. Underneath is getopt_long, so
 * options go anywhere among the arguments (until "--"), short ones group
 * or take their value attached (-jq mail, -qmail), and a long one may be
 * shortened to any prefix that names one option (--queu); an ambiguous
 * prefix is refused, naming the options it could be. Called by each
 * command's parse function (tools/cmd/).
 */
#define _GNU_SOURCE
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* getopt_long's value for a long option: LONG_BASE + its index among the
 * command's (--db, --help, then the table's): above every letter, so that
 * the errors of a short option (optopt a letter) are told from a long
 * one's (optopt 0 or one of these). */
enum { LONG_BASE = 256, COMMON = 2, OPTS_MAX = 40 };

static const cli_opt common[COMMON] = {CLI_OPT_CALLBACK('d', "db", 1, NULL, 0),
                                       CLI_OPT_CALLBACK(0, "help", 0, NULL, 0)};

/* What getopt_long reads a command's options by. */
typedef struct getopt_tables {
    const cli_opt *opt[COMMON + OPTS_MAX]; /* n of them, by index */
    size_t n;
    struct option lo[COMMON + OPTS_MAX + 1];
    char shorts[2 + 2 * (COMMON + OPTS_MAX)];
} getopt_tables;

/* 0: no value; 1: one; 2: an optional one, only as --name=VALUE (a
 * CLI_CALLBACK's arg 2). */
static int takes_value(const cli_opt *o)
{
    return o->kind == CLI_FLAG ? 0 : o->kind == CLI_CALLBACK ? o->arg : 1;
}

/* The tables for opts: --db and --help first, then the command's own, in
 * their order (which the suggestions for a typo follow). */
static void tables_make(getopt_tables *t, const cli_opt *opts)
{
    size_t k = 0;
    t->shorts[k++] = ':'; /* a missing value is ':', not '?' */
    t->n = 0;
    for (size_t i = 0; i < COMMON + OPTS_MAX; i++) {
        const cli_opt *o = i < COMMON ? &common[i] : &opts[i - COMMON];
        if (!o->name)
            break;
        int has = takes_value(o);
        t->opt[t->n] = o;
        t->lo[t->n] = (struct option){o->name,
                                      has == 2 ? optional_argument
                                      : has    ? required_argument
                                               : no_argument,
                                      NULL, LONG_BASE + (int)t->n};
        if (o->letter) {
            t->shorts[k++] = (char)o->letter;
            if (has)
                t->shorts[k++] = ':';
        }
        t->n++;
    }
    t->lo[t->n] = (struct option){0};
    t->shorts[k] = '\0';
}

/* The option getopt_long returned c for. */
static const cli_opt *tables_find(const getopt_tables *t, int c)
{
    if (c >= LONG_BASE)
        return t->opt[c - LONG_BASE];
    for (size_t i = 0; i < t->n; i++)
        if (t->opt[i]->letter == c)
            return t->opt[i];
    return NULL;
}

/* "--a, --b or --c": the options whose names word is a prefix of (not
 * one equal to it), into buf; how many. */
static size_t prefix_of(const getopt_tables *t, const char *word, char *buf, size_t len)
{
    size_t wl = strlen(word), n = 0, k = 0;
    for (size_t i = 0; i < t->n; i++)
        n += strncmp(t->opt[i]->name, word, wl) == 0 && t->opt[i]->name[wl];
    buf[0] = '\0';
    for (size_t i = 0, j = 0; i < t->n; i++) {
        if (strncmp(t->opt[i]->name, word, wl) || !t->opt[i]->name[wl])
            continue;
        j++;
        if (k < len)
            k += (size_t)snprintf(buf + k, len - k, "%s--%s",
                                  j == 1   ? ""
                                  : j == n ? " or "
                                           : ", ",
                                  t->opt[i]->name);
    }
    return n;
}

/* "unknown option '--dealy' (did you mean '--delay'?)", from the options
 * the command takes, or "ambiguous option '--d' (could be --db or
 * --dead)". */
static void unknown_option(const cli_command *cmd, const char *arg,
                           const getopt_tables *t)
{
    const char *names[COMMON + OPTS_MAX];
    char word[64] = "", could[512];
    int exact = 0;
    if (strncmp(arg, "--", 2) == 0)
        snprintf(word, sizeof word, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
    for (size_t i = 0; i < t->n; i++) {
        names[i] = t->opt[i]->name;
        exact |= strcmp(names[i], word) == 0;
    }
    if (word[0] && !exact && prefix_of(t, word, could, sizeof could) > 1) {
        cli_error(cmd->name, "ambiguous option '%s' (could be %s)", arg, could);
        return;
    }
    const char *near = word[0] ? cli_nearest(word, names, t->n) : NULL;
    if (near)
        cli_error(cmd->name, "unknown option '%s' (did you mean '--%s'?)", arg, near);
    else
        cli_error(cmd->name, "unknown option '%s' (see tq %s --help)", arg, cmd->name);
}

/* getopt_long's ':' (a value missing) or '?' (an unknown or ambiguous
 * option, or a value given to one that takes none): one line, EXIT_USAGE. */
static int option_error(const cli_command *cmd, char **argv, const getopt_tables *t,
                        int c)
{
    char letter[3] = {'-', (char)optopt, '\0'};
    const char *arg = optopt > 0 && optopt < LONG_BASE ? letter : argv[optind - 1];
    if (c == ':')
        cli_error(cmd->name, "option '%s' needs a value (see tq %s --help)", arg,
                  cmd->name);
    else
        unknown_option(cmd, arg, t);
    return EXIT_USAGE;
}

/* Stores v in the integer field p of size bytes. */
static void store_int(void *p, size_t size, long long v)
{
    if (size == sizeof(int)) {
        int i = (int)v;
        memcpy(p, &i, sizeof i);
    } else {
        int64_t l = v;
        memcpy(p, &l, sizeof l);
    }
}

/* Option o's value arg into its field of args: 0, -1 when the command
 * does not take it, or EXIT_USAGE (or a callback's code) after one line. */
static int option_fill(const char *cmd, const cli_opt *o, const char *arg, void *args)
{
    char *field = (char *)args + o->off, name[80];
    long long n;
    int64_t us;
    snprintf(name, sizeof name, "--%s", o->name);
    switch (o->kind) {
    case CLI_QUEUE:
        if (cli_queue_name(cmd, arg))
            return EXIT_USAGE;
        /* fall through */
    case CLI_STRING:
        memcpy(field, &arg, sizeof arg);
        return 0;
    case CLI_FLAG:
        store_int(field, o->size, o->value);
        return 0;
    case CLI_INT:
        if (cli_int(cmd, name, arg, o->min, o->max, &n))
            return EXIT_USAGE;
        store_int(field, o->size, n);
        return 0;
    case CLI_DURATION:
        if (cli_duration(cmd, name, arg, &us))
            return EXIT_USAGE;
        if (us == 0 && o->zero) {
            cli_error(cmd, "%s", o->zero);
            return EXIT_USAGE;
        }
        memcpy(field, &us, sizeof us);
        return 0;
    case CLI_CALLBACK:
        return o->fn ? o->fn(args, o, arg) : -1;
    default:
        return -1;
    }
}

/* One option the command declared, given as c (its letter, or a long
 * one's value), into args, with its mark: 0, or the exit code after one
 * line. */
static int option_take(const cli_command *cmd, const cli_opt *o, int c, void *args)
{
    int ex = option_fill(cmd->name, o, optarg, args);
    if (ex < 0) {
        char given[80];
        if (c < LONG_BASE)
            snprintf(given, sizeof given, "-%c", c);
        else
            snprintf(given, sizeof given, "--%s", o->name);
        cli_error(cmd->name, "unknown option '%s' (see tq %s --help)", given, cmd->name);
        return EXIT_USAGE;
    }
    if (!ex && o->mark) {
        unsigned m;
        memcpy(&m, (char *)args + o->mark_off, sizeof m);
        m |= o->mark;
        memcpy((char *)args + o->mark_off, &m, sizeof m);
    }
    return ex;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, const cli_opt *opts,
              const char **url, void *args)
{
    getopt_tables t;
    tables_make(&t, opts);
    for (;;) {
        int c = getopt_long(argc, argv, t.shorts, t.lo, NULL), ex;
        const cli_opt *o = c == -1 ? NULL : tables_find(&t, c);
        if (c == -1)
            return 0;
        if (!o)
            return option_error(cmd, argv, &t, c);
        if (o == &common[0]) {
            *url = optarg;
        } else if (o == &common[1]) {
            printf("usage: %s\n%s", cmd->usage, cmd->help);
            return -1;
        } else if ((ex = option_take(cmd, o, c, args))) {
            return ex;
        }
    }
}

int cli_no_args(const cli_command *cmd, int argc, char **argv, int from)
{
    if (from >= argc)
        return 0;
    cli_error(cmd->name, "unexpected argument '%s'", argv[from]);
    return EXIT_USAGE;
}
