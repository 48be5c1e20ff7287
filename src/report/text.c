/* The terminal summary: plain UTF-8, no colour (docs/report.md). One header
 * line, one line per step, the findings with their actions, the decision, the
 * final gate statement and the pack path. Record strings are flattened to one
 * line and stripped of control characters, so they cannot drive a terminal. */
#include "report/render.h"

#include <ctype.h>
#include <string.h>

static void text_header(dg_capbuf *b, const dg_record_view *v)
{
    dg_rp_put(b, "devgate ");
    dg_rp_esc(b, ESC_TEXT, v->kind, "?");
    dg_rp_put(b, " · run ");
    dg_rp_esc(b, ESC_TEXT, v->run_id, "(not recorded)");
    const char *bucket = dg_rp_bucket_id(v->rec);
    if (bucket) {
        char shortid[9];
        snprintf(shortid, sizeof shortid, "%s", bucket);
        dg_rp_put(b, " · bucket ");
        dg_rp_esc(b, ESC_TEXT, shortid, "");
    }
    dg_rp_put(b, " · host ");
    dg_rp_esc(b, ESC_TEXT, v->host, "unknown");
    dg_rp_put(b, "\n");
    const char *label = v->label;
    const char *state = v->state;
    if (label || (state && strcmp(state, "complete") != 0)) {
        dg_rp_put(b, "  ");
        dg_rp_opt(b, ESC_TEXT, "label ", label, "");
        if (state && strcmp(state, "complete") != 0) {
            dg_rp_put(b, label ? " · state " : "state ");
            dg_rp_esc(b, ESC_TEXT, state, "");
        }
        dg_rp_put(b, "\n");
    }
    dg_rp_put(b, "\n");
}

/* The verdict word of a step: PASS, WARN, FAIL, INFO, else its status. */
static void step_word(char *buf, size_t len, const dg_view_step *step)
{
    const char *w = step->verdict;
    if (!w) {
        /* No verdict: a step that did not run to the end says how it ended. */
        static const char *const words[][2] = {
            {"skipped", "SKIP"}, {"interrupted", "STOP"}, {"failed", "FAIL"}, {"ok", "OK"}};
        const char *st = step->status;
        w = st ? st : "?";
        for (size_t k = 0; st && k < sizeof words / sizeof words[0]; k++)
            if (strcmp(st, words[k][0]) == 0)
                w = words[k][1];
    }
    size_t i = 0;
    for (; w[i] && i + 1 < len && i < 5; i++)
        buf[i] = isalpha((unsigned char)w[i]) ? (char)toupper((unsigned char)w[i]) : '?';
    buf[i] = '\0';
}

static void text_step(dg_capbuf *b, const dg_view_step *step)
{
    char name[11], word[6];
    dg_copy_clean(name, sizeof name, step->name ? step->name : "?");
    step_word(word, sizeof word, step);
    dg_rp_put(b, "  ");
    dg_rp_esc(b, ESC_TEXT, name, "");
    dg_rp_printf(b, "%*s", (int)(10 - strlen(name)), "");
    dg_rp_printf(b, "%-5s ", word);
    dg_rp_prose(b, ESC_TEXT, step->summary, "");
    const char *err = step->error;
    dg_rp_opt(b, ESC_TEXT, " (error: ", err, ")");
    dg_rp_put(b, "\n");
}

static void text_steps(dg_capbuf *b, const dg_record_view *v)
{
    for (int i = 0; i < v->nsteps; i++)
        text_step(b, &v->steps[i]);
    dg_capbuf line = {.cap = 4096};
    if (dg_rp_launch(&line, ESC_TEXT, v->rec) && line.data)
        dg_rp_printf(b, "  runs      %s\n", line.data);
    dg_free(line.data);
}

/* One line per finished compare run that carries its repetition statistics or
 * the fraction of peak (records before issue 12 have neither, and keep their
 * summary as it was): the speedup with its 95% interval, each side's GEMM
 * as a share of its FP32 peak, and accept -- CMD's loss check. */
