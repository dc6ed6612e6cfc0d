/* canna simulator: fused optimizer steps (the aclnn optim family).
 *
 *   aclnnApplyAdamWV2  one AdamW (or Adam without L2 decay) step of one parameter: varRef, mRef,
 *                      vRef and, with amsgrad, maxGradNormOptionalRef are updated in place from
 *                      grad and the (already incremented) step count. Prototype and formula:
 *                      hiascend.com aclnn API "aclnnApplyAdamWV2" (hicann ops-nn
 *                      optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md).
 *   aclnnFusedSgd      one SGD step (weight decay, momentum, dampening, nesterov, maximize) of a
 *                      list of parameters, their gradients and momentum buffers, in place
 *                      (hicann ops-nn optim/fused_sgd/docs/aclnnFusedSgd.md); the formula is
 *                      torch.optim.SGD's.
 *
 * The element order of the arithmetic follows PyTorch's single-tensor optimizers
 * (torch/optim/adam.py `_single_tensor_adam`, torch/optim/sgd.py `_single_tensor_sgd`), so a step
 * matches plain PyTorch to the rounding of the compute type (float32 for float32 / float16 /
 * bfloat16, float64 for float64 — a simulator extension: CANN documents float16, bfloat16 and
 * float32). The hyperparameters are `float`, as the prototypes take them.
 *
 * Every operand is packed into the workspace in the compute type (any strides and the narrow
 * floats are handled there), updated, and the updated operands are unpacked back; operands that
 * already are disjoint contiguous arrays of the compute type are updated in place.
 */
#include "opsim.h"

/* ------------------------------------------------------------------ shared */

