"""Monitoring across processes: the simulated machine, DCMI, published pool stats, canna-smi and
its Prometheus exporter."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

import acl_rt
from acl_rt import monitor, smi
from conftest import ROOT, assert_usable

MiB = 1 << 20


class Child:
    """A canna process that runs ``code`` (which must end by printing "ready"), then waits for a
    line on stdin before exiting."""

    def __init__(self, code: str, env: dict | None = None):
        full = dict(os.environ, **(env or {}))
        src = textwrap.dedent(code) + "\nimport sys\nsys.stdout.flush()\nsys.stdin.readline()\n"
        self.proc = subprocess.Popen([sys.executable, "-c", src], env=full, cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"child did not start: {line!r} {out} {err}")
        self.pid = self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def smi_run(*args, env=None, check=True):
    full = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, "-m", "acl_rt.smi", *args], env=full, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    if check and p.returncode != 0:
        pytest.fail(f"canna-smi {' '.join(args)} failed ({p.returncode}): {p.stdout}\n{p.stderr}")
    return p


N = 3 * MiB + 12345


def test_cli_json_shows_another_process_allocation_and_cleans_up():
    child = Child(f"""
        import acl_rt
        buf = acl_rt.alloc({N})
        buf.copy_from(b"x" * 10)
        assert acl_rt.monitor.publish_pool_stats()
        print("ready")
        """)
    try:
        doc = json.loads(smi_run("--json").stdout)
        pools = [p for p in doc["pools"] if p["pid"] == child.pid]
        assert len(pools) == 1
        pool = pools[0]
        assert pool["requested_bytes"] == N and pool["allocated_bytes"] == acl_rt._native.round_size(N)
        assert pool["reserved_bytes"] == 20 * MiB and pool["device_id"] == 0 and pool["name"] == "python"
        procs = [p for p in doc["processes"] if p["pid"] == child.pid]
        assert len(procs) == 1 and procs[0]["memory_bytes"] >= 20 * MiB and procs[0]["name"]
        dev = doc["devices"][0]
        assert dev["name"] == "910B1" and dev["health"] == "OK" and dev["error"] is None
        assert dev["hbm_total_bytes"] == 64 << 30 and dev["hbm_used_bytes"] >= 20 * MiB
        assert dev["power_w"] is None and dev["temperature_c"] is None       # NA on the simulator
        assert dev["memory_used_bytes"] is None                              # a 910B has HBM, no DDR row
        assert set(doc["devices"][0]) == set(smi.DEVICE_FIELDS)
        assert set(pool) == set(smi.POOL_FIELDS) and set(procs[0]) == set(smi.PROCESS_FIELDS)
        table = smi_run().stdout
        assert "910B1" in table and str(child.pid) in table and "HBM-Usage(MB)" in table and "NA" in table
    finally:
        child.stop()
    doc = json.loads(smi_run("--json").stdout)
    assert not [p for p in doc["pools"] if p["pid"] == child.pid]          # its record was removed at exit
    assert not [p for p in doc["processes"] if p["pid"] == child.pid]


def test_killed_process_is_reaped_and_its_memory_returns():
    env = {"CANNA_SIM_HBM_SIZE": "256M"}   # a machine of its own
    child = Child("""
        import acl_rt
        buf = acl_rt.DeviceMemoryResource(0).allocate(200 << 20)
        print("ready")
        """, env)
    code = """
        import json, acl_rt
        print(json.dumps([acl_rt.monitor.processes(0)[i].as_dict() for i in range(len(acl_rt.monitor.processes(0)))]))
        """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ, **env), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert any(p["pid"] == child.pid and p["memory_bytes"] >= 200 << 20 for p in json.loads(r.stdout))
    # the device is shared: another process cannot take what the child holds
    probe = """
        import acl_rt, pytest
        free, total = acl_rt.Device(0).mem_info()
        print(free, total)
        with pytest.raises(acl_rt.OutOfMemoryError):
            acl_rt.DeviceMemoryResource(0).allocate(100 << 20)
        """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(probe)], env=dict(os.environ, **env), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    free, total = map(int, r.stdout.split())
    assert total == 256 << 20 and free < 60 << 20
    child.kill()                                          # no clean-up code runs
    after = """
        import acl_rt
        assert not acl_rt.monitor.processes(0)
        free, total = acl_rt.Device(0).mem_info()
        assert free == total, (free, total)
        b = acl_rt.DeviceMemoryResource(0).allocate(200 << 20)   # the memory is usable again
        print("ok")
        """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(after)], env=dict(os.environ, **env), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_utilization_of_another_process_is_visible():
    env = {"CANNA_SIM_HBM_SIZE": "1G"}
    child = Child("""
        import acl_rt
        from acl_rt._lib import backend
        L = backend().lib
        s = acl_rt.Device(0).create_stream()
        cores = acl_rt.Device(0).properties.cube_core_num
        assert L.aclsimLaunchDelay(s._handle("t"), 3_000_000, 2, cores) == 0   # 3 s on every cube core
        print("ready")
        """, env)
    try:
        time.sleep(0.6)
        code = """
            import json, acl_rt
            d = acl_rt.monitor.device_status(0)
            procs = acl_rt.monitor.processes(0)
            print(json.dumps([d.cube_percent, d.aicore_percent, [p.as_dict() for p in procs]]))
            """
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ, **env), cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        cube, aicore, procs = json.loads(r.stdout)
        assert cube >= 30 and aicore >= 30, (cube, aicore)
        mine = [p for p in procs if p["pid"] == child.pid]
        assert mine and mine[0]["utilization_percent"] >= 30 and mine[0]["busy_ns"] > 0
    finally:
        child.stop()


def test_exporter_serves_parseable_metrics_with_the_values(acl):
    from prometheus_client.parser import text_string_to_metric_families
    buf = acl.alloc(7 * MiB)
    monitor.publish_pool_stats()
    server, _ = smi.serve(0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        text = urllib.request.urlopen(url, timeout=30).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    pid = str(os.getpid())

    def value(name, **labels):
        for s in fams[name].samples:
            if all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        raise AssertionError(f"{name} {labels} not in {[s for s in fams[name].samples]}")
    assert value("machine_npu_nums") == 1
    assert value("npu_chip_info_hbm_total_memory", id="0", model_name="910B1") == 65536
    assert value("npu_chip_info_health_status", id="0") == 1
    assert value("canna_device_up", id="0") == 1
    assert 0 <= value("npu_chip_info_utilization", id="0") <= 100
    assert value("canna_pool_allocated_bytes", id="0", pid=pid) == acl.memory_allocated()
    assert value("canna_pool_reserved_bytes", id="0", pid=pid) == acl.memory_reserved()
    assert value("canna_process_memory_bytes", id="0", pid=pid) >= acl.memory_reserved()
    assert value("canna_pool_ooms", pid=pid) == acl.memory_stats()["num_ooms"]
    assert "npu_chip_info_temperature" not in fams or not fams["npu_chip_info_temperature"].samples   # NA: absent
    buf.close()


def test_serve_cli_and_bad_ports():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        busy = s.getsockname()[1]
        s.listen()
        r = smi_run("serve", "--port", str(busy), check=False)
        assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{busy}" in r.stderr
    for bad in ("70000", "-1", "http"):
        r = smi_run("serve", "--port", bad, check=False)
        assert r.returncode == 2 and "port must be" in r.stderr
    r = smi_run("serve", check=False)
    assert r.returncode == 2 and "--port" in r.stderr
    with pytest.raises(acl_rt.InvalidArgumentError, match="port"):
        smi.serve(123456)
    # a running exporter, in another process
    # (-X faulthandler: if it does not stop on SIGINT, SIGABRT makes it print every thread's stack)
    # (SIGINT to Python's handler first: a suite started as a background job, e.g. by a CI script
    # under `nohup ... &`, hands its children SIGINT ignored, and Python then keeps ignoring it)
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from acl_rt import smi; sys.exit(smi.main(['serve', '--port', '0']))")
    p = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", code],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert "serving Prometheus metrics on http://127.0.0.1:" in line, (line, p.stderr.read() if p.poll() else "")
        url = line.split(" on ", 1)[1].strip()
        text = urllib.request.urlopen(url, timeout=30).read().decode()
        assert "npu_chip_info_hbm_used_memory{" in text
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGABRT)
            _, err = p.communicate(timeout=30)
            pytest.fail(f"canna-smi serve did not stop on SIGINT within 60 s; its threads:\n{err}")
    assert p.returncode == 0, p.stderr.read()


def test_cli_options_and_bad_input():
    r = smi_run("--csv", "-i", "0.05", "-n", "3")
    lines = r.stdout.strip().splitlines()
    assert lines[0].split(",") == ["time", *smi.DEVICE_FIELDS] and len(lines) == 4
    assert lines[1].split(",")[smi.DEVICE_FIELDS.index("power_w") + 1] == "NA"
    r = smi_run("--csv", "--section", "processes")
    assert r.stdout.splitlines()[0].split(",") == ["time", *smi.PROCESS_FIELDS]
    r = smi_run("--json", "-n", "2", "-i", "0.05", "--id", "0")
    docs = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(docs) == 2 and [d["id"] for d in docs[0]["devices"]] == [0]
    for args, pattern in ((["--id", "5"], "device id 5 does not exist"), (["--id", "x"], "integers"),
                          (["-i", "0"], "positive number"), (["-n", "0"], ">= 1"), (["--json", "--csv"], "not allowed"),
                          (["--bogus"], "unrecognized")):
        r = smi_run(*args, check=False)
        assert r.returncode == 2 and pattern in r.stderr, (args, r.stderr)


def test_a_device_that_fails_to_query_is_a_row_with_its_error(py):
    r = py("""
        import json
        from acl_rt import monitor, smi
        real = monitor.device_status
        def flaky(i):
            if i == 1:
                raise monitor.DcmiError(-8005, "dcmi_get_device_hbm_info")
            return real(i)
        monitor.device_status = flaky
        smi.main(["--json"])
        smi.main([])
        """, env={"CANNA_SIM_DEVICES": "3", "COLUMNS": "200"})
    doc = json.loads(r.stdout.splitlines()[0])
    errs = [d["error"] for d in doc["devices"]]
    assert errs[0] is None and errs[2] is None and "DCMI_ERR_CODE_INNER_ERR" in errs[1]
    assert "Error" in r.stdout and "No running processes found in NPU 2" in r.stdout


def test_monitor_api_and_unknown_devices(acl):
    assert monitor.device_count() == 1
    d = monitor.device_status(0)
    assert d.name == "910B1" and d.hbm_total_bytes == 64 << 30 and d.aicpu_percent == 0
    for fn in (monitor.device_status, monitor.processes, monitor.pool_stats, lambda i: monitor.devices([i])):
        with pytest.raises(acl.InvalidArgumentError, match="out of range"):
            fn(3)
        with pytest.raises(TypeError):
            fn("0")
    assert monitor.source().endswith("(the simulator's DCMI)")
    assert_usable()


def test_monitoring_needs_no_acl_init(py):
    r = py("""
        from acl_rt import monitor, _runtime
        ds = monitor.devices()
        ps = monitor.processes()
        assert not _runtime.is_initialized()
        print(ds[0].name, ds[0].hbm_total_bytes)
        """, env={"CANNA_SIM_SOC": "Ascend310P3", "CANNA_SIM_DEVICES": "2"})
    assert r.stdout.split() == ["310P3", "None"]        # a DDR SoC: no HBM, Memory-Usage instead


def test_machines_are_separate_by_configuration():
    env = {"CANNA_SIM_HBM_SIZE": "512M"}
    child = Child("""
        import acl_rt
        b = acl_rt.DeviceMemoryResource(0).allocate(100 << 20)
        print("ready")
        """, env)
    try:
        same = json.loads(smi_run("--json", env=env).stdout)
        other = json.loads(smi_run("--json", env={"CANNA_SIM_HBM_SIZE": "1G"}).stdout)
        assert any(p["pid"] == child.pid for p in same["processes"])
        assert not any(p["pid"] == child.pid for p in other["processes"])
    finally:
        child.stop()


def test_sharing_can_be_turned_off():
    env = {"CANNA_SIM_HBM_SIZE": "384M", "CANNA_SIM_SHARED": "0"}
    child = Child("""
        import acl_rt
        b = acl_rt.DeviceMemoryResource(0).allocate(300 << 20)
        print("ready")
        """, env)
    try:
        code = """
            import acl_rt
            free, total = acl_rt.Device(0).mem_info()
            assert free == total and not [p for p in acl_rt.monitor.processes(0) if p.pid != __import__("os").getpid()]
            acl_rt.DeviceMemoryResource(0).allocate(300 << 20)    # its own capacity
            print("ok")
            """
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ, **env), cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    finally:
        child.stop()


def test_pools_of_another_simulated_machine_are_not_listed():
    """Pool records carry their simulated machine: canna-smi on machine B does not list the pools
    of processes on machine A (their devices are not its devices), as it does not list their
    processes."""
    child = Child("""
        import acl_rt
        buf = acl_rt.alloc(1 << 20)
        assert acl_rt.monitor.publish_pool_stats()
        print("ready")
        """)
    try:
        same = json.loads(smi_run("--json").stdout)
        other = json.loads(smi_run("--json", env={"CANNA_SIM_MACHINE": "B"}).stdout)
        assert any(p["pid"] == child.pid for p in same["pools"])
        assert any(p["pid"] == child.pid for p in same["processes"])
        assert not any(p["pid"] == child.pid for p in other["processes"])
        assert not any(p["pid"] == child.pid for p in other["pools"]), other["pools"]
        assert str(child.pid) not in smi_run(env={"CANNA_SIM_MACHINE": "B"}).stdout
    finally:
        child.stop()


def _malformed_records(pid: int, machine) -> dict:
    """File name -> content of pool-statistics records that are damaged in every way a reader has
    to survive (``pid`` is a live process, so none is skipped as stale; ``machine`` the reader's
    machine, so none is skipped as another machine's)."""
    good_dev = {k: 1 for k in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                               "inactive_split_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
                               "allocations", "segments", "num_ooms", "num_alloc_retries")}
    good_dev.update(id=0, limit_bytes=None)
    rec = {"pid": pid, "starttime": None, "name": "bad", "updated": 1.0, "machine": machine}
    return {
        "900001.json": "{not json",
        "900002.json": "[1, 2, 3]",
        "900003.json": "[" * 100000 + "]" * 100000,                           # nested past the recursion limit
        "900004.json": json.dumps({"pid": "abc"}),
        "900005.json": '{"pid": 1e400}',                                       # inf
        "900006.json": json.dumps({**rec, "pid": str(pid), "devices": [good_dev]}),
        "900007.json": json.dumps({**rec, "devices": 5}),
        "900008.json": json.dumps({**rec, "devices": [7, None]}),
        "900009.json": json.dumps({**rec, "devices": [{**good_dev, "limit_bytes": "lots"}]}),
        "900010.json": json.dumps({**rec, "devices": [{**good_dev, "allocated_bytes": -5}]}),
        "900011.json": json.dumps({**rec, "name": 12, "devices": [good_dev]}),
        "900012.json": json.dumps({**rec, "updated": "never", "devices": [good_dev]}),
        "900013.json": json.dumps({**rec, "devices": [{**good_dev, "id": True}]}),
        "900014.json": b"\xff\xfe garbage",
    }


