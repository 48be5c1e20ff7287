/* The OpenCL program binary cache (ocl_cache.h). A cache file is
 *   "DGOCLBIN1\n", the binary's length (8 bytes, little-endian), the binary,
 *   the SHA-256 of the binary (32 bytes)
 * named by the hex SHA-256 of its key. The key holds what makes a binary
 * valid: the boot (a driver updated in place takes a reboot to load), the
 * platform's name and version, the device's name, version and driver
 * version, the build options and the source. Writes are atomic (a reader
 * never sees half a file); a file that fails its checksum or that the
 * driver refuses is built from source and written again. */
#include "ocl_cache.h"

#include "core/core.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "DGOCLBIN1\n"
#define MAGIC_LEN 10
#define BIN_MAX ((size_t)256 << 20)

/* The cache folder, made when missing; false when it is off or not ours alone. */
static bool cache_dir(char *buf, size_t len)
{
    const char *env = getenv("DEVGATE_OPENCL_CACHE");
    if (env && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0))
        return false;
    int n;
    if (env && *env) {
        n = snprintf(buf, len, "%s", env);
    } else {
        const char *tmp = getenv("TMPDIR");
        n = snprintf(buf, len, "%s/devgate-cache-%u/opencl", tmp && *tmp ? tmp : "/tmp",
                     (unsigned)getuid());
    }
    if (n <= 0 || (size_t)n >= len)
        return false;
    if (!dg_make_dirs(buf) && errno != EEXIST)
        return false;
    /* Its parent too when we made both (devgate-cache-UID): another user's
     * folder there must not hand us binaries to run. */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", buf);
    char *slash = strrchr(parent, '/');
    struct stat st, pst;
    if (lstat(buf, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
        return false;
    if ((st.st_mode & 077) && chmod(buf, 0700) != 0)
        return false;
    if (!env && slash && slash != parent) {
        *slash = '\0';
        if (lstat(parent, &pst) != 0 || !S_ISDIR(pst.st_mode) || pst.st_uid != getuid())
            return false;
        if ((pst.st_mode & 077) && chmod(parent, 0700) != 0)
            return false;
    }
    return true;
}

typedef struct {
    EVP_MD_CTX *md;
    bool ok;
} hasher;

static void feed(hasher *h, const void *p, size_t n)
{
    h->ok = h->ok && EVP_DigestUpdate(h->md, p, n) == 1;
    /* a separator, so ("ab", "c") and ("a", "bc") differ */
    h->ok = h->ok && EVP_DigestUpdate(h->md, "\0", 1) == 1;
}

static void feed_info(hasher *h, bool platform, void *obj, cl_uint what)
{
    char v[1024] = "";
    size_t n = 0;
    cl_int e = platform ? clGetPlatformInfo(obj, what, sizeof v - 1, v, &n)
                        : clGetDeviceInfo(obj, what, sizeof v - 1, v, &n);
    if (e != CL_SUCCESS)
        n = 0;
    feed(h, v, n < sizeof v ? n : sizeof v - 1);
}

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

bool dg_ocl_cache_path(cl_platform_id platform, cl_device_id device, const char *src,
                       const char *opts, char *buf, size_t len)
{
    char dir[4000];
    if (!src || !cache_dir(dir, sizeof dir))
        return false;
    char boot[64] = "";
    dg_read_small("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    hasher h = {EVP_MD_CTX_new(), true};
    h.ok = h.md && EVP_DigestInit_ex(h.md, EVP_sha256(), NULL) == 1;
    feed(&h, "devgate opencl cache 1", 22);
    feed(&h, boot, strlen(boot));
    feed_info(&h, true, platform, CL_PLATFORM_NAME);
    feed_info(&h, true, platform, CL_PLATFORM_VERSION);
    feed_info(&h, false, device, CL_DEVICE_NAME);
    feed_info(&h, false, device, CL_DEVICE_VERSION);
    feed_info(&h, false, device, CL_DRIVER_VERSION);
    feed(&h, opts ? opts : "", opts ? strlen(opts) : 0);
    feed(&h, src, strlen(src));
    unsigned char d[32];
    unsigned int dn = 0;
    h.ok = h.ok && EVP_DigestFinal_ex(h.md, d, &dn) == 1 && dn == 32;
    EVP_MD_CTX_free(h.md);
    if (!h.ok)
        return false;
    char name[65];
    hex(d, 32, name);
    int n = snprintf(buf, len, "%s/%s.bin", dir, name);
    return n > 0 && (size_t)n < len;
}

static bool sha256(const void *p, size_t n, unsigned char out[32])
{
    unsigned int dn = 0;
    return EVP_Digest(p, n, out, &dn, EVP_sha256(), NULL) == 1 && dn == 32;
}

/* The binary a cache file holds, checked; NULL when absent or damaged. */
static unsigned char *load(const char *path, size_t *n)
{
    size_t len = 0;
    char *f = dg_read_file(path, BIN_MAX + MAGIC_LEN + 8 + 32, &len);
    if (!f)
        return NULL;
    uint64_t bl = 0;
    if (len >= MAGIC_LEN + 8 + 32 && memcmp(f, MAGIC, MAGIC_LEN) == 0)
        for (int i = 7; i >= 0; i--)
            bl = bl << 8 | (unsigned char)f[MAGIC_LEN + i];
    unsigned char sum[32];
    unsigned char *bin = NULL;
    if (bl > 0 && bl <= BIN_MAX && len == MAGIC_LEN + 8 + bl + 32 &&
        sha256(f + MAGIC_LEN + 8, (size_t)bl, sum) &&
        memcmp(sum, f + MAGIC_LEN + 8 + bl, 32) == 0 && (bin = dg_malloc((size_t)bl)) != NULL) {
        memcpy(bin, f + MAGIC_LEN + 8, (size_t)bl);
        *n = (size_t)bl;
    }
    dg_free(f);
    return bin;
}

/* Stores the built program's binary for device (best effort: a cache that
 * cannot be written only costs the next process a build from source). */
static void store(cl_program p, const char *path)
{
    size_t bl = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bl, &bl, NULL) != CL_SUCCESS ||
        bl == 0 || bl > BIN_MAX)
        return;
    size_t total = MAGIC_LEN + 8 + bl + 32;
    unsigned char *f = dg_malloc(total);
    if (!f)
        return;
    unsigned char *bin = f + MAGIC_LEN + 8;
    memcpy(f, MAGIC, MAGIC_LEN);
    for (int i = 0; i < 8; i++)
        f[MAGIC_LEN + i] = (unsigned char)((uint64_t)bl >> (8 * i));
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS &&
        sha256(bin, bl, bin + bl))
        dg_file_write_atomic(NULL, path, f, total);
    dg_free(f);
}

