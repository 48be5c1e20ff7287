/* Diagnostics as data: the rule table that reads an evidence record
 * (docs/schema/report.md) and makes findings, the thresholds it uses, and
 * dg_diagnose / dg_rules_catalogue. The catalogue is docs/rules.md.
 *
 * A rule is one row: {id, severity, signal, thresholds, judge, hypothesis,
 * action}. The judge reads what it needs and calls finding() for each thing
 * it finds; a field that is absent, null or a METRIC with valid:false is never
 * read as 0: the judge then stays silent. */
#include "diagnose/diagnose.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

/* ---- thresholds ------------------------------------------------------------ */

const dg_threshold dg_thresholds[TH_COUNT] = {
    [TH_DEVICE_MIN_REDUCTION_PCT] = {"device_min_reduction_pct", 22, "%", -1000, 100, false,
                                     "slow-device-data",
                                     "the device step time must be at least this much shorter "
                                     "than the cpu's (100 (cpu - device) / cpu)"},
    [TH_DEVICE_BUSY_MIN] = {"device_busy_min", 0.18, "fraction", 0, 1, false, "slow-device-data",
                            "below this busy fraction the device mostly waits"},
    [TH_MEM_EPOCHS] = {"mem_epochs", 10, "epochs", 1, 1e6, true,
                       "retained-refs,working-set-change,memory-short",
                       "epochs a soak needs before memory growth is judged"},
    [TH_MEM_GROWTH_PCT] = {"mem_growth_pct", 26, "%", 0, 1e6, false,
                           "retained-refs,working-set-change",
                           "growth of the process's own memory over the first epoch's "
                           "watermark, with the cache emptied every epoch"},
    [TH_SLOWDOWN_RATIO] = {"slowdown_ratio", 1.2, "ratio", 0, 1e3, false, "slowing-down",
                           "mean step time of the last third of the soak over the first third"},
    [TH_FALLBACK_SHARE] = {"fallback_share", 0.10, "fraction", 0, 1, false, "operator-gap",
                           "share of the profiled op time on the cpu fallback that warns"},
    [TH_FALLBACK_SHARE_FAIL] = {"fallback_share_fail", 0.5, "fraction", 0, 1, false, "operator-gap",
                                "share of the profiled op time on the cpu fallback that fails"},
    [TH_SPEEDUP_MIN] = {"speedup_min", 1.25, "x", 0, 1e6, false, "speedup-near-one,decision",
                        "cpu step time over device step time below which the device does not "
                        "pay off"},
    [TH_DATA_WAIT_SHARE] = {"data_wait_share", 0.20, "fraction", 0, 1, false, "data-starved",
                            "share of the step spent waiting for the next batch"},
    [TH_NOISE_IQR_RATIO] = {"noise_iqr_ratio", 0.15, "ratio", 0, 1e3, false, "noisy-measurement",
                            "step-time IQR over the median"},
    [TH_BUSY_PROCESS_CPU_PCT] = {"busy_process_cpu_pct", 20, "%", 0, 1e6, false,
                                 "noisy-measurement",
                                 "another process above this share of one core counts as busy"},
    [TH_OTHER_MEM_SHARE] = {"other_mem_share", 0.25, "fraction", 0, 1, false, "memory-pressure",
                            "resident memory of other processes over the machine's memory"},
    [TH_SWAP_GROWTH_MIB] = {"swap_growth_mib", 64, "MiB", 0, 1e9, false, "memory-pressure",
                            "swap growth during a soak or a good sweep trial"},
    [TH_PSI_SOME_PCT] = {"psi_some_pct", 10, "%", 0, 100, false, "memory-pressure",
                         "memory pressure (PSI some avg10) when the environment was taken"},
};

/* ---- reading the record ------------------------------------------------------ */

static const cJSON *section(const cJSON *rec, const char *name)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(rec, name);
    return cJSON_IsObject(s) ? s : NULL;
}

const char *dg_severity_name(dg_severity s)
{
    return s == DG_SEV_FAIL ? "fail" : s == DG_SEV_WARN ? "warn" : "info";
}

/* ---- making findings -------------------------------------------------------- */

static void put(dg_diag *d, cJSON *obj, const char *key, cJSON *item)
{
    if (!obj || !item || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        d->nomem = true;
    }
}

/* A new finding for rule r, appended to d; the title is printf-formatted.
 * Returns the FINDING object (NULL when out of memory) for evidence(). */
static cJSON *finding(dg_diag *d, const dg_rule *r, dg_severity sev, int run, const char *fmt, ...)
    DG_PRINTF(5, 6);
