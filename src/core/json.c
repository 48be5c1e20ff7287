#include "json.h"

#include "core.h"

#include <threads.h>

static void *hook_malloc(size_t n)
{
    return dg_malloc(n);
}

static void install_hooks(void)
{
    cJSON_Hooks h = {hook_malloc, dg_free};
    cJSON_InitHooks(&h);
}

void dg_json_init(void)
{
    static once_flag once = ONCE_FLAG_INIT;
    call_once(&once, install_hooks);
}

cJSON *dg_json_metric(double value, bool valid, const char *unit)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return NULL;
    if (valid)
        cJSON_AddNumberToObject(m, "value", value);
    else
        cJSON_AddNullToObject(m, "value");
    cJSON_AddStringToObject(m, "unit", unit);
    cJSON_AddBoolToObject(m, "valid", valid);
    return m;
}

cJSON *dg_json_add_str(cJSON *obj, const char *key, const char *s)
{
    return s ? cJSON_AddStringToObject(obj, key, s) : cJSON_AddNullToObject(obj, key);
}

char *dg_json_print(const cJSON *item)
{
    dg_json_init();
    return cJSON_PrintUnformatted(item);
}
