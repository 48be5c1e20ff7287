/* Rules over the environment, the device gate and the backends:
 * translation, mixed-architecture Python, a failed gate, the requested device
 * missing, other backends unavailable. */
#include "diagnose/diagnose.h"

#include <string.h>

void dg_judge_env_translated(dg_diag *d, const dg_rule *r)
{
    if (dg_jbool(d->env, "arch.translated") != 1)
        return;
    const char *how = dg_jstr(d->env, "arch.translation");
    const char *proc = dg_jstr(d->env, "arch.process");
    const char *host = dg_jstr(d->env, "arch.host");
    cJSON *f = dg_rule_finding(
        d, r, DG_SEV_FAIL, -1, "devgate runs under translation (%s): %s binary on %s host",
        how ? how : "unnamed", proc ? proc : "an unknown", host ? host : "an unknown");
    if (host)
        dg_rule_text(d, f, "action", "%s (%s)", r->action, host);
    dg_ev_path(d, f, "env", d->env, NULL, "arch.translated");
    dg_ev_path(d, f, "env", d->env, NULL, "arch.translation");
    dg_ev_path(d, f, "env", d->env, NULL, "arch.host");
    dg_ev_path(d, f, "env", d->env, NULL, "arch.process");
    dg_ev_path(d, f, "env", d->env, NULL, "arch.translation_evidence");
}

void dg_judge_env_mixed_arch(dg_diag *d, const dg_rule *r)
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
        dg_cat(list, sizeof list, "%s%s (%s)", k > 1 ? ", " : "", path ? path : "?", a);
    }
    cJSON *f;
    if (total > 0)
        f = dg_rule_finding(
            d, r, DG_SEV_FAIL, -1, "python has %d extension module%s not built for %s: %s%s", total,
            total == 1 ? "" : "s", ref ? ref : "its architecture", list, total > 3 ? ", ..." : "");
    else
        f = dg_rule_finding(
            d, r, DG_SEV_FAIL, -1,
            "the python interpreter's binary is not built for the host architecture (%s)",
            dg_jstr(d->env, "arch.host") ? dg_jstr(d->env, "arch.host") : "unknown");
    dg_ev_num(d, f, "env", "python.mixed_extensions.length", n, "modules");
    if (isfinite(more))
        dg_ev_path(d, f, "env", d->env, "modules", "python.mixed_extensions_truncated");
    dg_ev_path(d, f, "env", d->env, NULL, "python.reference_arch");
    dg_ev_path(d, f, "env", d->env, NULL, "python.arch_matches_host");
    dg_ev_path(d, f, "env", d->env, NULL, "python.binary.arch");
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

void dg_judge_backend_unavailable(dg_diag *d, const dg_rule *r)
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
        cJSON *f = dg_rule_finding(d, r, sev, -1, "%s built but not available: %s", name,
                                   why ? why : "no reason given");
        dg_ev_path(d, f, "gate", d->gate, NULL, "backends[%d].built", i);
        dg_ev_path(d, f, "gate", d->gate, NULL, "backends[%d].available", i);
        dg_ev_path(d, f, "gate", d->gate, NULL, "backends[%d].reason", i);
    }
}

void dg_judge_gate_failed(dg_diag *d, const dg_rule *r)
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
            dg_cat(detail, sizeof detail, ", %d bad elements", diag_int(bad));
        if (isfinite(over) && over >= 0)
            dg_cat(detail, sizeof detail, ", max error %.3gx the tolerance", over);
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "%s matrix product check failed: %s%s",
                                   name ? name : "a backend", why ? why : "wrong result", detail);
        dg_ev_path(d, f, "gate", d->gate, NULL, "backends[%d].matmul.ok", i);
        dg_ev_path(d, f, "gate", d->gate, NULL, "backends[%d].matmul.reason", i);
        if (isfinite(bad))
            dg_ev_path(d, f, "gate", d->gate, "elements", "backends[%d].matmul.bad_elements", i);
        if (isfinite(over))
            dg_ev_path(d, f, "gate", d->gate, "ratio", "backends[%d].matmul.max_err_over_tolerance",
                       i);
    }
    const char *verdict = dg_jstr(d->gate, "verdict");
    if (!any && verdict && !strcmp(verdict, "fail")) {
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "the device gate failed");
        dg_ev_path(d, f, "gate", d->gate, NULL, "verdict");
    }
}

void dg_judge_device_missing(dg_diag *d, const dg_rule *r)
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
        cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1,
                                   "%s requested but not built into this devgate", want);
        dg_ev_add(d, f, "spec", "backend", cJSON_CreateString(want), NULL);
        dg_ev_path(d, f, sec, obj, NULL, "backends");
        return;
    }
    if (dg_jbool(b, "available") != 0)
        return;
    const char *why = dg_jstr(b, "reason");
    cJSON *f = dg_rule_finding(d, r, DG_SEV_FAIL, -1, "%s requested but not available: %s", want,
                               why ? why : "no reason given");
    dg_ev_add(d, f, "spec", "backend", cJSON_CreateString(want), NULL);
    dg_ev_path(d, f, sec, obj, NULL, "backends[%d].available", i);
    dg_ev_path(d, f, sec, obj, NULL, "backends[%d].reason", i);
}
