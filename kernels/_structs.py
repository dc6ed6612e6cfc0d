"""By-value struct parameters of custom kernels: the tiling data of Ascend C kernels.

An Ascend C kernel may take its tiling data by value::

    struct AddTiling { uint32_t totalLength; uint32_t tileNum; float scale[2]; };
    extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, AddTiling tiling);

The struct is copied into the argument block like any other parameter (a C struct member: its
size and alignment). This module reads the layout of such plain structs from the kernel's source
-- fields of fixed-width scalar types, arrays of them, and structs read before -- so the argument
block can be packed; the compiler's ``static_assert`` in the generated entry checks it against
the real layout. ``pack_struct`` turns what a caller passes into its bytes.
"""
from __future__ import annotations

import dataclasses
import re
import struct as _struct

__all__ = ["StructLayout", "struct_layouts", "pack_struct"]


@dataclasses.dataclass(frozen=True)
class StructLayout:
    """A plain struct: ``fields`` is a tuple of ``(name, canonical scalar type or StructLayout, count,
    offset)``; ``size`` (trailing padding included) and ``align`` in bytes."""
    name: str
    fields: tuple
    size: int
    align: int

    def field_names(self) -> tuple:
        return tuple(f[0] for f in self.fields)


_BODY = re.compile(r"\b(?:typedef\s+)?(struct|class)\s+([A-Za-z_]\w*)?\s*(?::[^{;]*)?\{")
_FIELD = re.compile(r"^(?P<type>[A-Za-z_][\w\s:]*?)\s*(?P<names>[A-Za-z_]\w*(?:\s*\[\s*\d+\s*\])?"
                    r"(?:\s*,\s*[A-Za-z_]\w*(?:\s*\[\s*\d+\s*\])?)*)$")
_ACCESS = re.compile(r"\b(public|private|protected)\s*:")
_QUALS = {"const", "volatile", "alignas", "mutable"}


def _body_end(clean: str, start: int) -> int:
    depth, j = 0, start
    while j < len(clean):
        if clean[j] == "{":
            depth += 1
        elif clean[j] == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def struct_layouts(clean: str, scalar_types: dict, c_types: dict, typedefs: dict) -> dict:
    """``{name: StructLayout}`` for the plain structs of a cleaned source (comments and strings
    blanked). Structs with anything but data members (functions, bit-fields, unknown types) are
    left out: they cannot be by-value kernel parameters here."""
    found: dict = {}
    for m in _BODY.finditer(clean):
        end = _body_end(clean, m.end() - 1)
        if end < 0:
            continue
        body = _ACCESS.sub(" ", clean[m.end():end])
        tail = re.match(r"\s*([A-Za-z_]\w*)?\s*;", clean[end + 1:end + 200])
        names = [n for n in (m.group(2), tail.group(1) if tail and m.group(0).lstrip().startswith("typedef")
                             else None) if n]
        if not names or "(" in body or "{" in body:
            continue
        layout = _layout(names[-1], body, scalar_types, c_types, typedefs, found)
        if layout is not None:
            for n in names:
                found[n] = dataclasses.replace(layout, name=n)
    return found


