"""Small v: relative accuracy where the closed forms are differences of nearly equal numbers, and the time
budget at tiny v (found by an exploration helper).

theory.fixed_norm formed mu/mu0 - 1, E b^2 - mu^2 and rho - mu^2 at the working precision: silent zeros and
negative MSEs at small v (fixed_norm_bias(8, 1e-20) = 0.0, the RFF full-block MSE -4.1e-24 at z = 1e-3).
theory._series.log2abs took a full-precision logarithm (8 s at 266k bits, not interruptible) to read an
exponent: theory.mse_ratio at v = 1e-20000 ran 10-18 s under a 3 s budget (1.1 s after; checked structurally,
not by the clock: log2abs must not call the logarithm).

The references are independent of the module: the same moments through mpmath's Bessel functions in the
global context at several hundred to a few thousand digits (enough for the cancellation), and leading orders
derived by hand (in the docstrings)."""

import math

import pytest
from mpmath import mp

from theory import _context, fixed_norm as fn
from theory._series import log2abs


def _hyp(d, t, kind):
    r"""0F1(; d/2; +-t^2/4) = Gamma(b) (t/2)^{1-b} I_{b-1}(t) (PRF, +) or J_{b-1}(t) (RFF, -), b = d/2."""
    b = mp.mpf(d) / 2
    if not t:
        return mp.mpf(1)
    bessel = mp.besseli if kind == "prf" else mp.besselj
    return mp.gamma(b) * (t / 2) ** (1 - b) * bessel(b - 1, t)


def _reference(kind, d, v, m=None, xn=0, yn=0, dps=None):
    """(bias, MSE) in the global context at ``dps`` digits (default: what v^8 against 1 needs), rounded to 40."""
    if dps is None:
        dps = 60 + max(0, int(-8 * mp.log10(v))) if v else 60
    with mp.workdps(dps):
        v = mp.mpf(v)  # unrounded: v (and xn) may carry more digits than the caller's context
        sign = 1 if kind == "prf" else -1
        rd = mp.sqrt(d)
        mu = _hyp(d, rd * v, kind)
        second = _hyp(d, 2 * rd * v, kind) if kind == "prf" else (1 + _hyp(d, 2 * rd * v, kind)) / 2
        pair = _hyp(d, mp.sqrt(2 * d) * v, kind)
        mu0 = mp.exp(sign * v ** 2 / 2)
        bias = mu / mu0 - 1
        if m is None:
            return +bias, None
        q, r = divmod(m, d)
        p = mp.mpf(q * d * (d - 1) + r * (r - 1)) / m
        pref = mp.exp(-2 * (mp.mpf(xn) ** 2 + mp.mpf(yn) ** 2)) if kind == "prf" else 1
        mse = pref * (((second - mu ** 2) + p * (pair - mu ** 2)) / m + (mu - mu0) ** 2)
    with mp.workdps(40):
        return +bias, +mse


def _rel(a, b):
    with mp.workdps(50):
        return abs(a - b) / abs(b)


TINY = [mp.mpf("1e-5"), mp.mpf("1e-20"), mp.mpf("1e-300")]  # binary values, passed unchanged to both sides


@pytest.mark.parametrize("kind", ["prf", "rff"])
@pytest.mark.parametrize("d", [3, 8])
@pytest.mark.parametrize("v", TINY, ids=["1e-5", "1e-20", "1e-300"])
def test_fixed_norm_bias_at_small_v_against_the_bessel_route(kind, d, v):
    """Relative agreement to the last digits at 15 digits.  Power: the old evaluation gave 0.0 at v = 1e-20 and
    -2.5146e-22 at v = 1e-5 (true -2.49999999999722e-22: 6e-3 relative), both far outside 1e-13."""
    with mp.workdps(15):
        got = fn.fixed_norm_bias(d, v, kind=kind)
        assert mp.dps == 15
    ref, _ = _reference(kind, d, v, dps=60 + int(-4 * mp.log10(v)))
    assert got < 0 and _rel(got, ref) < 1e-13
    assert _rel(mp.mpf("-2.5146290621612e-22"), _reference("prf", 8, TINY[0])[0]) > 1e-3  # the old value fails


@pytest.mark.parametrize("kind", ["prf", "rff"])
def test_fixed_norm_bias_leading_order(kind):
    r"""mu = 0F1(; d/2; +-d s/4) = 1 +- s/2 + d s^2/(8(d+2)) + O(s^3), s = v^2 ((d/4)^2 / ((d/2)(d/2+1) 2!)),
    mu_0 = e^{+-s/2} = 1 +- s/2 + s^2/8 + O(s^3): mu/mu_0 - 1 = -s^2/(4(d+2)) + O(s^3) for both kinds.
    At v = 1e-20 the O(s^3) correction is 1e-40 relative; at 40 digits the agreement is to 1e-35."""
    v = mp.mpf("1e-20")
    with mp.workdps(40):
        for d in (1, 2, 8, 1000):
            lead = -v ** 4 / (4 * (d + 2))
            assert _rel(fn.fixed_norm_bias(d, v, kind=kind), lead) < 1e-35
        assert _rel(fn.fixed_norm_bias(8, v, kind=kind), -v ** 4 / (4 * 11)) > 1e-3  # a wrong (d+3) fails


