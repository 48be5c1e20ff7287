/* The probe events protocol (docs/events.md): a line splitter with a length
 * cap, a pure line parser, and the collector that counts every line, applies
 * the rate limit and the caps, and keeps what the run record needs. Nothing a
 * program writes is trusted: every field is type-checked and every string
 * copied with a cap. */
#include "core/utf8.h"
#include "supervise/supervise.h"

#include <math.h>
#include <string.h>

static const char *const kind_names[DG_EV_NKINDS] = {
    "unknown",  "run_start",   "gate", "step",    "epoch_end", "phase",
    "fallback", "sweep_trial", "oom",  "run_end", "note",
};

const char *dg_ev_kind_name(dg_ev_kind k)
{
    if (k == DG_EV_MALFORMED)
        return "malformed";
    return k >= 0 && k < DG_EV_NKINDS ? kind_names[k] : "unknown";
}

dg_ev_kind dg_event_parse(const char *line, size_t len, cJSON **obj)
{
    *obj = NULL;
    if (!line || len == 0 || memchr(line, '\0', len) || !dg_utf8_valid(line, len))
        return DG_EV_MALFORMED;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(line, len, &end, false);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return DG_EV_MALFORMED;
    }
    /* Only whitespace may follow the object. */
    for (const char *p = end ? end : line + len; p < line + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\r') {
            cJSON_Delete(o);
            return DG_EV_MALFORMED;
        }
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "v");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "ev");
    if (!cJSON_IsNumber(v) || v->valuedouble != 1.0 || !cJSON_IsString(ev)) {
        cJSON_Delete(o);
        return DG_EV_MALFORMED;
    }
    *obj = o;
    for (int k = 1; k < DG_EV_NKINDS; k++)
        if (strcmp(ev->valuestring, kind_names[k]) == 0)
            return (dg_ev_kind)k;
    return DG_EV_UNKNOWN;
}

/* ---- the line splitter ---------------------------------------------------------- */

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

static void emit(dg_evreader *r, const char *s, size_t n, dg_evline_fn fn, void *user)
{
    if (!blank(s, n))
        fn(user, s, n);
}

void dg_evreader_feed(dg_evreader *r, const char *data, size_t n, dg_evline_fn fn, void *user)
{
    size_t maxl = r->max_line ? r->max_line : (size_t)64 << 10;
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (r->discarding) {
            if (nl)
                r->discarding = false;
        } else if (r->len + take > maxl) {
            r->overlong++;
            r->len = 0;
            r->discarding = nl == NULL;
        } else if (nl && r->len == 0) {
            emit(r, data, take, fn, user); /* a whole line in the input: no copy */
        } else {
            if (r->len + take > r->cap) {
                size_t cap = r->cap ? r->cap : 4096;
                while (cap < r->len + take)
                    cap *= 2;
                if (cap > maxl)
                    cap = maxl;
                char *nb = dg_realloc(r->buf, cap);
                if (!nb) {
                    r->nomem = true;
                    r->len = 0;
                    r->discarding = nl == NULL;
                    goto next;
                }
                r->buf = nb;
                r->cap = cap;
            }
            memcpy(r->buf + r->len, data, take);
            r->len += take;
            if (nl) {
                emit(r, r->buf, r->len, fn, user);
                r->len = 0;
            }
        }
    next:
        if (!nl)
            break;
        data = nl + 1;
        n -= take + 1;
    }
}

void dg_evreader_finish(dg_evreader *r, dg_evline_fn fn, void *user)
{
    if (!r->discarding && r->len > 0)
        emit(r, r->buf, r->len, fn, user);
    r->len = 0;
    r->discarding = false;
}

void dg_evreader_free(dg_evreader *r)
{
    dg_free(r->buf);
    r->buf = NULL;
    r->len = r->cap = 0;
}

/* ---- the collector --------------------------------------------------------------- */

#define DEFAULT_RATE 1000.0
#define DEFAULT_MAX_STEPS 100000
#define DEFAULT_MAX_EPOCHS 10000
#define DEFAULT_MAX_OTHER 1000
#define MAX_FALLBACKS 256
#define STR_CAP 512

