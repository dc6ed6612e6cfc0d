/* canna simulator op library: fused attention, aclnnFlashAttentionScore and its gradient
 * aclnnFlashAttentionScoreGrad (prototypes and semantics from hiascend.com's aclnn pages of the
 * same names, CANN 8.x), plus aclnnLogicalNot (hicann/ops-math math/logical_not), which turns a
 * framework's "keep" mask into aclnn's "masked out" convention.
 *
 * Forward (per head, B*N1 of them):  S = scale * (Q K^T + pse);  S[i, j] = -inf where the mask or
 * the sparse mode excludes (i, j);  P = softmax(S) per row;  attentionOut = (P ∘ Z / keepProb) V
 * with Z the dropout mask's bits.  softmaxMax / softmaxSum are each row's max of S and the sum of
 * exp(S - max) (8 equal copies in the last dim, CANN's [B, N1, Sq, 8]).
 * The forward works flash-attention style (one tile of query rows at a time against tiles of keys,
 * running max and sum, the score matrix is never materialised); the backward recomputes P from the
 * saved statistics tile by tile (dV = Pd^T dO, dP = dO V^T, dS = P ∘ (dP ∘ Z/keepProb - rowsum(dO ∘ O)),
 * dQ = scale dS K, dK = scale dS^T Q, dpse = scale dS).  Matrix products are single-threaded BLAS
 * GEMMs (op_blas.c) in float32 (float32 / float16 / bfloat16 operands) or float64; heads are spread
 * over the device's AI-core blocks (one block per head for the forward, per key/value head for the
 * backward, so that the key and value gradients of a GQA group have one writer).
 * README.md next to this file lists what the simulator accepts beyond CANN's documented shapes. */
#include "opsim.h"

#define FA_BR 64            /* query rows per tile */
#define FA_BC 128           /* keys per tile */
#define FA_INF_TOK ((int64_t)1 << 40)

enum { FA_BSH = 0, FA_SBH, FA_BSND, FA_BNSD };
static const char *const g_layouts[] = {"BSH", "SBH", "BSND", "BNSD"};

/* a Q/K/V-like operand as (b, n, s, d) strides in elements */
typedef struct fa_qkv {
    int32_t v;                  /* view index, -1 absent */
    int64_t sb, sn, ss, sd;
} fa_qkv_t;

/* a mask or pse operand broadcast to (b, n, i, j) (stride 0 along broadcast dims) */
typedef struct fa_bc {
    int32_t v;
    int64_t sb, sn, si, sj;
} fa_bc_t;

typedef struct fa_params {
    int ct, lay;
    int64_t B, N1, N2, Sq, Skv, D;
    double scale, keep;
    int64_t lo_off, hi_off;     /* allowed keys of row i: [i + lo_off, i + hi_off] */
    bool use_mask;              /* read attenMask (sparse modes 0 / 1) */
    bool use_drop;              /* keepProb < 1: read dropMask */
    fa_qkv_t q, k, v, dy, o, dq, dk, dv;
    fa_bc_t pse, mask, dpse;
    int32_t vdrop, vmax, vsum;  /* views */
    bool grad, want_dpse;
} fa_params_t;

/* ------------------------------------------------------------------ shapes */

static aclnnStatus fa_layout(const char *api, const char *lay, int *out)
{
    if (!lay)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: inputLayout must not be NULL", api);
    for (int i = 0; i < 4; i++)
        if (!strcmp(lay, g_layouts[i])) {
            *out = i;
            return ACLNN_SUCCESS;
        }
    return NN_PARAM("%s: inputLayout \"%.16s\" is not supported (the simulator takes \"BSH\", \"SBH\", \"BSND\" or "
                    "\"BNSD\")", api, lay);
}

/* (B, N, S, D) of q/k/v in layout `lay`; for BSH / SBH, N comes from D (given) or headNum (query) */
static aclnnStatus fa_dims(const char *api, const char *name, const nn_tensor_t *t, int lay, int64_t heads,
                           int64_t dgiven, int64_t out[4], fa_qkv_t *st)
{
    int32_t want = lay <= FA_SBH ? 3 : 4;
    if (t->ndim != want)
        return NN_PARAM("%s: %s must be %d-D for inputLayout \"%s\", got shape %s", api, name, want, g_layouts[lay],
                        NN_SHAPE(t));
    const int64_t *s = t->shape;
    if (lay <= FA_SBH) {
        int64_t b = lay == FA_BSH ? s[0] : s[1], sq = lay == FA_BSH ? s[1] : s[0], h = s[2];
        int64_t n, d;
        if (dgiven > 0) {
            d = dgiven;
            if (h % d)
                return NN_PARAM("%s: %s's hidden size %lld is not a multiple of the head dim %lld (query's H / "
                                "headNum)", api, name, (long long)h, (long long)d);
            n = h / d;
        } else {
            if (h % heads)
                return NN_PARAM("%s: query's hidden size %lld is not a multiple of headNum %lld", api, (long long)h,
                                (long long)heads);
            n = heads;
            d = h / heads;
        }
        out[0] = b, out[1] = n, out[2] = sq, out[3] = d;
        int64_t sh = t->stride[2];
        st->sb = lay == FA_BSH ? t->stride[0] : t->stride[1];
        st->ss = lay == FA_BSH ? t->stride[1] : t->stride[0];
        st->sn = d * sh;
        st->sd = sh;
    } else if (lay == FA_BSND) {
        out[0] = s[0], out[1] = s[2], out[2] = s[1], out[3] = s[3];
        st->sb = t->stride[0], st->sn = t->stride[2], st->ss = t->stride[1], st->sd = t->stride[3];
    } else {
        out[0] = s[0], out[1] = s[1], out[2] = s[2], out[3] = s[3];
        st->sb = t->stride[0], st->sn = t->stride[1], st->ss = t->stride[2], st->sd = t->stride[3];
    }
    return ACLNN_SUCCESS;
}

/* a mask / pse of up to 4 dims, right-aligned against [B, N1, Sq, Skv]; each dim full or 1 */
static aclnnStatus fa_bcast(const char *api, const char *name, const nn_tensor_t *t, const int64_t full[4], fa_bc_t *b)
{
    if (t->ndim < 2 || t->ndim > 4)
        return NN_PARAM("%s: %s must have 2 to 4 dims ([Sq, Skv] to [B, N1, Sq, Skv]), got shape %s", api, name,
                        NN_SHAPE(t));
    int64_t st[4] = {0, 0, 0, 0};
    int32_t off = 4 - t->ndim;
    for (int32_t d = 0; d < t->ndim; d++) {
        int64_t n = t->shape[d], want = full[off + d];
        if (n != want && n != 1) {
            char s2[160];
            return NN_PARAM("%s: %s has shape %s, which does not broadcast to [B, N1, Sq, Skv] = %s", api, name,
                            NN_SHAPE(t), nn_shape_str(s2, sizeof s2, full, 4));
        }
        st[off + d] = n == 1 ? 0 : t->stride[d];
    }
    b->sb = st[0], b->sn = st[1], b->si = st[2], b->sj = st[3];
    return ACLNN_SUCCESS;
}

