/* devgate ledger list|show|diff|export|push: read the run ledger. diff lists
 * what differs between two runs (spec key by key through the spec codec, the
 * environment, the commits, the input bucket) before any number, and calls a
 * ratio a speedup only when the spec and the bucket agree. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int open_ledger(cli *c, dg_ledger **lg)
{
    *lg = cli_ledger_open(c, NULL, CLI_LEDGER_READ, NULL, NULL);
    return *lg ? EXIT_PASS : EXIT_USAGE;
}

/* {"value", "unit", "valid"} as the library writes metrics (NAN: not valid). */
static cJSON *metric_json(double v, const char *unit)
{
    cJSON *m = cJSON_CreateObject();
    if (isnan(v))
        cJSON_AddNullToObject(m, "value");
    else
        cJSON_AddNumberToObject(m, "value", v);
    cJSON_AddStringToObject(m, "unit", unit);
    cJSON_AddBoolToObject(m, "valid", !isnan(v));
    return m;
}

/* The metric obj[key] as "3683 samples/s", "-" when not reported. */
static const char *metric_text(char *buf, size_t n, const cJSON *obj, const char *key)
{
    double v = jmetric(obj, key);
    const char *unit = jstr(cJSON_GetObjectItem(obj, key), "unit", "");
    if (isnan(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, v >= 100 ? "%.0f %s" : "%.4g %s", v, unit);
    return buf;
}

static int ledger_list(cli *c, int limit)
{
    dg_ledger *lg;
    int rc = open_ledger(c, &lg);
    if (rc)
        return rc;
    char *json = NULL;
    dg_status st = dg_ledger_list(c->ctx, lg, limit, &json);
    dg_ledger_close(lg);
    if (st != DG_OK)
        return cli_fail_status(c, st, "ledger list");
    cJSON *arr = cJSON_Parse(json);
    if (c->json) {
        char *out = cJSON_Print(arr);
        cli_term_machine_output();
        puts(out ? out : json);
        cJSON_free(out);
    } else {
        printf("%-28s %-12s %-8s %-12s %6s %-16s %-26s %4s %s\n", "id", "verb", "backend", "model",
               "batch", "throughput", "verdict", "exit", "host");
        const cJSON *r;
        cJSON_ArrayForEach(r, arr)
        {
            char id[64], verb[16], be[12], model[16], tp[48], verdict[32], host[256], node[256],
                batch[16];
            const char *nd = jstr(r, "node", NULL);
            double b = jnum(r, "batch", NAN);
            snprintf(batch, sizeof batch, isnan(b) ? "-" : "%.0f", b);
            printf("%-28s %-12s %-8s %-12s %6s %-16s %-26s %4.0f %s%s%s%s%s\n",
                   cli_cell(id, sizeof id, jstr(r, "id", "?")),
                   cli_cell(verb, sizeof verb, jstr(r, "verb", "?")),
                   cli_cell(be, sizeof be, jstr(r, "backend", "-")),
                   cli_cell(model, 13, jstr(r, "model", "-")), batch,
                   metric_text(tp, sizeof tp, r, "throughput"),
                   cli_cell(verdict, 27, jstr(r, "verdict", "-")), jnum(r, "exit_status", -1),
                   cli_cell(host, sizeof host, jstr(r, "host", "-")), nd ? " (node " : "",
                   nd ? cli_cell(node, sizeof node, nd) : "", nd ? ")" : "",
                   strcmp(jstr(r, "state", "complete"), "complete") ? " (interrupted)" : "");
            if (jstr(r, "pending", NULL))
                printf("%-28s pending: waits for %s (devgate ledger push)\n", "",
                       cli_cell(node, sizeof node, jstr(r, "pending", "")));
        }
        if (cJSON_GetArraySize(arr) == 0)
            printf("(no runs recorded)\n");
    }
    cJSON_Delete(arr);
    dg_string_free(json);
    return EXIT_PASS;
}

static int ledger_show(cli *c, const char *id)
{
    dg_ledger *lg;
    int rc = open_ledger(c, &lg);
    if (rc)
        return rc;
    char *json = NULL;
    dg_status st = dg_ledger_show(c->ctx, lg, id, &json);
    dg_ledger_close(lg);
    if (st == DG_ERR_NOT_FOUND) {
        cli_error("ledger show: %s", dg_errmsg(c->ctx));
        return EXIT_FAIL;
    }
    if (st != DG_OK)
        return cli_fail_status(c, st, "ledger show");
    cJSON *e = cJSON_Parse(json);
    char *out = cJSON_Print(e);
    cli_term_machine_output();
    puts(out ? out : json);
    cJSON_free(out);
    cJSON_Delete(e);
    dg_string_free(json);
    return EXIT_PASS;
}

/* The entry of run id with its record, parsed; NULL with a message. */
static cJSON *load_entry(cli *c, dg_ledger *lg, const char *id, int *rc)
{
    char *json = NULL;
    dg_status st = dg_ledger_show(c->ctx, lg, id, &json);
    if (st != DG_OK) {
        cli_error("ledger diff: %s", dg_errmsg(c->ctx));
        *rc = st == DG_ERR_NOT_FOUND ? EXIT_FAIL : EXIT_USAGE;
        return NULL;
    }
    cJSON *e = cJSON_Parse(json);
    dg_string_free(json);
    if (!e) {
        cli_error("ledger diff: out of memory");
        *rc = EXIT_USAGE;
    }
    return e;
}

/* A value as short text for the table ("-" when the run does not hold it). */
static void field_text(char *buf, size_t len, const char *key, const cJSON *v)
{
    buf[0] = '\0';
    if (!v || cJSON_IsNull(v)) {
        snprintf(buf, len, "-");
    } else if (strcmp(key, "resolutions") == 0) {
        const cJSON *r;
        size_t off = 0;
        cJSON_ArrayForEach(r, v) off +=
            (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%gx%g:%g", off ? "," : "",
                             jnum(r, "h", 0), jnum(r, "w", 0), jnum(r, "weight", 0));
    } else if (strcmp(key, "augment") == 0 && cJSON_IsArray(v)) {
        const cJSON *a;
        size_t off = 0;
        cJSON_ArrayForEach(a, v) off +=
            (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? "," : "",
                             cJSON_IsString(a) ? a->valuestring : "?");
        if (!off)
            snprintf(buf, len, "none");
    } else if (strcmp(key, "dataset") == 0) {
        snprintf(buf, len, "%s %g samples sha256 %.12s", jstr(v, "kind", "?"),
                 jnum(v, "samples", 0), jstr(v, "sha256", "?"));
    } else if (cJSON_IsObject(v) && cJSON_GetObjectItem(v, "valid")) {
        const cJSON *val = cJSON_GetObjectItem(v, "value");
        if (cJSON_IsTrue(cJSON_GetObjectItem(v, "valid")) && cJSON_IsNumber(val))
            snprintf(buf, len, "%g %s", val->valuedouble, jstr(v, "unit", ""));
        else
            snprintf(buf, len, "not reported");
    } else if (cJSON_IsNumber(v)) {
        snprintf(buf, len, "%g", v->valuedouble);
    } else if (cJSON_IsString(v)) {
        snprintf(buf, len, "%s", v->valuestring);
    } else {
        char *t = cJSON_PrintUnformatted(v);
        snprintf(buf, len, "%s", t ? t : "?");
        cJSON_free(t);
    }
}

/* Adds a copy of v (a string when s, NULL: nothing) under key. */
static void put_str(cJSON *o, const char *key, const char *s)
{
    if (s)
        cJSON_AddStringToObject(o, key, s);
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
static cJSON *spec_facts(cli *c, const cJSON *spec, bool *codec)
{
    cJSON *out = NULL;
    *codec = false;
    if (!cJSON_IsObject(spec))
        return cJSON_CreateObject();
    char *txt = cJSON_PrintUnformatted(spec);
    dg_spec *sp = NULL;
    char *canon = NULL;
    if (txt && dg_spec_decode(c->ctx, txt, &sp) == DG_OK &&
        dg_spec_encode(c->ctx, dg_spec_opts(sp), &canon) == DG_OK) {
        out = cJSON_Parse(canon);
        *codec = out != NULL;
    }
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
        if (strcmp(jstr(b, "name", ""), "cpu") == 0)
            return cJSON_GetObjectItem(b, "blas");
    }
    return NULL;
}

/* What a run ran on: host, node, cpu, device, BLAS, devgate, commits. */
static cJSON *env_facts(const cJSON *entry, const cJSON *rec)
{
    cJSON *o = cJSON_CreateObject();
    const cJSON *env = cJSON_GetObjectItem(rec, "env");
    if (!cJSON_IsObject(env) && strcmp(jstr(rec, "kind", ""), "env") == 0)
        env = rec;
    put_str(o, "host", jstr(entry, "host", NULL));
    put_str(o, "node", jstr(entry, "node", NULL));
    const cJSON *cpu = cJSON_GetObjectItem(env, "cpu");
    put_str(o, "cpu", jstr(cpu, "model", NULL));
    put_copy(o, "cpu cores", cJSON_GetObjectItem(cpu, "logical_cores"));
    const cJSON *dev = cJSON_GetObjectItem(rec, "device");
    put_str(o, "device", jstr(dev, "name", NULL));
    put_str(o, "device versions", jstr(dev, "versions", NULL));
    const cJSON *blas = cpu_blas(rec);
    const char *config = jstr(blas, "config", NULL);
    put_str(o, "blas",
            config ? config : jstr(cJSON_GetObjectItem(env, "libraries"), "openblas", NULL));
    put_str(o, "blas kernel", jstr(blas, "kernel", NULL));
    put_copy(o, "blas threads", cJSON_GetObjectItem(blas, "threads"));
    put_str(o, "devgate version", jstr(entry, "devgate_version", NULL));
    put_str(o, "devgate commit", jstr(cJSON_GetObjectItem(env, "devgate"), "commit", NULL));
    put_str(o, "git commit", jstr(entry, "git_commit", NULL));
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

enum { G_RUN, G_SPEC, G_ENV, G_BUCKET, G_COUNT };
static const char *const k_groups[G_COUNT] = {"run", "spec", "env", "bucket"};

/* One row of the diff: a field of a group, its two values. */
typedef struct diff_row {
    int group;
    const char *name; /* NULL: the whole group, held by one run only */
    const cJSON *v[2];
    bool same;
    bool unknown; /* an environment fact one run does not record: not a difference */
} diff_row;

/* The rows of group g over the union of the two sides' keys (A's order, then
 * B's own); absent on both sides is never a row. Returns how many were added. */
static int group_rows(const cJSON *const f[2], int g, diff_row *rows, int max, int n)
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
            r->same = r->v[0] && r->v[1] && cJSON_Compare(r->v[0], r->v[1], true);
            r->unknown = g == G_ENV && (!r->v[0] || !r->v[1]);
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
        if (rows[i].same || rows[i].unknown || !(mask >> rows[i].group & 1u))
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

#define DIFF_ROWS 160

static int ledger_diff(cli *c, const char *ida, const char *idb, bool force)
{
    dg_ledger *lg;
    int rc = open_ledger(c, &lg);
    if (rc)
        return rc;
    const char *ids[2] = {ida, idb};
    cJSON *ent[2] = {NULL, NULL}, *fact[2][G_COUNT] = {{NULL}};
    const cJSON *rec[2];
    bool codec[2] = {false, false};
    for (int k = 0; k < 2 && !rc; k++)
        ent[k] = load_entry(c, lg, ids[k], &rc);
    dg_ledger_close(lg);
    if (rc) {
        cJSON_Delete(ent[0]);
        cJSON_Delete(ent[1]);
        return rc;
    }
    for (int k = 0; k < 2; k++) {
        rec[k] = cJSON_GetObjectItem(ent[k], "record");
        fact[k][G_RUN] = cJSON_CreateObject();
        put_str(fact[k][G_RUN], "verb", jstr(ent[k], "verb", NULL));
        fact[k][G_SPEC] = spec_facts(c, cJSON_GetObjectItem(rec[k], "spec"), &codec[k]);
        fact[k][G_ENV] = env_facts(ent[k], rec[k]);
        fact[k][G_BUCKET] = bucket_facts(rec[k]);
    }
    static diff_row rows[DIFF_ROWS];
    int n = 0;
    for (int g = 0; g < G_COUNT; g++) {
        const cJSON *f[2] = {fact[0][g], fact[1][g]};
        bool has[2] = {f[0]->child != NULL, f[1]->child != NULL};
        if (has[0] != has[1] && n < DIFF_ROWS) {
            /* One run holds none of it (a gate run has no spec): one row. */
            rows[n++] = (diff_row){
                g, NULL, {has[0] ? f[0] : NULL, has[1] ? f[1] : NULL}, false, g == G_ENV};
            continue;
        }
        n += group_rows(f, g, rows, DIFF_ROWS, n);
    }
    /* Comparable: the same verb, spec and input bucket. The environment is
     * what a diff is often about (another host, BLAS, commit): listed, never
     * a reason to refuse. */
    char why[512], envd[512];
    differs_text(why, sizeof why, rows, n, 1u << G_RUN | 1u << G_SPEC | 1u << G_BUCKET);
    differs_text(envd, sizeof envd, rows, n, 1u << G_ENV);
    bool comparable = why[0] == '\0';
    double sps[2], ms[2];
    for (int k = 0; k < 2; k++) {
        sps[k] = jmetric(ent[k], "throughput");
        ms[k] = jmetric(cJSON_GetObjectItem(rec[k], "throughput"), "step_ms");
    }
    bool have_ratio = !isnan(sps[0]) && !isnan(sps[1]) && sps[0] > 0;
    double ratio = have_ratio ? sps[1] / sps[0] : NAN;
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON *runs = cJSON_AddArrayToObject(o, "runs");
        for (int k = 0; k < 2; k++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "id", jstr(ent[k], "id", ids[k]));
            cJSON_AddStringToObject(r, "verb", jstr(ent[k], "verb", "?"));
            cJSON_AddItemToObject(r, "spec", cJSON_Duplicate(fact[k][G_SPEC], true));
            cJSON_AddBoolToObject(r, "spec_decoded", codec[k]);
            cJSON_AddItemToObject(r, "env", cJSON_Duplicate(fact[k][G_ENV], true));
            cJSON_AddItemToObject(r, "bucket", cJSON_Duplicate(fact[k][G_BUCKET], true));
            cJSON_AddItemToObject(r, "samples_per_s", metric_json(sps[k], "samples/s"));
            cJSON_AddItemToObject(r, "step_ms", metric_json(ms[k], "ms"));
            put_copy(r, "batch", cJSON_GetObjectItem(ent[k], "batch"));
            put_str(r, "verdict", jstr(ent[k], "verdict", NULL));
            cJSON_AddItemToArray(runs, r);
        }
        cJSON *df = cJSON_AddArrayToObject(o, "differs");
        cJSON *unk = cJSON_AddArrayToObject(o, "recorded_by_one");
        for (int i = 0; i < n; i++)
            if (!rows[i].same) {
                char name[96];
                cJSON_AddItemToArray(rows[i].unknown ? unk : df,
                                     cJSON_CreateString(row_name(name, sizeof name, &rows[i])));
            }
        const cJSON *bid[2] = {cJSON_GetObjectItem(fact[0][G_BUCKET], "id"),
                               cJSON_GetObjectItem(fact[1][G_BUCKET], "id")};
        cJSON_AddBoolToObject(o, "same_bucket",
                              bid[0] && bid[1] && cJSON_Compare(bid[0], bid[1], 1));
        cJSON_AddBoolToObject(o, "comparable", comparable);
        if (comparable)
            cJSON_AddNullToObject(o, "not_comparable");
        else
            cJSON_AddStringToObject(o, "not_comparable", why);
        cJSON_AddBoolToObject(o, "forced", force && !comparable);
        if (have_ratio)
            cJSON_AddNumberToObject(o, "ratio", ratio);
        else
            cJSON_AddNullToObject(o, "ratio");
        if (have_ratio && comparable)
            cJSON_AddNumberToObject(o, "speedup", ratio);
        else
            cJSON_AddNullToObject(o, "speedup");
        char *out = cJSON_Print(o);
        cli_term_machine_output();
        puts(out ? out : "{}");
        cJSON_free(out);
        cJSON_Delete(o);
    } else {
        char a[256], b[256], name[64];
        printf("devgate ledger diff · A %s (%s) · B %s (%s)\n\n",
               cli_cell(a, 64, jstr(ent[0], "id", ida)), jstr(ent[0], "verb", "?"),
               cli_cell(b, 64, jstr(ent[1], "id", idb)), jstr(ent[1], "verb", "?"));
        int ndiff = 0, nsame[G_COUNT] = {0};
        for (int i = 0; i < n; i++)
            rows[i].same ? nsame[rows[i].group]++ : ndiff++; /* unknown ones shown with '?' */
        if (ndiff)
            printf("  %-26s %-40s %s\n", "differs", "A", "B");
        for (int i = 0; i < n; i++) {
            if (rows[i].same)
                continue;
            char va[256], vb[256], ca[256], cb[256];
            if (rows[i].name) {
                field_text(va, sizeof va, rows[i].name, rows[i].v[0]);
                field_text(vb, sizeof vb, rows[i].name, rows[i].v[1]);
            } else {
                for (int k = 0; k < 2; k++)
                    snprintf(k ? vb : va, sizeof va, rows[i].v[k] ? "%d fields" : "not recorded",
                             cJSON_GetArraySize(rows[i].v[k]));
            }
            row_name(name, sizeof name, &rows[i]);
            cli_cell(ca, sizeof ca, va);
            cli_cell(cb, sizeof cb, vb);
            char mark = rows[i].unknown ? '?' : '*';
            if (strlen(ca) <= 40 && strlen(cb) <= 60)
                printf("%c %-26s %-40s %s\n", mark, cli_cell(a, 27, name), ca, cb);
            else /* too long for a column: each side on its own line */
                printf("%c %s\n    A %s\n    B %s\n", mark, cli_cell(a, 64, name), ca, cb);
        }
        printf("%s  the same: %d spec field%s%s, %d environment field%s, %d bucket field%s\n",
               ndiff ? "\n" : "", nsame[G_SPEC], nsame[G_SPEC] == 1 ? "" : "s",
               codec[0] && codec[1] ? " (through the spec codec)" : "", nsame[G_ENV],
               nsame[G_ENV] == 1 ? "" : "s", nsame[G_BUCKET], nsame[G_BUCKET] == 1 ? "" : "s");
        bool any_unknown = false;
        for (int i = 0; i < n; i++)
            any_unknown |= rows[i].unknown;
        if (any_unknown)
            printf("  ? recorded by one run only: not known to differ\n");
        if (!comparable)
            printf("  not comparable: %s differ%s\n", why, strchr(why, ',') ? "" : "s");
        printf("\n  %-26s %-40s %s\n", comparable ? "numbers" : "numbers (not comparable)", "A",
               "B");
        char va[64], vb[64];
        for (int k = 0; k < 2; k++)
            snprintf(k ? vb : va, 64, isnan(sps[k]) ? "not reported" : "%.0f samples/s", sps[k]);
        printf("  %-26s %-40s %s\n", "throughput", va, vb);
        for (int k = 0; k < 2; k++)
            snprintf(k ? vb : va, 64, isnan(ms[k]) ? "not reported" : "%.3f ms/step", ms[k]);
        printf("  %-26s %-40s %s\n", "step time", va, vb);
        for (int k = 0; k < 2; k++)
            field_text(k ? vb : va, 64, "batch", cJSON_GetObjectItem(ent[k], "batch"));
        printf("  %-26s %-40s %s\n", "batch", va, vb);
        printf("  %-26s %-40.40s %s\n", "verdict", cli_cell(a, 41, jstr(ent[0], "verdict", "-")),
               cli_cell(b, 128, jstr(ent[1], "verdict", "-")));
        if (have_ratio && comparable)
            printf("  %-26s %.3fx (same spec and bucket%s%s; one measurement a side, no "
                   "interval: devgate compare repeats them)\n",
                   "speedup B/A", ratio, envd[0] ? "; the environment differs: " : "", envd);
        else if (have_ratio)
            printf("  %-26s %.3fx, not a speedup: not comparable (%s); for a device speedup "
                   "with an interval use devgate compare\n",
                   "ratio B/A", ratio, why);
    }
    for (int k = 0; k < 2; k++) {
        for (int g = 0; g < G_COUNT; g++)
            cJSON_Delete(fact[k][g]);
        cJSON_Delete(ent[k]);
    }
    if (!comparable && !force) {
        cli_error("not comparable: %s differ%s; use --force for exit status 0", why,
                  strchr(why, ',') ? "" : "s");
        return EXIT_FAIL;
    }
    return EXIT_PASS;
}

