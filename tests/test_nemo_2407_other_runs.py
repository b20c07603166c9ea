"""NeMo 24.07's performance table (github NVIDIA/NeMo docs/source/performance/performance_summary.md,
its final 24.07 version at 8e3d65dc, DGX-H100, FP8) holds runs the validation file does not: five
pre-training runs (GPT3-5B, GPT3-175B on 128 and 512 GPUs, LLAMA2-70B, LLAMA3-8B with CP 2) and three
full fine-tuning (SFT) runs (``tests/data/nemo_2407_other_runs.csv``, each row citing the page; the
analysis is in docs/accuracy_training.md, "NeMo 24.07's other runs"). Predicted, never fitted.

The pre-training runs are bounded at what the committed model measures, rounded up. The SFT runs
train on packed SQuAD samples whose attention stays inside each sample, which a row cannot state
(it gives the 4,096-token sequence), so they are predicted slow; their bound records that.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from paraplan.validation.published import read_runs, validate_rows

DATA = Path(__file__).resolve().parent / "data" / "nemo_2407_other_runs.csv"


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    out = validate_rows(read_runs(DATA))
    out["sft"] = out.run_id.str.contains("-SFT-")
    return out


def test_every_run_is_predicted(results):
    assert len(results) == 8
    assert (results.status == "ok").all()


def test_pre_training_runs_within_their_bound(results):
    pre = results[~results.sft]
    assert len(pre) == 5
    # 5.48% on 2026-12-07 (session 61): -1.5, -7.1, -10.3, +0.6, -7.9%; 6.24%: -1.6, -8.9, -11.0, -1.0, -8.8% (5.30% before session 50's Hopper FP8 refit: 0.6484 -> 0.6363
    # of peak, once MoE layers stopped paying a dense MLP's TP collectives; 6.43% before the sends' overlap)
    assert pre.rel_error.abs().mean() <= 0.065
    assert pre.rel_error.abs().max() <= 0.115


def test_packed_sft_runs_are_predicted_slow_as_packing_predicts(results):
    """Full attention over 4,096 tokens costs more than attention inside packed samples: every
    SFT run is predicted slower than measured (-14%, -32%, -12% tokens/s; -10, -29, -8% before
    the sends' placement and overlap)."""
    sft = results[results.sft]
    assert len(sft) == 3
    assert (sft.rel_error < 0).all()
    assert sft.rel_error.abs().max() <= 0.33
