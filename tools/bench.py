#!/usr/bin/env python3
"""canna's benchmarks, all in one process, side by side with the frameworks (issue 8).

    .venv/bin/python tools/bench.py [--quick] [--only SECTIONS] [--no-tf] [--json PATH] [--plot PATH]

First the framework add table: each framework's native add against canna's add *inside that
framework* (framework tensors in, a framework tensor out) for float32 2**20, 1024x1024 and
32x1024x1024 elements (a vector, a matrix and a batch of matrices: from launch-bound to
memory-bandwidth-bound): ``tf.add`` vs ``canna_dl.tf.add`` (and ``kernels.add`` on tf tensors),
``torch.add`` vs ``canna_dl.torch.add`` (and ``kernels.add`` on torch tensors). Then one row per
benchmark, each as a ratio against its reference measured in the same run: launch overhead,
caching pool, DLPack exchange, matmul, softmax, convolution at real model layer shapes (forward +
backward, 1 thread each, with the spread of the ratio over rounds), one training step, real models
(a training and an eval step of a ResNet-18-shaped CNN, BERT-tiny and GPT-2-tiny inside
``offload()`` against plain PyTorch at 1 and 2 threads, with the spread and the loss's error), a
registered custom op and a 64 MiB all-reduce between 2 processes (canna's HCCL against torch.distributed's
gloo, and against this machine's copy bandwidth).

Every ratio is a **speed ratio**: reference time / canna time (above 1x canna is faster; 0.5x means
canna takes twice the reference's time). Each figure is the median per-call time over repeated
batches after a warm-up, candidates measured in interleaved rounds so that load from other
processes hits them alike (tools/_benchutil.py). The measurements are the importable functions of
the single-purpose scripts (bench_kernels, bench_pool, bench_dlpack, bench_rawkernel, bench_ops_c,
bench_train, bench_tf_train, bench_conv, bench_models, bench_hccl, bench_jax), which print more detail on each subject.

Targets (issues 3, 4, 5, 7), as speed ratios: the large add >= 1.0x torch and >= 0.8x the best
framework (issue 15: with ``out=`` >= 1.0x ``torch.add(out=)`` and >= 0.9x the bandwidth of a copy,
the faster of ``Tensor.copy_`` and ``np.copyto``, measured in the same run); matmul >= 0.7x torch; the 1-element add >= 0.25x torch.add (at most 4x its time); the
training step >= 0.5x plain PyTorch (at most 2x its time); the pool's alloc/free pair >= 20x
aclrtMalloc/aclrtFree at 1 MiB; DLPack exchange >= 0.5x torch.from_dlpack (at most 2x its time);
(issue 17) the 64 MiB all-reduce's bandwidth >= 0.5x the copy bandwidth (a copy of the same bytes
takes at most half the all-reduce's time); (issue 15) every model row >= 1.0x plain PyTorch,
canna_dl.jax under jit >= 0.8x jnp under jit, and the 1-element ``F.relu`` inside ``offload()``
>= 0.5x plain ``F.relu`` (the overhead rows also give PyTorch's own dispatch to an empty
torch-function mode: the floor of any mode).
The report ends with the load average at the start and the end; a ratio whose spread over rounds
(max/min) exceeds 1.25 is marked "wide" (a loaded box: read it loosely).

On the simulator every "device" op runs on this machine's CPU: the ratios compare canna's
runtime and kernels with the frameworks' CPU kernels, on shared cores; read them, not the times.

``--json PATH`` writes every raw number (seconds per call, shapes, ratios, targets, machine and
versions); ``--plot PATH`` writes a PNG bar chart of the ratios (log scale, a line at 1x).
``--quick`` shortens every measurement (about a minute; used by the tests).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
_TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_TOOLS))
sys.path.insert(0, _TOOLS)

from _benchutil import WIDE_SPREAD, fmt, machine_info, wide_spread  # noqa: E402
from _common import unwritable  # noqa: E402

SECTIONS = ("add", "overhead", "pool", "dlpack", "matmul", "softmax", "conv", "train", "models", "custom",
            "hccl", "jax")
SCHEMA = "canna-bench/2"    # 2: the framework add table is "framework_add" (was "seeds_add"), section "add"
#: the widest line the benchmark prints (its tables fit a 100-column terminal)
OUTPUT_WIDTH = 100

#: the sizes of the framework add table: (label, shape)
ADD_SIZES = (("1M elements", (2 ** 20,)), ("1024x1024", (1024, 1024)), ("32x1024x1024", (32, 1024, 1024)))


def _settings(quick: bool) -> dict:
    """Budgets (seconds per candidate) and repetition counts of a default or ``--quick`` run."""
    if quick:
        return dict(add_budget=0.08, add_big_budget=0.15, add_batch=10, add_big_batch=1, op_budget=0.15,
                    one_budget=0.1, launch_inner=500, launch_rounds=3, opsc_repeat=3, pool_budget=0.05,
                    dlpack_number=1000, dlpack_repeat=3, train_steps=4, train_warmup=1, train_block=2,
                    tf_budget=0.1, tf_rows=("dense eager",), conv_quick=True, models_quick=True, hccl_rounds=2,
                    hccl_batch=1)
    return dict(add_budget=1.5, add_big_budget=4.0, add_batch=50, add_big_batch=2, op_budget=2.0,
                one_budget=1.0, launch_inner=2000, launch_rounds=9, opsc_repeat=9, pool_budget=0.5,
                dlpack_number=5000, dlpack_repeat=15, train_steps=40, train_warmup=5, train_block=5,
                tf_budget=1.0, tf_rows=("dense eager", "dense keras", "keras fit"), conv_quick=False, models_quick=False,
                hccl_rounds=5, hccl_batch=3)


def _ratio(ref, canna):
    return ref / canna if ref and canna else None


class Run:
    """Collects the results of one run: the framework add table, the ratio rows and the raw details."""

    def __init__(self, console):
        self.console = console
        self.framework_add = []      # one dict per (framework, size)
        self.rows = []       # one dict per ratio row
        self.details = {}    # section -> raw numbers of the underlying script

    def note(self, msg):
        self.console.print(f"[dim]… {msg}[/dim]", highlight=False)

    def row(self, section, name, canna_label, canna_s, ref_label, ref_s, *, target=None, note="", spread=None):
        """Add a ratio row: speed ratio = ref_s / canna_s; ``target`` a minimum speed ratio;
        ``spread`` the (lowest, highest) ratio over interleaved rounds, when measured."""
        r = _ratio(ref_s, canna_s)
        self.rows.append({"section": section, "name": name, "canna": canna_label, "canna_s": canna_s,
                          "reference": ref_label, "reference_s": ref_s, "ratio": r, "target": target,
                          "met": None if target is None or r is None else bool(r >= target), "note": note,
                          "spread": list(spread) if spread else None})


# ----------------------------------------------------------------------------------------------
# sections

def section_add(run, st, tf, torch_on=True):
    import bench_kernels
    for label, shape in ADD_SIZES:
        big = math.prod(shape) > 4 * 2 ** 20
        run.note(f"add {label} inside the frameworks")
        ncand = (3 if torch_on else 0) + (3 if tf is not None else 0)
        m = bench_kernels.measure_framework_add(
            shape, budget=(st["add_big_budget"] if big else st["add_budget"]) * ncand,
            batch=st["add_big_batch"] if big else st["add_batch"], torch_on=torch_on, tf=tf)
        for fw, native, canna, kern in (("tensorflow", "tf", "canna_tf", "kernels_tf"),
                                        ("pytorch", "torch", "canna_torch", "kernels_torch")):
            if native not in m:
                continue
            run.framework_add.append({"framework": fw, "size": label, "shape": list(shape), "elements": math.prod(shape),
                              "dtype": "float32", "native_s": m[native], "canna_s": m[canna],
                              "kernels_s": m[kern], "ratio": _ratio(m[native], m[canna]),
                              "kernels_ratio": _ratio(m[native], m[kern])})
        gc.collect()
    # issue 5's large-add targets, on the largest size
    big = [s for s in run.framework_add if s["size"] == ADD_SIZES[-1][0]]
    by = {s["framework"]: s for s in big}
    if "pytorch" in by:
        t = by["pytorch"]
        run.row("add", "large add 32x1024x1024 (torch tensors)", "kernels.add", t["kernels_s"], "torch.add",
                t["native_s"], target=1.0)
        best = min(s["native_s"] for s in big)
        fw = min(big, key=lambda s: s["native_s"])["framework"]
        run.row("add", "large add 32x1024x1024 vs best framework", "kernels.add", t["kernels_s"],
                f"best: {'torch.add' if fw == 'pytorch' else 'tf.add'}", best, target=0.8)
    if torch_on:   # issue 15: with out=, against torch.add(out=) and against the copy bandwidth
        label, shape = ADD_SIZES[-1]
        run.note(f"add {label} with out=, torch.add(out=) and a copy of the same bytes")
        m = bench_kernels.measure_add_out(shape, budget=st["add_big_budget"] * 4, batch=st["add_big_batch"])
        run.details["add_out"] = m
        run.row("add", f"large add {label} out= (torch tensors)", "kernels.add(out=)", m["kernels"],
                "torch.add(out=)", m["torch"], target=1.0)
        run.row("add", f"large add {label} out= bandwidth vs copy bandwidth", "kernels.add(out=)", m["kernels"],
                "copy x 1.5 (same bandwidth)", 1.5 * m["copy"], target=0.9,
                note="an add moves 3 arrays, a copy 2: at the copy's bandwidth the add takes 1.5x its time")


def section_overhead(run, st):
    import bench_kernels
    import bench_ops_c
    import bench_rawkernel
    run.note("launch overhead: 1-element add")
    m = bench_kernels.measure_one_add(budget=st["one_budget"] * 3, da=False, tf=None,
                                      batch=st["launch_inner"])
    run.details["one_add"] = m
    run.row("overhead", "1-element add, per call", "kernels.add", m["canna"], "torch.add", m["torch"], target=0.25)
    run.row("overhead", "1-element add, per call (autograd op)", "canna_dl.torch.add", m["canna_torch"],
            "torch.add", m["torch"])
    run.note("launch overhead: a 1-element op inside offload()")
    o = bench_kernels.measure_offload_per_call(budget=st["one_budget"] * 3)
    run.details["offload_per_call"] = o
    share = "" if o["fast_share"] is None else f"; {o['fast_share']:.0%} on the C fast path"
    run.row("overhead", "1-element F.relu in offload(level=function), per call", "offload(level=function) F.relu", o["relu_offload"],
            "F.relu", o["relu_torch"], target=0.5,
            note=f"+{(o['relu_offload'] - o['relu_kernel']) * 1e6:.1f} us over kernels.relu{share}")
    run.row("overhead", "1-element F.relu in offload() (aten level, the default), per call", "offload() F.relu",
            o["relu_aten"], "F.relu", o["relu_torch"], target=0.5,
            note=f"+{(o['relu_aten'] - o['relu_kernel']) * 1e6:.1f} us over kernels.relu")
    run.row("overhead", "1-element F.relu, PyTorch's mode dispatch alone", "empty TorchFunctionMode",
            o["relu_floor"], "F.relu", o["relu_torch"], note="the floor of any torch-function mode")
    run.row("overhead", "1-element torch.add in offload(level=function), per call", "offload(level=function) torch.add", o["add_offload"],
            "torch.add", o["add_torch"],
            note=f"+{(o['add_offload'] - o['add_kernel']) * 1e6:.1f} us over kernels.add")
    run.row("overhead", "1-element torch.add in offload() (aten level, the default), per call", "offload() torch.add",
            o["add_aten"], "torch.add", o["add_torch"],
            note=f"+{(o['add_aten'] - o['add_kernel']) * 1e6:.1f} us over kernels.add")
    run.row("overhead", "1-element torch.add, PyTorch's mode dispatch alone", "empty TorchFunctionMode",
            o["add_floor"], "torch.add", o["add_torch"], note="the floor of any torch-function mode")
    run.note("launch overhead: RawKernel")
    lm = bench_rawkernel.measure_launch(inner=st["launch_inner"], rounds=st["launch_rounds"])
    run.details["launch"] = lm
    run.row("overhead", "empty RawKernel launch + sync", "empty kernel + sync", lm["empty_sync"],
            "torch.add(out=) 1 elem", lm["torch_add"])
    run.row("overhead", "add RawKernel launch + sync, 1 element", "add kernel + sync", lm["add_torch_sync"],
            "torch.add(out=) 1 elem", lm["torch_add"])
    run.note("launch overhead: aclnnAdd two-phase call (C level)")
    rows = bench_ops_c.measure(repeat=st["opsc_repeat"], only=("1-element",))
    (_, c, _n, t, _, _), = rows
    run.details["aclnn_one_add"] = {"canna": c[0], "torch": t[0] if t else None}
    run.row("overhead", "aclnnAdd 1 element (C level, cffi)", "2-phase aclnnAdd + sync", c[0],
            "torch.add", t[0] if t else None)


def section_pool(run, st):
    import bench_pool
    run.note("caching pool")
    rows = bench_pool.measure((("1 MiB", 1 << 20), ("64 MiB", 64 << 20)), budget=st["pool_budget"])
    run.details["pool"] = rows
    one, big = rows
    run.row("pool", "alloc+free 1 MiB vs raw", "acl_rt.alloc().close()", one["pool"], "aclrtMalloc+aclrtFree",
            one["raw"], target=20.0)
    run.row("pool", "alloc+free 64 MiB vs raw", "acl_rt.alloc().close()", big["pool"], "aclrtMalloc+aclrtFree",
            big["raw"])
    if one.get("torch"):
        run.row("pool", "alloc+free 1 MiB vs torch.empty", "acl_rt.alloc().close()", one["pool"],
                "torch.empty (CPU)", one["torch"])


def section_dlpack(run, st):
    import bench_dlpack
    run.note("DLPack exchange")
    m = bench_dlpack.measure(number=st["dlpack_number"], repeat=st["dlpack_repeat"])
    run.details["dlpack"] = m
    base = m[bench_dlpack.BASELINE]
    for name in bench_dlpack.TARGETED:
        run.row("dlpack", name, name.split("(")[0], m[name], "torch.from_dlpack(np)", base, target=0.5)
    run.row("dlpack", "torch.from_dlpack(DeviceArray)", "torch.from_dlpack",
            m["torch.from_dlpack(DeviceArray)"], "torch.from_dlpack(np)", base)


def section_matmul(run, st, tf):
    import bench_kernels
    run.note("matmul 1024^3")
    n = 4 if tf is not None else 3
    m = bench_kernels.measure_matmul(1024, budget=st["op_budget"] * n, tf=tf, da=False)
    run.details["matmul"] = m
    run.row("matmul", "matmul 1024^3 vs torch", "kernels.matmul", m["canna"], "torch.matmul", m["torch"], target=0.7)
    run.row("matmul", "matmul 1024^3 vs numpy", "kernels.matmul", m["canna"], "np.matmul", m["numpy"])
    if m.get("tf"):
        run.row("matmul", "matmul 1024^3 vs tensorflow", "kernels.matmul", m["canna"], "tf.linalg.matmul", m["tf"])


def section_softmax(run, st, tf):
    import bench_kernels
    run.note("softmax 4096x4096")
    n = 4 if tf is not None else 3
    m = bench_kernels.measure_softmax(4096, budget=st["op_budget"] * n, tf=tf, da=False)
    run.details["softmax"] = m
    run.row("softmax", "softmax 4096x4096 vs torch", "kernels.softmax", m["canna"], "torch.softmax", m["torch"])
    run.row("softmax", "softmax 4096x4096 vs numpy", "kernels.softmax", m["canna"], "numpy (exp/sum)", m["numpy"])


def section_conv(run, st):
    """Convolution forward + backward at resnet18 / mobilenet_v3_small / convnext_atto layer shapes
    (tools/bench_conv.py), canna's kernels against PyTorch's, 1 thread each (torch.set_num_threads
    and CANNA_SIM_THREADS, in a fresh interpreter)."""
    import bench_conv
    run.note("convolution layer shapes (1 thread each, in a subprocess)")
    res = bench_conv.measure(1, quick=st["conv_quick"])
    run.details["conv"] = res
    for r in res["rows"]:
        run.row("conv", f"conv {r['name']}", "kernels conv fwd+bwd", r["canna_s"],
                "torch conv fwd+bwd", r["torch_s"], spread=(r["ratio_min"], r["ratio_max"]))


def section_models(run, st):
    """One training step (forward, backward, AdamW) and one eval step of a ResNet-18-shaped CNN,
    BERT-tiny and GPT-2-tiny (tools/bench_models.py) inside ``offload()`` (a row per level:
    ``level="aten"``, the default, and the function level) against plain PyTorch,
    at 1 and 2 threads (torch and simulator, each count in a fresh interpreter); target 1.0x
    (issue 15). The canna column gives the relative error of the loss (train) or of the output
    (eval) against plain PyTorch."""
    import bench_models
    res_all = []
    for threads in (1, 2):
        run.note(f"models: train and eval steps in offload() vs plain PyTorch, {threads} thread(s), in a subprocess")
        res = bench_models.measure(threads, quick=st["models_quick"])
        res_all.append(res)
        run.note(f"load average {res['loadavg'][0]:.2f} before, {res['loadavg'][1]:.2f} after")
        for r in res["rows"]:
            err = r.get("loss_rel_error", r.get("out_rel_error"))
            what = "loss" if "loss_rel_error" in r else "out"
            aten = r.get("level") == "aten"
            run.row("models", f"{r['model']} {r['step']} step, {threads} thread{'s' if threads > 1 else ''}"
                    + (", aten level (default)" if aten else ", function level"),
                    f"offload({'' if aten else 'level=function'}); {what} err {err:.0e}", r["canna_s"], "plain PyTorch",
                    r["torch_s"],
                    target=r["target"], spread=(r["ratio_min"], r["ratio_max"]),
                    note=f"fallbacks: {r['fallbacks'] or 'none'}")
    run.details["models"] = res_all


def section_custom(run, st, tf):
    """A user's kernel registered with kernels.register_op (tools/custom_op_example.py) against the
    framework's native add, at the sizes of the add table."""
    import custom_op_example
    for label, shape in ADD_SIZES:
        big = math.prod(shape) > 4 * 2 ** 20
        run.note(f"registered custom add {label}")
        m = custom_op_example.measure(shape, budget=(st["add_big_budget"] if big else st["add_budget"]) * 4,
                                      batch=st["add_big_batch"] if big else st["add_batch"], tf=tf)
        run.details.setdefault("custom", {})[label] = m
        run.row("custom", f"registered custom add {label} (torch)", "register_op add_custom", m["custom_torch"],
                "torch.add", m["torch"])
        if "tf" in m:
            run.row("custom", f"registered custom add {label} (tf)", "register_op add_custom", m["custom_tf"],
                    "tf.add", m["tf"])
        gc.collect()


