/* A measured window (measure.h): the machine-wide measurement lock and the
 * contention sampled while it is held, around every trial, epochs run and
 * compare side the method measures (src/steps/method.c, method_compare.c). */
#include "measure/measure.h"

void dg_measured_begin(dg_measured *m, const volatile sig_atomic_t *cancel)
{
    /* Other devgate measurements wait for this one; the wait is not measured. */
    dg_measure_lock(&m->lock, DG_MEASURED_MAX_WAIT_S, cancel);
    m->window = dg_window_begin();
}

double dg_measured_end(dg_measured *m, cJSON *obj)
{
    cJSON *cont = dg_window_end(m->window);
    dg_window_free(m->window);
    m->window = NULL;
    dg_measure_unlock(&m->lock);
    if (obj) {
        cJSON_AddItemToObject(obj, "lock", dg_measure_lock_json(&m->lock));
        cJSON_AddItemToObject(obj, "contention", cont ? cont : cJSON_CreateNull());
    } else {
        cJSON_Delete(cont);
    }
    return m->lock.waited_s;
}
