/* Fused calls: the trainer issues a layer and the ReLU after it (forward),
 * or a product and the mask of the ReLU before it (backward), as one backend
 * call where the backend offers that form; the unfused calls stay the path
 * everywhere else (and where DEVGATE_OPENCL_PATH=old asks for them). */
#include "engine/dispatch_int.h"

static const dg_op gemm_ops[] = {DG_OP_GEMM, DG_OP_BIAS_ADD, DG_OP_RELU};
static const dg_op conv_ops[] = {DG_OP_CONV2D, DG_OP_RELU};

/* Whether every op of ops[n] runs natively on e. */
static bool all_native(const dg_engine *e, const dg_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!dg_engine_native(e, ops[i]))
            return false;
    return true;
}

bool dg_engine_fuses(dg_engine *e, unsigned what)
{
    if (!e || !what)
        return false;
    if (!e->fuse_known) {
        const dg_backend_iface *be = e->be;
        unsigned f = be->fusion ? be->fusion(e->bctx) : 0;
        if (!be->gemm_ep || !all_native(e, gemm_ops, sizeof gemm_ops / sizeof gemm_ops[0]))
            f &= ~DG_FUSE_GEMM;
        if (!be->conv2d_fwd_ep || !all_native(e, conv_ops, sizeof conv_ops / sizeof conv_ops[0]))
            f &= ~DG_FUSE_CONV;
        e->fuse = f;
        e->fuse_known = true;
    }
    return (e->fuse & what) == what && !e->census->prof_on;
}

dg_status dg_op_gemm_ep(dg_ctx *ctx, dg_engine *e, bool ta, bool tb, int m, int n, int k, dg_ref a,
                        int lda, dg_ref b, int ldb, dg_ref c, int ldc, const dg_epilogue *ep)
{
    if (!dg_engine_fuses(e, DG_FUSE_GEMM))
        return dg_fail(ctx, DG_ERR_USAGE, "gemm_ep: the engine has no fused gemm");
    return dg_dp_native(ctx, e, "gemm_ep",
                        e->be->gemm_ep(e->bctx, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, ep));
}

dg_status dg_op_conv2d_fwd_ep(dg_ctx *ctx, dg_engine *e, const dg_conv_shape *s, dg_ref x, dg_ref w,
                              dg_ref y, dg_ref work, const dg_epilogue *ep)
{
    if (!dg_engine_fuses(e, DG_FUSE_CONV))
        return dg_fail(ctx, DG_ERR_USAGE, "conv2d_fwd_ep: the engine has no fused convolution");
    return dg_dp_native(ctx, e, "conv2d_fwd_ep",
                        e->be->conv2d_fwd_ep(e->bctx, s, x, w, y, work, ep));
}

bool dg_engine_queue_counts(const dg_engine *e, uint64_t *enqueued, uint64_t *waits)
{
    return e && e->be->queue_counts && e->be->queue_counts(e->bctx, enqueued, waits) == DG_OK;
}
