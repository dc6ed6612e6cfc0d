/* canna simulator op library: elementwise ops (unary, binary with NumPy broadcasting, with
 * scalars), their backward ops, the comparisons (EqTensor / EqScalar, Ne, Lt, Le, Gt, Ge: computed
 * in the operands' promoted type, 1 or 0 converted into a bool out; NaN compares unequal),
 * Maximum / Minimum (NaN propagates, as torch.maximum), Cast and InplaceCopy.
 *
 * One engine runs them all: the output's index space (dims of size 1 dropped, mergeable dims
 * merged) is cut into ranges, one per AI-core block; each range is walked row by row in chunks of
 * up to EW_CHUNK elements along the innermost dim. An operand whose dtype is the compute type and
 * whose inner stride is 1 is used in place (the fast path: no copy); any other layout or dtype
 * (broadcast, strided, float16, ...) is converted into a small per-block buffer first, and the
 * result is converted back into the output. Kernels work on contiguous arrays of the compute type
 * (float for float32/float16/bfloat16, double, int32, int64). */
#include "opsim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>
#include <unistd.h>

#pragma GCC optimize("O3")

#define EW_CHUNK 2048
#define EW_GRAIN (1024 * 1024)

/* the kernels: NN_CLONES (opsim.h) */

enum {
    /* binary */
    EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_THRESH_BW, EW_GELU_TANH_BW, EW_GELU_ERF_BW, EW_SILU_BW, EW_SIGMOID_BW,
    EW_TANH_BW, EW_EQ, EW_NE, EW_LT, EW_LE, EW_GT, EW_GE, EW_MAXIMUM, EW_MINIMUM,
    /* unary */
    EW_COPY, EW_NEG, EW_ABS, EW_SIGN, EW_EXP, EW_LOG, EW_SQRT, EW_POW, EW_RELU, EW_GELU_TANH, EW_GELU_ERF, EW_SILU, EW_SIGMOID,
    EW_TANH,
    EW_NOPS
};

typedef struct ew_params {
    int32_t op, ct, nin;        /* nin: 1 or 2 inputs (a scalar second operand counts as an input) */
    int32_t ndim;               /* coalesced */
    int64_t shape[NN_MAX_DIMS];
    int64_t st[3][NN_MAX_DIMS]; /* strides: [0] output, [1] input a, [2] input b */
    aclDataType dt[3];
    int32_t view[3];            /* executor view index of each operand; -1 = the scalar in sval */
    int64_t numel;
    double alpha_f, param_f;    /* alpha (add/sub), exponent (pow), threshold */
    int64_t alpha_i, param_i;
    _Alignas(8) unsigned char sval[8];   /* a scalar second operand, in the compute type */
} ew_params_t;

typedef void (*ew_kern)(int64_t n, void *o, const void *a, const void *b, const ew_params_t *p);

static aclDataType ct_dtype(int ct)
{
    switch (ct) {
    case CT_F32: return ACL_FLOAT;
    case CT_F64: return ACL_DOUBLE;
    case CT_I32: return ACL_INT32;
    default: return ACL_INT64;
    }
}

/* ------------------------------------------------------------------ kernels */

#define KSIG(name, T) NN_CLONES static void name(int64_t n, void *o_, const void *a_, const void *b_, const ew_params_t *p)
#define KBODY(T, EXPR)                                                                              \
    T *restrict o = o_;                                                                            \
    const T *restrict a = a_;                                                                      \
    const T *restrict b = b_;                                                                      \
    (void)a; (void)b; (void)p;                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                              \
        T x = a[i];                                                                                \
        T y = b ? b[i] : (T)0;                                                                     \
        (void)y;                                                                                   \
        o[i] = (EXPR);                                                                             \
    }

