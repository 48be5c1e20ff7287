/* The OpenCL program binary cache (src/backend/opencl/ocl_cache.c) on the
 * first OpenCL device here (PoCL's CPU device on the CI runners): a first
 * build from source stores the binary, the next comes from the cache and
 * runs; a damaged or truncated file, another source, the cache off, a folder
 * another user owns or a link in its place all build from source; a source
 * that fails to build stores nothing. A small kernel: PoCL compiles every
 * kernel to machine code when its binary is asked for. */
#include "core/core.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef DG_HAVE_OPENCL
#include "backend/opencl/ocl_cache.h"

#define OPTS "-cl-std=CL1.2"
static const char *SRC = "__kernel void k(__global float *x) { x[get_global_id(0)] = 42.0f; }\n";
static const char *SRC2 = "__kernel void k(__global float *x) { x[get_global_id(0)] = 7.0f; }\n";
static const char *BAD = "__kernel void k(__global float *x) { x[0] = undefined_name; }\n";

static cl_platform_id plat;
static cl_device_id dev;
static cl_context cctx;
static cl_command_queue queue;

/* Builds src; returns its origin (-1: no program, -2: built with an error). */
static int build(const char *src, bool use, float *ran)
{
    cl_int e = CL_SUCCESS;
    dg_ocl_origin origin = DG_OCL_FROM_CACHE;
    cl_program p = dg_ocl_program_build(cctx, plat, dev, src, OPTS, use, &e, &origin);
    if (!p)
        return -1;
    if (e != CL_SUCCESS) {
        clReleaseProgram(p);
        return -2;
    }
    if (ran) { /* the program runs: its kernel writes its constant */
        *ran = 0;
        cl_kernel k = clCreateKernel(p, "k", &e);
        cl_mem buf = clCreateBuffer(cctx, CL_MEM_READ_WRITE, 4 * sizeof(float), NULL, &e);
        size_t n = 4;
        float out[4] = {0};
        if (k && buf && clSetKernelArg(k, 0, sizeof buf, &buf) == CL_SUCCESS &&
            clEnqueueNDRangeKernel(queue, k, 1, NULL, &n, NULL, 0, NULL, NULL) == CL_SUCCESS &&
            clEnqueueReadBuffer(queue, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL) ==
                CL_SUCCESS)
            *ran = out[3];
        if (buf)
            clReleaseMemObject(buf);
        if (k)
            clReleaseKernel(k);
    }
    clReleaseProgram(p);
    return (int)origin;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Flips one byte of the file at offset from its end. */
static void damage(const char *path, long from_end)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, -from_end, SEEK_END);
    int c = fgetc(f);
    fseek(f, -from_end, SEEK_END);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void test_cache(const char *dir)
{
    setenv("DEVGATE_OPENCL_CACHE", dir, 1);
    char path[4096], path2[4096];
    CHECK(dg_ocl_cache_path(plat, dev, SRC, OPTS, path, sizeof path));
    CHECK(dg_ocl_cache_path(plat, dev, SRC2, OPTS, path2, sizeof path2));
    CHECK(strcmp(path, path2) != 0); /* the source is in the key */
    CHECK(!exists(path));

    float ran = 0;
    CHECK(build(SRC, true, &ran) == DG_OCL_FROM_SOURCE && ran == 42.0f);
    CHECK(exists(path));
    CHECK(build(SRC, true, &ran) == DG_OCL_FROM_CACHE);
    CHECK_MSG(ran == 42.0f, "the cached program wrote %g", ran);
    CHECK(build(SRC2, true, &ran) == DG_OCL_FROM_SOURCE && ran == 7.0f);
    CHECK(build(SRC2, true, &ran) == DG_OCL_FROM_CACHE && ran == 7.0f);

    /* the file's checksum fails: from source, and the entry written again */
    damage(path, 5);
    CHECK(build(SRC, true, &ran) == DG_OCL_FROM_SOURCE && ran == 42.0f);
    CHECK(build(SRC, true, NULL) == DG_OCL_FROM_CACHE);
    CHECK(truncate(path, 40) == 0);
    CHECK(build(SRC, true, NULL) == DG_OCL_FROM_SOURCE);
    CHECK(build(SRC, true, NULL) == DG_OCL_FROM_CACHE);

    /* not asked, or off: from source, nothing read or written */
    CHECK(unlink(path) == 0);
    CHECK(build(SRC, false, NULL) == DG_OCL_FROM_SOURCE && !exists(path));
    setenv("DEVGATE_OPENCL_CACHE", "off", 1);
    CHECK(!dg_ocl_cache_path(plat, dev, SRC, OPTS, path2, sizeof path2));
    CHECK(build(SRC, true, NULL) == DG_OCL_FROM_SOURCE && !exists(path));
    setenv("DEVGATE_OPENCL_CACHE", dir, 1);

    /* a source that does not build: its error, nothing stored */
    CHECK(dg_ocl_cache_path(plat, dev, BAD, OPTS, path2, sizeof path2));
    CHECK(build(BAD, true, NULL) == -2 && !exists(path2));

    /* a folder open to others is closed (ours), one another user owns is not used */
    CHECK(chmod(dir, 0755) == 0);
    CHECK(dg_ocl_cache_path(plat, dev, SRC, OPTS, path2, sizeof path2));
    struct stat st;
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 077) == 0);
    if (getuid() == 0) {
        CHECK(chown(dir, 65534, 65534) == 0);
        CHECK(!dg_ocl_cache_path(plat, dev, SRC, OPTS, path2, sizeof path2));
        CHECK(build(SRC, true, NULL) == DG_OCL_FROM_SOURCE && !exists(path));
        CHECK(chown(dir, 0, 0) == 0);
    }
}

static void test_link(const char *base, const char *dir)
{
    char link[4200];
    snprintf(link, sizeof link, "%s/link", base);
    CHECK(symlink(dir, link) == 0);
    setenv("DEVGATE_OPENCL_CACHE", link, 1);
    char path[4096];
    CHECK(!dg_ocl_cache_path(plat, dev, SRC, OPTS, path, sizeof path));
    unlink(link);
}

int main(void)
{
    cl_uint n = 0;
    if (clGetPlatformIDs(1, &plat, &n) != CL_SUCCESS || n == 0 ||
        clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, &n) != CL_SUCCESS || n == 0)
        check_skip("no OpenCL platform or device");
    cl_int e = CL_SUCCESS;
    cctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    queue = cctx ? clCreateCommandQueue(cctx, dev, 0, &e) : NULL;
    CHECK(cctx && queue);
    const char *tmp = getenv("TMPDIR");
    char base[512], dir[600];
    snprintf(base, sizeof base, "%s/dg_ocl_cache_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(base) != NULL);
    snprintf(dir, sizeof dir, "%s/cache", base);
    if (cctx && queue) {
        test_cache(dir);
        test_link(base, dir);
    }
    dg_remove_tree(base);
    if (queue)
        clReleaseCommandQueue(queue);
    if (cctx)
        clReleaseContext(cctx);
    CHECK_DONE();
}
#else
int main(void)
{
    check_skip("built without OpenCL");
}
#endif
