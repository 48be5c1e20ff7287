/* The final gate and the decision over records, table-driven: the healthy
 * record (tests/data/records/healthy.json) made a default-tier run (quick
 * false, 10 soak epochs) is accepted on its route; each case patches a few
 * fields and states what the gate must say. The promise is the sweep's best
 * measured good trial at or below its safe batch, the safe batch said apart
 * (the memory ceiling only when memory ended the sweep), and the decision
 * recommends the same batch. The
 * accepted line always agrees
 * with the route; a failed step, a short soak, a sweep without a proving stop
 * and an inconclusive interval are never accepted. */
#include "core/core.h"
#include "core/json.h"

#include "check.h"

typedef struct patch {
    const char *path;
    const char *value; /* JSON text; NULL removes the item */
} patch;

typedef struct gate_case {
    const char *name;
    patch patches[8];
    bool accepted;
    const char *route;     /* decision.route */
    double batch;          /* final_gate.batch (NAN: null) */
    const char *statement; /* a substring of the statement */
    const char *missing;   /* a proof that must be listed missing, or NULL */
    double safe;           /* final_gate.safe_batch (0: not checked; NAN: not valid) */
    const char *reason;    /* a substring of one of decision.reasons, or NULL */
} gate_case;

static char *healthy_text;

/* Sets (or with value NULL removes) the item at path: the parent must exist;
 * the last part is a key or an array index (one past the end appends). */
static bool set_path(cJSON *root, const char *path, const char *value)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *last = NULL;
    for (char *p = buf; *p; p++)
        if (*p == '.' || *p == '[')
            last = p;
    cJSON *parent = root;
    const char *leaf = buf;
    if (last) {
        char sep = *last;
        *last = '\0';
        parent = (cJSON *)dg_jpath(root, buf);
        leaf = sep == '[' ? last : last + 1;
        if (sep == '[')
            *last = '[';
    }
    if (!parent)
        return false;
    cJSON *item = value ? cJSON_Parse(value) : NULL;
    if (value && !item)
        return false;
    if (leaf[0] == '[') {
        int i = atoi(leaf + 1);
        if (!item) {
            cJSON_DeleteItemFromArray(parent, i);
            return true;
        }
        if (i == cJSON_GetArraySize(parent))
            return cJSON_AddItemToArray(parent, item);
        return cJSON_ReplaceItemInArray(parent, i, item);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(parent, leaf);
    return item ? cJSON_AddItemToObject(parent, leaf, item) : true;
}

#define RUN0 "compare.runs[0]."
#define TEN_EPOCHS "[{},{},{},{},{},{},{},{},{},{}]"
#define CI(lo, hi)                                                                                 \
    "{\"lo\": {\"value\": " #lo ", \"unit\": \"x\", \"valid\": true}, "                            \
    "\"hi\": {\"value\": " #hi ", \"unit\": \"x\", \"valid\": true}}"
#define TRIAL(b, sps)                                                                              \
    "{\"batch\": " #b ", \"ended\": \"ok\", \"samples_per_s\": {\"value\": " #sps                  \
    ", \"unit\": \"samples/s\", \"valid\": true}}"
#define OOM_TRIAL(b) "{\"batch\": " #b ", \"ended\": \"device-oom\", \"reason\": \"out of memory\"}"
#define SAFE(b, sps, first)                                                                        \
    "{\"batch\": " #b ", \"samples_per_s\": {\"value\": " #sps                                     \
    ", \"unit\": \"samples/s\", \"valid\": true}, \"margin\": 0.05, \"first_failure\": " #first    \
    ", \"note\": null}"
#define PCT_CI(lo, hi)                                                                             \
    "{\"lo\": {\"value\": " #lo ", \"unit\": \"%\", \"valid\": true}, "                            \
    "\"hi\": {\"value\": " #hi ", \"unit\": \"%\", \"valid\": true}}"

