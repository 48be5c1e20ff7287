/* Reports: every format renders the sample evidence record; hostile strings
 * come out escaped (HTML, Markdown, terminal); null sections and invalid
 * metrics render as "not reported", never 0; malformed and non-evidence
 * records are refused; a record from the ledger renders, through the library
 * and through `devgate report RUN_ID` when DEVGATE_BIN names the binary. */
#include "check.h"
#include "core/core.h"
#include "core/json.h"
#include "core/record.h"
#include "report/render.h"

#include <ftw.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const dg_report_format all_formats[] = {DG_REPORT_HTML, DG_REPORT_MD, DG_REPORT_JSON,
                                               DG_REPORT_TEXT};

static char *load_sample(void)
{
    const char *src = getenv("DEVGATE_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/records/report-sample.json", src ? src : ".");
    char *s = dg_read_file(path, 8u << 20, NULL);
    if (!s)
        check_skip("tests/data/records/report-sample.json not found (set DEVGATE_SRC)");
    return s;
}

/* Renders json in fmt; NULL (and a failed check) unless it succeeds. */
static char *render(dg_ctx *ctx, const char *json, dg_report_format fmt)
{
    char *out = NULL;
    dg_status st = dg_report_render(ctx, json, fmt, &out);
    CHECK_MSG(st == DG_OK && out, "format %d: %s (%s)", (int)fmt, dg_status_name(st),
              dg_errmsg(ctx));
    return out;
}

static bool has(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

/* Position of needle in hay, or SIZE_MAX. */
static size_t pos(const char *hay, const char *needle)
{
    const char *p = hay ? strstr(hay, needle) : NULL;
    return p ? (size_t)(p - hay) : SIZE_MAX;
}

/* Strict UTF-8 check (no overlongs, surrogates or bytes past U+10FFFF). */
static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int n = c < 0x80             ? 0
                : (c & 0xe0) == 0xc0 ? 1
                : (c & 0xf0) == 0xe0 ? 2
                : (c & 0xf8) == 0xf0 ? 3
                                     : -1;
        if (n < 0 || (n == 1 && c < 0xc2))
            return false;
        uint32_t v = n ? c & (0x3f >> n) : c;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            v = (v << 6) | (p[i] & 0x3f);
        }
        if ((n == 2 && v < 0x800) || (n == 3 && (v < 0x10000 || v > 0x10ffff)) ||
            (v >= 0xd800 && v <= 0xdfff))
            return false;
        p += n + 1;
    }
    return true;
}

