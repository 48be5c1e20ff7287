/* The end of every evidence record (accept and run): the rules and the
 * decision, each step's verdict, and the final gate of the method: a
 * throughput is promised only when the record holds the architecture proof,
 * the device gate log, the batch sweep and the memory curve, no finding fails
 * and the run was not interrupted (docs/schema/report.md, FINAL_GATE).
 *
 * The record is parsed once; the rules, the verdicts and the final gate read
 * its typed view (core/record.h), and the final gate reads the diagnosis
 * (findings, decision, thresholds) through a view of its own. */
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

/* The verdict of each step that ran (indexed like the record's steps[]):
 * "fail" when it failed, else the most severe finding about its section,
 * else "pass". Skipped and interrupted steps, and entries that are not
 * steps, keep NULL (their recorded verdict stays). */
static void step_verdicts(const dg_record_view *v, const dg_record_view *judged, const char **out)
{
    static const char *const names[] = {NULL, "info", "warn", "fail"};
    for (int i = 0; i < v->nsteps; i++) {
        const dg_view_step *step = &v->steps[i];
        out[i] = NULL;
        if (!step->name || !step->status || strcmp(step->status, "skipped") == 0 ||
            strcmp(step->status, "interrupted") == 0)
            continue;
        int worst = strcmp(step->status, "failed") == 0 ? 3 : 0;
        for (int k = 0; k < judged->nfindings; k++) {
            const dg_view_finding *f = &judged->findings[k];
            if (f->section && strcmp(f->section, step->name) == 0 && f->rank > worst)
                worst = f->rank;
        }
        out[i] = worst ? names[worst] : "pass";
    }
}

/* Appends "what" to a list in buf, after sep when the list is not empty. */
static void list_add(char *buf, size_t len, const char *sep, const char *what)
{
    size_t n = strlen(buf);
    if (n < len)
        snprintf(buf + n, len - n, "%s%s", n ? sep : "", what);
}

/* Sweep stops that prove a ceiling (docs/schema/report.md, FINAL_GATE): out of
 * memory or the memory budget, swap or pressure, throughput falling, the time
 * budget, the tier's ceiling, the training set. A crash, a hang, a failure or an interruption
 * proves nothing. */
static bool proving_stop(const char *why)
{
    static const char *const ok[] = {
        "oom",  "budget", "swap",     "throughput-falling", "throughput-plateau",
        "time", "limit",  "train-set"};
    for (size_t i = 0; why && i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(why, ok[i]) == 0)
            return true;
    return false;
}

/* The training set's size as the training steps saw it; NAN when unknown
 * (synthetic data has no end). */
static double train_samples(const dg_record_view *v)
{
    const dg_rec_metric n = v->soak.train_samples;
    return n.valid && n.value > 0 ? n.value : NAN;
}

/* The throughput the route promises and where it was measured. Route
 * device: the device's best measured good trial at or below the sweep's safe
 * batch (dg_sweep_promise: the knee or the throughput maximum, never a batch
 * past the knee whose rate fell), the sweep having run on it; route cpu: the
 * cpu's best batch (the same reading of the sweep when it ran on the cpu,
 * else the best cpu side of the compare runs). *batch that trial's batch and
 * *safe the sweep's safe batch (the memory ceiling) when the promise comes
 * from the sweep; each NAN, and NAN returned, when there is none. */
static double route_throughput(const dg_record_view *v, const char *route, const char *backend,
                               double *batch, double *safe, const char **what)
{
    const dg_view_sweep *sweep = &v->sweep;
    const char *swept = sweep->backend;
    *batch = *safe = NAN;
    *what = "";
    if (!route || (strcmp(route, "device") != 0 && strcmp(route, "cpu") != 0))
        return NAN;
    bool device = strcmp(route, "device") == 0;
    const char *side = device ? backend : "cpu";
    if (side && swept && strcmp(side, swept) == 0) {
        double sps = NAN;
        if (!dg_sweep_promise(sweep, batch, &sps))
            return NAN;
        *safe = sweep->safe_batch.value;
        *what = device ? "the sweep's best rate" : "the cpu's best batch in the sweep";
        return sps;
    }
    if (device)
        return NAN;
    double best = NAN;
    const dg_view_compare *c = &v->compare;
    for (int i = 0; i < c->nruns; i++) {
        const dg_view_run *run = &c->runs[i];
        double sps = run->cpu_sps.value, b = run->batch.value;
        if (run->cpu_sps.valid && run->batch.valid && !(sps <= best)) {
            best = sps;
            *batch = b;
        }
    }
    *what = "the cpu's best batch in compare";
    return best;
}

