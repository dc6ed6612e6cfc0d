"""Compiling custom kernels, with an in-memory and an on-disk cache.

Two toolchains:

``cc`` -- the simulator's. The system C compiler (``$CC``, else ``cc``/``gcc``/``clang``; ``$CXX``
etc. for C++ sources) builds a host shared object from the kernel source plus a generated entry per
kernel that unpacks the argument block and sets the block index (the format is in
``acl_rt/_sim/sim_kernel_abi.h`` and ``acl_rt/_sim/README.md``, "Custom kernels").

``bisheng`` -- the Ascend toolchain (``bisheng``, or ``ccec``), found on ``PATH`` or under
``$ASCEND_HOME_PATH``/``$ASCEND_TOOLKIT_HOME``; builds a device object (``.o``) for the SoC of the
device. **Not tested by canna's CI** (no Ascend toolchain there): the command line follows public
Ascend C build scripts and may need adjusting through ``options``.

The cache key is a hash of the source, the options, the toolchain's identity (its path and its
``--version`` output), the target and the generator's version (with the contents of the headers
canna ships -- ``canna_kernel.h``, ``kernel_operator.h`` -- and ``sim_kernel_abi.h``). Binaries
live in ``$CANNA_KERNEL_CACHE`` (default ``~/.cache/canna/kernels``, or
``$XDG_CACHE_HOME/canna/kernels``). Writes are atomic (a temporary
file renamed into place) and a per-key lock file serializes compiles of the same key across
processes, so concurrent processes compile a kernel once and never see a partial file. Each binary
has a checksum file (``<key>.so.sha256``, written first); an entry that does not match it
(truncated, emptied, overwritten, a directory in its place) is rebuilt from source with a
``RuntimeWarning``. Headers the source includes, other than canna's own, are not part of
the key.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

from ._signature import KernelSignature

__all__ = ["CompileError", "Toolchain", "find_toolchain", "compile_source", "cache_dir", "cache_info",
           "clear_memory_cache", "generate_entry"]

GENERATOR_VERSION = "1"
HERE = Path(__file__).resolve().parent
INCLUDE_DIR = HERE / "include"
SIM_ABI_DIR = HERE.parent / "acl_rt" / "_sim"
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cce", ".asc")   # .asc: an Ascend C source
BINARY_SUFFIXES = (".so", ".o", ".bin")

# SoC name prefix -> Ascend C core architecture (untested: public Ascend C build scripts)
_ASCEND_ARCH = (("Ascend910B", "dav-c220-vec"), ("Ascend910_93", "dav-c220-vec"), ("Ascend310P", "dav-m200"),
                ("Ascend310B", "dav-m300"), ("Ascend910", "dav-c100"))


class CompileError(RuntimeError):
    """A kernel source did not compile. ``str(e)`` includes the compiler's messages.

    Attributes:
        log: the compiler's output (stderr and stdout).
        command: the command line that failed (a list).
        source_name: the name the messages use for the source.
    """

    def __init__(self, message: str, log: str = "", command=(), source_name: str = ""):
        self.log = log
        self.command = list(command)
        self.source_name = source_name
        super().__init__(message)


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """A compiler that builds kernel binaries.

    Attributes:
        kind: ``"cc"`` (host compiler, simulator binaries) or ``"bisheng"`` (Ascend device binaries).
        path: the executable.
        identity: its ``--version`` output (part of the cache key).
        language: ``"c"`` or ``"c++"``.
        suffix: the binary's file suffix (``.so`` or ``.o``).
    """
    kind: str
    path: str
    identity: str
    language: str
    suffix: str


@functools.lru_cache(maxsize=None)
def _identity(path: str) -> str:
    try:
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        return (p.stdout or p.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"


def _which_first(names) -> str | None:
    for name in names:
        if not name:
            continue
        parts = shlex.split(name)
        exe = shutil.which(parts[0]) if parts else None
        if exe:
            return exe
    return None


def _ascend_compiler() -> str | None:
    found = _which_first(["bisheng", "ccec"])
    if found:
        return found
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = os.environ.get(var)
        if not root:
            continue
        for sub in ("compiler/ccec_compiler/bin", "tools/ccec_compiler/bin", "bin"):
            for name in ("bisheng", "ccec"):
                p = Path(root) / sub / name
                if p.is_file() and os.access(p, os.X_OK):
                    return str(p)
    return None


def find_toolchain(backend: str | None, *, language: str, simulator: bool) -> Toolchain:
    """The toolchain for ``backend`` (None: ``"cc"`` on the simulator, ``"bisheng"`` on a real
    device). Raises CompileError when it is not installed."""
    if backend is None:
        backend = "cc" if simulator else "bisheng"
    if backend in ("bisheng", "ccec"):
        exe = _ascend_compiler()
        if exe is None:
            raise CompileError("the Ascend kernel compiler (bisheng/ccec) was not found on PATH or under "
                               "$ASCEND_HOME_PATH / $ASCEND_TOOLKIT_HOME: source CANN's set_env.sh, or load a "
                               "prebuilt device binary with kernels.RawModule(path=...)")
        return Toolchain("bisheng", exe, _identity(exe), "c++", ".o")
    if backend != "cc":
        raise ValueError(f"backend must be None, 'cc' (the host compiler, for the simulator) or 'bisheng' "
                         f"(the Ascend toolchain), not {backend!r}")
    if language == "c++":
        exe = _which_first([os.environ.get("CXX"), "c++", "g++", "clang++"])
    else:
        exe = _which_first([os.environ.get("CC"), "cc", "gcc", "clang"])
    if exe is None:
        var = "CXX" if language == "c++" else "CC"
        raise CompileError(f"no {language.upper()} compiler found to build the kernel for the simulator: "
                           f"install gcc (or clang), or set ${var}")
    return Toolchain("cc", exe, _identity(exe), language, ".so")


# ---------------------------------------------------------------------------------------------
# the generated entry of simulator binaries

def _c_string(s: str) -> str:
    return json.dumps(s)   # a valid C string literal for printable ASCII; escapes the rest


def generate_entry(source: str | None, include_path: str | None, source_name: str,
                   kernels: dict, producer: str) -> str:
    """The C/C++ translation unit of a simulator binary: the kernel source (inline, or #include-d
    from ``include_path``) followed by one entry per kernel and the kernel table."""
    out = ["/* generated by canna's kernel compiler: the kernel source, then the entry of each kernel and",
           " * the kernel table of a canna simulator binary (acl_rt/_sim/sim_kernel_abi.h) */",
           '#include "canna_kernel.h"']
    if include_path is not None:
        out.append(f"#include {_c_string(include_path)}")
    else:
        out.append(f"#line 1 {_c_string(source_name)}")
        out.append(source)
        if not source.endswith("\n"):
            out.append("")
    out += ['#line 1 "<canna generated entry>"',
            '#include <stdio.h>',
            '#include "sim_kernel_abi.h"',
            "#ifdef __cplusplus",
            "#include <exception>",
            "#define CANNA_SA_(c, m) static_assert(c, m)",
            "#else",
            "#define CANNA_SA_(c, m) _Static_assert(c, m)",
            "#endif",
            "CANNA_SIM_DEFINE_BLOCK_STATE"]
    tables = []
    for i, (name, sig) in enumerate(kernels.items()):
        assert isinstance(sig, KernelSignature)
        fields = [f"    {p.ctype} a{p.index};" for p in sig.params]
        if fields:
            out.append(f"struct canna_args_{i}_ {{")
            out += fields
            out.append("};")
            for p in sig.params:
                what = _c_string(f"canna: the argument block of '{name}' {p.label} differs from the expected "
                                 f"layout")
                out.append(f"CANNA_SA_(offsetof(struct canna_args_{i}_, a{p.index}) == {p.offset} && "
                           f"sizeof(((struct canna_args_{i}_ *)0)->a{p.index}) == {p.size}, {what});")
            out.append(f"CANNA_SA_(sizeof(struct canna_args_{i}_) == {sig.args_size}, "
                       f"{_c_string(f'canna: the argument block of {name} differs in size')});")
        # called through a volatile pointer: never inlined into the entry, so a fault's pc lies in
        # the kernel's own (exported) symbol and reports name it
        out.append(f"static __typeof__(&{name}) volatile canna_kfn_{i}_ = &{name};")
        call = f"canna_kfn_{i}_({', '.join(f'a->a{p.index}' for p in sig.params)});"
        out.append(f"static int canna_entry_{i}_(const void *args, uint32_t blockIdx, uint32_t numBlocks, "
                   f"char *msg, size_t msgSize) {{")
        if fields:
            out.append(f"    const struct canna_args_{i}_ *a = (const struct canna_args_{i}_ *)args;")
        else:
            out.append("    (void)args;")
        out += ["    canna_sim_block_idx_ = blockIdx;",
                "    canna_sim_block_num_ = numBlocks;",
                "#ifdef __cplusplus",
                f"    try {{ {call} }}",
                '    catch (const canna_sim_fault_ &e) { snprintf(msg, msgSize, "%s", e.msg); return 1; }',
                '    catch (const std::exception &e) { snprintf(msg, msgSize, "uncaught C++ exception: %s", e.what()); '
                "return 1; }",
                '    catch (...) { snprintf(msg, msgSize, "uncaught C++ exception"); return 1; }',
                "#else",
                f"    {call}",
                "#endif",
                "    (void)msg; (void)msgSize;",
                "    return 0;",
                "}"]
        if sig.params:
            rows = []
            for p in sig.params:
                flags = (1 if p.kind == "pointer" else 0) | (2 if p.is_const else 0)
                rows.append(f"    {{{_c_string(p.name)}, {_c_string(p.ctype)}, {p.offset}u, {p.size}u, "
                            f"{p.align}u, {flags}u}},")
            out.append(f"static const canna_sim_param canna_params_{i}_[] = {{")
            out += rows
            out.append("};")
            params = f"canna_params_{i}_"
        else:
            params = "0"
        tables.append(f"    {{{_c_string(name)}, canna_entry_{i}_, {params}, {len(sig.params)}u, {sig.args_size}u}},")
    if tables:
        out.append("static const canna_sim_kernel canna_kernels_[] = {")
        out += tables
        out.append("};")
        ktab = "canna_kernels_"
    else:
        ktab = "0"
    out.append("CANNA_EXTERN_C __attribute__((visibility(\"default\"))) const canna_sim_binary canna_sim_module = {")
    out.append(f"    CANNA_SIM_BINARY_MAGIC, CANNA_SIM_BINARY_VERSION, {len(kernels)}u, 0u, {ktab}, "
               f"{_c_string(producer)}}};")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# the cache

_stats = {"compiles": 0, "disk_hits": 0, "memory_hits": 0}
_memory: dict = {}           # key -> (path of the binary, its stat stamp when verified)
_key_locks: dict = {}
_lock = threading.Lock()
_fallback_dir: Path | None = None


def cache_dir() -> Path:
    """Where compiled kernels are kept: ``$CANNA_KERNEL_CACHE``, else
    ``$XDG_CACHE_HOME/canna/kernels``, else ``~/.cache/canna/kernels``."""
    env = os.environ.get("CANNA_KERNEL_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "canna" / "kernels"


def _writable_cache_dir() -> Path:
    global _fallback_dir
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    if _fallback_dir is None:
        _fallback_dir = Path(tempfile.mkdtemp(prefix="canna-kernels-"))
        warnings.warn(f"kernels: the kernel cache {d} is not writable; compiled kernels go to {_fallback_dir} "
                      f"for this process (set CANNA_KERNEL_CACHE)", RuntimeWarning, stacklevel=3)
    return _fallback_dir


def cache_info() -> dict:
    """Counters of this process's kernel compiles: ``compiles`` (compiler runs), ``disk_hits``
    (binaries found in the on-disk cache), ``memory_hits`` (found in this process's memory), and
    ``directory``."""
    with _lock:
        info = dict(_stats)
    info["directory"] = str(cache_dir())
    return info


def clear_memory_cache() -> None:
    """Forget the compiled kernels this process knows about (the on-disk cache stays)."""
    with _lock:
        _memory.clear()


def _hash_file(p: Path) -> str:
    try:
        return hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError:
        return "missing"


@functools.lru_cache(maxsize=None)
def _generator_id() -> str:
    # this file too: a change of the generated entry or of the build flags is a new binary
    # every header canna ships (canna_kernel.h, kernel_operator.h) is part of the key
    shipped = "".join(_hash_file(p) for p in sorted(INCLUDE_DIR.rglob("*.h")))
    return hashlib.sha256((GENERATOR_VERSION + shipped
                           + _hash_file(SIM_ABI_DIR / "sim_kernel_abi.h")
                           + _hash_file(Path(__file__))).encode()).hexdigest()


def cache_key(source: str, options: tuple, tc: Toolchain, target: str) -> str:
    blob = json.dumps({"generator": _generator_id(), "toolchain": [tc.kind, tc.path, tc.identity, tc.language],
                       "target": target, "options": list(options), "source": source}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def build_host_library(prefix: str, source: Path, flags=(), link_flags=(), key_parts=()) -> Path:
    """A host C++ shared library (a framework's native glue: canna_dl.jax's XLA FFI handler,
    canna_dl.tf's op library), compiled once per machine into the kernel cache
    (``$CANNA_KERNEL_CACHE``) as ``<prefix>-<key>.so``: the key hashes the source, the flags, the
    compiler's identity and ``key_parts`` (the framework's version); processes building the same
    library at once wait for one another (a file lock) and a failed build leaves nothing behind.

    Raises:
        CompileError: no C++ compiler, or the source did not compile (the message has its output).
    """
    tc = find_toolchain("cc", language="c++", simulator=True)
    src = source.read_text()
    key = hashlib.sha256("\0".join([src, *map(str, flags), *map(str, link_flags), *map(str, key_parts), tc.path,
                                     tc.identity]).encode()).hexdigest()[:32]
    d = _writable_cache_dir()
    final = d / f"{prefix}-{key}.so"
    if final.is_file():
        _stats["disk_hits"] += 1
        return final
    with _file_lock(d / f"{prefix}-{key}.lock"):
        if final.is_file():
            return final
        tmp = Path(tempfile.mkdtemp(dir=d, prefix=".build-"))
        try:
            out = tmp / "lib.so"
            cmd = [tc.path, "-shared", "-fPIC", "-O2", "-pthread", *flags, str(source), "-o", str(out), *link_flags]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                               env=dict(os.environ, LC_ALL="C", LANG="C"))
            if p.returncode != 0 or not out.is_file():
                log = (p.stderr + p.stdout).strip()
                raise CompileError(f"{source.name} did not compile ({shlex.join(cmd)}):\n{log[-4000:]}", log, cmd,
                                   source.name)
            os.replace(out, final)
            _stats["compiles"] += 1
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive lock between processes (fcntl.flock on ``path``); a no-op where unsupported."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _sim_command(tc: Toolchain, src: Path, out: Path, options: tuple, include_dirs) -> list:
    std = "-std=gnu++17" if tc.language == "c++" else "-std=gnu11"
    # hidden by default, kernels exported (CANNA_KERNEL) but bound locally: one kernel binary never
    # resolves its own functions to another library's symbols of the same name
    cmd = [tc.path, "-shared", "-fPIC", "-O2", "-g", std, "-pthread", "-fvisibility=hidden",
           "-fno-semantic-interposition", "-Wl,-Bsymbolic",
           "-x", tc.language, f"-I{INCLUDE_DIR}", f"-I{SIM_ABI_DIR}"]
    cmd += [f"-I{d}" for d in include_dirs]
    cmd += list(options)
    cmd += [str(src), "-o", str(out)]
    return cmd


def _ascend_command(tc: Toolchain, src: Path, out: Path, options: tuple, include_dirs, soc: str | None) -> list:
    # UNTESTED (no Ascend toolchain in canna's CI): after the flags of public Ascend C build scripts
    arch = next((a for prefix, a in _ASCEND_ARCH if soc and soc.startswith(prefix)), "dav-c220-vec")
    root = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME") or \
        "/usr/local/Ascend/ascend-toolkit/latest"
    tik = Path(root) / "compiler" / "tikcpp"
    cmd = [tc.path, "-xcce", "-O2", "-std=c++17", "--cce-aicore-only", f"--cce-aicore-arch={arch}",
           "-mllvm", "-cce-aicore-stack-size=0x8000", "-mllvm", "-cce-aicore-function-stack-size=0x8000",
           f"-I{tik}", f"-I{tik / 'tikcfw'}", f"-I{tik / 'tikcfw' / 'impl'}", f"-I{tik / 'tikcfw' / 'interface'}",
           f"-I{Path(root) / 'include'}", f"-I{INCLUDE_DIR}"]
    cmd += [f"-I{d}" for d in include_dirs]
    cmd += list(options)
    cmd += ["-c", str(src), "-o", str(out)]
    return cmd


def compile_source(source: str, *, options: tuple, toolchain: Toolchain, kernels: dict,
                   source_name: str = "kernel.c", source_path: Path | None = None,
                   soc: str | None = None) -> tuple:
    """Compile (or find in the cache) the binary of ``source``. Returns ``(path, how)`` where
    ``how`` is ``"memory"``, ``"disk"`` or ``"compiled"``.

    ``kernels`` is the parsed ``{name: KernelSignature}`` of the source (the entries to generate).

    Raises:
        CompileError: the compiler failed (its messages are in the exception).
    """
    target = (soc or "") if toolchain.kind == "bisheng" else "sim"
    key = cache_key(source, options, toolchain, target)
    with _lock:
        hit = _memory.get(key)
        if hit is not None and _same_file(hit):
            _stats["memory_hits"] += 1
            return hit[0], "memory"
        klock = _key_locks.setdefault(key, threading.Lock())
    with klock:
        with _lock:
            hit = _memory.get(key)
            if hit is not None and _same_file(hit):
                _stats["memory_hits"] += 1
                return hit[0], "memory"
        d = _writable_cache_dir()
        final = d / f"{key}{toolchain.suffix}"
        stamp = _verified(final)
        if stamp is not None:
            how = "disk"
        else:
            with _file_lock(d / f"{key}.lock"):
                stamp = _verified(final)
                if stamp is not None:
                    how = "disk"
                else:
                    _discard_damaged(final, source_name)
                    _build(source, options, toolchain, kernels, source_name, source_path, soc, d, final)
                    stamp = _verified(final)
                    if stamp is None:
                        raise CompileError(f"the compiled binary of {source_name} changed in the kernel cache while "
                                           f"it was written ({final}): is another program writing there?",
                                           source_name=source_name)
                    how = "compiled"
        with _lock:
            _memory[key] = (str(final), stamp)
            _stats["disk_hits" if how == "disk" else "compiles"] += 1
        return str(final), how


# -- cache entries are verified, never trusted blindly: a binary is used only when its checksum
# file (written before the binary was renamed into place) matches its contents. A truncated,
# emptied, overwritten entry, or a directory in its place, is rebuilt from source with a warning.

_SUM_SUFFIX = ".sha256"


def _stat_stamp(st) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _same_file(hit) -> bool:
    """Whether a binary verified earlier in this process is still the same file."""
    try:
        return _stat_stamp(os.stat(hit[0])) == hit[1]
    except OSError:
        return False


def _checksum_line(data: bytes) -> str:
    return f"{hashlib.sha256(data).hexdigest()} {len(data)}\n"


def _verified(final: Path):
    """The stat stamp of the cache entry ``final`` if it is intact, else None (missing or damaged)."""
    try:
        with open(final, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                return None
            data = f.read()
        expected = Path(str(final) + _SUM_SUFFIX).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if _checksum_line(data) != expected:
        return None
    return _stat_stamp(st)


def _discard_damaged(final: Path, source_name: str) -> None:
    """Remove a damaged cache entry (called under the entry's lock), with a warning."""
    if not os.path.lexists(final):
        return
    if final.is_dir() and not final.is_symlink():
        what = "is a directory"
    elif not os.path.exists(str(final) + _SUM_SUFFIX):
        what = "has no checksum file (not written by this version of canna, or an interrupted write)"
    else:
        try:
            size = final.stat().st_size
            what = "is empty" if size == 0 else f"does not match its checksum ({size} bytes: truncated or overwritten?)"
        except OSError as e:
            what = f"cannot be read ({e.strerror})"
    warnings.warn(f"kernels: the cached binary of {source_name} ({final}) {what}; rebuilding it from source",
                  RuntimeWarning, stacklevel=5)
    try:
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        else:
            final.unlink()
    except OSError as e:
        raise CompileError(f"the kernel cache entry {final} is damaged and cannot be removed ({e.strerror}): delete "
                           f"it, or set CANNA_KERNEL_CACHE to another folder", source_name=source_name) from None


def _build(source, options, tc, kernels, source_name, source_path, soc, d: Path, final: Path):
    tmp = Path(tempfile.mkdtemp(dir=d, prefix=".build-"))
    try:
        include_dirs = [str(source_path.parent)] if source_path is not None else []
        out = tmp / f"kernel{tc.suffix}"
        if tc.kind == "cc":
            ext = ".cpp" if tc.language == "c++" else ".c"
            src = tmp / f"canna_entry{ext}"
            producer = f"canna kernel compiler {GENERATOR_VERSION}: {Path(tc.path).name} {' '.join(options)}".strip()
            src.write_text(generate_entry(None if source_path else source,
                                          str(source_path) if source_path else None,
                                          source_name, kernels, producer))
            cmd = _sim_command(tc, src, out, options, include_dirs)
        else:
            src = tmp / (source_path.name if source_path else "kernel.cpp")
            if source_path is None:
                src.write_text(source)
            else:
                src = source_path
            cmd = _ascend_command(tc, src, out, options, include_dirs, soc)
        env = dict(os.environ, LC_ALL="C", LANG="C")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp), env=env, timeout=600)
        except subprocess.TimeoutExpired:
            raise CompileError(f"compiling {source_name} took longer than 600 s", "", cmd, source_name) from None
        except OSError as e:
            raise CompileError(f"cannot run the compiler {cmd[0]}: {e}", "", cmd, source_name) from None
        log = (proc.stderr + proc.stdout).replace(str(tmp) + os.sep, "")
        if proc.returncode != 0 or not out.is_file():
            raise CompileError(f"{source_name} did not compile ({Path(cmd[0]).name} exit code {proc.returncode}):\n"
                               f"{log.strip()}", log, cmd, source_name)
        # the checksum first, then the binary (each atomic: a temporary file renamed into place), so
        # readers see a whole file or none and never a binary without its checksum
        sums = tmp / "kernel.sha256"
        sums.write_text(_checksum_line(out.read_bytes()))
        os.replace(sums, str(final) + _SUM_SUFFIX)
        os.replace(out, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# what the preprocessor keeps: the kernels of a source are read from its active lines only

_CONDITIONAL = re.compile(r"(?m)^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef)\b")
_LINE_CONTROL = re.compile(r"(?m)^[ \t]*#[ \t]*(line\b|\d)")
_MARKER = re.compile(r'# (\d+) "((?:[^"\\]|\\.)*)"')
_live_memo: dict = {}


def has_conditionals(source: str) -> bool:
    """Whether ``source`` has conditional preprocessor directives (``#if``, ``#ifdef``...)."""
    return bool(_CONDITIONAL.search(source))


def _unescape_marker(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def live_source(source: str, *, options: tuple, toolchain: Toolchain, source_name: str = "kernel.c",
                source_path: Path | None = None) -> str:
    """``source`` with the lines the preprocessor drops (inactive ``#if``/``#ifdef`` branches)
    blanked, newlines kept (line numbers still match): the text whose kernels get entries.

    The host compiler's own preprocessor decides (``-E -fdirectives-only``: conditionals are
    evaluated with the build's options, includes and predefined macros, nothing is expanded), on
    the translation unit the build compiles (``canna_kernel.h``, then the source). Sources without
    conditional directives, with ``#line`` directives, the Ascend toolchain, and a preprocessor
    that fails (the build will report why) give ``source`` unchanged."""
    if toolchain.kind != "cc" or not has_conditionals(source) or _LINE_CONTROL.search(source):
        return source
    memo_key = (source, tuple(options), toolchain, str(source_path) if source_path else None)
    with _lock:
        hit = _live_memo.get(memo_key)
    if hit is not None:
        return hit
    tmp = Path(tempfile.mkdtemp(prefix="canna-scan-"))
    try:
        ext = ".cpp" if toolchain.language == "c++" else ".c"
        if source_path is not None:
            main = Path(source_path)
        else:
            main = tmp / f"kernel_source{ext}"
            main.write_text(source)
        tu = tmp / f"canna_scan{ext}"
        tu.write_text(f'#include "canna_kernel.h"\n#include {_c_string(str(main))}\n')
        out = tmp / "scan.i"
        include_dirs = [str(source_path.parent)] if source_path is not None else []
        cmd = _sim_command(toolchain, tu, out, options, include_dirs)
        cmd[1:1] = ["-E", "-fdirectives-only"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp),
                                  env=dict(os.environ, LC_ALL="C", LANG="C"), timeout=120)
            text = out.read_text(errors="replace") if proc.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            text = None
        if text is None:
            return source
        kept, line, in_main, seen = set(), 0, False, False
        want = str(main)
        for row in text.split("\n"):
            m = _MARKER.match(row)
            if m:
                if in_main and row.rstrip().endswith(" 1"):
                    kept.add(line)   # an active #include of the source: entering the header it names
                line = int(m.group(1))
                in_main = _unescape_marker(m.group(2)) == want
                seen = seen or in_main
                continue
            if in_main and row.strip():
                kept.add(line)
            line += 1
        if not seen:
            return source
        lines = source.split("\n")
        result = "\n".join(ln if i + 1 in kept else "" for i, ln in enumerate(lines))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with _lock:
        if len(_live_memo) > 256:
            _live_memo.clear()
        _live_memo[memo_key] = result
    return result
