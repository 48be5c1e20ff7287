/* The typed views of a record (record.h), built through the path readers of
 * record_paths.c. */
#include "core/record.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* ---- the builder ---------------------------------------------------------------- */

typedef struct builder {
    dg_ctx *ctx;
    bool nomem;
} builder;

/* A zeroed array of n elements of size sz (NULL for n == 0; nomem on failure). */
static void *array_of(builder *b, int n, size_t sz)
{
    if (n <= 0)
        return NULL;
    void *p = dg_calloc((size_t)n, sz);
    if (!p)
        b->nomem = true;
    return p;
}

static const cJSON *obj_or_null(const cJSON *it)
{
    return cJSON_IsObject(it) ? it : NULL;
}

/* REC_SPEC_* paths start at the record. */
static void build_spec(dg_view_spec *s, const cJSON *spec)
{
    s->present = dg_rec_obj(spec, DG_P_REC_SPEC) != NULL;
    s->backend = dg_rec_str(spec, DG_P_REC_SPEC_BACKEND);
    s->model = dg_rec_str(spec, DG_P_REC_SPEC_MODEL);
    s->data = dg_rec_str(spec, DG_P_REC_SPEC_DATA);
    s->batch_source = dg_rec_str(spec, DG_P_REC_SPEC_BATCH_SOURCE);
    s->label = dg_rec_str(spec, DG_P_REC_SPEC_LABEL);
    s->batch = dg_rec_num(spec, DG_P_REC_SPEC_BATCH);
    s->seed = dg_rec_num(spec, DG_P_REC_SPEC_SEED);
    s->threads = dg_rec_num(spec, DG_P_REC_SPEC_THREADS);
    s->workers = dg_rec_num(spec, DG_P_REC_SPEC_WORKERS);
    s->sweep_to = dg_rec_num(spec, DG_P_REC_SPEC_SWEEP_TO);
    s->quick = dg_rec_bool(spec, DG_P_REC_SPEC_QUICK);
    s->cmd = dg_rec_arr(spec, DG_P_REC_SPEC_CMD);
}

static void build_steps(builder *b, dg_record_view *v, const cJSON *rec)
{
    const cJSON *arr = dg_rec_arr(rec, DG_P_REC_STEPS);
    int n = cJSON_GetArraySize(arr);
    v->steps = array_of(b, n, sizeof *v->steps);
    if (!v->steps)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_step *s = &v->steps[v->nsteps++];
        s->name = dg_rec_str(it, DG_P_REC_STEPS_NAME);
        s->status = dg_rec_str(it, DG_P_REC_STEPS_STATUS);
        s->verdict = dg_rec_str(it, DG_P_REC_STEPS_VERDICT);
        s->summary = dg_rec_str(it, DG_P_REC_STEPS_SUMMARY);
        s->error = dg_rec_str(it, DG_P_REC_STEPS_ERROR);
        s->wall = dg_rec_num(it, DG_P_REC_STEPS_WALL);
    }
}

/* The ids of one measured window's rows, each relative to the node the
 * window hangs below (a gate backend, a compare repetition); the top[] ids
 * are relative to one entry. */
typedef struct window_ids {
    dg_rec_path_id window, others_cpus, others_share, cpu_pressure_some, top, top_name, top_pid,
        top_cpu_percent;
} window_ids;

static void build_window(builder *b, dg_view_window *w, const cJSON *node, const window_ids *ids)
{
    w->present = dg_rec_obj(node, ids->window) != NULL;
    w->others_cpus = dg_rec_num(node, ids->others_cpus);
    w->others_share = dg_rec_num(node, ids->others_share);
    w->cpu_pressure_some = dg_rec_num(node, ids->cpu_pressure_some);
    const cJSON *top = dg_rec_arr(node, ids->top);
    w->top = array_of(b, cJSON_GetArraySize(top), sizeof *w->top);
    w->ntop = 0;
    if (!w->top)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, top)
    {
        dg_view_window_proc *p = &w->top[w->ntop++];
        p->name = dg_rec_str(it, ids->top_name);
        p->pid = dg_rec_num(it, ids->top_pid);
        p->cpu_percent = dg_rec_num(it, ids->top_cpu_percent);
    }
}

static void free_window(dg_view_window *w)
{
    dg_free(w->top);
}

/* The ids of one backends[] list (the gate's or the environment's). */
typedef struct backend_ids {
    dg_rec_path_id name, built, available, reason, versions;
} backend_ids;

static void build_backends(builder *b, const cJSON *arr, const backend_ids *ids, bool gate,
                           dg_view_backend **out, int *nout)
{
    int n = cJSON_GetArraySize(arr);
    *out = array_of(b, n, sizeof **out);
    *nout = 0;
    if (!*out)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_backend *be = &(*out)[(*nout)++];
        be->name = dg_rec_str(it, ids->name);
        be->built = dg_rec_bool(it, ids->built);
        be->available = dg_rec_bool(it, ids->available);
        be->reason = dg_rec_str(it, ids->reason);
        be->versions = dg_rec_str(it, ids->versions);
        if (!gate)
            continue;
        be->matmul.present = dg_rec_obj(it, DG_P_GATE_BACKENDS_MATMUL) != NULL;
        be->matmul.ok = dg_rec_bool(it, DG_P_GATE_BACKENDS_MATMUL_OK);
        be->matmul.reason = dg_rec_str(it, DG_P_GATE_BACKENDS_MATMUL_REASON);
        be->matmul.bad_elements = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_BAD_ELEMENTS);
        be->matmul.max_err_over_tolerance =
            dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_MAX_ERR_OVER_TOLERANCE);
        be->matmul.max_abs_err = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_MAX_ABS_ERR);
        be->matmul.gflops = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_GFLOPS);
        be->matmul.ms_warm = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_MS_WARM);
        be->matmul.fraction_of_peak = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_FRACTION_OF_PEAK);
        be->matmul.max_rel_err = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_MAX_REL_ERR);
        be->matmul.ms_cold = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_MS_COLD);
        be->matmul.m = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_M);
        be->matmul.n = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_N);
        be->matmul.k = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_K);
        const cJSON *devs = dg_rec_arr(it, DG_P_GATE_BACKENDS_DEVICES);
        be->devices = array_of(b, cJSON_GetArraySize(devs), sizeof *be->devices);
        if (be->devices) {
            const cJSON *dv;
            cJSON_ArrayForEach(dv, devs)
            {
                dg_view_device *x = &be->devices[be->ndevices++];
                x->name = dg_rec_str(dv, DG_P_GATE_BACKENDS_DEVICES_NAME);
                x->vendor = dg_rec_str(dv, DG_P_GATE_BACKENDS_DEVICES_VENDOR);
                x->memory_total = dg_rec_num(dv, DG_P_GATE_BACKENDS_DEVICES_MEMORY_TOTAL);
            }
        }
        static const window_ids wids = {DG_P_GATE_BACKENDS_MATMUL_WINDOW,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_OTHERS_CPUS,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_OTHERS_SHARE,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_CPU_PRESSURE_SOME,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP_NAME,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP_PID,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP_CPU_PERCENT};
        build_window(b, &be->matmul.window, it, &wids);
        be->peak_fp32 = dg_rec_num(it, DG_P_GATE_BACKENDS_PEAK_FP32);
        be->peak_cores = dg_rec_num(it, DG_P_GATE_BACKENDS_PEAK_CPU_CORES);
        be->peak_isa = dg_rec_str(it, DG_P_GATE_BACKENDS_PEAK_CPU_ISA);
        be->peak_usable = dg_rec_num(it, DG_P_GATE_BACKENDS_PEAK_CPU_USABLE_CORES);
        be->peak_advised = dg_rec_num(it, DG_P_GATE_BACKENDS_PEAK_CPU_THREADS_ADVISED);
        be->peak_per_core = dg_rec_num(it, DG_P_GATE_BACKENDS_PEAK_CPU_PER_CORE);
        be->peak_per_core_src = dg_rec_str(it, DG_P_GATE_BACKENDS_PEAK_CPU_PER_CORE_SOURCE);
        be->peak_smt = dg_rec_num(it, DG_P_GATE_BACKENDS_PEAK_CPU_TOPOLOGY_SMT);
        be->matmul.fraction_of = dg_rec_str(it, DG_P_GATE_BACKENDS_MATMUL_FRACTION_OF);
        be->matmul.threads = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_THREADS);
        be->matmul.threads_source = dg_rec_str(it, DG_P_GATE_BACKENDS_MATMUL_THREADS_SOURCE);
        be->matmul.rate_m = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_RATE_M);
        be->matmul.rate_n = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_RATE_N);
        be->matmul.rate_k = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_RATE_K);
        be->matmul.rate_gflops = dg_rec_num(it, DG_P_GATE_BACKENDS_MATMUL_RATE_GFLOPS);
        be->blas.library = dg_rec_str(it, DG_P_GATE_BACKENDS_BLAS_LIBRARY);
        be->blas.kernel = dg_rec_str(it, DG_P_GATE_BACKENDS_BLAS_KERNEL);
        be->blas.fix = dg_rec_str(it, DG_P_GATE_BACKENDS_BLAS_FIX);
        be->blas.generic = dg_rec_bool(it, DG_P_GATE_BACKENDS_BLAS_GENERIC_KERNEL);
        be->blas.vector_bits = dg_rec_num(it, DG_P_GATE_BACKENDS_BLAS_KERNEL_VECTOR_BITS);
        if (!dg_view_backend_levels(it, be))
            b->nomem = true;
    }
}

