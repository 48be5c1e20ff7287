/* What compare RUN_A RUN_B reads from each evidence record (compare_runs.h):
 * a run's, an accept's (fixture or `accept -- CMD`) or a fixture compare's
 * throughput samples by section, the measured windows' contention, the
 * seeds and the command. Keys are read one at a time: every kind keeps its
 * sections at the same names (docs/schema/report.md). */
#include "steps/compare_runs.h"

#include "analysis/loss.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *at(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* The record's section name, or the record itself when it is one of that kind
 * (a `devgate compare` record is its own compare section). */
static const cJSON *section(const cJSON *rec, const char *name)
{
    const cJSON *s = at(rec, name);
    if (cJSON_IsObject(s))
        return s;
    const cJSON *k = at(rec, "kind");
    return cJSON_IsString(k) && strcmp(k->valuestring, name) == 0 ? rec : NULL;
}

static bool series_alloc(cr_series *s, const char *basis, const char *what, int batch, int cap)
{
    *s = (cr_series){.basis = basis, .what = what, .batch = batch};
    if (cap <= 0)
        return true;
    if (cap > CR_MAX_SAMPLES)
        cap = CR_MAX_SAMPLES;
    s->v = dg_malloc((size_t)cap * sizeof *s->v);
    return s->v != NULL;
}

static void series_add(cr_series *s, double v, int cap)
{
    if (s->v && isfinite(v) && v > 0 && s->n < (size_t)cap && s->n < CR_MAX_SAMPLES)
        s->v[s->n++] = v;
}

/* Per-epoch samples/s of the soak (run, accept, accept -- CMD). */
static bool read_epochs(cr_side *s, const cJSON *soak)
{
    const cJSON *ep = at(soak, "epochs");
    int cap = cJSON_GetArraySize(ep);
    if (!series_alloc(&s->epochs, "epochs", "per-epoch samples/s of the soak", 0, cap))
        return false;
    const cJSON *e;
    cJSON_ArrayForEach(e, ep)
        series_add(&s->epochs, dg_json_metric_value(at(e, "samples_per_s")), cap);
    return true;
}

/* The device side of each compare run: one samples/s per timed repetition
 * (the fixture's repetition medians; accept -- CMD's device_samples_per_s). */
static bool read_compare(cr_side *s, const cJSON *cmp)
{
    const cJSON *run;
    cJSON_ArrayForEach(run, at(cmp, "runs"))
    {
        const cJSON *b = at(run, "batch"), *st = at(run, "status");
        if (s->ncmp == CR_MAX_BATCHES || !cJSON_IsNumber(b) || b->valuedouble < 1 ||
            (cJSON_IsString(st) && strcmp(st->valuestring, "ok") != 0))
            continue;
        int batch = (int)b->valuedouble;
        const cJSON *reps = at(run, "repetitions"), *dev = at(reps, "device");
        const cJSON *sps = at(reps, "device_samples_per_s");
        int cap = cJSON_GetArraySize(dev) + cJSON_GetArraySize(sps);
        cr_series *c = &s->cmp[s->ncmp];
        if (!series_alloc(c, "compare",
                          "device samples/s of the compare step, one a timed repetition", batch,
                          cap))
            return false;
        const cJSON *r;
        cJSON_ArrayForEach(r, dev)
        {
            double med = dg_json_metric_value(at(r, "median"));
            if (med > 0)
                series_add(c, batch * 1e3 / med, cap);
        }
        cJSON_ArrayForEach(r, sps) if (cJSON_IsNumber(r)) series_add(c, r->valuedouble, cap);
        s->ncmp++;
    }
    return true;
}

/* Every measured window below o (an object holding others_cpus). */
static void walk_windows(cr_side *s, const cJSON *o, double th, int depth)
{
    if (depth > 12)
        return;
    if (cJSON_IsObject(o) && at(o, "others_cpus")) {
        double c = dg_json_metric_value(at(o, "others_cpus"));
        if (isfinite(c)) {
            s->windows++;
            s->cpus_sum += c;
            s->cpus_worst = fmax(s->cpus_worst, c);
            s->hit += c >= th;
        }
        return;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, o)
    {
        /* The gate's product and the environment are not the throughput compared. */
        if (depth == 0 && k->string &&
            (!strcmp(k->string, "gate") || !strcmp(k->string, "env") ||
             !strcmp(k->string, "findings") || !strcmp(k->string, "thresholds")))
            continue;
        if (cJSON_IsObject(k) || cJSON_IsArray(k))
            walk_windows(s, k, th, depth + 1);
    }
}

static void read_seeds(cr_side *s, const cJSON *rec)
{
    const cJSON *seeds = at(rec, "seeds");
    s->seeds[0] = '\0';
    if (cJSON_IsObject(seeds)) {
        static const char *const keys[] = {"torch", "numpy", "random", "workers"};
        size_t off = 0;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            const cJSON *v = at(seeds, keys[i]);
            char val[32];
            if (cJSON_IsNumber(v))
                snprintf(val, sizeof val, "%.0f", v->valuedouble);
            else if (cJSON_IsBool(v))
                snprintf(val, sizeof val, "%s", cJSON_IsTrue(v) ? "seeded" : "unseeded");
            else
                snprintf(val, sizeof val, "unseeded");
            if (off < sizeof s->seeds)
                off += (size_t)snprintf(s->seeds + off, sizeof s->seeds - off, "%s%s=%s",
                                        off ? " " : "", keys[i], val);
        }
        s->seeds_known = true;
        s->torch_unseeded = dg_loss_torch_unseeded(seeds);
        return;
    }
    /* The fixture draws every random number from spec.seed. */
    const cJSON *seed = at(at(rec, "spec"), "seed");
    if (cJSON_IsNumber(seed)) {
        snprintf(s->seeds, sizeof s->seeds, "seed=%.0f", seed->valuedouble);
        s->seeds_known = true;
    }
}

