/* kernels._native: the PyTorch fast path of the elementwise ops (torch in, torch out).
 *
 * fast(op, stream, x, y, p) reads torch tensors through PyTorch's DLPack C exchange API
 * (dltensor_from_py_object_no_sync: a non-owning DLTensor, no capsule, no Python-level calls),
 * makes a byte key of the call's signature (op, each tensor's dtype / shape / strides, scalar
 * values), and looks it up in a dict the Python side fills: key -> (plan, mode, dtype, shape).
 * On a hit it allocates the output (torch.empty_like(x) when mode is False, torch.empty(shape,
 * dtype=dtype) when True, else mode() — canna's pool for large outputs, handed to torch zero-copy), launches the plan with the three addresses and waits for the stream
 * (the result must be complete when a framework tensor is returned). On anything unusual it
 * returns None (not applicable: the Python path decides and raises the right errors) or the key
 * (a miss: the Python path computes the call and registers the plan under that key).
 *
 * Applicable only to exact torch.Tensor objects on the CPU (the unified memory model makes them
 * kernel operands), without requires_grad (canna_dl refuses those, as PyTorch's own DLPack export
 * does) and without the negative bit (its memory holds un-negated values).
 */
#include "native.h"

#include <string.h>

#include "../../canna_dl/_native/dlpack_abi.h"

#define KEY_MAX 1024
#define FAST_MAX_NDIM 8
#define FAST_INPLACE 0x10000   /* op flag: the output is x itself (x op= y); the cache entry's mode is None */

static PyTypeObject *g_tensor_type;   /* torch.Tensor (exact type only) */
static DLPackExchangeAPI *g_api;
static PyObject *g_empty_like, *g_empty, *g_cache;
static PyObject *g_capsule;           /* keeps the exchange API capsule alive */
static PyObject *s_requires_grad, *s_is_neg, *s_dtype_kwnames;

typedef struct {
    unsigned char b[KEY_MAX];
    size_t n;
} key_t_;

static int put(key_t_ *k, const void *p, size_t n)
{
    if (k->n + n > KEY_MAX)
        return -1;
    memcpy(k->b + k->n, p, n);
    k->n += n;
    return 0;
}

/* 1: a usable torch tensor, read into *t; 0: not applicable (no exception); -1: error */
static int read_tensor(PyObject *o, DLTensor *t)
{
    if (Py_TYPE(o) != g_tensor_type)
        return 0;
    if (g_api->dltensor_from_py_object_no_sync(o, t) != 0) {
        PyErr_Clear();
        return 0;
    }
    if (t->device.device_type != kDLCPU || t->ndim > FAST_MAX_NDIM || t->dtype.lanes != 1 ||
        (t->ndim && !t->strides))
        return 0;
    PyObject *rg = PyObject_GetAttr(o, s_requires_grad);
    if (!rg) {
        PyErr_Clear();
        return 0;
    }
    int grad = rg == Py_True;
    Py_DECREF(rg);
    if (grad)
        return 0;
    PyObject *neg = PyObject_CallMethodNoArgs(o, s_is_neg);
    if (!neg) {
        PyErr_Clear();
        return 0;
    }
    int is_neg = neg == Py_True;
    Py_DECREF(neg);
    return is_neg ? 0 : 1;
}

static int key_tensor(key_t_ *k, const DLTensor *t)
{
    unsigned char head[4] = {'T', t->dtype.code, t->dtype.bits, (unsigned char)t->ndim};
    if (put(k, head, 4))
        return -1;
    if (t->ndim && (put(k, t->shape, sizeof(int64_t) * (size_t)t->ndim) ||
                    put(k, t->strides, sizeof(int64_t) * (size_t)t->ndim)))
        return -1;
    return 0;
}

