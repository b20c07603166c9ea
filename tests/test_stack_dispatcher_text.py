"""The Megatron-Core stack profiles say which token dispatcher they price.

ep_dispatch_dedup false prices one row per (token, expert) pair: Megatron-Core's ``alltoall``
dispatcher (``cost_models.moe.moe_all_to_all_time_s``), the one the Megatron export writes.
The argument default ``allgather`` gathers every token over the TP x EP group instead, so a
source calling it "one row per token-expert pair" names the wrong dispatcher.
"""
from pathlib import Path

import pytest
import yaml


STACKS = Path(__file__).resolve().parents[1] / "hardware_specs" / "stacks"


@pytest.mark.parametrize("name", ["megatron-core", "megatron-core-0.12"])
def test_dedup_off_names_the_alltoall_dispatcher(name):
    data = yaml.safe_load((STACKS / f"{name}.yaml").read_text())
    entry = next(v for k, v in _walk(data) if k == "ep_dispatch_dedup")
    assert entry["value"] is False
    text = entry["source"]
    assert "'allgather' (one row per token-expert pair)" not in text
    assert "'alltoall' dispatcher, one row per token-expert pair" in text
    assert "--moe-token-dispatcher-type alltoall" in text


def _walk(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)

