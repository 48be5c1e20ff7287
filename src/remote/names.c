/* The words of the remote protocol checked (docs/team.md): a run token, a
 * relative path inside a shipped folder, a manifest line. Pure; below every
 * other file of src/remote/, which all may call it. */
#include "remote/remote_int.h"

#include <stdio.h>
#include <string.h>

bool dg_remote_token_ok(const char *s)
{
    if (!s || !s[0] || strlen(s) > 40)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == '-'))
            return false;
    return true;
}

bool dg_remote_rel_ok(const char *s)
{
    if (!s || !s[0] || s[0] == '/' || strlen(s) > 1000 || s[strlen(s) - 1] == '/')
        return false;
    /* no empty, ".", ".." or hidden component */
    for (const char *p = s; *p;) {
        size_t k = strcspn(p, "/");
        if (k == 0 || p[0] == '.')
            return false;
        p += k;
        if (*p == '/')
            p++;
    }
    return true;
}

bool dg_remote_manifest_line(const char *line, char sha[65], unsigned long long *size,
                             const char **rel)
{
    int used = 0;
    *rel = NULL;
    if (sscanf(line, "%64s %llu %n", sha, size, &used) != 2 || strlen(sha) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((sha[i] >= '0' && sha[i] <= '9') || (sha[i] >= 'a' && sha[i] <= 'f')))
            return false;
    if (!dg_remote_rel_ok(line + used))
        return false;
    *rel = line + used;
    return true;
}
