/* The routing decision (METHOD.md, "Routes and when each fits"): from the
 * findings and the typed view's compare runs to one of cpu, device, native or remote,
 * with reasons that carry the numbers. The first group that applies decides:
 *
 *   1. the environment is broken (gate-failed, env-translated, env-mixed-arch,
 *      device-missing)                                   -> cpu: fix it first
 *   2. numerics drift or a failed compare run            -> cpu
 *   3. heavy persistent fallbacks (operator-gap fail)    -> native for `run`
 *      (the user's framework), else remote (devgate's fixture is the native engine)
 *   4. memory pressure (retained-refs, memory-pressure)  -> remote
 *   5. the speedup's 95% interval holds a threshold the route hangs on and
 *      neither rules the device out (verdict-inconclusive) -> inconclusive: no route
 *   6. the device does not pay off at the route run's batch (slow-device-data,
 *      or the speedup's interval below speedup_min)      -> cpu
 *   7. otherwise                                         -> device, with its speedup
 *
 * Without a compare section the speedup was not measured: the device is kept
 * only when the gate shows it working, and the reasons say so. */
#include "diagnose/diagnose.h"

#include <string.h>

typedef struct decision {
    dg_diag *d;
    cJSON *reasons;
} decision;

static void reason(decision *dc, const char *fmt, ...) DG_PRINTF(2, 3);
static void reason(decision *dc, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cJSON *s = cJSON_CreateString(buf);
    if (!s || !cJSON_AddItemToArray(dc->reasons, s)) {
        cJSON_Delete(s);
        dc->d->nomem = true;
    }
}

static const char *title_of(const dg_finding *f)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f->json, "title");
    return cJSON_IsString(t) ? t->valuestring : f->id;
}

/* Adds "prefix<title>suffix" for every finding of these ids at min severity
 * or above; returns how many. */
static int reasons_from(decision *dc, const char *const *ids, dg_severity min, const char *prefix,
                        const char *suffix)
{
    int n = 0;
    for (int i = 0; i < dc->d->fs.n; i++) {
        const dg_finding *f = &dc->d->fs.items[i];
        if (f->severity < min)
            continue;
        for (const char *const *id = ids; *id; id++)
            if (!strcmp(f->id, *id)) {
                reason(dc, "%s%s%s", prefix, title_of(f), suffix);
                n++;
                break;
            }
    }
    return n;
}

/* The device backend under judgement: the compare run's, else compare's or
 * the spec's; NULL when none is known. */
static const char *device_backend(const dg_diag *d, int run)
{
    const dg_view_compare *c = &d->v->compare;
    const char *b = run >= 0 && run < c->nruns ? c->runs[run].device_backend : NULL;
    if (!b)
        b = c->backend;
    if (!b)
        b = d->v->spec.backend;
    return b && strcmp(b, "cpu") != 0 ? b : NULL;
}

/* A backend the gate shows available with a good matrix product; with no
 * name, the first such non-cpu backend. */
static const char *gate_working(const dg_diag *d, const char *name)
{
    const dg_view_gate *g = &d->v->gate;
    for (int i = 0; i < g->nbackends; i++) {
        const dg_view_backend *b = &g->backends[i];
        const char *nm = b->name;
        if (!nm || !strcmp(nm, "cpu") || (name && strcmp(nm, name) != 0))
            continue;
        if (b->available == 1 && b->matmul.ok == 1)
            return nm;
    }
    return NULL;
}

/* The batch the final gate promises (the sweep's best rate at or below its
 * safe batch), the safe batch said apart in the words of what ended the
 * sweep; never a batch larger than the training set. */
