/* The diagnosis rules and the routing decision, table-driven over recorded
 * evidence: a healthy record (tests/data/records/healthy.json, derived from a
 * real lenet run on PoCL OpenCL vs cpu) yields no warn/fail finding and the
 * route "device"; each case patches a few fields and expects one rule to
 * fire with a severity, and where it matters the route. Set
 * DG_RULES_VERBOSE=1 to print every diagnosis. */
#include "core/core.h"
#include "core/json.h"
#include "diagnose/diagnose.h"

#include "check.h"

#include <stdbool.h>

static char *healthy_text;

typedef struct patch {
    const char *path;  /* "compare.runs[0].busy_fraction.value" */
    const char *value; /* JSON text; NULL removes the item */
} patch;

typedef struct rule_case {
    const char *name;
    patch patches[5];
    const char *overrides;
    const char *fires;    /* rule id expected ... */
    const char *severity; /* ... with this severity */
    const char *silent;   /* a rule id that must not fire, or NULL */
    const char *route;    /* expected route, or NULL */
} rule_case;

/* Sets (or with value NULL removes) the item at path; the last part may be a
 * new key or the index one past the end of an array. */
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
        if (!cJSON_IsArray(parent))
            return cJSON_Delete(item), false;
        if (!item) {
            cJSON_DeleteItemFromArray(parent, i);
            return true;
        }
        if (i == cJSON_GetArraySize(parent))
            return cJSON_AddItemToArray(parent, item);
        return cJSON_ReplaceItemInArray(parent, i, item);
    }
    if (!cJSON_IsObject(parent))
        return cJSON_Delete(item), false;
    cJSON_DeleteItemFromObjectCaseSensitive(parent, leaf);
    return item ? cJSON_AddItemToObject(parent, leaf, item) : true;
}

/* The healthy record with the patches applied, as text (dg_free). */
static char *patched(const patch *ps)
{
    cJSON *rec = cJSON_Parse(healthy_text);
    for (const patch *p = ps; p && p->path; p++)
        CHECK_MSG(set_path(rec, p->path, p->value), "patch %s", p->path);
    char *s = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    return s;
}

/* Runs the diagnosis; returns the parsed output or NULL (status in *st). */
static cJSON *diagnose(const char *rec, const char *overrides, dg_status *st)
{
    dg_ctx *ctx = dg_ctx_new();
    char *out = NULL;
    *st = dg_diagnose(ctx, rec, overrides, &out);
    if (*st != DG_OK && getenv("DG_RULES_VERBOSE"))
        fprintf(stderr, "diagnose: %s: %s\n", dg_status_name(*st), dg_errmsg(ctx));
    cJSON *o = out ? cJSON_Parse(out) : NULL;
    if (out && getenv("DG_RULES_VERBOSE")) {
        char *pretty = cJSON_Print(o);
        fprintf(stderr, "%s\n", pretty);
        cJSON_free(pretty);
    }
    dg_string_free(out);
    dg_ctx_free(ctx);
    return o;
}

static const cJSON *find(const cJSON *out, const char *id)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(out, "findings"))
    {
        if (!strcmp(dg_jstr(f, "id"), id))
            return f;
    }
    return NULL;
}

static int count_at_least(const cJSON *out, const char *sev)
{
    int n = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(out, "findings"))
    {
        const char *s = dg_jstr(f, "severity");
        if (!strcmp(sev, "warn") ? strcmp(s, "info") != 0 : !strcmp(s, sev))
            n++;
    }
    return n;
}

/* Every finding has the FINDING shape, the evidence names section, field,
 * value and unit, and the list is sorted fail > warn > info. */
static void check_shape(const char *name, const cJSON *out)
{
    CHECK_MSG(cJSON_IsObject(out), "%s: no output", name);
    CHECK_MSG(dg_jnum(out, "v") == 1, "%s: v", name);
    CHECK_MSG(cJSON_IsObject(cJSON_GetObjectItem(out, "thresholds")), "%s: thresholds", name);
    int last = 3;
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(out, "findings"))
    {
        const char *sev = dg_jstr(f, "severity");
        int rank = !strcmp(sev, "fail") ? 2 : !strcmp(sev, "warn") ? 1 : 0;
        CHECK_MSG(rank <= last, "%s: %s out of order", name, dg_jstr(f, "id"));
        last = rank;
        CHECK(dg_jstr(f, "title") && dg_jstr(f, "hypothesis") && dg_jstr(f, "action"));
        const cJSON *ev = cJSON_GetObjectItem(f, "evidence");
        CHECK_MSG(cJSON_GetArraySize(ev) > 0, "%s: %s has no evidence", name, dg_jstr(f, "id"));
        const cJSON *e;
        cJSON_ArrayForEach(e, ev)
        {
            CHECK(dg_jstr(e, "section") && dg_jstr(e, "field"));
            CHECK(cJSON_HasObjectItem(e, "value") && cJSON_HasObjectItem(e, "unit"));
        }
    }
    const cJSON *dec = cJSON_GetObjectItem(out, "decision");
    CHECK_MSG(dg_jstr(dec, "route"), "%s: no route", name);
    CHECK_MSG(cJSON_GetArraySize(cJSON_GetObjectItem(dec, "reasons")) > 0, "%s: no reason", name);
}

#define RUN0 "compare.runs[0]."
#define SOAK "soak.soak."
/* A measured window in which a CPU hog took 1.6 of 2 CPUs. */
#define HOG_WINDOW                                                                                 \
    "{\"others_cpus\": {\"value\": 1.6, \"unit\": \"cpus\", \"valid\": true}, "                    \
    "\"others_share\": {\"value\": 0.8, \"unit\": \"fraction\", \"valid\": true}, "                \
    "\"top\": [{\"pid\": 4242, \"name\": \"hog\", \"cpu_percent\": {\"value\": 160, \"unit\": "    \
    "\"percent\", \"valid\": true}}]}"
/* A 30 s run at 35% of one core on 2 cores. */
#define IDLE_ON_TWO                                                                                \
    "{\"exit_status\": 0, \"wall\": {\"value\": 30, \"unit\": \"s\", \"valid\": true}, "           \
    "\"samples\": {\"cpu_pct_median\": {\"value\": 35, \"unit\": \"percent\", \"valid\": true}, "  \
    "\"cores\": {\"value\": 2, \"unit\": \"cores\", \"valid\": true}}}"
#define INVALID(u) "{\"value\": null, \"unit\": \"" u "\", \"valid\": false}"
#define M(v, u) "{\"value\": " v ", \"unit\": \"" u "\", \"valid\": true}"
/* A soak growth_ci with one source's interval (the others absent). */
#define GROWTH_CI(src, p, lo, hi)                                                                  \
    "{\"" src "\": {\"point\": " M(p, "%") ", \"lo\": " M(lo, "%") ", \"hi\": " M(hi, "%") "}}"
#define RATIO_CI(p, lo, hi)                                                                        \
    "{\"point\": " M(p, "ratio") ", \"lo\": " M(lo, "ratio") ", \"hi\": " M(hi, "ratio") "}"

static const char failed_run[] = "{\"batch\": 512, \"status\": \"device-oom\", \"failed\": "
                                 "\"opencl\", \"error\": \"out of device memory\", "
                                 "\"within_tolerance\": false}";
static const char python_mixed[] =
    "{\"reference_arch\": \"aarch64\", \"arch_matches_host\": true, \"mixed_extensions\": "
    "[{\"path\": \"torch/_C.so\", \"arch\": [\"x86_64\"]}], \"mixed_extensions_truncated\": 2}";
static const char fallback_op[] =
    "{\"op\": \"conv2d_bwd\", \"shape\": \"conv2d_bwd n64\", \"backend\": \"opencl\", "
    "\"fallback\": true, \"calls\": 10, \"ms_total\": 300, \"ms_mean\": 30, \"share\": 0.6}";

/* An slo record's spec and one LEVEL (concurrency, verdict, TTFT p50, TPOT
 * p50, TTFT p99 with its interval, beside) for the slo rules' cases. */
#define SLO_SPEC                                                                                   \
    "{\"percentile\": 99, \"confidence\": 0.99, \"target\": "                                      \
    "\"http://127.0.0.1:1/v1/completions\", "                                                      \
    "\"bounds\": [{\"metric\": \"ttft\", \"limit\": {\"value\": 500, \"unit\": \"ms\", "           \
    "\"valid\": true}}]}"
#define SLO_PCT(p, v, lo, hi)                                                                      \
    "{\"p\": " #p ", \"value\": {\"value\": " #v                                                   \
    ", \"unit\": \"ms\", \"valid\": true}, \"lo\": " #lo ", \"hi\": " #hi "}"
#define SLO_LEVEL(c, state, ttft50, tpot50, ttft99, lo, hi, beside)                                \
    "{\"concurrency\": " #c ", \"beside\": " beside ", \"verdict\": {\"state\": \"" state          \
    "\", \"n\": 1001, \"over\": 3}, \"requests\": {\"sent\": 1001, \"ok\": 1001, \"failed\": 0, "  \
    "\"timeouts\": 0}, \"latency\": {\"ttft\": {\"n\": 1001, \"percentiles\": [" SLO_PCT(          \
        50, ttft50, 0, 0) "," SLO_PCT(99, ttft99, lo,                                              \
                                      hi) "]}, \"tpot\": {\"n\": 1001, "                           \
                                          "\"percentiles\": [" SLO_PCT(50, tpot50, 0, 0) "]}}}"

