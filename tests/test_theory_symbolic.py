"""theory.symbolic: the paper's derivations redone by sympy, compared with the
closed forms (simplify(a - b) == 0) and spot-checked against mpmath."""

import pytest
import sympy as sp
from mpmath import mp

import theory
from theory import symbolic as S


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
