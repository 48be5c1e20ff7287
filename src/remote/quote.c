/* The one quoting function of the remote path: argv into a command line that
 * a POSIX shell (the one sshd starts for the remote command) splits back into
 * exactly those words, whatever they hold. docs/team.md. */
#include "core/core.h"

#include <string.h>

char *dg_shell_quote(const char *const *argv)
{
    if (!argv)
        return NULL;
    size_t n = 1;
    for (const char *const *a = argv; *a; a++) {
        n += 3; /* the quotes and a space */
        for (const char *p = *a; *p; p++)
            n += *p == '\'' ? 4 : 1; /* ' becomes '\'' */
    }
    char *out = dg_malloc(n);
    if (!out)
        return NULL;
    char *o = out;
    for (const char *const *a = argv; *a; a++) {
        if (a != argv)
            *o++ = ' ';
        *o++ = '\'';
        for (const char *p = *a; *p; p++) {
            if (*p == '\'') {
                memcpy(o, "'\\''", 4);
                o += 4;
            } else {
                *o++ = *p;
            }
        }
        *o++ = '\'';
    }
    *o = '\0';
    return out;
}
