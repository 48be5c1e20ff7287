/* Shipping the input of a remote run: each file of --data content-addressed
 * into the node's cache (sent only when missing there, SHA-256 verified on
 * arrival), a folder as its files plus a manifest from which the node
 * assembles it; the spec rewritten to the node's paths. docs/team.md. */
#include "remote/remote_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TREE_MAX_FILES 200000
#define TREE_MAX_DEPTH 6

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

bool dg_remote_parse_state(const char *text, char *state, size_t slen, char *path, size_t plen)
{
    state[0] = '\0';
    path[0] = '\0';
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *s = cJSON_GetObjectItem(j, "state"), *p = cJSON_GetObjectItem(j, "path");
    bool ok = cJSON_IsString(s) && strlen(s->valuestring) < slen &&
              (!p || (cJSON_IsString(p) && p->valuestring[0] && strlen(p->valuestring) < plen));
    if (ok) {
        snprintf(state, slen, "%s", s->valuestring);
        if (p)
            snprintf(path, plen, "%s", p->valuestring);
    }
    cJSON_Delete(j);
    return ok;
}

/* The failure of a put or tree call that ssh itself did not fail. */
static dg_status ship_refused(dg_remote *r, const dg_ssh_answer *a, const char *what,
                              unsigned long long size)
{
    char line[256];
    dg_remote_last_line(a->err, line, sizeof line);
    if (a->rc == DG_NODE_EXIT_DISK)
        return dg_remote_fail(r, DG_REMOTE_DISK,
                              "remote %s: disk full on the node while receiving %s (%llu bytes): "
                              "%s",
                              r->cfg.host, what, size, line);
    if (a->rc == DG_NODE_EXIT_CORRUPT)
        return dg_remote_fail(r, DG_REMOTE_BUCKET,
                              "remote %s: %s arrived corrupt (%s); nothing "
                              "was run",
                              r->cfg.host, what, line);
    return dg_remote_fail(r, DG_REMOTE_USAGE, "remote %s: sending %s failed (exit %d): %s",
                          r->cfg.host, what, a->rc, line);
}

/* Sends the file at path (hex, size) into the node's cache: put's answer. */
static dg_status put_file(dg_remote *r, const char *path, const char *hex, uint64_t size,
                          dg_ssh_answer *a)
{
    char sz[32];
    snprintf(sz, sizeof sz, "%llu", (unsigned long long)size);
    const char *put[] = {"put", hex, base_name(path), sz, NULL};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: cannot open %s: %s", path,
                              strerror(errno));
    dg_status st = dg_remote_ssh(r, put, fd, false, a);
    close(fd);
    if (st != DG_OK)
        return st;
    if (a->rc == 255 || a->too_big)
        st = dg_remote_ssh_failure(r, a, "sending the input");
    else if (a->rc != 0)
        st = ship_refused(r, a, base_name(path), (unsigned long long)size);
    if (st != DG_OK)
        dg_ssh_answer_free(a);
    return st;
}

/* Ships the file at path into the node's cache unless it is there already
 * (verified by SHA-256 on the node); *node_path gets its path there (dg_free). */
static dg_status ship_file(dg_remote *r, const char *path, cJSON *shipped, char **node_path)
{
    *node_path = NULL;
    char hex[65];
    uint64_t size = 0;
    if (dg_sha256_file(r->ctx, path, hex, &size) != DG_OK)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: %s", dg_errmsg(r->ctx));
    const char *name = base_name(path);
    const char *have[] = {"have", hex, name, NULL};
    dg_ssh_answer a;
    dg_status st = dg_remote_ssh(r, have, -1, false, &a);
    if (st != DG_OK)
        return st;
    char line[256], state[16], np[4096];
    dg_remote_last_line(a.err, line, sizeof line);
    if (a.rc == 255 || a.too_big)
        st = dg_remote_ssh_failure(r, &a, "asking the node's cache");
    else if (a.rc != 0)
        st = dg_remote_fail(r, DG_REMOTE_USAGE, "remote %s: the node's cache could not be read: %s",
                            r->cfg.host, line);
    else if (!dg_remote_parse_state(a.out, state, sizeof state, np, sizeof np))
        st = dg_remote_fail(r, DG_REMOTE_USAGE,
                            "remote %s: the node's answer about %s is not "
                            "one of the protocol",
                            r->cfg.host, name);
    dg_ssh_answer_free(&a);
    if (st != DG_OK)
        return st;
    bool sent = strcmp(state, "ok") != 0;
    if (strcmp(state, "tampered") == 0)
        dg_remote_note(r, DG_REMOTE_WARNING,
                       "the node's cached %s did not match its SHA-256 %.16s (changed after it "
                       "arrived); it was removed and is sent again",
                       name, hex);
    if (sent) {
        st = put_file(r, path, hex, size, &a);
        if (st != DG_OK)
            return st;
        bool ok = dg_remote_parse_state(a.out, state, sizeof state, np, sizeof np);
        dg_ssh_answer_free(&a);
        if (!ok || strcmp(state, "ok") != 0)
            return dg_remote_fail(r, DG_REMOTE_USAGE,
                                  "remote %s: the node's answer to %s "
                                  "sent is not one of the protocol",
                                  r->cfg.host, name);
    }
    if (!np[0])
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote %s: the node named no path for %s",
                              r->cfg.host, name);
    *node_path = dg_strdup(np);
    cJSON *s = cJSON_CreateObject();
    dg_json_add_str(s, "name", name);
    cJSON_AddStringToObject(s, "sha256", hex);
    cJSON_AddNumberToObject(s, "bytes", (double)size);
    cJSON_AddBoolToObject(s, "sent", sent);
    cJSON_AddItemToArray(shipped, s);
    dg_remote_note(r, DG_REMOTE_NOTE, "%s %s (sha256 %.16s, %llu bytes)", name,
                   sent ? "sent" : "already in the node's cache", hex, (unsigned long long)size);
    return *node_path ? DG_OK : dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
}

