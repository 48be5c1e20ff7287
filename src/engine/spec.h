/* The training spec codec, inside the library (the public half is in
 * include/devgate.h: dg_train_opts_init, dg_train_opts_set, dg_spec_*). */
#ifndef DG_SPEC_H
#define DG_SPEC_H

#include "devgate.h"

#include <cjson/cJSON.h>

/* The spec object records carry (docs/schema/spec.md): every option, library
 * defaults written as their values; NULL when out of memory. */
cJSON *dg_spec_json(const dg_train_opts *o);
/* The i-th spec key in table order, NULL past the end (tests, docs checks). */
const char *dg_spec_key_name(size_t i);
#endif
