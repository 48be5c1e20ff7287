/* The report page: one self-contained HTML file (no script, no network: a
 * Content-Security-Policy forbids both), readable on a phone and in print.
 * Sections in the order of docs/report.md; charts are inline SVG drawn in
 * svg.c. Every record string goes through ESC_HTML. */
#include "report/html_env.h"
#include "report/html_run.h"
#include "report/html_slo.h"
#include "report/html_write.h"
#include "report/render.h"
#include "report/svg.h"

#include <string.h>

static const char page_css[] =
    ":root{--ok:#1a7f37;--warn:#9a6700;--fail:#cf222e;--info:#0969da;--mute:#57606a;--line:#d0d7de}"
    "*{box-sizing:border-box}"
    "body{margin:0 auto;max-width:1100px;padding:12px;font:15px/1.45 system-ui,-apple-system,"
    "'Segoe UI',Roboto,sans-serif;color:#1f2328;background:#fff;overflow-wrap:break-word}"
    "h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .5em;"
    "border-bottom:1px solid var(--line);padding-bottom:.2em}h3{font-size:1em;margin:1em 0 .4em}"
    ".meta{color:var(--mute);font-size:.9em}"
    ".banner{border:2px solid;border-radius:8px;padding:12px 16px;margin:8px 0}"
    ".banner.ok{border-color:var(--ok);background:#dafbe1}.banner.bad{border-color:var(--fail);"
    "background:#ffebe9}.banner.none{border-color:var(--mute);background:#f6f8fa}"
    ".verdict{font-size:1.5em;font-weight:700}.proofs{list-style:none;padding:0;margin:.5em 0;"
    "display:flex;flex-wrap:wrap;gap:6px 18px}.yes{color:var(--ok);font-weight:700}"
    ".no{color:var(--fail);font-weight:700}"
    ".scroll{overflow-x:auto;margin:.4em 0}"
    "table{border-collapse:collapse;font-size:.9em;min-width:50%}"
    "th,td{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}"
    "th{background:#f6f8fa;white-space:nowrap}td.wide{min-width:22em;overflow-wrap:anywhere}td.n{"
    "text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "tr.fallback td{background:#fff8c5}tr.failed td{background:#ffebe9}"
    ".sev{display:inline-block;min-width:3.2em;text-align:center;border-radius:4px;color:#fff;"
    "font-size:.8em;font-weight:700;padding:1px 5px;text-transform:uppercase}"
    ".sev.fail{background:var(--fail)}.sev.warn{background:var(--warn)}.sev.info{background:var(--"
    "info)}"
    ".sev.pass{background:var(--ok)}.sev.none{background:var(--mute)}"
    ".finding{border-left:4px solid var(--line);padding:4px 12px;margin:10px 0}"
    ".finding.fail{border-color:var(--fail)}.finding.warn{border-color:var(--warn)}"
    ".finding.info{border-color:var(--info)}.finding p{margin:.3em 0}"
    ".na{color:var(--mute);font-style:italic}.note{color:var(--mute);font-size:.9em}"
    "svg{width:100%;height:auto;display:block;max-width:860px}"
    "svg text{font:11px system-ui,sans-serif;fill:#1f2328}svg .ax{stroke:#8c959f;stroke-width:1}"
    "svg .grid{stroke:#eaeef2;stroke-width:1}svg .t{font-size:12px;font-weight:600}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:12px}"
    "code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.88em}"
    "@media (max-width:600px){body{font-size:14px;padding:8px}.verdict{font-size:1.25em}}"
    "@media print{body{max-width:none;font-size:11px}.banner{break-inside:avoid}"
    "section{break-inside:avoid-page}.scroll{overflow:visible}svg{max-width:100%}"
    "a{color:inherit;text-decoration:none}}";

/* ---- page ------------------------------------------------------------------ */

static void page_begin(dg_capbuf *b, const dg_record_view *v)
{
    dg_rp_put(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                 "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                 "style-src 'unsafe-inline'; img-src data:\">\n"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                 "<meta name=\"generator\" content=\"devgate " DG_VERSION "\">\n<title>devgate ");
    dg_rp_h_esc(b, v->kind, "");
    dg_rp_put(b, " ");
    dg_rp_h_esc(b, v->run_id, "(not recorded)");
    dg_rp_opt(b, ESC_HTML, " · ", v->label, "");
    dg_rp_put(b, "</title>\n<style>");
    dg_rp_put(b, page_css);
    dg_rp_h_fmt(b,
                "</style></head>\n<body>\n<header><h1>devgate %S · run <span "
                "class=\"mono\">%S</span></h1>\n<p class=\"meta\">host %S · %S",
                v->kind, "", v->run_id, "(not recorded)", v->host, "unknown", v->timestamp,
                "no time");
    static const char *const marks[3][2] = {{" · bucket <span class=\"mono\">", "</span>"},
                                            {" · label <b>", "</b>"},
                                            {" · state <b class=\"no\">", "</b>"}};
    dg_rp_head_facts(b, ESC_HTML, v, marks);
    dg_rp_put(b, "</p></header>\n<main>\n");
}

static void page_end(dg_capbuf *b)
{
    dg_rp_put(b, "</main>\n<footer><p class=\"note\">Rendered by devgate " DG_VERSION
                 " from the evidence record (docs/schema/report.md). Values the run could not "
                 "measure are shown as <span class=\"na\">not reported</span>, never as 0.</p>"
                 "</footer>\n</body></html>\n");
}

/* ---- verdict banner and steps ----------------------------------------------- */

/* A verb's own record has no final gate or decision: its banner is its
 * verdict and its one line. */
static void sec_verb_banner(dg_capbuf *b, const dg_record_view *v)
{
    const char *verdict = dg_rp_verb_verdict(v);
    bool good = verdict && (!strcmp(verdict, "pass") || !strcmp(verdict, "ok"));
    dg_rp_printf(b, "<section id=\"verdict\" class=\"banner %s\">\n<div class=\"verdict\">",
                 good      ? "ok"
                 : verdict ? "bad"
                           : "none");
    dg_rp_h_esc(b, v->kind, "?");
    dg_rp_put(b, ": ");
    dg_rp_h_esc(b, verdict, "recorded");
    char sum[1024];
    dg_rp_verb_summary(sum, sizeof sum, v);
    dg_rp_put(b, "</div>\n<p>");
    dg_rp_prose(b, ESC_HTML, sum, "");
    if (v->kind && !strcmp(v->kind, "slo"))
        dg_rp_put(b, "</p>\n<p class=\"note\">the statement is this record's final gate: "
                     "<code>devgate slo</code> exits 0 when it is signed</p>\n</section>\n");
    else
        dg_rp_put(b, "</p>\n<p class=\"note\">the record of one verb: the decision and the final "
                     "gate are <code>devgate accept</code>'s</p>\n</section>\n");
}

static void sec_banner(dg_capbuf *b, const dg_record_view *v)
{
    const dg_view_final_gate *g = &v->final_gate;
    bool accepted = g->accepted == 1;
    dg_rp_printf(b,
                 "<section id=\"verdict\" class=\"banner %s\">\n<div class=\"verdict\">%s</div>\n",
                 !g->present ? "none"
                 : accepted  ? "ok"
                             : "bad",
                 !g->present ? "no final gate recorded"
                 : accepted  ? "✓ accepted"
                             : "✗ not accepted");
    if (g->present) {
        dg_rp_put(b, "<p><b>");
        dg_rp_prose(b, ESC_HTML, g->statement, accepted ? "accepted" : "not accepted");
        dg_rp_put(b, "</b></p>\n<ul class=\"proofs\">");
        static const char *const names[] = {"architecture proof", "device gate log", "batch sweep",
                                            "memory curve"};
        for (int i = 0; i < 4; i++) {
            bool yes = g->proofs[i] == 1;
            dg_rp_printf(b, "<li><span class=\"%s\">%s</span> %s</li>", yes ? "yes" : "no",
                         yes ? "✓" : "✗", names[i]);
        }
        dg_rp_put(b, "</ul>\n");
        const cJSON *missing = g->missing;
        if (cJSON_GetArraySize(missing) > 0) {
            dg_rp_put(b, "<p>missing: ");
            dg_rp_h_join(b, missing, ", ");
            dg_rp_put(b, "</p>\n");
        }
        char val[64];
        dg_rp_fmt_view_metric(val, sizeof val, g->throughput);
        dg_rp_put(b, "<p>throughput ");
        dg_rp_h_val(b, val);
        if (g->energy_per_sample.valid)
            dg_rp_printf(b, " · %.3g J/sample", g->energy_per_sample.value);
        if (g->batch.valid)
            dg_rp_printf(b, " at batch %.0f", g->batch.value);
        if (g->safe_batch.valid) {
            dg_rp_printf(b, " · safe batch %.0f", g->safe_batch.value);
            if (g->safe_bound) {
                dg_rp_put(b, " (");
                dg_rp_h_val(b, g->safe_bound);
                dg_rp_put(b, ")");
            }
        }
        if (g->fail_findings.valid)
            dg_rp_printf(b, " · %.0f fail finding%s", g->fail_findings.value,
                         g->fail_findings.value == 1 ? "" : "s");
        dg_rp_put(b, "</p>\n");
    }
    dg_rp_put(b, "<p><b>decision:</b> ");
    dg_rp_decision(b, ESC_HTML, &v->decision, "<span class=\"na\">none recorded</span>",
                   dg_rp_h_scalar);
    dg_rp_put(b, "</p>\n</section>\n");
}

static const char *verdict_class(const char *v)
{
    if (!v)
        return "none";
    if (strcmp(v, "pass") == 0 || strcmp(v, "warn") == 0 || strcmp(v, "fail") == 0 ||
        strcmp(v, "info") == 0)
        return v;
    return "none";
}

static void sec_steps(dg_capbuf *b, const dg_record_view *v)
{
    if (!dg_rp_section(b, "steps", "Steps", v->nsteps > 0, "steps"))
        return;
    dg_rp_table_open(b, "<tr><th>step</th><th>verdict</th><th>summary</th><th>status</th><th>wall</"
                        "th><th>share</th></tr>");
    for (int i = 0; i < v->nsteps; i++) {
        const dg_view_step *s = &v->steps[i];
        char wall[64], share[64];
        dg_rp_put(b, "<tr><td>");
        dg_rp_h_esc(b, s->name, "?");
        dg_rp_printf(b, "</td><td><span class=\"sev %s\">", verdict_class(s->verdict));
        dg_rp_h_esc(b, s->verdict, "–");
        dg_rp_put(b, "</span></td><td>");
        dg_rp_prose(b, ESC_HTML, s->summary, "");
        dg_rp_opt(b, ESC_HTML, "<br><span class=\"no\">error:</span> ", s->error, "");
        dg_rp_put(b, "</td><td>");
        dg_rp_h_esc(b, s->status, "?");
        dg_rp_put(b, "</td><td class=\"n\">");
        dg_rp_fmt_view_metric(wall, sizeof wall, s->wall);
        dg_rp_h_val(b, wall);
        dg_rp_put(b, "</td><td class=\"n\">");
        dg_rp_fmt_view_metric(share, sizeof share, s->share);
        dg_rp_h_val(b, share);
        dg_rp_put(b, "</td></tr>\n");
    }
    dg_rp_table_close(b);
    dg_capbuf line = {.cap = 4096};
    if (dg_rp_launch(&line, ESC_HTML, v->rec) && line.data)
        dg_rp_printf(b, "<p class=\"launch\">runs: %s</p>\n", line.data);
    dg_free(line.data);
    dg_rp_put(b, "</section>\n");
}

/* ---- findings ---------------------------------------------------------------- */

static void finding_evidence(dg_capbuf *b, const cJSON *f)
{
    const cJSON *ev = dg_rp_arr(f, "evidence");
    if (cJSON_GetArraySize(ev) == 0)
        return;
    dg_rp_table_open(b, "<tr><th>evidence</th><th>value</th><th>source</th></tr>");
    const cJSON *e;
    cJSON_ArrayForEach(e, ev)
    {
        dg_rp_row_begin(b, "<tr><td class=\"mono\">", dg_rp_str(e, "field"),
                        "</td><td class=\"n\">");
        const cJSON *v = dg_rp_get(e, "value");
        dg_rp_h_scalar(b, v);
        if (v && !cJSON_IsNull(v))
            dg_rp_opt(b, ESC_HTML, " ", dg_rp_str(e, "unit"), "");
        dg_rp_h_fmt(b, "</td><td>%S</td></tr>\n", dg_rp_str(e, "section"), "?");
    }
    dg_rp_table_close(b);
}

static void sec_findings(dg_capbuf *b, const dg_record_view *v)
{
    dg_rp_section_open(b, "findings", "Findings");
    int n;
    const dg_view_finding **fs = dg_rp_findings_sorted(v, &n);
    if (n == 0)
        dg_rp_put(b, "<p>No findings: no rule fired on this record.</p>\n");
    for (int i = 0; i < n; i++) {
        const char *sev = verdict_class(fs[i]->severity);
        dg_rp_printf(b, "<div class=\"finding %s\"><p><span class=\"sev %s\">", sev, sev);
        dg_rp_h_fmt(b, "%S</span> <b class=\"mono\">%S</b> ", fs[i]->severity, "?", fs[i]->id, "?");
        dg_rp_prose(b, ESC_HTML, fs[i]->title, "");
        dg_rp_put(b, "</p>\n");
        finding_evidence(b, fs[i]->json);
        dg_rp_opt(b, ESC_HTML, "<p><b>hypothesis:</b> ", fs[i]->hypothesis, "</p>\n");
        dg_rp_opt(b, ESC_HTML, "<p><b>→ action:</b> ", fs[i]->action, "</p>\n");
        dg_rp_put(b, "</div>\n");
    }
    dg_free(fs);
    dg_rp_put(b, "</section>\n");
}

/* ---- batch sweep --------------------------------------------------------------- */

static void sweep_trial_row(dg_capbuf *b, const dg_view_trial *t, bool bisect)
{
    bool ok = t->ended && strcmp(t->ended, "ok") == 0;
    dg_rp_printf(b, "<tr%s><td class=\"n\">%.0f%s</td><td>", ok ? "" : " class=\"failed\"",
                 t->batch.valid ? t->batch.value : 0, bisect ? " (bisect)" : "");
    dg_rp_h_esc(b, t->ended, "?");
    dg_rp_opt(b, ESC_HTML, " ", t->signal, "");
    if (t->budget == 1)
        dg_rp_put(b, " (budget)");
    dg_rp_opt(b, ESC_HTML, "<br><span class=\"note\">", t->reason, "</span>");
    const dg_rec_metric cols[] = {
        t->samples_per_s,        t->step_median, t->step_iqr,    t->device_allocated_peak,
        t->device_reserved_peak, t->rss_peak,    t->swap_growth, t->wall_s};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        dg_rp_put(b, "</td><td class=\"n\">");
        dg_rp_h_view_metric(b, cols[i]);
    }
    dg_rp_put(b, "</td></tr>\n");
}

