"""Issue 22, item 2: pnc_orthogonal at tiny v.

``rff_mse_ratio('pnc_orthogonal', 'orthogonal', 8, '1e-300')``, ``rff_mse(...)`` and ``mse_ratio(...,
'iid', ...)`` raised ConvergenceError after 30 s: theory.mse forms rho - e^{v^2} with about
4 log2(1/v) = 4000 extra bits, and the pair conformity was a quadrature with an incomplete-gamma
inversion per node at that precision.  theory.pnc now sums the series in t = v^2/2 for small t,
each moment E[(x1 + x2)^k] one quadrature at the precision its term needs.

Oracles: E[w1^2 w2^2] = 8 int_0^{1/2} P_a^{-1}(u) Q_a^{-1}(u) du computed here with mpmath alone
(findroot on mpmath's incomplete gamma function, no theory code), which fixes the t^2 coefficient
of rho - e^{2t} exactly (M/(d(d+2)) - 1); the quadrature route of theory.pnc and the u route
(pair_conformity_u, two inversions per node) at a v where both routes apply.
"""

import pytest
from mpmath import mp
from scipy import special

import theory
import theory.pnc as pnc
from theory import _context

C = "pnc_orthogonal"
D = 8


def product_moment_u(d, dps):
    """M = E[w1^2 w2^2] = 4 E[x1 x2] = 8 int_0^{1/2} P_a^{-1}(u) Q_a^{-1}(u) du, by mpmath alone.

    The integrand is O(u^{1/a} log(1/u)) at 0: the piece below u = 1e-60 is below 1e-70 and left out."""
    with mp.workdps(dps + 10):
        a = mp.mpf(d) / 2

        def inv(u, upper):
            lu = mp.log(u)
            if upper:
                x0 = special.gammainccinv(float(a), float(u))
                g = lambda x: mp.log(mp.gammainc(a, x, mp.inf, regularized=True)) - lu  # noqa: E731
            else:
                x0 = special.gammaincinv(float(a), float(u))
                g = lambda x: mp.log(mp.gammainc(a, 0, x, regularized=True)) - lu  # noqa: E731
            return mp.findroot(g, (mp.mpf(x0) * (1 - mp.mpf("1e-3")), mp.mpf(x0) * (1 + mp.mpf("1e-3"))),
                               solver="anderson")

        pts = [mp.mpf(10) ** -60, mp.mpf(10) ** -30]
        pts += [mp.mpf(u) for u in ("1e-12", "1e-6", "1e-3", "0.05", "0.2", "0.5")]
        return 8 * mp.quad(lambda u: inv(u, False) * inv(u, True), pts)


@pytest.fixture(scope="module")
def limit_coefficient():
    """(M/(d(d+2)) - 1)/4 at 40 digits: rho - e^{v^2} = c v^4 + O(v^6), rho_RFF - e^{-z^2} = c z^4 + O(z^6)."""
    m = product_moment_u(D, 40)
    with mp.workdps(40):
        return (m / (D * (D + 2)) - 1) / 4


def test_issue_calls_return_values_at_1e_300(limit_coefficient):
    """The three calls of the issue return numbers (they raised ConvergenceError after 30 s)."""
    r_rff = theory.rff_mse_ratio(C, "orthogonal", D, "1e-300")
    mse = theory.rff_mse(C, D, "1e-300")
    r_prf = theory.mse_ratio(C, "iid", D, "1e-300")
    assert r_prf == 1  # MSE = v^2 (1 + O(v^2)) for both: the ratio is 1 - O(1e-600)
    # the RFF ratio is the ratio of the z^4 coefficients: the limit at z = 0 (the z4 hook)
    assert abs(r_rff / theory.rff_mse_ratio(C, "orthogonal", D, 0) - 1) < mp.mpf(2) ** (4 - mp.prec)
    # the MSE scales as z^4 below z = 1e-100 to every digit: the values at two z agree after scaling
    mse_150 = theory.rff_mse(C, D, "1e-150")
    with mp.workdps(30):
        assert abs(mse * mp.mpf(10) ** 1200 / (mse_150 * mp.mpf(10) ** 600) - 1) < mp.mpf(10) ** -14
    assert 0 < mse < mp.mpf("1e-1199")


