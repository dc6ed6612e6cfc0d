/* canna_dl._native: DLPack export and import.
 *
 * Rules (the DLPack Python specification, dmlc/dlpack docs/source/python_spec.rst):
 * - exports are one malloc'ed block (managed struct + shape + strides), manager_ctx holds a strong
 *   reference to the exported array; the deleter takes the GIL itself (PyGILState_Ensure), works
 *   from any thread, frees the block, and leaks the reference instead of touching an interpreter
 *   that is gone or finalizing on another thread; it is never NULL;
 * - capsule names are static strings; the capsule destructor does nothing for a "used_" capsule,
 *   and otherwise saves and restores any pending exception around the deleter call;
 * - import validates everything (version, ndim, shape, strides, dtype, lanes, device, extents)
 *   before taking ownership; only then renames the capsule "used_..." (and removes its
 *   destructor), and the producer's deleter is called exactly once by the Storage's dealloc when
 *   the last view dies; NULL deleter, NULL strides, byte_offset, NULL data for zero-size tensors
 *   and 0-d tensors with NULL shape are accepted.
 */
#include "native.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char NAME_LEGACY[] = "dltensor";
static const char NAME_LEGACY_USED[] = "used_dltensor";
static const char NAME_VERSIONED[] = "dltensor_versioned";
static const char NAME_VERSIONED_USED[] = "used_dltensor_versioned";
static const char NAME_EXCHANGE[] = "dlpack_exchange_api";

int python_usable(void)
{
    if (!Py_IsInitialized())
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing())
        return PyGILState_Check();
#else
    if (_Py_IsFinalizing())
        return PyGILState_Check();
#endif
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* interpreter shutdown                                                                          */
/*
 * A framework destroys a tensor with the GIL released (torch's THPVariable_clear does, for every
 * tensor) and takes it back afterwards. A *daemon* thread that asks for the GIL once the
 * interpreter is finalizing is ended by CPython < 3.14 with pthread_exit(), whose forced unwind
 * through the framework's C++ frames calls std::terminate ("terminate called without an active
 * exception"); CPython 3.14 hangs such threads instead (CPython issue gh-87135). So once shutdown
 * has begun (begin_shutdown(), an atexit hook that runs before finalization), a deleter called on a
 * Python thread that does not hold the GIL neither takes the GIL nor returns to the framework: it
 * leaks the reference and parks the thread until the process exits (bounded by PARK_SECONDS).
 * begin_shutdown() first lets deleters already waiting for the GIL finish and the threads that
 * just left one take the GIL back while the interpreter is still alive.
 */
static int shutdown_started;          /* set once, with the GIL held, by begin_shutdown() */
static unsigned long shutdown_ident;  /* the thread running the shutdown: never parked */
static unsigned long main_ident;      /* its returns do not make begin_shutdown() wait */
static int deleters_in_flight;        /* deleters between their shutdown check and the GIL release */
static int64_t last_nogil_return_ns;  /* when a non-main thread last left a deleter without the GIL */

#define PARK_SECONDS 30   /* an atexit hook that joins such a thread waits at most this long */
#define SHUTDOWN_SETTLE_NS 20000000LL     /* 20 ms with no such return: nobody is on the way back */
#define SHUTDOWN_WAIT_MAX_NS 1000000000LL /* at most 1 s in begin_shutdown() */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void park_if_python_thread(void)
{
    if (PyGILState_GetThisThreadState() == NULL || PyThread_get_thread_ident() == shutdown_ident)
        return;  /* a foreign thread never takes the GIL back; the shutdown thread must go on */
    for (int i = 0; i < PARK_SECONDS * 10; i++) {
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
    }
}