/* float kernels: the same expression for float and double (tgmath picks expf / exp) */
#define FK(NAME, EXPR)                                                                              \
    KSIG(NAME##_f32, float) { const float alpha = (float)p->alpha_f; (void)alpha; KBODY(float, EXPR) } \
    KSIG(NAME##_f64, double) { const double alpha = p->alpha_f; (void)alpha; KBODY(double, EXPR) }

/* binary kernels read b[i] only when the op is binary: write them without the b-NULL test */
#define FKB(NAME, EXPR)                                                                             \
    KSIG(NAME##_f32, float)                                                                        \
    {                                                                                              \
        float *restrict o = o_; const float *restrict a = a_; const float *restrict b = b_;        \
        const float alpha = (float)p->alpha_f; (void)alpha;                                        \
        for (int64_t i = 0; i < n; i++) { float x = a[i], y = b[i]; o[i] = (EXPR); }               \
    }                                                                                              \
    KSIG(NAME##_f64, double)                                                                       \
    {                                                                                              \
        double *restrict o = o_; const double *restrict a = a_; const double *restrict b = b_;     \
        const double alpha = p->alpha_f; (void)alpha;                                              \
        for (int64_t i = 0; i < n; i++) { double x = a[i], y = b[i]; o[i] = (EXPR); }              \
    }

#define FKU(NAME, EXPR)                                                                             \
    KSIG(NAME##_f32, float)                                                                        \
    {                                                                                              \
        float *restrict o = o_; const float *restrict a = a_; (void)b_; (void)p;                   \
        typedef float T; (void)sizeof(T);                                                          \
        for (int64_t i = 0; i < n; i++) { float x = a[i]; o[i] = (EXPR); }                         \
    }                                                                                              \
    KSIG(NAME##_f64, double)                                                                       \
    {                                                                                              \
        double *restrict o = o_; const double *restrict a = a_; (void)b_; (void)p;                 \
        typedef double T; (void)sizeof(T);                                                         \
        for (int64_t i = 0; i < n; i++) { double x = a[i]; o[i] = (EXPR); }                        \
    }

/* binary float kernels with a T typedef in scope */
#define FKBT(NAME, EXPR)                                                                            \
    KSIG(NAME##_f32, float)                                                                        \
    {                                                                                              \
        float *restrict o = o_; const float *restrict a = a_; const float *restrict b = b_;        \
        typedef float T; const float thr = (float)p->param_f; (void)thr; (void)sizeof(T);          \
        for (int64_t i = 0; i < n; i++) { float x = a[i], y = b[i]; o[i] = (EXPR); }               \
    }                                                                                              \
    KSIG(NAME##_f64, double)                                                                       \
    {                                                                                              \
        double *restrict o = o_; const double *restrict a = a_; const double *restrict b = b_;     \
        typedef double T; const double thr = p->param_f; (void)thr; (void)sizeof(T);              \
        for (int64_t i = 0; i < n; i++) { double x = a[i], y = b[i]; o[i] = (EXPR); }              \
    }

/* ------------------------------------------------------------------ vector math (float32)
 *
 * The float32 transcendental kernels (exp, tanh, erf and the activations made of them) run eight
 * elements at a time through glibc's vector math library, libmvec (the x86-64 vector function ABI:
 * _ZGVdN8v_expf is expf on the eight floats of an AVX2 register; glibc 2.22+, tanhf and erff
 * 2.35+; maximum error 4 ulp, documented in glibc's manual "Errors in Math Functions"), the way
 * PyTorch's CPU kernels use SLEEF's vector functions; a scalar libm call per element is several
 * times slower. On a CPU with AVX-512 the sixteen-float forms run (_ZGVeN16v_expf: one AVX-512
 * register), as PyTorch's own AVX-512 kernels do; CANNA_SIM_LIBMVEC=avx2 keeps the eight-float ones.
 * It is looked up at the first use (dlopen, like the BLAS): without it (another C library, a CPU
 * without AVX2 + FMA, or CANNA_SIM_LIBMVEC=0) the scalar loops below run. */
typedef float vm8f __attribute__((vector_size(32)));
typedef vm8f (*vm8f_fn)(vm8f);
typedef float vm16f __attribute__((vector_size(64)));
typedef vm16f (*vm16f_fn)(vm16f);

static struct {
    pthread_once_t once;
    bool ok, ok16;
    vm8f_fn vexp, vtanh, verf;
    vm16f_fn vexp16, vtanh16, verf16;
} g_vm = {PTHREAD_ONCE_INIT, false, false, NULL, NULL, NULL, NULL, NULL, NULL};

static void vm_init(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    const char *env = getenv("CANNA_SIM_LIBMVEC");
    if (env && strcmp(env, "0") == 0)
        return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return;
    void *h = dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    g_vm.vexp = (vm8f_fn)dlsym(h, "_ZGVdN8v_expf");
    g_vm.vtanh = (vm8f_fn)dlsym(h, "_ZGVdN8v_tanhf");
    g_vm.verf = (vm8f_fn)dlsym(h, "_ZGVdN8v_erff");
    g_vm.ok = g_vm.vexp && g_vm.vtanh && g_vm.verf;
    if (g_vm.ok && !(env && strcmp(env, "avx2") == 0) && __builtin_cpu_supports("avx512f")) {
        g_vm.vexp16 = (vm16f_fn)dlsym(h, "_ZGVeN16v_expf");
        g_vm.vtanh16 = (vm16f_fn)dlsym(h, "_ZGVeN16v_tanhf");
        g_vm.verf16 = (vm16f_fn)dlsym(h, "_ZGVeN16v_erff");
        g_vm.ok16 = g_vm.vexp16 && g_vm.vtanh16 && g_vm.verf16;
    }
#endif
}

static bool vm_ready(void)
{
    pthread_once(&g_vm.once, vm_init);
    return g_vm.ok;
}

static bool vm16_ready(void)
{
    pthread_once(&g_vm.once, vm_init);
    return g_vm.ok16;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VM_TARGET __attribute__((target("avx2,fma")))
#define VM16_TARGET __attribute__((target("avx512f")))
#else
#define VM_TARGET
#define VM16_TARGET
#endif

/* o[i] = VEXPR of x = a[i] (and y = b[i] when b): whole registers, the tail through a padded one */
#define VMK_W(NAME, SUF, VT, W, TARGET, VEXPR)                                                                                TARGET static void NAME##SUF(int64_t n, float *o, const float *a, const float *b)              {                                                                                                      int64_t i = 0;                                                                                     for (; i + W <= n; i += W) {                                                                           VT x, y = {0}, r;                                                                                memcpy(&x, a + i, sizeof x);                                                                       if (b)                                                                                                 memcpy(&y, b + i, sizeof y);                                                                   (void)y;                                                                                           r = (VEXPR);                                                                                       memcpy(o + i, &r, sizeof r);                                                                   }                                                                                                  if (i < n) {                                                                                           VT x = {0}, y = {0}, r;                                                                          memcpy(&x, a + i, (size_t)(n - i) * sizeof(float));                                                if (b)                                                                                                 memcpy(&y, b + i, (size_t)(n - i) * sizeof(float));                                            (void)y;                                                                                           r = (VEXPR);                                                                                       memcpy(o + i, &r, (size_t)(n - i) * sizeof(float));                                            }                                                                                              }
/* o[i] = VEXPR ...: the eight-float form (NAME_v8) and the sixteen-float one (NAME_v16) */
#define VMK(NAME, VEXPR) VMK_W(NAME, _v8, vm8f, 8, VM_TARGET, VEXPR) VMK_W(NAME, _v16, vm16f, 16, VM16_TARGET, VEXPR)
/* the libmvec function of the vector's width */
#define VEXP(v) _Generic((v), vm16f: g_vm.vexp16, default: g_vm.vexp)(v)
#define VTANH(v) _Generic((v), vm16f: g_vm.vtanh16, default: g_vm.vtanh)(v)
#define VERF(v) _Generic((v), vm16f: g_vm.verf16, default: g_vm.verf)(v)
#define VGELU_K 0.79788456080286535588f
#define VGELU_C 0.044715f
VMK(vm_exp, VEXP(x))
VMK(vm_sigmoid, 1.0f / (1.0f + VEXP(-x)))
VMK(vm_silu, x / (1.0f + VEXP(-x)))
VMK(vm_tanh, VTANH(x))
VMK(vm_gelu_erf, 0.5f * x * (1.0f + VERF(x * 0.70710678118654752440f)))
VMK(vm_gelu_tanh, 0.5f * x * (1.0f + VTANH(VGELU_K * (x + VGELU_C * x * x * x))))
/* backward: x = grad, y = self */
VMK(vm_silu_bw, x * (1.0f / (1.0f + VEXP(-y))) * (1.0f + y * (1.0f - 1.0f / (1.0f + VEXP(-y)))))
VMK(vm_gelu_erf_bw, x * (0.5f * (1.0f + VERF(y * 0.70710678118654752440f)) +
                         y * 0.39894228040143267794f * VEXP(-0.5f * y * y)))
#define VM_GELU_TANH_GRAD(SUF, VT, TARGET)                                                          \
    TARGET static inline VT vm_gelu_tanh_grad##SUF(VT y)                                          \
    {                                                                                              \
        VT t = VTANH(VGELU_K * (y + VGELU_C * y * y * y));                                         \
        return 0.5f * (1.0f + t) + 0.5f * y * (1.0f - t * t) * VGELU_K * (1.0f + 3.0f * VGELU_C * y * y); \
    }
VM_GELU_TANH_GRAD(_v8, vm8f, VM_TARGET)
VM_GELU_TANH_GRAD(_v16, vm16f, VM16_TARGET)
VMK(vm_gelu_tanh_bw, x * _Generic((y), vm16f: vm_gelu_tanh_grad_v16, default: vm_gelu_tanh_grad_v8)(y))

/* a float32 kernel through libmvec when it is there, else the scalar loop of FKU / FKBT */
#define FKU_VM(NAME, EXPR)                                                                              KSIG(k_##NAME##_f32, float)                                                                            {                                                                                                      float *restrict o = o_; const float *restrict a = a_; (void)b_; (void)p;                           if (vm16_ready()) { vm_##NAME##_v16(n, o, a, NULL); return; }                                        if (vm_ready()) {                                                                                      vm_##NAME##_v8(n, o, a, NULL);                                                                     return;                                                                                        }                                                                                                  typedef float T; (void)sizeof(T);                                                                  for (int64_t i = 0; i < n; i++) { float x = a[i]; o[i] = (EXPR); }                             }                                                                                                  KSIG(k_##NAME##_f64, double)                                                                           {                                                                                                      double *restrict o = o_; const double *restrict a = a_; (void)b_; (void)p;                         typedef double T; (void)sizeof(T);                                                                 for (int64_t i = 0; i < n; i++) { double x = a[i]; o[i] = (EXPR); }                            }
#define FKBT_VM(NAME, EXPR)                                                                             KSIG(k_##NAME##_f32, float)                                                                            {                                                                                                      float *restrict o = o_; const float *restrict a = a_; const float *restrict b = b_;                if (vm16_ready()) { vm_##NAME##_v16(n, o, a, b); return; }                                           if (vm_ready()) {                                                                                      vm_##NAME##_v8(n, o, a, b);                                                                        return;                                                                                        }                                                                                                  typedef float T; const float thr = (float)p->param_f; (void)thr; (void)sizeof(T);                  for (int64_t i = 0; i < n; i++) { float x = a[i], y = b[i]; o[i] = (EXPR); }                   }                                                                                                  KSIG(k_##NAME##_f64, double)                                                                           {                                                                                                      double *restrict o = o_; const double *restrict a = a_; const double *restrict b = b_;             typedef double T; const double thr = p->param_f; (void)thr; (void)sizeof(T);                      for (int64_t i = 0; i < n; i++) { double x = a[i], y = b[i]; o[i] = (EXPR); }                  }

FKB(k_add, x + alpha * y)
FKB(k_sub, x - alpha * y)
FKB(k_mul, x * y)
FKB(k_div, x / y)
FKU(k_copy, x)
FKU(k_neg, -x)
FKU(k_abs, fabs(x))
FKU(k_sign, (T)((x > (T)0) - (x < (T)0)))   /* 0 for NaN and ±0, as torch.sign */
FKU_VM(exp, exp(x))
FKU(k_log, log(x))
FKU(k_sqrt, sqrt(x))
FKU(k_relu, (x < (T)0) ? (T)0 : x)   /* -0 and NaN pass through, as torch.relu (clamp_min) */
FKU_VM(sigmoid, (T)1 / ((T)1 + exp(-x)))
FKU_VM(tanh, tanh(x))
FKU_VM(silu, x / ((T)1 + exp(-x)))
FKU_VM(gelu_erf, (T)0.5 * x * ((T)1 + erf(x * (T)0.70710678118654752440)))
/* GELU keeps the sign of a zero result (x 0.5 (1 + erf): -0 at -0 and far below 0) and is inf at
 * inf, as PyTorch's float64, float16 and bfloat16 kernels. (PyTorch's float32 CPU kernel differs by
 * the CPU's vector ISA: through oneDNN on AVX2 its zeros are +0; on AVX-512 it keeps -0 and gives
 * NaN at +inf. canna follows the definition, not one ISA.) */
FKU_VM(gelu_tanh, (T)0.5 * x * ((T)1 + tanh((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x))))

/* x = grad, y = self / output */
FKBT(k_thresh_bw, (y <= thr) ? (T)0 : x)
FKBT(k_sigmoid_bw, x * y * ((T)1 - y))
FKBT(k_tanh_bw, x * ((T)1 - y * y))
FKBT_VM(silu_bw, x * ((T)1 / ((T)1 + exp(-y))) * ((T)1 + y * ((T)1 - (T)1 / ((T)1 + exp(-y)))))
FKBT_VM(gelu_erf_bw,
     x * ((T)0.5 * ((T)1 + erf(y * (T)0.70710678118654752440)) +
          y * (T)0.39894228040143267794 * exp((T)-0.5 * y * y)))
/* d/dy of 0.5 y (1 + tanh(k (y + c y^3))) */
FKBT_VM(gelu_tanh_bw,
     x * ((T)0.5 * ((T)1 + tanh((T)0.79788456080286535588 * (y + (T)0.044715 * y * y * y))) +
          (T)0.5 * y * ((T)1 - tanh((T)0.79788456080286535588 * (y + (T)0.044715 * y * y * y)) *
                                   tanh((T)0.79788456080286535588 * (y + (T)0.044715 * y * y * y))) *
              (T)0.79788456080286535588 * ((T)1 + (T)3 * (T)0.044715 * y * y)))

/* pow with a scalar exponent, as PyTorch's CPU kernel computes it (ATen/native/Pow.cpp and
 * native/cpu/PowKernel.cpp), so NaN-ness and the signs of zeros and infinities agree bit for bit.
 * The rule is the tensor's dtype's (the input's; float32 for an integer tensor):
 * - exponent 0 gives 1 (NaN too), exponent 1 a copy (PyTorch decides these before any kernel);
 * - float32, float64, bfloat16: 0.5 is sqrt, -0.5 is 1 / sqrt, -1 is 1 / x (so (-0)^-0.5 = -inf and
 *   (-inf)^0.5 = (-inf)^-0.5 = NaN, where C's pow gives +inf, +inf and +0), 2 is x x, 3 is x x x,
 *   -2 is 1 / (x x) (which overflows to 0 where pow would give a subnormal);
 * - bfloat16 rounds the exponent to bfloat16 first (but for 0.5, -0.5, -1) and every product to
 *   bfloat16, as its Vectorized<BFloat16> operators do;
 * - float16 has no special exponents: pow(x, e) with e rounded to float16 ((-0)^0.5 = +0,
 *   (-inf)^0.5 = +inf);
 * - any other exponent: C's pow in double of x and the exponent as a float (PyTorch's vector loop,
 *   SLEEF's powf, takes it as a float; its scalar loop for the last few elements of a float32 tensor
 *   takes the double, and SLEEF may differ by an ulp), rounded once to the result's dtype. */
static inline float pow_rb(float v) { return nn_b2f(nn_f2b(v)); }

KSIG(k_pow_f32, float)
{
    float *restrict o = o_; const float *restrict a = a_; (void)b_;
    const double e = p->param_f;
    const aclDataType dt = nn_is_float(p->dt[1]) ? p->dt[1] : ACL_FLOAT;
    if (e == 0) { for (int64_t i = 0; i < n; i++) o[i] = 1.0f; return; }
    if (e == 1) { for (int64_t i = 0; i < n; i++) o[i] = a[i]; return; }
    if (dt == ACL_FLOAT16) {
        const double eh = (double)nn_h2f(nn_f2h((float)e));
        for (int64_t i = 0; i < n; i++) o[i] = (float)pow((double)a[i], eh);
        return;
    }
    if (e == 0.5) { for (int64_t i = 0; i < n; i++) o[i] = sqrtf(a[i]); return; }
    if (e == -0.5) { for (int64_t i = 0; i < n; i++) o[i] = 1.0f / sqrtf(a[i]); return; }
    if (e == -1) { for (int64_t i = 0; i < n; i++) o[i] = 1.0f / a[i]; return; }
    const bool bf = dt == ACL_BF16;
    const double es = bf ? (double)pow_rb((float)e) : e;   /* the exponent the special cases see */
    if (es == 2) { for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i]; }
    else if (es == 3 && bf) { for (int64_t i = 0; i < n; i++) o[i] = pow_rb(a[i] * a[i]) * a[i]; }
    else if (es == 3) { for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i] * a[i]; }
    else if (es == -2 && bf) { for (int64_t i = 0; i < n; i++) o[i] = 1.0f / pow_rb(a[i] * a[i]); }
    else if (es == -2) { for (int64_t i = 0; i < n; i++) o[i] = 1.0f / (a[i] * a[i]); }
    else { const double ef = (double)(float)es; for (int64_t i = 0; i < n; i++) o[i] = (float)pow((double)a[i], ef); }
}

KSIG(k_pow_f64, double)
{
    double *restrict o = o_; const double *restrict a = a_; (void)b_;
    const double e = p->param_f;
    if (e == 0) { for (int64_t i = 0; i < n; i++) o[i] = 1.0; }
    else if (e == 1) { for (int64_t i = 0; i < n; i++) o[i] = a[i]; }
    else if (e == 0.5) { for (int64_t i = 0; i < n; i++) o[i] = sqrt(a[i]); }
    else if (e == -0.5) { for (int64_t i = 0; i < n; i++) o[i] = 1.0 / sqrt(a[i]); }
    else if (e == -1) { for (int64_t i = 0; i < n; i++) o[i] = 1.0 / a[i]; }
    else if (e == 2) { for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i]; }
    else if (e == 3) { for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i] * a[i]; }
    else if (e == -2) { for (int64_t i = 0; i < n; i++) o[i] = 1.0 / (a[i] * a[i]); }
    else { for (int64_t i = 0; i < n; i++) o[i] = pow(a[i], e); }
}

/* integer kernels: two's complement wrap-around (unsigned arithmetic, no UB) */
#define IK(T, U, SUF)                                                                               \
    KSIG(k_add_##SUF, T) { T *restrict o = o_; const T *restrict a = a_, *restrict b = b_;         \
        U al = (U)p->alpha_i; for (int64_t i = 0; i < n; i++) o[i] = (T)((U)a[i] + al * (U)b[i]); }  \
    KSIG(k_sub_##SUF, T) { T *restrict o = o_; const T *restrict a = a_, *restrict b = b_;         \
        U al = (U)p->alpha_i; for (int64_t i = 0; i < n; i++) o[i] = (T)((U)a[i] - al * (U)b[i]); }  \
    KSIG(k_mul_##SUF, T) { T *restrict o = o_; const T *restrict a = a_, *restrict b = b_; (void)p;\
        for (int64_t i = 0; i < n; i++) o[i] = (T)((U)a[i] * (U)b[i]); }                           \
    KSIG(k_copy_##SUF, T) { T *restrict o = o_; const T *restrict a = a_; (void)b_; (void)p;       \
        for (int64_t i = 0; i < n; i++) o[i] = a[i]; }                                             \
    KSIG(k_neg_##SUF, T) { T *restrict o = o_; const T *restrict a = a_; (void)b_; (void)p;        \
        for (int64_t i = 0; i < n; i++) o[i] = (T)((U)0 - (U)a[i]); }                              \
    KSIG(k_abs_##SUF, T) { T *restrict o = o_; const T *restrict a = a_; (void)b_; (void)p;        \
        for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? (T)((U)0 - (U)a[i]) : a[i]; }            \
    KSIG(k_sign_##SUF, T) { T *restrict o = o_; const T *restrict a = a_; (void)b_; (void)p;       \
        for (int64_t i = 0; i < n; i++) o[i] = (T)((a[i] > 0) - (a[i] < 0)); }                     \
    KSIG(k_relu_##SUF, T) { T *restrict o = o_; const T *restrict a = a_; (void)b_; (void)p;       \
        for (int64_t i = 0; i < n; i++) o[i] = a[i] > 0 ? a[i] : 0; }                              \
    KSIG(k_pow_##SUF, T) { T *restrict o = o_; const T *restrict a = a_; (void)b_;                 \
        int64_t e = p->param_i;                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                          \
            U r = 1, base = (U)a[i]; int64_t k = e;                                                \
            while (k > 0) { if (k & 1) r *= base; base *= base; k >>= 1; }                         \
            o[i] = (T)r;                                                                           \
        } }

IK(int32_t, uint32_t, i32)
IK(int64_t, uint64_t, i64)

/* comparisons: 1 or 0 in the compute type (the engine converts it into the bool out) */
#define CMPK(NAME, OP)                                                                              \
    KSIG(NAME##_f32, float) { float *restrict o = o_; const float *restrict a = a_, *restrict b = b_; (void)p; \
        for (int64_t i = 0; i < n; i++) o[i] = (float)(a[i] OP b[i]); }                            \
    KSIG(NAME##_f64, double) { double *restrict o = o_; const double *restrict a = a_, *restrict b = b_; (void)p; \
        for (int64_t i = 0; i < n; i++) o[i] = (double)(a[i] OP b[i]); }                           \
    KSIG(NAME##_i32, int32_t) { int32_t *restrict o = o_; const int32_t *restrict a = a_, *restrict b = b_; (void)p; \
        for (int64_t i = 0; i < n; i++) o[i] = (int32_t)(a[i] OP b[i]); }                          \
    KSIG(NAME##_i64, int64_t) { int64_t *restrict o = o_; const int64_t *restrict a = a_, *restrict b = b_; (void)p; \
        for (int64_t i = 0; i < n; i++) o[i] = (int64_t)(a[i] OP b[i]); }
CMPK(k_eq, ==)
CMPK(k_ne, !=)
CMPK(k_lt, <)
CMPK(k_le, <=)
CMPK(k_gt, >)
CMPK(k_ge, >=)

/* maximum / minimum: a NaN operand gives NaN (x != x: x; y NaN: the comparison is false, y) */
FKB(k_maximum, (x != x || x > y) ? x : y)
FKB(k_minimum, (x != x || x < y) ? x : y)
#define MMK(T, SUF)                                                                                 \
    KSIG(k_maximum_##SUF, T) { T *restrict o = o_; const T *restrict a = a_, *restrict b = b_; (void)p; \
        for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? a[i] : b[i]; }                        \
    KSIG(k_minimum_##SUF, T) { T *restrict o = o_; const T *restrict a = a_, *restrict b = b_; (void)p; \
        for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i] ? a[i] : b[i]; }
MMK(int32_t, i32)
MMK(int64_t, i64)

/* kernel table [op][ct] (NULL = not available for that compute type) */
static const ew_kern g_kern[EW_NOPS][CT_COUNT] = {
    [EW_ADD] = {k_add_f32, k_add_f64, k_add_i32, k_add_i64},
    [EW_SUB] = {k_sub_f32, k_sub_f64, k_sub_i32, k_sub_i64},
    [EW_MUL] = {k_mul_f32, k_mul_f64, k_mul_i32, k_mul_i64},
    [EW_DIV] = {k_div_f32, k_div_f64, NULL, NULL},
    [EW_THRESH_BW] = {k_thresh_bw_f32, k_thresh_bw_f64, NULL, NULL},
    [EW_GELU_TANH_BW] = {k_gelu_tanh_bw_f32, k_gelu_tanh_bw_f64, NULL, NULL},
    [EW_GELU_ERF_BW] = {k_gelu_erf_bw_f32, k_gelu_erf_bw_f64, NULL, NULL},
    [EW_SILU_BW] = {k_silu_bw_f32, k_silu_bw_f64, NULL, NULL},
    [EW_SIGMOID_BW] = {k_sigmoid_bw_f32, k_sigmoid_bw_f64, NULL, NULL},
    [EW_TANH_BW] = {k_tanh_bw_f32, k_tanh_bw_f64, NULL, NULL},
    [EW_EQ] = {k_eq_f32, k_eq_f64, k_eq_i32, k_eq_i64},
    [EW_NE] = {k_ne_f32, k_ne_f64, k_ne_i32, k_ne_i64},
    [EW_LT] = {k_lt_f32, k_lt_f64, k_lt_i32, k_lt_i64},
    [EW_LE] = {k_le_f32, k_le_f64, k_le_i32, k_le_i64},
    [EW_GT] = {k_gt_f32, k_gt_f64, k_gt_i32, k_gt_i64},
    [EW_GE] = {k_ge_f32, k_ge_f64, k_ge_i32, k_ge_i64},
    [EW_MAXIMUM] = {k_maximum_f32, k_maximum_f64, k_maximum_i32, k_maximum_i64},
    [EW_MINIMUM] = {k_minimum_f32, k_minimum_f64, k_minimum_i32, k_minimum_i64},
    [EW_COPY] = {k_copy_f32, k_copy_f64, k_copy_i32, k_copy_i64},
    [EW_NEG] = {k_neg_f32, k_neg_f64, k_neg_i32, k_neg_i64},
    [EW_ABS] = {k_abs_f32, k_abs_f64, k_abs_i32, k_abs_i64},
    [EW_SIGN] = {k_sign_f32, k_sign_f64, k_sign_i32, k_sign_i64},
    [EW_EXP] = {k_exp_f32, k_exp_f64, NULL, NULL},
    [EW_LOG] = {k_log_f32, k_log_f64, NULL, NULL},
    [EW_SQRT] = {k_sqrt_f32, k_sqrt_f64, NULL, NULL},
    [EW_POW] = {k_pow_f32, k_pow_f64, k_pow_i32, k_pow_i64},
    [EW_RELU] = {k_relu_f32, k_relu_f64, k_relu_i32, k_relu_i64},
    [EW_GELU_TANH] = {k_gelu_tanh_f32, k_gelu_tanh_f64, NULL, NULL},
    [EW_GELU_ERF] = {k_gelu_erf_f32, k_gelu_erf_f64, NULL, NULL},
    [EW_SILU] = {k_silu_f32, k_silu_f64, NULL, NULL},
    [EW_SIGMOID] = {k_sigmoid_f32, k_sigmoid_f64, NULL, NULL},
    [EW_TANH] = {k_tanh_f32, k_tanh_f64, NULL, NULL},
};

/* relative cost of one element (for the inline fast path / block sizing) */
static int op_weight(int op)
{
    switch (op) {
    case EW_ADD: case EW_SUB: case EW_MUL: case EW_DIV: case EW_COPY: case EW_NEG: case EW_ABS: case EW_SIGN:
    case EW_RELU:
    case EW_THRESH_BW: case EW_SIGMOID_BW: case EW_TANH_BW:
    case EW_EQ: case EW_NE: case EW_LT: case EW_LE: case EW_GT: case EW_GE: case EW_MAXIMUM: case EW_MINIMUM:
        return 1;
    default:
        return 8;
    }
}

/* ------------------------------------------------------------------ the engine */

typedef struct ew_job {
    const ew_params_t *p;
    char *base[3];
    ew_kern k;
    int64_t per;
    bool stream;                /* the output bypasses the caches (ew_stream_out) */
} ew_job_t;

/* ------------------------------------------------------------------ non-temporal output
 * An output larger than the last-level cache is written with non-temporal (streaming) stores:
 * the cache lines are not read before they are overwritten (no read-for-ownership) and the
 * output does not evict the inputs, so a large binary op moves 3 arrays' bytes instead of 4 --
 * the threshold glibc's memcpy uses too (the shared cache's size). Each chunk is computed into
 * the block's buffer and streamed into the output; a block ends with a store fence. */
#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#define EW_NT 1
#else
#define EW_NT 0
#endif

/* the output size (bytes) from which ew_run streams it: the last-level cache, at least 8 MiB */
static int64_t ew_stream_min(void)
{
    static int64_t v = -1;
    int64_t x = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (x < 0) {
        long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
        l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
        x = l3 > (8L << 20) ? (int64_t)l3 : (int64_t)8 << 20;
        __atomic_store_n(&v, x, __ATOMIC_RELAXED);
    }
    return x;
}

/* n bytes from src (the block's buffer) to dst with streaming stores where dst is 16-byte aligned */
static void ew_stream_out(char *restrict dst, const char *restrict src, size_t n)
{
#if EW_NT
    size_t head = (size_t)(-(uintptr_t)dst & 15);
    if (head > n)
        head = n;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (; n >= 16; n -= 16, dst += 16, src += 16)
        _mm_stream_si128((__m128i *)(void *)dst, _mm_loadu_si128((const __m128i *)(const void *)src));
#endif
    memcpy(dst, src, n);
}

/* buf[1..n) = buf[0], an element of csz bytes (typed stores: a memcpy call per element was most of
 * a broadcast row's time) */
static void ew_splat(unsigned char *buf, int64_t n, size_t csz)
{
    if (csz == 4) {
        uint32_t v, *d = (uint32_t *)(void *)buf;
        memcpy(&v, buf, 4);
        for (int64_t i = 1; i < n; i++)
            d[i] = v;
    } else if (csz == 8) {
        uint64_t v, *d = (uint64_t *)(void *)buf;
        memcpy(&v, buf, 8);
        for (int64_t i = 1; i < n; i++)
            d[i] = v;
    } else {
        for (int64_t i = 1; i < n; i++)
            memcpy(buf + i * csz, buf, csz);
    }
}

/* each operand's address at the index idx */
static void ew_ptrs(const ew_params_t *p, char *const base[3], const int64_t *idx, const size_t *isz, char *ptr[3])
{
    for (int k = 0; k < 1 + p->nin; k++) {
        int64_t off = 0;
        for (int32_t d = 0; d < p->ndim; d++)
            off += idx[d] * p->st[k][d];
        ptr[k] = base[k] + off * (int64_t)isz[k];
    }
}

/* R rows (R >= 2) of the innermost dim from idx (idx[in] = 0, the rows within one run of dim
 * in - 1) as one chunk of R * inner elements: an operand whose rows follow each other (stride 1,
 * rows dense) is used in place, any other one is filled into its buffer -- a row repeated (stride
 * 0 across rows: kept while the same row comes again), a value per row (stride 0 along it), else
 * row by row; the output is written in place or stored row by row */
static void ew_rows(const ew_params_t *p, char *const base[3], ew_kern kern, const int64_t *idx, int64_t R,
                    unsigned char (*buf)[EW_CHUNK * 8], aclDataType cdt, size_t csz, const size_t *isz,
                    const char **filled, int64_t *filled_n)
{
    const int32_t nd = p->ndim, in = nd - 1;
    const int64_t inner = p->shape[in], n = R * inner;
    char *ptr[3];
    ew_ptrs(p, base, idx, isz, ptr);
    const void *src[2] = {NULL, NULL};
    for (int j = 0; j < p->nin; j++) {
        int k = j + 1;
        int64_t s = p->st[k][in], rs = p->st[k][in - 1];
        unsigned char *b = buf[j];
        if (p->dt[k] == cdt && s == 1 && rs == inner) {
            src[j] = ptr[k];
            continue;
        }
        src[j] = b;
        if (rs == 0) {   /* the same row R times */
            if (filled[j] == ptr[k] && filled_n[j] >= n)
                continue;
            if (s == 0) {
                nn_load(p->ct, b, ptr[k], 0, p->dt[k], 1);
                ew_splat(b, n, csz);
            } else {
                nn_load(p->ct, b, ptr[k], s, p->dt[k], inner);
                for (int64_t have = inner; have < n;) {   /* doubling copies */
                    int64_t c = have <= n - have ? have : n - have;
                    memcpy(b + have * csz, b, (size_t)(c * (int64_t)csz));
                    have += c;
                }
            }
            filled[j] = ptr[k];
            filled_n[j] = n;
            continue;
        }
        filled[j] = NULL;
        for (int64_t r = 0; r < R; r++) {
            const char *row = ptr[k] + r * rs * (int64_t)isz[k];
            unsigned char *dst = b + r * inner * (int64_t)csz;
            if (s == 0) {   /* a value per row */
                nn_load(p->ct, dst, row, 0, p->dt[k], 1);
                ew_splat(dst, inner, csz);
            } else {
                nn_load(p->ct, dst, row, s, p->dt[k], inner);
            }
        }
    }
    int64_t os = p->st[0][in], ors = p->st[0][in - 1];
    bool direct = p->dt[0] == cdt && os == 1 && ors == inner;
    kern(n, direct ? (void *)ptr[0] : (void *)buf[2], src[0], src[1], p);
    if (!direct)
        for (int64_t r = 0; r < R; r++)
            nn_store(p->ct, ptr[0] + r * ors * (int64_t)isz[0], os, p->dt[0], buf[2] + r * inner * (int64_t)csz, inner);
}

static void ew_range(const ew_params_t *p, char *const base[3], ew_kern kern, int64_t lo, int64_t hi, bool stream)
{
    const int32_t nd = p->ndim, in = nd - 1, nops = 1 + p->nin;
    const int ct = p->ct;
    const aclDataType cdt = ct_dtype(ct);
    const size_t csz = nn_ct_size(ct);
    size_t isz[3];
    for (int k = 0; k < nops; k++)
        isz[k] = nn_dtype_size(p->dt[k]);
    int64_t idx[NN_MAX_DIMS];
    int64_t rem = lo;
    for (int32_t d = nd - 1; d >= 0; d--) {
        idx[d] = rem % p->shape[d];
        rem /= p->shape[d];
    }
    _Alignas(64) unsigned char buf[3][EW_CHUNK * 8];
    const char *filled[2] = {NULL, NULL};
    int64_t filled_n[2] = {0, 0};
    const int64_t inner = p->shape[in];
    int64_t pos = lo;
    while (pos < hi) {
        /* short rows from a row start on: several rows per chunk (a broadcast operand -- a row
         * repeated, or a value per row -- filled into its buffer), one kernel call for them */
        int64_t R = 1;
        if (in > 0 && idx[in] == 0 && inner <= EW_CHUNK / 4) {
            R = EW_CHUNK / inner;
            if (R > p->shape[in - 1] - idx[in - 1])
                R = p->shape[in - 1] - idx[in - 1];
            if (R > (hi - pos) / inner)
                R = (hi - pos) / inner;
        }
        if (R >= 2) {
            ew_rows(p, base, kern, idx, R, buf, cdt, csz, isz, filled, filled_n);
            pos += R * inner;
            idx[in - 1] += R;
            for (int32_t d = in - 1; d > 0 && idx[d] >= p->shape[d]; d--) {
                idx[d] = 0;
                idx[d - 1]++;
            }
            continue;
        }
        int64_t n = inner - idx[in];
        if (n > hi - pos)
            n = hi - pos;
        if (n > EW_CHUNK)
            n = EW_CHUNK;
        char *ptr[3];
        ew_ptrs(p, base, idx, isz, ptr);
        const void *src[2] = {NULL, NULL};
        for (int j = 0; j < p->nin; j++) {
            int k = j + 1;
            int64_t s = p->st[k][in];
            if (p->dt[k] == cdt && s == 1) {
                src[j] = ptr[k];
            } else if (s == 0) {
                if (filled[j] != ptr[k] || filled_n[j] < n) {
                    nn_load(ct, buf[j], ptr[k], 0, p->dt[k], 1);
                    ew_splat(buf[j], n, csz);
                    filled[j] = ptr[k];
                    filled_n[j] = n;
                }
                src[j] = buf[j];
            } else {
                nn_load(ct, buf[j], ptr[k], s, p->dt[k], n);
                filled[j] = NULL;
                src[j] = buf[j];
            }
        }
        bool direct = p->dt[0] == cdt && p->st[0][in] == 1;
        void *dst = direct && !stream ? (void *)ptr[0] : (void *)buf[2];
        kern(n, dst, src[0], src[1], p);
        if (direct && stream)
            ew_stream_out(ptr[0], (const char *)buf[2], (size_t)n * csz);
        else if (!direct)
            nn_store(ct, ptr[0], p->st[0][in], p->dt[0], buf[2], n);
        pos += n;
        idx[in] += n;
        for (int32_t d = in; d > 0 && idx[d] >= p->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

static aclError ew_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    ew_job_t *j = arg;
    int64_t lo = (int64_t)bi * j->per;
    int64_t hi = lo + j->per;
    if (hi > j->p->numel)
        hi = j->p->numel;
    if (lo < hi)
        ew_range(j->p, j->base, j->k, lo, hi, j->stream);
#if EW_NT
    if (j->stream)
        _mm_sfence();   /* the streamed stores are visible before the block reports done */
#endif
    return ACL_SUCCESS;
}

static aclError ew_run(nn_exec_t *ex)
{
    ew_params_t *p = (ew_params_t *)ex->params;
    if (!p->numel)
        return ACL_SUCCESS;
    ew_job_t j;
    j.p = p;
    j.k = g_kern[p->op][p->ct];
    for (int k = 0; k < 1 + p->nin; k++)
        j.base[k] = p->view[k] < 0 ? (char *)p->sval : ex->v[p->view[k]].data;
    uint32_t nb = nn_blocks(ex, p->numel * op_weight(p->op), NN_BLOCK_GRAIN);
    int64_t per = (p->numel + nb - 1) / nb;
    per = (per + 63) & ~(int64_t)63;
    j.per = per;
    /* a large contiguous output of the compute type: streamed (the inputs may be it: each chunk
     * is computed before it is stored) */
    j.stream = EW_NT && p->dt[0] == ct_dtype(p->ct) && p->ndim == 1 && p->st[0][0] == 1 &&
               p->numel * (int64_t)nn_ct_size(p->ct) >= ew_stream_min();
    nb = (uint32_t)((p->numel + per - 1) / per);
    return nn_parallel(ex, nb, ew_block, &j);
}

/* ------------------------------------------------------------------ phase 1 */

static bool supported_input(aclDataType d) { return nn_is_op_float(d) || nn_is_op_int(d); }

static aclnnStatus check_input_dtype(const char *api, const char *name, const nn_tensor_t *t, bool float_only)
{
    if (float_only ? nn_is_op_float(t->dtype) : supported_input(t->dtype))
        return ACLNN_SUCCESS;
    return NN_PARAM("%s: %s has dtype %s, which is not supported (expected %s)", api, name, nn_dtype_name(t->dtype),
                    float_only ? "float32, float16, bfloat16 or float64"
                               : "float32, float16, bfloat16, float64, int32 or int64");
}

static bool same_view(const nn_view_t *a, const nn_view_t *b)
{
    if (a->data != b->data || a->ndim != b->ndim || nn_dtype_size(a->dtype) != nn_dtype_size(b->dtype))
        return false;
    for (int32_t i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->stride[i] != b->stride[i]))
            return false;
    return true;
}

/* an output view must not have two elements at one address, nor overlap an input partially */
aclnnStatus nn_check_output_overlap(const char *api, const nn_exec_t *ex, int32_t out, bool allow_same)
{
    const nn_view_t *o = &ex->v[out];
    for (int32_t d = 0; d < o->ndim; d++)
        if (o->shape[d] > 1 && o->stride[d] == 0)
            return NN_PARAM("%s: %s has stride 0 in dim %d: more than one element of the written-to tensor "
                            "refers to a single memory location", api, o->name, d);
    for (int32_t i = 0; i < ex->nview; i++) {
        if (i == out || !nn_views_overlap(o, &ex->v[i]))
            continue;
        if (allow_same && !ex->v[i].output && same_view(o, &ex->v[i]))
            continue;
        return NN_PARAM("%s: %s overlaps %s in memory (only an exact in-place alias is supported): some elements "
                        "of the input and the written-to tensor refer to a single memory location",
                        api, o->name, ex->v[i].name);
    }
    return ACLNN_SUCCESS;
}

/* build the engine's parameters for out = f(a [, b]); a/b NULL = scalar (sval) */
static void ew_layout(ew_params_t *p, const nn_exec_t *ex)
{
    const nn_view_t *o = &ex->v[p->view[0]];
    int32_t nd = o->ndim;
    int64_t shape[NN_MAX_DIMS], st[3][NN_MAX_DIMS];
    for (int32_t d = 0; d < nd; d++) {
        shape[d] = o->shape[d];
        for (int k = 0; k < 1 + p->nin; k++) {
            if (p->view[k] < 0) {
                st[k][d] = 0;
                continue;
            }
            const nn_view_t *v = &ex->v[p->view[k]];
            int32_t vd = d - (nd - v->ndim);   /* right-aligned */
            st[k][d] = (vd < 0 || v->shape[vd] == 1) ? 0 : v->stride[vd];
        }
    }
    /* drop size-1 dims, merge dims contiguous for every operand */
    int32_t m = 0;
    for (int32_t d = 0; d < nd; d++) {
        if (shape[d] == 1)
            continue;
        if (m > 0) {
            bool merge = true;
            for (int k = 0; k < 1 + p->nin; k++)
                if (p->st[k][m - 1] != st[k][d] * shape[d])
                    merge = false;
            if (merge) {
                p->shape[m - 1] *= shape[d];
                for (int k = 0; k < 1 + p->nin; k++)
                    p->st[k][m - 1] = st[k][d];
                continue;
            }
        }
        p->shape[m] = shape[d];
        for (int k = 0; k < 1 + p->nin; k++)
            p->st[k][m] = st[k][d];
        m++;
    }
    if (m == 0) {
        p->shape[0] = 1;
        for (int k = 0; k < 3; k++)
            p->st[k][0] = 0;
        m = 1;
    }
    p->ndim = m;
    p->numel = o->numel;
}

/* the common builder: validates shapes (inputs broadcast to out's shape), overlap, and makes the
 * executor. a: first input; b: second input tensor or NULL; bs: scalar second operand or NULL. */
static aclnnStatus ew_make(const char *api, int op, int ct, const nn_tensor_t *a, const char *an,
                           const nn_tensor_t *b, const char *bn, const nn_scalar_t *bs, const nn_tensor_t *out,
                           const char *on, double param_f, int64_t param_i, double alpha_f, int64_t alpha_i,
                           uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int64_t shape[NN_MAX_DIMS];
    int32_t nd = a->ndim;
    memcpy(shape, a->shape, sizeof shape);
    if (!b && op == EW_COPY) {   /* a copy broadcasts its source to the destination */
        if (!nn_broadcast(a->shape, a->ndim, out->shape, out->ndim, shape, &nd) || !nn_same_shape(out, shape, nd)) {
            char s1[160], s2[160];
            return NN_PARAM("%s: %s of shape %s cannot be broadcast to %s's shape %s", api, an,
                            nn_shape_str(s1, sizeof s1, a->shape, a->ndim), on,
                            nn_shape_str(s2, sizeof s2, out->shape, out->ndim));
        }
    }
    if (b) {
        if (!nn_broadcast(a->shape, a->ndim, b->shape, b->ndim, shape, &nd)) {
            char s1[160], s2[160];
            return NN_PARAM("%s: the shapes of %s %s and %s %s cannot be broadcast together", api, an,
                            nn_shape_str(s1, sizeof s1, a->shape, a->ndim), bn,
                            nn_shape_str(s2, sizeof s2, b->shape, b->ndim));
        }
    }
    if (nd > NN_MAX_DIMS)
        return NN_PARAM("%s: more than %d dims", api, NN_MAX_DIMS);
    if (!nn_same_shape(out, shape, nd)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: %s has shape %s but the result has shape %s", api, on,
                        nn_shape_str(s1, sizeof s1, out->shape, out->ndim), nn_shape_str(s2, sizeof s2, shape, nd));
    }
    if (!g_kern[op][ct])
        return NN_PARAM("%s: no kernel for this dtype combination", api);
    nn_exec_t *ex = nn_exec_new(api, ew_run, ACLSIM_ENGINE_VECTOR, sizeof(ew_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    ew_params_t *p = (ew_params_t *)ex->params;
    p->op = op;
    p->ct = ct;
    p->nin = (b || bs) ? 2 : 1;
    p->param_f = param_f;
    p->param_i = param_i;
    p->alpha_f = alpha_f;
    p->alpha_i = alpha_i;
    p->view[1] = nn_exec_add(ex, a, an, false);
    p->dt[1] = a->dtype;
    if (b) {
        p->view[2] = nn_exec_add(ex, b, bn, false);
        p->dt[2] = b->dtype;
    } else if (bs) {
        p->view[2] = -1;
        p->dt[2] = ct_dtype(ct);
        if (ct == CT_F32) {
            float v = (float)bs->f;
            memcpy(p->sval, &v, 4);
        } else if (ct == CT_F64) {
            memcpy(p->sval, &bs->f, 8);
        } else if (ct == CT_I32) {
            int32_t v = (int32_t)(uint32_t)(uint64_t)bs->i;
            memcpy(p->sval, &v, 4);
        } else {
            memcpy(p->sval, &bs->i, 8);
        }
    }
    p->view[0] = nn_exec_add(ex, out, on, true);
    p->dt[0] = out->dtype;
    aclnnStatus rc = nn_check_output_overlap(api, ex, p->view[0], true);
    if (rc) {
        free(ex);
        return rc;
    }
    ew_layout(p, ex);
    int64_t bytes = 0;
    for (int32_t i = 0; i < ex->nview; i++)
        bytes += ex->v[i].numel * (int64_t)nn_dtype_size(ex->v[i].dtype);
    /* one core streams ~64 bytes/ns through its caches with the vector kernels (AVX2 / AVX-512
     * clones), ~16 bytes/ns from DRAM (working sets past a few MiB); transcendental ops cost
     * ~2 ns per element more. Small ops (estimated under the runtime's inline threshold) then run
     * inline on an idle stream instead of waking the stream worker. */
    int64_t stream_bytes_per_ns = bytes <= (4 << 20) ? 64 : 16;
    ex->cost_ns = (uint64_t)(bytes / stream_bytes_per_ns + p->numel * (op_weight(op) - 1) / 4);
    int64_t work = p->numel * op_weight(op);
    ex->cores = (uint32_t)(work / EW_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

/* scalar helpers */
static bool scalar_is_int(const nn_scalar_t *s) { return !s->is_float; }

/* ------------------------------------------------------------------ arithmetic */

static aclnnStatus arith(const char *api, int op, const aclTensor *self, const aclTensor *other,
                         const aclScalar *otherS, const aclScalar *alpha, aclTensor *out, uint64_t *workspaceSize,
                         aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *b = NULL, *o;
    const nn_scalar_t *bs = NULL, *al = NULL;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = check_input_dtype(api, "self", a, false)))
        return rc;
    /* a NULL scalar (aclnnAdds(self, NULL, ...)) takes the tensor path and fails there with NULLPTR,
     * "<api>: other must not be NULL" */
    if (otherS) {
        if ((rc = nn_scalar_arg(api, "other", otherS, &bs)))
            return rc;
    } else if ((rc = nn_tensor_arg(api, "other", other, false, &b)) || (rc = check_input_dtype(api, "other", b, false))) {
        return rc;
    }
    if (op == EW_ADD || op == EW_SUB) {
        if ((rc = nn_scalar_arg(api, "alpha", alpha, &al)))
            return rc;
    }
    if ((rc = nn_tensor_arg(api, "out", out, false, &o)) || (rc = check_input_dtype(api, "out", o, false)))
        return rc;
    aclDataType prom;
    if (b) {
        prom = nn_promote(a->dtype, b->dtype);
    } else {   /* a scalar only raises the category (int tensor + float scalar -> float32) */
        prom = a->dtype;
        if (!nn_is_float(a->dtype) && bs->is_float)
            prom = ACL_FLOAT;
    }
    int ct;
    if (op == EW_DIV) {
        if (!nn_is_float(o->dtype))
            return NN_PARAM("%s: out has dtype %s but division gives a floating result (true division)", api,
                            nn_dtype_name(o->dtype));
        ct = nn_is_float(prom) ? nn_ct_of(prom) : (o->dtype == ACL_DOUBLE ? CT_F64 : CT_F32);
    } else {
        if (!nn_can_cast(prom, o->dtype))
            return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api, nn_dtype_name(prom),
                            nn_dtype_name(o->dtype));
        ct = nn_ct_of(prom);
    }
    double alpha_f = 1;
    int64_t alpha_i = 1;
    if (al) {
        if (!nn_is_float(prom) && al->is_float)
            return NN_PARAM("%s: for integral input tensors, alpha must not be a floating point number", api);
        alpha_f = al->f;
        alpha_i = al->i;
    }
    return ew_make(api, op, ct, a, "self", b, "other", bs, o, "out", 0, 0, alpha_f, alpha_i, workspaceSize, executor);
}

#define PHASE2(NAME)                                                                                \
    NN_API aclnnStatus aclnn##NAME(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,  \
                                   aclrtStream stream)                                              \
    {                                                                                              \
        return nn_launch("aclnn" #NAME, workspace, workspaceSize, executor, stream);               \
    }
#define PHASE2C(NAME)                                                                               \
    NN_API aclnnStatus aclnn##NAME(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,  \
                                   const aclrtStream stream)                                        \
    {                                                                                              \
        return nn_launch("aclnn" #NAME, workspace, workspaceSize, executor, stream);               \
    }

NN_API aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha,
                                            aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnAdd", EW_ADD, self, other, NULL, alpha, out, workspaceSize, executor);
}
PHASE2(Add)

NN_API aclnnStatus aclnnAddsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, const aclScalar *alpha,
                                             aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnAdds", EW_ADD, self, NULL, other, alpha, out, workspaceSize, executor);
}
PHASE2(Adds)

NN_API aclnnStatus aclnnSubGetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha,
                                            aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnSub", EW_SUB, self, other, NULL, alpha, out, workspaceSize, executor);
}
PHASE2(Sub)

NN_API aclnnStatus aclnnSubsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, const aclScalar *alpha,
                                             aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnSubs", EW_SUB, self, NULL, other, alpha, out, workspaceSize, executor);
}
PHASE2(Subs)