static cl_program from_binary(cl_context context, cl_device_id device, const char *path,
                              const char *opts)
{
    size_t n = 0;
    unsigned char *bin = load(path, &n);
    if (!bin)
        return NULL;
    cl_int e = CL_SUCCESS, bs = CL_SUCCESS;
    const unsigned char *b = bin;
    cl_program p = clCreateProgramWithBinary(context, 1, &device, &n, &b, &bs, &e);
    dg_free(bin);
    if (p && (e != CL_SUCCESS || bs != CL_SUCCESS ||
              clBuildProgram(p, 1, &device, opts, NULL, NULL) != CL_SUCCESS)) {
        clReleaseProgram(p);
        p = NULL;
    }
    return p;
}

cl_program dg_ocl_program_build(cl_context context, cl_platform_id platform, cl_device_id device,
                                const char *src, const char *opts, bool use, cl_int *err,
                                dg_ocl_origin *origin)
{
    char path[4096];
    bool cached = use && dg_ocl_cache_path(platform, device, src, opts, path, sizeof path);
    *origin = DG_OCL_FROM_SOURCE;
    *err = CL_SUCCESS;
    cl_program p = cached ? from_binary(context, device, path, opts) : NULL;
    if (p) {
        *origin = DG_OCL_FROM_CACHE;
        return p;
    }
    p = clCreateProgramWithSource(context, 1, &src, NULL, err);
    if (!p)
        return NULL;
    *err = clBuildProgram(p, 1, &device, opts, NULL, NULL);
    if (*err == CL_SUCCESS && cached)
        store(p, path);
    return p;
}
