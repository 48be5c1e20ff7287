/* The cpu baseline judged against its hardware (docs/measure.md, "Fair
 * baselines"):
 *  1. the usable cores from fake topologies (fixture directories shaped like /):
 *     16 logical CPUs on 8 SMT cores, an affinity mask of 4 and of two sibling
 *     pairs, a cgroup v2 quota of 2.5 CPUs on a parent cgroup, a v1 quota,
 *     cpuinfo core ids without sysfs, no topology at all, 200 CPUs on 100
 *     cores; and the peak over each (usable cores x this machine's per-core);
 *  2. the cpu thread count: --threads, OMP_NUM_THREADS, the usable cores;
 *  3. cpu-baseline-unfair with a known GEMM rate per case, naming which cause
 *     it is (kernel, threads of the gate or of the fixture, a small GEMM, none
 *     of those) or staying silent on a fair baseline (the SMT host of 16
 *     logical CPUs on 8 cores among them); every "N x cpu" the renders quote
 *     (terminal summary, Markdown, page) names the rule beside it when it fired;
 *  4. the gate on this machine: its cpu GEMM runs on the usable cores, times
 *     a steady-state product, and the peak's figures agree with each other;
 *  5. the cpu team beside busy neighbours: the cores others kept busy from a
 *     fake /proc/stat (only this process's CPUs counted), the team they leave
 *     (tests/cli/test_cpu_neighbour.sh measures it beside a real busy loop). */
#include "core/core.h"
#include "core/json.h"
#include "engine/train.h"
#include "env/cpu_team.h"
#include "env/peak.h"

#include "check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

