/* The skeleton of a step verb (env, gate, train, sweep, soak, profile): the
 * options parsed into a new struct, the ones the step does not take refused,
 * the library step run, its exit status judged from the record, the record
 * kept in the ledger and printed. Each verb gives only what differs
 * (cli_step in cli.h; its entry in verbs.c). */
#include "cli.h"

#include <stdlib.h>

int cli_step_main(cli *c, int argc, char **argv)
{
    const cli_verb *v = c->verb;
    const cli_step *s = v->step;
    void *o = calloc(1, s->size);
    if (!o) {
        cli_error("%s: out of memory", v->name);
        return EXIT_USAGE;
    }
    dg_train_opts *train = s->has_train ? (dg_train_opts *)((char *)o + s->train_at) : NULL;
    if (train)
        *train = (dg_train_opts)DG_TRAIN_OPTS_INIT;
    void *bases[4] = {0};
    for (int t = 0; t < 4 && v->tables[t]; t++)
        bases[t] = v->tables[t] == cli_common_opts  ? (void *)c
                   : v->tables[t] == cli_train_opts ? (void *)train
                                                    : o;
    int rc = cli_parse(c, v, argc, argv, bases, NULL);
    char why[512] = "";
    if (rc != CLI_PARSED) {
        rc = cli_parse_exit(rc);
    } else if (s->check && s->check(o, why, sizeof why)) {
        cli_error("%s: %s", v->name, why);
        rc = EXIT_USAGE;
    } else {
        char *json = NULL;
        int verdict = -1;
        cli_progress p;
        if (s->progress) {
            cli_progress_start(&p, c, v->name);
            dg_set_log(c->ctx, cli_progress_log, &p);
        }
        if (s->before)
            s->before(c, o);
        dg_status st = s->run(c->ctx, o, s->progress ? &p : NULL, &json, &verdict);
        if (s->progress)
            cli_progress_end(&p);
        if (!json || (st != DG_OK && s->strict)) {
            dg_string_free(json);
            free(o);
            return cli_fail_status(c, st, v->name);
        }
        cJSON *rec = cJSON_Parse(json);
        const char *fail = NULL;
        rc = verdict >= 0 ? verdict : cli_step_status(c, v->name, st);
        if (s->judge)
            rc = s->judge(rec, rc, &fail);
        if (s->head && !c->json)
            s->head(o);
        void (*print)(const cJSON *) = c->quiet && s->quiet_silent ? NULL : s->print;
        rc = cli_record_print(c, v->name, json, rec, rc, print, fail);
    }
    free(o);
    return rc;
}