/* One CSV field (RFC 4180): quoted when it holds a comma, a quote, a line
 * break or starts or ends with a space; quotes doubled. NULL: empty. */
static void csv_field(FILE *out, const char *s, bool last)
{
    if (s && s[0]) {
        size_t n = strlen(s);
        bool quote = strpbrk(s, ",\"\r\n") != NULL || s[0] == ' ' || s[n - 1] == ' ';
        if (quote) {
            fputc('"', out);
            for (const char *p = s; *p; p++) {
                if (*p == '"')
                    fputc('"', out);
                fputc(*p, out);
            }
            fputc('"', out);
        } else {
            fputs(s, out);
        }
    }
    fputs(last ? "\n" : ",", out);
}

/* A number field: empty when not reported (never 0). */
static void csv_num(FILE *out, double v, const char *fmt)
{
    char buf[64] = "";
    if (!isnan(v))
        snprintf(buf, sizeof buf, fmt, v);
    csv_field(out, buf, false);
}

/* The columns of `ledger export --format csv`, in order (docs/schema/ledger.md). */
static const char *const k_csv_cols[] = {"id",
                                         "seq",
                                         "started_at",
                                         "verb",
                                         "exit_status",
                                         "state",
                                         "host",
                                         "node",
                                         "pending",
                                         "git_commit",
                                         "devgate_version",
                                         "backend",
                                         "model",
                                         "batch",
                                         "throughput",
                                         "throughput_unit",
                                         "verdict",
                                         "spec_id",
                                         "bucket_id"};
