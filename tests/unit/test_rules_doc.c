/* docs/rules.md and the rule table agree: every threshold of dg_rules_catalogue
 * has a row in the docs' threshold table with the same default, unit, override
 * range (and "whole" when it must be an integer) and the rules that read it
 * (by the threshold table and by each rule's own list);
 * every rule of the table has a row under "The rules" whose severity starts
 * with the rule's usual one and that names each threshold the rule reads; and
 * the docs list no threshold and no rule id the tables lack. */
#include "check.h"
#include "core/core.h"
#include "core/json.h"
#include "diagnose/diagnose.h"
#include "diagnose/findings.h"
#include "diagnose/thresholds.h"

#include <ctype.h>
#include <stdbool.h>

#define MAX_ROWS 128
#define MAX_CELLS 8

/* One table row of the docs: its cells, trimmed, and the line it is on. */
typedef struct row {
    char *cell[MAX_CELLS];
    int ncell;
    int line;
    bool used; /* matched by an entry of the tables */
} row;

typedef struct rows {
    row r[MAX_ROWS];
    int n;
} rows;

static char *trim(char *s)
{
    while (*s == ' ')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Splits a "| a | b |" line in place on the pipes that are not escaped. */
static void split_row(char *line, row *r)
{
    r->ncell = 0;
    char *p = line + 1; /* past the leading '|' */
    char *start = p;
    for (; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            continue;
        }
        if (*p == '|') {
            *p = '\0';
            if (r->ncell < MAX_CELLS)
                r->cell[r->ncell++] = trim(start);
            start = p + 1;
        }
    }
}

/* The table rows starting with a code span ("| `name` |") between the line
 * "## from" and the next "## " heading. text is modified (lines split). */
static void table_rows(char *text, const char *from, rows *out)
{
    out->n = 0;
    bool in = false;
    int lineno = 0;
    for (char *line = text; line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        lineno++;
        if (strncmp(line, "## ", 3) == 0)
            in = strcmp(line + 3, from) == 0;
        else if (in && strncmp(line, "| `", 3) == 0 && out->n < MAX_ROWS) {
            row *r = &out->r[out->n++];
            r->line = lineno;
            r->used = false;
            split_row(line, r);
        }
        line = nl ? nl + 1 : NULL;
    }
}

/* The name in a cell "`name`", or NULL when the cell is not one code span. */
static const char *code_name(char *cell, char *buf, size_t len)
{
    size_t n = strlen(cell);
    if (n < 3 || cell[0] != '`' || cell[n - 1] != '`' || n - 2 >= len)
        return NULL;
    memcpy(buf, cell + 1, n - 2);
    buf[n - 2] = '\0';
    return strchr(buf, '`') ? NULL : buf;
}

static row *find_row(rows *rs, const char *name)
{
    for (int i = 0; i < rs->n; i++) {
        char buf[64];
        const char *nm = rs->r[i].ncell ? code_name(rs->r[i].cell[0], buf, sizeof buf) : NULL;
        if (nm && strcmp(nm, name) == 0)
            return &rs->r[i];
    }
    return NULL;
}

/* True when the text holds word as a whole word (rule ids, threshold names). */
static bool has_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        bool left = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '-');
        bool right = !(isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '-');
        if (left && right)
            return true;
    }
    return false;
}

/* A docs number ("0.10", "1e6", "-1000") equal to v. */
static bool same_number(const char *s, double v)
{
    char *end;
    double d = strtod(s, &end);
    return end != s && *trim(end) == '\0' && fabs(d - v) <= 1e-12 * fmax(1, fabs(v));
}

/* The range cell "[lo, hi]" or "[lo, hi], whole". */
static bool same_range(const char *cell, double lo, double hi, bool integer)
{
    double a, b;
    char tail[32] = "";
    if (sscanf(cell, "[%lf, %lf]%31[^\n]", &a, &b, tail) < 2)
        return false;
    bool whole = strcmp(trim(tail), ", whole") == 0;
    return fabs(a - lo) <= 1e-12 * fmax(1, fabs(lo)) && fabs(b - hi) <= 1e-12 * fmax(1, fabs(hi)) &&
           whole == integer && (whole || !tail[0]);
}

