/* Where a SQLite ledger lives (docs/schema/ledger.md): the default path,
 * the folders made for a new one, and what a location that cannot hold one
 * is. Below ledger.c, which opens the file. */
#include "ledger/ledger_int.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- default path ----------------------------------------------------------- */

static char *home_dir(void)
{
    const char *home = getenv("HOME");
    if (home && home[0])
        return dg_strdup(home);
    long sz = sysconf(_SC_GETPW_R_SIZE_MAX);
    size_t bufsz = sz > 0 ? (size_t)sz : 16384;
    char *buf = dg_malloc(bufsz);
    if (!buf)
        return NULL;
    struct passwd pw, *res = NULL;
    char *out = NULL;
    if (getpwuid_r(getuid(), &pw, buf, bufsz, &res) == 0 && res && res->pw_dir && res->pw_dir[0])
        out = dg_strdup(res->pw_dir);
    dg_free(buf);
    return out;
}

/* The default ledger file: $XDG_DATA_HOME/devgate/ledger.db, else
 * ~/.local/share/devgate/ledger.db (DEVGATE_LEDGER aside). */
char *dg_lg_default_file(void)
{
    const char *xdg = getenv("XDG_DATA_HOME");
    if (xdg && xdg[0] == '/') { /* relative values are ignored (XDG spec) */
        size_t n = strlen(xdg);
        while (n > 1 && xdg[n - 1] == '/')
            n--;
        if (n == 1)
            n = 0; /* "/" itself */
        return dg_asprintf("%.*s/devgate/ledger.db", (int)n, xdg);
    }
    char *home = home_dir();
    if (!home)
        return NULL;
    size_t n = strlen(home);
    while (n > 0 && home[n - 1] == '/')
        n--;
    char *p = dg_asprintf("%.*s/.local/share/devgate/ledger.db", (int)n, home);
    dg_free(home);
    return p;
}

char *dg_ledger_default_path(void)
{
    const char *env = getenv("DEVGATE_LEDGER");
    return env && env[0] ? dg_strdup(env) : dg_lg_default_file();
}

/* ---- folders ------------------------------------------------------------------ */

/* One folder of make_parents: exists as a folder, or is created 0700. */
static int ensure_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno != ENOENT)
            return errno;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return errno;
        if (stat(dir, &sb) != 0)
            return errno;
    }
    return S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
}

/* mkdir -p of the folder holding path; missing folders get mode 0700. */
dg_status dg_lg_make_parents(dg_ctx *ctx, const char *path, const char *shown)
{
    char *dir = dg_strdup(path);
    if (!dir)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    dg_status st = DG_OK;
    /* Starting at dir + 1: a leading '/' is the root, not a folder to make. */
    for (char *p = dir + 1; slash && dir[0] && st == DG_OK; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        int err = ensure_dir(dir);
        if (err) {
            char where[256];
            dg_copy_clean(where, sizeof where, dir);
            st = dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: cannot create folder %s: %s", shown, where,
                         strerror(err));
        }
        *p = c;
        if (c == '\0')
            break;
    }
    dg_free(dir);
    return st;
}

/* What a file that is not regular is, for messages. */
const char *dg_lg_file_kind(mode_t mode)
{
    return S_ISFIFO(mode)   ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "a special file";
}

/* True when the folder holding path cannot be written to (by anyone: a
 * read-only mount or an immutable folder answer so even for root). */
bool dg_lg_dir_unwritable(const char *path)
{
    char *dir = dg_strdup(path);
    if (!dir)
        return false;
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    bool ro = access(slash ? dir : ".", W_OK) != 0;
    dg_free(dir);
    return ro;
}

/* The location must let us create the file and its -wal/-shm companions. */
dg_status dg_lg_check_location(dg_ctx *ctx, const char *path, const char *shown)
{
    char *dir = dg_strdup(path);
    if (!dir)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    const char *d = ".";
    if (slash) {
        slash[slash == dir ? 1 : 0] = '\0';
        d = dir;
    }
    dg_status st = DG_OK;
    if (access(d, W_OK | X_OK) != 0)
        st = dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: folder is not writable: %s", shown,
                     strerror(errno));
    dg_free(dir);
    if (st != DG_OK)
        return st;
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: is a folder, not a ledger file", shown);
        if (!S_ISREG(sb.st_mode))
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: not a regular file (%s)", shown,
                           dg_lg_file_kind(sb.st_mode));
        if (access(path, R_OK | W_OK) != 0)
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: cannot open for writing: %s", shown,
                           strerror(errno));
    } else if (errno != ENOENT) {
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: %s", shown, strerror(errno));
    }
    return DG_OK;
}

bool dg_ledger_is_team(const char *path)
{
    return path &&
           (strncmp(path, "postgresql://", 13) == 0 || strncmp(path, "postgres://", 11) == 0);
}

char *dg_ledger_local_path(void)
{
    const char *local = getenv("DEVGATE_LOCAL_LEDGER");
    if (local && local[0])
        return dg_strdup(local);
    /* DEVGATE_LEDGER when it is a file; when it names the team ledger, the
     * default file. */
    const char *env = getenv("DEVGATE_LEDGER");
    return env && env[0] && !dg_ledger_is_team(env) ? dg_strdup(env) : dg_lg_default_file();
}
