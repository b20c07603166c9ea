"""Hand-written model parallelism on ``torch.distributed`` (Megatron-LM style).

* ``Mesh``: this rank's place in the (pp, dp, tp) grid and its process groups. Ranks are laid
  out with tp fastest, then dp, then pp (Megatron's order), so a TP group is adjacent ranks.
* Tensor parallelism (Shoeybi et al. 2019, section 3): the conjugate operators ``f`` (identity
  forward, all-reduce backward) and ``g`` (all-reduce forward, identity backward) as autograd
  functions, and column-/row-parallel linear layers, vocab-parallel embedding and the
  vocab-parallel cross-entropy built on them.
* Pipeline parallelism: point-to-point exchange of activations and their gradients between
  neighbouring stages (isend/irecv pairs, so no two ranks block on each other's send).
* Data parallelism: parameters and gradients live in one flat buffer per rank; gradients are
  all-reduced (ZeRO-0) or reduce-scattered with an all-gather of the updated shard (ZeRO-1,
  Rajbhandari et al. 2020), and one Adam runs over the (shard of the) flat parameter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from hardware_specs.errors import InputError


@dataclass
class Mesh:
    """Ranks and process groups of one (pp, dp, tp) layout; ``None`` groups for size-1 axes."""

    rank: int
    tp: int
    dp: int
    pp: int
    tp_rank: int
    dp_rank: int
    pp_rank: int
    tp_group: object = None
    dp_group: object = None

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    @property
    def prev_rank(self) -> int:
        return self.rank - self.tp * self.dp

    @property
    def next_rank(self) -> int:
        return self.rank + self.tp * self.dp


def build_mesh(tp: int, dp: int, pp: int, copies: int = 1) -> Mesh:
    """This rank's ``Mesh``; every rank must call it (``new_group`` is collective).

    ``copies`` independent jobs of ``tp*dp*pp`` ranks each share the world (job ``j`` owns
    ranks ``[j*size, (j+1)*size)``); they never communicate with each other.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    size = tp * dp * pp
    if size * copies != world:
        raise InputError("world_size", f"copies*tp*dp*pp = {copies}*{tp}*{dp}*{pp} = {copies * size} "
                         f"but {world} ranks")
    local = rank % size
    tp_rank, dp_rank, pp_rank = local % tp, (local // tp) % dp, local // (tp * dp)
    mesh = Mesh(rank, tp, dp, pp, tp_rank, dp_rank, pp_rank)
    for base in range(0, world, size):
        for p in range(pp):
            for d in range(dp):
                ranks = [base + p * tp * dp + d * tp + t for t in range(tp)]
                group = dist.new_group(ranks) if tp > 1 else None
                if rank in ranks:
                    mesh.tp_group = group
            for t in range(tp):
                ranks = [base + p * tp * dp + d * tp + t for d in range(dp)]
                group = dist.new_group(ranks) if dp > 1 else None
                if rank in ranks:
                    mesh.dp_group = group
    return mesh


# ---- tensor parallelism: the f and g operators --------------------------------------------

class _CopyToTP(torch.autograd.Function):
    """``f``: identity forward; all-reduce of the input gradient over the TP group backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """``g``: all-reduce of the partial sums forward; identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x, group):
    return x if group is None else _CopyToTP.apply(x, group)


def reduce_from_tp(x, group):
    return x if group is None else _ReduceFromTP.apply(x, group)


def _init_weight(out_features: int, in_features: int, std: float) -> nn.Parameter:
    return nn.Parameter(torch.randn(out_features, in_features) * std)


