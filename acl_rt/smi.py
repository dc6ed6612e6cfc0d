"""``canna-smi``: an npu-smi-like view of the NPUs, the processes using them and canna's memory
pools, as a table, JSON or CSV, once or every few seconds; and a Prometheus exporter.

    canna-smi                      # table: devices, canna pools, processes
    canna-smi --json               # one JSON document per sample (stable field names, bytes)
    canna-smi --csv [--section devices|processes|pools|collectives]
    canna-smi -i 2 -n 5 --id 0     # every 2 s, 5 samples, device 0 only
    canna-smi serve --port 9101 [--host 127.0.0.1]    # Prometheus metrics on /metrics

It reads the devices like npu-smi (DCMI, without initializing AscendCL; see
:mod:`acl_rt.monitor`), so it sees every process. Values a backend does not provide are ``NA``
(``null`` in JSON). A device that fails to query is a row with its error (and a line on stderr);
a malformed pool-statistics record is skipped with a warning on stderr.

Exit status: 0; 1 on a runtime failure or when a device shown could not be queried (in any
sample); 2 on a usage error (bad option, unknown device id, a port that cannot be used).
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import sys
import time
import warnings

from . import monitor

__all__ = ["main", "collect", "render_table", "make_collector", "serve"]

DEVICE_FIELDS = ("id", "name", "health", "power_w", "temperature_c", "aicore_percent", "cube_percent",
                 "vector_percent", "aicpu_percent", "memory_used_bytes", "memory_total_bytes", "hbm_used_bytes",
                 "hbm_total_bytes", "error")
PROCESS_FIELDS = ("device_id", "pid", "name", "memory_bytes", "utilization_percent", "busy_ns")
POOL_FIELDS = ("device_id", "pid", "name", "allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
               "inactive_split_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "allocations", "segments",
               "num_ooms", "num_alloc_retries", "limit_bytes", "updated")
COLLECTIVE_FIELDS = ("device_id", "pid", "name", "rank", "size", "ops", "bytes_moved", "wait_ns", "updated")
_CSV_FIELDS = {"devices": DEVICE_FIELDS, "processes": PROCESS_FIELDS, "pools": POOL_FIELDS,
               "collectives": COLLECTIVE_FIELDS}


TABLE_WIDTH = 100     # the widest line of the tables, as npu-smi's and nvidia-smi's fit 80-100 columns


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


def collect(ids=None) -> dict:
    """One sample: :func:`acl_rt.monitor.snapshot` (devices, processes, pools)."""
    return monitor.snapshot(ids)


def _na(v, fmt=str):
    return "NA" if v is None else fmt(v)


def _mb(v):
    return v // (1 << 20)


def _usage(used, total):
    if used is None or total is None:
        return "NA"
    return f"{_mb(used)} / {_mb(total)}"


def render_table(sample: dict, console=None) -> None:
    """Print a sample as npu-smi-like tables with rich."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    if console is None:
        # the tables fit 100 columns (TABLE_WIDTH); a pipe or file gets that width (rich would wrap
        # at 80), a terminal its own
        console = Console() if sys.stdout.isatty() else Console(width=TABLE_WIDTH)
    when = _dt.datetime.fromtimestamp(sample["time"]).strftime("%a %b %d %H:%M:%S %Y")
    from . import __version__
    title = f"canna-smi {__version__}   backend: {sample['backend']}   {when}"
    t = Table(title=title, box=box.SQUARE, title_justify="left")
    for col in ("NPU", "Name", "Health", "Power(W)", "Temp(C)", "AICore(%)", "Memory-Usage(MB)", "HBM-Usage(MB)"):
        t.add_column(col, justify="left" if col in ("Name", "Health") else "right")
    for d in sample["devices"]:
        if d.get("error"):
            t.add_row(str(d["id"]), _na(d.get("name")), "[red]Error[/red]", "", "", "", f"[red]{d['error']}[/red]", "")
            continue
        t.add_row(str(d["id"]), _na(d["name"]), _na(d["health"]), _na(d["power_w"], lambda v: f"{v:.1f}"),
                  _na(d["temperature_c"]), _na(d["aicore_percent"]),
                  _usage(d["memory_used_bytes"], d["memory_total_bytes"]),
                  _usage(d["hbm_used_bytes"], d["hbm_total_bytes"]))
    console.print(t)

    # at most 100 columns, like npu-smi: two-line headers, and the counters without a column here
    # (allocs, segments, active, requested) are in --json / --csv
    p = Table(title="canna memory pools (processes that publish pool statistics; MB)", box=box.SQUARE,
              title_justify="left")
    for col in ("NPU", "PID", "Process\nname", "Allocated", "Reserved", "Peak\nallocated", "Non-\nreleasable",
                "OOMs", "Limit"):
        p.add_column(col, justify="left" if col == "Process\nname" else "right",
                     vertical="bottom", max_width=15 if col == "Process\nname" else None, overflow="ellipsis")
    for r in sample["pools"]:
        p.add_row(str(r["device_id"]), str(r["pid"]), _na(r["name"]), f"{r['allocated_bytes'] / (1 << 20):.1f}",
                  f"{r['reserved_bytes'] / (1 << 20):.1f}", f"{r['peak_allocated_bytes'] / (1 << 20):.1f}",
                  f"{r['inactive_split_bytes'] / (1 << 20):.1f}", str(r["num_ooms"]),
                  _na(r["limit_bytes"], lambda v: str(_mb(v))))
    if sample["pools"]:
        console.print(p)
    else:
        console.print("No canna process publishes pool statistics.")

    q = Table(title="Processes", box=box.SQUARE, title_justify="left")
    for col in ("NPU", "Process id", "Process name", "Process memory(MB)", "AICore(%)"):
        q.add_column(col, justify="left" if col == "Process name" else "right")
    by_dev = {}
    for r in sample["processes"]:
        if "error" in r:
            console.print(f"[red]process list unavailable: {r['error']}[/red]")
            continue
        by_dev.setdefault(r["device_id"], []).append(r)
    for d in sample["devices"]:
        rows = by_dev.get(d["id"], [])
        if not rows:
            q.add_row(str(d["id"]), "", f"No running processes found in NPU {d['id']}", "", "")
        for r in rows:
            q.add_row(str(r["device_id"]), str(r["pid"]), _na(r["name"]), f"{r['memory_bytes'] / (1 << 20):.1f}",
                      _na(r["utilization_percent"]))
    console.print(q)

    # the HCCL ranks of processes that publish their statistics (simulator: acl_rt.hccl_stats)
    cols = sample.get("collectives") or []
    if cols:
        h = Table(title="HCCL communicators (one row per rank)", box=box.SQUARE, title_justify="left")
        for col in ("NPU", "Process id", "Process name", "Rank", "Ops", "Moved(MB)", "Waited(s)"):
            h.add_column(col, justify="left" if col == "Process name" else "right",
                         max_width=15 if col == "Process name" else None, overflow="ellipsis")
        for c in cols:
            h.add_row(str(c["device_id"]), str(c["pid"]), _na(c["name"]), f"{c['rank']} / {c['size']}", str(c["ops"]),
                      f"{c['bytes_moved'] / (1 << 20):.1f}", f"{c['wait_ns'] / 1e9:.3f}")
        console.print(h)