/* A batch (fmt, trusted markup with one %.0f and the opening parenthesis)
 * and its rate in parentheses; "not reported" when the batch is not. */
static void batch_rate(dg_capbuf *b, const char *fmt, dg_rec_metric batch, dg_rec_metric sps)
{
    if (batch.valid)
        dg_rp_printf(b, fmt, batch.value);
    else
        dg_rp_put(b, "<span class=\"na\">not reported</span> (");
    dg_rp_h_view_metric(b, sps);
    dg_rp_put(b, ")");
}

static void sec_sweep(dg_capbuf *b, const dg_view_sweep *sw)
{
    if (!dg_rp_section(b, "sweep", "Batch sweep", sw->present, "batch sweep"))
        return;
    dg_rp_svg_sweep(b, sw);
    dg_rp_put(b, "<p>knee: ");
    batch_rate(b, "batch <b>%.0f</b> (", sw->knee_batch, sw->knee_sps);
    dg_rp_put(b, " · safe batch: ");
    batch_rate(b, "<b>%.0f</b> (", sw->safe_batch, sw->safe_sps);
    dg_rp_opt(b, ESC_HTML, ", ", sw->safe_note, "");
    dg_rp_put(b, " · stopped: ");
    dg_rp_h_esc(b, sw->stopped_reason, "not reported");
    if (sw->stopped_at.valid)
        dg_rp_printf(b, " at batch %.0f", sw->stopped_at.value);
    dg_rp_put(b, " · memory budget ");
    dg_rp_h_view_metric(b, sw->mem_budget);
    dg_rp_opt(b, ESC_HTML, " (", sw->mem_budget_source, ")");
    dg_rp_put(b, "</p>\n");
    dg_rp_table_open(
        b, "<tr><th>batch</th><th>ended</th><th>samples/s</th><th>step ms</th><th>IQR</th>"
           "<th>device allocated</th><th>device reserved</th><th>RSS peak</th><th>swap growth</th>"
           "<th>wall</th></tr>");
    for (int i = 0; i < sw->ntrials; i++)
        sweep_trial_row(b, &sw->trials[i], false);
    for (int i = 0; i < sw->nbisect; i++)
        sweep_trial_row(b, &sw->bisect[i], true);
    dg_rp_table_close(b);
    dg_rp_put(b, "</section>\n");
}

