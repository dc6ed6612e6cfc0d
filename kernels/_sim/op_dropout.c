/* canna simulator op library: dropout as aclnn splits it (hiascend.com aclnnDropoutGenMaskV2 and
 * aclnnDropoutDoMask pages): aclnnDropoutGenMaskV2 draws a bit mask from (seed, offset), and
 * aclnnDropoutDoMask applies it, out = mask ? self / (1 - prob) : 0 (0 everywhere for prob 1). The
 * backward of dropout is DoMask again on the gradient, with the same mask.
 *
 * The mask: uint8, align(numel, 128) / 8 bytes (the bit count rounded up to a multiple of 128, as
 * CANN's); bit i % 8 of byte i / 8 (least significant first) is element i (row-major) and is 1 when
 * the element is kept; bits past numel are 0.
 *
 * The generator is counter-based, Philox4x32-10 (J. Salmon, M. Moraes, R. Dror, D. Shaw, "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11), written here from that description: key = the 64-bit
 * seed (low word k0, high word k1), counter = (g low, g high, offset low, offset high) for the group
 * g = i / 4 of four elements; element i takes word i % 4 of its group's output r and is kept when
 * r * 2^-32 >= prob. Every element's bit is a function of (seed, offset, i) only: the result does not
 * depend on how the work is split over blocks. It is not CANN's own stream (its generator is not
 * published) nor PyTorch's. */
#include "opsim.h"

#pragma GCC optimize("O3")

/* ------------------------------------------------------------------ Philox4x32-10 */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u   /* golden ratio */
#define PHILOX_W1 0xBB67AE85u   /* sqrt(3) - 1 */

static inline void philox4x32_10(const uint32_t ctr[4], uint32_t k0, uint32_t k1, uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* ------------------------------------------------------------------ aclnnDropoutGenMaskV2 */

typedef struct gen_params {
    int64_t numel, nbytes;       /* elements of shape; bytes of the mask */
    uint64_t seed, offset;
    double prob;
} gen_params_t;

typedef struct gen_job {
    const gen_params_t *p;
    uint8_t *out;
    int64_t stride;
    int64_t per;                 /* bytes per block (a multiple of 16) */
} gen_job_t;

static aclError gen_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    const gen_job_t *j = arg;
    const gen_params_t *p = j->p;
    int64_t b0 = (int64_t)bi * j->per, b1 = b0 + j->per;
    if (b1 > p->nbytes)
        b1 = p->nbytes;
    const uint32_t k0 = (uint32_t)p->seed, k1 = (uint32_t)(p->seed >> 32);
    for (int64_t b = b0; b < b1; b += 2) {   /* 16 elements = 4 groups per 2 bytes */
        uint32_t bits = 0;
        for (int q = 0; q < 4; q++) {
            uint64_t g = (uint64_t)(b * 8) / 4 + (uint64_t)q;
            uint32_t ctr[4] = {(uint32_t)g, (uint32_t)(g >> 32), (uint32_t)p->offset, (uint32_t)(p->offset >> 32)};
            uint32_t r[4];
            philox4x32_10(ctr, k0, k1, r);
            for (int w = 0; w < 4; w++) {
                int64_t i = (int64_t)g * 4 + w;
                if (i < p->numel && (double)r[w] * 0x1p-32 >= p->prob)
                    bits |= 1u << (q * 4 + w);
            }
        }
        j->out[b * j->stride] = (uint8_t)bits;
        if (b + 1 < b1)
            j->out[(b + 1) * j->stride] = (uint8_t)(bits >> 8);
    }
    return ACL_SUCCESS;
}

static aclError gen_run(nn_exec_t *ex)
{
    const gen_params_t *p = (const gen_params_t *)ex->params;
    const nn_view_t *o = &ex->v[0];
    if (!p->nbytes)
        return ACL_SUCCESS;
    gen_job_t j = {p, (uint8_t *)o->data, o->ndim ? o->stride[0] : 1, 0};
    uint32_t nb = nn_blocks(ex, p->nbytes * 8 * 4, NN_BLOCK_GRAIN);
    int64_t per = (p->nbytes + nb - 1) / nb;
    per = (per + 15) & ~(int64_t)15;
    j.per = per;
    nb = (uint32_t)((p->nbytes + per - 1) / per);
    return nn_parallel(ex, nb, gen_block, &j);
}

/* bytes of the mask of numel elements: align(numel, 128) / 8 */
static int64_t mask_bytes(int64_t numel) { return (numel + 127) / 128 * 16; }

static aclnnStatus check_prob(const char *api, double prob)
{
    if (!(prob >= 0.0 && prob <= 1.0))
        return NN_PARAM("%s: prob must be in [0, 1], got %g", api, prob);
    return ACLNN_SUCCESS;
}

