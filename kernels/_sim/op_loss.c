/* canna simulator op library: the mean squared error loss (hiascend.com aclnnMseLoss and
 * aclnnMseLossBackward pages), on the pointwise engine (op_pointwise.c).
 *
 *   aclnnMseLoss:         d = (self - target)^2 over their broadcast shape; reduction 0 (none) gives d,
 *                         1 (mean) its mean, 2 (sum) its sum, as a 0-dim out
 *   aclnnMseLossBackward: out = gradOutput * 2 * (self - target) (/ numel for mean), the three
 *                         broadcast together
 *
 * The mean and sum accumulate in double over fixed chunks of the broadcast index space, then add
 * the chunks' sums in order: the result does not depend on the number of AI-core blocks. */
#include "opsim.h"

#pragma GCC optimize("O3")

#define LOSS_CHUNK (64 * 1024)

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

#define PW_KERNELS(NAME, ...)                                                                       \
    static void NAME##_f32(int64_t n, int64_t flat, void *o_, const void *const *in, const void *p_) \
    {                                                                                              \
        typedef float T;                                                                           \
        (void)flat;                                                                                \
        const double *pp = p_;                                                                     \
        T *restrict o = o_;                                                                        \
        (void)pp;                                                                                  \
        __VA_ARGS__                                                                                \
    }                                                                                              \
    static void NAME##_f64(int64_t n, int64_t flat, void *o_, const void *const *in, const void *p_) \
    {                                                                                              \
        typedef double T;                                                                          \
        (void)flat;                                                                                \
        const double *pp = p_;                                                                     \
        T *restrict o = o_;                                                                        \
        (void)pp;                                                                                  \
        __VA_ARGS__                                                                                \
    }

PW_KERNELS(k_sqdiff, {
    const T *restrict a = in[0], *restrict b = in[1];
    for (int64_t i = 0; i < n; i++) {
        T d = a[i] - b[i];
        o[i] = d * d;
    }
})
PW_KERNELS(k_mse_bw, {
    const T *restrict g = in[0], *restrict a = in[1], *restrict b = in[2];
    const T s = (T)pp[0];
    for (int64_t i = 0; i < n; i++)
        o[i] = g[i] * s * (a[i] - b[i]);
})
static const nn_pw_kernel_t k_sqdiff = {k_sqdiff_f32, k_sqdiff_f64, 1};
static const nn_pw_kernel_t k_mse_bw = {k_mse_bw_f32, k_mse_bw_f64, 1};

typedef struct mse_params {
    int32_t reduction, ct, ndim;
    int64_t shape[NN_MAX_DIMS];   /* the broadcast shape */
    int64_t numel;
} mse_params_t;

typedef struct sum_job {
    const double *d;
    double *partial;
    int64_t numel, nchunks;
} sum_job_t;

static aclError sum_block(uint32_t bi, uint32_t nb, void *arg)
{
    const sum_job_t *j = arg;
    for (int64_t c = bi; c < j->nchunks; c += nb) {
        int64_t lo = c * LOSS_CHUNK, hi = lo + LOSS_CHUNK < j->numel ? lo + LOSS_CHUNK : j->numel;
        double s = 0;
        for (int64_t i = lo; i < hi; i++)
            s += j->d[i];
        j->partial[c] = s;
    }
    return ACL_SUCCESS;
}

static aclError mse_run(nn_exec_t *ex)
{
    const mse_params_t *p = (const mse_params_t *)ex->params;
    const nn_view_t *in[2] = {&ex->v[0], &ex->v[1]};
    const nn_view_t *out = &ex->v[2];
    if (p->reduction == RED_NONE)
        return nn_pw_apply(ex, &k_sqdiff, p->ct, 2, in, out, NULL);
    /* the squared differences into the workspace (double, contiguous), then their chunked sum */
    nn_view_t d;
    memset(&d, 0, sizeof d);
    d.dtype = ACL_DOUBLE;
    d.ndim = p->ndim;
    int64_t st = 1;
    for (int32_t i = p->ndim - 1; i >= 0; i--) {
        d.shape[i] = p->shape[i];
        d.stride[i] = st;
        st *= p->shape[i];
    }
    d.numel = p->numel;
    d.hi = p->numel;
    d.data = ex->ws;
    d.name = "workspace";
    double total = 0;
    if (p->numel) {
        aclError rc = nn_pw_apply(ex, &k_sqdiff, CT_F64, 2, in, &d, NULL);
        if (rc)
            return rc;
        sum_job_t j = {(const double *)ex->ws, (double *)ex->ws + p->numel, p->numel,
                       (p->numel + LOSS_CHUNK - 1) / LOSS_CHUNK};
        uint32_t nb = nn_blocks(ex, p->numel, NN_BLOCK_GRAIN);
        if (nb > j.nchunks)
            nb = (uint32_t)j.nchunks;
        if ((rc = nn_parallel(ex, nb, sum_block, &j)))
            return rc;
        for (int64_t c = 0; c < j.nchunks; c++)
            total += j.partial[c];
    }
    if (p->reduction == RED_MEAN)
        total = p->numel ? total / (double)p->numel : NAN;   /* the mean of nothing is NaN, as PyTorch's */
    nn_store(CT_F64, out->data, 1, out->dtype, &total, 1);
    return ACL_SUCCESS;
}

static aclnnStatus check_reduction(const char *api, int64_t reduction)
{
    if (reduction < RED_NONE || reduction > RED_SUM)
        return NN_PARAM("%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %lld", api, (long long)reduction);
    return ACLNN_SUCCESS;
}

