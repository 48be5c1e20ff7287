/* devgate slo: a signable concurrency SLO for a shared node (docs/slo.md).
 * Parses the options, calls dg_slo_run, prints the ladder and the statement,
 * maps the final gate to the exit status. */
#include "cli.h"
#include "devgate_slo.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t slo_sig;

typedef struct slo_args {
    dg_slo_opts o;
    const char *prompt_file;
    cli_thresholds thr;
    bool beside; /* --while */
} slo_args;

static const char *api_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    dg_slo_api *a = field;
    if (strcmp(v, "openai") == 0)
        *a = DG_SLO_OPENAI;
    else if (strcmp(v, "ollama") == 0)
        *a = DG_SLO_OLLAMA;
    else
        return "openai or ollama";
    return NULL;
}

/* "1,2,4,8,16" into the ladder. */
static const char *concurrency_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    dg_slo_opts *o = field;
    const char *want = "ascending stream counts in 1..4096 such as 1,2,4,8 (at most 16)";
    int n = 0;
    const char *p = v;
    while (*p) {
        char *end;
        errno = 0;
        long c = strtol(p, &end, 10);
        if (errno || end == p || c < 1 || c > 4096 || n == DG_SLO_MAX_LEVELS ||
            (n && c <= o->concurrency[n - 1]) || (*end && *end != ','))
            return want;
        o->concurrency[n++] = (int)c;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return want;
    }
    if (!n)
        return want;
    o->nconcurrency = n;
    return NULL;
}

/* --slo METRIC:LIMIT, repeatable. */
static const char *bound_opt(const cli_opt *opt, const char *v, void *field)
{
    (void)opt;
    dg_slo_opts *o = field;
    if (o->nbounds == DG_SLO_MAX_BOUNDS)
        return "at most 4 bounds";
    if (dg_slo_bound_parse(NULL, v, &o->bounds[o->nbounds]) != DG_OK)
        return "METRIC:LIMIT with METRIC ttft, tpot, itl or e2e (ttft:500ms, tpot:30ms, e2e:2s)";
    for (int i = 0; i < o->nbounds; i++)
        if (o->bounds[i].metric == o->bounds[o->nbounds].metric)
            return "each metric once";
    o->nbounds++;
    return NULL;
}

