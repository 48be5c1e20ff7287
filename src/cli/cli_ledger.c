/* devgate ledger list|show|diff: read the run ledger; diff compares two train
 * runs' input buckets and, when they match (or with --force), throughput. */
#include "cli.h"

#include <math.h>
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
    dg_status st = dg_ledger_open_readonly(c->ctx, path, t ? atoi(t) : 0, lg);
    dg_string_free(def);
    if (st != DG_OK) {
        cli_error("%s", dg_errmsg(c->ctx));
        return EXIT_USAGE;
    }
    return EXIT_PASS;
}

/* {"value", "unit", "valid"} as the library writes metrics (NAN: not valid). */
static cJSON *metric_json(double v, const char *unit)
{
    cJSON *m = cJSON_CreateObject();
    if (isnan(v))
        cJSON_AddNullToObject(m, "value");
    else
        cJSON_AddNumberToObject(m, "value", v);
    cJSON_AddStringToObject(m, "unit", unit);
    cJSON_AddBoolToObject(m, "valid", !isnan(v));
    return m;
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
        cli_term_machine_output();
        puts(out ? out : json);
        cJSON_free(out);
    } else {
        printf("%-28s %-8s %-20s %4s %-12s %s\n", "id", "verb", "started (UTC)", "exit", "commit",
               "host");
        const cJSON *r;
        cJSON_ArrayForEach(r, arr)
        {
            char id[64], verb[32], at[32], commit[16], host[256], node[256];
            const char *nd = jstr(r, "node", NULL);
            printf("%-28s %-8s %-20s %4.0f %-12s %s%s%s%s%s\n",
                   cli_cell(id, sizeof id, jstr(r, "id", "?")),
                   cli_cell(verb, sizeof verb, jstr(r, "verb", "?")),
                   cli_cell(at, sizeof at, jstr(r, "started_at", "?")), jnum(r, "exit_status", -1),
                   cli_cell(commit, 13, jstr(r, "git_commit", "-")),
                   cli_cell(host, sizeof host, jstr(r, "host", "-")), nd ? " (node " : "",
                   nd ? cli_cell(node, sizeof node, nd) : "", nd ? ")" : "",
                   strcmp(jstr(r, "state", "complete"), "complete") ? " (interrupted)" : "");
            if (jstr(r, "pending", NULL))
                printf("%-28s pending: waits for %s (devgate ledger push)\n", "",
                       cli_cell(node, sizeof node, jstr(r, "pending", "")));
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
    cli_term_machine_output();
    puts(out ? out : json);
    cJSON_free(out);
    cJSON_Delete(e);
    dg_string_free(json);
    return EXIT_PASS;
}

/* The record of run id (an entry's "record"), parsed; NULL with a message. */
static cJSON *load_record(cli *c, dg_ledger *lg, const char *id, int *rc)
{
    char *json = NULL;
    dg_status st = dg_ledger_show(c->ctx, lg, id, &json);
    if (st != DG_OK) {
        cli_error("ledger diff: %s", dg_errmsg(c->ctx));
        *rc = st == DG_ERR_NOT_FOUND ? EXIT_FAIL : EXIT_USAGE;
        return NULL;
    }
    cJSON *e = cJSON_Parse(json);
    dg_string_free(json);
    return e;
}

/* A bucket field as short text. */
static void field_text(char *buf, size_t len, const char *key, const cJSON *v)
{
    buf[0] = '\0';
    if (!v) {
        snprintf(buf, len, "-");
    } else if (strcmp(key, "resolutions") == 0) {
        const cJSON *r;
        size_t off = 0;
        cJSON_ArrayForEach(r, v) off +=
            (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%gx%g:%g", off ? "," : "",
                             jnum(r, "h", 0), jnum(r, "w", 0), jnum(r, "weight", 0));
    } else if (strcmp(key, "augment") == 0) {
        const cJSON *a;
        size_t off = 0;
        cJSON_ArrayForEach(a, v) off +=
            (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? "," : "",
                             cJSON_IsString(a) ? a->valuestring : "?");
        if (!off)
            snprintf(buf, len, "none");
    } else if (strcmp(key, "dataset") == 0) {
        snprintf(buf, len, "%s %g samples sha256 %.12s", jstr(v, "kind", "?"),
                 jnum(v, "samples", 0), jstr(v, "sha256", "?"));
    } else if (cJSON_IsNumber(v)) {
        snprintf(buf, len, "%g", v->valuedouble);
    } else if (cJSON_IsString(v)) {
        snprintf(buf, len, "%s", v->valuestring);
    } else {
        char *t = cJSON_PrintUnformatted(v);
        snprintf(buf, len, "%s", t ? t : "?");
        cJSON_free(t);
    }
}

/* Whether two buckets agree on a field; absent on both sides counts as the
 * same (fp32 buckets carry no "math"). */
static bool same_field(const cJSON *const bk[2], const char *key)
{
    const cJSON *a = cJSON_GetObjectItem(bk[0], key), *b = cJSON_GetObjectItem(bk[1], key);
    return (!a && !b) || cJSON_Compare(a, b, true);
}

static int ledger_diff(cli *c, const char *ida, const char *idb, bool force)
{
    dg_ledger *lg;
    int rc = open_ledger(c, &lg);
    if (rc)
        return rc;
    const char *ids[2] = {ida, idb};
    cJSON *ent[2] = {NULL, NULL};
    const cJSON *rec[2], *bk[2];
    for (int k = 0; k < 2 && !rc; k++) {
        ent[k] = load_record(c, lg, ids[k], &rc);
        rec[k] = cJSON_GetObjectItem(ent[k], "record");
        bk[k] = cJSON_GetObjectItem(rec[k], "bucket");
        if (!rc && !cJSON_IsObject(bk[k])) {
            cli_error("ledger diff: run %s (%s) has no input bucket; diff compares train runs",
                      jstr(ent[k], "id", ids[k]), jstr(ent[k], "verb", "?"));
            rc = EXIT_USAGE;
        }
    }
    dg_ledger_close(lg);
    if (rc) {
        cJSON_Delete(ent[0]);
        cJSON_Delete(ent[1]);
        return rc;
    }
    static const char *const keys[] = {"id",       "resolutions", "augment", "batch",
                                       "channels", "normalize",   "math",    "dataset"};
    enum { NKEYS = sizeof keys / sizeof keys[0] };
    bool same = strcmp(jstr(bk[0], "id", "a"), jstr(bk[1], "id", "b")) == 0;
    bool compare = same || force;
    double sps[2], ms[2];
    for (int k = 0; k < 2; k++) {
        const cJSON *thr = cJSON_GetObjectItem(rec[k], "throughput");
        sps[k] = jmetric(thr, "samples_per_s");
        ms[k] = jmetric(thr, "step_ms");
    }
    char differs[256] = "";
    size_t doff = 0;
    for (int i = 1; i < NKEYS; i++) {
        if (!same_field(bk, keys[i]))
            doff +=
                (size_t)snprintf(differs + doff, doff < sizeof differs ? sizeof differs - doff : 0,
                                 "%s%s", doff ? ", " : "", keys[i]);
    }
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON *runs = cJSON_AddArrayToObject(o, "runs");
        for (int k = 0; k < 2; k++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "id", jstr(ent[k], "id", ids[k]));
            cJSON_AddItemToObject(r, "bucket", cJSON_Duplicate(bk[k], true));
            cJSON_AddItemToObject(r, "samples_per_s", metric_json(sps[k], "samples/s"));
            cJSON_AddItemToObject(r, "step_ms", metric_json(ms[k], "ms"));
            cJSON_AddItemToArray(runs, r);
        }
        cJSON *df = cJSON_AddArrayToObject(o, "differs");
        for (int i = 1; i < NKEYS; i++)
            if (!same_field(bk, keys[i]))
                cJSON_AddItemToArray(df, cJSON_CreateString(keys[i]));
        cJSON_AddBoolToObject(o, "same_bucket", same);
        cJSON_AddBoolToObject(o, "forced", force && !same);
        cJSON_AddBoolToObject(o, "compared", compare);
        if (compare && !isnan(sps[0]) && !isnan(sps[1]) && sps[0] > 0)
            cJSON_AddNumberToObject(o, "speedup", sps[1] / sps[0]);
        else
            cJSON_AddNullToObject(o, "speedup");
        char *out = cJSON_Print(o);
        cli_term_machine_output();
        puts(out ? out : "{}");
        cJSON_free(out);
        cJSON_Delete(o);
    } else {
        printf("devgate ledger diff · A %s · B %s\n\n", jstr(ent[0], "id", ida),
               jstr(ent[1], "id", idb));
        printf("  %-12s %-40s %-40s\n", "bucket", "A", "B");
        for (int i = 0; i < NKEYS; i++) {
            char a[160], b[160];
            field_text(a, sizeof a, keys[i], cJSON_GetObjectItem(bk[0], keys[i]));
            field_text(b, sizeof b, keys[i], cJSON_GetObjectItem(bk[1], keys[i]));
            bool d = !same_field(bk, keys[i]);
            printf("%s %-12s %-40.40s %-40.40s\n", d ? "*" : " ", keys[i], a, b);
        }
        if (compare) {
            printf("\n  %-12s %-40s %-40s\n", "throughput", "A", "B");
            char a[64], b[64];
            for (int k = 0; k < 2; k++)
                snprintf(k ? b : a, 64, isnan(sps[k]) ? "not reported" : "%.0f samples/s", sps[k]);
            printf("  %-12s %-40s %-40s\n", "", a, b);
            for (int k = 0; k < 2; k++)
                snprintf(k ? b : a, 64, isnan(ms[k]) ? "not reported" : "%.3f ms/step", ms[k]);
            printf("  %-12s %-40s %-40s\n", "", a, b);
            if (!isnan(sps[0]) && !isnan(sps[1]) && sps[0] > 0)
                printf("  B/A          %.3fx\n", sps[1] / sps[0]);
            if (!same)
                printf("  note         compared despite different input buckets (%s)\n", differs);
        }
    }
    cJSON_Delete(ent[0]);
    cJSON_Delete(ent[1]);
    if (!compare) {
        cli_error("input buckets differ: %s; use --force to compare anyway", differs);
        return EXIT_FAIL;
    }
    return EXIT_PASS;
}

