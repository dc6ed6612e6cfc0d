/* canna simulator op library: the aclnn meta API (aclCreateTensor & co., executors) and the
 * machinery shared by every op (errors, the live-object set, phase 2 = launching on a stream). */
#include "opsim.h"

/* ------------------------------------------------------------------ errors */

aclnnStatus nn_err(aclnnStatus code, const char *fmt, ...)
{
    char msg[NN_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    aclsimSetRecentErrMsg(code, msg);
    return code;
}

/* ------------------------------------------------------------------ live objects
 * An open-addressing hash set from object address to kind, under one mutex. Objects are only
 * dereferenced after they were found here, so a destroyed or foreign handle is reported. */

typedef struct obj_ent {
    uintptr_t p;   /* 0 = empty */
    int kind;
} obj_ent_t;

static pthread_mutex_t g_obj_lock = PTHREAD_MUTEX_INITIALIZER;
static obj_ent_t *g_obj_tab;
static size_t g_obj_cap, g_obj_count;

static inline size_t obj_hash(uintptr_t p)
{
    uint64_t x = (uint64_t)p;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (size_t)x;
}

static bool obj_grow(void)
{
    size_t ncap = g_obj_cap ? g_obj_cap * 2 : 1024;
    obj_ent_t *nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return false;
    for (size_t i = 0; i < g_obj_cap; i++) {
        if (!g_obj_tab[i].p)
            continue;
        size_t j = obj_hash(g_obj_tab[i].p) & (ncap - 1);
        while (nt[j].p)
            j = (j + 1) & (ncap - 1);
        nt[j] = g_obj_tab[i];
    }
    free(g_obj_tab);
    g_obj_tab = nt;
    g_obj_cap = ncap;
    return true;
}

static size_t obj_slot(uintptr_t p)   /* lock held; g_obj_cap when absent */
{
    if (!g_obj_cap || !p)
        return g_obj_cap;
    size_t m = g_obj_cap - 1, j = obj_hash(p) & m;
    while (g_obj_tab[j].p) {
        if (g_obj_tab[j].p == p)
            return j;
        j = (j + 1) & m;
    }
    return g_obj_cap;
}

bool nn_obj_add(const void *p, int kind)
{
    bool ok = false;
    pthread_mutex_lock(&g_obj_lock);
    if ((g_obj_count + 1) * 2 <= g_obj_cap || obj_grow()) {
        size_t m = g_obj_cap - 1, j = obj_hash((uintptr_t)p) & m;
        while (g_obj_tab[j].p)
            j = (j + 1) & m;
        g_obj_tab[j].p = (uintptr_t)p;
        g_obj_tab[j].kind = kind;
        g_obj_count++;
        ok = true;
    }
    pthread_mutex_unlock(&g_obj_lock);
    return ok;
}

static bool obj_remove_locked(const void *p, int kind)
{
    bool found = false;
    size_t j = obj_slot((uintptr_t)p);
    if (j < g_obj_cap && g_obj_tab[j].kind == kind) {
        found = true;
        size_t m = g_obj_cap - 1;
        g_obj_tab[j].p = 0;
        g_obj_count--;
        size_t i = j, k = (j + 1) & m;
        while (g_obj_tab[k].p) {   /* backward-shift deletion */
            size_t home = obj_hash(g_obj_tab[k].p) & m;
            bool move = (i <= k) ? (home <= i || home > k) : (home <= i && home > k);
            if (move) {
                g_obj_tab[i] = g_obj_tab[k];
                g_obj_tab[k].p = 0;
                i = k;
            }
            k = (k + 1) & m;
        }
    }
    return found;
}

bool nn_obj_remove(const void *p, int kind)
{
    pthread_mutex_lock(&g_obj_lock);
    bool found = obj_remove_locked(p, kind);
    pthread_mutex_unlock(&g_obj_lock);
    return found;
}

static int obj_kind_locked(const void *p)
{
    size_t j = obj_slot((uintptr_t)p);
    return j < g_obj_cap ? g_obj_tab[j].kind : 0;
}

int nn_obj_kind(const void *p)
{
    int kind = 0;
    pthread_mutex_lock(&g_obj_lock);
    size_t j = obj_slot((uintptr_t)p);
    if (j < g_obj_cap)
        kind = g_obj_tab[j].kind;
    pthread_mutex_unlock(&g_obj_lock);
    return kind;
}

const char *nn_kind_name(int kind)
{
    switch (kind) {
    case NN_KIND_TENSOR: return "an aclTensor";
    case NN_KIND_SCALAR: return "an aclScalar";
    case NN_KIND_INTARRAY: return "an aclIntArray";
    case NN_KIND_FLOATARRAY: return "an aclFloatArray";
    case NN_KIND_BOOLARRAY: return "an aclBoolArray";
    case NN_KIND_TENSORLIST: return "an aclTensorList";
    case NN_KIND_SCALARLIST: return "an aclScalarList";
    case NN_KIND_EXECUTOR: return "an aclOpExecutor";
    default: return "an unknown object";
    }
}

/* a checked handle: 0 when h is a live object of `kind`, else the error (message names api/what) */
static aclnnStatus check_handle(const char *api, const char *what, const void *h, int kind)
{
    if (!h)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: %s must not be NULL", api, what);
    int k = nn_obj_kind(h);
    if (k == kind)
        return ACLNN_SUCCESS;
    if (k)
        return NN_PARAM("%s: %s %p is %s, not %s", api, what, h, nn_kind_name(k), nn_kind_name(kind));
    return NN_PARAM("%s: %s %p is not a live %s (destroyed, or never created by this library)", api, what, h,
                    nn_kind_name(kind) + (nn_kind_name(kind)[1] == 'n' ? 3 : 2));
}

aclnnStatus nn_tensor_arg(const char *api, const char *name, const aclTensor *h, bool optional,
                          const nn_tensor_t **out)
{
    *out = NULL;
    if (!h && optional)
        return ACLNN_SUCCESS;
    aclnnStatus rc = check_handle(api, name, h, NN_KIND_TENSOR);
    if (rc)
        return rc;
    *out = (const nn_tensor_t *)h;
    return nn_check_tensor(api, name, *out);
}

aclnnStatus nn_scalar_arg(const char *api, const char *name, const aclScalar *h, const nn_scalar_t **out)
{
    aclnnStatus rc = check_handle(api, name, h, NN_KIND_SCALAR);
    *out = rc ? NULL : (const nn_scalar_t *)h;
    return rc;
}

aclnnStatus nn_intarray_arg(const char *api, const char *name, const aclIntArray *h, bool optional,
                            const nn_intarray_t **out)
{
    *out = NULL;
    if (!h && optional)
        return ACLNN_SUCCESS;
    aclnnStatus rc = check_handle(api, name, h, NN_KIND_INTARRAY);
    if (rc)
        return rc;
    *out = (const nn_intarray_t *)h;
    if ((*out)->n > NN_MAX_ARRAY)
        return NN_PARAM("%s: %s has %llu values, more than %d", api, name, (unsigned long long)(*out)->n, NN_MAX_ARRAY);
    return ACLNN_SUCCESS;
}

aclnnStatus nn_boolarray_arg(const char *api, const char *name, const aclBoolArray *h, bool optional,
                             const nn_boolarray_t **out)
{
    *out = NULL;
    if (!h && optional)
        return ACLNN_SUCCESS;
    aclnnStatus rc = check_handle(api, name, h, NN_KIND_BOOLARRAY);
    if (rc)
        return rc;
    *out = (const nn_boolarray_t *)h;
    return ACLNN_SUCCESS;
}

aclnnStatus nn_output_mask3(const char *api, const nn_boolarray_t *mask, const nn_tensor_t *const outs[3],
                            const char *const names[3]) {
    if (mask->n != 3)
        return NN_PARAM("%s: outputMask must have 3 values (%s, %s, %s), got %llu", api, names[0], names[1], names[2],
                        (unsigned long long)mask->n);
    for (int i = 0; i < 3; i++)
        if (mask->v[i] && !outs[i])
            return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: outputMask[%d] is true but %s is NULL", api, i, names[i]);
    return ACLNN_SUCCESS;
}

/* ------------------------------------------------------------------ dtypes */

bool nn_dtype_known(aclDataType dt)
{
    switch ((int)dt) {
    case ACL_FLOAT: case ACL_FLOAT16: case ACL_INT8: case ACL_INT32: case ACL_UINT8: case ACL_INT16:
    case ACL_UINT16: case ACL_UINT32: case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: case ACL_BOOL:
    case ACL_STRING: case ACL_COMPLEX64: case ACL_COMPLEX128: case ACL_BF16: case ACL_INT4: case ACL_UINT1:
    case ACL_COMPLEX32: case ACL_HIFLOAT8: case ACL_FLOAT8_E5M2: case ACL_FLOAT8_E4M3FN: case ACL_FLOAT8_E8M0:
    case ACL_FLOAT6_E3M2: case ACL_FLOAT6_E2M3: case ACL_FLOAT4_E2M1: case ACL_FLOAT4_E1M2:
        return true;
    default:
        return false;
    }
}

size_t nn_dtype_size(aclDataType dt)
{
    switch ((int)dt) {
    case ACL_FLOAT: case ACL_INT32: return 4;
    case ACL_DOUBLE: case ACL_INT64: return 8;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    default: return 0;
    }
}

const char *nn_dtype_name(aclDataType dt)
{
    switch ((int)dt) {
    case ACL_FLOAT: return "float32";
    case ACL_FLOAT16: return "float16";
    case ACL_BF16: return "bfloat16";
    case ACL_DOUBLE: return "float64";
    case ACL_INT8: return "int8";
    case ACL_UINT8: return "uint8";
    case ACL_INT16: return "int16";
    case ACL_INT32: return "int32";
    case ACL_INT64: return "int64";
    case ACL_BOOL: return "bool";
    case ACL_UINT16: return "uint16";
    case ACL_UINT32: return "uint32";
    case ACL_UINT64: return "uint64";
    case ACL_STRING: return "string";
    case ACL_COMPLEX64: return "complex64";
    case ACL_COMPLEX128: return "complex128";
    case ACL_COMPLEX32: return "complex32";
    case ACL_DT_UNDEFINED: return "undefined";
    default: {
        static __thread char buf[32];
        snprintf(buf, sizeof buf, "dtype %d", (int)dt);
        return buf;
    }
    }
}

static int float_rank(aclDataType d)
{
    switch ((int)d) {
    case ACL_FLOAT16: return 1;
    case ACL_BF16: return 1;
    case ACL_FLOAT: return 2;
    case ACL_DOUBLE: return 3;
    default: return 0;
    }
}

aclDataType nn_promote(aclDataType a, aclDataType b)
{
    if (a == b)
        return a;
    bool fa = nn_is_float(a), fb = nn_is_float(b);
    if (fa && fb) {
        if ((a == ACL_FLOAT16 && b == ACL_BF16) || (a == ACL_BF16 && b == ACL_FLOAT16))
            return ACL_FLOAT;
        return float_rank(a) >= float_rank(b) ? a : b;
    }
    if (fa)
        return a;
    if (fb)
        return b;
    if (a == ACL_BOOL)
        return b;
    if (b == ACL_BOOL)
        return a;
    /* integers: torch's lattice for the types the simulator handles */
    if (a == ACL_INT64 || b == ACL_INT64)
        return ACL_INT64;
    if (a == ACL_INT32 || b == ACL_INT32)
        return ACL_INT32;
    if (a == ACL_INT16 || b == ACL_INT16)
        return ACL_INT16;
    return ACL_INT16;   /* int8 with uint8 */
}

bool nn_can_cast(aclDataType from, aclDataType to)
{
    if (nn_is_float(from) && !nn_is_float(to))
        return false;
    if (from != ACL_BOOL && to == ACL_BOOL)
        return false;
    return true;
}

int nn_ct_of(aclDataType d)
{
    switch ((int)d) {
    case ACL_DOUBLE: return CT_F64;
    case ACL_FLOAT: case ACL_FLOAT16: case ACL_BF16: return CT_F32;
    case ACL_INT64: return CT_I64;
    default: return CT_I32;
    }
}

/* ------------------------------------------------------------------ shapes */

const char *nn_shape_str(char *buf, size_t cap, const int64_t *shape, int32_t ndim)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int32_t i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

bool nn_broadcast(const int64_t *a, int32_t na, const int64_t *b, int32_t nb, int64_t *out, int32_t *ndim)
{
    int32_t n = na > nb ? na : nb;
    for (int32_t i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da == db || db == 1)
            out[i] = da;
        else if (da == 1)
            out[i] = db;
        else
            return false;
    }
    *ndim = n;
    return true;
}

