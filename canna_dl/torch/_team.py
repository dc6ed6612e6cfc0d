"""PyTorch's intra-op threads lent to the simulator inside ``offload()`` (both levels).

On the simulator canna's kernels run on the host CPUs, split into blocks over a pool of AI-core
threads (``CANNA_SIM_THREADS``). Inside ``offload()`` PyTorch runs its own kernels between canna's
on its OpenMP threads, which keep spinning for a while after each of them: two pools on the same
CPUs take turns losing them (on 2 CPUs and 2 threads each, a model step ran 10-25% slower than with
one shared team; ``tools/bench_models.py --threads 2``). So while a thread is inside an offload
block, the blocks of the kernels it runs (every kernel launched and waited for on that thread, as
offload's are) go to PyTorch's team instead -- ``torch.get_num_threads()`` threads, the calling one
included (``canna_dl/torch/_team.cc``, the simulator's ``aclsimSetHostTeam``). Kernels launched
asynchronously and run by a stream's worker thread keep the simulator's pool.

The library is compiled at first use into the kernel cache (under a second). Without a C++ compiler
or PyTorch's C++ headers canna keeps its own pool (nothing else changes). On a real device the
kernels do not run on the host: nothing is lent.
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import torch

from acl_rt import lowlevel

__all__ = ["enter", "exit", "address", "stats"]

_SRC = Path(__file__).with_name("_team.cc")
_lock = threading.Lock()
_state = {"tried": False, "address": 0, "why": None, "dll": None}
_tls = threading.local()   # .depth: offload blocks of this thread; .prev: the setting the first replaced


def _load():
    from kernels import _compiler
    from ._aten import _flags
    try:
        flags, link = _flags()
        path = _compiler.build_host_library("canna_torch_team", _SRC, flags=(*flags, "-fopenmp"),
                                            link_flags=("-fopenmp", *link), key_parts=(torch.__version__,))
        dll = ctypes.CDLL(str(path))
        dll.canna_torch_team_spread.restype = ctypes.c_uint64
        return dll, ctypes.cast(dll.canna_torch_team, ctypes.c_void_p).value, None
    except Exception as e:   # no compiler, no headers, a failing build
        return None, 0, f"{type(e).__name__}: {e}"


def address() -> int:
    """The team function's address (an ``aclsimHostTeamFn``), 0 when it cannot be built here
    (compiles it on the first call)."""
    if not _state["tried"]:
        with _lock:
            if not _state["tried"]:
                _state["dll"], _state["address"], _state["why"] = _load()
                _state["tried"] = True
    return _state["address"]


def stats() -> dict:
    """``{"spread": n}``: kernel jobs this process spread over PyTorch's threads (more than one)."""
    address()
    dll = _state["dll"]
    return {"spread": int(dll.canna_torch_team_spread()) if dll is not None else 0}


def enter() -> None:
    """An offload block starts on this thread: the first one lends PyTorch's team."""
    depth = getattr(_tls, "depth", 0)
    if depth == 0 and lowlevel.backend().is_sim:
        _tls.prev = lowlevel.set_host_team(address())
    _tls.depth = depth + 1


def exit() -> None:
    """An offload block of this thread ends: the last one restores the setting the first replaced."""
    depth = getattr(_tls, "depth", 0) - 1
    if depth < 0:
        return
    _tls.depth = depth
    if depth == 0 and getattr(_tls, "prev", None) is not None:
        lowlevel.set_host_team(*_tls.prev)
        _tls.prev = None
