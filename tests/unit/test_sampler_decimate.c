/* The in-process sampler keeps a bounded number of points: past its cap the
 * kept points are halved and the stride doubles (as the run sampler's), the
 * kept points stay in time order and evenly strided, and the summary (count,
 * peaks) still covers every sample taken, including a short RSS spike that
 * decimation may have dropped from the kept points. */
#include "measure/measure.h"

#include "check.h"

#include <stdlib.h>
#include <time.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void)
{
    enum { CAP = 16 };
    dg_sampler *s = dg_sampler_start_capped(NULL, NULL, 1, CAP);
    CHECK(s != NULL);
    if (!s)
        return 1;
    sleep_ms(20);
    /* A short spike: 100 MiB touched, held 15 ms, given back. */
    size_t mb = 100u << 20;
    volatile char *p = malloc(mb);
    CHECK(p != NULL);
    for (size_t i = 0; p && i < mb; i += 4096)
        p[i] = (char)i;
    sleep_ms(15);
    free((void *)p);
    /* Run until well past the cap, whatever the machine's load. */
    double t0 = dg_now();
    dg_sampler_summary sum;
    /* The record may be read while the thread runs (and decimates): what it
     * holds is whole (the TSan tier checks nothing is read unlocked). */
    bool whole = true;
    do {
        sleep_ms(20);
        dg_sampler_summarise(s, &sum);
        cJSON *live = dg_sampler_json(s);
        whole = whole && live && cJSON_GetNumberValue(cJSON_GetObjectItem(live, "stride")) >= 1 &&
                cJSON_GetArraySize(cJSON_GetObjectItem(live, "samples")) <= CAP;
        cJSON_Delete(live);
    } while (sum.count < 8 * CAP && dg_now() - t0 < 20);
    CHECK(whole);
    dg_sampler_stop(s);

    size_t n;
    const dg_sample_point *pts = dg_sampler_points(s, &n);
    dg_sampler_summarise(s, &sum);
    CHECK_MSG(sum.count >= 8 * CAP, "only %zu samples taken", sum.count);
    CHECK_MSG(n <= CAP && n >= CAP / 2, "%zu points kept with a cap of %d", n, CAP);
    CHECK(sum.count > n);
    bool increasing = true;
    double max_kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (i)
            increasing = increasing && pts[i].t > pts[i - 1].t;
        if (pts[i].rss.valid && pts[i].rss.value > max_kept)
            max_kept = pts[i].rss.value;
    }
    CHECK(increasing);
    /* The peak counts every sample taken, not only the kept ones. */
    CHECK_MSG(sum.rss_peak.valid && sum.rss_peak.value >= max_kept, "peak %.0f, max kept %.0f",
              sum.rss_peak.value, max_kept);
    CHECK_MSG(n && sum.rss_peak.value >= pts[0].rss.value + 0.95 * (double)mb,
              "peak %.0f does not hold the 100 MiB spike over %.0f", sum.rss_peak.value,
              n ? pts[0].rss.value : 0);

    cJSON *j = dg_sampler_json(s);
    double stride = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "stride"));
    CHECK_MSG(stride >= 2 && stride * (double)n >= (double)sum.count / 2, "stride %.0f", stride);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "count")) == (double)sum.count);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "samples")) == (int)n);
    cJSON_Delete(j);
    dg_sampler_free(s);
    CHECK_DONE();
}
