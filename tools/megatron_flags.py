"""Regenerate ``paraplan/exports/megatron_flags.json``: Megatron-LM's training-argument interface
at a pinned commit, as data (see ``paraplan/exports/megatron_table.py`` for the format).

Megatron-LM's ``pretrain_gpt.py`` parser is not on the package index and CI cannot fetch
repositories, so this script reads it from a local clone at ``--commit`` and CI checks exports
against what it wrote. It

1. extracts ``megatron/`` at the commit (``git archive``) and runs ``tools/megatron_probe.py``
   there with ``--python`` (an interpreter with torch, numpy, packaging, einops and
   typing_extensions; torch CPU is enough) to list every parser option;
2. writes the rules below: the checks of ``validate_args`` and of the code it feeds that the
   exports rely on, read from the same source, each as expressions over argument names;
3. unless ``--no-verify``: runs every export of ``paraplan.exports.matrix`` through the real
   ``parse_args`` + ``validate_args`` + ``core_transformer_config_from_args`` + micro-batch
   calculator + rank generators (the probe's ``verify``), and every rule's counterexample (a
   matrix export with one flag or variable changed to break that rule), and requires the real
   code and the table to agree: exports accepted by both, counterexamples rejected by both.
   What ran is stored under ``verified``.

Usage::

    python tools/megatron_flags.py --git-dir /path/to/Megatron-LM/.git --commit <sha> \\
        --python /path/to/venv/bin/python
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
ARGS = "megatron/training/arguments.py"
TC = "megatron/core/transformer/transformer_config.py"

#: values validate_args derives before its checks (evaluated in order, see megatron_table.evaluate).
DERIVED = {
    "data_parallel_size": "world_size // (tensor_model_parallel_size * pipeline_model_parallel_size"
                          " * context_parallel_size)",
    "expert_tp_size": "expert_tensor_parallel_size if expert_tensor_parallel_size is not None"
                      " else tensor_model_parallel_size",
    "virtual_pipeline_size": "num_virtual_stages_per_pipeline_rank if num_virtual_stages_per_pipeline_rank"
                             " is not None else (layout_stages(pipeline_model_parallel_layout)"
                             " // pipeline_model_parallel_size if pipeline_model_parallel_layout is not None else 1)",
    "first_layers": "decoder_first_pipeline_num_layers if decoder_first_pipeline_num_layers is not None else 0",
    "last_layers": "decoder_last_pipeline_num_layers if decoder_last_pipeline_num_layers is not None else 0",
    "middle_layers": "num_layers - first_layers - last_layers if num_layers is not None else 0",
    "middle_stages": "pipeline_model_parallel_size - (decoder_first_pipeline_num_layers is not None)"
                     " - (decoder_last_pipeline_num_layers is not None)",
}


def rule(rid, source, when, require, message, counterexample=None, runtime=False):
    """One check: where it is, when it applies, what it requires, and a change that breaks it
    (``{"base": matrix id, "set": {flag: value or None to drop}, "env": {...}}``); ``runtime``:
    the real code raises only when the model runs (a forward pass), past what the probe runs, so
    the rule has no counterexample."""
    out = {"id": rid, "source": source, "when": when, "require": require, "message": message}
    if runtime:
        out["runtime"] = True
    if counterexample:
        out["counterexample"] = counterexample
    return out


RULES = [
    rule("world_divisible", f"{ARGS}: validate_args", None,
         "world_size % (tensor_model_parallel_size * pipeline_model_parallel_size * context_parallel_size) == 0",
         "the world size must be divisible by tp * pp * cp",
         {"base": "gqa-autotp", "world_size": 60}),
    rule("required_arguments", f"{ARGS}: validate_args (required_args, micro_batch_size)", None,
         "num_layers is not None and hidden_size is not None and num_attention_heads is not None"
         " and max_position_embeddings is not None and micro_batch_size is not None",
         "--num-layers, --hidden-size, --num-attention-heads, --max-position-embeddings and --micro-batch-size"
         " are required", {"base": "zero0-ddp", "set": {"--num-layers": None}}),
    rule("global_batch_divisible", "megatron/core/num_microbatches_calculator.py: ConstantNumMicroBatchesCalculator",
         "global_batch_size is not None", "global_batch_size % (micro_batch_size * data_parallel_size) == 0",
         "the global batch must be divisible by micro batch * data-parallel size",
         {"base": "gqa-autotp", "set": {"--global-batch-size": "60"}}),
    rule("hierarchical_cp_product", f"{ARGS}: validate_args", "hierarchical_context_parallel_sizes is not None",
         "prod(hierarchical_context_parallel_sizes) == context_parallel_size",
         "--hierarchical-context-parallel-sizes must multiply to --context-parallel-size",
         {"base": "cp-hybrid", "set": {"--hierarchical-context-parallel-sizes": "2 2"}}),
    rule("a2a_p2p_needs_hierarchical_sizes", f"{ARGS}: validate_args", "'a2a+p2p' in cp_comm_type",
         "hierarchical_context_parallel_sizes is not None",
         "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes",
         {"base": "cp-hybrid", "set": {"--hierarchical-context-parallel-sizes": None}}),
    rule("cp_sequence_divisible", f"{ARGS}: validate_args", "context_parallel_size > 1 and seq_length is not None",
         "seq_length % (2 * context_parallel_size) == 0",
         "the sequence length must be a multiple of 2 * cp",
         {"base": "cp-ring", "set": {"--seq-length": "65528"}}),
    rule("one_virtual_pipeline_form", f"{ARGS}: validate_args", None,
         "(num_layers_per_virtual_pipeline_stage is not None) + (num_virtual_stages_per_pipeline_rank is not None)"
         " + (pipeline_model_parallel_layout is not None) <= 1",
         "at most one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank,"
         " --pipeline-model-parallel-layout", {"base": "gqa-vpp", "set": {"--num-layers-per-virtual-pipeline-stage": "4"}}),
    rule("even_pipeline_split", f"{ARGS}: validate_args",
         "pipeline_model_parallel_layout is None and decoder_first_pipeline_num_layers is None"
         " and decoder_last_pipeline_num_layers is None and num_layers is not None",
         "(num_layers + account_for_embedding_in_pipeline_split + account_for_loss_in_pipeline_split)"
         " % (pipeline_model_parallel_size * virtual_pipeline_size) == 0",
         "without a layout the layers must divide evenly over the pipeline chunks",
         {"base": "uneven-pp3", "set": {"--decoder-last-pipeline-num-layers": None}}),
    rule("uneven_stage_counts", f"{TC}: TransformerConfig.__post_init__ (uneven PP)",
         "pipeline_model_parallel_layout is None and (decoder_first_pipeline_num_layers is not None"
         " or decoder_last_pipeline_num_layers is not None)",
         "(decoder_first_pipeline_num_layers is None or decoder_first_pipeline_num_layers > 0)"
         " and (decoder_last_pipeline_num_layers is None or decoder_last_pipeline_num_layers > 0)"
         " and (middle_layers > 0) == (middle_stages > 0) and (middle_stages == 0 or middle_layers % middle_stages == 0)"
         " and first_layers % virtual_pipeline_size == 0 and last_layers % virtual_pipeline_size == 0"
         " and (middle_stages == 0 or middle_layers // middle_stages % virtual_pipeline_size == 0)",
         "the first / last stage counts must leave an even split of the middle layers",
         {"base": "mla-mtp-uneven-pp", "set": {"--decoder-first-pipeline-num-layers": "14"}}),
    rule("uneven_needs_vpp_by_stages", f"{ARGS}: validate_args", "num_layers_per_virtual_pipeline_stage is not None",
         "decoder_first_pipeline_num_layers is None and decoder_last_pipeline_num_layers is None",
         "uneven stages take --num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage",
         {"base": "uneven-pp3", "set": {"--num-layers-per-virtual-pipeline-stage": "11"}}),
    rule("layout_matches_model", f"{TC}: PipelineParallelLayerLayout.validate_layer_layout",
         "pipeline_model_parallel_layout is not None",
         "layout_stages(pipeline_model_parallel_layout) % pipeline_model_parallel_size == 0"
         " and layout_count(pipeline_model_parallel_layout, 't') == num_layers"
         " and layout_count(pipeline_model_parallel_layout, 'm') == (mtp_num_layers if mtp_num_layers is not None else 0)"
         " and layout_count(pipeline_model_parallel_layout, 'E') == 1 and layout_count(pipeline_model_parallel_layout, 'L') == 1",
         "the pipeline layout must hold every decoder layer and MTP module once, embedding first and loss last,"
         " in a multiple of pp chunks", {"base": "uneven-vpp", "set": {"--num-layers": "31"}}),
    rule("layout_alone", f"{TC}: TransformerConfig.__post_init__ (PP layout)",
         "pipeline_model_parallel_layout is not None",
         "decoder_first_pipeline_num_layers is None and decoder_last_pipeline_num_layers is None"
         " and not account_for_embedding_in_pipeline_split and not account_for_loss_in_pipeline_split",
         "--pipeline-model-parallel-layout excludes --decoder-first/last-pipeline-num-layers and"
         " --account-for-embedding/loss-in-pipeline-split",
         {"base": "embedding-loss-chunks", "set": {"--decoder-last-pipeline-num-layers": "31"}}),
    rule("layout_mtp_placement", f"{TC}: PipelineParallelLayerLayout.validate_layer_layout",
         "pipeline_model_parallel_layout is not None and layout_count(pipeline_model_parallel_layout, 'm') > 0",
         "layout_mtp_placed(pipeline_model_parallel_layout, pipeline_model_parallel_size)",
         "the MTP modules must follow every decoder layer, all in one chunk, the last virtual stage of its rank",
         {"base": "mla-mtp-uneven-pp", "set": {"--decoder-first-pipeline-num-layers": None,
                                               "--decoder-last-pipeline-num-layers": None,
                                               "--pipeline-model-parallel-layout": "Et*15|t*16|t*15m|t*15L"}}),
    rule("interleaving_needs_pp", f"{ARGS}: validate_args", "virtual_pipeline_size > 1",
         "pipeline_model_parallel_size > (1 if overlap_p2p_comm else 2)",
         "virtual pipeline stages need pp > 1 (> 2 without p2p overlap)"),
    rule("overlap_param_gather", f"{ARGS}: validate_args", "overlap_param_gather",
         "(use_distributed_optimizer or use_megatron_fsdp) and overlap_grad_reduce",
         "--overlap-param-gather needs the distributed optimizer (or Megatron-FSDP) and --overlap-grad-reduce",
         {"base": "gqa-vpp", "set": {"--use-distributed-optimizer": None}}),
    rule("one_16bit_type", f"{ARGS}: validate_args", None, "not (fp16 and bf16)", "--fp16 and --bf16 exclude each other",
         {"base": "gqa-autotp", "set": {"--fp16": ""}}),
    rule("fp4_or_fp8", f"{ARGS}: validate_args", None, "fp4 is None or fp8 is None",
         "--fp4-format and --fp8-format exclude each other", {"base": "fp8", "set": {"--fp4-format": "e2m1"}}),
    rule("positions_cover_sequence", f"{ARGS}: validate_args", "seq_length is not None",
         "max_position_embeddings >= seq_length", "--max-position-embeddings must be >= --seq-length",
         {"base": "zero0-ddp", "set": {"--max-position-embeddings": "4096"}}),
    rule("selective_has_no_method", f"{ARGS}: validate_args", "recompute_granularity == 'selective'",
         "recompute_method is None", "selective recomputation takes no --recompute-method",
         {"base": "dense-gpt3-tp-pp", "set": {"--recompute-method": "uniform"}}),
    rule("full_recompute_is_sized", f"{TC}: TransformerConfig.__post_init__", "recompute_granularity == 'full'",
         "recompute_method is not None and recompute_num_layers is not None and recompute_num_layers >= 1",
         "full recomputation needs --recompute-method and --recompute-num-layers",
         {"base": "gqa-autotp", "set": {"--recompute-method": None}}),
    rule("tp_overlap_needs_sp", f"{ARGS}: validate_args", "tp_comm_overlap",
         "sequence_parallel and tensor_model_parallel_size > 1",
         "--tp-comm-overlap needs --sequence-parallel (and tp > 1)",
         {"base": "gqa-autotp", "set": {"--tp-comm-overlap": "", "--sequence-parallel": None}}),
    rule("tp_cp_need_one_connection", f"{ARGS}: validate_args (GPUs before Blackwell)",
         "(tensor_model_parallel_size > 1 or context_parallel_size > 1) and not use_torch_fsdp2"
         " and not use_megatron_fsdp and not overlap_moe_expert_parallel_comm",
         "env_CUDA_DEVICE_MAX_CONNECTIONS == '1'",
         "TP or CP > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1", {"base": "gqa-autotp", "env": {}}),
    rule("fsdp_needs_connections", f"{ARGS}: validate_args", "use_megatron_fsdp",
         "env_CUDA_DEVICE_MAX_CONNECTIONS != '1'", "Megatron-FSDP needs CUDA_DEVICE_MAX_CONNECTIONS unset or > 1",
         {"base": "zero2", "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}}),
    rule("fsdp_checkpoint_format", f"{ARGS}: validate_args", "use_megatron_fsdp", "ckpt_format == 'fsdp_dtensor'",
         "Megatron-FSDP needs --ckpt-format fsdp_dtensor", {"base": "zero2", "set": {"--ckpt-format": None}}),
    rule("fsdp_dtensor_needs_fsdp", f"{ARGS}: validate_args", "ckpt_format == 'fsdp_dtensor'", "use_megatron_fsdp",
         "--ckpt-format fsdp_dtensor needs --use-megatron-fsdp",
         {"base": "zero0-ddp", "set": {"--ckpt-format": "fsdp_dtensor"}}),
    rule("fsdp_optimizer", f"{ARGS}: validate_args", "use_megatron_fsdp", "optimizer in ['sgd', 'adam']",
         "Megatron-FSDP runs the adam or sgd optimizer", {"base": "zero2", "set": {"--optimizer": "lion"}}),
    rule("mtp_positions", f"{ARGS}: validate_args (MTP validation)", "mtp_num_layers",
         "position_embedding_type in ['rope', 'none']", "MTP needs RoPE or no position embedding",
         {"base": "mla-mtp-ep", "set": {"--position-embedding-type": "learned_absolute"}}),
    rule("rope_type_needs_mla", "megatron/training/argument_utils.py: core_transformer_config_from_args",
         "rope_type is not None", "multi_latent_attention or rope_type == 'rope'",
         "--rope-type yarn is for multi-latent attention only (other attention takes --position-embedding-type yarn)",
         {"base": "gqa-autotp", "set": {"--rope-type": "yarn"}}),
    rule("mla_excludes_gqa", f"{ARGS}: validate_args", "multi_latent_attention", "not group_query_attention",
         "--multi-latent-attention excludes --group-query-attention",
         {"base": "mla-mtp-ep", "set": {"--group-query-attention": ""}}),
    rule("experts_divide_over_ep", f"{ARGS}: validate_args", "expert_model_parallel_size > 1",
         "num_experts is not None and num_experts % expert_model_parallel_size == 0",
         "expert parallelism needs --num-experts divisible by it",
         {"base": "moe-ep", "set": {"--expert-model-parallel-size": "3"}}),
    # checked when the model runs, not by validate_args: the probe cannot make the real code
    # reject them, so they carry no counterexample and are marked "runtime"
    rule("moe_tp_needs_sp", "megatron/core/transformer/moe/moe_layer.py:636: MoELayer.forward (training)",
         "num_experts is not None and tensor_model_parallel_size > 1", "sequence_parallel",
         "MoE layers with tp > 1 raise ValueError in training without --sequence-parallel", runtime=True),
    rule("a2a_cp_divides_heads", "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py:"
         " AttnFuncWithCPAndQKVOA2A.forward (assert q and k heads % cp_size == 0)",
         "context_parallel_size > 1 and 'a2a' in cp_comm_type",
         "(num_attention_heads // tensor_model_parallel_size) % context_parallel_size == 0"
         " and max((num_query_groups if group_query_attention else num_attention_heads)"
         " // tensor_model_parallel_size, 1) % context_parallel_size == 0",
         "--cp-comm-type a2a needs the query and the key/value heads of a TP rank divisible by cp", runtime=True),
    rule("expert_bias_needs_sigmoid", f"{TC}: TransformerConfig.__post_init__", "moe_router_enable_expert_bias",
         "moe_router_score_function in ['sigmoid', 'sqrtsoftplus']",
         "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid (or sqrtsoftplus)",
         {"base": "mla-mtp-ep", "set": {"--moe-router-score-function": "softmax"}}),
    rule("group_limited_routing", f"{TC}: TransformerConfig.__post_init__", "moe_router_group_topk",
         "moe_router_num_groups and num_experts % moe_router_num_groups == 0"
         " and moe_router_group_topk <= moe_router_num_groups",
         "--moe-router-group-topk needs --moe-router-num-groups dividing --num-experts and at least the group top-k",
         {"base": "mla-mtp-ep", "set": {"--moe-router-num-groups": "3"}}),
    rule("heads_divide_over_tp", f"{TC}: TransformerConfig.__post_init__", None,
         "num_attention_heads % tensor_model_parallel_size == 0", "the attention heads must divide over tp",
         {"base": "gqa-autotp", "set": {"--num-attention-heads": "4"}}),
    rule("query_groups_and_tp", f"{TC}: TransformerConfig.__post_init__", "group_query_attention",
         "num_query_groups % tensor_model_parallel_size == 0 or tensor_model_parallel_size % num_query_groups == 0",
         "the query groups must be a multiple or a divisor of tp",
         {"base": "gqa-autotp", "set": {"--num-query-groups": "3"}}),
    rule("ep_a2a_overlap", f"{TC}: TransformerConfig.__post_init__", "overlap_moe_expert_parallel_comm",
         "expert_model_parallel_size > 1 and moe_token_dispatcher_type in ['alltoall', 'flex']"
         " and recompute_granularity != 'full' and recompute_method is None and recompute_num_layers is None"
         " and (pipeline_model_parallel_size == 1 or virtual_pipeline_size > 1) and (bf16 or fp16)"
         " and not moe_shared_expert_overlap and (mtp_num_layers is None or mtp_num_layers <= 1)",
         "the overlapped expert all-to-all needs ep > 1, the alltoall/flex dispatcher, no full recomputation,"
         " virtual stages beside a pipeline, 16-bit training and at most one MTP module",
         {"base": "moe-ep-overlap", "set": {"--recompute-granularity": "full", "--recompute-method": "uniform",
                                            "--recompute-num-layers": "1"}}),
    rule("ep_a2a_overlap_keeps_moe", f"{TC}: TransformerConfig.__post_init__", "overlap_moe_expert_parallel_comm",
         "recompute_modules is None or 'moe' not in recompute_modules",
         "the overlapped expert all-to-all cannot recompute the moe module",
         {"base": "moe-ep-overlap", "set": {"--recompute-granularity": "selective", "--recompute-modules": "moe"}}),
    rule("fp8_delayed_recompute", f"{TC}: TransformerConfig.__post_init__",
         "recompute_granularity == 'selective' and fp8 is not None and fp8_recipe == 'delayed'",
         "recompute_modules is None or ('moe_act' not in recompute_modules and 'layernorm' not in recompute_modules)",
         "delayed FP8 scaling cannot recompute the layernorm or moe_act modules",
         {"base": "fp8", "set": {"--recompute-granularity": "selective", "--recompute-modules": "layernorm"}}),
    rule("expert_mesh", "megatron/core/parallel_state.py: initialize_model_parallel", "num_experts is not None",
         "world_size % (expert_tp_size * expert_model_parallel_size * pipeline_model_parallel_size) == 0",
         "the world size must be divisible by etp * ep * pp",
         {"base": "moe-tp-pp-ep", "set": {"--expert-tensor-parallel-size": "3"}}),
    rule("offload_needs_precision_aware", f"{ARGS}: validate_args", "optimizer_cpu_offload",
         "use_precision_aware_optimizer and (not fp8_param_gather or fp8_recipe == 'delayed')",
         "--optimizer-cpu-offload needs --use-precision-aware-optimizer, and beside --fp8-param-gather"
         " the delayed --fp8-recipe",
         {"base": "optimizer-offload", "set": {"--use-precision-aware-optimizer": None}}),
]

#: value formats of the parser's custom ``type=`` functions (arguments.py), as regular expressions.
CUSTOM_TYPES = {
    "tuple_type": r"^\(?-?\d+(,-?\d+)*\)?$",
    "moe_freq_type": r"^(\d+|.*\[.*)$",
    "enum_type_handler": r"^\w+$",
}


def _run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def probe(python: str, src: Path, mode: str, stdin: str | None = None) -> dict:
    proc = subprocess.run([python, str(ROOT / "tools" / "megatron_probe.py"), mode], cwd=src, input=stdin,
                          capture_output=True, text=True)
    if proc.returncode != 0 or "@@JSON@@" not in proc.stdout:
        sys.exit(f"megatron_probe.py {mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.split("@@JSON@@", 1)[1])


def _apply(argv: list[str], changes: dict) -> list[str]:
    """``argv`` with ``changes`` made: a flag set to None is dropped, "" added as a switch,
    anything else (re)placed with that value (split on spaces)."""
    out, i = [], 0
    flags = set(changes)
    while i < len(argv):
        if argv[i] in flags:
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        out.append(argv[i])
        i += 1
    for flag, value in changes.items():
        if value is None:
            continue
        out.append(flag)
        if value != "":
            out += value.split(" ")
    return out


def cases() -> tuple[list[dict], list[dict]]:
    """(the matrix exports, the rules' counterexamples) as probe cases."""
    from paraplan.exports import matrix, megatron
    from paraplan.exports.common import plan_fields
    exports = {}
    for name, row, refused in matrix.entries("megatron"):
        if refused:
            continue
        argv, env = megatron.command(row)
        exports[name] = {"id": name, "argv": argv, "env": env, "world_size": plan_fields(row)["n_gpus"]}
    breaks = []
    for r in RULES:
        ce = r.get("counterexample")
        if not ce:
            continue
        base = exports[ce["base"]]
        breaks.append({"id": f"break:{r['id']}", "rule": r["id"], "argv": _apply(base["argv"], ce.get("set", {})),
                       "env": ce.get("env", base["env"]), "world_size": ce.get("world_size", base["world_size"])})
    return list(exports.values()), breaks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--git-dir", required=True, help="a Megatron-LM clone's git directory")
    ap.add_argument("--commit", default=DEFAULT_COMMIT)
    ap.add_argument("--ref", default="main", help="the branch the commit was taken from (for the record)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch (CPU) for the probe")
    ap.add_argument("--out", default=str(ROOT / "paraplan" / "exports" / "megatron_flags.json"))
    ap.add_argument("--no-verify", action="store_true", help="write the table without running the real checks")
    a = ap.parse_args()

    date = _run(["git", f"--git-dir={a.git_dir}", "show", "-s", "--format=%cI", a.commit]).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", f"--git-dir={a.git_dir}", "archive", a.commit, "megatron"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        src = Path(tmp)
        flag_probe = probe(a.python, src, "flags")
        table = {
            "source": {"repository": "NVIDIA/Megatron-LM", "ref": a.ref, "commit": a.commit, "date": date[:10],
                       "parser": f"{ARGS}: add_megatron_arguments"},
            "generated_by": "tools/megatron_flags.py",
            "flags": {k: v for k, v in sorted(flag_probe["result"].items()) if k.startswith("--")},
            "custom_types": CUSTOM_TYPES,
            "environment": ["CUDA_DEVICE_MAX_CONNECTIONS"],
            "derived": DERIVED,
            "rules": [{k: v for k, v in r.items() if k != "counterexample"} for r in RULES],
        }
        if not a.no_verify:
            table["verified"] = verify(a.python, src, table, flag_probe["shims"])
    Path(a.out).write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(f"wrote {a.out}: {len(table['flags'])} flags, {len(table['rules'])} rules"
          + ("" if a.no_verify else f", {len(table['verified']['cases'])} cases run through the real checks"))


def verify(python: str, src: Path, table: dict, shims: list[str]) -> dict:
    from paraplan.exports import megatron_table
    exports, breaks = cases()
    real = {r["id"]: r for r in probe(python, src, "verify", json.dumps(exports + breaks))["result"]}
    disagreements = []
    records = []
    for case in exports + breaks:
        got = real[case["id"]]
        problems = megatron_table.check_command(case["argv"], case["world_size"], case["env"], table=table)
        expect_accept = "rule" not in case
        table_hits = [p.split(":")[0] for p in problems]
        if expect_accept and not (got["accepted"] and not problems):
            disagreements.append(f"{case['id']}: real {got}, table {problems}")
        if not expect_accept and (got["accepted"] or case["rule"] not in table_hits):
            disagreements.append(f"{case['id']}: real accepted={got['accepted']} ({got.get('error')}), "
                                 f"table {table_hits}")
        records.append({**case, "real": got})
    if disagreements:
        sys.exit("the table and Megatron-LM's own checks disagree:\n  " + "\n  ".join(disagreements))
    return {"ran": f"parse_args + validate_args + core_transformer_config_from_args + ConstantNumMicroBatchesCalculator"
                   f" + RankGenerator (decoder and expert) at {table['source']['commit'][:12]}",
            "python": _run([python, "-c", "import sys, torch; print(sys.version.split()[0], torch.__version__)"]).stdout.strip(),
            "date": datetime.date.today().isoformat(), "shims": shims, "cases": records}


if __name__ == "__main__":
    main()
