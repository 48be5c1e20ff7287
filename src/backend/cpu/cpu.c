/* The cpu backend: host memory as "device" memory, OpenBLAS for GEMM and the
 * training ops of cpu_ops.c. Buffers are 64-byte aligned blocks from the
 * counted host allocator. */
#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/core.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

/* openblas_get_config() rebuilds its string in one static buffer on every
 * call (strcpy, then strcat), so a thread reading it while another calls it
 * sees it cut short or doubled. Its text is fixed at build time: copied once. */
static char blas_config[256];
static pthread_once_t blas_config_once = PTHREAD_ONCE_INIT;

static void blas_config_init(void)
{
    snprintf(blas_config, sizeof blas_config, "%s", openblas_get_config());
}

static const char *blas_config_text(void)
{
    pthread_once(&blas_config_once, blas_config_init);
    return blas_config;
}

/* All cpu parallelism goes through OpenMP (see cpu_gemm): OpenBLAS runs one
 * thread a call. Its pthreads build starts a server thread per core when it
 * loads, before main, and each spins (sched_yield) for
 * OPENBLAS_THREAD_TIMEOUT cycles after its start and after every piece of
 * work; openblas_set_num_threads(1) leaves them there. Spinning beside the
 * OpenMP team on the same cores, they made the gate's 512^3 product take
 * 8 ms instead of 0.45 ms in 3 of 10 runs on a 16-vCPU host (33.5 against
 * 181-216 GFLOP/s on 2 cores); OPENBLAS_NUM_THREADS=1 (no server threads)
 * cured it. The devgate command sets that before OpenBLAS loads (src/cli/
 * main.c re-executes itself). For a program that links the library, the
 * threads are also shut down here (blas_thread_shutdown_, which OpenBLAS
 * itself calls before a fork) as soon as this process runs, and stay down:
 * with one thread a call OpenBLAS never needs them (on the H200 host this
 * alone still left 8 of 20 gates slow: the command's re-exec is the cure).
 * A BLAS without these symbols is left as it is. */
static pthread_once_t blas_quiet_once = PTHREAD_ONCE_INIT;

static void blas_quiet_init(void)
{
    openblas_set_num_threads(1);
    void (*shutdown)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
    if (shutdown)
        shutdown();
}

/* At load, after the shared libraries' own constructors (OpenBLAS's starts
 * the threads): the earliest this process can act, before the threads have
 * spun through the environment proof and the gate. */
__attribute__((constructor)) static void blas_quiet_at_load(void)
{
    pthread_once(&blas_quiet_once, blas_quiet_init);
}

static dg_status cpu_init(int device, void **ctx, char *reason, size_t reason_len)
{
    pthread_once(&blas_quiet_once, blas_quiet_init);
    blas_config_text(); /* on this thread, before any sampler thread reads the device */
    if (device != 0) {
        snprintf(reason, reason_len, "cpu has one device (index 0), asked for %d", device);
        return DG_ERR_NOT_FOUND;
    }
    /* DEVGATE_CPU_CONV picks the convolution path (tests run each one):
     * auto or unset the widest direct kernels the CPU runs, avx2 or avx512
     * those kernels (refused where the CPU lacks them), im2col the
     * portable one. */
    cpu_conv_mode conv_mode;
    dg_status st =
        dg_cpu_conv_mode_parse(getenv("DEVGATE_CPU_CONV"), &conv_mode, reason, reason_len);
    if (st != DG_OK)
        return st;
    cpu_ctx *c = dg_calloc(1, sizeof *c);
    if (!c) {
        snprintf(reason, reason_len, "out of host memory");
        return DG_ERR_NOMEM;
    }
    c->conv_mode = conv_mode;
    *ctx = c;
    return DG_OK;
}

static void cpu_free(void *ctx)
{
    dg_free(ctx);
}

static const char *cpu_last_error(void *ctx)
{
    return ctx ? ((cpu_ctx *)ctx)->err : "cpu: not initialised";
}

static int cpu_device_count(void *ctx)
{
    return 1;
}

/* First value of `key` in /proc/cpuinfo, "" when absent. Reentrant: the sampler
 * thread reads the device while the trainer does. */
