/* The page's proof sections (html_env.c), written by html.c in the order of
 * docs/report.md. */
#ifndef DG_REPORT_HTML_ENV_H
#define DG_REPORT_HTML_ENV_H

#include "report/shared.h"

/* Each writes its section, or says the record has none. */

/* The environment proof: architecture, translation, OS, CPU, memory, processes. */
void dg_rp_sec_environment(dg_capbuf *b, const cJSON *rec);
/* The device gate log, one row per backend. */
void dg_rp_sec_gate(dg_capbuf *b, const dg_view_gate *gate);
/* The input bucket: id, resolutions, augment, batch, normalisation, data set. */
void dg_rp_sec_bucket(dg_capbuf *b, const cJSON *rec);
/* The seeds of every step. */
void dg_rp_sec_seeds(dg_capbuf *b, const cJSON *rec);
/* devgate, library and backend versions. */
void dg_rp_sec_versions(dg_capbuf *b, const cJSON *rec);
/* The thresholds the rules used. */
void dg_rp_sec_thresholds(dg_capbuf *b, const cJSON *rec);
/* The pack's folder and files. */
void dg_rp_sec_pack(dg_capbuf *b, const cJSON *rec);

#endif
