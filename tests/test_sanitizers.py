"""The simulator's C code under AddressSanitizer + UndefinedBehaviorSanitizer (docs/DESIGN.md §10).

The simulator sources are rebuilt with ``-fsanitize=address,undefined`` into a fake CANN prefix
and loaded through ``CANNA_BACKEND=ascend`` + ``ASCEND_HOME_PATH`` (the real-install path of
acl_rt/_lib.py), with libasan preloaded into a fresh interpreter that runs the runtime test
modules. Any ASan report or UB aborts that run. A second test proves the harness can fail: a
library with a deliberate heap overflow must produce an ASan report.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM_SOURCES = sorted(glob.glob(os.path.join(ROOT, "acl_rt", "_sim", "*.c")))
FLAGS = ["-O1", "-g", "-fPIC", "-pthread", "-std=gnu11", "-fvisibility=hidden", "-fno-omit-frame-pointer",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-shared"]
SUITE = ["tests/test_streams.py", "tests/test_memory.py", "tests/test_bad_input.py", "tests/test_runtime.py",
         "tests/test_sim_exec.py"]


def _libasan():
    out = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return out if os.path.isabs(out) and os.path.exists(out) else None


def _build(prefix, extra_sources=()):
    lib64 = prefix / "lib64"
    lib64.mkdir(parents=True, exist_ok=True)
    cmd = ["gcc", *FLAGS, "-o", str(lib64 / "libascendcl.so"), *SIM_SOURCES, *map(str, extra_sources), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return prefix


def _env(prefix, libasan):
    env = dict(os.environ)
    env.update(CANNA_BACKEND="ascend", ASCEND_HOME_PATH=str(prefix), LD_PRELOAD=libasan,
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:exitcode=86",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    env.pop("ASCEND_TOOLKIT_HOME", None)
    return env


@pytest.fixture(scope="module")
def libasan():
    path = _libasan()
    if path is None:
        pytest.skip("gcc has no libasan on this machine")
    return path


def test_runtime_suite_is_clean_under_asan_and_ubsan(tmp_path, libasan):
    prefix = _build(tmp_path / "cann")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITE,
                           "-k", "not reports_the_simulator"],
                          cwd=ROOT, env=_env(prefix, libasan), capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert "AddressSanitizer" not in out and "runtime error:" not in out, out[-6000:]
    assert proc.returncode == 0, out[-6000:]
    assert " passed" in out


def test_the_harness_reports_a_heap_overflow(tmp_path, libasan):
    bug = tmp_path / "bug.c"
    bug.write_text(
        '#include <stdlib.h>\n#include <string.h>\n'
        '__attribute__((visibility("default"))) int canna_test_overflow(int n) {\n'
        '    char *p = malloc(16); memset(p, 1, (size_t)n); int r = p[n - 1]; free(p); return r; }\n')
    prefix = _build(tmp_path / "cann", [bug])
    code = ("import ctypes, acl_rt; acl_rt.init(); "
            "lib = ctypes.CDLL(acl_rt.backend_info()['library']); lib.canna_test_overflow(17)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(prefix, libasan),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 86 and "heap-buffer-overflow" in proc.stderr, proc.stderr[-3000:]


def test_hccl_is_clean_under_asan_and_ubsan(tmp_path, libasan):
    """The simulated HCCL (acl_rt/_sim_hccl) under the sanitizers, loaded as a CANN install's
    libhccl.so next to the runtime; tests/test_hccl.py without its torch-driven tests."""
    prefix = _build(tmp_path / "cann")
    sources = sorted(glob.glob(os.path.join(ROOT, "acl_rt", "_sim_hccl", "*.c")))
    proc = subprocess.run(["gcc", *FLAGS, "-o", str(prefix / "lib64" / "libhccl.so"), *sources, "-lm", "-lrt"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_hccl.py",
                           "-k", "not ddp and not array and not monitor"],
                          cwd=ROOT, env=_env(prefix, libasan), capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert "AddressSanitizer" not in out and "runtime error:" not in out, out[-6000:]
    assert proc.returncode == 0, out[-6000:]
    assert " passed" in out
