#!/usr/bin/env python3
"""Check canna's declarations of the AscendCL C ABI against CANN's own public headers.

canna declares the parts of AscendCL it uses itself, in cffi cdef files under
``acl_rt/_cdef/`` (``*_types.h``, ``*_errors.h``, ``*_funcs.h``; ``sim_*`` files are
simulator-only and never checked). This module compiles C++ translation units that include
CANN's headers and then

  a. re-declare every prototype we declare inside ``extern "C" {}`` (g++ rejects a C function
     redeclared with another signature) after checking that CANN declares it at all;
  b. ``static_assert`` every enum constant and ``#define`` constant we declare against CANN's value
     (and that an enum constant belongs to the same enum type in CANN);
  c. ``static_assert`` the size and alignment of every struct, the offset and size of each of its
     fields, the size of every enum type and the exact type of every plain typedef;
  d. (``compile_c_sources``) compile the simulator's C sources against CANN's headers.

The headers come from the ``torch-npu`` wheel on PyPI (it ships CANN's ``acl/`` headers), downloaded
once with ``pip download`` into a cache (``$CANNA_ABI_CACHE`` or ``~/.cache/canna/abi``), or from an
existing CANN install given by ``$CANNA_CANN_INCLUDE`` / ``--headers``. No header text is ever copied
into the repository.

    python tools/abi_check.py [--headers DIR] [--cdef-dir DIR] [--no-sim] [-v]

prints a report and exits 0 when everything matches, 1 on any mismatch, 2 when the headers or the
compiler are unavailable.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CDEF_DIR = REPO / "acl_rt" / "_cdef"
SIM_SOURCE_DIRS = (REPO / "acl_rt" / "_sim", REPO / "kernels" / "_sim")

# The wheel that carries CANN's public headers, pinned so every machine checks against the same
# text. Its platform and Python tags are pinned too, so the download does not depend on the running
# interpreter (the headers are the same in every build of the wheel).
WHEEL_NAME = "torch-npu"
WHEEL_VERSION = "2.14.0"
WHEEL_PIP_TAGS = ("--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                  "--platform", "manylinux_2_28_x86_64")
# include dirs taken from the wheel (below torch_npu/include/), when present. torch-npu 2.14.0 ships
# acl/ (runtime, model, op, error codes) only: no aclnn/, aclnnop/ or nnopbase/.
WHEEL_INCLUDE_DIRS = ("acl", "aclnn", "aclnnop", "nnopbase", "third_party")
# HCCL's hccl.h / hccl_types.h are under third_party/hccl/inc/hccl/ (they include each other by that
# path); the cache dir is named after this list so a cache extracted without third_party/ is redone
CACHE_INCLUDE_NAME = "include-hccl"

# CANN headers that the declarations of a cdef file mirror, by the file's prefix ("rt" for
# rt_funcs.h). A cdef file may name its own instead in a comment: "@cann-headers: a/b.h c/d.h".
# Declarations whose headers are absent from the include dir are reported as UNCHECKED, not as
# missing from CANN.
ACL_HEADERS = ("acl/acl.h", "acl/error_codes/rt_error_codes.h")
ACLNN_HEADERS = ("aclnn/acl_meta.h", "aclnn/aclnn_base.h")
PREFIX_HEADERS = {
    "rt": ACL_HEADERS,
    "nn": ACL_HEADERS + ACLNN_HEADERS,
}
DEFAULT_HEADERS = ACL_HEADERS
HEADER_MARKER = re.compile(r"@cann-headers:\s*([\w./ \t-]+)")

CDEF_KINDS = ("types", "errors", "funcs")  # parse order: types first, they are used by the others

OK, MISMATCH, MISSING, ERROR, UNCHECKED = "OK", "MISMATCH", "MISSING", "ERROR", "UNCHECKED"
PROBLEMS = (MISMATCH, MISSING, ERROR)


class HeadersUnavailable(Exception):
    """CANN's headers could not be obtained (offline, pip missing, bad CANNA_CANN_INCLUDE)."""


class ToolUnavailable(Exception):
    """The C/C++ compiler is missing."""


# --------------------------------------------------------------------------------------------
# obtaining CANN's headers


