/* canna simulator op library: ops over lines of a tensor: Softmax, LogSoftmax (and backward) along
 * a dim, LayerNorm (and backward) and RmsNorm (and grad) over the trailing dims.
 *
 * A tensor splits into outer dims and line dims; lines are spread over the AI-core blocks. A line
 * whose dtype is the compute type and which is contiguous is used in place; others are gathered
 * into a per-block buffer and scattered back. Sums (softmax denominators, means, variances)
 * accumulate in double. */
#include "opsim.h"

#include <tgmath.h>

#pragma GCC optimize("O3")

typedef struct line_desc {
    int32_t no, nl;
    int64_t oshape[NN_MAX_DIMS], ost[NN_MAX_DIMS];
    int64_t lshape[NN_MAX_DIMS], lst[NN_MAX_DIMS];
    int64_t len, nlines;
} line_desc_t;

/* split view v: `line[d]` marks line dims */
static void line_split(line_desc_t *L, const nn_view_t *v, const bool *line)
{
    memset(L, 0, sizeof *L);
    L->len = 1;
    L->nlines = 1;
    for (int32_t d = 0; d < v->ndim; d++) {
        if (line[d]) {
            int32_t k = L->nl;
            if (k > 0 && L->lst[k - 1] == v->stride[d] * v->shape[d]) {   /* merge with the previous line dim */
                L->lshape[k - 1] *= v->shape[d];
                L->lst[k - 1] = v->stride[d];
            } else {
                L->lshape[k] = v->shape[d];
                L->lst[k] = v->stride[d];
                L->nl++;
            }
            L->len *= v->shape[d];
        } else {
            L->oshape[L->no] = v->shape[d];
            L->ost[L->no] = v->stride[d];
            L->no++;
            L->nlines *= v->shape[d];
        }
    }
    if (L->nl == 0) {
        L->nl = 1;
        L->lshape[0] = 1;
        L->lst[0] = 1;
    }
}

static char *line_ptr(const line_desc_t *L, const nn_view_t *v, int64_t i)
{
    int64_t off = 0;
    for (int32_t d = L->no - 1; d >= 0; d--) {
        int64_t k = i % L->oshape[d];
        i /= L->oshape[d];
        off += k * L->ost[d];
    }
    return v->data + off * (int64_t)nn_dtype_size(v->dtype);
}

static bool line_direct(const line_desc_t *L, const nn_view_t *v, int ct)
{
    aclDataType cdt = ct == CT_F64 ? ACL_DOUBLE : ACL_FLOAT;
    return v->dtype == cdt && L->nl == 1 && (L->lst[0] == 1 || L->lshape[0] == 1);
}

/* gather / scatter a line through the compute type */
static void line_io(const line_desc_t *L, const nn_view_t *v, char *p, int ct, void *buf, bool store)
{
    size_t isz = nn_dtype_size(v->dtype), csz = nn_ct_size(ct);
    int32_t in = L->nl - 1;
    int64_t rows = L->len / (L->lshape[in] ? L->lshape[in] : 1), n = L->lshape[in];
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rr = r;
        for (int32_t d = in - 1; d >= 0; d--) {
            int64_t k = rr % L->lshape[d];
            rr /= L->lshape[d];
            off += k * L->lst[d];
        }
        char *src = p + off * (int64_t)isz;
        char *b = (char *)buf + (size_t)(r * n) * csz;
        if (store)
            nn_store(ct, src, L->lst[in], v->dtype, b, n);
        else
            nn_load(ct, b, src, L->lst[in], v->dtype, n);
    }
}

/* a line's data as a compute-type array: in place, or gathered into buf */
static void *line_get(const line_desc_t *L, const nn_view_t *v, int64_t i, int ct, void *buf)
{
    char *p = line_ptr(L, v, i);
    if (line_direct(L, v, ct))
        return p;
    line_io(L, v, p, ct, buf, false);
    return buf;
}

/* the destination of a line: in place, or buf (then line_put scatters it) */
static void *line_dst(const line_desc_t *L, const nn_view_t *v, int ct, void *buf, int64_t i)
{
    return line_direct(L, v, ct) ? (void *)line_ptr(L, v, i) : buf;
}

static void line_put(const line_desc_t *L, const nn_view_t *v, int64_t i, int ct, void *buf, void *dst)
{
    if (dst == buf)
        line_io(L, v, line_ptr(L, v, i), ct, buf, true);
}

/* element i (linear, row-major over its shape) of a small view, e.g. mean / rstd of line i */
static char *elem_ptr(const nn_view_t *v, int64_t i)
{
    int64_t off = 0;
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        int64_t k = i % v->shape[d];
        i /= v->shape[d];
        off += k * v->stride[d];
    }
    return v->data + off * (int64_t)nn_dtype_size(v->dtype);
}

/* store line i's statistic (mean, rstd) in v: a contiguous float32 view directly (element i at
 * data + 4 i), else converted */
static void stat_put(const nn_view_t *v, bool f32_linear, int64_t i, double x)
{
    if (f32_linear)
        ((float *)v->data)[i] = (float)x;
    else
        nn_store(CT_F64, elem_ptr(v, i), 1, v->dtype, &x, 1);
}

/* ------------------------------------------------------------------ a vectorizable expf
 * exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 (Cody-Waite split), exp(r) by Cephes'
 * degree-6 polynomial: within 2 ulp of expf. Branch-free on generic vectors of VW floats, written
 * once (MK_VEXP and the loops below) for two widths: 8 floats (one AVX2 register: with 16-float ones,
 * two registers, GCC's AVX2 clone ran softmax ~5x slower), compiled for AVX-512, AVX2 and baseline
 * x86-64 (NN_CLONES, chosen at load time), and 16 floats (one AVX-512 register) in functions built
 * for AVX-512 only, which the entry points take when the CPU has it (the same element values: only
 * the lanes a sum is spread over differ); x < -87.3 gives exactly 0 (masked softmax entries), NaN
 * stays NaN, large x gives inf. */
#pragma GCC diagnostic ignored "-Wpsabi"   /* always-inline vectors: no ABI crosses a call */
#define VW 8
typedef float vf __attribute__((vector_size(4 * VW)));
typedef int32_t vi __attribute__((vector_size(4 * VW)));
typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef double vd8 __attribute__((vector_size(64)));     /* a chunk's float lanes, summed on in double */
typedef double vd16 __attribute__((vector_size(128)));

#define MK_VEXP(NAME, VF, VI, ATTR)                                                                \
    static inline __attribute__((always_inline)) ATTR VF NAME##_sel(VI m, VF a, VF b)            \
    {                                                                                              \
        return (VF)(((VI)a & m) | ((VI)b & ~m));                                                   \
    }                                                                                              \
    static inline __attribute__((always_inline)) ATTR VF NAME(VF x)                                \
    {                                                                                              \
        const VF zero = {0};                                                                       \
        VI hi = x > 88.7f, lo = x < -87.3f, nan = x != x;                                          \
        VF xc = NAME##_sel(hi, zero + 88.7f, x);                                                   \
        xc = NAME##_sel(lo, zero - 87.3f, xc);                                                     \
        xc = NAME##_sel(nan, zero, xc);                                                            \
        VF k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;                            \
        VF r = xc - k * 0.693359375f;                                                              \
        r = r + k * 2.12194440e-4f;                                                                \
        VF p = zero + 1.9875691500e-4f;                                                            \
        p = p * r + 1.3981999507e-3f;                                                              \
        p = p * r + 8.3334519073e-3f;                                                              \
        p = p * r + 4.1665795894e-2f;                                                              \
        p = p * r + 1.6666665459e-1f;                                                              \
        p = p * r + 5.0000001201e-1f;                                                              \
        p = p * r * r + r + 1.0f;                                                                  \
        VI ki = __builtin_convertvector(k, VI);                                                    \
        VF sc = (VF)((ki + 127) << 23);                                                            \
        VF res = p * sc;                                                                           \
        res = NAME##_sel(lo, zero, res);                                                           \
        res = NAME##_sel(hi, zero + INFINITY, res);                                                \
        return NAME##_sel(nan, x, res);                                                            \
    }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WIDE16 1   /* the 16-float forms exist (x86-64: built for AVX-512, taken when the CPU has it) */
