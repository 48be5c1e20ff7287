/* The option-table parser, help and suggestions (opt.h). */
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const cli_opt cli_common_opts[] = {
    {CLI_FLAG, "--json", NULL, NULL, NULL, NULL, "print the record (with its run_id) as JSON",
     offsetof(cli, json), 0, 0, NULL, NULL, NULL},
    {CLI_FLAG, "--quiet", "-q", NULL, NULL, NULL, "no progress on stderr", offsetof(cli, quiet), 0,
     0, NULL, NULL, NULL},
    {CLI_FUNC, "--progress", NULL, "auto|bar|plain|off", "auto", NULL,
     "progress on stderr: auto a line kept at the bottom on a terminal, else one line per step, "
     "trial and epoch (plain); off as --quiet",
     offsetof(cli, progress), 0, 0, cli_progress_opt, NULL, NULL},
    {CLI_STR, "--ledger", NULL, "PATH|URI",
     "$DEVGATE_LEDGER, else $XDG_DATA_HOME/devgate/ledger.db", NULL,
     "the run ledger: an SQLite file, or a postgresql:// team ledger URI",
     offsetof(cli, ledger_path), 0, 0, NULL, NULL, NULL},
    {CLI_FLAG, "--no-ledger", NULL, NULL, NULL, NULL, "record nothing", offsetof(cli, no_ledger), 0,
     0, NULL, NULL, NULL},
    {CLI_FLAG, "--env-cmdlines", NULL, NULL, NULL, NULL,
     "keep other processes' arguments in the environment proof (credentials masked); "
     "default: the program name only",
     offsetof(cli, env_cmdlines), 0, 0, NULL, NULL, NULL},
    CLI_OPTS_END,
};

const char *cli_nonempty(const cli_opt *o, const char *value, void *field)
{
    (void)o;
    if (!value[0])
        return "a non-empty value";
    *(const char **)field = value;
    return NULL;
}

const cli_verb *cli_find_verb(const char *name)
{
    for (const cli_verb *const *v = cli_verbs; *v; v++)
        if (strcmp((*v)->name, name) == 0)
            return *v;
    return NULL;
}

/* ---- did you mean ----------------------------------------------------------- */

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

const char *cli_did_you_mean(const char *s, const char *const *cand, size_t n)
{
    size_t len = strlen(s), limit = len / 3 > 2 ? len / 3 : 2, best = (size_t)-1;
    const char *pick = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(s, cand[i]);
        if (d < best) {
            best = d;
            pick = cand[i];
        }
    }
    return best <= limit ? pick : NULL;
}

/* ---- parsing ------------------------------------------------------------------ */

/* The option of v named by arg (up to '=' when there is one). */
static const cli_opt *find_opt(const cli_verb *v, const char *arg, size_t len, int *table)
{
    for (int t = 0; t < 4 && v->tables[t]; t++)
        for (const cli_opt *o = v->tables[t]; o->kind != CLI_END; o++)
            if ((strlen(o->name) == len && strncmp(o->name, arg, len) == 0) ||
                (o->alias && strlen(o->alias) == len && strncmp(o->alias, arg, len) == 0)) {
                *table = t;
                return o;
            }
    return NULL;
}

static void unknown_option(const cli_verb *v, const char *arg, size_t len)
{
    const char *names[256];
    size_t n = 0;
    for (int t = 0; t < 4 && v->tables[t]; t++)
        for (const cli_opt *o = v->tables[t]; o->kind != CLI_END && n < 255; o++)
            names[n++] = o->name;
    names[n++] = "--help";
    char word[80];
    snprintf(word, sizeof word, "%.*s", len < 79 ? (int)len : 79, arg);
    const char *near = cli_did_you_mean(word, names, n);
    if (near)
        cli_error("%s: unknown option '%s'; did you mean %s? (devgate %s --help)", v->name, word,
                  near, v->name);
    else
        cli_error("%s: unknown option '%s' (devgate %s --help lists them)", v->name, word, v->name);
}