static void build_procs(builder *b, const cJSON *arr, bool cpu, dg_view_proc **out, int *nout)
{
    int n = cJSON_GetArraySize(arr);
    *out = array_of(b, n, sizeof **out);
    *nout = 0;
    if (!*out)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_proc *p = &(*out)[(*nout)++];
        p->name =
            dg_rec_str(it, cpu ? DG_P_ENV_PROCESSES_TOP_CPU_NAME : DG_P_ENV_PROCESSES_TOP_MEM_NAME);
        p->pid =
            dg_rec_num(it, cpu ? DG_P_ENV_PROCESSES_TOP_CPU_PID : DG_P_ENV_PROCESSES_TOP_MEM_PID);
        p->cpu_percent = dg_rec_num(it, cpu ? DG_P_ENV_PROCESSES_TOP_CPU_CPU_PERCENT
                                            : DG_P_ENV_PROCESSES_TOP_MEM_CPU_PERCENT);
        p->rss =
            dg_rec_num(it, cpu ? DG_P_ENV_PROCESSES_TOP_CPU_RSS : DG_P_ENV_PROCESSES_TOP_MEM_RSS);
        p->self = dg_rec_bool(it, cpu ? DG_P_ENV_PROCESSES_TOP_CPU_SELF
                                      : DG_P_ENV_PROCESSES_TOP_MEM_SELF);
    }
}

static void build_env(builder *b, dg_view_env *e, const cJSON *env)
{
    e->present = env != NULL;
    e->has_arch = dg_rec_obj(env, DG_P_ENV_ARCH) != NULL;
    e->host = dg_rec_str(env, DG_P_ENV_HOST);
    e->arch_host = dg_rec_str(env, DG_P_ENV_ARCH_HOST);
    e->arch_process = dg_rec_str(env, DG_P_ENV_ARCH_PROCESS);
    e->translation = dg_rec_str(env, DG_P_ENV_ARCH_TRANSLATION);
    e->translated = dg_rec_bool(env, DG_P_ENV_ARCH_TRANSLATED);
    e->translation_evidence = dg_rec_at(env, DG_P_ENV_ARCH_TRANSLATION_EVIDENCE);
    e->mem_total = dg_rec_num(env, DG_P_ENV_MEMORY_TOTAL);
    e->logical_cores = dg_rec_num(env, DG_P_ENV_CPU_LOGICAL_CORES);
    e->affinity_cores = dg_rec_num(env, DG_P_ENV_CPU_AFFINITY_CORES);
    e->psi_some_avg10 = dg_rec_num(env, DG_P_ENV_MEMORY_PRESSURE_SOME_AVG10);
    build_procs(b, dg_rec_arr(env, DG_P_ENV_PROCESSES_TOP_CPU), true, &e->top_cpu, &e->ntop_cpu);
    build_procs(b, dg_rec_arr(env, DG_P_ENV_PROCESSES_TOP_MEM), false, &e->top_mem, &e->ntop_mem);
    e->has_python = dg_rec_obj(env, DG_P_ENV_PYTHON) != NULL;
    const cJSON *mixed = dg_rec_arr(env, DG_P_ENV_PYTHON_MIXED_EXTENSIONS);
    e->mixed = array_of(b, cJSON_GetArraySize(mixed), sizeof *e->mixed);
    if (e->mixed) {
        const cJSON *m;
        cJSON_ArrayForEach(m, mixed)
        {
            dg_view_py_ext *x = &e->mixed[e->nmixed++];
            x->path = dg_rec_str(m, DG_P_ENV_PYTHON_MIXED_EXTENSIONS_PATH);
            const cJSON *arch = dg_rec_arr(m, DG_P_ENV_PYTHON_MIXED_EXTENSIONS_ARCH);
            x->arch = arch && cJSON_IsString(arch->child) ? arch->child->valuestring : NULL;
        }
    }
    e->mixed_truncated = dg_rec_num(env, DG_P_ENV_PYTHON_MIXED_EXTENSIONS_TRUNCATED);
    e->py_arch_matches_host = dg_rec_bool(env, DG_P_ENV_PYTHON_ARCH_MATCHES_HOST);
    e->py_reference_arch = dg_rec_str(env, DG_P_ENV_PYTHON_REFERENCE_ARCH);
    e->py_binary_arch_list = dg_rec_at(env, DG_P_ENV_PYTHON_BINARY_ARCH);
    const cJSON *barch = dg_rec_arr(env, DG_P_ENV_PYTHON_BINARY_ARCH);
    e->py_binary_arch = barch && cJSON_IsString(barch->child) ? barch->child->valuestring : NULL;
    const cJSON *backends = dg_rec_arr(env, DG_P_ENV_BACKENDS);
    e->has_backends = backends != NULL;
    e->backends_json = dg_rec_at(env, DG_P_ENV_BACKENDS);
    static const backend_ids ids = {DG_P_ENV_BACKENDS_NAME, DG_P_ENV_BACKENDS_BUILT,
                                    DG_P_ENV_BACKENDS_AVAILABLE, DG_P_ENV_BACKENDS_REASON,
                                    DG_P_ENV_BACKENDS_VERSIONS};
    build_backends(b, backends, &ids, false, &e->backends, &e->nbackends);
}

static void build_gate(builder *b, dg_view_gate *g, const cJSON *gate)
{
    g->present = gate != NULL;
    g->verdict = dg_rec_str(gate, DG_P_GATE_VERDICT);
    g->tolerance_model = dg_rec_str(gate, DG_P_GATE_TOLERANCE_MODEL);
    const cJSON *backends = dg_rec_arr(gate, DG_P_GATE_BACKENDS);
    g->has_backends = backends != NULL;
    g->backends_json = dg_rec_at(gate, DG_P_GATE_BACKENDS);
    static const backend_ids ids = {DG_P_GATE_BACKENDS_NAME, DG_P_GATE_BACKENDS_BUILT,
                                    DG_P_GATE_BACKENDS_AVAILABLE, DG_P_GATE_BACKENDS_REASON,
                                    DG_P_GATE_BACKENDS_VERSIONS};
    build_backends(b, backends, &ids, true, &g->backends, &g->nbackends);
    g->level = dg_rec_num(gate, DG_P_GATE_LEVEL_LEVEL);
    g->reference_ok = dg_rec_bool(gate, DG_P_GATE_REFERENCE_OK);
}

/* Trials and bisection trials share the TRIAL shape: the trials[] ids read
 * either (dg_rec_at resolves below the element). */
