"""The memory a run keeps free: the headroom the planner's and ``simulate``'s fit checks keep.

The memory model (``cost_models.memory``) already counts the live tensors, 5% caching-allocator
fragmentation on top of them and 1.5 GiB of CUDA context, library workspaces and NCCL buffers.
Real runs still do not plan to the last byte: fragmentation varies with the layout and over a
run (ZeRO, Rajbhandari et al. 2020, section 3.2: jobs ran out of memory "with over 30% of
memory still available" from fragmentation alone; PyTorch's CUDA memory notes describe the
caching allocator's fragmentation and ``expandable_segments``), NCCL allocates buffers per
communicator as groups are created, and the optimizer step and checkpoint saves add transient
peaks. Serving stacks make the same choice explicitly (vLLM's ``gpu_memory_utilization``
defaults to 0.9).

``DEFAULT_HEADROOM_FRACTION``: 5% of HBM (4 GiB of an 80 GB H100), a documented choice, not a
fit. ``paraplan plan`` and ``paraplan simulate`` keep it unless ``--headroom-gib`` says
otherwise (``--headroom-gib 0`` plans to the model's peak).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from hardware_specs.errors import InputError, shown

GIB = 2**30
DEFAULT_HEADROOM_FRACTION = 0.05


def headroom_gib(hbm_bytes: float, requested_gib: float | None = None) -> float:
    """The headroom to keep, GiB: ``requested_gib``, or the default fraction of ``hbm_bytes``.

    Raises ``InputError`` for a request that is not a number (text such as ``"5"``, or a bool:
    ``True`` was ``float(True)`` = 1 GiB), negative, non-finite or all of HBM: the one check of
    ``paraplan.api.simulate``, ``plan`` and the heterogeneous planner.
    """
    if requested_gib is None:
        return DEFAULT_HEADROOM_FRACTION * hbm_bytes / GIB
    if isinstance(requested_gib, (bool, np.bool_)) or not isinstance(requested_gib, numbers.Real):
        raise InputError("headroom_gib", f"must be a number of GiB, got {shown(requested_gib)}",
                         "give GiB to keep free, e.g. 4; 0 plans to the modelled peak")
    value = float(requested_gib)
    if not (math.isfinite(value) and value >= 0):
        raise InputError("headroom_gib", f"must be a finite number >= 0, got {requested_gib}",
                         "give GiB to keep free, e.g. 4; 0 plans to the modelled peak")
    if value * GIB >= hbm_bytes:
        raise InputError("headroom_gib", f"{value:g} GiB leaves nothing of the {hbm_bytes / GIB:.0f} GiB HBM",
                         "use a smaller headroom")
    return value


def fits(memory_bytes, hbm_bytes: float, requested_gib: float | None = None):
    """Whether ``memory_bytes`` (scalar or array) leaves the headroom free."""
    limit = hbm_bytes - headroom_gib(hbm_bytes, requested_gib) * GIB
    return np.asarray(memory_bytes) <= limit


def step_fits(memory_bytes, hbm_bytes: float, host_fits=True, requested_gib: float | None = None):
    """Whether a step fits (scalar or array): its peak per GPU leaves the headroom free
    (``fits``) and the host memory its activation offload needs fits in its hosts' memory
    (``host_fits``, ``simulator.stage_memory``: the node's stated memory, the job's share of it).
    ``paraplan simulate``, :mod:`paraplan.api`'s rows and ``paraplan.sweeps`` all ask this one
    question, so a row never says it fits where ``simulate`` says NO."""
    return fits(memory_bytes, hbm_bytes, requested_gib) & np.asarray(host_fits, dtype=bool)


def report_fits(report, requested_gib: float | None = None) -> bool:
    """``step_fits`` of a ``simulator.report.StepReport`` (its ``extras["host_fits"]``; a report
    without it offloads nothing to the host)."""
    return bool(step_fits(report.memory_bytes, report.hbm_bytes, report.extras.get("host_fits", True),
                          requested_gib))
