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
#include "fast_api.h"

#define KEY_MAX 1024
#define FAST_MAX_NDIM 8
#define FAST_INPLACE CANNA_FAST_INPLACE   /* op flag: the output is x itself (x op= y); the cache entry's mode is None */

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

/* ---------------------------------------------------------------------------------------------
 * the stream of a fast-path call: a handle (int), or the call's API name (str) for the calling
 * thread's current stream — kernels._core.fast_stream(api): the handle, with its device's context
 * made current, or the runtime's error. The answer is remembered per thread together with acl_rt's
 * current-stream epoch (acl_rt.lowlevel.current_epoch_capsule), which moves whenever anything the
 * answer depends on changes (a `with stream:` block, the current device or context, a stream
 * destroyed, init / finalize / fork): while it stands still, no Python runs. */
static PyObject *g_stream_fn;             /* kernels._core.fast_stream */
static const uint64_t *g_epoch;           /* acl_rt's current-stream epoch (starts at 1) */
static PyObject *g_epoch_capsule;
static _Thread_local uint64_t t_epoch;    /* 0: nothing remembered */
static _Thread_local void *t_stream;

int fast_stream_of(PyObject *arg, void **stream)
{
    if (!PyUnicode_Check(arg)) {
        *stream = PyLong_AsVoidPtr(arg);
        return *stream || !PyErr_Occurred() ? 0 : -1;
    }
    if (!g_stream_fn) {
        PyErr_SetString(PyExc_RuntimeError, "kernels._native: stream_configure() was not called");
        return -1;
    }
    uint64_t e = __atomic_load_n(g_epoch, __ATOMIC_ACQUIRE);   /* (read before resolving: a change
                                                                 * meanwhile resolves again next time) */
    if (e == t_epoch) {
        *stream = t_stream;
        return 0;
    }
    PyObject *h = PyObject_CallOneArg(g_stream_fn, arg);
    if (!h)
        return -1;
    void *s = PyLong_AsVoidPtr(h);
    Py_DECREF(h);
    if (!s && PyErr_Occurred())
        return -1;
    t_stream = s;
    t_epoch = e;
    *stream = s;
    return 0;
}

/* stream_configure(fast_stream, epoch_capsule) */
PyObject *py_stream_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "stream_configure(fast_stream, epoch_capsule)");
        return NULL;
    }
    const uint64_t *e = PyCapsule_GetPointer(args[1], "acl_rt._native.current_epoch");
    if (!e)
        return NULL;
    Py_INCREF(args[0]);
    Py_XSETREF(g_stream_fn, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(g_epoch_capsule, args[1]);
    g_epoch = e;
    t_epoch = 0;
    Py_RETURN_NONE;
}

/* 1: a usable torch tensor, read into *t; 0: not applicable (no exception); -1: error */
/* the cache's entry for the key k (*entry, borrowed; NULL on a miss): returns the key as bytes
 * (a new reference), or NULL with an exception set */
