/* The small /proc and /sys readers every sysinfo_*.c filler shares
 * (sysinfo.h). The bottom of the collector: it calls none of the fillers. */
#include "env/sysinfo.h"

#include <stdlib.h>
#include <string.h>

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
