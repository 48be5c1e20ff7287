/* The train record (docs/schema/measure.md "train") of a run the trainer
 * made (train.c): spec, losses, throughput and energy, phases, allocator,
 * loader, fallbacks, samples. */
#include "engine/train_int.h"

#include "core/record.h"
#include "env/peak.h"

#include <math.h>
#include <string.h>

const char *const dg_train_phase_names[PH_COUNT] = {"h2d", "forward", "backward", "update"};

/* Energy beside samples/s (docs/schema/train.md): the counter's growth over
 * the timed steps as power, and its share of the timed wall per sample. A
 * counter that did not advance (NVML's updates every few tens of ms; a
 * sweep trial's steps can be shorter) is no reading: not valid, never 0 W. */
static void energy_json(const trainer *t, cJSON *thr, double wall, double samples)
{
    const dg_health_sample *a = &t->energy[0], *b = &t->energy[1];
    bool ok = a->energy_j.valid && b->energy_j.valid && b->t > a->t &&
              b->energy_j.value > a->energy_j.value && wall > 0 && samples > 0;
    double w = ok ? (b->energy_j.value - a->energy_j.value) / (b->t - a->t) : NAN;
    cJSON_AddItemToObject(thr, "power", dg_json_metric(ok ? w : 0, ok, "W"));
    cJSON_AddItemToObject(thr, "energy", dg_json_metric(ok ? w * wall : 0, ok, "J"));
    cJSON_AddItemToObject(thr, "energy_per_sample",
                          dg_json_metric(ok ? w * wall / samples : 0, ok, "J/sample"));
    cJSON_AddStringToObject(thr, "energy_source",
                            t->health ? dg_health_source(t->health)
                                      : "none: the device reports no energy");
}

/* Where the run's start went (what a sweep trial pays before its timed
 * steps): each wall valid where the run got that far. */
static void startup_json(const trainer *t, cJSON *rec, bool timed)
{
    cJSON *su = cJSON_AddObjectToObject(rec, "startup");
    const struct {
        const char *name;
        double s;
    } walls[] = {{"data", t->w_data},
                 {"engine", t->w_engine},
                 {"prepare", t->w_prepare},
                 {"first_steps", timed ? t->t0 - t->t_start : NAN}};
    for (size_t i = 0; i < sizeof walls / sizeof walls[0]; i++)
        cJSON_AddItemToObject(
            su, walls[i].name,
            dg_json_metric(isfinite(walls[i].s) ? walls[i].s : 0, isfinite(walls[i].s), "s"));
}

