/* devgate: one command per method step; see docs/cli.md. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The re-exec's mark: "PID:=VALUE" or "PID:-" (OPENBLAS_NUM_THREADS unset). */
#define BLAS_MARK "DEVGATE_BLAS_REEXEC"

/* OpenBLAS's pthreads build starts a server thread per core when it loads,
 * before main, and they spin beside the cpu backend's OpenMP team (which
 * runs OpenBLAS one thread a call): on a 16-vCPU host 8 of 20 cpu gates took
 * 8 ms for the 512^3 product instead of 0.4 (33.6 against ~700 GFLOP/s), with
 * the threads shut down after load; with OPENBLAS_NUM_THREADS=1 set before
 * the library loads, 0 of 10 (docs/evidence/h200-cpugate*-20261202*.log). So
 * devgate re-executes itself once with OPENBLAS_NUM_THREADS=1 and, once the
 * library has read it, puts the user's value back, so the programs devgate
 * starts see the user's environment. The mark carries our pid: a child
 * devgate (a sweep trial) has another and does the same for itself. */
static void blas_one_thread(char **argv)
{
    char me[32];
    snprintf(me, sizeof me, "%ld:", (long)getpid());
    const char *mark = getenv(BLAS_MARK);
    if (mark && strncmp(mark, me, strlen(me)) == 0) {
        const char *was = mark + strlen(me);
        if (was[0] == '=')
            setenv("OPENBLAS_NUM_THREADS", was + 1, 1);
        else
            unsetenv("OPENBLAS_NUM_THREADS");
        unsetenv(BLAS_MARK);
        return;
    }
    const char *cur = getenv("OPENBLAS_NUM_THREADS");
    if ((cur && strcmp(cur, "1") == 0) || getenv("DEVGATE_NO_REEXEC"))
        return;
    size_t n = strlen(me) + (cur ? strlen(cur) + 1 : 1) + 1;
    char *val = malloc(n);
    if (!val)
        return;
    snprintf(val, n, "%s%s%s", me, cur ? "=" : "-", cur ? cur : "");
    if (setenv(BLAS_MARK, val, 1) == 0 && setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0)
        execv("/proc/self/exe", argv);
    /* No re-exec (no /proc): go on as we are, the environment as it was. */
    free(val);
    if (cur)
        setenv("OPENBLAS_NUM_THREADS", cur, 1);
    else
        unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv(BLAS_MARK);
}

int main(int argc, char **argv)
{
    blas_one_thread(argv); /* before the masking: the re-exec takes the words as given */
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
