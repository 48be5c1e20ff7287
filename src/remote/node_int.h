/* What the node side's files share (node.c: the requests, node_tree.c: a
 * folder assembled from the cache, node_answer.c: the answers both give;
 * node.c calls node_tree.c, both call node_answer.c, never back). */
#ifndef DG_REMOTE_NODE_INT_H
#define DG_REMOTE_NODE_INT_H

#include "remote/remote_int.h"

typedef struct dg_node {
    dg_ctx *ctx;
    const char *cache;
    const dg_remote_node_req *req;
    dg_remote_failure failure;
    char *answer; /* dg_malloc */
} dg_node;

/* Fails the request: the failure on n, the message on its ctx. */
dg_status dg_node_fail(dg_node *n, dg_remote_failure f, const char *fmt, ...) DG_PRINTF(3, 4);
/* DG_REMOTE_DISK when errno says the disk is full, else DG_REMOTE_USAGE. */
dg_remote_failure dg_node_errno_failure(int e);
/* Takes o (owned) as n's answer, printed. */
void dg_node_answer(dg_node *n, cJSON *o);
/* {"state": state, "path": path (when not NULL)} as n's answer. */
void dg_node_state_answer(dg_node *n, const char *state, const char *path);
/* tree ID: the folder of the manifest on the request's input assembled from
 * the cache (docs/team.md). */
dg_status dg_node_tree(dg_node *n, const char *id);

#endif
