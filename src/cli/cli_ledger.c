/* devgate ledger list|show|diff|export|push: read the run ledger. diff lists
 * what differs between two runs (spec key by key through the spec codec, the
 * environment, the commits, the input bucket) before any number, and calls a
 * ratio a speedup only when the spec and the bucket agree. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One read of the ledger a subcommand makes: which call, and its arguments. */
typedef enum { READ_LIST, READ_EXPORT, READ_SHOW, READ_DIFF } read_kind;
typedef struct ledger_read {
    const char *verb; /* "ledger show": what a message names */
    read_kind kind;
    const char *a, *b; /* export: since; show: the id; diff: the two ids */
    int limit;         /* list */
} ledger_read;

/* Opens the ledger, makes read r and closes it again: the call's status into
 * *st and, when it is DG_OK, its answer parsed into *doc (cJSON_Delete; NULL
 * otherwise). EXIT_USAGE when the ledger could not be opened or the answer
 * not parsed (said), else EXIT_PASS: the caller tells *st's failures. */
static int read_ledger(cli *c, ledger_read r, dg_status *st, cJSON **doc)
{
    *doc = NULL;
    dg_ledger *lg = cli_ledger_open(c, NULL, CLI_LEDGER_READ, NULL, NULL);
    if (!lg)
        return EXIT_USAGE;
    char *json = NULL;
    switch (r.kind) {
    case READ_LIST: *st = dg_ledger_list(c->ctx, lg, r.limit, &json); break;
    case READ_EXPORT: *st = dg_ledger_export(c->ctx, lg, r.a, &json); break;
    case READ_SHOW: *st = dg_ledger_show(c->ctx, lg, r.a, &json); break;
    case READ_DIFF: *st = dg_ledger_diff(c->ctx, lg, r.a, r.b, &json); break;
    }
    dg_ledger_close(lg);
    if (*st == DG_OK)
        *doc = cJSON_Parse(json);
    dg_string_free(json);
    if (*st == DG_OK && !*doc) {
        cli_error("%s: out of memory", r.verb);
        return EXIT_USAGE;
    }
    return EXIT_PASS;
}