/* spec.cmd, else "devgate KIND --key value ..." from the spec's scalars. */
static cJSON *read_argv(const cJSON *rec, const char *kind)
{
    const cJSON *spec = at(rec, "spec"), *cmd = at(spec, "cmd");
    if (cJSON_IsArray(cmd))
        return cJSON_Duplicate(cmd, true);
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateString("devgate"));
    cJSON_AddItemToArray(a, cJSON_CreateString(kind));
    static const char *const derived[] = {"backend_chosen", "batch_source", "threads_used",
                                          "threads_source", "baseline"};
    const cJSON *k;
    cJSON_ArrayForEach(k, spec)
    {
        bool skip = !k->string || cJSON_IsNull(k) || cJSON_IsFalse(k) || cJSON_IsObject(k);
        for (size_t i = 0; !skip && i < sizeof derived / sizeof derived[0]; i++)
            skip = strcmp(k->string, derived[i]) == 0;
        if (skip)
            continue;
        char opt[96], val[160] = "";
        snprintf(opt, sizeof opt, "--%s", k->string);
        for (char *p = opt; *p; p++)
            if (*p == '_')
                *p = '-';
        cJSON_AddItemToArray(a, cJSON_CreateString(opt));
        if (cJSON_IsTrue(k))
            continue;
        if (cJSON_IsNumber(k)) {
            snprintf(val, sizeof val, "%g", k->valuedouble);
        } else if (cJSON_IsString(k)) {
            snprintf(val, sizeof val, "%s", k->valuestring);
        } else {
            size_t off = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, k)
            {
                char one[48];
                if (cJSON_IsNumber(x))
                    snprintf(one, sizeof one, "%g", x->valuedouble);
                else
                    snprintf(one, sizeof one, "%s", cJSON_IsString(x) ? x->valuestring : "?");
                if (off < sizeof val)
                    off +=
                        (size_t)snprintf(val + off, sizeof val - off, "%s%s", off ? "," : "", one);
            }
        }
        cJSON_AddItemToArray(a, cJSON_CreateString(val));
    }
    return a;
}

bool dg_cr_side_read(cr_side *s, const cJSON *rec, double th_contention)
{
    *s = (cr_side){.rec = rec};
    const cJSON *k = at(rec, "kind");
    s->kind = cJSON_IsString(k) ? k->valuestring : "?";
    bool has_cmd = cJSON_IsArray(at(at(rec, "spec"), "cmd"));
    s->shape = !strcmp(s->kind, "accept") && has_cmd ? "accept -- CMD" : s->kind;
    const cJSON *soak = section(rec, "soak"), *cmp = section(rec, "compare");
    bool ok = read_epochs(s, soak) && read_compare(s, cmp);
    walk_windows(s, rec, th_contention, 0);
    const cJSON *f;
    cJSON_ArrayForEach(f, at(rec, "findings"))
    {
        const cJSON *id = at(f, "id");
        if (cJSON_IsString(id) && !strcmp(id->valuestring, "contended"))
            s->contended_finding = true;
    }
    read_seeds(s, rec);
    s->argv = read_argv(rec, s->kind);
    return ok && s->argv;
}

void dg_cr_side_free(cr_side *s)
{
    if (!s)
        return;
    dg_free(s->epochs.v);
    for (int i = 0; i < s->ncmp; i++)
        dg_free(s->cmp[i].v);
    cJSON_Delete(s->argv);
    *s = (cr_side){0};
}

static const char *word(const cJSON *argv, int i)
{
    const cJSON *x = cJSON_GetArrayItem(argv, i);
    return cJSON_IsString(x) ? x->valuestring : "?";
}

/* Words [from, to) of argv with "..." where words were left out; a context
 * word (the first, when from > 0) that is a path is shown by its last part. */
static void join(const cJSON *argv, int from, int to, char *out, size_t n)
{
    int len = cJSON_GetArraySize(argv);
    size_t off = 0;
    out[0] = '\0';
    if (from > 0)
        off += (size_t)snprintf(out, n, "...");
    for (int i = from; i < to && off < n; i++) {
        const char *w = word(argv, i), *slash = strrchr(w, '/');
        if (i == from && from > 0 && slash && slash[1])
            w = slash + 1;
        off += (size_t)snprintf(out + off, n - off, "%s%s", off ? " " : "", w);
    }
    if (to < len && off < n)
        snprintf(out + off, n - off, "%s...", off ? " " : "");
}

void dg_cr_cmd_diff(const cJSON *argv_a, const cJSON *argv_b, char *a, char *b, size_t n)
{
    int na = cJSON_GetArraySize(argv_a), nb = cJSON_GetArraySize(argv_b);
    int p = 0, s = 0;
    while (p < na && p < nb && !strcmp(word(argv_a, p), word(argv_b, p)))
        p++;
    if (p == na && p == nb) {
        snprintf(a, n, "(the same command)");
        snprintf(b, n, "(the same command)");
        return;
    }
    while (s < na - p && s < nb - p && !strcmp(word(argv_a, na - 1 - s), word(argv_b, nb - 1 - s)))
        s++;
    /* One word of context before and after the difference. */
    int from = p > 0 ? p - 1 : 0, tail = s > 0 ? 1 : 0;
    join(argv_a, from, na - s + tail, a, n);
    join(argv_b, from, nb - s + tail, b, n);
}
