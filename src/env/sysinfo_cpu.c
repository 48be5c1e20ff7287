/* Host facts: CPU model, logical/affinity/physical cores, notable SIMD
 * features, frequency governor, the usable cores and FP32 peak (peak.c),
 * and the load average. */
#include "env/peak.h"
#include "env/sysinfo.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __APPLE__
#include <sys/sysctl.h>
#endif

/* ---- CPU ------------------------------------------------------------------------- */

/* Distinct strings seen so far (a small set for core counting). */
typedef struct strset {
    char **items;
    size_t n, cap;
    bool nomem;
} strset;

static void strset_add(strset *s, const char *v)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->items[i], v))
            return;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        char **ni = dg_realloc(s->items, nc * sizeof *ni);
        if (!ni) {
            s->nomem = true;
            return;
        }
        s->items = ni;
        s->cap = nc;
    }
    char *c = dg_strdup(v);
    if (!c) {
        s->nomem = true;
        return;
    }
    s->items[s->n++] = c;
}

static void strset_free(strset *s)
{
    for (size_t i = 0; i < s->n; i++)
        dg_free(s->items[i]);
    dg_free(s->items);
}

size_t dg_si_cores_from_cpuinfo(const char *cpuinfo)
{
    strset s = {0};
    char phys[32] = "0";
    bool have_core = false;
    for (const char *line = cpuinfo; line && *line;) {
        const char *nl = strchr(line, '\n');
        char buf[128];
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        if (ll >= sizeof buf)
            ll = sizeof buf - 1;
        memcpy(buf, line, ll);
        buf[ll] = '\0';
        char val[64];
        if (dg_si_field_of(buf, "processor", val, sizeof val))
            snprintf(phys, sizeof phys, "0");
        else if (dg_si_field_of(buf, "physical id", val, sizeof val))
            snprintf(phys, sizeof phys, "%.31s", val);
        else if (dg_si_field_of(buf, "core id", val, sizeof val)) {
            char key[128];
            snprintf(key, sizeof key, "%s/%s", phys, val);
            strset_add(&s, key);
            have_core = true;
        }
        line = nl ? nl + 1 : NULL;
    }
    size_t n = have_core && !s.nomem ? s.n : 0;
    strset_free(&s);
    return n;
}

/* Physical cores from sysfs topology (distinct core_cpus_list sets); 0 if unknown. */
static size_t cores_from_sysfs(void)
{
    DIR *d = opendir("/sys/devices/system/cpu");
    if (!d)
        return 0;
    strset s = {0};
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "cpu", 3) || !isdigit((unsigned char)de->d_name[3]))
            continue;
        char path[512];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/%s/topology/core_cpus_list",
                 de->d_name);
        char *v = dg_si_read_value(path);
        if (!v) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/%s/topology/thread_siblings_list",
                     de->d_name);
            v = dg_si_read_value(path);
        }
        if (v) {
            char pkg[64], key[400];
            snprintf(path, sizeof path, "/sys/devices/system/cpu/%s/topology/physical_package_id",
                     de->d_name);
            char *p = dg_si_read_value(path);
            snprintf(pkg, sizeof pkg, "%.60s", p ? p : "0");
            dg_free(p);
            snprintf(key, sizeof key, "%s/%.300s", pkg, v);
            strset_add(&s, key);
            dg_free(v);
        }
    }
    closedir(d);
    size_t n = s.nomem ? 0 : s.n;
    strset_free(&s);
    return n;
}

void dg_si_cpu(sb *b, cJSON *root)
{
    cJSON *c = put_obj(b, root, "cpu");
    if (!c)
        return;
    char *cpuinfo = dg_read_file("/proc/cpuinfo", 1u << 22, NULL);
    char model[256] = "";
    if (cpuinfo) {
        char impl[64], part[64];
        if (!dg_si_field_of(cpuinfo, "model name", model, sizeof model) &&
            !dg_si_field_of(cpuinfo, "Hardware", model, sizeof model) &&
            !dg_si_field_of(cpuinfo, "cpu model", model, sizeof model) &&
            dg_si_field_of(cpuinfo, "CPU part", part, sizeof part)) {
            if (dg_si_field_of(cpuinfo, "CPU implementer", impl, sizeof impl))
                snprintf(model, sizeof model, "CPU implementer %s part %s", impl, part);
            else
                snprintf(model, sizeof model, "CPU part %s", part);
        }
    }
#ifdef __APPLE__
    size_t ml = sizeof model;
    if (sysctlbyname("machdep.cpu.brand_string", model, &ml, NULL, 0) != 0)
        model[0] = '\0';
#endif
    put_str(b, c, "model", model[0] ? model : NULL);

    long online = sysconf(_SC_NPROCESSORS_ONLN);
    put_metric(b, c, "logical_cores", (double)online, online > 0, "cores");
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    bool aff = sched_getaffinity(0, sizeof set, &set) == 0;
    put_metric(b, c, "affinity_cores", aff ? (double)CPU_COUNT(&set) : 0, aff, "cores");
#else
    put_metric(b, c, "affinity_cores", 0, false, "cores");
#endif
    size_t phys = cpuinfo ? dg_si_cores_from_cpuinfo(cpuinfo) : 0;
    if (!phys)
        phys = cores_from_sysfs();
#ifdef __APPLE__
    int pc = 0;
    size_t pcl = sizeof pc;
    if (!phys && sysctlbyname("hw.physicalcpu", &pc, &pcl, NULL, 0) == 0 && pc > 0)
        phys = (size_t)pc;
#endif
    put_metric(b, c, "physical_cores", (double)phys, phys > 0, "cores");

    cJSON *simd = put_arr(b, c, "simd");
    static const char *notable[] = {
        "sse2",     "sse4_2",   "avx",         "avx2",        "fma",         "f16c",
        "avx512f",  "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
        "amx_tile", "amx_bf16", "amx_int8",    "neon",        "asimd",       "asimdhp",
        "bf16",     "i8mm",     "sve",         "sve2",        "sme"};
    if (simd && cpuinfo) {
        char flags[8192];
        if (dg_si_field_of(cpuinfo, "flags", flags, sizeof flags) ||
            dg_si_field_of(cpuinfo, "Features", flags, sizeof flags)) {
            for (size_t i = 0; i < sizeof notable / sizeof notable[0]; i++)
                if (dg_si_has_word(flags, notable[i]))
                    push_str(b, simd, notable[i]);
        }
    }
#if defined(__APPLE__) && defined(__aarch64__)
    if (simd)
        push_str(b, simd, "asimd");
#endif
    dg_free(cpuinfo);
    char *gov = dg_si_read_value("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
    put_str(b, c, "cpufreq_governor", gov);
    dg_free(gov);
    /* What a cpu baseline can use and do: the usable cores (affinity, SMT,
     * cgroup quota) and the FP32 peak over them (docs/measure.md). */
    const dg_cpu_peak *pk = dg_cpu_peak_get();
    put_metric(b, c, "usable_cores", pk->usable_cores, isfinite(pk->usable_cores), "cores");
    put(b, c, "peak", dg_cpu_peak_json(pk));
}

/* ---- load ------------------------------------------------------------------------ */

void dg_si_load(sb *b, cJSON *root)
{
    cJSON *l = put_obj(b, root, "load");
    if (!l)
        return;
    double avg[3] = {0, 0, 0};
    bool ok = getloadavg(avg, 3) == 3;
    put_metric(b, l, "avg1", avg[0], ok, "runnable");
    put_metric(b, l, "avg5", avg[1], ok, "runnable");
    put_metric(b, l, "avg15", avg[2], ok, "runnable");
}
