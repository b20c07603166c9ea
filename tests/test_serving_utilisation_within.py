"""serve plan's bound on the prefill utilisation whose M/D/c mean wait fits a slack
(``planners.serving.search._utilisation_within``)."""
import numpy as np

from planners.serving.search import _utilisation_within


def test_one_server_of_one_second_waits_half_a_second_at_half_load():
    # Sakasegawa with c = 1: rho^(sqrt(4) - 1) / (1 (1 - rho)) x (1 + 0) / 2 x 1 s = rho / (1 - rho) / 2:
    # 0.5 s at rho = 0.5, 1.5 s at rho = 0.75 (by hand); the bound is rounded up
    got = _utilisation_within(np.array([0.5, 1.5]), np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert np.all(got >= [0.5, 0.75]) and np.allclose(got, [0.5, 0.75], rtol=0, atol=1e-11)
