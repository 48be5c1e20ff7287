/* Host facts for the environment proof (docs/schema/env.md, "sysinfo"): arch
 * and translation, virtualisation and containers, OS, CPU, memory, load, git
 * state, busiest processes and NVIDIA GPU processes. A fact that cannot be
 * read is recorded as null or as an invalid metric, never as 0. */
#include "env/env.h"

#include "env/binfmt.h"
#include "env/proc_run.h"
#include "measure/nvml.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif
#ifdef __APPLE__
#include <sys/sysctl.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#define DG_HAVE_CPUID 1
#endif

#define TOP_N 10
#define CMDLINE_MAX 200
#define SAMPLE_MS 200
#define GIT_TIMEOUT_S 5.0

/* ---- JSON building with one out-of-memory flag ---------------------------- */

typedef struct sb {
    bool oom;
} sb;

/* Adds item under key (deleting it if that fails); returns it or NULL. */
static cJSON *put(sb *b, cJSON *obj, const char *key, cJSON *item)
{
    if (!obj || !item) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    return item;
}

/* Appends item to an array (deleting it if that fails); returns it or NULL. */
static cJSON *push(sb *b, cJSON *arr, cJSON *item)
{
    if (!arr || !item) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    if (!cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    return item;
}

/* A string item cleaned of control characters; null for NULL s. */
static cJSON *clean_str(const char *s)
{
    if (!s)
        return cJSON_CreateNull();
    size_t n = strlen(s) + 1;
    char *c = dg_malloc(n);
    if (!c)
        return NULL;
    dg_copy_clean(c, n, s);
    cJSON *item = cJSON_CreateString(c);
    dg_free(c);
    return item;
}

static void put_str(sb *b, cJSON *obj, const char *key, const char *s)
{
    put(b, obj, key, clean_str(s));
}

static void put_bool(sb *b, cJSON *obj, const char *key, bool v)
{
    put(b, obj, key, cJSON_CreateBool(v));
}

/* A bool that may be unknown: tri < 0 writes null. */
static void put_tri(sb *b, cJSON *obj, const char *key, int tri)
{
    put(b, obj, key, tri < 0 ? cJSON_CreateNull() : cJSON_CreateBool(tri > 0));
}

static void put_num(sb *b, cJSON *obj, const char *key, double v)
{
    put(b, obj, key, cJSON_CreateNumber(v));
}

static void put_metric(sb *b, cJSON *obj, const char *key, double v, bool valid, const char *unit)
{
    put(b, obj, key, dg_json_metric(v, valid, unit));
}

static cJSON *put_obj(sb *b, cJSON *obj, const char *key)
{
    return put(b, obj, key, cJSON_CreateObject());
}

static cJSON *put_arr(sb *b, cJSON *obj, const char *key)
{
    return put(b, obj, key, cJSON_CreateArray());
}

static void push_str(sb *b, cJSON *arr, const char *s)
{
    push(b, arr, clean_str(s));
}

/* ---- small readers ---------------------------------------------------------- */

/* The trimmed content of a small file (dg_malloc'd), or NULL. */
static char *read_value(const char *path)
{
    char *raw = dg_read_file(path, 4096, NULL);
    if (!raw)
        return NULL;
    char *t = dg_trim(raw);
    char *v = t[0] ? dg_strdup(t) : NULL;
    dg_free(raw);
    return v;
}

/* Reads "Key:   value" lines: the value of the first line starting with key
 * followed by optional blanks and ':' into dst (trimmed); false if none. */
static bool field_of(const char *text, const char *key, char *dst, size_t n)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        if (ll > kl && strncmp(line, key, kl) == 0) {
            const char *p = line + kl;
            while (p < line + ll && (*p == ' ' || *p == '\t'))
                p++;
            if (p < line + ll && *p == ':') {
                p++;
                while (p < line + ll && (*p == ' ' || *p == '\t'))
                    p++;
                size_t vl = (size_t)(line + ll - p);
                if (vl >= n)
                    vl = n - 1;
                memcpy(dst, p, vl);
                dst[vl] = '\0';
                dg_trim(dst);
                return true;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return false;
}

/* True when the blank-separated word list contains word. */
static bool has_word(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += wl) {
        bool start = p == list || p[-1] == ' ' || p[-1] == '\t';
        bool end = p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\t' || p[wl] == '\n';
        if (start && end)
            return true;
    }
    return false;
}

/* ---- arch and translation ----------------------------------------------------- */

/* The architecture this file was compiled for. */
static const char *compile_time_arch(void)
{
#if defined(__x86_64__) || defined(_M_X64)
    return "x86_64";
#elif defined(__aarch64__) || defined(_M_ARM64)
    return "aarch64";
#elif defined(__i386__)
    return "i386";
#elif defined(__arm__)
    return "arm";
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
    return "ppc64le";
#elif defined(__powerpc64__)
    return "ppc64";
#elif defined(__riscv) && __riscv_xlen == 64
    return "riscv64";
#elif defined(__s390x__)
    return "s390x";
#elif defined(__loongarch64)
    return "loongarch64";
#else
    return "unknown";
#endif
}

/* Emulator family named by an interpreter path or entry name. */
static const char *emulator_kind(const char *name, const char *interp)
{
    const char *s[2] = {interp, name};
    for (int i = 0; i < 2; i++) {
        if (!s[i])
            continue;
        if (strcasestr(s[i], "qemu-"))
            return "qemu-user";
        if (strcasestr(s[i], "box64") || strcasestr(s[i], "box86"))
            return "box64";
        if (strcasestr(s[i], "rosetta"))
            return "rosetta";
        if (strcasestr(s[i], "fexinterpreter") || strcasestr(s[i], "fexloader") ||
            strncasecmp(s[i], "fex", 3) == 0)
            return "fex";
    }
    return "other";
}

/* Architecture of an ELF e_machine value (class 2 = 64-bit, data 1 = LE). */
static const char *elf_machine_arch(unsigned mach, int cls, int data)
{
    switch (mach) {
    case 3: return "i386";
    case 62: return "x86_64";
    case 40: return "arm";
    case 183: return "aarch64";
    case 243: return cls == 2 ? "riscv64" : "riscv32";
    case 20: return "ppc";
    case 21: return data == 1 ? "ppc64le" : "ppc64";
    case 22: return "s390x";
    case 8: return cls == 2 ? (data == 1 ? "mips64el" : "mips64") : (data == 1 ? "mipsel" : "mips");
    case 258: return "loongarch64";
    case 2: return "sparc";
    case 43: return "sparc64";
    }
    return NULL;
}

typedef struct bm_entry {
    bool enabled;
    char interp[256];
    char flags[32];
    long offset;
    unsigned char magic[128], mask[128];
    size_t mlen;
    bool has_magic;
} bm_entry;

/* Decodes hex into out; the byte count, or 0 on malformed input. */
static size_t unhex(const char *s, unsigned char *out, size_t max)
{
    size_t n = 0;
    while (s[0] && s[1] && isxdigit((unsigned char)s[0]) && isxdigit((unsigned char)s[1])) {
        if (n == max)
            return 0;
        char pair[3] = {s[0], s[1], 0};
        out[n++] = (unsigned char)strtoul(pair, NULL, 16);
        s += 2;
    }
    return n;
}

/* Parses one /proc/sys/fs/binfmt_misc entry file. */
static void bm_parse(const char *text, bm_entry *e)
{
    memset(e, 0, sizeof *e);
    e->enabled = strncmp(text, "enabled", 7) == 0;
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        char buf[512];
        if (ll >= sizeof buf)
            ll = sizeof buf - 1;
        memcpy(buf, line, ll);
        buf[ll] = '\0';
        if (strncmp(buf, "interpreter ", 12) == 0)
            snprintf(e->interp, sizeof e->interp, "%.255s", buf + 12);
        else if (strncmp(buf, "flags:", 6) == 0)
            snprintf(e->flags, sizeof e->flags, "%s", dg_trim(buf + 6));
        else if (strncmp(buf, "offset ", 7) == 0)
            e->offset = strtol(buf + 7, NULL, 10);
        else if (strncmp(buf, "magic ", 6) == 0) {
            e->mlen = unhex(buf + 6, e->magic, sizeof e->magic);
            e->has_magic = e->mlen > 0;
            memset(e->mask, 0xff, sizeof e->mask);
        } else if (strncmp(buf, "mask ", 5) == 0)
            unhex(buf + 5, e->mask, sizeof e->mask);
        line = nl ? nl + 1 : NULL;
    }
}

