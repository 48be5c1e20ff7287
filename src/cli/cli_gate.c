/* devgate gate: the device gate per backend. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "M,N,K" or a single "S" for a square product. */
static bool parse_size(const char *s, dg_gate_opts *o)
{
    long v[3];
    char buf[64];
    if (strlen(s) >= sizeof buf)
        return false;
    strcpy(buf, s);
    int n = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == 3 || !cli_parse_long(tok, 1, 16384, &v[n]))
            return false;
        n++;
    }
    if (n == 1)
        v[1] = v[2] = v[0];
    else if (n != 3)
        return false;
    o->m = (int)v[0];
    o->n = (int)v[1];
    o->k = (int)v[2];
    return true;
}

/* Level 2: the op table's counts, its worst row, and every row that failed. */
static void print_ops(const cJSON *ops)
{
    if (!cJSON_IsObject(ops))
        return;
    char prec[64] = "";
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(ops, "precisions"))
    {
        size_t n = strlen(prec);
        snprintf(prec + n, sizeof prec - n, "%s%s", n ? ", " : "", cJSON_GetStringValue(p));
    }
    double failed = jnum(ops, "failed", 0), native = jnum(ops, "not_native", 0);
    printf("  %-8s       ops %s: %.0f checked against float64, %.0f pass, %.0f FAIL", "", prec,
           jnum(ops, "checked", 0), jnum(ops, "passed", 0), failed);
    if (native > 0)
        printf(", %.0f not native", native);
    const cJSON *w = cJSON_GetObjectItem(ops, "worst");
    char cell[128];
    if (cJSON_IsObject(w))
        printf(" · worst %s %s %s NMSE %.2g (tolerance %.2g)", jstr(w, "op", "?"),
               jstr(w, "output", "?"), cli_cell(cell, sizeof cell, jstr(w, "shape", "?")),
               jnum(w, "nmse", NAN), jnum(w, "tolerance", NAN));
    printf("\n");
    int shown = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(ops, "table"))
    {
        const char *v = jstr(r, "verdict", "");
        if (strcmp(v, "fail") && strcmp(v, "error"))
            continue;
        if (shown++ == 8) {
            printf("  %-8s         (%.0f failing rows in all: see --json)\n", "", failed);
            break;
        }
        double nmse = jnum(r, "nmse", NAN), tol = jnum(r, "tolerance", NAN);
        char err[96];
        if (isnan(nmse))
            snprintf(err, sizeof err, "%s", jstr(r, "reason", "no finite result"));
        else
            snprintf(err, sizeof err, "NMSE %.2g, tolerance %.2g%s", nmse, tol,
                     tol == 0 ? " (exact)" : "");
        printf("  %-8s         FAIL %s %s %s %s: %s\n", "", jstr(r, "op", "?"),
               jstr(r, "output", "?"), jstr(r, "precision", "?"),
               cli_cell(cell, sizeof cell, jstr(r, "shape", "?")), err);
    }
}

/* Level 2: the four ways of the host-device link against its rating. */
static void print_link(const cJSON *l)
{
    if (!cJSON_IsObject(l))
        return;
    static const char *const ways[] = {"h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"};
    printf("  %-8s       link", "");
    for (int k = 0; k < 4; k++) {
        double v = jmetric(l, ways[k]);
        if (isnan(v))
            printf("%s %s not measured", k ? " ·" : "", ways[k]);
        else
            printf("%s %s %.1f GB/s", k ? " ·" : "", ways[k], v);
    }
    double rated = jmetric(l, "rated");
    char cell[160];
    if (isnan(rated))
        printf(" · %s\n", cli_cell(cell, sizeof cell, jstr(l, "rated_reason", "no rating")));
    else
        printf(" · rated %.1f GB/s (%s)%s\n", rated,
               cli_cell(cell, sizeof cell, jstr(l, "kind", "?")),
               cJSON_IsFalse(cJSON_GetObjectItem(l, "ok")) ? " · SLOW" : "");
    if (cJSON_IsFalse(cJSON_GetObjectItem(l, "ok")))
        printf("  %-8s         %s\n", "", cli_cell(cell, sizeof cell, jstr(l, "reason", "?")));
}

/* "a-b UNIT" of a {min, max} pair, or "not reported". */
static const char *range(char *buf, size_t n, const cJSON *o, const char *unit)
{
    double lo = jmetric(o, "min"), hi = jmetric(o, "max");
    if (isnan(lo) || isnan(hi))
        snprintf(buf, n, "not reported");
    else if (lo == hi)
        snprintf(buf, n, "%.0f %s", hi, unit);
    else
        snprintf(buf, n, "%.0f-%.0f %s", lo, hi, unit);
    return buf;
}

/* Level 3: the sustained load, its drift and the health sampled, and the
 * memory bandwidth against its rating. */
