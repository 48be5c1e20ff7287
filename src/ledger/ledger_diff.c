/* ledger diff in the library: what differs between two runs, field by field
 * in four groups (the run's verb, the spec through the spec codec, the
 * environment, the input bucket), and whether their numbers are comparable:
 * the same verb, spec and bucket. The environment, free text (a label) and a
 * data path under the same bucket id are listed, never a reason to refuse.
 * docs/cli.md "ledger diff". */
#include "core/core.h"
#include "core/json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { G_RUN, G_SPEC, G_ENV, G_BUCKET, G_COUNT };
static const char *const k_groups[G_COUNT] = {"run", "spec", "env", "bucket"};

/* How a row counts. */
typedef enum row_kind {
    ROW_SAME,
    ROW_DIFFERS,  /* a reason the runs are not comparable (env: listed only) */
    ROW_ONE_SIDE, /* an environment fact one run does not record: not known to differ */
    ROW_IGNORED,  /* free text, or a data path under the same bucket: not a reason */
} row_kind;

typedef struct diff_row {
    int group;
    const char *name; /* NULL: the whole group, held by one run only */
    const cJSON *v[2];
    row_kind kind;
} diff_row;

#define DIFF_ROWS 160

/* Spec members that are free text (a user's note) or a path: never a reason. */
static bool free_text(const char *name)
{
    return strcmp(name, "label") == 0;
}
static bool data_path(const char *name)
{
    return strcmp(name, "data") == 0;
}

static const char *jstr(const cJSON *o, const char *k)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static void put_str(cJSON *o, const char *key, const char *s)
{
    if (s)
        dg_json_add_str(o, key, s);
}

static void put_copy(cJSON *o, const char *key, const cJSON *v)
{
    if (v && !cJSON_IsNull(v))
        cJSON_AddItemToObject(o, key, cJSON_Duplicate(v, true));
}

/* The spec, key by key: through the spec codec when it is a training spec
 * (defaults filled in, so an older record that leaves a key out compares equal
 * to one that writes the default), else as recorded (accept, sweep, compare,
 * run keep specs of their own). "export" only says where files went. */
static cJSON *spec_facts(dg_ctx *ctx, const cJSON *spec, bool *codec)
{
    cJSON *out = NULL;
    *codec = false;
    if (!cJSON_IsObject(spec))
        return cJSON_CreateObject();
    char *txt = cJSON_PrintUnformatted(spec);
    dg_spec *sp = NULL;
    char *canon = NULL;
    char saved[DG_ERRMSG_MAX];
    snprintf(saved, sizeof saved, "%s", dg_errmsg(ctx));
    if (txt && dg_spec_decode(ctx, txt, &sp) == DG_OK &&
        dg_spec_encode(ctx, dg_spec_opts(sp), &canon) == DG_OK) {
        out = cJSON_Parse(canon);
        *codec = out != NULL;
    }
    dg_fail(ctx, DG_OK, "%s", saved); /* a spec the codec does not take is no error */
    dg_string_free(canon);
    dg_spec_free(sp);
    cJSON_free(txt);
    if (!out)
        out = cJSON_Duplicate(spec, true);
    cJSON_DeleteItemFromObject(out, "export");
    return out;
}

/* The cpu backend's BLAS as the gate saw it (an accept record's gate section,
 * or a gate record itself), or NULL. */
static const cJSON *cpu_blas(const cJSON *rec)
{
    const cJSON *gate = cJSON_GetObjectItem(rec, "gate");
    const cJSON *bes = cJSON_GetObjectItem(cJSON_IsObject(gate) ? gate : rec, "backends"), *b;
    cJSON_ArrayForEach(b, bes)
    {
        const char *n = jstr(b, "name");
        if (n && strcmp(n, "cpu") == 0)
            return cJSON_GetObjectItem(b, "blas");
    }
    return NULL;
}

