/* canna_dl._native: the DTypeBase, Storage and ArrayBase types.
 *
 * ArrayBase is the C part of canna_dl.DeviceArray: every field a kernel library needs to describe
 * the array to aclCreateTensor (data pointer, storage base + element offset, shape, strides in
 * elements, dtype with its aclDataType, device, stream, owner) is a C slot read without Python
 * code. Views are created only through array_new, which checks that every element lies inside the
 * storage, so no view can reach memory it does not own.
 */
#include "native.h"

#include <stdlib.h>
#include <string.h>
#include <structmember.h>

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                      */

int read_int64_tuple(PyObject *tup, int64_t *out, int n, const char *what)
{
    if (!PyTuple_Check(tup)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of ints, not %.100s", what, Py_TYPE(tup)->tp_name);
        return -1;
    }
    if (PyTuple_GET_SIZE(tup) != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd entries, expected %d", what, PyTuple_GET_SIZE(tup), n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(tup, i);
        int overflow = 0;
        long long v = PyLong_Check(o) ? PyLong_AsLongLongAndOverflow(o, &overflow) : -1;
        if (!PyLong_Check(o)) {
            PyErr_Format(PyExc_TypeError, "%s[%d] must be an int, not %.100s", what, i, Py_TYPE(o)->tp_name);
            return -1;
        }
        if (overflow) {
            PyErr_Format(PyExc_OverflowError, "%s[%d] does not fit in 64 bits", what, i);
            return -1;
        }
        if (v == -1 && PyErr_Occurred())
            return -1;
        out[i] = (int64_t)v;
    }
    return 0;
}

PyObject *int64_tuple(const int64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *o = PyLong_FromLongLong(v[i]);
        if (!o) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, o);
    }
    return t;
}

/* ------------------------------------------------------------------------------------------ */
/* DTypeBase                                                                                     */

static PyObject *dtype_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"name", "code", "bits", "acl", NULL};
    PyObject *name;
    int code, bits, acl;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Uiii", kw, &name, &code, &bits, &acl))
        return NULL;
    if (code < 0 || code > 255 || bits <= 0 || bits > 255 || bits % 8) {
        PyErr_Format(PyExc_ValueError, "invalid DLPack dtype code=%d bits=%d", code, bits);
        return NULL;
    }
    DTypeObject *self = (DTypeObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->code = (uint8_t)code;
    self->bits = (uint8_t)bits;
    self->lanes = 1;
    self->itemsize = bits / 8;
    self->acl = acl;
    Py_INCREF(name);
    self->name = name;
    return (PyObject *)self;
}