/* Energy per sample of the sweep's good trial at batch (doubling or
 * bisection), where the device reported its energy; invalid otherwise. */
static dg_rec_metric trial_energy(const dg_view_sweep *s, double batch)
{
    const dg_view_trial *sets[2] = {s->trials, s->bisect};
    int n[2] = {s->ntrials, s->nbisect};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n[k]; i++)
            if (sets[k][i].batch.valid && sets[k][i].batch.value == batch &&
                sets[k][i].energy_per_sample.valid)
                return sets[k][i].energy_per_sample;
    return (dg_rec_metric){0};
}

/* A run's own verdict: what the run proved (the program's end, its epochs,
 * the findings by severity), never accept's promise, which needs a sweep a
 * run does not do. accepted and screening are false; NULL when out of memory. */
static cJSON *run_gate(const dg_record_view *v, const dg_record_view *judged, double mem_epochs)
{
    const dg_view_supervise *s = &v->supervise;
    char end[480];
    if (s->interrupted == 1)
        snprintf(end, sizeof end, "the run was interrupted");
    else if (s->timed_out == 1)
        snprintf(end, sizeof end, "the program ran past its time limit and was stopped");
    else if (s->signal)
        snprintf(end, sizeof end, "the program died of %s%s%s%s", s->signal,
                 s->error_line ? " (" : "", s->error_line ? s->error_line : "",
                 s->error_line ? ")" : "");
    else if (s->exit_status.valid && s->exit_status.value != 0)
        snprintf(end, sizeof end, "the program exited with status %.0f%s%s%s", s->exit_status.value,
                 s->error_line ? " (" : "", s->error_line ? s->error_line : "",
                 s->error_line ? ")" : "");
    else if (s->exit_status.valid)
        snprintf(end, sizeof end, "the program exited 0");
    else
        snprintf(end, sizeof end, "the program's end was not recorded");
    int n[4] = {0};
    char ids[3][300] = {"", "", ""};
    for (int i = 0; i < judged->nfindings; i++) {
        const dg_view_finding *f = &judged->findings[i];
        if (f->rank < 1 || f->rank > 3)
            continue;
        n[f->rank]++;
        list_add(ids[f->rank - 1], sizeof ids[0], ", ", f->id ? f->id : "?");
    }
    char found[1000] = "";
    static const char *const sev[] = {"info", "warn", "fail"};
    for (int r = 3; r >= 1; r--)
        if (n[r]) {
            char part[340];
            snprintf(part, sizeof part, "%d %s (%s)", n[r], sev[r - 1], ids[r - 1]);
            list_add(found, sizeof found, ", ", part);
        }
    char epochs[64] = "";
    if (v->soak.nepochs > 0)
        snprintf(epochs, sizeof epochs, " after %d epoch%s", v->soak.nepochs,
                 v->soak.nepochs == 1 ? "" : "s");
    char statement[1400];
    snprintf(statement, sizeof statement, "run: %s%s; %s%s", end, epochs,
             found[0] ? "findings: " : "no findings", found);
    cJSON *g = cJSON_CreateObject();
    if (!g)
        return NULL;
    cJSON_AddBoolToObject(g, "accepted", false);
    cJSON_AddBoolToObject(g, "screening", false);
    cJSON_AddStringToObject(g, "for", "run");
    /* The record's shape stays the evidence shape: what the run proved, and
     * no promise (a run owes no sweep, so nothing is missing). */
    cJSON *p = cJSON_AddObjectToObject(g, "proofs");
    cJSON_AddBoolToObject(p, "architecture", v->env.has_arch);
    cJSON_AddBoolToObject(p, "gate_log", v->gate.nbackends > 0);
    cJSON_AddBoolToObject(p, "sweep", false);
    cJSON_AddBoolToObject(p, "memory_curve", v->soak.nepochs >= mem_epochs);
    cJSON_AddArrayToObject(g, "missing");
    cJSON_AddItemToObject(g, "throughput", dg_json_metric(0, false, "samples/s"));
    cJSON_AddNullToObject(g, "batch");
    cJSON_AddNumberToObject(g, "fail_findings", n[3]);
    cJSON_AddNumberToObject(g, "blocking_fail_findings", n[3]);
    cJSON_AddNumberToObject(g, "warn_findings", n[2]);
    cJSON_AddStringToObject(g, "statement", statement);
    return g;
}

