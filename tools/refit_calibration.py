"""Rewrite a ``paraplan calibrate`` profile from its recorded raw timings with the current fitter.

    python tools/refit_calibration.py PROFILE.yaml [...]

Reads ``PROFILE.calibration.json`` beside each profile (the ranks' raw benchmark timings), runs
``calibrate.summarize`` and ``calibrate.cluster_mapping`` on them as ``paraplan calibrate`` would,
and writes the profile and the sidecar's summary again; the profile keeps where and when it was
measured (its ``source`` lines), with a note that it was refitted. Used when a fit changes (the
GEMM fit's closed form, 2026-12-04) so that recorded profiles stay exactly what the committed
fitter returns on their timings.
"""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paraplan.measure import calibrate  # noqa: E402

NOTE = " (refitted from the recorded timings by tools/refit_calibration.py)"


def refit(profile: Path) -> Path:
    sidecar = calibrate.sidecar_path(profile)
    record = json.loads(sidecar.read_text())
    old = yaml.safe_load(profile.read_text())
    choice = types.SimpleNamespace(**record["device"])
    summary = calibrate.summarize(record["ranks"], int(record["world_size"]), choice)
    mapping = calibrate.cluster_mapping(summary, record["ranks"], int(record["world_size"]), choice, old["name"])
    source = old["source"].removesuffix(NOTE) + NOTE
    mapping["source"] = mapping["gpu"]["source"] = source
    mapping["efficiency"]["fitted_on"] = (source + "; refit with paraplan calibrate "
                                          "(paraplan.measure.run_calibration)")
    header = "# Written by paraplan calibrate (paraplan/measure/calibrate.py); regenerate rather than edit.\n"
    profile.write_text(header + yaml.safe_dump(mapping, sort_keys=False, width=120))
    record["summary"] = summary
    sidecar.write_text(json.dumps(record, indent=1, default=calibrate._json_default))
    return profile


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("rewrote", refit(Path(arg)))
