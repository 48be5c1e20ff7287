/* pool status and collect in the library (docs/team.md): Slurm's view
 * merged with the task folders, and the tasks' records entered into the
 * ledger side by side. The folders are shared and untrusted: read without
 * following a symlink, each file capped, a record taken only when it is a
 * devgate record of the verb submitted. */
#include "pool/pool_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- status: Slurm's view and the task folders --------------------------------- */

typedef struct pool_job {
    char job[32];
    char *root, *jobdir;
    int jobfd;        /* the job folder, opened without following a link; -1 */
    cJSON *manifest;  /* job.json or NULL */
    cJSON *tasks;     /* the merged view, one object per task */
    bool slurm_known; /* scontrol knows the job */
    int pending_or_running, bad, completed;
} pool_job;

static void pool_job_free(pool_job *j)
{
    dg_free(j->root);
    dg_free(j->jobdir);
    if (j->jobfd >= 0)
        close(j->jobfd);
    cJSON_Delete(j->manifest);
    cJSON_Delete(j->tasks);
}

/* The task folder of task t, opened without following a link; -1 when absent. */
static int task_dir(const pool_job *j, int t)
{
    if (j->jobfd < 0)
        return -1;
    char name[32];
    snprintf(name, sizeof name, "task-%d", t);
    return dg_pool_open_dir(j->jobfd, name);
}

/* One task's merged state (dg_pool_task_view over its folder's task.json
 * and exit.json), counted. */
static cJSON *merge_task(pool_job *j, int t, const cJSON *sl)
{
    int td = task_dir(j, t);
    cJSON *tj = td >= 0 ? dg_pool_json_at(td, "task.json", POOL_SMALL_MAX) : NULL;
    cJSON *ej = td >= 0 ? dg_pool_json_at(td, "exit.json", POOL_SMALL_MAX) : NULL;
    if (td >= 0)
        close(td);
    cJSON *o = dg_pool_task_view(t, sl, tj, ej, j->slurm_known);
    cJSON_Delete(tj);
    cJSON_Delete(ej);
    const char *state = dg_pool_jstr(o, "state", "unknown");
    if (strcmp(state, "pending") == 0 || strcmp(state, "running") == 0)
        j->pending_or_running++;
    else if (strcmp(state, "completed") == 0)
        j->completed++;
    else
        j->bad++;
    return o;
}

/* Slurm's tasks of job (scontrol), or NULL when Slurm does not know it. */
static dg_status slurm_view(dg_ctx *ctx, const char *what, const char *job, cJSON **sl)
{
    *sl = NULL;
    const char *sc[] = {"scontrol", "-o", "show", "job", job, NULL};
    char *out = NULL, *err = NULL;
    dg_status st = dg_pool_run_tool(ctx, what, sc, &out, &err);
    if (st != DG_OK && err && strstr(err, "Invalid job id"))
        st = DG_OK; /* finished long ago (MinJobAge) or never was */
    char *parsed = NULL;
    if (st == DG_OK && out && dg_slurm_parse_jobs(ctx, out, job, &parsed) == DG_OK)
        *sl = cJSON_Parse(parsed);
    dg_free(out);
    dg_free(err);
    dg_string_free(parsed);
    return st;
}

