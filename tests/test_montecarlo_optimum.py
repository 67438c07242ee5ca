"""montecarlo.optimum: the numerically optimised geometry (Fig. 4) and the gap study."""

import numpy as np
import pytest
from scipy.optimize import check_grad

import montecarlo as mc
from montecarlo import optimum


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    for d, v in ((4, 0.7), (6, 1.5)):
        norms = np.sqrt(rng.chisquare(d, d))
        u = rng.standard_normal(d * d)
        err = check_grad(lambda x: optimum._objective_and_grad(x, norms, d, v)[0],
                         lambda x: optimum._objective_and_grad(x, norms, d, v)[1], u)
        assert err < 1e-6 * np.linalg.norm(optimum._objective_and_grad(u, norms, d, v)[1]) + 1e-8


def test_objective_matches_theory():
    from mpmath import mp
    import theory
    vecs = np.random.default_rng(1).standard_normal((5, 5))
    with mp.workdps(20):
        assert abs(optimum.objective(vecs, 0.8) - float(theory.exact_objective(vecs, 0.8))) < 1e-12


def test_equal_norms_optimum_is_simplex_value():
    d, v = 5, 1.0
    res = optimum.optimise_directions(np.full(d, 2.0), v, n_random=4, rng=2)
    simplex = optimum.objective(2.0 * np.asarray(mc.simplex_matrix(d)), v)
    assert abs(res.value - simplex) < 1e-9 * simplex
    assert len(res.restarts) == 4


def test_gap_study_small():
    row = optimum.optimality_gaps(3, 1.0, n_draws=6, n_random=2, rng=3)
    assert row.excess_orf[0] > row.excess_simrf[0] > row.excess_splus[0] >= 0
    assert 0 <= row.share_splus[0] < 1
    assert "SimRF+ share of gap" in optimum.format_gap_table([row])


def test_bad_input():
    with pytest.raises(ValueError, match="norms must be a 1-D array"):
        optimum.optimise_directions([1.0], 1.0)
    with pytest.raises(ValueError, match="v must be a finite real >= 0"):
        optimum.optimise_directions([1.0, 2.0], -1.0)
    with pytest.raises(ValueError, match="need at least one start"):
        optimum.optimise_directions([1.0, 2.0], 1.0, n_random=0)
    with pytest.raises(ValueError, match=r"starts\[0\] must have shape \(N, 2\)"):
        optimum.optimise_directions([1.0, 2.0], 1.0, starts=[np.ones((3, 3))])
