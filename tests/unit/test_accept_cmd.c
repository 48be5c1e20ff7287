/* accept -- CMD's pure parts (src/steps/accept_cmd.c): the placeholder
 * substitution, how a child run ended (from its run record), the profile
 * section from the probe's window,
 * and the probe plan's extra environment. No processes. */
#include "check.h"
#include "core/json.h"
#include "steps/accept_cmd.h"
#include "supervise/supervise.h"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void test_argv(void)
{
    const char *in[] = {"python3",  "train.py", "--batch",          "{batch}", "--device={device}",
                        "--epochs", "{epochs}", "x{batch}y{batch}", "{bat",    "{}",
                        NULL};
    char **out = dg_accept_cmd_argv(in, 128, "cuda", 10, NULL);
    CHECK(out != NULL);
    if (!out)
        return;
    CHECK_STR(out[0], "python3");
    CHECK_STR(out[3], "128");
    CHECK_STR(out[4], "--device=cuda");
    CHECK_STR(out[6], "10");
    CHECK_STR(out[7], "x128y128");
    CHECK_STR(out[8], "{bat");
    CHECK_STR(out[9], "{}");
    CHECK(out[10] == NULL);
    dg_accept_cmd_argv_free(out);
    char **cpu = dg_accept_cmd_argv(in, 8, NULL, 1, NULL);
    CHECK(cpu && strcmp(cpu[4], "--device=cpu") == 0);
    dg_accept_cmd_argv_free(cpu);
    dg_accept_cmd_argv_free(NULL);
}

