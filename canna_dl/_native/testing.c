/* canna_dl._native: producers and consumers for tests.
 *
 * _test_capsule(...) builds a capsule like any foreign producer would, with every field under the
 * caller's control (including invalid ones), a deleter that counts its calls (taking the GIL
 * itself) and a name-aware capsule destructor, so the importer's edge cases can be tested without
 * a framework. _test_delete_in_thread / _test_delete_at_exit consume one of canna's capsules the
 * way a C++ framework does and call its deleter from a fresh native thread that holds no GIL, or
 * from a C atexit handler after the interpreter is gone.
 */
#include "native.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int has_view;
    int64_t dims[2 * CANNA_MAX_NDIM];
} TestCtx;

static void test_release(TestCtx *ctx)
{
    __atomic_add_fetch(&canna_counters.test_deleter_calls, 1, __ATOMIC_RELAXED);
    if (ctx && ctx->has_view && python_usable()) {
        PyGILState_STATE g = PyGILState_Ensure();
        PyBuffer_Release(&ctx->view);
        PyGILState_Release(g);
    }
    free(ctx);
}

static void test_deleter_legacy(DLManagedTensor *self)
{
    TestCtx *ctx = self->manager_ctx;
    free(self);
    test_release(ctx);
}

static void test_deleter_versioned(DLManagedTensorVersioned *self)
{
    TestCtx *ctx = self->manager_ctx;
    free(self);
    test_release(ctx);
}

static void test_destructor(PyObject *cap)
{
    const char *name = PyCapsule_GetName(cap);
    if (!name || strncmp(name, "used_", 5) == 0)
        return;
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    void *p = PyCapsule_GetPointer(cap, name);
    if (p) {
        if (strcmp(name, "dltensor_versioned") == 0) {
            DLManagedTensorVersioned *mt = p;
            if (mt->deleter)
                mt->deleter(mt);
        } else {
            DLManagedTensor *mt = p;
            if (mt->deleter)
                mt->deleter(mt);
        }
    } else {
        PyErr_WriteUnraisable(cap);
    }
    PyErr_Restore(et, ev, etb);
}

/* _test_capsule(data, shape, *, strides=None, dtype=(2, 32, 1), device=(1, 0), byte_offset=0,
 *               versioned=False, version=(1, 3), flags=0, null_deleter=False, address=None,
 *               null_shape=False, name=None)
 * `data` is any buffer object (kept alive until the deleter runs) or None; `address` overrides
 * the data pointer (0 = NULL). */
PyObject *py_test_capsule(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kw[] = {"data", "shape", "strides", "dtype", "device", "byte_offset", "versioned", "version",
                         "flags", "null_deleter", "address", "null_shape", "name", NULL};
    PyObject *data, *shape_t, *strides_t = Py_None, *address = Py_None;
    int code = kDLFloat, bits = 32, lanes = 1, dev_type = kDLCPU, dev_id = 0;
    unsigned long long byte_offset = 0, flags = 0;
    int versioned = 0, null_deleter = 0, null_shape = 0;
    unsigned int vmajor = CANNA_DLPACK_MAJOR, vminor = CANNA_DLPACK_MINOR;
    const char *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$O(iii)(ii)Kp(II)KpOpz", kw, &data, &shape_t, &strides_t,
                                     &code, &bits, &lanes, &dev_type, &dev_id, &byte_offset, &versioned, &vmajor,
                                     &vminor, &flags, &null_deleter, &address, &null_shape, &name))
        return NULL;
    if (!PyTuple_Check(shape_t)) {
        PyErr_SetString(PyExc_TypeError, "shape must be a tuple");
        return NULL;
    }
    int ndim = (int)PyTuple_GET_SIZE(shape_t);
    if (ndim > CANNA_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "too many dims");
        return NULL;
    }
    TestCtx *ctx = calloc(1, sizeof(TestCtx));
    if (!ctx)
        return PyErr_NoMemory();
    if (read_int64_tuple(shape_t, ctx->dims, ndim, "shape") < 0 ||
        (strides_t != Py_None && read_int64_tuple(strides_t, ctx->dims + ndim, ndim, "strides") < 0)) {
        free(ctx);
        return NULL;
    }
    void *ptr = NULL;
    if (data != Py_None) {
        if (PyObject_GetBuffer(data, &ctx->view, PyBUF_SIMPLE) < 0) {
            free(ctx);
            return NULL;
        }
        ctx->has_view = 1;
        ptr = ctx->view.buf;
    }
    if (address != Py_None) {
        ptr = (void *)(uintptr_t)PyLong_AsUnsignedLongLong(address);
        if (PyErr_Occurred()) {
            if (ctx->has_view)
                PyBuffer_Release(&ctx->view);
            free(ctx);
            return NULL;
        }
    }
    DLTensor *t;
    void *mt;
    if (versioned) {
        DLManagedTensorVersioned *v = calloc(1, sizeof(*v));
        v->version.major = vmajor;
        v->version.minor = vminor;
        v->flags = flags;
        v->manager_ctx = ctx;
        v->deleter = null_deleter ? NULL : test_deleter_versioned;
        t = &v->dl_tensor;
        mt = v;
    } else {
        DLManagedTensor *l = calloc(1, sizeof(*l));
        l->manager_ctx = ctx;
        l->deleter = null_deleter ? NULL : test_deleter_legacy;
        t = &l->dl_tensor;
        mt = l;
    }
    t->data = ptr;
    t->device.device_type = dev_type;
    t->device.device_id = dev_id;
    t->ndim = ndim;
    t->dtype.code = (uint8_t)code;
    t->dtype.bits = (uint8_t)bits;
    t->dtype.lanes = (uint16_t)lanes;
    t->shape = (null_shape || ndim == 0) ? NULL : ctx->dims;
    t->strides = strides_t == Py_None ? NULL : ctx->dims + ndim;
    t->byte_offset = byte_offset;
    static char *names[] = {"dltensor", "dltensor_versioned"};
    const char *cname = names[versioned];
    if (name) {
        /* capsule names must outlive the capsule: intern the few test names */
        static char custom[8][64];
        static int ncustom;
        int i;
        for (i = 0; i < ncustom; i++)
            if (strcmp(custom[i], name) == 0)
                break;
        if (i == ncustom && ncustom < 8)
            snprintf(custom[ncustom++], 64, "%s", name);
        cname = custom[i < 8 ? i : 7];
    }
    return PyCapsule_New(mt, cname, test_destructor);
}

