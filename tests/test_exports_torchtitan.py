"""torchtitan exports against torchtitan 0.3.0 itself (paraplan.exports.torchtitan).

Each export of the plan matrix is saved as a config module and loaded by torchtitan's own
``ConfigManager().parse_args(["--module", ..., "--config", ...])`` (which builds the
``Trainer.Config`` through tyro and runs its validation), then its parallelism is given to
``ParallelDims`` for the plan's world size and its pipeline split to the stage-to-rank mapping
torchtitan uses. torchtitan and its model registry come from the ``test`` extra (torchtitan
0.3.0 imports triton, which installs CPU-only); without them those tests skip with the reason.
The settings tests at the end need no torchtitan.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
import warnings

import pytest

from hardware_specs.errors import InputError
from paraplan.exports import matrix, torchtitan
from paraplan.exports.common import plan_fields, stage_layer_counts


def _torchtitan():
    try:
        warnings.filterwarnings("ignore")
        from torchtitan.config import ConfigManager
        from torchtitan.distributed.parallel_dims import ParallelDims
        from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping
        from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
        import torchtitan.models.llama3.config_registry  # noqa: F401 - the registry imports triton
        from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason to skip
        pytest.skip(f"torchtitan 0.3.0 is not importable here ({type(exc).__name__}: {exc})")
    return dict(ConfigManager=ConfigManager, ParallelDims=ParallelDims, stage_map=_get_pp_rank_to_stage_indices_mapping,
                FullAC=FullAC, SelectiveAC=SelectiveAC, Multi=PipelineScheduleMulti, schedule_class=get_schedule_class)


@pytest.fixture(scope="module")
def tt():
    return _torchtitan()


@pytest.fixture(scope="module")
def load(tt, tmp_path_factory):
    folder = tmp_path_factory.mktemp("torchtitan_jobs")
    sys.path.insert(0, str(folder))
    patched = pytest.MonkeyPatch()
    if importlib.util.find_spec("torchao") is None:
        without_the_base_jobs_float8(patched)

    def parse(name: str, text: str):
        module = f"paraplan_plan_{name.replace('-', '_')}"
        (folder / f"{module}.py").write_text(text)
        importlib.invalidate_caches()
        return tt["ConfigManager"]().parse_args(["--module", module, "--config", torchtitan.MODULE_NAME])

    yield parse
    patched.undo()
    sys.path.remove(str(folder))


ACCEPTED = [(n, r) for n, r, refused in matrix.entries("torchtitan") if refused is None]


@pytest.mark.parametrize("name, row", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_config_manager_builds_every_matrix_export_and_the_world_factors_as_planned(tt, load, name, row):
    p = plan_fields(row)
    if p["dtype"] == "fp8":
        pytest.skip("the float8 converter is built with the config and needs torchao and an SM89+ GPU")
    cfg = load(name, torchtitan.emit(row))
    par, training = cfg.parallelism, cfg.training
    dims = tt["ParallelDims"].from_config(par, p["n_gpus"])      # asserts the degrees multiply to the world
    assert (dims.dp_replicate * dims.dp_shard, dims.tp, dims.pp, dims.cp, dims.ep) == (
        p["dp"], p["tp"], p["pp"], p["cp"], p["ep"])
    # torchtitan's batch arithmetic (trainer.py at 0.3.0): accumulation and pipeline micro-batches
    batch_degree = dims.dp_replicate * dims.dp_shard
    assert training.global_batch_size % (training.local_batch_size * batch_degree) == 0
    accumulation = training.global_batch_size // (training.local_batch_size * batch_degree)
    microbatches = training.local_batch_size // par.pipeline_parallel_microbatch_size if p["pp"] > 1 else accumulation
    assert microbatches * (accumulation if p["pp"] > 1 else 1) == p["global_batch"] // (p["dp"] * p["micro_batch"])
    assert training.seq_len == p["seq_len"]
    assert (cfg.activation_checkpoint is None) == (p["recompute"] == "none")
    if p["recompute"] == "full":
        assert isinstance(cfg.activation_checkpoint, tt["FullAC"].Config)
    if p["recompute"] == "selective":      # priced as torchtitan's per-operation policy
        assert isinstance(cfg.activation_checkpoint, tt["SelectiveAC"].Config)
    assert par.enable_sequence_parallel == p["sequence_parallel"]
    once = p["zero_stage"] == 3 and p["pp"] > 1 and p.get("zero3_once_per_step", False)   # priced gathered once a step
    assert par.fsdp_reshard_after_forward == {0: "default", 1: "never", 2: "never", 3: "never" if once else "always"}[
        p["zero_stage"]]
    if p["pp"] > 1:
        parts = par.module_fqns_per_model_part
        chunks = len(parts)
        schedule = tt["schedule_class"](par.pipeline_parallel_schedule)
        assert issubclass(schedule, tt["Multi"]) == (chunks > p["pp"])
        stages = sorted(s for r in range(p["pp"]) for s in tt["stage_map"](r, p["pp"], par.pipeline_parallel_schedule,
                                                                            chunks))
        assert stages == list(range(chunks))
        layers = [int(m.split(".")[1]) for part in parts for m in part if m.startswith("layers.")]
        assert layers == list(range(p["model"].num_layers))
        assert tuple(sum(m.startswith("layers.") for m in part) for part in parts) == stage_layer_counts(
            p["model"].num_layers, p["pp"], chunks // p["pp"], p["model"].mtp_layers)
    assert training.disable_cuda_graphs == (not p["cuda_graphs"])
    # the loss the plan priced (loss_chunk_tokens 0 throughout the matrix: the whole logits),
    # not the registry function's ChunkedLossWrapper of 8 chunks
    assert type(cfg.loss).__qualname__ == ("MTPLoss.Config" if p["model"].mtp_layers else "CrossEntropyLoss.Config")
    assert cfg.compile.enable == (not p["unfused_block_ops"] or p["cross_entropy"] != "torch_eager"
                                  or bool(p["tp_comm_overlap"] and p["tp"] > 1 and p["sequence_parallel"]))


def _priced_on(stack: str, **change) -> dict:
    """Llama 3 8B on 16 H100, FSDP, local batch 2, selective checkpointing, as ``simulate
    --stack`` prices it: the plan row an export reads (every priced stack field among it)."""
    from paraplan import api
    args = dict(gpus=16, global_batch=32, micro_batch=2, zero_stage=3, recompute="selective", stack=stack)
    return api.simulate("llama3-8b", "dgx-h100", **{**args, **change}).iloc[0].to_dict()


def test_config_manager_builds_a_compiled_plan_with_the_model_and_the_loss_compiled(tt, load):
    cfg = load("compiled", torchtitan.emit(_priced_on("torchtitan-compile")))
    assert cfg.compile.enable and sorted(cfg.compile.components) == ["loss", "model"]
    eager = load("eager", torchtitan.emit(_priced_on("torchtitan")))
    assert not eager.compile.enable


def test_the_built_config_runs_the_loss_the_plan_priced(tt, load):
    """torchtitan 0.3.0's llama3_8b() wraps its loss in ChunkedLossWrapper of 8 chunks
    (models/llama3/config_registry.py; components/loss.py ``num_chunks: int = 8``), and the export
    started from it: a plan priced with the whole micro-batch's logits (loss_chunk_tokens 0) ran
    chunked. ChunkedLossWrapper splits a micro-batch [B, L] along L only, so a chunk holds
    B x L / num_chunks tokens: micro-batch 2 x 8,192 tokens in 1,024-token chunks is 16 chunks."""
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.models.llama3.config_registry import llama3_8b
    registry = llama3_8b().loss
    assert isinstance(registry, ChunkedLossWrapper.Config) and registry.num_chunks == 8   # what ran before
    whole = load("loss-whole", torchtitan.emit(_priced_on("torchtitan"))).loss
    assert type(whole) is CrossEntropyLoss.Config and whole.global_vocab_size == 128256
    chunked = load("loss-chunked", torchtitan.emit(_priced_on("torchtitan", loss_chunk_tokens=1024))).loss
    assert type(chunked) is ChunkedLossWrapper.Config and chunked.num_chunks == 2 * 8192 // 1024 == 16
    assert type(chunked.loss_fn) is CrossEntropyLoss.Config and chunked.loss_fn.global_vocab_size == 128256


def test_config_manager_rejects_a_pipeline_export_that_keeps_cuda_graphs(load, capsys):
    row = dict(next(r for n, r in ACCEPTED if n == "pp-1f1b"))
    text = torchtitan.emit(row).replace("    config.training.disable_cuda_graphs = True\n", "")
    assert "disable_cuda_graphs = True" not in text          # the line removed is the one emitted
    with pytest.raises((SystemExit, ValueError)) as refused:
        load("pp-1f1b-cuda-graphs", text)
    # refused for the cuda graphs, not for anything else in the module (tyro prints the
    # ValueError in a box on stderr and exits 2)
    said = " ".join((str(refused.value) + capsys.readouterr().err).replace("\u2502", " ").split())
    assert "CUDA graphs do not support pipeline parallelism" in said, said


def without_the_base_jobs_float8(monkeypatch):
    """``llama3_405b()`` builds its own model with the float8 converter, which needs torchao (not
    in the CPU test environment); the job the export writes replaces that model spec with its own
    ``model_registry`` call, so the base job's is built here without converters."""
    registry = importlib.import_module("torchtitan.models.llama3.config_registry")
    real = registry.model_registry
    monkeypatch.setattr(registry, "model_registry", lambda flavor, converters=None, **kw: real(flavor, **kw))


