/* The end of every evidence record (accept and run): the rules and the
 * decision, each step's verdict, and the final gate of the method: a
 * throughput is promised only when the record holds the architecture proof,
 * the device gate log, the batch sweep and the memory curve, no finding fails
 * and the run was not interrupted (docs/schema/report.md, FINAL_GATE). */
#include "core/core.h"
#include "core/json.h"

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

static int severity_rank(const char *s)
{
    return !s                       ? 0
           : strcmp(s, "fail") == 0 ? 3
           : strcmp(s, "warn") == 0 ? 2
           : strcmp(s, "info") == 0 ? 1
                                    : 0;
}

/* The section a finding speaks about: that of its first piece of evidence. */
static const char *finding_section(const cJSON *f)
{
    return dg_jstr(f, "evidence[0].section");
}

/* Each step that ran gets "fail" when it failed, else the most severe finding
 * about its section, else "pass". Skipped and interrupted steps keep null. */
static void set_verdicts(cJSON *rec, const cJSON *findings)
{
    static const char *const names[] = {NULL, "info", "warn", "fail"};
    cJSON *step;
    cJSON_ArrayForEach(step, dg_jpath(rec, "steps"))
    {
        const char *name = dg_jstr(step, "name");
        const char *status = dg_jstr(step, "status");
        if (!name || !status || strcmp(status, "skipped") == 0 ||
            strcmp(status, "interrupted") == 0)
            continue;
        int worst = strcmp(status, "failed") == 0 ? 3 : 0;
        const cJSON *f;
        cJSON_ArrayForEach(f, findings)
        {
            const char *sec = finding_section(f);
            int r = severity_rank(dg_jstr(f, "severity"));
            if (sec && strcmp(sec, name) == 0 && r > worst)
                worst = r;
        }
        put(step, "verdict", cJSON_CreateString(worst ? names[worst] : "pass"));
    }
}

/* Appends "what" to a list in buf, after sep when the list is not empty. */
static void list_add(char *buf, size_t len, const char *sep, const char *what)
{
    size_t n = strlen(buf);
    if (n < len)
        snprintf(buf + n, len - n, "%s%s", n ? sep : "", what);
}

static cJSON *final_gate(const cJSON *rec, const cJSON *findings)
{
    const cJSON *env = dg_jpath(rec, "env"), *gate = dg_jpath(rec, "gate"),
                *sweep = dg_jpath(rec, "sweep"), *soak = dg_jpath(rec, "soak");
    const cJSON *knee = dg_jpath(sweep, "knee.batch");
    bool proofs[4] = {
        cJSON_IsObject(dg_jpath(env, "arch")),
        cJSON_GetArraySize(dg_jpath(gate, "backends")) > 0,
        cJSON_IsNumber(knee),
        cJSON_GetArraySize(dg_jpath(soak, "epochs")) >= 2,
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
    const cJSON *f;
    cJSON_ArrayForEach(f, findings)
    {
        fails += severity_rank(dg_jstr(f, "severity")) == 3;
    }
    const char *state = dg_jstr(rec, "state");
    bool complete = state && strcmp(state, "complete") == 0;
    const cJSON *safe = dg_jpath(sweep, "safe_batch");
    double sps = dg_json_metric_value(dg_jpath(safe, "samples_per_s"));
    const cJSON *batch = dg_jpath(safe, "batch");
    if (!cJSON_IsNumber(batch))
        sps = NAN; /* a rate without its batch promises nothing */
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
    const char *backend = dg_jstr(sweep, "spec.backend");
    if (accepted)
        snprintf(statement, sizeof statement,
                 "accepted: %.0f samples/s at batch %.0f on %s (the sweep's safe batch)", sps,
                 batch->valuedouble, backend ? backend : "the device");
    else
        snprintf(statement, sizeof statement, "not accepted: throughput is not promised (%s)", why);

    cJSON_AddBoolToObject(g, "accepted", accepted);
    cJSON_AddItemToObject(g, "missing", missing);
    cJSON_AddNumberToObject(g, "fail_findings", fails);
    cJSON_AddItemToObject(g, "throughput",
                          dg_json_metric(isnan(sps) ? 0 : sps, !isnan(sps), "samples/s"));
    if (cJSON_IsNumber(batch))
        cJSON_AddNumberToObject(g, "batch", batch->valuedouble);
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
    const char *kind = dg_jstr(rec, "kind");
    const cJSON *version = dg_jpath(rec, "v");
    if (!cJSON_IsObject(rec) || !kind ||
        (strcmp(kind, "accept") != 0 && strcmp(kind, "run") != 0) || !cJSON_IsNumber(version) ||
        version->valuedouble != 1) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_FORMAT, "evidence: not an accept or run record of version 1");
    }
    char *dj = NULL;
    dg_status st = dg_diagnose(ctx, record_json, overrides, &dj);
    cJSON *diag = st == DG_OK ? cJSON_Parse(dj) : NULL;
    dg_string_free(dj);
    if (st != DG_OK || !diag) {
        cJSON_Delete(rec);
        return st != DG_OK ? st : dg_fail(ctx, DG_ERR_NOMEM, "evidence: out of host memory");
    }
    static const char *const moved[] = {"thresholds", "findings", "decision"};
    for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(diag, moved[i]);
        put(rec, moved[i], v ? v : cJSON_CreateNull());
    }
    cJSON_Delete(diag);
    const cJSON *findings = dg_jpath(rec, "findings");
    set_verdicts(rec, findings);
    put(rec, "final_gate", final_gate(rec, findings));
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "evidence: out of host memory");
}
