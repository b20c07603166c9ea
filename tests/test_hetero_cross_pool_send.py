"""A pipeline send between pools whose stages have different tensor-parallel degrees: each side's
ranks move their own slice through their own NIC, and the slower side sets the time.

The case (a review's): Llama-3-70B, micro-batch 1 of 8192 tokens, sequence parallel: the stage
boundary's activation is 8192 x 8192 x 2 B = 134.2 MB. From an A100 stage at tp 8 (dgx-a100-40gb,
200 Gb/s = 25 GB/s per GPU) to an H100 stage at tp 4 (dgx-h100, 50 GB/s per GPU), both fabrics
at the efficiency models' scale-out fraction 0.85 (p2p at the full fraction, 5 us): each of the
8 A100 ranks sends 16.8 MB at 21.25 GB/s (0.79 ms), each of the 4 H100 ranks receives 33.6 MB at
42.5 GB/s (0.79 ms): 0.79 ms. It was priced 1.58 ms: the H100 side's 33.6 MB at the A100's NIC.
"""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_pooled_cluster
from model_specs.catalog import load_model
from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous

MODEL = load_model("llama3-70b")
TENSOR_BYTES = 8192 * 8192 * 2
FRACTION, LATENCY_S = 0.85, 5e-6
PLAN = HeteroPlan(groups=(ReplicaGroup((StagePlacement("a100", 8, 34), StagePlacement("h100", 4, 24),
                                        StagePlacement("h100", 4, 22)), replicas=16),),
                  micro_batch=1, global_batch=512, zero_stage=1, sequence_parallel=True)


def _cluster(tmp_path, link=""):
    path = tmp_path / "mix40.yaml"
    path.write_text("name: mix40\npools:\n  - {name: h100, cluster: dgx-h100, gpus: 128}\n"
                    "  - {name: a100, cluster: dgx-a100-40gb, gpus: 256}\n" + link)
    return load_pooled_cluster(str(path))


def test_each_side_moves_its_own_slice_at_its_own_nic(tmp_path):
    a100, h100, _ = simulate_heterogeneous(MODEL, _cluster(tmp_path), PLAN).stages
    a100_side = TENSOR_BYTES / 8 / (25e9 * FRACTION)
    h100_side = TENSOR_BYTES / 4 / (50e9 * FRACTION)
    assert a100_side == pytest.approx(h100_side, rel=1e-12) == pytest.approx(0.79e-3, abs=0.01e-3)
    # the A100 stage sends only forward (and receives the gradient back): its one boundary
    assert a100.pp_comm_s == pytest.approx(max(a100_side, h100_side) + LATENCY_S, rel=1e-9)


def test_a_link_slower_than_a_nic_still_bounds_the_side_with_more_bytes(tmp_path):
    link = "links:\n  - {between: [a100, h100], kind: ethernet, bw_gbit_per_s: 100, latency_us: 5}\n"
    a100, _, _ = simulate_heterogeneous(MODEL, _cluster(tmp_path, link), PLAN).stages
    # 12.5 GB/s x 0.85 on either side: the H100 ranks' 33.6 MB take 3.16 ms, the A100 ranks' 16.8 MB 1.58
    link_bw = 12.5e9 * FRACTION
    assert a100.pp_comm_s == pytest.approx(TENSOR_BYTES / 4 / link_bw + LATENCY_S, rel=1e-9)
