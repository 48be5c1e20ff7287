/* Host facts: the kernel's and the process's architecture, and whether the
 * process runs translated (binfmt_misc handlers, emulator mappings, ELF
 * machine against kernel machine). */
#include "env/sysinfo.h"

#include "env/binfmt.h"

#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>

#ifdef __APPLE__
#include <sys/sysctl.h>
#endif

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

void dg_si_bm_parse(const char *text, bm_entry *e)
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

const char *dg_si_bm_target_arch(const bm_entry *e)
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

bool dg_si_bm_matches(const bm_entry *e, const unsigned char *hdr, size_t hlen)
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
void dg_si_arch(sb *b, cJSON *root, char *host_arch, size_t host_len)
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
            dg_si_bm_parse(text, &e);
            dg_free(text);
            const char *kind = emulator_kind(de->d_name, e.interp);
            cJSON *o = push(b, emus, cJSON_CreateObject());
            if (!o)
                break;
            put_str(b, o, "name", de->d_name);
            put_str(b, o, "interpreter", e.interp[0] ? e.interp : NULL);
            put_bool(b, o, "enabled", e.enabled);
            put_str(b, o, "kind", kind);
            put_str(b, o, "target_arch", dg_si_bm_target_arch(&e));
            put_str(b, o, "flags", e.flags);
            bool match = e.enabled && exe_known && dg_si_bm_matches(&e, hdr, hlen);
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