/* ---- memory curve ---------------------------------------------------------------- */

static void sec_memory(dg_capbuf *b, const dg_record_view *v)
{
    const dg_view_soak *s = &v->soak;
    if (!dg_rp_section(b, "memory", "Memory curve", s->present && s->nepochs > 0,
                       s->present ? "per-epoch watermarks" : "soak (memory curve)"))
        return;
    dg_rp_svg_memory(b, dg_rp_mem_growth_pct(v), s);
    dg_rp_put(b, "<p>growth over the baseline (end of epoch 0): ");
    static const char *const names[DG_MEM_COUNT] = {"allocator allocated", "allocator reserved",
                                                    "driver", "footprint"};
    for (int i = 0; i < DG_MEM_COUNT; i++) {
        char val[48];
        if (s->growth[i].valid)
            snprintf(val, sizeof val, "%+.1f%%", s->growth[i].value);
        else
            snprintf(val, sizeof val, "not reported");
        dg_rp_printf(b, "%s%s ", i ? " · " : "", names[i]);
        dg_rp_h_val(b, val);
    }
    dg_rp_printf(b, " · threshold %.0f%%", dg_rp_mem_growth_pct(v));
    dg_rp_put(b, " · staircase ");
    dg_rp_put(b, s->staircase_aligned == 1   ? "aligned with validation (a working-set change)"
                 : s->staircase_aligned == 0 ? "not aligned with validation"
                                             : "none");
    dg_rp_put(b, s->empty_cache == 1 ? " · cache emptied at every epoch end" : " · cache kept");
    dg_rp_put(b, "</p>\n");
    dg_rp_table_open(
        b, "<tr><th>epoch</th><th>allocated</th><th>reserved</th><th>driver</th><th>footprint</th>"
           "<th>cache emptied</th><th>validation</th><th>step ms</th><th>samples/s</th></tr>");
    for (int k = 0; k < s->nepochs; k++) {
        const dg_view_epoch *e = &s->epochs[k];
        dg_rp_printf(b, "<tr><td class=\"n\">%.0f</td>", e->epoch.valid ? e->epoch.value : 0);
        const dg_rec_metric cols[] = {e->allocated, e->reserved, e->driver_used, e->rss};
        for (int i = 0; i < 4; i++) {
            dg_rp_put(b, "<td class=\"n\">");
            dg_rp_h_view_metric(b, cols[i]);
            dg_rp_put(b, "</td>");
        }
        dg_rp_printf(b, "<td>%s</td><td>%s</td><td class=\"n\">",
                     e->cache_emptied == 1 ? "yes" : "no", e->validation == 1 ? "yes" : "no");
        dg_rp_h_fmt(b, "%M</td><td class=\"n\">%M</td></tr>\n", e->step_ms, e->samples_per_s);
    }
    dg_rp_table_close(b);
    dg_rp_put(b, "</section>\n");
}

