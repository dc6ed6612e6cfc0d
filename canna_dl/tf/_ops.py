"""canna's differentiable ops for TensorFlow (``canna_dl.tf.add``, ..., docs/DESIGN.md §7).

Forward and backward run canna's kernels (``kernels.*`` and ``kernels.backward.*``); how they run
eagerly, inside ``tf.function`` and under nested tapes is described in
:mod:`canna_dl.tf._autograd`.

Rules every op follows:

- operands are dense TensorFlow tensors (or variables, NumPy arrays, lists: converted with
  ``tf.convert_to_tensor``); ragged and sparse tensors are refused with a TypeError;
- differentiable operands have one floating dtype (float16, bfloat16, float32, float64):
  integer, bool and string tensors and mixed dtypes raise TypeError (TensorFlow does not promote,
  canna does not either); a Python number next to a tensor takes the tensor's dtype;
- shapes broadcast as in NumPy / TensorFlow, and the gradient of a broadcast operand is summed
  back to the operand's shape;
- argument names follow TensorFlow where TensorFlow has the op (``axis``, ``keepdims``,
  ``tf.nn.conv2d``'s ``strides`` / ``padding`` / ``data_format`` / ``dilations``) and PyTorch /
  the kernel library where it has none (``linear``, ``layer_norm``, ``rms_norm``,
  ``cross_entropy``);
- errors found from static shapes are raised when the op is called (also while tracing a
  ``tf.function``); errors found only at run time inside a ``tf.function`` come back as
  ``tf.errors.InvalidArgumentError`` carrying canna's message (``tf.py_function``'s rule).
"""
from __future__ import annotations

import builtins
import math
import operator

import tensorflow as tf

import canna_dl
import kernels as K
from .. import _copy as dl_copy

from . import _native
from ._autograd import INTS, apply, arr, dims_of, float_tensor, same_dtype, tensor

__all__ = ["matmul", "linear", "dense", "relu", "gelu", "silu", "sigmoid", "tanh",
           "softmax", "log_softmax", "layer_norm", "rms_norm", "conv2d", "max_pool2d", "cross_entropy", "sum",
           "mean"]

_P = "canna_dl.tf."


def _same(t):
    return [(t.dtype, t.shape)]


# arithmetic (add, sub, mul, div, pow) and the unary ops: generated from their registry entries
# (kernels/ops/elementwise.py; canna_dl/tf/_generated.py)

# ---------------------------------------------------------------------------------------------
# activations

def _gen(name):
    from ._generated import function
    return function(K.get_op(name))


# generated from their registry entries (kernels/ops/elementwise.py; canna_dl/tf/_generated.py)
relu, silu, sigmoid, tanh = (_gen(n) for n in ("relu", "silu", "sigmoid", "tanh"))
# softmax(logits, axis=-1), log_softmax(logits, axis=-1): TensorFlow's names (kernels/ops/nn.py)
softmax, log_softmax = _gen("softmax"), _gen("log_softmax")


def gelu(x, approximate=False):
    """GELU (``tf.nn.gelu``): exact (erf) or, with ``approximate=True``, the tanh approximation
    (TensorFlow's bool argument; the registry entry's ``approximate="none"|"tanh"``)."""
    if not isinstance(approximate, builtins.bool):
        raise TypeError(f"{_P}gelu: approximate must be a bool, not {type(approximate).__name__}")
    return _gen("gelu")(x, "tanh" if approximate else "none")


# ---------------------------------------------------------------------------------------------
# products

# matmul(a, b): generated from its registry entry (kernels/ops/nn.py)
matmul = _gen("matmul")
add = _gen("add")   # (exported by canna_dl.tf's registry export; dense composes it)


def _linear_checks(api, x, w, b, w_in_axis, w_out_axis):
    same_dtype(api, ("x", x), ("weight", w), ("bias", b))
    if w.shape.rank is not None and w.shape.rank != 2:
        raise ValueError(f"{api}: the weight must be 2-D, got shape {w.shape}")
    if x.shape.rank == 0:
        raise ValueError(f"{api}: x must have at least 1 dimension")
    if x.shape.rank is not None and w.shape.rank is not None:
        xin, win = x.shape[-1], w.shape[w_in_axis]
        if xin is not None and win is not None and xin != win:
            raise ValueError(f"{api}: x of shape {x.shape} and weight of shape {w.shape} do not match "
                             f"(x's last dim {xin} != in_features {win})")
    if b is not None and b.shape.rank is not None and w.shape.rank is not None:
        if b.shape.rank != 1 or not b.shape.is_compatible_with([w.shape[w_out_axis]]):
            raise ValueError(f"{api}: bias has shape {b.shape}, expected ({w.shape[w_out_axis]},)")


