/* canna simulator op library: batch normalization, aclnnBatchNorm and aclnnBatchNormBackward
 * (prototypes: hicann/ops-nn norm/batch_norm_v3 and norm/batch_norm_grad_v3, op_api/aclnn_*.h).
 *
 * input is [N, C, *] (2 to 8 dims, channel dim 1). Training normalizes each channel with its batch
 * mean and biased variance and, when runningMean / runningVar are given, updates them as PyTorch
 * does: running = (1 - momentum) * running + momentum * stat, with the unbiased variance
 * (M / (M - 1), M values per channel) for runningVar. Eval normalizes with the running statistics.
 * saveMean / saveInvstd (optional, [C]) get the mean and 1 / sqrt(var + eps) used (the batch's in
 * training, the running ones in eval); the backward takes them in training, and in eval when
 * runningMean / runningVar are NULL (a simulator convenience: CANN's eval backward reads the running
 * statistics). aclnnBatchNormStats (hicann/ops-math math/reduce_std_with_mean) computes only the
 * batch mean and invstd. Sums accumulate in double; channels are spread over the AI-core blocks. */
#include "opsim.h"

#pragma GCC optimize("O3")

/* one channel's slice of a [N, C, *] view: every dim but the channel dim, walked as rows along its
 * last dim */
typedef struct bn_slice {
    int32_t k;                              /* dims of the slice */
    int64_t shape[NN_MAX_DIMS], stride[NN_MAX_DIMS];
    int64_t cstride;                        /* the channel dim's stride */
    int64_t rows, len;                      /* rows of the slice, elements per row */
} bn_slice_t;

static void bn_slice_of(bn_slice_t *s, const nn_view_t *v)
{
    memset(s, 0, sizeof *s);
    s->cstride = v->stride[1];
    for (int32_t d = 0; d < v->ndim; d++) {
        if (d == 1)
            continue;
        s->shape[s->k] = v->shape[d];
        s->stride[s->k] = v->stride[d];
        s->k++;
    }
    s->len = s->shape[s->k - 1];
    s->rows = 1;
    for (int32_t d = 0; d < s->k - 1; d++)
        s->rows *= s->shape[d];
}

/* merge the slices' inner dims while every one of them walks the pair as one run (stride of the outer
 * = stride of the inner * its size, or an outer dim of size 1): [N, C, H, W] contiguous becomes N
 * rows of H * W, so that the loops run over long rows instead of rows of W elements */
static void bn_merge(bn_slice_t *const *sl, int n)
{
    bn_slice_t *s0 = sl[0];
    while (s0->k >= 2) {
        int32_t k = s0->k;
        bool ok = true;
        for (int i = 0; i < n && ok; i++)
            ok = sl[i]->shape[k - 2] == 1 || sl[i]->stride[k - 2] == sl[i]->stride[k - 1] * sl[i]->shape[k - 1];
        if (!ok)
            break;
        for (int i = 0; i < n; i++) {
            bn_slice_t *s = sl[i];
            s->shape[k - 2] *= s->shape[k - 1];
            s->stride[k - 2] = s->stride[k - 1];
            s->k--;
        }
    }
    for (int i = 0; i < n; i++) {
        bn_slice_t *s = sl[i];
        s->len = s->shape[s->k - 1];
        s->rows = 1;
        for (int32_t d = 0; d < s->k - 1; d++)
            s->rows *= s->shape[d];
    }
}

static char *bn_row(const bn_slice_t *s, const nn_view_t *v, int64_t c, int64_t r)
{
    int64_t off = c * s->cstride;
    for (int32_t d = s->k - 2; d >= 0; d--) {
        off += (r % s->shape[d]) * s->stride[d];
        r /= s->shape[d];
    }
    return v->data + off * (int64_t)nn_dtype_size(v->dtype);
}

static void bn_load(const bn_slice_t *s, const nn_view_t *v, int64_t c, int64_t r, double *buf)
{
    nn_load(CT_F64, buf, bn_row(s, v, c, r), s->stride[s->k - 1], v->dtype, s->len);
}

static void bn_store(const bn_slice_t *s, const nn_view_t *v, int64_t c, int64_t r, const double *buf)
{
    nn_store(CT_F64, bn_row(s, v, c, r), s->stride[s->k - 1], v->dtype, buf, s->len);
}

