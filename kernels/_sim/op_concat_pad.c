/* canna simulator op library: aclnnCat (concatenation of an aclTensorList along a dim) and
 * aclnnConstantPadNd (constant padding; negative pads crop) (prototypes: hicann/ops-math
 * conversion/concat_d and conversion/pad_v3, op_api/aclnn_*.h).
 *
 * Cat follows torch.cat: the tensors have the same number of dims and equal sizes in every dim but
 * `dim` (a 1-D tensor of shape [0] is skipped, PyTorch's legacy rule); out's dtype may be any dtype
 * every input casts to (torch.cat's promotion: out is the promoted dtype), values are converted
 * through double (floats) or int64 (integers and bool). The list's tensors are kept in the
 * executor's parameters (a list may be long; aclSetInputTensorAddr numbers them 0..n-1), so their
 * memory is checked when the task runs: an inaccessible one fails the task (reported by the next
 * synchronize).
 *
 * ConstantPadNd follows torch.nn.functional.pad(mode="constant"): pad holds (left, right) pairs
 * from the last dim backwards, at most one pair per dim; out's dim is in + left + right (>= 0).
 * Rows (the last dim) are spread over the AI-core blocks. */
#include "opsim.h"

#pragma GCC optimize("O3")

#define CAT_MAX_TENSORS 1024

/* element offset of row r (row-major over every dim but the last) of view v, with `add` added to
 * the coordinate of dim `dim` (< ndim - 1) */
static int64_t cp_row_off(const nn_view_t *v, int64_t r, int32_t dim, int64_t add)
{
    int64_t off = 0;
    for (int32_t d = v->ndim - 2; d >= 0; d--) {
        int64_t i = r % v->shape[d];
        r /= v->shape[d];
        off += (i + (d == dim ? add : 0)) * v->stride[d];
    }
    return off;
}

static inline char *cp_ptr(const nn_view_t *v, int64_t off) { return v->data + off * (int64_t)nn_dtype_size(v->dtype); }

static int cp_ct(aclDataType d) { return nn_is_float(d) ? CT_F64 : CT_I64; }

/* ================================================================== cat */

typedef struct cat_params {
    int32_t vo, dim, n;
    int64_t total_rows;
    nn_view_t in[];                /* n views, then n + 1 row prefix sums (int64) */
} cat_params_t;

static int64_t *cat_prefix(cat_params_t *p) { return (int64_t *)(void *)&p->in[p->n]; }

typedef struct cat_job {
    nn_exec_t *ex;
    cat_params_t *p;
    int64_t per;
} cat_job_t;

static int64_t cp_rows(const nn_view_t *v)
{
    if (!v->numel)
        return 0;
    return v->ndim ? v->numel / v->shape[v->ndim - 1] : 1;
}

static aclError cat_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    cat_job_t *j = arg;
    cat_params_t *p = j->p;
    const nn_view_t *o = &j->ex->v[p->vo];
    const int64_t *pre = cat_prefix(p);
    int64_t a = (int64_t)bi * j->per, b = a + j->per;
    if (b > p->total_rows)
        b = p->total_rows;
    int ct = cp_ct(o->dtype);
    int64_t cols = o->shape[o->ndim - 1];
    void *buf = malloc((size_t)(cols ? cols : 1) * 8);
    if (!buf)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", j->ex->api);
    int32_t i = 0, last = o->ndim - 1;
    int64_t start = 0;   /* input i's offset along dim in out: the sizes of the inputs before it */
    const size_t osz = nn_dtype_size(o->dtype);
    for (int64_t g = a; g < b;) {
        while (pre[i + 1] <= g) {
            if (p->in[i].ndim == o->ndim)   /* (a skipped legacy [0] tensor adds nothing) */
                start += p->in[i].shape[p->dim];
            i++;
        }
        const nn_view_t *v = &p->in[i];
        int64_t r = g - pre[i], end = (b < pre[i + 1] ? b : pre[i + 1]) - pre[i];   /* rows [r, end) of v */
        /* row r's offset in v (a) and in out (b, start added along dim), stepped per row */
        nn_odo_t od;
        nn_odo_start(&od, last, v->shape, v->stride, o->stride, r);
        const int64_t len = v->shape[last], ostart = start * o->stride[p->dim];
        const bool dense = v->dtype == o->dtype && (len == 1 || (v->stride[last] == 1 && o->stride[last] == 1));
        const int64_t vsz = (int64_t)nn_dtype_size(v->dtype);
        for (; r < end; r++, nn_odo_next(&od, last, v->shape, v->stride, o->stride)) {
            char *dst = o->data + (ostart + od.b) * (int64_t)osz;
            if (dense)   /* same dtype, dense rows */
                memcpy(dst, v->data + od.a * vsz, (size_t)len * osz);
            else {
                nn_load(ct, buf, v->data + od.a * vsz, v->stride[last], v->dtype, len);
                nn_store(ct, dst, o->stride[last], o->dtype, buf, len);
            }
        }
        g = pre[i] + end;
    }
    free(buf);
    return ACL_SUCCESS;
}