/* Writes text to root/rel, making the directories on the way. */
static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            CHECK_MSG(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "open %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A fresh fixture root with n CPUs online, core i's siblings i and i + n/2
 * when smt (else each CPU its own core), in sysfs file `file` (NULL: none). */
static void machine(int n, bool smt, const char *file)
{
    if (root[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        CHECK(system(cmd) == 0);
    }
    snprintf(root, sizeof root, "/tmp/dg_cpu_fair_XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    char v[64], rel[128];
    snprintf(v, sizeof v, "0-%d\n", n - 1);
    put("sys/devices/system/cpu/online", v);
    for (int c = 0; file && c < n; c++) {
        int h = n / 2, lo = smt ? c % h : c;
        if (smt)
            snprintf(v, sizeof v, "%d,%d\n", lo, lo + h);
        else
            snprintf(v, sizeof v, "%d\n", c);
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/%s", c, file);
        put(rel, v);
    }
}

static void mask(const char *list)
{
    char v[128];
    snprintf(v, sizeof v, "Name:\ttest\nCpus_allowed:\tffff\nCpus_allowed_list:\t%s\n", list);
    put("proc/self/status", v);
}

static dg_cpu_topo topo_of(void)
{
    dg_cpu_topo t;
    dg_cpu_topo_read(root, &t);
    return t;
}

static void check_topologies(void)
{
    const dg_cpu_peak *self = dg_cpu_peak_get();
    dg_cpu_peak p;

    /* 16 logical CPUs, 8 cores with two threads each, all in the mask. */
    machine(16, true, "thread_siblings_list");
    mask("0-15");
    dg_cpu_topo t = topo_of();
    CHECK(t.online == 16 && t.affinity == 16);
    CHECK_MSG(t.cores == 8 && t.smt == 2, "16/8: cores %d smt %d", t.cores, t.smt);
    CHECK_STR(t.cores_source, "thread_siblings_list");
    CHECK(!isfinite(t.quota_cpus) && t.usable == 8 && t.threads == 8);
    dg_cpu_peak_with_topo(&t, &p);
    CHECK(p.cores == 8 && p.logical == 16);
    CHECK_MSG(fabs(p.gflops - 8 * self->per_core_gflops) < 1e-9, "peak %g, per core %g", p.gflops,
              self->per_core_gflops);

    /* An affinity mask of 4 (one thread of 4 cores), then of two sibling pairs. */
    mask("0-3");
    t = topo_of();
    CHECK_MSG(t.affinity == 4 && t.cores == 4 && t.smt == 1 && t.threads == 4,
              "mask 0-3: %d cpus, %d cores, smt %d, %d threads", t.affinity, t.cores, t.smt,
              t.threads);
    dg_cpu_peak_with_topo(&t, &p);
    CHECK(fabs(p.gflops - 4 * self->per_core_gflops) < 1e-9);
    mask("0,8,1,9");
    t = topo_of();
    CHECK_MSG(t.affinity == 4 && t.cores == 2 && t.smt == 2 && t.threads == 2,
              "mask 0,8,1,9: %d cpus, %d cores, smt %d", t.affinity, t.cores, t.smt);

    /* A cgroup v2 quota of 2.5 CPUs on the parent of this process's cgroup;
     * its own says max. */
    mask("0-15");
    put("proc/self/cgroup", "0::/box/job\n");
    put("sys/fs/cgroup/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/box/cpu.max", "250000 100000\n");
    put("sys/fs/cgroup/box/job/cpu.max", "max 100000\n");
    t = topo_of();
    CHECK_MSG(fabs(t.quota_cpus - 2.5) < 1e-12, "quota %g", t.quota_cpus);
    CHECK_STR(t.quota_file, "/sys/fs/cgroup/box/cpu.max");
    CHECK_MSG(t.cores == 8 && fabs(t.usable - 2.5) < 1e-12 && t.threads == 2,
              "quota 2.5: cores %d usable %g threads %d", t.cores, t.usable, t.threads);
    dg_cpu_peak_with_topo(&t, &p);
    CHECK(fabs(p.gflops - 2.5 * self->per_core_gflops) < 1e-9 && p.usable_cores == 2.5);
    /* A quota above the cores does not raise them. */
    put("sys/fs/cgroup/box/cpu.max", "2000000 100000\n");
    t = topo_of();
    CHECK(t.quota_cpus == 20 && t.usable == 8 && t.threads == 8);
    /* A quota under one CPU still gets one thread. */
    put("sys/fs/cgroup/box/job/cpu.max", "50000 100000\n");
    t = topo_of();
    CHECK(t.usable == 0.5 && t.threads == 1);

    /* cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us. */
    machine(4, false, "core_cpus_list");
    mask("0-3");
    put("proc/self/cgroup", "3:cpu,cpuacct:/docker/abc\n2:memory:/docker/abc\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    t = topo_of();
    CHECK_STR(t.cores_source, "core_cpus_list");
    CHECK_MSG(t.cores == 4 && t.quota_cpus == 1.5 && t.usable == 1.5 && t.threads == 1,
              "v1: cores %d quota %g", t.cores, t.quota_cpus);

    /* No sysfs topology: /proc/cpuinfo's physical id and core id (two
     * packages of two cores, two threads each). */
    machine(8, false, NULL);
    mask("0-7");
    char info[2048] = "";
    for (int c = 0; c < 8; c++) {
        char line[160];
        snprintf(line, sizeof line, "processor\t: %d\nphysical id\t: %d\ncore id\t\t: %d\n\n", c,
                 c / 4, c % 2);
        strcat(info, line);
    }
    put("proc/cpuinfo", info);
    t = topo_of();
    CHECK_STR(t.cores_source, "cpuinfo core id");
    CHECK_MSG(t.cores == 4 && t.smt == 2, "cpuinfo: cores %d smt %d", t.cores, t.smt);

    /* Nothing to tell the cores apart: every logical CPU counted as one. */
    machine(6, false, NULL);
    mask("0-5");
    t = topo_of();
    CHECK(t.cores == 6 && t.smt == 1 && t.threads == 6);
    CHECK(strstr(t.cores_source, "every logical CPU") != NULL);

    /* 200 CPUs on 100 cores: no cap at 64. */
    machine(200, true, "thread_siblings_list");
    mask("0-199");
    t = topo_of();
    CHECK_MSG(t.cores == 100 && t.smt == 2 && t.threads == 100, "200/100: cores %d", t.cores);

    /* A malformed mask falls back to the online CPUs. */
    machine(4, false, "thread_siblings_list");
    mask("zero-three");
    t = topo_of();
    CHECK(t.affinity == 4 && t.cores == 4);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
}

static void check_per_core(void)
{
    const char *src = NULL;
    /* 16 vCPUs on 8 physical cores (SMT on the host, unseen): together they
     * do half of 16 x one core. */
    CHECK(dg_cpu_per_core_choose(200, 1600, 16, 250, &src) == 100);
    CHECK(strstr(src, "together") != NULL);
    /* A lower all-core vector clock: 3.0 of 3.8 GHz. */
    CHECK(fabs(dg_cpu_per_core_choose(243, 16 * 192.0, 16, 250, &src) - 192) < 1e-9);
    /* Within noise of one core's figure: one core's. */
    CHECK(dg_cpu_per_core_choose(200, 16 * 196.0, 16, 250, &src) == 200);
    CHECK(!strcmp(src, "measured: one core's FMA throughput"));
    CHECK(dg_cpu_per_core_choose(200, NAN, 0, 250, &src) == 200);
    /* Nothing measured: the table x clock. */
    CHECK(dg_cpu_per_core_choose(NAN, NAN, 0, 250, &src) == 250);
    CHECK(!strcmp(src, "flops_per_cycle x clock"));
}

/* The loader's default: half the usable cores within 2..8 (H200 host, 16
 * cores: 8, which fed mlp at batch 4096 where 2 left the device waiting). */
static void check_workers(void)
{
    CHECK(dg_train_workers_for(0, 16) == 8);
    CHECK(dg_train_workers_for(0, 10) == 5);
    CHECK(dg_train_workers_for(0, 2) == 2);
    CHECK(dg_train_workers_for(0, 1) == 2);
    CHECK(dg_train_workers_for(0, 128) == 8);
    CHECK(dg_train_workers_for(-1, 16) == 0);
    CHECK(dg_train_workers_for(3, 16) == 3);
    CHECK(dg_train_workers(0) == dg_train_workers_for(0, dg_cpu_topo_get()->threads));
}

static void check_threads(void)
{
    const char *src = NULL;
    unsetenv("OMP_NUM_THREADS");
    CHECK(dg_cpu_threads_resolve(5, &src) == 5 && !strcmp(src, "--threads"));
    CHECK(dg_cpu_threads_resolve(0, &src) == dg_cpu_topo_get()->threads &&
          !strcmp(src, "usable cores"));
    setenv("OMP_NUM_THREADS", "3", 1);
    CHECK(dg_cpu_threads_resolve(0, &src) == 3 && !strcmp(src, "OMP_NUM_THREADS"));
    CHECK(dg_cpu_threads_resolve(2, &src) == 2 && !strcmp(src, "--threads"));
    setenv("OMP_NUM_THREADS", "lots", 1);
    CHECK(dg_cpu_threads_resolve(0, &src) == dg_cpu_topo_get()->threads);
    unsetenv("OMP_NUM_THREADS");
}

/* ---- the rule ---------------------------------------------------------------------- */

static char *healthy_text;

/* The gate's cpu backend of a case: what varies, the rest fixed. */
typedef struct gate_case {
    const char *name;
    double gflops;           /* the checked 512^3 product's rate */
    int rate_side;           /* the rate product's side, 0: none (an older record) */
    double rate_gflops;      /* its rate */
    int threads;             /* matmul.threads, 0: absent (an older record) */
    const char *tsource;     /* matmul.threads_source */
    double fraction;         /* matmul.fraction_of_peak */
    double others;           /* matmul.window.others_cpus */
    int cores, logical;      /* peak.cpu.cores, logical_cpus */
    double usable;           /* peak.cpu.usable_cores, 0: absent (an older record) */
    double per_core;         /* peak.cpu.per_core */
    double peak;             /* peak.fp32 */
    bool generic;            /* blas.generic_kernel */
    int fixture_threads;     /* compare.spec.threads_used, 0: absent */
    const char *contains[3]; /* the title holds each; contains[0] NULL: the rule is silent */
    const char *lacks;       /* the title does not hold it */
    const char *action;      /* the action holds it */
} gate_case;

static const gate_case gate_cases[] = {
    /* The H200 host's record of this session: the older record's fields only. */
    {.name = "512^3 on 16 cores, no rate product",
     .gflops = 652,
     .fraction = 0.0959,
     .cores = 16,
     .logical = 16,
     .peak = 6801,
     .contains = {"small GEMM: 512x512x512 is 17 MFLOP per thread on 16 threads", "652 GFLOP/s",
                  "10%"},
     .lacks = "threads:",
     .action = "steady state"},
    {.name = "the gate's GEMM on 1 thread by OMP_NUM_THREADS",
     .gflops = 150,
     .rate_side = 3072,
     .rate_gflops = 190,
     .threads = 1,
     .tsource = "OMP_NUM_THREADS",
     .fraction = 0.059,
     .cores = 16,
     .logical = 16,
     .usable = 16,
     .per_core = 200,
     .peak = 3200,
     .contains = {"threads: the gate's GEMM ran on 1 thread (OMP_NUM_THREADS) of 16 usable cores",
                  "190 GFLOP/s", "(16 cores x 200 GFLOP/s)"},
     .lacks = "small GEMM",
     .action = "unset OMP_NUM_THREADS (or set it to 16)"},
    {.name = "the fixture on 4 threads of 16",
     .gflops = 900,
     .rate_side = 3072,
     .rate_gflops = 2400,
     .threads = 16,
     .tsource = "usable cores",
     .fraction = 0.75,
     .cores = 16,
     .logical = 16,
     .usable = 16,
     .per_core = 200,
     .peak = 3200,
     .fixture_threads = 4,
     .contains = {"threads: the fixture's cpu baseline runs 4 threads (--threads) on 16 usable "
                  "cores"},
     .lacks = "gate's GEMM",
     .action = "--threads 0 (all 16 usable cores)"},
    {.name = "a fair baseline: 75% of peak on all 16 cores",
     .gflops = 900,
     .rate_side = 3072,
     .rate_gflops = 2400,
     .threads = 16,
     .tsource = "usable cores",
     .fraction = 0.75,
     .cores = 16,
     .logical = 16,
     .usable = 16,
     .per_core = 200,
     .peak = 3200,
     .fixture_threads = 16},
    {.name = "low on a big product with the right kernel and all threads",
     .gflops = 500,
     .rate_side = 3072,
     .rate_gflops = 640,
     .threads = 16,
     .tsource = "usable cores",
     .fraction = 0.2,
     .cores = 16,
     .logical = 16,
     .usable = 16,
     .per_core = 200,
     .peak = 3200,
     .contains = {"neither the kernel's vector width nor the thread count explains it",
                  "3072x3072x3072", "on 16 threads"},
     .lacks = "small GEMM"},
    {.name = "low while other work ran: contended's, not this rule's",
     .gflops = 500,
     .rate_side = 3072,
     .rate_gflops = 640,
     .threads = 16,
     .tsource = "usable cores",
     .fraction = 0.2,
     .others = 3,
     .cores = 16,
     .logical = 16,
     .usable = 16,
     .per_core = 200,
     .peak = 3200},
    {.name = "the generic kernel",
     .gflops = 300,
     .rate_side = 3072,
     .rate_gflops = 400,
     .threads = 16,
     .tsource = "usable cores",
     .fraction = 0.125,
     .cores = 16,
     .logical = 16,
     .usable = 16,
     .per_core = 200,
     .peak = 3200,
     .generic = true,
     .contains = {"kernel: OpenBLAS runs its Prescott kernel (128-bit vectors) on a avx512f CPU"},
     .lacks = "threads:",
     .action = "OPENBLAS_CORETYPE=SkylakeX"},
    {.name = "SMT: 8 threads on 8 cores of 16 logical CPUs is all of them",
     .gflops = 500,
     .rate_side = 2048,
     .rate_gflops = 1100,
     .threads = 8,
     .tsource = "usable cores",
     .fraction = 0.6875,
     .cores = 8,
     .logical = 16,
     .usable = 8,
     .per_core = 200,
     .peak = 1600,
     .fixture_threads = 8},
    {.name = "a quota of 2.5 CPUs: 2 threads are all it advises",
     .gflops = 300,
     .rate_side = 1280,
     .rate_gflops = 400,
     .threads = 2,
     .tsource = "usable cores",
     .fraction = 0.8,
     .cores = 8,
     .logical = 16,
     .usable = 2.5,
     .per_core = 200,
     .peak = 500,
     .fixture_threads = 2},
};

/* Appends a formatted text to buf (size n). */
static void cat(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t n, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, n - used, fmt, ap);
    va_end(ap);
}

static const char metric[] = "{\"value\": %g, \"unit\": \"%s\", \"valid\": true}";

/* The gate backend of a case as JSON text in out (size n). */
static void gate_json(const gate_case *c, char *out, size_t n)
{
    char m[128];
    out[0] = '\0';
    cat(out, n, "{\"name\": \"cpu\", \"built\": true, \"available\": true, \"reason\": null, ");
    cat(out, n, "\"devices\": [], \"matmul\": {\"ok\": true, \"device_index\": 0, ");
    cat(out, n, "\"m\": 512, \"n\": 512, \"k\": 512, \"gflops\": %g, ", c->gflops);
    if (c->rate_side > 0) {
        snprintf(m, sizeof m, metric, c->rate_gflops, "GFLOP/s");
        cat(out, n, "\"rate\": {\"m\": %d, \"n\": %d, \"k\": %d, \"gflops\": %s}, ", c->rate_side,
            c->rate_side, c->rate_side, m);
        cat(out, n, "\"fraction_of\": \"rate\", ");
    }
    if (c->threads > 0)
        cat(out, n, "\"threads\": %d, \"threads_source\": \"%s\", ", c->threads, c->tsource);
    snprintf(m, sizeof m, metric, c->fraction, "fraction");
    cat(out, n, "\"fraction_of_peak\": %s, ", m);
    snprintf(m, sizeof m, metric, c->others, "cpus");
    cat(out, n, "\"window\": {\"others_cpus\": %s}}, ", m);
    snprintf(m, sizeof m, metric, c->peak, "GFLOP/s");
    cat(out, n, "\"peak\": {\"fp32\": %s, \"source\": \"test\", ", m);
    cat(out, n, "\"cpu\": {\"isa\": \"avx512f\", \"cores\": %d, \"logical_cpus\": %d", c->cores,
        c->logical);
    if (c->usable > 0) {
        snprintf(m, sizeof m, metric, c->usable, "cores");
        cat(out, n, ", \"usable_cores\": %s, \"threads_advised\": %d", m, (int)c->usable);
        snprintf(m, sizeof m, metric, c->per_core, "GFLOP/s");
        cat(out, n, ", \"per_core\": %s", m);
    }
    cat(out, n, "}}, \"blas\": {\"library\": \"OpenBLAS\", \"kernel\": \"%s\", ",
        c->generic ? "Prescott" : "Cooperlake");
    snprintf(m, sizeof m, metric, c->generic ? 128.0 : 512.0, "bits");
    cat(out, n, "\"kernel_vector_bits\": %s, \"generic_kernel\": %s, \"fix\": %s}}", m,
        c->generic ? "true" : "false", c->generic ? "\"set OPENBLAS_CORETYPE=SkylakeX\"" : "null");
}

static cJSON *judge(const gate_case *c)
{
    char gate[4096];
    gate_json(c, gate, sizeof gate);
    cJSON *rec = cJSON_Parse(healthy_text), *b = cJSON_Parse(gate);
    CHECK_MSG(rec && b, "%s: the case does not parse: %s", c->name, gate);
    if (!rec || !b) {
        cJSON_Delete(rec);
        cJSON_Delete(b);
        return NULL;
    }
    cJSON *gb = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "gate"), "backends");
    cJSON_ReplaceItemInArray(gb, 0, b);
    cJSON *spec = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "compare"), "spec");
    if (c->fixture_threads > 0) {
        cJSON_AddNumberToObject(spec, "threads_used", c->fixture_threads);
        cJSON_AddStringToObject(spec, "threads_source", "--threads");
    }
    char *text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    dg_ctx *ctx = dg_ctx_new();
    char *out = NULL;
    dg_status st = dg_diagnose(ctx, text, NULL, &out);
    CHECK_MSG(st == DG_OK, "%s: diagnose: %s", c->name, dg_errmsg(ctx));
    cJSON_free(text);
    dg_ctx_free(ctx);
    cJSON *o = out ? cJSON_Parse(out) : NULL;
    dg_string_free(out);
    return o;
}

