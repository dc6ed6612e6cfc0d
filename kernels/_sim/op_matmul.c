/* canna simulator op library: matrix products (Matmul, Mm, BatchMatMul, Addmm) through the BLAS.
 *
 * Every product is reduced to row-major GEMMs: operands whose dtype is the compute type and whose
 * two inner strides fit a BLAS layout (row- or column-major with a valid leading dimension) are
 * used in place; others (float16/bfloat16, arbitrary strides) are first packed into contiguous
 * compute-type copies in the workspace, and an output that cannot be written in place is computed
 * in the workspace and converted back. The work is cut into blocks (batch items and row tiles of
 * the left operand; column tiles of the right one when those are fewer than the host threads that
 * run a launch's blocks, aclsimDeviceStats.hostThreads) spread over the AI-core threads, one
 * single-threaded GEMM per block. */
#include "opsim.h"

typedef struct mm_side {       /* one operand as [batch..., rows, cols] */
    int64_t srow, scol;        /* element strides of the matrix dims (original view) */
    int64_t bst[NN_MAX_DIMS];  /* batch strides aligned to the output's batch dims (0 = broadcast) */
    int64_t csrow, cscol;      /* the same when packed contiguously */
    int64_t cbst[NN_MAX_DIMS];
    bool pack, trans;
    int64_t ld;
    size_t ws_off;
} mm_side_t;

typedef struct mm_params {
    int32_t ct;
    int32_t va, vb, vc, vs;    /* views: a, b, c (out), addmm's self (-1: none) */
    int64_t M, N, K;
    int32_t nbd;               /* batch dims of the output */
    int64_t bshape[NN_MAX_DIMS];
    int64_t nbatch;
    mm_side_t a, b, c;
    double alpha, beta;
    int64_t s_sm, s_sn;        /* addmm self strides over [M, N] (0 = broadcast) */
    int64_t tiles_m;           /* row tiles per batch item */
    int64_t rows_per_tile;
} mm_params_t;

static aclDataType ct_dtype(int ct) { return ct == CT_F64 ? ACL_DOUBLE : ACL_FLOAT; }

/* a BLAS layout for a rows x cols matrix with strides (sr, sc): false when there is none */
static bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool *trans, int64_t *ld)
{
    if (cols <= 1)
        sc = 1;
    if (rows <= 1)
        sr = cols > 1 ? cols * sc : 1;
    int64_t need_r = cols > 1 ? cols : 1, need_c = rows > 1 ? rows : 1;
    if (sc == 1 && sr >= need_r) {
        *trans = false;
        *ld = sr;
        return true;
    }
    if (sr == 1 && sc >= need_c) {
        *trans = true;
        *ld = sc;
        return true;
    }
    if (sc == 1 && rows <= 1) {
        *trans = false;
        *ld = need_r;
        return true;
    }
    return false;
}

/* fill s from view v: [batch..., rows?, cols?] (a 1-D operand has no rows or no cols dim) */
static void side_from(mm_side_t *s, const nn_view_t *v, int32_t nbd, bool has_rows, bool has_cols)
{
    int32_t nd = v->ndim;
    int64_t cst[NN_MAX_DIMS];
    int64_t acc = 1;
    for (int32_t d = nd - 1; d >= 0; d--) {
        cst[d] = acc;
        acc *= v->shape[d] ? v->shape[d] : 1;
    }
    int32_t mdims = (int32_t)has_rows + (int32_t)has_cols;
    s->srow = has_rows ? v->stride[nd - mdims] : 0;
    s->csrow = has_rows ? cst[nd - mdims] : 0;
    s->scol = has_cols ? v->stride[nd - 1] : 0;
    s->cscol = has_cols ? cst[nd - 1] : 0;
    int32_t vb = nd - mdims;   /* batch dims of the view, right-aligned to nbd */
    for (int32_t d = 0; d < nbd; d++) {
        int32_t vd = d - (nbd - vb);
        bool bc = vd < 0 || v->shape[vd] == 1;
        s->bst[d] = bc ? 0 : v->stride[vd];
        s->cbst[d] = bc ? 0 : cst[vd];
    }
}

