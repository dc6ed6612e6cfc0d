"""Loading a backend: the real CANN runtime or the simulator (docs/DESIGN.md §2).

``CANNA_BACKEND=auto|ascend|sim`` (default ``auto``). ``auto`` uses a real CANN install when one
is found, else the simulator. The search for the real runtime (after NVIDIA's
``cuda.pathfinder``; AscendCL names both ``libacl_rt.so`` (current) and ``libascendcl.so``
(compatibility), per CANN 9.x's runtime docs, "header and library" table):

1. a ``libacl_rt`` / ``libascendcl`` already loaded in this process (e.g. ``torch_npu`` imported first);
2. ``$ASCEND_HOME_PATH`` and ``$ASCEND_TOOLKIT_HOME`` (``lib64/`` under each);
3. the system loader (``LD_LIBRARY_PATH``, ``ld.so.cache``);
4. ``/usr/local/Ascend/cann/lib64`` and ``/usr/local/Ascend/ascend-toolkit/latest/lib64``.

The binding is cffi's out-of-line ABI mode: no CANN header or compiler is needed. Symbols are
resolved lazily; one that the loaded CANN version lacks raises :class:`NotSupportedError` only
when it is used (torch_npu does the same).
"""
from __future__ import annotations

import os
import platform
import threading
from pathlib import Path

from ._constants import ErrorCode as E
from ._errors import BackendNotFoundError, NotSupportedError

try:  # generated at install by setup.py (cffi_modules)
    from ._acl_ffi import ffi
except ImportError:  # a source checkout that was not built: parse the declarations now
    from ._cdef import make_ffi

    ffi = make_ffi()

__all__ = ["ffi", "backend", "Backend", "SIM_LIBRARY", "op_library", "OpLibrary", "OPS_SIM_LIBRARY"]

#: the simulator library built at install
SIM_LIBRARY = Path(__file__).resolve().parent / "_sim" / "libascendcl_sim.so"

_RUNTIME_NAMES = ("libacl_rt.so", "libascendcl.so")
_DEFAULT_ROOTS = ("/usr/local/Ascend/cann", "/usr/local/Ascend/ascend-toolkit/latest")


def _dlopen(path: str):
    # RTLD_GLOBAL: the op libraries loaded later resolve the runtime's symbols from it, as CANN's
    # libopapi/libnnopbase do through their own dependency on libascendcl
    return ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_GLOBAL)


class _LazyLib:
    """Attribute access to one or more dlopen-ed libraries (the first that exports a symbol wins).
    A missing symbol raises NotSupportedError saying where it was looked for; found symbols are
    cached as plain attributes (no overhead after the first use). ``_lib`` is the first library."""

    def __init__(self, libs, where: str):
        self.__dict__["_libs"] = list(libs)
        self.__dict__["_lib"] = self._libs[0]
        self.__dict__["_where"] = where

    def __getattr__(self, name: str):
        for lib in self._libs:
            try:
                value = getattr(lib, name)
            except (AttributeError, NotImplementedError):
                continue
            self.__dict__[name] = value
            return value
        raise NotSupportedError(E.ACL_ERROR_API_NOT_SUPPORT, name, f"{name} is not available in {self._where}")

    def has(self, name: str) -> bool:
        """Whether the library exports ``name``."""
        try:
            getattr(self, name)
        except NotSupportedError:
            return False
        return True


class Backend:
    """The loaded runtime library and how it was found (see :func:`acl_rt.backend_info`)."""

    __slots__ = ("name", "lib", "path", "found_via", "searched", "is_sim")

    def __init__(self, name, lib, path, found_via, searched):
        self.name = name
        self.lib = _LazyLib((lib,), f"this CANN version ({path})")
        self.path = path
        self.found_via = found_via
        self.searched = searched
        # the simulator exports aclsim* functions; a real CANN never does
        self.is_sim = self.lib.has("aclsimGetVersion")


_lock = threading.Lock()
_backend: Backend | None = None


def backend() -> Backend:
    """The process-wide backend, loaded on first use."""
    b = _backend
    if b is None:
        b = _load()
    return b


def _loaded_in_process():
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.rstrip("\n").split(maxsplit=5)
                path = parts[5] if len(parts) == 6 else ""
                if os.path.basename(path) in _RUNTIME_NAMES:
                    return path
    except OSError:
        pass
    return None


