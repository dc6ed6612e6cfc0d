/* canna simulator op library: Convolution (2-D, stride / padding / dilation / groups) and its
 * backward, MaxPool2dWithIndices and its backward, NLLLoss / NLLLoss2d and their backward,
 * CrossEntropyLoss and CrossEntropyLossGrad.
 *
 * Convolutions are direct loops when each output channel reads one input channel (depthwise),
 * else im2col + GEMM through the BLAS over panels of output positions (the layout is described
 * at the convolution section below). */
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

/* Layout of the work (every array below is a dense compute-type array: an operand or output that
 * already is one is used in place, any other is packed into / computed in the workspace):
 * - Cg == 1 (depthwise, or one input channel per group): direct loops, per output plane (forward),
 *   per input plane (gradInput) and per output channel (gradWeight); the inner loops run along a
 *   row (unit stride when the stride is 1) and are compiled for AVX-512, AVX2 + FMA and baseline.
 * - few rows of im2col (Kg <= CV_TILED_KG, not 1x1: the input's first layers): per tile of
 *   CV_TILE_POS output positions of one image, its im2col and its GEMM in a block's own scratch
 *   (cache-resident; a panel of whole images would spend its time writing and reading the
 *   columns): the forward per tile, gradInput per image (col2im of the image's tiles), gradWeight
 *   per image into the block's partial sum, the blocks' partials added in block order.
 * - otherwise im2col + GEMM over column panels: the N * OH * OW output positions are cut into
 *   panels of at most CV_PANEL_BYTES of im2col columns (all groups): part of one image, or whole
 *   images when an image has fewer than CV_SPAN_POSITIONS (deep layers), so the GEMMs stay wide. Per panel:
 *   im2col (parallel over groups, channels and images), then the GEMMs cut into tiles over the
 *   device's AI-core blocks; gradWeight accumulates panel after panel into its own tiles (no
 *   per-block partial sums), gradInput is col2im of W^T x gradOutput into the panel's buffer.
 *   A 1x1 / stride-1 / unpadded convolution reads the input (and writes gradInput) in place.
 * The workspace (phase 1's size) holds the packed operands, the panel buffers and the bias. */

#define CV_PANEL_BYTES ((int64_t)8 << 20)   /* im2col columns of a panel, all groups */
#define CV_SPAN_POSITIONS 512               /* images with fewer output positions share panels */
#define CV_SPAN_MACS ((double)(1 << 21))    /* so do images whose product is smaller than this */
#define CV_MAC_GRAIN ((int64_t)1 << 18)     /* multiply-adds per block of the direct loops (~20-40 us) */
#define CV_TILED_KG 64                      /* Kg up to this: im2col + GEMM per tile of positions */
#define CV_TILE_POS 4096                    /* output positions of a tile */
#define CV_SLOTS 8                         /* blocks of a tiled phase (each has its scratch) */
#define CV_KMAX 64                          /* kernel columns whose valid output ranges are tabulated */
#define CV_PAD_MAX 16384                    /* elements of a zero-padded input plane on the stack */

typedef struct cv_params {
    int32_t ct;
    int64_t N, C, H, W, O, KH, KW, OH, OW, G, Cg, Og, Kg;   /* Kg = Cg*KH*KW */
    int64_t sh, sw, ph, pw, dh, dw;
    int32_t vx, vw, vb, vy;        /* forward: input, weight, bias, output */
    int32_t vgo, vgi, vgw, vgb;    /* backward: gradOutput, gradInput, gradWeight, gradBias */
    bool mask[3];
    bool direct;                   /* Cg == 1: direct loops */
    bool tiled;                    /* im2col + GEMM per tile of positions (few im2col rows) */
    bool pointwise;                /* 1x1, stride 1, no padding: the input is its own im2col */
    bool span;                     /* panels of whole images (P = images * OH*OW); else part of one */
    bool pk_x, pk_w, pk_go, pk_y, pk_gi, pk_gw;   /* packed into / computed in the workspace */
    int64_t P;                     /* columns per panel */
    size_t off_x, off_w, off_go, off_y, off_gi, off_gw, off_b, off_col, off_res, off_tile, off_part;
    int32_t kwlo[CV_KMAX], kwhi[CV_KMAX];   /* cv_valid_ow of the first CV_KMAX kernel columns */
} cv_params_t;

/* the output columns ow in [*lo, *hi) whose input column ow*sw - pw + kw*dw lies inside [0, W) */
static inline void cv_range_ow(const cv_params_t *p, int64_t kw, int64_t *lo, int64_t *hi)
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

static inline void cv_valid_ow(const cv_params_t *p, int64_t kw, int64_t *lo, int64_t *hi)
{
    if (NN_LIKELY(kw < CV_KMAX)) {
        *lo = p->kwlo[kw];
        *hi = p->kwhi[kw];
    } else {
        cv_range_ow(p, kw, lo, hi);
    }
}

static void cv_fill_ranges(cv_params_t *p)
{
    for (int64_t kw = 0; kw < p->KW && kw < CV_KMAX; kw++) {
        int64_t lo, hi;
        cv_range_ow(p, kw, &lo, &hi);
        p->kwlo[kw] = (int32_t)lo;
        p->kwhi[kw] = (int32_t)hi;
    }
}

/* im2col of image n, group g, input channels [ci0, ci1) and output positions [c0, c0+nc) into
 * col (row r = (ci*KH + kh)*KW + kw at col + r*ld; column pos at col[pos - c0]); walks output
 * rows, so each (kh, kw) row is a zero run, a (strided) copy and a zero run per output row.
 * col2im is its adjoint: it adds the same columns back into dx (image n's planes of group g). */
