/* devgate remote HOST VERB [options]: one named node over the system's OpenSSH
 * client, through the library's dg_remote_* calls (src/remote/): the node
 * check, the --data files and folders shipped content-addressed into the
 * node's cache, the input bucket compared on both sides, the verb run detached
 * on the node, its record fetched. This file parses the options, prints,
 * enters the record into the local ledger and maps failures to exit statuses;
 * the node side is the hidden verb `__node`. docs/team.md. */
#include "cli.h"

#include <stddef.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SSH_OPTS 32

/* Exit statuses of `remote` (docs/cli.md). */
enum {
    EXIT_REMOTE_UNREACHABLE = 10,
    EXIT_REMOTE_AUTH = 11,
    EXIT_REMOTE_DEVGATE = 12, /* missing, too old, or a protocol we cannot read */
    EXIT_REMOTE_DISK = 13,
    EXIT_REMOTE_LOST = 14,   /* connection lost mid-run; the run goes on on the node */
    EXIT_REMOTE_BUCKET = 15, /* input bucket differs, or a file arrived corrupt */
};

typedef struct remote {
    cli *c;
    const char *opts[MAX_SSH_OPTS];
    int nopts;
    const char *devgate; /* on the node */
    const char *cache;   /* on the node; NULL: its default */
    const char *host;
    dg_remote *r;
} remote;

static int failure_exit(dg_remote_failure f)
{
    switch (f) {
    case DG_REMOTE_OK: return EXIT_PASS;
    case DG_REMOTE_UNREACHABLE: return EXIT_REMOTE_UNREACHABLE;
    case DG_REMOTE_AUTH: return EXIT_REMOTE_AUTH;
    case DG_REMOTE_DEVGATE: return EXIT_REMOTE_DEVGATE;
    case DG_REMOTE_DISK: return EXIT_REMOTE_DISK;
    case DG_REMOTE_LOST: return EXIT_REMOTE_LOST;
    case DG_REMOTE_BUCKET: return EXIT_REMOTE_BUCKET;
    case DG_REMOTE_NO_RUN: return EXIT_FAIL;
    case DG_REMOTE_USAGE:
    case DG_REMOTE_RUN_FAILED: break;
    }
    return EXIT_USAGE;
}

/* The failed call's message and exit status. */
static int remote_failed(remote *rm)
{
    cli_error("%s", dg_errmsg(rm->c->ctx));
    return failure_exit(dg_remote_failure_of(rm->r));
}

/* The library's progress: notes unless --quiet, warnings always, the node's
 * stream as it comes (through the terminal cleaner). */
static void on_progress(dg_remote_msg kind, const char *text, size_t len, void *user)
{
    remote *rm = user;
    if (kind == DG_REMOTE_STREAM) {
        fwrite(text, 1, len, stderr);
        fflush(stderr);
    } else if (kind == DG_REMOTE_WARNING) {
        fprintf(stderr, "devgate: remote %s: warning: %.*s\n", rm->host, (int)len, text);
    } else if (!rm->c->quiet) {
        fprintf(stderr, "devgate: remote %s: %.*s\n", rm->host, (int)len, text);
    }
}

/* The local run's bucket for --like RUN_ID (from the local ledger) as JSON. */
static char *like_bucket_of(cli *c, const char *id, int *rc)
{
    char *def = c->ledger_path ? NULL : dg_ledger_default_path();
    const char *path = c->ledger_path ? c->ledger_path : def;
    dg_ledger *lg = NULL;
    char *json = NULL;
    dg_status st = path ? dg_ledger_open(c->ctx, path, 0, &lg) : DG_ERR_USAGE;
    if (st == DG_OK)
        st = dg_ledger_show(c->ctx, lg, id, &json);
    dg_ledger_close(lg);
    dg_string_free(def);
    cJSON *e = st == DG_OK ? cJSON_Parse(json) : NULL;
    dg_string_free(json);
    const cJSON *bk = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "record"), "bucket");
    char *text = cJSON_IsObject(bk) ? cJSON_PrintUnformatted(bk) : NULL;
    cJSON_Delete(e);
    if (!text) {
        cli_error("remote: --like %s: %s", id,
                  st != DG_OK ? dg_errmsg(c->ctx) : "that run has no input bucket");
        *rc = EXIT_USAGE;
    }
    return text;
}

/* Fetches a finished run, enters it into the local ledger with the node's
 * identity, marks it collected there. */
