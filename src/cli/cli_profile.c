/* devgate profile: where the time of a training step goes (phases, ops, sync
 * points, bytes), with a Chrome trace for Perfetto / chrome://tracing. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOP_OPS 12
#define BAR_WIDTH 30

static void bar(char *buf, size_t len, double share)
{
    int n = isfinite(share) && share > 0 ? (int)lround(share * BAR_WIDTH) : 0;
    if (n > BAR_WIDTH)
        n = BAR_WIDTH;
    if (n == 0 && isfinite(share) && share > 0)
        n = 1; /* visible, however small */
    if ((size_t)n >= len)
        n = (int)len - 1;
    memset(buf, '#', (size_t)n);
    buf[n] = '\0';
}

static void print_phase(const cJSON *ph, const char *name, const char *label)
{
    const cJSON *p = cJSON_GetObjectItem(ph, name);
    double ms = jmetric(p, "ms"), share = jmetric(p, "share");
    char b[BAR_WIDTH + 1];
    bar(b, sizeof b, share);
    if (isnan(ms))
        printf("    %-11s %10s\n", label, "not reported");
    else if (isnan(share))
        printf("    %-11s %10.3f ms\n", label, ms);
    else
        printf("    %-11s %10.3f ms %6.1f%%  |%s\n", label, ms, 100 * share, b);
}

void cli_profile_print(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec"), *w = cJSON_GetObjectItem(r, "window");
    printf("profile  %s on %s · batch %g · warm-up %g + window %g steps\n",
           jstr(spec, "model", "?"), jstr(spec, "backend", "?"), jnum(spec, "batch", 0),
           jnum(w, "warmup", 0), jnum(w, "steps", 0));
    const cJSON *st = cJSON_GetObjectItem(r, "step");
    double ms = jmetric(st, "ms"), pms = jmetric(st, "profiled_ms");
    if (isnan(ms))
        printf("  step     not timed\n");
    else
        printf("  step     %.3f ms median (unprofiled pass)%s", ms, isnan(pms) ? "\n" : "");
    if (!isnan(ms) && !isnan(pms))
        printf(" · %.3f ms with every op synchronised\n", pms);

    const cJSON *ph = cJSON_GetObjectItem(r, "phases");
    printf("  phases   per step, share of the step (unprofiled pass)\n");
    static const char *const steps[] = {"queue_wait", "h2d", "forward", "backward",
                                        "update",     "d2h", "sync"};
    static const char *const labels[] = {"queue wait", "h2d", "forward", "backward",
                                         "update",     "d2h", "sync"};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        print_phase(ph, steps[i], labels[i]);
    if (cJSON_IsString(cJSON_GetObjectItem(ph, "sync_note")))
        printf("    (sync: %s)\n", jstr(ph, "sync_note", ""));
    if (cJSON_IsString(cJSON_GetObjectItem(ph, "phases_note")))
        printf("    (%s)\n", jstr(ph, "phases_note", ""));
    printf("  loader   per batch, summed over workers, beside the step\n");
    static const char *const stages[] = {"read",    "decode",    "resize",
                                         "augment", "normalise", "collate"};
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
        print_phase(ph, stages[i], stages[i]);

    const cJSON *ops = cJSON_GetObjectItem(r, "ops");
    int nops = cJSON_GetArraySize(ops);
    const cJSON *tot = cJSON_GetObjectItem(r, "ops_total");
    char tms[32];
    printf("  ops      %g calls, %s in the window (profiled pass: each op timed in isolation)\n",
           jnum(tot, "calls", 0), dg_fmt_num(tms, sizeof tms, "%.3f ms", jmetric(tot, "ms")));
    if (nops > 0)
        printf("    %-13s %-36s %7s %10s %9s %6s  %s\n", "op", "shape", "calls", "total ms",
               "mean ms", "share", "backend");
    int shown = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, ops)
    {
        if (shown++ == TOP_OPS)
            break;
        bool fb = cJSON_IsTrue(cJSON_GetObjectItem(o, "fallback"));
        printf("    %-13s %-36.36s %7g %10.3f %9.4f %5.1f%%  %s%s\n", jstr(o, "op", "?"),
               jstr(o, "shape", "?"), jnum(o, "calls", 0), jnum(o, "ms_total", 0),
               jnum(o, "ms_mean", 0), 100 * jnum(o, "share", 0), jstr(o, "backend", "?"),
               fb ? "  FALLBACK (ran on the cpu, with copies)" : "");
    }
    if (nops > TOP_OPS)
        printf("    ... %d more rows (--json for all)\n", nops - TOP_OPS);

    const cJSON *sp = cJSON_GetObjectItem(r, "sync_points");
    printf(
        "  sync     %g sync points in the window (%g loss reads, %g fallbacks) · %.2f per step\n",
        jnum(sp, "total", 0), jnum(sp, "loss_reads", 0), jnum(sp, "fallbacks", 0),
        jnum(sp, "per_step", 0));
    const cJSON *by = cJSON_GetObjectItem(r, "bytes");
    char h2d[32], d2h[32], fh[32], fd[32];
    fmt_bytes(h2d, sizeof h2d, cJSON_GetObjectItem(by, "h2d"));
    fmt_bytes(d2h, sizeof d2h, cJSON_GetObjectItem(by, "d2h"));
    fmt_bytes(fh, sizeof fh, cJSON_GetObjectItem(by, "fallback_h2d"));
    fmt_bytes(fd, sizeof fd, cJSON_GetObjectItem(by, "fallback_d2h"));
    printf("  bytes    h2d %s · d2h %s in the window (fallback copies: h2d %s, d2h %s)\n", h2d, d2h,
           fh, fd);
    const cJSON *te = cJSON_GetObjectItem(r, "trace_events");
    if (cJSON_IsString(cJSON_GetObjectItem(r, "trace")))
        printf("  trace    %s (%g op events%s; open in ui.perfetto.dev or chrome://tracing)\n",
               jstr(r, "trace", ""), jnum(te, "ops", 0),
               jnum(te, "dropped", 0) > 0 ? ", some dropped past the cap" : "");
    else if (!cJSON_IsString(cJSON_GetObjectItem(r, "error")))
        printf("  trace    not written (--trace FILE writes one)\n");
    else
        printf("  trace    not written\n");
    if (cJSON_IsString(cJSON_GetObjectItem(r, "error")))
        printf("  error    %s\n", jstr(r, "error", ""));
}

