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
    bool ok = rp_num(o, path, &x);
    rp_fmt_num(v, sizeof v, ok ? x : 0, ok);
    rp_h_val(b, v);
}

static void sec_close(dg_capbuf *b)
{
    rp_put(b, "</section>\n");
}

/* ---- environment -------------------------------------------------------------- */

static void env_arch(dg_capbuf *b, const cJSON *env)
{
    rp_kv_begin(b, "architecture");
    rp_put(b, "host ");
    rp_h_esc(b, rp_str(env, "arch.host"), "not reported");
    rp_put(b, " · process ");
    rp_h_esc(b, rp_str(env, "arch.process"), "not reported");
    rp_kv_end(b);
    rp_kv_begin(b, "translation");
    const cJSON *tr = rp_get(env, "arch.translated");
    if (cJSON_IsTrue(tr)) {
        rp_put(b, "<b class=\"no\">translated</b> (");
        rp_h_esc(b, rp_str(env, "arch.translation"), "unknown");
        rp_put(b, "): ");
        rp_h_join(b, rp_arr(env, "arch.translation_evidence"), "; ");
    } else {
        rp_put(b, cJSON_IsFalse(tr) ? "native" : "<span class=\"na\">not reported</span>");
    }
    rp_kv_end(b);
    rp_kv_begin(b, "virtualisation");
    const cJSON *vm = rp_get(env, "virtualization.vm");
    rp_put(b, cJSON_IsTrue(vm) ? "VM" : cJSON_IsFalse(vm) ? "no VM" : "VM not reported");
    if (rp_str(env, "virtualization.hypervisor_vendor")) {
        rp_put(b, " (");
        rp_h_esc(b, rp_str(env, "virtualization.hypervisor_vendor"), "");
        rp_put(b, ")");
    }
    if (rp_true(env, "virtualization.container")) {
        rp_put(b, " · container ");
        rp_h_esc(b, rp_str(env, "virtualization.container_kind"), "");
    }
    if (rp_str(env, "virtualization.note")) {
        rp_put(b, "<br><span class=\"note\">");
        rp_h_esc(b, rp_str(env, "virtualization.note"), "");
        rp_put(b, "</span>");
    }
    rp_kv_end(b);
}

static void env_machine(dg_capbuf *b, const cJSON *env)
{
    rp_kv_begin(b, "OS");
    rp_h_esc(b, rp_str(env, "os.name"), "not reported");
    rp_put(b, " · kernel ");
    rp_h_esc(b, rp_str(env, "os.kernel"), "not reported");
    rp_put(b, " · ");
    rp_h_esc(b, rp_str(env, "os.libc"), "libc not reported");
    rp_kv_end(b);
    rp_kv_begin(b, "CPU");
    rp_h_esc(b, rp_str(env, "cpu.model"), "not reported");
    rp_put(b, " · logical cores ");
    h_num(b, env, "cpu.logical_cores");
    rp_put(b, ", usable ");
    h_num(b, env, "cpu.affinity_cores");
    rp_put(b, " · ");
    rp_h_join(b, rp_arr(env, "cpu.simd"), " ");
    rp_kv_end(b);
    rp_kv_begin(b, "memory");
    rp_h_metric(b, env, "memory.total");
    rp_put(b, " total · ");
    rp_h_metric(b, env, "memory.available");
    rp_put(b, " available · swap ");
    rp_h_metric(b, env, "memory.swap_used");
    rp_put(b, " of ");
    rp_h_metric(b, env, "memory.swap_total");
    rp_put(b, " · pressure (some, 10 s) ");
    rp_h_metric(b, env, "memory.pressure.some_avg10");
    rp_put(b, " · cgroup limit ");
    rp_h_metric(b, env, "memory.cgroup_limit");
    rp_kv_end(b);
    rp_kv_begin(b, "load");
    h_num(b, env, "load.avg1");
    rp_put(b, " / ");
    h_num(b, env, "load.avg5");
    rp_put(b, " / ");
    h_num(b, env, "load.avg15");
    rp_put(b, " runnable (1, 5, 15 min)");
    rp_kv_end(b);
    rp_kv_begin(b, "git");
    if (rp_true(env, "git.is_repo")) {
        rp_put(b, "<span class=\"mono\">");
        rp_h_esc(b, rp_str(env, "git.commit"), "no commit");
        rp_put(b, "</span> on ");
        rp_h_esc(b, rp_str(env, "git.branch"), "a detached head");
        rp_put(b, rp_true(env, "git.dirty") ? " · <b>dirty</b>" : "");
    } else {
        rp_put(b, "<span class=\"na\">not a git work tree</span>");
    }
    rp_kv_end(b);
}

