"""theory, third exploration round: the kind MSEs at huge d, the kernel prefactor at huge norms, the OPRF variance at
small A, the default m of mean_conformity, the grids of hyperbolic_ordering.

Every reference is independent of the code under test:

* the pair terms at huge d by a term-by-term series written out here: given the norms r_i, r_j (i.i.d. chi_d) and
  the angle c, E e^{(w_i + w_j).v} = 0F1(; d/2; v^2 S / 4), S = r_i^2 + r_j^2 + 2 c r_i r_j, so
  rho(c) = sum_k (v^2/4)^k E[S^k] / ((d/2)_k k!) with E[S^k] from the multinomial expansion and the chi_d moments
  E r^{2j} = 2^j (d/2)_j, E r^{2j+1} = 2^{j+1/2} (d/2 + 1/2)_j Gamma((d+1)/2)/Gamma(d/2) (the package sums 1F1s and
  quadratures instead); the RFF pair term is the same series at v^2 -> -z^2;
* the kernel prefactors as exp(-2c(X^2 + Y^2)) at 300 digits from the exact binary norms, times the inner factor
  written out with mpmath's hyp1f1 / hyp0f1;
* the OPRF moments as (1-4A)^d (1-8A)^(-d/2) e^{2(1-4A)v^2/(1-8A)} - e^{v^2} at 700 digits (600 for large v).
"""

import mpmath
import pytest
from mpmath import mp

import theory
from paper_checks._compare import rel_diff
from theory.hyperbolic import hyperbolic_ordering


# ---------------------------------------------------------------------------
# 1. the kind MSEs at huge d: the pair excess and the sum Var + (P/m) excess


