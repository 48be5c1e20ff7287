/* devgate pool submit|status|collect: a pool of nodes on Slurm. The work is
 * the library's (src/pool/: dg_pool_submit, dg_pool_status, dg_pool_collect,
 * dg_pool_task_run); this file parses the options, prints the tables and
 * maps the outcome to exit statuses. `submit` sends VERB as a job array whose
 * tasks run the hidden verb `__pool_task`; `status` merges Slurm's view with
 * the task folders; `collect` puts every task's record into the ledger and
 * prints one row per task side by side (a failed or cancelled task is a row,
 * never a gap), holding them to one input bucket. docs/team.md. */
#include "cli.h"

#include <stddef.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* Exit statuses of `pool` (docs/cli.md); 15 is remote's "input bucket differs". */
enum {
    EXIT_POOL_BUCKET = 15,  /* collect: the tasks ran on different input buckets */
    EXIT_POOL_SLURM = 20,   /* Slurm's tools missing, the controller unreachable, sbatch refused */
    EXIT_POOL_UNKNOWN = 21, /* no such job: Slurm does not know it and it has no folder */
    EXIT_POOL_TASKS = 22,   /* collect: a task failed, was cancelled or is unknown */
    EXIT_POOL_RUNNING = 23, /* collect: tasks still pending or running */
};

#define POOL_MAX_TASKS 1024
#define POOL_MAX_ARGS 256
#define POOL_DEFAULT_DIR "devgate-pool"

/* The exit status of a failed library call, its message printed. */
static int pool_fail(cli *c, dg_status st)
{
    cli_error("%s", dg_errmsg(c->ctx));
    switch (st) {
    case DG_ERR_UNAVAILABLE: return EXIT_POOL_SLURM;
    case DG_ERR_NOT_FOUND: return EXIT_POOL_UNKNOWN;
    default: return EXIT_USAGE;
    }
}

/* The library's JSON answer parsed (the text freed). */
static cJSON *parse_answer(char *json)
{
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    return o;
}

static int count_of(const cJSON *o, const char *k)
{
    return (int)jnum(cJSON_GetObjectItem(o, "counts"), k, 0);
}

/* The submitted words, cleaned for a table cell, into buf. */
static void words_text(const cJSON *argv, char *buf, size_t len)
{
    buf[0] = '\0';
    size_t off = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, argv)
    {
        char cell[128];
        if (cJSON_IsString(w) && off < len)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? " " : "",
                                    cli_cell(cell, sizeof cell, w->valuestring));
    }
}

/* ---- submit ------------------------------------------------------------------ */

typedef struct pool_args {
    const char *dir;
    const char *array;
    int tasks;
    const char *partition;
    const char *time;
    const char *devgate;
    const char *sbatch_opts[16];
    int nsbatch;
} pool_args;

static const char *add_sbatch_opt(const cli_opt *o, const char *value, void *field)
{
    (void)o;
    pool_args *a = field;
    if (!value[0] || value[0] != '-' || a->nsbatch >= 16)
        return "an sbatch option such as --gres=gpu:1 (at most 16)";
    a->sbatch_opts[a->nsbatch++] = value;
    return NULL;
}

/* Verbs a pool task may run: the measuring ones. */
static bool poolable(const char *verb)
{
    static const char *const no[] = {"pool", "remote", "ledger", "report"};
    const cli_verb *v = cli_find_verb(verb);
    if (!v || v->hidden)
        return false;
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (strcmp(verb, no[i]) == 0)
            return false;
    return true;
}