/* 1: a scalar (or None) put in the key; 0: not a scalar */
static int key_scalar(key_t_ *k, PyObject *o)
{
    if (o == Py_None) {
        unsigned char tag = 'N';
        return put(k, &tag, 1) ? 0 : 1;
    }
    if (PyBool_Check(o)) {
        unsigned char v[2] = {'B', (unsigned char)(o == Py_True)};
        return put(k, v, 2) ? 0 : 1;
    }
    if (PyFloat_CheckExact(o)) {
        unsigned char tag = 'F';
        double v = PyFloat_AS_DOUBLE(o);
        return (put(k, &tag, 1) || put(k, &v, sizeof v)) ? 0 : 1;
    }
    if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        unsigned char tag = 'I';
        return (put(k, &tag, 1) || put(k, &v, sizeof v)) ? 0 : 1;
    }
    return 0;
}

static void *data_of(const DLTensor *t) { return (char *)t->data + t->byte_offset; }

/* the bytes [lo, hi) a tensor's elements touch (strides >= 0: torch has no negative strides);
 * 0 when it has no elements */
static int byte_span(const DLTensor *t, uintptr_t *lo, uintptr_t *hi)
{
    uint64_t last = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0)
            return 0;
        if (t->strides[d] < 0)
            return -1;
        last += (uint64_t)(t->shape[d] - 1) * (uint64_t)t->strides[d];
    }
    size_t isz = ((size_t)t->dtype.bits + 7) / 8;
    *lo = (uintptr_t)data_of(t);
    *hi = *lo + (uintptr_t)((last + 1) * isz);
    return 1;
}

/* an in-place call may go fast only when y is exactly x's view or does not touch x's memory (the
 * general path raises on a partial overlap) */
static int inplace_ok(const DLTensor *x, const DLTensor *y)
{
    uintptr_t x0, x1, y0, y1;
    int rx = byte_span(x, &x0, &x1), ry = byte_span(y, &y0, &y1);
    if (rx < 0 || ry < 0)
        return 0;
    if (!rx || !ry || y1 <= x0 || x1 <= y0)
        return 1;
    if (data_of(x) != data_of(y) || x->ndim != y->ndim || x->dtype.bits != y->dtype.bits)
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != y->shape[d] || x->strides[d] != y->strides[d])
            return 0;
    return 1;
}

/* fast_configure(tensor_type, exchange_api_capsule, empty_like, empty, cache); tensor_type None
 * turns the fast path off */
