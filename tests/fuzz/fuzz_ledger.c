/* libFuzzer harness for the ledger's readers of record text: any bytes go
 * through dg_ledger_record (which parses the record for its id, host, commit
 * and state), then list, show (by id and by prefix) and update with the same
 * text. Nothing may crash; what list and show return is valid JSON; a record
 * the ledger took is shown back. The ledger is one temporary SQLite file per
 * process, removed at exit. */
#include "devgate.h"
#include "fuzz.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_path[64];

static void remove_ledger(void)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        char p[80];
        snprintf(p, sizeof p, "%s%s", g_path, suffix[i]);
        unlink(p);
    }
}

static void must_parse(const char *json)
{
    cJSON *o = cJSON_Parse(json);
    if (!o)
        abort();
    cJSON_Delete(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_path[0]) {
        snprintf(g_path, sizeof g_path, "/tmp/devgate-fuzz-ledger-%ld.db", (long)getpid());
        atexit(remove_ledger);
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    dg_ctx *ctx = dg_ctx_new();
    dg_ledger *lg = NULL;
    if (dg_ledger_open(ctx, g_path, 1000, &lg) != DG_OK)
        abort(); /* a fresh private file always opens */
    char *id = NULL, *json = NULL;
    if (dg_ledger_record(ctx, lg, "fuzz", 0, text, &id) == DG_OK) {
        if (!id || dg_ledger_show(ctx, lg, id, &json) != DG_OK)
            abort();
        must_parse(json);
        dg_string_free(json);
        json = NULL;
        dg_status st = dg_ledger_update(ctx, lg, id, 1, text);
        if (st != DG_OK && st != DG_ERR_USAGE)
            abort();
        char prefix[9];
        snprintf(prefix, sizeof prefix, "%s", id);
        if (dg_ledger_show(ctx, lg, prefix, &json) == DG_OK)
            must_parse(json);
        dg_string_free(json);
        json = NULL;
    }
    if (dg_ledger_list(ctx, lg, 5, &json) == DG_OK)
        must_parse(json);
    dg_string_free(json);
    dg_string_free(id);
    dg_ledger_close(lg);
    dg_ctx_free(ctx);
    free(text);
    return 0;
}
