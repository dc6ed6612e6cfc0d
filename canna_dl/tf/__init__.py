"""canna_dl.tf — TensorFlow interop for canna (imported lazily; needs TensorFlow).

Exchange: :func:`to_tf` / :func:`from_tf`. The autograd shims of canna's kernels will live here too.
"""
from ._exchange import from_tf, to_tf

__all__ = ["to_tf", "from_tf"]