PyObject *py_begin_shutdown(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (__atomic_load_n(&shutdown_started, __ATOMIC_SEQ_CST))
        Py_RETURN_NONE;
    shutdown_ident = PyThread_get_thread_ident();
    __atomic_store_n(&shutdown_started, 1, __ATOMIC_SEQ_CST);
    int64_t start = now_ns();
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        int64_t t = now_ns();
        if (t - start > SHUTDOWN_WAIT_MAX_NS)
            break;
        if (__atomic_load_n(&deleters_in_flight, __ATOMIC_SEQ_CST) == 0 &&
            t - __atomic_load_n(&last_nogil_return_ns, __ATOMIC_SEQ_CST) > SHUTDOWN_SETTLE_NS)
            break;
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

int shutdown_init(void)
{
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
    PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
    if (ident)
        main_ident = PyLong_AsUnsignedLong(ident);
    Py_XDECREF(ident);
    Py_XDECREF(main);
    Py_XDECREF(threading);
    return PyErr_Occurred() ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* export                                                                                        */

static void release_ctx(PyObject *ctx)
{
    if (!python_usable()) {  /* the interpreter is gone, or finalizing on another thread */
        __atomic_add_fetch(&canna_counters.export_refs_leaked, 1, __ATOMIC_RELAXED);
        if (Py_IsInitialized())
            park_if_python_thread();
        return;
    }
    if (PyGILState_Check()) {  /* the caller holds the GIL (a capsule destructor, a Python thread) */
        Py_DECREF(ctx);
        return;
    }
    __atomic_add_fetch(&deleters_in_flight, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&shutdown_started, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(&deleters_in_flight, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&canna_counters.export_refs_leaked, 1, __ATOMIC_RELAXED);
        park_if_python_thread();
        return;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(ctx);
    int stopping = __atomic_load_n(&shutdown_started, __ATOMIC_SEQ_CST);
    int returning = !stopping && PyThread_get_thread_ident() != main_ident;
    PyGILState_Release(g);
    if (returning)
        __atomic_store_n(&last_nogil_return_ns, now_ns(), __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&deleters_in_flight, 1, __ATOMIC_SEQ_CST);
    if (stopping)
        park_if_python_thread();
}

static void release_ctx_and_free(void *block, PyObject *ctx)
{
    free(block);
    __atomic_add_fetch(&canna_counters.export_deleter_calls, 1, __ATOMIC_RELAXED);
    if (ctx)
        release_ctx(ctx);
}

static void deleter_legacy(DLManagedTensor *self)
{
    if (self)
        release_ctx_and_free(self, (PyObject *)self->manager_ctx);
}

static void deleter_versioned(DLManagedTensorVersioned *self)
{
    if (self)
        release_ctx_and_free(self, (PyObject *)self->manager_ctx);
}

static void capsule_destructor_legacy(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, NAME_LEGACY_USED))
        return;
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    DLManagedTensor *mt = PyCapsule_GetPointer(cap, NAME_LEGACY);
    if (mt) {
        if (mt->deleter)
            mt->deleter(mt);
    } else {
        PyErr_WriteUnraisable(cap);
    }
    PyErr_Restore(et, ev, etb);
}

static void capsule_destructor_versioned(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, NAME_VERSIONED_USED))
        return;
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    DLManagedTensorVersioned *mt = PyCapsule_GetPointer(cap, NAME_VERSIONED);
    if (mt) {
        if (mt->deleter)
            mt->deleter(mt);
    } else {
        PyErr_WriteUnraisable(cap);
    }
    PyErr_Restore(et, ev, etb);
}

/* Fill `t` from array `a` (shape/strides stored at `dims`, 2*ndim int64s). */
static int fill_dltensor(DLTensor *t, ArrayObject *a, int64_t *dims, int32_t dev_type, int32_t dev_id)
{
    int n = a->ndim;
    t->data = a->size ? a->data : NULL;
    t->device.device_type = dev_type;
    t->device.device_id = dev_id;
    t->ndim = n;
    t->dtype.code = a->dtype->code;
    t->dtype.bits = a->dtype->bits;
    t->dtype.lanes = a->dtype->lanes;
    t->byte_offset = 0;
    if (n == 0) {
        t->shape = NULL;
        t->strides = NULL;
        return 0;
    }
    t->shape = dims;
    t->strides = dims + n;
    return array_fill_c(a, t->shape, t->strides);
}