bool nn_same_shape(const nn_tensor_t *a, const int64_t *shape, int32_t ndim)
{
    if (a->ndim != ndim)
        return false;
    for (int32_t i = 0; i < ndim; i++)
        if (a->shape[i] != shape[i])
            return false;
    return true;
}

bool nn_wrap_dim(int64_t d, int32_t ndim, int32_t *out)
{
    int64_t n = ndim > 0 ? ndim : 1;
    if (d < -n || d >= n)
        return false;
    *out = (int32_t)(d < 0 ? d + n : d);
    return true;
}

static bool format_plain(aclFormat f)
{
    switch ((int)f) {
    case ACL_FORMAT_ND: case ACL_FORMAT_NCHW: case ACL_FORMAT_NHWC: case ACL_FORMAT_NC: case ACL_FORMAT_NCL:
    case ACL_FORMAT_NCDHW: case ACL_FORMAT_NDHWC: case ACL_FORMAT_HWCN:
        return true;
    default:
        return false;
    }
}

static bool format_known(aclFormat f)
{
    switch ((int)f) {
    case ACL_FORMAT_NC1HWC0: case ACL_FORMAT_FRACTAL_Z: case ACL_FORMAT_NC1HWC0_C04: case ACL_FORMAT_FRACTAL_NZ:
    case ACL_FORMAT_NDC1HWC0: case ACL_FRACTAL_Z_3D: case ACL_FORMAT_FRACTAL_NZ_C0_16:
    case ACL_FORMAT_FRACTAL_NZ_C0_32: case ACL_FORMAT_FRACTAL_NZ_C0_2: case ACL_FORMAT_FRACTAL_NZ_C0_4:
    case ACL_FORMAT_FRACTAL_NZ_C0_8:
        return true;
    default:
        return format_plain(f);
    }
}

