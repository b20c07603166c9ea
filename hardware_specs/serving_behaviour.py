"""What a serving engine release does (the ``serving`` section of a software-stack file).

Every field is a documented behaviour of vLLM, SGLang or TensorRT-LLM at the releases a stack
file names, with the framework file or docs page it comes from in the file's ``source:``
entries (``StackSpec.citations``). Nothing here is fitted: the hardware's achieved efficiency
is ``hardware_specs.serving_efficiency`` (one model per GPU generation, fitted across stacks).

Units: seconds (``_s``), tokens, requests, fractions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np

from hardware_specs.errors import InputError, shown

#: the weight formats a stack may name (``cost_models.weight_formats.WEIGHT_FORMATS``, which this
#: data layer cannot import; a test holds the two equal)
STACK_WEIGHT_FORMATS = ("bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4_wo")

#: which steps run as captured CUDA graphs: ``decode_only`` (steps holding only decode tokens,
#: up to ``cuda_graph_max_batch`` requests: TensorRT-LLM, SGLang), ``full_and_piecewise``
#: (vLLM: decode steps in one graph, mixed steps in per-layer graphs with attention launched
#: eagerly), ``none`` (every kernel launched from Python).
CUDA_GRAPH_MODES = ("decode_only", "full_and_piecewise", "none")
#: KV-cache dtypes: ``auto`` = the 16-bit activation dtype (all three engines' default unless the
#: checkpoint says otherwise), ``fp8``, ``bf16``/``fp16``.
KV_CACHE_DTYPES = ("auto", "fp8", "bf16", "fp16")
#: what ``gpu_memory_fraction`` is a fraction of: ``total`` device memory (vLLM
#: ``gpu_memory_utilization``, SGLang ``mem_fraction_static``: weights + KV inside it) or the
#: ``free`` memory left after weights and activations (TensorRT-LLM ``free_gpu_memory_fraction``).
MEMORY_FRACTION_OF = ("total", "free")
#: what must be free in the KV pool to start a request: ``prompt`` (blocks for its prompt; the
#: cache grows block by block and running requests are preempted or retracted when it runs out:
#: vLLM, SGLang) or ``full_request`` (blocks for prompt + maximum output reserved up front, never
#: preempted: TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler).
KV_ADMISSIONS = ("prompt", "full_request")
#: how the running decodes of an engine with ``mixed_batches`` share a step's token budget with
#: the prompts: ``with_drafts`` (each running decode takes 1 + k of the budget's tokens, its last
#: token and its k speculative drafts, before any prompt is given what is left, and decodes beyond
#: the budget wait for a later step, so no step holds more than the budget: vLLM V1, TensorRT-LLM)
#: or ``one_per_request`` (the prompt chunk is the budget less one token per running request;
#: the decodes themselves all run, whatever the budget: SGLang's mixed chunk)
DECODE_BUDGET_SHARES = ("with_drafts", "one_per_request")
#: how the routed experts of a worker may be split over its tp x adp ranks (one pipeline stage):
#: ``all_ep_or_all_tp`` (expert-parallel over all of them, or tensor-parallel over all of them,
#: never a mix: vLLM) or ``any`` (expert tensor parallelism x expert parallelism = tp x adp in
#: any factorisation: SGLang, TensorRT-LLM)
EXPERT_SPLITS = ("all_ep_or_all_tp", "any")
#: the GEMM inputs of a softmax-attention layer with a dense gated MLP whose activations an engine
#: may quantise in a kernel of its own before the GEMM (``activation_quant_inputs``): the QKV
#: projection's (after the input RMSNorm), the output projection's (after the attention core), the
#: gate-up projection's (after the post-attention RMSNorm) and the down projection's (after the
#: SiLU-and-mul)
ACTIVATION_QUANT_INPUTS = ("qkv", "o_proj", "gate_up", "down")
#: of those, the inputs that follow an RMSNorm, which an all-reduce fused with the residual add
#: and the norm also quantises (``allreduce_norm_fusion``: TensorRT-LLM
#: ``AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_FP8`` / ``_QUANT_NVFP4``)
NORM_FOLLOWED_INPUTS = ("qkv", "gate_up")
#: the weight formats whose GEMMs take quantised activations (W8A8: per-tensor FP8, block-scaled
#: FP8 with per-token-group activation scales; W4A4: NVFP4), the only keys
#: ``activation_quant_inputs`` takes: a 16-bit or weight-only format (int4_wo, mxfp4 experts)
#: multiplies 16-bit activations and quantises none
ACTIVATION_QUANT_FORMATS = ("fp8", "fp8_block", "nvfp4")
#: plausibility bounds of the host times (seconds per step or launch) and the reserve (GiB)
MAX_HOST_S = 1.0
MAX_RESERVED_GIB = 1024.0
#: plausibility bound of the hold settings (steps): the engines' own examples and tuned
#: deployments use tens of steps (SGLang recv interval 10-30, TensorRT-LLM batch waits 20-60)
MAX_HOLD_STEPS = 10_000
#: plausibility bound of the engine's counts (tokens a step, requests running, a CUDA graph's
#: batch, a one-shot all-reduce's tokens): past any engine's default (vLLM 8192 tokens and 1024
#: requests a step), and below what a float holds exactly; an integer of hundreds of digits
#: (10**400) was float()'s OverflowError, an internal error, where the counts meet numpy
MAX_ENGINE_COUNT = 2**31
#: plausibility bound of a KV-cache block (tokens): the engines offer up to 256 (vLLM
#: ``BlockSize``), TensorRT-LLM any power of two
MAX_KV_BLOCK_TOKENS = 4096


def _by_memory(table: Mapping, where: str, least: int) -> Mapping[float, int]:
    """``table`` (HBM GiB threshold -> whole number >= ``least``) checked, sorted by threshold."""
    if not table:
        raise InputError(where, "must be a whole number or a mapping of HBM GiB -> a whole number",
                         "e.g. {0: 256, 70: 1024}")
    checked = {}
    for gib, value in table.items():
        try:
            gib_f, value_i = float(gib), int(value)
        except (TypeError, ValueError, OverflowError):      # OverflowError: int(inf)
            raise InputError(where, f"bad entry {gib!r}: {value!r}",
                             "use HBM GiB: value, e.g. {0: 256, 70: 1024}") from None
        if isinstance(value, bool) or not math.isfinite(gib_f) or gib_f < 0 or value_i < least or value_i != value \
                or value_i > MAX_ENGINE_COUNT:
            raise InputError(where, f"bad entry {shown(gib)}: {shown(value)}",
                             f"thresholds >= 0 GiB, whole numbers from {least} to {MAX_ENGINE_COUNT:,}")
        checked[gib_f] = value_i
    return MappingProxyType(dict(sorted(checked.items())))


def _name_list(names, where: str, what: str, fix: str) -> tuple:
    """``names`` (a list of non-empty strings) checked, stripped and lower-cased, as a tuple."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or \
            not all(isinstance(n, str) and n.strip() for n in names):
        raise InputError(where, f"must be a list of {what}, got {shown(names)}", fix)
    return tuple(n.strip().lower() for n in names)


