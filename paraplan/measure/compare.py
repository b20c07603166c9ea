"""``paraplan validate measured``: measured step times on this machine vs the simulator.

Each configuration is trained for a few steps by ``train.run_measurement``; the same model,
layout and batch are then described with paraplan's own objects (``ModelSpec``, the
calibrated ``ClusterSpec``, ``ParallelConfig``) and passed to ``simulator.simulate``. The rows
say how far the prediction is from the measurement, and the ``pred_*`` columns show which part
of the predicted step is responsible.
"""
from __future__ import annotations

import json
import numbers
import os
from pathlib import Path

from hardware_specs.errors import InputError, shown
from paraplan.measure.runtime import require_torch

#: The small GPT every default configuration trains (fits two CPU ranks; ~0.1-0.5 s a step).
DEFAULT_MODEL = {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "vocab_size": 1024, "seq_len": 128}
#: The GPT the default configurations train on GPUs: large enough that the GPU, not the host's
#: kernel issue, sets the step (~0.1 s a step on one H200, tests/data/gpu_h200/: l8-h2048-s2048)
DEFAULT_MODEL_GPU = {"num_layers": 8, "hidden_size": 2048, "num_heads": 16, "vocab_size": 32768, "seq_len": 2048}

#: Layouts that fit two local ranks: single-rank baselines (micro-batching, recompute), data
#: parallel (all-reduce, ZeRO-1), tensor parallel (with and without recompute), 1F1B pipeline.
DEFAULT_CONFIGS = [
    {"name": "single", "micro_batch": 4, "global_batch": 4},
    {"name": "single-mb1x4", "micro_batch": 1, "global_batch": 4},
    {"name": "single-recompute", "micro_batch": 4, "global_batch": 4, "recompute": "full"},
    {"name": "dp2", "dp": 2, "micro_batch": 2, "global_batch": 4},
    {"name": "dp2-mb1x2", "dp": 2, "micro_batch": 1, "global_batch": 4},
    {"name": "dp2-zero1", "dp": 2, "micro_batch": 2, "global_batch": 4, "zero_stage": 1},
    {"name": "tp2", "tp": 2, "micro_batch": 4, "global_batch": 4},
    {"name": "tp2-recompute", "tp": 2, "micro_batch": 4, "global_batch": 4, "recompute": "full"},
    {"name": "pp2-mb1x4", "pp": 2, "micro_batch": 1, "global_batch": 4},
    {"name": "pp2-mb2x4", "pp": 2, "micro_batch": 2, "global_batch": 8},
]
CONFIG_COLUMNS = ["dp", "tp", "pp", "micro_batch", "global_batch", "zero_stage", "recompute"]
#: the measured GPT's size in a ``compare_measured`` row: column -> run key (a count of layers,
#: the hidden width in elements, the sequence in tokens, the vocabulary in token ids)
ASSUMED_MODEL = {"num_layers": "num_layers", "hidden_size": "hidden_size", "seq_len_tokens": "seq_len",
                 "vocab_size": "vocab_size"}
#: the columns saying what a ``compare_measured`` row's prediction assumed, in order
ASSUMED_COLUMNS = ["hardware_profile", "dtype", "device", *ASSUMED_MODEL]
PREDICTED_PARTS = ["compute_s", "recompute_s", "tp_comm_exposed_s", "pp_comm_s", "pipeline_bubble_s",
                   "dp_comm_exposed_s", "sync_wait_s", "optimizer_s"]


def _simulate():
    try:
        from simulator import simulate
    except ImportError as exc:
        raise InputError("simulator", f"simulator.simulate is not available ({exc})",
                         "update paraplan; the measured comparison needs the simulator") from None
    return simulate