static aclnnStatus check_mask(const char *api, const char *name, const nn_tensor_t *m, int64_t numel)
{
    if (m->dtype != ACL_UINT8)
        return NN_PARAM("%s: %s has dtype %s, but the mask is uint8", api, name, nn_dtype_name(m->dtype));
    if (m->ndim != 1 || m->shape[0] != mask_bytes(numel))
        return NN_PARAM("%s: %s has shape %s, but the mask of %lld elements has shape [%lld] "
                        "(align(numel, 128) / 8 bytes)", api, name, NN_SHAPE(m), (long long)numel,
                        (long long)mask_bytes(numel));
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclnnDropoutGenMaskV2GetWorkspaceSize(const aclIntArray *shape, double prob, int64_t seed,
                                                         int64_t offset, aclDataType probDataType, aclTensor *out,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnDropoutGenMaskV2";
    NN_OUTPTRS(api);
    const nn_intarray_t *sh;
    const nn_tensor_t *o;
    aclnnStatus rc;
    if ((rc = nn_intarray_arg(api, "shape", shape, false, &sh)) || (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if ((rc = check_prob(api, prob)))
        return rc;
    if (probDataType != ACL_FLOAT && probDataType != ACL_FLOAT16 && probDataType != ACL_BF16)
        return NN_PARAM("%s: probDataType must be float32, float16 or bfloat16, got %s", api,
                        nn_dtype_name(probDataType));
    if (sh->n > NN_MAX_DIMS)
        return NN_PARAM("%s: shape has %llu dims (at most %d)", api, (unsigned long long)sh->n, NN_MAX_DIMS);
    int64_t numel = 1;
    for (uint64_t d = 0; d < sh->n; d++) {
        if (sh->v[d] < 0)
            return NN_PARAM("%s: shape has a negative size %lld", api, (long long)sh->v[d]);
        if (sh->v[d] && numel > INT64_MAX / 16 / sh->v[d])
            return NN_PARAM("%s: shape has too many elements", api);
        numel *= sh->v[d];
    }
    if ((rc = check_mask(api, "out", o, numel)))
        return rc;
    nn_exec_t *ex = nn_exec_new(api, gen_run, ACLSIM_ENGINE_VECTOR, sizeof(gen_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    gen_params_t *p = (gen_params_t *)ex->params;
    p->numel = numel;
    p->nbytes = mask_bytes(numel);
    p->seed = (uint64_t)seed;
    p->offset = (uint64_t)offset;
    p->prob = prob;
    int32_t ov = nn_exec_add(ex, o, "out", true);
    if ((rc = nn_check_output_overlap(api, ex, ov, false))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)(numel * 4);   /* ~4 ns per element: one Philox call per 4 */
    ex->cores = (uint32_t)(numel / (256 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnDropoutGenMaskV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream)
{
    return nn_launch("aclnnDropoutGenMaskV2", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ aclnnDropoutDoMask */

typedef struct do_params {
    double scale;                /* 1 / (1 - prob); 0 for prob 1 */
    int32_t ct;
} do_params_t;

typedef struct do_kparams {
    const uint8_t *mask;
    int64_t stride;
    double scale;
} do_kparams_t;

#define DO_KERNEL(SUF, T)                                                                            \
    static void k_domask_##SUF(int64_t n, int64_t flat, void *o_, const void *const *in, const void *p_) \
    {                                                                                               \
        const do_kparams_t *p = p_;                                                                 \
        T *restrict o = o_;                                                                         \
        const T *restrict a = in[0];                                                                \
        const T s = (T)p->scale;                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                           \
            int64_t e = flat + i;                                                                   \
            bool keep = (p->mask[(e >> 3) * p->stride] >> (e & 7)) & 1;                             \
            o[i] = keep ? a[i] * s : (T)0;                                                          \
        }                                                                                           \
    }
DO_KERNEL(f32, float)
DO_KERNEL(f64, double)
static const nn_pw_kernel_t k_domask = {k_domask_f32, k_domask_f64, 1};

static aclError do_run(nn_exec_t *ex)
{
    const do_params_t *p = (const do_params_t *)ex->params;
    const nn_view_t *m = &ex->v[1];
    do_kparams_t kp = {(const uint8_t *)m->data, m->stride[0], p->scale};
    const nn_view_t *in[1] = {&ex->v[0]};
    return nn_pw_apply(ex, &k_domask, p->ct, 1, in, &ex->v[2], &kp);
}

NN_API aclnnStatus aclnnDropoutDoMaskGetWorkspaceSize(const aclTensor *self, const aclTensor *mask, double prob,
                                                      aclTensor *out, uint64_t *workspaceSize,
                                                      aclOpExecutor **executor)
{
    static const char api[] = "aclnnDropoutDoMask";
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *m, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "mask", mask, false, &m)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if ((rc = nn_pw_check_float(api, "self", a)) || (rc = nn_pw_check_float(api, "out", o)) ||
        (rc = check_mask(api, "mask", m, a->numel)) || (rc = check_prob(api, prob)))
        return rc;
    if (!nn_same_shape(o, a->shape, a->ndim)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: out has shape %s but self has shape %s", api,
                        nn_shape_str(s1, sizeof s1, o->shape, o->ndim), nn_shape_str(s2, sizeof s2, a->shape, a->ndim));
    }
    if (!nn_can_cast(a->dtype, o->dtype))
        return NN_PARAM("%s: self's dtype %s cannot be cast to out's dtype %s", api, nn_dtype_name(a->dtype),
                        nn_dtype_name(o->dtype));
    nn_exec_t *ex = nn_exec_new(api, do_run, ACLSIM_ENGINE_VECTOR, sizeof(do_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    do_params_t *p = (do_params_t *)ex->params;
    p->scale = prob < 1.0 ? 1.0 / (1.0 - prob) : 0.0;
    p->ct = nn_pw_ct(nn_promote(a->dtype, o->dtype));
    nn_exec_add(ex, a, "self", false);
    nn_exec_add(ex, m, "mask", false);
    int32_t ov = nn_exec_add(ex, o, "out", true);
    if ((rc = nn_check_output_overlap(api, ex, ov, true))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)(a->numel * (int64_t)(nn_dtype_size(a->dtype) + nn_dtype_size(o->dtype)) / 16);
    ex->cores = (uint32_t)(a->numel / (1024 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnDropoutDoMask(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                      aclrtStream stream)
{
    return nn_launch("aclnnDropoutDoMask", workspace, workspaceSize, executor, stream);
}
