/* Every verb of the CLI, in the order `devgate --help` lists them: its
 * synopsis, what it does, its exit statuses, an example, its option tables
 * (each in its verb's file) and the function that runs it (docs/cli.md). One
 * list, as git's command table: a verb is added by adding its entry here and
 * its file. A table's heading in help is its title, else "VERB options",
 * "train options" or "common options" (opt.c). */
#include "cli.h"

const cli_verb cli_verb_env = {
    .name = "env",
    .summary = "environment proof: architecture, translation, VM/container, OS, CPU, memory, "
               "libraries, backends, git state, busy processes",
    .exits = "0 collected, 2 usage or ledger error",
    .example = "devgate env --python python3 --json",
    .tables = {cli_env_opts, cli_common_opts},
    .step = &(const cli_step){.size = sizeof(dg_env_opts),
                              .run = cli_env_run,
                              .print = cli_env_print,
                              .strict = true},
};

const cli_verb cli_verb_gate = {
    .name = "gate",
    .summary = "device gate: built, available, a checked matrix product per backend; deeper "
               "levels check every op, the link and the device's health",
    .exits = "0 every selected available backend passed, 1 a backend failed its check, 2 usage, "
             "3 a backend named with --backend is not available",
    .example = "devgate gate --backend cpu,opencl --size 1024\n  devgate gate --level 2",
    .tables = {cli_gate_opts, cli_common_opts},
    .step = &(const cli_step){.size = sizeof(dg_gate_opts),
                              .run = cli_gate_run,
                              .before = cli_gate_before,
                              .print = cli_gate_print,
                              .strict = true},
};

const cli_verb cli_verb_train = {
    .name = "train",
    .summary = "the seeded training fixture: loss curve, samples/s, phases, allocator, fallbacks",
    .exits = "0 trained with a finite loss, 1 non-finite loss or a failed run, 2 usage, "
             "3 backend unavailable",
    .example = "devgate train --model lenet --backend opencl --epochs 2",
    .tables = {cli_train_opts, cli_common_opts},
    .step = &(const cli_step){.size = sizeof(dg_train_opts),
                              .has_train = true,
                              .run = cli_train_run,
                              .judge = cli_train_judge,
                              .print = cli_train_print,
                              .progress = true},
};

const cli_verb cli_verb_sweep = {
    .name = "sweep",
    .summary =
        "batch sweep, trials in a child process (fresh after a failure): knee and safe batch",
    .exits = "0 at least one trial succeeded, 1 none did, 2 usage, 3 backend unavailable",
    .example = "devgate sweep --model lenet --from 16 --to 1024",
    .tables = {cli_sweep_opts, cli_train_opts, cli_common_opts},
    .titles = {[1] = "train options (--batch, --steps, --epochs, --export do not apply)"},
    .step = &(const cli_step){.size = sizeof(dg_sweep_opts),
                              .has_train = true,
                              .train_at = offsetof(dg_sweep_opts, train),
                              .check = cli_sweep_check,
                              .run = cli_sweep_run,
                              .judge = cli_sweep_judge,
                              .print = cli_sweep_print,
                              .progress = true},
};

const cli_verb cli_verb_soak = {
    .name = "soak",
    .summary = "epochs with allocator discipline and per-epoch memory watermarks",
    .exits = "0 the soak ran, 1 it failed part way, 2 usage, 3 backend unavailable",
    .example = "devgate soak --model lenet --epochs 5 --steps 50",
    .tables = {cli_soak_opts, cli_train_opts, cli_common_opts},
    .titles = {[1] = "train options (--epochs default 10 here)"},
    .step = &(const cli_step){.size = sizeof(dg_soak_opts),
                              .has_train = true,
                              .train_at = offsetof(dg_soak_opts, train),
                              .check = cli_soak_check,
                              .run = cli_soak_run,
                              .print = cli_soak_print,
                              .quiet_silent = true,
                              .progress = true},
};

const cli_verb cli_verb_compare = {
    .name = "compare",
    .args = "[RUN_A RUN_B]",
    .summary = "the same run on cpu and the device against a float64 reference; with RUN_A RUN_B "
               "(ledger ids, prefixes or record files), two recorded runs side by side",
    .exits = "0 agree (RUN_A RUN_B: compared), 1 drift or a failed run (a run id not found), "
             "2 usage (buckets differ), 3 backend unavailable",
    .example = "devgate compare --backend opencl --batches 32,128",
    .tables = {cli_compare_opts, cli_compare_runs_opts, cli_train_opts, cli_common_opts},
    .titles = {[1] = "compare RUN_A RUN_B options",
               [2] = "train options (--epochs, --sync-every, --export do not apply)"},
    .run = cmd_compare,
};

