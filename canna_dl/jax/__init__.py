"""canna_dl.jax — JAX interop for canna (imported lazily; needs JAX).

Exchange: :func:`to_jax` / :func:`from_jax` (zero-copy through DLPack).

Differentiable ops (``jax.custom_vjp``, forward and backward on canna's kernels; eager calls are
zero-copy, and under ``jax.jit`` they run as XLA FFI custom calls on XLA's buffers (else through
``jax.pure_callback``); see
:mod:`canna_dl.jax._ops`; the arithmetic and unary ops are generated from their registry entries):
:func:`add`, :func:`sub`, :func:`mul`, :func:`div`, :func:`pow`, :func:`matmul`, :func:`relu`,
:func:`sigmoid`, :func:`tanh`, :func:`softmax`, :func:`log_softmax`::

    import jax, jax.numpy as jnp, canna_dl.jax as cjax
    loss = lambda a, b: jnp.sum(cjax.add(a, b))
    jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.array([1., 2., 3.]), jnp.array([4., 5., 6.]))   # ones, ones
"""
from ._exchange import from_jax, to_jax
from ._ops import log_softmax, matmul, relu, sigmoid, softmax, tanh

__all__ = ["to_jax", "from_jax", "matmul", "relu", "sigmoid", "tanh", "softmax", "log_softmax"]


def _export_registered():
    from kernels import _registry
    _registry.export_generated(globals(), __all__, "jax")


_export_registered()