static int pool_submit(cli *c, pool_args *pa, int nrest, char **rest)
{
    if (nrest < 1 || !rest) {
        cli_error("pool submit: no verb given (devgate pool submit [options] -- VERB [options])");
        return EXIT_USAGE;
    }
    if (!poolable(rest[0])) {
        cli_error("pool submit: '%s' is not a verb a pool task runs (env, gate, train, sweep, "
                  "soak, compare, profile, accept, run or slo)",
                  rest[0]);
        return EXIT_USAGE;
    }
    if (nrest > POOL_MAX_ARGS - 16) {
        cli_error("pool submit: more than %d words after --", POOL_MAX_ARGS - 16);
        return EXIT_USAGE;
    }
    if (c->no_ledger) {
        cli_error("pool submit: --no-ledger: every task records its run in the ledger");
        return EXIT_USAGE;
    }
    char *ledger = cli_ledger_path(c);
    dg_pool_submit_opts o = {.dir = pa->dir,
                             .array = pa->array,
                             .tasks = pa->tasks,
                             .partition = pa->partition,
                             .time_limit = pa->time,
                             .devgate = pa->devgate,
                             .sbatch_opts = pa->sbatch_opts,
                             .n_sbatch = pa->nsbatch,
                             .ledger = ledger,
                             .argv = (const char *const *)rest,
                             .argc = nrest};
    if (ledger && !dg_ledger_is_team(ledger) && !c->quiet)
        fprintf(stderr,
                "devgate: pool submit: the tasks record into the file %s: on a cluster it must "
                "be on a filesystem every node shares (or use a team ledger postgresql://...)\n",
                ledger);
    char *json = NULL;
    dg_status st = dg_pool_submit(c->ctx, &o, &json);
    free(ledger);
    if (st != DG_OK)
        return pool_fail(c, st == DG_ERR_IO ? DG_ERR_USAGE : st);
    cJSON *m = parse_answer(json);
    if (c->json) {
        cli_print_json(m, NULL);
    } else {
        char words_s[512], dir[4200];
        words_text(cJSON_GetObjectItem(m, "argv"), words_s, sizeof words_s);
        const char *job = jstr(m, "job", "?");
        int n = cJSON_GetArraySize(cJSON_GetObjectItem(m, "tasks"));
        printf("pool job %s: %d task%s of '%s' submitted%s%s\n", job, n, n == 1 ? "" : "s", words_s,
               pa->partition ? " to partition " : "", pa->partition ? pa->partition : "");
        /* The hint is pasted into a shell: the folder quoted as one word. */
        const char *words[] = {pa->dir ? pa->dir : "", NULL};
        char *qdir = pa->dir ? dg_shell_quote(words) : NULL;
        snprintf(dir, sizeof dir, "%s", qdir ? qdir : "");
        dg_string_free(qdir);
        char folder[512];
        printf("  folder %s; 'devgate pool status %s' and 'devgate pool collect %s'%s%s\n",
               cli_cell(folder, sizeof folder, jstr(m, "dir", "")), job, job,
               pa->dir ? " --dir " : "", dir);
    }
    cJSON_Delete(m);
    return EXIT_PASS;
}

/* ---- status ------------------------------------------------------------------ */

static void exit_text(const cJSON *t, char *buf, size_t len)
{
    const cJSON *x = cJSON_GetObjectItem(t, "exit_status"), *s = cJSON_GetObjectItem(t, "signal");
    if (!cJSON_IsNumber(x))
        snprintf(buf, len, "-");
    else if (cJSON_IsNumber(s) && s->valuedouble != 0)
        snprintf(buf, len, "%d:%d", (int)x->valuedouble, (int)s->valuedouble);
    else
        snprintf(buf, len, "%d", (int)x->valuedouble);
}

/* "4 tasks: 3 completed, 1 cancelled" */
static void counts_text(const cJSON *tasks, char *buf, size_t len)
{
    static const char *const words[] = {"completed", "running",   "pending",
                                        "failed",    "cancelled", "unknown"};
    int n = cJSON_GetArraySize(tasks);
    size_t off = (size_t)snprintf(buf, len, "%d task%s", n, n == 1 ? "" : "s");
    bool first = true;
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        int k = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tasks) if (strcmp(jstr(t, "state", ""), words[w]) == 0) k++;
        if (k && off < len)
            off +=
                (size_t)snprintf(buf + off, len - off, "%s%d %s", first ? ": " : ", ", k, words[w]);
        if (k)
            first = false;
    }
}

