/* devgate run: supervise the user's own training program (docs/events.md,
 * docs/cli.md "devgate run"). */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by the handler, read (and forwarded) by the library's loop. */
static volatile sig_atomic_t forward_sig;

static void on_signal(int sig)
{
    forward_sig = sig;
}

/* "90", "90s", "1.5m", "2h" into seconds; false for anything else or <= 0. */
static bool parse_duration(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0)
        return false;
    double mult = 1;
    if (*end == 's')
        end++;
    else if (*end == 'm')
        mult = 60, end++;
    else if (*end == 'h')
        mult = 3600, end++;
    if (*end || v * mult > 1e9)
        return false;
    *out = v * mult;
    return true;
}

/* True when dir/devgate_probe/auto.py exists. */
static bool has_probe(const char *dir)
{
    char p[4096];
    int n = snprintf(p, sizeof p, "%s/devgate_probe/auto.py", dir);
    return n > 0 && (size_t)n < sizeof p && access(p, R_OK) == 0;
}

/* The directory holding the devgate_probe package: DEVGATE_PROBE_PATH, else
 * found relative to this executable: EXE_DIR/python (the build's copy),
 * EXE_DIR/../share/devgate/python (installed), EXE_DIR/../clients/python (a
 * build directory inside the source tree). false when none has it. */
static bool find_probe(char *out, size_t n)
{
    const char *env = getenv("DEVGATE_PROBE_PATH");
    if (env && env[0]) {
        snprintf(out, n, "%s", env);
        return has_probe(out);
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return false;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    static const char *const rel[] = {"python", "../share/devgate/python", "../clients/python"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[4096 + 64];
        snprintf(cand, sizeof cand, "%s/%s", exe, rel[i]);
        char real[PATH_MAX];
        if (realpath(cand, real) && has_probe(real)) {
            snprintf(out, n, "%s", real);
            return true;
        }
    }
    return false;
}

int cmd_run(cli *c, int argc, char **argv)
{
    dg_run_opts o = {.forward = &forward_sig};
    const char *out_dir = NULL, *v;
    char thresholds[2048] = "";
    size_t toff = 0;
    int i = 1;
    for (; i < argc; i++) {
        long n;
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (argv[i][0] != '-')
            break; /* the command starts here */
        if (cli_common_opt(c, argc, argv, &i))
            continue;
        if (strcmp(argv[i], "--no-env") == 0) {
            o.no_env = true;
        } else if (strcmp(argv[i], "--empty-cache") == 0) {
            o.empty_cache = true;
        } else if (opt_value(argc, argv, &i, "--probe", &v)) {
            if (strcmp(v, "auto") == 0)
                o.probe = DG_PROBE_AUTO;
            else if (strcmp(v, "manual") == 0)
                o.probe = DG_PROBE_MANUAL;
            else if (strcmp(v, "off") == 0)
                o.probe = DG_PROBE_OFF;
            else {
                cli_error("run: --probe wants auto, manual or off, got '%s'", v);
                return EXIT_USAGE;
            }
        } else if (opt_value(argc, argv, &i, "--label", &v)) {
            o.label = v;
        } else if (opt_value(argc, argv, &i, "--sample-ms", &v)) {
            if (!cli_parse_long(v, 10, 3600000, &n)) {
                cli_error("run: --sample-ms wants an integer in 10..3600000, got '%s'", v);
                return EXIT_USAGE;
            }
            o.sample_ms = (int)n;
        } else if (opt_value(argc, argv, &i, "--timeout", &v)) {
            if (!parse_duration(v, &o.timeout_s)) {
                cli_error("run: --timeout wants a duration such as 90, 90s, 10m or 2h, got '%s'",
                          v);
                return EXIT_USAGE;
            }
        } else if (opt_value(argc, argv, &i, "--out", &v) || opt_value(argc, argv, &i, "-o", &v)) {
            out_dir = v;
        } else if (opt_value(argc, argv, &i, "--threshold", &v)) {
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1] || strchr(v, ',')) {
                cli_error("run: --threshold wants NAME=VALUE, got '%s'", v);
                return EXIT_USAGE;
            }
            int w =
                snprintf(thresholds + toff, sizeof thresholds - toff, "%s%s", toff ? "," : "", v);
            if (w < 0 || (size_t)w >= sizeof thresholds - toff) {
                cli_error("run: too many --threshold values");
                return EXIT_USAGE;
            }
            toff += (size_t)w;
        } else {
            cli_error("run: unknown option '%s' (devgate run [options] -- CMD ARGS...)", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (i >= argc) {
        cli_error("run: no program given (devgate run [options] -- CMD ARGS...)");
        return EXIT_USAGE;
    }
    o.argv = (const char *const *)(argv + i); /* argv is NULL-terminated */
    char probe_dir[4096];
    if (o.probe == DG_PROBE_AUTO && find_probe(probe_dir, sizeof probe_dir))
        o.probe_path = probe_dir;
    else if (o.probe == DG_PROBE_AUTO && !c->quiet)
        cli_error("run: the zero-code probe is not armed: devgate_probe not found beside devgate "
                  "(set DEVGATE_PROBE_PATH); running with --probe manual");
    o.stdout_to_stderr = c->json;

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    char *json = NULL;
    dg_status st = dg_run_supervise(c->ctx, &o, &json);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (!json) {
        if (st == DG_ERR_NOT_FOUND || st == DG_ERR_IO) {
            cli_error("%s", dg_errmsg(c->ctx));
            return st == DG_ERR_NOT_FOUND ? EXIT_RUN_NOTFOUND : EXIT_RUN_NOEXEC;
        }
        return cli_fail_status(c, st, "run");
    }
    cJSON *rec = cJSON_Parse(json);
    const cJSON *sup = cJSON_GetObjectItem(rec, "supervise");
    const cJSON *xs = cJSON_GetObjectItem(sup, "exit_status");
    int rc = cJSON_IsTrue(cJSON_GetObjectItem(sup, "interrupted")) ? EXIT_INTERRUPTED
             : cJSON_IsTrue(cJSON_GetObjectItem(sup, "timed_out")) ? EXIT_RUN_TIMEOUT
             : cJSON_IsNumber(xs) && xs->valuedouble == 0          ? EXIT_PASS
                                                                   : EXIT_FAIL;
    if (!c->quiet && rc != EXIT_PASS) {
        const cJSON *step;
        cJSON_ArrayForEach(step, cJSON_GetObjectItem(rec, "steps"))
        {
            if (strcmp(jstr(step, "name", ""), "supervise") == 0 &&
                cJSON_IsString(cJSON_GetObjectItem(step, "error")))
                cli_error("run: %s", jstr(step, "error", ""));
        }
    }
    cJSON_Delete(rec);
    rc = cli_evidence_finish(c, "run", json, toff ? thresholds : NULL, out_dir, rc);
    dg_string_free(json);
    return rc;
}
