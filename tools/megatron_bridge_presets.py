"""Write hardware_specs/stacks/megatron_bridge_presets.csv from Megatron-Bridge's own recipe code.

For every release tag that a NeMo container shipped (``RELEASES``) this runs, in one process per
release, the performance presets exactly as ``scripts/performance`` builds them: the preset table
(``WorkloadBaseConfig`` objects), the per-model ``*_pretrain_config_<gpu>`` function, the shared
override helpers and the post-overrides of ``run_script.py``; 26.08 (v0.6.0) runs the flat recipes
of ``src/megatron/bridge/perf_recipes``. Library code those files call is replaced by recorders
(``tools/recorder.py``); the library class defaults the recipes branch on come from
``LIBRARY_DEFAULTS`` below, each cited. 25.09 (0.1.0rc3) keeps YAML files, read as YAML.

    python tools/megatron_bridge_presets.py [--mirror DIR] [--out CSV]

needs the Megatron-Bridge mirror (``fetch`` github:NVIDIA-NeMo/Megatron-Bridge). Rerun it when a
release is added; tests/test_stack_recipes.py checks the stack YAML against the CSV it writes.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
OUT = REPO / "hardware_specs" / "stacks" / "megatron_bridge_presets.csv"

#: NeMo container -> Megatron-Bridge release tag (docs/versions1.json at main 7cc4382ef names the
#: release behind each container, "0.4.2 · 26.04.01"; docs/releases/software-versions.md gives
#: 25.09 = 0.1.0rc3)
RELEASES = {
    "25.09": "v0.1.0rc3", "25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1",
    "26.04": "v0.4.0", "26.04.01": "v0.4.2", "26.06": "v0.5.0", "26.06.01": "v0.5.1", "26.08": "v0.6.0",
}

#: GPU names in the preset tables -> paraplan's canonical GPU kinds, and the device the recipe code
#: sees (torch.cuda.get_device_properties: name, compute-capability major) when it picks DeepEP /
#: HybridEP (src/megatron/bridge/training/flex_dispatcher_backend.py)
GPUS = {
    "h100": ("h100-sxm-80gb", "NVIDIA H100 80GB HBM3", 9),
    "b200": ("b200", "NVIDIA B200", 10),
    "b300": ("b300", "NVIDIA B300 SXM6 AC", 10),
    "gb200": ("gb200", "NVIDIA GB200", 10),
    "gb300": ("gb300", "NVIDIA GB300", 10),
}

COLUMNS = [
    "container", "tag", "family", "recipe", "gpu_preset", "gpu", "compute_dtype", "dtype", "variant",
    "default_variant", "n_gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "global_batch",
    "sequence_parallel", "tp_comm_overlap", "moe_a2a_overlap", "delay_wgrad_compute", "moe_dispatcher",
    "moe_flex_backend", "cuda_graph_impl", "cuda_graph_scope", "cuda_graphs_full_iteration",
    "megatron_fsdp", "nccl_ub", "cpu_offloading_layers", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "recompute_modules", "grad_reduce_in_fp32", "use_distributed_optimizer",
    "overlap_grad_reduce", "overlap_param_gather", "overlap_param_gather_with_optimizer_step",
    "fp8_recipe", "fp8_param_gather", "fp4_recipe", "fp4_param_gather", "optimizer", "moe_router_fusion", "te_op_fuser",
    "cuda_device_max_connections", "seq_length",
    "source", "note",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", type=Path, default=MIRROR)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--container", action="append", help="only these containers (default: all)")
    args = ap.parse_args(argv)
    rows: list[dict] = []
    for container, tag in RELEASES.items():
        if args.container and container not in args.container:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / tag
            tree.mkdir()
            archive = subprocess.run(["git", f"--git-dir={args.mirror}", "archive", tag,
                                      "scripts/performance", "src/megatron/bridge"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            proc = subprocess.run([sys.executable, str(HERE / "megatron_bridge_run.py"), str(tree), tag,
                                   container], capture_output=True, text=True)
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr[-4000:])
                raise SystemExit(f"{tag}: extraction failed")
            got = json.loads(proc.stdout)
            sys.stderr.write(f"{container} {tag}: {len(got)} presets\n")
            rows.extend(got)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k, "") for k in COLUMNS})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