def _out_features_shape(x, n):
    if x.shape.rank is None:
        return tf.TensorShape(None)
    return x.shape[:-1].concatenate([n])


# linear(x, weight, bias=None): generated from its registry entry (kernels/ops/nn.py); see dense for
# Keras's [in, out] kernel layout
linear = _gen("linear")


def dense(x, kernel, bias=None):
    """``x @ kernel + bias`` with Keras's layout (``keras.layers.Dense``): ``kernel`` is
    ``[in_features, out_features]``. Runs ``kernels.linear`` on the kernel's transposed view (no
    copy); the backward is three canna kernels: ``dy @ kernel^T``, ``x^T @ dy`` (over the
    flattened leading dims) and ``sum(dy)`` (the products ``kernels.backward.linear`` is made of,
    arranged so that no transposed copy is needed).

    Args:
        x: ``[*, in_features]``. kernel: ``[in_features, out_features]``. bias: ``[out_features]`` or None.

    Returns ``[*, out_features]``.
    """
    api = _P + "dense"
    xt = float_tensor(api, "x", x)
    k = float_tensor(api, "kernel", kernel)
    b = None if bias is None else float_tensor(api, "bias", bias)
    _linear_checks(api, xt, k, b, 0, 1)
    if not tf.executing_eagerly() and xt.shape.rank is not None and xt.shape.rank >= 2 and _native.available():
        # inside tf.function: two native CannaCall nodes (matmul, add), differentiated by their
        # entries, counted by op_stats as one "dense" (and its backward as one "dense" backward)
        with _native.counted_as(api):
            y = matmul(xt, k)
            return y if b is None else add(y, b)  # noqa: F821 - add is exported from the registry
    xs = [xt, k] + ([b] if b is not None else [])
    has_b = b is not None

    def fwd(save, x, k, b=None):
        return [K.linear(arr(x), arr(k).T, None if b is None else arr(b))]

    def bwd(d, xs, s):
        g, x, k = arr(d[0]), arr(xs[0]), arr(xs[1])
        nin, nout = k.shape
        rows = math.prod(x.shape[:-1])
        gx = K.matmul(g, k.T)
        gk = K.matmul(x.reshape(rows, nin).T, g.reshape(rows, nout))
        r = [gx, gk]
        if has_b:
            r.append(K.sum(g, tuple(range(g.ndim - 1))) if g.ndim > 1 else K.astype(g, g.dtype))
        return r
    return apply(api, xs, (True,) * len(xs), fwd, 1, lambda: [(xt.dtype, _out_features_shape(xt, k.shape[1]))], bwd)


# ---------------------------------------------------------------------------------------------
# normalization

def _ns(api, normalized_shape):
    if hasattr(normalized_shape, "__index__") and not isinstance(normalized_shape, builtins.bool):
        return (operator.index(normalized_shape),)
    try:
        ns = tuple(operator.index(n) for n in normalized_shape)
    except TypeError:
        raise TypeError(f"{api}: normalized_shape must be an int or a sequence of ints, not "
                        f"{normalized_shape!r}") from None
    if not ns:
        raise ValueError(f"{api}: normalized_shape must not be empty")
    return ns


def _norm_checks(api, x, ns, params):
    r = x.shape.rank
    if r is not None:
        tail = tf.TensorShape(x.shape[r - len(ns):] if len(ns) <= r else None)
        if len(ns) > r or not tail.is_compatible_with(ns):
            raise ValueError(f"{api}: given normalized_shape={list(ns)}, expected an input with shape [*, "
                             f"{', '.join(map(str, ns))}], but got an input of shape {x.shape}")
    for name, p in params:
        if p is not None and not p.shape.is_compatible_with(ns):
            raise ValueError(f"{api}: {name} has shape {p.shape}, expected the normalized shape {ns}")


