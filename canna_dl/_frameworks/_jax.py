"""DeviceArray <-> jax.Array (CPU).

JAX 0.10 behaviour this works around (jax#29810, jax#19352; reproduced in tests/test_dlpack_frameworks.py and tests/test_dlpack_process.py):
- JAX asks only for legacy capsules, copies data that is not 64-byte aligned, and rejects
  (UNIMPLEMENTED, no fallback) strides that are not a permutation of a compact layout (gaps,
  negative, zero): canna hands it aligned, compact memory, copying otherwise (counted as
  ``"jax_layout"``);
- a NULL deleter aborts JAX (canna never exports one);
- without ``jax_enable_x64`` JAX narrows 64-bit dtypes to 32 bits (a copy JAX makes);
- arrays are immutable, so imports are read-only (legacy capsules).
"""
from __future__ import annotations

import jax

from .. import _native
from .._array import DeviceArray
from .._interop import asarray, from_dlpack, host_prepare

__all__ = ["to_jax", "from_jax"]


def _import_array(x, copy=None):
    if isinstance(x, jax.core.Tracer):
        raise TypeError("canna_dl: JAX tracers (inside jax.jit / grad) have no memory to share; call canna "
                        "through jax.pure_callback")
    if not isinstance(x, jax.Array):
        raise TypeError(f"canna_dl: cannot import a {type(x).__name__} from JAX")
    cap = x.__dlpack__()
    a = _native.import_capsule(DeviceArray, cap)
    if copy is True:
        a = a.copy()
    return a


def from_jax(x, *, device=None, copy=None) -> DeviceArray:
    """A read-only DeviceArray viewing JAX array ``x`` (see :func:`canna_dl.from_dlpack`).

    Raises:
        TypeError: ``x`` is not a concrete jax.Array (e.g. a tracer).
        BufferError: a sharded array, or one on an accelerator canna cannot read.
    """
    if not isinstance(x, jax.Array):
        raise TypeError(f"from_jax: expected a jax.Array, not {type(x).__name__}")
    return from_dlpack(x, device=device, copy=copy)


def to_jax(a) -> jax.Array:
    """A CPU jax.Array viewing ``a`` (a DeviceArray, or anything :func:`canna_dl.asarray` takes).

    Zero-copy when ``a``'s strides are a permutation of a compact layout and its first element is
    64-byte aligned (every array canna allocates, and their transposes); other views are copied
    first (``"jax_layout"``), as is device memory in the discrete model (``"to_host"``). JAX
    narrows 64-bit dtypes unless ``jax_enable_x64`` is set.
    """
    if not isinstance(a, DeviceArray):
        a = asarray(a)
    a = host_prepare(a, compact="perm", align=True, reason="jax_layout")
    return jax.dlpack.from_dlpack(a)