static void env_python(dg_capbuf *b, const cJSON *env)
{
    const cJSON *py = rp_obj(env, "python");
    if (!py)
        return;
    rp_kv_begin(b, "python");
    rp_h_esc(b, rp_str(py, "resolved"), rp_str(py, "path") ? "" : "not reported");
    rp_put(b, " · ");
    rp_h_esc(b, rp_str(py, "version"), "version not reported");
    rp_put(b, " · machine ");
    rp_h_esc(b, rp_str(py, "machine"), "not reported");
    const cJSON *m = rp_get(py, "arch_matches_host");
    rp_put(b, cJSON_IsFalse(m) ? " · <b class=\"no\">binary does not match the host</b>" : "");
    rp_put(b, " · torch ");
    rp_h_esc(b, rp_str(py, "torch.version"), "not found");
    double mixed = cJSON_GetArraySize(rp_arr(py, "mixed_extensions"));
    if (mixed > 0)
        rp_printf(b, " · <b class=\"no\">%.0f extension modules of another architecture</b>",
                  mixed);
    rp_kv_end(b);
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
        if (!rp_true(p, "self") && rp_num(p, "cpu_percent", &cpu) && cpu < 1) {
            quiet++;
            continue;
        }
        rp_num(p, "pid", &pid);
        rp_printf(b, "<tr><td class=\"n\">%.0f</td><td>", pid);
        rp_h_esc(b, rp_str(p, "name"), "?");
        rp_put(b, rp_true(p, "self") ? " <span class=\"note\">(devgate)</span>" : "");
        rp_put(b, "</td><td>");
        rp_h_esc(b, rp_str(p, "user"), "");
        rp_put(b, "</td><td class=\"n\">");
        rp_h_metric(b, p, "cpu_percent");
        rp_put(b, "</td><td class=\"n\">");
        rp_h_metric(b, p, "rss");
        rp_put(b, "</td><td class=\"mono wide\">");
        rp_h_esc(b, rp_str(p, "cmdline"), "");
        rp_put(b, "</td></tr>\n");
    }
    return quiet;
}

