/* canna simulator op library: indexing ops: aclnnEmbedding, aclnnEmbeddingDenseBackward, aclnnGather
 * and aclnnScatterAdd (prototypes: hicann/ops-nn index/embedding, index/embedding_dense_grad_v2,
 * index/gather_elements_v2, index/scatter_elements_v2, op_api/aclnn_*.h).
 *
 * Indices are int32 or int64 and must lie in [0, size) (PyTorch's rule: no negative indices). They
 * are read from the data, so they are checked at run time, in one pass before anything is written:
 * an index out of range fails the task with ACLNN_ERR_PARAM_INVALID and a message naming it (the
 * stream reports it at the next synchronize), never a wild access. Embedding rows and gathered
 * elements are copied bit for bit (any dtype); the additions of EmbeddingDenseBackward and
 * ScatterAdd go through double (floats) or int64 (integers), in index order, so results are
 * deterministic; their blocks own disjoint output rows / lines, so no two blocks write one element. */
#include "opsim.h"

#pragma GCC optimize("O3")

/* linear position i of a view (row-major over its shape) -> element offset */
static int64_t ix_off(const nn_view_t *v, int32_t ndim, int64_t i)
{
    int64_t off = 0;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->stride[d];
        i /= v->shape[d];
    }
    return off;
}

static inline char *ix_ptr(const nn_view_t *v, int64_t off) { return v->data + off * (int64_t)nn_dtype_size(v->dtype); }

