/* How devgate run arms the zero-code probe (docs/events.md "The zero-code
 * probe"): a Python interpreter's command line is rewritten to run the
 * program through `python -m devgate_probe.auto`; any other program gets
 * devgate's sitecustomize on PYTHONPATH, which arms the probe in the Python
 * processes it starts (torchrun, a shell wrapper). */
#include "supervise/supervise.h"

#include <stdlib.h>
#include <string.h>

bool dg_is_python(const char *argv0)
{
    if (!argv0)
        return false;
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    if (strncmp(base, "python", 6) != 0)
        return false;
    const char *p = base + 6;
    /* python, python3, python3.11, python3.11d ... but not python-config. */
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0' || (p[0] == 'd' && p[1] == '\0') || (p[0] == 't' && p[1] == '\0');
}

int dg_python_program_index(const char *const argv[])
{
    if (!argv || !argv[0])
        return -1;
    for (int i = 1; argv[i]; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            return argv[i + 1] ? i + 1 : -1;
        if (a[0] != '-')
            return i; /* SCRIPT */
        if (strcmp(a, "-") == 0)
            return -1; /* the program comes on stdin */
        if (a[1] == '-') {
            if (strcmp(a, "--check-hash-based-pycs") == 0) {
                if (!argv[++i])
                    return -1;
            }
            continue; /* --help, --version ...: nothing to rewrite, the interpreter answers */
        }
        /* A cluster of one-letter options: -u, -uB, -Wignore, -W ignore, -X dev, -c CODE. */
        for (const char *f = a + 1; *f; f++) {
            if (*f == 'E' || *f == 'I')
                return -1; /* PYTHONPATH would be ignored */
            if (*f == 'c' || *f == 'm')
                return f == a + 1 && !f[1] ? i : -1; /* -uc, -cCODE: left as given */
            if (*f == 'W' || *f == 'X') {
                if (!f[1] && !argv[++i])
                    return -1;
                break;
            }
        }
    }
    return -1;
}

/* "NAME=a:b:c" from the parts that are not NULL or empty, dg_malloc'd. */
static char *path_var(const char *name, const char *a, const char *b, const char *c)
{
    const char *parts[] = {a, b, c};
    size_t len = strlen(name) + 2;
    for (size_t i = 0; i < 3; i++)
        len += parts[i] ? strlen(parts[i]) + 1 : 0;
    char *s = dg_malloc(len);
    if (!s)
        return NULL;
    size_t off = (size_t)snprintf(s, len, "%s=", name);
    bool first = true;
    for (size_t i = 0; i < 3; i++) {
        if (!parts[i] || !parts[i][0])
            continue;
        off += (size_t)snprintf(s + off, len - off, "%s%s", first ? "" : ":", parts[i]);
        first = false;
    }
    return s;
}

#define PLAN_ENV 8 /* the plan's own edits, at most */

/* The plan without the caller's extra edits (o->env). */
static bool plan_base(const dg_run_opts *o, dg_probe_plan *p)
{
    size_t n = 0;
    while (o->argv[n])
        n++;
    p->argv = dg_calloc(n + 3, sizeof *p->argv);
    if (!p->argv)
        return false;
    for (size_t i = 0; i <= n; i++)
        p->argv[i] = o->argv[i];
    size_t ne = 0;
    if (o->probe == DG_PROBE_OFF) {
        p->mode = "off";
        p->env[ne++] = "DEVGATE_EVENTS_FD";
        p->env[ne++] = "DEVGATE_EVENTS_FILE";
        p->env[ne++] = "DEVGATE_PROBE=off";
        return true;
    }
    if (o->probe == DG_PROBE_MANUAL) {
        p->mode = "manual";
        p->env[ne++] = "DEVGATE_PROBE=manual";
        return true;
    }
    p->mode = "auto";
    p->env[ne++] = "DEVGATE_PROBE=auto";
    p->env[ne++] = o->empty_cache ? "DEVGATE_PROBE_EMPTY_CACHE=1" : "DEVGATE_PROBE_EMPTY_CACHE";
    if (!o->probe_path || !o->probe_path[0]) {
        snprintf(p->why, sizeof p->why,
                 "the devgate_probe package was not found (set DEVGATE_PROBE_PATH to the "
                 "directory holding it)");
        p->env[0] = "DEVGATE_PROBE=manual";
        return true;
    }
    const char *inherited = getenv("PYTHONPATH");
    if (dg_is_python(o->argv[0])) {
        int at = dg_python_program_index(o->argv);
        if (at > 0) {
            /* argv[0..at) -m devgate_probe.auto argv[at..] */
            for (size_t i = n; i >= (size_t)at; i--)
                p->argv[i + 2] = o->argv[i];
            p->argv[at] = "-m";
            p->argv[at + 1] = "devgate_probe.auto";
            p->owned[0] = path_var("PYTHONPATH", o->probe_path, inherited, NULL);
            if (!p->owned[0])
                return false;
            p->env[ne++] = p->owned[0];
            p->how = "argv";
            return true;
        }
    }
    /* Any other program, or an interpreter whose command line cannot be
     * rewritten: the sitecustomize arms Python processes of the tree. */
    size_t sl = strlen(o->probe_path) + 32;
    p->owned[1] = dg_malloc(sl);
    if (!p->owned[1])
        return false;
    snprintf(p->owned[1], sl, "%s/devgate_probe/_site", o->probe_path);
    p->owned[0] = path_var("PYTHONPATH", p->owned[1], o->probe_path, inherited);
    if (!p->owned[0])
        return false;
    p->env[ne++] = p->owned[0];
    p->how = "sitecustomize";
    return true;
}

bool dg_probe_plan_make(const dg_run_opts *o, dg_probe_plan *p)
{
    memset(p, 0, sizeof *p);
    size_t extra = 0;
    while (o->env && o->env[extra])
        extra++;
    p->env = dg_calloc(PLAN_ENV + extra + 1, sizeof *p->env);
    if (!p->env || !plan_base(o, p))
        return false;
    size_t ne = 0;
    while (p->env[ne])
        ne++;
    for (size_t i = 0; i < extra; i++)
        p->env[ne++] = o->env[i];
    return true;
}

void dg_probe_plan_free(dg_probe_plan *p)
{
    dg_free(p->env);
    dg_free(p->argv);
    for (size_t i = 0; i < sizeof p->owned / sizeof p->owned[0]; i++)
        dg_free(p->owned[i]);
    memset(p, 0, sizeof *p);
}