static aclError cat_run(nn_exec_t *ex)
{
    cat_params_t *p = (cat_params_t *)ex->params;
    for (int32_t i = 0; i < p->n; i++) {   /* the list's tensors are not in ex->v: check them here */
        nn_view_t *v = &p->in[i];
        if (!v->numel)
            continue;
        if (!v->data)
            return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: tensors[%d] has no data (tensorData was NULL) but %lld "
                          "elements", ex->api, i, (long long)v->numel);
        size_t isz = nn_dtype_size(v->dtype);
        if (aclsimCheckKernelOperand(v->data + v->lo * (int64_t)isz, (uint64_t)(v->hi - v->lo) * isz, ex->device,
                                     "tensors[i]", NULL) != ACL_SUCCESS) {
            const char *m = aclGetRecentErrMsg();
            return nn_err(ACLNN_ERR_PARAM_INVALID, "%s: tensors[%d]: %s", ex->api, i, m ? m : "not accessible");
        }
    }
    if (!p->total_rows)
        return ACL_SUCCESS;
    cat_job_t j = {ex, p, 0};
    uint32_t nb = nn_blocks(ex, ex->v[p->vo].numel, NN_BLOCK_GRAIN);
    if ((int64_t)nb > p->total_rows)
        nb = (uint32_t)p->total_rows;
    j.per = (p->total_rows + nb - 1) / nb;
    nb = (uint32_t)((p->total_rows + j.per - 1) / j.per);
    return nn_parallel(ex, nb, cat_block, &j);
}

/* a legacy empty 1-D tensor torch.cat skips */
static bool cat_skipped(const nn_tensor_t *t, int32_t ndim) { return t->ndim == 1 && t->shape[0] == 0 && ndim != 1; }

