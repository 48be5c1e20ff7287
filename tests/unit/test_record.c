/* The record path table (src/core/record_paths.def) against fresh records of
 * every verb, and the typed views built from them.
 *
 * 1. The built devgate (DEVGATE_BIN) writes small accept, run, train, sweep,
 *    soak, compare and profile records (a few seconds in all); every row of
 *    the table whose section the record holds must be there (unless the row
 *    is optional, or its array is empty) with its declared type and, for a
 *    METRIC, its declared unit.
 * 2. The checker itself can fail: records with a field removed, retyped or
 *    given another unit must be reported.
 * 3. The views: numbers and strings agree with the record; a version-1 soak
 *    and the same soak flattened as version 2 give the same view; bad input
 *    is refused with DG_ERR_FORMAT. */
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "core/record_slo.h"

#include "check.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

/* ---- the checker -------------------------------------------------------------------- */

typedef struct walk {
    int matched;     /* nodes the whole path reached */
    int parents;     /* nodes the last component was looked up in */
    const char *bad; /* first problem seen */
    char buf[256];
} walk;

static bool type_ok(const cJSON *n, const dg_rec_path *row, walk *w)
{
    if (cJSON_IsNull(n))
        return row->type == DG_RT_ANY || (row->flags & DG_RF_NULL);
    switch (row->type) {
    case DG_RT_OBJECT: return cJSON_IsObject(n);
    case DG_RT_ARRAY: return cJSON_IsArray(n);
    case DG_RT_NUMBER: return cJSON_IsNumber(n);
    case DG_RT_STRING: return cJSON_IsString(n);
    case DG_RT_BOOL: return cJSON_IsBool(n);
    case DG_RT_METRIC: {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(n, "unit");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(n, "valid");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(n, "value");
        if (!cJSON_IsObject(n) || !cJSON_IsString(u) || !cJSON_IsBool(v) ||
            !(cJSON_IsNumber(x) || cJSON_IsNull(x)))
            return false;
        if (strcmp(u->valuestring, row->unit) != 0) {
            snprintf(w->buf, sizeof w->buf, "unit \"%s\", declared \"%s\"", u->valuestring,
                     row->unit);
            w->bad = w->buf;
        }
        return true;
    }
    case DG_RT_ANY: return true;
    }
    return false;
}

/* Follows path (components split by '.', each "key", "key[]", "key[][]" or
 * "*") from n, counting what it reaches. */
static void follow(const cJSON *n, const char *path, const dg_rec_path *row, walk *w)
{
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    char comp[128];
    snprintf(comp, sizeof comp, "%.*s", (int)len, path);
    int arrays = 0;
    while (strlen(comp) >= 2 && !strcmp(comp + strlen(comp) - 2, "[]")) {
        comp[strlen(comp) - 2] = '\0';
        arrays++;
    }
    const cJSON *kids[4096];
    int nk = 0;
    if (!cJSON_IsObject(n))
        return;
    if (!dot)
        w->parents++;
    if (!strcmp(comp, "*")) {
        const cJSON *c;
        cJSON_ArrayForEach(c, n)
        {
            if (nk < 4096)
                kids[nk++] = c;
        }
    } else {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(n, comp);
        if (c)
            kids[nk++] = c;
    }
    for (int a = 0; a < arrays; a++) {
        const cJSON *next[4096];
        int nn = 0;
        for (int i = 0; i < nk; i++) {
            if (!cJSON_IsArray(kids[i])) {
                if (!cJSON_IsNull(kids[i]) && !w->bad)
                    w->bad = "not an array where the path has []";
                continue;
            }
            const cJSON *e;
            cJSON_ArrayForEach(e, kids[i])
            {
                if (nn < 4096)
                    next[nn++] = e;
            }
        }
        if (!dot && a == arrays - 1 && nk > 0 && nn == 0)
            w->parents--; /* every array was empty: nothing to require */
        memcpy(kids, next, (size_t)nn * sizeof *next);
        nk = nn;
    }
    for (int i = 0; i < nk; i++) {
        if (dot) {
            follow(kids[i], dot + 1, row, w);
        } else {
            w->matched++;
            if (!type_ok(kids[i], row, w) && !w->bad) {
                snprintf(w->buf, sizeof w->buf, "is %s, declared %s%s",
                         cJSON_IsObject(kids[i])   ? "an object"
                         : cJSON_IsArray(kids[i])  ? "an array"
                         : cJSON_IsNumber(kids[i]) ? "a number"
                         : cJSON_IsString(kids[i]) ? "a string"
                         : cJSON_IsBool(kids[i])   ? "a bool"
                         : cJSON_IsNull(kids[i])   ? "null"
                                                   : "?",
                         dg_rec_type_name(row->type), row->flags & DG_RF_NULL ? " or null" : "");
                w->bad = w->buf;
            }
        }
    }
}

