"""DeepSpeed exports against DeepSpeed 0.19.8 itself (paraplan.exports.deepspeed).

Each export of the plan matrix is given to ``DeepSpeedConfig`` the way ``deepspeed.initialize``
builds it for that launch (``deepspeed/__init__.py`` at 0.19.8): no ``mpu`` for a plain or
AutoTP / AutoEP module, the data x sequence mesh for Ulysses, the ``PipelineModule``
topology's data-parallel ranks for a pipeline; the distributed world is the plan's GPU count
(``deepspeed.comm.get_world_size``, patched: no process group on a CPU test). Then AutoEP's
own ``validate_autoep_config`` runs, and the pipeline partition DeepSpeed computes for
``partition_method='type:...'`` is compared with the plan's stage layout. DeepSpeed comes
from the ``test`` extra (``DS_BUILD_OPS=0``, CPU torch); without it those tests skip.
"""
from __future__ import annotations

import json

import pytest

from hardware_specs.errors import InputError
from paraplan.exports import deepspeed, matrix
from paraplan.exports.common import plan_fields


@pytest.fixture(scope="module")
def ds():
    try:
        import deepspeed.comm as dist
        from deepspeed.module_inject.auto_ep_config import validate_autoep_config
        from deepspeed.runtime import utils as ds_utils
        from deepspeed.runtime.config import DeepSpeedConfig
        from deepspeed.runtime.pipe.topology import PipeDataParallelTopology
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason to skip
        pytest.skip(f"DeepSpeed 0.19.8 is not importable here ({type(exc).__name__}: {exc})")
    return dict(dist=dist, Config=DeepSpeedConfig, Topology=PipeDataParallelTopology, utils=ds_utils,
                validate_autoep=validate_autoep_config)


