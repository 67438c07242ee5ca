"""theory.symbolic: the paper's derivations redone by sympy, compared with the
closed forms (simplify(a - b) == 0) and spot-checked against mpmath."""

import numpy as np
import pytest
import sympy as sp
from mpmath import mp

import theory
from theory import symbolic, symbolic as S


def test_v2_prefactor_derivation_matches_printed_and_numeric():
    r = S.v2_prefactor_derivation()
    assert sp.simplify(r["k0"] - 1) == 0  # the k = 0 term of eq. simrf_conformity is 1
    assert sp.simplify(sp.gammasimp(r["prefactor"] - r["printed"])) == 0
    assert sp.simplify(sp.gammasimp(r["prefactor"] - (1 - r["sin_moment"]))) == 0
    with mp.workdps(30):
        for dd in (2, 5, 64):
            sym = sp.N(r["prefactor"].subs(S.d, dd), 30)
            assert abs(mp.mpf(str(sym)) - theory.simplex_v2_prefactor(dd)) < mp.mpf(10) ** -27
        # general m: P/m = m - 1 within one block
        sym_m = sp.N(r["prefactor_general"].subs({S.d: 64, r["P_over_m"]: 9}), 30)
        assert abs(mp.mpf(str(sym_m)) - theory.simplex_v2_prefactor(64, m=10)) < mp.mpf(10) ** -27


def test_v2_prefactor_derivation_has_power():
    """A dropped 1/(d-1) (or the ORF coefficient) gives a different prefactor."""
    r = S.v2_prefactor_derivation()
    wrong = 1 + (S.d - 1) * (r["a"] - 1) * (S.d - 1)
    assert sp.N((wrong - r["printed"]).subs(S.d, 8)) != 0


def test_legendre_duplication_steps():
    steps = S.legendre_duplication_steps()
    for name, expr in steps.items():
        assert S.vanishes(expr), name
        # numeric spot check at a non-integer argument
        val = expr.subs({S.d: sp.Rational(7, 3), sp.Symbol("u", positive=True): sp.Rational(5, 4)})
        assert abs(sp.N(val, 30)) < 1e-25, name
    assert not S.vanishes(steps["orf_prefactor"] + sp.gamma(S.d) / 1000)


@pytest.mark.parametrize("concrete", [None, 2, 3, 4])
def test_chi2d_reduction(concrete):
    r = S.chi2d_reduction(concrete)
    assert r["difference"] == 0


def test_simplex_gram():
    cases = S.simplex_gram_cases()
    expected = {"same_i<d": 1, "distinct_i,j<d": -1 / (S.d - 1), "i<d_with_d": -1 / (S.d - 1),
                "d_with_d": 1, "row_sum_norm2": 0}
    for key, val in expected.items():
        assert sp.simplify(cases[key] - val) == 0, key
    for n in (2, 3, 6):
        g = S.simplex_gram_matrix(n)
        assert g == sp.Matrix(n, n, lambda i, j: 1 if i == j else sp.Rational(-1, n - 1))


def test_kk1_identity():
    assert sp.simplify(S.kk1_identity() - S.x ** 2 * sp.exp(S.x)) == 0


def test_cor46_expansion_steps():
    c = S.cor46_expansion()
    k, e = S.k, S.eps
    assert sp.expand(c["sqrt_factor"] - (1 - k * e / 2)) == 0
    assert sp.expand(c["power_factor"] - (1 - k * (k - 1) * e)) == 0
    assert sp.expand(c["exp_factor"] - (1 + k ** 2 * e / 2)) == 0
    assert sp.expand(c["ratio_k"] - (1 - k * (k - 1) * e / 2)) == 0
    for kk, coeff in c["ratio_k_exact_check"].items():
        assert coeff == -sp.Rational(kk * (kk - 1), 2)
    assert sp.simplify(c["series_sum"] + e * S.z ** 4 * sp.exp(-S.z ** 2) / 2) == 0
    printed = 1 - (S.m - 1) * sp.exp(-S.z ** 2) * S.z ** 4 / (S.d * (1 - sp.exp(-S.z ** 2)) ** 2)
    assert sp.simplify(c["mse_ratio"] - printed) == 0
    # eq. appendix_ratio's (1 + e^{-z^2})^2 is a typo: it does not give eq. asymptotic_ratio
    assert sp.simplify(c["mse_ratio_printed_appendix"] - printed) != 0
    # numeric agreement of the symbolic ratio with theory.rff_asymptotic_ratio
    with mp.workdps(30):
        val = sp.N(c["mse_ratio"].subs({S.d: 64, S.m: 5, S.z: sp.Rational(3, 2)}), 30)
        assert abs(mp.mpf(str(val)) - theory.rff_asymptotic_ratio(64, "1.5", m=5)) < mp.mpf(10) ** -27