def test_malformed_pool_records_are_skipped_with_a_warning(tmp_path):
    """One damaged record must not take canna-smi down (table, --json, --csv, the exporter's
    collector): it is skipped with a warning naming the file, and the good records still show."""
    env = {"CANNA_STATS_DIR": str(tmp_path)}
    child = Child("""
        import acl_rt
        buf = acl_rt.alloc(1 << 20)
        assert acl_rt.monitor.publish_pool_stats()
        print("ready")
        """, env)
    try:
        machine = json.loads((tmp_path / f"{child.pid}.json").read_text()).get("machine")
        bad = _malformed_records(os.getpid(), machine)
        for name, content in bad.items():
            (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        os.mkfifo(tmp_path / "900015.json")          # opening it for reading would block
        (tmp_path / "900016.json").mkdir()
        bad.update({"900015.json": None, "900016.json": None})
        for args in (("--json",), (), ("--csv", "--section", "pools")):
            r = smi_run(*args, env=env, check=False)
            assert r.returncode == 0, (args, r.stdout, r.stderr)
            assert str(child.pid) in r.stdout, (args, r.stdout)
            for name in bad:
                assert name in r.stderr, (args, name, r.stderr)
            assert "Traceback" not in r.stderr
        pools = json.loads(smi_run("--json", env=env, check=False).stdout)["pools"]
        assert [p["pid"] for p in pools] == [child.pid]
        # the library API skips them too, with a RuntimeWarning
        code = """
            import warnings
            from acl_rt import monitor
            from prometheus_client import generate_latest, CollectorRegistry
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                print([p.pid for p in monitor.pool_stats()])
                reg = CollectorRegistry(); reg.register(__import__("acl_rt.smi").smi.make_collector())
                generate_latest(reg)
            print(sum(issubclass(x.category, RuntimeWarning) for x in w) >= 16)
            """
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ, **env), cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[:2] == [f"[{child.pid}]", "True"], r.stdout
    finally:
        child.stop()