static cJSON *finding(dg_diag *d, const dg_rule *r, dg_severity sev, int run, const char *fmt, ...)
{
    if (d->nfindings == d->cap) {
        int cap = d->cap ? 2 * d->cap : 16;
        dg_finding *f = dg_realloc(d->findings, (size_t)cap * sizeof *f);
        if (!f) {
            d->nomem = true;
            return NULL;
        }
        d->findings = f;
        d->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    char *title = dg_vasprintf(fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    if (!o || !title) {
        dg_free(title);
        cJSON_Delete(o);
        d->nomem = true;
        return NULL;
    }
    put(d, o, "id", cJSON_CreateString(r->id));
    put(d, o, "severity", cJSON_CreateString(dg_severity_name(sev)));
    put(d, o, "title", cJSON_CreateString(title));
    put(d, o, "evidence", cJSON_CreateArray());
    put(d, o, "hypothesis", cJSON_CreateString(r->hypothesis));
    put(d, o, "action", cJSON_CreateString(r->action));
    dg_free(title);
    d->findings[d->nfindings++] = (dg_finding){r->id, sev, run, o, false};
    return o;
}

/* Replaces the finding's hypothesis or action with a formatted text. */
static void set_text(dg_diag *d, cJSON *f, const char *key, const char *fmt, ...) DG_PRINTF(4, 5);
static void set_text(dg_diag *d, cJSON *f, const char *key, const char *fmt, ...)
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

static void ev_add(dg_diag *d, cJSON *f, const char *sec, const char *field, cJSON *value,
                   const char *unit)
{
    if (!f) {
        cJSON_Delete(value);
        return;
    }
    cJSON *e = cJSON_CreateObject();
    put(d, e, "section", cJSON_CreateString(sec));
    put(d, e, "field", cJSON_CreateString(field));
    put(d, e, "value", value ? value : cJSON_CreateNull());
    put(d, e, "unit", unit ? cJSON_CreateString(unit) : cJSON_CreateNull());
    if (!e || !cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(f, "evidence"), e)) {
        cJSON_Delete(e);
        d->nomem = true;
    }
}

/* Evidence of a computed number (NAN: null). */
static void ev_num(dg_diag *d, cJSON *f, const char *sec, const char *field, double v,
                   const char *unit)
{
    ev_add(d, f, sec, field, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(), unit);
}

/* Evidence read from the record: the item at the printf-formatted path below
 * the section, with a METRIC's unit (or `unit` for plain values). Arrays and
 * objects that are not metrics are written as their compact JSON text. */
static void ev_path(dg_diag *d, cJSON *f, const char *sec_name, const cJSON *sec, const char *unit,
                    const char *fmt, ...) DG_PRINTF(6, 7);
static void ev_path(dg_diag *d, cJSON *f, const char *sec_name, const cJSON *sec, const char *unit,
                    const char *fmt, ...)
{
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *path = dg_vasprintf(fmt, ap);
    va_end(ap);
    if (!path) {
        d->nomem = true;
        return;
    }
    const cJSON *it = dg_jpath(sec, path);
    cJSON *v = NULL;
    const char *u = unit;
    if (cJSON_IsObject(it) && cJSON_HasObjectItem(it, "valid")) {
        double x = dg_jnum_item(it);
        v = isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull();
        const char *mu = dg_jstr(it, "unit");
        u = mu ? mu : unit;
    } else if (cJSON_IsNumber(it)) {
        v = cJSON_CreateNumber(it->valuedouble);
    } else if (cJSON_IsBool(it)) {
        v = cJSON_CreateBool(cJSON_IsTrue(it));
    } else if (cJSON_IsString(it)) {
        v = cJSON_CreateString(it->valuestring);
    } else if (cJSON_IsArray(it) || cJSON_IsObject(it)) {
        char *txt = cJSON_PrintUnformatted(it);
        v = txt ? cJSON_CreateString(txt) : NULL;
        cJSON_free(txt);
        if (!v)
            d->nomem = true;
    } else {
        v = cJSON_CreateNull();
    }
    ev_add(d, f, sec_name, path, v, u);
    dg_free(path);
}

bool dg_fired(const dg_diag *d, const char *id, dg_severity min, int run)
{
    for (int i = 0; i < d->nfindings; i++)
        if (strcmp(d->findings[i].id, id) == 0 && d->findings[i].severity >= min &&
            (run < 0 || d->findings[i].run == run))
            return true;
    return false;
}

const dg_finding *dg_finding_get(const dg_diag *d, const char *id)
{
    for (int i = 0; i < d->nfindings; i++)
        if (strcmp(d->findings[i].id, id) == 0)
            return &d->findings[i];
    return NULL;
}

/* Appends to a fixed buffer, keeping it NUL-terminated (truncates quietly). */
static void cat(char *buf, size_t n, const char *fmt, ...) DG_PRINTF(3, 4);
static void cat(char *buf, size_t n, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

/* ---- compare runs -------------------------------------------------------------- */

static const cJSON *compare_runs(const dg_diag *d)
{
    const cJSON *runs = dg_jpath(d->compare, "runs");
    return cJSON_IsArray(runs) ? runs : NULL;
}

/* A run that ended: not the failed-run shape {batch, status, failed, error}. */
static bool run_ok(const cJSON *run)
{
    const char *st = dg_jstr(run, "status");
    return cJSON_IsObject(run) && !cJSON_HasObjectItem(run, "failed") && (!st || !strcmp(st, "ok"));
}

static const char *run_device(const dg_diag *d, const cJSON *run)
{
    const char *b = dg_jstr(run, "device.backend");
    if (!b)
        b = dg_jstr(d->compare, "spec.backend");
    return b ? b : "the device";
}

int dg_route_run(const dg_diag *d)
{
    const cJSON *runs = compare_runs(d);
    int n = cJSON_GetArraySize(runs);
    double want = dg_jnum(d->spec, "batch");
    int best = -1;
    double best_sp = -INFINITY;
    for (int i = 0; i < n; i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        double sp = dg_jnum(run, "speedup");
        if (!run_ok(run) || !isfinite(sp))
            continue;
        if (isfinite(want) && dg_jnum(run, "batch") == want)
            return i;
        if (sp > best_sp) {
            best_sp = sp;
            best = i;
        }
    }
    return best;
}

/* slow-device-data: the method's first threshold, per compare run. */
static void judge_slow_device_data(dg_diag *d, const dg_rule *r)
{
    const cJSON *runs = compare_runs(d);
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        double red = dg_jnum(run, "step_time_reduction_pct");
        double busy = dg_jnum(run, "busy_fraction");
        if (!run_ok(run) || !isfinite(red) || red >= d->th[TH_DEVICE_MIN_REDUCTION_PCT])
            continue;
        if (isfinite(busy) && busy >= d->th[TH_DEVICE_BUSY_MIN])
            continue; /* busy but not faster: speedup-near-one's business */
        const char *dev = run_device(d, run);
        int batch = diag_int(dg_jnum(run, "batch"));
        char step[96];
        if (red >= 0)
            snprintf(step, sizeof step, "%s step time only %.0f%% shorter than cpu", dev, red);
        else
            snprintf(step, sizeof step, "%s step time %.0f%% longer than cpu", dev, -red);
        cJSON *f;
        if (isfinite(busy)) {
            f = finding(d, r, DG_SEV_FAIL, i, "%s and device busy %.0f%% at batch %d", step,
                        100 * busy, batch);
        } else {
            f = finding(d, r, DG_SEV_WARN, i, "%s at batch %d (device busy not reported)", step,
                        batch);
            set_text(d, f, "action",
                     "%s; the busy fraction was not reported (the backend has no events), so "
                     "this is judged on the step time alone",
                     r->action);
        }
        ev_path(d, f, "compare", d->compare, "%", "runs[%d].step_time_reduction_pct", i);
        ev_path(d, f, "compare", d->compare, "fraction", "runs[%d].busy_fraction", i);
        ev_path(d, f, "compare", d->compare, "ms", "runs[%d].cpu.step_ms", i);
        ev_path(d, f, "compare", d->compare, "ms", "runs[%d].device.step_ms", i);
        ev_path(d, f, "compare", d->compare, "samples", "runs[%d].batch", i);
    }
}

/* speedup-near-one: the device is busy (or slow-device-data would have said
 * so) and still not faster enough. Runs after slow-device-data in the table. */
static void judge_speedup_near_one(dg_diag *d, const dg_rule *r)
{
    const cJSON *runs = compare_runs(d);
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        double sp = dg_jnum(run, "speedup");
        if (!run_ok(run) || !isfinite(sp) || sp >= d->th[TH_SPEEDUP_MIN] ||
            dg_fired(d, "slow-device-data", DG_SEV_INFO, i))
            continue;
        const char *dev = run_device(d, run);
        int batch = diag_int(dg_jnum(run, "batch"));
        cJSON *f =
            sp < 1 ? finding(d, r, DG_SEV_WARN, i, "%s slower than cpu: %.2fx at batch %d", dev, sp,
                             batch)
                   : finding(d, r, DG_SEV_WARN, i, "%s only %.2fx cpu at batch %d", dev, sp, batch);
        ev_path(d, f, "compare", d->compare, "x", "runs[%d].speedup", i);
        ev_path(d, f, "compare", d->compare, "fraction", "runs[%d].busy_fraction", i);
        ev_path(d, f, "compare", d->compare, "ms", "runs[%d].cpu.step_ms", i);
        ev_path(d, f, "compare", d->compare, "ms", "runs[%d].device.step_ms", i);
        ev_path(d, f, "compare", d->compare, "samples", "runs[%d].batch", i);
        if (isfinite(dg_jnum(d->profile, "sync_points.per_step")))
            ev_path(d, f, "profile", d->profile, "sync points/step", "sync_points.per_step");
    }
}

/* numerics-drift: a run beyond tolerance, with the figures that drifted. */
static void judge_numerics_drift(dg_diag *d, const dg_rule *r)
{
    const cJSON *runs = compare_runs(d);
    double ltol = dg_jnum(d->compare, "thresholds.loss_tolerance");
    double ptol = dg_jnum(d->compare, "thresholds.param_tolerance");
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        const char *verdict = dg_jstr(run, "verdict");
        if (!run_ok(run) || !verdict || strcmp(verdict, "drift") != 0)
            continue;
        char figs[400] = "";
        const cJSON *drift = cJSON_GetObjectItemCaseSensitive(run, "drift");
        const cJSON *fig;
        cJSON_ArrayForEach(fig, drift)
        {
            if (!cJSON_IsString(fig))
                continue;
            double v = dg_jnum(run, fig->valuestring);
            if (isfinite(v))
                cat(figs, sizeof figs, "%s%s %.1e", figs[0] ? ", " : "", fig->valuestring, v);
            else
                cat(figs, sizeof figs, "%s%s not finite", figs[0] ? ", " : "", fig->valuestring);
        }
        const char *against = dg_jbool(run, "reference.ran") == 1 ? "float64" : "cpu";
        char tol[80] = "";
        if (isfinite(ltol) && isfinite(ptol))
            snprintf(tol, sizeof tol, " (tolerance loss %.0e, params %.0e)", ltol, ptol);
        cJSON *f = finding(d, r, DG_SEV_FAIL, i, "%s drifts from %s at batch %d: %s%s",
                           run_device(d, run), against, diag_int(dg_jnum(run, "batch")),
                           figs[0] ? figs : "figures not listed", tol);
        cJSON_ArrayForEach(fig, drift)
        {
            if (cJSON_IsString(fig))
                ev_path(d, f, "compare", d->compare, "relative", "runs[%d].%s", i,
                        fig->valuestring);
        }
        ev_path(d, f, "compare", d->compare, NULL, "runs[%d].verdict", i);
        ev_path(d, f, "compare", d->compare, "relative", "thresholds.loss_tolerance");
        ev_path(d, f, "compare", d->compare, "relative", "thresholds.param_tolerance");
    }
}

/* compare-failed: the compare step or one of its runs did not finish. */
static void judge_compare_failed(dg_diag *d, const dg_rule *r)
{
    if (!d->compare)
        return;
    const cJSON *runs = compare_runs(d);
    bool any = false;
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        if (!cJSON_IsObject(run) || run_ok(run))
            continue;
        any = true;
        const char *who = dg_jstr(run, "failed");
        const char *err = dg_jstr(run, "error");
        cJSON *f = finding(d, r, DG_SEV_FAIL, i, "compare failed at batch %d on %s: %s",
                           diag_int(dg_jnum(run, "batch")), who ? who : "an unnamed backend",
                           err ? err : "no error reported");
        ev_path(d, f, "compare", d->compare, NULL, "runs[%d].status", i);
        ev_path(d, f, "compare", d->compare, NULL, "runs[%d].failed", i);
        ev_path(d, f, "compare", d->compare, NULL, "runs[%d].error", i);
    }
    const char *st = dg_jstr(d->compare, "status");
    if (!any && st && strcmp(st, "ok") != 0) {
        const char *err = dg_jstr(d->compare, "error");
        cJSON *f = finding(d, r, DG_SEV_FAIL, -1, "compare failed (%s): %s", st,
                           err ? err : "no error reported");
        ev_path(d, f, "compare", d->compare, NULL, "status");
        ev_path(d, f, "compare", d->compare, NULL, "error");
    }
}