/* Every "N x cpu" in a render of the record (text, Markdown, HTML) is said with
 * cpu-baseline-unfair on its line when the rule fired, and no render calls a
 * speedup an upper bound when it did not. */
static void check_quotes(const gate_case *c, const cJSON *diag)
{
    cJSON *rec = cJSON_Parse(healthy_text);
    if (!rec)
        return;
    cJSON_ReplaceItemInObject(rec, "findings",
                              cJSON_Duplicate(cJSON_GetObjectItem(diag, "findings"), true));
    cJSON_ReplaceItemInObject(rec, "decision",
                              cJSON_Duplicate(cJSON_GetObjectItem(diag, "decision"), true));
    /* The run as this version records it: its interval and the cpu side's share of
     * peak (the summary's speedup line shows those). */
    cJSON *run = cJSON_GetArrayItem(dg_jpath(rec, "compare.runs"), 0);
    cJSON *ci = cJSON_AddObjectToObject(run, "speedup_ci");
    cJSON_AddItemToObject(ci, "lo", dg_json_metric(2.8, true, "x"));
    cJSON_AddItemToObject(ci, "hi", dg_json_metric(3.2, true, "x"));
    cJSON_AddItemToObject(cJSON_GetObjectItem(run, "cpu"), "fraction_of_peak",
                          dg_json_metric(c->fraction, true, "fraction"));
    char *text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    bool fired = c->contains[0] != NULL;
    static const dg_report_format fmts[] = {DG_REPORT_TEXT, DG_REPORT_MD, DG_REPORT_HTML};
    dg_ctx *ctx = dg_ctx_new();
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        char *out = NULL;
        CHECK_MSG(dg_report_render(ctx, text, fmts[f], &out) == DG_OK, "%s: render: %s", c->name,
                  dg_errmsg(ctx));
        int quoted = 0;
        static const char *const needles[] = {"x cpu", "\xc3\x97 cpu"}; /* x and × */
        for (int k = 0; k < 2; k++)
            for (const char *p = out; p && (p = strstr(p, needles[k])) != NULL; p++) {
                if (p == out || p[-1] < '0' || p[-1] > '9')
                    continue; /* not a ratio */
                quoted++;
                size_t line = strcspn(p, "\n");
                char *l = dg_malloc(line + 1);
                if (!l)
                    break;
                memcpy(l, p, line);
                l[line] = '\0';
                CHECK_MSG(!fired || strstr(l, "cpu-baseline-unfair"),
                          "%s (format %d): unqualified: %.100s", c->name, (int)fmts[f],
                          p - out > 12 ? p - 12 : p);
                dg_free(l);
            }
        CHECK_MSG(quoted > 0 || fmts[f] == DG_REPORT_HTML, "%s (format %d): no N x cpu quoted",
                  c->name, (int)fmts[f]);
        CHECK_MSG(fired || !strstr(out ? out : "", "an upper bound"),
                  "%s (format %d): an upper bound without the rule", c->name, (int)fmts[f]);
        dg_string_free(out);
    }
    dg_ctx_free(ctx);
    cJSON_free(text);
}