def _find_ascend():
    """Search for a real CANN runtime. Returns (lib, path, found_via, searched)."""
    searched: list[tuple[str, str]] = []

    def try_path(path: str, via: str):
        if not os.path.exists(path):
            searched.append((path, "not found"))
            return None
        try:
            lib = _dlopen(path)
        except OSError as e:
            searched.append((path, f"cannot be loaded: {e}"))
            return None
        return lib, path, via, searched

    path = _loaded_in_process()
    if path:
        hit = try_path(path, "already loaded in the process")
        if hit:
            return hit
    else:
        searched.append(("libraries already loaded in the process", "none of " + ", ".join(_RUNTIME_NAMES)))
    arch = platform.machine()
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = os.environ.get(var)
        if not root:
            searched.append((f"${var}", "not set"))
            continue
        for sub in ("lib64", f"{arch}-linux/lib64"):
            for name in _RUNTIME_NAMES:
                hit = try_path(os.path.join(root, sub, name), f"${var}")
                if hit:
                    return hit
    for name in _RUNTIME_NAMES:
        try:
            lib = _dlopen(name)
        except OSError:
            searched.append((f"{name} through the system loader (LD_LIBRARY_PATH, ld.so.cache)", "not found"))
            continue
        return lib, name, "system loader", searched
    for root in _DEFAULT_ROOTS:
        for name in _RUNTIME_NAMES:
            hit = try_path(os.path.join(root, "lib64", name), "default install location")
            if hit:
                return hit
    return None, None, None, searched


def _load_sim(searched):
    if not SIM_LIBRARY.exists():
        raise BackendNotFoundError(
            f"the canna simulator library {SIM_LIBRARY} is missing: install canna with "
            "`pip install -e .` (it builds the simulator; a C compiler is required)", searched)
    return Backend("sim", _dlopen(str(SIM_LIBRARY)), str(SIM_LIBRARY), "built with canna", searched)


def _load() -> Backend:
    global _backend
    with _lock:
        if _backend is not None:
            return _backend
        choice = os.environ.get("CANNA_BACKEND", "auto").strip().lower() or "auto"
        if choice not in ("auto", "ascend", "sim"):
            raise ValueError(f"CANNA_BACKEND={choice!r}: expected 'auto', 'ascend' or 'sim'")
        if choice == "sim":
            _backend = _load_sim([])
            return _backend
        lib, path, via, searched = _find_ascend()
        if lib is not None:
            _backend = Backend("ascend", lib, path, via, searched)
        elif choice == "ascend":
            places = "\n".join(f"  - {place}: {result}" for place, result in searched)
            raise BackendNotFoundError(
                "CANNA_BACKEND=ascend but no CANN runtime (libacl_rt.so / libascendcl.so) was found. "
                f"Searched:\n{places}\nInstall CANN and source its set_env.sh (which sets "
                "ASCEND_HOME_PATH), or use CANNA_BACKEND=sim for the simulator.", searched)
        else:
            _backend = _load_sim(searched)
        return _backend


# --------------------------------------------------------------------------------------------
# The op libraries (aclnn): CANN's libnnopbase (aclCreateTensor & co.) + libopapi (the ops), or the
# simulator's kernels/_sim/libopapi_sim.so. Loaded lazily on first use, so acl_rt imports and runs
# without them. Declarations: _cdef/nn_*.h (which library exports which symbol: see nn_funcs.h).

#: the simulator's op library, built at install
OPS_SIM_LIBRARY = Path(__file__).resolve().parent.parent / "kernels" / "_sim" / "libopapi_sim.so"

#: CANN's op libraries, in load order: the meta API first, then the all-in-one op library or the
#: split math/nn ones ("do not mix them")
_OP_META = "libnnopbase.so"
_OP_SETS = (("libopapi.so",), ("libopapi_math.so", "libopapi_nn.so"))

#: the BLAS the simulator's op library uses (looked up by symbol; see kernels/_sim/op_blas.c)
_SIM_BLAS_PACKAGES = ("scipy_openblas64", "scipy_openblas32")


class OpLibrary:
    """The loaded aclnn op libraries (see :func:`op_library`).

    Attributes:
        lib: symbol access to ``aclCreateTensor`` & co. and every ``aclnn*`` declared in
            ``_cdef/nn_funcs.h`` (a missing one raises NotSupportedError when used).
        paths: the library files loaded, in order.
        found_via: how they were found.
        blas: the simulator only: the BLAS library file loaded for it (None elsewhere).
    """

    __slots__ = ("lib", "paths", "found_via", "blas", "_keep")

    def __init__(self, libs, paths, found_via, blas=None, keep=()):
        self.lib = _LazyLib(libs, f"the loaded op libraries ({', '.join(paths)})")
        self.paths = list(paths)
        self.found_via = found_via
        self.blas = blas
        self._keep = keep