/* element c of a 1-D [C] view */
static double bn_get(const nn_exec_t *ex, int32_t vi, int64_t c, double dflt)
{
    if (vi < 0)
        return dflt;
    const nn_view_t *v = &ex->v[vi];
    return nn_get_f64(v->data + c * v->stride[0] * (int64_t)nn_dtype_size(v->dtype), v->dtype);
}

static void bn_put(const nn_exec_t *ex, int32_t vi, int64_t c, double val)
{
    if (vi < 0)
        return;
    const nn_view_t *v = &ex->v[vi];
    nn_store(CT_F64, v->data + c * v->stride[0] * (int64_t)nn_dtype_size(v->dtype), 1, v->dtype, &val, 1);
}

typedef struct bn_params {
    bool backward, training, stats_only;
    bool mask[3];
    double momentum, eps;
    int64_t C, M;                           /* channels, values per channel */
    /* view indices (-1: absent) */
    int32_t vx, vg, vw, vb, vrm, vrv, vsm, vsi, vout, vgw, vgb;
    bn_slice_t sx, sg, so;                  /* slices of input, gradOut, output / gradInput */
} bn_params_t;

typedef struct bn_job {
    nn_exec_t *ex;
    bn_params_t *p;
    int64_t per;
} bn_job_t;

/* Sums over a row in 8 partial sums, two 4-double generic vectors (a single chain of dependent
 * additions leaves the adder waiting on its own latency; spelled as arrays, GCC's vectorizer
 * shuffled the lanes on every step). Double accumulation: only the order of the additions changes,
 * far below the float32 rounding of the results. */
typedef double bn_v4 __attribute__((vector_size(32)));
#pragma GCC diagnostic ignored "-Wpsabi"   /* 4-double vectors stay inside each clone (static, inlined) */
static inline bn_v4 bn_ld(const double *p)
{
    bn_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline double bn_hsum(bn_v4 a, bn_v4 b)
{
    bn_v4 c = a + b;
    return (c[0] + c[1]) + (c[2] + c[3]);
}

/* float32 rows are read in place (unit stride; no double buffers): the same double arithmetic,
 * each 4 floats widened in registers */
typedef float bn_v4f __attribute__((vector_size(16)));
static inline bn_v4 bn_ldf(const float *p)
{
    bn_v4f v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, bn_v4);
}

/* bn_sum##SUF: sum of x; bn_sqdev##SUF: sum of (x - mean)^2; bn_gsums##SUF: sum of g and of
 * g (x - mean) invstd, added to *sdy and *sdyx -- over rows of T (double buffers, or float32 in
 * place), LD loading 4 of them as doubles */
#define BN_REDUCTIONS(SUF, T, LD)                                                                     \
    NN_CLONES static double bn_sum##SUF(const T *restrict x, int64_t n)                            \
    {                                                                                              \
        bn_v4 a = {0}, b = {0};                                                                    \
        int64_t k = 0;                                                                             \
        for (; k + 8 <= n; k += 8) {                                                               \
            a += LD(x + k);                                                                        \
            b += LD(x + k + 4);                                                                    \
        }                                                                                          \
        double s = bn_hsum(a, b);                                                                  \
        for (; k < n; k++)                                                                         \
            s += (double)x[k];                                                                     \
        return s;                                                                                  \
    }                                                                                              \
    NN_CLONES static double bn_sqdev##SUF(const T *restrict x, int64_t n, double mean)             \
    {                                                                                              \
        bn_v4 a = {0}, b = {0}, m = {mean, mean, mean, mean};                                      \
        int64_t k = 0;                                                                             \
        for (; k + 8 <= n; k += 8) {                                                               \
            bn_v4 d = LD(x + k) - m, e = LD(x + k + 4) - m;                                        \
            a += d * d;                                                                            \
            b += e * e;                                                                            \
        }                                                                                          \
        double s = bn_hsum(a, b);                                                                  \
        for (; k < n; k++) {                                                                       \
            double d = (double)x[k] - mean;                                                        \
            s += d * d;                                                                            \
        }                                                                                          \
        return s;                                                                                  \
    }                                                                                              \
    NN_CLONES static void bn_gsums##SUF(const T *restrict g, const T *restrict x, int64_t n, double mean, \
                                        double invstd, double *sdy, double *sdyx)                  \
    {                                                                                              \
        bn_v4 a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, m = {mean, mean, mean, mean};                \
        int64_t k = 0;                                                                             \
        for (; k + 8 <= n; k += 8) {                                                               \
            bn_v4 g0 = LD(g + k), g1 = LD(g + k + 4);                                              \
            a0 += g0;                                                                              \
            a1 += g1;                                                                              \
            b0 += g0 * (LD(x + k) - m);                                                            \
            b1 += g1 * (LD(x + k + 4) - m);                                                        \
        }                                                                                          \
        double s = bn_hsum(a0, a1), t = bn_hsum(b0, b1);                                           \
        for (; k < n; k++) {                                                                       \
            s += (double)g[k];                                                                     \
            t += (double)g[k] * ((double)x[k] - mean);                                             \
        }                                                                                          \
        *sdy += s;                                                                                 \
        *sdyx += t * invstd;                                                                       \
    }
