/* What pool.c (submit, status, collect) and pool_task.c (the task side)
 * share: the folder layout and untrusting reads of the task folders. */
#ifndef DG_POOL_INT_H
#define DG_POOL_INT_H

#include "core/core.h"
#include "core/json.h"

#define POOL_MAX_TASKS 1024
#define POOL_TOOL_TIMEOUT_S 30
#define POOL_DEFAULT_DIR "devgate-pool"
#define POOL_RECORD_MAX ((size_t)64 << 20) /* a task's record.json, as compare's cap */
#define POOL_SMALL_MAX ((size_t)64 << 10)  /* job.json, task.json, exit.json, collected */
#define POOL_LOG_MAX ((size_t)8 << 20)     /* task.log read for its last line */

/* True for a Slurm job id: 1 to 20 digits. */
bool dg_pool_job_id_ok(const char *s);
/* Opens the directory name below dfd (AT_FDCWD: the working directory)
 * without following a symlink at its last component, and only when it is
 * owned by this user; -1 with errno (ELOOP/ENOTDIR for a link, EPERM for
 * another owner). */
int dg_pool_open_dir(int dfd, const char *name);
/* The regular file name below dfd read whole (never through a symlink), at
 * most max bytes, NUL-terminated (dg_malloc'd); NULL with errno (EFBIG when
 * larger than max, ELOOP for a link, EINVAL when not a regular file). */
char *dg_pool_read_at(int dfd, const char *name, size_t max, size_t *len);
/* pool_read_at parsed as JSON; NULL when missing, too big or not JSON. */
cJSON *dg_pool_json_at(int dfd, const char *name, size_t max);
/* Creates name below dfd exclusively (O_EXCL|O_NOFOLLOW, mode 0644) and
 * writes text; 0 or an errno (EEXIST for anything already there, a link
 * included). */
int dg_pool_write_new_at(int dfd, const char *name, const char *text);
/* UTC now as ISO 8601 into buf (>= 21 bytes). */
void dg_pool_now(char *buf, size_t len);
/* The last non-empty line of s into buf (cleaned for a terminal); buf. */
const char *dg_pool_last_line(const char *s, char *buf, size_t len);
/* Runs one of Slurm's tools (no shell, stdin /dev/null, both outputs
 * captured at 1 MiB, POOL_TOOL_TIMEOUT_S). DG_OK when it exited 0 (*out its
 * stdout, dg_free); DG_ERR_UNAVAILABLE with "WHAT: ..." otherwise, *tool_err
 * (may be NULL) then getting its stderr when it ran and failed (dg_free). */
dg_status dg_pool_run_tool(dg_ctx *ctx, const char *what, const char *const *argv, char **out,
                           char **tool_err);
/* The pool folder (given, else ./devgate-pool) as an absolute path, created
 * when create (dg_free); NULL with the message "WHAT: ..." on ctx. */
char *dg_pool_root(dg_ctx *ctx, const char *given, bool create, const char *what);

/* ---- what the folders and Slurm say, read (pool_view.c, slurm.c: pure) -------- */

/* The job id `sbatch --parsable` printed ("JOBID" or "JOBID;CLUSTER" on its
 * first line, 1 to 20 digits) into job; false when it printed none. */
bool dg_slurm_parse_job_id(const char *out, char job[32]);

/* o[k] when it is a string, else fallback. */
const char *dg_pool_jstr(const cJSON *o, const char *k, const char *fallback);
/* Slurm's entry for task t in arr (dg_slurm_parse_jobs' array), or NULL. */
const cJSON *dg_pool_slurm_task(const cJSON *arr, int t);
/* The job's tasks into ids (at most max): the manifest's "tasks" when there
 * is a manifest, else the tasks Slurm shows; whole numbers from 0 to
 * INT_MAX only. Their count. */
int dg_pool_task_ids(const cJSON *manifest, const cJSON *sl, int *ids, int max);
/* Task t's merged state (new object): Slurm's word when sl (its entry) has
 * it, else its folder's (exit.json ej, task.json tj; either may be NULL),
 * else an inference that says it is one; its exit status, signal, node and
 * host. */
cJSON *dg_pool_task_view(int t, const cJSON *sl, const cJSON *tj, const cJSON *ej,
                         bool slurm_known);
/* True for a ledger run id: YYYYMMDD-HHMMSS-hhhhhhhhhhhh. */
bool dg_pool_run_id_ok(const char *s);
/* A task's record.json (n bytes at text) when it is a devgate record of verb:
 * a JSON object of version 1 or 2, kind == verb, run_id null, absent or of
 * the ledger's form; NULL with why (cleaned) otherwise. */
cJSON *dg_pool_record_check(const char *text, size_t n, const char *verb, char *why, size_t len);
/* A collect row's columns from a task's record (tolerant: accept, train,
 * run, ...): backend, batch, throughput, verdict, route, host, bucket id. */
void dg_pool_row_from_record(cJSON *row, const cJSON *rec);
/* Which fields of input bucket b differ from a into buf ("" when none): the
 * same id is the same bucket; otherwise key by key over both objects, "id"
 * alone when only the ids differ. */
void dg_pool_bucket_differs(const cJSON *a, const cJSON *b, char *buf, size_t len);

#endif
