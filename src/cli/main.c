/* devgate: one command per method step; see docs/cli.md. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* The options before the verb: the common ones (and --help, --version). */
static const cli_verb global = {
    .name = "devgate",
    .summary = "",
    .exits = "0 pass, 2 usage",
    .example = "devgate --ledger runs.db ledger list",
    .tables = {cli_common_opts},
    .titles = {"global options"},
};

static void log_to_stderr(dg_log_level level, const char *msg, void *user)
{
    const cli *c = user;
    if (level >= DG_LOG_WARN || (!c->quiet && getenv("DEVGATE_VERBOSE")))
        fprintf(stderr, "devgate: %s\n", msg);
}

/* devgate's own command line, as `ps` shows it to everyone, with credentials
 * masked in place (a team ledger URI's password, a --token): the verbs use
 * private copies of the words that held one. */
static void mask_own_argv(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!dg_has_secret(argv[i]))
            continue;
        char *copy = strdup(argv[i]);
        if (!copy)
            continue;
        size_t n0 = strlen(argv[i]);
        dg_redact_secrets(argv[i]);
        size_t n1 = strlen(argv[i]);
        memset(argv[i] + n1, 0, n0 - n1); /* no tail of the secret after the new end */
        argv[i] = copy;                   /* kept until the process ends */
    }
}

int main(int argc, char **argv)
{
    mask_own_argv(argc, argv);
    cli c = {.prog = argv[0]};
    cli_term_init();
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("devgate %s (commit %s; %s; backends: %s)\n", DG_VERSION, dg_build_commit(),
                   dg_build_compiler(), dg_build_backends());
            return EXIT_PASS;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            cli_usage(stdout);
            return EXIT_PASS;
        }
        if (cli_parse_one(&c, &global, argc, argv, &i, (void *const[]){&c}, NULL) != CLI_PARSED)
            return EXIT_USAGE;
    }
    if (i >= argc) {
        cli_usage(stderr);
        return EXIT_USAGE;
    }
    const char *verb = argv[i];
    if (strcmp(verb, "help") == 0) {
        const cli_verb *v = i + 1 < argc ? cli_find_verb(argv[i + 1]) : NULL;
        if (v)
            cli_verb_help(v, stdout);
        else
            cli_usage(stdout);
        return EXIT_PASS;
    }
    if (strcmp(verb, "__options") == 0) { /* hidden: every verb's options (docs check) */
        cli_list_options(stdout);
        return EXIT_PASS;
    }
    const cli_verb *v = cli_find_verb(verb);
    if (!v) {
        const char *names[32];
        size_t n = 0;
        for (const cli_verb *const *p = cli_verbs; *p && n < 32; p++)
            if (!(*p)->hidden)
                names[n++] = (*p)->name;
        const char *near = cli_did_you_mean(verb, names, n);
        if (near)
            cli_error("unknown verb '%s'; did you mean %s? (devgate --help lists the verbs)", verb,
                      near);
        else
            cli_error("unknown verb '%s' (devgate --help lists the verbs)", verb);
        return EXIT_USAGE;
    }
    c.ctx = dg_ctx_new();
    if (!c.ctx) {
        cli_error("out of memory");
        return EXIT_USAGE;
    }
    dg_set_log(c.ctx, log_to_stderr, &c);
    dg_set_env_cmdlines(c.ctx, c.env_cmdlines); /* given before the verb */
    c.verb = v;
    int rc = (v->step ? cli_step_main : v->run)(&c, argc - i, argv + i);
    dg_ctx_free(c.ctx);
    return rc;
}