BN_REDUCTIONS(, double, bn_ld)
BN_REDUCTIONS(_f32, float, bn_ldf)

/* o = (float)(x scale + shift) */
NN_CLONES static void bn_affine_f32(float *o, const float *x, int64_t n, double scale, double shift)
{
    for (int64_t k = 0; k < n; k++)
        o[k] = (float)((double)x[k] * scale + shift);
}

/* o = (float)(a (g - mdy - (x - mean) k)) */
NN_CLONES static void bn_dx_f32(float *o, const float *g, const float *x, int64_t n, double a, double mdy,
                                double mean, double k)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = (float)(a * ((double)g[i] - mdy - ((double)x[i] - mean) * k));
}

/* x = x scale + shift (the forward's normalization, in place) */
NN_CLONES static void bn_affine(double *restrict x, int64_t n, double scale, double shift)
{
    for (int64_t k = 0; k < n; k++)
        x[k] = x[k] * scale + shift;
}

/* x = a (g - mdy - (x - mean) k): the training backward's grad_input, in place over x (k = invstd mdyx) */
NN_CLONES static void bn_dx(double *restrict x, const double *restrict g, int64_t n, double a, double mdy, double mean,
                            double k)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = a * (g[i] - mdy - (x[i] - mean) * k);
}

/* a channel's rows are converted into double buffers a block of rows at a time; when the whole
 * channel fits (BN_WHOLE elements per buffer) it is converted once and every pass reads the buffers */
#define BN_WHOLE ((int64_t)1 << 16)

static void bn_load_rows(const bn_slice_t *s, const nn_view_t *v, int64_t c, int64_t r0, int64_t nr, double *buf)
{
    for (int64_t r = 0; r < nr; r++)
        bn_load(s, v, c, r0 + r, buf + r * s->len);
}

static void bn_store_rows(const bn_slice_t *s, const nn_view_t *v, int64_t c, int64_t r0, int64_t nr,
                          const double *buf)
{
    for (int64_t r = 0; r < nr; r++)
        bn_store(s, v, c, r0 + r, buf + r * s->len);
}

static aclError bn_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    bn_job_t *j = arg;
    nn_exec_t *ex = j->ex;
    bn_params_t *p = j->p;
    int64_t c0 = (int64_t)bi * j->per, c1 = c0 + j->per;
    if (c1 > p->C)
        c1 = p->C;
    if (c0 >= c1)
        return ACL_SUCCESS;
    const int64_t len = p->sx.len, rows = p->sx.rows;
    int64_t br = len ? BN_WHOLE / len : rows;   /* rows per block */
    if (br < 1)
        br = 1;
    if (br > rows)
        br = rows;
    const bool whole = br == rows;   /* every pass reads the buffers converted once */
    size_t cap = (size_t)(br * len > 0 ? br * len : 1);
    double *xb = malloc(cap * 2 * sizeof(double));
    if (!xb)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    double *gb = xb + cap;
    const nn_view_t *vx = &ex->v[p->vx], *vg = p->backward ? &ex->v[p->vg] : NULL;
    const nn_view_t *vo = p->stats_only ? NULL : &ex->v[p->vout];
    const double M = (double)p->M;
    /* float32 rows of unit stride everywhere: read and written in place */
    const bool f32 = vx->dtype == ACL_FLOAT && p->sx.stride[p->sx.k - 1] == 1 &&
                     (!vg || (vg->dtype == ACL_FLOAT && p->sg.stride[p->sg.k - 1] == 1)) &&
                     (!vo || (vo->dtype == ACL_FLOAT && p->so.stride[p->so.k - 1] == 1));