static aclnnStatus fa_same(const char *api, const char *an, const nn_tensor_t *a, const char *bn, const nn_tensor_t *b,
                           bool dtype)
{
    if (!nn_same_shape(a, b->shape, b->ndim)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: %s has shape %s but %s has shape %s (they must match)", api, an,
                        nn_shape_str(s1, sizeof s1, a->shape, a->ndim), bn,
                        nn_shape_str(s2, sizeof s2, b->shape, b->ndim));
    }
    if (dtype && a->dtype != b->dtype)
        return NN_PARAM("%s: %s has dtype %s but %s has dtype %s (they must match)", api, an, nn_dtype_name(a->dtype),
                        bn, nn_dtype_name(b->dtype));
    return ACLNN_SUCCESS;
}

static int64_t clamp_tok(int64_t t) { return t > FA_INF_TOK ? FA_INF_TOK : t < -FA_INF_TOK ? -FA_INF_TOK : t; }

/* Everything both phase-1 functions check; fills p and adds the input views to ex in parameter order. */
static aclnnStatus fa_common(const char *api, fa_params_t *p, const nn_tensor_t *q, const nn_tensor_t *k,
                             const nn_tensor_t *v, const nn_tensor_t *dy, const nn_tensor_t *pse,
                             const nn_tensor_t *drop, const nn_tensor_t *pad, const nn_tensor_t *mask,
                             const nn_tensor_t *smax, const nn_tensor_t *ssum, const nn_tensor_t *attn_in,
                             const nn_intarray_t *prefix, double scale, double keep, int64_t pre, int64_t next,
                             int64_t heads, const char *layout, int64_t precise, int64_t sparse)
{
    aclnnStatus rc;
    int lay = 0;
    if ((rc = fa_layout(api, layout, &lay)))
        return rc;
    const nn_tensor_t *qkv[3] = {q, k, v};
    static const char *const qn[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++) {
        if (!nn_is_float(qkv[i]->dtype))
            return NN_PARAM("%s: %s has dtype %s (expected float16, bfloat16, float32 or float64)", api, qn[i],
                            nn_dtype_name(qkv[i]->dtype));
        if (qkv[i]->dtype != q->dtype)
            return NN_PARAM("%s: %s has dtype %s but query has dtype %s (they must match)", api, qn[i],
                            nn_dtype_name(qkv[i]->dtype), nn_dtype_name(q->dtype));
    }
    if (heads <= 0)
        return NN_PARAM("%s: headNum must be > 0, got %lld", api, (long long)heads);
    int64_t qd[4], kd[4], vd[4];
    if ((rc = fa_dims(api, "query", q, lay, heads, 0, qd, &p->q)))
        return rc;
    if (lay > FA_SBH && qd[1] != heads)
        return NN_PARAM("%s: headNum is %lld but query has %lld heads (shape %s, inputLayout \"%s\")", api,
                        (long long)heads, (long long)qd[1], NN_SHAPE(q), g_layouts[lay]);
    if ((rc = fa_dims(api, "key", k, lay, heads, qd[3], kd, &p->k)) ||
        (rc = fa_dims(api, "value", v, lay, heads, qd[3], vd, &p->v)))
        return rc;
    if (kd[0] != qd[0] || vd[0] != qd[0])
        return NN_PARAM("%s: query, key and value have batch sizes %lld, %lld, %lld (they must match)", api,
                        (long long)qd[0], (long long)kd[0], (long long)vd[0]);
    if (kd[3] != qd[3] || vd[3] != qd[3])
        return NN_PARAM("%s: query, key and value have head dims %lld, %lld, %lld (they must match)", api,
                        (long long)qd[3], (long long)kd[3], (long long)vd[3]);
    if (kd[1] != vd[1] || kd[2] != vd[2])
        return NN_PARAM("%s: key has shape %s but value has shape %s (they must match)", api, NN_SHAPE(k), NN_SHAPE(v));
    if (kd[1] <= 0 || qd[1] % kd[1])
        return NN_PARAM("%s: query has %lld heads and key / value %lld: the query heads must be a multiple of the "
                        "key / value heads (grouped-query attention)", api, (long long)qd[1], (long long)kd[1]);
    p->B = qd[0], p->N1 = qd[1], p->N2 = kd[1], p->Sq = qd[2], p->Skv = kd[2], p->D = qd[3];
    p->ct = q->dtype == ACL_DOUBLE ? CT_F64 : CT_F32;
    if (!isfinite(scale))
        return NN_PARAM("%s: scaleValue must be finite, got %g", api, scale);
    if (!(keep > 0 && keep <= 1))
        return NN_PARAM("%s: keepProb must be in (0, 1], got %g", api, keep);
    p->scale = scale;
    p->keep = keep;
    if (precise < 0 || precise > 5)
        return NN_PARAM("%s: innerPrecise must be 0..5, got %lld", api, (long long)precise);
    if (pad)
        return NN_PARAM("%s: paddingMask is reserved by CANN and must be NULL", api);
    if (prefix)
        return NN_PARAM("%s: prefix is for sparseMode 5 / 6, which the simulator does not support (pass NULL)", api);
    int64_t full[4] = {p->B, p->N1, p->Sq, p->Skv};
    if (pse) {
        if (!nn_is_float(pse->dtype))
            return NN_PARAM("%s: pse has dtype %s (expected a floating dtype)", api, nn_dtype_name(pse->dtype));
        if ((rc = fa_bcast(api, "pse", pse, full, &p->pse)))
            return rc;
    }
    pre = clamp_tok(pre);
    next = clamp_tok(next);
    int64_t diag = p->Skv - p->Sq;
    p->use_mask = false;
    switch (sparse) {
    case 0:   /* defaultMask: the mask and the band [i - preTokens, i + nextTokens]; no mask: everything */
        p->use_mask = mask != NULL;
        p->lo_off = mask ? -pre : -FA_INF_TOK;
        p->hi_off = mask ? next : FA_INF_TOK;
        break;
    case 1:   /* allMask */
        if (!mask)
            return NN_PARAM("%s: sparseMode 1 (allMask) needs attenMask", api);
        p->use_mask = true;
        p->lo_off = -FA_INF_TOK, p->hi_off = FA_INF_TOK;
        break;
    case 2:   /* leftUpCausal */
        p->lo_off = -FA_INF_TOK, p->hi_off = 0;
        break;
    case 3:   /* rightDownCausal */
        p->lo_off = -FA_INF_TOK, p->hi_off = diag;
        break;
    case 4:   /* band, from the bottom-right diagonal */
        p->lo_off = diag - pre, p->hi_off = diag + next;
        break;
    default:
        return NN_PARAM("%s: sparseMode %lld is not supported (the simulator takes 0 defaultMask, 1 allMask, "
                        "2 leftUpCausal, 3 rightDownCausal, 4 band)", api, (long long)sparse);
    }
    if (mask) {
        if (mask->dtype != ACL_BOOL && mask->dtype != ACL_UINT8)
            return NN_PARAM("%s: attenMask has dtype %s (expected bool or uint8; 1 = masked out)", api,
                            nn_dtype_name(mask->dtype));
        if (sparse >= 2) {
            if (mask->ndim != 2 || mask->shape[0] != 2048 || mask->shape[1] != 2048)
                return NN_PARAM("%s: sparseMode %lld takes the compressed [2048, 2048] attenMask, got shape %s", api,
                                (long long)sparse, NN_SHAPE(mask));
        } else if ((rc = fa_bcast(api, "attenMask", mask, full, &p->mask))) {
            return rc;
        }
    }
    if (keep < 1) {
        if (!drop)
            return NN_PARAM("%s: keepProb is %g but dropMask is NULL (one bit per score is needed)", api, keep);
        int64_t bits = p->B * p->N1 * p->Sq * p->Skv;
        if (drop->dtype != ACL_UINT8)
            return NN_PARAM("%s: dropMask has dtype %s (expected uint8, one bit per score)", api,
                            nn_dtype_name(drop->dtype));
        if (drop->numel * 8 < bits)
            return NN_PARAM("%s: dropMask has %lld bytes, need %lld (one bit per score of [B, N1, Sq, Skv])", api,
                            (long long)drop->numel, (long long)((bits + 7) / 8));
        bool contig = true;
        int64_t e = 1;
        for (int32_t d = drop->ndim - 1; d >= 0; d--) {
            if (drop->shape[d] != 1 && drop->stride[d] != e)
                contig = false;
            e *= drop->shape[d];
        }
        if (!contig)
            return NN_PARAM("%s: dropMask must be contiguous", api);
    }
    int64_t tmp[4];
    if (dy && ((rc = fa_same(api, "dy", dy, "query", q, true)) ||
               (rc = fa_dims(api, "dy", dy, lay, heads, p->D, tmp, &p->dy))))
        return rc;
    if (attn_in && ((rc = fa_same(api, "attentionIn", attn_in, "query", q, true)) ||
                    (rc = fa_dims(api, "attentionIn", attn_in, lay, heads, p->D, tmp, &p->o))))
        return rc;
    const nn_tensor_t *stats[2] = {smax, ssum};
    static const char *const sn[2] = {"softmaxMax", "softmaxSum"};
    for (int i = 0; i < 2; i++) {
        const nn_tensor_t *s = stats[i];
        if (!s)
            continue;
        int64_t want[4] = {p->B, p->N1, p->Sq, 8};
        if (!nn_same_shape(s, want, 4)) {
            char s2[160];
            return NN_PARAM("%s: %s has shape %s, expected [B, N1, Sq, 8] = %s", api, sn[i], NN_SHAPE(s),
                            nn_shape_str(s2, sizeof s2, want, 4));
        }
        if (s->dtype != ACL_FLOAT && !(s->dtype == ACL_DOUBLE && q->dtype == ACL_DOUBLE))
            return NN_PARAM("%s: %s has dtype %s (expected float32%s)", api, sn[i], nn_dtype_name(s->dtype),
                            q->dtype == ACL_DOUBLE ? " or float64" : "");
    }
    p->lay = lay;
    p->mask.v = p->pse.v = p->dpse.v = p->vdrop = p->vmax = p->vsum = -1;
    p->q.v = p->k.v = p->v.v = p->dy.v = p->o.v = p->dq.v = p->dk.v = p->dv.v = -1;
    p->use_drop = keep < 1;
    return ACLNN_SUCCESS;
}