#define AVX512 __attribute__((target("avx512f")))
#else
#define WIDE16 0
#endif
MK_VEXP(vexp, vf, vi, )
#if WIDE16
MK_VEXP(vexp16, vf16, vi16, AVX512)
/* 8 floats with fused multiply-adds: NN_CLONES' AVX2 clone has no FMA (AVX2 does not imply it), so its
 * polynomial is a chain of separate multiplies and adds, about twice as long; the entry points take
 * these forms on a CPU with AVX2 and FMA but not AVX-512 (AMD before Zen 4, most Intel client cores) */
#define FMA8 __attribute__((target("avx2,fma")))
MK_VEXP(vexpf, vf, vi, FMA8)
#endif

/* sum of exp(x[k] - m) into o (when o != NULL); lanes accumulate in float over chunks of 256
 * elements (256 / W terms per lane, in two accumulators), the chunks' lanes in double (a vector of W doubles, summed
 * once at the end) */
#define MK_EXP_SUM(NAME, VF, VD, W, EXP, ATTR)                                                     \
    ATTR static double NAME(const float *restrict x, float *restrict o, int64_t n, float m)        \
    {                                                                                              \
        VD total = {0};                                                                            \
        for (int64_t c = 0; c < n; c += 256) {                                                     \
            int64_t len = n - c < 256 ? n - c : 256;                                               \
            VF acc = {0}, acc1 = {0};                                                              \
            int64_t k = 0;                                                                         \
            for (; k + 2 * W <= len; k += 2 * W) { /* two vectors a step: independent chains */     \
                VF v, v1;                                                                          \
                memcpy(&v, x + c + k, sizeof v);                                                   \
                memcpy(&v1, x + c + k + W, sizeof v1);                                             \
                v = EXP(v - m);                                                                    \
                v1 = EXP(v1 - m);                                                                  \
                if (o) {                                                                           \
                    memcpy(o + c + k, &v, sizeof v);                                               \
                    memcpy(o + c + k + W, &v1, sizeof v1);                                         \
                }                                                                                  \
                acc += v;                                                                          \
                acc1 += v1;                                                                        \
            }                                                                                      \
            acc += acc1;                                                                           \
            for (; k + W <= len; k += W) {                                                         \
                VF v;                                                                              \
                memcpy(&v, x + c + k, sizeof v);                                                   \
                v = EXP(v - m);                                                                    \
                if (o)                                                                             \
                    memcpy(o + c + k, &v, sizeof v);                                               \
                acc += v;                                                                          \
            }                                                                                      \
            if (k < len) { /* the tail, padded with -inf (exp = 0) */                              \
                float t[W];                                                                        \
                for (int j = 0; j < W; j++)                                                        \
                    t[j] = k + j < len ? x[c + k + j] - m : -INFINITY;                             \
                VF v;                                                                              \
                memcpy(&v, t, sizeof v);                                                           \
                v = EXP(v);                                                                        \
                memcpy(t, &v, sizeof v);                                                           \
                if (o)                                                                             \
                    for (int64_t j = 0; k + j < len; j++)                                          \
                        o[c + k + j] = t[j];                                                       \
                acc += v;                                                                          \
            }                                                                                      \
            total += __builtin_convertvector(acc, VD);                                             \
        }                                                                                          \
        return NN_HSUM(total, W);                                                                  \
    }

/* the maximum (NaN reported through *nan); two accumulators, so the compares of one do not wait
 * for the other's */
#define MK_MAX(NAME, VF, VI, W, SEL, ATTR)                                                         \
    ATTR static float NAME(const float *restrict x, int64_t n, bool *nan)                          \
    {                                                                                              \
        VF m0 = {0}, m1;                                                                           \
        m0 = m0 - INFINITY;                                                                        \
        m1 = m0;                                                                                   \
        VI n0 = {0}, n1 = {0};                                                                     \
        int64_t k = 0;                                                                             \
        for (; k + 2 * W <= n; k += 2 * W) {                                                       \
            VF a, b;                                                                               \
            memcpy(&a, x + k, sizeof a);                                                           \
            memcpy(&b, x + k + W, sizeof b);                                                       \
            m0 = SEL(a > m0, a, m0);                                                               \
            m1 = SEL(b > m1, b, m1);                                                               \
            n0 |= a != a;                                                                          \
            n1 |= b != b;                                                                          \
        }                                                                                          \
        m0 = SEL(m1 > m0, m1, m0);                                                                 \
        n0 |= n1;                                                                                  \
        float lanes[W];                                                                            \
        int32_t nl[W];                                                                             \
        memcpy(lanes, &m0, sizeof m0);                                                             \
        memcpy(nl, &n0, sizeof n0);                                                                \
        float m = -INFINITY;                                                                       \
        int isnan = 0;                                                                             \
        for (int j = 0; j < W; j++) {                                                              \
            m = lanes[j] > m ? lanes[j] : m;                                                       \
            isnan |= nl[j];                                                                        \
        }                                                                                          \
        for (; k < n; k++) {                                                                       \
            m = x[k] > m ? x[k] : m;                                                               \
            isnan |= x[k] != x[k];                                                                 \
        }                                                                                          \
        *nan = isnan != 0;                                                                         \
        return m;                                                                                  \
    }

MK_EXP_SUM(exp_sum_w8, vf, vd8, 8, vexp, NN_CLONES)
MK_MAX(max_w8, vf, vi, 8, vexp_sel, NN_CLONES)
#if WIDE16
MK_EXP_SUM(exp_sum_w16, vf16, vd16, 16, vexp16, AVX512)
MK_MAX(max_w16, vf16, vi16, 16, vexp16_sel, AVX512)
MK_EXP_SUM(exp_sum_f8, vf, vd8, 8, vexpf, FMA8)
#else
#define exp_sum_f8 exp_sum_w8
#define exp_sum_w16 exp_sum_w8
#define max_w16 max_w8
#endif

/* softmax's backward of one row (log_form: log softmax's): s = sum(g * y) (sum(g)), lanes in float
 * over chunks of 256 elements, the chunks' lanes in double (as MK_EXP_SUM); then o = y * (g - s)
 * (g - exp(y) * s), the tail padded as MK_EXP_SUM's. o may be g or y (elementwise). */