#define OFF(f) offsetof(slo_args, f)
const cli_opt cli_slo_opts[] = {
    {CLI_FUNC, "--target", NULL, "URL", NULL, NULL,
     "the endpoint: http://HOST:PORT (the API's path added), a full URL such as "
     "http://HOST:PORT/v1/chat/completions, or fixture: devgate's own model served on a loopback "
     "port for the run",
     OFF(o.target), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_FUNC, "--api", NULL, "openai|ollama", "openai", NULL,
     "openai: server-sent events with usage; ollama: NDJSON with eval_count", OFF(o.api), 0, 0,
     api_opt, NULL, NULL},
    {CLI_FUNC, "--model", NULL, "NAME", "the server's first model (the fixture: mlp)", NULL,
     "the model each request names; with --target fixture the fixture's model (a preset: mlp, "
     "lenet, cifar, or a layer string)",
     OFF(o.model), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_FUNC, "--backend", NULL, "NAME", "cpu", NULL,
     "--target fixture: the backend its forward passes run on (cpu, opencl or cuda)",
     OFF(o.fixture_backend), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_INT, "--batch", NULL, "N", "1", "samples",
     "--target fixture: the samples in each forward pass (one pass a streamed token)",
     OFF(o.fixture_batch), 1, 65536, NULL, NULL, NULL},
    {CLI_FUNC, "--concurrency", NULL, "N[,N...]", "1", "streams",
     "closed loop: N streams, the next request when one ends; a list is a ladder", OFF(o), 0, 0,
     concurrency_opt, NULL, NULL},
    {CLI_FLAG, "--find-max", NULL, NULL, NULL, NULL,
     "double the concurrency from --concurrency while the SLO holds, then bisect", OFF(o.find_max),
     0, 0, NULL, NULL, NULL},
    {CLI_INT, "--max-concurrency", NULL, "N", "256", "streams", "--find-max's ceiling",
     OFF(o.max_concurrency), 1, 4096, NULL, NULL, NULL},
    {CLI_DOUBLE, "--rate", NULL, "R", NULL, "requests/s",
     "open loop: seeded arrivals at R requests/s (instead of --concurrency)", OFF(o.rate),
     ABOVE_ZERO, 1e6, NULL, NULL, NULL},
    {CLI_DOUBLE, "--burstiness", NULL, "B", "1", NULL,
     "the arrivals' gamma shape: 1 Poisson, below 1 burstier", OFF(o.burstiness), 0.01, 100, NULL,
     NULL, NULL},
    {CLI_INT, "--max-inflight", NULL, "N", "1024", "requests",
     "open loop: requests in flight at most (later arrivals wait, and their wait counts)",
     OFF(o.max_inflight), 1, 4096, NULL, NULL, NULL},
    {CLI_U64, "--seed", NULL, "X", "0", NULL, "arrivals and bootstrap seed", OFF(o.seed), 0, 0,
     NULL, NULL, NULL},
    {CLI_FUNC, "--duration", NULL, "D", "60s", NULL, "the measured window of each level",
     OFF(o.duration_s), 0, 0, cli_duration_opt, NULL, NULL},
    {CLI_LONG, "--requests", NULL, "N", "0", "requests",
     "the window goes on past --duration until N requests were sent (at most 4 x --duration)",
     OFF(o.min_requests), 0, 100000000, NULL, NULL, NULL},
    {CLI_DOUBLE, "--warmup", NULL, "S", "10% of --duration, at least 1", "s",
     "warm-up before the steady-state check (0: none)", OFF(o.warmup_s), 0, 86400, NULL, NULL,
     NULL},
    {CLI_FUNC, "--window", NULL, "D", "2s", NULL,
     "a steady-state window: three in a row must agree within 10%", OFF(o.window_s), 0, 0,
     cli_duration_opt, NULL, NULL},
    {CLI_INT, "--max-windows", NULL, "N", "10", "windows",
     "windows tried before measuring anyway (the level then signs nothing)", OFF(o.max_windows), 3,
     1000, NULL, NULL, NULL},
    {CLI_FUNC, "--slo", NULL, "METRIC:LIMIT", NULL, NULL,
     "a bound: ttft, tpot, itl or e2e with ms, s or us (repeatable: ttft:500ms --slo tpot:30ms)",
     OFF(o), 0, 0, bound_opt, NULL, NULL},
    {CLI_DOUBLE, "--percentile", NULL, "P", "99", "percent", "the percentile every bound holds at",
     OFF(o.percentile), ABOVE_ZERO, 99.999, NULL, NULL, NULL},
    {CLI_DOUBLE, "--confidence", NULL, "C", "0.99", NULL,
     "LoadGen's confidence: the binomial rule's 1 - alpha", OFF(o.confidence), 0.5, 0.999999, NULL,
     NULL, NULL},
    {CLI_FUNC, "--prompt-file", NULL, "F", "a built-in prompt", NULL,
     "prompts, one a line, sent in turn", OFF(prompt_file), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_INT, "--max-tokens", NULL, "K", "64", "tokens", "tokens asked of each request",
     OFF(o.max_tokens), 1, 1000000, NULL, NULL, NULL},
    {CLI_FUNC, "--request-timeout", NULL, "D", "60s", NULL,
     "a request still going after D is a timeout (counted, never dropped)",
     OFF(o.request_timeout_s), 0, 0, cli_duration_opt, NULL, NULL},
    {CLI_STR, "--label", NULL, "L", "none", NULL, "free text kept in the record", OFF(o.label), 0,
     0, NULL, NULL, NULL},
    {CLI_FLAG, "--no-env", NULL, NULL, NULL, NULL, "skip the environment proof", OFF(o.no_env), 0,
     0, NULL, NULL, NULL},
    {CLI_FUNC, "--metrics", NULL, "URL", "none", NULL,
     "the engine's Prometheus endpoint (llama.cpp, vLLM, TGI, SGLang): scraped before, once a "
     "second during and after each level's window: its token rate, queue, batch and KV cache",
     OFF(o.metrics_url), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_FLAG, "--while", NULL, NULL, NULL, NULL,
     "train beside serving: the command after -- runs alone, then while the signed level (else "
     "the first) is measured again; the statement must hold beside it too",
     OFF(beside), 0, 0, NULL, NULL, NULL},
    {CLI_INT, "--while-steps", NULL, "N", "20", "steps",
     "the training's timed steps alone (the probe's, after its warm-up; then SIGTERM)",
     OFF(o.while_steps), 1, 1000000, NULL, NULL, NULL},
    {CLI_FUNC, "--while-seconds", NULL, "D", "300s", NULL,
     "the most the training may take to reach its steps, alone or before the level beside",
     OFF(o.while_seconds), 0, 0, cli_duration_opt, NULL, NULL},
    {CLI_FUNC, "--threshold", NULL, "NAME=VALUE", NULL, NULL,
     "a rule threshold (repeatable; docs/rules.md: slo_queue_ratio, slo_interference_pct, ...)",
     OFF(thr), 0, 0, cli_threshold_add, NULL, NULL},
    CLI_OPTS_END,
};
#undef OFF

