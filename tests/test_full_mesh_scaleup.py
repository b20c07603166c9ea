"""A full-mesh scale-up tier (no switch: MI300X xGMI, a GH200 node's NVLink) gives a group of k
GPUs of one node only the k - 1 peers' links, not the GPU's aggregate; switched NVLink unchanged."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cost_models import topology as T
from cost_models import inference_comm
from hardware_specs.catalog import load_cluster, load_efficiency
from hardware_specs.errors import InputError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
S = 64 * MIB


def _ar(cluster, n, stride=1, size=S, algorithm="auto"):
    eff = load_efficiency(cluster.gpu.generation)
    return float(T.group_collective_time_s("all_reduce", size, n, stride, cluster, eff, algorithm))


def _switched(cluster):
    return dataclasses.replace(cluster, scaleup=dataclasses.replace(cluster.scaleup, mesh_peer_bw_bytes_per_s=None))


def test_mi300x_tp2_all_reduce_runs_on_one_xgmi_link():
    """MI300X (CDNA3, no NCCL protocols: one plain ring line), TP 2 all-reduce of 64 MiB:
    2 (n-1)/n x S / (64 GB/s x 0.8 scaleup_fraction) + 2 (n-1) x 3 us = 1.31072 + 0.006 ms.
    Before: the seven links' 448 GB/s, 0.193 ms, under the one link's 1.05 ms floor."""
    c = load_cluster("mi300x-node")
    assert _ar(c, 2) == pytest.approx(S / (64e9 * 0.8) + 2 * 3e-6, rel=1e-9)
    assert _ar(c, 2) > S / 64e9                     # never under the physical floor of one link
    # TP 4: three links, 2 x 3/4 x S / (192 GB/s x 0.8) + 6 x 3 us
    assert _ar(c, 4) == pytest.approx(1.5 * S / (192e9 * 0.8) + 6 * 3e-6, rel=1e-9)
    # the whole node uses all seven links: as before (and as a switch would)
    assert _ar(c, 8) == pytest.approx(_ar(_switched(c), 8), rel=1e-12)
    assert _ar(c, 8) == pytest.approx(1.75 * S / (448e9 * 0.8) + 14 * 3e-6, rel=1e-9)


def test_alps_tp2_all_reduce_runs_on_one_pairs_150_gb_per_s():
    """Alps GH200 (Hopper, NCCL: Simple at 64 MiB): S / (150 GB/s x 0.8) + 2 x 3 us + 8.4 us base."""
    c = load_cluster("alps-gh200")
    assert _ar(c, 2) == pytest.approx(S / (150e9 * 0.8) + 2 * 3e-6 + 8.4e-6, rel=1e-9)
    assert _ar(c, 4) == pytest.approx(_ar(_switched(c), 4), rel=1e-12)   # 3 x 150 = the 450 aggregate


def test_switched_nvlink_gives_every_group_the_gpus_whole_link():
    """DGX H100 (NVSwitch, no mesh_peer_bw): a group of 2, 4 or 8 reaches the full 450 GB/s x 0.8
    whatever its size (a mesh would give TP 2 one peer's links): Simple at 64 MiB,
    2 (n-1)/n x S / 360 GB/s + 2 (n-1) x 3 us + 8.4 us base; TP 2: 200.8 us."""
    for name in ("dgx-h100", "dgx-b200", "gb200-nvl72"):
        assert load_cluster(name).scaleup.mesh_peer_bw_bytes_per_s is None, name
    c = load_cluster("dgx-h100")
    for n in (2, 4, 8):
        assert _ar(c, n) == pytest.approx(2 * (n - 1) / n * S / (450e9 * 0.8) + 2 * (n - 1) * 3e-6 + 8.4e-6,
                                          rel=1e-9), n


def test_groups_across_nodes_use_their_members_peers_in_the_node():
    """A data-parallel group with stride 4 on MI300X nodes has 2 members per node: the in-node
    part of its collectives runs on one link, and it is never faster than the switched price."""
    c = load_cluster("mi300x-node")
    eff = load_efficiency(c.gpu.generation)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        mesh = float(T.group_collective_time_s(kind, S, 32, 4, c, eff))
        switch = float(T.group_collective_time_s(kind, S, 32, 4, _switched(c), eff))
        assert mesh >= switch


def test_p2p_inside_a_mesh_node_is_one_link():
    c = load_cluster("mi300x-node")
    eff = load_efficiency(c.gpu.generation)
    t = float(T.p2p_stage_time_s(S, 1, 2, c, eff))
    assert t == pytest.approx(S / (64e9 * 0.8 * eff.collective_fraction("p2p")) + 3e-6, rel=1e-9)


def test_serving_all_reduce_on_a_mesh_uses_the_groups_links():
    """Serving's one-shot all-reduce reads each of the n - 1 peers over its own link: tp 2 on
    MI300X moves S over one 64 GB/s link (x link_bw_fraction), the same on 8 GPUs over seven."""
    from hardware_specs.catalog import load_serving_efficiency
    c = load_cluster("mi300x-node")
    eff = load_serving_efficiency(c.gpu.generation)
    f = eff.link_bw_fraction
    t2 = float(inference_comm.allreduce_time_s(S, 2, c, eff, oneshot=True))
    assert t2 == pytest.approx(3e-6 + S / (64e9 * f), rel=1e-9)
    t8 = float(inference_comm.allreduce_time_s(S, 8, c, eff, oneshot=True))
    assert t8 == pytest.approx(3e-6 + 7 * S / (448e9 * f), rel=1e-9)


@pytest.mark.parametrize("cluster", ["mi300x-node", "alps-gh200"])
def test_invariants_on_a_mesh(cluster):
    """Bigger message never faster; more bandwidth (peer links) never slower; within a node a bigger group never moves the same bytes per member
    slower per peer link (a mesh's bigger group has more links, so its all-reduce of the same
    buffer may be faster: that is the hardware, MI300X TP 2 against TP 8)."""
    c = load_cluster(cluster)
    sizes = [2**k for k in range(10, 31, 2)]
    for n, stride in ((2, 1), (4, 1), (8, 1), (16, 1), (64, 2)):
        times = [_ar(c, n, stride, s) for s in sizes]
        assert all(a <= b for a, b in zip(times, times[1:]))
        faster = dataclasses.replace(c, scaleup=dataclasses.replace(
            c.scaleup, mesh_peer_bw_bytes_per_s=c.scaleup.mesh_peer_bw_bytes_per_s * 1.5,
            bw_bytes_per_s=c.scaleup.bw_bytes_per_s * 1.5))
        assert _ar(faster, n, stride) <= _ar(c, n, stride)
    # across nodes (one member per node, the NIC bound), a bigger group is never faster
    node = c.gpus_per_node
    across = [_ar(c, n, node) for n in (2, 4, 8, 16, 64)]
    assert all(a <= b for a, b in zip(across, across[1:]))


def test_which_algorithm_wins_for_a_group_with_two_members_a_mesh_node():
    """MI300X (no NCCL: plain lines, no base), 16 ranks at stride 4: 2 members on each of 8 nodes,
    one 64 GB/s xGMI link between them (x 0.8 = 51.2 GB/s) under their two NICs (2 x 50 x 0.85).
    Ring: 2 x 15/16 x S / 51.2 GB/s + 2 (8 x 3 + 7 x 5) us; tree: 2 S / 51.2 GB/s + 2 (1 x 3 +
    log2(8) x 5) us. The tree's 82 us less latency beats the ring's 1/8 S fewer bytes up to
    S = 33.6 MB: at 4 MiB the tree (199.8 us), at 64 MiB the ring (2.576 ms)."""
    c = load_cluster("mi300x-node")
    bw = 64e9 * 0.8
    ring = lambda size: 2 * 15 / 16 * size / bw + 2 * (8 * 3e-6 + 7 * 5e-6)
    tree = lambda size: 2 * size / bw + 2 * (3e-6 + 3 * 5e-6)
    small, large = 4 * MIB, 64 * MIB
    assert _ar(c, 16, 4, small) == pytest.approx(tree(small), rel=1e-9) and tree(small) < ring(small)
    assert _ar(c, 16, 4, small, algorithm="ring") == pytest.approx(ring(small), rel=1e-9)
    assert _ar(c, 16, 4, large) == pytest.approx(ring(large), rel=1e-9) and ring(large) < tree(large)
    assert _ar(c, 16, 4, large, algorithm="tree") == pytest.approx(tree(large), rel=1e-9)


def test_mesh_peer_above_the_tier_is_refused_in_one_line(tmp_path):
    path = tmp_path / "mesh.yaml"
    path.write_text("name: mesh\ngpu: mi300x\ngpus_per_node: 8\n"
                    "scaleup: {kind: infinity-fabric, bw_gb_per_s: 448, mesh_peer_bw_gb_per_s: 500}\n"
                    "scaleout: {kind: infiniband, bw_gbit_per_s: 400}\n")
    with pytest.raises(InputError) as err:
        load_cluster(str(path))
    assert err.value.field == "cluster mesh.scaleup.mesh_peer_bw_gb_per_s"
    # NetworkTier's own rule, named as the file spells it and in the file's GB/s
    assert err.value.message == "500 GB/s is above the tier's 448 GB/s per GPU"
    run = subprocess.run([sys.executable, "-m", "paraplan.cli", "hardware", "show", str(path)], capture_output=True,
                         text=True, cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("error: cluster mesh.scaleup.mesh_peer_bw_gb_per_s: ") and run.stderr.count("\n") == 1


def test_a_switched_groups_bandwidth_keeps_the_members_shape_and_type():
    """On a switch every group reaches the GPU's own link rate (450 GB/s one direction on an
    H100's NVLink 4, 900 GB/s both ways): a float64 scalar for a scalar count (a numpy scalar,
    as callers multiply and compare it), a new writable float array of the count's shape for an
    array or a list."""
    scaleup = load_cluster("dgx-h100").scaleup
    assert scaleup.mesh_peer_bw_bytes_per_s is None
    for members in (8, np.int64(4), 2.0, np.array(4)):
        bw = scaleup.group_bw_bytes_per_s(members)
        assert type(bw) is np.float64 and bw == 450e9
    for members in (np.array([2, 4, 8]), [2, 4], np.ones((2, 3)), np.array([], dtype=int)):
        bw = scaleup.group_bw_bytes_per_s(members)
        assert type(bw) is np.ndarray and bw.dtype == np.float64 and bw.shape == np.shape(members)
        assert bw.flags.writeable and np.all(bw == 450e9)
