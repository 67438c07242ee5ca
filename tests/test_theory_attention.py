"""theory.attention: the cross-pair conformity E[e^{w_i.z1 + w_j.z2}] of coupled directions with different vectors
(issue 41 item 1): two independent routes agree to the working precision, it reduces to the paper's conformity
at z1 = z2, Monte Carlo of the coupled samplers agrees (and rejects the iid value), the feature kinds' forms
(hyperbolic, oprf for every A) against Monte Carlo, bad input refused."""

import math

import mpmath
import numpy as np
import pytest

import montecarlo as mc
import theory
from theory import attention as ta

#: (z1, z2) in d = 3: |z1|^2 = 0.77, |z2|^2 = 1.22, z1.z2 = -0.23.
Z1 = np.array([0.8, 0.3, -0.2])
Z2 = np.array([-0.5, 0.9, 0.4])


@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
@pytest.mark.parametrize("d,A,B,C", [(3, 1.0, 2.0, 0.7), (8, 16.0, 9.0, -5.0), (5, 3.0, 0.5, 1.2)])
def test_two_routes_agree(coupling, d, A, B, C):
    """The closed form (phi-average of the series in det X) against the conditional route (one integral over
    t of chi-moment series), 15 digits; and not against another coupling's value (power)."""
    with mpmath.workdps(15):  # the default work budget guards against a hang, the same on any machine
        main = ta.cross_conformity(coupling, d, A, B, C)
        other = ta.cross_conformity_conditional(coupling, d, A, B, C)
        assert abs(main - other) <= 1e-13 * abs(main)
        wrong = ta.cross_conformity("simplex" if coupling == "orthogonal" else "orthogonal", d, A, B, C)
        assert abs(main - wrong) > 1e-6 * abs(main)


@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex"])
def test_reduces_to_the_conformity_at_equal_vectors(coupling):
    with mpmath.workdps(30):
        for d, v in ((3, mpmath.mpf("0.7")), (16, mpmath.mpf(2))):
            got = ta.cross_conformity(coupling, d, v * v, v * v, v * v)
            assert abs(got - theory.conformity(coupling, d, v)) <= mpmath.mpf(10) ** -27 * got


def test_the_precision_is_the_callers():
    with mpmath.workdps(40):
        hi = ta.cross_conformity("simplex", 4, "1.5", "0.75", "-0.4")
    with mpmath.workdps(15):
        lo = ta.cross_conformity("simplex", 4, "1.5", "0.75", "-0.4")
    assert mpmath.mp.dps == 15
    assert abs(hi - lo) <= 1e-14 * abs(hi) and hi != lo


def _pairs(coupling, d, n_blocks, seed):
    """The first two rows of n_blocks independent (d, d) blocks of the sampler: coupled pairs."""
    W = mc.sample_weights(coupling, d, d * n_blocks, rng=seed).reshape(n_blocks, d, d)
    return W[:, 0], W[:, 1]


@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
def test_monte_carlo_of_the_coupled_samplers(coupling):
    """400 000 coupled pairs of montecarlo's sampler: the mean of e^{w_i.z1 + w_j.z2} within 4 standard errors of
    the closed form (false alarm 6e-5), and more than 4 away from the iid value e^{(A+B)/2} (power; measured
    6.3 and 17.9 standard errors)."""
    w1, w2 = _pairs(coupling, 3, 400_000, 0)
    vals = np.exp(w1 @ Z1 + w2 @ Z2)
    mean, se = vals.mean(), vals.std() / math.sqrt(len(vals))
    A, B, C = Z1 @ Z1, Z2 @ Z2, Z1 @ Z2
    want = float(ta.cross_conformity(coupling, 3, A, B, C))
    assert abs(mean - want) < 4 * se
    assert abs(mean - math.exp((A + B) / 2)) > 4 * se


@pytest.mark.parametrize("kind,A", [("hyperbolic", None), ("oprf", -0.3), ("oprf", 0.05)])
def test_kinds_against_monte_carlo(kind, A):
    """The kinds' statistics on 400 000 simplex pairs: hyperbolic cosh, oprf's tilted form (the closed form says
    its pair moment is the prf's for every A); within 4 standard errors; the single-direction moment too."""
    w1, w2 = _pairs("simplex", 3, 400_000, 1)
    a, b, c = Z1 @ Z1, Z2 @ Z2, Z1 @ Z2

    def stat(w, z):
        if kind == "hyperbolic":
            return np.cosh(w @ z)
        beta = math.sqrt(1 - 4 * A)
        return (1 - 4 * A) ** 1.5 * np.exp(2 * A * (w * w).sum(-1) + beta * (w @ z))

    vals = stat(w1, Z1) * stat(w2, Z2)
    want = float(ta.cross_pair_moment("simplex", 3, a, b, c, kind=kind, A=A))
    assert abs(vals.mean() - want) < 4 * vals.std() / math.sqrt(len(vals))
    one = stat(w1, Z1) * stat(w1, Z2)
    want1 = float(ta.same_direction_moment(3, a, b, c, kind=kind, A=A))
    assert abs(one.mean() - want1) < 4 * one.std() / math.sqrt(len(one))


def test_bad_input():
    with pytest.raises(ValueError, match="z12 must satisfy"):
        ta.cross_conformity("orthogonal", 4, 1, 1, 2)
    with pytest.raises(ValueError, match="coupling must be one of 'iid', 'orthogonal', 'simplex'"):
        ta.cross_conformity("pnc_orthogonal", 4, 1, 1, 0)
    with pytest.raises(ValueError, match="z1_sq must be >= 0"):
        ta.cross_conformity("orthogonal", 4, -1, 1, 0)
    with pytest.raises(ValueError, match="kind must be one of"):
        ta.cross_pair_moment("orthogonal", 4, 1, 1, 0, kind="rff")
    with pytest.raises(ValueError, match="A must be < 1/8"):
        ta.same_direction_moment(4, 1, 1, 0, kind="oprf", A=0.125)
    with pytest.raises(ValueError, match="needs its parameter A"):
        ta.cross_pair_moment("orthogonal", 4, 1, 1, 0, kind="oprf")