static void promise_reasons(decision *dc)
{
    int safe = dg_rec_int(dc->d->v->sweep.safe_batch);
    double best_b, best_sps;
    if (safe > 0) {
        int best = dg_sweep_promise(&dc->d->v->sweep, &best_b, &best_sps) ? (int)best_b : safe;
        int ntrain = dg_rec_int(dc->d->v->soak.train_samples);
        if (ntrain > 0 && ntrain < best)
            reason(dc,
                   "train at batch %d or below (the training set's size; the sweep's "
                   "safe batch is %d)",
                   ntrain, safe);
        else if (best == safe)
            reason(dc, "train at batch %d or below (the sweep's safe batch)", safe);
        else
            reason(dc,
                   "train at batch %d (the sweep's best rate, %.0f samples/s); the safe "
                   "batch %d is %s, and larger batches up to it run slower",
                   best, best_sps, safe, dg_sweep_bound_words(dc->d->v->sweep.stopped_reason));
    }
}

/* Groups 5 to 7 on the route run rr: contended or inconclusive (no route),
 * the device not paying off (cpu), else the device (*backend) with the batch
 * to train at. */
static const char *route_measured(decision *dc, int rr, const char **backend)
{
    const dg_diag *d = dc->d;
    const char *route = NULL;
    const dg_view_run *run = &d->v->compare.runs[rr];
    double sp = run->speedup.value;
    double cpu_ms = run->cpu_step_ms.value, dev_ms = run->device_step_ms.value;
    int batch = dg_rec_int(run->batch);
    const char *dev = device_backend(d, rr);
    dev = dev ? dev : "the device";
    char times[192] = "";
    if (isfinite(cpu_ms) && isfinite(dev_ms))
        snprintf(times, sizeof times, " (step %.1f ms on the device, %.1f ms on cpu)", dev_ms,
                 cpu_ms);
    /* A ratio over a cpu side that ran below its hardware is an upper
     * bound, never an unqualified "N x cpu". */
    if (dg_fired(d, "cpu-baseline-unfair", DG_SEV_INFO, -1))
        snprintf(times + strlen(times), sizeof times - strlen(times), "%s",
                 ", against a cpu baseline below what its cores can do (cpu-baseline-unfair):"
                 " an upper bound, not the device's real margin");
    double slo, shi;
    dg_run_interval(run->speedup, run->speedup_ci, &slo, &shi);
    if (dg_fired(d, "contended", DG_SEV_WARN, -1)) {
        /* Other work took CPUs while devgate measured: neither side's
         * rate is the machine's own, so no route is promised from it. */
        route = "inconclusive";
        reason(dc,
               "no route: other processes ran during the measured windows (see contended), "
               "so %s at %.2fx cpu at batch %d%s is not this machine's own figure",
               dev, sp, batch, times);
        reason(dc, "rerun with the machine quiet: the measurement lock keeps devgate's own "
                   "runs apart, not other work");
    } else if (dg_fired(d, "verdict-inconclusive", DG_SEV_INFO, rr)) {
        /* An interval that holds the threshold routes nowhere. */
        route = "inconclusive";
        reason(dc,
               "no route: %s is %.2fx cpu at batch %d (95%% interval %.2f-%.2fx)%s, and the "
               "interval holds the threshold the route hangs on",
               dev, sp, batch, slo, shi, times);
        int reps = dg_rec_int(run->reps_per_side);
        reason(dc,
               "rerun with the machine quiet%s, or with more repetitions (devgate compare "
               "--repetitions %d)",
               dg_fired(d, "contended", DG_SEV_INFO, -1) ? " (other processes ran during "
                                                           "the measurements: see contended)"
                                                         : "",
               reps > 0 ? 2 * reps : 10);
    } else if (dg_fired(d, "slow-device-data", DG_SEV_INFO, rr) ||
               dg_interval_side(slo, shi, d->th[TH_SPEEDUP_MIN]) == -1) {
        route = "cpu";
        char why[96];
        double red = run->reduction_pct.value;
        if (dg_interval_side(slo, shi, d->th[TH_SPEEDUP_MIN]) == -1 || !isfinite(red))
            snprintf(why, sizeof why, "below speedup_min %.2fx (95%% interval %.2f-%.2fx)",
                     d->th[TH_SPEEDUP_MIN], slo, shi);
        else
            snprintf(why, sizeof why,
                     "step time %.0f%% shorter, under device_min_reduction_pct %.0f%%", red,
                     d->th[TH_DEVICE_MIN_REDUCTION_PCT]);
        reason(dc, "the device does not pay off at this batch: %s is %.2fx cpu at batch %d%s, %s",
               dev, sp, batch, times, why);
    } else {
        route = "device";
        *backend = device_backend(d, rr);
        if (slo != shi)
            reason(dc, "%s is %.2fx cpu at batch %d (95%% interval %.2f-%.2fx)%s", dev, sp, batch,
                   slo, shi, times);
        else
            reason(dc, "%s is %.2fx cpu at batch %d%s", dev, sp, batch, times);
        promise_reasons(dc);
    }
    return route;
}

