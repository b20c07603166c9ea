"""The MoE parallel-folding error names the degree that breaks the fold and the values that would
fit: ep*etp must divide dp*cp*tp (Megatron-Core's folding). It named ``ep`` with a generic fix
even when ``--etp`` was what broke it (Mixtral on 64 H100, ep 8, etp 3: 24 does not divide 64)."""
from click.testing import CliRunner

from paraplan.cli import main


def _error(*args):
    res = CliRunner().invoke(main, ["simulate", "-m", "mixtral-8x7b", "-c", "dgx-h100", *args])
    assert res.exit_code == 2, res.output
    return res.output.strip().splitlines()[-1]


def test_an_etp_that_breaks_the_fold_is_named_with_the_etps_that_fit():
    # 64 ranks, ep 8: etp must divide 64 / 8 = 8, so 1, 2, 4, 8
    line = _error("-n", "64", "--ep", "8", "--etp", "3", "--global-batch", "64")
    assert line == ("error: etp: ep*etp = 8*3 must divide dp*cp*tp = 64 (MoE parallel folding) "
                    "(choose with ep 8, etp from 1, 2, 4, 8)")


def test_an_ep_that_breaks_the_fold_is_named_with_the_eps_that_fit():
    # 12 ranks, etp 1: ep must divide both 12 and Mixtral's 8 experts: 1, 2, 4
    line = _error("-n", "12", "--ep", "8", "--global-batch", "12")
    assert line == ("error: ep: ep*etp = 8*1 must divide dp*cp*tp = 12 (MoE parallel folding) "
                    "(choose with etp 1, ep from 1, 2, 4)")
