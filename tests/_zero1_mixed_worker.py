"""One rank of tests/test_measure.py's two-rank ZeRO-1 mixed-precision check (spawned)."""
from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def main(rank: int, store: str, out: str) -> None:
    from paraplan.measure.parallel import FlatOptimizer, build_mesh
    # a partner that never comes ends this rank in a minute, not gloo's default half hour
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        torch.manual_seed(0)
        model = nn.Linear(16, 16).to(torch.bfloat16)
        opt = FlatOptimizer(model, build_mesh(1, 2, 1), 1, lr=1e-2)
        gen = torch.Generator().manual_seed(100 + rank)         # each rank its own data
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 16, generator=gen).to(torch.bfloat16)).pow(2).sum().backward()
            opt.reduce_gradients()
            opt.step()
        torch.save({"weight": model.weight.detach().float(), "master": opt.shard_param.detach().clone(),
                    "lo": opt.lo, "hi": opt.hi}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
