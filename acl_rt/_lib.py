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

from ._errors import BackendNotFoundError, NotSupportedError

try:  # generated at install by setup.py (cffi_modules)
    from ._acl_ffi import ffi
except ImportError:  # a source checkout that was not built: parse the declarations now
    from ._cdef import make_ffi

    ffi = make_ffi()

__all__ = ["ffi", "backend", "Backend", "SIM_LIBRARY"]

#: the simulator library built at install
SIM_LIBRARY = Path(__file__).resolve().parent / "_sim" / "libascendcl_sim.so"

_RUNTIME_NAMES = ("libacl_rt.so", "libascendcl.so")
_DEFAULT_ROOTS = ("/usr/local/Ascend/cann", "/usr/local/Ascend/ascend-toolkit/latest")


def _dlopen(path: str):
    # RTLD_GLOBAL: the op libraries loaded later resolve the runtime's symbols from it, as CANN's
    # libopapi/libnnopbase do through their own dependency on libascendcl
    return ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_GLOBAL)


class _LazyLib:
    """Attribute access to a dlopen-ed library. A missing symbol raises NotSupportedError naming
    the library; found symbols are cached as plain attributes (no overhead after the first use)."""

    def __init__(self, lib, path: str):
        self.__dict__["_lib"] = lib
        self.__dict__["_path"] = path

    def __getattr__(self, name: str):
        try:
            value = getattr(self._lib, name)
        except (AttributeError, NotImplementedError):
            raise NotSupportedError(
                200001, name, f"{name} is not available in this CANN version ({self._path})"
            ) from None
        self.__dict__[name] = value
        return value

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
        self.lib = _LazyLib(lib, path)
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