def test_the_registry_table_matches_the_installed_models(tt, monkeypatch):
    without_the_base_jobs_float8(monkeypatch)
    for entry in torchtitan.REGISTRY:
        module = importlib.import_module(f"torchtitan.models.{entry['module']}.config_registry")
        model = getattr(module, entry["config"])().model_spec.model
        arch = entry["arch"]
        assert (len(model.layers), model.dim, model.vocab_size) == (
            arch["num_layers"], arch["hidden_size"], arch["vocab_size"]), entry["config"]
        attention = model.layers[0].attention
        assert getattr(attention, "n_heads", arch["num_heads"]) == arch["num_heads"]
        if "num_kv_heads" in arch:
            assert attention.n_kv_heads == arch["num_kv_heads"]


# ---- what the export sets (no torchtitan needed) -------------------------------------------

def test_pipeline_split_follows_the_plan_layout_not_torchtitans_default():
    row = dict(next(r for n, r in ACCEPTED if n == "uneven-pp3"))
    parts = torchtitan.settings(row)["parallelism"]["module_fqns_per_model_part"]
    assert [len([m for m in part if m.startswith("layers.")]) for part in parts] == [11, 11, 10]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]


#: Llama 3 8B's 32 layers on pp 2 x vpp 17 = 34 chunks: the first chunk only the embedding, the last only the
#: norm and head (torchtitan 0.3.0's own split, _generate_llm_fqn_per_model_part with input and output weight 1,
#: gives the same parts)
EMPTY_ENDS = dict(model="llama3-8b", seq_len=8192, dp=4, tp=1, pp=2, vpp=17, micro_batch=1, global_batch=32,
                  zero_stage=1, recompute="full")