/* Stores value for o into base; false after a message. */
static bool store(cli *c, const cli_verb *v, const cli_opt *o, const char *value, void *base)
{
    void *field = (char *)base + o->off;
    long n;
    const char *want = NULL;
    switch (o->kind) {
    case CLI_FLAG: *(bool *)field = true; return true;
    case CLI_STR: *(const char **)field = value; return true;
    case CLI_U64: {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(value, &end, 0);
        if (errno || end == value || *end || !(value[0] >= '0' && value[0] <= '9')) {
            cli_error("%s: %s wants a non-negative integer, got '%s'", v->name, o->name, value);
            return false;
        }
        *(uint64_t *)field = u;
        return true;
    }
    case CLI_INT:
    case CLI_LONG:
        if (!cli_parse_long(value, (long)o->lo, (long)o->hi, &n)) {
            cli_error("%s: %s wants an integer in %ld..%ld, got '%s'", v->name, o->name,
                      (long)o->lo, (long)o->hi, value);
            return false;
        }
        if (o->kind == CLI_INT)
            *(int *)field = (int)n;
        else
            *(long *)field = n;
        return true;
    case CLI_DOUBLE:
        if (!cli_parse_double(value, o->lo, o->hi, (double *)field)) {
            if (o->lo == ABOVE_ZERO)
                cli_error("%s: %s wants a positive number up to %g%s%s, got '%s'", v->name, o->name,
                          o->hi, o->unit ? " " : "", o->unit ? o->unit : "", value);
            else
                cli_error("%s: %s wants a number in [%g, %g], got '%s'", v->name, o->name, o->lo,
                          o->hi, value);
            return false;
        }
        return true;
    case CLI_BYTES:
        if (!dg_parse_bytes(value, (size_t *)field)) {
            cli_error("%s: %s wants a size such as 4096, 512K or 1M, got '%s'", v->name, o->name,
                      value);
            return false;
        }
        return true;
    case CLI_FUNC:
        if ((want = o->fn(o, value, field)) != NULL) {
            cli_error("%s: %s wants %s, got '%s'", v->name, o->name, want, value);
            return false;
        }
        return true;
    case CLI_TRAIN: {
        dg_status st = dg_train_opts_set(c->ctx, base, o->key, o->fixed ? o->fixed : value);
        if (st == DG_OK)
            return true;
        /* "batch wants ..." from the library becomes "--batch wants ..." */
        const char *msg = dg_errmsg(c->ctx);
        size_t kl = strlen(o->key);
        if (strncmp(msg, o->key, kl) == 0 && msg[kl] == ' ')
            cli_error("%s: %s%s", v->name, o->name, msg + kl);
        else
            cli_error("%s: %s: %s", v->name, o->name, msg);
        return false;
    }
    case CLI_END: break;
    }
    return false;
}

/* One option word as given: its row, the table it is in, the '=' (NULL:
 * none) and whether the option takes a value. */
typedef struct word {
    const cli_opt *o;
    int t;
    const char *eq;
    bool takes;
} word;

static bool is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* The option arg names (`--name` or `--name=VALUE`) into *w; false after
 * saying it is unknown. */
static bool lookup(const cli_verb *v, const char *arg, word *w)
{
    w->eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    size_t len = w->eq ? (size_t)(w->eq - arg) : strlen(arg);
    w->t = 0;
    w->o = find_opt(v, arg, len, &w->t);
    if (!w->o) {
        unknown_option(v, arg, len);
        return false;
    }
    w->takes = w->o->kind != CLI_FLAG && !(w->o->kind == CLI_TRAIN && w->o->fixed);
    return true;
}

int cli_parse_one(cli *c, const cli_verb *v, int argc, char **argv, int *i, void *const bases[],
                  int *table)
{
    const char *arg = argv[*i];
    if (is_help(arg)) {
        cli_verb_help(v, stdout);
        return CLI_HELP_SHOWN;
    }
    word w;
    if (!lookup(v, arg, &w))
        return CLI_BAD;
    const cli_opt *o = w.o;
    const char *eq = w.eq;
    int t = w.t;
    bool takes = w.takes;
    const char *value = NULL;
    if (!takes && eq) {
        cli_error("%s: %s takes no value, got '%s'", v->name, o->name, arg);
        return CLI_BAD;
    }
    if (takes) {
        if (eq) {
            value = eq + 1;
        } else if (*i + 1 < argc) {
            value = argv[++*i];
        } else {
            cli_error("%s: %s needs a value (%s)", v->name, o->name, o->arg ? o->arg : "");
            return CLI_BAD;
        }
    }
    if (!store(c, v, o, value, bases[t]))
        return CLI_BAD;
    if (table)
        *table = t;
    return CLI_PARSED;
}

/* The common options that are library settings reach the context once the
 * verb's words are read. */
static int parsed(cli *c)
{
    if (c && c->ctx)
        dg_set_env_cmdlines(c->ctx, c->env_cmdlines);
    return CLI_PARSED;
}