/* an output laid out like query / key / value (same shape, its own strides) */
static void fa_out(const fa_params_t *p, fa_qkv_t *dst, const nn_tensor_t *t, int32_t vi)
{
    int64_t tmp[4];
    (void)fa_dims("", "", t, p->lay, p->N1, p->D, tmp, dst);   /* checked already (same shape) */
    dst->v = vi;
}

/* every present input tensor is a view, in parameter order (aclSetInputTensorAddr numbers them) */
static void fa_add_inputs(nn_exec_t *ex, fa_params_t *p, const nn_tensor_t *q, const nn_tensor_t *k,
                          const nn_tensor_t *v, const nn_tensor_t *dy, const nn_tensor_t *pse, const nn_tensor_t *drop,
                          const nn_tensor_t *mask)
{
    p->q.v = nn_exec_add(ex, q, "query", false);
    p->k.v = nn_exec_add(ex, k, "key", false);
    p->v.v = nn_exec_add(ex, v, "value", false);
    if (dy)
        p->dy.v = nn_exec_add(ex, dy, "dy", false);
    p->pse.v = nn_exec_add(ex, pse, "pse", false);
    p->vdrop = nn_exec_add(ex, drop, "dropMask", false);
    int32_t vm = nn_exec_add(ex, mask, "attenMask", false);
    p->mask.v = p->use_mask ? vm : -1;
}

static void fa_finish_cost(nn_exec_t *ex, const fa_params_t *p, double factor)
{
    double flops = factor * 4.0 * (double)p->B * (double)p->N1 * (double)p->Sq * (double)p->Skv * (double)p->D;
    ex->cost_ns = (uint64_t)(flops / 8.0);
    uint64_t units = (uint64_t)(p->B * (p->grad ? p->N2 : p->N1));
    ex->cores = (uint32_t)(units ? units : 1);
}

/* ------------------------------------------------------------------ kernel helpers */

typedef struct fa_job {
    nn_exec_t *ex;
    fa_params_t *p;
    int64_t units, per;
    double *dpse_full;          /* backward with a broadcast pse: the full [B, N1, Sq, Skv] gradient */
    aclError err;
} fa_job_t;

static inline char *fa_ptr(const nn_view_t *v, int64_t off) { return v->data + off * (int64_t)nn_dtype_size(v->dtype); }

/* rows [0, S) of head (b, n) of operand o as compute type ct: the data itself when it already is
 * (unit stride along d), else packed into buf; *ld is the row stride */
static const void *fa_rows(const nn_exec_t *ex, const fa_qkv_t *o, int ct, int64_t b, int64_t n, int64_t S, int64_t D,
                           void *buf, int64_t *ld)
{
    const nn_view_t *v = &ex->v[o->v];
    char *base = fa_ptr(v, b * o->sb + n * o->sn);
    bool direct = o->sd == 1 && (v->dtype == (ct == CT_F64 ? ACL_DOUBLE : ACL_FLOAT));
    if (direct) {
        *ld = o->ss;
        return base;
    }
    size_t esz = nn_dtype_size(v->dtype), csz = nn_ct_size(ct);
    for (int64_t s = 0; s < S; s++)
        nn_load(ct, (char *)buf + (size_t)(s * D) * csz, base + s * o->ss * (int64_t)esz, o->sd, v->dtype, D);
    *ld = D;
    return buf;
}

