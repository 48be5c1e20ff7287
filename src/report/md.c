/* The Markdown report for a merge request: verdict, decision, steps, findings
 * and the key numbers. Every record string goes through ESC_MD: Markdown and
 * HTML specials are backslash-escaped (| included, for table cells) and
 * newlines flattened, so a record cannot add markup, links or rows. */
#include "report/render.h"

#include <string.h>

static void md_str(dg_capbuf *b, const char *s, const char *fallback)
{
    dg_rp_esc(b, ESC_MD, s, fallback);
}

static void md_header(dg_capbuf *b, const dg_record_view *v)
{
    const dg_view_final_gate *g = &v->final_gate;
    dg_rp_fmt(b, ESC_MD, "## devgate %S: ", v->kind, "?");
    if (dg_rp_verb_record(v))
        md_str(b, dg_rp_verb_verdict(v), "recorded");
    else
        dg_rp_put(b, !g->present        ? "no final gate"
                     : g->accepted == 1 ? "✅ accepted"
                                        : "❌ not accepted");
    dg_rp_put(b, "\n\n");
    dg_rp_fmt(b, ESC_MD, "run %S · host %S · %S", v->run_id, "(not recorded)", v->host, "unknown",
              v->timestamp, "no time");
    static const char *const marks[3][2] = {
        {" · bucket ", ""}, {" · label ", ""}, {" · state **", "**"}};
    dg_rp_head_facts(b, ESC_MD, v, marks);
    dg_rp_put(b, "\n\n");
    if (g->present) {
        dg_rp_put(b, "**");
        dg_rp_prose(b, ESC_MD, g->statement, g->accepted == 1 ? "accepted" : "not accepted");
        dg_rp_put(b, "**\n\n");
        static const char *const names[] = {"architecture proof", "device gate log", "batch sweep",
                                            "memory curve"};
        for (int i = 0; i < 4; i++)
            dg_rp_printf(b, "%s%s %s", i ? " · " : "", g->proofs[i] == 1 ? "✓" : "✗", names[i]);
        dg_rp_put(b, "\n\n");
    }
}

static void md_decision(dg_capbuf *b, const dg_record_view *v)
{
    dg_rp_put(b, "**Decision:** ");
    dg_rp_decision(b, ESC_MD, &v->decision, "none recorded", NULL);
    dg_rp_put(b, "\n\n");
}

static void md_steps(dg_capbuf *b, const dg_record_view *v)
{
    if (v->nsteps == 0)
        return;
    dg_rp_put(b, "| step | status | verdict | summary | share |\n|---|---|---|---|---|\n");
    for (int i = 0; i < v->nsteps; i++) {
        const dg_view_step *s = &v->steps[i];
        dg_rp_fmt(b, ESC_MD, "| %S | %S | %S | ", s->name, "?", s->status, "?", s->verdict, "–");
        dg_rp_prose(b, ESC_MD, s->summary, "");
        dg_rp_opt(b, ESC_MD, " (error: ", s->error, ")");
        char share[64];
        dg_rp_fmt_view_metric(share, sizeof share, s->share);
        dg_rp_put(b, " | ");
        md_str(b, share, "");
        dg_rp_put(b, " |\n");
    }
    dg_rp_put(b, "\n");
    dg_capbuf line = {.cap = 4096};
    if (dg_rp_launch(&line, ESC_MD, v->rec) && line.data)
        dg_rp_printf(b, "Runs: %s\n\n", line.data);
    dg_free(line.data);
}

static void md_findings(dg_capbuf *b, const dg_record_view *v)
{
    int n;
    const dg_view_finding **fs = dg_rp_findings_sorted(v, &n);
    dg_rp_put(b, "### Findings\n\n");
    if (n == 0)
        dg_rp_put(b, "None.\n");
    for (int i = 0; i < n; i++) {
        dg_rp_put(b, "- **");
        md_str(b, fs[i]->severity, "?");
        dg_rp_put(b, "** ");
        md_str(b, fs[i]->id, "?");
        dg_rp_put(b, ": ");
        dg_rp_prose(b, ESC_MD, fs[i]->title, "");
        dg_rp_opt(b, ESC_MD, " → ", fs[i]->action, "");
        dg_rp_put(b, "\n");
    }
    dg_rp_put(b, "\n");
    dg_free(fs);
}

static void md_row(dg_capbuf *b, const char *what, const char *value)
{
    dg_rp_printf(b, "| %s | %s |\n", what, value);
}

