/* The sweeps' shared stop policy (dg_sweep_stopper) over synthetic
 * throughput sequences: where each one stops, and why. */
#include "check.h"

#include "analysis/analysis.h"
#include "core/json.h"

#include <math.h>
#include <string.h>

/* Feeds sps[i] at batches from, 2 from, ... (trial time trial_s[i] when given,
 * else 1 s); returns the reason and the batch it stopped at (*at), or NULL
 * when the sequence ran out first. */
static const char *feed(int from, int to, double max_trial_s, double ntrain, const double *sps,
                        int n, const double *trial_s, int *at)
{
    dg_sweep_stopper s;
    dg_sweep_stop_init(&s, to, max_trial_s, ntrain);
    *at = 0;
    int b = from;
    for (int i = 0; i < n; i++, b *= 2) {
        *at = b;
        dg_sweep_rate r = {.sps = sps[i], .lo = NAN, .hi = NAN, .valid = false};
        const char *why = dg_sweep_stop_next(&s, b, &r, trial_s ? trial_s[i] : 1.0);
        if (why)
            return why;
    }
    return NULL;
}

/* As feed, with each rate's interval sps x (1 -+ rel[i]) (rel NULL: one rel0
 * for all; rel[i] < 0: no interval). */
static const char *feed_ci(int from, int to, const double *sps, const double *rel, double rel0,
                           int n, int *at, dg_sweep_stopper *out)
{
    dg_sweep_stopper s;
    dg_sweep_stop_init(&s, to, 0, NAN);
    *at = 0;
    int b = from;
    const char *why = NULL;
    for (int i = 0; i < n && !why; i++, b *= 2) {
        *at = b;
        double w = rel ? rel[i] : rel0;
        dg_sweep_rate r = {.sps = sps[i], .lo = NAN, .hi = NAN, .valid = false};
        if (w >= 0)
            r = (dg_sweep_rate){sps[i], sps[i] * (1 - w), sps[i] * (1 + w), true, "notch", NULL};
        why = dg_sweep_stop_next(&s, b, &r, 1.0);
    }
    if (out)
        *out = s;
    return why;
}

static void expect(const char *name, const char *got, int at, const char *want, int want_at)
{
    CHECK_MSG(got && want ? strcmp(got, want) == 0 : got == want, "%s: stopped on %s, wanted %s",
              name, got ? got : "(none)", want ? want : "(none)");
    CHECK_MSG(at == want_at, "%s: stopped at batch %d, wanted %d", name, at, want_at);
}