static void fa_store_rows(const nn_exec_t *ex, const fa_qkv_t *o, int ct, int64_t b, int64_t n, int64_t s0, int64_t s1,
                          const void *src, int64_t ld, int64_t D)
{
    const nn_view_t *v = &ex->v[o->v];
    size_t csz = nn_ct_size(ct);
    for (int64_t s = s0; s < s1; s++)
        nn_store(ct, fa_ptr(v, b * o->sb + n * o->sn + s * o->ss), o->sd, v->dtype,
                 (const char *)src + (size_t)((s - s0) * ld) * csz, D);
}

#define FA_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FA_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline bool fa_drop_bit(const uint8_t *m, int64_t idx) { return (m[idx >> 3] >> (idx & 7)) & 1; }

/* the kernel body, once per compute type */
#define FA_KERNELS(T, SUF, GEMM, EXP, EXPROW)                                                                            \
    /* S tile rows [i0, i1) x keys [j0, j1): scaled scores with pse and masks applied (-inf when excluded) */ \
    static void fa_scores_##SUF(const nn_exec_t *ex, const fa_params_t *p, int64_t b, int64_t n,          \
                                const T *q, int64_t ldq, const T *k, int64_t ldk, int64_t i0, int64_t i1,  \
                                int64_t j0, int64_t j1, T *s, int64_t lds, T *rowbuf)                       \
    {                                                                                                       \
        int64_t br = i1 - i0, bc = j1 - j0;                                                                 \
        bool pse = p->pse.v >= 0;                                                                           \
        GEMM(false, true, br, bc, p->D, pse ? (T)1 : (T)p->scale, q + i0 * ldq, ldq, k + j0 * ldk, ldk,     \
             (T)0, s, lds);                                                                                 \
        const nn_view_t *pv = pse ? &ex->v[p->pse.v] : NULL;                                               \
        const nn_view_t *mv = p->mask.v >= 0 ? &ex->v[p->mask.v] : NULL;                                   \
        for (int64_t r = 0; r < br; r++) {                                                                  \
            int64_t i = i0 + r;                                                                             \
            T *row = s + r * lds;                                                                           \
            if (pv) {                                                                                       \
                nn_load(SUF == 0 ? CT_F32 : CT_F64, rowbuf,                                                 \
                        fa_ptr(pv, b * p->pse.sb + n * p->pse.sn + i * p->pse.si + j0 * p->pse.sj),       \
                        p->pse.sj, pv->dtype, bc);                                                          \
                for (int64_t c = 0; c < bc; c++)                                                            \
                    row[c] = (T)p->scale * (row[c] + rowbuf[c]);                                            \
            }                                                                                               \
            int64_t lo = i + p->lo_off, hi = i + p->hi_off;                                                 \
            for (int64_t c = 0; c < bc; c++) {                                                              \
                int64_t j = j0 + c;                                                                         \
                if (j < lo || j > hi)                                                                       \
                    row[c] = -(T)INFINITY;                                                                  \
            }                                                                                               \
            if (mv) {                                                                                       \
                const uint8_t *m = (const uint8_t *)mv->data + b * p->mask.sb + n * p->mask.sn +           \
                                   i * p->mask.si + j0 * p->mask.sj;                                        \
                for (int64_t c = 0; c < bc; c++)                                                            \
                    if (m[c * p->mask.sj])                                                                  \
                        row[c] = -(T)INFINITY;                                                              \
            }                                                                                               \
        }                                                                                                   \
    }                                                                                                       \
                                                                                                            \
    /* the keys row block [i0, i1) may attend: [jlo, jhi) */                                                \
    static void fa_krange_##SUF(const fa_params_t *p, int64_t i0, int64_t i1, int64_t *jlo, int64_t *jhi)   \
    {                                                                                                       \
        int64_t lo = i0 + p->lo_off, hi = i1 - 1 + p->hi_off + 1;                                           \
        *jlo = FA_MAX(lo, 0);                                                                               \
        *jhi = FA_MIN(hi, p->Skv);                                                                          \
        if (*jhi < *jlo)                                                                                    \
            *jhi = *jlo;                                                                                    \
    }                                                                                                       \
                                                                                                            \
    static aclError fa_fwd_head_##SUF(nn_exec_t *ex, fa_params_t *p, int64_t b, int64_t n, T *scr)         \
    {                                                                                                       \
        int64_t D = p->D, Sq = p->Sq, Skv = p->Skv, n2 = n / (p->N1 / p->N2);                               \
        T *qb = scr, *kb = qb + Sq * D, *vb = kb + Skv * D, *s = vb + Skv * D, *acc = s + FA_BR * FA_BC;     \
        T *m = acc + FA_BR * D, *l = m + FA_BR, *rowbuf = l + FA_BR, *st8 = rowbuf + FA_BC;                 \
        int64_t ldq, ldk, ldv;                                                                              \
        int ct = SUF == 0 ? CT_F32 : CT_F64;                                                                \
        const T *q = fa_rows(ex, &p->q, ct, b, n, Sq, D, qb, &ldq);                                         \
        const T *k = fa_rows(ex, &p->k, ct, b, n2, Skv, D, kb, &ldk);                                       \
        const T *v = fa_rows(ex, &p->v, ct, b, n2, Skv, D, vb, &ldv);                                       \
        const uint8_t *drop = p->use_drop ? (const uint8_t *)ex->v[p->vdrop].data : NULL;                \
        int64_t dbase = (b * p->N1 + n) * Sq * Skv;                                                         \
        for (int64_t i0 = 0; i0 < Sq; i0 += FA_BR) {                                                        \
            int64_t i1 = FA_MIN(i0 + FA_BR, Sq), br = i1 - i0, jlo, jhi;                                    \
            for (int64_t r = 0; r < br; r++)                                                                \
                m[r] = -(T)INFINITY, l[r] = 0;                                                              \
            memset(acc, 0, sizeof(T) * (size_t)(br * D));                                                   \
            fa_krange_##SUF(p, i0, i1, &jlo, &jhi);                                                         \
            for (int64_t j0 = jlo; j0 < jhi; j0 += FA_BC) {                                                 \
                int64_t j1 = FA_MIN(j0 + FA_BC, jhi), bc = j1 - j0;                                         \
                fa_scores_##SUF(ex, p, b, n, q, ldq, k, ldk, i0, i1, j0, j1, s, FA_BC, rowbuf);             \
                for (int64_t r = 0; r < br; r++) {                                                          \
                    T *row = s + r * FA_BC, mx = m[r];                                                      \
                    for (int64_t c = 0; c < bc; c++)                                                        \
                        mx = row[c] > mx ? row[c] : mx;                                                     \
                    T corr = mx == -(T)INFINITY ? (T)1 : EXP(m[r] - mx);                       \
                    if (m[r] == -(T)INFINITY)                                                               \
                        corr = 0;                                                                           \
                    T sum = 0;                                                                              \
                    if (mx == -(T)INFINITY) {                                                               \
                        memset(row, 0, sizeof(T) * (size_t)bc);                                             \
                    } else {                                                                                \
                        sum = (T)EXPROW(row, rowbuf, bc, mx);                                               \
                        memcpy(row, rowbuf, sizeof(T) * (size_t)bc);                                        \
                    }                                                                                       \
                    if (drop) {                                                                             \
                        int64_t idx = dbase + (i0 + r) * Skv + j0;                                          \
                        T ik = (T)(1.0 / p->keep);                                                          \
                        for (int64_t c = 0; c < bc; c++)                                                    \
                            row[c] = fa_drop_bit(drop, idx + c) ? row[c] * ik : (T)0;                       \
                    }                                                                                       \
                    l[r] = l[r] * corr + sum;                                                               \
                    m[r] = mx;                                                                              \
                    if (corr != (T)1) {                                                                     \
                        T *a = acc + r * D;                                                                 \
                        for (int64_t d = 0; d < D; d++)                                                     \
                            a[d] *= corr;                                                                   \
                    }                                                                                       \
                }                                                                                           \
                GEMM(false, false, br, D, bc, (T)1, s, FA_BC, v + j0 * ldv, ldv, (T)1, acc, D);             \
            }                                                                                               \
            for (int64_t r = 0; r < br; r++) {   /* a row with no allowed key gives 0, as PyTorch */          \
                T inv = l[r] > 0 ? (T)1 / l[r] : (T)0;                                                      \
                T *a = acc + r * D;                                                                         \
                for (int64_t d = 0; d < D; d++)                                                             \
                    a[d] *= inv;                                                                            \
            }                                                                                               \
            fa_store_rows(ex, &p->o, ct, b, n, i0, i1, acc, D, D);                                             \
            if (p->vmax >= 0 || p->vsum >= 0) {                                                             \
                int32_t vs[2] = {p->vmax, p->vsum};                                                         \
                for (int w = 0; w < 2; w++) {                                                               \
                    if (vs[w] < 0)                                                                          \
                        continue;                                                                           \
                    const nn_view_t *sv = &ex->v[vs[w]];                                                    \
                    for (int64_t r = 0; r < br; r++) {                                                      \
                        T x = w == 0 ? m[r] : l[r];                                                         \
                        for (int c = 0; c < 8; c++)                                                         \
                            st8[c] = x;                                                                     \
                        nn_store(ct, fa_ptr(sv, b * sv->stride[0] + n * sv->stride[1] + (i0 + r) * sv->stride[2]), \
                                 sv->stride[3], sv->dtype, st8, 8);                                         \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
        return ACL_SUCCESS;                                                                                 \
    }                                                                                                       \
                                                                                                            \
    static void fa_stat_##SUF(const nn_exec_t *ex, int32_t vi, int64_t b, int64_t n, int64_t Sq, T *dst)   \
    {                                                                                                       \
        const nn_view_t *sv = &ex->v[vi];                                                                   \
        for (int64_t i = 0; i < Sq; i++)                                                                    \
            nn_load(SUF == 0 ? CT_F32 : CT_F64, dst + i,                                                    \
                    fa_ptr(sv, b * sv->stride[0] + n * sv->stride[1] + i * sv->stride[2]), 1, sv->dtype, 1); \
    }                                                                                                       \
                                                                                                            \
    /* backward of the query heads of key/value head (b, n2) */                                             \
    static aclError fa_bwd_unit_##SUF(nn_exec_t *ex, fa_params_t *p, fa_job_t *j, int64_t b, int64_t n2,   \
                                      T *scr)                                                               \
    {                                                                                                       \
        int64_t D = p->D, Sq = p->Sq, Skv = p->Skv, G = p->N1 / p->N2;                                      \
        int ct = SUF == 0 ? CT_F32 : CT_F64;                                                                \
        T *kb = scr, *vb = kb + Skv * D, *qb = vb + Skv * D, *gb = qb + Sq * D, *ob = gb + Sq * D;         \
        T *dq = ob + Sq * D, *dk = dq + Sq * D, *dv = dk + Skv * D, *Di = dv + Skv * D, *mx = Di + Sq;      \
        T *ls = mx + Sq, *s = ls + Sq, *dp = s + FA_BR * FA_BC, *rowbuf = dp + FA_BR * FA_BC;              \
        int64_t ldk, ldv, ldq, ldg, ldo;                                                                    \
        const T *k = fa_rows(ex, &p->k, ct, b, n2, Skv, D, kb, &ldk);                                       \
        const T *v = fa_rows(ex, &p->v, ct, b, n2, Skv, D, vb, &ldv);                                       \
        memset(dk, 0, sizeof(T) * (size_t)(Skv * D));                                                       \
        memset(dv, 0, sizeof(T) * (size_t)(Skv * D));                                                       \
        const uint8_t *drop = p->use_drop ? (const uint8_t *)ex->v[p->vdrop].data : NULL;                \
        T ik = (T)(1.0 / p->keep), sc = (T)p->scale;                                                        \
        const nn_view_t *dpv = p->want_dpse ? &ex->v[p->dpse.v] : NULL;                                    \
        for (int64_t g = 0; g < G; g++) {                                                                   \
            int64_t n = n2 * G + g;                                                                         \
            const T *q = fa_rows(ex, &p->q, ct, b, n, Sq, D, qb, &ldq);                                     \
            const T *dy = fa_rows(ex, &p->dy, ct, b, n, Sq, D, gb, &ldg);                                   \
            const T *o = fa_rows(ex, &p->o, ct, b, n, Sq, D, ob, &ldo);                                     \
            for (int64_t i = 0; i < Sq; i++) {                                                              \
                T acc = 0;                                                                                  \
                for (int64_t d = 0; d < D; d++)                                                             \
                    acc += dy[i * ldg + d] * o[i * ldo + d];                                                \
                Di[i] = acc;                                                                                \
            }                                                                                               \
            fa_stat_##SUF(ex, p->vmax, b, n, Sq, mx);                                                       \
            fa_stat_##SUF(ex, p->vsum, b, n, Sq, ls);                                                       \
            memset(dq, 0, sizeof(T) * (size_t)(Sq * D));                                                    \
            int64_t dbase = (b * p->N1 + n) * Sq * Skv;                                                     \
            for (int64_t i0 = 0; i0 < Sq; i0 += FA_BR) {                                                    \
                int64_t i1 = FA_MIN(i0 + FA_BR, Sq), br = i1 - i0, jlo, jhi;                                \
                fa_krange_##SUF(p, i0, i1, &jlo, &jhi);                                                     \
                for (int64_t j0 = jlo; j0 < jhi; j0 += FA_BC) {                                             \
                    int64_t j1 = FA_MIN(j0 + FA_BC, jhi), bc = j1 - j0;                                     \
                    fa_scores_##SUF(ex, p, b, n, q, ldq, k, ldk, i0, i1, j0, j1, s, FA_BC, rowbuf);         \
                    /* P (undropped) in s; Pd = P o Z / keep in dp for dV */                                \
                    for (int64_t r = 0; r < br; r++) {                                                      \
                        T *row = s + r * FA_BC, m0 = mx[i0 + r], l0 = ls[i0 + r];                           \
                        T inv = l0 > 0 ? (T)1 / l0 : (T)0;                                                  \
                        if (inv == 0) {                                                                     \
                            memset(row, 0, sizeof(T) * (size_t)bc);                                         \
                        } else {                                                                            \
                            (void)EXPROW(row, rowbuf, bc, m0);                                              \
                            for (int64_t c = 0; c < bc; c++)                                                \
                                row[c] = rowbuf[c] * inv;                                                   \
                        }                                                                                   \
                        T *pd = dp + r * FA_BC;                                                             \
                        if (drop) {                                                                         \
                            int64_t idx = dbase + (i0 + r) * Skv + j0;                                      \
                            for (int64_t c = 0; c < bc; c++)                                                \
                                pd[c] = fa_drop_bit(drop, idx + c) ? row[c] * ik : (T)0;                    \
                        }                                                                                   \
                    }                                                                                       \
                    /* dV[j] += Pd^T dO */                                                                  \
                    GEMM(true, false, bc, D, br, (T)1, drop ? dp : s, FA_BC, dy + i0 * ldg, ldg, (T)1,       \
                         dv + j0 * D, D);                                                                   \
                    /* dP = dO V^T, then dS = P o (dP o Z / keep - Di) into dp */                          \
                    GEMM(false, true, br, bc, D, (T)1, dy + i0 * ldg, ldg, v + j0 * ldv, ldv, (T)0, dp,      \
                         FA_BC);                                                                            \
                    for (int64_t r = 0; r < br; r++) {                                                      \
                        T *row = s + r * FA_BC, *pd = dp + r * FA_BC, di = Di[i0 + r];                      \
                        int64_t idx = dbase + (i0 + r) * Skv + j0;                                          \
                        for (int64_t c = 0; c < bc; c++) {                                                  \
                            T g2 = drop ? (fa_drop_bit(drop, idx + c) ? pd[c] * ik : (T)0) : pd[c];         \
                            pd[c] = row[c] * (g2 - di);                                                     \
                        }                                                                                   \
                        if (dpv) {   /* dpse = scale dS: the full gradient, summed to pse's shape later */  \
                            double *dst = j->dpse_full + ((b * p->N1 + n) * Sq + i0 + r) * Skv + j0;        \
                            for (int64_t c = 0; c < bc; c++)                                                \
                                dst[c] = (double)(sc * pd[c]);                                              \
                        }                                                                                   \
                    }                                                                                       \
                    GEMM(false, false, br, D, bc, sc, dp, FA_BC, k + j0 * ldk, ldk, (T)1, dq + i0 * D, D);   \
                    GEMM(true, false, bc, D, br, sc, dp, FA_BC, q + i0 * ldq, ldq, (T)1, dk + j0 * D, D);    \
                }                                                                                           \
            }                                                                                               \
            fa_store_rows(ex, &p->dq, ct, b, n, 0, Sq, dq, D, D);                                              \
        }                                                                                                   \
        fa_store_rows(ex, &p->dk, ct, b, n2, 0, Skv, dk, D, D);                                                \
        fa_store_rows(ex, &p->dv, ct, b, n2, 0, Skv, dv, D, D);                                                \
        return ACL_SUCCESS;                                                                                 \
    }

/* o[c] = exp(x[c] - m) (exp(-inf) = 0), returning the sum; float through op_norm.c's vectorized exp */
static double fa_exprow_d(const double *x, double *o, int64_t n, double m)
{
    double s = 0;
    for (int64_t c = 0; c < n; c++)
        s += (o[c] = exp(x[c] - m));
    return s;
}

FA_KERNELS(float, 0, nn_sgemm, expf, nn_exp_sum_f32)
FA_KERNELS(double, 1, nn_dgemm, exp, fa_exprow_d)

static size_t fa_scratch(const fa_params_t *p)
{
    int64_t D = p->D, Sq = p->Sq, Skv = p->Skv;
    int64_t n = p->grad ? 2 * Skv * D + 3 * Sq * D + Sq * D + 2 * Skv * D + 3 * Sq + 2 * FA_BR * FA_BC + FA_BC
                        : Sq * D + 2 * Skv * D + FA_BR * FA_BC + FA_BR * D + 2 * FA_BR + FA_BC + 8;
    return (size_t)n * nn_ct_size(p->ct) + 64;
}

static aclError fa_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    fa_job_t *j = arg;
    fa_params_t *p = j->p;
    int64_t u0 = (int64_t)bi * j->per, u1 = FA_MIN(u0 + j->per, j->units);
    if (u0 >= u1)
        return ACL_SUCCESS;
    void *scr = malloc(fa_scratch(p));
    if (!scr)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", j->ex->api);
    int64_t per_b = p->grad ? p->N2 : p->N1;
    for (int64_t u = u0; u < u1; u++) {
        int64_t b = u / per_b, n = u % per_b;
        if (p->grad) {
            if (p->ct == CT_F64)
                fa_bwd_unit_1(j->ex, p, j, b, n, scr);
            else
                fa_bwd_unit_0(j->ex, p, j, b, n, scr);
        } else if (p->ct == CT_F64) {
            fa_fwd_head_1(j->ex, p, b, n, scr);
        } else {
            fa_fwd_head_0(j->ex, p, b, n, scr);
        }
    }
    free(scr);
    return ACL_SUCCESS;
}

static aclError fa_run(nn_exec_t *ex)
{
    fa_params_t *p = (fa_params_t *)ex->params;
    aclnnStatus rc = nn_blas_ready(ex->api);
    if (rc)
        return rc;
    fa_job_t j;
    memset(&j, 0, sizeof j);
    j.ex = ex;
    j.p = p;
    j.units = p->B * (p->grad ? p->N2 : p->N1);
    if (p->want_dpse) {
        j.dpse_full = calloc((size_t)(p->B * p->N1 * p->Sq * p->Skv) + 1, sizeof(double));
        if (!j.dpse_full)
            return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    }
    aclError err = ACL_SUCCESS;
    if (j.units > 0) {   /* no query rows or no keys still run: the outputs are zeros then */
        double work = 4.0 * (double)p->Sq * (double)p->Skv * (double)p->D;
        int64_t want = (int64_t)(work * (double)j.units / (1 << 20)) + 1;
        uint32_t nb = nn_blocks(ex, want, 1);
        if ((int64_t)nb > j.units)
            nb = (uint32_t)j.units;
        j.per = (j.units + nb - 1) / nb;
        nb = (uint32_t)((j.units + j.per - 1) / j.per);
        err = nn_parallel(ex, nb, fa_block, &j);
    }
    if (!err && p->want_dpse) {   /* sum the full gradient over pse's broadcast dims */
        const nn_view_t *dv = &ex->v[p->dpse.v];
        int64_t idx[NN_MAX_DIMS] = {0};
        int32_t off = 4 - dv->ndim;
        int64_t full[4] = {p->B, p->N1, p->Sq, p->Skv};
        for (int64_t e = 0; e < dv->numel; e++) {
            int64_t lo[4], hi[4];
            for (int a = 0; a < 4; a++) {
                int64_t i = a >= off ? idx[a - off] : 0;
                bool bc = a < off || dv->shape[a - off] == 1;
                lo[a] = bc ? 0 : i;
                hi[a] = bc ? full[a] : i + 1;
            }
            double acc = 0;
            for (int64_t b = lo[0]; b < hi[0]; b++)
                for (int64_t n = lo[1]; n < hi[1]; n++)
                    for (int64_t i = lo[2]; i < hi[2]; i++)
                        for (int64_t jj = lo[3]; jj < hi[3]; jj++)
                            acc += j.dpse_full[((b * p->N1 + n) * p->Sq + i) * p->Skv + jj];
            nn_store(CT_F64, nn_at(dv, idx), 1, dv->dtype, &acc, 1);
            for (int32_t d = dv->ndim - 1; d >= 0; d--) {
                if (++idx[d] < dv->shape[d])
                    break;
                idx[d] = 0;
            }
        }
    }
    free(j.dpse_full);
    return err;
}

static aclnnStatus fa_outputs_finish(const char *api, nn_exec_t *ex, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    for (int32_t i = 0; i < ex->nview; i++) {
        if (!ex->v[i].output)
            continue;
        aclnnStatus rc = nn_check_output_overlap(api, ex, i, false);
        if (rc) {
            free(ex);
            return rc;
        }
    }
    return nn_exec_finish(ex, workspaceSize, executor);
}

/* ------------------------------------------------------------------ aclnnFlashAttentionScore */

NN_API aclnnStatus aclnnFlashAttentionScoreGetWorkspaceSize(
    const aclTensor *query, const aclTensor *key, const aclTensor *value, const aclTensor *realShiftOptional,
    const aclTensor *dropMaskOptional, const aclTensor *paddingMaskOptional, const aclTensor *attenMaskOptional,
    const aclIntArray *prefixOptional, double scaleValue, double keepProb, int64_t preTokens, int64_t nextTokens,
    int64_t headNum, char *inputLayout, int64_t innerPrecise, int64_t sparseMode, const aclTensor *softmaxMaxOut,
    const aclTensor *softmaxSumOut, const aclTensor *softmaxOutOut, const aclTensor *attentionOutOut,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFlashAttentionScore";
    NN_OUTPTRS(api);
    const nn_tensor_t *q, *k, *v, *pse, *drop, *pad, *mask, *smax, *ssum, *sout, *out;
    const nn_intarray_t *prefix;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "query", query, false, &q)) || (rc = nn_tensor_arg(api, "key", key, false, &k)) ||
        (rc = nn_tensor_arg(api, "value", value, false, &v)) ||
        (rc = nn_tensor_arg(api, "realShift", realShiftOptional, true, &pse)) ||
        (rc = nn_tensor_arg(api, "dropMask", dropMaskOptional, true, &drop)) ||
        (rc = nn_tensor_arg(api, "paddingMask", paddingMaskOptional, true, &pad)) ||
        (rc = nn_tensor_arg(api, "attenMask", attenMaskOptional, true, &mask)) ||
        (rc = nn_intarray_arg(api, "prefix", prefixOptional, true, &prefix)) ||
        (rc = nn_tensor_arg(api, "softmaxMaxOut", softmaxMaxOut, false, &smax)) ||
        (rc = nn_tensor_arg(api, "softmaxSumOut", softmaxSumOut, false, &ssum)) ||
        (rc = nn_tensor_arg(api, "softmaxOutOut", softmaxOutOut, true, &sout)) ||
        (rc = nn_tensor_arg(api, "attentionOutOut", attentionOutOut, false, &out)))
        return rc;
    (void)sout;   /* reserved by CANN: not written */
    nn_exec_t *ex = nn_exec_new(api, fa_run, ACLSIM_ENGINE_CUBE, sizeof(fa_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    fa_params_t *p = (fa_params_t *)ex->params;
    if ((rc = fa_common(api, p, q, k, v, NULL, pse, drop, pad, mask, smax, ssum, NULL, prefix, scaleValue,
                        keepProb, preTokens, nextTokens, headNum, inputLayout, innerPrecise, sparseMode)) ||
        (rc = fa_same(api, "attentionOutOut", out, "query", q, true))) {
        free(ex);
        return rc;
    }
    fa_add_inputs(ex, p, q, k, v, NULL, pse, drop, mask);
    p->vmax = nn_exec_add(ex, smax, "softmaxMaxOut", true);
    p->vsum = nn_exec_add(ex, ssum, "softmaxSumOut", true);
    nn_exec_add(ex, sout, "softmaxOutOut", true);
    fa_out(p, &p->o, out, nn_exec_add(ex, out, "attentionOutOut", true));
    fa_finish_cost(ex, p, 1.0);
    return fa_outputs_finish(api, ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnFlashAttentionScore(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            const aclrtStream stream)
{
    return nn_launch("aclnnFlashAttentionScore", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ aclnnFlashAttentionScoreGrad */

NN_API aclnnStatus aclnnFlashAttentionScoreGradGetWorkspaceSize(
    const aclTensor *query, const aclTensor *keyIn, const aclTensor *value, const aclTensor *dy,
    const aclTensor *pseShiftOptional, const aclTensor *dropMaskOptional, const aclTensor *paddingMaskOptional,
    const aclTensor *attenMaskOptional, const aclTensor *softmaxMaxOptional, const aclTensor *softmaxSumOptional,
    const aclTensor *softmaxInOptional, const aclTensor *attentionInOptional, const aclIntArray *prefixOptional,
    double scaleValue, double keepProb, int64_t preTokens, int64_t nextTokens, int64_t headNum, char *inputLayout,
    int64_t innerPrecise, int64_t sparseMode, const aclTensor *dqOut, const aclTensor *dkOut, const aclTensor *dvOut,
    const aclTensor *dpseOut, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFlashAttentionScoreGrad";
    NN_OUTPTRS(api);
    const nn_tensor_t *q, *k, *v, *g, *pse, *drop, *pad, *mask, *smax, *ssum, *sin_, *ain, *dq, *dk, *dv, *dpse;
    const nn_intarray_t *prefix;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "query", query, false, &q)) || (rc = nn_tensor_arg(api, "keyIn", keyIn, false, &k)) ||
        (rc = nn_tensor_arg(api, "value", value, false, &v)) || (rc = nn_tensor_arg(api, "dy", dy, false, &g)) ||
        (rc = nn_tensor_arg(api, "pseShift", pseShiftOptional, true, &pse)) ||
        (rc = nn_tensor_arg(api, "dropMask", dropMaskOptional, true, &drop)) ||
        (rc = nn_tensor_arg(api, "paddingMask", paddingMaskOptional, true, &pad)) ||
        (rc = nn_tensor_arg(api, "attenMask", attenMaskOptional, true, &mask)) ||
        (rc = nn_tensor_arg(api, "softmaxMax", softmaxMaxOptional, true, &smax)) ||
        (rc = nn_tensor_arg(api, "softmaxSum", softmaxSumOptional, true, &ssum)) ||
        (rc = nn_tensor_arg(api, "softmaxIn", softmaxInOptional, true, &sin_)) ||
        (rc = nn_tensor_arg(api, "attentionIn", attentionInOptional, true, &ain)) ||
        (rc = nn_intarray_arg(api, "prefix", prefixOptional, true, &prefix)) ||
        (rc = nn_tensor_arg(api, "dqOut", dqOut, false, &dq)) || (rc = nn_tensor_arg(api, "dkOut", dkOut, false, &dk)) ||
        (rc = nn_tensor_arg(api, "dvOut", dvOut, false, &dv)) ||
        (rc = nn_tensor_arg(api, "dpseOut", dpseOut, true, &dpse)))
        return rc;
    (void)sin_;   /* reserved by CANN: not read */
    if (!smax || !ssum || !ain)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: the simulator needs softmaxMax, softmaxSum and attentionIn from the "
                      "forward (recomputation from scratch is not implemented)", api);
    nn_exec_t *ex = nn_exec_new(api, fa_run, ACLSIM_ENGINE_CUBE, sizeof(fa_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    fa_params_t *p = (fa_params_t *)ex->params;
    p->grad = true;
    if ((rc = fa_common(api, p, q, k, v, g, pse, drop, pad, mask, smax, ssum, ain, prefix, scaleValue, keepProb,
                        preTokens, nextTokens, headNum, inputLayout, innerPrecise, sparseMode)) ||
        (rc = fa_same(api, "dqOut", dq, "query", q, true)) || (rc = fa_same(api, "dkOut", dk, "keyIn", k, true)) ||
        (rc = fa_same(api, "dvOut", dv, "value", v, true))) {
        free(ex);
        return rc;
    }
    fa_add_inputs(ex, p, q, k, v, g, pse, drop, mask);
    p->vmax = nn_exec_add(ex, smax, "softmaxMax", false);
    p->vsum = nn_exec_add(ex, ssum, "softmaxSum", false);
    nn_exec_add(ex, sin_, "softmaxIn", false);
    p->o.v = nn_exec_add(ex, ain, "attentionIn", false);
    fa_out(p, &p->dq, dq, nn_exec_add(ex, dq, "dqOut", true));
    fa_out(p, &p->dk, dk, nn_exec_add(ex, dk, "dkOut", true));
    fa_out(p, &p->dv, dv, nn_exec_add(ex, dv, "dvOut", true));
    int32_t vdp = nn_exec_add(ex, dpse, "dpseOut", true);
    if (dpse && dpse->numel > 0) {
        if (!pse || (rc = fa_same(api, "dpseOut", dpse, "pseShift", pse, false)) ||
            (!nn_is_float(dpse->dtype) && (rc = NN_PARAM("%s: dpseOut has dtype %s (expected a floating dtype)", api,
                                                         nn_dtype_name(dpse->dtype))))) {
            free(ex);
            return pse ? rc : NN_PARAM("%s: dpseOut has elements but pseShift is NULL", api);
        }
        p->dpse.v = vdp;
        p->want_dpse = true;
    }
    fa_finish_cost(ex, p, 2.5);
    return fa_outputs_finish(api, ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnFlashAttentionScoreGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                const aclrtStream stream)
{
    return nn_launch("aclnnFlashAttentionScoreGrad", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ aclnnLogicalNot */

typedef struct lnot_params {
    int32_t dummy;
} lnot_params_t;

static aclError lnot_run(nn_exec_t *ex)
{
    const nn_view_t *x = &ex->v[0], *o = &ex->v[1];
    int64_t idx[NN_MAX_DIMS] = {0};
    for (int64_t e = 0; e < x->numel; e++) {
        double v, r;
        nn_load(CT_F64, &v, nn_at(x, idx), 1, x->dtype, 1);
        r = v == 0 ? 1.0 : 0.0;
        nn_store(CT_F64, nn_at(o, idx), 1, o->dtype, &r, 1);
        for (int32_t d = x->ndim - 1; d >= 0; d--) {
            if (++idx[d] < x->shape[d])
                break;
            idx[d] = 0;
        }
    }
    return ACL_SUCCESS;
}

NN_API aclnnStatus aclnnLogicalNotGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor)
{
    static const char api[] = "aclnnLogicalNot";
    NN_OUTPTRS(api);
    const nn_tensor_t *x, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &x)) || (rc = nn_tensor_arg(api, "out", out, false, &o)) ||
        (rc = nn_check_tensor(api, "self", x)) || (rc = nn_check_tensor(api, "out", o)))
        return rc;
    if (!nn_dtype_size(x->dtype) || !nn_dtype_size(o->dtype))
        return NN_PARAM("%s: dtypes %s -> %s are not supported", api, nn_dtype_name(x->dtype), nn_dtype_name(o->dtype));
    if ((rc = fa_same(api, "out", o, "self", x, false)))
        return rc;
    nn_exec_t *ex = nn_exec_new(api, lnot_run, ACLSIM_ENGINE_VECTOR, sizeof(lnot_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    nn_exec_add(ex, x, "self", false);
    nn_exec_add(ex, o, "out", true);
    aclnnStatus r2 = nn_check_output_overlap(api, ex, 1, true);
    if (r2) {
        free(ex);
        return r2;
    }
    ex->cost_ns = (uint64_t)x->numel * 4;
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnLogicalNot(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream)
{
    return nn_launch("aclnnLogicalNot", workspace, workspaceSize, executor, stream);
}