enum { CSV_NCOLS = sizeof k_csv_cols / sizeof k_csv_cols[0] };

static void csv_row(FILE *out, const cJSON *e)
{
    csv_field(out, jstr(e, "id", NULL), false);
    csv_num(out, jnum(e, "seq", NAN), "%.0f");
    csv_field(out, jstr(e, "started_at", NULL), false);
    csv_field(out, jstr(e, "verb", NULL), false);
    csv_num(out, jnum(e, "exit_status", NAN), "%.0f");
    csv_field(out, jstr(e, "state", NULL), false);
    csv_field(out, jstr(e, "host", NULL), false);
    csv_field(out, jstr(e, "node", NULL), false);
    csv_field(out, jstr(e, "pending", NULL), false);
    csv_field(out, jstr(e, "git_commit", NULL), false);
    csv_field(out, jstr(e, "devgate_version", NULL), false);
    csv_field(out, jstr(e, "backend", NULL), false);
    csv_field(out, jstr(e, "model", NULL), false);
    csv_num(out, jnum(e, "batch", NAN), "%.0f");
    double sps = jmetric(e, "throughput");
    csv_num(out, sps, "%.10g");
    csv_field(out, isnan(sps) ? NULL : jstr(cJSON_GetObjectItem(e, "throughput"), "unit", NULL),
              false);
    csv_field(out, jstr(e, "verdict", NULL), false);
    csv_field(out, jstr(e, "spec_id", NULL), false);
    csv_field(out, jstr(e, "bucket_id", NULL), true);
}

