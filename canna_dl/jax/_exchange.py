"""The jax exchange, re-exported: it lives in canna_dl's core (:mod:`canna_dl._frameworks._jax`) so
that exchanging a tensor does not import this shim package (docs/DESIGN.md §1)."""
from .._frameworks._jax import _import_array, from_jax, to_jax  # noqa: F401

__all__ = ["from_jax", "to_jax"]
