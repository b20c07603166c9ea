"""Numerical check that the hand-written parallelism computes the unsharded model's gradients.

Every rank builds the same unsharded reference GPT (tp = pp = dp = 1) in float64, computes the
loss and gradients of the whole global batch, then builds the parallel model of a layout from
the reference weights (``gpt.shard_reference``), runs the training step's forward/backward
(TP collectives, 1F1B, DP reduction) and compares its gradients with the matching shards of
the reference gradients. float64 makes any real mistake stand out from rounding.
"""
from __future__ import annotations

from paraplan.measure.runtime import choose_device, launch, require_torch

DEFAULT_LAYOUTS = [
    {"name": "tp2", "tp": 2},
    {"name": "tp2-recompute", "tp": 2, "recompute": True},
    {"name": "pp2-1f1b", "pp": 2},
    {"name": "dp2", "dp": 2},
    {"name": "dp2-zero1", "dp": 2, "zero_stage": 1},
]
SMALL_MODEL = {"num_layers": 2, "hidden_size": 32, "num_heads": 4, "vocab_size": 64, "seq_len": 16}


def _check_worker(rank: int, world: int, device, choice, args: dict) -> dict:
    torch = require_torch()
    from paraplan.measure.gpt import GPTConfig, GPTStage, shard_reference
    from paraplan.measure.parallel import FlatOptimizer, Mesh, build_mesh
    from paraplan.measure.train import forward_backward
    cfg = GPTConfig(**args["model"])
    micro, per_replica = 2, 3          # 3 micro-batches exercise 1F1B warm-up, steady state, cool-down
    results = {}
    for layout in args["layouts"]:
        tp, pp, dp = layout.get("tp", 1), layout.get("pp", 1), layout.get("dp", 1)
        gen = torch.Generator().manual_seed(1)
        shape = (dp * per_replica, micro, cfg.seq_len)
        tokens = torch.randint(0, cfg.vocab_size, shape, generator=gen)
        targets = torch.randint(0, cfg.vocab_size, shape, generator=gen)

        torch.manual_seed(0)
        ref = GPTStage(cfg, Mesh(rank, 1, 1, 1, 0, 0, 0)).double()
        ref_loss = sum(ref(tokens[i], targets[i]) for i in range(len(tokens))) / len(tokens)
        ref_loss.backward()
        ref_grads = {k: p.grad for k, p in ref.named_parameters()}

        mesh = build_mesh(tp, dp, pp)
        model = GPTStage(cfg, mesh, recompute=layout.get("recompute", False)).double()
        model.load_state_dict(shard_reference(ref.state_dict(), cfg, mesh))
        opt = FlatOptimizer(model, mesh, layout.get("zero_stage", 0))
        opt.zero_grad()
        mine = slice(mesh.dp_rank * per_replica, (mesh.dp_rank + 1) * per_replica)
        act_like = torch.empty(micro, cfg.seq_len, cfg.hidden_size, dtype=torch.float64)
        loss = forward_backward(model, mesh, tokens[mine], targets[mine], act_like)
        opt.reduce_gradients()
        expected = shard_reference(ref_grads, cfg, mesh)
        if layout.get("zero_stage", 0) == 1:
            # ZeRO-1 keeps only this rank's shard of the reduced gradient.
            flat_expected = torch.cat([expected[k].reshape(-1) for k, _ in model.named_parameters()])
            got = opt.shard_grad[: max(0, min(opt.hi, opt.numel) - opt.lo)]
            grad_err = float((got - flat_expected[opt.lo:opt.lo + got.numel()]).abs().max())
        else:
            grad_err = max(float((p.grad - expected[k]).abs().max()) for k, p in model.named_parameters())
        loss_err = abs(float(loss) - float(ref_loss.detach())) if (loss is not None and dp == 1) else 0.0
        results[layout["name"]] = {"max_grad_abs_error": grad_err, "loss_abs_error": loss_err,
                                   "grad_scale": max(float(g.abs().max()) for g in ref_grads.values())}
    return results


def check_parallel_equivalence(layouts=None, model: dict | None = None, nprocs: int = 2) -> dict:
    """Per layout, the largest gradient and loss differences to the unsharded reference.

    Runs on CPU with ``nprocs`` gloo ranks; returns ``{layout: {max_grad_abs_error,
    loss_abs_error, grad_scale}}`` (worst over ranks).
    """
    require_torch()
    layouts = layouts or DEFAULT_LAYOUTS
    choice = choose_device("cpu", local_ranks=nprocs)
    ranks = launch(_check_worker, nprocs, {"layouts": layouts, "model": model or SMALL_MODEL}, choice)
    worst: dict = {}
    for r in ranks:
        for name, errs in r.items():
            cur = worst.setdefault(name, dict(errs))
            for k, v in errs.items():
                cur[k] = max(cur[k], v)
    return worst
