/* devgate sweep: the batch sweep (docs/measure.md "Sweep"), and the hidden
 * `__trial` verb that runs one of its trials in a child process. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

static void fmt_mem(char *buf, size_t len, const cJSON *obj, const char *key)
{
    fmt_bytes(buf, len, cJSON_GetObjectItem(obj, key));
    if (strcmp(buf, "not reported") == 0)
        snprintf(buf, len, "-");
}

static void print_trial(const cJSON *t)
{
    char sps[24], med[24], iqr[24], al[24], rs[24], rss[24], sw[24], psi[24], wall[24], step[48];
    const cJSON *sm = cJSON_GetObjectItem(t, "step_ms");
    cli_metric(sps, sizeof sps, t, "samples_per_s", "%.0f", "-");
    cli_metric(med, sizeof med, sm, "median", "%.3f", "-");
    cli_metric(iqr, sizeof iqr, sm, "iqr", "%.3f", "-");
    snprintf(step, sizeof step, "%s (%s)", med, iqr);
    fmt_mem(al, sizeof al, t, "device_allocated_peak");
    fmt_mem(rs, sizeof rs, t, "device_reserved_peak");
    fmt_mem(rss, sizeof rss, t, "rss_peak");
    fmt_mem(sw, sizeof sw, t, "swap_growth");
    cli_metric(psi, sizeof psi, t, "psi_peak", "%.1f", "-");
    cli_metric(wall, sizeof wall, t, "wall_s", "%.1f", "-");
    char ended[40];
    const char *sig = jstr(t, "signal", NULL);
    snprintf(ended, sizeof ended, "%s%s%s", jstr(t, "ended", "?"), sig ? " " : "", sig ? sig : "");
    printf("  %7g  %-14s %11s  %-19s %10s %10s %10s %9s %5s %6s\n", jnum(t, "batch", 0), ended, sps,
           step, al, rs, rss, sw, psi, wall);
    const char *reason = jstr(t, "reason", NULL);
    if (reason && (!sig || strcmp(reason, sig) != 0) && strcmp(jstr(t, "ended", ""), "ok") != 0)
        printf("  %7s  %.140s\n", "", reason);
}

void cli_sweep_print(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec");
    const cJSON *dev = cJSON_GetObjectItem(spec, "device");
    char budget[24];
    fmt_bytes(budget, sizeof budget, cJSON_GetObjectItem(spec, "mem_budget"));
    printf("devgate sweep · %s on %s (%s) · from batch %g, doubling · %g warm-up + %g timed steps "
           "a trial\n",
           jstr(spec, "model", "?"), jstr(spec, "backend", "?"), jstr(dev, "name", "?"),
           jnum(spec, "from", 0), jnum(spec, "warmup_steps", 0), jnum(spec, "timed_steps", 0));
    printf("  budget %s (%s) · trial timeout %g s · swap growth limit %g MiB\n\n", budget,
           jstr(spec, "mem_budget_source", "?"), jnum(spec, "trial_timeout_s", 0),
           jnum(spec, "swap_growth_mib", 0));
    printf("  %7s  %-14s %11s  %-19s %10s %10s %10s %9s %5s %6s\n", "batch", "ended", "samples/s",
           "step ms (IQR)", "dev alloc", "dev resv", "rss peak", "swap +", "psi", "wall s");
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(r, "trials"))
    {
        print_trial(t);
    }
    const cJSON *st = cJSON_GetObjectItem(r, "stopped");
    printf("\n  stopped  %s at batch %g\n", jstr(st, "reason", "?"), jnum(st, "at_batch", 0));
    const cJSON *bis = cJSON_GetObjectItem(r, "bisect");
    if (cJSON_GetArraySize(bis) > 0) {
        printf("  bisect   to %g:\n", jnum(r, "bisect_resolution", 1));
        cJSON_ArrayForEach(t, bis)
        {
            print_trial(t);
        }
    }
    const cJSON *k = cJSON_GetObjectItem(r, "knee");
    char ks[32], kb[32];
    if (cJSON_IsNumber(cJSON_GetObjectItem(k, "batch")))
        printf("  knee     batch %g: %s (the smallest within %.0f%% of the best, %s)\n",
               jnum(k, "batch", 0),
               dg_fmt_num(ks, sizeof ks, "%.0f samples/s", jmetric(k, "samples_per_s")),
               100 * jnum(k, "within", 0),
               dg_fmt_num(kb, sizeof kb, "%.0f", jmetric(k, "best_samples_per_s")));
    else
        printf("  knee     none: no trial succeeded\n");
    const cJSON *s = cJSON_GetObjectItem(r, "safe_batch");
    const char *note = jstr(s, "note", NULL);
    if (cJSON_IsNumber(cJSON_GetObjectItem(s, "batch"))) {
        if (cJSON_IsNumber(cJSON_GetObjectItem(s, "first_failure")))
            printf("  safe     batch %g (%.0f%% under the first failure at %g)\n",
                   jnum(s, "batch", 0), 100 * jnum(s, "margin", 0), jnum(s, "first_failure", 0));
        else
            printf("  safe     batch %g (%s)\n", jnum(s, "batch", 0),
                   note ? note : "no failure reached");
    } else {
        printf("  safe     none: %s\n", note ? note : "?");
    }
}

#define OFF(f) offsetof(dg_sweep_opts, f)
const cli_opt cli_sweep_opts[] = {
    {CLI_INT, "--from", NULL, "N", "8", "samples", "first batch (then doubling)", OFF(from), 1,
     1 << 20, NULL, NULL, NULL},
    {CLI_INT, "--to", NULL, "N", "no limit", "samples", "last batch", OFF(to), 1, 1 << 20, NULL,
     NULL, NULL},
    {CLI_FLAG, "--no-bisect", NULL, NULL, NULL, NULL,
     "skip bisection between the last good and the first bad batch", OFF(no_bisect), 0, 0, NULL,
     NULL, NULL},
    {CLI_INT, "--warmup-steps", NULL, "N", "3", "steps", "untimed steps a trial", OFF(warmup_steps),
     1, 1000000, NULL, NULL, NULL},
    {CLI_INT, "--timed-steps", NULL, "N", "20", "steps", "timed steps a trial", OFF(timed_steps), 1,
     1000000, NULL, NULL, NULL},
    {CLI_DOUBLE, "--trial-timeout", NULL, "S", "120", "s", "limit of one trial",
     OFF(trial_timeout_s), ABOVE_ZERO, 1e7, NULL, NULL, NULL},
    {CLI_DOUBLE, "--swap-growth", NULL, "MIB", "256", "MiB",
     "stop when swap grows more than this in a trial", OFF(swap_growth_mib), ABOVE_ZERO, 1e7, NULL,
     NULL, NULL},
    CLI_OPTS_END,
};
#undef OFF

bool cli_sweep_check(const void *opts, char *buf, size_t len)
{
    const dg_sweep_opts *o = opts;
    if (o->train.batch || o->train.steps || o->train.epochs || o->train.export_dir)
        snprintf(buf, len,
                 "--batch, --steps, --epochs and --export do not apply; batches come from "
                 "--from/--to, steps from --warmup-steps/--timed-steps");
    else if (o->to && o->from && o->to < o->from)
        snprintf(buf, len, "--to %d is below --from %d", o->to, o->from);
    return buf[0] != 0;
}

dg_status cli_sweep_run(dg_ctx *ctx, void *opts, cli_progress *p, char **json, int *verdict)
{
    dg_sweep_opts *o = opts;
    o->progress = cli_progress_report;
    o->progress_user = p;
    *verdict = EXIT_PASS; /* judged from the trials, whatever the status */
    return dg_sweep_run(ctx, o, json);
}

