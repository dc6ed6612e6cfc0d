/* kernels._native: the hot path of canna's kernel library in C.
 *
 * A Plan is one cached aclnn call: a *repeatable* aclOpExecutor made by phase 1
 * (aclnnXxxGetWorkspaceSize + aclSetAclOpExecutorRepeatable) for one signature (op, dtypes,
 * shapes, strides, parameters), the aclTensor descriptors it was made from, and phase 2 (aclnnXxx).
 * Plan.launch(stream, workspace, *addresses) swaps the operands' addresses in
 * (aclSetInputTensorAddr / aclSetOutputTensorAddr, skipped when unchanged since the last launch)
 * and runs phase 2 on the stream: one Python-to-C call instead of four or five cffi calls. The
 * whole launch holds the GIL, so two threads sharing a plan cannot interleave their address
 * swaps; the wait of launch_sync releases it (a host function queued on the stream may need it).
 *
 * The C functions are taken from the loaded libraries by address (cffi gives them), so this
 * module knows nothing of which backend is loaded (docs/DESIGN.md §1). A failing call raises
 * through a Python callback that builds acl_rt's exception from the code and the runtime's
 * recent error message.
 */
#include "native.h"

#include <string.h>

#define SYNC_SLICE_MS 200
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046

typedef int32_t (*set_addr_fn)(void *executor, size_t index, void *tensor, void *addr);
typedef int32_t (*run_fn)(void *workspace, uint64_t workspace_size, void *executor, void *stream);
typedef int32_t (*destroy_fn)(void *executor);
typedef int32_t (*sync_fn)(void *stream, int32_t timeout_ms);
typedef int32_t (*query_fn)(void *stream, int32_t *status);   /* aclrtStreamQuery (aclrtStreamStatus) */
typedef int32_t (*waited_fn)(int32_t waited, int32_t *previous);   /* aclsimSetLaunchWaited */
#define ACL_STREAM_STATUS_COMPLETE 0

static set_addr_fn g_set_in, g_set_out;
static destroy_fn g_destroy;
static sync_fn g_sync;
static query_fn g_query;
static waited_fn g_waited;   /* the simulator's aclsimSetLaunchWaited; NULL on a real install */
static PyObject *g_raise;   /* raise_error(code, api): raises the acl_rt exception */
static uint64_t g_launches; /* statistics (tests, benchmarks) */
static uint64_t g_swaps;

struct PlanObject {
    PyObject_HEAD
    void *executor;         /* NULL once closed */
    run_fn run;
    int nin, nout;
    void *tensors[PLAN_MAX_TENSORS];   /* aclTensor handles: inputs, then outputs */
    void *cur[PLAN_MAX_TENSORS];       /* the address each one holds now */
    uint64_t ws_size;
    int repeatable;         /* 0: single-use, consumed by its one launch */
    PyObject *name;         /* "aclnnAdd" (str) */
    PyObject *keep;         /* descriptors (cffi objects destroying themselves) and metadata */
    PyObject *meta;         /* anything the Python side attaches (result dtype, shape, ...) */
};

static int as_ptr(PyObject *o, void **out, const char *what)
{
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s must be an address (int)", what);
        return -1;
    }
    *out = (void *)(uintptr_t)v;
    return 0;
}

static PyObject *raise_code(int32_t code, const char *api)
{
    if (!g_raise) {
        PyErr_Format(PyExc_RuntimeError, "%s failed with code %d", api, (int)code);
        return NULL;
    }
    PyObject *r = PyObject_CallFunction(g_raise, "is", (int)code, api);
    if (r) {   /* the callback must raise; be safe if it did not */
        Py_DECREF(r);
        PyErr_Format(PyExc_RuntimeError, "%s failed with code %d", api, (int)code);
    }
    return NULL;
}