def default_cache_dir() -> Path:
    if os.environ.get("CANNA_ABI_CACHE"):
        return Path(os.environ["CANNA_ABI_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "canna" / "abi"


def _check_include_dir(path: Path, origin: str) -> Path:
    path = Path(path).expanduser().resolve()
    if not (path / "acl" / "acl.h").is_file():
        raise HeadersUnavailable(f"{origin}: {path} has no acl/acl.h (expected CANN's include dir)")
    return path


def _pip_command() -> list[str]:
    """The command that runs pip in a child process. Whether this interpreter has pip is asked of a
    child too: pip must not be imported, nor even looked up (``importlib.util.find_spec``), in this
    process, because on Python < 3.12 setuptools' distutils hook reacts to either by switching its
    distutils shim off, and a later ``import setuptools`` here (torch.compile's inductor does one)
    then fails with ``AssertionError: .../distutils/core.py``."""
    try:
        probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                               timeout=60)
        if probe.returncode == 0:
            return [sys.executable, "-m", "pip"]
    except (OSError, subprocess.TimeoutExpired):
        pass
    for name in ("pip3", "pip"):
        exe = shutil.which(name)
        if exe:
            return [exe]
    raise HeadersUnavailable("pip is not available to download the torch-npu wheel")


def _download_wheel(wheel_dir: Path, log) -> Path:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheel_dir, prefix=".download-") as tmp:
        cmd = _pip_command() + ["download", f"{WHEEL_NAME}=={WHEEL_VERSION}", "--no-deps",
                                *WHEEL_PIP_TAGS, "--disable-pip-version-check", "--no-input",
                                "--timeout", "20", "--retries", "1", "-d", tmp]
        log(f"downloading {WHEEL_NAME}=={WHEEL_VERSION} (~44 MB) for CANN's headers: {' '.join(cmd)}")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HeadersUnavailable(f"pip download {WHEEL_NAME}=={WHEEL_VERSION} failed: {exc}") from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            out = (proc.stderr + proc.stdout).strip()
            errors = [ln for ln in out.splitlines() if ln.startswith("ERROR:")]
            why = errors[-1] if errors else (out.splitlines() or ["no output"])[-1]
            if re.search(r"NewConnectionError|Failed to establish|name resolution|"
                         r"Network is unreachable|ConnectTimeout|ProxyError", out):
                why += " (no connection to the package index: offline?)"
            raise HeadersUnavailable(f"pip download {WHEEL_NAME}=={WHEEL_VERSION} failed: {why}")
        target = wheel_dir / wheels[0].name
        os.replace(wheels[0], target)
        return target


def _extract_headers(wheel: Path, dest: Path) -> dict[str, int]:
    """Extract torch_npu/include/{acl,aclnn,...}/** of the wheel into dest; returns files per dir."""
    counts = {d: 0 for d in WHEEL_INCLUDE_DIRS}
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".extract-"))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.infolist():
                parts = member.filename.split("/")
                if (len(parts) < 4 or parts[:2] != ["torch_npu", "include"]
                        or parts[2] not in counts or member.is_dir()
                        or any(p in ("", ".", "..") for p in parts)):
                    continue
                out = tmp.joinpath(*parts[2:])
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(member))
                counts[parts[2]] += 1
        if not counts["acl"]:
            raise HeadersUnavailable(f"{wheel.name} has no torch_npu/include/acl/ headers")
        (tmp / "MANIFEST").write_text(
            f"{wheel.name} sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}\n"
            + "".join(f"{d}/ {n} files\n" for d, n in counts.items()))
        try:
            os.replace(tmp, dest)  # atomic; a concurrent run may have won the race
        except OSError:
            if not (dest / "acl" / "acl.h").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counts


def get_cann_include(headers: str | os.PathLike | None = None, cache_dir: Path | None = None,
                     log=lambda msg: None) -> Path:
    """The include dir holding CANN's acl/acl.h: ``headers`` if given, else $CANNA_CANN_INCLUDE,
    else the torch-npu wheel's headers in the cache (downloaded and extracted on first use).
    Raises HeadersUnavailable with the reason."""
    if headers:
        return _check_include_dir(Path(headers), "--headers")
    if os.environ.get("CANNA_CANN_INCLUDE"):
        return _check_include_dir(Path(os.environ["CANNA_CANN_INCLUDE"]), "CANNA_CANN_INCLUDE")
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    include = cache / f"torch-npu-{WHEEL_VERSION}" / CACHE_INCLUDE_NAME
    if (include / "acl" / "acl.h").is_file():
        return include
    try:
        include.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HeadersUnavailable(f"cannot create the cache dir {include.parent}: {exc}") from None
    wheel_dir = cache / "wheels"
    wheels = sorted(wheel_dir.glob(f"torch_npu-{WHEEL_VERSION}-*.whl"))
    wheel = wheels[0] if wheels else _download_wheel(wheel_dir, log)
    try:
        counts = _extract_headers(wheel, include)
    except zipfile.BadZipFile:  # a truncated download: fetch it again, once
        wheel.unlink()
        counts = _extract_headers(_download_wheel(wheel_dir, log), include)
    log("extracted " + ", ".join(f"{d}/: {n} files" for d, n in counts.items()) + f" into {include}")
    return include