typedef struct mm_job {
    nn_exec_t *ex;
    const mm_params_t *p;
    char *A, *B, *C;           /* effective bases (view data or packed copies) */
    const nn_view_t *self;
    int64_t per;               /* work items (tiles) per block */
    int64_t tiles_n;           /* column tiles per row tile (chosen at run time: mm_col_tiles) */
    int64_t cols_per_tile;
} mm_job_t;

/* a column tile handed to one block: each BLAS call packs all of its A rows again, so column
 * tiles pay only where the blocks really run at once */
#define MM_MIN_TILE_COLS 64

/* Column tiles for a product whose row tiles and batch items are fewer than the host threads
 * that run a launch's blocks at once (a transformer's 128-row linear layers): each thread takes
 * a slice of B's columns. One thread gets one tile (a tile costs an extra pass packing A). */
static int64_t mm_col_tiles(const nn_exec_t *ex, const mm_params_t *p)
{
    int64_t items = p->nbatch * p->tiles_m, threads = ex->threads_hint ? ex->threads_hint : 1;
    double flops = 2.0 * (double)p->nbatch * (double)p->M * (double)p->N * (double)p->K;
    if (threads <= items || p->N < 2 * MM_MIN_TILE_COLS || flops < (double)(1 << 22))
        return 1;
    int64_t t = (threads + items - 1) / items, most = p->N / MM_MIN_TILE_COLS;
    return t < most ? t : most;
}

static void fill_self_rows(const mm_job_t *j, int64_t bi_off_c, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                           int64_t ldc)
{
    const mm_params_t *p = j->p;
    size_t csz = nn_ct_size(p->ct);
    const nn_view_t *s = j->self;
    int64_t n = n1 - n0;
    for (int64_t m = m0; m < m1; m++) {
        char *crow = j->C + (bi_off_c + m * ldc + n0) * (int64_t)csz;
        const char *srow = s->data + (m * p->s_sm + n0 * p->s_sn) * (int64_t)nn_dtype_size(s->dtype);
        if (p->beta == 0) {   /* self is ignored (its NaN / inf too), as PyTorch's addmm does */
            memset(crow, 0, (size_t)n * csz);
            continue;
        }
        nn_load(p->ct, crow, srow, p->s_sn, s->dtype, n);
        if (p->beta != 1) {
            if (p->ct == CT_F32) {
                float *c = (float *)crow, b = (float)p->beta;
                for (int64_t i = 0; i < n; i++)
                    c[i] *= b;
            } else {
                double *c = (double *)crow;
                for (int64_t i = 0; i < n; i++)
                    c[i] *= p->beta;
            }
        }
    }
}

