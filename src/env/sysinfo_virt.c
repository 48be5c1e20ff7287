/* Host facts: virtual machine (CPU flag, DMI, /sys/hypervisor, CPUID) and
 * container (marker files, pid 1 environment, cgroups, WSL) detection. */
#include "env/sysinfo.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#define DG_HAVE_CPUID 1
#endif

/* ---- virtualisation and containers -------------------------------------------- */

/* Hypervisors named by DMI strings: a word of the vendor or of the product
 * names it (both words with all), in the order they are tried. */
static const struct {
    const char *vendor, *product, *name;
    bool all;
} dmi_names[] = {
    {.vendor = "Google", .product = "Google Compute Engine", .name = "Google Compute Engine"},
    {.vendor = "QEMU", .product = "QEMU", .name = "QEMU"},
    {.vendor = "KVM", .product = "KVM", .name = "KVM"},
    {.vendor = "VMware", .product = "VMware", .name = "VMware"},
    {.vendor = "innotek", .product = "VirtualBox", .name = "VirtualBox"},
    {.vendor = "Microsoft Corporation",
     .product = "Virtual Machine",
     .name = "Microsoft Hyper-V",
     .all = true},
    {.vendor = "Xen", .product = "HVM domU", .name = "Xen"},
    {.vendor = "Parallels", .product = "Parallels", .name = "Parallels"},
    {.vendor = "bhyve", .product = "bhyve", .name = "bhyve"},
};

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
    for (size_t i = 0; i < sizeof dmi_names / sizeof dmi_names[0]; i++) {
        bool in_v = strcasestr(v, dmi_names[i].vendor), in_p = strcasestr(p, dmi_names[i].product);
        if (dmi_names[i].all ? in_v && in_p : in_v || in_p)
            return dmi_names[i].name;
    }
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

/* The container markers found (into markers) and the most specific kind
 * they name (CK_NONE: none): marker files, the pid 1 and own environment,
 * systemd's, Kubernetes', the cgroups and WSL's. */
static int container_markers(sb *b, cJSON *markers)
{
    char m[400];
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
    char *sdc = dg_si_read_value("/run/systemd/container");
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
    char *ver = dg_si_read_value("/proc/version");
    if (ver && (strcasestr(ver, "microsoft") || strstr(ver, "WSL"))) {
        push_str(b, markers, "WSL in /proc/version");
        set_kind(&kind, CK_WSL);
    }
    dg_free(ver);
    if (access("/proc/sys/fs/binfmt_misc/WSLInterop", F_OK) == 0) {
        push_str(b, markers, "/proc/sys/fs/binfmt_misc/WSLInterop");
        set_kind(&kind, CK_WSL);
    }

    return kind;
}

/* The note on what a GPU needs to be seen from here: vm > 0 in a VM (hv its
 * hypervisor's name), kind the container's. */
static void put_note(sb *b, cJSON *v, int vm, const char *hv, int kind)
{
    const char *kname = kind != CK_NONE ? kind_names[kind] : NULL;
    char note[512] = "";
    char vmpart[120] = "", ctpart[160] = "";
    if (vm > 0)
        snprintf(vmpart, sizeof vmpart, "a VM (%s)", hv);
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
}

void dg_si_virtualization(sb *b, cJSON *root, const char *hostname, const char *host_arch)
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
        if (dg_si_field_of(cpuinfo, "flags", flags, sizeof flags))
            hv_flag = dg_si_has_word(flags, "hypervisor");
        dg_free(cpuinfo);
    }
    char *dmi_vendor = dg_si_read_value("/sys/class/dmi/id/sys_vendor");
    char *dmi_product = dg_si_read_value("/sys/class/dmi/id/product_name");
    char *sys_hv = dg_si_read_value("/sys/hypervisor/type");
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

    int kind = container_markers(b, markers);

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

    put_note(b, v, vm, hv ? hv : lima ? "lima" : "unknown hypervisor", kind);
    dg_free(dmi_vendor);
    dg_free(dmi_product);
    dg_free(sys_hv);
}
