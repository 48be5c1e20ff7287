/* Host facts: the busiest processes by CPU (two /proc passes SAMPLE_MS
 * apart) and by resident memory, with user and command line. */
#include "env/sysinfo.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOP_N 10
#define CMDLINE_MAX 200
#define SAMPLE_MS 200

/* ---- processes ------------------------------------------------------------------- */

typedef struct pslist {
    psamp *v;
    size_t n, cap;
    bool nomem;
} pslist;

bool dg_si_parse_stat(const char *buf, int pid, psamp *p)
{
    const char *lp = strchr(buf, '('), *rp = strrchr(buf, ')');
    if (!lp || !rp || rp < lp)
        return false;
    char comm[64];
    size_t cl = (size_t)(rp - lp - 1);
    if (cl >= sizeof comm)
        cl = sizeof comm - 1;
    memcpy(comm, lp + 1, cl);
    comm[cl] = '\0';
    dg_utf8_clean(p->comm, sizeof p->comm, comm, strlen(comm), true);

    /* Field 3 is the state letter; 14/15 utime/stime, 22 starttime, 24 rss. */
    const char *s = rp + 1;
    while (*s == ' ')
        s++;
    if (!*s)
        return false;
    s++;
    unsigned long long f[25] = {0};
    int idx = 4;
    for (; idx <= 24; idx++) {
        char *end;
        f[idx] = strtoull(s, &end, 10);
        if (end == s)
            return false;
        s = end;
    }
    p->pid = pid;
    p->ticks = f[14] + f[15];
    p->start = f[22];
    p->rss_pages = f[24];
    p->cpu = 0;
    p->cpu_ok = false;
    return true;
}

/* Reads /proc/pid/stat into p; false when the process is gone or unreadable. */
static bool read_stat(int pid, psamp *p)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    return dg_read_small(path, buf, sizeof buf) && dg_si_parse_stat(buf, pid, p);
}

/* One pass over /proc; false when /proc cannot be listed. */
static bool scan_procs(pslist *l)
{
    l->n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return false;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || end == de->d_name || pid <= 0 || pid > 0x7fffffff)
            continue;
        if (l->n == l->cap) {
            size_t nc = l->cap ? l->cap * 2 : 256;
            psamp *nv = dg_realloc(l->v, nc * sizeof *nv);
            if (!nv) {
                l->nomem = true;
                break;
            }
            l->v = nv;
            l->cap = nc;
        }
        if (read_stat((int)pid, &l->v[l->n]))
            l->n++;
    }
    closedir(d);
    return true;
}

static int by_pid(const void *a, const void *b)
{
    int x = ((const psamp *)a)->pid, y = ((const psamp *)b)->pid;
    return (x > y) - (x < y);
}

static int by_cpu_desc(const void *a, const void *b)
{
    double x = ((const psamp *)a)->cpu, y = ((const psamp *)b)->cpu;
    if (x != y)
        return x < y ? 1 : -1;
    return by_pid(a, b);
}

static int by_rss_desc(const void *a, const void *b)
{
    unsigned long long x = ((const psamp *)a)->rss_pages, y = ((const psamp *)b)->rss_pages;
    if (x != y)
        return x < y ? 1 : -1;
    return by_pid(a, b);
}

/* Sleeps ms milliseconds, resuming after signals. */
static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L}, rem;
    while (nanosleep(&ts, &rem) != 0 && errno == EINTR)
        ts = rem;
}

/* The first CMDLINE_MAX characters of a process's command line, cleaned and
 * with credentials masked; only the program (argv[0]) unless full, with the
 * count of the arguments left out in *hidden. */
static bool proc_cmdline(int pid, bool full, char *dst, size_t n, int *hidden)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    size_t len = 0;
    char *raw = dg_read_file(path, 4096, &len);
    if (!raw)
        return false;
    /* Other people's arguments hold their secrets: the program alone unless
     * asked (--env-cmdlines). */
    *hidden = 0;
    size_t args = 0;
    for (size_t i = 0; i < len; i++)
        args += raw[i] == '\0' && i + 1 < len;
    if (!full && len > 0) {
        len = strnlen(raw, len);
        *hidden = (int)args;
    }
    for (size_t i = 0; i < len; i++)
        if (raw[i] == '\0')
            raw[i] = ' ';
    raw[len] = '\0';
    /* dst (CMDLINE_MAX + 1 bytes) cuts the text at a UTF-8 boundary. */
    char *cmd = dg_trim(raw);
    /* Another user's `psql postgresql://u:PW@db` must not reach a record. */
    dg_redact_secrets(cmd);
    dg_utf8_clean(dst, n, cmd, strlen(cmd), true);
    dg_free(raw);
    return dst[0] != '\0';
}