/* --device-arg: a device's words at the end of its runs of the command. */
static void test_device_args(void)
{
    dg_device_args da;
    char why[256];
    CHECK(dg_accept_cmd_device_args("cpu=,cuda=--accel --ngpu 1", &da, why, sizeof why) == DG_OK);
    const char *const *cu = dg_device_args_for(&da, "cuda");
    const char *const *cp = dg_device_args_for(&da, "cpu");
    CHECK(cu && cu[0] && strcmp(cu[0], "--accel") == 0 && strcmp(cu[1], "--ngpu") == 0 &&
          strcmp(cu[2], "1") == 0 && cu[3] == NULL);
    CHECK(cp && cp[0] == NULL);                       /* named, with no words */
    CHECK(dg_device_args_for(&da, "mps") == NULL);    /* not named */
    CHECK(dg_device_args_for(&da, "cuda:0") == NULL); /* the gate's names only */
    const char *in[] = {"python", "main.py", "--batchSize", "{batch}", NULL};
    char **out = dg_accept_cmd_argv(in, 64, "cuda", 2, cu);
    CHECK(out && strcmp(out[3], "64") == 0 && strcmp(out[4], "--accel") == 0 &&
          strcmp(out[6], "1") == 0 && out[7] == NULL);
    dg_accept_cmd_argv_free(out);
    dg_device_args_free(&da);
    dg_device_args_free(&da); /* twice: harmless */
    CHECK(dg_accept_cmd_device_args(NULL, &da, why, sizeof why) == DG_OK &&
          dg_device_args_for(&da, "cpu") == NULL);
    static const struct {
        const char *spec, *why;
    } bad[] = {{"gpu=--accel", "'gpu' is not a device"},
               {"cuda", "'cuda' is not DEVICE=ARGS"},
               {"cuda=--a,cuda=--b", "cuda is given twice"},
               {"cpu=a b c d e f g h i j k l m n o p q", "cpu has over 16 words"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        CHECK(dg_accept_cmd_device_args(bad[i].spec, &da, why, sizeof why) == DG_ERR_USAGE);
        CHECK_MSG(strstr(why, bad[i].why) != NULL, "%s: %s\n", bad[i].spec, why);
        CHECK(da.text == NULL);
    }
    /* The cpu side's environment hides every accelerator it knows. */
    bool cuda = false, hip = false;
    for (size_t i = 0; dg_accept_cmd_cpu_env[i]; i++) {
        cuda = cuda || strcmp(dg_accept_cmd_cpu_env[i], "CUDA_VISIBLE_DEVICES=") == 0;
        hip = hip || strcmp(dg_accept_cmd_cpu_env[i], "HIP_VISIBLE_DEVICES=") == 0;
    }
    CHECK(cuda && hip);
}

static const char *ended(const char *json, size_t budget, bool killed, char *why)
{
    dg_oom_killer k = {.state = killed ? DG_OOMK_KILLED : DG_OOMK_NONE,
                       .source = "cgroup memory.events",
                       .kills = killed ? 1 : 0};
    return dg_accept_cmd_ended(json, budget, &k, why, 256);
}

static void test_ended(void)
{
    char why[256];
    /* A clean stop by the probe, with timed steps. */
    CHECK_STR(ended("{\"state\":\"complete\",\"supervise\":{\"exit_status\":86,\"signal\":null,"
                    "\"run_end\":{\"status\":\"stopped\"}},\"throughput\":{\"timed_steps\":10,"
                    "\"samples_per_s\":{\"value\":100,\"unit\":\"samples/s\",\"valid\":true}},"
                    "\"oom\":[]}",
                    0, false, why),
              "ok");
    /* Complete but no step seen: the probe reported nothing. */
    CHECK_STR(ended("{\"state\":\"complete\",\"supervise\":{\"exit_status\":0},"
                    "\"throughput\":{\"timed_steps\":0,\"samples_per_s\":{\"value\":null,"
                    "\"unit\":\"samples/s\",\"valid\":false}},\"oom\":[]}",
                    0, false, why),
              "failed");
    CHECK(strstr(why, "no optimizer step") != NULL);
    /* The probe's oom event: device-oom, worded as the budget's when one is set. */
    CHECK_STR(ended("{\"state\":\"failed\",\"supervise\":{\"exit_status\":1},\"oom\":[{\"device\":"
                    "\"cpu\",\"message\":\"RuntimeError: DefaultCPUAllocator: can't allocate "
                    "memory\"}]}",
                    1 << 30, false, why),
              "device-oom");
    CHECK(strstr(why, "over the memory budget") && strstr(why, "can't allocate"));
    /* No event, but the program's last words are out of memory. */
    CHECK_STR(ended("{\"state\":\"failed\",\"supervise\":{\"exit_status\":1,\"run_end\":{"
                    "\"status\":\"error\",\"message\":\"MemoryError: \"}},\"oom\":[]}",
                    0, false, why),
              "device-oom");
    /* SIGKILL: the OOM killer only when the cgroup counted one. */
    const char *killed = "{\"state\":\"failed\",\"supervise\":{\"exit_status\":null,"
                         "\"signal\":\"SIGKILL\"},\"oom\":[]}";
    CHECK_STR(ended(killed, 0, true, why), "oom-killer");
    CHECK(strstr(why, "oom-killer: killed by SIGKILL") && strstr(why, "counted 1 kill (cgroup"));
    CHECK_STR(ended(killed, 0, false, why), "signal");
    CHECK(strstr(why, "not the OOM killer") != NULL);
    /* No count readable: a SIGKILL is likely the OOM killer, and said so. */
    dg_oom_killer unknown = {.state = DG_OOMK_UNKNOWN, .source = NULL, .kills = 0};
    CHECK_STR(dg_accept_cmd_ended(killed, 0, &unknown, why, 256), "oom-killer");
    CHECK(strstr(why, "killed by signal 9 (likely out of memory") != NULL);
    /* Not asked, or another signal: never the OOM killer's. */
    CHECK_STR(dg_accept_cmd_ended(killed, 0, NULL, why, 256), "signal");
    CHECK_STR(ended("{\"state\":\"failed\",\"supervise\":{\"exit_status\":null,"
                    "\"signal\":\"SIGSEGV\"},\"oom\":[]}",
                    0, true, why),
              "signal");
    CHECK_STR(ended("{\"state\":\"failed\",\"spec\":{\"timeout_s\":5},\"supervise\":{"
                    "\"timed_out\":true,\"signal\":\"SIGTERM\"},\"oom\":[]}",
                    0, false, why),
              "timeout");
    CHECK_STR(ended("{\"state\":\"interrupted\",\"supervise\":{\"interrupted\":true},\"oom\":[]}",
                    0, false, why),
              "interrupted");
    /* Exit 86 without the probe's run_end "stopped" is the program's own failure. */
    CHECK_STR(ended("{\"state\":\"failed\",\"supervise\":{\"exit_status\":86},\"oom\":[]}", 0,
                    false, why),
              "failed");
    CHECK_STR(why, "exit status 86");
    CHECK_STR(ended("not json", 0, false, why), "failed");
}

static void test_profile(void)
{
    cJSON *w = cJSON_Parse("{\"v\":1,\"warmup\":3,\"steps\":4,\"wall_ms\":100,\"data_ms\":20,"
                           "\"h2d_ms\":null,\"sync_ms\":5,\"compute_ms\":75,\"trace\":\"t.json\","
                           "\"ops\":[{\"op\":\"aten::addmm\",\"calls\":8,\"ms_total\":30},"
                           "{\"op\":\"aten::relu\",\"calls\":4,\"ms_total\":10}]}");
    cJSON *p = dg_accept_cmd_profile(w, NULL, "cpu");
    CHECK_STR(dg_jstr(p, "status"), "ok");
    CHECK(fabs(dg_jnum(p, "phases.queue_wait.share") - 0.2) < 1e-9);
    CHECK(fabs(dg_jnum(p, "phases.queue_wait.ms") - 5.0) < 1e-9); /* per step */
    CHECK(dg_jbool(p, "phases.queue_wait.in_step") == 0);
    CHECK(fabs(dg_jnum(p, "phases.compute.share") - 0.75) < 1e-9);
    CHECK(dg_jbool(p, "phases.h2d.share.valid") == 0); /* the cpu: not reported, never 0 */
    CHECK(fabs(dg_jnum(p, "ops[0].share") - 0.75) < 1e-9);
    CHECK(fabs(dg_jnum(p, "ops[1].ms_mean") - 2.5) < 1e-9);
    CHECK(fabs(dg_jnum(p, "step.profiled_ms") - 25.0) < 1e-9);
    CHECK_STR(dg_jstr(p, "trace"), "t.json");
    cJSON_Delete(p);
    cJSON_Delete(w);
    /* The window failed or never opened: the section says so. */
    p = dg_accept_cmd_profile(NULL, NULL, "cpu");
    CHECK_STR(dg_jstr(p, "status"), "failed");
    CHECK(dg_jstr(p, "error") != NULL);
    cJSON_Delete(p);
    w = cJSON_Parse("{\"v\":1,\"error\":\"torch.profiler is not available\"}");
    p = dg_accept_cmd_profile(w, NULL, "cpu");
    CHECK_STR(dg_jstr(p, "error"), "torch.profiler is not available");
    cJSON_Delete(p);
    cJSON_Delete(w);
}

static void test_plan_env(void)
{
    const char *argv[] = {"python3", "train.py", NULL};
    const char *extra[] = {"DEVGATE_PROBE_MAX_STEPS=10", "FOO", NULL};
    dg_run_opts o = {.argv = argv, .probe = DG_PROBE_AUTO, .probe_path = "pkg", .env = extra};
    dg_probe_plan p;
    CHECK(dg_probe_plan_make(&o, &p));
    size_t n = 0;
    bool max = false, foo = false;
    for (; p.env[n]; n++) {
        max = max || strcmp(p.env[n], "DEVGATE_PROBE_MAX_STEPS=10") == 0;
        foo = foo || strcmp(p.env[n], "FOO") == 0;
    }
    /* The caller's edits come last, so they win over the plan's own. */
    CHECK(max && foo && n >= 2 && strcmp(p.env[n - 1], "FOO") == 0);
    dg_probe_plan_free(&p);
}

/* The OOM-kill count through the tests' stand-in file: a rise is a kill, no
 * rise none, no file (or a changed source) unknown. */
static void test_oom_count(void)
{
    char path[] = "/tmp/dg-oom-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    FILE *f = fopen(path, "w");
    fputs("low 0\nhigh 3\nmax 1\noom 2\noom_kill 4\n", f);
    fclose(f);
    setenv("DEVGATE_OOM_EVENTS", path, 1);
    dg_oom_count a, b;
    dg_accept_cmd_oom_read(&a);
    CHECK(a.readable && a.kills == 4 && strcmp(a.source, "DEVGATE_OOM_EVENTS") == 0);
    dg_oom_killer k = dg_accept_cmd_oom_since(&a, &a);
    CHECK(k.state == DG_OOMK_NONE && k.kills == 0);
    f = fopen(path, "w");
    fputs("oom_kill 6\n", f);
    fclose(f);
    dg_accept_cmd_oom_read(&b);
    k = dg_accept_cmd_oom_since(&a, &b);
    CHECK(k.state == DG_OOMK_KILLED && k.kills == 2);
    unlink(path);
    dg_accept_cmd_oom_read(&b);
    CHECK(!b.readable);
    CHECK(dg_accept_cmd_oom_since(&a, &b).state == DG_OOMK_UNKNOWN);
    dg_oom_count other = a;
    other.source = "/proc/vmstat";
    other.kills = 9;
    CHECK(dg_accept_cmd_oom_since(&a, &other).state == DG_OOMK_UNKNOWN);
    unsetenv("DEVGATE_OOM_EVENTS");
}

int main(void)
{
    test_device_args();
    test_oom_count();
    test_argv();
    test_ended();
    test_profile();
    test_plan_env();
    CHECK_DONE();
}
