/* devgate pool submit|status|collect: a pool of nodes on Slurm. `submit`
 * writes a job script (one exec line built by dg_shell_quote: no user word
 * is interpolated by a shell) and submits it as a job array through sbatch;
 * each task runs the hidden verb `__pool_task`, which runs `devgate --json
 * --ledger LEDGER VERB ...` on its node and keeps the task's record, log and
 * exit in POOL_DIR/JOB/task-N/. `status` asks scontrol and reads those
 * folders; `collect` puts every task's record into the ledger and prints one
 * row per task side by side (a failed or cancelled task is a row, never a
 * gap), holding them to one input bucket. Slurm schedules; devgate does not.
 * docs/team.md. */
#include "cli.h"

#include <stddef.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Exit statuses of `pool` (docs/cli.md); 15 is remote's "input bucket differs". */
enum {
    EXIT_POOL_BUCKET = 15,  /* collect: the tasks ran on different input buckets */
    EXIT_POOL_SLURM = 20,   /* Slurm's tools missing, the controller unreachable, sbatch refused */
    EXIT_POOL_UNKNOWN = 21, /* no such job: Slurm does not know it and it has no folder */
    EXIT_POOL_TASKS = 22,   /* collect: a task failed, was cancelled or is unknown */
    EXIT_POOL_RUNNING = 23, /* collect: tasks still pending or running */
};

#define POOL_MAX_TASKS 1024
#define POOL_MAX_ARGS 256
#define POOL_TOOL_TIMEOUT_S 30
#define POOL_DEFAULT_DIR "devgate-pool"

/* ---- running Slurm's tools ------------------------------------------------------ */

/* Runs argv (no shell) with stdin from /dev/null, stdout into *out, stderr
 * into *err (both free()), killed after timeout_s. Returns its exit status;
 * -1 when it could not be started (*err says why), -2 when it timed out. */
