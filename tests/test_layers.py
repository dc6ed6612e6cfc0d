"""The layers of docs/DESIGN.md §1 hold: acl_rt <- canna_dl core <- kernels <- framework shims.

The static check is import-linter's (the contracts are ``[tool.importlinter]`` in pyproject.toml);
the runtime checks import in a fresh interpreter and look at ``sys.modules``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("acl_rt", "canna_dl", "kernels")


def lint_imports(root: str | os.PathLike) -> subprocess.CompletedProcess:
    """``lint-imports`` (the venv's) on the tree at ``root``, with that tree's pyproject.toml."""
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from importlinter.cli import "
                                                               "lint_imports_command as c; sys.exit(c())"]
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([*cmd, "--no-cache", "pyproject.toml"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def test_import_contracts_are_kept():
    pytest.importorskip("importlinter", reason="import-linter is in the test extra: pip install 'canna[test]'")
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, f"import-linter contracts broken:\n{proc.stdout}\n{proc.stderr}"
    assert "0 broken" in proc.stdout


def _copy_sources(dst: Path) -> None:
    """The Python sources of the three packages and pyproject.toml (what import-linter reads)."""
    for pkg in PACKAGES:
        for src in Path(ROOT, pkg).rglob("*.py"):
            if "__pycache__" in src.parts:
                continue
            out = dst / src.relative_to(ROOT)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
    shutil.copyfile(Path(ROOT, "pyproject.toml"), dst / "pyproject.toml")


#: (file, import, the contract it breaks) for the synthetic violations
VIOLATIONS = [
    # the cycle of issue 13: exchanging a torch tensor imported the shim, which imports kernels
    ("canna_dl/_interop.py", "from .torch import _public", "canna_dl core imports no framework shim and no kernels"),
    ("canna_dl/__init__.py", "from . import tf", "canna_dl's __init__ imports no framework shim and no kernels"),
    ("acl_rt/_stream.py", "import canna_dl", "acl_rt knows nothing above it"),
    ("canna_dl/torch/_common.py", "from ..jax import _ops", "canna_dl: the framework shims (independent of each other)"),
    ("kernels/_reduce.py", "from canna_dl.torch import _public", "kernels imports no framework shim"),
    ("kernels/_signature.py", "from acl_rt._stream import current_stream",
     "kernels and canna_dl reach below acl_rt's public API only through acl_rt.lowlevel"),
]


def test_import_contracts_catch_violations(tmp_path):
    """Every contract fails on a synthetic violation (function-level imports, as the lazy ones are)
    in a copy of the sources."""
    pytest.importorskip("importlinter", reason="import-linter is in the test extra: pip install 'canna[test]'")
    _copy_sources(tmp_path)
    for module, line, _ in VIOLATIONS:
        with open(tmp_path / module, "a") as f:
            f.write(f"\n\ndef _synthetic_violation():\n    {line}  # noqa\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout
    broken = " ".join(proc.stdout.split("Broken contracts", 1)[-1].split())   # unwrap rich's line breaks
    for module, line, contract in VIOLATIONS:
        assert f"{contract}" in broken, f"{module}: {line!r} not reported:\n{proc.stdout}"
    summary = [ln for ln in proc.stdout.splitlines() if ln.startswith("Contracts:")]
    assert summary and f"{len(VIOLATIONS)} broken" in summary[0], proc.stdout


def test_exchanging_tensors_loads_no_shim_and_no_kernels(py):
    """canna_dl.asarray / to_* on framework tensors import the framework and canna_dl's core only
    (before, asarray(torch tensor) imported canna_dl.torch, whose __init__ imports kernels)."""
    proc = py("""
        import sys
        import numpy as np, torch, canna_dl
        a = canna_dl.asarray(torch.ones(3))
        assert canna_dl.to_torch(a).tolist() == [1.0, 1.0, 1.0]
        assert canna_dl.from_torch(torch.zeros(2)).shape == (2,)
        canna_dl.to_numpy(canna_dl.asarray(np.ones(2)))
        bad = sorted(m for m in sys.modules if m == "kernels" or m.startswith(("kernels.", "canna_dl.torch",
                                                                                 "canna_dl.tf", "canna_dl.jax")))
        print(bad)
        """)
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.parametrize("fw, code", [
    ("tensorflow", "import tensorflow as tf; canna_dl.to_tf(canna_dl.asarray(tf.ones(3)))"),
    ("jax", "import jax.numpy as jnp; canna_dl.to_jax(canna_dl.asarray(jnp.ones(3)))"),
])
def test_exchanging_tf_and_jax_loads_no_shim_and_no_kernels(py, fw, code):
    pytest.importorskip(fw)
    proc = py(f"""
        import sys, canna_dl
        {code}
        print(sorted(m for m in sys.modules if m == "kernels" or m.startswith(("kernels.", "canna_dl.torch",
                                                                                "canna_dl.tf", "canna_dl.jax"))))
        """)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_importing_the_runtime_and_the_core_loads_nothing_above(py):
    proc = py("""
        import sys, acl_rt
        assert not [m for m in sys.modules if m.startswith(("canna_dl", "kernels"))]
        import canna_dl
        canna_dl.zeros(3)
        print(sorted(m for m in sys.modules if m.startswith(("kernels", "torch", "tensorflow", "jax",
                                                             "canna_dl.torch", "canna_dl.tf", "canna_dl.jax"))))
        """)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_shims_reexport_the_core_exchange():
    torch = pytest.importorskip("torch")
    import canna_dl
    import canna_dl.torch as ct
    from canna_dl._frameworks import _torch
    assert ct.to_torch is _torch.to_torch and ct.from_torch is _torch.from_torch
    assert canna_dl.to_torch(canna_dl.asarray(torch.ones(2))).tolist() == [1.0, 1.0]


def test_the_seam_contract_names_every_private_acl_rt_module():
    """The seam contract forbids acl_rt's private modules one by one: a new one must be added."""
    import tomllib
    with open(Path(ROOT, "pyproject.toml"), "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    seam = next(c for c in contracts if c.get("id") == "acl-rt-seam")
    here = Path(ROOT, "acl_rt")
    private = {f"acl_rt.{p.stem}" for p in here.glob("_*.py") if p.stem != "__init__"}
    private |= {f"acl_rt.{p.parent.name}" for p in here.glob("_*/__init__.py")}
    assert private == set(seam["forbidden_modules"])


def test_kernels_use_the_seam():
    """The seam's names are the ones kernels call (a rename in acl_rt breaks here, not at run time)."""
    from acl_rt import lowlevel
    import kernels._core as core
    import kernels._raw as raw
    assert core.rt is lowlevel and raw.rt is lowlevel
    for name in lowlevel.__all__:
        assert hasattr(lowlevel, name), name


# -- one DLPack importer: kernels reads GM pointer arguments through canna_dl ---------------------

def test_kernel_arguments_read_capsules_with_canna_dls_reader(acl):
    """A raw capsule passed to a kernel is read by canna_dl's capsule reader, in place and not
    consumed (a launch may be repeated); DLPack producers are imported by canna_dl.from_dlpack."""
    np = pytest.importorskip("numpy")
    from canna_dl import _native
    from kernels._args import gm_pointer
    a = np.arange(12, dtype=np.float32)
    for cap in (a.__dlpack__(), a.__dlpack__(max_version=(1, 0))):
        v = gm_pointer(cap)
        assert (v.ptr, v.dtype, v.host, v.readonly) == (a.ctypes.data, "float32", True, False)
        assert _native.capsule_info(cap)["name"] in ("dltensor", "dltensor_versioned")   # not consumed
    ro = a.copy()
    ro.flags.writeable = False
    assert gm_pointer(ro.__dlpack__(max_version=(1, 0))).readonly        # DLPack 1.x READ_ONLY flag
    buf = bytearray(64)
    with pytest.raises(TypeError, match="vector dtype \\(4 lanes\\)"):
        gm_pointer(_native._test_capsule(buf, (4,), dtype=(2, 32, 4)))
    with pytest.raises(ValueError, match="not C-contiguous"):
        gm_pointer(_native._test_capsule(buf, (2, 2), strides=(1, 2)))
    with pytest.raises(TypeError, match="lives on device 'cuda'"):
        gm_pointer(_native._test_capsule(buf, (4,), device=(2, 0)))
    used = a.__dlpack__()
    import canna_dl
    canna_dl.from_dlpack(used)
    with pytest.raises(TypeError, match="already consumed"):
        gm_pointer(used)
    # a producer goes through canna_dl.from_dlpack: the view is canna_dl's DeviceArray of a's memory
    assert gm_pointer(a).ptr == a.ctypes.data


def test_only_canna_dl_declares_the_dlpack_abi():
    """The DLPack structs are declared once, in canna_dl/_native (kernels/_args.py had its own cffi
    copy and capsule parser)."""
    for pkg in ("acl_rt", "kernels"):
        for path in Path(ROOT, pkg).rglob("*.py"):
            text = path.read_text()
            assert "DLManagedTensor" not in text and "PyCapsule_GetPointer" not in text, path
