/* canna simulator op library: activations and unary math on the pointwise engine (op_pointwise.c):
 * aclnnHardswish / aclnnHardswishBackward, aclnnHardsigmoid / aclnnHardsigmoidBackward,
 * aclnnRsqrt, aclnnReciprocal, aclnnSin, aclnnCos. Float dtypes (float32, float16, bfloat16 compute in float;
 * float64 in double); inputs of any strides; out may be the input itself (in place).
 *
 * Formulas (hiascend.com aclnn pages of each op; PyTorch's own definitions agree):
 *   hardswish(x)  = x * min(max(x + 3, 0), 6) / 6
 *   d/dx          = 0 for x <= -3, x / 3 + 1/2 for -3 < x < 3, 1 for x >= 3 (PyTorch's one-sided
 *                   values at the kinks; the aclnn page writes the middle case as -3 <= x <= 3)
 *   hardsigmoid(x)= min(max(x / 6 + 1/2, 0), 1)
 *   d/dx          = 1/6 for -3 < x < 3, else 0
 */
#include "opsim.h"

#include <tgmath.h>

#pragma GCC optimize("O3")

/* a kernel of one input, or of two (gradOutput g, input x), for float and double */
#define PW_UNARY(NAME, EXPR)                                                                        \
    static void NAME##_f32(int64_t n, int64_t flat, void *o_, const void *const *in, const void *p)  \
    {                                                                                              \
        (void)flat; (void)p;                                                                       \
        typedef float T;                                                                           \
        T *restrict o = o_; const T *restrict a = in[0];                                           \
        for (int64_t i = 0; i < n; i++) { T x = a[i]; o[i] = (EXPR); }                             \
    }                                                                                              \
    static void NAME##_f64(int64_t n, int64_t flat, void *o_, const void *const *in, const void *p)  \
    {                                                                                              \
        (void)flat; (void)p;                                                                       \
        typedef double T;                                                                          \
        T *restrict o = o_; const T *restrict a = in[0];                                           \
        for (int64_t i = 0; i < n; i++) { T x = a[i]; o[i] = (EXPR); }                             \
    }

#define PW_GRAD(NAME, EXPR)                                                                         \
    static void NAME##_f32(int64_t n, int64_t flat, void *o_, const void *const *in, const void *p)  \
    {                                                                                              \
        (void)flat; (void)p;                                                                       \
        typedef float T;                                                                           \
        T *restrict o = o_; const T *restrict gr = in[0], *restrict a = in[1];                     \
        for (int64_t i = 0; i < n; i++) { T g = gr[i], x = a[i]; o[i] = (EXPR); }                  \
    }                                                                                              \
    static void NAME##_f64(int64_t n, int64_t flat, void *o_, const void *const *in, const void *p)  \
    {                                                                                              \
        (void)flat; (void)p;                                                                       \
        typedef double T;                                                                          \
        T *restrict o = o_; const T *restrict gr = in[0], *restrict a = in[1];                     \
        for (int64_t i = 0; i < n; i++) { T g = gr[i], x = a[i]; o[i] = (EXPR); }                  \
    }

/* written as PyTorch's kernels compute them, so NaN, infinities and signed zeros come out the same
 * (hardswish(-inf) is NaN: -inf * 0) */
PW_UNARY(k_hardswish, x * (x + (T)3 < (T)0 ? (T)0 : x + (T)3 > (T)6 ? (T)6 : x + (T)3) / (T)6)
PW_GRAD(k_hardswish_bw, x <= (T)-3 ? (T)0 : x < (T)3 ? g * (x / (T)3 + (T)0.5) : g)
PW_UNARY(k_hardsigmoid, x <= (T)-3 ? (T)0 : x >= (T)3 ? (T)1 : x / (T)6 + (T)0.5)
PW_GRAD(k_hardsigmoid_bw, (x > (T)-3 && x < (T)3) ? g / (T)6 : (T)0)
PW_UNARY(k_rsqrt, (T)1 / sqrt(x))
PW_UNARY(k_reciprocal, (T)1 / x)
PW_UNARY(k_sin, sin(x))
PW_UNARY(k_cos, cos(x))

#define KERNEL(NAME, W) static const nn_pw_kernel_t NAME = {NAME##_f32, NAME##_f64, W};
KERNEL(k_hardswish, 1)
KERNEL(k_hardswish_bw, 1)
KERNEL(k_hardsigmoid, 1)
KERNEL(k_hardsigmoid_bw, 1)
KERNEL(k_rsqrt, 2)
KERNEL(k_reciprocal, 1)
KERNEL(k_sin, 8)
KERNEL(k_cos, 8)