/* Problems of the section object sec (of kind s) against the table; each is
 * printed with what. Returns how many. */
static int check_section(const cJSON *sec, dg_rec_section s, const char *what, bool quiet)
{
    int problems = 0;
    for (int i = 0; i < DG_P_COUNT; i++) {
        const dg_rec_path *row = &dg_rec_paths[i];
        if (row->section != s)
            continue;
        walk w = {0};
        follow(sec, row->path, row, &w);
        const char *why = w.bad;
        if (!why && w.matched == 0 && w.parents > 0 && !(row->flags & DG_RF_OPT))
            why = "missing";
        if (why) {
            problems++;
            if (!quiet)
                fprintf(stderr, "  %s: %s%s%s: %s\n", what, dg_rec_section_name(s),
                        s == DG_SEC_REC ? "" : ".", row->path, why);
        }
    }
    return problems;
}

/* An evidence record: its own rows and each section's. */
static int check_evidence(const cJSON *rec, const char *what, bool quiet)
{
    int n = check_section(rec, DG_SEC_REC, what, quiet);
    for (int s = DG_SEC_ENV; s < DG_SEC_COUNT; s++) {
        if (s == DG_SEC_TRAIN)
            continue;
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(rec, dg_rec_section_name(s));
        if (cJSON_IsObject(sec))
            n += check_section(sec, (dg_rec_section)s, what, quiet);
    }
    return n;
}

/* ---- fresh records -------------------------------------------------------------------- */

