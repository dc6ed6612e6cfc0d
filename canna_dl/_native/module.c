/* canna_dl._native: module definition, configuration, counters, aligned host memory. */
#include "native.h"

#include <stdlib.h>
#include <string.h>

CannaCounters canna_counters;
PyObject *canna_host_device;                 /* set by configure(); None until then */
int32_t canna_device_export_type = kDLCPU;   /* kDLCPU (unified) or kDLExtDev (discrete) */

/* configure(host_device, device_export_type): the device host-memory imports are attached to
 * (None: host memory is not a device operand, e.g. the discrete model) and the DLPack device type
 * canna's device memory is exported as */
static PyObject *py_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "configure(host_device, device_export_type)");
        return NULL;
    }
    long t = PyLong_AsLong(args[1]);
    if (t == -1 && PyErr_Occurred())
        return NULL;
    Py_INCREF(args[0]);
    Py_SETREF(canna_host_device, args[0]);
    canna_device_export_type = (int32_t)t;
    Py_RETURN_NONE;
}

static PyObject *py_register_dtype(PyObject *self, PyObject *dt)
{
    (void)self;
    if (!PyObject_TypeCheck(dt, &DType_Type)) {
        PyErr_SetString(PyExc_TypeError, "expected a DTypeBase");
        return NULL;
    }
    if (dtype_register((DTypeObject *)dt) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_counters(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
#define LOAD(f) (unsigned long long)__atomic_load_n(&canna_counters.f, __ATOMIC_RELAXED)
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "exports", LOAD(exports), "export_deleter_calls",
                         LOAD(export_deleter_calls), "export_refs_leaked", LOAD(export_refs_leaked), "imports",
                         LOAD(imports), "import_deleter_calls", LOAD(import_deleter_calls), "import_null_deleters",
                         LOAD(import_null_deleters), "test_deleter_calls", LOAD(test_deleter_calls));
#undef LOAD
}

/* host_alloc(nbytes) -> Storage of fresh 64-byte-aligned host memory (kind host) */
static PyObject *py_host_alloc(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "host_alloc: negative size");
        return NULL;
    }
    void *p = NULL;
    if (n > 0) {
        size_t rounded = ((size_t)n + CANNA_ALIGN - 1) & ~(size_t)(CANNA_ALIGN - 1);
        p = aligned_alloc(CANNA_ALIGN, rounded);
        if (!p)
            return PyErr_NoMemory();
    }
    StorageObject *st = storage_new(p, n, MEM_HOST, Py_None);
    if (!st) {
        free(p);
        return NULL;
    }
    st->host_block = p;
    return (PyObject *)st;
}

