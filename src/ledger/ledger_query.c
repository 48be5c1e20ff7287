/* Reading the run ledger, either store (docs/schema/ledger.md): the store
 * calls that pick SQLite or PostgreSQL, list, show and export with each
 * run's summary, and push (the local ledger's waiting runs up to the team
 * ledger). ledger.c opens, records and updates through it. */
#include "ledger/ledger_int.h"

#include <stdlib.h>
#include <string.h>

#define DG_LEDGER_AMBIGUOUS_SHOWN 5 /* ids named when a prefix matches several */

bool dg_lg_usable(const dg_ledger *lg)
{
    return lg && (lg->db || lg->pg);
}

dg_status dg_lg_store_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken)
{
    return lg->pg ? dg_lg_pg_insert(ctx, lg, f, taken) : dg_lg_sq_insert(ctx, lg, f, taken);
}

dg_status dg_lg_store_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr)
{
    return lg->pg ? dg_lg_pg_match(ctx, lg, id, max, arr) : dg_lg_sq_match(ctx, lg, id, max, arr);
}

/* Turns a stored entry (record as text, rank) into a listed one: the summary
 * added, "rank" dropped, and the record either dropped or, with keep, parsed in
 * place (made valid UTF-8). */
dg_status dg_lg_finish_entry(dg_ctx *ctx, dg_ledger *lg, cJSON *e, bool keep)
{
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "record"));
    cJSON *rec = text ? cJSON_Parse(text) : NULL;
    if (!rec && keep) {
        char bad[64];
        dg_copy_clean(bad, sizeof bad, dg_lg_str(e, "id"));
        return dg_fail(ctx, DG_ERR_LEDGER,
                       "ledger %s: run %s holds a record that is not valid JSON", lg->shown, bad);
    }
    /* a damaged record lists with an empty summary */
    bool ok = dg_lg_add_summary(e, rec, dg_lg_str(e, "verb"));
    cJSON_DeleteItemFromObjectCaseSensitive(e, "rank");
    if (ok && keep)
        ok = dg_json_utf8_fix(rec) && cJSON_ReplaceItemInObjectCaseSensitive(e, "record", rec);
    else
        cJSON_DeleteItemFromObjectCaseSensitive(e, "record");
    if (!ok || !keep)
        cJSON_Delete(rec);
    return ok ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
}

/* ---- list / show / export ------------------------------------------------------ */

/* When st is DG_OK, j printed into *json (DG_ERR_NOMEM when it cannot be); st. */
static dg_status print_into(dg_ctx *ctx, dg_status st, const cJSON *j, char **json)
{
    if (st == DG_OK && !(*json = dg_json_print(j)))
        st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    return st;
}

dg_status dg_ledger_list(dg_ctx *ctx, dg_ledger *lg, int limit, char **json)
{
    if (json)
        *json = NULL;
    if (!dg_lg_usable(lg) || !json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger list: no open ledger or no place for the result");
    if (limit < 0)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger list: limit must be 0 (all) or positive, not %d",
                       limit);
    cJSON *arr = cJSON_CreateArray();
    dg_status st = arr ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    if (st == DG_OK)
        st = lg->pg ? dg_lg_pg_list(ctx, lg, limit, arr) : dg_lg_sq_list(ctx, lg, limit, arr);
    cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (st == DG_OK)
            st = dg_lg_finish_entry(ctx, lg, e, false);
    }
    st = print_into(ctx, st, arr, json);
    cJSON_Delete(arr);
    return st;
}

/* "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SSZ" (digits where digits go): both sort
 * against started_at as text. */
static bool since_shape(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    size_t n = strlen(s);
    if (n != 10 && n != sizeof shape - 1)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool ok = shape[i] == 'd' ? (s[i] >= '0' && s[i] <= '9') : s[i] == shape[i];
        if (!ok)
            return false;
    }
    return true;
}

dg_status dg_ledger_export(dg_ctx *ctx, dg_ledger *lg, const char *since, char **json)
{
    if (json)
        *json = NULL;
    if (!dg_lg_usable(lg) || !json)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "ledger export: no open ledger or no place for the result");
    if (since && !since_shape(since)) {
        char shown[64];
        dg_copy_clean(shown, sizeof shown, since);
        return dg_fail(ctx, DG_ERR_USAGE,
                       "since '%s' is not a UTC date YYYY-MM-DD or time "
                       "YYYY-MM-DDTHH:MM:SSZ",
                       shown);
    }
    cJSON *all = cJSON_CreateArray(), *out = cJSON_CreateArray();
    dg_status st = all && out ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    if (st == DG_OK)
        st = lg->pg ? dg_lg_pg_list(ctx, lg, 0, all) : dg_lg_sq_list(ctx, lg, 0, all);
    /* Newest first from the store; the export goes oldest first. */
    for (int i = cJSON_GetArraySize(all) - 1; st == DG_OK && i >= 0; i--) {
        const char *at = dg_lg_str(cJSON_GetArrayItem(all, i), "started_at");
        if (since && (!at || strcmp(at, since) < 0))
            continue;
        cJSON *e = cJSON_DetachItemFromArray(all, i);
        if (!cJSON_AddItemToArray(out, e)) {
            cJSON_Delete(e);
            st = dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        } else {
            st = dg_lg_finish_entry(ctx, lg, e, true);
        }
    }
    st = print_into(ctx, st, out, json);
    cJSON_Delete(all);
    cJSON_Delete(out);
    return st;
}

