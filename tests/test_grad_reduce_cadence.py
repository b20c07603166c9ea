"""When data-parallel gradients are reduced: after every micro-batch (an accumulation loop with
no no_sync: PyTorch DDP / FSDP2, torchtitan) or once a step (Megatron's no_sync_func), and what a
pipeline changes: its runtime owns the micro-batch loop and reduces on the last backward
(torch.distributed.pipelining stage.py backward_maybe_with_nosync), whatever the stack's own
accumulation loop does."""
import pytest

from paraplan import api

RUN = dict(gpus=16, tp=1, global_batch=128, micro_batch=1, zero_stage=1, recompute="full", stack="torchtitan")


def _step(pp: int, every: bool) -> float:
    return float(api.simulate("llama3-8b", "dgx-h100", pp=pp, grad_reduce_every_microbatch=every,
                              **RUN).iloc[0].step_time_s)


def test_a_per_micro_batch_reduction_is_priced_without_a_pipeline():
    # 8 micro-batches a step on dp 16: eight reduce-scatters of the gradients under the backward
    # passes instead of one whose last bucket waits for the backward to end
    assert _step(1, True) != pytest.approx(_step(1, False), rel=1e-6)


def test_a_pipeline_reduces_once_a_step_whatever_the_stacks_accumulation_loop_does():
    assert _step(2, True) == pytest.approx(_step(2, False), rel=1e-12)