int cli_parse(cli *c, const cli_verb *v, int argc, char **argv, void *const bases[], cli_args *a)
{
    if (a) {
        a->npos = 0;
        a->rest = NULL;
        a->nrest = 0;
        memset(a->seen, 0, sizeof a->seen);
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0 && a && a->max < 0) {
            a->rest = argv + i + 1;
            a->nrest = argc - i - 1;
            return parsed(c);
        }
        if (arg[0] != '-' || !arg[1]) {
            if (a && a->max < 0) { /* the command starts here */
                a->rest = argv + i;
                a->nrest = argc - i;
                return parsed(c);
            }
            if (!a || a->npos >= a->max) {
                cli_error("%s: unexpected argument '%s' (devgate %s --help)", v->name, arg,
                          v->name);
                return CLI_BAD;
            }
            a->pos[a->npos++] = argv[i];
            continue;
        }
        int t = 0, r = cli_parse_one(c, v, argc, argv, &i, bases, &t);
        if (r != CLI_PARSED)
            return r;
        if (a)
            a->seen[t]++;
    }
    return parsed(c);
}

int cli_parse_exit(int r)
{
    return r == CLI_HELP_SHOWN ? EXIT_PASS : EXIT_USAGE;
}

/* ---- help ------------------------------------------------------------------------ */

static void opt_line(const cli_opt *o, FILE *out)
{
    char head[64];
    snprintf(head, sizeof head, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
             o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    fprintf(out, "  %-26s %s", head, o->help);
    if (o->def && o->unit)
        fprintf(out, " (default %s; %s)", o->def, o->unit);
    else if (o->def)
        fprintf(out, " (default %s)", o->def);
    else if (o->unit)
        fprintf(out, " (%s)", o->unit);
    fputc('\n', out);
}

/* Table t's heading: its title, else "VERB options" for a verb's own table,
 * "train options" or "common options" for the shared ones. */
static void table_title(const cli_verb *v, int t, char *buf, size_t len)
{
    const cli_opt *tab = v->tables[t];
    if (v->titles[t])
        snprintf(buf, len, "%s", v->titles[t]);
    else if (tab == cli_common_opts || tab == cli_train_opts)
        snprintf(buf, len, "%s options", tab == cli_common_opts ? "common" : "train");
    else if (t == 0 && !v->hidden)
        snprintf(buf, len, "%s options", v->name);
    else
        snprintf(buf, len, "options");
}

void cli_verb_help(const cli_verb *v, FILE *out)
{
    fprintf(out, "usage: devgate %s [options]%s%s\n\n%s\n", v->name, v->args ? " " : "",
            v->args ? v->args : "", v->summary);
    for (int t = 0; t < 4 && v->tables[t]; t++) {
        char title[256];
        table_title(v, t, title, sizeof title);
        fprintf(out, "\n%s:\n", title);
        for (const cli_opt *o = v->tables[t]; o->kind != CLI_END; o++)
            opt_line(o, out);
    }
    fprintf(out, "  %-26s %s\n", "-h, --help", "this help");
    fprintf(out, "\nexit status: %s\nexample: %s\n", v->exits, v->example);
}

void cli_usage(FILE *out)
{
    fputs("usage: devgate [--ledger PATH | --no-ledger] VERB [options]\n\nverbs:\n", out);
    for (const cli_verb *const *v = cli_verbs; *v; v++) {
        if ((*v)->hidden)
            continue;
        fprintf(out, "  %s%s%s\n        %s\n", (*v)->name, (*v)->args ? " " : "",
                (*v)->args ? (*v)->args : "", (*v)->summary);
    }
    fputs("\n`devgate VERB --help` lists a verb's options with their defaults and units.\n"
          "global options: --ledger PATH, --no-ledger, --json, --quiet; --version; --help\n"
          "exit status: 0 pass, 1 fail, 2 usage or ledger error, 3 backend unavailable,\n"
          "130 interrupted (accept keeps the partial pack and ledger entry); run also 124\n"
          "timeout, 126 cannot start, 127 no such program (docs/cli.md)\n",
          out);
}

void cli_list_options(FILE *out)
{
    for (const cli_verb *const *v = cli_verbs; *v; v++) {
        if ((*v)->hidden)
            continue;
        for (int t = 0; t < 4 && (*v)->tables[t]; t++)
            for (const cli_opt *o = (*v)->tables[t]; o->kind != CLI_END; o++)
                fprintf(out, "%s %s\n", (*v)->name, o->name);
    }
}

int cli_check_words(const cli_verb *v, int argc, char **argv)
{
    bool command = v->args && strstr(v->args, "CMD"); /* a command starts at its first word */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0)
            break;
        if (arg[0] != '-' || !arg[1]) {
            if (command)
                break;
            continue;
        }
        word w;
        if (is_help(arg))
            continue;
        if (!lookup(v, arg, &w))
            return CLI_BAD;
        const cli_opt *o = w.o;
        const char *eq = w.eq;
        bool takes = w.takes;
        if (takes && !eq && ++i >= argc) {
            cli_error("%s: %s needs a value (%s)", v->name, o->name, o->arg ? o->arg : "");
            return CLI_BAD;
        }
    }
    return CLI_PARSED;
}
