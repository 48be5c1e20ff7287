/* The Markdown report for a merge request: verdict, decision, steps, findings
 * and the key numbers. Every record string goes through ESC_MD: Markdown and
 * HTML specials are backslash-escaped (| included, for table cells) and
 * newlines flattened, so a record cannot add markup, links or rows. */
#include "report/render.h"

#include <string.h>

static void md_str(dg_capbuf *b, const char *s, const char *fallback)
{
    rp_esc(b, ESC_MD, s, fallback);
}

static void md_header(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *g = rp_obj(rec, "final_gate");
    rp_put(b, "## devgate ");
    md_str(b, rp_str(rec, "kind"), "?");
    rp_put(b, ": ");
    rp_put(b, !g ? "no final gate" : rp_true(g, "accepted") ? "✅ accepted" : "❌ not accepted");
    rp_put(b, "\n\n");
    rp_put(b, "run ");
    md_str(b, rp_str(rec, "run_id"), "(not recorded)");
    rp_put(b, " · host ");
    md_str(b, rp_str(rec, "host"), "unknown");
    rp_put(b, " · ");
    md_str(b, rp_str(rec, "timestamp"), "no time");
    const char *bucket = rp_bucket_id(rec);
    if (bucket) {
        char shortid[13];
        snprintf(shortid, sizeof shortid, "%s", bucket);
        rp_put(b, " · bucket ");
        md_str(b, shortid, "");
    }
    const char *label = rp_str(rec, "label");
    if (label) {
        rp_put(b, " · label ");
        md_str(b, label, "");
    }
    const char *state = rp_str(rec, "state");
    if (state && strcmp(state, "complete") != 0) {
        rp_put(b, " · state **");
        md_str(b, state, "");
        rp_put(b, "**");
    }
    rp_put(b, "\n\n");
    if (g) {
        rp_put(b, "**");
        rp_prose(b, ESC_MD, rp_str(g, "statement"), rp_true(g, "accepted") ? "accepted" : "not accepted");
        rp_put(b, "**\n\n");
        static const char *const proofs[] = {"architecture", "gate_log", "sweep", "memory_curve"};
        static const char *const names[] = {"architecture proof", "device gate log", "batch sweep",
                                            "memory curve"};
        for (int i = 0; i < 4; i++) {
            char path[64];
            snprintf(path, sizeof path, "proofs.%s", proofs[i]);
            rp_printf(b, "%s%s %s", i ? " · " : "", rp_true(g, path) ? "✓" : "✗", names[i]);
        }
        rp_put(b, "\n\n");
    }
}

static void md_decision(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *d = rp_obj(rec, "decision");
    rp_put(b, "**Decision:** ");
    if (!d) {
        rp_put(b, "none recorded\n\n");
        return;
    }
    md_str(b, rp_str(d, "route"), "?");
    if (rp_str(d, "backend")) {
        rp_put(b, " (");
        md_str(b, rp_str(d, "backend"), "");
        rp_put(b, ")");
    }
    const cJSON *r;
    bool first = true;
    cJSON_ArrayForEach(r, rp_arr(d, "reasons"))
    {
        if (!cJSON_IsString(r))
            continue;
        rp_put(b, first ? " — " : "; ");
        rp_prose(b, ESC_MD, r->valuestring, "");
        first = false;
    }
    rp_put(b, "\n\n");
}

static void md_steps(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *steps = rp_arr(rec, "steps");
    if (cJSON_GetArraySize(steps) == 0)
        return;
    rp_put(b, "| step | status | verdict | summary |\n|---|---|---|---|\n");
    const cJSON *s;
    cJSON_ArrayForEach(s, steps)
    {
        rp_put(b, "| ");
        md_str(b, rp_str(s, "name"), "?");
        rp_put(b, " | ");
        md_str(b, rp_str(s, "status"), "?");
        rp_put(b, " | ");
        md_str(b, rp_str(s, "verdict"), "–");
        rp_put(b, " | ");
        rp_prose(b, ESC_MD, rp_str(s, "summary"), "");
        if (rp_str(s, "error")) {
            rp_put(b, " (error: ");
            md_str(b, rp_str(s, "error"), "");
            rp_put(b, ")");
        }
        rp_put(b, " |\n");
    }
    rp_put(b, "\n");
}

static void md_findings(dg_capbuf *b, const cJSON *rec)
{
    int n;
    const cJSON **fs = rp_findings_sorted(rec, &n);
    rp_put(b, "### Findings\n\n");
    if (n == 0)
        rp_put(b, "None.\n");
    for (int i = 0; i < n; i++) {
        rp_put(b, "- **");
        md_str(b, rp_str(fs[i], "severity"), "?");
        rp_put(b, "** ");
        md_str(b, rp_str(fs[i], "id"), "?");
        rp_put(b, ": ");
        rp_prose(b, ESC_MD, rp_str(fs[i], "title"), "");
        if (rp_str(fs[i], "action")) {
            rp_put(b, " → ");
            md_str(b, rp_str(fs[i], "action"), "");
        }
        rp_put(b, "\n");
    }
    rp_put(b, "\n");
    dg_free(fs);
}

static void md_row(dg_capbuf *b, const char *what, const char *value)
{
    rp_printf(b, "| %s | %s |\n", what, value);
}