/* Plan(executor, run, nin, nout, tensors, addresses, ws_size, name, keep, repeatable) */
static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *ex_o, *run_o, *tensors, *addrs, *name, *keep;
    int nin, nout, repeatable;
    unsigned long long ws;
    static char *kw[] = {"executor", "run", "nin", "nout", "tensors", "addresses", "ws_size", "name", "keep",
                         "repeatable", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOiiOOKUOp", kw, &ex_o, &run_o, &nin, &nout, &tensors, &addrs,
                                     &ws, &name, &keep, &repeatable))
        return NULL;
    if (nin < 0 || nout < 0 || nin + nout > PLAN_MAX_TENSORS) {
        PyErr_Format(PyExc_ValueError, "Plan: %d inputs + %d outputs (at most %d tensors)", nin, nout, PLAN_MAX_TENSORS);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(tensors, "Plan: tensors must be a sequence of addresses");
    if (!seq)
        return NULL;
    PyObject *aseq = PySequence_Fast(addrs, "Plan: addresses must be a sequence of addresses");
    if (!aseq) {
        Py_DECREF(seq);
        return NULL;
    }
    if (PySequence_Fast_GET_SIZE(seq) != nin + nout || PySequence_Fast_GET_SIZE(aseq) != nin + nout) {
        PyErr_Format(PyExc_ValueError, "Plan: %zd tensor handles and %zd addresses for %d inputs + %d outputs",
                     PySequence_Fast_GET_SIZE(seq), PySequence_Fast_GET_SIZE(aseq), nin, nout);
        Py_DECREF(seq);
        Py_DECREF(aseq);
        return NULL;
    }
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(seq);
        Py_DECREF(aseq);
        return NULL;
    }
    void *fn = NULL;
    int bad = as_ptr(ex_o, &self->executor, "executor") || as_ptr(run_o, &fn, "run");
    self->run = (run_fn)fn;
    /* cur: the addresses the descriptors were made with (phase 1 saw them) */
    for (int i = 0; !bad && i < nin + nout; i++)
        bad = as_ptr(PySequence_Fast_GET_ITEM(seq, i), &self->tensors[i], "tensor handle") ||
              as_ptr(PySequence_Fast_GET_ITEM(aseq, i), &self->cur[i], "address");
    Py_DECREF(seq);
    Py_DECREF(aseq);
    if (bad) {
        self->executor = NULL;   /* the caller still owns it */
        Py_DECREF(self);
        return NULL;
    }
    self->repeatable = repeatable;
    self->nin = nin;
    self->nout = nout;
    self->ws_size = ws;
    Py_INCREF(name);
    self->name = name;
    Py_INCREF(keep);
    self->keep = keep;
    Py_INCREF(Py_None);
    self->meta = Py_None;
    return (PyObject *)self;
}

static void plan_close_executor(PlanObject *self)
{
    void *ex = self->executor;
    self->executor = NULL;
    if (ex && g_destroy)
        (void)g_destroy(ex);   /* never raises: a failure leaks one executor */
}

