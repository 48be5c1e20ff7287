/* Runs a program without a shell, with a time limit, capturing its stdout. */
#ifndef DG_PROC_RUN_H
#define DG_PROC_RUN_H

#include "devgate.h"

/* Runs argv[0] (searched in PATH) with argv, stdin and stderr on /dev/null and
 * stdout captured, in its own process group; kills the whole group with
 * SIGKILL once timeout_s has passed. *out gets at most max_out bytes of output
 * plus a NUL (dg_malloc'd; set on DG_OK and DG_ERR_TIMEOUT, else NULL); further
 * output is read and dropped. *exit_status gets the exit code (-1 when killed
 * by a signal or unknown), *term_signal the terminating signal (0 if none);
 * either pointer may be NULL. DG_OK when the program ran and ended, whatever
 * its exit code; DG_ERR_TIMEOUT when it was killed for time; DG_ERR_NOT_FOUND
 * when the program could not be found, DG_ERR_IO when it could not be started
 * otherwise (both set *exit_status to 127 and leave the cause in errno);
 * DG_ERR_USAGE for an empty argv; DG_ERR_NOMEM. */
dg_status dg_run_capture(const char *const argv[], double timeout_s, char **out, size_t max_out,
                         int *exit_status, int *term_signal);
#endif
