/* A run on the node: started detached (its input shipped and its bucket
 * checked first), its progress streamed, its record fetched and checked
 * against what was asked, the node told when it is dealt with. docs/team.md. */
#include "remote/remote_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The run's words after "start TOKEN --", with every --data spec shipped and
 * rewritten to the node's cached copies; the strings made here into owned. */
static dg_status start_words(dg_remote *r, int argc, const char *const *argv, const char **words,
                             int *nw, char **owned, int *nowned)
{
    cJSON *shipped = cJSON_GetObjectItem(r->extra, "shipped");
    dg_status st = DG_OK;
    for (int i = 0; i < argc && *nw < DG_REMOTE_MAX_ARGS && st == DG_OK; i++) {
        const char *a = argv[i], *spec = NULL;
        bool eq = strncmp(a, "--data=", 7) == 0;
        if (eq)
            spec = a + 7;
        else if (strcmp(a, "--data") == 0 && i + 1 < argc)
            spec = argv[++i];
        if (!spec) {
            words[(*nw)++] = a;
            continue;
        }
        char *np = NULL;
        st = dg_remote_ship_data(r, spec, shipped, &np);
        if (st != DG_OK)
            break;
        if (eq) {
            char *w2 = dg_asprintf("--data=%s", np);
            dg_free(np);
            np = w2;
        } else {
            words[(*nw)++] = "--data";
        }
        if (!np)
            return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
        owned[(*nowned)++] = np;
        words[(*nw)++] = np;
    }
    words[*nw] = NULL;
    return st;
}

/* Asks the node to start the run of words. */
static dg_status start_call(dg_remote *r, const char *const *words)
{
    static const dg_node_words start = {"starting the run", "", "the run could not start",
                                        DG_REMOTE_USAGE};
    dg_ssh_answer a;
    dg_status st = dg_remote_ssh(r, words, -1, false, &a);
    if (st != DG_OK)
        return st;
    st = dg_remote_node_status(r, &a, &start);
    dg_ssh_answer_free(&a);
    return st;
}

dg_status dg_remote_start(dg_remote *r, int argc, const char *const *argv, char token[48])
{
    r->failure = DG_REMOTE_OK;
    token[0] = '\0';
    if (argc < 1 || !argv[0][0] || argv[0][0] == '-' || strlen(argv[0]) >= sizeof r->verb)
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: which verb?");
    const char *words[DG_REMOTE_MAX_ARGS + 8];
    char *owned[DG_REMOTE_MAX_ARGS];
    int nw = 0, nowned = 0;
    char tok[48], work[65] = "";
    dg_run_id(tok, sizeof tok, (long long)time(NULL), 8);
    cJSON_DeleteItemFromObject(r->extra, "shipped");
    dg_status st = cJSON_AddArrayToObject(r->extra, "shipped")
                       ? dg_remote_ship_command(r, argc, argv, work)
                       : dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
    words[nw++] = "start";
    words[nw++] = tok;
    if (work[0]) { /* the run's working folder: the command's files at their paths */
        words[nw++] = "--work";
        words[nw++] = work;
    }
    words[nw++] = "--";
    int first = nw;
    if (st == DG_OK)
        st = start_words(r, argc, argv, words, &nw, owned, &nowned);
    if (st == DG_OK)
        st = dg_remote_bucket_check(r, argc, argv, words + first);
    if (st == DG_OK)
        st = start_call(r, words);
    for (int i = 0; i < nowned; i++)
        dg_free(owned[i]);
    if (st != DG_OK)
        return st;
    snprintf(r->verb, sizeof r->verb, "%s", argv[0]);
    snprintf(token, 48, "%s", tok);
    dg_remote_note(r, DG_REMOTE_NOTE, "run %s started (detached on the node)", tok);
    return DG_OK;
}

dg_status dg_remote_wait(dg_remote *r, const char *token)
{
    r->failure = DG_REMOTE_OK;
    const char *wait[] = {"wait", token, NULL};
    dg_ssh_answer a;
    dg_status st = dg_remote_ssh(r, wait, -1, true, &a);
    if (st != DG_OK)
        return st;
    if (a.rc != 0)
        st = dg_remote_fail(r, DG_REMOTE_LOST,
                            "remote %s: connection lost mid-run (ssh exit %d); the run goes on on "
                            "the node: 'devgate remote %s collect %s' fetches it",
                            r->cfg.host, a.rc, r->cfg.host, token);
    dg_ssh_answer_free(&a);
    return st;
}