def describe_include_dir(include: Path) -> str:
    manifest = include / "MANIFEST"
    origin = manifest.read_text().splitlines()[0].split()[0] if manifest.is_file() else "CANN install"
    dirs = [f"{d}/: {'yes' if (include / d).is_dir() else 'absent'}" for d in WHEEL_INCLUDE_DIRS]
    return f"{include} ({origin}; {', '.join(dirs)})"


# --------------------------------------------------------------------------------------------
# reading our cdef files


@dataclasses.dataclass
class CdefFile:
    name: str          # e.g. "rt_funcs.h"
    text: str
    headers: tuple     # CANN headers its declarations mirror

    @property
    def prefix(self) -> str:
        return self.name.split("_", 1)[0]


def _headers_for(name: str, text: str) -> tuple:
    m = HEADER_MARKER.search(text)
    if m:
        return tuple(m.group(1).split())
    return PREFIX_HEADERS.get(name.split("_", 1)[0], DEFAULT_HEADERS)


def _cdef_order(name: str):
    stem = name[:-2]
    kind = stem.rsplit("_", 1)[1]
    return (CDEF_KINDS.index(kind), stem.split("_", 1)[0] != "rt", name)


def discover_cdef_files(cdef_dir: Path = CDEF_DIR) -> tuple[list[CdefFile], list[str]]:
    """The cdef files to check (every *_types.h, *_errors.h, *_funcs.h except sim_*), in parse
    order, and the names of the other .h files of the folder (not checked)."""
    checked, skipped = [], []
    for path in sorted(Path(cdef_dir).glob("*.h")):
        stem = path.name[:-2]
        if (path.name.startswith("sim_") or "_" not in stem
                or stem.rsplit("_", 1)[1] not in CDEF_KINDS):
            skipped.append(path.name)
            continue
        text = path.read_text()
        checked.append(CdefFile(path.name, text, _headers_for(path.name, text)))
    checked.sort(key=lambda f: _cdef_order(f.name))
    return checked, skipped


def cdef_from_texts(texts: dict[str, str]) -> list[CdefFile]:
    """CdefFiles from {file name: text} (for tests and ad-hoc checks), in parse order."""
    files = [CdefFile(n, t, _headers_for(n, t)) for n, t in texts.items()]
    files.sort(key=lambda f: _cdef_order(f.name) if f.name.endswith(tuple(
        f"_{k}.h" for k in CDEF_KINDS)) else (9, True, f.name))
    return files


def _strip_comments(text: str) -> str:
    def blank(m):  # keep newlines so line numbers stay right
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def _statements(text: str):
    """(line, statement) for each top-level ';'-terminated statement, preprocessor lines removed."""
    text = re.sub(r"(?m)^[ \t]*#.*$", "", _strip_comments(text))
    depth, start, line, start_line = 0, 0, 1, None
    for i, ch in enumerate(text):
        if ch == "\n":
            line += 1
        elif start_line is None and not ch.isspace():
            start_line = line
        if ch in "{(":
            depth += 1
        elif ch in "})":
            depth -= 1
        elif ch == ";" and depth == 0:
            yield start_line, " ".join(text[start:i + 1].split())
            start, start_line = i + 1, None


def _line_of(text: str, name: str) -> int:
    code = _strip_comments(text)
    m = (re.search(rf"#\s*define\s+{re.escape(name)}\b", code)
         or re.search(rf"\b{re.escape(name)}\b\s*[=,}}]", code)
         or re.search(rf"\b{re.escape(name)}\b", code))
    return code.count("\n", 0, m.start()) + 1 if m else 0


@dataclasses.dataclass
class Decl:
    kind: str          # function, constant, typedef, struct, enum
    name: str          # C name (for a tagged struct/enum without typedef: "struct tag")
    file: str
    line: int
    ours: str          # our declaration, for the report
    data: dict = dataclasses.field(default_factory=dict)