def test_exit_status_is_nonzero_when_the_devices_asked_for_failed(py):
    """`canna-smi --id 2 --json` still prints the failed device's row (with its error), and exits 1:
    a script must not take a failed query for a good one. Devices that answer keep status 0."""
    r = py("""
        from acl_rt import monitor, smi
        real = monitor.device_status
        def flaky(i):
            if i == 2:
                raise monitor.DcmiError(-8005, "dcmi_get_device_hbm_info")
            return real(i)
        monitor.device_status = flaky
        codes = [smi.main(["--id", "2", "--json"]), smi.main(["--id", "2"]), smi.main(["--id", "2", "--csv"]),
                 smi.main(["--json"]), smi.main(["--id", "0,1", "--json"]),
                 smi.main(["--id", "0,2", "-n", "2", "-i", "0.01", "--json"])]
        print("codes", *codes)
        """, env={"CANNA_SIM_DEVICES": "3"})
    lines = r.stdout.splitlines()
    assert lines[-1] == "codes 1 1 1 1 0 1", r.stdout
    doc = json.loads(lines[0])
    assert [d["id"] for d in doc["devices"]] == [2] and "DCMI_ERR_CODE_INNER_ERR" in doc["devices"][0]["error"]
    assert "device 2" in r.stderr and "DCMI_ERR_CODE_INNER_ERR" in r.stderr


