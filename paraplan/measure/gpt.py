"""A small GPT-style decoder whose layers are tensor-parallel and whose stack is pipeline-split.

Architecture (GPT-2 style, pre-norm): token embedding, ``L`` layers of
``x + Attn(LN(x))`` and ``x + MLP(LN(x))`` (causal ``scaled_dot_product_attention``, MLP of
width ``4h`` with GELU), final LayerNorm, untied LM head, cross-entropy. No position
embedding or dropout: neither changes the cost being measured.

With ``tp > 1`` the QKV and MLP up-projections are column-parallel, the attention output and
MLP down-projections row-parallel (two all-reduces forward, two backward per layer), the
embedding and LM head are split by vocabulary. With ``pp > 1`` each stage builds only its
layers; the first stage owns the embedding, the last the final norm, head and loss.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from hardware_specs.errors import InputError
from paraplan.measure.parallel import (ColumnParallelLinear, Mesh, RowParallelLinear, VocabParallelEmbedding,
                                       copy_to_tp, vocab_parallel_cross_entropy)


@dataclass(frozen=True)
class GPTConfig:
    """Model size (``ffn = 4 * hidden``)."""

    num_layers: int = 4
    hidden_size: int = 256
    num_heads: int = 4
    vocab_size: int = 1024
    seq_len: int = 128

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_len"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"model.{name}", "must be >= 1")
        if self.hidden_size % self.num_heads:
            raise InputError("model.num_heads", f"hidden_size {self.hidden_size} not divisible by {self.num_heads}")

    @property
    def ffn_hidden_size(self) -> int:
        return 4 * self.hidden_size


class Attention(nn.Module):
    """Causal multi-head attention; this TP rank computes ``num_heads / tp`` heads.

    The QKV weight's local rows are ``[q_local; k_local; v_local]`` (see ``shard_reference``).
    """

    def __init__(self, cfg: GPTConfig, mesh: Mesh):
        super().__init__()
        if cfg.num_heads % mesh.tp:
            raise InputError("tp", f"num_heads {cfg.num_heads} not divisible by tp={mesh.tp}")
        self.heads = cfg.num_heads // mesh.tp
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv = ColumnParallelLinear(cfg.hidden_size, 3 * cfg.hidden_size, mesh)
        self.proj = RowParallelLinear(cfg.hidden_size, cfg.hidden_size, mesh)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig, mesh: Mesh):
        super().__init__()
        self.up = ColumnParallelLinear(cfg.hidden_size, cfg.ffn_hidden_size, mesh)
        self.down = RowParallelLinear(cfg.ffn_hidden_size, cfg.hidden_size, mesh)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, mesh: Mesh):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.attn = Attention(cfg, mesh)
        self.ln2 = nn.LayerNorm(cfg.hidden_size)
        self.mlp = MLP(cfg, mesh)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """Layers of pipeline stage ``stage``: contiguous, the first ``L mod pp`` stages one more."""
    base, extra = divmod(num_layers, pp)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


class GPTStage(nn.Module):
    """The part of the GPT that one (pipeline stage, TP rank) holds.

    ``forward(x, targets)``: ``x`` is token ids on the first stage, else the previous stage's
    hidden states ``[b, s, h]``; returns hidden states, or the mean loss on the last stage.
    """

    def __init__(self, cfg: GPTConfig, mesh: Mesh, recompute: bool = False):
        super().__init__()
        if cfg.num_layers < mesh.pp:
            raise InputError("pp", f"{cfg.num_layers} layers cannot fill {mesh.pp} pipeline stages")
        self.cfg, self.mesh, self.recompute = cfg, mesh, recompute
        self.layer_ids = stage_layers(cfg.num_layers, mesh.pp, mesh.pp_rank)
        self.embed = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, mesh) if mesh.is_first_stage else None
        self.layers = nn.ModuleList(Block(cfg, mesh) for _ in self.layer_ids)
        if mesh.is_last_stage:
            self.ln_f = nn.LayerNorm(cfg.hidden_size)
            self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size // mesh.tp, bias=False)
            nn.init.normal_(self.head.weight, std=0.02)

    def forward(self, x, targets=None):
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers:
            if self.recompute and torch.is_grad_enabled():
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        if not self.mesh.is_last_stage:
            return x
        logits = self.head(copy_to_tp(self.ln_f(x), self.mesh.tp_group))
        start = self.mesh.tp_rank * (self.cfg.vocab_size // self.mesh.tp)
        return vocab_parallel_cross_entropy(logits, targets, start, self.mesh.tp_group).mean()


def shard_reference(full: dict, cfg: GPTConfig, mesh: Mesh) -> dict:
    """Cut an unsharded (tp=1, pp=1) state dict into this rank's TP shard and pipeline stage.

    Column-parallel weights are split by output rows (the QKV weight per Q, K and V block, so
    each rank gets whole heads), row-parallel ones by input columns, the embedding and head by
    vocabulary rows; norms and row-parallel biases are replicated.
    """
    tp, r = mesh.tp, mesh.tp_rank

    def rows(t, parts=1):
        blocks = t.chunk(parts, dim=0)
        return torch.cat([b.chunk(tp, dim=0)[r] for b in blocks], dim=0)

    out = {}
    for local_i, global_i in enumerate(stage_layers(cfg.num_layers, mesh.pp, mesh.pp_rank)):
        src, dst = f"layers.{global_i}.", f"layers.{local_i}."
        for key, value in full.items():
            if not key.startswith(src):
                continue
            name = key[len(src):]
            if name in ("attn.qkv.weight", "attn.qkv.bias"):
                value = rows(value, 3)
            elif name in ("mlp.up.weight", "mlp.up.bias"):
                value = rows(value)
            elif name in ("attn.proj.weight", "mlp.down.weight"):
                value = value.chunk(tp, dim=1)[r]
            out[dst + name] = value.clone()
    if mesh.is_first_stage:
        out["embed.weight"] = rows(full["embed.weight"]).clone()
    if mesh.is_last_stage:
        out["ln_f.weight"], out["ln_f.bias"] = full["ln_f.weight"].clone(), full["ln_f.bias"].clone()
        out["head.weight"] = rows(full["head.weight"]).clone()
    return out
