/* The rule kit (diagnose.h): what every rule family uses to make findings
 * and cite their evidence, and the compare-run helpers the speed rules and the
 * decision share. */
#include "diagnose/diagnose.h"

#include <stdarg.h>
#include <string.h>

void dg_put(dg_diag *d, cJSON *obj, const char *key, cJSON *item)
{
    if (!obj || !item || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        d->nomem = true;
    }
}

cJSON *dg_rule_finding(dg_diag *d, const dg_rule *r, dg_severity sev, int run, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *title = dg_vasprintf(fmt, ap);
    va_end(ap);
    cJSON *f = dg_findings_add(&d->fs, r->id, sev, run, title, r->hypothesis, r->action);
    dg_free(title);
    return f;
}

/* Replaces the finding's hypothesis or action with a formatted text. */
void dg_rule_text(dg_diag *d, cJSON *f, const char *key, const char *fmt, ...)
{
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *s = dg_vasprintf(fmt, ap);
    va_end(ap);
    cJSON *item = s ? cJSON_CreateString(s) : NULL;
    dg_free(s);
    if (!item || !cJSON_ReplaceItemInObjectCaseSensitive(f, key, item)) {
        cJSON_Delete(item);
        d->nomem = true;
    }
}

void dg_ev_add(dg_diag *d, cJSON *f, const char *sec, const char *field, cJSON *value,
               const char *unit)
{
    if (!f) {
        cJSON_Delete(value);
        return;
    }
    cJSON *e = cJSON_CreateObject();
    dg_put(d, e, "section", cJSON_CreateString(sec));
    dg_put(d, e, "field", cJSON_CreateString(field));
    dg_put(d, e, "value", value ? value : cJSON_CreateNull());
    dg_put(d, e, "unit", unit ? cJSON_CreateString(unit) : cJSON_CreateNull());
    if (!e || !cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(f, "evidence"), e)) {
        cJSON_Delete(e);
        d->nomem = true;
    }
}

/* Evidence of a computed number (NAN: null). */
void dg_ev_num(dg_diag *d, cJSON *f, const char *sec, const char *field, double v, const char *unit)
{
    dg_ev_add(d, f, sec, field, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(), unit);
}

/* dg_ev_add with a printf-formatted field; takes value (deleted when there is
 * no finding or the field cannot be made: d->nomem set). */
static void ev_addv(dg_diag *d, cJSON *f, const char *sec, cJSON *value, const char *unit,
                    const char *fmt, va_list ap) DG_PRINTF(6, 0);
static void ev_addv(dg_diag *d, cJSON *f, const char *sec, cJSON *value, const char *unit,
                    const char *fmt, va_list ap)
{
    char *field = f ? dg_vasprintf(fmt, ap) : NULL;
    if (!field) {
        if (f)
            d->nomem = true;
        cJSON_Delete(value);
        return;
    }
    dg_ev_add(d, f, sec, field, value, unit);
    dg_free(field);
}

void dg_ev_metric(dg_diag *d, cJSON *f, const char *sec, const char *unit, dg_rec_metric m,
                  const char *fmt, ...)
{
    cJSON *v = m.valid ? cJSON_CreateNumber(m.value) : cJSON_CreateNull();
    va_list ap;
    va_start(ap, fmt);
    ev_addv(d, f, sec, v, m.metric ? m.unit : unit, fmt, ap);
    va_end(ap);
}

void dg_ev_str(dg_diag *d, cJSON *f, const char *sec, const char *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ev_addv(d, f, sec, s ? cJSON_CreateString(s) : cJSON_CreateNull(), NULL, fmt, ap);
    va_end(ap);
}

void dg_ev_bool(dg_diag *d, cJSON *f, const char *sec, int tri, const char *fmt, ...)
{
    cJSON *v = tri >= 0 ? cJSON_CreateBool(tri == 1) : cJSON_CreateNull();
    va_list ap;
    va_start(ap, fmt);
    ev_addv(d, f, sec, v, NULL, fmt, ap);
    va_end(ap);
}

/* A record item as an evidence value: a metric's number (and its unit into
 * *unit), a scalar as it is, an array or object as its JSON text. */
static cJSON *item_value(dg_diag *d, const cJSON *it, const char **unit)
{
    if (cJSON_IsObject(it) && cJSON_HasObjectItem(it, "valid")) {
        double x = dg_jnum_item(it);
        const cJSON *mu = cJSON_GetObjectItemCaseSensitive(it, "unit");
        if (cJSON_IsString(mu))
            *unit = mu->valuestring;
        return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull();
    }
    if (cJSON_IsNumber(it))
        return cJSON_CreateNumber(it->valuedouble);
    if (cJSON_IsBool(it))
        return cJSON_CreateBool(cJSON_IsTrue(it));
    if (cJSON_IsString(it))
        return cJSON_CreateString(it->valuestring);
    if (cJSON_IsArray(it) || cJSON_IsObject(it)) {
        char *txt = cJSON_PrintUnformatted(it);
        cJSON *v = txt ? cJSON_CreateString(txt) : NULL;
        cJSON_free(txt);
        if (!v)
            d->nomem = true;
        return v;
    }
    return cJSON_CreateNull();
}

void dg_ev_item(dg_diag *d, cJSON *f, const char *sec, const char *unit, const cJSON *it,
                const char *fmt, ...)
{
    if (!f)
        return;
    const char *u = unit;
    cJSON *v = item_value(d, it, &u);
    va_list ap;
    va_start(ap, fmt);
    ev_addv(d, f, sec, v, u, fmt, ap);
    va_end(ap);
}