static aclError mm_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    mm_job_t *j = arg;
    const mm_params_t *p = j->p;
    const mm_side_t *A = &p->a, *B = &p->b, *C = &p->c;
    size_t csz = nn_ct_size(p->ct);
    int64_t total = p->nbatch * p->tiles_m * j->tiles_n;
    int64_t t0 = (int64_t)bi * j->per, t1 = t0 + j->per;
    if (t1 > total)
        t1 = total;
    for (int64_t t = t0; t < t1; t++) {
        int64_t tn = t % j->tiles_n, tm = t / j->tiles_n;
        int64_t bidx = tm / p->tiles_m, tile = tm % p->tiles_m;
        int64_t m0 = tile * p->rows_per_tile, m1 = m0 + p->rows_per_tile;
        int64_t n0 = tn * j->cols_per_tile, n1 = n0 + j->cols_per_tile;
        if (m1 > p->M)
            m1 = p->M;
        if (n1 > p->N)
            n1 = p->N;
        if (m0 >= m1 || n0 >= n1)
            continue;
        int64_t oa = 0, ob = 0, oc = 0, r = bidx;
        for (int32_t d = p->nbd - 1; d >= 0; d--) {
            int64_t i = r % p->bshape[d];
            r /= p->bshape[d];
            oa += i * (A->pack ? A->cbst[d] : A->bst[d]);
            ob += i * (B->pack ? B->cbst[d] : B->bst[d]);
            oc += i * (C->pack ? C->cbst[d] : C->bst[d]);
        }
        int64_t a_sr = A->pack ? A->csrow : A->srow;
        if (p->M <= 1)
            a_sr = 0;
        int64_t c_sr = C->ld;
        double beta = 0;
        if (p->vs >= 0 && p->beta != 0) {
            fill_self_rows(j, oc, m0, m1, n0, n1, c_sr);
            beta = 1;
        }
        char *ap = j->A + (oa + m0 * a_sr) * (int64_t)csz;
        char *bp = j->B + (ob + n0 * (B->trans ? B->ld : 1)) * (int64_t)csz;   /* column n0 of B */
        char *cp = j->C + (oc + m0 * c_sr + n0) * (int64_t)csz;
        if (p->K == 0) {
            if (beta == 0)
                for (int64_t m = m0; m < m1; m++)
                    memset(j->C + (oc + m * c_sr + n0) * (int64_t)csz, 0, (size_t)(n1 - n0) * csz);
            continue;
        }
        if (p->ct == CT_F32)
            nn_sgemm(A->trans, B->trans, m1 - m0, n1 - n0, p->K, (float)p->alpha, (const float *)ap, A->ld,
                     (const float *)bp, B->ld, (float)beta, (float *)cp, C->ld);
        else
            nn_dgemm(A->trans, B->trans, m1 - m0, n1 - n0, p->K, p->alpha, (const double *)ap, A->ld,
                     (const double *)bp, B->ld, beta, (double *)cp, C->ld);
    }
    return ACL_SUCCESS;
}

static aclError mm_run(nn_exec_t *ex)
{
    mm_params_t *p = (mm_params_t *)ex->params;
    if (!ex->v[p->vc].numel)
        return ACL_SUCCESS;
    if (nn_blas_ready(ex->api))
        return ACLNN_ERR_INNER_FIND_KERNEL_ERROR;
    mm_job_t j;
    memset(&j, 0, sizeof j);
    j.ex = ex;
    j.p = p;
    j.self = p->vs >= 0 ? &ex->v[p->vs] : NULL;
    aclError rc;
    j.A = ex->v[p->va].data;
    j.B = ex->v[p->vb].data;
    j.C = ex->v[p->vc].data;
    if (p->a.pack) {
        j.A = ex->ws + p->a.ws_off;
        if ((rc = nn_pack(ex, p->ct, j.A, &ex->v[p->va])))
            return rc;
    }
    if (p->b.pack) {
        j.B = ex->ws + p->b.ws_off;
        if ((rc = nn_pack(ex, p->ct, j.B, &ex->v[p->vb])))
            return rc;
    }
    if (p->c.pack)
        j.C = ex->ws + p->c.ws_off;
    j.tiles_n = mm_col_tiles(ex, p);
    j.cols_per_tile = (p->N + j.tiles_n - 1) / j.tiles_n;
    if (j.tiles_n > 1)   /* (whole vectors of the BLAS kernel per tile) */
        j.cols_per_tile = (j.cols_per_tile + 15) / 16 * 16;
    int64_t total = p->nbatch * p->tiles_m * j.tiles_n;
    uint32_t nb = nn_blocks(ex, total, 1);
    j.per = (total + nb - 1) / nb;
    nb = (uint32_t)((total + j.per - 1) / j.per);
    if ((rc = nn_parallel(ex, nb, mm_block, &j)))
        return rc;
    if (p->c.pack)
        return nn_unpack(ex, p->ct, &ex->v[p->vc], j.C);
    return ACL_SUCCESS;
}

static bool same_dtype_float(aclDataType d) { return nn_is_float(d); }

