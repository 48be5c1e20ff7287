/* What the pool reads from Slurm's view and the task folders, pure
 * (pool_int.h; tests/fuzz/fuzz_pool.c): the tasks a job has, one task's
 * merged state, a task's record checked before it is taken, a collect row's
 * columns from it, and which bucket fields differ. Every file of a task
 * folder is another user's text: types checked, numbers range-checked,
 * strings cleaned on the way into a record. */
#include "ledger/ledger_int.h"
#include "pool/pool_int.h"

#include <stdio.h>
#include <string.h>

const char *dg_pool_jstr(const cJSON *o, const char *k, const char *fallback)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
    return s ? s : fallback;
}

const cJSON *dg_pool_slurm_task(const cJSON *arr, int t)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const cJSON *n = cJSON_GetObjectItem(e, "task");
        if (cJSON_IsNumber(n) && n->valuedouble == (double)t)
            return e;
    }
    return NULL;
}

static void add_num_or_null(cJSON *o, const char *k, const cJSON *v)
{
    if (cJSON_IsNumber(v))
        cJSON_AddNumberToObject(o, k, v->valuedouble);
    else
        cJSON_AddNullToObject(o, k);
}

/* The folder's word for an ended task from exit.json; NULL when it has none. */
static const char *folder_state(const cJSON *ej)
{
    if (!ej)
        return NULL;
    const cJSON *es = cJSON_GetObjectItem(ej, "exit_status");
    if (cJSON_IsTrue(cJSON_GetObjectItem(ej, "cancelled")))
        return "cancelled";
    return cJSON_IsNumber(es) && es->valuedouble == 0 ? "completed" : "failed";
}

cJSON *dg_pool_task_view(int t, const cJSON *sl, const cJSON *tj, const cJSON *ej, bool slurm_known)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "task", t);
    const char *fstate = folder_state(ej);
    const char *state, *detail = NULL, *sstate = sl ? dg_pool_jstr(sl, "slurm_state", NULL) : NULL;
    char dbuf[256] = "";
    if (sl) {
        state = dg_pool_jstr(sl, "state", "unknown");
        if (fstate && (strcmp(state, "running") == 0 || strcmp(state, "pending") == 0))
            detail = "ended; Slurm is finishing it";
        if (strcmp(state, "pending") == 0 && dg_pool_jstr(sl, "reason", NULL)) {
            snprintf(dbuf, sizeof dbuf, "waits: %s", dg_pool_jstr(sl, "reason", ""));
            detail = dbuf;
        }
    } else if (fstate) {
        state = fstate;
        detail = "from its folder (Slurm no longer lists it)";
    } else if (tj) {
        state = slurm_known ? "failed" : "unknown";
        detail = "it started, then vanished without an exit record";
    } else if (slurm_known) {
        state = "cancelled";
        detail = "before it started (Slurm keeps no record of a pending task it cancelled)";
    } else {
        state = "unknown";
        detail = "Slurm no longer knows the job and the task left no folder";
    }
    cJSON_AddStringToObject(o, "state", state);
    dg_json_add_str(o, "slurm_state", sstate);
    dg_json_add_str(o, "detail", detail);
    /* exit: Slurm's once it ended, else the folder's */
    const cJSON *sx = sl ? cJSON_GetObjectItem(sl, "exit_code") : NULL;
    const cJSON *ss = sl ? cJSON_GetObjectItem(sl, "signal") : NULL;
    if (cJSON_IsNumber(sx)) {
        add_num_or_null(o, "exit_status", sx);
        add_num_or_null(o, "signal", ss);
    } else {
        add_num_or_null(o, "exit_status", ej ? cJSON_GetObjectItem(ej, "exit_status") : NULL);
        add_num_or_null(o, "signal", ej ? cJSON_GetObjectItem(ej, "signal") : NULL);
    }
    const char *node = sl ? dg_pool_jstr(sl, "node", NULL) : NULL;
    if (!node && tj)
        node = dg_pool_jstr(tj, "node", NULL);
    dg_json_add_str(o, "node", node);
    dg_json_add_str(o, "host", tj ? dg_pool_jstr(tj, "host", NULL) : NULL);
    dg_json_add_str(o, "slurm_job_id", sl ? dg_pool_jstr(sl, "job_id", NULL) : NULL);
    return o;
}

int dg_pool_task_ids(const cJSON *manifest, const cJSON *sl, int *ids, int max)
{
    int n = 0;
    const cJSON *e;
    /* the manifest's list, else what Slurm shows; a task is a whole number in int's range */
    const cJSON *from = manifest ? cJSON_GetObjectItem(manifest, "tasks") : sl;
    if (!cJSON_IsArray(from))
        return 0;
    cJSON_ArrayForEach(e, from)
    {
        int t = dg_jint(manifest ? e : cJSON_GetObjectItem(e, "task"), NULL, -1);
        if (t >= 0 && n < max)
            ids[n++] = t;
    }
    return n;
}

bool dg_pool_run_id_ok(const char *s)
{
    static const char form[] = "dddddddd-dddddd-xxxxxxxxxxxx";
    if (!s || strlen(s) != sizeof form - 1)
        return false;
    for (size_t i = 0; form[i]; i++) {
        char c = s[i];
        bool ok = form[i] == '-'   ? c == '-'
                  : form[i] == 'd' ? (c >= '0' && c <= '9')
                                   : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
        if (!ok)
            return false;
    }
    return true;
}

