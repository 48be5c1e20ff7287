/* The node assembling a shipped folder: the manifest ("SHA SIZE RELPATH"
 * lines, sorted) verified against its SHA-256, each cached file verified,
 * then hard-linked into a fresh tree CACHE/trees/ID that replaces a changed
 * old one; what is missing (or was changed and removed) is named instead. */
#include "remote/node_int.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local long g_tree_count;

static int count_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F && S_ISREG(sb->st_mode))
        g_tree_count++;
    return 0;
}

/* One file of the manifest: where it goes and the inode it was linked from. */
typedef struct tree_entry {
    const char *rel; /* into the manifest's text */
    ino_t ino;
} tree_entry;

typedef struct tree_job {
    dg_node *n;
    const char *id;
    char *text; /* the manifest */
    char *tree, *build, *stale;
    tree_entry *v;
    int nv, cap;
    cJSON *missing; /* SHAs the node lacks */
    int tampered;
} tree_job;

/* True when the tree at dir holds exactly the job's files, each the very
 * file (same inode) of the cached object it was linked from. */
static bool tree_intact(const tree_job *j)
{
    g_tree_count = 0;
    if (nftw(j->tree, count_entry, 16, FTW_PHYS) != 0 || g_tree_count != j->nv)
        return false;
    for (int i = 0; i < j->nv; i++) {
        char *tf = dg_asprintf("%s/%s", j->tree, j->v[i].rel);
        struct stat tb;
        bool same = tf && lstat(tf, &tb) == 0 && tb.st_ino == j->v[i].ino;
        dg_free(tf);
        if (!same)
            return false;
    }
    return true;
}

/* The manifest from the request's input into j->text, kept only when it
 * hashes to the tree's id. */
static dg_status tree_manifest_in(tree_job *j, const char *trees)
{
    dg_node *n = j->n;
    dg_capbuf b = {.cap = DG_REMOTE_ANSWER_MAX};
    while (!dg_capbuf_drain(n->req->in_fd, &b)) {
    }
    j->text = b.data;
    if (!j->text || b.truncated)
        return dg_node_fail(n, DG_REMOTE_USAGE,
                            "node: the manifest of tree %.16s is missing or "
                            "larger than %zu MiB",
                            j->id, DG_REMOTE_ANSWER_MAX >> 20);
    char *inc = dg_asprintf("%s/.incoming-%ld", trees, (long)getpid());
    dg_status st = inc ? dg_file_write_atomic(n->ctx, inc, j->text, b.len) : DG_ERR_NOMEM;
    char hex[65] = "";
    if (st != DG_OK)
        st = dg_node_fail(n, dg_node_errno_failure(errno),
                          "node: cannot keep the manifest of "
                          "tree %.16s: %s",
                          j->id, strerror(errno));
    else if (dg_sha256_file(n->ctx, inc, hex, NULL) != DG_OK || strcmp(hex, j->id) != 0)
        st = dg_node_fail(n, DG_REMOTE_BUCKET,
                          "node: the manifest of tree %.16s arrived with "
                          "SHA-256 %.16s; discarded",
                          j->id, hex);
    if (inc)
        unlink(inc);
    dg_free(inc);
    return st;
}

/* One manifest line: its cached object verified, then linked into the new
 * tree while nothing is missing; else named missing (removed when changed). */