PyObject *py_fast_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "fast_configure(tensor_type, exchange_api, empty_like, empty, cache)");
        return NULL;
    }
    if (args[0] == Py_None) {
        g_api = NULL;
        g_tensor_type = NULL;
        Py_RETURN_NONE;
    }
    if (!PyType_Check(args[0]) || !PyCallable_Check(args[2]) || !PyCallable_Check(args[3]) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "fast_configure: bad arguments");
        return NULL;
    }
    DLPackExchangeAPI *api = PyCapsule_GetPointer(args[1], "dlpack_exchange_api");
    if (!api)
        return NULL;
    if (api->header.version.major != 1 || !api->dltensor_from_py_object_no_sync) {
        PyErr_SetString(PyExc_ValueError, "fast_configure: the exchange API has no dltensor_from_py_object_no_sync");
        return NULL;
    }
    if (!s_requires_grad) {
        s_requires_grad = PyUnicode_InternFromString("requires_grad");
        s_is_neg = PyUnicode_InternFromString("is_neg");
        s_dtype_kwnames = Py_BuildValue("(s)", "dtype");
        if (!s_requires_grad || !s_is_neg || !s_dtype_kwnames)
            return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(g_tensor_type, (PyTypeObject *)args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(g_capsule, args[1]);
    Py_INCREF(args[2]);
    Py_XSETREF(g_empty_like, args[2]);
    Py_INCREF(args[3]);
    Py_XSETREF(g_empty, args[3]);
    Py_INCREF(args[4]);
    Py_XSETREF(g_cache, args[4]);
    g_api = api;
    Py_RETURN_NONE;
}

/* fast(op, stream, x, y, p) -> torch.Tensor (done), None (not applicable) or bytes (a miss);
 * op | FAST_INPLACE: the output is x itself (returned on a hit) */
PyObject *py_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "fast(op, stream, x, y, p)");
        return NULL;
    }
    if (!g_api)
        Py_RETURN_NONE;
    long op = PyLong_AsLong(args[0]);
    if (op == -1 && PyErr_Occurred())
        return NULL;
    void *stream = PyLong_AsVoidPtr(args[1]);
    if (!stream && PyErr_Occurred())
        return NULL;
    key_t_ k;
    k.n = 0;
    int32_t op32 = (int32_t)op;
    put(&k, &op32, sizeof op32);
    DLTensor tx, ty;
    int r = read_tensor(args[2], &tx);
    if (r <= 0 || key_tensor(&k, &tx))
        Py_RETURN_NONE;
    int ny = 0;
    r = read_tensor(args[3], &ty);
    if (r == 1) {
        if (key_tensor(&k, &ty))
            Py_RETURN_NONE;
        ny = 1;
    } else if (!key_scalar(&k, args[3])) {
        Py_RETURN_NONE;
    }
    if (!key_scalar(&k, args[4]))
        Py_RETURN_NONE;
    int inplace = (op & FAST_INPLACE) != 0;
    if (inplace && ny && !inplace_ok(&tx, &ty))
        Py_RETURN_NONE;
    PyObject *key = PyBytes_FromStringAndSize((const char *)k.b, (Py_ssize_t)k.n);
    if (!key)
        return NULL;
    PyObject *entry = PyDict_GetItemWithError(g_cache, key);   /* borrowed */
    if (!entry) {
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
        return key;   /* a miss */
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4 || Py_TYPE(PyTuple_GET_ITEM(entry, 0)) != &Plan_Type) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_RuntimeError, "kernels fast path: malformed cache entry");
        return NULL;
    }
    Py_INCREF(entry);   /* the dict may change while we wait for the stream */
    PlanObject *plan = (PlanObject *)PyTuple_GET_ITEM(entry, 0);
    int n = 2 + ny;
    if (!plan_fast_ok(plan, n)) {   /* closed meanwhile (cache cleared): compute it again */
        Py_DECREF(entry);
        PyDict_DelItem(g_cache, key);
        PyErr_Clear();
        return key;
    }
    Py_DECREF(key);
    PyObject *out, *mode = PyTuple_GET_ITEM(entry, 1);
    if (inplace) {                   /* x op= y: x is the output */
        out = args[2];
        Py_INCREF(out);
    } else if (mode == Py_False) {   /* torch.empty_like(x) */
        out = PyObject_CallOneArg(g_empty_like, args[2]);
    } else if (mode == Py_True) {    /* torch.empty(shape, dtype=dtype) */
        PyObject *cargs[2] = {PyTuple_GET_ITEM(entry, 3), PyTuple_GET_ITEM(entry, 2)};
        out = PyObject_Vectorcall(g_empty, cargs, 1, s_dtype_kwnames);
    } else {                         /* an allocator (canna's pool, handed to torch) */
        out = PyObject_CallNoArgs(mode);
    }
    if (!out) {
        Py_DECREF(entry);
        return NULL;
    }
    DLTensor to;
    if (g_api->dltensor_from_py_object_no_sync(out, &to) != 0) {
        Py_DECREF(entry);
        Py_DECREF(out);
        return NULL;
    }
    void *addrs[3];
    addrs[0] = data_of(&tx);
    if (ny)
        addrs[1] = data_of(&ty);
    addrs[n - 1] = data_of(&to);
    /* x and y stay alive: the caller holds them until we return, and we wait for the stream */
    int rc = plan_launch_addrs(plan, stream, NULL, addrs, n, 1);
    Py_DECREF(entry);
    if (rc) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}
