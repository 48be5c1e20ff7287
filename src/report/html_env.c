/* The proof sections at the foot of the report page: environment (arch,
 * translation, VM, OS, CPU, memory, busy processes), the device gate log, the
 * input bucket, seeds, versions, thresholds and the pack's files. */
#include "report/html_env.h"
#include "report/html_write.h"

#include <math.h>
#include <string.h>

/* A number without its unit, or "not reported". */
static void h_num(dg_capbuf *b, const cJSON *o, const char *path)
{
    char v[48];
    double x = 0;
    bool ok = dg_rp_num(o, path, &x);
    dg_rp_fmt_num(v, sizeof v, ok ? x : 0, ok);
    dg_rp_h_val(b, v);
}

static void sec_close(dg_capbuf *b)
{
    dg_rp_put(b, "</section>\n");
}

/* ---- environment -------------------------------------------------------------- */

static void env_arch(dg_capbuf *b, const cJSON *env)
{
    dg_rp_kv_begin(b, "architecture");
    dg_rp_h_fmt(b, "host %S · process %S", dg_rp_str(env, "arch.host"), "not reported",
                dg_rp_str(env, "arch.process"), "not reported");
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "translation");
    const cJSON *tr = dg_rp_get(env, "arch.translated");
    if (cJSON_IsTrue(tr)) {
        dg_rp_put(b, "<b class=\"no\">translated</b> (");
        dg_rp_h_esc(b, dg_rp_str(env, "arch.translation"), "unknown");
        dg_rp_put(b, "): ");
        dg_rp_h_join(b, dg_rp_arr(env, "arch.translation_evidence"), "; ");
    } else {
        dg_rp_put(b, cJSON_IsFalse(tr) ? "native" : "<span class=\"na\">not reported</span>");
    }
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "virtualisation");
    const cJSON *vm = dg_rp_get(env, "virtualization.vm");
    dg_rp_put(b, cJSON_IsTrue(vm) ? "VM" : cJSON_IsFalse(vm) ? "no VM" : "VM not reported");
    if (dg_rp_str(env, "virtualization.hypervisor_vendor")) {
        dg_rp_put(b, " (");
        dg_rp_h_esc(b, dg_rp_str(env, "virtualization.hypervisor_vendor"), "");
        dg_rp_put(b, ")");
    }
    if (dg_rp_true(env, "virtualization.container")) {
        dg_rp_put(b, " · container ");
        dg_rp_h_esc(b, dg_rp_str(env, "virtualization.container_kind"), "");
    }
    if (dg_rp_str(env, "virtualization.note")) {
        dg_rp_put(b, "<br><span class=\"note\">");
        dg_rp_h_esc(b, dg_rp_str(env, "virtualization.note"), "");
        dg_rp_put(b, "</span>");
    }
    dg_rp_kv_end(b);
}

static void env_machine(dg_capbuf *b, const cJSON *env)
{
    dg_rp_kv_begin(b, "OS");
    dg_rp_h_fmt(b, "%S · kernel %S · %S", dg_rp_str(env, "os.name"), "not reported",
                dg_rp_str(env, "os.kernel"), "not reported", dg_rp_str(env, "os.libc"),
                "libc not reported");
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "CPU");
    dg_rp_h_esc(b, dg_rp_str(env, "cpu.model"), "not reported");
    dg_rp_put(b, " · logical cores ");
    h_num(b, env, "cpu.logical_cores");
    dg_rp_put(b, ", usable ");
    h_num(b, env, "cpu.affinity_cores");
    dg_rp_put(b, " · ");
    dg_rp_h_join(b, dg_rp_arr(env, "cpu.simd"), " ");
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "memory");
    dg_rp_h_fmt(
        b, "%P total · %P available · swap %P of %P · pressure (some, 10 s) %P · cgroup limit %P",
        env, "memory.total", env, "memory.available", env, "memory.swap_used", env,
        "memory.swap_total", env, "memory.pressure.some_avg10", env, "memory.cgroup_limit");
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "load");
    h_num(b, env, "load.avg1");
    dg_rp_put(b, " / ");
    h_num(b, env, "load.avg5");
    dg_rp_put(b, " / ");
    h_num(b, env, "load.avg15");
    dg_rp_put(b, " runnable (1, 5, 15 min)");
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "git");
    if (dg_rp_true(env, "git.is_repo")) {
        dg_rp_h_fmt(b, "<span class=\"mono\">%S</span> on %S", dg_rp_str(env, "git.commit"),
                    "no commit", dg_rp_str(env, "git.branch"), "a detached head");
        dg_rp_put(b, dg_rp_true(env, "git.dirty") ? " · <b>dirty</b>" : "");
    } else {
        dg_rp_put(b, "<span class=\"na\">not a git work tree</span>");
    }
    dg_rp_kv_end(b);
}

