"""The simulator's float32 transcendental kernels (exp, sigmoid, silu, tanh, gelu and the
gradients of silu and gelu) run through glibc's vector math library (libmvec) when it is there —
its sixteen-float AVX-512 functions on a CPU with AVX-512, its eight-float AVX2 ones otherwise or
with ``CANNA_SIM_LIBMVEC=avx2`` — and through scalar libm otherwise (``CANNA_SIM_LIBMVEC=0``;
kernels/_sim/op_elementwise.c). Every path, each in a fresh process, against float64 PyTorch on random data of a length that leaves a
partial last vector, and on the special values (±inf, NaN, ±0, huge, tiny)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = r'''
import json, math
import torch
import torch.nn.functional as F
import kernels
import kernels.backward as KB

g = torch.Generator().manual_seed(5)
x = torch.randn(4099, generator=g) * 4
x[:12] = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 88.8, -104.0, 1e-38, -1e-38,
                       30.0, -30.0, 9.0])
gr = torch.randn(4099, generator=g)
xd, gd = x.double(), gr.double()

def grad_of(f, xs, gs):
    xs = xs.clone().requires_grad_(True)
    f(xs).backward(gs)
    return xs.grad

cases = {
    "exp": (kernels.exp(x), torch.exp(xd)),
    "sigmoid": (kernels.sigmoid(x), torch.sigmoid(xd)),
    "silu": (kernels.silu(x), F.silu(xd)),
    "tanh": (kernels.tanh(x), torch.tanh(xd)),
    "gelu": (kernels.gelu(x), F.gelu(xd)),
    "gelu_tanh": (kernels.gelu(x, approximate="tanh"), F.gelu(xd, approximate="tanh")),
    "silu_backward": (KB.silu(gr, x), grad_of(F.silu, xd, gd)),
    "gelu_backward": (KB.gelu(gr, x), grad_of(F.gelu, xd, gd)),
    "gelu_tanh_backward": (KB.gelu(gr, x, approximate="tanh"), grad_of(lambda t: F.gelu(t, approximate="tanh"), xd, gd)),
}
out = {}
for name, (got, want) in cases.items():
    assert got.dtype == torch.float32
    got, want = got.double(), want.float().double()   # the exact value rounded to float32 (inf beyond its range)
    finite = torch.isfinite(want)
    same_special = bool(torch.equal(torch.isnan(got), torch.isnan(want)) and
                        torch.equal(got[~finite & ~torch.isnan(want)], want[~finite & ~torch.isnan(want)]))
    # relative beyond 1, absolute below (near a zero, float32 arithmetic cancels as PyTorch's does)
    err = ((got - want).abs() / want.abs().clamp(min=1.0))[finite]
    out[name] = {"err": float(err.max()), "special": same_special}
print(json.dumps(out))
'''


def _run(libmvec):
    env = dict(os.environ, PYTHONPATH=ROOT)
    if libmvec is False:
        env["CANNA_SIM_LIBMVEC"] = "0"
    elif libmvec == "avx2":
        env["CANNA_SIM_LIBMVEC"] = "avx2"
    else:
        env.pop("CANNA_SIM_LIBMVEC", None)
    r = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("libmvec", [True, "avx2", False], ids=["libmvec", "libmvec-avx2", "scalar"])
def test_float32_transcendentals_match_float64_torch(libmvec):
    res = _run(libmvec)
    for name, r in res.items():
        # libmvec's float functions are within 4 ulp (glibc manual, "Errors in Math Functions"); the
        # expressions around them round a few more times (a gradient's terms cancel near its zeros)
        bound = 5e-6 if "backward" in name else 1e-6
        assert r["err"] < bound, (name, r)
        assert r["special"], (name, "inf / NaN pattern differs from PyTorch's")
