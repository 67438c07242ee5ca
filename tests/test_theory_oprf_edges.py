"""Edges of theory.oprf: the optimal A at large s (relative accuracy, no ZeroDivisionError) and the OPRF MSE at
very large v (a correct value, or a loud ConvergenceError within the time budget).

References are independent of the closed form under test: the optimal A is located by mpmath.findroot on the
derivative of the per-dimension log second moment at three times the digits; the i.i.d. MSE is
expm1(L)/m written out at 600 digits from that A (x = y = v/2, so the prefactor e^{-v^2} cancels e^{v^2}; v a
power of two, so every input is exact)."""

import pytest
from mpmath import mp

import theory
from paper_checks._compare import agrees, rel_diff
from theory.oprf import optimal_a


def _reference_a(s, dps):
    """Root of d/dA [log(1-4A) - log(1-8A)/2 + s/(1-8A)] = -4/(1-4A) + 4/(1-8A) + 8s/(1-8A)^2
    = 16A/((1-4A)(1-8A)) + 8s/(1-8A)^2 (the second form: no cancellation near A = 0) by findroot."""
    with mp.workdps(dps):
        s = mp.mpf(s)
        return mp.findroot(lambda a: 16 * a / ((1 - 4 * a) * (1 - 8 * a)) + 8 * s / (1 - 8 * a) ** 2,
                           -s / 4 if s > 1 else -s / 2)


def _old_optimal_a(s):
    """The form replaced on 2026-11-27: -s / (16 A+), A+ = ((1 - 2s) + sqrt((2s+1)^2 + 8s)) / 16 (cancels at
    large s)."""
    s = mp.mpf(s)
    big = ((1 - 2 * s) + mp.sqrt((2 * s + 1) ** 2 + 8 * s)) / 16
    return -s / (16 * big)


@pytest.mark.parametrize("s", ["1e10", "1e12", "1e100", "1e300", "1e600", "0.5", "0.4999999", "0.5000001", "3",
                               "1e-300"])
@pytest.mark.parametrize("dps", [15, 40])
def test_optimal_a_has_relative_accuracy_at_every_s(s, dps):
    """optimal_a agrees with the findroot reference to dps - 1 digits for s from 1e-300 to 1e600 (both branches of
    the evaluation and its switch at s = 1/2).  Power: the replaced form, evaluated at the same working precision
    (53 + 24 guard bits for 15 digits), is off by 5e-13 at s = 1e12 (2.2e-14 at 1e10), more than the 1e-14
    asserted, and raises ZeroDivisionError from s = 1e100 at either precision."""
    ref = _reference_a(s, 3 * dps + 20)
    with mp.workdps(dps):
        got = optimal_a(s)
        assert got <= 0
        assert agrees(got, ref, dps - 1), (s, got, ref)
    if dps == 15 and s in ("1e10", "1e12"):
        with mp.workprec(53 + 24):  # 15 digits plus the guard bits theory.guarded adds
            assert rel_diff(_old_optimal_a(s), ref) > mp.mpf(10) ** -(dps - 1)
    if s in ("1e100", "1e300", "1e600"):
        with mp.workdps(dps + 8), pytest.raises(ZeroDivisionError):
            _old_optimal_a(s)


def test_optimal_a_at_large_s_is_minus_s_over_4():
    """A* = -(sqrt((2s+1)^2 + 8s) + 2s - 1)/16 = -s/4 - 1/8 + O(1/s) (expansion of the square root): at s = 1e12
    the exact value is -250000000000.125 (the float the old form returned, -250000000000.0, is off by 5e-13)."""
    with mp.workdps(30):
        assert agrees(optimal_a(10 ** 12), mp.mpf("-250000000000.125"), 20)
        assert not agrees(mp.mpf(-250000000000.0), mp.mpf("-250000000000.125"), 13)


def _reference_iid_mse(d, v, m):
    """i.i.d. OPRF MSE at x = y = v/2 (Gaussian kernel): e^{-v^2} e^{v^2} expm1(L)/m = expm1(L)/m,
    L = d log(1-4A) - (d/2) log(1-8A) + v^2/(1-8A) at the findroot A, 600 digits."""
    with mp.workdps(600):
        v = mp.mpf(v)
        a = _reference_a(v ** 2 / d, 600)
        big_l = d * mp.log(1 - 4 * a) - mp.mpf(d) / 2 * mp.log(1 - 8 * a) + v ** 2 / (1 - 8 * a)
        return mp.expm1(big_l) / m


