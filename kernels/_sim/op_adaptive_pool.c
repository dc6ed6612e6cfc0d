/* canna simulator op library: adaptive average pooling, aclnnAdaptiveAvgPool2d and
 * aclnnAdaptiveAvgPool2dBackward (prototypes: hicann/ops-nn pooling/adaptive_avg_pool2d and
 * pooling/adaptive_avg_pool2d_grad, op_api/aclnn_*.h).
 *
 * self is [C, H, W] or [N, C, H, W]; output cell (i, j) of an [oh, ow] output averages rows
 * [floor(i H / oh), ceil((i + 1) H / oh)) and columns [floor(j W / ow), ceil((j + 1) W / ow)), PyTorch's
 * rule (aten/src/ATen/native/AdaptiveAveragePooling.cpp start_index / end_index), so windows of
 * neighbouring cells may overlap when the sizes do not divide. The backward spreads each gradient
 * cell evenly over its window (summing where windows overlap). Planes (the N * C leading
 * positions) are spread over the AI-core blocks; sums accumulate in double. */
#include "opsim.h"

#pragma GCC optimize("O3")

static inline int64_t ap_start(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
static inline int64_t ap_end(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

typedef struct ap_params {
    bool backward;
    int64_t planes, C, H, W, OH, OW;
    /* element strides over (n, c, h, w) of self / gradOutput-or-out / out */
    int64_t xs[4], gs[4], os[4];
    int32_t vx, vg, vo;
} ap_params_t;

/* strides over (n, c, h, w) of a 3-D or 4-D view (n stride 0 for 3-D) */
static void ap_strides(const nn_view_t *v, int64_t s[4])
{
    if (v->ndim == 3) {
        s[0] = 0;
        s[1] = v->stride[0];
        s[2] = v->stride[1];
        s[3] = v->stride[2];
    } else {
        for (int i = 0; i < 4; i++)
            s[i] = v->stride[i];
    }
}

typedef struct ap_job {
    nn_exec_t *ex;
    ap_params_t *p;
    int64_t per;
} ap_job_t;

static char *ap_plane(const nn_view_t *v, const int64_t *s, const ap_params_t *p, int64_t pl)
{
    int64_t n = pl / p->C, c = pl % p->C;
    return v->data + (n * s[0] + c * s[1]) * (int64_t)nn_dtype_size(v->dtype);
}

static aclError ap_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    ap_job_t *j = arg;
    nn_exec_t *ex = j->ex;
    ap_params_t *p = j->p;
    int64_t p0 = (int64_t)bi * j->per, p1 = p0 + j->per;
    if (p1 > p->planes)
        p1 = p->planes;
    if (p0 >= p1)
        return ACL_SUCCESS;
    int64_t H = p->H, W = p->W, OH = p->OH, OW = p->OW;
    /* a plane of self (forward) or of the gradient of self (backward), and one of the pooled side */
    double *big = malloc((size_t)(H * W > 0 ? H * W : 1) * sizeof(double));
    double *small = malloc((size_t)(OH * OW > 0 ? OH * OW : 1) * sizeof(double));
    if (!big || !small) {
        free(big);
        free(small);
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    }
    const nn_view_t *vo = &ex->v[p->vo];
    for (int64_t pl = p0; pl < p1; pl++) {
        if (!p->backward) {
            const nn_view_t *vx = &ex->v[p->vx];
            char *xp = ap_plane(vx, p->xs, p, pl);
            for (int64_t h = 0; h < H; h++)
                nn_load(CT_F64, big + h * W, xp + h * p->xs[2] * (int64_t)nn_dtype_size(vx->dtype), p->xs[3],
                        vx->dtype, W);
            for (int64_t i = 0; i < OH; i++) {
                int64_t h0 = ap_start(i, OH, H), h1 = ap_end(i, OH, H);
                for (int64_t jj = 0; jj < OW; jj++) {
                    int64_t w0 = ap_start(jj, OW, W), w1 = ap_end(jj, OW, W);
                    double s = 0;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++)
                            s += big[h * W + w];
                    small[i * OW + jj] = s / (double)((h1 - h0) * (w1 - w0));
                }
            }
            char *op = ap_plane(vo, p->os, p, pl);
            for (int64_t i = 0; i < OH; i++)
                nn_store(CT_F64, op + i * p->os[2] * (int64_t)nn_dtype_size(vo->dtype), p->os[3], vo->dtype,
                         small + i * OW, OW);
        } else {
            const nn_view_t *vg = &ex->v[p->vg];
            char *gp = ap_plane(vg, p->gs, p, pl);
            for (int64_t i = 0; i < OH; i++)
                nn_load(CT_F64, small + i * OW, gp + i * p->gs[2] * (int64_t)nn_dtype_size(vg->dtype), p->gs[3],
                        vg->dtype, OW);
            memset(big, 0, (size_t)(H * W) * sizeof(double));
            for (int64_t i = 0; i < OH; i++) {
                int64_t h0 = ap_start(i, OH, H), h1 = ap_end(i, OH, H);
                for (int64_t jj = 0; jj < OW; jj++) {
                    int64_t w0 = ap_start(jj, OW, W), w1 = ap_end(jj, OW, W);
                    double g = small[i * OW + jj] / (double)((h1 - h0) * (w1 - w0));
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++)
                            big[h * W + w] += g;
                }
            }
            char *op = ap_plane(vo, p->os, p, pl);
            for (int64_t h = 0; h < H; h++)
                nn_store(CT_F64, op + h * p->os[2] * (int64_t)nn_dtype_size(vo->dtype), p->os[3], vo->dtype,
                         big + h * W, W);
        }
    }
    free(big);
    free(small);
    return ACL_SUCCESS;
}