def load_declarations(files: list[CdefFile]):
    """Parse the cdef files with cffi (in order, each one may use the previous ones) and return
    (ffi, [Decl]) with each declaration attributed to its file."""
    import cffi

    decls: list[Decl] = []
    seen: set = set()
    ffi = None
    for idx, cf in enumerate(files):
        ffi = cffi.FFI()
        try:
            ffi.cdef("\n".join(f.text for f in files[:idx + 1]))
        except Exception as exc:  # cffi.CDefError and pycparser errors
            raise ValueError(f"cffi cannot parse {cf.name} (after {[f.name for f in files[:idx]]}): "
                             f"{exc}") from exc
        try:
            declarations = ffi._parser._declarations
        except AttributeError:  # pragma: no cover - cffi internals changed
            raise RuntimeError("this cffi version has no FFI._parser._declarations; "
                               "tools/abi_check.py needs updating") from None
        new = [k for k in declarations if k not in seen]
        seen.update(new)
        decls.extend(_decls_of_file(ffi, cf, {k: declarations[k][0] for k in new}, declarations))
    return ffi, decls


def _c_name(tp, declarations) -> str:
    """The C++ spelling of a struct/enum type: its typedef name if it has one, else "struct tag"."""
    for key, (other, _) in declarations.items():
        if key.startswith("typedef ") and other is tp:
            return key.split(" ", 1)[1]
    keyword = "enum" if type(tp).__name__ == "EnumType" else tp.kind
    return f"{keyword} {tp.name}"


def _decls_of_file(ffi, cf: CdefFile, new: dict, declarations) -> list[Decl]:
    out = []
    prototypes = {}
    for line, stmt in _statements(cf.text):
        if stmt.startswith("typedef ") or "(" not in stmt:
            continue
        m = re.search(r"(\w+)\s*\(", stmt)
        if m:
            prototypes[m.group(1)] = (line, stmt)
    done_types = set()
    for key, tp in new.items():
        kind, name = key.split(" ", 1)
        tname = type(tp).__name__
        if kind == "function":
            line, stmt = prototypes.get(name) or (
                _line_of(cf.text, name), tp.as_raw_function().get_c_name(f" {name}") + ";")
            out.append(Decl("function", name, cf.name, line, stmt[:-1], {"decl": stmt}))
        elif kind == "macro":
            out.append(Decl("constant", name, cf.name, _line_of(cf.text, name),
                            f"#define {name} {tp}", {"value": tp}))
        elif tname in ("StructType", "UnionType"):
            if id(tp) in done_types:
                continue
            done_types.add(id(tp))
            cname = _c_name(tp, declarations)
            ctype = ffi.typeof(cname)
            fields = None
            if ctype.fields is not None:
                fields = [(fname, f.offset, ffi.sizeof(f.type), f.bitsize) for fname, f in ctype.fields]
            out.append(Decl("struct", cname, cf.name, _line_of(cf.text, cname.split()[-1]),
                            cname, {"fields": fields,
                                    "size": ffi.sizeof(ctype) if fields is not None else None,
                                    "align": ffi.alignof(ctype) if fields is not None else None}))
        elif tname == "EnumType":
            if id(tp) in done_types:
                continue
            done_types.add(id(tp))
            cname = _c_name(tp, declarations)
            named = not cname.startswith("enum $")
            if named:
                out.append(Decl("enum", cname, cf.name, _line_of(cf.text, cname.split()[-1]), cname,
                                {"size": ffi.sizeof(cname), "align": ffi.alignof(cname)}))
            for ename, value in zip(tp.enumerators, tp.enumvalues):
                out.append(Decl("constant", ename, cf.name, _line_of(cf.text, ename),
                                f"{ename} = {value}" + (f" (of {cname})" if named else ""),
                                {"value": value, "enum": cname if named else None}))
        elif kind == "typedef":
            spelled = ffi.getctype(ffi.typeof(name))
            out.append(Decl("typedef", name, cf.name, _line_of(cf.text, name),
                            f"typedef {spelled} {name}", {"type": spelled}))
        else:  # global variables and the like: not part of what we check
            out.append(Decl(kind, name, cf.name, _line_of(cf.text, name), key,
                            {"unsupported": True}))
    return out


# --------------------------------------------------------------------------------------------
# compiling the checks


