/* kernels._native: declarations shared by the extension's C files (internal). */
#ifndef CANNA_KERNELS_NATIVE_H
#define CANNA_KERNELS_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define PLAN_MAX_TENSORS 64

typedef struct PlanObject PlanObject;
extern PyTypeObject Plan_Type;

/* set the addresses and run phase 2 on `stream`, then (sync) wait for it; 0 or -1 with an
 * exception set */
int plan_launch_addrs(PlanObject *plan, void *stream, void *ws, void *const *addrs, int n, int sync);
/* 1 when the plan takes n addresses and needs no workspace (what the fast path can run) */
int plan_fast_ok(PlanObject *plan, int n);
/* 1 when the plan takes n addresses and needs at most ws_cap workspace bytes (the memo path) */
int plan_memo_ok(PlanObject *plan, int n, uint64_t ws_cap);
/* mark this thread's launches waited for (the simulator runs them on it when the stream is idle);
 * returns the setting it replaces */
int plan_launch_waited(int on);
/* wait for the stream (GIL released, interruptible); 0 or -1 with an exception set */
int plan_sync(void *stream);

/* fast.c */
/* a fast path's stream argument: a handle (int) or the call's API name (str: the thread's current
 * stream, remembered while acl_rt's current-stream epoch stands still); 0, or -1 with an exception */
int fast_stream_of(PyObject *arg, void **stream);
PyObject *py_stream_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fast_api_capsule(void);   /* kernels._native.fast_api: fast() for a C caller (fast_api.h) */
PyObject *py_fast_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *py_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern unsigned long long g_offload_hits;   /* offload()'s calls served by offload_fast */
PyObject *py_memo_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *py_memo(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *py_offload_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *py_offload_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
