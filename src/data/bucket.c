/* The input bucket's canonical text and id: everything that decides what a
 * batch holds, printed the same way on every machine, hashed with SHA-256. */
#include "data/loader.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

/* The longest canonical text a bucket may have; a longer one is refused. */
#define BUCKET_TEXT_MAX ((size_t)16 << 20)

static void puts_(dg_capbuf *b, const char *s)
{
    dg_capbuf_add(b, s, strlen(s));
}

/* Integers exactly, anything else as %.6g; non-finite as null. */
static void put_num(dg_capbuf *b, double v)
{
    char t[40];
    if (!isfinite(v))
        snprintf(t, sizeof t, "null");
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(t, sizeof t, "%.0f", v);
    else
        snprintf(t, sizeof t, "%.6g", v);
    if (strcmp(t, "-0") == 0)
        snprintf(t, sizeof t, "0");
    puts_(b, t);
}

static void put_str(dg_capbuf *b, const char *s)
{
    dg_capbuf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char t[8];
        if (*p == '"' || *p == '\\') {
            t[0] = '\\';
            t[1] = (char)*p;
            dg_capbuf_add(b, t, 2);
        } else if (*p < 0x20) {
            snprintf(t, sizeof t, "\\u%04x", *p);
            puts_(b, t);
        } else {
            dg_capbuf_add(b, (const char *)p, 1);
        }
    }
    dg_capbuf_add(b, "\"", 1);
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Any JSON value with object keys sorted bytewise. */
static void put_canon(dg_capbuf *b, const cJSON *v, int depth)
{
    if (!v || depth > 32) {
        puts_(b, "null");
    } else if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON **kids = dg_malloc(sizeof *kids * (size_t)(n ? n : 1));
        if (!kids) {
            b->nomem = true;
            return;
        }
        int k = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, v) kids[k++] = c;
        qsort(kids, (size_t)k, sizeof *kids, cmp_key);
        dg_capbuf_add(b, "{", 1);
        for (int i = 0; i < k; i++) {
            if (i)
                dg_capbuf_add(b, ",", 1);
            put_str(b, kids[i]->string);
            dg_capbuf_add(b, ":", 1);
            put_canon(b, kids[i], depth + 1);
        }
        dg_capbuf_add(b, "}", 1);
        dg_free(kids);
    } else if (cJSON_IsArray(v)) {
        dg_capbuf_add(b, "[", 1);
        const cJSON *c;
        bool first = true;
        cJSON_ArrayForEach(c, v)
        {
            if (!first)
                dg_capbuf_add(b, ",", 1);
            first = false;
            put_canon(b, c, depth + 1);
        }
        dg_capbuf_add(b, "]", 1);
    } else if (cJSON_IsString(v)) {
        put_str(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        put_num(b, v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        puts_(b, "true");
    } else if (cJSON_IsFalse(v)) {
        puts_(b, "false");
    } else {
        puts_(b, "null");
    }
}

char *dg_bucket_text(const dg_loader_opts *o, const float mean[3], const float std[3],
                     const cJSON *dataset)
{
    dg_capbuf b = {.cap = BUCKET_TEXT_MAX};
    puts_(&b, "{\"resolutions\":[");
    for (int i = 0; i < o->nres; i++) {
        puts_(&b, i ? ",{\"h\":" : "{\"h\":");
        put_num(&b, o->res[i].h);
        puts_(&b, ",\"w\":");
        put_num(&b, o->res[i].w);
        puts_(&b, ",\"weight\":");
        put_num(&b, o->res[i].weight);
        puts_(&b, "}");
    }
    /* Augmentations in sorted order. */
    puts_(&b, "],\"augment\":[");
    if (o->crop)
        puts_(&b, "\"crop\"");
    if (o->flip)
        puts_(&b, o->crop ? ",\"flip\"" : "\"flip\"");
    puts_(&b, "],\"batch\":");
    put_num(&b, o->batch);
    puts_(&b, ",\"channels\":");
    put_num(&b, o->channels);
    puts_(&b, ",\"normalize\":{\"mode\":");
    put_str(&b, o->norm == DG_NORM_AUTO ? "auto" : o->norm == DG_NORM_GIVEN ? "given" : "none");
    puts_(&b, ",\"mean\":[");
    int nc = o->norm == DG_NORM_NONE ? 0 : o->channels;
    for (int c = 0; c < nc; c++) {
        if (c)
            dg_capbuf_add(&b, ",", 1);
        put_num(&b, mean[c]);
    }
    puts_(&b, "],\"std\":[");
    for (int c = 0; c < nc; c++) {
        if (c)
            dg_capbuf_add(&b, ",", 1);
        put_num(&b, std[c]);
    }
    puts_(&b, "]},\"dataset\":");
    put_canon(&b, dataset, 0);
    /* Only when not fp32, so fp32 buckets keep their ids. */
    if (o->math != DG_MATH_FP32) {
        puts_(&b, ",\"math\":\"");
        puts_(&b, dg_math_name(o->math));
        puts_(&b, "\"");
    }
    puts_(&b, "}");
    if (b.nomem || b.truncated) {
        dg_free(b.data);
        return NULL;
    }
    return b.data;
}

void dg_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    if (EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
        memset(md, 0, sizeof md);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[64] = '\0';
}