def test_a_chunk_may_hold_only_the_embedding_or_only_the_head():
    parts = torchtitan.settings(EMPTY_ENDS)["parallelism"]["module_fqns_per_model_part"]
    assert len(parts) == 34 and parts[0] == ["tok_embeddings"] and parts[-1] == ["norm", "lm_head"]
    assert parts[1:-1] == [[f"layers.{i}"] for i in range(32)]


def test_config_manager_builds_the_plan_with_embedding_only_and_head_only_chunks(tt, load):
    cfg = load("empty-ends", torchtitan.emit(EMPTY_ENDS))
    par = cfg.parallelism
    assert par.module_fqns_per_model_part[0] == ["tok_embeddings"]
    assert par.module_fqns_per_model_part[-1] == ["norm", "lm_head"]
    stages = sorted(s for r in range(2) for s in tt["stage_map"](r, 2, par.pipeline_parallel_schedule, 34))
    assert stages == list(range(34))
    from torchtitan.distributed.pipeline_parallel import _generate_llm_fqn_per_model_part
    assert par.module_fqns_per_model_part == _generate_llm_fqn_per_model_part(34, 32)


def test_compile_follows_the_stack_the_plan_was_priced_on():
    """A plan priced on ``torchtitan-compile`` (Inductor-fused block ops, the compiled loss) runs
    with torch.compile of the blocks and the loss; one priced on eager ``torchtitan`` keeps
    torchtitan's default, compile off; async TP needs the compiled blocks whatever was priced."""
    compiled = torchtitan.emit(_priced_on("torchtitan-compile"))
    assert "    config.compile.enable = True\n    config.compile.components = ['model', 'loss']\n" in compiled
    eager = torchtitan.emit(_priced_on("torchtitan"))
    assert "    config.compile.enable = False\n" in eager and "compile.components" not in eager
    assert torchtitan.settings(_priced_on("torchtitan"))["compile"] == []
    row = {**_priced_on("torchtitan", tp=2), "tp_comm_overlap": True}
    assert torchtitan.settings(row)["compile"] == ["model"]
    assert "config.compile.enable_async_tensor_parallel = True" in torchtitan.emit(row)


