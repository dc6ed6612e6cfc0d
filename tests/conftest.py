"""Shared fixtures. Everything runs on the simulator (CANNA_BACKEND=sim unless a test says otherwise)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

os.environ.setdefault("CANNA_BACKEND", "sim")
# the suite defines its own simulator configuration: a user's shell settings must not leak in
# (CANNA_SIM_CHECK stays: running the whole suite under memcheck is useful)
for _var in ("CANNA_SIM_DEVICES", "CANNA_SIM_SOC", "CANNA_SIM_HBM_SIZE", "CANNA_SIM_MEMORY"):
    os.environ.pop(_var, None)
# a suite rerun under the discrete memory model asks for it with CANNA_TEST_SIM_MEMORY (the variable
# above is dropped like every other shell setting)
if os.environ.get("CANNA_TEST_SIM_MEMORY"):
    os.environ["CANNA_SIM_MEMORY"] = os.environ["CANNA_TEST_SIM_MEMORY"]
# a simulated machine of this test session only: processes of the same machine share device memory
# and see each other (as on a device), so concurrent test runs must not meet; subprocesses inherit
# it and belong to the session's machine. Pool statistics are published in a private folder too.
os.environ.setdefault("CANNA_SIM_MACHINE", f"pytest-{os.getpid()}")
if "CANNA_STATS_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile
    os.environ["CANNA_STATS_DIR"] = tempfile.mkdtemp(prefix="canna-stats-")
    atexit.register(shutil.rmtree, os.environ["CANNA_STATS_DIR"], True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, *, env: dict | None = None, timeout: float = 120, check: bool = True):
    """Run ``code`` in a fresh interpreter (for anything that may kill a process or needs its own
    environment). Returns the CompletedProcess; with ``check``, fails the test on a non-zero exit."""
    full_env = dict(os.environ)
    full_env.setdefault("CANNA_BACKEND", "sim")
    full_env.update(env or {})
    for k, v in list(full_env.items()):
        if v is None:
            del full_env[k]
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"subprocess failed ({proc.returncode}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture
def py():
    return run_python


@pytest.fixture
def acl():
    """The acl_rt module with an initialized runtime on device 0."""
    import acl_rt
    acl_rt.init()
    acl_rt.Device(0).set_current()
    yield acl_rt


@pytest.fixture
def lib():
    """The raw cffi library of the loaded backend (C-level tests) and its ffi."""
    import acl_rt
    from acl_rt._lib import backend, ffi
    acl_rt.init()
    acl_rt.Device(0).set_current()
    return backend().lib, ffi


@pytest.fixture
def stream(acl):
    s = acl.Device(0).create_stream()
    yield s
    try:
        s.synchronize()
    except Exception:
        pass
    s.close()


def assert_usable():
    """The runtime still works: a small allocation round-trips data."""
    import acl_rt
    buf = acl_rt.alloc(64)
    buf.copy_from(bytes(range(64)))
    assert buf.tobytes() == bytes(range(64))
    buf.close()


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    """A private on-disk kernel cache (``CANNA_KERNEL_CACHE``) for the module that uses it and the
    subprocesses it starts; the previous setting comes back afterwards."""
    d = tmp_path_factory.mktemp("kcache")
    old = os.environ.get("CANNA_KERNEL_CACHE")
    os.environ["CANNA_KERNEL_CACHE"] = str(d)
    yield d
    if old is None:
        os.environ.pop("CANNA_KERNEL_CACHE", None)
    else:
        os.environ["CANNA_KERNEL_CACHE"] = old


@pytest.fixture
def function_level(monkeypatch):
    """``offload()`` without ``level=`` runs the function level (``CANNA_OFFLOAD_LEVEL=function``,
    inherited by subprocesses): for the tests of what that level maps (torch functions, canna's
    autograd); the default level's, the aten level's, are ``tests/test_offload_aten.py`` and the
    tests that name no level."""
    monkeypatch.setenv("CANNA_OFFLOAD_LEVEL", "function")
