/* devgate remote HOST VERB [options]: one named node over the system's OpenSSH
 * client. The node is checked first (devgate present, protocol, version,
 * commit), the --data files and folders are shipped content-addressed into the
 * node's cache (only when missing, SHA-256 verified on arrival; a folder is
 * assembled there from the cached files), the input bucket is computed on both
 * sides by a one-step probe and must agree, the verb runs detached on
 * the node (a dropped connection loses nothing: `remote HOST collect`), and the
 * record enters the local ledger with the node's identity. The node side is
 * the hidden verb `__node`. docs/team.md. */
#include "cli.h"

#include <stddef.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The protocol between `remote` and `__node`; bumped when either side's
 * words change. */
#define REMOTE_PROTOCOL 2
#define MAX_SSH_OPTS 32
#define MAX_ARGS 256

/* Exit statuses of `remote` (docs/cli.md). */
enum {
    EXIT_REMOTE_UNREACHABLE = 10,
    EXIT_REMOTE_AUTH = 11,
    EXIT_REMOTE_DEVGATE = 12, /* missing, too old, or a protocol we cannot read */
    EXIT_REMOTE_DISK = 13,
    EXIT_REMOTE_LOST = 14,   /* connection lost mid-run; the run goes on on the node */
    EXIT_REMOTE_BUCKET = 15, /* input bucket differs, or a file arrived corrupt */
};

typedef struct remote {
    cli *c;
    const char *host;
    const char *opts[MAX_SSH_OPTS];
    int nopts;
    const char *devgate; /* on the node */
    const char *cache;   /* on the node; NULL: its default */
    char mux_dir[64];    /* our ssh control socket's folder, or "" */
    char mux_opt[128];   /* ControlPath=... */
} remote;

/* printf into a new string (free()); NULL when out of memory. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* ---- ssh ------------------------------------------------------------------------ */

/* Runs `devgate ARGS` on the node through ssh. stdin from in_fd (-1: none);
 * stdout into *out; stderr into *err, or straight to ours when err is NULL.
 * Returns ssh's exit status (255: ssh itself failed), -1 when ssh could not
 * be started. */
static int ssh_call(remote *r, const char *const *args, int in_fd, char **out, char **err)
{
    const char *rargv[MAX_ARGS + 8];
    int n = 0;
    rargv[n++] = r->devgate;
    rargv[n++] = "__node";
    if (r->cache) {
        rargv[n++] = "--cache";
        rargv[n++] = r->cache;
    }
    for (int i = 0; args[i] && n < MAX_ARGS; i++)
        rargv[n++] = args[i];
    rargv[n] = NULL;
    char *cmd = dg_shell_quote(rargv);
    if (!cmd)
        return -1;
    const char *argv[2 * MAX_SSH_OPTS + 12];
    int k = 0;
    const char *ssh = getenv("DEVGATE_SSH");
    argv[k++] = ssh && ssh[0] ? ssh : "ssh";
    argv[k++] = "-o";
    argv[k++] = "BatchMode=yes";
    argv[k++] = "-o";
    argv[k++] = "ConnectTimeout=10";
    for (int i = 0; i < r->nopts; i++) {
        argv[k++] = "-o";
        argv[k++] = r->opts[i];
    }
    if (r->mux_dir[0]) { /* one connection for all the calls of this command */
        argv[k++] = "-o";
        argv[k++] = "ControlMaster=auto";
        argv[k++] = "-o";
        argv[k++] = r->mux_opt;
        argv[k++] = "-o";
        argv[k++] = "ControlPersist=15";
    }
    argv[k++] = "--";
    argv[k++] = r->host;
    argv[k++] = cmd;
    argv[k] = NULL;

    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (pipe2(po, O_CLOEXEC) != 0 || (err && pipe2(pe, O_CLOEXEC) != 0)) {
        dg_string_free(cmd);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    else
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    if (err)
        posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    dg_string_free(cmd);
    close(po[1]);
    if (err)
        close(pe[1]);
    if (rc != 0) {
        close(po[0]);
        if (err)
            close(pe[0]);
        cli_error("remote: cannot start %s: %s", argv[0], strerror(rc));
        return -1;
    }
    /* Both pipes at once, so neither fills while the other is read. */
    char *bufs[2] = {NULL, NULL};
    size_t lens[2] = {0, 0};
    struct pollfd pf[2] = {{.fd = po[0], .events = POLLIN},
                           {.fd = err ? pe[0] : -1, .events = POLLIN}};
    int open_fds = err ? 2 : 1;
    while (open_fds > 0) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (!cli_pipe_append(pf[i].fd, &bufs[i], &lens[i])) {
                close(pf[i].fd);
                pf[i].fd = -1;
                open_fds--;
            }
        }
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    for (int i = 0; i < 2; i++)
        if (!bufs[i])
            bufs[i] = calloc(1, 1);
    if (out)
        *out = bufs[0];
    else
        free(bufs[0]);
    if (err)
        *err = bufs[1];
    else
        free(bufs[1]);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 255;
}

/* The last line of ssh's stderr, for messages. */
static void last_line(const char *s, char *buf, size_t len)
{
    size_t n = s ? strlen(s) : 0;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    size_t start = n;
    while (start && s[start - 1] != '\n')
        start--;
    snprintf(buf, len, "%.*s", (int)(n - start), s ? s + start : "");
}

/* Maps a failed connection to an exit status with a message. */
static int ssh_failure(remote *r, int rc, const char *err, const char *doing)
{
    char line[512];
    last_line(err, line, sizeof line);
    if (rc == 255 && (strstr(err, "Permission denied") || strstr(err, "Authentication failed") ||
                      strstr(err, "Too many authentication failures"))) {
        cli_error("remote %s: authentication refused while %s (%s); ssh runs with BatchMode=yes: "
                  "use a key the node accepts (ssh-agent, IdentityFile in ~/.ssh/config or -o)",
                  r->host, doing, line);
        return EXIT_REMOTE_AUTH;
    }
    static const char *const unreachable[] = {
        "Connection refused",       "Could not resolve",      "timed out",
        "No route to host",         "Network is unreachable", "Connection closed",
        "Connection reset",         "kex_exchange",           "Host key verification failed",
        "Name or service not known"};
    for (size_t i = 0; rc == 255 && i < sizeof unreachable / sizeof unreachable[0]; i++)
        if (strstr(err, unreachable[i])) {
            cli_error("remote %s: host unreachable while %s (%s)", r->host, doing, line);
            return EXIT_REMOTE_UNREACHABLE;
        }
    cli_error("remote %s: ssh or the node's devgate failed while %s (exit %d: %s)", r->host, doing,
              rc, line[0] ? line : "no message");
    return EXIT_USAGE;
}

/* ---- the node check --------------------------------------------------------- */

/* Asks the node who it is; *info gets the parsed answer. */
static int node_check(remote *r, cJSON **info, cJSON *warnings)
{
    *info = NULL;
    const char *args[] = {"info", NULL};
    char *out = NULL, *err = NULL;
    int rc = ssh_call(r, args, -1, &out, &err);
    int ret = EXIT_PASS;
    if (rc < 0) {
        ret = EXIT_USAGE;
    } else if (rc == 255) {
        ret = ssh_failure(r, rc, err, "checking the node");
    } else if (rc == 127 || rc == 126) {
        cli_error("remote %s: devgate is missing on the node (%s not found or not executable); "
                  "install it there or name it with --devgate PATH",
                  r->host, r->devgate);
        ret = EXIT_REMOTE_DEVGATE;
    } else {
        cJSON *j = rc == 0 ? cJSON_Parse(out) : NULL;
        const cJSON *proto = cJSON_GetObjectItem(j, "protocol");
        if (!j || !cJSON_IsNumber(proto)) {
            char line[256];
            last_line(err, line, sizeof line);
            cli_error("remote %s: the node's devgate is too old or not devgate (no node protocol: "
                      "'%s' exited %d: %s); install this version (%s) there",
                      r->host, r->devgate, rc, line, DG_VERSION);
            ret = EXIT_REMOTE_DEVGATE;
            cJSON_Delete(j);
        } else if ((int)proto->valuedouble != REMOTE_PROTOCOL) {
            cli_error("remote %s: the node speaks protocol %d, this devgate %d; install devgate %s "
                      "there",
                      r->host, (int)proto->valuedouble, REMOTE_PROTOCOL, DG_VERSION);
            ret = EXIT_REMOTE_DEVGATE;
            cJSON_Delete(j);
        } else {
            const char *ver = jstr(j, "version", "?"), *commit = jstr(j, "commit", "?");
            char w[256];
            if (strcmp(ver, DG_VERSION) != 0) {
                snprintf(w, sizeof w, "node devgate version %s differs from local %s", ver,
                         DG_VERSION);
                cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
            }
            if (strcmp(commit, dg_build_commit()) != 0) {
                snprintf(w, sizeof w, "node devgate commit %.12s differs from local %.12s", commit,
                         dg_build_commit());
                cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
            }
            *info = j;
        }
    }
    free(out);
    free(err);
    return ret;
}

