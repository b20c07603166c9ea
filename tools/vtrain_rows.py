"""Convert vTrain's measurements into rows of the published-runs schema.

vTrain (github VIA-Research/vTrain, MIT license; Bang et al., "vTrain: A Simulation Framework for
Evaluating Cost-effective and Compute-optimal Large Language Model Training", MICRO 2024)
publishes two sets of measured Megatron-DeepSpeed iteration times on its A100 cluster:
``data/ground_truth_single.csv`` (2-8 GPUs in one node; in ``../shared/validation`` as
``VTRAIN-S-*``) and ``data/ground_truth_multi.csv`` (64-512 GPUs over 8-64 nodes; not in the
validation file, 1,440 runs of which the file holds 721 as ``VTRAIN-S-*``). This script writes
either set in the file's conventions (``--half single`` the ``VTRAIN-S-*`` rows, ``--half multi``
``VTRAIN-M-*``; ``--exclude`` drops the runs a published-runs CSV already holds), read from the
run settings of ``config/validation/{single,multi}/*.json`` at commit f8dda84: fp16, full
recomputation (``use_checkpoint``), no DP overlap
(``use_gradient_bucket`` false), 1F1B, sequence 2,048, 8 GPUs per node, 800 Gb/s between nodes
per node (100 Gb/s per GPU), GPT-2's 50,257-token vocabulary and 4h MLP (vTrain's model code).
The model was never fitted to the multi-node rows nor to the single-node ones the file leaves
out: ``tests/test_vtrain_multi_node.py`` and ``tests/test_vtrain_single_node_other_half.py``
bound its error on them, ``docs/accuracy_training.md`` records it. The regenerated in-file
single-node rows equal the file's (seconds rounded, as the file's, to 6 decimals).

    python tools/vtrain_rows.py ground_truth_multi.csv tests/data/vtrain_multi_node_runs.csv
    python tools/vtrain_rows.py --half single --exclude published_runs.csv \
        ground_truth_single.csv tests/data/vtrain_single_node_other_half.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

SOURCE = ("github VIA-Research/vTrain@f8dda84 data/ground_truth_{half}.csv (MIT); "
          "settings from config/validation/{half}/*.json")
#: the run-id prefix of each half
PREFIX = {"single": "VTRAIN-S", "multi": "VTRAIN-M"}
GPU_TEXT = ("A100 (vTrain cluster: 8 GPUs per node, 800 Gb/s inter-node per node, NVLink intra-node; "
            "HBM size not stated)")
NOTES = ("Megatron-DeepSpeed; use_checkpoint=true (full recompute), use_gradient_bucket=false (no DP "
         "overlap), 1F1B, fp16 and vocab 50257 per vTrain's configs and model code; ZeRO not stated; "
         "derived: seconds = ms / 1000")
#: vTrain's column name -> ours
COLUMNS = {"# GPUs": "n_gpus", "global batch": "global_batch", "micro batch": "micro_batch",
           "hidden size": "hidden", "attention heads": "heads", "# layers": "layers",
           "sequence length": "seq_len", "tensor parallelism": "tp", "data parallelism": "dp",
           "pipeline parallelism": "pp", "iteration time (ms)": "iteration_ms"}


def rows_from_vtrain(raw: pd.DataFrame, half: str = "multi") -> pd.DataFrame:
    """One published-schema row per measured run of vTrain's ``half`` (``single`` or ``multi``);
    a layout measured twice keeps both, the second with the suffix ``-r2``."""
    if half not in PREFIX:
        raise ValueError(f"half must be one of {', '.join(PREFIX)}, got {half!r}")
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise ValueError(f"not vTrain's ground-truth format: missing {', '.join(missing)}")
    out = []
    seen: dict[str, int] = {}
    for rec in raw.rename(columns=COLUMNS).to_dict("records"):
        n, tp, pp, dp, mb, gb, h, layers, heads, seq = (int(rec[k]) for k in (
            "n_gpus", "tp", "pp", "dp", "micro_batch", "global_batch", "hidden", "layers", "heads", "seq_len"))
        if tp * pp * dp != n:
            raise ValueError(f"tp x pp x dp = {tp * pp * dp} is not the {n} GPUs of a row")
        run = f"{PREFIX[half]}-h{h}l{layers}a{heads}s{seq}-{n}g-tp{tp}pp{pp}dp{dp}-mbs{mb}-gbs{gb}"
        seen[run] = seen.get(run, 0) + 1
        if seen[run] > 1:
            run += f"-r{seen[run]}"
        out.append({
            "id": f"{run}:iter_time_s", "run_id": run, "gpu_profile": "a100-sxm-80gb", "dtype_norm": "fp16",
            "zero_norm": "", "flops_convention": "none", "source": SOURCE.format(half=half),
            "model": f"GPT (vTrain, h={h}, l={layers})", "params_b": "", "layers": layers, "hidden": h,
            "ffn_hidden": 4 * h, "heads": heads, "kv_heads": heads, "vocab": 50257, "seq_len": seq,
            "moe_experts": "", "moe_topk": "", "gpu": GPU_TEXT, "n_gpus": n, "tp": tp, "pp": pp, "dp": dp,
            "cp": 1, "ep": "", "vpp": 1, "micro_batch": mb, "global_batch": gb, "recompute": "full",
            "seq_parallel": "", "zero_stage": "", "dtype": "fp16", "measured_metric": "iter_time_s",
            "measured_value": round(float(rec["iteration_ms"]) / 1000.0, 6), "notes": NOTES,
            "framework": "megatron-deepspeed", "framework_version": "2023", "gpus_per_node": 8,
            "scaleout_gbps_per_gpu": 100,
        })
    return pd.DataFrame(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", help="vTrain's data/ground_truth_{single,multi}.csv")
    ap.add_argument("out", help="the published-schema CSV to write")
    ap.add_argument("--half", choices=sorted(PREFIX), default="multi", help="which of vTrain's two sets RAW is")
    ap.add_argument("--exclude", help="a published-runs CSV whose run_ids are left out")
    args = ap.parse_args(argv)
    rows = rows_from_vtrain(pd.read_csv(args.raw, encoding="utf-8-sig"), args.half)
    if args.exclude:
        rows = rows[~rows.run_id.isin(set(pd.read_csv(args.exclude, usecols=["run_id"]).run_id))]
    rows.to_csv(Path(args.out), index=False)
    print(f"wrote {args.out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