def section_train(run, st, tf):
    import bench_train
    run.note("training step: SimpleCNN in PyTorch")
    r = bench_train.measure(steps=st["train_steps"], warmup=st["train_warmup"], block=st["train_block"])
    rep = r.pop("report")
    r["ops_on_canna"] = {k: v.canna for k, v in rep.ops.items()}
    r["fallbacks"] = rep.fell_back()
    run.details["train"] = r
    med = r["median"]
    run.row("train", "SimpleCNN step, batch 64x1x28x28", "canna_dl.torch.offload", med["canna"]["total"],
            "plain PyTorch", med["pytorch"]["total"], target=0.5,
            note=f"fallbacks: {r['fallbacks'] or 'none'}")
    if tf is not None:
        import bench_tf_train
        run.note("training step: Dense network in TensorFlow")
        t = bench_tf_train.measure(budget=st["tf_budget"], rows=st["tf_rows"])
        run.details["tf_train"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in t.items()}
        labels = {"dense eager": ("Dense 64-128-10 step, eager GradientTape", "canna_dl.tf ops", "tf ops"),
                  "dense keras": ("Dense 64-128-10 step, Keras train_on_batch", "canna_dl.tf.keras.Dense",
                                  "keras.layers.Dense"),
                  "keras fit": (f"Dense 64-128-10, one Keras fit epoch ({bench_tf_train.FIT_BATCHES} batches)",
                                "canna_dl.tf.keras.Dense", "keras.layers.Dense")}
        for k in st["tf_rows"]:
            name, cl, rl = labels[k]
            run.row("train", name, cl, t[k][0], rl, t[k][1], target=1.0 if k == "keras fit" else None)