const cli_verb cli_verb_profile = {
    .name = "profile",
    .summary = "phases, per-op table with fallbacks, and a Chrome trace",
    .exits = "0 profiled, 1 the run failed, 2 usage, 3 backend unavailable",
    .example = "devgate profile --model lenet --window 20 --trace lenet.json",
    .tables = {cli_profile_opts, cli_train_opts, cli_common_opts},
    .titles = {[1] = "train options (--steps, --epochs, --val-split, --export do not apply)"},
    .step = &(const cli_step){.size = sizeof(dg_profile_opts),
                              .has_train = true,
                              .train_at = offsetof(dg_profile_opts, train),
                              .check = cli_profile_check,
                              .run = cli_profile_run,
                              .print = cli_profile_print},
};

const cli_verb cli_verb_accept = {
    .name = "accept",
    .args = "[-- CMD ARGS...]",
    .summary = "the main job: env, gate, sweep, soak, compare, profile, the rules, the decision, "
               "the evidence pack and one ledger entry",
    .exits = "0 accepted, 1 a fail finding or a failed gate, 2 usage or ledger error, 3 backend "
             "unavailable, 4 not accepted (default tier, no fail finding), 130 interrupted "
             "(partial pack and ledger entry kept)",
    .example = "devgate accept --quick --backend opencl -o pack/\n"
               "  devgate accept -- python3 train.py --batch {batch} --device {device} "
               "--epochs {epochs}",
    .tables = {cli_accept_opts, cli_train_opts, cli_common_opts},
    .titles = {[1] =
                   "train options (accept's own defaults: --model cifar, --backend the best device "
                   "whose gate passes, --batch the sweep's knee; --epochs/--steps size the soak)"},
    .run = cmd_accept,
};

const cli_verb cli_verb_run = {
    .name = "run",
    .args = "-- CMD ARGS...",
    .summary = "supervise your own training program: its events (DEVGATE_EVENTS_FD), its process "
               "tree's memory and CPU, timeout and signals",
    .exits = "0 the program exited 0, 1 it failed or was killed, 2 usage, 124 timeout, 126 "
             "cannot start, 127 no such program, 130 interrupted",
    .example = "devgate run --timeout 10m -- python3 train.py --epochs 2",
    .tables = {cli_run_opts, cli_common_opts},
    .run = cmd_run,
};

const cli_verb cli_verb_report = {
    .name = "report",
    .args = "RUN_ID|FILE.json",
    .summary = "render an evidence record: terminal summary, page, Markdown or JSON",
    .exits = "0 rendered, 2 usage, no such file or run, unreadable, not JSON or not an evidence "
             "record",
    .example = "devgate report 3f2a --format html -o pack/",
    .tables = {cli_report_opts, cli_common_opts},
    .run = cmd_report,
};

const cli_verb cli_verb_ledger = {
    .name = "ledger",
    .args = "list | show ID | diff A B | export --format csv|jsonl | push",
    .summary = "read the run ledger (SQLite; default $XDG_DATA_HOME/devgate/ledger.db, or "
               "DEVGATE_LEDGER, or --ledger PATH), or a team ledger postgresql://...; push "
               "uploads the runs kept locally while the team ledger was unreachable",
    .exits = "0 done, 1 no such run (show, diff) or the runs are not comparable (diff: verb, "
             "spec or bucket differ; --force: 0), 2 usage or ledger error",
    .example = "devgate ledger list --limit 10",
    .tables = {cli_ledger_opts, cli_common_opts},
    .run = cmd_ledger,
};

const cli_verb cli_verb_remote = {
    .name = "remote",
    .args = "HOST VERB [options] | HOST collect [TOKEN] | HOST argv WORDS...",
    .summary = "run VERB on a node over ssh: node check, input shipped by SHA-256 into its cache, "
               "the run detached there, the record into the local ledger (options go before "
               "HOST)",
    .exits = "the verb's; 2 usage, 10 unreachable, 11 auth refused, 12 devgate missing or too "
             "old, 13 disk full, 14 connection lost (the run goes on), 15 input bucket differs "
             "or arrived corrupt",
    .example = "devgate remote -o Port=2222 mac-mini accept --quick",
    .tables = {cli_remote_opts, cli_remote_run_opts, cli_common_opts},
    .titles = {[0] = "ssh and node options", [1] = "run options"},
    .run = cmd_remote,
};