static int run_tool(const char *const *argv, int timeout_s, char **out, char **err)
{
    *out = *err = NULL;
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(po[1]);
    close(pe[1]);
    if (rc != 0) {
        close(po[0]);
        close(pe[0]);
        char *m = NULL;
        if (asprintf(&m, "%s", strerror(rc)) < 0)
            m = NULL;
        *err = m;
        errno = rc;
        return -1;
    }
    char *bufs[2] = {NULL, NULL};
    size_t lens[2] = {0, 0};
    struct pollfd pf[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
    int open_fds = 2;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool timed_out = false;
    while (open_fds > 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = timeout_s -
                      ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9);
        if (left <= 0) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        int pr = poll(pf, 2, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (!cli_pipe_append(pf[i].fd, &bufs[i], &lens[i])) {
                close(pf[i].fd);
                pf[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    for (int i = 0; i < 2; i++)
        if (!bufs[i])
            bufs[i] = calloc(1, 1);
    *out = bufs[0];
    *err = bufs[1];
    if (timed_out)
        return -2;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
}

/* The last non-empty line of s into buf. */
static const char *last_line(const char *s, char *buf, size_t len)
{
    size_t n = s ? strlen(s) : 0;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    size_t start = n;
    while (start && s[start - 1] != '\n')
        start--;
    snprintf(buf, len, "%.*s", (int)(n - start), s ? s + start : "");
    return buf;
}

/* The message for a Slurm tool that could not run or failed; EXIT_POOL_SLURM. */
static int slurm_fail(const char *what, const char *tool, int rc, const char *err)
{
    char line[512];
    last_line(err, line, sizeof line);
    if (rc == -1 && errno == ENOENT)
        cli_error("%s: %s not found: Slurm's client tools are not installed here (Debian: "
                  "apt-get install slurm-client), or not on PATH",
                  what, tool);
    else if (rc == -1)
        cli_error("%s: cannot run %s: %s", what, tool, line);
    else if (rc == -2)
        cli_error("%s: %s did not answer within %d s: is slurmctld up and SLURM_CONF right?", what,
                  tool, POOL_TOOL_TIMEOUT_S);
    else
        cli_error("%s: %s failed (exit %d): %s", what, tool, rc, line[0] ? line : "no message");
    return EXIT_POOL_SLURM;
}

/* ---- paths and files ----------------------------------------------------------- */

/* The pool folder as an absolute path (created when create), free(); NULL
 * with a message. */
static char *pool_root(const char *given, bool create, const char *what)
{
    const char *d = given ? given : POOL_DEFAULT_DIR;
    if (strchr(d, '%') || strchr(d, '\n')) {
        cli_error("%s: --dir %s: a pool folder may not hold '%%' (Slurm's file name patterns) "
                  "or a newline",
                  what, d);
        return NULL;
    }
    if (create && !cli_make_dirs(d)) {
        cli_error("%s: cannot create the pool folder %s: %s", what, d, strerror(errno));
        return NULL;
    }
    char *abs = realpath(d, NULL);
    if (!abs && create)
        cli_error("%s: %s: %s", what, d, strerror(errno));
    if (!abs && !create) /* not there: keep the name for messages */
        abs = d[0] == '/' ? strdup(d) : NULL;
    if (!abs && !create) {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd))
            abs = cli_join(cwd, d);
    }
    return abs;
}

static bool job_id_ok(const char *s)
{
    if (!s || !s[0] || strlen(s) > 20)
        return false;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* The JSON file at path, parsed; NULL when missing or not JSON. */
static cJSON *read_json(const char *path)
{
    char *t = cli_read_file(path, CLI_RECORD_MAX);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    return j;
}

static bool write_json(const char *path, const cJSON *j)
{
    char *t = cJSON_Print(j);
    bool ok = t && cli_write_file(path, t);
    cJSON_free(t);
    return ok;
}

static char *task_path(const char *jobdir, int task, const char *name)
{
    char *s = NULL;
    if (asprintf(&s, "%s/task-%d/%s", jobdir, task, name) < 0)
        s = NULL;
    return s;
}

/* ---- the ledger the tasks write to ----------------------------------------- */

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

/* The ledger the tasks get as --ledger (free()): the given one or the
 * default, a file made absolute (the tasks run elsewhere); NULL with a
 * message when it would put a password into the job script. */
static char *task_ledger(cli *c)
{
    char *def = c->ledger_path ? NULL : dg_ledger_default_path();
    const char *p = c->ledger_path ? c->ledger_path : def;
    char *res = NULL;
    if (!p) {
        cli_error("pool submit: cannot tell where the ledger is (set DEVGATE_LEDGER or --ledger)");
    } else if (dg_ledger_is_team(p)) {
        if (uri_has_password(p))
            cli_error("pool submit: the team ledger URI holds a password, which would be written "
                      "into the job script; give it through libpq's own means on the nodes "
                      "(~/.pgpass, a service file or PGPASSWORD) and the URI without it");
        else
            res = strdup(p);
    } else if (p[0] == '/') {
        res = strdup(p);
    } else {
        char cwd[PATH_MAX];
        res = getcwd(cwd, sizeof cwd) ? cli_join(cwd, p) : NULL;
        if (!res)
            cli_error("pool submit: cannot make the ledger path %s absolute: %s", p,
                      strerror(errno));
    }
    dg_string_free(def);
    return res;
}

/* ---- submit ------------------------------------------------------------------ */

typedef struct pool_args {
    const char *dir;
    const char *array;
    int tasks;
    const char *partition;
    const char *time;
    const char *devgate;
    const char *sbatch_opts[16];
    int nsbatch;
} pool_args;

static const char *add_sbatch_opt(const cli_opt *o, const char *value, void *field)
{
    (void)o;
    pool_args *a = field;
    if (!value[0] || value[0] != '-' || a->nsbatch >= 16)
        return "an sbatch option such as --gres=gpu:1 (at most 16)";
    a->sbatch_opts[a->nsbatch++] = value;
    return NULL;
}

/* Verbs a pool task may run: the measuring ones. */
static bool poolable(const char *verb)
{
    static const char *const no[] = {"pool", "remote", "ledger", "report"};
    const cli_verb *v = cli_find_verb(verb);
    if (!v || v->hidden)
        return false;
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (strcmp(verb, no[i]) == 0)
            return false;
    return true;
}

static int pool_submit(cli *c, pool_args *pa, int nrest, char **rest)
{
    if (nrest < 1 || !rest) {
        cli_error("pool submit: no verb given (devgate pool submit [options] -- VERB [options])");
        return EXIT_USAGE;
    }
    if (!poolable(rest[0])) {
        cli_error("pool submit: '%s' is not a verb a pool task runs (env, gate, train, sweep, "
                  "soak, compare, profile, accept or run)",
                  rest[0]);
        return EXIT_USAGE;
    }
    if (nrest > POOL_MAX_ARGS - 16) {
        cli_error("pool submit: more than %d words after --", POOL_MAX_ARGS - 16);
        return EXIT_USAGE;
    }
    if (c->no_ledger) {
        cli_error("pool submit: --no-ledger: every task records its run in the ledger");
        return EXIT_USAGE;
    }
    char spec[64];
    if (pa->array && pa->tasks) {
        cli_error("pool submit: give --tasks N or --array SPEC, not both");
        return EXIT_USAGE;
    }
    if (pa->array)
        snprintf(spec, sizeof spec, "%s", pa->array);
    else
        snprintf(spec, sizeof spec, "0-%d", (pa->tasks ? pa->tasks : 1) - 1);
    if (pa->array && strlen(pa->array) >= sizeof spec) {
        cli_error("pool submit: --array %s is too long", pa->array);
        return EXIT_USAGE;
    }
    int *ids = malloc(POOL_MAX_TASKS * sizeof *ids), nids = 0;
    if (!ids || dg_slurm_array_ids(c->ctx, spec, ids, POOL_MAX_TASKS, &nids) != DG_OK) {
        cli_error("pool submit: --array: %s", ids ? dg_errmsg(c->ctx) : "out of memory");
        free(ids);
        return EXIT_USAGE;
    }
    char *ledger = task_ledger(c);
    char *root = ledger ? pool_root(pa->dir, true, "pool submit") : NULL;
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl > 0)
        self[sl] = '\0';
    const char *devgate = pa->devgate ? pa->devgate : sl > 0 ? self : NULL;
    if (!ledger || !root || !devgate) {
        if (ledger && root)
            cli_error("pool submit: cannot tell where this devgate is; name it with --devgate");
        free(ledger);
        free(root);
        free(ids);
        return EXIT_USAGE;
    }
    if (!dg_ledger_is_team(ledger) && !c->quiet)
        fprintf(stderr,
                "devgate: pool submit: the tasks record into the file %s: on a cluster it must "
                "be on a filesystem every node shares (or use a team ledger postgresql://...)\n",
                ledger);

    /* The script: exec devgate __pool_task --dir ROOT --ledger L -- VERB ARGS */
    const char *words[POOL_MAX_ARGS + 8];
    int nw = 0;
    words[nw++] = devgate;
    words[nw++] = "__pool_task";
    words[nw++] = "--dir";
    words[nw++] = root;
    words[nw++] = "--ledger";
    words[nw++] = ledger;
    words[nw++] = "--";
    for (int i = 0; i < nrest; i++)
        words[nw++] = rest[i];
    words[nw] = NULL;
    char *script = dg_pool_script(words);
    char *tmp = cli_join(root, ".submit-XXXXXX");
    int fd = tmp && script ? mkstemp(tmp) : -1;
    bool wrote = fd >= 0 && write(fd, script, strlen(script)) == (ssize_t)strlen(script);
    if (fd >= 0 && close(fd) != 0)
        wrote = false;
    dg_string_free(script);
    if (!wrote) {
        cli_error("pool submit: cannot write the job script in %s: %s", root, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        free(tmp);
        free(ledger);
        free(root);
        free(ids);
        return EXIT_USAGE;
    }
    chmod(tmp, 0700);

    char a_array[96], a_name[96], a_part[160] = "", a_time[96] = "";
    char *a_out = NULL;
    snprintf(a_array, sizeof a_array, "--array=%s", spec);
    snprintf(a_name, sizeof a_name, "--job-name=devgate-%s", rest[0]);
    if (asprintf(&a_out, "--output=%s/slurm-%%A_%%a.out", root) < 0)
        a_out = NULL;
    const char *sb[40];
    int ns = 0;
    sb[ns++] = "sbatch";
    sb[ns++] = "--parsable";
    sb[ns++] = a_array;
    sb[ns++] = a_name;
    sb[ns++] = a_out ? a_out : "--output=/dev/null";
    if (pa->partition) {
        snprintf(a_part, sizeof a_part, "--partition=%s", pa->partition);
        sb[ns++] = a_part;
    }
    if (pa->time) {
        snprintf(a_time, sizeof a_time, "--time=%s", pa->time);
        sb[ns++] = a_time;
    }
    for (int i = 0; i < pa->nsbatch; i++)
        sb[ns++] = pa->sbatch_opts[i];
    sb[ns++] = tmp;
    sb[ns] = NULL;
    char *out = NULL, *err = NULL;
    int rc = run_tool(sb, POOL_TOOL_TIMEOUT_S, &out, &err);
    char job[32] = "";
    int ret = EXIT_PASS;
    if (rc != 0) {
        ret = slurm_fail("pool submit", "sbatch", rc, err);
    } else {
        size_t jl = strspn(out, "0123456789");
        if (jl == 0 || jl >= sizeof job) {
            char line[256];
            cli_error("pool submit: sbatch printed no job id: '%s'",
                      last_line(out, line, sizeof line));
            ret = EXIT_POOL_SLURM;
        } else {
            memcpy(job, out, jl);
            job[jl] = '\0';
        }
    }
    free(out);
    free(err);
    free(a_out);
    if (ret) {
        unlink(tmp);
        free(tmp);
        free(ledger);
        free(root);
        free(ids);
        return ret;
    }
    /* The job's folder: its manifest and script (the tasks may have made it already). */
    char *jobdir = cli_join(root, job);
    char *sh = jobdir ? cli_join(jobdir, "job.sh") : NULL;
    char *mf = jobdir ? cli_join(jobdir, "job.json") : NULL;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "v", 1);
    cJSON_AddStringToObject(m, "kind", "pool-job");
    cJSON_AddStringToObject(m, "job", job);
    cJSON *ta = cJSON_AddArrayToObject(m, "tasks");
    for (int i = 0; i < nids; i++)
        cJSON_AddItemToArray(ta, cJSON_CreateNumber(ids[i]));
    cJSON *av = cJSON_AddArrayToObject(m, "argv");
    for (int i = 0; i < nrest; i++)
        cJSON_AddItemToArray(av, cJSON_CreateString(rest[i]));
    cJSON_AddStringToObject(m, "verb", rest[0]);
    cJSON_AddStringToObject(m, "ledger", ledger);
    if (pa->partition)
        cJSON_AddStringToObject(m, "partition", pa->partition);
    else
        cJSON_AddNullToObject(m, "partition");
    if (pa->time)
        cJSON_AddStringToObject(m, "time_limit", pa->time);
    else
        cJSON_AddNullToObject(m, "time_limit");
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(m, "submitted", ts);
    cJSON_AddStringToObject(m, "devgate", devgate);
    cJSON_AddStringToObject(m, "dir", jobdir ? jobdir : "");
    bool ok = jobdir && cli_make_dirs(jobdir) && rename(tmp, sh) == 0 && write_json(mf, m);
    if (!ok) {
        cli_error("pool submit: job %s was submitted, but its folder %s could not be written "
                  "(%s); 'pool status %s' still asks Slurm",
                  job, jobdir ? jobdir : root, strerror(errno), job);
        ret = EXIT_USAGE;
        unlink(tmp);
    } else if (c->json) {
        cli_print_json(m, NULL);
    } else {
        char words_s[512] = "";
        size_t off = 0;
        for (int i = 0; i < nrest && off < sizeof words_s; i++) {
            char cell[128];
            off += (size_t)snprintf(words_s + off, sizeof words_s - off, "%s%s", i ? " " : "",
                                    cli_cell(cell, sizeof cell, rest[i]));
        }
        printf("pool job %s: %d task%s of '%s' submitted%s%s\n", job, nids, nids == 1 ? "" : "s",
               words_s, pa->partition ? " to partition " : "", pa->partition ? pa->partition : "");
        printf("  folder %s; 'devgate pool status %s' and 'devgate pool collect %s'%s%s\n", jobdir,
               job, job, pa->dir ? " --dir " : "", pa->dir ? pa->dir : "");
    }
    cJSON_Delete(m);
    free(sh);
    free(mf);
    free(jobdir);
    free(tmp);
    free(ledger);
    free(root);
    free(ids);
    return ret;
}

/* ---- status: Slurm's view and the task folders ----------------------------------- */

typedef struct pool_job {
    char job[32];
    char *root, *jobdir;
    cJSON *manifest;  /* job.json or NULL */
    cJSON *tasks;     /* the merged view, one object per task */
    bool slurm_known; /* scontrol knows the job */
    int pending_or_running, bad, completed;
} pool_job;

static void pool_job_free(pool_job *j)
{
    free(j->root);
    free(j->jobdir);
    cJSON_Delete(j->manifest);
    cJSON_Delete(j->tasks);
}

static const cJSON *by_task(const cJSON *arr, int t)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const cJSON *n = cJSON_GetObjectItem(e, "task");
        if (cJSON_IsNumber(n) && (int)n->valuedouble == t)
            return e;
    }
    return NULL;
}

