/* The doubling stop policy both batch sweeps share (the fixture's, sweep.c,
 * and accept -- CMD's, accept_cmd.c): docs/measure.md "Sweep" lists the
 * reasons. A pure function of the good trials fed to it, in batch order, so
 * the unit test drives it with synthetic throughput sequences. */
#include "steps/steps.h"

#include <math.h>

void dg_sweep_stop_init(dg_sweep_stopper *s, int to, double max_trial_s, double train_samples)
{
    *s = (dg_sweep_stopper){.to = to,
                            .max_trial_s = max_trial_s,
                            .train_samples = train_samples,
                            .prev = NAN,
                            .best = NAN};
}

const char *dg_sweep_stop_next(dg_sweep_stopper *s, int batch, double sps, double trial_s)
{
    /* Two falls in a row: past the device's best, and not noise. */
    s->falls = isfinite(s->prev) && isfinite(sps) && sps < s->prev ? s->falls + 1 : 0;
    s->prev = sps;
    if (s->falls >= DG_SWEEP_FALLS)
        return "throughput-falling";
    /* A small model on a large device never runs out of memory: doublings
     * that gain less than DG_SWEEP_PLATEAU_GAIN over the best so far, three
     * in a row, say the device is saturated. */
    if (isfinite(sps)) {
        s->flat =
            isfinite(s->best) && sps < s->best * (1.0 + DG_SWEEP_PLATEAU_GAIN) ? s->flat + 1 : 0;
        s->best = isfinite(s->best) ? fmax(s->best, sps) : sps;
    }
    if (s->flat >= DG_SWEEP_PLATEAU_RUN)
        return "throughput-plateau";
    long next = 2L * batch;
    if (next > s->to)
        return "limit";
    /* A batch larger than the data it trains on is not a training configuration. */
    if (isfinite(s->train_samples) && s->train_samples > 0 && (double)next > s->train_samples)
        return "train-set";
    /* The next size would take about twice as long. */
    if (s->max_trial_s > 0 && isfinite(trial_s) && trial_s > s->max_trial_s)
        return "time";
    return NULL;
}
