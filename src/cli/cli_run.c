/* devgate run: supervise the user's own training program (docs/events.md,
 * docs/cli.md "devgate run"). */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by the first INT, TERM or HUP; read (and forwarded) by the library's loop. */
static volatile sig_atomic_t forward_sig;

/* --probe auto|manual|off into a dg_probe_mode. */
static const char *probe_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    dg_probe_mode *m = field;
    if (strcmp(v, "auto") == 0)
        *m = DG_PROBE_AUTO;
    else if (strcmp(v, "manual") == 0)
        *m = DG_PROBE_MANUAL;
    else if (strcmp(v, "off") == 0)
        *m = DG_PROBE_OFF;
    else
        return "auto, manual or off";
    return NULL;
}

/* True when dir/devgate_probe/auto.py exists. */
static bool has_probe(const char *dir)
{
    char p[4096];
    int n = snprintf(p, sizeof p, "%s/devgate_probe/auto.py", dir);
    return n > 0 && (size_t)n < sizeof p && access(p, R_OK) == 0;
}

/* The directory holding the devgate_probe package: DEVGATE_PROBE_PATH, else
 * found relative to this executable: EXE_DIR/python (the build's copy),
 * EXE_DIR/../share/devgate/python (installed), EXE_DIR/../clients/python (a
 * build directory inside the source tree). false when none has it. */