/* A new managed tensor for `a`; manager_ctx holds a new reference to `a`. */
static void *make_managed(ArrayObject *a, int versioned, uint64_t flags, int32_t dev_type, int32_t dev_id)
{
    size_t head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
    char *block = malloc(head + 2 * sizeof(int64_t) * (size_t)(a->ndim ? a->ndim : 1));
    if (!block) {
        PyErr_NoMemory();
        return NULL;
    }
    int64_t *dims = (int64_t *)(block + head);
    if (versioned) {
        DLManagedTensorVersioned *mt = (DLManagedTensorVersioned *)block;
        mt->version.major = CANNA_DLPACK_MAJOR;
        mt->version.minor = CANNA_DLPACK_MINOR;
        mt->manager_ctx = a;
        mt->deleter = deleter_versioned;
        mt->flags = flags;
        if (fill_dltensor(&mt->dl_tensor, a, dims, dev_type, dev_id) < 0) {
            free(block);
            return NULL;
        }
    } else {
        DLManagedTensor *mt = (DLManagedTensor *)block;
        mt->manager_ctx = a;
        mt->deleter = deleter_legacy;
        if (fill_dltensor(&mt->dl_tensor, a, dims, dev_type, dev_id) < 0) {
            free(block);
            return NULL;
        }
    }
    Py_INCREF(a);
    COUNT(exports);
    return block;
}

static PyObject *wrap_capsule(void *mt, int versioned)
{
    PyObject *cap = PyCapsule_New(mt, versioned ? NAME_VERSIONED : NAME_LEGACY,
                                  versioned ? capsule_destructor_versioned : capsule_destructor_legacy);
    if (!cap) {
        /* nobody else has seen it: run the deleter now */
        if (versioned)
            deleter_versioned(mt);
        else
            deleter_legacy(mt);
    }
    return cap;
}

static int check_array(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &Array_Type)) {
        PyErr_Format(PyExc_TypeError, "expected a canna_dl.DeviceArray, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

/* export_capsule(array, versioned, flags, device_type, device_id) -> capsule (no checks: the caller
 * decided the layout, device and stream ordering) */
PyObject *py_export_capsule(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "export_capsule(array, versioned, flags, device_type, device_id)");
        return NULL;
    }
    if (check_array(args[0]) < 0)
        return NULL;
    int versioned = PyObject_IsTrue(args[1]);
    unsigned long long flags = PyLong_AsUnsignedLongLong(args[2]);
    long dt = PyLong_AsLong(args[3]), di = PyLong_AsLong(args[4]);
    if (versioned < 0 || PyErr_Occurred())
        return NULL;
    void *mt = make_managed((ArrayObject *)args[0], versioned, flags, (int32_t)dt, (int32_t)di);
    return mt ? wrap_capsule(mt, versioned) : NULL;
}

/* Whether `a` can go to a CPU consumer as it is: host-accessible memory, no pending stream work,
 * no negative stride (torch aborts on them), and for legacy consumers (TensorFlow, JAX) a 64-byte
 * aligned first element. */
static int exportable_as_is(ArrayObject *a, int legacy)
{
    StorageObject *st = a->storage;
    if (st->kind != MEM_HOST && canna_device_export_type != kDLCPU)
        return 0;
    if (st->stream != Py_None)
        return 0;
    if (a->flags & AF_NEG)
        return 0;
    if (legacy && a->size && ((uintptr_t)a->data % CANNA_ALIGN))
        return 0;
    return 1;
}