static void env_python(dg_capbuf *b, const cJSON *env)
{
    const cJSON *py = dg_rp_obj(env, "python");
    if (!py)
        return;
    dg_rp_kv_begin(b, "python");
    dg_rp_h_esc(b, dg_rp_str(py, "resolved"), dg_rp_str(py, "path") ? "" : "not reported");
    dg_rp_h_fmt(b, " · %S · machine %S", dg_rp_str(py, "version"), "version not reported",
                dg_rp_str(py, "machine"), "not reported");
    const cJSON *m = dg_rp_get(py, "arch_matches_host");
    dg_rp_put(b, cJSON_IsFalse(m) ? " · <b class=\"no\">binary does not match the host</b>" : "");
    dg_rp_put(b, " · torch ");
    dg_rp_h_esc(b, dg_rp_str(py, "torch.version"), "not found");
    double mixed = cJSON_GetArraySize(dg_rp_arr(py, "mixed_extensions"));
    if (mixed > 0)
        dg_rp_printf(b, " · <b class=\"no\">%.0f extension modules of another architecture</b>",
                     mixed);
    dg_rp_kv_end(b);
}

/* Rows of the processes that used at least 1% of a core (and devgate itself);
 * returns how many were left out. */
static int process_rows(dg_capbuf *b, const cJSON *procs)
{
    const cJSON *p;
    int quiet = 0;
    cJSON_ArrayForEach(p, procs)
    {
        double pid = 0, cpu;
        if (!dg_rp_true(p, "self") && dg_rp_num(p, "cpu_percent", &cpu) && cpu < 1) {
            quiet++;
            continue;
        }
        dg_rp_num(p, "pid", &pid);
        dg_rp_printf(b, "<tr><td class=\"n\">%.0f</td><td>", pid);
        dg_rp_h_esc(b, dg_rp_str(p, "name"), "?");
        dg_rp_put(b, dg_rp_true(p, "self") ? " <span class=\"note\">(devgate)</span>" : "");
        dg_rp_h_fmt(b,
                    "</td><td>%S</td><td class=\"n\">%P</td><td class=\"n\">%P</td><td "
                    "class=\"mono wide\">%S</td></tr>\n",
                    dg_rp_str(p, "user"), "", p, "cpu_percent", p, "rss", dg_rp_str(p, "cmdline"),
                    "");
    }
    return quiet;
}

static void env_processes(dg_capbuf *b, const cJSON *env)
{
    const cJSON *top = dg_rp_arr(env, "processes.top_cpu");
    dg_rp_put(b, "<h3>Busy processes (by CPU");
    double count, ms;
    if (dg_rp_num(env, "processes.count", &count))
        dg_rp_printf(b, ", of %.0f", count);
    if (dg_rp_num(env, "processes.sampled_over_ms", &ms))
        dg_rp_printf(b, ", over %.0f ms", ms);
    dg_rp_put(b, ")</h3>\n");
    if (cJSON_GetArraySize(top) == 0) {
        dg_rp_put(b, "<p class=\"na\">not reported</p>\n");
    } else {
        dg_rp_table_open(b, "<tr><th>pid</th><th>name</th><th>user</th><th>CPU</th><th>RSS</th>"
                            "<th>command line</th></tr>");
        int quiet = process_rows(b, top);
        dg_rp_table_close(b);
        if (quiet)
            dg_rp_printf(b, "<p class=\"note\">%d more of the top %d under 1%% of a core.</p>\n",
                         quiet, cJSON_GetArraySize(top));
    }
    const cJSON *gpu = dg_rp_obj(env, "gpu_processes");
    if (!gpu)
        return;
    dg_rp_put(b, "<p>GPU processes (NVML ");
    dg_rp_h_esc(b, dg_rp_str(gpu, "nvml"), "not reported");
    dg_rp_put(b, ")");
    const cJSON *dev;
    cJSON_ArrayForEach(dev, dg_rp_arr(gpu, "devices"))
    {
        dg_rp_h_fmt(b, "<br>%S: %P of %P used, %P", dg_rp_str(dev, "name"), "device", dev,
                    "memory_used", dev, "memory_total", dev, "utilization_gpu");
        dg_rp_printf(b, " busy, %d processes", cJSON_GetArraySize(dg_rp_arr(dev, "processes")));
        const cJSON *p;
        cJSON_ArrayForEach(p, dg_rp_arr(dev, "processes"))
        {
            double pid = 0;
            dg_rp_num(p, "pid", &pid);
            dg_rp_printf(b, " · %.0f ", pid);
            dg_rp_h_esc(b, dg_rp_str(p, "name"), "?");
            dg_rp_put(b, " ");
            dg_rp_h_metric(b, p, "used_memory");
        }
    }
    dg_rp_put(b, "</p>\n");
}

