/* The environment proof (method step 1): host facts, the libraries and
 * backends devgate talks to, and optionally a Python interpreter. */
#include "env/env.h"
#include "steps.h"

#include <cblas.h>
#include <openssl/crypto.h>
#include <sqlite3.h>
#include <string.h>

#include "dg_buildinfo.h"

const char *dg_build_commit(void)
{
    return DG_BUILD_COMMIT;
}

const char *dg_build_compiler(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "GCC " __VERSION__;
#else
    return "unknown";
#endif
}

const char *dg_build_backends(void)
{
    return DG_BACKENDS_STR;
}

static cJSON *libraries_json(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "openblas", openblas_get_config());
    cJSON_AddStringToObject(o, "sqlite", sqlite3_libversion());
    cJSON_AddStringToObject(o, "cjson", cJSON_Version());
    cJSON_AddStringToObject(o, "openssl", OpenSSL_version(OPENSSL_VERSION));
    return o;
}

dg_status dg_env_run(dg_ctx *ctx, const dg_env_opts *opts, char **json)
{
    *json = NULL;
    cJSON *facts = dg_env_sysinfo(ctx, opts ? opts->cwd : NULL);
    if (!facts)
        return dg_fail(ctx, DG_ERR_NOMEM, "env: out of memory");
    /* Schema fields first in the printed record, then the host facts. */
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "v", 1);
    cJSON_AddStringToObject(root, "kind", "env");
    while (facts->child) {
        cJSON *item = facts->child;
        const char *key = item->string;
        cJSON_AddItemToObject(root, key, cJSON_DetachItemViaPointer(facts, item));
    }
    cJSON_Delete(facts);

    cJSON *dg = cJSON_AddObjectToObject(root, "devgate");
    cJSON_AddStringToObject(dg, "version", DG_VERSION);
    cJSON_AddStringToObject(dg, "commit", dg_build_commit());
    cJSON_AddStringToObject(dg, "compiler", dg_build_compiler());
    cJSON_AddStringToObject(dg, "backends_built", dg_build_backends());
    cJSON_AddItemToObject(root, "libraries", libraries_json());

    cJSON *be = cJSON_AddArrayToObject(root, "backends");
    for (size_t i = 0; i < dg_backend_names_count; i++) {
        cJSON *b = dg_gate_backend(ctx, dg_backend_names[i], NULL, NULL);
        if (b)
            cJSON_AddItemToArray(be, b);
    }
    if (opts && opts->python) {
        cJSON *arch = cJSON_GetObjectItem(root, "arch");
        const char *host = cJSON_GetStringValue(cJSON_GetObjectItem(arch, "host"));
        double timeout = opts->python_timeout_s > 0 ? opts->python_timeout_s : 20.0;
        cJSON *py = dg_env_python(ctx, opts->python, timeout, host ? host : "unknown");
        if (py)
            cJSON_AddItemToObject(root, "python", py);
    }
    *json = dg_json_print(root);
    cJSON_Delete(root);
    return *json ? DG_OK : dg_fail(ctx, DG_ERR_NOMEM, "env: out of memory printing the record");
}