typedef struct ledger_args {
    int limit;
    bool force;
    const char *from;
} ledger_args;

/* ledger push: the runs the local ledger keeps for the team ledger go up. */
static int ledger_push(cli *c, const char *from)
{
    char *def_team = c->ledger_path ? NULL : dg_ledger_default_path();
    const char *team_path = c->ledger_path ? c->ledger_path : def_team;
    char *def_local = from ? NULL : dg_ledger_local_path();
    const char *local_path = from ? from : def_local;
    int rc = EXIT_PASS;
    if (!team_path || !local_path || strcmp(team_path, local_path) == 0) {
        cli_error("ledger push: name the team ledger with --ledger postgresql://... (or "
                  "DEVGATE_LEDGER) and the local one with --from PATH (or DEVGATE_LOCAL_LEDGER)");
        rc = EXIT_USAGE;
    }
    dg_ledger *local = NULL, *team = NULL;
    const char *t = getenv("DEVGATE_LEDGER_TIMEOUT_MS");
    if (!rc && dg_ledger_open(c->ctx, local_path, t ? atoi(t) : 0, &local) != DG_OK) {
        cli_error("ledger push: %s", dg_errmsg(c->ctx));
        rc = EXIT_USAGE;
    }
    if (!rc && dg_ledger_open(c->ctx, team_path, t ? atoi(t) : 0, &team) != DG_OK) {
        cli_error("ledger push: %s; the runs stay waiting in %s", dg_errmsg(c->ctx),
                  dg_ledger_name(local));
        rc = EXIT_USAGE;
    }
    dg_ledger_push_counts n = {0};
    dg_status st = rc ? DG_OK : dg_ledger_push(c->ctx, local, team, &n);
    if (st != DG_OK) {
        cli_error("ledger push: %s", dg_errmsg(c->ctx));
        rc = EXIT_USAGE;
    }
    if (!rc || st != DG_OK) {
        if (c->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "team", dg_ledger_name(team));
            cJSON_AddStringToObject(o, "local", dg_ledger_name(local));
            cJSON_AddNumberToObject(o, "pushed", n.pushed);
            cJSON_AddNumberToObject(o, "already", n.already);
            cJSON_AddNumberToObject(o, "other", n.other);
            cJSON_AddBoolToObject(o, "complete", st == DG_OK);
            char *out = cJSON_Print(o);
            cli_term_machine_output();
            puts(out ? out : "{}");
            cJSON_free(out);
            cJSON_Delete(o);
        } else if (!c->quiet) {
            printf("pushed %d run%s from %s to %s", n.pushed, n.pushed == 1 ? "" : "s",
                   dg_ledger_name(local), dg_ledger_name(team));
            if (n.already)
                printf(" (%d already there from an earlier push)", n.already);
            printf("\n");
            if (n.other)
                printf("%d run%s wait%s for another team ledger (see 'devgate ledger list')\n",
                       n.other, n.other == 1 ? "" : "s", n.other == 1 ? "s" : "");
        }
    }
    dg_ledger_close(local);
    dg_ledger_close(team);
    dg_string_free(def_team);
    dg_string_free(def_local);
    return rc;
}