static const rule_case cases[] = {
    {"speedup interval holds speedup_min: inconclusive, no route",
     {{RUN0 "speedup.value", "1.3"},
      {RUN0 "speedup_ci", "{\"lo\": {\"value\": 0.9, \"unit\": \"x\", \"valid\": true}, "
                          "\"hi\": {\"value\": 2.2, \"unit\": \"x\", \"valid\": true}}"},
      {RUN0 "step_time_reduction_pct.value", "23"}},
     NULL,
     "verdict-inconclusive",
     "warn",
     "speedup-near-one",
     "inconclusive"},
    {"speedup interval wholly below speedup_min: cpu, not inconclusive",
     {{RUN0 "speedup.value", "1.1"},
      {RUN0 "speedup_ci", "{\"lo\": {\"value\": 1.0, \"unit\": \"x\", \"valid\": true}, "
                          "\"hi\": {\"value\": 1.2, \"unit\": \"x\", \"valid\": true}}"},
      {RUN0 "step_time_reduction_pct.value", "9"}},
     NULL,
     "speedup-near-one",
     "warn",
     "verdict-inconclusive",
     "cpu"},
    {"another process ran during a measured window",
     {{RUN0 "repetitions", "{\"cpu\": [{\"window\": {\"others_cpus\": {\"value\": 1.0, "
                           "\"unit\": \"cpus\", \"valid\": true}, \"top\": [{\"pid\": 42, "
                           "\"name\": \"dghog\", \"cpu_percent\": {\"value\": 98, \"unit\": "
                           "\"percent\", \"valid\": true}}]}}], \"device\": []}"}},
     NULL,
     "contended",
     "warn",
     NULL,
     "inconclusive"}, /* a contended measurement routes nowhere */
    {"the cpu baseline runs a generic BLAS kernel",
     {{"gate.backends[0].blas", "{\"library\": \"OpenBLAS\", \"kernel\": \"Prescott\", "
                                "\"kernel_vector_bits\": {\"value\": 128, \"unit\": \"bits\", "
                                "\"valid\": true}, \"generic_kernel\": true, \"fix\": \"set "
                                "OPENBLAS_CORETYPE=Zen\"}"},
      {"gate.backends[0].matmul.fraction_of_peak", "{\"value\": 0.1, \"unit\": \"fraction\", "
                                                   "\"valid\": true}"}},
     NULL,
     "cpu-baseline-unfair",
     "warn",
     NULL,
     "device"},
    {"slow device, idle",
     {{RUN0 "step_time_reduction_pct.value", "7"},
      {RUN0 "speedup.value", "1.075"},
      {RUN0 "busy_fraction.value", "0.12"}},
     NULL,
     "slow-device-data",
     "fail",
     "speedup-near-one",
     "cpu"},
    {"slow device, busy not reported",
     {{RUN0 "step_time_reduction_pct.value", "7"},
      {RUN0 "speedup.value", "1.075"},
      {RUN0 "busy_fraction", INVALID("fraction")}},
     NULL,
     "slow-device-data",
     "warn",
     NULL,
     "cpu"},
    {"slow device, threshold lowered",
     {{RUN0 "step_time_reduction_pct.value", "7"},
      {RUN0 "speedup.value", "1.075"},
      {RUN0 "busy_fraction.value", "0.12"}},
     "device_min_reduction_pct=5",
     "speedup-near-one",
     "warn",
     "slow-device-data",
     "cpu"},
    {"slow device, busy threshold lowered",
     {{RUN0 "step_time_reduction_pct.value", "7"},
      {RUN0 "speedup.value", "1.075"},
      {RUN0 "busy_fraction.value", "0.12"}},
     "device_busy_min=0.1",
     "speedup-near-one",
     "warn",
     "slow-device-data",
     "cpu"},
    {"slow device, busy not reported, speedup above speedup_min",
     {{RUN0 "step_time_reduction_pct.value", "21"},
      {RUN0 "speedup.value", "1.27"},
      {RUN0 "busy_fraction", INVALID("fraction")}},
     NULL,
     "slow-device-data",
     "warn",
     "speedup-near-one",
     "cpu"},
    {"busy but near one",
     {{RUN0 "step_time_reduction_pct.value", "9"}, {RUN0 "speedup.value", "1.1"}},
     NULL,
     "speedup-near-one",
     "warn",
     "slow-device-data",
     "cpu"},
    {"speedup_min raised",
     {{NULL, NULL}},
     "speedup_min=4",
     "speedup-near-one",
     "warn",
     NULL,
     "cpu"},
    {"speedup invalid",
     {{RUN0 "speedup", INVALID("x")},
      {RUN0 "step_time_reduction_pct", INVALID("%")},
      {RUN0 "busy_fraction.value", "0.01"}},
     "speedup_min=4",
     NULL,
     NULL,
     "speedup-near-one",
     "device"},
    {"retained references",
     {{SOAK "growth.allocator_allocated.value", "31"}},
     NULL,
     "retained-refs",
     "warn",
     "working-set-change",
     "remote"},
    /* growth judged on its 95% interval (soak growth_ci) */
    {"retained references, interval above",
     {{SOAK "growth.allocator_allocated.value", "31"},
      {SOAK "growth_ci", GROWTH_CI("allocator_allocated", "30", "28", "33")}},
     NULL,
     "retained-refs",
     "warn",
     "working-set-change",
     "remote"},
    {"retained references, interval holds the threshold",
     {{SOAK "growth.allocator_allocated.value", "31"},
      {SOAK "growth_ci", GROWTH_CI("allocator_allocated", "27", "20", "34")}},
     NULL,
     "retained-refs",
     "info",
     NULL,
     "device"},
    {"retained references, interval below",
     {{SOAK "growth.allocator_allocated.value", "31"},
      {SOAK "growth_ci", GROWTH_CI("allocator_allocated", "20", "18", "25")}},
     NULL,
     NULL,
     NULL,
     "retained-refs",
     "device"},
    {"retained references, threshold raised",
     {{SOAK "growth.allocator_allocated.value", "31"}},
     "mem_growth_pct=40",
     NULL,
     NULL,
     "retained-refs",
     "device"},
    {"retained references, growth invalid",
     {{SOAK "growth.allocator_allocated", INVALID("%")},
      {SOAK "growth.footprint", INVALID("%")},
      {SOAK "growth.allocator_reserved", INVALID("%")}},
     "mem_growth_pct=0",
     NULL,
     NULL,
     "retained-refs",
     "device"},
    {"staircase aligned with validation",
     {{SOAK "growth.footprint.value", "40"},
      {SOAK "staircase.aligned", "true"},
      {SOAK "staircase.validation_epochs", "[3, 6]"}},
     NULL,
     "working-set-change",
     "info",
     "retained-refs",
     "device"},
    {"too few epochs",
     {{SOAK "epochs_recorded", "4"}, {SOAK "growth.allocator_allocated.value", "31"}},
     NULL,
     "memory-short",
     "info",
     "retained-refs",
     "device"},
    /* issue 21, item 2: the short soak screens for a leak on its interval. */
    {"too few epochs, growth interval above the threshold: suspected",
     {{SOAK "epochs_recorded", "6"},
      {SOAK "growth.allocator_allocated.value", "45"},
      {SOAK "growth_ci", GROWTH_CI("allocator_allocated", "45", "38", "52")}},
     NULL,
     "memory-short",
     "warn",
     "retained-refs",
     "device"},
    {"too few epochs, growth interval holds the threshold",
     {{SOAK "epochs_recorded", "6"},
      {SOAK "growth.allocator_allocated.value", "31"},
      {SOAK "growth_ci", GROWTH_CI("allocator_allocated", "31", "20", "40")}},
     NULL,
     "memory-short",
     "info",
     "retained-refs",
     "device"},
    {"mem_epochs lowered",
     {{SOAK "epochs_recorded", "4"}, {SOAK "growth.allocator_allocated.value", "31"}},
     "mem_epochs=4",
     "retained-refs",
     "warn",
     "memory-short",
     "remote"},
    /* Live (allocated) memory is judged whether or not the cache was emptied
     * (issue 21: a CUDA leak under plain devgate run got only
     * memory-not-emptied); reserved memory and the footprint need it. */
    {"cache not emptied, allocated memory grows",
     {{SOAK "empty_cache", "false"}, {SOAK "growth.allocator_allocated.value", "31"}},
     NULL,
     "retained-refs",
     "warn",
     NULL,
     "remote"},
    {"cache not emptied, allocated memory grows: the cache's words too",
     {{SOAK "empty_cache", "false"}, {SOAK "growth.allocator_allocated.value", "31"}},
     NULL,
     "memory-not-emptied",
     "info",
     NULL,
     "remote"},
    {"cache not emptied, only reserved memory and the footprint grow",
     {{SOAK "empty_cache", "false"},
      {SOAK "growth.allocator_reserved.value", "60"},
      {SOAK "growth.footprint.value", "60"}},
     NULL,
     "memory-not-emptied",
     "info",
     "retained-refs",
     "device"},
    {"numerics drift",
     {{RUN0 "verdict", "\"drift\""},
      {RUN0 "within_tolerance", "false"},
      {RUN0 "drift", "[\"loss_vs_ref.device\"]"},
      {RUN0 "loss_vs_ref.device.value", "0.0032"},
      {"compare.within_tolerance", "false"}},
     NULL,
     "numerics-drift",
     "fail",
     NULL,
     "cpu"},
    {"compare run failed",
     {{"compare.runs[1]", failed_run}, {"compare.within_tolerance", "false"}},
     NULL,
     "compare-failed",
     "fail",
     NULL,
     "cpu"},
    {"slowing down, a point ratio without an interval: a suspicion only",
     {{SOAK "step_trend.thirds_ratio.value", "1.5"}},
     NULL,
     "slowing-down",
     "info",
     NULL,
     "device"},
    {"slowing down, interval above",
     {{SOAK "step_trend.thirds_ratio.value", "1.5"},
      {SOAK "step_trend.thirds_ratio_ci", RATIO_CI("1.45", "1.3", "1.6")}},
     NULL,
     "slowing-down",
     "warn",
     NULL,
     "device"},
    {"slowing down, interval above, while other work took the cores: theirs, at info",
     {{SOAK "step_trend.thirds_ratio.value", "1.5"},
      {SOAK "step_trend.thirds_ratio_ci", RATIO_CI("1.45", "1.3", "1.6")},
      {"soak.contention", HOG_WINDOW}},
     NULL,
     "slowing-down",
     "info",
     NULL,
     NULL},
    {"slowing down, interval holds the threshold",
     {{SOAK "step_trend.thirds_ratio.value", "1.5"},
      {SOAK "step_trend.thirds_ratio_ci", RATIO_CI("1.3", "1.1", "1.6")}},
     NULL,
     "slowing-down",
     "info",
     NULL,
     "device"},
    {"slowing down, interval below",
     {{SOAK "step_trend.thirds_ratio.value", "1.5"},
      {SOAK "step_trend.thirds_ratio_ci", RATIO_CI("1.1", "1.0", "1.19")}},
     NULL,
     NULL,
     NULL,
     "slowing-down",
     "device"},
    {"slowing down over 2 x 10 steps",
     {{SOAK "step_trend.thirds_ratio.value", "1.5"}, {SOAK "epochs_recorded", "2"}},
     NULL,
     NULL,
     NULL,
     "slowing-down",
     "device"},
    {"slowing down, ratio invalid",
     {{SOAK "step_trend.thirds_ratio", INVALID("ratio")}},
     "slowdown_ratio=0",
     NULL,
     NULL,
     "slowing-down",
     "device"},
    {"fallbacks in compare",
     {{RUN0 "device.fallbacks", "3"}, {"profile", "null"}},
     NULL,
     "operator-gap",
     "warn",
     NULL,
     "device"},
    {"heavy fallbacks",
     {{"profile.ops[4]", fallback_op}},
     NULL,
     "operator-gap",
     "fail",
     NULL,
     "remote"},
    {"heavy fallbacks in a run",
     {{"profile.ops[4]", fallback_op}, {"kind", "\"run\""}},
     NULL,
     "operator-gap",
     "fail",
     NULL,
     "native"},
    {"heavy fallbacks, share threshold raised",
     {{"profile.ops[4]", fallback_op}},
     "fallback_share_fail=0.9",
     "operator-gap",
     "warn",
     NULL,
     "device"},
    {"heavy fallbacks, thresholds raised",
     {{"profile.ops[4]", fallback_op}},
     "fallback_share_fail=0.9,fallback_share=0.7",
     "operator-gap",
     "info",
     NULL,
     "device"},
    {"sweep out of memory",
     {{"sweep.stopped", "{\"reason\": \"oom\", \"at_batch\": 128}"},
      {"sweep.safe_batch.first_failure", "128"},
      {"sweep.safe_batch.batch", "64"}},
     NULL,
     "sweep-memory",
     "info",
     "batch-above-safe",
     "device"},
    {"sweep trial killed",
     {{"sweep.stopped", "{\"reason\": \"signal\", \"at_batch\": 128}"},
      {"sweep.trials[4]", "{\"batch\": 128, \"ended\": \"signal\", \"signal\": \"SIGKILL\", "
                          "\"reason\": \"killed by SIGKILL\"}"}},
     NULL,
     "sweep-memory",
     "warn",
     NULL,
     "device"},
    {"batch above safe", {{"spec.batch", "256"}}, NULL, "batch-above-safe", "warn", NULL, "device"},
    {"data starved",
     {{"profile.phases.queue_wait.share.value", "0.35"}},
     NULL,
     "data-starved",
     "warn",
     NULL,
     "device"},
    {"data starved while other work took the cores: named, at info",
     {{"profile.phases.queue_wait.share.value", "0.35"}, {"soak.contention", HOG_WINDOW}},
     NULL,
     "data-starved",
     "info",
     NULL,
     NULL},
    {"data starved, share invalid",
     {{"profile.phases.queue_wait.share", INVALID("fraction")}},
     "data_wait_share=0",
     NULL,
     NULL,
     "data-starved",
     "device"},
    {"noisy profile",
     {{"profile.step.stats.iqr_share.value", "0.3"},
      {"env.processes.top_cpu[1].cpu_percent.value", "95"},
      {"profile.spec.sync_every", "1"}},
     NULL,
     "noisy-measurement",
     "warn",
     NULL,
     "device"},
    {"noisy profile, ratio raised",
     {{"profile.step.stats.iqr_share.value", "0.3"}, {"profile.spec.sync_every", "1"}},
     "noise_iqr_ratio=0.5",
     NULL,
     NULL,
     "noisy-measurement",
     "device"},
    {"noisy sweep trial",
     {{"sweep.trials[1].step_ms.iqr.value", "5"}},
     NULL,
     "noisy-measurement",
     "warn",
     NULL,
     "device"},
    {"noisy sweep trial of 3 steps",
     {{"sweep.trials[1].step_ms.iqr.value", "5"}, {"sweep.trials[1].step_ms.steps", "3"}},
     NULL,
     NULL,
     NULL,
     "noisy-measurement",
     "device"},
    {"noisy profile of 4 steps",
     {{"profile.step.stats.iqr_share.value", "0.3"},
      {"profile.step.stats.n", "4"},
      {"profile.spec.sync_every", "1"}},
     NULL,
     NULL,
     NULL,
     "noisy-measurement",
     "device"},
    {"noisy profile of an unsynchronised device window",
     {{"profile.step.stats.iqr_share.value", "0.3"}},
     NULL,
     NULL,
     NULL,
     "noisy-measurement",
     "device"},
    {"program failed",
     {{"supervise",
       "{\"exit_status\": 3, \"signal\": null, \"timed_out\": false, \"interrupted\": false}"}},
     NULL,
     "program-failed",
     "fail",
     "events-lost",
     NULL},
    {"program killed",
     {{"supervise", "{\"exit_status\": null, \"signal\": \"SIGKILL\", \"interrupted\": false}"}},
     NULL,
     "program-failed",
     "fail",
     NULL,
     NULL},
    {"program interrupted",
     {{"supervise", "{\"exit_status\": null, \"signal\": \"SIGINT\", \"interrupted\": true}"}},
     NULL,
     NULL,
     NULL,
     "program-failed",
     NULL},
    {"events lost",
     {{"supervise",
       "{\"exit_status\": 0, \"signal\": null, \"events\": {\"lines\": 100, \"dropped\": 40, "
       "\"malformed\": 2, \"overlong\": 1}}"}},
     NULL,
     "events-lost",
     "warn",
     "program-failed",
     NULL},
    {"footprint grows steadily without a probe",
     {{"soak", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"series\": [{\"t\": 0, \"rss\": 300000000},{\"t\": 1, \"rss\": "
       "320000000},{\"t\": 2, \"rss\": 340000000},{\"t\": 3, \"rss\": 360000000},{\"t\": 4, "
       "\"rss\": 380000000},{\"t\": 5, \"rss\": 400000000},{\"t\": 6, \"rss\": 420000000},{\"t\": "
       "7, \"rss\": 440000000},{\"t\": 8, \"rss\": 460000000},{\"t\": 9, \"rss\": "
       "480000000},{\"t\": 10, \"rss\": 500000000},{\"t\": 11, \"rss\": 520000000}, {\"t\": 11.1, "
       "\"rss\": 0, \"procs\": 0}, {\"t\": 11.2, \"rss\": 0, \"procs\": 0}]}"}},
     NULL,
     "footprint-growth",
     "warn",
     NULL,
     NULL},
    {"footprint grows with the work done, then a starved exit idles on wall time",
     {{"soak", "null"},
      {"supervise", "{\"exit_status\": 0, \"series\": ["
                    "{\"t\": 0, \"cpu_pct\": 100, \"rss\": 300000000},"
                    "{\"t\": 1, \"cpu_pct\": 100, \"rss\": 320000000},"
                    "{\"t\": 2, \"cpu_pct\": 100, \"rss\": 340000000},"
                    "{\"t\": 3, \"cpu_pct\": 100, \"rss\": 360000000},"
                    "{\"t\": 4, \"cpu_pct\": 100, \"rss\": 380000000},"
                    "{\"t\": 5, \"cpu_pct\": 100, \"rss\": 400000000},"
                    "{\"t\": 6, \"cpu_pct\": 100, \"rss\": 420000000},"
                    "{\"t\": 7, \"cpu_pct\": 100, \"rss\": 440000000},"
                    "{\"t\": 8, \"cpu_pct\": 100, \"rss\": 460000000},"
                    "{\"t\": 9, \"cpu_pct\": 100, \"rss\": 480000000},"
                    "{\"t\": 10, \"cpu_pct\": 100, \"rss\": 500000000},"
                    "{\"t\": 11, \"cpu_pct\": 100, \"rss\": 520000000},"
                    "{\"t\": 12, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 13, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 14, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 15, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 16, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 17, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 18, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 19, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 20, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 21, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 22, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 23, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 24, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 25, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 26, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 27, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 28, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 29, \"cpu_pct\": 2, \"rss\": 520000000},"
                    "{\"t\": 30, \"cpu_pct\": 2, \"rss\": 520000000}"
                    "]}"}},
     NULL,
     "footprint-growth",
     "warn",
     NULL,
     NULL},
    /* issue 21: the program frees its memory as it exits (or a wrapper
     * outlives the worker): the exit tail left out of the fit. */
    {"footprint grows, then the program frees it and idles before exiting",
     {{"soak", "null"},
      {"supervise", "{\"exit_status\": 0, \"series\": ["
                    "{\"t\": 0, \"rss\": 300000000},{\"t\": 1, \"rss\": 340000000},"
                    "{\"t\": 2, \"rss\": 380000000},{\"t\": 3, \"rss\": 420000000},"
                    "{\"t\": 4, \"rss\": 460000000},{\"t\": 5, \"rss\": 500000000},"
                    "{\"t\": 6, \"rss\": 540000000},{\"t\": 7, \"rss\": 580000000},"
                    "{\"t\": 8, \"rss\": 620000000},{\"t\": 9, \"rss\": 660000000},"
                    "{\"t\": 10, \"rss\": 700000000},{\"t\": 11, \"rss\": 740000000},"
                    "{\"t\": 12, \"rss\": 780000000},{\"t\": 13, \"rss\": 820000000},"
                    "{\"t\": 14, \"rss\": 6000000},{\"t\": 15, \"rss\": 6000000},"
                    "{\"t\": 16, \"rss\": 6000000},{\"t\": 17, \"rss\": 6000000},"
                    "{\"t\": 18, \"rss\": 6000000},{\"t\": 19, \"rss\": 6000000},"
                    "{\"t\": 20, \"rss\": 6000000},{\"t\": 21, \"rss\": 6000000}]}"}},
     NULL,
     "footprint-growth",
     "warn",
     NULL,
     NULL},
    {"footprint grows with one sample far off the line",
     {{"soak", "null"},
      {"supervise", "{\"exit_status\": 0, \"series\": ["
                    "{\"t\": 0, \"rss\": 300000000},{\"t\": 1, \"rss\": 320000000},"
                    "{\"t\": 2, \"rss\": 340000000},{\"t\": 3, \"rss\": 360000000},"
                    "{\"t\": 4, \"rss\": 380000000},{\"t\": 5, \"rss\": 400000000},"
                    "{\"t\": 6, \"rss\": 1900000000},{\"t\": 7, \"rss\": 440000000},"
                    "{\"t\": 8, \"rss\": 460000000},{\"t\": 9, \"rss\": 480000000},"
                    "{\"t\": 10, \"rss\": 500000000},{\"t\": 11, \"rss\": 520000000}]}"}},
     NULL,
     "footprint-growth",
     "warn",
     NULL,
     NULL},
    {"unseeded run with shuffling workers",
     {{"seeds", "{\"torch\": null, \"numpy\": 0, \"random\": 0, \"seeded\": {\"torch\": "
                "false, \"numpy\": true, \"random\": true}, \"loader\": {\"workers\": 2, "
                "\"shuffle\": true, \"worker_init_fn\": false, \"generator\": false}}"}},
     NULL,
     "unseeded",
     "warn",
     NULL,
     NULL},
    {"seeded run with shuffling workers",
     {{"seeds", "{\"torch\": 0, \"seeded\": {\"torch\": true}, \"loader\": {\"workers\": 2, "
                "\"shuffle\": true, \"worker_init_fn\": false, \"generator\": false}}"}},
     NULL,
     NULL,
     NULL,
     "unseeded",
     NULL},
    {"unseeded run whose loader has its own generator",
     {{"seeds", "{\"torch\": null, \"seeded\": {\"torch\": false}, \"loader\": {\"workers\": "
                "0, \"shuffle\": true, \"worker_init_fn\": false, \"generator\": true}}"}},
     NULL,
     NULL,
     NULL,
     "unseeded",
     NULL},
    {"footprint flat without a probe",
     {{"soak", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"series\": [{\"t\": 0, \"rss\": 300000000},{\"t\": 1, \"rss\": "
       "301000000},{\"t\": 2, \"rss\": 300000000},{\"t\": 3, \"rss\": 301000000},{\"t\": 4, "
       "\"rss\": 300000000},{\"t\": 5, \"rss\": 301000000},{\"t\": 6, \"rss\": 300000000},{\"t\": "
       "7, \"rss\": 301000000},{\"t\": 8, \"rss\": 300000000},{\"t\": 9, \"rss\": "
       "301000000},{\"t\": 10, \"rss\": 300000000},{\"t\": 11, \"rss\": 301000000}]}"}},
     NULL,
     NULL,
     NULL,
     "footprint-growth",
     NULL},
    {"footprint rises at start-up, then levels off",
     {{"soak", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"series\": [{\"t\": 0, \"rss\": 100000000},{\"t\": 1, \"rss\": "
       "140000000},{\"t\": 2, \"rss\": 180000000},{\"t\": 3, \"rss\": 220000000},{\"t\": 4, "
       "\"rss\": 260000000},{\"t\": 5, \"rss\": 300000000},{\"t\": 6, \"rss\": 340000000},{\"t\": "
       "7, \"rss\": 380000000},{\"t\": 8, \"rss\": 420000000},{\"t\": 9, \"rss\": "
       "460000000},{\"t\": 10, \"rss\": 500000000},{\"t\": 11, \"rss\": 540000000},{\"t\": 12, "
       "\"rss\": 580000000},{\"t\": 13, \"rss\": 580000000},{\"t\": 14, \"rss\": "
       "580000000},{\"t\": 15, \"rss\": 580000000},{\"t\": 16, \"rss\": 580000000},{\"t\": 17, "
       "\"rss\": 580000000}]}"}},
     NULL,
     NULL,
     NULL,
     "footprint-growth",
     NULL},
    {"footprint growth under a raised threshold",
     {{"soak", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"series\": [{\"t\": 0, \"rss\": 300000000},{\"t\": 1, \"rss\": "
       "320000000},{\"t\": 2, \"rss\": 340000000},{\"t\": 3, \"rss\": 360000000},{\"t\": 4, "
       "\"rss\": 380000000},{\"t\": 5, \"rss\": 400000000},{\"t\": 6, \"rss\": 420000000},{\"t\": "
       "7, \"rss\": 440000000},{\"t\": 8, \"rss\": 460000000},{\"t\": 9, \"rss\": "
       "480000000},{\"t\": 10, \"rss\": 500000000},{\"t\": 11, \"rss\": 520000000}]}"}},
     "mem_growth_pct=60",
     NULL,
     NULL,
     "footprint-growth",
     NULL},
    {"program mostly idle without a probe",
     {{"profile", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"wall\": {\"value\": 30, \"unit\": \"s\", \"valid\": true}, "
       "\"samples\": {\"cpu_pct_median\": {\"value\": 55, \"unit\": \"percent\", \"valid\": true}, "
       "\"cores\": {\"value\": 8, \"unit\": \"cores\", \"valid\": true}}}"}},
     NULL,
     "cpu-use",
     "warn",
     NULL,
     NULL},
    {"program mostly idle beside a CPU hog: the cores went to the hog, no blame",
     {{"profile", "null"}, {"supervise", IDLE_ON_TWO}, {"contention", HOG_WINDOW}},
     NULL,
     "cpu-use",
     "info",
     NULL,
     NULL},
    {"program beside a CPU hog: contended names the run's window",
     {{"profile", "null"}, {"supervise", IDLE_ON_TWO}, {"contention", HOG_WINDOW}},
     NULL,
     "contended",
     "warn",
     NULL,
     NULL},
    {"program on one core of eight",
     {{"profile", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"wall\": {\"value\": 30, \"unit\": \"s\", \"valid\": true}, "
       "\"samples\": {\"cpu_pct_median\": {\"value\": 99, \"unit\": \"percent\", \"valid\": true}, "
       "\"cores\": {\"value\": 8, \"unit\": \"cores\", \"valid\": true}}}"}},
     NULL,
     "cpu-use",
     "info",
     NULL,
     NULL},
    {"program busy on its cores",
     {{"profile", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"wall\": {\"value\": 30, \"unit\": \"s\", \"valid\": true}, "
       "\"samples\": {\"cpu_pct_median\": {\"value\": 700, \"unit\": \"percent\", \"valid\": "
       "true}, "
       "\"cores\": {\"value\": 8, \"unit\": \"cores\", \"valid\": true}}}"}},
     NULL,
     NULL,
     NULL,
     "cpu-use",
     NULL},
    {"program on one core under a quota of 1.5 CPUs",
     {{"profile", "null"},
      {"supervise",
       "{\"exit_status\": 0, \"wall\": {\"value\": 30, \"unit\": \"s\", \"valid\": true}, "
       "\"samples\": {\"cpu_pct_median\": {\"value\": 99, \"unit\": \"percent\", \"valid\": "
       "true}, \"cores\": {\"value\": 1.5, \"unit\": \"cores\", \"valid\": true}, "
       "\"cores_limit\": \"quota\"}}"}},
     NULL,
     NULL,
     NULL,
     "cpu-use",
     NULL},
    {"host reads every step on a device",
     {{"profile.sync_points", "{\"host_reads\": 100, \"host_reads_per_step\": 1.0}"},
      {"device", "\"cuda:0\""}},
     NULL,
     "host-sync",
     "warn",
     NULL,
     NULL},
    {"host reads every step on the cpu",
     {{"profile.sync_points", "{\"host_reads\": 100, \"host_reads_per_step\": 1.0}"},
      {"device", "\"cpu\""}},
     NULL,
     "host-sync",
     "info",
     NULL,
     NULL},
    {"host reads every eighth step",
     {{"profile.sync_points", "{\"host_reads\": 12, \"host_reads_per_step\": 0.125}"},
      {"device", "\"cuda:0\""}},
     NULL,
     NULL,
     NULL,
     "host-sync",
     NULL},
    {"translated",
     {{"env.arch.translated", "true"}, {"env.arch.translation", "\"qemu-user\""}},
     NULL,
     "env-translated",
     "fail",
     NULL,
     "cpu"},
    {"mixed architectures",
     {{"env.python", python_mixed}},
     NULL,
     "env-mixed-arch",
     "fail",
     NULL,
     "cpu"},
    {"backend unavailable, nothing requested",
     {{"spec.backend", "null"}},
     NULL,
     "backend-unavailable",
     "warn",
     NULL,
     "device"},
    {"gate failed",
     {{"gate.verdict", "\"fail\""},
      {"gate.backends[1].matmul.ok", "false"},
      {"gate.backends[1].matmul.reason", "\"12 elements beyond tolerance\""},
      {"gate.backends[1].matmul.bad_elements", "12"}},
     NULL,
     "gate-failed",
     "fail",
     NULL,
     "cpu"},
    {"an op over its tolerance at level 2",
     {{"gate.verdict", "\"fail\""},
      {"gate.backends[1].ops",
       "{\"checked\": 2, \"passed\": 1, \"failed\": 1, \"not_native\": 0, \"errors\": 0, "
       "\"table\": [{\"op\": \"gemm_nt\", \"backend\": \"opencl\", \"precision\": \"fp32\", "
       "\"shape\": \"4x10x256 a1 b0\", \"fixture\": true, \"output\": \"C\", \"nmse\": 1e-14, "
       "\"tolerance\": 1e-9, \"verdict\": \"pass\", \"reason\": null}, {\"op\": \"bias_add\", "
       "\"backend\": \"opencl\", \"precision\": \"fp32\", \"shape\": \"[4,10,1]\", \"fixture\": "
       "true, \"output\": \"y\", \"nmse\": 7e-15, \"tolerance\": 0, \"verdict\": \"fail\", "
       "\"reason\": null}]}"}},
     NULL,
     "op-numerics",
     "fail",
     "gate-failed",
     "cpu"},
    {"a slow host-device link at level 2",
     {{"gate.backends[1].link",
       "{\"kind\": \"PCIe 5.0 x16\", \"current\": \"PCIe 5.0 x4\", \"rated\": {\"value\": "
       "63.0, \"unit\": \"GB/s\", \"valid\": true}, \"h2d_pinned\": {\"value\": 12.6, "
       "\"unit\": \"GB/s\", \"valid\": true}, \"d2h_pinned\": {\"value\": 50.4, \"unit\": "
       "\"GB/s\", \"valid\": true}, \"fraction_of_rated\": {\"h2d_pinned\": {\"value\": 0.2, "
       "\"unit\": \"fraction\", \"valid\": true}, \"d2h_pinned\": {\"value\": 0.8, "
       "\"unit\": \"fraction\", \"valid\": true}}, \"ok\": false}"}},
     NULL,
     "link-slow",
     "warn",
     "gate-failed",
     NULL},
    {"a link below its rating only under a stricter threshold",
     {{"gate.backends[1].link",
       "{\"kind\": \"PCIe 5.0 x16\", \"rated\": {\"value\": 63.0, \"unit\": \"GB/s\", "
       "\"valid\": true}, \"h2d_pinned\": {\"value\": 50.4, \"unit\": \"GB/s\", \"valid\": "
       "true}, \"fraction_of_rated\": {\"h2d_pinned\": {\"value\": 0.8, \"unit\": "
       "\"fraction\", \"valid\": true}}, \"ok\": true}"}},
     "link_min_fraction=0.9",
     "link-slow",
     "warn",
     NULL,
     NULL},
    {"a device that slows under a sustained load (level 3)",
     {{"gate.verdict", "\"fail\""},
      {"gate.backends[1].sustain",
       "{\"wall\": {\"value\": 60, \"unit\": \"s\", \"valid\": true}, \"ok\": false, "
       "\"drift\": {\"first_third\": {\"value\": 50000, \"unit\": \"GFLOP/s\", \"valid\": "
       "true}, \"last_third\": {\"value\": 41000, \"unit\": \"GFLOP/s\", \"valid\": true}, "
       "\"ratio\": {\"value\": 0.82, \"unit\": \"ratio\", \"valid\": true}, \"ratio_ci\": "
       "{\"lo\": {\"value\": 0.8, \"unit\": \"ratio\", \"valid\": true}, \"hi\": {\"value\": "
       "0.85, \"unit\": \"ratio\", \"valid\": true}}, \"verdict\": \"unstable\"}}"}},
     NULL,
     "device-unstable",
     "fail",
     "gate-failed",
     NULL},
    {"a device held down by heat for a third of the load (level 3)",
     {{"gate.backends[1].sustain",
       "{\"wall\": {\"value\": 60, \"unit\": \"s\", \"valid\": true}, \"ok\": true, "
       "\"health\": {\"temperature\": {\"max\": {\"value\": 91, \"unit\": \"C\", \"valid\": "
       "true}}, \"throttle\": [{\"reason\": \"hw_thermal_slowdown\", \"slows\": true, "
       "\"seconds\": {\"value\": 20, \"unit\": \"s\", \"valid\": true}}, {\"reason\": "
       "\"gpu_idle\", \"slows\": false, \"seconds\": {\"value\": 40, \"unit\": \"s\", "
       "\"valid\": true}}]}}"}},
     NULL,
     "throttled",
     "warn",
     "device-unstable",
     NULL},
    {"device missing",
     {{"gate.backends[1].available", "false"},
      {"gate.backends[1].reason", "\"no OpenCL platform\""}},
     NULL,
     "device-missing",
     "fail",
     NULL,
     "cpu"},
    {"device missing without a gate",
     {{"gate", "null"}, {"env.backends[1].available", "false"}},
     NULL,
     "device-missing",
     "fail",
     NULL,
     "cpu"},
    {"memory pressure",
     {{"env.memory.pressure.some_avg10.value", "40"}},
     NULL,
     "memory-pressure",
     "warn",
     NULL,
     "remote"},
    {"memory held by others",
     {{"env.processes.top_mem[0].rss.value", "20000000000"}},
     NULL,
     "memory-pressure",
     "warn",
     NULL,
     "remote"},
    {"swap during soak",
     {{"soak.sampler.swap_growth.value", "300000000"}},
     NULL,
     "memory-pressure",
     "warn",
     NULL,
     "remote"},
    /* An slo record (the healthy record re-kinded): the rules that read
     * its final gate, its ladder and training beside serving. */
    {"slo: the statement is signed",
     {{"kind", "\"slo\""},
      {"spec", SLO_SPEC},
      {"levels", "[" SLO_LEVEL(8, "pass", 20, 2, 60, 55, 65, "false") "]"},
      {"final_gate", "{\"signed\": true, \"verdict\": \"signed\", \"concurrency\": 8, "
                     "\"statement\": \"on node n: p99 TTFT <= 500 ms holds at 8 streams\"}"}},
     NULL,
     "slo-met",
     "info",
     "slo-missed",
     NULL},
    {"slo: missed at the lowest load",
     {{"kind", "\"slo\""},
      {"spec", SLO_SPEC},
      {"levels", "[" SLO_LEVEL(1, "fail", 20, 2, 600, 550, 650, "false") "]"},
      {"final_gate",
       "{\"signed\": false, \"verdict\": \"missed\", \"statement\": \"not signed\"}"}},
     NULL,
     "slo-missed",
     "fail",
     "slo-met",
     NULL},
    {"slo: too few requests",
     {{"kind", "\"slo\""},
      {"spec", SLO_SPEC},
      {"levels", "[" SLO_LEVEL(1, "inconclusive", 20, 2, 60, 55, 65, "false") "]"},
      {"final_gate",
       "{\"signed\": false, \"verdict\": \"inconclusive\", \"statement\": \"not "
       "signed: inconclusive: n = 312, at least 459 needed at p99 with none over\"}"}},
     NULL,
     "slo-inconclusive",
     "warn",
     "slo-met",
     NULL},
    {"slo: TTFT grows 5x up the ladder while TPOT stays",
     {{"kind", "\"slo\""},
      {"spec", SLO_SPEC},
      {"levels", "[" SLO_LEVEL(1, "pass", 20, 2, 30, 25, 35, "false") "," SLO_LEVEL(
                     8, "fail", 110, 2.2, 600, 550, 650, "false") "]"},
      {"final_gate", "{\"signed\": true, \"verdict\": \"signed\", \"concurrency\": 1}"}},
     NULL,
     "queueing-bound",
     "warn",
     "training-interference",
     NULL},
    {"slo: training beside serving triples p99 TTFT",
     {{"kind", "\"slo\""},
      {"spec", SLO_SPEC},
      {"levels", "[" SLO_LEVEL(4, "pass", 20, 2, 60, 55, 65,
                               "false") "," SLO_LEVEL(4, "fail", 40, 3, 180, 170, 190, "true") "]"},
      {"final_gate", "{\"signed\": true, \"verdict\": \"signed\", \"concurrency\": 4}"},
      {"while", "{\"alone\": {\"step_ms\": {\"value\": 10, \"unit\": \"ms\", \"valid\": true}}, "
                "\"beside\": {\"step_ms\": {\"value\": 11, \"unit\": \"ms\", \"valid\": true}}, "
                "\"slowdown\": {\"value\": 1.1, \"unit\": \"ratio\", \"valid\": true}}"}},
     NULL,
     "training-interference",
     "warn",
     "queueing-bound",
     NULL},
};

