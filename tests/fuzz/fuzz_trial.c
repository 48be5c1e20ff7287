/* libFuzzer harness for a sweep trial's result as the sweep reads it from its
 * child: the fixture's `__trial` record on the result pipe
 * (dg_fixture_trial_read) or the command runner's child run record
 * (dg_accept_cmd_trial_read), then the TRIAL entry the driver writes
 * (dg_trial_entry). Input: 6 header bytes, the child's bytes, NUL, its
 * stderr line (or why it left no record). Header bytes: [0] bit 0 the
 * runner (0 fixture, 1 command); [1] bits: started, timed out, interrupted,
 * memory budget, then the OOM-kill count's state (2 bits); [2] the signal;
 * [3] the exit status; [4] log2 of the batch; [5] warm-up steps. Nothing may
 * crash; every valid metric is finite and the entry is a valid record. */
#include "fuzz.h"
#include "fuzz_util.h"
#include "steps/accept_cmd.h"
#include "steps/runner.h"
#include "steps/steps.h"

#include <math.h>

static void metric_ok(dg_metric m)
{
    if (m.valid && !isfinite(m.value))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t h[6];
    size_t hn = fuzz_head(data, size, h, sizeof h);
    fuzz_parts in;
    if (fuzz_split(data + hn, size - hn, 2, &in) < 0)
        return 0;
    int batch = 1 << (h[4] % 21);
    dg_trial_result t;
    memset(&t, 0, sizeof t);
    t.rate = (dg_sweep_rate){.sps = NAN, .lo = NAN, .hi = NAN, .reason = "not run"};
    t.samples = NAN;
    t.loop_s = NAN;
    if ((h[0] & 1) == 0) {
        dg_trial_child c = {.started = h[1] & 1,
                            .timed_out = h[1] & 2,
                            .interrupted = h[1] & 4,
                            .exit_code = h[2] ? -1 : h[3],
                            .sig = h[2] % 65,
                            .wall_s = 1.5};
        dg_copy_clean(c.err_line, sizeof c.err_line, in.p[1]); /* as run_child keeps it */
        dg_fixture_trial_read(&c, in.p[0], in.len[0], batch, h[5] % 64, 256.0 * 1048576, 120.0, &t);
    } else {
        cJSON *rec = cJSON_ParseWithLength(in.p[0], in.len[0]);
        dg_oom_killer k = {.state = (dg_oomk_state)((h[1] >> 4) % 3),
                           .source = "cgroup memory.events",
                           .kills = h[3]};
        dg_accept_cmd_trial_read(rec, in.p[1], (h[1] & 8) ? (size_t)1 << 30 : 0,
                                 (h[1] & 64) ? NULL : &k, batch, &t);
        cJSON_Delete(rec);
    }
    if (t.end > DG_TRIAL_INTERRUPTED || !t.extra)
        abort();
    metric_ok(t.step_median);
    metric_ok(t.step_iqr);
    metric_ok(t.allocated_peak);
    metric_ok(t.reserved_peak);
    metric_ok(t.rss_peak);
    metric_ok(t.swap_growth);
    metric_ok(t.psi_peak);
    if (t.rate.valid &&
        !(isfinite(t.rate.sps) && t.rate.lo <= t.rate.sps && t.rate.sps <= t.rate.hi))
        abort();
    if (t.end != DG_TRIAL_OK && t.reason[0] == '\0' && t.end != DG_TRIAL_FAILED)
        abort(); /* a trial that did not end ok says why */
    cJSON *entry = dg_trial_entry(batch, &t);
    fuzz_json_check(entry);
    cJSON_Delete(entry);
    fuzz_parts_free(&in);
    return 0;
}
