"""A published row whose decoder layers do not divide over its pipeline chunks runs with
``uneven_layers`` (every chunk ceil(L / chunks) layers, the shortfall taken from the ends
inwards): the row says so among its assumptions, as ``validate published --json`` prints them;
a row whose layers divide says nothing of it."""
from published_row import llama31_8b_row


def _row(**overrides):
    """Llama 3.1 8B on 24 H100 as dp 8 x pp 3."""
    return llama31_8b_row(**{"n_gpus": 24, "pp": 3, **overrides})


def test_a_row_on_an_uneven_split_says_which_split_ran():
    from paraplan.validation.published import row_inputs
    # 32 layers on 3 stages: ceil(32/3) = 11 each would be 33, one short, taken from the ends
    # inwards, the last stage (it holds the LM head) first (stage_layout._deficit_order:
    # n-1, 0, n-2, 1, ...): 11 | 11 | 10
    inputs = row_inputs(_row())
    text = [a for a in inputs.assumptions if a.startswith("uneven pipeline split")]
    assert text == ["uneven pipeline split: 32 layers on 3 model chunks as 11 x 2, 10 "
                    "(the ends lighter, simulator.stage_layout; the row states no split)"]
    # 32 layers on pp 3 x vpp 2 = 6 chunks: ceil = 6, 36 - 32 = 4 short, chunks 5, 0, 4, 1 one
    # lighter each: 5 | 5 | 6 | 6 | 5 | 5
    inputs = row_inputs(_row(vpp=2, global_batch=48, n_gpus=24))
    assert "32 layers on 6 model chunks as 5 x 2, 6 x 2, 5 x 2" in "; ".join(inputs.assumptions)


def test_a_row_whose_layers_divide_gains_nothing():
    from paraplan.validation.published import row_inputs
    inputs = row_inputs(_row(pp=4, n_gpus=32))
    assert not [a for a in inputs.assumptions if "uneven" in a]