void dg_rp_sec_environment(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *env = dg_rp_obj(rec, "env");
    if (!dg_rp_section(b, "environment", "Environment proof", env != NULL, "environment proof"))
        return;
    dg_rp_table_open(b, NULL);
    env_arch(b, env);
    env_machine(b, env);
    env_python(b, env);
    dg_rp_table_close(b);
    env_processes(b, env);
    sec_close(b);
}

/* ---- device gate log ---------------------------------------------------------------- */

static void gate_row(dg_capbuf *b, const dg_view_backend *be)
{
    dg_rp_put(b, "<tr><td>");
    dg_rp_h_esc(b, be->name, "?");
    dg_rp_printf(b, "</td><td>%s</td><td>%s</td><td>", be->built == 1 ? "yes" : "no",
                 be->available == 1 ? "yes" : "<span class=\"no\">no</span>");
    for (int i = 0; i < be->ndevices; i++) {
        const dg_view_device *d = &be->devices[i];
        dg_rp_put(b, i ? "<br>" : "");
        dg_rp_h_fmt(b, "%S (%S, %M)", d->name, "?", d->vendor, "?", d->memory_total);
    }
    int ok = be->matmul.ok;
    dg_rp_printf(b, "</td><td>%s",
                 ok == 1   ? "<span class=\"yes\">✓ ok</span>"
                 : ok == 0 ? "<span class=\"no\">✗ failed</span>"
                           : "<span class=\"na\">not run</span>");
    dg_rp_opt(b, ESC_HTML, ": ", be->matmul.reason, "");
    if (be->matmul.m.valid && be->matmul.n.valid && be->matmul.k.valid)
        dg_rp_printf(b, " <span class=\"note\">%.0f×%.0f×%.0f</span>", be->matmul.m.value,
                     be->matmul.n.value, be->matmul.k.value);
    const dg_rec_metric cols[] = {be->matmul.max_rel_err, be->matmul.max_err_over_tolerance,
                                  be->matmul.ms_cold, be->matmul.ms_warm, be->matmul.gflops};
    for (int i = 0; i < 5; i++) {
        dg_rp_put(b, "</td><td class=\"n\">");
        dg_rp_h_view_metric(b, cols[i]);
    }
    dg_rp_put(b, "</td></tr>\n");
    if (be->reason) { /* long driver stories get a row of their own */
        dg_rp_put(b, "<tr><td></td><td colspan=\"9\" class=\"note\">not available: ");
        dg_rp_h_esc(b, be->reason, "");
        dg_rp_put(b, "</td></tr>\n");
    }
}

/* Gate level 2: a backend's per-op table (op, backend, precision, shape,
 * output, NMSE, tolerance, verdict), open when a row failed. */