static void check_rule(void)
{
    for (size_t i = 0; i < sizeof gate_cases / sizeof gate_cases[0]; i++) {
        const gate_case *c = &gate_cases[i];
        cJSON *out = judge(c);
        const cJSON *f = NULL, *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(out, "findings"))
        {
            const char *id = dg_jstr(it, "id");
            if (id && !strcmp(id, "cpu-baseline-unfair"))
                f = it;
        }
        const char *title = dg_jstr(f, "title"), *action = dg_jstr(f, "action");
        if (getenv("DG_FAIR_VERBOSE"))
            fprintf(stderr, "%s:\n  %s\n  -> %s\n", c->name, title ? title : "(silent)",
                    action ? action : "");
        if (!c->contains[0]) {
            CHECK_MSG(f == NULL, "%s: fired: %s", c->name, title ? title : "");
        } else {
            CHECK_MSG(f != NULL, "%s: did not fire", c->name);
            for (int k = 0; k < 3 && c->contains[k]; k++)
                CHECK_MSG(title && strstr(title, c->contains[k]), "%s: title lacks \"%s\": %s",
                          c->name, c->contains[k], title ? title : "");
            if (c->lacks)
                CHECK_MSG(title && !strstr(title, c->lacks), "%s: title holds \"%s\": %s", c->name,
                          c->lacks, title ? title : "");
            if (c->action)
                CHECK_MSG(action && strstr(action, c->action), "%s: action lacks \"%s\": %s",
                          c->name, c->action, action ? action : "");
        }
        if (out)
            check_quotes(c, out);
        cJSON_Delete(out);
    }
}

