/* devgate compare: the cpu baseline against a device, both against float64. */
#include "cli.h"

#include <errno.h>

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

/* What accept's rules say of the comparison (dg_diagnose over an accept
 * record holding it): the speed verdicts' doubts and the other processes
 * that ran during the timed runs, one line each, as accept names them. */
static void print_compare_findings(const cJSON *r)
{
    static const char *const ids[] = {"contended", "verdict-inconclusive", "cpu-baseline-unfair"};
    cJSON *wrap = cJSON_CreateObject();
    cJSON_AddNumberToObject(wrap, "v", 1);
    cJSON_AddStringToObject(wrap, "kind", "accept");
    cJSON_AddItemToObject(wrap, "compare", cJSON_Duplicate(r, true));
    char *text = cJSON_PrintUnformatted(wrap), *out = NULL;
    cJSON_Delete(wrap);
    dg_ctx *ctx = dg_ctx_new();
    cJSON *d = ctx && text && dg_diagnose(ctx, text, NULL, &out) == DG_OK ? cJSON_Parse(out) : NULL;
    dg_string_free(out);
    cJSON_free(text);
    dg_ctx_free(ctx);
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(d, "findings"))
    {
        const char *id = jstr(f, "id", "");
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
            if (strcmp(id, ids[i]) != 0)
                continue;
            char title[512];
            printf("  %-8s %s: %s\n", jstr(f, "severity", "?"), id,
                   cli_cell(title, sizeof title, jstr(f, "title", "")));
        }
    }
    cJSON_Delete(d);
}

static void print_compare(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec"), *dev = cJSON_GetObjectItem(r, "device");
    const cJSON *th = cJSON_GetObjectItem(r, "thresholds");
    const char *be = jstr(spec, "backend", "?");
    printf("devgate compare · %s · cpu vs %s (%s) · %g steps · seed %g · tolerance loss %g, params "
           "%g\n",
           jstr(spec, "model", "?"), be, jstr(dev, "name", "?"), jnum(spec, "steps", 0),
           jnum(spec, "seed", 0), jnum(th, "loss_tolerance", 0), jnum(th, "param_tolerance", 0));
    const cJSON *run;
    cJSON_ArrayForEach(run, cJSON_GetObjectItem(r, "runs"))
    {
        int batch = (int)jnum(run, "batch", 0);
        if (cJSON_GetObjectItem(run, "error")) {
            printf("  batch %-6d %s failed: %s\n", batch, jstr(run, "failed", "?"),
                   jstr(run, "error", ""));
            continue;
        }
        const cJSON *cj = cJSON_GetObjectItem(run, "cpu"), *dj = cJSON_GetObjectItem(run, "device");
        const cJSON *lr = cJSON_GetObjectItem(run, "loss_vs_ref"),
                    *pd = cJSON_GetObjectItem(run, "param_drift");
        double busy = jmetric(run, "busy_fraction"), sp = jmetric(run, "speedup");
        double red = jmetric(run, "step_time_reduction_pct");
        char busy_s[24], sp_s[160], a[16], b[16], cc[16], d[16], e[16], f[16];
        if (isnan(busy))
            snprintf(busy_s, sizeof busy_s, "n/a");
        else
            snprintf(busy_s, sizeof busy_s, "%.0f%%", 100 * busy);
        const cJSON *ci = cJSON_GetObjectItem(run, "speedup_ci");
        double lo = jmetric(ci, "lo"), hi = jmetric(ci, "hi");
        const char *sv = jstr(cJSON_GetObjectItem(run, "speed"), "verdict", NULL);
        char ci_s[64] = "";
        if (!isnan(lo) && !isnan(hi))
            snprintf(ci_s, sizeof ci_s, ", 95%% %.2f-%.2fx", lo, hi);
        if (isnan(sp))
            snprintf(sp_s, sizeof sp_s, "n/a");
        else
            snprintf(sp_s, sizeof sp_s, "%.2fx (%s%s)%s%s", sp,
                     dg_fmt_num((char[32]){0}, 32, "%+.0f%% step time", -red), ci_s, sv ? " " : "",
                     sv ? sv : "");
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
            snprintf(verdict + used, sizeof verdict - used,
                     " (the cpu baseline is off float64 too)");
        }
        char cms[32], dms[32];
        printf("  batch %-6d cpu %s · %s %s · speedup %s · busy %s · loss vs f64 cpu %s "
               "%s %s"
               " · cpu/%s %s · params %s/cpu %s, vs f64 cpu %s %s %s · %s%s\n",
               batch, dg_fmt_num(cms, sizeof cms, "%.3f ms", jmetric(cj, "step_ms")), be,
               dg_fmt_num(dms, sizeof dms, "%.3f ms", jmetric(dj, "step_ms")), sp_s, busy_s,
               rel(a, sizeof a, lr, "cpu"), be, rel(b, sizeof b, lr, "device"), be,
               rel(cc, sizeof cc, run, "loss_cpu_vs_device"), be,
               rel(d, sizeof d, pd, "device_vs_cpu"), rel(e, sizeof e, pd, "cpu_vs_ref"), be,
               rel(f, sizeof f, pd, "device_vs_ref"), verdict,
               cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "reference"), "ran"))
                   ? ""
                   : " (float64 reference skipped)");
    }
    if (cJSON_IsString(cJSON_GetObjectItem(r, "error")))
        printf("  error    %s\n", jstr(r, "error", ""));
    print_compare_findings(r);
}

