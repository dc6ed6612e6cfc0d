"""Collectives on arrays and framework tensors, and the ``"canna"`` backend of torch.distributed.

``acl_rt.Communicator`` works on raw device memory; this module takes anything DLPack can import
(canna DeviceArrays, PyTorch / NumPy / JAX / TensorFlow arrays; zero-copy in the simulator's
unified memory model) and passes its address, element count and dtype to HCCL. The operands are
kept alive until the collective completes (the calls return before it runs), so temporaries are safe.

torch.distributed::

    import canna_dl.distributed            # registers the "canna" backend
    torch.distributed.init_process_group("canna")   # under torchrun: RANK, WORLD_SIZE, MASTER_*

Each rank uses device ``LOCAL_RANK % acl_rt.device_count()``; the root info is exchanged through
the process group's store (``HcclGetRootInfo`` on rank 0, ``HcclCommInitRootInfo`` on every rank).
The backend runs allreduce (sum, product, max, min, avg), broadcast, allgather (and into a tensor),
reduce_scatter (and of a tensor), reduce, all_to_all_single (equal splits), send/recv and barrier
on CPU tensors, enough for ``DistributedDataParallel``: contiguous ones in place, others through a
contiguous copy. In the unified memory model (the simulator's default) a CPU tensor's memory is
the HCCL operand itself; in the discrete model (``CANNA_SIM_MEMORY=discrete``, like a PCIe card)
host memory is not an HCCL operand, so each tensor is staged through a device copy and the result
copied back (counted by ``canna_dl.copy_stats()`` as ``to_device`` / ``to_host``). On a CANN
install the same script runs with this backend or torch_npu's ``"hccl"``.

The array-level functions below return before the collective runs, so they take device memory
only: in the discrete model a host array raises :class:`canna_dl.CopyRequiredError` (import it
with ``canna_dl.from_dlpack`` and copy the result back after the event).
"""
from __future__ import annotations

import os

import acl_rt

from ._interop import CopyRequiredError, from_dlpack

__all__ = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "register_torch_backend",
           "torch_communicator"]


import threading

_pending_lock = threading.Lock()
_pending: list = []   # (event, operands) of collectives not yet seen complete


def _keep(ev, *operands):
    """Keep the operands (and the framework tensors their DLPack import holds) alive until the
    collective's event completes: the call returns before the collective runs."""
    with _pending_lock:
        _pending[:] = [(e, ops) for e, ops in _pending if not _done(e)]
        _pending.append((ev, operands))
    return ev


def _done(ev) -> bool:
    try:
        return ev.query()
    except Exception:  # a failed or stale event: its operation is over
        return True


def _view(x):
    """(DeviceArray, number of elements, dtype name) of anything DLPack imports (no copy).

    Raises CopyRequiredError for host memory in the discrete memory model: a device copy would
    receive the result and ``x`` would silently keep its old values."""
    try:
        a = from_dlpack(x, copy=False)
    except CopyRequiredError:
        raise CopyRequiredError(
            f"canna_dl.distributed: a {type(x).__name__} in host memory is not an HCCL operand in the discrete "
            "memory model; pass device memory (a = canna_dl.from_dlpack(x)) and copy the result back once the "
            "collective's event completed") from None
    return a, a.size, str(a.dtype)


def all_reduce(comm: acl_rt.Communicator, x, op: str = "sum", *, out=None, stream=None) -> acl_rt.Event:
    """All-reduce ``x`` (in place, or into ``out`` of the same size and dtype) over the ranks of
    ``comm``; ``x`` is a DeviceArray or any DLPack-exporting array/tensor. Returns the Event."""
    a, n, dt = _view(x)
    o = a if out is None else _view(out)[0]
    return _keep(comm.all_reduce(a.ptr, o.ptr, n, dt, op, stream=stream), a, o)


def broadcast(comm: acl_rt.Communicator, x, *, root: int = 0, stream=None) -> acl_rt.Event:
    """Broadcast ``root``'s ``x`` into every rank's ``x`` (in place). Returns the Event."""
    a, n, dt = _view(x)
    return _keep(comm.broadcast(a.ptr, n, dt, root=root, stream=stream), a)


def all_gather(comm: acl_rt.Communicator, x, out, *, stream=None) -> acl_rt.Event:
    """Gather every rank's ``x`` into ``out`` (``comm.size`` times as many elements, rank order)."""
    a, n, dt = _view(x)
    o = _view(out)[0]
    return _keep(comm.all_gather(a.ptr, o.ptr, n, dt, stream=stream), a, o)