/* What a run ran on: host, node, cpu, device, BLAS, devgate, commits. */
static cJSON *env_facts(const cJSON *entry, const cJSON *rec)
{
    cJSON *o = cJSON_CreateObject();
    const cJSON *env = cJSON_GetObjectItem(rec, "env");
    const char *kind = jstr(rec, "kind");
    if (!cJSON_IsObject(env) && kind && strcmp(kind, "env") == 0)
        env = rec;
    put_str(o, "host", jstr(entry, "host"));
    put_str(o, "node", jstr(entry, "node"));
    const cJSON *cpu = cJSON_GetObjectItem(env, "cpu");
    put_str(o, "cpu", jstr(cpu, "model"));
    put_copy(o, "cpu cores", cJSON_GetObjectItem(cpu, "logical_cores"));
    const cJSON *dev = cJSON_GetObjectItem(rec, "device");
    put_str(o, "device", jstr(dev, "name"));
    put_str(o, "device versions", jstr(dev, "versions"));
    const cJSON *blas = cpu_blas(rec);
    const char *config = jstr(blas, "config");
    put_str(o, "blas", config ? config : jstr(cJSON_GetObjectItem(env, "libraries"), "openblas"));
    put_str(o, "blas kernel", jstr(blas, "kernel"));
    put_copy(o, "blas threads", cJSON_GetObjectItem(blas, "threads"));
    put_str(o, "devgate version", jstr(entry, "devgate_version"));
    put_str(o, "devgate commit", jstr(cJSON_GetObjectItem(env, "devgate"), "commit"));
    put_str(o, "git commit", jstr(entry, "git_commit"));
    return o;
}

/* The input bucket (train-like and accept records), its fields as recorded. */
static cJSON *bucket_facts(const cJSON *rec)
{
    const cJSON *bk = cJSON_GetObjectItem(rec, "bucket");
    if (!cJSON_IsObject(bk))
        bk = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "soak"), "bucket");
    return cJSON_IsObject(bk) ? cJSON_Duplicate(bk, true) : cJSON_CreateObject();
}

/* The rows of group g over the union of the two sides' keys (A's order, then
 * B's own); absent on both sides is never a row. Returns how many were added. */
static int group_rows(const cJSON *const f[2], int g, bool same_bucket, diff_row *rows, int max,
                      int n)
{
    int added = 0;
    for (int side = 0; side < 2; side++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, f[side])
        {
            if (side == 1 && cJSON_GetObjectItemCaseSensitive(f[0], it->string))
                continue;
            if (n + added >= max)
                return added;
            diff_row *r = &rows[n + added++];
            r->group = g;
            r->name = it->string;
            r->v[0] = cJSON_GetObjectItemCaseSensitive(f[0], it->string);
            r->v[1] = cJSON_GetObjectItemCaseSensitive(f[1], it->string);
            bool same = r->v[0] && r->v[1] && cJSON_Compare(r->v[0], r->v[1], true);
            r->kind = same                                   ? ROW_SAME
                      : g == G_ENV && (!r->v[0] || !r->v[1]) ? ROW_ONE_SIDE
                      : g == G_SPEC && free_text(r->name)    ? ROW_IGNORED
                      : (g == G_SPEC || g == G_BUCKET) && data_path(r->name) && same_bucket
                          ? ROW_IGNORED
                          : ROW_DIFFERS;
        }
    }
    return added;
}

/* "spec.threads" of a row, or "spec" for a group one run does not hold. */
static const char *row_name(char *buf, size_t len, const diff_row *r)
{
    if (r->name)
        snprintf(buf, len, "%s.%s", k_groups[r->group], r->name);
    else
        snprintf(buf, len, "%s", k_groups[r->group]);
    return buf;
}

/* "spec.threads, bucket.augment" of the differing rows of the groups in mask
 * (the first eight, then how many more). */
static void differs_text(char *buf, size_t len, const diff_row *rows, int n, unsigned mask)
{
    size_t off = 0;
    int shown = 0, more = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (rows[i].kind != ROW_DIFFERS || !(mask >> rows[i].group & 1u))
            continue;
        if (shown == 8) {
            more++;
            continue;
        }
        char name[96];
        off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? ", " : "",
                                row_name(name, sizeof name, &rows[i]));
        shown++;
    }
    if (more)
        snprintf(buf + off, off < len ? len - off : 0, " and %d more", more);
}

