#include "json.h"

#include "core.h"
#include "utf8.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

cJSON *dg_json_metric(double value, bool valid, const char *unit)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return NULL;
    if (valid)
        cJSON_AddNumberToObject(m, "value", value);
    else
        cJSON_AddNullToObject(m, "value");
    cJSON_AddStringToObject(m, "unit", unit);
    cJSON_AddBoolToObject(m, "valid", valid);
    return m;
}

cJSON *dg_json_add_pairs(cJSON *obj, const char *key, const char *const (*kv)[2], size_t n)
{
    cJSON *o = cJSON_AddObjectToObject(obj, key);
    for (size_t i = 0; o && i < n; i++)
        cJSON_AddStringToObject(o, kv[i][0], kv[i][1]);
    return o;
}

cJSON *dg_json_add_ints(cJSON *obj, const char *key, const int *v, size_t n)
{
    cJSON *a = cJSON_AddArrayToObject(obj, key);
    for (size_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

cJSON *dg_json_metric_of(double v, const char *unit)
{
    return dg_json_metric(isfinite(v) ? v : 0, isfinite(v), unit);
}

void dg_json_add_num(cJSON *obj, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(obj, key, v);
    else
        cJSON_AddNullToObject(obj, key);
}

/* ---- UTF-8 at the boundary ------------------------------------------------ */

char *dg_utf8_dup(const char *s)
{
    if (!s)
        return NULL;
    size_t len = strlen(s);
    char *d = dg_malloc(3 * len + 1);
    if (d)
        dg_utf8_clean(d, 3 * len + 1, s, len, false);
    return d;
}

bool dg_utf8_valid(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t k = dg_utf8_seq(s + i, len - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

cJSON *dg_json_string(const char *s)
{
    if (!s)
        return cJSON_CreateNull();
    if (dg_utf8_valid(s, strlen(s)))
        return cJSON_CreateString(s);
    char *c = dg_utf8_dup(s);
    cJSON *item = c ? cJSON_CreateString(c) : NULL;
    dg_free(c);
    return item;
}

/* Replaces *slot (allocated through cJSON's hooks) with a valid copy when needed. */
static bool fix_text(char **slot)
{
    if (!*slot || dg_utf8_valid(*slot, strlen(*slot)))
        return true;
    size_t len = strlen(*slot);
    char *c = cJSON_malloc(3 * len + 1);
    if (!c)
        return false;
    dg_utf8_clean(c, 3 * len + 1, *slot, len, false);
    cJSON_free(*slot);
    *slot = c;
    return true;
}

bool dg_json_utf8_fix(cJSON *item)
{
    if (!item)
        return true;
    if (item->string && !(item->type & cJSON_StringIsConst) && !fix_text(&item->string))
        return false;
    if (cJSON_IsString(item) && !(item->type & cJSON_IsReference) && !fix_text(&item->valuestring))
        return false;
    for (cJSON *c = item->child; c; c = c->next)
        if (!dg_json_utf8_fix(c))
            return false;
    return true;
}

cJSON *dg_json_add_str(cJSON *obj, const char *key, const char *s)
{
    cJSON *item = dg_json_string(s);
    if (!item || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return NULL;
    }
    return item;
}

char *dg_json_print(const cJSON *item)
{
    /* cJSON allocates with its own (process-wide) allocator, which devgate
     * leaves alone; strings the library hands out come from dg_malloc so that
     * dg_string_free is their one free. */
    char *text = cJSON_PrintUnformatted(item);
    if (!text)
        return NULL;
    size_t n = strlen(text) + 1;
    /* Every string should have been cleaned where it came in; one that was
     * not still leaves as valid UTF-8 (its bad bytes as U+FFFD), since a
     * byte above 0x7f only ever stands inside a JSON string. */
    bool valid = dg_utf8_valid(text, n - 1);
    char *out = dg_malloc(valid ? n : 3 * n);
    if (out && valid)
        memcpy(out, text, n);
    else if (out)
        dg_utf8_clean(out, 3 * n, text, n - 1, false);
    cJSON_free(text);
    return out;
}

double dg_json_metric_value(const cJSON *m)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "value");
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "valid")) && cJSON_IsNumber(v) &&
                   isfinite(v->valuedouble)
               ? v->valuedouble
               : NAN;
}

double dg_json_metric_at(const cJSON *obj, const char *key)
{
    return dg_json_metric_value(cJSON_GetObjectItemCaseSensitive(obj, key));
}

const cJSON *dg_jpath(const cJSON *root, const char *path)
{
    const cJSON *cur = root;
    const char *p = path ? path : "";
    char key[128];
    while (cur && *p) {
        if (*p == '.') {
            p++;
            continue;
        }
        if (*p == '[') {
            char *end;
            long i = strtol(p + 1, &end, 10);
            if (end == p + 1 || *end != ']' || i < 0 || i > 1000000 || !cJSON_IsArray(cur))
                return NULL;
            cur = cJSON_GetArrayItem(cur, (int)i);
            p = end + 1;
            continue;
        }
        size_t n = strcspn(p, ".[");
        if (n >= sizeof key || !cJSON_IsObject(cur))
            return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        cur = cJSON_GetObjectItemCaseSensitive(cur, key);
        p += n;
    }
    return cur;
}

double dg_jnum_item(const cJSON *it)
{
    if (cJSON_IsNumber(it))
        return it->valuedouble;
    if (!cJSON_IsObject(it))
        return NAN;
    const cJSON *valid = cJSON_GetObjectItemCaseSensitive(it, "valid");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "value");
    if ((valid && !cJSON_IsTrue(valid)) || !cJSON_IsNumber(v))
        return NAN;
    return v->valuedouble;
}

double dg_jnum(const cJSON *root, const char *path)
{
    return dg_jnum_item(dg_jpath(root, path));
}

int dg_jint(const cJSON *root, const char *path, int fallback)
{
    double v = dg_jnum(root, path);
    return v >= INT_MIN && v <= INT_MAX && v == floor(v) ? (int)v : fallback;
}

int dg_jbool(const cJSON *root, const char *path)
{
    const cJSON *it = dg_jpath(root, path);
    return cJSON_IsBool(it) ? cJSON_IsTrue(it) : -1;
}

const char *dg_jstr(const cJSON *root, const char *path)
{
    const cJSON *it = dg_jpath(root, path);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}
