/* Host facts for the environment proof (docs/schema/env.md, "sysinfo"): arch
 * and translation, virtualisation and containers, OS, CPU, memory, load, git
 * state, busiest processes and NVIDIA GPU processes. A fact that cannot be
 * read is recorded as null or as an invalid metric, never as 0. */
#include "env/sysinfo.h"
#include "env/binfmt.h"
#include "env/env.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* ---- small readers ---------------------------------------------------------- */

/* The trimmed content of a small file (dg_malloc'd), or NULL. */
char *dg_si_read_value(const char *path)
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
bool dg_si_field_of(const char *text, const char *key, char *dst, size_t n)
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
bool dg_si_has_word(const char *list, const char *word)
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

/* ---- assembly -------------------------------------------------------------------- */

cJSON *dg_env_sysinfo(dg_ctx *ctx, const char *cwd, int self_pid)
{
    sb b = {.cmdlines = ctx && ctx->env_cmdlines, .self_pid = self_pid};
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
    dg_si_arch(&b, root, host_arch, sizeof host_arch);
    dg_si_virtualization(&b, root, host[0] ? host : NULL, host_arch);
    dg_si_os(&b, root);
    dg_si_cpu(&b, root);
    dg_si_memory(&b, root);
    dg_si_load(&b, root);
    dg_si_git(&b, root, cwd);
    dg_si_processes(&b, root);
    dg_si_gpu_processes(&b, root);
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
    dg_si_virtualization(&b, root, host[0] ? host : NULL, arch);
    cJSON *v = cJSON_DetachItemFromObject(root, "virtualization");
    cJSON_Delete(root);
    if (b.oom) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}
