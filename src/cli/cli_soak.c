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

void cli_soak_print(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec"), *model = cJSON_GetObjectItem(r, "model");
    /* The soak analysis: nested under "soak" in record version 1, in the record in 2. */
    const cJSON *dev = cJSON_GetObjectItem(r, "device"), *s = cJSON_GetObjectItem(r, "soak");
    if (!cJSON_IsObject(s))
        s = r;
    printf("devgate soak · %s on %s (%s) · batch %g · %g steps x %g epochs · cache %s · leak %.0f "
           "B/step · "
           "val %g steps\n\n",
           jstr(model, "name", "?"), jstr(spec, "backend", "?"), jstr(dev, "name", "?"),
           jnum(spec, "batch", 0), jnum(spec, "steps", 0), jnum(spec, "epochs", 0),
           cJSON_IsTrue(cJSON_GetObjectItem(s, "empty_cache")) ? "emptied each epoch" : "kept",
           jnum(s, "leak_per_step", 0), jnum(s, "val_steps", 0));
    printf("  %5s %12s %12s %12s %12s %7s %4s %10s %11s\n", "epoch", "allocated", "reserved",
           "driver", "footprint", "emptied", "val", "step ms", "samples/s");
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
    printf("\n  growth   epoch %g over epoch %g: allocator reserved %s · allocated %s · driver %s "
           "· footprint %s\n",
           jnum(cJSON_GetObjectItem(s, "last"), "epoch", 0),
           jnum(cJSON_GetObjectItem(s, "baseline"), "epoch", 0), gr, ga, gd, gf);
    const cJSON *sc = cJSON_GetObjectItem(s, "staircase"), *al = cJSON_GetObjectItem(sc, "aligned");
    bool ramp = false;
    const cJSON *src;
    cJSON_ArrayForEach(src, sc)
    {
        ramp = ramp || cJSON_IsTrue(cJSON_GetObjectItem(src, "ramp"));
    }
    printf("  staircase %s\n",
           cJSON_IsNull(al) || !al ? "no growth steps between epochs"
           : cJSON_IsTrue(al) ? "growth steps line up with validation epochs (a working-set change)"
           : ramp             ? "memory grows epoch after epoch (a ramp, not a staircase)"
                              : "growth steps do not line up with validation epochs");
    const cJSON *tr = cJSON_GetObjectItem(s, "step_trend");
    double med = jmetric(tr, "median"), slope = jmetric(tr, "slope"),
           ratio = jmetric(tr, "thirds_ratio");
    char rt[32];
    snprintf(rt, sizeof rt, isnan(ratio) ? "not reported" : "%.3f", ratio);
    if (isnan(med))
        printf("  steps    not timed\n");
    else
        printf("  steps    median %.3f ms · trend %s · last/first third %s\n", med,
               dg_fmt_num((char[32]){0}, 32, "%+.5f ms/step", slope), rt);
    if (cJSON_IsString(cJSON_GetObjectItem(r, "error")))
        printf("  error    %s\n", jstr(r, "error", ""));
}

#define OFF(f) offsetof(dg_soak_opts, f)
const cli_opt cli_soak_opts[] = {
    {CLI_FLAG, "--no-empty-cache", NULL, NULL, NULL, NULL,
     "keep the allocator cache across epoch ends", OFF(no_empty_cache), 0, 0, NULL, NULL, NULL},
    {CLI_BYTES, "--leak-per-step", NULL, "SIZE", "0", "bytes",
     "bytes kept alive each step (a test leak; at most 1T)", OFF(leak_per_step), 0, 0, NULL, NULL,
     NULL},
    {CLI_INT, "--val-steps", NULL, "N", "0", "steps", "validation steps an epoch", OFF(val_steps),
     0, 100000, NULL, NULL, NULL},
    CLI_OPTS_END,
};
#undef OFF

bool cli_soak_check(const void *o, char *buf, size_t len)
{
    if (((const dg_soak_opts *)o)->train.export_dir)
        snprintf(buf, len, "--export applies to train only");
    return buf[0] != 0;
}

dg_status cli_soak_run(dg_ctx *ctx, void *o, cli_progress *p, char **json, int *verdict)
{
    (void)verdict;
    dg_soak_opts *so = o;
    so->train.progress = cli_progress_report; /* each epoch's end */
    so->train.progress_user = p;
    return dg_soak_run(ctx, o, json);
}