dg_status dg_ledger_show(dg_ctx *ctx, dg_ledger *lg, const char *id, char **json)
{
    if (json)
        *json = NULL;
    if (!dg_lg_usable(lg) || !json)
        return dg_fail(ctx, DG_ERR_USAGE, "ledger show: no open ledger or no place for the result");
    if (!id || !id[0])
        return dg_fail(ctx, DG_ERR_USAGE, "ledger show: empty run id");
    char shown_id[64];
    dg_copy_clean(shown_id, sizeof shown_id, id);

    cJSON *arr = cJSON_CreateArray();
    dg_status st = arr ? dg_lg_store_match(ctx, lg, id, DG_LEDGER_AMBIGUOUS_SHOWN + 1, arr)
                       : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    int matches = st == DG_OK ? cJSON_GetArraySize(arr) : 0;
    cJSON *first = matches ? cJSON_GetArrayItem(arr, 0) : NULL;
    bool exact = first && dg_lg_int(first, "rank") == 0;
    if (st == DG_OK && !first)
        st = dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: no run with id or id prefix '%s'",
                     lg->shown, shown_id);
    if (st == DG_OK && matches > 1 && !exact) {
        char ids[(DG_LEDGER_AMBIGUOUS_SHOWN + 1) * 40] = "";
        size_t used = 0;
        for (int k = 0; k < matches; k++) {
            char one[48];
            dg_copy_clean(one, sizeof one, dg_lg_str(cJSON_GetArrayItem(arr, k), "id"));
            if (k < DG_LEDGER_AMBIGUOUS_SHOWN)
                used += (size_t)snprintf(ids + used, used < sizeof ids ? sizeof ids - used : 0,
                                         "%s%s", k ? ", " : "", one);
            else
                used += (size_t)snprintf(ids + used, used < sizeof ids ? sizeof ids - used : 0,
                                         ", ...");
        }
        st = dg_fail(ctx, DG_ERR_USAGE,
                     "ledger %s: run id prefix '%s' is ambiguous: it matches %s; give more of "
                     "the id",
                     lg->shown, shown_id, ids);
    }
    if (st == DG_OK)
        st = dg_lg_finish_entry(ctx, lg, first, true);
    st = print_into(ctx, st, first, json);
    cJSON_Delete(arr);
    return st;
}

/* ---- local ledger, push ----------------------------------------------------------- */

dg_status dg_ledger_push(dg_ctx *ctx, dg_ledger *local, dg_ledger *team, dg_ledger_push_counts *n)
{
    if (n)
        memset(n, 0, sizeof *n);
    if (!dg_lg_usable(local) || !local->db || !dg_lg_usable(team) || !n)
        return dg_fail(ctx, DG_ERR_USAGE,
                       "ledger push: needs an open local ledger, an open team ledger and a place "
                       "for the counts");
    if (local == team || (team->db && strcmp(local->path, team->path) == 0))
        return dg_fail(ctx, DG_ERR_USAGE, "ledger push: ledger %s cannot be pushed into itself",
                       local->shown);
    cJSON *arr = cJSON_CreateArray();
    dg_status st =
        arr ? dg_lg_sq_pending(ctx, local, arr) : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
    cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (st != DG_OK)
            break;
        const char *target = dg_lg_str(e, "pending");
        if (!target || strcmp(target, team->shown) != 0) {
            n->other++;
            continue;
        }
        lg_fields f = {.verb = dg_lg_str(e, "verb"),
                       .state = dg_lg_str(e, "state"),
                       .host = dg_lg_str(e, "host"),
                       .commit = dg_lg_str(e, "git_commit"),
                       .version = dg_lg_str(e, "devgate_version"),
                       .record = dg_lg_str(e, "record"),
                       .node = dg_lg_str(e, "node"),
                       .exit_status = dg_lg_int(e, "exit_status"),
                       .exact = true};
        snprintf(f.id, sizeof f.id, "%s", dg_lg_str(e, "id"));
        snprintf(f.started, sizeof f.started, "%s", dg_lg_str(e, "started_at"));
        bool taken = false;
        st = dg_lg_store_insert(ctx, team, &f, &taken);
        if (st == DG_OK && taken) {
            /* There already: pushed before (then marked here), or another run
             * with the same id, which is a conflict, never a silent skip. */
            cJSON *there = cJSON_CreateArray();
            st = there ? dg_lg_store_match(ctx, team, f.id, 1, there)
                       : dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
            const char *rec = dg_lg_str(cJSON_GetArrayItem(there, 0), "record");
            if (st == DG_OK && (!rec || strcmp(rec, f.record) != 0))
                st = dg_fail(ctx, DG_ERR_LEDGER,
                             "ledger push: run %s is already in %s with a different record; it "
                             "was left waiting in %s",
                             f.id, team->shown, local->shown);
            cJSON_Delete(there);
            if (st == DG_OK)
                n->already++;
        } else if (st == DG_OK) {
            n->pushed++;
        }
        if (st == DG_OK)
            st = dg_lg_sq_clear_pending(ctx, local, f.id);
    }
    cJSON_Delete(arr);
    return st;
}
