"""PyTorch's intra-op threads lent to the simulator inside offload() (canna_dl/torch/_team.py,
_team.cc; the simulator's aclsimSetHostTeam): while a thread is inside an offload block of either
level, the blocks of the kernels it runs go to PyTorch's OpenMP team instead of the simulator's
pool; outside, and on other threads, the pool again."""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

import acl_rt  # noqa: E402
from acl_rt import lowlevel  # noqa: E402
import canna_dl.torch as ct  # noqa: E402
from canna_dl.torch import _team  # noqa: E402

from conftest import run_python  # noqa: E402


def _current_team():
    prev = lowlevel.set_host_team(0)   # (reads this thread's setting by swapping it out and back)
    lowlevel.set_host_team(*prev)
    return prev[0]


def test_the_team_builds_here():
    # this machine has g++ and PyTorch's headers: a 0 here would silently keep the contention
    assert _team.address() != 0, _team._state["why"]


@pytest.mark.parametrize("level", ["function", "aten"])
def test_offload_lends_the_team_to_its_thread_only(level):
    acl_rt.init()
    assert _current_team() == 0
    seen = []
    with ct.offload(level=level):
        assert _current_team() == _team.address()
        with ct.offload(level="aten" if level == "function" else "function"):   # nested, the other level
            assert _current_team() == _team.address()
        assert _current_team() == _team.address()   # the inner block's exit keeps the outer's
        t = threading.Thread(target=lambda: seen.append(_current_team()))
        t.start()
        t.join(30)
    assert seen == [0] and _current_team() == 0
    with pytest.raises(ZeroDivisionError):
        with ct.offload(level=level):
            1 / 0
    assert _current_team() == 0   # restored by an exception too


def test_kernels_in_offload_spread_over_pytorchs_threads():
    # a fresh interpreter: 2 PyTorch threads and 2 simulator threads, as tools/bench_models.py --threads 2
    out = run_python("""
        import numpy as np, torch
        import canna_dl.torch as ct
        from canna_dl.torch import _team
        torch.set_num_threads(2)
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(384, 512, generator=g), torch.randn(512, 384, generator=g)
        ref = a.double() @ b.double()
        s0 = _team.stats()["spread"]
        for level in ("aten", "function"):
            with ct.offload(level=level) as rep:
                got = a @ b
            assert rep.ops["matmul"].canna == 1, rep
            np.testing.assert_allclose(got.double().numpy(), ref.numpy(), rtol=1e-4, atol=1e-3)
        s1 = _team.stats()["spread"]
        import kernels
        kernels.matmul(a, b)   # outside offload: the simulator's own pool
        s2 = _team.stats()["spread"]
        torch.set_num_threads(1)
        with ct.offload(level="aten"):
            got = a @ b        # one PyTorch thread: the blocks run on the calling thread
        np.testing.assert_allclose(got.double().numpy(), ref.numpy(), rtol=1e-4, atol=1e-3)
        print(s1 - s0 >= 2, s2 == s1, _team.stats()["spread"] == s2)
        """, env={"CANNA_SIM_THREADS": "2"}, timeout=300)
    assert out.stdout.split()[-3:] == ["True", "True", "True"], out.stdout + out.stderr