@pytest.mark.parametrize("stack, compiled", [("torchtitan", False), ("torchtitan-compile", True)])
def test_a_planner_result_exports_the_stack_it_was_priced_on(stack, compiled):
    """A ranked row holds only its searched fields: the export of the planner's winner (and
    ``plan --emit``) reads the rest from the stack the search priced it on (``PlanResult.software``).
    Without it a ZeRO-3 pipeline plan priced on torchtitan, gathered once a step, went out
    resharding after every forward and compiled, as ``ParallelConfig``'s defaults say."""
    from hardware_specs.catalog import load_cluster
    from model_specs.catalog import load_model
    from paraplan import exports
    from planners import plan
    result = plan(load_model("llama3-8b"), load_cluster("dgx-h100"), 16, 32, stack=stack,
                  fixed={"pp": [2], "zero_stage": [3], "tp": [1]}, max_plans=5)
    text = exports.emit(result, "torchtitan")
    assert "config.parallelism.fsdp_reshard_after_forward = 'never'" in text
    assert ("    config.compile.enable = True\n" in text) is compiled
    row, rank, _ = exports.best_runnable(result.plans, "torchtitan", software=result.software, model=result.model,
                                        seq_len=result.seq_len)
    assert rank == 0 and row["zero3_once_per_step"] is True and row["unfused_block_ops"] is (not compiled)


def test_an_fsdp_pipeline_plan_priced_per_micro_batch_is_refused():
    """torchtitan under a pipeline gathers each stage once a step and reduces once: a ZeRO-2 / 3
    plan priced per layer and micro-batch (another stack's FSDP) is not what it would run."""
    per_layer = _priced_on("pytorch-fsdp", pp=2, global_batch=64, recompute="full")
    assert per_layer["zero3_once_per_step"] is False
    with pytest.raises(InputError) as err:
        torchtitan.emit(per_layer)
    assert err.value.field == "zero_stage" and "--stack torchtitan" in err.value.fix
    once = _priced_on("torchtitan", pp=2, global_batch=64, recompute="full")
    assert "fsdp_reshard_after_forward = 'never'" in torchtitan.emit(once)


def test_a_compiled_float8_plan_tells_the_converter_the_model_is_compiled():
    assert "model_compile_enabled=True" in torchtitan.emit(_priced_on("torchtitan-compile", dtype="fp8"))
    assert "model_compile_enabled" not in torchtitan.emit(_priced_on("torchtitan", dtype="fp8"))


def test_plans_torchtitan_cannot_run_as_planned_are_refused_with_the_reason():
    base = dict(next(r for n, r in ACCEPTED if n == "zero2-fsdp"))
    for change, field in (({"recompute": "selective"}, "recompute"), ({"dtype": "fp16"}, "dtype"),
                          ({"cp": 2, "dp": 4}, "cp_kind"), ({"zero_stage": 0, "tp": 2, "dp": 4}, "zero_stage"),
                          ({"model": "mixtral-8x7b"}, "model"), ({"dtype": "mxfp8"}, "dtype")):
        with pytest.raises(InputError) as err:
            torchtitan.emit({**base, **change})
        assert err.value.field == field, (change, err.value)


def test_a_model_outside_the_registry_is_refused_naming_exactly_the_registry_models():
    # the message had said "Llama 3 8B/70B/405B, DeepSeek-V3 671B, Qwen3, gpt-oss, ..." while
    # REGISTRY mapped three models; it now lists REGISTRY itself (405B since it is mapped)
    with pytest.raises(InputError) as err:
        torchtitan.emit({**dict(ACCEPTED[0][1]), "model": "mixtral-8x7b"})
    assert err.value.field == "model"
    assert ("registry models this export maps (llama3 8B (llama3_8b), llama3 70B (llama3_70b), "
            "llama3 405B (llama3_405b), deepseek_v3 671B (deepseek_v3_671b))") in str(err.value)
    assert "Qwen3" not in str(err.value)


def test_the_export_names_the_release_it_is_for_and_its_launch_line():
    text = torchtitan.emit(dict(ACCEPTED[0][1]))
    assert "torchtitan 0.3.0" in text and "--module paraplan_plan --config paraplan_plan" in text
    compile(text, "paraplan_plan.py", "exec")