static void run_cases(void)
{
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const rule_case *k = &cases[c];
        char *rec = patched(k->patches);
        dg_status st;
        cJSON *out = diagnose(rec, k->overrides, &st);
        CHECK_MSG(st == DG_OK, "%s: status %s", k->name, dg_status_name(st));
        check_shape(k->name, out);
        if (k->fires) {
            const cJSON *f = find(out, k->fires);
            CHECK_MSG(f, "%s: %s did not fire", k->name, k->fires);
            if (f)
                CHECK_MSG(!strcmp(dg_jstr(f, "severity"), k->severity), "%s: %s is %s, not %s",
                          k->name, k->fires, dg_jstr(f, "severity"), k->severity);
        }
        if (k->silent)
            CHECK_MSG(!find(out, k->silent), "%s: %s fired", k->name, k->silent);
        if (k->route) {
            const char *route = dg_jstr(out, "decision.route");
            CHECK_MSG(route && !strcmp(route, k->route), "%s: route %s, not %s", k->name,
                      route ? route : "(none)", k->route);
        }
        cJSON_Delete(out);
        cJSON_free(rec);
    }
}

/* Record version 2 holds the soak analysis in the soak section itself: the
 * same record flattened must give the same findings and decision, the soak
 * evidence citing the version-2 path (growth.x for soak.growth.x). */