aclnnStatus nn_check_tensor(const char *api, const char *name, const nn_tensor_t *t)
{
    if (!format_plain(t->format))
        return NN_PARAM("%s: %s has format %d, a private (fractal) format the simulator does not support; "
                        "use ACL_FORMAT_ND", api, name, (int)t->format);
    if (!nn_dtype_size(t->dtype))
        return NN_PARAM("%s: %s has dtype %s, which the simulator does not support", api, name,
                        nn_dtype_name(t->dtype));
    return ACLNN_SUCCESS;
}

bool nn_views_overlap(const nn_view_t *a, const nn_view_t *b)
{
    if (!a->numel || !b->numel)
        return false;
    const char *a0 = a->data + a->lo * (int64_t)nn_dtype_size(a->dtype);
    const char *a1 = a->data + a->hi * (int64_t)nn_dtype_size(a->dtype);
    const char *b0 = b->data + b->lo * (int64_t)nn_dtype_size(b->dtype);
    const char *b1 = b->data + b->hi * (int64_t)nn_dtype_size(b->dtype);
    return a0 < b1 && b0 < a1;
}

/* ------------------------------------------------------------------ tensors */

/* validate and fill t; message names api. On error returns the status (t untouched on error). */
static aclnnStatus tensor_init(const char *api, nn_tensor_t *t, const int64_t *viewDims, uint64_t viewDimsNum,
                               aclDataType dataType, const int64_t *stride, int64_t offset, aclFormat format,
                               const int64_t *storageDims, uint64_t storageDimsNum, void *data)
{
    if (viewDimsNum > NN_MAX_DIMS)
        return NN_PARAM("%s: viewDimsNum %llu is larger than %d (the most dimensions an aclTensor can have)", api,
                        (unsigned long long)viewDimsNum, NN_MAX_DIMS);
    if (storageDimsNum > NN_MAX_DIMS)
        return NN_PARAM("%s: storageDimsNum %llu is larger than %d", api, (unsigned long long)storageDimsNum,
                        NN_MAX_DIMS);
    if (viewDimsNum && !viewDims)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: viewDims is NULL but viewDimsNum is %llu", api,
                      (unsigned long long)viewDimsNum);
    if (storageDimsNum && !storageDims)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: storageDims is NULL but storageDimsNum is %llu", api,
                      (unsigned long long)storageDimsNum);
    if (!nn_dtype_known(dataType) || dataType == ACL_DT_UNDEFINED)
        return NN_PARAM("%s: unknown dataType %d (not an aclDataType value)", api, (int)dataType);
    if (!format_known(format))
        return NN_PARAM("%s: unknown format %d (not an aclFormat value)", api, (int)format);
    if (offset < 0)
        return NN_PARAM("%s: offset %lld is negative (it is in elements, >= 0)", api, (long long)offset);
    nn_tensor_t n;
    memset(&n, 0, sizeof n);
    n.dtype = dataType;
    n.format = format;
    n.ndim = (int32_t)viewDimsNum;
    n.sdim = (int32_t)storageDimsNum;
    n.offset = offset;
    n.data = data;
    int64_t numel = 1;
    for (int32_t i = 0; i < n.ndim; i++) {
        if (viewDims[i] < 0)
            return NN_PARAM("%s: viewDims[%d] = %lld is negative", api, i, (long long)viewDims[i]);
        n.shape[i] = viewDims[i];
        if (__builtin_mul_overflow(numel, viewDims[i], &numel))
            return NN_PARAM("%s: the view shape has more than 2^63 elements", api);
    }
    n.numel = numel;
    /* strides: NULL means contiguous (row-major) */
    for (int32_t i = n.ndim - 1, acc = 0; i >= 0; i--) {
        (void)acc;
        if (stride) {
            if (stride[i] < 0)
                return NN_PARAM("%s: stride[%d] = %lld is negative (aclnn strides are >= 0, in elements)", api, i,
                                (long long)stride[i]);
            n.stride[i] = stride[i];
        } else {
            n.stride[i] = (i == n.ndim - 1) ? 1 : n.stride[i + 1] * (n.shape[i + 1] ? n.shape[i + 1] : 1);
        }
    }
    int64_t snumel = 1;
    for (int32_t i = 0; i < n.sdim; i++) {
        if (storageDims[i] < 0)
            return NN_PARAM("%s: storageDims[%d] = %lld is negative", api, i, (long long)storageDims[i]);
        n.sshape[i] = storageDims[i];
        if (__builtin_mul_overflow(snumel, storageDims[i], &snumel))
            return NN_PARAM("%s: the storage shape has more than 2^63 elements", api);
    }
    if (numel > 0) {
        int64_t hi = 0;
        for (int32_t i = 0; i < n.ndim; i++) {
            int64_t r;
            if (__builtin_mul_overflow(n.shape[i] - 1, n.stride[i], &r) || __builtin_add_overflow(hi, r, &hi))
                return NN_PARAM("%s: the strides reach past 2^63 elements", api);
        }
        int64_t end;
        if (__builtin_add_overflow(offset, hi + 1, &end) || end > snumel) {
            char vs[160], ss[160], st[160];
            return NN_PARAM("%s: the view (shape %s, strides %s, offset %lld) reaches element %lld, outside the "
                            "storage shape %s of %lld elements",
                            api, nn_shape_str(vs, sizeof vs, n.shape, n.ndim), nn_shape_str(st, sizeof st, n.stride, n.ndim),
                            (long long)offset, (long long)(offset + hi), nn_shape_str(ss, sizeof ss, n.sshape, n.sdim),
                            (long long)snumel);
        }
        n.lo = 0;
        n.hi = hi + 1;
        size_t isz = nn_dtype_size(dataType);
        if (isz) {
            int64_t bytes;
            if (__builtin_mul_overflow(end, (int64_t)isz, &bytes))
                return NN_PARAM("%s: the storage is larger than 2^63 bytes", api);
        }
    }
    *t = n;
    return ACLNN_SUCCESS;
}

