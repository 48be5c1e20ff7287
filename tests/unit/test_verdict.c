/* Verdicts that hold, end to end on this machine:
 *  - the BLAS identity: OpenBLAS's own kernel is named and cpu-baseline-unfair
 *    stays silent about the kernel; the test then runs itself again with
 *    OPENBLAS_CORETYPE=Prescott (OpenBLAS reads it when it loads), and there
 *    the generic kernel is named and cpu-baseline-unfair fires with its fix;
 *  - contention seen while it happens: a bounded CPU hog of the test's own
 *    (named dg_test_hog) runs during a small compare, and `contended` names it;
 *  - the measurement lock: a second holder waits, and the wait is recorded.
 * Each gate or compare record is spliced into the healthy evidence record
 * (tests/data/records/healthy.json) and judged by dg_diagnose. */
#include "core/core.h"
#include "core/json.h"
#include "measure/measure.h"

#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static char *healthy_text;

/* The healthy record with section `name` (or gate.backends[0] when name is
 * "gate-cpu") replaced by json, diagnosed; NULL on failure. */
static cJSON *judge_with(const char *name, const char *json, const char *overrides)
{
    cJSON *rec = cJSON_Parse(healthy_text), *sec = cJSON_Parse(json);
    if (!rec || !sec) {
        cJSON_Delete(rec);
        cJSON_Delete(sec);
        return NULL;
    }
    if (!strcmp(name, "gate-cpu")) {
        cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(sec, "backends"), 0);
        cJSON *gb = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "gate"), "backends");
        cJSON_ReplaceItemInArray(gb, 0, cJSON_Duplicate(b, true));
        cJSON_Delete(sec);
        /* Judged on the kernel, not on the fixture's threads. */
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "compare"), "spec"),
                                  "threads", cJSON_CreateNumber(0));
    } else {
        cJSON_ReplaceItemInObject(rec, name, sec);
    }
    char *text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    dg_ctx *ctx = dg_ctx_new();
    char *out = NULL;
    dg_status st = dg_diagnose(ctx, text, overrides, &out);
    CHECK_MSG(st == DG_OK, "diagnose: %s", dg_errmsg(ctx));
    cJSON_free(text);
    dg_ctx_free(ctx);
    cJSON *r = out ? cJSON_Parse(out) : NULL;
    dg_string_free(out);
    return r;
}

static const cJSON *finding(const cJSON *out, const char *id)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(out, "findings"))
    {
        const char *fid = dg_jstr(f, "id");
        if (fid && !strcmp(fid, id))
            return f;
    }
    return NULL;
}

static char *gate_cpu_json(void)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_gate_opts go = {.backends = "cpu", .seed = 1};
    char *json = NULL;
    dg_gate_verdict v;
    dg_status st = dg_gate_run(ctx, &go, &json, &v);
    CHECK_MSG(st == DG_OK, "gate: %s", dg_errmsg(ctx));
    dg_ctx_free(ctx);
    return json;
}

/* In the child run with OPENBLAS_CORETYPE=Prescott: the generic kernel fires. */
static int prescott_child(void)
{
    char *json = gate_cpu_json();
    cJSON *g = json ? cJSON_Parse(json) : NULL;
    const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "backends"), 0);
    const char *kernel = dg_jstr(b, "blas.kernel");
    CHECK_MSG(kernel && !strcmp(kernel, "Prescott"), "kernel %s", kernel ? kernel : "(none)");
    CHECK(dg_jbool(b, "blas.generic_kernel") == 1);
    cJSON *out = json ? judge_with("gate-cpu", json, NULL) : NULL;
    const cJSON *f = finding(out, "cpu-baseline-unfair");
    CHECK_MSG(f != NULL, "cpu-baseline-unfair did not fire under OPENBLAS_CORETYPE=Prescott");
    const char *title = dg_jstr(f, "title"), *action = dg_jstr(f, "action");
    CHECK_MSG(title && strstr(title, "Prescott"), "title: %s", title ? title : "(none)");
    CHECK_MSG(action && strstr(action, "OPENBLAS_CORETYPE"), "action: %s",
              action ? action : "(none)");
    /* The decision never quotes a bare "N x cpu" over the unfair baseline. */
    int quoted = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, dg_jpath(out, "decision.reasons"))
    {
        const char *t = cJSON_GetStringValue(r);
        if (t && strstr(t, "x cpu")) {
            quoted++;
            CHECK_MSG(strstr(t, "cpu-baseline-unfair") != NULL, "unqualified: %s", t);
        }
    }
    CHECK_MSG(quoted > 0, "the decision quotes no speedup (route %s)",
              dg_jstr(out, "decision.route") ? dg_jstr(out, "decision.route") : "(none)");
    cJSON_Delete(out);
    cJSON_Delete(g);
    dg_string_free(json);
    CHECK_DONE();
}

