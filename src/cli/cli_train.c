/* devgate train: run the training fixture on one backend. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The data line: stage times summed over the run, and the loop's wait. */
static void print_data(const cJSON *r)
{
    const cJSON *d = cJSON_GetObjectItem(r, "data"), *b = cJSON_GetObjectItem(r, "bucket");
    if (!d)
        return;
    const cJSON *st = cJSON_GetObjectItem(d, "stages");
    static const char *const names[] = {"read",    "decode",    "resize",
                                        "augment", "normalise", "collate"};
    printf("  data    ");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char ms[32];
        printf(" %s %s%s", names[i],
               dg_fmt_num(ms, sizeof ms, "%.0f ms", jmetric(st, names[i]) * 1e3),
               i + 1 < sizeof names / sizeof names[0] ? " ·" : "");
    }
    const cJSON *w = cJSON_GetObjectItem(d, "wait");
    double per = jmetric(w, "per_step"), share = jmetric(w, "share_of_step");
    if (isnan(per))
        printf(" · waited: not timed\n");
    else
        printf(" · waited %.3f ms (%s of the step)\n", per,
               dg_fmt_num((char[32]){0}, 32, "%.1f%%", 100 * share));
    const cJSON *bad = cJSON_GetObjectItem(d, "bad_samples"),
                *cache = cJSON_GetObjectItem(d, "cache");
    printf("           %s · %g samples (%g train, %g val) · %g workers · %g bad · cache %s",
           jstr(d, "source", "?"), jnum(d, "samples", 0), jnum(d, "train_samples", 0),
           jnum(d, "val_samples", 0), jnum(d, "workers", 0), jnum(bad, "count", 0),
           cJSON_IsTrue(cJSON_GetObjectItem(cache, "enabled")) ? "on" : "off");
    if (cJSON_IsTrue(cJSON_GetObjectItem(cache, "enabled")))
        printf(" (%g hits)", jnum(cache, "hits", 0));
    printf("\n");
    if (b)
        printf("  bucket   %.16s · batch %g · channels %g\n", jstr(b, "id", "?"),
               jnum(b, "batch", 0), jnum(b, "channels", 0));
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(r, "val"))
    {
        char loss[32];
        printf("  val      epoch %-3g loss %-10s accuracy %.3f (%g batches)\n", jnum(v, "epoch", 0),
               dg_fmt_num(loss, sizeof loss, "%.5f", jnum(v, "loss", NAN)), jnum(v, "accuracy", 0),
               jnum(v, "batches", 0));
    }
}

/* Bad-sample warnings on stderr. */
static void warn_bad(const cJSON *r)
{
    const cJSON *bad = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "data"), "bad_samples");
    double n = jnum(bad, "count", 0);
    if (n <= 0)
        return;
    cli_error("warning: %g bad sample%s of %g read (%.2f%%) %s", n, n == 1 ? "" : "s",
              jnum(bad, "seen", 0), 100 * jnum(bad, "share", 0),
              strcmp(jstr(bad, "mode", "skip"), "skip") ? "" : "skipped");
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(bad, "messages"))
    {
        if (cJSON_IsString(m))
            cli_error("warning:   %s", m->valuestring);
    }
}