static void print_sustain(const cJSON *s, const cJSON *bw)
{
    if (!cJSON_IsObject(s))
        return;
    const cJSON *h = cJSON_GetObjectItem(s, "health"), *d = cJSON_GetObjectItem(s, "drift");
    double f = jmetric(s, "fraction_of_peak");
    char peak[48] = "";
    if (!isnan(f))
        snprintf(peak, sizeof peak, " (%.2f of peak)", f);
    printf("  %-8s       sustain %.0f s at load %.2f: %.1f GFLOP/s median%s · drift ", "",
           jmetric(s, "wall"), jmetric(s, "load"), jmetric(s, "rate"), peak);
    double r = jmetric(d, "ratio"), lo = jmetric(cJSON_GetObjectItem(d, "ratio_ci"), "lo"),
           hi = jmetric(cJSON_GetObjectItem(d, "ratio_ci"), "hi");
    if (!isnan(r) && !isnan(lo) && !isnan(hi))
        printf("%+.1f%% (95%% %+.1f%% to %+.1f%%) ", 100 * (r - 1), 100 * (lo - 1), 100 * (hi - 1));
    printf("%s\n", jstr(d, "verdict", "?"));
    char a[48], b[48], c[48];
    double e = jmetric(h, "energy");
    char en[48] = "energy not reported";
    if (!isnan(e))
        snprintf(en, sizeof en, "%.1f kJ", e / 1e3);
    printf("  %-8s         clocks %s · temperature %s · power %s · %s · throttle ", "",
           range(a, sizeof a, cJSON_GetObjectItem(h, "sm_clock"), "MHz"),
           range(b, sizeof b, cJSON_GetObjectItem(h, "temperature"), "C"),
           range(c, sizeof c, cJSON_GetObjectItem(h, "power"), "W"), en);
    if (!cJSON_IsTrue(cJSON_GetObjectItem(h, "throttle_reported"))) {
        printf("not reported");
    } else {
        int n = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(h, "throttle"))
        {
            printf("%s%s %.1f s", n++ ? ", " : "", jstr(t, "reason", "?"), jmetric(t, "seconds"));
        }
        if (!n)
            printf("none");
    }
    printf("  (%s)\n", jstr(s, "source", "?"));
    if (cJSON_IsObject(bw)) {
        double g = jmetric(bw, "bandwidth"), rated = jmetric(bw, "rated");
        printf("  %-8s         memory %.1f GB/s", "", g);
        if (!isnan(rated))
            printf(" (%.2f of %.0f GB/s rated)%s", g / rated, rated,
                   cJSON_IsFalse(cJSON_GetObjectItem(bw, "ok")) ? " · LOW" : "");
        else
            printf(" · %s", jstr(bw, "reason", "no rating"));
        printf("\n");
    }
}

static void print_backend(const cJSON *b)
{
    const char *name = jstr(b, "name", "?");
    bool built = cJSON_IsTrue(cJSON_GetObjectItem(b, "built"));
    bool avail = cJSON_IsTrue(cJSON_GetObjectItem(b, "available"));
    const cJSON *mm = cJSON_GetObjectItem(b, "matmul");
    if (!avail) {
        printf("  %-8s %-5s %s: %s\n", name, "n/a", built ? "built, not available" : "not built",
               jstr(b, "reason", "?"));
        return;
    }
    bool ok = cJSON_IsTrue(cJSON_GetObjectItem(mm, "ok")) &&
              jnum(cJSON_GetObjectItem(b, "ops"), "failed", 0) == 0;
    static const char *const checks[] = {"link", "sustain", "memory_bandwidth"};
    for (int k = 0; k < 3; k++)
        ok &= !cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(b, checks[k]), "ok"));
    const cJSON *devs = cJSON_GetObjectItem(b, "devices");
    const cJSON *d0 = cJSON_GetArrayItem(devs, 0);
    char mem[32], freem[32];
    fmt_bytes(mem, sizeof mem, cJSON_GetObjectItem(d0, "memory_total"));
    fmt_bytes(freem, sizeof freem, cJSON_GetObjectItem(d0, "memory_free"));
    double cu = jmetric(d0, "compute_units");
    char units[32];
    if (isnan(cu))
        snprintf(units, sizeof units, "units not reported");
    else
        snprintf(units, sizeof units, "%.0f units", cu);
    printf("  %-8s %-5s %s (%s) · %s total, %s free · %s\n", name, ok ? "PASS" : "FAIL",
           jstr(d0, "name", "?"), jstr(d0, "vendor", "?"), mem, freem, units);
    int ndev = cJSON_GetArraySize(devs);
    if (ndev > 1)
        printf("  %-8s       (+%d more device%s)\n", "", ndev - 1, ndev > 2 ? "s" : "");
    if (cJSON_IsTrue(cJSON_GetObjectItem(mm, "ok"))) {
        printf("  %-8s       matmul %gx%gx%g %s ok: max abs err %.2g (%.2g of tolerance) · cold "
               "%.2f ms · warm %.2f ms · %.1f GFLOP/s\n",
               "", jnum(mm, "m", 0), jnum(mm, "n", 0), jnum(mm, "k", 0), jstr(mm, "math", "fp32"),
               jnum(mm, "max_abs_err", 0), jnum(mm, "max_err_over_tolerance", 0),
               jnum(mm, "ms_cold", 0), jnum(mm, "ms_warm", 0), jnum(mm, "gflops", 0));
    } else {
        printf("  %-8s       matmul FAILED: %s\n", "", jstr(mm, "reason", "?"));
    }
    print_ops(cJSON_GetObjectItem(b, "ops"));
    print_link(cJSON_GetObjectItem(b, "link"));
    print_sustain(cJSON_GetObjectItem(b, "sustain"), cJSON_GetObjectItem(b, "memory_bandwidth"));
}

