/* The run sampler's series (src/supervise/sample.c): every point carries each
 * series of docs/events.md with its unit in samples.series_units, and GPU
 * memory and utilisation are null (not measured), never 0, when no GPU
 * sampler is open. The sampled tree is this test process. */
#include "check.h"
#include "core/core.h"
#include "core/json.h"
#include "supervise/supervise.h"

#include <unistd.h>

int main(void)
{
    dg_tree tree = {.child = getpid(), .pgid = getpgrp(), .self = getppid()};
    dg_proc_entry ce;
    if (dg_proc_stat(getpid(), &ce))
        tree.child_start = ce.starttime;
    else
        check_skip("/proc/self/stat is not readable");
    dg_tree_sampler *s = dg_tree_sampler_new(&tree, false);
    CHECK(s != NULL);
    CHECK(dg_tree_sample(s, 0.0) >= 1);
    volatile double x = 0;
    for (int i = 0; i < 20000000; i++)
        x += i * 0.5; /* some CPU time for the second sample's delta */
    usleep(20000);
    CHECK(dg_tree_sample(s, 0.1) >= 1);
    cJSON *sup = cJSON_CreateObject();
    dg_tree_sampler_json(s, sup, 600);
    const cJSON *units = dg_jpath(sup, "samples.series_units");
    static const char *const keys[] = {"t", "rss", "cpu_pct", "swap", "gpu_mem", "gpu_util"};
    static const char *const want[] = {"s", "bytes", "percent", "bytes", "bytes", "percent"};
    for (int i = 0; i < 6; i++) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(units, keys[i]);
        CHECK_MSG(cJSON_IsString(u) && strcmp(u->valuestring, want[i]) == 0,
                  "series_units.%s is not \"%s\"", keys[i], want[i]);
    }
    const cJSON *ser = cJSON_GetObjectItemCaseSensitive(sup, "series");
    CHECK(cJSON_GetArraySize(ser) == 2);
    const cJSON *pt;
    cJSON_ArrayForEach(pt, ser)
    {
        static const char *const all[] = {"t",     "rss",  "cpu_pct", "threads",
                                          "procs", "swap", "gpu_mem", "gpu_util"};
        for (int i = 0; i < 8; i++)
            CHECK_MSG(cJSON_GetObjectItemCaseSensitive(pt, all[i]) != NULL, "a point lacks %s",
                      all[i]);
        CHECK_MSG(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(pt, "gpu_mem")) &&
                      cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(pt, "gpu_util")),
                  "GPU series are not null without a GPU sampler");
        CHECK(dg_jnum(pt, "rss") > 0 && dg_jnum(pt, "threads") >= 1);
    }
    CHECK(isfinite(dg_jnum(cJSON_GetArrayItem(ser, 1), "cpu_pct")));
    CHECK(strcmp(dg_jstr(sup, "samples.gpu_source"), "not asked for") == 0);
    cJSON_Delete(sup);
    dg_tree_sampler_free(s);
    dg_tree_free(&tree);
    CHECK_DONE();
}
