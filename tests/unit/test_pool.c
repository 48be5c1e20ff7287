/* The pool's library pieces: Slurm array specs expanded (and bad ones
 * refused by name), job states mapped to the pool's words, `scontrol -o show
 * job` output (captured from Slurm 22.05: a pending record of several tasks,
 * running, completed, cancelled and failed tasks, another job's record)
 * parsed into one entry per task, and the job script run by a real /bin/sh
 * with hostile words that must arrive intact, running nothing. */
#include "check.h"
#include "devgate.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_array_ids(void)
{
    dg_ctx *ctx = dg_ctx_new();
    int ids[64], n = -1;
    CHECK(dg_slurm_array_ids(ctx, "0-3", ids, 64, &n) == DG_OK);
    CHECK(n == 4 && ids[0] == 0 && ids[3] == 3);
    CHECK(dg_slurm_array_ids(ctx, "7,1,3-4,3", ids, 64, &n) == DG_OK);
    CHECK(n == 4 && ids[0] == 1 && ids[1] == 3 && ids[2] == 4 && ids[3] == 7);
    CHECK(dg_slurm_array_ids(ctx, "0-15:4%2", ids, 64, &n) == DG_OK);
    CHECK(n == 4 && ids[0] == 0 && ids[1] == 4 && ids[3] == 12);
    CHECK(dg_slurm_array_ids(ctx, "5", ids, 64, &n) == DG_OK);
    CHECK(n == 1 && ids[0] == 5);
    static const char *const bad[] = {"",     "a",     "3-1", "1,",    ",1",  "1-",         "-1",
                                      "0-3%", "0-3%x", "1;2", "0-3:0", "1 2", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(dg_slurm_array_ids(ctx, bad[i], ids, 64, &n) == DG_ERR_USAGE,
                  "'%s' taken as an array spec", bad[i]);
        CHECK(n == 0);
    }
    CHECK(strstr(dg_errmsg(ctx), "99999999999") != NULL);
    CHECK(dg_slurm_array_ids(ctx, "0-64", ids, 64, &n) == DG_ERR_USAGE);
    CHECK(strstr(dg_errmsg(ctx), "more than 64") != NULL);
    dg_ctx_free(ctx);
}

static void test_states(void)
{
    CHECK_STR(dg_slurm_state("PENDING"), "pending");
    CHECK_STR(dg_slurm_state("RUNNING"), "running");
    CHECK_STR(dg_slurm_state("COMPLETING"), "running");
    CHECK_STR(dg_slurm_state("COMPLETED"), "completed");
    CHECK_STR(dg_slurm_state("CANCELLED"), "cancelled");
    CHECK_STR(dg_slurm_state("CANCELLED by 0"), "cancelled");
    CHECK_STR(dg_slurm_state("FAILED"), "failed");
    CHECK_STR(dg_slurm_state("TIMEOUT"), "failed");
    CHECK_STR(dg_slurm_state("OUT_OF_MEMORY"), "failed");
    CHECK_STR(dg_slurm_state("COMPLETEDX"), "unknown");
    CHECK_STR(dg_slurm_state(""), "unknown");
    CHECK_STR(dg_slurm_state(NULL), "unknown");
}

/* The entry of task t in a parsed array, or NULL. */
static const cJSON *task(const cJSON *arr, int t)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (cJSON_GetObjectItem(e, "task")->valuedouble == t) return e;
    return NULL;
}