static const gate_case cases[] = {
    {"default tier, every proof, a rate rising to the safe batch: accepted at the safe batch",
     {{NULL, NULL}},
     true,
     "device",
     64,
     "accepted: 2115 samples/s at batch 64 on opencl (the sweep's best rate; batch 64 is also "
     "the safe batch, the sweep's upper limit, not a memory ceiling)",
     NULL,
     64,
     "train at batch 64 or below (the sweep's safe batch)"},
    {"energy reported by the device: J/sample beside samples/s at the promised batch",
     {{"sweep.trials[3].energy_per_sample", "{\"value\": 0.0125, \"unit\": \"J/sample\", "
                                            "\"valid\": true}"},
      {"sweep.trials[2].energy_per_sample", "{\"value\": 0.5, \"unit\": \"J/sample\", "
                                            "\"valid\": true}"}},
     true,
     "device",
     64,
     "accepted: 2115 samples/s (0.0125 J/sample) at batch 64 on opencl",
     NULL,
     64,
     NULL},
    {"other processes took CPUs while devgate measured: inconclusive, never accepted",
     {{"gate.backends[0].matmul.window",
       "{\"others_cpus\": {\"value\": 1.6, \"unit\": \"cpus\", \"valid\": true}}"}},
     false,
     "inconclusive",
     NAN,
     "not accepted",
     NULL,
     0,
     "other processes ran during the measured windows"},
    {"a tight interval above the thresholds changes nothing",
     {{RUN0 "speedup_ci", CI(2.6, 3.4)}, {RUN0 "step_time_reduction_pct_ci", PCT_CI(61, 70)}},
     true,
     "device",
     64,
     "on opencl (the sweep's best rate; batch 64 is also the safe batch",
     NULL,
     64,
     NULL},
    {"throughput falls past the knee: the promise is at the knee, the safe batch said apart",
     {{"sweep.trials[4]", TRIAL(128, 1500)},
      {"sweep.trials[5]", TRIAL(256, 900)},
      {"sweep.stopped", "{\"reason\": \"throughput-falling\", \"at_batch\": 256}"},
      {"sweep.safe_batch", SAFE(256, 900, null)}},
     true,
     "device",
     64,
     "accepted: 2115 samples/s at batch 64 on opencl (the sweep's best rate; safe batch 256 is "
     "the largest batch tried, not a memory ceiling (the sweep stopped on falling throughput), "
     "900 samples/s there)",
     NULL,
     256,
     "train at batch 64 (the sweep's best rate, 2115 samples/s); the safe batch 256 is the "
     "largest batch tried, not a memory ceiling"},
    {"an out-of-memory stop makes the safe batch the memory ceiling",
     {{"sweep.trials[4]", TRIAL(128, 1500)},
      {"sweep.trials[5]", OOM_TRIAL(256)},
      {"sweep.stopped", "{\"reason\": \"oom\", \"at_batch\": 256}"},
      {"sweep.safe_batch", SAFE(128, 1500, 256)}},
     true,
     "device",
     64,
     "accepted: 2115 samples/s at batch 64 on opencl (the sweep's best rate; safe batch 128 is "
     "the memory ceiling, 1500 samples/s there)",
     NULL,
     128,
     "the safe batch 128 is the memory ceiling"},
    {"the training set stopped the sweep: the safe batch is its size, never a memory ceiling",
     {{"sweep.trials[4]", TRIAL(128, 1500)},
      {"sweep.stopped", "{\"reason\": \"train-set\", \"at_batch\": 128}"},
      {"sweep.safe_batch", SAFE(128, 1500, null)}},
     true,
     "device",
     64,
     "safe batch 128 is the training set's size, not a memory ceiling",
     NULL,
     128,
     NULL},
    {"a bisection trial at the safe batch is the best rate: promised there",
     {{"sweep.trials[4]", OOM_TRIAL(128)},
      {"sweep.bisect", "[" TRIAL(96, 2500) ", " OOM_TRIAL(112) "]"},
      {"sweep.stopped", "{\"reason\": \"oom\", \"at_batch\": 128}"},
      {"sweep.safe_batch", SAFE(96, 2500, 112)}},
     true,
     "device",
     96,
     "accepted: 2500 samples/s at batch 96 on opencl (the sweep's best rate; batch 96 is also "
     "the safe batch",
     NULL,
     96,
     "train at batch 96 or below (the sweep's safe batch)"},
    {"a faster good trial above the safe batch (inside the 5% margin) is never promised",
     {{"sweep.trials[4]", OOM_TRIAL(128)},
      {"sweep.bisect", "[" TRIAL(96, 2500) ", " OOM_TRIAL(100) "]"},
      {"sweep.stopped", "{\"reason\": \"oom\", \"at_batch\": 128}"},
      {"sweep.safe_batch", SAFE(64, 2114.698166659238, 100)}},
     true,
     "device",
     64,
     "accepted: 2115 samples/s at batch 64 on opencl",
     NULL,
     64,
     "train at batch 64 or below"},
    {"route cpu: the cpu's throughput at its best compare batch, never the device's",
     {{RUN0 "speedup.value", "1.1"},
      {RUN0 "step_time_reduction_pct.value", "9"},
      {RUN0 "busy_fraction.value", "0.1"}},
     true,
     "cpu",
     64,
     "accepted: 2133 samples/s at batch 64 on cpu",
     NULL,
     0,
     NULL},
    {"route cpu on a busy but slow device (speedup-near-one)",
     {{RUN0 "speedup.value", "1.1"}, {RUN0 "step_time_reduction_pct.value", "9"}},
     true,
     "cpu",
     64,
     "accepted: 2133 samples/s at batch 64 on cpu",
     NULL,
     0,
     NULL},
    {"route cpu, but the numbers drift: a fail finding blocks it",
     {{RUN0 "speedup.value", "1.1"},
      {RUN0 "step_time_reduction_pct.value", "9"},
      {RUN0 "verdict", "\"drift\""},
      {RUN0 "drift", "[\"loss_vs_ref.device\"]"}},
     false,
     "cpu",
     64,
     "1 fail finding",
     NULL,
     0,
     NULL},
    {"route cpu with the sweep on the cpu: its best sweep trial",
     {{RUN0 "speedup.value", "1.1"},
      {RUN0 "step_time_reduction_pct.value", "9"},
      {RUN0 "busy_fraction.value", "0.1"},
      {"sweep.spec.backend", "\"cpu\""}},
     true,
     "cpu",
     64,
     "2115 samples/s at batch 64 on cpu (the cpu's best batch in the sweep; batch 64 is also "
     "the safe batch",
     NULL,
     64,
     NULL},
    {"route cpu, sweep on the cpu, its rate falling past the knee: the cpu's best batch",
     {{RUN0 "speedup.value", "1.1"},
      {RUN0 "step_time_reduction_pct.value", "9"},
      {RUN0 "busy_fraction.value", "0.1"},
      {"sweep.spec.backend", "\"cpu\""},
      {"sweep.trials[4]", TRIAL(128, 1500)},
      {"sweep.stopped", "{\"reason\": \"throughput-falling\", \"at_batch\": 128}"},
      {"sweep.safe_batch", SAFE(128, 1500, null)}},
     true,
     "cpu",
     64,
     "2115 samples/s at batch 64 on cpu (the cpu's best batch in the sweep; safe batch 128 is "
     "the largest batch tried, not a memory ceiling (the sweep stopped on falling throughput), "
     "1500 samples/s there)",
     NULL,
     128,
     NULL},
    {"inconclusive: the speedup interval holds speedup_min, no route, not accepted",
     {{RUN0 "speedup.value", "1.3"},
      {RUN0 "speedup_ci", CI(0.9, 2.2)},
      {RUN0 "step_time_reduction_pct.value", "23"},
      {RUN0 "step_time_reduction_pct_ci", PCT_CI(-11, 55)}},
     false,
     "inconclusive",
     NAN,
     "the decision routes inconclusive",
     NULL,
     0,
     NULL},
    {"a failed step is never accepted",
     {{"steps[5].status", "\"failed\""}},
     false,
     "device",
     64,
     "not every step succeeded (profile)",
     NULL,
     0,
     NULL},
    {"an interrupted run is never accepted",
     {{"state", "\"interrupted\""}},
     false,
     "device",
     64,
     "the run was interrupted",
     NULL,
     0,
     NULL},
    {"a short soak is never accepted in the default tier",
     {{"soak.epochs", "[{},{}]"}},
     false,
     "device",
     64,
     "a memory curve of at least 10 epochs (it has 2)",
     "memory_curve",
     0,
     NULL},
    {"a sweep of one trial is not a sweep",
     {{"sweep.trials", "[{\"batch\": 8, \"ended\": \"ok\"}]"}},
     false,
     "device",
     NAN,
     "at least 4 trials (it ran 1",
     "sweep",
     0,
     NULL},
    {"a sweep ended by a crash proves no ceiling",
     {{"sweep.stopped.reason", "\"signal\""}},
     false,
     "device",
     64,
     "stopped: signal",
     "sweep",
     0,
     NULL},
    {"--quick is a screening, never accepted",
     {{"spec.quick", "true"}},
     false,
     "device",
     64,
     "screening only (--quick is never accepted): measured 2115",
     NULL,
     0,
     NULL},
    {"a remote route promises no local throughput",
     {{"soak.sampler.swap_growth.value", "300000000"}},
     false,
     "remote",
     NAN,
     "routes remote",
     NULL,
     0,
     NULL},
    {"the safe batch never exceeds the training set",
     {{"soak.data", "{\"train_samples\": 40}"}},
     true,
     "device",
     40,
     "capped at the training set of 40 samples",
     NULL,
     0,
     NULL},
};