static const char *batches_opt(const cli_opt *o, const char *v, void *field)
{
    (void)o;
    return parse_batches(v, field) ? NULL : "up to 4 sizes in 1..1048576 such as 32,128";
}

typedef struct runs_args {
    bool force;
    cli_thresholds thr;
} runs_args;

#define OFF(f) offsetof(dg_compare_opts, f)
const cli_opt cli_compare_opts[] = {
    {CLI_FUNC, "--batches", NULL, "N,N,...", "32,128,512", "samples", "batch sizes compared",
     OFF(batches), 0, 0, batches_opt, NULL, NULL},
    {CLI_INT, "--repetitions", NULL, "N", "5", "repetitions",
     "interleaved timed repetitions a side, at most (fewer once the speedup is decisive)",
     OFF(repetitions), 1, 50, NULL, NULL, NULL},
    {CLI_DOUBLE, "--loss-tolerance", NULL, "F", "1e-3", "relative",
     "loss drift allowed against the float64 reference", OFF(loss_tolerance), ABOVE_ZERO, DBL_MAX,
     NULL, NULL, NULL},
    {CLI_DOUBLE, "--param-tolerance", NULL, "F", "1e-3", "relative L2", "parameter drift allowed",
     OFF(param_tolerance), ABOVE_ZERO, DBL_MAX, NULL, NULL, NULL},
    CLI_OPTS_END,
};
#undef OFF

const cli_opt cli_compare_runs_opts[] = {
    {CLI_FLAG, "--force", NULL, NULL, NULL, NULL,
     "compare RUN_A RUN_B: compare runs whose input buckets differ", offsetof(runs_args, force), 0,
     0, NULL, NULL, NULL},
    {CLI_FUNC, "--threshold", NULL, "NAME=VALUE", NULL, NULL,
     "compare RUN_A RUN_B: a threshold of the speed verdict (repeatable; docs/rules.md)",
     offsetof(runs_args, thr), 0, 0, cli_threshold_add, NULL, NULL},
    CLI_OPTS_END,
};