@pytest.mark.parametrize("d, z, m", [(8, "1e-3", 8), (8, "1e-8", 8), (5, "1e-3", 7), (3, "1e-30", 9)])
def test_fixed_norm_rff_mse_at_small_z_against_the_bessel_route(d, z, m):
    """The RFF MSE at 15 digits against the Bessel route at 60 + 8 log10(1/z) digits.  Power: the old
    evaluation gave -4.135e-24 at (8, 1e-3, 8) and -5.790e-24 at (8, 1e-8, 8) (true 1.7361e-27, 1.7361e-67)."""
    z = mp.mpf(z)
    with mp.workdps(15):
        got = fn.fixed_norm_mse(d, z, kind="rff", m=m)
    _, ref = _reference("rff", d, z, m)
    assert got > 0 and _rel(got, ref) < 1e-13
    assert _rel(mp.mpf("-4.13527806325129e-24"), _reference("rff", 8, mp.mpf("1e-3"), 8)[1]) > 1  # old value


@pytest.mark.parametrize("d", [2, 3, 8, 20])
@pytest.mark.parametrize("q", [1, 3])
def test_fixed_norm_rff_full_blocks_leading_order(d, q):
    r"""m = q d (full blocks): with w_i = sqrt(d) u_i, sum_i (w_i^T z)^2 = d z^2 is constant, so the block sum
    of cos(w_i^T z) = d - d z^2/2 + A/24 + O(z^6), A = d^2 z^4 sum_i e_i^4 (e a uniform unit vector):
    Var(block) = d^4 z^8 Var_d / 576, Var_d = E(sum e_i^4)^2 - (E sum e_i^4)^2
    = (9d + 96)/((d+2)(d+4)(d+6)) - 9/(d+2)^2 (E e_1^4 = 3/(d(d+2)), E e_1^8 = 105/(d(d+2)(d+4)(d+6)),
    E e_1^4 e_2^4 = 9/(d(d+2)(d+4)(d+6))).  With q independent blocks and the squared bias (z^4/(4(d+2)))^2:
    MSE = z^8 (d^2 Var_d/(576 q) + 1/(16 (d+2)^2)) (1 + O(z^2)); 1/576 at d = 8, q = 1.  Power: with 1/q
    dropped (q = 3) the check fails."""
    z = mp.mpf("1e-8")
    with mp.workdps(30):
        var_d = mp.mpf(9 * d + 96) / ((d + 2) * (d + 4) * (d + 6)) - mp.mpf(9) / (d + 2) ** 2
        sq_bias = mp.mpf(1) / (16 * (d + 2) ** 2)
        lead = z ** 8 * (d ** 2 * var_d / (576 * q) + sq_bias)
        got = fn.fixed_norm_mse(d, z, kind="rff", m=q * d)
        assert _rel(got, lead) < 1e-14
        if q > 1:
            assert _rel(got, z ** 8 * (d ** 2 * var_d / 576 + sq_bias)) > 1e-3


@pytest.mark.parametrize("m", [8, 11])
def test_fixed_norm_prf_mse_at_tiny_v(m):
    r"""PRF: E b^2 = 0F1(; d/2; d s) = 1 + 2s + O(s^2), mu^2 = 1 + s + O(s^2), the pair term 0F1(; d/2; d s/2)
    = 1 + s + O(s^2): Var b = s + O(s^2), rho - mu^2 = O(s^2), squared bias O(s^4), so MSE = v^2/m (1 + O(v^2))
    (x = v e, y = 0: the prefactor is e^{-2 v^2}).  1.25e-601 at v = 1e-300, m = 8; the old evaluation gave 0.0.
    Also the Bessel route at 1300 digits, and at v = 1e-5 where the O(v^2) terms count."""
    v = mp.mpf("1e-300")
    with mp.workdps(15):
        got = fn.fixed_norm_mse(8, v, x_norm=v, y_norm=0, m=m)
        assert _rel(got, v ** 2 / m) < 1e-14
        assert _rel(got, _reference("prf", 8, v, m, xn=v, dps=1300)[1]) < 1e-13
        v5 = mp.mpf("1e-5")
        assert _rel(fn.fixed_norm_mse(8, v5, x_norm=v5, y_norm=0, m=m), _reference("prf", 8, v5, m, xn=v5)[1]) < 1e-13