/* Real uid of a process from /proc/pid/status; -1 if unknown. */
static long proc_uid(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    char *st = dg_read_file(path, 1u << 16, NULL);
    if (!st)
        return -1;
    char val[128];
    long uid = -1;
    if (dg_si_field_of(st, "Uid", val, sizeof val)) {
        char *end;
        uid = strtol(val, &end, 10);
        if (end == val)
            uid = -1;
    }
    dg_free(st);
    return uid;
}

static cJSON *proc_entry(sb *b, const psamp *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        b->oom = true;
        return NULL;
    }
    put_num(b, o, "pid", p->pid);
    put_str(b, o, "name", p->comm);
    long uid = proc_uid(p->pid);
    char user[256] = "";
    if (uid >= 0) {
        struct passwd pw, *res = NULL;
        char buf[4096];
        if (getpwuid_r((uid_t)uid, &pw, buf, sizeof buf, &res) == 0 && res && res->pw_name)
            dg_copy_clean(user, sizeof user, res->pw_name);
        else
            snprintf(user, sizeof user, "%ld", uid);
        put_num(b, o, "uid", (double)uid);
    } else {
        put(b, o, "uid", cJSON_CreateNull());
    }
    put_str(b, o, "user", user[0] ? user : NULL);
    char cmd[CMDLINE_MAX + 1];
    int hidden = 0;
    bool have = proc_cmdline(p->pid, b->cmdlines, cmd, sizeof cmd, &hidden);
    put_str(b, o, "cmdline", have ? cmd : NULL);
    put_num(b, o, "args_hidden", hidden);
    put_metric(b, o, "cpu_percent", p->cpu, p->cpu_ok, "percent");
    long page = sysconf(_SC_PAGESIZE);
    put_metric(b, o, "rss", (double)p->rss_pages * (double)(page > 0 ? page : 4096), true, "bytes");
    put_bool(b, o, "self", p->pid == b->self_pid);
    return o;
}

void dg_si_processes(sb *b, cJSON *root)
{
    cJSON *pr = put_obj(b, root, "processes");
    if (!pr)
        return;
    pslist s1 = {0}, s2 = {0};
    /* Seconds since boot before the first pass: a process missing from it
     * counts as new only if it started after this. */
    char *upt = dg_read_file("/proc/uptime", 256, NULL);
    double up1 = upt ? strtod(upt, NULL) : -1;
    dg_free(upt);
    double t1a = dg_now();
    bool ok = scan_procs(&s1);
    double t1b = dg_now();
    if (ok)
        sleep_ms(SAMPLE_MS);
    double t2a = dg_now();
    ok = ok && scan_procs(&s2);
    double t2b = dg_now();
    if (s1.nomem || s2.nomem) {
        b->oom = true;
        dg_free(s1.v);
        dg_free(s2.v);
        return;
    }
    double elapsed = ((t2a + t2b) - (t1a + t1b)) / 2;
    long hz = sysconf(_SC_CLK_TCK);
    bool cpu_valid = ok && hz > 0 && elapsed > 0;
    if (ok && s1.n)
        qsort(s1.v, s1.n, sizeof *s1.v, by_pid);
    for (size_t i = 0; cpu_valid && i < s2.n; i++) {
        psamp *p = &s2.v[i];
        psamp *old = s1.n ? bsearch(p, s1.v, s1.n, sizeof *s1.v, by_pid) : NULL;
        unsigned long long base = 0;
        if (old && old->start == p->start && old->ticks <= p->ticks) {
            p->cpu_ok = true;
            base = old->ticks;
        } else if (up1 >= 0 && (double)p->start / (double)hz >= up1 - 0.02) {
            p->cpu_ok = true; /* started inside the window: all its time is ours */
        }
        if (p->cpu_ok)
            p->cpu = (double)(p->ticks - base) / (double)hz / elapsed * 100.0;
    }
    put_num(b, pr, "sampled_over_ms", ok ? (double)(long)(elapsed * 1000 + 0.5) : 0);
    put_num(b, pr, "count", (double)s2.n);
    if (!ok)
        put_str(b, pr, "error", "/proc cannot be listed");
    put_str(b, pr, "cmdlines", b->cmdlines ? "full" : "program");
    cJSON *tc = put_arr(b, pr, "top_cpu");
    cJSON *tm = put_arr(b, pr, "top_mem");
    if (ok && s2.n) {
        qsort(s2.v, s2.n, sizeof *s2.v, by_cpu_desc);
        for (size_t i = 0; i < s2.n && i < TOP_N && tc; i++)
            push(b, tc, proc_entry(b, &s2.v[i]));
        qsort(s2.v, s2.n, sizeof *s2.v, by_rss_desc);
        for (size_t i = 0; i < s2.n && i < TOP_N && tm; i++)
            push(b, tm, proc_entry(b, &s2.v[i]));
    }
    dg_free(s1.v);
    dg_free(s2.v);
}