static int collect_one(remote *rm, const char *token, const char *like_bucket)
{
    dg_remote_fetched f;
    if (dg_remote_fetch(rm->r, token, like_bucket, &f) != DG_OK) {
        int rc = remote_failed(rm);
        if (dg_remote_failure_of(rm->r) == DG_REMOTE_RUN_FAILED && f.exit_status)
            rc = f.exit_status;
        return rc;
    }
    if (f.running) {
        if (!rm->c->quiet)
            printf("remote %s: run %s is still running; collect it later\n", rm->host, token);
        return EXIT_PASS;
    }
    char *run_id = NULL;
    int rrc = cli_record(rm->c, f.verb, f.record, f.exit_status, &run_id);
    if (rm->c->json) {
        cJSON *rec = cJSON_Parse(f.record);
        cli_print_json(rec, run_id);
        cJSON_Delete(rec);
    } else if (!rm->c->quiet) {
        printf("remote %s: run %s (%s) exit %d%s%s\n", rm->host, token, f.verb, f.exit_status,
               run_id ? " · recorded as " : "", run_id ? run_id : "");
    }
    dg_string_free(f.record);
    if (rrc == f.exit_status)
        dg_remote_mark(rm->r, token);
    dg_string_free(run_id);
    return rrc;
}

static int remote_run(remote *rm, int argc, char **argv, const char *like, bool detach)
{
    int rc = EXIT_PASS;
    char *like_bk = like ? like_bucket_of(rm->c, like, &rc) : NULL;
    char token[48];
    if (rc)
        return rc;
    if (dg_remote_check(rm->r) != DG_OK ||
        dg_remote_start(rm->r, argc, (const char *const *)argv, token) != DG_OK) {
        free(like_bk);
        return remote_failed(rm);
    }
    if (detach) {
        printf("remote %s: run %s started; 'devgate remote %s collect %s' fetches it\n", rm->host,
               token, rm->host, token);
        free(like_bk);
        return EXIT_PASS;
    }
    /* progress streams to our stderr until the run ends on the node */
    rc =
        dg_remote_wait(rm->r, token) == DG_OK ? collect_one(rm, token, like_bk) : remote_failed(rm);
    free(like_bk);
    return rc;
}

static int remote_collect(remote *rm, const char *token)
{
    if (dg_remote_check(rm->r) != DG_OK)
        return remote_failed(rm);
    if (token)
        return collect_one(rm, token, NULL);
    char *list = NULL;
    if (dg_remote_list(rm->r, &list) != DG_OK)
        return remote_failed(rm);
    cJSON *arr = cJSON_Parse(list);
    dg_string_free(list);
    int rc = EXIT_PASS, n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, arr)
    {
        int one = collect_one(rm, t->valuestring, NULL);
        if (one && !rc)
            rc = one;
        n++;
    }
    if (!rc && n == 0 && !rm->c->quiet)
        printf("remote %s: no finished runs to collect\n", rm->host);
    cJSON_Delete(arr);
    return rc;
}

/* `remote HOST argv WORDS...`: the words as the node received them. */
static int remote_argv(remote *rm, int argc, char **argv)
{
    char *out = NULL;
    if (dg_remote_argv(rm->r, argc, (const char *const *)argv, &out) != DG_OK)
        return remote_failed(rm);
    fputs(out, stdout);
    dg_string_free(out);
    return EXIT_PASS;
}

void cli_bucket_differs(const cJSON *a, const cJSON *b, char *buf, size_t len)
{
    char *ta = a ? cJSON_PrintUnformatted(a) : NULL, *tb = b ? cJSON_PrintUnformatted(b) : NULL;
    dg_bucket_differs(ta, tb, buf, len);
    cJSON_free(ta);
    cJSON_free(tb);
}

/* -o OPT (repeatable): appended to the remote's ssh options. */
static const char *add_ssh_opt(const cli_opt *o, const char *value, void *field)
{
    (void)o;
    remote *r = field;
    if (!value[0] || r->nopts >= MAX_SSH_OPTS)
        return "an ssh option such as Port=2222 (at most 32)";
    r->opts[r->nopts++] = value;
    return NULL;
}

typedef struct remote_args {
    const char *like;
    bool detach;
} remote_args;

const cli_opt cli_remote_opts[] = {
    {CLI_FUNC, "--ssh-option", "-o", "OPT", NULL, NULL,
     "passed to ssh as -o OPT (repeatable; after BatchMode=yes)", 0, 0, 0, add_ssh_opt, NULL, NULL},
    {CLI_STR, "--devgate", NULL, "PATH", "devgate", NULL, "devgate on the node",
     offsetof(remote, devgate), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_STR, "--cache", NULL, "DIR", "~/.cache/devgate on the node", NULL,
     "the node's cache folder (shipped input, runs)", offsetof(remote, cache), 0, 0, NULL, NULL,
     NULL},
    CLI_OPTS_END,
};