/* ---- a folder (images:DIR, cifar:DIR) ------------------------------------ */

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
        dg_free(t->v[i].rel);
        dg_free(t->v[i].full);
    }
    dg_free(t->v);
}

/* Adds a file (taking rel and full) to t. */
static dg_status tree_add(dg_remote *r, tree_list *t, char **rel, char **full)
{
    if (t->n >= TREE_MAX_FILES)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: --data folder holds more than %d files",
                              TREE_MAX_FILES);
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        tree_file *nv = dg_realloc(t->v, nc * sizeof *nv);
        if (!nv)
            return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = (tree_file){.rel = *rel, .full = *full};
    *rel = *full = NULL;
    return DG_OK;
}

/* Every regular file under dir (symlinks followed, names starting with '.'
 * skipped, as the data sources skip them), relative names from rel. */
static dg_status tree_walk(dg_remote *r, const char *dir, const char *rel, int depth, tree_list *t)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: --data folder %s: %s", dir,
                              strerror(errno));
    dg_status st = DG_OK;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (st == DG_OK && nm[0] != '.') {
            char *full = dg_asprintf("%s/%s", dir, nm);
            char *r2 = rel[0] ? dg_asprintf("%s/%s", rel, nm) : dg_strdup(nm);
            struct stat sb;
            if (!full || !r2)
                st = dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
            else if (strchr(nm, '\n') || strlen(nm) >= 200)
                st = dg_remote_fail(r, DG_REMOTE_USAGE,
                                    "remote: --data folder: the name %s cannot be shipped (a "
                                    "newline, or 200 bytes or more)",
                                    full);
            else if (stat(full, &sb) != 0)
                ; /* a dangling link: the data source skips it too */
            else if (S_ISDIR(sb.st_mode) && depth >= TREE_MAX_DEPTH)
                st = dg_remote_fail(r, DG_REMOTE_USAGE,
                                    "remote: --data folder: %s is nested deeper than %d folders",
                                    full, TREE_MAX_DEPTH);
            else if (S_ISDIR(sb.st_mode))
                st = tree_walk(r, full, r2, depth + 1, t);
            else if (S_ISREG(sb.st_mode))
                st = tree_add(r, t, &r2, &full);
            dg_free(full);
            dg_free(r2);
        }
        free(names[i]);
    }
    free(names);
    return st;
}

/* The manifest text: "SHA SIZE RELPATH\n" per file, sorted by path. */
static char *tree_manifest(const tree_list *t)
{
    size_t cap = 1;
    for (size_t i = 0; i < t->n; i++)
        cap += strlen(t->v[i].rel) + 64 + 24 + 3;
    char *m = dg_malloc(cap);
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

/* Asks the node to assemble tree id from its cache; *ans its parsed answer. */
static dg_status tree_call(dg_remote *r, const char *id, const char *manifest, cJSON **ans)
{
    *ans = NULL;
    int fd = text_fd(manifest);
    if (fd < 0)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: cannot keep the folder's manifest: %s",
                              strerror(errno));
    const char *req[] = {"tree", id, NULL};
    dg_ssh_answer a;
    dg_status st = dg_remote_ssh(r, req, fd, false, &a);
    close(fd);
    if (st != DG_OK)
        return st;
    static const dg_node_words tree = {"asking the node's cache for a folder",
                                       " while assembling a folder",
                                       "the node could not assemble the folder", DG_REMOTE_BUCKET};
    st = dg_remote_node_status(r, &a, &tree);
    if (st == DG_OK && !cJSON_IsObject(*ans = cJSON_Parse(a.out)))
        st = dg_remote_fail(r, DG_REMOTE_USAGE,
                            "remote %s: the node's answer about a folder is "
                            "not JSON",
                            r->cfg.host);
    dg_ssh_answer_free(&a);
    return st;
}

