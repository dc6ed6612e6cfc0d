/* canna simulator op library: Convolution (2-D, stride / padding / dilation / groups) and its
 * backward, MaxPool2dWithIndices and its backward, NLLLoss / NLLLoss2d and their backward,
 * CrossEntropyLoss and CrossEntropyLossGrad.
 *
 * Convolutions are im2col + GEMM through the BLAS: the input and weight are packed into contiguous
 * compute-type copies in the workspace, each block takes (image, group, column tile) items and
 * multiplies the group's weight by its column tile. The backward computes gradInput with
 * weight^T x gradOutput followed by col2im per (image, group), gradWeight with per-block partial
 * sums of gradOutput x col^T, gradBias as a sum over images and positions. */
#include "opsim.h"

#include <tgmath.h>

#pragma GCC optimize("O3")

static aclnnStatus float_t_(const char *api, const char *name, const nn_tensor_t *t)
{
    if (!nn_is_float(t->dtype))
        return NN_PARAM("%s: %s has dtype %s (expected float32, float16, bfloat16 or float64)", api, name,
                        nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

/* a 2-value int array parameter (1 value broadcasts); false with a message on error */
static aclnnStatus pair(const char *api, const char *name, const nn_intarray_t *a, int64_t dflt, int64_t minv,
                        int64_t out[2])
{
    if (!a || a->n == 0) {
        out[0] = out[1] = dflt;
        return ACLNN_SUCCESS;
    }
    if (a->n != 1 && a->n != 2)
        return NN_PARAM("%s: %s must have 1 or 2 values for a 2-D op, got %llu", api, name, (unsigned long long)a->n);
    out[0] = a->v[0];
    out[1] = a->n == 2 ? a->v[1] : a->v[0];
    for (int i = 0; i < 2; i++)
        if (out[i] < minv)
            return NN_PARAM("%s: %s values must be >= %lld, got [%lld, %lld]", api, name, (long long)minv,
                            (long long)out[0], (long long)out[1]);
    return ACLNN_SUCCESS;
}

/* ================================================================== convolution */

typedef struct cv_params {
    int32_t ct;
    int64_t N, C, H, W, O, KH, KW, OH, OW, G, Cg, Og, Kg;   /* Kg = Cg*KH*KW */
    int64_t sh, sw, ph, pw, dh, dw;
    int32_t vx, vw, vb, vy;        /* forward: input, weight, bias, output */
    int32_t vgo, vgi, vgw, vgb;    /* backward: gradOutput, gradInput, gradWeight, gradBias */
    bool mask[3];
    size_t off_x, off_w, off_go;   /* packed copies in the workspace */
    int64_t tile, ntiles;          /* column tiles (forward) */
} cv_params_t;

/* the output columns ow in [*lo, *hi) whose input column ow*sw - pw + kw*dw lies inside [0, W) */
static inline void cv_valid_ow(const cv_params_t *p, int64_t kw, int64_t *lo, int64_t *hi)
{
    int64_t off = kw * p->dw - p->pw;   /* iw = ow*sw + off */
    int64_t a = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;
    int64_t b = p->W - 1 - off < 0 ? 0 : (p->W - 1 - off) / p->sw + 1;
    if (b > p->OW)
        b = p->OW;
    if (a > b)
        a = b;
    *lo = a;
    *hi = b;
}

/* im2col of image n, group g, columns [c0, c0+nc) of the OH*OW output positions into col[Kg][nc];
 * walks output rows, so each (kh, kw) row is a zero run, a (strided) copy and a zero run per output
 * row */
#define IM2COL(T)                                                                                   \
    static void im2col_##T(const cv_params_t *p, const T *x, int64_t n, int64_t g, int64_t c0, int64_t nc, T *col) \
    {                                                                                              \
        for (int64_t ci = 0; ci < p->Cg; ci++) {                                                   \
            const T *plane = x + ((n * p->C) + g * p->Cg + ci) * p->H * p->W;                      \
            for (int64_t kh = 0; kh < p->KH; kh++)                                                 \
                for (int64_t kw = 0; kw < p->KW; kw++) {                                           \
                    T *row = col + ((ci * p->KH + kh) * p->KW + kw) * nc;                          \
                    int64_t lo, hi, off = kw * p->dw - p->pw;                                      \
                    cv_valid_ow(p, kw, &lo, &hi);                                                  \
                    for (int64_t pos = c0; pos < c0 + nc;) {                                       \
                        int64_t oh = pos / p->OW, ow0 = pos % p->OW;                               \
                        int64_t ow1 = p->OW < ow0 + (c0 + nc - pos) ? p->OW : ow0 + (c0 + nc - pos); \
                        T *r = row + (pos - c0);   /* r[ow - ow0] for ow in [ow0, ow1) */          \
                        int64_t ih = oh * p->sh - p->ph + kh * p->dh;                              \
                        if (ih < 0 || ih >= p->H) {                                                \
                            for (int64_t ow = ow0; ow < ow1; ow++)                                 \
                                r[ow - ow0] = (T)0;                                                \
                        } else {                                                                   \
                            const T *src = plane + ih * p->W;   /* src[ow*sw + off] */            \
                            int64_t a = lo > ow0 ? lo : ow0, b = hi < ow1 ? hi : ow1;              \
                            if (a > b)                                                             \
                                a = b;                                                             \
                            for (int64_t ow = ow0; ow < a; ow++)                                   \
                                r[ow - ow0] = (T)0;                                                \
                            if (p->sw == 1)                                                        \
                                for (int64_t ow = a; ow < b; ow++)                                 \
                                    r[ow - ow0] = src[ow + off];                                   \
                            else                                                                   \
                                for (int64_t ow = a; ow < b; ow++)                                 \
                                    r[ow - ow0] = src[ow * p->sw + off];                           \
                            for (int64_t ow = b; ow < ow1; ow++)                                   \
                                r[ow - ow0] = (T)0;                                                \
                        }                                                                          \
                        pos += ow1 - ow0;                                                          \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void col2im_##T(const cv_params_t *p, const T *col, int64_t nc, T *dx /* [Cg][H*W] */)   \
    {                                                                                              \
        for (int64_t ci = 0; ci < p->Cg; ci++)                                                     \
            for (int64_t kh = 0; kh < p->KH; kh++)                                                 \
                for (int64_t kw = 0; kw < p->KW; kw++) {                                           \
                    const T *row = col + ((ci * p->KH + kh) * p->KW + kw) * nc;                    \
                    T *plane = dx + ci * p->H * p->W;                                              \
                    int64_t lo, hi, off = kw * p->dw - p->pw;                                      \
                    cv_valid_ow(p, kw, &lo, &hi);                                                  \
                    for (int64_t oh = 0; oh * p->OW < nc; oh++) {                                  \
                        int64_t ih = oh * p->sh - p->ph + kh * p->dh;                              \
                        if (ih < 0 || ih >= p->H)                                                  \
                            continue;                                                              \
                        const T *r = row + oh * p->OW;                                             \
                        T *dst = plane + ih * p->W;   /* dst[ow*sw + off] */                      \
                        int64_t b = hi < nc - oh * p->OW ? hi : nc - oh * p->OW;                   \
                        for (int64_t ow = lo; ow < b; ow++)                                        \
                            dst[ow * p->sw + off] += r[ow];                                        \
                    }                                                                              \
                }                                                                                  \
    }
IM2COL(float)
IM2COL(double)

static void gemm(int ct, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double beta, const void *a, int64_t lda,
                 const void *b, int64_t ldb, void *c, int64_t ldc)
{
    if (ct == CT_F32)
        nn_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, (float)beta, c, ldc);
    else
        nn_dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

/* a view that already is a contiguous array of the compute type (C order) can be used in place of
 * its packed copy */
static bool view_contiguous(const nn_view_t *v)
{
    int64_t expect = 1;
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->stride[d] != expect)
            return false;
        expect *= v->shape[d];
    }
    return true;
}

static bool cv_dense(const nn_view_t *v, int ct)
{
    return v->dtype == (ct == CT_F32 ? ACL_FLOAT : ACL_DOUBLE) && view_contiguous(v);
}

/* the operand as a contiguous compute-type array: the view itself when dense, else packed into buf */
static aclError cv_operand(nn_exec_t *ex, int ct, char *buf, int32_t vi, const char **out)
{
    const nn_view_t *v = &ex->v[vi];
    if (cv_dense(v, ct)) {
        *out = v->data;
        return ACL_SUCCESS;
    }
    *out = buf;
    return nn_pack(ex, ct, buf, v);
}

/* sum of n values in double with 16 independent partial sums (one chain of dependent additions
 * would leave the adder waiting on its own latency) */
#define CV_SUM(T)                                                                                   \
    static __attribute__((target_clones("avx512f", "avx2", "default"))) double cv_sum_##T(const T *r, int64_t n) \
    {                                                                                              \
        double a[16] = {0};                                                                        \
        int64_t i = 0;                                                                             \
        for (; i + 16 <= n; i += 16)                                                               \
            for (int k = 0; k < 16; k++)                                                           \
                a[k] += (double)r[i + k];                                                          \
        for (; i < n; i++)                                                                         \
            a[0] += (double)r[i];                                                                  \
        for (int w = 8; w >= 1; w /= 2)                                                            \
            for (int k = 0; k < w; k++)                                                            \
                a[k] += a[k + w];                                                                  \
        return a[0];                                                                               \
    }
CV_SUM(float)
CV_SUM(double)

typedef struct cv_job {
    nn_exec_t *ex;
    const cv_params_t *p;
    const char *X, *Wt, *GO;       /* packed input / weight / gradOutput (compute type) */
    double *bias;                  /* forward bias as double[O] */
    bool direct;                   /* forward: the output is dense in the compute type; GEMM into it */
    char *gw_partial;              /* backward: [nb][O*Kg] compute type */
    double *gb_partial;            /* backward: [nb][O] */
    int64_t items, per;
} cv_job_t;

static aclError cv_fwd_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    cv_job_t *j = arg;
    const cv_params_t *p = j->p;
    const nn_view_t *y = &j->ex->v[p->vy];
    size_t csz = nn_ct_size(p->ct), ysz = nn_dtype_size(y->dtype);
    int64_t t0 = (int64_t)bi * j->per, t1 = t0 + j->per;
    if (t1 > j->items)
        t1 = j->items;
    if (t0 >= t1)
        return ACL_SUCCESS;
    char *col = malloc((size_t)(p->Kg * p->tile + (j->direct ? 0 : p->Og * p->tile)) * csz + 64);
    if (!col)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", j->ex->api);
    char *res = col + (size_t)(p->Kg * p->tile) * csz;
    int64_t L = p->OH * p->OW;
    for (int64_t t = t0; t < t1; t++) {
        int64_t tile = t % p->ntiles, ng = t / p->ntiles, g = ng % p->G, n = ng / p->G;
        int64_t c0 = tile * p->tile, nc = L - c0 < p->tile ? L - c0 : p->tile;
        if (p->ct == CT_F32)
            im2col_float(p, (const float *)j->X, n, g, c0, nc, (float *)col);
        else
            im2col_double(p, (const double *)j->X, n, g, c0, nc, (double *)col);
        if (j->direct) {   /* y[n, g*Og + o, c0 + i] = bias + W_g x col, straight into the output */
            char *c = y->data + (size_t)((n * p->O + g * p->Og) * L + c0) * csz;
            for (int64_t o = 0; o < p->Og && j->bias; o++) {
                double b = j->bias[g * p->Og + o];
                if (p->ct == CT_F32) {
                    float *rr = (float *)c + o * L;
                    for (int64_t i = 0; i < nc; i++)
                        rr[i] = (float)b;
                } else {
                    double *rr = (double *)c + o * L;
                    for (int64_t i = 0; i < nc; i++)
                        rr[i] = b;
                }
            }
            gemm(p->ct, false, false, p->Og, nc, p->Kg, j->bias ? 1 : 0, j->Wt + (size_t)(g * p->Og * p->Kg) * csz,
                 p->Kg, col, nc, c, L);
            continue;
        }
        /* res[Og][nc] = W_g[Og][Kg] x col[Kg][nc] */
        gemm(p->ct, false, false, p->Og, nc, p->Kg, 0, j->Wt + (size_t)(g * p->Og * p->Kg) * csz, p->Kg, col, nc, res,
             nc);
        for (int64_t o = 0; o < p->Og; o++) {
            int64_t oc = g * p->Og + o;
            char *r = res + (size_t)(o * nc) * csz;
            if (j->bias) {
                if (p->ct == CT_F32) {
                    float b = (float)j->bias[oc], *rr = (float *)r;
                    for (int64_t i = 0; i < nc; i++)
                        rr[i] += b;
                } else {
                    double b = j->bias[oc], *rr = (double *)r;
                    for (int64_t i = 0; i < nc; i++)
                        rr[i] += b;
                }
            }
            /* scatter row o into y[n, oc, positions c0..c0+nc) (row by row of OW) */
            int64_t pos = c0;
            while (pos < c0 + nc) {
                int64_t oh = pos / p->OW, ow = pos % p->OW, run = p->OW - ow;
                if (run > c0 + nc - pos)
                    run = c0 + nc - pos;
                char *dst = y->data + (n * y->stride[0] + oc * y->stride[1] + oh * y->stride[2] + ow * y->stride[3]) *
                                          (int64_t)ysz;
                nn_store(p->ct, dst, y->stride[3], y->dtype, r + (size_t)(pos - c0) * csz, run);
                pos += run;
            }
        }
    }
    free(col);
    return ACL_SUCCESS;
}

static aclError cv_fwd_run(nn_exec_t *ex)
{
    cv_params_t *p = (cv_params_t *)ex->params;
    if (!ex->v[p->vy].numel)
        return ACL_SUCCESS;
    if (nn_blas_ready(ex->api))
        return ACLNN_ERR_INNER_FIND_KERNEL_ERROR;
    cv_job_t j;
    memset(&j, 0, sizeof j);
    j.ex = ex;
    j.p = p;
    aclError rc;
    if ((rc = cv_operand(ex, p->ct, ex->ws + p->off_x, p->vx, &j.X)) ||
        (rc = cv_operand(ex, p->ct, ex->ws + p->off_w, p->vw, &j.Wt)))
        return rc;
    j.direct = cv_dense(&ex->v[p->vy], p->ct);
    if (p->vb >= 0) {
        j.bias = malloc((size_t)p->O * sizeof(double));
        if (!j.bias)
            return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
        nn_pack_rows(CT_F64, j.bias, &ex->v[p->vb], 0, nn_rows(&ex->v[p->vb]));
    }
    j.items = p->N * p->G * p->ntiles;
    uint32_t nb = nn_blocks(ex, j.items, 1);
    j.per = (j.items + nb - 1) / nb;
    nb = (uint32_t)((j.items + j.per - 1) / j.per);
    rc = nn_parallel(ex, nb, cv_fwd_block, &j);
    free(j.bias);
    return rc;
}

/* shared argument checks of forward and backward; fills p's geometry */
static aclnnStatus cv_geometry(const char *api, cv_params_t *p, const nn_tensor_t *x, const nn_tensor_t *w,
                               const nn_intarray_t *stride, const nn_intarray_t *padding,
                               const nn_intarray_t *dilation, bool transposed, int64_t groups)
{
    aclnnStatus rc;
    if (transposed)
        return NN_PARAM("%s: transposed convolution is not supported by the simulator", api);
    if (x->ndim != 4)
        return NN_PARAM("%s: input must be 4-D [N, C, H, W], got %dD (the simulator supports 2-D convolution)", api,
                        x->ndim);
    if (w->ndim != 4)
        return NN_PARAM("%s: weight must be 4-D [O, C/groups, KH, KW], got %dD", api, w->ndim);
    int64_t s[2] = {1, 1}, pd[2] = {0, 0}, d[2] = {1, 1};
    if ((rc = pair(api, "stride", stride, 1, 1, s)) || (rc = pair(api, "padding", padding, 0, 0, pd)) ||
        (rc = pair(api, "dilation", dilation, 1, 1, d)))
        return rc;
    if (groups < 1)
        return NN_PARAM("%s: groups must be >= 1, got %lld", api, (long long)groups);
    p->N = x->shape[0]; p->C = x->shape[1]; p->H = x->shape[2]; p->W = x->shape[3];
    p->O = w->shape[0]; p->KH = w->shape[2]; p->KW = w->shape[3];
    p->G = groups;
    if (p->C % groups || p->O % groups)
        return NN_PARAM("%s: input channels %lld and output channels %lld must both be divisible by groups %lld", api,
                        (long long)p->C, (long long)p->O, (long long)groups);
    p->Cg = p->C / groups;
    p->Og = p->O / groups;
    if (w->shape[1] != p->Cg) {
        char s1[160];
        return NN_PARAM("%s: weight of shape %s expects %lld input channels per group, but input has %lld channels "
                        "and %lld groups", api, nn_shape_str(s1, sizeof s1, w->shape, w->ndim), (long long)w->shape[1],
                        (long long)p->C, (long long)groups);
    }
    p->sh = s[0]; p->sw = s[1]; p->ph = pd[0]; p->pw = pd[1]; p->dh = d[0]; p->dw = d[1];
    int64_t eh = p->dh * (p->KH - 1) + 1, ew = p->dw * (p->KW - 1) + 1;
    if (p->H + 2 * p->ph < eh || p->W + 2 * p->pw < ew)
        return NN_PARAM("%s: the kernel (%lld x %lld, dilated %lld x %lld) is larger than the padded input "
                        "(%lld x %lld)", api, (long long)p->KH, (long long)p->KW, (long long)eh, (long long)ew,
                        (long long)(p->H + 2 * p->ph), (long long)(p->W + 2 * p->pw));
    p->OH = (p->H + 2 * p->ph - eh) / p->sh + 1;
    p->OW = (p->W + 2 * p->pw - ew) / p->sw + 1;
    p->Kg = p->Cg * p->KH * p->KW;
    p->ct = x->dtype == ACL_DOUBLE ? CT_F64 : CT_F32;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclnnConvolutionGetWorkspaceSize(const aclTensor *input, const aclTensor *weight,
                                                    const aclTensor *bias, const aclIntArray *stride,
                                                    const aclIntArray *padding, const aclIntArray *dilation,
                                                    bool transposed, const aclIntArray *outputPadding,
                                                    const int64_t groups, aclTensor *output, int8_t cubeMathType,
                                                    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnConvolution";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *w, *b, *y;
    const nn_intarray_t *st, *pd, *dl, *op;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = float_t_(api, "input", x)) ||
        (rc = nn_tensor_arg(api, "weight", weight, false, &w)) || (rc = float_t_(api, "weight", w)) ||
        (rc = nn_tensor_arg(api, "bias", bias, true, &b)) || (rc = nn_intarray_arg(api, "stride", stride, false, &st)) ||
        (rc = nn_intarray_arg(api, "padding", padding, false, &pd)) ||
        (rc = nn_intarray_arg(api, "dilation", dilation, false, &dl)) ||
        (rc = nn_intarray_arg(api, "outputPadding", outputPadding, true, &op)) ||
        (rc = nn_tensor_arg(api, "output", output, false, &y)) || (rc = float_t_(api, "output", y)))
        return rc;
    if (cubeMathType < 0 || cubeMathType > 4)
        return NN_PARAM("%s: cubeMathType must be 0..4, got %d", api, cubeMathType);
    if (w->dtype != x->dtype || y->dtype != x->dtype || (b && b->dtype != x->dtype && !nn_is_float(b->dtype)))
        return NN_PARAM("%s: input, weight and output must have the same dtype, got %s, %s and %s", api,
                        nn_dtype_name(x->dtype), nn_dtype_name(w->dtype), nn_dtype_name(y->dtype));
    nn_exec_t *ex = nn_exec_new(api, cv_fwd_run, ACLSIM_ENGINE_CUBE, sizeof(cv_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    cv_params_t *p = (cv_params_t *)ex->params;
    if ((rc = cv_geometry(api, p, x, w, st, pd, dl, transposed, groups))) {
        free(ex);
        return rc;
    }
    if (b && (b->ndim != 1 || b->shape[0] != p->O)) {
        int64_t O = p->O;
        free(ex);
        return NN_PARAM("%s: bias must have shape [%lld], got %s", api, (long long)O, NN_SHAPE(b));
    }
    int64_t yshape[4] = {p->N, p->O, p->OH, p->OW};
    if (!nn_same_shape(y, yshape, 4)) {
        free(ex);
        char s1[160], s2[160];
        return NN_PARAM("%s: output has shape %s, expected %s", api, nn_shape_str(s1, sizeof s1, y->shape, y->ndim),
                        nn_shape_str(s2, sizeof s2, yshape, 4));
    }
    p->vx = nn_exec_add(ex, x, "input", false);
    p->vw = nn_exec_add(ex, w, "weight", false);
    p->vb = b ? nn_exec_add(ex, b, "bias", false) : -1;
    p->vy = nn_exec_add(ex, y, "output", true);
    if ((rc = nn_check_output_overlap(api, ex, p->vy, false))) {
        free(ex);
        return rc;
    }
    size_t csz = nn_ct_size(p->ct);
    p->off_x = 0;
    p->off_w = nn_align64((size_t)x->numel * csz);
    ex->ws_size = p->off_w + nn_align64((size_t)w->numel * csz);
    int64_t L = p->OH * p->OW;
    p->tile = L < 4096 ? (L ? L : 1) : 4096;
    p->ntiles = (L + p->tile - 1) / p->tile;
    double flops = 2.0 * (double)p->N * (double)p->O * (double)L * (double)p->Kg;
    ex->cost_ns = (uint64_t)(flops / 4);
    ex->cores = (uint32_t)(p->N * p->G * p->ntiles);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnConvolution(void *workspace, const uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return nn_launch("aclnnConvolution", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ convolution backward */

static aclError cv_bwd_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    cv_job_t *j = arg;
    const cv_params_t *p = j->p;
    nn_exec_t *ex = j->ex;
    size_t csz = nn_ct_size(p->ct);
    int64_t L = p->OH * p->OW;
    int64_t t0 = (int64_t)bi * j->per, t1 = t0 + j->per;
    if (t1 > j->items)
        t1 = j->items;
    if (t0 >= t1)
        return ACL_SUCCESS;
    char *col = malloc((size_t)(p->Kg * (L ? L : 1)) * csz + (size_t)(p->Cg * p->H * p->W) * csz + 64);
    if (!col)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    char *dxb = col + (size_t)(p->Kg * (L ? L : 1)) * csz;
    char *gw = j->gw_partial ? j->gw_partial + (size_t)bi * (size_t)(p->O * p->Kg) * csz : NULL;
    for (int64_t t = t0; t < t1; t++) {   /* items: (n, g) */
        int64_t g = t % p->G, n = t / p->G;
        const char *go = j->GO + (size_t)((n * p->O + g * p->Og) * L) * csz;   /* [Og][L] */
        if (j->gb_partial) {
            double *gb = j->gb_partial + (size_t)bi * (size_t)p->O + (size_t)(g * p->Og);
            for (int64_t o = 0; o < p->Og; o++) {
                gb[o] += p->ct == CT_F32 ? cv_sum_float((const float *)go + o * L, L)
                                         : cv_sum_double((const double *)go + o * L, L);
            }
        }
        if (p->mask[1]) {   /* gw_g[Og][Kg] += go[Og][L] x col[Kg][L]^T */
            if (p->ct == CT_F32)
                im2col_float(p, (const float *)j->X, n, g, 0, L, (float *)col);
            else
                im2col_double(p, (const double *)j->X, n, g, 0, L, (double *)col);
            gemm(p->ct, false, true, p->Og, p->Kg, L, 1, go, L, col, L, gw + (size_t)(g * p->Og * p->Kg) * csz, p->Kg);
        }
        if (p->mask[0]) {   /* col[Kg][L] = W_g^T x go; dx = col2im(col) */
            gemm(p->ct, true, false, p->Kg, L, p->Og, 0, j->Wt + (size_t)(g * p->Og * p->Kg) * csz, p->Kg, go, L, col, L);
            memset(dxb, 0, (size_t)(p->Cg * p->H * p->W) * csz);
            if (p->ct == CT_F32)
                col2im_float(p, (const float *)col, L, (float *)dxb);
            else
                col2im_double(p, (const double *)col, L, (double *)dxb);
            const nn_view_t *gi = &ex->v[p->vgi];
            size_t isz = nn_dtype_size(gi->dtype);
            for (int64_t ci = 0; ci < p->Cg; ci++)
                for (int64_t h = 0; h < p->H; h++) {
                    char *dst = gi->data + (n * gi->stride[0] + (g * p->Cg + ci) * gi->stride[1] + h * gi->stride[2]) *
                                               (int64_t)isz;
                    nn_store(p->ct, dst, gi->stride[3], gi->dtype, dxb + (size_t)((ci * p->H + h) * p->W) * csz, p->W);
                }
        }
    }
    free(col);
    return ACL_SUCCESS;
}

static aclError cv_bwd_run(nn_exec_t *ex)
{
    cv_params_t *p = (cv_params_t *)ex->params;
    if (nn_blas_ready(ex->api))
        return ACLNN_ERR_INNER_FIND_KERNEL_ERROR;
    size_t csz = nn_ct_size(p->ct);
    cv_job_t j;
    memset(&j, 0, sizeof j);
    j.ex = ex;
    j.p = p;
    aclError rc;
    if ((rc = cv_operand(ex, p->ct, ex->ws + p->off_x, p->vx, &j.X)) ||
        (rc = cv_operand(ex, p->ct, ex->ws + p->off_w, p->vw, &j.Wt)) ||
        (rc = cv_operand(ex, p->ct, ex->ws + p->off_go, p->vgo, &j.GO)))
        return rc;
    j.items = p->N * p->G;
    uint32_t nb = j.items ? nn_blocks(ex, j.items, 1) : 1;
    j.per = j.items ? (j.items + nb - 1) / nb : 1;
    nb = j.items ? (uint32_t)((j.items + j.per - 1) / j.per) : 1;
    size_t wsz = (size_t)(p->O * p->Kg) * csz;
    if (p->mask[1]) {
        j.gw_partial = calloc((size_t)nb, wsz ? wsz : 1);
        if (!j.gw_partial)
            return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    }
    if (p->mask[2]) {   /* per-block partial bias sums, reduced below */
        j.gb_partial = calloc((size_t)nb * (size_t)(p->O ? p->O : 1), sizeof(double));
        if (!j.gb_partial) {
            free(j.gw_partial);
            return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
        }
    }
    rc = j.items ? nn_parallel(ex, nb, cv_bwd_block, &j) : ACL_SUCCESS;
    if (!rc && p->mask[1]) {
        for (uint32_t b = 1; b < nb; b++) {
            if (p->ct == CT_F32) {
                float *a = (float *)j.gw_partial, *s = (float *)(j.gw_partial + b * wsz);
                for (int64_t i = 0; i < p->O * p->Kg; i++)
                    a[i] += s[i];
            } else {
                double *a = (double *)j.gw_partial, *s = (double *)(j.gw_partial + b * wsz);
                for (int64_t i = 0; i < p->O * p->Kg; i++)
                    a[i] += s[i];
            }
        }
        nn_unpack_rows(p->ct, &ex->v[p->vgw], j.gw_partial, 0, nn_rows(&ex->v[p->vgw]));
    }
    if (!rc && p->mask[2]) {   /* gradBias[o] = sum over n, positions (the blocks' partial sums) */
        for (uint32_t b = 1; b < nb; b++)
            for (int64_t o = 0; o < p->O; o++)
                j.gb_partial[o] += j.gb_partial[(size_t)b * (size_t)p->O + (size_t)o];
        nn_unpack_rows(CT_F64, &ex->v[p->vgb], j.gb_partial, 0, nn_rows(&ex->v[p->vgb]));
    }
    free(j.gw_partial);
    free(j.gb_partial);
    return rc;
}

NN_API aclnnStatus aclnnConvolutionBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *input, const aclTensor *weight, const aclIntArray *biasSizes,
    const aclIntArray *stride, const aclIntArray *padding, const aclIntArray *dilation, bool transposed,
    const aclIntArray *outputPadding, int groups, const aclBoolArray *outputMask, int8_t cubeMathType,
    aclTensor *gradInput, aclTensor *gradWeight, aclTensor *gradBias, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    static const char api[] = "aclnnConvolutionBackward";
    NN_OUTPTRS(api);
    const nn_tensor_t *go, *x, *w, *gi, *gw, *gb;
    const nn_intarray_t *bs, *st, *pd, *dl, *op;
    const nn_boolarray_t *mk;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOutput", gradOutput, false, &go)) || (rc = float_t_(api, "gradOutput", go)) ||
        (rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = float_t_(api, "input", x)) ||
        (rc = nn_tensor_arg(api, "weight", weight, false, &w)) || (rc = float_t_(api, "weight", w)) ||
        (rc = nn_intarray_arg(api, "biasSizes", biasSizes, true, &bs)) ||
        (rc = nn_intarray_arg(api, "stride", stride, false, &st)) ||
        (rc = nn_intarray_arg(api, "padding", padding, false, &pd)) ||
        (rc = nn_intarray_arg(api, "dilation", dilation, false, &dl)) ||
        (rc = nn_intarray_arg(api, "outputPadding", outputPadding, true, &op)) ||
        (rc = nn_boolarray_arg(api, "outputMask", outputMask, false, &mk)) ||
        (rc = nn_tensor_arg(api, "gradInput", gradInput, true, &gi)) ||
        (rc = nn_tensor_arg(api, "gradWeight", gradWeight, true, &gw)) ||
        (rc = nn_tensor_arg(api, "gradBias", gradBias, true, &gb)))
        return rc;
    if (mk->n != 3)
        return NN_PARAM("%s: outputMask must have 3 values, got %llu", api, (unsigned long long)mk->n);
    if (cubeMathType < 0 || cubeMathType > 4)
        return NN_PARAM("%s: cubeMathType must be 0..4, got %d", api, cubeMathType);
    const nn_tensor_t *outs[3] = {gi, gw, gb};
    static const char *const on[3] = {"gradInput", "gradWeight", "gradBias"};
    for (int i = 0; i < 3; i++) {
        if (mk->v[i] && !outs[i])
            return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: outputMask[%d] is true but %s is NULL", api, i, on[i]);
        if (mk->v[i] && (rc = float_t_(api, on[i], outs[i])))
            return rc;
    }
    if (w->dtype != x->dtype || go->dtype != x->dtype)
        return NN_PARAM("%s: gradOutput, input and weight must have the same dtype", api);
    nn_exec_t *ex = nn_exec_new(api, cv_bwd_run, ACLSIM_ENGINE_CUBE, sizeof(cv_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    cv_params_t *p = (cv_params_t *)ex->params;
    if ((rc = cv_geometry(api, p, x, w, st, pd, dl, transposed, groups)))
        goto fail;
    int64_t yshape[4] = {p->N, p->O, p->OH, p->OW};
    if (!nn_same_shape(go, yshape, 4)) {
        char s1[160];
        rc = NN_PARAM("%s: gradOutput has shape %s, expected %s", api, NN_SHAPE(go), nn_shape_str(s1, sizeof s1, yshape, 4));
        goto fail;
    }
    if (mk->v[0] && !nn_same_shape(gi, x->shape, x->ndim)) {
        rc = NN_PARAM("%s: gradInput has shape %s, expected input's shape %s", api, NN_SHAPE(gi), NN_SHAPE(x));
        goto fail;
    }
    if (mk->v[1] && !nn_same_shape(gw, w->shape, w->ndim)) {
        rc = NN_PARAM("%s: gradWeight has shape %s, expected weight's shape %s", api, NN_SHAPE(gw), NN_SHAPE(w));
        goto fail;
    }
    if (mk->v[2] && gb->numel != p->O) {
        rc = NN_PARAM("%s: gradBias has %lld elements, expected %lld (output channels)", api, (long long)gb->numel,
                      (long long)p->O);
        goto fail;
    }
    for (int i = 0; i < 3; i++)
        p->mask[i] = mk->v[i];
    p->vgo = nn_exec_add(ex, go, "gradOutput", false);   /* parameter order */
    p->vx = nn_exec_add(ex, x, "input", false);
    p->vw = nn_exec_add(ex, w, "weight", false);
    p->vgi = mk->v[0] ? nn_exec_add(ex, gi, "gradInput", true) : -1;
    p->vgw = mk->v[1] ? nn_exec_add(ex, gw, "gradWeight", true) : -1;
    p->vgb = mk->v[2] ? nn_exec_add(ex, gb, "gradBias", true) : -1;
    for (int32_t i = 0; i < ex->nview; i++)
        if (ex->v[i].output && (rc = nn_check_output_overlap(api, ex, i, false)))
            goto fail;
    size_t csz = nn_ct_size(p->ct);
    p->off_x = 0;
    p->off_w = nn_align64((size_t)x->numel * csz);
    p->off_go = p->off_w + nn_align64((size_t)w->numel * csz);
    ex->ws_size = p->off_go + nn_align64((size_t)go->numel * csz);
    double flops = 4.0 * (double)p->N * (double)p->O * (double)(p->OH * p->OW) * (double)p->Kg;
    ex->cost_ns = (uint64_t)(flops / 4);
    ex->cores = (uint32_t)(p->N * p->G);
    return nn_exec_finish(ex, workspaceSize, executor);
fail:
    free(ex);
    return rc;
}

NN_API aclnnStatus aclnnConvolutionBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            const aclrtStream stream)
{
    return nn_launch("aclnnConvolutionBackward", workspace, workspaceSize, executor, stream);
}

/* ================================================================== max pooling */

typedef struct mp_params {
    int32_t ct;
    int32_t vx, vy, vi, vg, vgi;   /* forward: self, out, indices; backward: gradOutput, self, indices, gradInput */
    int64_t planes, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
    bool batched;
} mp_params_t;

/* plane index -> (n, c) element offset helper for a 3-D or 4-D view */
static char *plane_at(const nn_view_t *v, bool batched, int64_t C, int64_t plane, int64_t h, int64_t w)
{
    int64_t off;
    if (batched)
        off = (plane / C) * v->stride[0] + (plane % C) * v->stride[1] + h * v->stride[2] + w * v->stride[3];
    else
        off = plane * v->stride[0] + h * v->stride[1] + w * v->stride[2];
    return v->data + off * (int64_t)nn_dtype_size(v->dtype);
}

typedef struct mp_job {
    nn_exec_t *ex;
    const mp_params_t *p;
    int64_t per;
    bool backward;
    bool direct;   /* in the tensors' memory: see mp_fwd_direct / mp_bwd_direct */
} mp_job_t;

/* Backward straight in the tensors' memory: gradOutput and gradInput contiguous float32 (or both
 * float64), indices contiguous int64, and windows that do not overlap (stride >= dilated kernel),
 * so each input element receives at most one gradient (the sum in the tensors' dtype is exact). */
static bool mp_bwd_direct(const nn_exec_t *ex, const mp_params_t *p)
{
    const nn_view_t *g = &ex->v[p->vg], *gi = &ex->v[p->vgi], *ix = &ex->v[p->vi];
    if (g->dtype != gi->dtype || (g->dtype != ACL_FLOAT && g->dtype != ACL_DOUBLE) || ix->dtype != ACL_INT64)
        return false;
    if (p->sh < (p->kh - 1) * p->dh + 1 || p->sw < (p->kw - 1) * p->dw + 1)
        return false;
    return view_contiguous(g) && view_contiguous(gi) && view_contiguous(ix);
}

#define MP_BWD_PLANE(T)                                                                             \
    static bool mp_bwd_plane_##T(const mp_params_t *p, int64_t q, const T *g, const int64_t *ix, T *gi, \
                                 int64_t *bad)                                                     \
    {                                                                                              \
        int64_t HW = p->H * p->W, M = p->OH * p->OW;                                               \
        g += q * M;                                                                                \
        ix += q * M;                                                                               \
        gi += q * HW;                                                                              \
        memset(gi, 0, (size_t)HW * sizeof(T));                                                     \
        for (int64_t k = 0; k < M; k++) {                                                          \
            int64_t i = ix[k];                                                                     \
            if (i < 0 || i >= HW) {                                                                \
                *bad = k;                                                                          \
                return false;                                                                      \
            }                                                                                      \
            gi[i] += g[k];                                                                         \
        }                                                                                          \
        return true;                                                                               \
    }
MP_BWD_PLANE(float)
MP_BWD_PLANE(double)

/* One output row of a 2x2 / stride-2 window fully inside the input (rows r0, r1; base = the flat
 * index of r0[0]). The update rule of the generic loop -- take v when v > m or v is NaN, unless m
 * is already NaN (the first NaN of a window wins) -- written with masks instead of branches (random
 * data defeats branch prediction), four windows at a time with GCC/Clang vector extensions. */
typedef double mp_v4d __attribute__((vector_size(32)));
typedef int64_t mp_v4l __attribute__((vector_size(32)));

static inline void mp_take4(mp_v4d *m, mp_v4l *k, mp_v4d v, int64_t kv)
{
    mp_v4l u = ~(v <= *m) & (*m == *m);
    *m = (mp_v4d)(((mp_v4l)*m & ~u) | ((mp_v4l)v & u));
    *k = (*k & ~u) | ((mp_v4l){kv, kv, kv, kv} & u);
}

static inline void mp_take1(double *m, int64_t *k, double v, int64_t kv)
{
    uint64_t u = -(uint64_t)(!(v <= *m) & (*m == *m)), mb, vb;
    memcpy(&mb, m, 8);
    memcpy(&vb, &v, 8);
    mb = (mb & ~u) | (vb & u);
    memcpy(m, &mb, 8);
    *k = (int64_t)(((uint64_t)*k & ~u) | ((uint64_t)kv & u));
}

static __attribute__((target_clones("avx512f", "avx2", "default"))) void
mp_row_2x2(const double *restrict r0, const double *restrict r1, int64_t OW, int64_t base, int64_t W,
           double *restrict vrow, int64_t *restrict irow)
{
    int64_t ow = 0;
    for (; ow + 4 <= OW; ow = (ow + 8 <= OW || ow + 4 == OW) ? ow + 4 : OW - 4) {
        /* the last group of 4 may overlap the previous one (recomputing identical windows) */
        const double *p0 = r0 + 2 * ow, *p1 = r1 + 2 * ow;
        mp_v4d m = {p0[0], p0[2], p0[4], p0[6]};
        mp_v4l k = {0, 0, 0, 0};
        mp_take4(&m, &k, (mp_v4d){p0[1], p0[3], p0[5], p0[7]}, 1);
        mp_take4(&m, &k, (mp_v4d){p1[0], p1[2], p1[4], p1[6]}, W);
        mp_take4(&m, &k, (mp_v4d){p1[1], p1[3], p1[5], p1[7]}, W + 1);
        k += (mp_v4l){base + 2 * ow, base + 2 * ow + 2, base + 2 * ow + 4, base + 2 * ow + 6};
        memcpy(vrow + ow, &m, sizeof m);
        memcpy(irow + ow, &k, sizeof k);
    }
    for (; ow < OW; ow++) {
        double m = r0[2 * ow];
        int64_t k = 0;
        mp_take1(&m, &k, r0[2 * ow + 1], 1);
        mp_take1(&m, &k, r1[2 * ow], W);
        mp_take1(&m, &k, r1[2 * ow + 1], W + 1);
        vrow[ow] = m;
        irow[ow] = base + 2 * ow + k;
    }
}

/* The same row for float32 straight from the input's memory, eight windows at a time; writes the
 * output row and the index row in place. Comparisons in float32 equal those in double (the
 * conversion is exact). */
typedef float mp_v8f __attribute__((vector_size(32)));
typedef int32_t mp_v8i __attribute__((vector_size(32)));
typedef int64_t mp_v8l __attribute__((vector_size(64)));

static inline void mp_take8(mp_v8f *m, mp_v8i *k, mp_v8f v, int32_t kv)
{
    mp_v8i u = ~(v <= *m) & (*m == *m);
    *m = (mp_v8f)(((mp_v8i)*m & ~u) | ((mp_v8i)v & u));
    *k = (*k & ~u) | ((mp_v8i){kv, kv, kv, kv, kv, kv, kv, kv} & u);
}

static __attribute__((target_clones("avx512f", "avx2", "default"))) void
mp_row_2x2_f32(const float *restrict r0, const float *restrict r1, int64_t OW, int64_t base, int64_t W,
               float *restrict yrow, int64_t *restrict irow)
{
    int64_t ow = 0;
    for (; ow + 8 <= OW; ow = (ow + 16 <= OW || ow + 8 == OW) ? ow + 8 : OW - 8) {
        /* the last group of 8 may overlap the previous one (recomputing identical windows) */
        const float *p0 = r0 + 2 * ow, *p1 = r1 + 2 * ow;
        mp_v8f m = {p0[0], p0[2], p0[4], p0[6], p0[8], p0[10], p0[12], p0[14]};
        mp_v8i k = {0, 0, 0, 0, 0, 0, 0, 0};
        mp_take8(&m, &k, (mp_v8f){p0[1], p0[3], p0[5], p0[7], p0[9], p0[11], p0[13], p0[15]}, 1);
        mp_take8(&m, &k, (mp_v8f){p1[0], p1[2], p1[4], p1[6], p1[8], p1[10], p1[12], p1[14]}, (int32_t)W);
        mp_take8(&m, &k, (mp_v8f){p1[1], p1[3], p1[5], p1[7], p1[9], p1[11], p1[13], p1[15]}, (int32_t)W + 1);
        mp_v8l kl = __builtin_convertvector(k, mp_v8l);
        int64_t b = base + 2 * ow;
        kl += (mp_v8l){b, b + 2, b + 4, b + 6, b + 8, b + 10, b + 12, b + 14};
        memcpy(yrow + ow, &m, sizeof m);
        memcpy(irow + ow, &kl, sizeof kl);
    }
    for (; ow < OW; ow++) {
        double m = r0[2 * ow];
        int64_t k = 0;
        mp_take1(&m, &k, r0[2 * ow + 1], 1);
        mp_take1(&m, &k, r1[2 * ow], W);
        mp_take1(&m, &k, r1[2 * ow + 1], W + 1);
        yrow[ow] = (float)m;
        irow[ow] = base + 2 * ow + k;
    }
}

/* forward straight in the tensors' memory: float32 input and output and int64 indices, all
 * contiguous, and every window a 2x2 / stride-2 one inside the input (no padding, no dilation) */
static bool mp_fwd_direct(const nn_exec_t *ex, const mp_params_t *p)
{
    const nn_view_t *x = &ex->v[p->vx], *y = &ex->v[p->vy], *ix = &ex->v[p->vi];
    if (x->dtype != ACL_FLOAT || y->dtype != ACL_FLOAT || ix->dtype != ACL_INT64)
        return false;
    if (p->kh != 2 || p->kw != 2 || p->sw != 2 || p->dh != 1 || p->dw != 1 || p->ph != 0 || p->pw != 0)
        return false;
    if (2 * p->OW > p->W || (p->OH - 1) * p->sh + 1 >= p->H || p->H * p->W > INT32_MAX)
        return false;
    return view_contiguous(x) && view_contiguous(y) && view_contiguous(ix);
}

/* Each block takes whole planes. Forward: the plane is loaded once into a double buffer (exact for
 * every float dtype), each output row is computed into row buffers and stored with one conversion
 * call per row. Backward: per output row, the indices and gradients are loaded as rows, scattered
 * (summed) into a zeroed double plane, which is stored row by row. */
static aclError mp_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    mp_job_t *j = arg;
    const mp_params_t *p = j->p;
    nn_exec_t *ex = j->ex;
    int64_t q0 = (int64_t)bi * j->per, q1 = q0 + j->per;
    if (q1 > p->planes)
        q1 = p->planes;
    if (q0 >= q1)
        return ACL_SUCCESS;
    int64_t HW = p->H * p->W, OW = p->OW;
    /* plane [H*W] double, output row [OW] double, index row [OW] int64 */
    double *plane = malloc((size_t)(HW > 0 ? HW : 1) * sizeof(double) + (size_t)(OW > 0 ? OW : 1) * 16);
    if (!plane)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    double *vrow = plane + (HW > 0 ? HW : 1);
    int64_t *irow = (int64_t *)(vrow + (OW > 0 ? OW : 1));
    const nn_view_t *x = &ex->v[p->vx], *ix = &ex->v[p->vi];
    int64_t ixs = ix->stride[ix->ndim - 1];
    for (int64_t q = q0; q < q1; q++) {
        if (!j->backward && j->direct) {
            const float *xp = (const float *)x->data + q * HW;
            float *yp = (float *)ex->v[p->vy].data + q * p->OH * OW;
            int64_t *ip = (int64_t *)ix->data + q * p->OH * OW;
            for (int64_t oh = 0; oh < p->OH; oh++) {
                int64_t ih0 = oh * p->sh;
                mp_row_2x2_f32(xp + ih0 * p->W, xp + (ih0 + 1) * p->W, OW, ih0 * p->W, p->W, yp + oh * OW,
                               ip + oh * OW);
            }
        } else if (!j->backward) {
            for (int64_t h = 0; h < p->H; h++)
                nn_load(CT_F64, plane + h * p->W, plane_at(x, p->batched, p->C, q, h, 0),
                        x->stride[x->ndim - 1], x->dtype, p->W);
            const nn_view_t *y = &ex->v[p->vy];
            for (int64_t oh = 0; oh < p->OH; oh++) {
                int64_t ih0 = oh * p->sh - p->ph;
                if (p->kh == 2 && p->kw == 2 && p->sw == 2 && p->dh == 1 && p->dw == 1 && p->pw == 0 && ih0 >= 0 &&
                    ih0 + 1 < p->H && 2 * OW <= p->W) {
                    /* the common 2x2 / stride-2 window fully inside: same comparisons, unrolled */
                    mp_row_2x2(plane + ih0 * p->W, plane + (ih0 + 1) * p->W, OW, ih0 * p->W, p->W, vrow, irow);
                } else {
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double m = -INFINITY;
                        int64_t mi = -1;
                        for (int64_t a = 0; a < p->kh; a++) {
                            int64_t ih = ih0 + a * p->dh;
                            if (ih < 0 || ih >= p->H)
                                continue;
                            for (int64_t b = 0; b < p->kw; b++) {
                                int64_t iw = ow * p->sw - p->pw + b * p->dw;
                                if (iw < 0 || iw >= p->W)
                                    continue;
                                double v = plane[ih * p->W + iw];
                                if (mi < 0 || v > m || v != v) {
                                    if (!(m != m)) {   /* keep the first NaN */
                                        m = v;
                                        mi = ih * p->W + iw;
                                    }
                                }
                            }
                        }
                        vrow[ow] = m;
                        irow[ow] = mi;
                    }
                }
                nn_store(CT_F64, plane_at(y, p->batched, p->C, q, oh, 0), y->stride[y->ndim - 1], y->dtype, vrow, OW);
                nn_store(CT_I64, plane_at(ix, p->batched, p->C, q, oh, 0), ixs, ix->dtype, irow, OW);
            }
        } else if (j->direct) {
            const nn_view_t *g = &ex->v[p->vg], *gi = &ex->v[p->vgi];
            int64_t bad = -1;
            bool ok = g->dtype == ACL_FLOAT
                          ? mp_bwd_plane_float(p, q, (const float *)g->data, (const int64_t *)ix->data,
                                               (float *)gi->data, &bad)
                          : mp_bwd_plane_double(p, q, (const double *)g->data, (const int64_t *)ix->data,
                                                (double *)gi->data, &bad);
            if (!ok) {
                int64_t k = ((const int64_t *)ix->data)[q * p->OH * OW + bad];
                free(plane);
                return nn_err(ACLNN_ERR_PARAM_INVALID, "%s: index %lld at output (%lld, %lld) of plane %lld is "
                              "outside the %lld x %lld input", ex->api, (long long)k, (long long)(bad / OW),
                              (long long)(bad % OW), (long long)q, (long long)p->H, (long long)p->W);
            }
        } else {
            const nn_view_t *g = &ex->v[p->vg], *gi = &ex->v[p->vgi];
            memset(plane, 0, (size_t)HW * sizeof(double));
            for (int64_t oh = 0; oh < p->OH; oh++) {
                nn_load(CT_I64, irow, plane_at(ix, p->batched, p->C, q, oh, 0), ixs, ix->dtype, OW);
                nn_load(CT_F64, vrow, plane_at(g, p->batched, p->C, q, oh, 0), g->stride[g->ndim - 1], g->dtype, OW);
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t k = irow[ow];
                    if (k < 0 || k >= HW) {
                        free(plane);
                        return nn_err(ACLNN_ERR_PARAM_INVALID, "%s: index %lld at output (%lld, %lld) of plane %lld is "
                                      "outside the %lld x %lld input", ex->api, (long long)k, (long long)oh,
                                      (long long)ow, (long long)q, (long long)p->H, (long long)p->W);
                    }
                    plane[k] += vrow[ow];
                }
            }
            for (int64_t h = 0; h < p->H; h++)
                nn_store(CT_F64, plane_at(gi, p->batched, p->C, q, h, 0), gi->stride[gi->ndim - 1], gi->dtype,
                         plane + h * p->W, p->W);
        }
    }
    free(plane);
    return ACL_SUCCESS;
}

static aclError mp_run_common(nn_exec_t *ex, bool backward)
{
    mp_params_t *p = (mp_params_t *)ex->params;
    if (!p->planes)
        return ACL_SUCCESS;
    mp_job_t j = {ex, p, 0, backward, backward ? mp_bwd_direct(ex, p) : mp_fwd_direct(ex, p)};
    uint32_t nb = nn_blocks(ex, p->planes * p->H * p->W, 64 * 1024);
    if ((int64_t)nb > p->planes)
        nb = (uint32_t)p->planes;
    j.per = (p->planes + nb - 1) / nb;
    nb = (uint32_t)((p->planes + j.per - 1) / j.per);
    return nn_parallel(ex, nb, mp_block, &j);
}

static aclError mp_fwd_run(nn_exec_t *ex) { return mp_run_common(ex, false); }
static aclError mp_bwd_run(nn_exec_t *ex) { return mp_run_common(ex, true); }

static aclnnStatus mp_geometry(const char *api, mp_params_t *p, const nn_tensor_t *x, const nn_intarray_t *ks,
                               const nn_intarray_t *st, const nn_intarray_t *pd, const nn_intarray_t *dl, bool ceil)
{
    aclnnStatus rc;
    if (x->ndim != 3 && x->ndim != 4)
        return NN_PARAM("%s: self must be 3-D [C, H, W] or 4-D [N, C, H, W], got %dD", api, x->ndim);
    if (!ks || ks->n == 0)
        return NN_PARAM("%s: kernelSize must have 1 or 2 values", api);
    int64_t k[2], s[2], pp[2], d[2];
    if ((rc = pair(api, "kernelSize", ks, 1, 1, k)) || (rc = pair(api, "padding", pd, 0, 0, pp)) ||
        (rc = pair(api, "dilation", dl, 1, 1, d)))
        return rc;
    if (!st || st->n == 0) {
        s[0] = k[0];
        s[1] = k[1];
    } else if ((rc = pair(api, "stride", st, 1, 1, s))) {
        return rc;
    }
    if (pp[0] > k[0] / 2 || pp[1] > k[1] / 2)
        return NN_PARAM("%s: padding [%lld, %lld] should be at most half of the kernel size [%lld, %lld]", api,
                        (long long)pp[0], (long long)pp[1], (long long)k[0], (long long)k[1]);
    p->batched = x->ndim == 4;
    p->C = x->shape[x->ndim - 3];
    p->H = x->shape[x->ndim - 2];
    p->W = x->shape[x->ndim - 1];
    p->planes = (p->batched ? x->shape[0] : 1) * p->C;
    p->kh = k[0]; p->kw = k[1]; p->sh = s[0]; p->sw = s[1]; p->ph = pp[0]; p->pw = pp[1]; p->dh = d[0]; p->dw = d[1];
    int64_t oh[2];
    int64_t in[2] = {p->H, p->W};
    for (int i = 0; i < 2; i++) {
        int64_t span = in[i] + 2 * pp[i] - d[i] * (k[i] - 1) - 1;
        if (span < 0)
            return NN_PARAM("%s: the kernel (%lld, dilation %lld) is larger than the padded input size %lld", api,
                            (long long)k[i], (long long)d[i], (long long)(in[i] + 2 * pp[i]));
        int64_t o = (ceil ? (span + s[i] - 1) / s[i] : span / s[i]) + 1;
        if (ceil && (o - 1) * s[i] >= in[i] + pp[i])
            o--;
        oh[i] = o;
    }
    p->OH = oh[0];
    p->OW = oh[1];
    return ACLNN_SUCCESS;
}

static aclnnStatus out_shape_like(const char *api, const char *name, const nn_tensor_t *t, const nn_tensor_t *x,
                                  int64_t OH, int64_t OW)
{
    int64_t shape[4];
    for (int32_t d = 0; d < x->ndim - 2; d++)
        shape[d] = x->shape[d];
    shape[x->ndim - 2] = OH;
    shape[x->ndim - 1] = OW;
    if (nn_same_shape(t, shape, x->ndim))
        return ACLNN_SUCCESS;
    char s1[160];
    return NN_PARAM("%s: %s has shape %s, expected %s", api, name, NN_SHAPE(t), nn_shape_str(s1, sizeof s1, shape, x->ndim));
}

NN_API aclnnStatus aclnnMaxPool2dWithIndicesGetWorkspaceSize(const aclTensor *self, const aclIntArray *kernelSize,
                                                             const aclIntArray *stride, const aclIntArray *padding,
                                                             const aclIntArray *dilation, bool ceilMode,
                                                             aclTensor *out, aclTensor *indices,
                                                             uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnMaxPool2dWithIndices";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *y, *ix;
    const nn_intarray_t *ks, *st, *pd, *dl;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &x)) || (rc = float_t_(api, "self", x)) ||
        (rc = nn_intarray_arg(api, "kernelSize", kernelSize, false, &ks)) ||
        (rc = nn_intarray_arg(api, "stride", stride, true, &st)) ||
        (rc = nn_intarray_arg(api, "padding", padding, true, &pd)) ||
        (rc = nn_intarray_arg(api, "dilation", dilation, true, &dl)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &y)) || (rc = nn_tensor_arg(api, "indices", indices, false, &ix)))
        return rc;
    if (y->dtype != x->dtype)
        return NN_PARAM("%s: out has dtype %s, expected self's %s", api, nn_dtype_name(y->dtype), nn_dtype_name(x->dtype));
    if (ix->dtype != ACL_INT64 && ix->dtype != ACL_INT32)
        return NN_PARAM("%s: indices must be int64 or int32, got %s", api, nn_dtype_name(ix->dtype));
    nn_exec_t *ex = nn_exec_new(api, mp_fwd_run, ACLSIM_ENGINE_VECTOR, sizeof(mp_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    mp_params_t *p = (mp_params_t *)ex->params;
    if ((rc = mp_geometry(api, p, x, ks, st, pd, dl, ceilMode)) ||
        (rc = out_shape_like(api, "out", y, x, p->OH, p->OW)) ||
        (rc = out_shape_like(api, "indices", ix, x, p->OH, p->OW))) {
        free(ex);
        return rc;
    }
    p->vx = nn_exec_add(ex, x, "self", false);
    p->vy = nn_exec_add(ex, y, "out", true);
    p->vi = nn_exec_add(ex, ix, "indices", true);
    if ((rc = nn_check_output_overlap(api, ex, p->vy, false)) || (rc = nn_check_output_overlap(api, ex, p->vi, false))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)(y->numel * p->kh * p->kw * 2 + x->numel);
    ex->cores = (uint32_t)(x->numel / (64 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnMaxPool2dWithIndices(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                             aclrtStream stream)
{
    return nn_launch("aclnnMaxPool2dWithIndices", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, const aclTensor *indices, const aclIntArray *kernelSize,
    const aclIntArray *stride, const aclIntArray *padding, const aclIntArray *dilation, bool ceilMode,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnMaxPool2dWithIndicesBackward";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *x, *ix, *gi;
    const nn_intarray_t *ks, *st, *pd, *dl;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOutput", gradOutput, false, &g)) || (rc = float_t_(api, "gradOutput", g)) ||
        (rc = nn_tensor_arg(api, "self", self, false, &x)) || (rc = float_t_(api, "self", x)) ||
        (rc = nn_tensor_arg(api, "indices", indices, false, &ix)) ||
        (rc = nn_intarray_arg(api, "kernelSize", kernelSize, false, &ks)) ||
        (rc = nn_intarray_arg(api, "stride", stride, true, &st)) ||
        (rc = nn_intarray_arg(api, "padding", padding, true, &pd)) ||
        (rc = nn_intarray_arg(api, "dilation", dilation, true, &dl)) ||
        (rc = nn_tensor_arg(api, "gradInput", gradInput, false, &gi)) || (rc = float_t_(api, "gradInput", gi)))
        return rc;
    if (ix->dtype != ACL_INT64 && ix->dtype != ACL_INT32)
        return NN_PARAM("%s: indices must be int64 or int32, got %s", api, nn_dtype_name(ix->dtype));
    nn_exec_t *ex = nn_exec_new(api, mp_bwd_run, ACLSIM_ENGINE_VECTOR, sizeof(mp_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    mp_params_t *p = (mp_params_t *)ex->params;
    if ((rc = mp_geometry(api, p, x, ks, st, pd, dl, ceilMode)) ||
        (rc = out_shape_like(api, "gradOutput", g, x, p->OH, p->OW)) ||
        (rc = out_shape_like(api, "indices", ix, x, p->OH, p->OW)) ||
        (rc = out_shape_like(api, "gradInput", gi, x, p->H, p->W))) {
        free(ex);
        return rc;
    }
    p->vg = nn_exec_add(ex, g, "gradOutput", false);   /* parameter order */
    p->vx = nn_exec_add(ex, x, "self", false);
    p->vi = nn_exec_add(ex, ix, "indices", false);
    p->vgi = nn_exec_add(ex, gi, "gradInput", true);
    if ((rc = nn_check_output_overlap(api, ex, p->vgi, false))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)(g->numel * 4 + x->numel);
    ex->cores = (uint32_t)(x->numel / (64 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnMaxPool2dWithIndicesBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                     aclrtStream stream)
{
    return nn_launch("aclnnMaxPool2dWithIndicesBackward", workspace, workspaceSize, executor, stream);
}

/* ================================================================== losses */

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

typedef struct loss_params {
    int32_t kind;              /* 0 NLL fwd, 1 NLL bwd, 2 CE fwd, 3 CE grad */
    int64_t N, C, S;           /* batch, classes, spatial positions */
    int64_t reduction, ignore;
    double smoothing;
    /* views */
    int32_t vx, vt, vw, vout, vtw, vg, vlogp;
    /* element strides: x over (n, c, s), target over (n, s), out over (n, s) */
    int64_t xs[3], ts[2], os[2], gs[2];
    int64_t oxs[3];            /* backward out (shaped like self) over (n, c, s) */
} loss_params_t;

/* strides over (n, c, s) of a tensor shaped like an NLL self ([C], [N, C] or [N, C, H, W]) */
static void ncs_strides(const nn_tensor_t *t, int64_t out[3])
{
    if (t->ndim == 1) {
        out[0] = 0; out[1] = t->stride[0]; out[2] = 0;
    } else if (t->ndim == 2) {
        out[0] = t->stride[0]; out[1] = t->stride[1]; out[2] = 0;
    } else {
        out[0] = t->stride[0]; out[1] = t->stride[1]; out[2] = t->stride[3];
    }
}

static double tw_at(const nn_exec_t *ex, const loss_params_t *p, int64_t c)
{
    if (p->vw < 0)
        return 1.0;
    const nn_view_t *w = &ex->v[p->vw];
    return nn_get_f64(w->data + c * w->stride[0] * (int64_t)nn_dtype_size(w->dtype), w->dtype);
}

static double x_at(const nn_view_t *x, const loss_params_t *p, int64_t n, int64_t c, int64_t s)
{
    return nn_get_f64(x->data + (n * p->xs[0] + c * p->xs[1] + s * p->xs[2]) * (int64_t)nn_dtype_size(x->dtype),
                      x->dtype);
}

static aclError loss_run(nn_exec_t *ex)
{
    loss_params_t *p = (loss_params_t *)ex->params;
    const nn_view_t *x = &ex->v[p->vx], *t = &ex->v[p->vt];
    size_t tsz = nn_dtype_size(t->dtype);
    double wsum = 0, lsum = 0;
    int64_t rows = p->N * p->S;
    double *lse = NULL;
    if (p->kind >= 2 && rows) {   /* cross entropy: per-row log-sum-exp (forward) */
        lse = malloc((size_t)rows * sizeof(double));
        if (!lse)
            return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    }
    /* pass 1: validate targets, per-row loss and the totals */
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / p->S, s = r % p->S;
        int64_t tg = nn_get_i64(t->data + (n * p->ts[0] + s * p->ts[1]) * (int64_t)tsz, t->dtype);
        if (tg == p->ignore)
            continue;
        if (tg < 0 || tg >= p->C) {
            free(lse);
            return nn_err(ACLNN_ERR_PARAM_INVALID, "%s: target %lld at position %lld is out of bounds for %lld classes",
                          ex->api, (long long)tg, (long long)r, (long long)p->C);
        }
        wsum += tw_at(ex, p, tg);
    }
    if (p->kind == 0 || p->kind == 2) {   /* forward */
        const nn_view_t *o = &ex->v[p->vout];
        size_t osz = nn_dtype_size(o->dtype);
        const nn_view_t *lp = p->vlogp >= 0 ? &ex->v[p->vlogp] : NULL;
        for (int64_t r = 0; r < rows; r++) {
            int64_t n = r / p->S, s = r % p->S;
            int64_t tg = nn_get_i64(t->data + (n * p->ts[0] + s * p->ts[1]) * (int64_t)tsz, t->dtype);
            double l = 0;
            if (p->kind == 2) {   /* log-softmax of the row */
                double m = -INFINITY, se = 0;
                bool nan = false;
                for (int64_t c = 0; c < p->C; c++) {
                    double v = x_at(x, p, n, c, s);
                    nan |= v != v;
                    if (v > m)
                        m = v;
                }
                if (nan)
                    m = NAN;
                if (m == -INFINITY)
                    m = 0;
                for (int64_t c = 0; c < p->C; c++)
                    se += exp(x_at(x, p, n, c, s) - m);
                lse[r] = m + log(se);
                if (lp)
                    for (int64_t c = 0; c < p->C; c++) {
                        double v = x_at(x, p, n, c, s) - lse[r];
                        nn_store(CT_F64, lp->data + (n * lp->stride[0] + c * lp->stride[1]) * (int64_t)nn_dtype_size(lp->dtype),
                                 1, lp->dtype, &v, 1);
                    }
                if (tg != p->ignore) {
                    double nll = -tw_at(ex, p, tg) * (x_at(x, p, n, tg, s) - lse[r]);
                    double smooth = 0;
                    if (p->smoothing > 0)
                        for (int64_t c = 0; c < p->C; c++)
                            smooth -= tw_at(ex, p, c) * (x_at(x, p, n, c, s) - lse[r]);
                    /* torch: (1-e) nll + e/C smooth; the mean divides both by the target weights */
                    l = (1 - p->smoothing) * nll + p->smoothing / (double)p->C * smooth;
                }
            } else if (tg != p->ignore) {
                l = -tw_at(ex, p, tg) * x_at(x, p, n, tg, s);
            }
            if (p->reduction == RED_NONE)
                nn_store(CT_F64, o->data + (n * p->os[0] + s * p->os[1]) * (int64_t)osz, 1, o->dtype, &l, 1);
            else
                lsum += l;
        }
        if (p->reduction != RED_NONE) {
            double v = p->reduction == RED_MEAN ? lsum / wsum : lsum;
            nn_store(CT_F64, o->data, 1, o->dtype, &v, 1);
        }
        if (p->vtw >= 0) {
            const nn_view_t *tw = &ex->v[p->vtw];
            nn_store(CT_F64, tw->data, 1, tw->dtype, &wsum, 1);
        }
        free(lse);
        return ACL_SUCCESS;
    }
    /* backward: kind 1 NLL (out = d loss / d self), kind 3 CE grad (d loss / d input via logProb) */
    const nn_view_t *o = &ex->v[p->vout], *g = &ex->v[p->vg];
    size_t osz = nn_dtype_size(o->dtype), gsz = nn_dtype_size(g->dtype);
    double denom = wsum;
    if (p->kind == 1 && p->vtw >= 0)
        denom = nn_get_f64(ex->v[p->vtw].data, ex->v[p->vtw].dtype);
    double *row = malloc((size_t)(p->C ? p->C : 1) * sizeof(double));
    if (!row)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / p->S, s = r % p->S;
        int64_t tg = nn_get_i64(t->data + (n * p->ts[0] + s * p->ts[1]) * (int64_t)tsz, t->dtype);
        double gr = p->reduction == RED_NONE
                        ? nn_get_f64(g->data + (n * p->gs[0] + s * p->gs[1]) * (int64_t)gsz, g->dtype)
                        : nn_get_f64(g->data, g->dtype);
        if (p->reduction == RED_MEAN)
            gr /= denom;
        for (int64_t c = 0; c < p->C; c++)
            row[c] = 0;
        if (tg != p->ignore) {
            if (p->kind == 1) {
                row[tg] = -tw_at(ex, p, tg) * gr;
            } else {
                /* d/dlogp: -(1-e) w_t g at the target, -(e/C) w_c g everywhere; then through log-softmax */
                double sumd = 0;
                for (int64_t c = 0; c < p->C; c++) {
                    row[c] = -(p->smoothing / (double)p->C) * tw_at(ex, p, c) * gr;
                    if (c == tg)
                        row[c] -= (1 - p->smoothing) * tw_at(ex, p, tg) * gr;
                    sumd += row[c];
                }
                for (int64_t c = 0; c < p->C; c++)
                    row[c] -= exp(x_at(x, p, n, c, s)) * sumd;
            }
        }
        for (int64_t c = 0; c < p->C; c++)
            nn_store(CT_F64, o->data + (n * p->oxs[0] + c * p->oxs[1] + s * p->oxs[2]) * (int64_t)osz, 1, o->dtype,
                     &row[c], 1);
    }
    free(row);
    return ACL_SUCCESS;
}

static aclnnStatus reduction_check(const char *api, int64_t reduction)
{
    if (reduction < 0 || reduction > 2)
        return NN_PARAM("%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %lld", api, (long long)reduction);
    return ACLNN_SUCCESS;
}

/* geometry of an NLL input: self [N, C] / [C] (2d: [N, C, H, W]) with target [N] / [] ([N, H, W]) */
static aclnnStatus nll_geometry(const char *api, loss_params_t *p, const nn_tensor_t *x, const nn_tensor_t *t,
                                bool two_d)
{
    if (t->dtype != ACL_INT64 && t->dtype != ACL_INT32 && t->dtype != ACL_UINT8)
        return NN_PARAM("%s: target must be int64, int32 or uint8, got %s", api, nn_dtype_name(t->dtype));
    if (two_d) {
        if (x->ndim != 4 || t->ndim != 3 || t->shape[0] != x->shape[0] || t->shape[1] != x->shape[2] ||
            t->shape[2] != x->shape[3])
            return NN_PARAM("%s: expected self [N, C, H, W] and target [N, H, W], got %s and %s", api, NN_SHAPE(x),
                            NN_SHAPE(t));
        p->N = x->shape[0];
        p->C = x->shape[1];
        p->S = x->shape[2] * x->shape[3];
        /* the spatial dims merge when contiguous with each other; otherwise H*W walks by W */
        if (x->shape[3] > 1 && x->stride[2] != x->stride[3] * x->shape[3] && x->shape[2] > 1)
            return NN_PARAM("%s: self's H and W dims must be mergeable (stride[2] == stride[3] * W)", api);
        if (t->shape[2] > 1 && t->stride[1] != t->stride[2] * t->shape[2] && t->shape[1] > 1)
            return NN_PARAM("%s: target's H and W dims must be mergeable", api);
        p->xs[0] = x->stride[0]; p->xs[1] = x->stride[1]; p->xs[2] = x->stride[3];
        p->ts[0] = t->stride[0]; p->ts[1] = t->stride[2];
        return ACLNN_SUCCESS;
    }
    if (x->ndim == 1) {
        if (t->ndim != 0 && !(t->ndim == 1 && t->shape[0] == 1))
            return NN_PARAM("%s: for a 1-D self, target must be 0-D, got %s", api, NN_SHAPE(t));
        p->N = 1; p->C = x->shape[0]; p->S = 1;
        p->xs[0] = 0; p->xs[1] = x->stride[0]; p->xs[2] = 0;
        p->ts[0] = 0; p->ts[1] = 0;
        return ACLNN_SUCCESS;
    }
    if (x->ndim != 2 || t->ndim != 1 || t->shape[0] != x->shape[0])
        return NN_PARAM("%s: expected self [N, C] and target [N], got %s and %s", api, NN_SHAPE(x), NN_SHAPE(t));
    p->N = x->shape[0]; p->C = x->shape[1]; p->S = 1;
    p->xs[0] = x->stride[0]; p->xs[1] = x->stride[1]; p->xs[2] = 0;
    p->ts[0] = t->stride[0]; p->ts[1] = 0;
    return ACLNN_SUCCESS;
}

static aclnnStatus weight_check(const char *api, const char *name, const nn_tensor_t *w, int64_t C)
{
    if (!w)
        return ACLNN_SUCCESS;
    if (w->ndim != 1 || w->shape[0] != C)
        return NN_PARAM("%s: %s must have shape [%lld] (one weight per class), got %s", api, name, (long long)C,
                        NN_SHAPE(w));
    return float_t_(api, name, w);
}

/* the loss output: [N] (or [N, H, W]) for reduction none, one element otherwise */
static aclnnStatus loss_out_check(const char *api, const char *name, loss_params_t *p, const nn_tensor_t *o,
                                  const nn_tensor_t *x, bool two_d)
{
    if (p->reduction == RED_NONE) {
        int64_t shape[3] = {0, 0, 0};
        int32_t nd;
        if (two_d) {
            shape[0] = x->shape[0]; shape[1] = x->shape[2]; shape[2] = x->shape[3];
            nd = 3;
        } else if (x->ndim == 1) {
            nd = 0;
        } else {
            shape[0] = x->shape[0];
            nd = 1;
        }
        if (!nn_same_shape(o, shape, nd)) {
            char s1[160];
            return NN_PARAM("%s: %s has shape %s, expected %s for reduction none", api, name, NN_SHAPE(o),
                            nn_shape_str(s1, sizeof s1, shape, nd));
        }
        p->os[0] = nd ? o->stride[0] : 0;
        p->os[1] = two_d ? o->stride[2] : 0;
        if (two_d && o->shape[2] > 1 && o->shape[1] > 1 && o->stride[1] != o->stride[2] * o->shape[2])
            return NN_PARAM("%s: %s's H and W dims must be mergeable", api, name);
    } else if (o->numel != 1) {
        return NN_PARAM("%s: %s must have one element for reduction mean or sum, got shape %s", api, name, NN_SHAPE(o));
    }
    return float_t_(api, name, o);
}

/* The start the NLL and cross-entropy losses share: makes the executor of loss kind `kind` and checks
 * target t, weight w and the loss tensor lossT (named lossName: the output forwards, the incoming
 * gradient backwards) against the scores x, and the label smoothing (0 for NLL). On success *exo
 * holds the executor, which the caller frees on a later error. */
static aclnnStatus loss_exec_new(const char *api, int kind, const nn_tensor_t *x, const nn_tensor_t *t,
                                 const nn_tensor_t *w, const nn_tensor_t *lossT, const char *lossName, bool two_d,
                                 int64_t reduction, int64_t ignoreIndex, double smoothing, nn_exec_t **exo)
{
    aclnnStatus rc;
    if (!(smoothing >= 0 && smoothing <= 1))
        return NN_PARAM("%s: labelSmoothing must be in [0, 1], got %g", api, smoothing);
    nn_exec_t *ex = nn_exec_new(api, loss_run, ACLSIM_ENGINE_VECTOR, sizeof(loss_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    loss_params_t *p = (loss_params_t *)ex->params;
    p->kind = kind;
    p->reduction = reduction;
    p->ignore = ignoreIndex;
    p->smoothing = smoothing;
    if ((rc = nll_geometry(api, p, x, t, two_d)) || (rc = weight_check(api, "weight", w, p->C)) ||
        (rc = loss_out_check(api, lossName, p, lossT, x, two_d))) {
        free(ex);
        return rc;
    }
    *exo = ex;
    return ACLNN_SUCCESS;
}

static aclnnStatus nll_fwd(const char *api, bool two_d, const aclTensor *self, const aclTensor *target,
                           const aclTensor *weight, int64_t reduction, int64_t ignoreIndex, aclTensor *out,
                           aclTensor *totalWeightOut, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *t, *w, *o, *tw;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &x)) || (rc = float_t_(api, "self", x)) ||
        (rc = nn_tensor_arg(api, "target", target, false, &t)) || (rc = nn_tensor_arg(api, "weight", weight, true, &w)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)) ||
        (rc = nn_tensor_arg(api, "totalWeightOut", totalWeightOut, true, &tw)) || (rc = reduction_check(api, reduction)))
        return rc;
    nn_exec_t *ex;
    if ((rc = loss_exec_new(api, 0, x, t, w, o, "out", two_d, reduction, ignoreIndex, 0, &ex)))
        return rc;
    loss_params_t *p = (loss_params_t *)ex->params;
    p->vg = p->vlogp = -1;
    if (tw && tw->numel != 1) {
        rc = NN_PARAM("%s: totalWeightOut must have one element", api);
        goto fail;
    }
    p->vx = nn_exec_add(ex, x, "self", false);
    p->vt = nn_exec_add(ex, t, "target", false);
    p->vw = w ? nn_exec_add(ex, w, "weight", false) : -1;
    p->vout = nn_exec_add(ex, o, "out", true);
    p->vtw = tw ? nn_exec_add(ex, tw, "totalWeightOut", true) : -1;
    for (int32_t i = 0; i < ex->nview; i++)
        if (ex->v[i].output && (rc = nn_check_output_overlap(api, ex, i, false)))
            goto fail;
    ex->cost_ns = (uint64_t)(x->numel / 4 + p->N * p->S * 4);
    return nn_exec_finish(ex, workspaceSize, executor);
fail:
    free(ex);
    return rc;
}

NN_API aclnnStatus aclnnNLLLossGetWorkspaceSize(const aclTensor *self, const aclTensor *target, const aclTensor *weight,
                                                int64_t reduction, int64_t ignoreIndex, aclTensor *out,
                                                aclTensor *totalWeightOut, uint64_t *workspaceSize,
                                                aclOpExecutor **executor)
{
    return nll_fwd("aclnnNLLLoss", false, self, target, weight, reduction, ignoreIndex, out, totalWeightOut,
                   workspaceSize, executor);
}

NN_API aclnnStatus aclnnNLLLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnNLLLoss", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnNLLLoss2dGetWorkspaceSize(const aclTensor *self, const aclTensor *target,
                                                  const aclTensor *weight, int64_t reduction, int64_t ignoreIndex,
                                                  aclTensor *out, aclTensor *totalWeightOut, uint64_t *workspaceSize,
                                                  aclOpExecutor **executor)
{
    return nll_fwd("aclnnNLLLoss2d", true, self, target, weight, reduction, ignoreIndex, out, totalWeightOut,
                   workspaceSize, executor);
}

NN_API aclnnStatus aclnnNLLLoss2d(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnNLLLoss2d", workspace, workspaceSize, executor, stream);
}

static aclnnStatus nll_bwd(const char *api, bool two_d, const aclTensor *gradOutput, const aclTensor *self,
                           const aclTensor *target, const aclTensor *weight, int64_t reduction, int64_t ignoreIndex,
                           const aclTensor *totalWeight, aclTensor *out, uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *x, *t, *w, *tw, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOutput", gradOutput, false, &g)) || (rc = float_t_(api, "gradOutput", g)) ||
        (rc = nn_tensor_arg(api, "self", self, false, &x)) || (rc = float_t_(api, "self", x)) ||
        (rc = nn_tensor_arg(api, "target", target, false, &t)) || (rc = nn_tensor_arg(api, "weight", weight, true, &w)) ||
        (rc = nn_tensor_arg(api, "totalWeight", totalWeight, true, &tw)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)) || (rc = float_t_(api, "out", o)) ||
        (rc = reduction_check(api, reduction)))
        return rc;
    nn_exec_t *ex;
    if ((rc = loss_exec_new(api, 1, x, t, w, g, "gradOutput", two_d, reduction, ignoreIndex, 0, &ex)))
        return rc;
    loss_params_t *p = (loss_params_t *)ex->params;
    p->gs[0] = p->os[0];
    p->gs[1] = p->os[1];
    if (!nn_same_shape(o, x->shape, x->ndim)) {
        rc = NN_PARAM("%s: out has shape %s, expected self's shape %s", api, NN_SHAPE(o), NN_SHAPE(x));
        goto fail;
    }
    if (tw && tw->numel != 1) {
        rc = NN_PARAM("%s: totalWeight must have one element", api);
        goto fail;
    }
    p->vg = nn_exec_add(ex, g, "gradOutput", false);   /* parameter order */
    p->vx = nn_exec_add(ex, x, "self", false);
    p->vt = nn_exec_add(ex, t, "target", false);
    p->vw = w ? nn_exec_add(ex, w, "weight", false) : -1;
    p->vtw = tw ? nn_exec_add(ex, tw, "totalWeight", false) : -1;
    p->vlogp = -1;
    p->vout = nn_exec_add(ex, o, "out", true);
    ncs_strides(o, p->oxs);
    if ((rc = nn_check_output_overlap(api, ex, p->vout, false)))
        goto fail;
    if (two_d && o->shape[3] > 1 && o->shape[2] > 1 && o->stride[2] != o->stride[3] * o->shape[3]) {
        rc = NN_PARAM("%s: out's H and W dims must be mergeable", api);
        goto fail;
    }
    ex->cost_ns = (uint64_t)(x->numel * 2);
    return nn_exec_finish(ex, workspaceSize, executor);
fail:
    free(ex);
    return rc;
}

NN_API aclnnStatus aclnnNLLLossBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                        const aclTensor *target, const aclTensor *weight,
                                                        int64_t reduction, int64_t ignoreIndex,
                                                        const aclTensor *totalWeight, aclTensor *out,
                                                        uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return nll_bwd("aclnnNLLLossBackward", false, gradOutput, self, target, weight, reduction, ignoreIndex, totalWeight,
                   out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnNLLLossBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                        aclrtStream stream)
{
    return nn_launch("aclnnNLLLossBackward", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnNLLLoss2dBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                          const aclTensor *target, const aclTensor *weight,
                                                          int64_t reduction, int64_t ignoreIndex,
                                                          aclTensor *totalWeight, aclTensor *out,
                                                          uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return nll_bwd("aclnnNLLLoss2dBackward", true, gradOutput, self, target, weight, reduction, ignoreIndex,
                   totalWeight, out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnNLLLoss2dBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream)
{
    return nn_launch("aclnnNLLLoss2dBackward", workspace, workspaceSize, executor, stream);
}

static aclnnStatus reduction_str(const char *api, const char *s, int64_t *out)
{
    if (!s || strcmp(s, "mean") == 0)
        *out = RED_MEAN;
    else if (strcmp(s, "sum") == 0)
        *out = RED_SUM;
    else if (strcmp(s, "none") == 0)
        *out = RED_NONE;
    else
        return NN_PARAM("%s: reduction must be \"mean\", \"sum\" or \"none\", got \"%.32s\"", api, s);
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(const aclTensor *input, const aclTensor *target,
                                                         const aclTensor *weightOptional, char *reductionOptional,
                                                         int64_t ignoreIndex, double labelSmoothing,
                                                         double lseSquareScaleForZloss, bool returnZloss,
                                                         const aclTensor *lossOut, const aclTensor *logProbOut,
                                                         const aclTensor *zlossOut, const aclTensor *lseForZlossOut,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCrossEntropyLoss";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *t, *w, *o, *lp, *zl, *lz;
    aclnnStatus rc;
    int64_t red = RED_MEAN;
    if ((rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = float_t_(api, "input", x)) ||
        (rc = nn_tensor_arg(api, "target", target, false, &t)) ||
        (rc = nn_tensor_arg(api, "weight", weightOptional, true, &w)) ||
        (rc = reduction_str(api, reductionOptional, &red)) || (rc = nn_tensor_arg(api, "lossOut", lossOut, false, &o)) ||
        (rc = nn_tensor_arg(api, "logProbOut", logProbOut, true, &lp)) ||
        (rc = nn_tensor_arg(api, "zlossOut", zlossOut, true, &zl)) ||
        (rc = nn_tensor_arg(api, "lseForZlossOut", lseForZlossOut, true, &lz)))
        return rc;
    (void)zl;
    (void)lz;
    if (lseSquareScaleForZloss != 0 || returnZloss)
        return NN_PARAM("%s: zloss (lseSquareScaleForZloss != 0, returnZloss) is not supported", api);
    if (x->ndim != 2)
        return NN_PARAM("%s: input must be 2-D [N, C], got %s", api, NN_SHAPE(x));
    nn_exec_t *ex;
    if ((rc = loss_exec_new(api, 2, x, t, w, o, "lossOut", false, red, ignoreIndex, labelSmoothing, &ex)))
        return rc;
    loss_params_t *p = (loss_params_t *)ex->params;
    if (lp && (!nn_same_shape(lp, x->shape, 2) || !nn_is_float(lp->dtype))) {
        rc = NN_PARAM("%s: logProbOut must be a floating tensor of input's shape %s, got %s", api, NN_SHAPE(x),
                      NN_SHAPE(lp));
        goto fail;
    }
    p->vx = nn_exec_add(ex, x, "input", false);
    p->vt = nn_exec_add(ex, t, "target", false);
    p->vw = w ? nn_exec_add(ex, w, "weight", false) : -1;
    p->vout = nn_exec_add(ex, o, "lossOut", true);
    p->vlogp = lp ? nn_exec_add(ex, lp, "logProbOut", true) : -1;
    p->vtw = p->vg = -1;
    for (int32_t i = 0; i < ex->nview; i++)
        if (ex->v[i].output && (rc = nn_check_output_overlap(api, ex, i, false)))
            goto fail;
    ex->cost_ns = (uint64_t)(x->numel * 20);
    return nn_exec_finish(ex, workspaceSize, executor);
fail:
    free(ex);
    return rc;
}

NN_API aclnnStatus aclnnCrossEntropyLoss(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream)
{
    return nn_launch("aclnnCrossEntropyLoss", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor *gradLoss, const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional,
    const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, char *reductionOptional,
    int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCrossEntropyLossGrad";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *lp, *t, *w, *gz, *lz, *o;
    aclnnStatus rc;
    int64_t red = RED_MEAN;
    if ((rc = nn_tensor_arg(api, "gradLoss", gradLoss, false, &g)) || (rc = float_t_(api, "gradLoss", g)) ||
        (rc = nn_tensor_arg(api, "logProb", logProb, false, &lp)) || (rc = float_t_(api, "logProb", lp)) ||
        (rc = nn_tensor_arg(api, "target", target, false, &t)) ||
        (rc = nn_tensor_arg(api, "weight", weightOptional, true, &w)) ||
        (rc = nn_tensor_arg(api, "gradZloss", gradZlossOptional, true, &gz)) ||
        (rc = nn_tensor_arg(api, "lseForZloss", lseForZlossOptional, true, &lz)) ||
        (rc = reduction_str(api, reductionOptional, &red)) || (rc = nn_tensor_arg(api, "out", out, false, &o)) ||
        (rc = float_t_(api, "out", o)))
        return rc;
    (void)gz;
    (void)lz;
    if (lseSquareScaleForZloss != 0)
        return NN_PARAM("%s: zloss (lseSquareScaleForZloss != 0) is not supported", api);
    if (lp->ndim != 2)
        return NN_PARAM("%s: logProb must be 2-D [N, C], got %s", api, NN_SHAPE(lp));
    nn_exec_t *ex;
    if ((rc = loss_exec_new(api, 3, lp, t, w, g, "gradLoss", false, red, ignoreIndex, labelSmoothing, &ex)))
        return rc;
    loss_params_t *p = (loss_params_t *)ex->params;
    p->gs[0] = p->os[0];
    p->gs[1] = p->os[1];
    if (!nn_same_shape(o, lp->shape, 2)) {
        rc = NN_PARAM("%s: out has shape %s, expected logProb's shape %s", api, NN_SHAPE(o), NN_SHAPE(lp));
        goto fail;
    }
    p->vg = nn_exec_add(ex, g, "gradLoss", false);   /* parameter order */
    p->vx = nn_exec_add(ex, lp, "logProb", false);
    p->vt = nn_exec_add(ex, t, "target", false);
    p->vw = w ? nn_exec_add(ex, w, "weight", false) : -1;
    p->vtw = p->vlogp = -1;
    p->vout = nn_exec_add(ex, o, "out", true);
    ncs_strides(o, p->oxs);
    if ((rc = nn_check_output_overlap(api, ex, p->vout, false)))
        goto fail;
    ex->cost_ns = (uint64_t)(lp->numel * 4);
    return nn_exec_finish(ex, workspaceSize, executor);
fail:
    free(ex);
    return rc;
}

NN_API aclnnStatus aclnnCrossEntropyLossGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                             aclrtStream stream)
{
    return nn_launch("aclnnCrossEntropyLossGrad", workspace, workspaceSize, executor, stream);
}
