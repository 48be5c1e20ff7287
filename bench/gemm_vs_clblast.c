/* devgate's OpenCL SGEMM against CLBlast's on the same device, the same
 * buffers and the same queue: square products and the fixture's own layer
 * GEMMs (mlp fc at batch 256 and 4096, lenet and cifar im2col GEMMs at batch
 * 256 in the chunks the backend makes on this device, cifar's fc1), repetitions interleaved and the
 * order alternated, medians, the ratio devgate/CLBlast with its spread.
 *
 *   gemm_vs_clblast [--platform TEXT] [--device N] [--shapes LIST] [--reps R]
 *                   [--min-ms T] [--list] [--devices]
 *
 * --platform picks the first devgate OpenCL device whose platform name
 * contains TEXT (any case); --device N is devgate's device index (GPUs of
 * every platform first). --shapes takes shape names or groups (square, mlp,
 * lenet, cifar, fixture, all; default all), comma separated; --list prints
 * them, --devices prints devgate's OpenCL devices (index, platform, name, tab
 * separated) and --platform's pick, then exits. Each sample times
 * back-to-back launches of one side (at least --min-ms milliseconds, each side
 * calibrated on its own) and a clFinish; each repetition times both sides, the
 * order alternating. The devgate side is the backend's own GEMM entry (the
 * kernel variant it picks for the shape and the k-slices it splits the
 * product into, the columns variant and split; DEVGATE_OPENCL_KERNEL and
 * DEVGATE_OPENCL_SPLITK respected);
 * the CLBlast side is CLBlastSgemm, or CLBlastSgemmStridedBatched for a batch.
 * Both results are compared after the warm-up (max |difference| over max
 * |CLBlast|). Exit status: 0 done, 1 a result mismatch, 2 bad usage, 3 no
 * device or a backend / CLBlast failure. Built with -DDG_BENCH_CLBLAST=ON. */
#include "backend/backend.h"
#include "backend/opencl/opencl_hooks.h"

#include <clblast_c.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SHAPES 64
#define MAX_REPS 101
#define CONV_CAP ((double)(64 << 20)) /* the backend's CPU convolution workspace cap, bytes */

typedef struct shape {
    char name[32];
    const char *group;
    bool ta, tb;
    int m, n, k, batch;
    int lda, ldb, ldc;
    size_t sa, sb, sc; /* batch strides in elements (0: shared operand) */
} shape;

static shape shapes[MAX_SHAPES];
static int nshapes;
/* The open device (NULL before): its conv2d_workspace gives the chunks. */
static const dg_backend_iface *chunk_be;
static void *chunk_ctx;

