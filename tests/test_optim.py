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
    with pytest.raises(ValueError, match="exp_avg and exp_avg_sq share memory"):   # the state overlapping itself
        kernels.apply_adamw(p, m, m, None, torch.zeros(3), torch.ones(1))
    assert not p.any()                 # nothing was written
    kernels.apply_adamw(p, torch.zeros(3), torch.zeros(3), None, torch.ones(3), torch.ones(1))   # still usable
    assert (p < 0).all()


def _memo_replayed(call):
    """Run ``call()`` and tell whether it was the memo fast path's replay (no plan lookup: the
    Python path always looks its plan up)."""
    from kernels import _core
    h = _core._stats["plan_hits"] + _core._stats["plans_built"]
    call()
    return _core._stats["plan_hits"] + _core._stats["plans_built"] == h


def _f64(g, *shape):
    return torch.randn(*shape, dtype=torch.float64, generator=g)


#: kernel-level calls whose written operands share memory with another operand: (distinct call,
#: aliased call) builders of (args, kwargs); the shapes, dtypes and strides are the same, so the
#: aliased call has the distinct one's memo signature
KERNEL_ALIASES = {
    "sgd_param_is_momentum_buffer": (
        "fused_sgd", lambda g: (lambda p: ((p, _f64(g, 8), _f64(g, 8)), {}))(_f64(g, 8)),
        lambda g: (lambda p: ((p, _f64(g, 8), p), {}))(_f64(g, 8))),
    "sgd_views_of_one_buffer": (
        "fused_sgd", lambda g: ((_f64(g, 12)[0:8], _f64(g, 8), _f64(g, 12)[4:12]), {}),
        lambda g: (lambda b: ((b[0:8], _f64(g, 8), b[4:12]), {}))(_f64(g, 12))),
    "sgd_param_is_grad": (
        "fused_sgd", lambda g: ((_f64(g, 8), _f64(g, 8), _f64(g, 8)), {}),
        lambda g: (lambda p: ((p, p, _f64(g, 8)), {}))(_f64(g, 8))),
    "adamw_exp_avg_is_exp_avg_sq": (
        "apply_adamw", lambda g: ((_f64(g, 4, 5), _f64(g, 4, 5), _f64(g, 4, 5).abs(), None, _f64(g, 4, 5),
                                   torch.tensor([3.0])), {}),
        lambda g: (lambda m: ((_f64(g, 4, 5), m, m, None, _f64(g, 4, 5), torch.tensor([3.0])), {}))(
            _f64(g, 4, 5).abs())),
    "adamw_amsgrad_max_is_exp_avg_sq": (
        "apply_adamw", lambda g: ((_f64(g, 6), _f64(g, 6), _f64(g, 6).abs(), _f64(g, 6).abs(), _f64(g, 6),
                                   torch.tensor([2.0])), dict(amsgrad=True)),
        lambda g: (lambda v: ((_f64(g, 6), _f64(g, 6), v, v, _f64(g, 6), torch.tensor([2.0])),
                              dict(amsgrad=True)))(_f64(g, 6).abs())),
    "adamw_param_overlaps_exp_avg": (   # one buffer: param [0:6], exp_avg [3:9]
        "apply_adamw", lambda g: ((_f64(g, 9)[0:6], _f64(g, 9)[3:9], _f64(g, 6).abs(), None, _f64(g, 6),
                                   torch.tensor([1.0])), {}),
        lambda g: (lambda b: ((b[0:6], b[3:9], _f64(g, 6).abs(), None, _f64(g, 6), torch.tensor([1.0])), {}))(
            _f64(g, 9))),
}


@pytest.mark.parametrize("case", list(KERNEL_ALIASES))
def test_aliased_state_raises_on_every_call_also_once_memoized(case):
    """A written operand sharing memory with another one: a ValueError on every call, nothing
    written — also when the distinct-tensor call of the same signature is replayed by the memo
    fast path (a cached plan skipped the simulator's plan-build overlap check: wrong values)."""
    name, distinct, aliased = KERNEL_ALIASES[case]
    fn = getattr(kernels, name)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        args, kw = distinct(g)
        fn(*args, **kw)
    args, kw = distinct(g)
    assert _memo_replayed(lambda: fn(*args, **kw)), "the distinct call is not replayed: the test tests nothing"
    for _ in range(3):
        args, kw = aliased(g)
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(ValueError, match="share memory"):
            fn(*args, **kw)
        for a, b in zip(args, before):
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b)      # nothing written
    args, kw = distinct(g)
    assert _memo_replayed(lambda: fn(*args, **kw))   # the signature is still replayed


#: torch fused optimizer calls whose lists share memory: name -> (torch function, report row,
#: builder(generator, alias) -> (lists and numbers, kwargs)); alias=False builds the same shapes
#: from distinct tensors
SGD_HP = dict(weight_decay=2 ** -7, momentum=0.875, lr=2 ** -4, dampening=0.0, nesterov=False, maximize=False,
              is_first_step=False)
ADAM_HP = dict(lr=2 ** -7, beta1=0.875, beta2=1 - 2 ** -10, weight_decay=2 ** -6, eps=2 ** -20, maximize=False)


def _sgd(pick):
    def build(g, alias):
        t = [_f64(g, 8) for _ in range(6)]
        ps, gs, bs = pick(t, alias)
        return (ps, gs, bs), dict(SGD_HP)
    return build