def _csv_rows(sample: dict, section: str):
    fields = _CSV_FIELDS[section]
    for r in sample[section]:
        if "error" in r and section == "processes":
            continue
        yield [sample["time"]] + ["NA" if r.get(f) is None else r.get(f) for f in fields]


def _parse_ids(text: str) -> list[int]:
    ids = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            i = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"device ids are integers separated by commas, got {text!r}") from None
        if i not in ids:        # "0,0" shows device 0 once
            ids.append(i)
    if not ids:
        raise argparse.ArgumentTypeError("no device id given")
    return ids


def _port(text: str) -> int:
    try:
        p = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be an integer 0..65535, got {text!r}") from None
    if not 0 <= p <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535 (0 = any free port), got {p}")
    return p


def _interval(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"interval must be a number of seconds, got {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"interval must be a positive number of seconds, got {text!r}")
    return v


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"count must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"count must be >= 1, got {v}")
    return v


# ------------------------------------------------------------------------------------------------
# Prometheus


def make_collector(ids=None):
    """A prometheus-client collector that queries the devices at every scrape.

    Metric names follow Ascend's npu-exporter (``npu_chip_info_*``, sizes in MB as there) with
    labels ``id`` and ``model_name``; canna adds byte-valued metrics after Prometheus' unit
    conventions: ``canna_device_memory_{used,total}_bytes``, ``canna_process_memory_bytes``
    (labels + ``pid``, ``process_name``) and the pool metrics ``canna_pool_*_bytes`` (labels +
    ``pid``, ``process_name``), ``canna_pool_ooms_total``, ``canna_pool_alloc_retries_total``,
    and per HCCL rank (labels + ``rank``) ``canna_hccl_{ops,bytes_moved,wait_seconds}_total``.
    A metric the backend does not support is absent for that device; ``canna_device_up`` is 0
    for a device that failed to query."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class Collector:
        def collect(self):
            s = collect(ids)
            lab = ["id", "model_name"]
            names = {d["id"]: d.get("name") or "" for d in s["devices"]}

            def fam(name, doc, labels=lab):
                return GaugeMetricFamily(name, doc, labels=labels)
            g = {
                "up": fam("canna_device_up", "1 if the device could be queried, else 0"),
                "health": fam("npu_chip_info_health_status", "health of the chip: 1 healthy, 0 not"),
                "util": fam("npu_chip_info_utilization", "AI core utilization (percent)"),
                "cube": fam("npu_chip_info_aicube_utilization", "AI cube utilization (percent)"),
                "vector": fam("npu_chip_info_vector_utilization", "vector core utilization (percent)"),
                "hbm_used": fam("npu_chip_info_hbm_used_memory", "HBM in use (MB)"),
                "hbm_total": fam("npu_chip_info_hbm_total_memory", "HBM total (MB)"),
                "hbm_util": fam("npu_chip_info_hbm_utilization", "HBM in use (percent)"),
                "mem_used": fam("npu_chip_info_used_memory", "DDR memory in use (MB)"),
                "mem_total": fam("npu_chip_info_total_memory", "DDR memory total (MB)"),
                "temp": fam("npu_chip_info_temperature", "chip temperature (Celsius)"),
                "power": fam("npu_chip_info_power", "chip power (W)"),
                "nproc": fam("npu_chip_info_process_info_num", "number of processes using the chip"),
                "dev_used": fam("canna_device_memory_used_bytes", "device memory in use by all processes (bytes)"),
                "dev_total": fam("canna_device_memory_total_bytes", "device memory total (bytes)"),
            }
            machine = GaugeMetricFamily("machine_npu_nums", "number of NPUs")
            machine.add_metric([], len(s["devices"]))
            yield machine
            for d in s["devices"]:
                lv = [str(d["id"]), names[d["id"]]]
                g["up"].add_metric(lv, 0 if d.get("error") else 1)
                if d.get("error"):
                    continue
                if d["health"] is not None:
                    g["health"].add_metric(lv, 1 if d["health"] == "OK" else 0)
                for key, field in (("util", "aicore_percent"), ("cube", "cube_percent"), ("vector", "vector_percent"),
                                   ("temp", "temperature_c"), ("power", "power_w")):
                    if d[field] is not None:
                        g[key].add_metric(lv, d[field])
                for prefix, used, total in (("hbm", "hbm_used_bytes", "hbm_total_bytes"),
                                            ("mem", "memory_used_bytes", "memory_total_bytes")):
                    if d[used] is not None:
                        g[f"{prefix}_used"].add_metric(lv, _mb(d[used]))
                        g[f"{prefix}_total"].add_metric(lv, _mb(d[total]))
                        if prefix == "hbm" and d[total]:
                            g["hbm_util"].add_metric(lv, round(100 * d[used] / d[total], 2))
                used = d["hbm_used_bytes"] if d["hbm_used_bytes"] is not None else d["memory_used_bytes"]
                total = d["hbm_total_bytes"] if d["hbm_total_bytes"] is not None else d["memory_total_bytes"]
                if used is not None:
                    g["dev_used"].add_metric(lv, used)
                    g["dev_total"].add_metric(lv, total)
                g["nproc"].add_metric(lv, sum(1 for p in s["processes"] if p.get("device_id") == d["id"]))
            yield from g.values()
            plab = lab + ["pid", "process_name"]
            proc = GaugeMetricFamily("canna_process_memory_bytes", "device memory held by a process (bytes)",
                                     labels=plab)
            for p in s["processes"]:
                if "error" in p:
                    continue
                proc.add_metric([str(p["device_id"]), names.get(p["device_id"], ""), str(p["pid"]), p["name"] or ""],
                                p["memory_bytes"])
            yield proc
            pool_g = {k: GaugeMetricFamily(f"canna_pool_{k}_bytes", doc, labels=plab) for k, doc in (
                ("allocated", "bytes held by live buffers of the process's pool"),
                ("reserved", "bytes the pool holds from the device"),
                ("active", "bytes of live buffers and freed ones still used by streams"),
                ("requested", "bytes requested by the live buffers (before rounding)"),
                ("inactive_split", "cached bytes in partly used segments (fragmentation)"),
                ("peak_allocated", "peak of allocated bytes"),
                ("peak_reserved", "peak of reserved bytes"),
                ("limit", "the pool's memory limit"))}
            ooms = CounterMetricFamily("canna_pool_ooms", "out-of-memory errors raised by the pool", labels=plab)
            retries = CounterMetricFamily("canna_pool_alloc_retries", "allocations retried after freeing the cache",
                                          labels=plab)
            for r in s["pools"]:
                lv = [str(r["device_id"]), names.get(r["device_id"], ""), str(r["pid"]), r["name"] or ""]
                for k, fam_ in pool_g.items():
                    v = r.get(f"{k}_bytes")
                    if v is not None:
                        fam_.add_metric(lv, v)
                ooms.add_metric(lv, r["num_ooms"])
                retries.add_metric(lv, r["num_alloc_retries"])
            yield from pool_g.values()
            yield ooms
            yield retries
            clab = plab + ["rank"]
            hccl = {k: CounterMetricFamily(f"canna_hccl_{k}", doc, labels=clab) for k, doc in (
                ("ops", "HCCL operations completed by the rank"),
                ("bytes_moved", "bytes the rank read and wrote in collectives (the shared segment, the peers' buffers)"),
                ("wait_seconds", "seconds the rank waited for its peers"))}
            for c in s.get("collectives", ()):
                lv = [str(c["device_id"]), names.get(c["device_id"], ""), str(c["pid"]), c["name"] or "", str(c["rank"])]
                hccl["ops"].add_metric(lv, c["ops"])
                hccl["bytes_moved"].add_metric(lv, c["bytes_moved"])
                hccl["wait_seconds"].add_metric(lv, c["wait_ns"] / 1e9)
            yield from hccl.values()

    return Collector()


def serve(port: int, host: str = "127.0.0.1", ids=None):
    """Serve Prometheus metrics on ``http://host:port/metrics`` in a background thread. Returns
    the ``(server, thread)`` of prometheus-client (``server.server_port`` is the port, useful with
    port 0; ``server.shutdown()`` stops it).

    Raises:
        InvalidArgumentError: a port outside 0..65535.
        OSError: the address cannot be bound (in use, not permitted, unknown host).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    from ._constants import ErrorCode as E
    from ._errors import InvalidArgumentError
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidArgumentError(E.ACL_ERROR_INVALID_PARAM, "acl_rt.smi.serve",
                                   f"port must be an int in 0..65535, got {port!r}")
    registry = CollectorRegistry()
    registry.register(make_collector(ids))
    return start_http_server(port, addr=host, registry=registry)


# ------------------------------------------------------------------------------------------------
# command line


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="canna-smi", description="NPU devices, processes and canna memory pools "
                                 "(npu-smi-like). 'canna-smi serve --port P' runs a Prometheus exporter.")
    ap.add_argument("--id", type=_parse_ids, metavar="ID[,ID...]", help="only these devices")
    fmt = ap.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON document per sample")
    fmt.add_argument("--csv", action="store_true", help="CSV rows (one per device per sample, see --section)")
    ap.add_argument("--section", choices=tuple(_CSV_FIELDS), default="devices",
                    help="what --csv prints (default: devices)")
    ap.add_argument("-i", "--interval", type=_interval, metavar="SECONDS", help="repeat every SECONDS")
    ap.add_argument("-n", "--count", type=_count, metavar="COUNT", help="stop after COUNT samples (with -i)")
    return ap


