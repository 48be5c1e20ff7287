/* The slo record's page sections (html_slo.h): the ladder (a table and a
 * chart of each bound's percentile against the concurrency, the bound drawn
 * in), the per-request latency distribution of the signed level (or the
 * last one), and training beside serving. Read through the typed slo view. */
#include "report/html_slo.h"
#include "core/record_slo.h"
#include "report/html_write.h"
#include "report/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void cell_num(dg_capbuf *b, double v, const char *fmt)
{
    if (isfinite(v))
        dg_rp_printf(b, fmt, v);
    else
        dg_rp_put(b, "<span class=\"na\">-</span>");
}

static void level_label(dg_capbuf *b, const dg_view_slo_level *l)
{
    if (isfinite(l->concurrency))
        dg_rp_printf(b, "%.0f", l->concurrency);
    else
        cell_num(b, l->rate, "%.4g/s");
    if (l->beside)
        dg_rp_put(b, " beside training");
}

static void levels_table(dg_capbuf *b, const dg_view_slo *s, const dg_view_slo_level *lv, int n)
{
    char pn[16];
    snprintf(pn, sizeof pn, "p%.4g", s->percentile);
    char head[1024];
    snprintf(head, sizeof head,
             "<tr><th>streams</th><th>sent</th><th>ok</th><th>failed</th><th>timeouts</th>"
             "<th>req/s</th><th>goodput</th><th>TTFT p50</th><th>TTFT %s [95%%]</th>"
             "<th>TPOT %s</th><th>ITL %s</th><th>E2E %s</th><th>steady</th><th>verdict</th></tr>",
             pn, pn, pn, pn);
    dg_rp_table_open(b, head);
    for (int i = 0; i < n; i++) {
        const dg_view_slo_level *l = &lv[i];
        dg_rp_put(b, "<tr><td>");
        level_label(b, l);
        const double counts[4] = {l->sent, l->ok, l->failed, l->timeouts};
        for (int k = 0; k < 4; k++) {
            dg_rp_put(b, "</td><td>");
            cell_num(b, counts[k], "%.0f");
        }
        dg_rp_put(b, "</td><td>");
        cell_num(b, l->requests_per_s, "%.2f");
        dg_rp_put(b, "</td><td>");
        cell_num(b, l->goodput, "%.2f");
        dg_rp_put(b, "</td><td>");
        cell_num(b, l->lat[DG_SLO_TTFT].p50, "%.1f ms");
        dg_rp_put(b, "</td><td>");
        cell_num(b, l->lat[DG_SLO_TTFT].pslo, "%.1f ms");
        if (isfinite(l->lat[DG_SLO_TTFT].lo))
            dg_rp_printf(b, " [%.1f-%.1f]", l->lat[DG_SLO_TTFT].lo, l->lat[DG_SLO_TTFT].hi);
        static const dg_slo_metric rest[] = {DG_SLO_TPOT, DG_SLO_ITL, DG_SLO_E2E};
        for (int k = 0; k < 3; k++) {
            dg_rp_put(b, "</td><td>");
            cell_num(b, l->lat[rest[k]].pslo, "%.1f ms");
        }
        dg_rp_put(b, "</td><td>");
        dg_rp_h_esc(b, l->steady, "-");
        bool pass = l->verdict && !strcmp(l->verdict, "pass");
        dg_rp_printf(b, "</td><td class=\"%s\">", pass ? "yes" : "no");
        dg_rp_h_esc(b, l->verdict, "-");
        dg_rp_put(b, "</td></tr>\n");
    }
    dg_rp_table_close(b);
    /* Each bound's verdict in LoadGen's words. */
    dg_rp_put(b, "<ul class=\"note\">\n");
    for (int i = 0; i < n; i++) {
        const cJSON *bd;
        cJSON_ArrayForEach(bd, dg_rp_arr(lv[i].raw, "verdict.bounds"))
        {
            dg_rp_put(b, "<li>");
            level_label(b, &lv[i]);
            dg_rp_put(b, " · ");
            dg_rp_h_esc(b, dg_rp_str(bd, "metric"), "?");
            dg_rp_put(b, ": ");
            dg_rp_h_esc(b, dg_rp_str(bd, "text"), "");
            dg_rp_put(b, "</li>\n");
        }
        /* The engine's own view (--metrics): queueing or compute. */
        const cJSON *e = dg_rp_obj(lv[i].raw, "engine");
        if (e) {
            char w[32], wm[32], r[32], kv[32], tk[32];
            dg_rp_fmt_metric_at(w, sizeof w, e, "queue_waiting");
            dg_rp_fmt_metric_at(wm, sizeof wm, e, "queue_waiting_max");
            dg_rp_fmt_metric_at(r, sizeof r, e, "running");
            dg_rp_fmt_metric_at(kv, sizeof kv, e, "kv_cache_max");
            dg_rp_fmt_metric_at(tk, sizeof tk, e, "tokens_per_s");
            dg_rp_put(b, "<li>");
            level_label(b, &lv[i]);
            dg_rp_printf(b,
                         " · engine: %s waiting on average (at most %s), %s running, KV cache "
                         "at most %s, %s</li>\n",
                         w, wm, r, kv, tk);
        }
    }
    dg_rp_put(b, "</ul>\n");
}