NN_API aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnMul", EW_MUL, self, other, NULL, NULL, out, workspaceSize, executor);
}
PHASE2(Mul)

NN_API aclnnStatus aclnnMulsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
                                             uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnMuls", EW_MUL, self, NULL, other, NULL, out, workspaceSize, executor);
}
PHASE2(Muls)

NN_API aclnnStatus aclnnDivGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnDiv", EW_DIV, self, other, NULL, NULL, out, workspaceSize, executor);
}
PHASE2(Div)

NN_API aclnnStatus aclnnDivsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
                                             uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnDivs", EW_DIV, self, NULL, other, NULL, out, workspaceSize, executor);
}
PHASE2(Divs)

NN_API aclnnStatus aclnnMaximumGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                                uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnMaximum", EW_MAXIMUM, self, other, NULL, NULL, out, workspaceSize, executor);
}
PHASE2(Maximum)

NN_API aclnnStatus aclnnMinimumGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                                uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return arith("aclnnMinimum", EW_MINIMUM, self, other, NULL, NULL, out, workspaceSize, executor);
}
PHASE2(Minimum)

/* ------------------------------------------------------------------ comparisons */

static aclnnStatus compare_dtype(const char *api, const char *name, const nn_tensor_t *t)
{
    aclDataType d = t->dtype;
    if (supported_input(d) || d == ACL_BOOL || d == ACL_UINT8 || d == ACL_INT8 || d == ACL_INT16)
        return ACLNN_SUCCESS;
    return NN_PARAM("%s: %s has dtype %s, which is not supported (expected a floating, integer or bool dtype)", api,
                    name, nn_dtype_name(d));
}

