/* devgate compare: the cpu baseline against a device, both against float64. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "32,128,512" into out[4] (0-terminated); false on anything else. */
static bool parse_batches(const char *s, int out[4])
{
    int n = 0;
    const char *p = s;
    memset(out, 0, 4 * sizeof *out);
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 20) || n == 4 || (*end && *end != ','))
            return false;
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return false;
    }
    return n > 0;
}

static bool parse_tolerance(const char *s, double *out)
{
    char *end;
    double d = strtod(s, &end);
    if (end == s || *end || !(d > 0) || !isfinite(d))
        return false;
    *out = d;
    return true;
}

/* "1.2e-07" or "n/a" for a relative metric. */
static const char *rel(char *buf, size_t len, const cJSON *obj, const char *key)
{
    double v = jmetric(obj, key);
    if (isnan(v))
        snprintf(buf, len, "n/a");
    else
        snprintf(buf, len, "%.1e", v);
    return buf;
}

static void print_compare(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec"), *dev = cJSON_GetObjectItem(r, "device");
    const cJSON *th = cJSON_GetObjectItem(r, "thresholds");
    const char *be = jstr(spec, "backend", "?");
    printf("devgate compare · %s · cpu vs %s (%s) · %g steps · seed %g · tolerance loss %g, params %g\n",
           jstr(spec, "model", "?"), be, jstr(dev, "name", "?"), jnum(spec, "steps", 0),
           jnum(spec, "seed", 0), jnum(th, "loss_tolerance", 0), jnum(th, "param_tolerance", 0));
    const cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItem(r, "runs"))
    {
        int batch = (int)jnum(run, "batch", 0);
        if (cJSON_GetObjectItem(run, "error")) {
            printf("  batch %-6d %s failed: %s\n", batch, jstr(run, "failed", "?"), jstr(run, "error", ""));
            continue;
        }
        const cJSON *cj = cJSON_GetObjectItem(run, "cpu"), *dj = cJSON_GetObjectItem(run, "device");
        const cJSON *lr = cJSON_GetObjectItem(run, "loss_vs_ref"), *pd = cJSON_GetObjectItem(run, "param_drift");
        double busy = jmetric(run, "busy_fraction"), sp = jmetric(run, "speedup");
        double red = jmetric(run, "step_time_reduction_pct");
        char busy_s[24], sp_s[48], a[16], b[16], cc[16], d[16], e[16], f[16];
        if (isnan(busy))
            snprintf(busy_s, sizeof busy_s, "n/a");
        else
            snprintf(busy_s, sizeof busy_s, "%.0f%%", 100 * busy);
        if (isnan(sp))
            snprintf(sp_s, sizeof sp_s, "n/a");
        else
            snprintf(sp_s, sizeof sp_s, "%.2fx (%+.0f%% step time)", sp, isnan(red) ? 0 : -red);
        char verdict[160];
        if (cJSON_IsTrue(cJSON_GetObjectItem(run, "within_tolerance"))) {
            snprintf(verdict, sizeof verdict, "within tolerance");
        } else {
            snprintf(verdict, sizeof verdict, "DRIFT");
            const cJSON *n;
            bool first = true;
            cJSON_ArrayForEach(n, cJSON_GetObjectItem(run, "drift"))
            {
                size_t used = strlen(verdict);
                snprintf(verdict + used, sizeof verdict - used, "%s%s", first ? ": " : ", ",
                         cJSON_IsString(n) ? n->valuestring : "?");
                first = false;
            }
        }
        if (!cJSON_IsTrue(cJSON_GetObjectItem(run, "baseline_within_tolerance"))) {
            size_t used = strlen(verdict);
            snprintf(verdict + used, sizeof verdict - used, " (the cpu baseline is off float64 too)");
        }
        printf("  batch %-6d cpu %.3f ms · %s %.3f ms · speedup %s · busy %s · loss vs f64 cpu %s %s %s"
               " · cpu/%s %s · params %s/cpu %s, vs f64 cpu %s %s %s · %s%s\n",
               batch, jmetric(cj, "step_ms"), be, jmetric(dj, "step_ms"), sp_s, busy_s,
               rel(a, sizeof a, lr, "cpu"), be, rel(b, sizeof b, lr, "device"), be,
               rel(cc, sizeof cc, run, "loss_cpu_vs_device"), be, rel(d, sizeof d, pd, "device_vs_cpu"),
               rel(e, sizeof e, pd, "cpu_vs_ref"), be, rel(f, sizeof f, pd, "device_vs_ref"), verdict,
               cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "reference"), "ran"))
                   ? ""
                   : " (float64 reference skipped)");
    }
    if (cJSON_IsString(cJSON_GetObjectItem(r, "error")))
        printf("  error    %s\n", jstr(r, "error", ""));
}

