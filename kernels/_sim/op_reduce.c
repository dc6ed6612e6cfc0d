/* canna simulator op library: reductions over dims with keepdim (ReduceSum, Mean, Amax; All and
 * Any, the logical reductions of torch.all / torch.any: is every / some element nonzero, NaN being
 * nonzero, into a bool out).
 *
 * The input's dims split into kept dims (the output's index space) and reduced dims. Floating
 * inputs accumulate in double, integers in int64 (wrapping), then convert to out's dtype. Two
 * loop orders: when the innermost kept dim is the input's fastest (e.g. a sum over rows), tiles of
 * consecutive outputs accumulate whole input rows at once; otherwise each output walks its own
 * reduction rows. A reduction to few outputs is split across blocks into partial results that are
 * combined at the end. */
#include "opsim.h"

#pragma GCC optimize("O3")

enum { RD_SUM, RD_MEAN, RD_AMAX, RD_ALL, RD_ANY };

#define RD_TILE 512

typedef struct rd_params {
    int32_t kind, ct;          /* accumulate type: CT_F64 or CT_I64 */
    int32_t nk, nr;            /* kept / reduced dims (coalesced) */
    int64_t kshape[NN_MAX_DIMS], kst_in[NN_MAX_DIMS], kst_out[NN_MAX_DIMS];
    int64_t rshape[NN_MAX_DIMS], rst[NN_MAX_DIMS];
    int64_t nout, nred;
    bool vector;               /* tiles along the innermost kept dim */
    int64_t splits;            /* partial results per output (few outputs, long reductions) */
} rd_params_t;

typedef struct rd_job {
    const rd_params_t *p;
    const nn_view_t *in, *out;
    char *partial;             /* [nout * splits] accumulators when splits > 1 */
    int64_t items, per;
} rd_job_t;

static inline void acc_combine(int kind, int ct, void *acc, const void *v, int64_t n)
{
    if (kind == RD_ALL || kind == RD_ANY) {   /* accumulators hold 0 / 1 */
        bool all = kind == RD_ALL;
        if (ct == CT_F64) {
            double *a = acc;
            const double *b = v;
            for (int64_t i = 0; i < n; i++)
                a[i] = all ? (a[i] != 0 && b[i] != 0) : (a[i] != 0 || b[i] != 0);
        } else {
            int64_t *a = acc;
            const int64_t *b = v;
            for (int64_t i = 0; i < n; i++)
                a[i] = all ? (a[i] != 0 && b[i] != 0) : (a[i] != 0 || b[i] != 0);
        }
        return;
    }
    if (ct == CT_F64) {
        double *a = acc;
        const double *b = v;
        if (kind == RD_AMAX) {
            for (int64_t i = 0; i < n; i++)
                a[i] = (b[i] > a[i] || b[i] != b[i] || a[i] != a[i]) ? (a[i] != a[i] ? a[i] : b[i]) : a[i];
        } else {
            for (int64_t i = 0; i < n; i++)
                a[i] += b[i];
        }
    } else {
        int64_t *a = acc;
        const int64_t *b = v;
        if (kind == RD_AMAX) {
            for (int64_t i = 0; i < n; i++)
                a[i] = b[i] > a[i] ? b[i] : a[i];
        } else {
            for (int64_t i = 0; i < n; i++)
                a[i] = (int64_t)((uint64_t)a[i] + (uint64_t)b[i]);
        }
    }
}

static void acc_init(int kind, int ct, void *acc, int64_t n)
{
    if (ct == CT_F64) {
        double *a = acc;
        for (int64_t i = 0; i < n; i++)
            a[i] = kind == RD_AMAX ? -INFINITY : kind == RD_ALL ? 1.0 : 0.0;
    } else {
        int64_t *a = acc;
        for (int64_t i = 0; i < n; i++)
            a[i] = kind == RD_AMAX ? INT64_MIN : kind == RD_ALL ? 1 : 0;
    }
}