def _pair_series(d, t, c, symmetric):
    """sum_k (t/4)^k E[S^k] / ((d/2)_k k!), S = r_1^2 + r_2^2 + 2 c r_1 r_2 (module docstring), at the global
    precision; ``symmetric``: the average over +-c (only even powers of the cross term survive)."""
    h = mp.mpf(d) / 2
    eps = mp.mpf(10) ** (-mp.dps - 10)
    kmax = 1
    while abs(t) ** kmax / mp.factorial(kmax) > eps:
        kmax += 1
    rf = [mp.rf(h, j) for j in range(kmax + 1)]
    rf_half = [mp.rf(h + mp.mpf(1) / 2, j) for j in range(kmax + 1)]
    r2 = mp.exp(2 * (mp.loggamma(h + mp.mpf(1) / 2) - mp.loggamma(h)))  # (Gamma((d+1)/2)/Gamma(d/2))^2
    total = mp.mpf(0)
    for k in range(kmax + 1):
        moment = mp.mpf(0)  # E[S^k] / 2^k
        for e in range(k + 1):
            if symmetric and e % 2:
                continue
            cross = (2 * c) ** e / mp.factorial(e)
            for a in range(k - e + 1):
                b = k - e - a
                if e % 2 == 0:
                    pair = rf[a + e // 2] * rf[b + e // 2]
                else:
                    pair = r2 * rf_half[a + (e - 1) // 2] * rf_half[b + (e - 1) // 2]
                moment += cross * pair / (mp.factorial(a) * mp.factorial(b))
        total += (t / 2) ** k * moment / rf[k]  # (t/4)^k 2^k k! moment' / ((d/2)_k k!)
    return total


def _ratio_reference(kind, d, v, dps=250):
    """MSE_simplex / MSE_iid at m = d: (Var + (d-1)(pair - iid)) / Var, the pair term by :func:`_pair_series`."""
    with mp.workdps(dps):
        v = mp.mpf(v)
        c = -mp.mpf(1) / (d - 1)
        if kind == "prf":
            t, var = v * v, mp.exp(v * v) * mp.expm1(v * v)
            pair = _pair_series(d, t, c, False)
        else:
            t = v * v if kind == "hyperbolic" else -v * v
            var = mp.expm1(t) ** 2 / 2
            pair = _pair_series(d, t, c, True)
        excess = pair - mp.exp(t)
        return var, excess, (var + (d - 1) * excess) / var


def test_pair_series_reference_is_the_orf_1f1():
    """The series at c = 0 is the ORF conformity 1F1(d; d/2; v^2/2) (Vandermonde), at c = +-1/(d-1) sums to the
    package's value at moderate d (a check of the reference itself)."""
    with mp.workdps(50):
        assert rel_diff(_pair_series(6, mp.mpf("0.7") ** 2, 0, True), mp.hyp1f1(6, 3, mp.mpf("0.7") ** 2 / 2)) < 1e-45
        assert rel_diff(_pair_series(6, mp.mpf("0.7") ** 2, mp.mpf(-1) / 5, False),
                        theory.conformity("simplex", 6, "0.7")) < 1e-45


@pytest.mark.parametrize("kind", ["hyperbolic", "prf", "rff"])
@pytest.mark.parametrize("v", ["1e-3", "1e-6"])
def test_simplex_ratio_at_d_1e20_keeps_every_digit(kind, v):
    """The SimRF/IIDRF MSE ratio at d = m = 1e20 (about max(v^2/12, 4/d) for hyperbolic and RFFs, v^2/6 + 1/(2d)
    for PRFs) to 14 digits.  Before: hyperbolic 2.206e-5 instead of 8.3333373e-14 at v = 1e-3 (the pair excess,
    of order v^4/d, was formed without dimension_bits), and, once that was fixed, every kind lost log2(d) bits in
    Var + (d - 1) excess (relative error 3e-11 (PRF), 3e-10 (RFF), 1.2e-10 (hyperbolic) at v = 1e-3; 9.6e-4, 6.5e-5,
    2.1e-4 at v = 1e-6)."""
    d = 10 ** 20
    var, excess, ref = _ratio_reference(kind, d, v)
    got = theory.kernel_mse_ratio("simplex", "iid", d, v, kind=kind)
    assert rel_diff(got, ref) < 1e-14, (kind, v, got, ref)
    if kind == "hyperbolic":
        # the published numbers of the finding, and kernel_mse itself (x = y = v/2: prefactor e^{-v^2}, m = d)
        expected = {"1e-3": "8.33333733333492e-14", "1e-6": "4.0000083333353e-20"}[v]
        assert rel_diff(got, mp.mpf(expected)) < 1e-13
        half = mp.mpf(v) / 2
        with mp.workdps(250):
            mse_ref = mp.exp(-mp.mpf(v) ** 2) * (var + (d - 1) * excess) / d
            pair_ref = mp.exp(mp.mpf(v) ** 2) + excess
        got_mse = theory.kernel_mse("simplex", d, v, kind="hyperbolic", x_norm=half, y_norm=half)
        assert rel_diff(got_mse, mse_ref) < 1e-14
        with mp.workdps(90):  # the pair term's excess over e^{v^2} (of order v^4/d) to 20 digits
            pair = theory.hyperbolic.hyperbolic_pair_term("simplex", d, v)
            assert rel_diff(pair - mp.exp(mp.mpf(v) ** 2), excess) < 1e-20 and rel_diff(pair, pair_ref) < 1e-85


def test_simplex_ratio_hyperbolic_at_tiny_v_tends_to_the_limit():
    """At v = 1e-300 the ratio equals its v -> 0 limit (4d - 3)/((d - 1)(d + 2)) (from the v^4 coefficients
    1/2 and (d c^2 - 1)/(2(d + 2)), c = -1/(d - 1)) to the working precision; it was 6.47e-5 instead of 4e-20."""
    d = 10 ** 20
    limit = mp.mpf(4 * d - 3) / ((d - 1) * (d + 2))
    assert rel_diff(theory.kernel_mse_ratio("simplex", "iid", d, "1e-300", kind="hyperbolic"), limit) < 1e-14
    assert rel_diff(theory.kernel_mse_ratio("simplex", "iid", d, 0, kind="hyperbolic"), limit) < 1e-14


# ---------------------------------------------------------------------------
# 2. the kernel prefactor's argument, formed exactly

_NORMS = [(6.1e12 + 0.37, 6.1e12 - 0.21), (123456.789, 123456.2)]


def _prefactor(x, y, scale):
    return mp.exp(scale * (mp.mpf(x) ** 2 + mp.mpf(y) ** 2))


@pytest.mark.parametrize("x, y", _NORMS)
def test_prefactor_exact_in_every_function(x, y):
    """prf_mse_from_conformity, softmax_to_gaussian_factor, orthogonality_gap(_series), fixed_norm_mse and
    kernel_mse against exp(-2c(X^2 + Y^2)) times the inner factor written out, at 300 digits, d = 4, v = 1.
    Before (the argument summed at the working precision): at |x| = 6.1e12 the decimal exponents were off
    (1.0406e-32320195343240849584499649 instead of 1.4768e-...545 for the softmax MSE; 1.4926e-...249825 instead
    of 1.7782e-...249773 for the factor), at |x| = 123456.789 all five off by 4.2e-14."""
    d = 4
    with mp.workdps(300):
        e = mp.e
        orf_gap = (d - 1) * (e - mp.hyp1f1(d, mp.mpf(d) / 2, mp.mpf(1) / 2)) / d
        f = lambda t: mp.hyp0f1(mp.mpf(d) / 2, t)  # noqa: E731
        mu, second, pair = f(mp.mpf(d) / 4), f(d), f(mp.mpf(d) / 2)
        fixed_inner = ((second - mu ** 2) + (d - 1) * (pair - mu ** 2)) / d + (mu - mp.exp(mp.mpf(1) / 2)) ** 2
        refs = {
            "prf_mse_from_conformity": _prefactor(x, y, -1) * e * (e - 1),
            "kernel_mse": _prefactor(x, y, -1) * e * (e - 1),
            "softmax_to_gaussian_factor": _prefactor(x, y, -mp.mpf(1) / 2),
            "orthogonality_gap": _prefactor(x, y, -2) * orf_gap,
            "orthogonality_gap_series": _prefactor(x, y, -2) * orf_gap,
            "fixed_norm_mse": _prefactor(x, y, -2) * fixed_inner,
        }
    got = {
        "prf_mse_from_conformity": theory.prf_mse_from_conformity(mpmath.e, 1.0, m=1, x_norm=x, y_norm=y,
                                                                  kernel="softmax"),
        "kernel_mse": theory.kernel_mse("iid", d, 1.0, m=1, x_norm=x, y_norm=y, kernel="softmax"),
        "softmax_to_gaussian_factor": theory.softmax_to_gaussian_factor(x, y),
        "orthogonality_gap": theory.orthogonality_gap(d, 1.0, x_norm=x, y_norm=y),
        "orthogonality_gap_series": theory.orthogonality_gap_series(d, 1.0, x_norm=x, y_norm=y),
        "fixed_norm_mse": theory.fixed_norm.fixed_norm_mse(d, 1.0, x_norm=x, y_norm=y),
    }
    for name, ref in refs.items():
        assert rel_diff(got[name], ref) < 1e-15, (name, got[name], ref)


def test_prefactor_of_the_gaussian_prf_mse_from_conformity():
    """The Gaussian kernel (-2 in the exponent) through prf_mse_from_conformity too, m = 2 with a pair term."""
    x, y = _NORMS[1]
    with mp.workdps(300):
        e = mp.e
        ref = _prefactor(x, y, -2) * (e * (e - 1) + (mp.mpf(3) - e)) / 2
    got = theory.prf_mse_from_conformity(3, 1.0, m=2, x_norm=x, y_norm=y)
    assert rel_diff(got, ref) < 1e-15


# ---------------------------------------------------------------------------
# 3. the OPRF variance at small |A| (and large v)


def _oprf_second_minus_iid(d, v, a, dps=700):
    """E[b^2] - e^{v^2} written out: (1-4A)^d (1-8A)^(-d/2) e^{2(1-4A)v^2/(1-8A)} - e^{v^2}."""
    with mp.workdps(dps):
        a, v2 = mp.mpf(a), mp.mpf(v) ** 2
        return (1 - 4 * a) ** d * (1 - 8 * a) ** (-mp.mpf(d) / 2) * mp.exp(2 * (1 - 4 * a) * v2 / (1 - 8 * a)) \
            - mp.exp(v2)


def _old_log_excess(d, v2, a):
    """The replaced form: two logarithms that cancel to 8 d A^2."""
    return d * mp.log1p(-4 * a) - mp.mpf(d) / 2 * mp.log1p(-8 * a) + v2 / (1 - 8 * a)


@pytest.mark.parametrize("a", ["-1e-14", "-1e-17", "-1e-20", "-1e-25", "-1e-30", "-1e-300", "1e-20", "-0.3", "0.1"])
@pytest.mark.parametrize("v", ["0", "0.5"])
def test_oprf_variance_at_small_a(a, v):
    """kernel_mse (iid, m = 1, x = y = 1) = e^{-4} (E[b^2] - e^{v^2}) to 14 digits for every A, also A -> 0.
    Before (at v = 0, d = 4): relative error 7.7e-14 (A = -1e-14), 1.6e-10 (-1e-17), 1.4e-7 (-1e-20), 2.3e-3
    (-1e-25), and 0.0 returned at -1e-30 (the two logarithms cancel to 8 d A^2, losing log2(1/(2|A|)) bits):
    the replaced form is evaluated below at the precision _variance gave it and fails the check."""
    d = 4
    ref = _oprf_second_minus_iid(d, v, a)
    with mp.workdps(700):
        ref_mse = mp.exp(-4) * ref
    got = theory.kernel_mse("iid", d, v, kind="oprf", A=a, x_norm=1, y_norm=1, m=1)
    assert rel_diff(got, ref_mse) < 1e-14, (a, v, got, ref_mse)
    assert rel_diff(theory.oprf.second_moment(d, v, a), ref + mp.exp(mp.mpf(v) ** 2)) < 1e-14
    if v == "0" and a in ("-1e-20", "-1e-25", "-1e-30"):
        with mp.workprec(53 + 24 + 8 + 2):  # the guard bits theory.guarded and the old _variance added
            old = mp.expm1(_old_log_excess(d, mp.mpf(0), mp.mpf(a)))
        assert old == 0 or rel_diff(old, ref) > 1e-8


def test_oprf_published_cases():
    """The finding's three calls: 5.861e-61 (was 0.0), the SimRF/IID ratio 1.0 at v = 1e-300 (the A-variance
    3.2e-59 dominates the O(v^2) pair terms; was 0.1164), and 3.2e-199 at A = -1e-100 (was 1.0e-600)."""
    with mp.workdps(700):
        first = mp.exp(-4) * _oprf_second_minus_iid(4, 0, "-1e-30")
        third = mp.exp(-mp.mpf("1e-600")) * _oprf_second_minus_iid(4, "1e-300", "-1e-100")
    assert rel_diff(theory.kernel_mse("iid", 4, 0, kind="oprf", A="-1e-30", x_norm=1, y_norm=1, m=1), first) < 1e-14
    ratio = theory.kernel_mse_ratio("simplex", "iid", 4, "1e-300", kind="oprf", A="-1e-30")
    assert abs(ratio - 1) < 1e-15
    got = theory.kernel_mse("iid", 4, "1e-300", kind="oprf", A="-1e-100", x_norm="1e-300", y_norm=0, m=1)
    assert rel_diff(got, third) < 1e-14


def test_oprf_variance_at_large_v():
    """v = 2^33, A = -1/128 (exact inputs), x = y = v/2 (prefactor e^{-v^2}): the MSE is
    E[b^2] e^{-v^2} - 1 = e^{X} - 1, X = 4 log(1+1/32) - 2 log(1+1/16) + v^2/(1+1/16) ~ 6.9e19, written out at 600
    digits.  exp magnifies the rounding of X by X: with X at 8 + mag(d) guard bits kernel_mse was off by 1.1e-7
    and second_moment by 5.8e-5; X is now formed with mag(X) more bits."""
    d, v, a = 4, mp.mpf(2) ** 33, mp.mpf(-1) / 128
    with mp.workdps(600):
        x = d * mp.log(1 - 4 * a) - mp.mpf(d) / 2 * mp.log(1 - 8 * a) + 2 * (1 - 4 * a) * v ** 2 / (1 - 8 * a) - v ** 2
        ref = mp.expm1(x)
        with mp.workprec(53 + 24 + 8 + 3):
            old = mp.expm1(_old_log_excess(d, v ** 2, a))
        assert rel_diff(old, ref) > 1e-12  # the old precision fails
    got = theory.kernel_mse("iid", d, v, kind="oprf", A=a, x_norm=v / 2, y_norm=v / 2, m=1)
    assert rel_diff(got, ref) < 1e-14  # was 1.1e-7
    with mp.workdps(600):
        second = mp.exp(x + v ** 2)
    assert rel_diff(theory.oprf.second_moment(d, v, a), second) < 1e-14  # was 5.8e-5


# ---------------------------------------------------------------------------
# 4, 5. argument errors


@pytest.mark.parametrize("coupling, kw", [("orthogonal", {}), ("iid", {"kind": "hyperbolic"}), ("iid", {})])
def test_mean_conformity_default_m_needs_two(coupling, kw):
    """The default m = d = 1 is held to the documented m >= 2 (was a bare ZeroDivisionError(''))."""
    with pytest.raises(ValueError, match=r"m must be an integer >= 2.*default m = d = 1"):
        theory.mean_conformity(coupling, 1, 1.0, **kw)
    assert theory.mean_conformity(coupling, 1, 1.0, m=2, **kw) > 0  # an explicit m is fine


@pytest.mark.parametrize("ds, vs, name", [(4, ["1"], "ds"), ([4], "0.5", "vs"), ([4], 0.5, "vs"), ("48", ["1"], "ds")])
def test_hyperbolic_ordering_refuses_non_grids(ds, vs, name):
    """A scalar or a string for ds / vs is refused naming it (was: TypeError 'int' object is not iterable; the
    string '0.5' was iterated and '.' reported)."""
    with pytest.raises(TypeError, match=rf"^{name} must be a sequence"):
        hyperbolic_ordering(ds, vs)


def test_hyperbolic_ordering_checks_every_d_first():
    """Every d is checked (naming ds) before any work; an empty grid and a bad precision are named."""
    with pytest.raises(ValueError, match=r"^ds must be an integer >= 2"):
        hyperbolic_ordering([8, 1], ["1"])
    with pytest.raises(TypeError, match=r"^ds must be an integer"):
        hyperbolic_ordering([8.0], ["1"])
    with pytest.raises(ValueError, match=r"^vs must hold at least one value"):
        hyperbolic_ordering([8], [])
    with pytest.raises(ValueError, match=r"^max_prec must be an integer >= 64"):
        hyperbolic_ordering([8], ["1"], prec=64, max_prec=32)