/* Loads job JOB: its manifest (ROOT/JOB/job.json), Slurm's view, the folders. */
static dg_status pool_load(dg_ctx *ctx, const char *what, const char *dir, const char *job,
                           pool_job *j)
{
    memset(j, 0, sizeof *j);
    j->jobfd = -1;
    if (!dg_pool_job_id_ok(job)) {
        char c[64];
        dg_copy_clean(c, sizeof c, job ? job : "");
        return dg_fail(ctx, DG_ERR_USAGE,
                       "%s: '%s' is not a Slurm job id (digits, as pool submit printed)", what, c);
    }
    snprintf(j->job, sizeof j->job, "%s", job);
    j->root = dg_pool_root(ctx, dir, false, what);
    j->jobdir = j->root ? dg_asprintf("%s/%s", j->root, job) : NULL;
    if (!j->jobdir)
        return dg_fail(ctx, DG_ERR_USAGE, "%s: cannot tell where the pool folder is", what);
    j->jobfd = dg_pool_open_dir(AT_FDCWD, j->jobdir);
    j->manifest = j->jobfd >= 0 ? dg_pool_json_at(j->jobfd, "job.json", POOL_SMALL_MAX) : NULL;
    if (j->manifest && !cJSON_IsObject(j->manifest)) {
        cJSON_Delete(j->manifest);
        j->manifest = NULL;
    }
    cJSON *sl = NULL;
    dg_status st = slurm_view(ctx, what, job, &sl);
    if (st != DG_OK)
        return st;
    j->slurm_known = cJSON_GetArraySize(sl) > 0;
    if (!j->slurm_known && !j->manifest) {
        cJSON_Delete(sl);
        return dg_fail(ctx, DG_ERR_NOT_FOUND,
                       "%s: no job %s: Slurm does not know it and %s/job.json does not exist "
                       "(give the pool folder with --dir)",
                       what, job, j->jobdir);
    }
    /* The tasks: the manifest's list, else what Slurm shows. */
    int ids[POOL_MAX_TASKS];
    int n = dg_pool_task_ids(j->manifest, sl, ids, POOL_MAX_TASKS);
    j->tasks = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(j->tasks, merge_task(j, ids[i], dg_pool_slurm_task(sl, ids[i])));
    cJSON_Delete(sl);
    return DG_OK;
}

static cJSON *counts_of(const pool_job *j)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "pending_or_running", j->pending_or_running);
    cJSON_AddNumberToObject(c, "completed", j->completed);
    cJSON_AddNumberToObject(c, "bad", j->bad);
    return c;
}

/* *json = o printed (dg_string_free), o deleted. */
static dg_status give_json(dg_ctx *ctx, cJSON *o, char **json)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    *json = s ? dg_strdup(s) : NULL;
    cJSON_free(s);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
}

static void add_manifest_words(cJSON *o, const cJSON *manifest)
{
    dg_json_add_str(o, "verb", dg_pool_jstr(manifest, "verb", NULL));
    const cJSON *av = cJSON_GetObjectItem(manifest, "argv");
    cJSON_AddItemToObject(o, "argv",
                          cJSON_IsArray(av) ? cJSON_Duplicate(av, true) : cJSON_CreateArray());
}

dg_status dg_pool_status(dg_ctx *ctx, const char *dir, const char *job, char **json)
{
    if (json)
        *json = NULL;
    if (!json)
        return dg_fail(ctx, DG_ERR_USAGE, "pool status: no output");
    pool_job j;
    dg_status st = pool_load(ctx, "pool status", dir, job, &j);
    if (st == DG_OK) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", "pool-status");
        cJSON_AddStringToObject(o, "job", j.job);
        cJSON_AddBoolToObject(o, "slurm_knows", j.slurm_known);
        add_manifest_words(o, j.manifest);
        cJSON_AddItemToObject(o, "counts", counts_of(&j));
        cJSON_AddItemToObject(o, "tasks", j.tasks);
        j.tasks = NULL;
        st = give_json(ctx, o, json);
    }
    pool_job_free(&j);
    return st;
}

dg_status dg_pool_job_ledger(dg_ctx *ctx, const char *dir, const char *job, char **ledger)
{
    if (ledger)
        *ledger = NULL;
    if (!ledger || !dg_pool_job_id_ok(job))
        return dg_fail(ctx, DG_ERR_USAGE, "pool: not a Slurm job id");
    char *root = dg_pool_root(ctx, dir, false, "pool");
    char *jobdir = root ? dg_asprintf("%s/%s", root, job) : NULL;
    int fd = jobdir ? dg_pool_open_dir(AT_FDCWD, jobdir) : -1;
    cJSON *m = fd >= 0 ? dg_pool_json_at(fd, "job.json", POOL_SMALL_MAX) : NULL;
    if (fd >= 0)
        close(fd);
    const char *l = dg_pool_jstr(m, "ledger", NULL);
    dg_status st = DG_OK;
    if (l && !(*ledger = dg_strdup(l)))
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    cJSON_Delete(m);
    dg_free(root);
    dg_free(jobdir);
    return st;
}