/* input offset (elements) of the kept index k (linear over kshape) */
static int64_t kept_off(const rd_params_t *p, int64_t k, const int64_t *st)
{
    int64_t off = 0;
    for (int32_t d = p->nk - 1; d >= 0; d--) {
        int64_t i = k % p->kshape[d];
        k /= p->kshape[d];
        off += i * st[d];
    }
    return off;
}

/* the sum of n values (float32 read as they are, doubles from a load buffer) in double: 32 lanes
 * (four AVX-512 registers: an add's latency is four cycles), summed pairwise in NN_HSUM's halving
 * order, then the tail (the order of a blocked sum, no less exact than one running sum). The lanes
 * are eight named vectors: an array of them lived on the stack, stored in 16-byte halves that the
 * 32-byte reloads of its horizontal sum could not forward from (a stall per line) */
typedef double rd_v4d __attribute__((vector_size(32)));
#define RD_LD4(VT, p) ({ VT t_; memcpy(&t_, (p), sizeof t_); __builtin_convertvector(t_, rd_v4d); })
#define RD_SUM_DOUBLE(NAME, T)                                                                     \
    typedef T NAME##_vt __attribute__((vector_size(4 * sizeof(T))));                              \
    NN_CLONES static double NAME(const T *restrict x, int64_t n)                                   \
    {                                                                                              \
        if (n < 32) {                                                                              \
            double s = 0;                                                                          \
            for (int64_t i = 0; i < n; i++)                                                        \
                s += (double)x[i];                                                                 \
            return s;                                                                              \
        }                                                                                          \
        const rd_v4d z = {0.0, 0.0, 0.0, 0.0}; /* 0 + the first 32 values (a -0.0 becomes +0.0) */ \
        rd_v4d a0 = z + RD_LD4(NAME##_vt, x), a1 = z + RD_LD4(NAME##_vt, x + 4);                  \
        rd_v4d a2 = z + RD_LD4(NAME##_vt, x + 8), a3 = z + RD_LD4(NAME##_vt, x + 12);             \
        rd_v4d a4 = z + RD_LD4(NAME##_vt, x + 16), a5 = z + RD_LD4(NAME##_vt, x + 20);            \
        rd_v4d a6 = z + RD_LD4(NAME##_vt, x + 24), a7 = z + RD_LD4(NAME##_vt, x + 28);            \
        int64_t i = 32;                                                                            \
        for (; i + 32 <= n; i += 32) {                                                             \
            a0 += RD_LD4(NAME##_vt, x + i);                                                        \
            a1 += RD_LD4(NAME##_vt, x + i + 4);                                                    \
            a2 += RD_LD4(NAME##_vt, x + i + 8);                                                    \
            a3 += RD_LD4(NAME##_vt, x + i + 12);                                                   \
            a4 += RD_LD4(NAME##_vt, x + i + 16);                                                   \
            a5 += RD_LD4(NAME##_vt, x + i + 20);                                                   \
            a6 += RD_LD4(NAME##_vt, x + i + 24);                                                   \
            a7 += RD_LD4(NAME##_vt, x + i + 28);                                                   \
        }                                                                                          \
        a0 += a4, a1 += a5, a2 += a6, a3 += a7; /* NN_HSUM's halving order */                      \
        a0 += a2, a1 += a3;                                                                        \
        a0 += a1;                                                                                  \
        double s = (a0[0] + a0[2]) + (a0[1] + a0[3]);                                              \
        for (; i < n; i++)                                                                         \
            s += (double)x[i];                                                                     \
        return s;                                                                                  \
    }
RD_SUM_DOUBLE(sum_f32_f64, float)
RD_SUM_DOUBLE(sum_f64, double)

/* a float32 input summed (or averaged) in double along a stride-1 line: read as it is (no load buffer) */
static bool rd_f32_sum(const rd_params_t *p, const nn_view_t *in, int64_t stride)
{
    return in->dtype == ACL_FLOAT && p->ct == CT_F64 && (p->kind == RD_SUM || p->kind == RD_MEAN) && stride == 1;
}

/* the logical accumulator *acc (0 / 1) folded with n values: all stays 1 until a zero, any stays 0
 * until a nonzero (the loop stops at the deciding value). (A per-value acc_combine through the
 * load buffer gave the last value's answer for float rows once GCC specialized reduce_one) */
static void logical_fold(int kind, int ct, void *acc, const unsigned char *buf, int64_t n)
{
    const bool all = kind == RD_ALL;
    bool v = ct == CT_F64 ? *(double *)acc != 0 : *(int64_t *)acc != 0;
    for (int64_t i = 0; i < n && v == all; i++)
        v = ct == CT_F64 ? ((const double *)(const void *)buf)[i] != 0 : ((const int64_t *)(const void *)buf)[i] != 0;
    if (ct == CT_F64)
        *(double *)acc = v;
    else
        *(int64_t *)acc = v;
}

/* accumulate reduction rows [r0, r1) (rows = every reduced dim but the innermost) for one output
 * (scalar path) into *acc */
static void reduce_one(const rd_params_t *p, const nn_view_t *in, const char *base, int64_t r0, int64_t r1, void *acc)
{
    size_t isz = nn_dtype_size(in->dtype);
    int64_t inner = p->rshape[p->nr - 1], ist = p->rst[p->nr - 1];
    _Alignas(64) unsigned char buf[RD_TILE * 8];
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = 0, rr = r;
        for (int32_t d = p->nr - 2; d >= 0; d--) {
            int64_t i = rr % p->rshape[d];
            rr /= p->rshape[d];
            off += i * p->rst[d];
        }
        const char *row = base + off * (int64_t)isz;
        if (rd_f32_sum(p, in, ist)) {
            *(double *)acc += sum_f32_f64((const float *)row, inner);
            continue;
        }
        for (int64_t c = 0; c < inner; c += RD_TILE) {
            int64_t n = inner - c < RD_TILE ? inner - c : RD_TILE;
            nn_load(p->ct, buf, row + c * ist * (int64_t)isz, ist, in->dtype, n);
            if (p->kind == RD_ALL || p->kind == RD_ANY) {
                logical_fold(p->kind, p->ct, acc, buf, n);
            } else if (p->ct == CT_F64) {
                const double *b = (const double *)buf;
                double *a = acc;
                if (p->kind == RD_AMAX) {
                    double m = *a;
                    for (int64_t i = 0; i < n; i++)
                        if (b[i] > m || b[i] != b[i])
                            m = (m != m) ? m : b[i];
                    *a = m;
                } else {
                    *a += sum_f64(b, n);
                }
            } else {
                const int64_t *b = (const int64_t *)buf;
                int64_t *a = acc;
                if (p->kind == RD_AMAX) {
                    for (int64_t i = 0; i < n; i++)
                        if (b[i] > *a)
                            *a = b[i];
                } else {
                    uint64_t s = 0;
                    for (int64_t i = 0; i < n; i++)
                        s += (uint64_t)b[i];
                    *a = (int64_t)((uint64_t)*a + s);
                }
            }
        }
    }
}

/* store n results (acc) at element offset ooff of out */
static void finish_store(const rd_params_t *p, const nn_view_t *out, int64_t ooff, void *acc, int64_t n,
                         int64_t ostride)
{
    if (p->kind == RD_MEAN) {
        double *a = acc;
        for (int64_t i = 0; i < n; i++)
            a[i] /= (double)p->nred;
    }
    nn_store(p->ct, out->data + ooff * (int64_t)nn_dtype_size(out->dtype), ostride, out->dtype, acc, n);
}

/* a += x (float32 values summed in double): a tile's row of a float32 sum or mean */
NN_CLONES static void add_f32_f64(double *restrict a, const float *restrict x, int64_t n)
{
    for (int64_t c = 0; c < n; c++)
        a[c] += (double)x[c];
}

static aclError rd_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    rd_job_t *j = arg;
    const rd_params_t *p = j->p;
    const nn_view_t *in = j->in;
    size_t isz = nn_dtype_size(in->dtype);
    int64_t t0 = (int64_t)bi * j->per, t1 = t0 + j->per;
    if (t1 > j->items)
        t1 = j->items;
    if (p->vector) {
        /* items: (row of kept dims except innermost) x tiles along the innermost kept dim */
        int64_t L = p->kshape[p->nk - 1], tiles = (L + RD_TILE - 1) / RD_TILE;
        int64_t kin = p->kst_in[p->nk - 1], kout = p->kst_out[p->nk - 1];
        union { double d[RD_TILE]; int64_t i[RD_TILE]; } acc;
        _Alignas(64) unsigned char buf[RD_TILE * 8];
        bool f32sum = rd_f32_sum(p, in, kin);
        for (int64_t t = t0; t < t1; t++) {
            int64_t krow = t / tiles, c0 = (t % tiles) * RD_TILE;
            int64_t n = L - c0 < RD_TILE ? L - c0 : RD_TILE;
            int64_t k = krow * L + c0;
            const char *base = in->data + kept_off(p, k, p->kst_in) * (int64_t)isz;
            acc_init(p->kind, p->ct, &acc, n);
            for (int64_t r = 0; r < p->nred; r++) {
                int64_t off = 0, rr = r;
                for (int32_t d = p->nr - 1; d >= 0; d--) {
                    int64_t i = rr % p->rshape[d];
                    rr /= p->rshape[d];
                    off += i * p->rst[d];
                }
                if (f32sum) {
                    add_f32_f64(acc.d, (const float *)(base + off * (int64_t)isz), n);
                    continue;
                }
                nn_load(p->ct, buf, base + off * (int64_t)isz, kin, in->dtype, n);
                acc_combine(p->kind, p->ct, &acc, buf, n);
            }
            finish_store(p, j->out, kept_off(p, k, p->kst_out), &acc, n, kout);
        }
        return ACL_SUCCESS;
    }
    int64_t rows = p->nred / p->rshape[p->nr - 1];
    if (p->splits == 1) {   /* an item per output, in order: the input's and output's offsets (a, b) */
        nn_odo_t o;
        nn_odo_start(&o, p->nk, p->kshape, p->kst_in, p->kst_out, t0);
        for (int64_t t = t0; t < t1; t++, nn_odo_next(&o, p->nk, p->kshape, p->kst_in, p->kst_out)) {
            union { double d; int64_t i; } acc;
            acc_init(p->kind, p->ct, &acc, 1);
            if (rows > 0)
                reduce_one(p, in, in->data + o.a * (int64_t)isz, 0, rows, &acc);
            finish_store(p, j->out, o.b, &acc, 1, 1);
        }
        return ACL_SUCCESS;
    }
    for (int64_t t = t0; t < t1; t++) {   /* splits > 1: partial results, combined in rd_run */
        int64_t k = t / p->splits, s = t % p->splits;
        int64_t per = (rows + p->splits - 1) / p->splits, r0 = s * per, r1 = r0 + per;
        if (r1 > rows)
            r1 = rows;
        union { double d; int64_t i; } acc;
        acc_init(p->kind, p->ct, &acc, 1);
        const char *base = in->data + kept_off(p, k, p->kst_in) * (int64_t)isz;
        if (r0 < r1)
            reduce_one(p, in, base, r0, r1, &acc);
        memcpy(j->partial + (size_t)t * 8, &acc, 8);
    }
    return ACL_SUCCESS;
}

static aclError rd_run(nn_exec_t *ex)
{
    rd_params_t *p = (rd_params_t *)ex->params;
    const nn_view_t *in = &ex->v[0], *out = &ex->v[1];
    if (!p->nout)
        return ACL_SUCCESS;
    rd_job_t j = {p, in, out, NULL, 0, 0};
    if (p->nred == 0) {   /* empty reduction: the identity (sum 0, mean NaN) */
        union { double d; int64_t i; } z;
        for (int64_t k = 0; k < p->nout; k++) {
            acc_init(p->kind, p->ct, &z, 1);
            if (p->kind == RD_MEAN)
                z.d = NAN;
            char *o = out->data + kept_off(p, k, p->kst_out) * (int64_t)nn_dtype_size(out->dtype);
            nn_store(p->ct, o, 1, out->dtype, &z, 1);
        }
        return ACL_SUCCESS;
    }
    if (p->vector) {
        int64_t L = p->kshape[p->nk - 1];
        j.items = (p->nout / L) * ((L + RD_TILE - 1) / RD_TILE);
    } else {
        j.items = p->nout * p->splits;
    }
    if (p->splits > 1) {
        j.partial = malloc((size_t)j.items * 8);
        if (!j.partial)
            return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    }
    uint32_t nb = nn_blocks(ex, p->nout * p->nred, NN_BLOCK_GRAIN);
    if ((int64_t)nb > j.items)
        nb = (uint32_t)j.items;
    j.per = (j.items + nb - 1) / nb;
    nb = (uint32_t)((j.items + j.per - 1) / j.per);
    aclError rc = nn_parallel(ex, nb, rd_block, &j);
    if (!rc && j.partial) {
        for (int64_t k = 0; k < p->nout; k++) {
            union { double d; int64_t i; } acc;
            acc_init(p->kind, p->ct, &acc, 1);
            for (int64_t s = 0; s < p->splits; s++)
                acc_combine(p->kind, p->ct, &acc, j.partial + (size_t)(k * p->splits + s) * 8, 1);
            finish_store(p, out, kept_off(p, k, p->kst_out), &acc, 1, 1);
        }
    }
    free(j.partial);
    return rc;
}

/* phase 1 shared by the five ops; dtype: ACL_DT_UNDEFINED = no dtype argument */
static aclnnStatus rd_make(const char *api, int kind, const aclTensor *self, const aclIntArray *dims, bool keep,
                           aclDataType dtype, bool has_dtype, aclTensor *out, uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *o;
    const nn_intarray_t *dl;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_intarray_arg(api, "dim", dims, false, &dl)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    bool logical = kind == RD_ALL || kind == RD_ANY;
    if (logical) {
        if (!nn_is_op_float(a->dtype) && !nn_is_op_int(a->dtype) && a->dtype != ACL_BOOL && a->dtype != ACL_UINT8 &&
            a->dtype != ACL_INT8 && a->dtype != ACL_INT16)
            return NN_PARAM("%s: self has dtype %s (expected a floating, integer or bool dtype)", api,
                            nn_dtype_name(a->dtype));
        if (o->dtype != ACL_BOOL && o->dtype != ACL_UINT8)
            return NN_PARAM("%s: out has dtype %s, expected bool (or uint8)", api, nn_dtype_name(o->dtype));
    } else if (!nn_is_op_float(a->dtype) && !nn_is_op_int(a->dtype) && !(kind == RD_SUM && a->dtype == ACL_BOOL))
        return NN_PARAM("%s: self has dtype %s (expected float32, float16, bfloat16, float64, int32 or int64; bool "
                        "for a sum)", api, nn_dtype_name(a->dtype));
    if (has_dtype && o->dtype != dtype)
        return NN_PARAM("%s: out has dtype %s but dtype is %s", api, nn_dtype_name(o->dtype), nn_dtype_name(dtype));
    if (kind == RD_AMAX && o->dtype != a->dtype)
        return NN_PARAM("%s: out has dtype %s, expected self's dtype %s", api, nn_dtype_name(o->dtype),
                        nn_dtype_name(a->dtype));
    if (kind == RD_MEAN && !nn_is_float(o->dtype))
        return NN_PARAM("%s: the mean needs a floating out dtype, got %s", api, nn_dtype_name(o->dtype));
    if (kind == RD_SUM && !nn_can_cast(a->dtype, o->dtype))
        return NN_PARAM("%s: self's dtype %s cannot be cast to out's dtype %s", api, nn_dtype_name(a->dtype),
                        nn_dtype_name(o->dtype));
    bool red[NN_MAX_DIMS] = {false};
    if (dl->n == 0) {
        for (int32_t d = 0; d < a->ndim; d++)
            red[d] = true;
    }
    for (uint64_t i = 0; i < dl->n; i++) {
        int32_t d;
        if (!nn_wrap_dim(dl->v[i], a->ndim, &d))
            return NN_PARAM("%s: dim %lld is out of range for a %dD tensor (expected [%d, %d])", api,
                            (long long)dl->v[i], a->ndim, a->ndim ? -a->ndim : -1, a->ndim ? a->ndim - 1 : 0);
        if (a->ndim == 0)
            continue;
        if (red[d])
            return NN_PARAM("%s: dim %d appears multiple times in the list of dims", api, d);
        red[d] = true;
    }
    int64_t oshape[NN_MAX_DIMS];
    int32_t ond = 0;
    int64_t nred = 1;
    for (int32_t d = 0; d < a->ndim; d++) {
        if (red[d]) {
            nred *= a->shape[d];
            if (keep)
                oshape[ond++] = 1;
        } else {
            oshape[ond++] = a->shape[d];
        }
    }
    if (!nn_same_shape(o, oshape, ond)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: out has shape %s, expected %s", api, nn_shape_str(s1, sizeof s1, o->shape, o->ndim),
                        nn_shape_str(s2, sizeof s2, oshape, ond));
    }
    if (kind == RD_AMAX && nred == 0 && o->numel > 0)
        return NN_PARAM("%s: cannot compute the maximum of an empty reduction (a reduced dim has size 0)", api);
    nn_exec_t *ex = nn_exec_new(api, rd_run, ACLSIM_ENGINE_VECTOR, sizeof(rd_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    rd_params_t *p = (rd_params_t *)ex->params;
    p->kind = kind;
    p->ct = (nn_is_float(a->dtype) || kind == RD_MEAN) ? CT_F64 : CT_I64;
    nn_exec_add(ex, a, "self", false);
    nn_exec_add(ex, o, "out", true);
    if ((rc = nn_check_output_overlap(api, ex, 1, false))) {
        free(ex);
        return rc;
    }
    /* kept dims with their output strides; reduced dims sorted by input stride, descending */
    int32_t od = 0;
    for (int32_t d = 0; d < a->ndim; d++) {
        int64_t ostr = 0;
        if (!red[d] || keep)
            ostr = o->stride[od++];
        if (a->shape[d] == 1)
            continue;
        if (red[d]) {
            int32_t i = p->nr++;
            while (i > 0 && p->rst[i - 1] < a->stride[d]) {
                p->rshape[i] = p->rshape[i - 1];
                p->rst[i] = p->rst[i - 1];
                i--;
            }
            p->rshape[i] = a->shape[d];
            p->rst[i] = a->stride[d];
        } else {
            int32_t k = p->nk;
            if (k > 0 && p->kst_in[k - 1] == a->stride[d] * a->shape[d] && p->kst_out[k - 1] == ostr * a->shape[d]) {
                p->kshape[k - 1] *= a->shape[d];
                p->kst_in[k - 1] = a->stride[d];
                p->kst_out[k - 1] = ostr;
            } else {
                p->kshape[k] = a->shape[d];
                p->kst_in[k] = a->stride[d];
                p->kst_out[k] = ostr;
                p->nk++;
            }
        }
    }
    /* merge reduced dims that are contiguous with each other */
    int32_t m = 0;
    for (int32_t i = 0; i < p->nr; i++) {
        if (m > 0 && p->rst[m - 1] == p->rst[i] * p->rshape[i]) {
            p->rshape[m - 1] *= p->rshape[i];
            p->rst[m - 1] = p->rst[i];
        } else {
            p->rshape[m] = p->rshape[i];
            p->rst[m] = p->rst[i];
            m++;
        }
    }
    p->nr = m;
    if (p->nr == 0) {
        p->nr = 1;
        p->rshape[0] = 1;
        p->rst[0] = 0;
    }
    if (p->nk == 0) {
        p->nk = 1;
        p->kshape[0] = 1;
        p->kst_in[0] = p->kst_out[0] = 0;
    }
    p->nout = o->numel;
    p->nred = a->numel ? nred : 0;
    if (o->numel == 0)
        p->nout = 0;
    p->vector = p->nout > 1 && p->kshape[p->nk - 1] > 1 && p->kst_in[p->nk - 1] < p->rst[p->nr - 1];
    p->splits = 1;
    if (!p->vector && p->nout < 64 && p->nred >= (1 << 20)) {
        int64_t rows = p->nred / p->rshape[p->nr - 1];
        p->splits = rows < 48 ? rows : 48;
        if (p->splits < 1)
            p->splits = 1;
    }
    ex->cost_ns = (uint64_t)(a->numel * (int64_t)nn_dtype_size(a->dtype) / 4);
    ex->cores = (uint32_t)(a->numel / (256 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor *self, const aclIntArray *dims, bool keepDims,
                                                  aclDataType dtype, aclTensor *out, uint64_t *workspaceSize,
                                                  aclOpExecutor **executor)
{
    return rd_make("aclnnReduceSum", RD_SUM, self, dims, keepDims, dtype, true, out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnReduceSum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnReduceSum", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnMeanGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim,
                                             aclDataType dtype, aclTensor *out, uint64_t *workspaceSize,
                                             aclOpExecutor **executor)
{
    return rd_make("aclnnMean", RD_MEAN, self, dim, keepDim, dtype, true, out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnMean(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnMean", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnAmaxGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim,
                                             aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return rd_make("aclnnAmax", RD_AMAX, self, dim, keepDim, ACL_DT_UNDEFINED, false, out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnAmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnAmax", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnAllGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepdim, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return rd_make("aclnnAll", RD_ALL, self, dim, keepdim, ACL_DT_UNDEFINED, false, out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnAll(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnAll", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnAnyGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepdim, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return rd_make("aclnnAny", RD_ANY, self, dim, keepdim, ACL_DT_UNDEFINED, false, out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnAny(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnAny", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ Cumsum, CumsumV2 */

/* out[..., i, ...] = the sum of self's elements along dim up to i (exclusive: before i; reverse:
 * from the end), accumulated in double (floating out) or int64 (wrapping), converted to out's dtype */
typedef struct cs_params {
    int32_t dim;
    bool exclusive, reverse;
} cs_params_t;

static aclError cs_run(nn_exec_t *ex)
{
    const cs_params_t *p = (const cs_params_t *)ex->params;
    const nn_view_t *a = &ex->v[0], *o = &ex->v[1];
    int ct = nn_is_float(o->dtype) ? CT_F64 : CT_I64;
    int32_t nd = a->ndim, d0 = p->dim;
    int64_t n = nd ? a->shape[d0] : 1, ast = nd ? a->stride[d0] : 0, ost = nd ? o->stride[d0] : 0;
    size_t asz = nn_dtype_size(a->dtype), osz = nn_dtype_size(o->dtype);
    int64_t idx[NN_MAX_DIMS] = {0};
    if (a->numel == 0)
        return ACL_SUCCESS;
    for (;;) {
        const char *src = nd ? nn_at(a, idx) : a->data;
        char *dst = nd ? nn_at(o, idx) : o->data;
        double sf = 0;
        int64_t si = 0;
        for (int64_t k = 0; k < n; k++) {
            int64_t i = p->reverse ? n - 1 - k : k;
            _Alignas(8) unsigned char v[8];
            nn_load(ct, v, src + i * ast * (int64_t)asz, 1, a->dtype, 1);
            if (ct == CT_F64) {
                double x = *(double *)v;
                if (!p->exclusive)
                    sf += x;
                nn_store(ct, dst + i * ost * (int64_t)osz, 1, o->dtype, &sf, 1);
                if (p->exclusive)
                    sf += x;
            } else {
                int64_t x = *(int64_t *)v;
                if (!p->exclusive)
                    si = (int64_t)((uint64_t)si + (uint64_t)x);
                nn_store(ct, dst + i * ost * (int64_t)osz, 1, o->dtype, &si, 1);
                if (p->exclusive)
                    si = (int64_t)((uint64_t)si + (uint64_t)x);
            }
        }
        int32_t d = nd - 1;
        for (; d >= 0; d--) {
            if (d == d0)
                continue;
            if (++idx[d] < a->shape[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return ACL_SUCCESS;
    }
}

static aclnnStatus cs_make(const char *api, const aclTensor *self, int64_t dim, bool exclusive, bool reverse,
                           aclDataType dtype, bool has_dtype, aclTensor *out, uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    NN_OUTPTRS(api);
    const nn_tensor_t *a, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (!nn_is_op_float(a->dtype) && !nn_is_op_int(a->dtype) && a->dtype != ACL_BOOL && a->dtype != ACL_UINT8 &&
        a->dtype != ACL_INT8 && a->dtype != ACL_INT16)
        return NN_PARAM("%s: self has dtype %s (expected a floating, integer or bool dtype)", api,
                        nn_dtype_name(a->dtype));
    if (!nn_is_op_float(o->dtype) && !nn_is_op_int(o->dtype))
        return NN_PARAM("%s: out has dtype %s (expected a floating dtype, int32 or int64)", api, nn_dtype_name(o->dtype));
    /* (ACL_DT_UNDEFINED: out's dtype, a simulator convenience for callers that size out first) */
    if (has_dtype && dtype != ACL_DT_UNDEFINED && o->dtype != dtype)
        return NN_PARAM("%s: out has dtype %s but dtype is %s", api, nn_dtype_name(o->dtype), nn_dtype_name(dtype));
    int32_t d = 0;
    if (!nn_wrap_dim(dim, a->ndim, &d))
        return NN_PARAM("%s: dim %lld is out of range for a %dD tensor", api, (long long)dim, a->ndim);
    if (!nn_same_shape(o, a->shape, a->ndim)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: out has shape %s, expected self's %s", api, nn_shape_str(s1, sizeof s1, o->shape, o->ndim),
                        nn_shape_str(s2, sizeof s2, a->shape, a->ndim));
    }
    nn_exec_t *ex = nn_exec_new(api, cs_run, ACLSIM_ENGINE_VECTOR, sizeof(cs_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    cs_params_t *p = (cs_params_t *)ex->params;
    p->dim = d;
    p->exclusive = exclusive;
    p->reverse = reverse;
    nn_exec_add(ex, a, "self", false);
    nn_exec_add(ex, o, "out", true);
    if ((rc = nn_check_output_overlap(api, ex, 1, false))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)a->numel * 4;
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnCumsumGetWorkspaceSize(const aclTensor *self, int64_t dim, aclDataType dtype, aclTensor *out,
                                               uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return cs_make("aclnnCumsum", self, dim, false, false, dtype, true, out, workspaceSize, executor);
}

NN_API aclnnStatus aclnnCumsum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnCumsum", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnCumsumV2GetWorkspaceSize(const aclTensor *self, int64_t dim, bool exclusive, bool reverse,
                                                 aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return cs_make("aclnnCumsumV2", self, dim, exclusive, reverse, ACL_DT_UNDEFINED, false, out, workspaceSize,
                   executor);
}

NN_API aclnnStatus aclnnCumsumV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnCumsumV2", workspace, workspaceSize, executor, stream);
}