/* max_version -> 1 (versioned), 0 (legacy), -1 (not understood: let Python raise) */
static int wants_versioned(PyObject *mv)
{
    if (mv == Py_None)
        return 0;
    if (!PyTuple_Check(mv) || PyTuple_GET_SIZE(mv) < 1 || !PyLong_CheckExact(PyTuple_GET_ITEM(mv, 0)))
        return -1;
    long major = PyLong_AsLong(PyTuple_GET_ITEM(mv, 0));
    if (major == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return major >= 1;
}

/* export_fast(array, max_version) -> capsule, or NotImplemented when the slow path must decide */
PyObject *py_export_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || check_array(args[0]) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "export_fast(array, max_version)");
        return NULL;
    }
    ArrayObject *a = (ArrayObject *)args[0];
    int versioned = wants_versioned(args[1]);
    if (versioned < 0 || !exportable_as_is(a, !versioned))
        Py_RETURN_NOTIMPLEMENTED;
    uint64_t flags = (a->flags & AF_READONLY) ? CANNA_DLPACK_FLAG_READ_ONLY : 0;
    void *mt = make_managed(a, versioned, flags, kDLCPU, 0);
    return mt ? wrap_capsule(mt, versioned) : NULL;
}

static DLPackExchangeAPI *exchange_api(PyObject *cap)
{
    DLPackExchangeAPI *api = PyCapsule_GetPointer(cap, NAME_EXCHANGE);
    if (!api)
        return NULL;
    if (api->header.version.major != 1) {
        PyErr_Format(PyExc_BufferError, "DLPack exchange API major version %u is not supported", api->header.version.major);
        return NULL;
    }
    return api;
}

/* export_exchange(api_capsule, array, force) -> the consumer's object built by its exchange API
 * from a versioned managed tensor of `array` (kDLCPU), or NotImplemented when the array cannot go
 * as it is (see exportable_as_is) and `force` is false. */
PyObject *py_export_exchange(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "export_exchange(api, array, force)");
        return NULL;
    }
    DLPackExchangeAPI *api = exchange_api(args[0]);
    if (!api || check_array(args[1]) < 0)
        return NULL;
    ArrayObject *a = (ArrayObject *)args[1];
    if (!PyObject_IsTrue(args[2]) && !exportable_as_is(a, 0))
        Py_RETURN_NOTIMPLEMENTED;
    if (!api->managed_tensor_to_py_object_no_sync) {
        PyErr_SetString(PyExc_BufferError, "the consumer's DLPack exchange API has no managed_tensor_to_py_object_no_sync");
        return NULL;
    }
    uint64_t flags = (a->flags & AF_READONLY) ? CANNA_DLPACK_FLAG_READ_ONLY : 0;
    DLManagedTensorVersioned *mt = make_managed(a, 1, flags, kDLCPU, 0);
    if (!mt)
        return NULL;
    void *out = NULL;
    if (api->managed_tensor_to_py_object_no_sync(mt, &out) != 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_BufferError, "the consumer's DLPack exchange API failed to import the tensor");
        return NULL;
    }
    return (PyObject *)out;
}

/* ------------------------------------------------------------------------------------------ */
/* import                                                                                        */

static const char *device_name(int32_t t)
{
    switch (t) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLVPI: return "kDLVPI";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLExtDev: return "kDLExtDev";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    case kDLOneAPI: return "kDLOneAPI";
    case kDLWebGPU: return "kDLWebGPU";
    case kDLHexagon: return "kDLHexagon";
    case kDLMAIA: return "kDLMAIA";
    case kDLTrn: return "kDLTrn";
    case kDLTPU: return "kDLTPU";
    case kDLTPUHost: return "kDLTPUHost";
    case kDLAscend: return "kDLAscend";
    default: return "unknown";
    }
}

