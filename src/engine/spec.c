/* The training spec: dg_train_opts <-> JSON (docs/schema/spec.md).
 *
 * One table below names every training option once: its spec key, its kind,
 * where it lives in dg_train_opts and the values it accepts. The command line
 * (dg_train_opts_set from each flag), spec files and the sweep's child hand-off
 * (dg_spec_decode) and the records' "spec" section (dg_spec_json) all go
 * through it, so a value is checked the same way wherever it comes from.
 *
 * Adding a training option: a field in dg_train_opts, one row here (and the
 * encoder's line when its kind is not generic), one row in the CLI's train
 * option table (src/cli/cli_train.c), and the code that uses it. */
#include "spec.h"

#include "core/core.h"
#include "core/json.h"
#include "data/loader.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind {
    K_INT,      /* int in [lo, hi] */
    K_SIZE,     /* size_t in [lo, hi] */
    K_U64,      /* uint64_t, decimal or 0x hex */
    K_FLOAT,    /* float in [lo, hi] */
    K_DOUBLE,   /* double in [lo, hi] */
    K_STR,      /* const char * (NULL: default) */
    K_BOOL,     /* bool: true/false */
    K_NOTBOOL,  /* bool stored inverted (capture <-> no_capture) */
    K_BYTES,    /* size_t: 1048576, 512K, 2GiB; 0 none */
    K_MATH,     /* dg_math: "fp32" | "tf32" | "bf16" */
    K_SYNC,     /* int: "epoch" (0) or steps */
    K_WORKERS,  /* int: 0 none (-1 inside), N threads */
    K_BADSHARE, /* double: share in [0, 1]; 0 none allowed (-1 inside) */
    K_ONBAD,    /* bool on_bad_fail: "skip" | "fail" */
    K_INPUT,    /* in_c, in_h, in_w: "CxHxW" */
} kind;

typedef struct field {
    const char *key;
    kind k;
    size_t off;
    double lo, hi;
    bool unhashed;  /* left out of the spec hash (where output goes, not what runs) */
    bool zero_null; /* 0 (the default) is written and read as null; text wants lo..hi */
} field;

#define F(member) offsetof(dg_train_opts, member)
static const field fields[] = {
    {"model", K_STR, F(model), 0, 0, false, false},
    {"input", K_INPUT, F(in_c), 1, 4096, false, false},
    {"backend", K_STR, F(backend), 0, 0, false, false},
    {"math", K_MATH, F(math), 0, 0, false, false},
    {"device", K_INT, F(device), 0, 64, false, false},
    {"batch", K_INT, F(batch), 1, 1 << 20, false, true},
    {"steps", K_INT, F(steps), 1, 100000000, false, true},
    {"epochs", K_INT, F(epochs), 1, 65535, false, true}, /* the loader's epoch counter is 16 bits */
    {"seed", K_U64, F(seed), 0, 0, false, false},
    {"sync_every", K_SYNC, F(sync_every), 0, 100000000, false, false},
    {"lr", K_FLOAT, F(lr), 0, 1e6, false, false},
    {"momentum", K_FLOAT, F(momentum), 0, 1e6, false, false},
    {"weight_decay", K_FLOAT, F(weight_decay), 0, 1e6, false, false},
    {"threads", K_INT, F(threads), 1, 1024, false, true},
    {"mem_budget", K_BYTES, F(mem_budget), 0, 0, false, false},
    {"disable_ops", K_STR, F(disable_ops), 0, 0, false, false},
    {"samples", K_SIZE, F(samples), 1, 100000000, false, true},
    {"capture", K_NOTBOOL, F(no_capture), 0, 0, false, false},
    {"sample_ms", K_INT, F(sample_ms), 1, 60000, false, true},
    {"export", K_STR, F(export_dir), 0, 0, true, false},
    {"data", K_STR, F(data), 0, 0, false, false},
    {"workers", K_WORKERS, F(workers), 0, 256, false, false},
    {"prefetch", K_INT, F(prefetch), 1, 4096, false, true},
    {"val_split", K_DOUBLE, F(val_split), 0, 0x1.fffffffffffffp-1, false, false},
    {"resolution", K_STR, F(resolution), 0, 0, false, false},
    {"augment", K_STR, F(augment), 0, 0, false, false},
    {"normalize", K_STR, F(normalize), 0, 0, false, false},
    {"cache", K_BOOL, F(cache), 0, 0, false, false},
    {"on_bad_sample", K_ONBAD, F(on_bad_fail), 0, 0, false, false},
    {"max_bad_share", K_BADSHARE, F(max_bad_share), 0, 1, false, false},
};
#undef F
#define NFIELDS (sizeof fields / sizeof fields[0])