@dataclasses.dataclass
class Check:
    decl: Decl
    what: str          # exists, proto, value, enum, size, align, offset, fsize, type, is_enum
    code: str
    expected: object = None
    detail: str = ""   # e.g. the field name


@dataclasses.dataclass
class Diagnostic:
    file: str
    line: int
    severity: str
    message: str
    notes: list = dataclasses.field(default_factory=list)  # (location, message)


_DIAG = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?:\d+:)? (?P<sev>fatal error|error|warning|note): "
                   r"(?P<msg>.*)$")


def _parse_diagnostics(output: str) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    for raw in output.splitlines():
        m = _DIAG.match(raw)
        if not m:
            m2 = re.match(r"^(?P<file>\S+?): (?P<sev>fatal error|error): (?P<msg>.*)$", raw)
            if m2 and not raw.startswith("In file included"):
                diags.append(Diagnostic(m2["file"], 0, m2["sev"], m2["msg"]))
            continue
        if m["sev"] == "note" and diags:
            diags[-1].notes.append((f"{m['file']}:{m['line']}", m["msg"]))
        elif m["sev"] != "note":
            diags.append(Diagnostic(m["file"], int(m["line"]), m["sev"], m["msg"]))
    return diags


def _compiler(name: str) -> str:
    exe = shutil.which(name)
    if not exe:
        raise ToolUnavailable(f"{name} not found on PATH")
    return exe


def _run_compiler(cmd: list[str], cwd=None) -> tuple[int, str]:
    env = dict(os.environ, LC_ALL="C", LANG="C")  # ASCII quotes in diagnostics
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


CXX_FLAGS = ("-std=gnu++17", "-fsyntax-only", "-w", "-fdiagnostics-plain-output", "-fmax-errors=0",
             "-x", "c++")


def _compile_cxx(source: str, include: Path) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(prefix="canna-abi-") as tmp:
        path = Path(tmp) / "abi_check.cpp"
        path.write_text(source)
        return _run_compiler([_compiler("g++"), *CXX_FLAGS, f"-I{include}", str(path)], cwd=tmp)


def _int_literal(value: int) -> str:
    return f"{value}ULL" if value >= 2 ** 63 else f"({value}LL)"


def _checks_for(d: Decl) -> list[Check]:
    n = d.name
    if d.kind == "function":
        return [Check(d, "exists", f"using canna_exists_t = decltype(&::{n});"),
                Check(d, "proto", d.data["decl"])]
    if d.kind == "constant":
        checks = [Check(d, "value", f'static_assert(({n}) == {_int_literal(d.data["value"])}, "{n}");',
                        d.data["value"])]
        if d.data.get("enum"):
            checks.append(Check(d, "enum", f"static_assert(std::is_same<decltype({n}), "
                                           f'{d.data["enum"]}>::value, "{n}");', d.data["enum"]))
        return checks
    if d.kind == "typedef":
        return [Check(d, "type", f"static_assert(std::is_same<::{n}, {d.data['type']}>::value, "
                                 f'"{n}");', d.data["type"])]
    if d.kind == "enum":
        return [Check(d, "is_enum", f'static_assert(std::is_enum<{n}>::value, "{n}");'),
                Check(d, "size", f'static_assert(sizeof({n}) == {d.data["size"]}, "{n}");',
                      d.data["size"]),
                Check(d, "align", f'static_assert(alignof({n}) == {d.data["align"]}, "{n}");',
                      d.data["align"])]
    if d.kind == "struct":
        if d.data["fields"] is None:  # opaque: CANN must declare the name
            return [Check(d, "exists", f"using canna_exists_t = {n} *;")]
        checks = [Check(d, "size", f'static_assert(sizeof({n}) == {d.data["size"]}, "{n}");',
                        d.data["size"]),
                  Check(d, "align", f'static_assert(alignof({n}) == {d.data["align"]}, "{n}");',
                        d.data["align"])]
        for fname, offset, fsize, bitsize in d.data["fields"]:
            if bitsize >= 0:
                continue  # bit-fields: covered by the struct's size only
            checks.append(Check(d, "offset", f"static_assert(offsetof({n}, {fname}) == {offset}, "
                                             f'"{n}.{fname}");', offset, fname))
            checks.append(Check(d, "fsize", f"static_assert(sizeof((({n} *)nullptr)->{fname}) == "
                                            f'{fsize}, "{n}.{fname}");', fsize, fname))
        return checks
    return []


