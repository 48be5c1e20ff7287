/* Background sampler (docs/measure.md): a thread that reads, every period,
 * this process's resident set, the machine's swap use, memory pressure (PSI)
 * and device memory. Device memory comes from the backend's device_info on
 * backends whose query is thread-safe (cpu, opencl) and from NVML (dlopen'ed)
 * for NVIDIA devices, which also gives utilisation; the CUDA plug-in is never
 * called from the sampler thread. */
#include "measure/measure.h"
#include "measure/nvml.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NVML on device 0 (the shared loader, measure/nvml.h). */
typedef struct nvml {
    dg_nvml api;
    dg_nvml_device dev;
    bool open;
} nvml;

struct dg_sampler {
    pthread_t thread;
    bool started;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int period_ms;
    double t0;
    const dg_backend_iface *be; /* device_info is called only when dev_info_safe */
    void *bctx;
    bool dev_info_safe;
    nvml nv;
    bool used_nvml;
    dg_sample_point *pts;
    size_t n, cap;
    /* Decimation (as the run sampler's): every stride-th sample is kept; at
     * max_pts kept, every other one is dropped and the stride doubles. The
     * summary runs over every sample taken. */
    size_t max_pts, stride, taken;
    dg_sampler_summary agg;
    bool have_swap;
    double swap_first, util_sum;
    size_t util_n;
    double overhead_s;
};

/* Opens NVML on device 0; false (and nothing held) when it is not there or
 * lacks the memory and utilisation queries. */
static bool nvml_open(nvml *nv)
{
    memset(nv, 0, sizeof *nv);
    if (dg_nvml_open(&nv->api, NULL, 0) != DG_NVML_LOADED)
        return false;
    if (!nv->api.util || !nv->api.mem || nv->api.handle(0, &nv->dev) != DG_NVML_OK) {
        dg_nvml_close(&nv->api);
        memset(nv, 0, sizeof *nv);
        return false;
    }
    nv->open = true;
    return true;
}

