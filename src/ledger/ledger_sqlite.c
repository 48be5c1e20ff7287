/* The SQLite store of the run ledger (the team ledger's is ledger_pg.c): its
 * failures as statuses and messages, the write lock, and the rows it
 * inserts, updates and reads. ledger.c opens the file and calls these. */
#include "ledger/ledger_int.h"

#include <string.h>

/* ---- errors ------------------------------------------------------------------- */

/* SQLite's words for failure rc: the connection's message while it is rc's
 * (a later call, a rollback after the failure, resets it to "not an error"),
 * else rc's own text. */
const char *dg_lg_sql_why(sqlite3 *db, int rc)
{
    return db && (sqlite3_extended_errcode(db) & 0xff) == (rc & 0xff) ? sqlite3_errmsg(db)
                                                                      : sqlite3_errstr(rc);
}

/* Maps a SQLite failure to a status and a message naming the ledger. */
dg_status dg_lg_sql_fail(dg_ctx *ctx, sqlite3 *db, const char *shown, int timeout_ms, int rc,
                         const char *doing)
{
    const char *why = dg_lg_sql_why(db, rc);
    int oserr = db ? sqlite3_system_errno(db) : 0;
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return dg_fail(ctx, DG_ERR_BUSY,
                       "ledger %s: locked by another process past the %d ms timeout while %s (%s)",
                       shown, timeout_ms, doing, why);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
        return dg_fail(ctx, DG_ERR_LEDGER,
                       "ledger %s: not a devgate ledger or corrupt while %s (%s)", shown, doing,
                       why);
    case SQLITE_NOMEM:
        return dg_fail(ctx, DG_ERR_NOMEM, "ledger %s: out of memory while %s", shown, doing);
    default:
        if (oserr)
            return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: failed while %s: %s (%s)", shown, doing,
                           why, strerror(oserr));
        return dg_fail(ctx, DG_ERR_LEDGER, "ledger %s: failed while %s: %s", shown, doing, why);
    }
}

dg_status dg_lg_fail(dg_ctx *ctx, const dg_ledger *lg, int rc, const char *doing)
{
    return dg_lg_sql_fail(ctx, lg->db, lg->shown, lg->timeout_ms, rc, doing);
}

