"""Deployments whose launch exports are run through the engines' real parsers
(``tools/verify_serving_exports.py``) and re-checked in CI against what those parsers answered
(``serving_exports_verified.json``): each engine's aggregated layouts (tensor parallel,
attention-DP + expert parallel, pipeline, several workers, a worker over two hosts, online FP8,
speculative decoding with the model's MTP module or an EAGLE-3 head) and the disaggregated ones SGLang and
TensorRT-LLM launch.

Each entry: (id, model, system, backend, dense format, expert format, mode, deployment fields[, KV
dtype]).
"""
from __future__ import annotations

from pathlib import Path

from simulator.serving.deployment import WorkerLayout

W = WorkerLayout
#: the EAGLE-3 head the matrix drafts with (the script names it DRAFT_MODEL, so the commands do
#: not depend on where the repository is)
EAGLE3_8B = str(Path(__file__).resolve().parents[2] / "examples" / "drafts" / "eagle3-llama3.1-8b")
MATRIX = (
    # online FP8 keeps the 16-bit KV cache under auto; these two state an FP8 one, the commands
    # the parsers were run on
    ("vllm-dense-tp4-online-fp8", "llama3.1-70b", "dgx-h100", "vllm", "fp8", "fp8", "agg",
     dict(layout=W(tp=4, batch=32), workers=2), "fp8"),
    ("vllm-dense-tp2-pp2-bf16", "llama3.1-70b", "dgx-h100", "vllm", "bf16", "bf16", "agg",
     dict(layout=W(tp=2, pp=2, batch=16))),
    ("vllm-moe-dp8-ep8", "deepseek-r1", "dgx-b200", "vllm", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=64))),
    ("vllm-moe-dp16-ep16-two-hosts", "deepseek-r1", "dgx-h100", "vllm", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=1, adp=16, moe_tp=1, moe_ep=16, batch=32))),
    ("vllm-moe-tp8-experts-tp", "deepseek-r1", "hgx-h200", "vllm", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=8, moe_tp=8, moe_ep=1, batch=64))),
    ("vllm-dense-fp8-checkpoint-bf16-kv", "llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8", "agg",
     dict(layout=W(tp=1, batch=64), workers=2), "bf16"),
    ("sglang-moe-attn-dp4-two-workers-one-host", "qwen3-235b-a22b", "hgx-h200", "sglang", "fp8_block", "fp8_block",
     "agg", dict(layout=W(tp=1, adp=4, moe_tp=1, moe_ep=4, batch=32), workers=2)),
    ("sglang-dense-tp8", "llama3.1-70b", "dgx-b200", "sglang", "fp8", "fp8", "agg",
     dict(layout=W(tp=8, batch=64)), "fp8"),
    ("sglang-moe-attn-dp8-ep8-two-workers", "deepseek-r1", "dgx-b200", "sglang", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=64), workers=2)),
    ("sglang-moe-attn-dp8-etp2-ep4", "deepseek-r1", "dgx-b200", "sglang", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=1, adp=8, moe_tp=2, moe_ep=4, batch=32))),
    ("sglang-dense-fp16", "llama3.1-8b", "dgx-h100", "sglang", "fp16", "fp16", "agg",
     dict(layout=W(tp=1, batch=32), workers=2)),
    ("sglang-moe-over-two-hosts", "deepseek-r1", "hgx-h200", "sglang", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=1, adp=16, moe_tp=1, moe_ep=16, batch=32))),
    ("sglang-disagg", "deepseek-r1", "hgx-h200", "sglang", "fp8_block", "fp8_block", "disagg",
     dict(prefill=W(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=1), prefill_workers=2,
          decode=W(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=64), decode_workers=1)),
    ("trtllm-dense-tp4", "llama3.1-8b", "dgx-h100", "trtllm", "fp8", "fp8", "agg",
     dict(layout=W(tp=1, batch=64), workers=4)),
    ("trtllm-moe-dp8-ep8", "deepseek-r1", "dgx-b200", "trtllm", "nvfp4", "nvfp4", "agg",
     dict(layout=W(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=64))),
    ("trtllm-disagg-gb200", "deepseek-r1", "gb200-nvl72", "trtllm", "nvfp4", "nvfp4", "disagg",
     dict(prefill=W(tp=1, adp=4, moe_tp=1, moe_ep=4, batch=1), prefill_workers=3,
          decode=W(tp=1, adp=16, moe_tp=1, moe_ep=16, batch=64), decode_workers=1)),
    # speculative decoding with the checkpoint's MTP module
    ("vllm-moe-tp8-mtp2", "deepseek-r1", "dgx-b200", "vllm", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=8, moe_tp=8, moe_ep=1, batch=16), speculative_tokens=2)),
    ("sglang-moe-attn-dp8-mtp1", "deepseek-r1", "dgx-b200", "sglang", "fp8_block", "fp8_block", "agg",
     dict(layout=W(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=32), speculative_tokens=1)),
    ("trtllm-moe-dp8-mtp3", "deepseek-r1", "dgx-b200", "trtllm", "nvfp4", "nvfp4", "agg",
     dict(layout=W(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=32), speculative_tokens=3)),
    # speculative decoding with an EAGLE-3 draft head (examples/drafts)
    ("vllm-dense-tp1-eagle3-3", "llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8", "agg",
     dict(layout=W(tp=1, batch=32), speculative_tokens=3, draft_acceptance=0.7, draft_model=EAGLE3_8B)),
    ("sglang-dense-tp2-eagle3-2", "llama3.1-8b", "dgx-h100", "sglang", "bf16", "bf16", "agg",
     dict(layout=W(tp=2, batch=32), speculative_tokens=2, draft_acceptance=0.7, draft_model=EAGLE3_8B)),
)


def launches():
    """(id, ServingContext, ServingLaunch) of every matrix entry (isl 1024, osl 1024)."""
    from paraplan.exports.serving_common import launch_of
    from simulator.serving.context import ServingContext
    from simulator.serving.deployment import Deployment
    from simulator.serving.simulate import simulate_serving
    for case_id, model, system, backend, dense, expert, mode, fields, *kv in MATRIX:
        ctx = ServingContext.build(model, system, backend, dense, expert, kv[0] if kv else "auto",
                                   speculative_tokens=fields.get("speculative_tokens"),
                                   draft_acceptance=fields.get("draft_acceptance"), draft_head=fields.get("draft_model"))
        dep = Deployment(model=model, system=system, backend=ctx.stack.name, mode=mode, isl=1024, osl=1024,
                         dense_format=ctx.dense_format, expert_format=ctx.expert_format, **fields)
        report = simulate_serving(dep, ctx)
        yield case_id, ctx, launch_of(ctx, dep, report.metrics)


def concrete(argv: list[str]) -> list[str]:
    """``argv`` with the script's variables as a parser sees them at run time: the model a
    repository id, the hosts addresses, the working directory a path."""
    out = []
    for word in argv:
        word = word.replace("$MODEL", "org/model").replace("$WORKDIR", "/tmp/paraplan")
        word = word.replace("$DRAFT_MODEL", "org/eagle3-draft")
        for i in range(64):
            word = word.replace(f"${{HOST[{i}]}}", f"10.0.0.{i + 1}")
        out.append(word)
    return out
