/* canna simulator: private header of the simulated op library (libopapi_sim.so).
 *
 * The library exports CANN's aclnn meta API (aclCreateTensor & co., like libnnopbase.so) and the
 * two-phase aclnn ops (like libopapi.so), declared in acl_rt/_cdef/nn_*.h, and runs every op on
 * the CPU as a task of the given stream (aclsimLaunchTask), its blocks spread over the device's
 * AI-core threads (aclsimParallelFor). The behaviour is specified in README.md next to this file.
 *
 * Objects: every aclTensor / aclScalar / aclIntArray / ... / aclOpExecutor handed out is a heap
 * object registered in a set of live objects; every API checks a handle against that set before
 * touching it, so a destroyed, foreign or wrong-kind handle is an error, not a crash.
 * Executors own copies of everything they need (tensor views, scalars, int arrays), so the
 * caller may destroy its descriptors right after phase 1 and the queued task never reads them.
 */
#ifndef CANNA_OPSIM_H
#define CANNA_OPSIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>

#ifdef CANNA_WITH_CANN_HEADERS
/* CANN's runtime headers give the ACL types (aclDataType, aclFormat, ...). Its aclnn headers are
 * C++ (acl_meta.h uses constexpr), so these C sources declare the opaque aclnn handles themselves,
 * exactly as nn_types.h does; the prototypes below then compile against CANN's types. */
#include <acl/acl.h>
#include <acl/error_codes/rt_error_codes.h>
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;
typedef struct aclFloatArray aclFloatArray;
typedef struct aclBoolArray aclBoolArray;
typedef struct aclTensorList aclTensorList;
typedef struct aclScalarList aclScalarList;
typedef int32_t aclnnStatus;
#include "../../acl_rt/_cdef/nn_errors.h"
#else
#include "../../acl_rt/_cdef/rt_types.h"
#include "../../acl_rt/_cdef/rt_errors.h"
#include "../../acl_rt/_cdef/nn_types.h"
#include "../../acl_rt/_cdef/nn_errors.h"
#endif
#include "../../acl_rt/_cdef/rt_funcs.h"
#include "../../acl_rt/_cdef/nn_funcs.h"
#include "../../acl_rt/_cdef/sim_funcs.h"

#define NN_API __attribute__((visibility("default")))
#define NN_LIKELY(x) __builtin_expect(!!(x), 1)
#define NN_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* NN_CLONES: a hot loop compiled for AVX-512, AVX2 and baseline x86-64, the one chosen at load time
 * (GCC function multiversioning, `target_clones`), so that streaming kernels run at the core's vector
 * width as NumPy's and PyTorch's dispatched loops do. NN_CLONES_NOFMA leaves out AVX-512 (which
 * implies FMA): for loops that must round every step as PyTorch does (they also take
 * -ffp-contract=off). Not under clang or the sanitizers (no ifunc resolvers there). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define NN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define NN_CLONES_NOFMA __attribute__((target_clones("avx2", "default")))
#else
#define NN_CLONES
#define NN_CLONES_NOFMA
#endif

#define NN_MAX_DIMS 8          /* aclnn ops accept at most 8 dimensions */
#define NN_MAX_OPERANDS 16     /* tensors (inputs + outputs) one executor references (FlashAttentionScoreGrad: 16) */
#define NN_MAX_ARRAY 64        /* longest aclIntArray an op parameter may hold */
#define NN_MSG_MAX 512

/* ------------------------------------------------------------------ errors */