static const cli_opt ledger_opts[] = {
    {CLI_INT, "--limit", NULL, "N", "0: all", "runs", "list: the newest N",
     offsetof(ledger_args, limit), 0, 1000000, NULL, NULL, NULL},
    {CLI_FLAG, "--force", NULL, NULL, NULL, NULL, "diff: compare runs whose input buckets differ",
     offsetof(ledger_args, force), 0, 0, NULL, NULL, NULL},
    {CLI_STR, "--from", NULL, "LOCAL", "DEVGATE_LOCAL_LEDGER or the local default", NULL,
     "push: the local ledger whose waiting runs go up", offsetof(ledger_args, from), 0, 0,
     cli_nonempty, NULL, NULL},
    CLI_OPTS_END,
};

const cli_verb cli_verb_ledger = {
    .name = "ledger",
    .args = "list | show ID | diff A B | push",
    .summary = "read the run ledger (SQLite; default $XDG_DATA_HOME/devgate/ledger.db, or "
               "DEVGATE_LEDGER, or --ledger PATH), or a team ledger postgresql://...; push "
               "uploads the runs kept locally while the team ledger was unreachable",
    .exits = "0 done, 1 no such run (show) or buckets differ (diff), 2 usage or ledger error",
    .example = "devgate ledger list --limit 10",
    .tables = {ledger_opts, cli_common_opts},
    .titles = {"ledger options", "common options"},
    .run = cmd_ledger,
};