static void cpuinfo_field(const char *key, char *out, size_t len)
{
    out[0] = '\0';
    char *text = dg_read_file("/proc/cpuinfo", 1 << 20, NULL);
    if (!text)
        return;
    size_t klen = strlen(key);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, key, klen) == 0 &&
            (line[klen] == ' ' || line[klen] == '\t' || line[klen] == ':')) {
            char *colon = strchr(line, ':');
            if (colon) {
                dg_copy_clean(out, len, dg_trim(colon + 1));
                break;
            }
        }
    }
    dg_free(text);
}

static dg_status cpu_device_info(void *ctx, int device, dg_device_info *out)
{
    memset(out, 0, sizeof *out);
    cpuinfo_field("model name", out->name, sizeof out->name);
    if (!out->name[0])
        snprintf(out->name, sizeof out->name, "host cpu");
    cpuinfo_field("vendor_id", out->vendor, sizeof out->vendor);
    if (!out->vendor[0])
        cpuinfo_field("CPU implementer", out->vendor, sizeof out->vendor);
    snprintf(out->driver_version, sizeof out->driver_version, "%s", blas_config_text());
    snprintf(out->platform, sizeof out->platform, "host");
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        out->mem_total = (dg_metric){(double)si.totalram * si.mem_unit, true};
    }
    /* MemAvailable is the figure that says how much can be allocated. */
    char *mi = dg_read_file("/proc/meminfo", 1 << 16, NULL);
    const char *av = mi ? strstr(mi, "MemAvailable:") : NULL;
    if (av)
        out->mem_free = (dg_metric){strtod(av + 13, NULL) * 1024.0, true};
    dg_free(mi);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    out->compute_units = (dg_metric){(double)n, n > 0};
    out->host_memory = true;
    return DG_OK;
}

static void cpu_versions(void *ctx, char *buf, size_t len)
{
    snprintf(buf, len, "OpenBLAS %s; %d threads (OpenMP); conv %s", blas_config_text(),
             omp_get_max_threads(), dg_cpu_conv_kernels(ctx));
}

static dg_status cpu_buf_alloc(void *ctx, size_t bytes, void **buf)
{
    cpu_buf *b = dg_calloc(1, sizeof *b);
    void *raw = b ? dg_malloc(bytes + 64) : NULL;
    if (!raw) {
        dg_free(b);
        snprintf(((cpu_ctx *)ctx)->err, sizeof((cpu_ctx *)ctx)->err,
                 "cpu: out of host memory allocating %zu bytes", bytes);
        return DG_ERR_DEVICE_OOM;
    }
    b->raw = raw;
    b->data = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    b->bytes = bytes;
    *buf = b;
    return DG_OK;
}

static void cpu_buf_free(void *ctx, void *buf)
{
    cpu_buf *b = buf;
    if (!b)
        return;
    dg_free(b->raw);
    dg_free(b);
}

static dg_status cpu_upload(void *ctx, void *buf, size_t off, const void *src, size_t bytes)
{
    cpu_buf *b = buf;
    dg_status st = check_range(ctx, b, off, bytes);
    if (st == DG_OK)
        memcpy((char *)b->data + off, src, bytes);
    return st;
}

static dg_status cpu_download(void *ctx, const void *buf, size_t off, void *dst, size_t bytes)
{
    const cpu_buf *b = buf;
    dg_status st = check_range(ctx, b, off, bytes);
    if (st == DG_OK)
        memcpy(dst, (const char *)b->data + off, bytes);
    return st;
}

/* Bytes a rows x cols row-major matrix with leading dimension ld spans. */
static size_t matrix_span(int rows, int cols, int ld)
{
    return rows && cols ? (((size_t)rows - 1) * (size_t)ld + (size_t)cols) * sizeof(float) : 0;
}