static void plan_dealloc(PlanObject *self)
{
    plan_close_executor(self);
    Py_XDECREF(self->name);
    Py_XDECREF(self->keep);   /* descriptors die after the executor */
    Py_XDECREF(self->meta);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* wait for the stream in slices with the GIL released (Ctrl-C is delivered between slices) */
static int do_sync(void *stream)
{
    /* work that has already run (a small or waited task runs on the calling thread): the
     * synchronize only reports the stream's errors and returns at once, so the GIL is kept */
    int32_t status;
    int done = g_query && g_query(stream, &status) == 0 && status == ACL_STREAM_STATUS_COMPLETE;
    for (;;) {
        int32_t rc;
        if (done) {
            rc = g_sync(stream, SYNC_SLICE_MS);
            done = 0;
        } else {
            Py_BEGIN_ALLOW_THREADS
            rc = g_sync(stream, SYNC_SLICE_MS);
            Py_END_ALLOW_THREADS
        }
        if (rc == 0)
            return 0;
        if (rc != ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) {
            raise_code(rc, "aclrtSynchronizeStreamWithTimeout");
            return -1;
        }
        if (PyErr_CheckSignals())
            return -1;
    }
}

int plan_sync(void *stream)
{
    return do_sync(stream);
}

int plan_memo_ok(PlanObject *self, int n, uint64_t ws_cap)
{
    return self->executor && self->repeatable && self->ws_size <= ws_cap && self->nin + self->nout == n;
}

int plan_fast_ok(PlanObject *self, int n)
{
    return self->executor && self->repeatable && self->ws_size == 0 && self->nin + self->nout == n;
}

int plan_launch_waited(int on)
{
    int32_t prev = 0;
    if (g_waited)
        g_waited(on, &prev);
    return prev;
}

/* swap addresses and run phase 2 (then wait, with sync: the launch is marked waited for, so the
 * simulator runs it on this thread when the stream is idle); 0 or -1 with an exception set */
int plan_launch_addrs(PlanObject *self, void *stream, void *ws, void *const *addr, int n, int sync)
{
    if (n != self->nin + self->nout) {
        PyErr_Format(PyExc_TypeError, "Plan.launch(stream, workspace, *addresses): %U takes %d addresses, got %d",
                     self->name, self->nin + self->nout, n);
        return -1;
    }
    if (!self->executor) {
        PyErr_Format(PyExc_RuntimeError, "Plan.launch: the plan of %U was closed (or was single-use and ran)",
                     self->name);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (addr[i] == self->cur[i])
            continue;
        int out = i >= self->nin;
        int32_t rc = (out ? g_set_out : g_set_in)(self->executor, (size_t)(out ? i - self->nin : i), self->tensors[i],
                                                  addr[i]);
        if (rc) {
            self->cur[i] = (void *)(uintptr_t)1;
            raise_code(rc, out ? "aclSetOutputTensorAddr" : "aclSetInputTensorAddr");
            return -1;
        }
        self->cur[i] = addr[i];
        g_swaps++;
    }
    void *ex = self->executor;
    if (!self->repeatable)
        self->executor = NULL;   /* phase 2 consumes a single-use executor, even when it fails */
    int waited = sync ? plan_launch_waited(1) : 0;
    int32_t rc = self->run(ws, self->ws_size, ex, stream);
    if (sync && !waited)
        plan_launch_waited(0);
    if (rc) {
        const char *api = PyUnicode_AsUTF8(self->name);
        raise_code(rc, api ? api : "aclnn");
        return -1;
    }
    g_launches++;
    return sync ? do_sync(stream) : 0;
}

static int plan_args_launch(PlanObject *self, PyObject *const *args, Py_ssize_t nargs, int sync)
{
    int n = self->nin + self->nout;
    if (nargs != 2 + n) {
        PyErr_Format(PyExc_TypeError, "Plan.launch(stream, workspace, *addresses): %U takes %d addresses, got %zd",
                     self->name, n, nargs - 2);
        return -1;
    }
    void *stream, *ws, *addr[PLAN_MAX_TENSORS];
    if (as_ptr(args[0], &stream, "stream") || as_ptr(args[1], &ws, "workspace"))
        return -1;
    for (int i = 0; i < n; i++)
        if (as_ptr(args[2 + i], &addr[i], "address"))
            return -1;
    return plan_launch_addrs(self, stream, ws, addr, n, sync);
}

static PyObject *plan_launch(PlanObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (plan_args_launch(self, args, nargs, 0))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *plan_launch_sync(PlanObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (plan_args_launch(self, args, nargs, 1))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *plan_close(PlanObject *self, PyObject *unused)
{
    (void)unused;
    plan_close_executor(self);
    Py_RETURN_NONE;
}

/* raw(): (executor, phase-2 function, nin, nout, tensor handles) as addresses: for a native
 * framework op that launches the executor from C itself (canna_dl.jax's XLA FFI handler,
 * canna_dl.tf's CannaCall); the plan must stay alive and unused elsewhere (kernels._core's
 * capture_plans gives such plans) */
static PyObject *plan_raw(PlanObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->executor || !self->repeatable) {
        PyErr_Format(PyExc_RuntimeError, "Plan.raw: the plan of %U is closed or single-use", self->name);
        return NULL;
    }
    PyObject *t = PyTuple_New(self->nin + self->nout);
    if (!t)
        return NULL;
    for (int i = 0; i < self->nin + self->nout; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->tensors[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return Py_BuildValue("KKiiN", (unsigned long long)(uintptr_t)self->executor,
                         (unsigned long long)(uintptr_t)self->run, self->nin, self->nout, t);
}

static PyObject *plan_get_closed(PlanObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->executor == NULL);
}

static PyObject *plan_get_nin(PlanObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(self->nin);
}

static PyObject *plan_get_ws(PlanObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(self->ws_size);
}

static PyObject *plan_get_repeatable(PlanObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->repeatable);
}

static PyObject *plan_get_name(PlanObject *self, void *c)
{
    (void)c;
    Py_INCREF(self->name);
    return self->name;
}

static PyObject *plan_get_meta(PlanObject *self, void *c)
{
    (void)c;
    Py_INCREF(self->meta);
    return self->meta;
}

static int plan_set_meta(PlanObject *self, PyObject *v, void *c)
{
    (void)c;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete meta");
        return -1;
    }
    Py_INCREF(v);
    Py_SETREF(self->meta, v);
    return 0;
}

static PyObject *plan_repr(PlanObject *self)
{
    return PyUnicode_FromFormat("<kernels Plan %U: %d inputs, %d outputs, workspace %llu bytes%s>", self->name,
                                self->nin, self->nout, (unsigned long long)self->ws_size,
                                self->executor ? "" : " (closed)");
}

static PyMethodDef plan_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))plan_launch, METH_FASTCALL,
     "launch(stream, workspace, *addresses): set the operands' addresses, run phase 2 on the stream"},
    {"launch_sync", (PyCFunction)(void (*)(void))plan_launch_sync, METH_FASTCALL,
     "launch_sync(stream, workspace, *addresses): launch, then wait for the stream (GIL released)"},
    {"close", (PyCFunction)plan_close, METH_NOARGS, "destroy the executor now"},
    {"raw", (PyCFunction)plan_raw, METH_NOARGS, "(executor, run, nin, nout, tensor handles) as addresses"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef plan_getset[] = {
    {"closed", (getter)plan_get_closed, NULL, "whether the executor was destroyed", NULL},
    {"ws_size", (getter)plan_get_ws, NULL, "workspace bytes phase 2 needs", NULL},
    {"nin", (getter)plan_get_nin, NULL, "the number of input addresses (the outputs' follow)", NULL},
    {"repeatable", (getter)plan_get_repeatable, NULL, "whether the executor can be launched again", NULL},
    {"name", (getter)plan_get_name, NULL, "the aclnn function it runs", NULL},
    {"meta", (getter)plan_get_meta, (setter)plan_set_meta, "data the Python side attaches", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Plan_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kernels._native.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_repr = (reprfunc)plan_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A cached aclnn call: a repeatable executor and its descriptors (internal)",
    .tp_methods = plan_methods,
    .tp_getset = plan_getset,
    .tp_new = plan_new,
};

/* configure(set_input_addr, set_output_addr, destroy_executor, sync_stream_with_timeout, stream_query,
 *           set_launch_waited (0: none), raise_error) */
static PyObject *py_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "configure(set_in, set_out, destroy, sync, query, waited, raise_error)");
        return NULL;
    }
    void *p[6];
    for (int i = 0; i < 6; i++)
        if (as_ptr(args[i], &p[i], "function address"))
            return NULL;
    if (!PyCallable_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "configure: raise_error must be callable");
        return NULL;
    }
    g_set_in = (set_addr_fn)p[0];
    g_set_out = (set_addr_fn)p[1];
    g_destroy = (destroy_fn)p[2];
    g_sync = (sync_fn)p[3];
    g_query = (query_fn)p[4];
    g_waited = (waited_fn)p[5];
    Py_INCREF(args[6]);
    Py_XSETREF(g_raise, args[6]);
    Py_RETURN_NONE;
}

