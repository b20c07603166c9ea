"""Predict many published rows at once: rows grouped by (model, cluster, dtype) into one
``ConfigBatch`` each and timed by one ``step_model.evaluate`` call per group.

``prepare`` resolves every row once (model, cluster, stack, configuration, and the conversion of
a step time into the row's metric); ``predict`` then takes a per-generation efficiency model and
returns every row's predicted metric. The fitter calls ``predict`` thousands of times on the
same prepared rows, so nothing is re-parsed and no row is simulated alone.

A row's metric is ``scale * t ** power`` of a time ``t``: the step time, or for
``layer_fwd_bwd_time_ms`` one layer's forward + backward (+ recompute) on the busiest stage.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cost_models.params import embedding_params, lm_head_params, total_params
from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.errors import as_float
from paraplan.validation.csv_structure import id_text
from paraplan.validation.flops_conventions import CONVENTIONS
from paraplan.validation.published import RowInputs, Skip, row_inputs, run_conventions, source_of
from simulator.config_batch import ConfigBatch
from simulator.step_model import evaluate, memory_parts


@dataclass(frozen=True)
class Prepared:
    """Rows ready to predict: their inputs, measured values, and groups of row indices that
    share (model, cluster, dtype) with their ``ConfigBatch``."""

    ids: tuple
    sources: tuple
    inputs: tuple
    measured: np.ndarray
    scale: np.ndarray
    power: np.ndarray
    layer_metric: np.ndarray
    groups: tuple            # (model, cluster, batch, row indices)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def generations(self) -> np.ndarray:
        return np.array([i.cluster.gpu.generation for i in self.inputs])

    @cached_property
    def _group_memory(self) -> dict:
        """{group index: ``step_model.memory_parts`` of the group's rows, arrays read-only},
        filled by ``predict`` on first use: a row's memory does not depend on the efficiency
        model (``memory_rows.row_terms`` reads only the dtype's activation bytes from it), so the
        fitter's thousands of ``predict`` calls on the same rows compute it once. Held by this
        object alone (``subset`` makes a new one), not module state."""
        return {}

    def group_memory(self, g: int, eff) -> dict:
        """``memory_parts`` of group ``g`` (memoised, ``_group_memory``; ``eff``: the efficiency
        model of the first call, which the memory does not read beyond the dtype)."""
        memo = self._group_memory
        if g not in memo:
            model, cluster, batch, _ = self.groups[g]
            parts = memory_parts(model, cluster, eff, batch)
            for v in parts.values():
                if isinstance(v, np.ndarray):
                    v.flags.writeable = False      # shared by every later call: never written
            memo[g] = parts
        return memo[g]



#: the smallest measured value a row may state in any of its metrics (seconds, tokens/s, TFLOP/s,
#: MFU in percent): anything smaller is damage, and its relative error would print as inf
MIN_MEASURED_VALUE = 1e-9
#: the largest: a step of 30 years, 1e12 tokens/s or TFLOP/s per GPU, an MFU of 1e12 percent; a
#: larger cell is damage (1e308 was scored as a -100% error)
MAX_MEASURED_VALUE = 1e12
#: metrics that are a share of the GPU's peak, in percent: above 100 is damage (an MFU of 415)
PERCENT_OF_PEAK_METRICS = ("mfu", "hfu")
#: below this percent such a share is a fraction written in the percent column (0.415 for 41.5,
#: scored as a +10,315% error; the data README: "mfu (percent of the dtype's dense peak)"): no
#: training run measures an MFU under 1 percent (the published rows: 14.4 to 64.2)
PERCENT_OF_PEAK_FLOOR = 1.0


#: metrics that are a time or a token rate: what they imply in model FLOP/s per GPU is capped too
RATE_AND_TIME_METRICS = ("iter_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "layer_fwd_bwd_time_ms")


def min_model_flops_per_gpu_s(inputs: RowInputs, value: float) -> tuple[float, float]:
    """(model FLOP/s per GPU at least, matmul parameters N counted) that a step time, token rate
    or layer time ``value`` of ``RATE_AND_TIME_METRICS`` implies: 6 N per token trained (PaLM
    appendix B, Chowdhery et al. 2022, arXiv 2204.02311: 2 N forward + 4 N backward), N the
    active parameters less the input embedding (a table lookup; a tied table's output matmul is
    left out too), without the attention-score term or any recompute. A lower bound of what the
    GPU executed, so a row above the peak with it is damage under any FLOP convention. A step
    trains global_batch x seq_len tokens over n_gpus GPUs (``conversion``); a layer time
    (``layer_fwd_bwd_time_ms``, one layer of one micro-batch) does 6 x N / layers x micro_batch x
    seq_len over the tp x cp GPUs of its stage."""
    m, cfg, metric = inputs.model, inputs.config, inputs.metric
    n_params = float(total_params(m, active=True) - embedding_params(m))
    tokens = float(cfg.global_batch) * m.seq_len
    if metric == "layer_fwd_bwd_time_ms":
        per_layer = (total_params(m, active=True) - embedding_params(m) - lm_head_params(m) - m.hidden_size) / m.num_layers
        flops = 6.0 * per_layer * cfg.micro_batch * m.seq_len / (cfg.tp * cfg.cp)
        return flops / (value / 1e3), n_params
    step_s = {"iter_time_s": value, "tokens_per_s": tokens / value,
              "tokens_per_s_per_gpu": tokens / (value * cfg.n_gpus)}[metric]
    return 6.0 * n_params * tokens / cfg.n_gpus / step_s, n_params


def physical_cap_reason(inputs: RowInputs, value: float) -> str | None:
    """Why a measured ``value`` no GPU can reach is damage, or None: an MFU or HFU (percent)
    above 100 (or below ``PERCENT_OF_PEAK_FLOOR``: a fraction), TFLOP/s per GPU above the GPU's
    dense peak at the row's precision (the peak the MFU conversion divides by, ``conversion``),
    or a step time, token rate or layer time whose model FLOP/s per GPU
    (``min_model_flops_per_gpu_s``, a lower bound) is above that peak. Such
    a row was scored as a huge error."""
    metric, dtype = inputs.metric, inputs.config.dtype
    if metric in PERCENT_OF_PEAK_METRICS and value > 100.0:
        return f"{metric} {value:g} is above 100 percent, not a measurement (a damaged cell)"
    if metric in PERCENT_OF_PEAK_METRICS and value < PERCENT_OF_PEAK_FLOOR:
        return (f"{metric} {value:g} looks like a fraction; the column is in percent (below "
                f"{PERCENT_OF_PEAK_FLOOR:g} percent, not a measurement)")
    if metric == "tflops_per_gpu":
        peak = inputs.cluster.gpu.peak_flops(dtype) / 1e12
        if value > peak:
            return (f"tflops_per_gpu {value:g} is above {inputs.cluster.gpu.name}'s {dtype} peak of {peak:g} "
                    "TFLOP/s, not a measurement (a damaged cell)")
    if metric in RATE_AND_TIME_METRICS:
        peak = inputs.cluster.gpu.peak_flops(dtype) / 1e12
        tflops, n_params = min_model_flops_per_gpu_s(inputs, value)
        tflops /= 1e12
        if tflops > peak:
            return (f"{metric} {value:g} means at least {tflops:,.0f} TFLOP/s per GPU (6 x {n_params / 1e9:,.4g}B "
                    f"parameters x tokens), above {inputs.cluster.gpu.name}'s {dtype} peak of {peak:g} TFLOP/s, "
                    "not a measurement (a damaged cell)")
    return None


def conversion(inputs: RowInputs) -> tuple[float, float, bool]:
    """(scale, power, from layer time) with metric = scale * time ** power."""
    m, cfg, metric = inputs.model, inputs.config, inputs.metric
    n = cfg.n_gpus
    if metric == "iter_time_s":
        return 1.0, 1.0, False
    if metric == "layer_fwd_bwd_time_ms":
        return 1e3, 1.0, True
    if metric == "tokens_per_s":
        return cfg.global_batch * m.seq_len, -1.0, False
    if metric == "tokens_per_s_per_gpu":
        return cfg.global_batch * m.seq_len / n, -1.0, False
    flops = CONVENTIONS[inputs.convention](m, cfg.global_batch)
    if metric == "tflops_per_gpu":
        return flops / n / 1e12, -1.0, False
    return 100.0 * flops / n / inputs.cluster.gpu.peak_flops(cfg.dtype), -1.0, False   # mfu / hfu in percent


#: metrics computed from the source's FLOP count, and the metrics that need none (a run's row of
#: the first of them present is the partner a FLOP-derived row is checked against)
FLOP_METRICS = ("tflops_per_gpu", "mfu", "hfu")
TOKENS_METRIC = "tokens_per_s_per_gpu"
TIME_METRIC = "iter_time_s"
PARTNER_METRICS = (TOKENS_METRIC, TIME_METRIC)
#: largest disagreement between a source's FLOP count (implied by a run's FLOP-derived and
#: tokens/s or iteration-time rows) and the row's convention before the FLOP-derived row is left out
CONVENTION_TOLERANCE = 0.05


def _convention_mismatches(run_ids, metrics, measured, conv) -> dict:
    """FLOP-derived rows whose run also has a tokens/s or an iteration-time row and whose source
    counted FLOPs differently from the row's convention: {row position: reason}.

    Both rows measure the same step, so each gives the same 1/time when the convention is the
    source's counter: metric / scale for the FLOP-derived and tokens/s rows (power -1), and
    scale / metric for the iteration time (power 1: global_batch x seq_len / (iter_time x
    n_gpus) tokens/s/GPU, up to the constant that cancels); a ratio far from 1 means the counter
    differs (e.g. Megatron-Bridge before release 26.06 counted a gated MLP as gated only with a
    SiLU activation, flop_utils.py ``gated_linear_multiplier`` at v0.4.2, so GPT-OSS at 17% fewer
    FLOPs; NeMo's DGX Cloud Nemotron-4 MFU counted GQA attention as full multi-head, 1.13x /
    1.17x the FLOPs of their own iter_time rows). Such a row cannot be converted exactly; its
    run's tokens/s row (else its iteration-time row) is kept.
    """
    partner = {}
    for name in reversed(PARTNER_METRICS):       # the first of PARTNER_METRICS wins
        partner.update({r: j for j, (r, m) in enumerate(zip(run_ids, metrics)) if m == name and r})
    out = {}
    for j, (run, metric) in enumerate(zip(run_ids, metrics)):
        t = partner.get(run)
        if metric not in FLOP_METRICS or t is None:
            continue
        # 1/time of each row: (metric / scale) ** (-1 / power), power -1 or 1
        inverse_time_t = (measured[t] / conv[t][0]) ** (-1.0 / conv[t][1])
        ratio = (measured[j] / conv[j][0]) ** (-1.0 / conv[j][1]) / inverse_time_t
        if abs(ratio - 1.0) > CONVENTION_TOLERANCE:
            out[j] = (f"the source counted {ratio:.3f}x the FLOPs of convention; its FLOP counter is not this "
                      f"convention, the run's {metrics[t]} row is used")
    return out


def prepare(records, on_skip=None, progress=None) -> Prepared:
    """Resolve rows (dicts of a published-runs CSV); rows that cannot be predicted are passed to
    ``on_skip(index, reason)`` and left out (also FLOP-derived rows whose source counted FLOPs
    otherwise than their convention, ``_convention_mismatches``). ``progress(rows_read)`` after
    each row."""
    ids, sources, inputs, measured, conv, positions, runs = [], [], [], [], [], [], []
    conventions = run_conventions(records)
    first_of: dict[str, int] = {}
    for i, row in enumerate(records):
        try:
            rid = id_text(row.get("id"))
            if rid and rid in first_of:     # a copied row was scored twice under one id
                raise Skip(f"id {rid} repeats data row {first_of[rid] + 1}")
            first_of.setdefault(rid, i)
            value = row.get("measured_value")
            inp = row_inputs(row, conventions.get(id_text(row.get("run_id")), frozenset()))
            shown = id_text(value)
            try:
                value = as_float(value)         # 400 digits: inf, refused below (not OverflowError)
            except (TypeError, ValueError):
                raise Skip(f"measured_value {shown[:40]!r} is not a number" if shown else "measured_value empty") from None
            if math.isnan(value):
                raise Skip("measured_value empty" if not shown or shown.lower() == "nan" else
                           f"measured_value {shown[:40]!r} is not a number")
            if not math.isfinite(value):
                raise Skip("measured_value is not a finite number")
            if value <= 0:
                raise Skip(f"measured_value {value:g} is not positive")
            if value < MIN_MEASURED_VALUE:
                raise Skip(f"measured_value {value:g} is below {MIN_MEASURED_VALUE:g}, not a measurement (a damaged cell)")
            if value > MAX_MEASURED_VALUE:
                raise Skip(f"measured_value {value:g} is above {MAX_MEASURED_VALUE:g}, not a measurement (a damaged cell)")
            beyond = physical_cap_reason(inp, value)
            if beyond:
                raise Skip(beyond)
        except Skip as exc:
            if on_skip is not None:
                on_skip(i, str(exc))
            continue
        finally:
            if progress is not None:
                progress(i + 1)
        ids.append(row.get("id"))
        sources.append(source_of(row.get("run_id")))
        inputs.append(inp)
        measured.append(value)
        conv.append(conversion(inp))
        positions.append(i)
        runs.append(id_text(row.get("run_id")))
    mismatched = _convention_mismatches(runs, [inp.metric for inp in inputs], measured, conv)
    if mismatched:
        for j, why in mismatched.items():
            if on_skip is not None:
                on_skip(positions[j], why.replace("convention", f"convention {inputs[j].convention}", 1))
        keep = [j for j in range(len(inputs)) if j not in mismatched]
        ids, sources, inputs, measured, conv = ([xs[j] for j in keep] for xs in (ids, sources, inputs, measured, conv))
    keys: dict = {}
    for j, inp in enumerate(inputs):
        key = (repr(inp.model), id(inp.cluster), inp.config.dtype)
        keys.setdefault(key, []).append(j)
    groups = tuple((inputs[idx[0]].model, inputs[idx[0]].cluster,
                    ConfigBatch.from_configs([inputs[j].config for j in idx]), np.array(idx))
                   for idx in keys.values())
    conv_arr = np.array(conv, dtype=float).reshape(-1, 3)
    return Prepared(tuple(ids), tuple(sources), tuple(inputs), np.array(measured, dtype=float),
                    conv_arr[:, 0], conv_arr[:, 1], conv_arr[:, 2].astype(bool), groups)


def predict(prepared: Prepared, efficiency_by_generation=None, with_outputs: bool = False, progress=None):
    """Predicted metric of every prepared row (array aligned with ``prepared``); with
    ``with_outputs`` also a dict of per-row step-model outputs (``fits``) and
    ``efficiency_fitted`` (the efficiency model the row was predicted with ``is_fitted``).
    ``progress(rows_predicted)`` after each group (one step-model call)."""
    n = len(prepared)
    step = np.zeros(n)
    layer = np.zeros(n)
    fits = np.zeros(n, dtype=bool)
    fitted = np.zeros(n, dtype=bool)
    done = 0
    for g, (model, cluster, batch, idx) in enumerate(prepared.groups):
        eff = None
        if efficiency_by_generation is not None:
            eff = efficiency_by_generation.get(cluster.gpu.generation)
        if eff is None:
            eff = efficiency_for_cluster(cluster)
        out = evaluate(model, cluster, eff, batch, memory_by_part=prepared.group_memory(g, eff))
        step[idx] = out["step_time_s"]
        layer[idx] = out["layer_fwd_s"] + out["layer_bwd_s"] + out["layer_recompute_s"]
        fits[idx] = out["fits"]
        fitted[idx] = eff.is_fitted
        done += len(idx)
        if progress is not None:
            progress(done)
    t = np.where(prepared.layer_metric, layer, step)
    pred = prepared.scale * np.power(t, prepared.power)
    return (pred, {"fits": fits, "efficiency_fitted": fitted}) if with_outputs else pred