/* ---- baseline: cpu against the device ---------------------------------------------- */

static void sec_baseline(dg_capbuf *b, const dg_record_view *v)
{
    const dg_view_compare *cmp = &v->compare;
    if (!dg_rp_section(b, "baseline", "Baseline: cpu against the device", cmp->present,
                       "comparison with the cpu"))
        return;
    dg_rp_svg_baseline(b, cmp);
    dg_rp_table_open(
        b, "<tr><th>batch</th><th>cpu step</th><th>device step</th><th>speedup</th>"
           "<th>step time reduction</th><th>device busy</th><th>loss vs float64 (device)</th>"
           "<th>param drift (device vs float64)</th><th>fallbacks</th><th>verdict</th></tr>");
    for (int k = 0; k < cmp->nruns; k++) {
        const dg_view_run *r = &cmp->runs[k];
        bool failed = r->failed != NULL;
        dg_rp_printf(b, "<tr%s><td class=\"n\">%.0f</td>", failed ? " class=\"failed\"" : "",
                     r->batch.valid ? r->batch.value : 0);
        if (failed) {
            dg_rp_h_fmt(b, "<td colspan=\"9\">failed on %S: %S</td></tr>\n", r->failed, "?",
                        r->error, "");
            continue;
        }
        const dg_rec_metric cols[] = {r->cpu_step_ms,
                                      r->device_step_ms,
                                      r->speedup,
                                      r->reduction_pct,
                                      r->busy_fraction,
                                      r->loss_vs_ref_device,
                                      r->param_drift_device_vs_ref,
                                      r->device_fallbacks};
        for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
            dg_rp_put(b, "<td class=\"n\">");
            dg_rp_h_view_metric(b, cols[i]);
            dg_rp_put(b, "</td>");
        }
        dg_rp_put(b, "<td>");
        char loss[320];
        if (dg_rp_loss_check(loss, sizeof loss, r->json)) /* accept -- CMD: cpu against device */
            dg_rp_h_esc(b, loss, "");
        else
            dg_rp_h_esc(b, r->verdict, "?");
        if (cJSON_GetArraySize(r->drift) > 0) {
            dg_rp_put(b, ": ");
            dg_rp_h_join(b, r->drift, ", ");
        }
        dg_rp_put(b, "</td></tr>\n");
    }
    dg_rp_table_close(b);
    dg_rp_put(b, "<p class=\"note\">device ");
    dg_rp_h_esc(b, cmp->device_name, "not reported");
    dg_rp_put(b, " · speedup = cpu step time / device step time");
    dg_rp_put(b, dg_rp_unfair_note(v));
    bool cmd_losses = false; /* accept -- CMD: its sides' losses, no float64 reference */
    for (int k = 0; k < cmp->nruns; k++)
        cmd_losses = cmd_losses || dg_rp_obj(cmp->runs[k].json, "loss");
    dg_rp_put(b, " · busy = device time of forward, backward and update over the device step · ");
    if (cmd_losses) {
        dg_rp_put(b, "the loss check holds the device side's losses against the cpu side's at "
                     "the steps both reported</p>\n</section>\n");
        return;
    }
    dg_rp_put(b, "drift against the float64 reference (loss tolerance ");
    dg_rp_h_fmt(b, "%M, parameter tolerance %M)</p>\n</section>\n", cmp->loss_tolerance,
                cmp->param_tolerance);
}