static void build_trials(builder *b, const cJSON *arr, dg_view_trial **out, int *nout)
{
    *out = array_of(b, cJSON_GetArraySize(arr), sizeof **out);
    *nout = 0;
    if (!*out)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_trial *t = &(*out)[(*nout)++];
        t->ended = dg_rec_str(it, DG_P_SWEEP_TRIALS_ENDED);
        t->reason = dg_rec_str(it, DG_P_SWEEP_TRIALS_REASON);
        t->signal = dg_rec_str(it, DG_P_SWEEP_TRIALS_SIGNAL);
        t->budget = dg_rec_bool(it, DG_P_SWEEP_TRIALS_BUDGET);
        t->batch = dg_rec_num(it, DG_P_SWEEP_TRIALS_BATCH);
        t->samples_per_s = dg_rec_num(it, DG_P_SWEEP_TRIALS_SAMPLES_PER_S);
        t->step_median = dg_rec_num(it, DG_P_SWEEP_TRIALS_STEP_MS_MEDIAN);
        t->step_iqr = dg_rec_num(it, DG_P_SWEEP_TRIALS_STEP_MS_IQR);
        t->step_steps = dg_rec_num(it, DG_P_SWEEP_TRIALS_STEP_MS_STEPS);
        t->swap_growth = dg_rec_num(it, DG_P_SWEEP_TRIALS_SWAP_GROWTH);
        t->rss_peak = dg_rec_num(it, DG_P_SWEEP_TRIALS_RSS_PEAK);
        t->device_allocated_peak = dg_rec_num(it, DG_P_SWEEP_TRIALS_DEVICE_ALLOCATED_PEAK);
        t->device_reserved_peak = dg_rec_num(it, DG_P_SWEEP_TRIALS_DEVICE_RESERVED_PEAK);
        t->psi_peak = dg_rec_num(it, DG_P_SWEEP_TRIALS_PSI_PEAK);
        t->wall_s = dg_rec_num(it, DG_P_SWEEP_TRIALS_WALL_S);
        t->energy_per_sample = dg_rec_num(it, DG_P_SWEEP_TRIALS_ENERGY_PER_SAMPLE);
    }
}

static void build_sweep(builder *b, dg_view_sweep *s, const cJSON *sweep)
{
    s->present = sweep != NULL;
    s->backend = dg_rec_str(sweep, DG_P_SWEEP_SPEC_BACKEND);
    s->mem_budget = dg_rec_num(sweep, DG_P_SWEEP_SPEC_MEM_BUDGET);
    s->mem_budget_source = dg_rec_str(sweep, DG_P_SWEEP_SPEC_MEM_BUDGET_SOURCE);
    build_trials(b, dg_rec_arr(sweep, DG_P_SWEEP_TRIALS), &s->trials, &s->ntrials);
    build_trials(b, dg_rec_arr(sweep, DG_P_SWEEP_BISECT), &s->bisect, &s->nbisect);
    s->stopped_reason = dg_rec_str(sweep, DG_P_SWEEP_STOPPED_REASON);
    s->stopped_at = dg_rec_num(sweep, DG_P_SWEEP_STOPPED_AT_BATCH);
    s->knee_batch = dg_rec_num(sweep, DG_P_SWEEP_KNEE_BATCH);
    s->knee_is_number = cJSON_IsNumber(dg_rec_at(sweep, DG_P_SWEEP_KNEE_BATCH));
    s->knee_sps = dg_rec_num(sweep, DG_P_SWEEP_KNEE_SAMPLES_PER_S);
    s->best_sps = dg_rec_num(sweep, DG_P_SWEEP_KNEE_BEST_SAMPLES_PER_S);
    s->safe_batch = dg_rec_num(sweep, DG_P_SWEEP_SAFE_BATCH_BATCH);
    s->safe_batch_is_number = cJSON_IsNumber(dg_rec_at(sweep, DG_P_SWEEP_SAFE_BATCH_BATCH));
    s->safe_sps = dg_rec_num(sweep, DG_P_SWEEP_SAFE_BATCH_SAMPLES_PER_S);
    s->first_failure = dg_rec_num(sweep, DG_P_SWEEP_SAFE_BATCH_FIRST_FAILURE);
    s->safe_note = dg_rec_str(sweep, DG_P_SWEEP_SAFE_BATCH_NOTE);
    s->good_trials = dg_rec_num(sweep, DG_P_SWEEP_GOOD_TRIALS);
}

/* A fallback census (the profile's or the soak's: one shape, read through
 * the profile's rows, which resolve below each entry). */
static void build_census(builder *b, const cJSON *arr, dg_view_fallback **out, int *nout)
{
    *nout = 0;
    *out = array_of(b, cJSON_GetArraySize(arr), sizeof **out);
    if (!*out)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_fallback *c = &(*out)[(*nout)++];
        c->op = dg_rec_str(it, DG_P_PROFILE_FALLBACKS_OP);
        c->device = dg_rec_str(it, DG_P_PROFILE_FALLBACKS_DEVICE);
        c->shape = dg_rec_str(it, DG_P_PROFILE_FALLBACKS_SHAPE);
        c->backend = dg_rec_str(it, DG_P_PROFILE_FALLBACKS_BACKEND);
        c->reason = dg_rec_str(it, DG_P_PROFILE_FALLBACKS_REASON);
        c->message = dg_rec_str(it, DG_P_PROFILE_FALLBACKS_MESSAGE);
        c->count = dg_rec_num(it, DG_P_PROFILE_FALLBACKS_COUNT);
        c->calls = dg_rec_num(it, DG_P_PROFILE_FALLBACKS_CALLS);
        c->ms_total = dg_rec_num(it, DG_P_PROFILE_FALLBACKS_MS_TOTAL);
        c->bytes_d2h = dg_rec_num(it, DG_P_PROFILE_FALLBACKS_BYTES_D2H);
        c->bytes_h2d = dg_rec_num(it, DG_P_PROFILE_FALLBACKS_BYTES_H2D);
    }
}

/* The soak's analysis object: v1 nests it under "soak" (soak.soak in the
 * evidence record), v2 holds its members in the soak record itself. */
static const cJSON *soak_payload(const cJSON *soak, int version)
{
    if (!soak)
        return NULL;
    if (version >= 2)
        return soak;
    return dg_rec_obj(soak, DG_P_SOAK_SOAK);
}

/* A soak-analysis row's path (a version-2 row: "growth.footprint") below the
 * payload, which is the nested object of a version-1 record. */
static const cJSON *payload_at(const cJSON *payload, dg_rec_path_id id)
{
    const char *p = dg_rec_paths[id].path;
    if (!strncmp(p, "soak.", 5))
        p += 5;
    return payload ? dg_jpath(payload, p) : NULL;
}

static dg_rec_metric payload_num(const cJSON *payload, dg_rec_path_id id)
{
    dg_rec_metric m = {NAN, dg_rec_paths[id].unit, false, false};
    const cJSON *it = payload_at(payload, id);
    if (cJSON_IsObject(it) && cJSON_HasObjectItem(it, "valid")) {
        m.metric = true;
        const char *u = dg_jstr(it, "unit");
        if (u)
            m.unit = u;
    }
    double x = dg_jnum_item(it);
    if (isfinite(x)) {
        m.value = x;
        m.valid = true;
    }
    return m;
}

static int payload_bool(const cJSON *payload, dg_rec_path_id id)
{
    const cJSON *it = payload_at(payload, id);
    return cJSON_IsBool(it) ? cJSON_IsTrue(it) : -1;
}