/* The record of the run that ended with status final. */
cJSON *dg_train_record(trainer *t, dg_status final)
{
    dg_ctx *ctx = t->ctx;
    const dg_train_opts *o = t->o;
    const dg_train_ext *x = t->x;
    dg_engine *e = t->e;
    cJSON *rec = t->rec;
    dg_record_head(rec, "train", 1);
    cJSON_AddStringToObject(rec, "status", dg_status_name(final));
    dg_json_add_str(rec, "error", final == DG_OK ? NULL : dg_errmsg(ctx));
    cJSON_AddItemToObject(rec, "spec", t->spec);
    t->spec = NULL;
    cJSON_AddItemToObject(rec, "model", dg_model_json(&t->m));
    cJSON *dev = cJSON_AddObjectToObject(rec, "device");
    dg_device_info info;
    if (e->be->device_info(e->bctx, o->device, &info) == DG_OK) {
        cJSON_AddStringToObject(dev, "name", info.name);
        cJSON_AddStringToObject(dev, "vendor", info.vendor);
    }
    char ver[512] = "";
    e->be->versions(e->bctx, ver, sizeof ver);
    cJSON_AddStringToObject(dev, "versions", ver);
    int timed_steps = t->timed_steps, warmup = t->warmup;
    double wall = t->wall, data_wait = t->data_wait;
    if (t->data) {
        cJSON_AddItemToObject(rec, "bucket", dg_loader_bucket_json(t->data));
        cJSON_AddStringToObject(rec, "spec_id", t->spec_id); /* dg_spec_hash of the spec */
        cJSON *dj = dg_loader_stats_json(t->data);
        bool waited = timed_steps > 0;
        cJSON *wj = cJSON_AddObjectToObject(dj, "wait");
        cJSON_AddItemToObject(
            wj, "per_step",
            dg_json_metric(waited ? data_wait / timed_steps * 1e3 : 0, waited, "ms"));
        cJSON_AddItemToObject(wj, "share_of_step",
                              dg_json_metric(waited && wall > 0 ? data_wait / wall : 0,
                                             waited && wall > 0, "fraction"));
        if (t->val) {
            size_t vb, vs;
            dg_loader_bad_counts(t->val, &vb, &vs);
            cJSON_AddNumberToObject(dj, "val_bad_samples", (double)vb);
        }
        cJSON_AddItemToObject(rec, "data", dj);
    }
    if (t->vals) {
        cJSON_AddItemToObject(rec, "val", t->vals);
        t->vals = NULL;
    }
    cJSON *mem = cJSON_AddObjectToObject(rec, "memory");
    cJSON_AddItemToObject(mem, "activation_bytes",
                          dg_json_metric((double)t->lay.bytes, true, "bytes"));
    cJSON_AddItemToObject(mem, "workspace_bytes",
                          dg_json_metric((double)t->lay.work_bytes, true, "bytes"));
    dg_alloc_stats as;
    dg_alloc_get_stats(e->alloc, &as);
    cJSON_AddItemToObject(mem, "allocator", dg_alloc_stats_json(&as));
    cJSON_AddItemToObject(rec, "loss", t->losses ? t->losses : cJSON_CreateArray());
    t->losses = NULL;
    cJSON_AddBoolToObject(rec, "loss_finite", t->finite);
    cJSON *thr = cJSON_AddObjectToObject(rec, "throughput");
    bool timed = timed_steps > 0 && wall > 0;
    cJSON_AddNumberToObject(thr, "timed_steps", timed_steps);
    cJSON_AddNumberToObject(thr, "warmup_steps", warmup);
    cJSON_AddItemToObject(thr, "wall", dg_json_metric(wall, timed, "s"));
    cJSON_AddItemToObject(
        thr, "samples_per_s",
        dg_json_metric(timed ? timed_steps * (double)t->n / wall : 0, timed, "samples/s"));
    cJSON_AddItemToObject(thr, "step_ms",
                          dg_json_metric(timed ? wall / timed_steps * 1e3 : 0, timed, "ms"));
    bool cpu_ok = timed && isfinite(t->cpu) && t->cpu >= 0;
    cJSON_AddItemToObject(thr, "cpu_ms",
                          dg_json_metric(cpu_ok ? t->cpu / timed_steps * 1e3 : 0, cpu_ok, "ms"));
    cJSON_AddNumberToObject(thr, "sync_points", t->syncs);
    /* Commands on the device's queues and host waits per timed step (sync
     * points and epoch ends included), where the backend counts them. */
    bool counted = timed && isfinite(t->enq_step);
    cJSON_AddItemToObject(thr, "commands_per_step",
                          dg_json_metric(counted ? t->enq_step : 0, counted, "commands"));
    cJSON_AddItemToObject(thr, "host_waits_per_step",
                          dg_json_metric(counted ? t->waits_step : 0, counted, "waits"));
    /* The threads the cpu side really had, and the cores others kept busy. */
    cJSON_AddItemToObject(rec, "cpu_team", dg_cpu_team_json(&e->team));
    energy_json(t, thr, timed ? wall : 0, timed ? timed_steps * (double)t->n : 0);
    cJSON *ph = cJSON_AddObjectToObject(rec, "phases");
    cJSON_AddStringToObject(ph, "source",
                            e->be->caps.event_timing && e->be->event_elapsed
                                ? "device events, last step before each sync"
                                : "none");
    cJSON_AddNumberToObject(ph, "samples", (double)t->phase_n);
    for (int p = 0; p < PH_COUNT; p++) {
        dg_stats st;
        dg_stats_compute(t->phase_ms[p], t->phase_n, 0, &st);
        double v = t->phase_n ? st.median : NAN;
        cJSON_AddItemToObject(ph, dg_train_phase_names[p], dg_json_metric(v, isfinite(v), "ms"));
    }
    /* Host time the loop waited for its next batch, mean over the timed steps. */
    cJSON_AddItemToObject(ph, "data",
                          dg_json_metric(timed ? data_wait / timed_steps * 1e3 : 0, timed, "ms"));
    if (t->captured)
        cJSON_AddStringToObject(ph, "note",
                                "step captured as a graph: forward holds forward+backward+update");
    startup_json(t, rec, timed);
    cJSON *cap = cJSON_AddObjectToObject(rec, "capture");
    cJSON_AddBoolToObject(cap, "used", t->captured);
    dg_json_add_str(cap, "note", t->captured ? NULL : t->capture_note);
    cJSON_AddItemToObject(rec, "fallbacks", dg_engine_census_json(e));
    if (t->ext) {
        cJSON *ins = cJSON_AddObjectToObject(rec, "instrumentation");
        cJSON_AddNumberToObject(ins, "sample_ms", x->sample_ms > 0 ? x->sample_ms : 0);
        cJSON_AddBoolToObject(ins, "step_times", x->step_times);
        cJSON_AddBoolToObject(ins, "epoch_watermarks", x->epoch_watermarks);
        cJSON_AddBoolToObject(ins, "empty_cache_epoch", x->empty_cache_epoch);
        cJSON_AddNumberToObject(ins, "leak_per_step", (double)x->leak_per_step);
        cJSON_AddNumberToObject(ins, "leaked_blocks", (double)t->nleaks);
        cJSON_AddNumberToObject(ins, "val_steps", x->val_steps);
        cJSON_AddBoolToObject(ins, "profile_ops", x->profile_ops);
        dg_json_add_str(ins, "params_out", x->params_out);
        cJSON_AddBoolToObject(ins, "lock_epochs", x->lock_epochs);
        cJSON_AddItemToObject(ins, "lock_waited",
                              dg_json_metric(t->lock_waited, x->lock_epochs, "s"));
    }
    if (x->step_times && t->step_s) {
        int done_steps = t->nstep;
        cJSON *sj = cJSON_AddObjectToObject(rec, "steps");
        cJSON *ms = cJSON_AddArrayToObject(sj, "ms");
        double *v = dg_malloc(((size_t)done_steps + 1) * sizeof *v);
        for (int i = 0; i < done_steps; i++) {
            cJSON_AddItemToArray(ms, cJSON_CreateNumber(t->step_s[i] * 1e3));
            if (v)
                v[i] = t->step_s[i] * 1e3;
        }
        dg_stats stt;
        size_t wu = (size_t)(done_steps < warmup ? done_steps : warmup);
        dg_stats_compute(v, v ? (size_t)done_steps : 0, v ? wu : 0, &stt);
        cJSON_AddNumberToObject(sj, "warmup", (double)wu);
        cJSON_AddItemToObject(sj, "stats", dg_stats_json(&stt, "ms"));
        dg_free(v);
    }
    if (t->epochs_j) {
        cJSON_AddItemToObject(rec, "epochs", t->epochs_j);
        t->epochs_j = NULL;
    }
    if (t->sampler)
        cJSON_AddItemToObject(rec, "sampler", dg_sampler_json(t->sampler));
    else if (x->sample_ms > 0)
        cJSON_AddNullToObject(rec, "sampler");
    if (x->profile_ops) {
        cJSON_AddItemToObject(rec, "ops", dg_engine_ops_json(e));
        cJSON_AddItemToObject(rec, "trace", dg_engine_trace_json(e));
    }
    return rec;
}