/* a row tile handed to one block: each BLAS call packs all of B (K x N) again, so tiles of few
 * rows spend their time (and memory bandwidth) packing instead of multiplying */
#define MM_MIN_TILE_ROWS 256

/* the common builder. a_vec / b_vec: 1-D operands (torch.matmul's rules) */
static aclnnStatus mm_make(const char *api, const nn_tensor_t *a, const char *an, const nn_tensor_t *b,
                           const char *bn, const nn_tensor_t *self, const nn_tensor_t *out, int8_t cube,
                           double alpha, double beta, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (cube < 0 || cube > 4)
        return NN_PARAM("%s: cubeMathType must be 0 (KEEP_DTYPE), 1 (ALLOW_FP32_DOWN_PRECISION), 2 (USE_FP16), "
                        "3 (USE_HF32) or 4, got %d", api, cube);
    if (!same_dtype_float(a->dtype) || a->dtype != b->dtype || out->dtype != a->dtype)
        return NN_PARAM("%s: %s, %s and out must have one floating dtype (float32, float16, bfloat16 or float64), "
                        "got %s, %s and %s", api, an, bn, nn_dtype_name(a->dtype), nn_dtype_name(b->dtype),
                        nn_dtype_name(out->dtype));
    if (self && !nn_is_float(self->dtype))
        return NN_PARAM("%s: self has dtype %s (expected a floating dtype)", api, nn_dtype_name(self->dtype));
    if (a->ndim < 1 || b->ndim < 1)
        return NN_PARAM("%s: both operands need at least 1 dimension, got %dD and %dD", api, a->ndim, b->ndim);
    bool av = a->ndim == 1, bv = b->ndim == 1;
    int64_t M = av ? 1 : a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t Kb = bv ? b->shape[0] : b->shape[b->ndim - 2], N = bv ? 1 : b->shape[b->ndim - 1];
    if (K != Kb) {
        char s1[160], s2[160];
        return NN_PARAM("%s: %s %s and %s %s cannot be multiplied (inner dimensions %lld and %lld differ)", api, an,
                        nn_shape_str(s1, sizeof s1, a->shape, a->ndim), bn,
                        nn_shape_str(s2, sizeof s2, b->shape, b->ndim), (long long)K, (long long)Kb);
    }
    int64_t bshape[NN_MAX_DIMS];
    int32_t nbd = 0;
    int32_t nba = av ? 0 : a->ndim - 2, nbb = bv ? 0 : b->ndim - 2;
    if (!nn_broadcast(a->shape, nba, b->shape, nbb, bshape, &nbd)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: the batch dims of %s %s and %s %s cannot be broadcast together", api, an,
                        nn_shape_str(s1, sizeof s1, a->shape, a->ndim), bn,
                        nn_shape_str(s2, sizeof s2, b->shape, b->ndim));
    }
    int64_t oshape[NN_MAX_DIMS + 2];
    int32_t ond = nbd;
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)nbd);
    if (!av)
        oshape[ond++] = M;
    if (!bv)
        oshape[ond++] = N;
    if (ond > NN_MAX_DIMS || !nn_same_shape(out, oshape, ond)) {
        char s1[160], s2[160];
        return NN_PARAM("%s: out has shape %s but the product has shape %s", api,
                        nn_shape_str(s1, sizeof s1, out->shape, out->ndim), nn_shape_str(s2, sizeof s2, oshape, ond));
    }
    int64_t sm = 0, sn = 0;
    if (self) {   /* addmm: self broadcasts to [M, N] */
        int64_t mn[2] = {M, N}, bs[2];
        int32_t bnd;
        if (self->ndim > 2 || !nn_broadcast(self->shape, self->ndim, mn, 2, bs, &bnd) || bs[0] != M || bs[1] != N) {
            char s1[160];
            return NN_PARAM("%s: self of shape %s does not broadcast to the product's shape [%lld, %lld]", api,
                            nn_shape_str(s1, sizeof s1, self->shape, self->ndim), (long long)M, (long long)N);
        }
        if (self->ndim == 2) {
            sm = self->shape[0] == 1 ? 0 : self->stride[0];
            sn = self->shape[1] == 1 ? 0 : self->stride[1];
        } else if (self->ndim == 1) {
            sn = self->shape[0] == 1 ? 0 : self->stride[0];
        }
    }
    nn_exec_t *ex = nn_exec_new(api, mm_run, ACLSIM_ENGINE_CUBE, sizeof(mm_params_t));
    if (!ex)
        return ACLNN_ERR_INNER_CREATE_EXECUTOR;
    mm_params_t *p = (mm_params_t *)ex->params;
    p->ct = a->dtype == ACL_DOUBLE ? CT_F64 : CT_F32;
    p->M = M;
    p->N = N;
    p->K = K;
    p->nbd = nbd;
    memcpy(p->bshape, bshape, sizeof(int64_t) * (size_t)nbd);
    p->nbatch = 1;
    for (int32_t d = 0; d < nbd; d++)
        p->nbatch *= bshape[d];
    p->alpha = alpha;
    p->beta = beta;
    p->s_sm = sm;
    p->s_sn = sn;
    /* views in parameter order (aclSetInputTensorAddr numbers inputs so): Addmm's self first */
    p->vs = self ? nn_exec_add(ex, self, "self", false) : -1;
    p->va = nn_exec_add(ex, a, an, false);
    p->vb = nn_exec_add(ex, b, bn, false);
    p->vc = nn_exec_add(ex, out, "out", true);
    aclnnStatus rc = nn_check_output_overlap(api, ex, p->vc, false);
    if (rc) {
        free(ex);
        return rc;
    }
    side_from(&p->a, &ex->v[p->va], nbd, !av, true);
    side_from(&p->b, &ex->v[p->vb], nbd, true, !bv);
    side_from(&p->c, &ex->v[p->vc], nbd, !av, !bv);
    aclDataType cdt = ct_dtype(p->ct);
    size_t csz = nn_ct_size(p->ct);
    size_t ws = 0;
    mm_side_t *sides[3] = {&p->a, &p->b, &p->c};
    int64_t rows[3] = {M, K, M}, cols[3] = {K, N, N};
    int32_t views[3] = {p->va, p->vb, p->vc};
    for (int i = 0; i < 3; i++) {
        mm_side_t *s = sides[i];
        const nn_view_t *v = &ex->v[views[i]];
        bool ok = v->dtype == cdt && blas_layout(rows[i], cols[i], s->srow, s->scol, &s->trans, &s->ld);
        if (i == 2 && ok && s->trans)   /* the BLAS writes C row-major only */
            ok = false;
        if (ok && !nn_blas_fits(rows[i], cols[i], K, s->ld, s->ld, s->ld))
            ok = false;
        if (!ok) {
            s->pack = true;
            s->trans = false;
            s->ld = cols[i] > 1 ? cols[i] : 1;
            s->ws_off = ws;
            ws += nn_align64((size_t)v->numel * csz);
        }
    }
    /* C's leading dimension in rows (row stride): the packed copy or the view */
    if (!p->c.pack)
        p->c.ld = M <= 1 ? (N > 1 ? N : 1) : p->c.srow;
    ex->ws_size = ws;
    /* blocks: batch items, each cut into row tiles when there are few of them */
    double flops = 2.0 * (double)p->nbatch * (double)M * (double)N * (double)K;
    int64_t want = (int64_t)(flops / (1 << 22)) + 1;
    if (want > 48)
        want = 48;
    int64_t tiles = 1;
    if (p->nbatch < want && M > MM_MIN_TILE_ROWS) {
        tiles = (want + p->nbatch - 1) / p->nbatch;
        if (tiles > (M + MM_MIN_TILE_ROWS - 1) / MM_MIN_TILE_ROWS)
            tiles = (M + MM_MIN_TILE_ROWS - 1) / MM_MIN_TILE_ROWS;
    }
    p->rows_per_tile = (M + tiles - 1) / tiles;
    if (p->rows_per_tile < 1)
        p->rows_per_tile = 1;
    p->tiles_m = (M + p->rows_per_tile - 1) / p->rows_per_tile;
    if (p->tiles_m < 1)
        p->tiles_m = 1;
    ex->cost_ns = (uint64_t)(flops / 8.0);
    ex->cores = (uint32_t)(want < p->nbatch * p->tiles_m ? want : p->nbatch * p->tiles_m);
    return nn_exec_finish(ex, workspaceSize, executor);
}