struct dg_spec {
    dg_train_opts o;
    char *strings[NFIELDS]; /* owned copies behind the K_STR fields */
};

void dg_train_opts_init(dg_train_opts *o)
{
    *o = (dg_train_opts)DG_TRAIN_OPTS_INIT;
}

dg_status dg_train_opts_check(dg_ctx *ctx, const dg_train_opts *o)
{
    if (!o || o->init != DG_TRAIN_OPTS_MAGIC)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "train options were not initialised: start them with DG_TRAIN_OPTS_INIT "
                       "or dg_train_opts_init() (a zeroed dg_train_opts would train with "
                       "learning rate 0)");
    return DG_OK;
}

static const field *find(const char *key)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

const char *dg_spec_key_name(size_t i)
{
    return i < NFIELDS ? fields[i].key : NULL;
}

/* Decimal integer in [lo, hi]; false for anything else ("1.5", "1e3", "7x"). */
static bool parse_int(const char *s, double lo, double hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || (double)v < lo || (double)v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || !(v >= lo) || !(v <= hi))
        return false;
    *out = v;
    return true;
}

bool dg_parse_bytes(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || !isfinite(v))
        return false;
    double mult = 1;
    if (*end) {
        const char *u = "kmgt", *p = strchr(u, *end | 0x20);
        if (!p || !*p)
            return false;
        mult = ldexp(1.0, 10 * (int)(p - u + 1));
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if (*end)
            return false;
    }
    v *= mult;
    if (v > 1e18)
        return false;
    *out = (size_t)v;
    return true;
}

static dg_status bad(dg_ctx *ctx, const field *f, const char *want, const char *v)
{
    return dg_fail(ctx, DG_ERR_USAGE, "%s wants %s, got '%.200s'", f->key, want, v);
}