static PyObject *py_sync(PyObject *self, PyObject *arg)
{
    (void)self;
    void *stream;
    if (as_ptr(arg, &stream, "stream"))
        return NULL;
    if (!g_sync) {
        PyErr_SetString(PyExc_RuntimeError, "kernels._native is not configured");
        return NULL;
    }
    if (do_sync(stream))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("{sKsKsK}", "launches", (unsigned long long)g_launches, "address_swaps",
                         (unsigned long long)g_swaps, "offload_fast_hits", (unsigned long long)g_offload_hits);
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_FASTCALL,
     "configure(set_in, set_out, destroy, sync, query, waited, raise_error): function addresses from the loaded libraries"},
    {"sync", py_sync, METH_O, "sync(stream): wait for the stream (GIL released, interruptible)"},
    {"stats", py_stats, METH_NOARGS, "launch statistics"},
    {"stream_configure", (PyCFunction)(void (*)(void))py_stream_configure, METH_FASTCALL,
     "stream_configure(fast_stream, epoch_capsule): how the fast paths resolve a call's current stream"},
    {"fast_configure", (PyCFunction)(void (*)(void))py_fast_configure, METH_FASTCALL,
     "fast_configure(tensor_type, exchange_api, empty_like, empty, dtypes, cache): the PyTorch fast path"},
    {"fast", (PyCFunction)(void (*)(void))py_fast, METH_FASTCALL,
     "fast(op, stream, x, y, p): a cached elementwise call on torch tensors, None, or the cache key (bytes)"},
    {"memo_configure", (PyCFunction)(void (*)(void))py_memo_configure, METH_FASTCALL,
     "memo_configure(cache, dtype_type): the memo fast path's cache"},
    {"memo", (PyCFunction)(void (*)(void))py_memo, METH_FASTCALL,
     "memo(op, stream, *args): a registry op's call replayed from its recorded launches, None, or the key"},
    {"offload_configure", (PyCFunction)(void (*)(void))py_offload_configure, METH_FASTCALL,
     "offload_configure(autocast_on, functorch_active, lib, state): offload_fast's guards"},
    {"offload_fast", (PyCFunction)(void (*)(void))py_offload_fast, METH_FASTCALL,
     "offload_fast(entry, args, kwargs, ops, ocache): offload()'s cached call of a registry TorchFn, None, or the key"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kernels._native", "The C hot path of canna's kernel library (internal).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (PyType_Ready(&Plan_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    Py_INCREF(&Plan_Type);
    if (PyModule_AddObject(m, "Plan", (PyObject *)&Plan_Type) < 0) {
        Py_DECREF(&Plan_Type);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MAX_TENSORS", PLAN_MAX_TENSORS);
    PyObject *cap = fast_api_capsule();
    if (!cap || PyModule_AddObject(m, "fast_api", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