/* Without a speedup: the device when the gate shows it working (*backend),
 * else the cpu; the reasons say the payoff is unproven. */
static const char *route_unmeasured(decision *dc, const char **backend)
{
    const dg_diag *d = dc->d;
    const char *route = NULL;
    const char *why =
        d->v->compare.present ? "compare has no finished run with a speedup" : "no compare section";
    const char *dev = device_backend(d, -1);
    const char *ok = gate_working(d, dev);
    if (ok) {
        route = "device";
        *backend = ok;
        reason(dc,
               "the speedup was not measured (%s): %s passed the device gate, but its "
               "payoff over the cpu is unproven",
               why, ok);
    } else {
        route = "cpu";
        reason(dc, "the speedup was not measured (%s)", why);
        reason(dc, d->v->gate.present ? "no device backend passed the device gate"
                                      : "no gate section: no device is known to work");
    }
    return route;
}

cJSON *dg_decide(dg_diag *d)
{
    static const char *const env_ids[] = {"gate-failed", "env-translated", "env-mixed-arch",
                                          "device-missing", NULL};
    static const char *const drift_ids[] = {"op-numerics", "numerics-drift", NULL};
    static const char *const failed_ids[] = {"compare-failed", NULL};
    static const char *const gap_ids[] = {"operator-gap", NULL};
    static const char *const mem_ids[] = {"retained-refs", "memory-pressure", NULL};

    decision dc = {d, cJSON_CreateArray()};
    if (!dc.reasons) {
        d->nomem = true;
        return NULL;
    }
    const char *route = NULL;
    const char *backend = NULL;
    bool run_kind = !strcmp(d->kind, "run");
    int rr = dg_route_run(d);

    if (reasons_from(&dc, env_ids, DG_SEV_FAIL, "fix the environment first: ", "") > 0) {
        route = "cpu";
    } else if (reasons_from(&dc, drift_ids, DG_SEV_FAIL, "",
                            ": train elsewhere or use the device for preprocessing only") +
                   reasons_from(&dc, failed_ids, DG_SEV_FAIL, "",
                                ": the device path must run to the end before it is trusted") >
               0) {
        route = "cpu";
    } else if (reasons_from(&dc, gap_ids, DG_SEV_FAIL, "",
                            run_kind ? ": heavy persistent fallbacks; move to the native engine "
                                       "(an engine with these operators)"
                                     : ": heavy persistent fallbacks; move to a remote node "
                                       "whose device has these operators") > 0) {
        route = run_kind ? "native" : "remote";
    } else if (reasons_from(&dc, mem_ids, DG_SEV_WARN, "",
                            ": memory pressure; a dedicated remote host isolates the load") > 0) {
        route = "remote";
    } else if (rr >= 0) {
        route = route_measured(&dc, rr, &backend);
    } else {
        route = route_unmeasured(&dc, &backend);
    }

    cJSON *o = cJSON_CreateObject();
    if (!o) {
        cJSON_Delete(dc.reasons);
        d->nomem = true;
        return NULL;
    }
    if (!cJSON_AddStringToObject(o, "route", route) ||
        !(backend ? cJSON_AddStringToObject(o, "backend", backend)
                  : cJSON_AddNullToObject(o, "backend")))
        d->nomem = true;
    if (!cJSON_AddItemToObject(o, "reasons", dc.reasons)) {
        cJSON_Delete(dc.reasons);
        d->nomem = true;
    }
    return o;
}
