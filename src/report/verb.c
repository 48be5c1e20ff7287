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

/* Appends fmt with m's value when m is valid. */
static void add_num(char *buf, size_t len, size_t *off, const char *fmt, dg_rec_metric m)
{
    if (m.valid)
        ADD(fmt, m.value);
}

static void gate_line(char *buf, size_t len, size_t *off, const dg_record_view *v)
{
    const dg_view_gate *g = &v->gate;
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

static void sweep_line(char *buf, size_t len, size_t *off, const dg_record_view *v)
{
    const dg_view_sweep *sw = &v->sweep;
    add_num(buf, len, off, "knee b%.0f", sw->knee_batch);
    add_num(buf, len, off, " (%.0f samples/s)", sw->knee_sps);
    add_num(buf, len, off, " · safe b%.0f", sw->safe_batch);
    add_num(buf, len, off, " · stopped at b%.0f", sw->stopped_at);
    if (sw->stopped_reason)
        ADD("%s%s", sw->stopped_at.valid ? ": " : " · stopped: ", sw->stopped_reason);
}

static void soak_line(char *buf, size_t len, size_t *off, const dg_record_view *v)
{
    const dg_view_soak *s = &v->soak;
    static const char *const names[DG_MEM_COUNT] = {"allocated", "reserved", "driver", "footprint"};
    for (int i = 0, n = 0; i < DG_MEM_COUNT; i++)
        if (s->growth[i].valid)
            ADD("%s%s %+.0f%%", n++ ? ", " : "", names[i], s->growth[i].value);
    add_num(buf, len, off, " after %.0f epochs", s->epochs_recorded);
}

static void train_line(char *buf, size_t len, size_t *off, const dg_record_view *v)
{
    const cJSON *rec = v->rec;
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

static void compare_line(char *buf, size_t len, size_t *off, const dg_record_view *v)
{
    const dg_view_compare *c = &v->compare;
    for (int i = 0, n = 0; i < c->nruns; i++) {
        const dg_view_run *r = &c->runs[i];
        if (!r->speedup.valid)
            continue;
        ADD("%s%s %.2f× cpu", n++ ? " · " : "", r->device_backend ? r->device_backend : "device",
            r->speedup.value);
        add_num(buf, len, off, " at b%.0f", r->batch);
    }
}

static void profile_line(char *buf, size_t len, size_t *off, const dg_record_view *v)
{
    const dg_view_profile *p = &v->profile;
    add_num(buf, len, off, "step %.2f ms", p->step_ms);
    add_num(buf, len, off, " · %.2f sync points per step", p->sync_per_step);
}

/* An slo record's line is its statement (signed, or why not). */
static void slo_line(char *buf, size_t len, size_t *off, const dg_record_view *v)
{
    const cJSON *rec = v->rec;
    const char *st = dg_rp_str(rec, "final_gate.statement");
    if (st)
        ADD("%s", st);
}

void dg_rp_verb_summary(char *buf, size_t len, const dg_record_view *v)
{
    size_t pos = 0, *off = &pos;
    buf[0] = '\0';
    /* Each record kind's line writer; other kinds have none. */
    static const struct {
        const char *kind;
        void (*line)(char *buf, size_t len, size_t *off, const dg_record_view *v);
    } lines[] = {{"gate", gate_line},   {"sweep", sweep_line},     {"soak", soak_line},
                 {"train", train_line}, {"compare", compare_line}, {"profile", profile_line},
                 {"slo", slo_line}};
    const char *k = v->kind ? v->kind : "";
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        if (!strcmp(k, lines[i].kind))
            lines[i].line(buf, len, off, v);
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