#define MK_SM_BW(NAME, VF, VD, W, EXP, ATTR)                                                       \
    ATTR static void NAME(const float *g, const float *y, float *o, int64_t n, int log_form)      \
    {                                                                                              \
        VD totv = {0};                                                                             \
        double total = 0;                                                                          \
        for (int64_t c = 0; c < n; c += 256) {                                                     \
            int64_t len = n - c < 256 ? n - c : 256;                                               \
            VF acc = {0};                                                                          \
            int64_t k = 0;                                                                         \
            for (; k + W <= len; k += W) {                                                         \
                VF a, b;                                                                           \
                memcpy(&a, g + c + k, sizeof a);                                                   \
                if (!log_form) {                                                                   \
                    memcpy(&b, y + c + k, sizeof b);                                               \
                    a = a * b;                                                                     \
                }                                                                                  \
                acc += a;                                                                          \
            }                                                                                      \
            totv += __builtin_convertvector(acc, VD);                                              \
            for (; k < len; k++)                                                                   \
                total += log_form ? (double)g[c + k] : (double)(g[c + k] * y[c + k]);              \
        }                                                                                          \
        const float sf = (float)(total + NN_HSUM(totv, W));                                        \
        int64_t k = 0;                                                                             \
        for (; k + 2 * W <= n; k += 2 * W) { /* two vectors a step: independent chains */           \
            VF a0, b0, a1, b1;                                                                     \
            memcpy(&a0, g + k, sizeof a0);                                                         \
            memcpy(&b0, y + k, sizeof b0);                                                         \
            memcpy(&a1, g + k + W, sizeof a1);                                                     \
            memcpy(&b1, y + k + W, sizeof b1);                                                     \
            VF r0 = log_form ? a0 - EXP(b0) * sf : b0 * (a0 - sf);                                 \
            VF r1 = log_form ? a1 - EXP(b1) * sf : b1 * (a1 - sf);                                 \
            memcpy(o + k, &r0, sizeof r0);                                                         \
            memcpy(o + k + W, &r1, sizeof r1);                                                     \
        }                                                                                          \
        for (; k < n; k += W) {                                                                    \
            VF a, b;                                                                               \
            int64_t m = n - k < W ? n - k : W;                                                     \
            if (m == W) {                                                                          \
                memcpy(&a, g + k, sizeof a);                                                       \
                memcpy(&b, y + k, sizeof b);                                                       \
            } else { /* the tail, padded (lanes past n are dropped) */                              \
                float ta[W], tb[W];                                                                \
                for (int j = 0; j < W; j++) {                                                      \
                    ta[j] = j < m ? g[k + j] : 0.0f;                                               \
                    tb[j] = j < m ? y[k + j] : 0.0f;                                               \
                }                                                                                  \
                memcpy(&a, ta, sizeof a);                                                          \
                memcpy(&b, tb, sizeof b);                                                          \
            }                                                                                      \
            VF r = log_form ? a - EXP(b) * sf : b * (a - sf);                                      \
            if (m == W) {                                                                          \
                memcpy(o + k, &r, sizeof r);                                                       \
            } else {                                                                               \
                float tr[W];                                                                       \
                memcpy(tr, &r, sizeof r);                                                          \
                for (int64_t j = 0; j < m; j++)                                                    \
                    o[k + j] = tr[j];                                                              \
            }                                                                                      \
        }                                                                                          \
    }

MK_SM_BW(sm_bw_w8, vf, vd8, 8, vexp, NN_CLONES)
#if WIDE16
MK_SM_BW(sm_bw_w16, vf16, vd16, 16, vexp16, AVX512)
MK_SM_BW(sm_bw_f8, vf, vd8, 8, vexpf, FMA8)
#else
#define sm_bw_w16 sm_bw_w8
#define sm_bw_f8 sm_bw_w8
#endif

/* which forms run here: 2 the 16-float ones (the CPU has AVX-512), 1 the 8-float FMA ones (AVX2 and
 * FMA), 0 NN_CLONES' 8-float ones */
static int vlevel(void)
{
    static int on = -1;
    int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
    if (v < 0) {
#if WIDE16
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") ? 2
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
#else
        v = 0;
#endif
        __atomic_store_n(&on, v, __ATOMIC_RELAXED);
    }
    return v;
}

double nn_exp_sum_f32(const float *restrict x, float *restrict o, int64_t n, float m)
{
    switch (vlevel()) {
    case 2: return exp_sum_w16(x, o, n, m);
    case 1: return exp_sum_f8(x, o, n, m);
    default: return exp_sum_w8(x, o, n, m);
    }
}

static float max_f32(const float *restrict x, int64_t n, bool *nan)
{
    return vlevel() == 2 ? max_w16(x, n, nan) : max_w8(x, n, nan);   /* (no polynomial: no FMA form) */
}

static void sm_bw_f32(const float *g, const float *y, float *o, int64_t n, int log_form)
{
    switch (vlevel()) {
    case 2: sm_bw_w16(g, y, o, n, log_form); break;
    case 1: sm_bw_f8(g, y, o, n, log_form); break;
    default: sm_bw_w8(g, y, o, n, log_form);
    }
}

/* sum of (x[k] - c)^p for p = 1 or 2: four float accumulators of 8 lanes over chunks of 256
 * elements (8 terms per lane), the chunks' lanes in double (as nn_exp_sum_f32) */
NN_CLONES static double pow_sum_f32(const float *restrict x, int64_t n, float c, int p)
{
    vd8 totv = {0};   /* the chunks' lanes, summed on in double (once per row at the end) */
    double total = 0;
    for (int64_t s0 = 0; s0 < n; s0 += 256) {
        int64_t len = n - s0 < 256 ? n - s0 : 256;
        vf acc = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};   /* (four: an add's latency is four cycles) */
        int64_t k = 0;
        for (; k + 4 * VW <= len; k += 4 * VW) {
            vf v0, v1, v2, v3;   /* (four variables: GCC copied an array of four vectors through
                                   * the stack in 16-byte halves, which 32-byte loads cannot forward) */
            memcpy(&v0, x + s0 + k, sizeof v0);
            memcpy(&v1, x + s0 + k + VW, sizeof v1);
            memcpy(&v2, x + s0 + k + 2 * VW, sizeof v2);
            memcpy(&v3, x + s0 + k + 3 * VW, sizeof v3);
            v0 = v0 - c;
            v1 = v1 - c;
            v2 = v2 - c;
            v3 = v3 - c;
            acc += p == 2 ? v0 * v0 : v0;
            acc1 += p == 2 ? v1 * v1 : v1;
            acc2 += p == 2 ? v2 * v2 : v2;
            acc3 += p == 2 ? v3 * v3 : v3;
        }
        for (; k + VW <= len; k += VW) {
            vf v;
            memcpy(&v, x + s0 + k, sizeof v);
            v = v - c;
            acc += p == 2 ? v * v : v;
        }
        acc = (acc + acc1) + (acc2 + acc3);
        totv += __builtin_convertvector(acc, vd8);
        for (; k < len; k++) {
            double d = (double)x[s0 + k] - (double)c;
            total += p == 2 ? d * d : d;
        }
    }
    return total + NN_HSUM(totv, VW);
}

/* o = (x - m) * r * w + b (w, b may be NULL) */
NN_CLONES static void norm_row_f32(float *restrict o, const float *restrict x, int64_t n, float m, float r,
                                   const float *restrict w, const float *restrict b)
{
    if (w && b)
        for (int64_t k = 0; k < n; k++)
            o[k] = (x[k] - m) * r * w[k] + b[k];
    else if (w)
        for (int64_t k = 0; k < n; k++)
            o[k] = (x[k] - m) * r * w[k];
    else if (b)
        for (int64_t k = 0; k < n; k++)
            o[k] = (x[k] - m) * r + b[k];
    else
        for (int64_t k = 0; k < n; k++)
            o[k] = (x[k] - m) * r;
}

NN_CLONES static void scale_f32(float *restrict o, int64_t n, float r)
{
    for (int64_t k = 0; k < n; k++)
        o[k] *= r;
}

NN_CLONES static void sub_f32(float *restrict o, const float *restrict x, int64_t n, float v)
{
    for (int64_t k = 0; k < n; k++)
        o[k] = x[k] - v;
}