void cli_train_print(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec");
    const cJSON *model = cJSON_GetObjectItem(r, "model");
    const cJSON *dev = cJSON_GetObjectItem(r, "device");
    const cJSON *in = cJSON_GetObjectItem(model, "input");
    printf("devgate train · %s on %s (%s) · batch %g · %g steps x %g epochs · seed %g\n\n",
           jstr(model, "name", "?"), jstr(spec, "backend", "?"), jstr(dev, "name", "?"),
           jnum(spec, "batch", 0), jnum(spec, "steps", 0), jnum(spec, "epochs", 0),
           jnum(spec, "seed", 0));
    printf("  model    %s · %g parameters · input %gx%gx%g\n", jstr(model, "layers", "?"),
           jnum(model, "parameters", 0),
           cJSON_GetArrayItem(in, 0) ? cJSON_GetArrayItem(in, 0)->valuedouble : 0,
           cJSON_GetArrayItem(in, 1) ? cJSON_GetArrayItem(in, 1)->valuedouble : 0,
           cJSON_GetArrayItem(in, 2) ? cJSON_GetArrayItem(in, 2)->valuedouble : 0);
    const cJSON *pt;
    int i = 0, total = cJSON_GetArraySize(cJSON_GetObjectItem(r, "loss"));
    cJSON_ArrayForEach(pt, cJSON_GetObjectItem(r, "loss"))
    {
        /* Long curves: the first five, every tenth, and the last. */
        i++;
        if (total > 24 && i > 5 && i % 10 && i != total)
            continue;
        const cJSON *loss = cJSON_GetObjectItem(pt, "loss");
        char ls[32];
        if (cJSON_IsNumber(loss))
            snprintf(ls, sizeof ls, "%.5f", loss->valuedouble);
        else
            snprintf(ls, sizeof ls, "non-finite");
        printf("  %-8s epoch %-3g step %-6g loss %-10s accuracy %.3f (mean of %g steps)\n",
               i == 1 ? "loss" : "", jnum(pt, "epoch", 0), jnum(pt, "step", 0), ls,
               jnum(pt, "accuracy", 0), jnum(pt, "steps_averaged", 0));
    }
    const cJSON *thr = cJSON_GetObjectItem(r, "throughput");
    char sps[32], ms[32];
    cli_metric(sps, sizeof sps, thr, "samples_per_s", "%.0f samples/s", "not reported");
    cli_metric(ms, sizeof ms, thr, "step_ms", "%.3f ms/step", "not reported");
    printf("  speed    %s · %s (%g timed steps after %g warm-up) · %g sync points\n", sps, ms,
           jnum(thr, "timed_steps", 0), jnum(thr, "warmup_steps", 0), jnum(thr, "sync_points", 0));
    const cJSON *ph = cJSON_GetObjectItem(r, "phases");
    char dat[24], h2d[24], fwd[24], bwd[24], upd[24];
    cli_metric(dat, sizeof dat, ph, "data", "%.3f ms", "not reported");
    cli_metric(h2d, sizeof h2d, ph, "h2d", "%.3f ms", "not reported");
    cli_metric(fwd, sizeof fwd, ph, "forward", "%.3f ms", "not reported");
    cli_metric(bwd, sizeof bwd, ph, "backward", "%.3f ms", "not reported");
    cli_metric(upd, sizeof upd, ph, "update", "%.3f ms", "not reported");
    printf("  phases   data %s · h2d %s · forward %s · backward %s · update %s (%s, %g samples)\n",
           dat, h2d, fwd, bwd, upd, jstr(ph, "source", "?"), jnum(ph, "samples", 0));
    if (cJSON_GetObjectItem(ph, "note"))
        printf("           %s\n", jstr(ph, "note", ""));
    print_data(r);
    const cJSON *al = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "memory"), "allocator");
    char a[24], ap[24], rs[24], rp[24];
    fmt_bytes(a, sizeof a, cJSON_GetObjectItem(al, "allocated"));
    fmt_bytes(ap, sizeof ap, cJSON_GetObjectItem(al, "allocated_peak"));
    fmt_bytes(rs, sizeof rs, cJSON_GetObjectItem(al, "reserved"));
    fmt_bytes(rp, sizeof rp, cJSON_GetObjectItem(al, "reserved_peak"));
    printf("  memory   allocated %s (peak %s) · reserved %s (peak %s) · %g device allocations · "
           "%g cache hits · %g out-of-memory\n",
           a, ap, rs, rp, jmetric(al, "device_allocs"), jmetric(al, "cache_hits"),
           jmetric(al, "oom_events"));
    const cJSON *cap = cJSON_GetObjectItem(r, "capture");
    if (cJSON_IsTrue(cJSON_GetObjectItem(cap, "used")))
        printf("  capture  the step runs as one device graph\n");
    else if (cJSON_IsString(cJSON_GetObjectItem(cap, "note")))
        printf("  capture  not used: %s\n", jstr(cap, "note", ""));
    const cJSON *fb = cJSON_GetObjectItem(r, "fallbacks");
    if (cJSON_GetArraySize(fb) == 0) {
        printf("  fallback none: every op ran on %s\n", jstr(spec, "backend", "?"));
    } else {
        printf("  fallback %-14s %-34s %7s %10s %10s %10s  %s\n", "op", "shape", "calls", "ms",
               "MiB d2h", "MiB h2d", "reason");
        const cJSON *f;
        cJSON_ArrayForEach(f, fb)
        {
            printf("           %-14s %-34.34s %7g %10.2f %10.2f %10.2f  %s\n", jstr(f, "op", "?"),
                   jstr(f, "shape", "?"), jnum(f, "calls", 0), jnum(f, "ms_total", 0),
                   jnum(f, "bytes_d2h", 0) / 1048576.0, jnum(f, "bytes_h2d", 0) / 1048576.0,
                   jstr(f, "reason", "?"));
        }
    }
    if (cJSON_IsString(cJSON_GetObjectItem(r, "error")))
        printf("  error    %s\n", jstr(r, "error", ""));
}