def test_a_gradient_reduction_after_every_micro_batch_is_what_torchtitan_runs_not_a_refusal():
    """torchtitan's train_step loops over the micro-batches with no no_sync (pytorch/torchtitan
    train.py at e9f53473), so its stack profile prices a data-parallel reduction per micro-batch;
    the export refused exactly those plans ('torchtitan reduces gradients once per step'), so the
    best plan of the torchtitan profile could not be emitted (the Llama-3-70B notebook's
    best_plan_for failed on it). Megatron-LM, which reduces once a step, still refuses it."""
    from paraplan import exports
    row = {**dict(next(r for n, r, _ in matrix.MATRIX if n == "zero0-ddp")), "grad_reduce_every_microbatch": True}
    assert torchtitan.refusal(plan_fields(row)) is None
    assert exports.refusal(row, "megatron").field == "grad_reduce_every_microbatch"


def test_best_plan_for_torchtitan_ranks_on_its_own_stack_unless_given_a_table():
    """Without stack=, api.best_plan_for('torchtitan', ...) plans on the profile of the release
    the export writes, torchtitan 0.3.0 (torchtitan-0.3.yaml, as plan --emit torchtitan does);
    a plan table given to it keeps the stack it was ranked on."""
    from paraplan import api
    own = api.best_plan_for("torchtitan", "llama3-8b", "dgx-h100", 16, 64 * 8192)
    assert own.iloc[0].stack == "torchtitan-0.3" and own.attrs["rank"] == 0
    ranked = api.plan("llama3-8b", "dgx-h100", 16, 64 * 8192)
    assert ranked.attrs["stack"] == "megatron-core"
    given = api.best_plan_for("torchtitan", "llama3-8b", "dgx-h100", 16, 64 * 8192, plans=ranked)
    assert given.iloc[0].stack == "megatron-core"
    assert given.iloc[0].step_time_s != pytest.approx(own.iloc[0].step_time_s, rel=1e-3)


def test_expert_groups_must_fit_inside_the_fsdp_shard_times_tp_ranks():
    """torchtitan 0.3.0 builds the expert mesh [efsdp, ep] over data_parallel_shard_degree x cp x
    tp ranks (parallel_dims.build_mesh, efsdp = dp_shard * cp * tp // ep). Under HSDP the shard
    degree is the ZeRO shard group, not dp: DeepSeek-V3 on 1,024 GPUs at tp 1, ep 8 fits a shard
    group of 8 (8 x 1 = 8) and not one of 4, which the export accepted (it tested dp x tp = 1,024)."""
    from paraplan import api, exports
    case = dict(model="deepseek-v3", cluster="h800-node", gpus=1024, global_batch=1024, zero_stage=2,
                stack="torchtitan", dtype="bf16", recompute="full", tp=1, ep=8)
    text = exports.emit(api.simulate(**case, zero_shard_group=8), "torchtitan")
    assert "data_parallel_shard_degree = 8" in text and "expert_parallel_degree = 8" in text
    for group in (4, 2):
        with pytest.raises(InputError) as err:
            exports.emit(api.simulate(**case, zero_shard_group=group), "torchtitan")
        assert err.value.field == "ep" and f"{group} x 1" in str(err.value)


def test_async_tp_is_written_only_where_sequence_parallelism_gives_it_something_to_overlap():
    """Async TP (inductor's micro-pipeline TP) fuses the all-gathers and reduce-scatters of
    sequence parallelism; a plan without SP is priced with its TP all-reduces exposed
    (simulator.layer_times.tp_overlap_applies), so its export leaves async TP, and the compile it
    forces, off: an eager torchtitan plan had gone out compiled, faster than it was priced."""
    row = {**_priced_on("torchtitan", tp=2, sequence_parallel=False), "tp_comm_overlap": True}
    assert torchtitan.settings(row)["compile"] == []
    assert "config.compile.enable_async_tensor_parallel = False" in torchtitan.emit(row)
    with_sp = {**_priced_on("torchtitan", tp=2), "tp_comm_overlap": True}
    assert "config.compile.enable_async_tensor_parallel = True" in torchtitan.emit(with_sp)


def test_the_deepseek_v3_registry_model_matches_only_a_model_routed_as_it_is():
    """torchtitan 0.3.0's deepseek_v3_671b fixes its router (sigmoid, route scale 2.5, 8 groups /
    4, the load-balance bias, route_norm on): a DeepSeek-V3-sized model routed otherwise was
    exported as it; one whose chosen weights are not renormalised is not it either."""
    from dataclasses import replace
    from model_specs.catalog import load_model
    v3 = load_model("deepseek-v3")
    assert torchtitan.registry_entry(v3)["config"] == "deepseek_v3_671b"
    for change in (dict(num_groups=1, group_topk=1), dict(topk_scaling_factor=1.0), dict(expert_bias=False),
                   dict(topk_renormalized=False)):
        assert torchtitan.registry_entry(replace(v3, moe=replace(v3.moe, **change))) is None, change