NN_API aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                  const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storageDims,
                                  uint64_t storageDimsNum, void *tensorData)
{
    nn_tensor_t tmp;
    if (tensor_init("aclCreateTensor", &tmp, viewDims, viewDimsNum, dataType, stride, offset, format, storageDims,
                    storageDimsNum, tensorData))
        return NULL;
    nn_tensor_t *t = malloc(sizeof *t);
    if (!t) {
        nn_err(ACLNN_ERR_INNER, "aclCreateTensor: out of host memory");
        return NULL;
    }
    *t = tmp;
    if (!nn_obj_add(t, NN_KIND_TENSOR)) {
        free(t);
        nn_err(ACLNN_ERR_INNER, "aclCreateTensor: out of host memory");
        return NULL;
    }
    return (aclTensor *)t;
}

NN_API aclnnStatus aclInitTensor(aclTensor *tensor, const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                 const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storageDims,
                                 uint64_t storageDimsNum, void *tensorDataAddr)
{
    aclnnStatus rc = check_handle("aclInitTensor", "tensor", tensor, NN_KIND_TENSOR);
    if (rc)
        return rc;
    return tensor_init("aclInitTensor", (nn_tensor_t *)tensor, viewDims, viewDimsNum, dataType, stride, offset, format,
                       storageDims, storageDimsNum, tensorDataAddr);
}

NN_API aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    if (!tensor)
        return ACLNN_SUCCESS;   /* like free(NULL) */
    if (!nn_obj_remove(tensor, NN_KIND_TENSOR))
        return check_handle("aclDestroyTensor", "tensor", tensor, NN_KIND_TENSOR);
    free((void *)tensor);
    return ACLNN_SUCCESS;
}

static aclnnStatus copy_dims(const char *api, const int64_t *src, int32_t n, int64_t **out, uint64_t *num)
{
    int64_t *p = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!p)
        return nn_err(ACLNN_ERR_INNER, "%s: out of host memory", api);
    memcpy(p, src, (size_t)n * sizeof(int64_t));
    *out = p;
    *num = (uint64_t)n;
    return ACLNN_SUCCESS;
}

#define GET_PROLOGUE(api, t, a, b)                                                                   \
    aclnnStatus rc = check_handle(api, "tensor", t, NN_KIND_TENSOR);                                \
    if (rc)                                                                                          \
        return rc;                                                                                   \
    if (!(a) || !(b))                                                                                \
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: output pointers must not be NULL", api);         \
    const nn_tensor_t *T = (const nn_tensor_t *)(t)

NN_API aclnnStatus aclGetViewShape(const aclTensor *tensor, int64_t **viewDims, uint64_t *viewDimsNum)
{
    GET_PROLOGUE("aclGetViewShape", tensor, viewDims, viewDimsNum);
    return copy_dims("aclGetViewShape", T->shape, T->ndim, viewDims, viewDimsNum);
}