/* out = self OP other (a tensor, broadcast, or a scalar): bool out; self and other of the
 * floating, integer or bool dtypes, compared in their promoted type */
static aclnnStatus compare(const char *api, int op, const aclTensor *self, const aclTensor *other,
                           const aclScalar *otherS, aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *b = NULL, *o;
    const nn_scalar_t *bs = NULL;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = compare_dtype(api, "self", a)))
        return rc;
    if (otherS) {
        if ((rc = nn_scalar_arg(api, "other", otherS, &bs)))
            return rc;
    } else if ((rc = nn_tensor_arg(api, "other", other, false, &b)) || (rc = compare_dtype(api, "other", b))) {
        return rc;
    }
    if ((rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (o->dtype != ACL_BOOL)
        return NN_PARAM("%s: out has dtype %s, expected bool", api, nn_dtype_name(o->dtype));
    aclDataType prom = b ? nn_promote(a->dtype, b->dtype) : a->dtype;
    if (!b && !nn_is_float(a->dtype) && bs->is_float)
        prom = ACL_DOUBLE;   /* an integer tensor against a float number: compared as doubles */
    return ew_make(api, op, nn_ct_of(prom), a, "self", b, "other", bs, o, "out", 0, 0, 1, 1, workspaceSize, executor);
}

#define COMPARE(NAME, OP)                                                                           \
    NN_API aclnnStatus aclnn##NAME##TensorGetWorkspaceSize(const aclTensor *self, const aclTensor *other,    \
                                                           aclTensor *out, uint64_t *workspaceSize,          \
                                                           aclOpExecutor **executor)                         \
    {                                                                                              \
        return compare("aclnn" #NAME "Tensor", OP, self, other, NULL, out, workspaceSize, executor);          \
    }                                                                                              \
    PHASE2(NAME##Tensor)                                                                           \
    NN_API aclnnStatus aclnn##NAME##ScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other,    \
                                                           aclTensor *out, uint64_t *workspaceSize,          \
                                                           aclOpExecutor **executor)                         \
    {                                                                                              \
        return compare("aclnn" #NAME "Scalar", OP, self, NULL, other, out, workspaceSize, executor);          \
    }                                                                                              \
    PHASE2(NAME##Scalar)

COMPARE(Eq, EW_EQ)
COMPARE(Ne, EW_NE)
COMPARE(Lt, EW_LT)
COMPARE(Le, EW_LE)
COMPARE(Gt, EW_GT)
COMPARE(Ge, EW_GE)

/* ------------------------------------------------------------------ unary */

/* kind: 0 = float result (int input computes in float), 1 = keeps integers (neg, relu) */
static aclnnStatus unary(const char *api, int op, int kind, const aclTensor *self, const char *sn, const aclTensor *out,
                         const char *on, double param_f, int64_t param_i, uint64_t *workspaceSize,
                         aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, sn, self, false, &a)) || (rc = check_input_dtype(api, sn, a, false)))
        return rc;
    if ((rc = nn_tensor_arg(api, on, out, false, &o)) || (rc = check_input_dtype(api, on, o, false)))
        return rc;
    int ct;
    if (kind == 1 || nn_is_float(a->dtype)) {
        if (!nn_can_cast(a->dtype, o->dtype))
            return NN_PARAM("%s: the result type %s cannot be cast to %s's dtype %s", api, nn_dtype_name(a->dtype), on,
                            nn_dtype_name(o->dtype));
        ct = nn_ct_of(a->dtype);
    } else {
        if (!nn_is_float(o->dtype))
            return NN_PARAM("%s: %s has dtype %s but the result of this op is floating point", api, on,
                            nn_dtype_name(o->dtype));
        ct = o->dtype == ACL_DOUBLE ? CT_F64 : CT_F32;
    }
    return ew_make(api, op, ct, a, sn, NULL, NULL, NULL, o, on, param_f, param_i, 1, 1, workspaceSize, executor);
}

