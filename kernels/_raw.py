"""Custom kernels: compile, load and launch user kernels (after CuPy's ``RawKernel``/``RawModule``
and cuda.core's ``Program``/``ObjectCode``/``launch``; docs/DESIGN.md §3.3, §6).

::

    import numpy as np, kernels
    add = kernels.RawKernel(r'''
        #include "canna_kernel.h"
        CANNA_KERNEL void add_custom(GM_ADDR x, GM_ADDR y, GM_ADDR z, uint32_t n) {
            uint32_t per = (n + GetBlockNum() - 1) / GetBlockNum(), lo = GetBlockIdx() * per;
            for (uint32_t i = lo; i < n && i < lo + per; ++i)
                ((float *)z)[i] = ((float *)x)[i] + ((float *)y)[i];
        }''', "add_custom")
    x = np.arange(4, dtype=np.float32); z = np.empty_like(x)
    add.launch(2, x, x, z, x.size)        # asynchronous, on the current stream
    acl_rt.current_stream().synchronize()

Sources compile lazily (first launch, or ``compile()``), once per process and once per machine:
binaries are cached on disk (``kernels.kernel_cache_info()``). On the simulator the host C compiler
builds them; on a real install the Ascend toolchain does, or a prebuilt device binary (``.o``) is
loaded with ``RawModule(path=...)``.
"""
from __future__ import annotations

import collections
import ctypes
import hashlib
import os
import re
import struct
import threading
from pathlib import Path

import acl_rt
from acl_rt import ErrorCode as E
from acl_rt import InvalidArgumentError
from acl_rt import lowlevel as rt
from acl_rt.lowlevel import backend, ffi

from . import _compiler
from ._args import make_packer
from ._compiler import CompileError
from ._signature import (KernelSignature, KernelSourceError, clean_source, looks_like_cxx, parse_kernels,
                         parse_signature)

__all__ = ["RawModule", "RawKernel", "KernelNotFoundError", "CompileError", "KernelSourceError",
           "kernel_cache_info", "MAX_BLOCKS"]

#: numBlocks limit of a launch (Ascend C: blockDim in [1, 65535])
MAX_BLOCKS = 65535
_ATTR_TIMEOUT_US = int(rt.LaunchKernelAttrId.ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US)


class KernelNotFoundError(LookupError):
    """No kernel of that name in the source or binary.

    Attributes: ``name`` (the name asked for), ``available`` (the kernels there are)."""

    def __init__(self, name: str, available, where: str, note: str = ""):
        self.name = name
        self.available = tuple(available)
        have = ", ".join(self.available) if self.available else "none"
        super().__init__(f"no kernel named {name!r} in {where} (kernels there: {have}){note}")


def kernel_cache_info() -> dict:
    """This process's kernel compile counters: ``compiles``, ``disk_hits``, ``memory_hits``, and the
    cache ``directory`` (``$CANNA_KERNEL_CACHE`` or ``~/.cache/canna/kernels``)."""
    return _compiler.cache_info()


# loaded binaries, process-wide: (binary id, runtime generation, device) -> _Loaded
_loaded: dict = {}
_load_lock = threading.Lock()


class _Loaded:
    __slots__ = ("handle", "funcs")

    def __init__(self, handle):
        self.handle = handle
        self.funcs = {}


def _is_source_path(p: str) -> bool:
    return p.lower().endswith(_compiler.SOURCE_SUFFIXES)


