/* Internal to the host-facts collector (src/env/sysinfo*.c): the JSON
 * builder with one out-of-memory flag, the small /proc and /sys readers, and
 * one filler per source, each adding its member to the sysinfo object. */
#ifndef DG_SYSINFO_H
#define DG_SYSINFO_H

#include "core/core.h"
#include "core/json.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct sb {
    bool oom;
    bool cmdlines; /* other processes' arguments kept (dg_set_env_cmdlines) */
    int self_pid;  /* the devgate process the proof is for ("self") */
} sb;

/* Adds item under key (deleting it if that fails); returns it or NULL. */
static inline cJSON *put(sb *b, cJSON *obj, const char *key, cJSON *item)
{
    if (!obj || !item) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    return item;
}

/* Appends item to an array (deleting it if that fails); returns it or NULL. */
static inline cJSON *push(sb *b, cJSON *arr, cJSON *item)
{
    if (!arr || !item) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    if (!cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        b->oom = true;
        return NULL;
    }
    return item;
}

/* A string item cleaned of control characters and made valid UTF-8
 * (dg_utf8_clean); null for NULL s. */
static inline cJSON *clean_str(const char *s)
{
    if (!s)
        return cJSON_CreateNull();
    size_t len = strlen(s), n = 3 * len + 1; /* U+FFFD for each invalid byte at most */
    char *c = dg_malloc(n);
    if (!c)
        return NULL;
    dg_utf8_clean(c, n, s, len, true);
    cJSON *item = cJSON_CreateString(c);
    dg_free(c);
    return item;
}

static inline void put_str(sb *b, cJSON *obj, const char *key, const char *s)
{
    put(b, obj, key, clean_str(s));
}

static inline void put_bool(sb *b, cJSON *obj, const char *key, bool v)
{
    put(b, obj, key, cJSON_CreateBool(v));
}

/* A bool that may be unknown: tri < 0 writes null. */
static inline void put_tri(sb *b, cJSON *obj, const char *key, int tri)
{
    put(b, obj, key, tri < 0 ? cJSON_CreateNull() : cJSON_CreateBool(tri > 0));
}

static inline void put_num(sb *b, cJSON *obj, const char *key, double v)
{
    put(b, obj, key, cJSON_CreateNumber(v));
}

static inline void put_metric(sb *b, cJSON *obj, const char *key, double v, bool valid,
                              const char *unit)
{
    put(b, obj, key, dg_json_metric(v, valid, unit));
}

static inline cJSON *put_obj(sb *b, cJSON *obj, const char *key)
{
    return put(b, obj, key, cJSON_CreateObject());
}

static inline cJSON *put_arr(sb *b, cJSON *obj, const char *key)
{
    return put(b, obj, key, cJSON_CreateArray());
}

static inline void push_str(sb *b, cJSON *arr, const char *s)
{
    push(b, arr, clean_str(s));
}

/* The trimmed content of a small file (dg_malloc'd), or NULL. */
char *dg_si_read_value(const char *path);
/* Reads "Key:   value" lines: the value of the first line starting with key
 * followed by optional blanks and ':' into dst (trimmed); false if none. */
bool dg_si_field_of(const char *text, const char *key, char *dst, size_t n);
/* True when the blank-separated word list contains word. */
bool dg_si_has_word(const char *list, const char *word);

/* ---- the text parsers, exposed for tests/fuzz/fuzz_procfs.c ---- */

typedef struct bm_entry {
    bool enabled;
    char interp[256];
    char flags[32];
    long offset;
    unsigned char magic[128], mask[128];
    size_t mlen;
    bool has_magic;
} bm_entry;

/* Parses one /proc/sys/fs/binfmt_misc entry file. */
void dg_si_bm_parse(const char *text, bm_entry *e);
/* Architecture an ELF-magic entry hands to its interpreter, or NULL. */
const char *dg_si_bm_target_arch(const bm_entry *e);
/* True when the entry's magic (under its mask) matches the header bytes. */
bool dg_si_bm_matches(const bm_entry *e, const unsigned char *hdr, size_t hlen);

/* One process of a /proc pass. */
typedef struct psamp {
    int pid;
    unsigned long long start, ticks, rss_pages;
    double cpu;
    bool cpu_ok;
    char comm[64];
} psamp;

/* Parses /proc/PID/stat text (NUL-terminated) into p; false when malformed. */
bool dg_si_parse_stat(const char *buf, int pid, psamp *p);
/* Physical cores from /proc/cpuinfo (physical id, core id) pairs; 0 if unknown. */
size_t dg_si_cores_from_cpuinfo(const char *cpuinfo);
/* A /proc/meminfo value in bytes; false when absent. */
bool dg_si_meminfo_bytes(const char *text, const char *key, double *out);
/* avg10 and avg60 of the "some" or "full" line of /proc/pressure text; false when absent. */
bool dg_si_psi_avgs(const char *psi, const char *which, double *a10, double *a60);
/* The cgroup v2 path and the v1 memory controller's path from
 * /proc/self/cgroup text (modified in place). */
void dg_si_cgroup_paths(char *cg, char *v2path, size_t n2, bool *v2, char *v1path, size_t n1,
                        bool *v1);
/* NAME (PRETTY_NAME first) and VERSION_ID of os-release text (modified in place). */
void dg_si_os_release(char *rel, char *name, size_t nn, char *version, size_t vn);

/* Fills "arch"; host_arch gets the normalised kernel machine (sysinfo_arch.c). */
void dg_si_arch(sb *b, cJSON *root, char *host_arch, size_t host_len);
/* Fills "virtualization" (sysinfo_virt.c). */
void dg_si_virtualization(sb *b, cJSON *root, const char *hostname, const char *host_arch);
/* Fills "os" (sysinfo_os.c). */
void dg_si_os(sb *b, cJSON *root);
/* Fills "cpu" (sysinfo_cpu.c). */
void dg_si_cpu(sb *b, cJSON *root);
/* Fills "load" (sysinfo_cpu.c). */
void dg_si_load(sb *b, cJSON *root);
/* Fills "memory" (sysinfo_memory.c). */
void dg_si_memory(sb *b, cJSON *root);
/* Fills "git" for the repository around cwd (sysinfo_git.c). */
void dg_si_git(sb *b, cJSON *root, const char *cwd);
/* Fills "processes" (sysinfo_proc.c). */
void dg_si_processes(sb *b, cJSON *root);
/* Fills "gpu_processes" (sysinfo_gpu.c). */
void dg_si_gpu_processes(sb *b, cJSON *root);
#endif
