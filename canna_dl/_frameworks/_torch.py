"""DeviceArray <-> torch.Tensor.

PyTorch behaviour this works around (reproduced in tests/test_dlpack_frameworks.py and tests/test_dlpack_process.py):
- ``torch.from_dlpack`` aborts the process on negative strides (pytorch#188023, still in 2.13):
  such views are copied first (counted as ``"torch_layout"``);
- tensors with the negative or conjugate bit export their memory un-negated (wrong values in the
  consumer): they are resolved first (a PyTorch copy, counted as ``"torch_resolve"``);
- ``Tensor.__dlpack__`` costs ~1.7 µs of Python; the C exchange API (DLPack 1.3) does the same
  in C, so both directions use it when the PyTorch build exposes it;
- PyTorch ignores ``READ_ONLY``: a tensor made from a read-only canna array can be written.
"""
from __future__ import annotations

import warnings

import torch

from .. import _copy, _interop, _native
from .._array import DeviceArray
from .._interop import _Exporter, _generic_import, asarray, from_dlpack, host_prepare

__all__ = ["to_torch", "from_torch"]


def _exchange_api():
    cap = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if cap is None:
        return None
    try:
        info = _native.exchange_api_info(cap)
    except Exception:
        return None
    if info["version"][0] != 1 or not (info["from_py_object"] and info["to_py_object"]):
        return None
    return cap


_API = _exchange_api()
_Tensor = torch.Tensor
_import_exchange = _native.import_exchange
_export_exchange = _native.export_exchange


def _import_tensor(t, copy=None):
    """The DeviceArray view of torch tensor ``t`` (before device attachment, see from_dlpack)."""
    if t.requires_grad:
        raise BufferError("canna_dl: cannot import a tensor that requires grad (PyTorch's own DLPack rule); "
                          "pass tensor.detach()")
    resolved = False
    if t.is_neg() or t.is_conj():
        t = t.resolve_conj().resolve_neg()
        _copy.count("torch_resolve", t.numel() * t.element_size())
        resolved = True
    if _API is not None and t.is_cpu:
        try:
            a = _import_exchange(_API, DeviceArray, t)
        except (RuntimeError, ValueError) as e:
            raise _export_error(t, e) from None
        if copy is True and not resolved:
            a = a.copy()
        return a
    return _generic_import(t, None if resolved and copy is True else copy)


def _fast_import(t):
    """The common case in as few steps as possible: a plain CPU tensor (None: take the general path)."""
    if t.requires_grad or t.is_neg() or t.is_conj() or not t.is_cpu:
        return None
    try:
        return _import_exchange(_API, DeviceArray, t)
    except (RuntimeError, ValueError) as e:
        raise _export_error(t, e) from None


def _export_error(t, e):
    """torch's C++ error (sparse, quantized, ...) as the BufferError DLPack consumers raise."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return BufferError(f"PyTorch cannot export this tensor through DLPack ({t.layout}, {t.dtype}): {msg}")


if _API is not None:
    _interop._FAST[torch.Tensor] = _fast_import


def from_torch(t, *, device=None, copy=None) -> DeviceArray:
    """A DeviceArray viewing torch tensor ``t`` (see :func:`canna_dl.from_dlpack`).

    Raises:
        TypeError: ``t`` is not a torch.Tensor.
        BufferError: ``t`` requires grad (use ``t.detach()``), or its dtype/layout has no DLPack form.
    """
    if not isinstance(t, _Tensor):
        raise TypeError(f"from_torch: expected a torch.Tensor, not {type(t).__name__}")
    return from_dlpack(t, device=device, copy=copy)


def to_torch(a) -> torch.Tensor:
    """A CPU torch.Tensor viewing ``a`` (a DeviceArray, or anything :func:`canna_dl.asarray` takes).

    Zero-copy in the unified memory model for every layout but negative strides (copied:
    PyTorch aborts on them); waits for pending work on ``a``'s stream. In the discrete model a
    host copy (counted as ``"to_host"``). The tensor keeps ``a``'s memory alive; canna's deleter
    runs once when PyTorch releases it, from whatever thread.
    """
    if type(a) is not DeviceArray:
        if not isinstance(a, DeviceArray):
            a = asarray(a)
    if _API is not None:
        t = _export_exchange(_API, a, False)
        if t is NotImplemented:
            t = _export_exchange(_API, host_prepare(a, compact="noneg", align=False, reason="torch_layout"), True)
    else:
        h = host_prepare(a, compact="noneg", align=False, reason="torch_layout")
        t = torch.from_dlpack(_Exporter(_native.export_capsule(h, True, 1 if h.readonly else 0, 1, 0)))
    if a.readonly and a.size and t.data_ptr() == a.ptr:
        # PyTorch has no read-only tensors and ignores DLPack's READ_ONLY flag (DLPack 1.0 DLPACK_FLAG_BITMASK_READ_ONLY):
        # warn, as torch.from_numpy does for a non-writable array
        warnings.warn("canna_dl.to_torch: the array is read-only and PyTorch does not support read-only "
                      "tensors; writing to the returned tensor writes the read-only memory (undefined "
                      "behaviour). Pass a.copy() for a writable tensor.", UserWarning, stacklevel=2)
    return t