static void check_thresholds(char *doc_copy)
{
    rows *rs = calloc(1, sizeof *rs);
    table_rows(doc_copy, "Thresholds", rs);
    CHECK_MSG(rs->n > 0, "docs/rules.md has no threshold rows under \"## Thresholds\"");

    dg_ctx *ctx = dg_ctx_new();
    char *json = NULL;
    CHECK(dg_rules_catalogue(ctx, &json) == DG_OK);
    cJSON *cat = cJSON_Parse(json);
    CHECK(cJSON_GetArraySize(cat) == TH_COUNT);
    const cJSON *e;
    cJSON_ArrayForEach(e, cat)
    {
        const char *name = dg_jstr(e, "name");
        row *r = name ? find_row(rs, name) : NULL;
        CHECK_MSG(r, "threshold %s is not in docs/rules.md's threshold table", name);
        if (!r)
            continue;
        r->used = true;
        CHECK_MSG(r->ncell >= 5, "docs/rules.md:%d: the row of %s has %d cells", r->line, name,
                  r->ncell);
        if (r->ncell < 5)
            continue;
        CHECK_MSG(same_number(r->cell[1], dg_jnum(e, "value")),
                  "docs/rules.md:%d: %s default is '%s', the table says %g", r->line, name,
                  r->cell[1], dg_jnum(e, "value"));
        CHECK_MSG(dg_jstr(e, "unit") && strcmp(r->cell[2], dg_jstr(e, "unit")) == 0,
                  "docs/rules.md:%d: %s unit is '%s', the table says '%s'", r->line, name,
                  r->cell[2], dg_jstr(e, "unit"));
        int ti = dg_threshold_index(name, strlen(name));
        CHECK_MSG(ti >= 0, "threshold %s has no index", name);
        if (ti < 0)
            continue;
        const dg_threshold *t = &dg_thresholds[ti];
        CHECK_MSG(same_range(r->cell[3], t->lo, t->hi, t->integer),
                  "docs/rules.md:%d: %s range is '%s', the table says [%g, %g]%s", r->line, name,
                  r->cell[3], t->lo, t->hi, t->integer ? ", whole" : "");
        /* Every rule that reads it is named in "read by". */
        char ids[256];
        snprintf(ids, sizeof ids, "%s", t->rules ? t->rules : "");
        for (char *save = NULL, *id = strtok_r(ids, ", ", &save); id;
             id = strtok_r(NULL, ", ", &save))
            CHECK_MSG(has_word(r->cell[4], id),
                      "docs/rules.md:%d: %s is read by %s, which its row does not name", r->line,
                      name, id);
    }
    /* ... and so is every rule whose row in the rule table says it reads it. */
    for (int i = 0; i < dg_rule_count; i++) {
        char names[256];
        snprintf(names, sizeof names, "%s", dg_rules[i].thresholds ? dg_rules[i].thresholds : "");
        for (char *save = NULL, *th = strtok_r(names, ", ", &save); th;
             th = strtok_r(NULL, ", ", &save)) {
            row *r = find_row(rs, th);
            CHECK_MSG(r && r->ncell >= 5 && has_word(r->cell[4], dg_rules[i].id),
                      "rule %s reads threshold %s, whose row in docs/rules.md does not name it",
                      dg_rules[i].id, th);
        }
    }
    for (int i = 0; i < rs->n; i++)
        CHECK_MSG(rs->r[i].used, "docs/rules.md:%d: threshold %s is not in the table",
                  rs->r[i].line, rs->r[i].cell[0]);
    cJSON_Delete(cat);
    dg_string_free(json);
    dg_ctx_free(ctx);
    free(rs);
}

