/* The node's answers to a request (node.c and node_tree.c both answer
 * through these): a failure with the protocol's status, a JSON answer, a
 * state answer. */
#include "remote/node_int.h"

#include <errno.h>

dg_status dg_node_fail(dg_node *n, dg_remote_failure f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    n->failure = f;
    dg_status st = dg_remote_failv(n->ctx, DG_ERR_UNAVAILABLE, fmt, ap);
    va_end(ap);
    return st;
}

dg_remote_failure dg_node_errno_failure(int e)
{
    return e == ENOSPC || e == EDQUOT ? DG_REMOTE_DISK : DG_REMOTE_USAGE;
}

void dg_node_answer(dg_node *n, cJSON *o)
{
    n->answer = dg_json_print(o);
    cJSON_Delete(o);
}

void dg_node_state_answer(dg_node *n, const char *state, const char *path)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "state", state);
    if (path)
        cJSON_AddStringToObject(o, "path", path);
    dg_node_answer(n, o);
}