/* ---- profile ------------------------------------------------------------------------ */

/* Orders op rows by total time, largest first (not reported last). */
static int op_share_cmp(const dg_view_op *a, const dg_view_op *b)
{
    double x = a->ms_total.valid ? a->ms_total.value : -1;
    double y = b->ms_total.valid ? b->ms_total.value : -1;
    return (x < y) - (x > y);
}

#define TOP_OPS 15

static void profile_ops(dg_capbuf *b, const dg_view_profile *prof)
{
    int n = prof->nops;
    if (n <= 0) {
        dg_rp_put(b, "<p class=\"na\">No per-op table in this record.</p>\n");
        return;
    }
    const dg_view_op *top[TOP_OPS];
    int k = 0;
    for (int i = 0; i < n; i++) {
        const dg_view_op *o = &prof->ops[i];
        /* Keep the TOP_OPS largest by total time, in order (insertion). */
        int j = k < TOP_OPS ? k++ : TOP_OPS;
        if (j == TOP_OPS && op_share_cmp(o, top[TOP_OPS - 1]) >= 0)
            continue;
        if (j == TOP_OPS)
            j = TOP_OPS - 1;
        while (j > 0 && op_share_cmp(o, top[j - 1]) < 0) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = o;
    }
    dg_rp_printf(b, "<h3>Top ops (%d of %d rows; profiled pass, each op timed in isolation)</h3>\n",
                 k, n);
    dg_rp_table_open(b,
                     "<tr><th>op</th><th>shape</th><th>backend</th><th>calls</th><th>total ms</th>"
                     "<th>mean ms</th><th>share</th></tr>");
    for (int i = 0; i < k; i++) {
        bool fb = top[i]->fallback == 1;
        dg_rp_printf(b, "<tr%s><td class=\"mono\">", fb ? " class=\"fallback\"" : "");
        dg_rp_h_esc(b, top[i]->op, "?");
        dg_rp_put(b, fb ? " <b>FALLBACK</b>" : "");
        dg_rp_h_fmt(b,
                    "</td><td class=\"mono\">%S</td><td>%S</td><td class=\"n\">%M</td><td "
                    "class=\"n\">%M</td><td class=\"n\">%M</td><td class=\"n\">",
                    top[i]->shape, "", top[i]->backend, "?", top[i]->calls, top[i]->ms_total,
                    top[i]->ms_mean);
        char v[32];
        if (top[i]->share.valid)
            snprintf(v, sizeof v, "%.1f%%", 100 * top[i]->share.value);
        else
            snprintf(v, sizeof v, "not reported");
        dg_rp_h_val(b, v);
        dg_rp_put(b, "</td></tr>\n");
    }
    dg_rp_table_close(b);
}

