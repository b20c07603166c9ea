"""``validate published --plot`` / ``validate serving --plot``: the figures carry the tables' numbers."""
from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from paraplan.cli import main
from paraplan.validation_plots import published_error_strip, serving_scatter

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_published_strip_writes_each_sources_table_error_above_its_column():
    # A: two time rows, predicted 10% and 30% long (rel_error +0.1, +0.3): mean |rel| 20.0%;
    # B: one rate row 5% low: 5.0%; a skipped row and a row with no prediction are left out.
    # The dots are speed errors: a time predicted 1.1x long is 1/1.1 - 1 = -9.09% in speed.
    results = pd.DataFrame({
        "source": ["A", "A", "B", "B", "A"],
        "status": ["ok", "ok", "ok", "skipped", "ok"],
        "predicted": [1.1, 1.3, 95.0, None, None],
        "measured": [1.0, 1.0, 100.0, 1.0, 1.0],
        "rel_error": [0.1, 0.3, -0.05, None, None],
        "speed_error": [1 / 1.1 - 1, 1 / 1.3 - 1, -0.05, None, None],
    })
    fig = published_error_strip(results)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels == ["20.0%\nn=2", "5.0%\nn=1"]          # ordered by row count: A, then B
    # the whole: (10 + 30 + 5) / 3 = 15.00%
    assert "3 predicted rows" in fig._suptitle.get_text()
    assert "15.00%" in fig._suptitle.get_text()
    dots = fig.axes[0].collections[-1].get_offsets()       # B's single dot
    assert dots[0][1] == pytest.approx(-5.0)
    a_dots = sorted(y for _, y in fig.axes[0].collections[-2].get_offsets())
    assert a_dots == pytest.approx([100 * (1 / 1.3 - 1), 100 * (1 / 1.1 - 1)])


def test_serving_scatter_titles_give_each_metrics_mean_error():
    # TTFT: 120 vs 100 (+20%), 50 vs 100 (-50%): mean 35.0%; TPOT: 11 vs 10 (+10%): 10.0%
    results = pd.DataFrame({
        "metric": ["ttft_ms", "ttft_ms", "tpot_ms", "tpot_ms"],
        "status": ["ok", "ok", "ok", "skipped"],
        "predicted": [120.0, 50.0, 11.0, None],
        "measured": [100.0, 100.0, 10.0, 12.0],
        "backend": ["vllm", "sglang", "vllm", "vllm"],
        "mode": ["agg", "agg", "agg", "agg"],
    })
    fig = serving_scatter(results)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["TTFT: 2 rows, mean |error| 35.0%", "TPOT: 1 row, mean |error| 10.0%"]
    ttft = fig.axes[0]
    assert ttft.get_xscale() == ttft.get_yscale() == "log"
    # the axes span the points with a 1.5x margin: 50 / 1.5 to 120 * 1.5
    assert ttft.get_xlim() == pytest.approx((50 / 1.5, 180.0))


def test_validate_published_plot_writes_a_png_and_the_table(tmp_path):
    out = tmp_path / "errors.png"
    result = CliRunner().invoke(main, ["validate", "published", "--source", "KOR22", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert "KOR22" in result.stdout and f"wrote {out}" in result.stderr


def test_validate_serving_plot_refuses_a_name_with_no_image_format_before_predicting(tmp_path):
    out = tmp_path / "errors.txt"
    result = CliRunner().invoke(main, ["validate", "serving", "--plot", str(out)])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --plot:")
    assert not out.exists() and list(tmp_path.iterdir()) == []
