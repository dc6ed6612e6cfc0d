"""canna's main job: real data through framework models whose ops run on canna's kernels.

Trains on scikit-learn's bundled digits data set (1797 real 8x8 grey images of the digits 0-9, no
download; a stratified 75/25 train/test split):

  torch         a small convolutional network, SimpleCNN (``tools/_common.py``), on 8x8 inputs:
                Conv2d 1->16 3x3 padding 1 -> ReLU -> MaxPool2d 2 -> flatten -> Linear 256->10 ->
                softmax; loss ``nll_loss(log(p))`` of the softmax output; SGD (lr 0.1, momentum
                0.9), batch 64, in plain PyTorch;
  torch+canna   the same code and initial weights inside ``canna_dl.torch.offload()``: conv2d,
                relu, max_pool2d, linear, softmax, nll_loss and the optimizer's in-place updates
                (forward and backward) run on canna's kernels, the rest on PyTorch;
  tf            a Keras Dense network 64 -> Dense(32, relu) -> Dense(10, softmax), sparse
                categorical cross entropy, SGD (lr 0.1, momentum 0.9), a ``tf.function`` training
                step, in plain TensorFlow/Keras;
  tf+canna      its twin built from ``canna_dl.tf.keras.Dense`` (dense, relu and softmax, forward
                and backward, on canna), with identical initial weights.

Every run sees the same batches in the same order. A progress bar per run shows the epochs and
the loss of the last batch; the table at the end gives per run the test accuracy, the training
loss averaged over the last epoch, the wall time, the op calls that ran on canna and those that
fell back to the framework, the bytes canna copied (``canna_dl.copy_stats``; 0 on the simulator's
unified memory: every exchange is zero-copy), the pool's peak memory
(``acl_rt.max_memory_allocated``) and the device's utilization by the run (:class:`Utilization`).
A PNG plots the training loss of every run per step.

Exit status: 0; 1 if a canna run's test accuracy is more than 2 points below its plain twin's;
2 for bad arguments or a missing dependency.

PyTorch runs with one intra-op thread (``--threads``; the batches are tiny, and on a small busy
machine PyTorch's spinning OpenMP workers can make a run many times slower); each PyTorch run is
preceded by an untimed warm-up step.

Run: ``make demo`` or ``.venv/bin/python tools/demo.py [--epochs N] [--quick] [--json PATH]
[--plot PATH] [--seed S] [--threads T] [--no-tf]``.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import simple_cnn, unwritable  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: a canna run may be at most this many points of test accuracy below its plain-framework twin
MAX_ACCURACY_DROP = 2.0
RUNS = ("torch", "torch+canna", "tf", "tf+canna")
#: the widest line the demo prints (its table, progress bars and notes fit a 100-column terminal)
OUTPUT_WIDTH = 100


# ---------------------------------------------------------------------------------------------
# measurements around a run

class Utilization:
    """How busy the run kept the device.

    ``busy_percent``: the share of the device's core-time (cube + vector cores, e.g. 24 + 48 on an
    Ascend 910B1) that this process's kernels occupied during the run, from the core-nanoseconds
    of work the simulator counts per process (``acl_rt.monitor.processes()``, ``busy_ns``): exact
    however short the run. ``None`` on a backend that does not count them (a real install).

    ``mean`` / ``peak``: ``acl_rt.Device(dev).utilization().aicore`` (percent, an integer: the
    busier of cube and vector cores over the last second, as npu-smi shows it) sampled every
    ``interval`` seconds and once at the end. For runs of a second or less of small kernels it
    rounds to 0 (the Dense network's ops take microseconds), which is why the table shows
    ``busy_percent`` when there is one."""

    def __init__(self, acl_rt, dev=0, interval=0.1):
        self._acl_rt = acl_rt
        self._dev = acl_rt.Device(dev)
        self._interval = interval
        self._stop = threading.Event()
        self.samples: list = []
        self._thread = threading.Thread(target=self._loop, name="canna-demo-util", daemon=True)
        self._busy0 = self._t0 = self._busy1 = self._t1 = None

    def _busy_ns(self):
        try:
            rows = [p for p in self._acl_rt.monitor.processes(self._dev.id) if p.pid == os.getpid()]
        except Exception:   # monitoring unavailable: no busy counter
            return None
        return rows[0].busy_ns if rows else None

    def _sample(self):
        try:
            v = self._dev.utilization().aicore
        except Exception:   # a backend that does not report it: no sample
            return
        if v is not None:
            self.samples.append(v)

    def _loop(self):
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self):
        self._busy0, self._t0 = self._busy_ns(), time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        self._busy1, self._t1 = self._busy_ns(), time.perf_counter()

    def summary(self) -> dict:
        s = self.samples
        busy = None
        if self._busy0 is not None and self._busy1 is not None:
            p = self._dev.properties
            cores = (p.cube_core_num or 0) + (p.vector_core_num or 0)
            wall_ns = (self._t1 - self._t0) * 1e9
            if cores and wall_ns > 0:
                busy = 100.0 * (self._busy1 - self._busy0) / (wall_ns * cores)
        return {"busy_percent": busy, "mean": round(sum(s) / len(s), 1) if s else None,
                "peak": max(s) if s else None, "samples": len(s)}


def fmt_util(u: dict) -> str:
    """The table's util cell: the busy share (two significant digits: a tiny share is not shown as
    0), else the sampled AI-core average/peak."""
    if u.get("busy_percent") is not None:
        return f"{u['busy_percent']:.2g}%"
    return "-" if u["mean"] is None else f"{u['mean']:.0f}/{u['peak']}%"


@contextlib.contextmanager
def canna_watch(result: dict):
    """Measure a canna run: bytes copied (delta of ``canna_dl.copy_stats``), the pool's peak
    (``acl_rt.max_memory_allocated`` after ``reset_peak_memory_stats``) and the utilization."""
    import acl_rt
    import canna_dl
    acl_rt.init()
    acl_rt.reset_peak_memory_stats()
    c0 = canna_dl.copy_stats()
    sampler = Utilization(acl_rt)
    with sampler:
        yield
    c1 = canna_dl.copy_stats()
    result["bytes_copied"] = c1["bytes"] - c0["bytes"]
    result["copies"] = c1["count"] - c0["count"]
    result["peak_pool_bytes"] = acl_rt.max_memory_allocated()
    result["utilization"] = sampler.summary()


# ---------------------------------------------------------------------------------------------
# data

def load_data(seed: int):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)          # [1797, 8, 8] in [0, 1]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, stratify=y, random_state=seed)
    return xtr, xte, ytr, yte


def batches(n: int, batch: int, epochs: int, seed: int):
    """The batches' index arrays of every epoch (the same order for every run): a new
    permutation per epoch, full batches only (the remainder, 1347 % 64 = 3 images, is left out of
    that epoch, like PyTorch's ``drop_last=True``: a batch of 3 makes a noisy step)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    full = max(1, n // batch)
    out = []
    for _ in range(epochs):
        perm = rng.permutation(n)
        out.append([perm[i * batch:(i + 1) * batch] for i in range(full)])
    return out


# ---------------------------------------------------------------------------------------------
# PyTorch

def torch_runs(data, order, args, progress):
    import torch
    import torch.nn.functional as F

    import canna_dl.torch as ct

    if args.threads:
        torch.set_num_threads(args.threads)
    xtr, xte, ytr, yte = data
    xtr, xte = torch.from_numpy(xtr[:, None]), torch.from_numpy(xte[:, None])
    ytr, yte = torch.from_numpy(ytr), torch.from_numpy(yte)
    torch.manual_seed(args.seed)
    init = simple_cnn(torch, size=8)
    # warm-up outside the timings (PyTorch's and canna's first calls set up thread pools, kernel
    # plans and caches): one forward and backward of a throwaway copy, plain and on canna
    for on_canna in (False, True):
        m = copy.deepcopy(init)
        with ct.offload() if on_canna else contextlib.nullcontext():
            F.nll_loss(torch.log(m(xtr[:args.batch])), ytr[:args.batch]).backward()
    results = {}
    for name in ("torch", "torch+canna"):
        model = copy.deepcopy(init)                   # the same initial weights for both runs
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        res = {"framework": "pytorch", "model": "SimpleCNN", "canna": name.endswith("canna")}
        task = progress.add_task(name, total=len(order), loss=float("nan"))
        steps, epoch_losses = [], []
        report = ct.OffloadReport()
        watch = canna_watch(res) if res["canna"] else contextlib.nullcontext()
        t0 = time.perf_counter()
        with watch, (ct.offload(report=report) if res["canna"] else contextlib.nullcontext()):
            model.train()
            for ep, epoch in enumerate(order):
                tot = 0.0
                for k, idx in enumerate(epoch):
                    it = torch.from_numpy(idx)
                    x, y = xtr[it], ytr[it]
                    opt.zero_grad()
                    loss = F.nll_loss(torch.log(model(x)), y)
                    loss.backward()
                    opt.step()
                    v = loss.item()
                    steps.append(v)
                    tot += v * len(idx)
                    progress.update(task, completed=ep + (k + 1) / len(epoch), loss=v)
                epoch_losses.append(tot / sum(len(i) for i in epoch))
            model.eval()
            with torch.no_grad():
                acc = (model(xte).argmax(1) == yte).float().mean().item()
        res["wall_s"] = time.perf_counter() - t0
        res.update(test_accuracy=acc, final_loss=epoch_losses[-1], epoch_losses=epoch_losses, step_losses=steps)
        if res["canna"]:
            d = report.as_dict()
            res["ops"] = {k: {"canna": v["canna"], "fallback": v["fallback"], "backward": v["backward"]}
                          for k, v in d["ops"].items()}
            res["fallback_reasons"] = {k: v["reasons"] for k, v in d["ops"].items() if v["reasons"]}
            res["framework_only"] = d["pytorch"]
            from canna_dl.torch._offload import resolve_level
            res["offload_level"] = resolve_level()[0]   # (offload()'s: aten operators or torch functions)
        results[name] = res
    return results


# ---------------------------------------------------------------------------------------------
# TensorFlow / Keras

def import_tf():
    """Import TensorFlow and Keras with TensorFlow's start-up chatter (absl/oneDNN lines written
    to file descriptor 2 before its logging is configured) silenced; errors still raise."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            import tensorflow as tf
            import keras
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    return tf, keras


def tf_runs(data, order, args, progress):
    import numpy as np
    tf, keras = import_tf()
    import canna_dl.tf as ctf
    import canna_dl.tf.keras as ckeras

    xtr, xte, ytr, yte = data
    xtr, xte = xtr.reshape(len(xtr), 64), xte.reshape(len(xte), 64)

    def build(layers):
        return keras.Sequential([keras.Input((64,)), layers.Dense(32, activation="relu"),
                                 layers.Dense(10, activation="softmax")])
    keras.utils.set_random_seed(args.seed)
    init = build(keras.layers).get_weights()
    results = {}
    for name in ("tf", "tf+canna"):
        model = build(ckeras if name.endswith("canna") else keras.layers)
        model.set_weights(init)                        # identical initial weights
        opt = keras.optimizers.SGD(args.lr, momentum=0.9)
        loss_fn = keras.losses.SparseCategoricalCrossentropy()

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        res = {"framework": "tensorflow", "model": "Dense 64-32-10", "canna": name.endswith("canna")}
        task = progress.add_task(name, total=len(order), loss=float("nan"))
        steps, epoch_losses = [], []
        watch = canna_watch(res) if res["canna"] else contextlib.nullcontext()
        ctf.reset_op_stats()
        t0 = time.perf_counter()
        with watch:
            for ep, epoch in enumerate(order):
                tot = 0.0
                for k, idx in enumerate(epoch):
                    v = float(step(tf.constant(xtr[idx]), tf.constant(ytr[idx])))
                    steps.append(v)
                    tot += v * len(idx)
                    progress.update(task, completed=ep + (k + 1) / len(epoch), loss=v)
                epoch_losses.append(tot / sum(len(i) for i in epoch))
            prob = model(tf.constant(xte), training=False).numpy()
            acc = float(np.mean(prob.argmax(1) == yte))
        res["wall_s"] = time.perf_counter() - t0
        res.update(test_accuracy=acc, final_loss=epoch_losses[-1], epoch_losses=epoch_losses, step_losses=steps)
        if res["canna"]:
            # canna's TF ops have no fallback: a call either runs on canna or raises
            res["ops"] = {k: {"canna": v["canna"], "fallback": 0, "backward": v["backward"]}
                          for k, v in ctf.op_stats().items()}
            res["fallback_reasons"] = {}
            res["framework_only"] = {"loss (keras SparseCategoricalCrossentropy)": len(steps),
                                     "optimizer (keras SGD)": len(steps)}
        results[name] = res
    return results


# ---------------------------------------------------------------------------------------------
# output

def fmt_bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 else f"{n:.1f} {unit}"
        n /= 1024


def summarize(res):
    """Totals of a canna run's op counters."""
    ops = res.get("ops")
    if ops is None:
        return None
    fwd = sum(v["canna"] for v in ops.values())
    bwd = sum(v["backward"] for v in ops.values())
    fb = sum(v["fallback"] for v in ops.values())
    names = sorted(k for k, v in ops.items() if v["canna"])
    return {"ops_on_canna": names, "canna_calls": fwd, "backward_calls": bwd, "fallback_calls": fb,
            "fell_back": sorted(k for k, v in ops.items() if v["fallback"])}


#: what every column of the table means (printed under it)
CAPTION = ("test acc: accuracy on the 450 test images; epoch loss: mean training loss of the last epoch "
           "(the progress bar shows the last batch's); wall: training + test time; on canna: ops that ran "
           "on canna, and their forward+backward calls; fell back: calls of those ops that ran on the "
           "framework instead; copied: bytes canna copied to hand tensors over (0: zero-copy); peak pool: "
           "peak bytes allocated from canna's memory pool; util: share of the device's core-time (cube + "
           "vector cores) the run's kernels kept busy (on a device without busy counters: AI-core %, "
           "avg/peak sampled during the run)")


def table(results, console):
    from rich import box
    from rich.table import Table
    t = Table(title="canna demo: digits 8x8, same batches and initial weights per twin", title_justify="left",
              caption=CAPTION, caption_justify="left",
              box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, pad_edge=False)
    # min widths: the numbers never fold; headers and the ops cell wrap on a narrow terminal
    for col, width in (("run", 11), ("test\nacc", 6), ("epoch\nloss", 6), ("wall", 5), ("on canna", 7),
                       ("fell\nback", 4), ("copied", 3), ("peak\npool", 7), ("util", 5)):
        t.add_column(col, justify="left" if col in ("run", "on canna") else "right", overflow="fold", min_width=width,
                     no_wrap=col == "run", vertical="bottom")
    for name in RUNS:
        r = results.get(name)
        if r is None:
            continue
        s = summarize(r)
        if s is None:
            canna_cols = ["-"] * 5
        else:
            u = r["utilization"]
            util = fmt_util(u)
            canna_cols = [f"{len(s['ops_on_canna'])} ops, {s['canna_calls']}+{s['backward_calls']}",
                          str(s["fallback_calls"]), fmt_bytes(r["bytes_copied"]), fmt_bytes(r["peak_pool_bytes"]), util]
        t.add_row(name, f"{100 * r['test_accuracy']:.2f}%", f"{r['final_loss']:.4f}", f"{r['wall_s']:.2f}s",
                  *canna_cols, style="bold" if r["canna"] else None)
    # narrower than ~90 columns rich would cut columns off: render the table at 96 (the terminal
    # wraps the lines) rather than lose numbers
    if console.width < 96:
        from rich.console import Console
        Console(width=96).print(t)
    else:
        console.print(t)
    for name in RUNS:
        r = results.get(name)
        if r is None or "ops" not in r:
            continue
        parts = [f"{k} {v['canna']}+{v['backward']}" for k, v in r["ops"].items() if v["canna"]]
        console.print(f"[bold]{name}[/] ({r['model']}) on canna, forward+backward calls: " + ", ".join(parts),
                      highlight=False)
        fb = r["fallback_reasons"]
        console.print("  fell back: " + ("; ".join(f"{k}: {', '.join(f'{m} x{n}' for m, n in v.items())}"
                                                    for k, v in fb.items()) or "none"), highlight=False)
        other = r["framework_only"]
        if other:
            short = sorted(other.items(), key=lambda kv: -kv[1])
            console.print(f"  ran on {r['framework']} (no canna op): "
                          + ", ".join(f"{k} x{n}" for k, n in short[:8])
                          + (f", ... ({len(short) - 8} more)" if len(short) > 8 else ""), highlight=False, style="dim")


def plot(results, path, order):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=100, gridspec_kw={"width_ratios": [3, 2]})
    colors = {"torch": "tab:blue", "torch+canna": "tab:orange", "tf": "tab:green", "tf+canna": "tab:red"}
    for name in RUNS:
        r = results.get(name)
        if r is None:
            continue
        style = {"color": colors[name], "linestyle": "--" if r["canna"] else "-",
                 "linewidth": 1.2 if r["canna"] else 2.4, "alpha": 0.9}
        s = r["step_losses"]
        per_epoch = len(s) / max(1, len(order))
        ax.plot([(i + 1) / per_epoch for i in range(len(s))], s, label=name, **style)
        e = r["epoch_losses"]
        ax2.plot(range(1, len(e) + 1), e, marker="o" if r["canna"] else "s", markersize=4 if r["canna"] else 6,
                 label=f"{name} ({100 * r['test_accuracy']:.1f}% test)", **style)
    for a, what in ((ax, "per batch"), (ax2, "mean per epoch")):
        a.set_yscale("log")
        a.set_xlabel("epoch")
        a.set_ylabel(f"training loss ({what})")
        a.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax2.legend()
    fig.suptitle("digits: PyTorch SimpleCNN and Keras Dense, plain (solid) vs canna (dashed); twins overlap")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def check_twins(results):
    """Compare each canna run with its plain twin: ``(twins, failures)``; ``twins`` a list of
    ``{"plain", "canna", "accuracy_drop_points", "max_loss_diff"}``, ``failures`` the messages of
    canna runs whose test accuracy is more than :data:`MAX_ACCURACY_DROP` points below the twin's."""
    twins, failures = [], []
    for plain in ("torch", "tf"):
        a, b = results.get(plain), results.get(plain + "+canna")
        if a is None or b is None:
            continue
        drop = 100 * (a["test_accuracy"] - b["test_accuracy"])
        dl = max((abs(u - v) for u, v in zip(a["step_losses"], b["step_losses"])), default=0.0)
        twins.append({"plain": plain, "canna": plain + "+canna", "accuracy_drop_points": drop, "max_loss_diff": dl})
        if drop > MAX_ACCURACY_DROP:
            failures.append(f"{plain}+canna's test accuracy ({100 * b['test_accuracy']:.2f}%) is {drop:.2f} points "
                            f"below {plain}'s ({100 * a['test_accuracy']:.2f}%; allowed: {MAX_ACCURACY_DROP:g})")
    return twins, failures