static void md_key_sweep(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *sw = rp_obj(rec, "sweep");
    if (!sw)
        return;
    char v[64], line[160];
    double kb, sb;
    rp_fmt_metric_at(v, sizeof v, sw, "knee.samples_per_s");
    if (rp_num(sw, "knee.batch", &kb))
        snprintf(line, sizeof line, "batch %.0f (%s)", kb, v);
    else
        snprintf(line, sizeof line, "not reported");
    md_row(b, "knee", line);
    rp_fmt_metric_at(v, sizeof v, sw, "safe_batch.samples_per_s");
    if (rp_num(sw, "safe_batch.batch", &sb))
        snprintf(line, sizeof line, "batch %.0f (%s)", sb, v);
    else
        snprintf(line, sizeof line, "not reported");
    rp_printf(b, "| safe batch | %s", line);
    if (rp_str(sw, "safe_batch.note")) {
        rp_put(b, ", ");
        md_str(b, rp_str(sw, "safe_batch.note"), "");
    }
    rp_put(b, " |\n| sweep stopped | ");
    md_str(b, rp_str(sw, "stopped.reason"), "not reported");
    double at;
    if (rp_num(sw, "stopped.at_batch", &at))
        rp_printf(b, " at batch %.0f", at);
    rp_put(b, " |\n");
}

static void md_key_compare(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *run;
    cJSON_ArrayForEach(run, rp_arr(rec, "compare.runs"))
    {
        double batch, sp;
        char what[64], red[48], busy[48], line[200];
        if (!rp_num(run, "batch", &batch))
            continue;
        snprintf(what, sizeof what, "speedup vs cpu, batch %.0f", batch);
        if (!rp_num(run, "speedup", &sp)) {
            md_row(b, what, rp_obj(run, "speedup") ? "not reported" : "run failed");
            continue;
        }
        double r;
        if (rp_num(run, "step_time_reduction_pct", &r))
            snprintf(red, sizeof red, "%.1f%% %s", r < 0 ? -r : r, r < 0 ? "longer" : "shorter");
        else
            snprintf(red, sizeof red, "not reported");
        rp_fmt_metric_at(busy, sizeof busy, run, "busy_fraction");
        snprintf(line, sizeof line, "%.2f× (device step time %s than cpu, device busy %s)", sp, red,
                 busy);
        md_row(b, what, line);
    }
}

static void md_key_memory(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *g = rp_obj(rec, "soak.soak.growth");
    if (!g)
        return;
    static const char *const src[] = {"allocator_allocated", "allocator_reserved", "driver",
                                      "footprint"};
    static const char *const names[] = {"allocator allocated", "allocator reserved", "driver",
                                        "footprint"};
    char line[256] = "";
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        char v[48];
        double x;
        if (rp_num(g, src[i], &x))
            snprintf(v, sizeof v, "%+.1f%%", x);
        else
            snprintf(v, sizeof v, "not reported");
        off += (size_t)snprintf(line + off, off < sizeof line ? sizeof line - off : 0, "%s%s %s",
                                i ? " · " : "", names[i], v);
    }
    double epochs;
    char what[80];
    if (rp_num(rec, "soak.soak.epochs_recorded", &epochs))
        snprintf(what, sizeof what, "memory growth over %.0f epochs (threshold %.0f%%)", epochs,
                 rp_mem_growth_pct(rec));
    else
        snprintf(what, sizeof what, "memory growth (threshold %.0f%%)", rp_mem_growth_pct(rec));
    md_row(b, what, line);
}

/* A supervised run's command and how it ended. */
static void md_key_supervise(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *cmd = rp_supervise_command(rec);
    if (!cmd)
        return;
    rp_put(b, "| supervised command | ");
    rp_command(b, ESC_MD, cmd);
    double st;
    if (rp_num(rec, "supervise.exit_status", &st) || rp_num(rec, "supervise.exit_code", &st))
        rp_printf(b, " (exit %.0f)", st);
    if (rp_str(rec, "supervise.signal")) {
        rp_put(b, " (signal ");
        md_str(b, rp_str(rec, "supervise.signal"), "");
        rp_put(b, ")");
    }
    rp_put(b, " |\n");
}

static void md_key_numbers(dg_capbuf *b, const cJSON *rec)
{
    rp_put(b, "### Key numbers\n\n| | |\n|---|---|\n");
    md_key_supervise(b, rec);
    md_key_sweep(b, rec);
    md_key_compare(b, rec);
    md_key_memory(b, rec);
    const cJSON *g = rp_obj(rec, "final_gate");
    if (g) {
        char v[64], line[128];
        double batch;
        rp_fmt_metric_at(v, sizeof v, g, "throughput");
        if (rp_num(g, "batch", &batch))
            snprintf(line, sizeof line, "%s at batch %.0f", v, batch);
        else
            snprintf(line, sizeof line, "%s", v);
        md_row(b, "promised throughput", line);
        const cJSON *m;
        bool first = true;
        cJSON_ArrayForEach(m, rp_arr(g, "missing"))
        {
            if (!cJSON_IsString(m))
                continue;
            rp_put(b, first ? "| missing proofs | " : ", ");
            md_str(b, m->valuestring, "");
            first = false;
        }
        if (!first)
            rp_put(b, " |\n");
    }
    rp_put(b, "\n");
}

static void md_footer(dg_capbuf *b, const cJSON *rec)
{
    const char *dir = rp_str(rec, "pack.dir");
    if (dir) {
        rp_put(b, "Evidence pack: ");
        md_str(b, dir, "");
        rp_put(b, "\n\n");
    }
    rp_put(b,
           "<sub>devgate " DG_VERSION " · `devgate report RUN_ID` renders the full page</sub>\n");
}

void rp_render_md(dg_capbuf *b, const cJSON *rec)
{
    md_header(b, rec);
    md_decision(b, rec);
    md_steps(b, rec);
    md_findings(b, rec);
    md_key_numbers(b, rec);
    md_footer(b, rec);
}
