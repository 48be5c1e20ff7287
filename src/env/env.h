/* Pieces of the environment proof; src/steps/env.c assembles them. */
#ifndef DG_ENV_H
#define DG_ENV_H

#include "core/core.h"
#include "core/json.h"

/* Host facts: arch and translation, virtualisation, OS, CPU, memory, swap,
 * pressure, load, git state of cwd (NULL: "."), hostname, timestamp, busiest
 * processes, NVIDIA GPU processes through NVML. Never fails: a fact that
 * cannot be read is recorded as not reported. NULL only when out of memory. */
cJSON *dg_env_sysinfo(dg_ctx *ctx, const char *cwd, int self_pid);

/* Only the "virtualization" member of dg_env_sysinfo (cheap: no process
 * sampling), for the gate to name a VM or container hiding a device. NULL only
 * when out of memory. */
cJSON *dg_env_virtualization(void);

/* Inspects a Python interpreter: binary architecture against host_arch,
 * extension modules of another architecture under its site-packages, and (by
 * running it once within timeout_s) its version and torch's device answers.
 * A missing, hung or crashing interpreter is reported in the object, not as a
 * failure. NULL only when out of memory. */
cJSON *dg_env_python(dg_ctx *ctx, const char *python, double timeout_s, const char *host_arch);
#endif