/* ---- soak memory ------------------------------------------------------------- */

static const char *const own_sources[] = {"allocator_allocated", "allocator_reserved", "footprint"};

/* The largest growth of the process's own sources (NAN when none reported). */
static double own_growth(const cJSON *s, const char **which)
{
    double best = NAN;
    *which = NULL;
    for (size_t i = 0; i < sizeof own_sources / sizeof *own_sources; i++) {
        const cJSON *g = dg_jpath(dg_jpath(s, "growth"), own_sources[i]);
        double v = dg_jnum_item(g);
        if (isfinite(v) && (!isfinite(best) || v > best)) {
            best = v;
            *which = own_sources[i];
        }
    }
    return best;
}

static const char *source_label(const char *src)
{
    if (!src)
        return "memory";
    if (!strcmp(src, "allocator_allocated"))
        return "allocator allocated";
    if (!strcmp(src, "allocator_reserved"))
        return "allocator reserved";
    return "process footprint";
}

static void ev_growth(dg_diag *d, cJSON *f)
{
    for (size_t i = 0; i < sizeof own_sources / sizeof *own_sources; i++)
        if (isfinite(dg_jnum_item(dg_jpath(dg_jpath(d->soak, "soak.growth"), own_sources[i]))))
            ev_path(d, f, "soak", d->soak, "%", "soak.growth.%s", own_sources[i]);
    ev_path(d, f, "soak", d->soak, "epochs", "soak.epochs_recorded");
    ev_path(d, f, "soak", d->soak, NULL, "soak.empty_cache");
}

/* The facts the memory rules share; false when the soak did not report them. */
static bool soak_memory(const dg_diag *d, bool *emptied, double *epochs, double *growth,
                        const char **src, int *aligned)
{
    const cJSON *s = dg_jpath(d->soak, "soak");
    int e = dg_jbool(s, "empty_cache");
    if (!cJSON_IsObject(s) || e < 0)
        return false;
    *emptied = e == 1;
    *epochs = dg_jnum(s, "epochs_recorded");
    *growth = own_growth(s, src);
    *aligned = dg_jbool(s, "staircase.aligned");
    return true;
}

static void judge_retained_refs(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || !emptied ||
        !isfinite(epochs) || epochs < d->th[TH_MEM_EPOCHS] || !isfinite(growth) ||
        growth <= d->th[TH_MEM_GROWTH_PCT] || aligned == 1)
        return;
    cJSON *f = finding(d, r, DG_SEV_WARN, -1,
                       "%s +%.0f%% after %.0f epochs although the cache was emptied every epoch",
                       source_label(src), growth, epochs);
    ev_growth(d, f);
    ev_path(d, f, "soak", d->soak, NULL, "soak.staircase.aligned");
}

static void judge_working_set_change(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || !emptied ||
        !isfinite(epochs) || epochs < d->th[TH_MEM_EPOCHS] || !isfinite(growth) ||
        growth <= d->th[TH_MEM_GROWTH_PCT] || aligned != 1)
        return;
    char *val = NULL;
    const cJSON *ve = dg_jpath(d->soak, "soak.staircase.validation_epochs");
    if (ve)
        val = cJSON_PrintUnformatted(ve);
    cJSON *f = finding(d, r, DG_SEV_INFO, -1,
                       "%s +%.0f%% after %.0f epochs in steps aligned with validation epochs %s",
                       source_label(src), growth, epochs, val ? val : "[]");
    cJSON_free(val);
    ev_growth(d, f);
    ev_path(d, f, "soak", d->soak, NULL, "soak.staircase.aligned");
    ev_path(d, f, "soak", d->soak, NULL, "soak.staircase.validation_epochs");
}

static void judge_memory_short(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || !emptied ||
        !isfinite(epochs) || epochs >= d->th[TH_MEM_EPOCHS])
        return;
    char seen[96];
    if (isfinite(growth))
        snprintf(seen, sizeof seen, "%s +%.0f%%", source_label(src), growth);
    else
        snprintf(seen, sizeof seen, "growth not reported");
    cJSON *f = finding(d, r, DG_SEV_INFO, -1,
                       "only %.0f epochs recorded: the %.0f%% memory rule needs %.0f (%s)", epochs,
                       d->th[TH_MEM_GROWTH_PCT], d->th[TH_MEM_EPOCHS], seen);
    set_text(d, f, "action", "soak for at least %.0f epochs with the cache emptied at each end",
             d->th[TH_MEM_EPOCHS]);
    ev_growth(d, f);
}

static void judge_memory_not_emptied(dg_diag *d, const dg_rule *r)
{
    bool emptied;
    double epochs, growth;
    const char *src;
    int aligned;
    if (!soak_memory(d, &emptied, &epochs, &growth, &src, &aligned) || emptied)
        return;
    char seen[96];
    if (isfinite(growth))
        snprintf(seen, sizeof seen, "%s +%.0f%%", source_label(src), growth);
    else
        snprintf(seen, sizeof seen, "growth not reported");
    cJSON *f =
        finding(d, r, DG_SEV_INFO, -1,
                "memory rule not judged: the cache was not emptied at epoch ends (%s)", seen);
    ev_growth(d, f);
}

/* Steps a soak needs before its first and last thirds are compared. */
#define SLOWDOWN_MIN_STEPS 30

static void judge_slowing_down(dg_diag *d, const dg_rule *r)
{
    /* Thirds of a short soak are a handful of steps each: too few for a trend. */
    double ratio = dg_jnum(d->soak, "soak.step_trend.thirds_ratio");
    if (!isfinite(ratio) || ratio <= d->th[TH_SLOWDOWN_RATIO] ||
        !(dg_jnum(d->soak, "soak.epochs_recorded") * dg_jnum(d->soak, "soak.steps_per_epoch") >=
          SLOWDOWN_MIN_STEPS))
        return;
    cJSON *f = finding(d, r, DG_SEV_WARN, -1,
                       "steps %.0f%% slower in the last third of the soak than in the first "
                       "(ratio %.2f)",
                       100 * (ratio - 1), ratio);
    ev_path(d, f, "soak", d->soak, "ratio", "soak.step_trend.thirds_ratio");
    ev_path(d, f, "soak", d->soak, "ms/step", "soak.step_trend.slope");
    ev_path(d, f, "soak", d->soak, "ms", "soak.step_trend.median");
}

/* ---- supervised programs ------------------------------------------------------- */

static void judge_program_failed(dg_diag *d, const dg_rule *r)
{
    const cJSON *s = d->supervise;
    if (!s || dg_jbool(s, "interrupted") == 1)
        return; /* an interrupt is the user's, and the record says so */
    bool timed_out = dg_jbool(s, "timed_out") == 1;
    const char *sig = dg_jstr(s, "signal");
    double code = dg_jnum(s, "exit_status");
    cJSON *f;
    if (timed_out)
        f = finding(d, r, DG_SEV_FAIL, -1,
                    "the program ran past its timeout; its process tree was killed");
    else if (sig)
        f = finding(d, r, DG_SEV_FAIL, -1, "the program was killed by %s", sig);
    else if (isfinite(code) && code != 0)
        f = finding(d, r, DG_SEV_FAIL, -1, "the program exited with status %d", diag_int(code));
    else
        return;
    ev_path(d, f, "supervise", s, NULL, "exit_status");
    ev_path(d, f, "supervise", s, NULL, "signal");
    ev_path(d, f, "supervise", s, NULL, "timed_out");
    ev_path(d, f, "supervise", s, "s", "wall");
}

static void judge_events_lost(dg_diag *d, const dg_rule *r)
{
    const cJSON *e = dg_jpath(d->supervise, "events");
    double dropped = dg_jnum(e, "dropped"), bad = dg_jnum(e, "malformed"),
           cut = dg_jnum(e, "overlong");
    double lost =
        (isfinite(dropped) ? dropped : 0) + (isfinite(bad) ? bad : 0) + (isfinite(cut) ? cut : 0);
    if (!(lost > 0))
        return;
    cJSON *f = finding(
        d, r, DG_SEV_WARN, -1,
        "%.0f of the program's event lines were lost: %.0f dropped by the rate limit, "
        "%.0f malformed, %.0f overlong",
        lost, isfinite(dropped) ? dropped : 0, isfinite(bad) ? bad : 0, isfinite(cut) ? cut : 0);
    ev_path(d, f, "supervise", d->supervise, "lines", "events.dropped");
    ev_path(d, f, "supervise", d->supervise, "lines", "events.malformed");
    ev_path(d, f, "supervise", d->supervise, "lines", "events.overlong");
    ev_path(d, f, "supervise", d->supervise, "lines", "events.lines");
}

