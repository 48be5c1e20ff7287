/* The end every evidence-producing verb shares (accept, run): rules, decision
 * and final gate; one ledger entry; the evidence pack (report.html, report.json,
 * report.md, trace.json); the terminal summary. Nothing measured is lost: when
 * the ledger or a pack file cannot be written the others still are, and the
 * record is saved beside the working directory (cli_record). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Sets obj[key] to val (taking it), replacing what was there. */
static void json_set(cJSON *obj, const char *key, cJSON *val)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, val);
}

/* Moves the trace file at src into dir/trace.json (copying across file systems). */
static bool move_trace(const char *src, const char *dir)
{
    size_t n = strlen(dir) + sizeof "/trace.json";
    char *dst = malloc(n);
    if (!dst) {
        cli_error("pack: cannot move the trace: out of memory");
        return false;
    }
    snprintf(dst, n, "%s/trace.json", dir);
    bool ok = rename(src, dst) == 0;
    if (!ok) {
        /* Another file system: copied through the exclusive writer. */
        char *text = cli_read_file(src, (size_t)1 << 30);
        if (!text)
            cli_error("pack: cannot read the trace %s: %s", src, strerror(errno));
        ok = text && cli_write_file(dst, text);
        free(text);
        if (ok)
            unlink(src);
    }
    free(dst);
    return ok;
}

/* Opens the ledger the options name; NULL (message printed) when it cannot. */
static dg_ledger *open_ledger(cli *c)
{
    return cli_ledger_open(c, NULL, CLI_LEDGER_RECORD, NULL, NULL);
}

/* Renders rec in fmt and writes it to dir/name; false when either fails. */
static bool write_rendered(cli *c, const char *json, dg_report_format fmt, const char *dir,
                           const char *name)
{
    char *out = NULL;
    dg_status st = dg_report_render(c->ctx, json, fmt, &out);
    if (st != DG_OK) {
        cli_error("pack: rendering %s: %s", name, dg_errmsg(c->ctx));
        return false;
    }
    char *path = cli_join(dir, name);
    bool ok = path && cli_write_file(path, out);
    if (!path)
        cli_error("pack: %s: out of memory", name);
    free(path);
    dg_string_free(out);
    return ok;
}