static void add_str_or_null(cJSON *o, const char *k, const char *v)
{
    if (v)
        cJSON_AddStringToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

static void add_num_or_null(cJSON *o, const char *k, const cJSON *v)
{
    if (cJSON_IsNumber(v))
        cJSON_AddNumberToObject(o, k, v->valuedouble);
    else
        cJSON_AddNullToObject(o, k);
}

/* One task's merged state: Slurm's word when it has the task, else what its
 * folder says, else an inference that says it is one. */
static cJSON *merge_task(pool_job *j, int t, const cJSON *sl)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "task", t);
    char *p_task = task_path(j->jobdir, t, "task.json");
    char *p_exit = task_path(j->jobdir, t, "exit.json");
    cJSON *tj = p_task ? read_json(p_task) : NULL;
    cJSON *ej = p_exit ? read_json(p_exit) : NULL;
    free(p_task);
    free(p_exit);
    const char *fstate = NULL;
    if (ej) {
        const cJSON *es = cJSON_GetObjectItem(ej, "exit_status");
        if (cJSON_IsTrue(cJSON_GetObjectItem(ej, "cancelled")))
            fstate = "cancelled";
        else if (cJSON_IsNumber(es) && es->valuedouble == 0)
            fstate = "completed";
        else
            fstate = "failed";
    }
    const char *state, *detail = NULL, *sstate = sl ? jstr(sl, "slurm_state", NULL) : NULL;
    char dbuf[256] = "";
    if (sl) {
        state = jstr(sl, "state", "unknown");
        if (fstate && (strcmp(state, "running") == 0 || strcmp(state, "pending") == 0))
            detail = "ended; Slurm is finishing it";
        if (strcmp(state, "pending") == 0 && jstr(sl, "reason", NULL)) {
            snprintf(dbuf, sizeof dbuf, "waits: %s", jstr(sl, "reason", ""));
            detail = dbuf;
        }
    } else if (fstate) {
        state = fstate;
        detail = "from its folder (Slurm no longer lists it)";
    } else if (tj) {
        state = j->slurm_known ? "failed" : "unknown";
        detail = "it started, then vanished without an exit record";
    } else if (j->slurm_known) {
        state = "cancelled";
        detail = "before it started (Slurm keeps no record of a pending task it cancelled)";
    } else {
        state = "unknown";
        detail = "Slurm no longer knows the job and the task left no folder";
    }
    cJSON_AddStringToObject(o, "state", state);
    add_str_or_null(o, "slurm_state", sstate);
    add_str_or_null(o, "detail", detail);
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
    const char *node = sl ? jstr(sl, "node", NULL) : NULL;
    if (!node && tj)
        node = jstr(tj, "node", NULL);
    add_str_or_null(o, "node", node);
    add_str_or_null(o, "host", tj ? jstr(tj, "host", NULL) : NULL);
    add_str_or_null(o, "slurm_job_id", sl ? jstr(sl, "job_id", NULL) : NULL);
    cJSON_Delete(tj);
    cJSON_Delete(ej);
    if (strcmp(state, "pending") == 0 || strcmp(state, "running") == 0)
        j->pending_or_running++;
    else if (strcmp(state, "completed") == 0)
        j->completed++;
    else
        j->bad++;
    return o;
}

