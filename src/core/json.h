/* JSON through cJSON with devgate's counted allocator, plus the metric shape
 * every record uses: {"value": x | null, "unit": "...", "valid": bool}. */
#ifndef DG_JSON_H
#define DG_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>

/* Installs the counted allocator into cJSON (idempotent, thread-safe). */
void dg_json_init(void);
/* A metric object; value is written as null when !valid, never as 0. */
cJSON *dg_json_metric(double value, bool valid, const char *unit);
/* Adds a string member, writing null for a NULL s. */
cJSON *dg_json_add_str(cJSON *obj, const char *key, const char *s);
/* Prints compactly into a string the caller frees with dg_string_free. */
char *dg_json_print(const cJSON *item);
#endif
