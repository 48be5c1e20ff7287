/* The environment proof (method step 1): host facts, the libraries and
 * backends devgate talks to, and optionally a Python interpreter. */
#include "env/env.h"
#include "steps.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dg_buildinfo.h"

const char *dg_build_commit(void)
{
    return DG_BUILD_COMMIT;
}

const char *dg_build_compiler(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "GCC " __VERSION__;
#else
    return "unknown";
#endif
}

const char *dg_build_backends(void)
{
    return DG_BACKENDS_STR;
}

static cJSON *libraries_json(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "openblas", openblas_get_config());
    cJSON_AddStringToObject(o, "sqlite", sqlite3_libversion());
    cJSON_AddStringToObject(o, "cjson", cJSON_Version());
    cJSON_AddStringToObject(o, "openssl", OpenSSL_version(OPENSSL_VERSION));
    return o;
}

/* One backend's probe (built, available, devices), in a thread of its own:
 * a cold CUDA runtime and an OpenCL platform compiling its kernels each take
 * seconds on a fresh machine, and neither waits for the other or for the
 * host facts. Its own context: the caller's is not shared between threads. */
typedef struct be_probe {
    pthread_t thread;
    bool started;     /* in a thread of its own (else run in turn at the join) */
    const char *name; /* the backend's */
    cJSON *out;       /* its entry */
    double wall;      /* s */
} be_probe;

static void *be_probe_run(void *arg)
{
    double t0 = dg_now();
    be_probe *p = arg;
    dg_ctx *c = dg_ctx_new();
    if (c)
        p->out = dg_gate_backend(c, p->name, NULL, NULL);
    dg_ctx_free(c);
    p->wall = dg_now() - t0;
    return NULL;
}

/* Adds each backend's entry, in the table's order, with its probe's wall. */
static void be_probes_join(be_probe *p, size_t n, cJSON *arr)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i].started)
            pthread_join(p[i].thread, NULL);
        else
            be_probe_run(&p[i]); /* no thread to be had: here, in turn */
        if (!p[i].out)
            continue;
        cJSON_AddItemToObject(p[i].out, "wall", dg_json_metric(p[i].wall, true, "s"));
        cJSON_AddItemToArray(arr, p[i].out);
    }
}

/* The proof itself, in whichever process runs it; self_pid is devgate's. */
static dg_status env_collect(dg_ctx *ctx, const dg_env_opts *opts, int self_pid, char **json)
{
    *json = NULL;
    /* The host facts first: their busy processes are sampled over a window
     * the backends' work must not load (on two cores it would push the
     * machine's own processes out of the list). */
    double start = dg_now();
    cJSON *facts = dg_env_sysinfo(ctx, opts ? opts->cwd : NULL, self_pid);
    double host_wall = dg_now() - start;
    if (!facts)
        return dg_fail(ctx, DG_ERR_NOMEM, "env: out of memory");
    be_probe probes[8] = {{0}};
    size_t nprobe = dg_backend_names_count < 8 ? dg_backend_names_count : 8;
    for (size_t i = 0; i < nprobe; i++) {
        probes[i].name = dg_backend_names[i];
        probes[i].started = pthread_create(&probes[i].thread, NULL, be_probe_run, &probes[i]) == 0;
    }
    /* Schema fields first in the printed record, then the host facts. */
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "v", 1);
    cJSON_AddStringToObject(root, "kind", "env");
    while (facts->child) {
        cJSON *item = facts->child;
        const char *key = item->string;
        cJSON_AddItemToObject(root, key, cJSON_DetachItemViaPointer(facts, item));
    }
    cJSON_Delete(facts);

    cJSON *dg = cJSON_AddObjectToObject(root, "devgate");
    cJSON_AddStringToObject(dg, "version", DG_VERSION);
    cJSON_AddStringToObject(dg, "commit", dg_build_commit());
    cJSON_AddStringToObject(dg, "compiler", dg_build_compiler());
    cJSON_AddStringToObject(dg, "backends_built", dg_build_backends());
    cJSON_AddItemToObject(root, "libraries", libraries_json());

    cJSON *be = cJSON_AddArrayToObject(root, "backends");
    double py_wall = NAN;
    if (opts && opts->python) { /* while the backends' threads still work */
        cJSON *arch = cJSON_GetObjectItem(root, "arch");
        const char *host = cJSON_GetStringValue(cJSON_GetObjectItem(arch, "host"));
        double p0 = dg_now();
        cJSON *py =
            dg_env_python(ctx, opts->python, opts->python_timeout_s, host ? host : "unknown");
        py_wall = dg_now() - p0;
        if (py)
            cJSON_AddItemToObject(root, "python", py);
    }
    be_probes_join(probes, nprobe, be);
    cJSON *w = cJSON_AddObjectToObject(root, "walls");
    cJSON_AddItemToObject(w, "host", dg_json_metric(host_wall, true, "s"));
    cJSON_AddItemToObject(w, "python", dg_json_metric(py_wall, isfinite(py_wall), "s"));
    cJSON_AddItemToObject(w, "all", dg_json_metric(dg_now() - start, true, "s"));
    cJSON_AddStringToObject(w, "note",
                            "the backends' probes run in threads after the host facts, beside "
                            "each other and the interpreter, so their walls overlap");
    *json = dg_json_print(root);
    cJSON_Delete(root);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "env: out of memory printing the record");
}