def _layout(name, body, scalar_types, c_types, typedefs, known):
    fields, off, align = [], 0, 1
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        if ":" in decl.replace("::", ""):
            return None   # bit-field
        fm = _FIELD.match(decl)
        if not fm:
            return None
        words = [w for w in fm.group("type").replace("struct ", " ").split() if w not in _QUALS]
        tname = " ".join(words)
        for _ in range(8):
            if tname in typedefs and tname not in c_types:
                tname = " ".join(w for w in typedefs[tname].replace("struct ", " ").split() if w not in _QUALS)
        if tname in c_types and c_types[tname] in scalar_types:
            ftype = c_types[tname]
            fsize = falign = scalar_types[ftype][0]
        elif tname in known:
            ftype = known[tname]
            fsize, falign = ftype.size, ftype.align
        else:
            return None
        for part in fm.group("names").split(","):
            pm = re.match(r"\s*([A-Za-z_]\w*)\s*(?:\[\s*(\d+)\s*\])?", part)
            count = int(pm.group(2)) if pm.group(2) else 1
            off = (off + falign - 1) // falign * falign
            fields.append((pm.group(1), ftype, count, off))
            off += fsize * count
            align = max(align, falign)
    if not fields:
        return None
    return StructLayout(name, tuple(fields), (off + align - 1) // align * align, align)


def _pack_into(buf: bytearray, base: int, layout: StructLayout, value, label: str, scalar_types: dict):
    if isinstance(value, dict):
        unknown = set(value) - set(layout.field_names())
        if unknown:
            raise TypeError(f"{label}: {layout.name} has no field {sorted(unknown)[0]!r} "
                            f"(fields: {', '.join(layout.field_names())})")
        items = [value.get(f[0], 0) for f in layout.fields]
    else:
        items = list(value)
        if len(items) != len(layout.fields):
            raise TypeError(f"{label}: {layout.name} has {len(layout.fields)} fields "
                            f"({', '.join(layout.field_names())}), got {len(items)} values")
    for (fname, ftype, count, off), v in zip(layout.fields, items):
        vals = [v] if count == 1 else list(v) if hasattr(v, "__iter__") else None
        if vals is None or len(vals) != count:
            raise TypeError(f"{label}: field {fname!r} of {layout.name} takes {count} values")
        for i, x in enumerate(vals):
            if isinstance(ftype, StructLayout):
                _pack_into(buf, base + off + i * ftype.size, ftype, x, f"{label}.{fname}", scalar_types)
                continue
            size, code, kind = scalar_types[ftype]
            if kind in "iu" and not isinstance(x, bool) and isinstance(x, float):
                raise TypeError(f"{label}: field {fname!r} ({ftype}) takes an integer, got {x!r}")
            try:
                _struct.pack_into("=" + code, buf, base + off + i * size, x.item() if hasattr(x, "item") else x)
            except _struct.error as e:
                raise OverflowError(f"{label}: field {fname!r} ({ftype}): {x!r}: {e}") from None


def pack_struct(layout: StructLayout, value, label: str, scalar_types: dict) -> bytes:
    """The bytes of a by-value struct argument. ``value`` is a dict of fields (missing ones are 0),
    a tuple/list of all fields in order, bytes-like data of exactly ``layout.size`` bytes, a
    ``ctypes.Structure`` of that size, or a NumPy structured scalar / one-element array.

    Raises: TypeError (wrong kind, size or field), OverflowError (a field out of range)."""
    if isinstance(value, (dict, tuple, list)):
        buf = bytearray(layout.size)
        _pack_into(buf, 0, layout, value, label, scalar_types)
        return bytes(buf)
    dtype = getattr(value, "dtype", None)
    if dtype is not None and getattr(dtype, "names", None):
        if getattr(value, "size", 1) != 1:
            raise TypeError(f"{label}: a structured array of {value.size} elements for one {layout.name}")
        data = value.tobytes()
    elif isinstance(value, (bytes, bytearray, memoryview)) or hasattr(value, "_fields_"):
        data = bytes(value)
    else:
        raise TypeError(f"{label} is a struct {layout.name} passed by value: pass a dict of its fields "
                        f"({', '.join(layout.field_names())}), a tuple of them, a ctypes.Structure, a NumPy "
                        f"structured scalar or {layout.size} bytes; got {type(value).__name__}")
    if len(data) != layout.size:
        raise TypeError(f"{label}: {layout.name} is {layout.size} bytes, got {len(data)}")
    return data


_INCLUDE = re.compile(r'(?m)^\s*#\s*include\s*"([^"]+)"')
_SHIPPED = {"kernel_operator.h", "canna_kernel.h", "sim_kernel_abi.h"}


def included_source(source: str, include_dirs, _depth: int = 0, _seen=None) -> str:
    """The text of the headers ``source`` includes with ``#include "..."`` that are found in
    ``include_dirs`` (recursively, 4 levels; canna's own headers skipped): where the tiling struct
    of a kernel usually lives (``add_custom_tiling.h``). Unreadable or missing headers are skipped
    (the compiler reports them)."""
    from pathlib import Path
    seen = set() if _seen is None else _seen
    out = []
    if _depth > 4:
        return ""
    for name in _INCLUDE.findall(source):
        if Path(name).name in _SHIPPED:
            continue
        for d in include_dirs:
            p = (Path(d) / name)
            try:
                key = p.resolve()
                if key in seen or not p.is_file() or p.stat().st_size > 1 << 20:
                    continue
                seen.add(key)
                text = p.read_text(errors="replace")
            except OSError:
                continue
            out.append(text)
            out.append(included_source(text, [p.parent] + list(include_dirs), _depth + 1, seen))
            break
    return "\n".join(out)