/* ---- shipping the input ------------------------------------------------------- */

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Ships the file at path into the node's cache unless it is there already
 * (verified by SHA-256 on the node); *node_path gets its path there (free()). */
static int ship_file(remote *r, const char *path, cJSON *shipped, char **node_path)
{
    *node_path = NULL;
    char hex[65];
    uint64_t size = 0;
    if (dg_sha256_file(r->c->ctx, path, hex, &size) != DG_OK) {
        cli_error("remote: %s", dg_errmsg(r->c->ctx));
        return EXIT_USAGE;
    }
    const char *name = base_name(path);
    const char *have[] = {"have", hex, name, NULL};
    char *out = NULL, *err = NULL;
    int rc = ssh_call(r, have, -1, &out, &err);
    int ret = EXIT_PASS;
    if (rc == 255)
        ret = ssh_failure(r, rc, err, "asking the node's cache");
    else if (rc != 0) {
        char line[256];
        last_line(err, line, sizeof line);
        cli_error("remote %s: the node's cache could not be read: %s", r->host, line);
        ret = EXIT_USAGE;
    }
    cJSON *ans = ret ? NULL : cJSON_Parse(out);
    free(out);
    free(err);
    if (ret)
        return ret;
    const char *state = jstr(ans, "state", "?");
    bool sent = false;
    if (strcmp(state, "tampered") == 0)
        cli_error("remote %s: the node's cached %s did not match its SHA-256 %.16s (changed "
                  "after it arrived); it was removed and is sent again",
                  r->host, name, hex);
    if (strcmp(state, "ok") != 0) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        char sz[32];
        snprintf(sz, sizeof sz, "%llu", (unsigned long long)size);
        const char *put[] = {"put", hex, name, sz, NULL};
        out = err = NULL;
        rc = fd >= 0 ? ssh_call(r, put, fd, &out, &err) : -1;
        if (fd >= 0)
            close(fd);
        char line[256];
        last_line(err, line, sizeof line);
        if (rc == 255)
            ret = ssh_failure(r, rc, err, "sending the input");
        else if (rc == EXIT_REMOTE_DISK) {
            cli_error("remote %s: disk full on the node while receiving %s (%llu bytes): %s",
                      r->host, name, (unsigned long long)size, line);
            ret = EXIT_REMOTE_DISK;
        } else if (rc == EXIT_REMOTE_BUCKET) {
            cli_error("remote %s: %s arrived corrupt (%s); nothing was run", r->host, name, line);
            ret = EXIT_REMOTE_BUCKET;
        } else if (rc != 0) {
            cli_error("remote %s: sending %s failed (exit %d): %s", r->host, name, rc, line);
            ret = EXIT_USAGE;
        } else {
            sent = true;
            cJSON_Delete(ans);
            ans = cJSON_Parse(out);
        }
        free(out);
        free(err);
    }
    if (!ret) {
        const char *p = jstr(ans, "path", NULL);
        *node_path = p ? strdup(p) : NULL;
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "name", name);
        cJSON_AddStringToObject(s, "sha256", hex);
        cJSON_AddNumberToObject(s, "bytes", (double)size);
        cJSON_AddBoolToObject(s, "sent", sent);
        cJSON_AddItemToArray(shipped, s);
        if (!r->c->quiet)
            fprintf(stderr, "devgate: remote %s: %s %s (sha256 %.16s, %llu bytes)\n", r->host, name,
                    sent ? "sent" : "already in the node's cache", hex, (unsigned long long)size);
        if (!*node_path)
            ret = EXIT_USAGE;
    }
    cJSON_Delete(ans);
    return ret;
}

/* ---- shipping a folder (images:DIR, cifar:DIR) --------------------------------- */

#define TREE_MAX_FILES 200000
#define TREE_MAX_DEPTH 6

typedef struct tree_file {
    char *rel;  /* relative to the folder */
    char *full; /* as opened here */
    char sha[65];
    uint64_t size;
} tree_file;

typedef struct tree_list {
    tree_file *v;
    size_t n, cap;
} tree_list;

static int cmp_tree_file(const void *a, const void *b)
{
    return strcmp(((const tree_file *)a)->rel, ((const tree_file *)b)->rel);
}

static void tree_list_free(tree_list *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].rel);
        free(t->v[i].full);
    }
    free(t->v);
}

/* Every regular file under dir (symlinks followed, names starting with '.'
 * skipped, as the data sources skip them), relative names from rel. */
