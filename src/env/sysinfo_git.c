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

/* Runs git -C dir args...; its trimmed stdout in *out (dg_malloc'd). */
static dg_status git_run(const char *dir, const char *a1, const char *a2, const char *a3,
                         const char *a4, bool no_locks, char **out, int *xs)
{
    const char *argv[10];
    int n = 0;
    argv[n++] = "git";
    if (no_locks)
        argv[n++] = "--no-optional-locks";
    argv[n++] = "-C";
    argv[n++] = dir;
    const char *extra[4] = {a1, a2, a3, a4};
    for (int i = 0; i < 4 && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int sig = 0;
    dg_status st = dg_run_capture(argv, GIT_TIMEOUT_S, out, 4096, xs, &sig);
    if (st == DG_OK && *out) {
        char *t = dg_trim(*out);
        memmove(*out, t, strlen(t) + 1);
    }
    return st;
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
    dg_status st = git_run(dir, "rev-parse", "--is-inside-work-tree", NULL, NULL, false, &out, &xs);
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
        if (git_run(dir, "rev-parse", "--verify", "-q", "HEAD", false, &out, &xs) == DG_OK &&
            xs == 0 && is_hash(out))
            commit = out;
        else
            dg_free(out);
        out = NULL;
        if (git_run(dir, "symbolic-ref", "--short", "-q", "HEAD", false, &out, &xs) == DG_OK &&
            xs == 0 && out[0])
            branch = out;
        else
            dg_free(out);
        out = NULL;
        if (worktree) {
            st = git_run(dir, "status", "--porcelain", "--untracked-files=no", NULL, true, &out,
                         &xs);
            if (st == DG_OK && xs == 129) { /* git older than 2.15 */
                dg_free(out);
                out = NULL;
                st = git_run(dir, "status", "--porcelain", "--untracked-files=no", NULL, false,
                             &out, &xs);
            }
            if (st == DG_OK && xs == 0)
                dirty = out[0] != '\0';
            else
                err = st == DG_ERR_TIMEOUT ? "git status timed out" : "git status failed";
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