/* one line of the layer / rms norm backward in float32 (x, g and w contiguous; w may be NULL; mean
 * 0 for rms norm): the line's sums of g' = g w and g' xhat in float lanes per chunk of 256
 * elements, the chunks summed on in double (as pow_sum_f32); the weight / bias gradient partials
 * gw, gb (NULL: not asked for) accumulate g xhat and g in double; then, where o is not NULL,
 * o = rstd (g' - mean(g') - xhat mean(g' xhat)) (rms norm: without mean(g')) */
NN_CLONES static void ln_bw_row_f32(const float *restrict x, const float *restrict g, const float *restrict w,
                                    float *restrict o, int64_t D, float mean, float rstd, bool rms,
                                    double *restrict gw, double *restrict gb)
{
    vd8 tsg = {0}, tsgx = {0};
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < D; c += 256) {
        int64_t len = D - c < 256 ? D - c : 256;
        vf asg = {0}, asgx = {0};
        int64_t k = 0;
        for (; k + VW <= len; k += VW) {
            vf xv, gv, gg;
            memcpy(&xv, x + c + k, sizeof xv);
            memcpy(&gv, g + c + k, sizeof gv);
            vf xh = (xv - mean) * rstd;
            gg = gv;
            if (w) {
                vf wv;
                memcpy(&wv, w + c + k, sizeof wv);
                gg = gv * wv;
            }
            asg += gg;
            asgx += gg * xh;
        }
        tsg += __builtin_convertvector(asg, vd8);
        tsgx += __builtin_convertvector(asgx, vd8);
        for (; k < len; k++) {
            float xh = (x[c + k] - mean) * rstd, gg = w ? g[c + k] * w[c + k] : g[c + k];
            sg += (double)gg;
            sgx += (double)(gg * xh);
        }
    }
    if (gw)   /* (elementwise: the loops vectorize as they are) */
        for (int64_t k = 0; k < D; k++)
            gw[k] += (double)(g[k] * ((x[k] - mean) * rstd));
    if (gb)
        for (int64_t k = 0; k < D; k++)
            gb[k] += (double)g[k];
    sg += NN_HSUM(tsg, VW);
    sgx += NN_HSUM(tsgx, VW);
    if (!o)
        return;
    const float mg = rms || !D ? 0.0f : (float)(sg / (double)D), mgx = D ? (float)(sgx / (double)D) : 0.0f;
    if (w)
        for (int64_t k = 0; k < D; k++)
            o[k] = rstd * (g[k] * w[k] - mg - (x[k] - mean) * rstd * mgx);
    else
        for (int64_t k = 0; k < D; k++)
            o[k] = rstd * (g[k] - mg - (x[k] - mean) * rstd * mgx);
}

/* ------------------------------------------------------------------ generic line job */

enum { LN_SOFTMAX, LN_LOGSOFTMAX, LN_SOFTMAX_BW, LN_LOGSOFTMAX_BW, LN_LAYERNORM, LN_LAYERNORM_BW, LN_RMSNORM,
       LN_RMSNORM_BW };

typedef struct ln_params {
    int32_t kind, ct;
    line_desc_t L[6];          /* per view */
    int32_t nview;
    double eps;
    /* layer / rms norm: views of weight, bias, mean, rstd, outputs (-1 = absent) */
    int32_t vx, vg, vw, vb, vmean, vrstd, vout, vgw, vgb;
    bool mask[3];
    int64_t D;                 /* line length */
    int64_t nlines;
} ln_params_t;

typedef struct ln_job {
    nn_exec_t *ex;
    const ln_params_t *p;
    void *w, *b;               /* weight / bias as contiguous compute-type arrays (or NULL) */
    double *partial;           /* [nblocks][2][D] weight/bias gradient partials */
    int64_t per;
    uint32_t nb;
} ln_job_t;