/* The four proofs a pack owes (architecture, gate log, sweep, memory curve)
 * into p, each true or false; the missing ones' keys (a new array) and their
 * words in lacks (len bytes). */
static cJSON *check_proofs(const dg_record_view *v, bool quick, double mem_epochs, cJSON *p,
                           char *lacks, size_t len)
{
    /* The sweep proves a ceiling only when it reached a real stop with at
     * least 4 trials; the memory curve needs mem_epochs epochs (the method's
     * rule is stated after 10) in the default tier. */
    int trials = v->sweep.ntrials;
    const char *stop = v->sweep.stopped_reason;
    int epochs = v->soak.nepochs;
    double need_epochs = quick ? 2 : mem_epochs;
    bool proofs[4] = {
        v->env.has_arch,
        v->gate.nbackends > 0,
        v->sweep.knee_is_number && trials >= 4 && proving_stop(stop),
        epochs >= need_epochs,
    };
    static const char *const keys[4] = {"architecture", "gate_log", "sweep", "memory_curve"};
    char shown[4][160];
    snprintf(shown[0], sizeof shown[0], "the architecture proof");
    snprintf(shown[1], sizeof shown[1], "the device gate log");
    if (!v->listed[DG_SEC_SWEEP])
        snprintf(shown[2], sizeof shown[2], "the batch sweep");
    else
        snprintf(shown[2], sizeof shown[2],
                 "a batch sweep that reached a stop with at least 4 trials (it ran %d, stopped: "
                 "%s)",
                 trials, stop ? stop : "no reason");
    if (!v->listed[DG_SEC_SOAK])
        snprintf(shown[3], sizeof shown[3], "the memory curve");
    else
        snprintf(shown[3], sizeof shown[3], "a memory curve of at least %.0f epochs (it has %d)",
                 need_epochs, epochs);
    cJSON *missing = cJSON_CreateArray();
    for (int i = 0; i < 4; i++) {
        cJSON_AddBoolToObject(p, keys[i], proofs[i]);
        if (!proofs[i]) {
            cJSON_AddItemToArray(missing, cJSON_CreateString(keys[i]));
            list_add(lacks, len, ", ", shown[i]);
        }
    }
    return missing;
}

/* The FINAL_GATE object of the record v judged as judged says (its findings
 * and decision); NULL when out of memory. */
