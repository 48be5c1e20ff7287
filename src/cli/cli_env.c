/* devgate env: the environment proof as a table, or the record with --json. */
#include "cli.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *yesno(const cJSON *v)
{
    return cJSON_IsTrue(v) ? "yes" : cJSON_IsFalse(v) ? "no" : "not reported";
}

static void row(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void row(const char *label, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  %-14s ", label);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
}

static void print_processes(const cJSON *list, const char *title, bool cpu)
{
    printf("\n  %s\n", title);
    const cJSON *p;
    int n = 0;
    cJSON_ArrayForEach(p, list)
    {
        char rss[32];
        fmt_bytes(rss, sizeof rss, cJSON_GetObjectItem(p, "rss"));
        char cpustr[32];
        cli_metric(cpustr, sizeof cpustr, p, "cpu_percent", "%.1f%%", "not reported");
        printf("    %7.0f  %-16.16s %8s  %10s  %.60s\n", jnum(p, "pid", 0), jstr(p, "name", "?"),
               cpu ? cpustr : rss, cpu ? rss : cpustr, jstr(p, "cmdline", ""));
        n++;
    }
    if (!n)
        printf("    none reported\n");
}

static void print_python(const cJSON *py)
{
    printf("\n  python %s\n", jstr(py, "path", "?"));
    const cJSON *run = cJSON_GetObjectItem(py, "run");
    row("run", "%s%s%s", jstr(run, "status", "?"), jstr(run, "error", "")[0] ? ": " : "",
        jstr(run, "error", ""));
    const cJSON *bin = cJSON_GetObjectItem(py, "binary");
    char arch[96] = "";
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(bin, "arch"))
    {
        if (arch[0])
            strncat(arch, "+", sizeof arch - strlen(arch) - 1);
        strncat(arch, a->valuestring ? a->valuestring : "?", sizeof arch - strlen(arch) - 1);
    }
    row("binary", "%s %s, matches host: %s",
        jstr(bin, "format", jstr(py, "binary_error", "unreadable")), arch,
        yesno(cJSON_GetObjectItem(py, "arch_matches_host")));
    row("version", "%s", jstr(py, "version", "not reported"));
    const cJSON *t = cJSON_GetObjectItem(py, "torch");
    if (cJSON_IsObject(t))
        row("torch", "%s · cuda available %s (%g devices) · mps built %s, available %s",
            jstr(t, "version", "?"), yesno(cJSON_GetObjectItem(t, "cuda_available")),
            jnum(t, "cuda_device_count", 0), yesno(cJSON_GetObjectItem(t, "mps_built")),
            yesno(cJSON_GetObjectItem(t, "mps_available")));
    else
        row("torch", "not importable");
    const cJSON *mixed = cJSON_GetObjectItem(py, "mixed_extensions");
    row("extensions", "%g scanned, %d of another architecture", jnum(py, "extensions_scanned", 0),
        cJSON_GetArraySize(mixed));
    const cJSON *m;
    cJSON_ArrayForEach(m, mixed) printf("    mixed: %s\n", jstr(m, "path", "?"));
}