static void ops_table(dg_capbuf *b, const dg_view_backend *be)
{
    const dg_view_ops *o = &be->ops;
    if (!o->present)
        return;
    char c[32], f[32];
    dg_rp_fmt_view_metric(c, sizeof c, o->checked);
    dg_rp_fmt_view_metric(f, sizeof f, o->failed);
    bool bad = o->failed.valid && o->failed.value > 0;
    dg_rp_printf(b, "<details%s><summary>", bad ? " open" : "");
    dg_rp_h_esc(b, be->name, "a backend");
    dg_rp_printf(b, ": every op against float64, %s outputs checked, %s over tolerance", c, f);
    if (o->has_worst) {
        dg_rp_h_fmt(b, "; worst %S %S NMSE %M (tolerance %M)", o->worst.op, "?", o->worst.output,
                    "?", o->worst.nmse, o->worst.tolerance);
    }
    dg_rp_put(b, "</summary>\n");
    dg_rp_table_open(b, "<tr><th>op</th><th>backend</th><th>precision</th><th>shape</th>"
                        "<th>output</th><th>NMSE</th><th>tolerance</th><th>verdict</th></tr>");
    for (int i = 0; i < o->nrows; i++) {
        const dg_view_op_row *r = &o->rows[i];
        const char *const cells[] = {r->op, r->backend, r->precision, r->shape, r->output};
        dg_rp_put(b, "<tr>");
        for (int k = 0; k < 5; k++) {
            dg_rp_put(b, k == 3 ? "<td class=\"mono\">" : "<td>");
            dg_rp_h_esc(b, cells[k], "");
            dg_rp_put(b, "</td>");
        }
        dg_rp_h_fmt(b, "<td class=\"n\">%M</td><td class=\"n\">%M</td><td>", r->nmse, r->tolerance);
        bool fail = r->verdict && (!strcmp(r->verdict, "fail") || !strcmp(r->verdict, "error"));
        dg_rp_put(b, fail ? "<b>" : "");
        dg_rp_h_esc(b, r->verdict, "not reported");
        dg_rp_opt(b, ESC_HTML, ": ", r->reason, "");
        dg_rp_put(b, fail ? "</b></td></tr>\n" : "</td></tr>\n");
    }
    dg_rp_table_close(b);
    dg_rp_put(b, "</details>\n");
}

/* Gate level 2: a backend's host-device copies against the link's rating. */
static void link_line(dg_capbuf *b, const dg_view_backend *be)
{
    const dg_view_link *l = &be->link;
    if (!l->present)
        return;
    dg_rp_put(b, "<p>");
    dg_rp_h_esc(b, be->name, "a backend");
    dg_rp_put(b, " link: ");
    for (int k = 0; k < DG_LINK_WAYS; k++) {
        dg_rp_printf(b, "%s%s ", k ? " · " : "", dg_link_way_names[k]);
        dg_rp_h_view_metric(b, l->gbps[k]);
    }
    dg_rp_put(b, " · rated ");
    dg_rp_h_view_metric(b, l->rated);
    dg_rp_opt(b, ESC_HTML, " (", l->kind, ")");
    dg_rp_put(b, l->ok == 1 ? " · ok" : l->ok == 0 ? " · <b>slow or failed</b>" : " · not judged");
    dg_rp_opt(b, ESC_HTML, ": ", l->reason, "");
    dg_rp_put(b, "</p>\n");
}

/* Gate level 3: a backend's sustained load, its drift, health and memory. */
static void sustain_line(dg_capbuf *b, const dg_view_backend *be)
{
    const dg_view_sustain *s = &be->sustain;
    if (!s->present)
        return;
    dg_rp_h_fmt(b,
                "<p>%S sustained load: %M at %M (of peak %M) · last third over first %M (95%% "
                "%M–%M): %S · clocks %M–%M · up to %M · power %M mean · energy %M",
                be->name, "a backend", s->wall, s->rate, s->fraction_of_peak, s->ratio, s->ratio_lo,
                s->ratio_hi, s->verdict, "not judged", s->sm_min, s->sm_max, s->temp_max,
                s->power_mean, s->energy);
    for (int k = 0; k < s->nthrottle; k++) {
        dg_rp_put(b, k ? ", " : " · throttle ");
        dg_rp_h_esc(b, s->throttle[k].reason, "?");
        dg_rp_put(b, " ");
        dg_rp_h_view_metric(b, s->throttle[k].seconds);
    }
    if (s->membw_present) {
        dg_rp_h_fmt(b, " · memory %M of %M rated", s->membw, s->membw_rated);
    }
    dg_rp_put(b, "</p>\n");
}