def build(ds, cfg: dict, p: dict, monkeypatch):
    """``DeepSpeedConfig`` as ``deepspeed.initialize`` builds it for the plan's launch."""
    mesh_group = object()
    monkeypatch.setattr(ds["dist"], "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds["dist"], "get_world_size",
                        lambda group=None, **k: p["dp"] if group is mesh_group else p["n_gpus"])
    mpu = mesh = None
    if p["pp"] > 1:
        topology = ds["Topology"](num_pp=p["pp"], num_dp=p["n_gpus"] // p["pp"])

        class PipelineGrid:          # PipelineModule.mpu(): what DeepSpeedConfig asks of it
            def get_data_parallel_world_size(self):
                return topology.get_dim("data")
        mpu = PipelineGrid()
    elif "sequence_parallel_size" in cfg and "data_parallel_size" in cfg:
        # initialize() builds this mesh from the two keys; it must cover the world
        assert cfg["sequence_parallel_size"] * cfg["data_parallel_size"] == p["n_gpus"]

        class Mesh:
            def get_group(self, mesh_dim):
                assert mesh_dim == "data_parallel"
                return mesh_group
        mesh = Mesh()
    return ds["Config"](json.loads(json.dumps(cfg)), mpu, mesh_device=mesh)


ACCEPTED = ([(n, r) for n, r, refused in matrix.entries("deepspeed") if refused is None]
            + list(matrix.without_sequence_parallel()))        # the AutoTP plans as DeepSpeed runs them


@pytest.mark.parametrize("name, row", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_deepspeed_config_accepts_every_matrix_export_and_reads_the_planned_batch(ds, monkeypatch, name, row):
    p = plan_fields(row)
    cfg = json.loads(deepspeed.emit(row))
    config = build(ds, cfg, p, monkeypatch)
    accumulation = p["global_batch"] // (p["dp"] * p["micro_batch"])
    assert (config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (p["micro_batch"], accumulation)
    # every TP rank of a group reads the same micro-batch: distinct sequences per step = the plan's
    replicas = p["tp"] if p["pp"] == 1 and p["cp"] == 1 else 1
    assert config.train_batch_size == p["global_batch"] * replicas
    assert config.zero_optimization_stage == p["zero_stage"]
    assert config.tensor_parallel_config.autotp_size == (p["tp"] if p["tp"] > 1 else 0)
    assert config.bfloat16_config.enabled == (p["dtype"] == "bf16")
    # the gradient buffer the plan priced, where DeepSpeed keeps it in that dtype (else its default)
    assert config.grad_accum_dtype == deepspeed.grad_accum_dtype(p)
    # the gradient reduction the plan priced: its dtype and bucket (in elements)
    import torch
    assert config.communication_data_type == (torch.float32 if p["grad_reduce_bytes"] == 4 else torch.bfloat16)
    if p["cp"] > 1:         # what the engine reduces gradients in under Ulysses (engine.py:2181-2182)
        assert config.seq_parallel_communication_data_type == config.communication_data_type
    assert config.zero_config.reduce_bucket_size == max(p["grad_bucket_elements"], p["grad_bucket_elements_per_dp"] * p["dp"])
    # as engine.py:851-864 calls it: the offload flags from the config's own ZeRO section
    ds["validate_autoep"](config.expert_parallel_config, p["n_gpus"], p["pp"], p["tp"], p["cp"],
                          zero_stage=p["zero_stage"],
                          zero_offload_optimizer=config.zero_config.offload_optimizer is not None,
                          zero_offload_param=config.zero_config.offload_param is not None)
    assert config.expert_parallel_config.enabled == (p["ep"] > 1)
    if p["ep"] > 1:
        assert config.expert_parallel_config.autoep_size == p["ep"]
    if p["pp"] > 1:
        assert deepspeed_split(deepspeed.recipe(row), p) == list(deepspeed.plan_stage_counts(p))
        assert config.pipeline["stages"] == p["pp"]


def deepspeed_split(recipe: str, p: dict) -> list[int]:
    """Decoder layers per stage of the recipe's ``PipelineModule(layers=[Embedding] + N x
    [DecoderLayer] + [Head], num_stages=pp, partition_method=...)`` as DeepSpeed 0.19.8's own
    ``PipelineModule._partition_layers`` and ``_find_layer_type`` cut it (run on a stand-in
    holding the attributes they read: no process group on a CPU test)."""
    import re
    import types

    import torch
    from deepspeed.pipe import LayerSpec, PipelineModule
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology
    method = re.search(r"partition_method='([^']+)'", recipe).group(1)
    classes = {name: type(name, (torch.nn.Module,), {}) for name in ("Embedding", "DecoderLayer", "Head")}
    layers = p["model"].num_layers
    module = types.SimpleNamespace(num_stages=p["pp"], global_rank=1, loss_fn=None,
                                   _topo=PipeDataParallelTopology(num_pp=p["pp"], num_dp=1),
                                   _layer_specs=[LayerSpec(classes["Embedding"])]
                                   + [LayerSpec(classes["DecoderLayer"]) for _ in range(layers)]
                                   + [LayerSpec(classes["Head"])])
    module._find_layer_type = lambda name: PipelineModule._find_layer_type(module, name)
    module._set_bounds = lambda start, stop: None
    PipelineModule._partition_layers(module, method=method)
    return [len(range(max(a, 1), min(b, layers + 1))) for a, b in zip(module.parts[:-1], module.parts[1:])]


@pytest.mark.parametrize("model, pp, planned", [
    # even splits as the plan prices them (the middle stages take the remainder); DeepSpeed's
    # 'type:DecoderLayer' alone puts it on the first stages instead ([7, 7, 6, 6, 6] for 32 / 5,
    # 79.08 GiB for this plan where 75.23 GiB was priced)
    ("llama3-8b", 5, [6, 7, 7, 6, 6]),
    ("llama3.1-405b", 16, [7] + [8] * 14 + [7]),
    ("llama3-8b", 4, [8, 8, 8, 8]),
])
def test_the_recipes_partition_method_cuts_the_stages_as_the_plan_priced_them(ds, model, pp, planned):
    row = dict(model=model, seq_len=8192, dp=8, tp=1, pp=pp, micro_batch=2, global_batch=64, zero_stage=1,
               recompute="none")
    p = plan_fields(row)
    assert list(deepspeed.plan_stage_counts(p)) == planned
    assert deepspeed_split(deepspeed.recipe(row), p) == planned


def test_a_split_no_partition_method_gives_is_refused_and_deepspeeds_own_split_is_emitted(ds):
    """llama3-70b's 80 layers on 6 stages: the plan's [13, 13, 14, 14, 13, 13] is no
    ``type:`` regex's partition (DeepSpeed's 'type:DecoderLayer' gives [14, 14, 13, 13, 13, 13]),
    so the export refuses it, naming the layout of DeepSpeed's split; that plan is emitted
    and DeepSpeed cuts it as priced."""
    row = dict(model="llama3-70b", seq_len=8192, dp=4, tp=1, pp=6, micro_batch=1, global_batch=64, zero_stage=1,
               recompute="full")
    with pytest.raises(InputError, match=r"\[13, 13, 14, 14, 13, 13\].*\[14, 14, 13, 13, 13, 13\]") as err:
        deepspeed.config(row)
    assert "--pipeline-layout 'Et*14|t*14|t*13|t*13|t*13|t*13,L'" in str(err.value)
    laid_out = {**row, "pipeline_layout": "Et*14|t*14|t*13|t*13|t*13|t*13,L"}
    assert deepspeed_split(deepspeed.recipe(laid_out), plan_fields(laid_out)) == [14, 14, 13, 13, 13, 13]


def test_the_plans_global_batch_as_train_batch_size_is_what_deepspeed_rejects_under_autotp(ds, monkeypatch):
    row = dict(next(r for n, r in ACCEPTED if n == "gqa-autotp-no-sp"))
    p = plan_fields(row)
    cfg = {**json.loads(deepspeed.emit(row)), "train_batch_size": p["global_batch"]}
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        build(ds, cfg, p, monkeypatch)


def test_ulysses_writes_sequence_and_data_parallel_sizes():
    row = dict(next(r for n, r in ACCEPTED if n == "cp-ulysses"))
    cfg = deepspeed.config(row)
    assert (cfg["sequence_parallel_size"], cfg["data_parallel_size"], cfg["train_batch_size"]) == (4, 8, 64)


def test_a_pipeline_plan_comes_with_its_pipelinemodule_recipe():
    row = dict(next(r for n, r in ACCEPTED if n == "pp-1f1b"))
    text = deepspeed.recipe(row)
    assert "PipelineModule(" in text and "num_stages=4" in text and "activation_checkpoint_interval=1" in text
    assert "[8, 8, 8, 8]" in text


def test_plans_deepspeed_cannot_run_are_refused_with_one_line():
    by_name = {n: r for n, r, _ in matrix.MATRIX}
    base = dict(by_name["zero2"])
    cases = [({**base, "dtype": "fp8"}, "dtype"), ({**base, "dtype": "mxfp8"}, "dtype"),
             ({**base, "cp": 2, "dp": 4, "cp_kind": "ring"}, "cp_kind"),
             ({**dict(by_name["pp-1f1b"]), "zero_stage": 2}, "zero_stage"),
             ({**dict(by_name["pp-1f1b"]), "schedule": "gpipe"}, "schedule"),
             ({**dict(by_name["cp-ulysses"]), "tp": 2, "dp": 4}, "cp")]
    for row, field in cases:
        with pytest.raises(InputError) as err:
            deepspeed.emit(row)
        assert err.value.field == field, (row, err.value)
        assert "\n" not in str(err.value)


def test_a_zero3_plan_priced_with_persistent_tensors_and_all_reduced_gradients_says_so():
    """The plan's ZeRO-3 persistence threshold and all-reduced gradient buckets become
    DeepSpeed's own keys (stage3_param_persistence_threshold, reduce_scatter: false); the
    matrix test above has DeepSpeed's parser accept them."""
    row = dict(next(r for n, r in ACCEPTED if n == "zero3-deepspeed-no-sp"))
    z = deepspeed.config(row)["zero_optimization"]
    assert (z["stage"], z["stage3_param_persistence_threshold"], z["reduce_scatter"]) == (3, 100000, False)
    plain = {k: v for k, v in row.items() if k not in ("zero3_persistence_elements", "zero3_grad_all_reduce")}
    plain_z = deepspeed.config(plain)["zero_optimization"]
    assert "stage3_param_persistence_threshold" not in plain_z and plain_z["reduce_scatter"] is True


def test_a_bf16_zero1_plan_priced_with_all_reduced_gradients_asks_deepspeed_for_its_bf16_optimizer(ds, monkeypatch):
    """A pipeline plan in bf16 with ZeRO-1 priced as DeepSpeed's BF16_Optimizer (fp32 gradients
    all-reduced whole, ``zero1_grad_all_reduce``) says so with ``data_types.grad_accum_dtype:
    fp32``, the key that makes DeepSpeed 0.19.8 pick that optimizer for bf16 + ZeRO-1
    (engine.py ``_do_optimizer_sanity_check``); DeepSpeed's parser reads it. The same plan priced
    with reduce-scattered gradients leaves the key out (DeepSpeed's ZeRO-1 optimizer)."""
    row = dict(model="llama3-8b", seq_len=8192, dp=4, tp=1, pp=4, micro_batch=1, global_batch=64, zero_stage=1,
               recompute="full", dtype="bf16", grad_reduce_bytes=4.0, zero1_grad_all_reduce=True)
    cfg = deepspeed.config(row)
    assert cfg["data_types"] == {"grad_accum_dtype": "fp32"} and cfg["zero_optimization"]["stage"] == 1
    config = build(ds, json.loads(deepspeed.emit(row)), plan_fields(row), monkeypatch)
    assert config.grad_accum_dtype == "fp32" and config.bfloat16_config.enabled
    assert "data_types" not in deepspeed.config({**row, "zero1_grad_all_reduce": False})


def test_autotp_with_sequence_parallelism_is_refused_and_emit_picks_the_plan_without_it():
    """AutoTP has no sequence parallelism (its row-parallel linears all-reduce the whole sequence,
    deepspeed/module_inject/layers.py ``LinearAllreduce`` at 0.19.8): a tp > 1 plan priced with
    its activations split over tp is refused on ``sequence_parallel`` (it had been emitted as
    plain AutoTP: llama3-70b on 64 H100s, dp16 tp4 z3 sp, 67 GiB priced, 99 GiB as AutoTP runs
    it), the same plan without it is written, and ``--emit`` passes over the first for the second."""
    import pandas as pd
    from paraplan import exports
    row = dict(model="llama3-70b", seq_len=8192, dp=16, tp=4, pp=1, micro_batch=1, global_batch=128,
               zero_stage=3, recompute="none", sequence_parallel=True)
    with pytest.raises(InputError) as err:
        deepspeed.emit(row)
    assert err.value.field == "sequence_parallel" and "\n" not in str(err.value)
    plain = {**row, "sequence_parallel": False}
    assert deepspeed.config(plain)["tensor_parallel"] == {"autotp_size": 4}
    # tp 1 has no sequence parallelism to lose (ParallelConfig turns it off)
    assert deepspeed.can_run({**row, "tp": 1, "dp": 64})
    ranked = pd.DataFrame([dict(row, tokens_per_s=2.0), dict(plain, tokens_per_s=1.9)])
    chosen, rank, slowdown = exports.best_runnable(ranked, "deepspeed")
    # 2.0 / 1.9 tokens/s: the step takes 2.0/1.9 = 1.0526 times as long, 5.26% slower
    assert rank == 1 and not chosen["sequence_parallel"] and slowdown == pytest.approx(2.0 / 1.9 - 1)


@pytest.mark.parametrize("modules, says", [
    (None, "checkpoint only each layer's attention core"),
    (("layernorm", "mlp_act", "every_second_linear"), "per-operation checkpoint"),
])
def test_selective_recomputation_under_a_pipeline_is_in_the_recipe(modules, says):
    """A selective plan on PipelineModule: the stage's layers run unwrapped
    (activation_checkpoint_interval 0, runtime/pipe/module.py PipelineModule.forward), and the
    recipe says to checkpoint the selected operations inside DecoderLayer.forward, as it does
    without a pipeline (it had said nothing: llama3-8b on 16 H100s pp2 selective, priced 4.47 s,
    came out with no recomputation at all)."""
    row = dict(next(r for n, r in ACCEPTED if n == "pp-1f1b"), recompute="selective")
    if modules:
        row["selective_modules"] = modules
    text = deepspeed.recipe(row)
    line = next(ln for ln in text.splitlines() if "selective recomputation" in ln)
    assert says in line and "DecoderLayer.forward" in line and "activation_checkpoint_interval=0" in line
    assert "activation_checkpoint_interval=0)" in text           # PipelineModule does not checkpoint whole layers
    cfg = deepspeed.config(row)
    assert cfg["pipeline"]["activation_checkpoint_interval"] == 0 and "activation_checkpointing" in cfg
    # without a pipeline the same line, in the model code
    flat = dict(next(r for n, r in ACCEPTED if n == "zero2"), recompute="selective")
    assert "attention core (deepspeed.checkpointing.checkpoint around it in the model code)" in deepspeed.recipe(flat)


def test_autotp_with_zero3_is_written_as_deepspeed_0_19_8_trains_it(ds):
    """Not a refusal: DeepSpeed 0.19.8 trains AutoTP with ZeRO-3 (the engine's blanket
    ``zero_optimization_stage() <= 2`` assert for AutoTP, narrowed to a training-only
    NotImplementedError by deepspeedai/DeepSpeed#8167 and removed by #8168, both in 0.19.4);
    the AutoTP tutorial's "ZeRO Stage 3 not supported" is the older releases'."""
    import inspect

    from deepspeed.runtime.engine import DeepSpeedEngine
    src = inspect.getsource(DeepSpeedEngine._configure_tensor_parallel_states)
    assert "zero_optimization_stage()" not in src and "NotImplementedError" not in src
    row = dict(next(r for n, r in ACCEPTED if n == "zero3-deepspeed-no-sp"))
    cfg = deepspeed.config(row)
    assert cfg["tensor_parallel"] == {"autotp_size": 4} and cfg["zero_optimization"]["stage"] == 3


def test_optimizer_offload_beside_autoep_and_autotp_is_refused_as_deepspeed_refuses_it(ds, monkeypatch):
    """DeepSpeed 0.19.8 refuses ZeRO-Offload when AutoEP folds experts beside AutoTP
    (``module_inject/auto_ep_folding.py:248-250``, reached from ``runtime/engine.py:851-864``):
    Mixtral on 16 GPUs at tp 2, ep 4, ZeRO-2 with the optimizer on the host had been written and
    failed in ``deepspeed.initialize``. The export refuses it on one line; the same plan at tp 1
    (AutoEP alone) is written and DeepSpeed's own check accepts it with the offload."""
    row = dict(model="mixtral-8x7b", seq_len=4096, dp=8, tp=2, pp=1, ep=4, micro_batch=1, global_batch=64,
               zero_stage=2, recompute="full", sequence_parallel=False, offload_optimizer_fraction=1.0)
    assert not deepspeed.can_run(row)
    with pytest.raises(InputError) as err:
        deepspeed.emit(row)
    assert err.value.field == "offload_optimizer_fraction" and "\n" not in str(err.value)
    # what DeepSpeed itself says of the config the export used to write
    cfg = deepspeed.config({**row, "offload_optimizer_fraction": 0.0})
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    config = build(ds, cfg, plan_fields(row), monkeypatch)
    with pytest.raises(ValueError, match="offload with AutoEP\\+AutoTP folding"):
        ds["validate_autoep"](config.expert_parallel_config, 16, 1, 2, 1, zero_stage=2,
                              zero_offload_optimizer=config.zero_config.offload_optimizer is not None)
    alone = {**row, "tp": 1, "dp": 16}
    cfg = json.loads(deepspeed.emit(alone))
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    config = build(ds, cfg, plan_fields(alone), monkeypatch)
    ds["validate_autoep"](config.expert_parallel_config, 16, 1, 1, 1, zero_stage=2,
                          zero_offload_optimizer=config.zero_config.offload_optimizer is not None)
    assert config.expert_parallel_config.autoep_size == 4


def test_a_layout_leaving_a_stage_no_decoder_layer_is_refused_under_pipeline_layout():
    """Llama 3 8B has 32 decoder layers; 'E|t*11|t*11|t*10,L' gives pp 4 stages of [0, 11, 11, 10]
    layers (the first holds only the embedding). pp 4 <= 32 layers: the refusal was under ``pp``
    with "use a plan with pp <= layers"; the layout set the empty stage, so it names the layout."""
    row = dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=4, micro_batch=1, global_batch=64, zero_stage=1,
               recompute="none", pipeline_layout="E|t*11|t*11|t*10,L")
    with pytest.raises(InputError) as err:
        deepspeed.recipe(row)
    assert err.value.field == "pipeline_layout" and "[0, 11, 11, 10]" in err.value.message
    assert err.value.fix.startswith("put a decoder layer on every stage") and "pp <= layers" not in str(err.value)


def test_an_fp16_ulysses_plan_reduces_its_gradients_in_fp16_as_priced(ds, monkeypatch):
    """Under Ulysses DeepSpeed 0.19.8's engine replaces ``communication_data_type`` with
    ``seq_parallel_communication_data_type`` before it builds the optimizer
    (``runtime/engine.py:2181-2182``), default fp32 (``runtime/constants.py:236``). An fp16 plan
    priced with 2-byte gradient reduction (Megatron-Core's fp16 default) had been written with
    ``communication_data_type: fp16`` alone, so DeepSpeed would all-reduce its gradients in fp32,
    twice the bytes priced; the export says the plan's dtype under both keys."""
    import torch
    row = dict(model="llama3-8b", seq_len=8192, dp=4, cp=2, cp_kind="ulysses", tp=1, pp=1, micro_batch=1,
               global_batch=32, zero_stage=1, recompute="none", dtype="fp16", grad_reduce_bytes=2.0)
    p = plan_fields(row)
    cfg = json.loads(deepspeed.emit(row))
    config = build(ds, cfg, p, monkeypatch)
    assert config.seq_parallel_communication_data_type == config.communication_data_type == torch.float16
    # the key left out, DeepSpeed's own default is what the engine would reduce in
    del cfg["seq_parallel_communication_data_type"]
    assert build(ds, cfg, p, monkeypatch).seq_parallel_communication_data_type == torch.float32
    # a plan priced with fp32 reduction says fp32 under both
    cfg32 = deepspeed.config({**row, "grad_reduce_bytes": 4.0})
    assert cfg32["seq_parallel_communication_data_type"] == cfg32["communication_data_type"] == "fp32"
    # no Ulysses, no key
    assert "seq_parallel_communication_data_type" not in deepspeed.config({**row, "cp": 1, "dp": 8})


def _optimizer_deepspeed_builds(ds, cfg: dict, p: dict, monkeypatch) -> tuple[str, object]:
    """The optimizer wrapper DeepSpeed 0.19.8's engine builds for the config ``cfg`` (its own
    ``_do_optimizer_sanity_check``, engine.py:2294-2325: ``bf16`` = BF16_Optimizer,
    ``zero_optimization`` = the ZeRO optimizer) and the gradient accumulation dtype it hands that
    optimizer (``get_data_types``), both run on a stand-in holding only the config they read."""
    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine

    class Engine:
        def __init__(self, config):
            self._config, self.global_rank, self.pipeline_parallelism = config, 0, p["pp"] > 1
    for name in ("get_data_types", "_do_optimizer_sanity_check", "fp16_enabled", "bfloat16_enabled",
                 "zero_optimization", "zero_optimization_stage", "zero_cpu_offload", "zero_compute_grad_norm",
                 "zero_allow_untested_optimizer"):
        setattr(Engine, name, getattr(DeepSpeedEngine, name))
    engine = Engine(build(ds, cfg, p, monkeypatch))
    wrapper = engine._do_optimizer_sanity_check(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]))
    return wrapper, engine.get_data_types()[1]