#define UNARY(NAME, OP, KIND)                                                                       \
    NN_API aclnnStatus aclnn##NAME##GetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize, \
                                                     aclOpExecutor **executor)                      \
    {                                                                                              \
        return unary("aclnn" #NAME, OP, KIND, self, "self", out, "out", 0, 0, workspaceSize, executor); \
    }

UNARY(Neg, EW_NEG, 1)
PHASE2C(Neg)
UNARY(Abs, EW_ABS, 1)
PHASE2(Abs)
UNARY(Sign, EW_SIGN, 1)
PHASE2(Sign)
UNARY(Exp, EW_EXP, 0)
PHASE2(Exp)
UNARY(Log, EW_LOG, 0)
PHASE2(Log)
UNARY(Sqrt, EW_SQRT, 0)
PHASE2(Sqrt)
UNARY(Gelu, EW_GELU_TANH, 0)
PHASE2C(Gelu)
UNARY(Silu, EW_SILU, 0)
PHASE2(Silu)
UNARY(Sigmoid, EW_SIGMOID, 0)
PHASE2C(Sigmoid)
UNARY(Tanh, EW_TANH, 0)
PHASE2C(Tanh)

NN_API aclnnStatus aclnnReluGetWorkspaceSize(const aclTensor *self, const aclTensor *out, uint64_t *workspaceSize,
                                             aclOpExecutor **executor)
{
    return unary("aclnnRelu", EW_RELU, 1, self, "self", out, "out", 0, 0, workspaceSize, executor);
}
PHASE2C(Relu)

NN_API aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y,
                                               uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (approximate != 0 && approximate != 1)
        return NN_PARAM("aclnnGeluV2: approximate must be 0 (none: the erf form) or 1 (tanh), got %lld",
                        (long long)approximate);
    return unary("aclnnGeluV2", approximate ? EW_GELU_TANH : EW_GELU_ERF, 0, x, "x", y, "y", 0, 0, workspaceSize,
                 executor);
}
PHASE2C(GeluV2)