void dg_lg_rollback(sqlite3 *db)
{
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

/* SQLite answers some lock conflicts (switching to WAL while another process
 * opens the file, for one) at once, without its busy handler. True when rc is
 * such a conflict and the deadline is not yet past; it then sleeps a little. */
bool dg_lg_retry_busy(int rc, double deadline, int *attempt)
{
    int prim = rc & 0xff;
    if ((prim != SQLITE_BUSY && prim != SQLITE_LOCKED) || dg_now() >= deadline)
        return false;
    int ms = 2 << (*attempt < 5 ? *attempt : 5); /* 2, 4, ... 64 ms */
    (*attempt)++;
    sqlite3_sleep(ms);
    return true;
}

double dg_lg_deadline(const dg_ledger *lg)
{
    return dg_now() + lg->timeout_ms / 1000.0;
}

/* BEGIN IMMEDIATE, waiting up to the ledger's timeout for the write lock. */
int dg_lg_begin(dg_ledger *lg)
{
    double deadline = dg_lg_deadline(lg);
    int attempt = 0, rc;
    do
        rc = sqlite3_exec(lg->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    while (rc != SQLITE_OK && dg_lg_retry_busy(rc, deadline, &attempt));
    return rc;
}

/* ---- the SQLite store ---------------------------------------------------------- */

static void bind_opt(sqlite3_stmt *stmt, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(stmt, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(stmt, i);
}

dg_status dg_lg_sq_insert(dg_ctx *ctx, dg_ledger *lg, lg_fields *f, bool *taken)
{
    *taken = false;
    sqlite3_stmt *stmt = NULL;
    dg_status st = DG_OK;
    int rc = dg_lg_begin(lg);
    if (rc != SQLITE_OK)
        return dg_lg_fail(ctx, lg, rc, "starting to record a run");
    rc = sqlite3_prepare_v2(lg->db,
                            "INSERT INTO runs(id, verb, started_at, exit_status, state, host, "
                            "git_commit, devgate_version, record, node, pending) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            -1, &stmt, NULL);
    if (rc != SQLITE_OK) {
        st = dg_lg_fail(ctx, lg, rc, "preparing to record a run");
        goto done;
    }
    for (int attempt = 0;; attempt++) {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
        sqlite3_bind_text(stmt, 1, f->id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(stmt, 2, f->verb, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(stmt, 3, f->started, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(stmt, 4, f->exit_status);
        sqlite3_bind_text(stmt, 5, f->state, -1, SQLITE_TRANSIENT);
        bind_opt(stmt, 6, f->host);
        bind_opt(stmt, 7, f->commit);
        bind_opt(stmt, 8, f->version);
        sqlite3_bind_text(stmt, 9, f->record, -1, SQLITE_TRANSIENT);
        bind_opt(stmt, 10, f->node);
        bind_opt(stmt, 11, f->pending);
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE)
            break;
        if (rc == SQLITE_CONSTRAINT_UNIQUE && f->exact) {
            *taken = true;
            goto done;
        }
        if (rc == SQLITE_CONSTRAINT_UNIQUE && attempt + 1 < DG_LEDGER_ID_RETRIES) {
            dg_lg_draw_id(f); /* id taken: draw other digits */
            continue;
        }
        st = dg_lg_fail(ctx, lg, rc, "recording a run");
        goto done;
    }
    sqlite3_finalize(stmt);
    stmt = NULL;
    rc = sqlite3_exec(lg->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        st = dg_lg_fail(ctx, lg, rc, "committing a run");
done:
    sqlite3_finalize(stmt);
    dg_lg_rollback(lg->db);
    return st;
}

dg_status dg_lg_sq_update(dg_ctx *ctx, dg_ledger *lg, const char *id, int exit_status,
                          const char *state, const char *record)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(
        lg->db, "UPDATE runs SET exit_status = ?, state = ?, record = ? WHERE id = ?", -1, &stmt,
        NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int(stmt, 1, exit_status);
        sqlite3_bind_text(stmt, 2, state, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 3, record, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 4, id, -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
    }
    dg_status st = DG_OK;
    if (rc != SQLITE_DONE)
        st = dg_lg_fail(ctx, lg, rc, "updating a run");
    else if (sqlite3_changes(lg->db) != 1)
        st = dg_fail(ctx, DG_ERR_NOT_FOUND, "ledger %s: no run %s to update", lg->shown, id);
    sqlite3_finalize(stmt);
    return st;
}

/* Appends the entries of the rows of stmt to arr; with extra, the columns after
 * the entry's are the record text and the rank. */
static dg_status sq_rows(dg_ctx *ctx, dg_ledger *lg, sqlite3_stmt *stmt, bool extra, cJSON *arr,
                         const char *doing)
{
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const char *v[LG_NCOLS];
        for (int k = 0; k < LG_NCOLS; k++)
            v[k] = (const char *)sqlite3_column_text(stmt, k);
        cJSON *e = dg_lg_entry(v);
        bool ok = e != NULL;
        if (ok && extra)
            ok = dg_json_add_str(e, "record", (const char *)sqlite3_column_text(stmt, LG_NCOLS)) &&
                 cJSON_AddNumberToObject(e, "rank", sqlite3_column_int(stmt, LG_NCOLS + 1));
        if (!ok || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return dg_fail(ctx, DG_ERR_NOMEM, "out of memory");
        }
    }
    return rc == SQLITE_DONE ? DG_OK : dg_lg_fail(ctx, lg, rc, doing);
}

/* The newest limit entries (0: all), each with its record text (rank 0). */
dg_status dg_lg_sq_list(dg_ctx *ctx, dg_ledger *lg, int limit, cJSON *arr)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(lg->db,
                                "SELECT " LG_COLS ", record, 0 FROM runs ORDER BY seq DESC LIMIT ?",
                                -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return dg_lg_fail(ctx, lg, rc, "listing runs");
    sqlite3_bind_int(stmt, 1, limit > 0 ? limit : -1);
    dg_status st = sq_rows(ctx, lg, stmt, true, arr, "listing runs");
    sqlite3_finalize(stmt);
    return st;
}

/* An exact id first, then a prefix compared with substr (no LIKE, so '%' and
 * '_' in the argument are plain characters). */
dg_status dg_lg_sq_match(dg_ctx *ctx, dg_ledger *lg, const char *id, int max, cJSON *arr)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(lg->db,
                                "SELECT " LG_COLS ", record, 0 AS rank FROM runs WHERE id = ?1 "
                                "UNION ALL "
                                "SELECT " LG_COLS ", record, 1 FROM runs "
                                "WHERE substr(id, 1, length(?1)) = ?1 AND id <> ?1 "
                                "ORDER BY rank, seq DESC LIMIT ?2",
                                -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return dg_lg_fail(ctx, lg, rc, "looking up a run");
    sqlite3_bind_text(stmt, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(stmt, 2, max);
    dg_status st = sq_rows(ctx, lg, stmt, true, arr, "looking up a run");
    sqlite3_finalize(stmt);
    return st;
}

/* The runs waiting for a team ledger, oldest first, with their records. */
dg_status dg_lg_sq_pending(dg_ctx *ctx, dg_ledger *lg, cJSON *arr)
{
    sqlite3_stmt *stmt = NULL;
    int rc = sqlite3_prepare_v2(lg->db,
                                "SELECT " LG_COLS ", record, 0 FROM runs "
                                "WHERE pending IS NOT NULL ORDER BY seq",
                                -1, &stmt, NULL);
    if (rc != SQLITE_OK)
        return dg_lg_fail(ctx, lg, rc, "listing the runs waiting for a push");
    dg_status st = sq_rows(ctx, lg, stmt, true, arr, "listing the runs waiting for a push");
    sqlite3_finalize(stmt);
    return st;
}

dg_status dg_lg_sq_clear_pending(dg_ctx *ctx, dg_ledger *lg, const char *id)
{
    sqlite3_stmt *stmt = NULL;
    int rc =
        sqlite3_prepare_v2(lg->db, "UPDATE runs SET pending = NULL WHERE id = ?", -1, &stmt, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, id, -1, SQLITE_STATIC);
        rc = sqlite3_step(stmt);
    }
    sqlite3_finalize(stmt);
    return rc == SQLITE_DONE ? DG_OK : dg_lg_fail(ctx, lg, rc, "marking a run pushed");
}