#define CT_LOOP(ct, ...)                                                                            \
    do {                                                                                           \
        if ((ct) == CT_F32) {                                                                      \
            typedef float T;                                                                       \
            __VA_ARGS__                                                                            \
        } else {                                                                                   \
            typedef double T;                                                                      \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)

static aclError ln_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    ln_job_t *j = arg;
    const ln_params_t *p = j->p;
    nn_exec_t *ex = j->ex;
    const int64_t D = p->D;
    const int ct = p->ct;
    size_t csz = nn_ct_size(ct);
    int64_t l0 = (int64_t)bi * j->per, l1 = l0 + j->per;
    if (l1 > p->nlines)
        l1 = p->nlines;
    if (l0 >= l1)
        return ACL_SUCCESS;
    char *scratch = malloc((size_t)(D ? D : 1) * csz * 3);
    if (!scratch)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    void *b0 = scratch, *b1 = scratch + (size_t)D * csz, *b2 = scratch + 2 * (size_t)D * csz;
    double *gw = j->partial ? j->partial + (size_t)bi * 2 * (size_t)D : NULL, *gb = gw ? gw + D : NULL;
    const bool mean_lin = p->vmean >= 0 && ex->v[p->vmean].dtype == ACL_FLOAT && nn_view_contiguous(&ex->v[p->vmean]);
    const bool rstd_lin = p->vrstd >= 0 && ex->v[p->vrstd].dtype == ACL_FLOAT && nn_view_contiguous(&ex->v[p->vrstd]);
    for (int64_t i = l0; i < l1; i++) {
        switch (p->kind) {
        case LN_SOFTMAX:
        case LN_LOGSOFTMAX: {
            const nn_view_t *vx = &ex->v[p->vx], *vo = &ex->v[p->vout];
            void *xp = line_get(&p->L[p->vx], vx, i, ct, b0);
            void *op = line_dst(&p->L[p->vout], vo, ct, b1, i);
            if (ct == CT_F32) {   /* the fast path: vectorized max, exp and sums */
                const float *x = xp;
                float *o = op;
                bool nan;
                float m = max_f32(x, D, &nan);
                if (nan)
                    m = NAN;
                if (m == -INFINITY)
                    m = 0;
                if (p->kind == LN_SOFTMAX) {
                    double sum = nn_exp_sum_f32(x, o, D, m);
                    scale_f32(o, D, (float)(1.0 / sum));
                } else {
                    double sum = nn_exp_sum_f32(x, NULL, D, m);
                    sub_f32(o, x, D, m + (float)log(sum));
                }
                line_put(&p->L[p->vout], vo, i, ct, b1, op);
                break;
            }
            CT_LOOP(ct, {
                const T *x = xp;
                T *o = op;
                T m = -INFINITY;
                bool nan = false;
                for (int64_t k = 0; k < D; k++) {
                    if (x[k] > m)
                        m = x[k];
                    nan |= x[k] != x[k];
                }
                if (nan)
                    m = (T)NAN;
                if (m == (T)-INFINITY || m == (T)INFINITY)
                    m = m == (T)INFINITY ? (T)INFINITY : (T)0;
                double s = 0;
                if (p->kind == LN_SOFTMAX) {
                    for (int64_t k = 0; k < D; k++) {
                        T e = exp(x[k] - m);
                        o[k] = e;
                        s += e;
                    }
                    T r = (T)(1.0 / s);
                    for (int64_t k = 0; k < D; k++)
                        o[k] *= r;
                } else {
                    for (int64_t k = 0; k < D; k++)
                        s += exp(x[k] - m);
                    T lse = m + (T)log(s);
                    for (int64_t k = 0; k < D; k++)
                        o[k] = x[k] - lse;
                }
            });
            line_put(&p->L[p->vout], vo, i, ct, b1, op);
            break;
        }
        case LN_SOFTMAX_BW:
        case LN_LOGSOFTMAX_BW: {
            const nn_view_t *vg = &ex->v[p->vg], *vy = &ex->v[p->vx], *vo = &ex->v[p->vout];
            void *gp = line_get(&p->L[p->vg], vg, i, ct, b0);
            void *yp = line_get(&p->L[p->vx], vy, i, ct, b1);
            void *op = line_dst(&p->L[p->vout], vo, ct, b2, i);
            if (ct == CT_F32) {   /* the fast path: vectorized sums, exp and row */
                sm_bw_f32(gp, yp, op, D, p->kind == LN_LOGSOFTMAX_BW);
                line_put(&p->L[p->vout], vo, i, ct, b2, op);
                break;
            }
            CT_LOOP(ct, {
                const T *g = gp, *y = yp;
                T *o = op;
                double s = 0;
                if (p->kind == LN_SOFTMAX_BW) {
                    for (int64_t k = 0; k < D; k++)
                        s += (double)g[k] * (double)y[k];
                    for (int64_t k = 0; k < D; k++)
                        o[k] = y[k] * (g[k] - (T)s);
                } else {
                    for (int64_t k = 0; k < D; k++)
                        s += g[k];
                    for (int64_t k = 0; k < D; k++)
                        o[k] = g[k] - exp(y[k]) * (T)s;
                }
            });
            line_put(&p->L[p->vout], vo, i, ct, b2, op);
            break;
        }
        case LN_LAYERNORM:
        case LN_RMSNORM: {
            const nn_view_t *vx = &ex->v[p->vx], *vo = &ex->v[p->vout];
            void *xp = line_get(&p->L[p->vx], vx, i, ct, b0);
            void *op = line_dst(&p->L[p->vout], vo, ct, b1, i);
            double mean = 0, var = 0, rstd;
            if (ct == CT_F32) {   /* the fast path: vectorized sums and row */
                const float *x = xp;
                double dn = (double)(D ? D : 1);
                if (p->kind == LN_LAYERNORM) {
                    mean = pow_sum_f32(x, D, 0.0f, 1) / dn;
                    var = pow_sum_f32(x, D, (float)mean, 2) / dn;
                } else {
                    var = pow_sum_f32(x, D, 0.0f, 2) / dn;
                }
                rstd = 1.0 / sqrt(var + p->eps);
                norm_row_f32(op, x, D, (float)mean, (float)rstd, j->w, j->b);
                goto ln_store;
            }
            CT_LOOP(ct, {
                const T *x = xp;
                T *o = op;
                const T *w = j->w, *bb = j->b;
                if (p->kind == LN_LAYERNORM) {
                    for (int64_t k = 0; k < D; k++)
                        mean += x[k];
                    mean /= (double)(D ? D : 1);
                    for (int64_t k = 0; k < D; k++) {
                        double d = (double)x[k] - mean;
                        var += d * d;
                    }
                    var /= (double)(D ? D : 1);
                } else {
                    for (int64_t k = 0; k < D; k++)
                        var += (double)x[k] * (double)x[k];
                    var /= (double)(D ? D : 1);
                }
                rstd = 1.0 / sqrt(var + p->eps);
                T tm = (T)mean, tr = (T)rstd;
                for (int64_t k = 0; k < D; k++) {
                    T v = (x[k] - tm) * tr;
                    if (w)
                        v *= w[k];
                    if (bb)
                        v += bb[k];
                    o[k] = v;
                }
            });
        ln_store:
            line_put(&p->L[p->vout], vo, i, ct, b1, op);
            if (p->vmean >= 0)
                stat_put(&ex->v[p->vmean], mean_lin, i, mean);
            if (p->vrstd >= 0)
                stat_put(&ex->v[p->vrstd], rstd_lin, i, rstd);
            break;
        }
        case LN_LAYERNORM_BW:
        case LN_RMSNORM_BW: {
            const nn_view_t *vx = &ex->v[p->vx], *vg = &ex->v[p->vg];
            void *xp = line_get(&p->L[p->vx], vx, i, ct, b0);
            void *gp = line_get(&p->L[p->vg], vg, i, ct, b1);
            double mean = 0, rstd;
            if (p->kind == LN_LAYERNORM_BW)
                mean = nn_get_f64(elem_ptr(&ex->v[p->vmean], i), ex->v[p->vmean].dtype);
            rstd = nn_get_f64(elem_ptr(&ex->v[p->vrstd], i), ex->v[p->vrstd].dtype);
            void *op = p->mask[0] ? line_dst(&p->L[p->vout], &ex->v[p->vout], ct, b2, i) : NULL;
            if (ct == CT_F32) {   /* the fast path: vectorized sums and row */
                ln_bw_row_f32(xp, gp, j->w, op, D, (float)mean, (float)rstd, p->kind == LN_RMSNORM_BW, gw, gb);
                if (op)
                    line_put(&p->L[p->vout], &ex->v[p->vout], i, ct, b2, op);
                break;
            }
            CT_LOOP(ct, {
                const T *x = xp, *g = gp;
                const T *w = j->w;
                T *o = op;
                /* xhat = (x - mean) rstd; g' = g w; dx = rstd (g' - mean(g') - xhat mean(g' xhat)) */
                double sg = 0, sgx = 0;
                for (int64_t k = 0; k < D; k++) {
                    double xh = ((double)x[k] - mean) * rstd;
                    double gg = (double)g[k] * (w ? (double)w[k] : 1.0);
                    sg += gg;
                    sgx += gg * xh;
                    if (gw)
                        gw[k] += (double)g[k] * xh;
                    if (gb)
                        gb[k] += (double)g[k];
                }
                double mg = D ? sg / (double)D : 0, mgx = D ? sgx / (double)D : 0;
                if (p->kind == LN_RMSNORM_BW)
                    mg = 0;
                if (o)
                    for (int64_t k = 0; k < D; k++) {
                        double xh = ((double)x[k] - mean) * rstd;
                        double gg = (double)g[k] * (w ? (double)w[k] : 1.0);
                        o[k] = (T)(rstd * (gg - mg - xh * mgx));
                    }
            });
            if (op)
                line_put(&p->L[p->vout], &ex->v[p->vout], i, ct, b2, op);
            break;
        }
        default:
            break;
        }
    }
    free(scratch);
    return ACL_SUCCESS;
}

/* contiguous compute-type copy of a 1-D-like view (weight / bias): malloc-ed */
static void *small_pack(int ct, const nn_view_t *v)
{
    void *buf = malloc((size_t)(v->numel ? v->numel : 1) * nn_ct_size(ct));
    if (buf)
        nn_pack_rows(ct, buf, v, 0, nn_rows(v));
    return buf;
}

