#!/usr/bin/env python3
"""Data-parallel training with torch.distributed on canna: DistributedDataParallel over the
"canna" backend (HCCL collectives, simulated devices), the model's ops under canna_dl.torch.offload().

    CANNA_SIM_DEVICES=2 torchrun --nproc_per_node=2 tools/ddp_demo.py --steps 20

Each rank trains on its half of every global batch on its own simulated device; DDP all-reduces the
gradients, so the loss curve is the one of one process on the whole batch
(``python tools/ddp_demo.py --single``) and the parameters stay identical on every rank.
``--out DIR`` writes each rank's losses and final parameters (for tests).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def batch(step: int, size: int):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (size,), generator=g)
    return x, y


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16, help="global batch (split over the ranks)")
    ap.add_argument("--single", action="store_true", help="one process, the whole batch (the reference)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import canna_dl.distributed  # noqa: F401  (registers the "canna" backend)
    import canna_dl.torch

    if args.single:
        rank, world = 0, 1
    else:
        dist.init_process_group("canna")
        rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = CNN()
    net = model if args.single else nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    per = args.batch // world
    losses = []
    with canna_dl.torch.offload():
        for step in range(args.steps):
            x, y = batch(step, args.batch)
            x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            global_loss = loss.detach().clone()
            if not args.single:   # the mean over the ranks = the loss of the whole batch
                dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
            losses.append(float(global_loss))
            if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
                print(f"step {step:3d}  loss {losses[-1]:.4f}  ({world} rank{'s' if world > 1 else ''})")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        tag = "single" if args.single else f"rank{rank}"
        (args.out / f"{tag}.json").write_text(json.dumps(losses))
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, args.out / f"{tag}.pt")
    if not args.single:
        if rank == 0:
            print("rank 0 HCCL stats:", canna_dl.distributed.torch_communicator().stats())
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