static void dtype_dealloc(DTypeObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    Py_XDECREF(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef dtype_members[] = {
    {"name", T_OBJECT, offsetof(DTypeObject, name), READONLY, "the dtype's name, e.g. 'float32'"},
    {"code", T_UBYTE, offsetof(DTypeObject, code), READONLY, "DLPack type code (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6)"},
    {"bits", T_UBYTE, offsetof(DTypeObject, bits), READONLY, "bits per element (DLPack DLDataType.bits)"},
    {"lanes", T_USHORT, offsetof(DTypeObject, lanes), READONLY, "DLPack vector lanes (always 1)"},
    {"itemsize", T_INT, offsetof(DTypeObject, itemsize), READONLY, "bytes per element"},
    {"acl", T_INT, offsetof(DTypeObject, acl), READONLY, "AscendCL aclDataType value (ACL_FLOAT 0, ...)"},
    {NULL},
};

PyTypeObject DType_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "canna_dl._native.DTypeBase",
    .tp_basicsize = sizeof(DTypeObject),
    .tp_dealloc = (destructor)dtype_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "C part of canna_dl.DType",
    .tp_members = dtype_members,
    .tp_new = dtype_new,
    .tp_weaklistoffset = offsetof(DTypeObject, weakreflist),
};

/* registry: (code, bits/8) -> dtype; codes 0..31, bytes 1..16 */
static DTypeObject *dtype_table[32][17];

int dtype_register(DTypeObject *dt)
{
    int nb = dt->bits / 8;
    if (dt->code >= 32 || nb > 16) {
        PyErr_SetString(PyExc_ValueError, "dtype outside the registry's range");
        return -1;
    }
    Py_INCREF(dt);
    Py_XDECREF(dtype_table[dt->code][nb]);
    dtype_table[dt->code][nb] = dt;
    return 0;
}

DTypeObject *dtype_lookup(uint8_t code, uint8_t bits)
{
    if (code >= 32 || bits % 8 || bits / 8 > 16)
        return NULL;
    return dtype_table[code][bits / 8];
}

/* ------------------------------------------------------------------------------------------ */
/* Storage                                                                                       */

StorageObject *storage_new(char *ptr, Py_ssize_t nbytes, int kind, PyObject *device)
{
    StorageObject *st = PyObject_New(StorageObject, &Storage_Type);
    if (!st)
        return NULL;
    st->ptr = ptr;
    st->nbytes = nbytes;
    st->kind = kind;
    st->readonly = 0;
    st->dl_device_type = kDLCPU;
    st->dl_device_id = 0;
    if (!device)
        device = Py_None;
    Py_INCREF(device);
    st->device = device;
    st->keep = NULL;
    Py_INCREF(Py_None);
    st->stream = Py_None;
    st->managed = NULL;
    st->managed_kind = MANAGED_NONE;
    st->has_view = 0;
    memset(&st->view, 0, sizeof(st->view));
    st->host_block = NULL;
    st->weakreflist = NULL;
    return st;
}

static PyObject *storage_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"ptr", "nbytes", "kind", "device", "keep", "readonly", NULL};
    unsigned long long ptr;
    Py_ssize_t nbytes;
    int kind = MEM_DEVICE, readonly = 0;
    PyObject *device = Py_None, *keep = NULL;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Kn|$iOOp", kw, &ptr, &nbytes, &kind, &device, &keep, &readonly))
        return NULL;
    if (nbytes < 0 || (kind != MEM_DEVICE && kind != MEM_HOST)) {
        PyErr_SetString(PyExc_ValueError, "Storage: nbytes must be >= 0 and kind 0 (device) or 1 (host)");
        return NULL;
    }
    StorageObject *st = storage_new((char *)(uintptr_t)ptr, nbytes, kind, device);
    if (!st)
        return NULL;
    st->readonly = readonly;
    Py_XINCREF(keep);
    st->keep = keep;
    if (kind == MEM_DEVICE)
        st->dl_device_type = canna_device_export_type;
    return (PyObject *)st;
}

static void storage_dealloc(StorageObject *st)
{
    if (st->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)st);
    /* the producer's deleter, exactly once, when the last view of its memory dies */
    if (st->managed) {
        void *m = st->managed;
        st->managed = NULL;
        if (st->managed_kind == MANAGED_VERSIONED) {
            DLManagedTensorVersioned *mt = m;
            if (mt->deleter) {
                mt->deleter(mt);
                COUNT(import_deleter_calls);
            } else {
                COUNT(import_null_deleters);
            }
        } else {
            DLManagedTensor *mt = m;
            if (mt->deleter) {
                mt->deleter(mt);
                COUNT(import_deleter_calls);
            } else {
                COUNT(import_null_deleters);
            }
        }
    }
    if (st->has_view) {
        st->has_view = 0;
        PyBuffer_Release(&st->view);
    }
    free(st->host_block);
    st->host_block = NULL;
    Py_CLEAR(st->keep);
    Py_CLEAR(st->stream);
    Py_CLEAR(st->device);
    PyObject_Free(st);
}

static int storage_host_accessible(StorageObject *st)
{
    return st->kind == MEM_HOST || canna_device_export_type == kDLCPU;
}

static int storage_getbuffer(StorageObject *st, Py_buffer *view, int flags)
{
    if (!storage_host_accessible(st)) {
        PyErr_SetString(PyExc_BufferError, "this storage is device memory (discrete memory model): copy it to the host first");
        view->obj = NULL;
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) && st->readonly) {
        PyErr_SetString(PyExc_BufferError, "the storage is read-only");
        view->obj = NULL;
        return -1;
    }
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)st, st->ptr ? st->ptr : empty, st->nbytes, st->readonly, flags);
}

static PyBufferProcs storage_as_buffer = {(getbufferproc)storage_getbuffer, NULL};

static PyObject *storage_get_ptr(StorageObject *st, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong((uintptr_t)st->ptr);
}

static PyObject *storage_get_dl_device(StorageObject *st, void *c)
{
    (void)c;
    return Py_BuildValue("(ii)", st->dl_device_type, st->dl_device_id);
}

static PyObject *storage_get_owner(StorageObject *st, void *c)
{
    (void)c;
    PyObject *o = st->keep ? st->keep : (PyObject *)st;
    Py_INCREF(o);
    return o;
}