static void add(const char *group, const char *name, bool ta, bool tb, int m, int n, int k,
                int batch, int lda, int ldb, int ldc, size_t sa, size_t sb, size_t sc)
{
    if (nshapes == MAX_SHAPES)
        return;
    shape *s = &shapes[nshapes++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->group = group;
    s->ta = ta;
    s->tb = tb;
    s->m = m;
    s->n = n;
    s->k = k;
    s->batch = batch;
    s->lda = lda;
    s->ldb = ldb;
    s->ldc = ldc;
    s->sa = sa;
    s->sb = sb;
    s->sc = sc;
}

/* A fully connected layer in -> out at batch b, as train.c issues it:
 * forward x * W^T (nt), dW = dy^T * x (tn), dx = dy * W (nn, not for the
 * first layer). */
static void add_fc(const char *group, const char *layer, int b, int in, int out, bool first)
{
    char nm[32];
    snprintf(nm, sizeof nm, "%s.%s.fwd", group, layer);
    add(group, nm, false, true, b, out, in, 1, in, in, out, 0, 0, 0);
    snprintf(nm, sizeof nm, "%s.%s.dw", group, layer);
    add(group, nm, true, false, out, in, b, 1, out, in, in, 0, 0, 0);
    if (!first) {
        snprintf(nm, sizeof nm, "%s.%s.dx", group, layer);
        add(group, nm, false, false, b, in, out, 1, out, in, in, 0, 0, 0);
    }
}

/* A convolution c x h x w -> k maps (kernel kk, stride 1, pad p) at batch b,
 * as opencl.c issues it: per chunk of nimg images a batched GEMM over the
 * column buffer col[ckk, nimg*hw]; forward w * col (nn), dW parts dy * col^T
 * (nt), dcol = w^T * dy (tn, not for the first layer). */
static void add_conv(const char *group, const char *layer, int b, int c, int h, int w, int k,
                     int kk, int p, bool first)
{
    int ho = h + 2 * p - kk + 1, wo = w + 2 * p - kk + 1;
    int ckk = c * kk * kk, hw = ho * wo;
    double per = ((double)ckk * hw + (double)k * ckk) * sizeof(float);
    int fit = (int)(CONV_CAP / per);
    if (chunk_ctx) { /* the workspace is exactly one chunk's column buffers and parts */
        dg_conv_shape cs = {b, c, h, w, k, kk, kk, 1, p, ho, wo};
        size_t ws = chunk_be->conv2d_workspace(chunk_ctx, &cs);
        if (ws)
            fit = (int)((double)ws / per);
    }
    if (fit < 1)
        fit = 1;
    if (fit > b)
        fit = b;
    int chunks = (b + fit - 1) / fit;
    int nimg = (b + chunks - 1) / chunks;
    size_t ys = (size_t)k * hw, nw = (size_t)k * ckk;
    char nm[32];
    snprintf(nm, sizeof nm, "%s.%s.fwd", group, layer);
    add(group, nm, false, false, k, hw, ckk, nimg, ckk, nimg * hw, hw, 0, (size_t)hw, ys);
    snprintf(nm, sizeof nm, "%s.%s.dw", group, layer);
    add(group, nm, false, true, k, ckk, hw, nimg, hw, nimg * hw, ckk, ys, (size_t)hw, nw);
    if (!first) {
        snprintf(nm, sizeof nm, "%s.%s.dx", group, layer);
        add(group, nm, true, false, ckk, hw, k, nimg, ckk, hw, nimg * hw, 0, ys, (size_t)hw);
    }
}

static void make_shapes(void)
{
    static const int sq[] = {512, 1024, 2048, 4096};
    for (size_t i = 0; i < sizeof sq / sizeof sq[0]; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "sq%d", sq[i]);
        add("square", nm, false, false, sq[i], sq[i], sq[i], 1, sq[i], sq[i], sq[i], 0, 0, 0);
    }
    static const int mb[] = {256, 4096};
    for (size_t i = 0; i < sizeof mb / sizeof mb[0]; i++) {
        const char *grp = mb[i] == 256 ? "mlp256" : "mlp4096";
        add_fc(grp, "fc1", mb[i], 784, 512, true);
        add_fc(grp, "fc2", mb[i], 512, 256, false);
        add_fc(grp, "fc3", mb[i], 256, 10, false);
    }
    add_conv("lenet256", "conv1", 256, 1, 28, 28, 6, 5, 0, true);
    add_conv("lenet256", "conv2", 256, 6, 12, 12, 16, 5, 0, false);
    add_fc("lenet256", "fc1", 256, 256, 120, false);
    add_conv("cifar256", "conv1", 256, 3, 32, 32, 32, 3, 1, true);
    add_conv("cifar256", "conv2", 256, 32, 32, 32, 32, 3, 1, false);
    add_conv("cifar256", "conv3", 256, 32, 16, 16, 64, 3, 1, false);
    add_conv("cifar256", "conv4", 256, 64, 16, 16, 64, 3, 1, false);
    add_fc("cifar256", "fc1", 256, 4096, 256, false);
}

/* Whether shape s is selected by the list item it (a name, or a group:
 * square, mlp, lenet, cifar, fixture, all). */
static bool selects(const shape *s, const char *it)
{
    if (strcmp(it, "all") == 0 || strcmp(it, s->name) == 0 || strcmp(it, s->group) == 0)
        return true;
    if (strcmp(it, "fixture") == 0)
        return strcmp(s->group, "square") != 0;
    size_t n = strlen(it);
    return (strcmp(it, "mlp") == 0 || strcmp(it, "lenet") == 0 || strcmp(it, "cifar") == 0) &&
           strncmp(s->group, it, n) == 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return n == 0;
}

typedef struct bench {
    const dg_backend_iface *be;
    void *ctx;
    cl_command_queue queue;
} bench;

/* Extent in elements of a batch of matrices rows x cols (leading dim ld, stride s). */
static size_t extent(int rows, int cols, int ld, size_t s, int batch)
{
    return (size_t)(rows - 1) * (size_t)ld + (size_t)cols + s * (size_t)(batch - 1);
}