/* Architecture an ELF-magic entry hands to its interpreter, or NULL. */
static const char *bm_target_arch(const bm_entry *e)
{
    if (!e->has_magic || e->offset != 0 || e->mlen < 20 ||
        memcmp(e->magic,
               "\x7f"
               "ELF",
               4) != 0)
        return NULL;
    unsigned mach = e->magic[5] == 2 ? (unsigned)e->magic[18] << 8 | e->magic[19]
                                     : (unsigned)e->magic[19] << 8 | e->magic[18];
    return elf_machine_arch(mach, e->magic[4], e->magic[5]);
}

/* True when the entry's magic (under its mask) matches the header bytes. */
static bool bm_matches(const bm_entry *e, const unsigned char *hdr, size_t hlen)
{
    if (!e->has_magic || e->offset < 0 || (size_t)e->offset + e->mlen > hlen)
        return false;
    for (size_t i = 0; i < e->mlen; i++)
        if ((hdr[(size_t)e->offset + i] & e->mask[i]) != (e->magic[i] & e->mask[i]))
            return false;
    return true;
}

/* True for a (kernel, process) pair the kernel runs natively in compat mode. */
static bool compat_pair(const char *host, const char *proc)
{
    return (!strcmp(host, "x86_64") && !strcmp(proc, "i386")) ||
           (!strcmp(host, "aarch64") && !strcmp(proc, "arm")) ||
           (!strcmp(host, "ppc64") && !strcmp(proc, "ppc")) ||
           (!strcmp(host, "s390x") && !strcmp(proc, "s390"));
}

/* The emulator a /proc/self/maps path belongs to, or NULL. */
static const char *maps_kind(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "qemu-", 5) == 0)
        return "qemu-user";
    if (strcasestr(base, "box64") || strcasestr(base, "box86"))
        return "box64";
    if (strcasestr(base, "rosetta"))
        return "rosetta";
    if (strncmp(base, "FEXInterpreter", 14) == 0 || strncmp(base, "FEXLoader", 9) == 0)
        return "fex";
    return NULL;
}

/* Scans our own mappings for an emulator's file; its kind, path into path. */
static const char *scan_maps(char *path, size_t n)
{
    size_t len = 0;
    char *maps = dg_read_file("/proc/self/maps", 4u << 20, &len);
    if (!maps)
        return NULL;
    const char *kind = NULL;
    for (char *line = maps; line && *line && !kind;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *p = strchr(line, '/');
        if (p && (kind = maps_kind(p)) != NULL)
            dg_copy_clean(path, n, p);
        line = nl ? nl + 1 : NULL;
    }
    dg_free(maps);
    return kind;
}