/* The verbs whose runs come home as records, each record's "kind" its verb. */
static bool record_verb(const char *v)
{
    static const char *const verbs[] = {"env",     "gate",    "train",  "sweep", "soak",
                                        "compare", "profile", "accept", "run",   "slo"};
    for (size_t i = 0; v && i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(v, verbs[i]) == 0)
            return true;
    return false;
}

bool dg_remote_parse_fetch(const char *text, const char *asked_verb, cJSON **ans, char *why,
                           size_t wlen)
{
    *ans = NULL;
    why[0] = '\0';
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsObject(j)) {
        snprintf(why, wlen, "not a JSON object");
        cJSON_Delete(j);
        return false;
    }
    /* the protocol's keys exactly (as dg_remote_fetch reads them): an
     * "Exit_Status" is no exit status */
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "running"))) {
        *ans = j;
        return true;
    }
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(j, "record");
    const char *verb = dg_jstr(j, "verb"), *kind = dg_jstr(rec, "kind");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "exit_status");
    char shown[64];
    dg_copy_clean(shown, sizeof shown, verb ? verb : "(none)");
    if (!record_verb(verb))
        snprintf(why, wlen, "the verb '%s' is not one devgate records", shown);
    else if (asked_verb && asked_verb[0] && strcmp(verb, asked_verb) != 0)
        snprintf(why, wlen, "the node answered verb '%s' to a '%s' request", shown, asked_verb);
    else if (!cJSON_IsNumber(code) || dg_jint(code, NULL, -1) < 0 || code->valuedouble > 255)
        snprintf(why, wlen, "no exit status in 0..255");
    else if (rec && (!cJSON_IsObject(rec) || !kind || strcmp(kind, verb) != 0))
        snprintf(why, wlen, "its record is not a '%s' record", shown);
    if (why[0]) {
        cJSON_Delete(j);
        return false;
    }
    *ans = j;
    return true;
}

char *dg_remote_record_with(cJSON *rec, const cJSON *extra, const char *host, const char *token,
                            cJSON *node_info)
{
    cJSON *rm = cJSON_Duplicate(extra, true);
    if (!rm)
        rm = cJSON_CreateObject();
    cJSON_DeleteItemFromObject(rm, "node");
    dg_json_add_str(rm, "node", host);
    cJSON_DeleteItemFromObject(rm, "token");
    dg_json_add_str(rm, "token", token);
    cJSON_AddItemToObject(rm, "node_info", node_info ? node_info : cJSON_CreateNull());
    cJSON_DeleteItemFromObject(rec, "remote");
    cJSON_AddItemToObject(rec, "remote", rm);
    dg_json_utf8_fix(rec); /* the node's strings, as any record's, valid UTF-8 */
    char *json = dg_json_print(rec);
    cJSON_Delete(rec);
    return json;
}

/* A fetched run that left a record: checked against like_bucket, then kept in
 * f with the remote section. Takes ans. */
static dg_status fetched_record(dg_remote *r, const char *token, cJSON *ans,
                                const char *like_bucket, dg_remote_fetched *f)
{
    cJSON *rec = cJSON_DetachItemFromObjectCaseSensitive(ans, "record");
    cJSON *node_info = cJSON_DetachItemFromObjectCaseSensitive(ans, "node");
    cJSON_Delete(ans);
    cJSON *like = like_bucket ? cJSON_Parse(like_bucket) : NULL;
    char differs[256] = "";
    if (like)
        dg_remote_bucket_differs(like, cJSON_GetObjectItem(rec, "bucket"), differs, sizeof differs);
    cJSON_Delete(like);
    if (differs[0]) {
        cJSON_Delete(rec);
        cJSON_Delete(node_info);
        dg_remote_mark(r, token);
        return dg_remote_fail(r, DG_REMOTE_BUCKET,
                              "remote %s: run %s ran on a different input bucket than the local "
                              "run (%s differ); refused: it is not entered in the ledger (and not "
                              "offered to collect again)",
                              r->cfg.host, token, differs);
    }
    f->record = dg_remote_record_with(rec, r->extra, r->cfg.host, token, node_info);
    return f->record ? DG_OK : dg_remote_fail(r, DG_REMOTE_USAGE, "remote: out of memory");
}

