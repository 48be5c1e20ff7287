/* devgate accept: the main job. env -> gate -> sweep -> soak -> compare ->
 * profile -> rules -> decision -> evidence pack + one ledger entry. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first INT, TERM or HUP asks the steps to stop and keep what they have
 * (cli_signal.c); the partial pack and ledger entry are written either way. */
static volatile sig_atomic_t cancel_flag;

/* ---- the spec file -------------------------------------------------------------- */

typedef struct accept_args {
    dg_accept_opts o;
    const char *out_dir, *spec_path;
    cli_thresholds thr;
    /* accept -- CMD only */
    int sweep_from, trial_timeout;
    const char *device_args;
    bool empty_cache, no_empty_cache, no_fork_server;
} accept_args;

#define OFF(f) offsetof(accept_args, f)
const cli_opt cli_accept_opts[] = {
    {CLI_FLAG, "--quick", NULL, NULL, NULL, NULL,
     "the short tier (about a minute on 2 cores): level 1", OFF(o.quick), 0, 0, NULL, NULL, NULL},
    {CLI_INT, "--level", NULL, "N", "2 (1 with --quick)", NULL,
     "the gate's depth (devgate gate --level); 1 is --quick", OFF(o.level), DG_LEVEL_MIN,
     DG_LEVEL_MAX, NULL, NULL, NULL},
    {CLI_INT, "--sweep-to", NULL, "N", "the tier's", "samples", "largest batch the sweep tries",
     OFF(o.sweep_to), 1, 1 << 20, NULL, NULL, NULL},
    {CLI_FUNC, "--threshold", NULL, "NAME=VALUE", NULL, NULL,
     "a rule threshold (repeatable; docs/rules.md)", OFF(thr), 0, 0, cli_threshold_add, NULL, NULL},
    {CLI_STR, "--spec", NULL, "FILE", "none", NULL,
     "a JSON spec (docs/schema/spec.md); flags override it", OFF(spec_path), 0, 0, NULL, NULL,
     NULL},
    {CLI_STR, "--label", NULL, "TEXT", "none", NULL, "free text kept in the record", OFF(o.label),
     0, 0, NULL, NULL, NULL},
    {CLI_STR, "--python", NULL, "PATH", "none", NULL, "a Python interpreter for the env proof",
     OFF(o.python), 0, 0, NULL, NULL, NULL},
    {CLI_STR, "--out", "-o", "DIR", "./devgate-report/RUN_ID/", NULL,
     "where the evidence pack goes", OFF(out_dir), 0, 0, NULL, NULL, NULL},
    {CLI_INT, "--sweep-from", NULL, "N", "8", "samples", "-- CMD: the sweep's first batch",
     OFF(sweep_from), 1, 1 << 20, NULL, NULL, NULL},
    {CLI_INT, "--trial-timeout", NULL, "S", "the tier's (180, 600)", "s",
     "-- CMD: wall-clock limit of each child run", OFF(trial_timeout), 1, 86400, NULL, NULL, NULL},
    {CLI_STR, "--device-arg", NULL, "DEVICE=ARGS[,...]", "none", NULL,
     "-- CMD: words added to the command on a device, for programs that choose theirs by a "
     "flag (cpu=,cuda=--accel); without {device} the cpu runs with the accelerators hidden",
     OFF(device_args), 0, 0, NULL, NULL, NULL},
    {CLI_FLAG, "--empty-cache", NULL, NULL, NULL, NULL,
     "-- CMD: the probe empties the device cache at each epoch end (the default)", OFF(empty_cache),
     0, 0, NULL, NULL, NULL},
    {CLI_FLAG, "--no-empty-cache", NULL, NULL, NULL, NULL,
     "-- CMD: the probe leaves garbage collection and the device cache to the program",
     OFF(no_empty_cache), 0, 0, NULL, NULL, NULL},
    {CLI_FLAG, "--no-fork-server", NULL, NULL, NULL, NULL,
     "-- CMD: start every run in a fresh interpreter (no fork server; docs/accept.md)",
     OFF(no_fork_server), 0, 0, NULL, NULL, NULL},
    CLI_OPTS_END,
};
#undef OFF

/* Reads a JSON spec file (docs/schema/spec.md) into a: the accept keys here,
 * the training keys through the library's codec into *spec (which owns their
 * strings); *keep owns the label. Flags parsed later override it. */