/* Fills "arch"; host_arch gets the normalised kernel machine. */
static void add_arch(sb *b, cJSON *root, char *host_arch, size_t host_len)
{
    cJSON *a = put_obj(b, root, "arch");
    if (!a)
        return;
    struct utsname u;
    const char *host = "unknown";
    if (uname(&u) == 0)
        host = dg_arch_normalise(u.machine);
    const char *translation = NULL;
    cJSON *evidence = cJSON_CreateArray();
    if (!evidence) {
        b->oom = true;
        return;
    }
    char ev[600];

#ifdef __APPLE__
    {
        int v = 0;
        size_t vl = sizeof v;
        if (sysctlbyname("hw.optional.arm64", &v, &vl, NULL, 0) == 0 && v == 1)
            host = "aarch64";
        v = 0;
        vl = sizeof v;
        if (sysctlbyname("sysctl.proc_translated", &v, &vl, NULL, 0) == 0 && v == 1) {
            translation = "rosetta";
            push_str(b, evidence, "sysctl.proc_translated = 1");
        }
    }
#endif
    snprintf(host_arch, host_len, "%s", host);
    put_str(b, a, "host", host);

    /* The process: what /proc/self/exe says, else what we were compiled as. */
    const char *proc = compile_time_arch();
    const char *proc_source = "compile-time";
    dg_binfmt_info info;
    char err[256] = "";
    bool exe_known = false;
#ifdef __linux__
    if (dg_binfmt_file("/proc/self/exe", &info, err, sizeof err) == DG_OK && info.nslices >= 1) {
        proc = info.arch[0];
        proc_source = "/proc/self/exe";
        exe_known = true;
    }
#else
    (void)info;
#endif
    put_str(b, a, "process", proc);
    put_str(b, a, "process_source", proc_source);
    if (!exe_known && err[0])
        put_str(b, a, "process_error", err);

    /* binfmt_misc: every registered handler, and whether one matches us. */
    cJSON *emus = cJSON_CreateArray();
    if (!emus) {
        cJSON_Delete(evidence);
        b->oom = true;
        return;
    }
    unsigned char hdr[256];
    size_t hlen = 0;
    FILE *exe = fopen("/proc/self/exe", "rb");
    if (exe) {
        hlen = fread(hdr, 1, sizeof hdr, exe);
        fclose(exe);
    }
    DIR *d = opendir("/proc/sys/fs/binfmt_misc");
    bool bm_mounted = false;
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            bm_mounted = true;
            if (!strcmp(de->d_name, "register") || !strcmp(de->d_name, "status"))
                continue;
            char path[512];
            snprintf(path, sizeof path, "/proc/sys/fs/binfmt_misc/%s", de->d_name);
            char *text = dg_read_file(path, 8192, NULL);
            if (!text)
                continue;
            bm_entry e;
            bm_parse(text, &e);
            dg_free(text);
            const char *kind = emulator_kind(de->d_name, e.interp);
            cJSON *o = push(b, emus, cJSON_CreateObject());
            if (!o)
                break;
            put_str(b, o, "name", de->d_name);
            put_str(b, o, "interpreter", e.interp[0] ? e.interp : NULL);
            put_bool(b, o, "enabled", e.enabled);
            put_str(b, o, "kind", kind);
            put_str(b, o, "target_arch", bm_target_arch(&e));
            put_str(b, o, "flags", e.flags);
            bool match = e.enabled && exe_known && bm_matches(&e, hdr, hlen);
            put_bool(b, o, "matches_this_binary", match);
            if (match) {
                snprintf(ev, sizeof ev, "enabled binfmt_misc handler %s matches this binary",
                         de->d_name);
                push_str(b, evidence, ev);
                if (!translation)
                    translation = strcmp(kind, "other") ? kind : "binfmt_misc";
            }
        }
        closedir(d);
    }

    /* An emulator's own file mapped into us is a strong extra signal. */
    char mpath[400];
    const char *mk = scan_maps(mpath, sizeof mpath);
    if (mk) {
        snprintf(ev, sizeof ev, "emulator mapped into this process: %s", mpath);
        push_str(b, evidence, ev);
        translation = mk;
    }
    if (exe_known && strcmp(host, "unknown") && strncmp(proc, "unknown", 7) && strcmp(host, proc) &&
        !compat_pair(host, proc)) {
        snprintf(ev, sizeof ev, "ELF machine %s differs from kernel machine %s", proc, host);
        push_str(b, evidence, ev);
        if (!translation)
            translation = "arch-mismatch";
    }
    put_bool(b, a, "translated", translation != NULL);
    put_str(b, a, "translation", translation);
    put(b, a, "translation_evidence", evidence);
    put_str(b, a, "binfmt_misc", bm_mounted ? "mounted" : "absent");
    put(b, a, "binfmt_emulators", emus);
}

/* ---- virtualisation and containers -------------------------------------------- */

/* Hypervisor named by DMI strings, or NULL; *metal for bare-metal cloud hosts. */
static const char *dmi_guess(const char *vendor, const char *product, const char *host_arch,
                             bool *metal)
{
    *metal = false;
    const char *v = vendor ? vendor : "", *p = product ? product : "";
    if (strcasestr(v, "Amazon EC2") || strcasestr(p, "Amazon EC2")) {
        *metal = strstr(p, ".metal") != NULL;
        return "Amazon EC2";
    }
    if (strcasestr(v, "Google") || strcasestr(p, "Google Compute Engine"))
        return "Google Compute Engine";
    if (strcasestr(v, "QEMU") || strcasestr(p, "QEMU"))
        return "QEMU";
    if (strcasestr(p, "KVM") || strcasestr(v, "KVM"))
        return "KVM";
    if (strcasestr(v, "VMware") || strcasestr(p, "VMware"))
        return "VMware";
    if (strcasestr(p, "VirtualBox") || strcasestr(v, "innotek"))
        return "VirtualBox";
    if (strcasestr(v, "Microsoft Corporation") && strcasestr(p, "Virtual Machine"))
        return "Microsoft Hyper-V";
    if (strcasestr(v, "Xen") || strcasestr(p, "HVM domU"))
        return "Xen";
    if (strcasestr(v, "Parallels") || strcasestr(p, "Parallels"))
        return "Parallels";
    if (strcasestr(v, "bhyve") || strcasestr(p, "bhyve"))
        return "bhyve";
    if (strcasestr(v, "Apple Inc.") && (strcasestr(p, "Virtual") || !strcmp(host_arch, "aarch64")))
        return "Apple Virtualization";
    return NULL;
}

