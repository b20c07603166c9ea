"""serving_api's errors name the keyword the caller passed (batch, system, ...), not the CLI's
flag (--batch) or the inner name (cluster) the shared serving layers raise with; the CLI keeps
its own wording."""
from __future__ import annotations

import math

import pytest

from hardware_specs.errors import InputError
from paraplan import serving_api as sa

BASE = dict(model="llama3.1-70b", system="dgx-h100", tp=4, batch=64)


@pytest.mark.parametrize("field, value", [("batch", 1e30), ("draft_acceptance", math.nan),
                                          ("speculative_tokens", 1e30), ("system", "nope")])
def test_serve_sweep_errors_are_headed_by_the_keyword(field, value):
    err = sa.serve_sweep(BASE, field, [value]).error.iloc[0]
    assert err.startswith(f"{field}: "), err
    assert "--" not in err, err


def test_serve_simulate_and_context_raise_with_the_keyword():
    with pytest.raises(InputError) as exc:
        sa.serve_simulate(**{**BASE, "batch": 10**6})
    assert exc.value.field == "batch" and "--" not in str(exc.value)
    with pytest.raises(InputError) as exc:
        sa.serving_context("llama3.1-70b", "nope")
    assert exc.value.field == "system"


def test_the_cli_keeps_its_flags(tmp_path, capsys):
    from paraplan.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["serve", "simulate", "--model", "llama3.1-70b", "--system", "dgx-h100", "--tp", "4",
              "--batch", "1000000"])
    out = capsys.readouterr()
    assert exc.value.code != 0 and "--batch:" in out.err + out.out


@pytest.mark.parametrize("keyword, value", [("tpot_ms", 0), ("ttft_ms", -1.0), ("isl", 0), ("max_batch", 0),
                                            ("rank_by", "fastest"), ("modes", "agg+disagg")])
def test_serve_plan_errors_are_headed_by_the_keyword(keyword, value):
    """serve_plan's refusals named serve plan's flags (--tpot-ms, --mode, --rank-by ...)."""
    with pytest.raises(InputError) as exc:
        sa.serve_plan("llama3.1-8b", "dgx-h100", 8, **{keyword: value})
    assert exc.value.field == keyword and "--" not in str(exc.value), str(exc.value)


def test_serve_plan_gpus_and_an_unreachable_tpot_name_keywords():
    with pytest.raises(InputError) as exc:
        sa.serve_plan("llama3.1-8b", "dgx-h100", 0)
    assert exc.value.field == "gpus" and "--" not in str(exc.value)
    # 0.01 ms per output token: no 8B layout on H100 decodes a token in 10 us (it read 'allow --tpot-ms')
    with pytest.raises(InputError) as exc:
        sa.serve_plan("llama3.1-8b", "dgx-h100", 8, tpot_ms=0.01)
    assert exc.value.field == "tpot_ms" and "allow tpot_ms " in str(exc.value) and "--" not in str(exc.value)


@pytest.mark.parametrize("keyword", ["batch", "pp", "adp"])
def test_serve_simulate_and_sweep_name_the_degree_not_its_layout_path(keyword):
    """A zero degree read 'layout.batch: must be a whole number >= 1' (WorkerLayout's own name)."""
    with pytest.raises(InputError) as exc:
        sa.serve_simulate(**{**BASE, keyword: 0})
    assert exc.value.field == keyword and "layout." not in str(exc.value), str(exc.value)
    err = sa.serve_sweep(BASE, keyword, [0]).error.iloc[0]
    assert err.startswith(f"{keyword}: ") and "layout." not in err, err


def test_the_cli_names_the_batch_flag_for_a_zero_batch(capsys):
    from paraplan.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["serve", "simulate", "--model", "llama3.1-70b", "--system", "dgx-h100", "--batch", "0"])
    out = capsys.readouterr()
    assert exc.value.code != 0 and "--batch" in out.err + out.out and "layout." not in out.err + out.out