/* Sets f in o from text v (the one validation of flags and spec files). */
static dg_status set_field(dg_ctx *ctx, dg_train_opts *o, const field *f, const char *v)
{
    char *base = (char *)o + f->off;
    long long n;
    double d;
    switch (f->k) {
    case K_INT:
    case K_SYNC:
    case K_WORKERS:
        if (f->k == K_SYNC && strcmp(v, "epoch") == 0) {
            *(int *)base = 0;
            return DG_OK;
        }
        if (!parse_int(v, f->lo, f->hi, &n))
            return dg_fail(ctx, DG_ERR_USAGE, "%s wants an integer in %.0f..%.0f%s, got '%.200s'",
                           f->key, f->lo, f->hi,
                           f->k == K_SYNC      ? " or \"epoch\""
                           : f->k == K_WORKERS ? " (0: batches made in the training loop)"
                                               : "",
                           v);
        *(int *)base = f->k == K_WORKERS && n == 0 ? -1 : (int)n;
        return DG_OK;
    case K_SIZE:
        if (!parse_int(v, f->lo, f->hi, &n))
            return dg_fail(ctx, DG_ERR_USAGE, "%s wants an integer in %.0f..%.0f, got '%.200s'",
                           f->key, f->lo, f->hi, v);
        *(size_t *)base = (size_t)n;
        return DG_OK;
    case K_U64: {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(v, &end, 0);
        if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || v[0] == ' ')
            return bad(ctx, f, "a non-negative integer below 2^64", v);
        *(uint64_t *)base = u;
        return DG_OK;
    }
    case K_FLOAT:
        if (!parse_num(v, f->lo, f->hi, &d))
            return dg_fail(ctx, DG_ERR_USAGE, "%s wants a number in [%g, %g], got '%.200s'", f->key,
                           f->lo, f->hi, v);
        *(float *)base = (float)d;
        return DG_OK;
    case K_DOUBLE:
    case K_BADSHARE:
        if (!parse_num(v, f->lo, f->hi, &d))
            return dg_fail(ctx, DG_ERR_USAGE, "%s wants a share in [0, 1%s, got '%.200s'", f->key,
                           f->hi < 1 ? ")" : "]", v);
        *(double *)base = f->k == K_BADSHARE && d == 0 ? -1 : d;
        return DG_OK;
    case K_STR:
        if (!v[0])
            return bad(ctx, f, "a non-empty string", v);
        *(const char **)base = v;
        return DG_OK;
    case K_BOOL:
    case K_NOTBOOL: {
        bool t = strcmp(v, "true") == 0;
        if (!t && strcmp(v, "false") != 0)
            return bad(ctx, f, "true or false", v);
        *(bool *)base = f->k == K_NOTBOOL ? !t : t;
        return DG_OK;
    }
    case K_BYTES:
        if (!dg_parse_bytes(v, (size_t *)base) || *(size_t *)base == 0)
            return bad(ctx, f, "a size such as 512M or 2G", v);
        return DG_OK;
    case K_MATH:
        for (int m = DG_MATH_FP32; m <= DG_MATH_BF16; m++)
            if (strcmp(v, dg_math_name((dg_math)m)) == 0) {
                *(dg_math *)base = (dg_math)m;
                return DG_OK;
            }
        return bad(ctx, f, "fp32, tf32 or bf16", v);
    case K_ONBAD:
        if (strcmp(v, "skip") != 0 && strcmp(v, "fail") != 0)
            return bad(ctx, f, "skip or fail", v);
        *(bool *)base = strcmp(v, "fail") == 0;
        return DG_OK;
    case K_INPUT: {
        int c, h, w, used = 0;
        if (sscanf(v, "%dx%dx%d%n", &c, &h, &w, &used) != 3 || v[used] || c < 1 || h < 1 || w < 1 ||
            c > f->hi || h > f->hi || w > f->hi)
            return bad(ctx, f, "CxHxW (each 1..4096)", v);
        o->in_c = c, o->in_h = h, o->in_w = w;
        return DG_OK;
    }
    }
    return dg_fail(ctx, DG_ERR_USAGE, "%s: unhandled kind", f->key);
}

dg_status dg_train_opts_set(dg_ctx *ctx, dg_train_opts *o, const char *key, const char *value)
{
    const field *f = key ? find(key) : NULL;
    if (!f)
        return dg_fail(ctx, DG_ERR_USAGE, "unknown training option \"%.64s\"", key ? key : "");
    if (!value)
        return dg_fail(ctx, DG_ERR_USAGE, "%s needs a value", f->key);
    return set_field(ctx, o, f, value);
}

/* ---- encoding ------------------------------------------------------------------ */