/* Hypervisor named by CPUID leaf 0x40000000, into raw; NULL when none. */
static const char *cpuid_guess(char raw[13])
{
    raw[0] = '\0';
#ifdef DG_HAVE_CPUID
    unsigned a, bx, c, dx;
    if (!__get_cpuid(1, &a, &bx, &c, &dx) || !(c & (1u << 31)))
        return NULL;
    __cpuid(0x40000000, a, bx, c, dx);
    memcpy(raw, &bx, 4);
    memcpy(raw + 4, &c, 4);
    memcpy(raw + 8, &dx, 4);
    raw[12] = '\0';
    static const struct {
        const char *sig, *name;
    } known[] = {
        {"KVMKVMKVM", "KVM"},
        {"Linux KVM Hv", "KVM"},
        {"Microsoft Hv", "Microsoft Hyper-V"},
        {"VMwareVMware", "VMware"},
        {"XenVMMXenVMM", "Xen"},
        {"TCGTCGTCGTCG", "QEMU"},
        {"VBoxVBoxVBox", "VirtualBox"},
        {" lrpepyh  vr", "Parallels"},
        {"prl hyperv  ", "Parallels"},
        {"bhyve bhyve ", "bhyve"},
        {"ACRNACRNACRN", "ACRN"},
        {"QNXQVMBSQG", "QNX"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strncmp(raw, known[i].sig, strlen(known[i].sig)) == 0)
            return known[i].name;
    return raw[0] ? raw : NULL;
#else
    return NULL;
#endif
}

/* Container kinds, in rising order of specificity: the most specific wins. */
enum { CK_NONE = -1, CK_WSL, CK_NSPAWN, CK_LXC, CK_DOCKER, CK_PODMAN, CK_K8S };
static const char *const kind_names[] = {"wsl",    "systemd-nspawn", "lxc",
                                         "docker", "podman",         "kubernetes"};

static void set_kind(int *kind, int k)
{
    if (k > *kind)
        *kind = k;
}

/* Container kind named by a "container=" value, or CK_NONE. */
static int container_env_kind(const char *v)
{
    if (!strcmp(v, "podman"))
        return CK_PODMAN;
    if (!strcmp(v, "docker"))
        return CK_DOCKER;
    if (!strncmp(v, "lxc", 3))
        return CK_LXC;
    if (!strcmp(v, "systemd-nspawn"))
        return CK_NSPAWN;
    return CK_NONE;
}

static void add_virtualization(sb *b, cJSON *root, const char *hostname, const char *host_arch)
{
    cJSON *v = put_obj(b, root, "virtualization");
    cJSON *markers = cJSON_CreateArray();
    if (!v || !markers) {
        cJSON_Delete(markers);
        b->oom = true;
        return;
    }
    char m[400];

    /* CPU flag: only x86 has it, so "no flags line" leaves it unknown. */
    int hv_flag = -1;
    char *cpuinfo = dg_read_file("/proc/cpuinfo", 1u << 22, NULL);
    if (cpuinfo) {
        char flags[8192];
        if (field_of(cpuinfo, "flags", flags, sizeof flags))
            hv_flag = has_word(flags, "hypervisor");
        dg_free(cpuinfo);
    }
    char *dmi_vendor = read_value("/sys/class/dmi/id/sys_vendor");
    char *dmi_product = read_value("/sys/class/dmi/id/product_name");
    char *sys_hv = read_value("/sys/hypervisor/type");
    char cpuid_raw[13];
    const char *cpuid_vendor = cpuid_guess(cpuid_raw);

    bool metal = false;
    const char *hv = dmi_guess(dmi_vendor, dmi_product, host_arch, &metal);
    const char *hv_source = hv ? "dmi" : NULL;
    if (!hv && sys_hv) {
        hv = strcasestr(sys_hv, "xen") ? "Xen" : sys_hv;
        hv_source = "/sys/hypervisor/type";
    }
    if (!hv && cpuid_vendor) {
        hv = cpuid_vendor;
        hv_source = "cpuid";
    }
    bool lima =
        hostname && (strncmp(hostname, "lima-", 5) == 0 || strncmp(hostname, "colima", 6) == 0);
    if (lima) {
        snprintf(m, sizeof m, "lima/colima hostname (%s)", hostname);
        push_str(b, markers, m);
    }

    int vm = -1;
    if (hv_flag > 0 || cpuid_vendor || sys_hv || lima || (hv && !metal))
        vm = 1;
    else if (hv_flag == 0 || dmi_vendor)
        vm = 0;

    /* Containers. */
    int kind = CK_NONE;
    if (access("/.dockerenv", F_OK) == 0) {
        push_str(b, markers, "/.dockerenv");
        set_kind(&kind, CK_DOCKER);
    }
    if (access("/run/.containerenv", F_OK) == 0) {
        push_str(b, markers, "/run/.containerenv");
        set_kind(&kind, CK_PODMAN);
    }
    size_t envlen = 0;
    char *env1 = dg_read_file("/proc/1/environ", 1u << 20, &envlen);
    if (env1) {
        for (size_t i = 0; i < envlen; i += strlen(env1 + i) + 1) {
            if (strncmp(env1 + i, "container=", 10) == 0) {
                snprintf(m, sizeof m, "container=%.100s env of pid 1", env1 + i + 10);
                push_str(b, markers, m);
                int k = container_env_kind(env1 + i + 10);
                set_kind(&kind, k != CK_NONE ? k : CK_DOCKER);
            }
        }
        dg_free(env1);
    }
    const char *own = getenv("container");
    if (own && own[0]) {
        snprintf(m, sizeof m, "container=%.100s in own environment", own);
        push_str(b, markers, m);
        set_kind(&kind, container_env_kind(own));
    }
    char *sdc = read_value("/run/systemd/container");
    if (sdc) {
        snprintf(m, sizeof m, "/run/systemd/container: %.100s", sdc);
        push_str(b, markers, m);
        int k = container_env_kind(sdc);
        set_kind(&kind, k != CK_NONE ? k : CK_NSPAWN);
        dg_free(sdc);
    }
    if (getenv("KUBERNETES_SERVICE_HOST")) {
        push_str(b, markers, "KUBERNETES_SERVICE_HOST in own environment");
        set_kind(&kind, CK_K8S);
    }
    char *cg = dg_read_file("/proc/self/cgroup", 1u << 16, NULL);
    if (cg) {
        for (char *line = cg; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            int k = CK_NONE;
            if (strstr(line, "kubepods"))
                k = CK_K8S;
            else if (strstr(line, "libpod"))
                k = CK_PODMAN;
            else if (strstr(line, "docker"))
                k = CK_DOCKER;
            else if (strstr(line, "lxc"))
                k = CK_LXC;
            if (k != CK_NONE) {
                snprintf(m, sizeof m, "cgroup %.200s", line);
                push_str(b, markers, m);
                set_kind(&kind, k);
            }
            line = nl ? nl + 1 : NULL;
        }
        dg_free(cg);
    }
    char *ver = read_value("/proc/version");
    if (ver && (strcasestr(ver, "microsoft") || strstr(ver, "WSL"))) {
        push_str(b, markers, "WSL in /proc/version");
        set_kind(&kind, CK_WSL);
    }
    dg_free(ver);
    if (access("/proc/sys/fs/binfmt_misc/WSLInterop", F_OK) == 0) {
        push_str(b, markers, "/proc/sys/fs/binfmt_misc/WSLInterop");
        set_kind(&kind, CK_WSL);
    }

    const char *kname = kind != CK_NONE ? kind_names[kind] : NULL;
    put_tri(b, v, "vm", vm);
    put_tri(b, v, "hypervisor_flag", hv_flag);
    put_str(b, v, "dmi_vendor", dmi_vendor);
    put_str(b, v, "dmi_product", dmi_product);
    put_str(b, v, "cpuid_vendor", cpuid_raw[0] ? cpuid_raw : NULL);
    put_str(b, v, "hypervisor_vendor", vm > 0 ? hv : NULL);
    put_str(b, v, "hypervisor_source", vm > 0 ? hv_source : NULL);
    put_bool(b, v, "container", kname != NULL);
    put_str(b, v, "container_kind", kname);
    put(b, v, "markers", markers);

    char note[512] = "";
    char vmpart[120] = "", ctpart[160] = "";
    if (vm > 0)
        snprintf(vmpart, sizeof vmpart, "a VM (%s)",
                 hv     ? hv
                 : lima ? "lima"
                        : "unknown hypervisor");
    if (kind == CK_WSL)
        snprintf(ctpart, sizeof ctpart, "WSL");
    else if (kname)
        snprintf(ctpart, sizeof ctpart, "a container (%s)", kname);
    if (kind == CK_WSL)
        snprintf(
            note, sizeof note,
            "under WSL: a GPU is only visible through the WSL GPU paravirtualisation (/dev/dxg)");
    else if (vm > 0 && kname)
        snprintf(note, sizeof note,
                 "inside %s within %s: a GPU is only visible if passed through to the VM and "
                 "into the container",
                 ctpart, vmpart);
    else if (vm > 0)
        snprintf(note, sizeof note, "inside %s: a GPU is only visible if passed through", vmpart);
    else if (kname)
        snprintf(note, sizeof note,
                 "inside %s: a GPU is only visible if its devices are passed into the container",
                 ctpart);
    put_str(b, v, "note", note[0] ? note : NULL);
    dg_free(dmi_vendor);
    dg_free(dmi_product);
    dg_free(sys_hv);
}

/* ---- OS -------------------------------------------------------------------------- */

#ifndef __APPLE__
/* An os-release value with its quotes and backslash escapes removed, in place. */
static char *unquote(char *s)
{
    s = dg_trim(s);
    size_t n = strlen(s);
    if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) {
        s[n - 1] = '\0';
        s++;
    }
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '\\' && r[1])
            r++;
        *w++ = *r;
    }
    *w = '\0';
    return s;
}
#endif

