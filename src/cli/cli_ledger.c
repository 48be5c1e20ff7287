/* devgate ledger list|show: read the run ledger. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static int open_ledger(cli *c, dg_ledger **lg)
{
    char *def = c->ledger_path ? NULL : dg_ledger_default_path();
    const char *path = c->ledger_path ? c->ledger_path : def;
    if (!path) {
        cli_error("ledger: cannot tell where the ledger is (set DEVGATE_LEDGER or --ledger)");
        return EXIT_USAGE;
    }
    const char *t = getenv("DEVGATE_LEDGER_TIMEOUT_MS");
    dg_status st = dg_ledger_open(c->ctx, path, t ? atoi(t) : 0, lg);
    dg_string_free(def);
    if (st != DG_OK) {
        cli_error("%s", dg_errmsg(c->ctx));
        return EXIT_USAGE;
    }
    return EXIT_PASS;
}

static int ledger_list(cli *c, int limit)
{
    dg_ledger *lg;
    int rc = open_ledger(c, &lg);
    if (rc)
        return rc;
    char *json = NULL;
    dg_status st = dg_ledger_list(c->ctx, lg, limit, &json);
    dg_ledger_close(lg);
    if (st != DG_OK)
        return cli_fail_status(c, st, "ledger list");
    cJSON *arr = cJSON_Parse(json);
    if (c->json) {
        char *out = cJSON_Print(arr);
        puts(out ? out : json);
        cJSON_free(out);
    } else {
        printf("%-22s %-8s %-20s %4s %-12s %s\n", "id", "verb", "started (UTC)", "exit", "commit", "host");
        const cJSON *r;
        cJSON_ArrayForEach(r, arr)
        {
            printf("%-22s %-8s %-20s %4.0f %-12.12s %s%s\n", jstr(r, "id", "?"), jstr(r, "verb", "?"),
                   jstr(r, "started_at", "?"), jnum(r, "exit_status", -1), jstr(r, "git_commit", "-"),
                   jstr(r, "host", "-"),
                   strcmp(jstr(r, "state", "complete"), "complete") ? " (interrupted)" : "");
        }
        if (cJSON_GetArraySize(arr) == 0)
            printf("(no runs recorded)\n");
    }
    cJSON_Delete(arr);
    dg_string_free(json);
    return EXIT_PASS;
}

static int ledger_show(cli *c, const char *id)
{
    dg_ledger *lg;
    int rc = open_ledger(c, &lg);
    if (rc)
        return rc;
    char *json = NULL;
    dg_status st = dg_ledger_show(c->ctx, lg, id, &json);
    dg_ledger_close(lg);
    if (st == DG_ERR_NOT_FOUND) {
        cli_error("ledger show: %s", dg_errmsg(c->ctx));
        return EXIT_FAIL;
    }
    if (st != DG_OK)
        return cli_fail_status(c, st, "ledger show");
    cJSON *e = cJSON_Parse(json);
    char *out = cJSON_Print(e);
    puts(out ? out : json);
    cJSON_free(out);
    cJSON_Delete(e);
    dg_string_free(json);
    return EXIT_PASS;
}

int cmd_ledger(cli *c, int argc, char **argv)
{
    const char *sub = NULL, *id = NULL, *v;
    int limit = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_common_opt(c, argc, argv, &i))
            continue;
        if (opt_value(argc, argv, &i, "--limit", &v)) {
            char *end;
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < 0 || n > 1000000) {
                cli_error("ledger: --limit wants 0..1000000, got '%s'", v);
                return EXIT_USAGE;
            }
            limit = (int)n;
        } else if (argv[i][0] == '-') {
            cli_error("ledger: unknown option '%s'", argv[i]);
            return EXIT_USAGE;
        } else if (!sub) {
            sub = argv[i];
        } else if (!id) {
            id = argv[i];
        } else {
            cli_error("ledger: unexpected argument '%s'", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (c->no_ledger) {
        cli_error("ledger: --no-ledger leaves nothing to read");
        return EXIT_USAGE;
    }
    if (sub && strcmp(sub, "list") == 0 && !id)
        return ledger_list(c, limit);
    if (sub && strcmp(sub, "show") == 0 && id)
        return ledger_show(c, id);
    cli_error("ledger: use 'ledger list [--limit N]' or 'ledger show ID'");
    return EXIT_USAGE;
}
