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