/* No NaN or infinity printed anywhere (coordinates, numbers). */
static bool no_nonfinite(const char *s)
{
    static const char *const bad[] = {"nan",  "NaN",    "inf\"", "Inf",
                                      "-nan", "=\"inf", ",inf",  " inf "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (has(s, bad[i]))
            return false;
    return true;
}

static void test_sample_formats(dg_ctx *ctx, const char *sample)
{
    char *html = render(ctx, sample, DG_REPORT_HTML);
    CHECK(has(html, "<!DOCTYPE html>"));
    CHECK(has(html, "Content-Security-Policy\" content=\"default-src 'none'; style-src "
                    "'unsafe-inline'; img-src data:\""));
    CHECK(has(html, "name=\"viewport\""));
    CHECK(has(html, "@media print"));
    CHECK(has(html, "<svg") && has(html, "viewBox=\"0 0 ") && has(html, "width=\"100%\""));
    CHECK(!has(html, "<script") && !has(html, "<link") && !has(html, "<img"));
    CHECK(!has(html, "https://") && !has(html, "src=") && !has(html, "url("));
    CHECK(no_nonfinite(html));
    CHECK(valid_utf8(html));
    /* Sections in the order of the page (MOCKS.md). */
    static const char *const ids[] = {"id=\"verdict\"",   "id=\"findings\"",    "id=\"sweep\"",
                                      "id=\"memory\"",    "id=\"baseline\"",    "id=\"profile\"",
                                      "id=\"fallbacks\"", "id=\"environment\"", "id=\"gate\"",
                                      "id=\"bucket\"",    "id=\"seeds\"",       "id=\"versions\""};
    for (size_t i = 0; i + 1 < sizeof ids / sizeof ids[0]; i++)
        CHECK_MSG(pos(html, ids[i]) < pos(html, ids[i + 1]), "%s before %s", ids[i], ids[i + 1]);
    CHECK(has(html, "✓ accepted"));
    CHECK(has(html, "knee 64") && has(html, "safe 96")); /* sweep markers */
    CHECK(has(html, "128: signal SIGKILL"));             /* the failed trial, how it ended */
    CHECK(has(html, "threshold +26%"));                  /* memory growth line */
    CHECK(has(html, "fill=\"#ddf4ff\""));                /* a validation epoch shaded */
    CHECK(has(html, "class=\"fallback\""));              /* fallback op highlighted */
    CHECK(pos(html, "slow-device-data") < pos(html, "retained-refs"));
    CHECK(has(html, "compare.runs[0].busy_fraction")); /* evidence with its field */
    dg_string_free(html);

    char *md = render(ctx, sample, DG_REPORT_MD);
    CHECK(has(md, "## devgate accept: ✅ accepted"));
    CHECK(has(md, "| step | status | verdict | summary | share |"));
    CHECK(has(md, "- **fail** slow\\-device\\-data") || has(md, "- **fail** slow-device-data"));
    CHECK(has(md, "| knee | batch 64 (2114.7 samples/s) |"));
    CHECK(has(md, "| safe batch | batch 96"));
    CHECK(has(md, "speedup vs cpu, batch 32 | 0.14×"));
    CHECK(has(md, "memory growth over 4 epochs"));
    CHECK(no_nonfinite(md) && valid_utf8(md));
    dg_string_free(md);

    char *text = render(ctx, sample, DG_REPORT_TEXT);
    CHECK(has(text, "devgate accept · run 20261130-0655-abcd · bucket b5e9a7b2 · host build-01\n"));
    CHECK(has(text, "\n  sweep     PASS  knee b64"));
    CHECK(has(text, "   fail  slow-device-data  opencl step time"));
    CHECK(has(text, "→ look for references kept across steps"));
    CHECK(has(text, "  decision  device (opencl) — opencl is 2.1x cpu\n"));
    CHECK(has(text, "  accepted: 1234.5 samples/s at batch 64 on opencl\n"));
    CHECK(has(text, "  pack  devgate-report/20261130-0655-abcd/report.html\n"));
    dg_string_free(text);

    char *json = render(ctx, sample, DG_REPORT_JSON);
    cJSON *a = cJSON_Parse(sample), *b = cJSON_Parse(json);
    CHECK(a && b && cJSON_Compare(a, b, true));
    CHECK(has(json, "\n\t\"kind\":\t\"accept\"")); /* indented */
    cJSON_Delete(a);
    cJSON_Delete(b);
    dg_string_free(json);
}

/* The sample with fields replaced by hostile strings. */
static char *hostile_record(const char *sample)
{
    cJSON *r = cJSON_Parse(sample);
    const char *script = "<script>alert(1)</script>";
    const char *img = "\"><img src=x onerror=alert(1)>";
    cJSON_ReplaceItemInObject(r, "label", cJSON_CreateString(script));
    cJSON *dev = cJSON_GetArrayItem(
        cJSON_GetObjectItem(
            cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "gate"), "backends"), 1),
            "devices"),
        0);
    cJSON_ReplaceItemInObject(dev, "name", cJSON_CreateString(img));
    cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "findings"), 0);
    cJSON_ReplaceItemInObject(
        f, "title", cJSON_CreateString("| pipe *bold* _x_ [link](http://x) `c`\nsecond line"));
    cJSON_ReplaceItemInObject(f, "action",
                              cJSON_CreateString("\x1b[31mred\x1b[0m and \xe2\x80\xae reversed"));
    cJSON *step = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "steps"), 0);
    cJSON_ReplaceItemInObject(step, "summary",
                              cJSON_CreateString("line1\nline2 | cell </td><script>x</script>"));
    cJSON *proc = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "env"), "processes"),
                            "top_cpu"),
        0);
    cJSON_ReplaceItemInObject(
        proc, "cmdline", cJSON_CreateString("python train.py --x '<script>alert(1)</script>'"));
    cJSON *sup = cJSON_CreateObject();
    const char *argv[] = {"python", "-c", "print('<script>alert(1)</script>')"};
    cJSON *spec = cJSON_GetObjectItem(r, "spec");
    cJSON_DeleteItemFromObject(spec, "cmd");
    cJSON_AddItemToObject(spec, "cmd", cJSON_CreateStringArray(argv, 3));
    cJSON_AddNumberToObject(sup, "exit_status", 0);
    cJSON_AddItemToObject(sup, "note<script>", cJSON_CreateString(img));
    cJSON_ReplaceItemInObject(r, "supervise", sup);
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    /* Invalid UTF-8 straight into a record string: cJSON keeps raw bytes. */
    char *out =
        dg_asprintf("%.*s\"host\":\"bad\xff\xfe utf8 \xc0\xaf\xed\xa0\x80 host\",%s", 1, s, s + 1);
    cJSON_free(s);
    return out;
}