/* ---- operators ------------------------------------------------------------------- */

typedef struct op_share {
    const char *op;
    double share;
} op_share;

static int by_share_desc(const void *a, const void *b)
{
    double x = ((const op_share *)a)->share, y = ((const op_share *)b)->share;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void judge_operator_gap(dg_diag *d, const dg_rule *r)
{
    /* Fallback rows of the profile's op table, summed per op name. */
    const cJSON *ops = dg_jpath(d->profile, "ops");
    if (!cJSON_IsArray(ops))
        ops = NULL;
    op_share top[32];
    int ntop = 0;
    double share = 0;
    bool share_known = false;
    const cJSON *row;
    cJSON_ArrayForEach(row, ops)
    {
        double s = dg_jnum(row, "share");
        if (!isfinite(s))
            continue;
        share_known = true;
        if (dg_jbool(row, "fallback") != 1)
            continue;
        share += s;
        const char *op = dg_jstr(row, "op");
        op = op ? op : "?";
        int k = 0;
        while (k < ntop && strcmp(top[k].op, op) != 0)
            k++;
        if (k == ntop && ntop < (int)(sizeof top / sizeof *top))
            top[ntop++] = (op_share){op, 0};
        if (k < ntop)
            top[k].share += s;
    }
    qsort(top, (size_t)ntop, sizeof *top, by_share_desc);

    /* The census (profile) and the compare runs say whether anything fell back. */
    const cJSON *census = dg_jpath(d->profile, "fallbacks");
    int ncensus = cJSON_IsArray(census) ? cJSON_GetArraySize(census) : 0;
    const cJSON *runs = compare_runs(d);
    int cmp_run = -1;
    double cmp_calls = 0;
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        double n = dg_jnum(cJSON_GetArrayItem(runs, i), "device.fallbacks");
        if (isfinite(n) && n > cmp_calls) {
            cmp_calls = n;
            cmp_run = i;
        }
    }
    if (ntop == 0 && ncensus == 0 && cmp_run < 0)
        return;

    char names[240] = "";
    for (int k = 0; k < ntop && k < 3; k++)
        cat(names, sizeof names, "%s%s %.0f%%", k ? ", " : "", top[k].op, 100 * top[k].share);
    if (!names[0]) {
        const cJSON *c;
        int k = 0;
        cJSON_ArrayForEach(c, census)
        {
            const char *op = dg_jstr(c, "op");
            if (op && k++ < 3)
                cat(names, sizeof names, "%s%s", k > 1 ? ", " : "", op);
        }
    }
    cJSON *f;
    if (share_known && (ntop > 0 || ncensus > 0)) {
        dg_severity sev = share > d->th[TH_FALLBACK_SHARE_FAIL] ? DG_SEV_FAIL
                          : share > d->th[TH_FALLBACK_SHARE]    ? DG_SEV_WARN
                                                                : DG_SEV_INFO;
        char under[64] = "";
        if (sev == DG_SEV_INFO)
            snprintf(under, sizeof under, ", under the %.0f%% threshold",
                     100 * d->th[TH_FALLBACK_SHARE]);
        f = finding(d, r, sev, -1,
                    "ops on the cpu fallback hold %.0f%% of the profiled op time%s%s%s",
                    100 * share, under, names[0] ? ": " : "", names);
        ev_num(d, f, "profile", "ops[fallback].share", share, "fraction");
        ev_path(d, f, "profile", d->profile, "calls", "ops_total.fallback_calls");
        if (ncensus > 0)
            ev_num(d, f, "profile", "fallbacks.length", ncensus, "entries");
    } else {
        if (cmp_run >= 0)
            f = finding(d, r, DG_SEV_WARN, cmp_run,
                        "%.0f op calls fell back to the cpu in compare at batch %d%s%s%s",
                        cmp_calls, diag_int(dg_jnum(cJSON_GetArrayItem(runs, cmp_run), "batch")),
                        names[0] ? " (" : "", names, names[0] ? ")" : "");
        else
            f = finding(d, r, DG_SEV_WARN, -1, "%d ops fell back to the cpu in the profile%s%s",
                        ncensus, names[0] ? ": " : "", names);
        if (ncensus > 0)
            ev_num(d, f, "profile", "fallbacks.length", ncensus, "entries");
    }
    if (cmp_run >= 0)
        ev_path(d, f, "compare", d->compare, "calls", "runs[%d].device.fallbacks", cmp_run);
}

/* ---- sweep -------------------------------------------------------------------------- */

/* The trial that stopped the sweep: the one at stopped.at_batch that did not
 * end ok, in trials or bisect; NULL when none matches. */
static const cJSON *stopping_trial(const dg_diag *d, char *path, size_t n)
{
    double at = dg_jnum(d->sweep, "stopped.at_batch");
    const char *lists[] = {"trials", "bisect"};
    for (int l = 0; l < 2; l++) {
        const cJSON *arr = dg_jpath(d->sweep, lists[l]);
        for (int i = 0; i < cJSON_GetArraySize(arr); i++) {
            const cJSON *t = cJSON_GetArrayItem(arr, i);
            const char *ended = dg_jstr(t, "ended");
            if (dg_jnum(t, "batch") == at && ended && strcmp(ended, "ok") != 0) {
                snprintf(path, n, "%s[%d]", lists[l], i);
                return t;
            }
        }
    }
    return NULL;
}

static void judge_sweep_memory(dg_diag *d, const dg_rule *r)
{
    static const char *const quiet[] = {"oom", "budget", "swap"};
    static const char *const loud[] = {"signal", "timeout", "failed"};
    const char *why = dg_jstr(d->sweep, "stopped.reason");
    if (!why)
        return;
    dg_severity sev;
    size_t k = 0;
    while (k < 3 && strcmp(why, quiet[k]) != 0)
        k++;
    if (k < 3) {
        sev = DG_SEV_INFO;
    } else {
        k = 0;
        while (k < 3 && strcmp(why, loud[k]) != 0)
            k++;
        if (k == 3)
            return; /* limit, throughput-falling: no failure */
        sev = DG_SEV_WARN;
    }
    int at = diag_int(dg_jnum(d->sweep, "stopped.at_batch"));
    int safe = diag_int(dg_jnum(d->sweep, "safe_batch.batch"));
    int first = diag_int(dg_jnum(d->sweep, "safe_batch.first_failure"));
    char safe_txt[48], first_txt[48];
    if (safe > 0)
        snprintf(safe_txt, sizeof safe_txt, "safe batch %d", safe);
    else
        snprintf(safe_txt, sizeof safe_txt, "no safe batch");
    if (first > 0)
        snprintf(first_txt, sizeof first_txt, ", first failure %d", first);
    else
        first_txt[0] = '\0';
    char tpath[32];
    const cJSON *t = stopping_trial(d, tpath, sizeof tpath);
    const char *sig = dg_jstr(t, "signal");
    cJSON *f = finding(d, r, sev, -1, "sweep stopped at batch %d (%s%s%s): %s%s", at, why,
                       sig ? " " : "", sig ? sig : "", safe_txt, first_txt);
    if (sev == DG_SEV_WARN)
        set_text(d, f, "hypothesis",
                 "a trial %s rather than running out of device memory: SIGKILL is what the "
                 "out-of-memory killer sends, SIGSEGV/SIGBUS are often a driver fault",
                 !strcmp(why, "signal")    ? "was killed"
                 : !strcmp(why, "timeout") ? "hung"
                                           : "failed");
    if (safe > 0)
        set_text(
            d, f, "action",
            "train at batch %d or below (the safe batch); above it split the work or empty the "
            "cache",
            safe);
    ev_path(d, f, "sweep", d->sweep, NULL, "stopped.reason");
    ev_path(d, f, "sweep", d->sweep, "samples", "stopped.at_batch");
    ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.batch");
    ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.first_failure");
    if (t) {
        ev_path(d, f, "sweep", d->sweep, NULL, "%s.ended", tpath);
        ev_path(d, f, "sweep", d->sweep, NULL, "%s.reason", tpath);
        if (sig)
            ev_path(d, f, "sweep", d->sweep, NULL, "%s.signal", tpath);
    }
}