static const char *str(const cJSON *e, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(e, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_parse(void)
{
    dg_ctx *ctx = dg_ctx_new();
    /* scontrol -o show job 5 after `scancel 5_4` (while it ran) with 3 and 5 pending */
    const char *text =
        "JobId=5 ArrayJobId=5 ArrayTaskId=3,5 JobName=devgate-accept UserId=root(0) "
        "JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0 NodeList=(null) "
        "ReqNodeList=(null) ExcNodeList=(null)\n"
        "JobId=9 ArrayJobId=5 ArrayTaskId=4 JobName=devgate-accept JobState=CANCELLED "
        "Reason=None ExitCode=0:15 ReqNodeList=(null) NodeList=node07 BatchHost=node07\n"
        "JobId=7 ArrayJobId=5 ArrayTaskId=2 JobName=devgate-accept JobState=RUNNING Reason=None "
        "ExitCode=0:0 NodeList=node02\n"
        "JobId=6 ArrayJobId=5 ArrayTaskId=0 JobName=devgate-accept JobState=COMPLETED "
        "Reason=None ExitCode=0:0 NodeList=node01\n"
        "JobId=8 ArrayJobId=5 ArrayTaskId=1 JobName=devgate-accept JobState=FAILED "
        "Reason=NonZeroExitCode ExitCode=4:0 NodeList=node03\n"
        "JobId=12 ArrayJobId=12 ArrayTaskId=0 JobName=other JobState=RUNNING ExitCode=0:0 "
        "NodeList=node09\n";
    char *json = NULL;
    CHECK(dg_slurm_parse_jobs(ctx, text, "5", &json) == DG_OK);
    cJSON *arr = cJSON_Parse(json);
    CHECK(cJSON_GetArraySize(arr) == 6);
    const cJSON *t;
    t = task(arr, 0);
    CHECK(t && strcmp(str(t, "state"), "completed") == 0 && strcmp(str(t, "node"), "node01") == 0);
    CHECK(t && cJSON_GetObjectItem(t, "exit_code")->valuedouble == 0);
    t = task(arr, 1);
    CHECK(t && strcmp(str(t, "state"), "failed") == 0);
    CHECK(t && cJSON_GetObjectItem(t, "exit_code")->valuedouble == 4);
    CHECK(t && strcmp(str(t, "reason"), "NonZeroExitCode") == 0);
    t = task(arr, 2);
    CHECK(t && strcmp(str(t, "state"), "running") == 0 && strcmp(str(t, "node"), "node02") == 0);
    CHECK(t && cJSON_IsNull(cJSON_GetObjectItem(t, "exit_code")));
    t = task(arr, 3);
    CHECK(t && strcmp(str(t, "state"), "pending") == 0 && str(t, "node") == NULL);
    CHECK(t && strcmp(str(t, "reason"), "Resources") == 0 && strcmp(str(t, "job_id"), "5") == 0);
    t = task(arr, 4);
    CHECK(t && strcmp(str(t, "state"), "cancelled") == 0);
    CHECK(t && cJSON_GetObjectItem(t, "signal")->valuedouble == 15);
    CHECK(t && strcmp(str(t, "node"), "node07") == 0 && strcmp(str(t, "job_id"), "9") == 0);
    CHECK(task(arr, 5) && strcmp(str(task(arr, 5), "state"), "pending") == 0);
    /* sorted by task */
    int last = -1;
    bool sorted = true;
    cJSON_ArrayForEach(t, arr)
    {
        int v = (int)cJSON_GetObjectItem(t, "task")->valuedouble;
        sorted = sorted && v > last;
        last = v;
    }
    CHECK(sorted);
    cJSON_Delete(arr);
    dg_string_free(json);

    /* only another job's records: an empty list, not an error */
    CHECK(dg_slurm_parse_jobs(ctx, text, "12", &json) == DG_OK);
    arr = cJSON_Parse(json);
    CHECK(cJSON_GetArraySize(arr) == 1 && strcmp(str(task(arr, 0), "node"), "node09") == 0);
    cJSON_Delete(arr);
    dg_string_free(json);
    CHECK(dg_slurm_parse_jobs(ctx, text, "77", &json) == DG_OK && strcmp(json, "[]") == 0);
    dg_string_free(json);
    /* a job that is not an array is task 0 */
    CHECK(dg_slurm_parse_jobs(ctx,
                              "JobId=31 JobName=x JobState=TIMEOUT Reason=TimeLimit "
                              "ExitCode=0:15 NodeList=n1\n",
                              "31", &json) == DG_OK);
    arr = cJSON_Parse(json);
    CHECK(task(arr, 0) && strcmp(str(task(arr, 0), "state"), "failed") == 0);
    cJSON_Delete(arr);
    dg_string_free(json);
    /* no record at all */
    json = NULL;
    CHECK(dg_slurm_parse_jobs(ctx, "slurm_load_jobs error: Invalid job id specified\n", "5",
                              &json) == DG_ERR_FORMAT);
    CHECK(json == NULL);
    CHECK(dg_slurm_parse_jobs(ctx, "JobId=5 ArrayJobId=5 ArrayTaskId=x-y JobState=PENDING\n", "5",
                              &json) == DG_ERR_FORMAT);
    CHECK(strstr(dg_errmsg(ctx), "x-y") != NULL);
    dg_ctx_free(ctx);
}

/* The script run by /bin/sh with `exec` replaced by printf '%s\0'. */
static void test_script(void)
{
    char tmp[] = "/tmp/dg-pool-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char mark[64];
    snprintf(mark, sizeof mark, "%s/ran", tmp);
    const char *argv[] = {"printf",      "%s\\0",
                          "it's",        "$(touch ran)",
                          "`touch ran`", "a;touch ran",
                          "l1\nl2",      "$SLURM_ARRAY_TASK_ID",
                          "*",           "",
                          "\\",          NULL};
    char *s = dg_pool_script(argv);
    CHECK(s && strncmp(s, "#!/bin/sh\n", 10) == 0 && strstr(s, "\nexec 'printf' ") != NULL);
    char path[96];
    snprintf(path, sizeof path, "%s/job.sh", tmp);
    FILE *f = fopen(path, "w");
    if (f && s) {
        fputs(s, f);
        fclose(f);
    }
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        if (chdir(tmp) != 0)
            _exit(2);
        setenv("SLURM_ARRAY_TASK_ID", "3", 1);
        execl("/bin/sh", "sh", path, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char got[4096];
    size_t n = 0;
    ssize_t r;
    while ((r = read(p[0], got + n, sizeof got - n)) > 0)
        n += (size_t)r;
    close(p[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    char want[4096];
    size_t wn = 0;
    for (int i = 2; argv[i]; i++) {
        size_t l = strlen(argv[i]);
        memcpy(want + wn, argv[i], l + 1);
        wn += l + 1;
    }
    CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && n == wn && memcmp(got, want, n) == 0,
              "the script's words changed on the way (%zu bytes, wanted %zu)", n, wn);
    CHECK_MSG(access(mark, F_OK) != 0, "the script's shell ran part of a word");
    CHECK(dg_pool_script(NULL) == NULL);
    dg_string_free(s);
    unlink(mark);
    unlink(path);
    rmdir(tmp);
}

int main(void)
{
    test_array_ids();
    test_states();
    test_parse();
    test_script();
    CHECK_DONE();
}