static aclnnStatus broadcast2(const char *api, const nn_tensor_t *a, const char *an, const nn_tensor_t *b,
                              const char *bn, int64_t *shape, int32_t *nd)
{
    if (nn_broadcast(a->shape, a->ndim, b->shape, b->ndim, shape, nd))
        return ACLNN_SUCCESS;
    char s1[160], s2[160];
    return NN_PARAM("%s: the shapes of %s %s and %s %s cannot be broadcast together", api, an,
                    nn_shape_str(s1, sizeof s1, a->shape, a->ndim), bn, nn_shape_str(s2, sizeof s2, b->shape, b->ndim));
}

NN_API aclnnStatus aclnnMseLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target, int64_t reduction,
                                                aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnMseLoss";
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *b, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "target", target, false, &b)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if ((rc = nn_pw_check_float(api, "self", a)) || (rc = nn_pw_check_float(api, "target", b)) ||
        (rc = nn_pw_check_float(api, "out", o)) || (rc = check_reduction(api, reduction)))
        return rc;
    int64_t shape[NN_MAX_DIMS];
    int32_t nd;
    if ((rc = broadcast2(api, a, "self", b, "target", shape, &nd)))
        return rc;
    if (nd > NN_MAX_DIMS)
        return NN_PARAM("%s: more than %d dims", api, NN_MAX_DIMS);
    aclDataType prom = nn_promote(a->dtype, b->dtype);
    if (!nn_can_cast(prom, o->dtype))
        return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api, nn_dtype_name(prom),
                        nn_dtype_name(o->dtype));
    if (reduction == RED_NONE ? !nn_same_shape(o, shape, nd) : o->numel != 1 || o->ndim != 0) {
        char s2[160];
        return NN_PARAM("%s: out has shape %s but the loss has shape %s", api, NN_SHAPE(o),
                        reduction == RED_NONE ? nn_shape_str(s2, sizeof s2, shape, nd) : "[]");
    }
    nn_exec_t *ex = nn_exec_new(api, mse_run, ACLSIM_ENGINE_VECTOR, sizeof(mse_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    mse_params_t *p = (mse_params_t *)ex->params;
    p->reduction = (int32_t)reduction;
    p->ct = nn_pw_ct(nn_promote(prom, o->dtype));
    p->ndim = nd;
    memcpy(p->shape, shape, sizeof shape);
    p->numel = 1;
    for (int32_t i = 0; i < nd; i++)
        p->numel *= shape[i];
    nn_exec_add(ex, a, "self", false);
    nn_exec_add(ex, b, "target", false);
    int32_t ov = nn_exec_add(ex, o, "out", true);
    if ((rc = nn_check_output_overlap(api, ex, ov, reduction == RED_NONE))) {
        free(ex);
        return rc;
    }
    if (reduction != RED_NONE)
        ex->ws_size = (uint64_t)(p->numel + (p->numel + LOSS_CHUNK - 1) / LOSS_CHUNK) * sizeof(double);
    ex->cost_ns = (uint64_t)(p->numel / 2);
    ex->cores = (uint32_t)(p->numel / (1024 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnMseLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnMseLoss", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnMseLossBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                        const aclTensor *target, int64_t reduction, aclTensor *out,
                                                        uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnMseLossBackward";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *a, *b, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOutput", gradOutput, false, &g)) ||
        (rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "target", target, false, &b)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if ((rc = check_reduction(api, reduction)))
        return rc;
    int64_t s1[NN_MAX_DIMS], shape[NN_MAX_DIMS];
    int32_t n1, nd;
    if ((rc = broadcast2(api, a, "self", b, "target", s1, &n1)))
        return rc;
    if (!nn_broadcast(g->shape, g->ndim, s1, n1, shape, &nd)) {
        char t1[160], t2[160];
        return NN_PARAM("%s: gradOutput of shape %s does not broadcast with the shape %s of self and target", api,
                        nn_shape_str(t1, sizeof t1, g->shape, g->ndim), nn_shape_str(t2, sizeof t2, s1, n1));
    }
    if (nd > NN_MAX_DIMS)
        return NN_PARAM("%s: more than %d dims", api, NN_MAX_DIMS);
    if (!nn_same_shape(o, shape, nd)) {
        char t1[160], t2[160];
        return NN_PARAM("%s: out has shape %s but the broadcast shape of gradOutput, self and target is %s", api,
                        nn_shape_str(t1, sizeof t1, o->shape, o->ndim), nn_shape_str(t2, sizeof t2, shape, nd));
    }
    int64_t numel = 1;
    for (int32_t i = 0; i < n1; i++)
        numel *= s1[i];
    double params[1] = {reduction == RED_MEAN ? 2.0 / (double)(numel ? numel : 1) : 2.0};
    const nn_tensor_t *in[3] = {g, a, b};
    static const char *const names[3] = {"gradOutput", "self", "target"};
    aclDataType prom = nn_promote(nn_promote(g->dtype, a->dtype), b->dtype);
    if (nn_is_float(g->dtype) && nn_is_float(a->dtype) && nn_is_float(b->dtype) && !nn_can_cast(prom, o->dtype))
        return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api, nn_dtype_name(prom),
                        nn_dtype_name(o->dtype));
    return nn_pw_make(api, &k_mse_bw, nn_pw_ct(nn_promote(prom, o->dtype)), 3, in, names, o, "out", params,
                      sizeof params, workspaceSize, executor);
}

NN_API aclnnStatus aclnnMseLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                        aclrtStream stream)
{
    return nn_launch("aclnnMseLossBackward", workspace, workspaceSize, executor, stream);
}
