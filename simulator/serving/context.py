"""What stays fixed while layouts vary: model, system, stack, efficiency, formats, KV dtype.

``ServingContext.build`` loads the catalogs once and checks what does not depend on a layout
(the weight formats exist, the model can be served); ``check_request`` checks a request's
length against the model's context; the evaluation functions then take
numpy columns of layouts (``simulator.serving.evaluate``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cost_models.weight_formats import canonical_format, kv_dtype_bytes
from hardware_specs.catalog import is_file, load_cluster, load_serving_efficiency, load_stack, serving_stack_for
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from hardware_specs.stack_spec import StackSpec
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec


@dataclass(frozen=True)
class ServingContext:
    """The fixed inputs of a serving evaluation.

    Attributes:
        model, cluster: the model and the system.
        stack: the serving stack (framework release) whose documented behaviour applies.
        efficiency: the GPU generation's serving efficiency (fitted, or a prior).
        dense_format, expert_format: weight formats (canonical names).
        kv_bytes: bytes per KV-cache element.
        token_budget: tokens one step may process on this GPU (the stack's budget).
        kv_cache_dtype: the KV-cache dtype priced, ``auto`` resolved by the stack and checkpoint
            rules of ``build`` (``fp8``, ``bf16``, ``fp16``; ``auto`` = the 16-bit model dtype).
    """

    model: ModelSpec
    cluster: ClusterSpec
    stack: StackSpec
    efficiency: ServingEfficiency
    dense_format: str
    expert_format: str
    kv_bytes: float
    token_budget: int
    kv_cache_dtype: str = "auto"

    @property
    def behaviour(self) -> ServingBehaviour:
        return self.stack.serving

    def check_request(self, isl: int, osl: int) -> None:
        """Refuse a request with fewer than 2 output tokens (no TPOT), or one longer than the
        model's context: prompt + output tokens above ``ModelSpec.max_context_tokens``
        (config.json ``max_position_embeddings``; the engines refuse such a request, vLLM with
        "This model's maximum context length is ..."); no length is refused for a model that
        does not state its context."""
        if osl < 2:     # TPOT is the gap between output tokens: one token has none (it printed 0 ms)
            raise InputError("--osl", f"{osl} output token has no time per output token (TPOT)",
                             "use --osl 2 or more; the prompt alone is TTFT")
        most = self.model.max_context_tokens
        if most and isl + osl > most:
            name = "--isl" if isl >= most else "--osl"
            raise InputError(name, f"{isl:,} prompt + {osl:,} output tokens exceed the {most:,}-token context of "
                             f"{self.model.name} (config.json max_position_embeddings)",
                             f"keep --isl + --osl <= {most:,}")

    @classmethod
    def build(cls, model: str | ModelSpec, system: str | ClusterSpec, backend: str | StackSpec,
              dense_format: str | None = None, expert_format: str | None = None, kv_cache_dtype: str = "auto",
              backend_version: str | None = None, efficiency: ServingEfficiency | None = None) -> "ServingContext":
        """Load and check the fixed inputs. ``backend`` is a stack name (``vllm-0.14``), a
        framework (``vllm``, ``sglang``, ``trtllm``: the profile covering ``backend_version``,
        else the newest) or a ``StackSpec``."""
        m = model if isinstance(model, ModelSpec) else load_model(model)
        if m.hybrid_pattern:
            raise InputError("model", f"{m.name} is a hybrid Mamba model: serving it is not modelled (its Mamba "
                             "layers keep a fixed-size state per request, not a KV cache)",
                             "serve a transformer model, or simulate its training with `paraplan simulate`")
        c = system if isinstance(system, ClusterSpec) else load_cluster(system)
        if isinstance(backend, StackSpec):
            stack = backend
        else:
            try:
                stack = load_stack(backend)
            except InputError:
                # a stack file's own error (a bad value, a missing file) is the one to report,
                # not "no framework named FILE"
                if Path(backend).suffix in (".yaml", ".yml") or is_file(Path(backend)):
                    raise
                stack = serving_stack_for(backend, backend_version)
        if stack.serving is None:
            raise InputError("backend", f"stack {stack.name} has no serving section",
                             "choose a serving stack: vllm, sglang or trtllm")
        vendors = stack.serving.gpu_vendors
        if vendors and c.gpu.vendor.lower() not in vendors:
            raise InputError("backend", f"{stack.name} runs on {', '.join(vendors)} GPUs, not on {c.name}'s "
                             f"{c.gpu.name} ({c.gpu.vendor or 'unknown vendor'})",
                             "choose an engine that runs there (vllm or sglang), or a system of those GPUs"
                             if c.gpu.vendor else "state the GPU file's vendor (e.g. vendor: nvidia)")
        if stack.serving.speculative_tokens:
            raise InputError("backend", f"stack {stack.name} drafts {stack.serving.speculative_tokens} speculative "
                             "tokens per step; speculative decoding is not modelled yet",
                             "use a stack profile without speculative decoding")
        dense = canonical_format(dense_format, "dense_format")
        expert = canonical_format(expert_format if expert_format is not None else dense_format, "expert_format")
        kv = stack.serving.kv_cache_dtype if kv_cache_dtype in (None, "auto") else kv_cache_dtype
        if kv == "auto" and stack.serving.kv_dtype_from_checkpoint and {"nvfp4", "fp8"} & {dense, expert}:
            # NVFP4 and per-tensor FP8 checkpoints are NVIDIA ModelOpt exports, whose
            # hf_quant_config.json states kv_cache_quant_algo FP8 (the FP8 export's example in
            # ModelOpt's docs: {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}); block-scaled
            # FP8 (fp8_block) checkpoints come from the model's authors without a KV format
            kv = "fp8"
        eff = efficiency if efficiency is not None else load_serving_efficiency(c.gpu.generation)
        return cls(model=m, cluster=c, stack=stack, efficiency=eff, dense_format=dense, expert_format=expert,
                   kv_bytes=kv_dtype_bytes(kv), token_budget=stack.serving.token_budget(c.gpu.hbm_bytes),
                   kv_cache_dtype=kv)
