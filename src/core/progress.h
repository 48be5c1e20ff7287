/* The progress reports of a measuring verb (dg_progress, docs/cli.md
 * "Progress"): one sink per verb run, shared by the method's driver, its
 * runners and the supervisor, so each report carries the step, the trial,
 * the time since the verb started and what the tier's plan leaves. The
 * library never prints: the sink calls the caller's dg_progress_fn, or
 * nothing. */
#ifndef DG_PROGRESS_H
#define DG_PROGRESS_H

#include "core/core.h"

typedef struct dg_progress_sink {
    dg_progress_fn fn; /* NULL: every call below does nothing */
    void *user;
    double t0; /* the verb's start (dg_now) */
    const char *step;
    int index, total;
    double step_t0, trial_t0;
    int trial, trials; /* trials reported in the step; expected (0: unknown) */
    char what[96];     /* the trial running */
    double (*eta)(void *ectx, double step_elapsed_s); /* s left (NAN: unknown); may be NULL */
    void *ectx;
} dg_progress_sink;

/* A sink reporting to fn (may be NULL), its clock started now. */
void dg_progress_init(dg_progress_sink *p, dg_progress_fn fn, void *user);
/* A step starts: index of total, trials the plan expects in it (0: unknown). */
void dg_progress_step(dg_progress_sink *p, const char *step, int index, int total, int trials);
/* The step ended with result ("ok", "failed", "skipped", "interrupted") and a summary. */
void dg_progress_step_end(dg_progress_sink *p, const char *result, const char *detail);
/* A trial of the step starts (what: "batch 64 on cuda", printf-style). */
void dg_progress_trial(dg_progress_sink *p, const char *fmt, ...) DG_PRINTF(2, 3);
/* It ended with result and a short detail (may be NULL). */
void dg_progress_trial_end(dg_progress_sink *p, const char *result, const char *detail);
/* The expected trials of the running step, when the plan learns more. */
void dg_progress_expect(dg_progress_sink *p, int trials);
/* What the running step's trials left take at the mean of those it
 * finished (s); NAN before a trial has finished or without an expected count. */
double dg_progress_trials_left_s(const dg_progress_sink *p);
/* Passes on a supervised program's EPOCH or TICK report (epoch, steps;
 * detail may be NULL) within the running step and trial. */
void dg_progress_program(dg_progress_sink *p, dg_progress_kind kind, double epoch, double steps,
                         const char *detail);
/* A dg_progress_fn that hands a child's reports (a supervised run inside a
 * step) on to the sink in user: EPOCH and TICK only. */
void dg_progress_forward(void *user, const dg_progress *r);
#endif
