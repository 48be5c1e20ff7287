/* What the files of src/remote/ share: the session handle, the ssh transport
 * and the parsers of the node's answers (each testable without ssh). */
#ifndef DG_REMOTE_INT_H
#define DG_REMOTE_INT_H

#include "core/core.h"
#include "core/json.h"

#include <stdarg.h>

/* The protocol between `remote` and `__node`; bumped when either side's
 * words change. */
#define DG_REMOTE_PROTOCOL 3
#define DG_REMOTE_MAX_OPTS 32
#define DG_REMOTE_MAX_ARGS 256
/* The most bytes one answer of the node may hold (as a record file). */
#define DG_REMOTE_ANSWER_MAX ((size_t)64 << 20)
/* The node's exit statuses: the protocol's words for its failures. */
enum { DG_NODE_EXIT_USAGE = 2, DG_NODE_EXIT_DISK = 13, DG_NODE_EXIT_CORRUPT = 15 };

struct dg_remote {
    dg_ctx *ctx;
    dg_remote_config cfg;
    dg_remote_failure failure;
    char mux_dir[64]; /* our ssh control socket's folder, or "" */
    char mux_opt[128];
    cJSON *extra;     /* the record's "remote" section: warnings, shipped, bucket_checked */
    char verb[32];    /* the verb this session started, or "" */
    bool quiet_notes; /* a folder's files ship under one summary line */
};

/* The answer of one ssh call. */
typedef struct dg_ssh_answer {
    int rc;           /* ssh's exit status (255: ssh itself failed), -1 not started */
    char *out;        /* stdout (dg_free); "" when empty */
    char *err;        /* stderr (dg_free); "" when streamed */
    size_t out_bytes; /* what the node sent on stdout, counted past the cap */
    bool too_big;     /* stdout passed DG_REMOTE_ANSWER_MAX: the call was cut */
} dg_ssh_answer;

/* Runs `devgate __node [--cache C] ARGS` on the node; stdin from in_fd (-1:
 * none); stderr streamed through the progress callback when stream, else
 * kept. DG_ERR_IO only when ssh could not be started. */
dg_status dg_remote_ssh(dg_remote *r, const char *const *args, int in_fd, bool stream,
                        dg_ssh_answer *a);
void dg_ssh_answer_free(dg_ssh_answer *a);
/* The message of fmt on ctx as status st; st. */
dg_status dg_remote_failv(dg_ctx *ctx, dg_status st, const char *fmt, va_list ap) DG_PRINTF(3, 0);
/* Fails r's call: the failure kind on the handle, the message on the ctx. */
dg_status dg_remote_fail(dg_remote *r, dg_remote_failure f, const char *fmt, ...) DG_PRINTF(3, 4);
/* A failed ssh call (rc 255, or an answer over the cap) as its failure:
 * unreachable, authentication, or the node's devgate failing while doing. */
dg_status dg_remote_ssh_failure(dg_remote *r, const dg_ssh_answer *a, const char *doing);
/* The words one node request says its failures in: doing for ssh's own
 * failure ("starting the run"), where the disk filled (" while assembling a
 * folder", or ""), what failed ("the run could not start"), and the failure
 * DG_NODE_EXIT_CORRUPT stands for (DG_REMOTE_USAGE where it means nothing
 * of its own). */
typedef struct dg_node_words {
    const char *doing, *disk_while, *failed;
    dg_remote_failure corrupt;
} dg_node_words;
/* The answer a of a node request as its failure in the request's words w:
 * ssh's own (rc 255, an answer over the cap), a full disk on the node, or the
 * node's refusal with its exit status and last line; DG_OK when it exited 0. */
dg_status dg_remote_node_status(dg_remote *r, const dg_ssh_answer *a, const dg_node_words *w);
/* dg_remote_ssh of a request with no input whose answer is wanted only when
 * the node answered it (exit 0, under the cap); else the failure, a freed. */
dg_status dg_remote_ask(dg_remote *r, const char *const *args, const char *doing, dg_ssh_answer *a);
/* A line for the user or a warning (kept in remote.warnings) to the callback. */
void dg_remote_note(dg_remote *r, dg_remote_msg kind, const char *fmt, ...) DG_PRINTF(3, 4);
/* The last non-empty line of s (NULL: "") into buf. */
void dg_remote_last_line(const char *s, char *buf, size_t len);

/* Ships --data's files and folders: spec rewritten to the node's cached
 * paths into *out (dg_free); each shipped item added to shipped. */
dg_status dg_remote_ship_data(dg_remote *r, const char *spec, cJSON *shipped, char **out);
/* Ships the files the command after "--" names under the working folder (its
 * words, and the values of --opt=PATH) as one tree into the node's cache, so
 * the run finds them at the same relative paths; its id into id ("" when the
 * command names none). */
dg_status dg_remote_ship_command(dg_remote *r, int argc, const char *const *argv, char id[65]);
/* Compares the input bucket of VERB ARGS here and on the node (node_argv: the
 * same words with the node's paths) by a one-step probe. */
dg_status dg_remote_bucket_check(dg_remote *r, int argc, const char *const *argv,
                                 const char *const *node_argv);
/* Runs this devgate with args (no shell, --no-ledger --json --quiet), stdout
 * into *out (dg_free), the last line of its stderr into err; its exit status,
 * or -1 when it could not start. */
int dg_remote_run_self(const char *const *args, char **out, char *err, size_t errlen);
/* The bucket member of a record's text (cJSON_Delete), or NULL. */
cJSON *dg_remote_bucket_of(const char *text);
/* dg_bucket_differs over parsed buckets. */
void dg_remote_bucket_differs(const cJSON *a, const cJSON *b, char *buf, size_t len);

/* ---- the node's answers, parsed (tests/unit/test_remote.c) ---- */

/* The node's info answer: its protocol into *protocol (-1 when the text is
 * no info answer at all), the parsed object into *info (cJSON_Delete). */
void dg_remote_parse_info(const char *text, int *protocol, cJSON **info);
/* A have/put/tree answer's state ("ok", "missing", "tampered"; "" when
 * unreadable) and path (NULL when none), both into the caller's buffers. */
bool dg_remote_parse_state(const char *text, char *state, size_t slen, char *path, size_t plen);
/* A fetch answer checked against what was asked: a verb of devgate's own
 * words, the record's own verb the same; false with the reason in why. */
bool dg_remote_parse_fetch(const char *text, const char *asked_verb, cJSON **ans, char *why,
                           size_t wlen);
/* A list answer: a JSON array of run tokens only, printed anew (dg_free);
 * NULL when it is anything else. */
char *dg_remote_parse_list(const char *text);
/* A fetched run's record (takes rec) with its "remote" section: extra (this
 * session's warnings, shipped files, bucket check; copied), the node's host
 * name, the token and the node's identity (takes node_info, may be NULL),
 * every string valid UTF-8; printed (dg_free), NULL when out of memory. */
char *dg_remote_record_with(cJSON *rec, const cJSON *extra, const char *host, const char *token,
                            cJSON *node_info);
/* A tokens list: an array of well-formed tokens only. */
bool dg_remote_token_ok(const char *s);
/* A relative path of no empty, ".", ".." or hidden component. */
bool dg_remote_rel_ok(const char *s);
/* One line of a folder's manifest: "SHA SIZE RELPATH" with a 64-hex SHA and a
 * relative path of no ".", ".." or hidden component; rel points into line. */
bool dg_remote_manifest_line(const char *line, char sha[65], unsigned long long *size,
                             const char **rel);

#endif
