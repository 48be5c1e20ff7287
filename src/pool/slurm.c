/* The pieces of `devgate pool` the library owns (docs/team.md): Slurm's array
 * specs, its job states in the pool's five words, `scontrol -o show job`
 * parsed into one entry per array task, and the job script, whose one command
 * line is built by dg_shell_quote (the shell interpolates nothing). */
#include "core/core.h"
#include "core/json.h"
#include "pool/pool_int.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One "N", "A-B" or "A-B:S" item of an array spec; false when it is not one. */
static bool range_item(const char *s, size_t len, long *a, long *b, long *step)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)buf[i]) && buf[i] != '-' && buf[i] != ':')
            return false;
    char *end;
    errno = 0;
    *a = strtol(buf, &end, 10);
    if (end == buf || errno || *a < 0 || *a > INT_MAX)
        return false;
    *b = *a;
    *step = 1;
    if (*end == '-') {
        const char *p = end + 1;
        *b = strtol(p, &end, 10);
        if (end == p || errno || *b < *a || *b > INT_MAX)
            return false;
        if (*end == ':') {
            p = end + 1;
            *step = strtol(p, &end, 10);
            if (end == p || errno || *step < 1)
                return false;
        }
    }
    return *end == '\0';
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

dg_status dg_slurm_array_ids(dg_ctx *ctx, const char *spec, int *ids, int max, int *n)
{
    *n = 0;
    char shown[128];
    dg_copy_clean(shown, sizeof shown, spec ? spec : "");
    if (!spec || !spec[0])
        return dg_fail(ctx, DG_ERR_USAGE, "an empty array spec");
    size_t len = strcspn(spec, "%"); /* "%N" limits how many run at once */
    if (spec[len] == '%') {
        const char *lim = spec + len + 1;
        if (!*lim || strspn(lim, "0123456789") != strlen(lim))
            return dg_fail(ctx, DG_ERR_USAGE,
                           "array spec '%s': '%%' must be followed by a number of tasks", shown);
    }
    int count = 0;
    for (size_t i = 0; i < len;) {
        size_t k = i;
        while (k < len && spec[k] != ',')
            k++;
        long a, b, step;
        if (!range_item(spec + i, k - i, &a, &b, &step))
            return dg_fail(ctx, DG_ERR_USAGE,
                           "array spec '%s' is not N, A-B or A-B:STEP items joined by commas "
                           "(e.g. 0-3 or 1,3,5-7)",
                           shown);
        for (long v = a; v <= b; v += step) {
            if (count >= max)
                return dg_fail(ctx, DG_ERR_USAGE, "array spec '%s' names more than %d tasks", shown,
                               max);
            ids[count++] = (int)v;
        }
        i = k < len ? k + 1 : k;
        if (k < len && i == len)
            return dg_fail(ctx, DG_ERR_USAGE, "array spec '%s' ends with a comma", shown);
    }
    qsort(ids, (size_t)count, sizeof *ids, cmp_int);
    int u = 0;
    for (int i = 0; i < count; i++)
        if (u == 0 || ids[u - 1] != ids[i])
            ids[u++] = ids[i];
    *n = u;
    return DG_OK;
}

const char *dg_slurm_state(const char *s)
{
    static const struct {
        const char *slurm, *word;
    } map[] = {
        {"PENDING", "pending"},      {"REQUEUED", "pending"},      {"REQUEUE_HOLD", "pending"},
        {"REQUEUE_FED", "pending"},  {"RESV_DEL_HOLD", "pending"}, {"CONFIGURING", "running"},
        {"RUNNING", "running"},      {"COMPLETING", "running"},    {"SUSPENDED", "running"},
        {"STOPPED", "running"},      {"SIGNALING", "running"},     {"STAGE_OUT", "running"},
        {"RESIZING", "running"},     {"COMPLETED", "completed"},   {"CANCELLED", "cancelled"},
        {"FAILED", "failed"},        {"TIMEOUT", "failed"},        {"NODE_FAIL", "failed"},
        {"OUT_OF_MEMORY", "failed"}, {"BOOT_FAIL", "failed"},      {"DEADLINE", "failed"},
        {"PREEMPTED", "failed"},     {"REVOKED", "failed"},        {"SPECIAL_EXIT", "failed"},
    };
    if (!s)
        return "unknown";
    size_t len = strcspn(s, " +"); /* "CANCELLED by 0", "COMPLETING+" */
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i].slurm) == len && strncmp(map[i].slurm, s, len) == 0)
            return map[i].word;
    return "unknown";
}

/* The value of KEY in one `scontrol -o` line (words KEY=VALUE separated by
 * spaces; a word without '=' continues the value before it) into buf; false
 * when the line has no such key. */
