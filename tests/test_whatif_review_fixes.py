"""Fixes from a review of the Python what-if API (``paraplan.api``, ``paraplan.plots``): rows
that said a configuration fits where ``paraplan simulate`` said NO (host memory), GB200 NVL72
jobs in Slurm segments checked against the whole rack's host memory, scaling plots that joined
several models' rows into one line, and GPU what-ifs (HBM capacity, bandwidth, peak FLOPs)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from paraplan import api
from paraplan.cli import main

GIB = 2**30

# Llama 3.1 405B on 512 H100 at tp 4 with every layer's activations offloaded to the host
OFFLOAD_405B = dict(gpus=512, tp=4, pp=1, micro_batch=8, global_batch_tokens=16 * 2**20, zero_stage=3,
                    sequence_parallel=True, offload_activation_layers=126)


def test_api_rows_say_no_where_the_host_memory_offload_needs_is_more_than_the_node_holds():
    """The row said ``fits`` True where ``paraplan simulate`` says NO: its ``fits`` never read the
    host check. Hand bound: Megatron keeps, per layer and micro-batch, at least the MLP's input and
    its three bf16 intermediates (SwiGLU gate, up, fc2's input: Korthikanti et al. 2022 section
    4.1's counting), 2 x s x b x (h + 3 ffn) / tp bytes with sequence parallelism: 8192 x 8 x
    (16384 + 3 x 53248) x 2 / 4 = 5.4 GiB; 126 layers: >= 677 GiB per GPU, >= 5,414 GiB for a DGX
    node's 8 GPUs, more than its 2 TB (2,048 GiB, DGX H100 datasheet)."""
    row = api.simulate("llama3.1-405b", "dgx-h100", **OFFLOAD_405B).iloc[0]
    bound_gib = 126 * 2 * 8192 * 8 * (16384 + 3 * 53248) / 4 / GIB
    assert bound_gib == pytest.approx(677.25, abs=0.01)
    assert row.host_memory_gib >= bound_gib and 8 * row.host_memory_gib > 2048
    assert row.memory_gib < 0.95 * 80          # HBM alone fits: only the host says no
    assert bool(row.fits) is False
    assert list(api.ROW_COLUMNS) == list(api.simulate("llama3.1-405b", "dgx-h100", **OFFLOAD_405B).columns)
    # the CLI's verdict and host memory per GPU
    out = CliRunner().invoke(main, ["simulate", "-m", "llama3.1-405b", "-c", "dgx-h100", "-n", "512", "--tp", "4",
                                    "--pp", "1", "--micro-batch", "8", "--global-batch-tokens", str(16 * 2**20),
                                    "--zero", "3", "--sequence-parallel", "--offload-activation-layers", "126",
                                    "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["fits"] is False
    assert data["extras"]["host_memory_bytes"] / GIB == pytest.approx(row.host_memory_gib, rel=1e-12)
    # a sweep row (the same function) says so too
    swept = api.sweep(dict(model="llama3.1-405b", cluster="dgx-h100", **OFFLOAD_405B),
                      "micro_batch", [8])
    assert bool(swept.fits.iloc[0]) is False and swept.host_memory_gib.iloc[0] == row.host_memory_gib
