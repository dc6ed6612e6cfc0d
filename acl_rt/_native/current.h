/* acl_rt._native: declarations shared by the extension's C files (internal). */
#ifndef CANNA_ACL_RT_NATIVE_CURRENT_H
#define CANNA_ACL_RT_NATIVE_CURRENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* current.c: adds current_changed(), current_epoch() and current_epoch_capsule to the module */
int current_add_to_module(PyObject *m);

#endif