NN_API aclnnStatus aclGetStorageShape(const aclTensor *tensor, int64_t **storageDims, uint64_t *storageDimsNum)
{
    GET_PROLOGUE("aclGetStorageShape", tensor, storageDims, storageDimsNum);
    return copy_dims("aclGetStorageShape", T->sshape, T->sdim, storageDims, storageDimsNum);
}

NN_API aclnnStatus aclGetViewStrides(const aclTensor *tensor, int64_t **stridesValue, uint64_t *stridesNum)
{
    GET_PROLOGUE("aclGetViewStrides", tensor, stridesValue, stridesNum);
    return copy_dims("aclGetViewStrides", T->stride, T->ndim, stridesValue, stridesNum);
}

NN_API aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset)
{
    GET_PROLOGUE("aclGetViewOffset", tensor, offset, offset);
    *offset = T->offset;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format)
{
    GET_PROLOGUE("aclGetFormat", tensor, format, format);
    *format = T->format;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType)
{
    GET_PROLOGUE("aclGetDataType", tensor, dataType, dataType);
    *dataType = T->dtype;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclSetRawTensorAddr(aclTensor *tensor, void *addr)
{
    aclnnStatus rc = check_handle("aclSetRawTensorAddr", "tensor", tensor, NN_KIND_TENSOR);
    if (rc)
        return rc;
    ((nn_tensor_t *)tensor)->data = addr;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclGetRawTensorAddr(const aclTensor *tensor, void **addr)
{
    GET_PROLOGUE("aclGetRawTensorAddr", tensor, addr, addr);
    *addr = T->data;
    return ACLNN_SUCCESS;
}

/* ------------------------------------------------------------------ scalars and arrays */

NN_API aclScalar *aclCreateScalar(void *value, aclDataType dataType)
{
    static const char api[] = "aclCreateScalar";
    if (!value) {
        nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: value must not be NULL", api);
        return NULL;
    }
    if (!nn_dtype_known(dataType) || !nn_dtype_size(dataType)) {
        NN_PARAM("%s: dataType %s is not supported for a scalar (use a float, integer or bool dtype)", api,
                 nn_dtype_name(dataType));
        return NULL;
    }
    nn_scalar_t *s = calloc(1, sizeof *s);
    if (!s) {
        nn_err(ACLNN_ERR_INNER, "%s: out of host memory", api);
        return NULL;
    }
    s->dtype = dataType;
    s->is_float = nn_is_float(dataType);
    if (s->is_float) {
        s->f = nn_get_f64(value, dataType);
        s->i = nn_d2i64(s->f);
    } else {
        s->i = nn_get_i64(value, dataType);
        s->f = (double)s->i;
    }
    if (!nn_obj_add(s, NN_KIND_SCALAR)) {
        free(s);
        nn_err(ACLNN_ERR_INNER, "%s: out of host memory", api);
        return NULL;
    }
    return (aclScalar *)s;
}

NN_API aclnnStatus aclDestroyScalar(const aclScalar *scalar)
{
    if (!scalar)
        return ACLNN_SUCCESS;
    if (!nn_obj_remove(scalar, NN_KIND_SCALAR))
        return check_handle("aclDestroyScalar", "scalar", scalar, NN_KIND_SCALAR);
    free((void *)scalar);
    return ACLNN_SUCCESS;
}

#define ARRAY_CREATE(api, type, kind, elt)                                                          \
    if (size && !value) {                                                                          \
        nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: value is NULL but size is %llu", api, (unsigned long long)size); \
        return NULL;                                                                               \
    }                                                                                              \
    if (size > (1u << 24)) {                                                                       \
        NN_PARAM("%s: size %llu is too large", api, (unsigned long long)size);                     \
        return NULL;                                                                               \
    }                                                                                              \
    type *a = calloc(1, sizeof *a);                                                                \
    elt *v = malloc((size_t)(size ? size : 1) * sizeof(elt));                                      \
    if (!a || !v) {                                                                                \
        free(a);                                                                                   \
        free(v);                                                                                   \
        nn_err(ACLNN_ERR_INNER, "%s: out of host memory", api);                                    \
        return NULL;                                                                               \
    }                                                                                              \
    if (size)                                                                                      \
        memcpy(v, value, (size_t)size * sizeof(elt));                                              \
    a->n = size;                                                                                   \
    a->v = v;                                                                                      \
    if (!nn_obj_add(a, kind)) {                                                                    \
        free(v);                                                                                   \
        free(a);                                                                                   \
        nn_err(ACLNN_ERR_INNER, "%s: out of host memory", api);                                    \
        return NULL;                                                                               \
    }

NN_API aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)
{
    ARRAY_CREATE("aclCreateIntArray", nn_intarray_t, NN_KIND_INTARRAY, int64_t);
    return (aclIntArray *)a;
}

NN_API aclFloatArray *aclCreateFloatArray(const float *value, uint64_t size)
{
    ARRAY_CREATE("aclCreateFloatArray", nn_floatarray_t, NN_KIND_FLOATARRAY, float);
    return (aclFloatArray *)a;
}

NN_API aclBoolArray *aclCreateBoolArray(const bool *value, uint64_t size)
{
    ARRAY_CREATE("aclCreateBoolArray", nn_boolarray_t, NN_KIND_BOOLARRAY, bool);
    return (aclBoolArray *)a;
}

#define ARRAY_DESTROY(api, type, kind, h)                                                           \
    if (!h)                                                                                        \
        return ACLNN_SUCCESS;                                                                      \
    if (!nn_obj_remove(h, kind))                                                                   \
        return check_handle(api, "array", h, kind);                                                \
    free(((type *)(h))->v);                                                                        \
    free((void *)(h));                                                                             \
    return ACLNN_SUCCESS

NN_API aclnnStatus aclDestroyIntArray(const aclIntArray *array)
{
    ARRAY_DESTROY("aclDestroyIntArray", nn_intarray_t, NN_KIND_INTARRAY, array);
}

NN_API aclnnStatus aclDestroyFloatArray(const aclFloatArray *array)
{
    ARRAY_DESTROY("aclDestroyFloatArray", nn_floatarray_t, NN_KIND_FLOATARRAY, array);
}

NN_API aclnnStatus aclDestroyBoolArray(const aclBoolArray *array)
{
    ARRAY_DESTROY("aclDestroyBoolArray", nn_boolarray_t, NN_KIND_BOOLARRAY, array);
}

/* lists hold the handles; aclDestroyTensorList also destroys the tensors, like CANN's */
NN_API aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size)
{
    static const char api[] = "aclCreateTensorList";
    if (size && !value) {
        nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: value is NULL but size is %llu", api, (unsigned long long)size);
        return NULL;
    }
    for (uint64_t i = 0; i < size; i++)
        if (value[i] && check_handle(api, "value[i]", value[i], NN_KIND_TENSOR))
            return NULL;
    ARRAY_CREATE(api, nn_tensorlist_t, NN_KIND_TENSORLIST, nn_tensor_t *);
    return (aclTensorList *)a;
}

NN_API aclScalarList *aclCreateScalarList(const aclScalar *const *value, uint64_t size)
{
    static const char api[] = "aclCreateScalarList";
    if (size && !value) {
        nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: value is NULL but size is %llu", api, (unsigned long long)size);
        return NULL;
    }
    for (uint64_t i = 0; i < size; i++)
        if (check_handle(api, "value[i]", value[i], NN_KIND_SCALAR))
            return NULL;
    ARRAY_CREATE(api, nn_scalarlist_t, NN_KIND_SCALARLIST, nn_scalar_t *);
    return (aclScalarList *)a;
}

NN_API aclnnStatus aclDestroyTensorList(const aclTensorList *array)
{
    if (!array)
        return ACLNN_SUCCESS;
    if (!nn_obj_remove(array, NN_KIND_TENSORLIST))
        return check_handle("aclDestroyTensorList", "array", array, NN_KIND_TENSORLIST);
    const nn_tensorlist_t *l = (const nn_tensorlist_t *)array;
    for (uint64_t i = 0; i < l->n; i++)
        aclDestroyTensor((const aclTensor *)l->v[i]);
    free(l->v);
    free((void *)l);
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclDestroyScalarList(const aclScalarList *array)
{
    if (!array)
        return ACLNN_SUCCESS;
    if (!nn_obj_remove(array, NN_KIND_SCALARLIST))
        return check_handle("aclDestroyScalarList", "array", array, NN_KIND_SCALARLIST);
    const nn_scalarlist_t *l = (const nn_scalarlist_t *)array;
    for (uint64_t i = 0; i < l->n; i++)
        aclDestroyScalar((const aclScalar *)l->v[i]);
    free(l->v);
    free((void *)l);
    return ACLNN_SUCCESS;
}

#define SIZE_GETTER(fn, type, kind, hname)                                                          \
    NN_API aclnnStatus fn(const type *hname, uint64_t *size)                                        \
    {                                                                                              \
        aclnnStatus rc = check_handle(#fn, #hname, hname, kind);                                   \
        if (rc)                                                                                    \
            return rc;                                                                             \
        if (!size)                                                                                 \
            return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: size must not be NULL", #fn);              \
        *size = ((const nn_intarray_t *)(const void *)hname)->n;                                   \
        return ACLNN_SUCCESS;                                                                      \
    }

SIZE_GETTER(aclGetIntArraySize, aclIntArray, NN_KIND_INTARRAY, array)
SIZE_GETTER(aclGetFloatArraySize, aclFloatArray, NN_KIND_FLOATARRAY, array)
SIZE_GETTER(aclGetBoolArraySize, aclBoolArray, NN_KIND_BOOLARRAY, array)
SIZE_GETTER(aclGetTensorListSize, aclTensorList, NN_KIND_TENSORLIST, tensorList)
SIZE_GETTER(aclGetScalarListSize, aclScalarList, NN_KIND_SCALARLIST, scalarList)

/* ------------------------------------------------------------------ init */

NN_API aclnnStatus aclnnInit(const char *configPath)
{
    (void)configPath;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclnnFinalize(void) { return ACLNN_SUCCESS; }

/* ------------------------------------------------------------------ executors */

nn_exec_t *nn_exec_new(const char *api, nn_run_fn run, int32_t engine, size_t psize)
{
    size_t size = sizeof(nn_exec_t) + ((psize + 15) & ~(size_t)15);
    nn_exec_t *ex = calloc(1, size);
    if (!ex) {
        nn_err(ACLNN_ERR_INNER_CREATE_EXECUTOR, "%s: out of host memory", api);
        return NULL;
    }
    ex->api = api;
    ex->run = run;
    ex->engine = engine;
    ex->size = size;
    ex->cores = 1;
    return ex;
}

int nn_exec_add(nn_exec_t *ex, const nn_tensor_t *t, const char *name, bool output)
{
    if (!t || ex->nview >= NN_MAX_OPERANDS)
        return -1;
    nn_view_init(&ex->v[ex->nview], t, name, output);
    return ex->nview++;
}

void nn_view_init(nn_view_t *v, const nn_tensor_t *t, const char *name, bool output)
{
    memset(v, 0, sizeof *v);
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof v->shape);
    memcpy(v->stride, t->stride, sizeof v->stride);
    v->numel = t->numel;
    v->lo = t->lo;
    v->hi = t->hi;
    v->offset_bytes = t->offset * (int64_t)nn_dtype_size(t->dtype);
    v->data = t->data ? (char *)t->data + v->offset_bytes : NULL;
    v->handle = t;
    v->name = name;
    v->output = output;
}

aclnnStatus nn_exec_finish(nn_exec_t *ex, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (!nn_obj_add(ex, NN_KIND_EXECUTOR)) {
        free(ex);
        return nn_err(ACLNN_ERR_INNER_CREATE_EXECUTOR, "out of host memory");
    }
    *workspaceSize = ex->ws_size;
    *executor = (aclOpExecutor *)ex;
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor)
{
    if (!executor)
        return nn_err(ACLNN_ERR_INNER_NULLPTR, "aclSetAclOpExecutorRepeatable: executor must not be NULL");
    pthread_mutex_lock(&g_obj_lock);
    bool live = obj_kind_locked(executor) == NN_KIND_EXECUTOR;
    if (live)
        ((nn_exec_t *)executor)->repeatable = true;
    pthread_mutex_unlock(&g_obj_lock);
    if (!live)
        return check_handle("aclSetAclOpExecutorRepeatable", "executor", executor, NN_KIND_EXECUTOR);
    return ACLNN_SUCCESS;
}

NN_API aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor)
{
    if (!executor)
        return nn_err(ACLNN_ERR_INNER_NULLPTR, "aclDestroyAclOpExecutor: executor must not be NULL");
    if (!nn_obj_remove(executor, NN_KIND_EXECUTOR))
        return check_handle("aclDestroyAclOpExecutor", "executor", executor, NN_KIND_EXECUTOR);
    free(executor);
    return ACLNN_SUCCESS;
}

static aclnnStatus set_addr(const char *api, aclOpExecutor *executor, size_t index, aclTensor *tensor, void *addr,
                            int which /* 0 input, 1 output, 2 any */)
{
    if (!executor || !tensor)
        return nn_err(ACLNN_ERR_INNER_NULLPTR, "%s: executor and tensor must not be NULL", api);
    pthread_mutex_lock(&g_obj_lock);   /* against a concurrent launch copying the executor */
    if (obj_kind_locked(executor) != NN_KIND_EXECUTOR) {
        pthread_mutex_unlock(&g_obj_lock);
        return check_handle(api, "executor", executor, NN_KIND_EXECUTOR);
    }
    nn_exec_t *ex = (nn_exec_t *)executor;
    if (!ex->repeatable) {
        pthread_mutex_unlock(&g_obj_lock);
        return NN_PARAM("%s: the executor is not repeatable (call aclSetAclOpExecutorRepeatable after phase 1)", api);
    }
    size_t k = 0;
    for (int32_t i = 0; which != 1 && i < ex->nxv; i++) {   /* list inputs first (parameter order) */
        nn_view_t *v = (nn_view_t *)(void *)(ex->params + ex->xv_off) + i;
        if (k++ != index)
            continue;
        v->data = addr ? (char *)addr + v->offset_bytes : NULL;
        if (obj_kind_locked(tensor) == NN_KIND_TENSOR)
            ((nn_tensor_t *)tensor)->data = addr;
        pthread_mutex_unlock(&g_obj_lock);
        return ACLNN_SUCCESS;
    }
    for (int32_t i = 0; i < ex->nview; i++) {
        nn_view_t *v = &ex->v[i];
        if ((which == 0 && v->output) || (which == 1 && !v->output))
            continue;
        if (k++ != index)
            continue;
        v->data = addr ? (char *)addr + v->offset_bytes : NULL;
        if (obj_kind_locked(tensor) == NN_KIND_TENSOR)
            ((nn_tensor_t *)tensor)->data = addr;
        pthread_mutex_unlock(&g_obj_lock);
        return ACLNN_SUCCESS;
    }
    const char *name = ex->api;
    pthread_mutex_unlock(&g_obj_lock);
    return NN_PARAM("%s: index %zu is out of range: the executor of %s has %zu %s tensors", api, index, name, k,
                    which == 0 ? "input" : which == 1 ? "output" : "");
}

NN_API aclnnStatus aclSetInputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr)
{
    return set_addr("aclSetInputTensorAddr", executor, index, tensor, addr, 0);
}

NN_API aclnnStatus aclSetOutputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr)
{
    return set_addr("aclSetOutputTensorAddr", executor, index, tensor, addr, 1);
}

NN_API aclnnStatus aclSetTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr)
{
    return set_addr("aclSetTensorAddr", executor, index, tensor, addr, 2);
}