bool dg_evcollect_init(dg_evcollect *c, const dg_ev_limits *lim)
{
    memset(c, 0, sizeof *c);
    if (lim)
        c->lim = *lim;
    if (!(c->lim.rate > 0))
        c->lim.rate = DEFAULT_RATE;
    if (!c->lim.max_steps)
        c->lim.max_steps = DEFAULT_MAX_STEPS;
    if (!c->lim.max_epochs)
        c->lim.max_epochs = DEFAULT_MAX_EPOCHS;
    if (!c->lim.max_other)
        c->lim.max_other = DEFAULT_MAX_OTHER;
    c->window_start = -INFINITY;
    c->gates = cJSON_CreateArray();
    c->sweep_trials = cJSON_CreateArray();
    c->ooms = cJSON_CreateArray();
    c->notes = cJSON_CreateArray();
    if (!c->gates || !c->sweep_trials || !c->ooms || !c->notes) {
        dg_evcollect_free(c);
        return false;
    }
    return true;
}

void dg_evcollect_free(dg_evcollect *c)
{
    cJSON_Delete(c->run_start);
    cJSON_Delete(c->run_end);
    cJSON_Delete(c->gates);
    cJSON_Delete(c->sweep_trials);
    cJSON_Delete(c->ooms);
    cJSON_Delete(c->notes);
    dg_free(c->steps);
    dg_free(c->epochs);
    dg_free(c->fallbacks);
    memset(c, 0, sizeof *c);
}

/* A finite number member, NAN otherwise. */
static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : NAN;
}

/* 1 / 0 for a bool member, -1 otherwise. */
static signed char tri(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? (signed char)cJSON_IsTrue(v) : (signed char)-1;
}

/* epoch_end.gc: "full" 1, "young" 0, anything else -1. */
static signed char gc_kind(const cJSON *o)
{
    const char *g = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "gc"));
    return !g ? -1 : strcmp(g, "full") == 0 ? 1 : strcmp(g, "young") == 0 ? 0 : -1;
}

/* Copies at most n - 1 bytes of src, cut at a UTF-8 boundary ("" for NULL). */
static void copy_utf8(char *dst, size_t n, const char *src)
{
    size_t len = src ? strlen(src) : 0;
    if (len >= n) {
        len = n - 1;
        while (len > 0 && ((unsigned char)src[len] & 0xC0) == 0x80)
            len--;
    }
    if (len)
        memcpy(dst, src, len);
    dst[len] = '\0';
}

/* Copies key from src to dst when it has the wanted type: 'n' finite number,
 * 'b' bool, 's' string (capped), 'S' string or null; a missing or mistyped
 * member becomes null. */
static void pick(cJSON *dst, const cJSON *src, const char *key, char type)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, key);
    if (type == 'n' && cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
        cJSON_AddNumberToObject(dst, key, v->valuedouble);
    } else if (type == 'b' && cJSON_IsBool(v)) {
        cJSON_AddBoolToObject(dst, key, cJSON_IsTrue(v));
    } else if ((type == 's' || type == 'S') && cJSON_IsString(v)) {
        char buf[STR_CAP];
        copy_utf8(buf, sizeof buf, v->valuestring);
        cJSON_AddStringToObject(dst, key, buf);
    } else {
        cJSON_AddNullToObject(dst, key);
    }
}

/* A capped copy of the event's fields that the record uses. */
static cJSON *slim(const cJSON *ev, dg_ev_kind k, double now)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    switch (k) {
    case DG_EV_GATE: {
        pick(o, ev, "device", 's');
        pick(o, ev, "built", 'b');
        pick(o, ev, "available", 'b');
        pick(o, ev, "reason", 'S');
        const cJSON *mm = cJSON_GetObjectItemCaseSensitive(ev, "matmul");
        if (cJSON_IsObject(mm)) {
            cJSON *m = cJSON_AddObjectToObject(o, "matmul");
            pick(m, mm, "ok", 'b');
            pick(m, mm, "n", 'n');
            pick(m, mm, "max_abs_err", 'n');
            pick(m, mm, "ms", 'n');
        } else {
            cJSON_AddNullToObject(o, "matmul");
        }
        break;
    }
    case DG_EV_SWEEP_TRIAL:
        pick(o, ev, "batch", 'n');
        pick(o, ev, "ended", 's');
        pick(o, ev, "samples_per_s", 'n');
        pick(o, ev, "step_ms", 'n');
        pick(o, ev, "peak_bytes", 'n');
        pick(o, ev, "reason", 'S');
        break;
    case DG_EV_OOM:
        pick(o, ev, "device", 's');
        pick(o, ev, "batch", 'n');
        pick(o, ev, "message", 's');
        break;
    default: break;
    }
    cJSON_AddNumberToObject(o, "t", now);
    return o;
}

