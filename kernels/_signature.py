"""The parameter lists of custom kernels, read from their source (the dialect of docs/DESIGN.md §3.3).

A kernel is a function marked ``CANNA_KERNEL`` (or, in Ascend C sources, ``__global__``), returning
``void``, whose parameters are GM pointers (``GM_ADDR`` or any ``T *``), scalars of fixed-width
types and plain structs defined in the source or its headers (by value: Ascend C tiling data,
kernels/_structs.py). Its argument block -- what AscendCL's launch functions take, on the device
and in the simulator -- is a C struct of the parameters in declaration order with natural alignment, GM
pointers 8 bytes (the argument block of ``aclrtLaunchKernelWithHostArgs``, AscendCL ``acl_rt.h``). This module finds the kernels of a source and
computes that layout; it does not preprocess (kernels declared through macros are not found):
``RawModule`` first blanks the lines the preprocessor drops (``kernels._compiler.live_source``), so
a kernel in an inactive ``#if`` branch is not one.
"""
from __future__ import annotations

import dataclasses
import platform
import re

from ._structs import included_source, struct_layouts

__all__ = ["KernelParam", "KernelSignature", "KernelSourceError", "parse_kernels", "parse_signature",
           "SCALAR_TYPES"]


class KernelSourceError(ValueError):
    """A kernel's source cannot be used: no such kernel, an unsupported parameter type, a malformed
    declaration. The message names the kernel, the parameter and the source line."""


#: canonical scalar type -> (size in bytes, struct format code, kind: i signed, u unsigned, f float, b bool)
SCALAR_TYPES = {
    "int8": (1, "b", "i"), "uint8": (1, "B", "u"), "int16": (2, "h", "i"), "uint16": (2, "H", "u"),
    "int32": (4, "i", "i"), "uint32": (4, "I", "u"), "int64": (8, "q", "i"), "uint64": (8, "Q", "u"),
    "float16": (2, "e", "f"), "float32": (4, "f", "f"), "float64": (8, "d", "f"), "bool": (1, "?", "b"),
}
_POINTER_ONLY = {"bfloat16": 2}   # element types that have no scalar form here

_CHAR = "uint8" if platform.machine().lower().startswith(("aarch64", "arm", "ppc", "s390")) else "int8"
# C spellings (after dropping qualifiers, words joined by one space) -> canonical type
_C_TYPES = {
    "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16",
    "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64",
    "float": "float32", "double": "float64", "half": "float16", "float16_t": "float16", "_Float16": "float16",
    "bfloat16_t": "bfloat16", "__bf16": "bfloat16", "bool": "bool", "_Bool": "bool",
    "char": _CHAR, "signed char": "int8", "unsigned char": "uint8",
    "short": "int16", "short int": "int16", "signed short": "int16", "signed short int": "int16",
    "unsigned short": "uint16", "unsigned short int": "uint16",
    "int": "int32", "signed": "int32", "signed int": "int32", "unsigned": "uint32", "unsigned int": "uint32",
    "long": "int64", "long int": "int64", "signed long": "int64", "signed long int": "int64",
    "unsigned long": "uint64", "unsigned long int": "uint64",
    "long long": "int64", "long long int": "int64", "signed long long": "int64", "signed long long int": "int64",
    "unsigned long long": "uint64", "unsigned long long int": "uint64",
    "size_t": "uint64", "uintptr_t": "uint64", "ssize_t": "int64", "ptrdiff_t": "int64", "intptr_t": "int64",
    "uint": "uint32",
}
# element types of untyped ("byte") pointers: any array may be passed to them
_BYTE_ELEMENTS = {"void", "uint8", "int8"}
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__", "__gm__", "register",
               "__ubuf__", "__ca__", "__cbuf__"}
_KERNEL_QUALIFIERS = {"__aicore__", "__global__", "inline", "__inline", "__inline__", "static", "extern",
                      "CANNA_KERNEL", "CANNA_EXTERN_C", "__attribute__"}