/* make_array(cls, storage, dtype, shape, strides, offset, readonly) -> array (bounds checked) */
static PyObject *py_make_array(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "make_array(cls, storage, dtype, shape, strides, offset, readonly)");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &Array_Type) ||
        !PyObject_TypeCheck(args[1], &Storage_Type) || !PyObject_TypeCheck(args[2], &DType_Type) ||
        !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "make_array: bad argument types");
        return NULL;
    }
    int ndim = (int)PyTuple_GET_SIZE(args[3]);
    if (ndim > CANNA_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "arrays have at most %d dimensions, got %d", CANNA_MAX_NDIM, ndim);
        return NULL;
    }
    int64_t shape[CANNA_MAX_NDIM], strides[CANNA_MAX_NDIM];
    if (read_int64_tuple(args[3], shape, ndim, "shape") < 0 || read_int64_tuple(args[4], strides, ndim, "strides") < 0)
        return NULL;
    Py_ssize_t offset = PyLong_AsSsize_t(args[5]);
    int ro = PyObject_IsTrue(args[6]);
    if ((offset == -1 && PyErr_Occurred()) || ro < 0)
        return NULL;
    return (PyObject *)array_new((PyTypeObject *)args[0], (StorageObject *)args[1], (DTypeObject *)args[2], ndim,
                                 shape, strides, offset, ro);
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_FASTCALL, "configure(host_device, device_export_type)"},
    {"register_dtype", py_register_dtype, METH_O, "register a DTypeBase for DLPack (code, bits) lookups"},
    {"counters", py_counters, METH_NOARGS, "DLPack ownership counters (exports, deleter calls, imports, ...)"},
    {"host_alloc", py_host_alloc, METH_O, "host_alloc(nbytes) -> Storage of 64-byte aligned host memory"},
    {"make_array", (PyCFunction)(void (*)(void))py_make_array, METH_FASTCALL,
     "make_array(cls, storage, dtype, shape, strides, offset, readonly)"},
    {"export_capsule", (PyCFunction)(void (*)(void))py_export_capsule, METH_FASTCALL,
     "export_capsule(array, versioned, flags, device_type, device_id) -> DLPack capsule"},
    {"export_fast", (PyCFunction)(void (*)(void))py_export_fast, METH_FASTCALL,
     "export_fast(array, max_version) -> capsule, or NotImplemented"},
    {"export_exchange", (PyCFunction)(void (*)(void))py_export_exchange, METH_FASTCALL,
     "export_exchange(api_capsule, array, force) -> consumer object, or NotImplemented"},
    {"import_capsule", (PyCFunction)(void (*)(void))py_import_capsule, METH_FASTCALL,
     "import_capsule(cls, capsule) -> array"},
    {"import_exchange", (PyCFunction)(void (*)(void))py_import_exchange, METH_FASTCALL,
     "import_exchange(api_capsule, cls, obj) -> array"},
    {"import_buffer", (PyCFunction)(void (*)(void))py_import_buffer, METH_FASTCALL,
     "import_buffer(cls, obj) -> array viewing a buffer-protocol object"},
    {"capsule_info", py_capsule_info, METH_O, "capsule_info(capsule) -> dict (does not consume)"},
    {"exchange_api_info", py_exchange_api_info, METH_O, "exchange_api_info(capsule) -> dict"},
    {"strided_copy", (PyCFunction)(void (*)(void))py_strided_copy, METH_FASTCALL,
     "strided_copy(dst, dst_strides, src, src_strides, shape, itemsize); strides in bytes"},
    {"begin_shutdown", py_begin_shutdown, METH_NOARGS,
     "atexit hook: from now on deleters on Python threads without the GIL leak and park the thread"},
    {"_test_capsule", (PyCFunction)(void (*)(void))py_test_capsule, METH_VARARGS | METH_KEYWORDS,
     "a capsule made like a foreign producer's, with a counting deleter (tests)"},
    {"_test_delete_in_thread", py_test_call_deleter_in_thread, METH_O,
     "consume a capsule and call its deleter from a new native thread without the GIL (tests)"},
    {"_test_delete_at_exit", py_test_delete_at_exit, METH_O,
     "consume a capsule and call its deleter from a C atexit handler, after Py_Finalize (tests)"},
    {NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "canna_dl._native",
    "canna_dl's C helpers: DLPack structs, capsules, deleters, array and storage objects.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (PyType_Ready(&DType_Type) < 0 || PyType_Ready(&Storage_Type) < 0 || PyType_Ready(&Array_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(Py_None);
    canna_host_device = Py_None;
    Py_INCREF(&DType_Type);
    Py_INCREF(&Storage_Type);
    Py_INCREF(&Array_Type);
    if (PyModule_AddObject(m, "DTypeBase", (PyObject *)&DType_Type) < 0 ||
        PyModule_AddObject(m, "Storage", (PyObject *)&Storage_Type) < 0 ||
        PyModule_AddObject(m, "ArrayBase", (PyObject *)&Array_Type) < 0 ||
        PyModule_AddIntConstant(m, "MAX_NDIM", CANNA_MAX_NDIM) < 0 ||
        PyModule_AddIntConstant(m, "ALIGN", CANNA_ALIGN) < 0 ||
        PyModule_AddIntConstant(m, "DLPACK_MAJOR", CANNA_DLPACK_MAJOR) < 0 ||
        PyModule_AddIntConstant(m, "DLPACK_MINOR", CANNA_DLPACK_MINOR) < 0 ||
        PyModule_AddIntConstant(m, "AF_READONLY", AF_READONLY) < 0 ||
        PyModule_AddIntConstant(m, "AF_C_CONTIG", AF_C_CONTIG) < 0 ||
        PyModule_AddIntConstant(m, "AF_NEG", AF_NEG) < 0 ||
        PyModule_AddIntConstant(m, "AF_F_CONTIG", AF_F_CONTIG) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* the hook runs before finalization begins (atexit hooks run first, CPython's Py_FinalizeEx) */
    PyObject *atexit = shutdown_init() < 0 ? NULL : PyImport_ImportModule("atexit");
    PyObject *hook = atexit ? PyObject_GetAttrString(m, "begin_shutdown") : NULL;
    PyObject *r = hook ? PyObject_CallMethod(atexit, "register", "O", hook) : NULL;
    Py_XDECREF(hook);
    Py_XDECREF(atexit);
    if (!r) {
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(r);
    return m;
}