/* ledger export: every run (since a date), oldest first, as CSV or JSON Lines. */
static int ledger_export(cli *c, const char *format, const char *since)
{
    bool csv;
    if (format && strcmp(format, "csv") == 0) {
        csv = true;
    } else if (format && strcmp(format, "jsonl") == 0) {
        csv = false;
    } else {
        char shown[64];
        cli_error("ledger export: --format wants csv or jsonl, got '%s'",
                  format ? cli_cell(shown, sizeof shown, format) : "(none)");
        return EXIT_USAGE;
    }
    dg_ledger *lg;
    int rc = open_ledger(c, &lg);
    if (rc)
        return rc;
    char *json = NULL;
    dg_status st = dg_ledger_export(c->ctx, lg, since, &json);
    dg_ledger_close(lg);
    if (st != DG_OK) { /* the message names the call or the ledger */
        cli_error("%s", dg_errmsg(c->ctx));
        return st == DG_ERR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_USAGE;
    }
    cJSON *arr = cJSON_Parse(json);
    dg_string_free(json);
    if (!arr) {
        cli_error("ledger export: out of memory");
        return EXIT_USAGE;
    }
    cli_term_machine_output();
    const cJSON *e;
    if (csv) {
        for (int i = 0; i < CSV_NCOLS; i++)
            csv_field(stdout, k_csv_cols[i], i == CSV_NCOLS - 1);
        cJSON_ArrayForEach(e, arr) csv_row(stdout, e);
    } else {
        cJSON_ArrayForEach(e, arr)
        {
            char *line = cJSON_PrintUnformatted(e); /* strings escape their line breaks */
            if (!line) {
                cJSON_Delete(arr);
                cli_error("ledger export: out of memory");
                return EXIT_USAGE;
            }
            puts(line);
            cJSON_free(line);
        }
    }
    cJSON_Delete(arr);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("ledger export: writing the output failed");
        return EXIT_USAGE;
    }
    return EXIT_PASS;
}