/* At least one trial ran to its end, whatever the status says. */
int cli_sweep_judge(const cJSON *rec, int rc, const char **fail)
{
    (void)rc;
    if (jnum(rec, "good_trials", 0) > 0)
        return EXIT_PASS;
    *fail = "no trial succeeded";
    return EXIT_FAIL;
}

typedef struct trial_args {
    long result_fd, spec_fd;
    bool serve;
} trial_args;

const cli_opt cli_trial_opts[] = {
    {CLI_LONG, "--result-fd", NULL, "FD", NULL, NULL, "where the record goes (one JSON line)",
     offsetof(trial_args, result_fd), 0, 1 << 20, NULL, NULL, NULL},
    {CLI_LONG, "--spec-fd", NULL, "FD", NULL, NULL,
     "where the spec JSON comes from (read to its end)", offsetof(trial_args, spec_fd), 0, 1 << 20,
     NULL, NULL, NULL},
    {CLI_FLAG, "--serve", NULL, NULL, NULL, NULL,
     "trial after trial: one spec a line until the spec fd ends, one record a line",
     offsetof(trial_args, serve), 0, 0, NULL, NULL, NULL},
    CLI_OPTS_END,
};

/* One trial of the spec text; the CLI status of a trial that could not run. */
static int trial_one(cli *c, const char *text, long result_fd)
{
    dg_spec *spec = NULL;
    dg_status st = dg_spec_decode(c->ctx, text, &spec);
    if (st != DG_OK)
        return cli_fail_status(c, st, "__trial");
    st = dg_sweep_trial(c->ctx, dg_spec_opts(spec), (int)result_fd);
    dg_spec_free(spec);
    if (st == DG_ERR_USAGE)
        return cli_fail_status(c, st, "__trial");
    if (st != DG_OK)
        cli_error("__trial: %s", dg_errmsg(c->ctx));
    return st == DG_OK ? EXIT_PASS : EXIT_FAIL;
}

