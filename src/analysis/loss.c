/* Loss agreement of two runs (loss.h). */
#include "analysis/loss.h"

#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct loss_row {
    double epoch, step, loss;
} loss_row;

static int by_key(const void *a, const void *b)
{
    const loss_row *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? -1 : 1;
    return (x->step > y->step) - (x->step < y->step);
}

/* The finite losses of arr ([[epoch, step, loss], ...]) sorted by (epoch,
 * step), dg_malloc'd (one element at least); NULL when out of memory. */
static loss_row *rows_of(const cJSON *arr, size_t *n)
{
    int cnt = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    loss_row *v = dg_malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *v);
    *n = 0;
    if (!v)
        return NULL;
    const cJSON *row, *rows = cnt > 0 ? arr : NULL;
    cJSON_ArrayForEach(row, rows)
    {
        const cJSON *e = cJSON_GetArrayItem(row, 0), *s = cJSON_GetArrayItem(row, 1),
                    *l = cJSON_GetArrayItem(row, 2);
        if (cJSON_IsNumber(e) && cJSON_IsNumber(s) && cJSON_IsNumber(l) && isfinite(l->valuedouble))
            v[(*n)++] = (loss_row){e->valuedouble, s->valuedouble, l->valuedouble};
    }
    qsort(v, *n, sizeof *v, by_key);
    return v;
}

bool dg_loss_torch_unseeded(const cJSON *seeds)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(seeds, "torch");
    return cJSON_IsObject(seeds) && !(cJSON_IsNumber(t) || cJSON_IsTrue(t));
}

bool dg_loss_pair(const cJSON *a, const cJSON *b, double tolerance, const char *incomparable,
                  dg_loss_pairing *out)
{
    *out = (dg_loss_pairing){.max_abs = NAN,
                             .max_rel = NAN,
                             .worst_epoch = NAN,
                             .worst_step = NAN,
                             .tolerance = tolerance,
                             .agree = -1};
    size_t na = 0, nb = 0;
    loss_row *la = rows_of(a, &na), *lb = rows_of(b, &nb);
    if (!la || !lb) {
        dg_free(la);
        dg_free(lb);
        snprintf(out->why, sizeof out->why, "out of host memory");
        return false;
    }
    for (size_t i = 0; i < na; i++) {
        const loss_row *m = bsearch(&la[i], lb, nb, sizeof *lb, by_key);
        if (!m)
            continue;
        out->pairs++;
        double d = fabs(la[i].loss - m->loss);
        double rel = d / fmax(fmax(fabs(la[i].loss), fabs(m->loss)), 1e-12);
        out->max_abs = isnan(out->max_abs) ? d : fmax(out->max_abs, d);
        if (isnan(out->max_rel) || rel > out->max_rel) {
            out->max_rel = rel;
            out->worst_epoch = la[i].epoch;
            out->worst_step = la[i].step;
        }
    }
    out->a_only = na - out->pairs;
    out->b_only = nb - out->pairs;
    dg_free(la);
    dg_free(lb);
    if (incomparable)
        snprintf(out->why, sizeof out->why, "%s", incomparable);
    else if (na == 0 && nb == 0)
        snprintf(out->why, sizeof out->why, "no losses reported");
    else if (na == 0 || nb == 0)
        snprintf(out->why, sizeof out->why, "only one side reported losses");
    else if (out->pairs < DG_LOSS_MIN_PAIRS)
        snprintf(out->why, sizeof out->why,
                 "too few common steps: %zu (epoch, step) reported by both, %d needed", out->pairs,
                 DG_LOSS_MIN_PAIRS);
    else
        out->agree = out->max_rel <= tolerance;
    return true;
}

cJSON *dg_loss_pairing_json(const dg_loss_pairing *p, const char *a_only, const char *b_only)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "pairs", (double)p->pairs);
    cJSON_AddNumberToObject(o, a_only, (double)p->a_only);
    cJSON_AddNumberToObject(o, b_only, (double)p->b_only);
    cJSON_AddItemToObject(o, "max_abs_diff", dg_json_metric_of(p->max_abs, "loss"));
    cJSON_AddItemToObject(o, "max_rel_diff", dg_json_metric_of(p->max_rel, "relative"));
    if (isfinite(p->worst_epoch) && isfinite(p->worst_step)) {
        cJSON *w = cJSON_AddObjectToObject(o, "worst");
        cJSON_AddNumberToObject(w, "epoch", p->worst_epoch);
        cJSON_AddNumberToObject(w, "step", p->worst_step);
    } else {
        cJSON_AddNullToObject(o, "worst");
    }
    cJSON_AddNumberToObject(o, "tolerance", p->tolerance);
    cJSON_AddNumberToObject(o, "min_pairs", DG_LOSS_MIN_PAIRS);
    if (p->agree >= 0)
        cJSON_AddBoolToObject(o, "agree", p->agree == 1);
    else
        cJSON_AddNullToObject(o, "agree");
    dg_json_add_str(o, "why", p->agree >= 0 ? NULL : p->why);
    return o;
}
