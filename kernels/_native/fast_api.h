/* kernels._native's fast paths (the elementwise one, the memo) for a C caller (internal; canna_dl/torch/_aten.cc).
 *
 * The capsule kernels._native.fast_api (name CANNA_FAST_API_CAPSULE) holds a const CannaFastApi *.
 * Include a DLPack header (dlpack.h: DLTensor) before this one: the caller's copy of the DLPack ABI
 * (the framework's own) is used, not canna's.
 *
 * call(op, stream, x, y, y_scalar, p, dtype, alloc, ctx) runs the same cached call as the Python-level
 * fast(op, stream, x, y, p) — same key, same cache, same plans — on operands the caller read itself:
 *   op: the op's fast id (| FAST_INPLACE: the output is x itself);
 *   stream: the call's API name (str: the thread's current stream) or a stream handle (int);
 *   x, y: CPU DLTensors (data already offset, strides given; y NULL when the operand is a number),
 *     which the caller guarantees are framework tensors without autograd metadata or lazy bits
 *     (a negative or conjugate view); y_scalar: the number (float / int / bool) or None when y is NULL;
 *   p: the attribute (a number, a code, or None);
 *   dtype: the framework's dtype object of the output the caller will allocate;
 *   alloc(ctx, out): called on a hit that needs a fresh output: allocate a contiguous tensor of the
 *     expected sizes and of `dtype`, describe it in *out; 0, or -1 with a Python exception set.
 * Returns 1 (done: the output written, the stream waited for), 0 (not applicable, a miss, or an output
 * the caller cannot allocate: take the Python route; an allocated output is the caller's to drop) or
 * -1 (a Python exception set). GIL held.
 *
 * memo(op, stream, na, t, is_t, a, alloc, ctx, result, nresult, single) runs the same cached call as
 * the Python-level memo(op, stream, *args) — same key, cache and recorded launches — on arguments
 * the caller read itself:
 *   op: the op's memo id; stream: as for call;
 *   na arguments in the op's order: t[i] a CPU DLTensor where is_t[i] (the same guarantees as for
 *     call), else a[i] the Python object the Python route would pass (a number, str, int list or
 *     tuple, torch dtype, None; a[i] is not read where is_t[i]);
 *   alloc(ctx, j, ndim, shape, dtype, out): allocate output j, a contiguous tensor of that shape and
 *     torch dtype object, described in *out; 0, or -1 with a Python exception set, or 1 when it
 *     cannot (the call is not applicable);
 *   result[CANNA_MEMO_MAXRESULTS], *nresult: what the call returns, per result slot: j < 128 output
 *     j, 128 + i argument i, 255 None; *single: 1 the call returns one tensor (result[0]), 0 a tuple
 *     of the slots, -1 None (an op updating its arguments in place).
 * Returns 1 (done: the outputs written, the stream waited for), 0 (not applicable, a miss, a stale
 * entry: take the Python route, which runs the call and registers it; allocated outputs are the
 * caller's to drop) or -1 (a Python exception set). GIL held.
 */
#ifndef CANNA_KERNELS_FAST_API_H
#define CANNA_KERNELS_FAST_API_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define CANNA_FAST_API_CAPSULE "kernels._native.fast_api"
#define CANNA_FAST_API_VERSION 2
#define CANNA_MEMO_MAXRESULTS 16
#define CANNA_FAST_INPLACE 0x10000   /* op flag: the output is x itself (x op= y) */

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*canna_fast_alloc_fn)(void *ctx, DLTensor *out);
typedef int (*canna_memo_alloc_fn)(void *ctx, int j, int ndim, const int64_t *shape, PyObject *dtype, DLTensor *out);

typedef struct {
    unsigned version;   /* CANNA_FAST_API_VERSION */
    int (*call)(long op, PyObject *stream, const DLTensor *x, const DLTensor *y, PyObject *y_scalar, PyObject *p,
                PyObject *dtype, canna_fast_alloc_fn alloc, void *ctx);
    int (*memo)(long op, PyObject *stream, int na, const DLTensor *t, const int *is_t, PyObject *const *a,
                canna_memo_alloc_fn alloc, void *ctx, unsigned char *result, int *nresult, int *single);
} CannaFastApi;

#ifdef __cplusplus
}
#endif

#endif