static void build_soak(builder *b, dg_view_soak *s, const cJSON *soak, const cJSON *payload)
{
    s->present = soak != NULL;
    s->has_payload = payload != NULL;
    s->empty_cache = payload_bool(payload, DG_P_SOAK_EMPTY_CACHE);
    s->epochs_recorded = payload_num(payload, DG_P_SOAK_EPOCHS_RECORDED);
    s->steps_per_epoch = payload_num(payload, DG_P_SOAK_STEPS_PER_EPOCH);
    static const dg_rec_path_id growth[DG_MEM_COUNT] = {
        DG_P_SOAK_GROWTH_ALLOCATOR_ALLOCATED, DG_P_SOAK_GROWTH_ALLOCATOR_RESERVED,
        DG_P_SOAK_GROWTH_DRIVER, DG_P_SOAK_GROWTH_FOOTPRINT};
    static const dg_rec_path_id baseline[DG_MEM_COUNT] = {
        DG_P_SOAK_BASELINE_ALLOCATOR_ALLOCATED, DG_P_SOAK_BASELINE_ALLOCATOR_RESERVED,
        DG_P_SOAK_BASELINE_DRIVER, DG_P_SOAK_BASELINE_FOOTPRINT};
    static const dg_rec_path_id ci[DG_MEM_COUNT][3] = {
        {DG_P_SOAK_GROWTH_CI_ALLOCATOR_ALLOCATED_POINT, DG_P_SOAK_GROWTH_CI_ALLOCATOR_ALLOCATED_LO,
         DG_P_SOAK_GROWTH_CI_ALLOCATOR_ALLOCATED_HI},
        {DG_P_SOAK_GROWTH_CI_ALLOCATOR_RESERVED_POINT, DG_P_SOAK_GROWTH_CI_ALLOCATOR_RESERVED_LO,
         DG_P_SOAK_GROWTH_CI_ALLOCATOR_RESERVED_HI},
        {DG_P_SOAK_GROWTH_CI_DRIVER_POINT, DG_P_SOAK_GROWTH_CI_DRIVER_LO,
         DG_P_SOAK_GROWTH_CI_DRIVER_HI},
        {DG_P_SOAK_GROWTH_CI_FOOTPRINT_POINT, DG_P_SOAK_GROWTH_CI_FOOTPRINT_LO,
         DG_P_SOAK_GROWTH_CI_FOOTPRINT_HI}};
    for (int i = 0; i < DG_MEM_COUNT; i++) {
        s->growth[i] = payload_num(payload, growth[i]);
        s->baseline[i] = payload_num(payload, baseline[i]);
        s->growth_point[i] = payload_num(payload, ci[i][0]);
        s->growth_lo[i] = payload_num(payload, ci[i][1]);
        s->growth_hi[i] = payload_num(payload, ci[i][2]);
    }
    static const struct {
        dg_mem_source m;
        dg_rec_path_id points, point, lo, hi;
    } screen[] = {{DG_MEM_ALLOCATOR_ALLOCATED, DG_P_SOAK_STEP_GROWTH_ALLOCATOR_ALLOCATED_POINTS,
                   DG_P_SOAK_STEP_GROWTH_ALLOCATOR_ALLOCATED_PER_EPOCH_POINT,
                   DG_P_SOAK_STEP_GROWTH_ALLOCATOR_ALLOCATED_PER_EPOCH_LO,
                   DG_P_SOAK_STEP_GROWTH_ALLOCATOR_ALLOCATED_PER_EPOCH_HI},
                  {DG_MEM_FOOTPRINT, DG_P_SOAK_STEP_GROWTH_FOOTPRINT_POINTS,
                   DG_P_SOAK_STEP_GROWTH_FOOTPRINT_PER_EPOCH_POINT,
                   DG_P_SOAK_STEP_GROWTH_FOOTPRINT_PER_EPOCH_LO,
                   DG_P_SOAK_STEP_GROWTH_FOOTPRINT_PER_EPOCH_HI}};
    for (size_t i = 0; i < sizeof screen / sizeof screen[0]; i++) {
        dg_mem_source m = screen[i].m;
        s->screen_points[m] = payload_num(payload, screen[i].points);
        s->screen_point[m] = payload_num(payload, screen[i].point);
        s->screen_lo[m] = payload_num(payload, screen[i].lo);
        s->screen_hi[m] = payload_num(payload, screen[i].hi);
    }
    s->staircase_aligned = payload_bool(payload, DG_P_SOAK_STAIRCASE_ALIGNED);
    const cJSON *ve = payload_at(payload, DG_P_SOAK_STAIRCASE_VALIDATION_EPOCHS);
    s->validation_epochs = cJSON_IsArray(ve) ? ve : NULL;
    s->thirds_ratio = payload_num(payload, DG_P_SOAK_STEP_TREND_THIRDS_RATIO);
    s->thirds_point = payload_num(payload, DG_P_SOAK_STEP_TREND_THIRDS_RATIO_CI_POINT);
    s->thirds_lo = payload_num(payload, DG_P_SOAK_STEP_TREND_THIRDS_RATIO_CI_LO);
    s->thirds_hi = payload_num(payload, DG_P_SOAK_STEP_TREND_THIRDS_RATIO_CI_HI);
    s->trend_slope = payload_num(payload, DG_P_SOAK_STEP_TREND_SLOPE);
    s->trend_median = payload_num(payload, DG_P_SOAK_STEP_TREND_MEDIAN);
    s->swap_growth = dg_rec_num(soak, DG_P_SOAK_SAMPLER_SWAP_GROWTH);
    s->train_samples = dg_rec_num(soak, DG_P_SOAK_DATA_TRAIN_SAMPLES);
    const cJSON *census = dg_rec_arr(soak, DG_P_SOAK_FALLBACKS);
    s->has_census = census != NULL;
    build_census(b, census, &s->census, &s->ncensus);
    const cJSON *arr = dg_rec_arr(soak, DG_P_SOAK_EPOCHS);
    s->epochs = array_of(b, cJSON_GetArraySize(arr), sizeof *s->epochs);
    if (!s->epochs)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_epoch *e = &s->epochs[s->nepochs++];
        e->epoch = dg_rec_num(it, DG_P_SOAK_EPOCHS_EPOCH);
        e->allocated = dg_rec_num(it, DG_P_SOAK_EPOCHS_ALLOCATED);
        e->reserved = dg_rec_num(it, DG_P_SOAK_EPOCHS_RESERVED);
        e->driver_used = dg_rec_num(it, DG_P_SOAK_EPOCHS_DRIVER_USED);
        e->rss = dg_rec_num(it, DG_P_SOAK_EPOCHS_RSS);
        e->rss_peak = dg_rec_num(it, DG_P_SOAK_EPOCHS_RSS_PEAK);
        e->step_ms = dg_rec_num(it, DG_P_SOAK_EPOCHS_STEP_MS);
        e->samples_per_s = dg_rec_num(it, DG_P_SOAK_EPOCHS_SAMPLES_PER_S);
        e->cache_emptied = dg_rec_bool(it, DG_P_SOAK_EPOCHS_CACHE_EMPTIED);
        e->validation = dg_rec_bool(it, DG_P_SOAK_EPOCHS_VALIDATION);
    }
}

/* The COMPARE row of a figure a run names ("loss_vs_ref.device" is the row
 * "runs[].loss_vs_ref.device"); DG_P_COUNT when none declares it. */
static dg_rec_path_id run_figure_row(const char *name)
{
    for (int i = 0; name && i < DG_P_COUNT; i++) {
        const dg_rec_path *r = &dg_rec_paths[i];
        if (r->section == DG_SEC_COMPARE && !strncmp(r->path, "runs[].", 7) &&
            !strcmp(r->path + 7, name) && !strchr(name, '['))
            return (dg_rec_path_id)i;
    }
    return DG_P_COUNT;
}

static dg_rec_interval interval_of(const cJSON *run, dg_rec_path_id lo, dg_rec_path_id hi)
{
    return (dg_rec_interval){dg_rec_num(run, lo), dg_rec_num(run, hi)};
}

/* One side's repetitions of a compare run: the ids are the cpu's or the device's. */
typedef struct reps_ids {
    dg_rec_path_id reps, warmup, ms;
    window_ids window;
} reps_ids;

static void build_reps(builder *b, const cJSON *run, const reps_ids *ids, dg_view_rep **out,
                       int *nout)
{
    const cJSON *arr = dg_rec_arr(run, ids->reps);
    *out = array_of(b, cJSON_GetArraySize(arr), sizeof **out);
    *nout = 0;
    if (!*out)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_rep *r = &(*out)[(*nout)++];
        r->warmup = dg_rec_num(it, ids->warmup);
        const cJSON *ms = dg_rec_arr(it, ids->ms);
        r->ms = array_of(b, cJSON_GetArraySize(ms), sizeof *r->ms);
        if (r->ms) {
            const cJSON *x;
            cJSON_ArrayForEach(x, ms)
            {
                r->ms[r->nms++] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
            }
        }
        build_window(b, &r->window, it, &ids->window);
    }
}