/* An array of type `cls` viewing `t`. Ownership of the managed tensor is NOT taken here. */
static ArrayObject *array_from_dltensor(PyTypeObject *cls, const DLTensor *t, int readonly)
{
    int ndim = t->ndim;
    if (ndim < 0 || ndim > CANNA_MAX_NDIM) {
        PyErr_Format(PyExc_BufferError, "DLPack tensor has ndim=%d; canna supports 0..%d", ndim, CANNA_MAX_NDIM);
        return NULL;
    }
    if (t->dtype.lanes != 1) {
        PyErr_Format(PyExc_BufferError, "DLPack tensor has lanes=%u (a vector type); canna supports lanes=1 only",
                     (unsigned)t->dtype.lanes);
        return NULL;
    }
    DTypeObject *dt = dtype_lookup(t->dtype.code, t->dtype.bits);
    if (!dt) {
        PyErr_Format(PyExc_BufferError, "DLPack dtype (code=%u, bits=%u, lanes=1) is not supported by canna",
                     (unsigned)t->dtype.code, (unsigned)t->dtype.bits);
        return NULL;
    }
    int kind;
    switch (t->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost:
    case kDLCUDAManaged:
        kind = MEM_HOST;
        break;
    case kDLExtDev:
    case kDLAscend:
        kind = MEM_DEVICE;
        break;
    default:
        PyErr_Format(PyExc_BufferError,
                     "DLPack device type %d (%s) is not supported by canna: it takes host memory (kDLCPU 1) and "
                     "Ascend NPU memory (kDLExtDev 12, kDLAscend 21)",
                     (int)t->device.device_type, device_name(t->device.device_type));
        return NULL;
    }
    if (ndim > 0 && !t->shape) {
        PyErr_Format(PyExc_BufferError, "DLPack tensor has ndim=%d but a NULL shape", ndim);
        return NULL;
    }
    int64_t shape[CANNA_MAX_NDIM], strides[CANNA_MAX_NDIM];
    int64_t size = 1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = t->shape[i];
        if (shape[i] < 0) {
            PyErr_Format(PyExc_BufferError, "DLPack tensor has a negative dimension (shape[%d] = %lld)", i, (long long)shape[i]);
            return NULL;
        }
        if (__builtin_mul_overflow(size, shape[i], &size)) {
            PyErr_SetString(PyExc_BufferError, "DLPack tensor size overflows 64 bits");
            return NULL;
        }
    }
    if (t->strides && ndim > 0) {
        memcpy(strides, t->strides, sizeof(int64_t) * (size_t)ndim);
    } else {
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            strides[i] = s;
            s *= shape[i] ? shape[i] : 1;
        }
    }
    int64_t item = dt->itemsize;
    uintptr_t first;
    if (__builtin_add_overflow((uintptr_t)t->data, (uintptr_t)t->byte_offset, &first)) {
        PyErr_SetString(PyExc_BufferError, "DLPack data pointer + byte_offset overflows");
        return NULL;
    }
    char *base;
    Py_ssize_t nbytes, offset;
    if (size == 0) {
        base = t->data ? (char *)first : NULL;
        nbytes = 0;
        offset = 0;
    } else {
        if (!t->data) {
            PyErr_SetString(PyExc_BufferError, "DLPack tensor has elements but a NULL data pointer");
            return NULL;
        }
        int64_t lo = 0, hi = 0;
        for (int i = 0; i < ndim; i++) {
            int64_t ext;
            if (shape[i] == 1)
                continue;
            if (__builtin_mul_overflow(shape[i] - 1, strides[i], &ext) ||
                (ext < 0 ? __builtin_add_overflow(lo, ext, &lo) : __builtin_add_overflow(hi, ext, &hi))) {
                PyErr_SetString(PyExc_BufferError, "DLPack tensor extent overflows 64 bits");
                return NULL;
            }
        }
        int64_t lob, span;
        if (__builtin_mul_overflow(lo, item, &lob) || __builtin_sub_overflow(hi, lo, &span) ||
            __builtin_add_overflow(span, (int64_t)1, &span) || __builtin_mul_overflow(span, item, &span) ||
            span > PY_SSIZE_T_MAX || (uintptr_t)(-lob) > first) {
            PyErr_SetString(PyExc_BufferError, "DLPack tensor extent overflows the address space");
            return NULL;
        }
        base = (char *)(first + (uintptr_t)lob);   /* lob <= 0 */
        nbytes = (Py_ssize_t)span;
        offset = (Py_ssize_t)(-lo);
    }
    PyObject *dev = kind == MEM_HOST ? canna_host_device : Py_None;
    StorageObject *st = storage_new(base, nbytes, kind, dev);
    if (!st)
        return NULL;
    st->readonly = readonly;
    st->dl_device_type = t->device.device_type;
    st->dl_device_id = t->device.device_id;
    ArrayObject *a = array_new(cls, st, dt, ndim, shape, strides, offset, readonly);
    Py_DECREF(st);
    return a;
}