cJSON *dg_pool_record_check(const char *text, size_t n, const char *verb, char *why, size_t len)
{
    why[0] = '\0';
    cJSON *rec = text ? cJSON_ParseWithLength(text, n) : NULL;
    const cJSON *v = cJSON_GetObjectItem(rec, "v"), *id = cJSON_GetObjectItem(rec, "run_id");
    const char *kind = dg_pool_jstr(rec, "kind", NULL);
    if (!cJSON_IsObject(rec))
        snprintf(why, len, "record.json is not a JSON object: not taken");
    else if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 2)
        snprintf(why, len, "record.json is not a devgate record (no version 1 or 2): not taken");
    else if (!kind || !verb || strcmp(kind, verb) != 0) {
        char k[64], w[64];
        dg_copy_clean(k, sizeof k, kind ? kind : "none");
        dg_copy_clean(w, sizeof w, verb ? verb : "?");
        snprintf(why, len, "record.json is a '%s' record, not one of '%s': not taken", k, w);
    } else if (id && !cJSON_IsNull(id) && !dg_pool_run_id_ok(cJSON_GetStringValue(id)))
        snprintf(why, len, "record.json has a run id not of the ledger's form: not taken");
    if (why[0]) {
        cJSON_Delete(rec);
        return NULL;
    }
    return rec;
}

static const cJSON *obj(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsObject(v) ? v : NULL;
}

/* An slo record's row: the ledger's own summary of it (the target's backend
 * or API, the signed level's goodput, "signed at N streams"). */
static void slo_row(cJSON *row, const cJSON *rec)
{
    cJSON *e = cJSON_CreateObject();
    dg_lg_add_summary(e, rec, "slo");
    static const char *const keys[] = {"backend", "batch", "throughput", "verdict"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        cJSON *v = cJSON_DetachItemFromObject(e, keys[i]);
        cJSON_AddItemToObject(row, keys[i], v ? v : cJSON_CreateNull());
    }
    cJSON_Delete(e);
    cJSON_AddNullToObject(row, "route");
    dg_json_add_str(row, "record_host", dg_pool_jstr(rec, "host", NULL));
    cJSON_AddNullToObject(row, "bucket_id");
}

void dg_pool_row_from_record(cJSON *row, const cJSON *rec)
{
    dg_json_add_str(row, "record_kind", dg_pool_jstr(rec, "kind", NULL));
    if (strcmp(dg_pool_jstr(rec, "kind", ""), "slo") == 0) {
        slo_row(row, rec);
        return;
    }
    const cJSON *fg = obj(rec, "final_gate"), *dec = obj(rec, "decision"), *spec = obj(rec, "spec");
    const char *backend = dec ? dg_pool_jstr(dec, "backend", NULL) : NULL;
    if (!backend && spec)
        backend = dg_pool_jstr(spec, "backend", NULL);
    dg_json_add_str(row, "backend", backend);
    const cJSON *b = fg ? cJSON_GetObjectItem(fg, "batch") : NULL;
    if (!cJSON_IsNumber(b) && spec)
        b = cJSON_GetObjectItem(spec, "batch");
    add_num_or_null(row, "batch", b);
    const cJSON *tp = fg ? obj(fg, "throughput") : NULL;
    if (!tp)
        tp = obj(obj(rec, "throughput"), "samples_per_s");
    if (tp) {
        cJSON_AddItemToObject(row, "throughput", cJSON_Duplicate(tp, true));
    } else {
        cJSON *m = cJSON_AddObjectToObject(row, "throughput");
        cJSON_AddNullToObject(m, "value");
        cJSON_AddStringToObject(m, "unit", "samples/s");
        cJSON_AddBoolToObject(m, "valid", false);
    }
    const char *verdict = NULL;
    if (fg)
        verdict = cJSON_IsTrue(cJSON_GetObjectItem(fg, "accepted"))    ? "accepted"
                  : cJSON_IsTrue(cJSON_GetObjectItem(fg, "screening")) ? "screening"
                                                                       : "not accepted";
    dg_json_add_str(row, "verdict", verdict);
    const char *route = fg ? dg_pool_jstr(fg, "route", NULL) : NULL;
    if (!route && dec)
        route = dg_pool_jstr(dec, "route", NULL);
    dg_json_add_str(row, "route", route);
    dg_json_add_str(row, "record_host", dg_pool_jstr(rec, "host", NULL));
    const cJSON *bk = obj(rec, "bucket");
    dg_json_add_str(row, "bucket_id", bk ? dg_pool_jstr(bk, "id", NULL) : NULL);
}

void dg_pool_bucket_differs(const cJSON *a, const cJSON *b, char *buf, size_t len)
{
    buf[0] = '\0';
    const char *ia = dg_pool_jstr(a, "id", NULL), *ib = dg_pool_jstr(b, "id", NULL);
    if (ia && ib && strcmp(ia, ib) == 0)
        return;
    size_t off = 0;
    const cJSON *sides[2] = {a, b}, *e;
    for (int s = 0; s < 2; s++) {
        cJSON_ArrayForEach(e, sides[s])
        {
            if (!e->string || strcmp(e->string, "id") == 0)
                continue;
            if (s == 1 && cJSON_GetObjectItem(a, e->string))
                continue; /* compared from a's side */
            if (cJSON_Compare(cJSON_GetObjectItem(a, e->string), cJSON_GetObjectItem(b, e->string),
                              true))
                continue;
            char k[64];
            dg_copy_clean(k, sizeof k, e->string);
            off +=
                (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? ", " : "", k);
        }
    }
    if (!off && ia && ib)
        snprintf(buf, len, "id");
}
