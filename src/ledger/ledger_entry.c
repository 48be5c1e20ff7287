/* What both stores and the store-independent part share about one entry:
 * run ids, an entry from a row's columns, and the summary each listed run
 * gets from its record (docs/schema/ledger.md, "The summary"). It calls
 * neither store, so ledger.c and ledger_pg.c both depend on it and not on
 * each other's internals. */
#include "ledger/ledger_int.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The run id: "YYYYMMDD-HHMMSS-" and 12 lowercase hex digits (48 random
 * bits), so ids made on different hosts do not meet (docs/schema/ledger.md). */
#define DG_LEDGER_ID_HEX 12

void dg_lg_draw_id(lg_fields *f)
{
    unsigned char r[DG_LEDGER_ID_HEX / 2];
    dg_random_bytes(r, sizeof r);
    char *p = f->id + 16; /* after "YYYYMMDD-HHMMSS-" */
    for (size_t k = 0; k < sizeof r; k++)
        p += snprintf(p, 3, "%02x", r[k]);
}

static long long num_of(const char *s)
{
    return s ? strtoll(s, NULL, 10) : 0;
}

cJSON *dg_lg_entry(const char *const v[LG_NCOLS])
{
    cJSON *e = cJSON_CreateObject();
    if (!e)
        return NULL;
    bool ok =
        dg_json_add_str(e, "id", v[0]) && cJSON_AddNumberToObject(e, "seq", (double)num_of(v[1])) &&
        dg_json_add_str(e, "verb", v[2]) && dg_json_add_str(e, "started_at", v[3]) &&
        cJSON_AddNumberToObject(e, "exit_status", (double)num_of(v[4])) &&
        dg_json_add_str(e, "state", v[5]) && dg_json_add_str(e, "host", v[6]) &&
        dg_json_add_str(e, "git_commit", v[7]) && dg_json_add_str(e, "devgate_version", v[8]) &&
        dg_json_add_str(e, "node", v[9]) && dg_json_add_str(e, "pending", v[10]);
    if (!ok) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

/* ---- the summary of a run (list, export) ------------------------------------ */

/* A string the record holds at path, or NULL. */
static const char *rec_str(const cJSON *rec, const char *path)
{
    return dg_jstr(rec, path);
}

/* The first finite number among the paths (NULL-terminated), or NAN. */
static double first_num(const cJSON *rec, const char *const *paths)
{
    for (; *paths; paths++) {
        double v = dg_jnum(rec, *paths);
        if (isfinite(v))
            return v;
    }
    return NAN;
}

/* The first ok run of a compare record, or NULL. */
static const cJSON *first_ok_run(const cJSON *compare)
{
    const cJSON *run;
    cJSON_ArrayForEach(run, dg_jpath(compare, "runs"))
    {
        const char *status = dg_jstr(run, "status");
        if (cJSON_IsObject(run) && (!status || strcmp(status, "ok") == 0) &&
            cJSON_IsObject(dg_jpath(run, "device")))
            return run;
    }
    return NULL;
}

typedef struct lg_summary {
    const char *backend, *model, *verdict, *spec_id, *bucket_id, *label;
    char *command; /* the user's command (run, accept -- CMD): its words joined (dg_free) */
    char backend_buf[64], verdict_buf[96];
    double batch, sps;    /* samples, samples/s; NAN: not reported */
    double jps;           /* J/sample beside sps; NAN: not reported */
    const char *sps_unit; /* the throughput's unit: NULL "samples/s" */
} lg_summary;

/* The words of a command array joined by spaces (dg_malloc'd), or NULL. */
static char *command_of(const cJSON *cmd)
{
    if (!cJSON_IsArray(cmd) || !cmd->child)
        return NULL;
    dg_capbuf b = {.cap = 4096};
    const cJSON *w;
    cJSON_ArrayForEach(w, cmd)
    {
        if (!cJSON_IsString(w))
            continue;
        if (b.len)
            dg_capbuf_add(&b, " ", 1);
        dg_capbuf_add(&b, w->valuestring, strlen(w->valuestring));
    }
    return b.data;
}

/* What the list and the export show of one run, read from its record by its
 * kind (docs/schema/ledger.md, "The summary"). Nothing is guessed: a value the
 * record does not hold stays not reported. */
static void summarise(const cJSON *rec, const char *verb, lg_summary *s)
{
    memset(s, 0, sizeof *s);
    s->batch = s->sps = s->jps = NAN;
    const char *kind = rec_str(rec, "kind");
    if (!kind)
        kind = verb ? verb : "";
    s->spec_id = rec_str(rec, "spec_id");
    s->label = rec_str(rec, "label");
    s->command = command_of(dg_jpath(rec, "spec.cmd"));
    s->bucket_id = rec_str(rec, "bucket.id");
    if (strcmp(kind, "accept") == 0 || strcmp(kind, "run") == 0) {
        /* The throughput the final gate read, on the route the decision chose. */
        const char *route = rec_str(rec, "decision.route");
        const char *dev = rec_str(rec, "decision.backend");
        s->backend = route && strcmp(route, "cpu") == 0 ? "cpu"
                     : dev                              ? dev
                                                        : rec_str(rec, "spec.backend");
        s->model = rec_str(rec, "spec.model");
        /* A run of the user's program has no final gate: its own steady
         * rate (after the warm-up steps) and its state stand in. */
        static const char *const sps[] = {"final_gate.throughput", "throughput.samples_per_s",
                                          NULL};
        s->sps =
            strcmp(kind, "run") == 0 ? first_num(rec, sps) : dg_jnum(rec, "final_gate.throughput");
        /* J/sample beside it: the final gate's, else (a run) the program's own. */
        static const char *const jps[] = {"final_gate.energy_per_sample",
                                          "throughput.energy_per_sample", NULL};
        s->jps = strcmp(kind, "run") == 0 ? first_num(rec, jps)
                                          : dg_jnum(rec, "final_gate.energy_per_sample");
        static const char *const batch[] = {"final_gate.batch", "spec.batch", NULL};
        s->batch = first_num(rec, batch);
        int screening = dg_jbool(rec, "final_gate.screening"),
            accepted = dg_jbool(rec, "final_gate.accepted");
        /* A run's own verdict is how it ended, never accept's promise. */
        s->verdict = strcmp(kind, "run") == 0 ? rec_str(rec, "state")
                     : screening == 1         ? "screening"
                     : accepted == 1          ? "accepted"
                     : accepted == 0          ? "not accepted"
                                              : NULL;
        if (!s->spec_id)
            s->spec_id = rec_str(rec, "soak.spec_id");
        if (!s->bucket_id)
            s->bucket_id = rec_str(rec, "soak.bucket.id");
    } else if (strcmp(kind, "train") == 0 || strcmp(kind, "soak") == 0 ||
               strcmp(kind, "profile") == 0) {
        s->backend = rec_str(rec, "spec.backend");
        s->model = rec_str(rec, "spec.model");
        s->batch = dg_jnum(rec, "spec.batch");
        s->sps = dg_jnum(rec, "throughput.samples_per_s");
        s->jps = dg_jnum(rec, "throughput.energy_per_sample");
        s->verdict = rec_str(rec, "status");
    } else if (strcmp(kind, "sweep") == 0) {
        s->backend = rec_str(rec, "spec.backend");
        s->model = rec_str(rec, "spec.model");
        s->batch = dg_jnum(rec, "safe_batch.batch");
        s->sps = dg_jnum(rec, "safe_batch.samples_per_s");
        const char *why = rec_str(rec, "stopped.reason");
        if (why) {
            snprintf(s->verdict_buf, sizeof s->verdict_buf, "stopped: %s", why);
            s->verdict = s->verdict_buf;
        }
    } else if (strcmp(kind, "compare") == 0) {
        s->backend = rec_str(rec, "spec.backend");
        s->model = rec_str(rec, "spec.model");
        const cJSON *run = first_ok_run(rec);
        s->batch = dg_jnum(run, "batch");
        s->sps = dg_jnum(run, "device.samples_per_s");
        double x = dg_jnum(run, "speedup"), lo = dg_jnum(run, "speedup_ci.lo"),
               hi = dg_jnum(run, "speedup_ci.hi");
        if (isfinite(x) && isfinite(lo) && isfinite(hi))
            snprintf(s->verdict_buf, sizeof s->verdict_buf, "%.2fx cpu (95%% %.2f-%.2f)", x, lo,
                     hi);
        else if (isfinite(x))
            snprintf(s->verdict_buf, sizeof s->verdict_buf, "%.2fx cpu", x);
        s->verdict = s->verdict_buf[0] ? s->verdict_buf : rec_str(rec, "status");
    } else if (strcmp(kind, "gate") == 0) {
        const cJSON *b;
        size_t off = 0;
        cJSON_ArrayForEach(b, dg_jpath(rec, "backends"))
        {
            const char *name = dg_jstr(b, "name");
            if (name && dg_jbool(b, "available") == 1 && off < sizeof s->backend_buf)
                off += (size_t)snprintf(s->backend_buf + off, sizeof s->backend_buf - off, "%s%s",
                                        off ? "," : "", name);
        }
        s->backend = s->backend_buf[0] ? s->backend_buf : NULL;
        s->verdict = rec_str(rec, "verdict");
    } else if (strcmp(kind, "slo") == 0) {
        /* The signed level's goodput; the verdict names its concurrency. */
        /* The fixture's backend when it was the target (--target fixture), else the API. */
        s->backend = rec_str(rec, "spec.fixture.backend");
        if (!s->backend)
            s->backend = rec_str(rec, "spec.api");
        s->model = rec_str(rec, "spec.model");
        s->sps_unit = "requests/s";
        double conc = dg_jnum(rec, "final_gate.concurrency");
        const cJSON *lvl;
        cJSON_ArrayForEach(lvl, dg_jpath(rec, "levels"))
        {
            double c = dg_jnum(lvl, "concurrency");
            if (dg_jbool(rec, "final_gate.signed") == 1 && (c == conc || (isnan(c) && isnan(conc))))
                s->sps = dg_jnum(lvl, "throughput.goodput");
        }
        const char *v = rec_str(rec, "final_gate.verdict");
        if (v && strcmp(v, "signed") == 0 && isfinite(conc))
            snprintf(s->verdict_buf, sizeof s->verdict_buf, "signed at %.0f stream%s", conc,
                     conc == 1 ? "" : "s");
        s->verdict = s->verdict_buf[0] ? s->verdict_buf : v;
    } else if (strcmp(kind, "compare-runs") == 0) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(rec, "judgement");
        s->verdict = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "verdict"));
    }
}