static PyObject *cache_find(PyObject *cache, const key_t_ *k, PyObject **entry)
{
    *entry = NULL;
    PyObject *key = PyBytes_FromStringAndSize((const char *)k->b, (Py_ssize_t)k->n);
    if (!key)
        return NULL;
    *entry = PyDict_GetItemWithError(cache, key);
    if (!*entry && PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    return key;
}

/* 1 when the fast path can take the DLTensor (a CPU array of its rank and layout) */
static int dl_usable(const DLTensor *t)
{
    return t->device.device_type == kDLCPU && t->ndim <= FAST_MAX_NDIM && t->dtype.lanes == 1 &&
           (!t->ndim || t->strides);
}

static int read_tensor(PyObject *o, DLTensor *t)
{
    if (Py_TYPE(o) != g_tensor_type)
        return 0;
    if (g_api->dltensor_from_py_object_no_sync(o, t) != 0) {
        PyErr_Clear();
        return 0;
    }
    if (!dl_usable(t))
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

/* the fast path's key of a call (kept in k): op, x, then y (a tensor, or y_scalar when y is NULL),
 * then the attribute p; 0 when the call is not one the fast path takes (an operand it cannot key,
 * an in-place call whose y overlaps x partially) */
static int fast_key(key_t_ *k, long op, const DLTensor *x, const DLTensor *y, PyObject *y_scalar, PyObject *p)
{
    k->n = 0;
    int32_t op32 = (int32_t)op;
    put(k, &op32, sizeof op32);
    if (key_tensor(k, x) || (y ? key_tensor(k, y) != 0 : !key_scalar(k, y_scalar)) || !key_scalar(k, p))
        return 0;
    return !((op & FAST_INPLACE) && y && !inplace_ok(x, y));
}

/* run a fast-path plan on x (and y), writing `to`, and wait for the stream; 0 or -1 with an exception */
static int launch_fast(PlanObject *plan, void *stream, const DLTensor *x, const DLTensor *y, const DLTensor *to)
{
    void *addrs[3];
    int n = 0;
    addrs[n++] = data_of(x);
    if (y)
        addrs[n++] = data_of(y);
    addrs[n++] = data_of(to);
    return plan_launch_addrs(plan, stream, NULL, addrs, n, 1);
}

static void alloc_error(void *ctx, const char *kind, const char *message)
{
    (void)kind;
    (void)message;
    *(int *)ctx = 1;
}

/* a new contiguous torch tensor of proto's shape, dtype and device: torch's allocator through the
 * exchange API (no Python-level call); NULL when it cannot */
static PyObject *alloc_proto(DLTensor *proto)
{
    if (g_api->managed_tensor_allocator && g_api->managed_tensor_to_py_object_no_sync) {
        DLManagedTensorVersioned *m = NULL;
        int failed = 0;
        if (g_api->managed_tensor_allocator(proto, &m, &failed, alloc_error) == 0 && !failed && m) {
            void *obj = NULL;
            if (g_api->managed_tensor_to_py_object_no_sync(m, &obj) == 0 && obj)
                return (PyObject *)obj;
            PyErr_Clear();
            if (m->deleter)
                m->deleter(m);
        }
        PyErr_Clear();
    }
    return NULL;   /* (no exception: the caller falls back to a Python-level call) */
}

/* the same, else torch.empty_like(x) */
static PyObject *alloc_like(PyObject *x, DLTensor *proto)
{
    PyObject *o = alloc_proto(proto);
    return o ? o : PyObject_CallOneArg(g_empty_like, x);
}

/* launch a cache hit: entry (plan, mode, dtype, shape) for the operands read into tx (and ty when
 * ny); the output tensor, Py_None (new reference) when the plan was closed meanwhile (the entry is
 * dropped from cache under key), NULL on error */
static PyObject *launch_hit(PyObject *entry, PyObject *key, PyObject *cache, PyObject *x, DLTensor *tx,
                            const DLTensor *ty, int ny, int inplace, void *stream)
{
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4 || Py_TYPE(PyTuple_GET_ITEM(entry, 0)) != &Plan_Type) {
        PyErr_SetString(PyExc_RuntimeError, "kernels fast path: malformed cache entry");
        return NULL;
    }
    Py_INCREF(entry);   /* the dict may change while we wait for the stream */
    PlanObject *plan = (PlanObject *)PyTuple_GET_ITEM(entry, 0);
    int n = 2 + ny;
    if (!plan_fast_ok(plan, n)) {   /* closed meanwhile (cache cleared): compute it again */
        Py_DECREF(entry);
        if (PyDict_DelItem(cache, key))
            PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *out, *mode = PyTuple_GET_ITEM(entry, 1);
    if (inplace) {                   /* x op= y: x is the output */
        out = x;
        Py_INCREF(out);
    } else if (mode == Py_False) {   /* torch.empty_like(x) (x is contiguous) */
        out = alloc_like(x, tx);
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
    /* x and y stay alive: the caller holds them until we return, and we wait for the stream */
    int rc = launch_fast(plan, stream, tx, ny ? ty : NULL, &to);
    Py_DECREF(entry);
    if (rc) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
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
    void *stream;
    if (fast_stream_of(args[1], &stream))
        return NULL;
    key_t_ k;
    DLTensor tx, ty;
    if (read_tensor(args[2], &tx) <= 0)
        Py_RETURN_NONE;
    int ny = read_tensor(args[3], &ty) == 1;
    if (!fast_key(&k, op, &tx, ny ? &ty : NULL, args[3], args[4]))
        Py_RETURN_NONE;
    int inplace = (op & FAST_INPLACE) != 0;
    PyObject *entry, *key = cache_find(g_cache, &k, &entry);
    if (!key || !entry)
        return key;   /* an error (NULL), or a miss: the key */
    PyObject *out = launch_hit(entry, key, g_cache, args[2], &tx, &ty, ny, inplace, stream);
    if (!out) {
        Py_DECREF(key);
        return NULL;
    }
    if (out == Py_None) {   /* the plan was closed meanwhile: a miss */
        Py_DECREF(out);
        return key;
    }
    Py_DECREF(key);
    return out;
}

/* fast() for a C caller (fast_api.h): the operands read by the caller, the output allocated by
 * its callback; the same key, cache and plans */
static int fast_c_call(long op, PyObject *sarg, const DLTensor *x, const DLTensor *y, PyObject *y_scalar,
                       PyObject *p, PyObject *dtype, canna_fast_alloc_fn alloc, void *ctx)
{
    key_t_ k;
    if (!g_api || !dl_usable(x) || (y ? !dl_usable(y) : !y_scalar) || !p || !fast_key(&k, op, x, y, y_scalar, p))
        return 0;
    int ny = y != NULL, inplace = (op & FAST_INPLACE) != 0;
    PyObject *entry, *key = cache_find(g_cache, &k, &entry);
    if (!key)
        return -1;
    if (!entry || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4 ||
        Py_TYPE(PyTuple_GET_ITEM(entry, 0)) != &Plan_Type) {   /* (a malformed entry: fast() reports it) */
        Py_DECREF(key);
        return 0;
    }
    PlanObject *plan = (PlanObject *)PyTuple_GET_ITEM(entry, 0);
    PyObject *mode = PyTuple_GET_ITEM(entry, 1), *shape = PyTuple_GET_ITEM(entry, 3);
    int n = 2 + ny, rc = 0;
    Py_INCREF(entry);   /* the dict may change while we wait for the stream */
    Py_DECREF(key);
    DLTensor to;
    void *stream;
    if (!plan_fast_ok(plan, n))   /* closed meanwhile: the Python route computes it again */
        goto done;
    if (!inplace && (!(mode == Py_False || mode == Py_True) || PyTuple_GET_ITEM(entry, 2) != dtype ||
                     !PyTuple_Check(shape)))
        goto done;   /* an allocator of canna's (a large output), or not the caller's dtype */
    if (fast_stream_of(sarg, &stream)) {
        rc = -1;
        goto done;
    }
    if (inplace) {
        to = *x;
    } else {
        if (alloc(ctx, &to)) {
            rc = -1;
            goto done;
        }
        if (to.ndim != (int)PyTuple_GET_SIZE(shape))
            goto done;
        for (int d = 0; d < to.ndim; d++) {
            long long e = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
            if (e != to.shape[d]) {
                PyErr_Clear();
                goto done;
            }
        }
    }
    rc = launch_fast(plan, stream, x, y, &to) ? -1 : 1;
done:
    Py_DECREF(entry);
    return rc;
}


/* ---------------------------------------------------------------------------------------------
 * offload()'s per-call fast path (canna_dl/torch/_offload.py): one torch function call of a
 * registry entry's TorchFn, bound, checked, looked up and launched here.
 *
 * offload_fast(entry, args, kwargs, ops, ocache) -> torch.Tensor (done, counted in
 * ops[name].canna), None (not applicable: the Python handler decides) or bytes (a miss: the key
 * the Python side registers once its handler ran the call on canna, see _offload._fast_register).
 *
 * entry (built from the registry by canna_dl.torch._generated.offload_fast_entry):
 *   (op id, names, defaults, (ix, iy, ip), y default, p default, fixed, reflected, codes, report name,
 *    tag, api (the stream: fast_stream_of), required sentinel)
 * ix/iy/ip: the parameter index each of the kernel's (x, y, p) comes from (-1: the default);
 * fixed: ((index, value), ...) a value the parameter must be (by identity, else the handler decides);
 * codes: an str attribute's choices -> code (None: a number attribute or none).
 * The key is the kernel's own fast-path key (fast() above) followed by the entry's tag: ocache maps
 * it to the kernel cache's entry (plan, mode, dtype, shape), only after the Python handler ran that
 * exact signature on canna; the Python number operands must be exact ints / floats (no bool). */
#define OFF_MAXARGS 16

static PyObject *s_canna, *s_one, *s_gen, *s_generation;
static PyObject *g_off_guards[2], *g_off_lib, *g_off_state;   /* offload_configure's */

/* offload_configure(autocast_on, functorch_active, lib, state): the calls that must answer False
 * and the runtime generation (lib.gen == state.generation) offload_fast checks before anything */
PyObject *py_offload_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "offload_configure(autocast_on, functorch_active, lib, state)");
        return NULL;
    }
    if (!s_gen) {
        s_gen = PyUnicode_InternFromString("gen");
        s_generation = PyUnicode_InternFromString("generation");
        if (!s_gen || !s_generation)
            return NULL;
    }
    for (int i = 0; i < 4; i++)
        Py_INCREF(args[i]);
    Py_XSETREF(g_off_guards[0], args[0]);
    Py_XSETREF(g_off_guards[1], args[1]);
    Py_XSETREF(g_off_lib, args[2]);
    Py_XSETREF(g_off_state, args[3]);
    Py_RETURN_NONE;
}