static void add_os(sb *b, cJSON *root)
{
    cJSON *o = put_obj(b, root, "os");
    if (!o)
        return;
    char name[256] = "", version[128] = "";
#ifdef __APPLE__
    snprintf(name, sizeof name, "macOS");
    size_t vl = sizeof version;
    if (sysctlbyname("kern.osproductversion", version, &vl, NULL, 0) != 0)
        version[0] = '\0';
#else
    char *rel = dg_read_file("/etc/os-release", 65536, NULL);
    if (!rel)
        rel = dg_read_file("/usr/lib/os-release", 65536, NULL);
    if (rel) {
        char tmp[256];
        for (char *line = rel; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            if (strncmp(line, "PRETTY_NAME=", 12) == 0) {
                snprintf(tmp, sizeof tmp, "%s", line + 12);
                snprintf(name, sizeof name, "%s", unquote(tmp));
            } else if (strncmp(line, "NAME=", 5) == 0 && !name[0]) {
                snprintf(tmp, sizeof tmp, "%s", line + 5);
                snprintf(name, sizeof name, "%s", unquote(tmp));
            } else if (strncmp(line, "VERSION_ID=", 11) == 0) {
                snprintf(tmp, sizeof tmp, "%s", line + 11);
                snprintf(version, sizeof version, "%s", unquote(tmp));
            }
            line = nl ? nl + 1 : NULL;
        }
        dg_free(rel);
    }
#endif
    put_str(b, o, "name", name[0] ? name : NULL);
    put_str(b, o, "version", version[0] ? version : NULL);
    struct utsname u;
    if (uname(&u) == 0) {
        char k[sizeof u.release + sizeof u.version + 2];
        snprintf(k, sizeof k, "%s %s", u.release, u.version);
        put_str(b, o, "kernel", k);
    } else {
        put_str(b, o, "kernel", NULL);
    }
#ifdef __GLIBC__
    char libc[64];
    snprintf(libc, sizeof libc, "glibc %s", gnu_get_libc_version());
    put_str(b, o, "libc", libc);
#elif defined(__APPLE__)
    put_str(b, o, "libc", "libSystem");
#else
    put_str(b, o, "libc", "unknown");
#endif
}

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