def reduce_scatter(comm: acl_rt.Communicator, x, out, op: str = "sum", *, stream=None) -> acl_rt.Event:
    """Reduce ``x`` (``comm.size`` blocks) over the ranks; rank r gets block r in ``out``."""
    a, _, dt = _view(x)
    o, n, _ = _view(out)
    return _keep(comm.reduce_scatter(a.ptr, o.ptr, n, dt, op, stream=stream), a, o)


# ------------------------------------------------------------------------------------------------
# torch.distributed


def _torch_backend_class():
    import torch
    import torch.distributed as dist

    _OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MAX: "max",
            dist.ReduceOp.MIN: "min", dist.ReduceOp.AVG: "sum"}

    class _Work(dist._Work):
        """A finished operation (the collective ran before the call returned)."""

        def __init__(self, result):
            super().__init__()
            self._result = result
            self._fut = torch.futures.Future()
            self._fut.set_result(result)

        def is_completed(self):
            return True

        def is_success(self):
            return True

        def wait(self, timeout=None):
            return True

        def result(self):
            return self._result

        def get_future(self):
            return self._fut

    def _op_name(opts):
        op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
        op = getattr(op, "op", op)
        if op not in _OPS:
            raise ValueError(f"canna backend: reduce op {op} is not supported (SUM, PRODUCT, MAX, MIN, AVG)")
        return _OPS[op], op == dist.ReduceOp.AVG

    def _contig(t):
        if t.device.type != "cpu":
            raise ValueError(f"canna backend: tensors must be on the CPU (simulator), got {t.device}")
        return t if t.is_contiguous() else t.contiguous()

    class _Operand:
        """A tensor as an HCCL operand: ``c`` its contiguous form, ``ptr`` the device memory HCCL
        works on -- ``c``'s own in the unified memory model; in the discrete model a device copy
        of ``c`` (host memory is not an operand there), which :meth:`done` copies back. ``done``
        also copies ``c`` into the caller's tensor when ``c`` is a contiguous copy of it."""

        __slots__ = ("t", "c", "a", "staged")

        def __init__(self, t):
            self.t, self.c, self.a, self.staged = t, _contig(t), None, False
            if self.c.numel():
                try:
                    self.a = from_dlpack(self.c.detach(), copy=False)
                except CopyRequiredError:
                    self.a, self.staged = from_dlpack(self.c.detach()), True

        @property
        def ptr(self):
            return self.a.ptr if self.a is not None else 0

        def numel(self):
            return self.c.numel()

        def done(self):
            """Bring the result back to the caller's tensor (after the collective completed)."""
            if self.staged:
                from ._frameworks._torch import to_torch
                self.c.copy_(to_torch(self.a))
            if self.c is not self.t:
                self.t.copy_(self.c)
            return self.t

    class ProcessGroupCanna(dist.ProcessGroup):
        """torch.distributed backend over canna's HCCL (see the module docstring)."""

        def __init__(self, store, rank, size, timeout):
            super().__init__(rank, size)
            ndev = acl_rt.device_count()
            local = int(os.environ.get("LOCAL_RANK", rank))
            self._device = acl_rt.Device(local % ndev)
            self._device.set_current()
            info = acl_rt.root_info_from_store(store, rank, key="canna_hccl_root_info")
            self._comm = acl_rt.Communicator.init(info, size, rank, device=self._device)
            self._stream = self._device.create_stream()
            global _last_communicator
            _last_communicator = self._comm

        def getBackendName(self):
            return "canna"

        @property
        def communicator(self) -> acl_rt.Communicator:
            return self._comm

        def _run(self, fn):
            with self._device:
                fn().synchronize()

        def _dt(self, t):
            return str(t.dtype).replace("torch.", "")

        def allreduce(self, tensors, opts=None):
            op, avg = _op_name(opts)
            for t in tensors:
                c = _Operand(t)
                if c.numel():
                    self._run(lambda: self._comm.all_reduce(c.ptr, c.ptr, c.numel(), self._dt(t), op,
                                                            stream=self._stream))
                c.done()
                if avg and t.numel():
                    t.div_(self.size())
            return _Work(tensors)

        def allreduce_coalesced(self, tensors, opts=None):
            return self.allreduce(tensors, opts)

        def broadcast(self, tensors, opts=None):
            root = getattr(opts, "rootRank", 0)
            for t in tensors:
                c = _Operand(t)
                if c.numel():
                    self._run(lambda: self._comm.broadcast(c.ptr, c.numel(), self._dt(t), root=root,
                                                           stream=self._stream))
                c.done()
            return _Work(tensors)

        def reduce(self, tensors, opts=None):
            op, avg = _op_name(opts)
            root = getattr(opts, "rootRank", 0)
            for t in tensors:
                c = _Operand(t)
                if c.numel():
                    self._run(lambda: self._comm.reduce(c.ptr, c.ptr, c.numel(), self._dt(t), op, root=root,
                                                        stream=self._stream))
                c.done()
                if avg and t.numel() and self.rank() == root:
                    t.div_(self.size())
            return _Work(tensors)

        def allgather(self, output_tensors, input_tensors, opts=None):
            for outs, t in zip(output_tensors, input_tensors):
                c = _Operand(t)
                flat = _Operand(torch.empty((self.size() * c.numel(),), dtype=t.dtype))
                if c.numel():
                    self._run(lambda: self._comm.all_gather(c.ptr, flat.ptr, c.numel(), self._dt(t),
                                                            stream=self._stream))
                flat = flat.done()
                for r, o in enumerate(outs):
                    o.copy_(flat[r * c.numel():(r + 1) * c.numel()].view_as(o))
            return _Work(output_tensors)

        def _allgather_base(self, output, input, opts=None):
            c, o = _Operand(input), _Operand(output)
            if c.numel():
                self._run(lambda: self._comm.all_gather(c.ptr, o.ptr, c.numel(), self._dt(input), stream=self._stream))
            o.done()
            return _Work([output])

        def reduce_scatter(self, output_tensors, input_tensors, opts=None):
            op, avg = _op_name(opts)
            for out, ins in zip(output_tensors, input_tensors):
                flat = _Operand(torch.cat([i.reshape(-1) for i in ins]))
                o = _Operand(out)
                if o.numel():
                    self._run(lambda: self._comm.reduce_scatter(flat.ptr, o.ptr, o.numel(), self._dt(out), op,
                                                                stream=self._stream))
                o.done()
                if avg and out.numel():
                    out.div_(self.size())
            return _Work(output_tensors)

        def _reduce_scatter_base(self, output, input, opts=None):
            op, avg = _op_name(opts)
            c, o = _Operand(input), _Operand(output)
            if o.numel():
                self._run(lambda: self._comm.reduce_scatter(c.ptr, o.ptr, o.numel(), self._dt(output), op,
                                                            stream=self._stream))
            o.done()
            if avg and output.numel():
                output.div_(self.size())
            return _Work([output])

        def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
            if output_split_sizes or input_split_sizes:
                raise NotImplementedError("canna backend: all_to_all_single with split sizes is not supported")
            c, o = _Operand(input), _Operand(output)
            n = c.numel() // self.size()
            if n:
                self._run(lambda: self._comm.all_to_all(c.ptr, o.ptr, n, self._dt(input), stream=self._stream))
            o.done()
            return _Work([output])

        # the names torch.distributed calls in recent releases (the older ones stay for older torch)
        all_gather_single = _allgather_base
        reduce_scatter_single = _reduce_scatter_base
        all_to_all_single = alltoall_base

        def send(self, tensors, dst, tag=0):
            for t in tensors:
                c = _Operand(t)
                self._run(lambda: self._comm.send(c.ptr, c.numel(), self._dt(t), dst, stream=self._stream))
            return _Work(tensors)

        def recv(self, tensors, src, tag=0):
            for t in tensors:
                c = _Operand(t)
                self._run(lambda: self._comm.recv(c.ptr, c.numel(), self._dt(t), src, stream=self._stream))
                c.done()
            return _Work(tensors)

        def barrier(self, opts=None):
            self._run(lambda: self._comm.barrier(stream=self._stream))
            return _Work([])

    return ProcessGroupCanna


_registered = False
_last_communicator = None


def torch_communicator() -> "acl_rt.Communicator | None":
    """The communicator of the most recently created "canna" process group of this process
    (e.g. for its ``stats()``), None before one is created."""
    return _last_communicator


def register_torch_backend(name: str = "canna") -> None:
    """Register the backend with ``torch.distributed.Backend.register_backend`` (idempotent;
    importing this module does it when torch is installed)."""
    global _registered
    if _registered:
        return
    import torch.distributed as dist

    cls = _torch_backend_class()

    def create(store, rank, size, timeout):
        return cls(store, rank, size, timeout)

    dist.Backend.register_backend(name, create, devices=["cpu"])
    _registered = True


try:
    import torch.distributed  # noqa: F401
except ImportError:  # torch is optional
    pass
else:
    if torch.distributed.is_available():
        register_torch_backend()