def test_tables_fit_100_columns():
    """The tables fit a 100-column terminal at their natural width (rendered on a console far
    wider, so nothing is squeezed), with the widest values a field can hold; and a pipe gets them
    at that width."""
    import io
    from rich.console import Console
    big = 65536 << 20
    pool = {f: big for f in smi.POOL_FIELDS}
    pool.update(device_id=15, pid=4194304, name="a-process-name!", allocations=10 ** 6, segments=10 ** 5,
                num_ooms=999, num_alloc_retries=999, updated=0.0)
    dev = {f: None for f in smi.DEVICE_FIELDS}
    dev.update(id=15, name="Ascend910B1", health="Critical", power_w=999.9, temperature_c=125, aicore_percent=100,
               memory_used_bytes=big, memory_total_bytes=big, hbm_used_bytes=big, hbm_total_bytes=big)
    proc = {"device_id": 15, "pid": 4194304, "name": "a-process-name!", "memory_bytes": big,
            "utilization_percent": 100, "busy_ns": 0}
    sample = {"time": 0.0, "backend": "sim", "devices": [dev], "processes": [proc], "pools": [pool]}
    buf = io.StringIO()
    smi.render_table(sample, console=Console(file=buf, width=400, color_system=None))
    lines = buf.getvalue().splitlines()
    assert "4194304" in buf.getvalue() and "65536.0" in buf.getvalue()
    assert max(len(ln.rstrip()) for ln in lines) <= smi.TABLE_WIDTH, "\n" + buf.getvalue()
    r = smi_run(env={"COLUMNS": "400"})
    assert max(len(ln) for ln in r.stdout.splitlines()) <= smi.TABLE_WIDTH, r.stdout
