/* devgate: one command per method step; see docs/cli.md. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: devgate [--ledger PATH | --no-ledger] VERB [options]\n"
    "\n"
    "verbs:\n"
    "  env [--python PATH] [--python-timeout S] [--json]\n"
    "        environment proof: architecture, translation, VM/container, OS, CPU,\n"
    "        memory, libraries, backends, git state, busy processes\n"
    "  gate [--backend NAME[,NAME]] [--size M,N,K] [--seed X] [--reps N] [--json]\n"
    "        device gate: built, available, and a checked matrix product per backend\n"
    "  train [--model mlp|lenet|cifar|LAYERS] [--backend cpu|opencl|cuda] [--batch N]\n"
    "        [--steps S] [--epochs E] [--seed X] [--sync-every N] [--lr F] [--momentum F]\n"
    "        [--weight-decay F] [--threads N] [--mem-budget SIZE] [--disable-op OP[@BACKEND]]\n"
    "        [--input CxHxW] [--samples N] [--no-capture] [--export DIR] [--json]\n"
    "        [--data synthetic|idx:IMAGES,LABELS|cifar:DIR|images:DIR] [--workers N]\n"
    "        [--val-split F] [--resolution HxW] [--augment crop,flip] [--cache]\n"
    "        [--normalize none|auto|M1,M2,M3/S1,S2,S3] [--on-bad-sample skip|fail]\n"
    "        [--max-bad-share F] [--sample-ms N] [--tf32]\n"
    "        the seeded training fixture: loss curve, samples/s, phases, allocator, fallbacks\n"
    "  sweep [train options] [--from N] [--to N] [--no-bisect] [--warmup-steps N]\n"
    "        [--timed-steps N] [--trial-timeout S] [--swap-growth MIB] [--json]\n"
    "        batch sweep, each trial in a child process: knee and largest safe batch\n"
    "  soak [train options] [--epochs E] [--steps S] [--no-empty-cache]\n"
    "        [--leak-per-step BYTES] [--val-steps N] [--json]\n"
    "        epochs with allocator discipline and per-epoch memory watermarks\n"
    "  compare [train options] --backend DEVICE [--batches 32,128] [--steps N]\n"
    "        [--repetitions N] [--loss-tolerance F] [--param-tolerance F] [--json]\n"
    "        the same run on cpu and the device against a float64 reference\n"
    "  profile [train options] [--warmup N] [--window N] [--trace FILE] [--json]\n"
    "        phases, per-op table with fallbacks, and a Chrome trace\n"
    "  accept [--quick] [train options] [--sweep-to N] [--threshold NAME=VALUE]...\n"
    "        [--spec FILE] [--label TEXT] [--python PATH] [-o DIR] [--json] [--quiet]\n"
    "        the main job: every step above, the rules, the decision, the evidence\n"
    "        pack (default ./devgate-report/RUN_ID/) and one ledger entry\n"
    "  run [--label L] [--sample-ms N] [--timeout D] [-o DIR] [--threshold NAME=VALUE]...\n"
    "        [--no-env] [--json] -- CMD ARGS...\n"
    "        supervise your own training program: its events (DEVGATE_EVENTS_FD), its\n"
    "        process tree's memory and CPU, timeout and signals; exit 124 timeout,\n"
    "        127 no such program, 130 interrupted\n"
    "  compare RUN_A RUN_B [--force] [--json]\n"
    "        two recorded runs (ledger ids, prefixes or record files) side by side\n"
    "  report RUN_ID|FILE.json [--format html|md|json|text] [-o DIR]\n"
    "        render an evidence record: terminal summary, page, Markdown or JSON\n"
    "  ledger list [--limit N] [--json]\n"
    "  ledger show ID [--json]\n"
    "  ledger diff A B [--force] [--json]\n"
    "        read the run ledger (SQLite; default $XDG_DATA_HOME/devgate/ledger.db,\n"
    "        or DEVGATE_LEDGER, or --ledger PATH)\n"
    "\n"
    "options: --json prints the record; --version; --help\n"
    "exit status: 0 pass, 1 fail, 2 usage or ledger error, 3 backend unavailable,\n"
    "130 interrupted (accept keeps the partial pack and ledger entry)\n";

static void log_to_stderr(dg_log_level level, const char *msg, void *user)
{
    const cli *c = user;
    if (level >= DG_LOG_WARN || (!c->quiet && getenv("DEVGATE_VERBOSE")))
        fprintf(stderr, "devgate: %s\n", msg);
}

int main(int argc, char **argv)
{
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
            fputs(usage_text, stdout);
            return EXIT_PASS;
        }
        if (!cli_common_opt(&c, argc, argv, &i)) {
            cli_error("unknown option '%s'\n%s", argv[i], usage_text);
            return EXIT_USAGE;
        }
    }
    if (i >= argc) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    c.ctx = dg_ctx_new();
    if (!c.ctx) {
        cli_error("out of memory");
        return EXIT_USAGE;
    }
    dg_set_log(c.ctx, log_to_stderr, &c);
    const char *verb = argv[i];
    int rc;
    if (strcmp(verb, "env") == 0)
        rc = cmd_env(&c, argc - i, argv + i);
    else if (strcmp(verb, "gate") == 0)
        rc = cmd_gate(&c, argc - i, argv + i);
    else if (strcmp(verb, "train") == 0)
        rc = cmd_train(&c, argc - i, argv + i);
    else if (strcmp(verb, "sweep") == 0)
        rc = cmd_sweep(&c, argc - i, argv + i);
    else if (strcmp(verb, "__trial") == 0)
        rc = cmd_trial(&c, argc - i, argv + i);
    else if (strcmp(verb, "soak") == 0)
        rc = cmd_soak(&c, argc - i, argv + i);
    else if (strcmp(verb, "compare") == 0)
        rc = cmd_compare(&c, argc - i, argv + i);
    else if (strcmp(verb, "profile") == 0)
        rc = cmd_profile(&c, argc - i, argv + i);
    else if (strcmp(verb, "accept") == 0)
        rc = cmd_accept(&c, argc - i, argv + i);
    else if (strcmp(verb, "run") == 0)
        rc = cmd_run(&c, argc - i, argv + i);
    else if (strcmp(verb, "report") == 0)
        rc = cmd_report(&c, argc - i, argv + i);
    else if (strcmp(verb, "ledger") == 0)
        rc = cmd_ledger(&c, argc - i, argv + i);
    else if (strcmp(verb, "help") == 0) {
        fputs(usage_text, stdout);
        rc = EXIT_PASS;
    } else {
        cli_error("unknown verb '%s'\n%s", verb, usage_text);
        rc = EXIT_USAGE;
    }
    dg_ctx_free(c.ctx);
    return rc;
}