static aclError ln_run(nn_exec_t *ex)
{
    ln_params_t *p = (ln_params_t *)ex->params;
    ln_job_t j;
    memset(&j, 0, sizeof j);
    j.ex = ex;
    j.p = p;
    aclError rc = ACL_SUCCESS;
    bool bw = p->kind == LN_LAYERNORM_BW || p->kind == LN_RMSNORM_BW;
    if (p->vw >= 0 && !(j.w = small_pack(p->ct, &ex->v[p->vw])))
        rc = nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    if (!rc && p->vb >= 0 && !bw && !(j.b = small_pack(p->ct, &ex->v[p->vb])))
        rc = nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    uint32_t nb = 1;
    if (!rc && p->D == 0 && (p->kind == LN_LAYERNORM || p->kind == LN_RMSNORM)) {
        /* no normalized elements (the rows themselves are empty): each row's mean is 0 and its rstd
         * NaN (the variance is 0 / 0), as PyTorch's native_layer_norm gives them */
        const double m0 = 0, r0 = NAN;
        for (int k = 0; k < 2; k++) {
            int32_t vi = k ? p->vrstd : p->vmean;
            if (vi >= 0)
                for (int64_t i = 0; i < ex->v[vi].numel; i++)
                    nn_store(CT_F64, elem_ptr(&ex->v[vi], i), 1, ex->v[vi].dtype, k ? &r0 : &m0, 1);
        }
    } else if (!rc && p->nlines) {
        nb = nn_blocks(ex, p->nlines * (p->D ? p->D : 1), 64 * 1024);
        if ((int64_t)nb > p->nlines)
            nb = (uint32_t)p->nlines;
        j.per = (p->nlines + nb - 1) / nb;
        nb = (uint32_t)((p->nlines + j.per - 1) / j.per);
        j.nb = nb;
        if (bw && ((p->vgw >= 0 && p->mask[1]) || (p->vgb >= 0 && p->mask[2]))) {
            j.partial = calloc((size_t)nb * 2 * (size_t)(p->D ? p->D : 1), sizeof(double));
            if (!j.partial)
                rc = nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
        }
        if (!rc)
            rc = nn_parallel(ex, nb, ln_block, &j);
    }
    if (!rc && bw) {   /* combine the weight / bias gradients (zeros when there are no lines) */
        double *acc = calloc((size_t)2 * (size_t)(p->D ? p->D : 1), sizeof(double));
        if (!acc) {
            rc = nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
        } else {
            for (uint32_t b = 0; j.partial && b < nb; b++)
                for (int64_t k = 0; k < 2 * p->D; k++)
                    acc[k] += j.partial[(size_t)b * 2 * (size_t)p->D + (size_t)k];
            if (p->vgw >= 0 && p->mask[1])
                nn_unpack_rows(CT_F64, &ex->v[p->vgw], acc, 0, nn_rows(&ex->v[p->vgw]));
            if (p->vgb >= 0 && p->mask[2])
                nn_unpack_rows(CT_F64, &ex->v[p->vgb], acc + p->D, 0, nn_rows(&ex->v[p->vgb]));
            free(acc);
        }
    }
    free(j.partial);
    free(j.w);
    free(j.b);
    return rc;
}