static aclnnStatus opt_float(const char *api, const char *name, const nn_tensor_t *t)
{
    if (!nn_is_float(t->dtype))
        return NN_PARAM("%s: %s has dtype %s (expected float32, float16, bfloat16 or float64)", api, name,
                        nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

static aclnnStatus opt_like(const char *api, const char *name, const nn_tensor_t *t, const char *refn,
                            const nn_tensor_t *ref)
{
    aclnnStatus rc = opt_float(api, name, t);
    if (rc)
        return rc;
    if (t->dtype != ref->dtype)
        return NN_PARAM("%s: %s has dtype %s but %s has dtype %s (they must match)", api, name, nn_dtype_name(t->dtype),
                        refn, nn_dtype_name(ref->dtype));
    if (!nn_same_shape(t, ref->shape, ref->ndim)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: %s has shape %s but %s has shape %s (they must match)", api, name,
                        nn_shape_str(s1, sizeof s1, t->shape, t->ndim), refn,
                        nn_shape_str(s2, sizeof s2, ref->shape, ref->ndim));
    }
    return ACLNN_SUCCESS;
}

/* every updated operand: no broadcast (stride-0) dim, no overlap with any other operand */
static aclnnStatus opt_outputs(const char *api, nn_exec_t *ex)
{
    for (int32_t i = 0; i < ex->nview; i++) {
        if (!ex->v[i].output)
            continue;
        aclnnStatus rc = nn_check_output_overlap(api, ex, i, false);
        if (rc)
            return rc;
    }
    return ACLNN_SUCCESS;
}

/* ------------------------------------------------------------------ aclnnApplyAdamWV2 */

typedef struct adamw_params {
    int ct;
    float lr, beta1, beta2, wd, eps;
    bool amsgrad, maximize;
    int32_t vvar, vm, vv, vmax, vgrad, vstep;
    int64_t n;
} adamw_params_t;

typedef struct adamw_job {
    const adamw_params_t *p;
    void *var, *m, *v, *mx;
    const void *g;
    double decay, step_size, bc2_sqrt;
} adamw_job_t;

/* PyTorch's lerp (aten/src/ATen/native/Lerp.h): exact at both ends */
#define LERP(a, b, w) ((w) < 0.5 ? (a) + (w) * ((b) - (a)) : (b) - ((b) - (a)) * (1 - (w)))
/* torch.maximum: NaN if either is NaN */
#define NANMAX(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))

#define ADAMW_LOOP(T)                                                                                          \
    do {                                                                                                       \
        T *var = (T *)j->var, *m = (T *)j->m, *v = (T *)j->v, *mx = (T *)j->mx;                              \
        const T *g = (const T *)j->g;                                                                          \
        const T w1 = (T)(1.0 - (double)p->beta1), b2 = (T)p->beta2, w2 = (T)(1.0 - (double)p->beta2);         \
        const T decay = (T)j->decay, nstep = (T)(-j->step_size), bc2s = (T)j->bc2_sqrt, eps = (T)p->eps;      \
        for (int64_t i = lo; i < hi; i++) {                                                                    \
            T gi = p->maximize ? -g[i] : g[i];                                                                 \
            T th = var[i];                                                                                     \
            if (p->wd != 0.0f)                                                                                 \
                th = th * decay;                                                                               \
            T mi = LERP(m[i], gi, w1);                                                                         \
            T vi = v[i] * b2;                                                                                  \
            vi = vi + w2 * gi * gi;                                                                            \
            T vd = vi;                                                                                         \
            if (p->amsgrad) {                                                                                  \
                vd = NANMAX(mx[i], vi);                                                                        \
                mx[i] = vd;                                                                                    \
            }                                                                                                  \
            T den = (T)(sqrt((double)vd)) / bc2s + eps;                                                        \
            var[i] = th + nstep * mi / den;                                                                    \
            m[i] = mi;                                                                                         \
            v[i] = vi;                                                                                         \
        }                                                                                                      \
    } while (0)

/* The float32 step without amsgrad or maximize (torch.optim.AdamW's defaults) on n contiguous
 * elements: the same arithmetic as ADAMW_LOOP(float) in the same order, with the loop-invariant
 * branches taken out and no aliasing, so that the compiler vectorizes it. (float)sqrt((double)x)
 * equals sqrtf(x): both are correctly rounded (double has more than 2 * 24 + 2 bits). With
 * wd == 0, decay is exactly 1 and th * decay is th. No contraction into fused multiply-adds:
 * PyTorch rounds every step. */
__attribute__((optimize("-O3", "-ffp-contract=off"))) NN_CLONES_NOFMA static void
adamw_f32_fast(int64_t n, float *restrict var, float *restrict m, float *restrict v, const float *restrict g,
               float w1, float b2, float w2, float decay, float nstep, float bc2s, float eps)
{
    if (w1 < 0.5f) {
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i], th = var[i] * decay, mi = m[i] + w1 * (gi - m[i]);
            float vi = v[i] * b2;
            vi = vi + w2 * gi * gi;
            float den = sqrtf(vi) / bc2s + eps;
            var[i] = th + nstep * mi / den;
            m[i] = mi;
            v[i] = vi;
        }
    } else {
        const float u1 = 1 - w1;
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i], th = var[i] * decay, mi = gi - (gi - m[i]) * u1;
            float vi = v[i] * b2;
            vi = vi + w2 * gi * gi;
            float den = sqrtf(vi) / bc2s + eps;
            var[i] = th + nstep * mi / den;
            m[i] = mi;
            v[i] = vi;
        }
    }
}

