/* placeholder: replaced at merge */
/* The evidence finish of `devgate run` and `devgate accept`: here only the
 * ledger record and the printing, so run can be built and tested. */
#include "cli.h"

#include <string.h>

int cli_evidence_finish(cli *c, const char *verb, char *record_json, const char *thresholds, const char *out_dir,
                        int exit_status)
{
    (void)thresholds;
    (void)out_dir;
    char *run_id = NULL;
    int rc = cli_record(c, verb, record_json, exit_status, &run_id);
    cJSON *rec = cJSON_Parse(record_json);
    if (c->json) {
        if (rec)
            cli_print_json(rec, run_id);
        else
            puts(record_json);
    } else if (!c->quiet) {
        printf("devgate %s · %s\n", verb, jstr(rec, "state", "?"));
        const cJSON *st;
        cJSON_ArrayForEach(st, cJSON_GetObjectItem(rec, "steps"))
        {
            printf("  %-10s %-11s %s\n", jstr(st, "name", "?"), jstr(st, "status", "?"), jstr(st, "summary", ""));
            if (cJSON_IsString(cJSON_GetObjectItem(st, "error")))
                printf("  %-10s %-11s %s\n", "", "error", jstr(st, "error", ""));
        }
        if (run_id)
            printf("  recorded as %s\n", run_id);
    }
    cJSON_Delete(rec);
    dg_string_free(run_id);
    return rc;
}