static cJSON *encode(const dg_train_opts *o, bool for_hash)
{
    cJSON *s = cJSON_CreateObject();
    if (!s)
        return NULL;
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        const char *base = (const char *)o + f->off;
        if (for_hash && f->unhashed)
            continue;
        cJSON *it = NULL;
        switch (f->k) {
        case K_INT:
            it = f->zero_null && *(const int *)base == 0 ? cJSON_CreateNull()
                                                         : cJSON_CreateNumber(*(const int *)base);
            break;
        case K_SIZE:
            it = f->zero_null && *(const size_t *)base == 0
                     ? cJSON_CreateNull()
                     : cJSON_CreateNumber((double)*(const size_t *)base);
            break;
        case K_U64: {
            uint64_t u = *(const uint64_t *)base;
            if (u <= ((uint64_t)1 << 53))
                it = cJSON_CreateNumber((double)u);
            else { /* beyond a double's integers: exact as text */
                char t[24];
                snprintf(t, sizeof t, "%llu", (unsigned long long)u);
                it = cJSON_CreateString(t);
            }
            break;
        }
        case K_FLOAT: {
            /* Negative: the library's default, written as its value. */
            float v = *(const float *)base;
            if (v < 0)
                v = f->off == offsetof(dg_train_opts, lr)         ? 0.01f
                    : f->off == offsetof(dg_train_opts, momentum) ? 0.9f
                                                                  : 0.0f;
            /* The shortest decimal that reads back as the same float, so
             * 0.01f is written 0.01 and not 0.009999999776482582. */
            char t[32];
            for (int p = 1; p <= 9; p++) {
                snprintf(t, sizeof t, "%.*g", p, (double)v);
                if ((float)strtod(t, NULL) == v)
                    break;
            }
            it = cJSON_CreateNumber(strtod(t, NULL));
            break;
        }
        case K_DOUBLE: it = cJSON_CreateNumber(*(const double *)base); break;
        case K_STR: {
            const char *v = *(const char *const *)base;
            const char *def = strcmp(f->key, "model") == 0       ? "mlp"
                              : strcmp(f->key, "backend") == 0   ? "cpu"
                              : strcmp(f->key, "data") == 0      ? "synthetic"
                              : strcmp(f->key, "augment") == 0   ? "none"
                              : strcmp(f->key, "normalize") == 0 ? "none"
                                                                 : NULL;
            v = v ? v : def;
            it = dg_json_string(v); /* a path or a name from the outside: UTF-8 */
            break;
        }
        case K_BOOL: it = cJSON_CreateBool(*(const bool *)base); break;
        case K_NOTBOOL: it = cJSON_CreateBool(!*(const bool *)base); break;
        case K_BYTES: {
            size_t b = *(const size_t *)base;
            it = dg_json_metric((double)b, b > 0, "bytes");
            break;
        }
        case K_MATH: it = cJSON_CreateString(dg_math_name(*(const dg_math *)base)); break;
        case K_SYNC: {
            int v = *(const int *)base;
            it = v > 0 ? cJSON_CreateNumber(v) : cJSON_CreateString("epoch");
            break;
        }
        case K_WORKERS: {
            int v = *(const int *)base;
            it = cJSON_CreateNumber(v == 0 ? 2 : v < 0 ? 0 : v);
            break;
        }
        case K_BADSHARE: {
            double v = *(const double *)base;
            it = cJSON_CreateNumber(v == 0 ? 0.01 : v < 0 ? 0 : v);
            break;
        }
        case K_ONBAD: it = cJSON_CreateString(*(const bool *)base ? "fail" : "skip"); break;
        case K_INPUT:
            if (o->in_c > 0 && o->in_h > 0 && o->in_w > 0) {
                char t[48];
                snprintf(t, sizeof t, "%dx%dx%d", o->in_c, o->in_h, o->in_w);
                it = cJSON_CreateString(t);
            } else {
                it = cJSON_CreateNull();
            }
            break;
        }
        if (!it || !cJSON_AddItemToObject(s, f->key, it)) {
            cJSON_Delete(it);
            cJSON_Delete(s);
            return NULL;
        }
    }
    return s;
}

cJSON *dg_spec_json(const dg_train_opts *o)
{
    return encode(o, false);
}

dg_status dg_spec_encode(dg_ctx *ctx, const dg_train_opts *o, char **json)
{
    *json = NULL;
    dg_status st = dg_train_opts_check(ctx, o);
    if (st != DG_OK)
        return st;
    cJSON *s = dg_spec_json(o);
    *json = s ? dg_json_print(s) : NULL;
    cJSON_Delete(s);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "spec: out of host memory");
}

dg_status dg_spec_hash(dg_ctx *ctx, const dg_train_opts *o, char hex[65])
{
    hex[0] = '\0';
    dg_status st = dg_train_opts_check(ctx, o);
    if (st != DG_OK)
        return st;
    cJSON *s = encode(o, true);
    char *text = s ? dg_json_print(s) : NULL;
    cJSON_Delete(s);
    if (!text)
        return dg_fail(ctx, DG_ERR_NOMEM, "spec: out of host memory");
    dg_sha256_hex(text, strlen(text), hex);
    dg_string_free(text);
    return DG_OK;
}