static aclnnStatus float_tensor(const char *api, const char *name, const nn_tensor_t *t)
{
    if (!nn_is_float(t->dtype))
        return NN_PARAM("%s: %s has dtype %s (expected float32, float16, bfloat16 or float64)", api, name,
                        nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

static aclnnStatus shape_eq(const char *api, const char *an, const nn_tensor_t *a, const char *bn,
                            const nn_tensor_t *b)
{
    if (nn_same_shape(a, b->shape, b->ndim))
        return ACLNN_SUCCESS;
    char s1[160], s2[160];
    return NN_PARAM("%s: %s has shape %s but %s has shape %s (they must match)", api, an,
                    nn_shape_str(s1, sizeof s1, a->shape, a->ndim), bn, nn_shape_str(s2, sizeof s2, b->shape, b->ndim));
}

static nn_exec_t *ln_new(const char *api, int kind, int ct)
{
    nn_exec_t *ex = nn_exec_new(api, ln_run, ACLSIM_ENGINE_VECTOR, sizeof(ln_params_t));
    if (!ex)
        return NULL;
    ln_params_t *p = (ln_params_t *)ex->params;
    p->kind = kind;
    p->ct = ct;
    p->vx = p->vg = p->vw = p->vb = p->vmean = p->vrstd = p->vout = p->vgw = p->vgb = -1;
    return ex;
}

static aclnnStatus ln_finish(const char *api, nn_exec_t *ex, const bool *line, uint64_t *workspaceSize,
                             aclOpExecutor **executor)
{
    ln_params_t *p = (ln_params_t *)ex->params;
    /* every full-size operand (x, grad, out) splits the same way */
    int32_t full[3] = {p->vx, p->vg, p->vout};
    for (int i = 0; i < 3; i++)
        if (full[i] >= 0)
            line_split(&p->L[full[i]], &ex->v[full[i]], line);
    const line_desc_t *L = &p->L[p->vx];
    p->D = L->len;
    p->nlines = ex->v[p->vx].numel ? L->nlines : 0;
    for (int32_t i = 0; i < ex->nview; i++) {
        if (!ex->v[i].output)
            continue;
        aclnnStatus rc = nn_check_output_overlap(api, ex, i, i == p->vout);
        if (rc) {
            free(ex);
            return rc;
        }
    }
    ex->cost_ns = (uint64_t)(ex->v[p->vx].numel * 4);
    ex->cores = (uint32_t)(ex->v[p->vx].numel / (64 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

/* ------------------------------------------------------------------ softmax family */

static aclnnStatus softmax_make(const char *api, int kind, const aclTensor *gradH, const aclTensor *xh, int64_t dim,
                                aclTensor *outh, const char *xn, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *g = NULL, *x, *o;
    aclnnStatus rc;
    if (gradH && ((rc = nn_tensor_arg(api, "gradOutput", gradH, false, &g)) || (rc = float_tensor(api, "gradOutput", g))))
        return rc;
    if ((rc = nn_tensor_arg(api, xn, xh, false, &x)) || (rc = float_tensor(api, xn, x)) ||
        (rc = nn_tensor_arg(api, "out", outh, false, &o)) || (rc = float_tensor(api, "out", o)))
        return rc;
    if ((rc = shape_eq(api, "out", o, xn, x)) || (g && (rc = shape_eq(api, "gradOutput", g, xn, x))))
        return rc;
    int32_t d;
    if (!nn_wrap_dim(dim, x->ndim, &d))
        return NN_PARAM("%s: dim %lld is out of range for a %dD tensor (expected [%d, %d])", api, (long long)dim,
                        x->ndim, x->ndim ? -x->ndim : -1, x->ndim ? x->ndim - 1 : 0);
    aclDataType prom = g ? nn_promote(g->dtype, x->dtype) : x->dtype;
    nn_exec_t *ex = ln_new(api, kind, nn_ct_of(prom) == CT_F64 || o->dtype == ACL_DOUBLE ? CT_F64 : CT_F32);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    ln_params_t *p = (ln_params_t *)ex->params;
    if (g)   /* parameter order: gradOutput first */
        p->vg = nn_exec_add(ex, g, "gradOutput", false);
    p->vx = nn_exec_add(ex, x, xn, false);
    p->vout = nn_exec_add(ex, o, "out", true);
    bool line[NN_MAX_DIMS] = {false};
    if (x->ndim)
        line[d] = true;
    return ln_finish(api, ex, line, workspaceSize, executor);
}

NN_API aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out,
                                                uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return softmax_make("aclnnSoftmax", LN_SOFTMAX, NULL, self, dim, out, "self", workspaceSize, executor);
}

NN_API aclnnStatus aclnnSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnSoftmax", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnLogSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out,
                                                   uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return softmax_make("aclnnLogSoftmax", LN_LOGSOFTMAX, NULL, self, dim, out, "self", workspaceSize, executor);
}

NN_API aclnnStatus aclnnLogSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream)
{
    return nn_launch("aclnnLogSoftmax", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnSoftmaxBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *output,
                                                        int64_t dim, aclTensor *out, uint64_t *workspaceSize,
                                                        aclOpExecutor **executor)
{
    if (!gradOutput)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "aclnnSoftmaxBackward: gradOutput must not be NULL");
    return softmax_make("aclnnSoftmaxBackward", LN_SOFTMAX_BW, gradOutput, output, dim, out, "output", workspaceSize,
                        executor);
}

NN_API aclnnStatus aclnnSoftmaxBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                        aclrtStream stream)
{
    return nn_launch("aclnnSoftmaxBackward", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnLogSoftmaxBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *output,
                                                           int64_t dim, aclTensor *out, uint64_t *workspaceSize,
                                                           aclOpExecutor **executor)
{
    if (!gradOutput)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "aclnnLogSoftmaxBackward: gradOutput must not be NULL");
    return softmax_make("aclnnLogSoftmaxBackward", LN_LOGSOFTMAX_BW, gradOutput, output, dim, out, "output",
                        workspaceSize, executor);
}

NN_API aclnnStatus aclnnLogSoftmaxBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                           aclrtStream stream)
{
    return nn_launch("aclnnLogSoftmaxBackward", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ layer norm */

/* trailing dims of x that `shape` (k values) names; message on mismatch */
static aclnnStatus norm_dims(const char *api, const nn_tensor_t *x, const int64_t *shape, int32_t k, bool *line)
{
    if (k < 1 || k > x->ndim) {
        char s1[160];
        return NN_PARAM("%s: normalized shape has %d dims but input %s has %d", api, k,
                        nn_shape_str(s1, sizeof s1, x->shape, x->ndim), x->ndim);
    }
    for (int32_t i = 0; i < k; i++) {
        if (x->shape[x->ndim - k + i] != shape[i]) {
            char s1[160], s2[160];
            return NN_PARAM("%s: given normalized shape %s, expected an input whose trailing dims are %s, got %s",
                            api, nn_shape_str(s1, sizeof s1, shape, k), s1, nn_shape_str(s2, sizeof s2, x->shape, x->ndim));
        }
    }
    for (int32_t d = 0; d < x->ndim; d++)
        line[d] = d >= x->ndim - k;
    return ACLNN_SUCCESS;
}

static aclnnStatus param_shape(const char *api, const char *name, const nn_tensor_t *t, const int64_t *shape,
                               int32_t k)
{
    if (!t)
        return ACLNN_SUCCESS;
    int64_t n = 1;
    for (int32_t i = 0; i < k; i++)
        n *= shape[i];
    if (!nn_same_shape(t, shape, k) && !(t->numel == n && t->ndim == 1)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: %s has shape %s, expected the normalized shape %s", api, name,
                        nn_shape_str(s1, sizeof s1, t->shape, t->ndim), nn_shape_str(s2, sizeof s2, shape, k));
    }
    return float_tensor(api, name, t);
}

static aclnnStatus stat_shape(const char *api, const char *name, const nn_tensor_t *t, int64_t nlines)
{
    if (!t)
        return ACLNN_SUCCESS;
    if (t->numel != nlines)
        return NN_PARAM("%s: %s has %lld elements, expected one per normalized row (%lld)", api, name,
                        (long long)t->numel, (long long)nlines);
    return float_tensor(api, name, t);
}

NN_API aclnnStatus aclnnLayerNormGetWorkspaceSize(const aclTensor *input, const aclIntArray *normalizedShape,
                                                  const aclTensor *weightOptional, const aclTensor *biasOptional,
                                                  double eps, aclTensor *out, aclTensor *meanOutOptional,
                                                  aclTensor *rstdOutOptional, uint64_t *workspaceSize,
                                                  aclOpExecutor **executor)
{
    static const char api[] = "aclnnLayerNorm";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *w, *b, *o, *m, *r;
    const nn_intarray_t *ns;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = float_tensor(api, "input", x)) ||
        (rc = nn_intarray_arg(api, "normalizedShape", normalizedShape, false, &ns)) ||
        (rc = nn_tensor_arg(api, "weight", weightOptional, true, &w)) ||
        (rc = nn_tensor_arg(api, "bias", biasOptional, true, &b)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)) || (rc = float_tensor(api, "out", o)) ||
        (rc = nn_tensor_arg(api, "meanOut", meanOutOptional, true, &m)) ||
        (rc = nn_tensor_arg(api, "rstdOut", rstdOutOptional, true, &r)))
        return rc;
    if (!(eps >= 0))
        return NN_PARAM("%s: eps must be >= 0, got %g", api, eps);
    bool line[NN_MAX_DIMS];
    int32_t k = (int32_t)ns->n;
    if ((rc = norm_dims(api, x, ns->v, k, line)) || (rc = shape_eq(api, "out", o, "input", x)) ||
        (rc = param_shape(api, "weight", w, ns->v, k)) || (rc = param_shape(api, "bias", b, ns->v, k)))
        return rc;
    int64_t nlines = 1;
    for (int32_t d = 0; d < x->ndim - k; d++)
        nlines *= x->shape[d];
    if ((rc = stat_shape(api, "meanOut", m, nlines)) || (rc = stat_shape(api, "rstdOut", r, nlines)))
        return rc;
    nn_exec_t *ex = ln_new(api, LN_LAYERNORM, x->dtype == ACL_DOUBLE ? CT_F64 : CT_F32);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    ln_params_t *p = (ln_params_t *)ex->params;
    p->eps = eps;
    p->vx = nn_exec_add(ex, x, "input", false);
    p->vw = nn_exec_add(ex, w, "weight", false);
    p->vb = nn_exec_add(ex, b, "bias", false);
    p->vout = nn_exec_add(ex, o, "out", true);
    p->vmean = nn_exec_add(ex, m, "meanOut", true);
    p->vrstd = nn_exec_add(ex, r, "rstdOut", true);
    return ln_finish(api, ex, line, workspaceSize, executor);
}