static bool field(const char *line, const char *key, char *buf, size_t len)
{
    size_t klen = strlen(key);
    const char *p = line;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *w = p;
        while (*p && *p != ' ')
            p++;
        if ((size_t)(p - w) > klen && strncmp(w, key, klen) == 0 && w[klen] == '=') {
            const char *v = w + klen + 1, *e = p;
            /* following words without '=' belong to this value */
            for (;;) {
                const char *q = e;
                while (*q == ' ')
                    q++;
                const char *r = q;
                while (*r && *r != ' ' && *r != '=')
                    r++;
                if (!*q || *r == '=')
                    break;
                e = r;
            }
            size_t n = (size_t)(e - v);
            if (n >= len)
                n = len - 1;
            memcpy(buf, v, n);
            buf[n] = '\0';
            return true;
        }
    }
    return false;
}

static bool null_word(const char *s)
{
    return !s[0] || strcmp(s, "(null)") == 0 || strcmp(s, "None") == 0;
}

/* One task's entry from the fields of its record. */
static cJSON *task_entry(int task, const char *job_id, const char *st, const char *exit_code,
                         const char *node, const char *reason)
{
    cJSON *t = cJSON_CreateObject();
    if (!t)
        return NULL;
    cJSON_AddNumberToObject(t, "task", task);
    dg_json_add_str(t, "job_id", job_id);
    cJSON_AddStringToObject(t, "state", dg_slurm_state(st));
    dg_json_add_str(t, "slurm_state", st);
    int code = 0, sig = 0;
    if (exit_code[0] && sscanf(exit_code, "%d:%d", &code, &sig) == 2 &&
        strcmp(dg_slurm_state(st), "pending") != 0 && strcmp(dg_slurm_state(st), "running") != 0) {
        cJSON_AddNumberToObject(t, "exit_code", code);
        cJSON_AddNumberToObject(t, "signal", sig);
    } else {
        cJSON_AddNullToObject(t, "exit_code");
        cJSON_AddNullToObject(t, "signal");
    }
    if (null_word(node))
        cJSON_AddNullToObject(t, "node");
    else
        dg_json_add_str(t, "node", node);
    if (null_word(reason))
        cJSON_AddNullToObject(t, "reason");
    else
        dg_json_add_str(t, "reason", reason);
    return t;
}

#define MAX_TASKS 4096

/* One record's words, kept for the tasks it names (one buffer). */
typedef struct slurm_rec {
    char *buf;
    const char *jid, *state, *code, *node, *reason;
} slurm_rec;

/* The tasks seen so far, sorted by task id, each with the index of the last
 * record that named it (a later record replaces an earlier one's word); the
 * entries are made once, at the end. A lookup is a binary search and a
 * record costs no allocation per task, so a record of 4096 tasks costs 4096
 * searches, never a scan of every task seen. */
typedef struct task_set {
    int id[MAX_TASKS];
    int rec[MAX_TASKS];
    int n;
    slurm_rec *recs;
    int nrecs, cap;
} task_set;

/* Task id's record set to r; false when a new task would pass MAX_TASKS. */
static bool task_set_put(task_set *ts, int id, int r)
{
    int lo = 0, hi = ts->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ts->id[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < ts->n && ts->id[lo] == id) {
        ts->rec[lo] = r;
        return true;
    }
    if (ts->n >= MAX_TASKS)
        return false;
    memmove(ts->id + lo + 1, ts->id + lo, (size_t)(ts->n - lo) * sizeof *ts->id);
    memmove(ts->rec + lo + 1, ts->rec + lo, (size_t)(ts->n - lo) * sizeof *ts->rec);
    ts->id[lo] = id;
    ts->rec[lo] = r;
    ts->n++;
    return true;
}

/* The record's words kept in ts; its index, or -1 when out of memory. */
static int task_set_rec(task_set *ts, const char *const w[5])
{
    if (ts->nrecs == ts->cap) {
        int nc = ts->cap ? ts->cap * 2 : 16;
        slurm_rec *nr = dg_realloc(ts->recs, (size_t)nc * sizeof *nr);
        if (!nr)
            return -1;
        ts->recs = nr;
        ts->cap = nc;
    }
    size_t len = 0;
    for (int i = 0; i < 5; i++)
        len += strlen(w[i]) + 1;
    slurm_rec *r = &ts->recs[ts->nrecs];
    if (!(r->buf = dg_malloc(len)))
        return -1;
    const char **slot[5] = {&r->jid, &r->state, &r->code, &r->node, &r->reason};
    char *p = r->buf;
    for (int i = 0; i < 5; i++) {
        size_t n = strlen(w[i]) + 1;
        memcpy(p, w[i], n);
        *slot[i] = p;
        p += n;
    }
    return ts->nrecs++;
}

