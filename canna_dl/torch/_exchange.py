"""The torch exchange, re-exported: it lives in canna_dl's core (:mod:`canna_dl._frameworks._torch`) so
that exchanging a tensor does not import this shim package (docs/DESIGN.md §1)."""
from .._frameworks._torch import _API, _export_error, _fast_import, _import_tensor, from_torch, to_torch  # noqa: F401

__all__ = ["from_torch", "to_torch"]