static int tree_walk(const char *dir, const char *rel, int depth, tree_list *t)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        cli_error("remote: --data folder %s: %s", dir, strerror(errno));
        return EXIT_USAGE;
    }
    int rc = EXIT_PASS;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (!rc && nm[0] != '.') {
            char *full = cli_join(dir, nm);
            char *r2 = rel[0] ? fmt("%s/%s", rel, nm) : strdup(nm);
            struct stat sb;
            if (!full || !r2) {
                rc = EXIT_USAGE;
            } else if (strchr(nm, '\n') || strlen(nm) >= 200) {
                cli_error("remote: --data folder: the name %s cannot be shipped (a newline, or "
                          "200 bytes or more)",
                          full);
                rc = EXIT_USAGE;
            } else if (stat(full, &sb) != 0) {
                /* a dangling link: the data source skips it too */
            } else if (S_ISDIR(sb.st_mode)) {
                if (depth >= TREE_MAX_DEPTH) {
                    cli_error("remote: --data folder: %s is nested deeper than %d folders", full,
                              TREE_MAX_DEPTH);
                    rc = EXIT_USAGE;
                } else {
                    rc = tree_walk(full, r2, depth + 1, t);
                }
            } else if (S_ISREG(sb.st_mode)) {
                if (t->n >= TREE_MAX_FILES) {
                    cli_error("remote: --data folder holds more than %d files", TREE_MAX_FILES);
                    rc = EXIT_USAGE;
                } else {
                    if (t->n == t->cap) {
                        size_t nc = t->cap ? t->cap * 2 : 64;
                        tree_file *nv = realloc(t->v, nc * sizeof *nv);
                        if (!nv)
                            rc = EXIT_USAGE;
                        else {
                            t->v = nv;
                            t->cap = nc;
                        }
                    }
                    if (!rc) {
                        t->v[t->n++] = (tree_file){.rel = r2, .full = full};
                        full = r2 = NULL;
                    }
                }
            }
            free(full);
            free(r2);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

/* The manifest text: "SHA SIZE RELPATH\n" per file, sorted by path. */
static char *tree_manifest(const tree_list *t)
{
    size_t cap = 1;
    for (size_t i = 0; i < t->n; i++)
        cap += strlen(t->v[i].rel) + 64 + 24 + 3;
    char *m = malloc(cap);
    if (!m)
        return NULL;
    size_t off = 0;
    m[0] = '\0';
    for (size_t i = 0; i < t->n; i++)
        off += (size_t)snprintf(m + off, cap - off, "%s %llu %s\n", t->v[i].sha,
                                (unsigned long long)t->v[i].size, t->v[i].rel);
    return m;
}

/* A temporary file holding text, rewound; its descriptor, or -1. */
static int text_fd(const char *text)
{
    FILE *f = tmpfile();
    if (!f)
        return -1;
    size_t n = strlen(text);
    if (fwrite(text, 1, n, f) != n || fflush(f) != 0) {
        fclose(f);
        return -1;
    }
    int fd = dup(fileno(f));
    fclose(f);
    if (fd >= 0)
        lseek(fd, 0, SEEK_SET);
    return fd;
}

/* Asks the node to assemble tree id from its cache; *ans gets its answer. */
static int tree_call(remote *r, const char *id, const char *manifest, cJSON **ans)
{
    *ans = NULL;
    int fd = text_fd(manifest);
    if (fd < 0) {
        cli_error("remote: cannot keep the folder's manifest: %s", strerror(errno));
        return EXIT_USAGE;
    }
    const char *req[] = {"tree", id, NULL};
    char *out = NULL, *err = NULL;
    int rc = ssh_call(r, req, fd, &out, &err);
    close(fd);
    int ret = EXIT_PASS;
    if (rc == 255)
        ret = ssh_failure(r, rc, err, "asking the node's cache for a folder");
    else if (rc == EXIT_REMOTE_DISK) {
        char line[256];
        last_line(err, line, sizeof line);
        cli_error("remote %s: disk full on the node while assembling a folder: %s", r->host, line);
        ret = EXIT_REMOTE_DISK;
    } else if (rc != 0) {
        char line[256];
        last_line(err, line, sizeof line);
        cli_error("remote %s: the node could not assemble the folder (exit %d): %s", r->host, rc,
                  line);
        ret = rc == EXIT_REMOTE_BUCKET ? EXIT_REMOTE_BUCKET : EXIT_USAGE;
    } else if (!(*ans = cJSON_Parse(out))) {
        cli_error("remote %s: the node's answer about a folder is not JSON", r->host);
        ret = EXIT_USAGE;
    }
    free(out);
    free(err);
    return ret;
}

/* Ships the folder at path: each file content-addressed into the node's
 * cache only when missing there (SHA-256 verified on arrival), then the node
 * assembles the tree (named by the SHA-256 of its manifest) from its cache;
 * *node_path gets the tree's path there (free()). */
static int ship_tree(remote *r, const char *path, cJSON *shipped, char **node_path)
{
    *node_path = NULL;
    tree_list t = {0};
    int rc = tree_walk(path, "", 0, &t);
    if (!rc && t.n == 0) {
        cli_error("remote: --data folder %s holds no files", path);
        rc = EXIT_USAGE;
    }
    if (rc) {
        tree_list_free(&t);
        return rc;
    }
    qsort(t.v, t.n, sizeof *t.v, cmp_tree_file);
    uint64_t total = 0;
    for (size_t i = 0; i < t.n && !rc; i++) {
        if (dg_sha256_file(r->c->ctx, t.v[i].full, t.v[i].sha, &t.v[i].size) != DG_OK) {
            cli_error("remote: %s", dg_errmsg(r->c->ctx));
            rc = EXIT_USAGE;
        }
        total += t.v[i].size;
    }
    char *manifest = rc ? NULL : tree_manifest(&t);
    char id[65] = "";
    int mfd = manifest ? text_fd(manifest) : -1;
    if (!rc && mfd >= 0) {
        char fdpath[64];
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", mfd);
        if (dg_sha256_file(r->c->ctx, fdpath, id, NULL) != DG_OK)
            rc = EXIT_USAGE;
    } else if (!rc) {
        rc = EXIT_USAGE;
    }
    if (mfd >= 0)
        close(mfd);
    cJSON *ans = NULL;
    int sent = 0;
    if (!rc)
        rc = tree_call(r, id, manifest, &ans);
    if (!rc && strcmp(jstr(ans, "state", "?"), "missing") == 0) {
        /* send what the node lacks (or held changed: it removed those), then ask again */
        const cJSON *miss = cJSON_GetObjectItem(ans, "missing"), *m;
        int tampered = (int)jnum(ans, "tampered", 0);
        if (tampered)
            cli_error("remote %s: %d cached file%s of %s did not match %s SHA-256 (changed after "
                      "arrival); removed and sent again",
                      r->host, tampered, tampered == 1 ? "" : "s", path,
                      tampered == 1 ? "its" : "their");
        cJSON_ArrayForEach(m, miss)
        {
            if (rc)
                break;
            if (!cJSON_IsString(m))
                continue;
            for (size_t i = 0; i < t.n; i++) {
                if (strcmp(t.v[i].sha, m->valuestring) != 0)
                    continue;
                char *np = NULL;
                cJSON *one = cJSON_CreateArray();
                bool q = r->c->quiet;
                r->c->quiet = true; /* one summary line for the folder */
                rc = ship_file(r, t.v[i].full, one, &np);
                r->c->quiet = q;
                cJSON_Delete(one);
                free(np);
                sent++;
                break;
            }
        }
        cJSON_Delete(ans);
        ans = NULL;
        if (!rc)
            rc = tree_call(r, id, manifest, &ans);
        if (!rc && strcmp(jstr(ans, "state", "?"), "ok") != 0) {
            cli_error("remote %s: the node still lacks files of %s after they were sent", r->host,
                      path);
            rc = EXIT_REMOTE_BUCKET;
        }
    } else if (!rc && strcmp(jstr(ans, "state", "?"), "ok") != 0) {
        cli_error("remote %s: the node's answer about %s: %s", r->host, path,
                  jstr(ans, "state", "?"));
        rc = EXIT_USAGE;
    }
    if (!rc) {
        const char *p = jstr(ans, "path", NULL);
        *node_path = p ? strdup(p) : NULL;
        if (!*node_path)
            rc = EXIT_USAGE;
    }
    if (!rc) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "name", base_name(path));
        cJSON_AddStringToObject(s, "tree", id);
        cJSON_AddNumberToObject(s, "files", (double)t.n);
        cJSON_AddNumberToObject(s, "bytes", (double)total);
        cJSON_AddNumberToObject(s, "files_sent", sent);
        cJSON_AddBoolToObject(s, "sent", sent > 0);
        cJSON_AddItemToArray(shipped, s);
        if (!r->c->quiet)
            fprintf(stderr,
                    "devgate: remote %s: folder %s: %zu files, %d sent, %zu already in the node's "
                    "cache (tree sha256 %.16s, %llu bytes)\n",
                    r->host, base_name(path), t.n, sent, t.n - (size_t)sent, id,
                    (unsigned long long)total);
    }
    cJSON_Delete(ans);
    free(manifest);
    tree_list_free(&t);
    return rc;
}

/* The --data spec with every local file in it ([KIND:]PATH[,PATH...]) shipped
 * and replaced by its path in the node's cache (*out: free()). */
