/* Training beside serving (--while -- CMD; docs/slo.md): the command run
 * alone, then again while a level is measured, each time in a thread of its
 * own, supervised as `devgate run` supervises (its step times through the
 * zero-code probe, its process tree sampled), watched through the probe's
 * step count and stopped with SIGTERM when the caller is done with it. What the SLO needs of each
 * run is one SIDE (docs/schema/slo.md): its median step, steps, rate, peak memory and CPU. */
#include "slo/slo.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

struct slo_beside {
    dg_ctx *ctx; /* the thread's own: messages do not race the load's */
    dg_run_opts ro;
    pthread_t thread;
    bool started;
    volatile sig_atomic_t stop; /* SIGTERM here stops the program */
    atomic_long steps;          /* the program's optimizer steps so far (the probe's ticks) */
    atomic_bool ended;
    char *json;
    dg_status st;
    double t_start, t_end; /* dg_now() */
};

/* The supervised run's progress: its optimizer steps so far (the probe's
 * ticks). Runs in the supervising thread. */
static void on_progress(void *user, const dg_progress *p)
{
    slo_beside *b = user;
    if ((p->kind == DG_PROGRESS_TICK || p->kind == DG_PROGRESS_EPOCH) && isfinite(p->steps))
        atomic_store(&b->steps, (long)p->steps);
}

static void run_opts(dg_run_opts *ro, const dg_slo_opts *o)
{
    memset(ro, 0, sizeof *ro);
    ro->argv = o->while_argv;
    ro->no_env = true;
    ro->stdout_to_stderr = true; /* stdout stays devgate's (--json) */
    ro->probe = o->while_probe_path ? DG_PROBE_AUTO : DG_PROBE_MANUAL;
    ro->probe_path = o->while_probe_path;
    ro->sample_ms = 200;
    ro->progress = on_progress;
}

/* SIDE: what one supervised run of the command gave. */
static cJSON *side_of(const char *run_json, dg_status st, dg_ctx *ctx)
{
    cJSON *rec = run_json ? cJSON_Parse(run_json) : NULL;
    cJSON *s = cJSON_CreateObject();
    dg_json_add_str(s, "state", rec ? dg_jstr(rec, "state") : "failed");
    dg_json_add_num(s, "exit_status", dg_jnum(rec, "supervise.exit_status"));
    cJSON_AddItemToObject(s, "step_ms",
                          dg_json_metric_of(dg_jnum(rec, "throughput.step_ms"), "ms"));
    dg_json_add_num(s, "timed_steps", dg_jnum(rec, "throughput.timed_steps"));
    cJSON_AddItemToObject(s, "samples_per_s",
                          dg_json_metric_of(dg_jnum(rec, "throughput.samples_per_s"), "samples/s"));
    cJSON_AddItemToObject(s, "rss_peak",
                          dg_json_metric_of(dg_jnum(rec, "supervise.samples.rss_peak"), "bytes"));
    cJSON_AddItemToObject(
        s, "cpu", dg_json_metric_of(dg_jnum(rec, "supervise.samples.cpu_pct_median"), "percent"));
    cJSON_AddItemToObject(s, "wall", dg_json_metric_of(dg_jnum(rec, "supervise.wall"), "s"));
    dg_json_add_str(s, "error", st == DG_OK ? NULL : dg_errmsg(ctx));
    cJSON_Delete(rec);
    return s;
}

static void *beside_main(void *arg)
{
    slo_beside *b = arg;
    b->st = dg_run_supervise(b->ctx, &b->ro, &b->json);
    b->t_end = dg_now();
    atomic_store(&b->ended, true);
    return NULL;
}

slo_beside *dg_slo_beside_start(dg_ctx *ctx, const dg_slo_opts *o)
{
    slo_beside *b = dg_calloc(1, sizeof *b);
    if (!b || !(b->ctx = dg_ctx_new())) {
        dg_free(b);
        dg_fail(ctx, DG_ERR_NOMEM, "slo: out of memory for the training beside");
        return NULL;
    }
    run_opts(&b->ro, o);
    b->ro.progress_user = b;
    b->ro.forward = &b->stop;
    b->t_start = dg_now();
    if (pthread_create(&b->thread, NULL, beside_main, b) != 0) {
        dg_ctx_free(b->ctx);
        dg_free(b);
        dg_fail(ctx, DG_ERR_IO, "slo: cannot start a thread for the training beside");
        return NULL;
    }
    b->started = true;
    return b;
}

bool dg_slo_beside_wait(slo_beside *b, long steps, double max_s,
                        const volatile sig_atomic_t *cancel)
{
    double until = dg_now() + max_s;
    while (atomic_load(&b->steps) < steps && !atomic_load(&b->ended) && dg_now() < until &&
           !(cancel && *cancel)) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&b->steps) >= steps;
}

cJSON *dg_slo_beside_stop(slo_beside *b, double *t_start, double *t_end)
{
    if (!b)
        return NULL;
    /* Still training: stop it (SIGTERM to its process group, SIGKILL later). */
    b->stop = SIGTERM;
    if (b->started)
        pthread_join(b->thread, NULL);
    *t_start = b->t_start;
    *t_end = b->t_end;
    cJSON *s = side_of(b->json, b->st, b->ctx);
    dg_string_free(b->json);
    dg_ctx_free(b->ctx);
    dg_free(b);
    return s;
}