int cmd_compare(cli *c, int argc, char **argv)
{
    dg_compare_opts o = {.train = DG_TRAIN_OPTS_INIT};
    runs_args ra = {0};
    char *pos[2];
    cli_args a = {.pos = pos, .max = 2};
    int r = cli_parse(c, &cli_verb_compare, argc, argv, (void *const[]){&o, &ra, &o.train, c}, &a);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    /* Two positional arguments: compare two recorded runs (cli_compare_runs.c). */
    if (a.npos > 0) {
        if (a.seen[0] || a.seen[2]) {
            cli_error("compare: comparing runs takes only --force, --threshold and the common "
                      "options (compare RUN_A RUN_B [--force] [--threshold NAME=VALUE] [--json])");
            return EXIT_USAGE;
        }
        if (a.npos != 2) {
            cli_error("compare: give two runs (ledger ids, unique prefixes or record files): "
                      "compare RUN_A RUN_B");
            return EXIT_USAGE;
        }
        return cmd_compare_runs(c, pos[0], pos[1], ra.force, ra.thr.list[0] ? ra.thr.list : NULL);
    }
    if (ra.force || ra.thr.list[0]) {
        cli_error("compare: --force and --threshold apply to compare RUN_A RUN_B only");
        return EXIT_USAGE;
    }
    if (o.train.epochs || o.train.sync_every || o.train.export_dir) {
        cli_error("compare: --epochs, --sync-every and --export do not apply (one epoch, the loss "
                  "read at every step, compare exports its own batches)");
        return EXIT_USAGE;
    }
    if (!o.train.backend || strcmp(o.train.backend, "cpu") == 0) {
        cli_error(
            "compare: --backend names the device to hold against the cpu baseline (opencl, cuda)");
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
    return cli_record_print(
        c, "compare", json, rec, rc, print_compare,
        st == DG_OK && !ok ? "drift beyond tolerance: losses or parameters of the runs disagree"
                           : NULL);
}

/* ---- compare RUN_A RUN_B: two recorded runs of `devgate run` ---------------------- */

/* The record text of a run given as a record file or a ledger id/prefix, to
 * free with cJSON_free; NULL with a message and *rc set. */
static char *load_run(cli *c, const char *arg, int *rc)
{
    FILE *f = fopen(arg, "rb");
    if (f) {
        /* A file that opens is a record file; anything else a ledger id. */
        fclose(f);
        char *buf = cli_read_file(arg, CLI_RECORD_MAX);
        if (!buf) {
            if (errno == EFBIG)
                cli_error("compare: %s is larger than %zu bytes, more than any record", arg,
                          CLI_RECORD_MAX);
            else
                cli_error("compare: cannot read %s: %s", arg, strerror(errno));
            *rc = EXIT_USAGE;
            return NULL;
        }
        /* Re-printed through cJSON, so every path returns cJSON_free memory. */
        cJSON *doc = cJSON_Parse(buf);
        free(buf);
        char *txt = doc ? cJSON_PrintUnformatted(doc) : NULL;
        cJSON_Delete(doc);
        if (!txt) {
            cli_error("compare: %s is not a JSON record", arg);
            *rc = EXIT_USAGE;
        }
        return txt;
    }
    if (c->no_ledger) {
        cli_error(
            "compare: %s is not a readable file and --no-ledger leaves no ledger to look it up in",
            arg);
        *rc = EXIT_USAGE;
        return NULL;
    }
    dg_status st;
    dg_ledger *lg = cli_ledger_open(c, NULL, CLI_LEDGER_READ, "compare", &st);
    char *entry = NULL;
    if (lg && st == DG_OK)
        st = dg_ledger_show(c->ctx, lg, arg, &entry);
    dg_ledger_close(lg);
    /* A ledger that did not open has said why; a run not found is a failure. */
    if (!lg || st != DG_OK) {
        if (lg)
            cli_error("compare: %s", dg_errmsg(c->ctx));
        *rc = st == DG_ERR_NOT_FOUND ? EXIT_FAIL : EXIT_USAGE;
        return NULL;
    }
    /* The entry's record, with the ledger id as its run_id. */
    cJSON *e = cJSON_Parse(entry);
    dg_string_free(entry);
    cJSON *rec = cJSON_DetachItemFromObject(e, "record");
    if (cJSON_IsObject(rec)) {
        const cJSON *id = cJSON_GetObjectItem(e, "id");
        if (cJSON_IsString(id)) {
            cJSON_DeleteItemFromObject(rec, "run_id");
            cJSON_AddStringToObject(rec, "run_id", id->valuestring);
        }
    }
    char *out = rec ? cJSON_PrintUnformatted(rec) : NULL;
    cJSON_Delete(rec);
    cJSON_Delete(e);
    if (!out) {
        cli_error("compare: run %s has no record", arg);
        *rc = EXIT_USAGE;
    }
    return out;
}

static void cell_metric(char *buf, size_t n, const cJSON *run, const char *key, const char *fmt,
                        double scale)
{
    double v = jmetric(run, key);
    if (isnan(v))
        snprintf(buf, n, "not reported");
    else
        snprintf(buf, n, fmt, v * scale);
}

static void print_compare_runs(const cJSON *r)
{
    const cJSON *ra = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "runs"), 0);
    const cJSON *rb = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "runs"), 1);
    char a[200], b[200];
    printf(
        "devgate compare · A %s (%s) · B %s (%s)%s\n", cli_cell(a, 64, jstr(ra, "run_id", "file")),
        jstr(ra, "shape", "?"), cli_cell(b, 64, jstr(rb, "run_id", "file")), jstr(rb, "shape", "?"),
        cJSON_IsTrue(cJSON_GetObjectItem(r, "forced")) ? " · input buckets differ (--force)" : "");
    /* The whole commands, then the table with the part of them that differs. */
    for (int k = 0; k < 2; k++) {
        const cJSON *run = k ? rb : ra;
        char *buf = k ? b : a;
        size_t off = 0;
        buf[0] = '\0';
        const cJSON *arg;
        cJSON_ArrayForEach(arg, cJSON_GetObjectItem(run, "cmd")) if (off < sizeof a) off +=
            (size_t)snprintf(buf + off, sizeof a - off, "%s%s", off ? " " : "",
                             cJSON_IsString(arg) ? arg->valuestring : "?");
    }
    char full[164];
    printf("  A  %s\n", cli_cell(full, sizeof full, a));
    printf("  B  %s\n\n", cli_cell(full, sizeof full, b));
    printf("  %-14s %-34s %-34s\n", "", "A", "B");
    /* Cells of at most 34 bytes, cut at a character boundary and flattened. */
    char ca[35], cb[35];
    printf("  %-14s %-34s %-34s\n", "command", cli_cell(ca, sizeof ca, jstr(ra, "cmd_diff", "-")),
           cli_cell(cb, sizeof cb, jstr(rb, "cmd_diff", "-")));
    static const char *const rows[] = {"shape", "label", "device", "state", "seeds"};
    static const char *const names[] = {"record", "label", "device", "state", "seeds"};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        printf("  %-14s %-34s %-34s\n", names[k], cli_cell(ca, sizeof ca, jstr(ra, rows[k], "-")),
               cli_cell(cb, sizeof cb, jstr(rb, rows[k], "-")));
    cell_metric(a, sizeof a, ra, "step_ms", "%.3f ms", 1);
    cell_metric(b, sizeof b, rb, "step_ms", "%.3f ms", 1);
    printf("  %-14s %-34s %-34s\n", "step (median)", a, b);
    cell_metric(a, sizeof a, ra, "samples_per_s", "%.1f samples/s", 1);
    cell_metric(b, sizeof b, rb, "samples_per_s", "%.1f samples/s", 1);
    printf("  %-14s %-34s %-34s\n", "throughput", a, b);
    /* Which rate each side is: the steady one, or the whole run's. */
    for (int k = 0; k < 2; k++) {
        const char *basis = jstr(k ? rb : ra, "samples_per_s_basis", NULL);
        snprintf(k ? b : a, sizeof a, "%s",
                 !basis                               ? "-"
                 : strcmp(basis, "after-warmup") == 0 ? "after warm-up"
                                                      : "whole run (too few steps)");
    }
    printf("  %-14s %-34s %-34s\n", "  measured", a, b);
    cell_metric(a, sizeof a, ra, "busy_fraction", "%.0f%%", 100);
    cell_metric(b, sizeof b, rb, "busy_fraction", "%.0f%%", 100);
    printf("  %-14s %-34s %-34s\n", "busy", a, b);
    const cJSON *sp = cJSON_GetObjectItem(r, "speedup");
    printf("\n  speedup B/A    step time %s · samples/s %s (each record's headline)\n",
           dg_fmt_num(a, sizeof a, "%.3fx", jmetric(sp, "step_time")),
           dg_fmt_num(b, sizeof b, "%.3fx", jmetric(sp, "samples_per_s")));
    const cJSON *jd = cJSON_GetObjectItem(r, "judgement");
    if (jd) {
        printf("  decision       %s: %s\n", jstr(jd, "verdict", "?"), jstr(jd, "text", ""));
        const cJSON *band = cJSON_GetObjectItem(jd, "band");
        if (jstr(jd, "speedup_source", NULL))
            printf("  judged on      %s · no difference within %.2f-%.2fx · pays off at %.2fx "
                   "or more\n",
                   jstr(jd, "speedup_source", ""), jnum(band, "lo", 0), jnum(band, "hi", 0),
                   jnum(jd, "pays_off_min", 0));
        const char *seeds = jstr(cJSON_GetObjectItem(jd, "seeds"), "note", NULL);
        if (seeds)
            printf("  seeds          %s\n", seeds);
        const char *cn = jstr(cJSON_GetObjectItem(jd, "contention"), "text", NULL);
        if (cn)
            printf("  contention     %s\n", cn);
    }
    const cJSON *bf = cJSON_GetObjectItem(r, "busy_fraction");
    if (jstr(bf, "source_b", NULL))
        printf("  busy from      %s\n", jstr(bf, "source_b", ""));
    const cJSON *bk = cJSON_GetObjectItem(r, "buckets");
    if (!cJSON_IsTrue(cJSON_GetObjectItem(bk, "known")))
        printf("  input bucket   not recorded in %s: the inputs are not known to match\n",
               !cJSON_IsTrue(cJSON_GetObjectItem(bk, "a_known")) &&
                       !cJSON_IsTrue(cJSON_GetObjectItem(bk, "b_known"))
                   ? "either record"
               : !cJSON_IsTrue(cJSON_GetObjectItem(bk, "a_known")) ? "A"
                                                                   : "B");
    const cJSON *mem = cJSON_GetObjectItem(r, "memory");
    const cJSON *ma = cJSON_GetObjectItem(mem, "a"), *mb = cJSON_GetObjectItem(mem, "b");
    int na = cJSON_GetArraySize(ma), nb = cJSON_GetArraySize(mb);
    if (na || nb) {
        printf("\n  %-6s %12s %12s   %12s %12s\n", "epoch", "A allocated", "A footprint",
               "B allocated", "B footprint");
        for (int i = 0; i < (na > nb ? na : nb); i++) {
            const cJSON *ea = cJSON_GetArrayItem(ma, i), *eb = cJSON_GetArrayItem(mb, i);
            char x[24], y[24], z[24], w[24];
            fmt_bytes(x, sizeof x, cJSON_GetObjectItem(ea, "allocated"));
            fmt_bytes(y, sizeof y, cJSON_GetObjectItem(ea, "rss"));
            fmt_bytes(z, sizeof z, cJSON_GetObjectItem(eb, "allocated"));
            fmt_bytes(w, sizeof w, cJSON_GetObjectItem(eb, "rss"));
            printf("  %-6d %12s %12s   %12s %12s\n", i, ea ? x : "-", ea ? y : "-", eb ? z : "-",
                   eb ? w : "-");
        }
    } else {
        printf("\n  memory         neither run reported epoch watermarks\n");
    }
    const cJSON *l = cJSON_GetObjectItem(r, "loss");
    const cJSON *agree = cJSON_GetObjectItem(l, "agree");
    const cJSON *worst = cJSON_GetObjectItem(l, "worst");
    if (cJSON_IsBool(agree))
        printf("  loss           %g (epoch, step) pairs · max difference %.3g (relative %.3g, "
               "epoch %g step %g) · %s (tolerance %g)\n",
               jnum(l, "pairs", 0), jmetric(l, "max_abs_diff"), jmetric(l, "max_rel_diff"),
               jnum(worst, "epoch", NAN), jnum(worst, "step", NAN),
               cJSON_IsTrue(agree) ? "agree" : "DISAGREE", jnum(l, "tolerance", 0));
    else
        printf("  loss           not compared: %s\n",
               jstr(l, "why", "no (epoch, step) reported a loss in both runs"));
}

int cmd_compare_runs(cli *c, const char *ida, const char *idb, bool force, const char *thresholds)
{
    int rc = EXIT_PASS;
    char *a = load_run(c, ida, &rc);
    char *b = a ? load_run(c, idb, &rc) : NULL;
    if (!a || !b) {
        cJSON_free(a);
        cJSON_free(b);
        return rc;
    }
    char *json = NULL;
    dg_status st = dg_compare_runs(c->ctx, a, b, force, thresholds, &json);
    cJSON_free(a);
    cJSON_free(b);
    if (st != DG_OK) {
        cli_error("%s", dg_errmsg(c->ctx));
        return EXIT_USAGE;
    }
    /* A reading verb: the comparison is printed, not recorded, so it works on a
     * read-only ledger (--json keeps it). Losses that disagree beyond the
     * tolerance exit 1, as the fixture's compare does on drift. */
    cJSON *rec = cJSON_Parse(json);
    dg_string_free(json);
    if (c->json)
        cli_print_json(rec, NULL);
    else if (!c->quiet)
        print_compare_runs(rec);
    bool drift = cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "loss"), "agree"));
    cJSON_Delete(rec);
    return drift ? EXIT_FAIL : EXIT_PASS;
}