/* The zero-code probe reads its epoch's losses once, at epoch end
 * (epoch_end.losses: [[step, loss]]), never at the step: each fills the loss
 * of the stored step of that (epoch, step) that reported none. The epoch's
 * steps are the latest stored ones (or just before a later epoch's), found
 * from the end. */
static void epoch_losses(dg_evcollect *c, const cJSON *ev)
{
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(ev, "losses");
    double epoch = num(ev, "epoch");
    if (!cJSON_IsArray(ls) || !isfinite(epoch))
        return;
    size_t hi = c->nsteps; /* past the epoch's last stored step (later epochs skipped) */
    while (hi > 0 && c->steps[hi - 1].epoch > epoch)
        hi--;
    size_t lo = hi; /* its first */
    while (lo > 0 && c->steps[lo - 1].epoch == epoch)
        lo--;
    size_t i = lo; /* both in step order: one forward walk */
    const cJSON *row;
    cJSON_ArrayForEach(row, ls)
    {
        const cJSON *a = cJSON_GetArrayItem(row, 0), *b = cJSON_GetArrayItem(row, 1);
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !isfinite(b->valuedouble))
            continue;
        while (i < hi && c->steps[i].step < a->valuedouble)
            i++;
        if (i < hi && c->steps[i].step == a->valuedouble && isnan(c->steps[i].loss))
            c->steps[i].loss = b->valuedouble;
    }
}

static void keep_fallback(dg_evcollect *c, const cJSON *ev)
{
    c->fallback_events++;
    char op[128], dev[64];
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(ev, "op"),
                *d = cJSON_GetObjectItemCaseSensitive(ev, "device");
    copy_utf8(op, sizeof op, cJSON_IsString(o) ? o->valuestring : "?");
    copy_utf8(dev, sizeof dev, cJSON_IsString(d) ? d->valuestring : "?");
    for (size_t i = 0; i < c->nfallbacks; i++) {
        if (strcmp(c->fallbacks[i].op, op) == 0 && strcmp(c->fallbacks[i].device, dev) == 0) {
            c->fallbacks[i].count++;
            return;
        }
    }
    if (c->nfallbacks >= MAX_FALLBACKS || !dg_grow((void **)&c->fallbacks, &c->fallbacks_cap,
                                                   c->nfallbacks + 1, sizeof *c->fallbacks)) {
        c->dropped++;
        return;
    }
    dg_ev_fallback *f = &c->fallbacks[c->nfallbacks++];
    memcpy(f->op, op, sizeof op);
    memcpy(f->device, dev, sizeof dev);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(ev, "message");
    copy_utf8(f->message, sizeof f->message, cJSON_IsString(m) ? m->valuestring : NULL);
    f->count = 1;
}

#define MAX_NOTES 16
#define NOTE_LEN 512

/* A note's message, cleaned and cut, kept once (a repeat is not kept again). */
static void keep_note(dg_evcollect *c, const cJSON *ev)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(ev, "message");
    if (!cJSON_IsString(m))
        return;
    char text[NOTE_LEN];
    dg_text_clean(text, sizeof text, m->valuestring, strlen(m->valuestring), false);
    const cJSON *it;
    cJSON_ArrayForEach(it, c->notes)
    {
        if (strcmp(it->valuestring, text) == 0)
            return;
    }
    if (cJSON_GetArraySize(c->notes) >= MAX_NOTES) {
        c->dropped++;
        return;
    }
    cJSON *s = cJSON_CreateString(text);
    if (!s || !cJSON_AddItemToArray(c->notes, s)) {
        cJSON_Delete(s);
        c->nomem = true;
    }
}

