"""kernels — canna's kernel library: array-level ops over aclnn and custom kernels.

It depends on ``acl_rt`` and ``canna_dl`` only.

Custom kernels (docs/DESIGN.md §3.3): :class:`RawKernel` / :class:`RawModule` compile, load and launch
user kernels written in the dialect of ``kernels/include/canna_kernel.h`` (see ``kernels._raw``).
"""
# custom kernels
from ._raw import (MAX_BLOCKS, CompileError, KernelNotFoundError, KernelSourceError, RawKernel, RawModule,
                   kernel_cache_info)
from ._signature import KernelParam, KernelSignature

__all__ = [
    # custom kernels
    "RawKernel", "RawModule", "KernelParam", "KernelSignature", "KernelNotFoundError", "KernelSourceError",
    "CompileError", "kernel_cache_info", "MAX_BLOCKS",
]