#define MM_ARGS(api)                                                                                \
    NN_OUTPTRS(api);                                                                               \
    const nn_tensor_t *a, *b, *o;                                                                  \
    aclnnStatus rc;                                                                                \
    if ((rc = nn_tensor_arg(api, "self", self, false, &a)) || (rc = nn_tensor_arg(api, "mat2", mat2, false, &b)) || \
        (rc = nn_tensor_arg(api, "out", out, false, &o)))                                          \
        return rc

NN_API aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                               int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    MM_ARGS("aclnnMatmul");
    return mm_make("aclnnMatmul", a, "self", b, "mat2", NULL, o, cubeMathType, 1, 0, workspaceSize, executor);
}

NN_API aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnMatmul", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                           int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    MM_ARGS("aclnnMm");
    if (a->ndim != 2 || b->ndim != 2)
        return NN_PARAM("aclnnMm: self and mat2 must be 2-D, got %dD and %dD", a->ndim, b->ndim);
    return mm_make("aclnnMm", a, "self", b, "mat2", NULL, o, cubeMathType, 1, 0, workspaceSize, executor);
}

NN_API aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnMm", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnBatchMatMulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                                    int8_t cubeMathType, uint64_t *workspaceSize,
                                                    aclOpExecutor **executor)
{
    MM_ARGS("aclnnBatchMatMul");
    if (a->ndim != 3 || b->ndim != 3)
        return NN_PARAM("aclnnBatchMatMul: self and mat2 must be 3-D, got %dD and %dD", a->ndim, b->ndim);
    if (a->shape[0] != b->shape[0])
        return NN_PARAM("aclnnBatchMatMul: batch sizes differ (%lld and %lld)", (long long)a->shape[0],
                        (long long)b->shape[0]);
    return mm_make("aclnnBatchMatMul", a, "self", b, "mat2", NULL, o, cubeMathType, 1, 0, workspaceSize, executor);
}