const cli_verb cli_verb_pool = {
    .name = "pool",
    .args = "submit [options] -- VERB [options] | status JOB | collect JOB",
    .summary = "a pool on Slurm: submit VERB as a job array (each task runs it on its node into "
               "the ledger), show the tasks' states, collect their records into one "
               "side-by-side report",
    .exits = "0 done (collect: every task completed, one input bucket), 2 usage or ledger "
             "error, 15 the tasks ran on different input buckets, 20 Slurm unusable (tools "
             "missing, controller down, sbatch refused), 21 no such job, 22 a task failed, was "
             "cancelled or is unknown, 23 tasks still pending or running",
    .example = "devgate pool submit --tasks 4 --partition gpu -- accept --quick",
    .tables = {cli_pool_opts, cli_common_opts},
    .run = cmd_pool,
};

const cli_verb cli_verb_slo = {
    .name = "slo",
    .args = "[--while -- CMD ARGS...]",
    .summary = "a signable concurrency SLO: TTFT/TPOT/E2E percentiles of an OpenAI or Ollama "
               "endpoint under N streams or seeded arrivals, LoadGen's binomial verdict, a ladder",
    .exits = "0 the SLO is signed, 1 missed (or the endpoint stopped answering), 2 usage, 3 no "
             "libcurl or the endpoint never answered, 4 inconclusive (more requests needed, or "
             "not steady), 130 interrupted",
    .example = "devgate slo --target http://127.0.0.1:8000 --concurrency 1,2,4,8 --duration 60s "
               "--slo ttft:500ms --slo tpot:30ms   (or --target fixture --backend cuda --model "
               "cifar: devgate's own model served for the run)",
    .tables = {cli_slo_opts, cli_common_opts},
    .run = cmd_slo,
};

const cli_verb cli_verb_slo_fixture = {
    .name = "__slo_fixture",
    .summary = "the fixture model served in OpenAI's streaming shape on a listening socket (run "
               "by devgate slo --target fixture)",
    .exits =
        "0 stopped by a signal, 1 a forward pass failed, 2 usage, 3 the model cannot be served "
        "on the backend",
    .example = "devgate __slo_fixture --listen-fd 3 --ready-fd 4 --backend cpu --model mlp",
    .tables = {cli_slo_fixture_opts, cli_common_opts},
    .run = cmd_slo_fixture,
    .hidden = true,
};

const cli_verb cli_verb_trial = {
    .name = "__trial",
    .summary = "sweep trials in a child process: one, or a spec a line with --serve (run by "
               "devgate sweep)",
    .exits = "0 trained, 1 failed, 2 usage",
    .example = "devgate __trial --spec-fd 0 --result-fd 3",
    .tables = {cli_trial_opts, cli_common_opts},
    .run = cmd_trial,
    .hidden = true,
};

const cli_verb cli_verb_node = {
    .name = "__node",
    .summary =
        "the node side of devgate remote (info, have, put, tree, bucket, start, wait, fetch, "
        "list, mark)",
    .exits = "0 done, 2 usage, 13 disk full, 15 arrived corrupt",
    .example = "devgate __node info",
    .run = cmd_node,
    .hidden = true,
};

const cli_verb cli_verb_pool_task = {
    .name = "__pool_task",
    .summary = "one task of a pool job on its node (devgate pool submit writes the call)",
    .exits = "the verb's own; 2 usage",
    .example = "devgate __pool_task --dir DIR --ledger L -- accept --quick",
    .run = cmd_pool_task,
    .hidden = true,
};

const cli_verb *const cli_verbs[] = {
    &cli_verb_env,
    &cli_verb_gate,
    &cli_verb_train,
    &cli_verb_sweep,
    &cli_verb_soak,
    &cli_verb_compare,
    &cli_verb_profile,
    &cli_verb_accept,
    &cli_verb_run,
    &cli_verb_report,
    &cli_verb_ledger,
    &cli_verb_remote,
    &cli_verb_pool,
    &cli_verb_slo,
    &cli_verb_trial,
    &cli_verb_node,
    &cli_verb_pool_task,
    &cli_verb_slo_fixture,
    NULL,
};