static void check_blas(const char *self)
{
    char *json = gate_cpu_json();
    cJSON *g = json ? cJSON_Parse(json) : NULL;
    const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "backends"), 0);
    const char *lib = dg_jstr(b, "blas.library"), *kernel = dg_jstr(b, "blas.kernel");
    CHECK_MSG(lib && !strcmp(lib, "OpenBLAS"), "library %s", lib ? lib : "(none)");
    CHECK(kernel != NULL);
    CHECK(dg_jnum(b, "peak.fp32") > 0 && dg_jnum(b, "matmul.fraction_of_peak") > 0);
    CHECK(dg_jbool(b, "matmul.window.others_cpus.valid") == 1);
    CHECK_STR(dg_jstr(b, "matmul.lock.state"), "held");
    bool x86 = dg_jnum(b, "blas.kernel_vector_bits") > 0;
    if (getenv("DG_VERDICT_VERBOSE"))
        fprintf(stderr, "kernel %s, %.1f of %.1f GFLOP/s, others %.2f cpus\n", kernel,
                dg_jnum(b, "matmul.gflops"), dg_jnum(b, "peak.fp32"),
                dg_jnum(b, "matmul.window.others_cpus"));
    /* The right kernel: not generic, and the rule does not blame the kernel
     * (a low figure under contention is contended's, not this rule's). */
    CHECK(dg_jbool(b, "blas.generic_kernel") == 0);
    cJSON *out = json ? judge_with("gate-cpu", json, NULL) : NULL;
    const cJSON *f = finding(out, "cpu-baseline-unfair");
    const char *title = dg_jstr(f, "title");
    CHECK_MSG(!f || (title && !strstr(title, "kernel (")), "the right kernel was blamed: %s",
              title ? title : "");
    cJSON_Delete(out);
    cJSON_Delete(g);
    dg_string_free(json);

    if (!x86)
        return; /* OPENBLAS_CORETYPE=Prescott exists on x86 only */
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OPENBLAS_CORETYPE", "Prescott", 1);
        setenv("DG_VERDICT_CHILD", "prescott", 1);
        execl("/proc/self/exe", self, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the Prescott run failed (status %d)",
              status);
}

static void *spin(void *arg)
{
    volatile unsigned long x = 0;
    for (;;)
        x++;
    return arg;
}

/* A busy loop named dg_test_hog, ended by the test or by SIGALRM after 60 s.
 * Started through an intermediate child that exits, so the hog is not our
 * child (measurements leave their own children out of "others"). */
static pid_t start_hog(void)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t mid = fork();
    if (mid == 0) {
        pid_t hog = fork();
        if (hog == 0) {
            close(fd[0]);
            close(fd[1]);
            prctl(PR_SET_NAME, "dg_test_hog", 0, 0, 0);
            alarm(60);
            /* Four spinning threads: on a machine shared by many busy
             * processes one thread's share could be lost among them. */
            pthread_t t;
            for (int i = 0; i < 3; i++)
                pthread_create(&t, NULL, spin, NULL);
            spin(NULL);
        }
        (void)!write(fd[1], &hog, sizeof hog);
        _exit(0);
    }
    pid_t hog = -1;
    if (mid > 0) {
        if (read(fd[0], &hog, sizeof hog) != (ssize_t)sizeof hog)
            hog = -1;
        waitpid(mid, NULL, 0);
    }
    close(fd[0]);
    close(fd[1]);
    return hog;
}