static int pool_status(cli *c, const char *dir, const char *job)
{
    char *json = NULL;
    dg_status st = dg_pool_status(c->ctx, dir, job, &json);
    if (st != DG_OK)
        return pool_fail(c, st);
    cJSON *o = parse_answer(json);
    const cJSON *tasks = cJSON_GetObjectItem(o, "tasks");
    bool knows = cJSON_IsTrue(cJSON_GetObjectItem(o, "slurm_knows"));
    if (c->json) {
        cJSON *out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "kind", "pool-status");
        cJSON_AddStringToObject(out, "job", jstr(o, "job", ""));
        cJSON_AddBoolToObject(out, "slurm_knows", knows);
        cJSON_AddItemToObject(out, "tasks", cJSON_Duplicate(tasks, true));
        cli_print_json(out, NULL);
        cJSON_Delete(out);
    } else {
        char counts[256];
        counts_text(tasks, counts, sizeof counts);
        printf("pool job %s: %s%s\n", jstr(o, "job", ""), counts,
               knows ? "" : " (Slurm no longer lists it: states from the task folders)");
        printf("%-5s %-10s %-6s %-16s %s\n", "task", "state", "exit", "node", "detail");
        const cJSON *t;
        cJSON_ArrayForEach(t, tasks)
        {
            char ex[32], node[64], det[256];
            exit_text(t, ex, sizeof ex);
            printf("%-5d %-10s %-6s %-16s %s\n", (int)jnum(t, "task", -1), jstr(t, "state", "?"),
                   ex, cli_cell(node, sizeof node, jstr(t, "node", "-")),
                   cli_cell(det, sizeof det, jstr(t, "detail", "")));
        }
    }
    cJSON_Delete(o);
    return EXIT_PASS;
}

/* ---- collect ------------------------------------------------------------------ */

/* One row of the side-by-side table, and its notes below it. */
static void print_row(const cJSON *t)
{
    char ex[32], node[64], be[32], batch[16], tp[48], verdict[64], id[64];
    exit_text(t, ex, sizeof ex);
    const cJSON *m = cJSON_GetObjectItem(t, "throughput");
    double v = jmetric(t, "throughput");
    if (!m)
        snprintf(tp, sizeof tp, "-");
    else if (isnan(v))
        snprintf(tp, sizeof tp, "not reported");
    else
        snprintf(tp, sizeof tp, "%.1f %s", v, jstr(m, "unit", ""));
    const cJSON *bt = cJSON_GetObjectItem(t, "batch");
    if (cJSON_IsNumber(bt))
        snprintf(batch, sizeof batch, "%d", (int)bt->valuedouble);
    else
        snprintf(batch, sizeof batch, "-");
    const char *vd = jstr(t, "verdict", NULL), *route = jstr(t, "route", NULL);
    if (vd)
        snprintf(verdict, sizeof verdict, "%s%s%s", vd, route ? ", route " : "",
                 route ? route : "");
    else
        snprintf(verdict, sizeof verdict, "%s", route ? route : "-");
    printf("%-5d %-16s %-10s %-5s %-8s %-6s %-18s %-24s %s\n", (int)jnum(t, "task", -1),
           cli_cell(node, sizeof node, jstr(t, "node", "-")), jstr(t, "state", "?"), ex,
           cli_cell(be, sizeof be, jstr(t, "backend", "-")), batch, tp,
           cli_cell(verdict, sizeof verdict, verdict),
           cli_cell(id, sizeof id, jstr(t, "run_id", "-")));
    const char *bd = jstr(t, "bucket_differs", NULL), *det = jstr(t, "detail", NULL),
               *ll = jstr(t, "last_log_line", NULL), *refused = jstr(t, "record_refused", NULL);
    char cell[300];
    if (bd)
        printf("      ran on another input bucket than the first task (%s differ)\n",
               cli_cell(cell, sizeof cell, bd));
    if (refused)
        printf("      %s\n", cli_cell(cell, sizeof cell, refused));
    if (det && strcmp(jstr(t, "state", ""), "completed") != 0)
        printf("      %s\n", cli_cell(cell, sizeof cell, det));
    if (ll)
        printf("      last log line: %s\n", cli_cell(cell, sizeof cell, ll));
}