/* ---- collect ------------------------------------------------------------------ */

/* The task's record when it is a devgate record of verb (dg_pool_record_check);
 * NULL with why (cleaned) otherwise, "" when there is no record at all. */
static cJSON *task_record(int td, const char *verb, char *why, size_t len)
{
    why[0] = '\0';
    size_t n = 0;
    char *text = td >= 0 ? dg_pool_read_at(td, "record.json", POOL_RECORD_MAX, &n) : NULL;
    if (!text) {
        if (td >= 0 && errno == EFBIG)
            snprintf(why, len, "record.json is larger than %zu MiB: not taken",
                     POOL_RECORD_MAX >> 20);
        else if (td >= 0 && (errno == ELOOP || errno == EINVAL))
            snprintf(why, len, "record.json is a link or not a regular file: not taken");
        return NULL;
    }
    cJSON *rec = dg_pool_record_check(text, n, verb, why, len);
    dg_free(text);
    return rec;
}

/* Makes sure the task's record is in the ledger: its own run id when the
 * ledger holds it, else the id an earlier collect gave it, else it is
 * recorded now (with "pool": {...}) and the id kept in the task folder.
 * *id gets the id (dg_free). */
static dg_status ensure_recorded(dg_ctx *ctx, dg_ledger *lg, const pool_job *j, int td,
                                 const cJSON *t, const cJSON *rec, char **id, bool *added)
{
    *id = NULL;
    *added = false;
    int task = dg_jint(t, "task", -1);
    const char *own = dg_pool_jstr(rec, "run_id", NULL);
    char *json = NULL;
    if (own && dg_ledger_show(ctx, lg, own, &json) == DG_OK) {
        dg_string_free(json);
        *id = dg_strdup(own);
        return DG_OK;
    }
    char *prev = dg_pool_read_at(td, "collected", 256, NULL);
    if (prev) {
        prev[strcspn(prev, "\n")] = '\0';
        if (dg_pool_run_id_ok(prev) && dg_ledger_show(ctx, lg, prev, &json) == DG_OK) {
            dg_string_free(json);
            *id = prev;
            return DG_OK;
        }
        dg_free(prev);
    }
    cJSON *copy = cJSON_Duplicate(rec, true);
    cJSON_DeleteItemFromObject(copy, "run_id");
    cJSON_DeleteItemFromObject(copy, "pool");
    cJSON *pool = cJSON_AddObjectToObject(copy, "pool");
    cJSON_AddStringToObject(pool, "job", j->job);
    cJSON_AddNumberToObject(pool, "task", task);
    dg_json_add_str(pool, "node", dg_pool_jstr(t, "node", NULL));
    dg_json_add_str(pool, "task_run_id", own);
    char *text = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    const char *verb = dg_pool_jstr(j->manifest, "verb", "pool");
    const cJSON *xs = cJSON_GetObjectItem(t, "exit_status");
    char *newid = NULL;
    dg_status st =
        text ? dg_ledger_record(ctx, lg, verb, cJSON_IsNumber(xs) ? xs->valueint : 0, text, &newid)
             : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    cJSON_free(text);
    if (st != DG_OK)
        return st;
    /* Noted beside the record (replacing an older note), so a later collect
     * finds it; a failure only means a later collect records it again. */
    char line[96];
    snprintf(line, sizeof line, "%s\n", newid);
    unlinkat(td, "collected", 0);
    dg_pool_write_new_at(td, "collected", line);
    *id = dg_strdup(newid);
    *added = true;
    dg_string_free(newid);
    return DG_OK;
}

/* Collects one task into row; counts into the caller's tallies. */
typedef struct collect_tally {
    int nrec, added, ledger_errors, differ, no_record;
    cJSON *first_bucket; /* owned */
    cJSON *errors;       /* ledger messages */
} collect_tally;