static void test_hostile(dg_ctx *ctx, const char *sample)
{
    char *rec = hostile_record(sample);
    char *html = render(ctx, rec, DG_REPORT_HTML);
    CHECK(!has(html, "<script"));
    CHECK(!has(html, "<img"));
    CHECK(!has(html, "</td><script"));
    CHECK(has(html, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    CHECK(has(html, "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    CHECK(has(html, "python -c 'print(&#39;&lt;script&gt;")); /* the supervised command, quoted */
    CHECK(has(html, "note&lt;script&gt;"));                   /* generic keys escaped too */
    CHECK(!has(html, "\x1b") && !has(html, "\xe2\x80\xae"));
    CHECK(has(html, "bad\xef\xbf\xbd"));
    CHECK(valid_utf8(html));
    dg_string_free(html);

    char *md = render(ctx, rec, DG_REPORT_MD);
    CHECK(!has(md, "<script"));
    CHECK(has(md, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    CHECK(has(md, "\\| pipe \\*bold\\* \\_x\\_ \\[link\\](http://x) \\`c\\` second line"));
    CHECK(has(
        md, "| line1 line2 \\| cell &lt;/td&gt;&lt;script&gt;x&lt;/script&gt; | not reported |\n"));
    CHECK(!has(md, "\x1b") && !has(md, "\xe2\x80\xae"));
    CHECK(has(md, "| supervised command | python -c "
                  "'print('&lt;script&gt;alert(1)&lt;/script&gt;')' (exit 0) |"));
    CHECK(valid_utf8(md));
    dg_string_free(md);

    char *text = render(ctx, rec, DG_REPORT_TEXT);
    CHECK(!has(text, "\x1b") && !has(text, "\xe2\x80\xae"));
    CHECK(has(text, "?[31mred?[0m"));
    CHECK(has(text, "  env       PASS  line1 line2 | cell"));
    CHECK(has(text, "host bad?? utf8"));
    CHECK(valid_utf8(text));
    dg_string_free(text);
    dg_free(rec);
}

static void test_null_sections(dg_ctx *ctx)
{
    static const char *const recs[] = {
        "{\"v\":1,\"kind\":\"accept\",\"run_id\":null,\"timestamp\":null,\"host\":null,\"label\":"
        "null,"
        "\"state\":\"failed\",\"spec\":null,\"steps\":null,\"env\":null,\"gate\":null,\"sweep\":"
        "null,"
        "\"soak\":null,\"compare\":null,\"profile\":null,\"supervise\":null,\"thresholds\":null,"
        "\"findings\":null,\"decision\":null,\"final_gate\":null,\"pack\":null}",
        "{\"v\":1,\"kind\":\"run\"}",
        /* Sections of the wrong type, arrays where objects belong. */
        "{\"v\":1,\"kind\":\"run\",\"env\":[],\"sweep\":{\"trials\":{},\"knee\":7},\"soak\":{"
        "\"epochs\":[1,null]},"
        "\"compare\":{\"runs\":[null,{\"batch\":\"x\"}]},\"findings\":[1,{\"severity\":3}],"
        "\"steps\":[{}],"
        "\"final_gate\":{\"proofs\":[]},\"supervise\":{\"cmd\":[1,null]}}",
    };
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++)
        for (size_t f = 0; f < 4; f++) {
            char *out = render(ctx, recs[i], all_formats[f]);
            CHECK(out && out[0]);
            if (all_formats[f] == DG_REPORT_HTML) {
                CHECK(has(out, "No batch sweep in this record") || i == 2);
                CHECK(has(out, "</html>"));
                CHECK(no_nonfinite(out));
            }
            if (all_formats[f] == DG_REPORT_TEXT && i < 2)
                CHECK(has(out, "final gate not recorded") && has(out, "decision  none recorded"));
            dg_string_free(out);
        }
}

/* Sets o[key] to {"value": v, "unit": unit, "valid": false}. */
static void invalidate(cJSON *o, const char *key, double v, const char *unit)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "value", v);
    cJSON_AddStringToObject(m, "unit", unit);
    cJSON_AddBoolToObject(m, "valid", false);
    cJSON_ReplaceItemInObject(o, key, m);
}

static void test_invalid_metrics(dg_ctx *ctx, const char *sample)
{
    cJSON *r = cJSON_Parse(sample);
    cJSON *g = cJSON_GetObjectItem(r, "final_gate");
    invalidate(g, "throughput", 777.25, "samples/s");
    cJSON_ReplaceItemInObject(g, "statement", cJSON_CreateString("not accepted: no throughput"));
    cJSON *run =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "compare"), "runs"), 0);
    invalidate(run, "speedup", 0, "x");
    invalidate(run, "busy_fraction", 0.4321, "fraction");
    cJSON *knee = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "sweep"), "knee");
    invalidate(knee, "samples_per_s", 0, "samples/s");
    cJSON *ep0 =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "soak"), "epochs"), 0);
    invalidate(ep0, "allocated", 0, "bytes");
    char *rec = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);

    char *md = render(ctx, rec, DG_REPORT_MD);
    CHECK(has(md, "| promised throughput | not reported at batch 64 |"));
    CHECK(has(md, "| knee | batch 64 (not reported) |"));
    CHECK(has(md, "| speedup vs cpu, batch 32 | not reported |"));
    CHECK(!has(md, "777") && !has(md, "43.2"));
    dg_string_free(md);
    char *html = render(ctx, rec, DG_REPORT_HTML);
    CHECK(!has(html, "777") && !has(html, "43.2%"));
    CHECK(has(html, "throughput <span class=\"na\">not reported</span> at batch 64"));
    CHECK(has(
        html,
        "<tr><td class=\"n\">0</td><td class=\"n\"><span class=\"na\">not reported</span></td>"));
    CHECK(!has(html, ">0 x<") && !has(html, ">0 samples/s<"));
    CHECK(no_nonfinite(html));
    dg_string_free(html);
    cJSON_free(rec);
}