static void env_processes(dg_capbuf *b, const cJSON *env)
{
    const cJSON *top = rp_arr(env, "processes.top_cpu");
    rp_put(b, "<h3>Busy processes (by CPU");
    double count, ms;
    if (rp_num(env, "processes.count", &count))
        rp_printf(b, ", of %.0f", count);
    if (rp_num(env, "processes.sampled_over_ms", &ms))
        rp_printf(b, ", over %.0f ms", ms);
    rp_put(b, ")</h3>\n");
    if (cJSON_GetArraySize(top) == 0) {
        rp_put(b, "<p class=\"na\">not reported</p>\n");
    } else {
        rp_table_open(b, "<tr><th>pid</th><th>name</th><th>user</th><th>CPU</th><th>RSS</th>"
                         "<th>command line</th></tr>");
        int quiet = process_rows(b, top);
        rp_table_close(b);
        if (quiet)
            rp_printf(b, "<p class=\"note\">%d more of the top %d under 1%% of a core.</p>\n",
                      quiet, cJSON_GetArraySize(top));
    }
    const cJSON *gpu = rp_obj(env, "gpu_processes");
    if (!gpu)
        return;
    rp_put(b, "<p>GPU processes (NVML ");
    rp_h_esc(b, rp_str(gpu, "nvml"), "not reported");
    rp_put(b, ")");
    const cJSON *dev;
    cJSON_ArrayForEach(dev, rp_arr(gpu, "devices"))
    {
        rp_put(b, "<br>");
        rp_h_esc(b, rp_str(dev, "name"), "device");
        rp_put(b, ": ");
        rp_h_metric(b, dev, "memory_used");
        rp_put(b, " of ");
        rp_h_metric(b, dev, "memory_total");
        rp_put(b, " used, ");
        rp_h_metric(b, dev, "utilization_gpu");
        rp_printf(b, " busy, %d processes", cJSON_GetArraySize(rp_arr(dev, "processes")));
        const cJSON *p;
        cJSON_ArrayForEach(p, rp_arr(dev, "processes"))
        {
            double pid = 0;
            rp_num(p, "pid", &pid);
            rp_printf(b, " · %.0f ", pid);
            rp_h_esc(b, rp_str(p, "name"), "?");
            rp_put(b, " ");
            rp_h_metric(b, p, "used_memory");
        }
    }
    rp_put(b, "</p>\n");
}

void rp_sec_environment(dg_capbuf *b, const cJSON *rec)
{
    rp_section_open(b, "environment", "Environment proof");
    const cJSON *env = rp_obj(rec, "env");
    if (!env) {
        rp_section_absent(b, "environment proof");
        sec_close(b);
        return;
    }
    rp_table_open(b, NULL);
    env_arch(b, env);
    env_machine(b, env);
    env_python(b, env);
    rp_table_close(b);
    env_processes(b, env);
    sec_close(b);
}

/* ---- device gate log ---------------------------------------------------------------- */

static void gate_row(dg_capbuf *b, const dg_view_backend *be)
{
    rp_put(b, "<tr><td>");
    rp_h_esc(b, be->name, "?");
    rp_printf(b, "</td><td>%s</td><td>%s</td><td>", be->built == 1 ? "yes" : "no",
              be->available == 1 ? "yes" : "<span class=\"no\">no</span>");
    for (int i = 0; i < be->ndevices; i++) {
        const dg_view_device *d = &be->devices[i];
        rp_put(b, i ? "<br>" : "");
        rp_h_esc(b, d->name, "?");
        rp_put(b, " (");
        rp_h_esc(b, d->vendor, "?");
        rp_put(b, ", ");
        rp_h_view_metric(b, d->memory_total);
        rp_put(b, ")");
    }
    int ok = be->matmul.ok;
    rp_printf(b, "</td><td>%s",
              ok == 1   ? "<span class=\"yes\">✓ ok</span>"
              : ok == 0 ? "<span class=\"no\">✗ failed</span>"
                        : "<span class=\"na\">not run</span>");
    if (be->matmul.reason) {
        rp_put(b, ": ");
        rp_h_esc(b, be->matmul.reason, "");
    }
    if (be->matmul.m.valid && be->matmul.n.valid && be->matmul.k.valid)
        rp_printf(b, " <span class=\"note\">%.0f×%.0f×%.0f</span>", be->matmul.m.value,
                  be->matmul.n.value, be->matmul.k.value);
    const dg_rec_metric cols[] = {be->matmul.max_rel_err, be->matmul.max_err_over_tolerance,
                                  be->matmul.ms_cold, be->matmul.ms_warm, be->matmul.gflops};
    for (int i = 0; i < 5; i++) {
        rp_put(b, "</td><td class=\"n\">");
        rp_h_view_metric(b, cols[i]);
    }
    rp_put(b, "</td></tr>\n");
    if (be->reason) { /* long driver stories get a row of their own */
        rp_put(b, "<tr><td></td><td colspan=\"9\" class=\"note\">not available: ");
        rp_h_esc(b, be->reason, "");
        rp_put(b, "</td></tr>\n");
    }
}