static bool load_spec(cli *c, const char *path, cJSON **keep, dg_spec **spec, accept_args *a)
{
    char *text = cli_read_file(path, (size_t)1 << 20);
    if (!text) {
        if (errno == EFBIG)
            cli_error("accept: the spec file %s is over 1 MiB", path);
        else
            cli_error("accept: cannot read the spec file %s: %s", path, strerror(errno));
        return false;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        cli_error("accept: the spec file %s is not a JSON object", path);
        return false;
    }
    *keep = root;
    cJSON *train = cJSON_CreateObject();
    bool ok = train != NULL;
    cJSON *it = root->child;
    while (ok && it) {
        cJSON *next = it->next;
        const char *k = it->string;
        if (strcmp(k, "label") == 0 && cJSON_IsString(it)) {
            a->o.label = it->valuestring;
        } else if (strcmp(k, "quick") == 0 && cJSON_IsBool(it)) {
            a->o.quick = cJSON_IsTrue(it);
        } else if (strcmp(k, "level") == 0) {
            double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
            if (!(d >= DG_LEVEL_MIN && d <= DG_LEVEL_MAX && d == floor(d))) {
                cli_error("accept: spec file %s: level wants an integer in %d..%d", path,
                          DG_LEVEL_MIN, DG_LEVEL_MAX);
                ok = false;
            } else {
                a->o.level = (int)d;
            }
        } else if (strcmp(k, "sweep_to") == 0) {
            double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
            if (!(d >= 1 && d <= (1 << 20) && d == floor(d))) {
                cli_error("accept: spec file %s: sweep_to wants an integer in 1..1048576", path);
                ok = false;
            } else {
                a->o.sweep_to = (int)d;
            }
        } else if (strcmp(k, "thresholds") == 0 && cJSON_IsObject(it)) {
            const cJSON *t;
            cJSON_ArrayForEach(t, it)
            {
                char item[160];
                const char *why = NULL;
                if (!cJSON_IsNumber(t))
                    why = "is not a number";
                else if (snprintf(item, sizeof item, "%s=%.17g", t->string, t->valuedouble) >=
                         (int)sizeof item)
                    why = "has too long a name";
                else if (strchr(t->string, '=') || strchr(t->string, ','))
                    why = "has '=' or ',' in its name";
                else if (cli_threshold_add(NULL, item, &a->thr))
                    why = "does not fit (4 KiB of thresholds in all)";
                if (why) {
                    cli_error("accept: spec file %s: threshold \"%.64s\" %s", path, t->string, why);
                    ok = false;
                    break;
                }
            }
        } else if (strcmp(k, "label") == 0 || strcmp(k, "quick") == 0 ||
                   strcmp(k, "thresholds") == 0) {
            cli_error("accept: spec file %s: bad value for \"%s\"", path, k);
            ok = false;
        } else { /* a training key: the codec checks it */
            cJSON_AddItemToObject(train, k, cJSON_DetachItemViaPointer(root, it));
        }
        it = next;
    }
    char *tj = ok ? cJSON_PrintUnformatted(train) : NULL;
    cJSON_Delete(train);
    if (ok && !tj) {
        cli_error("accept: out of memory");
        ok = false;
    }
    if (ok && dg_spec_decode(c->ctx, tj, spec) != DG_OK) {
        cli_error("accept: spec file %s: %s", path, dg_errmsg(c->ctx));
        ok = false;
    }
    cJSON_free(tj);
    if (ok) {
        dg_train_opts keep_cancel = a->o.train;
        a->o.train = *dg_spec_opts(*spec);
        a->o.train.cancel = keep_cancel.cancel;
    }
    return ok;
}

/* What goes with a command after "--" and what goes with the fixture: the
 * combinations accept refuses, each with a message; false on the first. */
