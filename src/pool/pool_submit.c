/* pool submit in the library (docs/team.md): the job script (one quoted
 * exec line of `devgate __pool_task`), sbatch, and the job's folder with
 * its manifest job.json. */
#include "pool/pool_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- submit ---------------------------------------------------------------------- */

/* True when a postgresql:// URI carries a password (user:pw@ or password=). */
static bool uri_has_password(const char *uri)
{
    const char *s = strstr(uri, "://");
    if (!s)
        return false;
    s += 3;
    size_t auth = strcspn(s, "/?");
    const char *at = memchr(s, '@', auth);
    if (at && memchr(s, ':', (size_t)(at - s)))
        return true;
    const char *q = strchr(uri, '?');
    return q && strstr(q, "password=") != NULL;
}

/* The ledger the tasks get as --ledger: a team URI as it is, a file made
 * absolute (the tasks run elsewhere); NULL with a message. */
static char *task_ledger(dg_ctx *ctx, const char *p)
{
    if (!p) {
        dg_fail(ctx, DG_ERR_USAGE,
                "pool submit: cannot tell where the ledger is (set DEVGATE_LEDGER or --ledger)");
        return NULL;
    }
    if (dg_ledger_is_team(p)) {
        if (uri_has_password(p)) {
            dg_fail(ctx, DG_ERR_USAGE,
                    "pool submit: the team ledger URI holds a password, which would be written "
                    "into the job script; give it through libpq's own means on the nodes "
                    "(~/.pgpass, a service file or PGPASSWORD) and the URI without it");
            return NULL;
        }
        return dg_strdup(p);
    }
    if (p[0] == '/')
        return dg_strdup(p);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
        dg_fail(ctx, DG_ERR_IO, "pool submit: cannot make the ledger path %s absolute: %s", p,
                strerror(errno));
        return NULL;
    }
    return dg_asprintf("%s/%s", cwd, p);
}

/* The job script written under root with a random name; its path (dg_free)
 * or NULL with a message. */
static char *write_script(dg_ctx *ctx, const char *root, const char *const *words)
{
    char *script = dg_pool_script(words);
    char *tmp = dg_asprintf("%s/.submit-XXXXXX", root);
    int fd = tmp && script ? mkstemp(tmp) : -1;
    bool wrote = fd >= 0 && write(fd, script, strlen(script)) == (ssize_t)strlen(script);
    if (fd >= 0 && close(fd) != 0)
        wrote = false;
    dg_free(script);
    if (!wrote) {
        dg_fail(ctx, DG_ERR_IO, "pool submit: cannot write the job script in %s: %s", root,
                strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        dg_free(tmp);
        return NULL;
    }
    chmod(tmp, 0700);
    return tmp;
}

/* sbatch --parsable ... script; the job id into job. */
static dg_status sbatch(dg_ctx *ctx, const dg_pool_submit_opts *o, const char *spec,
                        const char *root, const char *script, char job[32])
{
    char a_array[96], a_name[96], a_part[160] = "", a_time[96] = "";
    char *a_out = dg_asprintf("--output=%s/slurm-%%A_%%a.out", root);
    snprintf(a_array, sizeof a_array, "--array=%s", spec);
    snprintf(a_name, sizeof a_name, "--job-name=devgate-%s", o->argv[0]);
    const char *sb[40];
    int ns = 0;
    sb[ns++] = "sbatch";
    sb[ns++] = "--parsable";
    sb[ns++] = a_array;
    sb[ns++] = a_name;
    sb[ns++] = a_out ? a_out : "--output=/dev/null";
    if (o->partition) {
        snprintf(a_part, sizeof a_part, "--partition=%s", o->partition);
        sb[ns++] = a_part;
    }
    if (o->time_limit) {
        snprintf(a_time, sizeof a_time, "--time=%s", o->time_limit);
        sb[ns++] = a_time;
    }
    for (int i = 0; i < o->n_sbatch && i < 16; i++)
        sb[ns++] = o->sbatch_opts[i];
    sb[ns++] = script;
    sb[ns] = NULL;
    char *out = NULL;
    dg_status st = dg_pool_run_tool(ctx, "pool submit", sb, &out, NULL);
    dg_free(a_out);
    if (st != DG_OK)
        return st;
    if (!dg_slurm_parse_job_id(out, job)) {
        char line[256];
        st = dg_fail(ctx, DG_ERR_UNAVAILABLE, "pool submit: sbatch printed no job id: '%s'",
                     dg_pool_last_line(out, line, sizeof line));
    }
    dg_free(out);
    return st;
}

/* job.json: what was submitted, for status and collect. */
static cJSON *manifest_of(const dg_pool_submit_opts *o, const char *job, const int *ids, int n,
                          const char *ledger, const char *devgate, const char *jobdir)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "v", 1);
    cJSON_AddStringToObject(m, "kind", "pool-job");
    cJSON_AddStringToObject(m, "job", job);
    cJSON *ta = cJSON_AddArrayToObject(m, "tasks");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(ta, cJSON_CreateNumber(ids[i]));
    cJSON *av = cJSON_AddArrayToObject(m, "argv");
    for (int i = 0; i < o->argc; i++)
        cJSON_AddItemToArray(av, cJSON_CreateString(o->argv[i]));
    dg_json_add_str(m, "verb", o->argv[0]);
    dg_json_add_str(m, "ledger", ledger);
    dg_json_add_str(m, "partition", o->partition);
    dg_json_add_str(m, "time_limit", o->time_limit);
    char ts[32];
    dg_pool_now(ts, sizeof ts);
    cJSON_AddStringToObject(m, "submitted", ts);
    dg_json_add_str(m, "devgate", devgate);
    dg_json_add_str(m, "dir", jobdir);
    return m;
}