typedef struct ledger_args {
    int limit;
    bool force;
    const char *from;
    const char *format;
    const char *since;
} ledger_args;

/* ledger push: the runs the local ledger keeps for the team ledger go up. */
static int ledger_push(cli *c, const char *from)
{
    char *team_path = cli_ledger_path(c);
    char *def_local = from ? NULL : dg_ledger_local_path();
    const char *local_path = from ? from : def_local;
    int rc = EXIT_PASS;
    if (!team_path || !local_path || strcmp(team_path, local_path) == 0) {
        cli_error("ledger push: name the team ledger with --ledger postgresql://... (or "
                  "DEVGATE_LEDGER) and the local one with --from PATH (or DEVGATE_LOCAL_LEDGER)");
        rc = EXIT_USAGE;
    }
    dg_ledger *local = NULL, *team = NULL;
    if (!rc && !(local = cli_ledger_open(c, local_path, CLI_LEDGER_WRITE, "ledger push", NULL)))
        rc = EXIT_USAGE;
    if (!rc &&
        !(team = cli_ledger_open(c, team_path, CLI_LEDGER_WRITE | CLI_LEDGER_QUIET, NULL, NULL))) {
        cli_error("ledger push: %s; the runs stay waiting in %s", dg_errmsg(c->ctx),
                  dg_ledger_name(local));
        rc = EXIT_USAGE;
    }
    dg_ledger_push_counts n = {0};
    dg_status st = rc ? DG_OK : dg_ledger_push(c->ctx, local, team, &n);
    if (st != DG_OK) {
        cli_error("ledger push: %s", dg_errmsg(c->ctx));
        rc = EXIT_USAGE;
    }
    if (!rc || st != DG_OK) {
        if (c->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "team", dg_ledger_name(team));
            cJSON_AddStringToObject(o, "local", dg_ledger_name(local));
            cJSON_AddNumberToObject(o, "pushed", n.pushed);
            cJSON_AddNumberToObject(o, "already", n.already);
            cJSON_AddNumberToObject(o, "other", n.other);
            cJSON_AddBoolToObject(o, "complete", st == DG_OK);
            char *out = cJSON_Print(o);
            cli_term_machine_output();
            puts(out ? out : "{}");
            cJSON_free(out);
            cJSON_Delete(o);
        } else if (!c->quiet) {
            printf("pushed %d run%s from %s to %s", n.pushed, n.pushed == 1 ? "" : "s",
                   dg_ledger_name(local), dg_ledger_name(team));
            if (n.already)
                printf(" (%d already there from an earlier push)", n.already);
            printf("\n");
            if (n.other)
                printf("%d run%s wait%s for another team ledger (see 'devgate ledger list')\n",
                       n.other, n.other == 1 ? "" : "s", n.other == 1 ? "s" : "");
        }
    }
    dg_ledger_close(local);
    dg_ledger_close(team);
    free(team_path);
    dg_string_free(def_local);
    return rc;
}