/* The metric obj[key] as "3683 samples/s", "-" when not reported. */
static const char *metric_text(char *buf, size_t n, const cJSON *obj, const char *key)
{
    double v = jmetric(obj, key);
    const char *unit = jstr(cJSON_GetObjectItem(obj, key), "unit", "");
    if (isnan(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, v >= 100 ? "%.0f %s" : "%.4g %s", v, unit);
    return buf;
}

/* The runs to list: the newest limit (0: all), or with since those started at
 * or after it (newest first); NULL after printing why. */
static cJSON *list_runs(cli *c, int limit, const char *since)
{
    cJSON *arr;
    dg_status st;
    ledger_read r = {"ledger list", since ? READ_EXPORT : READ_LIST, since, NULL, limit};
    if (read_ledger(c, r, &st, &arr))
        return NULL;
    if (st != DG_OK) {
        cli_fail_status(c, st, "ledger list");
        return NULL;
    }
    if (since) { /* export gives them oldest first, records included */
        cJSON *out = cJSON_CreateArray();
        for (int i = cJSON_GetArraySize(arr) - 1; i >= 0; i--) {
            if (limit && cJSON_GetArraySize(out) >= limit)
                break;
            cJSON *e = cJSON_DetachItemFromArray(arr, i);
            cJSON_DeleteItemFromObject(e, "record");
            cJSON_AddItemToArray(out, e);
        }
        cJSON_Delete(arr);
        arr = out;
    }
    if (!arr)
        cli_error("ledger list: out of memory");
    return arr;
}

static int ledger_list(cli *c, int limit, const char *since)
{
    cJSON *arr = list_runs(c, limit, since);
    if (!arr)
        return EXIT_USAGE;
    if (c->json) {
        char *out = cJSON_Print(arr);
        cli_put_json(out ? out : "[]");
        cJSON_free(out);
    } else {
        printf("%-28s %-12s %-8s %-12s %6s %-16s %-26s %4s %-14s %-28s %s\n", "id", "verb",
               "backend", "model", "batch", "throughput", "verdict", "exit", "label", "command",
               "host");
        const cJSON *r;
        cJSON_ArrayForEach(r, arr)
        {
            char id[64], verb[16], be[12], model[16], tp[48], verdict[32], host[256], node[256],
                batch[16], label[16], cmd[32];
            const char *nd = jstr(r, "node", NULL);
            double b = jnum(r, "batch", NAN);
            snprintf(batch, sizeof batch, isnan(b) ? "-" : "%.0f", b);
            printf("%-28s %-12s %-8s %-12s %6s %-16s %-26s %4.0f %-14s %-28s %s%s%s%s%s\n",
                   cli_cell(id, sizeof id, jstr(r, "id", "?")),
                   cli_cell(verb, sizeof verb, jstr(r, "verb", "?")),
                   cli_cell(be, sizeof be, jstr(r, "backend", "-")),
                   cli_cell(model, 13, jstr(r, "model", "-")), batch,
                   metric_text(tp, sizeof tp, r, "throughput"),
                   cli_cell(verdict, 27, jstr(r, "verdict", "-")), jnum(r, "exit_status", -1),
                   cli_cell(label, 15, jstr(r, "label", "-")),
                   cli_cell(cmd, 29, jstr(r, "command", "-")),
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
    return EXIT_PASS;
}

/* One "  key   value" line of the summary, the value cleaned; nothing for NULL. */
static void show_line(const char *key, const char *value)
{
    char cell[512];
    if (value)
        printf("  %-16s %s\n", key, cli_cell(cell, sizeof cell, value));
}

/* The human summary of an entry: what ran, where, with what result. */
static void print_entry(const cJSON *e)
{
    const cJSON *rec = cJSON_GetObjectItem(e, "record");
    char id[64], buf[128];
    printf("run %s\n", cli_cell(id, sizeof id, jstr(e, "id", "?")));
    show_line("verb", jstr(e, "verb", NULL));
    show_line("started", jstr(e, "started_at", NULL));
    snprintf(buf, sizeof buf, "%s, exit %.0f", jstr(e, "state", "?"), jnum(e, "exit_status", -1));
    show_line("state", buf);
    show_line("label", jstr(e, "label", NULL));
    show_line("command", jstr(e, "command", NULL));
    show_line("host", jstr(e, "host", NULL));
    show_line("node", jstr(e, "node", NULL));
    show_line("pending", jstr(e, "pending", NULL));
    show_line("backend", jstr(e, "backend", NULL));
    show_line("model", jstr(e, "model", NULL));
    double b = jnum(e, "batch", NAN);
    if (!isnan(b)) {
        snprintf(buf, sizeof buf, "%.0f", b);
        show_line("batch", buf);
    }
    show_line("throughput", metric_text(buf, sizeof buf, e, "throughput"));
    show_line("verdict", jstr(e, "verdict", NULL));
    show_line("route", jstr(cJSON_GetObjectItem(rec, "decision"), "route", NULL));
    show_line("spec id", jstr(e, "spec_id", NULL));
    show_line("bucket id", jstr(e, "bucket_id", NULL));
    show_line("devgate", jstr(e, "devgate_version", NULL));
    show_line("git commit", jstr(e, "git_commit", NULL));
    const cJSON *f = cJSON_GetObjectItem(rec, "findings"), *it;
    int n = cJSON_GetArraySize(f), shown = 0;
    if (n)
        printf("  %-16s %d\n", "findings", n);
    cJSON_ArrayForEach(it, f)
    {
        if (shown++ == 5) {
            printf("  %-16s ... and %d more\n", "", n - 5);
            break;
        }
        char sev[32], fid[96];
        printf("  %-16s %s %s\n", "", cli_cell(sev, sizeof sev, jstr(it, "severity", "?")),
               cli_cell(fid, sizeof fid, jstr(it, "id", "?")));
    }
    printf("  (the whole record: devgate ledger show %s --json)\n", id);
}

static int ledger_show(cli *c, const char *id)
{
    cJSON *e;
    dg_status st;
    int rc = read_ledger(c, (ledger_read){"ledger show", READ_SHOW, id, NULL, 0}, &st, &e);
    if (rc)
        return rc;
    if (st == DG_ERR_NOT_FOUND) {
        cli_error("ledger show: %s", dg_errmsg(c->ctx));
        return EXIT_FAIL;
    }
    if (st != DG_OK)
        return cli_fail_status(c, st, "ledger show");
    if (c->json) {
        char *out = cJSON_Print(e);
        cli_put_json(out ? out : "{}");
        cJSON_free(out);
    } else {
        print_entry(e);
    }
    cJSON_Delete(e);
    return EXIT_PASS;
}

/* A value as short text for the table ("-" when the run does not hold it). */
static void field_text(char *buf, size_t len, const char *key, const cJSON *v)
{
    buf[0] = '\0';
    if (!v || cJSON_IsNull(v)) {
        snprintf(buf, len, "-");
    } else if (strcmp(key, "resolutions") == 0) {
        const cJSON *r;
        size_t off = 0;
        cJSON_ArrayForEach(r, v) off +=
            (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%gx%g:%g", off ? "," : "",
                             jnum(r, "h", 0), jnum(r, "w", 0), jnum(r, "weight", 0));
    } else if (strcmp(key, "augment") == 0 && cJSON_IsArray(v)) {
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
    } else if (cJSON_IsObject(v) && cJSON_GetObjectItem(v, "valid")) {
        const cJSON *val = cJSON_GetObjectItem(v, "value");
        if (cJSON_IsTrue(cJSON_GetObjectItem(v, "valid")) && cJSON_IsNumber(val))
            snprintf(buf, len, "%g %s", val->valuedouble, jstr(v, "unit", ""));
        else
            snprintf(buf, len, "not reported");
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

/* The text of one side of a row: the value, or for a group one run does not
 * hold, how many fields it has. */
static void side_text(char *buf, size_t len, const cJSON *row, const char *side)
{
    const cJSON *v = cJSON_GetObjectItem(row, side);
    const char *name = jstr(row, "name", "");
    const char *dot = strchr(name, '.');
    if (cJSON_IsTrue(cJSON_GetObjectItem(row, "whole_group")))
        snprintf(buf, len, cJSON_IsNull(v) ? "not recorded" : "%d fields", cJSON_GetArraySize(v));
    else
        field_text(buf, len, dot ? dot + 1 : name, v);
}

/* The diff as a table: what differs first, then the numbers, labelled. */
static void print_diff(const cJSON *o, const char *ida, const char *idb)
{
    const cJSON *runs = cJSON_GetObjectItem(o, "runs");
    const cJSON *ra = cJSON_GetArrayItem(runs, 0), *rb = cJSON_GetArrayItem(runs, 1);
    char a[256], b[256];
    printf("devgate ledger diff · A %s (%s) · B %s (%s)\n\n", cli_cell(a, 64, jstr(ra, "id", ida)),
           jstr(ra, "verb", "?"), cli_cell(b, 64, jstr(rb, "id", idb)), jstr(rb, "verb", "?"));
    const cJSON *rows = cJSON_GetObjectItem(o, "rows"), *r;
    if (cJSON_GetArraySize(rows))
        printf("  %-26s %-40s %s\n", "differs", "A", "B");
    bool any_unknown = false, any_ignored = false;
    cJSON_ArrayForEach(r, rows)
    {
        char va[256], vb[256], ca[256], cb[256];
        side_text(va, sizeof va, r, "a");
        side_text(vb, sizeof vb, r, "b");
        cli_cell(ca, sizeof ca, va);
        cli_cell(cb, sizeof cb, vb);
        const char *kind = jstr(r, "kind", "");
        char mark = strcmp(kind, "one_side") == 0 ? '?' : strcmp(kind, "ignored") == 0 ? '~' : '*';
        any_unknown |= mark == '?';
        any_ignored |= mark == '~';
        if (strlen(ca) <= 40 && strlen(cb) <= 60)
            printf("%c %-26s %-40s %s\n", mark, cli_cell(a, 27, jstr(r, "name", "?")), ca, cb);
        else /* too long for a column: each side on its own line */
            printf("%c %s\n    A %s\n    B %s\n", mark, cli_cell(a, 64, jstr(r, "name", "?")), ca,
                   cb);
    }
    const cJSON *sc = cJSON_GetObjectItem(o, "same_counts");
    int ns = (int)jnum(sc, "spec", 0), ne = (int)jnum(sc, "env", 0),
        nb = (int)jnum(sc, "bucket", 0);
    bool codec = cJSON_IsTrue(cJSON_GetObjectItem(ra, "spec_decoded")) &&
                 cJSON_IsTrue(cJSON_GetObjectItem(rb, "spec_decoded"));
    printf("%s  the same: %d spec field%s%s, %d environment field%s, %d bucket field%s\n",
           cJSON_GetArraySize(rows) ? "\n" : "", ns, ns == 1 ? "" : "s",
           codec ? " (through the spec codec)" : "", ne, ne == 1 ? "" : "s", nb,
           nb == 1 ? "" : "s");
    if (any_unknown)
        printf("  ? recorded by one run only: not known to differ\n");
    if (any_ignored)
        printf("  ~ free text, or a data path under the same input bucket: not a difference\n");
    bool comparable = cJSON_IsTrue(cJSON_GetObjectItem(o, "comparable"));
    const char *why = jstr(o, "not_comparable", "");
    if (!comparable)
        printf("  not comparable: %s differ%s\n", why, strchr(why, ',') ? "" : "s");
    printf("\n  %-26s %-40s %s\n", comparable ? "numbers" : "numbers (not comparable)", "A", "B");
    char va[64], vb[64];
    for (int k = 0; k < 2; k++) {
        metric_text(k ? vb : va, 64, k ? rb : ra, "samples_per_s");
        if (!strcmp(k ? vb : va, "-"))
            snprintf(k ? vb : va, 64, "not reported");
    }
    printf("  %-26s %-40s %s\n", "throughput", va, vb);
    for (int k = 0; k < 2; k++) {
        double v = jmetric(k ? rb : ra, "step_ms");
        snprintf(k ? vb : va, 64, isnan(v) ? "not reported" : "%.3f ms/step", v);
    }
    printf("  %-26s %-40s %s\n", "step time", va, vb);
    for (int k = 0; k < 2; k++)
        field_text(k ? vb : va, 64, "batch", cJSON_GetObjectItem(k ? rb : ra, "batch"));
    printf("  %-26s %-40s %s\n", "batch", va, vb);
    printf("  %-26s %-40.40s %s\n", "verdict", cli_cell(a, 41, jstr(ra, "verdict", "-")),
           cli_cell(b, 128, jstr(rb, "verdict", "-")));
    const cJSON *ratio = cJSON_GetObjectItem(o, "ratio");
    const char *envd = jstr(o, "environment_differs", NULL);
    if (cJSON_IsNumber(ratio) && comparable)
        printf("  %-26s %.3fx (same spec and bucket%s%s; one measurement a side, no "
               "interval: devgate compare repeats them)\n",
               "speedup B/A", ratio->valuedouble, envd ? "; the environment differs: " : "",
               envd ? envd : "");
    else if (cJSON_IsNumber(ratio))
        printf("  %-26s %.3fx, not a speedup: not comparable (%s); for a device speedup "
               "with an interval use devgate compare\n",
               "ratio B/A", ratio->valuedouble, why);
}

static int ledger_diff(cli *c, const char *ida, const char *idb, bool force)
{
    cJSON *o;
    dg_status st;
    int rc = read_ledger(c, (ledger_read){"ledger diff", READ_DIFF, ida, idb, 0}, &st, &o);
    if (rc)
        return rc;
    if (st != DG_OK) {
        cli_error("ledger diff: %s", dg_errmsg(c->ctx));
        return st == DG_ERR_NOT_FOUND ? EXIT_FAIL : EXIT_USAGE;
    }
    bool comparable = cJSON_IsTrue(cJSON_GetObjectItem(o, "comparable"));
    char why[512];
    snprintf(why, sizeof why, "%s", jstr(o, "not_comparable", ""));
    if (c->json) {
        cJSON_AddBoolToObject(o, "forced", force && !comparable);
        char *out = cJSON_Print(o);
        cli_put_json(out ? out : "{}");
        cJSON_free(out);
    } else {
        print_diff(o, ida, idb);
    }
    cJSON_Delete(o);
    if (!comparable && !force) {
        cli_error("not comparable: %s differ%s; use --force for exit status 0", why,
                  strchr(why, ',') ? "" : "s");
        return EXIT_FAIL;
    }
    return EXIT_PASS;
}

/* One CSV field (RFC 4180): quoted when it holds a comma, a quote, a line
 * break or starts or ends with a space; quotes doubled. NULL: empty. */
static void csv_field(FILE *out, const char *s, bool last)
{
    if (s && s[0]) {
        size_t n = strlen(s);
        bool quote = strpbrk(s, ",\"\r\n") != NULL || s[0] == ' ' || s[n - 1] == ' ';
        if (quote) {
            fputc('"', out);
            for (const char *p = s; *p; p++) {
                if (*p == '"')
                    fputc('"', out);
                fputc(*p, out);
            }
            fputc('"', out);
        } else {
            fputs(s, out);
        }
    }
    fputs(last ? "\n" : ",", out);
}

/* A number field: empty when not reported (never 0). */
static void csv_num(FILE *out, double v, const char *fmt)
{
    char buf[64] = "";
    if (!isnan(v))
        snprintf(buf, sizeof buf, fmt, v);
    csv_field(out, buf, false);
}

/* The columns of `ledger export --format csv`, in order (docs/schema/ledger.md). */
static const char *const k_csv_cols[] = {"id",
                                         "seq",
                                         "started_at",
                                         "verb",
                                         "exit_status",
                                         "state",
                                         "host",
                                         "node",
                                         "pending",
                                         "git_commit",
                                         "devgate_version",
                                         "backend",
                                         "model",
                                         "batch",
                                         "throughput",
                                         "throughput_unit",
                                         "verdict",
                                         "spec_id",
                                         "bucket_id"};
enum { CSV_NCOLS = sizeof k_csv_cols / sizeof k_csv_cols[0] };

static void csv_row(FILE *out, const cJSON *e)
{
    csv_field(out, jstr(e, "id", NULL), false);
    csv_num(out, jnum(e, "seq", NAN), "%.0f");
    csv_field(out, jstr(e, "started_at", NULL), false);
    csv_field(out, jstr(e, "verb", NULL), false);
    csv_num(out, jnum(e, "exit_status", NAN), "%.0f");
    csv_field(out, jstr(e, "state", NULL), false);
    csv_field(out, jstr(e, "host", NULL), false);
    csv_field(out, jstr(e, "node", NULL), false);
    csv_field(out, jstr(e, "pending", NULL), false);
    csv_field(out, jstr(e, "git_commit", NULL), false);
    csv_field(out, jstr(e, "devgate_version", NULL), false);
    csv_field(out, jstr(e, "backend", NULL), false);
    csv_field(out, jstr(e, "model", NULL), false);
    csv_num(out, jnum(e, "batch", NAN), "%.0f");
    double sps = jmetric(e, "throughput");
    csv_num(out, sps, "%.10g");
    csv_field(out, isnan(sps) ? NULL : jstr(cJSON_GetObjectItem(e, "throughput"), "unit", NULL),
              false);
    csv_field(out, jstr(e, "verdict", NULL), false);
    csv_field(out, jstr(e, "spec_id", NULL), false);
    csv_field(out, jstr(e, "bucket_id", NULL), true);
}

/* ledger export: every run (since a date), oldest first, as CSV or JSON Lines. */
static int ledger_export(cli *c, const char *format, const char *since)
{
    bool csv;
    if (format && strcmp(format, "csv") == 0) {
        csv = true;
    } else if (format && strcmp(format, "jsonl") == 0) {
        csv = false;
    } else {
        char shown[64];
        cli_error("ledger export: --format wants csv or jsonl, got '%s'",
                  format ? cli_cell(shown, sizeof shown, format) : "(none)");
        return EXIT_USAGE;
    }
    cJSON *arr;
    dg_status st;
    int rc = read_ledger(c, (ledger_read){"ledger export", READ_EXPORT, since, NULL, 0}, &st, &arr);
    if (rc)
        return rc;
    if (st != DG_OK) { /* the message names the call or the ledger, or gets the call here */
        const char *m = dg_errmsg(c->ctx);
        if (strncmp(m, "ledger", 6) == 0)
            cli_error("%s", m);
        else
            cli_error("ledger export: %s", m);
        return st == DG_ERR_UNAVAILABLE ? EXIT_UNAVAILABLE : EXIT_USAGE;
    }
    cli_term_machine_output();
    const cJSON *e;
    if (csv) {
        for (int i = 0; i < CSV_NCOLS; i++)
            csv_field(stdout, k_csv_cols[i], i == CSV_NCOLS - 1);
        cJSON_ArrayForEach(e, arr) csv_row(stdout, e);
    } else {
        cJSON_ArrayForEach(e, arr)
        {
            char *line = cJSON_PrintUnformatted(e); /* strings escape their line breaks */
            if (!line) {
                cJSON_Delete(arr);
                cli_error("ledger export: out of memory");
                return EXIT_USAGE;
            }
            puts(line);
            cJSON_free(line);
        }
    }
    cJSON_Delete(arr);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("ledger export: writing the output failed");
        return EXIT_USAGE;
    }
    return EXIT_PASS;
}

typedef struct ledger_args {
    int limit;
    bool force;
    const char *from;
    const char *format;
    const char *since;
} ledger_args;

/* ledger push: the runs the local ledger keeps for the team ledger go up. */
static int ledger_push(cli *c, const char *from)
{
    char *team_path = cli_ledger_path(c);
    char *def_local = from ? NULL : dg_ledger_local_path();
    const char *local_path = from ? from : def_local;
    int rc = EXIT_PASS;
    if (!team_path || !local_path || strcmp(team_path, local_path) == 0) {
        cli_error("ledger push: name the team ledger with --ledger postgresql://... (or "
                  "DEVGATE_LEDGER) and the local one with --from PATH (or DEVGATE_LOCAL_LEDGER)");
        rc = EXIT_USAGE;
    }
    dg_ledger *local = NULL, *team = NULL;
    if (!rc && !(local = cli_ledger_open(c, local_path, CLI_LEDGER_WRITE, "ledger push", NULL)))
        rc = EXIT_USAGE;
    if (!rc &&
        !(team = cli_ledger_open(c, team_path, CLI_LEDGER_WRITE | CLI_LEDGER_QUIET, NULL, NULL))) {
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
    free(team_path);
    dg_string_free(def_local);
    return rc;
}

const cli_opt cli_ledger_opts[] = {
    {CLI_INT, "--limit", NULL, "N", "0: all", "runs", "list: the newest N",
     offsetof(ledger_args, limit), 0, 1000000, NULL, NULL, NULL},
    {CLI_FLAG, "--force", NULL, NULL, NULL, NULL, "diff: compare runs whose input buckets differ",
     offsetof(ledger_args, force), 0, 0, NULL, NULL, NULL},
    {CLI_STR, "--from", NULL, "LOCAL", "DEVGATE_LOCAL_LEDGER or the local default", NULL,
     "push: the local ledger whose waiting runs go up", offsetof(ledger_args, from), 0, 0,
     cli_nonempty, NULL, NULL},
    {CLI_STR, "--format", NULL, "csv|jsonl", NULL, NULL,
     "export: CSV with a header row, or one JSON entry (record included) a line",
     offsetof(ledger_args, format), 0, 0, NULL, NULL, NULL},
    {CLI_STR, "--since", NULL, "DATE", "all runs", NULL,
     "list, export: runs started at or after this UTC date (YYYY-MM-DD or "
     "YYYY-MM-DDTHH:MM:SSZ)",
     offsetof(ledger_args, since), 0, 0, cli_nonempty, NULL, NULL},
    CLI_OPTS_END,
};

int cmd_ledger(cli *c, int argc, char **argv)
{
    ledger_args la = {0, false, NULL, NULL, NULL};
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
    if (la.since && !(sub && (strcmp(sub, "list") == 0 || strcmp(sub, "export") == 0))) {
        cli_error("ledger: --since belongs to ledger list and ledger export");
        return EXIT_USAGE;
    }
    if (sub && strcmp(sub, "list") == 0 && !id)
        return ledger_list(c, limit, la.since);
    if (sub && strcmp(sub, "show") == 0 && id && !id2)
        return ledger_show(c, id);
    if (sub && strcmp(sub, "diff") == 0 && id && id2)
        return ledger_diff(c, id, id2, force);
    if (sub && strcmp(sub, "push") == 0 && !id)
        return ledger_push(c, la.from);
    if (sub && strcmp(sub, "export") == 0 && !id)
        return ledger_export(c, la.format, la.since);
    cli_error("ledger: use 'ledger list [--limit N]', 'ledger show ID', 'ledger diff A B "
              "[--force]', 'ledger export --format csv|jsonl [--since DATE]' or 'ledger push "
              "[--from LOCAL]'");
    return EXIT_USAGE;
}