# ---------------------------------------------------------------------------
# Grids, budgets and input checks (third exploration run, findings 5 to 8).
#
# 5. Ragged grids were accepted: ``np.asarray([[1, 2], [3]], dtype=object)`` is a 1-D array of lists, each
#    list then mapped as a grid of its own, so ``mse_ratio("simplex", "iid", 4, [[1, 2], [3]])`` returned an
#    array of shape (2,) whose elements were arrays of shapes (2,) and (1,).  Now a ValueError naming v.
# 6. ``pnc.pair_conformity_u(kind=...)``: any kind but "prf" ("PRF", "hyperbolic", None, 1) gave the RFF value
#    (0.7694924781 at d = 3, v = 0.5, where the PRF value is 1.2712657666).  Now refused, naming kind.
# 7. The time budget applied per grid point: a 9-point grid under ``theory.budget(0.57)`` ran 2.6 s (0.38 s per
#    point).  An explicit budget now bounds the whole call; the default stays per point (documented in
#    ``theory.budget``).  Tested with a fake clock (one tick per reading), no wall clock.
# 8. pnc's pair functions refused lists (the package docstring promises grids of v, z and d); symbolic's
#    ``simplex_gram_matrix(2.7)`` used n = 2; ``geometry.simplex_apply({1: 2, 3: 4})`` used the dict's keys.


@pytest.mark.parametrize("n", [2.7, "3", 3.0, True])
def test_simplex_gram_matrix_refuses_non_integers(n):
    """2.7 gave the n = 2 matrix, "3" the n = 3 one (int(n))."""
    with pytest.raises(TypeError, match=r"n must be an integer >= 2"):
        symbolic.simplex_gram_matrix(n)
    with pytest.raises(ValueError, match=r"n must be an integer >= 2"):
        symbolic.simplex_gram_matrix(1)


def test_simplex_gram_matrix_bounds_n():
    """n = 10**6 started building 10^12 sympy expressions (no bound); now a ValueError naming n and the range,
    before any work; the bound itself still computes (power: the matrix at GRAM_MAX_N has its closed form's
    corner entries)."""
    import sympy as sp

    with pytest.raises(ValueError, match="n must be an integer"):  # (first: the old code computed it, about 14 s)
        symbolic.simplex_gram_matrix(symbolic.GRAM_MAX_N + 1)
    with pytest.raises(ValueError, match=rf"n must be an integer >= 2 and <= {symbolic.GRAM_MAX_N}, got 1000000"):
        symbolic.simplex_gram_matrix(10**6)
    g = symbolic.simplex_gram_matrix(24)
    assert g[0, 0] == 1 and g[0, 23] == g[22, 23] == sp.Rational(-1, 23)


def test_simplex_gram_matrix_of_an_integer():
    """Power: n = 3 (numpy's int too) gives d/(d-1) = 3/2 ... scaled: unit diagonal, -1/(n-1) off it."""
    import sympy as sp

    for n in (3, np.int64(3)):
        g = symbolic.simplex_gram_matrix(n)
        assert g == sp.Matrix(3, 3, lambda i, j: 1 if i == j else sp.Rational(-1, 2))


def test_symbolic_concrete_dimensions_refuse_floats():
    """chi2d_reduction(2.7) integrated at d = 2 (sp.Integer truncates); simrf_series_term(2.5) failed inside
    range() with a message not naming the argument."""
    with pytest.raises(TypeError, match="concrete_d must be an integer"):
        symbolic.chi2d_reduction(2.7)
    with pytest.raises(TypeError, match="kk must be an integer"):
        symbolic.simrf_series_term(2.5)
