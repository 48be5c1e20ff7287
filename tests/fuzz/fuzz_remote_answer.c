/* libFuzzer harness for the node's answers as `devgate remote` reads them
 * (src/remote/: the node is another machine, its answers untrusted). Input:
 * one byte choosing the answer and, for a fetch, the verb asked; then the
 * answer's text. Answers: info (dg_remote_parse_info), a have/put/tree state
 * (dg_remote_parse_state), a fetch (dg_remote_parse_fetch, then the record
 * entered with its "remote" section: dg_remote_record_with, and its bucket
 * against another), the list of runs (dg_remote_parse_list), the bucket
 * probe's record (dg_remote_bucket_of, dg_remote_bucket_differs). Nothing may
 * crash; what is accepted holds what the protocol says, and a record that
 * enters the ledger is valid UTF-8 JSON. */
#include "fuzz.h"
#include "fuzz_util.h"
#include "remote/remote_int.h"

static const char *const k_verbs[] = {"gate", "train", "accept", "run", "sweep", "env", "", NULL};

static void fetch(const char *text, const char *verb)
{
    cJSON *ans = NULL;
    char why[160];
    if (!dg_remote_parse_fetch(text, verb, &ans, why, sizeof why)) {
        if (ans || !why[0] || strlen(why) >= sizeof why)
            abort();
        return;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "running"))) {
        cJSON_Delete(ans);
        return;
    }
    double x = dg_jnum(ans, "exit_status");
    const char *v = dg_jstr(ans, "verb");
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(ans, "record");
    if (!(x >= 0 && x <= 255 && x == (int)x) || !v || (verb && verb[0] && strcmp(v, verb) != 0))
        abort();
    if (rec && (!cJSON_IsObject(rec) || !dg_jstr(rec, "kind") || strcmp(dg_jstr(rec, "kind"), v)))
        abort();
    if (cJSON_IsObject(rec)) {
        cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(ans, "record");
        cJSON *node = cJSON_DetachItemFromObjectCaseSensitive(ans, "node");
        char differs[256];
        cJSON *like = cJSON_Parse("{\"id\":\"5d41402abc4b2a76\",\"batch\":64,\"dataset\":\"idx\"}");
        dg_remote_bucket_differs(like, cJSON_GetObjectItem(r, "bucket"), differs, sizeof differs);
        cJSON_Delete(like);
        cJSON *extra = cJSON_Parse("{\"warnings\":[],\"shipped\":[]}");
        char *json = dg_remote_record_with(r, extra, "gpu-01", "20261201-101500-9a3c11f0", node);
        cJSON_Delete(extra);
        if (!json)
            abort();
        fuzz_text_check(json);
        dg_free(json);
    }
    cJSON_Delete(ans);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = fuzz_text(data + 1, size - 1);
    if (!text)
        return 0;
    int protocol;
    cJSON *info = NULL, *bk = NULL;
    char state[16], path[700], *list = NULL;
    switch (data[0] % 8) {
    case 0:
        dg_remote_parse_info(text, &protocol, &info);
        if ((protocol < 0) != (info == NULL) || protocol > 1000000)
            abort();
        cJSON_Delete(info);
        break;
    case 1:
        if (dg_remote_parse_state(text, state, sizeof state, path, sizeof path) &&
            (!memchr(state, 0, sizeof state) || !memchr(path, 0, sizeof path)))
            abort();
        break;
    case 2:
        list = dg_remote_parse_list(text);
        if (list) {
            cJSON *arr = cJSON_Parse(list);
            const cJSON *t;
            cJSON_ArrayForEach(t, arr) if (!dg_remote_token_ok(cJSON_GetStringValue(t))) abort();
            cJSON_Delete(arr);
            dg_free(list);
        }
        break;
    case 3:
        bk = dg_remote_bucket_of(text);
        if (bk) {
            char d[256];
            if (!cJSON_IsString(cJSON_GetObjectItem(bk, "id")))
                abort();
            dg_remote_bucket_differs(bk, bk, d, sizeof d);
            if (d[0])
                abort(); /* a bucket is the same as itself */
            cJSON *other = cJSON_Parse("{\"id\":\"x\",\"batch\":8}");
            dg_remote_bucket_differs(bk, other, d, sizeof d);
            if (!memchr(d, 0, sizeof d))
                abort();
            cJSON_Delete(other);
            cJSON_Delete(bk);
        }
        break;
    default: fetch(text, k_verbs[(data[0] >> 3) % 8]); break;
    }
    free(text);
    return 0;
}