static void test_extreme_numbers(dg_ctx *ctx, const char *sample)
{
    cJSON *r = cJSON_Parse(sample);
    cJSON *sw = cJSON_GetObjectItem(r, "sweep");
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(sw, "trials"), 0);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(t, "samples_per_s"), "value",
                              cJSON_CreateNumber(1e308));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(t, "device_reserved_peak"), "value",
                              cJSON_CreateNumber(1e308));
    cJSON *t2 = cJSON_GetArrayItem(cJSON_GetObjectItem(sw, "trials"), 1);
    cJSON_ReplaceItemInObject(t2, "batch", cJSON_CreateNumber(-5));
    cJSON *t3 = cJSON_GetArrayItem(cJSON_GetObjectItem(sw, "trials"), 2);
    cJSON_ReplaceItemInObject(t3, "batch", cJSON_CreateNumber(0));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(sw, "knee"), "batch", cJSON_CreateNumber(1e300));
    cJSON *soak = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "soak"), "soak");
    cJSON_ReplaceItemInObject(
        cJSON_GetObjectItem(cJSON_GetObjectItem(soak, "baseline"), "footprint"), "value",
        cJSON_CreateNumber(1e-300));
    char *rec = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    for (size_t f = 0; f < 4; f++) {
        char *out = render(ctx, rec, all_formats[f]);
        CHECK_MSG(no_nonfinite(out), "format %zu prints a non-finite number", f);
        dg_string_free(out);
    }
    cJSON_free(rec);
}