static int rewrite_data(remote *r, const char *spec, cJSON *shipped, char **out)
{
    *out = NULL;
    size_t kind = strcspn(spec, ":/,");
    if (spec[kind] != ':')
        kind = 0;
    else
        kind++; /* "idx:" and the like */
    char *rest = strdup(spec + kind);
    size_t cap = strlen(spec) + 1;
    char *res = malloc(cap);
    if (!rest || !res) {
        free(rest);
        free(res);
        return EXIT_USAGE;
    }
    snprintf(res, cap, "%.*s", (int)kind, spec);
    int rc = EXIT_PASS;
    char *save = NULL;
    bool first = true;
    for (char *part = strtok_r(rest, ",", &save); part && !rc; part = strtok_r(NULL, ",", &save)) {
        struct stat sb;
        char *np = NULL;
        const char *word = part;
        if (stat(part, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            rc = ship_tree(r, part, shipped, &np);
            word = np;
        } else if (stat(part, &sb) == 0 && S_ISREG(sb.st_mode)) {
            rc = ship_file(r, part, shipped, &np);
            word = np;
        }
        if (!rc) {
            size_t need = strlen(res) + strlen(word) + 2;
            if (need > cap) {
                char *nr = realloc(res, need * 2);
                if (!nr)
                    rc = EXIT_USAGE;
                else {
                    res = nr;
                    cap = need * 2;
                }
            }
            if (!rc) {
                if (!first)
                    strcat(res, ",");
                strcat(res, word);
                first = false;
            }
        }
        free(np);
    }
    free(rest);
    if (rc)
        free(res);
    else
        *out = res;
    return rc;
}

/* ---- the input bucket, checked before the run ------------------------------ */

/* Verbs whose options name an input bucket (the training options). */
static bool bucket_verb(const char *verb)
{
    static const char *const v[] = {"train", "sweep", "soak", "compare", "profile", "accept"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (strcmp(verb, v[i]) == 0)
            return true;
    return false;
}

/* The words of a one-step `train` on the cpu that opens the same input
 * bucket as VERB's words (the options that make the bucket, nothing else);
 * n words into out (at most max), NULL-terminated. */
static int bucket_probe_words(int argc, const char *const *argv, const char **out, int max)
{
    static const char *const with_value[] = {
        "--model", "--input",     "--batch",      "--seed",    "--samples",
        "--data",  "--val-split", "--resolution", "--augment", "--normalize"};
    int n = 0;
    bool model = false;
    out[n++] = "train";
    for (int i = 1; i < argc && n < max - 16; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            break;
        if (strcmp(a, "--tf32") == 0) {
            out[n++] = a;
            continue;
        }
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) {
            size_t l = strlen(with_value[k]);
            if (strncmp(a, with_value[k], l) == 0 && a[l] == '=') {
                out[n++] = a;
            } else if (strcmp(a, with_value[k]) == 0 && i + 1 < argc) {
                out[n++] = a;
                out[n++] = argv[++i];
            } else {
                continue;
            }
            model = model || k == 0;
            break;
        }
    }
    if (!model && strcmp(argv[0], "accept") == 0) { /* accept's own default model */
        out[n++] = "--model";
        out[n++] = "cifar";
    }
    static const char *const tail[] = {"--backend", "cpu",      "--threads", "1",         "--steps",
                                       "1",         "--epochs", "1",         "--workers", "0"};
    for (size_t k = 0; k < sizeof tail / sizeof tail[0]; k++)
        out[n++] = tail[k];
    out[n] = NULL;
    return n;
}

/* Runs this devgate with args (no shell), stdout into *out (free()), the
 * last line of its stderr into err; its exit status, or -1. */
static int run_self(const char *const *args, char **out, char *err, size_t errlen)
{
    *out = NULL;
    err[0] = '\0';
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return -1;
    self[sl] = '\0';
    const char *argv[MAX_ARGS + 8];
    int n = 0;
    argv[n++] = self;
    argv[n++] = "--no-ledger";
    argv[n++] = "--json";
    argv[n++] = "--quiet";
    for (int i = 0; args[i] && n < MAX_ARGS; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    FILE *ef = tmpfile();
    int po[2];
    if (!ef || pipe2(po, O_CLOEXEC) != 0) {
        if (ef)
            fclose(ef);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fileno(ef), 2);
    pid_t pid;
    int rc = posix_spawn(&pid, self, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(po[1]);
    if (rc != 0) {
        close(po[0]);
        fclose(ef);
        return -1;
    }
    *out = cli_read_fd(po[0], 256 << 20);
    close(po[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    fflush(ef);
    rewind(ef);
    char *etext = cli_read_fd(fileno(ef), 1 << 20);
    fclose(ef);
    last_line(etext, err, errlen);
    free(etext);
    if (!*out)
        *out = calloc(1, 1);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128;
}

/* The bucket of a one-step probe's record text, or NULL. */
static cJSON *bucket_of(const char *text)
{
    cJSON *rec = text ? cJSON_Parse(text) : NULL;
    cJSON *bk = cJSON_DetachItemFromObject(rec, "bucket");
    cJSON_Delete(rec);
    if (!cJSON_IsObject(bk) || !cJSON_IsString(cJSON_GetObjectItem(bk, "id"))) {
        cJSON_Delete(bk);
        return NULL;
    }
    return bk;
}

/* Before the run: the input bucket here (local paths) and on the node (its
 * cached copies) from the same probe; different ids refuse the run (exit 15,
 * naming the fields). A probe that cannot run leaves a warning instead (the
 * run itself then says what is wrong, and --like still holds it). */
static int bucket_check(remote *r, int argc, const char *const *local, const char *const *node,
                        cJSON *warnings, cJSON *extra)
{
    const char *lw[MAX_ARGS + 24], *nw[MAX_ARGS + 24];
    bucket_probe_words(argc, local, lw, MAX_ARGS + 20);
    int nn = 0;
    while (node[nn])
        nn++;
    nw[0] = "bucket";
    nw[1] = "--";
    bucket_probe_words(nn, node, nw + 2, MAX_ARGS + 18);
    char *out = NULL, err[512];
    int lrc = run_self(lw, &out, err, sizeof err);
    cJSON *lb = lrc == 0 ? bucket_of(out) : NULL;
    free(out);
    char w[768];
    if (!lb) {
        snprintf(w, sizeof w,
                 "input bucket not checked before the run: the local probe failed "
                 "(exit %d: %s)",
                 lrc, err[0] ? err : "no record");
        cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
        fprintf(stderr, "devgate: remote %s: warning: %s\n", r->host, w);
        return EXIT_PASS;
    }
    char *nerr = NULL;
    out = NULL;
    int src = ssh_call(r, nw, -1, &out, &nerr);
    if (src == 255) {
        int f = ssh_failure(r, src, nerr, "checking the node's input bucket");
        free(out);
        free(nerr);
        cJSON_Delete(lb);
        return f;
    }
    cJSON *ans = src == 0 ? cJSON_Parse(out) : NULL;
    cJSON *nb = cJSON_DetachItemFromObject(ans, "bucket");
    cJSON_Delete(ans);
    if (!cJSON_IsObject(nb)) {
        char line[256];
        last_line(nerr, line, sizeof line);
        snprintf(w, sizeof w,
                 "input bucket not checked before the run: the node's probe failed (exit %d: %s)",
                 src, line[0] ? line : "no record");
        cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
        fprintf(stderr, "devgate: remote %s: warning: %s\n", r->host, w);
        cJSON_Delete(nb);
        cJSON_Delete(lb);
        free(out);
        free(nerr);
        return EXIT_PASS;
    }
    free(out);
    free(nerr);
    char differs[256];
    cli_bucket_differs(lb, nb, differs, sizeof differs);
    int rc = EXIT_PASS;
    if (differs[0]) {
        cli_error("remote %s: the node's input bucket differs from the local one (%s differ: "
                  "local %.16s, node %.16s); nothing was run",
                  r->host, differs, jstr(lb, "id", "?"), jstr(nb, "id", "?"));
        rc = EXIT_REMOTE_BUCKET;
    } else {
        cJSON_AddStringToObject(extra, "bucket_checked", jstr(lb, "id", ""));
        if (!r->c->quiet)
            fprintf(stderr, "devgate: remote %s: input bucket %.16s here and on the node\n",
                    r->host, jstr(lb, "id", "?"));
    }
    cJSON_Delete(lb);
    cJSON_Delete(nb);
    return rc;
}

/* bucket -- train ARGS: the node's side of the probe: {"bucket": {...}}. */
static int node_bucket(int argc, char **argv)
{
    const char *args[MAX_ARGS + 2];
    int n = 0;
    for (int i = 0; i < argc && n < MAX_ARGS; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    if (n == 0 || strcmp(args[0], "train") != 0) {
        cli_error("node: bucket: only a train probe");
        return EXIT_USAGE;
    }
    char *out = NULL, err[512];
    int rc = run_self(args, &out, err, sizeof err);
    cJSON *bk = rc == 0 ? bucket_of(out) : NULL;
    free(out);
    if (!bk) {
        cli_error("node: the bucket probe failed (exit %d): %s", rc, err[0] ? err : "no record");
        return rc > 0 && rc != EXIT_PASS ? rc : EXIT_USAGE;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "bucket", bk);
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    cJSON_free(s);
    cJSON_Delete(o);
    return EXIT_PASS;
}

/* ---- run, wait, fetch --------------------------------------------------------- */

/* Bucket fields compared by --like (as ledger diff does). */
static const char *const k_bucket_keys[] = {"resolutions", "augment", "batch",  "channels",
                                            "normalize",   "math",    "dataset"};

void cli_bucket_differs(const cJSON *a, const cJSON *b, char *buf, size_t len)
{
    buf[0] = '\0';
    size_t off = 0;
    if (cJSON_Compare(cJSON_GetObjectItem(a, "id"), cJSON_GetObjectItem(b, "id"), true))
        return;
    for (size_t i = 0; i < sizeof k_bucket_keys / sizeof k_bucket_keys[0]; i++) {
        const cJSON *x = cJSON_GetObjectItem(a, k_bucket_keys[i]),
                    *y = cJSON_GetObjectItem(b, k_bucket_keys[i]);
        if ((x || y) && !cJSON_Compare(x, y, true))
            off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? ", " : "",
                                    k_bucket_keys[i]);
    }
    if (!off)
        snprintf(buf, len, "id");
}

/* Tells the node the run is dealt with, so `collect` does not offer it again. */
static void mark_collected(remote *r, const char *token)
{
    const char *mark[] = {"mark", token, NULL};
    char *o = NULL, *e = NULL;
    ssh_call(r, mark, -1, &o, &e);
    free(o);
    free(e);
}

/* Fetches a finished run from the node, records it locally with the node's
 * identity, marks it collected there. */
static int collect_one(remote *r, const char *token, const cJSON *like_bucket, cJSON *extra)
{
    const char *fetch[] = {"fetch", token, NULL};
    char *out = NULL, *err = NULL;
    int rc = ssh_call(r, fetch, -1, &out, &err);
    int ret = EXIT_PASS;
    if (rc == 255)
        ret = ssh_failure(r, rc, err, "fetching a record");
    else if (rc != 0) {
        char line[256];
        last_line(err, line, sizeof line);
        cli_error("remote %s: run %s: %s", r->host, token, line);
        ret = rc == EXIT_FAIL ? EXIT_FAIL : EXIT_USAGE;
    }
    cJSON *ans = ret ? NULL : cJSON_Parse(out);
    free(out);
    free(err);
    if (ret)
        return ret;
    if (cJSON_IsTrue(cJSON_GetObjectItem(ans, "running"))) {
        if (!r->c->quiet)
            printf("remote %s: run %s is still running; collect it later\n", r->host, token);
        cJSON_Delete(ans);
        return EXIT_PASS;
    }
    int run_rc = (int)jnum(ans, "exit_status", EXIT_USAGE);
    cJSON *rec = cJSON_DetachItemFromObject(ans, "record");
    char verb[64];
    snprintf(verb, sizeof verb, "%s", jstr(ans, "verb", "remote"));
    if (!cJSON_IsObject(rec)) {
        char line[512];
        last_line(jstr(ans, "stderr_tail", ""), line, sizeof line);
        cli_error("remote %s: run %s (%s) left no record (exit %d): %s", r->host, token, verb,
                  run_rc, line);
        cJSON_Delete(rec);
        cJSON_Delete(ans);
        return run_rc ? run_rc : EXIT_USAGE;
    }
    if (like_bucket) {
        char differs[256];
        cli_bucket_differs(like_bucket, cJSON_GetObjectItem(rec, "bucket"), differs,
                           sizeof differs);
        if (differs[0]) {
            cli_error("remote %s: run %s ran on a different input bucket than the local run "
                      "(%s differ); refused: it is not entered in the ledger (and not offered "
                      "to collect again)",
                      r->host, token, differs);
            mark_collected(r, token);
            cJSON_Delete(rec);
            cJSON_Delete(ans);
            return EXIT_REMOTE_BUCKET;
        }
    }
    cJSON *rm = extra ? cJSON_Duplicate(extra, true) : cJSON_CreateObject();
    cJSON_DeleteItemFromObject(rm, "node");
    cJSON_AddStringToObject(rm, "node", r->host);
    cJSON_DeleteItemFromObject(rm, "token");
    cJSON_AddStringToObject(rm, "token", token);
    cJSON_AddItemToObject(rm, "node_info", cJSON_DetachItemFromObject(ans, "node"));
    cJSON_DeleteItemFromObject(rec, "remote");
    cJSON_AddItemToObject(rec, "remote", rm);
    cJSON_Delete(ans);
    char *json = cJSON_PrintUnformatted(rec);
    char *run_id = NULL;
    int rrc = cli_record(r->c, verb, json, run_rc, &run_id);
    if (!r->c->quiet && !r->c->json)
        printf("remote %s: run %s (%s) exit %d%s%s\n", r->host, token, verb, run_rc,
               run_id ? " · recorded as " : "", run_id ? run_id : "");
    else if (r->c->json)
        cli_print_json(rec, run_id);
    cJSON_Delete(rec);
    cJSON_free(json);
    if (rrc == run_rc)
        mark_collected(r, token);
    dg_string_free(run_id);
    return rrc;
}

static void new_token(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    char ts[24] = "00000000-000000";
    if (gmtime_r(&t, &tm))
        strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tm);
    unsigned char r[4] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, r, sizeof r) != (ssize_t)sizeof r)
            memset(r, 0, sizeof r);
        close(fd);
    }
    snprintf(buf, len, "%s-%02x%02x%02x%02x", ts, r[0], r[1], r[2], r[3]);
}

/* The local run's bucket for --like RUN_ID (from the local ledger). */
static cJSON *like_bucket_of(cli *c, const char *id, int *rc)
{
    char *def = c->ledger_path ? NULL : dg_ledger_default_path();
    const char *path = c->ledger_path ? c->ledger_path : def;
    dg_ledger *lg = NULL;
    char *json = NULL;
    dg_status st = path ? dg_ledger_open(c->ctx, path, 0, &lg) : DG_ERR_USAGE;
    if (st == DG_OK)
        st = dg_ledger_show(c->ctx, lg, id, &json);
    dg_ledger_close(lg);
    dg_string_free(def);
    cJSON *e = st == DG_OK ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    cJSON *bk = cJSON_DetachItemFromObject(cJSON_GetObjectItem(e, "record"), "bucket");
    cJSON_Delete(e);
    if (st != DG_OK || !cJSON_IsObject(bk)) {
        cli_error("remote: --like %s: %s", id,
                  st != DG_OK ? dg_errmsg(c->ctx) : "that run has no input bucket");
        cJSON_Delete(bk);
        *rc = EXIT_USAGE;
        return NULL;
    }
    return bk;
}

static int remote_run(remote *r, int argc, char **argv, const char *like, bool detach)
{
    int rc = EXIT_PASS;
    cJSON *like_bk = like ? like_bucket_of(r->c, like, &rc) : NULL;
    if (rc)
        return rc;
    cJSON *extra = cJSON_CreateObject();
    cJSON *warnings = cJSON_AddArrayToObject(extra, "warnings");
    cJSON *info = NULL;
    rc = node_check(r, &info, warnings);
    if (rc) {
        cJSON_Delete(extra);
        cJSON_Delete(like_bk);
        return rc;
    }
    const cJSON *w;
    cJSON_ArrayForEach(w, warnings)
        fprintf(stderr, "devgate: remote %s: warning: %s\n", r->host, w->valuestring);
    cJSON_Delete(info);

    /* The run's words, with --data rewritten to the node's cached copy. */
    const char *words[MAX_ARGS + 8];
    char *owned[MAX_ARGS];
    int nw = 0, nowned = 0;
    cJSON *shipped = cJSON_AddArrayToObject(extra, "shipped");
    char token[48];
    new_token(token, sizeof token);
    words[nw++] = "start";
    words[nw++] = token;
    words[nw++] = "--";
    for (int i = 0; i < argc && nw < MAX_ARGS && !rc; i++) {
        const char *a = argv[i], *spec = NULL;
        bool eq = strncmp(a, "--data=", 7) == 0;
        if (eq)
            spec = a + 7;
        else if (strcmp(a, "--data") == 0 && i + 1 < argc)
            spec = argv[++i];
        if (!spec) {
            words[nw++] = a;
            continue;
        }
        char *np = NULL;
        rc = rewrite_data(r, spec, shipped, &np);
        if (rc)
            break;
        if (eq) {
            char *w2 = fmt("--data=%s", np);
            free(np);
            np = w2;
        } else {
            words[nw++] = "--data";
        }
        if (!np) {
            rc = EXIT_USAGE;
            break;
        }
        owned[nowned++] = np;
        words[nw++] = np;
    }
    words[nw] = NULL;
    if (!rc && bucket_verb(argv[0]))
        rc = bucket_check(r, argc, (const char *const *)argv, words + 3, warnings, extra);
    if (!rc) {
        char *out = NULL, *err = NULL;
        int src = ssh_call(r, words, -1, &out, &err);
        if (src == 255)
            rc = ssh_failure(r, src, err, "starting the run");
        else if (src == EXIT_REMOTE_DISK) {
            char line[256];
            last_line(err, line, sizeof line);
            cli_error("remote %s: disk full on the node: %s", r->host, line);
            rc = EXIT_REMOTE_DISK;
        } else if (src != 0) {
            char line[256];
            last_line(err, line, sizeof line);
            cli_error("remote %s: the run could not start (exit %d): %s", r->host, src, line);
            rc = EXIT_USAGE;
        }
        free(out);
        free(err);
    }
    for (int i = 0; i < nowned; i++)
        free(owned[i]);
    if (rc) {
        cJSON_Delete(extra);
        cJSON_Delete(like_bk);
        return rc;
    }
    if (!r->c->quiet)
        fprintf(stderr, "devgate: remote %s: run %s started (detached on the node)\n", r->host,
                token);
    if (detach) {
        printf("remote %s: run %s started; 'devgate remote %s collect %s' fetches it\n", r->host,
               token, r->host, token);
        cJSON_Delete(extra);
        cJSON_Delete(like_bk);
        return EXIT_PASS;
    }
    /* Progress streams to our stderr until the run ends on the node. */
    const char *wait[] = {"wait", token, NULL};
    char *out = NULL;
    int wrc = ssh_call(r, wait, -1, &out, NULL);
    free(out);
    if (wrc != 0) {
        cli_error("remote %s: connection lost mid-run (ssh exit %d); the run goes on on the "
                  "node: 'devgate remote %s collect %s' fetches it",
                  r->host, wrc, r->host, token);
        cJSON_Delete(extra);
        cJSON_Delete(like_bk);
        return EXIT_REMOTE_LOST;
    }
    rc = collect_one(r, token, like_bk, extra);
    cJSON_Delete(extra);
    cJSON_Delete(like_bk);
    return rc;
}

static int remote_collect(remote *r, const char *token)
{
    cJSON *extra = cJSON_CreateObject();
    cJSON *info = NULL;
    int rc = node_check(r, &info, cJSON_AddArrayToObject(extra, "warnings"));
    cJSON_Delete(info);
    if (rc) {
        cJSON_Delete(extra);
        return rc;
    }
    if (token) {
        rc = collect_one(r, token, NULL, extra);
        cJSON_Delete(extra);
        return rc;
    }
    const char *list[] = {"list", NULL};
    char *out = NULL, *err = NULL;
    int lrc = ssh_call(r, list, -1, &out, &err);
    if (lrc != 0)
        rc = lrc == 255 ? ssh_failure(r, lrc, err, "listing runs") : EXIT_USAGE;
    cJSON *arr = rc ? NULL : cJSON_Parse(out);
    free(out);
    free(err);
    int n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, arr)
    {
        int one = collect_one(r, t->valuestring, NULL, extra);
        if (one && !rc)
            rc = one;
        n++;
    }
    if (!rc && n == 0 && !r->c->quiet)
        printf("remote %s: no finished runs to collect\n", r->host);
    cJSON_Delete(arr);
    cJSON_Delete(extra);
    return rc;
}

