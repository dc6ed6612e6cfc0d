"""Backend loading (docs/DESIGN.md §2), tested for real: the simulator library installed under a fake
CANN prefix is found and used by CANNA_BACKEND=ascend; a missing install names every place searched."""
from __future__ import annotations

import json
import shutil

import pytest

from acl_rt._lib import SIM_LIBRARY


@pytest.fixture
def fake_cann(tmp_path):
    lib64 = tmp_path / "cann" / "lib64"
    lib64.mkdir(parents=True)
    shutil.copy(SIM_LIBRARY, lib64 / "libascendcl.so")
    return tmp_path / "cann"


_REPORT = """
    import json, acl_rt
    info = acl_rt.backend_info()
    b = acl_rt.alloc(32); b.copy_from(b"z" * 32); assert b.tobytes() == b"z" * 32
    print(json.dumps({k: info[k] for k in ("backend", "simulator", "library", "found_via", "soc_name")}))
"""


def test_ascend_backend_found_through_ascend_home_path(py, fake_cann):
    out = py(_REPORT, env={"CANNA_BACKEND": "ascend", "ASCEND_HOME_PATH": str(fake_cann),
                           "ASCEND_TOOLKIT_HOME": None})
    info = json.loads(out.stdout)
    assert info["backend"] == "ascend"
    assert info["library"] == str(fake_cann / "lib64" / "libascendcl.so")
    assert info["found_via"] == "$ASCEND_HOME_PATH"
    assert info["simulator"] is True          # it is our library in disguise, and says so
    assert info["soc_name"] == "Ascend910B1"


def test_libacl_rt_is_preferred_over_libascendcl(py, fake_cann):
    shutil.copy(SIM_LIBRARY, fake_cann / "lib64" / "libacl_rt.so")
    out = py(_REPORT, env={"CANNA_BACKEND": "ascend", "ASCEND_HOME_PATH": None,
                           "ASCEND_TOOLKIT_HOME": str(fake_cann)})
    info = json.loads(out.stdout)
    assert info["library"].endswith("libacl_rt.so") and info["found_via"] == "$ASCEND_TOOLKIT_HOME"


def test_auto_prefers_a_real_install(py, fake_cann):
    out = py(_REPORT, env={"CANNA_BACKEND": "auto", "ASCEND_HOME_PATH": str(fake_cann)})
    assert json.loads(out.stdout)["backend"] == "ascend"


def test_system_loader_path(py, fake_cann):
    out = py(_REPORT, env={"CANNA_BACKEND": "ascend", "ASCEND_HOME_PATH": None, "ASCEND_TOOLKIT_HOME": None,
                           "LD_LIBRARY_PATH": str(fake_cann / "lib64")})
    info = json.loads(out.stdout)
    assert info["found_via"] == "system loader" and info["library"] == "libascendcl.so"


def test_missing_install_names_every_place_searched(py, tmp_path):
    out = py("""
        import acl_rt
        try:
            acl_rt.init()
        except acl_rt.BackendNotFoundError as e:
            print(e)
            print("PLACES", len(e.searched))
        """, env={"CANNA_BACKEND": "ascend", "ASCEND_HOME_PATH": str(tmp_path / "nowhere"),
                  "ASCEND_TOOLKIT_HOME": None, "LD_LIBRARY_PATH": None}).stdout
    assert "no CANN runtime" in out
    for place in ("already loaded in the process", str(tmp_path / "nowhere" / "lib64" / "libacl_rt.so"),
                  str(tmp_path / "nowhere" / "lib64" / "libascendcl.so"), "$ASCEND_TOOLKIT_HOME: not set",
                  "system loader", "/usr/local/Ascend/cann/lib64/libacl_rt.so",
                  "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so", "CANNA_BACKEND=sim"):
        assert place in out, place


def test_auto_falls_back_to_the_simulator(py, tmp_path):
    out = py("""
        import acl_rt
        i = acl_rt.backend_info()
        print(i["backend"], len(i["searched"]) > 0)
        """, env={"CANNA_BACKEND": None, "ASCEND_HOME_PATH": str(tmp_path), "LD_LIBRARY_PATH": None}).stdout.split()
    assert out == ["sim", "True"]


def test_bad_backend_name(py):
    out = py("""
        import acl_rt
        try:
            acl_rt.init()
        except ValueError as e:
            print(e)
        """, env={"CANNA_BACKEND": "cuda"}).stdout
    assert "CANNA_BACKEND='cuda'" in out and "'auto', 'ascend' or 'sim'" in out


def test_missing_symbol_fails_only_when_called(acl):
    from acl_rt._lib import backend
    lib = backend().lib
    assert not lib.has("aclrtSomethingFromCANN42")
    with pytest.raises(acl.NotSupportedError) as ei:
        lib.aclrtSomethingFromCANN42
    assert "not available in this CANN version" in str(ei.value)
    assert isinstance(ei.value, NotImplementedError)