static aclError ap_run(nn_exec_t *ex)
{
    ap_params_t *p = (ap_params_t *)ex->params;
    if (!p->planes || !ex->v[p->vo].numel)
        return ACL_SUCCESS;
    ap_job_t j = {ex, p, 0};
    uint32_t nb = nn_blocks(ex, p->planes * (p->H * p->W + p->OH * p->OW), NN_BLOCK_GRAIN);
    if ((int64_t)nb > p->planes)
        nb = (uint32_t)p->planes;
    j.per = (p->planes + nb - 1) / nb;
    nb = (uint32_t)((p->planes + j.per - 1) / j.per);
    return nn_parallel(ex, nb, ap_block, &j);
}

static aclnnStatus ap_tensor(const char *api, const char *name, const nn_tensor_t *t)
{
    if (!nn_is_float(t->dtype))
        return NN_PARAM("%s: %s has dtype %s (expected float32, float16, bfloat16 or float64)", api, name,
                        nn_dtype_name(t->dtype));
    if (t->ndim != 3 && t->ndim != 4) {
        char s[160];
        return NN_PARAM("%s: %s must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape %s", api, name,
                        nn_shape_str(s, sizeof s, t->shape, t->ndim));
    }
    return ACLNN_SUCCESS;
}

/* t must be shaped like self with its last two dims (oh, ow) */
static aclnnStatus ap_shape(const char *api, const char *name, const nn_tensor_t *t, const nn_tensor_t *x, int64_t oh,
                            int64_t ow)
{
    int64_t want[4];
    memcpy(want, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    want[x->ndim - 2] = oh;
    want[x->ndim - 1] = ow;
    if (nn_same_shape(t, want, x->ndim))
        return ACLNN_SUCCESS;
    char s1[160], s2[160];
    return NN_PARAM("%s: %s has shape %s, expected %s", api, name, nn_shape_str(s1, sizeof s1, t->shape, t->ndim),
                    nn_shape_str(s2, sizeof s2, want, x->ndim));
}

static aclnnStatus ap_make(const char *api, bool backward, const nn_tensor_t *g, const nn_tensor_t *x,
                           const nn_tensor_t *o, int64_t oh, int64_t ow, uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    nn_exec_t *ex = nn_exec_new(api, ap_run, ACLSIM_ENGINE_VECTOR, sizeof(ap_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    ap_params_t *p = (ap_params_t *)ex->params;
    p->backward = backward;
    p->vg = -1;
    if (backward)   /* parameter order */
        p->vg = nn_exec_add(ex, g, "gradOutput", false);
    p->vx = nn_exec_add(ex, x, "self", false);
    p->vo = nn_exec_add(ex, o, "out", true);
    int32_t nd = x->ndim;
    p->C = x->shape[nd - 3];
    p->planes = (nd == 4 ? x->shape[0] : 1) * p->C;
    p->H = x->shape[nd - 2];
    p->W = x->shape[nd - 1];
    p->OH = oh;
    p->OW = ow;
    ap_strides(&ex->v[p->vx], p->xs);
    ap_strides(&ex->v[p->vo], p->os);
    if (backward)
        ap_strides(&ex->v[p->vg], p->gs);
    aclnnStatus rc = nn_check_output_overlap(api, ex, p->vo, false);
    if (rc) {
        free(ex);
        return rc;
    }
    int64_t work = p->planes * (p->H * p->W + p->OH * p->OW);
    ex->cost_ns = (uint64_t)(work * 2);
    ex->cores = (uint32_t)(work / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnAdaptiveAvgPool2dGetWorkspaceSize(const aclTensor *self, const aclIntArray *outputSize,
                                                          aclTensor *out, uint64_t *workspaceSize,
                                                          aclOpExecutor **executor)
{
    static const char api[] = "aclnnAdaptiveAvgPool2d";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *o;
    const nn_intarray_t *os;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &x)) || (rc = ap_tensor(api, "self", x)) ||
        (rc = nn_intarray_arg(api, "outputSize", outputSize, false, &os)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)) || (rc = ap_tensor(api, "out", o)))
        return rc;
    if (os->n != 2)
        return NN_PARAM("%s: outputSize must have 2 values (oh, ow), got %llu", api, (unsigned long long)os->n);
    if (os->v[0] < 0 || os->v[1] < 0)
        return NN_PARAM("%s: outputSize must be >= 0, got [%lld, %lld]", api, (long long)os->v[0], (long long)os->v[1]);
    int32_t nd = x->ndim;
    for (int32_t d = (nd == 4 ? 1 : 0); d < nd; d++)
        if (x->shape[d] == 0) {
            char s[160];
            return NN_PARAM("%s: self of shape %s has an empty non-batch dim %d", api,
                            nn_shape_str(s, sizeof s, x->shape, x->ndim), d);
        }
    if ((rc = ap_shape(api, "out", o, x, os->v[0], os->v[1])))
        return rc;
    return ap_make(api, false, NULL, x, o, os->v[0], os->v[1], workspaceSize, executor);
}

NN_API aclnnStatus aclnnAdaptiveAvgPool2d(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream)
{
    return nn_launch("aclnnAdaptiveAvgPool2d", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                                  aclTensor *out, uint64_t *workspaceSize,
                                                                  aclOpExecutor **executor)
{
    static const char api[] = "aclnnAdaptiveAvgPool2dBackward";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *x, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOutput", gradOutput, false, &g)) || (rc = ap_tensor(api, "gradOutput", g)) ||
        (rc = nn_tensor_arg(api, "self", self, false, &x)) || (rc = ap_tensor(api, "self", x)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)) || (rc = ap_tensor(api, "out", o)))
        return rc;
    if (g->ndim != x->ndim) {
        char s1[160], s2[160];
        return NN_PARAM("%s: gradOutput of shape %s and self of shape %s must have the same number of dims", api,
                        nn_shape_str(s1, sizeof s1, g->shape, g->ndim), nn_shape_str(s2, sizeof s2, x->shape, x->ndim));
    }
    int32_t nd = x->ndim;
    int64_t oh = g->shape[nd - 2], ow = g->shape[nd - 1];
    if ((rc = ap_shape(api, "gradOutput", g, x, oh, ow)) || (rc = ap_shape(api, "out", o, x, x->shape[nd - 2],
                                                                          x->shape[nd - 1])))
        return rc;
    return ap_make(api, true, g, x, o, oh, ow, workspaceSize, executor);
}

NN_API aclnnStatus aclnnAdaptiveAvgPool2dBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                  aclrtStream stream)
{
    return nn_launch("aclnnAdaptiveAvgPool2dBackward", workspace, workspaceSize, executor, stream);
}
