"""Count-axis tick labels and tok/s counts: decimals from the tick step, no trailing '.0'.

A review found plots.bandwidth's y axis (llama3-70b, 256 H100, HBM 3.35/5.025/6.7 TB/s) ticked every
2,500 tokens/s and labelled 272,500 '272k' and 277,500 '278k': the decimals came from the visible span
(over 8k wide, so none), not the 2.5k step. ``_thousands`` wrote every count with no decimals, so
1,500 and 2,500 tok/s both read '2k'. The expected labels are the tick values written out by hand.
"""
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator

from paraplan import plots


def _labels(ticks, lim):
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_ylim(*lim)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    plots._count_axis(ax.yaxis)
    fig.canvas.draw()
    return [t.get_text() for t in ax.get_yticklabels()]


def test_half_thousand_ticks_keep_their_half():
    ticks = [270000, 272500, 275000, 277500, 280000]
    assert _labels(ticks, (269000, 281000)) == ["270k", "272.5k", "275k", "277.5k", "280k"]


def test_whole_thousand_ticks_have_no_trailing_zero_and_zero_is_zero():
    assert _labels([0, 50000, 100000, 150000], (0, 160000)) == ["0", "50k", "100k", "150k"]
    assert _labels([1_000_000, 1_500_000, 2_000_000], (0.9e6, 2.1e6)) == ["1M", "1.5M", "2M"]
    assert _labels([270000, 270250, 270500], (269900, 270600)) == ["270k", "270.25k", "270.5k"]


def test_a_count_keeps_three_significant_figures():
    assert [plots._thousands(v) for v in (1500, 2500, 272345, 149321, 1_250_000, 999_700, 640, 0)] == \
        ["1.5k", "2.5k", "272k", "149k", "1.25M", "1M", "640", "0"]


def test_the_reviewed_bandwidth_plot_labels_its_half_thousand_ticks():
    from paraplan import api
    base = dict(model="llama3-70b", cluster="dgx-h100", gpus=256, global_batch_tokens=4 * 2**20)
    df = api.sweep(base, "hbm_tb_per_s", [3.35, 5.025, 6.7], best=True)
    fig = plots.bandwidth(df, None, x="hbm_tb_per_s")
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    shown = {round(v): t.get_text() for v, t in zip(ax.get_yticks(), ax.get_yticklabels()) if lo <= v <= hi}
    assert len(set(shown.values())) == len(shown)          # distinct ticks, distinct labels
    for value, text in shown.items():                      # each label reads back as its tick
        assert float(text.rstrip("k")) * 1000 == value, (value, text)
