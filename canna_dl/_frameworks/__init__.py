"""The framework exchanges of canna_dl's core: DeviceArray <-> torch.Tensor (:mod:`._torch`),
tf.Tensor (:mod:`._tf`) and jax.Array (:mod:`._jax`).

They are part of the array + DLPack core, below ``kernels`` and the framework shims (docs/DESIGN.md
§1): :func:`canna_dl.asarray` imports the one for an object's framework on first use, and importing
it loads that framework and nothing else of canna (no ``kernels``, no ``canna_dl.torch`` custom
ops). The shim packages ``canna_dl.torch`` / ``.tf`` / ``.jax`` re-export ``to_*`` / ``from_*``
from here. Nothing in this package is imported by ``import canna_dl``.
"""