static void build_compare(builder *b, dg_view_compare *c, const cJSON *cmp)
{
    c->present = cmp != NULL;
    c->status = dg_rec_str(cmp, DG_P_COMPARE_STATUS);
    c->error = dg_rec_str(cmp, DG_P_COMPARE_ERROR);
    c->backend = dg_rec_str(cmp, DG_P_COMPARE_SPEC_BACKEND);
    c->device_name = dg_rec_str(cmp, DG_P_COMPARE_DEVICE_NAME);
    c->loss_tolerance = dg_rec_num(cmp, DG_P_COMPARE_THRESHOLDS_LOSS_TOLERANCE);
    c->param_tolerance = dg_rec_num(cmp, DG_P_COMPARE_THRESHOLDS_PARAM_TOLERANCE);
    c->within_tolerance = dg_rec_bool(cmp, DG_P_COMPARE_WITHIN_TOLERANCE);
    c->threads = dg_rec_num(cmp, DG_P_COMPARE_SPEC_THREADS);
    c->threads_used = dg_rec_num(cmp, DG_P_COMPARE_SPEC_THREADS_USED);
    c->threads_source = dg_rec_str(cmp, DG_P_COMPARE_SPEC_THREADS_SOURCE);
    const cJSON *arr = dg_rec_arr(cmp, DG_P_COMPARE_RUNS);
    c->runs = array_of(b, cJSON_GetArraySize(arr), sizeof *c->runs);
    if (!c->runs)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_run *r = &c->runs[c->nruns++];
        r->json = it;
        r->status = dg_rec_str(it, DG_P_COMPARE_RUNS_STATUS);
        r->failed = dg_rec_str(it, DG_P_COMPARE_RUNS_FAILED);
        r->error = dg_rec_str(it, DG_P_COMPARE_RUNS_ERROR);
        /* A run that ended: not the failed-run shape {batch, status, failed, error}. */
        r->ok = cJSON_IsObject(it) && !dg_rec_at(it, DG_P_COMPARE_RUNS_FAILED) &&
                (!r->status || !strcmp(r->status, "ok"));
        r->device_backend = dg_rec_str(it, DG_P_COMPARE_RUNS_DEVICE_BACKEND);
        r->verdict = dg_rec_str(it, DG_P_COMPARE_RUNS_VERDICT);
        r->batch = dg_rec_num(it, DG_P_COMPARE_RUNS_BATCH);
        r->speedup = dg_rec_num(it, DG_P_COMPARE_RUNS_SPEEDUP);
        r->reduction_pct = dg_rec_num(it, DG_P_COMPARE_RUNS_STEP_TIME_REDUCTION_PCT);
        r->busy_fraction = dg_rec_num(it, DG_P_COMPARE_RUNS_BUSY_FRACTION);
        r->cpu_step_ms = dg_rec_num(it, DG_P_COMPARE_RUNS_CPU_STEP_MS);
        r->device_step_ms = dg_rec_num(it, DG_P_COMPARE_RUNS_DEVICE_STEP_MS);
        r->cpu_sps = dg_rec_num(it, DG_P_COMPARE_RUNS_CPU_SAMPLES_PER_S);
        r->device_sps = dg_rec_num(it, DG_P_COMPARE_RUNS_DEVICE_SAMPLES_PER_S);
        r->device_fallbacks = dg_rec_num(it, DG_P_COMPARE_RUNS_DEVICE_FALLBACKS);
        r->loss_vs_ref_device = dg_rec_num(it, DG_P_COMPARE_RUNS_LOSS_VS_REF_DEVICE);
        r->param_drift_device_vs_ref = dg_rec_num(it, DG_P_COMPARE_RUNS_PARAM_DRIFT_DEVICE_VS_REF);
        r->reference_ran = dg_rec_bool(it, DG_P_COMPARE_RUNS_REFERENCE_RAN);
        r->within_tolerance = dg_rec_bool(it, DG_P_COMPARE_RUNS_WITHIN_TOLERANCE);
        r->drift = dg_rec_arr(it, DG_P_COMPARE_RUNS_DRIFT);
        r->figures = array_of(b, cJSON_GetArraySize(r->drift), sizeof *r->figures);
        if (r->figures) {
            const cJSON *fig;
            cJSON_ArrayForEach(fig, r->drift)
            {
                if (!cJSON_IsString(fig))
                    continue;
                dg_view_figure *x = &r->figures[r->nfigures++];
                x->name = fig->valuestring;
                dg_rec_path_id row = run_figure_row(x->name);
                x->value =
                    row < DG_P_COUNT ? dg_rec_num(it, row) : (dg_rec_metric){NAN, "", false, false};
            }
        }
        r->speedup_ci =
            interval_of(it, DG_P_COMPARE_RUNS_SPEEDUP_CI_LO, DG_P_COMPARE_RUNS_SPEEDUP_CI_HI);
        r->reduction_ci = interval_of(it, DG_P_COMPARE_RUNS_STEP_TIME_REDUCTION_PCT_CI_LO,
                                      DG_P_COMPARE_RUNS_STEP_TIME_REDUCTION_PCT_CI_HI);
        r->busy_ci = interval_of(it, DG_P_COMPARE_RUNS_BUSY_FRACTION_CI_LO,
                                 DG_P_COMPARE_RUNS_BUSY_FRACTION_CI_HI);
        r->mw_p = dg_rec_num(it, DG_P_COMPARE_RUNS_MANN_WHITNEY_P);
        r->reps_per_side = dg_rec_num(it, DG_P_COMPARE_RUNS_REPETITIONS_PER_SIDE);
        static const reps_ids side_ids[2] = {
            {DG_P_COMPARE_RUNS_REPETITIONS_CPU,
             DG_P_COMPARE_RUNS_REPETITIONS_CPU_WARMUP,
             DG_P_COMPARE_RUNS_REPETITIONS_CPU_MS,
             {DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW,
              DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW_OTHERS_CPUS,
              DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW_OTHERS_SHARE,
              DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW_CPU_PRESSURE_SOME,
              DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW_TOP,
              DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW_TOP_NAME,
              DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW_TOP_PID,
              DG_P_COMPARE_RUNS_REPETITIONS_CPU_WINDOW_TOP_CPU_PERCENT}},
            {DG_P_COMPARE_RUNS_REPETITIONS_DEVICE,
             DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WARMUP,
             DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_MS,
             {DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW,
              DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW_OTHERS_CPUS,
              DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW_OTHERS_SHARE,
              DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW_CPU_PRESSURE_SOME,
              DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW_TOP,
              DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW_TOP_NAME,
              DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW_TOP_PID,
              DG_P_COMPARE_RUNS_REPETITIONS_DEVICE_WINDOW_TOP_CPU_PERCENT}},
        };
        for (int side = 0; side < 2; side++)
            build_reps(b, it, &side_ids[side], &r->reps[side], &r->nreps[side]);
    }
}

