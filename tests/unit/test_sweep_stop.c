/* The sweeps' shared stop policy (dg_sweep_stopper) over synthetic
 * throughput sequences: where each one stops, and why. */
#include "check.h"

#include "steps/steps.h"

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
        const char *why = dg_sweep_stop_next(&s, b, sps[i], trial_s ? trial_s[i] : 1.0);
        if (why)
            return why;
    }
    return NULL;
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
    CHECK_DONE();
}