void rp_sec_gate(dg_capbuf *b, const dg_view_gate *gate)
{
    rp_section_open(b, "gate", "Device gate log");
    if (!gate->present) {
        rp_section_absent(b, "device gate log");
        sec_close(b);
        return;
    }
    rp_put(b, "<p>verdict <b>");
    rp_h_esc(b, gate->verdict, "not reported");
    rp_put(b, "</b> · check ");
    rp_h_esc(b, gate->tolerance_model, "not reported");
    rp_put(b, "</p>\n");
    rp_table_open(b, "<tr><th>backend</th><th>built</th><th>available</th><th>devices</"
                     "th><th>matrix product</th>"
                     "<th>max rel err</th><th>err / tolerance</th><th>ms cold</th><th>ms warm</th>"
                     "<th>GFLOP/s</th></tr>");
    for (int i = 0; i < gate->nbackends; i++)
        gate_row(b, &gate->backends[i]);
    rp_table_close(b);
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
        const cJSON *bk = rp_obj(rec, paths[i]);
        if (bk) {
            *from = names[i];
            return bk;
        }
    }
    return NULL;
}

void rp_sec_bucket(dg_capbuf *b, const cJSON *rec)
{
    rp_section_open(b, "bucket", "Input bucket");
    const char *from = NULL;
    const cJSON *bk = find_bucket(rec, &from);
    if (!bk) {
        rp_section_absent(b, "input bucket");
        sec_close(b);
        return;
    }
    rp_printf(b, "<p class=\"note\">from %s</p>\n", from);
    if (!rp_get(bk, "resolutions")) { /* a probe's free-form bucket */
        rp_h_generic(b, bk, 2);
        sec_close(b);
        return;
    }
    rp_table_open(b, NULL);
    rp_kv_begin(b, "id");
    rp_put(b, "<span class=\"mono\">");
    rp_h_esc(b, rp_str(bk, "id"), "not reported");
    rp_put(b, "</span>");
    rp_kv_end(b);
    rp_kv_begin(b, "resolutions");
    const cJSON *r;
    bool first = true;
    cJSON_ArrayForEach(r, rp_arr(bk, "resolutions"))
    {
        double h = 0, w = 0, wt = 0;
        rp_num(r, "h", &h), rp_num(r, "w", &w), rp_num(r, "weight", &wt);
        rp_printf(b, "%s%.0f×%.0f (weight %g)", first ? "" : ", ", h, w, wt);
        first = false;
    }
    rp_kv_end(b);
    rp_kv_begin(b, "augment");
    rp_h_join(b, rp_arr(bk, "augment"), ", ");
    rp_kv_end(b);
    rp_kv_metric(b, "batch", bk, "batch");
    rp_kv_metric(b, "channels", bk, "channels");
    rp_kv_str(b, "normalize", rp_str(bk, "normalize.mode"));
    rp_kv_begin(b, "data set");
    rp_h_esc(b, rp_str(bk, "dataset.kind"), "?");
    rp_put(b, ", ");
    rp_h_metric(b, bk, "dataset.samples");
    rp_put(b, " samples, ");
    rp_h_metric(b, bk, "dataset.classes");
    rp_put(b, " classes, sha256 <span class=\"mono\">");
    rp_h_esc(b, rp_str(bk, "dataset.sha256"), "not reported");
    rp_put(b, "</span>");
    rp_kv_end(b);
    rp_table_close(b);
    sec_close(b);
}

/* ---- seeds, versions, thresholds, pack ------------------------------------------------------ */