/* ------------------------------------------------------------------ phase 2: launching */

typedef struct dev_info {
    uint32_t ai_cores, vector_cores, host_threads;
} dev_info_t;
static dev_info_t g_dev_info[64];

/* the device's cores of the engine (engine -1: the host threads running a launch's blocks) */
static uint32_t device_cores(int32_t dev, int32_t engine)
{
    if (dev < 0 || dev >= 64)
        return 1;
    dev_info_t *d = &g_dev_info[dev];
    uint32_t *slot = engine < 0 ? &d->host_threads : engine == ACLSIM_ENGINE_CUBE ? &d->ai_cores : &d->vector_cores;
    uint32_t c = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (!c) {
        aclsimDeviceStats st;
        memset(&st, 0, sizeof st);
        if (aclsimGetDeviceStats(dev, &st) == ACL_SUCCESS) {
            __atomic_store_n(&d->ai_cores, st.aiCoreNum ? st.aiCoreNum : 1, __ATOMIC_RELAXED);
            __atomic_store_n(&d->vector_cores, st.vectorCoreNum ? st.vectorCoreNum : 1, __ATOMIC_RELAXED);
            __atomic_store_n(&d->host_threads, st.hostThreads ? st.hostThreads : 1, __ATOMIC_RELAXED);
        } else {
            (void)aclGetRecentErrMsg();
        }
        c = __atomic_load_n(slot, __ATOMIC_RELAXED);
        if (!c)
            c = 1;
    }
    return c;
}