static void judge_batch_above_safe(dg_diag *d, const dg_rule *r)
{
    double want = dg_jnum(d->spec, "batch");
    double safe = dg_jnum(d->sweep, "safe_batch.batch");
    if (!isfinite(want) || !isfinite(safe) || want <= safe)
        return;
    cJSON *f =
        finding(d, r, DG_SEV_WARN, -1, "training batch %d is above the sweep's safe batch %d",
                diag_int(want), diag_int(safe));
    set_text(d, f, "action", "train at batch %d or below, or sweep again with the real data path",
             diag_int(safe));
    ev_num(d, f, "spec", "batch", want, "samples");
    ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.batch");
    ev_path(d, f, "sweep", d->sweep, "samples", "safe_batch.first_failure");
}

/* ---- profile ------------------------------------------------------------------------ */

static void judge_data_starved(dg_diag *d, const dg_rule *r)
{
    double share = dg_jnum(d->profile, "phases.queue_wait.share");
    if (!isfinite(share) || share <= d->th[TH_DATA_WAIT_SHARE])
        return;
    double wait = dg_jnum(d->profile, "phases.queue_wait.ms");
    double step = dg_jnum(d->profile, "step.ms");
    char detail[96] = "";
    if (isfinite(wait) && isfinite(step))
        snprintf(detail, sizeof detail, " (%.1f ms of a %.1f ms step)", wait, step);
    cJSON *f =
        finding(d, r, DG_SEV_WARN, -1, "the step waits for its next batch %.0f%% of the time%s",
                100 * share, detail);
    double workers = dg_jnum(d->profile, "spec.workers");
    if (isfinite(workers))
        set_text(d, f, "action",
                 "more loader workers (now %d), or cached, pre-augmented samples (--cache); "
                 "profile the data path on its own",
                 diag_int(workers));
    ev_path(d, f, "profile", d->profile, "fraction", "phases.queue_wait.share");
    ev_path(d, f, "profile", d->profile, "ms", "phases.queue_wait.ms");
    ev_path(d, f, "profile", d->profile, "ms", "step.ms");
    /* The slowest loader stage says where the data path spends its time. */
    static const char *const stages[] = {"read",    "decode",    "resize",
                                         "augment", "normalise", "collate"};
    const char *slow = NULL;
    double slow_ms = -1;
    for (size_t i = 0; i < sizeof stages / sizeof *stages; i++) {
        char p[48];
        snprintf(p, sizeof p, "phases.%s.ms", stages[i]);
        double ms = dg_jnum(d->profile, p);
        if (isfinite(ms) && ms > slow_ms) {
            slow_ms = ms;
            slow = stages[i];
        }
    }
    if (slow)
        ev_path(d, f, "profile", d->profile, "ms", "phases.%s.ms", slow);
    if (isfinite(workers))
        ev_path(d, f, "profile", d->profile, "workers", "spec.workers");
}

/* Other processes busier than busy_process_cpu_pct, "name (pid N, P%)". */
static void busy_processes(const dg_diag *d, char *buf, size_t n, int *count)
{
    *count = 0;
    buf[0] = '\0';
    const cJSON *p;
    cJSON_ArrayForEach(p, dg_jpath(d->env, "processes.top_cpu"))
    {
        double cpu = dg_jnum(p, "cpu_percent");
        if (dg_jbool(p, "self") == 1 || !isfinite(cpu) || cpu <= d->th[TH_BUSY_PROCESS_CPU_PCT])
            continue;
        const char *name = dg_jstr(p, "name");
        cat(buf, n, "%s%s (pid %d, %.0f%%)", *count ? ", " : "", name ? name : "?",
            diag_int(dg_jnum(p, "pid")), cpu);
        (*count)++;
    }
}

/* Steps a sample needs before its spread is judged. */
#define NOISE_MIN_STEPS 5

static void judge_noisy_measurement(dg_diag *d, const dg_rule *r)
{
    double lim = d->th[TH_NOISE_IQR_RATIO];
    char what[300] = "";
    int nsrc = 0;
    /* Profile window: the stats' iqr_share, else iqr / median. */
    double pr = dg_jnum(d->profile, "step.stats.iqr_share");
    if (!isfinite(pr)) {
        double iqr = dg_jnum(d->profile, "step.stats.iqr");
        double med = dg_jnum(d->profile, "step.stats.median");
        pr = isfinite(iqr) && isfinite(med) && med > 0 ? iqr / med : NAN;
    }
    /* Host step times of a device window that only synchronises at its end
     * measure how fast work is queued, not how long it runs: their spread is
     * judged on the cpu or when every step was synchronised. */
    const char *pbackend = dg_jstr(d->profile, "spec.backend");
    bool synced =
        (pbackend && strcmp(pbackend, "cpu") == 0) || dg_jnum(d->profile, "spec.sync_every") == 1;
    bool prof = isfinite(pr) && pr > lim && synced &&
                dg_jnum(d->profile, "step.stats.n") >= NOISE_MIN_STEPS;
    if (prof) {
        cat(what, sizeof what, "profile IQR %.0f%% of the median", 100 * pr);
        nsrc++;
    }
    /* Sweep trials that ran to the end. */
    const cJSON *trials = dg_jpath(d->sweep, "trials");
    int noisy_trials[64], nt = 0;
    for (int i = 0; i < cJSON_GetArraySize(trials) && nt < 64; i++) {
        const cJSON *t = cJSON_GetArrayItem(trials, i);
        const char *ended = dg_jstr(t, "ended");
        double iqr = dg_jnum(t, "step_ms.iqr"), med = dg_jnum(t, "step_ms.median");
        /* The quartiles of fewer than 5 steps say little about noise. */
        if (!ended || strcmp(ended, "ok") != 0 || !isfinite(iqr) || !isfinite(med) || med <= 0 ||
            iqr / med <= lim || !(dg_jnum(t, "step_ms.steps") >= NOISE_MIN_STEPS))
            continue;
        noisy_trials[nt++] = i;
        if (nsrc++ < 3)
            cat(what, sizeof what, "%ssweep batch %d IQR %.0f%%", what[0] ? "; " : "",
                diag_int(dg_jnum(t, "batch")), 100 * iqr / med);
    }
    if (nsrc == 0)
        return;
    if (nsrc > 3)
        cat(what, sizeof what, "; %d more", nsrc - 3);
    char busy[400];
    int nbusy;
    busy_processes(d, busy, sizeof busy, &nbusy);
    cJSON *f = finding(d, r, DG_SEV_WARN, -1, "step times noisy: %s", what);
    if (nbusy)
        set_text(d, f, "action", "%s; other busy processes: %s", r->action, busy);
    else if (d->env)
        set_text(d, f, "action",
                 "%s; no other busy process was seen when the environment was taken", r->action);
    if (prof) {
        if (isfinite(dg_jnum(d->profile, "step.stats.iqr_share")))
            ev_path(d, f, "profile", d->profile, "fraction", "step.stats.iqr_share");
        else
            ev_num(d, f, "profile", "step.stats.iqr / step.stats.median", pr, "ratio");
        ev_path(d, f, "profile", d->profile, "ms", "step.stats.iqr");
        ev_path(d, f, "profile", d->profile, "ms", "step.stats.median");
    }
    for (int k = 0; k < nt; k++) {
        ev_path(d, f, "sweep", d->sweep, "ms", "trials[%d].step_ms.iqr", noisy_trials[k]);
        ev_path(d, f, "sweep", d->sweep, "ms", "trials[%d].step_ms.median", noisy_trials[k]);
    }
    const cJSON *top = dg_jpath(d->env, "processes.top_cpu");
    for (int i = 0; i < cJSON_GetArraySize(top); i++) {
        const cJSON *p = cJSON_GetArrayItem(top, i);
        double cpu = dg_jnum(p, "cpu_percent");
        if (dg_jbool(p, "self") != 1 && isfinite(cpu) && cpu > d->th[TH_BUSY_PROCESS_CPU_PCT])
            ev_path(d, f, "env", d->env, "percent", "processes.top_cpu[%d].cpu_percent", i);
    }
}

/* ---- environment and gate ----------------------------------------------------------- */

static void judge_env_translated(dg_diag *d, const dg_rule *r)
{
    if (dg_jbool(d->env, "arch.translated") != 1)
        return;
    const char *how = dg_jstr(d->env, "arch.translation");
    const char *proc = dg_jstr(d->env, "arch.process");
    const char *host = dg_jstr(d->env, "arch.host");
    cJSON *f =
        finding(d, r, DG_SEV_FAIL, -1, "devgate runs under translation (%s): %s binary on %s host",
                how ? how : "unnamed", proc ? proc : "an unknown", host ? host : "an unknown");
    if (host)
        set_text(d, f, "action", "%s (%s)", r->action, host);
    ev_path(d, f, "env", d->env, NULL, "arch.translated");
    ev_path(d, f, "env", d->env, NULL, "arch.translation");
    ev_path(d, f, "env", d->env, NULL, "arch.host");
    ev_path(d, f, "env", d->env, NULL, "arch.process");
    ev_path(d, f, "env", d->env, NULL, "arch.translation_evidence");
}