static cJSON *final_gate(const dg_record_view *v, const dg_record_view *judged, double mem_epochs)
{
    if (v->kind && strcmp(v->kind, "run") == 0)
        return run_gate(v, judged, mem_epochs);
    bool quick = v->spec.quick == 1;
    cJSON *g = cJSON_CreateObject();
    char lacks[700] = "";
    cJSON *missing = check_proofs(v, quick, mem_epochs, cJSON_AddObjectToObject(g, "proofs"), lacks,
                                  sizeof lacks);
    /* On the cpu route, slow-device-data (the device does not pay off: the
     * reason for that route) judges the device, not the cpu: it does not
     * block the cpu's throughput. Every other fail finding does. */
    const char *route = judged->decision.route;
    bool cpu_route = route && strcmp(route, "cpu") == 0;
    int fails = 0, blocking = 0;
    for (int i = 0; i < judged->nfindings; i++) {
        const dg_view_finding *f = &judged->findings[i];
        if (f->rank != 3)
            continue;
        fails++;
        blocking += !(cpu_route && f->id && strcmp(f->id, "slow-device-data") == 0);
    }
    /* Every step that ran must have succeeded. */
    char failed_steps[200] = "";
    for (int i = 0; i < v->nsteps; i++) {
        const char *name = v->steps[i].name, *status = v->steps[i].status;
        /* Skipped steps follow a failed or interrupted one (or compare with
         * the cpu as the only path): the proofs they owe are judged above. */
        bool ok = status && (strcmp(status, "ok") == 0 || strcmp(status, "skipped") == 0);
        if (!ok)
            list_add(failed_steps, sizeof failed_steps, ", ", name ? name : "?");
    }
    const char *state = v->state;
    bool complete = state && strcmp(state, "complete") == 0;
    const char *backend = judged->decision.backend;
    double batch = NAN, safe = NAN;
    const char *where = "";
    double sps = route_throughput(v, route, backend, &batch, &safe, &where);
    if (!isfinite(batch))
        sps = NAN; /* a rate without its batch promises nothing */
    if (isnan(sps))
        safe = NAN;
    /* The safe batch never exceeds the training set. */
    double ntrain = train_samples(v);
    bool capped = isfinite(batch) && isfinite(ntrain) && batch > ntrain;
    if (capped)
        batch = ntrain;
    bool accepted = !quick && cJSON_GetArraySize(missing) == 0 && blocking == 0 && complete &&
                    !failed_steps[0] && !isnan(sps);

    char why[1400] = "", statement[2048];
    if (!complete)
        list_add(why, sizeof why, "; ",
                 !state                              ? "the run has no state"
                 : strcmp(state, "interrupted") == 0 ? "the run was interrupted"
                                                     : "the run did not complete");
    if (failed_steps[0]) {
        char m[260];
        snprintf(m, sizeof m, "not every step succeeded (%s)", failed_steps);
        list_add(why, sizeof why, "; ", m);
    }
    if (blocking) {
        char n[64];
        snprintf(n, sizeof n, "%d fail finding%s", blocking, blocking == 1 ? "" : "s");
        list_add(why, sizeof why, "; ", n);
    }
    if (lacks[0]) {
        char m[760];
        snprintf(m, sizeof m, "the pack lacks %s", lacks);
        list_add(why, sizeof why, "; ", m);
    }
    if (isnan(sps)) {
        char m[200];
        if (!route)
            snprintf(m, sizeof m, "the decision chose no route");
        else if (strcmp(route, "cpu") != 0 && strcmp(route, "device") != 0)
            snprintf(m, sizeof m, "the decision routes %s: no local throughput is promised", route);
        else
            snprintf(m, sizeof m, "no throughput was measured on the chosen route (%s%s%s)", route,
                     backend ? " " : "", backend ? backend : "");
        list_add(why, sizeof why, "; ", m);
    }
    const char *on = route && strcmp(route, "cpu") == 0 ? "cpu" : backend ? backend : "the device";
    char cap[96] = "";
    if (capped)
        snprintf(cap, sizeof cap, ", capped at the training set of %.0f samples", ntrain);
    /* The safe batch, said apart from the promise (past the knee a larger
     * batch fits but runs slower), in the words of what ended the sweep:
     * the memory ceiling only when memory did. */
    const char *bound = dg_sweep_bound_words(v->sweep.stopped_reason);
    char ceiling[300] = "";
    if (isfinite(safe) && safe == batch && !capped)
        snprintf(ceiling, sizeof ceiling, "; batch %.0f is also the safe batch, %s", safe, bound);
    else if (isfinite(safe)) {
        const dg_rec_metric at = v->sweep.safe_sps;
        char rate[64] = "";
        if (at.valid && safe > batch)
            snprintf(rate, sizeof rate, ", %.0f samples/s there", at.value);
        snprintf(ceiling, sizeof ceiling, "; safe batch %.0f is %s%s", safe, bound, rate);
    }
    /* Joules per sample beside samples/s where the device reports its energy. */
    dg_rec_metric jps = isnan(sps) ? (dg_rec_metric){0} : trial_energy(&v->sweep, batch);
    char energy[64] = "";
    if (jps.valid)
        snprintf(energy, sizeof energy, " (%.3g J/sample)", jps.value);
    char measured[600] = "nothing measured on the chosen route";
    if (!isnan(sps))
        snprintf(measured, sizeof measured, "measured %.0f samples/s%s at batch %.0f on %s%s%s",
                 sps, energy, batch, on, cap, ceiling);
    if (quick)
        snprintf(statement, sizeof statement,
                 "screening only (--quick is never accepted): %s%s%s%s; run accept without "
                 "--quick for a verdict",
                 measured, why[0] ? " (and: " : "", why, why[0] ? ")" : "");
    else if (accepted)
        snprintf(statement, sizeof statement,
                 "accepted: %.0f samples/s%s at batch %.0f on %s (%s%s%s)", sps, energy, batch, on,
                 where, cap, ceiling);
    else
        snprintf(statement, sizeof statement, "not accepted: throughput is not promised (%s)", why);

    cJSON_AddBoolToObject(g, "accepted", accepted);
    cJSON_AddBoolToObject(g, "screening", quick);
    dg_json_add_str(g, "route", route);
    cJSON_AddItemToObject(g, "missing", missing);
    cJSON_AddNumberToObject(g, "fail_findings", fails);
    cJSON_AddNumberToObject(g, "blocking_fail_findings", blocking);
    cJSON *fs = cJSON_AddArrayToObject(g, "failed_steps");
    for (int i = 0; i < v->nsteps; i++) {
        const char *name = v->steps[i].name, *status = v->steps[i].status;
        if (!status || (strcmp(status, "ok") != 0 && strcmp(status, "skipped") != 0))
            cJSON_AddItemToArray(fs, cJSON_CreateString(name ? name : "?"));
    }
    cJSON_AddItemToObject(g, "throughput",
                          dg_json_metric(isnan(sps) ? 0 : sps, !isnan(sps), "samples/s"));
    cJSON_AddItemToObject(g, "energy_per_sample",
                          dg_json_metric(jps.valid ? jps.value : 0, jps.valid, "J/sample"));
    if (isfinite(batch))
        cJSON_AddNumberToObject(g, "batch", batch);
    else
        cJSON_AddNullToObject(g, "batch");
    cJSON_AddBoolToObject(g, "batch_capped_to_train_set", capped);
    cJSON_AddItemToObject(g, "safe_batch",
                          dg_json_metric(isfinite(safe) ? safe : 0, isfinite(safe), "samples"));
    dg_json_add_str(g, "safe_batch_bound", isfinite(safe) ? bound : NULL);
    cJSON_AddStringToObject(g, "statement", statement);
    return g;
}

