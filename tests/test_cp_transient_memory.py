"""Context parallelism's exchange buffers count in the computing layer's memory, every flavour.

Hand counts for Llama-3-8B (32 query heads, 8 K/V heads of 128, bf16), tp 1, micro-batch 1:
at seq 32k and cp 8 a rank holds 4,096 tokens, one ring step's K/V block is 4,096 x 8 x (128 +
128) x 2 B = 16 MiB;
* ring: K/V and dK/dV double-buffered in backward, 4 blocks = 64 MiB;
* Ulysses: backward's five all-to-all outputs, 4,096 x (32 x (2 x 128 + 128) + 8 x 256) x 2 B
  = 112 MiB;
* all-gather (regathering): the gathered K/V and the gathered-size dK/dV, 2 x 8 x 16 = 256 MiB;
* hybrid at cp 16 on an 8-GPU node: Ulysses over u = 8 (2,048 tokens: 56 MiB) plus a ring of 2
  (8 MiB blocks, 32 MiB) = 88 MiB; a pure ring at cp 16: 32 MiB.
"""
import pytest

from cost_models import context_parallel as cpm
from model_specs import load_model
from paraplan import api

MIB = 2**20


@pytest.mark.parametrize("kind,cp,tokens,mib", [("ring", 8, 4096, 64), ("ulysses", 8, 4096, 112),
                                                ("allgather", 8, 4096, 256), ("hybrid", 16, 2048, 88),
                                                ("ring", 16, 2048, 32), ("ring", 1, 32768, 0)])
def test_transient_bytes_by_hand(kind, cp, tokens, mib):
    m = load_model("llama3-8b")
    assert cpm.cp_transient_bytes(m, kind, tokens, cp, 1, 8) == pytest.approx(mib * MIB)


def test_saved_gather_keeps_only_the_dkdv_transient():
    m = load_model("llama3-8b")
    assert cpm.cp_transient_bytes(m, "allgather", 4096, 8, 1, 8, allgather_saves_kv=True) == pytest.approx(128 * MIB)


def test_simulate_counts_each_flavours_buffer():
    # pp 2: the first stage, which holds no logits, is the peak; the exchange buffers are a
    # transient of the layer computing (the recompute-buffer part); on the loss's stage they
    # would hide under the logits the loss frees before any layer's backward
    def parts_mib(kind):
        row = api.simulate("llama3-8b", "dgx-h100", gpus=16, tp=1, cp=8, pp=2, seq_len=32768, global_batch=2,
                           micro_batch=1, stack="megatron-core", cp_kind=kind, recompute="none").iloc[0]
        return row["activations_gib"] * 1024, row["recompute_buffers_gib"] * 1024
    (a_ring, t_ring), (a_uly, t_uly), (a_ag, t_ag) = (parts_mib(k) for k in ("ring", "ulysses", "allgather"))
    # the stored activations are the flavours' same; only the transient differs
    assert a_ring == a_uly == a_ag
    assert (t_ring, t_uly, t_ag) == (pytest.approx(64), pytest.approx(112), pytest.approx(256))