static cJSON *load(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[8 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return cJSON_Parse(buf);
}

/* Runs the built devgate with args, its JSON on stdout into dir/name; the
 * exit status. */
static int devgate(const char *name, const char *args)
{
    const char *bin = getenv("DEVGATE_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' --no-ledger %s > '%s' 2> '%s.err'", dir, bin, args,
             name, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static cJSON *fresh(const char *name, const char *args)
{
    int st = devgate(name, args);
    cJSON *r = st == 0 ? load(name) : NULL;
    CHECK_MSG(r != NULL, "devgate %s: exit %d, no JSON record", args, st);
    return r;
}

/* ---- the checker can fail ------------------------------------------------------------- */

static void check_faults(const cJSON *sweep)
{
    /* A required field removed. */
    cJSON *c = cJSON_Duplicate(sweep, true);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "good_trials");
    CHECK(check_section(c, DG_SEC_SWEEP, "fault", true) == 1);
    cJSON_Delete(c);
    /* Retyped: a number where a string is declared. */
    c = cJSON_Duplicate(sweep, true);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "host", cJSON_CreateNumber(3));
    CHECK(check_section(c, DG_SEC_SWEEP, "fault", true) == 1);
    cJSON_Delete(c);
    /* A METRIC with another unit, inside an array element. */
    c = cJSON_Duplicate(sweep, true);
    cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "trials"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(t0, "samples_per_s", dg_json_metric(1, true, "ms"));
    CHECK(check_section(c, DG_SEC_SWEEP, "fault", true) == 1);
    cJSON_Delete(c);
    /* A METRIC replaced by a plain number. */
    c = cJSON_Duplicate(sweep, true);
    t0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "trials"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(t0, "rss_peak", cJSON_CreateNumber(1));
    CHECK(check_section(c, DG_SEC_SWEEP, "fault", true) >= 1);
    cJSON_Delete(c);
    /* Untouched: clean. */
    CHECK(check_section(sweep, DG_SEC_SWEEP, "fault", true) == 0);
}

/* ---- the views ------------------------------------------------------------------------ */

static bool same_metric(dg_rec_metric m, const cJSON *root, const char *path)
{
    double want = dg_jnum(root, path);
    return m.valid ? m.value == want : isnan(want);
}

static void check_view_evidence(const cJSON *rec, bool has_compare)
{
    dg_record_view v;
    CHECK(dg_record_view_build(NULL, rec, &v) == DG_OK);
    CHECK(v.version == DG_RECORD_VERSION && v.kind && !strcmp(v.kind, dg_jstr(rec, "kind")));
    CHECK(v.env.present == cJSON_IsObject(dg_jpath(rec, "env")));
    CHECK(v.gate.present && v.gate.nbackends == cJSON_GetArraySize(dg_jpath(rec, "gate.backends")));
    CHECK(v.nsteps == cJSON_GetArraySize(dg_jpath(rec, "steps")) && v.nsteps > 0);
    CHECK(v.nfindings == cJSON_GetArraySize(dg_jpath(rec, "findings")));
    CHECK(v.decision.route && !strcmp(v.decision.route, dg_jstr(rec, "decision.route")));
    CHECK(v.final_gate.present && v.final_gate.statement &&
          !strcmp(v.final_gate.statement, dg_jstr(rec, "final_gate.statement")));
    CHECK(dg_view_threshold_value(&v, "mem_growth_pct") ==
          dg_jnum(rec, "thresholds.mem_growth_pct"));
    CHECK(isnan(dg_view_threshold_value(&v, "no_such_threshold")));
    if (v.sweep.present) {
        CHECK(v.sweep.ntrials == cJSON_GetArraySize(dg_jpath(rec, "sweep.trials")));
        CHECK(same_metric(v.sweep.safe_batch, rec, "sweep.safe_batch.batch"));
        CHECK(same_metric(v.sweep.trials[0].samples_per_s, rec, "sweep.trials[0].samples_per_s"));
        CHECK(!strcmp(v.sweep.trials[0].samples_per_s.unit, "samples/s") &&
              v.sweep.trials[0].samples_per_s.metric);
    }
    CHECK(v.soak.present && v.soak.has_payload);
    CHECK(v.soak.nepochs == cJSON_GetArraySize(dg_jpath(rec, "soak.epochs")));
    CHECK(same_metric(v.soak.epochs_recorded, rec, "soak.epochs_recorded"));
    CHECK(same_metric(v.soak.growth[DG_MEM_FOOTPRINT], rec, "soak.growth.footprint"));
    CHECK(!strcmp(v.soak.growth[DG_MEM_FOOTPRINT].unit, "%"));
    CHECK(v.soak.empty_cache == dg_jbool(rec, "soak.empty_cache"));
    if (has_compare) {
        CHECK(v.compare.present && v.compare.nruns > 0);
        CHECK(v.compare.nruns > 0 && v.compare.runs[0].ok &&
              same_metric(v.compare.runs[0].speedup, rec, "compare.runs[0].speedup"));
        CHECK(v.compare.nruns > 0 &&
              same_metric(v.compare.runs[0].device_step_ms, rec, "compare.runs[0].device.step_ms"));
    }
    CHECK(v.profile.present && same_metric(v.profile.phases[DG_PHASE_QUEUE_WAIT].share, rec,
                                           "profile.phases.queue_wait.share"));
    CHECK(same_metric(v.profile.step_ms, rec, "profile.step.ms"));
    dg_record_view_free(&v);
    dg_record_view_free(&v); /* twice: a zeroed view is fine */
}

/* The soak analysis keys: v2 holds them in the soak record, v1 nested them
 * under "soak" (with epochs_planned called epochs). */
static const char *const analysis_keys[] = {
    "epochs_planned", "steps_per_epoch", "empty_cache", "leak_per_step", "val_steps",
    "sample_ms",      "epochs_recorded", "baseline",    "growth",        "last",
    "staircase",      "step_trend"};

static cJSON *nest_soak(const cJSON *v2)
{
    cJSON *c = cJSON_Duplicate(v2, true);
    cJSON *inner = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof analysis_keys / sizeof *analysis_keys; i++) {
        cJSON *m = cJSON_DetachItemFromObjectCaseSensitive(c, analysis_keys[i]);
        if (m)
            cJSON_AddItemToObject(inner, i == 0 ? "epochs" : analysis_keys[i], m);
    }
    cJSON_AddItemToObject(c, "soak", inner);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "v", cJSON_CreateNumber(1));
    return c;
}

