"""An output never replaces a file the command reads, however the input names it: a folder
(a Hugging Face checkpoint, an EAGLE-3 head) whose config.json is read, a GPU file a cluster
file names, a sweep spec inside the results folder. Each used to exit 0 and overwrite it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_results import one_line_error, run

REPO = Path(__file__).resolve().parents[1]
DRAFT = REPO / "examples/drafts/eagle3-llama3.1-8b"
LLAMA_8B_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
               "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
               "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
               "rope_theta": 500000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _kept(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before


def test_out_naming_the_config_json_of_a_draft_folder_is_refused(tmp_path):
    draft = tmp_path / "dr"
    shutil.copytree(DRAFT, draft)
    config = draft / "config.json"
    before = config.read_bytes()
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--speculative-tokens", "3",
                       "--draft-acceptance", "0.7", "--draft-model", draft, "--json", "--out", config),
                   "--out", f"{config} is also the file read by --draft-model", "(write the output elsewhere)")
    _kept(config, before)


def test_outputs_naming_the_config_json_of_a_model_folder_are_refused(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text(json.dumps(LLAMA_8B_HF))
    before = config.read_bytes()
    one_line_error(run("serve", "simulate", "-m", folder, "-s", "dgx-h100", "--out", config),
                   "--out", "is also the file read by --model")
    one_line_error(run("serve", "plan", "-m", folder, "-s", "dgx-h100", "-n", "8", "--csv", "--out", config),
                   "--out", "is also the file read by --model")
    one_line_error(run("simulate", "-m", folder, "-c", "dgx-h100", "-n", "8", "--tp", "8", "--global-batch", "8",
                       "--trace", config), "--trace", "is also the file read by --model")
    _kept(config, before)


def _cluster_naming_gpu_file(tmp_path: Path) -> tuple[Path, Path]:
    gpu = tmp_path / "g.yaml"
    gpu.write_text((REPO / "hardware_specs/gpus/h100-sxm-80gb.yaml").read_text())
    text = (REPO / "hardware_specs/clusters/dgx-h100.yaml").read_text()
    lines = ["gpu: g.yaml" if ln.startswith("gpu:") else ln for ln in text.splitlines()]
    cluster = tmp_path / "c.yaml"
    cluster.write_text("\n".join(lines) + "\n")
    return cluster, gpu


def test_out_naming_the_gpu_file_a_cluster_file_names_is_refused(tmp_path):
    cluster, gpu = _cluster_naming_gpu_file(tmp_path)
    before = gpu.read_bytes()
    one_line_error(run("simulate", "-m", "llama3.1-8b", "-c", cluster, "-n", "8", "--tp", "8", "--global-batch", "8",
                       "--trace", gpu), "--trace", "is also the file read by --cluster")
    one_line_error(run("serve", "plan", "-m", "llama3.1-8b", "-s", cluster, "-n", "8", "--csv", "--out", gpu),
                   "--out", "is also the file read by --system")
    _kept(gpu, before)


def test_files_read_by_a_pooled_cluster_are_each_pool_file_and_its_gpu(tmp_path):
    from hardware_specs.catalog import files_read
    cluster, gpu = _cluster_naming_gpu_file(tmp_path)
    pooled = tmp_path / "p.yaml"
    pooled.write_text("name: mixed\npools:\n- {name: a, gpus: 8, cluster: c.yaml}\n"
                      "- {name: b, gpus: 8, cluster: dgx-a100-80gb}\n")
    found = {p.resolve() for p in files_read("clusters", str(pooled))}
    assert {pooled.resolve(), cluster.resolve(), gpu.resolve()} <= found
    assert (REPO / "hardware_specs/clusters/dgx-a100-80gb.yaml").resolve() in found
    assert files_read("clusters", str(tmp_path / "missing.yaml")) == frozenset()


def test_a_sweep_spec_inside_the_results_folder_is_not_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spec = out / "results.csv"
    spec.write_text("search: simulate\nmodels: [gpt3-1.3b]\nclusters: [dgx-h100]\ngpus: [8]\nglobal_batch: [8]\n"
                    "config: {tp: [8]}\n")
    before = spec.read_bytes()
    one_line_error(run("sweep", spec, "--out", out, "--local"), "--out", "is also the file read by SPEC.yaml")
    _kept(spec, before)
