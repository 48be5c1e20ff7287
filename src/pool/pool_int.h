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

#endif