def runtime_line():
    import acl_rt
    info = acl_rt.backend_info()
    p = acl_rt.Device(0).properties
    kind = (f"simulator {info['simulator_version']}, {info['memory_model']} memory" if info["simulator"]
            else "CANN")
    return (f"canna on {info['backend']} ({kind}); CANN {info['cann_version']}; device 0: {p.soc_name}, "
            f"{p.ai_core_num} AI cores, {(p.total_memory or 0) / 2**30:.0f} GiB")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Exit status: 0 ok; 1 a canna run's accuracy is more than "
                                        f"{MAX_ACCURACY_DROP:g} points below its twin's; 2 usage errors.")
    ap.add_argument("--epochs", type=int, default=10, help="training epochs per run (default 10)")
    ap.add_argument("--quick", action="store_true", help="reduced mode: one epoch per run (overrides --epochs)")
    ap.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    ap.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (momentum 0.9; default 0.1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the split, the initial weights and the batch order")
    ap.add_argument("--json", metavar="PATH", help="write the table's numbers (and the loss curves) as JSON")
    ap.add_argument("--plot", metavar="PATH", default="demo_loss.png",
                    help="loss-curve PNG (default: demo_loss.png in the current directory)")
    ap.add_argument("--threads", type=int, default=1,
                    help="PyTorch's intra-op threads (torch.set_num_threads) for both PyTorch runs; default 1: "
                         "batches of 64 8x8 images gain nothing from more, and on a small, busy machine "
                         "PyTorch's spinning OpenMP workers slow it down many times over; 0: PyTorch's choice")
    ap.add_argument("--no-tf", action="store_true", help="skip the TensorFlow runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.epochs = 1
    if args.epochs < 1 or args.batch < 1 or not (args.lr > 0 and math.isfinite(args.lr)) or args.threads < 0:
        ap.error("--epochs and --batch must be positive integers, --lr a positive finite number, --threads >= 0")
    for opt, path in (("--plot", args.plot), ("--json", args.json)):
        # checked before training, so that a typo does not throw away a finished run
        if path is not None:
            problem = unwritable(path)
            if problem:
                ap.error(f"{opt} {path}: {problem}")

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=OUTPUT_WIDTH)      # a log or a pipe: room for the whole table
    elif console.width > OUTPUT_WIDTH:
        console = Console(width=OUTPUT_WIDTH)      # lines stay readable on a wide terminal
    try:
        import matplotlib  # noqa: F401
        import sklearn  # noqa: F401
    except ImportError as e:
        console.print(f"[red]missing dependency[/]: {escape(str(e.name))}; install the demo extra: "
                      + escape("pip install -e '.[demo]'") + " (make demo does)", highlight=False)
        return 2

    t_start = time.perf_counter()
    console.print(runtime_line(), highlight=False)
    data = load_data(args.seed)
    order = batches(len(data[0]), args.batch, args.epochs, args.seed)
    console.print(f"data: scikit-learn digits, {len(data[0]) + len(data[1])} images 8x8 "
                  f"({len(data[0])} train / {len(data[1])} test, stratified), {args.epochs} epoch(s) of "
                  f"{len(order[0])} batches of {args.batch}, SGD lr {args.lr:g} momentum 0.9, seed {args.seed}",
                  highlight=False)

    results = {}
    columns = (TextColumn("{task.description:<12}"), BarColumn(), TaskProgressColumn(),
               TextColumn("epoch {task.completed:.1f}/{task.total:.0f}"), TextColumn("last batch loss {task.fields[loss]:.4f}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        results.update(torch_runs(data, order, args, progress))
        if not args.no_tf:
            results.update(tf_runs(data, order, args, progress))

    table(results, console)

    twins, failures = check_twins(results)
    for tw in twins:
        a, b = results[tw["plain"]], results[tw["canna"]]
        console.print(f"{tw['canna']} vs {tw['plain']}: test accuracy {100 * b['test_accuracy']:.2f}% vs "
                      f"{100 * a['test_accuracy']:.2f}% ({0.0 - tw['accuracy_drop_points']:+.2f} points), max |loss "
                      f"difference| per step {tw['max_loss_diff']:.2e}, wall time {b['wall_s'] / a['wall_s']:.2f}x "
                      "the plain run's", highlight=False)

    plot_path = os.path.abspath(args.plot)
    plot(results, plot_path, order)
    console.print(f"loss plot: {plot_path}", highlight=False)
    total = time.perf_counter() - t_start
    if args.json:
        out = {"config": {"epochs": args.epochs, "batch": args.batch, "lr": args.lr, "momentum": 0.9,
                          "seed": args.seed, "train": len(data[0]), "test": len(data[1])},
               "runs": {}, "twins": twins, "plot": plot_path, "total_s": total, "ok": not failures,
               "failures": failures}
        for name, r in results.items():
            d = dict(r)
            s = summarize(r)
            if s is not None:
                d.update(s)
            out["runs"][name] = d
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        console.print(f"json: {os.path.abspath(args.json)}", highlight=False)
    if failures:
        for f in failures:
            console.print(f"[red]FAILED[/]: {f}")
        return 1
    console.print(f"demo OK in {total:.1f} s", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