static int check_cls(PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &Array_Type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a subclass of ArrayBase");
        return -1;
    }
    return 0;
}

/* import_capsule(cls, capsule) -> array taking ownership of the capsule's managed tensor */
PyObject *py_import_capsule(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "import_capsule(cls, capsule)");
        return NULL;
    }
    if (check_cls(args[0]) < 0)
        return NULL;
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *cap = args[1];
    if (!PyCapsule_CheckExact(cap)) {
        PyErr_Format(PyExc_TypeError, "expected a DLPack capsule, not %.100s", Py_TYPE(cap)->tp_name);
        return NULL;
    }
    const char *name = PyCapsule_GetName(cap);
    if (!name && PyErr_Occurred())
        return NULL;
    if (name && strcmp(name, NAME_VERSIONED) == 0) {
        DLManagedTensorVersioned *mt = PyCapsule_GetPointer(cap, NAME_VERSIONED);
        if (!mt)
            return NULL;
        if (mt->version.major != 1) {
            PyErr_Format(PyExc_BufferError,
                         "DLPack major version %u is not supported (canna reads 1.x); the producer's deleter "
                         "runs when the capsule is released", mt->version.major);
            return NULL;
        }
        ArrayObject *a = array_from_dltensor(cls, &mt->dl_tensor, (mt->flags & CANNA_DLPACK_FLAG_READ_ONLY) != 0);
        if (!a)
            return NULL;
        /* ownership is taken only now */
        if (PyCapsule_SetName(cap, NAME_VERSIONED_USED) < 0 || PyCapsule_SetDestructor(cap, NULL) < 0) {
            Py_DECREF(a);
            return NULL;
        }
        a->storage->managed = mt;
        a->storage->managed_kind = MANAGED_VERSIONED;
        COUNT(imports);
        return (PyObject *)a;
    }
    if (name && strcmp(name, NAME_LEGACY) == 0) {
        DLManagedTensor *mt = PyCapsule_GetPointer(cap, NAME_LEGACY);
        if (!mt)
            return NULL;
        /* legacy capsules cannot say whether the memory may be written: read-only (NumPy's rule) */
        ArrayObject *a = array_from_dltensor(cls, &mt->dl_tensor, 1);
        if (!a)
            return NULL;
        if (PyCapsule_SetName(cap, NAME_LEGACY_USED) < 0 || PyCapsule_SetDestructor(cap, NULL) < 0) {
            Py_DECREF(a);
            return NULL;
        }
        a->storage->managed = mt;
        a->storage->managed_kind = MANAGED_LEGACY;
        COUNT(imports);
        return (PyObject *)a;
    }
    if (name && (strcmp(name, NAME_VERSIONED_USED) == 0 || strcmp(name, NAME_LEGACY_USED) == 0)) {
        PyErr_Format(PyExc_BufferError, "this DLPack capsule was already consumed (its name is '%s'); a capsule "
                     "can be imported once", name);
        return NULL;
    }
    PyErr_Format(PyExc_BufferError, "capsule named '%s' is not a DLPack tensor (expected 'dltensor' or "
                 "'dltensor_versioned')", name ? name : "(null)");
    return NULL;
}

/* import_exchange(api_capsule, cls, obj) -> array owning the managed tensor the producer's exchange
 * API made for obj (no stream synchronization: for CPU producers) */
