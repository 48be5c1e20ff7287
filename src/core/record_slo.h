/* The typed view of an slo record (docs/schema/slo.md; record_slo.c), built
 * from the record's SLO section (dg_record_view.section[DG_SEC_SLO]) by its
 * readers: the slo rules and the report. Above record.c (it reads through the
 * path table's rows); record.c does not call it. Numbers are NAN when not
 * reported, strings NULL when absent, arrays owned by the view. */
#ifndef DG_RECORD_SLO_H
#define DG_RECORD_SLO_H

#include "core/json.h"
#include "devgate_slo.h"

/* One latency of a level: its median and the SLO's percentile with the
 * percentile's 95% bootstrap interval. */
typedef struct dg_view_slo_lat {
    double p50, pslo, lo, hi; /* ms; NAN when not reported */
    double n;                 /* values; NAN when not reported */
} dg_view_slo_lat;

typedef struct dg_view_slo_level {
    double concurrency;  /* NAN: the open loop */
    double rate;         /* requests/s (open loop), NAN */
    const char *steady;  /* "steady", "unsteady", "not reached" */
    const char *verdict; /* "pass", "fail", "inconclusive" */
    const char *state;   /* "complete", "interrupted", "failed" */
    double n, over;      /* the verdict's counts */
    double sent, ok, failed, timeouts;
    double requests_per_s, goodput, tokens_per_s;
    dg_view_slo_lat lat[DG_SLO_NMETRICS];
    double others_share;        /* contention: other processes' share of the CPUs */
    double queue_waiting;       /* the engine's mean requests waiting (--metrics), NAN */
    double engine_tokens_per_s; /* the engine's own counter rate (--metrics), NAN */
    bool beside;                /* measured with the training command beside (--while) */
    const cJSON *raw;           /* the LEVEL */
} dg_view_slo_level;

typedef struct dg_view_slo {
    bool present;
    const char *target, *model, *api, *mode;
    /* --target fixture: the backend and device its passes ran on, its batch
     * (NAN), how its server ended; NULL when the target was a URL. */
    const char *fixture_backend, *fixture_device, *fixture_ended;
    double fixture_batch;
    double percentile, confidence; /* NAN when not reported */
    dg_slo_bound bounds[DG_SLO_MAX_BOUNDS];
    int nbounds;
    dg_view_slo_level *levels; /* serving alone, in the order they ran */
    int nlevels;
    dg_view_slo_level *beside; /* --while: the levels measured beside training ("beside": true) */
    int nbeside;
    int signed_;           /* tri */
    const char *verdict;   /* final_gate.verdict */
    const char *statement; /* final_gate.statement */
    double signed_concurrency;
    /* --while: the training's step time alone and beside serving (ms), NAN */
    const cJSON *beside_json; /* the "while" object, NULL when none */
    double train_step_alone_ms, train_step_beside_ms, train_slowdown;
} dg_view_slo;

/* Fills v from the slo record rec (NULL: not present). False when out of
 * memory (v is then partly filled; free it with dg_view_slo_free). */
bool dg_view_slo_build(dg_view_slo *v, const cJSON *rec);
/* Frees what v owns; a zeroed v is fine. */
void dg_view_slo_free(dg_view_slo *v);
/* The level's latency lat of metric m at the SLO's percentile; NAN when not reported. */
double dg_view_slo_pct(const dg_view_slo_level *l, dg_slo_metric m);
#endif
