/* What python.c (running the interpreter, reading its files) and
 * python_answer.c (reading its answer, pure) share. */
#ifndef DG_ENV_PYTHON_INT_H
#define DG_ENV_PYTHON_INT_H

#include "core/core.h"
#include "core/json.h"

#include <limits.h>

#define STR_MAX 512 /* cap on strings copied from the child */

/* JSON building with one out-of-memory flag: each call sets oom when an
 * item could not be made or added (the item is then freed). */
typedef struct dg_pyjb {
    bool oom;
} dg_pyjb;
/* item, oom set when it is NULL. */
cJSON *dg_pyjb_chk(dg_pyjb *b, cJSON *item);
/* item as obj[key]; takes item. */
void dg_pyjb_put(dg_pyjb *b, cJSON *obj, const char *key, cJSON *item);
/* s (NULL: null) as obj[key], made valid UTF-8. */
void dg_pyjb_put_str(dg_pyjb *b, cJSON *obj, const char *key, const char *s);
/* v as obj[key], null unless valid. */
void dg_pyjb_put_num(dg_pyjb *b, cJSON *obj, const char *key, double v, bool valid);
/* v as obj[key]: 1 true, 0 false, -1 null. */
void dg_pyjb_put_bool(dg_pyjb *b, cJSON *obj, const char *key, int v);
/* item appended to arr; takes item. */
void dg_pyjb_push(dg_pyjb *b, cJSON *arr, cJSON *item);

/* Copies src into dst (size n) for the record, as docs/schema/env.md says
 * text from the system enters records: invalid UTF-8 becomes U+FFFD, controls
 * '?' (tabs and newlines a space first), never cutting a sequence. The
 * terminal's '?' for invalid bytes is the printer's business (dg_text_clean). */
void dg_py_rec_clean(char *dst, size_t n, const char *src);

/* How the interpreter's probe ran and what it printed (both outputs capped). */
typedef struct dg_py_run {
    const char *status; /* ok, timeout, crashed, failed, not-found */
    int exit_code;
    bool has_exit;
    int sig;
    bool has_sig;
    double seconds;
    bool has_seconds;
    const char *error; /* the runner's reason, NULL: none */
    const char *out;   /* stdout (NUL-terminated), out_len bytes; NULL: none */
    size_t out_len;
    bool out_truncated; /* stdout passed out_cap */
    size_t out_cap;
    const char *err; /* stderr (NUL-terminated), err_len bytes; NULL: none */
    size_t err_len;
} dg_py_run;

/* The interpreter's answer read into a new object (docs/schema/env.md
 * "python"): "run" (judged with the answer: an ok exit with no JSON line is
 * failed), "version", "platform", "machine", "executable", "torch",
 * "site_packages" (absolute, cleaned, each once); *dirs a new array of the
 * same directories as the interpreter named them (to scan). NULL when out
 * of memory. */
cJSON *dg_env_python_answer(const dg_py_run *r, cJSON **dirs);

#endif