def _stat_shape(x, k):
    if x.shape.rank is None:
        return tf.TensorShape(None)
    return x.shape[:x.shape.rank - k].concatenate([1] * k)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer normalization over the trailing ``normalized_shape`` dims
    (``torch.nn.functional.layer_norm``; ``kernels.native_layer_norm`` /
    ``kernels.backward.layer_norm``): ``(x - mean) / sqrt(var + eps) * weight + bias``, biased
    variance. ``weight`` and ``bias`` (optional) have ``normalized_shape`` and get gradients.

    Raises:
        ValueError: shapes that do not match ``normalized_shape``, a negative eps.
    """
    api = _P + "layer_norm"
    ns = _ns(api, normalized_shape)
    xt = float_tensor(api, "x", x)
    w = None if weight is None else float_tensor(api, "weight", weight)
    b = None if bias is None else float_tensor(api, "bias", bias)
    same_dtype(api, ("x", xt), ("weight", w), ("bias", b))
    _norm_checks(api, xt, ns, (("weight", w), ("bias", b)))
    if not isinstance(eps, (int, float)) or isinstance(eps, builtins.bool) or not 0 <= eps < math.inf:
        raise ValueError(f"{api}: eps must be a finite number >= 0, got {eps!r}")
    hw, hb = w is not None, b is not None
    xs = [xt] + ([w] if hw else []) + ([b] if hb else [])

    def params(ts):
        it = iter(ts[1:])
        return (next(it) if hw else None), (next(it) if hb else None)

    def fwd(save, *ts):
        pw, pb = params(ts)
        if save:
            return list(K.native_layer_norm(ts[0], ns, pw, pb, eps))
        return [K.layer_norm(ts[0], ns, pw, pb, eps)]

    def bwd(d, ts, s):
        pw, pb = params(ts)
        gi, gw, gb = K.backward.layer_norm(d[0], ts[0], ns, s[0], s[1], pw, pb, (True, hw, hb))
        return [gi] + ([gw] if hw else []) + ([gb] if hb else [])
    stat = lambda: (xt.dtype, _stat_shape(xt, len(ns)))  # noqa: E731
    return apply(api, xs, (True,) * len(xs), fwd, 1, lambda: [(xt.dtype, xt.shape), stat(), stat()], bwd)


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """RMS normalization over the trailing ``normalized_shape`` dims
    (``torch.nn.functional.rms_norm``; ``kernels.native_rms_norm`` / ``kernels.backward.rms_norm``):
    ``x / sqrt(mean(x**2) + eps) * weight``; ``eps=None`` is the dtype's machine epsilon (PyTorch's
    default). See :func:`layer_norm`."""
    api = _P + "rms_norm"
    ns = _ns(api, normalized_shape)
    xt = float_tensor(api, "x", x)
    w = None if weight is None else float_tensor(api, "weight", weight)
    same_dtype(api, ("x", xt), ("weight", w))
    _norm_checks(api, xt, ns, (("weight", w),))
    if eps is not None and (not isinstance(eps, (int, float)) or isinstance(eps, builtins.bool)
                            or not 0 <= eps < math.inf):
        raise ValueError(f"{api}: eps must be a finite number >= 0 or None, got {eps!r}")
    hw = w is not None
    xs = [xt] + ([w] if hw else [])

    def fwd(save, x, w=None):
        if save:
            return list(K.native_rms_norm(x, ns, w, eps))
        return [K.rms_norm(x, ns, w, eps)]

    def bwd(d, ts, s):
        gi, gw = K.backward.rms_norm(d[0], ts[0], ns, s[0], ts[1] if hw else None)
        return [gi] + ([gw] if hw else [])
    rdt = tf.float32 if xt.dtype in (tf.float16, tf.bfloat16) else xt.dtype
    return apply(api, xs, (True,) * len(xs), fwd, 1,
                 lambda: [(xt.dtype, xt.shape), (rdt, _stat_shape(xt, len(ns)))], bwd)


# ---------------------------------------------------------------------------------------------
# convolution and pooling (TensorFlow's layouts: NHWC / NCHW data, HWIO filters)

def _data_format(api, data_format):
    if data_format in ("NHWC", "channels_last"):
        return True
    if data_format in ("NCHW", "channels_first"):
        return False
    raise ValueError(f"{api}: data_format must be 'NHWC' or 'NCHW', not {data_format!r}")


def _hw(api, name, v, nhwc, default=None):
    """An int, ``[h, w]`` or TensorFlow's 4-value form (``[1, h, w, 1]`` NHWC, ``[1, 1, h, w]``
    NCHW) → ``(h, w)``."""
    if v is None:
        if default is None:
            raise TypeError(f"{api}: {name} is required")
        return default
    if hasattr(v, "__index__") and not isinstance(v, builtins.bool):
        v = operator.index(v)
        t = (v, v)
    else:
        try:
            t = tuple(operator.index(e) for e in v)
        except TypeError:
            raise TypeError(f"{api}: {name} must be an int or a list of 1, 2 or 4 ints, not {v!r}") from None
        if len(t) == 1:
            t = t * 2
        elif len(t) == 4:
            hi, wi = (1, 2) if nhwc else (2, 3)
            if any(t[i] != 1 for i in range(4) if i not in (hi, wi)):
                raise ValueError(f"{api}: {name} {list(t)} must be 1 in the batch and channel dimensions")
            t = (t[hi], t[wi])
        elif len(t) != 2:
            raise ValueError(f"{api}: {name} must have 1, 2 or 4 values, got {len(t)}")
    if min(t) < 1:
        raise ValueError(f"{api}: {name} must be >= 1, got {list(t)}")
    return t


def _padding(api, padding, nhwc):
    """"SAME" / "VALID" or TensorFlow's explicit ``[[0, 0], [top, bottom], [left, right], [0, 0]]``
    (NHWC; ``[[0, 0], [0, 0], [top, bottom], [left, right]]`` NCHW) → "SAME", "VALID" or
    ``((top, bottom), (left, right))``."""
    if isinstance(padding, str):
        p = padding.upper()
        if p not in ("SAME", "VALID"):
            raise ValueError(f"{api}: padding must be 'SAME', 'VALID' or a list of explicit paddings, not {padding!r}")
        return p
    try:
        pairs = [tuple(operator.index(e) for e in pair) for pair in padding]
    except TypeError:
        raise TypeError(f"{api}: padding must be 'SAME', 'VALID' or a list of 4 [before, after] pairs, not "
                        f"{padding!r}") from None
    if len(pairs) != 4 or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{api}: explicit padding must be 4 [before, after] pairs, got {padding!r}")
    hi, wi = (1, 2) if nhwc else (2, 3)
    if any(pairs[i] != (0, 0) for i in range(4) if i not in (hi, wi)):
        raise ValueError(f"{api}: explicit padding of the batch and channel dimensions must be 0, got {padding!r}")
    if min(min(pairs[hi]), min(pairs[wi])) < 0:
        raise ValueError(f"{api}: explicit padding must be >= 0, got {padding!r}")
    return (pairs[hi], pairs[wi])


def _pads(padding, n, k, s, d):
    """(before, after) padding of one spatial dim of size ``n`` (TensorFlow's SAME rule: output
    ``ceil(n / s)``, the odd padding element after)."""
    if padding == "VALID":
        return 0, 0
    if padding == "SAME":
        eff = (k - 1) * d + 1
        total = max((-(-n // s) - 1) * s + eff - n, 0)
        return total // 2, total - total // 2
    return padding


def _out_len(api, padding, n, k, s, d, i):
    if n is None or k is None:
        return None
    eff = (k - 1) * d + 1
    if padding == "SAME":
        return -(-n // s)
    before, after = (0, 0) if padding == "VALID" else padding[i]
    span = n + before + after - eff
    if span < 0:
        raise ValueError(f"{api}: the window (size {k}, dilation {d}) is larger than the padded input "
                         f"({n + before + after})")
    return span // s + 1


def _nchw(a, nhwc):
    return a.permute(0, 3, 1, 2) if nhwc else a


def _contig(view, reason):
    """A C-contiguous copy of a view (a kernel), counted in ``canna_dl.copy_stats`` as ``reason``."""
    r = K.contiguous(view)
    if r is not view:
        dl_copy.count(reason, view.nbytes)
    return r


def _pad_nchw(xn, pt, pb, pl, pr):
    n, c, h, w = xn.shape
    p = canna_dl.zeros((n, c, h + pt + pb, w + pl + pr), xn.dtype)
    K.copy_(p[:, :, pt:pt + h, pl:pl + w], xn)
    dl_copy.count("tf_pad", xn.nbytes)
    return p


def _conv_geometry(x, w, g):
    """The NCHW operands of a convolution: (input view or padded copy, OIHW filter view, padding,
    (pt, pb, pl, pr), groups)."""
    nhwc, strides, dil, padding = g
    xn = _nchw(arr(x), nhwc)
    wa = arr(w)
    wn = wa.permute(3, 2, 0, 1)   # HWIO -> OIHW
    _, c, h, wd = xn.shape
    kh, kw, ci, _ = wa.shape
    if ci == 0 or c % ci:
        raise ValueError(f"{_P}conv2d: the input has {c} channels, which is not a multiple of the filters' "
                         f"{ci} input channels (filters are [height, width, in_channels / groups, out_channels])")
    pt, pb = _pads(padding if not isinstance(padding, tuple) else padding[0], h, kh, strides[0], dil[0])
    pl, pr = _pads(padding if not isinstance(padding, tuple) else padding[1], wd, kw, strides[1], dil[1])
    if pt != pb or pl != pr:
        return _pad_nchw(xn, pt, pb, pl, pr), wn, (0, 0), (pt, pb, pl, pr), c // ci
    return xn, wn, (pt, pl), None, c // ci


def conv2d(input, filters, strides=1, padding="VALID", data_format="NHWC", dilations=1, bias=None):  # noqa: A002
    """2-D convolution with TensorFlow's conventions (``tf.nn.conv2d`` plus an optional fused
    ``bias``; ``kernels.conv2d`` / ``kernels.backward.conv2d`` over ``aclnnConvolution``).

    Args:
        input: ``[N, H, W, C]`` (``data_format="NHWC"``, TensorFlow's default) or ``[N, C, H, W]``
            (``"NCHW"``, canna's native layout; TensorFlow's CPU kernels lack it).
        filters: ``[kh, kw, C / groups, O]`` (HWIO; ``groups = C / filters.shape[2]``).
        strides, dilations: an int, ``[h, w]`` or the 4-value form.
        padding: ``"VALID"``, ``"SAME"`` (output ``ceil(H / stride)``, odd padding at the
            bottom/right) or explicit ``[[0, 0], [top, bottom], [left, right], [0, 0]]`` (NHWC).
        bias: ``[O]`` or None.

    Returns ``[N, H_out, W_out, O]`` (NHWC) or ``[N, O, H_out, W_out]`` (NCHW).

    Layouts and copies (counted in ``canna_dl.copy_stats()``): aclnn's convolution is NCHW / OIHW.
    NHWC inputs and HWIO filters are handed to it as permuted (strided) views and the forward
    writes its NHWC result through a permuted view, all without copies; the backward's NCHW input
    gradient is transposed to NHWC (``"tf_nhwc"``) and the OIHW filter gradient to HWIO
    (``"tf_hwio"``). Asymmetric padding (SAME with an even window or a stride, explicit padding)
    is done by copying the input into a zero-padded NCHW buffer (``"tf_pad"``, in forward and
    backward).

    Raises:
        ValueError: shapes or channels that do not match, a window larger than the padded input,
            bad strides / padding / data_format. TypeError: see :func:`add`.
    """
    api = _P + "conv2d"
    nhwc = _data_format(api, data_format)
    x = float_tensor(api, "input", input)
    w = float_tensor(api, "filters", filters)
    b = None if bias is None else float_tensor(api, "bias", bias)
    same_dtype(api, ("input", x), ("filters", w), ("bias", b))
    st = _hw(api, "strides", strides, nhwc)
    dl = _hw(api, "dilations", dilations, nhwc, (1, 1))
    pad = _padding(api, padding, nhwc)
    for name, t, r in (("input", x, 4), ("filters", w, 4), ("bias", b, 1)):
        if t is not None and t.shape.rank is not None and t.shape.rank != r:
            raise ValueError(f"{api}: {name} must be {r}-D, got shape {t.shape}")
    xd, wd = dims_of(x.shape), dims_of(w.shape)
    if xd is not None and wd is not None:
        c, ci, o = xd[3 if nhwc else 1], wd[2], wd[3]
        if c is not None and ci is not None and (ci == 0 or c % ci):
            raise ValueError(f"{api}: input of shape {x.shape} has {c} channels, which is not a multiple of the "
                             f"filters' {ci} input channels (filters of shape {w.shape} are HWIO)")
        if b is not None and b.shape.rank == 1 and not b.shape.is_compatible_with([o]):
            raise ValueError(f"{api}: bias has shape {b.shape}, expected ({o},)")
    geo = (nhwc, st, dl, pad)
    has_b = b is not None
    xs = [x, w] + ([b] if has_b else [])

    def fwd(save, x, w, b=None):
        xin, wn, p, _, groups = _conv_geometry(x, w, geo)
        n, _, h, wdt = xin.shape
        o = wn.shape[0]
        oh = (h + 2 * p[0] - (wn.shape[2] - 1) * dl[0] - 1) // st[0] + 1
        ow = (wdt + 2 * p[1] - (wn.shape[3] - 1) * dl[1] - 1) // st[1] + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{api}: the filters ({wn.shape[2]} x {wn.shape[3]}, dilation {list(dl)}) are larger "
                             f"than the padded input ({h + 2 * p[0]} x {wdt + 2 * p[1]})")
        if nhwc:
            base = canna_dl.empty((n, oh, ow, o), xin.dtype)
            out = base.permute(0, 3, 1, 2)
        else:
            base = out = canna_dl.empty((n, o, oh, ow), xin.dtype)
        K.conv2d(xin, wn, None if b is None else arr(b), st, p, dl, groups, out=out)
        return [base]

    def bwd(d, ts, s):
        xin, wn, p, padded, groups = _conv_geometry(ts[0], ts[1], geo)
        gn = _nchw(arr(d[0]), nhwc)
        gi, gw, gb = K.backward.conv2d(gn, xin, wn, st, p, dl, groups, (True, True, has_b))
        if padded is not None:
            pt, _, pl, _ = padded
            h, wdt = (ts[0].shape[1], ts[0].shape[2]) if nhwc else (ts[0].shape[2], ts[0].shape[3])
            gi = gi[:, :, pt:pt + h, pl:pl + wdt]
        gi = _contig(gi.permute(0, 2, 3, 1), "tf_nhwc") if nhwc else _contig(gi, "tf_pad")
        gw = _contig(gw.permute(2, 3, 1, 0), "tf_hwio")
        return [gi, gw] + ([gb] if has_b else [])

    def specs():
        if xd is None or wd is None:
            return [(x.dtype, tf.TensorShape(None))]
        n, (h, wdt) = xd[0], ((xd[1], xd[2]) if nhwc else (xd[2], xd[3]))
        oh = _out_len(api, pad, h, wd[0], st[0], dl[0], 0)
        ow = _out_len(api, pad, wdt, wd[1], st[1], dl[1], 1)
        return [(x.dtype, tf.TensorShape([n, oh, ow, wd[3]] if nhwc else [n, wd[3], oh, ow]))]
    return apply(api, xs, (True,) * len(xs), fwd, 1, specs, bwd)


def _torch_pool_len(n, k, s, p, ceil):
    """PyTorch's (and aclnn's) max-pool output length (``ceil_mode``: a last window that starts
    inside the input or the left padding is kept)."""
    span = n + 2 * p - k
    if span < 0:
        return -1
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def _pool_geometry(pad, shape_hw, k, s):
    """How canna reproduces TensorFlow's max-pool padding: ``(padding, ceil_mode, None)`` when
    aclnn's symmetric padding does it (symmetric SAME padding, or SAME with one more element
    after as ``ceil_mode``: the extra window reaches past the input, which max pooling ignores
    as TensorFlow ignores padding), else ``((0, 0), False, (pt, pb, pl, pr))``: the input is
    copied into a -inf padded buffer first."""
    pads = [_pads(pad if not isinstance(pad, tuple) else pad[i], shape_hw[i], k[i], s[i], 1) for i in range(2)]
    want = [_out_len("", pad, shape_hw[i], k[i], s[i], 1, i) for i in range(2)]
    ceil = any(after > before for before, after in pads)
    ok = all(after - before in (0, 1) and before <= kk // 2 and _torch_pool_len(n, kk, ss, before, ceil) == o
             for (before, after), n, kk, ss, o in zip(pads, shape_hw, k, s, want))
    if ok:
        return (pads[0][0], pads[1][0]), ceil, None
    return (0, 0), False, pads[0] + pads[1]


def _neg_inf_pad_nchw(xn, pt, pb, pl, pr):
    n, c, h, w = xn.shape
    p = canna_dl.full((n, c, h + pt + pb, w + pl + pr), float("-inf"), xn.dtype)
    K.copy_(p[:, :, pt:pt + h, pl:pl + w], xn)
    dl_copy.count("tf_pad", xn.nbytes)
    return p


def max_pool2d(input, ksize, strides=None, padding="VALID", data_format="NHWC"):  # noqa: A002
    """2-D max pooling with TensorFlow's conventions (``tf.nn.max_pool2d``;
    ``kernels.max_pool2d_with_indices`` / ``kernels.backward.max_pool2d``).

    Args:
        input: ``[N, H, W, C]`` (NHWC) or ``[N, C, H, W]`` (NCHW).
        ksize, strides: an int, ``[h, w]`` or the 4-value form; ``strides`` defaults to ``ksize``.
        padding: ``"VALID"``, ``"SAME"`` or explicit symmetric padding of at most half the window.

    Returns the pooled tensor in ``data_format``. NaN propagates. Gradients go to the argmax of
    each window (the forward's indices, saved).

    Layouts and copies: NHWC inputs are read through a permuted NCHW view (no copy); the NCHW
    result and the backward's NCHW input gradient are transposed to NHWC (``"tf_nhwc"`` in
    ``canna_dl.copy_stats()``). TensorFlow's SAME padding is aclnn's symmetric padding, or its
    ``ceil_mode`` when the extra element is after; other geometries (a window larger than the
    input, stride 1 with an even window, explicit asymmetric padding) copy the input into a -inf
    padded buffer (``"tf_pad"``, forward and backward).
    """
    api = _P + "max_pool2d"
    nhwc = _data_format(api, data_format)
    x = float_tensor(api, "input", input)
    k = _hw(api, "ksize", ksize, nhwc)
    st = _hw(api, "strides", strides, nhwc, k)
    pad = _padding(api, padding, nhwc)
    if isinstance(pad, tuple) and any(v >= kk for pair, kk in zip(pad, k) for v in pair):
        raise ValueError(f"{api}: explicit padding {list(map(list, pad))} must be smaller than the window {list(k)} "
                         "(TensorFlow's rule)")
    if x.shape.rank is not None and x.shape.rank != 4:
        raise ValueError(f"{api}: input must be 4-D, got shape {x.shape}")
    xd = dims_of(x.shape)

    def geometry(t):
        xn = _nchw(arr(t), nhwc)
        h, w = xn.shape[2:]
        if pad == "VALID" and (k[0] > h or k[1] > w):
            raise ValueError(f"{api}: the window {list(k)} is larger than the input ({h} x {w})")
        p, ceil, padded = _pool_geometry(pad, (h, w), k, st)
        if padded is not None:
            xn = _neg_inf_pad_nchw(xn, *padded)
        return xn, p, ceil, padded, (h, w)

    def fwd(save, t):
        xn, p, ceil, _, _ = geometry(t)
        if save:
            y, idx = K.max_pool2d_with_indices(xn, k, st, p, 1, ceil)
        else:
            y, idx = K.max_pool2d(xn, k, st, p, 1, ceil), None
        if nhwc:
            y = _contig(y.permute(0, 2, 3, 1), "tf_nhwc")
        return [y, idx] if save else [y]

    def bwd(d, ts, s):
        xn, p, ceil, padded, (h, w) = geometry(ts[0])
        gi = K.backward.max_pool2d(_nchw(arr(d[0]), nhwc), xn, arr(s[0]), k, st, p, 1, ceil)
        if padded is not None:
            gi = gi[:, :, padded[0]:padded[0] + h, padded[2]:padded[2] + w]
        if nhwc:
            return [_contig(gi.permute(0, 2, 3, 1), "tf_nhwc")]
        return [_contig(gi, "tf_pad") if padded is not None else gi]

    def specs():
        if xd is None:
            return [(x.dtype, tf.TensorShape(None)), (tf.int64, tf.TensorShape(None))]
        n, (h, w), c = xd[0], ((xd[1], xd[2]) if nhwc else (xd[2], xd[3])), xd[3 if nhwc else 1]
        oh = _out_len(api, pad, h, k[0], st[0], 1, 0)
        ow = _out_len(api, pad, w, k[1], st[1], 1, 1)
        return [(x.dtype, tf.TensorShape([n, oh, ow, c] if nhwc else [n, c, oh, ow])),
                (tf.int64, tf.TensorShape([n, c, oh, ow]))]
    return apply(api, [x], (True,), fwd, 1, specs, bwd)


# ---------------------------------------------------------------------------------------------
# loss

def cross_entropy(logits, labels, weight=None, reduction="mean", label_smoothing=0.0, ignore_index=-100):
    """Softmax cross entropy of unnormalized ``logits`` and integer class ``labels``
    (``torch.nn.functional.cross_entropy``; with ``reduction="none"`` it is
    ``tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)``; ``kernels.native_cross_entropy``
    / ``kernels.backward.cross_entropy``).

    Args:
        logits: ``[N, C]``, ``[C]`` or ``[N, C, d1, ...]`` (classes in dim 1, PyTorch's layout;
            reshape TensorFlow's ``[..., C]`` logits to ``[-1, C]``).
        labels: int32 / int64 class indices ``[N]`` (``[]``, ``[N, d1, ...]``); no gradient.
        weight: optional ``[C]`` class weights (no gradient).
        reduction: ``"mean"`` (weighted mean over non-ignored labels), ``"sum"`` or ``"none"``.
        label_smoothing: in [0, 1]. ignore_index: a label value that contributes nothing.

    Raises:
        TypeError: floating / non-integer labels, non-floating logits. ValueError: shapes, reduction.
        A label outside ``[0, C)`` is found only when the data is read: an ``acl_rt.AclError``
        (eager) or ``tf.errors.InvalidArgumentError`` (inside tf.function).
    """
    api = _P + "cross_entropy"
    lg = float_tensor(api, "logits", logits)
    lb = tensor(api, "labels", labels, tf.int64)
    if lb.dtype not in INTS:
        raise TypeError(f"{api}: labels have dtype {lb.dtype.name}; they must be int32 or int64 class indices "
                        "(class-probability labels are not supported)")
    w = None if weight is None else float_tensor(api, "weight", weight)
    same_dtype(api, ("logits", lg), ("weight", w))
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{api}: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
    if lg.shape.rank is not None and lb.shape.rank is not None:
        if lg.shape.rank == 0:
            raise ValueError(f"{api}: logits must have at least 1 dimension (classes)")
        expect = tf.TensorShape([]) if lg.shape.rank == 1 else lg.shape[:1].concatenate(lg.shape[2:])
        if not lb.shape.is_compatible_with(expect):
            raise ValueError(f"{api}: logits of shape {lg.shape} expect labels of shape {expect}, got {lb.shape}")
    hw = w is not None
    xs = [lg, lb] + ([w] if hw else [])

    def fwd(save, lg, lb, w=None):
        if save:
            return list(K.native_cross_entropy(lg, lb, w, ignore_index, reduction, label_smoothing))
        return [K.cross_entropy(lg, lb, w, ignore_index, reduction, label_smoothing)]

    def bwd(d, ts, s):
        return [K.backward.cross_entropy(d[0], s[0], ts[1], ts[2] if hw else None, ignore_index, reduction,
                                         label_smoothing)]
    return apply(api, xs, (True, False) + ((False,) if hw else ()), fwd, 1,
                 lambda: [(lg.dtype, lb.shape if reduction == "none" else tf.TensorShape([])), (lg.dtype, lg.shape)],
                 bwd)


# ---------------------------------------------------------------------------------------------
# reductions

def _axes(api, axis, shape):
    """TensorFlow's ``axis``: None (all), an int or a sequence of ints (Python values)."""
    if axis is None:
        return None
    if hasattr(axis, "__index__") and not isinstance(axis, builtins.bool):
        axes = (operator.index(axis),)
    else:
        try:
            axes = tuple(operator.index(a) for a in axis)
        except TypeError:
            raise TypeError(f"{api}: axis must be None, a Python int or a sequence of ints, not {axis!r}") from None
    r = shape.rank
    if r is not None:
        n = max(r, 1)
        for a in axes:
            if not -n <= a < n:
                raise K.AxisError(f"{api}: axis {a} is out of range for a {r}-D tensor (expected [{-n}, {n - 1}])")
        norm = [a % n for a in axes]
        if len(set(norm)) != len(norm):
            raise ValueError(f"{api}: axis {list(axes)} names a dimension more than once")
    return axes


def _reduced_shape(shape, axes, keepdims):
    if shape.rank is None:
        return tf.TensorShape(None)
    dims = shape.as_list()
    n = len(dims)
    red = set(range(n)) if axes is None else {a % max(n, 1) for a in axes}
    if keepdims:
        return tf.TensorShape([1 if i in red else d for i, d in enumerate(dims)])
    return tf.TensorShape([d for i, d in enumerate(dims) if i not in red])


def _reduction(api, x, axis, keepdims, f, fb):
    t = float_tensor(api, "input_tensor", x)
    if not isinstance(keepdims, builtins.bool):
        raise TypeError(f"{api}: keepdims must be a bool, not {type(keepdims).__name__}")
    axes = _axes(api, axis, t.shape)
    if axes is not None and len(axes) == 0:   # TensorFlow: an empty axis list reduces nothing
        return apply(api, [t], (True,), lambda save, v: [K.astype(v, canna_dl.asarray(v).dtype)], 1,
                     lambda: _same(t), lambda d, xs, s: [d[0]])
    return apply(api, [t], (True,), lambda save, v: [f(v, axes, keepdims)], 1,
                 lambda: [(t.dtype, _reduced_shape(t.shape, axes, keepdims))],
                 lambda d, xs, s: [fb(d[0], tuple(xs[0].shape), axes, keepdims)])


def sum(input_tensor, axis=None, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (``tf.reduce_sum``: None = all, an int or a list; an empty list reduces
    nothing; ``kernels.sum`` / ``kernels.backward.sum``)."""
    return _reduction(_P + "sum", input_tensor, axis, keepdims, K.sum, K.backward.sum)


def mean(input_tensor, axis=None, keepdims=False):
    """Mean over ``axis`` (``tf.reduce_mean``; ``kernels.mean`` / ``kernels.backward.mean``). See :func:`sum`."""
    return _reduction(_P + "mean", input_tensor, axis, keepdims, K.mean, K.backward.mean)



# AutoGraph would otherwise convert these functions (and the kernel library under them) when a
# tf.function calls them: they hold no tensor-dependent Python control flow, so keep them as is.
for _name in __all__:
    globals()[_name] = tf.autograph.experimental.do_not_convert(globals()[_name])
del _name