#define BN_F(s, v, r) ((float *)bn_row(s, v, c, r))
#define BN_ROWS(r0, nr) for (int64_t r0 = 0, nr = br < rows ? br : rows; r0 < rows; r0 += nr, nr = rows - r0 < br ? rows - r0 : br)
    for (int64_t c = c0; c < c1; c++) {
        double mean, invstd;
        double w = bn_get(ex, p->vw, c, 1.0);
        bool loaded = false;   /* the whole channel is in xb (and gb) */
        if (p->training && !p->backward) {
            double s = 0, ss = 0;
            if (f32) {
                for (int64_t r = 0; r < rows; r++)
                    s += bn_sum_f32(BN_F(&p->sx, vx, r), len);
                mean = p->M ? s / M : 0.0;
                for (int64_t r = 0; r < rows; r++)   /* two passes: the variance keeps its precision */
                    ss += bn_sqdev_f32(BN_F(&p->sx, vx, r), len, mean);
            } else {
                BN_ROWS(r0, nr) {
                    bn_load_rows(&p->sx, vx, c, r0, nr, xb);
                    s += bn_sum(xb, nr * len);
                }
                loaded = whole;
                mean = p->M ? s / M : 0.0;
                BN_ROWS(r0, nr) {
                    if (!loaded)
                        bn_load_rows(&p->sx, vx, c, r0, nr, xb);
                    ss += bn_sqdev(xb, nr * len, mean);
                }
            }
            double var = p->M ? ss / M : 0.0;
            /* PyTorch's InvStd (aten/src/ATen/native/Normalization.cpp): 0, not inf, for a constant
             * channel with eps 0, so its output is the bias (0 without one), not NaN */
            invstd = (var != 0 || p->eps != 0) ? 1.0 / sqrt(var + p->eps) : 0.0;
            if (p->vrm >= 0 && p->M) {
                double m = p->momentum;
                bn_put(ex, p->vrm, c, (1.0 - m) * bn_get(ex, p->vrm, c, 0) + m * mean);
                bn_put(ex, p->vrv, c, (1.0 - m) * bn_get(ex, p->vrv, c, 0) + m * (ss / (M - 1.0)));
            }
        } else if (p->training || p->vrm < 0) {   /* backward: the statistics the forward saved */
            mean = bn_get(ex, p->vsm, c, 0);
            invstd = bn_get(ex, p->vsi, c, 0);
        } else {
            mean = bn_get(ex, p->vrm, c, 0);
            invstd = 1.0 / sqrt(bn_get(ex, p->vrv, c, 0) + p->eps);
        }
        if (p->stats_only) {
            bn_put(ex, p->vsm, c, mean);
            bn_put(ex, p->vsi, c, invstd);
            continue;
        }
        if (!p->backward) {
            double b = bn_get(ex, p->vb, c, 0.0);
            double scale = invstd * w, shift = b - mean * scale;
            if (f32)
                for (int64_t r = 0; r < rows; r++)
                    bn_affine_f32(BN_F(&p->so, vo, r), BN_F(&p->sx, vx, r), len, scale, shift);
            else BN_ROWS(r0, nr) {
                if (!loaded)
                    bn_load_rows(&p->sx, vx, c, r0, nr, xb);
                bn_affine(xb, nr * len, scale, shift);
                bn_store_rows(&p->so, vo, c, r0, nr, xb);
            }
            bn_put(ex, p->vsm, c, mean);
            bn_put(ex, p->vsi, c, invstd);
            continue;
        }
        /* backward: xhat = (x - mean) invstd; dW = sum(dy xhat), dB = sum(dy);
         * training: dx = w invstd (dy - dB / M - xhat dW / M); eval: dx = w invstd dy */
        double sdy = 0, sdyx = 0;
        if (f32)
            for (int64_t r = 0; r < rows; r++)
                bn_gsums_f32(BN_F(&p->sg, vg, r), BN_F(&p->sx, vx, r), len, mean, invstd, &sdy, &sdyx);
        else BN_ROWS(r0, nr) {
            bn_load_rows(&p->sx, vx, c, r0, nr, xb);
            bn_load_rows(&p->sg, vg, c, r0, nr, gb);
            bn_gsums(gb, xb, nr * len, mean, invstd, &sdy, &sdyx);
        }
        loaded = whole;
        if (p->mask[1])
            bn_put(ex, p->vgw, c, sdyx);
        if (p->mask[2])
            bn_put(ex, p->vgb, c, sdy);
        if (!p->mask[0])
            continue;
        double a = w * invstd;
        double mdy = p->training && p->M ? sdy / M : 0.0, mdyx = p->training && p->M ? sdyx / M : 0.0;
        if (f32)
            for (int64_t r = 0; r < rows; r++)
                bn_dx_f32(BN_F(&p->so, vo, r), BN_F(&p->sg, vg, r), BN_F(&p->sx, vx, r), len, a, mdy, mean,
                          invstd * mdyx);
        else BN_ROWS(r0, nr) {
            if (!loaded) {
                bn_load_rows(&p->sx, vx, c, r0, nr, xb);
                bn_load_rows(&p->sg, vg, c, r0, nr, gb);
            }
            bn_dx(xb, gb, nr * len, a, mdy, mean, invstd * mdyx);
            bn_store_rows(&p->so, vo, c, r0, nr, xb);
        }
    }
