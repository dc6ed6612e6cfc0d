/* canna_dl._native: strided copies in host-addressable memory.
 *
 * strided_copy(dst, dst_strides, src, src_strides, shape, itemsize): copy every element of the
 * `shape`-shaped view at address `src` (strides in bytes, any sign, 0 = broadcast) into the view
 * at `dst`. Dimensions are coalesced into the longest contiguous runs, which are memcpy'd; the GIL
 * is released for large copies. Internal: the caller (canna_dl) has checked both views' bounds.
 */
#include "native.h"

#include <string.h>

static void copy_elems(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, int64_t item)
{
    switch (item) {
#define LOOP(T)                                                                                     \
    for (int64_t i = 0; i < n; i++, d += ds, s += ss) {                                             \
        T v;                                                                                        \
        memcpy(&v, s, sizeof(T));                                                                   \
        memcpy(d, &v, sizeof(T));                                                                   \
    }                                                                                               \
    return;
    case 1: LOOP(uint8_t)
    case 2: LOOP(uint16_t)
    case 4: LOOP(uint32_t)
    case 8: LOOP(uint64_t)
#undef LOOP
    default:
        for (int64_t i = 0; i < n; i++, d += ds, s += ss)
            memcpy(d, s, (size_t)item);
    }
}

static void do_copy(char *dst, const int64_t *ds, const char *src, const int64_t *ss, const int64_t *shape, int n,
                    int64_t item)
{
    if (n == 0) {
        memcpy(dst, src, (size_t)item);
        return;
    }
    int64_t inner = shape[n - 1], ids = ds[n - 1], iss = ss[n - 1];
    int contiguous = ids == item && iss == item;
    int64_t idx[CANNA_MAX_NDIM] = {0};
    for (;;) {
        if (contiguous)
            memmove(dst, src, (size_t)(inner * item));
        else
            copy_elems(dst, ids, src, iss, inner, item);
        /* advance the outer index */
        int d = n - 2;
        while (d >= 0) {
            idx[d]++;
            dst += ds[d];
            src += ss[d];
            if (idx[d] < shape[d])
                break;
            dst -= ds[d] * shape[d];
            src -= ss[d] * shape[d];
            idx[d] = 0;
            d--;
        }
        if (d < 0)
            return;
    }
}

PyObject *py_strided_copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "strided_copy(dst, dst_strides, src, src_strides, shape, itemsize)");
        return NULL;
    }
    unsigned long long dst = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long src = PyLong_AsUnsignedLongLong(args[2]);
    long long item = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "shape must be a tuple");
        return NULL;
    }
    int n = (int)PyTuple_GET_SIZE(args[4]);
    if (n > CANNA_MAX_NDIM || item <= 0) {
        PyErr_SetString(PyExc_ValueError, "strided_copy: bad ndim or itemsize");
        return NULL;
    }
    int64_t shape[CANNA_MAX_NDIM], ds[CANNA_MAX_NDIM], ss[CANNA_MAX_NDIM];
    if (read_int64_tuple(args[4], shape, n, "shape") < 0 || read_int64_tuple(args[1], ds, n, "dst_strides") < 0 ||
        read_int64_tuple(args[3], ss, n, "src_strides") < 0)
        return NULL;
    int64_t total = 1;
    for (int i = 0; i < n; i++)
        total *= shape[i];
    if (total == 0)
        Py_RETURN_NONE;
    if (!dst || !src) {
        PyErr_SetString(PyExc_ValueError, "strided_copy: NULL pointer");
        return NULL;
    }
    /* drop size-1 dims, then merge dims that are contiguous on both sides */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (shape[i] == 1)
            continue;
        shape[m] = shape[i];
        ds[m] = ds[i];
        ss[m] = ss[i];
        m++;
    }
    int k = 0;
    for (int i = 0; i < m; i++) {
        if (k > 0 && ds[k - 1] == ds[i] * shape[i] && ss[k - 1] == ss[i] * shape[i]) {
            shape[k - 1] *= shape[i];
            ds[k - 1] = ds[i];
            ss[k - 1] = ss[i];
            continue;
        }
        shape[k] = shape[i];
        ds[k] = ds[i];
        ss[k] = ss[i];
        k++;
    }
    if (total * item >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS
        do_copy((char *)(uintptr_t)dst, ds, (const char *)(uintptr_t)src, ss, shape, k, item);
        Py_END_ALLOW_THREADS
    } else {
        do_copy((char *)(uintptr_t)dst, ds, (const char *)(uintptr_t)src, ss, shape, k, item);
    }
    Py_RETURN_NONE;
}
