/* The input bucket of a remote run, checked before it starts: a one-step
 * `train` probe on the same options here (local paths) and on the node (its
 * cached copies) must name the same bucket; and the rule that compares two
 * buckets field by field (remote --like, pool collect). docs/team.md. */
#include "remote/remote_int.h"

#include "core/proc.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
        "--model",     "--input",      "--batch",   "--seed",      "--samples",  "--data",
        "--val-split", "--resolution", "--augment", "--normalize", "--precision"};
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

int dg_remote_run_self(const char *const *args, char **out, char *err, size_t errlen)
{
    *out = NULL;
    err[0] = '\0';
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return -1;
    self[sl] = '\0';
    const char *argv[DG_REMOTE_MAX_ARGS + 8];
    int n = 0;
    argv[n++] = self;
    argv[n++] = "--no-ledger";
    argv[n++] = "--json";
    argv[n++] = "--quiet";
    for (int i = 0; args[i] && n < DG_REMOTE_MAX_ARGS; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    dg_proc_opts o = {.argv = argv,
                      .out = {.kind = DG_PROC_CAPTURE, .cap = DG_REMOTE_ANSWER_MAX},
                      .err = {.kind = DG_PROC_CAPTURE}};
    dg_proc_result r;
    dg_status st = dg_proc_run(NULL, &o, &r);
    int rc = !r.started ? -1 : r.exit_code >= 0 ? r.exit_code : 128 + r.sig;
    dg_remote_last_line(r.err.data, err, errlen);
    if (st == DG_OK && !r.out.truncated) {
        *out = r.out.data ? r.out.data : dg_strdup("");
        r.out.data = NULL;
    }
    dg_proc_result_free(&r);
    if (!*out)
        *out = dg_strdup("");
    return rc;
}

cJSON *dg_remote_bucket_of(const char *text)
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

/* Bucket fields compared (as ledger diff does). */
static const char *const k_bucket_keys[] = {"resolutions", "augment", "batch",  "channels",
                                            "normalize",   "math",    "dataset"};

void dg_remote_bucket_differs(const cJSON *a, const cJSON *b, char *buf, size_t len)
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

void dg_bucket_differs(const char *a, const char *b, char *buf, size_t len)
{
    cJSON *ja = a ? cJSON_Parse(a) : NULL, *jb = b ? cJSON_Parse(b) : NULL;
    dg_remote_bucket_differs(ja, jb, buf, len);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

/* The node's bucket for node_words (the probe's words), or NULL with a
 * warning; a failed connection fails the call (*st). */
static cJSON *node_bucket(dg_remote *r, const char *const *node_words, dg_status *st)
{
    dg_ssh_answer a;
    *st = dg_remote_ssh(r, node_words, -1, false, &a);
    if (*st != DG_OK)
        return NULL;
    if (a.rc == 255 || a.too_big) {
        *st = dg_remote_ssh_failure(r, &a, "checking the node's input bucket");
        dg_ssh_answer_free(&a);
        return NULL;
    }
    cJSON *nb = a.rc == 0 ? dg_remote_bucket_of(a.out) : NULL;
    if (!nb) {
        char line[256];
        dg_remote_last_line(a.err, line, sizeof line);
        dg_remote_note(r, DG_REMOTE_WARNING,
                       "input bucket not checked before the run: the node's probe failed (exit "
                       "%d: %s)",
                       a.rc, line[0] ? line : "no record");
    }
    dg_ssh_answer_free(&a);
    return nb;
}

dg_status dg_remote_bucket_check(dg_remote *r, int argc, const char *const *argv,
                                 const char *const *node_argv)
{
    if (!bucket_verb(argv[0]))
        return DG_OK;
    const char *lw[DG_REMOTE_MAX_ARGS + 24], *nw[DG_REMOTE_MAX_ARGS + 24];
    bucket_probe_words(argc, argv, lw, DG_REMOTE_MAX_ARGS + 20);
    int nn = 0;
    while (node_argv[nn])
        nn++;
    nw[0] = "bucket";
    nw[1] = "--";
    bucket_probe_words(nn, node_argv, nw + 2, DG_REMOTE_MAX_ARGS + 18);
    char *out = NULL, err[512];
    int lrc = dg_remote_run_self(lw, &out, err, sizeof err);
    cJSON *lb = lrc == 0 ? dg_remote_bucket_of(out) : NULL;
    dg_free(out);
    if (!lb) { /* the run itself then says what is wrong, and --like still holds it */
        dg_remote_note(r, DG_REMOTE_WARNING,
                       "input bucket not checked before the run: the local probe failed (exit "
                       "%d: %s)",
                       lrc, err[0] ? err : "no record");
        return DG_OK;
    }
    dg_status st = DG_OK;
    cJSON *nb = node_bucket(r, nw, &st);
    char differs[256] = "";
    if (nb)
        dg_remote_bucket_differs(lb, nb, differs, sizeof differs);
    char lid[20], nid[20];
    dg_copy_clean(lid, sizeof lid, dg_jstr(lb, "id"));
    dg_copy_clean(nid, sizeof nid, nb ? dg_jstr(nb, "id") : "");
    if (nb && differs[0]) {
        st = dg_remote_fail(r, DG_REMOTE_BUCKET,
                            "remote %s: the node's input bucket differs from the local one (%s "
                            "differ: local %.16s, node %.16s); nothing was run",
                            r->cfg.host, differs, lid, nid);
    } else if (nb) {
        cJSON_AddStringToObject(r->extra, "bucket_checked", dg_jstr(lb, "id"));
        dg_remote_note(r, DG_REMOTE_NOTE, "input bucket %.16s here and on the node", lid);
    }
    cJSON_Delete(lb);
    cJSON_Delete(nb);
    return st;
}