/* Loads job JOB: its manifest (ROOT/JOB/job.json), Slurm's view, the folders. */
static int pool_load(cli *c, const char *what, const char *dir, const char *job, pool_job *j)
{
    memset(j, 0, sizeof *j);
    if (!job_id_ok(job)) {
        cli_error("%s: '%s' is not a Slurm job id (digits, as pool submit printed)", what,
                  job ? job : "");
        return EXIT_USAGE;
    }
    snprintf(j->job, sizeof j->job, "%s", job);
    j->root = pool_root(dir, false, what);
    j->jobdir = j->root ? cli_join(j->root, job) : NULL;
    if (!j->jobdir)
        return EXIT_USAGE;
    char *mf = cli_join(j->jobdir, "job.json");
    j->manifest = mf ? read_json(mf) : NULL;
    free(mf);
    const char *sc[] = {"scontrol", "-o", "show", "job", job, NULL};
    char *out = NULL, *err = NULL;
    int rc = run_tool(sc, POOL_TOOL_TIMEOUT_S, &out, &err);
    char *parsed = NULL;
    cJSON *sl = NULL;
    if (rc == 0 && dg_slurm_parse_jobs(c->ctx, out, job, &parsed) == DG_OK) {
        sl = cJSON_Parse(parsed);
        j->slurm_known = cJSON_GetArraySize(sl) > 0;
    } else if (rc == 0 || (rc > 0 && strstr(err, "Invalid job id"))) {
        j->slurm_known = false; /* finished long ago (MinJobAge) or never was */
    } else {
        int r = slurm_fail(what, "scontrol", rc, err);
        free(out);
        free(err);
        return r;
    }
    free(out);
    free(err);
    dg_string_free(parsed);
    if (!j->slurm_known && !j->manifest) {
        cli_error("%s: no job %s: Slurm does not know it and %s/job.json does not exist (give "
                  "the pool folder with --dir)",
                  what, job, j->jobdir);
        cJSON_Delete(sl);
        return EXIT_POOL_UNKNOWN;
    }
    /* The tasks: the manifest's list, else what Slurm shows. */
    int ids[POOL_MAX_TASKS], n = 0;
    const cJSON *mt = cJSON_GetObjectItem(j->manifest, "tasks"), *e;
    cJSON_ArrayForEach(e, mt) if (cJSON_IsNumber(e) && n < POOL_MAX_TASKS) ids[n++] =
        (int)e->valuedouble;
    if (!j->manifest)
        cJSON_ArrayForEach(e, sl) if (n < POOL_MAX_TASKS) ids[n++] = (int)jnum(e, "task", 0);
    j->tasks = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(j->tasks, merge_task(j, ids[i], by_task(sl, ids[i])));
    cJSON_Delete(sl);
    return EXIT_PASS;
}

static void exit_text(const cJSON *t, char *buf, size_t len)
{
    const cJSON *x = cJSON_GetObjectItem(t, "exit_status"), *s = cJSON_GetObjectItem(t, "signal");
    if (!cJSON_IsNumber(x))
        snprintf(buf, len, "-");
    else if (cJSON_IsNumber(s) && s->valuedouble != 0)
        snprintf(buf, len, "%d:%d", (int)x->valuedouble, (int)s->valuedouble);
    else
        snprintf(buf, len, "%d", (int)x->valuedouble);
}

/* "4 tasks: 3 completed, 1 cancelled" */
static void counts_text(const cJSON *tasks, char *buf, size_t len)
{
    static const char *const words[] = {"completed", "running",   "pending",
                                        "failed",    "cancelled", "unknown"};
    int n = cJSON_GetArraySize(tasks);
    size_t off = (size_t)snprintf(buf, len, "%d task%s", n, n == 1 ? "" : "s");
    bool first = true;
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        int k = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tasks) if (strcmp(jstr(t, "state", ""), words[w]) == 0) k++;
        if (k && off < len)
            off +=
                (size_t)snprintf(buf + off, len - off, "%s%d %s", first ? ": " : ", ", k, words[w]);
        if (k)
            first = false;
    }
}

