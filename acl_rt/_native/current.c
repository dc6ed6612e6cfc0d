/* acl_rt._native: the current-stream epoch.
 *
 * acl_rt.current_stream() answers from the calling thread's state (its current device, its
 * `with stream:` stacks, its current context) and the runtime's (initialized, the session's
 * generation, which streams are destroyed). Every change of any of these bumps one process-wide
 * counter (acl_rt._runtime.current_changed()). A C caller that resolves the current stream often
 * (kernels._native's per-call fast paths) remembers, per thread, the stream it resolved and the
 * epoch it resolved it at, and uses it while the epoch has not moved: no Python runs on that path.
 *
 * The counter is read through the capsule "acl_rt._native.current_epoch" (a const uint64_t *,
 * read with an acquire load); it starts at 1, so a thread's zeroed cache never matches.
 */
#include "current.h"

static uint64_t g_current_epoch = 1;

static PyObject *mod_current_changed(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    __atomic_add_fetch(&g_current_epoch, 1, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyObject *mod_current_epoch(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromUnsignedLongLong(__atomic_load_n(&g_current_epoch, __ATOMIC_ACQUIRE));
}

static PyMethodDef current_methods[] = {
    {"current_changed", mod_current_changed, METH_NOARGS,
     "current_changed(): something acl_rt.current_stream() depends on changed (bumps the epoch)"},
    {"current_epoch", mod_current_epoch, METH_NOARGS, "current_epoch() -> int: the current-stream epoch"},
    {NULL, NULL, 0, NULL},
};

int current_add_to_module(PyObject *m)
{
    if (PyModule_AddFunctions(m, current_methods) < 0)
        return -1;
    PyObject *cap = PyCapsule_New(&g_current_epoch, "acl_rt._native.current_epoch", NULL);
    if (!cap)
        return -1;
    if (PyModule_AddObject(m, "current_epoch_capsule", cap) < 0) {
        Py_DECREF(cap);
        return -1;
    }
    return 0;
}
