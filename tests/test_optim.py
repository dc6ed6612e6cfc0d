"""Optimizer steps on canna (kernels/_optim.py, kernels/_sim/op_optim.c, canna_dl/torch/_offload_optim.py):
``kernels.apply_adamw`` (aclnnApplyAdamWV2) and ``kernels.fused_sgd`` (aclnnFusedSgd) against
PyTorch's own fused kernels, and unchanged ``torch.optim.AdamW`` / ``Adam`` / ``SGD`` steps inside
``offload()`` against plain PyTorch over ten steps."""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kernels  # noqa: E402
import canna_dl.torch as ct  # noqa: E402

#: hyperparameters exact in float32 (the aclnn prototypes take float): float64 runs match to 1e-12
EXACT_ADAMW = dict(lr=2 ** -7, betas=(0.875, 1 - 2 ** -10), eps=2 ** -20, weight_decay=2 ** -6)
EXACT_SGD = dict(lr=2 ** -4, momentum=0.875, weight_decay=2 ** -7)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# ---------------------------------------------------------------------------------------------
# kernel level

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (True, False), (True, True)])
def test_apply_adamw_matches_torch_fused(dtype, amsgrad, maximize):
    g0 = torch.Generator().manual_seed(1)
    p = torch.randn(5, 7, dtype=dtype, generator=g0)
    ref = [p.clone(), torch.zeros_like(p), torch.zeros_like(p), torch.zeros_like(p)]
    mine = [p.clone(), torch.zeros_like(p), torch.zeros_like(p), torch.zeros_like(p)]
    hp = dict(lr=2 ** -7, beta1=0.875, beta2=1 - 2 ** -10, weight_decay=2 ** -6, eps=2 ** -20)
    for t in range(1, 5):
        g = torch.randn(5, 7, dtype=dtype, generator=g0)
        step = torch.tensor(float(t))
        kernels.apply_adamw(mine[0], mine[1], mine[2], mine[3], g, step, **hp, amsgrad=amsgrad, maximize=maximize)
        torch._fused_adamw_([ref[0]], [g], [ref[1]], [ref[2]], [ref[3]] if amsgrad else [], [step], **hp,
                            amsgrad=amsgrad, maximize=maximize)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    for a, b in zip(mine, ref):
        if b.abs().sum():
            assert _rel(a, b) < tol


def test_apply_adamw_strided_and_int_step():
    base = torch.randn(6, 8, dtype=torch.float64)
    p = base.t()                       # a non-contiguous view is updated in place
    m, v = torch.zeros(8, 6, dtype=torch.float64), torch.zeros(8, 6, dtype=torch.float64)
    g = torch.randn(8, 6, dtype=torch.float64)
    # the reference on a contiguous copy: PyTorch's CPU fused kernel pairs the elements of operands
    # with different strides wrongly (a transposed param with a contiguous grad)
    rp, rm, rv = p.contiguous(), m.clone(), v.clone()
    kernels.apply_adamw(p, m, v, None, g, torch.tensor([1], dtype=torch.int64), lr=2 ** -7, beta1=0.875,
                        beta2=1 - 2 ** -10, eps=2 ** -20, weight_decay=0.0)
    torch._fused_adamw_([rp], [g], [rm], [rv], [], [torch.tensor(1.0)], lr=2 ** -7, beta1=0.875,
                        beta2=1 - 2 ** -10, weight_decay=0.0, eps=2 ** -20, amsgrad=False, maximize=False)
    assert _rel(base.t(), rp) < 1e-12 and _rel(m, rm) < 1e-12 and _rel(v, rv) < 1e-12


@pytest.mark.parametrize("nesterov,dampening,maximize", [(False, 0.0, False), (True, 0.0, False),
                                                         (False, 0.25, True)])
def test_fused_sgd_matches_torch_fused(nesterov, dampening, maximize):
    g0 = torch.Generator().manual_seed(2)
    p = torch.randn(4, 3, dtype=torch.float64, generator=g0)
    mine, ref = [p.clone(), torch.empty_like(p)], [p.clone(), torch.empty_like(p)]
    for t in range(4):
        g = torch.randn(4, 3, dtype=torch.float64, generator=g0)
        kernels.fused_sgd(mine[0], g, mine[1], 2 ** -7, 0.875, 2 ** -4, dampening, nesterov, maximize, t == 0)
        torch._fused_sgd_([ref[0]], [g], [ref[1]], weight_decay=2 ** -7, momentum=0.875, lr=2 ** -4,
                          dampening=dampening, nesterov=nesterov, maximize=maximize, is_first_step=t == 0)
    assert _rel(mine[0], ref[0]) < 1e-12 and _rel(mine[1], ref[1]) < 1e-12
    q, rq = p.clone(), p.clone()         # no momentum buffer: plain SGD
    kernels.fused_sgd(q, g, None, lr=0.5)
    torch._fused_sgd_([rq], [g], [], weight_decay=0.0, momentum=0.0, lr=0.5, dampening=0.0, nesterov=False,
                      maximize=False, is_first_step=False)
    assert _rel(q, rq) < 1e-12