static void build_profile(builder *b, dg_view_profile *p, const cJSON *prof)
{
    p->present = prof != NULL;
    p->backend = dg_rec_str(prof, DG_P_PROFILE_SPEC_BACKEND);
    p->workers = dg_rec_num(prof, DG_P_PROFILE_SPEC_WORKERS);
    p->sync_every = dg_rec_num(prof, DG_P_PROFILE_SPEC_SYNC_EVERY);
    p->step_ms = dg_rec_num(prof, DG_P_PROFILE_STEP_MS);
    p->profiled_ms = dg_rec_num(prof, DG_P_PROFILE_STEP_PROFILED_MS);
    p->mean_ms = dg_rec_num(prof, DG_P_PROFILE_STEP_MEAN_MS);
    p->stats_n = dg_rec_num(prof, DG_P_PROFILE_STEP_STATS_N);
    p->stats_median = dg_rec_num(prof, DG_P_PROFILE_STEP_STATS_MEDIAN);
    p->stats_iqr = dg_rec_num(prof, DG_P_PROFILE_STEP_STATS_IQR);
    p->stats_iqr_share = dg_rec_num(prof, DG_P_PROFILE_STEP_STATS_IQR_SHARE);
    p->sync_per_step = dg_rec_num(prof, DG_P_PROFILE_SYNC_POINTS_PER_STEP);
    p->fallback_calls = dg_rec_num(prof, DG_P_PROFILE_OPS_TOTAL_FALLBACK_CALLS);
    p->host_reads = dg_rec_num(prof, DG_P_PROFILE_SYNC_POINTS_HOST_READS);
    p->host_reads_per_step = dg_rec_num(prof, DG_P_PROFILE_SYNC_POINTS_HOST_READS_PER_STEP);
    p->host_reads_source = dg_rec_str(prof, DG_P_PROFILE_SYNC_POINTS_HOST_READS_SOURCE);
    p->host_reads_library = dg_rec_num(prof, DG_P_PROFILE_SYNC_POINTS_HOST_READS_LIBRARY);
    p->source = dg_rec_str(prof, DG_P_PROFILE_SOURCE);
    p->window_steps = dg_rec_num(prof, DG_P_PROFILE_WINDOW_STEPS);
    p->noise = dg_rec_str(prof, DG_P_PROFILE_STEP_STATS_NOISE);
    p->note = dg_rec_str(prof, DG_P_PROFILE_NOTE);
    p->bytes_h2d = dg_rec_num(prof, DG_P_PROFILE_BYTES_H2D);
    p->bytes_d2h = dg_rec_num(prof, DG_P_PROFILE_BYTES_D2H);
    p->bytes_fallback_h2d = dg_rec_num(prof, DG_P_PROFILE_BYTES_FALLBACK_H2D);
    p->bytes_fallback_d2h = dg_rec_num(prof, DG_P_PROFILE_BYTES_FALLBACK_D2H);
    p->has_phases = dg_rec_obj(prof, DG_P_PROFILE_PHASES) != NULL;
    static const dg_rec_path_id ph_obj[DG_PHASE_COUNT] = {
        DG_P_PROFILE_PHASES_READ,       DG_P_PROFILE_PHASES_DECODE,    DG_P_PROFILE_PHASES_RESIZE,
        DG_P_PROFILE_PHASES_AUGMENT,    DG_P_PROFILE_PHASES_NORMALISE, DG_P_PROFILE_PHASES_COLLATE,
        DG_P_PROFILE_PHASES_QUEUE_WAIT, DG_P_PROFILE_PHASES_H2D,       DG_P_PROFILE_PHASES_FORWARD,
        DG_P_PROFILE_PHASES_BACKWARD,   DG_P_PROFILE_PHASES_UPDATE,    DG_P_PROFILE_PHASES_D2H,
        DG_P_PROFILE_PHASES_SYNC};
    static const dg_rec_path_id ph[DG_PHASE_COUNT][3] = {
        {DG_P_PROFILE_PHASES_READ_MS, DG_P_PROFILE_PHASES_READ_SHARE,
         DG_P_PROFILE_PHASES_READ_IN_STEP},
        {DG_P_PROFILE_PHASES_DECODE_MS, DG_P_PROFILE_PHASES_DECODE_SHARE,
         DG_P_PROFILE_PHASES_DECODE_IN_STEP},
        {DG_P_PROFILE_PHASES_RESIZE_MS, DG_P_PROFILE_PHASES_RESIZE_SHARE,
         DG_P_PROFILE_PHASES_RESIZE_IN_STEP},
        {DG_P_PROFILE_PHASES_AUGMENT_MS, DG_P_PROFILE_PHASES_AUGMENT_SHARE,
         DG_P_PROFILE_PHASES_AUGMENT_IN_STEP},
        {DG_P_PROFILE_PHASES_NORMALISE_MS, DG_P_PROFILE_PHASES_NORMALISE_SHARE,
         DG_P_PROFILE_PHASES_NORMALISE_IN_STEP},
        {DG_P_PROFILE_PHASES_COLLATE_MS, DG_P_PROFILE_PHASES_COLLATE_SHARE,
         DG_P_PROFILE_PHASES_COLLATE_IN_STEP},
        {DG_P_PROFILE_PHASES_QUEUE_WAIT_MS, DG_P_PROFILE_PHASES_QUEUE_WAIT_SHARE,
         DG_P_PROFILE_PHASES_QUEUE_WAIT_IN_STEP},
        {DG_P_PROFILE_PHASES_H2D_MS, DG_P_PROFILE_PHASES_H2D_SHARE,
         DG_P_PROFILE_PHASES_H2D_IN_STEP},
        {DG_P_PROFILE_PHASES_FORWARD_MS, DG_P_PROFILE_PHASES_FORWARD_SHARE,
         DG_P_PROFILE_PHASES_FORWARD_IN_STEP},
        {DG_P_PROFILE_PHASES_BACKWARD_MS, DG_P_PROFILE_PHASES_BACKWARD_SHARE,
         DG_P_PROFILE_PHASES_BACKWARD_IN_STEP},
        {DG_P_PROFILE_PHASES_UPDATE_MS, DG_P_PROFILE_PHASES_UPDATE_SHARE,
         DG_P_PROFILE_PHASES_UPDATE_IN_STEP},
        {DG_P_PROFILE_PHASES_D2H_MS, DG_P_PROFILE_PHASES_D2H_SHARE,
         DG_P_PROFILE_PHASES_D2H_IN_STEP},
        {DG_P_PROFILE_PHASES_SYNC_MS, DG_P_PROFILE_PHASES_SYNC_SHARE,
         DG_P_PROFILE_PHASES_SYNC_IN_STEP},
    };
    for (int i = 0; i < DG_PHASE_COUNT; i++) {
        p->phases[i].present = dg_rec_obj(prof, ph_obj[i]) != NULL;
        p->phases[i].ms = dg_rec_num(prof, ph[i][0]);
        p->phases[i].share = dg_rec_num(prof, ph[i][1]);
        p->phases[i].in_step = dg_rec_bool(prof, ph[i][2]);
    }
    const cJSON *ops = dg_rec_arr(prof, DG_P_PROFILE_OPS);
    p->has_ops = ops != NULL;
    p->ops = array_of(b, cJSON_GetArraySize(ops), sizeof *p->ops);
    if (p->ops) {
        const cJSON *it;
        cJSON_ArrayForEach(it, ops)
        {
            dg_view_op *o = &p->ops[p->nops++];
            o->op = dg_rec_str(it, DG_P_PROFILE_OPS_OP);
            o->shape = dg_rec_str(it, DG_P_PROFILE_OPS_SHAPE);
            o->backend = dg_rec_str(it, DG_P_PROFILE_OPS_BACKEND);
            o->fallback = dg_rec_bool(it, DG_P_PROFILE_OPS_FALLBACK);
            o->calls = dg_rec_num(it, DG_P_PROFILE_OPS_CALLS);
            o->ms_total = dg_rec_num(it, DG_P_PROFILE_OPS_MS_TOTAL);
            o->ms_mean = dg_rec_num(it, DG_P_PROFILE_OPS_MS_MEAN);
            o->share = dg_rec_num(it, DG_P_PROFILE_OPS_SHARE);
        }
    }
    p->fallbacks = dg_rec_arr(prof, DG_P_PROFILE_FALLBACKS);
    p->nfallbacks = cJSON_GetArraySize(p->fallbacks);
    build_census(b, p->fallbacks, &p->census, &p->nfallbacks);
}

#define CONTENTION_IDS(P)                                                                          \
    {                                                                                              \
        P, P##_OTHERS_CPUS, P##_OTHERS_SHARE, P##_CPU_PRESSURE_SOME, P##_TOP, P##_TOP_NAME,        \
            P##_TOP_PID, P##_TOP_CPU_PERCENT                                                       \
    }