/* ---- decoding ------------------------------------------------------------------ */

void dg_spec_free(dg_spec *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < NFIELDS; i++)
        dg_free(s->strings[i]);
    dg_free(s);
}

const dg_train_opts *dg_spec_opts(const dg_spec *s)
{
    return s ? &s->o : NULL;
}

/* One member of a spec object into s. */
static dg_status decode_member(dg_ctx *ctx, dg_spec *s, const cJSON *it)
{
    const field *f = find(it->string);
    if (!f)
        return dg_fail(ctx, DG_ERR_USAGE, "unknown key \"%.64s\"", it->string);
    size_t idx = (size_t)(f - fields);
    char *base = (char *)&s->o + f->off;
    char text[64];
    const char *v = NULL;
    if (cJSON_IsNull(it)) {
        /* null: the default (strings and the input shape only) */
        if (f->k == K_STR) {
            *(const char **)base = NULL;
            return DG_OK;
        }
        if (f->k == K_INPUT) {
            s->o.in_c = s->o.in_h = s->o.in_w = 0;
            return DG_OK;
        }
        if (f->zero_null && f->k == K_SIZE) {
            *(size_t *)base = 0;
            return DG_OK;
        }
        if (f->zero_null) {
            *(int *)base = 0;
            return DG_OK;
        }
        return dg_fail(ctx, DG_ERR_USAGE, "%s must not be null", f->key);
    }
    if (cJSON_IsObject(it) && f->k == K_BYTES) { /* the metric shape records write */
        const cJSON *val = cJSON_GetObjectItem(it, "value");
        if (!cJSON_IsTrue(cJSON_GetObjectItem(it, "valid"))) {
            *(size_t *)base = 0;
            return DG_OK;
        }
        if (!cJSON_IsNumber(val))
            return dg_fail(ctx, DG_ERR_USAGE, "%s: a valid metric needs a number value", f->key);
        it = val;
    }
    if (cJSON_IsString(it)) {
        v = it->valuestring;
    } else if (cJSON_IsBool(it)) {
        v = cJSON_IsTrue(it) ? "true" : "false";
    } else if (cJSON_IsNumber(it)) {
        double d = it->valuedouble;
        /* Integers as integers, anything else exactly, so that 1.5 is refused
         * where an integer is wanted instead of becoming 1. */
        if (d == floor(d) && fabs(d) < 1e15)
            snprintf(text, sizeof text, "%.0f", d);
        else
            snprintf(text, sizeof text, "%.17g", d);
        v = text;
    } else {
        return dg_fail(ctx, DG_ERR_USAGE, "%s wants a string, number or boolean", f->key);
    }
    if (f->k == K_STR) {
        char *copy = dg_strdup(v);
        if (!copy)
            return dg_fail(ctx, DG_ERR_NOMEM, "spec: out of host memory");
        dg_status st = set_field(ctx, &s->o, f, copy);
        if (st != DG_OK) {
            dg_free(copy);
            return st;
        }
        dg_free(s->strings[idx]);
        s->strings[idx] = copy;
        return DG_OK;
    }
    return set_field(ctx, &s->o, f, v);
}

dg_status dg_spec_decode(dg_ctx *ctx, const char *json, dg_spec **out)
{
    *out = NULL;
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dg_fail(ctx, DG_ERR_FORMAT, "spec: not a JSON object");
    }
    dg_spec *s = dg_calloc(1, sizeof *s);
    if (!s) {
        cJSON_Delete(root);
        return dg_fail(ctx, DG_ERR_NOMEM, "spec: out of host memory");
    }
    dg_train_opts_init(&s->o);
    dg_status st = DG_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        if ((st = decode_member(ctx, s, it)) != DG_OK)
            break;
    }
    cJSON_Delete(root);
    if (st != DG_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dg_errmsg(ctx));
        dg_spec_free(s);
        return dg_fail(ctx, st, "spec: %s", msg);
    }
    *out = s;
    return DG_OK;
}