static int pool_collect(cli *c, const char *dir, const char *job)
{
    /* The ledger: --ledger, else the one the tasks wrote to. */
    dg_ledger *lg = NULL;
    char *ledger = NULL;
    if (!c->no_ledger) {
        if (!c->ledger_path)
            dg_pool_job_ledger(c->ctx, dir, job, &ledger);
        if (!(lg = cli_ledger_open(c, ledger, CLI_LEDGER_WRITE, "pool collect", NULL))) {
            dg_string_free(ledger);
            return EXIT_USAGE;
        }
    }
    char *json = NULL;
    dg_status st = dg_pool_collect(c->ctx, lg, dir, job, &json);
    char *shown = lg ? strdup(dg_ledger_name(lg)) : NULL;
    dg_ledger_close(lg);
    dg_string_free(ledger);
    if (st != DG_OK) {
        free(shown);
        return pool_fail(c, st);
    }
    cJSON *o = parse_answer(json);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(o, "ledger_errors"))
    {
        cli_error("pool collect: %s", cJSON_GetStringValue(e) ? e->valuestring : "?");
    }
    int ret = EXIT_PASS;
    if (count_of(o, "pending_or_running"))
        ret = EXIT_POOL_RUNNING;
    else if (count_of(o, "bad") || count_of(o, "no_record"))
        ret = EXIT_POOL_TASKS;
    else if (count_of(o, "bucket_differs"))
        ret = EXIT_POOL_BUCKET;
    else if (count_of(o, "ledger_errors"))
        ret = EXIT_USAGE;
    const cJSON *tasks = cJSON_GetObjectItem(o, "tasks"), *t;
    int added = (int)jnum(o, "recorded_now", 0);
    if (c->json) {
        cJSON_DeleteItemFromObject(o, "counts");
        cJSON_DeleteItemFromObject(o, "ledger_errors");
        if (shown)
            cJSON_AddStringToObject(o, "ledger", shown);
        else
            cJSON_AddNullToObject(o, "ledger");
        cJSON_AddNumberToObject(o, "exit_status", ret);
        cli_print_json(o, NULL);
    } else {
        char counts[256], words_s[512];
        counts_text(tasks, counts, sizeof counts);
        words_text(cJSON_GetObjectItem(o, "argv"), words_s, sizeof words_s);
        printf("pool job %s: '%s', %s\n", jstr(o, "job", ""), words_s, counts);
        printf("%-5s %-16s %-10s %-5s %-8s %-6s %-18s %-24s %s\n", "task", "node", "state", "exit",
               "backend", "batch", "throughput", "verdict", "run id");
        cJSON_ArrayForEach(t, tasks) print_row(t);
        /* Records with an input bucket: every kind but slo (a run's bucket
         * may have no id and is compared field by field). */
        bool bucketed = false;
        cJSON_ArrayForEach(t, tasks)
        {
            const char *k = jstr(t, "record_kind", NULL);
            bucketed = bucketed || (k && strcmp(k, "slo") != 0);
        }
        if (bucketed)
            printf("input bucket: %s\n",
                   count_of(o, "bucket_differs")
                       ? "the tasks differ (exit 15): they are not comparable side by side"
                       : "every task with a record ran on the same one");
        if (added)
            printf("%d record%s entered into the ledger now\n", added, added == 1 ? "" : "s");
        if (ret == EXIT_POOL_RUNNING)
            printf("tasks still pending or running: collect again later\n");
    }
    cJSON_Delete(o);
    free(shown);
    return ret;
}

/* ---- the verb ------------------------------------------------------------------ */