static void nvml_close(nvml *nv)
{
    dg_nvml_close(&nv->api);
    memset(nv, 0, sizeof *nv);
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool dg_psi_memory_some10(double *out)
{
    char *txt = dg_read_file("/proc/pressure/memory", 4096, NULL);
    if (!txt)
        return false;
    bool ok = false;
    const char *p = strstr(txt, "some ");
    if (p && (p = strstr(p, "avg10="))) {
        char *end;
        double v = strtod(p + 6, &end);
        ok = end != p + 6;
        *out = v;
    }
    dg_free(txt);
    return ok;
}

bool dg_swap_used(double *bytes)
{
    char *mi = dg_read_file("/proc/meminfo", 1u << 16, NULL);
    double tot = 0, fr = 0;
    bool ok = mi && dg_proc_kb(mi, "SwapTotal", &tot) && dg_proc_kb(mi, "SwapFree", &fr);
    dg_free(mi);
    *bytes = ok ? tot - fr : 0;
    return ok;
}

static void take(dg_sampler *s, dg_sample_point *pt)
{
    memset(pt, 0, sizeof *pt);
    pt->t = dg_now() - s->t0;
    double v = 0;
    pt->rss.valid = dg_proc_self_rss(&v);
    pt->rss.value = v;
    v = 0;
    pt->swap_used.valid = dg_swap_used(&v);
    pt->swap_used.value = v;
    v = 0;
    pt->psi_some10.valid = dg_psi_memory_some10(&v);
    pt->psi_some10.value = v;
    if (s->nv.open) {
        dg_nvml_memory m;
        dg_nvml_util u;
        if (s->nv.api.mem(s->nv.dev, &m) == DG_NVML_OK) {
            pt->dev_used = (dg_metric){(double)m.used, true};
            pt->dev_total = (dg_metric){(double)m.total, true};
        }
        if (s->nv.api.util(s->nv.dev, &u) == DG_NVML_OK)
            pt->dev_util = (dg_metric){(double)u.gpu, true};
    } else if (s->dev_info_safe) {
        dg_device_info info;
        if (s->be->device_info(s->bctx, 0, &info) == DG_OK && info.mem_total.valid) {
            pt->dev_total = info.mem_total;
            if (info.mem_free.valid)
                pt->dev_used = (dg_metric){info.mem_total.value - info.mem_free.value, true};
        }
    }
}

/* Folds one sample into the running summary (called with mu held). */
static void fold(dg_sampler *s, const dg_sample_point *p)
{
    dg_sampler_summary *a = &s->agg;
    if (p->rss.valid && (!a->rss_peak.valid || p->rss.value > a->rss_peak.value))
        a->rss_peak = p->rss;
    if (p->psi_some10.valid && (!a->psi_peak.valid || p->psi_some10.value > a->psi_peak.value))
        a->psi_peak = p->psi_some10;
    if (p->dev_used.valid &&
        (!a->dev_used_peak.valid || p->dev_used.value > a->dev_used_peak.value))
        a->dev_used_peak = p->dev_used;
    if (p->swap_used.valid) {
        if (!s->have_swap)
            s->swap_first = p->swap_used.value;
        s->have_swap = true;
        a->swap_growth = (dg_metric){p->swap_used.value - s->swap_first, true};
    }
    if (p->dev_util.valid) {
        s->util_sum += p->dev_util.value;
        s->util_n++;
        a->dev_util_mean = (dg_metric){s->util_sum / (double)s->util_n, true};
    }
}

/* Keeps every stride-th sample, halving the kept ones at max_pts (mu held). */
static void keep(dg_sampler *s, const dg_sample_point *p)
{
    if (s->taken++ % s->stride != 0)
        return;
    if (s->n == s->max_pts) {
        for (size_t i = 0; i < s->n / 2; i++)
            s->pts[i] = s->pts[2 * i];
        s->n /= 2;
        s->stride *= 2;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        if (cap > s->max_pts)
            cap = s->max_pts;
        dg_sample_point *np = dg_realloc(s->pts, cap * sizeof *np);
        if (!np)
            return;
        s->pts = np;
        s->cap = cap;
    }
    s->pts[s->n++] = *p;
}

static void *run(void *arg)
{
    dg_sampler *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        pthread_mutex_unlock(&s->mu);
        dg_sample_point pt;
        take(s, &pt);
        pthread_mutex_lock(&s->mu);
        fold(s, &pt);
        keep(s, &pt);
        s->overhead_s = thread_cpu_s();
        if (atomic_load(&s->stop))
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)s->period_ms * 1000000L;
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        while (!atomic_load(&s->stop)) {
            if (pthread_cond_timedwait(&s->cv, &s->mu, &until) != 0)
                break;
        }
        if (atomic_load(&s->stop))
            break;
    }
    s->overhead_s = thread_cpu_s();
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

dg_sampler *dg_sampler_start(const dg_backend_iface *be, void *bctx, int period_ms)
{
    return dg_sampler_start_capped(be, bctx, period_ms, 0);
}

dg_sampler *dg_sampler_start_capped(const dg_backend_iface *be, void *bctx, int period_ms,
                                    size_t max_points)
{
    dg_sampler *s = dg_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->period_ms = period_ms > 0 ? period_ms : 100;
    s->max_pts = max_points >= 2 ? max_points : DG_SAMPLER_MAX_POINTS;
    s->stride = 1;
    s->be = be;
    s->bctx = bctx;
    atomic_init(&s->stop, false);
    bool nvidia = false;
    if (be && be->name) {
        s->dev_info_safe = be->device_info && be->caps.device_info_any_thread;
        nvidia = be->caps.nvml;
        dg_device_info info;
        if (!nvidia && s->dev_info_safe && be->device_info(bctx, 0, &info) == DG_OK)
            nvidia = strstr(info.vendor, "NVIDIA") != NULL;
    }
    if (nvidia)
        s->used_nvml = nvml_open(&s->nv);
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        nvml_close(&s->nv);
        dg_free(s);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    if (pthread_cond_init(&s->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&s->mu);
        nvml_close(&s->nv);
        dg_free(s);
        return NULL;
    }
    pthread_condattr_destroy(&ca);
    s->t0 = dg_now();
    if (pthread_create(&s->thread, NULL, run, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        nvml_close(&s->nv);
        dg_free(s);
        return NULL;
    }
    s->started = true;
    return s;
}

void dg_sampler_stop(dg_sampler *s)
{
    if (!s || !s->started)
        return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->stop, true);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = false;
    nvml_close(&s->nv);
}