static PyObject *storage_get_is_foreign(StorageObject *st, void *c)
{
    (void)c;
    return PyBool_FromLong(st->managed != NULL || st->has_view);
}

static PyObject *storage_get_stream(StorageObject *st, void *c)
{
    (void)c;
    Py_INCREF(st->stream);
    return st->stream;
}

static int storage_set_stream(StorageObject *st, PyObject *v, void *c)
{
    (void)c;
    if (!v)
        v = Py_None;
    Py_INCREF(v);
    Py_SETREF(st->stream, v);
    return 0;
}

static PyObject *storage_get_device(StorageObject *st, void *c)
{
    (void)c;
    Py_INCREF(st->device);
    return st->device;
}

static int storage_set_device(StorageObject *st, PyObject *v, void *c)
{
    (void)c;
    if (!v)
        v = Py_None;
    Py_INCREF(v);
    Py_SETREF(st->device, v);
    return 0;
}

static PyObject *storage_repr(StorageObject *st)
{
    return PyUnicode_FromFormat("<canna_dl Storage %s ptr=%p nbytes=%zd%s%s>",
                                st->kind == MEM_DEVICE ? "device" : "host", st->ptr, st->nbytes,
                                st->managed ? " dlpack" : (st->has_view ? " buffer" : ""),
                                st->readonly ? " read-only" : "");
}

static PyMemberDef storage_members[] = {
    {"nbytes", T_PYSSIZET, offsetof(StorageObject, nbytes), READONLY, "bytes"},
    {"kind", T_INT, offsetof(StorageObject, kind), READONLY, "0 = device memory, 1 = foreign host memory"},
    {"readonly", T_BOOL, offsetof(StorageObject, readonly), READONLY, NULL},
    {NULL},
};

static PyGetSetDef storage_getset[] = {
    {"ptr", (getter)storage_get_ptr, NULL, "lowest address (int)", NULL},
    {"dl_device", (getter)storage_get_dl_device, NULL, "(DLPack device type, id) the memory came from", NULL},
    {"owner", (getter)storage_get_owner, NULL, "the object keeping the memory alive", NULL},
    {"is_foreign", (getter)storage_get_is_foreign, NULL, "memory imported from another library", NULL},
    {"stream", (getter)storage_get_stream, (setter)storage_set_stream, "stream with pending writes, or None", NULL},
    {"device", (getter)storage_get_device, (setter)storage_set_device, "acl_rt.Device or None", NULL},
    {NULL},
};

PyTypeObject Storage_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "canna_dl._native.Storage",
    .tp_basicsize = sizeof(StorageObject),
    .tp_dealloc = (destructor)storage_dealloc,
    .tp_repr = (reprfunc)storage_repr,
    .tp_as_buffer = &storage_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A block of memory an array views, and what keeps it alive (internal).",
    .tp_members = storage_members,
    .tp_getset = storage_getset,
    .tp_new = storage_tp_new,
    .tp_weaklistoffset = offsetof(StorageObject, weakreflist),
};

/* ------------------------------------------------------------------------------------------ */
/* ArrayBase                                                                                     */

static int layout_flags(int ndim, const int64_t *shape, const int64_t *strides, Py_ssize_t size)
{
    int flags = AF_C_CONTIG | AF_F_CONTIG;
    if (size == 0)
        return flags;
    int64_t expect = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] == 1)
            continue;
        if (strides[i] < 0)
            flags |= AF_NEG;
        if (strides[i] != expect)
            flags &= ~AF_C_CONTIG;
        expect *= shape[i];
    }
    expect = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        if (strides[i] != expect)
            flags &= ~AF_F_CONTIG;
        expect *= shape[i];
    }
    return flags;
}