@pytest.mark.parametrize("z", ["1e-3", "0.5", "2"])
def test_fixed_norm_rff_d1_is_deterministic(z):
    r"""d = 1: w = +-1, cos(w z) = cos z has no variance, so MSE = (cos z - e^{-z^2/2})^2 exactly (elementary
    functions at 100 digits).  Power: the old difference of moments left rounding noise, 6.94444120338e-27
    against 6.94444120370e-27 at z = 1e-3 (5e-11 relative)."""
    with mp.workdps(100):
        zz = mp.mpf(z)
        ref = (mp.cos(zz) - mp.exp(-zz ** 2 / 2)) ** 2
    with mp.workdps(15):
        for m in (1, 4):
            assert _rel(fn.fixed_norm_mse(1, z, kind="rff", m=m), ref) < 1e-14
    if z == "1e-3":
        assert _rel(mp.mpf("6.94444120338311e-27"), ref) > 1e-12


@pytest.mark.parametrize("kind", ["prf", "rff"])
@pytest.mark.parametrize("d", [2, 8, 33])
def test_fixed_norm_both_routes_against_the_bessel_route(kind, d):
    """v from the series route (v^2 small against the precision) through the switch to the closed forms with
    measured guard bits, at 30 digits, partial and full blocks."""
    for v in ("0.001", "0.02", "0.1", "0.3", "1.5", "4"):
        kw = dict(x_norm=v, y_norm=0) if kind == "prf" else {}
        for m in (d, 2 * d + 1):
            with mp.workdps(30):
                got_b = fn.fixed_norm_bias(d, v, kind=kind)
                got_m = fn.fixed_norm_mse(d, v, kind=kind, m=m, **kw)
                assert mp.dps == 30
            ref_b, ref_m = _reference(kind, d, _dec(v), m, xn=_dec(v) if kind == "prf" else 0)
            assert _rel(got_b, ref_b) < 1e-28 and _rel(got_m, ref_m) < 1e-28, (v, m)


def _dec(v):
    """The decimal v as the functions read it at 30 digits plus guard bits (a decimal string is rounded there):
    exact enough, since the 40-digit comparison above is at 1e-28."""
    with mp.workdps(200):
        return mp.mpf(v)


# ---------------------------------------------------------------------------
# log2abs and the budget at tiny v


def test_log2abs_reads_the_exponent_without_a_logarithm(monkeypatch):
    """log2abs(1e-100000) = -100000 log2(10) to 1e-12 relative (float arithmetic, independent), and other
    magnitudes against mpmath's log at 60 digits.  Power: with the private context's log disabled the old
    implementation (float(mp.log(|x|, 2)), 8 s at 266k bits) raises; the exponent route does not need it."""

    def no_log(*args, **kwargs):
        raise AssertionError("log2abs took a working-precision logarithm")

    monkeypatch.setattr(_context.mp, "log", no_log)
    x = _context.mp.mpf("1e-100000")
    assert abs(log2abs(x) / (-100000 * math.log2(10)) - 1) < 1e-12
    with _context.mp.workprec(266_000):
        big = _context.mp.mpf(1) / 3 * _context.mp.mpf(2) ** -66_000  # a 266k-bit mantissa
        assert abs(log2abs(big) - (-66_000 - math.log2(3))) < 1e-9
    monkeypatch.undo()
    with mp.workdps(60):
        for s in ("1e-300", "0.75", "-3", "12345.678", "-1e+5000"):
            ref = float(mp.log(abs(mp.mpf(s)), 2))
            assert abs(log2abs(mp.mpf(s)) - ref) <= 1e-13 * (1 + abs(ref))
    assert log2abs(mp.mpf(0)) == float("-inf") and log2abs(mp.inf) == float("inf") and math.isnan(log2abs(mp.nan))


def test_fixed_norm_property_over_decades_of_v():
    """Property over the domain (hypothesis, derandomised): d in [1, 40], v from 1e-60 to 5, both kinds, any m in
    [1, 3d], at 20 digits, against the Bessel route at the digits the cancellation needs (1e-17 relative)."""
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(kind=st.sampled_from(["prf", "rff"]), d=st.integers(1, 40), exponent=st.floats(-60, 0.7),
           m_frac=st.floats(0, 1))
    def check(kind, d, exponent, m_frac):
        m = 1 + int(m_frac * (3 * d - 1))
        with mp.workdps(30):
            v = +mp.mpf(10) ** exponent
        kw = dict(x_norm=v, y_norm=0) if kind == "prf" else {}
        with mp.workdps(20):
            got_b = fn.fixed_norm_bias(d, v, kind=kind)
            got_m = fn.fixed_norm_mse(d, v, kind=kind, m=m, **kw)
        ref_b, ref_m = _reference(kind, d, v, m, xn=v if kind == "prf" else 0)
        assert _rel(got_b, ref_b) < 1e-17 and _rel(got_m, ref_m) < 1e-17, (kind, d, v, m)

    check()