/* ---- printing ------------------------------------------------------------------------ */

/* The percentile p of metric m at a level: "123.4" ms or "-". */
static const char *pct_cell(char *buf, size_t len, const cJSON *lvl, const char *m, double p,
                            bool with_ci)
{
    const cJSON *e;
    cJSON_ArrayForEach(
        e, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(lvl, "latency"), m),
                               "percentiles"))
    {
        if (fabs(jnum(e, "p", -1) - p) > 1e-9)
            continue;
        double v = jmetric(e, "value"), lo = jnum(e, "lo", NAN), hi = jnum(e, "hi", NAN);
        if (isnan(v))
            break;
        if (with_ci && isfinite(lo) && isfinite(hi))
            snprintf(buf, len, "%.1f [%.1f-%.1f]", v, lo, hi);
        else
            snprintf(buf, len, "%.1f", v);
        return buf;
    }
    snprintf(buf, len, "-");
    return buf;
}

static void print_slo(const cJSON *r)
{
    const cJSON *spec = cJSON_GetObjectItem(r, "spec");
    char t[512], m[256];
    double p = jnum(spec, "percentile", 99);
    printf("devgate slo · %s %s · model %s · %s loop · p%g at %g%% confidence\n\n",
           jstr(spec, "api", "?"), cli_cell(t, sizeof t, jstr(spec, "target", "?")),
           cli_cell(m, sizeof m, jstr(spec, "model", "?")), jstr(spec, "mode", "?"), p,
           jnum(spec, "confidence", 0) * 100);
    char ph[16];
    snprintf(ph, sizeof ph, "p%g", p);
    printf("  %6s %7s %6s %5s %5s %8s %8s %9s %22s %9s %9s %10s %s\n", "level", "sent", "ok",
           "fail", "tmo", "req/s", "goodput", "TTFT p50", "TTFT [95% CI] ms", "TPOT", "E2E",
           "steady", "verdict");
    printf("  %6s %7s %6s %5s %5s %8s %8s %9s %22s %9s %9s\n", "", "", "", "", "", "", "", "ms", ph,
           ph, ph);
    const cJSON *lvl;
    cJSON_ArrayForEach(lvl, cJSON_GetObjectItem(r, "levels"))
    {
        char lv[24], rq[24], gp[24], a[48], b[48], c[48], d[48];
        double conc = jnum(lvl, "concurrency", NAN);
        if (isfinite(conc))
            snprintf(lv, sizeof lv, "%g", conc);
        else
            dg_fmt_num(lv, sizeof lv, "%.3g/s", jmetric(lvl, "rate"));
        const cJSON *rqs = cJSON_GetObjectItem(lvl, "requests"),
                    *tp = cJSON_GetObjectItem(lvl, "throughput");
        printf("  %6s %7g %6g %5g %5g %8s %8s %9s %22s %9s %9s %10s %s\n", lv, jnum(rqs, "sent", 0),
               jnum(rqs, "ok", 0), jnum(rqs, "failed", 0), jnum(rqs, "timeouts", 0),
               cli_metric(rq, sizeof rq, tp, "requests_per_s", "%.2f", "-"),
               cli_metric(gp, sizeof gp, tp, "goodput", "%.2f", "-"),
               pct_cell(a, sizeof a, lvl, "ttft", 50, false),
               pct_cell(b, sizeof b, lvl, "ttft", p, true),
               pct_cell(c, sizeof c, lvl, "tpot", p, false),
               pct_cell(d, sizeof d, lvl, "e2e", p, false),
               jstr(cJSON_GetObjectItem(lvl, "steady"), "state", "?"),
               jstr(cJSON_GetObjectItem(lvl, "verdict"), "state", "?"));
    }
    printf("\n");
    cJSON_ArrayForEach(lvl, cJSON_GetObjectItem(r, "levels"))
    {
        const cJSON *b;
        char lv[32];
        double conc = jnum(lvl, "concurrency", NAN);
        if (isfinite(conc))
            snprintf(lv, sizeof lv, "%g stream%s", conc, conc == 1 ? "" : "s");
        else
            dg_fmt_num(lv, sizeof lv, "%.3g req/s", jmetric(lvl, "rate"));
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(cJSON_GetObjectItem(lvl, "verdict"), "bounds"))
        {
            char txt[256];
            printf("  %-12s %-5s %s\n", lv, jstr(b, "metric", "?"),
                   cli_cell(txt, sizeof txt, jstr(b, "text", "")));
        }
        const cJSON *errs = cJSON_GetObjectItem(cJSON_GetObjectItem(lvl, "requests"), "errors");
        const cJSON *e;
        cJSON_ArrayForEach(e, errs)
        {
            char txt[160];
            printf("  %-12s error %gx %s\n", lv, jnum(e, "count", 0),
                   cli_cell(txt, sizeof txt, jstr(e, "what", "")));
        }
    }
    const cJSON *fg = cJSON_GetObjectItem(r, "final_gate");
    char st[1200];
    if (cJSON_IsString(cJSON_GetObjectItem(r, "error"))) {
        char e[600];
        printf("  error    %s\n", cli_cell(e, sizeof e, jstr(r, "error", "")));
    }
    printf("\n  %s %s\n",
           cJSON_IsTrue(cJSON_GetObjectItem(fg, "signed")) ? "SIGNED  " : "NOT SIGNED",
           cli_cell(st, sizeof st, jstr(fg, "statement", "")));
}

