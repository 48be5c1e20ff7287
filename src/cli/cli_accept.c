/* devgate accept: the main job. env -> gate -> sweep -> soak -> compare ->
 * profile -> rules -> decision -> evidence pack + one ledger entry. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t cancel_flag;

/* The first Ctrl-C asks the steps to stop and keep what they have; a second
 * one ends devgate at once (the default action, re-armed here). */
static void on_signal(int sig)
{
    cancel_flag = sig;
    signal(sig, SIG_DFL);
}

/* ---- progress on stderr (a TTY only) ----------------------------------------- */

typedef struct progress {
    bool on;
    char step[16];
    int index, total;
    double t0;
} progress;

static void progress_draw(progress *p, const char *note)
{
    if (!p->on)
        return;
    int width = 24, filled = p->total ? width * p->index / p->total : 0;
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    /* The note is a library message (it can hold file names): cleaned here,
     * because the line goes to the raw descriptor for its escapes. */
    char clean[64], line[160];
    dg_text_clean(clean, sizeof clean, note ? note : "", note ? strlen(note) : 0, false);
    snprintf(line, sizeof line, "\r\033[K[%s] %d/%d %-8s %s", bar, p->index + 1, p->total,
             p->step, clean);
    cli_term_raw(line);
}

static void on_progress(void *user, const char *step, int index, int total)
{
    progress *p = user;
    snprintf(p->step, sizeof p->step, "%s", step);
    p->index = index;
    p->total = total;
    progress_draw(p, NULL);
}

typedef struct log_user {
    cli *c;
    progress *p;
} log_user;

/* Library notes ("sweep: trial at batch 64") become the progress line's tail. */
static void on_log(dg_log_level level, const char *msg, void *user)
{
    log_user *u = user;
    if (level >= DG_LOG_WARN) {
        if (u->p->on)
            cli_term_raw("\r\033[K");
        fprintf(stderr, "devgate: %s\n", msg);
        progress_draw(u->p, NULL);
    } else if (u->p->on) {
        progress_draw(u->p, msg);
    } else if (!u->c->quiet && getenv("DEVGATE_VERBOSE")) {
        fprintf(stderr, "devgate: %s\n", msg);
    }
}

/* ---- the spec file -------------------------------------------------------------- */

/* Appends "NAME=VALUE" to the comma-separated list in buf; false when it is full. */
static bool threshold_add(char *buf, size_t len, const char *item)
{
    size_t n = strlen(buf);
    int w = snprintf(buf + n, len - n, "%s%s", n ? "," : "", item);
    return w >= 0 && (size_t)w < len - n;
}

/* Reads a JSON spec file (docs/accept.md) into o; flags given later override it. */
static bool load_spec(const char *path, cJSON **keep, dg_accept_opts *o, char *thr, size_t thr_len)
{
    char *text = cli_read_file(path, (size_t)1 << 20);
    if (!text) {
        if (errno == EFBIG)
            cli_error("accept: the spec file %s is over 1 MiB", path);
        else
            cli_error("accept: cannot read the spec file %s: %s", path, strerror(errno));
        return false;
    }
    cJSON *spec = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(spec)) {
        cJSON_Delete(spec);
        cli_error("accept: the spec file %s is not a JSON object", path);
        return false;
    }
    *keep = spec;
    const cJSON *it;
    cJSON_ArrayForEach(it, spec)
    {
        const char *k = it->string;
        bool str = cJSON_IsString(it),
             num = cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble < 1e9;
        if (strcmp(k, "model") == 0 && str)
            o->train.model = it->valuestring;
        else if (strcmp(k, "backend") == 0 && str)
            o->train.backend = it->valuestring;
        else if (strcmp(k, "data") == 0 && str)
            o->train.data = it->valuestring;
        else if (strcmp(k, "label") == 0 && str)
            o->label = it->valuestring;
        else if (strcmp(k, "seed") == 0 && num)
            o->train.seed = (uint64_t)it->valuedouble;
        else if (strcmp(k, "batch") == 0 && num)
            o->train.batch = (int)it->valuedouble;
        else if (strcmp(k, "epochs") == 0 && num)
            o->train.epochs = (int)it->valuedouble;
        else if (strcmp(k, "steps") == 0 && num)
            o->train.steps = (int)it->valuedouble;
        else if (strcmp(k, "sweep_to") == 0 && num)
            o->sweep_to = (int)it->valuedouble;
        else if (strcmp(k, "quick") == 0 && cJSON_IsBool(it))
            o->quick = cJSON_IsTrue(it);
        else if (strcmp(k, "thresholds") == 0 && cJSON_IsObject(it)) {
            const cJSON *t;
            cJSON_ArrayForEach(t, it)
            {
                char item[160];
                if (!cJSON_IsNumber(t)) {
                    cli_error("accept: spec file %s: threshold %.64s is not a number", path,
                              t->string);
                    return false;
                }
                snprintf(item, sizeof item, "%.64s=%.17g", t->string, t->valuedouble);
                if (!threshold_add(thr, thr_len, item)) {
                    cli_error("accept: too many thresholds");
                    return false;
                }
            }
        } else {
            cli_error("accept: spec file %s: unknown key or bad value for \"%.64s\"", path, k);
            return false;
        }
    }
    return true;
}