#define IM2COL(T)                                                                                   \
    static void im2col_##T(const cv_params_t *p, const T *x, int64_t n, int64_t g, int64_t ci0, int64_t ci1,    \
                           int64_t c0, int64_t nc, T *col, int64_t ld)                              \
    {                                                                                              \
        int64_t oh_0 = c0 / p->OW, ow_0 = c0 % p->OW;                                              \
        for (int64_t ci = ci0; ci < ci1; ci++) {                                                   \
            const T *plane = x + ((n * p->C) + g * p->Cg + ci) * p->H * p->W;                      \
            if (p->pointwise) {                                                                    \
                memcpy(col + ci * ld, plane + c0, (size_t)nc * sizeof(T));                         \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t kh = 0; kh < p->KH; kh++)                                                 \
                for (int64_t kw = 0; kw < p->KW; kw++) {                                           \
                    T *row = col + ((ci * p->KH + kh) * p->KW + kw) * ld;                          \
                    int64_t lo, hi, off = kw * p->dw - p->pw;                                      \
                    cv_valid_ow(p, kw, &lo, &hi);                                                  \
                    for (int64_t pos = c0, oh = oh_0, ow0 = ow_0; pos < c0 + nc; oh++, ow0 = 0) {  \
                        int64_t ow1 = p->OW < ow0 + (c0 + nc - pos) ? p->OW : ow0 + (c0 + nc - pos); \
                        T *r = row + (pos - c0);   /* r[ow - ow0] for ow in [ow0, ow1) */                \
                        int64_t ih = oh * p->sh - p->ph + kh * p->dh;                              \
                        if (ih < 0 || ih >= p->H) {                                                \
                            for (int64_t ow = ow0; ow < ow1; ow++)                                 \
                                r[ow - ow0] = (T)0;                                                      \
                        } else {                                                                   \
                            int64_t a = lo > ow0 ? lo : ow0, b = hi < ow1 ? hi : ow1;              \
                            if (a > b)                                                             \
                                a = b;                                                             \
                            for (int64_t ow = ow0; ow < a; ow++)                                   \
                                r[ow - ow0] = (T)0;                                                      \
                            if (a < b) {                                                           \
                                const T *src = plane + (ih * p->W + a * p->sw + off); /* ow = a */ \
                                if (p->sw == 1)                                                    \
                                    memcpy(r + (a - ow0), src, (size_t)(b - a) * sizeof(T));               \
                                else                                                               \
                                    for (int64_t ow = a; ow < b; ow++)                             \
                                        r[ow - ow0] = src[(ow - a) * p->sw];                             \
                            }                                                                      \
                            for (int64_t ow = b; ow < ow1; ow++)                                   \
                                r[ow - ow0] = (T)0;                                                      \
                        }                                                                          \
                        pos += ow1 - ow0;                                                          \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void col2im_##T(const cv_params_t *p, const T *col, int64_t ld, int64_t ci0, int64_t ci1, int64_t c0, \
                           int64_t nc, T *dx /* image n, group g: [Cg][H*W] */)                   \
    {                                                                                              \
        int64_t oh_0 = c0 / p->OW, ow_0 = c0 % p->OW;                                              \
        for (int64_t ci = ci0; ci < ci1; ci++) {                                                   \
            T *plane = dx + ci * p->H * p->W;                                                      \
            for (int64_t kh = 0; kh < p->KH; kh++)                                                 \
                for (int64_t kw = 0; kw < p->KW; kw++) {                                           \
                    const T *row = col + ((ci * p->KH + kh) * p->KW + kw) * ld;                    \
                    int64_t lo, hi, off = kw * p->dw - p->pw;                                      \
                    cv_valid_ow(p, kw, &lo, &hi);                                                  \
                    for (int64_t pos = c0, oh = oh_0, ow0 = ow_0; pos < c0 + nc; oh++, ow0 = 0) {  \
                        int64_t ow1 = p->OW < ow0 + (c0 + nc - pos) ? p->OW : ow0 + (c0 + nc - pos); \
                        int64_t ih = oh * p->sh - p->ph + kh * p->dh;                              \
                        if (ih >= 0 && ih < p->H) {                                                \
                            int64_t a = lo > ow0 ? lo : ow0, b = hi < ow1 ? hi : ow1;              \
                            if (a < b) {                                                           \
                                const T *r = row + (pos - c0) + (a - ow0);   /* ow = a */          \
                                T *dst = plane + (ih * p->W + a * p->sw + off);                    \
                                if (p->sw == 1)                                                    \
                                    for (int64_t i = 0; i < b - a; i++)                            \
                                        dst[i] += r[i];                                            \
                                else                                                               \
                                    for (int64_t i = 0; i < b - a; i++)                            \
                                        dst[i * p->sw] += r[i];                                    \
                            }                                                                      \
                        }                                                                          \
                        pos += ow1 - ow0;                                                          \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    }
IM2COL(float)
IM2COL(double)

/* direct loops for Cg == 1 (each output channel reads one input channel).
 * dw_fwd: output plane y[OH][OW] = bias + sum over taps of w[kh][kw] * x plane (shifted rows);
 * dw_dgrad: input plane dx[H][W] += the same taps of one output channel's gradient, transposed;
 * dw_wgrad: w's gradient for one output channel, sum over images of the taps' products (each tap
 *   accumulates rows of up to 64 positions as vectors, then sums them in double). */
#define DWCONV(T, VT, CW)                                                                                 \
    /* rows [oh, oh + R) of out: R accumulators, one per row, so that consecutive taps' adds do   \
     * not wait on each other (each output still adds its taps in the same order) */              \
    static inline __attribute__((always_inline)) void dw_corr_rows_##T(                           \
        const T *restrict pad, int64_t Wp, int64_t oh, int R, int64_t OWc, int64_t sh, int64_t sw, \
        int64_t dh, int64_t dw, int64_t KH, int64_t KW, const T *restrict wk, bool flip, T *restrict out) \
    {                                                                                              \
        for (int64_t ow0 = 0; ow0 < OWc; ow0 += CW) {                                              \
            VT acc[4];                                                                             \
            int64_t m = OWc - ow0 < CW ? OWc - ow0 : CW;                                           \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                                          \
                T *o = out + (oh + r) * OWc + ow0;                                                 \
                if (m == CW) {                                                                     \
                    memcpy(&acc[r], o, sizeof acc[r]);                                             \
                } else {                                                                           \
                    acc[r] = (VT){0};                                                              \
                    for (int64_t i = 0; i < m; i++)                                                \
                        acc[r][i] = o[i];                                                          \
                }                                                                                  \
            }                                                                                      \
            for (int64_t kh = 0; kh < KH; kh++) {                                                  \
                const T *restrict wr = wk + (flip ? (KH - 1 - kh) * KW : kh * KW);                 \
                for (int64_t kw = 0; kw < KW; kw++) {                                              \
                    T wv = wr[flip ? KW - 1 - kw : kw];                                            \
                    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                                  \
                        const T *restrict xk = pad + ((oh + r) * sh + kh * dh) * Wp + ow0 * sw + kw * dw; \
                        VT xv;                                                                     \
                        if (sw == 1) {                                                             \
                            memcpy(&xv, xk, sizeof xv);                                            \
                        } else {                                                                   \
                            for (int i = 0; i < CW; i++)                                           \
                                xv[i] = xk[i * sw];                                                \
                        }                                                                          \
                        acc[r] += wv * xv;                                                         \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                                          \
                T *o = out + (oh + r) * OWc + ow0;                                                 \
                if (m == CW)                                                                       \
                    memcpy(o, &acc[r], sizeof acc[r]);                                             \
                else                                                                               \
                    for (int64_t i = 0; i < m; i++)                                                \
                        o[i] = acc[r][i];                                                          \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* out[oh][ow] += sum over taps of w[kh][kw] * pad[oh*sh + kh*dh][ow*sw + kw*dw] (w flipped   \
     * when flip), CW outputs of a row in one vector register, four rows at a time: every tap is   \
     * unconditional vector multiply-adds (pad is zero-padded, CW * sw columns wider than read) */ \
    static NN_CLONES void dw_corr_##T(const T *restrict pad, int64_t Wp, int64_t OHc, int64_t OWc, int64_t sh,    \
                                      int64_t sw, int64_t dh, int64_t dw, int64_t KH, int64_t KW,  \
                                      const T *restrict wk, bool flip, T *restrict out)            \
    {                                                                                              \
        int64_t oh = 0;                                                                            \
        for (; oh + 4 <= OHc; oh += 4)                                                             \
            dw_corr_rows_##T(pad, Wp, oh, 4, OWc, sh, sw, dh, dw, KH, KW, wk, flip, out);         \
        for (; oh < OHc; oh++)                                                                     \
            dw_corr_rows_##T(pad, Wp, oh, 1, OWc, sh, sw, dh, dw, KH, KW, wk, flip, out);         \
    }                                                                                              \
    /* forward of one plane through a zero-padded copy; false when it would not fit CV_PAD_MAX */  \
    static bool dw_fwd_pad_##T(const cv_params_t *p, const T *restrict xp, const T *restrict wk, T b, \
                               T *restrict yp)                                                     \
    {                                                                                              \
        int64_t Hp = p->H + 2 * p->ph, Wp = p->W + 2 * p->pw + CW * p->sw;                         \
        if (Hp * Wp > CV_PAD_MAX)                                                                  \
            return false;                                                                          \
        T pad[CV_PAD_MAX];                                                                         \
        memset(pad, 0, (size_t)(Hp * Wp) * sizeof(T));                                             \
        for (int64_t h = 0; h < p->H; h++)                                                         \
            memcpy(pad + (h + p->ph) * Wp + p->pw, xp + h * p->W, (size_t)p->W * sizeof(T));      \
        for (int64_t i = 0; i < p->OH * p->OW; i++)                                                \
            yp[i] = b;                                                                             \
        dw_corr_##T(pad, Wp, p->OH, p->OW, p->sh, p->sw, p->dh, p->dw, p->KH, p->KW, wk, false, yp); \
        return true;                                                                               \
    }                                                                                              \
    /* gradInput of one plane (stride 1): dx += the full correlation of the zero-padded gradOutput \
     * with the flipped taps; false when it does not apply (stride, padding past the kernel's     \
     * extent) or would not fit CV_PAD_MAX */                                                      \
    static bool dw_dgrad_pad_##T(const cv_params_t *p, const T *restrict gp, const T *restrict wk, T *restrict dxp) \
    {                                                                                              \
        int64_t pt = (p->KH - 1) * p->dh - p->ph, pl = (p->KW - 1) * p->dw - p->pw;                \
        if (p->sh != 1 || p->sw != 1 || pt < 0 || pl < 0)                                          \
            return false;                                                                          \
        int64_t Hp = p->H + (p->KH - 1) * p->dh, Wp = p->W + (p->KW - 1) * p->dw + CW;            \
        if (Hp < pt + p->OH || Wp < pl + p->OW || Hp * Wp > CV_PAD_MAX)                            \
            return false;                                                                          \
        T pad[CV_PAD_MAX];                                                                         \
        memset(pad, 0, (size_t)(Hp * Wp) * sizeof(T));                                             \
        for (int64_t h = 0; h < p->OH; h++)                                                        \
            memcpy(pad + (h + pt) * Wp + pl, gp + h * p->OW, (size_t)p->OW * sizeof(T));          \
        dw_corr_##T(pad, Wp, p->H, p->W, 1, 1, p->dh, p->dw, p->KH, p->KW, wk, true, dxp);         \
        return true;                                                                               \
    }                                                                                              \
    static NN_CLONES void dw_fwd_##T(const cv_params_t *p, const T *restrict xp, const T *restrict wk, T b,   \
                                     T *restrict yp)                                               \
    {                                                                                              \
        if (dw_fwd_pad_##T(p, xp, wk, b, yp))                                                      \
            return;                                                                                \
        for (int64_t oh = 0; oh < p->OH; oh++) {                                                   \
            T *restrict yr = yp + oh * p->OW;                                                      \
            for (int64_t ow = 0; ow < p->OW; ow++)                                                 \
                yr[ow] = b;                                                                        \
            for (int64_t kh = 0; kh < p->KH; kh++) {                                               \
                int64_t ih = oh * p->sh - p->ph + kh * p->dh;                                      \
                if (ih < 0 || ih >= p->H)                                                          \
                    continue;                                                                      \
                for (int64_t kw = 0; kw < p->KW; kw++) {                                           \
                    int64_t lo, hi;                                                                \
                    cv_valid_ow(p, kw, &lo, &hi);                                                  \
                    if (lo >= hi)                                                                  \
                        continue;                                                                  \
                    const T *restrict xr = xp + (ih * p->W + lo * p->sw + kw * p->dw - p->pw);     \
                    T *restrict yo = yr + lo, wv = wk[kh * p->KW + kw];                            \
                    if (p->sw == 1)                                                                \
                        for (int64_t i = 0; i < hi - lo; i++)                                      \
                            yo[i] += wv * xr[i];                                                   \
                    else                                                                           \
                        for (int64_t i = 0; i < hi - lo; i++)                                      \
                            yo[i] += wv * xr[i * p->sw];                                           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static NN_CLONES void dw_dgrad_##T(const cv_params_t *p, const T *restrict gp, const T *restrict wk,       \
                                       T *restrict dxp)                                            \
    {                                                                                              \
        if (dw_dgrad_pad_##T(p, gp, wk, dxp))                                                      \
            return;                                                                                \
        for (int64_t oh = 0; oh < p->OH; oh++) {                                                   \
            const T *restrict gr = gp + oh * p->OW;                                                \
            for (int64_t kh = 0; kh < p->KH; kh++) {                                               \
                int64_t ih = oh * p->sh - p->ph + kh * p->dh;                                      \
                if (ih < 0 || ih >= p->H)                                                          \
                    continue;                                                                      \
                for (int64_t kw = 0; kw < p->KW; kw++) {                                           \
                    int64_t lo, hi;                                                                \
                    cv_valid_ow(p, kw, &lo, &hi);                                                  \
                    if (lo >= hi)                                                                  \
                        continue;                                                                  \
                    T *restrict dr = dxp + (ih * p->W + lo * p->sw + kw * p->dw - p->pw);          \
                    const T *restrict go = gr + lo;                                                \
                    T wv = wk[kh * p->KW + kw];                                                    \
                    if (p->sw == 1)                                                                \
                        for (int64_t i = 0; i < hi - lo; i++)                                      \
                            dr[i] += wv * go[i];                                                   \
                    else                                                                           \
                        for (int64_t i = 0; i < hi - lo; i++)                                      \
                            dr[i * p->sw] += wv * go[i];                                           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* x: the input channel's planes, image stride xs; g: the output channel's, stride gs */       \
    static NN_CLONES void dw_wgrad_##T(const cv_params_t *p, const T *restrict x, int64_t xs, const T *restrict g, \
                                       int64_t gs, T *restrict gwk)                                \
    {                                                                                              \
        for (int64_t kh = 0; kh < p->KH; kh++)                                                     \
            for (int64_t kw = 0; kw < p->KW; kw++) {                                               \
                int64_t lo, hi;                                                                    \
                cv_valid_ow(p, kw, &lo, &hi);                                                      \
                double total = 0;                                                                  \
                for (int64_t q0 = lo; q0 < hi; q0 += 64) {                                         \
                    int64_t q1 = hi - q0 < 64 ? hi : q0 + 64;                                      \
                    T acc[64];                                                                     \
                    for (int64_t i = 0; i < 64; i++)                                               \
                        acc[i] = 0;                                                                \
                    for (int64_t n = 0; n < p->N; n++)                                             \
                        for (int64_t oh = 0; oh < p->OH; oh++) {                                   \
                            int64_t ih = oh * p->sh - p->ph + kh * p->dh;                          \
                            if (ih < 0 || ih >= p->H)                                              \
                                continue;                                                          \
                            const T *restrict gr = g + n * gs + oh * p->OW + q0;                   \
                            const T *restrict xr = x + (n * xs + ih * p->W + kw * p->dw - p->pw + q0 * p->sw); \
                            if (p->sw == 1)                                                        \
                                for (int64_t i = 0; i < q1 - q0; i++)                              \
                                    acc[i] += gr[i] * xr[i];                                       \
                            else                                                                   \
                                for (int64_t i = 0; i < q1 - q0; i++)                              \
                                    acc[i] += gr[i] * xr[i * p->sw];                               \
                        }                                                                          \
                    for (int64_t i = 0; i < q1 - q0; i++)                                          \
                        total += (double)acc[i];                                                   \
                }                                                                                  \
                gwk[kh * p->KW + kw] = (T)total;                                                   \
            }                                                                                      \
    }
/* one AVX register of outputs: a wider generic vector is split by GCC into halves kept in memory
 * (each tap then reads back a half just stored, a failed store-to-load forward: 10x slower) */
typedef float cv_v8f __attribute__((vector_size(32)));
typedef double cv_v4d __attribute__((vector_size(32)));
DWCONV(float, cv_v8f, 8)
DWCONV(double, cv_v4d, 4)

static void gemm(int ct, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double beta, const void *a, int64_t lda,
                 const void *b, int64_t ldb, void *c, int64_t ldc)
{
    if (ct == CT_F32)
        nn_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, (float)beta, c, ldc);
    else
        nn_dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

/* sum of n values in double with 16 independent partial sums (one chain of dependent additions
 * would leave the adder waiting on its own latency) */
#define CV_SUM(T)                                                                                   \
    static NN_CLONES double cv_sum_##T(const T *r, int64_t n) \
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

/* phases of a run (one aclsimParallelFor each) */
enum { CV_DW_FWD, CV_DW_DGRAD, CV_DW_WGRAD, CV_BIAS_GRAD, CV_IM2COL, CV_GEMM_FWD, CV_GEMM_WGRAD, CV_GEMM_DGRAD,
       CV_COL2IM, CV_T_FWD, CV_T_DGRAD, CV_T_WGRAD };

typedef struct cv_job {
    nn_exec_t *ex;
    const cv_params_t *p;
    int phase;
    int64_t items, per;
    const char *X, *Wt, *GO;       /* dense compute-type operands */
    char *Y, *GI, *GW;             /* dense compute-type outputs */
    const double *bias;            /* forward bias (double[O]) or NULL */
    double *gb;                    /* gradBias (double[O]) */
    char *col, *res;               /* the panel's im2col columns [G][Kg][nc]; forward result / gathered gradOutput [O][nc] */
    char *tile, *part;             /* tiled: per block, im2col scratch [Kg][CV_TILE_POS] and gradWeight partial [O][Kg] */
    /* the current panel: images [n0, n0+nimg) whole (span), or positions [c0, c0+nc) of image n0 */
    int64_t n0, nimg, c0, nc;
    bool first;                    /* the first panel (gradWeight starts from 0) */
    bool im2col;                   /* the im2col phase fills col (else it only gathers gradOutput) */
    const char *GOp;               /* the panel's gradOutput: [O][ldgo] */
    int64_t ldgo;
    /* GEMM tiles of the phase: per group, mt x nt tiles of mtile x ntile */
    int64_t mt, nt, mtile, ntile, gm, gn;
} cv_job_t;

static inline size_t cv_csz(const cv_params_t *p) { return nn_ct_size(p->ct); }
#define CV_AT(base, elems) ((base) + (size_t)(elems) * csz)

/* tiles of a gm x gn product per group so that the groups' tiles give every AI core one (tiles of
 * at least 64 rows and 256 columns; a thinner GEMM spends its time packing its operands) */
static void cv_tiles(cv_job_t *j, int64_t gm, int64_t gn)
{
    const cv_params_t *p = j->p;
    int64_t cores = j->ex->nblocks_hint ? j->ex->nblocks_hint : 1;
    int64_t want = cores > p->G ? (cores + p->G - 1) / p->G : 1;
    int64_t mt = gm / 64 > 1 ? gm / 64 : 1;
    if (mt > want)
        mt = want;
    int64_t want2 = (want + mt - 1) / mt;
    int64_t nt = gn / 256 > 1 ? gn / 256 : 1;
    if (nt > want2)
        nt = want2;
    j->mtile = (gm + mt - 1) / mt;
    j->mtile = j->mtile > 16 ? (j->mtile + 15) / 16 * 16 : j->mtile;
    j->ntile = (gn + nt - 1) / nt;
    j->ntile = j->ntile > 16 ? (j->ntile + 15) / 16 * 16 : j->ntile;
    j->mt = j->mtile ? (gm + j->mtile - 1) / j->mtile : 1;
    j->nt = j->ntile ? (gn + j->ntile - 1) / j->ntile : 1;
    j->gm = gm;
    j->gn = gn;
}

/* the tile t of the current GEMM phase: group g, rows [m0, m1), columns [k0, k1) */
static void cv_tile_of(const cv_job_t *j, int64_t t, int64_t *g, int64_t *m0, int64_t *m1, int64_t *k0, int64_t *k1)
{
    int64_t nti = t % j->nt, mti = (t / j->nt) % j->mt;
    *g = t / (j->nt * j->mt);
    *m0 = mti * j->mtile;
    *m1 = *m0 + j->mtile < j->gm ? *m0 + j->mtile : j->gm;
    *k0 = nti * j->ntile;
    *k1 = *k0 + j->ntile < j->gn ? *k0 + j->ntile : j->gn;
}

/* the image and position range of column segment s of the current panel */
static void cv_segment(const cv_job_t *j, int64_t s, int64_t *n, int64_t *c0, int64_t *nc, int64_t *colofs)
{
    int64_t L = j->p->OH * j->p->OW;
    if (j->p->span) {
        *n = j->n0 + s;
        *c0 = 0;
        *nc = L;
        *colofs = s * L;
    } else {
        *n = j->n0;
        *c0 = j->c0;
        *nc = j->nc;
        *colofs = 0;
    }
}

static void cv_item(cv_job_t *j, int64_t t)
{
    const cv_params_t *p = j->p;
    size_t csz = cv_csz(p);
    bool f32 = p->ct == CT_F32;
    int64_t L = p->OH * p->OW, HW = p->H * p->W, KK = p->KH * p->KW;
    switch (j->phase) {
    case CV_DW_FWD: {   /* t = (n, oc) */
        int64_t n = t / p->O, oc = t % p->O, c = oc / p->Og;
        double b = j->bias ? j->bias[oc] : 0.0;
        const char *xp = CV_AT(j->X, (n * p->C + c) * HW), *wk = CV_AT(j->Wt, oc * KK);
        char *yp = CV_AT(j->Y, (n * p->O + oc) * L);
        if (f32)
            dw_fwd_float(p, (const float *)xp, (const float *)wk, (float)b, (float *)yp);
        else
            dw_fwd_double(p, (const double *)xp, (const double *)wk, b, (double *)yp);
        break;
    }
    case CV_DW_DGRAD: {   /* t = (n, c): the Og output channels of input channel c */
        int64_t n = t / p->C, c = t % p->C;
        char *dxp = CV_AT(j->GI, (n * p->C + c) * HW);
        memset(dxp, 0, (size_t)HW * csz);
        for (int64_t o = 0; o < p->Og; o++) {
            int64_t oc = c * p->Og + o;
            const char *gp = CV_AT(j->GO, (n * p->O + oc) * L), *wk = CV_AT(j->Wt, oc * KK);
            if (f32)
                dw_dgrad_float(p, (const float *)gp, (const float *)wk, (float *)dxp);
            else
                dw_dgrad_double(p, (const double *)gp, (const double *)wk, (double *)dxp);
        }
        break;
    }
    case CV_DW_WGRAD: {   /* t = oc */
        int64_t oc = t, c = oc / p->Og;
        const char *x = CV_AT(j->X, c * HW), *g = CV_AT(j->GO, oc * L);
        char *gwk = CV_AT(j->GW, oc * KK);
        if (f32)
            dw_wgrad_float(p, (const float *)x, p->C * HW, (const float *)g, p->O * L, (float *)gwk);
        else
            dw_wgrad_double(p, (const double *)x, p->C * HW, (const double *)g, p->O * L, (double *)gwk);
        break;
    }
    case CV_BIAS_GRAD: {   /* t = oc */
        double s = 0;
        for (int64_t n = 0; n < p->N; n++) {
            const char *r = CV_AT(j->GO, (n * p->O + t) * L);
            s += f32 ? cv_sum_float((const float *)r, L) : cv_sum_double((const double *)r, L);
        }
        j->gb[t] = s;
        break;
    }
    case CV_IM2COL: {   /* t = (g, ci, segment) for the columns; then (oc, segment) to gather gradOutput */
        int64_t nseg = p->span ? j->nimg : 1, ncol = j->im2col ? p->G * p->Cg * nseg : 0;
        if (t < ncol) {
            int64_t s = t % nseg, ci = (t / nseg) % p->Cg, g = t / (nseg * p->Cg);
            int64_t n, c0, nc, cofs;
            cv_segment(j, s, &n, &c0, &nc, &cofs);
            char *col = CV_AT(j->col, g * p->Kg * j->nc + cofs);
            if (f32)
                im2col_float(p, (const float *)j->X, n, g, ci, ci + 1, c0, nc, (float *)col, j->nc);
            else
                im2col_double(p, (const double *)j->X, n, g, ci, ci + 1, c0, nc, (double *)col, j->nc);
        } else {   /* gradOutput rows of the panel's images side by side: res[O][nc] */
            t -= ncol;
            int64_t s = t % nseg, oc = t / nseg;
            memcpy(CV_AT(j->res, oc * j->nc + s * L), CV_AT(j->GO, ((j->n0 + s) * p->O + oc) * L), (size_t)L * csz);
        }
        break;
    }
    case CV_GEMM_FWD: {   /* y tile [m0, m1) x [k0, k1) of group g */
        int64_t g, m0, m1, k0, k1;
        cv_tile_of(j, t, &g, &m0, &m1, &k0, &k1);
        const char *A = CV_AT(j->Wt, (g * p->Og + m0) * p->Kg), *B;
        int64_t ldb;
        if (p->pointwise && !p->span) {
            B = CV_AT(j->X, (j->n0 * p->C + g * p->Cg) * L + j->c0 + k0);
            ldb = L;
        } else {
            B = CV_AT(j->col, g * p->Kg * j->nc + k0);
            ldb = j->nc;
        }
        char *Cm;
        int64_t ldc;
        if (p->span) {
            Cm = CV_AT(j->res, (g * p->Og + m0) * j->nc + k0);
            ldc = j->nc;
        } else {
            Cm = CV_AT(j->Y, (j->n0 * p->O + g * p->Og + m0) * L + j->c0 + k0);
            ldc = L;
        }
        gemm(p->ct, false, false, m1 - m0, k1 - k0, p->Kg, 0, A, p->Kg, B, ldb, Cm, ldc);
        for (int64_t r = 0; r < m1 - m0; r++) {
            int64_t oc = g * p->Og + m0 + r;
            char *row = CV_AT(Cm, r * ldc);
            if (j->bias) {
                if (f32) {
                    float b = (float)j->bias[oc], *rr = (float *)row;
                    for (int64_t i = 0; i < k1 - k0; i++)
                        rr[i] += b;
                } else {
                    double b = j->bias[oc], *rr = (double *)row;
                    for (int64_t i = 0; i < k1 - k0; i++)
                        rr[i] += b;
                }
            }
            if (p->span)   /* columns [k0, k1) of the panel belong to images n0 + k / L */
                for (int64_t k = k0; k < k1;) {
                    int64_t s = k / L, l = k % L, run = L - l < k1 - k ? L - l : k1 - k;
                    memcpy(CV_AT(j->Y, ((j->n0 + s) * p->O + oc) * L + l), CV_AT(row, k - k0), (size_t)run * csz);
                    k += run;
                }
        }
        break;
    }
    case CV_GEMM_WGRAD: {   /* gw_g tile [m0, m1) x [k0, k1) (+)= go_g[m][nc] x col_g[k][nc]^T */
        int64_t g, m0, m1, k0, k1;
        cv_tile_of(j, t, &g, &m0, &m1, &k0, &k1);
        const char *A = CV_AT(j->GOp, (g * p->Og + m0) * j->ldgo);
        const char *B;
        int64_t ldb;
        if (p->pointwise && !p->span) {   /* the input is its own im2col */
            B = CV_AT(j->X, (j->n0 * p->C + g * p->Cg + k0) * L + j->c0);
            ldb = L;
        } else {
            B = CV_AT(j->col, (g * p->Kg + k0) * j->nc);
            ldb = j->nc;
        }
        char *Cm = CV_AT(j->GW, (g * p->Og + m0) * p->Kg + k0);
        gemm(p->ct, false, true, m1 - m0, k1 - k0, j->nc, j->first ? 0 : 1, A, j->ldgo, B, ldb, Cm, p->Kg);
        break;
    }
    case CV_GEMM_DGRAD: {   /* col_g tile [k0, k1) x [c0, c1) = W_g^T[k][Og] x go_g[Og][c] */
        int64_t g, m0, m1, k0, k1;
        cv_tile_of(j, t, &g, &m0, &m1, &k0, &k1);
        const char *A = CV_AT(j->Wt, g * p->Og * p->Kg + m0);
        const char *B = CV_AT(j->GOp, g * p->Og * j->ldgo + k0);
        char *Cm;
        int64_t ldc;
        if (p->pointwise && !p->span) {   /* the columns are gradInput's own positions */
            Cm = CV_AT(j->GI, (j->n0 * p->C + g * p->Cg + m0) * L + j->c0 + k0);
            ldc = L;
        } else {
            Cm = CV_AT(j->col, (g * p->Kg + m0) * j->nc + k0);
            ldc = j->nc;
        }
        gemm(p->ct, true, false, m1 - m0, k1 - k0, p->Og, 0, A, p->Kg, B, j->ldgo, Cm, ldc);
        break;
    }
    case CV_COL2IM: {   /* t = (g, ci, segment): add the columns into gradInput's plane */
        int64_t nseg = p->span ? j->nimg : 1;
        int64_t s = t % nseg, ci = (t / nseg) % p->Cg, g = t / (nseg * p->Cg);
        int64_t n, c0, nc, cofs;
        cv_segment(j, s, &n, &c0, &nc, &cofs);
        char *dx = CV_AT(j->GI, (n * p->C + g * p->Cg) * HW);
        if (c0 == 0)   /* the image's first panel */
            memset(CV_AT(dx, ci * HW), 0, (size_t)HW * csz);
        const char *col = CV_AT(j->col, g * p->Kg * j->nc + cofs);
        if (f32)
            col2im_float(p, (const float *)col, j->nc, ci, ci + 1, c0, nc, (float *)dx);
        else
            col2im_double(p, (const double *)col, j->nc, ci, ci + 1, c0, nc, (double *)dx);
        break;
    }
    }
}

/* item t of a tiled phase on block slot `slot` */
static void cv_titem(cv_job_t *j, int64_t t, int64_t slot)
{
    const cv_params_t *p = j->p;
    size_t csz = cv_csz(p);
    bool f32 = p->ct == CT_F32;
    int64_t L = p->OH * p->OW, HW = p->H * p->W, ntl = (L + CV_TILE_POS - 1) / CV_TILE_POS;
    char *col = CV_AT(j->tile, slot * p->Kg * CV_TILE_POS);
    if (j->phase == CV_T_FWD) {   /* t = (n, g, tile): y[n, g*Og + o, c0 + i] = bias + W_g x col */
        int64_t tl = t % ntl, g = (t / ntl) % p->G, n = t / (ntl * p->G);
        int64_t c0 = tl * CV_TILE_POS, nc = L - c0 < CV_TILE_POS ? L - c0 : CV_TILE_POS;
        if (f32)
            im2col_float(p, (const float *)j->X, n, g, 0, p->Cg, c0, nc, (float *)col, nc);
        else
            im2col_double(p, (const double *)j->X, n, g, 0, p->Cg, c0, nc, (double *)col, nc);
        char *Cm = CV_AT(j->Y, (n * p->O + g * p->Og) * L + c0);
        gemm(p->ct, false, false, p->Og, nc, p->Kg, 0, CV_AT(j->Wt, g * p->Og * p->Kg), p->Kg, col, nc, Cm, L);
        for (int64_t r = 0; j->bias && r < p->Og; r++) {
            double b = j->bias[g * p->Og + r];
            if (f32) {
                float bf = (float)b, *rr = (float *)CV_AT(Cm, r * L);
                for (int64_t i = 0; i < nc; i++)
                    rr[i] += bf;
            } else {
                double *rr = (double *)CV_AT(Cm, r * L);
                for (int64_t i = 0; i < nc; i++)
                    rr[i] += b;
            }
        }
        return;
    }
    /* t = (n, g): the image's tiles in order */
    int64_t g = t % p->G, n = t / p->G;
    const char *go = CV_AT(j->GO, (n * p->O + g * p->Og) * L);
    char *dx = j->phase == CV_T_DGRAD ? CV_AT(j->GI, (n * p->C + g * p->Cg) * HW) : NULL;
    if (dx)
        memset(dx, 0, (size_t)(p->Cg * HW) * csz);
    for (int64_t c0 = 0; c0 < L; c0 += CV_TILE_POS) {
        int64_t nc = L - c0 < CV_TILE_POS ? L - c0 : CV_TILE_POS;
        if (dx) {   /* col = W_g^T x go tile, added back into the image's planes */
            gemm(p->ct, true, false, p->Kg, nc, p->Og, 0, CV_AT(j->Wt, g * p->Og * p->Kg), p->Kg, CV_AT(go, c0), L, col,
                 nc);
            if (f32)
                col2im_float(p, (const float *)col, nc, 0, p->Cg, c0, nc, (float *)dx);
            else
                col2im_double(p, (const double *)col, nc, 0, p->Cg, c0, nc, (double *)dx);
        } else {   /* the block's partial gradWeight of group g += go tile x col^T */
            if (f32)
                im2col_float(p, (const float *)j->X, n, g, 0, p->Cg, c0, nc, (float *)col, nc);
            else
                im2col_double(p, (const double *)j->X, n, g, 0, p->Cg, c0, nc, (double *)col, nc);
            char *part = CV_AT(j->part, (slot * p->O + g * p->Og) * p->Kg);
            gemm(p->ct, false, true, p->Og, p->Kg, nc, 1, CV_AT(go, c0), L, col, nc, part, p->Kg);
        }
    }
}

static aclError cv_tblock(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    cv_job_t *j = arg;
    int64_t t0 = (int64_t)bi * j->per, t1 = t0 + j->per < j->items ? t0 + j->per : j->items;
    for (int64_t t = t0; t < t1; t++)
        cv_titem(j, t, bi);
    return ACL_SUCCESS;
}

/* a tiled phase: at most CV_SLOTS blocks (one scratch each); returns the number of blocks */
static aclError cv_tphase(cv_job_t *j, int phase, int64_t items, int64_t work, uint32_t *nblocks)
{
    j->phase = phase;
    j->items = items;
    uint32_t nb = nn_blocks(j->ex, work, CV_MAC_GRAIN);
    if (nb > CV_SLOTS)
        nb = CV_SLOTS;
    if ((int64_t)nb > items)
        nb = (uint32_t)items;
    if (nb < 1)
        nb = 1;
    j->per = (items + nb - 1) / nb;
    nb = (uint32_t)((items + j->per - 1) / j->per);
    if (nblocks)
        *nblocks = nb;
    return nn_parallel(j->ex, nb, cv_tblock, j);
}

static aclError cv_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    cv_job_t *j = arg;
    int64_t t0 = (int64_t)bi * j->per, t1 = t0 + j->per < j->items ? t0 + j->per : j->items;
    for (int64_t t = t0; t < t1; t++)
        cv_item(j, t);
    return ACL_SUCCESS;
}

/* run phase `phase` over `items` items, `work` units (elements or multiply-adds) in all */
static aclError cv_phase(cv_job_t *j, int phase, int64_t items, int64_t work, int64_t grain)
{
    if (items <= 0)
        return ACL_SUCCESS;
    j->phase = phase;
    j->items = items;
    uint32_t nb = nn_blocks(j->ex, work, grain);
    if ((int64_t)nb > items)
        nb = (uint32_t)items;
    j->per = (items + nb - 1) / nb;
    nb = (uint32_t)((items + j->per - 1) / j->per);
    return nn_parallel(j->ex, nb, cv_block, j);
}

/* the current panel q: its images / positions */
static void cv_panel(cv_job_t *j, int64_t q)
{
    const cv_params_t *p = j->p;
    int64_t L = p->OH * p->OW;
    if (p->span) {
        int64_t ipp = p->P / L;
        j->n0 = q * ipp;
        j->nimg = p->N - j->n0 < ipp ? p->N - j->n0 : ipp;
        j->c0 = 0;
        j->nc = j->nimg * L;
    } else {
        int64_t ppi = (L + p->P - 1) / p->P;
        j->n0 = q / ppi;
        j->nimg = 1;
        j->c0 = (q % ppi) * p->P;
        j->nc = L - j->c0 < p->P ? L - j->c0 : p->P;
    }
    j->first = q == 0;
}

static int64_t cv_npanels(const cv_params_t *p)
{
    int64_t L = p->OH * p->OW;
    if (!p->N)
        return 0;
    if (p->span)
        return (p->N + p->P / L - 1) / (p->P / L);
    return p->N * ((L + p->P - 1) / p->P);
}

/* an operand as a dense compute-type array: in place, or packed into the workspace at off */
static aclError cv_in(nn_exec_t *ex, int32_t vi, bool packed, size_t off, const char **out)
{
    const cv_params_t *p = (const cv_params_t *)ex->params;
    if (!packed) {
        *out = ex->v[vi].data;
        return ACL_SUCCESS;
    }
    *out = ex->ws + off;
    return nn_pack(ex, p->ct, ex->ws + off, &ex->v[vi]);
}


/* phase 1: the direct / GEMM choice, the panels and the workspace layout (after the views are
 * added: which operands are dense compute-type arrays is known from their dtypes and strides) */
static void cv_plan(nn_exec_t *ex, cv_params_t *p, bool backward)
{
    size_t csz = nn_ct_size(p->ct);
    int64_t L = p->OH * p->OW;
    cv_fill_ranges(p);
    /* direct loops for grouped convolutions of one input channel per group (depthwise); one input
     * channel in all (G == 1) shares its im2col between the output channels: a GEMM */
    p->direct = p->Cg == 1 && p->G > 1;
    p->pointwise = p->KH == 1 && p->KW == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0;
    p->tiled = !p->direct && !p->pointwise && p->Kg && p->Kg <= CV_TILED_KG;
    int64_t percol = p->G * p->Kg * (int64_t)csz;   /* bytes of one im2col column, all groups */
    int64_t pmax = percol ? CV_PANEL_BYTES / percol : L * (p->N ? p->N : 1);
    if (pmax < 1)
        pmax = 1;
    int64_t ipp = pmax / L < p->N ? pmax / L : p->N;
    /* whole images per panel for small images, and for small products per image (a thin layer:
     * one image's im2col and GEMM take less time than starting the two phases on the AI cores) */
    if (ipp >= 2 && (L < CV_SPAN_POSITIONS || (double)p->Og * (double)p->Kg * (double)L < CV_SPAN_MACS)) {
        p->span = true;
        p->P = ipp * L;
    } else {
        int64_t ppi = (L + pmax - 1) / pmax;
        p->span = false;
        p->P = (L + ppi - 1) / ppi;
    }
    bool fwd = !backward, need_x = fwd || p->mask[1], need_w = fwd || p->mask[0];
    p->pk_x = need_x && !nn_view_dense(&ex->v[p->vx], p->ct);
    p->pk_w = need_w && !nn_view_dense(&ex->v[p->vw], p->ct);
    p->pk_go = backward && !nn_view_dense(&ex->v[p->vgo], p->ct);
    p->pk_y = fwd && !nn_view_dense(&ex->v[p->vy], p->ct);
    p->pk_gi = backward && p->mask[0] && !nn_view_dense(&ex->v[p->vgi], p->ct);
    p->pk_gw = backward && p->mask[1] && !nn_view_dense(&ex->v[p->vgw], p->ct);
    size_t off = 0;
#define CV_RESERVE(field, on, bytes)                                                                \
    do {                                                                                           \
        p->field = off;                                                                            \
        if (on)                                                                                    \
            off += nn_align64((size_t)(bytes));                                                    \
    } while (0)
    CV_RESERVE(off_x, p->pk_x, ex->v[p->vx].numel * (int64_t)csz);
    CV_RESERVE(off_w, p->pk_w, ex->v[p->vw].numel * (int64_t)csz);
    CV_RESERVE(off_go, p->pk_go, ex->v[p->vgo].numel * (int64_t)csz);
    CV_RESERVE(off_y, p->pk_y, ex->v[p->vy].numel * (int64_t)csz);
    CV_RESERVE(off_gi, p->pk_gi, ex->v[p->vgi].numel * (int64_t)csz);
    CV_RESERVE(off_gw, p->pk_gw, ex->v[p->vgw].numel * (int64_t)csz);
    CV_RESERVE(off_b, fwd ? p->vb >= 0 : p->mask[2], p->O * (int64_t)sizeof(double));
    bool gemms = !p->direct && p->Kg && (fwd || p->mask[0] || p->mask[1]);
    bool panels = gemms && !p->tiled;
    CV_RESERVE(off_col, panels && (p->span || !p->pointwise), p->G * p->Kg * p->P * (int64_t)csz);
    CV_RESERVE(off_res, panels && p->span, p->O * p->P * (int64_t)csz);
    CV_RESERVE(off_tile, gemms && p->tiled, CV_SLOTS * p->Kg * CV_TILE_POS * (int64_t)csz);
    CV_RESERVE(off_part, gemms && p->tiled && backward && p->mask[1], CV_SLOTS * p->O * p->Kg * (int64_t)csz);
#undef CV_RESERVE
    ex->ws_size = off;
    double macs = (double)p->N * (double)p->O * (double)L * (double)p->Kg *
                  (fwd ? 1.0 : (double)p->mask[0] + (double)p->mask[1]);
    ex->cost_ns = (uint64_t)(macs / 8);
    double blocks = macs / (double)CV_MAC_GRAIN;
    ex->cores = blocks < 1 ? 1 : blocks > 65535 ? 65535 : (uint32_t)blocks;
}

static aclError cv_fwd_run(nn_exec_t *ex)
{
    cv_params_t *p = (cv_params_t *)ex->params;
    const nn_view_t *y = &ex->v[p->vy];
    if (!y->numel)
        return ACL_SUCCESS;
    if (!p->direct && p->Kg && nn_blas_ready(ex->api))
        return ACLNN_ERR_INNER_FIND_KERNEL_ERROR;
    cv_job_t j;
    memset(&j, 0, sizeof j);
    j.ex = ex;
    j.p = p;
    aclError rc;
    if ((rc = cv_in(ex, p->vx, p->pk_x, p->off_x, &j.X)) || (rc = cv_in(ex, p->vw, p->pk_w, p->off_w, &j.Wt)))
        return rc;
    j.Y = p->pk_y ? ex->ws + p->off_y : y->data;
    if (p->vb >= 0) {
        double *b = (double *)(ex->ws + p->off_b);
        nn_pack_rows(CT_F64, b, &ex->v[p->vb], 0, nn_rows(&ex->v[p->vb]));
        j.bias = b;
    }
    int64_t L = p->OH * p->OW;
    if (p->direct) {
        rc = cv_phase(&j, CV_DW_FWD, p->N * p->O, p->N * p->O * L * p->KH * p->KW, CV_MAC_GRAIN);
    } else if (!p->Kg) {   /* no input channels: the bias alone */
        for (int64_t r = 0; r < p->N * p->O; r++) {
            double b = j.bias ? j.bias[r % p->O] : 0.0;
            for (int64_t i = 0; i < L; i++) {
                if (p->ct == CT_F32)
                    ((float *)j.Y)[r * L + i] = (float)b;
                else
                    ((double *)j.Y)[r * L + i] = b;
            }
        }
    } else if (p->tiled) {
        j.tile = ex->ws + p->off_tile;
        int64_t ntl = (L + CV_TILE_POS - 1) / CV_TILE_POS;
        rc = cv_tphase(&j, CV_T_FWD, p->N * p->G * ntl, p->N * p->O * L * p->Kg, NULL);
    } else {
        j.col = ex->ws + p->off_col;
        j.res = ex->ws + p->off_res;
        j.im2col = p->span || !p->pointwise;
        int64_t np = cv_npanels(p);
        for (int64_t q = 0; q < np && !rc; q++) {
            cv_panel(&j, q);
            if (j.im2col)
                rc = cv_phase(&j, CV_IM2COL, p->G * p->Cg * (p->span ? j.nimg : 1), p->G * p->Kg * j.nc,
                              NN_BLOCK_GRAIN);
            if (!rc) {
                cv_tiles(&j, p->Og, j.nc);
                rc = cv_phase(&j, CV_GEMM_FWD, p->G * j.mt * j.nt, p->G * j.mt * j.nt, 1);
            }
        }
    }
    if (!rc && p->pk_y)
        rc = nn_unpack(ex, p->ct, y, j.Y);
    return rc;
}

static aclError cv_bwd_run(nn_exec_t *ex)
{
    cv_params_t *p = (cv_params_t *)ex->params;
    bool gemms = !p->direct && p->Kg && (p->mask[0] || p->mask[1]);
    if (gemms && nn_blas_ready(ex->api))
        return ACLNN_ERR_INNER_FIND_KERNEL_ERROR;
    size_t csz = nn_ct_size(p->ct);
    cv_job_t j;
    memset(&j, 0, sizeof j);
    j.ex = ex;
    j.p = p;
    aclError rc;
    if ((rc = cv_in(ex, p->vgo, p->pk_go, p->off_go, &j.GO)) ||
        (p->mask[1] && (rc = cv_in(ex, p->vx, p->pk_x, p->off_x, &j.X))) ||
        (p->mask[0] && (rc = cv_in(ex, p->vw, p->pk_w, p->off_w, &j.Wt))))
        return rc;
    if (p->mask[0])
        j.GI = p->pk_gi ? ex->ws + p->off_gi : ex->v[p->vgi].data;
    if (p->mask[1])
        j.GW = p->pk_gw ? ex->ws + p->off_gw : ex->v[p->vgw].data;
    int64_t L = p->OH * p->OW, KK = p->KH * p->KW;
    bool f32 = p->ct == CT_F32;
    int64_t gi_n = p->mask[0] ? ex->v[p->vgi].numel : 0, gw_n = p->mask[1] ? ex->v[p->vgw].numel : 0;
    if (p->mask[2]) {
        j.gb = (double *)(ex->ws + p->off_b);
        rc = cv_phase(&j, CV_BIAS_GRAD, p->O, p->N * p->O * L, NN_BLOCK_GRAIN);
    }
    if (rc) {
    } else if (!p->O) {   /* no output channels: gradInput is 0 (gradWeight has no elements) */
        if (gi_n)
            memset(j.GI, 0, (size_t)gi_n * csz);
    } else if (p->direct) {
        if (gi_n)
            rc = cv_phase(&j, CV_DW_DGRAD, p->N * p->C, p->N * p->O * L * KK, CV_MAC_GRAIN);
        if (!rc && gw_n)
            rc = cv_phase(&j, CV_DW_WGRAD, p->O, p->N * p->O * L * KK, CV_MAC_GRAIN);
    } else if (gemms && p->tiled) {
        j.tile = ex->ws + p->off_tile;
        int64_t work = p->N * p->O * L * p->Kg;
        if (gi_n && p->N)
            rc = cv_tphase(&j, CV_T_DGRAD, p->N * p->G, work, NULL);
        if (!rc && gw_n) {
            uint32_t nb = 0;
            j.part = ex->ws + p->off_part;
            memset(j.part, 0, (size_t)(CV_SLOTS * p->O * p->Kg) * csz);
            if (p->N)
                rc = cv_tphase(&j, CV_T_WGRAD, p->N * p->G, work, &nb);
            for (int64_t e = 0; !rc && e < gw_n; e++) {   /* the blocks' partials, in block order */
                double acc = 0;
                for (uint32_t b = 0; b < nb; b++)
                    acc += f32 ? (double)((const float *)j.part)[b * gw_n + e] : ((const double *)j.part)[b * gw_n + e];
                if (f32)
                    ((float *)j.GW)[e] = (float)acc;
                else
                    ((double *)j.GW)[e] = acc;
            }
        }
    } else if (gemms) {
        int64_t np = cv_npanels(p);
        if (gw_n && !np)   /* no images: gradWeight is 0 */
            memset(j.GW, 0, (size_t)gw_n * csz);
        j.col = ex->ws + p->off_col;
        j.res = ex->ws + p->off_res;
        j.im2col = p->mask[1] && (p->span || !p->pointwise);
        for (int64_t q = 0; q < np && !rc; q++) {
            cv_panel(&j, q);
            int64_t nseg = p->span ? j.nimg : 1;
            if (p->span) {
                j.GOp = j.res;
                j.ldgo = j.nc;
            } else {
                j.GOp = j.GO + (size_t)(j.n0 * p->O * L + j.c0) * csz;
                j.ldgo = L;
            }
            int64_t na = (j.im2col ? p->G * p->Cg * nseg : 0) + (p->span ? p->O * nseg : 0);
            rc = cv_phase(&j, CV_IM2COL, na, (p->G * p->Kg + p->O) * j.nc, NN_BLOCK_GRAIN);
            if (!rc && gw_n) {
                cv_tiles(&j, p->Og, p->Kg);
                rc = cv_phase(&j, CV_GEMM_WGRAD, p->G * j.mt * j.nt, p->G * j.mt * j.nt, 1);
            }
            if (!rc && gi_n) {
                cv_tiles(&j, p->Kg, j.nc);
                rc = cv_phase(&j, CV_GEMM_DGRAD, p->G * j.mt * j.nt, p->G * j.mt * j.nt, 1);
                if (!rc && (p->span || !p->pointwise))
                    rc = cv_phase(&j, CV_COL2IM, p->G * p->Cg * nseg, p->G * p->Kg * j.nc, NN_BLOCK_GRAIN);
            }
        }
    }
    if (!rc && p->mask[0] && p->pk_gi)
        rc = nn_unpack(ex, p->ct, &ex->v[p->vgi], j.GI);
    if (!rc && p->mask[1] && p->pk_gw)
        rc = nn_unpack(ex, p->ct, &ex->v[p->vgw], j.GW);
    if (!rc && p->mask[2])
        nn_unpack_rows(CT_F64, &ex->v[p->vgb], j.gb, 0, nn_rows(&ex->v[p->vgb]));
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
    if (p->KH < 1 || p->KW < 1)
        return NN_PARAM("%s: the kernel size must be greater than zero, got %lld x %lld", api, (long long)p->KH,
                        (long long)p->KW);
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
    p->vgo = p->vgi = p->vgw = p->vgb = -1;
    cv_plan(ex, p, false);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnConvolution(void *workspace, const uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return nn_launch("aclnnConvolution", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ convolution backward */

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
    const nn_tensor_t *outs[3] = {gi, gw, gb};
    static const char *const on[3] = {"gradInput", "gradWeight", "gradBias"};
    if ((rc = nn_output_mask3(api, mk, outs, on)))
        return rc;
    if (cubeMathType < 0 || cubeMathType > 4)
        return NN_PARAM("%s: cubeMathType must be 0..4, got %d", api, cubeMathType);
    for (int i = 0; i < 3; i++) {
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
    p->vy = p->vb = -1;
    cv_plan(ex, p, true);
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
    return nn_view_contiguous(g) && nn_view_contiguous(gi) && nn_view_contiguous(ix);
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

static NN_CLONES void
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

static NN_CLONES void
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

/* one output of a window at (ih0, iw0) of a plane, taps in PyTorch's order (row by row), padding
 * skipped: the first maximum, a NaN wins and the first NaN stays (the one rule of every path; the
 * vectors of mp_take8 compare the same way) */
#define MP_ONE(T)                                                                                  \
    static inline void mp_one_##T(const T *restrict xp, const mp_params_t *p, int64_t ih0, int64_t iw0, \
                                  T *restrict y, int64_t *restrict idx)                            \
    {                                                                                              \
        T m = -INFINITY;                                                                           \
        int64_t mi = -1;                                                                           \
        for (int64_t a = 0; a < p->kh; a++) {                                                      \
            int64_t ih = ih0 + a * p->dh;                                                          \
            if (ih < 0 || ih >= p->H)                                                              \
                continue;                                                                          \
            for (int64_t b = 0; b < p->kw; b++) {                                                  \
                int64_t iw = iw0 + b * p->dw;                                                      \
                if (iw < 0 || iw >= p->W)                                                          \
                    continue;                                                                      \
                T v = xp[ih * p->W + iw];                                                          \
                if (mi < 0 || (!(v <= m) && m == m)) {                                             \
                    m = v;                                                                         \
                    mi = ih * p->W + iw;                                                           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        *y = m;                                                                                    \
        *idx = mi;                                                                                 \
    }
MP_ONE(float)
MP_ONE(double)
#define mp_one_f32 mp_one_float

/* one output row of any window (kh x kw, strides, padding, dilation) on a float32 plane: the
 * outputs whose taps all lie inside the row's columns eight at a time (a vector per tap, the same
 * comparisons as mp_one_f32), the others one by one */
static NN_CLONES void mp_row_f32(const float *restrict xp, const mp_params_t *p, int64_t oh, float *restrict yrow,
                                 int64_t *restrict irow)
{
    const int64_t W = p->W, OW = p->OW, sw = p->sw, pw = p->pw, span = (p->kw - 1) * p->dw;
    int64_t ih0 = oh * p->sh - p->ph;
    int64_t lo = (pw + sw - 1) / sw;   /* the first output whose first tap is column >= 0 */
    int64_t hi = W - 1 - span + pw >= 0 ? (W - 1 - span + pw) / sw + 1 : 0;   /* past the last inside */
    if (hi > OW)
        hi = OW;
    if (lo > hi)
        lo = hi;
    int64_t ow = 0;
    for (; ow < lo; ow++)
        mp_one_f32(xp, p, ih0, ow * sw - pw, yrow + ow, irow + ow);
    /* groups of eight; the last one may overlap the one before (recomputing identical windows) */
    for (; hi - lo >= 8 && ow < hi; ow += 8) {
        if (ow + 8 > hi)
            ow = hi - 8;
        mp_v8f m = {0};
        mp_v8i k = {0};
        bool first = true;
        for (int64_t a = 0; a < p->kh; a++) {
            int64_t ih = ih0 + a * p->dh;
            if (ih < 0 || ih >= p->H)
                continue;
            const float *row = xp + ih * W;
            for (int64_t b = 0; b < p->kw; b++) {
                int64_t c0 = ow * sw - pw + b * p->dw;
                mp_v8f v;
                for (int q = 0; q < 8; q++)
                    v[q] = row[c0 + q * sw];
                int32_t kv = (int32_t)(ih * W + c0);
                if (first) {
                    m = v;
                    k = (mp_v8i){kv, kv, kv, kv, kv, kv, kv, kv};
                    first = false;
                } else {
                    mp_take8(&m, &k, v, kv);
                }
            }
        }
        if (first) {   /* (no row of the window inside the input: none, as mp_one_f32 gives) */
            for (int q = 0; q < 8; q++)
                mp_one_f32(xp, p, ih0, (ow + q) * sw - pw, yrow + ow + q, irow + ow + q);
            continue;
        }
        mp_v8l kl = __builtin_convertvector(k, mp_v8l);
        int64_t st = sw;
        kl += (mp_v8l){0, st, 2 * st, 3 * st, 4 * st, 5 * st, 6 * st, 7 * st};
        memcpy(yrow + ow, &m, sizeof m);
        memcpy(irow + ow, &kl, sizeof kl);
    }
    for (; ow < OW; ow++)
        mp_one_f32(xp, p, ih0, ow * sw - pw, yrow + ow, irow + ow);
}

/* forward straight in the tensors' memory: float32 input and output and int64 indices, all
 * contiguous (2x2 / stride-2 windows inside the input: mp_row_2x2_f32; any other window:
 * mp_row_f32) */
static bool mp_fwd_direct(const nn_exec_t *ex, const mp_params_t *p)
{
    const nn_view_t *x = &ex->v[p->vx], *y = &ex->v[p->vy], *ix = &ex->v[p->vi];
    if (x->dtype != ACL_FLOAT || y->dtype != ACL_FLOAT || ix->dtype != ACL_INT64 || p->H * p->W > INT32_MAX)
        return false;
    return nn_view_contiguous(x) && nn_view_contiguous(y) && nn_view_contiguous(ix);
}

static bool mp_fwd_2x2(const mp_params_t *p)
{
    return p->kh == 2 && p->kw == 2 && p->sw == 2 && p->dh == 1 && p->dw == 1 && p->ph == 0 && p->pw == 0 &&
           2 * p->OW <= p->W && (p->OH - 1) * p->sh + 1 < p->H;
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
            bool two = mp_fwd_2x2(p);
            for (int64_t oh = 0; oh < p->OH; oh++) {
                int64_t ih0 = oh * p->sh;
                if (two)
                    mp_row_2x2_f32(xp + ih0 * p->W, xp + (ih0 + 1) * p->W, OW, ih0 * p->W, p->W, yp + oh * OW,
                                   ip + oh * OW);
                else
                    mp_row_f32(xp, p, oh, yp + oh * OW, ip + oh * OW);
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
                    for (int64_t ow = 0; ow < OW; ow++)
                        mp_one_double(plane, p, ih0, ow * p->sw - p->pw, vrow + ow, irow + ow);
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

static inline float xr_at(const nn_view_t *x, const loss_params_t *p, int64_t n, int64_t c)
{
    return ((const float *)x->data)[n * p->xs[0] + c];
}

/* log-sum-exp of a contiguous float32 row: its max (NaN if any is NaN or +inf; 0 for all -inf),
 * then the sum of exp(x - max) by op_norm.c's vectorized float exp (within 2 ulp of expf; lanes
 * summed in float per chunk, the chunks in double), as softmax computes it */
__attribute__((optimize("-O3"))) static double ce_row_lse(const float *restrict xr, int64_t C)
{
    float m = -INFINITY;
    bool nan = false;
    for (int64_t c = 0; c < C; c++) {
        nan |= xr[c] != xr[c];
        m = xr[c] > m ? xr[c] : m;
    }
    if (nan || m == INFINITY)   /* (PyTorch: log_softmax of a row holding +inf is NaN) */
        return NAN;
    if (m == -INFINITY)
        m = 0;
    return (double)m + log(nn_exp_sum_f32(xr, NULL, C, m));
}

/* log_prob of a contiguous float32 row: x - lse, rounded to float32 */
__attribute__((optimize("-O3"))) static void ce_row_logp(float *restrict lp, const float *restrict xr, int64_t C,
                                                          double lse)
{
    for (int64_t c = 0; c < C; c++)
        lp[c] = (float)((double)xr[c] - lse);
}

/* the gradient row of cross entropy (no weight, no smoothing): g exp(logp[c]) - g [c == target], each
 * in double and rounded to float32 as the general path does */
__attribute__((optimize("-O3"))) static void ce_row_grad(float *restrict o, const float *restrict lr, int64_t C,
                                                          int64_t tg, double g)
{
    for (int64_t c = 0; c < C; c++)
        o[c] = (float)(-(exp((double)lr[c]) * -g));
    o[tg] = (float)(-g - exp((double)lr[tg]) * -g);
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
        /* float32 rows [N, C] with contiguous classes (log_prob too, when asked for): the row read
         * straight from memory (no per-element conversion calls); same sums in double */
        bool fast = p->kind == 2 && x->dtype == ACL_FLOAT && p->S == 1 && p->xs[1] == 1 &&
                    (!lp || (lp->dtype == ACL_FLOAT && (lp->ndim < 2 || lp->stride[1] == 1)));
        for (int64_t r = 0; r < rows; r++) {
            int64_t n = r / p->S, s = r % p->S;
            int64_t tg = nn_get_i64(t->data + (n * p->ts[0] + s * p->ts[1]) * (int64_t)tsz, t->dtype);
            double l = 0;
            if (fast) {
                const float *xr = (const float *)x->data + n * p->xs[0];
                lse[r] = ce_row_lse(xr, p->C);
                if (lp)
                    ce_row_logp((float *)lp->data + (lp->ndim < 2 ? 0 : n * lp->stride[0]), xr, p->C, lse[r]);
            }
            if (fast && tg != p->ignore) {
                double nll = -tw_at(ex, p, tg) * ((double)xr_at(x, p, n, tg) - lse[r]);
                double smooth = 0;
                if (p->smoothing > 0) {
                    const float *xr = (const float *)x->data + n * p->xs[0];
                    for (int64_t c = 0; c < p->C; c++)
                        smooth -= tw_at(ex, p, c) * ((double)xr[c] - lse[r]);
                }
                l = (1 - p->smoothing) * nll + p->smoothing / (double)p->C * smooth;
            } else if (fast) {
                /* an ignored target: loss 0 */
            } else if (p->kind == 2) {   /* log-softmax of the row */
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
    /* cross entropy's gradient from float32 log_prob rows [N, C] into float32 rows, classes contiguous */
    bool bfast = p->kind == 3 && p->vw < 0 && p->smoothing == 0 && p->S == 1 && x->dtype == ACL_FLOAT &&
                 o->dtype == ACL_FLOAT && p->xs[1] == 1 && p->oxs[1] == 1;
    /* NLL's gradient is zero but at each row's target: a contiguous out is zeroed at once (all-zero
     * bytes are 0.0 in every float dtype) and only the target entries are written */
    bool nfast = p->kind == 1 && nn_view_contiguous(o);
    if (nfast)
        memset(o->data, 0, (size_t)o->numel * osz);
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / p->S, s = r % p->S;
        int64_t tg = nn_get_i64(t->data + (n * p->ts[0] + s * p->ts[1]) * (int64_t)tsz, t->dtype);
        double gr = p->reduction == RED_NONE
                        ? nn_get_f64(g->data + (n * p->gs[0] + s * p->gs[1]) * (int64_t)gsz, g->dtype)
                        : nn_get_f64(g->data, g->dtype);
        if (p->reduction == RED_MEAN)
            gr /= denom;
        if (bfast) {   /* no weight, no smoothing: g (exp(logp) - [c == target]) straight into out */
            const float *lr = (const float *)x->data + n * p->xs[0];
            float *orow = (float *)o->data + n * p->oxs[0];
            if (tg == p->ignore)
                memset(orow, 0, (size_t)p->C * sizeof(float));
            else
                ce_row_grad(orow, lr, p->C, tg, gr);
            continue;
        }
        if (nfast) {
            if (tg != p->ignore) {
                double v = -tw_at(ex, p, tg) * gr;
                nn_store(CT_F64, o->data + (n * p->oxs[0] + tg * p->oxs[1] + s * p->oxs[2]) * (int64_t)osz, 1,
                         o->dtype, &v, 1);
            }
            continue;
        }
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