PyObject *py_import_exchange(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "import_exchange(api, cls, obj)");
        return NULL;
    }
    DLPackExchangeAPI *api = exchange_api(args[0]);
    if (!api || check_cls(args[1]) < 0)
        return NULL;
    if (!api->managed_tensor_from_py_object_no_sync) {
        PyErr_SetString(PyExc_BufferError, "the producer's DLPack exchange API has no managed_tensor_from_py_object_no_sync");
        return NULL;
    }
    DLManagedTensorVersioned *mt = NULL;
    if (api->managed_tensor_from_py_object_no_sync(args[2], &mt) != 0 || !mt) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_BufferError, "the producer's DLPack exchange API could not export the object");
        return NULL;
    }
    /* we own mt from here on */
    ArrayObject *a = NULL;
    if (mt->version.major != 1)
        PyErr_Format(PyExc_BufferError, "DLPack major version %u is not supported (canna reads 1.x)", mt->version.major);
    else
        a = array_from_dltensor((PyTypeObject *)args[1], &mt->dl_tensor, (mt->flags & CANNA_DLPACK_FLAG_READ_ONLY) != 0);
    if (!a) {
        if (mt->deleter) {
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);
            mt->deleter(mt);
            COUNT(import_deleter_calls);
            PyErr_Restore(et, ev, etb);
        }
        return NULL;
    }
    a->storage->managed = mt;
    a->storage->managed_kind = MANAGED_VERSIONED;
    COUNT(imports);
    return (PyObject *)a;
}

/* buffer-protocol format -> dtype */
static DTypeObject *dtype_from_format(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        fmt = "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    else if (*fmt == '>' || *fmt == '!') {
#if __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__
        return NULL;
#else
        fmt++;
#endif
    }
    uint8_t bits = (uint8_t)(itemsize * 8);
    if (fmt[0] == 'Z' && (fmt[1] == 'f' || fmt[1] == 'd') && fmt[2] == 0)
        return dtype_lookup(kDLComplex, bits);
    if (fmt[0] == 0 || fmt[1] != 0)
        return NULL;
    switch (fmt[0]) {
    case '?': return dtype_lookup(kDLBool, bits);
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': return dtype_lookup(kDLInt, bits);
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': return dtype_lookup(kDLUInt, bits);
    case 'e': case 'f': case 'd': return dtype_lookup(kDLFloat, bits);
    default: return NULL;
    }
}

/* import_buffer(cls, obj) -> array viewing obj's buffer (zero-copy; read-only when obj is) */
PyObject *py_import_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "import_buffer(cls, obj)");
        return NULL;
    }
    if (check_cls(args[0]) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_RECORDS_RO) < 0)
        return NULL;
    DTypeObject *dt = dtype_from_format(view.format, view.itemsize);
    if (!dt || dt->itemsize != view.itemsize) {
        PyErr_Format(PyExc_BufferError, "buffer format '%s' (itemsize %zd) has no canna dtype", view.format ? view.format : "B",
                     view.itemsize);
        PyBuffer_Release(&view);
        return NULL;
    }
    int ndim = view.ndim;
    if (ndim > CANNA_MAX_NDIM) {
        PyErr_Format(PyExc_BufferError, "buffer has %d dimensions; canna supports %d", ndim, CANNA_MAX_NDIM);
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t shape[CANNA_MAX_NDIM], strides[CANNA_MAX_NDIM];
    int64_t lo = 0, hi = 0, size = 1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = view.shape[i];
        size *= shape[i];
    }
    for (int i = 0; i < ndim; i++) {
        Py_ssize_t sb = view.strides[i];
        if (sb % view.itemsize) {
            PyErr_SetString(PyExc_BufferError, "buffer strides are not a multiple of the item size");
            PyBuffer_Release(&view);
            return NULL;
        }
        strides[i] = sb / view.itemsize;
        if (size && shape[i] > 1) {
            int64_t ext = (shape[i] - 1) * strides[i];
            if (ext < 0)
                lo += ext;
            else
                hi += ext;
        }
    }
    char *base = size ? (char *)view.buf + lo * view.itemsize : (char *)view.buf;
    Py_ssize_t nbytes = size ? (Py_ssize_t)((hi - lo + 1) * view.itemsize) : 0;
    StorageObject *st = storage_new(size ? base : NULL, nbytes, MEM_HOST, canna_host_device);
    if (!st) {
        PyBuffer_Release(&view);
        return NULL;
    }
    st->readonly = view.readonly;
    st->view = view;
    st->has_view = 1;
    ArrayObject *a = array_new((PyTypeObject *)args[0], st, dt, ndim, shape, strides, size ? -lo : 0, view.readonly);
    Py_DECREF(st);
    return (PyObject *)a;
}

