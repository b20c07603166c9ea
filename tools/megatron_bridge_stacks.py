"""Write the Megatron-Bridge stack files' ``recipes:`` from hardware_specs/stacks/megatron_bridge_presets.csv.

    python tools/megatron_bridge_stacks.py

For each release the preset that the performance launcher picks by default for a (model, GPU kind,
paraplan dtype) is the *primary* preset (``primary_rows``): the default config variant (v2, else v1,
else the unversioned / suffix-less one), the FP8 recipe the summary pages call "FP8" (current scaling
before sub-channel / delayed scaling), and the smallest GPU count where a release has several. Its
switches that ``TrainingBehaviour`` can express become recipe entries; releases whose entries are the
same share one stack file. The training defaults of every file are those of ``megatron-bridge.yaml``
(the newest release keeps that name). tests/test_stack_recipes.py checks the files against the CSV.
"""
from __future__ import annotations

import csv
from collections import OrderedDict, defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STACKS = REPO / "hardware_specs" / "stacks"
CSV = STACKS / "megatron_bridge_presets.csv"
CONTAINERS = ["25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08"]
#: which compute dtype a paraplan dtype means when a release has several (the summary pages' "FP8"
#: is FP8-CS; README.md)
COMPUTE_ORDER = ["bf16", "fp8_cs", "fp8_sc", "fp8_ss", "fp8_ds", "fp8_mx", "nvfp4"]
#: Bridge recipe name -> the model name paraplan's presets use (model_key matches the validation
#: files' spellings, e.g. "LLAMA3.1_405B", "Qwen3_235B_a22B")
MODEL_NAMES = {
    "llama3_8b": "llama3-8b", "llama3_70b": "llama3-70b", "llama31_405b": "llama3.1-405b",
    "deepseek_v3": "deepseek-v3", "qwen3_30b_a3b": "qwen3-30b-a3b", "qwen3_235b_a22b": "qwen3-235b-a22b",
    "gpt_oss_120b": "gpt-oss-120b", "gpt_oss_20b": "gpt-oss-20b",
    # the presets carry their sizes in their names so that the validation's Megatron-Bridge rows
    # (Nemotron_3_Super / _Ultra, whose MTP block on a hybrid pattern is not modelled) find none,
    # while a user's run of the preset under these releases still gets the release's recipe
    "nemotron_3_super": "nemotron-3-super-120b-a12b", "nemotron_3_ultra": "nemotron-3-ultra-550b-a55b",
}


def model_name(recipe: str) -> str:
    return MODEL_NAMES.get(recipe, recipe.replace("_", "-"))


def read_rows(path: Path = CSV) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _rank(row: dict):
    return (COMPUTE_ORDER.index(row["compute_dtype"]), int(row["n_gpus"]))


def primary_rows(rows: list[dict]) -> dict:
    """(container, recipe, gpu, dtype) -> the preset row the stack's recipe is taken from."""
    out = {}
    for row in rows:
        if row["default_variant"] != "true" or row["note"].startswith("not executed") or \
                " not executed" in row["note"]:
            continue
        key = (row["container"], row["recipe"], row["gpu"], row["dtype"])
        if key not in out or _rank(row) < _rank(out[key]):
            out[key] = row
    return out