static void sec_profile(dg_capbuf *b, const dg_view_profile *prof)
{
    if (!dg_rp_section(b, "profile", "Profile", prof->present, "profile"))
        return;
    dg_rp_h_fmt(b, "<p>step %M (median, unprofiled) · profiled %M", prof->step_ms,
                prof->profiled_ms);
    if (prof->window_steps.valid)
        dg_rp_printf(b, " · window %.0f steps", prof->window_steps.value);
    dg_rp_h_fmt(b, " · sync points per step %M · noise %S</p>\n", prof->sync_per_step, prof->noise,
                "not reported");
    dg_rp_svg_phases(b, prof);
    profile_ops(b, prof);
    dg_rp_h_fmt(b, "<p>bytes in the window: h2d %M · d2h %M · fallback copies %M up, %M down</p>\n",
                prof->bytes_h2d, prof->bytes_d2h, prof->bytes_fallback_h2d,
                prof->bytes_fallback_d2h);
    dg_rp_opt(b, ESC_HTML, "<p class=\"note\">", prof->note, "</p>\n");
    dg_rp_put(b, "</section>\n");
}

/* ---- fallback census ---------------------------------------------------------------- */

static void census_table(dg_capbuf *b, const dg_view_fallback *arr, int n, const char *from)
{
    dg_rp_put(b, "<h3>from ");
    dg_rp_put(b, from);
    dg_rp_put(b, "</h3>\n");
    dg_rp_table_open(b, "<tr><th>op</th><th>shape</th><th>backend</th><th>reason</th><th>calls</th>"
                        "<th>ms</th><th>bytes d2h</th><th>bytes h2d</th></tr>");
    for (int k = 0; k < n; k++) {
        const dg_view_fallback *f = &arr[k];
        dg_rp_h_fmt(b,
                    "<tr class=\"fallback\"><td class=\"mono\">%S</td><td "
                    "class=\"mono\">%S</td><td>%S</td><td>%S",
                    f->op, "?", f->shape, "", f->backend, "?", f->reason, "");
        const dg_rec_metric cols[] = {f->calls, f->ms_total, f->bytes_d2h, f->bytes_h2d};
        for (int i = 0; i < 4; i++) {
            dg_rp_put(b, "</td><td class=\"n\">");
            char t[48];
            if (i >= 2 && cols[i].valid)
                dg_rp_fmt_bytes(t, sizeof t, cols[i].value, true);
            else
                dg_rp_fmt_view_metric(t, sizeof t, cols[i]);
            dg_rp_h_val(b, t);
        }
        dg_rp_put(b, "</td></tr>\n");
    }
    dg_rp_table_close(b);
}