def _serve_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="canna-smi serve", description="Prometheus exporter (metrics after Ascend's "
                                 "npu-exporter, plus canna pool metrics in bytes) on http://HOST:PORT/metrics")
    ap.add_argument("--port", type=_port, required=True, help="TCP port (0 = any free port)")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ap.add_argument("--id", type=_parse_ids, metavar="ID[,ID...]", help="only these devices")
    return ap


def _check_ids(ids):
    if ids is None:
        return
    n = monitor.device_count()
    bad = [i for i in ids if not 0 <= i < n]
    if bad:
        raise UsageError(f"device id {bad[0]} does not exist: the machine has {n} device{'s' if n != 1 else ''} "
                         f"(0..{n - 1})")


def _run_serve(argv) -> int:
    args = _serve_parser().parse_args(argv)
    _check_ids(args.id)
    try:
        server, _thread = serve(args.port, args.host, args.id)
    except OSError as e:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    print(f"canna-smi: serving Prometheus metrics on http://{args.host}:{server.server_port}/metrics", flush=True)
    try:
        while True:       # short sleeps: Ctrl-C/SIGINT is acted on within a second whatever thread got it
            time.sleep(1.0)
    except KeyboardInterrupt:
        server.shutdown()
    return 0


def main(argv=None) -> int:
    """The ``canna-smi`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "serve":
            return _run_serve(argv[1:])
        args = _parser().parse_args(argv)
        if args.count is not None and args.interval is None:
            args.interval = 1.0 if args.count > 1 else None
        _check_ids(args.id)
        n = 0
        writer = None
        failed = False
        told = set()

        def tell(msg):      # each warning and failure once, also when watching
            if msg not in told:
                told.add(msg)
                print(f"canna-smi: {msg}", file=sys.stderr, flush=True)
        while True:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sample = collect(args.id)
            for w in caught:
                tell(f"warning: {w.message}")
            for d in sample["devices"]:
                if d.get("error"):
                    failed = True
                    tell(f"device {d['id']} could not be queried: {d['error']}")
            if args.json:
                print(json.dumps(sample), flush=True)
            elif args.csv:
                if writer is None:
                    writer = csv.writer(sys.stdout)
                    fields = _CSV_FIELDS[args.section]
                    writer.writerow(("time",) + fields)
                writer.writerows(_csv_rows(sample, args.section))
                sys.stdout.flush()
            else:
                render_table(sample)
            n += 1
            if args.interval is None or (args.count is not None and n >= args.count):
                return 1 if failed else 0
            time.sleep(args.interval)
    except UsageError as e:
        print(f"canna-smi: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    except Exception as e:
        print(f"canna-smi: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