# C++-only keywords that are fine as parameter names in C; renamed in our redeclarations
CXX_ONLY_KEYWORDS = frozenset(
    "alignas alignof and and_eq asm bitand bitor catch class co_await "
    "co_return co_yield compl concept const_cast consteval constexpr constinit decltype delete "
    "dynamic_cast explicit export false friend mutable namespace new noexcept not not_eq nullptr "
    "operator or or_eq private protected public reinterpret_cast requires static_assert "
    "static_cast template this thread_local throw true try typeid typename using virtual "
    "xor xor_eq".split())


def _translation_unit(headers: list[str], checks: list[Check]) -> str:
    lines = ["#include <cstddef>", "#include <cstdint>", "#include <type_traits>"]
    lines += [f'#include "{h}"' for h in headers]
    # prototypes last: a missing function must be detected before our redeclaration declares it
    ordered = sorted(enumerate(checks), key=lambda ic: ic[1].what == "proto")
    keywords = sorted({w for c in checks if c.what == "proto"
                       for w in re.findall(r"\w+", c.code) if w in CXX_ONLY_KEYWORDS})
    in_extern = False
    for idx, c in ordered:
        if c.what == "proto" and not in_extern:
            lines += [f"#define {w} canna_param_{w}" for w in keywords]
            lines.append('extern "C" {')
            in_extern = True
        lines.append(f'#line 1 "@canna/{idx}"')
        lines.append(c.code.replace("canna_exists_t", f"canna_exists_{idx}"))
    if in_extern:
        lines.append("}")
    return "\n".join(lines) + "\n"


def _spell_types(exprs: list[str], headers: list[str], include: Path) -> dict[str, str]:
    """How g++ spells the type of each C++ type-id in CANN's headers (for the report)."""
    if not exprs:
        return {}
    lines = ["#include <cstddef>", "#include <cstdint>"] + [f'#include "{h}"' for h in headers]
    lines.append("template <class T> struct canna_show;")
    for i, expr in enumerate(exprs):
        lines += [f'#line 1 "@canna/{i}"', f"canna_show<{expr}> canna_v{i};"]
    _, out = _compile_cxx("\n".join(lines) + "\n", include)
    spelled = {}
    for diag in _parse_diagnostics(out):
        m = re.match(r"@canna/(\d+)$", diag.file)
        t = re.search(r"'canna_show<(.*)> canna_v\d+'", diag.message)
        if m and t:
            spelled[exprs[int(m.group(1))]] = t.group(1)
    return spelled


@dataclasses.dataclass
class Result:
    decl: Decl
    status: str
    messages: list

    def line(self) -> str:
        where = f"{self.decl.file}:{self.decl.line}"
        msg = "; ".join(self.messages)
        return f"{self.decl.name} [{where}] {self.status}" + (f": {msg}" if msg else "")