static dg_status cpu_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, dg_ref a,
                          int lda, dg_ref b, int ldb, float beta, dg_ref c, int ldc)
{
    cpu_ctx *cc = ctx;
    int ar = ta ? k : m, ac = ta ? m : k; /* A as stored */
    int br = tb ? n : k, bc = tb ? k : n; /* B as stored */
    dg_status st;
    if (m < 0 || n < 0 || k < 0 || lda < (ac > 0 ? ac : 1) || ldb < (bc > 0 ? bc : 1) ||
        ldc < (n > 0 ? n : 1)) {
        snprintf(cc->err, sizeof cc->err, "cpu: bad gemm shape m=%d n=%d k=%d lda=%d ldb=%d ldc=%d",
                 m, n, k, lda, ldb, ldc);
        return DG_ERR_USAGE;
    }
    if (m == 0 || n == 0)
        return DG_OK;
    const cpu_buf *A = a.buf, *B = b.buf;
    cpu_buf *C = c.buf;
    if ((st = check_range(cc, A, a.off, matrix_span(ar, ac, lda))) ||
        (st = check_range(cc, B, b.off, matrix_span(br, bc, ldb))) ||
        (st = check_range(cc, C, c.off, matrix_span(m, n, ldc))))
        return st;
    if (k == 0) {
        /* BLAS leaves C alone when k is 0; the contract says C = beta * C. */
        for (int i = 0; i < m; i++) {
            float *row = (float *)((char *)C->data + c.off) + (size_t)i * ldc;
            for (int j = 0; j < n; j++)
                row[j] = beta == 0.0f ? 0.0f : beta * row[j];
        }
        return DG_OK;
    }
    const float *pa = (const float *)((const char *)A->data + a.off);
    const float *pb = (const float *)((const char *)B->data + b.off);
    float *pc = (float *)((char *)C->data + c.off);
    /* OpenBLAS runs single-threaded (cpu_init): OpenMP is the one thread pool,
     * so two pools never spin against each other. Large products are split
     * into row (or, when m is small, column) blocks, one per thread. */
    int nt = omp_get_max_threads();
    if (nt < 2 || 2.0 * m * n * k < 4e6) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc);
        return DG_OK;
    }
    bool by_rows = m >= n || m >= 64 * nt;
    int extent = by_rows ? m : n;
    int chunk = (extent + nt - 1) / nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int lo = t * chunk, hi = lo + chunk < extent ? lo + chunk : extent;
        if (lo >= hi)
            continue;
        if (by_rows) /* rows lo..hi of op(A) and C */
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, hi - lo, n, k, alpha,
                        ta ? pa + lo : pa + (size_t)lo * lda, lda, pb, ldb, beta,
                        pc + (size_t)lo * ldc, ldc);
        else /* columns lo..hi of op(B) and C */
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, m, hi - lo, k, alpha, pa, lda,
                        tb ? pb + (size_t)lo * ldb : pb + lo, ldb, beta, pc + lo, ldc);
    }
    return DG_OK;
}

static dg_status cpu_synchronize(void *ctx)
{
    return DG_OK;
}

static bool cpu_supports_op(void *ctx, const dg_op_desc *d)
{
    return d && (unsigned)d->op < DG_OP__COUNT && d->dtype == DG_DTYPE_F32; /* every fp32 op */
}

static const dg_backend_iface cpu_iface = {
    .version = DG_BACKEND_IFACE_VERSION,
    .name = "cpu",
    /* The host itself: the fallback and the baseline; host-clock events. */
    .caps = {.host = true, .event_timing = true, .device_info_any_thread = true},
    .init = cpu_init,
    .free = cpu_free,
    .last_error = cpu_last_error,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .versions = cpu_versions,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .synchronize = cpu_synchronize,
    .supports_op = cpu_supports_op,
    .gemm = cpu_gemm,
    .fill = dg_cpu_fill,
    .bias_add = dg_cpu_bias_add,
    .bias_grad = dg_cpu_bias_grad,
    .relu_fwd = dg_cpu_relu_fwd,
    .relu_bwd = dg_cpu_relu_bwd,
    .maxpool_fwd = dg_cpu_maxpool_fwd,
    .maxpool_bwd = dg_cpu_maxpool_bwd,
    .conv2d_workspace = dg_cpu_conv2d_workspace,
    .conv2d_fwd = dg_cpu_conv2d_fwd,
    .conv2d_bwd = dg_cpu_conv2d_bwd,
    .xent = dg_cpu_xent,
    .sgd = dg_cpu_sgd,
    .event_record = dg_cpu_event_record,
    .event_elapsed = dg_cpu_event_elapsed,
};

void *dg_cpu_buf_data(void *buf)
{
    return buf ? ((cpu_buf *)buf)->data : NULL;
}

const dg_backend_iface *dg_backend_cpu_iface(void)
{
    return &cpu_iface;
}