@pytest.mark.parametrize("dps", [15, 40])
@pytest.mark.parametrize("kind", ["prf", "rff"])
def test_difference_at_1e_300_against_the_u_route_moment(limit_coefficient, kind, dps):
    """(rho - e^{+-v^2}) / v^4 at v = 1e-300, formed as theory.mse forms it (the conformity at 4000+ more
    bits than the result needs), equals (M/(d(d+2)) - 1)/4 to the working precision (the O(v^2)
    correction is 1e-600)."""
    with mp.workdps(dps + 1220):
        v = mp.mpf("1e-300")  # one value of v for both terms (theory reads the same binary value)
        if kind == "prf":
            diff = theory.conformity(C, D, v) - mp.exp(v * v)
        else:
            diff = theory.rff_conformity(C, D, v) - mp.exp(-v * v)
        got = diff / v ** 4
    with mp.workdps(dps):
        assert abs(got / limit_coefficient - 1) < mp.mpf(10) ** (2 - dps)
        # power: independent norms (the ORF pair, M = d^2) give another coefficient
        assert abs(-1 / mp.mpf(4 * (D + 2)) / limit_coefficient - 1) > mp.mpf("0.1")


def test_the_pnc_coefficient_is_the_registered_one(limit_coefficient):
    """The registry's rff_conformity_z4 hook (M from theory's x-route quadrature) against the mpmath-only M."""
    from theory import registry

    with mp.workdps(40):
        hook = registry.hook(C, "rff_conformity_z4")
        with _context.entered() as bits:
            _context.mp.prec = bits + 24
            b = _context.to_caller(hook(D), bits)
        assert abs(b / limit_coefficient - 1) < mp.mpf(10) ** -37


def _quadrature_route(d, v, sign):
    """theory.pnc's quadrature over the lower half, called directly (bypassing the series switch)."""
    with _context.entered() as bits:
        m = _context.mp
        m.prec = bits + 24
        vv = m.mpf(v)
        if sign > 0:
            r = pnc._expect_over_lower_half(d, lambda s: m.hyp0f1(m.mpf(d) / 2, vv * vv * s / 2), "test")
        else:
            with m.workprec(m.prec + pnc._cancellation_bits(vv)):
                r = pnc._expect_over_lower_half(d, lambda s: m.hyp0f1(m.mpf(d) / 2, -vv * vv * s / 2), "test")
        return _context.to_caller(r, bits)


@pytest.mark.parametrize("d,v", [(2, "0.0035"), (8, "0.001"), (64, "0.0039")])
def test_series_route_against_the_quadrature_and_u_routes_where_both_apply(d, v):
    """At v <= 0.0039 the series is used; the difference rho - e^{v^2} (the part the series computes) is
    compared at 30 significant digits with the direct quadrature and the u route."""
    for sign, kind in ((1, "prf"), (-1, "rff")):
        with mp.workdps(30 + 20):  # the difference is ~v^4 ~ 1e-10 .. 1e-12 of rho: 20 more digits
            vv = mp.mpf(v)
            series = theory.conformity(C, d, vv) if sign > 0 else theory.rff_conformity(C, d, vv)
            quad = _quadrature_route(d, vv, sign)
            u_route = pnc.pair_conformity_u(d, vv, kind=kind)
            base = mp.exp(sign * vv * vv)
            ds, dq, du = series - base, quad - base, u_route - base
        with mp.workdps(30):
            assert abs(ds / dq - 1) < mp.mpf(10) ** -28
            assert abs(ds / du - 1) < mp.mpf(10) ** -28
    with _context.entered():
        assert pnc._series_terms(_context.mp.mpf(v) ** 2 / 2) is not None  # the series route was taken


def test_route_choice():
    """The series covers t = v^2/2 <= 2^-17 and stops after the t^2 term at v = 1e-300 (4000 extra bits)."""
    with _context.entered():
        m = _context.mp
        with m.workprec(4200):
            assert pnc._series_terms(m.mpf("1e-300") ** 2 / 2) == 2
        with m.workprec(100):
            assert pnc._series_terms(pnc.SERIES_T_MAX) is not None
            assert pnc._series_terms(pnc.SERIES_T_MAX * 2) is None
            assert pnc._series_terms(m.mpf(0)) == 0


def test_d_beyond_mpmaths_incomplete_gamma_names_d():
    with pytest.raises(theory.ConvergenceError, match=r"a = d/2 = 50000000.0 .*the PNC closed forms reach d <= 1048576"):
        theory.conformity(C, 10**8, "0.5")


# ---------------------------------------------------------------------------
# large v: the PRF pair conformity's integrand peaks deep in the lower tail of the norms


