/* devgate report RUN_ID|FILE.json [--format html|md|json|text] [-o DIR]:
 * renders an evidence record (docs/report.md) from a file or the ledger. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RECORD_MAX ((long)64 << 20)

static const char report_usage[] =
    "report: use 'report RUN_ID|FILE.json [--format html|md|json|text] [-o DIR]'";

static bool parse_format(const char *s, dg_report_format *f)
{
    static const struct {
        const char *name;
        dg_report_format fmt;
    } names[] = {
        {"html", DG_REPORT_HTML}, {"md", DG_REPORT_MD},     {"markdown", DG_REPORT_MD},
        {"json", DG_REPORT_JSON}, {"text", DG_REPORT_TEXT}, {"txt", DG_REPORT_TEXT},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *f = names[i].fmt;
            return true;
        }
    return false;
}

static const char *format_ext(dg_report_format f)
{
    switch (f) {
    case DG_REPORT_HTML: return "html";
    case DG_REPORT_MD: return "md";
    case DG_REPORT_JSON: return "json";
    case DG_REPORT_TEXT: return "txt";
    }
    return "txt";
}

/* The whole file as a NUL-terminated string (free), or NULL with a message. */
static char *read_record_file(const char *path)
{
    char *buf = cli_read_file(path, (size_t)RECORD_MAX);
    if (!buf) {
        if (errno == EFBIG)
            cli_error("report: %s is larger than %ld bytes; not an evidence record", path,
                      RECORD_MAX);
        else if (errno == ENOMEM)
            cli_error("report: out of memory reading %s", path);
        else
            cli_error("report: cannot read %s: %s", path, strerror(errno));
    }
    return buf;
}

/* The record of ledger run id (or unique prefix), printed compactly (free()). */
static char *read_record_ledger(cli *c, const char *id, int *rc)
{
    *rc = EXIT_USAGE;
    if (c->no_ledger) {
        cli_error("report: '%s' is not a file, and --no-ledger leaves no ledger to look it up in",
                  id);
        return NULL;
    }
    char *path = cli_ledger_path(c);
    dg_status st;
    dg_ledger *lg =
        path ? cli_ledger_open(c, path, CLI_LEDGER_READ | CLI_LEDGER_QUIET, NULL, &st) : NULL;
    char *entry_json = NULL;
    if (!path) {
        cli_error("report: cannot tell where the ledger is (set DEVGATE_LEDGER or --ledger)");
        return NULL;
    }
    if (st == DG_OK)
        st = dg_ledger_show(c->ctx, lg, id, &entry_json);
    dg_ledger_close(lg);
    if (st != DG_OK) {
        if (st == DG_ERR_NOT_FOUND)
            cli_error("report: '%s' is neither a file nor a run in the ledger %s", id, path);
        else
            cli_error("report: %s", dg_errmsg(c->ctx));
        free(path);
        return NULL;
    }
    free(path);
    cJSON *entry = cJSON_Parse(entry_json);
    dg_string_free(entry_json);
    cJSON *rec = cJSON_GetObjectItem(entry, "record");
    /* A verb's own record names its run only in the ledger's entry. */
    const cJSON *entry_id = cJSON_GetObjectItem(entry, "id");
    if (cJSON_IsObject(rec) && !cJSON_GetObjectItem(rec, "run_id") && cJSON_IsString(entry_id))
        cJSON_AddStringToObject(rec, "run_id", entry_id->valuestring);
    /* A plain copy: cJSON's allocator may change once the library installs its hooks. */
    char *printed = rec ? cJSON_PrintUnformatted(rec) : NULL;
    char *out = printed ? strdup(printed) : NULL;
    cJSON_free(printed);
    if (!out)
        cli_error("report: run %s has no record", id);
    else
        *rc = EXIT_PASS;
    cJSON_Delete(entry);
    return out;
}

/* Writes text to DIR/report.EXT (creating DIR) and prints the path. */
static int write_report(const char *dir, dg_report_format fmt, const char *text)
{
    struct stat sb;
    if (!cli_make_dirs(dir)) {
        cli_error("report: cannot create folder %s: %s", dir, strerror(errno));
        return EXIT_USAGE;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        cli_error("report: %s is not a folder", dir);
        return EXIT_USAGE;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/report.%s", dir, format_ext(fmt));
    if (!cli_write_file(path, text))
        return EXIT_USAGE;
    puts(path);
    return EXIT_PASS;
}

typedef struct report_args {
    const char *format, *dir;
} report_args;

const cli_opt cli_report_opts[] = {
    {CLI_STR, "--format", NULL, "html|md|json|text", "text (html with -o)", NULL, "what to render",
     offsetof(report_args, format), 0, 0, NULL, NULL, NULL},
    {CLI_STR, "--output", "-o", "DIR", "stdout", NULL, "write DIR/report.EXT instead",
     offsetof(report_args, dir), 0, 0, NULL, NULL, NULL},
    CLI_OPTS_END,
};

int cmd_report(cli *c, int argc, char **argv)
{
    report_args ra = {NULL, NULL};
    char *pos[1];
    cli_args a = {.pos = pos, .max = 1};
    int r = cli_parse(c, &cli_verb_report, argc, argv, (void *const[]){&ra, c}, &a);
    if (r != CLI_PARSED)
        return cli_parse_exit(r);
    const char *what = a.npos ? pos[0] : NULL, *fmt_name = ra.format, *dir = ra.dir;
    if (!what || !what[0]) {
        cli_error("%s", report_usage);
        return EXIT_USAGE;
    }
    dg_report_format fmt = dir ? DG_REPORT_HTML : DG_REPORT_TEXT;
    if (c->json)
        fmt = DG_REPORT_JSON;
    if (fmt_name && !parse_format(fmt_name, &fmt)) {
        cli_error("report: --format wants html, md, json or text, got '%s'", fmt_name);
        return EXIT_USAGE;
    }
    struct stat sb;
    bool is_file = stat(what, &sb) == 0 && !S_ISDIR(sb.st_mode);
    int rc = EXIT_USAGE;
    char *record = NULL;
    if (is_file)
        record = read_record_file(what);
    else
        record = read_record_ledger(c, what, &rc);
    if (!record)
        return EXIT_USAGE;
    char *text = NULL;
    dg_status st = dg_report_render(c->ctx, record, fmt, &text);
    free(record);
    if (st != DG_OK) {
        cli_error("report: %s %s: %s", is_file ? "file" : "run", what, dg_errmsg(c->ctx));
        return EXIT_USAGE;
    }
    if (dir) {
        rc = write_report(dir, fmt, text);
    } else {
        if (fmt != DG_REPORT_TEXT)
            cli_term_machine_output();
        rc = fputs(text, stdout) >= 0 && fflush(stdout) == 0 ? EXIT_PASS : EXIT_USAGE;
    }
    dg_string_free(text);
    return rc;
}