ArrayObject *array_new(PyTypeObject *cls, StorageObject *st, DTypeObject *dt, int ndim,
                       const int64_t *shape, const int64_t *strides, Py_ssize_t offset, int readonly)
{
    if (ndim < 0 || ndim > CANNA_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "arrays have at most %d dimensions, got %d", CANNA_MAX_NDIM, ndim);
        return NULL;
    }
    int64_t size = 1, lo = 0, hi = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            PyErr_Format(PyExc_ValueError, "negative dimension %lld in shape", (long long)shape[i]);
            return NULL;
        }
        if (__builtin_mul_overflow(size, shape[i], &size)) {
            PyErr_SetString(PyExc_OverflowError, "array size does not fit in 64 bits");
            return NULL;
        }
    }
    int64_t item = dt->itemsize;
    if (size > 0) {
        for (int i = 0; i < ndim; i++) {
            int64_t ext;
            if (shape[i] == 1)
                continue;
            if (__builtin_mul_overflow(shape[i] - 1, strides[i], &ext) ||
                (ext < 0 ? __builtin_add_overflow(lo, ext, &lo) : __builtin_add_overflow(hi, ext, &hi))) {
                PyErr_SetString(PyExc_OverflowError, "array extent does not fit in 64 bits");
                return NULL;
            }
        }
        int64_t first, last, endb;
        if (__builtin_add_overflow((int64_t)offset, lo, &first) || __builtin_add_overflow((int64_t)offset, hi, &last) ||
            __builtin_add_overflow(last, (int64_t)1, &endb) || __builtin_mul_overflow(endb, item, &endb)) {
            PyErr_SetString(PyExc_OverflowError, "array extent does not fit in 64 bits");
            return NULL;
        }
        if (first < 0 || endb > st->nbytes) {
            PyErr_Format(PyExc_ValueError,
                         "view out of bounds: elements [%lld, %lld] of %lld-byte items do not fit in a storage of %zd bytes",
                         (long long)first, (long long)last, (long long)item, st->nbytes);
            return NULL;
        }
    } else {
        int64_t ob;
        if (offset < 0 || __builtin_mul_overflow((int64_t)offset, item, &ob) || ob > st->nbytes) {
            PyErr_Format(PyExc_ValueError, "view offset %zd out of bounds of a %zd-byte storage", offset, st->nbytes);
            return NULL;
        }
    }
    ArrayObject *a = (ArrayObject *)cls->tp_alloc(cls, 0);
    if (!a)
        return NULL;
    a->shape = int64_tuple(shape, ndim);
    a->strides = a->shape ? int64_tuple(strides, ndim) : NULL;
    if (!a->strides) {
        Py_DECREF(a);
        return NULL;
    }
    Py_INCREF(st);
    a->storage = st;
    Py_INCREF(dt);
    a->dtype = dt;
    a->ndim = ndim;
    a->size = (Py_ssize_t)size;
    a->offset = offset;
    a->data = st->ptr ? st->ptr + offset * item : NULL;
    a->flags = layout_flags(ndim, shape, strides, a->size) | ((readonly || st->readonly) ? AF_READONLY : 0);
    return a;
}

/* shape and strides of `a` as C arrays (n = a->ndim entries each) */
int array_fill_c(ArrayObject *a, int64_t *shape, int64_t *strides)
{
    for (int i = 0; i < a->ndim; i++) {
        shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(a->shape, i));
        strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(a->strides, i));
    }
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *array_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    PyErr_Format(PyExc_TypeError, "%.100s objects are created with canna_dl.asarray(), canna_dl.from_dlpack() "
                 "or canna_dl.empty()", type->tp_name);
    return NULL;
}

static void array_dealloc(ArrayObject *a)
{
    if (a->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)a);
    Py_XDECREF(a->shape);
    Py_XDECREF(a->strides);
    Py_XDECREF(a->dtype);
    Py_XDECREF(a->storage);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

/* a._view(offset, shape, strides, dtype=None, readonly=False): a view of the same storage */
static PyObject *array_view(ArrayObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "_view(offset, shape, strides, dtype=None, readonly=False)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[0]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (!PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "shape must be a tuple");
        return NULL;
    }
    int ndim = (int)PyTuple_GET_SIZE(args[1]);
    if (ndim > CANNA_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "arrays have at most %d dimensions, got %d", CANNA_MAX_NDIM, ndim);
        return NULL;
    }
    int64_t shape[CANNA_MAX_NDIM], strides[CANNA_MAX_NDIM];
    if (read_int64_tuple(args[1], shape, ndim, "shape") < 0 || read_int64_tuple(args[2], strides, ndim, "strides") < 0)
        return NULL;
    DTypeObject *dt = self->dtype;
    if (nargs > 3 && args[3] != Py_None) {
        if (!PyObject_TypeCheck(args[3], &DType_Type)) {
            PyErr_SetString(PyExc_TypeError, "dtype must be a canna_dl.DType");
            return NULL;
        }
        dt = (DTypeObject *)args[3];
    }
    int ro = (self->flags & AF_READONLY) != 0;
    if (nargs > 4) {
        int r = PyObject_IsTrue(args[4]);
        if (r < 0)
            return NULL;
        ro = ro || r;
    }
    return (PyObject *)array_new(Py_TYPE(self), self->storage, dt, ndim, shape, strides, offset, ro);
}