class RawModule:
    """A kernel source (or binary) holding one or more kernels.

    Args:
        code: the kernel source (``str``), or a compiled binary (``bytes``: a simulator binary on
            the simulator, a device ``.o`` on a real install).
        path: instead of ``code``, a file: a source (``.c``, ``.cc``, ``.cpp``, ``.cxx``, ``.cce``, ``.asc``;
            its directory is on the include path) or a binary (``.so`` / ``.o``).
        options: extra compiler options, e.g. ``("-DTILE=64", "-O3")`` (part of the cache key).
        backend: the toolchain: ``None`` (the host compiler ``"cc"`` on the simulator, ``"bisheng"``
            on a real install), ``"cc"`` or ``"bisheng"``.

    Raises:
        TypeError / ValueError: bad arguments. KernelSourceError: a kernel's declaration cannot be
        used (found at construction; compiling happens on first use).
    """

    def __init__(self, code: str | bytes | None = None, *, path: str | os.PathLike | None = None,
                 options=(), backend: str | None = None):
        if (code is None) == (path is None):
            raise TypeError("RawModule: give exactly one of code (source text or binary bytes) and path")
        if isinstance(options, str):
            options = (options,)
        try:
            options = tuple(options)
        except TypeError:
            raise TypeError(f"RawModule: options must be a sequence of str, not {type(options).__name__}") from None
        for o in options:
            if not isinstance(o, str):
                raise TypeError(f"RawModule: options must be str, got {type(o).__name__} {o!r}")
        if backend not in (None, "cc", "bisheng", "ccec"):
            raise ValueError(f"RawModule: backend must be None, 'cc' (host compiler, simulator) or 'bisheng' "
                             f"(Ascend toolchain), not {backend!r}")
        self._options = options
        self._backend = backend
        self._source = None
        self._source_path = None
        self._binary_data = None
        self._binary_path = None
        self._kernels: dict | None = None   # name -> KernelSignature (from the source)
        self._cache = None
        self._build_lock = threading.Lock()
        if path is not None:
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"RawModule: path must be a str or os.PathLike, not {type(path).__name__}")
            p = Path(path).expanduser().resolve()
            if not p.is_file():
                raise FileNotFoundError(f"RawModule: no such file: {p}")
            if _is_source_path(p.name):
                self._source = p.read_text()
                self._source_path = p
            else:
                self._binary_path = str(p)
        elif isinstance(code, str):
            self._source = code
        elif isinstance(code, (bytes, bytearray, memoryview)):
            self._binary_data = bytes(code)
            if not self._binary_data:
                raise ValueError("RawModule: the binary is empty")
        else:
            raise TypeError(f"RawModule: code must be source text (str) or a binary (bytes), not "
                            f"{type(code).__name__}")
        if self._source is not None:
            dirs = ([self._source_path.parent] if self._source_path else []) + \
                [o[2:] for o in options if o.startswith("-I") and len(o) > 2]
            self._kernels = parse_kernels(self._live_source(), include_dirs=dirs)
            self._name = self._source_path.name if self._source_path else "kernel source"
        else:
            self._name = Path(self._binary_path).name if self._binary_path else "binary data"
        self._id = None

    # -- introspection --------------------------------------------------------------------------
    @property
    def kernel_names(self) -> tuple:
        """Names of the kernels the source defines (for a binary: known after loading)."""
        if self._kernels is not None:
            return tuple(self._kernels)
        return ()

    @property
    def options(self) -> tuple:
        return self._options

    @property
    def cache(self) -> str | None:
        """How the binary was obtained: ``"compiled"``, ``"disk"`` (on-disk cache hit), ``"memory"``
        (already compiled in this process), ``"binary"`` (given as a binary), None (not yet)."""
        if self._source is None:
            return "binary"
        return self._cache

    @property
    def binary_path(self) -> str | None:
        """The compiled binary's file (compiles when needed; None for binaries given as bytes)."""
        if self._source is not None:
            self._compile()
        return self._binary_path

    def __repr__(self):
        names = ", ".join(self.kernel_names) or "?"
        return f"<kernels.RawModule {self._name}: {names}>"

    # -- compiling and loading ------------------------------------------------------------------
    def compile(self) -> "RawModule":
        """Compile now (normally done at the first launch). Returns self.

        Raises:
            CompileError: with the compiler's messages.
        """
        self._compile()
        return self

    def _compile(self) -> str | None:
        if self._source is None or self._binary_path is not None:
            return self._binary_path
        with self._build_lock:
            if self._binary_path is not None:
                return self._binary_path
            rt.ensure("RawModule.compile")
            tc = self._toolchain()
            language = tc.language
            soc = None
            if tc.kind == "bisheng":
                soc = acl_rt.Device(rt.current_device_id()).soc_name
            name = self._source_path.name if self._source_path else ("kernel.cpp" if language == "c++" else "kernel.c")
            path, how = _compiler.compile_source(self._source, options=self._options, toolchain=tc,
                                                 kernels=self._kernels, source_name=name,
                                                 source_path=self._source_path, soc=soc)
            self._cache = how
            self._binary_path = path
            return path

    def _toolchain(self) -> _compiler.Toolchain:
        """The toolchain that builds this source (raises CompileError when it is not installed)."""
        language = "c++" if (any(o.startswith(("-std=c++", "-std=gnu++")) or o == "-xc++" for o in self._options)
                             or "-x" in self._options and "c++" in self._options
                             or (self._source_path is not None and self._source_path.suffix != ".c")
                             or looks_like_cxx(self._source)) else "c"
        return _compiler.find_toolchain(self._backend, language=language, simulator=backend().is_sim)

    def _live_source(self) -> str:
        """The source as the preprocessor keeps it (inactive #if branches blanked): the text the
        kernels are read from, so a kernel in `#if 0` is not one (``_compiler.live_source``)."""
        if not _compiler.has_conditionals(self._source):
            return self._source
        try:
            tc = self._toolchain()
        except CompileError:
            return self._source   # the build will report the missing compiler
        name = self._source_path.name if self._source_path else ("kernel.cpp" if tc.language == "c++" else "kernel.c")
        return _compiler.live_source(self._source, options=self._options, toolchain=tc, source_name=name,
                                     source_path=self._source_path)

    def _binary_id(self):
        if self._id is None:
            if self._binary_data is not None:
                self._id = ("data", hashlib.sha256(self._binary_data).hexdigest())
            else:
                self._id = ("file", self._compile())
        return self._id

    def _load(self, device_id: int) -> _Loaded:
        """The binary loaded on ``device_id`` (loads once per device and runtime session)."""
        key = (self._binary_id(), rt.generation(), device_id)
        ld = _loaded.get(key)
        if ld is not None:
            return ld
        with _load_lock:
            ld = _loaded.get(key)
            if ld is not None:
                return ld
            api = "RawModule.load"
            rt.activate(device_id, api)
            lib = backend().lib
            cell = ffi.new("aclrtBinHandle *")
            if self._binary_data is not None:
                buf = ffi.from_buffer(self._binary_data)
                rt.check(lib.aclrtBinaryLoadFromData(buf, len(self._binary_data), ffi.NULL, cell),
                         "aclrtBinaryLoadFromData")
            else:
                path = self._binary_id()[1]
                rt.check(lib.aclrtBinaryLoadFromFile(os.fsencode(path), ffi.NULL, cell), "aclrtBinaryLoadFromFile")
            ld = _Loaded(cell[0])
            if len(_loaded) > 4096:   # stale sessions
                for k in [k for k in _loaded if k[1] != rt.generation()]:
                    del _loaded[k]
            _loaded[key] = ld
            return ld

    def _function(self, name: str, device_id: int):
        ld = self._load(device_id)
        f = ld.funcs.get(name)
        if f is None:
            cell = ffi.new("aclrtFuncHandle *")
            rc = backend().lib.aclrtBinaryGetFunction(ld.handle, name.encode(), cell)
            if rc == E.ACL_ERROR_RT_SYMBOL_NOT_FOUND:
                msg = backend().lib.aclGetRecentErrMsg()
                detail = ffi.string(msg).decode(errors="replace") if msg != ffi.NULL else ""
                have = detail.rsplit("(it has: ", 1)[-1].rstrip(")") if "(it has: " in detail else ""
                raise KernelNotFoundError(name, [h for h in have.split(", ") if h] or self.kernel_names,
                                          self._name)
            rt.check(rc, "aclrtBinaryGetFunction")
            f = ld.funcs[name] = cell[0]
        return f

    def _binary_signature(self, name: str) -> KernelSignature:
        """The signature a simulator binary records for ``name`` (aclsimFunctionGetParamDesc)."""
        b = backend()
        dev = rt.current_device_id()
        f = self._function(name, dev)
        if not b.is_sim:
            raise KernelSourceError(
                f"kernel {name!r}: the parameters of a device binary are unknown; pass "
                f"signature='void {name}(GM_ADDR x, ..., uint32_t n)' to get_function")
        lib = b.lib
        count = ffi.new("size_t *")
        rt.check(lib.aclrtFunctionGetParamCount(f, count), "aclrtFunctionGetParamCount")
        desc = ffi.new("aclsimKernelParamDesc *")
        parts = []
        for i in range(count[0]):
            rt.check(lib.aclsimFunctionGetParamDesc(f, i, desc), "aclsimFunctionGetParamDesc")
            ctype = ffi.string(desc.type).decode()
            pname = ffi.string(desc.name).decode() or f"arg{i}"
            parts.append(f"{ctype} {pname}" if not ctype.endswith("*") else f"{ctype}{pname}")
        try:
            return parse_signature(f"void {name}({', '.join(parts)})")
        except KernelSourceError as e:
            raise KernelSourceError(f"{e} -- pass signature= to get_function") from None

    # -- kernels --------------------------------------------------------------------------------
    def get_function(self, name: str, *, signature: str | None = None) -> "RawKernel":
        """The kernel ``name`` of this module.

        Args:
            signature: its C declaration, e.g. ``"void add(GM_ADDR x, GM_ADDR y, uint32_t n)"`` --
                needed only for a device binary without source (a simulator binary records it).

        Raises:
            KernelNotFoundError: no such kernel.
        """
        if not isinstance(name, str):
            raise TypeError(f"kernel name must be a str, not {type(name).__name__}")
        if signature is not None:
            sig = parse_signature(signature, name)
        elif self._kernels is not None:
            sig = self._kernels.get(name)
            if sig is None:
                note = ""
                if _compiler.has_conditionals(self._source) and re.search(
                        rf"\b(CANNA_KERNEL|__global__)\b[^;{{}}]*\b{re.escape(name)}\s*\(", clean_source(self._source)):
                    note = ": it is defined in a preprocessor branch that is not compiled (#if / #ifdef)"
                raise KernelNotFoundError(name, self._kernels, self._name, note)
        else:
            sig = self._binary_signature(name)
        return RawKernel._from_module(self, name, sig)