/* 1: the guards pass (no autocast, no functorch transform, the plans' runtime generation); 0: not */
static int off_guards(void)
{
    if (!g_off_lib)
        return 0;
    for (int i = 0; i < 2; i++) {
        PyObject *r = PyObject_CallNoArgs(g_off_guards[i]);
        if (!r) {
            PyErr_Clear();
            return 0;
        }
        Py_DECREF(r);
        if (r != Py_False)
            return 0;
    }
    PyObject *a = PyObject_GetAttr(g_off_lib, s_gen);
    PyObject *b = a ? PyObject_GetAttr(g_off_state, s_generation) : NULL;
    int eq = b ? PyObject_RichCompareBool(a, b, Py_EQ) : -1;
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (eq < 0)
        PyErr_Clear();
    return eq == 1;
}
unsigned long long g_offload_hits;

static int off_number(PyObject *o)
{
    return PyFloat_CheckExact(o) || PyLong_CheckExact(o);
}

PyObject *py_offload_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 13 || !PyTuple_Check(args[1]) ||
        !PyDict_Check(args[3]) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "offload_fast(entry, args, kwargs, ops, ocache)");
        return NULL;
    }
    if (!g_api || !off_guards())
        Py_RETURN_NONE;
    PyObject *e = args[0], *targs = args[1], *kw = args[2], *ops = args[3], *ocache = args[4];
    PyObject *names = PyTuple_GET_ITEM(e, 1), *defaults = PyTuple_GET_ITEM(e, 2), *src = PyTuple_GET_ITEM(e, 3);
    PyObject *req = PyTuple_GET_ITEM(e, 12);
    Py_ssize_t nn = PyTuple_GET_SIZE(names), na = PyTuple_GET_SIZE(targs);
    if (nn > OFF_MAXARGS || na > nn)
        Py_RETURN_NONE;
    PyObject *vals[OFF_MAXARGS];
    for (Py_ssize_t i = 0; i < nn; i++)
        vals[i] = i < na ? PyTuple_GET_ITEM(targs, i) : NULL;
    if (kw != Py_None) {
        if (!PyDict_Check(kw))
            Py_RETURN_NONE;
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            Py_ssize_t i = 0;
            for (; i < nn; i++) {
                PyObject *nm = PyTuple_GET_ITEM(names, i);
                if (nm == k)
                    break;
                if (PyUnicode_Check(k)) {
                    int eq = PyUnicode_Compare(nm, k);
                    if (eq == -1 && PyErr_Occurred()) {
                        PyErr_Clear();
                        Py_RETURN_NONE;
                    }
                    if (eq == 0)
                        break;
                }
            }
            if (i == nn || vals[i])   /* unknown or given twice: the handler says why */
                Py_RETURN_NONE;
            vals[i] = v;
        }
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        if (!vals[i]) {
            vals[i] = PyTuple_GET_ITEM(defaults, i);
            if (vals[i] == req)
                Py_RETURN_NONE;
        }
    }
    PyObject *fixed = PyTuple_GET_ITEM(e, 6);
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(fixed); j++) {
        PyObject *f = PyTuple_GET_ITEM(fixed, j);
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(f, 0));
        if (i < 0 || i >= nn || vals[i] != PyTuple_GET_ITEM(f, 1)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t ix = PyLong_AsSsize_t(PyTuple_GET_ITEM(src, 0)), iy = PyLong_AsSsize_t(PyTuple_GET_ITEM(src, 1)),
               ip = PyLong_AsSsize_t(PyTuple_GET_ITEM(src, 2));
    if (ix < 0 || ix >= nn || iy >= nn || ip >= nn) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *x = vals[ix];
    PyObject *y = iy >= 0 ? vals[iy] : PyTuple_GET_ITEM(e, 4);
    PyObject *p = ip >= 0 ? vals[ip] : PyTuple_GET_ITEM(e, 5);
    if (PyTuple_GET_ITEM(e, 7) == Py_True) {   /* torch's (self, other) is the op's (other, self) */
        PyObject *t = x;
        x = y;
        y = t;
    }
    PyObject *codes = PyTuple_GET_ITEM(e, 8);
    if (codes != Py_None) {   /* an str attribute: its code */
        if (!PyUnicode_CheckExact(p))
            Py_RETURN_NONE;
        p = PyDict_GetItemWithError(codes, p);   /* borrowed */
        if (!p) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    if (p != Py_None && !off_number(p))
        Py_RETURN_NONE;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(e, 0));
    if (op == -1 && PyErr_Occurred())
        return NULL;
    key_t_ k;
    DLTensor tx, ty;
    if (read_tensor(x, &tx) <= 0)
        Py_RETURN_NONE;
    int ny = read_tensor(y, &ty) == 1;
    if ((!ny && y != Py_None && !off_number(y)) || !fast_key(&k, op, &tx, ny ? &ty : NULL, y, p))
        Py_RETURN_NONE;
    int32_t tag = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(e, 10));
    if (put(&k, &tag, sizeof tag))
        Py_RETURN_NONE;
    PyObject *st = PyDict_GetItemWithError(ops, PyTuple_GET_ITEM(e, 9));   /* borrowed: the OpStats */
    if (!st) {   /* the op's first call in this report: the handler makes its row */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *entry, *key = cache_find(ocache, &k, &entry);
    if (!key || !entry)
        return key;   /* an error (NULL), or a miss: the key */
    void *stream;
    if (fast_stream_of(PyTuple_GET_ITEM(e, 11), &stream)) {
        Py_DECREF(key);
        return NULL;
    }
    Py_INCREF(st);
    PyObject *out = launch_hit(entry, key, ocache, x, &tx, &ty, ny, 0, stream);
    if (!out || out == Py_None) {
        Py_DECREF(st);
        if (!out) {
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(out);
        return key;   /* closed meanwhile: a miss */
    }
    Py_DECREF(key);
    if ((!s_canna && !(s_canna = PyUnicode_InternFromString("canna"))) || (!s_one && !(s_one = PyLong_FromLong(1)))) {
        Py_DECREF(st);
        Py_DECREF(out);
        return NULL;
    }
    PyObject *c = PyObject_GetAttr(st, s_canna), *c1 = NULL;
    if (c) {
        c1 = PyNumber_Add(c, s_one);
        Py_DECREF(c);
    }
    if (!c1 || PyObject_SetAttr(st, s_canna, c1)) {
        Py_XDECREF(c1);
        Py_DECREF(st);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(c1);
    Py_DECREF(st);
    g_offload_hits++;
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * The memo fast path: a registry op's whole call (any number of torch tensor, number, string,
 * int-list and dtype arguments; any number of launches and outputs), replayed from C.
 *
 * memo(op, stream, *args) -> the call's result (done), None (not applicable: the Python path
 * decides and raises the right errors) or bytes (a miss: the key the Python side registers once
 * it has run the call and checked that it was nothing but plan launches on the arguments' and
 * the fresh outputs' memory, kernels._core.memo_register). Ellipsis stands for a result None
 * (an op updating its arguments in place).
 *
 * The cache (memo_configure's dict) maps a key to None (not replayable: the Python path serves) or
 *   (launches, outputs, written, result, single)
 *   launches: ((plan, map), ...) run in order on the stream, the last one waited for; map is
 *     bytes, one per plan address: < 128 the tensor argument of that index, >= 128 output b - 128;
 *   outputs: ((shape, torch dtype, alloc), ...) fresh contiguous tensors (alloc None: torch's
 *     allocator; else a callable returning the tensor: canna's pool for large ones);
 *   written: bytes, the argument indices the launches write in place (each must not overlap any
 *     other tensor argument: checked per call, else not applicable);
 *   result: bytes, per result slot < 128 output b, >= 128 argument b - 128, 255 None;
 *   single: True (one tensor), False (a tuple), None (the result is None);
 *   ws: the workspace bytes the largest launch needs: one buffer per replay (workspace(bytes) ->
 *     a buffer of canna's pool with .ptr, from memo_configure), closed once the launches are done
 *     (as the Python path's launch does: the pool reuses it in stream order).
 */
#define MEMO_MAXARGS 24
#define MEMO_MAXOUT 16

static PyObject *g_memo_cache, *g_memo_ws;
static PyTypeObject *g_dtype_type;   /* torch.dtype: its instances are immortal singletons */

/* memo_configure(cache, dtype_type, workspace) */
PyObject *py_memo_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyType_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "memo_configure(cache, dtype_type, workspace)");
        return NULL;
    }
    Py_INCREF(args[2]);
    Py_XSETREF(g_memo_ws, args[2]);
    Py_INCREF(args[0]);
    Py_XSETREF(g_memo_cache, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(g_dtype_type, (PyTypeObject *)args[1]);
    Py_RETURN_NONE;
}

/* 1: a non-tensor argument put in the key; 0: not one the memo takes */
static int key_other(key_t_ *k, PyObject *o)
{
    if (key_scalar(k, o))
        return 1;
    if (PyUnicode_CheckExact(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (!s) {
            PyErr_Clear();
            return 0;
        }
        unsigned char tag = 'S';
        uint32_t n32 = (uint32_t)n;
        return (put(k, &tag, 1) || put(k, &n32, sizeof n32) || put(k, s, (size_t)n)) ? 0 : 1;
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (n > FAST_MAX_NDIM * 2)
            return 0;
        unsigned char head[2] = {PyTuple_CheckExact(o) ? 'U' : 'L', (unsigned char)n};
        if (put(k, head, 2))
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PySequence_Fast_GET_ITEM(o, i);
            if (PyBool_Check(v)) {   /* an output mask */
                unsigned char b[2] = {'B', (unsigned char)(v == Py_True)};
                if (put(k, b, 2))
                    return 0;
                continue;
            }
            if (!PyLong_CheckExact(v))   /* ints and bools only (a float in a shape is the Python path's error) */
                return 0;
            unsigned char tag = 'I';
            if (put(k, &tag, 1))
                return 0;
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (x == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return 0;
            }
            if (put(k, &x, sizeof x))
                return 0;
        }
        return 1;
    }
    if (g_dtype_type && Py_TYPE(o) == g_dtype_type) {
        unsigned char tag = 'D';
        uintptr_t p = (uintptr_t)o;
        return (put(k, &tag, 1) || put(k, &p, sizeof p)) ? 0 : 1;
    }
    return 0;
}

/* a fresh contiguous tensor for an output spec (shape, torch dtype, alloc) like the proto's
 * device; NULL with an exception set */
/* an output spec's shape (a tuple of ints) into dims[FAST_MAX_NDIM]: its rank, or -1 with an
 * exception set */
static int spec_dims(PyObject *shape, int64_t *dims)
{
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd > FAST_MAX_NDIM) {
        PyErr_SetString(PyExc_RuntimeError, "kernels memo: malformed output spec");
        return -1;
    }
    for (Py_ssize_t d = 0; d < nd; d++) {
        dims[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        if (dims[d] == -1 && PyErr_Occurred())
            return -1;
    }
    return (int)nd;
}

static PyObject *memo_alloc(PyObject *spec, const DLTensor *like)
{
    PyObject *shape = PyTuple_GET_ITEM(spec, 0), *dtype = PyTuple_GET_ITEM(spec, 1), *alloc = PyTuple_GET_ITEM(spec, 2);
    if (alloc != Py_None)
        return PyObject_CallNoArgs(alloc);
    int64_t dims[FAST_MAX_NDIM];
    int nd = spec_dims(shape, dims);
    if (nd < 0)
        return NULL;
    if (PyTuple_GET_SIZE(spec) > 3) {
        /* the proto's dtype: spec[3] = (code, bits) */
        PyObject *dt = PyTuple_GET_ITEM(spec, 3);
        DLTensor proto;
        memset(&proto, 0, sizeof proto);
        proto.device = like->device;
        proto.ndim = (int32_t)nd;
        proto.shape = dims;
        proto.dtype.code = (uint8_t)PyLong_AsLong(PyTuple_GET_ITEM(dt, 0));
        proto.dtype.bits = (uint8_t)PyLong_AsLong(PyTuple_GET_ITEM(dt, 1));
        proto.dtype.lanes = 1;
        PyObject *o = alloc_proto(&proto);
        if (o)
            return o;
    }
    PyObject *cargs[2] = {shape, dtype};
    return PyObject_Vectorcall(g_empty, cargs, 1, s_dtype_kwnames);
}

/* 1 when the two tensors' byte spans are disjoint (or one is empty) */
static int disjoint(const DLTensor *a, const DLTensor *b)
{
    uintptr_t a0, a1, b0, b1;
    int ra = byte_span(a, &a0, &a1), rb = byte_span(b, &b0, &b1);
    if (ra < 0 || rb < 0)
        return 0;
    return !ra || !rb || a1 <= b0 || b1 <= a0;
}

/* One memo call's arguments: na of them, t[i] read where is_t[i] (a tensor), a[i] the Python
 * object otherwise (a number, str, int list, dtype, None: key_other). */
typedef struct memo_call {
    long op;
    PyObject *sarg;   /* the stream argument (an API name: the thread's current stream) */
    int na;
    const DLTensor *t;
    const int *is_t;
    PyObject *const *a;
} memo_call_t;

/* allocate output j of a replay from its spec (shape, torch dtype, alloc[, proto dtype]) like the
 * proto's device: its data address in *ptr. 0; 1 when this caller cannot (the call is not
 * applicable); -1 with an exception set */
typedef int (*memo_out_fn)(void *ctx, int j, PyObject *spec, const DLTensor *like, void **ptr);

/* The replay of a memo call: key, cache entry, checks, workspace, outputs, launches.
 * Returns 1 (done: *entry_out a new reference to the cache entry, whose result / single fields say
 * what the call returns), 0 (not applicable), 2 (a miss, or a stale entry removed: *key_out the key,
 * a new reference, for the caller's Python side to register) or -1 (an exception set). */
static int memo_replay(const memo_call_t *c, memo_out_fn out_fn, void *out_ctx, PyObject **entry_out,
                       PyObject **key_out)
{
    *entry_out = *key_out = NULL;
    if (!g_api || !g_memo_cache)
        return 0;
    key_t_ k;
    k.n = 0;
    int32_t op32 = (int32_t)c->op;
    put(&k, &op32, sizeof op32);
    int nt = 0;
    for (int i = 0; i < c->na; i++) {
        if (c->is_t[i]) {
            if (key_tensor(&k, &c->t[i]))
                return 0;
            nt++;
        } else if (!key_other(&k, c->a[i])) {
            return 0;
        }
    }
    if (!nt)
        return 0;
    PyObject *entry, *key = cache_find(g_memo_cache, &k, &entry);
    if (!key)
        return -1;
    if (!entry) {   /* a miss: the key */
        *key_out = key;
        return 2;
    }
    if (entry == Py_None) {   /* a signature whose call is not replayable */
        Py_DECREF(key);
        return 0;
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 6) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_RuntimeError, "kernels memo: malformed cache entry");
        return -1;
    }
    Py_INCREF(entry);   /* the dict may change while we run */
    PyObject *launches = PyTuple_GET_ITEM(entry, 0), *ospecs = PyTuple_GET_ITEM(entry, 1),
             *written = PyTuple_GET_ITEM(entry, 2), *result = PyTuple_GET_ITEM(entry, 3);
    Py_ssize_t no = PyTuple_GET_SIZE(ospecs), nl = PyTuple_GET_SIZE(launches);
    int rc = -1, na = c->na;
    void *ws = NULL;
    PyObject *ws_buf = NULL;
    unsigned long long ws_size = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(entry, 5));
    if (ws_size == (unsigned long long)-1 && PyErr_Occurred())
        goto done;
    if (no > MEMO_MAXOUT || !PyBytes_Check(written) || !PyBytes_Check(result)) {
        PyErr_SetString(PyExc_RuntimeError, "kernels memo: malformed cache entry");
        goto done;
    }
    /* an argument written in place must not overlap another tensor argument (the Python path
     * decides: an exact alias may be allowed, a partial overlap raises) */
    {
        const unsigned char *w = (const unsigned char *)PyBytes_AS_STRING(written);
        for (Py_ssize_t j = 0; j < PyBytes_GET_SIZE(written); j++) {
            int i = w[j];
            if (i >= na || !c->is_t[i])
                goto stale;
            for (int q = 0; q < na; q++)
                if (q != i && c->is_t[q] && !disjoint(&c->t[i], &c->t[q]))
                    goto not_applicable;
        }
    }
    /* every plan still open (a cleared cache closes them: compute it again) */
    for (Py_ssize_t l = 0; l < nl; l++) {
        PyObject *pm = PyTuple_GET_ITEM(launches, l);
        PyObject *plan = PyTuple_GET_ITEM(pm, 0), *map = PyTuple_GET_ITEM(pm, 1);
        if (Py_TYPE(plan) != &Plan_Type || !PyBytes_Check(map) ||
            !plan_memo_ok((PlanObject *)plan, (int)PyBytes_GET_SIZE(map), ws_size))
            goto stale;
        const unsigned char *m = (const unsigned char *)PyBytes_AS_STRING(map);
        for (Py_ssize_t q = 0; q < PyBytes_GET_SIZE(map); q++)
            if (m[q] >= 128 ? m[q] - 128 >= no : (m[q] >= na || !c->is_t[m[q]]))
                goto stale;
    }
    void *stream;
    if (fast_stream_of(c->sarg, &stream))
        goto done;
    const DLTensor *like = NULL;
    for (int i = 0; i < na && !like; i++)
        if (c->is_t[i])
            like = &c->t[i];
    void *optr[MEMO_MAXOUT];
    for (Py_ssize_t j = 0; j < no; j++) {
        int r = out_fn(out_ctx, (int)j, PyTuple_GET_ITEM(ospecs, j), like, &optr[j]);
        if (r < 0)
            goto done;
        if (r > 0)
            goto not_applicable;
    }
    if (ws_size) {
        if (!g_memo_ws)
            goto not_applicable;
        ws_buf = PyObject_CallOneArg(g_memo_ws, PyTuple_GET_ITEM(entry, 5));
        PyObject *wo = ws_buf ? PyObject_GetAttrString(ws_buf, "ptr") : NULL;
        if (!wo)
            goto done;
        ws = PyLong_AsVoidPtr(wo);
        Py_DECREF(wo);
        if (!ws) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "kernels memo: no workspace");
            goto done;
        }
    }
    int waited = plan_launch_waited(1);   /* (every launch of the replay is waited for: the last one is) */
    for (Py_ssize_t l = 0; l < nl; l++) {
        PyObject *pm = PyTuple_GET_ITEM(launches, l);
        PlanObject *plan = (PlanObject *)PyTuple_GET_ITEM(pm, 0);
        PyObject *map = PyTuple_GET_ITEM(pm, 1);
        const unsigned char *m = (const unsigned char *)PyBytes_AS_STRING(map);
        int n = (int)PyBytes_GET_SIZE(map);
        void *addrs[PLAN_MAX_TENSORS];
        for (int q = 0; q < n; q++)
            addrs[q] = m[q] >= 128 ? optr[m[q] - 128] : data_of(&c->t[m[q]]);
        if (plan_launch_addrs(plan, stream, ws, addrs, n, l == nl - 1)) {
            plan_launch_waited(waited);
            if (l < nl - 1) {   /* the launches before it are queued: wait for them, keep the error */
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                if (plan_sync(stream))
                    PyErr_Clear();
                PyErr_Restore(et, ev, tb);
            }
            goto done;
        }
    }
    plan_launch_waited(waited);
    rc = 1;
    goto done;