/* `remote HOST argv WORDS...`: the words as the node received them. */
static int remote_argv(remote *r, int argc, char **argv)
{
    const char *words[MAX_ARGS + 2];
    int n = 0;
    words[n++] = "argv";
    for (int i = 0; i < argc && n < MAX_ARGS; i++)
        words[n++] = argv[i];
    words[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = ssh_call(r, words, -1, &out, &err);
    if (rc == 255)
        rc = ssh_failure(r, rc, err, "sending the words");
    else if (rc == 0)
        fputs(out, stdout);
    free(out);
    free(err);
    return rc;
}

/* One ssh connection for every call of this command (ControlMaster), unless
 * the user's options already name a ControlPath or ControlMaster. */
static void mux_start(remote *r)
{
    for (int i = 0; i < r->nopts; i++)
        if (strncasecmp(r->opts[i], "ControlPath", 11) == 0 ||
            strncasecmp(r->opts[i], "ControlMaster", 13) == 0)
            return;
    const char *tmp = getenv("TMPDIR");
    snprintf(r->mux_dir, sizeof r->mux_dir, "%s/dg-ssh-XXXXXX",
             tmp && tmp[0] && strlen(tmp) < 30 ? tmp : "/tmp");
    if (!mkdtemp(r->mux_dir)) {
        r->mux_dir[0] = '\0';
        return;
    }
    snprintf(r->mux_opt, sizeof r->mux_opt, "ControlPath=%s/cm", r->mux_dir);
}

/* Closes our control connection and its folder. */
static void mux_stop(remote *r)
{
    if (!r->mux_dir[0])
        return;
    const char *ssh = getenv("DEVGATE_SSH");
    const char *argv[] = {
        ssh && ssh[0] ? ssh : "ssh", "-o", r->mux_opt, "-O", "exit", "--", r->host, NULL};
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ) == 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    posix_spawn_file_actions_destroy(&fa);
    char sock[128];
    snprintf(sock, sizeof sock, "%s/cm", r->mux_dir);
    unlink(sock);
    rmdir(r->mux_dir);
}