/* --serve: the sweep's trial server (src/steps/sweep.c): a spec a line until
 * the sweep closes the pipe. A spec that does not decode ends it. */
static int trial_serve(cli *c, const trial_args *t)
{
    FILE *in = fdopen((int)t->spec_fd, "r");
    if (!in) {
        cli_error("__trial: cannot read specs from fd %ld: %s", t->spec_fd, strerror(errno));
        return EXIT_USAGE;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = EXIT_PASS;
    while ((n = getline(&line, &cap, in)) > 0) {
        if (n > (ssize_t)1 << 20) {
            cli_error("__trial: a spec line of %zd bytes (at most 1 MiB)", n);
            rc = EXIT_USAGE;
            break;
        }
        rc = trial_one(c, line, t->result_fd);
        if (rc == EXIT_USAGE)
            break;
#ifdef __GLIBC__
        malloc_trim(0); /* the next trial's RSS starts from what is held, not what was */
#endif
    }
    free(line);
    fclose(in);
    return rc;
}

int cmd_trial(cli *c, int argc, char **argv)
{
    trial_args t = {-1, -1, false};
    int r = cli_parse(c, &cli_verb_trial, argc, argv, (void *const[]){&t, c}, NULL);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    if (t.result_fd < 0 || t.spec_fd < 0) {
        cli_error("__trial: --spec-fd and --result-fd are required (this verb is run by devgate "
                  "sweep)");
        return EXIT_USAGE;
    }
    if (t.serve)
        return trial_serve(c, &t);
    /* The spec comes whole through the same codec as every record's spec. */
    char *text = cli_read_fd((int)t.spec_fd, (size_t)1 << 20);
    if (!text) {
        cli_error("__trial: cannot read the spec from fd %ld: %s", t.spec_fd, strerror(errno));
        return EXIT_USAGE;
    }
    int rc = trial_one(c, text, t.result_fd);
    free(text);
    return rc;
}