static int pool_status(cli *c, const char *dir, const char *job)
{
    pool_job j;
    int rc = pool_load(c, "pool status", dir, job, &j);
    if (rc) {
        pool_job_free(&j);
        return rc;
    }
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", "pool-status");
        cJSON_AddStringToObject(o, "job", j.job);
        cJSON_AddBoolToObject(o, "slurm_knows", j.slurm_known);
        cJSON_AddItemToObject(o, "tasks", cJSON_Duplicate(j.tasks, true));
        cli_print_json(o, NULL);
        cJSON_Delete(o);
    } else {
        char counts[256];
        counts_text(j.tasks, counts, sizeof counts);
        printf("pool job %s: %s%s\n", j.job, counts,
               j.slurm_known ? "" : " (Slurm no longer lists it: states from the task folders)");
        printf("%-5s %-10s %-6s %-16s %s\n", "task", "state", "exit", "node", "detail");
        const cJSON *t;
        cJSON_ArrayForEach(t, j.tasks)
        {
            char ex[32], node[64], det[256];
            exit_text(t, ex, sizeof ex);
            printf("%-5d %-10s %-6s %-16s %s\n", (int)jnum(t, "task", -1), jstr(t, "state", "?"),
                   ex, cli_cell(node, sizeof node, jstr(t, "node", "-")),
                   cli_cell(det, sizeof det, jstr(t, "detail", "")));
        }
    }
    pool_job_free(&j);
    return EXIT_PASS;
}

/* ---- collect ------------------------------------------------------------------ */

/* Makes sure the task's record is in the ledger at path: its own run id when
 * the ledger holds it, else the id an earlier collect gave it, else it is
 * recorded now (with "pool": {...}) and the id kept in the task folder.
 * *id gets the id (free()); returns an exit status. */
static int ensure_recorded(cli *c, dg_ledger *lg, pool_job *j, const cJSON *t, cJSON *rec,
                           char **id, bool *added)
{
    *id = NULL;
    *added = false;
    int task = (int)jnum(t, "task", -1);
    const char *own = jstr(rec, "run_id", NULL);
    char *json = NULL;
    if (own && lg && dg_ledger_show(c->ctx, lg, own, &json) == DG_OK) {
        dg_string_free(json);
        *id = strdup(own);
        return EXIT_PASS;
    }
    char *mark = task_path(j->jobdir, task, "collected");
    char *prev = mark ? cli_read_file(mark, 256) : NULL;
    if (prev) {
        char *nl = strchr(prev, '\n');
        if (nl)
            *nl = '\0';
        if (lg && dg_ledger_show(c->ctx, lg, prev, &json) == DG_OK) {
            dg_string_free(json);
            *id = prev;
            free(mark);
            return EXIT_PASS;
        }
        free(prev);
    }
    cJSON *copy = cJSON_Duplicate(rec, true);
    cJSON_DeleteItemFromObject(copy, "run_id");
    cJSON_DeleteItemFromObject(copy, "pool");
    cJSON *pool = cJSON_AddObjectToObject(copy, "pool");
    cJSON_AddStringToObject(pool, "job", j->job);
    cJSON_AddNumberToObject(pool, "task", task);
    add_str_or_null(pool, "node", jstr(t, "node", NULL));
    add_str_or_null(pool, "task_run_id", own);
    char *text = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    const char *verb = jstr(j->manifest, "verb", "pool");
    int exit_status = (int)jnum(t, "exit_status", 0);
    char *newid = NULL;
    int rc = text ? cli_record(c, verb, text, exit_status, &newid) : EXIT_USAGE;
    cJSON_free(text);
    if (newid) {
        char line[96];
        snprintf(line, sizeof line, "%s\n", newid);
        if (mark && !cli_write_file(mark, line))
            cli_error("pool collect: task %d: could not note its run id in %s (a later collect "
                      "records it again)",
                      task, mark);
        *id = strdup(newid);
        *added = true;
        dg_string_free(newid);
        rc = EXIT_PASS;
    } else if (rc == exit_status) {
        rc = EXIT_USAGE;
    }
    free(mark);
    return rc;
}

static const cJSON *obj(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsObject(v) ? v : NULL;
}

/* The row's columns from a task's record (tolerant: accept, train, ...). */
static void row_from_record(cJSON *row, const cJSON *rec)
{
    const cJSON *fg = obj(rec, "final_gate"), *dec = obj(rec, "decision"), *spec = obj(rec, "spec");
    const char *backend = dec ? jstr(dec, "backend", NULL) : NULL;
    if (!backend && spec)
        backend = jstr(spec, "backend", NULL);
    add_str_or_null(row, "backend", backend);
    const cJSON *b = fg ? cJSON_GetObjectItem(fg, "batch") : NULL;
    if (!cJSON_IsNumber(b) && spec)
        b = cJSON_GetObjectItem(spec, "batch");
    add_num_or_null(row, "batch", b);
    const cJSON *tp = fg ? obj(fg, "throughput") : NULL;
    if (!tp)
        tp = obj(obj(rec, "throughput"), "samples_per_s");
    cJSON_AddItemToObject(row, "throughput", tp ? cJSON_Duplicate(tp, true) : cJSON_CreateObject());
    if (!tp) {
        cJSON *m = cJSON_GetObjectItem(row, "throughput");
        cJSON_AddNullToObject(m, "value");
        cJSON_AddStringToObject(m, "unit", "samples/s");
        cJSON_AddBoolToObject(m, "valid", false);
    }
    const char *verdict = NULL;
    if (fg)
        verdict = cJSON_IsTrue(cJSON_GetObjectItem(fg, "accepted"))    ? "accepted"
                  : cJSON_IsTrue(cJSON_GetObjectItem(fg, "screening")) ? "screening"
                                                                       : "not accepted";
    add_str_or_null(row, "verdict", verdict);
    const char *route = fg ? jstr(fg, "route", NULL) : NULL;
    if (!route && dec)
        route = jstr(dec, "route", NULL);
    add_str_or_null(row, "route", route);
    add_str_or_null(row, "record_host", jstr(rec, "host", NULL));
    const cJSON *bk = obj(rec, "bucket");
    add_str_or_null(row, "bucket_id", bk ? jstr(bk, "id", NULL) : NULL);
}