/* The entry of run id (or unique prefix) with its record, parsed. */
static cJSON *load_entry(dg_ctx *ctx, dg_ledger *lg, const char *id, dg_status *st)
{
    char *json = NULL;
    *st = dg_ledger_show(ctx, lg, id, &json);
    if (*st != DG_OK)
        return NULL;
    cJSON *e = cJSON_Parse(json);
    dg_string_free(json);
    if (!e)
        *st = dg_fail(ctx, DG_ERR_NOMEM, "ledger diff: out of memory");
    return e;
}

static cJSON *metric_of(const cJSON *m, const char *unit)
{
    double v = dg_json_metric_value(m);
    return dg_json_metric(isfinite(v) ? v : 0, isfinite(v), unit);
}

/* The "runs" member: what each side is, with its facts and numbers. */
static cJSON *run_json(const cJSON *ent, const char *id, cJSON *const facts[G_COUNT], bool codec)
{
    const cJSON *rec = cJSON_GetObjectItem(ent, "record");
    cJSON *r = cJSON_CreateObject();
    dg_json_add_str(r, "id", jstr(ent, "id") ? jstr(ent, "id") : id);
    dg_json_add_str(r, "verb", jstr(ent, "verb") ? jstr(ent, "verb") : "?");
    cJSON_AddItemToObject(r, "spec", cJSON_Duplicate(facts[G_SPEC], true));
    cJSON_AddBoolToObject(r, "spec_decoded", codec);
    cJSON_AddItemToObject(r, "env", cJSON_Duplicate(facts[G_ENV], true));
    cJSON_AddItemToObject(r, "bucket", cJSON_Duplicate(facts[G_BUCKET], true));
    /* The summary's throughput in its own unit (an slo run's is requests/s). */
    const cJSON *tp = cJSON_GetObjectItem(ent, "throughput");
    const char *unit = cJSON_GetStringValue(cJSON_GetObjectItem(tp, "unit"));
    cJSON_AddItemToObject(r, "samples_per_s", metric_of(tp, unit ? unit : "samples/s"));
    cJSON_AddItemToObject(r, "step_ms", metric_of(dg_jpath(rec, "throughput.step_ms"), "ms"));
    put_copy(r, "batch", cJSON_GetObjectItem(ent, "batch"));
    put_str(r, "verdict", jstr(ent, "verdict"));
    return r;
}

static const char *const k_kinds[] = {"same", "differs", "one_side", "ignored"};

/* The rows as JSON, and the name lists by kind. */
static void rows_json(cJSON *o, const diff_row *rows, int n)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "rows");
    cJSON *df = cJSON_AddArrayToObject(o, "differs");
    cJSON *unk = cJSON_AddArrayToObject(o, "recorded_by_one");
    cJSON *ign = cJSON_AddArrayToObject(o, "ignored");
    int same[G_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        char name[96];
        row_name(name, sizeof name, &rows[i]);
        if (rows[i].kind == ROW_SAME) {
            same[rows[i].group]++;
            continue;
        }
        cJSON *r = cJSON_CreateObject();
        dg_json_add_str(r, "name", name);
        cJSON_AddStringToObject(r, "group", k_groups[rows[i].group]);
        cJSON_AddBoolToObject(r, "whole_group", rows[i].name == NULL);
        for (int k = 0; k < 2; k++)
            cJSON_AddItemToObject(r, k ? "b" : "a",
                                  rows[i].v[k] ? cJSON_Duplicate(rows[i].v[k], true)
                                               : cJSON_CreateNull());
        cJSON_AddStringToObject(r, "kind", k_kinds[rows[i].kind]);
        cJSON_AddItemToArray(arr, r);
        cJSON *list = rows[i].kind == ROW_ONE_SIDE ? unk : rows[i].kind == ROW_IGNORED ? ign : df;
        cJSON_AddItemToArray(list, dg_json_string(name));
    }
    cJSON *sc = cJSON_AddObjectToObject(o, "same_counts");
    for (int g = G_SPEC; g < G_COUNT; g++)
        cJSON_AddNumberToObject(sc, k_groups[g], same[g]);
}