stale:
    if (PyDict_DelItem(g_memo_cache, key))
        PyErr_Clear();
    rc = 2;   /* compute it again */
    goto done;
not_applicable:
    rc = 0;
done:
    if (ws_buf) {   /* back to the pool (stream-ordered); an error of the call comes first */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *cl = PyObject_CallMethod(ws_buf, "close", NULL);
        if (!cl && !et && rc == 1) {
            rc = -1;
        } else if (!cl) {
            PyErr_Clear();
        }
        Py_XDECREF(cl);
        if (et)
            PyErr_Restore(et, ev, tb);
        Py_DECREF(ws_buf);
    }
    if (rc == 1)
        *entry_out = entry;
    else
        Py_DECREF(entry);
    if (rc == 2)
        *key_out = key;
    else
        Py_DECREF(key);
    return rc;
}

/* py_memo's outputs: torch tensors (memo_alloc), kept in outs[] */
typedef struct py_outs {
    PyObject *outs[MEMO_MAXOUT];
    int n;
} py_outs_t;

static int py_out(void *ctx, int j, PyObject *spec, const DLTensor *like, void **ptr)
{
    py_outs_t *po = ctx;
    PyObject *o = memo_alloc(spec, like);
    if (!o)
        return -1;
    po->outs[j] = o;
    po->n = j + 1;
    DLTensor to;
    if (g_api->dltensor_from_py_object_no_sync(o, &to) != 0)
        return -1;
    *ptr = data_of(&to);
    return 0;
}