NN_API aclnnStatus aclnnCatGetWorkspaceSize(const aclTensorList *tensors, int64_t dim, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnCat";
    NN_OUTPTRS(api);
    if (!tensors)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: tensors must not be NULL", api);
    if (nn_obj_kind(tensors) != NN_KIND_TENSORLIST)
        return NN_PARAM("%s: tensors %p is not a live aclTensorList", api, (const void *)tensors);
    const nn_tensorlist_t *l = (const nn_tensorlist_t *)tensors;
    const nn_tensor_t *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (l->n == 0)
        return NN_PARAM("%s: tensors is an empty list (torch.cat expects a non-empty list)", api);
    if (l->n > CAT_MAX_TENSORS)
        return NN_PARAM("%s: %llu tensors; the simulator concatenates at most %d in one call", api,
                        (unsigned long long)l->n, CAT_MAX_TENSORS);
    char nm[32], s1[160], s2[160];
    const nn_tensor_t *ref = NULL;
    for (uint64_t i = 0; i < l->n; i++) {
        snprintf(nm, sizeof nm, "tensors[%llu]", (unsigned long long)i);
        const nn_tensor_t *t;
        if ((rc = nn_tensor_arg(api, nm, (const aclTensor *)l->v[i], false, &t)))
            return rc;
        if (!(nn_is_float(t->dtype) || nn_is_int(t->dtype) || t->dtype == ACL_BOOL))
            return NN_PARAM("%s: %s has dtype %s, which the simulator does not support", api, nm,
                            nn_dtype_name(t->dtype));
        if (!nn_can_cast(t->dtype, o->dtype))
            return NN_PARAM("%s: %s has dtype %s, which cannot be cast to out's dtype %s", api, nm,
                            nn_dtype_name(t->dtype), nn_dtype_name(o->dtype));
        if (!ref && !(t->ndim == 1 && t->shape[0] == 0))
            ref = t;
    }
    if (!ref)   /* every tensor is an empty 1-D tensor */
        ref = l->v[0];
    if (ref->ndim == 0)
        return NN_PARAM("%s: zero-dimensional tensor (tensors[0]) cannot be concatenated", api);
    int32_t d;
    if (!nn_wrap_dim(dim, ref->ndim, &d))
        return NN_PARAM("%s: dim %lld is out of range for %dD tensors (expected [%d, %d])", api, (long long)dim,
                        ref->ndim, -ref->ndim, ref->ndim - 1);
    int64_t want[NN_MAX_DIMS];
    memcpy(want, ref->shape, sizeof want);
    want[d] = 0;
    for (uint64_t i = 0; i < l->n; i++) {
        const nn_tensor_t *t = l->v[i];
        if (cat_skipped(t, ref->ndim))
            continue;
        if (t->ndim != ref->ndim)
            return NN_PARAM("%s: tensors must have the same number of dims: tensors[%llu] has %d, expected %d", api,
                            (unsigned long long)i, t->ndim, ref->ndim);
        for (int32_t k = 0; k < t->ndim; k++)
            if (k != d && t->shape[k] != ref->shape[k])
                return NN_PARAM("%s: sizes of tensors must match except in dimension %d: tensors[%llu] has shape %s, "
                                "expected %lld in dim %d (as %s)", api, d, (unsigned long long)i,
                                nn_shape_str(s1, sizeof s1, t->shape, t->ndim), (long long)ref->shape[k], k,
                                nn_shape_str(s2, sizeof s2, ref->shape, ref->ndim));
        want[d] += t->shape[d];
    }
    if (!nn_same_shape(o, want, ref->ndim))
        return NN_PARAM("%s: out has shape %s, expected %s", api, nn_shape_str(s1, sizeof s1, o->shape, o->ndim),
                        nn_shape_str(s2, sizeof s2, want, ref->ndim));
    int32_t n = (int32_t)l->n;   /* every tensor is kept (a skipped one has no rows): inputs are numbered in order */
    size_t psize = sizeof(cat_params_t) + (size_t)n * sizeof(nn_view_t) + (size_t)(n + 1) * sizeof(int64_t);
    nn_exec_t *ex = nn_exec_new(api, cat_run, ACLSIM_ENGINE_VECTOR, psize);
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    cat_params_t *p = (cat_params_t *)ex->params;
    p->vo = nn_exec_add(ex, o, "out", true);
    p->dim = d;
    p->n = n;
    int64_t *pre = cat_prefix(p);
    int32_t k = 0;
    pre[0] = 0;
    for (uint64_t i = 0; i < l->n; i++) {
        nn_view_init(&p->in[k], l->v[i], "tensors[i]", false);
        pre[k + 1] = pre[k] + cp_rows(&p->in[k]);
        k++;
    }
    p->total_rows = pre[n];
    ex->nxv = n;   /* the list's tensors are the executor's inputs 0..n-1 (address swaps) */
    ex->xv_off = (uint32_t)offsetof(cat_params_t, in);
    const nn_view_t *ov = &ex->v[p->vo];
    for (int32_t dd = 0; dd < ov->ndim; dd++)
        if (ov->shape[dd] > 1 && ov->stride[dd] == 0) {
            free(ex);
            return NN_PARAM("%s: out has stride 0 in dim %d: more than one element of the written-to tensor refers "
                            "to a single memory location", api, dd);
        }
    for (int32_t i = 0; i < n; i++)
        if (nn_views_overlap(ov, &p->in[i])) {
            free(ex);
            return NN_PARAM("%s: out overlaps tensors[%d] in memory", api, i);
        }
    ex->cost_ns = (uint64_t)(o->numel * 2);
    ex->cores = (uint32_t)(o->numel / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnCat(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnCat", workspace, workspaceSize, executor, stream);
}

/* ================================================================== constant pad */

typedef struct pad_params {
    int32_t vs, vo;
    int64_t left[NN_MAX_DIMS];     /* per dim: pad before (negative: cropped) */
    union {
        double f;
        int64_t i;
    } value;
    int64_t rows;
} pad_params_t;

typedef struct pad_job {
    nn_exec_t *ex;
    pad_params_t *p;
    int64_t per;
} pad_job_t;

static aclError pad_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    pad_job_t *j = arg;
    pad_params_t *p = j->p;
    const nn_view_t *s = &j->ex->v[p->vs], *o = &j->ex->v[p->vo];
    int32_t nd = o->ndim, last = nd - 1;
    int64_t a = (int64_t)bi * j->per, b = a + j->per;
    if (b > p->rows)
        b = p->rows;
    int ct = cp_ct(o->dtype);
    int64_t OW = nd ? o->shape[last] : 1, IW = nd ? s->shape[last] : 1, L = nd ? p->left[last] : 0;
    char *buf = malloc((size_t)(OW ? OW : 1) * 8);
    if (!buf)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", j->ex->api);
    for (int64_t r = a; r < b; r++) {
        /* the input row this output row reads, if any */
        int64_t ioff = 0, rr = r;
        bool inside = true;
        for (int32_t d = nd - 2; d >= 0; d--) {
            int64_t oi = rr % o->shape[d];
            rr /= o->shape[d];
            int64_t ii = oi - p->left[d];
            if (ii < 0 || ii >= s->shape[d])
                inside = false;
            else
                ioff += ii * s->stride[d];
        }
        int64_t c0 = 0, c1 = 0;   /* output columns [c0, c1) come from the input */
        if (inside) {
            c0 = L > 0 ? L : 0;
            c1 = L + IW < OW ? L + IW : OW;
            if (c1 < c0)
                c1 = c0;
        }
        for (int64_t c = 0; c < OW; c++) {
            if (c >= c0 && c < c1)
                continue;
            if (ct == CT_F64)
                ((double *)(void *)buf)[c] = p->value.f;
            else
                ((int64_t *)(void *)buf)[c] = p->value.i;
        }
        if (c1 > c0)
            nn_load(ct, buf + c0 * 8, cp_ptr(s, ioff + (c0 - L) * (nd ? s->stride[last] : 0)), nd ? s->stride[last] : 1,
                    s->dtype, c1 - c0);
        nn_store(ct, cp_ptr(o, cp_row_off(o, r, -1, 0)), nd ? o->stride[last] : 1, o->dtype, buf, OW);
    }
    free(buf);
    return ACL_SUCCESS;
}

static aclError pad_run(nn_exec_t *ex)
{
    pad_params_t *p = (pad_params_t *)ex->params;
    if (!ex->v[p->vo].numel)
        return ACL_SUCCESS;
    pad_job_t j = {ex, p, 0};
    uint32_t nb = nn_blocks(ex, ex->v[p->vo].numel, NN_BLOCK_GRAIN);
    if ((int64_t)nb > p->rows)
        nb = (uint32_t)p->rows;
    j.per = (p->rows + nb - 1) / nb;
    nb = (uint32_t)((p->rows + j.per - 1) / j.per);
    return nn_parallel(ex, nb, pad_block, &j);
}

NN_API aclnnStatus aclnnConstantPadNdGetWorkspaceSize(const aclTensor *self, const aclIntArray *pad,
                                                      const aclScalar *value, aclTensor *out, uint64_t *workspaceSize,
                                                      aclOpExecutor **executor)
{
    static const char api[] = "aclnnConstantPadNd";
    NN_OUTPTRS(api);
    const nn_tensor_t *s, *o;
    const nn_intarray_t *pd;
    const nn_scalar_t *val;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &s)) ||
        (rc = nn_intarray_arg(api, "pad", pad, false, &pd)) || (rc = nn_scalar_arg(api, "value", value, &val)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (!(nn_is_float(s->dtype) || nn_is_int(s->dtype) || s->dtype == ACL_BOOL))
        return NN_PARAM("%s: self has dtype %s, which the simulator does not support", api, nn_dtype_name(s->dtype));
    if (o->dtype != s->dtype)
        return NN_PARAM("%s: out has dtype %s but self has %s (they must match)", api, nn_dtype_name(o->dtype),
                        nn_dtype_name(s->dtype));
    if (pd->n % 2)
        return NN_PARAM("%s: pad must have an even number of values ((left, right) pairs), got %llu", api,
                        (unsigned long long)pd->n);
    if (pd->n / 2 > (uint64_t)s->ndim)
        return NN_PARAM("%s: pad has %llu (left, right) pairs but self has only %d dims", api,
                        (unsigned long long)(pd->n / 2), s->ndim);
    int64_t want[NN_MAX_DIMS];
    int64_t left[NN_MAX_DIMS] = {0};
    memcpy(want, s->shape, sizeof want);
    char s1[160], s2[160];
    for (uint64_t k = 0; k < pd->n / 2; k++) {
        int32_t d = s->ndim - 1 - (int32_t)k;
        int64_t l = pd->v[2 * k], r = pd->v[2 * k + 1];
        if ((l > 0 && s->shape[d] > INT64_MAX / 4 - l) || (r > 0 && r > INT64_MAX / 4) || l < -INT64_MAX / 4 ||
            r < -INT64_MAX / 4)
            return NN_PARAM("%s: pad values (%lld, %lld) of dim %d are too large", api, (long long)l, (long long)r, d);
        want[d] = s->shape[d] + l + r;
        left[d] = l;
        if (want[d] < 0)
            return NN_PARAM("%s: dim %d of size %lld with padding (%lld, %lld) would have negative size %lld", api, d,
                            (long long)s->shape[d], (long long)l, (long long)r, (long long)want[d]);
    }
    if (!nn_same_shape(o, want, s->ndim))
        return NN_PARAM("%s: out has shape %s, expected %s", api, nn_shape_str(s1, sizeof s1, o->shape, o->ndim),
                        nn_shape_str(s2, sizeof s2, want, s->ndim));
    nn_exec_t *ex = nn_exec_new(api, pad_run, ACLSIM_ENGINE_VECTOR, sizeof(pad_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    pad_params_t *p = (pad_params_t *)ex->params;
    p->vs = nn_exec_add(ex, s, "self", false);
    p->vo = nn_exec_add(ex, o, "out", true);
    memcpy(p->left, left, sizeof left);
    if (nn_is_float(o->dtype))
        p->value.f = val->is_float ? val->f : (double)val->i;
    else
        p->value.i = val->is_float ? nn_d2i64(val->f) : val->i;
    const nn_view_t *ov = &ex->v[p->vo];
    p->rows = ov->numel ? (ov->ndim ? ov->numel / ov->shape[ov->ndim - 1] : 1) : 0;
    if ((rc = nn_check_output_overlap(api, ex, p->vo, false))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)(o->numel * 2);
    ex->cores = (uint32_t)(o->numel / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnConstantPadNd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                      aclrtStream stream)
{
    return nn_launch("aclnnConstantPadNd", workspace, workspaceSize, executor, stream);
}
