/* The end of every evidence record (accept and run): the rules and the
 * decision, each step's verdict, and the final gate of the method: a
 * throughput is promised only when the record holds the architecture proof,
 * the device gate log, the batch sweep and the memory curve, no finding fails
 * and the run was not interrupted (docs/schema/report.md, FINAL_GATE). */
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "diagnose/diagnose.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Replaces (or adds) key in obj with val, taking ownership of val. */
static void put(cJSON *obj, const char *key, cJSON *val)
{
    if (cJSON_GetObjectItemCaseSensitive(obj, key))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, key, val);
    else
        cJSON_AddItemToObject(obj, key, val);
}

/* Each step that ran gets "fail" when it failed, else the most severe finding
 * about its section, else "pass". Skipped and interrupted steps keep null.
 * v is the view of rec (with its findings); steps[i] of v is rec's steps[i]. */
static void set_verdicts(cJSON *rec, const dg_record_view *v)
{
    static const char *const names[] = {NULL, "info", "warn", "fail"};
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(rec, dg_rec_paths[DG_P_REC_STEPS].path);
    for (int i = 0; i < v->nsteps; i++) {
        const dg_view_step *step = &v->steps[i];
        if (!step->name || !step->status || strcmp(step->status, "skipped") == 0 ||
            strcmp(step->status, "interrupted") == 0)
            continue;
        int worst = strcmp(step->status, "failed") == 0 ? 3 : 0;
        for (int k = 0; k < v->nfindings; k++) {
            const dg_view_finding *f = &v->findings[k];
            if (f->section && strcmp(f->section, step->name) == 0 && f->rank > worst)
                worst = f->rank;
        }
        cJSON *obj = cJSON_GetArrayItem(steps, i);
        if (cJSON_IsObject(obj))
            put(obj, "verdict", cJSON_CreateString(worst ? names[worst] : "pass"));
    }
}

/* Appends "what" to a list in buf, after sep when the list is not empty. */
static void list_add(char *buf, size_t len, const char *sep, const char *what)
{
    size_t n = strlen(buf);
    if (n < len)
        snprintf(buf + n, len - n, "%s%s", n ? sep : "", what);
}

static cJSON *final_gate(const dg_record_view *v)
{
    bool proofs[4] = {
        v->env.has_arch,
        v->gate.nbackends > 0,
        v->sweep.knee_is_number,
        v->soak.nepochs >= 2,
    };
    static const char *const keys[4] = {"architecture", "gate_log", "sweep", "memory_curve"};
    static const char *const shown[4] = {"the architecture proof", "the device gate log",
                                         "the batch sweep", "the memory curve"};
    cJSON *g = cJSON_CreateObject();
    cJSON *p = cJSON_AddObjectToObject(g, "proofs");
    cJSON *missing = cJSON_CreateArray();
    char lacks[256] = "";
    for (int i = 0; i < 4; i++) {
        cJSON_AddBoolToObject(p, keys[i], proofs[i]);
        if (!proofs[i]) {
            cJSON_AddItemToArray(missing, cJSON_CreateString(keys[i]));
            list_add(lacks, sizeof lacks, ", ", shown[i]);
        }
    }
    int fails = 0;
    for (int k = 0; k < v->nfindings; k++)
        fails += v->findings[k].rank == 3;
    const char *state = v->state;
    bool complete = state && strcmp(state, "complete") == 0;
    /* A rate without its batch promises nothing. */
    double sps = v->sweep.safe_sps.valid && v->sweep.safe_batch_is_number ? v->sweep.safe_sps.value
                                                                            : NAN;
    bool has_batch = v->sweep.safe_batch_is_number;
    double batch = v->sweep.safe_batch.value;
    bool accepted = cJSON_GetArraySize(missing) == 0 && fails == 0 && complete && !isnan(sps);

    char why[512] = "", statement[640];
    if (!complete)
        list_add(why, sizeof why, "; ",
                 !state                              ? "the run has no state"
                 : strcmp(state, "interrupted") == 0 ? "the run was interrupted"
                                                     : "the run did not complete");
    if (fails) {
        char n[64];
        snprintf(n, sizeof n, "%d fail finding%s", fails, fails == 1 ? "" : "s");
        list_add(why, sizeof why, "; ", n);
    }
    if (lacks[0]) {
        char m[300];
        snprintf(m, sizeof m, "the pack lacks %s", lacks);
        list_add(why, sizeof why, "; ", m);
    }
    if (!fails && !lacks[0] && complete && isnan(sps))
        list_add(why, sizeof why, "; ", "the sweep found no safe batch");
    const char *backend = v->sweep.backend;
    if (accepted)
        snprintf(statement, sizeof statement,
                 "accepted: %.0f samples/s at batch %.0f on %s (the sweep's safe batch)", sps,
                 batch, backend ? backend : "the device");
    else
        snprintf(statement, sizeof statement, "not accepted: throughput is not promised (%s)", why);

    cJSON_AddBoolToObject(g, "accepted", accepted);
    cJSON_AddItemToObject(g, "missing", missing);
    cJSON_AddNumberToObject(g, "fail_findings", fails);
    cJSON_AddItemToObject(g, "throughput",
                          dg_json_metric(isnan(sps) ? 0 : sps, !isnan(sps), "samples/s"));
    if (has_batch)
        cJSON_AddNumberToObject(g, "batch", batch);
    else
        cJSON_AddNullToObject(g, "batch");
    cJSON_AddStringToObject(g, "statement", statement);
    return g;
}

dg_status dg_evidence_finish(dg_ctx *ctx, const char *record_json, const char *overrides,
                             char **json)
{
    *json = NULL;
    if (!record_json)
        return dg_fail(ctx, DG_ERR_FORMAT, "evidence: no record");
    cJSON *rec = cJSON_Parse(record_json);
    dg_record_view v;
    dg_status st = rec ? dg_record_view_build(NULL, rec, &v) : DG_ERR_FORMAT;
    if (st == DG_ERR_NOMEM) {
        dg_record_view_free(&v);
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_NOMEM, "evidence: out of host memory");
    }
    if (st != DG_OK || !v.kind || (strcmp(v.kind, "accept") != 0 && strcmp(v.kind, "run") != 0)) {
        if (rec)
            dg_record_view_free(&v);
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_FORMAT,
                       "evidence: not an accept or run record of version 1 or 2");
    }
    /* The record is parsed once: the rules read this view. */
    cJSON *diag = NULL;
    st = dg_diagnose_view(ctx, &v, overrides, &diag);
    dg_record_view_free(&v);
    if (st != DG_OK) {
        cJSON_Delete(rec);
        return st;
    }
    static const char *const moved[] = {"thresholds", "findings", "decision"};
    for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++) {
        cJSON *item = cJSON_DetachItemFromObjectCaseSensitive(diag, moved[i]);
        put(rec, moved[i], item ? item : cJSON_CreateNull());
    }
    cJSON_Delete(diag);
    /* The view again, now with the findings (no parse: the same tree). */
    st = dg_record_view_build(ctx, rec, &v);
    if (st == DG_OK) {
        set_verdicts(rec, &v);
        put(rec, "final_gate", final_gate(&v));
        *json = dg_json_print(rec);
    }
    dg_record_view_free(&v);
    cJSON_Delete(rec);
    if (st != DG_OK)
        return st;
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "evidence: out of host memory");
}