/* ---- the gate on this machine ------------------------------------------------------ */

static void check_gate(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_gate_opts go = {.backends = "cpu", .seed = 1};
    char *json = NULL;
    dg_gate_verdict v;
    unsetenv("OMP_NUM_THREADS");
    dg_status st = dg_gate_run(ctx, &go, &json, &v);
    CHECK_MSG(st == DG_OK, "gate: %s", dg_errmsg(ctx));
    dg_ctx_free(ctx);
    cJSON *g = json ? cJSON_Parse(json) : NULL;
    const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "backends"), 0);
    const dg_cpu_topo *t = dg_cpu_topo_get();
    CHECK_MSG(dg_jnum(b, "matmul.threads") == t->threads, "gate threads %g, usable cores %d",
              dg_jnum(b, "matmul.threads"), t->threads);
    CHECK_STR(dg_jstr(b, "matmul.threads_source"), "usable cores");
    /* The team that ran it is the pool asked for, and no OpenBLAS server
     * thread is left to spin beside it (a pthreads OpenBLAS starts one per
     * core at load; the cpu backend shuts them down). */
    /* (OMP_THREAD_LIMIT caps the team: the TSan tier sets it to 1.) */
    const char *lim = getenv("OMP_THREAD_LIMIT");
    int want = t->threads;
    if (lim && atoi(lim) > 0 && atoi(lim) < want)
        want = atoi(lim);
    CHECK_MSG(dg_jnum(b, "matmul.team_threads") == want, "team %g, usable cores %d, wanted %d",
              dg_jnum(b, "matmul.team_threads"), t->threads, want);
    const char *threading = dg_jstr(b, "blas.threading");
    if (threading && !strcmp(threading, "pthreads"))
        CHECK_MSG(
            dg_jbool(b, "blas.server_threads.valid") == 1 && dg_jnum(b, "blas.server_threads") == 0,
            "OpenBLAS server threads alive during the gate: %g", dg_jnum(b, "blas.server_threads"));
    CHECK_MSG(dg_jnum(b, "matmul.rate.m") >= 1024, "rate product %g", dg_jnum(b, "matmul.rate.m"));
    CHECK(dg_jbool(b, "matmul.rate.gflops.valid") == 1 && dg_jnum(b, "matmul.rate.gflops") > 0);
    CHECK_STR(dg_jstr(b, "matmul.fraction_of"), "rate");
    double peak = dg_jnum(b, "peak.fp32"), per = dg_jnum(b, "peak.cpu.per_core");
    double usable = dg_jnum(b, "peak.cpu.usable_cores");
    CHECK_MSG(usable == t->usable && fabs(peak - per * usable) < 1e-6 * peak,
              "peak %g != %g cores x %g", peak, usable, per);
    CHECK(fabs(dg_jnum(b, "matmul.fraction_of_peak") - dg_jnum(b, "matmul.rate.gflops") / peak) <
          1e-9);
    /* The clock is a clock: the old immediate-add chain read 6.6 GHz on
     * Sapphire Rapids. */
    bool cv = dg_jbool(b, "peak.cpu.clock_measured.valid") == 1;
    CHECK(!cv || (dg_jnum(b, "peak.cpu.clock_measured") > 0.2 &&
                  dg_jnum(b, "peak.cpu.clock_measured") < 7.0));