static aclnnStatus ix_int_tensor(const char *api, const char *name, const nn_tensor_t *t)
{
    if (t->dtype != ACL_INT32 && t->dtype != ACL_INT64)
        return NN_PARAM("%s: %s has dtype %s (expected int64 or int32 indices)", api, name, nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

static aclnnStatus ix_known(const char *api, const char *name, const nn_tensor_t *t)
{
    if (!nn_dtype_size(t->dtype))
        return NN_PARAM("%s: %s has dtype %s, which the simulator does not support", api, name,
                        nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

static bool ix_same_view(const nn_view_t *a, const nn_view_t *b)
{
    if (a->data != b->data || a->ndim != b->ndim || a->dtype != b->dtype)
        return false;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->stride[d] != b->stride[d]))
            return false;
    return true;
}

/* the written view w must not overlap any other view (except `same`, when exactly the same view) */
static aclnnStatus ix_overlap(const char *api, const nn_exec_t *ex, int32_t w, int32_t same)
{
    const nn_view_t *o = &ex->v[w];
    for (int32_t d = 0; d < o->ndim; d++)
        if (o->shape[d] > 1 && o->stride[d] == 0)
            return NN_PARAM("%s: %s has stride 0 in dim %d: more than one element of the written-to tensor refers "
                            "to a single memory location", api, o->name, d);
    for (int32_t k = 0; k < ex->nview; k++) {
        if (k == w || !nn_views_overlap(o, &ex->v[k]))
            continue;
        if (k == same && ix_same_view(o, &ex->v[k]))
            continue;
        return NN_PARAM("%s: %s overlaps %s in memory (only an exact in-place alias of self is supported)", api,
                        o->name, ex->v[k].name);
    }
    return ACLNN_SUCCESS;
}

/* every index of view vi in [0, bound): first offender reported (pos: its linear position) */
static aclError ix_check(const nn_exec_t *ex, int32_t vi, int64_t bound, const char *what)
{
    const nn_view_t *v = &ex->v[vi];
    for (int64_t i = 0; i < v->numel; i++) {
        int64_t k = nn_get_i64(ix_ptr(v, ix_off(v, v->ndim, i)), v->dtype);
        if (k < 0 || k >= bound)
            return nn_err(ACLNN_ERR_PARAM_INVALID, "%s: index %lld at position %lld of %s is out of range: %s has "
                          "size %lld (valid indices are 0 to %lld)", ex->api, (long long)k, (long long)i, v->name,
                          what, (long long)bound, (long long)bound - 1);
    }
    return ACL_SUCCESS;
}

static void ix_split(const nn_exec_t *ex, int64_t n, int64_t work, uint32_t *nb, int64_t *per)
{
    uint32_t b = nn_blocks(ex, work, NN_BLOCK_GRAIN);
    if ((int64_t)b > n)
        b = (uint32_t)(n ? n : 1);
    *per = n ? (n + b - 1) / b : 1;
    *nb = n ? (uint32_t)((n + *per - 1) / *per) : 1;
}

/* ================================================================== embedding */

typedef struct emb_params {
    int32_t vw, vi, vo, vg;
    int64_t V, D, n;               /* rows of weight / out, row length, index count */
    int64_t pad;                   /* backward: padding row (-1: none) */
    bool backward, scale;
    int32_t gnd;                   /* backward: grad's leading dims */
} emb_params_t;

typedef struct ix_job {
    nn_exec_t *ex;
    void *p;
    int64_t per;
    int64_t *counts;
} ix_job_t;

NN_CLONES static void add_row_f32(float *restrict d, const float *restrict g, int64_t n)
{
    for (int64_t c = 0; c < n; c++)
        d[c] += g[c];
}

static aclError emb_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    ix_job_t *j = arg;
    nn_exec_t *ex = j->ex;
    emb_params_t *p = j->p;
    const nn_view_t *vi = &ex->v[p->vi], *vo = &ex->v[p->vo];
    int64_t a = (int64_t)bi * j->per, b = a + j->per;
    int64_t rows = p->backward ? p->V : p->n;
    if (b > rows)
        b = rows;
    if (!p->backward) {   /* out row k = weight row indices[k] */
        const nn_view_t *vw = &ex->v[p->vw];
        size_t esz = nn_dtype_size(vw->dtype);
        for (int64_t k = a; k < b; k++) {
            int64_t r = nn_get_i64(ix_ptr(vi, ix_off(vi, vi->ndim, k)), vi->dtype);
            const char *src = ix_ptr(vw, r * vw->stride[0]);
            char *dst = ix_ptr(vo, ix_off(vo, vo->ndim - 1, k));
            int64_t ss = vw->stride[1], ds = vo->stride[vo->ndim - 1];
            if (ss == 1 && ds == 1) {
                memcpy(dst, src, (size_t)p->D * esz);
            } else {
                for (int64_t c = 0; c < p->D; c++)
                    memcpy(dst + c * ds * (int64_t)esz, src + c * ss * (int64_t)esz, esz);
            }
        }
        return ACL_SUCCESS;
    }
    /* backward: this block owns out rows [a, b) */
    const nn_view_t *vg = &ex->v[p->vg];
    if (vo->dtype == ACL_FLOAT && vg->dtype == ACL_FLOAT && vo->stride[1] == 1 && vg->stride[vg->ndim - 1] == 1 &&
        !p->scale) {
        /* float32 rows: zeroed with memset (0.0f is all-zero bits), each gradient row added in float
         * -- bit for bit the double path's result (a float sum rounded once from double is the
         * float sum) */
        for (int64_t r = a; r < b; r++)
            memset(ix_ptr(vo, r * vo->stride[0]), 0, (size_t)p->D * sizeof(float));
        for (int64_t k = 0; k < p->n; k++) {
            int64_t r = nn_get_i64(ix_ptr(vi, ix_off(vi, vi->ndim, k)), vi->dtype);
            if (r < a || r >= b || r == p->pad)
                continue;
            add_row_f32((float *)ix_ptr(vo, r * vo->stride[0]), (const float *)ix_ptr(vg, ix_off(vg, p->gnd, k)),
                        p->D);
        }
        return ACL_SUCCESS;
    }
    double *acc = malloc((size_t)(p->D ? p->D : 1) * 2 * sizeof(double));
    if (!acc)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
    double *row = acc + p->D;
    for (int64_t r = a; r < b; r++) {
        memset(acc, 0, (size_t)p->D * sizeof(double));
        nn_store(CT_F64, ix_ptr(vo, r * vo->stride[0]), vo->stride[1], vo->dtype, acc, p->D);
    }
    for (int64_t k = 0; k < p->n; k++) {
        int64_t r = nn_get_i64(ix_ptr(vi, ix_off(vi, vi->ndim, k)), vi->dtype);
        if (r < a || r >= b || r == p->pad)
            continue;
        char *dst = ix_ptr(vo, r * vo->stride[0]);
        nn_load(CT_F64, acc, dst, vo->stride[1], vo->dtype, p->D);
        nn_load(CT_F64, row, ix_ptr(vg, ix_off(vg, p->gnd, k)), vg->stride[vg->ndim - 1], vg->dtype, p->D);
        double s = p->scale ? 1.0 / (double)j->counts[r] : 1.0;
        for (int64_t c = 0; c < p->D; c++)
            acc[c] += row[c] * s;
        nn_store(CT_F64, dst, vo->stride[1], vo->dtype, acc, p->D);
    }
    free(acc);
    return ACL_SUCCESS;
}

static aclError emb_run(nn_exec_t *ex)
{
    emb_params_t *p = (emb_params_t *)ex->params;
    aclError rc = ix_check(ex, p->vi, p->V, p->backward ? "numWeights" : "dim 0 of weight");
    if (rc)
        return rc;
    ix_job_t j = {ex, p, 0, NULL};
    if (p->backward && p->scale && p->n) {
        j.counts = calloc((size_t)p->V, sizeof(int64_t));
        if (!j.counts)
            return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", ex->api);
        const nn_view_t *vi = &ex->v[p->vi];
        for (int64_t k = 0; k < p->n; k++)
            j.counts[nn_get_i64(ix_ptr(vi, ix_off(vi, vi->ndim, k)), vi->dtype)]++;
    }
    int64_t rows = p->backward ? p->V : p->n;
    uint32_t nb;
    ix_split(ex, rows, rows * p->D, &nb, &j.per);
    rc = rows ? nn_parallel(ex, nb, emb_block, &j) : ACL_SUCCESS;
    free(j.counts);
    return rc;
}

static aclnnStatus emb_finish(const char *api, nn_exec_t *ex, int32_t vo, uint64_t *workspaceSize,
                              aclOpExecutor **executor)
{
    aclnnStatus rc = ix_overlap(api, ex, vo, -1);
    if (rc) {
        free(ex);
        return rc;
    }
    int64_t n = ex->v[vo].numel;
    ex->cost_ns = (uint64_t)(n * 2);
    ex->cores = (uint32_t)(n / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnEmbeddingGetWorkspaceSize(const aclTensor *weight, const aclTensor *indices, const aclTensor *out,
                                                  uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnEmbedding";
    NN_OUTPTRS(api);
    const nn_tensor_t *w, *ix, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "weight", weight, false, &w)) || (rc = ix_known(api, "weight", w)) ||
        (rc = nn_tensor_arg(api, "indices", indices, false, &ix)) || (rc = ix_int_tensor(api, "indices", ix)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    char s1[160], s2[160];
    if (w->ndim != 2)
        return NN_PARAM("%s: weight must be 2-D [num_embeddings, embedding_dim], got shape %s", api,
                        nn_shape_str(s1, sizeof s1, w->shape, w->ndim));
    if (ix->ndim > NN_MAX_DIMS - 1)
        return NN_PARAM("%s: indices has %d dims; out (indices' shape + [embedding_dim]) would exceed %d", api,
                        ix->ndim, NN_MAX_DIMS);
    int64_t want[NN_MAX_DIMS];
    memcpy(want, ix->shape, sizeof(int64_t) * (size_t)ix->ndim);
    want[ix->ndim] = w->shape[1];
    if (!nn_same_shape(o, want, ix->ndim + 1))
        return NN_PARAM("%s: out has shape %s, expected %s (indices' shape + [embedding_dim])", api,
                        nn_shape_str(s1, sizeof s1, o->shape, o->ndim), nn_shape_str(s2, sizeof s2, want, ix->ndim + 1));
    if (o->dtype != w->dtype)
        return NN_PARAM("%s: out has dtype %s but weight has %s (they must match)", api, nn_dtype_name(o->dtype),
                        nn_dtype_name(w->dtype));
    nn_exec_t *ex = nn_exec_new(api, emb_run, ACLSIM_ENGINE_VECTOR, sizeof(emb_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    emb_params_t *p = (emb_params_t *)ex->params;
    p->vw = nn_exec_add(ex, w, "weight", false);
    p->vi = nn_exec_add(ex, ix, "indices", false);
    p->vo = nn_exec_add(ex, o, "out", true);
    p->vg = -1;
    p->V = w->shape[0];
    p->D = w->shape[1];
    p->n = ix->numel;
    p->pad = -1;
    return emb_finish(api, ex, p->vo, workspaceSize, executor);
}

NN_API aclnnStatus aclnnEmbedding(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnEmbedding", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnEmbeddingDenseBackwardGetWorkspaceSize(const aclTensor *grad, const aclTensor *indices,
                                                               uint64_t numWeights, uint64_t paddingIdx,
                                                               bool scaleGradByFreq, const aclTensor *out,
                                                               uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnEmbeddingDenseBackward";
    NN_OUTPTRS(api);
    const nn_tensor_t *g, *ix, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "grad", grad, false, &g)) ||
        (rc = nn_tensor_arg(api, "indices", indices, false, &ix)) || (rc = ix_int_tensor(api, "indices", ix)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    char s1[160], s2[160];
    if (!nn_is_float(g->dtype))
        return NN_PARAM("%s: grad has dtype %s (expected float32, float16, bfloat16 or float64)", api,
                        nn_dtype_name(g->dtype));
    if (g->ndim < 1)
        return NN_PARAM("%s: grad must have at least 1 dim", api);
    int64_t D = g->shape[g->ndim - 1];
    if (g->ndim != ix->ndim + 1 || !nn_same_shape(ix, g->shape, ix->ndim))
        return NN_PARAM("%s: grad of shape %s does not match indices of shape %s (grad must be indices' shape + "
                        "[embedding_dim])", api, nn_shape_str(s1, sizeof s1, g->shape, g->ndim),
                        nn_shape_str(s2, sizeof s2, ix->shape, ix->ndim));
    if (numWeights > (uint64_t)INT64_MAX)
        return NN_PARAM("%s: numWeights %llu is too large", api, (unsigned long long)numWeights);
    int64_t want[2] = {(int64_t)numWeights, D};
    if (!nn_same_shape(o, want, 2))
        return NN_PARAM("%s: out has shape %s, expected %s ([numWeights, embedding_dim])", api,
                        nn_shape_str(s1, sizeof s1, o->shape, o->ndim), nn_shape_str(s2, sizeof s2, want, 2));
    if (o->dtype != g->dtype)
        return NN_PARAM("%s: out has dtype %s but grad has %s (they must match)", api, nn_dtype_name(o->dtype),
                        nn_dtype_name(g->dtype));
    nn_exec_t *ex = nn_exec_new(api, emb_run, ACLSIM_ENGINE_VECTOR, sizeof(emb_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    emb_params_t *p = (emb_params_t *)ex->params;
    p->backward = true;
    p->vg = nn_exec_add(ex, g, "grad", false);
    p->vi = nn_exec_add(ex, ix, "indices", false);
    p->vo = nn_exec_add(ex, o, "out", true);
    p->vw = -1;
    p->V = (int64_t)numWeights;
    p->D = D;
    p->n = ix->numel;
    p->pad = (int64_t)paddingIdx;   /* a negative paddingIdx (as int64) pads no row, as documented */
    if (p->pad < 0)
        p->pad = -1;
    p->scale = scaleGradByFreq;
    p->gnd = g->ndim - 1;
    return emb_finish(api, ex, p->vo, workspaceSize, executor);
}

NN_API aclnnStatus aclnnEmbeddingDenseBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                               aclrtStream stream)
{
    return nn_launch("aclnnEmbeddingDenseBackward", workspace, workspaceSize, executor, stream);
}

/* ================================================================== gather / scatter add */

typedef struct gs_params {
    int32_t vs, vi, vsrc, vo;
    int32_t dim, ndim;
    bool scatter;
    int64_t lines, len;            /* index: lines along dim (all other coordinates), their length */
} gs_params_t;

/* element offset in view v of line l (coordinates of every dim but `dim`, row-major over idx's
 * shape) at position t along dim */
static int64_t gs_off(const nn_view_t *v, const nn_view_t *idx, int32_t dim, int64_t l, int64_t t)
{
    int64_t off = t * (v->ndim ? v->stride[dim] : 0);
    for (int32_t d = idx->ndim - 1; d >= 0; d--) {
        if (d == dim)
            continue;
        off += (l % idx->shape[d]) * v->stride[d];
        l /= idx->shape[d];
    }
    return off;
}

static aclError gs_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    ix_job_t *j = arg;
    nn_exec_t *ex = j->ex;
    gs_params_t *p = j->p;
    const nn_view_t *vi = &ex->v[p->vi], *vo = &ex->v[p->vo];
    int64_t a = (int64_t)bi * j->per, b = a + j->per;
    if (b > p->lines)
        b = p->lines;
    if (!p->scatter) {   /* out[.., t, ..] = self[.., index[.., t, ..], ..] */
        const nn_view_t *vs = &ex->v[p->vs];
        size_t esz = nn_dtype_size(vs->dtype);
        for (int64_t l = a; l < b; l++)
            for (int64_t t = 0; t < p->len; t++) {
                int64_t k = nn_get_i64(ix_ptr(vi, gs_off(vi, vi, p->dim, l, t)), vi->dtype);
                memcpy(ix_ptr(vo, gs_off(vo, vi, p->dim, l, t)), ix_ptr(vs, gs_off(vs, vi, p->dim, l, k)), esz);
            }
        return ACL_SUCCESS;
    }
    /* scatter add: out[.., index[.., t, ..], ..] += src[.., t, ..]; one line of index reaches one
     * line of out, so lines are independent */
    const nn_view_t *vsrc = &ex->v[p->vsrc];
    bool fl = nn_is_float(vo->dtype);
    for (int64_t l = a; l < b; l++)
        for (int64_t t = 0; t < p->len; t++) {
            int64_t k = nn_get_i64(ix_ptr(vi, gs_off(vi, vi, p->dim, l, t)), vi->dtype);
            char *dst = ix_ptr(vo, gs_off(vo, vi, p->dim, l, k));
            const char *src = ix_ptr(vsrc, gs_off(vsrc, vi, p->dim, l, t));
            if (fl) {
                double v = nn_get_f64(dst, vo->dtype) + nn_get_f64(src, vsrc->dtype);
                nn_store(CT_F64, dst, 1, vo->dtype, &v, 1);
            } else {
                int64_t v = (int64_t)((uint64_t)nn_get_i64(dst, vo->dtype) + (uint64_t)nn_get_i64(src, vsrc->dtype));
                nn_store(CT_I64, dst, 1, vo->dtype, &v, 1);
            }
        }
    return ACL_SUCCESS;
}

/* out = self, element by element (bit copies), over blocks of elements */
typedef struct copy_job {
    const nn_view_t *s, *o;
    int64_t per;
} copy_job_t;

static aclError copy_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    copy_job_t *j = arg;
    size_t esz = nn_dtype_size(j->o->dtype);
    int64_t a = (int64_t)bi * j->per, b = a + j->per;
    if (b > j->o->numel)
        b = j->o->numel;
    for (int64_t i = a; i < b; i++)
        memcpy(ix_ptr(j->o, ix_off(j->o, j->o->ndim, i)), ix_ptr(j->s, ix_off(j->s, j->s->ndim, i)), esz);
    return ACL_SUCCESS;
}

static aclError gs_run(nn_exec_t *ex)
{
    gs_params_t *p = (gs_params_t *)ex->params;
    const nn_view_t *bound = &ex->v[p->scatter ? p->vo : p->vs];
    aclError rc = ix_check(ex, p->vi, bound->ndim ? bound->shape[p->dim] : 1, p->scatter ? "out's dim" : "self's dim");
    if (rc)
        return rc;
    if (p->scatter && !ix_same_view(&ex->v[p->vs], &ex->v[p->vo]) && ex->v[p->vo].numel) {
        copy_job_t c = {&ex->v[p->vs], &ex->v[p->vo], 0};
        uint32_t nb;
        ix_split(ex, c.o->numel, c.o->numel, &nb, &c.per);
        if ((rc = nn_parallel(ex, nb, copy_block, &c)))
            return rc;
    }
    if (!p->lines || !p->len)
        return ACL_SUCCESS;
    ix_job_t j = {ex, p, 0, NULL};
    uint32_t nb;
    ix_split(ex, p->lines, p->lines * p->len, &nb, &j.per);
    return nn_parallel(ex, nb, gs_block, &j);
}

/* index must have self's number of dims and fit it in every dim but `dim` (and src in every dim) */
static aclnnStatus gs_shapes(const char *api, const nn_tensor_t *s, const nn_tensor_t *ix, const nn_tensor_t *src,
                             int32_t d)
{
    char s1[160], s2[160];
    if (ix->ndim != s->ndim && !(ix->ndim <= 1 && s->ndim <= 1))
        return NN_PARAM("%s: index of shape %s must have as many dims as self of shape %s", api,
                        nn_shape_str(s1, sizeof s1, ix->shape, ix->ndim), nn_shape_str(s2, sizeof s2, s->shape, s->ndim));
    for (int32_t k = 0; k < ix->ndim && k < s->ndim; k++) {
        if (k != d && ix->shape[k] > s->shape[k])
            return NN_PARAM("%s: index of shape %s is larger than self of shape %s in dim %d (only dim %d may be)", api,
                            nn_shape_str(s1, sizeof s1, ix->shape, ix->ndim),
                            nn_shape_str(s2, sizeof s2, s->shape, s->ndim), k, d);
        if (src && ix->shape[k] > (src->ndim ? src->shape[k] : 1))
            return NN_PARAM("%s: index of shape %s is larger than src of shape %s in dim %d", api,
                            nn_shape_str(s1, sizeof s1, ix->shape, ix->ndim),
                            nn_shape_str(s2, sizeof s2, src->shape, src->ndim), k);
    }
    if (src && src->ndim != ix->ndim && !(ix->ndim <= 1 && src->ndim <= 1))
        return NN_PARAM("%s: src of shape %s must have as many dims as index of shape %s", api,
                        nn_shape_str(s1, sizeof s1, src->shape, src->ndim), nn_shape_str(s2, sizeof s2, ix->shape, ix->ndim));
    return ACLNN_SUCCESS;
}

static aclnnStatus gs_make(const char *api, bool scatter, const nn_tensor_t *s, int64_t dim, const nn_tensor_t *ix,
                           const nn_tensor_t *src, const nn_tensor_t *o, uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    int32_t d;
    if (!nn_wrap_dim(dim, s->ndim, &d))
        return NN_PARAM("%s: dim %lld is out of range for a %dD self (expected [%d, %d])", api, (long long)dim, s->ndim,
                        s->ndim ? -s->ndim : -1, s->ndim ? s->ndim - 1 : 0);
    aclnnStatus rc = gs_shapes(api, s, ix, src, d);
    if (rc)
        return rc;
    char s1[160], s2[160];
    const nn_tensor_t *like = scatter ? s : ix;
    if (!nn_same_shape(o, like->shape, like->ndim))
        return NN_PARAM("%s: out has shape %s, expected %s (%s's shape)", api, nn_shape_str(s1, sizeof s1, o->shape, o->ndim),
                        nn_shape_str(s2, sizeof s2, like->shape, like->ndim), scatter ? "self" : "index");
    if (o->dtype != s->dtype || (src && src->dtype != s->dtype))
        return NN_PARAM("%s: self (%s)%s and out (%s) must have the same dtype", api, nn_dtype_name(s->dtype),
                        src ? ", src" : "", nn_dtype_name(o->dtype));
    nn_exec_t *ex = nn_exec_new(api, gs_run, ACLSIM_ENGINE_VECTOR, sizeof(gs_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    gs_params_t *p = (gs_params_t *)ex->params;
    p->scatter = scatter;
    p->vs = nn_exec_add(ex, s, "self", false);   /* parameter order */
    p->vi = nn_exec_add(ex, ix, "index", false);
    p->vsrc = src ? nn_exec_add(ex, src, "src", false) : -1;
    p->vo = nn_exec_add(ex, o, "out", true);
    p->dim = d;
    p->ndim = ix->ndim;
    p->len = ix->ndim ? ix->shape[d] : 1;
    p->lines = p->len ? ix->numel / p->len : 0;
    if ((rc = ix_overlap(api, ex, p->vo, scatter ? p->vs : -1))) {
        free(ex);
        return rc;
    }
    ex->cost_ns = (uint64_t)((ix->numel + (scatter ? o->numel : 0)) * 4);
    ex->cores = (uint32_t)(ix->numel / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

static aclnnStatus gs_dtype(const char *api, const char *name, const nn_tensor_t *t)
{
    if (!(nn_is_float(t->dtype) || nn_is_int(t->dtype) || t->dtype == ACL_BOOL))
        return NN_PARAM("%s: %s has dtype %s, which the simulator does not support", api, name, nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclnnGatherGetWorkspaceSize(const aclTensor *self, const int64_t dim, const aclTensor *index,
                                               aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnGather";
    NN_OUTPTRS(api);
    const nn_tensor_t *s, *ix, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &s)) || (rc = gs_dtype(api, "self", s)) ||
        (rc = nn_tensor_arg(api, "index", index, false, &ix)) || (rc = ix_int_tensor(api, "index", ix)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    return gs_make(api, false, s, dim, ix, NULL, o, workspaceSize, executor);
}

NN_API aclnnStatus aclnnGather(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnGather", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnScatterAddGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                                   const aclTensor *src, aclTensor *out, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor)
{
    static const char api[] = "aclnnScatterAdd";
    NN_OUTPTRS(api);
    const nn_tensor_t *s, *ix, *sr, *o;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &s)) || (rc = gs_dtype(api, "self", s)) ||
        (rc = nn_tensor_arg(api, "index", index, false, &ix)) || (rc = ix_int_tensor(api, "index", ix)) ||
        (rc = nn_tensor_arg(api, "src", src, false, &sr)) ||
        (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (s->dtype == ACL_BOOL)
        return NN_PARAM("%s: self has dtype bool (scatter add needs a numeric dtype)", api);
    return gs_make(api, true, s, dim, ix, sr, o, workspaceSize, executor);
}

NN_API aclnnStatus aclnnScatterAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnScatterAdd", workspace, workspaceSize, executor, stream);
}