/* One launch of one side: 0 devgate, 1 CLBlast. */
static int launch(bench *b, int side, const shape *s, void *A, void *B, void *C)
{
    if (side == 0) {
        dg_ref ra = {A, 0}, rb = {B, 0}, rc = {C, 0};
        dg_status st =
            dg_ocl_gemm_strided(b->ctx, s->ta, s->tb, s->m, s->n, s->k, 1.0f, ra, s->lda, s->sa, rb,
                                s->ldb, s->sb, 0.0f, rc, s->ldc, s->sc, s->batch);
        if (st != DG_OK) {
            fprintf(stderr, "gemm_vs_clblast: devgate gemm %s: %s\n", s->name,
                    b->be->last_error(b->ctx));
            return -1;
        }
        return 0;
    }
    CLBlastTranspose ta = s->ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = s->tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastStatusCode e;
    if (s->batch == 1)
        e = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)s->m, (size_t)s->n, (size_t)s->k,
                         1.0f, (cl_mem)A, 0, (size_t)s->lda, (cl_mem)B, 0, (size_t)s->ldb, 0.0f,
                         (cl_mem)C, 0, (size_t)s->ldc, &b->queue, NULL);
    else
        e = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, (size_t)s->m, (size_t)s->n,
                                       (size_t)s->k, 1.0f, (cl_mem)A, 0, (size_t)s->lda, s->sa,
                                       (cl_mem)B, 0, (size_t)s->ldb, s->sb, 0.0f, (cl_mem)C, 0,
                                       (size_t)s->ldc, s->sc, (size_t)s->batch, &b->queue, NULL);
    if (e != CLBlastSuccess) {
        fprintf(stderr, "gemm_vs_clblast: CLBlast sgemm %s: status %d\n", s->name, (int)e);
        return -1;
    }
    return 0;
}

/* Seconds per launch over reps back-to-back launches and a synchronize. */
static int timed(bench *b, int side, const shape *s, void *A, void *B, void *C, int reps,
                 double *sec)
{
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        if (launch(b, side, s, A, B, C) != 0)
            return -1;
    if (b->be->synchronize(b->ctx) != DG_OK) {
        fprintf(stderr, "gemm_vs_clblast: synchronize: %s\n", b->be->last_error(b->ctx));
        return -1;
    }
    *sec = (now_s() - t0) / reps;
    return 0;
}

static void *alloc_up(bench *b, size_t elems, unsigned seed)
{
    void *buf = NULL;
    if (b->be->buf_alloc(b->ctx, elems * sizeof(float), &buf) != DG_OK) {
        fprintf(stderr, "gemm_vs_clblast: allocating %zu floats: %s\n", elems,
                b->be->last_error(b->ctx));
        return NULL;
    }
    float *h = malloc(elems * sizeof *h);
    if (!h) {
        b->be->buf_free(b->ctx, buf);
        return NULL;
    }
    unsigned x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < elems; i++) {
        x = x * 1664525u + 1013904223u;
        h[i] = (float)((x >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    dg_status st = b->be->upload(b->ctx, buf, 0, h, elems * sizeof *h);
    free(h);
    if (st != DG_OK) {
        fprintf(stderr, "gemm_vs_clblast: upload: %s\n", b->be->last_error(b->ctx));
        b->be->buf_free(b->ctx, buf);
        return NULL;
    }
    return buf;
}

/* max |x - y| / max |y| over n elements of two device buffers (-1 on failure). */
static double rel_diff(bench *b, void *x, void *y, size_t n)
{
    float *hx = malloc(n * sizeof *hx), *hy = malloc(n * sizeof *hy);
    double r = -1.0;
    if (hx && hy && b->be->download(b->ctx, x, 0, hx, n * sizeof *hx) == DG_OK &&
        b->be->download(b->ctx, y, 0, hy, n * sizeof *hy) == DG_OK) {
        double md = 0.0, my = 0.0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)hx[i] - (double)hy[i]);
            if (!(d <= md)) /* NaN counts as a difference */
                md = isnan(d) ? INFINITY : d;
            if (fabs((double)hy[i]) > my)
                my = fabs((double)hy[i]);
        }
        r = my > 0.0 ? md / my : md;
    }
    free(hx);
    free(hy);
    return r;
}

/* Calibrates launches per sample so one sample takes at least min_s. */
static int calibrate(bench *b, int side, const shape *s, void *A, void *B, void *C, double min_s,
                     int *launches)
{
    double t = 0.0;
    if (timed(b, side, s, A, B, C, 1, &t) != 0)
        return -1;
    int l = t > 0.0 ? (int)ceil(min_s / t) : 1000;
    *launches = l < 1 ? 1 : l > 1000 ? 1000 : l;
    return 0;
}

typedef struct result {
    double dg_gf, cb_gf, ratio, rmin, rmax, diff;
} result;

