/* What the harnesses of parsers with several inputs share: the fuzz input
 * cut into NUL-separated parts, and the check every output bound for a
 * record must pass. Header only: each harness is one .c file. */
#ifndef DG_TESTS_FUZZ_UTIL_H
#define DG_TESTS_FUZZ_UTIL_H

#include "core/json.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_PARTS 12

/* The input cut at each NUL into at most max parts (the last one keeps the
 * rest, NULs included, with its length in lens); every part a NUL-terminated
 * copy, parts past the input's "" (free with fuzz_parts_free). */
typedef struct fuzz_parts {
    char *p[FUZZ_MAX_PARTS];
    size_t len[FUZZ_MAX_PARTS];
    int n; /* parts the input held */
} fuzz_parts;

static inline void fuzz_parts_free(fuzz_parts *f)
{
    for (int i = 0; i < FUZZ_MAX_PARTS; i++)
        free(f->p[i]);
}

static inline int fuzz_split(const uint8_t *data, size_t size, int max, fuzz_parts *f)
{
    memset(f, 0, sizeof *f);
    if (max > FUZZ_MAX_PARTS)
        max = FUZZ_MAX_PARTS;
    size_t at = 0;
    for (int i = 0; i < max; i++) {
        size_t end = at;
        if (i < max - 1)
            while (end < size && data[end] != 0)
                end++;
        else
            end = size;
        size_t n = at < size ? end - at : 0;
        f->p[i] = malloc(n + 1);
        if (!f->p[i]) {
            fuzz_parts_free(f);
            return -1;
        }
        if (n)
            memcpy(f->p[i], data + at, n);
        f->p[i][n] = '\0';
        f->len[i] = n;
        at = end + 1;
    }
    f->n = 1;
    for (size_t i = 0; i < size && f->n < max; i++)
        f->n += data[i] == 0;
    return f->n;
}

/* Aborts unless the metric at path below o (absent: nothing to check) has
 * the record's shape: valid true with a finite value, or valid false with
 * null. */
static inline void fuzz_metric_check(const cJSON *o, const char *path)
{
    const cJSON *m = dg_jpath(o, path);
    if (!m)
        return;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "value");
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(m, "valid");
    if (!cJSON_IsBool(ok) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "unit")))
        abort();
    if (cJSON_IsTrue(ok) ? !(cJSON_IsNumber(v) && isfinite(v->valuedouble)) : !cJSON_IsNull(v))
        abort();
}

/* Aborts unless json is valid UTF-8 and parses (NULL: nothing to check). */
static inline void fuzz_text_check(const char *json)
{
    if (!json)
        return;
    if (!dg_utf8_valid(json, strlen(json)))
        abort();
    cJSON *o = cJSON_Parse(json);
    if (!o)
        abort();
    cJSON_Delete(o);
}

/* Aborts unless o prints as JSON that is valid UTF-8 and parses back (NULL: nothing to check). */
static inline void fuzz_json_check(const cJSON *o)
{
    if (!o)
        return;
    char *s = cJSON_PrintUnformatted(o);
    if (!s)
        abort();
    fuzz_text_check(s);
    cJSON_free(s);
}

/* The input's first n bytes into h (zeros past its end); the bytes taken. */
static inline size_t fuzz_head(const uint8_t *data, size_t size, uint8_t *h, size_t n)
{
    size_t k = size < n ? size : n;
    memset(h, 0, n);
    memcpy(h, data, k);
    return k;
}

/* The input as a NUL-terminated text (free); NULL when out of memory. */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    if (t) {
        memcpy(t, data, size);
        t[size] = '\0';
    }
    return t;
}

/* True when s is one of words (NULL-terminated). */
static inline bool fuzz_one_of(const char *s, const char *const *words)
{
    for (int i = 0; s && words[i]; i++)
        if (strcmp(s, words[i]) == 0)
            return true;
    return false;
}

/* True when s is one of the pool's words for a task's state (src/pool/). */
static inline bool fuzz_pool_state_ok(const char *s)
{
    static const char *const states[] = {"pending",   "running", "completed", "failed",
                                         "cancelled", "unknown", NULL};
    return fuzz_one_of(s, states);
}

#endif