static void check_view_soak_versions(const cJSON *soak2)
{
    CHECK(dg_jnum(soak2, "v") == 2 && !cJSON_HasObjectItem(soak2, "soak") &&
          dg_jpath(soak2, "growth.footprint") && dg_jnum(soak2, "epochs_planned") == 3);
    cJSON *soak1 = nest_soak(soak2);
    dg_record_view a, b;
    CHECK(dg_record_view_build(NULL, soak1, &a) == DG_OK);
    CHECK(dg_record_view_build(NULL, soak2, &b) == DG_OK);
    CHECK(a.version == 1 && b.version == 2 && a.soak.present && b.soak.present);
    CHECK(a.soak.has_payload && b.soak.has_payload);
    CHECK(a.soak.empty_cache == b.soak.empty_cache && a.soak.empty_cache >= 0);
    CHECK(a.soak.epochs_recorded.valid &&
          a.soak.epochs_recorded.value == b.soak.epochs_recorded.value);
    CHECK(a.soak.steps_per_epoch.value == b.soak.steps_per_epoch.value);
    for (int i = 0; i < DG_MEM_COUNT; i++)
        CHECK(a.soak.growth[i].valid == b.soak.growth[i].valid &&
              (!a.soak.growth[i].valid || a.soak.growth[i].value == b.soak.growth[i].value));
    CHECK(a.soak.nepochs == b.soak.nepochs && a.soak.nepochs > 0);
    CHECK(a.soak.thirds_ratio.valid == b.soak.thirds_ratio.valid);
    CHECK(a.soak.staircase_aligned == b.soak.staircase_aligned);
    dg_record_view_free(&a);
    dg_record_view_free(&b);
    /* Inside an evidence record: v1 soak.soak.*, v2 soak.*. */
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "v", 1);
    cJSON_AddStringToObject(ev, "kind", "accept");
    cJSON_AddItemToObject(ev, "soak", soak1);
    CHECK(dg_record_view_build(NULL, ev, &a) == DG_OK);
    CHECK(a.soak.present && a.soak.epochs_recorded.valid &&
          a.soak.epochs_recorded.value == dg_jnum(soak2, "epochs_recorded"));
    CHECK(!a.sweep.present && !a.compare.present && a.nfindings == 0 && !a.final_gate.present);
    CHECK(a.final_gate.accepted == -1 && !a.spec.batch.valid && a.env.translated == -1);
    dg_record_view_free(&a);
    cJSON_Delete(ev);
}

