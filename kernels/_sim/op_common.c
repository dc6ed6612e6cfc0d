/* canna simulator op library: packing strided views of any dtype into contiguous buffers of a
 * compute type and back (used by matrix products, convolutions, normalizations). */
#include "opsim.h"

static char *row_ptr(const nn_view_t *v, int64_t r)
{
    int64_t off = 0;
    for (int32_t d = v->ndim - 2; d >= 0; d--) {
        int64_t i = r % v->shape[d];
        r /= v->shape[d];
        off += i * v->stride[d];
    }
    return v->data + off * (int64_t)nn_dtype_size(v->dtype);
}

void nn_pack_rows(int ct, void *dst, const nn_view_t *v, int64_t r0, int64_t r1)
{
    int64_t cols = v->ndim ? v->shape[v->ndim - 1] : 1;
    int64_t cs = v->ndim ? v->stride[v->ndim - 1] : 0;
    size_t csz = nn_ct_size(ct);
    for (int64_t r = r0; r < r1; r++)
        nn_load(ct, (char *)dst + (size_t)(r * cols) * csz, row_ptr(v, r), cs, v->dtype, cols);
}

void nn_unpack_rows(int ct, const nn_view_t *v, const void *src, int64_t r0, int64_t r1)
{
    int64_t cols = v->ndim ? v->shape[v->ndim - 1] : 1;
    int64_t cs = v->ndim ? v->stride[v->ndim - 1] : 0;
    size_t csz = nn_ct_size(ct);
    for (int64_t r = r0; r < r1; r++)
        nn_store(ct, row_ptr(v, r), cs, v->dtype, (const char *)src + (size_t)(r * cols) * csz, cols);
}

typedef struct pack_job {
    int ct;
    void *buf;
    const nn_view_t *v;
    int64_t rows, per;
    bool unpack;
} pack_job_t;

static aclError pack_block(uint32_t bi, uint32_t nb, void *arg)
{
    (void)nb;
    pack_job_t *j = arg;
    int64_t r0 = (int64_t)bi * j->per, r1 = r0 + j->per;
    if (r1 > j->rows)
        r1 = j->rows;
    if (r0 < r1) {
        if (j->unpack)
            nn_unpack_rows(j->ct, j->v, j->buf, r0, r1);
        else
            nn_pack_rows(j->ct, j->buf, j->v, r0, r1);
    }
    return ACL_SUCCESS;
}

static aclError pack_run(nn_exec_t *ex, int ct, void *buf, const nn_view_t *v, bool unpack)
{
    if (!v->numel)
        return ACL_SUCCESS;
    pack_job_t j = {ct, buf, v, nn_rows(v), 0, unpack};
    int64_t cols = v->numel / j.rows;
    uint32_t nb = nn_blocks(ex, v->numel, NN_BLOCK_GRAIN);
    j.per = (j.rows + nb - 1) / nb;
    nb = (uint32_t)((j.rows + j.per - 1) / j.per);
    (void)cols;
    return nn_parallel(ex, nb, pack_block, &j);
}

aclError nn_pack(nn_exec_t *ex, int ct, void *dst, const nn_view_t *v) { return pack_run(ex, ct, dst, v, false); }

aclError nn_unpack(nn_exec_t *ex, int ct, const nn_view_t *v, const void *src)
{
    return pack_run(ex, ct, (void *)src, v, true);
}