static void collect_task(dg_ctx *ctx, dg_ledger *lg, const pool_job *j, const cJSON *t, cJSON *row,
                         collect_tally *c)
{
    int task = dg_jint(t, "task", -1);
    const char *state = dg_pool_jstr(t, "state", "");
    bool ended = strcmp(state, "pending") != 0 && strcmp(state, "running") != 0;
    int td = task_dir(j, task);
    char why[256] = "";
    cJSON *rec =
        ended ? task_record(td, dg_pool_jstr(j->manifest, "verb", NULL), why, sizeof why) : NULL;
    if (why[0])
        cJSON_AddStringToObject(row, "record_refused", why);
    if (rec) {
        dg_pool_row_from_record(row, rec);
        char *id = NULL;
        bool was_added = false;
        if (lg && ensure_recorded(ctx, lg, j, td, t, rec, &id, &was_added) != DG_OK) {
            c->ledger_errors++;
            char m[DG_ERRMSG_MAX + 32];
            snprintf(m, sizeof m, "task %d: %s", task, dg_errmsg(ctx));
            cJSON_AddItemToArray(c->errors, cJSON_CreateString(m));
        }
        c->added += was_added;
        dg_json_add_str(row, "run_id", id);
        dg_free(id);
        const cJSON *bk = cJSON_GetObjectItem(rec, "bucket");
        if (!cJSON_IsObject(bk))
            bk = NULL;
        char differs[256] = "";
        if (bk && !c->first_bucket)
            c->first_bucket = cJSON_Duplicate(bk, true);
        else if (c->first_bucket)
            dg_pool_bucket_differs(c->first_bucket, bk, differs, sizeof differs);
        if (differs[0]) {
            c->differ++;
            cJSON_AddStringToObject(row, "bucket_differs", differs);
        } else {
            cJSON_AddNullToObject(row, "bucket_differs");
        }
        c->nrec++;
        cJSON_Delete(rec);
    } else {
        if (ended && strcmp(state, "completed") == 0)
            c->no_record++;
        cJSON_AddNullToObject(row, "run_id");
        char *log = ended && td >= 0 ? dg_pool_read_at(td, "task.log", POOL_LOG_MAX, NULL) : NULL;
        char line[256];
        if (log && log[0])
            dg_json_add_str(row, "last_log_line", dg_pool_last_line(log, line, sizeof line));
        dg_free(log);
    }
    if (td >= 0)
        close(td);
}

dg_status dg_pool_collect(dg_ctx *ctx, dg_ledger *lg, const char *dir, const char *job, char **json)
{
    if (json)
        *json = NULL;
    if (!json)
        return dg_fail(ctx, DG_ERR_USAGE, "pool collect: no output");
    pool_job j;
    dg_status st = pool_load(ctx, "pool collect", dir, job, &j);
    if (st == DG_OK && !j.manifest)
        st = dg_fail(ctx, DG_ERR_NOT_FOUND,
                     "pool collect: job %s has no folder %s (its records are there): give the "
                     "pool folder with --dir",
                     j.job, j.jobdir);
    if (st != DG_OK) {
        pool_job_free(&j);
        return st;
    }
    collect_tally c = {.errors = cJSON_CreateArray()};
    cJSON *rows = cJSON_CreateArray();
    const cJSON *t;
    cJSON_ArrayForEach(t, j.tasks)
    {
        cJSON *row = cJSON_Duplicate(t, true);
        collect_task(ctx, lg, &j, t, row, &c);
        cJSON_AddItemToArray(rows, row);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "pool-collect");
    cJSON_AddStringToObject(o, "job", j.job);
    add_manifest_words(o, j.manifest);
    cJSON_AddBoolToObject(o, "same_bucket", c.differ == 0);
    cJSON_AddNumberToObject(o, "with_record", c.nrec);
    cJSON_AddNumberToObject(o, "recorded_now", c.added);
    cJSON *counts = counts_of(&j);
    cJSON_AddNumberToObject(counts, "no_record", c.no_record);
    cJSON_AddNumberToObject(counts, "bucket_differs", c.differ);
    cJSON_AddNumberToObject(counts, "ledger_errors", c.ledger_errors);
    cJSON_AddItemToObject(o, "counts", counts);
    cJSON_AddItemToObject(o, "ledger_errors", c.errors);
    cJSON_AddItemToObject(o, "tasks", rows);
    cJSON_Delete(c.first_bucket);
    pool_job_free(&j);
    return give_json(ctx, o, json);
}