void dg_rp_sec_gate(dg_capbuf *b, const dg_view_gate *gate)
{
    if (!dg_rp_section(b, "gate", "Device gate log", gate->present, "device gate log"))
        return;
    dg_rp_h_fmt(b, "<p>verdict <b>%S</b> · check %S</p>\n", gate->verdict, "not reported",
                gate->tolerance_model, "not reported");
    dg_rp_table_open(b,
                     "<tr><th>backend</th><th>built</th><th>available</th><th>devices</"
                     "th><th>matrix product</th>"
                     "<th>max rel err</th><th>err / tolerance</th><th>ms cold</th><th>ms warm</th>"
                     "<th>GFLOP/s</th></tr>");
    for (int i = 0; i < gate->nbackends; i++)
        gate_row(b, &gate->backends[i]);
    dg_rp_table_close(b);
    for (int i = 0; i < gate->nbackends; i++) {
        ops_table(b, &gate->backends[i]);
        link_line(b, &gate->backends[i]);
        sustain_line(b, &gate->backends[i]);
    }
    if (gate->reference_ok != -1)
        dg_rp_printf(b,
                     "<p class=\"note\">the float64 reference's gradients %s its own finite "
                     "differences (docs/rules.md, op tolerances)</p>\n",
                     gate->reference_ok == 1 ? "agree with" : "<b>disagree with</b>");
    sec_close(b);
}

/* ---- input bucket --------------------------------------------------------------------- */

static const cJSON *find_bucket(const cJSON *rec, const char **from)
{
    static const char *const paths[] = {"bucket", "soak.bucket", "profile.bucket",
                                        "supervise.bucket"};
    static const char *const names[] = {"the record", "the soak", "the profile",
                                        "the supervised run"};
    for (int i = 0; i < 4; i++) {
        const cJSON *bk = dg_rp_obj(rec, paths[i]);
        if (bk) {
            *from = names[i];
            return bk;
        }
    }
    return NULL;
}

void dg_rp_sec_bucket(dg_capbuf *b, const cJSON *rec)
{
    dg_rp_section_open(b, "bucket", "Input bucket");
    const char *from = NULL;
    const cJSON *bk = find_bucket(rec, &from);
    if (!bk) {
        dg_rp_section_absent(b, "input bucket");
        sec_close(b);
        return;
    }
    dg_rp_printf(b, "<p class=\"note\">from %s</p>\n", from);
    if (!dg_rp_get(bk, "resolutions")) { /* a probe's free-form bucket */
        dg_rp_h_generic(b, bk, 2);
        sec_close(b);
        return;
    }
    dg_rp_table_open(b, NULL);
    dg_rp_kv_begin(b, "id");
    dg_rp_put(b, "<span class=\"mono\">");
    dg_rp_h_esc(b, dg_rp_str(bk, "id"), "not reported");
    dg_rp_put(b, "</span>");
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "resolutions");
    const cJSON *r;
    bool first = true;
    cJSON_ArrayForEach(r, dg_rp_arr(bk, "resolutions"))
    {
        double h = 0, w = 0, wt = 0;
        dg_rp_num(r, "h", &h), dg_rp_num(r, "w", &w), dg_rp_num(r, "weight", &wt);
        dg_rp_printf(b, "%s%.0f×%.0f (weight %g)", first ? "" : ", ", h, w, wt);
        first = false;
    }
    dg_rp_kv_end(b);
    dg_rp_kv_begin(b, "augment");
    dg_rp_h_join(b, dg_rp_arr(bk, "augment"), ", ");
    dg_rp_kv_end(b);
    dg_rp_kv_metric(b, "batch", bk, "batch");
    dg_rp_kv_metric(b, "channels", bk, "channels");
    dg_rp_kv_str(b, "normalize", dg_rp_str(bk, "normalize.mode"));
    dg_rp_kv_begin(b, "data set");
    dg_rp_h_fmt(b, "%S, %P samples, %P classes, sha256 <span class=\"mono\">%S</span>",
                dg_rp_str(bk, "dataset.kind"), "?", bk, "dataset.samples", bk, "dataset.classes",
                dg_rp_str(bk, "dataset.sha256"), "not reported");
    dg_rp_kv_end(b);
    dg_rp_table_close(b);
    sec_close(b);
}

