/* A verb's own record (gate, train, soak, sweep, compare, profile, env:
 * docs/schema/report.md, "Records of the other verbs") rendered by the same
 * renderers as accept's: it is accept's section of that name, so the page
 * shows just that section, and the terminal and Markdown forms one step line
 * made here from the typed view. */
#include "report/render.h"

#include <string.h>

bool dg_rp_verb_record(const dg_record_view *v)
{
    return v->kind && strcmp(v->kind, "accept") != 0 && strcmp(v->kind, "run") != 0;
}

/* Appends printf output to buf at *off, never past len. */
#define ADD(...)                                                                                   \
    (*off +=                                                                                       \
     (size_t)snprintf(buf + (*off < len ? *off : len), *off < len ? len - *off : 0, __VA_ARGS__))

static void gate_line(char *buf, size_t len, size_t *off, const dg_view_gate *g)
{
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_backend *bk = &g->backends[i];
        ADD("%s%s", i ? " · " : "", bk->name ? bk->name : "?");
        if (bk->built != 1)
            ADD(": not built");
        else if (bk->available != 1)
            ADD(": built, not available");
        else if (bk->matmul.gflops.valid)
            ADD(" %.1f GFLOP/s %s", bk->matmul.gflops.value, bk->matmul.ok == 1 ? "ok" : "wrong");
        else
            ADD(": %s", bk->matmul.ok == 1 ? "ok" : "not checked");
    }
}

static void sweep_line(char *buf, size_t len, size_t *off, const dg_view_sweep *sw)
{
    if (sw->knee_batch.valid)
        ADD("knee b%.0f", sw->knee_batch.value);
    if (sw->knee_sps.valid)
        ADD(" (%.0f samples/s)", sw->knee_sps.value);
    if (sw->safe_batch.valid)
        ADD(" · safe b%.0f", sw->safe_batch.value);
    if (sw->stopped_at.valid)
        ADD(" · stopped at b%.0f", sw->stopped_at.value);
    if (sw->stopped_reason)
        ADD("%s%s", sw->stopped_at.valid ? ": " : " · stopped: ", sw->stopped_reason);
}

static void soak_line(char *buf, size_t len, size_t *off, const dg_view_soak *s)
{
    static const char *const names[DG_MEM_COUNT] = {"allocated", "reserved", "driver", "footprint"};
    for (int i = 0, n = 0; i < DG_MEM_COUNT; i++)
        if (s->growth[i].valid)
            ADD("%s%s %+.0f%%", n++ ? ", " : "", names[i], s->growth[i].value);
    if (s->epochs_recorded.valid)
        ADD(" after %.0f epochs", s->epochs_recorded.value);
}

static void train_line(char *buf, size_t len, size_t *off, const cJSON *rec)
{
    double sps, batch, loss;
    ADD("%s on %s", dg_rp_str(rec, "spec.model") ? dg_rp_str(rec, "spec.model") : "?",
        dg_rp_str(rec, "spec.backend") ? dg_rp_str(rec, "spec.backend") : "?");
    if (dg_rp_num(rec, "spec.batch", &batch))
        ADD(" b%.0f", batch);
    if (dg_rp_num(rec, "throughput.samples_per_s", &sps))
        ADD(": %.0f samples/s", sps);
    const cJSON *losses = dg_rp_arr(rec, "loss");
    int n = cJSON_GetArraySize(losses);
    if (n > 0 && dg_rp_num(cJSON_GetArrayItem(losses, n - 1), "loss", &loss))
        ADD(" · loss %.4g at the end", loss);
}

static void compare_line(char *buf, size_t len, size_t *off, const dg_view_compare *c)
{
    for (int i = 0, n = 0; i < c->nruns; i++) {
        const dg_view_run *r = &c->runs[i];
        if (!r->speedup.valid)
            continue;
        ADD("%s%s %.2f× cpu", n++ ? " · " : "", r->device_backend ? r->device_backend : "device",
            r->speedup.value);
        if (r->batch.valid)
            ADD(" at b%.0f", r->batch.value);
    }
}

static void profile_line(char *buf, size_t len, size_t *off, const dg_view_profile *p)
{
    if (p->step_ms.valid)
        ADD("step %.2f ms", p->step_ms.value);
    if (p->sync_per_step.valid)
        ADD(" · %.2f sync points per step", p->sync_per_step.value);
}

/* An slo record's line is its statement (signed, or why not). */
static void slo_line(char *buf, size_t len, size_t *off, const cJSON *rec)
{
    const char *st = dg_rp_str(rec, "final_gate.statement");
    if (st)
        ADD("%s", st);
}

void dg_rp_verb_summary(char *buf, size_t len, const dg_record_view *v)
{
    size_t pos = 0, *off = &pos;
    buf[0] = '\0';
    const char *k = v->kind ? v->kind : "";
    if (!strcmp(k, "gate"))
        gate_line(buf, len, off, &v->gate);
    else if (!strcmp(k, "sweep"))
        sweep_line(buf, len, off, &v->sweep);
    else if (!strcmp(k, "soak"))
        soak_line(buf, len, off, &v->soak);
    else if (!strcmp(k, "train"))
        train_line(buf, len, off, v->rec);
    else if (!strcmp(k, "compare"))
        compare_line(buf, len, off, &v->compare);
    else if (!strcmp(k, "profile"))
        profile_line(buf, len, off, &v->profile);
    else if (!strcmp(k, "slo"))
        slo_line(buf, len, off, v->rec);
    const char *err = dg_rp_str(v->rec, "error");
    if (err)
        ADD("%serror: %s", pos ? " · " : "", err);
}

const char *dg_rp_verb_verdict(const dg_record_view *v)
{
    const char *verdict = dg_rp_str(v->rec, "verdict");
    if (!verdict && v->kind && !strcmp(v->kind, "slo")) {
        /* signed passes; missed and failed fail; inconclusive says so. */
        verdict = dg_rp_str(v->rec, "final_gate.verdict");
        if (verdict && !strcmp(verdict, "signed"))
            verdict = "pass";
        else if (verdict && (!strcmp(verdict, "missed") || !strcmp(verdict, "failed")))
            verdict = "fail";
    }
    return verdict ? verdict : dg_rp_str(v->rec, "status");
}
