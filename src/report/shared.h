/* Shared by every report renderer (docs/report.md), and depending on none of
 * them: an output buffer with escaping writers, tolerant accessors for the
 * evidence record, number formatting that never prints NaN or infinity, and
 * readings of the record several formats show. Nothing here prints or exits. */
#ifndef DG_REPORT_SHARED_H
#define DG_REPORT_SHARED_H

#include "core/core.h"
#include "core/json.h"
#include "core/record.h"

#include <stdarg.h>
#include <stdbool.h>

/* How a string taken from the record is written. */
typedef enum esc_mode {
    ESC_HTML, /* & < > " ' as entities; controls and bad UTF-8 as U+FFFD */
    ESC_MD,   /* Markdown specials backslash-escaped, < > & as entities; newlines flattened */
    ESC_TEXT, /* terminal: newlines flattened, controls and bad UTF-8 as '?' */
} esc_mode;

/* ---- output ------------------------------------------------------------- */

/* Appends a trusted literal (the renderer's own markup). */
void dg_rp_put(dg_capbuf *b, const char *s);
/* Appends formatted trusted text; never pass record strings through fmt. */
void dg_rp_printf(dg_capbuf *b, const char *fmt, ...) DG_PRINTF(2, 3);
/* Appends a record string escaped for mode; NULL writes fallback (trusted, may be NULL). */
void dg_rp_esc(dg_capbuf *b, esc_mode mode, const char *s, const char *fallback);
/* A record string that may be absent, between trusted text: lead, s escaped
 * for mode, then tail ("" for none); nothing at all when s is NULL. */
void dg_rp_opt(dg_capbuf *b, esc_mode mode, const char *lead, const char *s, const char *tail);

/* Writes conversion c of a format, taking its arguments from *ap. */
typedef void (*dg_rp_conv)(dg_capbuf *b, char c, va_list *ap);
/* Writes fmt, trusted text, with its conversions: %S a record string and its
 * fallback (const char *, const char *: dg_rp_esc for mode), %% a percent
 * sign; any other conv writes (NULL: the character itself). */
void dg_rp_vfmt(dg_capbuf *b, esc_mode mode, dg_rp_conv conv, const char *fmt, va_list *ap);
/* dg_rp_vfmt without conversions of a format's own. */
void dg_rp_fmt(dg_capbuf *b, esc_mode mode, const char *fmt, ...);

/* Largest string dg_rp_prose rewrites; the rest of a longer one is dropped. */
#define REPORT_STRING_MAX ((size_t)1 << 20)
/* dg_rp_esc for prose devgate wrote into the record (step summaries, the final
 * gate statement, decision reasons, finding titles): a number printed as
 * nan or inf there ("knee bnan", "+nan%", "-infx") reads "not reported". */
void dg_rp_prose(dg_capbuf *b, esc_mode mode, const char *s, const char *fallback);

/* ---- record access ------------------------------------------------------ */

/* The node at a dotted path ("soak.growth.footprint"); NULL when any part is
 * absent or not an object; [i] addresses an array element (dg_jpath). */
const cJSON *dg_rp_get(const cJSON *o, const char *path);
/* An object at path, or NULL (null, absent and non-objects alike). */
const cJSON *dg_rp_obj(const cJSON *o, const char *path);
/* An array at path, or NULL. */
const cJSON *dg_rp_arr(const cJSON *o, const char *path);
/* A string at path, or NULL. */
const char *dg_rp_str(const cJSON *o, const char *path);
/* True when path is the JSON value true. */
bool dg_rp_true(const cJSON *o, const char *path);
/* A finite number: a plain JSON number, or a metric with valid true and a
 * numeric value. False for null, invalid metrics, NaN and the rest. */
bool dg_rp_num(const cJSON *o, const char *path, double *v);

/* ---- numbers ------------------------------------------------------------ */

/* Short human number: 2115, 31.35, 0.139, 4.9e-08; "not reported" when !ok. */
void dg_rp_fmt_num(char *buf, size_t len, double v, bool ok);
/* 10.5 MiB style; "not reported" when !ok. */
void dg_rp_fmt_bytes(char *buf, size_t len, double v, bool ok);
/* A metric (or plain number) with its unit, formatted for the unit: bytes in
 * KiB/MiB, fractions as percent, "not reported" when it is not valid. */