static char *flatten_v2(const char *v1_text)
{
    cJSON *rec = cJSON_Parse(v1_text);
    cJSON *soak = cJSON_GetObjectItem(rec, "soak");
    cJSON *inner = cJSON_DetachItemFromObjectCaseSensitive(soak, "soak");
    for (cJSON *it = inner ? inner->child : NULL; it;) {
        cJSON *next = it->next;
        cJSON *m = cJSON_DetachItemViaPointer(inner, it);
        cJSON_AddItemToObject(soak, strcmp(m->string, "epochs") ? m->string : "epochs_planned", m);
        it = next;
    }
    cJSON_Delete(inner);
    if (cJSON_HasObjectItem(soak, "v"))
        cJSON_ReplaceItemInObject(soak, "v", cJSON_CreateNumber(2));
    cJSON_ReplaceItemInObject(rec, "v", cJSON_CreateNumber(2));
    char *s = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    return s;
}

static void check_v2_records(void)
{
    int same = 0, soak_cited = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const rule_case *k = &cases[c];
        char *rec1 = patched(k->patches);
        char *rec2 = flatten_v2(rec1);
        dg_status st1, st2;
        cJSON *o1 = diagnose(rec1, k->overrides, &st1);
        cJSON *o2 = diagnose(rec2, k->overrides, &st2);
        CHECK_MSG(st1 == st2, "%s: v1 %s, v2 %s", k->name, dg_status_name(st1),
                  dg_status_name(st2));
        /* v1 cites soak.growth.x below the soak section; v2 growth.x. */
        cJSON *f, *e;
        cJSON_ArrayForEach(f, cJSON_GetObjectItem(o1, "findings"))
        {
            cJSON_ArrayForEach(e, cJSON_GetObjectItem(f, "evidence"))
            {
                const char *sec = dg_jstr(e, "section"), *field = dg_jstr(e, "field");
                if (sec && field && !strcmp(sec, "soak") && !strncmp(field, "soak.", 5)) {
                    char v2[256];
                    snprintf(v2, sizeof v2, "%s", field + 5); /* not in place: it overlaps */
                    cJSON_SetValuestring(cJSON_GetObjectItem(e, "field"), v2);
                    soak_cited++;
                }
            }
        }
        char *t1 = cJSON_PrintUnformatted(o1), *t2 = cJSON_PrintUnformatted(o2);
        bool eq = t1 && t2 && !strcmp(t1, t2);
        CHECK_MSG(eq, "%s: v1 and v2 diagnoses differ:\n  %s\n  %s", k->name, t1 ? t1 : "-",
                  t2 ? t2 : "-");
        same += eq;
        cJSON_free(t1);
        cJSON_free(t2);
        cJSON_Delete(o1);
        cJSON_Delete(o2);
        cJSON_free(rec1);
        cJSON_free(rec2);
    }
    CHECK(soak_cited > 0); /* the soak rules were among the cases */
    CHECK(same == (int)(sizeof cases / sizeof *cases));
}