/* The training options: one row each; the value goes through the library's
 * spec codec (dg_train_opts_set), so flags and spec files share one check. */
#define T(name, arg, key, def, unit, help)                                                         \
    {                                                                                              \
        CLI_TRAIN, name, NULL, arg, def, unit, help, 0, 0, 0, NULL, key, NULL                      \
    }
#define TFLAG(name, key, fixed, help)                                                              \
    {                                                                                              \
        CLI_TRAIN, name, NULL, NULL, NULL, NULL, help, 0, 0, 0, NULL, key, fixed                   \
    }
const cli_opt cli_train_opts[] = {
    T("--model", "NAME", "model", "mlp", NULL, "preset (mlp, lenet, cifar) or a layer string"),
    T("--input", "CxHxW", "input", "the preset's", NULL, "input shape for a layer string"),
    T("--backend", "NAME", "backend", "cpu", NULL, "cpu, opencl or cuda"),
    T("--device", "N", "device", "0", NULL, "device index"),
    T("--batch", "N", "batch", "64", "samples", "samples a step"),
    T("--steps", "N", "steps", "100", "steps", "steps an epoch"),
    T("--epochs", "N", "epochs", "1", "epochs", "epochs"),
    T("--seed", "X", "seed", "0", NULL, "seed of the weights and the data"),
    T("--sync-every", "N", "sync_every", "epoch", "steps", "read the loss every N steps"),
    T("--lr", "F", "lr", "0.01", NULL, "learning rate"),
    T("--momentum", "F", "momentum", "0.9", NULL, "SGD momentum"),
    T("--weight-decay", "F", "weight_decay", "0", NULL, "L2 weight decay"),
    T("--threads", "N", "threads", "usable cores", "threads", "cpu threads"),
    T("--mem-budget", "SIZE", "mem_budget", "none", "bytes", "device allocator cap (512M, 2G)"),
    T("--disable-op", "OP[@BACKEND],...", "disable_ops", "none", NULL,
      "ops forced onto the cpu fallback"),
    T("--samples", "N", "samples", "steps x batch, at most 8192", "samples",
      "synthetic data set size"),
    TFLAG("--no-capture", "capture", "false", "do not capture the step as a device graph"),
    T("--sample-ms", "N", "sample_ms", "off", "ms", "background memory sampler period"),
    T("--export", "DIR", "export", "none", NULL, "write the initial weights and batches here"),
    T("--data", "SOURCE", "data", "synthetic", NULL,
      "synthetic, idx:IMAGES,LABELS, cifar:DIR or images:DIR"),
    T("--workers", "N", "workers", "cores/2, 2-8", "threads",
      "loader threads (0: batches made in the loop)"),
    T("--prefetch", "N", "prefetch", "workers + 2", "batches", "loader queue depth"),
    T("--val-split", "F", "val_split", "0", "share", "held out and evaluated after each epoch"),
    T("--resolution", "HxW[:W],...", "resolution", "the model input", NULL, "bucket resolutions"),
    T("--augment", "LIST", "augment", "none", NULL, "crop, flip or crop,flip"),
    T("--normalize", "SPEC", "normalize", "none", NULL, "none, auto or M1,M2,M3/S1,S2,S3"),
    TFLAG("--cache", "cache", "true", "keep decoded samples in memory (2 GiB cap)"),
    T("--on-bad-sample", "skip|fail", "on_bad_sample", "skip", NULL, "what a bad sample does"),
    T("--max-bad-share", "F", "max_bad_share", "0.01", "share",
      "fail above this bad/seen share (0: none allowed)"),
    T("--precision", "fp32|tf32|bf16", "math", "fp32", NULL,
      "cuda's product arithmetic: tf32 tensor cores, or bf16 inputs with fp32 accumulation"),
    TFLAG("--tf32", "math", "tf32", "same as --precision tf32"),
    CLI_OPTS_END,
};
#undef T
#undef TFLAG

dg_status cli_train_run(dg_ctx *ctx, void *o, cli_progress *p, char **json, int *verdict)
{
    (void)verdict;
    dg_train_opts *to = o;
    to->progress = cli_progress_report; /* each epoch's end */
    to->progress_user = p;
    return dg_train_run(ctx, o, json);
}

int cli_train_judge(const cJSON *rec, int rc, const char **fail)
{
    warn_bad(rec);
    if (rc == EXIT_PASS && !cJSON_IsTrue(cJSON_GetObjectItem(rec, "loss_finite"))) {
        *fail = "the loss is not finite";
        return EXIT_FAIL;
    }
    return rc;
}