#if defined(__x86_64__)
    const dg_cpu_peak *p = dg_cpu_peak_get();
    if (p->fma && p->vector_bits >= 256) {
        /* The per-core figure is measured: one core's FMA throughput, or,
         * when the cores together fall short of it (hidden SMT, a lower
         * all-core clock, or other work on the other cores: ctest -j2 on a
         * 2-core machine), their figure, never above one core's. One core's
         * agrees with the table x the clock within a factor of two. */
        CHECK(dg_jbool(b, "peak.cpu.fma_measured.valid") == 1);
        const char *ps = dg_jstr(b, "peak.cpu.per_core_source");
        bool one = ps && !strcmp(ps, "measured: one core's FMA throughput");
        bool together =
            ps && !strcmp(ps, "measured: the usable cores' FMA throughput together, per core");
        CHECK_MSG(one || together, "per_core_source %s", ps ? ps : "(none)");
        CHECK(!one || fabs(per - p->fma_measured) < 1e-9 * p->fma_measured);
        CHECK(!together || per < 0.95 * p->fma_measured);
        double table = p->flops_per_cycle * p->ghz;
        CHECK_MSG(p->fma_measured > table / 2 && p->fma_measured < table * 2,
                  "FMA measured %g GFLOP/s, table x clock %g", p->fma_measured, table);
    }