def section_jax(run, st):
    """canna_dl.jax under jax.jit (the XLA FFI route, and pure_callback: the path before issue 15)
    against jnp under jax.jit (tools/bench_jax.py)."""
    try:
        import jax  # noqa: F401
    except ImportError:
        run.note("jax: not installed, skipped")
        return
    import bench_jax
    run.note("JAX under jit")
    m = bench_jax.measure(budget=st["op_budget"] / 2, batch=5 if st["conv_quick"] else 20,
                          rounds=3 if st["conv_quick"] else 5)
    run.details["jax"] = m
    for name, r in m.items():
        run.row("jax", f"jax.jit {name}", "canna_dl.jax (FFI)", r["ffi"], "jnp (jit)", r["jnp"],
                target=bench_jax.TARGET, spread=r["ffi_spread"],
                note="" if r["ffi_available"] else "FFI route unavailable: pure_callback")
        run.row("jax", f"jax.jit {name}, pure_callback", "canna_dl.jax (callback)", r["pure_callback"], "jnp (jit)",
                r["jnp"], note="the path before issue 15")


def section_hccl(run, st):
    """A 64 MiB float32 all-reduce between 2 processes (tools/bench_hccl.py): canna's HCCL against
    torch.distributed's gloo on the same tensors, and against a copy of the same bytes (the ratio
    to the copy is the all-reduce's algorithm bandwidth over the copy bandwidth)."""
    import bench_hccl
    run.note("all-reduce 64 MiB float32 between 2 processes: canna HCCL, gloo, copy")
    m = bench_hccl.measure(mib=64, rounds=st["hccl_rounds"], batch=st["hccl_batch"])
    run.details["hccl"] = m
    spread = {k: f"{min(m[k + '_rounds']) * 1e3:.1f}-{max(m[k + '_rounds']) * 1e3:.1f} ms"
              for k in bench_hccl.CANDIDATES}
    run.note(f"per round: canna {spread['canna']}, gloo {spread['gloo']}, copy {spread['copy']}")
    run.row("hccl", "all-reduce 64 MiB fp32, 2 processes vs gloo", "HcclAllReduce", m["canna_s"],
            "gloo all_reduce", m["gloo_s"], note=f"rounds: {spread}")
    run.row("hccl", "all-reduce 64 MiB fp32 bandwidth vs copy bandwidth", "HcclAllReduce", m["canna_s"],
            "np.copyto 64 MiB", m["copy_s"], target=0.5, note=f"rounds: {spread}")


