/* The CPUs this process may use, for the cpu peak and the cpu thread count
 * (docs/measure.md, "Fair baselines"): logical CPUs in the affinity mask,
 * the physical cores among them (SMT siblings counted once), and the cgroup
 * CPU quota. Every file is read below a root, so tests can hand in a fixture
 * directory shaped like / (proc/self/status, proc/self/cgroup, proc/cpuinfo,
 * sys/devices/system/cpu, sys/fs/cgroup). */
#include "env/peak.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_CPUS = 8192 };

/* root + path into out; false when it does not fit. */
static bool rooted(char *out, size_t len, const char *root, const char *path)
{
    int n = snprintf(out, len, "%s%s", root ? root : "", path);
    return n > 0 && (size_t)n < len;
}

static char *read_rooted(const char *root, const char *path, size_t max)
{
    char full[1024];
    return rooted(full, sizeof full, root, path) ? dg_read_file(full, max, NULL) : NULL;
}

/* Parses a kernel CPU list ("0-3,8,10-11") into set (MAX_CPUS bytes);
 * the number of CPUs in it, -1 when it is malformed or empty. */
static int parse_cpu_list(const char *s, unsigned char *set)
{
    memset(set, 0, MAX_CPUS);
    int n = 0;
    const char *p = s;
    while (p && *p && *p != '\n') {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (*end == '-') {
            if (!isdigit((unsigned char)end[1]))
                return -1;
            hi = strtol(end + 1, &end, 10);
        }
        if (lo < 0 || hi < lo || hi >= MAX_CPUS)
            return -1;
        for (long c = lo; c <= hi; c++)
            if (!set[c]) {
                set[c] = 1;
                n++;
            }
        p = end;
        if (*p == ',')
            p++;
        else if (*p && *p != '\n' && !isspace((unsigned char)*p))
            return -1;
    }
    return n > 0 ? n : -1;
}

/* The affinity mask: sched_getaffinity for the real root, else the
 * fixture's proc/self/status "Cpus_allowed_list". */
static int read_affinity(const char *root, unsigned char *set)
{
    if (!root || !*root) {
        cpu_set_t cs;
        if (sched_getaffinity(0, sizeof cs, &cs) == 0) {
            memset(set, 0, MAX_CPUS);
            int n = 0;
            for (int c = 0; c < CPU_SETSIZE && c < MAX_CPUS; c++)
                if (CPU_ISSET(c, &cs)) {
                    set[c] = 1;
                    n++;
                }
            if (n > 0)
                return n;
        }
    }
    char *st = read_rooted(root, "/proc/self/status", 1 << 16);
    const char *k = st ? strstr(st, "Cpus_allowed_list:") : NULL;
    int n = k ? parse_cpu_list(k + strlen("Cpus_allowed_list:"), set) : -1;
    dg_free(st);
    if (n > 0)
        return n;
    /* Nothing readable: every online CPU. */
    char *on = read_rooted(root, "/sys/devices/system/cpu/online", 4096);
    n = on ? parse_cpu_list(on, set) : -1;
    dg_free(on);
    return n;
}

/* Core keys (the lowest CPU of each CPU's sibling list) from sysfs topology;
 * false when a CPU of the mask has no sibling file. */
static bool keys_from_sysfs(const char *root, const unsigned char *mask, int *keys,
                            const char **source)
{
    static const char *names[] = {"core_cpus_list", "thread_siblings_list"};
    unsigned char *sib = dg_malloc(MAX_CPUS);
    if (!sib)
        return false;
    bool ok = true;
    int used = -1;
    for (int c = 0; c < MAX_CPUS && ok; c++) {
        if (!mask[c])
            continue;
        ok = false;
        for (int i = 0; i < 2 && !ok; i++) {
            if (used >= 0 && used != i)
                continue; /* one file name for every CPU */
            char path[128];
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", c, names[i]);
            char *s = read_rooted(root, path, 4096);
            if (s && parse_cpu_list(s, sib) > 0) {
                int lo = 0;
                while (lo < MAX_CPUS && !sib[lo])
                    lo++;
                keys[c] = lo;
                used = i;
                ok = true;
            }
            dg_free(s);
        }
    }
    dg_free(sib);
    if (ok && used >= 0)
        *source = names[used];
    return ok && used >= 0;
}

/* Core keys from /proc/cpuinfo's "physical id" and "core id" per
 * "processor"; false when a CPU of the mask is not described. */