def test_a_chunked_loss_plan_is_exported_with_the_chunk_count_that_gives_its_chunk():
    """loss_chunk_tokens is the tokens of one chunk (simulator.memory_rows: the logits of
    min(micro_batch x seq_len, loss_chunk_tokens) tokens at a time); torchtitan's
    ChunkedLossWrapper cuts each micro-batch's sequence into num_chunks equal parts, so
    num_chunks = micro_batch x seq_len / loss_chunk_tokens. The export had refused every such plan
    ('does not write loss_chunk_tokens') though torchtitan chunks."""
    for chunk, micro_batch, kind, chunks in ((1024, 2, "chunked", 16),      # 2 x 8192 / 1024
                                              (2048, 1, "chunked", 4),       # 1 x 8192 / 2048
                                              (16384, 2, "cross_entropy", 1),   # the whole micro-batch
                                              (0, 2, "cross_entropy", 1)):
        row = _priced_on("torchtitan", loss_chunk_tokens=chunk, micro_batch=micro_batch)
        assert torchtitan.settings(row)["loss"] == {"kind": kind, "num_chunks": chunks}, chunk
    text = torchtitan.emit(_priced_on("torchtitan", loss_chunk_tokens=1024))
    assert "config.loss = ChunkedLossWrapper.Config(num_chunks=16, loss_fn=CrossEntropyLoss.Config(" in text


def test_a_loss_chunk_torchtitan_cannot_cut_is_refused_with_the_chunks_it_can():
    """3,000 tokens is no equal split of 2 x 8,192 (ChunkedLossWrapper asserts seq_len %
    num_chunks == 0); neither is 6,144 (16,384 / 6,144 is not whole)."""
    for chunk in (3000, 6144):
        with pytest.raises(InputError) as err:
            torchtitan.emit(_priced_on("torchtitan", loss_chunk_tokens=chunk))
        assert err.value.field == "loss_chunk_tokens" and "8192, 4096, 2048, 1024" in err.value.fix, chunk


def test_an_mtp_plan_runs_mtploss_unchunked_and_a_chunked_one_is_refused():
    """MTPLoss (torchtitan/models/deepseek_v3/mtp.py at 0.3.0) takes the main and the MTP modules'
    whole logits: the export writes it for a plan priced unchunked and refuses a chunked one."""
    # the matrix's DeepSeek-V3 plan with one micro-batch a step (its ZeRO-1 over 8 is refused for
    # FSDP2's per-micro-batch gathers, which is not what is tested here)
    row = {**dict(next(r for n, r, _ in matrix.MATRIX if n == "mla-mtp-ep")), "global_batch": 32}
    assert torchtitan.settings(row)["loss"] == {"kind": "mtp", "num_chunks": 1}
    assert "config.loss = MTPLoss.Config(global_vocab_size=" in torchtitan.emit(row)
    with pytest.raises(InputError) as err:
        torchtitan.emit({**row, "loss_chunk_tokens": 1024})
    assert err.value.field == "loss_chunk_tokens" and "MTPLoss" in str(err.value)


def _allgather_cp_plan(**change) -> dict:
    """Llama 3 8B at 64K on 64 H100, dp 2 x tp 4 x cp 8, FSDP, priced on the torchtitan stack
    without a flavour given: its context_parallel_kind, all-gather (the plan row an export reads)."""
    from paraplan import api
    args = dict(gpus=64, tp=4, cp=8, micro_batch=1, global_batch=32, seq_len=65536, zero_stage=3,
                recompute="full", sequence_parallel=True, stack="torchtitan")
    row = api.simulate("llama3-8b", "dgx-h100", **{**args, **change}).iloc[0].to_dict()
    return {**row, "seq_len": 65536}


