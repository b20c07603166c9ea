"""MoE routed-expert activations and dispatch buffers in the activations' element size: 4 bytes
in fp32 / tf32 training, 2 in 16-bit (``compute.activation_bytes``), as the dense layers' terms.

Hand count, Mixtral 8x7B (h 4096, 8 experts, top-2, gated experts of width 14,336), one
micro-batch of 4,096 tokens, tp = cp = etp = 1, ep 8, no imbalance, nothing recomputed:
routed = 4,096 tokens, rows = 2 x 4,096 = 8,192 on the GPU. With e bytes an element:
router 4,096 x 8 x 8 = 262,144 (fp32 whatever the dtype), dispatched input 8,192 x 4,096 e,
fc1 output 8,192 x 2 x 14,336 e, activation output 8,192 x 14,336 e, expert outputs at the
combine 4,096 x 2 x 4,096 e: 419,430,400 e + 262,144. Dispatch buffers (sent + received rows)
(8,192 + 8,192) x 4,096 e = 67,108,864 e.
"""
import pytest

from cost_models import moe
from hardware_specs.catalog import load_cluster
from model_specs.catalog import load_model
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.stage_activations import layer_activation_bytes

MIXTRAL = load_model("mixtral-8x7b").with_seq_len(4096)
PER_ELEMENT = 8_192 * 4_096 + 8_192 * 2 * 14_336 + 8_192 * 14_336 + 4_096 * 2 * 4_096   # 419,430,400
ROUTER = 4_096 * 8 * 8


@pytest.mark.parametrize("e", [2.0, 4.0])
def test_routed_expert_activations_scale_with_the_element_size(e):
    kept = moe.moe_activation_bytes_per_layer(MIXTRAL, 1, 4096, 1, 1, 8, 1, 0, gemm_input_bytes=e, element_bytes=e)
    assert float(kept) == PER_ELEMENT * e + ROUTER
    assert float(moe.moe_dispatch_buffer_bytes(MIXTRAL, 1, 4096, 1, 1, 1, 1.0, 8, e)) == 67_108_864 * e


def test_the_layer_activations_of_an_fp32_run_use_4_byte_elements():
    args = (1, 1, 1, False, 0, True, 8, 1, 1.0, 0)
    b16, b32 = (layer_activation_bytes(MIXTRAL, d, *args) for d in ("bf16", "fp32"))
    assert float(b32["dispatch"]) == 2.0 * float(b16["dispatch"])
    # everything doubles but what is fp32 in both: the router's logits and probabilities and
    # flash attention's softmax statistics (4,096 tokens x 32 heads x 4 bytes)
    assert float(b32["full_moe"]) == pytest.approx(2.0 * float(b16["full_moe"]) - ROUTER - 4_096 * 32 * 4, rel=1e-12)


def test_simulate_doubles_the_moe_dispatch_and_activations_in_fp32():
    cluster = load_cluster("dgx-h100")

    def parts(dtype):
        config = ParallelConfig(dp=8, ep=8, micro_batch=1, global_batch=64, zero_stage=3, recompute="none",
                                dtype=dtype)
        return simulate(MIXTRAL, cluster, config).stage_memory[0]["parts_bytes"]
    b16, b32 = parts("bf16"), parts("fp32")
    assert b32["moe_dispatch_bytes"] == 2.0 * b16["moe_dispatch_bytes"]
    assert b32["activations_bytes"] == pytest.approx(2.0 * b16["activations_bytes"], rel=1e-3)