static bool own_args_ok(const accept_args *aa, const cli_args *pa, char **argv, bool has_spec)
{
    bool own = pa->rest != NULL;
    if (own && (pa->rest == argv || strcmp(pa->rest[-1], "--") != 0)) {
        cli_error("accept: unexpected argument '%s' (your own program goes after --: devgate "
                  "accept [options] -- CMD ARGS...)",
                  pa->rest[0]);
        return false;
    }
    if (own && pa->nrest == 0) {
        cli_error("accept: no program after -- (devgate accept [options] -- CMD ARGS...)");
        return false;
    }
    if (own && (has_spec || aa->o.train.model || aa->o.train.data || aa->o.train.disable_ops)) {
        cli_error("accept -- CMD: --spec, --model, --data and --disable-op are the fixture's; "
                  "for your program use the command's own arguments");
        return false;
    }
    if (!own && (aa->sweep_from || aa->trial_timeout || aa->empty_cache || aa->no_empty_cache ||
                 aa->device_args || aa->no_fork_server)) {
        cli_error("accept: --sweep-from, --trial-timeout, --device-arg, --[no-]empty-cache and "
                  "--no-fork-server "
                  "apply to accept -- CMD (your own program) only");
        return false;
    }
    /* For a command, --backend names the device judged, as the program's framework does. */
    static const char *const devices[] = {"cpu", "cuda", "mps"};
    bool known = !own || !aa->o.train.backend;
    for (size_t i = 0; !known && i < 3; i++)
        known = strcmp(aa->o.train.backend, devices[i]) == 0;
    if (!known) {
        cli_error("accept -- CMD: --backend %s: want cpu, cuda or mps (the device {device} "
                  "names)",
                  aa->o.train.backend);
        return false;
    }
    return true;
}

/* Resolves the level from --quick and --level (--quick is level 1, the
 * default level 2) and says its budget up front; false when they disagree. */
static bool level_said(cli *c, dg_accept_opts *o, bool own)
{
    if (o->quick && o->level > DG_LEVEL_MIN) {
        cli_error("accept: --quick is level %d; it cannot run --level %d", DG_LEVEL_MIN, o->level);
        return false;
    }
    if (!o->level)
        o->level = o->quick ? DG_LEVEL_MIN : DG_LEVEL_MIN + 1;
    o->quick = o->level == DG_LEVEL_MIN;
    const dg_level_info *lv = dg_level_get(o->level);
    if (!c->quiet) {
        if (own && o->level > DG_LEVEL_MIN)
            fprintf(stderr,
                    "devgate accept: level %d (%s); the device gate's budget %.0f s, your "
                    "program's steps set the rest\n",
                    o->level, lv->what, lv->gate_budget_s);
        else if (own)
            fprintf(stderr, "devgate accept: level %d (%s); your program's steps set the time\n",
                    o->level, lv->what);
        else
            fprintf(stderr, "devgate accept: level %d, budget %.0f s (%s)\n", o->level,
                    lv->accept_budget_s, lv->what);
    }
    return true;
}

/* The profile's trace path (*trace, new) beside the packs, in *tdir (new),
 * created; false with a message when it cannot be. */
static bool trace_prepare(const char *out_dir, char **tdir, char **trace)
{
    *tdir = strdup(out_dir ? out_dir : "devgate-report");
    size_t tlen = *tdir ? strlen(*tdir) + 64 : 0;
    *trace = *tdir ? malloc(tlen) : NULL;
    if (!*trace) {
        cli_error("accept: out of memory");
        return false;
    }
    if (out_dir)
        snprintf(*trace, tlen, "%s/trace.json", out_dir);
    else
        snprintf(*trace, tlen, "devgate-report/.trace-%ld.json", (long)getpid());
    if (!cli_make_dirs(*tdir)) {
        cli_error("accept: cannot create %.256s%s: %s", *tdir, strlen(*tdir) > 256 ? "..." : "",
                  strerror(errno));
        return false;
    }
    return true;
}

/* accept -- CMD: the command runner on rest (the words after "--"). */
static dg_status run_command(cli *c, const accept_args *aa, const dg_accept_opts *o, char **rest,
                             const char *probe_dir, cli_progress *p, char **json)
{
    dg_accept_cmd_opts co = {.argv = (const char *const *)rest,
                             .probe_path = probe_dir,
                             .python = o->python,
                             .device = o->train.backend,
                             .quick = o->quick,
                             .level = o->level,
                             .batch = o->train.batch,
                             .epochs = o->train.epochs,
                             .sweep_from = aa->sweep_from,
                             .sweep_to = o->sweep_to,
                             .mem_budget = o->train.mem_budget,
                             .empty_cache = !aa->no_empty_cache,
                             .trial_timeout_s = aa->trial_timeout,
                             .device_args = aa->device_args,
                             .no_fork_server = aa->no_fork_server,
                             .label = o->label,
                             .trace_path = o->trace_path,
                             .cancel = &cancel_flag,
                             .progress = cli_progress_report,
                             .progress_user = p,
                             .output = cli_progress_output,
                             .output_user = p};
    return dg_accept_cmd_run(c->ctx, &co, json);
}

