"""canna's element types.

Each :class:`DType` carries its DLPack description (``code``, ``bits``, ``lanes``; DLPack
``DLDataTypeCode``, dmlc/dlpack ``include/dlpack/dlpack.h``) and its AscendCL ``aclDataType`` value
(``acl``; AscendCL ``acl_base_rt.h``), which the kernel library
passes to ``aclCreateTensor``. No framework is needed to use them.
"""
from __future__ import annotations

import builtins
import struct

from acl_rt.lowlevel import DataType as _ACL

from . import _native

__all__ = ["DType", "dtype", "all_dtypes"]

_KINDS = {0: "i", 1: "u", 2: "f", 4: "f", 5: "c", 6: "b"}


class DType(_native.DTypeBase):
    """An element type (no public constructor: use ``canna_dl.float32`` & co. or :func:`dtype`).

    Attributes:
        name: ``"float32"``, ``"bfloat16"``, ``"bool"``, ...
        code, bits, lanes: the DLPack ``DLDataType`` (``lanes`` is always 1).
        itemsize: bytes per element.
        acl: the AscendCL ``aclDataType`` value (``ACL_FLOAT`` = 0, ``ACL_BF16`` = 27, ...).
        kind: ``"b"`` bool, ``"i"`` signed int, ``"u"`` unsigned int, ``"f"`` floating, ``"c"`` complex.
    """

    __slots__ = ()

    @property
    def kind(self) -> str:
        return _KINDS[self.code]

    @property
    def is_floating_point(self) -> builtins.bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> builtins.bool:
        return self.kind == "c"

    @property
    def is_integer(self) -> builtins.bool:
        return self.kind in "iu"

    @property
    def is_signed(self) -> builtins.bool:
        return self.kind in "ifc"

    @property
    def numpy(self):
        """The NumPy dtype (``ml_dtypes.bfloat16`` for bfloat16). Needs NumPy.

        Raises:
            ImportError: NumPy (or, for bfloat16, ml_dtypes) is not installed.
        """
        import numpy as np
        if self.name == "bfloat16":
            try:
                import ml_dtypes
            except ImportError:
                raise ImportError("bfloat16 NumPy arrays need the ml_dtypes package (pip install ml_dtypes)") from None
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.name)

    def __repr__(self):
        return f"canna_dl.{self.name}"

    def __str__(self):
        return self.name

    def __eq__(self, other):
        if isinstance(other, DType):
            return self is other
        if isinstance(other, str):
            return _BY_NAME.get(other) is self
        return NotImplemented

    def __hash__(self):
        return hash(("canna_dl.dtype", self.name))

    def __reduce__(self):
        return (dtype, (self.name,))

    # -- host encoding of Python scalars (no NumPy needed) ----------------------------------
    def pack(self, value) -> bytes:
        """``value`` (a Python bool/int/float/complex) as one element of this type, in native
        byte order.

        Raises:
            OverflowError: an integer out of range for the type.
            TypeError: a value of the wrong kind (e.g. a complex for a float type).
        """
        k = self.kind
        if k == "c":
            c = complex(value)
            fmt = "ff" if self.bits == 64 else "dd"
            return struct.pack("=" + fmt, c.real, c.imag)
        if isinstance(value, complex):
            raise TypeError(f"cannot store a complex value in a {self.name} array")
        if k == "b":
            return struct.pack("=?", builtins.bool(value))
        if k in "iu":
            if isinstance(value, float):
                if value != value or value in (float("inf"), float("-inf")):
                    raise ValueError(f"cannot store {value} in a {self.name} array")
                value = int(value)
            v = int(value)
            lo, hi = (-(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1) if k == "i" else (0, (1 << self.bits) - 1)
            if not lo <= v <= hi:
                raise OverflowError(f"{v} is out of range for {self.name} ({lo}..{hi})")
            return v.to_bytes(self.itemsize, "little" if _LITTLE else "big", signed=(k == "i"))
        f = float(value)
        if self.bits < 64 and f == f and abs(f) > 3.4028235677973366e38:
            f = float("inf") if f > 0 else float("-inf")   # out of a float32's range: inf, as a cast gives
        if self.name == "bfloat16":
            (u,) = struct.unpack("=I", struct.pack("=f", f))
            if f != f:
                b = 0x7FC0
            else:  # round to nearest even on the upper 16 bits
                b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
            return struct.pack("=H", b)
        fmt = "=" + {2: "e", 4: "f", 8: "d"}[self.itemsize]
        try:
            return struct.pack(fmt, f)
        except OverflowError:  # out of float16's range (float32's is handled above): inf, as a cast gives
            return struct.pack(fmt, float("inf") if f > 0 else float("-inf"))

    def unpack(self, data: bytes):
        """The Python value of one element of this type stored in ``data``."""
        k = self.kind
        if k == "c":
            re, im = struct.unpack("=ff" if self.bits == 64 else "=dd", data[: self.itemsize])
            return complex(re, im)
        if k == "b":
            return data[0] != 0
        if k in "iu":
            return int.from_bytes(data[: self.itemsize], "little" if _LITTLE else "big", signed=(k == "i"))
        if self.name == "bfloat16":
            (b,) = struct.unpack("=H", data[:2])
            return struct.unpack("=f", struct.pack("=I", b << 16))[0]
        return struct.unpack("=" + {2: "e", 4: "f", 8: "d"}[self.itemsize], data[: self.itemsize])[0]


_LITTLE = struct.pack("=H", 1)[0] == 1

#           name         code bits acl (aclDataType, acl_rt/_cdef/nn_types.h)
_TABLE = [("bool",        6,   8, _ACL.ACL_BOOL),
          ("int8",        0,   8, _ACL.ACL_INT8),
          ("int16",       0,  16, _ACL.ACL_INT16),
          ("int32",       0,  32, _ACL.ACL_INT32),
          ("int64",       0,  64, _ACL.ACL_INT64),
          ("uint8",       1,   8, _ACL.ACL_UINT8),
          ("uint16",      1,  16, _ACL.ACL_UINT16),
          ("uint32",      1,  32, _ACL.ACL_UINT32),
          ("uint64",      1,  64, _ACL.ACL_UINT64),
          ("float16",     2,  16, _ACL.ACL_FLOAT16),
          ("bfloat16",    4,  16, _ACL.ACL_BF16),
          ("float32",     2,  32, _ACL.ACL_FLOAT),
          ("float64",     2,  64, _ACL.ACL_DOUBLE),
          ("complex64",   5,  64, _ACL.ACL_COMPLEX64),
          ("complex128",  5, 128, _ACL.ACL_COMPLEX128)]

_BY_NAME: dict[str, DType] = {}
for _name, _code, _bits, _acl in _TABLE:
    _dt = DType(_name, _code, _bits, int(_acl))
    _native.register_dtype(_dt)
    _BY_NAME[_name] = _dt
del _name, _code, _bits, _acl, _dt

_ALIASES = {"bool_": "bool", "half": "float16", "bf16": "bfloat16", "double": "float64",
            "cfloat": "complex64", "cdouble": "complex128"}
_PYTYPES = {builtins.bool: "bool", int: "int64", float: "float64", complex: "complex128"}


def all_dtypes() -> tuple:
    """Every dtype canna knows, in a stable order."""
    return tuple(_BY_NAME.values())


def dtype(obj) -> DType:
    """The canna :class:`DType` for ``obj``: a DType, a name (``"float32"``), a Python type
    (``bool``, ``int`` -> int64, ``float`` -> float64, ``complex`` -> complex128), or a NumPy,
    PyTorch, TensorFlow or JAX dtype.

    Raises:
        TypeError: ``obj`` names no dtype canna supports.
    """
    if isinstance(obj, DType):
        return obj
    name = None
    if isinstance(obj, str):
        name = obj
    elif isinstance(obj, type) and obj in _PYTYPES:
        name = _PYTYPES[obj]
    else:
        n = getattr(obj, "name", None)  # numpy / tf dtypes; numpy scalar types via np.dtype below
        if isinstance(n, str):
            name = n
        elif isinstance(obj, type) and hasattr(obj, "dtype"):
            try:
                import numpy as np
                name = np.dtype(obj).name
            except Exception:
                name = None
        else:
            s = str(obj)  # torch.float32 -> "torch.float32"
            name = s[len("torch."):] if s.startswith("torch.") else None
    if name is not None:
        name = _ALIASES.get(name, name)
        dt = _BY_NAME.get(name)
        if dt is not None:
            return dt
    raise TypeError(f"canna_dl: unsupported dtype {obj!r} (supported: {', '.join(_BY_NAME)})")


def _get(name: str) -> DType:
    return _BY_NAME[name]