static void build_supervise(builder *b, dg_view_supervise *s, const cJSON *sup)
{
    s->present = sup != NULL;
    s->exit_status = dg_rec_num(sup, DG_P_SUPERVISE_EXIT_STATUS);
    s->run_end_status = dg_rec_str(sup, DG_P_SUPERVISE_RUN_END_STATUS);
    s->signal = dg_rec_str(sup, DG_P_SUPERVISE_SIGNAL);
    const cJSON *el = cJSON_GetArrayItem(dg_rec_arr(sup, DG_P_SUPERVISE_ERROR_LINES), 0);
    s->error_line = cJSON_IsString(el) ? el->valuestring : NULL;
    s->timed_out = dg_rec_bool(sup, DG_P_SUPERVISE_TIMED_OUT);
    s->interrupted = dg_rec_bool(sup, DG_P_SUPERVISE_INTERRUPTED);
    s->wall = dg_rec_num(sup, DG_P_SUPERVISE_WALL);
    s->events_lines = dg_rec_num(sup, DG_P_SUPERVISE_EVENTS_LINES);
    s->events_dropped = dg_rec_num(sup, DG_P_SUPERVISE_EVENTS_DROPPED);
    s->events_malformed = dg_rec_num(sup, DG_P_SUPERVISE_EVENTS_MALFORMED);
    s->events_overlong = dg_rec_num(sup, DG_P_SUPERVISE_EVENTS_OVERLONG);
    s->rss_peak = dg_rec_num(sup, DG_P_SUPERVISE_SAMPLES_RSS_PEAK);
    s->cpu_pct_median = dg_rec_num(sup, DG_P_SUPERVISE_SAMPLES_CPU_PCT_MEDIAN);
    s->cores = dg_rec_num(sup, DG_P_SUPERVISE_SAMPLES_CORES);
    const cJSON *ser = dg_rec_arr(sup, DG_P_SUPERVISE_SERIES);
    s->series = array_of(b, cJSON_GetArraySize(ser), sizeof *s->series);
    if (!s->series)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, ser)
    {
        dg_view_sample *p = &s->series[s->nseries++];
        p->t = dg_rec_num(it, DG_P_SUPERVISE_SERIES_T);
        p->rss = dg_rec_num(it, DG_P_SUPERVISE_SERIES_RSS);
        p->cpu_pct = dg_rec_num(it, DG_P_SUPERVISE_SERIES_CPU_PCT);
        p->procs = dg_rec_num(it, DG_P_SUPERVISE_SERIES_PROCS);
    }
}

static int severity_rank(const char *s)
{
    return !s                       ? 0
           : strcmp(s, "fail") == 0 ? 3
           : strcmp(s, "warn") == 0 ? 2
           : strcmp(s, "info") == 0 ? 1
                                    : 0;
}

static void build_judgement(builder *b, dg_record_view *v, const cJSON *rec)
{
    const cJSON *th = dg_rec_obj(rec, DG_P_REC_THRESHOLDS);
    v->thresholds = array_of(b, cJSON_GetArraySize(th), sizeof *v->thresholds);
    if (v->thresholds) {
        const cJSON *it;
        cJSON_ArrayForEach(it, th)
        {
            if (cJSON_IsNumber(it) && it->string)
                v->thresholds[v->nthresholds++] = (dg_view_threshold){it->string, it->valuedouble};
        }
    }
    const cJSON *fs = dg_rec_arr(rec, DG_P_REC_FINDINGS);
    v->findings = array_of(b, cJSON_GetArraySize(fs), sizeof *v->findings);
    if (v->findings) {
        const cJSON *it;
        cJSON_ArrayForEach(it, fs)
        {
            dg_view_finding *f = &v->findings[v->nfindings++];
            f->json = it;
            f->id = dg_rec_str(it, DG_P_REC_FINDINGS_ID);
            f->severity = dg_rec_str(it, DG_P_REC_FINDINGS_SEVERITY);
            f->title = dg_rec_str(it, DG_P_REC_FINDINGS_TITLE);
            f->hypothesis = dg_rec_str(it, DG_P_REC_FINDINGS_HYPOTHESIS);
            f->action = dg_rec_str(it, DG_P_REC_FINDINGS_ACTION);
            const cJSON *ev = dg_rec_arr(it, DG_P_REC_FINDINGS_EVIDENCE);
            f->section = dg_rec_str(cJSON_GetArrayItem(ev, 0), DG_P_REC_FINDINGS_EVIDENCE_SECTION);
            f->rank = severity_rank(f->severity);
        }
    }
    /* REC_DECISION_* and REC_FINAL_GATE_* paths start at the record. */
    const cJSON *d = dg_rec_obj(rec, DG_P_REC_DECISION) ? rec : NULL;
    v->decision.present = d != NULL;
    v->decision.route = dg_rec_str(d, DG_P_REC_DECISION_ROUTE);
    v->decision.backend = dg_rec_str(d, DG_P_REC_DECISION_BACKEND);
    v->decision.reasons = dg_rec_arr(d, DG_P_REC_DECISION_REASONS);
    const cJSON *g = dg_rec_obj(rec, DG_P_REC_FINAL_GATE) ? rec : NULL;
    dg_view_final_gate *fg = &v->final_gate;
    fg->present = g != NULL;
    fg->accepted = dg_rec_bool(g, DG_P_REC_FINAL_GATE_ACCEPTED);
    fg->proofs[0] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_ARCHITECTURE);
    fg->proofs[1] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_GATE_LOG);
    fg->proofs[2] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_SWEEP);
    fg->proofs[3] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_MEMORY_CURVE);
    fg->fail_findings = dg_rec_num(g, DG_P_REC_FINAL_GATE_FAIL_FINDINGS);
    fg->throughput = dg_rec_num(g, DG_P_REC_FINAL_GATE_THROUGHPUT);
    fg->energy_per_sample = dg_rec_num(g, DG_P_REC_FINAL_GATE_ENERGY_PER_SAMPLE);
    fg->batch = dg_rec_num(g, DG_P_REC_FINAL_GATE_BATCH);
    fg->safe_batch = dg_rec_num(g, DG_P_REC_FINAL_GATE_SAFE_BATCH);
    fg->safe_bound = dg_rec_str(g, DG_P_REC_FINAL_GATE_SAFE_BATCH_BOUND);
    fg->statement = dg_rec_str(g, DG_P_REC_FINAL_GATE_STATEMENT);
    fg->missing = dg_rec_arr(g, DG_P_REC_FINAL_GATE_MISSING);
}

const char *dg_sweep_bound_words(const char *why)
{
    static const struct {
        const char *stop, *words;
    } bounds[] = {
        {"oom", "the memory ceiling"},
        {"budget", "the memory ceiling (the memory budget)"},
        {"swap", "the memory ceiling (swap grew past the limit)"},
        {"train-set", "the training set's size, not a memory ceiling"},
        {"limit", "the sweep's upper limit, not a memory ceiling"},
        {"throughput-plateau", "the largest batch tried, not a memory ceiling (the sweep stopped "
                               "on a throughput plateau)"},
        {"throughput-falling", "the largest batch tried, not a memory ceiling (the sweep stopped "
                               "on falling throughput)"},
        {"time", "the largest batch tried, not a memory ceiling (the sweep stopped on time)"},
    };
    for (size_t i = 0; why && i < sizeof bounds / sizeof bounds[0]; i++)
        if (!strcmp(why, bounds[i].stop))
            return bounds[i].words;
    return "the largest good batch, not a memory ceiling";
}

/* The section of each kind of per-verb record ("sweep" -> DG_SEC_SWEEP). */
static dg_rec_section kind_section(const char *kind)
{
    for (int s = DG_SEC_ENV; kind && s < DG_SEC_COUNT; s++)
        if (!strcmp(kind, dg_rec_section_name((dg_rec_section)s)))
            return (dg_rec_section)s;
    return DG_SEC_REC;
}