static int pool_collect(cli *c, const char *dir, const char *job)
{
    pool_job j;
    int rc = pool_load(c, "pool collect", dir, job, &j);
    if (rc) {
        pool_job_free(&j);
        return rc;
    }
    if (!j.manifest) {
        cli_error("pool collect: job %s has no folder %s (its records are there): give the pool "
                  "folder with --dir",
                  j.job, j.jobdir);
        pool_job_free(&j);
        return EXIT_POOL_UNKNOWN;
    }
    /* The ledger: --ledger, else the one the tasks wrote to (borrowed from
     * the manifest until the end of this function). */
    const char *given_ledger = c->ledger_path;
    if (!c->ledger_path && !c->no_ledger)
        c->ledger_path = jstr(j.manifest, "ledger", NULL);
    dg_ledger *lg = NULL;
    if (!c->no_ledger) {
        char *def = c->ledger_path ? NULL : dg_ledger_default_path();
        const char *lp = c->ledger_path ? c->ledger_path : def;
        const char *to = getenv("DEVGATE_LEDGER_TIMEOUT_MS");
        if (!lp || dg_ledger_open(c->ctx, lp, to ? atoi(to) : 0, &lg) != DG_OK) {
            cli_error("pool collect: %s", lp ? dg_errmsg(c->ctx) : "no ledger");
            dg_string_free(def);
            c->ledger_path = given_ledger;
            pool_job_free(&j);
            return EXIT_USAGE;
        }
        dg_string_free(def);
    }
    cJSON *rows = cJSON_CreateArray();
    const cJSON *t, *first_bucket = NULL;
    cJSON *recs[POOL_MAX_TASKS];
    int nrec = 0, added = 0, ledger_bad = 0, differ = 0, no_record = 0;
    cJSON_ArrayForEach(t, j.tasks)
    {
        cJSON *row = cJSON_Duplicate(t, true);
        int task = (int)jnum(t, "task", -1);
        char *rp = task_path(j.jobdir, task, "record.json");
        cJSON *rec = rp ? read_json(rp) : NULL;
        free(rp);
        const char *state = jstr(t, "state", "");
        bool ended = strcmp(state, "pending") != 0 && strcmp(state, "running") != 0;
        if (rec && !cJSON_IsObject(rec)) {
            cJSON_Delete(rec);
            rec = NULL;
        }
        if (rec && ended) {
            row_from_record(row, rec);
            char *id = NULL;
            bool was_added = false;
            if (lg) {
                int erc = ensure_recorded(c, lg, &j, t, rec, &id, &was_added);
                if (erc)
                    ledger_bad++;
            }
            added += was_added;
            add_str_or_null(row, "run_id", id);
            free(id);
            const cJSON *bk = obj(rec, "bucket");
            char differs[256] = "";
            if (bk && !first_bucket)
                first_bucket = bk;
            else if (first_bucket)
                cli_bucket_differs(first_bucket, bk, differs, sizeof differs);
            if (differs[0]) {
                differ++;
                cJSON_AddStringToObject(row, "bucket_differs", differs);
            } else {
                cJSON_AddNullToObject(row, "bucket_differs");
            }
            if (nrec < POOL_MAX_TASKS)
                recs[nrec++] = rec;
            else
                cJSON_Delete(rec);
            rec = NULL;
        } else {
            if (ended && strcmp(state, "completed") == 0)
                no_record++;
            cJSON_AddNullToObject(row, "run_id");
            char *lp = task_path(j.jobdir, task, "task.log");
            char *log = lp ? cli_read_file(lp, 8 << 20) : NULL;
            free(lp);
            char line[256];
            if (log && log[0] && ended)
                add_str_or_null(row, "last_log_line", last_line(log, line, sizeof line));
            free(log);
        }
        cJSON_Delete(rec);
        cJSON_AddItemToArray(rows, row);
    }
    for (int i = 0; i < nrec; i++)
        cJSON_Delete(recs[i]);
    dg_ledger_close(lg);

    int ret = EXIT_PASS;
    if (j.pending_or_running)
        ret = EXIT_POOL_RUNNING;
    else if (j.bad || no_record)
        ret = EXIT_POOL_TASKS;
    else if (differ)
        ret = EXIT_POOL_BUCKET;
    else if (ledger_bad)
        ret = EXIT_USAGE;
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", "pool-collect");
        cJSON_AddStringToObject(o, "job", j.job);
        cJSON_AddItemToObject(o, "argv",
                              cJSON_Duplicate(cJSON_GetObjectItem(j.manifest, "argv"), true));
        add_str_or_null(o, "ledger", c->no_ledger ? NULL : c->ledger_path);
        cJSON_AddBoolToObject(o, "same_bucket", differ == 0);
        cJSON_AddNumberToObject(o, "recorded_now", added);
        cJSON_AddItemToObject(o, "tasks", rows);
        rows = NULL;
        cJSON_AddNumberToObject(o, "exit_status", ret);
        cli_print_json(o, NULL);
        cJSON_Delete(o);
    } else {
        char counts[256], words_s[512] = "";
        counts_text(j.tasks, counts, sizeof counts);
        size_t off = 0;
        const cJSON *w;
        cJSON_ArrayForEach(w, cJSON_GetObjectItem(j.manifest, "argv"))
        {
            char cell[128];
            if (cJSON_IsString(w) && off < sizeof words_s)
                off += (size_t)snprintf(words_s + off, sizeof words_s - off, "%s%s", off ? " " : "",
                                        cli_cell(cell, sizeof cell, w->valuestring));
        }
        printf("pool job %s: '%s', %s\n", j.job, words_s, counts);
        printf("%-5s %-16s %-10s %-5s %-8s %-6s %-18s %-24s %s\n", "task", "node", "state", "exit",
               "backend", "batch", "throughput", "verdict", "run id");
        cJSON_ArrayForEach(t, rows)
        {
            char ex[32], node[64], be[32], batch[16], tp[48], verdict[64], id[64];
            exit_text(t, ex, sizeof ex);
            const cJSON *m = cJSON_GetObjectItem(t, "throughput");
            double v = jmetric(t, "throughput");
            if (!m)
                snprintf(tp, sizeof tp, "-");
            else if (isnan(v))
                snprintf(tp, sizeof tp, "not reported");
            else
                snprintf(tp, sizeof tp, "%.1f %s", v, jstr(m, "unit", ""));
            const cJSON *bt = cJSON_GetObjectItem(t, "batch");
            if (cJSON_IsNumber(bt))
                snprintf(batch, sizeof batch, "%d", (int)bt->valuedouble);
            else
                snprintf(batch, sizeof batch, "-");
            const char *vd = jstr(t, "verdict", NULL), *route = jstr(t, "route", NULL);
            if (vd)
                snprintf(verdict, sizeof verdict, "%s%s%s", vd, route ? ", route " : "",
                         route ? route : "");
            else
                snprintf(verdict, sizeof verdict, "%s", route ? route : "-");
            printf("%-5d %-16s %-10s %-5s %-8s %-6s %-18s %-24s %s\n", (int)jnum(t, "task", -1),
                   cli_cell(node, sizeof node, jstr(t, "node", "-")), jstr(t, "state", "?"), ex,
                   cli_cell(be, sizeof be, jstr(t, "backend", "-")), batch, tp,
                   cli_cell(verdict, sizeof verdict, verdict),
                   cli_cell(id, sizeof id, jstr(t, "run_id", "-")));
            const char *bd = jstr(t, "bucket_differs", NULL), *det = jstr(t, "detail", NULL),
                       *ll = jstr(t, "last_log_line", NULL);
            char cell[300];
            if (bd)
                printf("      ran on another input bucket than the first task (%s differ)\n",
                       cli_cell(cell, sizeof cell, bd));
            if (det && strcmp(jstr(t, "state", ""), "completed") != 0)
                printf("      %s\n", cli_cell(cell, sizeof cell, det));
            if (ll)
                printf("      last log line: %s\n", cli_cell(cell, sizeof cell, ll));
        }
        if (nrec)
            printf("input bucket: %s\n",
                   differ ? "the tasks differ (exit 15): they are not comparable side by side"
                          : "every task with a record ran on the same one");
        if (added)
            printf("%d record%s entered into the ledger now\n", added, added == 1 ? "" : "s");
        if (ret == EXIT_POOL_RUNNING)
            printf("tasks still pending or running: collect again later\n");
    }
    cJSON_Delete(rows);
    c->ledger_path = given_ledger;
    pool_job_free(&j);
    return ret;
}