void dg_rp_fmt_metric(char *buf, size_t len, const cJSON *m);
/* dg_rp_fmt_metric of a typed view's metric: its own unit when the record held a
 * METRIC there, none for a plain number. */
void dg_rp_fmt_view_metric(char *buf, size_t len, dg_rec_metric m);
/* dg_rp_fmt_metric of the node at path. */
void dg_rp_fmt_metric_at(char *buf, size_t len, const cJSON *o, const char *path);
/* A coordinate for SVG: fixed point with one decimal, 0 for non-finite input
 * (callers skip invalid points before they get here). */
void dg_rp_fmt_coord(char *buf, size_t len, double v);

/* ---- shared readings of the record ------------------------------------- */

/* The view's findings (objects only) ordered most severe first (fail, warn,
 * info, other; stable); *n gets the count. The array holds borrowed pointers
 * into v; free it with dg_free. NULL when there are none or out of memory
 * (*n is then 0). */
const dg_view_finding **dg_rp_findings_sorted(const dg_record_view *v, int *n);
/* The input bucket id: the record's, else a section's (soak, profile, ...). */
const char *dg_rp_bucket_id(const cJSON *rec);
/* The facts a report's header adds after the host and time, each only when
 * the record has it: the bucket (its id's first 12 characters), the label,
 * the state when not complete; each escaped for mode between its trusted
 * markup mark[i][0] and mark[i][1] (i: 0 bucket, 1 label, 2 state). */
void dg_rp_head_facts(dg_capbuf *b, esc_mode mode, const dg_record_view *v,
                      const char *const mark[3][2]);
/* The memory growth threshold in percent the rules used (thresholds.mem_growth_pct,
 * the name the rule table writes), else the default 26. */
double dg_rp_mem_growth_pct(const dg_record_view *v);

/* The supervised command (spec.cmd, an array of strings); NULL when the
 * record has none. */
const cJSON *dg_rp_supervise_command(const dg_record_view *v);
/* Writes a command line, arguments separated by spaces and quoted when they
 * hold spaces or quotes, every argument escaped for mode. */
void dg_rp_command(dg_capbuf *b, esc_mode mode, const cJSON *cmd);
/* How accept -- CMD started its runs (the record's "launch", docs/accept.md
 * "Fast trials"), escaped for mode: "forked from one fork server: 13 of 14
 * runs (python 3.11.2; torch, numpy imported once in 2.1 s); 1 in a fresh
 * interpreter: WHY", or "fresh interpreters: WHY". false (nothing written)
 * when the record has no launch. */
bool dg_rp_launch(dg_capbuf *b, esc_mode mode, const cJSON *rec);
/* The decision's words, escaped for mode: "route (backend) — reason; reason",
 * or none (trusted) when the record has no decision. A reason that is not
 * text goes to other (the page shows its value); a NULL other leaves it out. */
void dg_rp_decision(dg_capbuf *b, esc_mode mode, const dg_view_decision *d, const char *none,
                    void (*other)(dg_capbuf *b, const cJSON *reason));
/* What a speedup over the cpu is when cpu-baseline-unfair fired in the
 * record (the cpu side ran below its cores): the words every render puts
 * beside "N x cpu", "" otherwise. */
const char *dg_rp_unfair_note(const dg_record_view *v);
/* The loss check of an accept -- CMD compare RUN (runs[].loss: the device
 * side's losses against the cpu side's) in words, into buf (len bytes):
 * "loss agrees with the cpu over 8 steps (max relative difference 3.1e-07,
 * tolerance 0.01)", "loss DRIFTS from the cpu's by 0.048 over 8 steps (at
 * epoch 2 step 1; tolerance 0.01)" or "loss not compared: WHY", WHY the
 * record's: write buf escaped. False (buf "") when the run has no loss check. */
bool dg_rp_loss_check(char *buf, size_t len, const cJSON *run);

#endif