static void sec_fallbacks(dg_capbuf *b, const dg_record_view *v)
{
    dg_rp_section_open(b, "fallbacks", "Fallback census");
    const struct {
        bool held;
        const dg_view_fallback *arr;
        int n;
        const char *name;
    } censuses[] = {
        {v->profile.fallbacks != NULL, v->profile.census, v->profile.nfallbacks, "the profile"},
        {v->soak.has_census, v->soak.census, v->soak.ncensus, "the soak"},
    };
    bool any_section = false, any = false;
    for (size_t i = 0; i < sizeof censuses / sizeof censuses[0]; i++) {
        if (!censuses[i].held)
            continue;
        any_section = true;
        if (censuses[i].n == 0)
            continue;
        any = true;
        census_table(b, censuses[i].arr, censuses[i].n, censuses[i].name);
    }
    for (int i = 0; i < v->compare.nruns; i++) {
        const dg_view_run *r = &v->compare.runs[i];
        if (r->device_fallbacks.valid && r->batch.valid) {
            any_section = true;
            if (r->device_fallbacks.value > 0) {
                any = true;
                dg_rp_printf(b, "<p>compare, batch %.0f: %.0f ops fell back to the cpu</p>\n",
                             r->batch.value, r->device_fallbacks.value);
            }
        }
    }
    if (!any_section)
        dg_rp_section_absent(b, "fallback census");
    else if (!any)
        dg_rp_put(b,
                  "<p><span class=\"yes\">✓</span> No op fell back to the cpu in the sections that "
                  "keep a census.</p>\n");
    dg_rp_put(b, "</section>\n");
}