def model_spec(run: dict):
    """The ``ModelSpec`` of the measured GPT (``gpt.py``: MHA, plain 4h GELU MLP with biases,
    LayerNorm, untied head, no position embedding and no dropout). ModelSpec's GPT-2 defaults
    would price dropout masks the trained model does not have (two 1-byte hidden-dropout masks
    a layer); their learned position embedding is set to none to describe gpt.py, but moves
    no number: no cost model prices a position table (``params.embedding_params`` is V x h)
    and ``position_embedding`` is read only for RoPE."""
    from model_specs.model_spec import ModelSpec
    return ModelSpec(name=f"measure-gpt-l{run['num_layers']}-h{run['hidden_size']}",
                     num_layers=int(run["num_layers"]), hidden_size=int(run["hidden_size"]),
                     num_heads=int(run["num_heads"]), num_kv_heads=int(run["num_heads"]),
                     ffn_hidden_size=4 * int(run["hidden_size"]), vocab_size=int(run["vocab_size"]),
                     seq_len=int(run["seq_len"]), gated_mlp=False, tied_embeddings=False,
                     position_embedding="none", attention_dropout=False, hidden_dropout=False,
                     source="paraplan.measure.gpt")


def parallel_config(run: dict, dtype: str):
    """The ``ParallelConfig`` the measured runner implements: 1F1B, no overlap of any kind,
    autograd's unfused gradient accumulation."""
    from simulator.parallel_config import ParallelConfig
    return ParallelConfig(dp=run["dp"], tp=run["tp"], pp=run["pp"], micro_batch=run["micro_batch"],
                          global_batch=run["global_batch"], zero_stage=run["zero_stage"],
                          recompute=run["recompute"], sequence_parallel=False, dtype=dtype,
                          schedule="1f1b", overlap_grad_reduce=False, overlap_param_gather=False,
                          tp_comm_overlap=False, tp_backward_overlap=False, grad_accumulation_fusion=False)


def predict(run: dict, cluster, dtype: str):
    """``simulate`` the measured run on ``cluster``; returns the ``StepReport``."""
    simulate = _simulate()
    config = parallel_config(run, dtype)
    return simulate(model_spec(run), cluster, config, n_gpus=config.n_gpus)


