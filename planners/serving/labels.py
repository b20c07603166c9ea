"""The one text label of a serving worker layout, used by ``serve plan`` and ``serve simulate``.

``tp{T}[-pp{P}][-adp{A}][-etp{E}xep{X}]``: attention tensor parallelism T, pipeline stages P
(shown when > 1), attention data-parallel ranks A (shown when > 1) and, for a mixture-of-experts
model, always how the routed experts are split over the worker's T x A GPUs: expert tensor
parallelism E times expert parallelism X (E x X = T x A), so ``tp1-adp16-etp16xep1`` (every
expert sliced 16 ways) and ``tp1-adp16-etp1xep16`` (whole experts on 16 GPUs) read differently.
A dense model has no expert part.
"""
from __future__ import annotations


def worker_label(tp: float, pp: float, adp: float, moe_tp: float, moe_ep: float, moe: bool) -> str:
    """Label of one worker layout (degrees as counts; floats from the search's arrays are fine)."""
    label = f"tp{int(tp)}"
    if pp > 1:
        label += f"-pp{int(pp)}"
    if adp > 1:
        label += f"-adp{int(adp)}"
    if moe:
        label += f"-etp{int(moe_tp)}xep{int(moe_ep)}"
    return label


def worker_labels(tp, pp, adp, moe_tp, moe_ep, moe: bool) -> list[str]:
    """``worker_label`` of each row of equally long degree arrays."""
    return [worker_label(*row, moe=moe) for row in zip(tp, pp, adp, moe_tp, moe_ep)]


def prompts_per_step(n: float) -> str:
    """A disaggregated prefill worker's batch in words: ``1 prompt per step``, ``8 prompts per step``."""
    n = int(n)
    return f"{n} prompt{'' if n == 1 else 's'} per step"
