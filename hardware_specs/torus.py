"""Which links of a TPU torus a communication group's ring runs on.

A TPU chip has two ICI links per torus axis, one to each neighbour (TPU v4 and v5p: 6 links in a
3D torus; v3, v5e, v6e: 4 in a 2D torus; Google Cloud TPU system architecture pages; Jouppi et
al., "TPU v4", ISCA 2023, arXiv 2304.01433 section 2). A ring collective along one axis sends half
the buffer each way round that axis' ring, so it moves data on 2 of the chip's links, one each way
("bidirectional bandwidth": 2 x one link's one-way rate); a collective over several axes splits
the buffer over them and adds 2 links per axis (Austin et al., "How to Scale Your Model", 2025,
part 3 "Sharded Matrices": AllGather time = bytes / (bidirectional ICI bandwidth x axes)).

Ranks are laid on the torus in order, the first axis fastest (``torus_dims[0]``), the way the
ranks of a layout are numbered tensor-parallel first (``cost_models.topology.group_blocks``): the
innermost groups take the innermost axes, and a group of ``members`` ranks ``stride`` apart spans
the axes its ranks' coordinates vary along.
"""
from __future__ import annotations

import math

import numpy as np


def torus_ring_links(members, stride, dims):
    """Links of one chip, counted in whole one-way links, that a ring collective over a group
    of ``members`` chips ``stride`` ranks apart runs on, on a torus of shape ``dims`` (the first
    axis fastest), numpy-friendly in ``members`` and ``stride``.

    Per axis the group's members take ``k`` distinct positions on: ``k >= 3`` is a ring both ways
    round the axis, 2 links; ``k = 2`` is one neighbour, whose single link carries both ways of a
    ring of two, 1 link; ``k = 1`` none. A group whose members sit ``h`` positions apart on an
    axis (the data-parallel group over a tensor-parallel group of 4 on an axis of 16: h = 4)
    shares each link of that axis with the ``h - 1`` other groups interleaved with it, whose
    collectives run at the same time, so it gets 1/h of them. On TPU v4's 16 x 16 x 16 pod, a
    tensor-parallel group of 4 (stride 1) runs on 2 of the 6 links; the data-parallel group over
    tp 16 spans the other two axes, 4 links; over tp 4, 2 x 1/4 + 2 + 2 = 4.5.

    Members are placed compactly: the ring is taken to close round each axis it spans (the
    wraparound of a whole axis). A group on part of an axis of a slice without wraparound reaches
    half the rate (Austin et al., part 2 "TPUs": no wraparound "typically doubles the time of most
    throughput-bound comms"), which this count does not model. Returns 0 for a group of one."""
    members = np.asarray(members, dtype=float)
    stride = np.maximum(np.asarray(stride, dtype=float), 1.0)
    whole_stride = np.rint(stride).astype(np.int64)
    links = np.zeros(np.broadcast(members, stride).shape)
    inner = 1                      # chips of one step along this axis (product of the faster axes)
    for length in dims:
        period = inner * int(length)
        # the finest step, in ranks, between members modulo this axis' period: a stride that is
        # a multiple of the period never moves along the axis
        step = np.gcd(whole_stride, period).astype(float)
        apart = np.maximum(step, float(inner))
        extent = np.minimum(stride * members, float(period))
        positions = np.minimum(np.minimum(np.ceil(extent / apart), float(length)), members)
        positions = np.where(step >= period, 1.0, positions)
        per_axis = np.where(positions >= 3.0, 2.0, np.where(positions >= 2.0, 1.0, 0.0))
        links = links + per_axis * (inner / apart)
        inner = period
    return links


def torus_slice_dims(dims, chips: int) -> tuple:
    """The shape of a ``chips``-chip slice cut from a torus of shape ``dims`` (the first axis
    fastest): the inner axes are kept as far as they divide ``chips``, the last axis takes the
    rest (TPU v4's 16 x 16 x 16 pod in slices of 3072: 16 x 16 x 12). ``dims`` itself for the
    whole torus."""
    chips = int(chips)
    if chips == math.prod(int(d) for d in dims):
        return tuple(int(d) for d in dims)
    out, rest = [], chips
    for length in dims[:-1]:
        keep = math.gcd(int(length), rest)
        out.append(keep)
        rest //= keep
    out.append(rest)
    return tuple(out)
