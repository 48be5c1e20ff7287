/* libFuzzer harness for the /proc and /sys text readers: the first byte picks
 * the parser, the rest is the file's text, copied into an exact-size
 * NUL-terminated buffer so a read past its end shows under ASan. Parsers:
 * the run sampler's /proc/PID/stat (src/supervise/sample.c) and the host
 * facts' /proc/PID/stat, cpuinfo fields and flags, physical cores, meminfo,
 * PSI, /proc/self/cgroup, os-release and binfmt_misc entries
 * (src/env/sysinfo*.c). Every result must be self-consistent. */
#include "env/sysinfo.h"
#include "fuzz.h"
#include "supervise/supervise.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Aborts unless s is NUL-terminated within n bytes. */
static void terminated(const char *s, size_t n)
{
    if (!memchr(s, '\0', n))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned pick = data[0] % 9;
    size_t n = size - 1;
    char *txt = malloc(n + 1);
    if (!txt)
        return 0;
    memcpy(txt, data + 1, n);
    txt[n] = '\0';
    switch (pick) {
    case 0: {
        dg_proc_entry e;
        memset(&e, 0, sizeof e);
        if (dg_proc_parse_stat(txt, &e, 4096) && e.state == '\0')
            abort();
        break;
    }
    case 1: {
        psamp p;
        memset(&p, 0, sizeof p);
        if (dg_si_parse_stat(txt, 42, &p) && p.pid != 42)
            abort();
        terminated(p.comm, sizeof p.comm);
        break;
    }
    case 2: {
        char v[64], flags[8192];
        if (dg_si_field_of(txt, "model name", v, sizeof v))
            terminated(v, sizeof v);
        if (dg_si_field_of(txt, "flags", flags, sizeof flags))
            (void)dg_si_has_word(flags, "avx2");
        (void)dg_si_has_word(txt, "hypervisor");
        break;
    }
    case 3: {
        size_t cores = dg_si_cores_from_cpuinfo(txt);
        if (cores > n)
            abort(); /* every core needs at least one "core id" line */
        break;
    }
    case 4: {
        double v = -1;
        if (dg_si_meminfo_bytes(txt, "MemTotal", &v) && !(v >= 0))
            abort();
        break;
    }
    case 5: {
        double a = 0, b = 0;
        (void)dg_si_psi_avgs(txt, "some", &a, &b);
        (void)dg_si_psi_avgs(txt, "full", &a, &b);
        break;
    }
    case 6: {
        char v2[1024], v1[1024];
        bool h2 = false, h1 = false;
        v2[0] = v1[0] = '\0';
        dg_si_cgroup_paths(txt, v2, sizeof v2, &h2, v1, sizeof v1, &h1);
        terminated(v2, sizeof v2);
        terminated(v1, sizeof v1);
        break;
    }
    case 7: {
        char name[256] = "", version[128] = "";
        dg_si_os_release(txt, name, sizeof name, version, sizeof version);
        terminated(name, sizeof name);
        terminated(version, sizeof version);
        break;
    }
    case 8: {
        bm_entry e;
        dg_si_bm_parse(txt, &e);
        terminated(e.interp, sizeof e.interp);
        terminated(e.flags, sizeof e.flags);
        if (e.mlen > sizeof e.magic)
            abort();
        (void)dg_si_bm_target_arch(&e);
        static const unsigned char hdr[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
        (void)dg_si_bm_matches(&e, hdr, sizeof hdr);
        break;
    }
    }
    free(txt);
    return 0;
}
