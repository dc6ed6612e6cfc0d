"""The memo fast path (kernels/_native/fast.c ``memo``, kernels._core.memo_call): a registry op's
call on torch tensors replayed from its recorded plan launches.

Every memoizable op of the registry has a case below (a test fails for one without): the replayed
call (a second signature-equal call on new random data) must give bitwise the result of the Python
path on the same data (NumPy operands: the same kernels, never the memo), write the same arguments
in place, and launch without the Python path (no plan lookup). Then the boundaries: calls the memo
must leave to the Python path (grad, subclasses, aliasing of a written argument, out= / stream=,
temporaries), errors that still raise, a cleared cache.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kernels  # noqa: E402
from kernels import _core, _native  # noqa: E402
from kernels import _registry as R  # noqa: E402
from conftest import assert_usable  # noqa: E402

pytestmark = pytest.mark.usefixtures("acl")


@pytest.fixture
def gen():
    seed = int(os.environ.get("CANNA_TEST_SEED", 0)) or int.from_bytes(os.urandom(4), "little")
    return torch.Generator().manual_seed(seed)


def f32(gen, *shape, lo=-2.0, hi=2.0):
    return torch.rand(shape, generator=gen) * (hi - lo) + lo


def pos(gen, *shape):
    return f32(gen, *shape, lo=0.5, hi=2.0)


def idx(gen, n, *shape):
    return torch.randint(0, n, shape, generator=gen)


# op name -> gen -> (args, kwargs): one call of each memoizable op (torch tensors, float32 unless the
# op takes others)
CASES = {
    "logical_not": lambda g: ((f32(g, 4, 5) > 0,), {}),
    "flash_attention_score": lambda g: ((f32(g, 1, 2, 4, 8), f32(g, 1, 2, 4, 8), f32(g, 1, 2, 4, 8)),
                                        dict(scale_value=0.35, head_num=2)),
    "flash_attention_score_backward": None,   # its forward's statistics: tests/test_attention.py
    "matmul": lambda g: ((f32(g, 2, 4, 6), f32(g, 6, 3)), {}),
    "linear": lambda g: ((f32(g, 4, 6), f32(g, 3, 6), f32(g, 3)), {}),
    "softmax": lambda g: ((f32(g, 4, 6),), dict(dim=0)),
    "log_softmax": lambda g: ((f32(g, 4, 6),), dict(dim=-1)),
    "layer_norm": lambda g: ((f32(g, 4, 6), (6,), f32(g, 6), f32(g, 6)), dict(eps=1e-3)),
    "native_layer_norm": lambda g: ((f32(g, 2, 3, 6), (3, 6), f32(g, 3, 6), f32(g, 3, 6)), {}),
    "layer_norm_backward": lambda g: ((f32(g, 2, 3, 6), f32(g, 2, 3, 6), (3, 6), f32(g, 2, 1, 1),
                                       abs(f32(g, 2, 1, 1)) + 0.5, f32(g, 3, 6), f32(g, 3, 6)), {}),
    "rms_norm": lambda g: ((f32(g, 4, 6), (6,), f32(g, 6)), {}),
    "native_rms_norm": lambda g: ((f32(g, 4, 6), (6,), f32(g, 6)), dict(eps=1e-4)),
    "conv2d": lambda g: ((f32(g, 2, 3, 6, 6), f32(g, 4, 3, 3, 3), f32(g, 4)), dict(padding=1, stride=(2, 1))),
    "max_pool2d": lambda g: ((f32(g, 2, 3, 6, 6), 2), {}),
    "max_pool2d_with_indices": lambda g: ((f32(g, 2, 3, 7, 7), (3, 3)), dict(stride=2, padding=1)),
    "cross_entropy": lambda g: ((f32(g, 4, 5), idx(g, 5, 4)), dict(label_smoothing=0.1)),
    "native_cross_entropy": lambda g: ((f32(g, 4, 5), idx(g, 5, 4), pos(g, 5)), dict(reduction="sum")),
    "nll_loss": lambda g: ((f32(g, 4, 5), idx(g, 5, 4)), dict(ignore_index=2)),
    "native_nll_loss": lambda g: ((f32(g, 4, 5), idx(g, 5, 4)), {}),
    "nll_loss_backward": lambda g: ((f32(g), torch.log_softmax(f32(g, 4, 5), 1), idx(g, 5, 4), pos(g, 5)),
                                    dict(reduction="sum", ignore_index=1, total_weight=pos(g))),
    "sum": lambda g: ((f32(g, 4, 5, 3),), dict(dim=(0, 2), keepdim=True)),
    "mean": lambda g: ((f32(g, 4, 5),), dict(dim=1)),
    "amax": lambda g: ((f32(g, 4, 5),), dict(dim=0)),
    "sum_to_size": lambda g: ((f32(g, 4, 5),), dict(shape=(1, 5))),
    "softmax_backward": lambda g: ((f32(g, 4, 6), torch.softmax(f32(g, 4, 6), -1)), {}),
    "log_softmax_backward": lambda g: ((f32(g, 4, 6), torch.log_softmax(f32(g, 4, 6), -1)), {}),
    "matmul_backward": lambda g: ((f32(g, 4, 3), f32(g, 4, 6), f32(g, 6, 3)), {}),
    "linear_backward": lambda g: ((f32(g, 4, 3), f32(g, 4, 6), f32(g, 3, 6)), dict(output_mask=(True, False, True))),
    "max_pool2d_backward": lambda g: (lambda x: ((f32(g, 2, 3, 3, 3), x, kernels.max_pool2d_with_indices(x, 2)[1], 2),
                                                 {}))(f32(g, 2, 3, 6, 6)),
    "conv2d_backward": lambda g: ((f32(g, 2, 4, 6, 6), f32(g, 2, 3, 6, 6), f32(g, 4, 3, 3, 3)), dict(padding=1)),
    "apply_adamw": lambda g: ((f32(g, 4, 5), f32(g, 4, 5), pos(g, 4, 5), None, f32(g, 4, 5),
                               torch.tensor([3], dtype=torch.int64)), dict(lr=0.01, weight_decay=0.1)),
    "fused_sgd": lambda g: ((f32(g, 4, 5), f32(g, 4, 5), f32(g, 4, 5)), dict(momentum=0.9, lr=0.1, nesterov=True)),
    "adaptive_avg_pool2d": lambda g: ((f32(g, 2, 3, 6, 6), (2, 3)), {}),
    "adaptive_avg_pool2d_backward": lambda g: ((f32(g, 2, 3, 2, 3), f32(g, 2, 3, 6, 6)), {}),
    "native_batch_norm": lambda g: ((f32(g, 4, 3, 5), f32(g, 3), pos(g, 3), f32(g, 3), f32(g, 3)),
                                    dict(training=True)),
    "batch_norm_backward": lambda g: ((f32(g, 4, 3, 5), f32(g, 4, 3, 5), f32(g, 3), pos(g, 3), f32(g, 3)), {}),
    "batch_norm_stats": lambda g: ((f32(g, 4, 3, 5),), {}),
    "pad": lambda g: ((f32(g, 2, 3, 4),), dict(pad=(1, 2), value=0.5)),
    "embedding": lambda g: ((idx(g, 7, 3, 4), f32(g, 7, 5)), {}),
    "embedding_backward": lambda g: ((f32(g, 3, 4, 5), idx(g, 7, 3, 4)), dict(num_weights=7)),
    "gather": lambda g: ((f32(g, 4, 5), idx(g, 5, 4, 3)), dict(dim=1)),
    "scatter_add": lambda g: ((f32(g, 4, 5), idx(g, 5, 4, 3), f32(g, 4, 3)), dict(dim=1)),
    "dropout_do_mask": None,   # its mask comes from dropout_gen_mask: tests/test_dropout.py
    "addmm": lambda g: ((f32(g, 3), f32(g, 4, 6), f32(g, 6, 3)), dict(beta=0.5, alpha=2.0)),
    "mse_loss": lambda g: ((f32(g, 4, 5), f32(g, 4, 5)), {}),
    "mse_loss_backward": lambda g: ((f32(g), f32(g, 4, 5), f32(g, 4, 5)), dict(reduction="sum")),
    "clone": lambda g: ((f32(g, 4, 5).t(),), {}),
    "cast": lambda g: ((f32(g, 4, 5),), dict(dtype="float64")),
    "all": lambda g: ((f32(g, 4, 5) > 0,), dict(dim=1)),
    "any": lambda g: ((f32(g, 4, 5) > 0,), dict(dim=0, keepdim=True)),
    "eq": lambda g: ((idx(g, 3, 4, 5), idx(g, 3, 5)), {}),
    "ne": lambda g: ((idx(g, 3, 4, 5), idx(g, 3, 4, 5)), {}),
    "lt": lambda g: ((f32(g, 4, 5), f32(g, 4, 1)), {}),
    "le": lambda g: ((f32(g, 4, 5), f32(g, 4, 5)), {}),
    "gt": lambda g: ((f32(g, 4, 5), f32(g, 5)), {}),
    "ge": lambda g: ((f32(g, 4, 5), f32(g, 4, 5)), {}),
    "maximum": lambda g: ((f32(g, 4, 5), f32(g, 4, 5)), {}),
    "minimum": lambda g: ((f32(g, 4, 5), f32(g, 1, 5)), {}),
    "where": lambda g: ((f32(g, 4, 5) > 0, f32(g, 4, 5), f32(g, 5)), {}),
    "cumsum": lambda g: ((f32(g, 4, 5),), dict(dim=1)),
    "cumsum_v2": lambda g: ((f32(g, 4, 5),), dict(dim=0, exclusive=True, reverse=True)),
    "cat": lambda g: (([f32(g, 2, 3, 4), f32(g, 2, 1, 4), f32(g, 2, 5, 4)],), dict(dim=1)),
}


#: the cases whose call is not replayable (the memo remembers that; the Python path serves them)
NOT_REPLAYED = {"max_pool2d": "its indices are a temporary the result leaves out",
                "flash_attention_score": "a zero-size output (pse's gradient)"}


def _memo_ops():
    """The registry's ops whose kernel function tries the memo (the others have the two-operand
    fast path, or no memo)."""
    return [op for op in R.registered_ops("canna") if R.memoizable(op) and not R.has_fast_path(op)]


def test_every_memoizable_op_has_a_case():
    missing = sorted(op.name for op in _memo_ops() if op.name not in CASES)
    assert not missing, f"add a call of {missing} to CASES"


def _np(v):
    if type(v) is torch.Tensor:
        return v.numpy().copy()
    if type(v) is list:   # a list input: NumPy arrays too
        return [_np(x) for x in v]
    return v


def _as_np(r):
    if r is None:
        return None
    if isinstance(r, tuple):
        return tuple(_as_np(x) for x in r)
    return np.asarray(r).copy() if not isinstance(r, torch.Tensor) else r.numpy().copy()


def _same(got, ref):
    if ref is None or got is None:
        assert got is None and ref is None
        return
    if isinstance(ref, tuple):
        assert isinstance(got, tuple) and len(got) == len(ref)
        for a, b in zip(got, ref):
            _same(a, b)
        return
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype, ref.shape)
    np.testing.assert_array_equal(got, ref)


def _launches():
    return _native.stats()["launches"]


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c is not None))
def test_replay_is_the_python_path_bitwise(name, gen):
    op = kernels.get_op(name)
    fn = op.kernel
    assert R.memoizable(op)
    _core.clear_plan_cache()                        # (only this test's signature in the memo)
    args, kw = CASES[name](gen)
    for _ in range(3):                              # the first calls set the runtime and fast paths up, then record
        fn(*CASES[name](gen)[0], **kw)
    args, kw = CASES[name](gen)                     # new data, the same signature
    nargs = [_np(a) for a in args]
    ref = _as_np(fn(*nargs, **kw))                  # NumPy operands: the Python path
    hits = _core._stats["plan_hits"]
    n0 = _launches()
    got = fn(*args, **kw)
    ents = _memo_entries(fn)
    if name in NOT_REPLAYED:
        assert ents and all(e is None for e in ents), ents
    else:
        entry = next((e for e in ents if e is not None), None)
        assert entry is not None, f"{name}: nothing memoized"
        assert _core._stats["plan_hits"] == hits, "the call took the Python path"
        assert _launches() - n0 == len(entry[0])
    r = _as_np(got if not isinstance(got, torch.Tensor) else got)
    _same(r, ref)
    for a, b in zip(args, nargs):                  # arguments written in place: the same values
        if type(a) is torch.Tensor:
            np.testing.assert_array_equal(a.numpy(), b)


def _key_prefix(fn):
    """The memo op id of a generated kernel function (the first 4 bytes of its keys)."""
    src = fn.__code__.co_consts
    ids = [c for c in src if isinstance(c, int) and c > 0x40000000]
    assert len(ids) == 1, ids
    return int(ids[0]).to_bytes(4, "little", signed=True)


def test_replayed_values_against_float64_torch(gen):
    """Replayed linear / layer_norm / softmax / conv2d on random data against PyTorch in float64."""
    F = torch.nn.functional
    for _ in range(3):
        x, w, b = f32(gen, 5, 7), f32(gen, 4, 7), f32(gen, 4)
        torch.testing.assert_close(kernels.linear(x, w, b).double(), F.linear(x.double(), w.double(), b.double()),
                                   rtol=2e-5, atol=2e-5)
        torch.testing.assert_close(kernels.layer_norm(x, (7,)).double(), F.layer_norm(x.double(), (7,)),
                                   rtol=2e-5, atol=2e-5)
        torch.testing.assert_close(kernels.softmax(x, 0).double(), torch.softmax(x.double(), 0), rtol=2e-6, atol=2e-6)
        c, k = f32(gen, 1, 2, 5, 5), f32(gen, 3, 2, 3, 3)
        torch.testing.assert_close(kernels.conv2d(c, k, padding=1).double(), F.conv2d(c.double(), k.double(), padding=1),
                                   rtol=2e-5, atol=2e-5)


def _python_path():
    """Plan lookups and builds so far: the Python path's, never the memo's."""
    return _core._stats["plan_hits"] + _core._stats["plans_built"]


def _memo_entries(fn):
    p = _key_prefix(fn)
    return [v for k, v in _core.memo_cache.items() if k[:4] == p]


def test_not_applicable_calls_take_the_python_path(gen):
    x, w = f32(gen, 4, 6), f32(gen, 3, 6)
    for _ in range(3):
        kernels.linear(x, w)
    hits = _core._stats["plan_hits"]
    kernels.linear(x, w)
    assert _core._stats["plan_hits"] == hits            # memoized
    for call in (lambda: kernels.linear(x, torch.nn.Parameter(w, requires_grad=False)),   # a subclass
                 lambda: kernels.linear(x, w, out=torch.empty(4, 3)),        # out=
                 lambda: kernels.linear(x.numpy(), w),                        # NumPy
                 lambda: kernels.linear(x, w.T.contiguous().T)):              # other strides: another key
        h = _python_path()
        r = call()
        torch.testing.assert_close(torch.as_tensor(np.asarray(r)), x @ w.T, rtol=1e-5, atol=1e-5)
        assert _python_path() > h
    with pytest.raises(BufferError):     # requires_grad: canna's DLPack refuses it, as PyTorch's does
        kernels.linear(x, w.clone().requires_grad_())


def test_bad_input_still_raises_and_state_stays_usable(gen):
    x, w = f32(gen, 4, 6), f32(gen, 3, 6)
    for _ in range(3):
        kernels.linear(x, w)
    with pytest.raises(ValueError):
        kernels.linear(x, f32(gen, 3, 5))                     # mismatched shapes (a new signature)
    with pytest.raises(TypeError):
        kernels.linear(x, w.to(torch.int32))                  # a dtype linear does not take
    with pytest.raises(TypeError):
        kernels.softmax(x, dim="x")                           # a str dim
    with pytest.raises((ValueError, IndexError)):
        kernels.softmax(x, dim=5)
    for _ in range(2):                                        # the same bad call again: still raises
        with pytest.raises(ValueError):
            kernels.linear(x, f32(gen, 3, 5))
    torch.testing.assert_close(kernels.linear(x, w), x @ w.T, rtol=1e-5, atol=1e-5)
    assert_usable()


def test_written_argument_overlap_is_left_to_the_python_path(gen):
    """apply_adamw writes param, exp_avg, exp_avg_sq: a call where one of them shares memory with
    another argument takes the Python path, which refuses it (a ValueError, on every call), even
    once the distinct-tensor signature is memoized (a replay would compute it silently)."""
    def state():
        return [f32(gen, 4, 5), f32(gen, 4, 5), pos(gen, 4, 5), None, f32(gen, 4, 5), torch.tensor([2])]
    for _ in range(3):
        kernels.apply_adamw(*state())
    assert any(e is not None for e in _memo_entries(kernels.apply_adamw))
    for _ in range(2):
        for alias in (lambda s: s[0], lambda s: s[0].view(-1).view(4, 5), lambda s: s[2], lambda s: s[4]):
            s = state()
            s[1] = alias(s)
            hits = _python_path()
            with pytest.raises(ValueError, match="share memory"):
                kernels.apply_adamw(*s)
            assert _python_path() == hits   # refused before any plan
    hits = _python_path()
    kernels.apply_adamw(*state())
    assert _python_path() == hits           # the distinct call: still replayed
    assert_usable()


def test_input_updated_in_place_is_a_written_argument(gen):
    """native_batch_norm updates running_mean / running_var in place, as operands among the plan's
    inputs: the memo counts them as written (the Python path's outputs), so a replay-eligible
    signature with running_mean IS running_var (or the weight) takes the Python path, which refuses
    it every time — and the distinct call is replayed, against PyTorch in float64."""
    def call(rm=None, rv=None, w=None):
        x = f32(gen, 4, 3, 5)
        rm = pos(gen, 3) if rm is None else rm
        rv = pos(gen, 3) if rv is None else rv
        return x, rm, rv, w
    for _ in range(3):
        kernels.native_batch_norm(*call(), None, True, 0.25, 1e-5)
    ents = [e for e in _memo_entries(kernels.native_batch_norm) if e is not None]
    assert ents and all(set(e[2]) >= {1, 2} for e in ents), ents   # running_mean, running_var: written
    x, rm, rv, _ = call()
    ref = [t.double() for t in (x, rm, rv)]
    hits = _python_path()
    y = kernels.native_batch_norm(x, rm, rv, None, None, True, 0.25, 1e-5)[0]
    assert _python_path() == hits                                 # replayed
    ry = torch.nn.functional.batch_norm(ref[0], ref[1], ref[2], training=True, momentum=0.25, eps=1e-5)
    torch.testing.assert_close(y.double(), ry, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rm.double(), ref[1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rv.double(), ref[2], rtol=1e-5, atol=1e-6)
    for _ in range(3):
        m = pos(gen, 3)
        for args in (call(rm=m, rv=m), call(rm=m, w=m)):
            before = m.clone()
            with pytest.raises(ValueError, match="running_mean overlaps input"):
                kernels.native_batch_norm(*args, None, True, 0.25, 1e-5)
            assert torch.equal(m, before)
    assert_usable()


def test_a_call_with_a_temporary_is_never_memoized(gen):
    """rms_norm without a weight multiplies by a ones temporary (canna's pool): not replayable,
    remembered as such, and computed right every time."""
    _core.clear_plan_cache()
    x = f32(gen, 4, 6)
    for _ in range(3):
        x = f32(gen, 4, 6)
        got = kernels.rms_norm(x, (6,))
    ents = _memo_entries(kernels.rms_norm)
    assert ents and all(e is None for e in ents)
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + torch.finfo(torch.float32).eps)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_tensor_arguments_sharing_memory_are_not_recorded(gen):
    """matmul(x, x) records nothing (an address would name either argument), and does not keep the
    signature from being memoized by a call on distinct tensors; that replay serves x @ x too."""
    _core.clear_plan_cache()
    x = f32(gen, 4, 4)
    for _ in range(3):
        r = kernels.matmul(x, x)
    assert not _memo_entries(kernels.matmul)
    torch.testing.assert_close(r, x @ x, rtol=1e-5, atol=1e-5)
    y = f32(gen, 4, 4)
    for _ in range(2):
        r = kernels.matmul(y, x)          # distinct tensors, the same signature: memoized
    assert [e is not None for e in _memo_entries(kernels.matmul)] == [True]
    hits = _core._stats["plan_hits"]
    torch.testing.assert_close(kernels.matmul(x, x), x @ x, rtol=1e-5, atol=1e-5)   # replayed with an alias
    assert _core._stats["plan_hits"] == hits


def test_cleared_cache_and_new_plans(gen):
    x, w = f32(gen, 4, 6), f32(gen, 3, 6)
    for _ in range(3):
        kernels.linear(x, w)
    _core.clear_plan_cache()
    assert not _memo_entries(kernels.linear)
    for _ in range(3):
        torch.testing.assert_close(kernels.linear(x, w), x @ w.T, rtol=1e-5, atol=1e-5)
    assert_usable()


def test_a_list_input_is_keyed_by_its_length_and_tensors(gen):
    """``kernels.cat`` (a list input): the memo keys the list's length and each tensor, so other
    lengths, shapes or dtypes are other signatures; a list holding an alias, a NumPy array or a
    non-array, or a generator, is still served right (the Python path: its result or its error)."""
    a, b, c = f32(gen, 2, 3), f32(gen, 4, 3), f32(gen, 1, 3)
    for _ in range(3):
        kernels.cat([a, b, c], 0)
    h = _python_path()
    for xs in ([a, b, c], (a, b, c), [f32(gen, 2, 3), f32(gen, 4, 3), f32(gen, 1, 3)]):
        torch.testing.assert_close(kernels.cat(xs, 0), torch.cat(xs, 0), rtol=0, atol=0)
    assert _python_path() == h                                 # replayed: a tuple keys as a list
    for xs in ([a, b], [a, b, c, a], [a, a, a], [a, b.double(), c], [a.t(), a.t()]):
        torch.testing.assert_close(kernels.cat(xs, 0), torch.cat(xs, 0), rtol=0, atol=0)
        torch.testing.assert_close(kernels.cat(xs, 0), torch.cat(xs, 0), rtol=0, atol=0)   # (replayed or not: right)
    got = kernels.cat([a, b.numpy(), c], 0)
    np.testing.assert_array_equal(np.asarray(got), torch.cat([a, b, c], 0).numpy())
    with pytest.raises(TypeError):
        kernels.cat([a, "b", c], 0)
    with pytest.raises(TypeError):
        kernels.cat(x for x in (a, b))
    with pytest.raises(ValueError):
        kernels.cat([a, f32(gen, 2, 4)], 0)                    # sizes differ off dim
    torch.testing.assert_close(kernels.cat([a, b, c], 0), torch.cat([a, b, c], 0), rtol=0, atol=0)
    assert_usable()


def test_empty_tensor_arguments_replay(gen):
    """An empty tensor argument (a cache's first ``torch.cat([torch.empty(0), k], -2)``, an empty
    slice) is keyed by its shape like any other and replayed: the launch touches none of its
    elements."""
    for make, d in ((lambda: [torch.empty(0), f32(gen, 4, 2, 3, 5).transpose(1, 2)], -2),   # legacy empty, a view
                    (lambda: [f32(gen, 2, 0, 3), f32(gen, 2, 4, 3)], 1),
                    (lambda: [f32(gen, 6, 3)[2:2], f32(gen, 2, 3)], 0)):                     # an empty view at an offset
        for _ in range(3):
            kernels.cat(make(), d)
        h = _python_path()
        for _ in range(3):
            xs = make()
            torch.testing.assert_close(kernels.cat(xs, d), torch.cat(xs, d), rtol=0, atol=0)
        assert _python_path() == h, "the calls took the Python path"
    s = f32(gen, 3, 4)
    for _ in range(3):
        r = kernels.sum(s[:0], dim=0)                       # an empty input, a written result
    torch.testing.assert_close(r, torch.zeros(4), rtol=0, atol=0)
    assert_usable()