static const char usage[] =
    "usage: devgate accept [--quick] [train options] [--sweep-to N] [--threshold NAME=VALUE]...\n"
    "        [--spec FILE] [--label TEXT] [--python PATH] [-o DIR] [--json] [--quiet]\n";

int cmd_accept(cli *c, int argc, char **argv)
{
    dg_accept_opts o = {.train = CLI_TRAIN_DEFAULTS};
    char thr[4096] = "";
    const char *out_dir = NULL;
    cJSON *spec = NULL;
    int rc = EXIT_USAGE;
    /* The spec file first, so that flags override it wherever they stand. */
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (opt_value(argc, argv, &i, "--spec", &v) && !load_spec(v, &spec, &o, thr, sizeof thr))
            goto out;
    }
    for (int i = 1; i < argc; i++) {
        const char *v;
        long n;
        int r;
        if (cli_common_opt(c, argc, argv, &i) || opt_value(argc, argv, &i, "--spec", &v))
            continue;
        if (strcmp(argv[i], "--quick") == 0) {
            o.quick = true;
        } else if (opt_value(argc, argv, &i, "--label", &v)) {
            o.label = v;
        } else if (opt_value(argc, argv, &i, "--python", &v)) {
            o.python = v;
        } else if (opt_value(argc, argv, &i, "-o", &v) || opt_value(argc, argv, &i, "--out", &v)) {
            out_dir = v;
        } else if (opt_value(argc, argv, &i, "--sweep-to", &v)) {
            if (!cli_parse_long(v, 1, 1 << 20, &n)) {
                cli_error("accept: --sweep-to wants a batch in [1, 1048576], got '%s'", v);
                goto out;
            }
            o.sweep_to = (int)n;
        } else if (opt_value(argc, argv, &i, "--threshold", &v)) {
            if (!strchr(v, '=') || strchr(v, ',') || !threshold_add(thr, sizeof thr, v)) {
                cli_error("accept: --threshold wants NAME=VALUE, got '%s'", v);
                goto out;
            }
        } else if ((r = cli_parse_train_opt(c, argc, argv, &i, &o.train)) != 0) {
            if (r < 0)
                goto out;
        } else {
            cli_error("accept: unknown option '%s'\n%s", argv[i], usage);
            goto out;
        }
    }
    /* A bad threshold is found now, not after minutes of measuring. */
    char *probe = NULL;
    if (dg_diagnose(c->ctx, "{\"v\":1,\"kind\":\"accept\"}", thr[0] ? thr : NULL, &probe) !=
        DG_OK) {
        cli_error("accept: %s", dg_errmsg(c->ctx));
        goto out;
    }
    dg_string_free(probe);
    if (dg_disable_ops_check(c->ctx, o.train.disable_ops) != DG_OK) {
        cli_error("accept: %s", dg_errmsg(c->ctx));
        goto out;
    }

    /* The profile's trace goes beside the packs and is moved into this one. */
    char trace[4200];
    if (out_dir)
        snprintf(trace, sizeof trace, "%s/trace.json", out_dir);
    else
        snprintf(trace, sizeof trace, "devgate-report/.trace-%ld.json", (long)getpid());
    char tdir[4200];
    snprintf(tdir, sizeof tdir, "%s", trace);
    *strrchr(tdir, '/') = '\0';
    if (!cli_make_dirs(tdir)) {
        cli_error("accept: cannot create %s: %s", tdir, strerror(errno));
        goto out;
    }
    o.trace_path = trace;

    progress p = {.on = !c->quiet && !c->json && isatty(2), .t0 = 0};
    log_user lu = {c, &p};
    dg_set_log(c->ctx, on_log, &lu);
    o.progress = on_progress;
    o.progress_user = &p;
    cancel_flag = 0;
    o.train.cancel = &cancel_flag;
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    char *json = NULL;
    dg_status st = dg_accept_run(c->ctx, &o, &json);
    if (p.on)
        cli_term_raw("\r\033[K");
    int exit_status = st == DG_OK                ? EXIT_PASS
                      : st == DG_ERR_INTERRUPTED ? EXIT_INTERRUPTED
                      : st == DG_ERR_UNAVAILABLE ? EXIT_UNAVAILABLE
                                                 : EXIT_USAGE;
    if (!json) {
        rc = cli_fail_status(c, st, "accept");
    } else {
        if (st == DG_ERR_INTERRUPTED)
            cli_error("interrupted: keeping the partial pack and ledger entry");
        else if (st != DG_OK)
            cli_error("accept: %s", dg_errmsg(c->ctx));
        /* Judging and writing the pack are not interrupted by a late signal. */
        signal(SIGINT, SIG_IGN);
        rc = cli_evidence_finish(c, "accept", json, thr[0] ? thr : NULL, out_dir, exit_status);
    }
    dg_string_free(json);
    if (!out_dir)
        unlink(trace); /* left over only when the pack could not take it */
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
out:
    cJSON_Delete(spec);
    return rc;
}