static void check_rules(char *doc_copy)
{
    rows *rs = calloc(1, sizeof *rs);
    table_rows(doc_copy, "The rules", rs);
    CHECK_MSG(rs->n > 0, "docs/rules.md has no rule rows under \"## The rules\"");
    CHECK(dg_rule_count > 0);
    for (int i = 0; i < dg_rule_count; i++) {
        const dg_rule *rule = &dg_rules[i];
        row *r = find_row(rs, rule->id);
        CHECK_MSG(r, "rule %s is not in docs/rules.md's rule tables", rule->id);
        if (!r)
            continue;
        CHECK_MSG(!r->used, "docs/rules.md:%d: rule %s has two rows", r->line, rule->id);
        r->used = true;
        CHECK_MSG(r->ncell >= 6, "docs/rules.md:%d: the row of %s has %d cells", r->line, rule->id,
                  r->ncell);
        if (r->ncell < 6)
            continue;
        const char *sev = dg_severity_name(rule->severity);
        size_t n = strlen(sev);
        CHECK_MSG(strncmp(r->cell[1], sev, n) == 0 && !isalpha((unsigned char)r->cell[1][n]),
                  "docs/rules.md:%d: %s severity is '%s', the table says %s", r->line, rule->id,
                  r->cell[1], sev);
        /* Each threshold the rule reads is named in its row. */
        char names[256], whole[2048];
        snprintf(names, sizeof names, "%s", rule->thresholds ? rule->thresholds : "");
        snprintf(whole, sizeof whole, "%s | %s | %s", r->cell[2], r->cell[3], r->cell[5]);
        for (char *save = NULL, *th = strtok_r(names, ", ", &save); th;
             th = strtok_r(NULL, ", ", &save))
            CHECK_MSG(has_word(whole, th),
                      "docs/rules.md:%d: %s reads threshold %s, which its row does not name",
                      r->line, rule->id, th);
    }
    for (int i = 0; i < rs->n; i++)
        CHECK_MSG(rs->r[i].used, "docs/rules.md:%d: rule %s is not in the rule table",
                  rs->r[i].line, rs->r[i].cell[0]);
    free(rs);
}

/* The parser itself: a made-up document with one row too many and one wrong
 * default is caught, so a silent parse (no rows found) cannot pass. */
static void check_parser(void)
{
    char doc[] = "## Thresholds\n\n| name | default |\n|---|---|\n"
                 "| `alpha` | 0.10 | % | [0, 1e6] | a-rule, the decision | x |\n"
                 "| `beta\\|x` | 2 | x | [1, 1e6], whole | b | y |\n"
                 "## Other\n| `gamma` | 3 |\n";
    rows *rs = calloc(1, sizeof *rs);
    table_rows(doc, "Thresholds", rs);
    CHECK(rs->n == 2);
    CHECK(find_row(rs, "alpha") && !find_row(rs, "gamma"));
    CHECK(rs->r[0].ncell == 6 && same_number(rs->r[0].cell[1], 0.1));
    CHECK(!same_number(rs->r[0].cell[1], 0.2) && !same_number("0.1x", 0.1));
    CHECK(same_range(rs->r[0].cell[3], 0, 1e6, false) &&
          !same_range(rs->r[0].cell[3], 0, 1e6, true));
    CHECK(same_range(rs->r[1].cell[3], 1, 1e6, true) &&
          !same_range(rs->r[1].cell[3], 1, 1e6, false));
    CHECK(has_word(rs->r[0].cell[4], "a-rule") && !has_word(rs->r[0].cell[4], "a"));
    free(rs);
}

int main(void)
{
    const char *src = getenv("DEVGATE_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/rules.md", src ? src : ".");
    char *doc = dg_read_file(path, 1u << 20, NULL);
    if (!doc)
        check_skip("docs/rules.md not found (set DEVGATE_SRC)");
    check_parser();
    size_t n = strlen(doc);
    char *copy = dg_malloc(n + 1);
    memcpy(copy, doc, n + 1);
    check_thresholds(copy);
    memcpy(copy, doc, n + 1);
    check_rules(copy);
    dg_free(copy);
    dg_free(doc);
    CHECK_DONE();
}