/* Hashes every file of t (sorted first), the manifest into *manifest and its
 * SHA-256, the tree's id, into id. */
static dg_status tree_hash(dg_remote *r, tree_list *t, char **manifest, char id[65],
                           uint64_t *total)
{
    qsort(t->v, t->n, sizeof *t->v, cmp_tree_file);
    *total = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (dg_sha256_file(r->ctx, t->v[i].full, t->v[i].sha, &t->v[i].size) != DG_OK)
            return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: %s", dg_errmsg(r->ctx));
        *total += t->v[i].size;
    }
    *manifest = tree_manifest(t);
    int mfd = *manifest ? text_fd(*manifest) : -1;
    if (mfd < 0)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: cannot keep the folder's manifest");
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", mfd);
    dg_status st = dg_sha256_file(r->ctx, fdpath, id, NULL);
    close(mfd);
    return st == DG_OK ? DG_OK
                       : dg_remote_fail(r, DG_REMOTE_USAGE, "remote: %s", dg_errmsg(r->ctx));
}

/* Sends the files the node's answer names missing; their count into *sent. */
static dg_status tree_send_missing(dg_remote *r, const tree_list *t, const cJSON *ans,
                                   const char *path, int *sent)
{
    double tv = dg_jnum(ans, "tampered");
    int tampered = tv > 0 && tv < 1e9 ? (int)tv : 0;
    if (tampered > 0)
        dg_remote_note(r, DG_REMOTE_WARNING,
                       "%d cached file%s of %s did not match %s SHA-256 (changed after "
                       "arrival); removed and sent again",
                       tampered, tampered == 1 ? "" : "s", path, tampered == 1 ? "its" : "their");
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(ans, "missing"))
    {
        if (!cJSON_IsString(m))
            continue;
        for (size_t i = 0; i < t->n; i++) {
            if (strcmp(t->v[i].sha, m->valuestring) != 0)
                continue;
            char *np = NULL;
            cJSON *one = cJSON_CreateArray();
            r->quiet_notes = true; /* one summary line for the folder */
            dg_status st = ship_file(r, t->v[i].full, one, &np);
            r->quiet_notes = false;
            cJSON_Delete(one);
            dg_free(np);
            if (st != DG_OK)
                return st;
            (*sent)++;
            break;
        }
    }
    return DG_OK;
}

/* Ships the files of t (its rel names their places in the tree): each one
 * content-addressed into the node's cache only when missing there, then the
 * node assembles the tree (named by the SHA-256 of its manifest, into id)
 * from its cache; *node_path its path there. name is the record's, what the
 * note's ("folder photos"). */
static dg_status ship_list(dg_remote *r, tree_list *t, const char *name, const char *what,
                           cJSON *shipped, char id[65], char **node_path)
{
    *node_path = NULL;
    char *manifest = NULL;
    uint64_t total = 0;
    cJSON *ans = NULL;
    int sent = 0;
    dg_status st = tree_hash(r, t, &manifest, id, &total);
    if (st == DG_OK)
        st = tree_call(r, id, manifest, &ans);
    if (st == DG_OK && strcmp(dg_jstr(ans, "state") ? dg_jstr(ans, "state") : "", "missing") == 0) {
        /* send what the node lacks (or held changed: it removed those), then ask again */
        st = tree_send_missing(r, t, ans, what, &sent);
        cJSON_Delete(ans);
        ans = NULL;
        if (st == DG_OK)
            st = tree_call(r, id, manifest, &ans);
    }
    const char *state = dg_jstr(ans, "state"), *np = dg_jstr(ans, "path");
    if (st == DG_OK && (!state || strcmp(state, "ok") != 0 || !np || !np[0]))
        st = dg_remote_fail(r, sent ? DG_REMOTE_BUCKET : DG_REMOTE_USAGE,
                            sent ? "remote %s: the node still lacks files of %s after they were "
                                   "sent"
                                 : "remote %s: the node's answer about %s is not one of the "
                                   "protocol",
                            r->cfg.host, what);
    if (st == DG_OK && !(*node_path = dg_strdup(np)))
        st = dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
    if (st == DG_OK) {
        cJSON *s = cJSON_CreateObject();
        dg_json_add_str(s, "name", name);
        cJSON_AddStringToObject(s, "tree", id);
        cJSON_AddNumberToObject(s, "files", (double)t->n);
        cJSON_AddNumberToObject(s, "bytes", (double)total);
        cJSON_AddNumberToObject(s, "files_sent", sent);
        cJSON_AddBoolToObject(s, "sent", sent > 0);
        cJSON_AddItemToArray(shipped, s);
        dg_remote_note(r, DG_REMOTE_NOTE,
                       "%s: %zu file%s, %d sent, %zu already in the node's cache (tree sha256 "
                       "%.16s, %llu bytes)",
                       what, t->n, t->n == 1 ? "" : "s", sent, t->n - (size_t)sent, id,
                       (unsigned long long)total);
    }
    cJSON_Delete(ans);
    dg_free(manifest);
    return st;
}

