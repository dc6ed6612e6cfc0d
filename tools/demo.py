"""canna's demo: the runtime end to end (backend, device, streams, events, memory round trip).

Run with ``make demo``. Exits non-zero if any check fails. Until the kernel library and the
framework shims land, this exercises the runtime layer (acl_rt) only.
"""
from __future__ import annotations

import os
import sys
import time

import acl_rt


def main() -> int:
    info = acl_rt.backend_info()
    print(f"backend      : {info['backend']} ({'simulator' if info['simulator'] else 'CANN'}) "
          f"from {info['library']} [{info['found_via']}]")
    print(f"CANN         : {info['cann_version']} (AscendCL {info['acl_version']}), run mode {info['run_mode']}"
          + (f", simulator {info['simulator_version']}, {info['memory_model']} memory" if info["simulator"] else ""))
    for i in range(acl_rt.device_count()):
        dev = acl_rt.Device(i)
        p = dev.properties
        free, total = dev.mem_info()
        print(f"device {i}     : {p.soc_name}, {p.ai_core_num} AI cores, {p.vector_core_num} vector cores, "
              f"{total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)")

    dev = acl_rt.Device(0)
    s1, s2 = dev.create_stream(), dev.create_stream()

    # host -> device -> device -> host round trip of 64 MiB of random bytes, on two streams
    n = 64 << 20
    data = os.urandom(n)
    a = acl_rt.alloc(n, stream=s1)
    b = acl_rt.alloc(n, stream=s2)
    back = bytearray(n)
    t0 = time.perf_counter()
    start = s1.record()
    a.copy_from(data, stream=s1)                 # pageable host source: ordered on s1
    copied = s1.record()
    s2.wait(copied)                              # s2 waits for s1's copy without blocking the host
    b.copy_from(a, stream=s2)                    # device -> device on s2
    end = s2.record()
    b.copy_to(back, stream=s2)                   # device -> pageable host: waits for s2
    wall = (time.perf_counter() - t0) * 1e3
    ok = bytes(back) == data
    print(f"round trip   : {n >> 20} MiB host->device->device->host {'verified' if ok else 'MISMATCH'}; "
          f"device time {end - start:.2f} ms (events), wall {wall:.2f} ms")

    # fresh memory is poisoned, not zeroed (the simulator's NaN pattern)
    fresh = acl_rt.alloc(16)
    poisoned = fresh.tobytes()
    print(f"fresh memory : {poisoned.hex(' ', 2)}")
    fresh.fill(0)
    ok_fill = fresh.tobytes() == bytes(16)

    # asynchrony: a queued host function runs later, in order
    order = []
    s1.launch_host_func(order.append, "host func")
    order.append("host")
    s1.synchronize()
    print(f"stream order : {order}")

    for buf in (a, b, fresh):
        buf.close()
    s1.close()
    s2.close()
    free, total = dev.mem_info()
    print(f"after free   : {free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
    if not (ok and ok_fill):
        print("demo FAILED", file=sys.stderr)
        return 1
    print("demo OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