/* The ladder chart: each bound's percentile against the concurrency. */
static void ladder_chart(dg_capbuf *b, const dg_view_slo *s)
{
    cJSON *pts = cJSON_CreateArray();
    for (int i = 0; pts && i < s->nlevels; i++) {
        const dg_view_slo_level *l = &s->levels[i];
        if (!isfinite(l->concurrency))
            continue;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "c", l->concurrency);
        for (int m = 0; m < DG_SLO_NMETRICS; m++)
            if (isfinite(l->lat[m].pslo))
                cJSON_AddNumberToObject(p, dg_slo_metric_name((dg_slo_metric)m), l->lat[m].pslo);
        cJSON_AddItemToArray(pts, p);
    }
    /* Levels ran in search order (find-max bisects): the chart goes left to right. */
    int n = cJSON_GetArraySize(pts);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            cJSON *a = cJSON_GetArrayItem(pts, j - 1), *c = cJSON_GetArrayItem(pts, j);
            if (dg_jnum(a, "c") <= dg_jnum(c, "c"))
                break;
            cJSON_DetachItemViaPointer(pts, c);
            cJSON_InsertItemInArray(pts, j - 1, c);
        }
    char title[64], ylabel[96], ref[96];
    snprintf(title, sizeof title, "p%.4g latency against concurrency", s->percentile);
    snprintf(ylabel, sizeof ylabel, "p%.4g latency (ms)", s->percentile);
    rp_svg_chart c = {.title = title,
                      .xkey = "c",
                      .xlabel = "concurrent streams",
                      .ylabel = ylabel,
                      .unit = RP_UNIT_COUNT,
                      .x_integer = true,
                      .ref = NAN};
    if (s->nbounds > 0) {
        c.ref = s->bounds[0].limit_s * 1e3;
        snprintf(ref, sizeof ref, "bound: %s ≤ %.4g ms", dg_slo_metric_name(s->bounds[0].metric),
                 c.ref);
        c.ref_label = ref;
    }
    static const rp_svg_line lines[] = {{"ttft", "TTFT", "#0969da", false},
                                        {"tpot", "TPOT", "#bc4c00", false},
                                        {"itl", "ITL", "#8250df", true},
                                        {"e2e", "E2E", "#1a7f37", false}};
    dg_rp_put(b, "<h3>The ladder</h3>\n");
    if (n < 1 || dg_rp_svg_lines(b, &c, pts, lines, 4) == 0)
        dg_rp_put(b, "<p class=\"na\">not reported: no closed-loop level with a latency</p>\n");
    cJSON_Delete(pts);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The latency distribution of level l: the share of its requests at or
 * below each latency (TTFT and E2E), from the samples the record keeps. */
static void distribution(dg_capbuf *b, const dg_view_slo *s, const dg_view_slo_level *l)
{
    const cJSON *samples = dg_rp_arr(l->raw, "samples");
    int n = cJSON_GetArraySize(samples);
    static const char *const keys[2] = {"ttft_ms", "e2e_ms"};
    double *v[2] = {NULL, NULL};
    int k[2] = {0, 0};
    for (int m = 0; m < 2; m++) {
        v[m] = malloc((size_t)(n > 0 ? n : 1) * sizeof *v[m]);
        const cJSON *e;
        cJSON_ArrayForEach(e, samples)
        {
            double x;
            if (v[m] && dg_rp_num(e, keys[m], &x) && isfinite(x))
                v[m][k[m]++] = x;
        }
        if (v[m])
            qsort(v[m], (size_t)k[m], sizeof *v[m], cmp_double);
    }
    /* One point per step of either curve; a missing member breaks a line. */
    cJSON *pts = cJSON_CreateArray();
    for (int m = 0; m < 2 && pts; m++)
        for (int i = 0; i < k[m]; i++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "x", v[m][i]);
            cJSON_AddNumberToObject(p, m ? "e2e" : "ttft", 100.0 * (i + 1) / k[m]);
            cJSON_AddItemToArray(pts, p);
        }
    free(v[0]);
    free(v[1]);
    dg_rp_put(b, "<h3>Latency distribution at ");
    level_label(b, l);
    dg_rp_put(b, isfinite(l->concurrency) ? " streams" : "");
    double stride = dg_jnum(l->raw, "samples_stride");
    dg_rp_printf(b, "</h3>\n<p class=\"note\">%d requests of the measured window", n);
    if (stride > 1)
        dg_rp_printf(b, " (every %.0fth kept in the record)", stride);
    dg_rp_put(b, "; a failed or timed-out request has no latency and is not on the curves, but "
                 "counts as over every bound.</p>\n");
    char ref[64];
    rp_svg_chart c = {.title = "share of requests at or below each latency",
                      .xkey = "x",
                      .xlabel = "latency (ms)",
                      .ylabel = "requests at or below (%)",
                      .unit = RP_UNIT_PERCENT,
                      .ref = s->percentile};
    snprintf(ref, sizeof ref, "p%.4g", s->percentile);
    c.ref_label = ref;
    static const rp_svg_line lines[] = {{"ttft", "TTFT", "#0969da", false},
                                        {"e2e", "E2E", "#1a7f37", false}};
    if (!pts || dg_rp_svg_lines(b, &c, pts, lines, 2) == 0)
        dg_rp_put(b, "<p class=\"na\">not reported: no request of the window ended ok</p>\n");
    cJSON_Delete(pts);
}