static void check_contended(void)
{
    /* The window on its own: the hog is seen with about one CPU. */
    pid_t hog = start_hog();
    CHECK(hog > 0);
    usleep(100000);
    dg_window *w = dg_window_begin();
    usleep(700000); /* idle: the hog has what the machine's other load leaves it */
    cJSON *wj = dg_window_end(w);
    dg_window_free(w);
    bool seen = false;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(wj, "top"))
    {
        if (dg_jstr(p, "name") && !strcmp(dg_jstr(p, "name"), "dg_test_hog"))
            seen = dg_jnum(p, "cpu_percent") > 5;
    }
    CHECK_MSG(seen, "the hog is not among the window's top processes");
    CHECK(dg_jnum(wj, "others_cpus") > 0.05);
    cJSON_Delete(wj);

    /* A small compare beside it: contended names it. */
    dg_ctx *ctx = dg_ctx_new();
    dg_compare_opts co = {
        .train = DG_TRAIN_OPTS_INIT, .batches = {16}, .steps = 5, .repetitions = 2};
    co.train.model = "mlp";
    co.train.backend = "opencl";
    co.train.threads = 1;
    co.train.seed = 1;
    char *json = NULL;
    dg_status st = dg_compare_run(ctx, &co, &json);
    kill(hog, SIGKILL); /* not our child: init reaps it */
    if (st == DG_ERR_UNAVAILABLE) {
        fprintf(stderr, "opencl not available: the compare part is skipped\n");
        dg_ctx_free(ctx);
        return;
    }
    CHECK_MSG(st == DG_OK, "compare: %s", dg_errmsg(ctx));
    /* This machine may be shared by many more CPU-bound processes than it has
     * cores, each getting a small share: name every process above 5%. */
    cJSON *out = json ? judge_with("compare", json, "busy_process_cpu_pct=5") : NULL;
    const cJSON *f = finding(out, "contended");
    const char *title = dg_jstr(f, "title"), *hyp = dg_jstr(f, "hypothesis");
    CHECK_MSG(f != NULL, "contended did not fire beside the hog");
    /* Named among the busy processes (the title has room for the top 4; on a
     * shared machine the hog may share the CPUs with more). */
    char *ft = f ? cJSON_PrintUnformatted(f) : NULL;
    CHECK_MSG(ft && strstr(ft, "dg_test_hog (pid"), "finding: %s", ft ? ft : "(none)");
    cJSON_free(ft);
    CHECK_MSG(hyp && strstr(hyp, "compare b16"), "hypothesis: %s", hyp ? hyp : "(none)");
    if (getenv("DG_VERDICT_VERBOSE"))
        fprintf(stderr, "%s\n%s\n", title ? title : "", hyp ? hyp : "");
    cJSON_Delete(out);
    dg_string_free(json);
    dg_ctx_free(ctx);
}

static void check_lock(void)
{
    char path[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/dg-test-lock-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    setenv("DEVGATE_MEASURE_LOCK", path, 1);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dg_mlock l;
        dg_measure_lock(&l, 10, NULL);
        (void)!write(ready[1], "x", 1);
        usleep(400000);
        bool held = l.held;
        dg_measure_unlock(&l);
        _exit(held ? 0 : 1);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    dg_mlock l;
    dg_measure_lock(&l, 10, NULL);
    CHECK(l.held && l.contended);
    CHECK_MSG(l.waited_s > 0.2, "waited %.3f s", l.waited_s);
    /* Nested takes in one process count, without waiting for ourselves. */
    dg_mlock inner;
    dg_measure_lock(&inner, 1, NULL);
    CHECK(inner.held && inner.nested && inner.waited_s < 0.5);
    dg_measure_unlock(&inner);
    cJSON *j = dg_measure_lock_json(&l);
    CHECK_STR(dg_jstr(j, "state"), "held");
    CHECK(dg_jnum(j, "waited") > 0.2);
    cJSON_Delete(j);
    dg_measure_unlock(&l);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* Held by another and not released within the wait: goes on, says so. */
    pid = fork();
    if (pid == 0) {
        dg_mlock k;
        dg_measure_lock(&k, 10, NULL);
        (void)!write(ready[1], "x", 1);
        usleep(800000);
        _exit(0);
    }
    CHECK(read(ready[0], &c, 1) == 1);
    dg_measure_lock(&l, 0.2, NULL);
    CHECK_STR(l.state, "timed out");
    CHECK(!l.held);
    dg_measure_unlock(&l);
    waitpid(pid, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    unlink(path);
    unsetenv("DEVGATE_MEASURE_LOCK");
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *src = getenv("DEVGATE_SRC");
    if (!src)
        check_skip("DEVGATE_SRC is not set (run through ctest)");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/records/healthy.json", src);
    healthy_text = dg_read_file(path, 1 << 20, NULL);
    if (!healthy_text) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    const char *child = getenv("DG_VERDICT_CHILD");
    if (child && !strcmp(child, "prescott"))
        return prescott_child();
    check_lock();
    check_blas(argv[0]);
    check_contended();
    dg_free(healthy_text);
    CHECK_DONE();
}
