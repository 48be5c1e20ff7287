/* Sweep trials against hostile children: small shell scripts stand in for
 * `devgate __trial` (dg_sweep_opts.exe) and write garbage, close the result
 * pipe, die by a signal, hang with a grandchild holding the pipe, flood the
 * pipe, or leave a grandchild behind. Every case must end as a classified
 * trial in the record, never as a crash or a hang of the parent. */
#include "check.h"

#include "core/json.h"
#include "devgate.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[512];

/* Writes an executable script `name` with body; returns its path (static). */
static const char *script(const char *name, const char *body)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return path;
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
    return path;
}

/* One-trial sweep at batch 8 with exe; the record parsed (NULL on failure). */
static cJSON *one_trial(const char *exe, double timeout_s, double *wall)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_sweep_opts o = {.train = {.init = DG_TRAIN_OPTS_MAGIC,
                                 .lr = -1,
                                 .momentum = -1,
                                 .weight_decay = -1,
                                 .threads = 1},
                       .from = 8,
                       .to = 8,
                       .no_bisect = true,
                       .trial_timeout_s = timeout_s,
                       .exe = exe};
    char *json = NULL;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    dg_status st = dg_sweep_run(ctx, &o, &json);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (wall)
        *wall = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    CHECK_MSG(st == DG_OK, "%s: %s", exe, dg_errmsg(ctx));
    cJSON *rec = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    dg_ctx_free(ctx);
    return rec;
}

static const cJSON *trial0(const cJSON *rec)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(rec, "trials"), 0);
}

static const char *tstr(const cJSON *rec, const char *key)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(trial0(rec), key));
    return s ? s : "";
}

/* Expects the trial to have ended `ended` with reason containing `reason`. */
static void expect(const char *name, const char *body, const char *ended, const char *reason,
                   double timeout_s)
{
    double wall = 0;
    cJSON *rec = one_trial(script(name, body), timeout_s, &wall);
    CHECK_MSG(rec != NULL, "%s: no record", name);
    CHECK_MSG(strcmp(tstr(rec, "ended"), ended) == 0, "%s: ended '%s', wanted '%s'", name,
              tstr(rec, "ended"), ended);
    CHECK_MSG(strstr(tstr(rec, "reason"), reason) != NULL, "%s: reason '%s' lacks '%s'", name,
              tstr(rec, "reason"), reason);
    /* The trial's own time: waits for the measurement lock (another devgate
     * measuring on the machine, e.g. a parallel test) are the sweep's, not
     * the trial's (the ASan tier read 71.8 s for a trial that exits at once,
     * beside other measurements). */
    const cJSON *lw = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "lock_waited"), "value");
    double waited = cJSON_IsNumber(lw) ? lw->valuedouble : 0;
    CHECK_MSG(wall - waited < timeout_s + 5, "%s: took %.1f s (%.1f s of it waiting for the lock)",
              name, wall, waited);
    cJSON_Delete(rec);
}

/* A doubling sweep from batch 8 over a stand-in trial that reports the
 * samples/s the shell case `table` gives its batch; samples sets the
 * synthetic training set (0: its default). The record parsed. */
static cJSON *doubling_ms(const char *name, const char *table, size_t samples, const char *ms,
                          int to)
{
    char body[4096];
    snprintf(body, sizeof body,
             "while IFS= read -r spec || [ -n \"$spec\" ]; do\n"
             "b=$(printf '%%s' \"$spec\" | tr ',' '\\n' | sed -n "
             "'s/.*\"batch\":\\([0-9]*\\).*/\\1/p' | head -n 1)\n"
             "case $b in %s *) v=1000 ;; esac\n"
             "echo '{\"status\":\"ok\",%s%s%s\"throughput\":{\"samples_per_s\":{\"value\":'$v',"
             "\"valid\":true}}}' >&3\n"
             "spec=\n"
             "done",
             table, ms ? "\"steps\":{\"ms\":[" : "", ms ? ms : "", ms ? "]}," : "");
    dg_ctx *ctx = dg_ctx_new();
    dg_sweep_opts o = {.train = {.init = DG_TRAIN_OPTS_MAGIC,
                                 .lr = -1,
                                 .momentum = -1,
                                 .weight_decay = -1,
                                 .threads = 1,
                                 .samples = samples},
                       .from = 8,
                       .to = to,
                       .no_bisect = true,
                       .trial_timeout_s = 20,
                       .exe = script(name, body)};
    char *json = NULL;
    dg_status st = dg_sweep_run(ctx, &o, &json);
    CHECK_MSG(st == DG_OK, "%s: %s", name, dg_errmsg(ctx));
    cJSON *rec = json ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    dg_ctx_free(ctx);
    return rec;
}

