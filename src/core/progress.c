/* The progress sink (core/progress.h): every report of a verb run carries
 * the step, the trial, the elapsed time and the ETA the owner's plan gives. */
#include "core/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void dg_progress_init(dg_progress_sink *p, dg_progress_fn fn, void *user)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->user = user;
    p->t0 = p->step_t0 = dg_now();
}

/* Sends r with the sink's step, trial and clock filled in. */
static void send(dg_progress_sink *p, dg_progress *r)
{
    double now = dg_now();
    r->step = p->step;
    r->index = p->index;
    r->total = p->total;
    r->trials = p->trials;
    if (r->kind != DG_PROGRESS_STEP && r->kind != DG_PROGRESS_STEP_END) {
        r->trial = p->trial;
        r->what = p->what[0] ? p->what : NULL;
    }
    r->elapsed_s = now - p->t0;
    r->eta_s = p->eta ? p->eta(p->ectx, now - p->step_t0) : NAN;
    if (isfinite(r->eta_s) && r->eta_s < 0)
        r->eta_s = 0;
    p->fn(p->user, r);
}

void dg_progress_step(dg_progress_sink *p, const char *step, int index, int total, int trials)
{
    if (!p)
        return;
    p->step = step;
    p->index = index;
    p->total = total;
    p->step_t0 = dg_now();
    p->trial = 0;
    p->trials = trials;
    p->what[0] = '\0';
    if (p->fn)
        send(p, &(dg_progress){.kind = DG_PROGRESS_STEP, .epoch = NAN, .steps = NAN});
}

/* An end report (STEP_END, TRIAL_END) with its result and detail. */
static void send_end(dg_progress_sink *p, dg_progress_kind kind, const char *result,
                     const char *detail)
{
    if (p && p->fn)
        send(p, &(dg_progress){.kind = kind,
                               .result = result,
                               .detail = detail && detail[0] ? detail : NULL,
                               .epoch = NAN,
                               .steps = NAN});
}

void dg_progress_step_end(dg_progress_sink *p, const char *result, const char *detail)
{
    send_end(p, DG_PROGRESS_STEP_END, result, detail);
}

void dg_progress_trial(dg_progress_sink *p, const char *fmt, ...)
{
    if (!p)
        return;
    p->trial++;
    p->trial_t0 = dg_now();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    if (p->trials && p->trial > p->trials)
        p->trials = p->trial; /* the plan's count was a guess: never "5 of 4" */
    if (p->fn)
        send(p, &(dg_progress){.kind = DG_PROGRESS_TRIAL, .epoch = NAN, .steps = NAN});
}

void dg_progress_trial_end(dg_progress_sink *p, const char *result, const char *detail)
{
    send_end(p, DG_PROGRESS_TRIAL_END, result, detail);
}

void dg_progress_expect(dg_progress_sink *p, int trials)
{
    if (p)
        p->trials = trials > p->trial ? trials : p->trial;
}

double dg_progress_trials_left_s(const dg_progress_sink *p)
{
    if (!p || p->trial < 2 || p->trials <= 0)
        return NAN;
    double one = (p->trial_t0 - p->step_t0) / (p->trial - 1);
    return fmax((p->trials - p->trial + 1) * one - (dg_now() - p->trial_t0), 0);
}

void dg_progress_program(dg_progress_sink *p, dg_progress_kind kind, double epoch, double steps,
                         const char *detail)
{
    if (p && p->fn)
        send(p, &(dg_progress){.kind = kind, .detail = detail, .epoch = epoch, .steps = steps});
}

void dg_progress_forward(void *user, const dg_progress *r)
{
    if (r->kind == DG_PROGRESS_EPOCH || r->kind == DG_PROGRESS_TICK)
        dg_progress_program(user, r->kind, r->epoch, r->steps, r->detail);
}
