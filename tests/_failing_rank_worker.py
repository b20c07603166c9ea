"""A launch target for tests/test_measure_review_fixes_s5.py: rank 1 fails at once, the others
wait (torch then terminates them). Run as a script it launches two ranks and prints the error
the way the CLI does, one line."""
from __future__ import annotations

import sys
import time


def fail_on_rank_one(rank, world, device, choice, args):
    import torch.distributed as dist
    if rank == 1:
        raise ValueError("rank 1 failed on purpose")     # its launcher's barrier meets rank 0's
    dist.barrier()
    time.sleep(30.0)


if __name__ == "__main__":
    from paraplan.measure.runtime import choose_device, launch
    try:
        launch(fail_on_rank_one, 2, {}, choose_device("cpu", threads_per_rank=1), timeout_s=60)
    except Exception as exc:  # noqa: BLE001 - the test counts what reaches stderr
        print(f"error: {type(exc).__name__}", file=sys.stderr)
        sys.exit(2)