def test_optimizer_kernels_bad_input():
    p = torch.zeros(3)
    with pytest.raises(ValueError, match="exp_avg has shape"):
        kernels.apply_adamw(p, torch.zeros(4), torch.zeros(3), None, torch.zeros(3), torch.tensor(1.0))
    with pytest.raises(TypeError, match="grad has dtype float64 but param has dtype float32"):
        kernels.apply_adamw(p, torch.zeros(3), torch.zeros(3), None, torch.zeros(3, dtype=torch.float64),
                            torch.tensor(1.0))
    with pytest.raises(TypeError, match="step"):
        kernels.apply_adamw(p, torch.zeros(3), torch.zeros(3), None, torch.zeros(3), torch.tensor(1, dtype=torch.int32))
    with pytest.raises(ValueError, match="step must have exactly 1 element"):
        kernels.apply_adamw(p, torch.zeros(3), torch.zeros(3), None, torch.zeros(3), torch.ones(2))
    with pytest.raises(TypeError, match="max_exp_avg_sq must be an array when amsgrad=True"):
        kernels.apply_adamw(p, torch.zeros(3), torch.zeros(3), None, torch.zeros(3), torch.ones(1), amsgrad=True)
    with pytest.raises(TypeError, match="lr must be a number"):
        kernels.apply_adamw(p, torch.zeros(3), torch.zeros(3), None, torch.zeros(3), torch.ones(1), lr="x")
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        kernels.fused_sgd(p, torch.zeros(3), None, lr=-1.0)
    with pytest.raises(TypeError, match="grad must be an array"):
        kernels.fused_sgd(p, None)
    m = torch.zeros(3)
    with pytest.raises(ValueError):   # the state overlapping itself: the simulator refuses it
        kernels.apply_adamw(p, m, m, None, torch.zeros(3), torch.ones(1))
    assert not p.any()                 # nothing was written
    kernels.apply_adamw(p, torch.zeros(3), torch.zeros(3), None, torch.ones(3), torch.ones(1))   # still usable
    assert (p < 0).all()


# ---------------------------------------------------------------------------------------------
# torch.optim inside offload()

