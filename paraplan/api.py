"""Plain functions for notebooks: every answer is a pandas DataFrame with units in its column names.

Three verbs, one row per configuration:

* :func:`simulate` -- one model, one cluster, one parallel configuration -> one row;
* :func:`plan` -- the planner's ranked plans for a GPU count and a batch (``planners.plan``);
* :func:`sweep` -- :func:`simulate` (or :func:`plan`'s winner) once per value of one field.

The inputs are catalog names (``"llama3-70b"``, ``"dgx-h100"``) or spec objects, every
``ParallelConfig`` field as a keyword, and a few what-if fields that change the hardware or the
workload (``WHAT_IF_FIELDS``): ``gpu`` (swap the cluster's accelerator, keep its fabric),
``gpus`` (GPU count: ``dp`` is derived as gpus / (tp*pp*cp) unless given), ``scaleout_gbit_per_s``
and ``scaleup_gbit_per_s`` (per-GPU, one-direction bandwidth of the NICs / of NVLink, in Gb/s;
450 GB/s NVLink is 3600 Gb/s), ``hbm_gib`` / ``hbm_tb_per_s`` / ``peak_flops_scale`` (the GPU's
device memory in GiB, its memory bandwidth in TB/s as ``paraplan.serving_api`` names it, and a
factor on its dense peak FLOP/s: ``what_if_gpu``), ``seq_len``, ``global_batch_tokens`` (instead of ``global_batch``
sequences), ``model`` and ``cluster``.

A configuration runs a software stack (``stack=``, default ``megatron-core``, a catalog name or a
``StackSpec``) as ``paraplan simulate --stack`` does: the stack's documented behaviour
(``simulator.stack_defaults``) fills every software field not given, sequence parallelism too,
and the dtype defaults to the GPU's 16-bit type (fp16 on V100). So :func:`simulate` of the
planner's winner gives the planner's numbers.

Columns of a result row (``ROW_COLUMNS`` lists the first ones in order): ``config`` (a short
label), ``model``, ``cluster``, ``gpu``, ``stack``, ``n_gpus``, ``seq_len``, every ``ParallelConfig`` field,
``global_batch_tokens``, ``num_microbatches``, ``step_time_s``, the step-time parts
(``simulator.report.TIME_PARTS``, seconds), ``tokens_per_s``, ``tokens_per_s_per_gpu``,
``model_tflops_per_gpu``, ``mfu_bf16_pct``, ``hfu_bf16_pct`` (percent of the GPU's dense bf16
peak, as every command shows MFU: ``paraplan.mfu``; ``mfu_fp16_pct`` on V100), ``memory_gib`` and its parts (``weights_gib``, ...,
from ``MEMORY_PARTS``), ``hbm_gib``, ``headroom_gib`` (HBM left free; negative: GiB over the HBM for a row that does not fit),
``host_memory_gib`` (host memory per GPU that activation offload needs; 0 without offload), ``fits``
(with the headroom a run keeps and the host memory the job's hosts hold, ``simulator.headroom.step_fits``,
as ``paraplan simulate``), ``scaleout_gbit_per_s``, ``scaleup_gbit_per_s``,
``efficiency_fitted`` (False: the times rest on an unfitted prior efficiency model, see
``paraplan.priors``; say so beside any conclusion drawn from them), ``hbm_tb_per_s`` (the
device-memory bandwidth priced, TB/s = 10^12 bytes/s: the GPU's datasheet value or the
``hbm_tb_per_s`` what-if) and ``peak_flops_scale`` (the what-if's factor on the datasheet's peak
FLOP/s, 1.0 without one): so rows of sweeps over what-if hardware say what they were run on.

Example::

    >>> from paraplan import api
    >>> row = api.simulate("llama3-70b", "dgx-h100", gpus=64, tp=8, pp=4, micro_batch=1,
    ...                    global_batch=128, zero_stage=1, recompute="selective",
    ...                    sequence_parallel=True)
    >>> round(float(row.step_time_s.iloc[0]), 1) > 0
    True
    >>> df = api.sweep(dict(model="llama3.1-405b", cluster="dgx-h100", gpus=1024, tp=8, pp=16,
    ...                     global_batch_tokens=16 * 2**20, zero_stage=1, sequence_parallel=True,
    ...                     recompute="full"),
    ...                "scaleout_gbit_per_s", [100, 400, 800])
    >>> list(df.scaleout_gbit_per_s)
    [100.0, 400.0, 800.0]

Errors are ``hardware_specs.errors.InputError`` naming the field (an unknown sweep field, an
empty sweep, degrees that do not multiply to the GPU count, ...).
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import fields as dc_fields
from dataclasses import replace
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from cost_models.compute import (LOW_PRECISION, compute_rates, kernel_counting_rates,
                                 gemm_time_s, gemm_traffic_bytes, sixteen_bit_dtype)
from cost_models.layer_costs import (_attention_dims, attention_block_costs,
                                     attention_gemm_shapes, dense_mlp_costs, mlp_gemm_shapes)
from hardware_specs.catalog import DEFAULT_TRAINING_STACK, efficiency_for_cluster, load_cluster, load_gpu, load_stack
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError, as_given, refuse_missing, require_plausible, shown, suggest, whole_number
from hardware_specs.gpu_spec import MAX_HBM_BYTES, MAX_RATE_PER_S, MIN_HBM_BYTES, MIN_RATE_PER_S, GPUSpec
from hardware_specs.stack_spec import StackSpec
from model_specs.catalog import load_model
from model_specs.model_spec import SIZE_LIMITS, ModelSpec
from paraplan import priors
from paraplan.mfu import mfu_column, mfu_pct, mfu_pct_columns  # noqa: F401  (mfu_pct_columns: api's name too)
from paraplan.sweep_table import sweep_table
from simulator import headroom
from simulator.parallel_config import BOOL_FIELDS, MAX_GLOBAL_BATCH, MAX_GPUS, ParallelConfig
from planners.search_space import FIXABLE as SEARCH_FIXABLE
from simulator.report import MEMORY_PARTS, TIME_PARTS, StepReport
from simulator.simulate import simulate as _simulate
from simulator.stack_defaults import (check_default_expert_tp, check_stack_cp_kind, run_cp_kind, stack_config_fields,
                                      stack_expert_tp, stack_sequence_parallel, stack_zero_stage)

GIB = 2**30
GBIT = 1e9 / 8          # bytes/s in one Gb/s

#: every ``ParallelConfig`` field, in declaration order.
CONFIG_FIELDS = tuple(f.name for f in dc_fields(ParallelConfig))
#: fields that change the hardware, the workload or the software stack rather than the parallel
#: configuration.
WHAT_IF_FIELDS = ("model", "cluster", "gpu", "gpus", "seq_len", "global_batch_tokens",
                  "scaleout_gbit_per_s", "scaleup_gbit_per_s", "hbm_gib", "hbm_tb_per_s", "peak_flops_scale",
                  "stack")
#: what-if fields that change the GPU's own numbers (``what_if_gpu``), with their units
GPU_WHAT_IF_FIELDS = {"hbm_gib": "GiB of device memory per GPU",
                      "hbm_tb_per_s": "TB/s of device-memory bandwidth per GPU (10^12 bytes/s)",
                      "peak_flops_scale": "times the GPU's dense peak FLOP/s, every dtype"}
#: every field :func:`sweep` accepts.
SWEEP_FIELDS = WHAT_IF_FIELDS + CONFIG_FIELDS
#: memory columns (GiB) in the order of ``MEMORY_PARTS``.
MEMORY_COLUMNS = tuple(p.replace("_bytes", "_gib") for p in MEMORY_PARTS)
#: the leading columns of every result row.
ROW_COLUMNS = ("config", "model", "cluster", "gpu", "stack", "n_gpus", "seq_len") + CONFIG_FIELDS + (
    "global_batch_tokens", "num_microbatches", "step_time_s") + TIME_PARTS + (
    "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu_bf16_pct", "hfu_bf16_pct",
    "memory_gib") + MEMORY_COLUMNS + ("hbm_gib", "headroom_gib", "host_memory_gib", "fits",
                                      "scaleout_gbit_per_s", "scaleup_gbit_per_s", "efficiency_fitted",
                                      "hbm_tb_per_s", "peak_flops_scale")


def row_columns(gpu: GPUSpec) -> list[str]:
    """``ROW_COLUMNS`` with the MFU and HFU columns named for ``gpu``'s reference peak
    (``mfu_fp16_pct`` on a V100, ``paraplan.mfu``)."""
    names = {"mfu_bf16_pct": mfu_column(gpu), "hfu_bf16_pct": mfu_column(gpu, "hfu")}
    return [names.get(c, c) for c in ROW_COLUMNS]

#: the software stack a configuration runs unless told otherwise (as ``paraplan simulate``)
DEFAULT_STACK = DEFAULT_TRAINING_STACK

def _config_fields_typed(name: str) -> set[str]:
    """The ``ParallelConfig`` fields annotated with the type ``name`` (``int`` or ``float``)."""
    import dataclasses
    return {f.name for f in dataclasses.fields(ParallelConfig) if str(f.type) in (name, f"<class '{name}'>")}


#: fields a command-line value is read as a whole number / a number for (every ParallelConfig
#: field of that type: the layer counts, loss chunks and ZeRO groups too, not only the degrees)
_INT_FIELDS = {"dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "global_batch", "zero_stage",
               "gpus", "seq_len", "global_batch_tokens", "grouped_gemm_streams"} | _config_fields_typed("int")
_FLOAT_FIELDS = {"moe_load_imbalance", "scaleout_gbit_per_s", "scaleup_gbit_per_s"} | set(GPU_WHAT_IF_FIELDS) \
    | _config_fields_typed("float")
_BOOL_FIELDS = set(BOOL_FIELDS)


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------

def check_field(name: str) -> str:
    """``name`` if :func:`sweep` accepts it, else ``InputError`` with the closest known names."""
    if name == "headroom_gib":      # an input of simulate, and the rows' column of the HBM left free
        raise InputError("field", "headroom_gib is not a sweep axis: the rows' headroom_gib column is the HBM "
                         "each leaves free, not the headroom asked for", "give headroom_gib in the base (every "
                         "value is judged with it), or compare memory_gib + a headroom with hbm_gib")
    if name not in SWEEP_FIELDS:
        raise InputError("field", f"unknown field {name!r}", suggest(str(name), SWEEP_FIELDS))
    return name


#: digits past which an integer field's value is refused unread (every bound is far below)
_MAX_INT_DIGITS = 100


#: the unit a float field is given in, read from the end of its name, and a typical value (none
#: where the fields ending so differ too much for one)
_FIELD_UNITS = (("_gbit_per_s", "Gb/s", "400"), ("_tb_per_s", "TB/s", "3.35"), ("_gib", "GiB", "80"),
                ("_scale", "the factor", "1.5"), ("_imbalance", "the ratio", "1.2"),
                ("_fraction", "the fraction", "0.5"), ("_bytes", "bytes", None), ("_elements", "elements", None))


def _plain_number_fix(field: str) -> str:
    """The fix for a float ``field`` given as text that is not a number: its unit, read from its
    name (``scaleout_gbit_per_s`` is in Gb/s, ``hbm_tb_per_s`` in TB/s), and a typical value. Not
    the number the text starts with: '3350GB/s' is not 3350 TB/s, nor '50GB/s' 50 Gb/s."""
    unit, example = next(((u, e) for end, u, e in _FIELD_UNITS if field.endswith(end)), ("it", None))
    return f"give {unit} as a plain number" + (f", e.g. {example}" if example else ", without a unit")


def coerce_value(field: str, value: Any) -> Any:
    """``value`` (often a command-line string) converted to the type ``field`` takes.

    Integers for degrees, batch sizes, GPU counts and sequence lengths; floats for bandwidths and
    the MoE imbalance; booleans from ``true/false/1/0/yes/no/on/off``; strings otherwise.
    """
    check_field(field)
    if not isinstance(value, str):
        return value
    text = value.strip()
    if field == "global_batch_tokens":
        # as on the command line and in sweep files: 4Mi is 4,194,304 tokens, 4M is 4,000,000
        from paraplan.commands.token_count import parse_token_count
        count = parse_token_count(text[:40])
        if count is not None and len(text) <= 40:
            return count
    if field in _INT_FIELDS:
        # exactly, not through a float: 10**30 was quoted back as 1,000,000,000,000,000,019,884,624,838,656
        try:
            number = Decimal(text)
        except ArithmeticError:         # decimal.InvalidOperation: not a number
            raise InputError(field, f"expected an integer, got {shown(value)}") from None
        if not number.is_finite() or number != number.to_integral_value():
            raise InputError(field, f"expected an integer, got {shown(value)}")
        if number.adjusted() > _MAX_INT_DIGITS:      # 1e999999999 would be built digit by digit
            raise InputError(field, f"expected an integer, got {shown(value)}",
                             f"check the number: every bound is far below 10**{_MAX_INT_DIGITS}")
        return int(number)
    if field in _FLOAT_FIELDS:
        try:
            return float(text)
        except ValueError:
            raise InputError(field, f"expected a number, got {shown(value)}", _plain_number_fix(field)) from None
    if field in _BOOL_FIELDS:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise InputError(field, f"expected true or false, got {shown(value)}")
    return text


def _model(model: str | ModelSpec, seq_len: int | None) -> ModelSpec:
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    if seq_len is not None:
        spec = spec.with_seq_len(_whole_at_most("seq_len", seq_len, SIZE_LIMITS["seq_len"]))
    return spec


def _whole_at_most(field: str, value: Any, largest: int) -> int:
    """``value`` as an int (``whole_number``), or the error naming ``field`` as given when it is
    above ``largest`` (what it becomes inside, a model's seq_len or a configuration's dp, was named
    instead), quoting the value as given: a float 1e30 as ``1e+30``, not the made-up 31-digit
    integer ``int(1e30)`` is."""
    number = whole_number(field, value)
    if number > largest:
        raise InputError(field, f"{as_given(value)} is above the largest supported value {largest:,}",
                         "check the number")
    return number


def what_if_gpu(gpu: str | GPUSpec, hbm_gib: float | None = None, hbm_tb_per_s: float | None = None,
                peak_flops_scale: float | None = None) -> GPUSpec:
    """``gpu`` with another device memory (``hbm_gib``, GiB: the row's ``hbm_gib``), memory
    bandwidth (``hbm_tb_per_s``, TB/s = 10^12 bytes/s, as ``paraplan.serving_api``'s what-if) and/or
    dense peak FLOP/s (``peak_flops_scale`` times the datasheet's, every dtype alike, so MFU is of
    the scaled peak). Each value must be a positive finite number within plausible bounds; an
    ``InputError`` naming it otherwise. The GPU keeps its name, so its generation's efficiency
    model (and a cluster's measured one) applies: the kernels are taken to reach the same
    fractions of the new peaks. ``gpu``: a ``GPUSpec`` or a catalog name / YAML file, loaded as
    ``what_if_cluster`` loads one (a name had failed as a TypeError in ``dataclasses.replace``)."""
    refuse_missing(locals())
    gpu = gpu if isinstance(gpu, GPUSpec) else load_gpu(gpu)    # anything else: InputError naming gpu
    values = {"hbm_gib": hbm_gib, "hbm_tb_per_s": hbm_tb_per_s, "peak_flops_scale": peak_flops_scale}
    bounds = {"hbm_gib": (MIN_HBM_BYTES / GIB, MAX_HBM_BYTES / GIB), "hbm_tb_per_s": (1e-3, 1e3),
              "peak_flops_scale": (1e-3, 1e3)}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise InputError(name, f"must be a number ({GPU_WHAT_IF_FIELDS[name]}), got {shown(value)}",
                             "give it as a number, not text or a bool")
        try:
            require_plausible(name, value, *bounds[name])
        except InputError as exc:
            raise InputError(name, exc.message, f"give {GPU_WHAT_IF_FIELDS[name]}") from None
    changes: dict[str, Any] = {}
    if hbm_gib is not None:
        changes["hbm_bytes"] = float(hbm_gib) * GIB
    if hbm_tb_per_s is not None:
        changes["hbm_bw_bytes_per_s"] = float(hbm_tb_per_s) * 1e12
    if peak_flops_scale is not None:
        changes["peak_flops_per_s"] = {d: v * float(peak_flops_scale) for d, v in gpu.peak_flops_per_s.items()}
    return replace(gpu, **changes) if changes else gpu


def what_if_cluster(cluster: str | ClusterSpec, gpu: str | GPUSpec | None = None,
                    scaleout_gbit_per_s: float | None = None,
                    scaleup_gbit_per_s: float | None = None, *, hbm_gib: float | None = None,
                    hbm_tb_per_s: float | None = None, peak_flops_scale: float | None = None) -> ClusterSpec:
    """``cluster`` with another accelerator and/or other link bandwidths.

    ``gpu`` keeps the fabric (GPUs per node, NVLink and NIC bandwidths) and drops a measured
    efficiency model, which belongs to the machine it was measured on; the new GPU's generation
    model applies. Bandwidths are per GPU, one direction, in Gb/s. Where the fabric states a
    measured communicator bandwidth (what one NCCL communicator reached across its links, below
    what the links add up to), another scale-out bandwidth scales it by new / old: the fabric's
    measured shortfall stays, so the catalog's own bandwidth gives the catalog's times and more
    bandwidth never gives a slower step (dropping it made jean-zay-a100 at its own 50 Gb/s 15%
    faster than the catalog, and at 30 Gb/s faster too).

    ``hbm_gib``, ``hbm_tb_per_s`` and ``peak_flops_scale`` change the (new) GPU's own numbers and
    keep the efficiency model (``what_if_gpu``).
    """
    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    for name, value in (("scaleout_gbit_per_s", scaleout_gbit_per_s), ("scaleup_gbit_per_s", scaleup_gbit_per_s)):
        # '400' and True were read as numbers
        if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)):
            raise InputError(name, f"must be a number of Gb/s, got {shown(value)}", "e.g. 400")
        if value is not None:   # in Gb/s, under its own name (the link's bytes/s field was named)
            try:
                require_plausible(name, value, MIN_RATE_PER_S / GBIT, MAX_RATE_PER_S / GBIT)
            except InputError as exc:
                raise InputError(name, exc.message, "give the bandwidth per GPU, one direction, in Gb/s, e.g. 400") \
                    from None
    if gpu is not None:
        gpu_spec = gpu if isinstance(gpu, GPUSpec) else load_gpu(gpu)
        if gpu_spec != spec.gpu:        # another chip, or the same one with other numbers (a what-if)
            spec = replace(spec.with_gpu(gpu_spec), efficiency=None)
    if scaleout_gbit_per_s is not None:
        new_bw, link = float(scaleout_gbit_per_s) * GBIT, spec.scaleout
        cap = link.communicator_bus_bw_bytes_per_s
        spec = replace(spec, scaleout=replace(link, bw_bytes_per_s=new_bw, communicator_bus_bw_bytes_per_s=(
            None if cap is None else cap * new_bw / link.bw_bytes_per_s)))
    if scaleup_gbit_per_s is not None:
        spec = replace(spec, scaleup=replace(spec.scaleup, bw_bytes_per_s=float(scaleup_gbit_per_s) * GBIT))
    changed = what_if_gpu(spec.gpu, hbm_gib, hbm_tb_per_s, peak_flops_scale)
    return spec if changed is spec.gpu else spec.with_gpu(changed)


def _global_batch(fields: dict, seq_len: int) -> int:
    sequences = fields.pop("global_batch", None)
    tokens = fields.pop("global_batch_tokens", None)
    if sequences is not None and tokens is not None:
        raise InputError("global_batch", "give global_batch (sequences) or global_batch_tokens, not both")
    if sequences is not None:
        return _whole_at_most("global_batch", sequences, MAX_GLOBAL_BATCH)
    if tokens is None:
        raise InputError("global_batch", "missing", "give global_batch (sequences) or global_batch_tokens")
    tokens = coerce_value("global_batch_tokens", tokens)        # '2Mi' as sweep reads it: 2,097,152
    tokens = _whole_at_most("global_batch_tokens", tokens, MAX_GLOBAL_BATCH * seq_len)
    if tokens % seq_len:
        from planners.plan import whole_sequences_fix
        raise InputError("global_batch_tokens", f"{tokens} is not a multiple of the sequence length {seq_len}",
                         whole_sequences_fix(tokens, seq_len))
    return tokens // seq_len


def build_config(model: ModelSpec, gpus: int | None = None, **config_fields) -> ParallelConfig:
    """A ``ParallelConfig`` from keyword fields; ``dp`` = gpus / (tp*pp*cp) when not given.

    ``global_batch`` (sequences) or ``global_batch_tokens`` is required.
    """
    if not isinstance(model, ModelSpec):        # a name: load it, as simulate does
        model = _model(model, None)
    fields = dict(config_fields)
    unknown = [k for k in fields if k not in CONFIG_FIELDS and k != "global_batch_tokens"]
    if unknown:
        raise InputError(unknown[0], "unknown configuration field", suggest(unknown[0], SWEEP_FIELDS))
    fields["global_batch"] = _global_batch(fields, model.seq_len)
    if fields.get("dp") is None:
        fields.pop("dp", None)
        if gpus is not None:
            gpus = _whole_at_most("gpus", gpus, MAX_GPUS)
            per_replica = 1
            for name in ("tp", "pp", "cp"):
                value = fields.get(name)
                per_replica *= 1 if value is None else _whole_at_most(name, value, MAX_GPUS)
            if gpus % per_replica:
                raise InputError("gpus", f"{gpus} GPUs do not divide by tp*pp*cp = {per_replica}",
                                 f"use a multiple of {per_replica} GPUs or give dp")
            fields["dp"] = gpus // per_replica
    return ParallelConfig(**{k: v for k, v in fields.items() if v is not None})


# --------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------

#: the fields ``config_label`` reads
LABEL_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage", "zero_shard_group", "recompute",
                "recompute_num_layers", "recompute_layers_decrement", "offload_activation_layers",
                "sequence_parallel", "schedule", "dtype", "attention_kernel")


def _degree_piece(short: str):
    return lambda degree: f"{short}{int(degree)}" if int(degree) > 1 else ""


def _recompute_piece(recompute: Any, num_layers: Any, decrement: Any) -> str:
    recompute = str(recompute)
    if recompute == "none":
        return ""
    label = {"selective": "sel", "full": "full"}.get(recompute, recompute)
    if recompute == "full" and int(num_layers or 0) > 0:
        label += str(int(num_layers))
        if int(decrement or 0) > 0:
            label += f"d{int(decrement)}"
    return label


#: the label's pieces in order: (the fields a piece reads, their values -> the piece; "" leaves
#: it out). ``config_label`` joins them for one configuration, ``config_labels`` for a table.
_LABEL_PIECES = (
    # whole numbers as such: a table column with a hole (a sweep's infeasible point) holds them as
    # floats, and a sweep's labels read 'off3.0' where plan's read 'off3'
    (("dp",), lambda dp: f"dp{int(dp)}"),
    (("tp",), lambda tp: f"tp{int(tp)}"),
    (("pp",), lambda pp: f"pp{int(pp)}"),
    (("cp",), _degree_piece("cp")),
    (("ep",), _degree_piece("ep")),
    # the experts' tensor parallelism (``etp2``) where it splits them: 1 on every dense model
    (("etp",), _degree_piece("etp")),
    (("vpp",), _degree_piece("vpp")),
    (("micro_batch",), lambda mb: f"mb{int(mb)}"),
    (("zero_stage",), lambda z: f"z{int(z)}"),
    (("zero_shard_group",), lambda group: f"hsdp{int(group)}" if int(group or 0) > 0 else ""),
    (("recompute", "recompute_num_layers", "recompute_layers_decrement"), _recompute_piece),
    (("offload_activation_layers",), lambda layers: f"off{int(layers)}" if int(layers or 0) > 0 else ""),
    (("sequence_parallel",), lambda sp: "sp" if sp else ""),
    (("schedule",), lambda schedule: "" if str(schedule) in ("1f1b", "interleaved") else str(schedule)),
    (("dtype",), lambda dtype: "" if dtype == "bf16" else str(dtype)),
    (("attention_kernel",), lambda kernel: "" if str(kernel) == "auto" else f"attn-{kernel}"),
)
#: what ``config_label`` takes for an optional field its configuration lacks (dp, tp, pp,
#: micro_batch and zero_stage are required)
_LABEL_OPTIONAL = dict(cp=1, ep=1, etp=1, vpp=1, zero_shard_group=0, recompute="none", recompute_num_layers=0,
                       recompute_layers_decrement=0, offload_activation_layers=0, sequence_parallel=False,
                       schedule="1f1b", dtype="bf16", attention_kernel="auto")


#: the label's whole-number fields and their least value; those of ``_LABEL_WHOLE_OR_NONE`` may
#: also be None (as 0). 'x' or None as a degree was labelled 'dpx tpNone', and 'x' as cp failed
#: as int()'s ValueError.
_LABEL_WHOLE = dict(dp=1, tp=1, pp=1, cp=1, ep=1, etp=1, vpp=1, micro_batch=1, zero_stage=0)
_LABEL_WHOLE_OR_NONE = ("zero_shard_group", "recompute_num_layers", "recompute_layers_decrement",
                        "offload_activation_layers")


def _check_label_value(name: str, value: Any) -> None:
    """``InputError`` naming ``name`` unless ``value`` is what its label piece can show."""
    if name in _LABEL_WHOLE:
        whole_number(name, value, _LABEL_WHOLE[name])
    elif name in _LABEL_WHOLE_OR_NONE and value is not None:
        whole_number(name, value, 0)


def config_label(config: Mapping[str, Any]) -> str:
    """A short human label of a configuration, e.g. ``dp8 tp8 pp4 vpp5 mb1 z1 sel sp``.

    Memory features appear when used: ``hsdp8`` (ZeRO sharded over groups of 8), ``full2``
    (2 layers per chunk recomputed in full; ``full2d1``: one fewer per later stage), ``off24``
    (24 layers' activations per chunk offloaded to the host)."""
    if not isinstance(config, Mapping):
        raise InputError("config", f"must be a mapping of configuration fields, got {type(config).__name__}")
    missing = [n for names, _ in _LABEL_PIECES for n in names if n not in _LABEL_OPTIONAL and n not in config]
    if missing:
        raise InputError(missing[0], "missing from the configuration to label", "give every degree (dp, tp, pp, ...)")

    def value(name):
        v = config.get(name, _LABEL_OPTIONAL[name]) if name in _LABEL_OPTIONAL else config[name]
        _check_label_value(name, v)
        return v

    pieces = (piece(*(value(name) for name in names)) for names, piece in _LABEL_PIECES)
    return " ".join(p for p in pieces if p)


#: the key of a ``StepReport``'s ``extras`` that holds the headroom (bytes per GPU) a caller of
#: :func:`simulate_report` asked the run to keep (``headroom_gib``; absent: the default), as
#: ``paraplan simulate --json`` names it
HEADROOM_EXTRA = "headroom_required_bytes"


def report_row(report: StepReport, model: ModelSpec | None = None,
               cluster: ClusterSpec | None = None, stack: str | None = None,
               efficiency: EfficiencyModel | None = None, peak_flops_scale: float | None = None) -> dict:
    """One result row (a dict with the ``ROW_COLUMNS``) from a ``StepReport``; ``stack``: the name
    of the software stack it ran (None when not known); ``efficiency``: the efficiency model it
    was simulated with when not the cluster's own (``efficiency_fitted`` says whether that one is
    fitted); ``peak_flops_scale``: the ``what_if_gpu`` factor ``cluster``'s GPU peaks carry (None:
    none, 1.0). Without ``cluster`` the link and ``hbm_tb_per_s`` columns are NaN (not known),
    ``peak_flops_scale`` too unless given."""
    config = dict(report.config)
    row: dict[str, Any] = {"config": config_label(config), "model": report.model, "cluster": report.cluster,
                           "gpu": report.gpu, "stack": stack, "n_gpus": int(report.n_gpus),
                           "seq_len": int(round(report.tokens_per_step / config["global_batch"]))}
    row.update({k: config[k] for k in CONFIG_FIELDS})
    row["global_batch_tokens"] = int(round(report.tokens_per_step))
    row["num_microbatches"] = int(report.num_microbatches)
    row["step_time_s"] = float(report.step_time_s)
    row.update({k: float(report.time_breakdown_s[k]) for k in TIME_PARTS})
    for k in ("tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu"):
        row[k] = float(getattr(report, k))
    # MFU and HFU as every command shows them: percent of the reference (bf16) peak, not the
    # fraction of the row dtype's own peak the simulator reports (an fp8 row's is half of it)
    gpu = cluster.gpu if cluster is not None else load_gpu(report.gpu)
    for k in ("mfu", "hfu"):
        row[mfu_column(gpu, k)] = float(mfu_pct(float(getattr(report, k)), str(config["dtype"]), gpu))
    row["memory_gib"] = float(report.memory_bytes) / GIB
    for part, col in zip(MEMORY_PARTS, MEMORY_COLUMNS):
        row[col] = float(report.memory_breakdown_bytes[part]) / GIB
    row["hbm_gib"] = float(report.hbm_bytes) / GIB
    row["headroom_gib"] = float(report.headroom_bytes) / GIB
    # host memory per GPU that activation offload needs (as api.plan's and sweep_grid's column)
    row["host_memory_gib"] = float(report.extras.get("host_memory_bytes", 0.0)) / GIB
    # HBM with the headroom a run keeps (the one it was simulated with, ``simulate_report``'s
    # headroom_gib, else the default) and the host memory offload needs, as ``paraplan simulate``
    keep = report.extras.get(HEADROOM_EXTRA)
    row["fits"] = headroom.report_fits(report, None if keep is None else keep / GIB)
    row["scaleout_gbit_per_s"] = cluster.scaleout.bw_bytes_per_s / GBIT if cluster is not None else np.nan
    row["scaleup_gbit_per_s"] = cluster.scaleup.bw_bytes_per_s / GBIT if cluster is not None else np.nan
    row["efficiency_fitted"] = _efficiency_fitted(cluster, efficiency) if cluster is not None else None
    # the hardware what-ifs the row was priced with (the GPU's own numbers where none)
    row["hbm_tb_per_s"] = cluster.gpu.hbm_bw_bytes_per_s / 1e12 if cluster is not None else np.nan
    row["peak_flops_scale"] = (float(peak_flops_scale) if peak_flops_scale is not None
                               else 1.0 if cluster is not None else np.nan)
    return row


def _efficiency_fitted(cluster: ClusterSpec, efficiency: EfficiencyModel | None) -> bool:
    """Whether the times rest on a fitted efficiency model: ``efficiency`` where one was given,
    else the cluster's own (an unfitted prior given over a fitted cluster's was reported fitted)."""
    return bool(efficiency.is_fitted) if efficiency is not None else not priors.is_prior(cluster)


def with_stack_fields(model: ModelSpec, cluster: ClusterSpec, stack: str | StackSpec | None,
                      fields: Mapping[str, Any]) -> dict:
    """``fields`` with what ``stack`` does filled in where a field is not given (None counts as
    not given), as ``paraplan simulate --stack`` builds its configuration: the dtype defaults to
    the GPU's 16-bit type (``cost_models.compute.sixteen_bit_dtype``), the software fields to the
    stack's documented behaviour for this model, GPU and dtype
    (``simulator.stack_defaults.stack_config_fields``), sequence parallelism to the stack's
    recipes at this tensor degree, the expert tensor-parallel degree to the stack's
    (``simulator.stack_defaults.stack_expert_tp``), the context-parallel flavour to the stack's
    ``context_parallel_kind`` at cp > 1 (``simulator.stack_defaults.run_cp_kind``); a given flavour
    the stack does not run is refused (``simulator.stack_defaults.check_stack_cp_kind``)."""
    out = dict(fields)
    if out.get("dtype") is None:
        out["dtype"] = sixteen_bit_dtype(cluster.gpu)
    spec = _stack_spec(stack)
    gpu = cluster.gpu.name
    for key, value in stack_config_fields(spec, out["dtype"], model.name, gpu).items():
        if out.get(key) is None:
            out[key] = value
    if fields.get("optimizer_moment_bytes") is not None and fields.get("moments_in_param_dtype") is None:
        # an explicit moment width overrides a stack that keeps the moments in the weights' dtype
        out["moments_in_param_dtype"] = False
    if out.get("sequence_parallel") is None:
        tp = 1 if out.get("tp") is None else whole_number("tp", out["tp"])
        out["sequence_parallel"] = stack_sequence_parallel(spec, tp, model.name, gpu,
                                                           out["dtype"], model.moe is not None)
    if out.get("etp") is None:
        # the stack's expert tensor-parallel degree (``stack_expert_tp``), as `paraplan simulate` without --etp
        tp = 1 if out.get("tp") is None else whole_number("tp", out["tp"])
        ep = 1 if out.get("ep") is None else whole_number("ep", out["ep"])
        out["etp"] = stack_expert_tp(spec, tp, model.moe is not None, model.name, gpu, out["dtype"], ep)
    cp = 1 if out.get("cp") is None else whole_number("cp", out["cp"])
    if out.get("cp_kind") is None:
        # the flavour the stack's framework runs, as `paraplan simulate` without --cp-kind (ring at cp 1)
        out["cp_kind"] = run_cp_kind(cp, None, spec, model.name, gpu, out["dtype"])
    elif cp > 1:
        # a given flavour the stack's framework does not run is refused, as `paraplan simulate --cp-kind`
        check_stack_cp_kind(spec, out["cp_kind"], model.name, gpu, out["dtype"], flag="cp_kind=")
    return out


def _stack_spec(stack: Any) -> StackSpec:
    """``stack`` as a ``StackSpec``: None is the default stack (``DEFAULT_STACK``), a name or file
    is loaded (``load_stack``: anything but text an ``InputError`` naming ``stack``). Not by its
    truth value: 0, False and [] had silently run the default stack."""
    if isinstance(stack, StackSpec):
        return stack
    return load_stack(DEFAULT_STACK if stack is None else stack)


def _check_efficiency(efficiency: Any) -> None:
    """``InputError`` unless ``efficiency`` is None or an ``EfficiencyModel``."""
    if efficiency is not None and not isinstance(efficiency, EfficiencyModel):
        raise InputError("efficiency", f"must be an EfficiencyModel, got {type(efficiency).__name__}",
                         "load one with hardware_specs.catalog.efficiency_for_cluster, or leave it out")


def simulate_report(model: str | ModelSpec, cluster: str | ClusterSpec, *, gpus: int | None = None,
                    gpu: str | GPUSpec | None = None, seq_len: int | None = None,
                    scaleout_gbit_per_s: float | None = None, scaleup_gbit_per_s: float | None = None,
                    hbm_gib: float | None = None, hbm_tb_per_s: float | None = None,
                    peak_flops_scale: float | None = None,
                    efficiency: EfficiencyModel | None = None, stack: str | StackSpec = DEFAULT_STACK,
                    headroom_gib: float | None = None, **config_fields):
    """Like :func:`simulate` but returns ``(StepReport, ModelSpec, ClusterSpec)``.

    ``headroom_gib`` (GiB per GPU a run keeps free, ``paraplan simulate --headroom-gib``; None:
    ``simulator.headroom``'s 5% of HBM) is checked first, as the command does, and kept in the
    report's ``extras[HEADROOM_EXTRA]`` (bytes), from which :func:`report_row` judges ``fits``;
    ``headroom.report_fits(report, headroom_gib)`` gives the same answer."""
    # pandas' missing value (a DataFrame row's empty cell) named here, where every field arrives:
    # pd.NA reached the checks as "TypeError: boolean value of NA is ambiguous"
    refuse_missing({**locals(), **config_fields})
    _check_efficiency(efficiency)
    model_spec = _model(model, seq_len)
    cluster_spec = what_if_cluster(cluster, gpu, scaleout_gbit_per_s, scaleup_gbit_per_s, hbm_gib=hbm_gib,
                                   hbm_tb_per_s=hbm_tb_per_s, peak_flops_scale=peak_flops_scale)
    # a bad headroom fails before anything is computed (as paraplan simulate): negative, NaN, all of the HBM
    keep_gib = None if headroom_gib is None else headroom.headroom_gib(cluster_spec.gpu.hbm_bytes, headroom_gib)
    etp_given = config_fields.get("etp") is not None
    config_fields = with_stack_fields(model_spec, cluster_spec, stack, config_fields)
    if config_fields.get("zero_stage") is None:
        # dp and cp resolved before the stack's ZeRO stage is known: without the hybrid-sharding
        # group, which ParallelConfig refuses at ZeRO-0 (the default until the stack's is set)
        config = build_config(model_spec, gpus, **{**config_fields, "zero_shard_group": None})
    else:
        config = build_config(model_spec, gpus, **config_fields)
    if config_fields.get("zero_stage") is None:
        # the stack's documented sharding at the resolved dp and cp, as `paraplan simulate`
        # (``simulator.stack_defaults.stack_zero_stage``)
        spec = _stack_spec(stack)
        config_fields["zero_stage"] = stack_zero_stage(spec, config.dp, config.cp, model_spec.name,
                                                       cluster_spec.gpu.name, config.dtype)
        config = build_config(model_spec, gpus, **config_fields)
    if not etp_given:
        # the stack's default etp that does not fit, said as `paraplan simulate` says it
        check_default_expert_tp(_stack_spec(stack), model_spec, cluster_spec.gpu.name, config.dtype, config.dp,
                                config.cp, config.tp, config.ep, config.etp, flag="etp=")
    report = _simulate(model_spec, cluster_spec, config, n_gpus=gpus, efficiency=efficiency)
    if keep_gib is not None:
        report = replace(report, extras={**report.extras, HEADROOM_EXTRA: keep_gib * GIB})
    return report, model_spec, cluster_spec


def simulate(model: str | ModelSpec, cluster: str | ClusterSpec, **fields) -> pd.DataFrame:
    """Simulate one configuration; a one-row DataFrame (see the module docstring for columns).

    Args:
        model: preset name (``paraplan models list``), YAML path, or ``ModelSpec``.
        cluster: cluster name (``paraplan hardware list``), YAML path, or ``ClusterSpec``.
        **fields: ``ParallelConfig`` fields (``tp=8, pp=4, micro_batch=1, zero_stage=1,
            recompute="selective", sequence_parallel=True, ...``), ``global_batch`` (sequences)
            or ``global_batch_tokens``, and the what-if fields ``gpus``, ``gpu``, ``seq_len``,
            ``scaleout_gbit_per_s``, ``scaleup_gbit_per_s``, ``hbm_gib``, ``hbm_tb_per_s``,
            ``peak_flops_scale`` (``what_if_gpu``); ``headroom_gib`` (GiB per GPU the run keeps
            free, as ``paraplan simulate --headroom-gib`` and ``plan(headroom_gib=)``: ``fits``
            is peak memory + headroom <= HBM, and the host memory offload needs fits; default 5%
            of HBM, ``simulator.headroom``; the row's ``headroom_gib`` column stays the HBM left
            free); ``efficiency`` (an
            ``EfficiencyModel``) overrides the GPU generation's fitted one; ``stack`` (default
            ``megatron-core``) the software stack whose behaviour fills the fields not given
            (``zero_stage`` too: the stack's ``default_zero_stage``, 0 when dp*cp is 1).

    Example::

        >>> simulate("llama3-70b", "dgx-h100", gpus=64, tp=8, pp=4, global_batch=128,
        ...          zero_stage=1, sequence_parallel=True, recompute="selective")[
        ...     ["config", "step_time_s", "tokens_per_s", "mfu_bf16_pct", "memory_gib", "fits"]]  # doctest: +SKIP
    """
    report, model_spec, cluster_spec = simulate_report(model, cluster, **fields)
    stack = fields.get("stack")         # checked by simulate_report: None, a name or file, a StackSpec
    stack = DEFAULT_STACK if stack is None else stack
    stack_name = stack.name if isinstance(stack, StackSpec) else str(stack)
    return pd.DataFrame([report_row(report, model_spec, cluster_spec, stack_name, fields.get("efficiency"),
                                    fields.get("peak_flops_scale"))],
                        columns=row_columns(cluster_spec.gpu))


# --------------------------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------------------------

def _planner():
    try:
        import planners
        fn = getattr(planners, "plan", None)
        if fn is None:
            from planners.plan import plan as fn  # noqa: F811 - the planner's own module
        return fn
    except ImportError as exc:
        raise InputError("planner", f"the plan search is not available in this installation ({exc})",
                         "use simulate/sweep with explicit degrees") from None


def plan(model: str | ModelSpec, cluster: str | ClusterSpec, gpus: int, global_batch_tokens: int | str | None = None,
         *, gpu: str | GPUSpec | None = None, seq_len: int | None = None,
         scaleout_gbit_per_s: float | None = None, scaleup_gbit_per_s: float | None = None,
         hbm_gib: float | None = None, hbm_tb_per_s: float | None = None, peak_flops_scale: float | None = None,
         **constraints) -> pd.DataFrame:
    """The planner's ranked plans (fastest first) as a DataFrame: a thin wrapper of ``planners.plan``.

    ``model`` / ``cluster`` take names or specs, and the what-if fields of :func:`simulate`
    (``gpu``, ``seq_len``, bandwidths in Gb/s, ``hbm_gib``, ``hbm_tb_per_s``, ``peak_flops_scale``)
    change them first. ``gpus`` is a count or a range
    (``"256-1024"``). ``constraints`` go to the planner (``global_batch=``, ``max_tp=``,
    ``headroom_gib=``, ``schedules=``, ... : see ``planners.plan``), except that searched
    ``ParallelConfig`` fields given by name pin the search (``tp=8``, ``ep=[8, 16]``, ``vpp=1``)
    and ``dtype="fp8"`` sets the dtype. The planner's explanation of its winner is in
    ``.attrs["explain"]``. Each row names its plan with the ``ParallelConfig`` fields,
    so :mod:`paraplan.exports` can emit launch configs from it; a ``config`` label column is
    added when the planner did not provide one. Rows with ``pipeline_exact`` False (beyond the
    planner's top, Pareto and per-GPU-count candidates) carry the closed-form estimate of their
    pipeline makespan, an upper bound that may exceed what :func:`simulate` gives for the same
    plan; the rows that can rank first are exact. ``mfu_bf16_pct`` is against the GPU's bf16
    peak whatever dtype the plan runs in (the convention that compares plans across dtypes), so
    an FP8 / NVFP4 plan can exceed 100% (GPT-1T in NVFP4 on 1,024 B200 at a global batch of
    2,048: 124.7%); divide by the ratio of the dtype's peak to bf16's for the share of that
    dtype's peak.

    Example::

        >>> plans = plan("llama3-70b", "dgx-h100", gpus=256, global_batch_tokens=4 * 2**20)  # doctest: +SKIP
        >>> plans.iloc[0][["config", "tokens_per_s", "mfu_bf16_pct", "memory_gib"]]           # doctest: +SKIP
    """
    # pandas' missing value named, as simulate_report names it (pd.NA failed as a TypeError)
    refuse_missing({**locals(), **constraints})
    # a non-model efficiency ('hopper') reached the cost model as an AttributeError, as simulate refuses it
    _check_efficiency(constraints.get("efficiency"))
    fn = _planner()
    model_spec = _model(model, seq_len)
    cluster_spec = what_if_cluster(cluster, gpu, scaleout_gbit_per_s, scaleup_gbit_per_s, hbm_gib=hbm_gib,
                                   hbm_tb_per_s=hbm_tb_per_s, peak_flops_scale=peak_flops_scale)
    kwargs = _planner_kwargs(constraints)
    if global_batch_tokens is not None:     # '4Mi' as sweep and simulate read it: 4,194,304
        kwargs["global_batch_tokens"] = coerce_value("global_batch_tokens", global_batch_tokens)
    result = fn(model_spec, cluster_spec, gpus, **kwargs)
    df = getattr(result, "plans", result)             # planners.plan returns a PlanResult
    df = df if isinstance(df, pd.DataFrame) else pd.DataFrame(df)
    for col in df.columns:                            # categorical names -> plain strings
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(str)
    df = _with_plan_columns(df.reset_index(drop=True), model_spec, cluster_spec, gpus, constraints.get("efficiency"),
                            peak_flops_scale)
    df.attrs["explain"] = getattr(result, "explain", "")
    # how many configurations fit, of which the table keeps ``len(df)`` (``max_plans``): a
    # figure of the table says it was cut (``plots.pareto``); ``fit_exact`` False: "at least"
    df.attrs["fitting"] = int(getattr(result, "fitting", len(df)) or len(df))
    df.attrs["fit_exact"] = bool(getattr(result, "fit_exact", True))
    # the stack fields every row was priced with, per dtype (a row carries only its searched
    # fields; an export reads the rest, ``best_plan_for``)
    df.attrs["software"] = {d: dict(f) for d, f in getattr(result, "software", {}).items()}
    stack = DEFAULT_STACK if constraints.get("stack") is None else constraints["stack"]
    df.attrs["stack"] = stack.name if isinstance(stack, StackSpec) else str(stack)     # what it was priced on
    return df


#: ``ParallelConfig`` fields the planner searches; given to :func:`plan` as keywords they pin
#: the search (``tp=8`` or ``ep=[8, 16]``). The planner's own list, so the two cannot drift
#: (``zero_shard_group`` was missing here and refused).
PLANNER_FIXABLE = tuple(SEARCH_FIXABLE)


def _planner_kwargs(constraints: Mapping[str, Any]) -> dict:
    """Planner keyword arguments: ``ParallelConfig`` fields become ``fixed`` entries, ``dtype``
    becomes ``dtypes``, the stack's behaviour fields the planner does not search
    (``ep_dispatch_dedup=True``) override the ``stack``'s (``StackSpec.with_training``, as
    ``paraplan plan --ep-dispatch-dedup`` does), everything else passes through."""
    accepted = _planner_parameters()
    kwargs = dict(constraints)
    given = kwargs.pop("fixed", None)
    if given is not None and not isinstance(given, Mapping):
        raise InputError("fixed", f"must be a mapping of field -> value(s), got {shown(given)}", "e.g. fixed={'tp': 8}")
    fixed = dict(given or {})
    switches = {}
    for name in list(kwargs):
        if name in PLANNER_FIXABLE:
            value = kwargs.pop(name)
            if value is not None:
                fixed[name] = value
        elif name == "dtype":
            kwargs["dtypes"] = _planner_dtypes(kwargs.pop("dtype"), kwargs.get("dtypes"))
        elif _is_stack_switch(name, accepted):
            # a stack behaviour (ep_dispatch_dedup, ep_comm_overlap, ...): every plan runs with it,
            # as ``paraplan plan --ep-dispatch-dedup`` sets it on the stack (StackSpec.with_training)
            value = kwargs.pop(name)
            if value is not None:
                switches[name] = coerce_value(name, value)
        elif name in CONFIG_FIELDS and name not in accepted:
            # (one the planner takes itself passes through: global_batch, recompute_num_layers
            # with recompute fixed to full, as plan --recompute-num-layers)
            raise InputError(name, "the planner does not search this field",
                             "simulate the planner's winner with it instead (api.simulate)")
    if fixed:
        kwargs["fixed"] = fixed
    if switches and kwargs.get("stack", DEFAULT_STACK) is not None:     # (stack=None: the planner refuses it)
        stack = kwargs.get("stack", DEFAULT_STACK)
        spec = stack if isinstance(stack, StackSpec) else load_stack(stack)
        kwargs["stack"] = spec.with_training(**switches)
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:         # reached the planner as a TypeError ('unexpected keyword argument')
        raise InputError(unknown[0], "is neither a planner constraint nor a searched configuration field",
                         suggest(unknown[0], sorted(accepted | set(PLANNER_FIXABLE))))
    return kwargs


def _planner_parameters() -> set[str]:
    """The keyword arguments ``planners.plan`` takes."""
    import inspect
    from planners import plan as planner_plan
    return set(inspect.signature(planner_plan).parameters)


def _is_stack_switch(name: str, accepted: set[str]) -> bool:
    """True for a stack behaviour the planner does not search (``ep_comm_overlap``): given to
    :func:`plan` it is set on the stack every plan is priced with (``_planner_kwargs``)."""
    return name in CONFIG_FIELDS and name not in accepted and name in StackSpec.training_keys()


def stack_switches(constraints: Mapping[str, Any]) -> dict:
    """The stack switches among :func:`plan`'s ``constraints`` (``ep_comm_overlap=True``), as
    ``ParallelConfig`` fields: the winner re-simulated with them is priced as the planner priced
    it (``best_plan`` dropped them: Mixtral-8x7B on 64 H100 with ``ep_comm_overlap=True``,
    16.61 s and ``ep_comm_overlap`` False against the planner's 16.26 s)."""
    accepted = _planner_parameters()
    return {k: coerce_value(k, v) for k, v in constraints.items() if v is not None and _is_stack_switch(k, accepted)}


def _planner_dtypes(dtype: Any, dtypes: Any) -> Any:
    """The planner's ``dtypes`` for ``plan(dtype=...)``: one dtype, or a list of them to search
    (as ``paraplan plan --dtype`` repeats); None leaves ``dtypes`` as given (None: the GPU's
    16-bit type, as :func:`simulate` takes ``dtype=None``)."""
    if dtype is None:
        return dtypes
    from planners.plan import dtype_names
    return dtype_names(dtype, "dtype", "e.g. dtype='fp8' or dtype=['bf16', 'fp8']")


def _with_plan_columns(df: pd.DataFrame, model: ModelSpec, cluster: ClusterSpec, gpus: int,
                       efficiency: EfficiencyModel | None = None,
                       peak_flops_scale: float | None = None) -> pd.DataFrame:
    """Add the columns :func:`simulate` rows have and a planner table may lack (names, GiB, label,
    the hardware what-ifs); ``efficiency``: the model the search was given, if any;
    ``peak_flops_scale``: the ``what_if_gpu`` factor on ``cluster``'s GPU peaks (None: 1.0)."""
    df = mfu_pct_columns(df, cluster.gpu)
    for col, value in (("model", model.name), ("cluster", cluster.name), ("gpu", cluster.gpu.name),
                       ("n_gpus", gpus), ("seq_len", model.seq_len),
                       ("scaleout_gbit_per_s", cluster.scaleout.bw_bytes_per_s / GBIT),
                       ("scaleup_gbit_per_s", cluster.scaleup.bw_bytes_per_s / GBIT),
                       ("hbm_gib", cluster.gpu.hbm_bytes / GIB),
                       ("efficiency_fitted", _efficiency_fitted(cluster, efficiency)),
                       ("hbm_tb_per_s", cluster.gpu.hbm_bw_bytes_per_s / 1e12),
                       ("peak_flops_scale", 1.0 if peak_flops_scale is None else float(peak_flops_scale))):
        if col not in df.columns:
            df[col] = value
    if "memory_gib" not in df.columns and "memory_bytes" in df.columns:
        df["memory_gib"] = df["memory_bytes"] / GIB
    for part, col in zip(MEMORY_PARTS, MEMORY_COLUMNS):
        if col not in df.columns and part in df.columns:
            df[col] = df[part] / GIB
    if "global_batch" in df.columns and "global_batch_tokens" not in df.columns:
        df["global_batch_tokens"] = df["global_batch"] * model.seq_len
    if "config" not in df.columns and len(df) and all(k in df.columns for k in ("dp", "tp", "pp", "micro_batch",
                                                                                 "zero_stage")):
        df["config"] = config_labels(df)
    return df


def config_labels(df: pd.DataFrame) -> pd.Series:
    """``config_label`` of every row of ``df``; fields ``df`` lacks take ``ParallelConfig``'s
    defaults. Each piece of the label is made once per distinct value of the fields it reads (a
    plan table of tens of thousands of rows has a handful per field), then the pieces are
    joined column by column."""
    if not isinstance(df, pd.DataFrame):
        raise InputError("df", f"must be a DataFrame of configurations, got {type(df).__name__}",
                         "e.g. the table api.plan returns; config_label labels one configuration")
    defaults = ParallelConfig().as_dict()
    n = len(df)
    columns = {name: df[name].to_numpy() for name in LABEL_FIELDS if name in df.columns}
    joined = np.full(n, "", dtype=object)
    for names, piece in _LABEL_PIECES:
        present = [name for name in names if name in columns]
        key = np.zeros(n, dtype=np.int64)
        for name in present:          # one code per distinct combination of the piece's fields
            codes, uniques = pd.factorize(columns[name], use_na_sentinel=False)
            key = key * max(len(uniques), 1) + codes
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        # the distinct values as Python scalars (what a row of ``df.to_dict("records")`` holds)
        values = {name: columns[name][first].tolist() if name in columns else [defaults[name]] * len(first)
                  for name in names}
        for name in present:          # each distinct value, as config_label checks a row's
            for v in values[name]:
                _check_label_value(name, v)
        texts = [piece(*(values[name][i] for name in names)) for i in range(len(first))]
        joined = joined + np.array([" " + t if t else "" for t in texts] or [""], dtype=object)[inverse.ravel()]
    return pd.Series([label[1:] for label in joined], index=df.index, dtype=object)


#: plans :func:`best_plan`'s search keeps (``planners.plan(max_plans=...)``) unless told otherwise:
#: the winner and the runner-up its explanation compares it with. The planner then times only
#: the rows that can be among them (``planners.time_pruning``): the same winner with the same
#: numbers, in a fraction of the time (Llama-3.1-405B on 2,048 H100: 1.4 instead of 3.7 CPU s).
BEST_PLAN_KEEP = 2


def best_plan(model, cluster, gpus: int, global_batch_tokens: int | str | None = None, *,
              gpu: str | GPUSpec | None = None, seq_len: int | None = None,
              scaleout_gbit_per_s: float | None = None, scaleup_gbit_per_s: float | None = None,
              hbm_gib: float | None = None, hbm_tb_per_s: float | None = None,
              peak_flops_scale: float | None = None, **constraints) -> pd.DataFrame:
    """The planner's fastest plan, re-simulated: a one-row DataFrame with every :func:`simulate`
    column (memory parts included), plus the planner's explanation in ``.attrs["explain"]``.
    The search keeps ``BEST_PLAN_KEEP`` plans unless ``max_plans`` is given."""
    what_if = dict(gpu=gpu, seq_len=seq_len, scaleout_gbit_per_s=scaleout_gbit_per_s,
                   scaleup_gbit_per_s=scaleup_gbit_per_s, hbm_gib=hbm_gib, hbm_tb_per_s=hbm_tb_per_s,
                   peak_flops_scale=peak_flops_scale)
    constraints.setdefault("max_plans", BEST_PLAN_KEEP)
    plans = plan(model, cluster, gpus, global_batch_tokens, **what_if, **constraints)
    top = plans.iloc[0]
    config = {k: _plain(top[k]) for k in CONFIG_FIELDS if k in plans.columns}
    # the winner re-simulated on the stack the planner scored it with
    # ... and with the efficiency model it was searched with (without it the row was timed on
    # the cluster's own model: another step time than the table's winner)
    # ... and judged against the headroom it was planned with (plan(headroom_gib=0)'s winner, planned
    # to the last GiB, came back fits False against the default 5%)
    # ... and with the stack switches it was searched with (ep_comm_overlap=True: the planner's stack)
    row = simulate(model, cluster, **{k: v for k, v in what_if.items() if v is not None},
                   stack=constraints.get("stack"), efficiency=constraints.get("efficiency"),
                   headroom_gib=constraints.get("headroom_gib"), **{**config, **stack_switches(constraints)})
    row.attrs["explain"] = plans.attrs.get("explain", "")
    return row


def best_plan_for(framework: str, model, cluster, gpus: int, global_batch_tokens: int | str | None = None,
                  *, plans: pd.DataFrame | None = None, **kwargs) -> pd.DataFrame:
    """The fastest plan ``framework`` (megatron, torchtitan, deepspeed) can run as planned: the
    planner's ranked plans filtered by ``paraplan.exports.<framework>.refusal``, the fastest that
    runs by its exact step time (``exports.best_runnable`` with ``planners.refine.refine_table``:
    the table times exactly only the rows that can rank near its top), re-simulated like
    :func:`best_plan` (a one-row DataFrame, whose step time is that exact time). Its ``.attrs``
    hold ``rank`` (0-based, in the unrestricted ranking with the exact times computed) and
    ``slowdown`` (its step time over the unrestricted winner's, minus 1). ``plans``: the :func:`plan`
    table of this same request, when the caller has it already (the search is not run again).
    Without ``stack=`` the plans are ranked and re-simulated on the framework's own stack profile
    where paraplan has one (torchtitan), else on Megatron-Core's; a given table keeps the stack it
    was ranked on."""
    refuse_missing({**locals(), **kwargs})  # pd.NA named, as plan does
    from paraplan import exports
    exports.module(framework, "framework")          # unknown names fail before the search
    _check_efficiency(kwargs.get("efficiency"))     # a given table skips plan's own check
    if plans is not None and not isinstance(plans, pd.DataFrame):
        raise InputError("plans", f"must be the DataFrame api.plan returned, got {type(plans).__name__}",
                         "pass api.plan's table of this same request, or leave plans out")
    # every what-if of the search (GPU, sequence, links, HBM, peak FLOPs): the table is ranked, the
    # rows refined and the winner re-simulated on the same cluster
    what_if = {k: kwargs.pop(k) for k in ("gpu", "seq_len", "scaleout_gbit_per_s", "scaleup_gbit_per_s",
                                          "hbm_gib", "hbm_tb_per_s", "peak_flops_scale")
               if k in kwargs}
    # ranked and priced on the framework's own stack where the catalog has one (a torchtitan plan
    # on torchtitan's profile: paraplan.exports.default_stack), or on the one a given table was
    if kwargs.get("stack") is not None:
        _stack_spec(kwargs["stack"])        # 0, False or [] had silently run the default stack
    else:
        kwargs["stack"] = (plans.attrs.get("stack") if plans is not None else None) or exports.default_stack(framework)
    if plans is None:
        plans = plan(model, cluster, gpus, global_batch_tokens, **what_if, **kwargs)
    spec = _model(model, what_if.get("seq_len"))
    cluster_spec = what_if_cluster(cluster, what_if.get("gpu"), what_if.get("scaleout_gbit_per_s"),
                                   what_if.get("scaleup_gbit_per_s"), hbm_gib=what_if.get("hbm_gib"),
                                   hbm_tb_per_s=what_if.get("hbm_tb_per_s"),
                                   peak_flops_scale=what_if.get("peak_flops_scale"))
    _check_given_plans(plans, spec, cluster_spec, gpus, global_batch_tokens, kwargs.get("global_batch"))
    software = plans.attrs.get("software")
    if not software:        # a table not from :func:`plan`: the stack's fields for each of its dtypes
        from hardware_specs.catalog import load_stack
        from simulator.stack_defaults import stack_config_fields
        stack = load_stack(kwargs["stack"])
        gpu = cluster_spec.gpu.name
        software = {str(d): stack_config_fields(stack, str(d), spec.name, gpu) for d in pd.unique(plans["dtype"])}
    # the rows past the table's top carry an estimated time: the runnable ones that could beat
    # the first runnable row are timed exactly with the search's own inputs, as simulate does
    from functools import partial
    from planners.refine import refine_table
    eff = kwargs.get("efficiency")
    refine = partial(refine_table, spec, cluster_spec,
                     eff if eff is not None else efficiency_for_cluster(cluster_spec), software=software)
    row, rank, slowdown = exports.best_runnable(plans, framework, software=software, refine=refine, model=spec,
                                                seq_len=spec.seq_len)
    config = {k: _plain(row[k]) for k in CONFIG_FIELDS if k in row}
    out = simulate(model, cluster, **{k: v for k, v in what_if.items() if v is not None},
                   stack=kwargs["stack"], efficiency=eff, headroom_gib=kwargs.get("headroom_gib"), **config)
    out.attrs.update(rank=rank, slowdown=slowdown, explain=plans.attrs.get("explain", ""))
    return out


#: the columns :func:`best_plan_for` reads from a given plan table (an export needs the degrees and
#: the batch; the ranking the step time and tokens/s; the stack fields are looked up by dtype)
PLANS_REQUIRED_COLUMNS = ("tp", "pp", "micro_batch", "global_batch", "dtype", "step_time_s", "tokens_per_s")


def _check_given_plans(plans: pd.DataFrame, model: ModelSpec, cluster: ClusterSpec, gpus: Any,
                       global_batch_tokens: Any, global_batch: Any) -> None:
    """``InputError`` unless the table given to :func:`best_plan_for` is of the request it answers:
    each column it records (model, cluster, GPU, sequence length, bandwidths, GPU count, batch)
    holds the requested value on every row. A table of another request was ranked and then
    re-simulated under this request's labels (Llama-3-70B's 64-GPU plan came back as Llama-3-8B's)."""
    missing = [c for c in PLANS_REQUIRED_COLUMNS if c not in plans.columns]
    if missing:         # a KeyError ('dtype', 'tokens_per_s') deep in the ranking before
        raise InputError("plans", f"the table lacks the column{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)}", "pass api.plan's table of this same request, or leave plans out")
    wanted = {"model": model.name, "cluster": cluster.name, "gpu": cluster.gpu.name, "seq_len": model.seq_len,
              "scaleout_gbit_per_s": cluster.scaleout.bw_bytes_per_s / GBIT,
              "scaleup_gbit_per_s": cluster.scaleup.bw_bytes_per_s / GBIT}
    if isinstance(gpus, numbers.Integral) and not isinstance(gpus, bool):     # a range ("256-1024") spans counts
        wanted["n_gpus"] = int(gpus)
    if global_batch_tokens is not None:
        wanted["global_batch_tokens"] = coerce_value("global_batch_tokens", global_batch_tokens)
    if global_batch is not None:
        wanted["global_batch"] = global_batch
    for col, value in wanted.items():
        if col not in plans.columns or not len(plans):
            continue
        have = pd.unique(plans[col])
        try:
            same = (np.allclose(have.astype(float), float(value), rtol=1e-9) if isinstance(value, numbers.Real)
                    else all(str(v) == str(value) for v in have))
        except (TypeError, ValueError):       # text in a numeric column
            same = False
        if not same:
            shown = ", ".join(str(_plain(v)) for v in have[:3]) + (", ..." if len(have) > 3 else "")
            raise InputError("plans", f"the table's {col} is {shown}, the request's {value}",
                             "pass api.plan's table of this same request, or leave plans out")


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


# --------------------------------------------------------------------------------------------
# sweep
# --------------------------------------------------------------------------------------------

def sweep(base: Mapping[str, Any], field: str, values: Iterable[Any], *, best: bool = False,
          on_error: str = "raise", progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Run :func:`simulate` once per value of ``field``; one row per value, in order.

    Args:
        base: keyword arguments of :func:`simulate`, including ``model`` and ``cluster``
            (e.g. ``dict(model="llama3-70b", cluster="dgx-h100", gpus=256, tp=8, pp=4,
            global_batch_tokens=4 * 2**20, zero_stage=1)``).
        field: any of ``SWEEP_FIELDS``: ``gpu`` (kind), ``gpus`` (count: dp follows unless base
            fixes it), ``scaleout_gbit_per_s`` / ``scaleup_gbit_per_s`` (Gb/s per GPU), ``hbm_gib``
            (GiB), ``hbm_tb_per_s`` (TB/s), ``peak_flops_scale`` (x the GPU's peak FLOP/s),
            ``model`` (preset name), ``cluster``, ``seq_len``, ``global_batch`` /
            ``global_batch_tokens``, ``stack`` (a software stack's name or file), or any
            ``ParallelConfig`` field.
        values: the values to try (strings are converted with :func:`coerce_value`).
        best: instead of simulating ``base``'s configuration, ask the planner for its best plan
            at each value (``base`` then holds ``model``, ``cluster``, ``gpus``,
            ``global_batch_tokens`` and planner constraints).
        on_error: ``"raise"`` (default) stops at the first invalid value; ``"skip"`` records the
            message in an ``error`` column and leaves the numbers empty for that value: its
            row has every result column, NaN/None there (``paraplan.sweep_table``); an integer or
            bool column a failure leaves a hole in is pandas' nullable ``Int64`` / ``boolean``
            (``tp`` stays 8), without a failure the columns keep their plain dtypes.
        progress: called ``progress(done, total)`` before the first value and after each (a
            ``best`` sweep runs a plan search per value: seconds each), as ``paraplan plot``
            shows it (``paraplan.cli.StepBar``).

    Returns:
        A DataFrame with a ``sweep_field`` and a ``sweep_value`` column in front of the result
        columns.

    Raises:
        InputError: unknown ``field`` (with the closest names), empty ``values``, or (with
            ``on_error="raise"``) an invalid configuration at some value.

    Example::

        >>> sweep(dict(model="llama3-70b", cluster="dgx-h100", tp=8, pp=4, global_batch=256,
        ...            zero_stage=1, sequence_parallel=True, recompute="selective"),
        ...       "gpus", [64, 128, 256])[["gpus", "tokens_per_s", "mfu_bf16_pct"]]        # doctest: +SKIP
    """
    refuse_missing({"field": field, "on_error": on_error, "best": best})     # pd.NA: a TypeError in the checks
    if not isinstance(best, (bool, np.bool_)):      # 'abc', nan, -8 or [8] ran the planner by their truth value
        raise InputError("best", f"must be True or False, got {shown(best)}",
                         "best=True asks the planner for its best plan at each value; leave it out to simulate base")
    best = bool(best)
    check_field(field)
    if on_error not in ("raise", "skip"):
        raise InputError("on_error", f"must be 'raise' or 'skip', got {shown(on_error)}")
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    if values is not None and not isinstance(values, Iterable):
        raise InputError("values", f"must be a list of values, got {shown(values)}", f"e.g. [{values!r}]")
    values = list(values) if values is not None else []
    if not values:
        raise InputError("values", f"empty sweep over {field}", "give at least one value")
    if not isinstance(base, Mapping):
        raise InputError("base", f"must be a mapping of simulate's keywords, got {type(base).__name__}",
                         "e.g. dict(model='llama3-70b', cluster='dgx-h100', gpus=64, global_batch=128)")
    base = dict(base)
    if "model" not in base and field != "model":
        raise InputError("model", "missing from the sweep's base", "add model='llama3-70b' (a preset name)")
    if "cluster" not in base and field != "cluster":
        raise InputError("cluster", "missing from the sweep's base", "add cluster='dgx-h100'")
    rows, failed = [], []
    if progress is not None:
        progress(0, len(values))
    for raw in values:
        value = coerce_value(field, raw)
        kwargs = dict(base)
        kwargs[field] = value
        if field == "global_batch":
            kwargs.pop("global_batch_tokens", None)
        elif field == "global_batch_tokens":
            kwargs.pop("global_batch", None)
        try:
            if best:
                model, cluster, gpus = kwargs.pop("model"), kwargs.pop("cluster"), kwargs.pop("gpus", None)
                if gpus is None:
                    raise InputError("gpus", "missing", "the planner needs a GPU count")
                df = best_plan(model, cluster, gpus, **kwargs)
            else:
                df = simulate(kwargs.pop("model"), kwargs.pop("cluster"), **kwargs)
            row = df.iloc[0].to_dict()
            row["error"] = ""
        except InputError as exc:
            if on_error == "raise":
                raise
            row = {"error": str(exc)}
        failed.append(bool(row["error"]))
        row = {"sweep_field": field, "sweep_value": value, **row}
        if field in ("gpus", "hbm_tb_per_s", "peak_flops_scale"):   # a failed row's too
            row[field] = value
        rows.append(row)
        if progress is not None:
            progress(len(rows), len(values))
    # a failed value's row has every result column, empty (a sweep whose values all failed had
    # none: df.tokens_per_s was a KeyError), and one failure no longer turns tp 8 into 8.0
    template = (["sweep_field", "sweep_value", *_sweep_row_columns(base, field, values), "error"]
                + ([field] if field == "gpus" else [])) if all(failed) else []
    df = sweep_table(rows, failed, template)
    if "gpus" not in df.columns and "n_gpus" in df.columns:
        df["gpus"] = df["n_gpus"]
    if on_error == "raise" and "error" in df.columns:
        df = df.drop(columns="error")
    return df


def _sweep_row_columns(base: Mapping[str, Any], field: str, values: list) -> list[str]:
    """The result columns of a :func:`simulate` row (``row_columns``) for the sweep's cluster and
    GPU, for a sweep none of whose values ran: the MFU column named for that GPU where the names
    resolve, the bf16 names where they do not."""
    for raw in values:
        kwargs = {**base, field: raw}
        try:
            return row_columns(what_if_cluster(kwargs.get("cluster"), kwargs.get("gpu")).gpu)
        except (InputError, TypeError, ValueError):
            continue
    return list(ROW_COLUMNS)


# --------------------------------------------------------------------------------------------
# A layer's operations, for a roofline
# --------------------------------------------------------------------------------------------

def layer_ops(model: str | ModelSpec, cluster: str | ClusterSpec, *, gpu: str | GPUSpec | None = None,
              tp: int = 1, micro_batch: int = 1, seq_len: int | None = None, cp: int = 1, ep: int = 1,
              dtype: str | None = None, efficiency: EfficiencyModel | None = None,
              stack: str | StackSpec | None = None) -> pd.DataFrame:
    """The operations of one transformer layer (plus the LM head) on one GPU, for a roofline
    (``dtype`` default: the GPU's 16-bit type).

    Shapes follow ``cost_models.layer_costs`` (tensor parallelism splits heads and FFN columns;
    M = tokens per micro-batch on the GPU, ``micro_batch * seq_len / cp``); times come from
    ``cost_models.compute`` (the simulator's roofline with the generation's achieved efficiency),
    so ``achieved_tflop_per_s`` is what the simulator assumes each op reaches.

    An MoE layer's ops are those ``cost_models.moe.moe_mlp_costs`` times, on one GPU of an
    ``ep``-way expert-parallel group (expert tensor parallelism 1, balanced load): the router
    GEMM (M = the ``tokens / tp`` tokens the GPU routes, N = experts), LatentMoE's projections,
    each routed-expert matrix as one grouped GEMM (``moe.routed_expert_gemms``: ``groups`` = the
    E / ep local experts, M = ``tokens / tp x top_k x ep / E`` rows each, timed by
    ``moe.grouped_gemm_time_s`` with ``stack``'s ``grouped_gemm_streams``; FLOPs and bytes are
    the whole group's), and the shared experts (one dense MLP over all ``tokens``). The expert
    GEMMs' M, and so where they sit on the roofline, grows with ``ep``: DeepSeek-V3's at tp 1
    are 128 rows each at ep 1 (memory-bound), 1,024 at ep 8.

    The quantisation casts of a low-precision ``dtype`` are those ``stack``'s recipe runs (FP8
    current scaling's amax pass, NVFP4's fused copies: ``layer_costs.linear_cast_bytes``).

    Bytes are the compulsory traffic: a GEMM reads both operands once and writes its output
    (as ``gemm_time_s`` counts them); the fused attention core reads Q, K, V and writes O once;
    the element-wise kernels (norms, residual adds, activation; sequence-parallel split) move
    what ``layer_costs`` charges them. Their FLOPs are nominal per-element counts (the cost
    model times them by bytes only), enough to place them on the memory-bound side.

    Columns: ``op``, ``pass`` (forward/backward), ``m``, ``n``, ``k`` (GEMMs; NaN for attention),
    ``groups`` (the problems of a grouped GEMM, each (m, n, k); 1 for the others),
    ``flops``, ``bytes``, ``time_s``, ``intensity_flop_per_byte``, ``achieved_tflop_per_s``,
    and, repeated on every row for the roofline, ``peak_tflop_per_s``, ``hbm_tb_per_s``,
    ``achieved_peak_tflop_per_s`` (plateau GEMM rate), ``achieved_hbm_tb_per_s``, ``gpu``, ``dtype``,
    ``efficiency_fitted`` (False: the achieved rates are an unfitted prior's).
    """
    refuse_missing(locals())  # pd.NA named, as simulate does
    # whole numbers >= 1, as simulate takes them: -1 gave negative times, nan NaNs, 2.5 was
    # truncated, '2' and cp=0 failed inside (TypeError, ZeroDivisionError)
    tp, micro_batch, cp = (_whole_at_most(name, value, MAX_GPUS) for name, value in
                           (("tp", tp), ("micro_batch", micro_batch), ("cp", cp)))
    model_spec = _model(model, seq_len)
    if model_spec.num_heads % tp:
        # as simulate refuses it: tensor parallelism splits whole attention heads
        raise InputError("tp", f"{tp} does not divide the {model_spec.num_heads} attention heads of {model_spec.name}",
                         "use a tp dividing the head count")
    cluster_spec = what_if_cluster(cluster, gpu)
    g = cluster_spec.gpu
    # None is the 16-bit type; 0, '' or False were silently taken as it, and a list failed as a
    # TypeError (unhashable) in the GPU's peak lookup
    if dtype is None:
        dtype = sixteen_bit_dtype(g)
    elif not isinstance(dtype, str) or not dtype.strip():
        raise InputError("dtype", f"must be a dtype name, got {shown(dtype)}",
                         "choose one of " + ", ".join(g.peak_flops_per_s) + ", or leave it out for the 16-bit type")
    _check_efficiency(efficiency)
    eff = efficiency if efficiency is not None else efficiency_for_cluster(cluster_spec)
    rates = compute_rates(g, eff, dtype)
    if model_spec.seq_len % cp:
        raise InputError("cp", f"cp={cp} does not divide the sequence length {model_spec.seq_len}")
    tokens = micro_batch * model_spec.seq_len // cp
    ep = _whole_at_most("ep", ep, MAX_GPUS)
    moe = model_spec.moe
    if ep > 1 and (moe is None or moe.num_experts % ep):
        raise InputError("ep", f"{ep} does not divide the {moe.num_experts if moe else 0} experts of {model_spec.name}",
                         "use an ep dividing the expert count (1 for a dense model)")
    rows = []

    def gemm(op: str, n: float, k: float, op_rates=rates, m: float = tokens) -> None:
        m, n, k = float(m), float(n), float(k)
        flops = 2.0 * m * n * k
        traffic = float(gemm_traffic_bytes(m, n, k, op_rates))
        t = float(gemm_time_s(m, n, k, op_rates))
        rows.append({"op": op, "pass": "forward", "m": m, "n": n, "k": k, "groups": 1.0, "flops": flops,
                     "bytes": traffic, "time_s": t})

    names = ["attention qkv projection", "attention output projection"]
    if model_spec.mla is not None:
        names = [f"mla projection {i + 1}" for i in range(len(attention_gemm_shapes(model_spec, tp)))]
    for name, (n, k) in zip(names, attention_gemm_shapes(model_spec, tp)):
        gemm(name, n, k)
    mlp_names = ["mlp up+gate projection" if model_spec.gated_mlp else "mlp up projection", "mlp down projection"]
    ffn = moe.expert_ffn_hidden_size if moe is not None else model_spec.ffn_hidden_size
    if moe is None:
        for name, (n, k) in zip(mlp_names, mlp_gemm_shapes(model_spec.hidden_size, ffn, model_spec.gated_mlp, tp)):
            gemm(name, n, k)
    else:
        _moe_gemms(gemm, rows, model_spec, rates, tokens, tp, ep, mlp_names,
                   _grouped_gemm_streams(stack, dtype, model_spec, g))
    # the output layer stays 16-bit under the low-precision recipes (as the simulator times it)
    head_rates = compute_rates(g, eff, sixteen_bit_dtype(g)) if dtype in LOW_PRECISION else rates
    gemm("lm head (last stage)", model_spec.vocab_size / tp, model_spec.hidden_size, head_rates)

    # the simulator's own attention-block costs (core FLOPs and times, element-wise, casts), the
    # quantisation as ``stack``'s recipe runs it
    software = _stack_software(stack, dtype, model_spec, g)
    quant = dict(current_scaling=software.get("fp8_current_scaling", False),
                 rht_cast_fusion=software.get("nvfp4_rht_cast_fusion", False))
    attn = attention_block_costs(model_spec, rates, tokens, model_spec.seq_len, tp, True, **quant)
    qk, v = _attention_dims(model_spec)
    heads = model_spec.num_heads / tp
    kv_heads = max(model_spec.num_kv_heads / tp, 1.0)
    core_flops = float(attn["core_flops_fwd"])
    fwd_s, bwd_s = attn["core_fwd_s"], attn["core_bwd_s"]
    qkvo = tokens * (heads * qk + kv_heads * (qk + v) + heads * v) * rates.act_bytes
    rows.append({"op": "attention core (flash)", "pass": "forward", "m": np.nan, "n": np.nan, "k": np.nan, "groups": 1.0,
                 "flops": core_flops, "bytes": qkvo, "time_s": float(fwd_s)})
    rows.append({"op": "attention core (flash)", "pass": "backward", "m": np.nan, "n": np.nan, "k": np.nan,
                 "flops": 2.5 * core_flops, "bytes": 2.0 * qkvo, "time_s": float(bwd_s)})

    # Norms, residual adds and the MLP activation: bytes recovered from the simulator's own
    # memory-bound times (minus the launch overheads); FLOPs are nominal counts per element
    # (RMSNorm 4, residual add 1, SwiGLU 5 / GeLU 8), since the cost model times them by bytes only.
    mlp = dense_mlp_costs(model_spec, rates, tokens, tp, True, ffn=ffn, **quant)
    elem_flops = tokens * (2 * (4 + 1) * model_spec.hidden_size / tp
                           + (5.0 if model_spec.gated_mlp else 8.0) * ffn / tp)
    # the same blocks timed with free work count their kernels (``compute.kernel_counting_rates``)
    counting = kernel_counting_rates(rates)
    attn_n = attention_block_costs(model_spec, counting, tokens, model_spec.seq_len, tp, True, **quant)
    mlp_n = dense_mlp_costs(model_spec, counting, tokens, tp, True, ffn=ffn, **quant)
    for pass_, key, flops in (("forward", "elem_fwd_s", elem_flops), ("backward", "elem_bwd_s", 2.0 * elem_flops)):
        elem_s = float(attn[key] + mlp[key])
        kernels = float(attn_n[key] + mlp_n[key])
        elem_bytes = (elem_s - kernels * rates.kernel_overhead_s) * rates.hbm_bytes_per_s
        rows.append({"op": "norms, residual adds, activation", "pass": pass_, "m": np.nan, "n": np.nan,
                     "k": np.nan, "flops": flops, "bytes": elem_bytes, "time_s": elem_s})
    for pass_, key in (("forward", "cast_fwd_s"), ("backward", "cast_bwd_s")):
        cast_s = float(attn[key] + mlp[key])
        if cast_s > 0:     # low-precision GEMMs: quantisation kernels (layer_costs.linear_cast_bytes)
            rows.append({"op": f"{dtype} quantisation casts", "pass": pass_, "m": np.nan, "n": np.nan,
                         "k": np.nan, "flops": 0.0, "time_s": cast_s,
                         # the kernels' bytes: the time less each kernel's fixed part, at the memory rate
                         "bytes": (cast_s - float(attn_n[key] + mlp_n[key]) * rates.kernel_overhead_s)
                         * rates.hbm_bytes_per_s})

    df = pd.DataFrame(rows)
    df["groups"] = df["groups"].fillna(1.0)
    df["intensity_flop_per_byte"] = df["flops"] / df["bytes"]
    df["achieved_tflop_per_s"] = df["flops"] / df["time_s"] / 1e12
    df["peak_tflop_per_s"] = g.peak_flops(dtype) / 1e12
    df["hbm_tb_per_s"] = g.hbm_bw_bytes_per_s / 1e12
    df["achieved_peak_tflop_per_s"] = rates.gemm_flops_per_s / 1e12
    df["achieved_hbm_tb_per_s"] = rates.hbm_bytes_per_s / 1e12
    df["gpu"] = g.name
    df["dtype"] = dtype
    df["model"] = model_spec.name
    df["tp"] = tp
    df["ep"] = ep
    df["tokens"] = tokens
    df["efficiency_fitted"] = bool(eff.is_fitted)   # the achieved rates rest on this efficiency model
    return df


def _stack_software(stack, dtype: str, model: ModelSpec, gpu: GPUSpec) -> dict:
    """``stack``'s ``ParallelConfig`` software fields for a run of ``model`` in ``dtype`` on ``gpu``
    (``simulate``'s default stack when None)."""
    return stack_config_fields(_stack_spec(stack), dtype, model.name, gpu.name)


def _grouped_gemm_streams(stack, dtype: str, model: ModelSpec, gpu: GPUSpec) -> int:
    """``stack``'s ``grouped_gemm_streams`` for a run of ``model`` in ``dtype`` (``simulate``'s
    default stack when None), as the simulator times the routed experts' grouped GEMMs."""
    return int(_stack_software(stack, dtype, model, gpu).get("grouped_gemm_streams", 1))


def _moe_gemms(gemm, rows: list, model: ModelSpec, rates, tokens: int, tp: int, ep: int, mlp_names: list,
               streams: int) -> None:
    """``layer_ops``'s rows of an MoE block's GEMMs, with the shapes and time functions of
    ``cost_models.moe.moe_mlp_costs`` (expert tensor parallelism 1, balanced load)."""
    from cost_models.moe import grouped_gemm_time_s, routed_expert_gemms, shared_ffn_total
    from cost_models.params import routed_expert_width
    moe, h = model.moe, model.hidden_size
    routed, m_exp, local, shapes = routed_expert_gemms(model, tokens, ep, 1, 1.0, tp)
    routed, m_exp, local = float(routed), float(m_exp), float(local)
    gemm("router", moe.num_experts, h, m=routed)
    if moe.latent_size:
        d_e = routed_expert_width(model)
        gemm("latent down projection", d_e, h, m=routed)
        gemm("latent up projection", h, d_e, m=routed)
    for name, (n, k) in zip(mlp_names, shapes):
        n, k = float(n), float(k)
        rows.append({"op": f"expert {name} (grouped)", "pass": "forward", "m": m_exp, "n": n, "k": k,
                     "groups": local, "flops": 2.0 * m_exp * n * k * local,
                     "bytes": local * float(gemm_traffic_bytes(m_exp, n, k, rates)),
                     "time_s": float(grouped_gemm_time_s(m_exp, n, k, local, rates, streams=streams))})
    f_sh = shared_ffn_total(model)
    if f_sh:
        for name, (n, k) in zip(mlp_names, mlp_gemm_shapes(h, f_sh, model.gated_mlp, tp)):
            gemm(f"shared expert {name}", n, k)


def moe_is_modelled(model: str | ModelSpec = "mixtral-8x7b", cluster: str | ClusterSpec = "dgx-h100") -> bool:
    """Whether ``simulate`` prices experts: True if the step time of an MoE model changes with ``ep``.

    (An expert layer that is simulated as a dense MLP gives the same step time for every ep.)
    """
    spec = _model(model, None)
    if spec.moe is None:
        raise InputError("model", f"{spec.name} has no experts", "pass an MoE preset such as mixtral-8x7b")
    ep = math.gcd(spec.moe.num_experts, 8)
    if ep == 1:
        raise InputError("model", f"{spec.name}'s expert count does not split over 8 GPUs", "pick another MoE preset")
    base = dict(gpus=8, tp=1, pp=1, micro_batch=1, global_batch=8, zero_stage=1, recompute="full")
    one = simulate(spec, cluster, ep=1, **base)
    many = simulate(spec, cluster, ep=ep, **base)
    return not np.isclose(one.step_time_s.iloc[0], many.step_time_s.iloc[0], rtol=1e-9)


# --------------------------------------------------------------------------------------------
# sweep grids (paraplan sweep)
# --------------------------------------------------------------------------------------------

def sweep_grid(spec: Mapping[str, Any] | str, *, client=None, out_dir: str | None = None) -> pd.DataFrame:
    """Every point of a sweep grid, one row per point (what ``paraplan sweep SPEC.yaml`` writes).

    ``spec``: a mapping with the keys of a spec file (``paraplan/sweeps/spec.py``) or the path of
    one. Runs in this process unless ``client`` (a ``dask.distributed.Client``) is given;
    ``out_dir`` keeps the finished chunks there (a rerun resumes).

    Example::

        >>> df = sweep_grid({"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"],
        ...                  "gpus": [64], "global_batch_tokens": [4194304], "config": {"tp": [1, 2, 4, 8]}})
        >>> len(df)
        4
    """
    from paraplan.sweeps import load_spec, run_sweep, spec_from_dict
    if not isinstance(spec, (Mapping, str, os.PathLike)):
        raise InputError("spec", f"must be a mapping or a spec file's path, got {type(spec).__name__}",
                         "see paraplan/sweeps/spec.py for the keys")
    sweep_spec = spec_from_dict(spec) if isinstance(spec, Mapping) else load_spec(spec)
    return run_sweep(sweep_spec, out_dir, client=client, local=client is None)
