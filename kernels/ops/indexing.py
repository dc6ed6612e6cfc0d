"""Indexing ops: one registry entry each (kernels/_registry.py): embedding lookup and its dense
gradient, gather and scatter-add (each the other's gradient).

Indices are int64 or int32 and must lie in ``[0, size)`` (PyTorch refuses negative indices for
these ops); they are read from the data, so a bad one is reported by the simulator when the op
runs (``acl_rt.AclError``, an ``InvalidArgumentError`` — a ValueError — naming the index), never a
wild access. Gradients (PyTorch's ``tools/autograd/derivatives.yaml``): embedding's weight gets
``embedding_dense_backward`` (rows summed per index, the padding row left at 0); gather's input
gets ``zeros.scatter_add(dim, index, grad)``; scatter_add's input gets ``grad``, its ``src``
``grad.gather(dim, index)``.
"""
from __future__ import annotations

from .. import _core as C
from .._registry import Aclnn, Attr, Spec, Tensor, define
from .concat_pad import zeros_like

F, ARITH, INTS = C.FLOATS, C.ARITH, C.INTS


def _padding_row(padding_idx, num_weights):
    """``F.embedding``'s padding_idx normalized: None -> -1 (no row), negative counts from the end."""
    if padding_idx is None:
        return -1
    if not -num_weights <= padding_idx < num_weights:
        raise ValueError(f"kernels.embedding: padding_idx {padding_idx} is out of range for {num_weights} embeddings")
    return padding_idx + num_weights if padding_idx < 0 else padding_idx


def embedding_shape(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                    sparse=False):
    if len(weight.shape) != 2:
        raise ValueError(f"kernels.embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape "
                         f"{tuple(weight.shape)}")
    if max_norm is not None:
        raise NotImplementedError("kernels.embedding: max_norm (renormalizing rows in place) is not supported")
    if sparse:
        raise NotImplementedError("kernels.embedding: sparse=True (a sparse gradient) is not supported")
    if len(input.shape) + 1 > C.MAX_DIMS:
        raise ValueError(f"kernels.embedding: the output would have more than {C.MAX_DIMS} dims")
    _padding_row(padding_idx, weight.shape[0])
    return Spec(tuple(input.shape) + (weight.shape[1],), weight.dtype)


def _embedding_backward(ops, g, input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse):
    n = weight.shape[0]
    return ops.embedding_backward(g, input, n, _padding_row(padding_idx, n), scale_grad_by_freq)


define("embedding", inputs=(Tensor("input", INTS, diff=False), Tensor("weight", F)),
       attrs=(Attr("padding_idx", int, None), Attr("max_norm", float, None), Attr("norm_type", float, 2.0),
              Attr("scale_grad_by_freq", bool, False), Attr("sparse", bool, False)),
       shape=embedding_shape, forward=Aclnn("Embedding", order=("weight", "input"), key=lambda **a: ()),
       backward=_embedding_backward, save=("input", "weight"),
       torch=("torch.nn.functional.embedding",),
       aten=(("aten::embedding", "weight, indices:input, padding_idx, scale_grad_by_freq, sparse"),),
       doc="Embedding lookup (``torch.nn.functional.embedding``; ``aclnnEmbedding``): ``weight[input]``, shape "
           "``input.shape + (embedding_dim,)``. ``input``: int64 / int32 indices in ``[0, num_embeddings)``; "
           "``weight``: ``[num_embeddings, embedding_dim]``, floating. ``padding_idx`` (negative counts from the "
           "end) gets no gradient; ``scale_grad_by_freq`` divides each row's gradient by its index count.\n\n"
           "Raises:\n    NotImplementedError: ``max_norm`` or ``sparse=True``.\n    ValueError: a weight that is not "
           "2-D, ``padding_idx`` out of range.\n    acl_rt.AclError (a ValueError; at the next synchronize for "
           "DeviceArray results): an index out of range.")


def _emb_bw_shape(grad_out, input, num_weights, padding_idx=-1, scale_grad_by_freq=False):
    if tuple(grad_out.shape) != tuple(input.shape) + tuple(grad_out.shape[-1:]) or not grad_out.shape:
        raise ValueError(f"kernels.backward.embedding: grad_out of shape {tuple(grad_out.shape)} must be input's shape "
                         f"{tuple(input.shape)} + [embedding_dim]")
    if num_weights < 0:
        raise ValueError(f"kernels.backward.embedding: num_weights must be >= 0, got {num_weights}")
    return Spec((num_weights, grad_out.shape[-1]), grad_out.dtype)


