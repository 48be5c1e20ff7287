/* accept --level 2..4 -- CMD: the gate step's device gate (accept_cmd.h).
 *
 * The program's own gate (its interpreter's cpu, cuda, mps, through the
 * probe) says where the command can run; the level's checks are devgate's
 * own, on the backend behind the chosen device: cuda for cuda, opencl for
 * another accelerator (mps), cpu for the cpu. They run as `devgate gate
 * --level N --backend B --json` in a child (the process that supervises the
 * command never maps a device driver: env_proof.c), and the child's level
 * members (ops, link, sustain, memory_bandwidth) join the gate section's
 * entry of the device, with the reference check and the level object
 * (budget, wall, overrun, the backend, the verdict) at the section's top,
 * whose verdict a failed level makes "fail": the rules (op-numerics,
 * link-slow, throttled, device-unstable), the page and the ledger read them
 * as they read the fixture's gate. */
#include "core/proc.h"
#include "steps/accept_cmd.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The members of a gate backend that its levels add (docs/schema/gate.md). */
static const char *const level_members[] = {"ops", "link", "sustain", "memory_bandwidth", NULL};

const char *dg_accept_cmd_level_backend(const char *device)
{
    if (!device || strcmp(device, "cpu") == 0)
        return "cpu";
    return strncmp(device, "cuda", 4) == 0 ? "cuda" : "opencl";
}

/* The entry of device in the gate section's backends (added when absent). */
static cJSON *device_entry(cJSON *gate, const char *device)
{
    cJSON *list = cJSON_GetObjectItemCaseSensitive(gate, "backends");
    if (!cJSON_IsArray(list)) {
        cJSON_DeleteItemFromObjectCaseSensitive(gate, "backends");
        list = cJSON_AddArrayToObject(gate, "backends");
    }
    cJSON *b;
    cJSON_ArrayForEach(b, list)
    {
        const char *n = dg_jstr(b, "name");
        if (n && strcmp(n, device) == 0)
            return b;
    }
    b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", device);
    cJSON_AddItemToArray(list, b);
    return b;
}

/* Moves member key of from into to (replacing to's). */
static void move_member(cJSON *from, cJSON *to, const char *key)
{
    cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(from, key);
    if (!it)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(to, key);
    cJSON_AddItemToObject(to, key, it);
}

/* Runs the gate child; its record, NULL with why. */
static cJSON *run_gate_child(dg_ctx *ctx, int level, const char *backend,
                             const volatile sig_atomic_t *cancel, char *why, size_t len)
{
    char exe[PATH_MAX], lv[16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(why, len, "cannot tell which program runs the gate: %s", strerror(errno));
        return NULL;
    }
    exe[n] = '\0';
    snprintf(lv, sizeof lv, "%d", level);
    const char *const argv[] = {exe,         "--no-ledger", "gate",   "--level", lv,
                                "--backend", backend,       "--json", "-q",      NULL};
    const dg_level_info *li = dg_level_get(level);
    /* Generous: a loaded machine, the measurement lock held by another run. */
    dg_proc_opts po = {.argv = argv,
                       .out = {.kind = DG_PROC_CAPTURE, .cap = (size_t)64 << 20},
                       .err = {.kind = DG_PROC_CAPTURE},
                       .timeout_s = 3 * li->gate_budget_s + 300,
                       .term_grace_s = 5,
                       .cancel = cancel};
    dg_proc_result r;
    dg_status st = dg_proc_run(ctx, &po, &r);
    cJSON *rec = st == DG_OK && r.out.data ? cJSON_Parse(r.out.data) : NULL;
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(rec, "level"))) {
        /* What it said last on stderr, cleaned: the reason devgate gives. */
        char d[160], last[256] = "";
        char *e = r.err.data;
        while (e && *e) {
            char *nl = strchr(e, '\n');
            size_t k = nl ? (size_t)(nl - e) : strlen(e);
            if (k > 0 && k < sizeof last) {
                memcpy(last, e, k);
                last[k] = '\0';
            }
            e = nl ? nl + 1 : NULL;
        }
        char said[256];
        dg_copy_clean(said, sizeof said, last);
        snprintf(why, len, "devgate gate --level %d --backend %s %s%s%s", level, backend,
                 st == DG_OK ? dg_proc_describe(&r, d, sizeof d) : dg_errmsg(ctx),
                 said[0] ? ": " : "", said);
        cJSON_Delete(rec);
        rec = NULL;
    }
    dg_proc_result_free(&r);
    return rec;
}

void dg_accept_cmd_level_gate(dg_ctx *ctx, cJSON *gate, const char *device, int level,
                              const volatile sig_atomic_t *cancel, char *summary, size_t len)
{
    const char *backend = dg_accept_cmd_level_backend(device);
    char why[512] = "";
    cJSON *rec = gate ? run_gate_child(ctx, level, backend, cancel, why, sizeof why) : NULL;
    if (!gate)
        return;
    cJSON *lv = rec ? cJSON_DetachItemFromObjectCaseSensitive(rec, "level") : NULL;
    if (!lv) { /* the level object still says what was asked and why it is missing */
        lv = cJSON_CreateObject();
        cJSON_AddNumberToObject(lv, "level", level);
        cJSON_AddItemToObject(lv, "budget",
                              dg_json_metric(dg_level_get(level)->gate_budget_s, true, "s"));
    }
    cJSON_AddStringToObject(lv, "backend", backend);
    dg_json_add_str(lv, "verdict", rec ? dg_jstr(rec, "verdict") : NULL);
    dg_json_add_str(lv, "reason", why[0] ? why : NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(gate, "level");
    cJSON_AddItemToObject(gate, "level", lv);
    if (rec) {
        move_member(rec, gate, "reference_ok");
        move_member(rec, gate, "reference_check");
        cJSON *from = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rec, "backends"), 0);
        cJSON *to = device_entry(gate, device ? device : "cpu");
        for (int i = 0; from && to && level_members[i]; i++)
            move_member(from, to, level_members[i]);
        if (to)
            cJSON_AddStringToObject(to, "level_backend", backend);
        /* A failed level fails the gate: its checks' findings name why (a
         * failed product alone is "the device gate failed"). */
        const char *v = dg_jstr(lv, "verdict");
        if (v && strcmp(v, "fail") == 0) {
            cJSON_DeleteItemFromObjectCaseSensitive(gate, "verdict");
            cJSON_AddStringToObject(gate, "verdict", "fail");
        }
    }
    size_t off = strlen(summary);
    if (off < len)
        snprintf(summary + off, len - off, "%slevel %d on %s: %s", off ? " · " : "", level, backend,
                 rec ? (dg_jstr(lv, "verdict") ? dg_jstr(lv, "verdict") : "?") : "not run");
    cJSON_Delete(rec);
}
