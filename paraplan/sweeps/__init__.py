"""Sweeps: a grid of what-ifs (models x clusters x GPU counts x batches x stacks x configs),
evaluated in chunks on Dask, resumable, one row per point (``paraplan sweep SPEC.yaml``)."""
from paraplan.sweeps.runner import run_sweep, write_results
from paraplan.sweeps.spec import SweepSpec, load_spec, spec_from_dict

__all__ = ["SweepSpec", "load_spec", "run_sweep", "spec_from_dict", "write_results"]