static void task_set_free(task_set *ts)
{
    for (int i = 0; ts && i < ts->nrecs; i++)
        dg_free(ts->recs[i].buf);
    if (ts)
        dg_free(ts->recs);
    dg_free(ts);
}

/* One record's tasks of job into ts (the line already known to be a record). */
static dg_status parse_record(dg_ctx *ctx, const char *line, const char *job, task_set *ts,
                              int *ids)
{
    char jid[64], ajid[64] = "", atid[1024] = "", state[64] = "", code[32] = "", node[256] = "",
                  reason[256] = "";
    field(line, "JobId", jid, sizeof jid);
    bool in_array = field(line, "ArrayJobId", ajid, sizeof ajid) && !null_word(ajid);
    field(line, "ArrayTaskId", atid, sizeof atid);
    field(line, "JobState", state, sizeof state);
    field(line, "ExitCode", code, sizeof code);
    field(line, "NodeList", node, sizeof node);
    field(line, "Reason", reason, sizeof reason);
    if (strcmp(in_array ? ajid : jid, job) != 0)
        return DG_OK;
    int k = 0;
    if (in_array && !null_word(atid)) {
        if (dg_slurm_array_ids(ctx, atid, ids, MAX_TASKS, &k) != DG_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", dg_errmsg(ctx));
            return dg_fail(ctx, DG_ERR_FORMAT, "scontrol: job %s: %s", job, why);
        }
    } else {
        ids[0] = 0;
        k = 1;
    }
    const char *const words[5] = {jid, state, code, node, reason};
    int r = task_set_rec(ts, words);
    if (r < 0)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < k; i++)
        if (!task_set_put(ts, ids[i], r))
            return dg_fail(ctx, DG_ERR_FORMAT, "scontrol: job %s has more than %d tasks", job,
                           MAX_TASKS);
    return DG_OK;
}

dg_status dg_slurm_parse_jobs(dg_ctx *ctx, const char *text, const char *job, char **json)
{
    *json = NULL;
    if (!text || !job)
        return dg_fail(ctx, DG_ERR_USAGE, "no scontrol output or job id");
    task_set *ts = dg_calloc(1, sizeof *ts);
    int *ids = dg_malloc(MAX_TASKS * sizeof *ids);
    if (!ts || !ids) {
        task_set_free(ts);
        dg_free(ids);
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    }
    int records = 0;
    dg_status st = DG_OK;
    const char *p = text;
    while (*p && st == DG_OK) {
        const char *e = strchr(p, '\n');
        size_t ll = e ? (size_t)(e - p) : strlen(p);
        char *line = dg_malloc(ll + 1);
        if (!line) {
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(line, p, ll);
        line[ll] = '\0';
        p = e ? e + 1 : p + ll;
        char jid[64];
        if (field(line, "JobId", jid, sizeof jid)) {
            records++;
            st = parse_record(ctx, line, job, ts, ids);
        }
        dg_free(line);
    }
    if (st == DG_OK && records == 0)
        st = dg_fail(ctx, DG_ERR_FORMAT, "scontrol printed no job record");
    cJSON *arr = st == DG_OK ? cJSON_CreateArray() : NULL;
    for (int i = 0; arr && i < ts->n; i++) {
        const slurm_rec *r = &ts->recs[ts->rec[i]];
        cJSON *t = task_entry(ts->id[i], r->jid, r->state, r->code, r->node, r->reason);
        if (!t || !cJSON_AddItemToArray(arr, t)) {
            cJSON_Delete(t);
            cJSON_Delete(arr);
            arr = NULL;
        }
    }
    if (st == DG_OK && !arr)
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    task_set_free(ts);
    dg_free(ids);
    if (st != DG_OK)
        return st;
    char *s = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    if (!s)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    *json = dg_strdup(s);
    cJSON_free(s);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
}

bool dg_slurm_parse_job_id(const char *out, char job[32])
{
    size_t jl = out ? strspn(out, "0123456789") : 0;
    /* "JOBID" or "JOBID;CLUSTER", then the line's end */
    if (jl == 0 || jl > 20 || (out[jl] && out[jl] != ';' && out[jl] != '\n' && out[jl] != '\r'))
        return false;
    memcpy(job, out, jl);
    job[jl] = '\0';
    return true;
}

char *dg_pool_script(const char *const *argv)
{
    char *cmd = dg_shell_quote(argv);
    if (!cmd)
        return NULL;
    char *s = dg_asprintf("#!/bin/sh\n"
                          "# a devgate pool task (devgate pool submit): every word below is\n"
                          "# single-quoted, so the shell interpolates nothing\n"
                          "exec %s\n",
                          cmd);
    dg_free(cmd);
    return s;
}