static void judge_env_mixed_arch(dg_diag *d, const dg_rule *r)
{
    const cJSON *py = dg_jpath(d->env, "python");
    const cJSON *mixed = dg_jpath(py, "mixed_extensions");
    int n = cJSON_IsArray(mixed) ? cJSON_GetArraySize(mixed) : 0;
    double more = dg_jnum(py, "mixed_extensions_truncated");
    int total = n + (isfinite(more) && more > 0 ? diag_int(more) : 0);
    bool interp = dg_jbool(py, "arch_matches_host") == 0;
    if (total == 0 && !interp)
        return;
    const char *ref = dg_jstr(py, "reference_arch");
    char list[300] = "";
    const cJSON *m;
    int k = 0;
    cJSON_ArrayForEach(m, mixed)
    {
        if (k++ >= 3)
            break;
        const char *path = dg_jstr(m, "path");
        const cJSON *arch = dg_jpath(m, "arch");
        const char *a =
            cJSON_IsArray(arch) && cJSON_IsString(arch->child) ? arch->child->valuestring : "?";
        cat(list, sizeof list, "%s%s (%s)", k > 1 ? ", " : "", path ? path : "?", a);
    }
    cJSON *f;
    if (total > 0)
        f = finding(
            d, r, DG_SEV_FAIL, -1, "python has %d extension module%s not built for %s: %s%s", total,
            total == 1 ? "" : "s", ref ? ref : "its architecture", list, total > 3 ? ", ..." : "");
    else
        f = finding(d, r, DG_SEV_FAIL, -1,
                    "the python interpreter's binary is not built for the host architecture (%s)",
                    dg_jstr(d->env, "arch.host") ? dg_jstr(d->env, "arch.host") : "unknown");
    ev_num(d, f, "env", "python.mixed_extensions.length", n, "modules");
    if (isfinite(more))
        ev_path(d, f, "env", d->env, "modules", "python.mixed_extensions_truncated");
    ev_path(d, f, "env", d->env, NULL, "python.reference_arch");
    ev_path(d, f, "env", d->env, NULL, "python.arch_matches_host");
    ev_path(d, f, "env", d->env, NULL, "python.binary.arch");
}

/* The requested device backend (spec.backend), NULL for none or cpu. */
static const char *wanted_backend(const dg_diag *d)
{
    const char *b = dg_jstr(d->spec, "backend");
    return b && strcmp(b, "cpu") != 0 ? b : NULL;
}

/* The gate's entry for a backend (or env.backends without a gate); *sec and
 * *path say where it was found. */
static const cJSON *backend_entry(const dg_diag *d, const char *name, const char **sec,
                                  const cJSON **sec_obj, int *index)
{
    const cJSON *src = d->gate ? d->gate : d->env;
    *sec = d->gate ? "gate" : "env";
    *sec_obj = src;
    const cJSON *arr = dg_jpath(src, "backends");
    for (int i = 0; i < cJSON_GetArraySize(arr); i++) {
        const cJSON *b = cJSON_GetArrayItem(arr, i);
        const char *nm = dg_jstr(b, "name");
        if (nm && !strcmp(nm, name)) {
            *index = i;
            return b;
        }
    }
    *index = -1;
    return NULL;
}

static void judge_backend_unavailable(dg_diag *d, const dg_rule *r)
{
    const char *want = wanted_backend(d);
    const char *wsec;
    const cJSON *wobj;
    int wi;
    const cJSON *wb = want ? backend_entry(d, want, &wsec, &wobj, &wi) : NULL;
    /* Another backend missing matters less when the one asked for is there. */
    dg_severity sev = wb && dg_jbool(wb, "available") == 1 ? DG_SEV_INFO : DG_SEV_WARN;
    const cJSON *arr = dg_jpath(d->gate, "backends");
    for (int i = 0; i < cJSON_GetArraySize(arr); i++) {
        const cJSON *b = cJSON_GetArrayItem(arr, i);
        const char *name = dg_jstr(b, "name");
        if (!name || (want && !strcmp(name, want)) || dg_jbool(b, "built") != 1 ||
            dg_jbool(b, "available") != 0)
            continue;
        const char *why = dg_jstr(b, "reason");
        cJSON *f = finding(d, r, sev, -1, "%s built but not available: %s", name,
                           why ? why : "no reason given");
        ev_path(d, f, "gate", d->gate, NULL, "backends[%d].built", i);
        ev_path(d, f, "gate", d->gate, NULL, "backends[%d].available", i);
        ev_path(d, f, "gate", d->gate, NULL, "backends[%d].reason", i);
    }
}

static void judge_gate_failed(dg_diag *d, const dg_rule *r)
{
    const cJSON *arr = dg_jpath(d->gate, "backends");
    bool any = false;
    for (int i = 0; i < cJSON_GetArraySize(arr); i++) {
        const cJSON *b = cJSON_GetArrayItem(arr, i);
        if (dg_jbool(b, "matmul.ok") != 0)
            continue;
        any = true;
        const char *name = dg_jstr(b, "name");
        const char *why = dg_jstr(b, "matmul.reason");
        double bad = dg_jnum(b, "matmul.bad_elements");
        double over = dg_jnum(b, "matmul.max_err_over_tolerance");
        char detail[120] = "";
        if (isfinite(bad))
            cat(detail, sizeof detail, ", %d bad elements", diag_int(bad));
        if (isfinite(over) && over >= 0)
            cat(detail, sizeof detail, ", max error %.3gx the tolerance", over);
        cJSON *f = finding(d, r, DG_SEV_FAIL, -1, "%s matrix product check failed: %s%s",
                           name ? name : "a backend", why ? why : "wrong result", detail);
        ev_path(d, f, "gate", d->gate, NULL, "backends[%d].matmul.ok", i);
        ev_path(d, f, "gate", d->gate, NULL, "backends[%d].matmul.reason", i);
        if (isfinite(bad))
            ev_path(d, f, "gate", d->gate, "elements", "backends[%d].matmul.bad_elements", i);
        if (isfinite(over))
            ev_path(d, f, "gate", d->gate, "ratio", "backends[%d].matmul.max_err_over_tolerance",
                    i);
    }
    const char *verdict = dg_jstr(d->gate, "verdict");
    if (!any && verdict && !strcmp(verdict, "fail")) {
        cJSON *f = finding(d, r, DG_SEV_FAIL, -1, "the device gate failed");
        ev_path(d, f, "gate", d->gate, NULL, "verdict");
    }
}

static void judge_device_missing(dg_diag *d, const dg_rule *r)
{
    const char *want = wanted_backend(d);
    if (!want || (!d->gate && !d->env))
        return;
    const char *sec;
    const cJSON *obj;
    int i;
    const cJSON *b = backend_entry(d, want, &sec, &obj, &i);
    if (!b) {
        if (!dg_jpath(obj, "backends"))
            return; /* that section did not list backends at all */
        cJSON *f =
            finding(d, r, DG_SEV_FAIL, -1, "%s requested but not built into this devgate", want);
        ev_add(d, f, "spec", "backend", cJSON_CreateString(want), NULL);
        ev_path(d, f, sec, obj, NULL, "backends");
        return;
    }
    if (dg_jbool(b, "available") != 0)
        return;
    const char *why = dg_jstr(b, "reason");
    cJSON *f = finding(d, r, DG_SEV_FAIL, -1, "%s requested but not available: %s", want,
                       why ? why : "no reason given");
    ev_add(d, f, "spec", "backend", cJSON_CreateString(want), NULL);
    ev_path(d, f, sec, obj, NULL, "backends[%d].available", i);
    ev_path(d, f, sec, obj, NULL, "backends[%d].reason", i);
}

/* ---- memory pressure from other work ----------------------------------------------- */