/* ---- the verb ------------------------------------------------------------------ */

static const cli_opt pool_opts[] = {
    {CLI_STR, "--dir", NULL, "DIR", "./" POOL_DEFAULT_DIR, NULL,
     "the pool folder: job scripts, task records and logs (shared by the nodes)",
     offsetof(pool_args, dir), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_INT, "--tasks", NULL, "N", "1", "tasks", "submit: tasks in the job array (0..N-1)",
     offsetof(pool_args, tasks), 1, POOL_MAX_TASKS, NULL, NULL, NULL},
    {CLI_STR, "--array", NULL, "SPEC", NULL, NULL,
     "submit: Slurm array spec instead of --tasks (0-3, 1,3,5-7, 0-7%2)",
     offsetof(pool_args, array), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_STR, "--partition", NULL, "P", "Slurm's default", NULL, "submit: the partition",
     offsetof(pool_args, partition), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_STR, "--time", NULL, "T", "the partition's", NULL,
     "submit: each task's time limit (Slurm's forms: 30, 1:00:00)", offsetof(pool_args, time), 0, 0,
     cli_nonempty, NULL, NULL},
    {CLI_STR, "--devgate", NULL, "PATH", "this devgate", NULL, "submit: devgate on the nodes",
     offsetof(pool_args, devgate), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_FUNC, "--sbatch-option", NULL, "OPT", NULL, NULL,
     "submit: one more sbatch option, one word (--gres=gpu:1; repeatable)", 0, 0, 0, add_sbatch_opt,
     NULL, NULL},
    CLI_OPTS_END,
};

const cli_verb cli_verb_pool = {
    .name = "pool",
    .args = "submit [options] -- VERB [options] | status JOB | collect JOB",
    .summary = "a pool on Slurm: submit VERB as a job array (each task runs it on its node into "
               "the ledger), show the tasks' states, collect their records into one "
               "side-by-side report",
    .exits = "0 done (collect: every task completed, one input bucket), 2 usage or ledger "
             "error, 15 the tasks ran on different input buckets, 20 Slurm unusable (tools "
             "missing, controller down, sbatch refused), 21 no such job, 22 a task failed, was "
             "cancelled or is unknown, 23 tasks still pending or running",
    .example = "devgate pool submit --tasks 4 --partition gpu -- accept --quick",
    .tables = {pool_opts, cli_common_opts},
    .titles = {"pool options", "common options"},
    .run = cmd_pool,
};

int cmd_pool(cli *c, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            cli_verb_help(&cli_verb_pool, stdout);
            return EXIT_PASS;
        }
        cli_error("pool: use 'pool submit [options] -- VERB [options]', 'pool status JOB' or "
                  "'pool collect JOB' (devgate pool --help)");
        return EXIT_USAGE;
    }
    const char *sub = argv[1];
    pool_args pa = {0};
    bool submit = strcmp(sub, "submit") == 0;
    char *pos[1];
    cli_args a = {.pos = pos, .max = submit ? -1 : 1};
    int r = cli_parse(c, &cli_verb_pool, argc - 1, argv + 1, (void *const[]){&pa, c}, &a);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    if (submit)
        return pool_submit(c, &pa, a.nrest, a.rest);
    if (pa.tasks || pa.array || pa.partition || pa.time || pa.devgate || pa.nsbatch) {
        cli_error("pool %s: --tasks, --array, --partition, --time, --devgate and "
                  "--sbatch-option belong to pool submit",
                  sub);
        return EXIT_USAGE;
    }
    if (strcmp(sub, "status") == 0 && a.npos == 1)
        return pool_status(c, pa.dir, pos[0]);
    if (strcmp(sub, "collect") == 0 && a.npos == 1)
        return pool_collect(c, pa.dir, pos[0]);
    cli_error("pool: use 'pool submit [options] -- VERB [options]', 'pool status JOB' or 'pool "
              "collect JOB' (devgate pool --help)");
    return EXIT_USAGE;
}

/* ---- the task side: devgate __pool_task --dir ROOT --ledger L -- VERB ARGS ---- */

static volatile sig_atomic_t g_task_signal;
static volatile pid_t g_task_child;

static void task_on_signal(int sig)
{
    g_task_signal = sig;
    if (g_task_child > 0)
        kill(g_task_child, sig);
}