static bool keys_from_cpuinfo(const char *root, const unsigned char *mask, int *keys)
{
    char *t = read_rooted(root, "/proc/cpuinfo", 1 << 22);
    if (!t)
        return false;
    for (int c = 0; c < MAX_CPUS; c++)
        keys[c] = -1;
    long proc = -1, phys = 0;
    for (char *save = NULL, *line = strtok_r(t, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        long v = strtol(colon + 1, NULL, 10);
        if (!strncmp(line, "processor", 9)) {
            proc = v;
            phys = 0;
        } else if (!strncmp(line, "physical id", 11)) {
            phys = v;
        } else if (!strncmp(line, "core id", 7) && proc >= 0 && proc < MAX_CPUS && v >= 0 &&
                   v < 65536 && phys >= 0 && phys < 32768) {
            keys[proc] = (int)(phys * 65536 + v);
        }
    }
    dg_free(t);
    for (int c = 0; c < MAX_CPUS; c++)
        if (mask[c] && keys[c] < 0)
            return false;
    return true;
}

/* The tightest CPU quota along the cgroup path, in CPUs; NAN when none. */
static double read_quota(const char *root, char *file, size_t flen)
{
    file[0] = '\0';
    char *cg = read_rooted(root, "/proc/self/cgroup", 1 << 16);
    if (!cg)
        return NAN;
    double best = NAN;
    for (char *save = NULL, *line = strtok_r(cg, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        /* hierarchy-ID:controller-list:path */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/')
            continue;
        *c1 = *c2 = '\0';
        const char *ctrl = c1 + 1, *path = c2 + 1;
        bool v2 = !strcmp(line, "0") && !*ctrl;
        bool v1 = false;
        for (const char *p = ctrl; *p && !v1;) {
            size_t l = strcspn(p, ",");
            v1 = l == 3 && !strncmp(p, "cpu", 3);
            p += l + (p[l] == ',');
        }
        if (!v2 && !v1)
            continue;
        static const char *v1_mounts[] = {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"};
        for (int m = 0; m < (v2 ? 1 : 2); m++) {
            char dir[512];
            if (snprintf(dir, sizeof dir, "%s%s", v2 ? "/sys/fs/cgroup" : v1_mounts[m],
                         strcmp(path, "/") ? path : "") >= (int)sizeof dir)
                continue;
            size_t mlen = strlen(v2 ? "/sys/fs/cgroup" : v1_mounts[m]);
            /* This cgroup and every ancestor up to the mount (a container's
             * namespaced root included): the smallest quota limits. */
            for (;;) {
                char f[600];
                double q = NAN;
                if (v2) {
                    snprintf(f, sizeof f, "%s/cpu.max", dir);
                    char *s = read_rooted(root, f, 256);
                    double quota, period;
                    if (s && sscanf(s, "%lf %lf", &quota, &period) == 2 && quota > 0 && period > 0)
                        q = quota / period;
                    dg_free(s);
                } else {
                    snprintf(f, sizeof f, "%s/cpu.cfs_quota_us", dir);
                    char pf[600];
                    snprintf(pf, sizeof pf, "%s/cpu.cfs_period_us", dir);
                    char *s = read_rooted(root, f, 256), *ps = read_rooted(root, pf, 256);
                    double quota = s ? strtod(s, NULL) : -1, period = ps ? strtod(ps, NULL) : -1;
                    if (quota > 0 && period > 0)
                        q = quota / period;
                    dg_free(s);
                    dg_free(ps);
                }
                if (isfinite(q) && !(q >= best)) {
                    best = q;
                    snprintf(file, flen, "%s", f);
                }
                char *slash = strrchr(dir, '/');
                if (!slash || (size_t)(slash - dir) < mlen)
                    break;
                *slash = '\0';
            }
        }
    }
    dg_free(cg);
    return best;
}

void dg_cpu_topo_read(const char *root, dg_cpu_topo *t)
{
    memset(t, 0, sizeof *t);
    t->quota_cpus = NAN;
    t->usable = NAN;
    t->cores_source = "none";
    unsigned char *mask = dg_malloc(MAX_CPUS), *on = dg_malloc(MAX_CPUS);
    int *keys = dg_malloc(MAX_CPUS * sizeof *keys);
    if (!mask || !on || !keys) {
        dg_free(mask);
        dg_free(on);
        dg_free(keys);
        t->threads = 1;
        return;
    }
    char *ol = read_rooted(root, "/sys/devices/system/cpu/online", 4096);
    int n = ol ? parse_cpu_list(ol, on) : -1;
    dg_free(ol);
    if (n <= 0 && (!root || !*root)) {
        long x = sysconf(_SC_NPROCESSORS_ONLN);
        n = x > 0 ? (int)x : 0;
    }
    t->online = n > 0 ? n : 0;
    n = read_affinity(root, mask);
    t->affinity = n > 0 ? n : 0;
    if (t->affinity > 0) {
        if (keys_from_sysfs(root, mask, keys, &t->cores_source) ||
            (keys_from_cpuinfo(root, mask, keys) && (t->cores_source = "cpuinfo core id"))) {
            /* Distinct keys among the mask, and the most CPUs of it on one core. */
            int *ks = dg_malloc((size_t)t->affinity * sizeof *ks), nk = 0;
            for (int c = 0; ks && c < MAX_CPUS; c++)
                if (mask[c])
                    ks[nk++] = keys[c];
            int cores = 0, smt = 0;
            for (int i = 0; ks && i < nk; i++) {
                int same = 0;
                bool first = true;
                for (int j = 0; j < nk; j++)
                    if (ks[j] == ks[i]) {
                        same++;
                        if (j < i)
                            first = false;
                    }
                cores += first;
                if (same > smt)
                    smt = same;
            }
            dg_free(ks);
            t->cores = cores;
            t->smt = smt;
        }
        if (t->cores <= 0) {
            t->cores = t->affinity;
            t->smt = 1;
            t->cores_source = "none: every logical CPU counted as a core";
        }
    }
    t->quota_cpus = read_quota(root, t->quota_file, sizeof t->quota_file);
    if (t->cores > 0)
        t->usable = isfinite(t->quota_cpus) && t->quota_cpus < t->cores ? t->quota_cpus : t->cores;
    t->threads = isfinite(t->usable) && t->usable >= 1 ? (int)floor(t->usable + 1e-9) : 1;
    dg_free(mask);
    dg_free(on);
    dg_free(keys);
}

static dg_cpu_topo topo;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static void topo_init(void)
{
    dg_cpu_topo_read(NULL, &topo);
}

const dg_cpu_topo *dg_cpu_topo_get(void)
{
    pthread_once(&topo_once, topo_init);
    return &topo;
}

cJSON *dg_cpu_topo_json(const dg_cpu_topo *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddItemToObject(o, "online", dg_json_metric(t->online, t->online > 0, "cpus"));
    cJSON_AddItemToObject(o, "affinity", dg_json_metric(t->affinity, t->affinity > 0, "cpus"));
    cJSON_AddItemToObject(o, "cores", dg_json_metric(t->cores, t->cores > 0, "cores"));
    cJSON_AddItemToObject(o, "smt", dg_json_metric(t->smt, t->smt > 0, "threads/core"));
    cJSON_AddStringToObject(o, "cores_source", t->cores_source ? t->cores_source : "none");
    cJSON_AddItemToObject(o, "quota",
                          dg_json_metric(t->quota_cpus, isfinite(t->quota_cpus), "cpus"));
    dg_json_add_str(o, "quota_file", t->quota_file[0] ? t->quota_file : NULL);
    cJSON_AddItemToObject(o, "usable", dg_json_metric(t->usable, isfinite(t->usable), "cores"));
    cJSON_AddItemToObject(o, "threads", dg_json_metric(t->threads, t->threads > 0, "threads"));
    return o;
}

int dg_cpu_threads_resolve(int requested, const char **source)
{
    const char *src = "--threads";
    int n = requested;
    if (n <= 0) {
        /* OpenMP's own variable, when set, is the user's choice: honoured,
         * and recorded, so a baseline run on fewer cores is seen. */
        const char *env = getenv("OMP_NUM_THREADS");
        char *end = NULL;
        long v = env ? strtol(env, &end, 10) : 0;
        if (env && end != env && v > 0 && v <= 4096 && (*end == '\0' || *end == ',')) {
            n = (int)v;
            src = "OMP_NUM_THREADS";
        } else {
            n = dg_cpu_topo_get()->threads;
            src = "usable cores";
        }
    }
    if (source)
        *source = src;
    return n > 0 ? n : 1;
}