#undef BN_ROWS
#undef BN_F
    free(xb);
    return ACL_SUCCESS;
}

static aclError bn_run(nn_exec_t *ex)
{
    bn_params_t *p = (bn_params_t *)ex->params;
    if (!p->C)
        return ACL_SUCCESS;
    bn_job_t j = {ex, p, 0};
    uint32_t nb = nn_blocks(ex, ex->v[p->vx].numel, NN_BLOCK_GRAIN);
    if ((int64_t)nb > p->C)
        nb = (uint32_t)p->C;
    j.per = (p->C + nb - 1) / nb;
    nb = (uint32_t)((p->C + j.per - 1) / j.per);
    return nn_parallel(ex, nb, bn_block, &j);
}

/* ------------------------------------------------------------------ argument checks */

static aclnnStatus bn_float(const char *api, const char *name, const nn_tensor_t *t)
{
    if (t && !nn_is_float(t->dtype))
        return NN_PARAM("%s: %s has dtype %s (expected float32, float16, bfloat16 or float64)", api, name,
                        nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

/* a per-channel tensor: [C] */
static aclnnStatus bn_chan(const char *api, const char *name, const nn_tensor_t *t, int64_t C)
{
    if (!t)
        return ACLNN_SUCCESS;
    if (t->ndim != 1 || t->shape[0] != C) {
        char s[160];
        return NN_PARAM("%s: %s has shape %s, expected [%lld] (one value per channel of input)", api, name,
                        nn_shape_str(s, sizeof s, t->shape, t->ndim), (long long)C);
    }
    return bn_float(api, name, t);
}

static aclnnStatus bn_input(const char *api, const char *name, const nn_tensor_t *x)
{
    aclnnStatus rc = bn_float(api, name, x);
    if (rc)
        return rc;
    if (x->ndim < 2)
        return NN_PARAM("%s: %s must have 2 to 8 dims [N, C, *], got %d", api, name, x->ndim);
    return ACLNN_SUCCESS;
}

static aclnnStatus bn_same(const char *api, const char *an, const nn_tensor_t *a, const char *bn,
                           const nn_tensor_t *b)
{
    if (nn_same_shape(a, b->shape, b->ndim))
        return ACLNN_SUCCESS;
    char s1[160], s2[160];
    return NN_PARAM("%s: %s has shape %s but %s has shape %s (they must match)", api, an,
                    nn_shape_str(s1, sizeof s1, a->shape, a->ndim), bn, nn_shape_str(s2, sizeof s2, b->shape, b->ndim));
}

/* written views (outputs and the running statistics) must not overlap any other view */
static aclnnStatus bn_overlaps(const char *api, nn_exec_t *ex, const int32_t *written, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t w = written[i];
        if (w < 0)
            continue;
        const nn_view_t *o = &ex->v[w];
        for (int32_t d = 0; d < o->ndim; d++)
            if (o->shape[d] > 1 && o->stride[d] == 0)
                return NN_PARAM("%s: %s has stride 0 in dim %d: more than one element of the written-to tensor "
                                "refers to a single memory location", api, o->name, d);
        for (int32_t k = 0; k < ex->nview; k++)
            if (k != w && nn_views_overlap(o, &ex->v[k]))
                return NN_PARAM("%s: %s overlaps %s in memory (the tensors an op writes must not share memory with "
                                "its other tensors)", api, o->name, ex->v[k].name);
    }
    return ACLNN_SUCCESS;
}

static nn_exec_t *bn_new(const char *api)
{
    nn_exec_t *ex = nn_exec_new(api, bn_run, ACLSIM_ENGINE_VECTOR, sizeof(bn_params_t));
    if (!ex)
        return NULL;
    bn_params_t *p = (bn_params_t *)ex->params;
    p->vx = p->vg = p->vw = p->vb = p->vrm = p->vrv = p->vsm = p->vsi = p->vout = p->vgw = p->vgb = -1;
    return ex;
}

static aclnnStatus bn_finish(const char *api, nn_exec_t *ex, const int32_t *written, int n, uint64_t *workspaceSize,
                             aclOpExecutor **executor)
{
    bn_params_t *p = (bn_params_t *)ex->params;
    aclnnStatus rc = bn_overlaps(api, ex, written, n);
    if (rc) {
        free(ex);
        return rc;
    }
    bn_slice_of(&p->sx, &ex->v[p->vx]);
    if (p->vg >= 0)
        bn_slice_of(&p->sg, &ex->v[p->vg]);
    if (p->vout >= 0)
        bn_slice_of(&p->so, &ex->v[p->vout]);
    bn_slice_t *sl[3] = {&p->sx};
    int nsl = 1;
    if (p->vg >= 0)
        sl[nsl++] = &p->sg;
    if (p->vout >= 0)
        sl[nsl++] = &p->so;
    bn_merge(sl, nsl);
    int64_t numel = ex->v[p->vx].numel;
    /* measured on one core (vector loops, float32 read in place): ~0.5 ns per element forward or
     * backward, ~2 ns through the double buffers of other dtypes and strides */
    ex->cost_ns = (uint64_t)(ex->v[p->vx].dtype == ACL_FLOAT ? numel / 2 : numel * 2);
    ex->cores = (uint32_t)(numel / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

static int64_t bn_per_channel(const nn_tensor_t *x)
{
    return x->shape[1] ? x->numel / x->shape[1] : 0;
}

NN_API aclnnStatus aclnnBatchNormGetWorkspaceSize(const aclTensor *input, const aclTensor *weight, const aclTensor *bias,
                                                  aclTensor *runningMean, aclTensor *runningVar, bool training,
                                                  double momentum, double eps, aclTensor *output, aclTensor *saveMean,
                                                  aclTensor *saveInvstd, uint64_t *workspaceSize,
                                                  aclOpExecutor **executor)
{
    static const char api[] = "aclnnBatchNorm";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *w, *b, *rm, *rv, *o, *sm, *si;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = bn_input(api, "input", x)) ||
        (rc = nn_tensor_arg(api, "weight", weight, true, &w)) ||
        (rc = nn_tensor_arg(api, "bias", bias, true, &b)) ||
        (rc = nn_tensor_arg(api, "runningMean", runningMean, true, &rm)) ||
        (rc = nn_tensor_arg(api, "runningVar", runningVar, true, &rv)) ||
        (rc = nn_tensor_arg(api, "output", output, false, &o)) || (rc = bn_float(api, "output", o)) ||
        (rc = nn_tensor_arg(api, "saveMean", saveMean, true, &sm)) ||
        (rc = nn_tensor_arg(api, "saveInvstd", saveInvstd, true, &si)))
        return rc;
    int64_t C = x->shape[1], M = bn_per_channel(x);
    if ((rc = bn_chan(api, "weight", w, C)) || (rc = bn_chan(api, "bias", b, C)) ||
        (rc = bn_chan(api, "runningMean", rm, C)) || (rc = bn_chan(api, "runningVar", rv, C)) ||
        (rc = bn_chan(api, "saveMean", sm, C)) || (rc = bn_chan(api, "saveInvstd", si, C)) ||
        (rc = bn_same(api, "output", o, "input", x)))
        return rc;
    if (!rm != !rv)
        return NN_PARAM("%s: runningMean and runningVar must be given together (one of them is NULL)", api);
    if (!training && !rm)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: runningMean and runningVar are required when training is false "
                      "(eval normalizes with them)", api);
    if (training && M == 1) {
        char s[160];
        return NN_PARAM("%s: expected more than 1 value per channel when training, got input of shape %s", api,
                        nn_shape_str(s, sizeof s, x->shape, x->ndim));
    }
    if (!(eps >= 0))
        return NN_PARAM("%s: eps must be >= 0, got %g", api, eps);
    if (!(momentum == momentum))
        return NN_PARAM("%s: momentum is NaN", api);
    nn_exec_t *ex = bn_new(api);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    bn_params_t *p = (bn_params_t *)ex->params;
    p->training = training;
    p->momentum = momentum;
    p->eps = eps;
    p->C = C;
    p->M = M;
    p->vx = nn_exec_add(ex, x, "input", false);   /* parameter order */
    p->vw = nn_exec_add(ex, w, "weight", false);
    p->vb = nn_exec_add(ex, b, "bias", false);
    p->vrm = nn_exec_add(ex, rm, "runningMean", false);
    p->vrv = nn_exec_add(ex, rv, "runningVar", false);
    p->vout = nn_exec_add(ex, o, "output", true);
    p->vsm = nn_exec_add(ex, sm, "saveMean", true);
    p->vsi = nn_exec_add(ex, si, "saveInvstd", true);
    int32_t written[5] = {p->vout, p->vsm, p->vsi, training ? p->vrm : -1, training ? p->vrv : -1};
    return bn_finish(api, ex, written, 5, workspaceSize, executor);
}