dg_status dg_remote_fetch(dg_remote *r, const char *token, const char *like_bucket,
                          dg_remote_fetched *f)
{
    *f = (dg_remote_fetched){0};
    r->failure = DG_REMOTE_OK;
    if (!dg_remote_token_ok(token))
        return dg_remote_fail(r, DG_REMOTE_USAGE, "remote: '%.60s' is not a run token", token);
    const char *fetch[] = {"fetch", token, NULL};
    dg_ssh_answer a;
    dg_status st = dg_remote_ssh(r, fetch, -1, false, &a);
    if (st != DG_OK)
        return st;
    char line[256], why[160];
    dg_remote_last_line(a.err, line, sizeof line);
    cJSON *ans = NULL;
    if (a.rc == 255 || a.too_big)
        st = dg_remote_ssh_failure(r, &a, "fetching a record");
    else if (a.rc != 0)
        st = dg_remote_fail(r, a.rc == 1 ? DG_REMOTE_NO_RUN : DG_REMOTE_USAGE,
                            "remote %s: run %s: %s", r->cfg.host, token, line);
    else if (!dg_remote_parse_fetch(a.out, r->verb, &ans, why, sizeof why))
        st = dg_remote_fail(r, DG_REMOTE_USAGE,
                            "remote %s: run %s: the node's answer is refused (%s, %zu bytes)",
                            r->cfg.host, token, why, a.out_bytes);
    dg_ssh_answer_free(&a);
    if (st != DG_OK)
        return st;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "running"))) {
        f->running = true;
        cJSON_Delete(ans);
        return DG_OK;
    }
    f->exit_status = dg_jint(ans, "exit_status", 255);
    snprintf(f->verb, sizeof f->verb, "%s", dg_jstr(ans, "verb"));
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(ans, "record"))) {
        const char *tail = dg_jstr(ans, "stderr_tail");
        char raw[512];
        dg_remote_last_line(tail ? tail : "", raw, sizeof raw);
        dg_copy_clean(f->last_line, sizeof f->last_line, raw);
        cJSON_Delete(ans);
        return dg_remote_fail(r, DG_REMOTE_RUN_FAILED,
                              "remote %s: run %s (%s) left no record (exit %d): %s", r->cfg.host,
                              token, f->verb, f->exit_status, f->last_line);
    }
    return fetched_record(r, token, ans, like_bucket, f);
}

dg_status dg_remote_mark(dg_remote *r, const char *token)
{
    const char *mark[] = {"mark", token, NULL};
    dg_ssh_answer a;
    dg_status st = dg_remote_ask(r, mark, "marking a run collected", &a);
    if (st == DG_OK)
        dg_ssh_answer_free(&a);
    return st;
}

char *dg_remote_parse_list(const char *text)
{
    cJSON *arr = text ? cJSON_Parse(text) : NULL;
    bool ok = cJSON_IsArray(arr);
    const cJSON *t;
    cJSON_ArrayForEach(t, arr) ok = ok && cJSON_IsString(t) && dg_remote_token_ok(t->valuestring);
    char *json = ok ? dg_json_print(arr) : NULL;
    cJSON_Delete(arr);
    return json;
}

dg_status dg_remote_list(dg_remote *r, char **json)
{
    *json = NULL;
    r->failure = DG_REMOTE_OK;
    const char *list[] = {"list", NULL};
    dg_ssh_answer a;
    dg_status st = dg_remote_ask(r, list, "listing runs", &a);
    if (st != DG_OK)
        return st;
    if (!(*json = dg_remote_parse_list(a.out)))
        st = dg_remote_fail(r, DG_REMOTE_USAGE,
                            "remote %s: the node's list of runs is not one of the protocol",
                            r->cfg.host);
    dg_ssh_answer_free(&a);
    return st;
}

dg_status dg_remote_argv(dg_remote *r, int argc, const char *const *argv, char **json)
{
    *json = NULL;
    r->failure = DG_REMOTE_OK;
    const char *words[DG_REMOTE_MAX_ARGS + 2];
    int n = 0;
    words[n++] = "argv";
    for (int i = 0; i < argc && n < DG_REMOTE_MAX_ARGS; i++)
        words[n++] = argv[i];
    words[n] = NULL;
    dg_ssh_answer a;
    dg_status st = dg_remote_ask(r, words, "sending the words", &a);
    if (st != DG_OK)
        return st;
    *json = a.out; /* taken */
    a.out = NULL;
    dg_ssh_answer_free(&a);
    return DG_OK;
}