# ---------------------------------------------------------------------------------------------
# keeping arguments alive while a launch may still read them: acl_rt's one keep-alive
# (acl_rt/_keepalive.py, through the seam)

_hold = rt.hold


def pending_keepalives() -> int:
    """Objects still held because the launch (or copy) that uses them may not have run (for tests)."""
    return rt.pending_holds()


class RawKernel:
    """One kernel, ready to launch: ``RawKernel(source_or_path, name, *, options=(), backend=None)``.

    ``source_or_path`` is kernel source text, or a path (``os.PathLike``, or a ``str`` naming a
    file with a source or binary suffix); see :class:`RawModule` for ``options`` and ``backend``.

    Attributes:
        name: the kernel's name. signature: its :class:`KernelSignature` (``str()`` gives the C
        declaration). params: its parameters (:class:`KernelParam`: name, C type, kind, offset and
        size in the argument block). num_params, args_size (bytes). module: its RawModule.

    Raises:
        KernelNotFoundError: the source defines no kernel of that name.
        KernelSourceError: its declaration cannot be used (an unsupported parameter type...).
    """

    def __init__(self, code, name: str, *, options=(), backend: str | None = None, signature: str | None = None):
        if isinstance(code, os.PathLike) or (isinstance(code, str) and "\n" not in code and "(" not in code
                                              and code.lower().endswith(_compiler.SOURCE_SUFFIXES
                                                                        + _compiler.BINARY_SUFFIXES)):
            module = RawModule(path=code, options=options, backend=backend)
        else:
            module = RawModule(code, options=options, backend=backend)
        k = module.get_function(name, signature=signature)
        self._init(module, name, k._sig)

    @classmethod
    def _from_module(cls, module: RawModule, name: str, sig: KernelSignature) -> "RawKernel":
        self = object.__new__(cls)
        self._init(module, name, sig)
        return self

    def _init(self, module, name, sig):
        self._module = module
        self._name = name
        self._sig = sig
        self._nparams = len(sig.params)
        self._funcs = {}
        self._pack = None
        self._launch_fn = None
        self._api = f"{name}.launch"
        self._lock = threading.Lock()

    # -- introspection --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def module(self) -> RawModule:
        return self._module

    @property
    def signature(self) -> KernelSignature:
        return self._sig

    @property
    def params(self) -> tuple:
        return self._sig.params

    @property
    def num_params(self) -> int:
        return self._nparams

    @property
    def args_size(self) -> int:
        """Size of the argument block in bytes."""
        return self._sig.args_size

    def __repr__(self):
        return f"<kernels.RawKernel {self._sig}>"

    def compile(self) -> "RawKernel":
        """Compile and load on the current device now (normally done at the first launch)."""
        self._func(rt.current_device_id())
        return self

    def _func(self, device_id: int):
        key = (rt.generation(), device_id)
        f = self._funcs.get(key)
        if f is None:
            f = self._module._function(self._name, device_id)
            self._check_layout(f)
            if len(self._funcs) > 64:
                self._funcs.clear()
            self._funcs[key] = f
        return f

    def _check_layout(self, f):
        """The runtime's view of the argument block (aclrtFunctionGetParamInfo, where available)
        must match ours."""
        lib = backend().lib
        if not lib.has("aclrtFunctionGetParamInfo"):
            return
        count = ffi.new("size_t *")
        if lib.aclrtFunctionGetParamCount(f, count) != 0:
            lib.aclGetRecentErrMsg()
            return
        if count[0] != self._nparams:
            raise KernelSourceError(f"kernel {self._name!r}: the binary has {count[0]} parameters but the signature "
                                    f"{self._sig} has {self._nparams}")
        off, size = ffi.new("size_t *"), ffi.new("size_t *")
        for p in self._sig.params:
            if lib.aclrtFunctionGetParamInfo(f, p.index, off, size) != 0:
                lib.aclGetRecentErrMsg()
                return
            if (off[0], size[0]) != (p.offset, p.size):
                raise KernelSourceError(f"kernel {self._name!r} {p.label}: the binary places it at offset {off[0]} "
                                        f"({size[0]} bytes), the signature at {p.offset} ({p.size} bytes)")

    # -- launching ------------------------------------------------------------------------------
    def launch(self, num_blocks: int, *args, stream: acl_rt.Stream | None = None,
               timeout: float | None = None) -> None:
        """Run the kernel on ``num_blocks`` blocks, asynchronously, in order on ``stream``.

        Args:
            num_blocks: 1..65535 (``GetBlockNum()`` in the kernel); blocks spread over the AI cores.
            *args: one per parameter. GM pointers: a DeviceBuffer, an array (PyTorch, TensorFlow,
                JAX or NumPy, through DLPack or the buffer protocol; C-contiguous; zero-copy), None
                (NULL), or ``ctypes.c_void_p(address)``. Scalars: Python/NumPy numbers (or one-element
                arrays), converted to the declared C type with range checks. Structs passed by value
                (e.g. Ascend C tiling data): a dict of fields, a tuple of all fields, a
                ``ctypes.Structure``, a NumPy structured scalar, or the struct's bytes.
            stream: the stream (default: the current stream of the current device).
            timeout: seconds the kernel may run before it is stopped and reported as an AI-core
                timeout (``ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US``; default: none, or
                ``$CANNA_SIM_KERNEL_TIMEOUT`` on the simulator).

        DeviceArray arguments follow the built-in ops' stream ordering: the launch waits (on the
        device) for their pending writes on other streams, and becomes the pending write of those
        passed to non-const pointer parameters. The arguments are kept alive until the launch has
        run. Faults inside the kernel (invalid accesses, a timeout) are asynchronous:
        :class:`acl_rt.KernelError` at the next synchronize. In the simulator's memcheck mode
        (``CANNA_SIM_CHECK=1``) host operands are staged in guarded device memory for the launch,
        so accesses past their end are reported too.

        Raises:
            TypeError: wrong number of arguments, or an argument that cannot be converted (the
                message names the parameter), a multi-element array for a scalar.
            OverflowError: a scalar out of its C type's range.
            ValueError: a non-contiguous array; a read-only or immutable object (a TF or JAX tensor,
                ``bytes``, a read-only NumPy array) for a pointer parameter that is not ``const``
                (``GM_ADDR`` and ``float *`` may be written; ``const GM_ADDR``, ``const float *`` not).
            acl_rt.InvalidArgumentError: num_blocks out of range; a pointer into freed memory (or not
                device memory in the discrete model / memcheck), named by the runtime.
            CompileError: the first launch compiles the source.
        """
        api = self._api
        if type(num_blocks) is not int:
            if isinstance(num_blocks, bool) or not hasattr(num_blocks, "__index__"):
                raise TypeError(f"{api}: num_blocks must be an int, not {type(num_blocks).__name__}")
            num_blocks = num_blocks.__index__()
        if not 1 <= num_blocks <= MAX_BLOCKS:
            raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                       f"num_blocks must be in 1..{MAX_BLOCKS}, got {num_blocks}")
        if len(args) != self._nparams:
            raise TypeError(f"{api}: {self._sig} takes {self._nparams} argument{'s' if self._nparams != 1 else ''}, "
                            f"got {len(args)}")
        s = rt.accept_stream(stream, None, api)
        sh = s._handle(api)
        f = self._funcs.get((rt.generation(), s._device._id))
        if f is None:
            f = self._func(s._device._id)
            s._handle(api)   # loading may have made another context current
        pack = self._pack
        if pack is None:
            b = backend()
            self._launch_fn = b.lib.aclrtLaunchKernelWithHostArgs if b.lib.has("aclrtLaunchKernelWithHostArgs") \
                else None
            pack = self._pack = make_packer(self._sig.params, self._sig.args_size, on_device=not b.is_sim,
                                            kernel=self._name)
        data, keep, arrays = pack(args)
        if arrays:   # the built-in ops' rule: wait for the arrays' pending writes on other streams
            _order_inputs()(s, [a for a, _w in arrays])
        cfg, _cfg_keep = (ffi.NULL, None) if timeout is None else _timeout_cfg(timeout, api)
        staged = None
        if _memcheck():
            data, staged = _stage_host_operands(self._sig.params, args, data, s)
            if staged:
                keep.append(staged)
        launch = self._launch_fn
        if launch is not None:
            rc = launch(f, num_blocks, sh, cfg, ffi.from_buffer(data) if data else ffi.NULL, len(data), ffi.NULL, 0)
            if rc:
                rt.raise_error(rc, "aclrtLaunchKernelWithHostArgs")
        else:   # CANN 8.2-8.3: the argument builder (untested here: the simulator has the newer call)
            self._launch_with_builder(f, num_blocks, sh, cfg, data)
        if staged:
            _unstage(staged, s)
        for a, writable in arrays:
            if writable:   # ... and record this launch as their pending write, as an op's output
                a.storage.stream = s
        if keep:
            _hold(sh, keep, backend().lib)

    __call__ = launch

    def _launch_with_builder(self, f, num_blocks, sh, cfg, data):
        lib = backend().lib
        cell = ffi.new("aclrtArgsHandle *")
        rt.check(lib.aclrtKernelArgsInit(f, cell), "aclrtKernelArgsInit")
        ph = ffi.new("aclrtParamHandle *")
        raw = ffi.from_buffer(data)
        for p in self._sig.params:
            rt.check(lib.aclrtKernelArgsAppend(cell[0], raw + p.offset, p.size, ph), "aclrtKernelArgsAppend")
        rt.check(lib.aclrtKernelArgsFinalize(cell[0]), "aclrtKernelArgsFinalize")
        rt.check(lib.aclrtLaunchKernelWithConfig(f, num_blocks, sh, cfg, cell[0], ffi.NULL),
                 "aclrtLaunchKernelWithConfig")