# ----------------------------------------------------------------------------------------------
# output

def _ratio_text(r, target=None):
    if r is None:
        return "-"
    s = f"{r:.2f}x" if r < 100 else f"{r:.0f}x"
    if target is not None:
        s = f"[green]{s}[/green]" if r >= target else f"[red]{s}[/red]"
    return s


def add_table(run):
    """The framework add table: per framework its native add, canna's add inside it (framework
    tensors in and out) and ``kernels.add`` on its tensors; ms per op and the speed ratio."""
    from rich.table import Table
    sizes = [label for label, _ in ADD_SIZES]
    t = Table(title="add inside each framework: native vs canna's (float32; ms per op and speed ratio = "
                    "native / canna; the largest size's ratio is green at >= 1x)", title_justify="left")
    t.add_column("op")
    for s in sizes:
        t.add_column(s, justify="right")
    for fw, native, canna_op, kern in (("tensorflow", "tf.add", "canna_dl.tf.add", "kernels.add on tf"),
                                       ("pytorch", "torch.add", "canna_dl.torch.add", "kernels.add on torch")):
        cells = {s["size"]: s for s in run.framework_add if s["framework"] == fw}
        if not cells:
            continue
        t.add_row(f"{native} (native)", *[f"{cells[s]['native_s'] * 1e3:.3f}" if s in cells else "-" for s in sizes])
        for label, key, rkey, style in ((canna_op, "canna_s", "ratio", None), (f"  {kern}", "kernels_s",
                                                                              "kernels_ratio", "dim")):
            vals = [f"{cells[s][key] * 1e3:.3f} ({_ratio_text(cells[s][rkey], 1.0 if s == sizes[-1] else None)})"
                    if s in cells else "-" for s in sizes]
            t.add_row(label, *vals, style=style, end_section=(style == "dim"))
    return t