dg_status dg_ledger_diff(dg_ctx *ctx, dg_ledger *lg, const char *a, const char *b, char **json)
{
    if (json)
        *json = NULL;
    if (!lg || !a || !b || !json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger diff: two run ids and an open ledger");
    const char *ids[2] = {a, b};
    cJSON *ent[2] = {NULL, NULL}, *fact[2][G_COUNT] = {{NULL}};
    dg_status st = DG_OK;
    for (int k = 0; k < 2 && st == DG_OK; k++)
        ent[k] = load_entry(ctx, lg, ids[k], &st);
    if (st != DG_OK) {
        cJSON_Delete(ent[0]);
        return st;
    }
    bool codec[2];
    for (int k = 0; k < 2; k++) {
        const cJSON *rec = cJSON_GetObjectItem(ent[k], "record");
        fact[k][G_RUN] = cJSON_CreateObject();
        put_str(fact[k][G_RUN], "verb", jstr(ent[k], "verb"));
        fact[k][G_SPEC] = spec_facts(ctx, cJSON_GetObjectItem(rec, "spec"), &codec[k]);
        fact[k][G_ENV] = env_facts(ent[k], rec);
        fact[k][G_BUCKET] = bucket_facts(rec);
    }
    const cJSON *bid[2] = {cJSON_GetObjectItem(fact[0][G_BUCKET], "id"),
                           cJSON_GetObjectItem(fact[1][G_BUCKET], "id")};
    bool same_bucket = bid[0] && bid[1] && cJSON_Compare(bid[0], bid[1], true);
    diff_row *rows = dg_calloc(DIFF_ROWS, sizeof *rows);
    int n = 0;
    for (int g = 0; rows && g < G_COUNT; g++) {
        const cJSON *f[2] = {fact[0][g], fact[1][g]};
        bool has[2] = {f[0]->child != NULL, f[1]->child != NULL};
        if (has[0] != has[1] && n < DIFF_ROWS) {
            /* One run holds none of it (a gate run has no spec): one row. */
            rows[n++] = (diff_row){g,
                                   NULL,
                                   {has[0] ? f[0] : NULL, has[1] ? f[1] : NULL},
                                   g == G_ENV ? ROW_ONE_SIDE : ROW_DIFFERS};
            continue;
        }
        n += group_rows(f, g, same_bucket, rows, DIFF_ROWS, n);
    }
    cJSON *o = rows ? cJSON_CreateObject() : NULL;
    if (o) {
        /* Comparable: the same verb, spec and input bucket. The environment
         * is what a diff is often about (another host, BLAS, commit): listed,
         * never a reason to refuse. */
        char why[512], envd[512];
        differs_text(why, sizeof why, rows, n, 1u << G_RUN | 1u << G_SPEC | 1u << G_BUCKET);
        differs_text(envd, sizeof envd, rows, n, 1u << G_ENV);
        cJSON *runs = cJSON_AddArrayToObject(o, "runs");
        for (int k = 0; k < 2; k++)
            cJSON_AddItemToArray(runs, run_json(ent[k], ids[k], fact[k], codec[k]));
        rows_json(o, rows, n);
        bool comparable = why[0] == '\0';
        cJSON_AddBoolToObject(o, "same_bucket", same_bucket);
        cJSON_AddBoolToObject(o, "comparable", comparable);
        if (comparable)
            cJSON_AddNullToObject(o, "not_comparable");
        else
            dg_json_add_str(o, "not_comparable", why);
        dg_json_add_str(o, "environment_differs", envd[0] ? envd : NULL);
        double sps[2];
        for (int k = 0; k < 2; k++)
            sps[k] = dg_json_metric_value(cJSON_GetObjectItem(ent[k], "throughput"));
        bool have_ratio = isfinite(sps[0]) && isfinite(sps[1]) && sps[0] > 0;
        if (have_ratio)
            cJSON_AddNumberToObject(o, "ratio", sps[1] / sps[0]);
        else
            cJSON_AddNullToObject(o, "ratio");
        if (have_ratio && comparable)
            cJSON_AddNumberToObject(o, "speedup", sps[1] / sps[0]);
        else
            cJSON_AddNullToObject(o, "speedup");
        *json = dg_json_print(o);
    }
    cJSON_Delete(o);
    dg_free(rows);
    for (int k = 0; k < 2; k++) {
        for (int g = 0; g < G_COUNT; g++)
            cJSON_Delete(fact[k][g]);
        cJSON_Delete(ent[k]);
    }
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "ledger diff: out of memory");
}