static const cli_opt ledger_opts[] = {
    {CLI_INT, "--limit", NULL, "N", "0: all", "runs", "list: the newest N",
     offsetof(ledger_args, limit), 0, 1000000, NULL, NULL, NULL},
    {CLI_FLAG, "--force", NULL, NULL, NULL, NULL, "diff: compare runs whose input buckets differ",
     offsetof(ledger_args, force), 0, 0, NULL, NULL, NULL},
    {CLI_STR, "--from", NULL, "LOCAL", "DEVGATE_LOCAL_LEDGER or the local default", NULL,
     "push: the local ledger whose waiting runs go up", offsetof(ledger_args, from), 0, 0,
     cli_nonempty, NULL, NULL},
    {CLI_STR, "--format", NULL, "csv|jsonl", NULL, NULL,
     "export: CSV with a header row, or one JSON entry (record included) a line",
     offsetof(ledger_args, format), 0, 0, NULL, NULL, NULL},
    {CLI_STR, "--since", NULL, "DATE", "all runs", NULL,
     "export: runs started at or after this UTC date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)",
     offsetof(ledger_args, since), 0, 0, cli_nonempty, NULL, NULL},
    CLI_OPTS_END,
};

const cli_verb cli_verb_ledger = {
    .name = "ledger",
    .args = "list | show ID | diff A B | export --format csv|jsonl | push",
    .summary = "read the run ledger (SQLite; default $XDG_DATA_HOME/devgate/ledger.db, or "
               "DEVGATE_LEDGER, or --ledger PATH), or a team ledger postgresql://...; push "
               "uploads the runs kept locally while the team ledger was unreachable",
    .exits = "0 done, 1 no such run (show, diff) or the runs are not comparable (diff: verb, "
             "spec or bucket differ; --force: 0), 2 usage or ledger error",
    .example = "devgate ledger list --limit 10",
    .tables = {ledger_opts, cli_common_opts},
    .titles = {"ledger options", "common options"},
    .run = cmd_ledger,
};