@pytest.mark.parametrize("exponent", [20, 43, 100, 332, 996])
def test_iid_oprf_mse_at_very_large_v(exponent):
    """kernel_mse(kind='oprf', A = A*) at v = 2^exponent (1e6 ... 6.7e299; v = 1e13 is 2^43) agrees with the
    written-out reference to 13 digits at the default precision.  Power: before the fix these calls raised
    ZeroDivisionError (the default A went through the cancelling form); a wrong A (the reference's A times
    1 + 1e-6) moves the MSE by more than 1e-13 (checked at 2^43)."""
    d, m = 2, 2
    v = mp.mpf(2) ** exponent
    x = v / 2
    ref = _reference_iid_mse(d, v, m)
    with mp.workdps(15):
        got = theory.kernel_mse("iid", d, v, kind="oprf", x_norm=x, y_norm=x, m=m)
        assert agrees(got, ref, 13), (exponent, got, ref)
        if exponent == 43:
            wrong = theory.kernel_mse("iid", d, v, kind="oprf", x_norm=x, y_norm=x, m=m,
                                      A=_reference_a(v ** 2 / d, 60) * (1 + mp.mpf("1e-6")))
            assert not agrees(wrong, ref, 13)


def test_theorem_couplings_at_very_large_v_return_values():
    """kernel_mse_ratio(simplex, iid, 2, '1e13', kind='oprf') of the report and the orthogonal coupling: values in
    (0, 1] (a coupling does not raise the MSE here) instead of ZeroDivisionError; the simplex MSE at v = 2^332
    (about 1e100) is positive and at most the i.i.d. one."""
    with mp.workdps(15):
        for coupling in ("simplex", "orthogonal"):
            r = theory.kernel_mse_ratio(coupling, "iid", 2, "1e13", kind="oprf")
            assert 0 < r <= 1
        v = mp.mpf(2) ** 332
        iid = theory.kernel_mse("iid", 2, v, kind="oprf", x_norm=v / 2, y_norm=v / 2)
        simplex = theory.kernel_mse("simplex", 2, v, kind="oprf", x_norm=v / 2, y_norm=v / 2)
        assert 0 < simplex <= iid


def test_pnc_at_very_large_v_is_loud_within_the_budget():
    """pnc_orthogonal (the optimal A by a secant search on quadratures) at v = 1e13: ConvergenceError (an
    mpmath.NoConvergence) within a work budget, not ZeroDivisionError (what the first step, A* of the theorem,
    raised before the fix); mp.dps unchanged."""
    import mpmath

    before = mpmath.mp.dps
    with theory.budget(work=200_000), pytest.raises(mpmath.libmp.NoConvergence):
        theory.kernel_mse("pnc_orthogonal", 2, "1e13", kind="oprf", x_norm="5e12", y_norm="5e12")
    assert mpmath.mp.dps == before


@pytest.mark.parametrize("v", [1.2345678901234e5, 1.2345678901234e13, 3.3e100])
def test_positive_kinds_prefactor_is_exact_at_large_norms(v):
    """kernel_mse of PRFs at x = y = v/2 (not dyadic) against the written-out i.i.d. MSE (e^{v^2} - 1)/m at 100
    digits (Gaussian kernel, c = 1: e^{2 v^2 - 2(|x|^2 + |y|^2)} - K^2 with K = 1).  The prefactor's argument
    -2c(|x|^2 + |y|^2) was summed at working precision: exp magnified that rounding by |x|^2 (relative error
    2.2e-14 at v = 1.2e5, the decimal exponent off by 85 at 1.2e13); now it is formed exactly."""
    with mp.workdps(100):
        vv = mp.mpf(v)
        ref = (mp.exp(vv * vv) - 1) / 4
    for dps in (15, 40):
        with mp.workdps(dps):
            got = theory.kernel_mse("iid", 4, v, x_norm=v / 2, y_norm=v / 2)
        assert abs(got / ref - 1) < mp.mpf(10) ** (2 - dps), (dps, got, ref)