int cmd_compare(cli *c, int argc, char **argv)
{
    dg_compare_opts o = {.train = CLI_TRAIN_DEFAULTS};
    const char *v;
    for (int i = 1; i < argc; i++) {
        if (cli_common_opt(c, argc, argv, &i))
            continue;
        if (opt_value(argc, argv, &i, "--batches", &v)) {
            if (!parse_batches(v, o.batches)) {
                cli_error("compare: --batches wants up to 4 sizes in 1..%d such as 32,128, got '%s'",
                          1 << 20, v);
                return EXIT_USAGE;
            }
            continue;
        }
        if (opt_value(argc, argv, &i, "--loss-tolerance", &v)) {
            if (!parse_tolerance(v, &o.loss_tolerance)) {
                cli_error("compare: --loss-tolerance wants a positive number, got '%s'", v);
                return EXIT_USAGE;
            }
            continue;
        }
        if (opt_value(argc, argv, &i, "--param-tolerance", &v)) {
            if (!parse_tolerance(v, &o.param_tolerance)) {
                cli_error("compare: --param-tolerance wants a positive number, got '%s'", v);
                return EXIT_USAGE;
            }
            continue;
        }
        int r = cli_parse_train_opt(c, argc, argv, &i, &o.train);
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0)
            continue;
        cli_error("compare: unknown argument '%s' (see devgate --help)", argv[i]);
        return EXIT_USAGE;
    }
    if (o.train.epochs || o.train.sync_every || o.train.export_dir) {
        cli_error("compare: --epochs, --sync-every and --export do not apply (one epoch, the loss "
                  "read at every step, compare exports its own batches)");
        return EXIT_USAGE;
    }
    if (!o.train.backend || strcmp(o.train.backend, "cpu") == 0) {
        cli_error("compare: --backend names the device to hold against the cpu baseline (opencl, cuda)");
        return EXIT_USAGE;
    }
    char *json = NULL;
    dg_status st = dg_compare_run(c->ctx, &o, &json);
    if (!json)
        return cli_fail_status(c, st, "compare");
    cJSON *rec = cJSON_Parse(json);
    bool ok = cJSON_IsTrue(cJSON_GetObjectItem(rec, "within_tolerance"));
    int rc = st == DG_ERR_UNAVAILABLE ? EXIT_UNAVAILABLE : ok ? EXIT_PASS : EXIT_FAIL;
    if (st != DG_OK)
        cli_error("compare: %s", dg_errmsg(c->ctx));
    char *run_id = NULL;
    int rrc = cli_record(c, "compare", json, rc, &run_id);
    if (c->json) {
        cli_print_json(rec, run_id);
    } else {
        print_compare(rec);
        if (st == DG_OK && !ok)
            printf("  FAIL     drift beyond tolerance: losses or parameters of the runs disagree\n");
        if (run_id)
            printf("  recorded as %s\n", run_id);
    }
    cJSON_Delete(rec);
    dg_string_free(json);
    dg_string_free(run_id);
    return rrc;
}
