"""Helpers of the Ascend C kernel tests (tests/test_ascendc*.py): the source line of a tagged
statement (the line a KernelError names), a synchronize of the current stream, and a kernel
module compiled on device 0."""
from __future__ import annotations

import acl_rt
import kernels


def source_line(src: str, tag: str) -> int:
    """The 1-based line of ``src`` holding the comment ``// L:<tag>``."""
    for i, text in enumerate(src.split("\n"), 1):
        if f"// L:{tag}" in text:
            return i
    raise AssertionError(f"no line tagged // L:{tag}")


def sync():
    acl_rt.current_stream().synchronize()


def compile_module(src: str):
    """``src`` compiled (a kernels.RawModule) with device 0 current."""
    acl_rt.init()
    acl_rt.Device(0).set_current()
    return kernels.RawModule(src).compile()