/* Physical cores from /proc/cpuinfo (physical id, core id) pairs; 0 if unknown. */
static size_t cores_from_cpuinfo(const char *cpuinfo)
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
        if (field_of(buf, "processor", val, sizeof val))
            snprintf(phys, sizeof phys, "0");
        else if (field_of(buf, "physical id", val, sizeof val))
            snprintf(phys, sizeof phys, "%.31s", val);
        else if (field_of(buf, "core id", val, sizeof val)) {
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
        char *v = read_value(path);
        if (!v) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/%s/topology/thread_siblings_list",
                     de->d_name);
            v = read_value(path);
        }
        if (v) {
            char pkg[64], key[400];
            snprintf(path, sizeof path, "/sys/devices/system/cpu/%s/topology/physical_package_id",
                     de->d_name);
            char *p = read_value(path);
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

static void add_cpu(sb *b, cJSON *root)
{
    cJSON *c = put_obj(b, root, "cpu");
    if (!c)
        return;
    char *cpuinfo = dg_read_file("/proc/cpuinfo", 1u << 22, NULL);
    char model[256] = "";
    if (cpuinfo) {
        char impl[64], part[64];
        if (!field_of(cpuinfo, "model name", model, sizeof model) &&
            !field_of(cpuinfo, "Hardware", model, sizeof model) &&
            !field_of(cpuinfo, "cpu model", model, sizeof model) &&
            field_of(cpuinfo, "CPU part", part, sizeof part)) {
            if (field_of(cpuinfo, "CPU implementer", impl, sizeof impl))
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
    size_t phys = cpuinfo ? cores_from_cpuinfo(cpuinfo) : 0;
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
        if (field_of(cpuinfo, "flags", flags, sizeof flags) ||
            field_of(cpuinfo, "Features", flags, sizeof flags)) {
            for (size_t i = 0; i < sizeof notable / sizeof notable[0]; i++)
                if (has_word(flags, notable[i]))
                    push_str(b, simd, notable[i]);
        }
    }
#if defined(__APPLE__) && defined(__aarch64__)
    if (simd)
        push_str(b, simd, "asimd");
#endif
    dg_free(cpuinfo);
    char *gov = read_value("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
    put_str(b, c, "cpufreq_governor", gov);
    dg_free(gov);
}

/* ---- memory ---------------------------------------------------------------------- */

#ifndef __APPLE__
/* A /proc/meminfo value in bytes; false when absent. */
static bool meminfo_bytes(const char *text, const char *key, double *out)
{
    char val[64];
    if (!text || !field_of(text, key, val, sizeof val))
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
        char *v = read_value(fpath);
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
static void add_cgroup_limit(sb *b, cJSON *mem)
{
    double limit = 0;
    int found = -1;
    const char *note = "no cgroup memory controller found";
    char *cg = dg_read_file("/proc/self/cgroup", 1u << 16, NULL);
    if (cg) {
        char v2path[1024] = "", v1path[1024] = "";
        bool v2 = false, v1 = false;
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
                    snprintf(v2path, sizeof v2path, "%s", c2 + 1);
                    v2 = true;
                } else {
                    char tmp[256];
                    snprintf(tmp, sizeof tmp, "%s", ctrls);
                    for (char *t = tmp; *t; t++)
                        if (*t == ',')
                            *t = ' ';
                    if (has_word(tmp, "memory")) {
                        snprintf(v1path, sizeof v1path, "%s", c2 + 1);
                        v1 = true;
                    }
                }
            }
            line = nl ? nl + 1 : NULL;
        }
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

static void add_memory(sb *b, cJSON *root)
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
    ht = meminfo_bytes(mi, "MemTotal", &total);
    ha = meminfo_bytes(mi, "MemAvailable", &avail);
    hst = meminfo_bytes(mi, "SwapTotal", &swt);
    hsu = hst && meminfo_bytes(mi, "SwapFree", &swf);
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
        bool ok = false;
        if (psi) {
            for (char *line = psi; line && *line;) {
                char *nl = strchr(line, '\n');
                if (!strncmp(line, lines[i], 4) && line[4] == ' ') {
                    char *s10 = strstr(line, "avg10="), *s60 = strstr(line, "avg60=");
                    if (s10 && s60 && (!nl || (s10 < nl && s60 < nl))) {
                        a10 = strtod(s10 + 6, NULL);
                        a60 = strtod(s60 + 6, NULL);
                        ok = true;
                    }
                }
                line = nl ? nl + 1 : NULL;
            }
        }
        put_metric(b, p, keys[i][0], a10, ok, "percent");
        put_metric(b, p, keys[i][1], a60, ok, "percent");
    }
    dg_free(psi);
    add_cgroup_limit(b, m);
}

/* ---- load ------------------------------------------------------------------------ */

static void add_load(sb *b, cJSON *root)
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

/* ---- git ------------------------------------------------------------------------- */

/* Runs git -C dir args...; its trimmed stdout in *out (dg_malloc'd). */
static dg_status git_run(const char *dir, const char *a1, const char *a2, const char *a3,
                         const char *a4, bool no_locks, char **out, int *xs)
{
    const char *argv[10];
    int n = 0;
    argv[n++] = "git";
    if (no_locks)
        argv[n++] = "--no-optional-locks";
    argv[n++] = "-C";
    argv[n++] = dir;
    const char *extra[4] = {a1, a2, a3, a4};
    for (int i = 0; i < 4 && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int sig = 0;
    dg_status st = dg_run_capture(argv, GIT_TIMEOUT_S, out, 4096, xs, &sig);
    if (st == DG_OK && *out) {
        char *t = dg_trim(*out);
        memmove(*out, t, strlen(t) + 1);
    }
    return st;
}

/* True for a 40- or 64-digit lowercase hex object name. */
static bool is_hash(const char *s)
{
    size_t n = strlen(s);
    if (n != 40 && n != 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

static void add_git(sb *b, cJSON *root, const char *cwd)
{
    cJSON *g = put_obj(b, root, "git");
    if (!g)
        return;
    const char *dir = cwd && cwd[0] ? cwd : ".";
    char *out = NULL;
    int xs = -1;
    dg_status st = git_run(dir, "rev-parse", "--is-inside-work-tree", NULL, NULL, false, &out, &xs);
    int run_errno = errno;
    if (st != DG_OK) {
        dg_free(out);
        if (st == DG_ERR_NOMEM) {
            b->oom = true;
            return;
        }
        char msg[200];
        if (st == DG_ERR_NOT_FOUND)
            snprintf(msg, sizeof msg, "git not found in PATH");
        else if (st == DG_ERR_TIMEOUT)
            snprintf(msg, sizeof msg, "git timed out after %.0f s", GIT_TIMEOUT_S);
        else
            snprintf(msg, sizeof msg, "could not run git: %s", strerror(run_errno));
        put(b, g, "is_repo", cJSON_CreateNull());
        put_str(b, g, "commit", NULL);
        put_str(b, g, "branch", NULL);
        put(b, g, "dirty", cJSON_CreateNull());
        put_str(b, g, "error", msg);
        return;
    }
    bool repo = xs == 0;
    bool worktree = repo && !strcmp(out, "true");
    dg_free(out);
    out = NULL;
    put_bool(b, g, "is_repo", repo);

    char *commit = NULL, *branch = NULL;
    int dirty = -1;
    const char *err = NULL;
    if (repo) {
        if (git_run(dir, "rev-parse", "--verify", "-q", "HEAD", false, &out, &xs) == DG_OK &&
            xs == 0 && is_hash(out))
            commit = out;
        else
            dg_free(out);
        out = NULL;
        if (git_run(dir, "symbolic-ref", "--short", "-q", "HEAD", false, &out, &xs) == DG_OK &&
            xs == 0 && out[0])
            branch = out;
        else
            dg_free(out);
        out = NULL;
        if (worktree) {
            st = git_run(dir, "status", "--porcelain", "--untracked-files=no", NULL, true, &out,
                         &xs);
            if (st == DG_OK && xs == 129) { /* git older than 2.15 */
                dg_free(out);
                out = NULL;
                st = git_run(dir, "status", "--porcelain", "--untracked-files=no", NULL, false,
                             &out, &xs);
            }
            if (st == DG_OK && xs == 0)
                dirty = out[0] != '\0';
            else
                err = st == DG_ERR_TIMEOUT ? "git status timed out" : "git status failed";
            dg_free(out);
            out = NULL;
        }
    }
    put_str(b, g, "commit", commit);
    put_str(b, g, "branch", branch);
    put_tri(b, g, "dirty", dirty);
    if (err)
        put_str(b, g, "error", err);
    dg_free(commit);
    dg_free(branch);
}

/* ---- processes ------------------------------------------------------------------- */

typedef struct psamp {
    int pid;
    unsigned long long start, ticks, rss_pages;
    double cpu;
    bool cpu_ok;
    char comm[64];
} psamp;

typedef struct pslist {
    psamp *v;
    size_t n, cap;
    bool nomem;
} pslist;

/* Reads /proc/pid/stat into p; false when the process is gone or unreadable. */
static bool read_stat(int pid, psamp *p)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    char *lp = strchr(buf, '('), *rp = strrchr(buf, ')');
    if (!lp || !rp || rp < lp)
        return false;
    char comm[64];
    size_t cl = (size_t)(rp - lp - 1);
    if (cl >= sizeof comm)
        cl = sizeof comm - 1;
    memcpy(comm, lp + 1, cl);
    comm[cl] = '\0';
    dg_copy_clean(p->comm, sizeof p->comm, comm);

    /* Field 3 is the state letter; 14/15 utime/stime, 22 starttime, 24 rss. */
    char *s = rp + 1;
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

/* The first CMDLINE_MAX characters of a process's command line, cleaned. */
static bool proc_cmdline(int pid, char *dst, size_t n)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    size_t len = 0;
    char *raw = dg_read_file(path, 4096, &len);
    if (!raw)
        return false;
    for (size_t i = 0; i < len; i++)
        if (raw[i] == '\0')
            raw[i] = ' ';
    if (len > CMDLINE_MAX)
        raw[CMDLINE_MAX] = '\0';
    dg_copy_clean(dst, n, dg_trim(raw));
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
    if (field_of(st, "Uid", val, sizeof val)) {
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
    put_str(b, o, "cmdline", proc_cmdline(p->pid, cmd, sizeof cmd) ? cmd : NULL);
    put_metric(b, o, "cpu_percent", p->cpu, p->cpu_ok, "percent");
    long page = sysconf(_SC_PAGESIZE);
    put_metric(b, o, "rss", (double)p->rss_pages * (double)(page > 0 ? page : 4096), true, "bytes");
    put_bool(b, o, "self", p->pid == (int)getpid());
    return o;
}

static void add_processes(sb *b, cJSON *root)
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

/* ---- NVIDIA GPU processes through NVML ------------------------------------------- */

/* Appends one kind of running processes of a device to arr. */
static void gpu_procs(sb *b, const dg_nvml *api, dg_nvml_procs_fn fn, dg_nvml_device dev,
                      const char *type, cJSON *arr, cJSON *devobj)
{
    if (!fn || !arr)
        return;
    dg_nvml_proc *v = NULL;
    unsigned int count = 0;
    dg_nvml_ret r = dg_nvml_processes(fn, dev, &v, &count);
    if (r == -1) {
        b->oom = true;
        return;
    }
    if (r != DG_NVML_OK) {
        char e[200], key[64];
        snprintf(key, sizeof key, "%s_processes_error", type);
        put_str(b, devobj, key, dg_nvml_error(api, r, e, sizeof e));
        return;
    }
    for (unsigned int i = 0; i < count; i++) {
        cJSON *o = push(b, arr, cJSON_CreateObject());
        if (!o)
            break;
        put_num(b, o, "pid", v[i].pid);
        char path[64];
        snprintf(path, sizeof path, "/proc/%u/comm", v[i].pid);
        char *comm = read_value(path);
        put_str(b, o, "name", comm);
        dg_free(comm);
        bool mv = v[i].usedGpuMemory != DG_NVML_NOT_AVAILABLE;
        put_metric(b, o, "used_memory", mv ? (double)v[i].usedGpuMemory : 0, mv, "bytes");
        put_str(b, o, "type", type);
    }
    dg_free(v);
}

static void add_gpu_processes(sb *b, cJSON *root)
{
    cJSON *g = put_obj(b, root, "gpu_processes");
    if (!g)
        return;
    dg_nvml api;
    char why[400];
    dg_nvml_open_result or = dg_nvml_open(&api, why, sizeof why);
    if (or != DG_NVML_LOADED) {
        char msg[420];
        snprintf(msg, sizeof msg, "error: %s", why);
        put_str(b, g, "nvml", or == DG_NVML_ABSENT ? "absent" : msg);
        if (or == DG_NVML_ABSENT)
            put_str(b, g, "error", why);
        put_str(b, g, "driver_version", NULL);
        put_arr(b, g, "devices");
        return;
    }
    char e[200];
    put_str(b, g, "nvml", "loaded");
    char drv[96] = "";
    bool have_drv = api.driver && api.driver(drv, sizeof drv) == DG_NVML_OK;
    drv[sizeof drv - 1] = '\0';
    put_str(b, g, "driver_version", have_drv ? drv : NULL);
    cJSON *devs = put_arr(b, g, "devices");
    unsigned int n = 0;
    dg_nvml_ret r = api.count(&n);
    if (r != DG_NVML_OK)
        put_str(b, g, "error", dg_nvml_error(&api, r, e, sizeof e));
    for (unsigned int i = 0; r == DG_NVML_OK && i < n && devs && i < 1024; i++) {
        cJSON *d = push(b, devs, cJSON_CreateObject());
        if (!d)
            break;
        put_num(b, d, "index", i);
        dg_nvml_device h = NULL;
        dg_nvml_ret hr = api.handle(i, &h);
        if (hr != DG_NVML_OK) {
            put_str(b, d, "error", dg_nvml_error(&api, hr, e, sizeof e));
            continue;
        }
        char name[128] = "";
        bool hn = api.name && api.name(h, name, 96) == DG_NVML_OK;
        name[sizeof name - 1] = '\0';
        put_str(b, d, "name", hn ? name : NULL);
        dg_nvml_memory mem = {0, 0, 0};
        bool hm = api.mem && api.mem(h, &mem) == DG_NVML_OK;
        put_metric(b, d, "memory_total", (double)mem.total, hm, "bytes");
        put_metric(b, d, "memory_used", (double)mem.used, hm, "bytes");
        dg_nvml_util ut = {0, 0};
        bool hu = api.util && api.util(h, &ut) == DG_NVML_OK;
        put_metric(b, d, "utilization_gpu", ut.gpu, hu, "percent");
        cJSON *procs = put_arr(b, d, "processes");
        gpu_procs(b, &api, api.compute, h, "compute", procs, d);
        gpu_procs(b, &api, api.graphics, h, "graphics", procs, d);
    }
    dg_nvml_close(&api);
}

/* ---- assembly -------------------------------------------------------------------- */

cJSON *dg_env_sysinfo(dg_ctx *ctx, const char *cwd)
{
    sb b = {false};
    cJSON *root = cJSON_CreateObject();
    if (!root) {
        dg_fail(ctx, DG_ERR_NOMEM, "out of memory collecting host facts");
        return NULL;
    }
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    put_str(&b, root, "host", host[0] ? host : NULL);
    char ts[32];
    dg_utc_iso(ts, sizeof ts);
    put_str(&b, root, "timestamp", ts);

    char host_arch[32] = "unknown";
    add_arch(&b, root, host_arch, sizeof host_arch);
    add_virtualization(&b, root, host[0] ? host : NULL, host_arch);
    add_os(&b, root);
    add_cpu(&b, root);
    add_memory(&b, root);
    add_load(&b, root);
    add_git(&b, root, cwd);
    add_processes(&b, root);
    add_gpu_processes(&b, root);
    if (b.oom) {
        cJSON_Delete(root);
        dg_fail(ctx, DG_ERR_NOMEM, "out of memory collecting host facts");
        return NULL;
    }
    return root;
}

cJSON *dg_env_virtualization(void)
{
    sb b = {false};
    cJSON *root = cJSON_CreateObject();
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    struct utsname u;
    const char *arch = uname(&u) == 0 ? dg_arch_normalise(u.machine) : "unknown";
    add_virtualization(&b, root, host[0] ? host : NULL, arch);
    cJSON *v = cJSON_DetachItemFromObject(root, "virtualization");
    cJSON_Delete(root);
    if (b.oom) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}