static void run_case(const gate_case *k)
{
    cJSON *rec = cJSON_Parse(healthy_text);
    static const patch base[] = {{"spec.quick", "false"}, {"soak.epochs", TEN_EPOCHS}};
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        CHECK(set_path(rec, base[i].path, base[i].value));
    for (const patch *p = k->patches; p->path; p++)
        CHECK_MSG(set_path(rec, p->path, p->value), "%s: patch %s", k->name, p->path);
    /* The record as accept leaves it: no findings, decision or gate yet. */
    cJSON_DeleteItemFromObject(rec, "findings");
    cJSON_DeleteItemFromObject(rec, "decision");
    cJSON_DeleteItemFromObject(rec, "final_gate");
    char *text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    dg_ctx *ctx = dg_ctx_new();
    char *out = NULL;
    dg_status st = dg_evidence_finish(ctx, text, NULL, &out);
    CHECK_MSG(st == DG_OK, "%s: %s", k->name, dg_errmsg(ctx));
    cJSON *r = cJSON_Parse(out);
    const char *route = dg_jstr(r, "decision.route");
    const char *statement = dg_jstr(r, "final_gate.statement");
    bool accepted = dg_jbool(r, "final_gate.accepted") == 1;
    double batch = dg_jnum(r, "final_gate.batch");
    if (getenv("DG_GATE_VERBOSE"))
        fprintf(stderr, "%s\n  route %s · %s\n", k->name, route ? route : "-",
                statement ? statement : "-");
    CHECK_MSG(accepted == k->accepted, "%s: accepted %d: %s", k->name, accepted,
              statement ? statement : "(none)");
    /* Energy per sample is recorded exactly when the promised trial reported it. */
    bool jps = k->statement && strstr(k->statement, "J/sample");
    CHECK_MSG((dg_jbool(r, "final_gate.energy_per_sample.valid") == 1) == jps &&
                  (jps || dg_jbool(r, "final_gate.energy_per_sample.valid") == 0),
              "%s: energy_per_sample %s", k->name,
              dg_jbool(r, "final_gate.energy_per_sample.valid") == 1 ? "valid" : "not valid");
    if (jps)
        CHECK(dg_jnum(r, "final_gate.energy_per_sample.value") == 0.0125);
    CHECK_MSG(route && !strcmp(route, k->route), "%s: route %s, not %s", k->name,
              route ? route : "(none)", k->route);
    CHECK_MSG(isnan(k->batch) ? !accepted || isnan(batch) : batch == k->batch,
              "%s: batch %g, not %g", k->name, batch, k->batch);
    CHECK_MSG(statement && strstr(statement, k->statement), "%s: statement '%s' lacks '%s'",
              k->name, statement ? statement : "(none)", k->statement);
    /* The accepted line agrees with the route: it names the route's side. */
    if (accepted) {
        const char *on = !strcmp(route, "cpu") ? "on cpu" : "on opencl";
        CHECK_MSG(strstr(statement, on) != NULL, "%s: '%s' is not %s", k->name, statement, on);
        CHECK_MSG(!strncmp(statement, "accepted: ", 10), "%s: %s", k->name, statement);
    } else {
        CHECK_MSG(strncmp(statement, "accepted", 8) != 0, "%s: %s", k->name, statement);
    }
    const cJSON *safe = dg_jpath(r, "final_gate.safe_batch");
    const cJSON *unit = cJSON_GetObjectItemCaseSensitive(safe, "unit");
    CHECK_MSG(cJSON_IsString(unit) && !strcmp(unit->valuestring, "samples") &&
                  cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(safe, "valid")),
              "%s: final_gate.safe_batch is not a METRIC(samples)", k->name);
    double sv = dg_json_metric_value(safe);
    if (k->safe != 0)
        CHECK_MSG(isnan(k->safe) ? isnan(sv) : sv == k->safe, "%s: safe batch %g, not %g", k->name,
                  sv, k->safe);
    if (k->reason) {
        bool said = false;
        const cJSON *why;
        cJSON_ArrayForEach(why, dg_jpath(r, "decision.reasons"))
        {
            said = said || (cJSON_IsString(why) && strstr(why->valuestring, k->reason));
        }
        CHECK_MSG(said, "%s: no decision reason says '%s'", k->name, k->reason);
        if (!said)
            for (const cJSON *w = cJSON_GetArrayItem(dg_jpath(r, "decision.reasons"), 0); w;
                 w = w->next)
                fprintf(stderr, "  reason: %s\n", cJSON_IsString(w) ? w->valuestring : "?");
    }
    if (k->missing) {
        bool listed = false;
        const cJSON *m;
        cJSON_ArrayForEach(m, dg_jpath(r, "final_gate.missing"))
        {
            listed = listed || (cJSON_IsString(m) && !strcmp(m->valuestring, k->missing));
        }
        CHECK_MSG(listed, "%s: %s not listed missing", k->name, k->missing);
    }
    CHECK(cJSON_IsBool(dg_jpath(r, "final_gate.screening")));
    cJSON_Delete(r);
    dg_string_free(out);
    cJSON_free(text);
    dg_ctx_free(ctx);
}

int main(void)
{
    const char *src = getenv("DEVGATE_SRC");
    if (!src)
        check_skip("DEVGATE_SRC is not set (run through ctest)");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/records/healthy.json", src);
    healthy_text = dg_read_file(path, 1 << 20, NULL);
    if (!healthy_text) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_case(&cases[i]);
    dg_free(healthy_text);
    CHECK_DONE();
}