NN_API aclnnStatus aclnnLayerNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnLayerNorm", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnLayerNormBackwardGetWorkspaceSize(const aclTensor *gradOut, const aclTensor *input,
                                                          const aclIntArray *normalizedShape, const aclTensor *mean,
                                                          const aclTensor *rstd, const aclTensor *weightOptional,
                                                          const aclTensor *biasOptional,
                                                          const aclBoolArray *outputMask, aclTensor *gradInputOut,
                                                          aclTensor *gradWeightOut, aclTensor *gradBiasOut,
                                                          uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnLayerNormBackward";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *x, *m, *r, *w, *b, *gi, *gw, *gb;
    const nn_intarray_t *ns;
    const nn_boolarray_t *mk;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "gradOut", gradOut, false, &g)) || (rc = float_tensor(api, "gradOut", g)) ||
        (rc = nn_tensor_arg(api, "input", input, false, &x)) || (rc = float_tensor(api, "input", x)) ||
        (rc = nn_intarray_arg(api, "normalizedShape", normalizedShape, false, &ns)) ||
        (rc = nn_tensor_arg(api, "mean", mean, false, &m)) || (rc = nn_tensor_arg(api, "rstd", rstd, false, &r)) ||
        (rc = nn_tensor_arg(api, "weight", weightOptional, true, &w)) ||
        (rc = nn_tensor_arg(api, "bias", biasOptional, true, &b)) ||
        (rc = nn_boolarray_arg(api, "outputMask", outputMask, false, &mk)) ||
        (rc = nn_tensor_arg(api, "gradInputOut", gradInputOut, true, &gi)) ||
        (rc = nn_tensor_arg(api, "gradWeightOut", gradWeightOut, true, &gw)) ||
        (rc = nn_tensor_arg(api, "gradBiasOut", gradBiasOut, true, &gb)))
        return rc;
    const nn_tensor_t *outs[3] = {gi, gw, gb};
    static const char *const onames[3] = {"gradInputOut", "gradWeightOut", "gradBiasOut"};
    if ((rc = nn_output_mask3(api, mk, outs, onames)))
        return rc;
    bool line[NN_MAX_DIMS];
    int32_t k = (int32_t)ns->n;
    if ((rc = norm_dims(api, x, ns->v, k, line)) || (rc = shape_eq(api, "gradOut", g, "input", x)) ||
        (rc = param_shape(api, "weight", w, ns->v, k)) || (rc = param_shape(api, "bias", b, ns->v, k)))
        return rc;
    if (mk->v[0] && ((rc = shape_eq(api, "gradInputOut", gi, "input", x)) || (rc = float_tensor(api, onames[0], gi))))
        return rc;
    if ((mk->v[1] && (rc = param_shape(api, onames[1], gw, ns->v, k))) ||
        (mk->v[2] && (rc = param_shape(api, onames[2], gb, ns->v, k))))
        return rc;
    int64_t nlines = 1;
    for (int32_t d = 0; d < x->ndim - k; d++)
        nlines *= x->shape[d];
    if ((rc = stat_shape(api, "mean", m, nlines)) || (rc = stat_shape(api, "rstd", r, nlines)))
        return rc;
    nn_exec_t *ex = ln_new(api, LN_LAYERNORM_BW, x->dtype == ACL_DOUBLE ? CT_F64 : CT_F32);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    ln_params_t *p = (ln_params_t *)ex->params;
    p->vg = nn_exec_add(ex, g, "gradOut", false);   /* parameter order */
    p->vx = nn_exec_add(ex, x, "input", false);
    p->vmean = nn_exec_add(ex, m, "mean", false);
    p->vrstd = nn_exec_add(ex, r, "rstd", false);
    p->vw = nn_exec_add(ex, w, "weight", false);
    for (int i = 0; i < 3; i++)
        p->mask[i] = mk->v[i];
    p->vout = mk->v[0] ? nn_exec_add(ex, gi, onames[0], true) : -1;
    p->vgw = mk->v[1] ? nn_exec_add(ex, gw, onames[1], true) : -1;
    p->vgb = mk->v[2] ? nn_exec_add(ex, gb, onames[2], true) : -1;
    if (p->vout < 0) {   /* ln_finish splits lines by the full-size views: x and grad suffice */
        line_split(&p->L[p->vx], &ex->v[p->vx], line);
        line_split(&p->L[p->vg], &ex->v[p->vg], line);
        p->D = p->L[p->vx].len;
        p->nlines = x->numel ? p->L[p->vx].nlines : 0;
        for (int32_t i = 0; i < ex->nview; i++)
            if (ex->v[i].output && (rc = nn_check_output_overlap(api, ex, i, false))) {
                free(ex);
                return rc;
            }
        ex->cost_ns = (uint64_t)(x->numel * 4);
        ex->cores = (uint32_t)(x->numel / (64 * 1024) + 1);
        return nn_exec_finish(ex, workspaceSize, executor);
    }
    return ln_finish(api, ex, line, workspaceSize, executor);
}

NN_API aclnnStatus aclnnLayerNormBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream)
{
    return nn_launch("aclnnLayerNormBackward", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ rms norm */

NN_API aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double epsilon,
                                                const aclTensor *yOut, const aclTensor *rstdOut,
                                                uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnRmsNorm";
    NN_OUTPTRS(api);
    const nn_tensor_t *xt, *g, *y, *r;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "x", x, false, &xt)) || (rc = float_tensor(api, "x", xt)) ||
        (rc = nn_tensor_arg(api, "gamma", gamma, false, &g)) || (rc = float_tensor(api, "gamma", g)) ||
        (rc = nn_tensor_arg(api, "yOut", yOut, false, &y)) || (rc = float_tensor(api, "yOut", y)) ||
        (rc = nn_tensor_arg(api, "rstdOut", rstdOut, true, &r)))
        return rc;
    if (!(epsilon >= 0))
        return NN_PARAM("%s: epsilon must be >= 0, got %g", api, epsilon);
    bool line[NN_MAX_DIMS];
    if ((rc = norm_dims(api, xt, g->shape, g->ndim, line)) || (rc = shape_eq(api, "yOut", y, "x", xt)))
        return rc;
    int64_t nlines = 1;
    for (int32_t d = 0; d < xt->ndim - g->ndim; d++)
        nlines *= xt->shape[d];
    if ((rc = stat_shape(api, "rstdOut", r, nlines)))
        return rc;
    nn_exec_t *ex = ln_new(api, LN_RMSNORM, xt->dtype == ACL_DOUBLE ? CT_F64 : CT_F32);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    ln_params_t *p = (ln_params_t *)ex->params;
    p->eps = epsilon;
    p->vx = nn_exec_add(ex, xt, "x", false);
    p->vw = nn_exec_add(ex, g, "gamma", false);
    p->vout = nn_exec_add(ex, y, "yOut", true);
    p->vrstd = nn_exec_add(ex, r, "rstdOut", true);
    return ln_finish(api, ex, line, workspaceSize, executor);
}

NN_API aclnnStatus aclnnRmsNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnRmsNorm", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnRmsNormGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *x, const aclTensor *rstd,
                                                    const aclTensor *gamma, const aclTensor *dxOut,
                                                    const aclTensor *dgammaOut, uint64_t *workspaceSize,
                                                    aclOpExecutor **executor)
{
    static const char api[] = "aclnnRmsNormGrad";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *xt, *r, *ga, *dx, *dg;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "dy", dy, false, &g)) || (rc = float_tensor(api, "dy", g)) ||
        (rc = nn_tensor_arg(api, "x", x, false, &xt)) || (rc = float_tensor(api, "x", xt)) ||
        (rc = nn_tensor_arg(api, "rstd", rstd, false, &r)) || (rc = nn_tensor_arg(api, "gamma", gamma, false, &ga)) ||
        (rc = float_tensor(api, "gamma", ga)) || (rc = nn_tensor_arg(api, "dxOut", dxOut, false, &dx)) ||
        (rc = float_tensor(api, "dxOut", dx)) || (rc = nn_tensor_arg(api, "dgammaOut", dgammaOut, false, &dg)))
        return rc;
    bool line[NN_MAX_DIMS];
    if ((rc = norm_dims(api, xt, ga->shape, ga->ndim, line)) || (rc = shape_eq(api, "dy", g, "x", xt)) ||
        (rc = shape_eq(api, "dxOut", dx, "x", xt)) || (rc = param_shape(api, "dgammaOut", dg, ga->shape, ga->ndim)))
        return rc;
    int64_t nlines = 1;
    for (int32_t d = 0; d < xt->ndim - ga->ndim; d++)
        nlines *= xt->shape[d];
    if ((rc = stat_shape(api, "rstd", r, nlines)))
        return rc;
    nn_exec_t *ex = ln_new(api, LN_RMSNORM_BW, xt->dtype == ACL_DOUBLE ? CT_F64 : CT_F32);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    ln_params_t *p = (ln_params_t *)ex->params;
    p->vg = nn_exec_add(ex, g, "dy", false);   /* parameter order */
    p->vx = nn_exec_add(ex, xt, "x", false);
    p->vrstd = nn_exec_add(ex, r, "rstd", false);
    p->vw = nn_exec_add(ex, ga, "gamma", false);
    p->mask[0] = p->mask[1] = true;
    p->vout = nn_exec_add(ex, dx, "dxOut", true);
    p->vgw = nn_exec_add(ex, dg, "dgammaOut", true);
    return ln_finish(api, ex, line, workspaceSize, executor);
}

NN_API aclnnStatus aclnnRmsNormGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return nn_launch("aclnnRmsNormGrad", workspace, workspaceSize, executor, stream);
}
