/* libFuzzer harness for the command-line parsers (src/cli/opt.c): the bytes are
 * an argv, one word per line. The first word names the verb ("devgate" for the
 * options before the verb, as main.c parses them); a word that names none
 * picks one by its first byte. The rest is parsed by cli_parse with that
 * verb's option tables, exactly as the verb does, into zeroed stand-ins for
 * the verb's structs (a dg_train_opts for the training table, struct cli for
 * the common one). Nothing may crash, leak or read out of bounds, and:
 *  - CLI_BAD prints one "devgate: VERB: ..." message to stderr;
 *  - CLI_PARSED prints nothing; CLI_HELP_SHOWN prints the verb's usage;
 *  - every integer and number option holds its start value or one in range;
 *  - the training options stay initialised (dg_train_opts_check);
 *  - positionals never exceed the verb's maximum; parsing is deterministic.
 * The verb table is main.c's own (included here with main renamed), so a new
 * verb is fuzzed without touching this file. */
#include "fuzz.h"
int dg_cli_main_unused(int argc, char **argv);
#define main dg_cli_main_unused
#include "cli/main.c"
#undef main

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 128
#define BASE_BYTES 65536 /* larger than any verb's options struct */

static const cli_opt *table_has(const cli_opt *t, cli_kind kind)
{
    for (; t->kind != CLI_END; t++)
        if (t->kind == kind)
            return t;
    return NULL;
}

/* Start values that no option can parse to (out of every table's range). */
static void seed_fields(const cli_opt *t, char *base)
{
    for (; t->kind != CLI_END; t++) {
        void *f = base + t->off;
        if (t->kind == CLI_INT)
            *(int *)f = INT_MIN + 7;
        else if (t->kind == CLI_LONG)
            *(long *)f = LONG_MIN + 7;
        else if (t->kind == CLI_DOUBLE)
            *(double *)f = -HUGE_VAL;
    }
}

/* False when a numeric field holds neither its start value nor one in range. */
static bool fields_in_range(const cli_opt *t, const char *base)
{
    for (; t->kind != CLI_END; t++) {
        const void *f = base + t->off;
        if (t->kind == CLI_INT) {
            int v = *(const int *)f;
            if (v != INT_MIN + 7 && (v < (long)t->lo || v > (long)t->hi))
                return false;
        } else if (t->kind == CLI_LONG) {
            long v = *(const long *)f;
            if (v != LONG_MIN + 7 && (v < (long)t->lo || v > (long)t->hi))
                return false;
        } else if (t->kind == CLI_DOUBLE) {
            double v = *(const double *)f;
            if (v != -HUGE_VAL && (!isfinite(v) || v < t->lo || v > t->hi))
                return false;
        }
    }
    return true;
}

typedef struct parsed {
    int r;
    char *out, *err;
    size_t nout, nerr;
    char *bases[4];
    int npos, nrest;
} parsed;

