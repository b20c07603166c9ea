"""allreduce_time_s over many rows prices each row by the one formula its group takes (inside one
NVLink domain, across domains, none for a group of one): the numbers of each row priced alone."""
import numpy as np
import pytest

from cost_models.inference_comm import allreduce_time_s
from hardware_specs.catalog import load_cluster, load_stack
from hardware_specs.serving_efficiency import ServingEfficiency

PURE = ServingEfficiency(generation="hopper", decode_hbm_fraction=0.8, gemm_peak_fraction=0.6,
                         attention_peak_fraction=0.5, kernel_fixed_s=0.0, arrival_sync_chunked=1.0)


@pytest.mark.parametrize("custom", [True, False])
def test_rows_of_every_group_priced_together_give_each_rows_own_time(custom):
    cluster = load_cluster("dgx-b200")           # 8 GPUs a domain
    trt = load_stack("trtllm-1").serving
    group = np.tile([8.0, 8.0, 1.0, 16.0, 2.0, 64.0, np.nan, 0.0], 16)      # 128 rows
    tokens = np.tile([64.0, 129.0, 64.0, 64.0, 8.0, 300.0, 1.0, 5.0], 16)
    msg = tokens * 8192 * 2.0
    oneshot, stated = trt.oneshot_allreduce(msg, group, tokens)
    got = allreduce_time_s(msg, group, cluster, PURE, custom, oneshot, stated)
    alone = [float(allreduce_time_s(msg[i], group[i], cluster, PURE, custom, oneshot[i], stated[i]))
             for i in range(group.size)]
    assert got.tolist() == alone
    if custom:
        # TensorRT-LLM at 8 GPUs: one-shot up to 128 tokens, 3 us + 7 x 1 MiB / 720 GB/s; two-shot
        # at 129, 6 us + 2 x 7/8 x 129 x 16 KiB / 720 GB/s (tests/test_serving_cost_model.py)
        assert got[0] == pytest.approx(3e-6 + 7 * 1048576 / 720e9, rel=1e-12)
        assert got[1] == pytest.approx(6e-6 + 1.75 * 129 * 16384 / 720e9, rel=1e-12)
    assert got[2] == got[6] == got[7] == 0.0 and got[3] > 0.0 and got[5] > got[3]