_TYPE_WORDS = set(_C_TYPES) | {"signed", "unsigned", "short", "long", "int", "char", "void", "GM_ADDR",
                               "struct", "union", "enum", "float", "double"}
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d\w*|\.\.\.|::|[*&\[\](),=<>{};:]")


@dataclasses.dataclass(frozen=True)
class KernelParam:
    """One parameter of a kernel.

    Attributes:
        index: position (0-based).
        name: as written ("" when unnamed).
        ctype: the C type as written, e.g. ``"GM_ADDR"``, ``"const float *"``, ``"uint32_t"``.
        kind: ``"pointer"`` (a GM pointer), ``"scalar"`` or ``"struct"`` (a plain struct by value).
        scalar: the canonical scalar type (``"uint32"``, ``"float32"``, ...) for scalars, else None.
        element: for a typed pointer, the canonical element type (``"float32"``); None for
            ``GM_ADDR``, ``void *``, byte and unknown pointees (any array is accepted).
        is_const: a pointer to const data (the kernel promises not to write through it).
        offset, size, align: its place in the argument block, in bytes.
        layout: for ``kind == "struct"`` (a plain struct passed by value, e.g. Ascend C tiling
            data), its :class:`kernels._structs.StructLayout`; else None.
    """
    index: int
    name: str
    ctype: str
    kind: str
    scalar: str | None
    element: str | None
    is_const: bool
    offset: int
    size: int
    align: int
    layout: object = None

    @property
    def label(self) -> str:
        """``"parameter 3 'n' (uint32_t)"``, for messages."""
        name = f" '{self.name}'" if self.name else ""
        return f"parameter {self.index}{name} ({self.ctype})"

    @property
    def declaration(self) -> str:
        ct = self.ctype
        if not self.name:
            return ct
        return f"{ct}{self.name}" if ct.endswith("*") else f"{ct} {self.name}"


@dataclasses.dataclass(frozen=True)
class KernelSignature:
    """A kernel's name and parameters; ``args_size`` is the size of its argument block in bytes
    (the C struct's ``sizeof``, trailing padding included)."""
    name: str
    params: tuple
    args_size: int
    line: int = 0

    def __str__(self) -> str:
        return f"void {self.name}({', '.join(p.declaration for p in self.params) or 'void'})"

    @property
    def args_end(self) -> int:
        """End of the last parameter (the minimum argument block the runtime accepts)."""
        return max((p.offset + p.size for p in self.params), default=0)


# ---------------------------------------------------------------------------------------------
# lexical clean-up