const cli_opt cli_remote_run_opts[] = {
    {CLI_STR, "--like", NULL, "RUN_ID", NULL, NULL,
     "refuse the result unless its input bucket equals this local run's",
     offsetof(remote_args, like), 0, 0, cli_nonempty, NULL, NULL},
    {CLI_FLAG, "--detach", NULL, NULL, NULL, NULL, "return once the run started; collect it later",
     offsetof(remote_args, detach), 0, 0, NULL, NULL, NULL},
    CLI_OPTS_END,
};

/* The verb's own words checked here, so a typo or an option the verb does not
 * take is refused before anything is shipped or started on the node. */
static int check_verb(cli *c, int argc, char **argv)
{
    const char *verb = argv[0];
    if (strcmp(verb, "argv") == 0)
        return EXIT_PASS;
    if (c->no_ledger) {
        cli_error("remote: --no-ledger: the returned record enters the local ledger");
        return EXIT_USAGE;
    }
    if (strcmp(verb, "collect") == 0)
        return EXIT_PASS;
    const cli_verb *v = cli_find_verb(verb);
    if (!v || v->hidden || v == &cli_verb_remote) {
        char shown[64];
        cli_error("remote: '%s' is no verb a node runs (devgate --help lists them)",
                  cli_cell(shown, sizeof shown, verb));
        return EXIT_USAGE;
    }
    return cli_check_words(v, argc, argv) == CLI_PARSED ? EXIT_PASS : EXIT_USAGE;
}

int cmd_remote(cli *c, int argc, char **argv)
{
    remote rm = {.c = c, .devgate = "devgate"};
    remote_args ra = {NULL, false};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        int pr =
            cli_parse_one(c, &cli_verb_remote, argc, argv, &i, (void *const[]){&rm, &ra, c}, NULL);
        if (pr != CLI_PARSED)
            return cli_parse_exit(pr);
    }
    rm.host = i < argc ? argv[i++] : NULL;
    if (!rm.host || i >= argc) {
        cli_error("remote: use 'remote [options] HOST VERB [options]', 'remote HOST collect "
                  "[TOKEN]' or 'remote HOST argv WORDS...' (devgate remote --help)");
        return EXIT_USAGE;
    }
    const char *verb = argv[i];
    int rc = check_verb(c, argc - i, argv + i);
    if (rc)
        return rc;
    const char *ssh = getenv("DEVGATE_SSH");
    dg_remote_config cfg = {.host = rm.host,
                            .ssh_options = rm.opts,
                            .n_ssh_options = rm.nopts,
                            .ssh = ssh && ssh[0] ? ssh : NULL,
                            .devgate = rm.devgate,
                            .cache = rm.cache,
                            .progress = on_progress,
                            .user = &rm};
    if (dg_remote_open(c->ctx, &cfg, &rm.r) != DG_OK)
        return cli_fail_status(c, DG_ERR_USAGE, "remote");
    if (strcmp(verb, "collect") == 0)
        rc = remote_collect(&rm, i + 1 < argc ? argv[i + 1] : NULL);
    else if (strcmp(verb, "argv") == 0)
        rc = remote_argv(&rm, argc - i - 1, argv + i + 1);
    else
        rc = remote_run(&rm, argc - i, argv + i, ra.like, ra.detach);
    dg_remote_close(rm.r);
    return rc;
}

/* ---- the node side: devgate __node [--cache DIR] REQUEST ... ---------------- */

/* wait's stream: the run's progress log onto our stderr as it is. */
static void node_stream(dg_remote_msg kind, const char *text, size_t len, void *user)
{
    (void)kind;
    (void)user;
    fflush(stderr);
    while (len > 0) {
        ssize_t k = write(2, text, len);
        if (k <= 0)
            break;
        text += k;
        len -= (size_t)k;
    }
}

int cmd_node(cli *c, int argc, char **argv)
{
    dg_remote_node_req req = {.in_fd = 0, .progress = node_stream};
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "--cache") == 0) {
        req.cache = argv[i + 1];
        i += 2;
    }
    cli_term_machine_output(); /* the answers are JSON for the other side */
    req.argc = argc - i;
    req.argv = (const char *const *)argv + i;
    char *answer = NULL;
    dg_remote_failure f = DG_REMOTE_OK;
    if (dg_remote_node(c->ctx, &req, &answer, &f) != DG_OK) {
        cli_error("%s", dg_errmsg(c->ctx));
        return f == DG_REMOTE_DISK     ? EXIT_REMOTE_DISK
               : f == DG_REMOTE_BUCKET ? EXIT_REMOTE_BUCKET
               : f == DG_REMOTE_NO_RUN ? EXIT_FAIL
                                       : EXIT_USAGE;
    }
    if (answer)
        puts(answer);
    dg_string_free(answer);
    return EXIT_PASS;
}