/* format a message, store it as the thread's recent error (aclGetRecentErrMsg) and return code */
aclnnStatus nn_err(aclnnStatus code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define NN_PARAM(...) nn_err(ACLNN_ERR_PARAM_INVALID, __VA_ARGS__)

/* ------------------------------------------------------------------ dtypes */

/* compute types of the kernels */
enum { CT_F32 = 0, CT_F64 = 1, CT_I32 = 2, CT_I64 = 3, CT_COUNT = 4 };

size_t nn_dtype_size(aclDataType dt);             /* 0 for a dtype the simulator does not handle */
const char *nn_dtype_name(aclDataType dt);         /* "float32", ... ; "dtype 123" for others */
bool nn_dtype_known(aclDataType dt);               /* a value of aclDataType */
static inline bool nn_is_float(aclDataType d)
{
    return d == ACL_FLOAT || d == ACL_FLOAT16 || d == ACL_BF16 || d == ACL_DOUBLE;
}
static inline bool nn_is_int(aclDataType d)
{
    return d == ACL_INT8 || d == ACL_UINT8 || d == ACL_INT16 || d == ACL_INT32 || d == ACL_INT64;
}
/* the floating dtypes every float op supports, the integer dtypes of arithmetic */
static inline bool nn_is_op_float(aclDataType d) { return nn_is_float(d); }
static inline bool nn_is_op_int(aclDataType d) { return d == ACL_INT32 || d == ACL_INT64; }
/* torch's type promotion of two dtypes (float16 + bfloat16 -> float32, int + float -> float) */
aclDataType nn_promote(aclDataType a, aclDataType b);
/* torch's canCast: a value of `from` may be written to `to` (no float -> integral, no -> bool) */
bool nn_can_cast(aclDataType from, aclDataType to);
/* the compute type for a (promoted) dtype: double for float64, float for the other floats,
 * int64/int32 for integers */
int nn_ct_of(aclDataType d);
static inline size_t nn_ct_size(int ct) { return (ct == CT_F32 || ct == CT_I32) ? 4 : 8; }

/* float16 / bfloat16 <-> float32 (round to nearest even; NaN stays NaN) */
static inline float nn_h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0) {
        if (m == 0) {
            bits = s;
        } else {   /* subnormal: normalize */
            e = 127 - 15 + 1;
            while (!(m & 0x400u)) {
                m <<= 1;
                e--;
            }
            bits = s | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0);
    } else {
        bits = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t nn_f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)   /* inf or NaN */
        return (uint16_t)(s | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u)   /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(s | 0x7c00u);
    if (ax < 0x38800000u) {  /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u)   /* < 2^-25: rounds to 0 */
            return (uint16_t)s;
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;   /* 14 + (113 - e) */
        uint32_t v = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (v & 1)))
            v++;
        return (uint16_t)(s | v);
    }
    uint32_t v = ((ax >> 13) - ((127 - 15) << 10));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (v & 1)))
        v++;
    return (uint16_t)(s | v);
}

static inline float nn_b2f(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t nn_f2b(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)   /* NaN: keep it quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* float -> integer as x86 does it (cvtt*: NaN and out of range give the "integer indefinite"
 * value INT64_MIN), without C's undefined behaviour */
static inline int64_t nn_d2i64(double v)
{
    if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0))
        return INT64_MIN;
    return (int64_t)v;
}
static inline int32_t nn_d2i32(double v)
{
    if (!(v > -2147483649.0 && v < 2147483648.0))
        return INT32_MIN;
    return (int32_t)v;
}

/* strided conversions between a tensor's dtype and a compute type (n elements; strides in elements) */
void nn_load(int ct, void *dst, const void *src, int64_t stride, aclDataType dt, int64_t n);
void nn_store(int ct, void *dst, int64_t stride, aclDataType dt, const void *src, int64_t n);
/* one element */
double nn_get_f64(const void *p, aclDataType dt);
int64_t nn_get_i64(const void *p, aclDataType dt);

/* ------------------------------------------------------------------ objects */

