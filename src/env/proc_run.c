/* Runs a program without a shell, with a time limit, capturing its stdout:
 * the one-call form of the process runner (core/proc.h) that host facts use. */
#include "env/proc_run.h"

#include "core/proc.h"

#include <errno.h>
#include <signal.h>

dg_status dg_run_capture(const char *const argv[], double timeout_s, char **out, size_t max_out,
                         int *exit_status, int *term_signal)
{
    int xs_local, sig_local;
    if (!exit_status)
        exit_status = &xs_local;
    if (!term_signal)
        term_signal = &sig_local;
    *exit_status = -1;
    *term_signal = 0;
    if (out)
        *out = NULL;
    dg_proc_opts o = {.argv = argv,
                      .out = {.kind = DG_PROC_CAPTURE, .cap = max_out},
                      .timeout_s = timeout_s > 0 ? timeout_s : 1e-3};
    if (max_out == 0)
        o.out.kind = DG_PROC_NULL;
    dg_proc_result r;
    dg_status st = dg_proc_run(NULL, &o, &r);
    if (!r.started) {
        if (st != DG_ERR_USAGE)
            *exit_status = 127;
        errno = r.spawn_errno;
        return st;
    }
    if (st == DG_ERR_NOMEM) {
        dg_proc_result_free(&r);
        errno = ENOMEM;
        return st;
    }
    char *data = r.out.data ? r.out.data : dg_calloc(1, 1);
    r.out.data = NULL;
    dg_proc_result_free(&r);
    if (!data) {
        errno = ENOMEM;
        return DG_ERR_NOMEM;
    }
    if (out)
        *out = data;
    else
        dg_free(data);
    *exit_status = r.exit_code;
    *term_signal = r.sig;
    if (st == DG_ERR_TIMEOUT) {
        *exit_status = -1;
        *term_signal = SIGKILL;
    }
    return st == DG_ERR_IO ? DG_OK : st;
}