dg_status dg_record_view_build(dg_ctx *ctx, const cJSON *rec, dg_record_view *out)
{
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(rec))
        return dg_fail(ctx, DG_ERR_FORMAT, "record: not a JSON object");
    const cJSON *ver = dg_rec_at(rec, DG_P_REC_V);
    if (!cJSON_IsNumber(ver) || (ver->valuedouble != 1 && ver->valuedouble != 2))
        return dg_fail(ctx, DG_ERR_FORMAT, "record: version (\"v\") is not 1 or 2");
    builder b = {ctx, false};
    out->rec = rec;
    out->version = (int)ver->valuedouble;
    out->kind = dg_rec_str(rec, DG_P_REC_KIND);
    out->state = dg_rec_str(rec, DG_P_REC_STATE);
    out->label = dg_rec_str(rec, DG_P_REC_LABEL);
    out->host = dg_rec_str(rec, DG_P_REC_HOST);
    out->timestamp = dg_rec_str(rec, DG_P_REC_TIMESTAMP);
    out->run_id = dg_rec_str(rec, DG_P_REC_RUN_ID);

    dg_rec_section own = kind_section(out->kind);
    out->device = own == DG_SEC_REC ? dg_rec_str(rec, DG_P_REC_DEVICE) : NULL;
    if (own == DG_SEC_REC && dg_rec_at(rec, DG_P_REC_SEEDS)) {
        dg_view_seeds *sd = &out->seeds;
        sd->present = true;
        sd->torch = dg_rec_num(rec, DG_P_REC_SEEDS_TORCH);
        sd->torch_seeded = dg_rec_bool(rec, DG_P_REC_SEEDS_SEEDED_TORCH);
        sd->loader_workers = dg_rec_num(rec, DG_P_REC_SEEDS_LOADER_WORKERS);
        sd->loader_shuffle = dg_rec_bool(rec, DG_P_REC_SEEDS_LOADER_SHUFFLE);
        sd->loader_worker_init_fn = dg_rec_bool(rec, DG_P_REC_SEEDS_LOADER_WORKER_INIT_FN);
        sd->loader_generator = dg_rec_bool(rec, DG_P_REC_SEEDS_LOADER_GENERATOR);
    }
    if (own == DG_SEC_REC && cJSON_IsObject(dg_rec_at(rec, DG_P_REC_LOADER))) {
        dg_view_loader *l = &out->loader;
        l->present = true;
        l->num_workers = dg_rec_num(rec, DG_P_REC_LOADER_NUM_WORKERS);
        l->batch_size = dg_rec_num(rec, DG_P_REC_LOADER_BATCH_SIZE);
        l->batches = dg_rec_num(rec, DG_P_REC_LOADER_BATCHES);
        l->pin_memory = dg_rec_bool(rec, DG_P_REC_LOADER_PIN_MEMORY);
        l->persistent_workers = dg_rec_bool(rec, DG_P_REC_LOADER_PERSISTENT_WORKERS);
        l->batch_arg = dg_rec_str(rec, DG_P_REC_LOADER_BATCH_ARG);
        l->workers_arg = dg_rec_str(rec, DG_P_REC_LOADER_WORKERS_ARG);
    }
    if (own != DG_SEC_REC) {
        out->section[own] = rec; /* a per-verb record is its own section */
        out->listed[own] = true;
        build_spec(&out->spec, NULL); /* all "not reported" */
        /* An slo record carries its findings and the environment proof. */
        build_judgement(&b, out, own == DG_SEC_SLO ? rec : NULL);
        if (own == DG_SEC_SLO) {
            /* Its final gate is its own (record_slo.h), not accept's proofs. */
            memset(&out->final_gate, 0, sizeof out->final_gate);
            const cJSON *env = dg_rec_at(rec, DG_P_SLO_ENV);
            out->section[DG_SEC_ENV] = obj_or_null(env);
            out->listed[DG_SEC_ENV] = env != NULL;
        }
    } else {
        static const dg_rec_path_id ids[DG_SEC_COUNT] = {[DG_SEC_ENV] = DG_P_REC_ENV,
                                                         [DG_SEC_GATE] = DG_P_REC_GATE,
                                                         [DG_SEC_SWEEP] = DG_P_REC_SWEEP,
                                                         [DG_SEC_SOAK] = DG_P_REC_SOAK,
                                                         [DG_SEC_COMPARE] = DG_P_REC_COMPARE,
                                                         [DG_SEC_PROFILE] = DG_P_REC_PROFILE,
                                                         [DG_SEC_SUPERVISE] = DG_P_REC_SUPERVISE};
        out->section[DG_SEC_REC] = rec;
        for (int s = DG_SEC_ENV; s < DG_SEC_COUNT; s++)
            if (s != DG_SEC_TRAIN && s != DG_SEC_SLO) {
                const cJSON *sec = dg_rec_at(rec, ids[s]);
                out->section[s] = obj_or_null(sec);
                out->listed[s] = sec != NULL;
            }
        build_spec(&out->spec, rec);
        build_steps(&b, out, rec);
        build_judgement(&b, out, rec);
    }
    build_env(&b, &out->env, out->section[DG_SEC_ENV]);
    build_gate(&b, &out->gate, out->section[DG_SEC_GATE]);
    build_sweep(&b, &out->sweep, out->section[DG_SEC_SWEEP]);
    /* The soak section's own "v" says how it nests (a v1 section inside a
     * record read as v1 has none of its own only when written by hand). */
    const cJSON *soak = out->section[DG_SEC_SOAK];
    const cJSON *sv = dg_rec_at(soak, DG_P_SOAK_V);
    int soak_version = cJSON_IsNumber(sv) ? (int)sv->valuedouble : out->version;
    out->soak_payload = soak_payload(soak, soak_version);
    build_soak(&b, &out->soak, soak, out->soak_payload);
    build_compare(&b, &out->compare, out->section[DG_SEC_COMPARE]);
    build_profile(&b, &out->profile, out->section[DG_SEC_PROFILE]);
    build_supervise(&b, &out->supervise, out->section[DG_SEC_SUPERVISE]);
    /* What else ran: during the soak's epochs, and (a run) the whole run. */
    static const window_ids soak_w = CONTENTION_IDS(DG_P_SOAK_CONTENTION),
                            rec_w = CONTENTION_IDS(DG_P_REC_CONTENTION);
    build_window(&b, &out->soak.window, soak, &soak_w);
    build_window(&b, &out->supervise.window, rec, &rec_w);
    if (b.nomem)
        return dg_fail(ctx, DG_ERR_NOMEM, "record: out of host memory for the view");
    return DG_OK;
}

void dg_record_view_free(dg_record_view *v)
{
    if (!v)
        return;
    dg_free(v->steps);
    dg_free(v->env.top_cpu);
    dg_free(v->env.top_mem);
    dg_free(v->env.mixed);
    dg_free(v->env.backends);
    for (int i = 0; v->gate.backends && i < v->gate.nbackends; i++) {
        free_window(&v->gate.backends[i].matmul.window);
        dg_free(v->gate.backends[i].devices);
        dg_view_backend_levels_free(&v->gate.backends[i]);
    }
    dg_free(v->gate.backends);
    dg_free(v->sweep.trials);
    dg_free(v->sweep.bisect);
    dg_free(v->soak.epochs);
    dg_free(v->soak.census);
    for (int i = 0; v->compare.runs && i < v->compare.nruns; i++) {
        dg_view_run *r = &v->compare.runs[i];
        dg_free(r->figures);
        for (int side = 0; side < 2; side++) {
            for (int k = 0; r->reps[side] && k < r->nreps[side]; k++) {
                dg_free(r->reps[side][k].ms);
                free_window(&r->reps[side][k].window);
            }
            dg_free(r->reps[side]);
        }
    }
    dg_free(v->compare.runs);
    dg_free(v->profile.ops);
    dg_free(v->profile.census);
    dg_free(v->supervise.series);
    free_window(&v->supervise.window);
    free_window(&v->soak.window);
    dg_free(v->thresholds);
    dg_free(v->findings);
    memset(v, 0, sizeof *v);
}

double dg_view_threshold_value(const dg_record_view *v, const char *name)
{
    for (int i = 0; v && name && i < v->nthresholds; i++)
        if (!strcmp(v->thresholds[i].name, name))
            return v->thresholds[i].value;
    return NAN;
}