enum {
    NN_KIND_TENSOR = 1, NN_KIND_SCALAR, NN_KIND_INTARRAY, NN_KIND_FLOATARRAY, NN_KIND_BOOLARRAY,
    NN_KIND_TENSORLIST, NN_KIND_SCALARLIST, NN_KIND_EXECUTOR
};
const char *nn_kind_name(int kind);
/* register / unregister a live object; lookup returns true when p is a live object of `kind` */
bool nn_obj_add(const void *p, int kind);
bool nn_obj_remove(const void *p, int kind);
int nn_obj_kind(const void *p);   /* 0 when p is not a live object */

typedef struct nn_tensor {      /* aclTensor */
    aclDataType dtype;
    aclFormat format;
    int32_t ndim, sdim;
    int64_t shape[NN_MAX_DIMS], stride[NN_MAX_DIMS];
    int64_t sshape[NN_MAX_DIMS];
    int64_t offset;             /* elements */
    int64_t numel;
    int64_t lo, hi;             /* element range [offset+lo, offset+hi) the view touches (numel > 0) */
    void *data;                 /* storage base */
} nn_tensor_t;

typedef struct nn_scalar {      /* aclScalar: the value, kept exactly */
    aclDataType dtype;
    double f;
    int64_t i;
    bool is_float;              /* a floating dtype (f is the value) or not (i is) */
} nn_scalar_t;

typedef struct nn_intarray {
    uint64_t n;
    int64_t *v;
} nn_intarray_t;

typedef struct nn_floatarray {
    uint64_t n;
    float *v;
} nn_floatarray_t;

typedef struct nn_boolarray {
    uint64_t n;
    bool *v;
} nn_boolarray_t;

typedef struct nn_tensorlist {
    uint64_t n;
    nn_tensor_t **v;
} nn_tensorlist_t;

typedef struct nn_scalarlist {
    uint64_t n;
    nn_scalar_t **v;
} nn_scalarlist_t;

/* the checked view of a handle argument (NULL handle -> *out = NULL when optional) */
aclnnStatus nn_tensor_arg(const char *api, const char *name, const aclTensor *h, bool optional,
                          const nn_tensor_t **out);
aclnnStatus nn_scalar_arg(const char *api, const char *name, const aclScalar *h, const nn_scalar_t **out);
aclnnStatus nn_intarray_arg(const char *api, const char *name, const aclIntArray *h, bool optional,
                            const nn_intarray_t **out);
aclnnStatus nn_boolarray_arg(const char *api, const char *name, const aclBoolArray *h, bool optional,
                             const nn_boolarray_t **out);
/* The outputMask of a backward with three optional gradients (input, weight, bias): 3 values, and
 * the output of each true one given (names: the outputs' parameter names, for the messages). */
aclnnStatus nn_output_mask3(const char *api, const nn_boolarray_t *mask, const nn_tensor_t *const outs[3],
                            const char *const names[3]);

/* ------------------------------------------------------------------ views and executors */

/* a tensor view as an executor keeps it: data already offset, strides in elements */
typedef struct nn_view {
    aclDataType dtype;
    int32_t ndim;
    int64_t shape[NN_MAX_DIMS], stride[NN_MAX_DIMS];
    int64_t numel;
    int64_t lo, hi;             /* touched element range relative to data */
    int64_t offset_bytes;       /* offset of data from the storage base */
    char *data;
    const void *handle;         /* the aclTensor it was made from (aclSetInputTensorAddr) */
    const char *name;           /* the parameter name, for messages */
    bool output;
} nn_view_t;

struct nn_exec;
typedef aclError (*nn_run_fn)(struct nn_exec *ex);