def test_a_bf16_zero1_plan_priced_as_bf16_optimizer_with_optimizer_offload_is_written_as_zero1_with_fp32_grads(
        ds, monkeypatch):
    """DeepSpeed 0.19.8 picks BF16_Optimizer for bf16 + ZeRO-1 + fp32 accumulation only without
    ZeRO-Offload (``runtime/engine.py:2305-2306``, ``and not self.zero_cpu_offload()``). A
    Megatron-DeepSpeed plan (``zero1_grad_all_reduce``) with the optimizer on the host is now priced
    as the ZeRO-1 optimizer DeepSpeed builds (reduce-scattered gradients,
    ``step_model.zero1_reduces_whole``), so it is written, no longer refused: with fp32
    accumulation, the 4-byte whole gradient buffer it priced (``param.grad_accum``,
    stage_1_and_2.py:397-404), and DeepSpeed's own engine check builds the ZeRO optimizer for it
    and BF16_Optimizer for the same plan without offload."""
    import torch
    row = dict(model="llama3-8b", seq_len=8192, dp=16, tp=1, pp=1, micro_batch=1, global_batch=32, zero_stage=1,
               recompute="none", dtype="bf16", grad_reduce_bytes=4.0, zero1_grad_all_reduce=True,
               offload_optimizer_fraction=1.0)
    assert deepspeed.refusal(plan_fields(row)) is None
    cfg = json.loads(deepspeed.emit(row))
    assert cfg["data_types"] == {"grad_accum_dtype": "fp32"}
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert _optimizer_deepspeed_builds(ds, cfg, plan_fields(row), monkeypatch) == ("zero_optimization", torch.float32)
    on_gpu = {**row, "offload_optimizer_fraction": 0.0}
    assert _optimizer_deepspeed_builds(ds, json.loads(deepspeed.emit(on_gpu)), plan_fields(on_gpu),
                                       monkeypatch) == ("bf16", torch.float32)


