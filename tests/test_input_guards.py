"""Inputs an adversarial review found crashing, hanging or silently misread (2026-12-04): each is
now one error line with exit 2, or read as the option's type says."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from hardware_specs.errors import InputError

from cli_results import one_line_error, run

REPO = Path(__file__).resolve().parents[1]
PLOT = ("plot", "breakdown", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--tp", "2", "--pp", "2",
        "--global-batch", "32")


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


@pytest.mark.parametrize("field, values, says", [
    ("tp", "0", "error: tp: must be a whole number >= 1, got 0"),              # was ZeroDivisionError (gpus % tp*pp*cp)
    ("tp", "-3", "error: tp: must be a whole number >= 1, got -3"),
    ("gpus", "-3", "error: gpus: must be a whole number >= 1, got -3"),
    ("tp", "1,,2", "error: --values: an empty item in '1,,2'"),  # was dropped silently
    ("tp", ",".join(["1"] * 65), "error: --values: 65 values; a figure shows at most 64"),   # 5,000 ran > 60 s
])
def test_plot_sweep_values_that_cannot_run_are_one_error_line(tmp_path, field, values, says):
    out = tmp_path / "x.png"
    one_line_error(run(*PLOT, "--field", field, "--values", values, "-o", out), says)
    assert not out.exists()


def test_plot_sweeps_read_layer_counts_and_token_counts_as_integers(tmp_path):
    # every ParallelConfig field typed int is read as a whole number (loss_chunk_tokens 4096 was
    # refused as "must be an integer >= 0 ... got '4096'": the string reached ParallelConfig)
    from paraplan import api
    assert api.coerce_value("loss_chunk_tokens", "4096") == 4096
    assert api.coerce_value("recompute_num_layers", "2") == 2
    assert api.coerce_value("offload_optimizer_fraction", "0.5") == 0.5
    out = tmp_path / "x.png"
    r = run(*PLOT, "--field", "loss_chunk_tokens", "--values", "0,4096", "-o", out)
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 0


@pytest.mark.parametrize("gpus, says", [(9223372036854775808, "9,223,372,036,854,775,808 is above"),
                                        (100_000_000, "100,000,000 is above the largest supported value 16,777,216")])
def test_a_pool_of_more_gpus_than_any_cluster_is_refused(tmp_path, gpus, says):
    # a pool of 2**63 GPUs raised OverflowError in the candidate enumeration; 1e8 ran for seconds
    text = (REPO / "examples" / "clusters" / "a100-h100.yaml").read_text().replace("gpus: 256", f"gpus: {gpus}", 1)
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    one_line_error(run("plan", "-m", "llama3-70b", "-c", path, "--global-batch", "512"), "pools.", says)


def test_a_measured_run_too_large_for_this_machine_is_refused_and_the_bound_is_below_what_runs_hold():
    import pandas as pd

    from paraplan.measure.compare import DEFAULT_MODEL_GPU
    from paraplan.measure.train import RunConfig
    # hidden 65,536 on one layer: 12 h^2 + 2 v h = 51,673,825,280 parameters; fp32 CPU ranks
    # hold 16 bytes each (weight 4, gradient 4, Adam's two moments 8): 770.0 GiB, against a
    # 23.5 GiB machine (the child process died allocating 48 GiB)
    big = RunConfig(hidden_size=65536, num_layers=1, num_heads=64, seq_len=2)
    with pytest.raises(InputError, match="need at least 770.0 GiB") as err:
        big.check_fits("cpu", host_bytes=23.5 * 2**30)
    assert err.value.field == "model"
    big.check_fits("cpu", host_bytes=0.0)              # the machine's memory unknown: no check
    # bf16 on a GPU: 2 + 2 + fp32 master 4 and its gradient 4 + moments 8 = 20 bytes: 962.5 GiB
    with pytest.raises(InputError, match="962.5 GiB, one GPU has 80.0 GiB"):
        big.check_fits("cuda", host_bytes=1e15, device_bytes=80 * 2**30)
    # a lower bound: never above what the H200's measured runs (mixed precision, as the runner
    # trains bf16 now) held at their peak, so no run that ran is refused
    names = {"dp", "tp", "pp", "micro_batch", "global_batch", "zero_stage", "recompute"}
    runs = pd.read_csv(REPO / "tests" / "data" / "gpu_h200_validate" / "validate_measured_calibrated.csv")
    for _, r in runs.iterrows():
        cfg = RunConfig(**DEFAULT_MODEL_GPU, **{k: (r[k] if k == "recompute" else int(r[k])) for k in names})
        assert cfg.model_state_bytes_per_rank("bf16") <= r["measured_peak_memory_bytes"], r["name"]


def test_the_host_memory_check_counts_fp32_adam_state_not_two_bytes_a_weight():
    """hidden 8,192, 2 layers, vocabulary 1,024: 12 h^2 L + 2 v h = 1,627,389,952 parameters.
    fp32 with Adam holds 16 bytes each, 26,038,239,232 bytes = 24.25 GiB (4 a parameter said
    6.06 GiB, and the run passed the check of a 23.5 GiB machine it could not fit)."""
    from paraplan.measure.train import RunConfig
    run = RunConfig(hidden_size=8192, num_layers=2, num_heads=1, seq_len=2, global_batch=1, steps=2, warmup=0)
    assert run.model_state_bytes_per_rank("fp32") == 16 * 1_627_389_952 == 26_038_239_232
    with pytest.raises(InputError, match=r"need at least 24\.2 GiB, this machine has 23\.5 GiB"):
        run.check_fits("cpu", host_bytes=23.5 * 2**30)
    run.check_fits("cpu", host_bytes=24.3 * 2**30)
    # ZeRO-1 over dp=2 shards Adam's moments and the reduced gradient: per rank 4 + 4 weight and
    # gradient, (4 + 8) / 2 for the shard: 14 bytes a parameter, two ranks
    zero1 = RunConfig(hidden_size=8192, num_layers=2, num_heads=1, seq_len=2, global_batch=2, dp=2, zero_stage=1,
                      steps=2, warmup=0)
    assert zero1.model_state_bytes_per_rank("fp32") == 14 * 1_627_389_952
    with pytest.raises(InputError, match=r"need at least 42\.4 GiB"):
        zero1.check_fits("cpu", host_bytes=40 * 2**30)
    # tp=2 halves each rank's parameters; bf16 holds 2 + 2 + 8 (master, its gradient) + 8 = 20
    assert RunConfig(hidden_size=8192, num_layers=2, num_heads=2, tp=2, seq_len=2, global_batch=1, steps=2,
                     warmup=0).model_state_bytes_per_rank("bf16") == 20 * 1_627_389_952 / 2


def test_the_memory_bound_is_what_the_flat_optimizer_allocates():
    """No launch: one rank's model, ``FlatOptimizer`` and one Adam step; the tensors it holds
    (flat weights and gradient, the fp32 master and its gradient in bf16, Adam's moments) add up
    to the bound within the biases and norms it leaves out."""
    torch = pytest.importorskip("torch")
    from paraplan.measure.gpt import GPTConfig, GPTStage
    from paraplan.measure.parallel import FlatOptimizer, Mesh
    from paraplan.measure.train import RunConfig
    mesh = Mesh(rank=0, tp=1, dp=1, pp=1, tp_rank=0, dp_rank=0, pp_rank=0)
    for dtype, torch_dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = GPTStage(GPTConfig(num_layers=2, hidden_size=128, num_heads=4, vocab_size=1024, seq_len=16),
                         mesh).to(dtype=torch_dtype)
        opt = FlatOptimizer(model, mesh, zero_stage=0)
        opt.step()
        tensors = {id(t): t for t in (opt.flat, opt.grad, opt.shard_param, opt.shard_param.grad,
                                      *(v for st in opt.adam.state.values() for v in st.values()
                                        if torch.is_tensor(v) and v.numel() > 1))}
        held = sum(t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t
                                                          for t in tensors.values()}.values())
        bound = RunConfig(num_layers=2, hidden_size=128, num_heads=4, vocab_size=1024, seq_len=16,
                          global_batch=4).model_state_bytes_per_rank(dtype)
        assert 0.98 * held <= bound <= held, (dtype, held, bound)


def test_the_memory_bound_counts_the_gpts_own_weight_matrices():
    torch = pytest.importorskip("torch")
    from paraplan.measure.gpt import GPTConfig, GPTStage
    from paraplan.measure.parallel import Mesh
    from paraplan.measure.train import RunConfig
    mesh = Mesh(rank=0, tp=1, dp=1, pp=1, tp_rank=0, dp_rank=0, pp_rank=0)
    for layers, h, v, s in ((4, 256, 1024, 128), (2, 128, 1024, 2048)):
        model = GPTStage(GPTConfig(num_layers=layers, hidden_size=h, num_heads=4, vocab_size=v, seq_len=s), mesh)
        params = sum(p.numel() for p in model.parameters())
        bound = RunConfig(num_layers=layers, hidden_size=h, num_heads=4, vocab_size=v, seq_len=s,
                          global_batch=4).model_state_bytes_per_rank("fp32")
        # 16 bytes a parameter in fp32 with Adam; biases and norms (about 1% here) are left out
        assert 0.98 * 16 * params <= bound <= 16 * params
    assert torch is not None


def test_a_ranks_out_of_memory_is_an_input_error_not_an_internal_one(monkeypatch):
    import paraplan.measure.runtime as runtime

    class Raised(Exception):
        pass

    def start(*_, **__):
        raise Raised("RuntimeError: [enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate memory")

    class Exited(Exception):
        def __init__(self, signal_name=None):
            super().__init__("process 0 terminated with signal SIGKILL")
            self.signal_name = signal_name

    fake_mp = types.SimpleNamespace(start_processes=start, ProcessRaisedException=Raised, ProcessExitedException=Exited)
    fake_torch = types.SimpleNamespace(multiprocessing=fake_mp, cuda=types.SimpleNamespace(device_count=lambda: 0))
    monkeypatch.setattr(runtime, "require_torch", lambda: fake_torch)
    import sys
    monkeypatch.setitem(sys.modules, "torch.multiprocessing", fake_mp)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    choice = runtime.DeviceChoice(kind="cpu", backend="gloo", dtype="fp32", threads_per_rank=1)
    with pytest.raises(InputError, match="ran out of memory"):
        runtime.launch(lambda *a: None, 1, {}, choice)

    # Linux's out-of-memory killer: the rank exits on SIGKILL with no exception of its own
    def killed(*_, **__):
        raise Exited("SIGKILL")
    fake_mp.start_processes = killed
    with pytest.raises(InputError, match="killed \\(SIGKILL\\), most likely by the out-of-memory killer"):
        runtime.launch(lambda *a: None, 1, {}, choice)


def test_validate_measured_refuses_a_gpu_profile_on_a_machine_without_one(monkeypatch):
    # it trained the CPU for minutes and compared the runs with an H100's predictions (97% error)
    import paraplan.measure.compare as compare
    import paraplan.measure.runtime as runtime
    monkeypatch.setattr(runtime, "choose_device", lambda device="auto", **_: types.SimpleNamespace(kind="cpu"))
    monkeypatch.setattr(compare, "require_torch", lambda: None)
    with pytest.raises(InputError, match="dgx-h100 describes h100-sxm-80gb GPUs, and this machine has no CUDA GPU"):
        compare.compare_measured("dgx-h100")
    one_line_error(run("validate", "measured", "dgx-h100", "--rounds", "101"), "--rounds")


# ---- damaged measured-runs files ---------------------------------------------------------------

def _damaged(tmp_path, source, name, edit, rows=4):
    """A copy of the first ``rows`` records of ``source`` with ``edit(records)`` applied."""
    import csv
    records = list(csv.reader(source.open(newline="")))[:rows + 1]
    edit(records)
    path = tmp_path / name
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(records)
    return path


#: a CSV cell of 400 digits (pandas reads it as a Python int, too large for a float)
_DIGITS_400 = "1" + "0" * 400


def _files():
    from paraplan.validation.datasets import PUBLISHED_RUNS, SERVING_RUNS, validation_file
    return validation_file(PUBLISHED_RUNS), validation_file(SERVING_RUNS)


@pytest.mark.parametrize("which", ["published", "serving"])
def test_a_row_with_more_fields_than_the_header_is_one_error_line(tmp_path, which):
    # pandas read it as index columns: every row of the file shifted one column and was skipped
    # for a wrong reason, with exit 0
    source = _files()[which == "serving"]
    path = _damaged(tmp_path, source, "long.csv", lambda r: r[1].extend(["x", "y"]))
    one_line_error(run("validate", which, path), "error: path: data row 1 of long.csv has", "fix that row")


@pytest.mark.parametrize("which", ["published", "serving"])
def test_a_column_named_twice_is_one_error_line(tmp_path, which):
    source = _files()[which == "serving"]
    path = _damaged(tmp_path, source, "dup.csv", lambda r: r[0].__setitem__(r[0].index("isl" if which == "serving"
                                                                                           else "dp"),
                                                                          "osl" if which == "serving" else "tp"))
    one_line_error(run("validate", which, path), "names the column", "twice")


@pytest.mark.parametrize("which, column, value, reason", [
    ("published", "layers", "abc", "layers 'abc' is not a number"),        # was read as empty: the preset's layers
    ("published", "micro_batch", "abc", "micro_batch 'abc' is not a number"),
    ("published", "tp", "abc", "tp 'abc' is not a number"),
    ("serving", "isl", "1e30", "isl 1e+30 is not a whole number from 1 to 16,777,216"),   # predicted TTFT 3.4e53 ms
    ("serving", "osl", "2.5", "osl 2.5 is not a whole number from 1 to 16,777,216"),
    ("serving", "pp_size", "-1", "pp_size -1 is not a whole number from 0 to 16,777,216"),
    ("serving", "attention_dp_size", "abc", "attention_dp_size 'abc' is not a number"),    # was read as 1
    ("serving", "batch_size", "0", "batch_size 0 is not a whole number from 1 to 16,777,216"),
    # a damaged cell: its relative error printed as inf in the table
    ("published", "measured_value", "1e-300", "measured_value 1e-300 is below 1e-09, not a measurement (a damaged cell)"),
    # a precision the row's GPU has no tensor cores for aborted the whole file
    ("published", "dtype_norm", "nvfp4", "dtype_norm nvfp4: a100-sxm-80gb has no nvfp4 peak"),
    ("published", "seq_parallel", "perhaps", "seq_parallel 'perhaps' is not y or n"),     # was read as off
])
def test_a_row_with_an_impossible_value_is_skipped_with_that_reason(tmp_path, which, column, value, reason):
    # a published row with text in a number-only column; a serving row with an impossible count
    import json
    source = _files()[which == "serving"]

    def edit(records):
        records[1][records[0].index(column)] = value
    rows = json.loads(run("validate", which, _damaged(tmp_path, source, "bad.csv", edit), "--json").stdout)
    first = [r for r in rows if r["id"] == rows[0]["id"]]       # a serving row has one record per metric
    assert {r["status"] for r in first} == {"skipped"}
    assert first[0]["reason"] == reason


@pytest.mark.parametrize("which, column, reason", [
    *[("published", col, f"{col} (an integer of 401 digits) is not a finite number")
      for col in ("tp", "n_gpus", "global_batch", "seq_len", "hidden")],
    ("published", "measured_value", "measured_value is not a finite number"),
    *[("serving", col, f"{col} (an integer of 401 digits) is not a whole number from {low} to 16,777,216")
      for col, low in (("batch_size", 1), ("isl", 1), ("osl", 1), ("tp_size", 0))],
])
def test_a_cell_of_400_digits_skips_its_row_with_a_reason_not_an_internal_error(tmp_path, which, column, reason):
    # pandas reads the one row's cell as an int too large for a float: float() raised
    # OverflowError, exit 1 'internal' for the whole file; it is skipped as an inf cell is
    import json
    source = _files()[which == "serving"]
    path = _damaged(tmp_path, source, "bad.csv", lambda r: r[1].__setitem__(r[0].index(column), _DIGITS_400),
                    rows=1)
    result = run("validate", which, path, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["status"] for r in rows} == {"skipped"} and rows[0]["reason"] == reason


def test_a_serving_rows_measurement_of_400_digits_skips_that_metric_as_an_inf_cell_does(tmp_path):
    # float() of the int pandas reads raised OverflowError: exit 1 'internal' for the whole file
    import json
    _, source = _files()
    reasons = {}
    for cell in (_DIGITS_400, "inf"):
        path = _damaged(tmp_path, source, "bad.csv", lambda r: r[1].__setitem__(r[0].index("silicon_ttft_ms"), cell),
                        rows=1)
        result = run("validate", "serving", path, "--json")
        assert result.exit_code == 0, result.output
        ttft = {r["metric"]: r for r in json.loads(result.stdout)}["ttft_ms"]
        assert ttft["status"] == "skipped"
        reasons[cell] = ttft["reason"]
    assert reasons[_DIGITS_400] == reasons["inf"]


def test_a_serving_rows_damaged_measurement_skips_that_metric_not_an_inf_error():
    import pandas as pd

    from paraplan.validation.serving import validate_rows
    _, serving = _files()
    row = pd.read_csv(serving, dtype={"backend_version": str}).head(1).copy()
    row["silicon_ttft_ms"] = 1e-300
    out = validate_rows(row).set_index("metric")
    assert out.loc["ttft_ms", "status"] == "skipped" and pd.isna(out.loc["ttft_ms", "rel_error"])
    assert out.loc["ttft_ms", "reason"] == "measured ttft_ms 1e-300 is below 0.001 ms, not a measurement"
    assert out.loc["tpot_ms", "status"] == "ok"


def test_a_serving_row_longer_than_the_models_context_is_skipped_as_serve_simulate_refuses_it():
    import pandas as pd

    from model_specs.catalog import load_model
    from paraplan.validation.serving import model_preset_for, validate_rows
    _, serving = _files()
    row = pd.read_csv(serving, dtype={"backend_version": str}).head(1).copy()
    preset = model_preset_for(str(row.model_path.iloc[0]).lower())
    most = load_model(preset).max_context_tokens
    row["isl"] = most
    out = validate_rows(row)
    assert set(out.status) == {"skipped"}
    assert f"context of {preset}" in out.reason.iloc[0]


# ---- catalog files and names ---------------------------------------------------------------------

@pytest.mark.parametrize("line, replacement, field", [
    ("bw_gbit_per_s: 400", "bw_gbit_per_s: 1e30", "scaleout.bw_gbit_per_s"),     # was accepted
    ("bw_gb_per_s: 450", "bw_gb_per_s: 1e30", "scaleup.bw_gb_per_s"),
])
def test_a_link_faster_than_any_plausible_one_is_refused(tmp_path, line, replacement, field):
    from hardware_specs.gpu_spec import MAX_RATE_PER_S
    assert MAX_RATE_PER_S == 1e21          # 10^5 x a B200's 4.5e15 FP8 FLOP/s; 1e30 Gb/s is 1.25e29 B/s
    text = (REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml").read_text()
    assert line in text
    path = tmp_path / "c.yaml"
    path.write_text(text.replace(line, replacement))
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", path, "--gpus", "8", "--global-batch", "64"),
                   field, "above the plausible maximum")


def test_a_hugging_face_config_with_a_byte_order_mark_is_read(tmp_path):
    import json
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
              "hidden_act": "silu", "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(config).encode())
    r = run("models", "show", path)
    assert r.exit_code == 0, r.output
    assert "num_layers" in r.stdout and "32" in r.stdout


def test_an_empty_stack_name_is_refused_rather_than_read_as_all():
    one_line_error(run("hardware", "stacks", ""), "error: stack: unknown stack ''")


@pytest.mark.parametrize("backend, version, says", [
    ("vllm", "nan", "'nan' names no release"),
    ("vllm", "", "'' names no release"),
    ("vllm-0.11", "0.14", "-b vllm-0.11 names one stack profile"),      # the version was ignored
])
def test_serve_refuses_a_release_it_would_ignore(backend, version, says):
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", backend,
                       "--backend-version", version), "--backend-version", says)


def test_sweep_specs_refuse_unknown_dtypes_and_impossible_degrees_and_read_token_suffixes():
    from paraplan.sweeps.spec import check_names, spec_from_dict
    base = {"models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [8], "search": "simulate"}
    spec = spec_from_dict({**base, "global_batch_tokens": ["16Mi", "4M", 8192]})
    assert spec.global_batch_tokens == (16 * 2**20, 4_000_000, 8192)
    with pytest.raises(InputError, match="is not a token count"):
        spec_from_dict({**base, "global_batch_tokens": ["16 MiB"]})
    with pytest.raises(InputError, match="unknown dtype 'fp4'"):       # were rows of status invalid
        check_names(spec_from_dict({**base, "global_batch": [64], "dtypes": ["fp4"]}))
    for key, values in (("tp", [0, 1]), ("micro_batch", [-1]), ("zero_stage", [4])):
        with pytest.raises(InputError, match=f"config.{key}"):
            spec_from_dict({**base, "global_batch": [64], "config": {key: values}})


def test_a_roofline_refuses_a_tp_that_splits_a_head(tmp_path):
    one_line_error(run("plot", "roofline", "-m", "llama3-8b", "-c", "dgx-h100", "--tp", "3", "-o", tmp_path / "r.png"),
                   "tp: 3 does not divide the 32 attention heads")


def test_a_validation_plot_with_no_predicted_row_is_not_drawn_and_says_so(tmp_path):
    _, serving = _files()

    def edit(records):
        del records[2:]
        records[1][records[0].index("isl")] = "abc"
    figure = tmp_path / "none.png"
    r = run("validate", "serving", _damaged(tmp_path, serving, "one.csv", edit), "--plot", figure)
    assert r.exit_code == 0 and not figure.exists()
    assert "note: --plot: no row was predicted" in r.stderr and "warning" not in r.stderr.lower()


def test_tensorrt_llm_is_refused_on_gpus_it_does_not_run_on():
    # a documented stack input (serving.gpu_vendors: TensorRT-LLM runs on NVIDIA GPUs only)
    from hardware_specs.catalog import load_stack
    assert load_stack("trtllm-1").serving.gpu_vendors == ("nvidia",)
    assert load_stack("vllm-0.14").serving.gpu_vendors == ()
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "mi300x-node", "-b", "trtllm"),
                   "error: backend: trtllm-1 runs on nvidia GPUs, not on mi300x-node's mi300x (amd)")
    assert run("serve", "simulate", "-m", "llama3.1-8b", "-s", "mi300x-node", "-b", "vllm").exit_code == 0


def test_tensorrt_llm_fp8_is_refused_on_gpus_without_fp8_tensor_cores():
    # a documented stack input (serving.native_only_formats: TensorRT-LLM's support matrix lists no
    # FP8 on Ampere), where vLLM runs FP8 weight-only with its Marlin kernels
    from hardware_specs.catalog import load_stack
    assert load_stack("trtllm-1").serving.native_only_formats == ("fp8", "fp8_block")
    assert load_stack("vllm-0.14").serving.native_only_formats == ()
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-a100-80gb", "-b", "trtllm",
                       "--precision", "fp8"),
                   "error: --precision: trtllm-1 serves fp8 weights only on GPUs with fp8 tensor cores")
    # DeepSeek-R1's checkpoint default (block FP8) is refused the same way, bf16 is served
    one_line_error(run("serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-a100-80gb", "-b", "trtllm", "--tp", "8"),
                   "error: --precision: trtllm-1 serves fp8_block weights")
    assert run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-a100-80gb", "-b", "trtllm").exit_code == 0
    assert run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-a100-80gb", "-b", "vllm",
               "--precision", "fp8").exit_code == 0
    assert run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", "trtllm",
               "--precision", "fp8").exit_code == 0


def test_a_plan_file_with_a_key_no_plan_has_is_refused(tmp_path):
    import json
    best = json.loads(run("plan", "-m", "gpt3-1.3b", "-c", REPO / "examples" / "clusters" / "a100-h100.yaml",
                          "--global-batch", "64", "--json").stdout)["best_plan"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**best, "zero_stg": 1}))          # was run at the default ZeRO stage
    one_line_error(run("simulate", "-m", "gpt3-1.3b", "-c", REPO / "examples" / "clusters" / "a100-h100.yaml",
                       "--plan", path), "--plan.zero_stg: not a key of a plan", "zero_stage")


def test_a_mistyped_backend_with_a_release_is_named_as_unknown_not_as_a_stack():
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", "vlm", "--backend-version",
                       "0.11"), "error: backend: no serving stack for framework 'vlm'", "did you mean vllm")


def test_a_sweep_token_count_too_long_to_read_is_an_input_error():
    from paraplan.sweeps.spec import spec_from_dict
    base = {"models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [8], "search": "simulate"}
    for text in ("9" * 400, "9" * 5000, str(2**63)):     # were OverflowError / ValueError
        with pytest.raises(InputError, match="global_batch_tokens"):
            spec_from_dict({**base, "global_batch_tokens": [text]})


def test_validate_measured_refuses_a_cpu_profile_on_a_machine_whose_runs_would_use_its_gpu(monkeypatch):
    import paraplan.measure.compare as compare
    import paraplan.measure.runtime as runtime
    monkeypatch.setattr(runtime, "choose_device", lambda device="auto", **_: types.SimpleNamespace(kind="cuda"))
    monkeypatch.setattr(compare, "require_torch", lambda: None)
    with pytest.raises(InputError, match="cpu-local describes a CPU, and this machine's runs would train on its CUDA GPU"):
        compare.compare_measured("cpu-local")


@pytest.mark.parametrize("argv, says", [
    # serve plan kept the text report in the file and said both were written: the figure was lost
    (lambda d: ("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--out", d / "p.png",
                "--plot", d / "p.png"), "error: --plot: "),
    (lambda d: ("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--pp", "2", "--global-batch", "32",
                "--trace", d / "t.png", "--gantt", d / "t.png"), "error: --gantt: "),
    # the predictions replaced the runs file they were made from
    (lambda d: ("validate", "published", d / "runs.csv", "--csv", "--out", d / "runs.csv"), "error: --out: "),
])
def test_two_outputs_or_an_output_and_an_input_naming_one_file_are_refused(tmp_path, argv, says):
    runs = tmp_path / "runs.csv"
    runs.write_text("id\n")
    before = runs.read_text()
    result = run(*argv(tmp_path))
    one_line_error(result, says, "give each output its own file")
    assert runs.read_text() == before
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "t.png").exists()


@pytest.mark.parametrize("content, says", [
    # a cluster file without its gpu was read as a GPU file and asked for peak_tflops
    ("name: x\ngpus_per_node: 8\nscaleup: {kind: nvlink, bw_gb_per_s: 450}\n", "error: cluster x.gpu: missing"),
    # the catalog's key is hbm_gib; the error named hbm_gb
    ("name: g\nvendor: nvidia\ngeneration: hopper\npeak_tflops: {bf16: 989}\n", "error: gpu g.hbm_gib: missing"),
    # a model file is neither
    ("name: m\nnum_layers: 2\nhidden_size: 64\n", "is neither a GPU nor a cluster file"),
])
def test_hardware_show_names_the_kind_of_file_and_the_catalogs_keys(tmp_path, content, says):
    path = tmp_path / "f.yaml"
    path.write_text(content)
    one_line_error(run("hardware", "show", path), says)


def test_a_gpu_file_giving_its_memory_twice_is_refused(tmp_path):
    # hbm_gib 80 and hbm_gb 141 in one file: which one was read changed with an edit; neither is
    # a guess now
    path = tmp_path / "g.yaml"
    path.write_text("name: g\nvendor: nvidia\ngeneration: hopper\npeak_tflops: {bf16: 989}\nhbm_gib: 80\nhbm_gb: 141\n")
    one_line_error(run("hardware", "show", path), "error: gpu g.hbm_gb: given with hbm_gib")


def test_a_measured_run_of_hours_is_refused_before_it_starts_and_the_recorded_runs_are_not():
    import json
    from dataclasses import fields

    from paraplan.measure.train import RUN_FLOPS, RunConfig
    # by hand: 6 x (12 h^2 L + v h) + 6 s h L FLOPs a token; the default run (L 4, h 256, v 1024,
    # s 128, global batch 4, 4 steps): 6 x (3,145,728 + 262,144) + 786,432 = 21,233,664 a token,
    # x 2,048 tokens = 4.35e10
    assert RunConfig().training_flops() == pytest.approx(21_233_664 * 128 * 4 * 4, rel=1e-12)
    # seq_len 1,048,576 (the review's hang: hours on two cores, 5.6 GB and growing): refused
    with pytest.raises(InputError, match="more than the 2e[+]13") as err:
        RunConfig(seq_len=2**20, global_batch=1).check_fits("cpu", host_bytes=0.0)
    assert err.value.field == "seq_len"
    # every run recorded on the H200 fits the GPU bound, the default CPU comparison the CPU one
    names = {f.name for f in fields(RunConfig)}
    runs = json.loads((REPO / "tests" / "data" / "gpu_h200" / "measured_runs.json").read_text())
    for r in runs:
        cfg = RunConfig(**{k: v for k, v in r.items() if k in names})
        assert cfg.training_flops() <= RUN_FLOPS["cuda"], r["name"]
    from paraplan.measure.compare import DEFAULT_MODEL
    assert RunConfig(**DEFAULT_MODEL, global_batch=8, steps=8).training_flops() <= RUN_FLOPS["cpu"] / 100


def test_an_integer_of_thousands_of_digits_in_any_file_is_one_line_not_an_internal_error(tmp_path):
    from hardware_specs.yaml_files import read_yaml
    from model_specs.hf_config import read_json
    big = "9" * 5000
    y = tmp_path / "m.yaml"
    y.write_text(f"name: x\nhidden_size: {big}\n")
    with pytest.raises(InputError, match="more than 4,300 digits") as err:
        read_yaml(y, "model")
    assert err.value.field == "model"
    j = tmp_path / "config.json"
    j.write_text('{"hidden_size": %s}' % big)
    with pytest.raises(InputError, match="an integer of 5,000 digits") as err:
        read_json(j)
    assert err.value.field == "model" and str(j) in err.value.message
    j.write_text('{"hidden_size": %s}' % ("9" * 30))       # long but readable: left to the field checks
    assert read_json(j)["hidden_size"] == int("9" * 30)



@pytest.mark.parametrize("text, field", [
    # a one-kind cluster: a typo kept the default 8 GPUs a node without a word
    ("name: c\ngpu: h100-sxm-80gb\ngpus_per_nod: 4\ngpus_per_node: 8\nscaleout: {bw_gbit_per_s: 400}\n",
     "cluster c.gpus_per_nod"),
    # a network tier: the latency silently stayed 5 us
    ("name: c\ngpu: h100-sxm-80gb\ngpus_per_node: 8\nscaleout: {bw_gbit_per_s: 400, latncy_us: 99}\n",
     "cluster c.scaleout.latncy_us"),
    # both bandwidth units: the Gb/s one won silently
    ("name: c\ngpu: h100-sxm-80gb\ngpus_per_node: 8\nscaleout: {bw_gbit_per_s: 400, bw_gb_per_s: 400}\n",
     "cluster c.scaleout.bw_gb_per_s"),
    # an inline GPU's unknown key
    ("name: c\ngpus_per_node: 8\nscaleout: {bw_gbit_per_s: 400}\ngpu: {name: g, generation: hopper, "
     "peak_tflops: {bf16: 989}, hbm_gib: 80, hbm_bw_tb_per_s: 3.35, scaleup_bw_gb_per_s: 450, scaleup_domain_size: 8, "
     "hbm_bandwidth: 10}\n", "gpu g.hbm_bandwidth"),
])
def test_an_unknown_key_in_a_hardware_file_is_refused_naming_it(tmp_path, text, field):
    from hardware_specs.catalog import load_cluster
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match="unknown key|given with") as err:
        load_cluster(str(path))
    assert err.value.field == field


def test_an_unknown_top_level_key_in_a_stack_file_is_refused(tmp_path):
    from hardware_specs.catalog import load_stack
    src = sorted((REPO / "hardware_specs" / "stacks").glob("megatron-core*.yaml"))[0]
    path = tmp_path / "s.yaml"
    path.write_text(src.read_text() + "\nbogus: 1\n")
    with pytest.raises(InputError, match="unknown key") as err:
        load_stack(str(path))
    assert err.value.field.endswith(".bogus")


@pytest.mark.parametrize("args", [
    ("plan", "-m", "llama3-8b", "-c", "tpu-v4-pod", "-n", "8", "--global-batch", "8", "--emit", "megatron"),
    ("plan", "-m", "gpt3-125m", "-c", "cpu-local", "-n", "2", "--global-batch", "8", "--emit", "deepspeed"),
    ("serve", "simulate", "-m", "llama3.1-8b", "-s", "tpu-v4-pod", "-b", "sglang", "--emit"),
])
def test_a_launch_script_for_hardware_its_framework_does_not_run_on_is_refused(args):
    r = run(*args)
    one_line_error(r, "error: --emit:", "runs on")
    assert "not on" in r.output


def test_a_checkpoint_format_no_engine_stores_is_refused_when_the_model_loads(tmp_path):
    from cost_models.weight_formats import WEIGHT_FORMATS
    from model_specs.catalog import load_model
    from model_specs.model_spec import CHECKPOINT_FORMATS
    assert set(CHECKPOINT_FORMATS) == set(WEIGHT_FORMATS)
    src = (REPO / "model_specs" / "presets" / "llama3-8b.yaml").read_text()
    path = tmp_path / "m.yaml"
    path.write_text(src.replace('name: "llama3-8b"', 'name: "m"') + "\ncheckpoint_format: bogus\n")
    with pytest.raises(InputError, match="unknown weight format 'bogus'") as err:
        load_model(str(path))
    assert err.value.field == "model.checkpoint_format"


@pytest.mark.parametrize("flag", ["--recompute-num-layers", "--offload-activation-layers"])
def test_more_layers_per_chunk_than_a_chunk_holds_are_refused_not_clipped(flag):
    # llama3-8b's 32 layers on pp 2: 16 a chunk; 17 printed the same step as 16
    extra = ["--recompute", "full"] if flag == "--recompute-num-layers" else []
    args = ("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--pp", "2", "--global-batch", "16", *extra)
    one_line_error(run(*args, flag, "17"), f"error: {flag.lstrip('-').replace('-', '_')}: 17 layers per model chunk",
                   "at most 16")
    assert run(*args, flag, "16").exit_code == 0


@pytest.mark.parametrize("args, field", [
    (("validate", "published", "--source", ""), "--source"),          # matched every row
    (("validate", "serving", "--backend", " "), "--backend"),
    (("calibrate", "--out", "unused.yaml", "--name", ""), "--name"),  # found only after 40 s of benchmarks
])
def test_an_empty_option_value_is_refused_before_any_work(args, field):
    one_line_error(run(*args), f"error: {field}: is empty")


def test_a_row_repeating_an_earlier_rows_id_is_skipped_not_scored_twice():
    import pandas as pd

    from paraplan.validation.published import read_runs
    from paraplan.validation.published import validate_rows as validate_published
    from paraplan.validation.serving import read_rows
    from paraplan.validation.serving import validate_rows as validate_serving
    published, serving = _files()
    runs = read_runs(published).head(1)
    out = validate_published(pd.concat([runs, runs], ignore_index=True))
    assert list(out.status) == ["ok", "skipped"]
    assert out.reason.iloc[1] == f"id {runs.id.iloc[0]} repeats data row 1"
    rows = read_rows(serving).head(1)
    out = validate_serving(pd.concat([rows, rows], ignore_index=True))
    assert list(out.status) == ["ok", "ok", "skipped", "skipped"]
    assert set(out.reason.iloc[2:]) == {f"id {rows.id.iloc[0]} repeats data row 1"}


def test_a_gpu_file_that_states_no_vendor_still_emits(tmp_path):
    # vendor is optional in a GPU file: only a stated vendor the framework does not run on is refused
    import yaml
    gpu = yaml.safe_load((REPO / "hardware_specs" / "gpus" / "h100-sxm-80gb.yaml").read_text())
    gpu.pop("vendor")
    gpu["name"] = "my-h100"
    (tmp_path / "my-h100.yaml").write_text(yaml.safe_dump(gpu))
    (tmp_path / "c.yaml").write_text("name: c\ngpu: my-h100.yaml\ngpus_per_node: 8\nscaleout: {bw_gbit_per_s: 400}\n")
    r = run("plan", "-m", "llama3-8b", "-c", tmp_path / "c.yaml", "-n", "8", "--global-batch", "8", "--emit", "megatron")
    assert r.exit_code == 0, r.output


def test_serving_rows_without_an_id_are_counted_by_position_and_implausible_cells_are_skipped(tmp_path):
    import pandas as pd

    from paraplan.validation.serving import summarize, validate_rows
    _, serving = _files()
    rows = pd.read_csv(serving, dtype={"backend_version": str}).head(4).copy()
    rows.loc[0, "id"] = float("nan")          # an empty cell, as pandas reads '', NA or null
    rows.loc[1, "id"] = float("nan")
    rows.loc[2, "silicon_ttft_ms"] = 1e308
    rows.loc[3, "osl"] = 1
    out = validate_rows(rows)
    # two rows without an id are two rows, not a repeat; every row counted once
    assert sorted(out.data_row.unique()) == [1, 2, 3, 4]
    assert not out.reason.fillna("").str.contains("repeats").any()
    total = summarize(out)
    assert int(total.rows_used.sum() + total.rows_skipped.sum()) == 4 and (total.rows_skipped >= 0).all()
    huge = out[(out.data_row == 3) & (out.metric == "ttft_ms")].iloc[0]
    assert huge.status == "skipped" and huge.reason == "measured ttft_ms 1e+308 is above 8.64e+07 ms (a day), not a measurement"
    one = out[(out.data_row == 4) & (out.metric == "tpot_ms")].iloc[0]
    assert one.status == "skipped" and one.reason.startswith("osl 1: a request of one output token has no time")
    # a repeated id is skipped and counted once, and the text's skipped list agrees with the table
    rows = pd.read_csv(serving, dtype={"backend_version": str}).head(1)
    path = tmp_path / "twice.csv"
    pd.concat([rows, rows]).to_csv(path, index=False)
    text = run("validate", "serving", path, "--list-skipped").stdout
    assert "skipped rows: 1" in text and f"repeats data row 1" in text


def test_a_published_row_without_an_id_is_no_repeat_and_a_huge_value_is_damage(tmp_path):
    import pandas as pd

    from paraplan.validation.published import validate_rows
    published, _ = _files()
    rows = pd.read_csv(published).head(3).copy()
    rows.loc[0, "id"] = float("nan")
    rows.loc[1, "id"] = float("nan")
    rows.loc[2, "measured_value"] = 1e308
    out = validate_rows(rows)
    assert not out.reason.fillna("").str.contains("repeats").any()
    assert out.reason.iloc[2] == "measured_value 1e+308 is above 1e+12, not a measurement (a damaged cell)"


@pytest.mark.parametrize("option, value, says", [
    ("--recompute-modules", "", "is empty"), ("--recompute-modules", "core_attn,,mlp_act", "an empty item"),
    ("--pipeline-layout", " ", "is empty")])
def test_an_option_given_empty_is_refused_not_read_as_absent(option, value, says):
    # an empty --recompute-modules ran as if it had not been given, though it implies selective
    one_line_error(run("simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "8", "--tp", "8",
                       "--global-batch", "8", option, value), option, says)


@pytest.mark.parametrize("kind, line, bad", [
    ("model", 'name: "llama3.1-70b"', 'name: "evil$(touch /tmp/paraplan-pwned)"'),
    ("cluster", "name: dgx-h100", 'name: "dgx\\necho injected >&2 #"')])
def test_a_name_that_would_run_as_shell_in_a_launch_script_is_refused(tmp_path, kind, line, bad):
    # names are written into --emit scripts (comments, the MODEL message inside ${MODEL:?...}):
    # $(...) there ran when the script started without MODEL, a newline turned a comment into a command
    src = REPO / ("model_specs/presets/llama3.1-70b.yaml" if kind == "model" else "hardware_specs/clusters/dgx-h100.yaml")
    text = src.read_text()
    assert line in text
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text.replace(line, bad, 1))
    args = (["-m", path, "-s", "dgx-h100"] if kind == "model" else ["-m", "llama3.1-8b", "-s", path])
    one_line_error(run("serve", "simulate", *args, "--emit"), "name", "is not a name")


def test_a_hugging_face_checkpoint_folder_name_is_made_a_safe_name(tmp_path):
    import json
    import subprocess
    folder = tmp_path / "x$(echo INJECTED>&2)"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
        "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 32000, "max_position_embeddings": 4096}))
    result = run("serve", "simulate", "-m", folder / "config.json", "-s", "dgx-h100", "--emit")
    assert result.exit_code == 0, result.output
    assert "echo INJECTED" not in result.stdout and "x-echo-INJECTED-2" in result.stdout
    script = tmp_path / "launch.sh"
    script.write_text(result.stdout)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_a_stack_release_that_would_run_as_shell_in_a_launch_script_is_refused(tmp_path):
    # a stack's versions are quoted in --emit's '# note:' comment: a newline there ran what followed
    text = (REPO / "hardware_specs/stacks/vllm-0.11.yaml").read_text()
    assert 'versions: ["0.11", "0.12", "0.13"]' in text
    bad = text.replace('versions: ["0.11", "0.12", "0.13"]', 'versions: ["0.11\\necho injected >&2 #"]')
    path = tmp_path / "stack.yaml"
    path.write_text(bad.replace("name: vllm-0.11", "name: vllm-mine"))
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", path, "--emit"),
                   "versions", "is not a name")


def test_a_launch_scripts_comment_lines_never_hold_a_newline():
    from paraplan.exports.serving_common import _CONTROL
    assert _CONTROL.sub(" ", "# note: a\nrm -rf x") == "# note: a rm -rf x"


def test_a_model_file_without_a_name_takes_its_file_name_made_a_name(tmp_path):
    # 'my model.yaml' states no name: it was refused as 'rename it', though the file names nothing
    text = (REPO / "model_specs/presets/llama3-8b.yaml").read_text()
    path = tmp_path / "my model.yaml"
    path.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("name:")) + "\n")
    from model_specs.catalog import load_model
    assert load_model(str(path)).name == "my-model"


def test_calibrate_refuses_a_profile_name_other_commands_would_refuse_before_it_benchmarks(tmp_path):
    one_line_error(run("calibrate", "--name", "lab box", "--out", tmp_path / "x.yaml"), "--name", "is not a name")
    assert not (tmp_path / "x.yaml").exists()


def test_a_serving_profile_stays_hashable_and_picklable_with_its_recorded_accuracy():
    import copy
    import pickle

    from hardware_specs.catalog import load_serving_efficiency
    eff = load_serving_efficiency("blackwell")
    assert eff.validation_error_pct and hash(eff) == hash(copy.deepcopy(eff))
    assert pickle.loads(pickle.dumps(eff)) == eff


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_serve_says_the_same_of_an_osl_below_2_whichever_command(command):
    extra = ["-n", "8"] if command == "plan" else []
    one_line_error(run("serve", command, "-m", "llama3.1-8b", "-s", "dgx-h100", *extra, "--osl", "0"),
                   "error: --osl: must be a whole number >= 2, got 0")
    one_line_error(run("serve", command, "-m", "llama3.1-8b", "-s", "dgx-h100", *extra, "--osl", "1"),
                   "error: --osl: 1 output token has no time per output token")


@pytest.mark.parametrize("which", ["published", "serving"])
def test_a_file_without_its_header_line_says_so(tmp_path, which):
    # the first data row was read as the header and reported as "names the column 'fp8' twice"
    published, serving = _files()
    source = published if which == "published" else serving
    path = tmp_path / "no_header.csv"
    path.write_text("".join(source.read_text().splitlines(keepends=True)[1:5]))
    one_line_error(run("validate", which, path), "path", "it is not the header")


def test_a_control_character_in_a_cell_never_reaches_a_tables_lines():
    from paraplan.cli import format_table
    text = format_table([["vl\x00lm", "a\nb"]], ["backend", "reason"])
    assert "\x00" not in text and len(text.splitlines()) == 3


def test_an_output_never_replaces_a_link_or_a_file_the_command_reads(tmp_path):
    # --out through a link replaced the link (and --out /dev/stdout with stdout redirected to a
    # file replaced /dev/stdout); --out naming the -m file replaced the model with the report
    model = tmp_path / "m.yaml"
    model.write_text((REPO / "model_specs/presets/llama3.1-8b.yaml").read_text())
    before = model.read_text()
    one_line_error(run("serve", "plan", "-m", model, "-s", "dgx-h100", "-n", "8", "--out", model),
                   "--out", "is also the file read by --model")
    one_line_error(run("simulate", "-m", model, "-c", "dgx-h100", "-n", "8", "--tp", "8", "--pp", "1",
                       "--global-batch", "8", "--trace", model), "--trace", "is also the file read by --model")
    assert model.read_text() == before
    real = tmp_path / "real.csv"
    real.write_text("keep\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    one_line_error(run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--csv", "--out", link),
                   "--out", "is a link")
    assert link.is_symlink() and real.read_text() == "keep\n"
    one_line_error(run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--plot",
                       f"{tmp_path}/a.png/"), "--plot", "is a folder")


def test_a_spec_file_too_large_to_be_one_is_refused_before_it_is_read(tmp_path):
    from hardware_specs.errors import MAX_SPEC_BYTES
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(MAX_SPEC_BYTES + 1)
    one_line_error(run("models", "show", big), "is 16 MiB; a spec file is at most 16 MiB")


def test_a_fix_with_an_empty_choice_and_a_batch_cap_beyond_any_engine_are_refused():
    one_line_error(run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64",
                       "--fix", "pp=4,,8"), "--fix", "an empty choice")
    one_line_error(run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8",
                       "--max-batch", str(10**20)), "--max-batch")


def test_validate_measured_checks_the_warmup_before_it_measures():
    # it printed 'measuring' and then the error: two lines where the contract says one
    result = run("validate", "measured", "cpu-local", "--steps", "4", "--warmup", "4")
    one_line_error(result, "--warmup", "must be below --steps (4)")


def test_a_cpu_measurement_of_more_ranks_than_the_cores_can_time_is_refused_before_it_starts():
    # 128 ranks on 2 cores ran past two minutes timing contention
    import os

    from paraplan.measure.runtime import MAX_LOCAL_PROCESSES, MAX_RANKS_PER_CORE, launch
    too_many = MAX_RANKS_PER_CORE * (os.cpu_count() or 1) + 1
    if too_many > MAX_LOCAL_PROCESSES:
        pytest.skip("more cores than the local-process bound covers")
    with pytest.raises(InputError, match=f"{too_many} CPU ranks on"):
        launch(print, too_many, {}, types.SimpleNamespace(kind="cpu"))


def test_a_json_key_given_twice_is_refused_as_yaml_refuses_it(tmp_path):
    # json kept the last value silently: model_type twice became "n_embd: missing", a plan's
    # global_batch twice ran with the second
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text('{"model_type": "llama", "model_type": "gpt2", "num_hidden_layers": 2, "hidden_size": 256, '
                   '"num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000}')
    one_line_error(run("simulate", "-m", cfg.parent, "-c", "dgx-h100", "-n", "8", "--global-batch", "8"),
                   "error: model: ", "key 'model_type' appears twice")


def test_dualpipe_on_an_odd_pipeline_names_pp_and_a_schedule_that_exists():
    result = run("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "24", "--pp", "3", "--global-batch", "8",
                 "--schedule", "dualpipe")
    one_line_error(result, "error: pp: DualPipe pairs rank i with rank pp-1-i and needs an even pp, got 3",
                   "--schedule zb-v")
    assert "dualpipev" not in result.stderr


def test_an_unknown_gpu_generation_and_a_binary_yaml_name_their_field_and_file(tmp_path):
    import yaml
    cluster = yaml.safe_load((REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml").read_text())
    gpu = yaml.safe_load((REPO / "hardware_specs" / "gpus" / "h100-sxm-80gb.yaml").read_text())
    cluster["gpu"] = {**gpu, "name": "martian-gpu", "generation": "martian"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cluster))
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", path, "-n", "8", "--global-batch", "8"),
                   "error: gpu.generation: no efficiency model for generation 'martian' of martian-gpu")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"name: x\n\x00\x01: 3\n")
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", binary, "-n", "8", "--global-batch", "8"),
                   f"error: cluster: {binary} holds a control character")


def test_empty_serving_cells_are_said_to_be_empty_never_nan(tmp_path):
    import json as _json
    _, serving = _files()

    def edit(records):
        head = records[0]
        records[1][5:] = [""] * (len(records[1]) - 5)       # model_path and more empty (a short row is damage:
        #                                                     test_validation_review_fixes_46)
        records[2][head.index("backend")] = ""
    path = _damaged(tmp_path, serving, "empty.csv", edit, rows=2)
    r = run("validate", "serving", path)
    assert r.exit_code == 0 and "nan" not in r.stdout.lower()
    assert "model_path empty" in r.stdout and "backend empty" in r.stdout and "(empty)" in r.stdout
    rows = _json.loads(run("validate", "serving", path, "--json").stdout)
    assert {row["reason"] for row in rows} == {"model_path empty", "backend empty: no serving stack to price it on"}


def test_a_measured_value_that_is_not_a_number_is_said_to_be_so(tmp_path):
    import json as _json
    published, _ = _files()

    def edit(records):
        col = records[0].index("measured_value")
        records[1][col], records[2][col], records[3][col] = "abc", "inf", ""
    path = _damaged(tmp_path, published, "values.csv", edit, rows=3)
    reasons = [row["reason"] for row in _json.loads(run("validate", "published", path, "--json").stdout)]
    assert reasons == ["measured_value 'abc' is not a number", "measured_value is not a finite number",
                       "measured_value empty"]


def test_tensorrt_llm_refuses_an_fp8_kv_cache_on_ampere_too():
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-a100-80gb", "-b", "trtllm",
                       "--kv-cache-dtype", "fp8"),
                   "error: --kv-cache-dtype: trtllm-1 has no FP8 kernels on dgx-a100-80gb's a100-sxm-80gb")
    assert run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-a100-80gb", "-b", "vllm",
               "--kv-cache-dtype", "fp8").exit_code == 0


def test_a_nemotron_h_layer_list_holding_lists_is_one_error_line_not_an_internal_error(tmp_path):
    """layers_block_type entries that are lists raised TypeError (unhashable), printed as
    'error: internal: ... a bug in paraplan' with exit 1 (fuzz of the Hugging Face reader)."""
    import json as _json
    from test_model_specs import NEMOTRON_3_NANO
    data = _json.loads(NEMOTRON_3_NANO.replace("Infinity", "1e308"))
    del data["hybrid_override_pattern"]
    (tmp_path / "config.json").write_text(_json.dumps({**data, "layers_block_type": [["mamba"]] * 52}))
    one_line_error(run("models", "show", tmp_path), "error: hf_config ", "layers_block_type: unknown block \"['mamba']\"")


@pytest.mark.parametrize("field", ["offload_activation_layers", "recompute_num_layers"])
def test_per_chunk_layer_counts_are_bounded_by_the_largest_chunk_of_an_uneven_layout(field):
    # DeepSeek-V3's 61 layers and its MTP module on 8 uneven stages: 8, 8, 8, 8, 8, 8, 7, 7 (with
    # the MTP module), so 8 layers a chunk at most; 40 was accepted and clipped to 8 without a word
    from paraplan import api
    kw = dict(model="deepseek-v3", cluster="h800-node", gpus=256, pp=8, ep=32, global_batch=256, zero_stage=1,
              uneven_layers=True, recompute="full" if field == "recompute_num_layers" else "none")
    assert api.simulate(**kw, **{field: 8})["step_time_s"].iloc[0] > 0
    with pytest.raises(InputError) as err:
        api.simulate(**kw, **{field: 9})
    assert err.value.field == field and "holds at most 8" in str(err.value)


def test_an_empty_run_id_or_mode_cell_is_named_as_empty_not_printed_as_nan(tmp_path):
    # pandas reads an empty cell as NaN, which the tables printed as the source "nan" and the
    # skip reason "mode nan is neither agg nor disagg"
    import pandas as pd
    from paraplan.validation.datasets import BUNDLED_DIR
    from paraplan.validation.published import summarize, validate_rows
    from paraplan.validation.serving import validate_rows as validate_serving_rows
    published = pd.read_csv(BUNDLED_DIR / "published_runs.csv", low_memory=False).head(1)
    published["run_id"] = None
    results = validate_rows(published)
    assert list(results["source"]) == ["(no run_id)"] and "nan" not in summarize(results).to_string()
    serving = pd.read_csv(BUNDLED_DIR / "serving_runs.csv", low_memory=False).head(1)
    serving["mode"] = None
    out = validate_serving_rows(serving)
    assert set(out["reason"]) == {"mode empty (neither agg nor disagg)"}


def _six_gpu_nodes(tmp_path):
    text = (REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml").read_text()
    path = tmp_path / "six.yaml"
    path.write_text(text.replace("name: dgx-h100", "name: six-per-node", 1).replace("gpus_per_node: 8", "gpus_per_node: 6", 1))
    return path


@pytest.mark.parametrize("cluster, gpus, tp, says", [
    (None, 12, 4, "tp 4 does not tile the 6-GPU scale-up domain of six-per-node: with 12 GPUs a tensor-parallel "
                  "group would span two domains (use a tp that divides 6 (1, 2, 3, 6) or a multiple of 6)"),
    (None, 24, 8, "would span domains unevenly"),
    ("gb200-nvl72", 144, 16, "tp 16 does not tile the 72-GPU scale-up domain of gb200-nvl72"),
])
def test_a_tp_whose_groups_cross_a_scale_up_domain_is_refused(tmp_path, cluster, gpus, tp, says):
    # Megatron numbers ranks tp fastest: on 6-GPU nodes the tp group of ranks 4-7 spans two nodes,
    # on NVL72 racks the tp-16 group of ranks 64-79 spans two racks; both were priced at NVLink
    # speed (a group of 8 on 6-GPU nodes as if 6 NICs carried it)
    c = cluster or _six_gpu_nodes(tmp_path)
    one_line_error(run("simulate", "-m", "gpt-22b", "-c", c, "-n", gpus, "--tp", tp, "--global-batch", 144,
                       "--sequence-parallel"), "error: tp: ", says)


@pytest.mark.parametrize("gpus, tp", [(4, 4), (12, 2), (12, 6), (24, 12)])
def test_a_tp_that_tiles_the_domain_or_a_job_inside_one_domain_still_runs(tmp_path, gpus, tp):
    # 2,052 tokens (12 x 171): sequence parallelism splits the sequence over tp, and tp 6 or 12
    # divides no 2,048 (Megatron-LM's reduce-scatter along the sequence asserts it; check_config refuses it)
    r = run("simulate", "-m", "gpt3-20b", "-c", _six_gpu_nodes(tmp_path), "-n", gpus, "--tp", tp,
            "--global-batch", 96, "--sequence-parallel", "--seq-len", 2052)
    assert r.exit_code == 0, r.output


def test_plan_does_not_search_a_tp_that_simulate_refuses_for_the_scale_up_domain():
    from hardware_specs import load_cluster
    from model_specs import load_model
    from planners.plan import plan

    model, cluster = load_model("gpt-22b"), load_cluster("gb200-nvl72")
    wide = plan(model, cluster, 144, 144, max_tp=16, assign_stages=False)
    assert 16 not in set(wide.plans.tp) and wide.pruned["scaleup"] > 0
    inside = plan(model, cluster, 64, 144, max_tp=16, assign_stages=False, fixed={"tp": (16,)})
    assert set(inside.plans.tp) == {16}         # 64 GPUs sit in one rack: nothing crosses
    one_line_error(run("plan", "-m", "gpt-22b", "-c", "gb200-nvl72", "-n", 144, "--tp", 16, "--max-tp", 16,
                       "--global-batch", 144), "error: tp: tp=16 leaves no layout", "divide 72 or be a multiple of it")


def test_an_expert_tp_whose_groups_cross_a_scale_up_domain_is_refused(tmp_path):
    # the experts' layout numbers expert-tensor ranks fastest, as the dense one does tp: etp 4 on
    # 6-GPU nodes puts ranks 4-7 across two nodes; etp 2 there tiles them and runs (with ep 1: ep 2
    # x etp 2 would make 4-rank expert-parallel groups that straddle the same way)
    c = _six_gpu_nodes(tmp_path)
    one_line_error(run("simulate", "-m", "mixtral-8x7b", "-c", c, "-n", 24, "--tp", 2, "--ep", 2, "--etp", 4,
                       "--global-batch", 24), "error: etp: ",
                   "etp 4 does not tile the 6-GPU scale-up domain of six-per-node: with 24 GPUs an expert "
                   "tensor-parallel group would span two domains")
    r = run("simulate", "-m", "mixtral-8x7b", "-c", c, "-n", 12, "--tp", 2, "--ep", 1, "--etp", 2, "--global-batch", 24)
    assert r.exit_code == 0, r.output


def test_palms_tp_12_over_two_pods_runs_on_palms_own_pods():
    # PaLM 540B ran tp 12 on 6,144 chips in two Pods of 3,072 (arXiv 2204.02311 section 4): 12
    # divides 3,072, so tpu-v4-palm takes the layout, and so does the 4,096-chip tpu-v4-pod file,
    # which runs a job larger than a pod as equal slices (2 of 3,072: hardware_specs.placement);
    # a data-parallel group of 8 x 256 = 2,048 chips (pp 3) tiles neither slice and is refused
    args = ("-m", "gpt3-175b", "-n", 6144, "--tp", 12, "--global-batch", 2048, "--recompute", "full", "--zero", 1)
    assert run("simulate", "-c", "tpu-v4-palm", *args).exit_code == 0
    on_pod = run("simulate", "-c", "tpu-v4-pod", *args)
    assert on_pod.exit_code == 0 and "2 ICI slices of 3072" in on_pod.output
    three = ("-m", "gpt3-175b", "-n", 6144, "--tp", 8, "--pp", 3, "--global-batch", 2048, "--recompute", "full")
    one_line_error(run("simulate", "-c", "tpu-v4-pod", *three), "error: dp: ", "3072-GPU scale-up domain of tpu-v4-pod")
