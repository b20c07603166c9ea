"""Checks that a parallel configuration fits a model and a GPU count (errors name the field)."""
from __future__ import annotations

from hardware_specs.errors import InputError
from model_specs.model_spec import ModelSpec
from simulator.parallel_config import ParallelConfig, Schedule


def _divisors(n: int, limit: int = 64) -> str:
    ds = [d for d in range(1, min(n, limit) + 1) if n % d == 0]
    return ", ".join(map(str, ds))


def check_config(model: ModelSpec, config: ParallelConfig, n_gpus: int | None = None) -> None:
    """Raise ``InputError`` if ``config`` cannot run ``model`` (on ``n_gpus`` GPUs)."""
    c = config
    if n_gpus is not None and c.n_gpus != n_gpus:
        raise InputError("dp", f"dp*tp*pp*cp = {c.dp}*{c.tp}*{c.pp}*{c.cp} = {c.n_gpus} but "
                         f"the job has {n_gpus} GPUs", f"make the degrees multiply to {n_gpus}")
    if model.num_heads % c.tp:
        raise InputError("tp", f"tp={c.tp} does not divide the {model.num_heads} attention heads of "
                         f"{model.name}", f"choose tp from {_divisors(model.num_heads)}")
    if model.num_kv_heads % c.tp and c.tp % model.num_kv_heads:
        raise InputError("tp", f"tp={c.tp} and the {model.num_kv_heads} kv heads do not divide each other",
                         f"choose tp from {_divisors(model.num_kv_heads)} or a multiple of it")
    if model.ffn_hidden_size % c.tp:
        raise InputError("tp", f"tp={c.tp} does not divide ffn_hidden_size {model.ffn_hidden_size}")
    if c.pp > model.num_layers:
        raise InputError("pp", f"pp={c.pp} exceeds the {model.num_layers} layers")
    # Megatron may count the embedding and the loss as one layer each when splitting
    # (account_for_embedding/loss_in_pipeline_split), so L or L + 2 must divide into chunks.
    if c.vpp > 1 and model.num_layers % (c.pp * c.vpp) and (model.num_layers + 2) % (c.pp * c.vpp) \
            and not c.uneven_layers:
        raise InputError("vpp", f"{model.num_layers} layers do not split into pp*vpp = {c.pp}*{c.vpp} "
                         "equal chunks", "choose pp*vpp dividing the layer count (or layers + 2), or "
                         "allow a custom layout with --uneven-layers")
    if c.pp * c.vpp > model.num_layers + 2:
        raise InputError("vpp", f"pp*vpp = {c.pp * c.vpp} chunks exceed the {model.num_layers} layers")
    if c.schedule == Schedule.INTERLEAVED and c.num_microbatches % c.pp:
        raise InputError("global_batch", f"interleaved 1F1B needs the micro-batch count "
                         f"({c.num_microbatches}) to be a multiple of pp={c.pp}",
                         f"use a global batch that is a multiple of {c.pp * c.dp * c.micro_batch}")
    if c.schedule in (Schedule.ZB_V, Schedule.DUALPIPE) and model.num_layers % (2 * c.pp):
        raise InputError("schedule", f"{c.schedule.value} puts 2 chunks on each of pp={c.pp} ranks; "
                         f"{model.num_layers} layers do not divide by {2 * c.pp}")
    if model.seq_len % c.cp:
        raise InputError("cp", f"cp={c.cp} does not divide the sequence length {model.seq_len}",
                         f"choose cp from {_divisors(model.seq_len)}")
    if model.moe is not None:
        if model.moe.num_experts % c.ep:
            raise InputError("ep", f"ep={c.ep} does not divide the {model.moe.num_experts} experts",
                             f"choose ep from {_divisors(model.moe.num_experts, 512)}")
        most = model.moe.num_experts / model.moe.top_k
        if c.moe_load_imbalance > most:
            raise InputError("moe_load_imbalance", f"{c.moe_load_imbalance:g} is above {most:g}, the ratio when "
                             f"every token's {model.moe.top_k} experts are the busiest (experts / top_k)",
                             f"use a ratio between 1 and {most:g}")
        if (c.dp * c.cp * c.tp) % (c.ep * c.etp):
            raise InputError("ep", f"ep*etp = {c.ep}*{c.etp} must divide dp*cp*tp = {c.dp * c.cp * c.tp} "
                             "(MoE parallel folding)")
    elif c.ep > 1:
        raise InputError("ep", f"{model.name} has no experts; expert parallelism needs an MoE model",
                         "set ep 1")