/* ---- the verb ------------------------------------------------------------------------ */

/* The prompt file's non-empty lines, NULL-terminated, into *out (free both
 * with free()); false after a message. */
static bool read_prompts(const char *path, char **text, char ***out)
{
    *text = cli_read_file(path, (size_t)64 << 20);
    if (!*text) {
        cli_error("slo: --prompt-file %s: %s", path,
                  errno == EFBIG ? "larger than 64 MiB" : strerror(errno));
        return false;
    }
    size_t n = 0, cap = 16;
    char **v = malloc(cap * sizeof *v);
    for (char *line = *text, *save = NULL; v && (line = strtok_r(line, "\n", &save)); line = NULL) {
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r')
            line[--l] = 0;
        if (!l)
            continue;
        if (n + 1 == cap) {
            char **nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
            cap *= 2;
        }
        v[n++] = line;
    }
    if (!v) {
        cli_error("slo: out of memory reading --prompt-file");
        return false;
    }
    v[n] = NULL;
    if (!n) {
        free(v);
        cli_error("slo: --prompt-file %s holds no prompt (one a line)", path);
        return false;
    }
    *out = v;
    return true;
}

int cmd_slo(cli *c, int argc, char **argv)
{
    slo_args a = {.o = {.api = DG_SLO_OPENAI}};
    cli_args args = {.max = -1}; /* the words after -- (or the first word) are the command */
    int r = cli_parse(c, &cli_verb_slo, argc, argv, (void *const[]){&a, c}, &args);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    if (a.beside != (args.nrest > 0)) {
        cli_error(a.beside ? "slo: --while wants the training command after --: --while -- CMD "
                             "ARGS..."
                           : "slo: unexpected words; a training command goes after --while --");
        return EXIT_USAGE;
    }
    char probe_dir[4096];
    if (a.beside) {
        a.o.while_argv = (const char *const *)args.rest; /* NULL-terminated */
        if (cli_find_probe(probe_dir, sizeof probe_dir))
            a.o.while_probe_path = probe_dir;
    }
    if (!a.o.target) {
        cli_error("slo: --target URL is required (or --target fixture; devgate slo --help)");
        return EXIT_USAGE;
    }
    if (!a.o.nbounds) {
        cli_error("slo: give at least one bound, e.g. --slo ttft:500ms (devgate slo --help)");
        return EXIT_USAGE;
    }
    char *ptext = NULL, **prompts = NULL;
    if (a.prompt_file && !read_prompts(a.prompt_file, &ptext, &prompts))
        return EXIT_USAGE;
    a.o.prompts = (const char *const *)prompts;
    a.o.thresholds = a.thr.list[0] ? a.thr.list : NULL;
    cli_signals sigs;
    slo_sig = 0;
    a.o.cancel = &slo_sig;
    cli_signals_catch(&sigs, &slo_sig);
    char *json = NULL;
    dg_status st = dg_slo_run(c->ctx, &a.o, &json);
    cli_signals_release(&sigs);
    free(prompts);
    free(ptext);
    if (!json)
        return cli_fail_status(c, st, "slo");
    cJSON *rec = cJSON_Parse(json);
    const char *verdict = jstr(cJSON_GetObjectItem(rec, "final_gate"), "verdict", "");
    int rc = strcmp(verdict, "signed") == 0         ? EXIT_PASS
             : strcmp(verdict, "inconclusive") == 0 ? EXIT_NOT_ACCEPTED
                                                    : EXIT_FAIL;
    if (st == DG_ERR_INTERRUPTED)
        rc = EXIT_INTERRUPTED;
    else if (st != DG_OK)
        cli_error("slo: %s (the record is kept)", dg_errmsg(c->ctx));
    return cli_record_print(c, "slo", json, rec, rc, print_slo, NULL);
}

