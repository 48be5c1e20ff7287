/* devgate sweep: the batch sweep (docs/measure.md "Sweep"), and the hidden
 * `__trial` verb that runs one of its trials in a child process. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A positive finite number up to 1e7; false for anything else. */
/* "12345" or "-" for a metric. */
static void fmt_num(char *buf, size_t len, const cJSON *obj, const char *key, const char *fmt)
{
    double v = jmetric(obj, key);
    if (isnan(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, fmt, v);
}

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
    fmt_num(sps, sizeof sps, t, "samples_per_s", "%.0f");
    fmt_num(med, sizeof med, sm, "median", "%.3f");
    fmt_num(iqr, sizeof iqr, sm, "iqr", "%.3f");
    snprintf(step, sizeof step, "%s (%s)", med, iqr);
    fmt_mem(al, sizeof al, t, "device_allocated_peak");
    fmt_mem(rs, sizeof rs, t, "device_reserved_peak");
    fmt_mem(rss, sizeof rss, t, "rss_peak");
    fmt_mem(sw, sizeof sw, t, "swap_growth");
    fmt_num(psi, sizeof psi, t, "psi_peak", "%.1f");
    fmt_num(wall, sizeof wall, t, "wall_s", "%.1f");
    char ended[40];
    const char *sig = jstr(t, "signal", NULL);
    snprintf(ended, sizeof ended, "%s%s%s", jstr(t, "ended", "?"), sig ? " " : "", sig ? sig : "");
    printf("  %7g  %-14s %11s  %-19s %10s %10s %10s %9s %5s %6s\n", jnum(t, "batch", 0), ended, sps,
           step, al, rs, rss, sw, psi, wall);
    const char *reason = jstr(t, "reason", NULL);
    if (reason && (!sig || strcmp(reason, sig) != 0) && strcmp(jstr(t, "ended", ""), "ok") != 0)
        printf("  %7s  %.140s\n", "", reason);
}

static void print_sweep(const cJSON *r)
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
    if (cJSON_IsNumber(cJSON_GetObjectItem(k, "batch")))
        printf(
            "  knee     batch %g: %.0f samples/s (the smallest within %.0f%% of the best, %.0f)\n",
            jnum(k, "batch", 0), jmetric(k, "samples_per_s"), 100 * jnum(k, "within", 0),
            jmetric(k, "best_samples_per_s"));
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

int cmd_sweep(cli *c, int argc, char **argv)
{
    dg_sweep_opts o = {.train = CLI_TRAIN_DEFAULTS};
    const char *v;
    for (int i = 1; i < argc; i++) {
        long n;
        if (cli_common_opt(c, argc, argv, &i))
            continue;
        if (strcmp(argv[i], "--no-bisect") == 0) {
            o.no_bisect = true;
            continue;
        }
#define INT_OPT(flag, field, lo, hi)                                                               \
    if (opt_value(argc, argv, &i, flag, &v)) {                                                     \
        if (!cli_parse_long(v, lo, hi, &n)) {                                                      \
            cli_error("sweep: %s wants an integer in %ld..%ld, got '%s'", flag, (long)(lo),        \
                      (long)(hi), v);                                                              \
            return EXIT_USAGE;                                                                     \
        }                                                                                          \
        o.field = (int)n;                                                                          \
        continue;                                                                                  \
    }
        INT_OPT("--from", from, 1, 1 << 20)
        INT_OPT("--to", to, 1, 1 << 20)
        INT_OPT("--warmup-steps", warmup_steps, 1, 1000000)
        INT_OPT("--timed-steps", timed_steps, 1, 1000000)
#undef INT_OPT
        if (opt_value(argc, argv, &i, "--trial-timeout", &v)) {
            if (!cli_parse_double(v, ABOVE_ZERO, 1e7, &o.trial_timeout_s)) {
                cli_error("sweep: --trial-timeout wants a positive number of seconds, got '%s'", v);
                return EXIT_USAGE;
            }
            continue;
        }
        if (opt_value(argc, argv, &i, "--swap-growth", &v)) {
            if (!cli_parse_double(v, ABOVE_ZERO, 1e7, &o.swap_growth_mib)) {
                cli_error("sweep: --swap-growth wants a positive number of MiB, got '%s'", v);
                return EXIT_USAGE;
            }
            continue;
        }
        int r = cli_parse_train_opt(c, argc, argv, &i, &o.train);
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0)
            continue;
        cli_error("sweep: unknown argument '%s' (see devgate --help)", argv[i]);
        return EXIT_USAGE;
    }
    if (o.train.batch || o.train.steps || o.train.epochs || o.train.export_dir) {
        cli_error("sweep: --batch, --steps, --epochs and --export do not apply; batches come from "
                  "--from/--to, steps from --warmup-steps/--timed-steps");
        return EXIT_USAGE;
    }
    if (o.to && o.from && o.to < o.from) {
        cli_error("sweep: --to %d is below --from %d", o.to, o.from);
        return EXIT_USAGE;
    }
    char *json = NULL;
    dg_status st = dg_sweep_run(c->ctx, &o, &json);
    if (!json)
        return cli_fail_status(c, st, "sweep");
    cJSON *rec = cJSON_Parse(json);
    int good = (int)jnum(rec, "good_trials", 0);
    int rc = good > 0 ? EXIT_PASS : EXIT_FAIL;
    return cli_record_print(c, "sweep", json, rec, rc, print_sweep,
                            good ? NULL : "no trial succeeded");
}

int cmd_trial(cli *c, int argc, char **argv)
{
    dg_train_opts o = CLI_TRAIN_DEFAULTS;
    long fd = -1;
    const char *v;
    for (int i = 1; i < argc; i++) {
        if (cli_common_opt(c, argc, argv, &i))
            continue;
        if (opt_value(argc, argv, &i, "--result-fd", &v)) {
            if (!cli_parse_long(v, 0, 1 << 20, &fd)) {
                cli_error("__trial: --result-fd wants a file descriptor number, got '%s'", v);
                return EXIT_USAGE;
            }
            continue;
        }
        int r = cli_parse_train_opt(c, argc, argv, &i, &o);
        if (r < 0)
            return EXIT_USAGE;
        if (r == 0) {
            cli_error("__trial: unknown argument '%s'", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (fd < 0) {
        cli_error("__trial: --result-fd is required (this verb is run by devgate sweep)");
        return EXIT_USAGE;
    }
    dg_status st = dg_sweep_trial(c->ctx, &o, (int)fd);
    if (st == DG_ERR_USAGE)
        return cli_fail_status(c, st, "__trial");
    if (st != DG_OK)
        cli_error("__trial: %s", dg_errmsg(c->ctx));
    return st == DG_OK ? EXIT_PASS : EXIT_FAIL;
}