/* Appends to a fixed buffer, keeping it NUL-terminated (truncates quietly). */
void dg_cat(char *buf, size_t n, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

const char *dg_run_device(const dg_diag *d, const dg_view_run *run)
{
    const char *b = run ? run->device_backend : NULL;
    if (!b)
        b = d->v->compare.backend;
    return b ? b : "the device";
}

int dg_route_run(const dg_diag *d)
{
    const dg_view_compare *c = &d->v->compare;
    dg_rec_metric want = d->v->spec.batch;
    int best = -1;
    double best_sp = -INFINITY;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        if (!run->ok || !run->speedup.valid)
            continue;
        if (want.valid && run->batch.valid && run->batch.value == want.value)
            return i;
        if (run->speedup.value > best_sp) {
            best_sp = run->speedup.value;
            best = i;
        }
    }
    return best;
}

bool dg_sweep_promise(const dg_view_sweep *s, double *batch, double *sps)
{
    *batch = *sps = NAN;
    if (!s->safe_batch.valid)
        return false;
    double safe = s->safe_batch.value;
    for (int k = 0; k < 2; k++) {
        const dg_view_trial *ts = k ? s->bisect : s->trials;
        int n = k ? s->nbisect : s->ntrials;
        for (int i = 0; i < n; i++) {
            /* Ended ok at or below the safe batch is a good trial: a trial
             * that swapped past the limit set the first failure, above it. */
            const dg_view_trial *t = &ts[i];
            double r = t->samples_per_s.value, b = t->batch.value;
            if (!t->ended || strcmp(t->ended, "ok") != 0 || !t->samples_per_s.valid ||
                !t->batch.valid || !isfinite(r) || b > safe)
                continue;
            if (isnan(*sps) || r > *sps || (r == *sps && b < *batch)) {
                *sps = r;
                *batch = b;
            }
        }
    }
    return !isnan(*sps);
}

int dg_ops_over_tolerance(const dg_diag *d, const char *device, char *buf, size_t n)
{
    buf[0] = '\0';
    const dg_view_gate *g = &d->v->gate;
    for (int i = 0; device && i < g->nbackends; i++) {
        const dg_view_backend *b = &g->backends[i];
        if (!b->name || strcmp(b->name, device) != 0 || !b->ops.present)
            continue;
        int over = 0;
        for (int k = 0; k < b->ops.nrows; k++) {
            const dg_view_op_row *o = &b->ops.rows[k];
            if (!o->verdict || (strcmp(o->verdict, "fail") && strcmp(o->verdict, "error")))
                continue;
            /* One mention per op and output: the first row that failed. */
            bool seen = false;
            for (int j = 0; j < k && !seen; j++) {
                const dg_view_op_row *p = &b->ops.rows[j];
                seen = p->verdict && !strcmp(p->verdict, "fail") && p->op && o->op &&
                       !strcmp(p->op, o->op) && p->output && o->output &&
                       !strcmp(p->output, o->output);
            }
            over++;
            if (seen)
                continue;
            if (o->nmse.valid)
                dg_cat(buf, n, "%s%s %s NMSE %.2g > %.2g", buf[0] ? ", " : "", o->op ? o->op : "?",
                       o->output ? o->output : "", o->nmse.value, o->tolerance.value);
            else
                dg_cat(buf, n, "%s%s %s %s", buf[0] ? ", " : "", o->op ? o->op : "?",
                       o->output ? o->output : "", o->reason ? o->reason : "not finite");
        }
        return over;
    }
    return -1;
}

const char *dg_batch_arg_text(const dg_diag *d, int batch, char *buf, size_t n)
{
    const char *arg = d->v->loader.present ? d->v->loader.batch_arg : NULL;
    if (arg)
        snprintf(buf, n, " (%s %d)", arg, batch);
    else if (n)
        buf[0] = '\0';
    return buf;
}

bool dg_window_contended(const dg_diag *d, const dg_view_window *w, char *words, size_t n)
{
    if (n)
        words[0] = '\0';
    if (!w || !w->others_cpus.valid || w->others_cpus.value < d->th[TH_CONTENTION_CPUS])
        return false;
    dg_cat(words, n, "other processes took %.1f CPUs", w->others_cpus.value);
    if (w->others_share.valid)
        dg_cat(words, n, " (%.0f%% of the machine)", 100 * w->others_share.value);
    int named = 0;
    for (int i = 0; i < w->ntop && named < 3; i++) {
        const dg_view_window_proc *p = &w->top[i];
        if (!p->name || !p->cpu_percent.valid ||
            p->cpu_percent.value < d->th[TH_BUSY_PROCESS_CPU_PCT])
            continue;
        dg_cat(words, n, "%s%s %.0f%%", named++ ? ", " : ": ", p->name, p->cpu_percent.value);
    }
    return true;
}

const dg_view_window *dg_program_window(const dg_diag *d)
{
    if (d->v->supervise.window.present)
        return &d->v->supervise.window;
    return d->v->soak.window.present ? &d->v->soak.window : NULL;
}

void dg_ev_window(dg_diag *d, cJSON *f, const dg_view_window *w)
{
    bool run = w == &d->v->supervise.window;
    const char *sec = run ? "run" : "soak";
    dg_ev_metric(d, f, sec, "cpus", w->others_cpus, "contention.others_cpus");
    if (w->cpu_pressure_some.valid)
        dg_ev_metric(d, f, sec, "fraction", w->cpu_pressure_some, "contention.cpu_pressure_some");
}