/* The memory threshold shown is the one the rules used (thresholds.mem_growth_pct):
 * the page, the memory chart's threshold line and the Markdown all say 40%, and the
 * default 26% appears nowhere once the record says otherwise. */
static void test_threshold_shown(dg_ctx *ctx, const char *sample)
{
    cJSON *r = cJSON_Parse(sample);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "thresholds"), "mem_growth_pct",
                              cJSON_CreateNumber(40));
    char *rec = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    char *html = render(ctx, rec, DG_REPORT_HTML);
    CHECK_MSG(has(html, "fill=\"#cf222e\">threshold +40%</text>"), "chart threshold line");
    CHECK_MSG(has(html, " · threshold 40% · staircase"), "memory section text");
    CHECK(!has(html, "threshold +26%") && !has(html, "threshold 26%"));
    dg_string_free(html);
    char *md = render(ctx, rec, DG_REPORT_MD);
    CHECK_MSG(has(md, "(threshold 40%) |"), "markdown key numbers");
    CHECK(!has(md, "threshold 26%"));
    dg_string_free(md);
    cJSON_free(rec);

    /* Without a thresholds section the default applies. */
    r = cJSON_Parse(sample);
    cJSON_DeleteItemFromObject(r, "thresholds");
    rec = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    md = render(ctx, rec, DG_REPORT_MD);
    CHECK(has(md, "(threshold 26%) |"));
    dg_string_free(md);
    cJSON_free(rec);
}

/* Prose devgate wrote with a non-finite number in it ("knee bnan", "+nan%")
 * reads "not reported" in every human format; words that merely contain
 * nan or inf, and record strings that are not prose, are left alone. */
static void test_nan_prose(dg_ctx *ctx, const char *sample)
{
    cJSON *r = cJSON_Parse(sample);
    cJSON *step = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "steps"), 2);
    cJSON_ReplaceItemInObject(
        step, "summary",
        cJSON_CreateString("opencl: knee bnan (banana) · safe b-inf · +nan% · -nan × "
                           "nanx, 0.5x, information, inf. nan_rate (nan)"));
    cJSON *g = cJSON_GetObjectItem(r, "final_gate");
    cJSON_ReplaceItemInObject(g, "statement", cJSON_CreateString("accepted: nan samples/s"));
    cJSON *reasons = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "decision"), "reasons");
    cJSON_ReplaceItemInArray(reasons, 0, cJSON_CreateString("opencl is nan× cpu at batch 64"));
    cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "findings"), 0);
    cJSON_ReplaceItemInObject(f, "title", cJSON_CreateString("growth -inf% over nan epochs"));
    cJSON_ReplaceItemInObject(r, "label", cJSON_CreateString("nan"));
    char *rec = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    static const char *const want[] = {
        "opencl: knee not reported (banana) · safe not reported · not reported · not reported "
        "× not reported, 0.5x, information, inf. nan_rate (not reported)",
        "accepted: not reported samples/s", "opencl is not reported cpu at batch 64",
        "growth not reported over not reported epochs"};
    const dg_report_format human[] = {DG_REPORT_TEXT, DG_REPORT_MD, DG_REPORT_HTML};
    for (size_t k = 0; k < 3; k++) {
        char *out = render(ctx, rec, human[k]);
        for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
            /* Markdown escapes '_' and HTML has no specials here but '×'. */
            const char *needle = want[w];
            char md[256];
            if (human[k] == DG_REPORT_MD && strstr(needle, "nan_rate")) {
                snprintf(md, sizeof md, "%s", needle);
                char *u = strstr(md, "nan_rate");
                memmove(u + 4, u + 3, strlen(u + 3) + 1);
                u[3] = '\\';
                needle = md;
            }
            CHECK_MSG(has(out, needle), "format %d lacks \"%s\"", (int)human[k], needle);
        }
        CHECK_MSG(!has(out, "bnan") && !has(out, "nan%") && !has(out, "inf%") &&
                      !has(out, "nanx") && !has(out, "nan×"),
                  "format %d still prints a non-finite number", (int)human[k]);
        /* The label is the user's text, not devgate's prose: kept as it is. */
        CHECK_MSG(has(out, human[k] == DG_REPORT_HTML ? ">nan<" : "nan"), "format %d label",
                  (int)human[k]);
        dg_string_free(out);
    }
    cJSON_free(rec);
}