void rp_sec_seeds(dg_capbuf *b, const cJSON *rec)
{
    rp_section_open(b, "seeds", "Seeds");
    static const char *const paths[] = {"spec.seed",      "gate.seed",         "sweep.spec.seed",
                                        "soak.spec.seed", "compare.spec.seed", "profile.spec.seed"};
    static const char *const names[] = {"run",  "device gate", "sweep",
                                        "soak", "compare",     "profile"};
    rp_table_open(b, NULL);
    int shown = 0;
    for (int i = 0; i < 6; i++) {
        if (!rp_get(rec, paths[i]))
            continue;
        rp_kv_metric(b, names[i], rec, paths[i]);
        shown++;
    }
    /* A supervised program's seeds, as its probe reported them (run records). */
    const cJSON *sup = rp_obj(rec, "seeds");
    if (sup) {
        rp_kv_begin(b, "supervised run");
        rp_h_generic(b, sup, 1);
        rp_kv_end(b);
        shown++;
    }
    rp_table_close(b);
    if (!shown)
        rp_section_absent(b, "seeds");
    sec_close(b);
}

void rp_sec_versions(dg_capbuf *b, const cJSON *rec)
{
    rp_section_open(b, "versions", "Versions");
    rp_table_open(b, NULL);
    const cJSON *dg = rp_obj(rec, "env.devgate");
    rp_kv_begin(b, "devgate");
    rp_h_esc(b, rp_str(dg, "version"), "not reported");
    rp_put(b, " · commit <span class=\"mono\">");
    rp_h_esc(b, rp_str(dg, "commit"), "not reported");
    rp_put(b, "</span> · ");
    rp_h_esc(b, rp_str(dg, "compiler"), "compiler not reported");
    rp_put(b, " · backends ");
    rp_h_esc(b, rp_str(dg, "backends_built"), "not reported");
    rp_kv_end(b);
    const cJSON *lib;
    cJSON_ArrayForEach(lib, rp_obj(rec, "env.libraries"))
    {
        rp_put(b, "<tr><th>");
        rp_h_esc(b, lib->string, "");
        rp_put(b, "</th><td>");
        rp_h_scalar(b, lib);
        rp_put(b, "</td></tr>\n");
    }
    const cJSON *be;
    cJSON_ArrayForEach(be, rp_arr(rec, "gate.backends"))
    {
        if (!rp_str(be, "versions"))
            continue;
        rp_put(b, "<tr><th>backend ");
        rp_h_esc(b, rp_str(be, "name"), "?");
        rp_put(b, "</th><td>");
        rp_h_esc(b, rp_str(be, "versions"), "");
        rp_put(b, "</td></tr>\n");
    }
    rp_table_close(b);
    sec_close(b);
}

void rp_sec_thresholds(dg_capbuf *b, const cJSON *rec)
{
    rp_section_open(b, "thresholds", "Thresholds the rules used");
    const cJSON *th = rp_obj(rec, "thresholds");
    if (cJSON_GetArraySize(th) == 0) {
        rp_section_absent(b, "thresholds");
        sec_close(b);
        return;
    }
    rp_table_open(b, NULL);
    const cJSON *t;
    cJSON_ArrayForEach(t, th)
    {
        rp_put(b, "<tr><th class=\"mono\">");
        rp_h_esc(b, t->string, "");
        rp_put(b, "</th><td class=\"n\">");
        rp_h_scalar(b, t);
        rp_put(b, "</td></tr>\n");
    }
    rp_table_close(b);
    sec_close(b);
}

void rp_sec_pack(dg_capbuf *b, const cJSON *rec)
{
    const cJSON *pack = rp_obj(rec, "pack");
    if (!pack)
        return;
    rp_section_open(b, "pack", "Evidence pack");
    rp_put(b, "<p><span class=\"mono\">");
    rp_h_esc(b, rp_str(pack, "dir"), "not reported");
    rp_put(b, "</span>: ");
    rp_h_join(b, rp_arr(pack, "files"), ", ");
    rp_put(b, "</p>\n");
    sec_close(b);
}
