/* libFuzzer harness for devgate slo's Prometheus reader (--metrics): the
 * input is what an engine's /metrics endpoint answers. Every line goes
 * through the exposition-format parser and the engine's roles; nothing may
 * crash, every line is a sample, malformed, a comment or blank, and the
 * names handed on are well-formed. */
#include "fuzz.h"
#include "slo/slo.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void on_sample(void *user, const char *name, const char *labels, double value)
{
    long *n = user;
    (*n)++;
    (void)value; /* NaN and the infinities are samples too */
    if (!(isalpha((unsigned char)name[0]) || name[0] == '_' || name[0] == ':') ||
        strchr(labels, '\n'))
        abort();
    for (const char *c = name; *c; c++)
        if (!(isalnum((unsigned char)*c) || *c == '_' || *c == ':'))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    long seen = 0, bad = 0;
    long n = dg_slo_prom_parse(text, size, on_sample, &seen, &bad);
    long lines = 0;
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    if (n != seen || n < 0 || bad < 0 || n + bad > lines + 1)
        abort();
    slo_engine_point p;
    dg_slo_engine_read(text, size, 1.0, &p);
    if (p.samples != n)
        abort();
    for (int r = 0; r < SLO_ENGINE_ROLES; r++)
        if ((p.name[r] == NULL) != isnan(p.v[r]))
            abort();
    return 0;
}
