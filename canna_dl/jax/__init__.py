"""canna_dl.jax — JAX interop for canna (imported lazily; needs JAX).

Exchange: :func:`to_jax` / :func:`from_jax`. The custom_vjp wrappers of canna's kernels will live
here too.
"""
from ._exchange import from_jax, to_jax

__all__ = ["to_jax", "from_jax"]
