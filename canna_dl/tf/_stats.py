"""Counters of canna's TensorFlow op executions (:func:`op_stats`), the TensorFlow counterpart of
``canna_dl.torch.offload``'s report.

An op counts once per execution of its kernels: each eager call, and each run of its
``tf.py_function`` node inside a ``tf.function`` or ``model.fit`` (tracing a function counts
nothing: no kernel runs). A native ``CannaCall`` node counts in C++ under the name it was given
when the graph was made (its op's, or a composed op's: ``dense``; a backward's ``..._grad``), and
:func:`op_stats` adds those counts in. Counters are per process, updated under a lock (the nodes of a graph may
run on TensorFlow's inter-op threads).
"""
from __future__ import annotations

import sys
import threading

__all__ = ["op_stats", "reset_op_stats"]

_P = "canna_dl.tf."
_GRAD = "_grad"
_lock = threading.Lock()
_counts: dict = {}   # api name ("canna_dl.tf.dense" / "canna_dl.tf.dense_grad") -> executions


def count(api: str) -> None:
    with _lock:
        _counts[api] = _counts.get(api, 0) + 1


def op_stats() -> dict:
    """Executions of canna's TensorFlow ops since the process started (or the last
    :func:`reset_op_stats`): ``{op: {"canna": forward executions, "backward": backward
    executions}}``, op names without the ``canna_dl.tf.`` prefix (``"dense"``, ``"relu"``, ...),
    sorted. Keras layers count as the ops they call (``canna_dl.tf.keras.Dense(activation="relu")``:
    ``dense`` and ``relu``)."""
    with _lock:
        items = list(_counts.items())
    native = sys.modules.get("canna_dl.tf._native")   # native CannaCall nodes count in C++
    if native is not None:
        items += list(native.native_counts().items())
    out: dict = {}
    for api, n in items:
        name = api[len(_P):] if api.startswith(_P) else api
        bw = name.endswith(_GRAD)
        if bw:
            name = name[: -len(_GRAD)]
        st = out.setdefault(name, {"canna": 0, "backward": 0})
        st["backward" if bw else "canna"] += n
    return dict(sorted(out.items()))


def reset_op_stats() -> None:
    """Zero the counters of :func:`op_stats`."""
    with _lock:
        _counts.clear()
    native = sys.modules.get("canna_dl.tf._native")
    if native is not None:
        native.reset_native_counts()