NN_API aclnnStatus aclnnBatchNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnBatchNorm", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnBatchNormBackwardGetWorkspaceSize(const aclTensor *gradOut, const aclTensor *input,
                                                          const aclTensor *weight, const aclTensor *runningMean,
                                                          const aclTensor *runningVar, const aclTensor *saveMean,
                                                          const aclTensor *saveInvstd, bool training, double eps,
                                                          const aclBoolArray *outputMask, aclTensor *gradInput,
                                                          aclTensor *gradWeight, aclTensor *gradBias,
                                                          uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnBatchNormBackward";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *x, *w, *rm, *rv, *sm, *si, *gi, *gw, *gb;
    const nn_boolarray_t *mk;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOut", gradOut, false, &g)) || (rc = bn_input(api, "gradOut", g)) ||
        (rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = bn_input(api, "input", x)) ||
        (rc = nn_tensor_arg(api, "weight", weight, true, &w)) ||
        (rc = nn_tensor_arg(api, "runningMean", runningMean, true, &rm)) ||
        (rc = nn_tensor_arg(api, "runningVar", runningVar, true, &rv)) ||
        (rc = nn_tensor_arg(api, "saveMean", saveMean, true, &sm)) ||
        (rc = nn_tensor_arg(api, "saveInvstd", saveInvstd, true, &si)) ||
        (rc = nn_boolarray_arg(api, "outputMask", outputMask, false, &mk)) ||
        (rc = nn_tensor_arg(api, "gradInput", gradInput, true, &gi)) ||
        (rc = nn_tensor_arg(api, "gradWeight", gradWeight, true, &gw)) ||
        (rc = nn_tensor_arg(api, "gradBias", gradBias, true, &gb)))
        return rc;
    const nn_tensor_t *outs[3] = {gi, gw, gb};
    static const char *const onames[3] = {"gradInput", "gradWeight", "gradBias"};
    if ((rc = nn_output_mask3(api, mk, outs, onames)))
        return rc;
    int64_t C = x->shape[1];
    if ((rc = bn_same(api, "gradOut", g, "input", x)) || (rc = bn_chan(api, "weight", w, C)) ||
        (rc = bn_chan(api, "runningMean", rm, C)) || (rc = bn_chan(api, "runningVar", rv, C)) ||
        (rc = bn_chan(api, "saveMean", sm, C)) || (rc = bn_chan(api, "saveInvstd", si, C)) ||
        (mk->v[0] && ((rc = bn_same(api, "gradInput", gi, "input", x)) || (rc = bn_float(api, "gradInput", gi)))) ||
        (mk->v[1] && (rc = bn_chan(api, "gradWeight", gw, C))) || (mk->v[2] && (rc = bn_chan(api, "gradBias", gb, C))))
        return rc;
    if (training && (!sm || !si))
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: saveMean and saveInvstd (from aclnnBatchNorm) are required when "
                      "training is true", api);
    if (!training && (!rm || !rv) && (!sm || !si))
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: runningMean and runningVar (or the saveMean and saveInvstd "
                      "aclnnBatchNorm gave in eval) are required when training is false", api);
    if (!rm != !rv)
        return NN_PARAM("%s: runningMean and runningVar must be given together (one of them is NULL)", api);
    if (!(eps >= 0))
        return NN_PARAM("%s: eps must be >= 0, got %g", api, eps);
    nn_exec_t *ex = bn_new(api);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    bn_params_t *p = (bn_params_t *)ex->params;
    p->backward = true;
    p->training = training;
    p->eps = eps;
    p->C = C;
    p->M = bn_per_channel(x);
    for (int i = 0; i < 3; i++)
        p->mask[i] = mk->v[i];
    p->vg = nn_exec_add(ex, g, "gradOut", false);   /* parameter order */
    p->vx = nn_exec_add(ex, x, "input", false);
    p->vw = nn_exec_add(ex, w, "weight", false);
    p->vrm = nn_exec_add(ex, rm, "runningMean", false);
    p->vrv = nn_exec_add(ex, rv, "runningVar", false);
    p->vsm = nn_exec_add(ex, sm, "saveMean", false);
    p->vsi = nn_exec_add(ex, si, "saveInvstd", false);
    p->vout = mk->v[0] ? nn_exec_add(ex, gi, onames[0], true) : -1;
    p->vgw = mk->v[1] ? nn_exec_add(ex, gw, onames[1], true) : -1;
    p->vgb = mk->v[2] ? nn_exec_add(ex, gb, onames[2], true) : -1;
    int32_t written[3] = {p->vout, p->vgw, p->vgb};
    return bn_finish(api, ex, written, 3, workspaceSize, executor);
}

