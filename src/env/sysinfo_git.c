/* Host facts: git state of the working directory (repository, commit,
 * branch, dirty), through git run without a shell and with a timeout. */
#include "env/sysinfo.h"

#include "env/proc_run.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GIT_TIMEOUT_S 5.0

/* ---- git ------------------------------------------------------------------------- */

/* Most filter drivers neutralised before git status is given up. */
#define GIT_MAX_FILTERS 16

/* Options that keep git from running programs a repository's own config
 * names (an extracted archive may carry a .git/config): the fsmonitor hook,
 * and the clean/smudge/process commands of every filter driver the config
 * defines (status hashes changed files through their clean filter). The
 * command line outranks every config file. */
typedef struct git_guard {
    const char *argv[4 + 8 * GIT_MAX_FILTERS];
    int n;
    char *store; /* the filter options' text */
    bool too_many;
} git_guard;

/* Runs git [guard] [--no-optional-locks] -C dir args... (args NULL-terminated);
 * its trimmed stdout in *out (dg_malloc'd), at most max_out bytes. */
static dg_status git_run(const git_guard *gd, const char *dir, const char *const *args,
                         bool no_locks, size_t max_out, char **out, int *xs)
{
    const char *argv[sizeof gd->argv / sizeof gd->argv[0] + 16];
    int n = 0;
    argv[n++] = "git";
    for (int i = 0; gd && i < gd->n; i++)
        argv[n++] = gd->argv[i];
    if (no_locks)
        argv[n++] = "--no-optional-locks";
    argv[n++] = "-C";
    argv[n++] = dir;
    for (int i = 0; args[i] && n < (int)(sizeof argv / sizeof argv[0]) - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int sig = 0;
    dg_status st = dg_run_capture(argv, GIT_TIMEOUT_S, out, max_out, xs, &sig);
    if (st == DG_OK && *out) {
        char *t = dg_trim(*out);
        memmove(*out, t, strlen(t) + 1);
    }
    return st;
}

/* The options every git call gets: no fsmonitor hook, no untracked cache. */
static void git_guard_base(git_guard *gd)
{
    memset(gd, 0, sizeof *gd);
    gd->argv[gd->n++] = "-c";
    gd->argv[gd->n++] = "core.fsmonitor=false";
    gd->argv[gd->n++] = "-c";
    gd->argv[gd->n++] = "core.untrackedCache=false";
}

/* Fills gd: the fixed options, then empty clean/smudge/process commands for
 * every filter driver `git config` lists (reading config runs nothing). */
static void git_guard_init(git_guard *gd, const char *dir)
{
    git_guard_base(gd);
    static const char *const list[] = {"config", "--null", "--get-regexp",
                                       "^filter\\..*\\.(clean|smudge|process|required)$", NULL};
    char *out = NULL;
    int xs = -1;
    const size_t cap = 65536;
    if (git_run(gd, dir, list, false, cap, &out, &xs) != DG_OK || xs != 0 || !out) {
        dg_free(out);
        return;
    }
    size_t len = strlen(out);
    gd->too_many = len >= cap;
    /* Each entry is "filter.NAME.KEY\nVALUE\0"; NAME may hold dots. */
    static const char *const keys[] = {"clean", "smudge", "process", "required"};
    size_t need = 0;
    char *names[GIT_MAX_FILTERS];
    int nn = 0;
    for (char *e = out; e < out + len && !gd->too_many; e += strlen(e) + 1) {
        char *nl = strchr(e, '\n');
        if (nl)
            *nl = '\0';
        char *last = strrchr(e, '.');
        if (strncmp(e, "filter.", 7) || !last || last <= e + 7)
            continue;
        *last = '\0';
        char *name = e + 7;
        bool seen = false;
        for (int i = 0; i < nn; i++)
            seen = seen || !strcmp(names[i], name);
        if (seen)
            continue;
        if (nn == GIT_MAX_FILTERS) {
            gd->too_many = true;
            break;
        }
        names[nn++] = name;
        need += 4 * (strlen(name) + 24);
    }
    if (!gd->too_many && nn) {
        gd->store = dg_malloc(need);
        if (!gd->store) {
            gd->too_many = true;
        } else {
            char *w = gd->store;
            for (int i = 0; i < nn; i++)
                for (int k = 0; k < 4; k++) {
                    int m = snprintf(w, strlen(names[i]) + 24, "filter.%s.%s=%s", names[i], keys[k],
                                     k == 3 ? "false" : "");
                    gd->argv[gd->n++] = "-c";
                    gd->argv[gd->n++] = w;
                    w += m + 1;
                }
        }
    }
    dg_free(out);
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

void dg_si_git(sb *b, cJSON *root, const char *cwd)
{
    cJSON *g = put_obj(b, root, "git");
    if (!g)
        return;
    const char *dir = cwd && cwd[0] ? cwd : ".";
    char *out = NULL;
    int xs = -1;
    git_guard gd;
    git_guard_base(&gd);
    dg_status st =
        git_run(&gd, dir, (const char *const[]){"rev-parse", "--is-inside-work-tree", NULL}, false,
                4096, &out, &xs);
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
        if (git_run(&gd, dir, (const char *const[]){"rev-parse", "--verify", "-q", "HEAD", NULL},
                    false, 4096, &out, &xs) == DG_OK &&
            xs == 0 && is_hash(out))
            commit = out;
        else
            dg_free(out);
        out = NULL;
        if (git_run(&gd, dir, (const char *const[]){"symbolic-ref", "--short", "-q", "HEAD", NULL},
                    false, 4096, &out, &xs) == DG_OK &&
            xs == 0 && out[0])
            branch = out;
        else
            dg_free(out);
        out = NULL;
        if (worktree) {
            git_guard_init(&gd, dir);
            /* Submodules: only a changed checked-out commit counts, so no git
             * runs inside them under their own config. */
            static const char *const status[] = {"status", "--porcelain", "--untracked-files=no",
                                                 "--ignore-submodules=dirty", NULL};
            if (gd.too_many) {
                err = "git status not run: more filter drivers configured than devgate neutralises";
            } else {
                st = git_run(&gd, dir, status, true, 4096, &out, &xs);
                if (st == DG_OK && xs == 129) { /* git older than 2.15 */
                    dg_free(out);
                    out = NULL;
                    st = git_run(&gd, dir, status, false, 4096, &out, &xs);
                }
                if (st == DG_OK && xs == 0)
                    dirty = out[0] != '\0';
                else
                    err = st == DG_ERR_TIMEOUT ? "git status timed out" : "git status failed";
            }
            dg_free(gd.store);
            gd.store = NULL;
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