/* The memory chart scales each source by the soak's recorded baseline
 * (soak.soak.baseline), not only by epoch 0's row: halving the recorded
 * baseline changes the chart. */
static void test_memory_baseline(dg_ctx *ctx, const char *sample)
{
    cJSON *r = cJSON_Parse(sample);
    cJSON *base = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "soak"), "soak"),
                            "baseline"),
        "allocator_allocated");
    CHECK(base != NULL);
    cJSON_ReplaceItemInObject(base, "value", cJSON_CreateNumber(11023360 / 2));
    char *rec = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    char *a = render(ctx, sample, DG_REPORT_HTML), *b = render(ctx, rec, DG_REPORT_HTML);
    CHECK_MSG(a && b && strcmp(a, b) != 0, "the recorded baseline does not reach the chart");
    CHECK(has(b, ">200%</text>") && !has(a, ">200%</text>"));
    dg_string_free(a);
    dg_string_free(b);
    cJSON_free(rec);
}

static void test_refusals(dg_ctx *ctx, const char *sample)
{
    char *out = (char *)1;
    static const char *const malformed[] = {"", "{", "{\"v\":1,\"kind\":\"accept\"", "nul",
                                            "{\"v\":1} trailing"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        CHECK(dg_report_render(ctx, malformed[i], DG_REPORT_HTML, &out) == DG_ERR_FORMAT);
        CHECK(out == NULL);
        CHECK(has(dg_errmsg(ctx), "not valid JSON"));
    }
    size_t half = strlen(sample) / 2;
    char *cut = dg_asprintf("%.*s", (int)half, sample);
    CHECK(dg_report_render(ctx, cut, DG_REPORT_MD, &out) == DG_ERR_FORMAT);
    dg_free(cut);
    static const char *const foreign[] = {"{\"kind\":\"gate\"}",
                                          "{\"v\":1,\"kind\":\"bogus\",\"backends\":[]}",
                                          "[1,2]",
                                          "\"accept\"",
                                          "{\"v\":3,\"kind\":\"accept\"}",
                                          "{\"kind\":\"accept\"}",
                                          "{\"v\":1}"};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        for (size_t f = 0; f < 4; f++)
            CHECK_MSG(dg_report_render(ctx, foreign[i], all_formats[f], &out) == DG_ERR_FORMAT,
                      "%s", foreign[i]);
        CHECK(out == NULL);
    }
    dg_report_render(ctx, "{\"v\":2,\"kind\":\"bogus\"}", DG_REPORT_TEXT, &out);
    CHECK(has(dg_errmsg(ctx), "not an evidence record") && has(dg_errmsg(ctx), "'bogus'"));
    CHECK(dg_report_render(ctx, sample, (dg_report_format)42, &out) == DG_ERR_USAGE);
    CHECK(dg_report_render(ctx, NULL, DG_REPORT_TEXT, &out) == DG_ERR_USAGE);
    CHECK(dg_report_render(ctx, sample, DG_REPORT_TEXT, NULL) == DG_ERR_USAGE);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