/* ---- __slo_fixture: the fixture server (run by slo --target fixture) ------------------- */

typedef struct fixture_args {
    dg_slo_fixture_opts o;
    long listen_fd, ready_fd;
} fixture_args;

#define FOFF(f) offsetof(fixture_args, f)
const cli_opt cli_slo_fixture_opts[] = {
    {CLI_LONG, "--listen-fd", NULL, "FD", NULL, NULL, "the listening socket to serve on",
     FOFF(listen_fd), 0, 1 << 20, NULL, NULL, NULL},
    {CLI_LONG, "--ready-fd", NULL, "FD", NULL, NULL, "where the ready line goes", FOFF(ready_fd), 0,
     1 << 20, NULL, NULL, NULL},
    {CLI_STR, "--backend", NULL, "NAME", "cpu", NULL, "the backend", FOFF(o.backend), 0, 0, NULL,
     NULL, NULL},
    {CLI_STR, "--model", NULL, "NAME", "mlp", NULL, "the fixture's model", FOFF(o.model), 0, 0,
     NULL, NULL, NULL},
    {CLI_INT, "--batch", NULL, "N", "1", "samples", "samples in each forward pass", FOFF(o.batch),
     1, 65536, NULL, NULL, NULL},
    {CLI_U64, "--seed", NULL, "X", "0", NULL, "weights and inputs", FOFF(o.seed), 0, 0, NULL, NULL,
     NULL},
    CLI_OPTS_END,
};
#undef FOFF

/* Test hook DEVGATE_SLO_FIXTURE_DIE=N (docs/cli.md): the server kills itself
 * (SIGKILL, as the OOM killer would) once N requests were answered. */
static void die_hook(void *user, long answered)
{
    long n = *(const long *)user;
    if (n > 0 && answered >= n)
        raise(SIGKILL);
}

int cmd_slo_fixture(cli *c, int argc, char **argv)
{
    fixture_args a = {.listen_fd = -1, .ready_fd = -1};
    int r = cli_parse(c, &cli_verb_slo_fixture, argc, argv, (void *const[]){&a, c}, NULL);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    if (a.listen_fd < 0) {
        cli_error("__slo_fixture: --listen-fd is required (this verb is run by devgate slo "
                  "--target fixture)");
        return EXIT_USAGE;
    }
    a.o.listen_fd = (int)a.listen_fd;
    a.o.ready_fd = (int)a.ready_fd;
    const char *die = getenv("DEVGATE_SLO_FIXTURE_DIE");
    long die_after = die ? strtol(die, NULL, 10) : 0;
    if (die_after > 0) {
        a.o.on_answered = die_hook;
        a.o.user = &die_after;
    }
    cli_signals sigs;
    slo_sig = 0;
    a.o.cancel = &slo_sig;
    cli_signals_catch(&sigs, &slo_sig);
    dg_status st = dg_slo_fixture_serve(c->ctx, &a.o);
    cli_signals_release(&sigs);
    if (st == DG_ERR_INTERRUPTED)
        return EXIT_PASS;
    /* Why the model cannot be served went to slo on the ready line: said there, once. */
    if (a.ready_fd >= 0 && st != DG_ERR_BACKEND)
        return st == DG_ERR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_USAGE;
    return st == DG_ERR_BACKEND ? (cli_fail_status(c, st, "__slo_fixture"), EXIT_FAIL)
                                : cli_fail_status(c, st, "__slo_fixture");
}