_op_lock = threading.Lock()
_op_library: OpLibrary | None = None
_op_error: Exception | None = None


def op_library() -> OpLibrary:
    """The process-wide aclnn op libraries, loaded on first use (after the runtime).

    Real CANN: ``libnnopbase.so`` plus ``libopapi.so`` or the split ``libopapi_math.so`` /
    ``libopapi_nn.so``, from the runtime library's directory, then the system loader. Simulator:
    ``kernels/_sim/libopapi_sim.so`` (and the OpenBLAS it uses, loaded RTLD_GLOBAL first).

    Raises:
        BackendNotFoundError: the op libraries are not installed (the error names every place
            searched); the runtime itself keeps working.
    """
    lib = _op_library
    if lib is not None:
        return lib
    with _op_lock:
        if _op_library is not None:
            return _op_library
        if _op_error is not None:
            raise _op_error
        return _load_ops()


def op_library_loaded() -> OpLibrary | None:
    """The op libraries if already loaded, else None (never loads them)."""
    return _op_library


def _preload_sim_blas():
    """dlopen the OpenBLAS of the scipy-openblas64 (or -32) wheel with RTLD_GLOBAL so the
    simulator's op library finds its CBLAS symbols. Returns (handle, path) or (None, None)."""
    import importlib

    if os.environ.get("CANNA_SIM_BLAS"):
        return None, os.environ["CANNA_SIM_BLAS"]   # the op library loads it itself
    for name in _SIM_BLAS_PACKAGES:
        try:
            mod = importlib.import_module(name)
            path = os.path.join(mod.get_lib_dir(), f"lib{mod.get_library()}.so")
            if not os.path.exists(path):
                continue
            return _dlopen(path), path
        except Exception:  # a broken wheel: try the next one, the op library reports the absence
            continue
    return None, None


def _load_ops() -> OpLibrary:
    global _op_library, _op_error
    b = backend()
    blas, blas_path = _preload_sim_blas() if b.is_sim else (None, None)
    keep = (blas,) if blas is not None else ()
    if b.name == "sim":
        if not OPS_SIM_LIBRARY.exists():
            _op_error = BackendNotFoundError(
                f"the canna simulator's op library {OPS_SIM_LIBRARY} is missing: reinstall canna with "
                "`pip install -e .` (it builds kernels/_sim; a C compiler is required)",
                [(str(OPS_SIM_LIBRARY), "not found")])
            raise _op_error
        lib = _dlopen(str(OPS_SIM_LIBRARY))
        _op_library = OpLibrary([lib], [str(OPS_SIM_LIBRARY)], "built with canna", blas_path, keep)
        return _op_library
    # a CANN install (or the simulator laid out like one, e.g. an instrumented build): CANN's names
    searched: list[tuple[str, str]] = []
    dirs = []
    if b.path and os.path.isabs(b.path):
        dirs.append(os.path.dirname(os.path.realpath(b.path)))
        dirs.append(os.path.dirname(b.path))
    for d in dict.fromkeys(dirs):
        meta = os.path.join(d, _OP_META)
        if not os.path.exists(meta):
            searched.append((meta, "not found"))
            continue
        for names in _OP_SETS:
            paths = [os.path.join(d, n) for n in names]
            missing = [p for p in paths if not os.path.exists(p)]
            if missing:
                searched.extend((p, "not found") for p in missing)
                continue
            try:
                libs = [_dlopen(meta)] + [_dlopen(p) for p in paths]
            except OSError as e:
                searched.append((", ".join(paths), f"cannot be loaded: {e}"))
                continue
            _op_library = OpLibrary(libs, [meta] + paths, "next to the runtime library", blas_path, keep)
            return _op_library
    for names in _OP_SETS:   # the system loader
        try:
            libs = [_dlopen(_OP_META)] + [_dlopen(n) for n in names]
        except OSError as e:
            searched.append((f"{_OP_META} + {' + '.join(names)} through the system loader", f"not loadable: {e}"))
            continue
        _op_library = OpLibrary(libs, [_OP_META, *names], "system loader", blas_path, keep)
        return _op_library
    places = "\n".join(f"  - {place}: {result}" for place, result in searched)
    _op_error = BackendNotFoundError(
        f"the CANN op libraries ({_OP_META} with libopapi.so, or libopapi_math.so + libopapi_nn.so) were "
        f"not found. Searched:\n{places}\nInstall the CANN ops packages (ops-math, ops-nn) and source "
        "set_env.sh.", searched)
    raise _op_error
