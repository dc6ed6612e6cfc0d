"""canna_dl.torch — PyTorch interop for canna (imported lazily; needs PyTorch).

Exchange: :func:`to_torch` / :func:`from_torch` move tensors between PyTorch and canna without a
copy (through DLPack's C exchange API, ``torch.Tensor.__dlpack_c_exchange_api__``, when PyTorch
has it). The autograd shims of canna's kernels will live here too.
"""
from ._exchange import from_torch, to_torch

__all__ = ["to_torch", "from_torch"]
