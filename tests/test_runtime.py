"""The runtime layer: init, devices, backend info, threads, fork, finalize."""
from __future__ import annotations

import threading

import pytest

from conftest import assert_usable


def test_init_is_idempotent_and_implicit(acl):
    acl.init()
    acl.init()
    assert acl.is_initialized()
    assert acl.device_count() == 1


def test_backend_info_reports_the_simulator(acl):
    info = acl.backend_info()
    assert info["backend"] == "sim" and info["simulator"] is True
    assert info["library"].endswith("libascendcl_sim.so")
    assert info["acl_version"] == "1.17.0"
    assert info["cann_version"] == "9.1.0"
    assert info["memory_model"] == "unified"
    assert info["run_mode"] == "device"
    assert info["soc_name"] == "Ascend910B1"
    assert info["device_count"] == 1


def test_device_singleton_and_properties(acl):
    d = acl.Device(0)
    assert d is acl.Device(0) is acl.Device() is acl.current_device()
    p = d.properties
    assert p.soc_name == "Ascend910B1" and d.name == "910B1"
    assert p.ai_core_num == 24 and p.cube_core_num == 24 and p.vector_core_num == 48
    assert p.total_memory == 64 << 30 == d.total_memory
    free, total = d.mem_info()
    assert total == 64 << 30 and 0 < free <= total
    u = d.utilization()
    assert u.memory is None and 0 <= u.cube <= 100 and 0 <= u.vector <= 100


def test_soc_profiles_and_device_count_from_environment(py):
    out = py("""
        import acl_rt
        print(acl_rt.device_count(), acl_rt.Device(2).soc_name, acl_rt.Device(1).total_memory,
              acl_rt.Device(0).properties.ai_core_num, acl_rt.backend_info()["run_mode"])
        """, env={"CANNA_SIM_DEVICES": "3", "CANNA_SIM_SOC": "Ascend310B1", "CANNA_SIM_HBM_SIZE": "512M",
                  "CANNA_SIM_MEMORY": "discrete"}).stdout.split()
    assert out == ["3", "Ascend310B1", str(512 << 20), "1", "host"]


@pytest.mark.parametrize("var,value", [("CANNA_SIM_SOC", "Ascend999"), ("CANNA_SIM_DEVICES", "0"),
                                       ("CANNA_SIM_MEMORY", "shared"), ("CANNA_SIM_HBM_SIZE", "lots")])
def test_invalid_simulator_setting_is_a_clear_error(py, var, value):
    out = py("""
        import acl_rt
        try:
            acl_rt.init()
        except acl_rt.AclError as e:
            print(type(e).__name__, e.code, e)
        """, env={var: value}).stdout
    assert "InvalidArgumentError 100000" in out and var in out


def test_multi_device_current_device_is_thread_local(py):
    py("""
        import threading, acl_rt
        d0, d1 = acl_rt.Device(0), acl_rt.Device(1)
        d1.set_current()
        assert acl_rt.current_device() is d1
        seen = []
        t = threading.Thread(target=lambda: seen.append(acl_rt.current_device()))
        t.start(); t.join()
        assert seen == [d0], seen          # a new thread starts on device 0
        with d0:
            assert acl_rt.current_device() is d0
            b = acl_rt.alloc(100)
            assert b.device is d0
        assert acl_rt.current_device() is d1
        assert acl_rt.alloc(100).device is d1
        assert d0.can_access_peer(d1)
        d0.enable_peer_access(d1)
        # cross-device copy with peer access
        a = acl_rt.alloc(8, device=0); a.copy_from(b"abcdefgh")
        c = acl_rt.alloc(8, device=1); c.copy_from(a)
        assert c.tobytes() == b"abcdefgh"
        """, env={"CANNA_SIM_DEVICES": "2"})


def test_new_thread_gets_a_context_automatically(acl):
    """The simulator, like the device, rejects calls from a thread with no current context;
    acl_rt makes the right context current before touching the runtime."""
    errors, results = [], []

    def work():
        try:
            s = acl.Device(0).create_stream()
            b = acl.alloc(32, stream=s)
            b.copy_from(b"x" * 32, stream=s)
            results.append(b.tobytes(stream=s))
            b.close()
            s.close()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [b"x" * 32] * 8


def test_raw_call_from_thread_without_context_is_a_context_error(lib):
    L, ffi = lib
    codes = []

    def raw():
        cell = ffi.new("void **")
        codes.append(L.aclrtMalloc(cell, 64, 0))
        codes.append(ffi.string(L.aclGetRecentErrMsg()).decode())

    t = threading.Thread(target=raw)
    t.start()
    t.join()
    assert codes[0] == 107002 and "context" in codes[1]


def test_forked_child_gets_a_clear_error(py):
    out = py("""
        import os, sys, acl_rt
        acl_rt.alloc(64)
        pid = os.fork()
        if pid == 0:
            try:
                acl_rt.alloc(64)
                os._exit(3)
            except acl_rt.ForkedProcessError as e:
                os._exit(0 if "spawn" in str(e) else 4)
            except BaseException:
                os._exit(5)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        acl_rt.alloc(64)   # the parent is unaffected
        """).stdout.split()
    assert out == ["0"]


def test_forked_child_raw_call_fails_without_touching_parent_state(py):
    out = py("""
        import os, acl_rt
        from acl_rt._lib import backend, ffi
        acl_rt.alloc(64)
        s = acl_rt.Device(0).create_stream()
        from acl_rt._lib import backend as b
        L = b().lib
        pid = os.fork()
        if pid == 0:
            cell = ffi.new("void **")
            rc = L.aclrtMalloc(cell, 64, 0)
            os._exit(0 if rc == 207006 else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """).stdout.split()
    assert out == ["0"]


def test_finalize_then_use_then_reinit(py):
    py("""
        import acl_rt, gc
        s = acl_rt.Device(0).create_stream()
        e = s.record()
        buf = acl_rt.alloc(128)
        host = acl_rt.alloc_host(64)
        view = host.view()
        acl_rt.finalize()
        acl_rt.finalize()                      # idempotent
        for call in (lambda: acl_rt.alloc(8), lambda: s.synchronize(), lambda: buf.tobytes()):
            try:
                call()
                raise SystemExit("no error after finalize")
            except (acl_rt.NotInitializedError, acl_rt.InvalidHandleError) as err:
                assert "finalize" in str(err), err
        del s, e, buf                          # destructors after finalize: silent no-ops
        gc.collect()
        view[0] = 1                            # host memory still viewed stays valid
        acl_rt.init()                          # a new session
        b2 = acl_rt.alloc(16)
        b2.copy_from(b"0123456789abcdef")
        assert b2.tobytes() == b"0123456789abcdef"
        """)


def test_finalize_at_exit_with_live_objects_and_pending_work(py):
    proc = py("""
        import acl_rt
        from acl_rt._lib import backend
        s = acl_rt.Device(0).create_stream()
        backend().lib.aclsimLaunchDelay(s._handle("t"), 200_000, 1, 1)
        bufs = [acl_rt.alloc(1 << 20, stream=s) for _ in range(4)]
        e = s.record()
        print("exiting")
        """)
    assert proc.stdout.strip() == "exiting" and proc.stderr == ""


def test_usable_after_everything(acl):
    assert_usable()