@dataclasses.dataclass
class Report:
    include: Path
    files: list
    skipped_files: list
    results: list
    global_errors: list

    @property
    def problems(self) -> list[Result]:
        return [r for r in self.results if r.status in PROBLEMS]

    @property
    def unchecked(self) -> list[Result]:
        return [r for r in self.results if r.status == UNCHECKED]

    @property
    def ok(self) -> bool:
        return not self.problems and not self.global_errors

    def by_name(self, name: str) -> Result:
        for r in self.results:
            if r.decl.name == name:
                return r
        raise KeyError(name)

    def format(self, verbose: bool = False) -> str:
        out = [f"CANN headers: {describe_include_dir(self.include)}",
               "cdef files: " + ", ".join(f"{f.name} (mirrors {' '.join(f.headers)})"
                                          for f in self.files)]
        if self.skipped_files:
            out.append("not checked: " + ", ".join(self.skipped_files))
        for kind in ("function", "constant", "typedef", "enum", "struct"):
            rs = [r for r in self.results if r.decl.kind == kind]
            if rs:
                counts = {s: sum(r.status == s for r in rs) for s in (OK, *PROBLEMS, UNCHECKED)}
                out.append(f"{kind}s: {len(rs)}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
        for err in self.global_errors:
            out.append(f"ERROR: {err}")
        if self.problems:
            out.append("problems:")
            out += [f"  {r.line()}" for r in self.problems]
        if self.unchecked:
            out.append("unchecked (their CANN header is not in the include dir):")
            out += [f"  {r.line()}" for r in self.unchecked]
        if verbose:
            out.append("all:")
            out += [f"  {r.line()}" for r in self.results]
        out.append("ABI check: " + ("OK" if self.ok else
                                    f"FAILED ({len(self.problems)} problems"
                                    + (", compile errors" if self.global_errors else "") + ")"))
        return "\n".join(out)


def _reduces_to(diag: Diagnostic):
    for _, note in diag.notes:
        m = re.search(r"the comparison reduces to '\((.*) == (.*)\)'", note)
        if m:
            return m.group(1)
    return None


def _cann_location(diag: Diagnostic, include: Path) -> str:
    for loc, note in diag.notes:
        if re.match(r"(previous|old) declaration", note):
            return loc.replace(f"{include}/", "")
    return ""


def _quoted(msg: str) -> str | None:
    m = re.search(r"'(.*)'", msg)
    return m.group(1) if m else None


def check(files: list[CdefFile], include: Path, skipped_files=()) -> Report:
    """Compile the checks of every declaration of ``files`` against the headers in ``include``."""
    include = Path(include)
    _, decls = load_declarations(files)
    file_of = {f.name: f for f in files}
    headers, absent = [], set()
    for f in files:
        for h in f.headers:
            if (include / h).is_file():
                if h not in headers:
                    headers.append(h)
            else:
                absent.add(h)

    checks = [c for d in decls for c in _checks_for(d)]
    rc, out = _compile_cxx(_translation_unit(headers, checks), include)
    diags = _parse_diagnostics(out)
    per_check: dict[int, list[Diagnostic]] = {}
    global_errors = []
    for diag in diags:
        m = re.match(r"@canna/(\d+)$", diag.file)
        if m:
            per_check.setdefault(int(m.group(1)), []).append(diag)
        elif diag.severity != "warning":
            global_errors.append(f"{diag.file}:{diag.line}: {diag.message}")
    if rc != 0 and not diags:
        global_errors.append(f"g++ failed without diagnostics: {out.strip()[:2000]}")

    # second pass, only for failures: how CANN spells the types we compare against
    to_spell = []
    for i, c in enumerate(checks):
        if i in per_check and c.what in ("type", "enum"):
            to_spell.append(f"::{c.decl.name}" if c.what == "type" else f"decltype({c.decl.name})")
    spelled = _spell_types(to_spell, headers, include) if to_spell else {}

    results = []
    by_decl: dict[int, list[tuple[Check, list[Diagnostic]]]] = {}
    for i, c in enumerate(checks):
        by_decl.setdefault(id(c.decl), []).append((c, per_check.get(i, [])))
    for d in decls:
        if d.data.get("unsupported"):
            results.append(Result(d, UNCHECKED, [f"declaration kind '{d.kind}' is not checked"]))
            continue
        missing_headers = [h for h in file_of[d.file].headers if h in absent]
        status, messages = OK, []
        for c, ds in by_decl.get(id(d), []):
            if not ds:
                continue
            s, msg = _explain(c, ds, spelled, include)
            if msg not in messages:
                messages.append(msg)
            if status == OK or s == MISSING:
                status = s
        if status in (MISSING, ERROR) and missing_headers:
            status = UNCHECKED
            messages.insert(0, f"needs {', '.join(missing_headers)}, not in {include}")
        results.append(Result(d, status, messages))
    return Report(include, list(files), list(skipped_files), results, global_errors)


def _explain(c: Check, diags: list[Diagnostic], spelled: dict, include: Path) -> tuple[str, str]:
    d, first = c.decl, diags[0]
    text = "; ".join(x.message for x in diags)
    undeclared = re.search(r"has not been declared|was not declared|does not name a type|"
                           r"is not a (type|member)|not declared in this scope", first.message)
    if c.what == "exists":
        return MISSING, f"not declared in CANN's headers ({first.message})"
    if c.what == "proto":
        cann = next((n for _, n in first.notes if re.match(r"(previous|old) declaration", n)), None)
        if cann:
            ours = _quoted(first.message) or d.ours
            loc = _cann_location(first, include)
            return MISMATCH, (f"ours `{ours}`, CANN's `{_quoted(cann) or cann}`"
                              + (f" ({loc})" if loc else ""))
        return ERROR, f"our prototype `{d.ours}` does not compile against CANN's headers: {text}"
    if c.what == "value":
        if undeclared:
            return MISSING, f"not declared in CANN's headers ({first.message})"
        cann = _reduces_to(first)
        return MISMATCH, f"ours {c.expected}, CANN's {cann if cann is not None else '(differs)'}"
    if c.what == "enum":
        if undeclared:
            return MISSING, f"not declared in CANN's headers ({first.message})"
        cann = spelled.get(f"decltype({d.name})", "another type")
        return MISMATCH, f"ours is an enumerator of {c.expected}, CANN's has type {cann}"
    if c.what == "type":
        if undeclared:
            return MISSING, f"typedef not declared in CANN's headers ({first.message})"
        return MISMATCH, (f"ours `{c.expected}`, CANN's `{spelled.get('::' + d.name, '(differs)')}`")
    if c.what == "is_enum":
        return (MISSING if undeclared else MISMATCH), (
            f"not declared in CANN's headers ({first.message})" if undeclared
            else "CANN's is not an enum type")
    if undeclared and c.what in ("size", "align", "offset", "fsize"):
        return MISSING, f"not declared in CANN's headers ({first.message})"
    if c.what in ("size", "align", "offset", "fsize"):
        if "has no member named" in text or "no member" in text:
            return MISMATCH, f"CANN's {d.name} has no field '{c.detail}'"
        label = {"size": "sizeof", "align": "alignof", "offset": f"offsetof .{c.detail}",
                 "fsize": f"sizeof .{c.detail}"}[c.what]
        cann = _reduces_to(first)
        if cann is None:
            return ERROR, f"{label}: {text}"
        return MISMATCH, f"{label} ours {c.expected}, CANN's {cann}"
    return ERROR, text


# --------------------------------------------------------------------------------------------
# compiling C sources (the simulator) against CANN's headers


@dataclasses.dataclass
class CompileResult:
    source: Path
    ok: bool
    output: str
    missing_header: str | None = None   # a CANN header the source includes that is not available


C_FLAGS = ("-fsyntax-only", "-std=gnu11", "-Wall", "-Werror", "-DCANNA_WITH_CANN_HEADERS",
           "-fdiagnostics-plain-output")


def compile_c_sources(sources, include: Path, extra_flags=()) -> list[CompileResult]:
    """gcc -fsyntax-only each C source against CANN's headers (in parallel)."""
    cc = _compiler("gcc")

    def one(src: Path) -> CompileResult:
        rc, out = _run_compiler([cc, *C_FLAGS, f"-I{include}", *extra_flags, str(src)],
                                cwd=src.parent)
        m = re.search(r"fatal error: ([\w./-]+\.h): No such file or directory", out)
        missing = m.group(1) if m and not (Path(include) / m.group(1)).exists() else None
        return CompileResult(src, rc == 0, out.strip(), missing)

    sources = [Path(s) for s in sources]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, sources))


