#!/usr/bin/env bash
# The measured-run path on a CUDA machine, end to end, as a user would run it: calibrate this GPU,
# validate the default layouts against that profile and against the catalog's system, and check
# that measure refuses what it must (a model too large for one GPU; a CPU profile on a CUDA host).
# Usage: OUT=folder bash tools/gpu_smoke_measured.sh [catalog-system]   (on the device: $OUT is set)
# Runs with the machine's own python3 and torch; paraplan from this checkout via PYTHONPATH.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_smoke}; mkdir -p "$OUT"
SYSTEM=${1:-hgx-h200}
pp() { python3 -c 'import sys; from paraplan.cli import main; sys.argv[0]="paraplan"; main()' "$@"; }
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }
step versions
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
step calibrate
time pp calibrate --nprocs 1 --out "$OUT/h200-calibrated.yaml" --name h200-calibrated; echo "rc=$?"
step "validate measured against this GPU's own profile"
time pp validate measured "$OUT/h200-calibrated.yaml" --rounds 1 --steps 8 --warmup 3 --csv --out "$OUT/validate_calibrated.csv"; echo "rc=$?"
cat "$OUT/validate_calibrated.csv" | cut -d, -f1-11
step "validate measured against the catalog's $SYSTEM"
time pp validate measured "$SYSTEM" --rounds 1 --steps 8 --warmup 3 --csv --out "$OUT/validate_catalog.csv"; echo "rc=$?"
cat "$OUT/validate_catalog.csv" | cut -d, -f1-11
step "measure: a GPT too large for one GPU is refused before any rank starts (expect exit 2)"
time pp measure --layers 400 --hidden 16384 --heads 128 --seq-len 2048; echo "rc=$?"
step "validate measured: a CPU profile on this CUDA host is refused (expect exit 2)"
pp validate measured tests/data/measured_calibration.yaml --rounds 1 --steps 4 --warmup 1; echo "rc=$?"
step "measure --json one step layout"
pp measure --layers 8 --hidden 2048 --heads 16 --seq-len 2048 --micro-batch 4 --global-batch 4 --steps 6 --warmup 2 --json > "$OUT/measure_single.json"; echo "rc=$?"
head -c 1500 "$OUT/measure_single.json"; echo
step done
