"""canna_dl — canna's arrays and the DLPack exchange with PyTorch, TensorFlow, NumPy and JAX.

::

    import canna_dl, torch
    t = torch.arange(6.0).reshape(2, 3)
    a = canna_dl.asarray(t)            # a DeviceArray viewing t's memory (no copy)
    a.ptr == t.data_ptr()              # True (simulator, unified memory model)
    b = a.T                            # views share memory
    u = canna_dl.to_torch(b)           # back to PyTorch, still no copy
    canna_dl.copy_stats()              # every copy canna made, and why

Depends only on ``acl_rt``; NumPy and the frameworks are imported lazily, when used (exchanging a
tensor imports its framework, never ``kernels`` or a shim). The autograd shims live in
``canna_dl.torch``, ``canna_dl.tf`` and ``canna_dl.jax`` (which need ``kernels``).

Memory models (``canna_dl.memory_model()``): in the simulator's default ``unified`` model device
memory is host-coherent, so canna exports its buffers as ``kDLCPU`` and imports CPU tensors of
every framework zero-copy as kernel operands. In the ``discrete`` model (a PCIe card, and real
Ascend hardware) canna's memory is exported as ``kDLExtDev`` (12, as torch_npu does), CPU
consumers get host copies, and CPU tensors are copied to the device; all counted.
"""
from . import _native
from ._dtypes import DType, all_dtypes, dtype
from ._array import DeviceArray, DLDeviceType
from ._copy import copy_stats, reset_copy_stats
from ._interop import (CopyRequiredError, asarray, empty, empty_like, from_dlpack, from_numpy, full, ones,
                       to_numpy, zeros, zeros_like)
from ._rt import memory_model

__version__ = "0.1.0"

_D = {d.name: d for d in all_dtypes()}
bool = bool_ = _D["bool"]  # noqa: A001 (canna_dl.bool, like numpy.bool)
int8, int16, int32, int64 = _D["int8"], _D["int16"], _D["int32"], _D["int64"]
uint8, uint16, uint32, uint64 = _D["uint8"], _D["uint16"], _D["uint32"], _D["uint64"]
float16, bfloat16, float32, float64 = _D["float16"], _D["bfloat16"], _D["float32"], _D["float64"]
complex64, complex128 = _D["complex64"], _D["complex128"]
del _D


def dlpack_stats() -> dict:
    """Debug counters of DLPack ownership since the process started (never reset):

    ``exports`` (managed tensors canna handed out), ``export_deleter_calls`` (canna's deleter ran;
    equals ``exports`` once every consumer released them), ``export_refs_leaked`` (deleters that
    ran after the interpreter was gone and leaked their owner reference instead of touching it),
    ``imports`` (foreign tensors canna took ownership of), ``import_deleter_calls`` (producer
    deleters canna called), ``import_null_deleters`` (imports that had no deleter to call)."""
    d = _native.counters()
    d.pop("test_deleter_calls", None)
    return d


def _lazy(module: str, name: str):
    cache = []

    def stub(*args, **kwargs):
        if not cache:
            import importlib
            cache.append(getattr(importlib.import_module(module, __name__), name))
            globals()[name] = cache[0]  # later calls of canna_dl.<name> go straight to it
        return cache[0](*args, **kwargs)
    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = (f"See :func:`canna_dl.{module.rsplit('._', 1)[1]}.{name}` (imports the framework on first use, "
                    "not the shim package).")
    return stub


to_torch = _lazy("._frameworks._torch", "to_torch")
from_torch = _lazy("._frameworks._torch", "from_torch")
to_tf = _lazy("._frameworks._tf", "to_tf")
from_tf = _lazy("._frameworks._tf", "from_tf")
to_jax = _lazy("._frameworks._jax", "to_jax")
from_jax = _lazy("._frameworks._jax", "from_jax")

__all__ = [
    "DType", "dtype", "all_dtypes", "DeviceArray", "DLDeviceType", "CopyRequiredError",
    "asarray", "from_dlpack", "empty", "empty_like", "zeros", "zeros_like", "ones", "full",
    "to_numpy", "from_numpy", "to_torch", "from_torch", "to_tf", "from_tf", "to_jax", "from_jax",
    "copy_stats", "reset_copy_stats", "dlpack_stats", "memory_model",
    "bool", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
]