def rows_table(run):
    """One row per benchmark, grouped by section: canna's time and op, the reference's time and
    op, the speed ratio and the target. Fits 100 columns (long names wrap)."""
    from rich import box
    from rich.table import Table
    t = Table(title="benchmarks, each against its reference (speed ratio = reference time / canna time; "
                    "target = minimum speed ratio)", title_justify="left", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False)
    for c, kw in (("benchmark", {"max_width": 28}), ("canna", {"max_width": 23}), ("reference", {"max_width": 23}),
                  ("speed\nratio", {"justify": "right"}), ("target", {"justify": "right"})):
        t.add_column(c, vertical="top", **kw)
    prev = None
    for r in run.rows:
        if r["section"] != prev:
            t.add_row(f"[bold]{r['section']}:[/bold]")
            prev = r["section"]
        verdict = "" if r["met"] is None else ("[green]met[/green]" if r["met"] else "[red]MISSED[/red]")
        target = f">= {r['target']:g}x\n{verdict}" if r["target"] is not None else ""
        ratio = _ratio_text(r["ratio"], r["target"])
        if r.get("spread"):
            ratio += f"\n[dim]{r['spread'][0]:.2f}-{r['spread'][1]:.2f}[/dim]"
            if wide_spread(*r["spread"]):
                ratio += "\n[yellow]wide[/yellow]"
        t.add_row(r["name"], f"{fmt(r['canna_s'])}\n[dim]{r['canna']}[/dim]",
                  f"{fmt(r['reference_s'])}\n[dim]{r['reference']}[/dim]", ratio, target)
    return t