NN_API aclnnStatus aclnnBatchMatMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return nn_launch("aclnnBatchMatMul", workspace, workspaceSize, executor, stream);
}

NN_API aclnnStatus aclnnAddmmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat1, const aclTensor *mat2,
                                              const aclScalar *beta, const aclScalar *alpha, aclTensor *out,
                                              int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char api[] = "aclnnAddmm";
    NN_OUTPTRS(api);
    const nn_tensor_t *s, *a, *b, *o;
    const nn_scalar_t *be, *al;
    aclnnStatus rc;
    if ((rc = nn_tensor_arg(api, "self", self, false, &s)) || (rc = nn_tensor_arg(api, "mat1", mat1, false, &a)) ||
        (rc = nn_tensor_arg(api, "mat2", mat2, false, &b)) || (rc = nn_scalar_arg(api, "beta", beta, &be)) ||
        (rc = nn_scalar_arg(api, "alpha", alpha, &al)) || (rc = nn_tensor_arg(api, "out", out, false, &o)))
        return rc;
    if (a->ndim != 2 || b->ndim != 2)
        return NN_PARAM("%s: mat1 and mat2 must be 2-D, got %dD and %dD", api, a->ndim, b->ndim);
    return mm_make(api, a, "mat1", b, "mat2", s, o, cubeMathType, al->f, be->f, workspaceSize, executor);
}

NN_API aclnnStatus aclnnAddmm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return nn_launch("aclnnAddmm", workspace, workspaceSize, executor, stream);
}