dg_status dg_evidence_finish(dg_ctx *ctx, const char *record_json, const char *overrides,
                             char **json)
{
    *json = NULL;
    if (!record_json)
        return dg_fail(ctx, DG_ERR_FORMAT, "evidence: no record");
    cJSON *rec = cJSON_Parse(record_json); /* the only parse of the record */
    const char *kind = dg_jstr(rec, "kind");
    const cJSON *version = dg_jpath(rec, "v");
    if (!cJSON_IsObject(rec) || !kind ||
        (strcmp(kind, "accept") != 0 && strcmp(kind, "run") != 0) || !cJSON_IsNumber(version) ||
        (version->valuedouble != 1 && version->valuedouble != 2)) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_FORMAT,
                       "evidence: not an accept or run record of version 1 or 2");
    }
    /* Judge the view, then read the judgement (its own small view) for the
     * verdicts and the final gate; the record is changed only after both
     * views are gone, since they point into it. */
    dg_record_view view, judged;
    cJSON *diag = NULL, *gate = NULL;
    const char **verdicts = NULL;
    dg_status st = dg_record_view_build(ctx, rec, &view);
    if (st == DG_OK)
        st = dg_diagnose_view(ctx, &view, overrides, &diag);
    memset(&judged, 0, sizeof judged);
    if (st == DG_OK)
        st = dg_record_view_build(ctx, diag, &judged);
    if (st == DG_OK && view.nsteps > 0) {
        verdicts = dg_calloc((size_t)view.nsteps, sizeof *verdicts);
        if (!verdicts)
            st = dg_fail(ctx, DG_ERR_NOMEM, "evidence: out of host memory");
    }
    int nsteps = view.nsteps;
    if (st == DG_OK) {
        step_verdicts(&view, &judged, verdicts);
        double mem_epochs = dg_view_threshold_value(&judged, "mem_epochs");
        gate = final_gate(&view, &judged, isfinite(mem_epochs) ? mem_epochs : 10);
        if (!gate)
            st = dg_fail(ctx, DG_ERR_NOMEM, "evidence: out of host memory");
    }
    dg_record_view_free(&judged);
    dg_record_view_free(&view);
    if (st != DG_OK) {
        dg_free(verdicts);
        cJSON_Delete(gate);
        cJSON_Delete(diag);
        cJSON_Delete(rec);
        return st;
    }
    static const char *const moved[] = {"thresholds", "findings", "decision"};
    for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(diag, moved[i]);
        put(rec, moved[i], v ? v : cJSON_CreateNull());
    }
    cJSON_Delete(diag);
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(rec, "steps");
    for (int i = 0; i < nsteps; i++)
        if (verdicts[i])
            put(cJSON_GetArrayItem(steps, i), "verdict", cJSON_CreateString(verdicts[i]));
    dg_free(verdicts);
    put(rec, "final_gate", gate);
    *json = dg_json_print(rec);
    cJSON_Delete(rec);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "evidence: out of host memory");
}