NN_API aclnnStatus aclnnPowTensorScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *exponent,
                                                        const aclTensor *out, uint64_t *workspaceSize,
                                                        aclOpExecutor **executor)
{
    static const char api[] = "aclnnPowTensorScalar";
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *o;
    const nn_scalar_t *e;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = check_input_dtype(api, "self", a, false)))
        return rc;
    if ((rc = nn_scalar_arg(api, "exponent", exponent, &e)))
        return rc;
    if ((rc = nn_tensor_arg(api, "out", out, false, &o)) || (rc = check_input_dtype(api, "out", o, false)))
        return rc;
    int ct;
    if (!nn_is_float(a->dtype) && scalar_is_int(e)) {
        if (e->i < 0)
            return NN_PARAM("%s: integers to negative integer powers are not allowed (exponent %lld)", api,
                            (long long)e->i);
        if (!nn_can_cast(a->dtype, o->dtype))
            return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api, nn_dtype_name(a->dtype),
                            nn_dtype_name(o->dtype));
        ct = nn_ct_of(a->dtype);
    } else {
        aclDataType prom = nn_is_float(a->dtype) ? a->dtype : ACL_FLOAT;
        if (!nn_can_cast(prom, o->dtype))
            return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api, nn_dtype_name(prom),
                            nn_dtype_name(o->dtype));
        ct = (prom == ACL_DOUBLE || o->dtype == ACL_DOUBLE) && prom == ACL_DOUBLE ? CT_F64 : CT_F32;
    }
    return ew_make(api, EW_POW, ct, a, "self", NULL, NULL, NULL, o, "out", e->f, e->i, 1, 1, workspaceSize, executor);
}
PHASE2C(PowTensorScalar)