static void beside(dg_capbuf *b, const dg_view_slo *s)
{
    if (!s->beside_json)
        return;
    dg_rp_put(b, "<h3>Training beside serving</h3>\n");
    dg_rp_table_open(b, NULL);
    dg_rp_kv_begin(b, "command");
    dg_rp_put(b, "<span class=\"mono\">");
    dg_rp_command(b, ESC_HTML, dg_rp_arr(s->beside_json, "command"));
    dg_rp_put(b, "</span>");
    dg_rp_kv_end(b);
    dg_rp_kv_metric(b, "training step alone", s->beside_json, "alone.step_ms");
    dg_rp_kv_metric(b, "training step beside serving", s->beside_json, "beside.step_ms");
    dg_rp_kv_metric(b, "training slowdown", s->beside_json, "slowdown");
    dg_rp_kv_metric(b, "overlap", s->beside_json, "overlap");
    dg_rp_kv_metric(b, "peak memory alone", s->beside_json, "alone.rss_peak");
    dg_rp_kv_metric(b, "peak memory beside", s->beside_json, "beside.rss_peak");
    dg_rp_kv_metric(b, "training CPU alone", s->beside_json, "alone.cpu");
    dg_rp_kv_metric(b, "training CPU beside", s->beside_json, "beside.cpu");
    dg_rp_table_close(b);
    if (s->nbeside > 0) {
        dg_rp_put(b, "<p class=\"note\">The SLO measured with the training running:</p>\n");
        levels_table(b, s, s->beside, s->nbeside);
    }
}

void dg_rp_sec_slo(dg_capbuf *b, const dg_record_view *v)
{
    dg_view_slo s;
    if (!v->section[DG_SEC_SLO] || !dg_view_slo_build(&s, v->section[DG_SEC_SLO])) {
        if (v->section[DG_SEC_SLO])
            b->nomem = true;
        return;
    }
    dg_rp_section_open(b, "slo", "Concurrency SLO");
    dg_rp_put(b, "<p><b>");
    dg_rp_prose(b, ESC_HTML, s.statement, "no statement recorded");
    dg_rp_put(b, "</b></p>\n<p class=\"note\">endpoint <span class=\"mono\">");
    dg_rp_h_esc(b, s.target, "?");
    dg_rp_put(b, "</span> · ");
    if (s.fixture_backend) {
        dg_rp_put(b, "devgate's fixture served on ");
        dg_rp_h_esc(b, s.fixture_backend, "?");
        if (s.fixture_device) {
            dg_rp_put(b, " (");
            dg_rp_h_esc(b, s.fixture_device, "?");
            dg_rp_put(b, ")");
        }
        dg_rp_printf(b, ", batch %.0f, its server ", s.fixture_batch);
        dg_rp_h_esc(b, s.fixture_ended, "?");
        dg_rp_put(b, " · ");
    }
    dg_rp_h_esc(b, s.api, "?");
    dg_rp_put(b, " · model ");
    dg_rp_h_esc(b, s.model, "?");
    dg_rp_put(b, " · ");
    dg_rp_h_esc(b, s.mode, "?");
    dg_rp_printf(b, " loop · LoadGen's rule at p%.4g with %.4g%% confidence</p>\n", s.percentile,
                 s.confidence * 100);
    levels_table(b, &s, s.levels, s.nlevels);
    ladder_chart(b, &s);
    /* The distribution of the signed level, else of the last one measured. */
    const dg_view_slo_level *pick = s.nlevels ? &s.levels[s.nlevels - 1] : NULL;
    for (int i = 0; i < s.nlevels; i++)
        if (s.signed_ == 1 && s.levels[i].concurrency == s.signed_concurrency)
            pick = &s.levels[i];
    if (pick)
        distribution(b, &s, pick);
    beside(b, &s);
    dg_rp_put(b, "</section>\n");
    dg_view_slo_free(&s);
}