typedef struct nn_exec {        /* aclOpExecutor */
    const char *api;            /* "aclnnAdd" */
    nn_run_fn run;
    int32_t engine;             /* ACLSIM_ENGINE_VECTOR / _CUBE */
    uint32_t cores;             /* blocks it spreads over (utilization) */
    uint64_t cost_ns;           /* run-time estimate (inline fast path when small) */
    uint64_t ws_size;           /* workspace bytes it needs */
    bool repeatable;
    int32_t nview;
    nn_view_t v[NN_MAX_OPERANDS];
    /* input tensors kept in the params (an aclTensorList's: nxv views at byte offset xv_off of
     * params), numbered before the views of v by aclSetInputTensorAddr / aclSetTensorAddr */
    int32_t nxv;
    uint32_t xv_off;
    /* set at launch */
    char *ws;
    int32_t device;
    uint32_t nblocks_hint;      /* AI-core threads' worth of blocks on the device */
    uint32_t threads_hint;      /* host threads that run those blocks at once (the launching one included) */
    size_t size;                /* bytes of this struct including the params */
    _Alignas(16) unsigned char params[];
} nn_exec_t;

/* a new executor with `psize` bytes of zeroed op parameters (ex->params) */
nn_exec_t *nn_exec_new(const char *api, nn_run_fn run, int32_t engine, size_t psize);
/* append a view of t (t may be NULL for an absent optional operand: nothing added, returns -1) */
int nn_exec_add(nn_exec_t *ex, const nn_tensor_t *t, const char *name, bool output);
/* fill *v as a view of t (what nn_exec_add appends; for operands kept outside ex->v, e.g. the
 * tensors of an aclTensorList) */
void nn_view_init(nn_view_t *v, const nn_tensor_t *t, const char *name, bool output);
/* finish phase 1: check out-pointers, register the executor, hand it out */
aclnnStatus nn_exec_finish(nn_exec_t *ex, uint64_t *workspaceSize, aclOpExecutor **executor);
/* phase 2 shared by every op */
aclnnStatus nn_launch(const char *api, void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                      aclrtStream stream);
/* the common prologue of phase 1 */
#define NN_OUTPTRS(api)                                                                             \
    do {                                                                                           \
        if (!workspaceSize)                                                                        \
            return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize must not be NULL", api);     \
        if (!executor)                                                                             \
            return nn_err(ACLNN_ERR_PARAM_NULLPTR, "%s: executor must not be NULL", api);          \
    } while (0)

/* Streaming work (elements, weighted by cost) per block of elementwise ops, reductions and packing.
 * Blocks are claimed dynamically by the simulator's AI-core threads (aclsimParallelFor), so more
 * blocks than threads cost next to nothing (~0.1 us each) and let a thread that starts late (a
 * sleeping one takes ~20-50 us to wake on a small virtual machine) or loses its CPU still take a
 * share: ~64K elements (~10-30 us of work) keeps the tail short without measurable overhead. */
#define NN_BLOCK_GRAIN (64 * 1024)

/* number of AI-core blocks worth using for `work` units of `grain` each (>= 1, <= cores) */
uint32_t nn_blocks(const nn_exec_t *ex, int64_t work, int64_t grain);
/* run fn over nblocks blocks on the executor's device */
aclError nn_parallel(nn_exec_t *ex, uint32_t nblocks, aclsimBlockFn fn, void *arg);

/* ------------------------------------------------------------------ shape helpers */

/* "[2, 3, 4]" into buf */
const char *nn_shape_str(char *buf, size_t cap, const int64_t *shape, int32_t ndim);
#define NN_SHAPE(t) nn_shape_str((char[160]){0}, 160, (t)->shape, (t)->ndim)
/* NumPy broadcast of a and b into out (ndim returned through *ndim); false when they do not */
bool nn_broadcast(const int64_t *a, int32_t na, const int64_t *b, int32_t nb, int64_t *out, int32_t *ndim);
bool nn_same_shape(const nn_tensor_t *a, const int64_t *shape, int32_t ndim);
/* normalize a dim in [-ndim, ndim) (ndim 0 accepts -1 and 0); false when out of range */
bool nn_wrap_dim(int64_t d, int32_t ndim, int32_t *out);
/* common checks of a data tensor for an op: known format, at most 8 dims */
aclnnStatus nn_check_tensor(const char *api, const char *name, const nn_tensor_t *t);
/* an output must not partially overlap an input (exact aliasing of the same view is fine for
 * elementwise ops) */
bool nn_views_overlap(const nn_view_t *a, const nn_view_t *b);
/* the output view `out` of ex: no stride-0 dim of size > 1, no partial overlap with another view
 * (allow_same: an input that is exactly the same view is fine, for elementwise in-place) */
aclnnStatus nn_check_output_overlap(const char *api, const nn_exec_t *ex, int32_t out, bool allow_same);

/* element pointer of a view at N-D index */
static inline char *nn_at(const nn_view_t *v, const int64_t *idx)
{
    int64_t off = 0;
    for (int32_t i = 0; i < v->ndim; i++)
        off += idx[i] * v->stride[i];
    return v->data + off * (int64_t)nn_dtype_size(v->dtype);
}

/* An odometer over the dims [0, nd) of shape in row-major order: the index c and two element
 * offsets a and b (strides sa, sb), started at the linear index k and then stepped without a
 * division (a 64-bit division costs tens of cycles: most of a short row's time) */
typedef struct nn_odo {
    int64_t c[NN_MAX_DIMS], a, b;
} nn_odo_t;

static inline void nn_odo_start(nn_odo_t *o, int32_t nd, const int64_t *shape, const int64_t *sa, const int64_t *sb,
                                int64_t k)
{
    o->a = o->b = 0;
    for (int32_t d = nd - 1; d >= 0; d--) {
        o->c[d] = k % shape[d];
        k /= shape[d];
        o->a += o->c[d] * sa[d];
        o->b += o->c[d] * sb[d];
    }
}

static inline void nn_odo_next(nn_odo_t *o, int32_t nd, const int64_t *shape, const int64_t *sa, const int64_t *sb)
{
    for (int32_t d = nd - 1; d >= 0; d--) {
        o->a += sa[d];
        o->b += sb[d];
        if (++o->c[d] < shape[d])
            return;
        o->a -= o->c[d] * sa[d];
        o->b -= o->c[d] * sb[d];
        o->c[d] = 0;
    }
}

/* ------------------------------------------------------------------ BLAS (op_blas.c) */

enum { NN_BLAS_ROW = 101, NN_BLAS_COL = 102, NN_BLAS_NOTRANS = 111, NN_BLAS_TRANS = 112 };
/* C = alpha * op(A) op(B) + beta * C, row-major; single-threaded (the caller spreads blocks) */
aclnnStatus nn_blas_ready(const char *api);
void nn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void nn_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
              const double *b, int64_t ldb, double beta, double *c, int64_t ldc);