static aclError adamw_block(uint32_t b, uint32_t nb, void *arg)
{
    adamw_job_t *j = (adamw_job_t *)arg;
    const adamw_params_t *p = j->p;
    int64_t per = (p->n + nb - 1) / nb, lo = (int64_t)b * per, hi = lo + per < p->n ? lo + per : p->n;
    if (p->ct == CT_F32 && !p->amsgrad && !p->maximize) {
        if (hi > lo)
            adamw_f32_fast(hi - lo, (float *)j->var + lo, (float *)j->m + lo, (float *)j->v + lo,
                           (const float *)j->g + lo, (float)(1.0 - (double)p->beta1), (float)p->beta2,
                           (float)(1.0 - (double)p->beta2), (float)j->decay, (float)(-j->step_size),
                           (float)j->bc2_sqrt, (float)p->eps);
        return ACL_SUCCESS;
    }
    if (p->ct == CT_F64) {
        ADAMW_LOOP(double);
    } else {
        /* float32 arithmetic except the square root, taken in double and rounded (correctly rounded) */
        ADAMW_LOOP(float);
    }
    return ACL_SUCCESS;
}

static aclError adamw_run(nn_exec_t *ex)
{
    const adamw_params_t *p = (const adamw_params_t *)ex->params;
    if (!p->n)
        return ACL_SUCCESS;
    const nn_view_t *sv = &ex->v[p->vstep];
    double t = nn_get_f64(sv->data, sv->dtype);
    size_t bytes = nn_align64((size_t)p->n * nn_ct_size(p->ct));
    char *ws = ex->ws;
    adamw_job_t j = {.p = p};
    void **slot[5] = {&j.var, &j.m, &j.v, (void **)&j.g, &j.mx};
    int32_t idx[5] = {p->vvar, p->vm, p->vv, p->vgrad, p->vmax};
    int nslot = p->amsgrad ? 5 : 4;
    aclError rc = ACL_SUCCESS;
    /* operands that already are disjoint contiguous arrays of the compute type are updated where
     * they are (no pack, no unpack) */
    bool direct = true;
    for (int k = 0; k < nslot && direct; k++) {
        const nn_view_t *a = &ex->v[idx[k]];
        direct = nn_view_dense(a, p->ct);
        for (int q = 0; q < k && direct; q++)
            direct = !nn_views_overlap(a, &ex->v[idx[q]]);
    }
    for (int k = 0; k < nslot && !rc; k++) {
        if (direct) {
            *slot[k] = ex->v[idx[k]].data;
            continue;
        }
        *slot[k] = ws + (size_t)k * bytes;
        rc = nn_pack(ex, p->ct, *slot[k], &ex->v[idx[k]]);
    }
    if (rc)
        return rc;
    /* the step's scalars, as torch/optim/adam.py computes them (in double) */
    double lr = p->lr, b1 = p->beta1, b2 = p->beta2;
    j.decay = 1.0 - lr * (double)p->wd;
    j.step_size = lr / (1.0 - pow(b1, t));
    j.bc2_sqrt = sqrt(1.0 - pow(b2, t));
    uint32_t nb = nn_blocks(ex, p->n * 8, NN_BLOCK_GRAIN);
    rc = nn_parallel(ex, nb, adamw_block, &j);
    if (direct)
        return rc;
    int32_t outs[4] = {p->vvar, p->vm, p->vv, p->vmax};
    void *src[4] = {j.var, j.m, j.v, j.mx};
    for (int k = 0; k < (p->amsgrad ? 4 : 3) && !rc; k++)
        rc = nn_unpack(ex, p->ct, &ex->v[outs[k]], src[k]);
    return rc;
}