/* ---- seeds, versions, thresholds, pack ------------------------------------------------------ */

void dg_rp_sec_seeds(dg_capbuf *b, const cJSON *rec)
{
    dg_rp_section_open(b, "seeds", "Seeds");
    static const char *const paths[] = {"spec.seed",      "gate.seed",         "sweep.spec.seed",
                                        "soak.spec.seed", "compare.spec.seed", "profile.spec.seed"};
    static const char *const names[] = {"run",  "device gate", "sweep",
                                        "soak", "compare",     "profile"};
    dg_rp_table_open(b, NULL);
    int shown = 0;
    for (int i = 0; i < 6; i++) {
        if (!dg_rp_get(rec, paths[i]))
            continue;
        dg_rp_kv_metric(b, names[i], rec, paths[i]);
        shown++;
    }
    /* A supervised program's seeds, as its probe reported them (run records). */
    const cJSON *sup = dg_rp_obj(rec, "seeds");
    if (sup) {
        dg_rp_kv_begin(b, "supervised run");
        dg_rp_h_generic(b, sup, 1);
        dg_rp_kv_end(b);
        shown++;
    }
    dg_rp_table_close(b);
    if (!shown)
        dg_rp_section_absent(b, "seeds");
    sec_close(b);
}

void dg_rp_sec_versions(dg_capbuf *b, const cJSON *rec)
{
    dg_rp_section_open(b, "versions", "Versions");
    dg_rp_table_open(b, NULL);
    const cJSON *dg = dg_rp_obj(rec, "env.devgate");
    dg_rp_kv_begin(b, "devgate");
    dg_rp_h_fmt(b, "%S · commit <span class=\"mono\">%S</span> · %S · backends %S",
                dg_rp_str(dg, "version"), "not reported", dg_rp_str(dg, "commit"), "not reported",
                dg_rp_str(dg, "compiler"), "compiler not reported", dg_rp_str(dg, "backends_built"),
                "not reported");
    dg_rp_kv_end(b);
    const cJSON *lib;
    cJSON_ArrayForEach(lib, dg_rp_obj(rec, "env.libraries"))
    {
        dg_rp_row_begin(b, "<tr><th>", lib->string, "</th><td>");
        dg_rp_h_scalar(b, lib);
        dg_rp_kv_end(b);
    }
    const cJSON *be;
    cJSON_ArrayForEach(be, dg_rp_arr(rec, "gate.backends"))
    {
        if (!dg_rp_str(be, "versions"))
            continue;
        dg_rp_row_begin(b, "<tr><th>backend ", dg_rp_str(be, "name"), "</th><td>");
        dg_rp_h_esc(b, dg_rp_str(be, "versions"), "");
        dg_rp_kv_end(b);
    }
    dg_rp_table_close(b);
    sec_close(b);
}

void dg_rp_sec_thresholds(dg_capbuf *b, const cJSON *rec)
{
    dg_rp_section_open(b, "thresholds", "Thresholds the rules used");
    const cJSON *th = dg_rp_obj(rec, "thresholds");
    if (cJSON_GetArraySize(th) == 0) {
        dg_rp_section_absent(b, "thresholds");
        sec_close(b);
        return;
    }
    dg_rp_table_open(b, NULL);
    const cJSON *t;
    cJSON_ArrayForEach(t, th)
    {
        dg_rp_row_begin(b, "<tr><th class=\"mono\">", t->string, "</th><td class=\"n\">");
        dg_rp_h_scalar(b, t);
        dg_rp_kv_end(b);
    }
    dg_rp_table_close(b);
    sec_close(b);
}

void dg_rp_sec_pack(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *pack = dg_rp_obj(rec, "pack");
    if (!pack)
        return;
    dg_rp_section_open(b, "pack", "Evidence pack");
    dg_rp_h_fmt(b, "<p><span class=\"mono\">%S</span>: ", dg_rp_str(pack, "dir"), "not reported");
    dg_rp_h_join(b, dg_rp_arr(pack, "files"), ", ");
    dg_rp_put(b, "</p>\n");
    sec_close(b);
}