@pytest.mark.parametrize("zero_stage, offload", [(1, 1.0), (2, 0.0), (2, 1.0), (3, 0.0)])
def test_the_zero_optimizers_gradient_buffer_is_written_in_the_dtype_the_plan_priced(ds, monkeypatch, zero_stage,
                                                                                       offload):
    """A bf16 plan run by DeepSpeed's ZeRO optimizer (ZeRO-2/3, or ZeRO-1 offloaded) keeps its
    gradients in ``grad_accum_dtype`` (stage_1_and_2.py:1236-1239 / :1259-1271, stage3.py:791-792),
    which defaults to bf16 (engine.py:1806-1807). A plan priced with a 4-byte (fp32) buffer
    (``grad_buffer_bytes`` 4) says fp32; one priced with a 2-byte buffer leaves the default. The
    engine's own check builds the ZeRO optimizer for both and hands it that dtype."""
    import torch
    row = dict(model="llama3-8b", seq_len=8192, dp=16, tp=1, pp=1, micro_batch=1, global_batch=32,
               zero_stage=zero_stage, recompute="none", dtype="bf16", offload_optimizer_fraction=offload)
    for buffer_bytes, written, dtype in ((4.0, {"grad_accum_dtype": "fp32"}, torch.float32),
                                         (2.0, None, torch.bfloat16)):
        plan = {**row, "grad_buffer_bytes": buffer_bytes}
        cfg = json.loads(deepspeed.emit(plan))
        assert cfg.get("data_types") == written
        assert _optimizer_deepspeed_builds(ds, cfg, plan_fields(plan), monkeypatch) == ("zero_optimization", dtype)


def test_a_reduce_scattered_bf16_zero1_plan_on_the_gpu_leaves_the_accumulation_dtype_to_deepspeed(ds, monkeypatch):
    """fp32 accumulation would make DeepSpeed build BF16_Optimizer (a whole all-reduce) for bf16
    ZeRO-1 without offload, not the reduce-scattering ZeRO-1 optimizer the plan priced: the key
    stays out whatever the plan's buffer, and DeepSpeed accumulates in bf16."""
    import torch
    row = dict(model="llama3-8b", seq_len=8192, dp=16, tp=1, pp=1, micro_batch=1, global_batch=32, zero_stage=1,
               recompute="none", dtype="bf16", grad_buffer_bytes=4.0)
    cfg = json.loads(deepspeed.emit(row))
    assert "data_types" not in cfg
    assert _optimizer_deepspeed_builds(ds, cfg, plan_fields(row), monkeypatch) == ("zero_optimization", torch.bfloat16)
