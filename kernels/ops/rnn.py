"""The LSTM (issue 14): ``lstm`` — ``torch.lstm``, what ``nn.LSTM`` calls — composed of registered
ops, so that its forward and (through those ops) its backward run on canna: per layer and
direction, the input projection of every step at once (:func:`kernels.linear`), then per step
``gates = x W_ih^T + b_ih + h W_hh^T + b_hh`` split as PyTorch's ``i, f, g, o``,
``c' = sigmoid(f) c + sigmoid(i) tanh(g)``, ``h' = sigmoid(o) tanh(c')`` (PyTorch's ``nn.LSTM``
documentation); the steps' ``h`` joined by :func:`kernels.cat`. A reverse direction walks the steps
backwards and its outputs follow the forward direction's in the last dim, as PyTorch's.

Taken: the padded (not packed) form, with or without biases, any number of layers, one or two
directions, ``batch_first`` or not. Not taken (offload() falls back to PyTorch): projections
(``proj_size``), dropout between layers in training, packed sequences.
"""
from __future__ import annotations

from .. import _core as C
from .._registry import Attr, Spec, Tensor, TensorList, TorchFn, define

F = C.FLOATS


def _layout(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    api = "kernels.lstm"
    if len(input.shape) != 3:
        raise ValueError(f"{api}: input must be 3-D (batch, seq, feature) or (seq, batch, feature), got shape "
                         f"{tuple(input.shape)}")
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != num_layers * dirs * per:
        raise ValueError(f"{api}: {len(params)} parameter arrays for {num_layers} layers x {dirs} directions; "
                         f"expected {num_layers * dirs * per} ({per} each: projections (proj_size) are not supported)")
    if dropout and train and num_layers > 1:
        raise ValueError(f"{api}: dropout={dropout} between layers in training is not supported")
    if len(hx) != 2:
        raise ValueError(f"{api}: hx must be (h_0, c_0), got {len(hx)} arrays")
    hidden = params[1].shape[1]
    b, s = (input.shape[0], input.shape[1]) if batch_first else (input.shape[1], input.shape[0])
    state = (num_layers * dirs, b, hidden)
    for name, t in zip(("h_0", "c_0"), hx):
        if tuple(t.shape) != state:
            raise ValueError(f"{api}: {name} has shape {tuple(t.shape)}, expected {state}")
    return b, s, hidden, dirs, per


def _lstm_shape(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    b, s, hidden, dirs, _ = _layout(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                    batch_first)
    out = (b, s, dirs * hidden) if batch_first else (s, b, dirs * hidden)
    st = Spec((num_layers * dirs, b, hidden), input.dtype)
    return Spec(out, input.dtype), st, st


def _lstm(ops, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    b, s, hidden, dirs, per = _layout(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                      batch_first)
    h0, c0 = hx
    x, hn, cn = input, [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = (layer * dirs + d) * per
            w_ih, w_hh = params[k], params[k + 1]
            b_ih, b_hh = (params[k + 2], params[k + 3]) if has_biases else (None, None)
            xw = ops.linear(x, w_ih, b_ih)           # every step's input projection at once
            h, c = h0[layer * dirs + d], c0[layer * dirs + d]
            steps = [None] * s
            for t in (range(s - 1, -1, -1) if d else range(s)):
                g = ops.add(xw[:, t] if batch_first else xw[t], ops.linear(h, w_hh, b_hh))
                sg = ops.sigmoid(g)
                c = ops.add(ops.mul(sg[:, hidden:2 * hidden], c), ops.mul(sg[:, :hidden],
                                                                      ops.tanh(g[:, 2 * hidden:3 * hidden])))
                h = ops.mul(sg[:, 3 * hidden:], ops.tanh(c))
                steps[t] = h.reshape((b, 1, hidden) if batch_first else (1, b, hidden))
            outs.append(ops.cat(steps, 1 if batch_first else 0))
            hn.append(h.reshape(1, b, hidden))
            cn.append(c.reshape(1, b, hidden))
        x = outs[0] if dirs == 1 else ops.cat(outs, 2)
    return x, ops.cat(hn, 0), ops.cat(cn, 0)


define("lstm", inputs=(Tensor("input", F), TensorList("hx", F), TensorList("params", F)),
       attrs=(Attr("has_biases", bool), Attr("num_layers", int), Attr("dropout", float), Attr("train", bool),
              Attr("bidirectional", bool), Attr("batch_first", bool)),
       outputs=("out", "h_n", "c_n"), shape=_lstm_shape, forward=_lstm,
       torch=(TorchFn("torch.lstm", ("input", "hx", "params", "has_biases", "num_layers", "dropout", "train",
                                     "bidirectional", "batch_first"), at_aten="aten::lstm.input"),),
       doc="A multi-layer LSTM (``torch.lstm``, as ``nn.LSTM`` calls it), composed of registered ops (see the "
           "module doc): ``input`` ``(batch, seq, feature)`` with ``batch_first`` else ``(seq, batch, feature)``; "
           "``hx`` = ``(h_0, c_0)``, each ``(num_layers * directions, batch, hidden)``; ``params`` per layer and "
           "direction ``w_ih`` ``(4 hidden, in)``, ``w_hh`` ``(4 hidden, hidden)`` and with ``has_biases`` "
           "``b_ih``, ``b_hh`` ``(4 hidden,)``. Returns ``(output, h_n, c_n)``; floating dtypes.\n\n"
           "Raises:\n    ValueError: a parameter count that is not 2 or 4 per layer and direction (projections), "
           "dropout between layers in training, state shapes that do not match.")