/* ------------------------------------------------------------------ cast and copy */

static int copy_ct(aclDataType src, aclDataType dst)
{
    if (src == ACL_INT64 || (dst == ACL_INT64 && !nn_is_float(src)))
        return CT_I64;
    if (src == ACL_DOUBLE || dst == ACL_DOUBLE)
        return CT_F64;
    if (nn_is_float(src) || nn_is_float(dst))
        return nn_is_float(src) && (dst == ACL_INT32 || dst == ACL_INT64) ? CT_F64 : CT_F32;
    return CT_I32;
}

NN_API aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self, const aclDataType dtype, aclTensor *out,
                                             uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCast";
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (!nn_dtype_size(dtype))
        return NN_PARAM("%s: dtype %s is not supported by the simulator", api, nn_dtype_name(dtype));
    if (o->dtype != dtype)
        return NN_PARAM("%s: out has dtype %s but dtype is %s", api, nn_dtype_name(o->dtype), nn_dtype_name(dtype));
    return ew_make(api, EW_COPY, copy_ct(a->dtype, o->dtype), a, "self", NULL, NULL, NULL, o, "out", 0, 0, 1, 1,
                   workspaceSize, executor);
}
PHASE2(Cast)

NN_API aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src, uint64_t *workspaceSize,
                                                    aclOpExecutor **executor)
{
    static const char api[] = "aclnnInplaceCopy";
    NN_OUTPTRS(api);
    const nn_tensor_t *d, *s;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "selfRef", selfRef, false, &d)) || (rc = nn_tensor_arg(api, "src", src, false, &s)))
        return rc;
    int64_t shape[NN_MAX_DIMS];
    int32_t nd;
    if (!nn_broadcast(d->shape, d->ndim, s->shape, s->ndim, shape, &nd) || !nn_same_shape(d, shape, nd)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: src of shape %s cannot be broadcast to selfRef's shape %s", api,
                        nn_shape_str(s1, sizeof s1, s->shape, s->ndim), nn_shape_str(s2, sizeof s2, d->shape, d->ndim));
    }
    return ew_make(api, EW_COPY, copy_ct(s->dtype, d->dtype), s, "src", NULL, NULL, NULL, d, "selfRef", 0, 0, 1, 1,
                   workspaceSize, executor);
}
PHASE2C(InplaceCopy)