# ---------------------------------------------------------------------------------------------
# memcheck (CANNA_SIM_CHECK=1): host operands are staged in guarded device memory

_check_mode = None


def _memcheck() -> bool:
    """Whether the simulator runs in memcheck mode (fixed at its first aclInit)."""
    global _check_mode
    if _check_mode is None:
        b = backend()
        _check_mode = bool(b.is_sim and b.lib.aclsimGetCheckMode() == 1)
    return _check_mode


class _Staging:
    """A device allocation holding a copy of host operands during one launch (freed when the
    launch has run: it is part of the launch's keepalive)."""
    __slots__ = ("ptr", "size", "pad", "lo", "hi", "writable", "gen", "args")

    def __init__(self, lo, hi, writable, args):
        self.lo, self.hi, self.writable = lo, hi, writable
        self.args = args        # the host operands stay alive while a copy may still run
        self.pad = lo % 16      # the staged copy keeps the host addresses' alignment (mod 16)
        self.size = self.pad + hi - lo
        self.gen = rt.generation()
        cell = ffi.new("void **")
        rt.check(backend().lib.aclrtMalloc(cell, self.size, 0), "aclrtMalloc (memcheck staging of a host operand)")
        self.ptr = int(ffi.cast("uintptr_t", cell[0]))

    def at(self, host_ptr: int) -> int:
        return self.ptr + self.pad + host_ptr - self.lo

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        try:
            if ptr and rt.generation() == self.gen and rt.is_initialized():
                lib = backend().lib
                if lib.aclrtFree(ffi.cast("void *", ptr)) != 0:
                    lib.aclGetRecentErrMsg()
        except Exception:   # noqa: BLE001 - interpreter shutdown: the runtime frees it
            pass