/* The judges and the decision read the typed view, not the JSON: numbers
 * changed in the view alone (the record still says the healthy 3x) make the
 * speed, profile and run rules fire and the route change, citing the view's
 * numbers. A judge that went back to the record would stay silent here. */
static dg_rec_metric view_num(double v, const char *unit)
{
    return (dg_rec_metric){v, unit, true, true};
}

static cJSON *diagnose_view(const dg_record_view *v)
{
    cJSON *out = NULL;
    CHECK(dg_diagnose_view(NULL, v, NULL, &out) == DG_OK);
    return out;
}

static void check_rules_read_the_view(void)
{
    cJSON *rec = cJSON_Parse(healthy_text);
    dg_record_view v;
    CHECK(dg_record_view_build(NULL, rec, &v) == DG_OK);
    CHECK(v.compare.nruns > 0);
    cJSON *out = diagnose_view(&v);
    CHECK(!find(out, "speedup-near-one"));
    CHECK_STR(dg_jstr(out, "decision.route"), "device");
    cJSON_Delete(out);

    /* speedup-near-one (rules_speed.c) and the decision (decision.c): 1.05x
     * with its interval wholly below speedup_min, the device still busy. */
    dg_view_run *run = &v.compare.runs[0];
    run->speedup = view_num(1.05, "x");
    run->speedup_ci.lo = view_num(1.01, "x");
    run->speedup_ci.hi = view_num(1.09, "x");
    out = diagnose_view(&v);
    const cJSON *f = find(out, "speedup-near-one");
    CHECK_MSG(f, "speedup-near-one did not fire on the view's 1.05x");
    CHECK(f && strstr(dg_jstr(f, "title"), "1.05x") != NULL);
    CHECK_STR(dg_jstr(f, "evidence[0].field"), "runs[0].speedup");
    CHECK(dg_jnum(f, "evidence[0].value") == 1.05);
    CHECK_STR(dg_jstr(out, "decision.route"), "cpu");
    const char *why = dg_jstr(out, "decision.reasons[0]");
    CHECK_MSG(why && strstr(why, "1.05x"), "reason: %s", why ? why : "(none)");
    cJSON_Delete(out);

    /* slow-device-data and verdict-inconclusive's interval helpers
     * (rules_verdict.c): a step-time reduction interval below 22% with the
     * device idle. */
    run->reduction_pct = view_num(5, "%");
    run->reduction_ci.lo = view_num(2, "%");
    run->reduction_ci.hi = view_num(8, "%");
    run->busy_fraction = view_num(0.1, "fraction");
    run->busy_ci.lo = view_num(0.05, "fraction");
    run->busy_ci.hi = view_num(0.15, "fraction");
    out = diagnose_view(&v);
    f = find(out, "slow-device-data");
    CHECK_MSG(f, "slow-device-data did not fire on the view's 5%% reduction");
    CHECK(f && dg_jnum(f, "evidence[0].value") == 5);
    CHECK(!find(out, "speedup-near-one")); /* slow-device-data said it first */
    cJSON_Delete(out);

    /* data-starved (rules_profile.c): the step waits half its time. */
    v.profile.phases[DG_PHASE_QUEUE_WAIT].share = view_num(0.5, "fraction");
    /* host-sync (rules_run.c): 40 host reads a step on a device. */
    v.profile.host_reads_per_step = view_num(40, "");
    v.device = "cuda:0";
    out = diagnose_view(&v);
    f = find(out, "data-starved");
    CHECK_MSG(f, "data-starved did not fire on the view's queue wait");
    CHECK(f && strstr(dg_jstr(f, "title"), "50%") != NULL);
    cJSON_Delete(out);
    /* The H200 run of this session said "42% of the time (92.7 ms of a 21.9 ms
     * step)": a mean wait set against the median of unsynchronised steps. The
     * wait is cited against the window's mean step, the one its share is of. */
    v.profile.phases[DG_PHASE_QUEUE_WAIT].ms = view_num(92.7, "ms");
    v.profile.phases[DG_PHASE_QUEUE_WAIT].share = view_num(92.7 / 153.0, "fraction");
    v.profile.step_ms = view_num(21.9, "ms");
    v.profile.mean_ms = view_num(153.0, "ms");
    out = diagnose_view(&v);
    f = find(out, "data-starved");
    CHECK_MSG(f && strstr(dg_jstr(f, "title"), "61% of the time (92.7 ms of a 153.0 ms step)"),
              "data-starved: %s", f ? dg_jstr(f, "title") : "(did not fire)");
    CHECK(f && !strstr(dg_jstr(f, "title"), "21.9"));
    cJSON_Delete(out);
    /* Without the mean (a program's profile), the step its share implies. */
    v.profile.mean_ms = (dg_rec_metric){NAN, "ms", false, false};
    v.profile.phases[DG_PHASE_QUEUE_WAIT].share = view_num(0.25, "fraction");
    v.profile.phases[DG_PHASE_QUEUE_WAIT].ms = view_num(5, "ms");
    out = diagnose_view(&v);
    f = find(out, "data-starved");
    CHECK_MSG(f && strstr(dg_jstr(f, "title"), "(5.0 ms of a 20.0 ms step)"), "data-starved: %s",
              f ? dg_jstr(f, "title") : "(did not fire)");
    f = find(out, "host-sync");
    CHECK_MSG(f && !strcmp(dg_jstr(f, "severity"), "warn"),
              "host-sync did not warn on the view's 40 reads/step on cuda:0");
    cJSON_Delete(out);

    dg_record_view_free(&v);
    cJSON_Delete(rec);
}