def _release(tag: str) -> tuple:
    """(major, minor) of a Megatron-Bridge tag such as ``v0.6.0`` or ``v0.1.0rc3``."""
    major, minor = tag.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def behaviour(row: dict) -> dict:
    """The preset's switches as TrainingBehaviour values that differ from the stack defaults
    (megatron-bridge.yaml: no TP/EP overlap, the alltoall expert dispatcher, no CUDA graphs, bf16
    gradient reduction, ZeRO-1,
    tensorwise FP8, grad-reduce and param-gather overlap on)."""
    out = {}
    if row["tp_comm_overlap"] == "true":
        out["tp_comm_overlap"] = True
    if row["moe_a2a_overlap"] == "true":
        out["ep_comm_overlap"] = True
    if row["moe_dispatcher"] == "flex":
        # DeepEP / HybridEP send a token once per destination GPU and node
        out["ep_dispatch_dedup"] = True
    if row["cuda_graphs_full_iteration"] == "true":
        out["cuda_graphs"] = True
    if row["grad_reduce_in_fp32"] == "true":
        out["grad_reduce_bytes"] = 4
        out["bf16_grads_in_fp32"] = True
    if row["megatron_fsdp"] == "true":
        out["default_zero_stage"] = 3
    dp = int(row["n_gpus"]) // (int(row["tp"]) * int(row["pp"]) * int(row["cp"] or 1))
    if dp > 1 and row["overlap_param_gather"] == "false":
        out["overlap_param_gather"] = False
    if dp > 1 and row["overlap_grad_reduce"] == "false":
        out["overlap_grad_reduce"] = False
    if row.get("te_op_fuser") == "true":
        # Megatron-Core's op fuser runs the grouped MLP through Transformer Engine ops whose
        # ScaledClampedQGeGLU clamps inside the activation kernel (experts.py _make_fused_ops)
        out["glu_clamp_eager"] = False
        # and, on SM 10.x under MXFP8 with NVTE_CUTEDSL_FUSED_GROUPED_MLP (which the presets that
        # set the fuser set: v0.5.0 scripts/performance/perf_plugins.py:308-309, v0.6.0
        # scripts/performance/utils/utils.py:669), fuses FC1, the activation and FC2 with the FC2
        # bias in the GEMM epilogue; Megatron-Core cd4afffa (v0.6.0) scales that bias by the
        # probabilities (experts.py:536-549), d0b3b775 / 458c8d0e (v0.5.x) does not
        out["expert_output_bias"] = ("fused_mlp_scaled" if _release(row["tag"]) >= (0, 6)
                                     else "fused_mlp_epilogue")
    # cuda_device_max_connections is recorded, not mapped: one hardware work queue fixes the order
    # in which Transformer Engine's per-expert GEMMs start, not that they run one after another
    # (megatron-bridge.yaml grouped_gemm_streams)
    if row["dtype"] == "fp8" and row["fp8_recipe"] not in ("", "tensorwise"):
        out["fp8_recipe"] = row["fp8_recipe"]
    return out


def release_entries(primary: dict, container: str) -> list[dict]:
    """Recipe entries of one release: one per (behaviour, dtype set, GPU set), listing the models."""
    keys = {k: v for k, v in primary.items() if k[0] == container}
    dtypes_of = defaultdict(set)                 # (recipe, gpu) -> dtypes with a preset
    for (_, recipe, gpu, dtype) in keys:
        dtypes_of[(recipe, gpu)].add(dtype)
    by = defaultdict(lambda: defaultdict(set))   # (recipe, gpu, behaviour) -> dtypes, sources
    sources = defaultdict(list)
    for (_, recipe, gpu, dtype), row in sorted(keys.items()):
        b = behaviour(row)
        if not b:
            continue
        bk = tuple(sorted(b.items()))
        by[(recipe, bk)][gpu].add(dtype)
        sources[(recipe, bk)].append(row["source"])
    merged = OrderedDict()                       # (behaviour, gpus, dtypes) -> models, sources
    for (recipe, bk), gpus in by.items():
        # a model's GPU whose every preset dtype shares the behaviour needs no dtype selector
        groups = defaultdict(set)
        for gpu, dts in gpus.items():
            sel = () if dts == dtypes_of[(recipe, gpu)] else tuple(sorted(dts))
            groups[sel].add(gpu)
        for sel, gs in groups.items():
            key = (bk, tuple(sorted(gs)), sel)
            merged.setdefault(key, ([], []))
            merged[key][0].append(model_name(recipe))
            merged[key][1].extend(sources[(recipe, bk)])
    entries = []
    for (bk, gpus, dts), (models, srcs) in merged.items():
        tag = srcs[0].split("@")[1].split()[0]
        files = sorted({s.split()[1] for s in srcs})
        entry = {"models": sorted(set(models)), "gpus": list(gpus)}
        if dts:
            entry["dtypes"] = list(dts)
        entry["training"] = dict(bk)
        entry["source"] = (f"NVIDIA-NeMo/Megatron-Bridge@{tag} {', '.join(files)}: the default performance "
                           f"preset per model/GPU/dtype, as executed by tools/megatron_bridge_presets.py "
                           f"(rows of megatron_bridge_presets.csv, container {container})")
        entries.append(entry)
    entries.sort(key=lambda e: (e["models"], e["gpus"], e.get("dtypes", [])))
    return entries


