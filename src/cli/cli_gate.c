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
    bool ok = cJSON_IsTrue(cJSON_GetObjectItem(mm, "ok"));
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
    if (ok) {
        printf("  %-8s       matmul %gx%gx%g %s ok: max abs err %.2g (%.2g of tolerance) · cold "
               "%.2f ms · warm %.2f ms · %.1f GFLOP/s\n",
               "", jnum(mm, "m", 0), jnum(mm, "n", 0), jnum(mm, "k", 0), jstr(mm, "math", "fp32"),
               jnum(mm, "max_abs_err", 0), jnum(mm, "max_err_over_tolerance", 0),
               jnum(mm, "ms_cold", 0), jnum(mm, "ms_warm", 0), jnum(mm, "gflops", 0));
    } else {
        printf("  %-8s       matmul FAILED: %s\n", "", jstr(mm, "reason", "?"));
    }
}

void cli_gate_print(const cJSON *rec)
{
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItem(rec, "backends")) print_backend(b);
    const char *verdict = jstr(rec, "verdict", "");
    printf("\n  verdict %s\n", strcmp(verdict, "pass") == 0   ? "PASS"
                               : strcmp(verdict, "fail") == 0 ? "FAIL"
                                                              : "UNAVAILABLE");
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
    {CLI_INT, "--reps", NULL, "N", "5", "repetitions", "timed warm repetitions",
     offsetof(dg_gate_opts, warm_reps), 1, 64, NULL, NULL, NULL},
    {CLI_FUNC, "--precision", NULL, "fp32|tf32|bf16", "fp32", NULL,
     "the device backends' product arithmetic (docs/schema/gate.md)", 0, 0, 0, math_opt, NULL,
     NULL},
    CLI_OPTS_END,
};

dg_status cli_gate_run(dg_ctx *ctx, void *o, cli_progress *p, char **json, int *verdict)
{
    (void)p;
    dg_gate_verdict v = DG_GATE_PASS;
    dg_status st = dg_gate_run(ctx, o, json, &v);
    *verdict = v == DG_GATE_PASS ? EXIT_PASS : v == DG_GATE_FAIL ? EXIT_FAIL : EXIT_UNAVAILABLE;
    return st;
}

void cli_gate_head(const void *o)
{
    printf("devgate gate · seed %" PRIu64 "\n\n", ((const dg_gate_opts *)o)->seed);
}
