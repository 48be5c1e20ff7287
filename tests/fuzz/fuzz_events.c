/* libFuzzer harness for the events protocol: the input is a byte stream from a
 * supervised program. Split into lines (small cap, so overlong lines happen),
 * every line goes through the parser and the collector; nothing may crash,
 * and the counts must add up. */
#include "fuzz.h"
#include "supervise/supervise.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct fz {
    dg_evcollect col;
    double now;
} fz;

static void on_line(void *user, const char *line, size_t len)
{
    fz *f = user;
    cJSON *o = NULL;
    dg_ev_kind k = dg_event_parse(line, len, &o);
    if ((k == DG_EV_MALFORMED) != (o == NULL) || k < DG_EV_MALFORMED || k >= DG_EV_NKINDS)
        abort();
    cJSON_Delete(o);
    dg_evcollect_line(&f->col, line, len, f->now);
    f->now += 0.001;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {.now = 0};
    dg_ev_limits lim = {.rate = 50, .max_steps = 20, .max_epochs = 5, .max_other = 3};
    if (!dg_evcollect_init(&f.col, &lim))
        return 0;
    dg_evreader r = {.max_line = 512};
    /* Feed in two pieces so lines straddle reads. */
    size_t half = size / 2;
    dg_evreader_feed(&r, (const char *)data, half, on_line, &f);
    dg_evreader_feed(&r, (const char *)data + half, size - half, on_line, &f);
    dg_evreader_finish(&r, on_line, &f);
    if (f.col.lines != f.col.parsed + f.col.malformed || f.col.nsteps > 20 || f.col.nepochs > 5)
        abort();
    uint64_t sum = 0;
    for (int k = 0; k < DG_EV_NKINDS; k++)
        sum += f.col.by_kind[k];
    if (sum != f.col.parsed)
        abort();
    dg_evreader_free(&r);
    dg_evcollect_free(&f.col);
    return 0;
}