static int evidence_finish(cli *c, const char *verb, char *record_json, const char *thresholds,
                           const char *out_dir, int exit_status)
{
    char *done = NULL;
    dg_status st = dg_evidence_finish(c->ctx, record_json, thresholds, &done);
    if (st != DG_OK) {
        /* The rules could not run: keep the measurements anyway. */
        cli_error("%s: judging the record: %s", verb, dg_errmsg(c->ctx));
        cli_record(c, verb, record_json, EXIT_USAGE, NULL);
        return EXIT_USAGE;
    }
    cJSON *rec = cJSON_Parse(done);
    dg_string_free(done);
    if (!rec) {
        cli_error("%s: out of memory", verb);
        return EXIT_USAGE;
    }
    const cJSON *fg = cJSON_GetObjectItem(rec, "final_gate");
    if (exit_status == EXIT_PASS &&
        jnum(fg, "blocking_fail_findings", jnum(fg, "fail_findings", 0)) > 0)
        exit_status = EXIT_FAIL;
    /* accept in the default tier promises a throughput or says it does not,
     * in its exit status too (a --quick screening never promises one). */
    if (exit_status == EXIT_PASS && strcmp(verb, "accept") == 0 &&
        !cJSON_IsTrue(cJSON_GetObjectItem(fg, "accepted")) &&
        !cJSON_IsTrue(cJSON_GetObjectItem(fg, "screening")))
        exit_status = EXIT_NOT_ACCEPTED;

    /* One ledger entry first, for its id; the final record replaces it below. */
    int rc = exit_status;
    dg_ledger *lg = NULL;
    char *run_id = NULL, id[64];
    if (!c->no_ledger) {
        char *first = cJSON_PrintUnformatted(rec);
        lg = first ? open_ledger(c) : NULL;
        if (lg && dg_ledger_record(c->ctx, lg, verb, exit_status, first, &run_id) != DG_OK) {
            cli_error("%s", dg_errmsg(c->ctx));
            dg_ledger_close(lg);
            lg = NULL;
        }
        cJSON_free(first);
        if (!lg)
            rc = EXIT_USAGE; /* the record is saved below, beside the pack */
    }
    if (run_id)
        snprintf(id, sizeof id, "%s", run_id);
    else
        dg_run_id(id, sizeof id, (long long)time(NULL), 12);
    json_set(rec, "run_id", run_id ? cJSON_CreateString(run_id) : cJSON_CreateNull());

    /* The pack. */
    char *dir = out_dir ? strdup(out_dir) : cli_join("devgate-report", id);
    bool dir_ok = dir && cli_make_dirs(dir);
    if (!dir)
        cli_error("pack: out of memory");
    else if (!dir_ok)
        cli_error("pack: cannot create %s: %s", dir, strerror(errno));
    cJSON *files = cJSON_CreateArray();
    cJSON *prof = cJSON_GetObjectItem(rec, "profile");
    const char *trace = jstr(prof, "trace", NULL);
    if (dir_ok && trace && access(trace, R_OK) == 0 && move_trace(trace, dir)) {
        json_set(prof, "trace", cJSON_CreateString("trace.json"));
        cJSON_AddItemToArray(files, cJSON_CreateString("trace.json"));
    }
    static const struct {
        const char *name;
        dg_report_format fmt;
    } pack[] = {{"report.json", DG_REPORT_JSON},
                {"report.html", DG_REPORT_HTML},
                {"report.md", DG_REPORT_MD}};
    for (size_t i = 0; i < sizeof pack / sizeof pack[0]; i++)
        cJSON_AddItemToArray(files, cJSON_CreateString(pack[i].name));
    cJSON *pk = cJSON_CreateObject();
    cJSON_AddStringToObject(pk, "dir", dir ? dir : "");
    cJSON_AddItemToObject(pk, "files", files);
    json_set(rec, "pack", pk);

    char *json = cJSON_Print(rec);
    bool pack_ok = dir_ok && json;
    size_t written = 0;
    for (; pack_ok && written < sizeof pack / sizeof pack[0]; written++)
        pack_ok = write_rendered(c, json, pack[written].fmt, dir, pack[written].name);
    if (!pack_ok) {
        rc = EXIT_USAGE;
        /* The ledger and the summary name only the files that are there. */
        if (written)
            written--; /* the loop counted the one that failed */
        cJSON *left = cJSON_CreateArray();
        for (int k = cJSON_GetArraySize(files) - 1; k >= 0; k--) {
            const char *name = cJSON_GetArrayItem(files, k)->valuestring;
            bool was = strcmp(name, "trace.json") == 0;
            for (size_t i = 0; i < written; i++)
                was = was || strcmp(name, pack[i].name) == 0;
            if (!was)
                cJSON_AddItemToArray(left, cJSON_DetachItemFromArray(files, k));
        }
        cJSON_AddItemToObject(pk, "not_written", left);
        cJSON_free(json);
        json = cJSON_Print(rec);
    }

    if (lg && json && dg_ledger_update(c->ctx, lg, run_id, exit_status, json) != DG_OK) {
        cli_error("%s", dg_errmsg(c->ctx));
        rc = EXIT_USAGE;
    }
    dg_ledger_close(lg);
    if (json && !pack_ok) {
        /* The pack may not hold it: save it where cli_record does. */
        const char *saved = cli_save_unrecorded(verb, json);
        if (saved)
            cli_error("the record was not lost: saved to %s", saved);
        else
            fprintf(stderr, "%s\n", json);
    } else if (json && !c->no_ledger && !run_id) {
        cli_error("the record was not lost: it is in %s/report.json", dir);
    }

    if (c->json) {
        cli_term_machine_output();
        if (json)
            puts(json);
    } else if (json) {
        char *text = NULL;
        if (dg_report_render(c->ctx, json, DG_REPORT_TEXT, &text) == DG_OK)
            fputs(text, stdout);
        else
            cli_error("summary: %s", dg_errmsg(c->ctx));
        dg_string_free(text);
    }
    cJSON_free(json);
    cJSON_Delete(rec);
    dg_string_free(run_id);
    free(dir);
    return exit_status == EXIT_INTERRUPTED ? exit_status : rc;
}

int cli_evidence_finish(cli *c, const char *verb, char *record_json, const char *thresholds,
                        const char *out_dir, int exit_status)
{
    /* Judging, the ledger entry and the pack are not cut short by a late
     * Ctrl-C, TERM or hang-up (the measurements are done; losing them helps
     * no one): run and accept keep their signals caught (cli_signals_catch)
     * until this returns; for any other caller they are held here. */
    cli_signals held = {.armed = false};
    volatile sig_atomic_t late = 0;
    if (!cli_signals_armed())
        cli_signals_catch(&held, &late);
    int rc = evidence_finish(c, verb, record_json, thresholds, out_dir, exit_status);
    cli_signals_release(&held);
    return rc;
}