static int run_shape(bench *b, const shape *s, int reps, double min_s, result *out)
{
    size_t na = s->ta ? extent(s->k, s->m, s->lda, s->sa, s->batch)
                      : extent(s->m, s->k, s->lda, s->sa, s->batch);
    size_t nb = s->tb ? extent(s->n, s->k, s->ldb, s->sb, s->batch)
                      : extent(s->k, s->n, s->ldb, s->sb, s->batch);
    size_t nc = extent(s->m, s->n, s->ldc, s->sc, s->batch);
    void *A = alloc_up(b, na, 1), *B = alloc_up(b, nb, 2), *C0 = alloc_up(b, nc, 3),
         *C1 = alloc_up(b, nc, 4);
    int rc = -1;
    if (!A || !B || !C0 || !C1)
        goto done;
    int l0 = 1, l1 = 1;
    double t = 0.0;
    /* Warm-up (CLBlast compiles its kernels on first use), then the check. */
    if (timed(b, 0, s, A, B, C0, 1, &t) != 0 || timed(b, 1, s, A, B, C1, 1, &t) != 0)
        goto done;
    out->diff = rel_diff(b, C0, C1, nc);
    if (calibrate(b, 0, s, A, B, C0, min_s, &l0) != 0 ||
        calibrate(b, 1, s, A, B, C1, min_s, &l1) != 0)
        goto done;
    double td[MAX_REPS], tc[MAX_REPS], rr[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        int first = r % 2;
        for (int j = 0; j < 2; j++) {
            int side = j == 0 ? first : 1 - first;
            if (timed(b, side, s, A, B, side ? C1 : C0, side ? l1 : l0, side ? &tc[r] : &td[r]))
                goto done;
        }
        rr[r] = tc[r] / td[r]; /* devgate's rate over CLBlast's */
    }
    double flop = 2.0 * s->m * (double)s->n * s->k * s->batch;
    out->dg_gf = flop / median(td, reps) / 1e9;
    out->cb_gf = flop / median(tc, reps) / 1e9;
    out->ratio = median(rr, reps); /* sorted by median() */
    out->rmin = rr[0];
    out->rmax = rr[reps - 1];
    rc = 0;
done:
    b->be->buf_free(b->ctx, A);
    b->be->buf_free(b->ctx, B);
    b->be->buf_free(b->ctx, C0);
    b->be->buf_free(b->ctx, C1);
    return rc;
}

static int usage(const char *msg)
{
    fprintf(stderr,
            "gemm_vs_clblast: %s\nusage: gemm_vs_clblast [--platform TEXT] [--device N] "
            "[--shapes LIST] [--reps R] [--min-ms T] [--list] [--devices]\n",
            msg);
    return 2;
}

static bool parse_int(const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi)
        return false;
    *out = (int)x;
    return true;
}

