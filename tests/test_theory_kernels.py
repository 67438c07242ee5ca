"""Tests of :mod:`theory.kernels`: the kernels, their prefactors, block sizes and the MSE from a conformity."""

import sys

import pytest
from mpmath import mp

import theory
from _support import rel_err


# ---------------------------------------------------------------------------
# Regression tests for the findings of issue 11, one block per item, each against an
# independent computation (mpmath's own series at high precision, arb balls from
# python-flint, a dense scan, or a closed form).


def test_block_sizes_and_huge_m_are_constant_memory():
    sizes = theory.block_sizes(1, 10 ** 9)
    assert len(sizes) == 10 ** 9 and sizes[-1] == 1 and sys.getsizeof(sizes) < 200
    assert theory.block_sizes(3, 10) == [3, 3, 3, 1] and theory.block_sizes(3, 9) != [3, 3, 3, 1]
    with mp.workdps(30):
        v = mp.mpf("0.1")
        got = theory.prf_mse("iid", 1, v, m=10 ** 9, x_norm=v / 2, y_norm=v / 2)
        assert rel_err(got, mp.exp(-v * v) * mp.exp(v * v) * mp.expm1(v * v) / 10 ** 9) < mp.mpf(10) ** -28
        # a block structure with pairs: P = q d (d - 1) + r (r - 1) in closed form
        r = theory.mse_ratio("orthogonal", "iid", 7, "0.5", m=10 ** 12 + 3)
        q, rem = divmod(10 ** 12 + 3, 7)
        p_over_m = mp.mpf(q * 42 + rem * (rem - 1)) / (10 ** 12 + 3)
        excess = theory.conformity("orthogonal", 7, "0.5") - mp.exp(mp.mpf("0.25"))
        ref = 1 + p_over_m * excess / (mp.exp(mp.mpf("0.25")) * mp.expm1(mp.mpf("0.25")))
        assert rel_err(r, ref) < mp.mpf(10) ** -27


@pytest.mark.parametrize("call,kind,match", [
    (lambda: theory.rff_mse_ratio("simplex", "orthogonal", 1, "0.5"), ValueError, "d must be an integer >= 2"),
    (lambda: theory.ensemble_conformity("x", 1, 4, 5), ValueError, "rho_block must be a real number"),
    (lambda: theory.ensemble_conformity(2, 1, 0, 5), ValueError, "d must be an integer >= 1"),
    (lambda: theory.prf_mse_from_conformity(-1, "0.5", m=4, x_norm="0.3", y_norm="0.3"), ValueError,
     "rho must lie in"),
    (lambda: theory.rff_mse_from_conformity(5, "0.5", m=4), ValueError, "rho must lie in"),
    (lambda: theory.simplex_apply("123"), TypeError, "x must be a sequence or 1-D array"),
    (lambda: theory.simplex_vectors(10 ** 6), ValueError, "use simplex_apply"),
    (lambda: theory.pdf_wij_float("1", 4, 0), TypeError, "w must be a real number"),
    (lambda: theory.conformity("simplex", 8, [1, [2]]), ValueError, "v must be a real number"),
])
def test_bad_input_named(call, kind, match):
    with pytest.raises(kind, match=match):
        call()


def test_mse_from_conformity_range_is_the_variance_bound():
    """The refused rho are exactly those with a negative MSE (power of the check)."""
    with mp.workdps(30):
        v, m = mp.mpf("0.5"), 4
        lo = mp.exp(v * v) - mp.exp(v * v) * mp.expm1(v * v) / (m - 1)
        assert theory.prf_mse_from_conformity(lo, v, m=m, x_norm=v / 2, y_norm=v / 2) < mp.mpf(10) ** -25
        with pytest.raises(ValueError):
            theory.prf_mse_from_conformity(lo * (1 - mp.mpf(10) ** -6), v, m=m, x_norm=v / 2, y_norm=v / 2)