static void judge_memory_pressure(dg_diag *d, const dg_rule *r)
{
    char what[400] = "";
    /* Other processes' resident memory against the machine's. */
    double total = dg_jnum(d->env, "memory.total");
    double others = 0;
    char names[200] = "";
    int nn = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, dg_jpath(d->env, "processes.top_mem"))
    {
        double rss = dg_jnum(p, "rss");
        if (dg_jbool(p, "self") == 1 || !isfinite(rss))
            continue;
        others += rss;
        const char *name = dg_jstr(p, "name");
        if (nn++ < 3)
            cat(names, sizeof names, "%s%s %.*f %s", nn > 1 ? ", " : "", name ? name : "?",
                rss >= GIB ? 1 : 0, rss >= GIB ? rss / GIB : rss / MIB, rss >= GIB ? "GiB" : "MiB");
    }
    bool mem = isfinite(total) && total > 0 && others / total > d->th[TH_OTHER_MEM_SHARE];
    if (mem)
        cat(what, sizeof what, "other processes hold %.0f%% of %.1f GiB (%s)", 100 * others / total,
            total / GIB, names);
    double psi = dg_jnum(d->env, "memory.pressure.some_avg10");
    bool pressure = isfinite(psi) && psi > d->th[TH_PSI_SOME_PCT];
    if (pressure)
        cat(what, sizeof what, "%smemory pressure %.0f%% (PSI some avg10)", what[0] ? "; " : "",
            psi);
    double lim = d->th[TH_SWAP_GROWTH_MIB] * MIB;
    double soak_swap = dg_jnum(d->soak, "sampler.swap_growth");
    bool soak = isfinite(soak_swap) && soak_swap > lim;
    if (soak)
        cat(what, sizeof what, "%sswap grew %.0f MiB during the soak", what[0] ? "; " : "",
            soak_swap / MIB);
    const cJSON *trials = dg_jpath(d->sweep, "trials");
    int swap_trial = -1;
    double swap_max = 0;
    for (int i = 0; i < cJSON_GetArraySize(trials); i++) {
        const cJSON *t = cJSON_GetArrayItem(trials, i);
        const char *ended = dg_jstr(t, "ended");
        double g = dg_jnum(t, "swap_growth");
        if (ended && !strcmp(ended, "ok") && isfinite(g) && g > lim && g > swap_max) {
            swap_max = g;
            swap_trial = i;
        }
    }
    if (swap_trial >= 0)
        cat(what, sizeof what, "%sswap grew %.0f MiB in the sweep trial at batch %d",
            what[0] ? "; " : "", swap_max / MIB,
            diag_int(dg_jnum(cJSON_GetArrayItem(trials, swap_trial), "batch")));
    if (!what[0])
        return;
    cJSON *f = finding(d, r, DG_SEV_WARN, -1, "memory under pressure from other work: %s", what);
    if (mem) {
        ev_num(d, f, "env", "processes.top_mem[self=false].rss", others, "bytes");
        ev_path(d, f, "env", d->env, "bytes", "memory.total");
    }
    if (pressure)
        ev_path(d, f, "env", d->env, "percent", "memory.pressure.some_avg10");
    if (soak)
        ev_path(d, f, "soak", d->soak, "bytes", "sampler.swap_growth");
    if (swap_trial >= 0)
        ev_path(d, f, "sweep", d->sweep, "bytes", "trials[%d].swap_growth", swap_trial);
}

/* ---- the table ------------------------------------------------------------------------ */

/* Order matters only where a judge reads another's findings: slow-device-data
 * runs before speedup-near-one. Findings are sorted by severity afterwards. */
const dg_rule dg_rules[] = {
    {"env-translated", DG_SEV_FAIL, "env.arch.translated", "", judge_env_translated,
     "wrong interpreter or binary: under translation the device reports not available and "
     "every speed is the emulator's",
     "run a native build for the host architecture and pin the environment with a lock file"},
    {"env-mixed-arch", DG_SEV_FAIL, "env.python.mixed_extensions, env.python.arch_matches_host", "",
     judge_env_mixed_arch,
     "mixed binaries: wheels of one architecture inside an interpreter of another, so the device "
     "simply reports not available",
     "rebuild the environment for one architecture from a lock file; reinstall the listed "
     "packages"},
    {"gate-failed", DG_SEV_FAIL, "gate.verdict, gate.backends[].matmul.ok", "", judge_gate_failed,
     "the device computes wrong results: a driver, runtime or kernel fault",
     "fix the environment first (driver, runtime and library versions), then run devgate gate "
     "again"},
    {"device-missing", DG_SEV_FAIL, "spec.backend, gate.backends[].available", "",
     judge_device_missing,
     "the device path is not there: driver or runtime missing, or the device hidden (VM, "
     "container)",
     "fix the environment first: make the device visible and available, then run devgate gate "
     "again"},
    {"backend-unavailable", DG_SEV_WARN, "gate.backends[].built, gate.backends[].available", "",
     judge_backend_unavailable,
     "a backend devgate was built with cannot reach its device: driver or runtime missing, or "
     "the device hidden (VM, container)",
     "install the driver or pass the device through if that backend is wanted; otherwise ignore"},
    {"compare-failed", DG_SEV_FAIL, "compare.status, compare.runs[].failed", "",
     judge_compare_failed,
     "the device path broke while training: a driver error, out of memory or a backend bug",
     "read the error, run devgate compare at that batch alone, and fix the path before trusting "
     "any speedup"},
    {"numerics-drift", DG_SEV_FAIL, "compare.runs[].verdict, compare.runs[].drift", "",
     judge_numerics_drift,
     "dtype or reduction order: floating-point reductions run in another order on the device",
     "unify the dtype; accept the platform difference if losses need not match point by point, "
     "otherwise keep the device for preprocessing only and train elsewhere"},
    {"slow-device-data", DG_SEV_FAIL,
     "compare.runs[].step_time_reduction_pct, compare.runs[].busy_fraction",
     "device_min_reduction_pct,device_busy_min", judge_slow_device_data,
     "the device waits on the data path or gets too little work per step (the batch), not a "
     "wrong device",
     "look at the data path and the batch first, not the device: profile the loader and the sync "
     "points, and raise the batch toward the sweep's safe batch"},
    {"speedup-near-one", DG_SEV_WARN, "compare.runs[].speedup, profile.sync_points.per_step",
     "speedup_min", judge_speedup_near_one,
     "the device is not really used, or sync points (loss reads, fallbacks, host copies) make it "
     "wait",
     "check the device was really used (gate, fallback census) and count the sync points per "
     "step with devgate profile"},
    {"operator-gap", DG_SEV_WARN,
     "profile.ops[].fallback/share, profile.fallbacks, "
     "compare.runs[].device.fallbacks",
     "fallback_share,fallback_share_fail", judge_operator_gap,
     "operator gap: these ops have no device kernel and fall back to the cpu, with copies both "
     "ways",
     "profile them and replace the operator, or route to an engine that has it (the native "
     "engine) or to a remote node"},
    {"retained-refs", DG_SEV_WARN,
     "soak.soak.growth, soak.soak.epochs_recorded, "
     "soak.soak.empty_cache, soak.soak.staircase.aligned",
     "mem_epochs,mem_growth_pct", judge_retained_refs,
     "retained references: tensors or graphs kept alive across steps, so the cache cannot give "
     "memory back",
     "look for references kept across steps (losses kept with their graph, lists of outputs); "
     "consider a dedicated remote host"},
    {"working-set-change", DG_SEV_INFO, "soak.soak.growth, soak.soak.staircase.aligned",
     "mem_epochs,mem_growth_pct", judge_working_set_change,
     "a working-set change: the staircase lines up with validation epochs, not a leak",
     "nothing to fix; keep validation and checkpoint epochs marked in the memory chart"},
    {"memory-short", DG_SEV_INFO, "soak.soak.epochs_recorded, soak.soak.growth",
     "mem_epochs,mem_growth_pct", judge_memory_short,
     "too few epochs to tell retained references from a warm-up",
     "soak for at least 10 epochs with the cache emptied at each end"},
    {"memory-not-emptied", DG_SEV_INFO, "soak.soak.empty_cache, soak.soak.growth", "",
     judge_memory_not_emptied,
     "without emptying the cache at epoch ends memory curves only ever go up",
     "soak with the cache emptied at every epoch end (leave out --no-empty-cache)"},
    {"memory-pressure", DG_SEV_WARN,
     "env.processes.top_mem, env.memory.pressure.some_avg10, "
     "soak.sampler.swap_growth, sweep.trials[].swap_growth",
     "other_mem_share,psi_some_pct,swap_growth_mib", judge_memory_pressure,
     "other work competes for memory: the machine pages and the curves show it, not the model",
     "close the other programs or train on a dedicated (remote) node; record them with the "
     "result"},
    {"slowing-down", DG_SEV_WARN, "soak.soak.step_trend.thirds_ratio", "slowdown_ratio",
     judge_slowing_down, "cache and memory contention: fast at first, slow later",
     "lower the batch; release memory at every epoch end (empty the cache, collect garbage)"},
    {"sweep-memory", DG_SEV_INFO, "sweep.stopped.reason, sweep.safe_batch", "", judge_sweep_memory,
     "the batch is above the safe size: memory runs out beyond it",
     "train at or below the safe batch; above it split the work or empty the cache"},
    {"batch-above-safe", DG_SEV_WARN, "spec.batch, sweep.safe_batch.batch", "",
     judge_batch_above_safe, "the training batch is above the safe size the sweep found",
     "train at or below the safe batch"},
    {"data-starved", DG_SEV_WARN, "profile.phases.queue_wait.share", "data_wait_share",
     judge_data_starved, "the data path cannot keep up: the step waits for its next batch",
     "more loader workers, or cached, pre-augmented samples (--cache); profile the data path on "
     "its own"},
    {"program-failed", DG_SEV_FAIL, "supervise.exit_status, supervise.signal, supervise.timed_out",
     "", judge_program_failed,
     "the supervised program did not finish: its figures cover only part of the run",
     "fix the failure before trusting the figures; the record keeps what was measured"},
    {"events-lost", DG_SEV_WARN, "supervise.events.dropped, .malformed, .overlong", "",
     judge_events_lost,
     "the program's events were dropped or garbled: the curves and step statistics have gaps",
     "emit step events less often (every N steps) and check the emitter; the probes write one "
     "whole line per event"},
    {"noisy-measurement", DG_SEV_WARN,
     "profile.step.stats.iqr_share, "
     "sweep.trials[].step_ms.iqr/median, env.processes.top_cpu",
     "noise_iqr_ratio,busy_process_cpu_pct", judge_noisy_measurement,
     "the measurement is noisy: other work, frequency scaling or sync jitter moves the step "
     "times",
     "rerun on a quiet machine and compare medians only when the spread is small"},
};
const int dg_rule_count = (int)(sizeof dg_rules / sizeof dg_rules[0]);

