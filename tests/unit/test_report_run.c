/* The run page's sampled series (src/report/html_run.c): a chart per series of
 * a run record with units on both axes; a series without a valid point says
 * "not reported" and why (the GPU ones with the sampler's reason); a missing
 * point breaks the line; absurd values are skipped, never printed; the probe's
 * per-epoch memory is drawn from the soak epochs; records that are not runs
 * get no such section. */
#include "check.h"
#include "core/core.h"
#include "core/json.h"

static char *load(const char *name)
{
    const char *src = getenv("DEVGATE_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/records/%s", src ? src : ".", name);
    char *s = dg_read_file(path, 8u << 20, NULL);
    if (!s)
        check_skip("tests/data/records not found (set DEVGATE_SRC)");
    return s;
}

static bool has(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

/* The page's "Sampled series" section as its own string (dg_free), or NULL. */
static char *section_of(const char *html)
{
    const char *a = html ? strstr(html, "<section id=\"series\">") : NULL;
    const char *e = a ? strstr(a, "</section>") : NULL;
    if (!e)
        return NULL;
    size_t n = (size_t)(e - a);
    char *s = dg_malloc(n + 1);
    memcpy(s, a, n);
    s[n] = 0;
    return s;
}

/* The text between the <h3> named title and the next <h3> (or the end). */
static char *chart_of(const char *sec, const char *title)
{
    char h[160];
    snprintf(h, sizeof h, "<h3>%s</h3>", title);
    const char *a = sec ? strstr(sec, h) : NULL;
    if (!a)
        return NULL;
    const char *e = strstr(a + strlen(h), "<h3>");
    size_t n = e ? (size_t)(e - a) : strlen(a);
    char *s = dg_malloc(n + 1);
    memcpy(s, a, n);
    s[n] = 0;
    return s;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static char *render_html(dg_ctx *ctx, const cJSON *rec)
{
    char *json = cJSON_PrintUnformatted(rec);
    char *out = NULL;
    dg_status st = dg_report_render(ctx, json, DG_REPORT_HTML, &out);
    CHECK_MSG(st == DG_OK && out, "%s (%s)", dg_status_name(st), dg_errmsg(ctx));
    cJSON_free(json);
    return out;
}

/* True when s holds a run of 10 or more digits: a coordinate far outside the viewBox. */
static bool long_number(const char *s)
{
    int run = 0;
    for (; s && *s; s++) {
        run = *s >= '0' && *s <= '9' ? run + 1 : 0;
        if (run >= 10)
            return true;
    }
    return false;
}

static bool no_nonfinite(const char *s)
{
    return !has(s, "nan") && !has(s, "NaN") && !has(s, "inf\"") && !has(s, "=\"inf");
}

/* The recorded run: five samples, no NVML, ten probe epochs. */
static void test_recorded_run(dg_ctx *ctx, const char *json)
{
    cJSON *r = cJSON_Parse(json);
    char *html = render_html(ctx, r);
    char *sec = section_of(html);
    CHECK_MSG(sec, "the run page has no Sampled series section");
    CHECK(has(sec, "5 samples of the process tree, one every 200 ms"));
    char *rss = chart_of(sec, "Process-tree memory (RSS)");
    CHECK(has(rss, "<svg") && has(rss, "MiB</text>") && has(rss, "time since the start (s)") &&
          has(rss, "(bytes)"));
    char *cpu = chart_of(sec, "CPU use");
    CHECK(has(cpu, "<svg") && has(cpu, "%</text>") && has(cpu, "percent of one core"));
    char *thr = chart_of(sec, "Threads and processes");
    CHECK(has(thr, "<svg") && count(thr, "<path") == 2);
    char *sw = chart_of(sec, "Swap");
    CHECK(has(sw, "<svg"));
    /* No NVML on the machine that recorded it: both GPU series say so. */
    char *gm = chart_of(sec, "GPU memory"), *gu = chart_of(sec, "GPU utilisation");
    CHECK(!has(gm, "<svg") && has(gm, "not reported: no GPU sampler (no NVML"));
    CHECK(!has(gu, "<svg") && has(gu, "not reported: no GPU sampler (no NVML"));
    char *ep = chart_of(sec, "Per-epoch memory (the probe)");
    CHECK(has(ep, "<svg") && has(ep, ">epoch</text>") && has(ep, "allocator reserved") &&
          has(ep, "MiB</text>"));
    CHECK(no_nonfinite(sec));
    dg_free(rss);
    dg_free(cpu);
    dg_free(thr);
    dg_free(sw);
    dg_free(gm);
    dg_free(gu);
    dg_free(ep);
    dg_free(sec);
    dg_string_free(html);
    cJSON_Delete(r);
}

/* NVML sampled: GPU memory and utilisation are drawn; a null in the middle of a
 * series breaks its line; an absurd value is skipped; CPU all null reads "not
 * reported"; the cores line appears on the CPU chart when it fits the scale. */
static void test_nvml_and_gaps(dg_ctx *ctx, const char *json)
{
    cJSON *r = cJSON_Parse(json);
    cJSON *sup = cJSON_GetObjectItem(r, "supervise");
    cJSON *sm = cJSON_GetObjectItem(sup, "samples");
    cJSON_ReplaceItemInObject(sm, "gpu_source", cJSON_CreateString("nvml"));
    cJSON *ser = cJSON_GetObjectItem(sup, "series");
    int i = 0;
    cJSON *pt;
    cJSON_ArrayForEach(pt, ser)
    {
        cJSON_ReplaceItemInObject(pt, "gpu_mem", cJSON_CreateNumber((double)(i + 1) * (1 << 30)));
        cJSON_DeleteItemFromObject(pt, "gpu_util");
        cJSON_AddItemToObject(pt, "gpu_util",
                              i == 2 ? cJSON_CreateNull() : cJSON_CreateNumber(20.0 * i));
        cJSON_ReplaceItemInObject(pt, "cpu_pct", cJSON_CreateNull());
        if (i == 3)
            cJSON_ReplaceItemInObject(pt, "rss", cJSON_CreateNumber(1e300));
        i++;
    }
    char *html = render_html(ctx, r);
    char *sec = section_of(html);
    char *gm = chart_of(sec, "GPU memory"), *gu = chart_of(sec, "GPU utilisation");
    CHECK_MSG(has(gm, "<svg") && has(gm, "GiB</text>"), "GPU memory chart: %.300s",
              gm ? gm : "(none)");
    CHECK(has(gu, "<svg") && has(gu, "%</text>"));
    /* The util path restarts after the null point: two M commands. */
    const char *d = gu ? strstr(gu, "d=\"M") : NULL;
    const char *de = d ? strchr(d + 3, '"') : NULL;
    int moves = 0;
    for (const char *p = d ? d + 3 : NULL; p && p < de; p++)
        moves += *p == 'M';
    CHECK_MSG(moves == 2, "the utilisation line has %d moves, wanted 2 (a gap)", moves);
    char *cpu = chart_of(sec, "CPU use");
    CHECK(!has(cpu, "<svg") && has(cpu, "not reported"));
    char *rss = chart_of(sec, "Process-tree memory (RSS)");
    CHECK(has(rss, "<svg") && !long_number(rss) && no_nonfinite(rss));
    CHECK(no_nonfinite(sec));
    dg_free(gm);
    dg_free(gu);
    dg_free(cpu);
    dg_free(rss);
    dg_free(sec);
    dg_string_free(html);

    /* With NVML but no process of the tree on a GPU. */
    cJSON_ArrayForEach(pt, ser)
    {
        cJSON_ReplaceItemInObject(pt, "gpu_mem", cJSON_CreateNull());
        cJSON_ReplaceItemInObject(pt, "gpu_util", cJSON_CreateNull());
        cJSON_ReplaceItemInObject(pt, "cpu_pct", cJSON_CreateNumber(150));
    }
    cJSON_AddItemToObject(sm, "cores", dg_json_metric(2, true, "cores"));
    html = render_html(ctx, r);
    sec = section_of(html);
    gm = chart_of(sec, "GPU memory");
    CHECK(has(gm, "not reported: NVML listed no process of the tree on a GPU"));
    cpu = chart_of(sec, "CPU use");
    CHECK_MSG(has(cpu, "all 2 cores devgate may use") && has(cpu, "200%</text>"),
              "CPU chart without the cores line: %.400s", cpu ? cpu : "(none)");
    dg_free(gm);
    dg_free(cpu);
    dg_free(sec);
    dg_string_free(html);
    cJSON_Delete(r);
}

/* No samples and no epochs: every chart reads "not reported", with the reason. */
static void test_empty(dg_ctx *ctx, const char *json)
{
    cJSON *r = cJSON_Parse(json);
    cJSON *sup = cJSON_GetObjectItem(r, "supervise");
    cJSON_ReplaceItemInObject(sup, "series", cJSON_CreateArray());
    cJSON_ReplaceItemInObject(r, "soak", cJSON_CreateNull());
    char *html = render_html(ctx, r);
    char *sec = section_of(html);
    CHECK(sec && !has(sec, "<svg"));
    CHECK_MSG(count(sec, "not reported") == 7, "%d of 7 series say not reported",
              count(sec, "not reported"));
    CHECK(has(sec, "the record holds no sampled point of the process tree"));
    CHECK(has(sec, "the program sent no epoch_end event"));
    dg_free(sec);
    dg_string_free(html);
    cJSON_Delete(r);
}

/* An accept record (no supervise section) has no sampled series section. */
static void test_not_a_run(dg_ctx *ctx, const char *json)
{
    cJSON *r = cJSON_Parse(json);
    char *html = render_html(ctx, r);
    CHECK(html && !has(html, "<section id=\"series\">"));
    dg_string_free(html);
    cJSON_Delete(r);
}

int main(void)
{
    dg_ctx *ctx = dg_ctx_new();
    char *run = load("run-probe.json"), *acc = load("report-sample.json");
    size_t live0, live1, peak;
    dg_host_mem_stats(&live0, &peak);
    test_recorded_run(ctx, run);
    test_nvml_and_gaps(ctx, run);
    test_empty(ctx, run);
    test_not_a_run(ctx, acc);
    dg_host_mem_stats(&live1, &peak);
    CHECK_MSG(live1 == live0, "host bytes live before %zu, after %zu", live0, live1);
    dg_free(run);
    dg_free(acc);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