/* Adds the summary members to an entry; false when out of memory. */
static bool put_summary(cJSON *e, const lg_summary *s)
{
    bool ok = dg_json_add_str(e, "backend", s->backend) && dg_json_add_str(e, "model", s->model);
    ok = ok && (isfinite(s->batch) ? cJSON_AddNumberToObject(e, "batch", s->batch)
                                   : cJSON_AddNullToObject(e, "batch"));
    cJSON *m = ok ? dg_json_metric(isfinite(s->sps) ? s->sps : 0, isfinite(s->sps),
                                   s->sps_unit ? s->sps_unit : "samples/s")
                  : NULL;
    ok = m && cJSON_AddItemToObject(e, "throughput", m);
    if (!ok && m && !cJSON_GetObjectItemCaseSensitive(e, "throughput"))
        cJSON_Delete(m);
    cJSON *j =
        ok ? dg_json_metric(isfinite(s->jps) ? s->jps : 0, isfinite(s->jps), "J/sample") : NULL;
    ok = j && cJSON_AddItemToObject(e, "energy_per_sample", j);
    if (!ok && j && !cJSON_GetObjectItemCaseSensitive(e, "energy_per_sample"))
        cJSON_Delete(j);
    return ok && dg_json_add_str(e, "verdict", s->verdict) &&
           dg_json_add_str(e, "spec_id", s->spec_id) &&
           dg_json_add_str(e, "bucket_id", s->bucket_id) && dg_json_add_str(e, "label", s->label) &&
           dg_json_add_str(e, "command", s->command);
}

bool dg_lg_add_summary(cJSON *e, const cJSON *rec, const char *verb)
{
    lg_summary s;
    summarise(rec, verb, &s);
    bool ok = put_summary(e, &s);
    dg_free(s.command);
    return ok;
}

const char *dg_lg_str(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsString(it) && it->valuestring ? it->valuestring : NULL;
}

int dg_lg_int(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsNumber(it) ? (int)it->valuedouble : 0;
}
