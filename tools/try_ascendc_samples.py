#!/usr/bin/env python3
"""Compile (and, for the samples it knows, run) public Ascend C vector samples unchanged in canna's
simulator, and list what fails and why (issue 16: "an independent check will compile and run
further unchanged public Ascend C vector samples").

    python tools/try_ascendc_samples.py [--src DIR_OR_GIT_DIR ...] [--clone URL ...] [--only SUBSTR]
                                        [--no-run] [-v]

Sources: each ``--src`` is a checkout or a bare git directory (read with ``git archive``); each
``--clone`` is a git URL cloned shallowly into a temporary directory. With neither, it clones the
official sample repository (https://gitee.com/ascend/samples, ``operator/ascendc``); offline, it
says so and exits 0 -- nothing in the test suite depends on this tool or on the network.

Every ``.cpp`` / ``.asc`` file that includes ``kernel_operator.h`` and holds a ``__global__`` kernel
is a sample. Cube samples (``Matmul``, ``Mmad``, the A1/B1/CO1 buffers -- not supported yet) are
listed as skipped. An op project's kernel (``op_kernel/x.cpp``) is built the way canna's README
says: ``-include op_host/x_tiling.h -DCANNA_TILING_DATA_TYPE=optiling::<its struct>`` and
``-DDTYPE_X=...`` from the first data type of each input/output in ``op_host/x.cpp`` and
``-DCANNA_TILING_KEY=<key>`` from its ``SetTilingKey`` (else key 1). The samples listed in
``RUNNERS`` below are launched on NumPy (or PyTorch, for bfloat16) inputs with the shapes of their
host code and compared with NumPy in float64; one that reaches a feature the simulator reports as
unsupported is counted apart. The sample sources stay in the
temporary directory: nothing is copied into canna.

Re-run on the public samples: ``git clone https://gitee.com/ascend/samples`` (or any copy of its
``operator/ascendc`` folder) and ``python tools/try_ascendc_samples.py --src samples``.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import acl_rt  # noqa: E402
import kernels  # noqa: E402

DEFAULT_CLONE = "https://gitee.com/ascend/samples"

_CUBE = re.compile(r"\bMatmul(Impl|Type)?\b|\bMmad\b|matmul_intf\.h|TPosition::(A1|A2|B1|B2|CO1|CO2)\b|"
                   r"QuePosition::(A1|A2|B1|B2|CO1|CO2)\b|\bLoadData\b|\bFixpipe\b|hccl|Hccl")
_KERNEL = re.compile(r"__global__\s+__aicore__\s+void\s+(\w+)\s*\(")
_GE_DTYPES = {"DT_FLOAT": "float", "DT_FLOAT16": "half", "DT_BF16": "bfloat16_t", "DT_INT32": "int32_t",
              "DT_INT16": "int16_t", "DT_INT8": "int8_t", "DT_UINT8": "uint8_t", "DT_INT64": "int64_t",
              "DT_UINT32": "uint32_t", "DT_BOOL": "bool"}


# -- where the samples come from ------------------------------------------------------------------

def _materialize(src: str, tmp: Path) -> Path:
    p = Path(src).expanduser().resolve()
    if (p / "HEAD").is_file() and (p / "objects").is_dir():          # a bare git directory
        # only the C/C++ sources and headers (a snapshot may lack its large binary blobs)
        out = tmp / p.parent.name
        out.mkdir()
        ls = subprocess.run(["git", f"--git-dir={p}", "ls-tree", "-r", "HEAD"], capture_output=True, text=True,
                            check=True).stdout
        want = [(line.split()[2], line.split("\t", 1)[1]) for line in ls.splitlines()
                if line.split("\t", 1)[1].endswith((".cpp", ".h", ".hpp", ".asc", ".cc", ".inc"))]
        batch = subprocess.run(["git", f"--git-dir={p}", "cat-file", "--batch"], capture_output=True, check=True,
                               input="".join(f"{sha}\n" for sha, _ in want).encode()).stdout
        pos = 0
        for sha, path in want:
            head_end = batch.index(b"\n", pos)
            head = batch[pos:head_end].split()
            pos = head_end + 1
            if len(head) < 3 or head[1] == b"missing":
                continue
            size = int(head[2])
            dst = out / path
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(batch[pos:pos + size])
            pos += size + 1
        return out
    return p


def _clone(url: str, tmp: Path) -> Path | None:
    out = tmp / re.sub(r"\W+", "_", url)
    r = subprocess.run(["git", "clone", "-q", "--depth", "1", url, str(out)], capture_output=True, text=True,
                       timeout=600)
    if r.returncode:
        print(f"skipped {url}: cannot clone (offline?): {r.stderr.strip().splitlines()[-1:]}")
        return None
    return out


def find_samples(root: Path):
    for f in sorted(list(root.rglob("*.cpp")) + list(root.rglob("*.asc"))):
        if "/.git/" in str(f):
            continue
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        if "kernel_operator.h" not in text or not _KERNEL.search(text):
            continue
        if f.name in ("main.cpp",) or "/op_host/" in str(f):
            continue
        yield f, text


# -- how an op project's kernel is built ----------------------------------------------------------

def _op_project_options(f: Path, text: str) -> tuple:
    """-include the op_host tiling header, name its struct, define DTYPE_<NAME> from op_host/x.cpp."""
    host = f.parent.parent / "op_host" if f.parent.name == "op_kernel" else f.parent
    if not any(host.glob("*tiling*.h")) and not (host / "op_host").is_dir() and host == f.parent \
            and "DTYPE_" not in text and "TILING_KEY_IS(" not in text:
        return ()
    opts = []
    if "GET_TILING_DATA(" in text and host.is_dir():
        for h in sorted(host.glob("*tiling*.h")):
            m = re.search(r"BEGIN_TILING_DATA_DEF\((\w+)\)", h.read_text(errors="replace"))
            if m:
                opts += ["-include", str(h), f"-DCANNA_TILING_DATA_TYPE=optiling::{m.group(1)}"]
                break
    if host.is_dir():
        for c in sorted(host.glob("*.cpp")):
            if c == f:
                continue
            ct = c.read_text(errors="replace")
            key = re.search(r"SetTilingKey\((\d+)", ct)
            if key and "TILING_KEY_IS(" in text and not any(o.startswith("-DCANNA_TILING_KEY") for o in opts):
                opts.append(f"-DCANNA_TILING_KEY={key.group(1)}")
            for m in re.finditer(r'(?:Input|Output)\("(\w+)"\)(.*?);', ct, re.S):
                d = re.search(r"ge::(DT_\w+)", m.group(2))
                if d and d.group(1) in _GE_DTYPES:
                    name = m.group(1).upper()
                    opts += [f"-DDTYPE_{name}={_GE_DTYPES[d.group(1)]}",
                             f"-DORIG_DTYPE_{name}=ge::{d.group(1)}"]
    if "TILING_KEY_IS(" in text and not any(o.startswith("-DCANNA_TILING_KEY") for o in opts):
        opts.append("-DCANNA_TILING_KEY=1")      # the host picks it at run time: try the first key
    return tuple(dict.fromkeys(opts))


# -- the samples this tool knows how to run (inputs and shapes from their host code) -----------------

def _sync():
    acl_rt.current_stream().synchronize()


def _f16(*shape):
    return np.random.uniform(-1, 1, shape).astype(np.float16)


def _check(name, got, want, tol):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {got.shape} != {want.shape}")
    if not np.allclose(got, want, rtol=tol, atol=tol):
        raise AssertionError(f"{name}: max |diff| {np.max(np.abs(got - want)):.3g} (tolerance {tol})")


def _tiling(**fields):
    """A tiling struct of uint32 fields as the op_host header lays it out, as bytes."""
    return np.array(list(fields.values()), np.uint32).tobytes()


def _launch(k, blocks, *args):
    k.launch(blocks, *args)
    _sync()


def _ws():
    return np.zeros(1 << 16, np.uint8)


def _u32(*v):
    return np.array(v, np.uint32)


_NP = {"half": np.float16, "float": np.float32}


def _add_tiled(m, dtype=None, blocks=8):
    # 1_add_frameworklaunch, 3_add_kernellaunch, tutorials/AddCustomSample: z = x + y on 8 x 2048 half,
    # 8 blocks, 8 tiles (their host code); an op project's element type is its DTYPE_X
    k = m.get_function("add_custom")
    if dtype is None:
        dx = next((o.split("=", 1)[1] for o in m.options if o.startswith("-DDTYPE_X=")), "half")
        dtype = _NP[dx]
    x, y = (np.random.uniform(-1, 1, (8, 2048)).astype(dtype) for _ in range(2))
    z = np.empty_like(x)
    n = k.num_params
    if n == 3:
        _launch(k, blocks, x, y, z)
    elif n == 5 and k.params[4].kind == "pointer":
        _launch(k, 8, x, y, z, _ws(), _u32(x.size, 8))
    elif n == 4 and k.params[3].kind == "scalar":
        _launch(k, blocks, x, y, z, x.size)
    elif n == 4 and k.params[3].kind == "struct":
        _launch(k, 8, x, y, z, {"totalLength": x.size, "tileNum": 8})
    elif n == 4:
        _launch(k, 8, x, y, z, _u32(x.size, 8))
    else:
        _launch(k, 8, x, y, z, x.size, 8)
    _check("z", z, x.astype(np.float64) + y, 1e-3 if dtype == np.float16 else 1e-6)


def _add_single_core(m):
    # 21_vectoradd_kernellaunch/VectorAddSingleCore[WithTmpbuf]: 2048 elements on one core
    k = m.get_function("add_custom")
    dt = np.float16
    x, y = (np.random.uniform(-50, 50, 2048).astype(dt) for _ in range(2))
    z = np.empty_like(x)
    _launch(k, 1, x, y, z)
    _check("z", z, x.astype(np.float64) + y, 5e-2)


def _add_single_core_bf16(m):
    # VectorAddSingleCoreWithTmpbuf: bfloat16 in and out, the sum in float (Cast, Add, Cast back)
    import torch
    k = m.get_function("add_custom")
    x, y = (torch.empty(2048).uniform_(-50, 50).to(torch.bfloat16) for _ in range(2))
    z = torch.empty_like(x)
    _launch(k, 1, x, y, z)
    want = (x.double() + y.double()).to(torch.bfloat16).double().numpy()
    _check("z", z.double().numpy(), want, 1e-2)


def _add_static(m):
    # 23_static_tensor_programming: add_custom_v1..v4, 8 blocks of 9 tiles of 4096 float
    for name in m.kernel_names:
        k = m.get_function(name)
        n = 4096 * 9 * 8
        x, y = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
        z = np.empty_like(x)
        _launch(k, 8, x, y, z, _u32(n // 8))
        _check(f"{name}: z", z, x.astype(np.float64) + y, 1e-6)


def _add_4096(m):
    # 4_bank_conflict: add_custom_v1 / v2 on 1 x 4096 float, one block
    for name in m.kernel_names:
        x, y = (np.random.uniform(1, 100, 4096).astype(np.float32) for _ in range(2))
        z = np.empty_like(x)
        _launch(m.get_function(name), 1, x, y, z)
        _check(f"{name}: z", z, x.astype(np.float64) + y, 1e-6)


def _sub(m):
    # 15_sub_frameworklaunch: z = x - y, half, 8 blocks of 2048 (formerNum, tailNum, formerLength, tailLength, alignNum)
    k = m.get_function("sub_custom")
    x, y = _f16(8 * 2048), _f16(8 * 2048)
    z = np.empty_like(x)
    _launch(k, 8, x, y, z, _ws(), _u32(8, 0, 2048, 0, 16))
    _check("z", z, x.astype(np.float64) - y, 1e-3)


def _leaky_relu(m):
    # 9_leakyrelu_frameworklaunch: float, 8 blocks, 16 tiles; tiling (totalLength, tileNum, negativeSlope)
    k = m.get_function("leaky_relu_custom")
    x = np.random.uniform(-1, 1, 8 * 4096).astype(np.float32)
    y = np.empty_like(x)
    tiling = np.array([(x.size, 16, 0.1)], dtype=[("t", "<u4"), ("n", "<u4"), ("s", "<f4")])
    _launch(k, 8, x, y, _ws(), np.frombuffer(tiling.tobytes(), np.uint8).copy())
    x64 = x.astype(np.float64)
    _check("y", y, np.where(x64 >= 0, x64, x64 * np.float64(np.float32(0.1))), 1e-6)


def _whole_reduce_sum(m):
    # 18/19 whole_reduce_sum: per-row sums of a 13 x 123 half matrix; tiling (totalLength, rows, cols)
    k = m.get_function("whole_reduce_sum_custom")
    rows, cols = 13, 123
    x = np.random.uniform(1, 100, (rows, cols)).astype(np.float16)
    y = np.zeros(rows, np.float16)
    args = (x, y, _ws(), _u32(rows * cols, rows, cols)) if k.num_params == 4 else (x, y, _u32(rows * cols, rows, cols))
    _launch(k, 1, *args)
    _check("y", y, x.astype(np.float64).sum(axis=1), 5e-3)


def _scatter(m):
    # 3_libraries/0_scatter_kernellaunch: 128 half scattered by byte offsets 254, 252, ..., 0
    k = m.get_function("scatter_custom")
    x = np.arange(128, dtype=np.float16)
    off = np.arange(254, -1, -2, dtype=np.uint32)
    z = np.zeros(128, np.float16)
    _launch(k, 1, x, off, z)
    _check("z", z, np.arange(127, -1, -1, dtype=np.float64), 0)


def _tbufpool(m):
    # 2_features/2_tbufpool: stage 1 adds the first 1024 floats, stage 2 (pools reset and shared)
    # subtracts the next 1024
    k = m.get_function("tbufpool_custom")
    a, b = (np.random.randint(0, 1000, 2048).astype(np.float32) for _ in range(2))
    z = np.full(2048, np.nan, np.float32)
    _launch(k, 1, a, b, z, {"totalLength": 2048})
    a64 = a.astype(np.float64)
    _check("z", z, np.concatenate([a64[:1024] + b[:1024], a64[1024:] - b[1024:]]), 0)


def _abs_gather_mask(m):
    # 16_unaligned_abs_kernellaunch/AbsGatherMask: |x| of 8 blocks x 16 tiles of 18 half, the unaligned
    # tail of each tile gathered (GatherMask) into a 32-byte block
    k = m.get_function("abs_gather_mask_custom")
    x = _f16(8 * 8 * 2 * 18)
    y = np.zeros_like(x)
    _launch(k, 8, x, y)
    _check("y", y, np.abs(x.astype(np.float64)), 0)


class Unsupported(Exception):
    """A sample that needs what the simulator reports as not supported (a KernelError saying so)."""


def _abs_duplicate(m):
    # 16_unaligned_abs_kernellaunch/AbsDuplicate: 4 blocks each zero their part of the output, SyncAll
    # (workspace form), then add |x| of 16 groups of 11 half into it (atomic adds overlapping the next
    # group); input -0, -1, ..., -703 and five zeros (its gen_data.py)
    k = m.get_function("abs_duplicate_custom")
    x = np.concatenate([-np.arange(704), np.zeros(5)]).astype(np.float16)
    y = np.full_like(x, np.nan)
    _launch(k, 4, x, y, np.zeros(32, np.int32))
    _check("y", y, np.abs(x.astype(np.float64)), 0)


def _reduce_min(m):
    # 17_unaligned_reducemin_kernellaunch: 4 blocks, SyncAll, then the minimum of each group of 4 half
    # added at the group's first element; input: -i-3 at every 4th index i of 64, then zeros (76 in all)
    k = m.get_function("reduce_min_custom")
    x = np.zeros(76, np.float16)
    x[0:64:4] = -np.arange(0, 64, 4) - 3
    y = np.full_like(x, np.nan)
    _launch(k, 4, x, y, np.zeros(32, np.int32))
    _check("y", y, x.astype(np.float64), 0)


def _abs_pad(m):
    # 16_unaligned_abs_kernellaunch/AbsPad: 8 blocks of rows of 7 valid half read 16 at a time, Pad fills
    # columns 7..15 with 0 (PadTiling from a 16 x 16 shape with 16 x 7 valid), |x| added into the output;
    # input -1, -2, ..., -14336 and 9 more elements read past its end (its main.cpp and gen_data.py)
    k = m.get_function("abs_pad_custom")
    x = np.concatenate([-np.arange(14336) - 1, np.zeros(9)]).astype(np.float16)
    y = np.full_like(x, np.nan)
    t = np.zeros(26, np.uint32)   # PadTiling: srcHeight, srcWidth, srcOriWidth, ...
    t[:3] = 16, 16, 7
    _launch(k, 8, x, y, t)
    _check("y", y[:14336], np.abs(x[:14336].astype(np.float64)), 0)


def _abs_unpad(m):
    # AbsUnPad: |x| of 8 blocks of 16 x 16 half tiles read with 2 elements of the next row, UnPad drops
    # the 2 right columns (UnPadTiling of 16 x 16); input 0 .. 28671 (its gen_data.py) and 2 more
    k = m.get_function("abs_unpad_custom")
    x = np.concatenate([np.arange(28672), np.zeros(2)]).astype(np.float16)
    y = np.full_like(x, np.nan)
    t = np.zeros(8, np.uint32)    # UnPadTiling: srcHeight, srcWidth, ...
    t[:2] = 16, 16
    _launch(k, 8, x, y, t)
    _check("y", y[:28672], np.abs(x[:28672].astype(np.float64)), 0)


def _addn(m):
    # 4_addn_frameworklaunch / 5_addn_kernellaunch: z = x + y, the inputs a list of two 8 x 2048 half
    # tensors in global memory (ListTensorDesc: ptrOffset, (dim | index << 32, shape) per tensor, then
    # the data pointers -- as 5_addn_kernellaunch's main.cpp builds it); 8 blocks
    k = m.get_function("addn_custom")
    x, y = _f16(8, 2048), _f16(8, 2048)
    z = np.empty_like(x)
    lst = np.array([8 * 7, 2, 8, 2048, 2 | (1 << 32), 8, 2048, x.ctypes.data, y.ctypes.data], np.uint64)
    if k.num_params == 2:
        _launch(k, 8, lst, z)
    else:
        _launch(k, 8, lst, z, _ws(), _u32(x.size, 8))
    _check("z", z, x.astype(np.float64) + y, 1e-3)


def _aligned(n_bytes, align=512):
    raw = np.zeros(n_bytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n_bytes]


def _group_barrier(m):
    # 2_features/16_group_barrier: 8 blocks zero out, SyncAll; blocks 0-1 atomically add 12 to out[0] and
    # Arrive, blocks 2-7 Wait and print it (24); workspace 6 x 512 bytes, 512-byte aligned, zeroed
    k = m.get_function("group_barrier")
    out = np.full(8, -1, np.int32)
    _launch(k, 8, _aligned(6 * 512), out, _ws(), _u32(8))
    if out[0] != 24:
        raise AssertionError(f"out[0] = {out[0]}, want 24")


# a sample's path (its directory) -> how to run it
RUNNERS = [
    ("VectorAddSingleCoreWithTmpbuf/", _add_single_core_bf16),
    ("VectorAddSingleCore/", _add_single_core),
    ("23_static_tensor_programming", _add_static),
    ("1_add_frameworklaunch/AddCustom/", _add_tiled),
    ("2_add_frameworklaunchlite/AddCustom/", _add_tiled),
    ("3_add_kernellaunch/", _add_tiled),
    ("1_add_frameworklaunch/AddCustomTiny/", _add_tiled),
    ("7_dumptensor/FrameworkLaunch/", _add_tiled),
    ("AddCustomSample/FrameworkLaunch/AddCustom/", _add_tiled),
    ("AddCustomSample/KernelLaunch/", _add_tiled),
    ("8_library_frameworklaunch/static_library/AddCustom/", _add_tiled),
    ("25_simple_add/", lambda m: _add_tiled(m, np.float32)),
    ("7_dumptensor/KernelLaunch/", lambda m: _add_tiled(m, np.float16, blocks=1)),
    ("4_bank_conflict/", _add_4096),
    ("15_sub_frameworklaunch", _sub),
    ("9_leakyrelu_frameworklaunch", _leaky_relu),
    ("wholereduces_", _whole_reduce_sum),
    ("0_scatter_kernellaunch", _scatter),
    ("2_tbufpool/", _tbufpool),
    ("AbsGatherMaskKernelInvocation/", _abs_gather_mask),
    ("AbsDuplicateKernelInvocation/", _abs_duplicate),
    ("ReduceMinKernelInvocation/", _reduce_min),
    ("16_group_barrier/", _group_barrier),
    ("AbsPadKernelInvocation/", _abs_pad),
    ("_addn_", _addn),
    ("AbsUnPadKernelInvocation/", _abs_unpad),
]


def run_sample(rel: str, mod) -> str | None:
    """Run a known sample; None if this tool does not know how."""
    for key, fn in RUNNERS:
        if key in rel:
            fn(mod)
            return key
    return None


# -- the trial ------------------------------------------------------------------------------------

def _first_error(e: BaseException) -> str:
    msg = str(e)
    for line in msg.splitlines():
        if "error:" in line:
            return re.sub(r"^.*?(error:)", r"\1", line).strip()
    return msg.strip().splitlines()[0] if msg.strip() else type(e).__name__


def trial(root: Path, only: str | None, run: bool, verbose: bool) -> dict:
    res = {"compiled": 0, "failed": 0, "skipped": 0, "ran": 0, "run_failed": 0, "unsupported": 0, "rows": []}
    for f, text in find_samples(root):
        rel = str(f.relative_to(root))
        if only and only not in rel:
            continue
        if _CUBE.search(text):
            res["skipped"] += 1
            res["rows"].append((rel, "skip", "cube unit / Matmul API (not supported yet)"))
            continue
        try:
            mod = kernels.RawModule(path=f, options=_op_project_options(f, text)).compile()
        except Exception as e:  # noqa: BLE001 -- a trial reports every failure
            res["failed"] += 1
            res["rows"].append((rel, "FAIL", _first_error(e)))
            if verbose:
                print(str(e)[:4000])
            continue
        res["compiled"] += 1
        status = "compiles"
        if run:
            try:
                r = run_sample(rel, mod)
            except Unsupported as e:
                res["unsupported"] += 1
                status = f"compiles; run stops: {e} is not supported by the simulator"
                r = None
            except Exception as e:  # noqa: BLE001
                res["run_failed"] += 1
                status = f"compiles; run FAILED: {_first_error(e)}"
                if verbose:
                    traceback.print_exc()
            else:
                if r is not None:
                    res["ran"] += 1
                    status = "compiles; runs and matches NumPy"
        res["rows"].append((rel, "ok", status))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", default=[], help="a checkout or bare git directory")
    ap.add_argument("--clone", action="append", default=[], help="a git URL to clone shallowly")
    ap.add_argument("--only", help="only samples whose path contains this")
    ap.add_argument("--no-run", action="store_true", help="compile only")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    np.random.seed(0)
    with tempfile.TemporaryDirectory(prefix="canna_ascendc_samples_") as tmpd:
        tmp = Path(tmpd)
        roots = [_materialize(s, tmp) for s in a.src]
        for url in a.clone or ([] if a.src else [DEFAULT_CLONE]):
            r = _clone(url, tmp)
            if r is not None:
                roots.append(r)
        if not roots:
            print("no sources: nothing tried")
            return 0
        total = {"compiled": 0, "failed": 0, "skipped": 0, "ran": 0, "run_failed": 0, "unsupported": 0}
        for root in roots:
            res = trial(root, a.only, not a.no_run, a.verbose)
            for rel, st, why in res["rows"]:
                print(f"{st:5} {rel}: {why}")
            for key in total:
                total[key] += res[key]
        print(f"\n{total['compiled']} compile, {total['failed']} fail to compile, {total['skipped']} skipped (cube); "
              f"{total['ran']} run and match NumPy, {total['run_failed']} run wrong or fault, "
              f"{total['unsupported']} stop at an unsupported feature")
    return 0


if __name__ == "__main__":
    sys.exit(main())