/* ---- supervised run ---------------------------------------------------------------------- */

static void sec_supervise(dg_capbuf *b, const dg_record_view *v)
{
    const cJSON *sup = v->section[DG_SEC_SUPERVISE];
    const cJSON *cmd = dg_rp_supervise_command(v);
    if (!sup && !cmd)
        return;
    dg_rp_section_open(b, "supervise", "Supervised run");
    dg_rp_table_open(b, NULL);
    dg_rp_kv_begin(b, "command");
    if (cmd) {
        dg_rp_put(b, "<span class=\"mono\">");
        dg_rp_command(b, ESC_HTML, cmd);
        dg_rp_put(b, "</span>");
    } else {
        dg_rp_put(b, "<span class=\"na\">not reported</span>");
    }
    dg_rp_kv_end(b);
    if (dg_rp_get(sup, "exit_status"))
        dg_rp_kv_metric(b, "exit_status", sup, "exit_status");
    if (dg_rp_get(sup, "signal"))
        dg_rp_kv_metric(b, "signal", sup, "signal");
    dg_rp_table_close(b);
    if (sup) {
        dg_rp_put(b, "<h3>All facts of the section</h3>\n");
        dg_rp_h_generic(b, sup, 3);
    }
    dg_rp_put(b, "</section>\n");
}

/* ---- entry ----------------------------------------------------------------------------- */

void dg_rp_render_html(dg_capbuf *b, const dg_record_view *v)
{
    /* Sections not yet read through the view take the record itself. */
    const cJSON *rec = v->rec;
    page_begin(b, v);
    if (dg_rp_verb_record(v)) {
        /* A verb's own record is one section: the page shows what it has. */
        sec_verb_banner(b, v);
        if (v->nfindings > 0)
            sec_findings(b, v);
        dg_rp_sec_slo(b, v);
        if (v->sweep.present)
            sec_sweep(b, &v->sweep);
        if (v->soak.present)
            sec_memory(b, v);
        if (v->compare.present)
            sec_baseline(b, v);
        if (v->profile.present)
            sec_profile(b, &v->profile);
        if (v->soak.present || v->profile.present)
            sec_fallbacks(b, v);
        if (v->listed[DG_SEC_ENV])
            dg_rp_sec_environment(b, rec);
        if (v->gate.present)
            dg_rp_sec_gate(b, &v->gate);
        if (dg_rp_bucket_id(rec))
            dg_rp_sec_bucket(b, rec);
        page_end(b);
        return;
    }
    sec_banner(b, v);
    sec_steps(b, v);
    sec_findings(b, v);
    sec_sweep(b, &v->sweep);
    sec_memory(b, v);
    sec_baseline(b, v);
    sec_profile(b, &v->profile);
    sec_fallbacks(b, v);
    sec_supervise(b, v);
    dg_rp_sec_run_series(b, v);
    dg_rp_sec_environment(b, rec);
    dg_rp_sec_gate(b, &v->gate);
    dg_rp_sec_bucket(b, rec);
    dg_rp_sec_seeds(b, rec);
    dg_rp_sec_versions(b, rec);
    dg_rp_sec_thresholds(b, rec);
    dg_rp_sec_pack(b, rec);
    page_end(b);
}