/* Every rule in the table has at least one case above that makes it fire. */
static void check_every_rule_fires(void)
{
    for (int i = 0; i < dg_rule_count; i++) {
        bool seen = false;
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
            seen = seen || (cases[c].fires && !strcmp(cases[c].fires, dg_rules[i].id));
        CHECK_MSG(seen, "rule %s has no firing case", dg_rules[i].id);
    }
}

static void check_healthy(void)
{
    dg_status st;
    cJSON *out = diagnose(healthy_text, NULL, &st);
    CHECK(st == DG_OK);
    check_shape("healthy", out);
    CHECK_MSG(count_at_least(out, "warn") == 0, "healthy record has warn/fail findings");
    CHECK_STR(dg_jstr(out, "decision.route"), "device");
    CHECK_STR(dg_jstr(out, "decision.backend"), "opencl");
    const char *why = dg_jstr(out, "decision.reasons[0]");
    CHECK_MSG(why && strstr(why, "3.00x"), "reason: %s", why ? why : "(none)");
    /* The thresholds used are echoed with their defaults. */
    CHECK(dg_jnum(out, "thresholds.device_min_reduction_pct") == 22);
    CHECK(dg_jnum(out, "thresholds.mem_epochs") == 10);
    cJSON_Delete(out);

    /* Overrides are echoed too; whitespace and empty items are tolerated. */
    out = diagnose(healthy_text, " speedup_min = 1.5 ,, mem_epochs=12", &st);
    CHECK(st == DG_OK);
    CHECK(dg_jnum(out, "thresholds.speedup_min") == 1.5);
    CHECK(dg_jnum(out, "thresholds.mem_epochs") == 12);
    CHECK(find(out, "memory-short") != NULL); /* 10 epochs < 12 */
    cJSON_Delete(out);
}