class ColumnParallelLinear(nn.Module):
    """``Y_i = f(X) A_i``: this rank holds output rows ``[i*out/tp, (i+1)*out/tp)`` of ``A``."""

    def __init__(self, in_features: int, out_features: int, mesh: Mesh, std: float = 0.02):
        super().__init__()
        if out_features % mesh.tp:
            raise InputError("tp", f"{out_features} output features not divisible by tp={mesh.tp}")
        self.group = mesh.tp_group
        self.weight = _init_weight(out_features // mesh.tp, in_features, std)
        self.bias = nn.Parameter(torch.zeros(out_features // mesh.tp))

    def forward(self, x):
        return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """``Y = g(sum_i X_i B_i) + b``: this rank holds input columns of ``B``; bias replicated."""

    def __init__(self, in_features: int, out_features: int, mesh: Mesh, std: float = 0.02):
        super().__init__()
        if in_features % mesh.tp:
            raise InputError("tp", f"{in_features} input features not divisible by tp={mesh.tp}")
        self.group = mesh.tp_group
        self.weight = _init_weight(out_features, in_features // mesh.tp, std)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return reduce_from_tp(F.linear(x, self.weight), self.group) + self.bias


class VocabParallelEmbedding(nn.Module):
    """Embedding table split by vocabulary rows; out-of-shard tokens give zeros, then ``g``."""

    def __init__(self, vocab_size: int, hidden: int, mesh: Mesh, std: float = 0.02):
        super().__init__()
        if vocab_size % mesh.tp:
            raise InputError("tp", f"vocab_size {vocab_size} not divisible by tp={mesh.tp}")
        self.group = mesh.tp_group
        self.local = vocab_size // mesh.tp
        self.start = mesh.tp_rank * self.local
        self.weight = _init_weight(self.local, hidden, std)

    def forward(self, tokens):
        if self.group is None:
            return F.embedding(tokens, self.weight)
        outside = (tokens < self.start) | (tokens >= self.start + self.local)
        local = (tokens - self.start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight) * (~outside).unsqueeze(-1).to(self.weight.dtype)
        return reduce_from_tp(out, self.group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token cross-entropy of logits split by vocabulary over the TP group.

    Three small all-reduces (max, target logit, sum of exponentials) replace gathering the
    full logits (Megatron-LM ``vocab_parallel_cross_entropy``).
    """

    @staticmethod
    def forward(ctx, logits, target, start, group):
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()       # softmax statistics in fp32 (mixed-precision practice)
        logit_max = logits.max(dim=-1).values
        if group is not None:
            dist.all_reduce(logit_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - logit_max.unsqueeze(-1)
        local_t = target - start
        valid = (local_t >= 0) & (local_t < logits.shape[-1])
        local_t = local_t.masked_fill(~valid, 0)
        target_logit = shifted.gather(-1, local_t.unsqueeze(-1)).squeeze(-1) * valid
        exp = shifted.exp_()
        sum_exp = exp.sum(dim=-1)
        if group is not None:
            both = torch.stack([target_logit, sum_exp])
            dist.all_reduce(both, group=group)
            target_logit, sum_exp = both[0], both[1]
        exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(exp, local_t, valid)
        return sum_exp.log() - target_logit

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, local_t, valid = ctx.saved_tensors
        grad = softmax.clone()
        grad.scatter_add_(-1, local_t.unsqueeze(-1), -valid.to(grad.dtype).unsqueeze(-1))
        grad.mul_(grad_loss.unsqueeze(-1))
        return grad, None, None, None


def vocab_parallel_cross_entropy(logits, target, start: int, group):
    """Per-token loss (fp32) of vocab-split ``logits`` [..., V/tp] against global ``target`` ids."""
    return _VocabParallelCrossEntropy.apply(logits, target, start, group)


# ---- pipeline parallelism: point-to-point ---------------------------------------------------

def exchange(send: torch.Tensor | None, send_to: int | None,
             recv_like: torch.Tensor | None, recv_from: int | None) -> torch.Tensor | None:
    """Post a send and/or a receive together and wait for both; returns the received tensor."""
    works, received = [], None
    if recv_like is not None:
        received = torch.empty_like(recv_like)
        works.append(dist.irecv(received, recv_from))
    if send is not None:
        works.append(dist.isend(send.contiguous(), send_to))
    for w in works:
        w.wait()
    return received


# ---- data parallelism: flat buffers, gradient reduction, Adam -------------------------------

class FlatOptimizer:
    """Parameters and gradients as views of one flat buffer; DP reduction; Adam on the shard.

    ZeRO-0: all-reduce the flat gradient and run Adam on all of it. ZeRO-1: reduce-scatter
    the gradient so this rank owns ``1/dp`` of it, run Adam (and hold its moments) for that
    shard only, and all-gather the updated parameters.
    """

    def __init__(self, module: nn.Module, mesh: Mesh, zero_stage: int, lr: float = 1e-4):
        if zero_stage not in (0, 1):
            raise InputError("zero_stage", f"the measured runner implements ZeRO 0 and 1, got {zero_stage}")
        params = [p for p in module.parameters() if p.requires_grad]
        numel = sum(p.numel() for p in params)
        dp = mesh.dp
        self.padded = int(math.ceil(numel / dp) * dp)
        ref = params[0]
        self.flat = torch.zeros(self.padded, dtype=ref.dtype, device=ref.device)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        for p in params:
            n = p.numel()
            self.flat[offset:offset + n].copy_(p.data.reshape(-1))
            p.data = self.flat[offset:offset + n].view_as(p)
            # Backward accumulates into an existing .grad in place, so gradients land here.
            p.grad = self.grad[offset:offset + n].view_as(p)
            offset += n
        self.params = params
        self.numel = numel
        self.mesh = mesh
        self.zero_stage = zero_stage
        shard = self.padded // dp if zero_stage == 1 else self.padded
        lo = mesh.dp_rank * shard if zero_stage == 1 else 0
        self.lo, self.hi = lo, lo + shard
        # ZeRO-1 reduce-scatters into this rank's shard; ZeRO-0 reduces the flat gradient in place
        self.shard_grad = (torch.zeros(shard, dtype=ref.dtype, device=ref.device) if zero_stage == 1
                           else self.grad)
        # 16-bit weights train in mixed precision, as every large-model stack does (and as the
        # simulator prices a bf16 run: ``simulator.step_model.ADAM_STEP_BYTES_PER_PARAM``): Adam
        # updates an fp32 master copy of this rank's shard from an fp32 copy of its gradient and
        # keeps its moments in fp32; the 16-bit weights are then copied from the master. fp32
        # weights are their own master copy. On CUDA the step is torch's fused Adam (one kernel
        # per step, as Megatron's fused Adam); on the CPU the default implementation.
        self.mixed = ref.dtype in (torch.bfloat16, torch.float16)
        if self.mixed:
            self.shard_param = nn.Parameter(self.flat[lo:lo + shard].float())
            self.shard_param.grad = torch.zeros_like(self.shard_param)
        else:
            self.shard_param = nn.Parameter(self.flat[lo:lo + shard])
            self.shard_param.grad = self.shard_grad if zero_stage == 1 else self.grad
        fused = {"fused": True} if ref.device.type == "cuda" else {}
        self.adam = torch.optim.Adam([self.shard_param], lr=lr, **fused)

    def zero_grad(self) -> None:
        self.grad.zero_()

    def check_grads_in_place(self) -> None:
        """Fail loudly if autograd replaced a ``.grad`` instead of accumulating into the buffer."""
        base = self.grad.data_ptr()
        for p in self.params:
            if p.grad is None or not (base <= p.grad.data_ptr() < base + self.grad.numel() * self.grad.element_size()):
                raise RuntimeError("gradient is not a view of the flat buffer; DP reduction would miss it")

    def reduce_gradients(self) -> None:
        """Average gradients over the DP group: all of them (ZeRO-0) or this rank's shard (ZeRO-1)."""
        dp, group = self.mesh.dp, self.mesh.dp_group
        if self.zero_stage == 0:
            if dp > 1:
                dist.all_reduce(self.grad, group=group)
                self.grad.div_(dp)
        elif dp > 1:
            reduce_scatter_into(self.shard_grad, self.grad, group)
            self.shard_grad.div_(dp)
        else:
            self.shard_grad.copy_(self.grad)

    def step(self) -> None:
        """Adam on this rank's (shard of the) parameters; ZeRO-1 then all-gathers the update."""
        if self.mixed:
            self.shard_param.grad.copy_(self.shard_grad if self.zero_stage == 1 else self.grad)
        self.adam.step()
        if self.mixed:
            self.flat[self.lo:self.hi].copy_(self.shard_param.detach())
        if self.zero_stage == 1 and self.mesh.dp > 1:
            all_gather_into(self.flat, self.flat[self.lo:self.hi].clone(), self.mesh.dp_group)


def reduce_scatter_into(out, inp, group=None):
    """Reduce-scatter ``inp`` (sum) into this rank's shard ``out`` (both torch versions' names)."""
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(out, inp, group=group)


def all_gather_into(out, inp, group=None):
    """All-gather every rank's ``inp`` into ``out`` (both torch versions' names)."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, inp, group=group)