def _model(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(dtype)


def _train(make_opt, dtype, steps=10):
    """The same ten steps plain and with the optimizer step inside offload(); the reports."""
    m1 = _model(dtype)
    m2 = copy.deepcopy(m1)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(16, 6, generator=g, dtype=dtype), torch.randn(16, 3, generator=g, dtype=dtype)
    o1, o2 = make_opt(m1.parameters()), make_opt(m2.parameters())
    reps = []
    for _ in range(steps):
        for mm, oo, use in ((m1, o1, False), (m2, o2, True)):
            oo.zero_grad()
            ((mm(x) - y) ** 2).mean().backward()
            if use:
                with ct.offload() as rep:
                    oo.step()
                reps.append(rep)
            else:
                oo.step()
    err = max(_rel(a, b) for a, b in zip(m2.parameters(), m1.parameters()))
    return err, reps, o1, o2


ADAMW_CASES = {
    "adamw": lambda p, **k: torch.optim.AdamW(p, **k),
    "adam": lambda p, **k: torch.optim.Adam(p, **{**k, "weight_decay": 0.0}),
    "adam_l2_maximize": lambda p, **k: torch.optim.Adam(p, **k, maximize=True),
    "adamw_amsgrad": lambda p, **k: torch.optim.AdamW(p, **k, amsgrad=True),
}


@pytest.mark.parametrize("case", list(ADAMW_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adam_family_ten_steps_on_canna(case, dtype):
    kw = dict(EXACT_ADAMW) if dtype == torch.float64 else dict(lr=1e-2, weight_decay=0.05)
    err, reps, o1, o2 = _train(lambda p: ADAMW_CASES[case](p, **kw), dtype)
    assert err < (1e-6 if dtype == torch.float32 else 1e-12), err
    for rep in reps:   # one canna call per parameter group (and its step count), nothing else computed
        assert rep.ops["apply_adamw"].canna == 1 and rep.ops["apply_adamw"].fallback == 0
        assert rep.ops["add_"].canna == 1
        assert rep.coverage()["share"] == 1.0, rep.coverage()
    assert o2.param_groups[0]["fused"] is None   # the group is left as it was


@pytest.mark.parametrize("opts", [dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=0.01),
                                  dict(momentum=0.5, dampening=0.25, maximize=True), dict()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sgd_ten_steps_on_canna(opts, dtype):
    kw = dict(EXACT_SGD, **{k: v for k, v in opts.items() if k not in ("momentum", "weight_decay")}) \
        if dtype == torch.float64 else dict(lr=0.1, **opts)
    if dtype == torch.float64 and "momentum" not in opts:
        kw["momentum"] = 0.0
    err, reps, _, o2 = _train(lambda p: torch.optim.SGD(p, **kw), dtype)
    assert err < (1e-6 if dtype == torch.float32 else 1e-12), err
    if kw.get("momentum") or kw.get("weight_decay"):   # one fused kernel per parameter group
        assert all(r.ops["fused_sgd"].canna == 1 and r.coverage()["share"] == 1.0 for r in reps)
    else:   # nothing to fuse: PyTorch's own step, one canna add_ per parameter
        nparams = len(o2.param_groups[0]["params"])
        assert all("fused_sgd" not in r.ops and r.ops["add_"].canna == nparams and r.coverage()["share"] == 1.0
                   for r in reps)
        assert o2.param_groups[0]["fused"] is None
    if kw.get("momentum"):
        assert all(o2.state[p]["momentum_buffer"] is not None for p in o2.param_groups[0]["params"])


def test_explicit_fused_true_runs_on_canna():
    err, reps, _, _ = _train(lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True), torch.float32, steps=3)
    assert err < 1e-6 and all(r.ops["apply_adamw"].canna == 1 for r in reps)


def test_unsupported_options_fall_back_with_the_reason():
    # a tensor lr: the group keeps PyTorch's implementation, the report says why, the values match
    err, reps, o1, o2 = _train(lambda p: torch.optim.AdamW(p, lr=torch.tensor(1e-2)), torch.float32, steps=3)
    assert err < 1e-6
    assert all(r.ops["apply_adamw"].fallback == 1 and r.ops["apply_adamw"].reasons == {"a tensor lr": 1}
               for r in reps)
    # an explicit foreach=True is the user's choice: its _foreach_* ops run on PyTorch
    err, reps, _, _ = _train(lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True), torch.float32, steps=2)
    assert err < 1e-6 and "apply_adamw" not in reps[-1].ops
    assert any("._foreach_" in k for k in reps[-1].coverage()["no_canna_op"])
    # excluded by name: not steered
    m = _model(torch.float32)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)   # (plain SGD is not steered anyway)
    m(torch.ones(2, 6)).sum().backward()
    with ct.offload(exclude=("fused_sgd",)) as rep:
        opt.step()
    assert "fused_sgd" not in rep.ops and opt.param_groups[0]["fused"] is None


def test_fused_call_with_tensor_lr_falls_back():
    p, g = torch.randn(3), torch.randn(3)
    s = [torch.zeros(3), torch.zeros(3)]
    r = [p.clone(), torch.zeros(3), torch.zeros(3)]
    hp = dict(beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    with ct.offload() as rep:
        torch._fused_adamw_([p], [g], [s[0]], [s[1]], [], [torch.tensor(1.0)], lr=torch.tensor(0.1), **hp)
    torch._fused_adamw_([r[0]], [g], [r[1]], [r[2]], [], [torch.tensor(1.0)], lr=0.1, **hp)
    assert rep.ops["apply_adamw"].reasons == {"a tensor lr": 1}
    torch.testing.assert_close(p, r[0])


def test_in_place_updates_bump_the_version_counters():
    p, m, v, g = torch.randn(3), torch.zeros(3), torch.zeros(3), torch.randn(3)
    before = (p._version, m._version, v._version)
    with ct.offload() as rep:
        torch._fused_adamw_([p], [g], [m], [v], [], [torch.tensor(1.0)], lr=0.1, beta1=0.9, beta2=0.999,
                            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    assert rep.ops["apply_adamw"].canna == 1
    assert all(a > b for a, b in zip((p._version, m._version, v._version), before))


def test_registry_entries():
    for name in ("apply_adamw", "fused_sgd"):
        op = kernels.get_op(name)
        assert op.outputs == () and op.backward is None and getattr(kernels, name) is op.kernel
    assert np.isfinite(1.0)