/* ---- in a child process ------------------------------------------------------- */

/* Gating every backend maps its driver into the process that does it (PoCL
 * brings LLVM and clang: 300 MB resident here; the CUDA plug-in its runtime).
 * `devgate run` goes on to supervise a program on a small machine, so the
 * proof runs in a forked child and only its record comes back: the parent
 * never maps a driver, and a driver that crashes while it is probed ends the
 * child, not devgate. The child answers on a pipe: the status as a decimal
 * line, the message line, then the record. */
#define ENV_ANSWER_MAX ((size_t)64 << 20)

static void child_answer(int fd, dg_ctx *ctx, const dg_env_opts *opts, int self_pid)
{
    char *json = NULL;
    dg_status st = env_collect(ctx, opts, self_pid, &json);
    char head[32 + DG_ERRMSG_MAX];
    char msg[DG_ERRMSG_MAX];
    dg_copy_clean(msg, sizeof msg, st == DG_OK ? "" : dg_errmsg(ctx));
    for (char *c = msg; *c; c++)
        if (*c == '\n')
            *c = ' ';
    int n = snprintf(head, sizeof head, "%d\n%s\n", (int)st, msg);
    bool ok = dg_write_all(fd, head, (size_t)n);
    if (ok && json)
        dg_write_all(fd, json, strlen(json));
    dg_string_free(json);
}

dg_status dg_env_run(dg_ctx *ctx, const dg_env_opts *opts, char **json)
{
    *json = NULL;
    int self = (int)getpid();
    int fds[2];
    if (pipe(fds) != 0)
        return env_collect(ctx, opts, self, json);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return env_collect(ctx, opts, self, json);
    }
    if (pid == 0) {
        close(fds[0]);
        child_answer(fds[1], ctx, opts, self);
        _exit(0);
    }
    close(fds[1]);
    dg_capbuf b = {.cap = ENV_ANSWER_MAX};
    while (!dg_capbuf_drain(fds[0], &b)) /* blocking: true at the end of the answer */
        ;
    close(fds[0]);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
        ;
    char *text = b.data;
    char *nl1 = text ? strchr(text, '\n') : NULL;
    char *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
    if (!nl2 || b.truncated) {
        dg_free(b.data);
        if (WIFSIGNALED(wst))
            return dg_fail(ctx, DG_ERR_IO,
                           "env: the environment proof's process died of signal %d "
                           "(a driver that crashed while it was probed?)",
                           WTERMSIG(wst));
        return dg_fail(ctx, DG_ERR_IO, "env: the environment proof's process gave no answer%s",
                       b.truncated ? " under 64 MiB" : "");
    }
    *nl1 = *nl2 = '\0';
    dg_status st = (dg_status)atoi(text);
    if (nl2[1]) {
        *json = dg_strdup(nl2 + 1);
        if (!*json)
            st = DG_ERR_NOMEM;
    }
    if (st != DG_OK)
        dg_fail(ctx, st, "%s", nl1[1] ? nl1 + 1 : "env: failed");
    dg_free(b.data);
    return st;
}
