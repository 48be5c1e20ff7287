/* The run page's "Sampled series" section: one chart per series of the
 * supervise section (docs/events.md, SUPERVISE.series) and one of the probe's
 * per-epoch memory (the run record's soak epochs), each with units on both
 * axes; a series with no valid point reads "not reported" and why. */
#include "report/html_run.h"
#include "report/html_write.h"
#include "report/svg.h"

#include <math.h>
#include <string.h>

/* The chart, or "NAME: not reported (why)" when no line had a point. */
static void chart_or_absent(dg_capbuf *b, const rp_svg_chart *c, const cJSON *pts,
                            const rp_svg_line *lines, int n, const char *name, const char *why,
                            const char *why_record)
{
    dg_rp_printf(b, "<h3>%s</h3>\n", name);
    if (dg_rp_svg_lines(b, c, pts, lines, n) > 0)
        return;
    dg_rp_put(b, "<p class=\"na\">not reported: ");
    dg_rp_put(b, why);
    dg_rp_opt(b, ESC_HTML, " (", why_record, ")");
    dg_rp_put(b, "</p>\n");
}

static void series_charts(dg_capbuf *b, const cJSON *sup)
{
    const cJSON *ser = dg_rp_arr(sup, "series");
    const char *none = cJSON_GetArraySize(ser) == 0
                           ? "the record holds no sampled point of the process tree"
                           : "no sample held a value";
    rp_svg_chart c = {.xkey = "t", .xlabel = "time since the start (s)", .ref = NAN};
    c.title = "Resident memory of the process tree against time";
    c.ylabel = "RSS, summed over the process tree (bytes)";
    c.unit = RP_UNIT_BYTES;
    rp_svg_line rss = {"rss", "process-tree RSS", "#bc4c00", false};
    chart_or_absent(b, &c, ser, &rss, 1, "Process-tree memory (RSS)", none, NULL);

    c.title = "CPU use of the process tree against time";
    c.ylabel = "CPU, percent of one core (user + system over the tree)";
    c.unit = RP_UNIT_PERCENT;
    double cores;
    char ref[64];
    if (dg_rp_num(sup, "samples.cores", &cores) && cores >= 1 && cores < 1e5) {
        c.ref = 100 * cores;
        snprintf(ref, sizeof ref, "all %.0f cores devgate may use", cores);
        c.ref_label = ref;
    }
    rp_svg_line cpu = {"cpu_pct", "CPU % of one core", "#0969da", false};
    chart_or_absent(b, &c, ser, &cpu, 1, "CPU use", none, NULL);
    c.ref = NAN;
    c.ref_label = NULL;

    c.title = "Threads and processes of the tree against time";
    c.ylabel = "threads, processes (count)";
    c.unit = RP_UNIT_COUNT;
    rp_svg_line tp[] = {{"threads", "threads", "#8250df", false},
                        {"procs", "processes", "#1a7f37", true}};
    chart_or_absent(b, &c, ser, tp, 2, "Threads and processes", none, NULL);

    c.title = "Machine swap in use against time";
    c.ylabel = "swap in use on the machine (bytes)";
    c.unit = RP_UNIT_BYTES;
    rp_svg_line sw = {"swap", "machine swap in use", "#57606a", false};
    chart_or_absent(b, &c, ser, &sw, 1, "Swap", "swap use was not readable", NULL);

    const char *src = dg_rp_str(sup, "samples.gpu_source");
    bool nvml = src && strcmp(src, "nvml") == 0;
    c.title = "GPU memory of the tree's processes against time";
    c.ylabel = "GPU memory of the tree's processes (bytes, NVML)";
    rp_svg_line gm = {"gpu_mem", "GPU memory", "#cf222e", false};
    chart_or_absent(b, &c, ser, &gm, 1, "GPU memory",
                    nvml ? "NVML listed no process of the tree on a GPU" : "no GPU sampler",
                    nvml ? NULL : (src ? src : "samples.gpu_source absent"));

    c.title = "GPU utilisation against time";
    c.ylabel = "GPU utilisation, percent (NVML, the busiest device the tree uses)";
    c.unit = RP_UNIT_PERCENT;
    rp_svg_line gu = {"gpu_util", "GPU utilisation", "#9a6700", false};
    chart_or_absent(b, &c, ser, &gu, 1, "GPU utilisation",
                    nvml ? "no device the tree used reported its utilisation (or the record "
                           "predates the series)"
                         : "no GPU sampler",
                    nvml ? NULL : (src ? src : "samples.gpu_source absent"));
}

static void epoch_chart(dg_capbuf *b, const cJSON *soak)
{
    const cJSON *epochs = dg_rp_arr(soak, "epochs");
    rp_svg_chart c = {.title = "The probe's memory figures at each epoch end",
                      .xkey = "epoch",
                      .xlabel = "epoch",
                      .ylabel = "memory at the epoch end (bytes)",
                      .unit = RP_UNIT_BYTES,
                      .x_integer = true,
                      .ref = NAN};
    rp_svg_line l[] = {{"allocated", "allocator allocated", "#0969da", false},
                       {"reserved", "allocator reserved", "#8250df", false},
                       {"driver_used", "driver", "#bc4c00", false},
                       {"rss", "process footprint", "#1a7f37", false},
                       {"rss_peak", "tree RSS peak (sampled)", "#57606a", true}};
    chart_or_absent(b, &c, epochs, l, 5, "Per-epoch memory (the probe)",
                    soak ? "no epoch_end event carried a memory figure"
                         : "the program sent no epoch_end event (no probe, or no training epoch "
                           "seen)",
                    NULL);
}

void dg_rp_sec_run_series(dg_capbuf *b, const dg_record_view *v)
{
    const cJSON *sup = v->section[DG_SEC_SUPERVISE];
    if (!sup)
        return;
    dg_rp_section_open(b, "series", "Sampled series");
    double count = 0, stored = 0, ms = 0;
    bool hc = dg_rp_num(sup, "samples.count", &count),
         hs = dg_rp_num(sup, "samples.stored", &stored);
    bool hm = dg_rp_num(v->rec, "spec.sample_ms", &ms);
    dg_rp_put(b, "<p class=\"note\">");
    if (hc)
        dg_rp_printf(b, "%.0f samples of the process tree", count);
    else
        dg_rp_put(b, "samples of the process tree: <span class=\"na\">not reported</span>");
    if (hm)
        dg_rp_printf(b, ", one every %.0f ms", ms);
    if (hs)
        dg_rp_printf(b, "; %.0f stored", stored);
    dg_rp_printf(b,
                 "; %d points per series in the record (each the maximum of sizes and counts, "
                 "the mean CPU and the last swap over its bucket of samples).</p>\n",
                 cJSON_GetArraySize(dg_rp_arr(sup, "series")));
    series_charts(b, sup);
    epoch_chart(b, v->section[DG_SEC_SOAK]);
    dg_rp_put(b, "</section>\n");
}
