"""Measured validation on the machine at hand (needs the optional ``torch`` extra).

Three entry points, which the CLI wires as ``paraplan calibrate``, ``paraplan measure`` and
``paraplan validate measured``:

* ``run_calibration(out_path, nprocs=2) -> Path``: microbenchmark this machine and write a
  catalog cluster YAML (inline ``gpu:`` and ``efficiency:``) the simulator can load.
* ``run_measurement(config: dict) -> dict``: train a small GPT with real DP / TP / PP on local
  ranks and report median step time, tokens/s and peak memory.
* ``compare_measured(cluster_path, configs=None, steps=...) -> DataFrame``: measured vs
  predicted step time for a list of small configurations.

Importing this package does not import torch; each function raises ``InputError('torch', ...)``
with install instructions when torch is missing. Ranks are forked from a fork server that has
torch loaded (``runtime.start_method``; ``spawn`` where the platform has no fork server), which
imports the calling script as spawn would: call these from a script only under
``if __name__ == "__main__":``.

Layout: ``runtime`` (device choice, launching ranks, load and memory meters), ``benchmarks``
and ``fitting`` (microbenchmarks, and the fits that turn them into catalog numbers),
``calibrate``, ``gpt`` and ``parallel`` (the model and the hand-written DP/ZeRO-1/TP/PP),
``train`` (the measured runner), ``compare``, ``selfcheck`` (gradients vs an unsharded model).
"""
from __future__ import annotations

from pathlib import Path


def run_calibration(out_path, nprocs: int = 2, **kwargs) -> Path:
    from paraplan.measure.calibrate import run_calibration as _run
    return _run(out_path, nprocs=nprocs, **kwargs)


def run_measurement(config: dict, progress=None) -> dict:
    from paraplan.measure.train import run_measurement as _run
    return _run(config, progress=progress)


def compare_measured(cluster_path, configs=None, **kwargs):
    from paraplan.measure.compare import compare_measured as _run
    return _run(cluster_path, configs=configs, **kwargs)


for _f, _mod in ((run_calibration, "calibrate"), (run_measurement, "train"), (compare_measured, "compare")):
    _f.__doc__ = f"See ``paraplan.measure.{_mod}.{_f.__name__}``."

__all__ = ["compare_measured", "run_calibration", "run_measurement"]