/* out = f(self): out has self's shape; the result type is self's dtype, which must cast to out's */
static aclnnStatus unary(const char *api, const nn_pw_kernel_t *k, const aclTensor *self, const aclTensor *out,
                         uint64_t *workspaceSize, aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if ((rc = nn_pw_check_float(api, "self", a)) || (rc = nn_pw_check_float(api, "out", o)))
        return rc;
    if (!nn_same_shape(o, a->shape, a->ndim)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: out has shape %s but self has shape %s", api,
                        nn_shape_str(s1, sizeof s1, o->shape, o->ndim), nn_shape_str(s2, sizeof s2, a->shape, a->ndim));
    }
    if (!nn_can_cast(a->dtype, o->dtype))
        return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api, nn_dtype_name(a->dtype),
                        nn_dtype_name(o->dtype));
    const nn_tensor_t *in[1] = {a};
    static const char *const names[1] = {"self"};
    return nn_pw_make(api, k, nn_pw_ct(nn_promote(a->dtype, o->dtype)), 1, in, names, o, "out", NULL, 0,
                      workspaceSize, executor);
}

/* out = f(gradOutput, self): out has their broadcast shape (aclnn asks for one shape, which is the
 * common case); the promoted dtype must cast to out's */
static aclnnStatus grad(const char *api, const nn_pw_kernel_t *k, const aclTensor *gradOutput, const aclTensor *self,
                        const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *a, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOutput", gradOutput, false, &g)) ||
        (rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if ((rc = nn_pw_check_float(api, "gradOutput", g)) || (rc = nn_pw_check_float(api, "self", a)) ||
        (rc = nn_pw_check_float(api, "out", o)))
        return rc;
    int64_t shape[NN_MAX_DIMS];
    int32_t nd;
    if (!nn_broadcast(g->shape, g->ndim, a->shape, a->ndim, shape, &nd) || !nn_same_shape(o, shape, nd)) {
        char s1[160], s2[160], s3[160];
        return NN_PARAM("%s: gradOutput %s and self %s must broadcast to out's shape %s", api,
                        nn_shape_str(s1, sizeof s1, g->shape, g->ndim), nn_shape_str(s2, sizeof s2, a->shape, a->ndim),
                        nn_shape_str(s3, sizeof s3, o->shape, o->ndim));
    }
    aclDataType prom = nn_promote(g->dtype, a->dtype);
    if (!nn_can_cast(prom, o->dtype))
        return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api, nn_dtype_name(prom),
                        nn_dtype_name(o->dtype));
    const nn_tensor_t *in[2] = {g, a};
    static const char *const names[2] = {"gradOutput", "self"};
    return nn_pw_make(api, k, nn_pw_ct(nn_promote(prom, o->dtype)), 2, in, names, o, "out", NULL, 0, workspaceSize,
                      executor);
}

#define PHASE2(NAME)                                                                                \
    NN_API aclnnStatus aclnn##NAME(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,  \
                                   aclrtStream stream)                                              \
    {                                                                                              \
        return nn_launch("aclnn" #NAME, workspace, workspaceSize, executor, stream);               \
    }

#define UNARY(NAME, K)                                                                              \
    NN_API aclnnStatus aclnn##NAME##GetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize, \
                                                     aclOpExecutor **executor)                      \
    {                                                                                              \
        return unary("aclnn" #NAME, &K, self, out, workspaceSize, executor);                       \
    }                                                                                              \
    PHASE2(NAME)

#define GRAD(NAME, K)                                                                               \
    NN_API aclnnStatus aclnn##NAME##GetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self, aclTensor *out, \
                                                     uint64_t *workspaceSize, aclOpExecutor **executor) \
    {                                                                                              \
        return grad("aclnn" #NAME, &K, gradOutput, self, out, workspaceSize, executor);            \
    }                                                                                              \
    PHASE2(NAME)

UNARY(Hardswish, k_hardswish)
GRAD(HardswishBackward, k_hardswish_bw)
UNARY(Hardsigmoid, k_hardsigmoid)
GRAD(HardsigmoidBackward, k_hardsigmoid_bw)
UNARY(Rsqrt, k_rsqrt)
UNARY(Reciprocal, k_reciprocal)
UNARY(Sin, k_sin)
UNARY(Cos, k_cos)