void cli_env_print(const cJSON *r)
{
    const cJSON *arch = cJSON_GetObjectItem(r, "arch");
    const cJSON *virt = cJSON_GetObjectItem(r, "virtualization");
    const cJSON *os = cJSON_GetObjectItem(r, "os");
    const cJSON *cpu = cJSON_GetObjectItem(r, "cpu");
    const cJSON *mem = cJSON_GetObjectItem(r, "memory");
    const cJSON *load = cJSON_GetObjectItem(r, "load");
    const cJSON *git = cJSON_GetObjectItem(r, "git");
    const cJSON *dg = cJSON_GetObjectItem(r, "devgate");
    printf("devgate env · %s · %s\n\n", jstr(r, "host", "?"), jstr(r, "timestamp", "?"));
    bool translated = cJSON_IsTrue(cJSON_GetObjectItem(arch, "translated"));
    row("architecture", "%s process on %s host, %s%s", jstr(arch, "process", "?"),
        jstr(arch, "host", "?"), translated ? "TRANSLATED: " : "native",
        translated ? jstr(arch, "translation", "?") : "");
    bool vm = cJSON_IsTrue(cJSON_GetObjectItem(virt, "vm"));
    bool ct = cJSON_IsTrue(cJSON_GetObjectItem(virt, "container"));
    row("virtualization", "%s%s%s", vm ? "virtual machine" : "no VM",
        ct ? ", container " : ", no container", ct ? jstr(virt, "container_kind", "?") : "");
    if (vm || ct)
        row("", "%s", jstr(virt, "note", ""));
    row("os", "%s · kernel %s · libc %s", jstr(os, "name", "?"), jstr(os, "kernel", "?"),
        jstr(os, "libc", "?"));
    char phys[32];
    cli_metric(phys, sizeof phys, cpu, "physical_cores", "%.0f", "not reported");
    char simd[256] = "";
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(cpu, "simd"))
    {
        if (f->valuestring && strlen(simd) + strlen(f->valuestring) + 2 < sizeof simd) {
            strcat(simd, simd[0] ? " " : "");
            strcat(simd, f->valuestring);
        }
    }
    char logical[32];
    cli_metric(logical, sizeof logical, cpu, "logical_cores", "%.0f", "not reported");
    row("cpu", "%s · %s physical / %s logical cores", jstr(cpu, "model", "?"), phys, logical);
    row("simd", "%s", simd[0] ? simd : "none reported");
    char total[32], avail[32], swt[32], swu[32], psi[64];
    fmt_bytes(total, sizeof total, cJSON_GetObjectItem(mem, "total"));
    fmt_bytes(avail, sizeof avail, cJSON_GetObjectItem(mem, "available"));
    fmt_bytes(swt, sizeof swt, cJSON_GetObjectItem(mem, "swap_total"));
    fmt_bytes(swu, sizeof swu, cJSON_GetObjectItem(mem, "swap_used"));
    cli_metric(psi, sizeof psi, cJSON_GetObjectItem(mem, "pressure"), "some_avg10",
               "%.2f%% some (10 s)", "not reported");
    row("memory", "%s total, %s available · swap %s used of %s · pressure %s", total, avail, swu,
        swt, psi);
    char l1[16], l5[16], l15[16];
    cli_metric(l1, sizeof l1, load, "avg1", "%.2f", "not reported");
    cli_metric(l5, sizeof l5, load, "avg5", "%.2f", "not reported");
    cli_metric(l15, sizeof l15, load, "avg15", "%.2f", "not reported");
    row("load", "%s %s %s", l1, l5, l15);
    row("devgate", "%s (commit %s) built by %s · backends %s", jstr(dg, "version", "?"),
        jstr(dg, "commit", "?"), jstr(dg, "compiler", "?"), jstr(dg, "backends_built", "?"));
    const cJSON *libs = cJSON_GetObjectItem(r, "libraries");
    row("libraries", "OpenBLAS %s · SQLite %s", jstr(libs, "openblas", "?"),
        jstr(libs, "sqlite", "?"));
    const cJSON *is_repo = cJSON_GetObjectItem(git, "is_repo");
    if (cJSON_IsTrue(is_repo))
        row("git", "%.12s%s", jstr(git, "commit", "commit not reported"),
            cJSON_IsTrue(cJSON_GetObjectItem(git, "dirty")) ? " (dirty)" : "");
    else if (cJSON_IsFalse(is_repo))
        row("git", "not a git checkout");
    else
        row("git", "not reported: %s", jstr(git, "error", "git did not answer"));

    printf("\n  backends\n");
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItem(r, "backends"))
    {
        bool avail_b = cJSON_IsTrue(cJSON_GetObjectItem(b, "available"));
        printf("    %-8s built %-3s available %-3s %s\n", jstr(b, "name", "?"),
               yesno(cJSON_GetObjectItem(b, "built")), avail_b ? "yes" : "no",
               avail_b ? jstr(b, "versions", "") : jstr(b, "reason", ""));
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(b, "devices"))
        {
            char dm[32];
            fmt_bytes(dm, sizeof dm, cJSON_GetObjectItem(d, "memory_total"));
            printf("             #%g %s (%s) · %s\n", jnum(d, "index", 0), jstr(d, "name", "?"),
                   jstr(d, "vendor", "?"), dm);
        }
    }
    const cJSON *procs = cJSON_GetObjectItem(r, "processes");
    print_processes(cJSON_GetObjectItem(procs, "top_cpu"), "busiest processes by CPU", true);
    print_processes(cJSON_GetObjectItem(procs, "top_mem"), "largest processes by memory", false);
    const cJSON *gpu = cJSON_GetObjectItem(r, "gpu_processes");
    printf("\n  gpu processes  NVML %s\n", jstr(gpu, "nvml", "?"));
    const cJSON *dev;
    cJSON_ArrayForEach(dev, cJSON_GetObjectItem(gpu, "devices"))
    {
        printf("    gpu %g %s: %d processes\n", jnum(dev, "index", 0), jstr(dev, "name", "?"),
               cJSON_GetArraySize(cJSON_GetObjectItem(dev, "processes")));
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(dev, "processes"))
        {
            char used[32];
            fmt_bytes(used, sizeof used, cJSON_GetObjectItem(p, "used_memory"));
            printf("      %7.0f %-16s %s\n", jnum(p, "pid", 0), jstr(p, "name", "?"), used);
        }
    }
    const cJSON *py = cJSON_GetObjectItem(r, "python");
    if (py)
        print_python(py);
}

const cli_opt cli_env_opts[] = {
    {CLI_STR, "--python", NULL, "PATH", "none", NULL, "a Python interpreter to inspect",
     offsetof(dg_env_opts, python), 0, 0, NULL, NULL, NULL},
    {CLI_DOUBLE, "--python-timeout", NULL, "S", "60", "s", "limit for running it",
     offsetof(dg_env_opts, python_timeout_s), ABOVE_ZERO, 3600, NULL, NULL, NULL},
    CLI_OPTS_END,
};

dg_status cli_env_run(dg_ctx *ctx, void *o, cli_progress *p, char **json, int *verdict)
{
    (void)p;
    *verdict = EXIT_PASS;
    return dg_env_run(ctx, o, json);
}
