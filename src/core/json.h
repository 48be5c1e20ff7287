/* JSON through cJSON, plus the metric shape every record uses:
 * {"value": x | null, "unit": "...", "valid": bool}. cJSON keeps its default
 * allocator (devgate installs no hooks: they would be process-wide), so cJSON
 * trees are not in dg_host_mem_stats; strings handed out through
 * dg_json_print are dg_malloc memory, freed with dg_string_free. */
#ifndef DG_JSON_H
#define DG_JSON_H

#include "core/utf8.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* A metric object; value is written as null when !valid, never as 0. */
cJSON *dg_json_metric(double value, bool valid, const char *unit);
/* Adds key: {kv[i][0]: kv[i][1], ...} (n pairs of strings) to obj; the object. */
cJSON *dg_json_add_pairs(cJSON *obj, const char *key, const char *const (*kv)[2], size_t n);
/* Adds key: [v[0], ..., v[n-1]] to obj; the array (NULL when out of memory). */
cJSON *dg_json_add_ints(cJSON *obj, const char *key, const int *v, size_t n);
/* v as a METRIC, valid when v is finite ("not reported" otherwise, never 0). */
cJSON *dg_json_metric_of(double v, const char *unit);
/* Adds key: v, or key: null when v is not finite. */
void dg_json_add_num(cJSON *obj, const char *key, double v);
/* ---- UTF-8 at the boundary: the rule is utf8.h's (dg_utf8_clean) ---- */

/* A dg_malloc'd copy of s made valid UTF-8 by the rule above; NULL for a NULL
 * s or when out of memory. */
char *dg_utf8_dup(const char *s);
/* True when s[0..len) is well-formed UTF-8 (no overlongs, surrogates or
 * code points above U+10FFFF). */
bool dg_utf8_valid(const char *s, size_t len);
/* A string item holding s made valid UTF-8; a null item for a NULL s; NULL
 * when out of memory. */
cJSON *dg_json_string(const char *s);
/* Makes every string value and member name below item valid UTF-8 in place
 * (for text parsed or built elsewhere); false when out of memory. */
bool dg_json_utf8_fix(cJSON *item);
/* Adds a string member (made valid UTF-8), writing null for a NULL s. */
cJSON *dg_json_add_str(cJSON *obj, const char *key, const char *s);
/* Prints compactly into a dg_malloc string the caller frees with dg_string_free. */
char *dg_json_print(const cJSON *item);
/* A metric's value when it is valid and finite, else NAN. */
double dg_json_metric_value(const cJSON *m);
/* The same of obj's member key. */
double dg_json_metric_at(const cJSON *obj, const char *key);

/* ---- tolerant record lookups ---------------------------------------------- */

/* The item at path below root: keys split by '.', array indices as [i]
 * ("runs[0].speedup"); NULL when any part is missing. */
const cJSON *dg_jpath(const cJSON *root, const char *path);
/* A number: a METRIC's value when valid, or a plain JSON number; NAN when
 * absent, null or not valid. */
double dg_jnum(const cJSON *root, const char *path);
/* dg_jnum of the item itself. */
double dg_jnum_item(const cJSON *it);
/* dg_jnum as an int when it is a whole number in int's range, else fallback
 * (NaN, infinities and out-of-range numbers never reach a cast). */
int dg_jint(const cJSON *root, const char *path, int fallback);
/* 1 true, 0 false, -1 absent or not a bool. */
int dg_jbool(const cJSON *root, const char *path);
/* A string, NULL when absent or not a string. */
const char *dg_jstr(const cJSON *root, const char *path);
#endif