/* The committed record tests/data/records/NAME, parsed (NULL after a failed CHECK). */
static cJSON *load_record(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/records/%s", getenv("DEVGATE_SRC"), name);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return NULL;
    static char buf[4 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *rec = cJSON_Parse(buf);
    CHECK(rec != NULL);
    return rec;
}

/* An slo record (tests/data/records/slo-ladder.json, written by devgate slo
 * against tests/python/scripts/slo_server.py): every key in the table's SLO
 * rows, and its typed view (core/record_slo.h). */
static void check_slo_fixture(void)
{
    cJSON *rec = load_record("slo-ladder.json");
    CHECK(rec && check_section(rec, DG_SEC_SLO, "slo", false) == 0);
    dg_record_view v;
    CHECK(rec && dg_record_view_build(NULL, rec, &v) == DG_OK);
    dg_view_slo s;
    CHECK(dg_view_slo_build(&s, v.section[DG_SEC_SLO]) && s.present);
    CHECK(s.nlevels == 2 && s.nbeside == 0 && s.signed_ == 1 && s.signed_concurrency == 4);
    CHECK(s.nbounds == 2 && s.bounds[1].metric == DG_SLO_TPOT && s.percentile == 50);
    CHECK(s.levels[1].concurrency == 4 && isfinite(s.levels[1].lat[DG_SLO_TTFT].pslo) &&
          s.levels[1].lat[DG_SLO_TTFT].pslo == s.levels[1].lat[DG_SLO_TTFT].p50);
    CHECK(s.levels[1].queue_waiting >= 1 && v.nfindings >= 1 && !v.final_gate.present);
    dg_view_slo_free(&s);
    dg_record_view_free(&v);
    cJSON_Delete(rec);
}

/* Every member the gate levels' and the slo views read through their tables
 * in record_views.def: a hand-written backend and level with a value of its
 * own at each path, so a row that names the wrong path or member shows. */
static void check_view_tables(void)
{
    cJSON *rec = cJSON_Parse(
        "{\"v\": 2, \"kind\": \"accept\", \"gate\": {\"backends\": [{\"name\": \"cpu\", "
        "\"link\": {\"kind\": \"pcie\", \"current\": \"x16\", \"reason\": \"slow\", \"rated\": 9,"
        " \"ok\": false, \"h2d_pageable\": 1, \"h2d_pinned\": 2, \"d2h_pageable\": 3, "
        "\"d2h_pinned\": 4, \"fraction_of_rated\": {\"h2d_pageable\": 0.1, \"h2d_pinned\": 0.2, "
        "\"d2h_pageable\": 0.3, \"d2h_pinned\": 0.4}}, "
        "\"sustain\": {\"source\": \"nvml\", \"seconds\": 11, \"wall\": 12, \"rate\": 13, "
        "\"fraction_of_peak\": 0.14, \"ok\": true, \"throttled\": false, \"drift\": "
        "{\"first_third\": 15, \"last_third\": 16, \"ratio\": 17, \"ratio_ci\": {\"lo\": 18, "
        "\"hi\": 19}, \"verdict\": \"steady\"}, \"health\": {\"sm_clock\": {\"min\": 20, \"max\": "
        "21}, \"temperature\": {\"max\": 22}, \"power\": {\"mean\": 23, \"max\": 24}, \"energy\": "
        "25,"
        " \"throttle\": [{\"reason\": \"power\", \"slows\": true, \"seconds\": 26}, {\"reason\": "
        "\"idle\", \"slows\": false, \"seconds\": 27}]}}, "
        "\"memory_bandwidth\": {\"bandwidth\": 28, \"rated\": 29, \"fraction_of_rated\": 0.3, "
        "\"ok\": true}, "
        "\"ops\": {\"checked\": 31, \"passed\": 32, \"failed\": 33, \"not_native\": 34, "
        "\"errors\": 35, \"worst\": {\"op\": \"conv\", \"backend\": \"cpu\", \"precision\": "
        "\"fp32\", \"shape\": \"3x3\", \"output\": \"dx\", \"verdict\": \"fail\", \"reason\": "
        "\"nmse\", \"fixture\": true, \"nmse\": 36, \"tolerance\": 37, \"over_tolerance\": 38}, "
        "\"table\": [{\"op\": \"gemm\", \"backend\": \"cpu\", \"precision\": \"tf32\", \"shape\": "
        "\"8x8\", \"output\": \"c\", \"verdict\": \"pass\", \"reason\": \"ok\", \"fixture\": "
        "false, \"nmse\": 39, \"tolerance\": 40}]}}]}}");
    dg_record_view v;
    CHECK(rec && dg_record_view_build(NULL, rec, &v) == DG_OK && v.gate.nbackends == 1);
    if (v.gate.nbackends == 1) {
        const dg_view_backend *be = &v.gate.backends[0];
        const dg_view_link *l = &be->link;
        CHECK(l->present && !strcmp(l->kind, "pcie") && !strcmp(l->current, "x16") &&
              !strcmp(l->reason, "slow") && l->rated.value == 9 && l->ok == 0);
        for (int k = 0; k < DG_LINK_WAYS; k++)
            CHECK(l->gbps[k].value == k + 1 && fabs(l->fraction[k].value - 0.1 * (k + 1)) < 1e-12);
        const dg_view_sustain *s = &be->sustain;
        CHECK(s->present && !strcmp(s->source, "nvml") && !strcmp(s->verdict, "steady"));
        const dg_rec_metric m[] = {s->seconds,     s->wall,       s->rate,   s->fraction_of_peak,
                                   s->first_third, s->last_third, s->ratio,  s->ratio_lo,
                                   s->ratio_hi,    s->sm_min,     s->sm_max, s->temp_max,
                                   s->power_mean,  s->power_max,  s->energy};
        const double want[] = {11, 12, 13, 0.14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
        for (int k = 0; k < 15; k++)
            CHECK(m[k].valid && m[k].value == want[k]);
        CHECK(s->ok == 1 && s->throttled == 0 && s->nthrottle == 2);
        CHECK(s->nthrottle == 2 && !strcmp(s->throttle[1].reason, "idle") &&
              s->throttle[0].slows == 1 && s->throttle[1].seconds.value == 27);
        CHECK(s->membw_present && s->membw.value == 28 && s->membw_rated.value == 29 &&
              s->membw_fraction.value == 0.3 && s->membw_ok == 1);
        const dg_view_ops *o = &be->ops;
        CHECK(o->present && o->checked.value == 31 && o->passed.value == 32 &&
              o->failed.value == 33 && o->not_native.value == 34 && o->errors.value == 35);
        const dg_view_op_row *w = &o->worst;
        CHECK(o->has_worst && !strcmp(w->op, "conv") && !strcmp(w->precision, "fp32") &&
              !strcmp(w->shape, "3x3") && !strcmp(w->output, "dx") && !strcmp(w->verdict, "fail") &&
              !strcmp(w->reason, "nmse") && w->fixture == 1 && w->nmse.value == 36 &&
              w->tolerance.value == 37 && w->over_tolerance.value == 38);
        const dg_view_op_row *r = o->nrows == 1 ? &o->rows[0] : NULL;
        CHECK(r && !strcmp(r->op, "gemm") && !strcmp(r->backend, "cpu") &&
              !strcmp(r->precision, "tf32") && !strcmp(r->shape, "8x8") &&
              !strcmp(r->output, "c") && !strcmp(r->verdict, "pass") && !strcmp(r->reason, "ok") &&
              r->fixture == 0 && r->nmse.value == 39 && r->tolerance.value == 40 &&
              !r->over_tolerance.valid);
    }
    dg_record_view_free(&v);
    cJSON_Delete(rec);

    cJSON *slo = cJSON_Parse(
        "{\"spec\": {\"target\": \"t\", \"model\": \"m\", \"api\": \"a\", \"mode\": \"closed\", "
        "\"fixture\": {\"backend\": \"cpu\", \"device\": \"d\", \"ended\": \"e\", \"batch\": 1}, "
        "\"percentile\": 2, \"confidence\": 3}, \"final_gate\": {\"signed\": false, \"verdict\": "
        "\"missed\", \"statement\": \"s\", \"concurrency\": 4}, \"while\": {\"alone\": "
        "{\"step_ms\": 5}, \"beside\": {\"step_ms\": 6}, \"slowdown\": 7}, \"levels\": [{"
        "\"concurrency\": 8, \"rate\": 9, \"steady\": {\"state\": \"steady\"}, \"verdict\": "
        "{\"state\": \"pass\", \"n\": 10, \"over\": 11}, \"state\": \"complete\", \"requests\": "
        "{\"sent\": 12, \"ok\": 13, \"failed\": 14, \"timeouts\": 15}, \"throughput\": "
        "{\"requests_per_s\": 16, \"goodput\": 17, \"tokens_per_s\": 18}, \"window\": "
        "{\"contention\": {\"others_share\": 0.19}}, \"engine\": {\"queue_waiting\": 20, "
        "\"tokens_per_s\": 21}, \"latency\": {\"ttft\": {\"n\": 22}, \"tpot\": {\"n\": 23}, "
        "\"itl\": {\"n\": 24}, \"e2e\": {\"n\": 25}}}]}");
    dg_view_slo sv;
    CHECK(slo && dg_view_slo_build(&sv, slo) && sv.present);
    CHECK(!strcmp(sv.target, "t") && !strcmp(sv.model, "m") && !strcmp(sv.api, "a") &&
          !strcmp(sv.mode, "closed") && !strcmp(sv.fixture_backend, "cpu") &&
          !strcmp(sv.fixture_device, "d") && !strcmp(sv.fixture_ended, "e"));
    CHECK(sv.fixture_batch == 1 && sv.percentile == 2 && sv.confidence == 3 && sv.signed_ == 0 &&
          !strcmp(sv.verdict, "missed") && !strcmp(sv.statement, "s") &&
          sv.signed_concurrency == 4 && sv.beside_json && sv.train_step_alone_ms == 5 &&
          sv.train_step_beside_ms == 6 && sv.train_slowdown == 7);
    const dg_view_slo_level *lv = sv.nlevels == 1 ? &sv.levels[0] : NULL;
    CHECK(lv && lv->concurrency == 8 && lv->rate == 9 && !strcmp(lv->steady, "steady") &&
          !strcmp(lv->verdict, "pass") && !strcmp(lv->state, "complete") && lv->n == 10 &&
          lv->over == 11 && lv->sent == 12 && lv->ok == 13 && lv->failed == 14 &&
          lv->timeouts == 15 && lv->requests_per_s == 16 && lv->goodput == 17 &&
          lv->tokens_per_s == 18 && lv->others_share == 0.19 && lv->queue_waiting == 20 &&
          lv->engine_tokens_per_s == 21 && !lv->beside);
    for (int k = 0; lv && k < DG_SLO_NMETRICS; k++)
        CHECK(lv->lat[k].n == 22 + k && isnan(lv->lat[k].pslo));
    dg_view_slo_free(&sv);
    cJSON_Delete(slo);
}

/* The ledger holds version-1 evidence records: the fixture the rules test uses. */
static void check_view_v1_fixture(void)
{
    cJSON *rec = load_record("healthy.json");
    if (!rec)
        return;
    dg_record_view v;
    CHECK(rec && dg_record_view_build(NULL, rec, &v) == DG_OK);
    CHECK(v.soak.has_payload &&
          same_metric(v.soak.epochs_recorded, rec, "soak.soak.epochs_recorded"));
    CHECK(same_metric(v.soak.growth[DG_MEM_ALLOCATOR_ALLOCATED], rec,
                      "soak.soak.growth.allocator_allocated"));
    CHECK(v.compare.nruns > 0 &&
          same_metric(v.compare.runs[0].speedup, rec, "compare.runs[0].speedup"));
    dg_record_view_free(&v);
    cJSON_Delete(rec);
}

static void check_view_errors(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_record_view v;
    cJSON *arr = cJSON_CreateArray();
    CHECK(dg_record_view_build(ctx, arr, &v) == DG_ERR_FORMAT);
    dg_record_view_free(&v);
    cJSON *o = cJSON_Parse("{\"v\": 3, \"kind\": \"accept\"}");
    CHECK(dg_record_view_build(ctx, o, &v) == DG_ERR_FORMAT);
    CHECK(strstr(dg_errmsg(ctx), "version") != NULL);
    dg_record_view_free(&v);
    cJSON_Delete(o);
    o = cJSON_Parse("{\"kind\": \"accept\"}");
    CHECK(dg_record_view_build(ctx, o, &v) == DG_ERR_FORMAT);
    dg_record_view_free(&v);
    cJSON_Delete(o);
    /* Wrong types everywhere read as "not reported", never 0. */
    o = cJSON_Parse("{\"v\": 1, \"kind\": \"accept\", \"spec\": {\"batch\": \"64\"},"
                    " \"sweep\": {\"safe_batch\": {\"batch\": null}, \"trials\": {}},"
                    " \"compare\": {\"runs\": [{\"batch\": 8, \"speedup\": "
                    "{\"value\": 3, \"unit\": \"x\", \"valid\": false}}]},"
                    " \"soak\": [1], \"findings\": 7}");
    CHECK(dg_record_view_build(ctx, o, &v) == DG_OK);
    CHECK(!v.spec.batch.valid && isnan(v.spec.batch.value));
    CHECK(v.sweep.present && !v.sweep.safe_batch.valid && !v.sweep.safe_batch_is_number &&
          v.sweep.ntrials == 0);
    CHECK(v.compare.nruns == 1 && v.compare.runs[0].ok && !v.compare.runs[0].speedup.valid &&
          v.compare.runs[0].speedup.metric && !strcmp(v.compare.runs[0].speedup.unit, "x"));
    CHECK(dg_rec_int(v.compare.runs[0].batch) == 8 && dg_rec_int(v.spec.batch) == -1);
    CHECK(!v.soak.present && v.nfindings == 0);
    dg_record_view_free(&v);
    cJSON_Delete(o);
    cJSON_Delete(arr);
    dg_ctx_free(ctx);
}

/* Every row's path is well formed and named once. */
static void check_table(void)
{
    int bad = 0;
    for (int i = 0; i < DG_P_COUNT; i++) {
        const dg_rec_path *r = &dg_rec_paths[i];
        bool ok = r->path[0] && r->path[0] != '.' && !strstr(r->path, "..") &&
                  (r->type != DG_RT_METRIC || r->unit[0]);
        for (int j = 0; j < i && ok; j++)
            ok = r->section != dg_rec_paths[j].section || strcmp(r->path, dg_rec_paths[j].path);
        if (!ok) {
            bad++;
            fprintf(stderr, "  table row %d (%s) is malformed or declared twice\n", i, r->path);
        }
    }
    CHECK(bad == 0);
    CHECK(DG_P_COUNT > 1000);
}

int main(void)
{
    check_table();
    check_view_errors();
    if (!getenv("DEVGATE_BIN") || !getenv("DEVGATE_SRC"))
        check_skip("DEVGATE_BIN or DEVGATE_SRC is not set (run through ctest)");
    snprintf(dir, sizeof dir, "/tmp/dg_record_XXXXXX");
    if (!mkdtemp(dir))
        check_skip("no temp dir");

    const char *cpu = "--backend cpu --model mlp --threads 1 --workers 0";
    char args[1024];
    /* The device backend compare needs: opencl (PoCL) where there is one. */
    bool ocl = devgate("gate.json", "gate --backend opencl --json") == 0;
    snprintf(args, sizeof args,
             "accept --quick --model mlp --sweep-to 32 --backend %s --threads 1 --workers 0 "
             "--steps 4 --epochs 2 -o pack --json",
             ocl ? "opencl" : "cpu");
    cJSON *accept = fresh("accept.json", args);
    snprintf(args, sizeof args,
             "run --no-env --sample-ms 50 --json -- python3 '%s/tests/data/run/good.py'",
             getenv("DEVGATE_SRC"));
    cJSON *run = fresh("run.json", args);
    snprintf(args, sizeof args, "train %s --batch 16 --epochs 1 --steps 3 --json", cpu);
    cJSON *train = fresh("train.json", args);
    snprintf(args, sizeof args, "sweep %s --to 32 --json", cpu);
    cJSON *sweep = fresh("sweep.json", args);
    snprintf(args, sizeof args, "soak %s --batch 16 --epochs 3 --steps 4 --json", cpu);
    cJSON *soak = fresh("soak.json", args);
    snprintf(args, sizeof args, "profile %s --json", cpu);
    cJSON *profile = fresh("profile.json", args);
    /* The gate at level 2: its per-op table and the reference's own check. */
    cJSON *gate2 = fresh("gate2.json", "gate --backend cpu --size 64 --level 2 --json");
    cJSON *compare = NULL;
    if (ocl)
        compare = fresh("compare.json", "compare --backend opencl --model mlp --threads 1 "
                                        "--batches 16 --steps 3 --json");
    else
        printf("note: no opencl device: the compare record is not checked\n");

    if (accept)
        CHECK(check_evidence(accept, "accept", false) == 0);
    if (run)
        CHECK(check_evidence(run, "run", false) == 0);
    if (train)
        CHECK(check_section(train, DG_SEC_TRAIN, "train", false) == 0);
    if (sweep)
        CHECK(check_section(sweep, DG_SEC_SWEEP, "sweep", false) == 0);
    if (soak)
        CHECK(check_section(soak, DG_SEC_SOAK, "soak", false) == 0);
    if (profile)
        CHECK(check_section(profile, DG_SEC_PROFILE, "profile", false) == 0);
    if (compare)
        CHECK(check_section(compare, DG_SEC_COMPARE, "compare", false) == 0);
    if (gate2) {
        CHECK(check_section(gate2, DG_SEC_GATE, "gate", false) == 0);
        /* The view holds the table as recorded. */
        cJSON *wrap = cJSON_CreateObject();
        cJSON_AddNumberToObject(wrap, "v", 2);
        cJSON_AddStringToObject(wrap, "kind", "accept");
        cJSON_AddItemReferenceToObject(wrap, "gate", gate2);
        dg_record_view v;
        CHECK(dg_record_view_build(NULL, wrap, &v) == DG_OK);
        const dg_view_ops *o = v.gate.nbackends ? &v.gate.backends[0].ops : NULL;
        CHECK(o && o->present &&
              o->nrows == cJSON_GetArraySize(dg_jpath(gate2, "backends[0].ops.table")));
        CHECK(o && o->has_worst && o->worst.nmse.valid && o->failed.valid && o->failed.value == 0);
        CHECK(v.gate.reference_ok == 1 && dg_rec_int(v.gate.level) == 2);
        dg_record_view_free(&v);
        cJSON_Delete(wrap);
    }

    if (sweep)
        check_faults(sweep);
    if (accept)
        check_view_evidence(accept, ocl);
    if (soak)
        check_view_soak_versions(soak);
    check_view_v1_fixture();
    check_slo_fixture();
    check_view_tables();
    if (run) {
        dg_record_view v;
        CHECK(dg_record_view_build(NULL, run, &v) == DG_OK);
        CHECK(v.supervise.present && dg_rec_int(v.supervise.exit_status) == 0);
        CHECK(v.soak.present && v.soak.has_payload && v.soak.epochs_recorded.valid);
        CHECK(v.spec.cmd && cJSON_GetArraySize(v.spec.cmd) == 2 && !v.env.present);
        dg_record_view_free(&v);
    }

    cJSON *all[] = {accept, run, train, sweep, soak, profile, compare, gate2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        cJSON_Delete(all[i]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "note: %s left behind\n", dir);
    CHECK_DONE();
}