def pair_conformity_closed_partner(d, v, dps):
    r"""The PNC PRF pair conformity for d = 2 and d = 4 by mpmath alone: the antithetic partner in closed form
    (a = 1: x2 = -ln(-expm1(-x)); a = 2: x2 = -1 - W_{-1}(-P_2(x)/e)), 0F1 as a Bessel function
    (0F1(1; z) = I_0(2 sqrt z), 0F1(2; z) = I_1(2 sqrt z)/sqrt z), and the lower half [0, median] cut at
    x = e^{-k}: every unit of ln x from 1 to 8 widths (2v/d) past the peak at x ~ e^{-v^2/d}, then every
    4 units to 20 widths."""
    with mp.workdps(dps + 10):
        vv = mp.mpf(v)
        if d == 2:
            density = lambda x: mp.exp(-x)  # noqa: E731
            partner = lambda x: -mp.log(-mp.expm1(-x))  # noqa: E731
            f0 = lambda z: mp.besseli(0, 2 * mp.sqrt(z))  # noqa: E731
            median = mp.log(2)
        else:
            density = lambda x: x * mp.exp(-x)  # noqa: E731
            lower = lambda x: mp.gammainc(2, 0, x, regularized=True)  # P_2, no cancellation at tiny x  # noqa: E731
            partner = lambda x: -1 - mp.lambertw(-lower(x) / mp.e, -1).real  # noqa: E731
            f0 = lambda z: mp.besseli(1, 2 * mp.sqrt(z)) / mp.sqrt(z)  # noqa: E731
            median = mp.findroot(lambda x: mp.exp(-x) * (1 + x) - mp.mpf(1) / 2, 1.68)
        ystar, w = vv * vv / d, 2 * vv / d
        ks = list(range(1, int(ystar + 8 * w) + 1)) + list(range(int(ystar + 8 * w) + 4, int(ystar + 20 * w), 4))
        pts = [mp.mpf(0)] + [mp.exp(-k) for k in reversed(ks) if mp.exp(-k) < median] + [median]

        def g(x):
            if x <= 0:
                return mp.mpf(0)
            return density(x) * f0(vv * vv * (x + partner(x)) / 2)

        return 2 * mp.quad(g, pts)


@pytest.mark.parametrize("d,v,dps", [(2, 5, 20), (2, 8, 30), (4, 6, 20)])
def test_large_v_against_closed_partner_route(d, v, dps):
    """At d = 2, v >= 5 and 20 digits theory.conformity('pnc_orthogonal', ...) raised ConvergenceError (the
    quadrature in x missed the peak at x ~ e^{-v^2/d}); at 15 digits, d = 2, v = 6, it returned a value
    3.7e-14 off.
    Now the tail below the 0.05 quantile is integrated in -ln x around the peak: the value agrees with the
    closed-partner route to dps - 1 digits.  Power: the x route without that treatment fails the same check
    (raises, or disagrees) at each of these points."""
    with mp.workdps(dps):
        got = theory.conformity(C, d, v)
    ref = pair_conformity_closed_partner(d, v, dps)
    with mp.workdps(dps):
        assert abs(got / ref - 1) < mp.mpf(10) ** (1 - dps)
    with _context.entered() as bits:
        m = _context.mp
        m.prec = bits
        try:
            old = _context.to_caller(
                pnc._expect_over_lower_half(d, lambda s: m.hyp0f1(m.mpf(d) / 2, m.mpf(v) ** 2 * s / 2), "x only"),
                bits)
        except theory.ConvergenceError:
            old = None
    if old is not None:
        with mp.workdps(dps):
            assert not abs(old / ref - 1) < mp.mpf(10) ** (1 - dps)


def test_u_route_is_loud_beyond_its_split_points():
    """pair_conformity_u (the second route) returned 3.7e-14-off values at d = 2, v = 6 (15 digits) and 1.3e-26
    off at d = 2, v = 5 (30 digits): its fixed split points in u miss the peak at u ~ e^{-v^2/2}.  Where the
    gamma route switches to its tail in -ln x, the u route now raises ConvergenceError naming the other route;
    below that switch (d = 8, v = 5: v^2/d = 3.1) it agrees with the gamma route to 28 of 30 digits."""
    with mp.workdps(15):
        for d, v in ((2, 6), (2, 5), (8, 6)):
            with pytest.raises(theory.ConvergenceError, match="use pair_conformity"):
                pnc.pair_conformity_u(d, v)
    with mp.workdps(30):
        a, b = pnc.pair_conformity(8, 5), pnc.pair_conformity_u(8, 5)
        assert abs(a / b - 1) < mp.mpf(10) ** -28
        assert abs(pnc.pair_conformity_u(2, 5, kind="rff") / theory.rff_conformity(C, 2, 5) - 1) < mp.mpf(10) ** -27