/* -o OPT (repeatable): appended to the remote's ssh options. */
static const char *add_ssh_opt(const cli_opt *o, const char *value, void *field)
{
    (void)o;
    remote *r = field;
    if (!value[0] || r->nopts >= MAX_SSH_OPTS)
        return "an ssh option such as Port=2222 (at most 32)";
    r->opts[r->nopts++] = value;
    return NULL;
}

typedef struct remote_args {
    const char *like;
    bool detach;
} remote_args;

static const cli_opt remote_opts[] = {
    {CLI_FUNC, "--ssh-option", "-o", "OPT", NULL, NULL,
     "passed to ssh as -o OPT (repeatable; after BatchMode=yes)", 0, 0, 0, add_ssh_opt, NULL, NULL},
    {CLI_STR, "--devgate", NULL, "PATH", "devgate", NULL, "devgate on the node",
     offsetof(remote, devgate), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_STR, "--cache", NULL, "DIR", "~/.cache/devgate on the node", NULL,
     "the node's cache folder (shipped input, runs)", offsetof(remote, cache), 0, 0, NULL, NULL,
     NULL},
    CLI_OPTS_END,
};

static const cli_opt remote_run_opts[] = {
    {CLI_STR, "--like", NULL, "RUN_ID", NULL, NULL,
     "refuse the result unless its input bucket equals this local run's",
     offsetof(remote_args, like), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_FLAG, "--detach", NULL, NULL, NULL, NULL, "return once the run started; collect it later",
     offsetof(remote_args, detach), 0, 0, NULL, NULL, NULL},
    CLI_OPTS_END,
};

const cli_verb cli_verb_remote = {
    .name = "remote",
    .args = "HOST VERB [options] | HOST collect [TOKEN] | HOST argv WORDS...",
    .summary = "run VERB on a node over ssh: node check, input shipped by SHA-256 into its cache, "
               "the run detached there, the record into the local ledger (options go before "
               "HOST)",
    .exits = "the verb's; 2 usage, 10 unreachable, 11 auth refused, 12 devgate missing or too "
             "old, 13 disk full, 14 connection lost (the run goes on), 15 input bucket differs "
             "or arrived corrupt",
    .example = "devgate remote -o Port=2222 mac-mini accept --quick",
    .tables = {remote_opts, remote_run_opts, cli_common_opts},
    .titles = {"ssh and node options", "run options", "common options"},
    .run = cmd_remote,
};

const cli_verb cli_verb_node = {
    .name = "__node",
    .summary =
        "the node side of devgate remote (info, have, put, tree, bucket, start, wait, fetch, "
        "list, mark)",
    .exits = "0 done, 2 usage, 13 disk full, 15 arrived corrupt",
    .example = "devgate __node info",
    .run = cmd_node,
    .hidden = true,
};

int cmd_remote(cli *c, int argc, char **argv)
{
    remote r = {.c = c, .devgate = "devgate"};
    remote_args ra = {NULL, false};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        int pr =
            cli_parse_one(c, &cli_verb_remote, argc, argv, &i, (void *const[]){&r, &ra, c}, NULL);
        if (pr != CLI_PARSED)
            return cli_parse_exit(pr);
    }
    const char *like = ra.like;
    bool detach = ra.detach;
    r.host = i < argc ? argv[i++] : NULL;
    if (!r.host || i >= argc) {
        cli_error("remote: use 'remote [options] HOST VERB [options]', 'remote HOST collect "
                  "[TOKEN]' or 'remote HOST argv WORDS...' (devgate remote --help)");
        return EXIT_USAGE;
    }
    const char *verb = argv[i];
    if (c->no_ledger && strcmp(verb, "argv") != 0) {
        cli_error("remote: --no-ledger: the returned record enters the local ledger");
        return EXIT_USAGE;
    }
    mux_start(&r);
    int rc;
    if (strcmp(verb, "collect") == 0)
        rc = remote_collect(&r, i + 1 < argc ? argv[i + 1] : NULL);
    else if (strcmp(verb, "argv") == 0)
        rc = remote_argv(&r, argc - i - 1, argv + i + 1);
    else
        rc = remote_run(&r, argc - i, argv + i, like, detach);
    mux_stop(&r);
    return rc;
}

/* ---- the node side: devgate __node [--cache DIR] SUB ... --------------------- */

static char *node_cache_dir(const char *given)
{
    if (given)
        return strdup(given);
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && x[0] == '/')
        return fmt("%s/devgate", x);
    const char *h = getenv("HOME");
    return fmt("%s/.cache/devgate", h && h[0] ? h : "/tmp");
}

static bool hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool plain_name(const char *s)
{
    return s && s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 200;
}

static bool token_ok(const char *s)
{
    if (!s || !s[0] || strlen(s) > 40)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == '-'))
            return false;
    return true;
}

static int node_info(const char *cache)
{
    cli_make_dirs(cache);
    struct statvfs vf;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "protocol", REMOTE_PROTOCOL);
    cJSON_AddStringToObject(o, "version", DG_VERSION);
    cJSON_AddStringToObject(o, "commit", dg_build_commit());
    cJSON_AddStringToObject(o, "backends", dg_build_backends());
    cJSON_AddStringToObject(o, "host", host);
    cJSON_AddStringToObject(o, "cache", cache);
    if (statvfs(cache, &vf) == 0)
        cJSON_AddNumberToObject(o, "free_bytes", (double)vf.f_bavail * (double)vf.f_frsize);
    else
        cJSON_AddNullToObject(o, "free_bytes");
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    cJSON_free(s);
    cJSON_Delete(o);
    return EXIT_PASS;
}

static void put_answer(const char *state, const char *path)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "state", state);
    if (path)
        cJSON_AddStringToObject(o, "path", path);
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    cJSON_free(s);
    cJSON_Delete(o);
}

/* have SHA NAME: ok (verified now), missing, or tampered (removed). */
static int node_have(cli *c, const char *cache, const char *sha, const char *name)
{
    char *path = fmt("%s/objects/%s/%s", cache, sha, name);
    struct stat sb;
    if (!path || stat(path, &sb) != 0) {
        put_answer("missing", NULL);
    } else {
        char hex[65];
        if (dg_sha256_file(c->ctx, path, hex, NULL) == DG_OK && strcmp(hex, sha) == 0) {
            put_answer("ok", path);
        } else {
            unlink(path);
            put_answer("tampered", NULL);
        }
    }
    free(path);
    return EXIT_PASS;
}