/* Ships the folder at path (every file under it); *node_path its tree there. */
static dg_status ship_tree(dg_remote *r, const char *path, cJSON *shipped, char **node_path)
{
    *node_path = NULL;
    tree_list t = {0};
    char id[65] = "";
    char *what = dg_asprintf("folder %s", base_name(path));
    dg_status st = what ? tree_walk(r, path, "", 0, &t)
                        : dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
    if (st == DG_OK && t.n == 0)
        st = dg_remote_fail(r, DG_REMOTE_USAGE, "remote: --data folder %s holds no files", path);
    if (st == DG_OK)
        st = ship_list(r, &t, base_name(path), what, shipped, id, node_path);
    dg_free(what);
    tree_list_free(&t);
    return st;
}

/* The file a command word names under the working folder, as a relative
 * path (a leading "./" dropped; --opt=PATH's value too), or NULL. */
static const char *command_file(const char *word)
{
    const char *eq = word[0] == '-' ? strchr(word, '=') : NULL;
    const char *p = eq ? eq + 1 : word;
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    struct stat sb;
    if (!dg_remote_rel_ok(p) || stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
        return NULL;
    return p;
}

dg_status dg_remote_ship_command(dg_remote *r, int argc, const char *const *argv, char id[65])
{
    id[0] = '\0';
    int k = 0;
    while (k < argc && strcmp(argv[k], "--") != 0)
        k++;
    tree_list t = {0};
    dg_status st = DG_OK;
    for (int i = k + 1; i < argc && st == DG_OK; i++) {
        const char *rel = command_file(argv[i]);
        bool seen = false;
        for (size_t j = 0; rel && j < t.n && !seen; j++)
            seen = strcmp(t.v[j].rel, rel) == 0;
        if (!rel || seen)
            continue;
        char *r2 = dg_strdup(rel), *full = dg_strdup(rel);
        st = r2 && full ? tree_add(r, &t, &r2, &full)
                        : dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
        dg_free(r2);
        dg_free(full);
    }
    char *np = NULL;
    if (st == DG_OK && t.n > 0)
        st = ship_list(r, &t, "command", "the command's files",
                       cJSON_GetObjectItem(r->extra, "shipped"), id, &np);
    dg_free(np);
    tree_list_free(&t);
    return st;
}

dg_status dg_remote_ship_data(dg_remote *r, const char *spec, cJSON *shipped, char **out)
{
    *out = NULL;
    size_t kind = strcspn(spec, ":/,");
    kind = spec[kind] == ':' ? kind + 1 : 0; /* "idx:" and the like */
    char *rest = dg_strdup(spec + kind);
    char *res = dg_asprintf("%.*s", (int)kind, spec);
    dg_status st =
        rest && res ? DG_OK : dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
    char *save = NULL;
    bool first = true;
    for (char *part = st ? NULL : strtok_r(rest, ",", &save); part && st == DG_OK;
         part = strtok_r(NULL, ",", &save)) {
        struct stat sb;
        char *np = NULL;
        if (stat(part, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = ship_tree(r, part, shipped, &np);
        else if (stat(part, &sb) == 0 && S_ISREG(sb.st_mode))
            st = ship_file(r, part, shipped, &np);
        if (st == DG_OK) {
            char *nr = dg_asprintf("%s%s%s", res, first ? "" : ",", np ? np : part);
            dg_free(res);
            res = nr;
            first = false;
            if (!res)
                st = dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
        }
        dg_free(np);
    }
    dg_free(rest);
    if (st != DG_OK)
        dg_free(res);
    else
        *out = res;
    return st;
}