def test_an_allgather_cp_plan_exports_the_cp_degree_and_the_head_tail_balancer():
    """torchtitan 0.3.0 all-gathers K/V over the CP group for FlexAttention (distributed/
    context_parallel/api.py apply_cp_to_forward: flex_cp_allgather), the registry models' attention;
    config/configs.py: context_parallel_degree (1 = off) and context_parallel_load_balancer
    'headtail' (rank i holds chunks i and 2cp-1-i, the 2 x cp chunks the plan prices)."""
    row = _allgather_cp_plan()
    assert row["cp_kind"] == "allgather"          # the torchtitan stack's flavour, not a choice here
    par = torchtitan.settings(row)["parallelism"]
    assert (par["context_parallel_degree"], par["context_parallel_load_balancer"]) == (8, "headtail")
    # FSDP over dp_shard = dp 2 (torchtitan folds the 8 cp ranks in: fsdp = dp_shard * cp)
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (2, 1)
    assert par["tensor_parallel_degree"] == 4
    text = torchtitan.emit(row)
    assert "    config.parallelism.context_parallel_degree = 8\n" in text
    assert "    config.parallelism.context_parallel_load_balancer = 'headtail'\n" in text
    # a plan without context parallelism writes it off and leaves the balancer alone
    flat = torchtitan.settings(_allgather_cp_plan(cp=1, tp=8, seq_len=8192))["parallelism"]
    assert flat["context_parallel_degree"] == 1 and "context_parallel_load_balancer" not in flat


def test_config_manager_builds_an_allgather_cp_export_that_means_the_plan(tt, load):
    row = _allgather_cp_plan()
    p = plan_fields(row)
    cfg = load("cp_allgather", torchtitan.emit(row))
    par, training = cfg.parallelism, cfg.training
    dims = tt["ParallelDims"].from_config(par, 64)       # asserts the degrees multiply to the world
    assert (dims.dp_replicate * dims.dp_shard, dims.tp, dims.pp, dims.cp) == (2, 4, 1, 8) == (
        p["dp"], p["tp"], p["pp"], p["cp"])
    assert par.context_parallel_load_balancer == "headtail"
    # torchtitan's batch (trainer.py): the data-parallel degree excludes cp, whose ranks share
    # the sequences; 32 = 2 ranks x local batch 1 x 16 accumulation steps
    assert training.seq_len == 65536 and training.local_batch_size == 1 and training.global_batch_size == 32
    assert training.global_batch_size // (training.local_batch_size * dims.dp_replicate * dims.dp_shard) == 16
    # and its FSDP mesh is the plan's ZeRO group of dp x cp = 16 ranks
    assert dims.dp_shard * dims.cp == 16


def test_ring_and_ulysses_cp_plans_are_refused_pointing_at_the_torchtitan_stack():
    # a plan priced with another flavour (on a stack that runs it: torchtitan itself now refuses
    # ulysses and hybrid at simulate, its context_parallel_kinds being allgather and ring)
    for kind in ("ring", "ulysses", "hybrid"):
        other = {} if kind == "ring" else {"stack": "megatron-core"}
        with pytest.raises(InputError) as err:
            torchtitan.emit(_allgather_cp_plan(cp_kind=kind, **other, **({"tp": 1} if kind == "ulysses" else {})))
        assert err.value.field == "cp_kind"
        assert f"not the {kind} attention" in err.value.message and "--stack torchtitan" in err.value.fix
    # FSDP always runs over the cp ranks: a ZeRO-0 plan with cp > 1 is not what torchtitan runs
    with pytest.raises(InputError) as err:
        torchtitan.emit({**_allgather_cp_plan(), "zero_stage": 0})
    assert err.value.field == "zero_stage"


def test_a_chunked_loss_under_cp_cuts_the_ranks_local_sequence():
    # the plan prices chunks of micro_batch x seq_len / cp tokens; the loss runs on the 65536 / 8 =
    # 8192 local positions, so a chunk of 2048 tokens is 8192 / 2048 = 4 chunks (not 32)
    row = {**_allgather_cp_plan(), "loss_chunk_tokens": 2048}
    assert torchtitan.settings(row)["loss"] == {"kind": "chunked", "num_chunks": 4}


def test_float8_leaves_the_output_layer_and_the_router_16_bit_as_the_plan_priced_them(tt):
    """The plan prices the LM head in 16-bit under fp8 (simulator/layer_times.py, the model's
    ends); torchtitan 0.3.0's Float8LinearConverter converts every linear whose dims divide by 16
    unless ``filter_fqns`` names it (components/quantization/utils.py ``module_filter_fn``), so the
    export names ``lm_head`` (8192 x 128256 here), and for an MoE model ``router.gate``, as
    torchtitan's own llama3_405b / deepseek_v3_671b jobs do."""
    from torchtitan.components.quantization.utils import module_filter_fn
    from paraplan import api
    row = api.simulate(model="llama3-70b", cluster="dgx-h100", gpus=64, tp=8, zero_stage=3, global_batch=64,
                       dtype="fp8", stack="torchtitan-0.3", recompute="full").iloc[0].to_dict()
    text = torchtitan.emit(row)
    filters = re.search(r"filter_fqns=(\[[^\]]*\])", text)
    assert filters is not None, text
    skipped = eval(filters.group(1))                   # noqa: S307 - a list literal the export wrote
    head = types.SimpleNamespace(in_features=8192, out_features=128256)
    assert module_filter_fn(head, "lm_head", skipped) is False
    assert module_filter_fn(head, "layers.0.feed_forward.w1", skipped) is True
    assert torchtitan.float8_skipped({"arch": {"moe": (256, 8, 2048)}}) == ["lm_head", "router.gate"]