void cli_gate_print(const cJSON *rec)
{
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItem(rec, "backends")) print_backend(b);
    const cJSON *rc = cJSON_GetObjectItem(rec, "reference_check");
    if (cJSON_IsArray(rc)) {
        double worst = 0;
        int n = 0, bad = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, rc)
        {
            n++;
            bad += !cJSON_IsTrue(cJSON_GetObjectItem(it, "ok"));
            worst = fmax(worst, jnum(it, "nmse", INFINITY));
        }
        printf("  reference: %d backward ops against its own finite differences, %s (worst NMSE "
               "%.2g)\n",
               n, bad ? "DISAGREES" : "agrees", worst);
    }
    const char *verdict = jstr(rec, "verdict", "");
    printf("\n  verdict %s\n", strcmp(verdict, "pass") == 0   ? "PASS"
                               : strcmp(verdict, "fail") == 0 ? "FAIL"
                                                              : "UNAVAILABLE");
    cli_level_said(rec, stdout);
}

static const char *size_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    return parse_size(v, field) ? NULL : "M,N,K (or S) with each in 1..16384";
}

static const char *math_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    dg_gate_opts *o = field;
    for (int m = DG_MATH_FP32; m <= DG_MATH_BF16; m++)
        if (strcmp(v, dg_math_name((dg_math)m)) == 0) {
            o->math = (dg_math)m;
            return NULL;
        }
    return "fp32, tf32 or bf16";
}

const cli_opt cli_gate_opts[] = {
    {CLI_STR, "--backend", NULL, "NAME[,NAME]", "cpu,opencl,cuda", NULL, "backends to check",
     offsetof(dg_gate_opts, backends), 0, 0, NULL, NULL, NULL},
    {CLI_FUNC, "--size", NULL, "M,N,K", "512", NULL, "the checked matrix product", 0, 0, 0,
     size_opt, NULL, NULL},
    {CLI_U64, "--seed", NULL, "X", "0", NULL, "seed of the inputs", offsetof(dg_gate_opts, seed), 0,
     0, NULL, NULL, NULL},
    {CLI_INT, "--reps", NULL, "N", "5", "rounds", "timed warm rounds (each >= 10 ms of products)",
     offsetof(dg_gate_opts, warm_reps), 1, 64, NULL, NULL, NULL},
    {CLI_INT, "--level", NULL, "N", "1", NULL,
     "depth: 1 the product, 2 every op against float64 and the link, 3 sustained load and the "
     "device's health, 4 longer plus the soak",
     offsetof(dg_gate_opts, level), DG_LEVEL_MIN, DG_LEVEL_MAX, NULL, NULL, NULL},
    {CLI_DOUBLE, "--sustain", NULL, "S", "the level's (60, 420)", "s",
     "levels 3-4: the sustained load's seconds per backend", offsetof(dg_gate_opts, sustain_s), 1,
     86400, NULL, NULL, NULL},
    {CLI_DOUBLE, "--load", NULL, "F", "1", "fraction",
     "levels 3-4: the load's busy share of each period (1: back to back)",
     offsetof(dg_gate_opts, load), 0.05, 1, NULL, NULL, NULL},
    {CLI_FUNC, "--precision", NULL, "fp32|tf32|bf16", "fp32", NULL,
     "the device backends' product arithmetic (docs/schema/gate.md)", 0, 0, 0, math_opt, NULL,
     NULL},
    CLI_OPTS_END,
};

dg_status cli_gate_run(dg_ctx *ctx, void *o, cli_progress *p, char **json, int *verdict)
{
    (void)p;
    dg_gate_opts *g = o;
    if (!g->level)
        g->level = DG_LEVEL_MIN;
    dg_gate_verdict v = DG_GATE_PASS;
    dg_status st = dg_gate_run(ctx, g, json, &v);
    *verdict = v == DG_GATE_PASS ? EXIT_PASS : v == DG_GATE_FAIL ? EXIT_FAIL : EXIT_UNAVAILABLE;
    return st;
}

/* The level's budget up front: on stdout with the table, on stderr beside --json. */
void cli_gate_before(const cli *c, const void *o)
{
    const dg_gate_opts *g = o;
    int level = g->level ? g->level : DG_LEVEL_MIN;
    const dg_level_info *lv = dg_level_get(level);
    if (!lv)
        return;
    if (!c->json) {
        printf("devgate gate · level %d · budget %.0f s · seed %" PRIu64 "\n  level %d: %s\n\n",
               level, lv->gate_budget_s, g->seed, level, lv->what);
        fflush(stdout);
    } else if (!c->quiet) {
        fprintf(stderr, "devgate gate: level %d, budget %.0f s: %s\n", level, lv->gate_budget_s,
                lv->what);
    }
}