static PyObject *array_get_ptr(ArrayObject *a, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong((uintptr_t)a->data);
}

static PyObject *array_get_base_ptr(ArrayObject *a, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong((uintptr_t)a->storage->ptr);
}

static PyObject *array_get_nbytes(ArrayObject *a, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(a->size * a->dtype->itemsize);
}

static PyObject *array_get_itemsize(ArrayObject *a, void *c)
{
    (void)c;
    return PyLong_FromLong(a->dtype->itemsize);
}

static PyObject *array_get_storage_size(ArrayObject *a, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(a->storage->nbytes / a->dtype->itemsize);
}

static PyObject *array_get_device(ArrayObject *a, void *c)
{
    (void)c;
    Py_INCREF(a->storage->device);
    return a->storage->device;
}

static PyObject *array_get_owner(ArrayObject *a, void *c)
{
    return storage_get_owner(a->storage, c);
}

static PyObject *array_get_stream(ArrayObject *a, void *c)
{
    (void)c;
    Py_INCREF(a->storage->stream);
    return a->storage->stream;
}

static int array_set_stream(ArrayObject *a, PyObject *v, void *c)
{
    return storage_set_stream(a->storage, v, c);
}

static PyObject *array_get_readonly(ArrayObject *a, void *c)
{
    (void)c;
    return PyBool_FromLong(a->flags & AF_READONLY);
}

static PyMemberDef array_members[] = {
    {"shape", T_OBJECT, offsetof(ArrayObject, shape), READONLY, "tuple of ints"},
    {"strides", T_OBJECT, offsetof(ArrayObject, strides), READONLY, "tuple of ints, in elements (not bytes)"},
    {"dtype", T_OBJECT, offsetof(ArrayObject, dtype), READONLY, "canna_dl.DType"},
    {"ndim", T_INT, offsetof(ArrayObject, ndim), READONLY, "number of dimensions"},
    {"size", T_PYSSIZET, offsetof(ArrayObject, size), READONLY, "number of elements"},
    {"offset", T_PYSSIZET, offsetof(ArrayObject, offset), READONLY,
     "element offset of element [0,...,0] from base_ptr (aclCreateTensor's offset)"},
    {"storage", T_OBJECT, offsetof(ArrayObject, storage), READONLY, "the Storage this array views (internal)"},
    {"_flags", T_INT, offsetof(ArrayObject, flags), READONLY, "layout flag bits (internal)"},
    {NULL},
};

static PyGetSetDef array_getset[] = {
    {"ptr", (getter)array_get_ptr, NULL, "address of element [0, ..., 0] (int; 0 for an empty array)", NULL},
    {"base_ptr", (getter)array_get_base_ptr, NULL, "address of the storage the array views (aclCreateTensor's storage base)", NULL},
    {"nbytes", (getter)array_get_nbytes, NULL, "size * itemsize, in bytes", NULL},
    {"itemsize", (getter)array_get_itemsize, NULL, "bytes per element", NULL},
    {"storage_size", (getter)array_get_storage_size, NULL, "elements in the storage (aclCreateTensor's storageDims)", NULL},
    {"device", (getter)array_get_device, NULL, "the acl_rt.Device the array is on", NULL},
    {"owner", (getter)array_get_owner, NULL, "the object keeping the memory alive (a DeviceBuffer, or the imported producer's storage)", NULL},
    {"stream", (getter)array_get_stream, (setter)array_set_stream,
     "the acl_rt.Stream whose pending work last wrote this memory, or None when nothing is pending", NULL},
    {"readonly", (getter)array_get_readonly, NULL, "whether writing through this array is forbidden", NULL},
    {NULL},
};

static PyMethodDef array_methods[] = {
    {"_view", (PyCFunction)(void (*)(void))array_view, METH_FASTCALL,
     "_view(offset, shape, strides, dtype=None, readonly=False) -> a view of the same storage (bounds checked)"},
    {NULL},
};

PyTypeObject Array_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "canna_dl._native.ArrayBase",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_dealloc = (destructor)array_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "C part of canna_dl.DeviceArray",
    .tp_methods = array_methods,
    .tp_members = array_members,
    .tp_getset = array_getset,
    .tp_new = array_tp_new,
    .tp_weaklistoffset = offsetof(ArrayObject, weakreflist),
};