NN_API aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(aclTensor *varRef, aclTensor *mRef, aclTensor *vRef,
                                                     aclTensor *maxGradNormOptionalRef, const aclTensor *grad,
                                                     const aclTensor *step, float lr, float beta1, float beta2,
                                                     float weightDecay, float eps, bool amsgrad, bool maximize,
                                                     uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnApplyAdamWV2";
    NN_OUTPTRS(api);
    const nn_tensor_t *var, *m, *v, *mx, *g, *st;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "varRef", varRef, false, &var)) || (rc = opt_float(api, "varRef", var)) ||
        (rc = nn_tensor_arg(api, "mRef", mRef, false, &m)) || (rc = opt_like(api, "mRef", m, "varRef", var)) ||
        (rc = nn_tensor_arg(api, "vRef", vRef, false, &v)) || (rc = opt_like(api, "vRef", v, "varRef", var)) ||
        (rc = nn_tensor_arg(api, "maxGradNormOptionalRef", maxGradNormOptionalRef, !amsgrad, &mx)) ||
        (rc = nn_tensor_arg(api, "grad", grad, false, &g)) || (rc = opt_like(api, "grad", g, "varRef", var)) ||
        (rc = nn_tensor_arg(api, "step", step, false, &st)))
        return rc;
    if (!amsgrad)
        mx = NULL;   /* optional when amsgrad is false: not read, not written */
    if (mx && (rc = opt_like(api, "maxGradNormOptionalRef", mx, "varRef", var)))
        return rc;
    if (var->ndim < 1)
        return NN_PARAM("%s: varRef must have 1 to 8 dimensions, got a 0-d tensor (view it as shape [1])", api);
    if (st->numel != 1)
        return NN_PARAM("%s: step must have exactly 1 element, got shape %s", api, NN_SHAPE(st));
    if (st->dtype != ACL_INT64 && st->dtype != ACL_FLOAT)
        return NN_PARAM("%s: step has dtype %s (expected int64 or float32)", api, nn_dtype_name(st->dtype));
    nn_exec_t *ex = nn_exec_new(api, adamw_run, ACLSIM_ENGINE_VECTOR, sizeof(adamw_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    adamw_params_t *p = (adamw_params_t *)ex->params;
    p->ct = var->dtype == ACL_DOUBLE ? CT_F64 : CT_F32;
    p->lr = lr;
    p->beta1 = beta1;
    p->beta2 = beta2;
    p->wd = weightDecay;
    p->eps = eps;
    p->amsgrad = amsgrad;
    p->maximize = maximize;
    p->n = var->numel;
    /* the updated tensors are the executor's outputs (aclSetOutputTensorAddr numbers them in this
     * order: varRef, mRef, vRef, maxGradNormOptionalRef), grad and step its inputs */
    p->vvar = nn_exec_add(ex, var, "varRef", true);
    p->vm = nn_exec_add(ex, m, "mRef", true);
    p->vv = nn_exec_add(ex, v, "vRef", true);
    p->vmax = nn_exec_add(ex, mx, "maxGradNormOptionalRef", true);
    p->vgrad = nn_exec_add(ex, g, "grad", false);
    p->vstep = nn_exec_add(ex, st, "step", false);
    if ((rc = opt_outputs(api, ex))) {
        free(ex);
        return rc;
    }
    ex->ws_size = (uint64_t)(amsgrad ? 5 : 4) * nn_align64((size_t)p->n * nn_ct_size(p->ct));
    ex->cost_ns = (uint64_t)(p->n * 6);
    ex->cores = (uint32_t)(p->n / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnApplyAdamWV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                     aclrtStream stream)
{
    return nn_launch("aclnnApplyAdamWV2", workspace, workspaceSize, executor, stream);
}

/* ------------------------------------------------------------------ aclnnFusedSgd */

#define SGD_MAX_LIST 2   /* 3 operands per parameter + gradScale within NN_MAX_OPERANDS */

typedef struct sgd_params {
    int ct;
    float wd, mu, lr, damp;
    bool nesterov, maximize, first;
    int32_t n;                            /* list length */
    int32_t vp[SGD_MAX_LIST], vg[SGD_MAX_LIST], vb[SGD_MAX_LIST], vscale;
    int64_t numel[SGD_MAX_LIST];
} sgd_params_t;

typedef struct sgd_job {
    const sgd_params_t *p;
    void *th, *g, *buf;
    int64_t n;
    double scale;
    bool has_scale;
} sgd_job_t;

#define SGD_LOOP(T)                                                                                            \
    do {                                                                                                       \
        T *th = (T *)j->th, *g = (T *)j->g, *buf = (T *)j->buf;                                               \
        const T wd = (T)p->wd, mu = (T)p->mu, nlr = (T)(-(double)p->lr), w = (T)(1.0 - (double)p->damp);      \
        const T s = (T)j->scale;                                                                               \
        for (int64_t i = lo; i < hi; i++) {                                                                    \
            T gi = g[i];                                                                                       \
            if (j->has_scale) {                                                                                \
                gi = gi / s;                                                                                   \
                g[i] = gi;                                                                                     \
            }                                                                                                  \
            if (p->maximize)                                                                                   \
                gi = -gi;                                                                                      \
            if (p->wd != 0.0f)                                                                                 \
                gi = gi + wd * th[i];                                                                          \
            if (buf) {                                                                                         \
                T bi = p->first ? gi : buf[i] * mu + w * gi;                                                   \
                buf[i] = bi;                                                                                   \
                gi = p->nesterov ? gi + mu * bi : bi;                                                          \
            }                                                                                                  \
            th[i] = th[i] + nlr * gi;                                                                          \
        }                                                                                                      \
    } while (0)

/* The float32 step without gradient scaling on n elements of disjoint arrays: SGD_LOOP(float)'s
 * arithmetic in the same order, with no aliasing, so that the compiler takes the loop-invariant
 * branches out and vectorizes it (no contraction into fused multiply-adds: PyTorch rounds every
 * step). */
__attribute__((optimize("-O3", "-ffp-contract=off"))) NN_CLONES_NOFMA static void
sgd_f32_fast(int64_t n, float *restrict th, const float *restrict g, float *restrict buf, float wd, float mu,
             float nlr, float w, bool maximize, bool nesterov, bool first)
{
    for (int64_t i = 0; i < n; i++) {
        float gi = maximize ? -g[i] : g[i];
        if (wd != 0.0f)
            gi = gi + wd * th[i];
        if (buf) {
            float bi = first ? gi : buf[i] * mu + w * gi;
            buf[i] = bi;
            gi = nesterov ? gi + mu * bi : bi;
        }
        th[i] = th[i] + nlr * gi;
    }
}

static aclError sgd_block(uint32_t b, uint32_t nb, void *arg)
{
    sgd_job_t *j = (sgd_job_t *)arg;
    const sgd_params_t *p = j->p;
    int64_t per = (j->n + nb - 1) / nb, lo = (int64_t)b * per, hi = lo + per < j->n ? lo + per : j->n;
    if (p->ct == CT_F32 && !j->has_scale) {
        if (hi > lo)
            sgd_f32_fast(hi - lo, (float *)j->th + lo, (const float *)j->g + lo, j->buf ? (float *)j->buf + lo : NULL,
                         p->wd, p->mu, (float)(-(double)p->lr), (float)(1.0 - (double)p->damp), p->maximize,
                         p->nesterov, p->first);
        return ACL_SUCCESS;
    }
    if (p->ct == CT_F64)
        SGD_LOOP(double);
    else
        SGD_LOOP(float);
    return ACL_SUCCESS;
}

static aclError sgd_run(nn_exec_t *ex)
{
    const sgd_params_t *p = (const sgd_params_t *)ex->params;
    double scale = 1.0;
    if (p->vscale >= 0)
        scale = nn_get_f64(ex->v[p->vscale].data, ex->v[p->vscale].dtype);
    char *ws = ex->ws;
    aclError rc = ACL_SUCCESS;
    for (int32_t k = 0; k < p->n && !rc; k++) {
        int64_t n = p->numel[k];
        if (!n)
            continue;
        size_t bytes = nn_align64((size_t)n * nn_ct_size(p->ct));
        bool mom = p->vb[k] >= 0;
        sgd_job_t j = {.p = p, .n = n, .scale = scale, .has_scale = p->vscale >= 0};
        /* operands that already are disjoint contiguous arrays of the compute type are updated
         * where they are (no pack, no unpack) */
        const nn_view_t *vp = &ex->v[p->vp[k]], *vg = &ex->v[p->vg[k]], *vb = mom ? &ex->v[p->vb[k]] : NULL;
        bool direct = nn_view_dense(vp, p->ct) && nn_view_dense(vg, p->ct) && !nn_views_overlap(vp, vg) &&
                      (!vb || (nn_view_dense(vb, p->ct) && !nn_views_overlap(vb, vp) && !nn_views_overlap(vb, vg)));
        if (direct) {
            j.th = vp->data;
            j.g = vg->data;
            j.buf = vb ? vb->data : NULL;
            rc = nn_parallel(ex, nn_blocks(ex, n * 4, NN_BLOCK_GRAIN), sgd_block, &j);
            continue;
        }
        j.th = ws;
        j.g = ws + bytes;
        j.buf = mom ? ws + 2 * bytes : NULL;
        if ((rc = nn_pack(ex, p->ct, j.th, vp)) || (rc = nn_pack(ex, p->ct, j.g, vg)))
            break;
        if (mom && !p->first && (rc = nn_pack(ex, p->ct, j.buf, vb)))
            break;
        rc = nn_parallel(ex, nn_blocks(ex, n * 4, NN_BLOCK_GRAIN), sgd_block, &j);
        if (!rc)
            rc = nn_unpack(ex, p->ct, &ex->v[p->vp[k]], j.th);
        if (!rc && mom)
            rc = nn_unpack(ex, p->ct, &ex->v[p->vb[k]], j.buf);
        if (!rc && j.has_scale)
            rc = nn_unpack(ex, p->ct, &ex->v[p->vg[k]], j.g);
    }
    return rc;
}

static aclnnStatus sgd_list(const char *api, const char *name, const aclTensorList *h, bool optional,
                            const nn_tensorlist_t **out)
{
    *out = NULL;
    if (!h) {
        if (optional)
            return ACLNN_SUCCESS;
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: %s must not be NULL", api, name);
    }
    if (nn_obj_kind(h) != NN_KIND_TENSORLIST)
        return NN_PARAM("%s: %s %p is not a live aclTensorList", api, name, (const void *)h);
    *out = (const nn_tensorlist_t *)h;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclnnFusedSgdGetWorkspaceSize(const aclTensorList *paramsRef, const aclTensorList *gradsRef,
                                                 const aclTensorList *momentumBufferListOptionalRef,
                                                 const aclTensor *gradScaleOptional, float weightDecay, float momentum,
                                                 float lr, float dampening, bool nesterov, bool maximize,
                                                 bool isFirstStep, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnFusedSgd";
    NN_OUTPTRS(api);
    const nn_tensorlist_t *pl, *gl, *bl;
    const nn_tensor_t *sc;
    aclnnStatus rc;
    if ((rc = sgd_list(api, "paramsRef", paramsRef, false, &pl)) ||
        (rc = sgd_list(api, "gradsRef", gradsRef, false, &gl)) ||
        (rc = sgd_list(api, "momentumBufferListOptionalRef", momentumBufferListOptionalRef, true, &bl)) ||
        (rc = nn_tensor_arg(api, "gradScaleOptional", gradScaleOptional, true, &sc)))
        return rc;
    if (bl && bl->n == 0)
        bl = NULL;   /* an empty list: no momentum buffers */
    if (gl->n != pl->n || (bl && bl->n != pl->n))
        return NN_PARAM("%s: paramsRef has %llu tensors, gradsRef %llu, momentumBufferListOptionalRef %llu (they must "
                        "match)", api, (unsigned long long)pl->n, (unsigned long long)gl->n,
                        (unsigned long long)(bl ? bl->n : pl->n));
    if (pl->n > SGD_MAX_LIST)
        return NN_PARAM("%s: the simulator takes at most %d tensors per list, got %llu (call it once per parameter)",
                        api, SGD_MAX_LIST, (unsigned long long)pl->n);
    if (!(lr >= 0.0f) || !(momentum >= 0.0f) || !(weightDecay >= 0.0f) || !(dampening >= 0.0f))
        return NN_PARAM("%s: lr, momentum, weightDecay and dampening must be >= 0 (got %g, %g, %g, %g)", api, lr,
                        momentum, weightDecay, dampening);
    if (sc) {
        if ((rc = opt_float(api, "gradScaleOptional", sc)))
            return rc;
        if (sc->numel != 1)
            return NN_PARAM("%s: gradScaleOptional must have exactly 1 element, got shape %s", api, NN_SHAPE(sc));
    }
    nn_exec_t *ex = nn_exec_new(api, sgd_run, ACLSIM_ENGINE_VECTOR, sizeof(sgd_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    sgd_params_t *p = (sgd_params_t *)ex->params;
    p->wd = weightDecay;
    p->mu = momentum;
    p->lr = lr;
    p->damp = dampening;
    p->nesterov = nesterov;
    p->maximize = maximize;
    p->first = isFirstStep;
    p->n = (int32_t)pl->n;
    p->ct = CT_F32;
    p->vscale = -1;
    int64_t most = 0;
    for (uint64_t k = 0; k < pl->n; k++) {
        const nn_tensor_t *t = pl->v[k], *g = gl->v[k], *b = bl ? bl->v[k] : NULL;
        char nm[3][64];
        snprintf(nm[0], sizeof nm[0], "paramsRef[%llu]", (unsigned long long)k);
        snprintf(nm[1], sizeof nm[1], "gradsRef[%llu]", (unsigned long long)k);
        snprintf(nm[2], sizeof nm[2], "momentumBufferListOptionalRef[%llu]", (unsigned long long)k);
        if (!t || !g || (bl && !b)) {
            free(ex);
            return NN_PARAM("%s: %s is NULL", api, !t ? nm[0] : !g ? nm[1] : nm[2]);
        }
        if ((rc = nn_check_tensor(api, nm[0], t)) || (rc = opt_float(api, nm[0], t)) ||
            (rc = nn_check_tensor(api, nm[1], g)) || (rc = opt_like(api, nm[1], g, nm[0], t)) ||
            (b && ((rc = nn_check_tensor(api, nm[2], b)) || (rc = opt_like(api, nm[2], b, nm[0], t))))) {
            free(ex);
            return rc;
        }
        if (k && t->dtype != pl->v[0]->dtype) {
            free(ex);
            return NN_PARAM("%s: %s has dtype %s but paramsRef[0] has dtype %s (one dtype per list)", api, nm[0],
                            nn_dtype_name(t->dtype), nn_dtype_name(pl->v[0]->dtype));
        }
        if (t->dtype == ACL_DOUBLE)
            p->ct = CT_F64;
        p->numel[k] = t->numel;
        if (t->numel > most)
            most = t->numel;
        p->vp[k] = nn_exec_add(ex, t, "paramsRef", true);
        p->vb[k] = nn_exec_add(ex, b, "momentumBufferListOptionalRef", true);
        p->vg[k] = nn_exec_add(ex, g, "gradsRef", sc != NULL);   /* unscaled in place with a grad scale */
    }
    p->vscale = nn_exec_add(ex, sc, "gradScaleOptional", false);
    if ((rc = opt_outputs(api, ex))) {
        free(ex);
        return rc;
    }
    ex->ws_size = 3 * (uint64_t)nn_align64((size_t)most * nn_ct_size(p->ct));
    ex->cost_ns = (uint64_t)(most * 4 * (pl->n ? pl->n : 1));
    ex->cores = (uint32_t)(most / NN_BLOCK_GRAIN + 1);
    return nn_exec_finish(ex, workspaceSize, executor);
}

NN_API aclnnStatus aclnnFusedSgd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnFusedSgd", workspace, workspaceSize, executor, stream);
}