int cmd_ledger(cli *c, int argc, char **argv)
{
    ledger_args la = {0, false, NULL, NULL, NULL};
    char *pos[3];
    cli_args a = {.pos = pos, .max = 3};
    int r = cli_parse(c, &cli_verb_ledger, argc, argv, (void *const[]){&la, c}, &a);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    const char *sub = a.npos > 0 ? pos[0] : NULL, *id = a.npos > 1 ? pos[1] : NULL,
               *id2 = a.npos > 2 ? pos[2] : NULL;
    bool force = la.force;
    int limit = la.limit;
    if (c->no_ledger) {
        cli_error("ledger: --no-ledger leaves nothing to read");
        return EXIT_USAGE;
    }
    if (sub && strcmp(sub, "list") == 0 && !id)
        return ledger_list(c, limit);
    if (sub && strcmp(sub, "show") == 0 && id && !id2)
        return ledger_show(c, id);
    if (sub && strcmp(sub, "diff") == 0 && id && id2)
        return ledger_diff(c, id, id2, force);
    if (sub && strcmp(sub, "push") == 0 && !id)
        return ledger_push(c, la.from);
    if (sub && strcmp(sub, "export") == 0 && !id)
        return ledger_export(c, la.format, la.since);
    cli_error("ledger: use 'ledger list [--limit N]', 'ledger show ID', 'ledger diff A B "
              "[--force]', 'ledger export --format csv|jsonl [--since DATE]' or 'ledger push "
              "[--from LOCAL]'");
    return EXIT_USAGE;
}
