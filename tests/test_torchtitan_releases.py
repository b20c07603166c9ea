"""torchtitan's two release profiles: 0.2.0 (``torchtitan.yaml``) and 0.3.0 (``torchtitan-0.3.yaml``).

0.3.0 all-gathers K/V with torch's ``flex_cp_allgather`` before FlexAttention, whose autograd keeps
the gathered K/V, so its CP backward only reduce-scatters dK/dV (``cp_allgather_backward: saved``);
0.2.0's SDPA context_parallel gathers K/V again in backward (``regather``). The torchtitan export
writes a 0.3.0 job (``paraplan.exports.torchtitan.RELEASE``), so it prices plans on 0.3.0's profile.
"""
from __future__ import annotations

import pytest

from hardware_specs.catalog import list_stacks, load_stack, release_match_for, stack_for

MIB = 2**20


def test_a_stated_release_picks_its_profile_and_an_unstated_one_the_single_default():
    assert stack_for("torchtitan", "0.2.0").name == "torchtitan"
    assert stack_for("torchtitan", "0.3.0").name == "torchtitan-0.3"
    # a later release no file lists behaves as the newest profiled release before it
    later = release_match_for("torchtitan", "0.4.0")
    assert later.stack.name == "torchtitan-0.3" and "0.3.0" in later.note
    # an older one takes the oldest profile
    assert release_match_for("torchtitan", "0.1.0").stack.name == "torchtitan"
    # no version: exactly one torchtitan profile is the default, 0.2.0's
    mine = [load_stack(n) for n in list_stacks() if load_stack(n).framework == "torchtitan"]
    assert [s.name for s in mine if s.default_when_version_unstated] == ["torchtitan"]
    assert stack_for("torchtitan").name == "torchtitan"
    assert stack_for("torchtitan", None).name == "torchtitan"


def test_the_two_releases_differ_where_their_code_does():
    old, new = load_stack("torchtitan").training, load_stack("torchtitan-0.3").training
    assert (old.cp_allgather_backward, new.cp_allgather_backward) == ("regather", "saved")
    assert "flex_cp_allgather_backward" in load_stack("torchtitan-0.3").citations["training.cp_allgather_backward"]
    # FlexAttention's Triton kernel (FLASH only when asked) against SDPA's cuDNN-first choice
    assert (old.attention_kernel, new.attention_kernel) == ("auto", "serial")
    assert new.context_parallel_kind == "allgather" and new.lacks == ("zero1",)


def test_allgather_cp_on_the_0_3_profile_keeps_the_gathered_kv_and_exposes_two_of_three_collectives():
    """Llama 3 8B on 8 H100, tp 2, cp 4, all-gather CP, no recomputation, 2 micro-batches of 1.
    Local K/V a layer: 2,048 tokens x 4 KV heads (8 / tp) x 128 x (K and V) x 2 B = 4 MiB; gathered
    over cp 4: 16 MiB. 0.3.0 keeps the gathered 16 MiB of each of the 32 layers to its backward
    (one micro-batch in flight at pp 1) and needs no regather buffer, 0.2.0 keeps none but its
    backward gathers again into a transient that, at pp 1, hides under the logits the loss frees
    before any layer's backward: 32 x 16 MiB more activations on 0.3.0.
    Per layer and micro-batch 0.2.0 runs forward all-gather + backward all-gather + reduce-scatter
    (three ring collectives of equal bytes over one group), 0.3.0 drops the backward all-gather:
    2 / 3 of the exposed CP communication."""
    from paraplan import api
    run = lambda stack: api.simulate("llama3-8b", "dgx-h100", gpus=8, tp=2, cp=4, cp_kind="allgather",  # noqa: E731
                                     recompute="none", global_batch=2, micro_batch=1, stack=stack).iloc[0]
    new, old = run("torchtitan-0.3"), run("torchtitan")
    assert (new["activations_gib"] - old["activations_gib"]) * 2**30 == pytest.approx(32 * 16 * MIB)
    assert new["recompute_buffers_gib"] == old["recompute_buffers_gib"] == 0.0
    assert new["cp_comm_exposed_s"] == pytest.approx(2 / 3 * old["cp_comm_exposed_s"])


def test_the_torchtitan_export_prices_on_the_profile_of_the_release_it_writes():
    from paraplan import exports
    from paraplan.exports import torchtitan
    name = exports.default_stack("torchtitan")
    assert name == "torchtitan-0.3"
    release = torchtitan.RELEASE.split()[-1]                     # "torchtitan 0.3.0"
    assert release in load_stack(name).versions
    assert stack_for("torchtitan", release).name == name
