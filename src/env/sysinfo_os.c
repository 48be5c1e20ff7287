/* Host facts: OS name and version (os-release), kernel, libc. */
#include "env/sysinfo.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif
#ifdef __APPLE__
#include <sys/sysctl.h>
#endif

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

void dg_si_os_release(char *rel, char *name, size_t nn, char *version, size_t vn)
{
    char tmp[256];
    for (char *line = rel; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "PRETTY_NAME=", 12) == 0) {
            snprintf(tmp, sizeof tmp, "%s", line + 12);
            snprintf(name, nn, "%s", unquote(tmp));
        } else if (strncmp(line, "NAME=", 5) == 0 && !name[0]) {
            snprintf(tmp, sizeof tmp, "%s", line + 5);
            snprintf(name, nn, "%s", unquote(tmp));
        } else if (strncmp(line, "VERSION_ID=", 11) == 0) {
            snprintf(tmp, sizeof tmp, "%s", line + 11);
            snprintf(version, vn, "%s", unquote(tmp));
        }
        line = nl ? nl + 1 : NULL;
    }
}
#endif

void dg_si_os(sb *b, cJSON *root)
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
        dg_si_os_release(rel, name, sizeof name, version, sizeof version);
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
