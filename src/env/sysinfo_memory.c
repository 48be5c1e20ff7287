/* Host facts: memory and swap (/proc/meminfo), memory pressure (PSI), the
 * cgroup memory limit (v2, then v1). */
#include "env/sysinfo.h"

#include <stdlib.h>
#include <string.h>

#ifdef __APPLE__
#include <sys/sysctl.h>
#endif

/* ---- memory ---------------------------------------------------------------------- */

#ifndef __APPLE__
bool dg_si_meminfo_bytes(const char *text, const char *key, double *out)
{
    char val[64];
    if (!text || !dg_si_field_of(text, key, val, sizeof val))
        return false;
    char *end;
    unsigned long long kb = strtoull(val, &end, 10);
    if (end == val)
        return false;
    *out = (double)kb * 1024.0;
    return true;
}
#endif

/* Smallest numeric limit found in the files named `file` of the cgroup dir
 * base+path and its ancestors. 1: found, 0: only "no limit" seen, -1: none. */
static int cgroup_walk(const char *base, const char *path, const char *file, double *limit)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    int res = -1;
    for (;;) {
        char fpath[1200];
        snprintf(fpath, sizeof fpath, "%s%s/%s", base, strcmp(p, "/") ? p : "", file);
        char *v = dg_si_read_value(fpath);
        if (v) {
            char *end;
            unsigned long long n = strtoull(v, &end, 10);
            /* cgroup v1 writes "no limit" as a page-rounded LONG_MAX. */
            if (end != v && *end == '\0' && n < (1ULL << 62)) {
                if (res < 1 || (double)n < *limit)
                    *limit = (double)n;
                res = 1;
            } else if (res < 0) {
                res = 0;
            }
            dg_free(v);
        }
        char *slash = strrchr(p, '/');
        if (!slash || (slash == p && p[1] == '\0'))
            break;
        if (slash == p)
            p[1] = '\0';
        else
            *slash = '\0';
    }
    return res;
}

/* memory.cgroup_limit and its note, cgroup v2 first, then v1. */
bool dg_si_psi_avgs(const char *psi, const char *which, double *a10, double *a60)
{
    bool ok = false;
    for (const char *line = psi; line && *line;) {
        const char *nl = strchr(line, '\n');
        if (!strncmp(line, which, 4) && line[4] == ' ') {
            const char *s10 = strstr(line, "avg10="), *s60 = strstr(line, "avg60=");
            if (s10 && s60 && (!nl || (s10 < nl && s60 < nl))) {
                *a10 = strtod(s10 + 6, NULL);
                *a60 = strtod(s60 + 6, NULL);
                ok = true;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return ok;
}

void dg_si_cgroup_paths(char *cg, char *v2path, size_t n2, bool *v2, char *v1path, size_t n1,
                        bool *v1)
{
    for (char *line = cg; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c1 && c2) {
            *c2 = '\0';
            const char *ctrls = c1 + 1;
            if (!strncmp(line, "0:", 2) && !ctrls[0]) {
                snprintf(v2path, n2, "%s", c2 + 1);
                *v2 = true;
            } else {
                char tmp[256];
                snprintf(tmp, sizeof tmp, "%s", ctrls);
                for (char *t = tmp; *t; t++)
                    if (*t == ',')
                        *t = ' ';
                if (dg_si_has_word(tmp, "memory")) {
                    snprintf(v1path, n1, "%s", c2 + 1);
                    *v1 = true;
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
}

static void add_cgroup_limit(sb *b, cJSON *mem)
{
    double limit = 0;
    int found = -1;
    const char *note = "no cgroup memory controller found";
    char *cg = dg_read_file("/proc/self/cgroup", 1u << 16, NULL);
    if (cg) {
        char v2path[1024] = "", v1path[1024] = "";
        bool v2 = false, v1 = false;
        dg_si_cgroup_paths(cg, v2path, sizeof v2path, &v2, v1path, sizeof v1path, &v1);
        dg_free(cg);
        if (v2) {
            found = cgroup_walk("/sys/fs/cgroup", v2path, "memory.max", &limit);
            if (found == 1)
                note = "cgroup v2 memory.max";
            else if (found == 0)
                note = "cgroup v2 memory.max: no limit";
        }
        if (found < 1 && v1) {
            int f1 = cgroup_walk("/sys/fs/cgroup/memory", v1path, "memory.limit_in_bytes", &limit);
            if (f1 == 1)
                note = "cgroup v1 memory.limit_in_bytes";
            else if (f1 == 0 && found < 0)
                note = "cgroup v1 memory.limit_in_bytes: no limit";
            if (f1 > found)
                found = f1;
        }
    }
    put_metric(b, mem, "cgroup_limit", limit, found == 1, "bytes");
    put_str(b, mem, "cgroup_limit_note", note);
}

void dg_si_memory(sb *b, cJSON *root)
{
    cJSON *m = put_obj(b, root, "memory");
    if (!m)
        return;
    double total = 0, avail = 0, swt = 0, swu = 0;
    bool ht = false, ha = false, hst = false, hsu = false;
#ifdef __APPLE__
    unsigned long long ms = 0;
    size_t msl = sizeof ms;
    if (sysctlbyname("hw.memsize", &ms, &msl, NULL, 0) == 0) {
        total = (double)ms;
        ht = true;
    }
    struct xsw_usage xs;
    size_t xsl = sizeof xs;
    if (sysctlbyname("vm.swapusage", &xs, &xsl, NULL, 0) == 0) {
        swt = (double)xs.xsu_total;
        swu = (double)xs.xsu_used;
        hst = hsu = true;
    }
#else
    double swf = 0;
    char *mi = dg_read_file("/proc/meminfo", 1u << 16, NULL);
    ht = dg_si_meminfo_bytes(mi, "MemTotal", &total);
    ha = dg_si_meminfo_bytes(mi, "MemAvailable", &avail);
    hst = dg_si_meminfo_bytes(mi, "SwapTotal", &swt);
    hsu = hst && dg_si_meminfo_bytes(mi, "SwapFree", &swf);
    swu = swt - swf;
    dg_free(mi);
#endif
    put_metric(b, m, "total", total, ht, "bytes");
    put_metric(b, m, "available", avail, ha, "bytes");
    put_metric(b, m, "swap_total", swt, hst, "bytes");
    put_metric(b, m, "swap_used", swu, hsu, "bytes");

    cJSON *p = put_obj(b, m, "pressure");
    char *psi = dg_read_file("/proc/pressure/memory", 4096, NULL);
    static const char *lines[2] = {"some", "full"};
    static const char *keys[2][2] = {{"some_avg10", "some_avg60"}, {"full_avg10", "full_avg60"}};
    for (int i = 0; i < 2 && p; i++) {
        double a10 = 0, a60 = 0;
        bool ok = psi && dg_si_psi_avgs(psi, lines[i], &a10, &a60);
        put_metric(b, p, keys[i][0], a10, ok, "percent");
        put_metric(b, p, keys[i][1], a60, ok, "percent");
    }
    dg_free(psi);
    add_cgroup_limit(b, m);
}