def _stage_host_operands(params, args, data: bytes, s):
    """Memcheck: every pointer argument in host memory of known size (NumPy arrays, CPU tensors,
    buffers) is replaced by a copy in a device allocation, which ends at a guard page (or poisoned
    slack): an out-of-bounds access is then reported like one into device memory (kernel, block,
    address) instead of corrupting the host heap. Host operands that overlap share one copy.
    Returns ``(argument block, stagings)``; the copies in and back are stream tasks around the
    launch (:func:`_unstage`)."""
    from ._args import gm_pointer
    lib = backend().lib
    dev = s._device._id
    is_dev = ffi.new("int32_t *")
    ranges = []
    for p in params:
        if p.kind != "pointer":
            continue
        v = gm_pointer(args[p.index], p.label)
        n = v.nbytes
        if not v.ptr or not n:
            continue   # NULL, raw addresses (size unknown), DLPack capsules: checked by the runtime only
        if lib.aclsimCheckKernelOperand(ffi.cast("void *", v.ptr), n, dev, b"operand", is_dev) != 0:
            lib.aclGetRecentErrMsg()   # the launch reports it (naming the parameter)
            continue
        if not is_dev[0]:
            ranges.append((v.ptr, v.ptr + n, p))
    if not ranges:
        return data, None
    ranges.sort(key=lambda r: r[0])
    groups = []   # [lo, hi, writable, params]
    for lo, hi, p in ranges:
        if groups and lo < groups[-1][1]:
            g = groups[-1]
            g[1] = max(g[1], hi)
            g[2] = g[2] or not p.is_const
            g[3].append((lo, p))
        else:
            groups.append([lo, hi, not p.is_const, [(lo, p)]])
    block = bytearray(data)
    stagings = []
    for lo, hi, writable, members in groups:
        st = _Staging(lo, hi, writable, args)
        stagings.append(st)
        for ptr, p in members:
            struct.pack_into("=Q", block, p.offset, st.at(ptr))
        # the task holds the staging (and through it the operands) until it ran, even when the
        # launch itself is then refused
        s.launch_host_func(_copy_in, st)
    return bytes(block), stagings