#endif
    if (getenv("DG_FAIR_VERBOSE"))
        fprintf(stderr, "gate: %g GFLOP/s at %g^3 on %g threads; peak %g = %g x %g (%s)\n",
                dg_jnum(b, "matmul.rate.gflops"), dg_jnum(b, "matmul.rate.m"),
                dg_jnum(b, "matmul.threads"), peak, usable, per,
                dg_jstr(b, "peak.cpu.per_core_source"));
    cJSON_Delete(g);
    dg_string_free(json);
}

static void check_team(void)
{
    /* 2 cores: a busy loop beside a static team of 2 shares one, so others are
     * seen at 2/3 of a core: one thread; background noise leaves both. */
    CHECK(dg_cpu_team_size(2, 2, 0) == 2);
    CHECK(dg_cpu_team_size(2, 2, 0.3) == 2);
    CHECK(dg_cpu_team_size(2, 2, 0.67) == 1);
    CHECK(dg_cpu_team_size(2, 2, 1.8) == 1); /* never below one */
    CHECK(dg_cpu_team_size(16, 16, 1.0) == 15);
    CHECK(dg_cpu_team_size(16, 16, 0.4) == 16);
    CHECK(dg_cpu_team_size(16, 16, 5.6) == 10);
    CHECK(dg_cpu_team_size(2, 2.5, 0) == 2); /* never above the team asked */
    CHECK(dg_cpu_team_size(2, 2.5, 1.2) == 1);
    CHECK(dg_cpu_team_size(4, 4, NAN) == 4); /* not yet known */
    CHECK(dg_cpu_team_size(0, 4, 0) == 1);

    /* /proc/stat: busy = user nice system irq softirq steal of the mask's CPUs. */
    machine(4, false, NULL);
    put("proc/stat", "cpu  1000 1000 1000 1000 1000 1000 1000 1000 0 0\n"
                     "cpu0 100 0 100 900 50 0 0 0 0 0\n"
                     "cpu1 300 10 20 100 1000 5 5 60 40 0\n"
                     "cpu2 1 1 1 1 1 1 1 1 1 1\n"
                     "cpu3 7 0 0 0\n"
                     "intr 12345\nctxt 999\nprocs_running 3\n");
    double hz = (double)sysconf(_SC_CLK_TCK), busy = -1;
    CHECK(dg_cpu_busy_s(root, NULL, &busy));
    /* every CPU: cpu0 200, cpu1 400, cpu2 6, cpu3 too short to count */
    CHECK_MSG(fabs(busy - 606 / hz) < 1e-9, "busy %g s", busy);
    cpu_set_t only;
    CPU_ZERO(&only);
    CPU_SET(1, &only);
    CHECK(dg_cpu_busy_s(root, &only, &busy));
    CHECK_MSG(fabs(busy - 400 / hz) < 1e-9, "cpu1 busy %g s", busy);
    CPU_ZERO(&only);
    CPU_SET(7, &only); /* not in the file */
    CHECK(!dg_cpu_busy_s(root, &only, &busy));
    put("proc/stat", "garbage\n");
    CHECK(!dg_cpu_busy_s(root, NULL, &busy));

    /* A team over the fake file: init takes the first look, a step within the
     * interval keeps it; the record says the team asked and where it came from. */
    put("proc/stat", "cpu0 100 0 100 900 50 0 0 0 0 0\ncpu1 100 0 100 900 50 0 0 0 0 0\n");
    unsetenv("OMP_NUM_THREADS");
    dg_cpu_team tm = {.root = root};
    dg_cpu_team_init(&tm, 0);
    CHECK(tm.snap_ok && tm.adaptive && tm.max == dg_cpu_topo_get()->threads);
    CHECK(dg_cpu_team_step(&tm) == tm.max);
    cJSON *j = dg_cpu_team_json(&tm);
    CHECK(dg_jnum(j, "threads_asked") == tm.max && dg_jbool(j, "adaptive") == 1);
    CHECK(dg_jbool(j, "others_busy.valid") == 0); /* no interval measured yet */
    cJSON_Delete(j);
    dg_cpu_team_init(&tm, 3);
    CHECK(!tm.adaptive && tm.max == 3 && !strcmp(tm.source, "--threads"));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    check_team();
    check_topologies();
    check_per_core();
    check_threads();
    check_workers();
    const char *src = getenv("DEVGATE_SRC");
    if (src) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/data/records/healthy.json", src);
        healthy_text = dg_read_file(path, 1 << 20, NULL);
        CHECK_MSG(healthy_text != NULL, "cannot read %s", path);
        if (healthy_text)
            check_rule();
        dg_free(healthy_text);
    } else {
        fprintf(stderr, "DEVGATE_SRC is not set: the rule cases are skipped\n");
    }
    check_gate();
    CHECK_DONE();
}
