/* The typed views of a record (record.h), built through the path readers of
 * record_paths.c. */
#include "core/record.h"
#include "core/record_views.h"

#include <math.h>
#include <stddef.h>
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

/* ---- members read straight from one path (record_views.h) ----------------------- */

#define READ_ARRAY(b, arr, out, n, table)                                                          \
    ((out) = dg_rec_read_array((arr), sizeof *(out), dg_rec_##table, &(n), &(b)->nomem))

static const cJSON *obj_or_null(const cJSON *it)
{
    return cJSON_IsObject(it) ? it : NULL;
}

/* REC_SPEC_* paths start at the record. */
static void build_spec(dg_view_spec *s, const cJSON *spec)
{
    s->present = dg_rec_obj(spec, DG_P_REC_SPEC) != NULL;
    dg_rec_read_view(s, spec, dg_rec_spec_fields);
}

static void build_steps(builder *b, dg_record_view *v, const cJSON *rec)
{
    READ_ARRAY(b, dg_rec_arr(rec, DG_P_REC_STEPS), v->steps, v->nsteps, step_fields);
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
        dg_rec_read_view(be, it, dg_rec_backend_fields);
        READ_ARRAY(b, dg_rec_arr(it, DG_P_GATE_BACKENDS_DEVICES), be->devices, be->ndevices,
                   device_fields);
        static const window_ids wids = {DG_P_GATE_BACKENDS_MATMUL_WINDOW,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_OTHERS_CPUS,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_OTHERS_SHARE,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_CPU_PRESSURE_SOME,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP_NAME,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP_PID,
                                        DG_P_GATE_BACKENDS_MATMUL_WINDOW_TOP_CPU_PERCENT};
        build_window(b, &be->matmul.window, it, &wids);
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
    dg_rec_read_view(e, env, dg_rec_env_fields);
    e->translation_evidence = dg_rec_at(env, DG_P_ENV_ARCH_TRANSLATION_EVIDENCE);
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
    dg_rec_read_view(g, gate, dg_rec_gate_fields);
    const cJSON *backends = dg_rec_arr(gate, DG_P_GATE_BACKENDS);
    g->has_backends = backends != NULL;
    g->backends_json = dg_rec_at(gate, DG_P_GATE_BACKENDS);
    static const backend_ids ids = {DG_P_GATE_BACKENDS_NAME, DG_P_GATE_BACKENDS_BUILT,
                                    DG_P_GATE_BACKENDS_AVAILABLE, DG_P_GATE_BACKENDS_REASON,
                                    DG_P_GATE_BACKENDS_VERSIONS};
    build_backends(b, backends, &ids, true, &g->backends, &g->nbackends);
}

static void build_sweep(builder *b, dg_view_sweep *s, const cJSON *sweep)
{
    s->present = sweep != NULL;
    dg_rec_read_view(s, sweep, dg_rec_sweep_fields);
    /* Trials and bisection trials share the TRIAL shape: the trials[] rows
     * read either (dg_rec_at resolves below the element). */
    READ_ARRAY(b, dg_rec_arr(sweep, DG_P_SWEEP_TRIALS), s->trials, s->ntrials, trial_fields);
    READ_ARRAY(b, dg_rec_arr(sweep, DG_P_SWEEP_BISECT), s->bisect, s->nbisect, trial_fields);
    s->knee_is_number = cJSON_IsNumber(dg_rec_at(sweep, DG_P_SWEEP_KNEE_BATCH));
    s->safe_batch_is_number = cJSON_IsNumber(dg_rec_at(sweep, DG_P_SWEEP_SAFE_BATCH_BATCH));
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

static void build_soak(builder *b, dg_view_soak *s, const cJSON *soak, const cJSON *payload)
{
    s->present = soak != NULL;
    s->has_payload = payload != NULL;
    dg_rec_read_view(s, payload, dg_rec_soak_payload_fields);
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
        s->growth[i] = dg_rec_payload_num(payload, growth[i]);
        s->baseline[i] = dg_rec_payload_num(payload, baseline[i]);
        s->growth_point[i] = dg_rec_payload_num(payload, ci[i][0]);
        s->growth_lo[i] = dg_rec_payload_num(payload, ci[i][1]);
        s->growth_hi[i] = dg_rec_payload_num(payload, ci[i][2]);
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
        s->screen_points[m] = dg_rec_payload_num(payload, screen[i].points);
        s->screen_point[m] = dg_rec_payload_num(payload, screen[i].point);
        s->screen_lo[m] = dg_rec_payload_num(payload, screen[i].lo);
        s->screen_hi[m] = dg_rec_payload_num(payload, screen[i].hi);
    }
    const cJSON *ve = dg_rec_payload_at(payload, DG_P_SOAK_STAIRCASE_VALIDATION_EPOCHS);
    s->validation_epochs = cJSON_IsArray(ve) ? ve : NULL;
    s->swap_growth = dg_rec_num(soak, DG_P_SOAK_SAMPLER_SWAP_GROWTH);
    s->train_samples = dg_rec_num(soak, DG_P_SOAK_DATA_TRAIN_SAMPLES);
    const cJSON *census = dg_rec_arr(soak, DG_P_SOAK_FALLBACKS);
    s->has_census = census != NULL;
    /* A fallback census, the profile's or the soak's: one shape, read
     * through the profile's rows, which resolve below each entry. */
    READ_ARRAY(b, census, s->census, s->ncensus, fallback_fields);
    READ_ARRAY(b, dg_rec_arr(soak, DG_P_SOAK_EPOCHS), s->epochs, s->nepochs, epoch_fields);
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
    dg_rec_read_view(c, cmp, dg_rec_compare_fields);
    const cJSON *arr = dg_rec_arr(cmp, DG_P_COMPARE_RUNS);
    c->runs = array_of(b, cJSON_GetArraySize(arr), sizeof *c->runs);
    if (!c->runs)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        dg_view_run *r = &c->runs[c->nruns++];
        r->json = it;
        dg_rec_read_view(r, it, dg_rec_run_fields);
        /* A run that ended: not the failed-run shape {batch, status, failed, error}. */
        r->ok = cJSON_IsObject(it) && !dg_rec_at(it, DG_P_COMPARE_RUNS_FAILED) &&
                (!r->status || !strcmp(r->status, "ok"));
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
    dg_rec_read_view(p, prof, dg_rec_profile_fields);
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
    READ_ARRAY(b, ops, p->ops, p->nops, op_fields);
    p->nfallbacks = cJSON_GetArraySize(p->fallbacks);
    READ_ARRAY(b, p->fallbacks, p->census, p->nfallbacks, fallback_fields);
}

#define CONTENTION_IDS(P)                                                                          \
    {                                                                                              \
        P, P##_OTHERS_CPUS, P##_OTHERS_SHARE, P##_CPU_PRESSURE_SOME, P##_TOP, P##_TOP_NAME,        \
            P##_TOP_PID, P##_TOP_CPU_PERCENT                                                       \
    }

static void build_supervise(builder *b, dg_view_supervise *s, const cJSON *sup)
{
    s->present = sup != NULL;
    dg_rec_read_view(s, sup, dg_rec_supervise_fields);
    const cJSON *el = cJSON_GetArrayItem(dg_rec_arr(sup, DG_P_SUPERVISE_ERROR_LINES), 0);
    s->error_line = cJSON_IsString(el) ? el->valuestring : NULL;
    READ_ARRAY(b, dg_rec_arr(sup, DG_P_SUPERVISE_SERIES), s->series, s->nseries, sample_fields);
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
            dg_rec_read_view(f, it, dg_rec_finding_fields);
            const cJSON *ev = dg_rec_arr(it, DG_P_REC_FINDINGS_EVIDENCE);
            f->section = dg_rec_str(cJSON_GetArrayItem(ev, 0), DG_P_REC_FINDINGS_EVIDENCE_SECTION);
            f->rank = severity_rank(f->severity);
        }
    }
    /* REC_DECISION_* and REC_FINAL_GATE_* paths start at the record. */
    const cJSON *d = dg_rec_obj(rec, DG_P_REC_DECISION) ? rec : NULL;
    v->decision.present = d != NULL;
    dg_rec_read_view(v, d, dg_rec_decision_fields);
    const cJSON *g = dg_rec_obj(rec, DG_P_REC_FINAL_GATE) ? rec : NULL;
    dg_view_final_gate *fg = &v->final_gate;
    fg->present = g != NULL;
    dg_rec_read_view(fg, g, dg_rec_final_gate_fields);
    fg->proofs[0] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_ARCHITECTURE);
    fg->proofs[1] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_GATE_LOG);
    fg->proofs[2] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_SWEEP);
    fg->proofs[3] = dg_rec_bool(g, DG_P_REC_FINAL_GATE_PROOFS_MEMORY_CURVE);
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
    dg_rec_read_view(out, rec, dg_rec_record_fields);

    dg_rec_section own = kind_section(out->kind);
    out->device = own == DG_SEC_REC ? dg_rec_str(rec, DG_P_REC_DEVICE) : NULL;
    if (own == DG_SEC_REC && dg_rec_at(rec, DG_P_REC_SEEDS)) {
        dg_view_seeds *sd = &out->seeds;
        sd->present = true;
        dg_rec_read_view(sd, rec, dg_rec_seeds_fields);
    }
    if (own == DG_SEC_REC && cJSON_IsObject(dg_rec_at(rec, DG_P_REC_LOADER))) {
        dg_view_loader *l = &out->loader;
        l->present = true;
        dg_rec_read_view(l, rec, dg_rec_loader_fields);
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