/* put SHA NAME SIZE: stdin into the cache, kept only when it hashes to SHA. */
static int node_put(cli *c, const char *cache, const char *sha, const char *name, const char *size)
{
    long long want = atoll(size);
    char *dir = fmt("%s/objects/%s", cache, sha);
    char *tmp = fmt("%s/.incoming-%ld", dir ? dir : "", (long)getpid());
    char *path = fmt("%s/%s", dir ? dir : "", name);
    int ret = EXIT_PASS;
    struct statvfs vf;
    if (!dir || !tmp || !path || !cli_make_dirs(dir)) {
        cli_error("node: cannot create %s: %s", dir ? dir : "cache", strerror(errno));
        ret = errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
    } else if (statvfs(dir, &vf) == 0 && (double)vf.f_bavail * (double)vf.f_frsize < (double)want) {
        cli_error("node: %lld bytes do not fit in %s (%.0f bytes free)", want, cache,
                  (double)vf.f_bavail * (double)vf.f_frsize);
        ret = EXIT_REMOTE_DISK;
    } else {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        char buf[1 << 16];
        long long got = 0;
        ssize_t n;
        while (fd >= 0 && (n = read(0, buf, sizeof buf)) > 0) {
            if (write(fd, buf, (size_t)n) != n) {
                ret = errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
                cli_error("node: writing %s: %s", tmp, strerror(errno));
                break;
            }
            got += n;
        }
        if (fd < 0 || (fd >= 0 && close(fd) != 0)) {
            if (!ret) {
                ret = errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
                cli_error("node: writing %s: %s", tmp, strerror(errno));
            }
        }
        char hex[65] = "";
        if (!ret && (dg_sha256_file(c->ctx, tmp, hex, NULL) != DG_OK || strcmp(hex, sha) != 0 ||
                     got != want)) {
            cli_error("node: %s arrived with SHA-256 %.16s and %lld bytes, expected %.16s and %lld "
                      "bytes; discarded",
                      name, hex, got, sha, want);
            ret = EXIT_REMOTE_BUCKET;
        }
        if (!ret && rename(tmp, path) != 0) {
            cli_error("node: keeping %s: %s", path, strerror(errno));
            ret = EXIT_USAGE;
        }
        if (ret)
            unlink(tmp);
        else
            put_answer("ok", path);
    }
    free(dir);
    free(tmp);
    free(path);
    return ret;
}

/* A relative path inside a tree: no absolute path, no empty, "." or ".."
 * component. */
static bool rel_ok(const char *s)
{
    if (!s || !s[0] || s[0] == '/' || strlen(s) > 1000)
        return false;
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.') ||
            p[0] == '.')
            return false;
        p += n;
        if (*p == '/')
            p++;
        else
            break;
    }
    return s[strlen(s) - 1] != '/';
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : 0;
}

static long g_tree_count;

static int count_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F && S_ISREG(sb->st_mode))
        g_tree_count++;
    return 0;
}

/* True when the tree at dir holds exactly n regular files, each the very
 * file (same inode) of the cached object it was linked from. */
static bool tree_intact(const char *dir, char **rels, ino_t *inos, int n)
{
    g_tree_count = 0;
    if (nftw(dir, count_entry, 16, FTW_PHYS) != 0 || g_tree_count != n)
        return false;
    for (int i = 0; i < n; i++) {
        char *tf = fmt("%s/%s", dir, rels[i]);
        struct stat tb;
        bool same = tf && lstat(tf, &tb) == 0 && tb.st_ino == inos[i];
        free(tf);
        if (!same)
            return false;
    }
    return true;
}

/* Removes the folder at path and everything in it. */
static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* tree ID (manifest on stdin: "SHA SIZE RELPATH" lines): the folder ID
 * assembled in CACHE/trees/ID from the cached files (hard links), each
 * verified by its SHA-256 first; {"state": "ok", "path"} or {"state":
 * "missing", "missing": [SHA...], "tampered": N} (a changed file removed). */
static int node_tree(cli *c, const char *cache, const char *id)
{
    char *trees = fmt("%s/trees", cache);
    char *inc = fmt("%s/trees/.incoming-%ld", cache, (long)getpid());
    int ret = EXIT_PASS;
    if (!trees || !inc || !cli_make_dirs(trees)) {
        cli_error("node: cannot create %s: %s", trees ? trees : "trees", strerror(errno));
        ret = errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
        free(trees);
        free(inc);
        return ret;
    }
    char *text = cli_read_fd(0, 64 << 20);
    char hex[65] = "";
    bool saved = text && cli_write_file(inc, text);
    if (!saved) {
        cli_error("node: cannot keep the manifest of tree %.16s: %s", id, strerror(errno));
        ret = errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
    } else if (dg_sha256_file(c->ctx, inc, hex, NULL) != DG_OK || strcmp(hex, id) != 0) {
        cli_error("node: the manifest of tree %.16s arrived with SHA-256 %.16s; discarded", id,
                  hex);
        ret = EXIT_REMOTE_BUCKET;
    }
    unlink(inc);
    free(inc);
    cJSON *missing = cJSON_CreateArray();
    int tampered = 0, nfiles = 0, ncap = 0;
    char **rels = NULL;
    ino_t *inos = NULL;
    char *tree = fmt("%s/%s", trees, id);
    char *build = fmt("%s/.build-%ld", trees, (long)getpid());
    char *stale = fmt("%s/.stale-%ld", trees, (long)getpid());
    if (!ret && (!tree || !build || !stale))
        ret = EXIT_USAGE;
    if (!ret) {
        rm_tree(build);
        rm_tree(stale);
    }
    /* Each line: verify the cached object, then hard-link it into a new tree
     * (always built afresh: links are cheap, and a changed old tree is gone). */
    char *save = NULL;
    for (char *line = ret ? NULL : strtok_r(text, "\n", &save); line && !ret;
         line = strtok_r(NULL, "\n", &save)) {
        char sha[65];
        unsigned long long size = 0;
        int used = 0;
        if (sscanf(line, "%64s %llu %n", sha, &size, &used) != 2 || !hex64(sha) ||
            !rel_ok(line + used)) {
            cli_error("node: tree %.16s: a bad manifest line '%.80s'", id, line);
            ret = EXIT_USAGE;
            break;
        }
        const char *rel = line + used;
        const char *bn = strrchr(rel, '/');
        bn = bn ? bn + 1 : rel;
        if (nfiles >= ncap) {
            int nc = ncap ? ncap * 2 : 256;
            char **nr = realloc(rels, (size_t)nc * sizeof *nr);
            if (nr)
                rels = nr;
            ino_t *ni = realloc(inos, (size_t)nc * sizeof *ni);
            if (ni)
                inos = ni;
            if (!nr || !ni) {
                ret = EXIT_USAGE;
                break;
            }
            ncap = nc;
        }
        rels[nfiles] = (char *)rel; /* points into text */
        inos[nfiles] = 0;
        nfiles++;
        char *obj = fmt("%s/objects/%s/%s", cache, sha, bn);
        struct stat ob;
        char h[65];
        bool have = obj && stat(obj, &ob) == 0 && dg_sha256_file(c->ctx, obj, h, NULL) == DG_OK &&
                    strcmp(h, sha) == 0 && (unsigned long long)ob.st_size == size;
        if (!have && obj && access(obj, F_OK) == 0) {
            unlink(obj);
            tampered++;
        }
        if (!have) {
            bool listed = false;
            const cJSON *m;
            cJSON_ArrayForEach(m, missing) listed = listed || strcmp(m->valuestring, sha) == 0;
            if (!listed)
                cJSON_AddItemToArray(missing, cJSON_CreateString(sha));
        } else if (cJSON_GetArraySize(missing) == 0) {
            inos[nfiles - 1] = ob.st_ino;
            char *tf = fmt("%s/%s", build, rel);
            char *slash = tf ? strrchr(tf, '/') : NULL;
            if (slash) {
                *slash = '\0';
                cli_make_dirs(tf);
                *slash = '/';
            }
            if (!tf || link(obj, tf) != 0) {
                cli_error("node: tree %.16s: cannot link %s: %s", id, rel, strerror(errno));
                ret = errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
            }
            free(tf);
        }
        free(obj);
    }
    if (!ret && cJSON_GetArraySize(missing) > 0) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "state", "missing");
        cJSON_AddItemToObject(o, "missing", missing);
        missing = NULL;
        cJSON_AddNumberToObject(o, "tampered", tampered);
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else if (!ret && access(tree, F_OK) == 0 && tree_intact(tree, rels, inos, nfiles)) {
        put_answer("ok", tree); /* as it was: a run using it is not disturbed */
    } else if (!ret) {
        /* the old tree (changed: not what the manifest says) out of the way, the new one in */
        if (access(tree, F_OK) == 0 && rename(tree, stale) != 0) {
            cli_error("node: replacing tree %s: %s", tree, strerror(errno));
            ret = EXIT_USAGE;
        }
        if (!ret && mkdir(build, 0755) != 0 && errno != EEXIST) {
            cli_error("node: tree %s: %s", build, strerror(errno));
            ret = errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
        }
        if (!ret && rename(build, tree) != 0) {
            cli_error("node: keeping tree %s: %s", tree, strerror(errno));
            ret = EXIT_USAGE;
        }
        if (!ret)
            put_answer("ok", tree);
    }
    if (build)
        rm_tree(build);
    if (stale)
        rm_tree(stale);
    free(stale);
    free(rels);
    free(inos);
    cJSON_Delete(missing);
    free(text);
    free(tree);
    free(build);
    free(trees);
    return ret;
}

/* start TOKEN -- VERB ARGS: runs `devgate --no-ledger --json VERB ARGS` in
 * CACHE/runs/TOKEN, detached from the connection (its own session, no
 * terminal, output to files); exit_status holds its exit status when done. */
