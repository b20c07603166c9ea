"""Layers to pipeline stages: contiguous split minimising the slowest stage under a memory limit.

The step model prices the schedule's makespan on the standard layout
(``simulator.stage_layout.position_layers``, which the exports launch); real layers are not all
alike (embedding on the first stage, LM head and loss on the last, dense and MoE layers mixed,
a layer count pp does not divide), so another split may balance them better: a suggestion
``paraplan plan`` shows beside the priced layout, not priced itself. ``assign_layers_to_stages`` finds the contiguous
split that minimises the slowest stage exactly, by dynamic programming over prefix sums
(O(S L^2)); among the optimal splits it takes the most even one (least sum of squared stage
times). ``assign_layers_ilp`` states the same problem as an integer program for pulp/CBC
(tests check that both agree). ``stage_assignment_for`` builds the per-layer costs of one
plan from the step model and runs the assignment.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from cost_models import layer_costs, memory, params
from cost_models.compute import LOW_PRECISION, compute_rates, sixteen_bit_dtype
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.step_model import evaluate

_REL_TOL = 1e-12


@dataclass(frozen=True)
class StageAssignment:
    """One contiguous split of layers over stages.

    Attributes:
        stage_layers: per stage, the half-open range (first, stop) of layer indices (0-based).
        stage_times_s: per stage, its layers' time plus its extra (embedding / LM head), seconds.
        stage_memory_bytes: per stage, its layers' bytes plus its extra, bytes.
        max_stage_time_s: the slowest stage, seconds (the objective).
    """

    stage_layers: tuple[tuple[int, int], ...]
    stage_times_s: tuple[float, ...]
    stage_memory_bytes: tuple[float, ...]
    max_stage_time_s: float

    @property
    def layer_counts(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in self.stage_layers)


def _inputs(layer_times_s, layer_memory_bytes, pp):
    t = np.asarray(layer_times_s, dtype=float)
    m = np.zeros_like(t) if layer_memory_bytes is None else np.asarray(layer_memory_bytes, dtype=float)
    if t.ndim != 1 or m.shape != t.shape:
        raise InputError("layer_times_s", "layer times and layer memory must be 1-D and of equal length")
    if not 1 <= pp <= len(t):
        raise InputError("pp", f"cannot split {len(t)} layers over {pp} stages (every stage needs a layer)",
                         f"choose pp between 1 and {len(t)}")
    return t, m


def _extras(n_stages, first_s, last_s, first_b, last_b):
    e_t = np.zeros(n_stages)
    e_m = np.zeros(n_stages)
    e_t[0] += first_s
    e_m[0] += first_b
    e_t[-1] += last_s
    e_m[-1] += last_b
    return e_t, e_m


def _result(bounds, t, m, e_t, e_m) -> StageAssignment:
    times = tuple(float(t[a:b].sum() + e_t[s]) for s, (a, b) in enumerate(bounds))
    mems = tuple(float(m[a:b].sum() + e_m[s]) for s, (a, b) in enumerate(bounds))
    return StageAssignment(tuple(bounds), times, mems, max(times))


def _infeasible(limit):
    return InputError("memory_limit_bytes", f"no contiguous split keeps every stage under {limit / 2**30:.2f} GiB",
                      "use more pipeline stages, a smaller micro-batch, recompute or ZeRO")


def assign_layers_to_stages(layer_times_s, layer_memory_bytes, pp: int, memory_limit_bytes: float = math.inf,
                            *, first_stage_extra_s: float = 0.0, last_stage_extra_s: float = 0.0,
                            first_stage_extra_bytes: float = 0.0,
                            last_stage_extra_bytes: float = 0.0) -> StageAssignment:
    """Exact contiguous split of layers over ``pp`` stages minimising the slowest stage.

    ``layer_times_s[l]``, ``layer_memory_bytes[l]``: cost of layer l; every stage's memory (its
    layers plus its extra) must stay <= ``memory_limit_bytes``. The ``first_stage_extra_*``
    (embedding) and ``last_stage_extra_*`` (LM head and loss) are added to stages 0 and pp-1.
    Raises ``InputError`` if no split fits.
    """
    t, m = _inputs(layer_times_s, layer_memory_bytes, pp)
    n = len(t)
    e_t, e_m = _extras(pp, first_stage_extra_s, last_stage_extra_s, first_stage_extra_bytes, last_stage_extra_bytes)
    pt = np.concatenate([[0.0], np.cumsum(t)])
    pm = np.concatenate([[0.0], np.cumsum(m)])
    i = np.arange(n + 1)[:, None]
    j = np.arange(n + 1)[None, :]
    seg_t = np.where(i < j, pt[None, :] - pt[:, None], np.inf)        # [i, j): layers i..j-1
    seg_m = np.where(i < j, pm[None, :] - pm[:, None], np.inf)
    slack = memory_limit_bytes * (1 + _REL_TOL) if math.isfinite(memory_limit_bytes) else np.inf

    def masked(extra_t, extra_m):
        return np.where(seg_m + extra_m <= slack, seg_t + extra_t, np.inf)

    middle = masked(0.0, 0.0)             # stages other than the first and last share one matrix
    costs = [middle] * pp
    for s in {0, pp - 1}:
        costs[s] = masked(e_t[s], e_m[s])

    # phase 1: the least possible slowest stage
    best = costs[0][0].copy()                         # best[j]: stage 0 covers [0, j)
    for s in range(1, pp):
        best = np.min(np.maximum(best[:, None], costs[s]), axis=0)
    t_star = best[n]
    if not np.isfinite(t_star):
        raise _infeasible(memory_limit_bytes)

    # phase 2: among splits whose stages all take <= t_star, the least sum of squared stage times
    cap = t_star * (1 + 1e-9)
    squares = {id(c): np.where(c <= cap, c ** 2, np.inf) for c in costs}
    sq = squares[id(costs[0])][0]
    choice = []
    for s in range(1, pp):
        cand = sq[:, None] + squares[id(costs[s])]
        arg = np.argmin(cand, axis=0)
        sq = cand[arg, np.arange(n + 1)]
        choice.append(arg)
    bounds = []
    stop = n
    for s in range(pp - 1, 0, -1):
        start = int(choice[s - 1][stop])
        bounds.append((start, stop))
        stop = start
    bounds.append((0, stop))
    return _result(bounds[::-1], t, m, e_t, e_m)


def assign_layers_ilp(layer_times_s, layer_memory_bytes, pp: int, memory_limit_bytes: float = math.inf,
                      *, first_stage_extra_s: float = 0.0, last_stage_extra_s: float = 0.0,
                      first_stage_extra_bytes: float = 0.0, last_stage_extra_bytes: float = 0.0,
                      time_limit_s: float = 60.0) -> StageAssignment:
    """The same problem as ``assign_layers_to_stages`` as a mixed-integer program (pulp + CBC).

    x[l, s] = 1 when layer l is on stage s; the stage index sum_s s*x[l, s] starts at 0, ends at
    pp-1 and grows by 0 or 1 from one layer to the next (contiguous, no empty stage); minimise T
    subject to every stage's time <= T and memory <= the limit. Slower than the DP; for checks
    and for variants (extra constraints) the DP cannot express.
    """
    import warnings

    import pulp

    t, m = _inputs(layer_times_s, layer_memory_bytes, pp)
    n = len(t)
    e_t, e_m = _extras(pp, first_stage_extra_s, last_stage_extra_s, first_stage_extra_bytes, last_stage_extra_bytes)
    scale = max(float(t.max()), 1e-30)          # keep coefficients near 1 for the solver
    prob = pulp.LpProblem("stage_assignment", pulp.LpMinimize)
    new_var = getattr(prob, "add_variable", None) or pulp.LpVariable   # pulp >= 3.3 / older
    x = {(l, s): new_var(f"x_{l}_{s}", cat="Binary") for l in range(n) for s in range(pp)}
    top = new_var("T", lowBound=0)
    prob += top
    stage_of = {l: pulp.lpSum(s * x[l, s] for s in range(pp)) for l in range(n)}
    for l in range(n):
        prob += pulp.lpSum(x[l, s] for s in range(pp)) == 1
    prob += stage_of[0] == 0
    prob += stage_of[n - 1] == pp - 1
    for l in range(n - 1):
        prob += stage_of[l + 1] - stage_of[l] >= 0
        prob += stage_of[l + 1] - stage_of[l] <= 1
    for s in range(pp):
        prob += pulp.lpSum(float(t[l] / scale) * x[l, s] for l in range(n)) + float(e_t[s] / scale) <= top
        if math.isfinite(memory_limit_bytes):
            mscale = max(float(memory_limit_bytes), 1.0)
            prob += (pulp.lpSum(float(m[l] / mscale) * x[l, s] for l in range(n)) + float(e_m[s] / mscale)
                     <= float(memory_limit_bytes / mscale) * (1 + _REL_TOL))
    with warnings.catch_warnings():      # pulp 3.3 deprecates its bundled CBC; it is still the one installed
        warnings.simplefilter("ignore", DeprecationWarning)
        status = prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s))
    if pulp.LpStatus[status] != "Optimal":
        raise _infeasible(memory_limit_bytes)
    stage = [int(round(sum(s * x[l, s].value() for s in range(pp)))) for l in range(n)]
    bounds = []
    for s in range(pp):
        members = [l for l in range(n) if stage[l] == s]
        bounds.append((members[0], members[-1] + 1))
    return _result(bounds, t, m, e_t, e_m)


def _tensor_limit(memory_limit_bytes: float, reserved_bytes: float = memory.RUNTIME_RESERVED_BYTES) -> float:
    """Largest tensor bytes whose total with the allocator allowance (``reserved_bytes``: the
    device's runtime reserve) stays under the limit."""
    a0 = float(memory.allocator_allowance_bytes(0.0, reserved_bytes))
    slope = float(memory.allocator_allowance_bytes(1.0, reserved_bytes)) - a0
    return (memory_limit_bytes - a0) / (1.0 + slope)


def _layer_costs(model: ModelSpec, cluster, eff, config: ParallelConfig):
    """(seconds, bytes) of one layer of ``model`` per micro-batch, from the step model.

    Time: forward + backward + recompute per layer. Bytes: the stage's model states less the
    embedding / LM head share (by parameter count), plus its activations, over its layers.
    """
    out = evaluate(model, cluster, eff, ConfigBatch.from_configs([config]))
    v = {k: float(np.asarray(x)[0]) for k, x in out.items()}
    layers_stage = math.ceil(model.num_layers / config.pp)
    states = v["weights_bytes"] + v["gradients_bytes"] + v["optimizer_bytes"]
    ends = params.embedding_params(model) / config.tp
    if config.pp == 1:
        ends += params.lm_head_params(model) / config.tp
    layer_states = states * max(0.0, 1.0 - ends / max(v["params_local"], 1.0))
    per_layer_bytes = (layer_states + v["activations_bytes"]) / layers_stage
    per_layer_s = v["layer_fwd_s"] + v["layer_bwd_s"] + v["layer_recompute_s"]
    return per_layer_s, per_layer_bytes, v


def _layer_kinds(model: ModelSpec) -> np.ndarray:
    """True for the MoE layers (after ``first_dense_layers``, every ``moe_layer_frequency``-th)."""
    return model.is_moe_layer()


def _mtp_extras(model: ModelSpec, rates, tokens, tp, head_s: float, per_param: float, logits_bytes: float,
                layer_cost: tuple[float, float], own_embedding: bool) -> tuple[float, float]:
    """(seconds, bytes) per micro-batch the ``model.mtp_layers`` MTP modules add to the last
    stage, as the step model prices them: each is one more transformer layer of the model's
    last kind (``layer_cost``: its seconds and bytes; ``step_model._layers_on_path``), a
    2h -> h projection (``layer_costs.mtp_projection_costs``, forward + backward) and another
    pass through the shared LM head and loss (``head_s``; ``layer_times``' ``mtp_f``/``mtp_b``/
    ``mtp_w``); in memory, the projection's model states (``per_param`` bytes per local
    parameter), its logits and, on a stage without the embedding (``own_embedding`` False),
    a copy of the embedding it reads the next tokens from (``stage_static.static_parts``).
    DeepSeek-V3 report (arXiv 2412.19437), section 2.2."""
    n = float(model.mtp_layers)
    if n == 0:
        return 0.0, 0.0
    proj = layer_costs.mtp_projection_costs(model, rates, tokens, tp)
    seconds = n * (layer_cost[0] + float(np.asarray(proj["fwd_s"] + proj["bwd_s"])) + head_s)
    nbytes = (n * (layer_cost[1] + per_param * params.mtp_projection_params(model) / tp + logits_bytes)
              + (0.0 if own_embedding else per_param * params.embedding_params(model) / tp))
    return seconds, float(nbytes)


def stage_assignment_for(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, config: ParallelConfig,
                         memory_limit_bytes: float) -> StageAssignment:
    """The layers of every (virtual) stage for one plan.

    Stages are the pp * vpp model chunks (chunk c runs on pipeline rank c mod pp). Per-layer
    time and memory come from ``step_model.evaluate`` on the plan (for an MoE model, on a
    dense-only and an MoE-only variant of it, so the two kinds of layer cost what they cost);
    memory per layer is the layer's share of the model states plus the first stage's per-layer
    activations (the most in flight, so conservative). The embedding (lookup, gradient, its
    states) goes on the first chunk, the LM head and loss (and the logits) on the last; a
    rank's memory limit is shared evenly by its chunks.
    """
    n_stages = config.pp * config.vpp
    tp = config.tp
    if model.hybrid_pattern:
        raise InputError("model", f"{model.name}: hybrid Mamba models are not supported by the per-layer stage "
                         "assignment", "use the even pipeline split (no --stage-assignment)")
    if model.moe is None:
        t_layer, b_layer, v = _layer_costs(model, cluster, eff, config)
        times = np.full(model.num_layers, t_layer)
        sizes = np.full(model.num_layers, b_layer)
    else:
        dense_ffn = model.moe.dense_ffn_hidden_size or model.ffn_hidden_size
        # the dense variant has no experts, so no expert checkpoint format (gpt-oss: mxfp4)
        dense = replace(model, moe=None, ffn_hidden_size=dense_ffn, expert_checkpoint_format="")
        all_moe = replace(model, moe=replace(model.moe, first_dense_layers=0, moe_layer_frequency=1))
        t_d, b_d, v = _layer_costs(dense, cluster, eff, replace(config, ep=1))
        t_m, b_m, _ = _layer_costs(all_moe, cluster, eff, config)
        kinds = _layer_kinds(model)
        times = np.where(kinds, t_m, t_d)
        sizes = np.where(kinds, b_m, b_d)
    tokens = config.micro_batch * model.seq_len / config.cp
    rates = compute_rates(cluster.gpu, eff, config.dtype)
    head_dtype = sixteen_bit_dtype(cluster.gpu) if config.dtype in LOW_PRECISION else config.dtype
    head = layer_costs.lm_head_costs(model, compute_rates(cluster.gpu, eff, head_dtype), tokens, tp,
                                     config.cross_entropy)
    emb = layer_costs.embedding_costs(model, rates, tokens)
    states = v["weights_bytes"] + v["gradients_bytes"] + v["optimizer_bytes"]
    per_param = states / max(v["params_local"], 1.0)
    head_s = float(np.asarray(head["fwd_s"] + head["bwd_s"]))
    mtp_s, mtp_bytes = _mtp_extras(model, rates, tokens, tp, head_s, per_param, v["logits_bytes"],
                                   (t_m, b_m) if model.num_moe_layers else (times[0], sizes[0]),
                                   own_embedding=n_stages == 1)
    kwargs = dict(
        first_stage_extra_s=float(np.asarray(emb["fwd_s"] + emb["bwd_s"])),
        last_stage_extra_s=head_s + mtp_s,
        first_stage_extra_bytes=per_param * params.embedding_params(model) / tp,
        last_stage_extra_bytes=per_param * params.lm_head_params(model) / tp + v["logits_bytes"] + mtp_bytes,
    )
    limit = (_tensor_limit(memory_limit_bytes, memory.runtime_reserved_bytes(cluster.gpu))
             - v["zero3_buffers_bytes"]) / config.vpp
    ends = None
    if n_stages > model.num_layers:
        # Megatron's account_for_embedding/loss_in_pipeline_split: the embedding and the loss
        # are one layer each, so they may hold a stage of their own
        ends = kwargs
        times = np.concatenate([[kwargs["first_stage_extra_s"]], times, [kwargs["last_stage_extra_s"]]])
        sizes = np.concatenate([[kwargs["first_stage_extra_bytes"]], sizes, [kwargs["last_stage_extra_bytes"]]])
        kwargs = {}
    try:
        found = assign_layers_to_stages(times, sizes, n_stages, limit, **kwargs)
    except InputError:
        # the per-layer memory split is an estimate; report the time-optimal split regardless
        found = assign_layers_to_stages(times, sizes, n_stages, math.inf, **kwargs)
    if ends is None:
        return found
    last = model.num_layers
    layers = tuple((min(max(a - 1, 0), last), min(max(b - 1, 0), last)) for a, b in found.stage_layers)
    return replace(found, stage_layers=layers)