/* Runs cmd through the shell; its stdout into *out (free), the exit status back. */
static int run_cmd(const char *cmd, char **out)
{
    FILE *p = popen(cmd, "r");
    dg_capbuf b = {.cap = 16u << 20};
    char chunk[4096];
    size_t n;
    while (p && (n = fread(chunk, 1, sizeof chunk, p)) > 0)
        dg_capbuf_add(&b, chunk, n);
    int st = p ? pclose(p) : -1;
    *out = b.data;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_ledger(dg_ctx *ctx, const char *sample)
{
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/dg-report-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/ledger.db", dir);
    dg_ledger *lg = NULL;
    char *id = NULL, *entry = NULL;
    CHECK(dg_ledger_open(ctx, path, 0, &lg) == DG_OK);
    CHECK(dg_ledger_record(ctx, lg, "accept", 0, sample, &id) == DG_OK && id);
    CHECK(dg_ledger_show(ctx, lg, id ? id : "none", &entry) == DG_OK);
    dg_ledger_close(lg);
    cJSON *e = cJSON_Parse(entry);
    char *rec = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "record"));
    char *text = rec ? render(ctx, rec, DG_REPORT_TEXT) : NULL;
    CHECK(has(text, "devgate accept · run 20261130-0655-abcd"));
    dg_string_free(text);
    cJSON_free(rec);
    cJSON_Delete(e);
    dg_string_free(entry);

    /* The CLI path: `devgate report RUN_ID` (a prefix too) against this ledger. */
    const char *bin = getenv("DEVGATE_BIN");
    if (bin && id) {
        char cmd[2048], *out = NULL;
        snprintf(cmd, sizeof cmd, "'%s' --ledger '%s' report %.15s --format md", bin, path, id);
        CHECK_MSG(run_cmd(cmd, &out) == 0, "%s", cmd);
        CHECK(has(out, "**warn** retained-refs"));
        dg_free(out);
        snprintf(cmd, sizeof cmd, "'%s' --ledger '%s' report %s -o '%s/pack'", bin, path, id, dir);
        CHECK_MSG(run_cmd(cmd, &out) == 0, "%s", cmd);
        CHECK(has(out, "/pack/report.html"));
        dg_free(out);
        snprintf(cmd, sizeof cmd, "%s/pack/report.html", dir);
        char *html = dg_read_file(cmd, 8u << 20, NULL);
        CHECK(has(html, "<!DOCTYPE html>") && has(html, "retained-refs"));
        dg_free(html);
        snprintf(cmd, sizeof cmd, "'%s' --ledger '%s' report 19990101-000000-0000 2>&1", bin, path);
        CHECK(run_cmd(cmd, &out) == 2);
        CHECK(has(out, "19990101-000000-0000"));
        dg_free(out);
    }
    dg_string_free(id);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* The page's sweep, memory, baseline, profile, fallback and gate sections
 * read the typed view: numbers set in the view alone (the record says
 * otherwise) are the ones the page shows. A section that went back to the
 * record would show the record's. */
static void test_page_reads_view(const char *sample)
{
    cJSON *rec = cJSON_Parse(sample);
    dg_record_view v;
    CHECK(dg_record_view_build(NULL, rec, &v) == DG_OK);
    bool shaped = v.compare.nruns > 0 && v.gate.nbackends > 0 && v.profile.nfallbacks > 0 &&
                  v.soak.nepochs > 0 && v.profile.nops > 0;
    CHECK_MSG(shaped, "the sample lacks a section this test changes");
    if (shaped) {
        v.sweep.safe_batch = (dg_rec_metric){777, "samples", true, false};
        v.compare.runs[0].speedup = (dg_rec_metric){9.87, "x", true, true};
        v.profile.noise = "view-only-noise";
        v.profile.ops[0].op = "view_only_op_row";
        v.profile.census[0].op = "view_only_census_op";
        v.gate.backends[0].matmul.gflops = (dg_rec_metric){4321, "", true, false};
        v.soak.epochs[0].step_ms = (dg_rec_metric){55.5, "ms", true, true};
        dg_capbuf b = {.cap = (size_t)8 << 20};
        dg_rp_render_html(&b, &v);
        const char *page = b.data ? b.data : "";
        CHECK_MSG(strstr(page, "<b>777</b>"), "sweep: the view's safe batch is not shown");
        CHECK_MSG(strstr(page, "9.87"), "baseline: the view's speedup is not shown");
        CHECK_MSG(strstr(page, "view-only-noise"), "profile: the view's noise is not shown");
        CHECK_MSG(strstr(page, "view_only_op_row"), "profile: the view's op table is not shown");
        CHECK_MSG(strstr(page, "view_only_census_op"), "fallbacks: the view's census is not shown");
        CHECK_MSG(strstr(page, "4321"), "gate: the view's GFLOP/s is not shown");
        CHECK_MSG(strstr(page, "55.5"), "memory: the view's epoch step time is not shown");
        dg_free(b.data);
    }
    dg_record_view_free(&v);
    cJSON_Delete(rec);
}