def groups(primary: dict) -> list[tuple[list[str], list[dict]]]:
    """Consecutive releases with identical entries (ignoring the citation's tag) share a file."""
    out: list[tuple[list[str], list[dict]]] = []
    for c in CONTAINERS:
        entries = release_entries(primary, c)
        strip = [{k: v for k, v in e.items() if k != "source"} for e in entries]
        if out and [{k: v for k, v in e.items() if k != "source"} for e in out[-1][1]] == strip:
            out[-1][0].append(c)
        else:
            out.append(([c], entries))
    return out


def file_name(versions: list[str]) -> str:
    return "megatron-bridge" if "26.08" in versions else f"megatron-bridge-{versions[0]}"


HEADER = """# Megatron-Bridge performance recipes in the NeMo Framework containers {versions}.
# GENERATED by tools/megatron_bridge_stacks.py from megatron_bridge_presets.csv (itself written by
# tools/megatron_bridge_presets.py from the releases' own code); edit those, not this file.
# Container -> release: docs/versions1.json at NVIDIA-NeMo/Megatron-Bridge main 7cc4382ef
# ("0.1.0 · 25.09" ... "0.6.0 · 26.08"; 25.09 = 0.1.0rc3 by docs/releases/software-versions.md):
# 25.09 v0.1.0rc3, 25.11 v0.2.0, 26.02 v0.3.0, 26.02.01 v0.3.1, 26.04 v0.4.0, 26.04.01 v0.4.2,
# 26.06 v0.5.0, 26.06.01 v0.5.1, 26.08 v0.6.0. The release-wide defaults below are the same in all of
# them; the recipes list what each release's default preset for a model on a GPU kind in a dtype sets
# beyond them (README.md: "Megatron-Bridge performance presets per release").
"""


#: NeMo 25.09 (Megatron-Bridge v0.1.0rc3) still runs Transformer Engine's fused RoPE for gpt-oss
YARN_ROPE_25_09 = {
    "value": False,
    "source": "NVIDIA-NeMo/Megatron-Bridge@v0.1.0rc3 src/megatron/bridge/utils/fusions.py validate_rope_fusion_compatibility "
              "checks multi-latent attention and rotary_interleaved only (the position_embedding_type check came with "
              "v0.2.0), and its megatron-core>=0.14.0a0,<0.15.0 (pyproject.toml) has no mscale fallback in "
              "megatron/core/models/common/embeddings/rope_utils.py apply_rotary_pos_emb (NVIDIA/Megatron-LM@core_v0.14.0: "
              "the fused kernel runs whatever mscale is; the fallback came with 987395813b, first in core_v0.16.0)",
}


def library_releases(containers: list[str], rows: list[dict]) -> list[str]:
    """The Megatron-Bridge releases the NeMo ``containers`` ship, as the presets file's ``tag``
    column (``rows``) records them (25.09 -> 0.1.0rc3, ..., 26.08 -> 0.6.0)."""
    tags = {row["container"]: row["tag"].lstrip("v") for row in rows}
    return [tags[c] for c in containers if c in tags]


def main() -> int:
    base = yaml.safe_load((STACKS / "megatron-bridge.yaml").read_text())
    rows = read_rows()
    primary = primary_rows(rows)
    for old in STACKS.glob("megatron-bridge*.yaml"):
        old.unlink()
    for versions, entries in groups(primary):
        name = file_name(versions)
        doc = OrderedDict()
        doc["name"] = name
        doc["framework"] = "megatron-bridge"
        # the containers, then the Megatron-Bridge library releases they ship (the presets' tags,
        # without the leading v): a source may state either
        doc["versions"] = versions + library_releases(versions, rows)
        doc["description"] = (f"Megatron-Bridge performance recipes (NeMo containers {', '.join(versions)}): "
                              "Megatron-Core distributed optimizer with 128Mi-element buckets overlapped with "
                              "compute, gradients reduced in bf16, sequence parallelism with TP, Transformer "
                              "Engine kernels; per-model presets below")
        doc["training"] = dict(base["training"])
        if "25.09" in versions:
            doc["training"]["yarn_rope_eager"] = YARN_ROPE_25_09
        doc["recipes"] = entries
        text = yaml.safe_dump(dict(doc), sort_keys=False, width=110, allow_unicode=True)
        (STACKS / f"{name}.yaml").write_text(HEADER.format(versions=", ".join(versions)) + text)
        print(f"{name}: {', '.join(versions)}: {len(entries)} recipe entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
