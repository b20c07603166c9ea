"""``plots.scaling`` / ``plots.bandwidth`` label the field they are drawn against (not always GPUs
or bandwidth), and the scaling, bandwidth and breakdown figures mark the configurations that do
not fit in memory, as ``paraplan plot`` counts them."""
from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from paraplan import plots
from paraplan.plots import UNFIT_LABEL
from paraplan.cli import main


def _rows(x: str, fits=(True, True, True)) -> pd.DataFrame:
    return pd.DataFrame({x: [1, 2, 4], "tokens_per_s": [30_000.0, 40_000.0, 36_000.0], "step_time_s": [3.0, 2.0, 2.5],
                         "fits": list(fits)})


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text"))]


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_scaling_against_tp_draws_no_linear_scaling_and_marks_shares_of_the_fastest_point():
    """--field tp at 64 GPUs drew 'linear scaling from 1 GPUs' and '% of linear scaling'."""
    fig = plots.scaling(_rows("tp"), x="tp")
    ax = fig.axes[0]
    assert not any("linear scaling" in t for t in _legend(ax) + [ax.get_ylabel()])
    assert "fastest point" in ax.get_ylabel() and ax.get_xlabel() == "tp"
    shares = [a.get_text() for a in ax.texts]
    assert shares == ["75%", "100%", "90%"]
    assert "GPUs" not in ax.get_title()


def test_scaling_against_the_gpu_count_keeps_linear_scaling():
    fig = plots.scaling(_rows("n_gpus"))
    ax = fig.axes[0]
    assert "linear scaling from 1 GPUs" in _legend(ax)
    assert [a.get_text() for a in ax.texts] == ["100%", "67%", "30%"]
    assert ax.get_xlabel() == "GPUs" and "linear scaling" in ax.get_ylabel()


def test_bandwidth_against_another_field_names_it_not_bandwidth():
    fig = plots.bandwidth(_rows("tp"), x="tp")
    assert fig.axes[0].get_title() == "throughput (% vs the highest tp)"
    fig = plots.bandwidth(_rows("scaleout_gbit_per_s"))
    assert fig.axes[0].get_title() == "throughput (% vs the highest bandwidth)"


def test_bandwidth_and_scaling_cross_the_points_that_do_not_fit():
    rows = _rows("scaleout_gbit_per_s", fits=(False, True, False))
    for fig in (plots.bandwidth(rows), plots.scaling(rows, x="scaleout_gbit_per_s")):
        ax = fig.axes[0]
        assert UNFIT_LABEL in _legend(ax)
        crosses = [c for c in ax.collections if c.get_label() == UNFIT_LABEL]
        assert len(crosses) == 1 and len(crosses[0].get_offsets()) == 2
    fitting = plots.bandwidth(_rows("scaleout_gbit_per_s"))
    assert UNFIT_LABEL not in _legend(fitting.axes[0])


def test_breakdown_labels_the_bars_that_do_not_fit():
    rows = _rows("pp", fits=(True, False, True)).assign(compute_s=[3.0, 2.0, 2.5])
    texts = [t.get_text() for t in plots.breakdown(rows).axes[0].texts]
    assert [(UNFIT_LABEL in t) for t in texts] == [False, True, False]


def test_plot_command_counts_the_points_that_do_not_fit(tmp_path):
    """llama3-70b at tp 8 pp 4 ZeRO-1 on 64 H100s needs ~87 GiB of 80: drawn unmarked before."""
    out = tmp_path / "bw.png"
    result = CliRunner().invoke(main, ["plot", "bandwidth", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64",
                                       "--tp", "8", "--pp", "4", "--zero", "1", "--global-batch", "512",
                                       "--values", "100,800", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "(bandwidth, 2 rows; 2 of 2 do not fit in memory)" in result.stdout