/* "batch 64 (1234 samples/s)" into line; "not reported" without the batch. */
static void batch_rate(char *line, size_t len, dg_rec_metric batch, dg_rec_metric sps)
{
    char val[64];
    dg_rp_fmt_view_metric(val, sizeof val, sps);
    if (batch.valid)
        snprintf(line, len, "batch %.0f (%s)", batch.value, val);
    else
        snprintf(line, len, "not reported");
}

static void md_key_sweep(dg_capbuf *b, const dg_record_view *v)
{
    const dg_view_sweep *sw = &v->sweep;
    if (!sw->present)
        return;
    char line[160];
    batch_rate(line, sizeof line, sw->knee_batch, sw->knee_sps);
    md_row(b, "knee", line);
    batch_rate(line, sizeof line, sw->safe_batch, sw->safe_sps);
    dg_rp_printf(b, "| safe batch | %s", line);
    dg_rp_opt(b, ESC_MD, ", ", sw->safe_note, "");
    dg_rp_put(b, " |\n| sweep stopped | ");
    md_str(b, sw->stopped_reason, "not reported");
    if (sw->stopped_at.valid)
        dg_rp_printf(b, " at batch %.0f", sw->stopped_at.value);
    dg_rp_put(b, " |\n");
}

static void md_key_compare(dg_capbuf *b, const dg_record_view *v)
{
    for (int i = 0; i < v->compare.nruns; i++) {
        const dg_view_run *run = &v->compare.runs[i];
        char what[64], red[48], busy[48], line[400];
        if (!run->batch.valid)
            continue;
        snprintf(what, sizeof what, "speedup vs cpu, batch %.0f", run->batch.value);
        if (!run->speedup.valid) {
            md_row(b, what, run->speedup.metric ? "not reported" : "run failed");
            continue;
        }
        double r = run->reduction_pct.value;
        if (run->reduction_pct.valid)
            snprintf(red, sizeof red, "%.1f%% %s", r < 0 ? -r : r, r < 0 ? "longer" : "shorter");
        else
            snprintf(red, sizeof red, "not reported");
        dg_rp_fmt_view_metric(busy, sizeof busy, run->busy_fraction);
        /* The interval and the fraction of peak where the record has them. */
        char ci[64] = "", peak[96] = "";
        double lo, hi, fc, fd;
        if (dg_rp_num(run->json, "speedup_ci.lo", &lo) &&
            dg_rp_num(run->json, "speedup_ci.hi", &hi))
            snprintf(ci, sizeof ci, ", 95%% interval %.2f–%.2f×", lo, hi);
        bool pc = dg_rp_num(run->json, "cpu.fraction_of_peak", &fc);
        bool pd = dg_rp_num(run->json, "device.fraction_of_peak", &fd);
        if (pc && pd)
            snprintf(peak, sizeof peak,
                     "; GEMM at %.1f%% of FP32 peak on cpu, %.1f%% on the device", 100 * fc,
                     100 * fd);
        else if (pc || pd)
            snprintf(peak, sizeof peak, "; GEMM at %.1f%% of FP32 peak on %s", 100 * (pc ? fc : fd),
                     pc ? "cpu" : "the device");
        snprintf(line, sizeof line, "%.2f×%s%s (device step time %s than cpu, device busy %s%s)",
                 run->speedup.value, ci, dg_rp_unfair_note(v), red, busy, peak);
        md_row(b, what, line);
        char loss[320];
        if (dg_rp_loss_check(loss, sizeof loss, run->json)) {
            dg_rp_printf(b, "| loss vs cpu, batch %.0f | ", run->batch.value);
            dg_rp_esc(b, ESC_MD, loss, ""); /* its why is the record's */
            dg_rp_put(b, " |\n");
        }
    }
}