# --------------------------------------------------------------------------------------------


def run(include: Path, cdef_dir: Path = CDEF_DIR) -> Report:
    files, skipped = discover_cdef_files(cdef_dir)
    if not files:
        raise ValueError(f"no *_types.h / *_errors.h / *_funcs.h in {cdef_dir}")
    return check(files, include, skipped)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--headers", help="CANN include dir (with acl/acl.h); default: "
                                      "$CANNA_CANN_INCLUDE or the torch-npu wheel's headers")
    ap.add_argument("--cdef-dir", default=str(CDEF_DIR), help="folder of our cdef files")
    ap.add_argument("--cache-dir", help=f"download cache (default {default_cache_dir()})")
    ap.add_argument("--no-sim", action="store_true", help="skip compiling the simulator sources")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every declaration")
    args = ap.parse_args(argv)
    try:
        include = get_cann_include(args.headers, Path(args.cache_dir) if args.cache_dir else None,
                                   log=lambda m: print(m, file=sys.stderr))
        report = run(include, Path(args.cdef_dir))
    except (HeadersUnavailable, ToolUnavailable) as exc:
        print(f"ABI check not run: {exc}", file=sys.stderr)
        return 2
    print(report.format(args.verbose))
    failed = not report.ok
    if not args.no_sim:
        for folder in SIM_SOURCE_DIRS:
            sources = sorted(folder.glob("*.c"))
            if not sources:
                print(f"{folder.relative_to(REPO)}: no C sources, not compiled")
                continue
            for r in compile_c_sources(sources, include):
                name = r.source.relative_to(REPO)
                if r.ok:
                    print(f"{name}: compiles against CANN's headers")
                elif r.missing_header:
                    print(f"{name}: not compiled: needs {r.missing_header}, not in {include}")
                else:
                    failed = True
                    print(f"{name}: FAILS against CANN's headers:\n{r.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