const char *nn_blas_name(void);
/* false when an LP64 BLAS cannot take these sizes in one call */
bool nn_blas_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

/* o[k] = exp(x[k] - m) for k < n (o may be NULL), returning the sum; vectorized, within 2 ulp of
 * expf, exp(-inf) = 0 (op_norm.c) */
double nn_exp_sum_f32(const float *restrict x, float *restrict o, int64_t n, float m);

/* ------------------------------------------------------------------ packing (op_common.c) */

/* a view as rows: the last dim is a row, every other dim indexes rows (row-major order) */
static inline int64_t nn_rows(const nn_view_t *v)
{
    return v->ndim ? v->numel / (v->shape[v->ndim - 1] ? v->shape[v->ndim - 1] : 1) : 1;
}
/* copy rows [r0, r1) of v, converted to compute type ct, into dst (contiguous; dst points at row 0) */
void nn_pack_rows(int ct, void *dst, const nn_view_t *v, int64_t r0, int64_t r1);
/* the inverse: rows [r0, r1) of contiguous src (compute type ct) into v, converted */
void nn_unpack_rows(int ct, const nn_view_t *v, const void *src, int64_t r0, int64_t r1);
/* the sum of W double lanes (a vector or an array), pairwise */
#define NN_HSUM(D, W)                                                                              \
    ({                                                                                             \
        double t_[W];                                                                              \
        memcpy(t_, &(D), sizeof t_);                                                               \
        for (int h_ = (W) / 2; h_ >= 1; h_ /= 2)                                                   \
            for (int j_ = 0; j_ < h_; j_++)                                                        \
                t_[j_] += t_[j_ + h_];                                                             \
        t_[0];                                                                                     \
    })