void dg_evcollect_line(dg_evcollect *c, const char *line, size_t len, double now)
{
    c->lines++;
    cJSON *ev = NULL;
    dg_ev_kind k = dg_event_parse(line, len, &ev);
    if (k == DG_EV_MALFORMED) {
        c->malformed++;
        return;
    }
    c->parsed++;
    c->by_kind[k]++;
    if (k == DG_EV_UNKNOWN) {
        c->unknown++;
        cJSON_Delete(ev);
        return;
    }
    if (k == DG_EV_STEP || k == DG_EV_PHASE || k == DG_EV_FALLBACK) {
        if (now - c->window_start >= 1.0 || now < c->window_start) {
            c->window_start = now;
            c->window_n = 0;
        }
        if ((double)c->window_n >= c->lim.rate) {
            c->dropped++;
            cJSON_Delete(ev);
            return;
        }
        c->window_n++;
    }
    switch (k) {
    case DG_EV_RUN_START:
    case DG_EV_RUN_END: {
        cJSON **slot = k == DG_EV_RUN_START ? &c->run_start : &c->run_end;
        if (!*slot) {
            *slot = ev;
            cJSON_AddNumberToObject(ev, "t_recv", now);
            ev = NULL;
        } else {
            c->dropped++; /* only the first one counts */
        }
        break;
    }
    case DG_EV_STEP: {
        double ms = num(ev, "step_ms");
        if (c->nsteps >= c->lim.max_steps) {
            c->steps_summarised++;
            if (!isnan(ms))
                c->sum_step_ms_summarised += ms;
            break;
        }
        if (!dg_grow((void **)&c->steps, &c->steps_cap, c->nsteps + 1, sizeof *c->steps)) {
            c->nomem = true;
            c->dropped++;
            break;
        }
        c->steps[c->nsteps++] = (dg_ev_step){.epoch = num(ev, "epoch"),
                                             .step = num(ev, "step"),
                                             .step_ms = ms,
                                             .data_ms = num(ev, "data_ms"),
                                             .loss = num(ev, "loss"),
                                             .batch = num(ev, "batch"),
                                             .t = now,
                                             .syncs = num(ev, "syncs"),
                                             .syncs_library = num(ev, "syncs_library"),
                                             .device_syncs = num(ev, "device_syncs"),
                                             .allocated = num(ev, "allocated"),
                                             .footprint = num(ev, "footprint"),
                                             .synced = tri(ev, "synced")};
        break;
    }
    case DG_EV_EPOCH_END:
        if (c->nepochs >= c->lim.max_epochs) {
            c->dropped++;
            break;
        }
        if (!dg_grow((void **)&c->epochs, &c->epochs_cap, c->nepochs + 1, sizeof *c->epochs)) {
            c->nomem = true;
            c->dropped++;
            break;
        }
        c->epochs[c->nepochs++] = (dg_ev_epoch){num(ev, "epoch"),
                                                num(ev, "allocated"),
                                                num(ev, "reserved"),
                                                num(ev, "max_allocated"),
                                                num(ev, "driver"),
                                                num(ev, "footprint"),
                                                now,
                                                tri(ev, "cache_emptied"),
                                                tri(ev, "validation"),
                                                gc_kind(ev)};
        epoch_losses(c, ev);
        break;
    case DG_EV_FALLBACK: keep_fallback(c, ev); break;
    case DG_EV_GATE:
    case DG_EV_SWEEP_TRIAL:
    case DG_EV_OOM: {
        cJSON *arr = k == DG_EV_GATE ? c->gates : k == DG_EV_OOM ? c->ooms : c->sweep_trials;
        if ((size_t)cJSON_GetArraySize(arr) >= c->lim.max_other) {
            c->dropped++;
            break;
        }
        cJSON *s = slim(ev, k, now);
        if (!s || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            c->nomem = true;
            c->dropped++;
        }
        break;
    }
    case DG_EV_NOTE: keep_note(c, ev); break;
    default: break; /* phase: counted only */
    }
    cJSON_Delete(ev);
}