int cmd_accept(cli *c, int argc, char **argv)
{
    accept_args aa = {.o = {.train = DG_TRAIN_OPTS_INIT}};
    dg_accept_opts o;
    char *thr = aa.thr.list;
    const char *out_dir = NULL;
    cJSON *spec = NULL;
    dg_spec *tspec = NULL;
    char *trace = NULL, *tdir = NULL;
    int rc = EXIT_USAGE;
    /* The spec file first, so that flags override it wherever they stand. */
    for (int i = 1; i < argc; i++) {
        const char *path = strcmp(argv[i], "--spec") == 0 && i + 1 < argc ? argv[++i]
                           : strncmp(argv[i], "--spec=", 7) == 0          ? argv[i] + 7
                                                                          : NULL;
        if (path && !load_spec(c, path, &spec, &tspec, &aa))
            goto out;
    }
    cli_args pa = {.max = -1}; /* a command only after "--" (checked below) */
    int r = cli_parse(c, &cli_verb_accept, argc, argv, (void *const[]){&aa, &aa.o.train, c}, &pa);
    if (r != CLI_PARSED) {
        rc = cli_parse_exit(r);
        goto out;
    }
    o = aa.o;
    out_dir = aa.out_dir;
    bool own = pa.rest != NULL;
    if (!own_args_ok(&aa, &pa, argv, spec != NULL))
        goto out;
    char probe_dir[4096];
    bool have_probe = own && cli_find_probe(probe_dir, sizeof probe_dir);
    if (own && !have_probe) {
        cli_error("accept -- CMD: the devgate_probe package was not found beside devgate (set "
                  "DEVGATE_PROBE_PATH to the directory holding it)");
        rc = EXIT_UNAVAILABLE;
        goto out;
    }
    /* A bad threshold is found now, not after minutes of measuring. */
    char *probe = NULL;
    if (dg_diagnose(c->ctx, "{\"v\":1,\"kind\":\"accept\"}", thr[0] ? thr : NULL, &probe) !=
        DG_OK) {
        cli_error("accept: %s", dg_errmsg(c->ctx));
        goto out;
    }
    dg_string_free(probe);
    if (!own && dg_train_opts_inputs_check(c->ctx, &o.train, "cifar") != DG_OK) {
        cli_error("accept: %s", dg_errmsg(c->ctx));
        goto out;
    }
    if (!level_said(c, &o, own))
        goto out;

    /* The profile's trace goes beside the packs and is moved into this one. */
    if (!trace_prepare(out_dir, &tdir, &trace))
        goto out;
    o.trace_path = trace;

    cli_progress p;
    cli_progress_start(&p, c, "accept");
    dg_set_log(c->ctx, cli_progress_log, &p);
    o.progress = cli_progress_report;
    o.progress_user = &p;
    cancel_flag = 0;
    o.train.cancel = &cancel_flag;
    cli_signals sigs;
    cli_signals_catch(&sigs, &cancel_flag);

    char *json = NULL;
    dg_status st;
    if (own)
        st = run_command(c, &aa, &o, pa.rest, probe_dir, &p, &json);
    else
        st = dg_accept_run(c->ctx, &o, &json);
    cli_progress_end(&p);
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
        cJSON *rec = cJSON_Parse(json);
        rc = cli_evidence_finish(c, "accept", json, thr[0] ? thr : NULL, out_dir, exit_status);
        if (!c->quiet || !c->json)
            cli_level_said(rec, c->json ? stderr : stdout);
        cJSON_Delete(rec);
    }
    dg_string_free(json);
    if (!out_dir)
        unlink(trace); /* left over only when the pack could not take it */
    cli_signals_release(&sigs);
    if (cancel_flag)
        rc = EXIT_INTERRUPTED; /* the first signal decides, however late */
out:
    free(trace);
    free(tdir);
    dg_spec_free(tspec);
    cJSON_Delete(spec);
    return rc;
}