NN_API aclnnStatus aclnnBatchNormBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream)
{
    return nn_launch("aclnnBatchNormBackward", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnBatchNormStatsGetWorkspaceSize(const aclTensor *input, double eps, aclTensor *mean,
                                                       aclTensor *invstd, uint64_t *workspaceSize,
                                                       aclOpExecutor **executor)
{
    static const char api[] = "aclnnBatchNormStats";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *sm, *si;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = bn_input(api, "input", x)) ||
        (rc = nn_tensor_arg(api, "mean", mean, false, &sm)) || (rc = nn_tensor_arg(api, "invstd", invstd, false, &si)))
        return rc;
    int64_t C = x->shape[1];
    if ((rc = bn_chan(api, "mean", sm, C)) || (rc = bn_chan(api, "invstd", si, C)))
        return rc;
    if (!(eps >= 0))
        return NN_PARAM("%s: eps must be >= 0, got %g", api, eps);
    nn_exec_t *ex = bn_new(api);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    bn_params_t *p = (bn_params_t *)ex->params;
    p->training = p->stats_only = true;
    p->eps = eps;
    p->C = C;
    p->M = bn_per_channel(x);
    p->vx = nn_exec_add(ex, x, "input", false);
    p->vsm = nn_exec_add(ex, sm, "mean", true);
    p->vsi = nn_exec_add(ex, si, "invstd", true);
    int32_t written[2] = {p->vsm, p->vsi};
    return bn_finish(api, ex, written, 2, workspaceSize, executor);
}

NN_API aclnnStatus aclnnBatchNormStats(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                       aclrtStream stream)
{
    return nn_launch("aclnnBatchNormStats", workspace, workspaceSize, executor, stream);
}