static void parse(const cli_verb *v, int argc, char **argv, bool with_args, parsed *p)
{
    memset(p, 0, sizeof *p);
    cli c = {.prog = "devgate", .ctx = dg_ctx_new()};
    if (!c.ctx)
        abort();
    void *bases[4] = {NULL, NULL, NULL, NULL};
    int nt = 0;
    for (; nt < 4 && v->tables[nt]; nt++) {
        if (v->tables[nt] == cli_common_opts) {
            bases[nt] = &c;
            continue;
        }
        p->bases[nt] = calloc(1, BASE_BYTES);
        if (!p->bases[nt])
            abort();
        if (table_has(v->tables[nt], CLI_TRAIN))
            dg_train_opts_init((dg_train_opts *)(void *)p->bases[nt]);
        seed_fields(v->tables[nt], p->bases[nt]);
        bases[nt] = p->bases[nt];
    }
    char *pos[8];
    cli_args a = {.pos = pos, .max = 3};
    if (v->args && (strstr(v->args, "--") || strstr(v->args, "CMD")))
        a.max = -1;

    FILE *out = open_memstream(&p->out, &p->nout), *err = open_memstream(&p->err, &p->nerr);
    if (!out || !err)
        abort();
    FILE *keep_out = stdout, *keep_err = stderr;
    stdout = out;
    stderr = err;
    p->r = cli_parse(&c, v, argc, argv, bases, with_args ? &a : NULL);
    stdout = keep_out;
    stderr = keep_err;
    fclose(out);
    fclose(err);

    p->npos = a.npos;
    p->nrest = a.nrest;
    if (with_args && (a.npos > (a.max > 0 ? a.max : 0) || a.nrest > argc ||
                      (a.rest && (a.rest < argv || a.rest + a.nrest != argv + argc))))
        abort();
    for (int t = 0; t < nt; t++) {
        if (!p->bases[t])
            continue;
        if (p->r == CLI_PARSED && !fields_in_range(v->tables[t], p->bases[t]))
            abort();
        if (table_has(v->tables[t], CLI_TRAIN) &&
            dg_train_opts_check(c.ctx, (const dg_train_opts *)(void *)p->bases[t]) != DG_OK)
            abort();
    }
    dg_ctx_free(c.ctx);
}

static void parsed_free(parsed *p)
{
    free(p->out);
    free(p->err);
    for (int t = 0; t < 4; t++)
        free(p->bases[t]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[MAX_WORDS + 1];
    int argc = 0;
    for (char *w = text; argc < MAX_WORDS;) {
        char *nl = memchr(w, '\n', (size_t)(text + size - w));
        argv[argc++] = w;
        if (!nl)
            break;
        *nl = '\0';
        w = nl + 1;
    }
    argv[argc] = NULL;

    size_t nverbs = 0;
    while (cli_verbs[nverbs])
        nverbs++;
    const cli_verb *v = strcmp(argv[0], "devgate") == 0 ? &global : cli_find_verb(argv[0]);
    if (!v)
        v = cli_verbs[(unsigned char)argv[0][0] % nverbs];
    /* Most inputs take positionals as the verb would; odd lengths test a NULL cli_args. */
    bool with_args = v != &global && size % 2 == 0;

    parsed p, q;
    parse(v, argc, argv, with_args, &p);
    if (p.r != CLI_PARSED && p.r != CLI_HELP_SHOWN && p.r != CLI_BAD)
        abort();
    if (p.r == CLI_PARSED && p.nerr != 0)
        abort(); /* a parse that is taken says nothing */
    if (p.r == CLI_BAD) {
        /* One message, naming the verb: "devgate: VERB: ...\n". */
        size_t vl = strlen(v->name);
        if (p.nerr < 11 + vl || strncmp(p.err, "devgate: ", 9) != 0 ||
            strncmp(p.err + 9, v->name, vl) != 0 || p.err[9 + vl] != ':' ||
            p.err[p.nerr - 1] != '\n' || memchr(p.err, '\n', p.nerr) != p.err + p.nerr - 1)
            abort();
    }
    if (p.r == CLI_HELP_SHOWN) {
        char head[96];
        snprintf(head, sizeof head, "usage: devgate %s ", v->name);
        if (p.nout < strlen(head) || strncmp(p.out, head, strlen(head)) != 0)
            abort();
    }
    /* The same words parse the same way. */
    parse(v, argc, argv, with_args, &q);
    if (q.r != p.r || q.npos != p.npos || q.nrest != p.nrest || q.nerr != p.nerr ||
        (p.nerr && memcmp(p.err, q.err, p.nerr) != 0))
        abort();
    for (int t = 0; t < 4; t++)
        if (p.bases[t] && memcmp(p.bases[t], q.bases[t], BASE_BYTES) != 0)
            abort();
    parsed_free(&p);
    parsed_free(&q);
    free(text);
    return 0;
}
