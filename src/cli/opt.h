/* Option tables (in the manner of git's parse-options): one table per verb
 * drives parsing ("--name VALUE" and "--name=VALUE"), `devgate VERB --help`,
 * the "did you mean" suggestions and the docs/cli.md check (`devgate
 * __options`). */
#ifndef DG_CLI_OPT_H
#define DG_CLI_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct cli;

typedef enum cli_kind {
    CLI_END = 0, /* terminates a table */
    CLI_FLAG,    /* bool set to true; no value */
    CLI_INT,     /* int in [lo, hi] */
    CLI_LONG,    /* long in [lo, hi] */
    CLI_U64,     /* uint64_t, decimal or 0x hex */
    CLI_DOUBLE,  /* double in [lo, hi] (lo ABOVE_ZERO: positive) */
    CLI_STR,     /* const char * (the argv string) */
    CLI_BYTES,   /* size_t: 1048576, 512K, 1M, 2GiB */
    CLI_FUNC,    /* fn parses the value into the field */
    CLI_TRAIN,   /* a training option: dg_train_opts_set(key, value or fixed) */
} cli_kind;

typedef struct cli_opt cli_opt;
/* A custom parser: NULL when the value was stored at field, else what the
 * option wants ("CxHxW", "NAME=VALUE"), printed as "--name wants X, got 'V'". */
typedef const char *(*cli_opt_fn)(const cli_opt *o, const char *value, void *field);

struct cli_opt {
    cli_kind kind;
    const char *name;  /* "--batch" */
    const char *alias; /* "-o" or NULL */
    const char *arg;   /* the value's placeholder in help ("N"); NULL for flags */
    const char *def;   /* the default as help shows it; NULL: none */
    const char *unit;  /* "samples", "s", "bytes"; NULL: none */
    const char *help;
    size_t off;        /* where the value goes in the group's struct */
    double lo, hi;     /* numeric range */
    cli_opt_fn fn;     /* CLI_FUNC */
    const char *key;   /* CLI_TRAIN: the spec key */
    const char *fixed; /* CLI_TRAIN flag: the value it sets ("tf32"); NULL: takes a value */
};

/* The row that ends a table. */
#define CLI_OPTS_END                                                                               \
    {                                                                                              \
        CLI_END, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, NULL, NULL, NULL                     \
    }

/* A verb: its synopsis, its tables and what `VERB --help` prints. */
typedef struct cli_verb {
    const char *name;
    const char *args; /* positionals in the synopsis ("RUN_A RUN_B", "-- CMD ARGS..."); or NULL */
    const char *summary; /* what it does, one or two lines */
    const char *exits;   /* "0 pass, 1 fail, 2 usage" */
    const char *example;
    const cli_opt *tables[4]; /* NULL-terminated; [i] fills bases[i] in cli_parse */
    const char *titles[4];    /* the tables' headings in help */
    int (*run)(struct cli *c, int argc, char **argv);
    const struct cli_step *step; /* a step verb's (cli_step_main runs it, not run) */
    bool hidden;
} cli_verb;

/* The options every verb takes (--json, --quiet, --ledger, --no-ledger) into struct cli. */
extern const cli_opt cli_common_opts[];
/* The training options shared by train, sweep, soak, compare, profile, accept. */
extern const cli_opt cli_train_opts[];

/* CLI_FUNC for a const char * that must not be empty. */
const char *cli_nonempty(const cli_opt *o, const char *value, void *field);

/* Every verb, NULL-terminated (main.c). */
extern const cli_verb *const cli_verbs[];

/* Parsed positionals: up to max (pos), and the words after "--" (rest). */
typedef struct cli_args {
    char **pos;
    int npos, max;
    char **rest; /* argv after "--"; NULL when there was none */
    int nrest;
    int seen[4]; /* options matched per table */
} cli_args;

enum { CLI_PARSED = 0, CLI_HELP_SHOWN = 1, CLI_BAD = -1 };
/* Parses argv[1..argc) of verb v: each option into bases[t] of the table t it
 * belongs to, positionals into a (more than a->max is an error; a NULL a takes
 * none). CLI_HELP_SHOWN after printing --help to stdout; CLI_BAD after a
 * message on stderr (exit 2). */
int cli_parse(struct cli *c, const cli_verb *v, int argc, char **argv, void *const bases[],
              cli_args *a);
/* Parses the one option at argv[*i] (advancing *i past its value); the table
 * it belongs to in *table (may be NULL). cli_parse's results. */
int cli_parse_one(struct cli *c, const cli_verb *v, int argc, char **argv, int *i,
                  void *const bases[], int *table);
/* Checks argv[1..argc) of verb v against its tables without storing anything
 * (each option known, a value where one is needed; positionals skipped, a
 * command's words after it): CLI_PARSED, or CLI_BAD after cli_parse's message. */
int cli_check_words(const cli_verb *v, int argc, char **argv);
/* The exit status for a cli_parse result other than CLI_PARSED. */
int cli_parse_exit(int r);
/* Prints `devgate VERB --help`. */
void cli_verb_help(const cli_verb *v, FILE *out);
/* Prints `devgate --help`. */
void cli_usage(FILE *out);
/* The closest of the n candidates to s (edit distance at most a third of its
 * length, at least 2), or NULL. */
const char *cli_did_you_mean(const char *s, const char *const *cand, size_t n);
/* The verb named name, NULL when none. */
const cli_verb *cli_find_verb(const char *name);
/* Prints "VERB --option" for every option of every verb (the docs check). */
void cli_list_options(FILE *out);
#endif
