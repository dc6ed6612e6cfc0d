/* canna simulator op library: the pointwise engine of the activation, dropout and loss families
 * (declared in opsim.h): out = f(inputs...) element by element, up to NN_PW_MAX_IN inputs that
 * broadcast to out's shape, any strides and float dtypes.
 *
 * The output's index space (size-1 dims dropped, dims contiguous for every operand merged — the
 * row-major order, and so each element's flat index, is unchanged) is cut into ranges, one per
 * AI-core block; each range is walked in chunks of up to PW_CHUNK elements along the innermost dim.
 * Every operand is converted into a per-block buffer of the compute type (an input of the compute
 * type with inner stride 1 is read in place), the kernel runs on the buffers, and the result is
 * converted back into the output. */
#include "opsim.h"

#define PW_CHUNK 1024

typedef struct pw_layout {
    int32_t ndim, nin;
    int64_t shape[NN_MAX_DIMS];
    int64_t st[NN_PW_MAX_IN + 1][NN_MAX_DIMS];   /* [0] output, [1 + i] input i; 0 = broadcast */
    char *base[NN_PW_MAX_IN + 1];
    aclDataType dt[NN_PW_MAX_IN + 1];
    int64_t numel;
} pw_layout_t;

typedef struct pw_job {
    const pw_layout_t *l;
    nn_pw_fn fn;
    int ct;
    const void *params;
    int64_t per;
} pw_job_t;

static aclDataType ct_dtype(int ct) { return ct == CT_F64 ? ACL_DOUBLE : ACL_FLOAT; }

static void pw_layout(pw_layout_t *l, int nin, const nn_view_t *const *in, const nn_view_t *out)
{
    int32_t nd = out->ndim, nops = 1 + nin;
    int64_t st[NN_PW_MAX_IN + 1][NN_MAX_DIMS];
    const nn_view_t *v[NN_PW_MAX_IN + 1];
    v[0] = out;
    for (int k = 0; k < nin; k++)
        v[1 + k] = in[k];
    for (int k = 0; k < nops; k++) {
        l->base[k] = v[k]->data;
        l->dt[k] = v[k]->dtype;
        for (int32_t d = 0; d < nd; d++) {
            int32_t vd = d - (nd - v[k]->ndim);   /* right-aligned */
            st[k][d] = (vd < 0 || v[k]->shape[vd] == 1) ? 0 : v[k]->stride[vd];
        }
    }
    int32_t m = 0;
    for (int32_t d = 0; d < nd; d++) {
        if (out->shape[d] == 1)
            continue;
        if (m > 0) {
            bool merge = true;
            for (int k = 0; k < nops; k++)
                if (l->st[k][m - 1] != st[k][d] * out->shape[d])
                    merge = false;
            if (merge) {
                l->shape[m - 1] *= out->shape[d];
                for (int k = 0; k < nops; k++)
                    l->st[k][m - 1] = st[k][d];
                continue;
            }
        }
        l->shape[m] = out->shape[d];
        for (int k = 0; k < nops; k++)
            l->st[k][m] = st[k][d];
        m++;
    }
    if (m == 0) {
        l->shape[0] = 1;
        for (int k = 0; k < nops; k++)
            l->st[k][0] = 0;
        m = 1;
    }
    l->ndim = m;
    l->nin = nin;
    l->numel = out->numel;
}