/* The one line a verb's own record gets in the terminal and Markdown forms,
 * for each kind that has one, from hand-made views (a metric left invalid
 * adds nothing). */
static void test_verb_lines(void)
{
    static const char *const kinds[] = {"sweep", "soak", "compare", "profile", "gate", "other"};
    static const char want[] = "knee b64 (1234 samples/s) · safe b32 · stopped at b128: oom\n"
                               "allocated +5%, footprint +12% after 10 epochs\n"
                               "opencl 2.50× cpu at b16 · device 1.10× cpu\n"
                               "step 3.25 ms · 1.50 sync points per step\n"
                               "cpu 9.5 GFLOP/s ok · gpu: built, not available\n"
                               "\n";
    char got[1024] = "";
    const dg_rec_metric none = {NAN, "", false, false};
#define M(x) ((dg_rec_metric){(x), "", true, false})
    dg_view_run runs[2] = {{.device_backend = "opencl", .speedup = M(2.5), .batch = M(16)},
                           {.speedup = M(1.1), .batch = none}};
    dg_view_backend bks[2] = {{.name = "cpu", .built = 1, .available = 1},
                              {.name = "gpu", .built = 1}};
    bks[0].matmul.gflops = M(9.5);
    bks[0].matmul.ok = 1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        dg_record_view v;
        memset(&v, 0, sizeof v);
        v.kind = kinds[i];
        v.sweep.knee_batch = M(64), v.sweep.knee_sps = M(1234), v.sweep.safe_batch = M(32);
        v.sweep.stopped_at = M(128), v.sweep.stopped_reason = "oom";
        for (int m = 0; m < DG_MEM_COUNT; m++)
            v.soak.growth[m] = none;
        v.soak.growth[DG_MEM_ALLOCATOR_ALLOCATED] = M(5), v.soak.growth[DG_MEM_FOOTPRINT] = M(12);
        v.soak.epochs_recorded = M(10);
        v.compare.runs = runs, v.compare.nruns = 2;
        v.profile.step_ms = M(3.25), v.profile.sync_per_step = M(1.5);
        v.gate.backends = bks, v.gate.nbackends = 2;
        char line[256];
        dg_rp_verb_summary(line, sizeof line, &v);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s\n", line);
    }
    CHECK_MSG(!strcmp(got, want), "the verbs' lines:\n%s", got);
#undef M
}

int main(void)
{
    test_verb_lines();
    dg_ctx *ctx = dg_ctx_new();
    char *sample = load_sample();
    size_t live0, peak;
    dg_host_mem_stats(&live0, &peak);
    test_sample_formats(ctx, sample);
    test_hostile(ctx, sample);
    test_null_sections(ctx);
    test_invalid_metrics(ctx, sample);
    test_extreme_numbers(ctx, sample);
    test_threshold_shown(ctx, sample);
    test_nan_prose(ctx, sample);
    test_memory_baseline(ctx, sample);
    test_page_reads_view(sample);
    test_refusals(ctx, sample);
    size_t live1;
    dg_host_mem_stats(&live1, &peak);
    CHECK_MSG(live1 == live0, "host bytes live before %zu, after %zu", live0, live1);
    test_ledger(ctx, sample);
    dg_free(sample);
    dg_ctx_free(ctx);
    CHECK_DONE();
}