static void check_evidence_and_titles(void)
{
    const patch p[] = {{RUN0 "step_time_reduction_pct.value", "7"},
                       {RUN0 "speedup.value", "1.075"},
                       {RUN0 "busy_fraction.value", "0.12"},
                       {NULL, NULL}};
    char *rec = patched(p);
    dg_status st;
    cJSON *out = diagnose(rec, NULL, &st);
    const cJSON *f = find(out, "slow-device-data");
    const char *title = dg_jstr(f, "title");
    CHECK_MSG(title && !strcmp(title, "opencl step time only 7% shorter than cpu and device busy "
                                      "12% at batch 64"),
              "title: %s", title ? title : "(none)");
    CHECK_STR(dg_jstr(f, "evidence[0].section"), "compare");
    CHECK_STR(dg_jstr(f, "evidence[0].field"), "runs[0].step_time_reduction_pct");
    CHECK(dg_jnum(f, "evidence[0].value") == 7);
    CHECK_STR(dg_jstr(f, "evidence[0].unit"), "%");
    CHECK_STR(dg_jstr(f, "evidence[1].field"), "runs[0].busy_fraction");
    CHECK_STR(dg_jstr(f, "evidence[1].unit"), "fraction");
    CHECK(strstr(dg_jstr(f, "action"), "data path and the batch first") != NULL);
    const char *why = dg_jstr(out, "decision.reasons[0]");
    CHECK_MSG(why && strstr(why, "does not pay off at this batch") && strstr(why, "1.07x"),
              "reason: %s", why ? why : "(none)");
    cJSON_Delete(out);
    cJSON_free(rec);

    /* The drift figures are named with their values. */
    const patch q[] = {{RUN0 "verdict", "\"drift\""},
                       {RUN0 "drift", "[\"loss_vs_ref.device\", \"param_drift.device_vs_ref\"]"},
                       {RUN0 "loss_vs_ref.device.value", "0.0032"},
                       {RUN0 "param_drift.device_vs_ref.value", "0.002"},
                       {NULL, NULL}};
    rec = patched(q);
    out = diagnose(rec, NULL, &st);
    f = find(out, "numerics-drift");
    title = dg_jstr(f, "title");
    CHECK_MSG(title && strstr(title, "loss_vs_ref.device 3.2e-03") &&
                  strstr(title, "param_drift.device_vs_ref 2.0e-03"),
              "title: %s", title ? title : "(none)");
    CHECK_STR(dg_jstr(f, "evidence[0].field"), "runs[0].loss_vs_ref.device");
    why = dg_jstr(out, "decision.reasons[0]");
    CHECK(why && strstr(why, "preprocessing only"));
    CHECK_MSG(!strstr(title, "tolerance at gate level 2") && !strstr(title, "ops over"),
              "a record without a level-2 table names no op: %s", title);
    cJSON_Delete(out);
    cJSON_free(rec);

    /* accept -- CMD's RUN holds the sides' losses (loss): a drift above
     * loss_rel_diff_max as used is named with its size, steps and place, as a
     * warn that leaves the route alone (a user's model with dropout differs by
     * design); an override above it, or losses not comparable (agree null),
     * fire nothing. */
#define CMD_LOSS(agree)                                                                            \
    "{\"pairs\": 8, \"cpu_only\": 0, \"device_only\": 0, \"max_rel_diff\": {\"value\": 0.048, "    \
    "\"unit\": \"relative\", \"valid\": true}, \"worst\": {\"epoch\": 2, \"step\": 1}, "           \
    "\"tolerance\": 0.01, \"min_pairs\": 3, \"agree\": " agree "}"
    const char *const loss_cases[][3] = {
        {CMD_LOSS("false"), NULL, "fires"},
        {CMD_LOSS("false"), "loss_rel_diff_max=0.05", NULL},
        {CMD_LOSS("null"), NULL, NULL},
    };
    for (size_t k = 0; k < sizeof loss_cases / sizeof loss_cases[0]; k++) {
        const patch ql[] = {{RUN0 "verdict", "\"drift\""},
                            {RUN0 "drift", "[\"loss.max_rel_diff\"]"},
                            {RUN0 "loss", loss_cases[k][0]},
                            {NULL, NULL}};
        rec = patched(ql);
        out = diagnose(rec, loss_cases[k][1], &st);
        f = find(out, "numerics-drift");
        title = dg_jstr(f, "title");
        if (loss_cases[k][2]) {
            CHECK_MSG(title && strstr(title, "the command's opencl loss drifts from its cpu loss "
                                             "by 0.048 (relative at epoch 2 step 1) over 8 "
                                             "common steps at batch 64, above loss_rel_diff_max "
                                             "0.01"),
                      "title: %s", title ? title : "(none)");
            CHECK(strstr(dg_jstr(f, "hypothesis"), "precision") != NULL);
            CHECK(strstr(dg_jstr(f, "action"), "allow_tf32") != NULL);
            CHECK_STR(dg_jstr(f, "evidence[0].field"), "runs[0].loss.max_rel_diff");
            CHECK_STR(dg_jstr(f, "severity"), "warn");
            why = dg_jstr(out, "decision.reasons[0]");
            CHECK_MSG(!why || !strstr(why, "loss drifts"), "reason: %s", why);
            CHECK_MSG(strcmp(dg_jstr(out, "decision.route"), "cpu") != 0, "route %s",
                      dg_jstr(out, "decision.route"));
        } else {
            CHECK_MSG(!f, "case %zu fired: %s", k, title ? title : "(none)");
        }
        cJSON_Delete(out);
        cJSON_free(rec);
    }
#undef CMD_LOSS

    /* A throttle finding names the slowing reason with its seconds, never idle. */
    const patch th[] = {
        {"gate.backends[1].sustain",
         "{\"wall\": {\"value\": 60, \"unit\": \"s\", \"valid\": true}, \"health\": "
         "{\"throttle\": [{\"reason\": \"sw_power_cap\", \"slows\": true, \"seconds\": "
         "{\"value\": 2, \"unit\": \"s\", \"valid\": true}}, {\"reason\": "
         "\"hw_thermal_slowdown\", \"slows\": true, \"seconds\": {\"value\": 20, \"unit\": "
         "\"s\", \"valid\": true}}, {\"reason\": \"gpu_idle\", \"slows\": false, \"seconds\": "
         "{\"value\": 40, \"unit\": \"s\", \"valid\": true}}]}}"},
        {NULL, NULL}};
    rec = patched(th);
    out = diagnose(rec, NULL, &st);
    title = dg_jstr(find(out, "throttled"), "title");
    CHECK_MSG(title && strstr(title, "hw_thermal_slowdown for 20.0 s") &&
                  !strstr(title, "gpu_idle") && !strstr(title, "sw_power_cap"),
              "title: %s", title ? title : "(none)");
    cJSON_Delete(out);
    cJSON_free(rec);

    /* With the gate's level-2 table, the drift names the ops over their
     * tolerance, or says every op was within its own. */
    const char *const tables[2] = {
        "[{\"op\": \"bias_add\", \"precision\": \"fp32\", \"shape\": \"[4,10,1]\", "
        "\"output\": \"y\", \"nmse\": 7e-15, \"tolerance\": 0, \"verdict\": \"fail\"}, "
        "{\"op\": \"bias_add\", \"precision\": \"fp32\", \"shape\": \"[3,7,11]\", "
        "\"output\": \"y\", \"nmse\": 6e-15, \"tolerance\": 0, \"verdict\": \"fail\"}]",
        "[{\"op\": \"bias_add\", \"precision\": \"fp32\", \"shape\": \"[4,10,1]\", "
        "\"output\": \"y\", \"nmse\": 0, \"tolerance\": 0, \"verdict\": \"pass\"}]"};
    for (int t = 0; t < 2; t++) {
        char ops[600];
        snprintf(ops, sizeof ops, "{\"checked\": 1, \"failed\": %d, \"table\": %s}", t ? 0 : 2,
                 tables[t]);
        const patch qo[] = {{RUN0 "verdict", "\"drift\""},
                            {RUN0 "drift", "[\"loss_vs_ref.device\"]"},
                            {RUN0 "loss_vs_ref.device.value", "0.0032"},
                            {"gate.backends[1].ops", ops},
                            {NULL, NULL}};
        rec = patched(qo);
        out = diagnose(rec, NULL, &st);
        title = dg_jstr(find(out, "numerics-drift"), "title");
        const char *want = t ? "every op within its tolerance at gate level 2"
                             : "ops over their tolerance: bias_add y NMSE 7e-15 > 0";
        CHECK_MSG(title && strstr(title, want), "title: %s", title ? title : "(none)");
        CHECK_MSG(!title || (!strstr(title, "[3,7,11]") && !strstr(title, "y NMSE 6e-15")),
                  "one mention per op: %s", title ? title : "(none)");
        cJSON_Delete(out);
        cJSON_free(rec);
    }

    /* Busy processes are named in the noise finding's action. */
    const patch n[] = {{"profile.step.stats.iqr_share.value", "0.3"},
                       {"env.processes.top_cpu[1].cpu_percent.value", "95"},
                       {"profile.spec.sync_every", "1"},
                       {NULL, NULL}};
    rec = patched(n);
    out = diagnose(rec, NULL, &st);
    f = find(out, "noisy-measurement");
    CHECK(f && strstr(dg_jstr(f, "action"), "(pid 1, 95%)"));
    cJSON_Delete(out);
    cJSON_free(rec);
}