static void md_key_memory(dg_capbuf *b, const dg_record_view *v)
{
    if (!dg_rp_obj(v->soak_payload, "growth"))
        return;
    static const char *const names[DG_MEM_COUNT] = {"allocator allocated", "allocator reserved",
                                                    "driver", "footprint"};
    char line[512] = "";
    size_t off = 0;
    for (int i = 0; i < DG_MEM_COUNT; i++) {
        char val[96];
        if (v->soak.growth[i].valid && v->soak.growth_lo[i].valid && v->soak.growth_hi[i].valid)
            snprintf(val, sizeof val, "%+.1f%% (last third 95%% %+.1f to %+.1f%%)",
                     v->soak.growth[i].value, v->soak.growth_lo[i].value,
                     v->soak.growth_hi[i].value);
        else if (v->soak.growth[i].valid)
            snprintf(val, sizeof val, "%+.1f%%", v->soak.growth[i].value);
        else
            snprintf(val, sizeof val, "not reported");
        off += (size_t)snprintf(line + off, off < sizeof line ? sizeof line - off : 0, "%s%s %s",
                                i ? " · " : "", names[i], val);
    }
    char what[80];
    if (v->soak.epochs_recorded.valid)
        snprintf(what, sizeof what, "memory growth over %.0f epochs (threshold %.0f%%)",
                 v->soak.epochs_recorded.value, dg_rp_mem_growth_pct(v));
    else
        snprintf(what, sizeof what, "memory growth (threshold %.0f%%)", dg_rp_mem_growth_pct(v));
    md_row(b, what, line);
}

/* A supervised run's command and how it ended. */
static void md_key_supervise(dg_capbuf *b, const dg_record_view *v)
{
    const cJSON *cmd = dg_rp_supervise_command(v);
    if (!cmd)
        return;
    dg_rp_put(b, "| supervised command | ");
    dg_rp_command(b, ESC_MD, cmd);
    if (v->supervise.exit_status.valid)
        dg_rp_printf(b, " (exit %.0f)", v->supervise.exit_status.value);
    dg_rp_opt(b, ESC_MD, " (signal ", v->supervise.signal, ")");
    dg_rp_put(b, " |\n");
}

static void md_key_numbers(dg_capbuf *b, const dg_record_view *v)
{
    dg_rp_put(b, "### Key numbers\n\n| | |\n|---|---|\n");
    md_key_supervise(b, v);
    md_key_sweep(b, v);
    md_key_compare(b, v);
    md_key_memory(b, v);
    const dg_view_final_gate *g = &v->final_gate;
    if (g->present) {
        char val[64], ceiling[200] = "", line[320];
        dg_rp_fmt_view_metric(val, sizeof val, g->throughput);
        if (g->safe_batch.valid)
            snprintf(ceiling, sizeof ceiling, " (safe batch %.0f%s%s)", g->safe_batch.value,
                     g->safe_bound ? ": " : "", g->safe_bound ? g->safe_bound : "");
        if (g->batch.valid)
            snprintf(line, sizeof line, "%s at batch %.0f%s", val, g->batch.value, ceiling);
        else
            snprintf(line, sizeof line, "%s", val);
        md_row(b, "promised throughput", line);
        const cJSON *m;
        bool first = true;
        cJSON_ArrayForEach(m, v->final_gate.missing)
        {
            if (!cJSON_IsString(m))
                continue;
            dg_rp_put(b, first ? "| missing proofs | " : ", ");
            md_str(b, m->valuestring, "");
            first = false;
        }
        if (!first)
            dg_rp_put(b, " |\n");
    }
    dg_rp_put(b, "\n");
}

static void md_footer(dg_capbuf *b, const dg_record_view *v)
{
    const char *dir = dg_rp_str(v->rec, "pack.dir");
    dg_rp_opt(b, ESC_MD, "Evidence pack: ", dir, "\n\n");
    dg_rp_put(b, "<sub>devgate " DG_VERSION
                 " · `devgate report RUN_ID` renders the full page</sub>\n");
}

void dg_rp_render_md(dg_capbuf *b, const dg_record_view *v)
{
    if (dg_rp_verb_record(v)) {
        /* A verb's own record: its step line and what it has; the decision and
         * the final gate are accept's. */
        char sum[1024];
        dg_rp_verb_summary(sum, sizeof sum, v);
        const char *status = dg_rp_str(v->rec, "status");
        dg_view_step step = {.name = v->kind,
                             .status = status ? status : "ok",
                             .verdict = dg_rp_verb_verdict(v),
                             .summary = sum};
        dg_record_view one = *v;
        one.steps = &step;
        one.nsteps = 1;
        md_header(b, &one);
        md_steps(b, &one);
        if (v->nfindings > 0)
            md_findings(b, v);
        if (v->sweep.present || v->compare.nruns > 0 || dg_rp_obj(v->soak_payload, "growth"))
            md_key_numbers(b, v);
        md_footer(b, v);
        return;
    }
    md_header(b, v);
    md_decision(b, v);
    md_steps(b, v);
    md_findings(b, v);
    md_key_numbers(b, v);
    md_footer(b, v);
}
