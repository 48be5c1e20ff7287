/* The environment proof's Python section, the pure half: what the
 * interpreter's probe answered (its stdout's JSON lines, its stderr, how it
 * ended) read into the record's members, every string cleaned and every type
 * checked (docs/schema/env.md "python"). python.c runs the interpreter and
 * adds what the files say (binary, extension modules). */
#include "env/python_int.h"

#include "core/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_LINES_MAX 16 /* JSON lines considered */
#define SITE_MAX 64      /* site-packages directories considered */

/* ---- JSON building with one out-of-memory flag (python_int.h) ---------------- */

cJSON *dg_pyjb_chk(dg_pyjb *b, cJSON *item)
{
    if (!item)
        b->oom = true;
    return item;
}

void dg_pyjb_put(dg_pyjb *b, cJSON *obj, const char *key, cJSON *item)
{
    if (!item || !obj || !cJSON_AddItemToObject(obj, key, item)) {
        b->oom = true;
        cJSON_Delete(item);
    }
}

void dg_pyjb_put_str(dg_pyjb *b, cJSON *obj, const char *key, const char *s)
{
    dg_pyjb_put(b, obj, key, dg_json_string(s));
}

void dg_pyjb_put_num(dg_pyjb *b, cJSON *obj, const char *key, double v, bool valid)
{
    dg_pyjb_put(b, obj, key, valid ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

void dg_pyjb_put_bool(dg_pyjb *b, cJSON *obj, const char *key, int v /* -1: null */)
{
    dg_pyjb_put(b, obj, key, v < 0 ? cJSON_CreateNull() : cJSON_CreateBool(v));
}

void dg_pyjb_push(dg_pyjb *b, cJSON *arr, cJSON *item)
{
    if (!item || !arr || !cJSON_AddItemToArray(arr, item)) {
        b->oom = true;
        cJSON_Delete(item);
    }
}

/* ---- text for the record ----------------------------------------------------- */

void dg_py_rec_clean(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    char *flat = dg_malloc(len + 1);
    if (!flat) {
        if (n)
            dst[0] = '\0';
        return;
    }
    for (size_t i = 0; i <= len; i++)
        flat[i] = src[i] == '\n' || src[i] == '\t' || src[i] == '\r' ? ' ' : src[i];
    dg_utf8_clean(dst, n, flat, len, true);
    dg_free(flat);
}

/* The line of stderr that says what went wrong: the first one, except for a
 * Python traceback, whose message is on its last line. */
static void stderr_reason(const char *err, size_t err_len, char *dst, size_t n)
{
    dst[0] = '\0';
    if (!err)
        return;
    const char *s = err, *end = err + err_len;
    const char *best = NULL, *best_end = NULL;
    bool traceback = false;
    for (const char *p = s; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *q = p;
        while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < le) {
            if (!best && strncmp(q, "Traceback (most recent call last)", 33) == 0)
                traceback = true;
            if (!best || traceback) {
                best = q;
                best_end = le;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (!best)
        return;
    char line[STR_MAX];
    size_t len = (size_t)(best_end - best);
    if (len >= sizeof line)
        len = sizeof line - 1;
    memcpy(line, best, len);
    line[len] = '\0';
    dg_py_rec_clean(dst, n, dg_trim(line));
}

/* ---- reading the child's answer ------------------------------------------ */

typedef struct answer {
    cJSON *objs[OUT_LINES_MAX];
    int n;
} answer;

static void parse_answer(answer *a, const char *out, size_t len)
{
    for (const char *p = out; p && p < out + len && a->n < OUT_LINES_MAX;) {
        const char *nl = memchr(p, '\n', (size_t)(out + len - p));
        const char *le = nl ? nl : out + len;
        while (p < le && (*p == ' ' || *p == '\t' || *p == '\r'))
            p++;
        if (p < le && *p == '{') {
            cJSON *o = cJSON_ParseWithLength(p, (size_t)(le - p));
            if (cJSON_IsObject(o))
                a->objs[a->n++] = o;
            else
                cJSON_Delete(o);
        }
        p = nl ? nl + 1 : out + len;
    }
}

/* Later lines override earlier ones, so a child may answer in pieces. */
static const cJSON *answer_get(const answer *a, const char *key)
{
    for (int i = a->n - 1; i >= 0; i--) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(a->objs[i], key);
        if (v)
            return v;
    }
    return NULL;
}

static bool answer_str(const answer *a, const char *key, char *dst, size_t n)
{
    const cJSON *v = answer_get(a, key);
    if (!cJSON_IsString(v) || !v->valuestring)
        return false;
    dg_py_rec_clean(dst, n, v->valuestring);
    return true;
}

static int json_tristate(const cJSON *v)
{
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

static cJSON *torch_object(dg_pyjb *b, const cJSON *t)
{
    cJSON *o = dg_pyjb_chk(b, cJSON_CreateObject());
    if (!o)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "version");
    char buf[STR_MAX];
    if (cJSON_IsString(v) && v->valuestring) {
        dg_py_rec_clean(buf, 64, v->valuestring);
        dg_pyjb_put_str(b, o, "version", buf);
    } else {
        dg_pyjb_put_str(b, o, "version", NULL);
    }
    dg_pyjb_put_bool(b, o, "cuda_available",
                     json_tristate(cJSON_GetObjectItemCaseSensitive(t, "cuda_available")));
    v = cJSON_GetObjectItemCaseSensitive(t, "cuda_device_count");
    bool count_ok = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e6;
    dg_pyjb_put_num(b, o, "cuda_device_count", count_ok ? (double)(long)v->valuedouble : 0,
                    count_ok);
    dg_pyjb_put_bool(b, o, "mps_built",
                     json_tristate(cJSON_GetObjectItemCaseSensitive(t, "mps_built")));
    dg_pyjb_put_bool(b, o, "mps_available",
                     json_tristate(cJSON_GetObjectItemCaseSensitive(t, "mps_available")));
    v = cJSON_GetObjectItemCaseSensitive(t, "error");
    if (cJSON_IsString(v) && v->valuestring) {
        dg_py_rec_clean(buf, sizeof buf, v->valuestring);
        dg_pyjb_put_str(b, o, "error", buf);
    } else {
        dg_pyjb_put_str(b, o, "error", NULL);
    }
    return o;
}

/* ---- the answer, read ------------------------------------------------------------- */

static void set_err(char *error, size_t n, bool *has, const char *fmt, ...) DG_PRINTF(4, 5);

static void set_err(char *error, size_t n, bool *has, const char *fmt, ...)
{
    char raw[STR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    dg_py_rec_clean(error, n, raw);
    *has = true;
}

/* The "run" member: how the interpreter ended, judged with its answer. */
static cJSON *run_object(dg_pyjb *b, const dg_py_run *r, const answer *a)
{
    const char *status = r->status ? r->status : "failed";
    char error[STR_MAX] = "";
    bool has_error = r->error != NULL;
    if (r->error)
        dg_py_rec_clean(error, sizeof error, r->error);
    if (strcmp(status, "ok") == 0) {
        if (r->out_truncated) {
            status = "failed";
            set_err(error, sizeof error, &has_error, "answer longer than %zu bytes", r->out_cap);
        } else if (a->n == 0) {
            /* the answer's first bytes, trimmed, as the reason */
            char head[81], raw[324] = "";
            size_t skip = 0, len = r->out ? r->out_len : 0;
            while (skip < len && (r->out[skip] == ' ' || r->out[skip] == '\n' ||
                                  r->out[skip] == '\t' || r->out[skip] == '\r'))
                skip++;
            snprintf(raw, sizeof raw, "%.*s", (int)(len - skip < 323 ? len - skip : 323),
                     r->out ? r->out + skip : "");
            dg_py_rec_clean(head, sizeof head, dg_trim(raw));
            status = "failed";
            set_err(error, sizeof error, &has_error, "answer is not JSON: \"%s\"", head);
        }
    } else if (strcmp(status, "failed") == 0 && r->has_exit && !has_error) {
        char line[STR_MAX];
        stderr_reason(r->err, r->err ? r->err_len : 0, line, sizeof line);
        set_err(error, sizeof error, &has_error, "exit status %d%s%s", r->exit_code,
                *line ? ": " : "", line);
    }
    cJSON *run = dg_pyjb_chk(b, cJSON_CreateObject());
    dg_pyjb_put_str(b, run, "status", status);
    dg_pyjb_put_num(b, run, "exit_code", r->exit_code, r->has_exit);
    dg_pyjb_put_num(b, run, "signal", r->sig, r->has_sig);
    dg_pyjb_put(b, run, "seconds", dg_json_metric(r->seconds, r->has_seconds, "s"));
    dg_pyjb_put_str(b, run, "error", has_error ? error : NULL);
    return run;
}

/* The "torch" member: its answer, or why none came (the basics did). */
static cJSON *torch_member(dg_pyjb *b, const answer *a, const char *status)
{
    const cJSON *t = answer_get(a, "torch");
    if (cJSON_IsObject(t))
        return torch_object(b, t);
    if (t || a->n == 0 || strcmp(status, "ok") == 0)
        return cJSON_CreateNull();
    /* The basics arrived but the torch line never did: the interpreter hung
     * or died while importing or asking torch. */
    char why[STR_MAX];
    snprintf(why, sizeof why, "no answer: interpreter %s while probing torch", status);
    cJSON *tj = dg_pyjb_chk(b, cJSON_CreateObject());
    if (tj && !cJSON_AddStringToObject(tj, "error", why))
        b->oom = true;
    cJSON *o = tj ? torch_object(b, tj) : NULL;
    cJSON_Delete(tj);
    return o;
}

/* The site-packages directories named: absolute, at most SITE_MAX, each once;
 * cleaned into sites, as given into dirs (what is scanned). */
static void site_dirs(dg_pyjb *b, const answer *a, cJSON *sites, cJSON *dirs)
{
    const cJSON *sp = answer_get(a, "site_packages"), *it;
    const cJSON *arr = cJSON_IsArray(sp) ? sp : NULL;
    int nsites = 0;
    cJSON_ArrayForEach(it, arr)
    {
        if (nsites >= SITE_MAX || b->oom)
            break;
        if (!cJSON_IsString(it) || !it->valuestring || it->valuestring[0] != '/')
            continue;
        size_t len = strlen(it->valuestring);
        if (len >= PATH_MAX)
            continue;
        char dir[PATH_MAX], clean[PATH_MAX];
        memcpy(dir, it->valuestring, len + 1);
        while (len > 1 && dir[len - 1] == '/')
            dir[--len] = '\0';
        dg_py_rec_clean(clean, sizeof clean, dir);
        /* A directory named twice would count its modules twice. */
        bool dup = false;
        const cJSON *prev;
        cJSON_ArrayForEach(prev, sites) dup = dup || strcmp(prev->valuestring, clean) == 0;
        if (dup)
            continue;
        dg_pyjb_push(b, sites, cJSON_CreateString(clean));
        dg_pyjb_push(b, dirs, cJSON_CreateString(dir));
        nsites++;
    }
}

cJSON *dg_env_python_answer(const dg_py_run *r, cJSON **dirs)
{
    *dirs = NULL;
    dg_pyjb b = {false};
    answer a;
    memset(&a, 0, sizeof a);
    if (r->out)
        parse_answer(&a, r->out, r->out_len);
    cJSON *o = dg_pyjb_chk(&b, cJSON_CreateObject());
    cJSON *run = run_object(&b, r, &a);
    const char *status = dg_jstr(run, "status");
    dg_pyjb_put(&b, o, "run", run);
    static const char *const keys[] = {"version", "platform", "machine", "executable"};
    static const size_t caps[] = {64, 64, 64, PATH_MAX};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char buf[PATH_MAX];
        bool has = answer_str(&a, keys[i], buf, caps[i]);
        dg_pyjb_put_str(&b, o, keys[i], has ? buf : NULL);
    }
    dg_pyjb_put(&b, o, "torch", torch_member(&b, &a, status ? status : "failed"));
    cJSON *sites = dg_pyjb_chk(&b, cJSON_CreateArray());
    *dirs = dg_pyjb_chk(&b, cJSON_CreateArray());
    site_dirs(&b, &a, sites, *dirs);
    dg_pyjb_put(&b, o, "site_packages", sites);
    for (int i = 0; i < a.n; i++)
        cJSON_Delete(a.objs[i]);
    if (b.oom) {
        cJSON_Delete(o);
        cJSON_Delete(*dirs);
        *dirs = NULL;
        return NULL;
    }
    return o;
}