static void text_speedups(dg_capbuf *b, const dg_record_view *v)
{
    bool first = true;
    for (int i = 0; i < v->compare.nruns; i++) {
        const dg_view_run *run = &v->compare.runs[i];
        double lo, hi, p, fc, fd;
        bool ci = dg_rp_num(run->json, "speedup_ci.lo", &lo) &&
                  dg_rp_num(run->json, "speedup_ci.hi", &hi);
        bool pc = dg_rp_num(run->json, "cpu.fraction_of_peak", &fc);
        bool pd = dg_rp_num(run->json, "device.fraction_of_peak", &fd);
        if (!run->ok || !run->speedup.valid || (!ci && !pc && !pd))
            continue;
        dg_rp_put(b, first ? "\n  speedup   " : "            ");
        first = false;
        dg_rp_esc(b, ESC_TEXT, run->device_backend, "device");
        dg_rp_printf(b, " %.2fx cpu", run->speedup.value);
        if (run->batch.valid)
            dg_rp_printf(b, " at batch %.0f", run->batch.value);
        dg_rp_put(b, dg_rp_unfair_note(v));
        if (ci)
            dg_rp_printf(b, ", 95%% %.2f-%.2fx", lo, hi);
        if (dg_rp_num(run->json, "mann_whitney.p", &p))
            dg_rp_printf(b, " (Mann-Whitney p %.2g)", p);
        if (pc || pd) {
            dg_rp_put(b, " · GEMM at ");
            if (pc)
                dg_rp_printf(b, "%.1f%% of peak on cpu", 100 * fc);
            if (pd) {
                dg_rp_put(b, pc ? ", " : "");
                dg_rp_printf(b, "%.1f%% on ", 100 * fd);
                dg_rp_esc(b, ESC_TEXT, run->device_backend, "the device");
            }
        }
        char loss[320];
        if (dg_rp_loss_check(loss, sizeof loss, run->json)) {
            dg_rp_put(b, " · ");
            dg_rp_esc(b, ESC_TEXT, loss, "");
        }
        dg_rp_put(b, "\n");
    }
}

static void text_findings(dg_capbuf *b, const dg_record_view *v)
{
    int n;
    const dg_view_finding **fs = dg_rp_findings_sorted(v, &n);
    if (n == 0) {
        dg_rp_put(b, "\n  findings  none\n");
        return;
    }
    dg_rp_put(b, "\n  findings\n");
    for (int i = 0; i < n; i++) {
        char sev[6], id[40];
        dg_copy_clean(sev, sizeof sev, fs[i]->severity ? fs[i]->severity : "?");
        dg_copy_clean(id, sizeof id, fs[i]->id ? fs[i]->id : "?");
        dg_rp_put(b, "   ");
        dg_rp_esc(b, ESC_TEXT, sev, "");
        dg_rp_printf(b, "%*s", (int)(6 - strlen(sev)), "");
        dg_rp_esc(b, ESC_TEXT, id, "");
        dg_rp_printf(b, "%*s", strlen(id) < 18 ? (int)(18 - strlen(id)) : 1, "");
        dg_rp_prose(b, ESC_TEXT, fs[i]->title, "");
        dg_rp_put(b, "\n");
        const char *action = fs[i]->action;
        if (action) {
            dg_rp_printf(b, "%*s→ ", 27, "");
            dg_rp_esc(b, ESC_TEXT, action, "");
            dg_rp_put(b, "\n");
        }
    }
    dg_free(fs);
}

static void text_decision(dg_capbuf *b, const dg_record_view *v)
{
    dg_rp_put(b, "  decision  ");
    dg_rp_decision(b, ESC_TEXT, &v->decision, "none recorded", NULL);
    dg_rp_put(b, "\n");
}

static void text_gate_and_pack(dg_capbuf *b, const dg_record_view *v)
{
    const dg_view_final_gate *g = &v->final_gate;
    dg_rp_put(b, "\n  ");
    if (!g->present) {
        dg_rp_put(b, "final gate not recorded\n");
    } else {
        const char *st = g->statement;
        if (st)
            dg_rp_prose(b, ESC_TEXT, st, "");
        else
            dg_rp_put(b, g->accepted == 1 ? "accepted" : "not accepted");
        dg_rp_put(b, "\n");
    }
    const cJSON *pack = dg_rp_obj(v->rec, "pack");
    const char *dir = dg_rp_str(pack, "dir");
    if (dir) {
        bool has_html = false;
        const cJSON *f;
        cJSON_ArrayForEach(f, dg_rp_arr(pack, "files")) has_html =
            has_html || (cJSON_IsString(f) && strcmp(f->valuestring, "report.html") == 0);
        dg_rp_put(b, "  pack  ");
        dg_rp_esc(b, ESC_TEXT, dir, "");
        dg_rp_put(b, has_html ? "/report.html\n" : "\n");
    }
}

/* A verb's own record: its one step line and its findings (it has no
 * decision or final gate: those are accept's). */
static void text_verb(dg_capbuf *b, const dg_record_view *v)
{
    char sum[1024];
    dg_rp_verb_summary(sum, sizeof sum, v);
    dg_view_step step = {.name = v->kind, .verdict = dg_rp_verb_verdict(v), .summary = sum};
    text_step(b, &step);
    if (v->nfindings > 0)
        text_findings(b, v);
}

void dg_rp_render_text(dg_capbuf *b, const dg_record_view *v)
{
    text_header(b, v);
    if (dg_rp_verb_record(v)) {
        text_verb(b, v);
        return;
    }
    text_steps(b, v);
    text_speedups(b, v);
    text_findings(b, v);
    text_decision(b, v);
    text_gate_and_pack(b, v);
}
