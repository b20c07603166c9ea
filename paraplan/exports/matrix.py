"""The plans every export is checked on by its framework's own parser and validator.

One entry per kind of plan the issue names (dense, GQA, MoE, MLA + MTP, context parallelism
of each flavour, ZeRO 0-3, a pipeline with virtual stages, uneven layer counts, FP8), as plan
rows (``ParallelConfig`` fields plus ``model`` and ``seq_len``). ``refused`` names, per
framework, the field of the ``InputError`` the export must raise because the framework cannot
run that plan as planned; every other framework must accept the export. The tests
(``tests/test_exports*.py``) and ``tools/megatron_flags.py`` read this list.
"""
from __future__ import annotations

#: (id, plan row, {framework: field of the refusal}); world size = dp * tp * pp * cp.
MATRIX: tuple[tuple[str, dict, dict], ...] = (
    ("dense-gpt3-tp-pp", dict(model="gpt3-175b", seq_len=2048, dp=4, tp=8, pp=8, micro_batch=1, global_batch=512,
                              zero_stage=1, recompute="selective", sequence_parallel=True),
     {"torchtitan": "model", "deepspeed": "tp"}),
    ("gqa-vpp", dict(model="llama3-70b", seq_len=8192, dp=8, tp=8, pp=4, vpp=5, micro_batch=1, global_batch=512,
                     zero_stage=1, recompute="full", sequence_parallel=True),
     {"deepspeed": "vpp"}),
    ("gqa-autotp", dict(model="llama3-70b", seq_len=8192, dp=8, tp=8, pp=1, micro_batch=1, global_batch=64,
                        zero_stage=1, recompute="full", sequence_parallel=True),
     {"torchtitan": "zero_stage", "deepspeed": "sequence_parallel"}),
    ("moe-ep", dict(model="mixtral-8x7b", seq_len=4096, dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=128,
                    zero_stage=1, recompute="full"),
     {"torchtitan": "model"}),
    ("moe-ep-overlap", dict(model="mixtral-8x7b", seq_len=4096, dp=8, tp=1, pp=1, ep=8, micro_batch=1,
                            global_batch=128, zero_stage=1, recompute="none", ep_comm_overlap=True),
     {"torchtitan": "model", "deepspeed": "ep_comm_overlap"}),
    ("moe-tp-pp-ep", dict(model="mixtral-8x7b", seq_len=4096, dp=8, tp=2, pp=4, ep=8, micro_batch=1, global_batch=256,
                          zero_stage=1, recompute="full", sequence_parallel=True),
     {"torchtitan": "model", "deepspeed": "tp"}),
    ("mla-mtp-uneven-pp", dict(model="deepseek-v3", seq_len=4096, dp=64, tp=2, pp=4, ep=64, micro_batch=1,
                               global_batch=1024, zero_stage=1, recompute="full", sequence_parallel=True),
     {"torchtitan": "pp", "deepspeed": "tp"}),
    ("mla-mtp-ep", dict(model="deepseek-v3", seq_len=4096, dp=32, tp=8, pp=1, ep=64, micro_batch=1, global_batch=256,
                        zero_stage=1, recompute="full", sequence_parallel=True),
     {"deepspeed": "model", "torchtitan": "zero_stage"}),
    ("cp-ring", dict(model="llama3-8b", seq_len=65536, dp=2, tp=4, pp=1, cp=8, cp_kind="ring", micro_batch=1,
                     global_batch=32, zero_stage=1, recompute="selective", sequence_parallel=True),
     {"torchtitan": "cp_kind", "deepspeed": "cp_kind"}),
    ("cp-ulysses", dict(model="llama3-8b", seq_len=32768, dp=8, tp=1, pp=1, cp=4, cp_kind="ulysses", micro_batch=1,
                        global_batch=64, zero_stage=1, recompute="none"),
     {"torchtitan": "cp_kind"}),
    ("cp-hybrid", dict(model="llama3-70b", cluster="dgx-h100", seq_len=131072, dp=4, tp=2, pp=1, cp=8,
                       cp_kind="hybrid", micro_batch=1, global_batch=16, zero_stage=1, recompute="full",
                       sequence_parallel=True),
     {"torchtitan": "cp_kind", "deepspeed": "cp_kind"}),
    ("zero0-ddp", dict(model="llama3-8b", seq_len=8192, dp=16, tp=1, pp=1, micro_batch=2, global_batch=256,
                       zero_stage=0, recompute="none"),
     {}),
    ("zero2", dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=1, micro_batch=1, global_batch=64,
                   zero_stage=2, recompute="full"),
     {"torchtitan": "zero_stage"}),
    # ZeRO-2 as FSDP runs it (SHARD_GRAD_OP / FSDP2 reshard_after_forward False): parameters
    # gathered again in every micro-batch's forward, which DeepSpeed and Megatron-FSDP do not do
    ("zero2-fsdp", dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=1, micro_batch=1, global_batch=64,
                        zero_stage=2, recompute="full", zero2_gather_every_microbatch=True),
     {"megatron": "zero_stage", "deepspeed": "zero_stage"}),
    # planned on the torchtitan stack: its selective checkpointing is the per-operation policy,
    # which Megatron-LM cannot run
    ("per-op-selective", dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=1, micro_batch=2, global_batch=16,
                              zero_stage=3, recompute="selective",
                              selective_modules=("layernorm", "mlp_act", "every_second_linear")),
     {"megatron": "recompute_modules"}),
    ("zero3-full", dict(model="llama3-70b", seq_len=8192, dp=16, tp=4, pp=1, micro_batch=1, global_batch=128,
                        zero_stage=3, recompute="full", sequence_parallel=True),
     {"deepspeed": "recompute"}),
    ("zero3-deepspeed", dict(model="llama3-70b", seq_len=8192, dp=16, tp=4, pp=1, micro_batch=1, global_batch=128,
                             zero_stage=3, recompute="full", sequence_parallel=True, zero3_recompute_gather=True,
                             zero3_persistence_elements=1e5, zero3_grad_all_reduce=True),
     {"deepspeed": "sequence_parallel"}),
    ("pp-1f1b", dict(model="llama3-8b", seq_len=8192, dp=4, tp=1, pp=4, micro_batch=1, global_batch=64,
                     zero_stage=1, recompute="full"),
     {}),
    ("uneven-pp3", dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=3, micro_batch=1, global_batch=96,
                        zero_stage=1, recompute="none"),
     {}),
    ("uneven-vpp", dict(model="llama3-8b", seq_len=8192, dp=2, tp=2, pp=4, vpp=3, micro_batch=1, global_batch=64,
                        zero_stage=1, recompute="full", sequence_parallel=True, uneven_layers=True),
     {"deepspeed": "vpp"}),
    # 126 layers on pp 4 x vpp 32 = 128 chunks: an embedding-only first chunk and a loss-only last one,
    # the layout the Llama 3 authors ran (arXiv 2407.21783, section 3.3.2)
    ("embedding-loss-chunks", dict(model="llama3.1-405b", seq_len=8192, dp=1, tp=8, pp=4, vpp=32, micro_batch=1,
                                   global_batch=16, zero_stage=1, recompute="full", sequence_parallel=True),
     {"deepspeed": "vpp"}),
    # DeepSeek-V3's 61 layers and MTP module on pp 16 x vpp 4 = 64 chunks: the MTP module alone on the last
    # virtual stage of rank 14, the loss alone on rank 15 (as in Megatron's own 'Et*3|(tt|)*29,m|L')
    ("mtp-alone-chunk", dict(model="deepseek-v3", seq_len=4096, dp=16, tp=2, pp=16, vpp=4, ep=32, micro_batch=1,
                             global_batch=1024, zero_stage=1, recompute="full", sequence_parallel=True,
                             uneven_layers=True),
     {"torchtitan": "pp", "deepspeed": "vpp"}),
    ("fp8", dict(model="llama3-70b", seq_len=8192, dp=8, tp=8, pp=1, micro_batch=1, global_batch=64, zero_stage=1,
                 recompute="full", sequence_parallel=True, dtype="fp8"),
     {"deepspeed": "dtype", "torchtitan": "zero_stage"}),
    # half the distributed optimizer's states on the host (Megatron-LM's hybrid-device optimizer)
    ("optimizer-offload", dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=1, micro_batch=1, global_batch=64,
                               zero_stage=1, recompute="full", offload_optimizer_fraction=0.5),
     {"deepspeed": "offload_optimizer_fraction", "torchtitan": "offload_optimizer_fraction"}),
    ("nemotron-squared-relu", dict(model="nemotron-4-15b", seq_len=4096, dp=8, tp=4, pp=2, micro_batch=1,
                                   global_batch=128, zero_stage=1, recompute="selective", sequence_parallel=True),
     {"torchtitan": "model", "deepspeed": "tp"}),
)


def without_sequence_parallel(framework: str = "deepspeed"):
    """``(id + "-no-sp", row without sequence parallelism)`` for every entry ``framework`` refuses
    only for its sequence parallelism (DeepSpeed's AutoTP has none): the same plan as that
    framework can run it, so its parser still checks the matrix's AutoTP configs."""
    for name, row, refused in entries(framework):
        if refused == "sequence_parallel":
            yield f"{name}-no-sp", {**row, "sequence_parallel": False}


def entries(framework: str | None = None):
    """``(id, row, refused_field or None)`` for every matrix entry (for one framework)."""
    for name, row, refused in MATRIX:
        yield name, dict(row), (refused.get(framework) if framework else None)