/* ------------------------------------------------------------------------------------------ */
/* introspection (tests, debugging)                                                              */

static PyObject *tensor_dict(const DLTensor *t)
{
    PyObject *shape = Py_None, *strides = Py_None;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    if (t->shape) {
        Py_DECREF(shape);
        shape = int64_tuple(t->shape, t->ndim);
    }
    if (t->strides) {
        Py_DECREF(strides);
        strides = int64_tuple(t->strides, t->ndim);
    }
    if (!shape || !strides) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return NULL;
    }
    return Py_BuildValue("{s:K,s:(ii),s:i,s:(iii),s:N,s:N,s:K}", "data", (unsigned long long)(uintptr_t)t->data,
                         "device", t->device.device_type, t->device.device_id, "ndim", t->ndim, "dtype",
                         t->dtype.code, t->dtype.bits, t->dtype.lanes, "shape", shape, "strides", strides,
                         "byte_offset", (unsigned long long)t->byte_offset);
}

/* capsule_info(capsule) -> dict describing the managed tensor without consuming it */
PyObject *py_capsule_info(PyObject *self, PyObject *cap)
{
    (void)self;
    if (!PyCapsule_CheckExact(cap)) {
        PyErr_SetString(PyExc_TypeError, "expected a capsule");
        return NULL;
    }
    const char *name = PyCapsule_GetName(cap);
    if (!name) {
        PyErr_SetString(PyExc_ValueError, "capsule has no name");
        return NULL;
    }
    PyObject *d = NULL;
    if (strcmp(name, NAME_VERSIONED) == 0 || strcmp(name, NAME_VERSIONED_USED) == 0) {
        DLManagedTensorVersioned *mt = PyCapsule_GetPointer(cap, name);
        if (!mt || !(d = tensor_dict(&mt->dl_tensor)))
            return NULL;
        PyObject *v = Py_BuildValue("(II)", mt->version.major, mt->version.minor);
        PyObject *f = PyLong_FromUnsignedLongLong(mt->flags);
        PyDict_SetItemString(d, "version", v);
        PyDict_SetItemString(d, "flags", f);
        PyDict_SetItemString(d, "has_deleter", mt->deleter ? Py_True : Py_False);
        Py_XDECREF(v);
        Py_XDECREF(f);
    } else if (strcmp(name, NAME_LEGACY) == 0 || strcmp(name, NAME_LEGACY_USED) == 0) {
        DLManagedTensor *mt = PyCapsule_GetPointer(cap, name);
        if (!mt || !(d = tensor_dict(&mt->dl_tensor)))
            return NULL;
        PyDict_SetItemString(d, "version", Py_None);
        PyDict_SetItemString(d, "has_deleter", mt->deleter ? Py_True : Py_False);
    } else {
        PyErr_Format(PyExc_ValueError, "not a DLPack capsule: '%s'", name);
        return NULL;
    }
    PyObject *n = PyUnicode_FromString(name);
    PyDict_SetItemString(d, "name", n);
    Py_XDECREF(n);
    return d;
}

/* exchange_api_info(capsule) -> (major, minor, has each function) */
PyObject *py_exchange_api_info(PyObject *self, PyObject *cap)
{
    (void)self;
    DLPackExchangeAPI *api = PyCapsule_GetPointer(cap, NAME_EXCHANGE);
    if (!api)
        return NULL;
    return Py_BuildValue("{s:(II),s:O,s:O,s:O}", "version", api->header.version.major, api->header.version.minor,
                         "from_py_object", api->managed_tensor_from_py_object_no_sync ? Py_True : Py_False,
                         "to_py_object", api->managed_tensor_to_py_object_no_sync ? Py_True : Py_False,
                         "current_work_stream", api->current_work_stream ? Py_True : Py_False);
}