bool cli_find_probe(char *out, size_t n)
{
    const char *env = getenv("DEVGATE_PROBE_PATH");
    if (env && env[0]) {
        snprintf(out, n, "%s", env);
        return has_probe(out);
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return false;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    static const char *const rel[] = {"python", "../share/devgate/python", "../clients/python"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[4096 + 64];
        snprintf(cand, sizeof cand, "%s/%s", exe, rel[i]);
        char real[PATH_MAX];
        if (realpath(cand, real) && has_probe(real)) {
            snprintf(out, n, "%s", real);
            return true;
        }
    }
    return false;
}

typedef struct run_args {
    dg_run_opts o;
    const char *out_dir;
    cli_thresholds thr;
    bool no_empty_cache;
} run_args;

#define OFF(f) offsetof(run_args, f)
const cli_opt cli_run_opts[] = {
    {CLI_STR, "--label", NULL, "L", "none", NULL, "free text kept in the record", OFF(o.label), 0,
     0, NULL, NULL, NULL},
    {CLI_INT, "--sample-ms", NULL, "N", "200", "ms", "process-tree sampling period",
     OFF(o.sample_ms), 10, 3600000, NULL, NULL, NULL},
    {CLI_FUNC, "--timeout", NULL, "D", "none", NULL,
     "SIGTERM the tree after D (90, 90s, 10m, 2h), SIGKILL 2 s later", OFF(o.timeout_s), 0, 0,
     cli_duration_opt, NULL, NULL},
    {CLI_STR, "--out", "-o", "DIR", "./devgate-report/RUN_ID/", NULL,
     "where the evidence pack goes", OFF(out_dir), 0, 0, NULL, NULL, NULL},
    {CLI_FUNC, "--threshold", NULL, "NAME=VALUE", NULL, NULL,
     "a rule threshold (repeatable; docs/rules.md)", OFF(thr), 0, 0, cli_threshold_add, NULL, NULL},
    {CLI_FLAG, "--no-env", NULL, NULL, NULL, NULL, "skip the environment proof", OFF(o.no_env), 0,
     0, NULL, NULL, NULL},
    {CLI_FUNC, "--probe", NULL, "auto|manual|off", "auto", NULL,
     "auto: a Python program runs through the zero-code probe (python -m devgate_probe.auto), "
     "others get its sitecustomize; manual: as given, with the events pipe; off: as given, "
     "samples only",
     OFF(o.probe), 0, 0, probe_opt, NULL, NULL},
    {CLI_FLAG, "--empty-cache", NULL, NULL, NULL, NULL,
     "auto: the probe collects garbage and empties the device cache at every epoch end (the "
     "default)",
     OFF(o.empty_cache), 0, 0, NULL, NULL, NULL},
    {CLI_FLAG, "--no-empty-cache", NULL, NULL, NULL, NULL,
     "auto: the probe leaves garbage collection and the device cache to the program",
     OFF(no_empty_cache), 0, 0, NULL, NULL, NULL},
    CLI_OPTS_END,
};
#undef OFF

int cmd_run(cli *c, int argc, char **argv)
{
    run_args ra = {.o = {.forward = &forward_sig}};
    cli_args a = {.max = -1}; /* the first word that is not an option starts the command */
    int r = cli_parse(c, &cli_verb_run, argc, argv, (void *const[]){&ra, c}, &a);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    if (!a.rest || a.nrest == 0) {
        cli_error("run: no program given (devgate run [options] -- CMD ARGS...)");
        return EXIT_USAGE;
    }
    const char *out_dir = ra.out_dir;
    size_t toff = strlen(ra.thr.list);
    char *thresholds = ra.thr.list;
    dg_run_opts o = ra.o;
    o.empty_cache = !ra.no_empty_cache;   /* the method's step 4, applied unless opted out */
    o.argv = (const char *const *)a.rest; /* argv is NULL-terminated */
    char probe_dir[4096];
    if (o.probe == DG_PROBE_AUTO && cli_find_probe(probe_dir, sizeof probe_dir))
        o.probe_path = probe_dir;
    else if (o.probe == DG_PROBE_AUTO && !c->quiet)
        cli_error("run: the zero-code probe is not armed: devgate_probe not found beside devgate "
                  "(set DEVGATE_PROBE_PATH); running with --probe manual");
    o.stdout_to_stderr = c->json;
    cli_progress p;
    cli_progress_start(&p, c, "run");
    dg_set_log(c->ctx, cli_progress_log, &p);
    o.progress = cli_progress_report;
    o.progress_user = &p;
    o.output = cli_progress_output;
    o.output_user = &p;

    /* Caught until the record is kept: a hang-up or a late TERM ends the
     * program's tree (forwarded, then killed after the grace), not devgate. */
    cli_signals sigs;
    forward_sig = 0;
    cli_signals_catch(&sigs, &forward_sig);
    char *json = NULL;
    dg_status st = dg_run_measured(c->ctx, &o, &json);
    cli_progress_end(&p);
    if (!json) {
        cli_signals_release(&sigs);
        if (st == DG_ERR_NOT_FOUND || st == DG_ERR_IO) {
            cli_error("%s", dg_errmsg(c->ctx));
            return st == DG_ERR_NOT_FOUND ? EXIT_RUN_NOTFOUND : EXIT_RUN_NOEXEC;
        }
        return cli_fail_status(c, st, "run");
    }
    cJSON *rec = cJSON_Parse(json);
    const cJSON *sup = cJSON_GetObjectItem(rec, "supervise");
    const cJSON *xs = cJSON_GetObjectItem(sup, "exit_status");
    int rc = cJSON_IsTrue(cJSON_GetObjectItem(sup, "interrupted")) ? EXIT_INTERRUPTED
             : cJSON_IsTrue(cJSON_GetObjectItem(sup, "timed_out")) ? EXIT_RUN_TIMEOUT
             : (cJSON_IsNumber(xs) && xs->valuedouble == 0) ||
                     strcmp(jstr(rec, "state", ""), "complete") == 0
                 ? EXIT_PASS
                 : EXIT_FAIL;
    if (!c->quiet && rc != EXIT_PASS) {
        const cJSON *step;
        cJSON_ArrayForEach(step, cJSON_GetObjectItem(rec, "steps"))
        {
            if (strcmp(jstr(step, "name", ""), "supervise") == 0 &&
                cJSON_IsString(cJSON_GetObjectItem(step, "error")))
                cli_error("run: %s", jstr(step, "error", ""));
        }
    }
    cJSON_Delete(rec);
    rc = cli_evidence_finish(c, "run", json, toff ? thresholds : NULL, out_dir, rc);
    cli_signals_release(&sigs);
    dg_string_free(json);
    return forward_sig ? EXIT_INTERRUPTED : rc;
}