static int node_start(cli *c, const char *cache, const char *token, int argc, char **argv)
{
    char *dir = fmt("%s/runs/%s", cache, token);
    if (!dir || !cli_make_dirs(dir)) {
        cli_error("node: cannot create %s: %s", dir ? dir : "run folder", strerror(errno));
        int e = errno;
        free(dir);
        return e == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
    }
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "verb", argv[0]);
    cJSON *words = cJSON_AddArrayToObject(meta, "argv");
    for (int i = 0; i < argc; i++)
        cJSON_AddItemToArray(words, cJSON_CreateString(argv[i]));
    char *mtext = cJSON_Print(meta);
    cJSON_Delete(meta);
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/run.json", dir);
    bool ok = mtext && cli_write_file(mpath, mtext);
    cJSON_free(mtext);
    if (!ok) {
        free(dir);
        return errno == ENOSPC ? EXIT_REMOTE_DISK : EXIT_USAGE;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        cli_error("node: cannot tell where this devgate is");
        free(dir);
        return EXIT_USAGE;
    }
    self[sl] = '\0';
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p < 0) {
        cli_error("node: fork: %s", strerror(errno));
        free(dir);
        return EXIT_USAGE;
    }
    if (p == 0) {
        setsid();
        signal(SIGHUP, SIG_IGN);
        if (chdir(dir) != 0)
            _exit(2);
        int in = open("/dev/null", O_RDONLY);
        int out = open("record.json", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open("progress.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0 || err < 0)
            _exit(2);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        pid_t g = fork();
        if (g == 0) {
            const char *args[MAX_ARGS + 6];
            int n = 0;
            args[n++] = self;
            args[n++] = "--no-ledger";
            args[n++] = "--json";
            for (int i = 0; i < argc && n < MAX_ARGS; i++)
                args[n++] = argv[i];
            args[n] = NULL;
            execv(self, (char *const *)args);
            _exit(127);
        }
        int ws = 0, code = 127;
        if (g > 0) {
            while (waitpid(g, &ws, 0) < 0 && errno == EINTR) {
            }
            code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        }
        FILE *f = fopen("exit_status.tmp", "w");
        if (f) {
            fprintf(f, "%d\n", code);
            fclose(f);
            rename("exit_status.tmp", "exit_status");
        }
        _exit(0);
    }
    printf("%s\n", token);
    (void)c;
    free(dir);
    return EXIT_PASS;
}

/* wait TOKEN: copies progress.log to stderr as it grows, until exit_status. */
static int node_wait(const char *cache, const char *token)
{
    char *dir = fmt("%s/runs/%s", cache, token);
    char log[4200], done[4200];
    snprintf(log, sizeof log, "%s/progress.log", dir ? dir : "");
    snprintf(done, sizeof done, "%s/exit_status", dir ? dir : "");
    free(dir);
    off_t pos = 0;
    for (;;) {
        bool finished = access(done, F_OK) == 0;
        int fd = open(log, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[8192];
            ssize_t n;
            while ((n = pread(fd, buf, sizeof buf, pos)) > 0) {
                if (write(2, buf, (size_t)n) < 0)
                    break;
                pos += n;
            }
            close(fd);
        }
        if (finished)
            return EXIT_PASS;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* fetch TOKEN: {"token", "verb", "exit_status", "record", "node", ...} or
 * {"running": true}. */
static int node_fetch(const char *cache, const char *token)
{
    char *dir = fmt("%s/runs/%s", cache, token);
    char p[4200];
    snprintf(p, sizeof p, "%s/run.json", dir ? dir : "");
    char *meta_text = cli_read_file(p, 1 << 20);
    if (!meta_text) {
        cli_error("node: no run %s in %s", token, cache);
        free(dir);
        return EXIT_FAIL;
    }
    cJSON *o = cJSON_Parse(meta_text);
    free(meta_text);
    if (!o)
        o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", token);
    snprintf(p, sizeof p, "%s/exit_status", dir);
    char *code = cli_read_file(p, 64);
    if (!code) {
        cJSON_AddBoolToObject(o, "running", true);
    } else {
        cJSON_AddNumberToObject(o, "exit_status", atoi(code));
        free(code);
        snprintf(p, sizeof p, "%s/record.json", dir);
        char *rec = cli_read_file(p, 256 << 20);
        cJSON *r = rec ? cJSON_Parse(rec) : NULL;
        free(rec);
        if (r)
            cJSON_AddItemToObject(o, "record", r);
        snprintf(p, sizeof p, "%s/progress.log", dir);
        char *log = cli_read_file(p, 64 << 20);
        size_t n = log ? strlen(log) : 0;
        cJSON_AddStringToObject(o, "stderr_tail", log ? log + (n > 2000 ? n - 2000 : 0) : "");
        free(log);
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON *node = cJSON_AddObjectToObject(o, "node");
    cJSON_AddStringToObject(node, "host", host);
    cJSON_AddStringToObject(node, "version", DG_VERSION);
    cJSON_AddStringToObject(node, "commit", dg_build_commit());
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    cJSON_free(s);
    cJSON_Delete(o);
    free(dir);
    return EXIT_PASS;
}

/* list: finished runs not yet collected, oldest first (tokens sort by time). */
static int node_list(const char *cache)
{
    char *runs = fmt("%s/runs", cache);
    cJSON *arr = cJSON_CreateArray();
    struct dirent **names = NULL;
    int n = runs ? scandir(runs, &names, NULL, alphasort) : -1;
    for (int i = 0; i < n; i++) {
        const char *t = names[i]->d_name;
        char p1[4200], p2[4200];
        snprintf(p1, sizeof p1, "%s/%s/exit_status", runs, t);
        snprintf(p2, sizeof p2, "%s/%s/collected", runs, t);
        if (token_ok(t) && access(p1, F_OK) == 0 && access(p2, F_OK) != 0)
            cJSON_AddItemToArray(arr, cJSON_CreateString(t));
        free(names[i]);
    }
    free(names);
    char *s = cJSON_PrintUnformatted(arr);
    puts(s);
    cJSON_free(s);
    cJSON_Delete(arr);
    free(runs);
    return EXIT_PASS;
}

static int node_mark(const char *cache, const char *token)
{
    char *p = fmt("%s/runs/%s/collected", cache, token);
    int fd = p ? open(p, O_WRONLY | O_CREAT, 0644) : -1;
    if (fd >= 0)
        close(fd);
    free(p);
    return fd >= 0 ? EXIT_PASS : EXIT_USAGE;
}

int cmd_node(cli *c, int argc, char **argv)
{
    const char *given = NULL;
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--cache") == 0) {
        given = argv[i + 1];
        i += 2;
    }
    if (i >= argc) {
        cli_error("__node: which request?");
        return EXIT_USAGE;
    }
    const char *sub = argv[i++];
    cli_term_machine_output(); /* the answers are JSON for the other side */
    int left = argc - i;
    char **rest = argv + i;
    char *cache = node_cache_dir(given);
    int rc = EXIT_USAGE;
    if (!cache)
        cli_error("node: out of memory");
    else if (strcmp(sub, "info") == 0)
        rc = node_info(cache);
    else if (strcmp(sub, "argv") == 0) {
        cJSON *a = cJSON_CreateArray();
        for (int k = 0; k < left; k++)
            cJSON_AddItemToArray(a, cJSON_CreateString(rest[k]));
        char *s = cJSON_Print(a);
        puts(s);
        cJSON_free(s);
        cJSON_Delete(a);
        rc = EXIT_PASS;
    } else if (strcmp(sub, "have") == 0 && left == 2 && hex64(rest[0]) && plain_name(rest[1]))
        rc = node_have(c, cache, rest[0], rest[1]);
    else if (strcmp(sub, "bucket") == 0 && left >= 2 && strcmp(rest[0], "--") == 0)
        rc = node_bucket(left - 1, rest + 1);
    else if (strcmp(sub, "tree") == 0 && left == 1 && hex64(rest[0]))
        rc = node_tree(c, cache, rest[0]);
    else if (strcmp(sub, "put") == 0 && left == 3 && hex64(rest[0]) && plain_name(rest[1]))
        rc = node_put(c, cache, rest[0], rest[1], rest[2]);
    else if (strcmp(sub, "start") == 0 && left >= 3 && token_ok(rest[0]) &&
             strcmp(rest[1], "--") == 0)
        rc = node_start(c, cache, rest[0], left - 2, rest + 2);
    else if (strcmp(sub, "wait") == 0 && left == 1 && token_ok(rest[0]))
        rc = node_wait(cache, rest[0]);
    else if (strcmp(sub, "fetch") == 0 && left == 1 && token_ok(rest[0]))
        rc = node_fetch(cache, rest[0]);
    else if (strcmp(sub, "list") == 0 && left == 0)
        rc = node_list(cache);
    else if (strcmp(sub, "mark") == 0 && left == 1 && token_ok(rest[0]))
        rc = node_mark(cache, rest[0]);
    else
        cli_error("__node: bad request '%s'", sub);
    free(cache);
    return rc;
}