def _adam(pick, amsgrad=False):
    def build(g, alias):
        t = [_f64(g, 2, 4) for _ in range(10)]
        ps, gs, ms, vs, mx = pick(t, alias)
        for v in vs + mx:
            v.abs_()
        steps = [torch.tensor(3.0) for _ in ps]
        return (ps, gs, ms, vs, mx, steps), dict(ADAM_HP, amsgrad=amsgrad)
    return build


def _buf_views(g, alias, n=12, a=(0, 8), b=(4, 12)):
    base = _f64(g, n)
    return (base[a[0]:a[1]], base[b[0]:b[1]]) if alias else (_f64(g, n)[a[0]:a[1]], _f64(g, n)[b[0]:b[1]])


FUSED_ALIASES = {
    "sgd_param_is_its_momentum_buffer": ("_fused_sgd_", "fused_sgd", _sgd(
        lambda t, al: ([t[0]], [t[1]], [t[0] if al else t[2]]))),
    "sgd_param_is_another_params_buffer": ("_fused_sgd_", "fused_sgd", _sgd(
        lambda t, al: ([t[0], t[1]], [t[2], t[3]], [t[4], t[0] if al else t[5]]))),
    "sgd_same_param_twice": ("_fused_sgd_", "fused_sgd", _sgd(
        lambda t, al: ([t[0], t[0] if al else t[1]], [t[2], t[3]], [t[4], t[5]]))),
    "sgd_same_buffer_twice": ("_fused_sgd_", "fused_sgd", _sgd(
        lambda t, al: ([t[0], t[1]], [t[2], t[3]], [t[4], t[4] if al else t[5]]))),
    "sgd_param_is_grad": ("_fused_sgd_", "fused_sgd", _sgd(
        lambda t, al: ([t[0]], [t[0] if al else t[1]], [t[2]]))),
    "adamw_exp_avg_is_exp_avg_sq": ("_fused_adamw_", "apply_adamw", _adam(
        lambda t, al: ([t[0]], [t[1]], [t[2]], [t[2] if al else t[3]], []))),
    "adamw_exp_avg_twice": ("_fused_adamw_", "apply_adamw", _adam(
        lambda t, al: ([t[0], t[1]], [t[2], t[3]], [t[4], t[4] if al else t[5]], [t[6], t[7]], []))),
    "adamw_amsgrad_max_is_param": ("_fused_adamw_", "apply_adamw", _adam(
        lambda t, al: ([t[0]], [t[1]], [t[2]], [t[3]], [t[0] if al else t[4]]), amsgrad=True)),
    "adam_l2_exp_avg_sq_is_grad": ("_fused_adam_", "apply_adamw", _adam(
        lambda t, al: ([t[0]], [t[1]], [t[2]], [t[1] if al else t[3]], []))),
}


def _views_case(fn_name, row):
    """Partial overlap: a param and its momentum buffer / exp_avg, views of one buffer."""
    if fn_name == "_fused_sgd_":
        def build(g, alias):
            p, b = _buf_views(g, alias)
            return ([p], [_f64(g, 8)], [b]), dict(SGD_HP)
    else:
        def build(g, alias):
            p, m = _buf_views(g, alias)
            return ([p], [_f64(g, 8)], [m], [_f64(g, 8).abs()], [], [torch.tensor(2.0)]), dict(ADAM_HP, amsgrad=False)
    return fn_name, row, build


FUSED_ALIASES["sgd_param_and_buffer_views_of_one_buffer"] = _views_case("_fused_sgd_", "fused_sgd")
FUSED_ALIASES["adamw_param_and_exp_avg_views_of_one_buffer"] = _views_case("_fused_adamw_", "apply_adamw")


@pytest.mark.parametrize("level", ["function", "aten"])
@pytest.mark.parametrize("case", list(FUSED_ALIASES))
def test_aliased_fused_steps_match_pytorch_every_time(case, level):
    """torch._fused_*_ calls whose lists share memory (the same tensor in two lists or twice in one,
    across parameters, views of one buffer), after the same signature on distinct tensors ran on
    canna (recorded, then replayed by the memo fast path): each aliased call is refused — PyTorch
    runs it, so the values are PyTorch's in float64 — every time, with the reason."""
    fn_name, row, build = FUSED_ALIASES[case]
    fn = getattr(torch, fn_name)
    ctx = (lambda: ct.offload()) if level == "function" else (lambda: ct.offload(level="aten"))
    g = torch.Generator().manual_seed(7)
    for _ in range(3):   # the distinct-tensor signature: on canna
        args, kw = build(g, False)
        with ctx() as rep:
            fn(*args, **kw)
        assert rep.ops[row].canna == 1 and rep.ops[row].fallback == 0, rep.ops[row]
    for i in range(3):
        state = g.get_state()
        args, kw = build(g, True)
        with ctx() as rep:
            fn(*args, **kw)
        assert rep.ops[row].canna == 0 and rep.ops[row].fallback == 1, rep.ops[row]
        assert any("share memory" in r for r in rep.ops[row].reasons), rep.ops[row].reasons
        g2 = torch.Generator()
        g2.set_state(state)
        ref, _ = build(g2, True)
        fn(*ref, **kw)                   # plain PyTorch, on the same values
        for got, exp in zip(args, ref):
            if isinstance(got, list):
                for a, b in zip(got, exp):
                    torch.testing.assert_close(a, b, rtol=0, atol=0)


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
@pytest.mark.usefixtures("function_level")
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


@pytest.mark.usefixtures("function_level")
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


@pytest.mark.usefixtures("function_level")
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
