"""The ``simulate`` table's config lines name every setting the user gave that changes the step
or the memory, as ``--json``'s ``config`` holds it and ``plan``'s label names it (``full2``,
``hsdp8``, ``off1``).

Found by session 71's review: ``--zero 3 --zero-shard-group 8`` (HSDP) printed ``zero=3`` only,
over a step 1.8% slower and 15.5 GiB a GPU larger than ``--zero-shard-group 0``'s identical
header; ``--recompute full --recompute-num-layers 2`` printed ``recompute=full`` as if every layer
were recomputed; offloaded layers, the edge stages' layer counts, a chunked loss and 2-byte Adam
moments were nowhere in the table.
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from paraplan.cli import main

BASE = ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "64", "--global-batch", "64"]


def run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.stdout


def header(text: str) -> str:
    """The config lines, joined into one (the table wraps them at 120 columns)."""
    lines = text.split("\n\nstep time")[0].splitlines()
    return " ".join(" ".join(ln.split()) for ln in lines if ln.startswith(("config", "         ")))


@pytest.mark.parametrize("extra, shown, field, value", [
    (["--zero", "3", "--zero-shard-group", "8"], "zero_shard_group=8", "zero_shard_group", 8),
    (["--pp", "4", "--recompute", "full", "--recompute-num-layers", "2"], "recompute_num_layers=2",
     "recompute_num_layers", 2),
    (["--pp", "4", "--recompute", "full", "--recompute-num-layers", "2", "--recompute-method", "uniform"],
     "recompute_method=uniform", "recompute_method", "uniform"),
    (["--pp", "4", "--recompute", "full", "--recompute-num-layers", "4", "--recompute-layers-decrement", "1"],
     "recompute_layers_decrement=1", "recompute_layers_decrement", 1),
    (["--recompute-modules", "layernorm,mlp_act"], "recompute_modules=layernorm,mlp_act", "recompute_modules",
     ["layernorm", "mlp_act"]),
    (["--offload-activation-layers", "3"], "offload_activation_layers=3", "offload_activation_layers", 3),
    (["--offload-optimizer-fraction", "0.5"], "offload_optimizer_fraction=0.5", "offload_optimizer_fraction", 0.5),
    (["--pp", "4", "--first-stage-layers", "5"], "first_stage_layers=5", "first_stage_layers", 5),
    (["--pp", "4", "--last-stage-layers", "5"], "last_stage_layers=5", "last_stage_layers", 5),
    (["-n", "40", "--pp", "5", "--uneven-layers"], "uneven_layers=on", "uneven_layers", True),
    (["--pp", "2", "--pipeline-layout", "Et*15|t*17L"], "pipeline_layout=Et*15|t*17L", "pipeline_layout",
     "Et*15|t*17L"),
    (["--loss-chunk-tokens", "1024"], "loss_chunk_tokens=1024", "loss_chunk_tokens", 1024),
    (["--optimizer-moment-bytes", "2"], "optimizer_moment_bytes=2", "optimizer_moment_bytes", 2.0),
])
def test_a_setting_given_is_named_in_the_header_as_json_holds_it(extra, shown, field, value):
    text = run(*BASE, *extra)
    assert shown in header(text).split(), header(text)
    assert json.loads(run(*BASE, *extra, "--json"))["config"][field] == value


def test_two_headers_differ_where_their_steps_and_memory_do():
    # HSDP over groups of 8 against ZeRO-3 over all 64 ranks: the step and memory move, so must the header
    plain = run(*BASE, "--zero", "3")
    hsdp = run(*BASE, "--zero", "3", "--zero-shard-group", "8")
    steps = [json.loads(run(*BASE, "--zero", "3", *g, "--json")) for g in ([], ["--zero-shard-group", "8"])]
    assert steps[0]["step_time_s"] != steps[1]["step_time_s"]
    assert steps[1]["memory_bytes"] > steps[0]["memory_bytes"] + 10 * 2**30
    assert header(plain) != header(hsdp)


def test_a_run_with_the_defaults_names_none_of_them():
    shown = header(run(*BASE))
    for name in ("zero_shard_group=", "recompute_num_layers=", "offload_activation_layers=", "uneven_layers=",
                 "loss_chunk_tokens=", "optimizer_moment_bytes=", "recompute_modules="):
        assert name not in shown, name
    # one micro-batch is one, not "1 micro-batches"
    assert "(1 micro-batch, 524,288 tokens/step)" in shown