const cli_opt cli_pool_opts[] = {
    {CLI_STR, "--dir", NULL, "DIR", "./" POOL_DEFAULT_DIR, NULL,
     "the pool folder: job scripts, task records and logs (shared by the nodes)",
     offsetof(pool_args, dir), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_INT, "--tasks", NULL, "N", "1", "tasks", "submit: tasks in the job array (0..N-1)",
     offsetof(pool_args, tasks), 1, POOL_MAX_TASKS, NULL, NULL, NULL},
    {CLI_STR, "--array", NULL, "SPEC", NULL, NULL,
     "submit: Slurm array spec instead of --tasks (0-3, 1,3,5-7, 0-7%2)",
     offsetof(pool_args, array), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_STR, "--partition", NULL, "P", "Slurm's default", NULL, "submit: the partition",
     offsetof(pool_args, partition), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_STR, "--time", NULL, "T", "the partition's", NULL,
     "submit: each task's time limit (Slurm's forms: 30, 1:00:00)", offsetof(pool_args, time), 0, 0,
     cli_nonempty, NULL, NULL},
    {CLI_STR, "--devgate", NULL, "PATH", "this devgate", NULL, "submit: devgate on the nodes",
     offsetof(pool_args, devgate), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_FUNC, "--sbatch-option", NULL, "OPT", NULL, NULL,
     "submit: one more sbatch option, one word (--gres=gpu:1; repeatable)", 0, 0, 0, add_sbatch_opt,
     NULL, NULL},
    CLI_OPTS_END,
};

int cmd_pool(cli *c, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            cli_verb_help(&cli_verb_pool, stdout);
            return EXIT_PASS;
        }
        cli_error("pool: use 'pool submit [options] -- VERB [options]', 'pool status JOB' or "
                  "'pool collect JOB' (devgate pool --help)");
        return EXIT_USAGE;
    }
    const char *sub = argv[1];
    pool_args pa = {0};
    bool submit = strcmp(sub, "submit") == 0;
    char *pos[1];
    cli_args a = {.pos = pos, .max = submit ? -1 : 1};
    int r = cli_parse(c, &cli_verb_pool, argc - 1, argv + 1, (void *const[]){&pa, c}, &a);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    if (submit)
        return pool_submit(c, &pa, a.nrest, a.rest);
    if (pa.tasks || pa.array || pa.partition || pa.time || pa.devgate || pa.nsbatch) {
        cli_error("pool %s: --tasks, --array, --partition, --time, --devgate and "
                  "--sbatch-option belong to pool submit",
                  sub);
        return EXIT_USAGE;
    }
    if (strcmp(sub, "status") == 0 && a.npos == 1)
        return pool_status(c, pa.dir, pos[0]);
    if (strcmp(sub, "collect") == 0 && a.npos == 1)
        return pool_collect(c, pa.dir, pos[0]);
    cli_error("pool: use 'pool submit [options] -- VERB [options]', 'pool status JOB' or 'pool "
              "collect JOB' (devgate pool --help)");
    return EXIT_USAGE;
}

/* ---- the task side: devgate __pool_task --dir ROOT --ledger L -- VERB ARGS ---- */

static volatile sig_atomic_t g_task_signal;

static void task_on_signal(int sig)
{
    g_task_signal = sig;
}

int cmd_pool_task(cli *c, int argc, char **argv)
{
    const char *root = NULL, *ledger = NULL;
    int i = 1;
    for (; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            root = argv[i + 1];
        else if (strcmp(argv[i], "--ledger") == 0)
            ledger = argv[i + 1];
        else
            break;
    }
    if (!root || i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc ||
        argc - i > POOL_MAX_ARGS) {
        cli_error("__pool_task: use '__pool_task --dir DIR [--ledger L] -- VERB ARGS'");
        return EXIT_USAGE;
    }
    i++;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = task_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    const char *t = getenv("DEVGATE_LEDGER_TIMEOUT_MS");
    dg_pool_task_opts o = {.dir = root,
                           .ledger = ledger,
                           .ledger_timeout_ms = t ? atoi(t) : 0,
                           .argv = (const char *const *)argv + i,
                           .argc = argc - i,
                           .cancel = &g_task_signal};
    dg_pool_task_result r;
    dg_status st = dg_pool_task_run(c->ctx, &o, &r);
    if (st != DG_OK) {
        cli_error("%s", dg_errmsg(c->ctx));
        return st == DG_ERR_IO && r.exit_status != 2 ? r.exit_status : EXIT_USAGE;
    }
    if (r.note[0])
        cli_error("__pool_task: %s", r.note);
    return r.exit_status;
}
