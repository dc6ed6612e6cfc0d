"""C declarations of the AscendCL ABI subset canna uses, as cffi ``cdef`` text.

The ``*.h`` files in this folder are read by cffi (ABI mode: no compiler, no CANN headers) and
by the C compiler (the simulator includes them), so both sides share one declaration of every
prototype. ``tests/test_abi.py`` checks them against CANN's real headers.
"""
from __future__ import annotations

from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent

#: cdef files, in the order they must be declared
CDEF_FILES = ("rt_types.h", "rt_errors.h", "rt_funcs.h", "sim_funcs.h")


def cdef_text() -> str:
    """The concatenated cdef text of every file in :data:`CDEF_FILES`."""
    return "\n".join((HERE / name).read_text() for name in CDEF_FILES)


def make_ffi() -> cffi.FFI:
    """A fresh ``cffi.FFI`` with every declaration (used at build time and as a fallback)."""
    ffi = cffi.FFI()
    ffi.cdef(cdef_text())
    return ffi

