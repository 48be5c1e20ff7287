/* dg_report_render: parse and check an evidence record, then hand it to one
 * of the renderers (render.h: html.c, md.c, text.c; JSON is the record
 * re-printed). The helpers they share are in shared.c. */
#include "report/render.h"

#include <string.h>

/* Largest rendered report; a bigger one fails with DG_ERR_NOMEM. */
#define REPORT_MAX ((size_t)64 << 20)

/* ---- entry point -------------------------------------------------------- */

/* DG_OK when rec is an evidence record this version renders. */
static dg_status check_evidence(dg_ctx *ctx, const cJSON *rec)
{
    if (!cJSON_IsObject(rec))
        return dg_fail(ctx, DG_ERR_FORMAT, "not an evidence record: the JSON is not an object");
    /* accept and run, and every verb's own record (its section of accept's). */
    static const char *const kinds[] = {"accept",  "run",     "env",       "gate",  "sweep", "soak",
                                        "compare", "profile", "supervise", "train", "slo"};
    const char *kind = dg_rp_str(rec, "kind");
    bool known = false;
    for (size_t i = 0; kind && i < sizeof kinds / sizeof *kinds; i++)
        known = known || strcmp(kind, kinds[i]) == 0;
    if (!known) {
        char k[40];
        dg_copy_clean(k, sizeof k, kind ? kind : "none");
        return dg_fail(ctx, DG_ERR_FORMAT,
                       "not an evidence record: kind is '%s', not one a devgate verb writes", k);
    }
    double v;
    if (!dg_rp_num(rec, "v", &v) || (v != 1 && v != 2))
        return dg_fail(ctx, DG_ERR_FORMAT,
                       "evidence record version is not 1 or 2; this devgate renders those");
    return DG_OK;
}

static void render_json(dg_capbuf *b, const cJSON *rec)
{
    char *s = cJSON_Print(rec);
    if (!s) {
        b->nomem = true;
        return;
    }
    dg_rp_put(b, s);
    dg_rp_put(b, "\n");
    cJSON_free(s);
}

dg_status dg_report_render(dg_ctx *ctx, const char *record_json, dg_report_format fmt, char **out)
{
    if (!out)
        return dg_fail(ctx, DG_ERR_USAGE, "report: no output pointer");
    *out = NULL;
    if (!record_json)
        return dg_fail(ctx, DG_ERR_USAGE, "report: no record");
    if (fmt != DG_REPORT_HTML && fmt != DG_REPORT_MD && fmt != DG_REPORT_JSON &&
        fmt != DG_REPORT_TEXT)
        return dg_fail(ctx, DG_ERR_USAGE, "report: unknown format %d", (int)fmt);
    const char *end = NULL;
    cJSON *rec = cJSON_ParseWithOpts(record_json, &end, true);
    if (!rec) {
        size_t at = end && end >= record_json ? (size_t)(end - record_json) : 0;
        return dg_fail(ctx, DG_ERR_FORMAT, "the record is not valid JSON (at byte %zu)", at);
    }
    /* Every format is valid UTF-8 whatever bytes a path, a label or a spec
     * value brought in (invalid sequences become U+FFFD). */
    if (!dg_json_utf8_fix(rec)) {
        cJSON_Delete(rec);
        return dg_fail(ctx, DG_ERR_NOMEM, "report: out of host memory");
    }
    dg_status st = check_evidence(ctx, rec);
    if (st != DG_OK) {
        cJSON_Delete(rec);
        return st;
    }
    /* The typed view, built once, is what the renderers read. */
    dg_record_view view;
    st = dg_record_view_build(ctx, rec, &view);
    if (st != DG_OK) {
        dg_record_view_free(&view);
        cJSON_Delete(rec);
        return st;
    }
    dg_capbuf b = {.cap = REPORT_MAX};
    switch (fmt) {
    case DG_REPORT_HTML: dg_rp_render_html(&b, &view); break;
    case DG_REPORT_MD: dg_rp_render_md(&b, &view); break;
    case DG_REPORT_TEXT: dg_rp_render_text(&b, &view); break;
    case DG_REPORT_JSON: render_json(&b, rec); break;
    }
    dg_record_view_free(&view);
    cJSON_Delete(rec);
    if (b.nomem || b.truncated || !b.data) {
        dg_free(b.data);
        return dg_fail(ctx, DG_ERR_NOMEM,
                       b.truncated ? "the report is larger than %zu bytes"
                                   : "out of memory rendering the report (cap %zu bytes)",
                       (size_t)REPORT_MAX);
    }
    *out = b.data;
    return DG_OK;
}