/* ------------------------------------------------------------------ backward (binary, float) */

static aclnnStatus backward(const char *api, int op, const aclTensor *grad, const char *gn, const aclTensor *x,
                            const char *xn, const aclTensor *out, const char *on, double param,
                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *a, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, gn, grad, false, &g)) || (rc = check_input_dtype(api, gn, g, true)))
        return rc;
    if ((rc = nn_tensor_arg(api, xn, x, false, &a)) || (rc = check_input_dtype(api, xn, a, true)))
        return rc;
    if ((rc = nn_tensor_arg(api, on, out, false, &o)) || (rc = check_input_dtype(api, on, o, true)))
        return rc;
    aclDataType prom = nn_promote(g->dtype, a->dtype);
    return ew_make(api, op, nn_ct_of(prom), g, gn, a, xn, NULL, o, on, param, 0, 1, 1, workspaceSize, executor);
}

NN_API aclnnStatus aclnnThresholdBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                          const aclScalar *threshold, aclTensor *out,
                                                          uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const nn_scalar_t *t;
    aclnnStatus rc = nn_scalar_arg("aclnnThresholdBackward", "threshold", threshold, &t);
    if (rc)
        return rc;
    return backward("aclnnThresholdBackward", EW_THRESH_BW, gradOutput, "gradOutput", self, "self", out, "out", t->f,
                    workspaceSize, executor);
}
PHASE2C(ThresholdBackward)

NN_API aclnnStatus aclnnGeluBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                     const aclTensor *gradInput, uint64_t *workspaceSize,
                                                     aclOpExecutor **executor)
{
    return backward("aclnnGeluBackward", EW_GELU_TANH_BW, gradOutput, "gradOutput", self, "self", gradInput,
                    "gradInput", 0, workspaceSize, executor);
}
PHASE2C(GeluBackward)

NN_API aclnnStatus aclnnGeluBackwardV2GetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                       char *approximate, aclTensor *gradInput,
                                                       uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnGeluBackwardV2";
    int op;
    if (!approximate)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: approximate must not be NULL (\"none\" or \"tanh\")", api);
    if (strcmp(approximate, "none") == 0)
        op = EW_GELU_ERF_BW;
    else if (strcmp(approximate, "tanh") == 0)
        op = EW_GELU_TANH_BW;
    else
        return NN_PARAM("%s: approximate must be \"none\" or \"tanh\", got \"%.32s\"", api, approximate);
    return backward(api, op, gradOutput, "gradOutput", self, "self", gradInput, "gradInput", 0, workspaceSize,
                    executor);
}
PHASE2C(GeluBackwardV2)

NN_API aclnnStatus aclnnSiluBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self,
                                                     aclTensor *gradInput, uint64_t *workspaceSize,
                                                     aclOpExecutor **executor)
{
    return backward("aclnnSiluBackward", EW_SILU_BW, gradOutput, "gradOutput", self, "self", gradInput, "gradInput", 0,
                    workspaceSize, executor);
}
PHASE2(SiluBackward)

NN_API aclnnStatus aclnnSigmoidBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *output,
                                                        aclTensor *gradInput, uint64_t *workspaceSize,
                                                        aclOpExecutor **executor)
{
    return backward("aclnnSigmoidBackward", EW_SIGMOID_BW, gradOutput, "gradOutput", output, "output", gradInput,
                    "gradInput", 0, workspaceSize, executor);
}
PHASE2C(SigmoidBackward)

NN_API aclnnStatus aclnnTanhBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *output,
                                                     aclTensor *gradInput, uint64_t *workspaceSize,
                                                     aclOpExecutor **executor)
{
    return backward("aclnnTanhBackward", EW_TANH_BW, gradOutput, "gradOutput", output, "output", gradInput,
                    "gradInput", 0, workspaceSize, executor);
}
PHASE2C(TanhBackward)

/* ------------------------------------------------------------------ aclnnSWhere */

/* out = condition ? self : other, the three broadcast to out's shape (a simple strided walk; the
 * values move in out's compute type, so int64 stays exact) */
static int64_t sw_off(const nn_view_t *v, const int64_t *idx, int32_t nd)
{
    int64_t off = 0;
    for (int32_t d = nd - v->ndim; d < nd; d++) {
        int32_t vd = d - (nd - v->ndim);
        if (v->shape[vd] != 1)
            off += idx[d] * v->stride[vd];
    }
    return off * (int64_t)nn_dtype_size(v->dtype);
}

static aclError sw_run(nn_exec_t *ex)
{
    const nn_view_t *cv = &ex->v[0], *a = &ex->v[1], *b = &ex->v[2], *o = &ex->v[3];
    int ct = nn_ct_of(o->dtype);
    int32_t nd = o->ndim;
    int64_t idx[NN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < o->numel; e++) {
        int64_t c;
        _Alignas(8) unsigned char v[8];
        nn_load(CT_I64, &c, cv->data + sw_off(cv, idx, nd), 1, cv->dtype, 1);
        const nn_view_t *src = c ? a : b;
        nn_load(ct, v, src->data + sw_off(src, idx, nd), 1, src->dtype, 1);
        nn_store(ct, nn_at(o, idx), 1, o->dtype, v, 1);
        for (int32_t d = nd - 1; d >= 0; d--) {
            if (++idx[d] < o->shape[d])
                break;
            idx[d] = 0;
        }
    }
    return ACL_SUCCESS;
}

NN_API aclnnStatus aclnnSWhereGetWorkspaceSize(const aclTensor *condition, const aclTensor *self, const aclTensor *other,
                                               aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnSWhere";
    NN_OUTPTRS(api);
    const nn_tensor_t *c, *a, *b, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "condition", condition, false, &c)) || (rc = nn_tensor_arg(api, "self", self, false, &a)) ||
        (rc = nn_tensor_arg(api, "other", other, false, &b)) || (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (c->dtype != ACL_BOOL && c->dtype != ACL_UINT8)
        return NN_PARAM("%s: condition has dtype %s, expected bool (or uint8)", api, nn_dtype_name(c->dtype));
    if ((rc = check_input_dtype(api, "self", a, false)) || (rc = check_input_dtype(api, "other", b, false)) ||
        (rc = check_input_dtype(api, "out", o, false)))
        return rc;
    if (!nn_can_cast(nn_promote(a->dtype, b->dtype), o->dtype))
        return NN_PARAM("%s: the result type %s cannot be cast to out's dtype %s", api,
                        nn_dtype_name(nn_promote(a->dtype, b->dtype)), nn_dtype_name(o->dtype));
    int64_t s1[NN_MAX_DIMS], s2[NN_MAX_DIMS];
    int32_t n1, n2;
    if (!nn_broadcast(c->shape, c->ndim, a->shape, a->ndim, s1, &n1) || !nn_broadcast(s1, n1, b->shape, b->ndim, s2, &n2))
        return NN_PARAM("%s: condition, self and other cannot be broadcast together", api);
    if (!nn_same_shape(o, s2, n2)) {
        char t1[160], t2[160];
        return NN_PARAM("%s: out has shape %s but the result has shape %s", api,
                        nn_shape_str(t1, sizeof t1, o->shape, o->ndim), nn_shape_str(t2, sizeof t2, s2, n2));
    }
    nn_exec_t *ex = nn_exec_new(api, sw_run, ACLSIM_ENGINE_VECTOR, 8);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    nn_exec_add(ex, c, "condition", false);
    nn_exec_add(ex, a, "self", false);
    nn_exec_add(ex, b, "other", false);
    nn_exec_add(ex, o, "out", true);
    if ((rc = nn_check_output_overlap(api, ex, 3, true))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)o->numel * 4;
    return nn_exec_finish(ex, workspaceSize, executor);
}
PHASE2(SWhere)