def _copy_in(st) -> None:
    ctypes.memmove(st.ptr + st.pad, st.lo, st.hi - st.lo)


def _copy_back(st) -> None:
    ctypes.memmove(st.lo, st.ptr + st.pad, st.hi - st.lo)


def _unstage(stagings, s) -> None:
    """After the launch, in stream order: copy the staged operands the kernel may have written back."""
    for st in stagings:
        if st.writable:
            s.launch_host_func(_copy_back, st)


def _order_inputs():
    """kernels._core.order_inputs, the stream-ordering rule of DeviceArray operands (imported late:
    _core imports this module)."""
    from ._core import order_inputs
    return order_inputs


def _timeout_cfg(timeout, api):
    """(cfg, keepalive) with ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US set to ``timeout`` seconds."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{api}: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if not 0 < timeout < 1e9:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, api,
                                   f"timeout must be a positive number of seconds, got {timeout!r}")
    us = max(1, int(timeout * 1e6))
    attr = ffi.new("aclrtLaunchKernelAttr[1]")
    attr[0].id = _ATTR_TIMEOUT_US
    attr[0].value.timeoutUs.timeoutLow = us & 0xFFFFFFFF
    attr[0].value.timeoutUs.timeoutHigh = us >> 32
    cfg = ffi.new("aclrtLaunchKernelCfg *")
    cfg.attrs = attr
    cfg.numAttrs = 1
    return cfg, attr