static void pw_range(const pw_job_t *j, int64_t lo, int64_t hi)
{
    const pw_layout_t *l = j->l;
    const int32_t nd = l->ndim, in = nd - 1, nops = 1 + l->nin;
    const int ct = j->ct;
    const aclDataType cdt = ct_dtype(ct);
    const size_t csz = nn_ct_size(ct);
    size_t isz[NN_PW_MAX_IN + 1];
    for (int k = 0; k < nops; k++)
        isz[k] = nn_dtype_size(l->dt[k]);
    int64_t idx[NN_MAX_DIMS];
    int64_t rem = lo;
    for (int32_t d = nd - 1; d >= 0; d--) {
        idx[d] = rem % l->shape[d];
        rem /= l->shape[d];
    }
    _Alignas(64) unsigned char buf[NN_PW_MAX_IN + 1][PW_CHUNK * 8];
    const int64_t inner = l->shape[in];
    int64_t pos = lo;
    while (pos < hi) {
        int64_t n = inner - idx[in];
        if (n > hi - pos)
            n = hi - pos;
        if (n > PW_CHUNK)
            n = PW_CHUNK;
        char *ptr[NN_PW_MAX_IN + 1];
        for (int k = 0; k < nops; k++) {
            int64_t off = 0;
            for (int32_t d = 0; d < nd; d++)
                off += idx[d] * l->st[k][d];
            ptr[k] = l->base[k] + off * (int64_t)isz[k];
        }
        const void *src[NN_PW_MAX_IN];
        for (int i = 0; i < l->nin; i++) {
            int k = 1 + i;
            int64_t s = l->st[k][in];
            if (l->dt[k] == cdt && s == 1) {
                src[i] = ptr[k];
            } else {
                nn_load(ct, buf[k], ptr[k], s, l->dt[k], s == 0 ? 1 : n);
                for (int64_t e = 1; s == 0 && e < n; e++)
                    memcpy(buf[k] + e * csz, buf[k], csz);
                src[i] = buf[k];
            }
        }
        bool direct = l->dt[0] == cdt && l->st[0][in] == 1;
        void *dst = direct ? (void *)ptr[0] : (void *)buf[0];
        j->fn(n, pos, dst, src, j->params);
        if (!direct)
            nn_store(ct, ptr[0], l->st[0][in], l->dt[0], buf[0], n);
        pos += n;
        idx[in] += n;
        for (int32_t d = in; d > 0 && idx[d] >= l->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

static aclError pw_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    const pw_job_t *j = arg;
    int64_t lo = (int64_t)bi * j->per, hi = lo + j->per;
    if (hi > j->l->numel)
        hi = j->l->numel;
    if (lo < hi)
        pw_range(j, lo, hi);
    return ACL_SUCCESS;
}

aclError nn_pw_apply(nn_exec_t *ex, const nn_pw_kernel_t *k, int ct, int nin, const nn_view_t *const *in,
                     const nn_view_t *out, const void *params)
{
    if (!out->numel)
        return ACL_SUCCESS;
    pw_layout_t l;
    pw_layout(&l, nin, in, out);
    pw_job_t j = {&l, ct == CT_F64 ? k->f64 : k->f32, ct, params, 0};
    uint32_t nb = nn_blocks(ex, l.numel * (k->weight > 0 ? k->weight : 1), NN_BLOCK_GRAIN);
    int64_t per = (l.numel + nb - 1) / nb;
    per = (per + 63) & ~(int64_t)63;
    j.per = per;
    nb = (uint32_t)((l.numel + per - 1) / per);
    return nn_parallel(ex, nb, pw_block, &j);
}

/* ------------------------------------------------------------------ plain pointwise ops */

typedef struct pw_exec {
    const nn_pw_kernel_t *k;
    int32_t ct, nin;
    int32_t view[NN_PW_MAX_IN + 1];   /* [0] output */
    _Alignas(16) unsigned char params[NN_PW_PARAMS];
} pw_exec_t;

static aclError pw_run(nn_exec_t *ex)
{
    pw_exec_t *p = (pw_exec_t *)ex->params;
    const nn_view_t *in[NN_PW_MAX_IN];
    for (int i = 0; i < p->nin; i++)
        in[i] = &ex->v[p->view[1 + i]];
    return nn_pw_apply(ex, p->k, p->ct, p->nin, in, &ex->v[p->view[0]], p->params);
}

aclnnStatus nn_pw_check_float(const char *api, const char *name, const nn_tensor_t *t)
{
    if (nn_is_float(t->dtype))
        return ACLNN_SUCCESS;
    return NN_PARAM("%s: %s has dtype %s, which is not supported (expected float32, float16, bfloat16 or float64)",
                    api, name, nn_dtype_name(t->dtype));
}

aclnnStatus nn_pw_check_broadcast(const char *api, const char *name, const nn_tensor_t *t, const int64_t *shape,
                                  int32_t ndim)
{
    bool ok = t->ndim <= ndim;
    for (int32_t d = 0; ok && d < t->ndim; d++) {
        int64_t s = t->shape[t->ndim - 1 - d];
        ok = s == 1 || s == shape[ndim - 1 - d];
    }
    if (ok)
        return ACLNN_SUCCESS;
    char s1[160], s2[160];
    return NN_PARAM("%s: %s of shape %s does not broadcast to the result's shape %s", api, name,
                    nn_shape_str(s1, sizeof s1, t->shape, t->ndim), nn_shape_str(s2, sizeof s2, shape, ndim));
}

aclnnStatus nn_pw_make(const char *api, const nn_pw_kernel_t *k, int ct, int nin, const nn_tensor_t *const *in,
                       const char *const *names, const nn_tensor_t *out, const char *oname, const void *params,
                       size_t psize, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    aclnnStatus rc;
    if (nin < 1 || nin > NN_PW_MAX_IN || psize > NN_PW_PARAMS)
        return nn_err(ACLNN_ERR_INNER, "%s: bad pointwise op definition", api);
    for (int i = 0; i < nin; i++)
        if ((rc = nn_pw_check_float(api, names[i], in[i])) ||
            (rc = nn_pw_check_broadcast(api, names[i], in[i], out->shape, out->ndim)))
            return rc;
    if ((rc = nn_pw_check_float(api, oname, out)))
        return rc;
    nn_exec_t *ex = nn_exec_new(api, pw_run, ACLSIM_ENGINE_VECTOR, sizeof(pw_exec_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    pw_exec_t *p = (pw_exec_t *)ex->params;
    p->k = k;
    p->ct = ct;
    p->nin = nin;
    if (psize)
        memcpy(p->params, params, psize);
    for (int i = 0; i < nin; i++)
        p->view[1 + i] = nn_exec_add(ex, in[i], names[i], false);
    p->view[0] = nn_exec_add(ex, out, oname, true);
    if ((rc = nn_check_output_overlap(api, ex, p->view[0], true))) {
        free(ex);
        return rc;
    }
    int64_t bytes = 0;
    for (int32_t i = 0; i < ex->nview; i++)
        bytes += ex->v[i].numel * (int64_t)nn_dtype_size(ex->v[i].dtype);
    ex->cost_ns = (uint64_t)(bytes / 16 + out->numel * (k->weight > 1 ? k->weight - 1 : 0) / 4);
    ex->cores = (uint32_t)(out->numel * (k->weight > 0 ? k->weight : 1) / (1024 * 1024) + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}