def test_llama3_1_405b_runs_on_torchtitans_405b_registry_model(tt, load):
    """torchtitan 0.3.0 ships Llama 3.1 405B (models/llama3/__init__.py llama3_configs["405B"]:
    126 layers, dim 16384, 128 heads, 8 KV heads; config_registry.llama3_405b()), the shape of
    paraplan's llama3.1-405b: its pp 16 x vpp 8 plan is written and the config manager builds it."""
    from paraplan import api
    row = api.simulate(model="llama3.1-405b", cluster="dgx-h100", gpus=16384, tp=8, pp=16, vpp=8,
                       global_batch=2048, sequence_parallel=True, zero_stage=2,
                       stack="torchtitan-0.3").iloc[0].to_dict()
    text = torchtitan.emit(row)
    assert "config_registry import llama3_405b" in text and "model_registry('405B'" in text
    config = load("llama31_405b", text)
    assert (config.parallelism.tensor_parallel_degree, config.parallelism.pipeline_parallel_degree) == (8, 16)


@pytest.mark.parametrize("model, scaling", [("llama3-8b", "none"), ("llama3.1-8b", "llama")])
def test_the_job_rotates_with_the_planned_models_rope_not_llama_3_1s_for_llama_3(tt, load, model, scaling):
    """torchtitan 0.3.0 builds its 8B / 70B / 405B with Llama 3.1's RoPE (models/llama3/__init__.py
    ``ComplexRoPE.Config(theta=500000, scaling="llama")``, factor 8), while Llama 3 8B / 70B
    rotate unscaled (their config.json has no rope_scaling; paraplan's llama3-8b: rope_scaling
    empty, and the Megatron export omits --use-rope-scaling for it). The job sets every layer's
    RoPE to the planned model's; Llama 3.1 keeps the registry's."""
    from paraplan import api
    row = api.simulate(model, "dgx-h100", gpus=16, global_batch=32, micro_batch=2, zero_stage=3,
                       stack="torchtitan-0.3").iloc[0].to_dict()
    text = torchtitan.emit(row)
    assert ("layer.attention.rope.scaling = 'none'" in text) == (scaling == "none")
    config = load(f"rope_{model.replace('.', '_')}", text)
    ropes = [layer.attention.rope for layer in config.model_spec.model.layers]
    assert len(ropes) == 32
    assert {(r.theta, r.scaling, r.scaling_factor) for r in ropes} == {(500000, scaling, 8.0)}


def test_an_empty_rope_scaling_is_none_and_a_zero_theta_is_not_stated_as_the_catalog_says():
    """ModelSpec: rope_scaling "empty = none" (config.json without rope_scaling rotates unscaled,
    Llama 3 8B); rope_theta / rope_scaling_factor 0 = not stated. The catalog's file-key docs said
    "0 / empty = not stated" for all three, which the export (scaling forced to none) contradicted."""
    import dataclasses

    from model_specs import catalog
    from model_specs.catalog import load_model
    doc = " ".join(catalog.__doc__.split())
    assert "0 / empty = not stated" not in doc
    assert "rope_scaling (config.json rope_scaling's rope_type; empty = none" in doc
    assert "rope_theta (config.json rope_theta; 0 = not stated)" in doc
    model = load_model("llama3-8b")
    entry = torchtitan.registry_entry(model)
    assert entry["rope"] == (500000, "llama", 8.0)               # torchtitan 0.3.0's Llama 3.1 RoPE
    unstated = dataclasses.replace(model, rope_theta=0.0, rope_scaling="")
    assert torchtitan.rope_overrides(unstated, entry) == {"scaling": "none"}     # theta kept, scaling none
    scaled = dataclasses.replace(model, rope_theta=0.0, rope_scaling="llama3", rope_scaling_factor=0.0)
    assert torchtitan.rope_overrides(scaled, entry) == {}                        # factor 0 keeps the registry's 8
