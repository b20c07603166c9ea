"""Library defaults that Megatron-Bridge's performance recipe code reads without setting
(``tools/megatron_bridge_run.py``): Megatron-Core dataclass defaults and the models' expert counts.

Each entry cites the file that defines it. A value the recipe code reads that is in neither table
stops the extraction of that preset with the attribute named (``recorder.UnknownDefault``).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recorder  # noqa: E402

_TC = "NVIDIA/Megatron-LM@core_v0.14.0..core_v0.19.0 megatron/core/transformer/transformer_config.py"
_DDP = "NVIDIA/Megatron-LM@core_v0.14.0..core_v0.19.0 megatron/core/distributed/distributed_data_parallel_config.py"
_OPT = "NVIDIA/Megatron-LM@core_v0.14.0..core_v0.19.0 megatron/core/optimizer/optimizer_config.py"

#: attribute (last part of the dotted path, under model / ddp / optimizer) -> (value, source)
MODEL = {
    "apply_rope_fusion": (False, _TC),
    "moe_flex_dispatcher_backend": ("deepep", _TC + " (core_v0.16.0+)"),
    "moe_shared_expert_overlap": (False, _TC),
    "moe_router_fusion": (False, _TC),
    "overlap_moe_expert_parallel_comm": (False, _TC),
    "cuda_graph_impl": ("none", _TC + " (core_v0.15.0+)"),
    "cuda_graph_scope": ("full", _TC),
    "recompute_granularity": (None, _TC),
    "recompute_method": (None, _TC),
    "recompute_num_layers": (None, _TC),
    "recompute_modules": (None, _TC),
    "cpu_offloading": (False, _TC),
    "cpu_offloading_num_layers": (0, _TC),
    "sequence_parallel": (False, _TC),
    "context_parallel_size": (1, _TC),
    "expert_model_parallel_size": (1, _TC),
    "expert_tensor_parallel_size": (None, _TC),
    "virtual_pipeline_model_parallel_size": (None, _TC),
    "fine_grained_activation_offloading": (False, _TC + " (core_v0.16.0+)"),
    "gradient_accumulation_fusion": (True, "NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/models/gpt_provider.py (fused kernel present in the NeMo container)"),
    "mtp_num_layers": (None, _TC),
    "use_te_rng_tracker": (False, _TC),
    "use_transformer_engine_op_fuser": (False, _TC),
    "fp8": (None, _TC),
    "fp4": (None, _TC),
}
DDP = {
    "use_megatron_fsdp": (False, _DDP),
    "nccl_ub": (False, _DDP),
    "fsdp_double_buffer": (False, _DDP),
    "grad_reduce_in_fp32": (False, _DDP),
    "overlap_grad_reduce": (False, _DDP),
    "overlap_param_gather": (False, _DDP),
    "use_distributed_optimizer": (False, _DDP),
    "average_in_collective": (False, _DDP),
    "keep_fp8_transpose_cache": (False, _DDP),
}
OPTIMIZER = {
    "overlap_param_gather_with_optimizer_step": (False, _OPT),
    "use_precision_aware_optimizer": (False, _OPT),
    "optimizer": ("adam", _OPT),
}
RNG = {
    "te_rng_tracker": (False, "NVIDIA-NeMo/Megatron-Bridge@v0.6.0 src/megatron/bridge/training/initialize.py (te_rng_tracker: bool = False)"),
}
COMM_OVERLAP = {
    "defer_embedding_wgrad_compute": (None, "NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/comm_overlap.py CommOverlapConfig"),
}

#: routed experts per model, from each model's published config.json (Hugging Face model card
#: repository of the id the recipe loads); only whether it is > 1 changes a recipe's path
EXPERTS = {
    "deepseek-ai/DeepSeek-V3": 256,          # n_routed_experts
    "deepseek-ai/DeepSeek-V2": 160,
    "deepseek-ai/DeepSeek-V2-Lite": 64,
    "Qwen/Qwen3-30B-A3B": 128,               # num_experts
    "Qwen/Qwen3-235B-A22B": 128,
    "Qwen/Qwen3-Next-80B-A3B-Instruct": 512,
    "openai/gpt-oss-120b": 128,              # num_local_experts
    "openai/gpt-oss-20b": 32,
    "moonshotai/Moonlight-16B-A3B": 64,
    "moonshotai/Kimi-K2-Instruct": 384,
    "zai-org/GLM-4.5": 160,
    "zai-org/GLM-4.5-Air": 128,
}
#: Hugging Face ids named by active parameters ("-A3B", "-A12B") are mixture-of-experts models
_MOE_NAME = re.compile(r"-A\d+(\.\d+)?B(-|$)")


class ManyExperts(int):
    """A routed-expert count known to be > 1 but not read (only that changes a recipe's path)."""

    def __new__(cls):
        return super().__new__(cls, 2)

    def __repr__(self):
        return "ManyExperts(>1)"


_DENSE_HF = re.compile(r"^(meta-llama/|google/gemma|Qwen/Qwen2|Qwen/Qwen3-(0\.6|1\.7|4|8|14|32)B$)")


_CLASS_CACHE: dict = {}


def _class_body(name: str, tree: Path):
    """(body text, base class names) of ``class name`` in the release's src/megatron/bridge/models."""
    if name not in _CLASS_CACHE:
        found = None
        for path in sorted((tree / "src" / "megatron" / "bridge" / "models").rglob("*.py")):
            text = path.read_text(errors="replace")
            m = re.search(rf"^class {re.escape(name)}\(([^)]*)\):(.*?)(?=^\S|\Z)", text, re.S | re.M)
            if m:
                bases = [b.strip().split(".")[-1] for b in m.group(1).split(",") if b.strip()]
                found = (m.group(2), bases)
                break
        _CLASS_CACHE[name] = found
    return _CLASS_CACHE[name]


def provider_field(names: list[str], field: str, tree: Path | None, depth: int = 0):
    """(found, value): the default a model-provider dataclass of the release's own source gives
    ``field`` (following its base classes), for an owner built from such a class."""
    if tree is None or depth > 8:
        return False, None
    for name in names:
        if not re.fullmatch(r"[A-Z][A-Za-z0-9_]*Provider[A-Za-z0-9_]*", name or ""):
            continue
        found = _class_body(name, tree)
        if found is None:
            continue
        body, bases = found
        m = re.search(rf"^    {re.escape(field)}\s*:[^=\n]*=\s*(.+?)\s*(#.*)?$", body, re.M)
        if m:
            try:
                return True, ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                return False, None
        ok, value = provider_field(bases, field, tree, depth + 1)
        if ok:
            return ok, value
    return False, None


#: every mixture-of-experts bridge / provider of these releases sets the all-to-all dispatcher:
#: src/megatron/bridge/models/{deepseek,qwen,gpt_oss,kimi,nemotronh,qwen_vl,glm}/*_provider.py
#: ``moe_token_dispatcher_type: str = "alltoall"`` (v0.2.0, v0.3.x) and *_bridge.py provider_bridge()
#: ``provider.moe_token_dispatcher_type = "alltoall"`` (v0.4.x, v0.5.x)
MOE_DISPATCHER_SOURCE = "src/megatron/bridge/models/*/ *_provider.py, *_bridge.py"

TREE: Path | None = None


def library_default(tag: str, owner, path: str):
    """(found, value) for an attribute the recipe reads before setting it."""
    parts = path.split(".")
    head, leaf = parts[0], parts[-1]
    if leaf == "num_moe_experts":
        names = recorder.origin_strings(owner)
        for s in names:
            if s in EXPERTS:
                return True, EXPERTS[s]
            if _DENSE_HF.match(s or ""):
                return True, None
            if "/" in (s or "") and _MOE_NAME.search(s):
                return True, ManyExperts()
        return provider_field(names, leaf, TREE)
    if leaf == "moe_token_dispatcher_type":
        ok, n = library_default(tag, owner, "model.num_moe_experts")
        if ok and n and n > 1:
            return True, "alltoall"
    if head == "model" or len(parts) == 1:
        ok, value = provider_field(recorder.origin_strings(owner), leaf, TREE)
        if ok:
            return ok, value
    table = {"model": MODEL, "ddp": DDP, "optimizer": OPTIMIZER, "comm_overlap": COMM_OVERLAP, "rng": RNG}.get(head)
    if len(parts) == 1:
        table = MODEL          # a provider object read directly (apply_flex_dispatcher_backend(model))
    if table is not None and leaf in table:
        return True, table[leaf][0]
    return False, None