@dataclass(frozen=True)
class ServingBehaviour:
    """One serving engine release's default behaviour (documented, not fitted).

    Attributes:
        mixed_batches: prefill tokens share a step with the decode tokens of running requests
            (vLLM V1's unified scheduler, TensorRT-LLM in-flight batching). False: a prefill
            batch runs alone and running decodes wait for it (SGLang without
            ``--enable-mixed-chunk``).
        chunked_prefill: a prompt longer than the token budget is split over several steps.
            False: each step takes whole prompts up to the budget (at least one).
        prefill_token_budget: tokens one step may process, by device memory: a mapping of HBM
            GiB threshold -> tokens; the largest threshold not above the GPU's memory applies
            (vLLM ``max_num_batched_tokens``, SGLang ``chunked_prefill_size``, TensorRT-LLM
            ``max_num_tokens``).
        max_running_requests: requests one engine (one attention-data-parallel rank) keeps
            running at most; 0 = limited by the KV cache alone (vLLM ``max_num_seqs``,
            TensorRT-LLM ``max_batch_size``). A whole number, or by device memory like
            ``prefill_token_budget`` (HBM GiB threshold -> requests; ``running_requests``).
        smallest_tier_gpus: GPUs that take the defaults of the smallest HBM threshold of
            ``prefill_token_budget`` and ``max_running_requests`` whatever their memory: each
            entry a text that, found in the GPU's name (``GPUSpec.name``, case-insensitive),
            marks one (vLLM ``EngineArgs.get_batch_defaults``: the >= 70 GiB defaults apply only
            where ``"a100" not in device_name``). Empty: memory alone decides.
        cuda_graphs: one of ``CUDA_GRAPH_MODES``.
        cuda_graph_max_batch: largest decode batch captured in a CUDA graph; larger decode
            steps are launched eagerly.
        overlap_scheduler: the host schedules step n+1 while the GPU runs step n (SGLang's
            overlap scheduler, TensorRT-LLM's overlap scheduler, vLLM async scheduling), so only
            host time beyond the GPU step is exposed; and a request arriving while step n runs
            joins batch n+2, not n+1 (``simulator.serving.aggregated.join_steps``).
        context_overlap_scheduler: a disaggregated context-only (prefill) worker keeps the
            overlap scheduler too. False: context servers run without it, whatever
            ``overlap_scheduler`` says (TensorRT-LLM: its disaggregated examples start context
            servers with ``disable_overlap_scheduler: True`` and generation servers with the
            default), so every prefill step exposes the whole ``host_step_s``. Read through
            ``context_only``, by the simulator's prefill side and the exports alike. Default
            True; every shipped stack states it.
        host_step_s: host time per step outside the kernels (scheduling, input preparation,
            sampling bookkeeping, output processing), seconds.
        host_launch_s: host time to launch one kernel eagerly (outside a CUDA graph), seconds.
        gpu_memory_fraction: share of device memory the engine may use (see ``memory_fraction_of``).
        memory_fraction_of: one of ``MEMORY_FRACTION_OF``.
        runtime_reserved_gib: device memory outside the engine's pools (CUDA context, NCCL and
            all-reduce buffers, CUDA-graph pools), GiB.
        reserve_covers_activations: the activation workspace lives inside that reserve (SGLang
            sizes its reserve to hold it) instead of being subtracted on top.
        kv_cache_dtype: default KV-cache dtype, one of ``KV_CACHE_DTYPES``.
        kv_dtype_from_checkpoint: with ``auto``, the KV cache takes the dtype the checkpoint's
            quantisation config names (NVIDIA ModelOpt NVFP4 and per-tensor FP8 exports name FP8:
            ``kv_cache_quant_algo`` in their hf_quant_config.json); False: ``auto`` is 16-bit.
        custom_allreduce: small tensor-parallel all-reduces inside one NVLink domain use the
            engine's one-shot / two-shot kernels instead of NCCL rings.
        oneshot_allreduce_max_bytes: which of the engine's two NVLink all-reduce kernels runs a
            message (``cost_models.inference_comm``): a mapping of group size -> bytes; a group
            of n GPUs takes the entry of the smallest listed size >= n and runs the one-shot
            kernel (every GPU reads the n - 1 peers' whole buffers) for messages below it, the
            two-shot kernel (reduce-scatter + all-gather; priced at most at the one-shot
            kernel's cost, the switch being the engine's measured crossover) otherwise (vLLM and SGLang
            custom_all_reduce.cuh: one-shot at 2 GPUs, below 512 KiB at <= 4, below 256 KiB at
            <= 8). None, or a group larger than every listed size: the faster of the two, as
            an engine that tuned its switch point on the message alone would pick.
        oneshot_allreduce_max_tokens: the one-shot kernel runs only for messages of at most this
            many tokens, whatever their bytes (TensorRT-LLM's MIN_LATENCY strategy: one-shot
            for <= ``kOneShotMaxToken`` = 128 tokens); 0 = no token limit.
        allreduce_norm_fusion: a tensor-parallel all-reduce (tp > 1, no attention data
            parallelism) also adds the residual and applies the RMSNorm that follows it, in one
            kernel (TensorRT-LLM ``AllReduceFusionOp.RESIDUAL_RMS_NORM``): the step has one kernel
            fewer per all-reduce that a counted norm follows (``cost_models.inference_step``).
        kv_admission: one of ``KV_ADMISSIONS``.
        kv_block_tokens: tokens per KV-cache block (page): the engine allocates a request's KV
            cache in whole blocks, so a request of c tokens of context holds ceil(c / n) x n
            tokens' worth (``cost_models.kv_cache.kv_held_tokens``): vLLM ``--block-size`` (16 on
            CUDA), SGLang ``--page-size`` (1), TensorRT-LLM ``KvCacheConfig.tokens_per_block``
            (32). Default 1 (per token); every shipped serving stack states it.
        decode_budget_share: one of ``DECODE_BUDGET_SHARES``: what the running decodes take of a
            mixed step's token budget (``prefill_token_budget``), so what is left for prompts
            (``simulator.serving.step_budget``). Only read with ``mixed_batches``. Default
            ``with_drafts``; every shipped stack states it.
        speculative_tokens: draft tokens per step by default (MTP / EAGLE); 0 = none, the
            default of all three engines (each needs an explicit speculative config).
        recv_interval_steps: the scheduler reads new requests only every N decode steps (SGLang
            ``--scheduler-recv-interval``, ``ServerArgs.scheduler_recv_interval``, default 1:
            python/sglang/srt/managers/scheduler_recv_skipper.py ``SchedulerRecvSkipper.handle``
            adds a weight per loop iteration, 1 after a decode step (env
            ``SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE``) or an idle iteration, 1000 after
            any other step, and ``Scheduler.recv_requests`` returns nothing until the sum reaches
            N; not with attention DP, which the skipper asserts off). A request arriving at a
            random decode step waits (N - 1) / 2 steps more on average; after a prefill step it
            is read at once. 1 = every step (vLLM, TensorRT-LLM, SGLang's default).
        context_wait_steps: iterations the scheduler holds a waiting context (prefill) request
            while the batch is not full, before scheduling it anyway (TensorRT-LLM
            ``batch_wait_timeout_iters``, default 0: tensorrt_llm/_torch/pyexecutor/py_executor.py
            ``PyExecutor._waiting_requests``, since moved to the scheduler's ``_schedule``: the
            context requests are held while fewer than ``batch_wait_max_tokens_ratio`` x
            ``max_num_tokens`` tokens (the waiting prompts' plus one per decode) are scheduled and
            the wait counter is below the timeout; only when decodes are running and attention DP
            is off). The ratio matters: at its default 0 the token test always passes and the
            timeout holds nothing, so set this to ``batch_wait_timeout_iters`` only when the ratio
            is above what the waiting prompts and decodes reach (a ratio of 0.9 x 8192 tokens is
            not reached by one 1k prompt and a few hundred decodes), else 0. TensorRT-LLM's
            attention-DP balance (``attention_dp_config``: ``enable_balance``, default False;
            ``timeout_iters``, default 50; ``batching_wait_iters``, default 10; same files,
            ``_balance_adp_requests``) is a hold of the same kind and is expressed by the same
            field: with balance on, context requests are held until every attention-DP rank has
            one waiting (then ``batching_wait_iters`` more while all ranks also decode), up to
            ``timeout_iters``, and released at once when some rank has no decodes; at the loads
            where all ranks rarely hold a prompt together the hold runs to the timeout, so set
            this to ``timeout_iters`` (``batching_wait_iters`` alone when every rank always has
            prompts waiting). 0 = no hold (the default of all three engines).
        expert_splits: which (expert tensor parallel, expert parallel) splits of a worker's
            G = tp x adp ranks the engine runs, one of ``EXPERT_SPLITS``. ``all_ep_or_all_tp``:
            etp 1 x ep G or etp G x ep 1 only (vLLM ``FusedMoEParallelConfig.make``,
            vllm/model_executor/layers/fused_moe/config.py: the MoE layer flattens dp x tp into
            one group and, with ``--enable-expert-parallel``, makes all of it expert-parallel,
            ep = dp x tp, else all of it tensor-parallel, ep 1). ``any``: every etp x ep = G
            (SGLang: ``--ep-size`` divides ``--tp-size``, moe_tp = tp / ep; TensorRT-LLM:
            ``moe_tensor_parallel_size`` x ``moe_expert_parallel_size`` = tensor_parallel_size).
            Default ``any`` (no restriction); every shipped stack states it.
        token_budget_split_over_attention_dp: the token budget is the engine's, shared by its
            attention-DP ranks: each rank's steps take at most budget // adp tokens (SGLang
            divides ``chunked_prefill_size`` by the attention-DP size). False: each rank has the
            whole budget (vLLM's data-parallel engine cores, TensorRT-LLM's ranks). Default False.
        attention_dp_with_tp: an attention-data-parallel rank may itself span several
            tensor-parallel GPUs (tp > 1 with adp > 1: SGLang's dp attention, attention tp =
            tp_size / dp_size; vLLM's DP x TP). False: attention is tensor-parallel or
            data-parallel over the whole worker, an attention-DP rank one GPU (TensorRT-LLM's
            ``enable_attention_dp``). Default True; every shipped stack states it.
        lm_head_split_over_attention_dp: under attention data parallelism (adp > 1) an untied LM
            head is vocabulary-parallel over the worker's whole tp x adp group, not over one
            attention-DP rank's tp GPUs: each GPU holds V h / (tp adp) of it, and each step gathers
            every rank's logit hidden states to all the group's GPUs, multiplies the adp ranks'
            tokens against its V / (tp adp) rows, all-gathers the vocabulary shards of the logits
            over the group and keeps its own rank's rows (SGLang: ``ParallelLMHead(...,
            use_attn_tp_group=enable_dp_lm_head)`` with ``--enable-dp-lm-head`` off by default;
            ``LogitsProcessor``: ``dp_gather_replicate``, the head GEMM,
            ``tensor_model_parallel_all_gather``, ``dp_scatter``). False: the head is split over
            the attention tp alone, no cross-rank traffic (vLLM: data-parallel ranks are separate
            engines; TensorRT-LLM: ``enable_lm_head_tp_in_adp`` off by default, the head whole on
            each one-GPU attention-DP rank). Default False; every shipped stack states it.
            (``cost_models.serving_memory.lm_head_dp_share``, ``cost_models.inference_step``.)
        fp8_context_attention: the engine runs the prefill attention core (context FMHA, and
            the expanded context MLA) in FP8 whenever its KV cache is FP8 or narrower: the queries
            are quantised to the cache's format and both BMMs run on the FP8 tensor cores, at
            twice the 16-bit rate on Hopper and Blackwell (TensorRT-LLM
            ``cpp/tensorrt_llm/thop/attentionOp.cpp``: ``mFP8ContextFMHA = ... ||
            (hasFp8KvCache() && use_paged_context_fmha)``, paged context FMHA being on with the
            default KV block reuse, and ``mFP8ContextMLA = (sm 90/100/103/120) &&
            hasFp8KvCache()``). Read through ``prefill_attention_format``. Default False: the
            16-bit rate whatever the cache (an engine where the FP8 path is not established).
        activation_quant_inputs: per weight format whose GEMMs take quantised activations (W8A8,
            W4A4), which of a dense layer's GEMM inputs (``ACTIVATION_QUANT_INPUTS``) the engine
            quantises in a separate kernel (one launch, reading the 16-bit input and writing the
            quantised one and its scales) rather than in the kernel that produces the input (a
            norm, the attention core, the activation). Each listed input of a softmax-attention
            layer (qkv, o_proj) or a dense-MLP layer (gate_up, down) adds one kernel a layer; an
            input after a norm (``NORM_FOLLOWED_INPUTS``) adds none where the all-reduce before
            it runs fused with that norm (``allreduce_norm_fusion``, tp > 1 without attention
            DP). MLA blocks and routed experts are not covered. A format not listed (16-bit,
            weight-only formats, or an engine where it is not established): none. Default empty.
        gpu_vendors: the GPU vendors the engine runs on (``GPUSpec.vendor``); empty: any.
        native_only_formats: weight formats the engine serves only on GPUs whose tensor cores
            compute them (it has no weight-only kernel that dequantises them to 16-bit, as
            vLLM's FP8 Marlin does on Ampere); refused on other GPUs. Empty: none.
    """

    mixed_batches: bool = True
    chunked_prefill: bool = True
    prefill_token_budget: Mapping[float, int] = field(default_factory=lambda: {0.0: 8192})
    max_running_requests: int | Mapping[float, int] = 0
    smallest_tier_gpus: tuple = ()
    cuda_graphs: str = "decode_only"
    cuda_graph_max_batch: int = 512
    overlap_scheduler: bool = True
    context_overlap_scheduler: bool = True
    host_step_s: float = 0.0
    host_launch_s: float = 0.0
    gpu_memory_fraction: float = 0.9
    memory_fraction_of: str = "total"
    runtime_reserved_gib: float = 2.0
    reserve_covers_activations: bool = False
    kv_cache_dtype: str = "auto"
    kv_dtype_from_checkpoint: bool = False
    custom_allreduce: bool = True
    oneshot_allreduce_max_bytes: Mapping[float, float] | None = None
    oneshot_allreduce_max_tokens: int = 0
    allreduce_norm_fusion: bool = False
    speculative_tokens: int = 0
    kv_admission: str = "prompt"
    kv_block_tokens: int = 1
    decode_budget_share: str = "with_drafts"
    recv_interval_steps: int = 1
    context_wait_steps: int = 0
    expert_splits: str = "any"
    token_budget_split_over_attention_dp: bool = False
    attention_dp_with_tp: bool = True
    lm_head_split_over_attention_dp: bool = False
    fp8_context_attention: bool = False
    activation_quant_inputs: Mapping[str, tuple] = field(default_factory=dict)
    gpu_vendors: tuple = ()
    native_only_formats: tuple = ()

    def __post_init__(self) -> None:
        where = "serving"
        formats = self.native_only_formats
        if isinstance(formats, str) or not isinstance(formats, (list, tuple)) or \
                not all(isinstance(f, str) and f.strip().lower() in STACK_WEIGHT_FORMATS for f in formats):
            raise InputError(f"{where}.native_only_formats", f"must be a list of weight formats, got {shown(formats)}",
                             "choose from " + ", ".join(STACK_WEIGHT_FORMATS) + "; an empty list means none")
        object.__setattr__(self, "native_only_formats", tuple(f.strip().lower() for f in formats))
        quant = self.activation_quant_inputs
        fix = ("a mapping of weight format (" + ", ".join(ACTIVATION_QUANT_FORMATS) + ") -> list of "
               + ", ".join(ACTIVATION_QUANT_INPUTS) + ", e.g. {nvfp4: [qkv, gate_up, down]}")
        if not isinstance(quant, Mapping):
            raise InputError(f"{where}.activation_quant_inputs", f"must be a mapping, got {shown(quant)}", fix)
        checked = {}
        for fmt, inputs in quant.items():
            key = str(fmt).strip().lower()
            if key not in ACTIVATION_QUANT_FORMATS or isinstance(inputs, str) or not isinstance(inputs, (list, tuple)) \
                    or not all(isinstance(i, str) and i in ACTIVATION_QUANT_INPUTS for i in inputs) \
                    or len(set(inputs)) != len(inputs):
                raise InputError(f"{where}.activation_quant_inputs", f"bad entry {fmt!r}: {inputs!r}", fix)
            checked[key] = tuple(inputs)
        object.__setattr__(self, "activation_quant_inputs", MappingProxyType(checked))
        object.__setattr__(self, "gpu_vendors", _name_list(
            self.gpu_vendors, f"{where}.gpu_vendors", "vendor names", "e.g. [nvidia]; an empty list means any GPU"))
        if self.cuda_graphs not in CUDA_GRAPH_MODES:
            raise InputError(f"{where}.cuda_graphs", f"unknown mode {self.cuda_graphs!r}",
                             "choose one of " + ", ".join(CUDA_GRAPH_MODES))
        if self.memory_fraction_of not in MEMORY_FRACTION_OF:
            raise InputError(f"{where}.memory_fraction_of", f"unknown value {self.memory_fraction_of!r}",
                             "choose one of " + ", ".join(MEMORY_FRACTION_OF))
        if self.kv_admission not in KV_ADMISSIONS:
            raise InputError(f"{where}.kv_admission", f"unknown value {self.kv_admission!r}",
                             "choose one of " + ", ".join(KV_ADMISSIONS))
        if self.decode_budget_share not in DECODE_BUDGET_SHARES:
            raise InputError(f"{where}.decode_budget_share", f"unknown value {self.decode_budget_share!r}",
                             "choose one of " + ", ".join(DECODE_BUDGET_SHARES))
        if self.expert_splits not in EXPERT_SPLITS:
            raise InputError(f"{where}.expert_splits", f"unknown value {self.expert_splits!r}",
                             "choose one of " + ", ".join(EXPERT_SPLITS))
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise InputError(f"{where}.kv_cache_dtype", f"unknown dtype {self.kv_cache_dtype!r}",
                             "choose one of " + ", ".join(KV_CACHE_DTYPES))
        if not isinstance(self.prefill_token_budget, Mapping) or not self.prefill_token_budget:
            raise InputError(f"{where}.prefill_token_budget", "must be a mapping of HBM GiB -> tokens",
                             "e.g. {0: 2048, 70: 8192}")
        object.__setattr__(self, "prefill_token_budget", _by_memory(
            self.prefill_token_budget, f"{where}.prefill_token_budget", least=1))
        if isinstance(self.max_running_requests, Mapping):
            object.__setattr__(self, "max_running_requests", _by_memory(
                self.max_running_requests, f"{where}.max_running_requests", least=0))
        object.__setattr__(self, "smallest_tier_gpus", _name_list(
            self.smallest_tier_gpus, f"{where}.smallest_tier_gpus", "GPU name parts",
            "e.g. [a100]; an empty list means memory alone decides"))
        if self.oneshot_allreduce_max_bytes is not None:
            limits = self.oneshot_allreduce_max_bytes
            if not isinstance(limits, Mapping) or not limits:
                raise InputError(f"{where}.oneshot_allreduce_max_bytes",
                                 "must be a mapping of group size -> bytes, or null",
                                 "e.g. {2: 8388608, 4: 524288, 8: 262144}")
            checked = {}
            for gpus, most in limits.items():
                try:
                    gpus_f, most_f = float(gpus), float(most)
                except (TypeError, ValueError, OverflowError):      # OverflowError: an int of 400 digits
                    raise InputError(f"{where}.oneshot_allreduce_max_bytes", f"bad entry {shown(gpus)}: {shown(most)}",
                                     "use group size: bytes, e.g. {8: 262144}") from None
                if isinstance(most, bool) or not (math.isfinite(gpus_f) and gpus_f >= 2 and math.isfinite(most_f)
                                                  and most_f >= 0):
                    raise InputError(f"{where}.oneshot_allreduce_max_bytes", f"bad entry {gpus!r}: {most!r}",
                                     "group sizes >= 2, finite bytes >= 0")
                checked[gpus_f] = most_f
            object.__setattr__(self, "oneshot_allreduce_max_bytes", MappingProxyType(dict(sorted(checked.items()))))
        for name in ("max_running_requests", "cuda_graph_max_batch", "speculative_tokens",
                     "oneshot_allreduce_max_tokens"):
            value = getattr(self, name)
            if name == "max_running_requests" and isinstance(value, Mapping):
                continue            # checked entry by entry above
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ENGINE_COUNT:
                raise InputError(f"{where}.{name}", f"must be a whole number from 0 to {MAX_ENGINE_COUNT:,}, "
                                 f"got {shown(value)}")
        if isinstance(self.kv_block_tokens, bool) or not isinstance(self.kv_block_tokens, int) or \
                not 1 <= self.kv_block_tokens <= MAX_KV_BLOCK_TOKENS:
            raise InputError(f"{where}.kv_block_tokens", f"must be a whole number of tokens in [1, {MAX_KV_BLOCK_TOKENS}], "
                             f"got {shown(self.kv_block_tokens)}", "e.g. 16 (vLLM's default block size)")
        for name, least in (("recv_interval_steps", 1), ("context_wait_steps", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_HOLD_STEPS:
                raise InputError(f"{where}.{name}", f"must be a whole number of steps in [{least}, {MAX_HOLD_STEPS}], "
                                 f"got {shown(value)}")
        # upper bounds far past any engine (vLLM's host step is ~1 ms, a launch ~5 us, reserves a
        # few GiB): a larger value is a typo that would print TTFTs of 1e300 s
        for name, most in (("host_step_s", MAX_HOST_S), ("host_launch_s", MAX_HOST_S),
                           ("runtime_reserved_gib", MAX_RESERVED_GIB)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    and 0 <= value <= most):
                raise InputError(f"{where}.{name}", f"must be a finite number in [0, {most:g}], got {shown(value)}")
        if not (0.0 < self.gpu_memory_fraction <= 1.0):
            raise InputError(f"{where}.gpu_memory_fraction", f"must be in (0, 1], got {shown(self.gpu_memory_fraction)}")

    def _tier(self, table: Mapping[float, int], hbm_bytes: float, gpu_name: str) -> int:
        """The value of ``table`` (HBM GiB threshold -> value) for a GPU: the largest threshold
        not above its memory, or the smallest threshold for a GPU of ``smallest_tier_gpus``."""
        values = list(table.values())
        if any(part in gpu_name.lower() for part in self.smallest_tier_gpus):
            return int(values[0])
        gib = hbm_bytes / 2**30
        chosen = None
        for threshold, value in table.items():
            if gib >= threshold:
                chosen = value
        return int(chosen if chosen is not None else values[0])

    def token_budget(self, hbm_bytes: float, gpu_name: str = "") -> int:
        """Tokens one step may process on the GPU ``gpu_name`` with ``hbm_bytes`` of device memory."""
        return self._tier(self.prefill_token_budget, hbm_bytes, gpu_name)

    def running_requests(self, hbm_bytes: float, gpu_name: str = "") -> int:
        """Requests one engine keeps running at most on the GPU ``gpu_name`` with ``hbm_bytes``
        of device memory (0: the KV cache alone limits them)."""
        cap = self.max_running_requests
        return self._tier(cap, hbm_bytes, gpu_name) if isinstance(cap, Mapping) else int(cap)

    def on_gpu(self, hbm_bytes: float, gpu_name: str) -> "ServingBehaviour":
        """This behaviour on one GPU: the token budget and running-request cap it takes there
        (``token_budget``, ``running_requests``) as its only values."""
        return replace(self, prefill_token_budget={0.0: self.token_budget(hbm_bytes, gpu_name)},
                       max_running_requests=self.running_requests(hbm_bytes, gpu_name), smallest_tier_gpus=())

    def context_only(self) -> "ServingBehaviour":
        """This behaviour on a disaggregated context-only (prefill) worker: the overlap
        scheduler only where ``context_overlap_scheduler`` keeps it (the one rule both the
        simulator's prefill side and the exports' context-server settings read)."""
        overlap = self.overlap_scheduler and self.context_overlap_scheduler
        return self if overlap == self.overlap_scheduler else replace(self, overlap_scheduler=overlap)

    def prefill_attention_format(self, kv_bytes: float) -> str:
        """The dtype of the prefill attention core's BMMs for a KV cache of ``kv_bytes`` bytes
        an element: ``fp8`` under ``fp8_context_attention`` with an FP8 (1 byte) or narrower
        cache, else ``bf16``."""
        return "fp8" if self.fp8_context_attention and float(kv_bytes) <= 1.0 else "bf16"

    def quant_inputs(self, weight_format: str) -> tuple:
        """The dense layer's GEMM inputs the engine quantises in kernels of their own for weights
        in ``weight_format`` (``activation_quant_inputs``; empty where none)."""
        return tuple(self.activation_quant_inputs.get(str(weight_format).strip().lower(), ()))

    def graph_covers(self, decode_batch, mixed) -> "object":
        """Whether a step runs from a CUDA graph (numpy-friendly): a decode-only forward pass of
        at most ``cuda_graph_max_batch`` requests under ``decode_only`` or ``full_and_piecewise``.
        ``decode_batch`` is the batch of one forward: under pipeline parallelism one micro-batch's
        (``cost_models.inference_step.step_time``)."""
        if self.cuda_graphs == "none":
            return np.zeros(np.shape(decode_batch), dtype=bool) if np.ndim(decode_batch) else False
        return np.logical_and(np.logical_not(mixed), np.asarray(decode_batch) <= self.cuda_graph_max_batch)

    def oneshot_allreduce(self, message_bytes, group, tokens):
        """(one-shot, stated): numpy bool arrays over the rows of ``message_bytes``, ``group``
        (GPUs) and ``tokens``: whether the engine runs its one-shot all-reduce kernel (else its
        two-shot one), and whether it states a switch point for that group size at all (False
        for a group larger than every listed size); (None, None) when
        ``oneshot_allreduce_max_bytes`` is None. Where nothing is stated the caller takes the
        faster of the two kernels."""
        limits = self.oneshot_allreduce_max_bytes
        if limits is None:
            return None, None
        n = np.asarray(group, dtype=float)
        most = np.full(np.broadcast_shapes(n.shape, np.shape(message_bytes), np.shape(tokens)), np.inf)
        listed = np.zeros(most.shape, dtype=bool)
        for gpus, cap in sorted(limits.items(), reverse=True):       # the smallest size >= n wins
            fits = n <= gpus
            most = np.where(fits, cap, most)
            listed = listed | fits
        oneshot = np.asarray(message_bytes, dtype=float) < most
        if self.oneshot_allreduce_max_tokens:
            oneshot = oneshot & (np.asarray(tokens, dtype=float) <= self.oneshot_allreduce_max_tokens)
        return oneshot & listed, listed

    def runs_expert_split(self, moe_tp, moe_ep):
        """Whether the engine runs the routed experts split ``moe_tp`` x ``moe_ep`` over a
        worker's moe_tp x moe_ep ranks (numpy-friendly; ``expert_splits``). A dense model's
        (tp x adp, 1) is a split every engine runs."""
        if self.expert_splits == "any":
            return np.ones(np.broadcast_shapes(np.shape(moe_tp), np.shape(moe_ep)), dtype=bool)
        return np.logical_or(np.asarray(moe_tp) == 1, np.asarray(moe_ep) == 1)

    def rank_token_budget(self, budget: float, adp):
        """Tokens one attention-DP rank's step may take (numpy-friendly): ``budget``, or
        budget // adp (at least 1) under ``token_budget_split_over_attention_dp``."""
        adp = np.asarray(adp, dtype=float)
        if not self.token_budget_split_over_attention_dp:
            return np.full(adp.shape, float(budget))
        return np.maximum(np.floor(float(budget) / np.maximum(adp, 1.0)), 1.0)

    def runs_attention_split(self, tp, adp):
        """Whether the engine runs attention over ``adp`` data-parallel ranks of ``tp`` GPUs each
        (numpy-friendly; ``attention_dp_with_tp``)."""
        if self.attention_dp_with_tp:
            return np.ones(np.broadcast_shapes(np.shape(tp), np.shape(adp)), dtype=bool)
        return np.logical_or(np.asarray(tp) == 1, np.asarray(adp) == 1)

    def expert_splits_text(self, group: int) -> str:
        """The splits of a ``group``-rank worker the engine runs, in words (for error messages)."""
        if self.expert_splits == "any":
            return f"any etp x ep = {group}"
        return f"etp1 x ep{group} (all expert-parallel) or etp{group} x ep1 (all tensor-parallel)"

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