/* a view that is a contiguous array (C order; size-1 dims have any stride) */
static inline bool nn_view_contiguous(const nn_view_t *v)
{
    int64_t expect = 1;
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->stride[d] != expect)
            return false;
        expect *= v->shape[d];
    }
    return true;
}
/* a view that already is a contiguous array of compute type ct (usable in place of its packed copy) */
static inline bool nn_view_dense(const nn_view_t *v, int ct)
{
    return v->dtype == (ct == CT_F32 ? ACL_FLOAT : ACL_DOUBLE) && nn_view_contiguous(v);
}
/* whole view, in parallel over the executor's blocks */
aclError nn_pack(nn_exec_t *ex, int ct, void *dst, const nn_view_t *v);
aclError nn_unpack(nn_exec_t *ex, int ct, const nn_view_t *v, const void *src);
/* a view with its dims permuted / reshaped in place of another (helpers for ops) */
static inline size_t nn_align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* ------------------------------------------------------------------ pointwise engine (op_pointwise.c) */

/* out = f(in[0], ..., in[nin-1]) element by element over out's shape, for the ops of the activation,
 * dropout and loss families: every input broadcasts to out's shape (right-aligned), any strides and
 * float dtypes; the kernel sees n contiguous elements of each input converted to the compute type
 * (float for float32 / float16 / bfloat16, double for float64), `flat` (the row-major index in out's
 * shape of the first one) and the op's parameters, and writes n results in the compute type. */
#define NN_PW_MAX_IN 4
#define NN_PW_PARAMS 64        /* bytes of op parameters an executor of nn_pw_make keeps */
typedef void (*nn_pw_fn)(int64_t n, int64_t flat, void *out, const void *const *in, const void *params);
typedef struct nn_pw_kernel {
    nn_pw_fn f32, f64;
    int32_t weight;            /* relative cost of one element (1: a few flops; 8: transcendental) */
} nn_pw_kernel_t;
/* the compute type of a float dtype (CT_F64 for float64, else CT_F32) */
static inline int nn_pw_ct(aclDataType d) { return d == ACL_DOUBLE ? CT_F64 : CT_F32; }
/* phase 2 (inside an op's run function): run the kernel over the views (in parallel over blocks) */
aclError nn_pw_apply(nn_exec_t *ex, const nn_pw_kernel_t *k, int ct, int nin, const nn_view_t *const *in,
                     const nn_view_t *out, const void *params);
/* phase 1 of a plain pointwise op: float dtypes; each input broadcasts to out's shape; out may be
 * exactly an input (in place), no other overlap; `params` (psize <= NN_PW_PARAMS bytes) are kept */
aclnnStatus nn_pw_make(const char *api, const nn_pw_kernel_t *k, int ct, int nin, const nn_tensor_t *const *in,
                       const char *const *names, const nn_tensor_t *out, const char *oname, const void *params,
                       size_t psize, uint64_t *workspaceSize, aclOpExecutor **executor);
/* a float input or output of a pointwise op (ACLNN_ERR_PARAM_INVALID naming it otherwise) */
aclnnStatus nn_pw_check_float(const char *api, const char *name, const nn_tensor_t *t);
/* t's shape broadcasts to shape (right-aligned); message naming both otherwise */
aclnnStatus nn_pw_check_broadcast(const char *api, const char *name, const nn_tensor_t *t, const int64_t *shape,
                                  int32_t ndim);

#endif /* CANNA_OPSIM_H */