int main(void)
{
    const int big = 1 << 20;
    int at;
    const char *why;

    /* A plateau: three doublings under 10% over the best end it at the third. */
    const double plateau[] = {100, 200, 400, 420, 430, 435, 440, 445};
    why = feed(8, big, 0, NAN, plateau, 8, NULL, &at);
    expect("plateau", why, at, "throughput-plateau", 256);

    /* Falling twice in a row. */
    const double falling[] = {100, 200, 400, 300, 200, 100};
    why = feed(8, big, 0, NAN, falling, 6, NULL, &at);
    expect("falling", why, at, "throughput-falling", 128);

    /* One fall then a recovery is noise, not a stop. */
    const double dip[] = {100, 200, 180, 400, 800};
    why = feed(8, big, 0, NAN, dip, 5, NULL, &at);
    expect("dip", why, at, NULL, 128);

    /* Noise around a plateau: up and down by a few percent, never a fall twice
     * in a row; the plateau rule ends it three trials after the last real gain. */
    const double noisy[] = {1000, 2000, 3000, 3100, 2950, 3080, 2990, 3050, 3020};
    why = feed(8, big, 0, NAN, noisy, 9, NULL, &at);
    expect("noisy plateau", why, at, "throughput-plateau", 256);

    /* Growth that keeps paying (12% a doubling) never stops before the limit. */
    double growth[18];
    growth[0] = 1000;
    for (int i = 1; i < 18; i++)
        growth[i] = growth[i - 1] * 1.12;
    why = feed(8, big, 0, NAN, growth, 18, NULL, &at);
    expect("growth", why, at, "limit", big);
    /* ... and a small gain that still clears 10% each time resets the run. */
    const double slow_gain[] = {100, 105, 108, 120, 125, 130, 145, 150};
    why = feed(8, big, 0, NAN, slow_gain, 8, NULL, &at);
    expect("gain resets the run", why, at, NULL, 1024);

    /* The H200 run of this session (cifar, cuda, accept --quick #1, batches
     * 8..32768): the doubling stopped on "time" at 32768; the plateau must end
     * it by 2048-4096. */
    const double h200[] = {19131, 31685, 44361, 61643, 74787,  84861, 89673,
                           93320, 94732, 96539, 96231, 106793, 108477};
    const double h200_s[] = {1.00, 0.63, 0.76, 0.76, 0.80, 0.81, 0.89,
                             0.97, 1.09, 1.50, 2.15, 3.68, 5.83};
    why = feed(8, big, 4, NAN, h200, 13, h200_s, &at);
    CHECK_MSG(why && strcmp(why, "throughput-plateau") == 0 && at >= 2048 && at <= 4096,
              "H200 #1: stopped on %s at %d", why ? why : "(none)", at);
    /* Run #2 of the same session. */
    const double h200b[] = {18846, 29688, 47543, 64545, 76535,  89273, 89522,
                            94430, 93791, 96443, 97937, 107042, 107776};
    why = feed(8, big, 4, NAN, h200b, 13, NULL, &at);
    CHECK_MSG(why && strcmp(why, "throughput-plateau") == 0 && at >= 2048 && at <= 4096,
              "H200 #2: stopped on %s at %d", why ? why : "(none)", at);

    /* The training set: no doubling past it (8192 samples: 8192 is the last). */
    why = feed(8, big, 0, 8192, growth, 18, NULL, &at);
    expect("train-set", why, at, "train-set", 8192);
    /* A set that is not a power of two: 100 samples end it at 64. */
    why = feed(8, big, 0, 100, growth, 18, NULL, &at);
    expect("train-set 100", why, at, "train-set", 64);
    /* The asked-for limit below the set says "limit". */
    why = feed(8, 512, 0, 8192, growth, 18, NULL, &at);
    expect("limit under the set", why, at, "limit", 512);

    /* Time: a trial over max_trial_s ends it, unless the limit comes first. */
    const double slow_s[] = {1, 1, 1, 5, 9};
    why = feed(8, big, 4, NAN, growth, 5, slow_s, &at);
    expect("time", why, at, "time", 64);
    why = feed(8, 64, 4, NAN, growth, 5, slow_s, &at);
    expect("limit before time", why, at, "limit", 64);
    /* max_trial_s 0: no time stop. */
    why = feed(8, big, 0, NAN, growth, 5, slow_s, &at);
    expect("no time stop", why, at, NULL, 128);

    /* Throughput not reported (NAN) neither counts as a fall nor as flat. */
    const double unknown[] = {100, NAN, 200, NAN, 400, 800};
    why = feed(8, big, 0, NAN, unknown, 6, NULL, &at);
    expect("not reported", why, at, NULL, 256);

    /* ---- with intervals ---- */
    dg_sweep_stopper st;
    /* A rising sweep with two small dips in a row inside the noise (+-3%):
     * today's rule calls it falling at 64; the intervals overlap, so the
     * dips are ambiguous and the sweep goes on to its real gains. */
    const double rise_dips[] = {1000, 2000, 1980, 1960, 4000, 8000, 16000};
    why = feed_ci(8, big, rise_dips, NULL, 0.03, 7, &at, &st);
    expect("rising, dips in the noise", why, at, NULL, 512);
    CHECK(st.falls == 0 && st.flat == 0);
    why = feed(8, big, 0, NAN, rise_dips, 7, NULL, &at);
    expect("rising, dips, no intervals", why, at, "throughput-falling", 64);
    /* The judgement says so: the dip at 32 was ambiguous, with intervals. */
    dg_sweep_stopper one;
    dg_sweep_stop_init(&one, big, 0, NAN);
    dg_sweep_rate r1 = {1000, 970, 1030, true, "notch", NULL};
    dg_sweep_rate r2 = {980, 951, 1009, true, "notch", NULL};
    CHECK(dg_sweep_stop_next(&one, 8, &r1, 1) == NULL);
    CHECK(dg_sweep_stop_next(&one, 16, &r2, 1) == NULL);
    CHECK(one.last.fall == DG_SWEEP_AMBIGUOUS && one.last.fall_ci && one.last.prev_batch == 8 &&
          one.last.prev.lo == 970);
    CHECK(one.last.flat == DG_SWEEP_COUNTS && one.last.flat_ci && one.last.threshold == 1100);
    /* A rise over an interval-carrying previous trial is "no fall", judged with both. */
    dg_sweep_stopper two = one;
    dg_sweep_rate r3 = {2000, 1940, 2060, true, "notch", NULL};
    CHECK(dg_sweep_stop_next(&two, 32, &r3, 1) == NULL);
    CHECK(two.last.fall == DG_SWEEP_CLEAR && two.last.fall_ci && two.last.flat == DG_SWEEP_CLEAR);
    cJSON *ev = dg_sweep_judged_json(&one.last);
    CHECK(ev && strcmp(dg_jstr(ev, "fall"), "ambiguous") == 0 &&
          dg_jnum(ev, "previous.batch") == 8 &&
          dg_jnum(ev, "previous.samples_per_s_ci.lo") == 970 &&
          dg_jbool(ev, "fall_with_interval") == 1 && strcmp(dg_jstr(ev, "flat"), "flat") == 0 &&
          dg_jnum(ev, "plateau_threshold") == 1100);
    cJSON_Delete(ev);

    /* Two real falls, tight intervals (+-1%): throughput-falling at the second. */
    const double real_falls[] = {1000, 2000, 4000, 3000, 2000, 1000};
    why = feed_ci(8, big, real_falls, NULL, 0.01, 6, &at, &st);
    expect("real falls", why, at, "throughput-falling", 128);
    CHECK(st.last.fall == DG_SWEEP_COUNTS && st.last.fall_ci && st.last.prev.sps == 3000);
    /* The same falls inside wide intervals (+-25%) are ambiguous: the
     * plateau ends it instead (three doublings not wholly over 4400). */
    why = feed_ci(8, big, real_falls, NULL, 0.25, 6, &at, &st);
    expect("falls in wide noise", why, at, "throughput-plateau", 256);
    CHECK(st.falls == 1); /* only the last fall (to 1000 +-250) lies wholly below */

    /* A flat noisy sweep (+-3% around 3000, gains under 10%) still ends on
     * the plateau, as without intervals. */
    why = feed_ci(8, big, noisy, NULL, 0.03, 9, &at, NULL);
    expect("noisy plateau, intervals", why, at, "throughput-plateau", 256);
    /* ... and with intervals too wide to call any doubling flat (+-20%), the
     * limit ends it. */
    why = feed_ci(8, 2048, noisy, NULL, 0.20, 9, &at, NULL);
    expect("noisy, wide intervals", why, at, "limit", 2048);

    /* A sweep rising about 12% a doubling in +-4% noise, whose points land
     * just under +10% three times in a row: today's rule calls it a plateau
     * at 128; inside the noise those doublings are ambiguous, not flat. */
    const double rise_noisy[] = {1000, 2000, 2180, 2390, 2620, 3150, 3550, 4000};
    why = feed(8, big, 0, NAN, rise_noisy, 8, NULL, &at);
    expect("rising in noise, no intervals", why, at, "throughput-plateau", 128);
    why = feed_ci(8, big, rise_noisy, NULL, 0.04, 8, &at, NULL);
    expect("rising in noise, intervals", why, at, NULL, 1024);
    /* Gains wholly over the threshold reset the flat run. */
    const double flat_then_gain[] = {1000, 1020, 1010, 2000, 2010, 1990, 2005};
    why = feed_ci(8, big, flat_then_gain, NULL, 0.01, 7, &at, &st);
    expect("flat, gain, flat", why, at, "throughput-plateau", 512);
    /* One side without an interval: judged as today, and said so. */
    const double mixed_rel[] = {0.01, -1, 0.01};
    const double mixed[] = {1000, 990, 980};
    why = feed_ci(8, big, mixed, mixed_rel, 0, 3, &at, &st);
    expect("no interval on one side", why, at, "throughput-falling", 32);
    CHECK(st.last.fall == DG_SWEEP_COUNTS && !st.last.fall_ci);

    /* ---- the knee ---- */
    /* 32's point is 6% under the best (1880 vs 2000: under the 1900 line), so
     * the knee is 64 in every case: judged on the points. Inside +-3% noise
     * 32's interval reaches the line, and could_be says so; with +-0.5%, or
     * without intervals, it is null. */
    const double knee_sps[] = {1000, 1800, 1880, 2000};
    for (int c = 0; c < 3; c++) {
        const double w32 = c == 0 ? 0.03 : 0.005;
        dg_sweep_point pts[4];
        for (int i = 0; i < 4; i++) {
            double w = i == 2 ? w32 : 0.01;
            pts[i] = (dg_sweep_point){
                8 << i,
                true,
                {knee_sps[i], knee_sps[i] * (1 - w), knee_sps[i] * (1 + w), c < 2, "notch", NULL}};
            if (c == 2)
                pts[i].rate = (dg_sweep_rate){knee_sps[i], NAN, NAN, false, NULL, "not kept"};
        }
        cJSON *root = cJSON_CreateObject();
        dg_sweep_conclude(root, pts, 4, 0);
        CHECK_MSG(dg_jnum(root, "knee.batch") == 64, "knee case %d: %g, wanted 64", c,
                  dg_jnum(root, "knee.batch"));
        if (c == 0)
            CHECK_MSG(dg_jnum(root, "knee.could_be") == 32, "could_be %g",
                      dg_jnum(root, "knee.could_be"));
        else
            CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "knee"), "could_be")));
        CHECK(dg_jbool(root, "knee.samples_per_s_ci.valid") == (c < 2));
        if (c < 2)
            CHECK(fabs(dg_jnum(root, "knee.samples_per_s_ci.hi") - 2000 * 1.01) < 1e-6 &&
                  strcmp(dg_jstr(root, "knee.samples_per_s_ci.method"), "notch") == 0);
        if (c == 2)
            CHECK(strcmp(dg_jstr(root, "knee.samples_per_s_ci.reason"), "not kept") == 0);
        cJSON_Delete(root);
    }

    /* ---- the intervals themselves ---- */
    /* 20 step times 10.0 .. 11.9 ms: n = 20 gives ranks 6 and 15 (P(B <= 5) =
     * 0.0207 <= 0.025, P(B <= 6) = 0.0577 > 0.025). */
    double ms[20];
    for (int i = 0; i < 20; i++)
        ms[19 - i] = 10.0 + 0.1 * i; /* reversed: the function sorts */
    dg_sweep_rate ci = dg_sweep_rate_ci(1000, ms, 20, NAN, NAN, NAN);
    double med = (10.9 + 11.0) / 2;
    CHECK_MSG(ci.valid && strcmp(ci.method, "order-statistics") == 0 &&
                  fabs(ci.lo - 1000 * med / 11.4) < 1e-9 && fabs(ci.hi - 1000 * med / 10.5) < 1e-9,
              "order statistics: %g .. %g", ci.lo, ci.hi);
    CHECK(ms[0] == 11.9); /* not modified */
    /* Five steps are too few for a 95% interval of the median. */
    ci = dg_sweep_rate_ci(1000, ms, 5, NAN, NAN, 5);
    CHECK(!ci.valid && isnan(ci.lo) && strstr(ci.reason, "6 timed steps"));
    /* The notch rule from median and IQR: 10 ms, IQR 2 ms, 16 steps: +-0.79 ms. */
    ci = dg_sweep_rate_ci(1000, NULL, 0, 10, 2, 16);
    CHECK_MSG(ci.valid && strcmp(ci.method, "notch") == 0 &&
                  fabs(ci.lo - 1000 * 10 / 10.79) < 1e-9 && fabs(ci.hi - 1000 * 10 / 9.21) < 1e-9,
              "notch: %g .. %g", ci.lo, ci.hi);
    ci = dg_sweep_rate_ci(1000, NULL, 0, 10, NAN, 16);
    CHECK(!ci.valid && strstr(ci.reason, "IQR"));
    ci = dg_sweep_rate_ci(NAN, ms, 20, 10, 2, 16);
    CHECK(!ci.valid && strstr(ci.reason, "samples/s"));
    cJSON *cj = dg_sweep_rate_json(&ci);
    CHECK(cj && cJSON_IsNull(cJSON_GetObjectItem(cj, "lo")) && dg_jbool(cj, "valid") == 0 &&
          strcmp(dg_jstr(cj, "unit"), "samples/s") == 0);
    cJSON_Delete(cj);
    CHECK_DONE();
}
