"""serve plan's disaggregated bound on the synchronised prefill wait (``_synchronised_most``) is a
search on the very wait ``combine`` charges (``synchronised_wait_s``), not a hand inversion of it:
the largest decode batch whose wait stays within the TTFT slack, equal to a brute force over the
batches, and still equal to one when the wait model changes."""
import numpy as np
import pytest

import planners.serving.search as search
from paraplan.serving_api import serving_context
from planners.serving.search import _DecodeTable, _decode_table, _synchronised_most
from planners.serving.space import with_batches, worker_layouts
from simulator.serving.aggregated import synchronised_wait_s
from simulator.serving.disaggregated import decode_side


def _table(steps_s: list[np.ndarray], adp: list[float]) -> _DecodeTable:
    """A decode table of one layout per entry of ``steps_s`` (its step at batches 1, 2, ...)."""
    hi = np.array([s.size for s in steps_s], dtype=float)
    start = np.concatenate([[0], np.cumsum(hi)[:-1]]).astype(np.int64)
    least = np.concatenate([np.minimum.accumulate(s[::-1])[::-1] for s in steps_s])
    n = int(hi.sum())
    return _DecodeTable({"adp": np.asarray(adp, dtype=float)}, hi, start, np.arange(hi.size), {}, np.zeros(n),
                        np.zeros(n), least)


def _brute_force(table: _DecodeTable, pos, d_workers, servers, service_s, slack_s, sync, wait=synchronised_wait_s):
    """The largest batch, tried one by one from 1 to the layout's most, whose synchronised wait at
    the least step from that batch up is within the slack (0 if none)."""
    most = []
    for p, nd, c, s, sl in zip(pos, d_workers, servers, service_s, slack_s):
        b = np.arange(1.0, table.hi[p] + 1.0)
        least = table.step_least[table.start[p]:table.start[p] + int(table.hi[p])]
        ok = wait(b * table.lay["adp"][p] * nd / c, s, least, sync) <= sl
        most.append(b[ok].max() if ok.any() else 0.0)
    return np.array(most)


def test_the_bound_by_hand():
    # one client per prefill server per request in flight (adp 1, 1 decode worker, 1 server),
    # service 0.1 s, step 20 ms, arrival_sync 1: wait = sqrt((b - 1) x 0.05 x 0.01); within 51 ms
    # (b - 1) x 5e-4 <= 0.051^2 = 2.601e-3, b - 1 <= 5.2: batch 6 (batch 7 waits sqrt(3e-3) = 54.8 ms)
    table = _table([np.full(40, 0.02)], [1.0])
    most = _synchronised_most(table, np.array([0]), np.array([1.0]), np.array([1.0]), np.array([0.1]),
                              np.array([0.051]), 1.0)
    assert most.tolist() == [6.0]
    # no slack at all: only batch 1 (no client ahead of it); 4 decode workers on 2 servers: 2 clients
    # per server a batch, (2b - 1) x 5e-4 <= 2.601e-3 -> b <= 3.1: batch 3
    most = _synchronised_most(table, np.array([0, 0]), np.array([1.0, 4.0]), np.array([1.0, 2.0]),
                              np.array([0.1, 0.1]), np.array([0.0, 0.051]), 1.0)
    assert most.tolist() == [1.0, 3.0]


def test_the_bound_is_a_brute_force_over_batches_on_a_real_decode_table():
    # Llama-3.1-8B decode layouts on H100 at every batch their KV cache holds (up to 1024), with
    # worker counts, prefill services and slacks from none to loose
    ctx = serving_context("llama3.1-8b", "dgx-h100", "vllm")
    lay = worker_layouts(ctx.model, 7, ctx.cluster.gpus_per_node, allow_pp=False, behaviour=ctx.behaviour,
                         expert_format=ctx.expert_format)
    dcols = with_batches(lay, 1024)
    dcols["layout_index"] = np.cumsum(dcols["batch"] == 1.0) - 1.0
    dec = decode_side(ctx, dcols["tp"], dcols["adp"], dcols["pp"], dcols["moe_tp"], dcols["moe_ep"], dcols["batch"],
                      1024, 1024)
    table = _decode_table(ctx, dcols, dec, 1024, 1024, 1024, 0.03)
    assert table.hi.size >= 2
    rng = np.random.default_rng(0)
    n = 200
    pos = rng.integers(0, table.hi.size, n)
    d_workers = rng.integers(1, 8, n).astype(float)
    servers = rng.integers(1, 8, n).astype(float)
    service = rng.uniform(0.02, 0.5, n)
    slack = np.concatenate([[0.0], rng.uniform(0.0, 1.0, n - 1)])
    sync = ctx.efficiency.arrival_sync(ctx.behaviour.mixed_batches, ctx.behaviour.chunked_prefill)
    most = _synchronised_most(table, pos, d_workers, servers, service, slack, sync)
    assert np.array_equal(most, _brute_force(table, pos, d_workers, servers, service, slack, sync))
    # the cases cover a bound at no batch, within a layout's batches and at its most
    assert (most == 0.0).any() and ((0.0 < most) & (most < table.hi[pos])).any() and (most == table.hi[pos]).any()


def test_the_bound_follows_a_changed_wait_model(monkeypatch):
    # a wave wait alone, no geometric mean with the step: the bound searches whatever the
    # simulator charges (the hand inversion would have stayed on the old model)
    def wave_only(clients, service_s, step_s, arrival_sync):
        return arrival_sync * np.maximum(clients - 1.0, 0.0) * service_s / 2.0 + 0.0 * step_s

    monkeypatch.setattr(search, "synchronised_wait_s", wave_only)
    table = _table([np.linspace(0.03, 0.01, 64), np.full(16, 0.02)], [1.0, 4.0])
    pos, nd, c = np.array([0, 1, 0]), np.array([1.0, 2.0, 3.0]), np.array([1.0, 4.0, 2.0])
    service, slack = np.array([0.1, 0.1, 0.05]), np.array([0.52, 0.52, 0.21])
    most = _synchronised_most(table, pos, nd, c, service, slack, 1.0)
    # by hand: (b - 1) x 0.05 <= 0.52 -> 11; (2b - 1) x 0.05 <= 0.52 -> 5; (1.5b - 1) x 0.025 <= 0.21 -> 6
    assert most.tolist() == [11.0, 5.0, 6.0]
    assert np.array_equal(most, _brute_force(table, pos, nd, c, service, slack, 1.0, wait=wave_only))


@pytest.mark.parametrize("sync", [0.5, 2.0])
def test_the_bound_is_a_brute_force_on_steps_that_dip(sync):
    # steps that fall at a kernel switch (batch 9) and rise again: the least step from each batch up
    rng = np.random.default_rng(1)
    steps = [np.concatenate([np.linspace(0.01, 0.03, 8), np.linspace(0.012, 0.05, 100)]),
             rng.uniform(0.005, 0.05, 300)]
    table = _table(steps, [1.0, 8.0])
    n = 100
    pos = rng.integers(0, 2, n)
    nd, c = rng.integers(1, 5, n).astype(float), rng.integers(1, 9, n).astype(float)
    service, slack = rng.uniform(0.01, 0.3, n), rng.uniform(0.0, 0.3, n)
    most = _synchronised_most(table, pos, nd, c, service, slack, sync)
    assert np.array_equal(most, _brute_force(table, pos, nd, c, service, slack, sync))