def _median_round(per_round: list[dict]) -> dict:
    """One configuration's rounds as one run: the median of the rounds' step times (the mean of
    the middle two for an even count), the phases of the lower-middle round, and the worst
    contention and the largest memory seen in any round."""
    import statistics
    ordered = sorted(per_round, key=lambda r: r["measured_step_s"])
    merged = dict(ordered[(len(ordered) - 1) // 2])
    merged["measured_step_s"] = statistics.median(r["measured_step_s"] for r in per_round)
    merged["tokens_per_s"] = merged["global_batch"] * merged["seq_len"] / merged["measured_step_s"]
    waits = [r["cpu_wait_fraction"] for r in per_round if r["cpu_wait_fraction"] is not None]
    loads = [r["foreign_load"] for r in per_round if r["foreign_load"] is not None]
    merged["cpu_wait_fraction"] = max(waits) if waits else None
    merged["foreign_load"] = max(loads) if loads else None
    merged["peak_memory_bytes"] = max(r["peak_memory_bytes"] for r in per_round)
    merged["step_times_s"] = [t for r in per_round for t in r["step_times_s"]]
    return merged


def _calibrated_threads(cluster_path: Path) -> int | None:
    from paraplan.measure.calibrate import sidecar_path
    side = sidecar_path(cluster_path)
    if not side.is_file():
        return None
    try:
        raw = json.loads(side.read_text())
    except (ValueError, UnicodeDecodeError) as exc:   # JSONDecodeError is a ValueError
        where = f" at line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InputError("CLUSTER_PATH", f"its calibration timings {side} are not valid JSON{where}",
                         f"rerun `paraplan calibrate --out {cluster_path}`, or delete {side}") from None
    device = raw.get("device") if isinstance(raw, dict) else None
    threads = device.get("threads_per_rank") if isinstance(device, dict) else None
    if threads is None:
        return None
    from paraplan.measure.runtime import check_threads_per_rank
    return check_threads_per_rank(threads, f"{side}: device.threads_per_rank",
                                  f"rerun `paraplan calibrate --out {cluster_path}`, or delete {side}")


def compare_measured(cluster_path, configs=None, steps: int = 14, warmup: int = 4, model: dict | None = None,
                     rounds: int = 1, progress=None):
    """Measure each configuration on this machine and compare with the simulator's prediction.

    Args:
        cluster_path: a cluster YAML written by ``run_calibration`` (or any catalog name).
        configs: list of ``RunConfig`` dicts (default ``DEFAULT_CONFIGS``); keys missing from a
            config take ``model`` and the step counts given here.
        steps, warmup: steps per run, and how many of them are excluded from the median.
        model: GPT size keys (default ``DEFAULT_MODEL``; ``DEFAULT_MODEL_GPU`` on a CUDA host).
        rounds: how many times the whole list is measured, round-robin; a configuration's
            measured step time is the median over rounds (mean of the middle two if even). A shared or virtual host drifts by
            10-20% over minutes; interleaving spreads that drift over every configuration.
        progress: ``progress(done, total, label)`` before each measured run (rounds x configs).

    Returns a ``pandas.DataFrame`` with one row per configuration: ``name``, the config fields,
    ``measured_step_s``, ``predicted_step_s``, ``rel_error`` ((predicted - measured) /
    measured), ``cpu_wait_fraction`` (share of the measured time the worst rank waited for a
    CPU another process held: rows above ~0.15 say little about the simulator),
    ``foreign_load`` (share of the cores other processes used), ``measured_tokens_per_s``,
    ``measured_peak_memory_bytes``, ``measured_memory_above_baseline_bytes``,
    ``predicted_memory_bytes``, ``measured_step_times_s`` and the predicted breakdown
    ``pred_<part>``, ``rounds``, then what the prediction assumed (``ASSUMED_COLUMNS``):
    ``hardware_profile`` (the cluster profile's name), ``dtype`` and ``device`` the runs trained
    in, and the GPT's ``num_layers``, ``hidden_size``, ``seq_len_tokens``, ``vocab_size``.
    ``frame.attrs["skipped"]`` lists (name, reason) of the configurations
    needing more ranks than the machine runs at once (a calibrated CPU profile's ranks, or the
    visible GPUs of the profile's node); an ``InputError`` if none fits.
    """
    import pandas as pd
    from hardware_specs.catalog import load_cluster
    from paraplan.measure.train import run_measurement
    _simulate()          # fail before spending minutes on measurements
    require_torch()      # (and before a progress bar starts)
    cluster = load_cluster(str(cluster_path))
    threads = _calibrated_threads(Path(cluster_path))
    _check_rounds(rounds)
    _require_the_profiles_device(cluster)
    configs = list(configs or DEFAULT_CONFIGS)
    slots, model = _device_slots(cluster, model)
    _check_configs(configs, model, steps, warmup)
    # the profile's ranks are what the runs start side by side: a limit is the profile's to meet
    from paraplan.measure.runtime import check_local_ranks, choose_device
    check_local_ranks(slots, choose_device("auto").kind, f"{cluster_path}: gpus_per_node",
                      "calibrate this machine (paraplan calibrate --out local.yaml) and pass that profile")
    configs, skipped = _fitting_configs(configs, slots)
    run_cfgs = _run_configs(configs, model, steps, warmup, threads, slots)
    check_steps_fit(run_cfgs, choose_device("auto").kind)       # before minutes of runs, not at the first long one
    runs: list[list[dict]] = [[] for _ in configs]
    total = int(rounds) * len(configs)
    for r in range(int(rounds)):
        for i, cfg in enumerate(configs):
            if progress is not None:
                progress(r * len(configs) + i, total, f"{cfg.get('name', f'configuration {i + 1}')}, round {r + 1} of {rounds}")
            runs[i].append(run_measurement(run_cfgs[i]))
    rows = []
    for per_round in runs:
        measured = _median_round(per_round)
        report = predict(measured, cluster, measured["dtype"])
        row = {"name": measured["name"], **{k: measured[k] for k in CONFIG_COLUMNS},
               "measured_step_s": measured["measured_step_s"], "predicted_step_s": report.step_time_s}
        row["rel_error"] = (row["predicted_step_s"] - row["measured_step_s"]) / row["measured_step_s"]
        row.update({"cpu_wait_fraction": measured["cpu_wait_fraction"], "foreign_load": measured["foreign_load"],
                    "measured_tokens_per_s": measured["tokens_per_s"],
                    "measured_peak_memory_bytes": measured["peak_memory_bytes"],
                    "measured_memory_above_baseline_bytes":
                        measured["peak_memory_bytes"] - measured["baseline_memory_bytes"],
                    "predicted_memory_bytes": report.memory_bytes,
                    "measured_step_times_s": " ".join(f"{t:.4f}" for t in measured["step_times_s"])})
        row.update({f"pred_{k}": report.time_breakdown_s.get(k, 0.0) for k in PREDICTED_PARTS})
        row.update({f"measured_{k}": v for k, v in measured["phase_s"].items()})
        row["rounds"] = len(per_round)
        # what the prediction assumed: the profile it priced on, the dtype and device the runs
        # trained in, and the GPT's size (a CI log must say which model its errors are about)
        row.update({"hardware_profile": cluster.name, "dtype": measured.get("dtype"),
                    "device": measured.get("device"), **{k: measured[key] for k, key in ASSUMED_MODEL.items()}})
        rows.append(row)
    if progress is not None:
        progress(total, total, "done")
    frame = pd.DataFrame(rows)
    frame.attrs["skipped"] = skipped
    return frame


def _require_the_profiles_device(cluster) -> None:
    """``InputError`` when the profile describes GPUs and this machine has none: the small runs
    would train on the CPU and be compared with the GPU's prediction (minutes of runs for a
    meaningless error)."""
    from paraplan.measure.runtime import choose_device
    kind = choose_device("auto").kind
    if cluster.gpu.generation == "cpu" and kind == "cuda":
        # the runs would train on the GPU and be compared with the CPU profile's predictions
        raise InputError("cluster", f"{cluster.name} describes a CPU, and this machine's runs would train on its CUDA GPU",
                         "pass the catalog system of this machine's GPUs, e.g. hgx-h200")
    if cluster.gpu.generation != "cpu" and kind != "cuda":
        raise InputError("cluster", f"{cluster.name} describes {cluster.gpu.name} GPUs, and this machine has no CUDA GPU",
                         "run it on such a machine, or calibrate this one (paraplan calibrate --out local.yaml) "
                         "and pass that profile")


def _device_slots(cluster, model):
    """(ranks a job may use side by side, the GPT's size) for this machine: on a CPU
    host the calibrated profile's ranks and ``DEFAULT_MODEL``; on a CUDA host the GPUs that are
    both visible and in the profile's node, and ``DEFAULT_MODEL_GPU`` (the CPU-sized model is
    host-bound on a GPU: it times kernel launches, not the GPU)."""
    from paraplan.measure.runtime import choose_device
    gpu = choose_device("auto").kind == "cuda"
    return _slots(int(cluster.gpus_per_node)), model or (DEFAULT_MODEL_GPU if gpu else DEFAULT_MODEL)


def _slots(ranks: int) -> int:
    """Ranks a job may use side by side: a profile's ``ranks`` on a CPU host, on a CUDA host no
    more than the visible GPUs."""
    from paraplan.measure.runtime import choose_device
    torch = require_torch()
    if choose_device("auto").kind != "cuda":
        return int(ranks)
    return max(1, min(int(ranks), torch.cuda.device_count()))


#: columns of a compare_measured row that are no per-round quantity to average: the worst round's
#: contention and memory are kept, as ``_median_round`` keeps them
_WORST_OVER_ROUNDS = ("cpu_wait_fraction", "foreign_load", "measured_peak_memory_bytes",
                      "measured_memory_above_baseline_bytes")


def _median_error_round(group):
    """One configuration's calibrate-then-measure rounds as one row, by ``_median_round``'s rule
    applied to the error: ``rel_error`` is the median over rounds (the mean of the middle two for
    an even count; taking the lower-middle round made two rounds always report the more negative
    one), with each measured and predicted number the mean of the same middle rounds; the worst
    contention and memory seen in any round, every round's step times."""
    import pandas as pd
    ordered = group.sort_values("rel_error", kind="stable")
    n = len(ordered)
    middle = ordered.iloc[[(n - 1) // 2, n // 2]]
    row = middle.iloc[0].copy()
    for col in group.columns:
        if col in ("rounds", "round") or not pd.api.types.is_float_dtype(group[col]):
            continue
        values = group[col] if col in _WORST_OVER_ROUNDS else middle[col]
        if values.notna().any():
            row[col] = values.max() if col in _WORST_OVER_ROUNDS else values.mean()
    if "measured_step_times_s" in group:
        row["measured_step_times_s"] = " ".join(str(t) for t in group["measured_step_times_s"] if str(t))
    return row


def _check_rounds(rounds) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
        raise InputError("rounds", f"must be a whole number >= 1, got {shown(rounds)}",
                         "give how many times to measure the list as an integer, e.g. rounds=3; the default 1 measures it once")


def _check_configs(configs: list, model: dict, steps, warmup) -> None:
    """``InputError`` naming the configuration and its field when one would not make a
    ``RunConfig`` (a degree of NaN, 2.0 ranks, the text '4' for steps, a device 'tpu'), before
    anything is measured or calibrated: a NaN degree failed with a ValueError where the ranks a
    layout needs were counted."""
    from paraplan.measure.train import RunConfig
    for i, cfg in enumerate(configs):
        if not isinstance(cfg, dict):
            raise InputError(f"configs[{i}]", f"must be a dict of RunConfig fields, got {shown(cfg)}",
                             "give each configuration as a dict, e.g. {'name': 'dp2', 'dp': 2, 'global_batch': 8}")
        try:
            RunConfig.from_dict({**model, "steps": steps, "warmup": warmup, **cfg})
        except InputError as exc:
            where = exc.field if exc.field in ("steps", "warmup") and exc.field not in cfg else \
                f"configs[{i}] ({cfg.get('name', 'unnamed')}): {exc.field}"
            raise InputError(where, exc.message, exc.fix) from None


def _run_configs(configs: list[dict], model: dict, steps: int, warmup: int, threads: int | None,
                 slots: int) -> list[dict]:
    """Each configuration's ``run_measurement`` config: the model and step counts under it, the
    calibrated threads a rank, and as many copies of a job as fill the ``slots`` (every
    calibrated rank kept busy, as during calibration: small jobs run side by side)."""
    out = []
    for cfg in configs:
        run_cfg = {**model, "steps": steps, "warmup": warmup, **cfg}
        if threads is not None:
            run_cfg.setdefault("threads_per_rank", threads)
        run_cfg.setdefault("copies", max(1, slots // _world(run_cfg)))
        out.append(run_cfg)
    return out


def check_steps_fit(run_cfgs: list[dict], kind: str) -> None:
    """``InputError`` naming ``steps`` when ``RunConfig``'s checks of a run's size (its FLOPs,
    ``RUN_FLOPS``, counting every copy a job runs beside it; its operator-call floor,
    ``check_finishes``) refuse a configuration at these steps but would take fewer; the fix says
    the most steps every configuration takes. Checked before any run: ``validate measured
    --steps 1000`` measured for minutes, then failed naming options it lacks (the single-rank
    layouts run 2 copies, twice the FLOPs of one job). Other errors are left to the runs."""
    from paraplan.measure.train import RunConfig

    def refusal(run_cfg: dict, steps: int):
        run = RunConfig.from_dict({**run_cfg, "steps": steps})
        try:
            run.check_fits(kind, 0.0)            # host memory: not a matter of steps (checked by each run)
            run.check_finishes(kind, run.threads_per_rank or max(1, (os.cpu_count() or 1) // 2))
        except InputError as exc:
            return exc
        return None

    def most_steps(run_cfg: dict) -> int:
        """The most steps ``run_cfg`` takes (its own if taken, or if even warmup + 1 are not:
        then steps are not the problem): both checks grow with the steps, so bisect."""
        steps, warmup = int(run_cfg["steps"]), int(run_cfg["warmup"])
        if refusal(run_cfg, steps) is None or refusal(run_cfg, warmup + 1) is not None:
            return steps
        lo, hi = warmup + 1, steps           # lo is taken, hi refused
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if refusal(run_cfg, mid) is None else (lo, mid)
        return lo
    most = {id(c): most_steps(c) for c in run_cfgs}
    for run_cfg in run_cfgs:
        steps = int(run_cfg["steps"])
        if most[id(run_cfg)] < steps:
            raise InputError("steps", f"{steps} steps are too many for {run_cfg.get('name', 'a configuration')}: "
                             f"{refusal(run_cfg, steps).message}", f"use at most {min(most.values())} steps")


def _world(cfg: dict) -> int:
    """Ranks one job of configuration ``cfg`` runs (``RunConfig.world_size``; absent degrees 1)."""
    return int(cfg.get("dp", 1)) * int(cfg.get("tp", 1)) * int(cfg.get("pp", 1))


def _fitting_configs(configs: list[dict], slots: int) -> tuple[list[dict], list]:
    """The configurations whose ranks fit ``slots`` devices, and [(name, reason)] for the rest;
    an ``InputError`` when none fits."""
    kept, skipped = [], []
    for i, cfg in enumerate(configs):
        world = _world(cfg)
        if world > slots:
            skipped.append((cfg.get("name", f"configuration {i + 1}"),
                            f"needs {world} ranks, this machine runs {slots}"))
        else:
            kept.append(cfg)
    if not kept:
        raise InputError("configs", f"no configuration fits the {slots} rank(s) this machine runs",
                         "measure single-rank layouts, or use a machine with more GPUs")
    return kept, skipped


def compare_recalibrating(configs=None, rounds: int = 3, nprocs: int = 2, steps: int = 14, warmup: int = 4,
                          model: dict | None = None, progress=None):
    """``rounds`` of calibrate-then-measure; per configuration, the round with the median error.

    A virtual or shared host drifts by 10-20% in speed over minutes, so a calibration taken
    minutes before a measurement disagrees with it by that much whatever the simulator does.
    Each round here pairs a fresh calibration (``run_calibration``, ~40 s on 2 CPU cores) with
    the measurements taken right after it and predicts them from it.

    Returns the ``compare_measured`` columns for each configuration's median-error round
    (``_median_error_round``: with an even count, the mean of the middle two), plus ``rel_error_spread`` (max - min over rounds) and ``rounds``.
    ``progress(done, total, label)``: before each round's calibration and each measured run.
    """
    import tempfile

    import pandas as pd
    from paraplan.measure.calibrate import run_calibration
    _check_rounds(rounds)
    require_torch()      # before the first progress report
    frames = []
    # each round's profile has nprocs ranks: measure (and count) only the layouts that fit them
    from paraplan.measure.runtime import choose_device
    kind = choose_device("auto").kind       # bad configurations, too many steps: said before the first calibration
    model = model or (DEFAULT_MODEL_GPU if kind == "cuda" else DEFAULT_MODEL)
    configs = list(configs or DEFAULT_CONFIGS)
    _check_configs(configs, model, steps, warmup)
    slots = _slots(int(nprocs))
    configs, skipped = _fitting_configs(configs, slots)
    check_steps_fit(_run_configs(configs, model, steps, warmup, None, slots), kind)
    n = len(configs)
    total = int(rounds) * (1 + n)

    def within(r):          # a round's measurements, counted after its calibration
        return None if progress is None else (lambda done, _t, label: progress(r * (1 + n) + 1 + done, total, label))
    with tempfile.TemporaryDirectory(prefix="paraplan-calibration-") as d:
        for r in range(int(rounds)):
            if progress is not None:
                progress(r * (1 + n), total, f"calibration, round {r + 1} of {rounds}")
            path = run_calibration(Path(d) / f"round{r}.yaml", nprocs=nprocs, name=f"round{r}")
            frames.append(compare_measured(path, configs=configs, steps=steps, warmup=warmup, model=model,
                                           progress=within(r)).assign(round=r))
    every = pd.concat(frames, ignore_index=True)
    rows = []
    for _, group in every.groupby("name", sort=False):
        row = _median_error_round(group)
        row["rel_error_spread"] = group["rel_error"].max() - group["rel_error"].min()
        row["rounds"] = len(group)
        rows.append(row)
    frame = pd.DataFrame(rows).drop(columns=["round"]).reset_index(drop=True)
    # each round priced on its own temporary profile (round0, round1, ...): name what they were
    frame["hardware_profile"] = f"this machine, calibrated afresh each of {int(rounds)} rounds"
    frame.attrs["skipped"] = skipped
    return frame