def write_plot(run, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    items = []   # (label, ratio, target)
    for s in run.framework_add:
        fw = "TF" if s["framework"] == "tensorflow" else "PyTorch"
        items.append((f"add {s['size']}: canna in {fw}", s["ratio"], None))
    for r in run.rows:
        items.append((f"{r['name']}", r["ratio"], r["target"]))
    items = [it for it in items if it[1] is not None and it[1] > 0]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(items) + 1.6))
    y = list(range(len(items)))[::-1]
    colors = ["#4c78a8" if tg is None else ("#54a24b" if r >= tg else "#e45756") for _, r, tg in items]
    ax.barh(y, [r for _, r, _ in items], color=colors, left=0)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=1)
    for yi, (_, r, tg) in zip(y, items):
        ax.text(r * 1.05, yi, f"{r:.2f}x", va="center", fontsize=7)
        if tg is not None:
            ax.plot([tg, tg], [yi - 0.4, yi + 0.4], color="black", lw=1.5, ls=":")
    ax.set_yticks(y)
    ax.set_yticklabels([lbl for lbl, _, _ in items], fontsize=7)
    lo = min(min(r for _, r, _ in items), 0.5)
    hi = max(max(r for _, r, _ in items), 2.0)
    ax.set_xlim(lo / 1.5, hi * 10)
    ax.set_xlabel("speed ratio: reference time / canna time (log; >1x: canna faster; dotted: target)")
    ax.set_title("canna benchmarks (simulator on CPU): blue no target, green target met, red missed", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short measurements (about a minute; for tests)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    ap.add_argument("--no-tf", action="store_true", help="leave TensorFlow out (its import is slow)")
    ap.add_argument("--torch-threads", type=int, default=0, metavar="N",
                    help="torch.set_num_threads(N) first (default: PyTorch's choice; on a small shared machine "
                         "PyTorch's intra-op threads suffer most from other load)")
    ap.add_argument("--json", metavar="PATH", help="write every raw number as JSON to PATH")
    ap.add_argument("--plot", metavar="PATH", help="write a PNG bar chart of the ratios to PATH")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    if not sections:
        ap.error(f"--only names no section; choose from {', '.join(SECTIONS)}")
    if args.torch_threads < 0:
        ap.error(f"--torch-threads must be >= 0 (0: PyTorch's choice), got {args.torch_threads}")
    for opt, path in (("--plot", args.plot), ("--json", args.json)):
        # checked before measuring, so that a typo does not throw away a finished run
        if path is not None:
            problem = unwritable(path)
            if problem:
                ap.error(f"{opt} {path}: {problem}")

    from rich.console import Console
    console = Console()
    if not console.is_terminal or console.width > OUTPUT_WIDTH:
        console = Console(width=OUTPUT_WIDTH)   # a pipe or log, or a wide terminal: 100 columns
    t_start = time.perf_counter()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    st = _settings(args.quick)

    import numpy as np  # noqa: F401
    import torch
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    import acl_rt
    import kernels  # noqa: F401
    tf = None
    if not args.no_tf and any(s in sections for s in ("add", "matmul", "softmax", "train", "custom")):
        try:
            import tensorflow as tf
        except ImportError:
            tf = None
    acl_rt.init()
    info = machine_info()
    b = info.get("backend", {})
    v = info["versions"]
    console.print(f"canna {v.get('canna')} on backend [bold]{b.get('backend')}[/bold] ({b.get('soc_name')}, memory "
                  f"model {b.get('memory_model')}); {info['cpus']} CPUs, load {info.get('loadavg')}; torch "
                  f"{v.get('torch')} ({torch.get_num_threads()} threads), tensorflow {v.get('tensorflow', 'absent')}, "
                  f"numpy {v.get('numpy')}{' [quick]' if args.quick else ''}", highlight=False)

    run = Run(console)
    for s in sections:
        if s == "add":
            section_add(run, st, tf)
        elif s == "overhead":
            section_overhead(run, st)
        elif s == "pool":
            section_pool(run, st)
        elif s == "dlpack":
            section_dlpack(run, st)
        elif s == "matmul":
            section_matmul(run, st, tf)
        elif s == "softmax":
            section_softmax(run, st, tf)
        elif s == "conv":
            section_conv(run, st)
        elif s == "train":
            section_train(run, st, tf)
        elif s == "models":
            section_models(run, st)
        elif s == "custom":
            section_custom(run, st, tf)
        elif s == "hccl":
            section_hccl(run, st)
        elif s == "jax":
            section_jax(run, st)
        gc.collect()

    console.print()
    if run.framework_add:
        console.print(add_table(run))
        console.print()
    if run.rows:
        console.print(rows_table(run))
    missed = [r["name"] for r in run.rows if r["met"] is False]
    load_end = os.getloadavg()
    console.print(f"load average (1, 5, 15 min): {info.get('loadavg')} at the start, "
                  f"{[round(x, 2) for x in load_end]} at the end; 'wide': a ratio's spread over rounds "
                  f"(max/min) above {WIDE_SPREAD}, read it loosely", highlight=False)
    elapsed = time.perf_counter() - t_start
    console.print(f"targets: {sum(r['met'] is True for r in run.rows)} met, {len(missed)} missed"
                  + (f" ({'; '.join(missed)})" if missed else ""), highlight=False)
    if args.plot:
        write_plot(run, args.plot)
        console.print(f"plot: {args.plot}", highlight=False)
    load_start = info.get("loadavg")
    info = machine_info()   # again: now with every framework's version
    info["loadavg_end"] = info.get("loadavg")
    info["loadavg"] = load_start
    if args.json:
        doc = {"schema": SCHEMA, "started": started, "elapsed_s": time.perf_counter() - t_start,
               "quick": args.quick, "sections": sections, "settings": st, "ratio": "reference_s / canna_s (speed; >1: canna faster)",
               "units": "seconds per call", "machine": info, "versions": info["versions"], "framework_add": run.framework_add,
               "rows": run.rows, "details": run.details}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=_json_default)
        console.print(f"json: {args.json}", highlight=False)
    console.print(f"elapsed: {elapsed:.1f} s", highlight=False)
    return 0


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
