"""C declarations of the AscendCL ABI subset canna uses, as cffi ``cdef`` text.

The ``*.h`` files in this folder are read by cffi (ABI mode: no compiler, no CANN headers) and
by the C compiler (the simulator includes them), so both sides share one declaration of every
prototype. ``tests/test_abi.py`` checks them against CANN's real headers.
"""
from __future__ import annotations

from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent


def _order(name: str):
    # every *_types.h, then *_errors.h, then *_funcs.h; the runtime (rt_*) first in each group,
    # the simulator-only declarations (sim_*) last
    kind = {"types": 0, "errors": 1, "funcs": 2}[name.rsplit("_", 1)[1][:-2]]
    prefix = name.split("_", 1)[0]
    return (kind, {"rt": 0, "sim": 2}.get(prefix, 1), name)


#: cdef files, in the order they must be declared: ``<area>_{types,errors,funcs}.h``
CDEF_FILES = tuple(sorted((p.name for p in HERE.glob("*_*.h")
                           if p.name.rsplit("_", 1)[1] in ("types.h", "errors.h", "funcs.h")), key=_order))


def cdef_text() -> str:
    """The concatenated cdef text of every file in :data:`CDEF_FILES`."""
    return "\n".join((HERE / name).read_text() for name in CDEF_FILES)


def make_ffi() -> cffi.FFI:
    """A fresh ``cffi.FFI`` with every declaration (used at build time and as a fallback)."""
    ffi = cffi.FFI()
    ffi.cdef(cdef_text())
    return ffi