dg_status dg_pool_submit(dg_ctx *ctx, const dg_pool_submit_opts *o, char **manifest)
{
    if (manifest)
        *manifest = NULL;
    if (!o || !manifest || o->argc < 1 || !o->argv || !o->argv[0])
        return dg_fail(ctx, DG_ERR_USAGE, "pool submit: no verb given");
    if (o->array && o->tasks)
        return dg_fail(ctx, DG_ERR_USAGE, "pool submit: give --tasks N or --array SPEC, not both");
    if (o->n_sbatch < 0 || o->n_sbatch > 16)
        return dg_fail(ctx, DG_ERR_USAGE, "pool submit: at most 16 sbatch options");
    char spec[64];
    if (o->array && strlen(o->array) >= sizeof spec)
        return dg_fail(ctx, DG_ERR_USAGE, "pool submit: --array is too long");
    if (o->array)
        snprintf(spec, sizeof spec, "%s", o->array);
    else
        snprintf(spec, sizeof spec, "0-%d", (o->tasks > 0 ? o->tasks : 1) - 1);
    int *ids = dg_malloc(POOL_MAX_TASKS * sizeof *ids), nids = 0;
    if (!ids)
        return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    dg_status st = dg_slurm_array_ids(ctx, spec, ids, POOL_MAX_TASKS, &nids);
    if (st != DG_OK) {
        char msg[DG_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", dg_errmsg(ctx));
        dg_free(ids);
        return dg_fail(ctx, DG_ERR_USAGE, "pool submit: --array: %s", msg);
    }
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl > 0)
        self[sl] = '\0';
    const char *devgate = o->devgate ? o->devgate : sl > 0 ? self : NULL;
    char *ledger = task_ledger(ctx, o->ledger);
    char *root = ledger ? dg_pool_root(ctx, o->dir, true, "pool submit") : NULL;
    char *script = NULL;
    st = !ledger || !root ? (ledger ? DG_ERR_IO : DG_ERR_USAGE) : DG_OK;
    if (st == DG_OK && !devgate)
        st = dg_fail(ctx, DG_ERR_USAGE,
                     "pool submit: cannot tell where this devgate is; name it with --devgate");
    const char **words = st == DG_OK ? dg_malloc(((size_t)o->argc + 8) * sizeof *words) : NULL;
    if (st == DG_OK && !words)
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    if (st == DG_OK) {
        /* exec devgate __pool_task --dir ROOT --ledger L -- VERB ARGS */
        int nw = 0;
        words[nw++] = devgate;
        words[nw++] = "__pool_task";
        words[nw++] = "--dir";
        words[nw++] = root;
        words[nw++] = "--ledger";
        words[nw++] = ledger;
        words[nw++] = "--";
        for (int i = 0; i < o->argc; i++)
            words[nw++] = o->argv[i];
        words[nw] = NULL;
        script = write_script(ctx, root, words);
        if (!script)
            st = DG_ERR_IO;
    }
    dg_free(words);
    if (st != DG_OK) {
        dg_free(ledger);
        dg_free(root);
        dg_free(ids);
        return st;
    }
    char job[32] = "";
    st = sbatch(ctx, o, spec, root, script, job);
    if (st == DG_OK) {
        /* The job's folder: its manifest and script (the tasks may have made it already). */
        char *jobdir = dg_asprintf("%s/%s", root, job);
        char *sh = jobdir ? dg_asprintf("%s/job.sh", jobdir) : NULL;
        char *mf = jobdir ? dg_asprintf("%s/job.json", jobdir) : NULL;
        cJSON *m = manifest_of(o, job, ids, nids, ledger, devgate, jobdir ? jobdir : "");
        char *text = cJSON_Print(m);
        cJSON_Delete(m);
        bool ok = jobdir && sh && mf && text && (mkdir(jobdir, 0777) == 0 || errno == EEXIST) &&
                  rename(script, sh) == 0 &&
                  dg_file_write_atomic(ctx, mf, text, strlen(text)) == DG_OK;
        if (!ok) {
            st = dg_fail(ctx, DG_ERR_IO,
                         "pool submit: job %s was submitted, but its folder %s could not be "
                         "written (%s); 'pool status %s' still asks Slurm",
                         job, jobdir ? jobdir : root, strerror(errno), job);
        } else {
            *manifest = dg_strdup(text);
            if (!*manifest)
                st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory (job %s was submitted)", job);
        }
        cJSON_free(text);
        dg_free(sh);
        dg_free(mf);
        dg_free(jobdir);
    }
    if (st != DG_OK)
        unlink(script);
    dg_free(script);
    dg_free(ledger);
    dg_free(root);
    dg_free(ids);
    return st;
}
