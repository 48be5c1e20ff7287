/* The background sampler: samples arrive, the resident set follows memory
 * this process touches, times increase, PSI as the machine offers it, small
 * overhead, start/stop twice, NULL accepted; a backend that lets the sampler
 * read its device from another thread keeps that promise under contention. */
#include "backend/backend.h"
#include "measure/measure.h"

#include "check.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void one_run(void)
{
    double w0 = dg_now();
    dg_sampler *s = dg_sampler_start(NULL, NULL, 10);
    CHECK(s != NULL);
    if (!s)
        return;
    sleep_ms(30);
    size_t mb = 100u << 20;
    volatile char *p = malloc(mb);
    CHECK(p != NULL);
    for (size_t i = 0; p && i < mb; i += 4096)
        p[i] = (char)i;
    sleep_ms(80);
    dg_sampler_stop(s);
    double wall = dg_now() - w0;
    size_t n;
    const dg_sample_point *pts = dg_sampler_points(s, &n);
    CHECK_MSG(n >= 5, "%zu samples", n);
    bool increasing = true;
    for (size_t i = 1; i < n; i++)
        increasing = increasing && pts[i].t > pts[i - 1].t;
    CHECK(increasing);
    dg_sampler_summary sum;
    dg_sampler_summarise(s, &sum);
    CHECK(sum.count == n);
    CHECK(n > 0 && pts[0].rss.valid && sum.rss_peak.valid);
    if (n > 0)
        CHECK_MSG(sum.rss_peak.value >= pts[0].rss.value + 100.0 * 1048576 * 0.95,
                  "peak %.0f first %.0f", sum.rss_peak.value, pts[0].rss.value);
    bool psi = access("/proc/pressure/memory", R_OK) == 0;
    CHECK(n > 0 && pts[0].psi_some10.valid == psi);
    CHECK(sum.psi_peak.valid == psi);
    CHECK(!pts[0].dev_used.valid && !sum.dev_util_mean.valid); /* no backend given */
    CHECK_MSG(sum.overhead_s >= 0 && sum.overhead_s < 0.1 * wall, "overhead %.4f of %.3f s",
              sum.overhead_s, wall);
    cJSON *j = dg_sampler_json(s);
    CHECK(j && cJSON_GetNumberValue(cJSON_GetObjectItem(j, "period_ms")) == 10);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "count")) == (double)n);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "overhead_s")));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rss_peak"), "valid")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "dev_used_peak"), "value")));
    const cJSON *samples = cJSON_GetObjectItem(j, "samples");
    CHECK(cJSON_GetArraySize(samples) == (int)n);
    const cJSON *first = cJSON_GetArrayItem(samples, 0);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(first, "t")) &&
          cJSON_IsNumber(cJSON_GetObjectItem(first, "rss")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(first, "dev_used")));
    cJSON_Delete(j);
    dg_sampler_stop(s); /* a second stop is harmless */
    dg_sampler_free(s);
    free((void *)p);
}

typedef struct {
    const dg_backend_iface *be;
    void *bctx;
    const dg_device_info *want; /* what one thread alone reads */
    int rounds, wrong;
} info_job;

static void *read_info(void *arg)
{
    info_job *j = arg;
    for (int i = 0; i < j->rounds; i++) {
        dg_device_info info;
        if (j->be->device_info(j->bctx, 0, &info) != DG_OK ||
            strcmp(info.name, j->want->name) != 0 || strcmp(info.vendor, j->want->vendor) != 0 ||
            strcmp(info.driver_version, j->want->driver_version) != 0)
            j->wrong++;
    }
    return NULL;
}

typedef struct {
    const dg_backend_iface *be;
    void *bctx;
    dg_status st;
} bad_index_job;

static void *read_bad_index(void *arg)
{
    bad_index_job *j = arg;
    dg_device_info info;
    j->st = j->be->device_info(j->bctx, 9999, &info);
    return NULL;
}

/* caps.device_info_any_thread is a promise the sampler relies on (it reads the
 * device while the trainer's epoch record does): two threads at once must each
 * read what one thread alone reads. The cpu backend once tokenised
 * /proc/cpuinfo with strtok, whose hidden state one thread freed under the
 * other, and copied openblas_get_config(), which rebuilds its string in one
 * static buffer on every call (a reader saw it cut short or doubled). */
static void device_info_two_threads(const dg_backend_iface *be)
{
    void *bctx = NULL;
    char reason[256];
    if (!be || !be->caps.device_info_any_thread ||
        be->init(0, &bctx, reason, sizeof reason) != DG_OK)
        return;
    dg_device_info alone;
    CHECK(be->device_info(bctx, 0, &alone) == DG_OK && alone.name[0]);
    info_job jobs[2] = {{be, bctx, &alone, 1500, 0}, {be, bctx, &alone, 1500, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, read_info, &jobs[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK_MSG(jobs[0].wrong == 0 && jobs[1].wrong == 0,
              "%s: %d and %d of 1500 reads differ from \"%s\" / \"%s\" / \"%s\"", be->name,
              jobs[0].wrong, jobs[1].wrong, alone.name, alone.vendor, alone.driver_version);
    /* A failure on the other thread returns its status and leaves the owner's
     * message alone (writing it would race with the owner's own). */
    char before[512];
    snprintf(before, sizeof before, "%s", be->last_error(bctx));
    bad_index_job bj = {be, bctx, DG_OK};
    pthread_t bt;
    CHECK(pthread_create(&bt, NULL, read_bad_index, &bj) == 0);
    pthread_join(bt, NULL);
    if (bj.st != DG_OK)
        CHECK_MSG(strcmp(be->last_error(bctx), before) == 0,
                  "%s: the owner's message became \"%s\"", be->name, be->last_error(bctx));
    be->free(bctx);
}

int main(void)
{
    device_info_two_threads(dg_backend_cpu_iface());
#ifdef DG_HAVE_OPENCL
    device_info_two_threads(dg_backend_opencl_iface());
#endif
    one_run();
    one_run();
    /* Freed while running: free stops the thread first. */
    dg_sampler *s = dg_sampler_start(NULL, NULL, 0);
    CHECK(s != NULL);
    sleep_ms(5);
    dg_sampler_free(s);
    dg_sampler_free(NULL);
    dg_sampler_stop(NULL);
    dg_sampler_summary sum;
    dg_sampler_summarise(NULL, &sum);
    CHECK(sum.count == 0 && !sum.rss_peak.valid);
    CHECK_DONE();
}