PyObject *py_memo(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 2 || nargs - 2 > MEMO_MAXARGS) {
        if (nargs < 2) {
            PyErr_SetString(PyExc_TypeError, "memo(op, stream, *args)");
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (!g_api || !g_memo_cache)
        Py_RETURN_NONE;
    long op = PyLong_AsLong(args[0]);
    if (op == -1 && PyErr_Occurred())
        return NULL;
    int na = (int)(nargs - 2);
    PyObject *const *a = args + 2;
    DLTensor t[MEMO_MAXARGS];
    int is_t[MEMO_MAXARGS];
    for (int i = 0; i < na; i++) {
        is_t[i] = 0;
        if (Py_TYPE(a[i]) == g_tensor_type) {
            if (read_tensor(a[i], &t[i]) <= 0)
                Py_RETURN_NONE;
            is_t[i] = 1;
        }
    }
    memo_call_t c = {op, args[1], na, t, is_t, a};
    py_outs_t po;
    po.n = 0;
    PyObject *entry, *key, *ret = NULL;
    int rc = memo_replay(&c, py_out, &po, &entry, &key);
    if (rc == 2) {
        ret = key;
    } else if (rc == 0) {
        ret = Py_None;
        Py_INCREF(ret);
    } else if (rc == 1) {
        PyObject *result = PyTuple_GET_ITEM(entry, 3), *single = PyTuple_GET_ITEM(entry, 4);
        const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(result);
        Py_ssize_t nr = PyBytes_GET_SIZE(result);
        if (single == Py_None) {
            ret = Py_Ellipsis;
            Py_INCREF(ret);
        } else if (single == Py_True && nr == 1) {
            ret = r[0] >= 128 ? a[r[0] - 128] : po.outs[r[0]];
            Py_INCREF(ret);
        } else {
            ret = PyTuple_New(nr);
            for (Py_ssize_t q = 0; ret && q < nr; q++) {
                PyObject *v = r[q] == 255 ? Py_None : r[q] >= 128 ? a[r[q] - 128] : po.outs[r[q]];
                Py_INCREF(v);
                PyTuple_SET_ITEM(ret, q, v);
            }
        }
        Py_DECREF(entry);
    }
    for (int j = 0; j < po.n; j++)
        Py_XDECREF(po.outs[j]);
    return ret;
}

/* memo() for a C caller (fast_api.h): the tensors read by the caller, the outputs allocated by its
 * callback; the same key, cache and plans. A miss or a stale entry is 0: the caller's Python route
 * runs the call (and registers it). */
typedef struct c_outs {
    canna_memo_alloc_fn alloc;
    void *ctx;
} c_outs_t;

static int c_out(void *ctx, int j, PyObject *spec, const DLTensor *like, void **ptr)
{
    (void)like;
    c_outs_t *co = ctx;
    if (PyTuple_GET_ITEM(spec, 2) != Py_None)
        return 1;   /* canna's pool allocates it (a large output): the Python route */
    int64_t dims[FAST_MAX_NDIM];
    int nd = spec_dims(PyTuple_GET_ITEM(spec, 0), dims);
    if (nd < 0)
        return -1;
    DLTensor to;
    int r = co->alloc(co->ctx, j, nd, dims, PyTuple_GET_ITEM(spec, 1), &to);
    if (r)
        return r;
    *ptr = data_of(&to);
    return 0;
}

static int memo_c_call(long op, PyObject *sarg, int na, const DLTensor *t, const int *is_t, PyObject *const *a,
                       canna_memo_alloc_fn alloc, void *ctx, unsigned char *result, int *nresult, int *single)
{
    if (na > MEMO_MAXARGS)
        return 0;
    for (int i = 0; i < na; i++)
        if (is_t[i] && !dl_usable(&t[i]))
            return 0;
    memo_call_t c = {op, sarg, na, t, is_t, a};
    c_outs_t co = {alloc, ctx};
    PyObject *entry, *key;
    int rc = memo_replay(&c, c_out, &co, &entry, &key);
    if (rc == 2) {
        Py_DECREF(key);
        return 0;
    }
    if (rc != 1)
        return rc;
    PyObject *res = PyTuple_GET_ITEM(entry, 3), *sg = PyTuple_GET_ITEM(entry, 4);
    Py_ssize_t nr = PyBytes_GET_SIZE(res);
    if (nr > CANNA_MEMO_MAXRESULTS) {   /* (done: the outputs are written; nothing to return them by) */
        Py_DECREF(entry);
        PyErr_SetString(PyExc_RuntimeError, "kernels memo: more results than a C caller takes");
        return -1;
    }
    memcpy(result, PyBytes_AS_STRING(res), (size_t)nr);
    *nresult = (int)nr;
    *single = sg == Py_None ? -1 : sg == Py_True && nr == 1;
    Py_DECREF(entry);
    return 1;
}

static const CannaFastApi g_fast_api = {CANNA_FAST_API_VERSION, fast_c_call, memo_c_call};

PyObject *fast_api_capsule(void)
{
    return PyCapsule_New((void *)&g_fast_api, CANNA_FAST_API_CAPSULE, NULL);
}