int cmd_ledger(cli *c, int argc, char **argv)
{
    ledger_args la = {0, false, NULL};
    char *pos[3];
    cli_args a = {.pos = pos, .max = 3};
    int r = cli_parse(c, &cli_verb_ledger, argc, argv, (void *const[]){&la, c}, &a);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    const char *sub = a.npos > 0 ? pos[0] : NULL, *id = a.npos > 1 ? pos[1] : NULL,
               *id2 = a.npos > 2 ? pos[2] : NULL;
    bool force = la.force;
    int limit = la.limit;
    if (c->no_ledger) {
        cli_error("ledger: --no-ledger leaves nothing to read");
        return EXIT_USAGE;
    }
    if (sub && strcmp(sub, "list") == 0 && !id)
        return ledger_list(c, limit);
    if (sub && strcmp(sub, "show") == 0 && id && !id2)
        return ledger_show(c, id);
    if (sub && strcmp(sub, "diff") == 0 && id && id2)
        return ledger_diff(c, id, id2, force);
    if (sub && strcmp(sub, "push") == 0 && !id)
        return ledger_push(c, la.from);
    cli_error(
        "ledger: use 'ledger list [--limit N]', 'ledger show ID', 'ledger diff A B [--force]' "
        "or 'ledger push [--from LOCAL]'");
    return EXIT_USAGE;
}
