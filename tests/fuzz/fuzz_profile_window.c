/* libFuzzer harness for the probe's profile output: the window file the
 * Python probe writes (DEVGATE_PROBE_PROFILE_OUT: torch.profiler's phases and
 * top operators) and the profiled child's run record, which accept -- CMD
 * turns into its profile section (dg_accept_cmd_profile). Input: one byte
 * choosing the device (cpu, cuda, mps, none), the window's bytes, NUL, the
 * run record's. Nothing may crash; the section is a valid record whose own
 * metrics have the record's shape. */
#include "fuzz.h"
#include "fuzz_util.h"
#include "steps/accept_cmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const devices[] = {"cpu", "cuda", "mps", NULL};
    const char *device = size ? devices[data[0] % 4] : "cpu";
    fuzz_parts in;
    if (fuzz_split(size ? data + 1 : data, size ? size - 1 : 0, 2, &in) < 0)
        return 0;
    cJSON *window = cJSON_ParseWithLength(in.p[0], in.len[0]);
    cJSON *rec = cJSON_ParseWithLength(in.p[1], in.len[1]);
    cJSON *p = dg_accept_cmd_profile(window, dg_jpath(rec, "profile"), device);
    if (!p)
        abort();
    fuzz_json_check(p);
    static const char *const metrics[] = {
        "step.ms",        "step.profiled_ms", "phases.queue_wait.ms", "phases.queue_wait.share",
        "phases.h2d.ms",  "phases.h2d.share", "phases.compute.ms",    "phases.compute.share",
        "phases.sync.ms", "phases.sync.share"};
    for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++)
        fuzz_metric_check(p, metrics[i]);
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItem(p, "ops"))
    {
        double share = dg_jnum(o, "share");
        if (!(share >= -1e300 && share <= 1e300)) /* a number, never NaN */
            abort();
    }
    cJSON_Delete(p);
    cJSON_Delete(window);
    cJSON_Delete(rec);
    fuzz_parts_free(&in);
    return 0;
}