define("embedding_backward", inputs=(Tensor("grad_out", F), Tensor("input", INTS, diff=False)),
       attrs=(Attr("num_weights", int), Attr("padding_idx", int, -1), Attr("scale_grad_by_freq", bool, False)),
       shape=_emb_bw_shape,
       forward=Aclnn("EmbeddingDenseBackward",
                     lambda lib, keep, num_weights, padding_idx, scale_grad_by_freq:
                     (num_weights, padding_idx & 0xFFFFFFFFFFFFFFFF, scale_grad_by_freq)),
       api="kernels.backward.embedding",
       aten=(("aten::embedding_dense_backward", "grad_output:grad_out, indices:input, num_weights, padding_idx, "
              "scale_grad_by_freq"),),
       doc="Gradient of :func:`kernels.embedding` with respect to ``weight`` (``aclnnEmbeddingDenseBackward``): "
           "``[num_weights, embedding_dim]``, the rows of ``grad_out`` summed per index (in index order), row "
           "``padding_idx`` (``-1``: none) left at 0, divided by the index counts with ``scale_grad_by_freq``.")


def _index_dim(api, x, dim):
    nd = max(len(x.shape), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"{api}: dim {dim} is out of range for a {len(x.shape)}-D input (expected [{-nd}, {nd - 1}])")
    return dim % nd


def _fits(api, x, index, dim, what="input"):
    if len(index.shape) != len(x.shape) and not (len(index.shape) <= 1 and len(x.shape) <= 1):
        raise ValueError(f"{api}: index of shape {tuple(index.shape)} must have as many dims as {what} of shape "
                         f"{tuple(x.shape)}")
    for k, (i, n) in enumerate(zip(index.shape, x.shape)):
        if k != dim and i > n:
            raise ValueError(f"{api}: index of shape {tuple(index.shape)} is larger than {what} of shape "
                             f"{tuple(x.shape)} in dim {k} (only dim {dim} may be)")


def gather_shape(input, index, dim, sparse_grad=False):
    if sparse_grad:
        raise NotImplementedError("kernels.gather: sparse_grad=True is not supported")
    d = _index_dim("kernels.gather", input, dim)
    _fits("kernels.gather", input, index, d)
    return Spec(index.shape, input.dtype)


def _gather_backward(ops, g, input, index, dim, sparse_grad):
    return ops.scatter_add(zeros_like(ops, input), index, g, dim)


define("gather", inputs=(Tensor("input", ARITH), Tensor("index", INTS, diff=False)),
       attrs=(Attr("dim", int), Attr("sparse_grad", bool, False)),
       shape=gather_shape, forward=Aclnn("Gather", lambda lib, keep, dim, sparse_grad: (dim,),
                                         order=("input", "...", "index")),
       backward=_gather_backward, save=("input", "index"),
       torch=(("torch.gather", "input, dim, index, sparse_grad=False"),
              ("torch.Tensor.gather", "input, dim, index, sparse_grad=False")),
       aten=(("aten::gather", "self:input, dim, index, sparse_grad", {"sparse_grad": False}),),
       doc="``out[i][j][k] = input[i][index[i][j][k]][k]`` for ``dim=1`` (``torch.gather``; ``aclnnGather``): "
           "``out`` has ``index``'s shape; ``index`` (int64 / int32, in ``[0, input.shape[dim])``) has "
           "``input``'s number of dims and is no larger in any other dim. Dtypes: floats, int32, int64.\n\n"
           "Raises:\n    IndexError: ``dim`` out of range.\n    ValueError: mismatched shapes.\n    "
           "NotImplementedError: ``sparse_grad=True``.\n    acl_rt.AclError (a ValueError): an index out of range.")


def scatter_add_shape(input, index, src, dim):
    d = _index_dim("kernels.scatter_add", input, dim)
    _fits("kernels.scatter_add", input, index, d)
    _fits("kernels.scatter_add", src, index, -1, "src")
    if src.dtype is not input.dtype:
        raise TypeError(f"kernels.scatter_add: src has dtype {src.dtype.name} but input has {input.dtype.name} "
                        "(they must match)")
    return Spec(input.shape, input.dtype)


def _scatter_add_backward(ops, g, index, dim):
    return g, ops.gather(g, index, dim)


define("scatter_add", inputs=(Tensor("input", ARITH), Tensor("index", INTS, diff=False), Tensor("src", ARITH)),
       attrs=(Attr("dim", int),),
       shape=scatter_add_shape, forward=Aclnn("ScatterAdd", lambda lib, keep, dim: (dim,),
                                              order=("input", "...", "index", "src")),
       backward=_scatter_add_backward, save=("index",),
       torch=(("torch.scatter_add", "input, dim, index, src"), ("torch.Tensor.scatter_add", "input, dim, index, src")),
       doc="``input`` with ``src`` added at ``index`` along ``dim`` (``torch.scatter_add``; ``aclnnScatterAdd``): "
           "``out[i][index[i][j][k]][k] += src[i][j][k]`` for ``dim=1``, the additions in index order (so the "
           "result is deterministic). ``index`` (int64 / int32, in ``[0, input.shape[dim])``) is no larger than "
           "``src`` in any dim nor than ``input`` in any other dim; ``src`` has ``input``'s dtype.\n\n"
           "Raises:\n    IndexError: ``dim`` out of range.\n    ValueError: mismatched shapes.\n    TypeError: "
           "dtypes.\n    acl_rt.AclError (a ValueError): an index out of range.")