void dg_sampler_free(dg_sampler *s)
{
    if (!s)
        return;
    dg_sampler_stop(s);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    dg_free(s->pts);
    dg_free(s);
}

const dg_sample_point *dg_sampler_points(const dg_sampler *s, size_t *n)
{
    *n = s ? s->n : 0;
    return s ? s->pts : NULL;
}

void dg_sampler_summarise(const dg_sampler *s, dg_sampler_summary *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    dg_sampler *m = (dg_sampler *)s; /* the lock only */
    pthread_mutex_lock(&m->mu);
    *out = s->agg;
    out->count = s->taken;
    out->overhead_s = s->overhead_s;
    pthread_mutex_unlock(&m->mu);
}

static cJSON *metric(dg_metric m, const char *unit)
{
    return dg_json_metric(m.value, m.valid, unit);
}

static void add_raw(cJSON *o, const char *key, dg_metric m)
{
    if (m.valid)
        cJSON_AddNumberToObject(o, key, m.value);
    else
        cJSON_AddNullToObject(o, key);
}

cJSON *dg_sampler_json(const dg_sampler *s)
{
    dg_sampler_summary sum;
    dg_sampler_summarise(s, &sum);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "period_ms", s ? s->period_ms : 0);
    cJSON_AddNumberToObject(o, "count", (double)sum.count);
    /* keep() doubles the stride under mu: read with the samples below. */
    cJSON *stride = cJSON_AddNumberToObject(o, "stride", 1);
    cJSON_AddNumberToObject(o, "overhead_s", sum.overhead_s);
    const char *src = !s ? "none" : s->used_nvml ? "nvml" : s->dev_info_safe ? "backend" : "none";
    cJSON_AddStringToObject(o, "device_source", src);
    cJSON_AddItemToObject(o, "rss_peak", metric(sum.rss_peak, "bytes"));
    cJSON_AddItemToObject(o, "swap_growth", metric(sum.swap_growth, "bytes"));
    cJSON_AddItemToObject(o, "psi_peak", metric(sum.psi_peak, "percent"));
    cJSON_AddItemToObject(o, "dev_used_peak", metric(sum.dev_used_peak, "bytes"));
    cJSON_AddItemToObject(o, "dev_util_mean", metric(sum.dev_util_mean, "percent"));
    static const char *const units[][2] = {{"t", "s"},
                                           {"rss", "bytes"},
                                           {"swap_used", "bytes"},
                                           {"psi_some10", "percent"},
                                           {"dev_used", "bytes"},
                                           {"dev_total", "bytes"},
                                           {"dev_util", "percent"}};
    dg_json_add_pairs(o, "units", units, sizeof units / sizeof units[0]);
    cJSON *arr = cJSON_AddArrayToObject(o, "samples");
    if (s) {
        dg_sampler *m = (dg_sampler *)s;
        pthread_mutex_lock(&m->mu);
        cJSON_SetNumberValue(stride, (double)s->stride);
        for (size_t i = 0; i < s->n; i++) {
            const dg_sample_point *p = &s->pts[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "t", p->t);
            add_raw(e, "rss", p->rss);
            add_raw(e, "swap_used", p->swap_used);
            add_raw(e, "psi_some10", p->psi_some10);
            add_raw(e, "dev_used", p->dev_used);
            add_raw(e, "dev_total", p->dev_total);
            add_raw(e, "dev_util", p->dev_util);
            cJSON_AddItemToArray(arr, e);
        }
        pthread_mutex_unlock(&m->mu);
    }
    return o;
}