static dg_status tree_line(tree_job *j, char *line)
{
    dg_node *n = j->n;
    char sha[65];
    unsigned long long size = 0;
    const char *rel = NULL;
    if (!dg_remote_manifest_line(line, sha, &size, &rel))
        return dg_node_fail(n, DG_REMOTE_USAGE, "node: tree %.16s: a bad manifest line '%.80s'",
                            j->id, line);
    if (j->nv >= j->cap) {
        int nc = j->cap ? j->cap * 2 : 256;
        tree_entry *nv = dg_realloc(j->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return dg_node_fail(n, DG_REMOTE_USAGE, "node: out of memory");
        j->v = nv;
        j->cap = nc;
    }
    tree_entry *e = &j->v[j->nv++];
    *e = (tree_entry){.rel = rel};
    const char *bn = strrchr(rel, '/');
    char *obj = dg_asprintf("%s/objects/%s/%s", n->cache, sha, bn ? bn + 1 : rel);
    struct stat ob;
    char h[65];
    bool have = obj && stat(obj, &ob) == 0 && dg_sha256_file(n->ctx, obj, h, NULL) == DG_OK &&
                strcmp(h, sha) == 0 && (unsigned long long)ob.st_size == size;
    dg_status st = DG_OK;
    if (!have && obj && access(obj, F_OK) == 0) {
        unlink(obj);
        j->tampered++;
    }
    if (!have) {
        bool listed = false;
        const cJSON *m;
        cJSON_ArrayForEach(m, j->missing) listed = listed || strcmp(m->valuestring, sha) == 0;
        if (!listed)
            cJSON_AddItemToArray(j->missing, cJSON_CreateString(sha));
    } else if (cJSON_GetArraySize(j->missing) == 0) {
        e->ino = ob.st_ino;
        char *tf = dg_asprintf("%s/%s", j->build, rel);
        char *slash = tf ? strrchr(tf, '/') : NULL;
        if (slash) {
            *slash = '\0';
            dg_make_dirs(tf);
            *slash = '/';
        }
        if (!tf || link(obj, tf) != 0)
            st = dg_node_fail(n, dg_node_errno_failure(errno),
                              "node: tree %.16s: cannot link %s: %s", j->id, rel, strerror(errno));
        dg_free(tf);
    }
    dg_free(obj);
    return st;
}

/* The answer once every line was seen: what is missing, the old tree when it
 * is intact, else the new tree in place of the old. */
static dg_status tree_finish(tree_job *j)
{
    dg_node *n = j->n;
    if (cJSON_GetArraySize(j->missing) > 0) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "state", "missing");
        cJSON_AddItemToObject(o, "missing", j->missing);
        j->missing = NULL;
        cJSON_AddNumberToObject(o, "tampered", j->tampered);
        n->answer = dg_json_print(o);
        cJSON_Delete(o);
        return DG_OK;
    }
    if (access(j->tree, F_OK) == 0 && tree_intact(j)) {
        dg_node_state_answer(n, "ok", j->tree); /* as it was: a run using it is not disturbed */
        return DG_OK;
    }
    /* the old tree (changed: not what the manifest says) out of the way, the new one in */
    if (access(j->tree, F_OK) == 0 && rename(j->tree, j->stale) != 0)
        return dg_node_fail(n, DG_REMOTE_USAGE, "node: replacing tree %s: %s", j->tree,
                            strerror(errno));
    if (mkdir(j->build, 0755) != 0 && errno != EEXIST)
        return dg_node_fail(n, dg_node_errno_failure(errno), "node: tree %s: %s", j->build,
                            strerror(errno));
    if (rename(j->build, j->tree) != 0)
        return dg_node_fail(n, DG_REMOTE_USAGE, "node: keeping tree %s: %s", j->tree,
                            strerror(errno));
    dg_node_state_answer(n, "ok", j->tree);
    return DG_OK;
}

dg_status dg_node_tree(dg_node *n, const char *id)
{
    char *trees = dg_asprintf("%s/trees", n->cache);
    if (!trees || !dg_make_dirs(trees)) {
        dg_status st = dg_node_fail(n, dg_node_errno_failure(errno), "node: cannot create %s: %s",
                                    trees ? trees : "trees", strerror(errno));
        dg_free(trees);
        return st;
    }
    tree_job j = {.n = n, .id = id, .missing = cJSON_CreateArray()};
    j.tree = dg_asprintf("%s/%s", trees, id);
    j.build = dg_asprintf("%s/.build-%ld", trees, (long)getpid());
    j.stale = dg_asprintf("%s/.stale-%ld", trees, (long)getpid());
    dg_status st = tree_manifest_in(&j, trees);
    if (st == DG_OK && (!j.tree || !j.build || !j.stale || !j.missing))
        st = dg_node_fail(n, DG_REMOTE_USAGE, "node: out of memory");
    if (st == DG_OK) {
        dg_remove_tree(j.build);
        dg_remove_tree(j.stale);
    }
    /* each line verified then linked into a new tree (always built afresh:
     * links are cheap, and a changed old tree is gone) */
    char *save = NULL;
    for (char *line = st ? NULL : strtok_r(j.text, "\n", &save); line && st == DG_OK;
         line = strtok_r(NULL, "\n", &save))
        st = tree_line(&j, line);
    if (st == DG_OK)
        st = tree_finish(&j);
    if (j.build)
        dg_remove_tree(j.build);
    if (j.stale)
        dg_remove_tree(j.stale);
    cJSON_Delete(j.missing);
    dg_free(j.v);
    dg_free(j.text);
    dg_free(j.tree);
    dg_free(j.build);
    dg_free(j.stale);
    dg_free(trees);
    return st;
}