/* ---- consumers that drop a canna export the way C++ frameworks do ---- */

typedef struct {
    void *mt;
    int versioned;
} Pending;

static void *drop_thread(void *arg)
{
    Pending *p = arg;
    if (p->versioned) {
        DLManagedTensorVersioned *mt = p->mt;
        mt->deleter(mt);
    } else {
        DLManagedTensor *mt = p->mt;
        mt->deleter(mt);
    }
    return NULL;
}

static int take_capsule(PyObject *cap, Pending *p)
{
    const char *name = PyCapsule_GetName(cap);
    if (!name)
        return -1;
    p->versioned = strcmp(name, "dltensor_versioned") == 0;
    if (!p->versioned && strcmp(name, "dltensor") != 0) {
        PyErr_SetString(PyExc_ValueError, "expected an unconsumed DLPack capsule");
        return -1;
    }
    p->mt = PyCapsule_GetPointer(cap, name);
    if (!p->mt)
        return -1;
    if (PyCapsule_SetName(cap, p->versioned ? "used_dltensor_versioned" : "used_dltensor") < 0)
        return -1;
    return 0;
}

/* _test_delete_in_thread(capsule): consume it, then call its deleter from a new native thread
 * while this thread has released the GIL (as torch, JAX and TF do). */
PyObject *py_test_call_deleter_in_thread(PyObject *self, PyObject *cap)
{
    (void)self;
    Pending p;
    if (take_capsule(cap, &p) < 0)
        return NULL;
    pthread_t th;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pthread_create(&th, NULL, drop_thread, &p);
    if (rc == 0)
        pthread_join(th, NULL);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_SetString(PyExc_RuntimeError, "pthread_create failed");
        return NULL;
    }
    Py_RETURN_NONE;
}

static Pending at_exit_pending[16];
static int n_at_exit;

static void run_at_exit(void)
{
    for (int i = 0; i < n_at_exit; i++)
        drop_thread(&at_exit_pending[i]);
    n_at_exit = 0;
}

/* _test_delete_at_exit(capsule): consume it now, call its deleter from a C atexit handler, which
 * runs after Py_FinalizeEx when the process exits normally. */
PyObject *py_test_delete_at_exit(PyObject *self, PyObject *cap)
{
    (void)self;
    static int registered;
    if (n_at_exit >= 16) {
        PyErr_SetString(PyExc_RuntimeError, "too many pending capsules");
        return NULL;
    }
    Pending p;
    if (take_capsule(cap, &p) < 0)
        return NULL;
    at_exit_pending[n_at_exit++] = p;
    if (!registered) {
        atexit(run_at_exit);
        registered = 1;
    }
    Py_RETURN_NONE;
}