uint32_t nn_blocks(const nn_exec_t *ex, int64_t work, int64_t grain)
{
    if (work <= grain || grain <= 0)
        return 1;
    int64_t b = (work + grain - 1) / grain;
    uint32_t cap = ex->nblocks_hint ? ex->nblocks_hint : 1;
    return b > (int64_t)cap ? cap : (uint32_t)b;
}

aclError nn_parallel(nn_exec_t *ex, uint32_t nblocks, aclsimBlockFn fn, void *arg)
{
    if (nblocks <= 1)
        return fn(0, 1, arg);
    return aclsimParallelFor(ex->device, nblocks, fn, arg);
}

static aclError task_run(void *arg)
{
    nn_exec_t *ex = arg;
    /* device operands freed since the launch would fault the device; report them instead */
    for (int32_t i = 0; i < ex->nview; i++) {
        nn_view_t *v = &ex->v[i];
        if (!v->numel)
            continue;
        size_t isz = nn_dtype_size(v->dtype);
        int32_t is_dev = 0;
        aclError rc = aclsimCheckKernelOperand(v->data + v->lo * (int64_t)isz, (uint64_t)(v->hi - v->lo) * isz,
                                               ex->device, v->name, &is_dev);
        if (rc) {
            const char *m = aclGetRecentErrMsg();
            return nn_err(ACLNN_ERR_RUNTIME_ERROR, "%s: %s", ex->api, m ? m : "operand is not accessible");
        }
    }
    return ex->run(ex);
}

