/* devgate soak: epochs with allocator discipline and a watermark per epoch. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void pct(char *buf, size_t len, const cJSON *obj, const char *key)
{
    double v = jmetric(obj, key);
    if (isnan(v))
        snprintf(buf, len, "not reported");
    else
        snprintf(buf, len, "%+.1f%%", v);
}

static void print_soak(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec"), *model = cJSON_GetObjectItem(r, "model");
    /* The soak analysis: nested under "soak" in record version 1, in the record in 2. */
    const cJSON *dev = cJSON_GetObjectItem(r, "device"), *s = cJSON_GetObjectItem(r, "soak");
    if (!cJSON_IsObject(s))
        s = r;
    printf("devgate soak · %s on %s (%s) · batch %g · %g steps x %g epochs · cache %s · leak %.0f B/step · "
           "val %g steps\n\n",
           jstr(model, "name", "?"), jstr(spec, "backend", "?"), jstr(dev, "name", "?"), jnum(spec, "batch", 0),
           jnum(spec, "steps", 0), jnum(spec, "epochs", 0),
           cJSON_IsTrue(cJSON_GetObjectItem(s, "empty_cache")) ? "emptied each epoch" : "kept",
           jnum(s, "leak_per_step", 0), jnum(s, "val_steps", 0));
    printf("  %5s %12s %12s %12s %12s %7s %4s %10s %11s\n", "epoch", "allocated", "reserved", "driver",
           "footprint", "emptied", "val", "step ms", "samples/s");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "epochs"))
    {
        char a[24], rs[24], d[24], f[24], ms[24], sps[24];
        fmt_bytes(a, sizeof a, cJSON_GetObjectItem(e, "allocated"));
        fmt_bytes(rs, sizeof rs, cJSON_GetObjectItem(e, "reserved"));
        fmt_bytes(d, sizeof d, cJSON_GetObjectItem(e, "driver_used"));
        fmt_bytes(f, sizeof f, cJSON_GetObjectItem(e, "rss"));
        double m = jmetric(e, "step_ms"), sp = jmetric(e, "samples_per_s");
        snprintf(ms, sizeof ms, isnan(m) ? "-" : "%.3f", m);
        snprintf(sps, sizeof sps, isnan(sp) ? "-" : "%.0f", sp);
        printf("  %5g %12s %12s %12s %12s %7s %4s %10s %11s\n", jnum(e, "epoch", 0), a, rs, d, f,
               cJSON_IsTrue(cJSON_GetObjectItem(e, "cache_emptied")) ? "yes" : "no",
               cJSON_IsTrue(cJSON_GetObjectItem(e, "validation")) ? "yes" : "no", ms, sps);
    }
    const cJSON *g = cJSON_GetObjectItem(s, "growth");
    char gr[24], ga[24], gd[24], gf[24];
    pct(gr, sizeof gr, g, "allocator_reserved");
    pct(ga, sizeof ga, g, "allocator_allocated");
    pct(gd, sizeof gd, g, "driver");
    pct(gf, sizeof gf, g, "footprint");
    printf("\n  growth   epoch %g over epoch %g: allocator reserved %s · allocated %s · driver %s · footprint %s\n",
           jnum(cJSON_GetObjectItem(s, "last"), "epoch", 0), jnum(cJSON_GetObjectItem(s, "baseline"), "epoch", 0),
           gr, ga, gd, gf);
    const cJSON *sc = cJSON_GetObjectItem(s, "staircase"), *al = cJSON_GetObjectItem(sc, "aligned");
    bool ramp = false;
    const cJSON *src;
    cJSON_ArrayForEach(src, sc)
    {
        ramp = ramp || cJSON_IsTrue(cJSON_GetObjectItem(src, "ramp"));
    }
    printf("  staircase %s\n", cJSON_IsNull(al) || !al ? "no growth steps between epochs"
                           : cJSON_IsTrue(al)        ? "growth steps line up with validation epochs (a working-set change)"
                           : ramp                    ? "memory grows epoch after epoch (a ramp, not a staircase)"
                                                     : "growth steps do not line up with validation epochs");
    const cJSON *tr = cJSON_GetObjectItem(s, "step_trend");
    double med = jmetric(tr, "median"), slope = jmetric(tr, "slope"), ratio = jmetric(tr, "thirds_ratio");
    char rt[32];
    snprintf(rt, sizeof rt, isnan(ratio) ? "not reported" : "%.3f", ratio);
    if (isnan(med))
        printf("  steps    not timed\n");
    else
        printf("  steps    median %.3f ms · trend %+.5f ms/step · last/first third %s\n", med,
               isnan(slope) ? 0 : slope, rt);
    if (cJSON_IsString(cJSON_GetObjectItem(r, "error")))
        printf("  error    %s\n", jstr(r, "error", ""));
}

int cmd_soak(cli *c, int argc, char **argv)
{
    dg_soak_opts o = {.train = CLI_TRAIN_DEFAULTS};
    const char *v;
    for (int i = 1; i < argc; i++) {
        long n;
        if (cli_common_opt(c, argc, argv, &i))
            continue;
        if (strcmp(argv[i], "--no-empty-cache") == 0) {
            o.no_empty_cache = true;
            continue;
        }
        if (opt_value(argc, argv, &i, "--leak-per-step", &v)) {
            if (!cli_parse_bytes(v, &o.leak_per_step)) {
                cli_error("soak: --leak-per-step wants a size such as 1M or 65536 (at most 1T), got '%s'", v);
                return EXIT_USAGE;
            }
            continue;
        }
        if (opt_value(argc, argv, &i, "--val-steps", &v)) {
            if (!cli_parse_long(v, 0, 100000, &n)) {
                cli_error("soak: --val-steps wants an integer in 0..100000, got '%s'", v);
                return EXIT_USAGE;
            }
            o.val_steps = (int)n;
            continue;
        }
        int r = cli_parse_train_opt(c, argc, argv, &i, &o.train);
        if (r < 0)
            return EXIT_USAGE;
        if (r == 0) {
            cli_error("soak: unknown argument '%s' (see devgate --help)", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (o.train.export_dir) {
        cli_error("soak: --export applies to train only");
        return EXIT_USAGE;
    }
    char *json = NULL;
    dg_status st = dg_soak_run(c->ctx, &o, &json);
    if (!json)
        return cli_fail_status(c, st, "soak");
    int rc = EXIT_PASS;
    if (st != DG_OK) {
        cli_error("soak: %s", dg_errmsg(c->ctx));
        rc = EXIT_FAIL;
    }
    cJSON *rec = cJSON_Parse(json);
    return cli_record_print(c, "soak", json, rec, rc, c->quiet ? NULL : print_soak, NULL);
}