#define OFF(f) offsetof(dg_profile_opts, f)
const cli_opt cli_profile_opts[] = {
    {CLI_INT, "--warmup", NULL, "N", "10", "steps", "untimed steps first", OFF(warmup), 1, 1000000,
     NULL, NULL, NULL},
    {CLI_INT, "--window", NULL, "N", "50", "steps", "profiled steps", OFF(window), 1, 1000000, NULL,
     NULL, NULL},
    {CLI_FUNC, "--trace", NULL, "FILE", "none", NULL, "write the Chrome trace to FILE",
     OFF(trace_path), 0, 0, cli_nonempty, NULL, NULL},
    CLI_OPTS_END,
};
#undef OFF

bool cli_profile_check(const void *opts, char *buf, size_t len)
{
    const dg_train_opts *t = &((const dg_profile_opts *)opts)->train;
    if (t->steps || t->epochs || t->val_split > 0 || t->export_dir)
        snprintf(buf, len,
                 "--steps, --epochs, --val-split and --export do not apply (one epoch of "
                 "--warmup + --window steps)");
    return buf[0] != 0;
}

dg_status cli_profile_run(dg_ctx *ctx, void *o, cli_progress *p, char **json, int *verdict)
{
    (void)p;
    (void)verdict;
    return dg_profile_run(ctx, o, json);
}