/* ---- overrides -------------------------------------------------------------------------- */

static int threshold_index(const char *name, size_t n)
{
    for (int i = 0; i < TH_COUNT; i++)
        if (strlen(dg_thresholds[i].name) == n && !strncmp(dg_thresholds[i].name, name, n))
            return i;
    return -1;
}

static dg_status parse_overrides(dg_ctx *ctx, const char *spec, double *th)
{
    if (!spec)
        return DG_OK;
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *item = p;
        p += len;
        if (*p == ',')
            p++;
        while (len && isspace((unsigned char)*item)) {
            item++;
            len--;
        }
        while (len && isspace((unsigned char)item[len - 1]))
            len--;
        if (!len)
            continue; /* an empty list, or an empty item between commas */
        const char *eq = memchr(item, '=', len);
        if (!eq)
            return dg_fail(ctx, DG_ERR_USAGE, "threshold: \"%.*s\" is not NAME=VALUE", (int)len,
                           item);
        size_t nlen = (size_t)(eq - item);
        while (nlen && isspace((unsigned char)item[nlen - 1]))
            nlen--;
        int idx = threshold_index(item, nlen);
        if (idx < 0) {
            char known[512] = "";
            for (int i = 0; i < TH_COUNT; i++)
                cat(known, sizeof known, "%s%s", i ? ", " : "", dg_thresholds[i].name);
            return dg_fail(ctx, DG_ERR_USAGE, "threshold: unknown name \"%.*s\" (known: %s)",
                           (int)nlen, item, known);
        }
        const dg_threshold *t = &dg_thresholds[idx];
        char val[64];
        size_t vlen = len - (size_t)(eq + 1 - item);
        const char *v = eq + 1;
        while (vlen && isspace((unsigned char)*v)) {
            v++;
            vlen--;
        }
        if (!vlen || vlen >= sizeof val)
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: \"%.*s\" is not a number", t->name,
                           (int)vlen, v);
        memcpy(val, v, vlen);
        val[vlen] = '\0';
        char *end;
        errno = 0;
        double x = strtod(val, &end);
        if (end == val || *end || errno == ERANGE || !isfinite(x))
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: \"%s\" is not a number", t->name, val);
        if (x < t->lo || x > t->hi)
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: %s is out of range [%g, %g] %s",
                           t->name, val, t->lo, t->hi, t->unit);
        if (t->integer && x != floor(x))
            return dg_fail(ctx, DG_ERR_USAGE, "threshold %s: %s is not a whole number of %s",
                           t->name, val, t->unit);
        th[idx] = x;
    }
    return DG_OK;
}

/* ---- entry points ------------------------------------------------------------------------ */

static void diag_free(dg_diag *d)
{
    for (int i = 0; i < d->nfindings; i++)
        if (!d->findings[i].in_output)
            cJSON_Delete(d->findings[i].json);
    dg_free(d->findings);
    d->findings = NULL;
    d->nfindings = d->cap = 0;
}

dg_status dg_diagnose(dg_ctx *ctx, const char *record_json, const char *overrides, char **json)
{
    if (!json)
        return dg_fail(ctx, DG_ERR_USAGE, "diagnose: no place for the result");
    *json = NULL;
    dg_diag d = {0};
    for (int i = 0; i < TH_COUNT; i++)
        d.th[i] = dg_thresholds[i].value;
    dg_status st = parse_overrides(ctx, overrides, d.th);
    if (st != DG_OK)
        return st;
    if (!record_json)
        return dg_fail(ctx, DG_ERR_FORMAT, "diagnose: no evidence record");
    const char *end = NULL;
    cJSON *rec = cJSON_ParseWithOpts(record_json, &end, true);
    if (!rec)
        return dg_fail(ctx, DG_ERR_FORMAT,
                       "diagnose: the evidence record is not JSON (stops at byte %zu)",
                       end && end >= record_json ? (size_t)(end - record_json) : (size_t)0);
    if (!cJSON_IsObject(rec)) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_FORMAT, "diagnose: the evidence record is not a JSON object");
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, "v");
    if (v && (!cJSON_IsNumber(v) || v->valuedouble != 1)) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_FORMAT, "diagnose: evidence record version is not 1");
    }

    d.rec = rec;
    d.kind = dg_jstr(rec, "kind") ? dg_jstr(rec, "kind") : "";
    d.spec = section(rec, "spec");
    d.env = section(rec, "env");
    d.gate = section(rec, "gate");
    d.sweep = section(rec, "sweep");
    d.soak = section(rec, "soak");
    d.compare = section(rec, "compare");
    d.profile = section(rec, "profile");
    d.supervise = section(rec, "supervise");

    for (int i = 0; i < dg_rule_count && !d.nomem; i++)
        dg_rules[i].judge(&d, &dg_rules[i]);

    cJSON *out = cJSON_CreateObject();
    cJSON *th = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    put(&d, out, "v", cJSON_CreateNumber(1));
    for (int i = 0; i < TH_COUNT; i++)
        put(&d, th, dg_thresholds[i].name, cJSON_CreateNumber(d.th[i]));
    put(&d, out, "thresholds", th);
    /* Most severe first, stable within a severity (the table's order). */
    for (int sev = DG_SEV_FAIL; sev >= DG_SEV_INFO && arr; sev--)
        for (int i = 0; i < d.nfindings; i++)
            if ((int)d.findings[i].severity == sev && d.findings[i].json) {
                if (!cJSON_AddItemToArray(arr, d.findings[i].json)) {
                    d.nomem = true;
                    continue;
                }
                d.findings[i].in_output = true; /* arr owns it; still readable */
            }
    put(&d, out, "findings", arr);
    /* The decision reads the findings' titles: it runs while arr holds them. */
    put(&d, out, "decision", d.nomem ? NULL : dg_decide(&d));
    if (!d.nomem)
        *json = dg_json_print(out);
    cJSON_Delete(out);
    diag_free(&d);
    cJSON_Delete(rec);
    if (d.nomem || !*json) {
        dg_string_free(*json);
        *json = NULL;
        return dg_fail(ctx, DG_ERR_NOMEM, "diagnose: out of memory");
    }
    return DG_OK;
}

dg_status dg_rules_catalogue(dg_ctx *ctx, char **json)
{
    if (!json)
        return dg_fail(ctx, DG_ERR_USAGE, "rules: no place for the result");
    *json = NULL;
    dg_diag d = {0};
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < TH_COUNT && arr; i++) {
        const dg_threshold *t = &dg_thresholds[i];
        cJSON *o = cJSON_CreateObject();
        put(&d, o, "name", cJSON_CreateString(t->name));
        put(&d, o, "value", cJSON_CreateNumber(t->value));
        put(&d, o, "unit", cJSON_CreateString(t->unit));
        put(&d, o, "rule", cJSON_CreateString(t->rules));
        put(&d, o, "doc", cJSON_CreateString(t->doc));
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            d.nomem = true;
        }
    }
    if (arr && !d.nomem)
        *json = dg_json_print(arr);
    cJSON_Delete(arr);
    if (!*json)
        return dg_fail(ctx, DG_ERR_NOMEM, "rules: out of memory");
    return DG_OK;
}
