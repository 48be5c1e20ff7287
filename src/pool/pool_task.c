/* The task side of devgate pool (docs/team.md): on its node, inside a Slurm
 * job, one task runs `devgate --json [--ledger L] VERB ARGS` in
 * POOL/JOB/task-N. The pool folder is shared, so nothing in it is trusted:
 * the job folder is opened without following a link and must be this user's,
 * the task folder is created exclusively, and every file is created with
 * O_EXCL|O_NOFOLLOW below the folder's descriptor: a link planted before the
 * task starts is refused with a message, never written through. */
#include "pool/pool_int.h"

#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TASK_TERM_GRACE_S 25 /* Slurm's KillWait is 30 s by default */

/* The job and task this process is, from Slurm's environment. */
static bool slurm_task(const char **job, long *task)
{
    *job = getenv("SLURM_ARRAY_JOB_ID");
    if (!*job || !(*job)[0])
        *job = getenv("SLURM_JOB_ID");
    const char *t = getenv("SLURM_ARRAY_TASK_ID");
    *task = 0;
    if (t) {
        char *end;
        errno = 0;
        long v = strtol(t, &end, 10);
        if (errno || end == t || *end || v < 0 || v > INT_MAX)
            return false;
        *task = v;
    }
    return dg_pool_job_id_ok(*job);
}

/* The task folder below ROOT/JOB, created exclusively; its descriptor or -1
 * with the message on ctx. */
static int make_task_dir(dg_ctx *ctx, const char *root, const char *job, long task)
{
    int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        dg_fail(ctx, DG_ERR_IO, "__pool_task: cannot open the pool folder %s: %s", root,
                strerror(errno));
        return -1;
    }
    if (mkdirat(rootfd, job, 0777) != 0 && errno != EEXIST) {
        dg_fail(ctx, DG_ERR_IO, "__pool_task: cannot create %s/%s: %s", root, job, strerror(errno));
        close(rootfd);
        return -1;
    }
    int jobfd = dg_pool_open_dir(rootfd, job);
    int e = errno;
    close(rootfd);
    if (jobfd < 0) {
        dg_fail(ctx, DG_ERR_IO, "__pool_task: refusing the job folder %s/%s: %s", root, job,
                e == ELOOP || e == ENOTDIR ? "it is a symbolic link or not a folder"
                : e == EPERM               ? "another user owns it"
                                           : strerror(e));
        return -1;
    }
    char name[32];
    snprintf(name, sizeof name, "task-%ld", task);
    if (mkdirat(jobfd, name, 0755) != 0) {
        e = errno;
        dg_fail(ctx, DG_ERR_IO, "__pool_task: refusing the task folder %s/%s/%s: %s", root, job,
                name,
                e == EEXIST ? "something is already there (planted, or a second run of the task)"
                            : strerror(e));
        close(jobfd);
        return -1;
    }
    int td = dg_pool_open_dir(jobfd, name);
    e = errno;
    close(jobfd);
    if (td < 0)
        dg_fail(ctx, DG_ERR_IO, "__pool_task: cannot open the task folder %s/%s/%s: %s", root, job,
                name, strerror(e));
    return td;
}

/* A new file name below td for the child's stream; -1 with the message. */
static int new_file(dg_ctx *ctx, int td, const char *name)
{
    int fd = openat(td, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        dg_fail(ctx, DG_ERR_IO, "__pool_task: refusing to write %s: %s", name,
                errno == EEXIST || errno == ELOOP ? "something (a link?) is already there"
                                                  : strerror(errno));
    return fd;
}

static dg_status write_json_new(dg_ctx *ctx, int td, const char *name, cJSON *j)
{
    char *t = cJSON_Print(j);
    cJSON_Delete(j);
    int e = t ? dg_pool_write_new_at(td, name, t) : ENOMEM;
    cJSON_free(t);
    if (e)
        return dg_fail(ctx, DG_ERR_IO, "__pool_task: cannot write %s: %s", name,
                       e == EEXIST ? "something (a link?) is already there" : strerror(e));
    return DG_OK;
}

/* The ledger's copy learns which pool task it was: "pool": {job, task, node}. */
static void note_in_ledger(dg_ctx *ctx, const dg_pool_task_opts *o, int td, const char *job,
                           long task, const char *node, int code, dg_pool_task_result *r)
{
    cJSON *rec = dg_pool_json_at(td, "record.json", POOL_RECORD_MAX);
    const char *rid = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "run_id"));
    dg_ledger *lg = NULL;
    char *stored = NULL;
    if (rid && dg_ledger_open(ctx, o->ledger, o->ledger_timeout_ms, &lg) == DG_OK &&
        dg_ledger_show(ctx, lg, rid, &stored) == DG_OK) {
        cJSON *entry = cJSON_Parse(stored);
        cJSON *rj = cJSON_GetObjectItem(entry, "record");
        if (cJSON_IsObject(rj)) {
            cJSON_DeleteItemFromObject(rj, "pool");
            cJSON *pool = cJSON_AddObjectToObject(rj, "pool");
            cJSON_AddStringToObject(pool, "job", job);
            cJSON_AddNumberToObject(pool, "task", (double)task);
            dg_json_add_str(pool, "node", node);
            char *text = cJSON_PrintUnformatted(rj);
            const cJSON *xs = cJSON_GetObjectItem(entry, "exit_status");
            if (!text || dg_ledger_update(ctx, lg, rid, cJSON_IsNumber(xs) ? xs->valueint : code,
                                          text) != DG_OK)
                snprintf(r->note, sizeof r->note,
                         "run %s: the pool task could not be noted in the ledger: %s", rid,
                         dg_errmsg(ctx));
            cJSON_free(text);
        }
        cJSON_Delete(entry);
    } else if (rid) {
        snprintf(r->note, sizeof r->note, "run %s: %s", rid, dg_errmsg(ctx));
    }
    dg_string_free(stored);
    dg_ledger_close(lg);
    cJSON_Delete(rec);
}