/* A sweep of trials that report samples/s from table only (no step times). */
static cJSON *doubling(const char *name, const char *table, size_t samples)
{
    return doubling_ms(name, table, samples, NULL, 0);
}

static void expect_stop(const cJSON *rec, const char *name, const char *reason, int at)
{
    const cJSON *stop = cJSON_GetObjectItem(rec, "stopped");
    const char *r = cJSON_GetStringValue(cJSON_GetObjectItem(stop, "reason"));
    double b = cJSON_GetNumberValue(cJSON_GetObjectItem(stop, "at_batch"));
    CHECK_MSG(r && strcmp(r, reason) == 0 && b == at, "%s: stopped on %s at %g, wanted %s at %d",
              name, r ? r : "(none)", b, reason, at);
}

/* True when pid no longer runs (gone, or a zombie awaiting its new parent). */
static bool gone(long pid)
{
    char path[64], buf[256] = "";
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    for (int i = 0; i < 50; i++) {
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp && (rp[2] == 'Z' || rp[2] == 'X'))
            return true;
        usleep(20000);
    }
    return false;
}

static long read_pid(const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    long pid = -1;
    if (f) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = -1;
        fclose(f);
    }
    return pid;
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dg-sweep-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        check_skip("no temporary directory");
    if (access("/bin/sh", X_OK) != 0)
        check_skip("no /bin/sh");

    expect("garbage", "printf 'not json{' >&3; exit 0", "failed", "no record", 20);
    expect("array", "echo '[1,2,3]' >&3; exit 0", "failed", "no record", 20);
    expect("closed", "exec 3>&-; sleep 0.1; exit 0", "failed", "no record", 20);
    expect("silent", "exit 0", "failed", "no record (exit 0)", 20);
    expect("stderr", "echo 'first complaint' >&2; echo 'second' >&2; exit 2", "failed",
           "first complaint", 20);
    expect("flood", "head -c 40000000 /dev/zero | tr '\\0' 'x' >&3; exit 0", "failed", "no record",
           30);
    expect("killed", "kill -KILL $$", "signal", "SIGKILL", 20);
    expect("abort", "kill -ABRT $$", "signal", "SIGABRT", 20);
    expect("status", "echo '{\"status\":\"backend\",\"error\":\"the driver said no\"}' >&3; exit 1",
           "failed", "the driver said no", 20);
    expect("oom",
           "echo '{\"status\":\"device-oom\",\"error\":\"no room on the device\"}' >&3; exit 1",
           "device-oom", "no room", 20);

    /* A hang with a grandchild holding the pipe: the whole group dies at the deadline. */
    char body[512];
    snprintf(body, sizeof body, "sleep 60 & echo $! > %s/hang.pid; sleep 60", dir);
    expect("hang", body, "timeout", "process group killed", 1);
    long pid = read_pid("hang.pid");
    CHECK_MSG(pid > 0 && gone(pid), "grandchild %ld of a timed-out trial survived", pid);

    /* A child that ends after its record while a grandchild keeps the pipe open:
     * the trial is ok at once and the straggler is killed with the group. */
    snprintf(body, sizeof body,
             "echo "
             "'{\"status\":\"ok\",\"throughput\":{\"samples_per_s\":{\"value\":100,\"valid\":true}}"
             "}' >&3; "
             "sleep 60 & echo $! > %s/stray.pid; exit 0",
             dir);
    double wall = 0;
    cJSON *rec = one_trial(script("stray", body), 30, &wall);
    CHECK(rec && strcmp(tstr(rec, "ended"), "ok") == 0);
    CHECK_MSG(wall < 10, "waited %.1f s on a grandchild", wall);
    const cJSON *sps = cJSON_GetObjectItem(trial0(rec), "samples_per_s");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(sps, "valid")) &&
          cJSON_GetNumberValue(cJSON_GetObjectItem(sps, "value")) == 100);
    /* Fields the child did not give are not reported: null, never 0. */
    const cJSON *rss = cJSON_GetObjectItem(trial0(rec), "rss_peak");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(rss, "valid")) &&
          cJSON_IsNull(cJSON_GetObjectItem(rss, "value")));
    const cJSON *knee = cJSON_GetObjectItem(rec, "knee");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(knee, "batch")) == 8);
    cJSON_Delete(rec);
    pid = read_pid("stray.pid");
    CHECK_MSG(pid > 0 && gone(pid), "grandchild %ld of a finished trial survived", pid);

    /* The stop policy in the fixture's sweep: the H200's cifar throughput of
     * this session's first GPU pass plateaus from 512 on, three flat doublings
     * end it at 2048 (it ran to 32768 before). */
    rec = doubling("plateau",
                   "8) v=19131 ;; 16) v=31685 ;; 32) v=44361 ;; 64) v=61643 ;; 128) v=74787 ;; "
                   "256) v=84861 ;; 512) v=89673 ;; 1024) v=93320 ;; 2048) v=94732 ;; "
                   "4096) v=96539 ;;",
                   0);
    expect_stop(rec, "plateau", "throughput-plateau", 2048);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(rec, "trials")) == 9);
    cJSON_Delete(rec);
    /* Throughput that keeps growing stops at the training set: 100 samples
     * give trials at 8..64 and "train-set", the set's size in the spec. */
    rec = doubling("trainset", "8) v=100 ;; 16) v=200 ;; 32) v=400 ;; 64) v=800 ;; 128) v=1600 ;;",
                   100);
    expect_stop(rec, "train-set", "train-set", 64);
    const cJSON *ts = cJSON_GetObjectItem(cJSON_GetObjectItem(rec, "spec"), "train_samples");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(ts, "valid")) &&
          cJSON_GetNumberValue(cJSON_GetObjectItem(ts, "value")) == 100);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(rec, "trials")) == 4);
    cJSON_Delete(rec);

    /* The trial server: trials that end "ok" share one process; a trial that
     * does not (device out of memory at 64) ends it, and the bisection's
     * trials start a fresh one. With DEVGATE_SWEEP_REUSE=off every trial is
     * a process of its own. The records are the same either way. */
    for (int reuse = 1; reuse >= 0; reuse--) {
        char pids[600], body2[2048];
        snprintf(pids, sizeof pids, "%s/serve%d.pids", dir, reuse);
        snprintf(
            body2, sizeof body2,
            "while IFS= read -r spec || [ -n \"$spec\" ]; do\n"
            "echo $$ >> %s\n"
            "b=$(printf '%%s' \"$spec\" | tr ',' '\\n' | sed -n "
            "'s/.*\"batch\":\\([0-9]*\\).*/\\1/p' | head -n 1)\n"
            "if [ \"$b\" -ge 64 ]; then echo '{\"status\":\"device-oom\",\"error\":\"planted\"}' "
            ">&3; else echo '{\"status\":\"ok\",\"throughput\":{\"samples_per_s\":"
            "{\"value\":'$((b * 100))',\"valid\":true}}}' >&3; fi\n"
            "spec=\n"
            "done",
            pids);
        if (!reuse)
            setenv("DEVGATE_SWEEP_REUSE", "off", 1);
        dg_ctx *ctx = dg_ctx_new();
        dg_sweep_opts so = {.train = {.init = DG_TRAIN_OPTS_MAGIC,
                                      .lr = -1,
                                      .momentum = -1,
                                      .weight_decay = -1,
                                      .threads = 1},
                            .from = 8,
                            .to = 1024,
                            .trial_timeout_s = 20,
                            .exe = script("serve", body2)};
        char *json = NULL;
        CHECK_MSG(dg_sweep_run(ctx, &so, &json) == DG_OK, "serve: %s", dg_errmsg(ctx));
        unsetenv("DEVGATE_SWEEP_REUSE");
        rec = json ? cJSON_Parse(json) : NULL;
        dg_string_free(json);
        dg_ctx_free(ctx);
        int ntrials = cJSON_GetArraySize(cJSON_GetObjectItem(rec, "trials")) +
                      cJSON_GetArraySize(cJSON_GetObjectItem(rec, "bisect"));
        /* The lines the script wrote: one pid a trial; count the distinct ones. */
        FILE *f = fopen(pids, "r");
        long seen[64];
        int lines = 0, distinct = 0;
        long pidv;
        while (f && lines < 64 && fscanf(f, "%ld", &pidv) == 1) {
            bool known = false;
            for (int i = 0; i < distinct; i++)
                known = known || seen[i] == pidv;
            if (!known)
                seen[distinct++] = pidv;
            lines++;
        }
        if (f)
            fclose(f);
        printf("serve (reuse %d): %d trials in %d processes\n", reuse, ntrials,
               distinct); /* the log says it */
        const cJSON *t64 = cJSON_GetArrayItem(cJSON_GetObjectItem(rec, "trials"), 3);
        CHECK_MSG(rec && lines == ntrials && ntrials >= 6 && dg_jnum(t64, "batch") == 64 &&
                      strcmp(dg_jstr(t64, "ended"), "device-oom") == 0,
                  "serve (reuse %d): %d trials, %d lines", reuse, ntrials, lines);
        const cJSON *safe = cJSON_GetObjectItem(rec, "safe_batch");
        CHECK_MSG(dg_jnum(safe, "batch") >= 32 && dg_jnum(safe, "batch") < 64,
                  "serve (reuse %d): safe batch %g", reuse, dg_jnum(safe, "batch"));
        /* Reuse: 8..32 in the first process, the bisection's trials (all
         * below 64 but the first) each ending a server only when oom. */
        if (reuse)
            CHECK_MSG(distinct >= 2 && distinct < ntrials, "serve: %d processes for %d trials",
                      distinct, ntrials);
        else
            CHECK_MSG(distinct == ntrials, "reuse off: %d processes for %d trials", distinct,
                      ntrials);
        cJSON_Delete(rec);
    }

    /* A server that writes a second, late record for its first trial: the
     * next trial reads a record of another batch, which is not its own (it
     * ends "failed" and names the stray batch), and a fresh server follows. */
    {
        char body3[2048];
        snprintf(
            body3, sizeof body3,
            "n=0\n"
            "while IFS= read -r spec || [ -n \"$spec\" ]; do\n"
            "n=$((n + 1))\n"
            "b=$(printf '%%s' \"$spec\" | tr ',' '\\n' | sed -n "
            "'s/.*\"batch\":\\([0-9]*\\).*/\\1/p' | head -n 1)\n"
            "echo '{\"status\":\"ok\",\"spec\":{\"batch\":'$b'},\"throughput\":"
            "{\"samples_per_s\":{\"value\":'$((b * 100))',\"valid\":true}}}' >&3\n"
            "if [ $n = 1 ]; then sleep 0.3; echo '{\"status\":\"ok\",\"spec\":{\"batch\":999}}' "
            ">&3; fi\n"
            "spec=\n"
            "done");
        dg_ctx *ctx = dg_ctx_new();
        dg_sweep_opts so = {.train = {.init = DG_TRAIN_OPTS_MAGIC,
                                      .lr = -1,
                                      .momentum = -1,
                                      .weight_decay = -1,
                                      .threads = 1},
                            .from = 8,
                            .to = 64,
                            .no_bisect = true,
                            .trial_timeout_s = 20,
                            .exe = script("stale", body3)};
        char *json = NULL;
        CHECK_MSG(dg_sweep_run(ctx, &so, &json) == DG_OK, "stale: %s", dg_errmsg(ctx));
        rec = json ? cJSON_Parse(json) : NULL;
        dg_string_free(json);
        dg_ctx_free(ctx);
        const cJSON *t16 = cJSON_GetArrayItem(cJSON_GetObjectItem(rec, "trials"), 1);
        CHECK_MSG(dg_jnum(t16, "batch") == 16 && strcmp(dg_jstr(t16, "ended"), "failed") == 0 &&
                      strstr(dg_jstr(t16, "reason"), "a record of batch 999"),
                  "stale: trial 16 ended %s: %s", dg_jstr(t16, "ended"), dg_jstr(t16, "reason"));
        cJSON_Delete(rec);
    }

    /* The stops judged with intervals: every trial's 23 step times (3 warm-up,
     * then 20 spread +-5% about their median) give an order-statistics
     * interval; a rising sweep's two dips in a row (2000, 1980, 1960) lie in
     * the noise, so it runs on to the limit (today's rule: falling at 64). */
    const char *noisy_ms = "10,10,10,9.0,9.1,9.2,9.3,9.4,9.5,9.6,9.7,9.8,9.9,10.0,10.1,10.2,10.3,"
                           "10.4,10.5,10.6,10.7,10.8,10.9";
    const char *dips = "8) v=1000 ;; 16) v=2000 ;; 32) v=1980 ;; 64) v=1960 ;; 128) v=4000 ;; "
                       "256) v=8000 ;;";
    rec = doubling_ms("dips", dips, 0, noisy_ms, 256);
    expect_stop(rec, "dips in the noise", "limit", 256);
    const cJSON *t32 = cJSON_GetArrayItem(cJSON_GetObjectItem(rec, "trials"), 2);
    CHECK(dg_jbool(t32, "samples_per_s_ci.valid") == 1 &&
          strcmp(dg_jstr(t32, "samples_per_s_ci.method"), "order-statistics") == 0 &&
          dg_jnum(t32, "samples_per_s_ci.lo") < 1980 && dg_jnum(t32, "samples_per_s_ci.hi") > 1980);
    CHECK(strcmp(dg_jstr(t32, "stop_check.fall"), "ambiguous") == 0 &&
          dg_jbool(t32, "stop_check.fall_with_interval") == 1 &&
          dg_jnum(t32, "stop_check.previous.batch") == 16);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(rec, "stop_evidence")));
    cJSON_Delete(rec);
    /* The same dips with steady steps (every step 10 ms: a zero-width
     * interval) are real falls: throughput-falling at 64, its evidence kept. */
    const char *steady_ms = "10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10,10";
    rec = doubling_ms("dips2", dips, 0, steady_ms, 256);
    expect_stop(rec, "dips, steady steps", "throughput-falling", 64);
    const cJSON *ev = cJSON_GetObjectItem(rec, "stop_evidence");
    CHECK(strcmp(dg_jstr(ev, "fall"), "fall") == 0 && dg_jnum(ev, "previous.batch") == 32 &&
          dg_jnum(ev, "previous.samples_per_s.value") == 1980 && dg_jnum(ev, "falls") == 2);
    cJSON_Delete(rec);
    /* Without step times the trial says why it has no interval; the old rule. */
    rec = doubling_ms("dips3", dips, 0, NULL, 256);
    expect_stop(rec, "dips, no step times", "throughput-falling", 64);
    t32 = cJSON_GetArrayItem(cJSON_GetObjectItem(rec, "trials"), 2);
    CHECK(dg_jbool(t32, "samples_per_s_ci.valid") == 0 &&
          cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(t32, "samples_per_s_ci"), "lo")) &&
          dg_jstr(t32, "samples_per_s_ci.reason") &&
          dg_jbool(t32, "stop_check.fall_with_interval") == 0);
    cJSON_Delete(rec);

    /* A program that cannot start. */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-program", dir);
    rec = one_trial(missing, 5, NULL);
    CHECK(rec && strcmp(tstr(rec, "ended"), "failed") == 0 &&
          strstr(tstr(rec, "reason"), "cannot start"));
    CHECK(rec && cJSON_GetNumberValue(cJSON_GetObjectItem(rec, "good_trials")) == 0);
    cJSON_Delete(rec);

    /* Bad ranges are usage errors. */
    dg_ctx *ctx = dg_ctx_new();
    char *json = NULL;
    dg_sweep_opts bad = {.from = 64, .to = 8, .exe = missing};
    CHECK(dg_sweep_run(ctx, &bad, &json) == DG_ERR_USAGE && json == NULL);
    bad = (dg_sweep_opts){.train = {.init = DG_TRAIN_OPTS_MAGIC, .backend = "nosuch"},
                          .exe = missing};
    CHECK(dg_sweep_run(ctx, &bad, &json) == DG_ERR_USAGE && json == NULL);
    dg_ctx_free(ctx);

    const char *names[] = {"garbage",  "array",  "closed",   "silent",    "stderr",
                           "flood",    "killed", "abort",    "status",    "oom",
                           "hang",     "stray",  "hang.pid", "stray.pid", "plateau",
                           "trainset", "dips",   "dips2",    "dips3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    CHECK_DONE();
}