def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def clean_source(source: str) -> str:
    """The source with comments, string/char literal contents and preprocessor lines replaced by
    spaces (newlines kept, so offsets and line numbers still match)."""
    out = []
    i, n = 0, len(source)
    at_line_start = True
    while i < n:
        c = source[i]
        if at_line_start:
            # a preprocessor directive: up to the end of the line, with backslash continuations
            j = i
            while j < n and source[j] in " \t":
                j += 1
            if j < n and source[j] == "#":
                k = j
                while k < n:
                    if source[k] == "\n" and source[k - 1] != "\\":
                        break
                    if source.startswith("/*", k):   # a comment inside the directive
                        e = source.find("*/", k + 2)
                        k = n if e < 0 else e + 2
                        continue
                    k += 1
                out.append(source[i:j] + _blank(source[j:k]))
                i = k
                continue
            at_line_start = False
        if source.startswith("//", i):
            e = source.find("\n", i)
            e = n if e < 0 else e
            out.append(_blank(source[i:e]))
            i = e
        elif source.startswith("/*", i):
            e = source.find("*/", i + 2)
            e = n if e < 0 else e + 2
            out.append(_blank(source[i:e]))
            i = e
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + _blank(source[i + 1:j - 1]) + (source[j - 1] if j - 1 > i else ""))
            i = j
        else:
            out.append(c)
            if c == "\n":
                at_line_start = True
            i += 1
    return "".join(out)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _strip_attributes(text: str) -> str:
    # __attribute__((...)) with nested parentheses
    while True:
        m = re.search(r"\b__attribute__\s*\(", text)
        if not m:
            return text
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == "(":
                depth += 1
            elif text[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        text = text[:m.start()] + " " + text[j + 1:]


def _typedefs(clean: str) -> dict:
    """``typedef <known type> NAME;`` statements -> {NAME: type text} (resolved recursively later)."""
    found = {}
    for m in re.finditer(r"\btypedef\s+([^;{}()]+?)\s*\b([A-Za-z_]\w*)\s*;", clean):
        found[m.group(2)] = " ".join(m.group(1).split())
    return found


# ---------------------------------------------------------------------------------------------
# parameters

def _canonical(words: list, typedefs: dict, depth=0):
    """(canonical type or None, extra pointer levels from typedefs) for a list of type words."""
    key = " ".join(words)
    if key in _C_TYPES:
        return _C_TYPES[key], 0
    if len(words) == 1 and words[0] in typedefs and depth < 8:
        toks = _TOKEN.findall(_strip_attributes(typedefs[words[0]]))
        inner = [t for t in toks if _IDENT.fullmatch(t) and t not in _QUALIFIERS]
        stars = toks.count("*")
        if "GM_ADDR" in inner:
            return "uint8", stars + 1
        canon, more = _canonical(inner, typedefs, depth + 1)
        return canon, stars + more
    if key == "void":
        return "void", 0
    return None, 0


def _parse_param(text: str, index: int, kernel: str, line: int, typedefs: dict, structs=None) -> tuple:
    """(name, ctype, kind, scalar, element, is_const) of one parameter declaration."""
    raw = " ".join(_strip_attributes(text).split())
    where = f"kernel '{kernel}' (line {line}), parameter {index}"
    if "=" in raw:
        raise KernelSourceError(f"{where} `{raw}`: default arguments are not supported")
    if "(" in raw:
        raise KernelSourceError(f"{where} `{raw}`: function pointer parameters are not supported")
    if "&" in raw:
        raise KernelSourceError(f"{where} `{raw}`: reference parameters are not supported (pass a pointer)")
    toks = _TOKEN.findall(raw)
    # array declarators decay to pointers: `float x[]`, `float x[16]`
    array = False
    if "[" in toks:
        array = True
        toks = toks[:toks.index("[")]
    idents = [t for t in toks if _IDENT.fullmatch(t)]
    type_idents = [t for t in idents if t not in _QUALIFIERS]
    name = ""
    if len(type_idents) >= 2 and type_idents[-1] not in _TYPE_WORDS and type_idents[-1] not in typedefs:
        name = type_idents[-1]
        type_idents = type_idents[:-1]
        cut = len(toks) - 1 - toks[::-1].index(name)
        toks = toks[:cut]
    elif len(type_idents) >= 2 and toks and toks[-1] == type_idents[-1] and type_idents[-1] in typedefs \
            and (type_idents[-2] in typedefs or type_idents[-2] in _TYPE_WORDS):
        name = type_idents[-1]   # a parameter named like a typedef: `real real`
        type_idents = type_idents[:-1]
        toks = toks[:len(toks) - 1]
    if not type_idents:
        raise KernelSourceError(f"{where} `{raw}`: no type")
    if structs and "*" not in toks and not array:   # a plain struct by value (kernels/_structs.py)
        sname = type_idents[-1] if len(type_idents) == 2 and type_idents[0] in ("struct", "class") else \
            type_idents[0] if len(type_idents) == 1 else None
        if sname in structs:
            return name, " ".join(toks), "struct", None, structs[sname], False
    if type_idents[0] in ("struct", "union", "enum", "class"):
        tname = " ".join(type_idents)
        if "*" not in toks and not array:
            raise KernelSourceError(
                f"{where} `{raw}`: by-value {type_idents[0]} parameters need the {tname}'s definition in this "
                f"source with data members of fixed-width scalar types (or arrays of them) only; else pass a "
                f"pointer (GM_ADDR) to it in device memory, or its fields as separate scalars")
    stars = toks.count("*") + (1 if array else 0)
    gm = "GM_ADDR" in type_idents
    # const before the first '*' (or before GM_ADDR) qualifies the pointee
    first_star = toks.index("*") if "*" in toks else len(toks)
    is_const = "const" in toks[:first_star] or (gm and "const" in toks[:toks.index("GM_ADDR")])
    base_words = [t for t in type_idents if t != "GM_ADDR"]
    if gm:
        canon, extra = ("uint8" if not base_words else None), 1
    else:
        canon, extra = _canonical(base_words, typedefs)
        if canon is None and type_idents[0] not in ("struct", "union", "enum", "class") and stars == 0:
            known = ", ".join(["GM_ADDR", "T *"] + sorted(k for k in _C_TYPES if k.endswith("_t"))
                              + ["float", "double", "half", "bool"])
            raise KernelSourceError(
                f"{where} `{raw}`: unsupported type '{' '.join(base_words)}' (use a GM pointer or one of: {known})")
    levels = stars + extra
    ctype = " ".join(t for t in toks)
    ctype = re.sub(r"\s*\*\s*", " *", ctype).replace("* *", "**").strip()
    if array:
        ctype += " *"
    if levels >= 1:
        element = None
        if levels == 1 and canon is not None and canon not in _BYTE_ELEMENTS:
            element = canon
        return name, ctype, "pointer", None, element, is_const
    if canon == "void":
        raise KernelSourceError(f"{where} `{raw}`: a parameter cannot have type void")
    if canon == "bfloat16":
        raise KernelSourceError(f"{where} `{raw}`: bfloat16 scalars cannot be passed by value here "
                                f"(pass the bits as uint16_t, or a float)")
    return name, ctype, "scalar", canon, None, False


def _layout(kernel: str, decls: list, line: int) -> KernelSignature:
    params, off, max_align = [], 0, 1
    for i, (name, ctype, kind, scalar, element, is_const) in enumerate(decls):
        layout = None
        if kind == "struct":   # element carries the StructLayout
            layout, element = element, None
            size, align = layout.size, layout.align
        else:
            size = 8 if kind == "pointer" else SCALAR_TYPES[scalar][0]
            align = size
        off = (off + align - 1) // align * align
        params.append(KernelParam(i, name, ctype, kind, scalar, element, is_const, off, size, align, layout))
        off += size
        max_align = max(max_align, align)
    size = (off + max_align - 1) // max_align * max_align if params else 0
    if len(params) > 128:
        raise KernelSourceError(f"kernel '{kernel}' (line {line}) has {len(params)} parameters; at most 128 "
                                f"are supported (AscendCL's limit)")
    return KernelSignature(kernel, tuple(params), size, line)


def _split_params(text: str) -> list:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _params_of(kernel: str, plist: str, line: int, typedefs: dict, structs=None) -> list:
    stripped = " ".join(plist.split())
    if stripped in ("", "void"):
        return []
    decls = []
    for i, part in enumerate(_split_params(plist)):
        if part.strip() == "...":
            raise KernelSourceError(f"kernel '{kernel}' (line {line}): variadic kernels are not supported")
        if not part.strip():
            raise KernelSourceError(f"kernel '{kernel}' (line {line}): empty parameter {i}")
        decls.append(_parse_param(part, i, kernel, line, typedefs, structs))
    return decls


def parse_kernels(source: str, include_dirs=()) -> dict:
    """Every kernel defined in ``source``: ``{name: KernelSignature}`` in source order.
    ``include_dirs``: where the source's ``#include "..."`` headers are (for the definitions of
    struct parameters passed by value).

    Raises:
        KernelSourceError: a kernel's declaration cannot be used (the message says why).
    """
    clean = clean_source(source)
    typedefs = _typedefs(clean)
    headers = clean_source(included_source(source, include_dirs)) if include_dirs else ""
    structs = struct_layouts(headers + "\n" + clean, SCALAR_TYPES, _C_TYPES, {**_typedefs(headers), **typedefs})
    markers = sorted({m.start() for m in re.finditer(r"\bCANNA_KERNEL\b|\b__global__\b", clean)})
    found: dict = {}
    declared: dict = {}
    seen_parens = set()
    for pos in markers:
        paren = clean.find("(", pos)
        if paren < 0:
            continue
        head = _strip_attributes(clean[pos:paren])
        if ";" in head or "{" in head or "}" in head:
            continue   # the marker is not part of a function declaration
        if paren in seen_parens:
            continue
        seen_parens.add(paren)
        line = _line_of(clean, pos)
        before = clean[max(0, pos - 400):pos]
        if re.search(r"\btemplate\s*<[^;{}]*>\s*(\w+\s+)*$", before):
            m = _IDENT.findall(head)
            raise KernelSourceError(f"kernel '{m[-1] if m else '?'}' (line {line}): template kernels are not "
                                    f"supported (instantiate it in a non-template CANNA_KERNEL wrapper)")
        words = [w for w in _IDENT.findall(head) if w not in _KERNEL_QUALIFIERS]
        if not words:
            continue
        name = words[-1]
        ret = words[:-1]
        if ret != ["void"]:
            raise KernelSourceError(f"kernel '{name}' (line {line}) must return void, not "
                                    f"'{' '.join(ret) or '(nothing)'}'")
        depth, j = 0, paren
        while j < len(clean):
            if clean[j] == "(":
                depth += 1
            elif clean[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= len(clean):
            raise KernelSourceError(f"kernel '{name}' (line {line}): unterminated parameter list")
        rest = _strip_attributes(clean[j + 1:j + 400]).lstrip()
        decls = _params_of(name, clean[paren + 1:j], line, typedefs, structs)
        if rest.startswith("{"):
            if name in found:
                raise KernelSourceError(f"kernel '{name}' is defined twice (lines {found[name].line} and {line})")
            found[name] = _layout(name, decls, line)
        else:
            declared.setdefault(name, line)
    for name, line in declared.items():
        if name not in found:
            raise KernelSourceError(f"kernel '{name}' is declared (line {line}) but not defined in this source")
    return found


def parse_signature(text: str, name: str | None = None) -> KernelSignature:
    """A KernelSignature from a declaration: ``"void add(GM_ADDR x, uint32_t n)"`` (optionally
    with ``CANNA_KERNEL``), or just a parameter list ``"GM_ADDR x, uint32_t n"`` with ``name``
    given. For binaries whose source is not at hand."""
    if not isinstance(text, str):
        raise TypeError(f"signature must be a str, not {type(text).__name__}")
    clean = clean_source(text).strip().rstrip(";").strip()
    if "(" in clean:
        head, _, rest = clean.partition("(")
        words = [w for w in _IDENT.findall(_strip_attributes(head)) if w not in _KERNEL_QUALIFIERS]
        if not words:
            raise KernelSourceError(f"cannot read a kernel name in signature {text!r}")
        if words[:-1] not in (["void"], []):
            raise KernelSourceError(f"kernel '{words[-1]}' must return void")
        if name is not None and words[-1] != name:
            raise KernelSourceError(f"signature {text!r} declares '{words[-1]}', not '{name}'")
        name = words[-1]
        if not rest.endswith(")"):
            raise KernelSourceError(f"unterminated parameter list in signature {text!r}")
        plist = rest[:-1]
    else:
        if name is None:
            raise KernelSourceError("a bare parameter list needs the kernel's name")
        plist = clean
    return _layout(name, _params_of(name, plist, 0, _typedefs(clean)), 0)


def looks_like_cxx(source: str) -> bool:
    """Whether a kernel source needs a C++ compiler (Ascend C style, namespaces, templates, ...)."""
    if re.search(r'(?m)^\s*#\s*include\s*["<]kernel_operator\.h[">]', source):
        return True   # Ascend C
    clean = clean_source(source)
    if re.search(r"\b(namespace|template|class|__global__|__aicore__|nullptr|constexpr|static_cast|"
                 r"reinterpret_cast)\b|::|extern\s+\"", clean):
        return True
    return bool(re.search(r"(?m)^\s*#\s*include\s*<(c(std|math|string|limits)\w*|algorithm|type_traits|"
                          r"utility|array|vector|limits)>", source))
