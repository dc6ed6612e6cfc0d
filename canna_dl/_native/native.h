/* canna_dl._native: shared declarations of the extension's C files.
 *
 * Objects:
 *   DTypeBase   an element type: DLPack (code, bits, lanes), itemsize, aclDataType code
 *   Storage     a block of memory and what keeps it alive (a DeviceBuffer, a foreign DLPack managed
 *               tensor whose deleter it calls exactly once, a Py_buffer, or an aligned host block),
 *               the device it is on, and the stream whose pending work last wrote it
 *   ArrayBase   a strided view of a Storage (canna_dl.DeviceArray derives from it)
 */
#ifndef CANNA_DL_NATIVE_H
#define CANNA_DL_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "dlpack_abi.h"

#define CANNA_HIDDEN __attribute__((visibility("hidden")))
#define CANNA_MAX_NDIM 64
#define CANNA_ALIGN 64

/* Storage.kind */
enum { MEM_DEVICE = 0, MEM_HOST = 1 };
/* Storage.managed_kind */
enum { MANAGED_NONE = 0, MANAGED_LEGACY = 1, MANAGED_VERSIONED = 2 };
/* ArrayBase.flags */
enum {
    AF_READONLY = 1,
    AF_C_CONTIG = 2,   /* compact row-major (size-1 dims may have any stride) */
    AF_NEG = 4,        /* some dim of extent > 1 has a negative stride */
    AF_F_CONTIG = 8,
};

typedef struct {
    PyObject_HEAD
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
    int32_t itemsize;
    int32_t acl;          /* aclDataType, -1 when AscendCL has none */
    PyObject *name;       /* str */
    PyObject *weakreflist;
} DTypeObject;

typedef struct {
    PyObject_HEAD
    char *ptr;                 /* lowest address (NULL for empty storage) */
    Py_ssize_t nbytes;
    int kind;                  /* MEM_DEVICE / MEM_HOST */
    int readonly;
    int32_t dl_device_type;    /* where the memory came from (DLPack numbering) */
    int32_t dl_device_id;
    PyObject *device;          /* acl_rt.Device, or None */
    PyObject *keep;            /* owner object kept alive (DeviceBuffer, exporter, ...) or NULL */
    PyObject *stream;          /* acl_rt.Stream with pending writes, or None */
    void *managed;             /* foreign DLManagedTensor[Versioned] taken over */
    int managed_kind;
    int has_view;
    Py_buffer view;
    void *host_block;          /* aligned host memory owned by this storage */
    PyObject *weakreflist;
} StorageObject;

typedef struct {
    PyObject_HEAD
    char *data;                /* address of element [0, ..., 0] (NULL when size == 0 and no storage) */
    StorageObject *storage;
    DTypeObject *dtype;
    PyObject *shape;           /* tuple of int */
    PyObject *strides;         /* tuple of int, in elements */
    Py_ssize_t offset;         /* data == storage->ptr + offset * itemsize */
    Py_ssize_t size;
    int ndim;
    int flags;
    PyObject *weakreflist;
} ArrayObject;

extern CANNA_HIDDEN PyTypeObject DType_Type;
extern CANNA_HIDDEN PyTypeObject Storage_Type;
extern CANNA_HIDDEN PyTypeObject Array_Type;

/* counters (atomic) */
typedef struct {
    uint64_t exports;             /* managed tensors canna created for consumers */
    uint64_t export_deleter_calls;/* canna's deleter ran (each export exactly once) */
    uint64_t export_refs_leaked;  /* deleter ran with no usable interpreter: owner reference leaked */
    uint64_t imports;             /* foreign managed tensors canna took ownership of */
    uint64_t import_deleter_calls;/* producer deleters canna called */
    uint64_t import_null_deleters;/* taken-over tensors that had no deleter */
    uint64_t test_deleter_calls;  /* deleter of capsules made by _test_capsule */
} CannaCounters;
extern CANNA_HIDDEN CannaCounters canna_counters;
#define COUNT(field) __atomic_add_fetch(&canna_counters.field, 1, __ATOMIC_RELAXED)

/* dtype registry: (code, bits) -> DTypeObject (borrowed from the registry dict) */
CANNA_HIDDEN DTypeObject *dtype_lookup(uint8_t code, uint8_t bits);
CANNA_HIDDEN int dtype_register(DTypeObject *dt);

/* the device to attach host-memory imports to (unified model), or None */
extern CANNA_HIDDEN PyObject *canna_host_device;
/* DLPack device type canna's device memory is exported as (kDLCPU in the unified model) */
extern CANNA_HIDDEN int32_t canna_device_export_type;

/* objects */
CANNA_HIDDEN StorageObject *storage_new(char *ptr, Py_ssize_t nbytes, int kind, PyObject *device);
CANNA_HIDDEN ArrayObject *array_new(PyTypeObject *cls, StorageObject *st, DTypeObject *dt, int ndim,
                                    const int64_t *shape, const int64_t *strides, Py_ssize_t offset, int readonly);
CANNA_HIDDEN int array_fill_c(ArrayObject *a, int64_t *shape, int64_t *strides);

/* DLPack exchange (exchange.c) */
CANNA_HIDDEN PyObject *py_export_capsule(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
CANNA_HIDDEN PyObject *py_export_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
CANNA_HIDDEN PyObject *py_export_exchange(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
CANNA_HIDDEN PyObject *py_import_capsule(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
CANNA_HIDDEN PyObject *py_import_exchange(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
CANNA_HIDDEN PyObject *py_import_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
CANNA_HIDDEN PyObject *py_capsule_info(PyObject *self, PyObject *arg);
CANNA_HIDDEN PyObject *py_exchange_api_info(PyObject *self, PyObject *arg);

/* copies (copy.c) */
CANNA_HIDDEN PyObject *py_strided_copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* test helpers (testing.c) */
CANNA_HIDDEN PyObject *py_test_capsule(PyObject *self, PyObject *args, PyObject *kwargs);
CANNA_HIDDEN PyObject *py_test_call_deleter_in_thread(PyObject *self, PyObject *arg);
CANNA_HIDDEN PyObject *py_test_delete_at_exit(PyObject *self, PyObject *arg);

/* helpers */
CANNA_HIDDEN int read_int64_tuple(PyObject *tup, int64_t *out, int n, const char *what);
CANNA_HIDDEN PyObject *int64_tuple(const int64_t *v, int n);
CANNA_HIDDEN int python_usable(void);

/* interpreter shutdown (exchange.c) */
CANNA_HIDDEN PyObject *py_begin_shutdown(PyObject *self, PyObject *unused);
CANNA_HIDDEN int shutdown_init(void);

#endif