int main(int argc, char **argv)
{
    const char *platform = NULL, *list = "all";
    int device = -1, reps = 7, min_ms = 20;
    bool only_list = false, only_devices = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--list") == 0 || strcmp(a, "--devices") == 0) {
            only_list |= a[2] == 'l';
            only_devices |= a[2] == 'd';
            continue;
        }
        if (!v)
            return usage("an option lacks its value");
        if (strcmp(a, "--platform") == 0)
            platform = v;
        else if (strcmp(a, "--device") == 0) {
            if (!parse_int(v, 0, 1023, &device))
                return usage("--device: not an index 0..1023");
        } else if (strcmp(a, "--shapes") == 0)
            list = v;
        else if (strcmp(a, "--reps") == 0) {
            if (!parse_int(v, 1, MAX_REPS, &reps))
                return usage("--reps: not a count 1..101");
        } else if (strcmp(a, "--min-ms") == 0) {
            if (!parse_int(v, 1, 10000, &min_ms))
                return usage("--min-ms: not 1..10000 milliseconds");
        } else
            return usage("unknown option");
        i++;
    }
    make_shapes();
    bool pick[MAX_SHAPES] = {false};
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        bool any = false;
        for (int i = 0; i < nshapes; i++)
            if (selects(&shapes[i], it))
                pick[i] = any = true;
        if (!any) {
            fprintf(stderr, "gemm_vs_clblast: --shapes: unknown shape or group '%s'\n", it);
            return 2;
        }
    }
    if (only_list) {
        for (int i = 0; i < nshapes; i++)
            if (pick[i])
                printf("%-22s %c%c m=%d n=%d k=%d batch=%d\n", shapes[i].name,
                       shapes[i].ta ? 't' : 'n', shapes[i].tb ? 't' : 'n', shapes[i].m, shapes[i].n,
                       shapes[i].k, shapes[i].batch);
        return 0;
    }

    bench b = {dg_backend_opencl_iface(), NULL, NULL};
    char reason[512] = "";
    /* device_info needs an open device: device 0 answers for all of them. */
    if (b.be->init(device > 0 ? device : 0, &b.ctx, reason, sizeof reason) != DG_OK) {
        fprintf(stderr, "gemm_vs_clblast: OpenCL device %d: %s\n", device > 0 ? device : 0, reason);
        return 3;
    }
    int count = b.be->device_count(b.ctx), open = device > 0 ? device : 0;
    dg_device_info info;
    for (int d = 0; only_devices && d < count; d++) {
        memset(&info, 0, sizeof info);
        if (b.be->device_info(b.ctx, d, &info) == DG_OK)
            printf("%d\t%s\t%s\n", d, info.platform, info.name);
    }
    if (device < 0 && platform) {
        for (int d = 0; d < count && device < 0; d++) {
            memset(&info, 0, sizeof info);
            if (b.be->device_info(b.ctx, d, &info) == DG_OK && contains_ci(info.platform, platform))
                device = d;
        }
        if (device < 0) {
            fprintf(stderr, "gemm_vs_clblast: no OpenCL device on a platform matching '%s'\n",
                    platform);
            b.be->free(b.ctx);
            return 3;
        }
    }
    if (device < 0)
        device = 0;
    if (only_devices) {
        printf("pick\t%d\n", device);
        b.be->free(b.ctx);
        return 0;
    }
    if (device != open) {
        b.be->free(b.ctx);
        b.ctx = NULL;
        if (b.be->init(device, &b.ctx, reason, sizeof reason) != DG_OK) {
            fprintf(stderr, "gemm_vs_clblast: OpenCL device %d: %s\n", device, reason);
            return 3;
        }
    }
    /* The shapes again, chunked as the open device chunks (same order). */
    chunk_be = b.be;
    chunk_ctx = b.ctx;
    nshapes = 0;
    make_shapes();
    cl_context context;
    cl_device_id dev;
    if (dg_ocl_handles(b.ctx, &context, &b.queue, &dev) != DG_OK ||
        b.be->device_info(b.ctx, device, &info) != DG_OK) {
        fprintf(stderr, "gemm_vs_clblast: device info: %s\n", b.be->last_error(b.ctx));
        b.be->free(b.ctx);
        return 3;
    }
    const char *force = getenv("DEVGATE_OPENCL_KERNEL"), *split = getenv("DEVGATE_OPENCL_SPLITK");
    printf("# SGEMM fp32, devgate OpenCL vs CLBlast, device %d: %s (%s); kernel %s, split-K %s; "
           "%d reps, >= %d ms a sample, medians\n",
           device, info.name, info.platform, force && *force ? force : "auto",
           split && *split ? split : "auto", reps, min_ms);
    printf("%-22s %2s %6s %6s %6s %5s %-8s %5s %9s %9s %6s %13s %8s\n", "shape", "op", "m", "n",
           "k", "batch", "variant", "split", "dg GF/s", "clb GF/s", "ratio", "ratio min-max",
           "diff");
    int rc = 0, done = 0;
    double lsum[2] = {0, 0};
    int lcnt[2] = {0, 0};
    for (int i = 0; i < nshapes; i++) {
        if (!pick[i])
            continue;
        const shape *s = &shapes[i];
        result r = {0};
        if (run_shape(&b, s, reps, min_ms / 1000.0, &r) != 0) {
            rc = 3;
            break;
        }
        bool bad = !(r.diff >= 0.0 && r.diff <= 1e-4 * sqrt((double)s->k) + 1e-5);
        if (bad)
            rc = rc ? rc : 1;
        int slices = 1;
        const char *var =
            dg_ocl_gemm_variant(b.ctx, s->ta, s->tb, s->m, s->n, s->k, s->batch, &slices);
        printf("%-22s %c%c %6d %6d %6d %5d %-8s %5d %9.1f %9.1f %6.2f %6.2f-%-6.2f %8.1e%s\n",
               s->name, s->ta ? 't' : 'n', s->tb ? 't' : 'n', s->m, s->n, s->k, s->batch, var,
               slices, r.dg_gf, r.cb_gf, r.ratio, r.rmin, r.rmax, r.diff, bad ? " MISMATCH" : "");
        fflush(stdout);
        int g = strcmp(s->group, "square") == 0 ? 0 : 1;
        lsum[g] += log(r.ratio);
        lcnt[g]++;
        done++;
    }
    for (int g = 0; g < 2; g++)
        if (lcnt[g])
            printf("# geometric mean ratio, %s shapes: %.2f (%d shapes)\n",
                   g ? "fixture" : "square", exp(lsum[g] / lcnt[g]), lcnt[g]);
    if (!done && rc == 0)
        rc = 3;
    b.be->free(b.ctx);
    return rc;
}