static void check_errors(void)
{
    dg_ctx *ctx = dg_ctx_new();
    char *out = (char *)"sentinel";
    CHECK(dg_diagnose(ctx, healthy_text, "no_such_threshold=1", &out) == DG_ERR_USAGE);
    CHECK(out == NULL);
    CHECK(strstr(dg_errmsg(ctx), "no_such_threshold") != NULL);
    CHECK(dg_diagnose(ctx, healthy_text, "speedup_min=fast", &out) == DG_ERR_USAGE);
    CHECK(strstr(dg_errmsg(ctx), "speedup_min") != NULL);
    CHECK(dg_diagnose(ctx, healthy_text, "device_busy_min=2", &out) == DG_ERR_USAGE);
    CHECK(strstr(dg_errmsg(ctx), "range") != NULL);
    CHECK(dg_diagnose(ctx, healthy_text, "mem_epochs=2.5", &out) == DG_ERR_USAGE);
    CHECK(dg_diagnose(ctx, healthy_text, "speedup_min", &out) == DG_ERR_USAGE);
    CHECK(dg_diagnose(ctx, healthy_text, "speedup_min=", &out) == DG_ERR_USAGE);
    CHECK(dg_diagnose(ctx, healthy_text, "speedup_min=nan", &out) == DG_ERR_USAGE);
    CHECK(dg_diagnose(ctx, "{\"kind\": \"accept\"", NULL, &out) == DG_ERR_FORMAT);
    CHECK(out == NULL);
    CHECK(dg_diagnose(ctx, "not json at all", NULL, &out) == DG_ERR_FORMAT);
    CHECK(dg_diagnose(ctx, "[1, 2]", NULL, &out) == DG_ERR_FORMAT);
    CHECK(dg_diagnose(ctx, "\"accept\"", NULL, &out) == DG_ERR_FORMAT);
    CHECK(dg_diagnose(ctx, "", NULL, &out) == DG_ERR_FORMAT);
    CHECK(dg_diagnose(ctx, NULL, NULL, &out) == DG_ERR_FORMAT);
    CHECK(dg_diagnose(ctx, "{\"v\": 3}", NULL, &out) == DG_ERR_FORMAT);
    CHECK(dg_diagnose(ctx, "{\"v\": \"2\"}", NULL, &out) == DG_ERR_FORMAT);
    CHECK(dg_diagnose(ctx, "{}", NULL, NULL) == DG_ERR_USAGE);
    dg_ctx_free(ctx);
}

/* Sections null, absent, or of the wrong type: no crash, a route with a reason. */
static void check_empty_records(void)
{
    static const char *const recs[] = {
        "{\"v\": 1, \"kind\": \"accept\", \"spec\": null, \"env\": null, \"gate\": null, "
        "\"sweep\": null, \"soak\": null, \"compare\": null, \"profile\": null}",
        "{}",
        "{\"kind\": \"run\", \"spec\": {\"cmd\": [\"python\", \"train.py\"]}}",
        "{\"spec\": 3, \"env\": [], \"gate\": \"x\", \"sweep\": 1, \"soak\": true, "
        "\"compare\": {\"runs\": {\"a\": 1}}, \"profile\": {\"ops\": 7, \"phases\": []}}",
        "{\"compare\": {\"runs\": [null, 1, {\"speedup\": \"fast\"}, {}], \"status\": 5}, "
        "\"soak\": {\"soak\": {\"empty_cache\": true, \"growth\": null}}, \"gate\": "
        "{\"backends\": [null, {\"name\": 4}]}, \"env\": {\"processes\": {\"top_cpu\": [1]}}}",
    };
    for (size_t i = 0; i < sizeof recs / sizeof *recs; i++) {
        dg_status st;
        cJSON *out = diagnose(recs[i], NULL, &st);
        CHECK_MSG(st == DG_OK, "record %zu: %s", i, dg_status_name(st));
        CHECK(cJSON_IsArray(cJSON_GetObjectItem(out, "findings")));
        CHECK_MSG(count_at_least(out, "warn") == 0, "record %zu has warn/fail findings", i);
        CHECK_STR(dg_jstr(out, "decision.route"), "cpu");
        const char *why = dg_jstr(out, "decision.reasons[0]");
        CHECK_MSG(why && strstr(why, "not measured"), "record %zu reason: %s", i, why ? why : "-");
        cJSON_Delete(out);
    }

    /* No compare, but a gate that shows the device working: device, said unproven. */
    const patch p[] = {{"compare", "null"}, {NULL, NULL}};
    char *rec = patched(p);
    dg_status st;
    cJSON *out = diagnose(rec, NULL, &st);
    CHECK_STR(dg_jstr(out, "decision.route"), "device");
    CHECK_STR(dg_jstr(out, "decision.backend"), "opencl");
    CHECK(strstr(dg_jstr(out, "decision.reasons[0]"), "not measured") != NULL);
    cJSON_Delete(out);
    cJSON_free(rec);
}

/* Every item of the healthy record replaced in turn by null, a string and a
 * negative number: the diagnosis never fails or crashes. The item is changed
 * in place and restored, so the record is parsed once. */
typedef struct mutable_node {
    cJSON *node;
    char path[160];
} mutable_node;

static void collect_nodes(cJSON *node, const char *path, mutable_node *nodes, int *n, int max)
{
    cJSON *c;
    int i = 0;
    cJSON_ArrayForEach(c, node)
    {
        if (*n >= max)
            return;
        char p[160];
        if (cJSON_IsArray(node))
            snprintf(p, sizeof p, "%s[%d]", path, i);
        else
            snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", c->string);
        i++;
        /* Units are never read; steps and the final gate are not the rules' input. */
        if (c->string &&
            (!strcmp(c->string, "unit") ||
             (!path[0] && (!strcmp(c->string, "v") || !strcmp(c->string, "kind") ||
                           !strcmp(c->string, "steps") || !strcmp(c->string, "final_gate")))))
            continue;
        nodes[*n].node = c;
        snprintf(nodes[*n].path, sizeof nodes[*n].path, "%s", p);
        (*n)++;
        collect_nodes(c, p, nodes, n, max);
    }
}

static void check_mutations(void)
{
    enum { MAX = 4000 };
    static mutable_node nodes[MAX];
    static char x[] = "x";
    int n = 0;
    cJSON *rec = cJSON_Parse(healthy_text);
    collect_nodes(rec, "", nodes, &n, MAX);
    CHECK(n > 100 && n < MAX);
    dg_ctx *ctx = dg_ctx_new();
    int bad = 0;
    for (int i = 0; i < n; i++) {
        cJSON *node = nodes[i].node;
        cJSON saved = *node;
        for (int v = 0; v < 3; v++) {
            node->child = NULL;
            node->valuestring = NULL;
            if (v == 0) {
                node->type = cJSON_NULL;
            } else if (v == 1) {
                node->type = cJSON_String;
                node->valuestring = x;
            } else {
                node->type = cJSON_Number;
                node->valuedouble = -1;
                node->valueint = -1;
            }
            char *text = cJSON_PrintUnformatted(rec);
            char *out = NULL;
            dg_status st = dg_diagnose(ctx, text, NULL, &out);
            if (st != DG_OK || !out || !strstr(out, "\"route\":")) {
                if (bad++ < 5)
                    fprintf(stderr, "mutation %s (%d): %s %s\n", nodes[i].path, v,
                            dg_status_name(st), dg_errmsg(ctx));
            }
            dg_string_free(out);
            cJSON_free(text);
        }
        node->type = saved.type;
        node->child = saved.child;
        node->valuestring = saved.valuestring;
        node->valuedouble = saved.valuedouble;
        node->valueint = saved.valueint;
    }
    CHECK_MSG(bad == 0, "%d mutations failed", bad);
    dg_ctx_free(ctx);
    cJSON_Delete(rec);
}

/* The catalogue lists every threshold the diagnosis reports and every rule reads. */
static void check_catalogue(void)
{
    dg_ctx *ctx = dg_ctx_new();
    char *json = NULL;
    CHECK(dg_rules_catalogue(ctx, &json) == DG_OK);
    cJSON *cat = cJSON_Parse(json);
    CHECK(cJSON_GetArraySize(cat) == TH_COUNT);
    dg_status st;
    cJSON *out = diagnose(healthy_text, NULL, &st);
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(out, "thresholds"))
    {
        bool listed = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, cat)
        {
            if (!strcmp(dg_jstr(e, "name"), t->string)) {
                listed = true;
                CHECK(dg_jnum(e, "value") == t->valuedouble);
                CHECK(dg_jstr(e, "unit") && dg_jstr(e, "rule") && dg_jstr(e, "doc"));
            }
        }
        CHECK_MSG(listed, "threshold %s not in the catalogue", t->string);
    }
    for (int i = 0; i < dg_rule_count; i++) {
        char names[256];
        snprintf(names, sizeof names, "%s", dg_rules[i].thresholds);
        for (char *tok = strtok(names, ","); tok; tok = strtok(NULL, ",")) {
            bool listed = false;
            const cJSON *e;
            cJSON_ArrayForEach(e, cat) listed = listed || !strcmp(dg_jstr(e, "name"), tok);
            CHECK_MSG(listed, "rule %s reads %s, not in the catalogue", dg_rules[i].id, tok);
            CHECK_MSG(cJSON_HasObjectItem(cJSON_GetObjectItem(out, "thresholds"), tok),
                      "rule %s reads %s, not in the output", dg_rules[i].id, tok);
        }
    }
    cJSON_Delete(out);
    cJSON_Delete(cat);
    dg_string_free(json);
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
    check_healthy();
    run_cases();
    check_v2_records();
    check_rules_read_the_view();
    check_every_rule_fires();
    check_evidence_and_titles();
    check_errors();
    check_empty_records();
    check_catalogue();
    check_mutations();

    /* Nothing the diagnosis allocated may outlive it. */
    dg_free(healthy_text);
    size_t live, peak;
    dg_host_mem_stats(&live, &peak);
    CHECK_MSG(live == 0, "%zu host bytes still live", live);
    CHECK_DONE();
}