static void task_release(void *arg) { free(arg); }

/* the stream and every operand (and the workspace) must be usable by the stream's device */
static aclnnStatus launch_checks(const char *api, nn_exec_t *ex, void *workspace, aclrtStream stream)
{
    int32_t dev = 0;
    if (aclsimStreamGetDevice(stream, &dev) != ACL_SUCCESS) {
        const char *m = aclGetRecentErrMsg();
        return nn_err(ACLNN_ERR_RUNTIME_ERROR, "%s: %s", api, m ? m : "invalid stream");
    }
    for (int32_t i = 0; i < ex->nview; i++) {
        nn_view_t *v = &ex->v[i];
        if (!v->numel)
            continue;
        if (!v->data)
            return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: %s has no data (tensorData was NULL) but %lld elements", api,
                          v->name, (long long)v->numel);
        size_t isz = nn_dtype_size(v->dtype);
        if (aclsimCheckKernelOperand(v->data + v->lo * (int64_t)isz, (uint64_t)(v->hi - v->lo) * isz, dev, v->name,
                                     NULL) != ACL_SUCCESS) {
            const char *m = aclGetRecentErrMsg();
            return NN_PARAM("%s: %s", api, m ? m : "operand is not device memory");
        }
    }
    if (ex->ws_size && aclsimCheckKernelOperand(workspace, ex->ws_size, dev, "workspace", NULL) != ACL_SUCCESS) {
        const char *m = aclGetRecentErrMsg();
        return NN_PARAM("%s: %s", api, m ? m : "workspace is not device memory");
    }
    ex->device = dev;
    return ACLNN_SUCCESS;
}

aclnnStatus nn_launch(const char *api, void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                      aclrtStream stream)
{
    if (!executor)
        return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: executor must not be NULL", api);
    /* claim the executor atomically (a single-use one leaves the live set; a repeatable one is
     * copied), so concurrent launches and destroys cannot race */
    char why[160] = "";
    nn_exec_t *run = NULL;
    bool single = false;
    pthread_mutex_lock(&g_obj_lock);
    nn_exec_t *ex = obj_kind_locked(executor) == NN_KIND_EXECUTOR ? (nn_exec_t *)executor : NULL;
    if (!ex)
        snprintf(why, sizeof why, "not live");
    else if (strcmp(ex->api, api) != 0)
        snprintf(why, sizeof why, "the executor was created by %.40sGetWorkspaceSize, not %.40sGetWorkspaceSize",
                 ex->api, api);
    else if (workspaceSize < ex->ws_size)
        snprintf(why, sizeof why, "workspaceSize %llu is smaller than the %llu bytes %.40sGetWorkspaceSize asked for",
                 (unsigned long long)workspaceSize, (unsigned long long)ex->ws_size, api);
    else if (ex->ws_size && !workspace)
        snprintf(why, sizeof why, "workspace is NULL but %llu bytes are needed", (unsigned long long)ex->ws_size);
    else if (ex->repeatable) {   /* the task gets its own copy: the caller may update or destroy the executor */
        run = malloc(ex->size);
        if (run)
            memcpy(run, ex, ex->size);
        else
            snprintf(why, sizeof why, "out of host memory");
    } else {
        obj_remove_locked(ex, NN_KIND_EXECUTOR);
        run = ex;
        single = true;
    }
    pthread_mutex_unlock(&g_obj_lock);
    if (!run) {
        if (!ex)
            return NN_PARAM("%s: executor %p is not a live aclOpExecutor: it was already used (executors are "
                            "single-use unless aclSetAclOpExecutorRepeatable is called after phase 1), destroyed, or "
                            "never created", api, (void *)executor);
        return nn_err(strstr(why, "NULL") ? ACLNN_ERR_PARAM_NULLPTR : ACLNN_ERR_PARAM_INVALID, "%s: %s", api, why);
    }
    aclnnStatus rc = launch_checks(api, run, workspace, stream);
    if (rc) {   /* not launched: a single-use executor stays usable, a copy is dropped */
        if (single)
            nn_obj_add(run, NN_KIND_EXECUTOR);
        else
            free(run);
        return rc;
    }
    run->ws = workspace;
    run->nblocks_hint = device_cores(run->device, run->engine);
    run->threads_hint = device_cores(run->device, -1);
    if (run->cores > run->nblocks_hint)
        run->cores = run->nblocks_hint;
    if (!run->cores)
        run->cores = 1;
    /* on failure the runtime does not call the release function: free `run` here */
    if (aclsimLaunchTask(stream, task_run, run, task_release, run->engine, run->cores, run->cost_ns) != ACL_SUCCESS) {
        free(run);
        const char *m = aclGetRecentErrMsg();
        return nn_err(ACLNN_ERR_RUNTIME_ERROR, "%s: %s", api, m ? m : "cannot launch on the stream");
    }
    return ACLNN_SUCCESS;
}
