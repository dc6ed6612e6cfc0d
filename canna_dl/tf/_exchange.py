"""The tf exchange, re-exported: it lives in canna_dl's core (:mod:`canna_dl._frameworks._tf`) so
that exchanging a tensor does not import this shim package (docs/DESIGN.md §1)."""
from .._frameworks._tf import _import_tensor, from_tf, to_tf  # noqa: F401

__all__ = ["from_tf", "to_tf"]