const cli_verb cli_verb_pool_task = {
    .name = "__pool_task",
    .summary = "one task of a pool job on its node (devgate pool submit writes the call)",
    .exits = "the verb's own; 2 usage",
    .example = "devgate __pool_task --dir DIR --ledger L -- accept --quick",
    .run = cmd_pool_task,
    .hidden = true,
};

int cmd_pool_task(cli *c, int argc, char **argv)
{
    const char *root = NULL, *ledger = NULL;
    int i = 1;
    for (; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (strcmp(argv[i], "--dir") == 0)
            root = argv[i + 1];
        else if (strcmp(argv[i], "--ledger") == 0)
            ledger = argv[i + 1];
        else
            break;
    }
    if (!root || i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc ||
        argc - i > POOL_MAX_ARGS) {
        cli_error("__pool_task: use '__pool_task --dir DIR [--ledger L] -- VERB ARGS'");
        return EXIT_USAGE;
    }
    i++;
    const char *job = getenv("SLURM_ARRAY_JOB_ID");
    if (!job || !job[0])
        job = getenv("SLURM_JOB_ID");
    const char *task_s = getenv("SLURM_ARRAY_TASK_ID");
    long task = 0;
    if (!job_id_ok(job) || (task_s && !cli_parse_long(task_s, 0, INT_MAX, &task))) {
        cli_error("__pool_task: not inside a Slurm job (SLURM_ARRAY_JOB_ID / SLURM_JOB_ID and "
                  "SLURM_ARRAY_TASK_ID say which task this is)");
        return EXIT_USAGE;
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *node = getenv("SLURMD_NODENAME");
    char *dir = NULL;
    if (asprintf(&dir, "%s/%s/task-%ld", root, job, task) < 0)
        dir = NULL;
    if (!dir || !cli_make_dirs(dir) || chdir(dir) != 0) {
        cli_error("__pool_task: cannot use the task folder %s: %s", dir ? dir : root,
                  strerror(errno));
        free(dir);
        return EXIT_USAGE;
    }
    free(dir);
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *tj = cJSON_CreateObject();
    cJSON_AddStringToObject(tj, "job", job);
    cJSON_AddNumberToObject(tj, "task", (double)task);
    cJSON_AddStringToObject(tj, "node", node && node[0] ? node : host);
    cJSON_AddStringToObject(tj, "host", host);
    cJSON_AddStringToObject(tj, "started", ts);
    cJSON_AddNumberToObject(tj, "pid", getpid());
    write_json("task.json", tj);
    cJSON_Delete(tj);

    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        cli_error("__pool_task: cannot tell where this devgate is");
        return EXIT_USAGE;
    }
    self[sl] = '\0';
    const char *args[POOL_MAX_ARGS + 8];
    int n = 0;
    args[n++] = self;
    args[n++] = "--json";
    if (ledger) {
        args[n++] = "--ledger";
        args[n++] = ledger;
    }
    for (int k = i; k < argc; k++)
        args[n++] = argv[k];
    args[n] = NULL;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = task_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "record.json.part", O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&fa, 2, "task.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGHUP);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int src = posix_spawn(&pid, self, &fa, &at, (char *const *)args, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    int code = 127, sig = 0;
    if (src != 0) {
        cli_error("__pool_task: cannot start %s: %s", self, strerror(src));
    } else {
        g_task_child = pid;
        if (g_task_signal) /* arrived before the child was known */
            kill(pid, g_task_signal);
        int ws = 0;
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
        }
        g_task_child = 0;
        if (WIFEXITED(ws))
            code = WEXITSTATUS(ws);
        else if (WIFSIGNALED(ws)) {
            sig = WTERMSIG(ws);
            code = 128 + sig;
        }
    }
    struct stat sb;
    if (stat("record.json.part", &sb) == 0 && sb.st_size > 0)
        rename("record.json.part", "record.json");
    else
        unlink("record.json.part");
    /* The ledger's copy learns which pool task it was: "pool": {job, task, node}. */
    cJSON *rec = ledger ? read_json("record.json") : NULL;
    const char *rid = jstr(rec, "run_id", NULL);
    dg_ledger *lg = NULL;
    char *stored = NULL;
    const char *to = getenv("DEVGATE_LEDGER_TIMEOUT_MS");
    if (rid && dg_ledger_open(c->ctx, ledger, to ? atoi(to) : 0, &lg) == DG_OK &&
        dg_ledger_show(c->ctx, lg, rid, &stored) == DG_OK) {
        cJSON *entry = cJSON_Parse(stored);
        cJSON *r = cJSON_GetObjectItem(entry, "record");
        if (cJSON_IsObject(r)) {
            cJSON_DeleteItemFromObject(r, "pool");
            cJSON *pool = cJSON_AddObjectToObject(r, "pool");
            cJSON_AddStringToObject(pool, "job", job);
            cJSON_AddNumberToObject(pool, "task", (double)task);
            cJSON_AddStringToObject(pool, "node", node && node[0] ? node : host);
            char *text = cJSON_PrintUnformatted(r);
            if (!text || dg_ledger_update(c->ctx, lg, rid, (int)jnum(entry, "exit_status", code),
                                          text) != DG_OK)
                cli_error("__pool_task: run %s: the pool task could not be noted in the ledger: "
                          "%s",
                          rid, dg_errmsg(c->ctx));
            cJSON_free(text);
        }
        cJSON_Delete(entry);
    } else if (rid) {
        cli_error("__pool_task: run %s: %s", rid, dg_errmsg(c->ctx));
    }
    dg_string_free(stored);
    dg_ledger_close(lg);
    cJSON_Delete(rec);
    now = time(NULL);
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *ej = cJSON_CreateObject();
    cJSON_AddNumberToObject(ej, "exit_status", code);
    if (sig)
        cJSON_AddNumberToObject(ej, "signal", sig);
    else
        cJSON_AddNullToObject(ej, "signal");
    int got = g_task_signal;
    cJSON_AddBoolToObject(ej, "cancelled", got == SIGTERM || got == SIGINT || got == SIGHUP);
    if (got)
        cJSON_AddNumberToObject(ej, "received_signal", got);
    cJSON_AddStringToObject(ej, "ended", ts);
    write_json("exit.json", ej);
    cJSON_Delete(ej);
    return code;
}