/* Runs the verb with stdout into record.json.part and stderr into task.log. */
static dg_status run_verb(dg_ctx *ctx, const dg_pool_task_opts *o, int td, const char *self,
                          dg_pool_task_result *r)
{
    const char **args = dg_malloc(((size_t)o->argc + 8) * sizeof *args);
    if (!args)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    int n = 0;
    args[n++] = self;
    args[n++] = "--json";
    if (o->ledger) {
        args[n++] = "--ledger";
        args[n++] = o->ledger;
    }
    for (int k = 0; k < o->argc; k++)
        args[n++] = o->argv[k];
    args[n] = NULL;
    int out = new_file(ctx, td, "record.json.part");
    int err = out >= 0 ? new_file(ctx, td, "task.log") : -1;
    if (out < 0 || err < 0) {
        if (out >= 0)
            close(out);
        dg_free(args);
        return DG_ERR_IO;
    }
    /* Same process group: Slurm signals the whole job step, and the verb
     * keeps its own handling of TERM (it records the run as interrupted). */
    dg_proc_opts po = {.argv = args,
                       .out = {.kind = DG_PROC_FD, .fd = out},
                       .err = {.kind = DG_PROC_FD, .fd = err},
                       .same_group = true,
                       .leave_strays = true,
                       .cancel = o->cancel,
                       .term_grace_s = TASK_TERM_GRACE_S};
    dg_proc_result pr;
    dg_status st = dg_proc_run(ctx, &po, &pr);
    close(out);
    close(err);
    dg_free(args);
    r->exit_status = 127;
    if (!pr.started)
        return st;
    r->signal = pr.sig;
    r->exit_status = pr.sig ? 128 + pr.sig : pr.exit_code;
    dg_proc_result_free(&pr);
    return DG_OK;
}

dg_status dg_pool_task_run(dg_ctx *ctx, const dg_pool_task_opts *o, dg_pool_task_result *r)
{
    if (!r)
        return dg_fail(ctx, DG_ERR_USAGE, "__pool_task: no result");
    memset(r, 0, sizeof *r);
    r->exit_status = 2;
    if (!o || !o->dir || o->argc < 1 || !o->argv)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "__pool_task: use '__pool_task --dir DIR [--ledger L] -- VERB ARGS'");
    const char *job;
    long task;
    if (!slurm_task(&job, &task))
        return dg_fail(ctx, DG_ERR_USAGE,
                       "__pool_task: not inside a Slurm job (SLURM_ARRAY_JOB_ID / SLURM_JOB_ID "
                       "and SLURM_ARRAY_TASK_ID say which task this is)");
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return dg_fail(ctx, DG_ERR_USAGE, "__pool_task: cannot tell where this devgate is");
    self[sl] = '\0';
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *node = getenv("SLURMD_NODENAME");
    if (!node || !node[0])
        node = host;
    int td = make_task_dir(ctx, o->dir, job, task);
    if (td < 0)
        return DG_ERR_IO;
    char ts[32];
    dg_pool_now(ts, sizeof ts);
    cJSON *tj = cJSON_CreateObject();
    cJSON_AddStringToObject(tj, "job", job);
    cJSON_AddNumberToObject(tj, "task", (double)task);
    dg_json_add_str(tj, "node", node);
    dg_json_add_str(tj, "host", host);
    cJSON_AddStringToObject(tj, "started", ts);
    cJSON_AddNumberToObject(tj, "pid", getpid());
    dg_status st = write_json_new(ctx, td, "task.json", tj);
    if (st == DG_OK)
        st = run_verb(ctx, o, td, self, r);
    if (st != DG_OK) {
        close(td);
        return st;
    }
    struct stat sb;
    if (fstatat(td, "record.json.part", &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
        sb.st_size > 0)
        renameat(td, "record.json.part", td, "record.json");
    else
        unlinkat(td, "record.json.part", 0);
    if (o->ledger)
        note_in_ledger(ctx, o, td, job, task, node, r->exit_status, r);
    dg_pool_now(ts, sizeof ts);
    cJSON *ej = cJSON_CreateObject();
    cJSON_AddNumberToObject(ej, "exit_status", r->exit_status);
    if (r->signal)
        cJSON_AddNumberToObject(ej, "signal", r->signal);
    else
        cJSON_AddNullToObject(ej, "signal");
    bool cancelled = o->cancel && *o->cancel;
    cJSON_AddBoolToObject(ej, "cancelled", cancelled);
    cJSON_AddStringToObject(ej, "ended", ts);
    st = write_json_new(ctx, td, "exit.json", ej);
    close(td);
    return st;
}
