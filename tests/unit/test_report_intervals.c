/* The terminal summary and the Markdown show the speedup's 95% interval, the
 * Mann-Whitney p and each side's GEMM as a fraction of its FP32 peak where a
 * compare run carries them, and the soak's growth interval; a record without
 * them (the golden ones) renders as before, with no such line. */
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

static cJSON *metric(double v, const char *unit)
{
    return dg_json_metric(v, true, unit);
}

static char *render(dg_ctx *ctx, const cJSON *rec, dg_report_format fmt)
{
    char *text = dg_json_print(rec), *out = NULL;
    CHECK_MSG(dg_report_render(ctx, text, fmt, &out) == DG_OK, "%s", dg_errmsg(ctx));
    dg_string_free(text);
    return out;
}

int main(void)
{
    dg_ctx *ctx = dg_ctx_new();
    char *healthy = load("healthy.json");
    cJSON *rec = cJSON_Parse(healthy);

    /* Before: no interval, no peak, no speedup line. */
    char *txt = render(ctx, rec, DG_REPORT_TEXT), *md = render(ctx, rec, DG_REPORT_MD);
    CHECK(!has(txt, "speedup   ") && !has(txt, "95%"));
    CHECK(has(md, "| speedup vs cpu, batch 64 | 3.00× (device step time") && !has(md, "95%"));
    dg_string_free(txt);
    dg_string_free(md);

    /* The repetition statistics and the fractions of peak of issue 12. */
    cJSON *run = (cJSON *)dg_jpath(rec, "compare.runs[0]");
    cJSON *ci = cJSON_AddObjectToObject(run, "speedup_ci");
    cJSON_AddItemToObject(ci, "lo", metric(2.4, "x"));
    cJSON_AddItemToObject(ci, "hi", metric(3.6, "x"));
    cJSON *mw = cJSON_AddObjectToObject(run, "mann_whitney");
    cJSON_AddItemToObject(mw, "p", metric(0.008, "probability"));
    cJSON_AddItemToObject(cJSON_GetObjectItem(run, "cpu"), "fraction_of_peak",
                          metric(0.064, "fraction"));
    cJSON_AddItemToObject(cJSON_GetObjectItem(run, "device"), "fraction_of_peak",
                          metric(0.011, "fraction"));
    cJSON *payload = (cJSON *)dg_jpath(rec, "soak.soak");
    cJSON *g = cJSON_AddObjectToObject(payload, "growth_ci");
    cJSON *fp = cJSON_AddObjectToObject(g, "footprint");
    cJSON_AddItemToObject(fp, "point", metric(3, "%"));
    cJSON_AddItemToObject(fp, "lo", metric(1.5, "%"));
    cJSON_AddItemToObject(fp, "hi", metric(4.25, "%"));

    txt = render(ctx, rec, DG_REPORT_TEXT);
    md = render(ctx, rec, DG_REPORT_MD);
    CHECK_MSG(has(txt, "\n  speedup   opencl 3.00x cpu at batch 64, 95% 2.40-3.60x (Mann-Whitney "
                       "p 0.008) · GEMM at 6.4% of peak on cpu, 1.1% on opencl\n"),
              "%s", txt ? txt : "(null)");
    CHECK_MSG(has(md, "| speedup vs cpu, batch 64 | 3.00×, 95% interval 2.40–3.60× (device step "
                      "time"),
              "%s", md ? md : "(null)");
    CHECK(has(md, "; GEMM at 6.4% of FP32 peak on cpu, 1.1% on the device) |"));
    CHECK_MSG(has(md, "footprint ") && has(md, "(last third 95% +1.5 to +4.2%)"), "%s",
              md ? md : "(null)");
    dg_string_free(txt);
    dg_string_free(md);

    /* Only one side's peak: said for that side alone. */
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(run, "device"), "fraction_of_peak");
    txt = render(ctx, rec, DG_REPORT_TEXT);
    md = render(ctx, rec, DG_REPORT_MD);
    CHECK(has(txt, "GEMM at 6.4% of peak on cpu\n"));
    CHECK(has(md, "; GEMM at 6.4% of FP32 peak on cpu) |"));
    dg_string_free(txt);
    dg_string_free(md);

    cJSON_Delete(rec);
    dg_free(healthy);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
