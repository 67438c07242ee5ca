"""Pairwise norm-coupled orthogonal features (coupling 'pnc_orthogonal', ICLR 2025), added through the registry.

Closed forms (theory.pnc, quadrature in the gamma variable) are checked against a second quadrature
in the uniform variable at 30 digits, against a float64 scipy route, against their small-argument
coefficients, and against Monte Carlo from the sampler (montecarlo.pnc) on both projection paths.
Monte Carlo comparisons use |z| <= Z_CRIT = 4.5 (two-sided false alarm 6.8e-6 each; 10 comparisons:
6.8e-5 family-wise); every one has a power check against the ORF prediction it must reject.
"""

import mpmath
import numpy as np
import pytest
from mpmath import mp
from scipy import integrate, special, stats

import montecarlo as mc
import theory
import theory.pnc as pnc
from _support import pnc_rule_builds
from montecarlo.audit import CLAIMABLE_COUPLINGS, audit
from paper_checks._compare import Z_CRIT, assert_agree
from theory import _context, registry

C = "pnc_orthogonal"


def test_registered_through_the_registry():
    rec = registry.get(C)
    assert rec.exact and rec.isotropic and rec.cos_theta(7) == 0
    assert rec.coupled_norm_pairs(5) == ((0, 1), (2, 3))
    assert C in mc.COUPLINGS and C in mc.EXACT_COUPLINGS and C in theory.PRF_COUPLINGS and C in theory.RFF_COUPLINGS
    assert C in CLAIMABLE_COUPLINGS
    for h in rec.closed_forms + rec.samplers:
        registry.hook(C, h)  # every declared hook is registered (imported lazily from the record's modules)
    with pytest.raises(registry.MissingHookError, match="has no closed form 'pair_pdf'"):
        theory.coupling_pdf(C, 1.0, 4)
    with pytest.raises(ValueError, match="d must be an integer >= 2 for the pnc_orthogonal coupling"):
        theory.conformity(C, 1, 0.5)


@pytest.mark.parametrize("d,v,dps", [(2, "0.5", 30), (8, "2", 30), (64, "0.5", 30), (3, "1", 20)])
def test_two_quadrature_routes_agree(d, v, dps):
    """The gamma-variable route (one inversion per node) vs the uniform-variable route (two)."""
    with mp.workdps(dps):
        assert_agree(theory.conformity(C, d, v), pnc.pair_conformity_u(d, v), dps - 2)
        assert_agree(theory.rff_conformity(C, d, v), pnc.pair_conformity_u(d, v, kind="rff"), dps - 3)


def _scipy_pair(d, f):
    """E f(w1^2 + w2^2) over an antithetic chi_d pair, float64: quadrature over w1 with scipy's chi."""

    def g(w):
        lower = stats.chi.cdf(w, d)
        partner = stats.chi.isf(lower, d) if lower <= 0.5 else stats.chi.ppf(stats.chi.sf(w, d), d)
        return stats.chi.pdf(w, d) * f(w * w + partner * partner)

    med = stats.chi.median(d)
    return 2 * integrate.quad(g, 0, med, epsabs=0, epsrel=1e-12, limit=200)[0]


@pytest.mark.parametrize("d", [2, 5, 16])
def test_float64_route(d):
    """Quadrature over w with scipy's chi distribution (float64), an implementation independent of theory.pnc."""
    v, z = 1.3, 0.9
    prf = _scipy_pair(d, lambda s: special.hyp0f1(d / 2, v * v * s / 4))
    rff = _scipy_pair(d, lambda s: special.hyp0f1(d / 2, -z * z * s / 4))
    with mp.workdps(20):
        assert abs(float(theory.conformity(C, d, v)) / prf - 1) < 1e-9
        assert abs(float(theory.rff_conformity(C, d, z)) / rff - 1) < 1e-9
        # M = E[w1^2 w2^2] below d^2 (antithetic), from the product of the two quantiles
        m_scipy = 2 * integrate.quad(lambda u: stats.chi.ppf(u, d) ** 2 * stats.chi.isf(u, d) ** 2, 0, 0.5,
                                     epsabs=0, epsrel=1e-11, limit=200)[0]
        m_theory = float(pnc.pair_norm_product_moment(d))
        assert abs(m_theory / m_scipy - 1) < 1e-8 and m_theory < d * d


@pytest.mark.parametrize("d", [2, 16])
def test_small_argument_coefficients(d):
    with mp.workdps(30):
        # rho = 1 + v^2 + O(v^4) and rho_RFF - e^{-z^2} = b z^4 + O(z^6), b = M/(4d(d+2)) - 1/4
        t = mp.mpf("1e-5")
        assert abs((theory.conformity(C, d, t) - 1) / t ** 2 - 1) < 1e-9
        b = pnc.pair_norm_product_moment(d) / (4 * d * (d + 2)) - mp.mpf(1) / 4
        assert abs((theory.rff_conformity(C, d, t) - mp.exp(-t * t)) / t ** 4 / b - 1) < 1e-9
        assert abs(theory.rff_mse_ratio(C, "orthogonal", d, 0) - theory.rff_mse_ratio(C, "orthogonal", d, t)) < 1e-9


def test_pair_beats_independent_norms_for_prf():
    """Antithetic norms lower E[F(w1^2 + w2^2)] for the convex PRF kernel: PNC pair < ORF pair at every v > 0."""
    with mp.workdps(20):
        for d in (2, 7, 64):
            for v in ("0.3", "1", "3"):
                assert theory.conformity(C, d, v) < theory.conformity("orthogonal", d, v)


def test_norms_are_chi_and_antithetic():
    d = 5
    W = mc.sample_weights(C, d, d, rng=3, n_draws=20_000)
    r = np.linalg.norm(W, axis=-1)
    F = stats.chi.cdf(r, d)
    assert np.max(np.abs(F[:, 0] + F[:, 1] - 1)) < 1e-10 and np.max(np.abs(F[:, 2] + F[:, 3] - 1)) < 1e-10
    assert abs(np.corrcoef(F[:, 0], F[:, 4])[0, 1]) < 0.05  # the odd last row is independent
    for j in range(d):  # each norm marginally chi_d (KS, alpha 1e-4 each)
        assert stats.kstest(r[:, j], stats.chi(d).cdf).pvalue > 1e-4
    gram = np.einsum("nid,njd->nij", W / r[..., None], W / r[..., None])
    assert np.max(np.abs(gram - np.eye(d))) < 1e-12
    partner = mc.pnc.antithetic_partner(np.array([1e-3, 0.5, stats.chi.median(d), 6.0, 9.0]), d)
    assert np.allclose(stats.chi.cdf(partner, d) + stats.chi.cdf([1e-3, 0.5, stats.chi.median(d), 6.0, 9.0], d),
                       1, atol=1e-13)


@pytest.mark.parametrize("kind,d,v,m", [("prf", 4, 1.2, 4), ("rff", 4, 1.2, 4), ("prf", 5, 1.0, 13),
                                        ("rff", 5, 1.0, 13)])
@pytest.mark.parametrize("path", ["fast", "full"])
def test_monte_carlo_conformity(kind, d, v, m, path):
    n = 200_000 if path == "fast" else 40_000
    est = mc.empirical_conformity(C, d, v, m=m, n_draws=n, kind=kind, rng=11, path=path)
    with mp.workdps(15):
        expected = float(theory.mean_conformity(C, d, v, m=m, kind=kind))
        orf = float(theory.mean_conformity("orthogonal", d, v, m=m, kind=kind))
    assert abs(est.z(expected)) <= Z_CRIT, (est, expected)
    if path == "fast" and not (kind == "prf" and m > d):  # power: the ORF value is rejected
        assert abs(est.z(orf)) > Z_CRIT


@pytest.mark.parametrize("kernel", ["gaussian", "rff"])
def test_monte_carlo_mse(kernel):
    d, m = 4, 11
    rng = np.random.default_rng(5)
    x = rng.normal(size=d)
    x *= 0.45 / np.linalg.norm(x)
    y = rng.normal(size=d)
    y *= 0.35 / np.linalg.norm(y)
    est = mc.empirical_mse(C, x, y, m, 300_000, kind="rff" if kernel == "rff" else "prf", rng=6)
    with mp.workdps(15):
        if kernel == "rff":
            z = float(np.linalg.norm(x - y))
            expected, orf = float(theory.rff_mse(C, d, z, m=m)), float(theory.rff_mse("orthogonal", d, z, m=m))
        else:
            v = float(np.linalg.norm(x + y))
            xn, yn = float(np.linalg.norm(x)), float(np.linalg.norm(y))
            expected = float(theory.prf_mse(C, d, v, m=m, x_norm=xn, y_norm=yn))
            orf = float(theory.prf_mse("orthogonal", d, v, m=m, x_norm=xn, y_norm=yn))
    assert abs(est.z(expected)) <= Z_CRIT, (est, expected)
    if kernel == "rff":
        assert abs(est.z(orf)) > Z_CRIT  # power (the PRF gain over ORFs is below 1% here: no power claimed)


def test_audit_passes_and_a_wrong_claim_fails():
    def sampler(d, m, rng):
        return mc.sample_weights(C, d, m, rng=rng)

    ok = audit(sampler, 6, 8, coupling=C, n_draws=3000, rng=21)
    assert ok.passed, ok
    wrong = audit(sampler, 6, 8, coupling="orthogonal", n_draws=3000, rng=21)
    assert not wrong.passed
    failed = {c.name for c in wrong.checks if c.passed is False}
    assert "norm_independence" in failed or "conformity" in failed


def test_quoted_numbers_stay_current():
    """Regression pin (not a verification: the values are checked above) of the numbers that the claim
    table (paper_checks registry row beyond.pnc) and the README quote."""
    with mp.workdps(15):
        prf_vs_orf = float(theory.mse_ratio(C, "orthogonal", 8, 1))
        prf_vs_sim = float(theory.mse_ratio(C, "simplex", 8, 1))
        rff_vs_orf = float(theory.rff_mse_ratio(C, "orthogonal", 8, 1))
        rff_vs_sim = float(theory.rff_mse_ratio(C, "simplex", 8, 1))
        rff_lose = float(theory.rff_mse_ratio(C, "orthogonal", 3, 3))
    assert prf_vs_orf == pytest.approx(0.977, abs=1e-3) and prf_vs_sim == pytest.approx(2.167, abs=1e-3)
    assert rff_vs_orf == pytest.approx(0.563, abs=1e-3) and rff_vs_sim == pytest.approx(0.375, abs=1e-3)
    assert rff_lose == pytest.approx(1.112, abs=1e-3)


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


def _pair_sum(d, u):
    r"""x_1 + x_2 at the uniform variable u for d = 2 (a = 1: P^{-1}(u) = -ln(1-u), Q^{-1}(u) = -ln u) and
    d = 4 (a = 2: (1 + x) e^{-x} = Q_2(x), so 1 + x = -W_{-1}(-Q/e), Lambert's W)."""
    if d == 2:
        return -mp.log(u) - mp.log1p(-u)
    return -mp.lambertw(-(1 - u) / mp.e, -1).real - mp.lambertw(-u / mp.e, -1).real - 2


def _reference(d, f):
    r""":math:`\int_0^1 f(x_1 + x_2)\,du` at 40 digits (tanh-sinh handles the endpoints' logarithms)."""
    with mp.workdps(40):
        return mp.quad(lambda u: f(_pair_sum(d, u)), [0, mp.mpf(1) / 2, 1])


@pytest.mark.parametrize("kind, exc", [("PRF", ValueError), ("hyperbolic", ValueError), (None, TypeError),
                                       (1, TypeError)])
def test_pair_conformity_u_refuses_unknown_kinds(kind, exc):
    """Each of these gave the RFF value 0.7694924781 (d = 3, v = 0.5) before."""
    with pytest.raises(exc, match=r"kind must be one of 'prf', 'rff'"):
        pnc.pair_conformity_u(3, 0.5, kind=kind)


def test_pair_conformity_u_kinds_against_the_closed_form_quantiles():
    """The two accepted kinds, over a grid of v, against the d = 2 reference (closed-form quantiles, below):
    PRF 1.2691722948 and RFF 0.7676699193 at v = 0.5 -- an old "PRF" answer (the RFF value) is 0.5 off."""
    prf, rff = pnc.pair_conformity_u(2, ["0.5", 1]), pnc.pair_conformity_u(2, ["0.5", 1], kind="rff")
    for j, v in enumerate((mpmath.mpf("0.5"), mpmath.mpf(1))):
        t = v ** 2 / 2
        assert abs(prf[j] / _reference(2, lambda s: mp.hyp0f1(1, t * s)) - 1) < 1e-14
        assert abs(rff[j] / _reference(2, lambda s: mp.hyp0f1(1, -t * s)) - 1) < 1e-14
    assert abs(prf[0] - mpmath.mpf("1.2691722948")) < 1e-10 and abs(rff[0] - mpmath.mpf("0.7676699193")) < 1e-10


def test_pnc_pair_functions_accept_grids():
    """pair_conformity, rff_pair_conformity, pair_conformity_u and pair_norm_product_moment refused lists for v,
    z and d (ArgumentTypeError) though hyperbolic_pair_term and the package docstring accept them.  Reference:
    E[0F1(; d/2; +-(v^2/2) s)] over the uniform variable with the closed-form quantiles of d = 2 and 4."""
    ds, vs = [2, 4], [mpmath.mpf("0.5"), mpmath.mpf(1)]
    prf = pnc.pair_conformity(ds, vs)
    rff = pnc.rff_pair_conformity(np.array(ds), z=vs[::-1])
    assert prf.shape == rff.shape == (2,)
    for j, d in enumerate(ds):
        t, tz = vs[j] ** 2 / 2, vs[::-1][j] ** 2 / 2
        ref_p = _reference(d, lambda s: mp.hyp0f1(mp.mpf(d) / 2, t * s))
        ref_r = _reference(d, lambda s: mp.hyp0f1(mp.mpf(d) / 2, -tz * s))
        assert abs(prf[j] / ref_p - 1) < 1e-14 and abs(rff[j] / ref_r - 1) < 1e-14, (d, prf[j], ref_p)
    moments = pnc.pair_norm_product_moment((2, 4))
    with mp.workdps(40):  # M = 4 E[x1 x2]; d = 2: 4 (2 - pi^2/6) = 1.42026...
        assert abs(moments[0] / (8 - 2 * mp.pi ** 2 / 3) - 1) < 1e-15
        ref4 = 4 * mp.quad(lambda u: (-mp.lambertw(-(1 - u) / mp.e, -1).real - 1)
                           * (-mp.lambertw(-u / mp.e, -1).real - 1), [0, mp.mpf(1) / 2, 1])
    assert abs(moments[1] / ref4 - 1) < 1e-14
    assert moments[1] < 16  # below d^2, the independent norms' value: the coupling is negative


@pytest.mark.parametrize("call", [
    lambda: pnc.pair_conformity(3, [[1], [1, 2]]),
    lambda: pnc.rff_pair_conformity([3, [4]], 1),
    lambda: pnc.pair_norm_product_moment([[2, 3], [4]]),
], ids=["v", "d", "moment_d"])
def test_pnc_ragged_grids_are_refused(call):
    with pytest.raises(ValueError, match=r"(v|d) must be a real number or a rectangular sequence/array"):
        call()


# ---------------------------------------------------------------------------
# Issue 22, item 2: pnc_orthogonal at tiny v.
#
# ``rff_mse_ratio('pnc_orthogonal', 'orthogonal', 8, '1e-300')``, ``rff_mse(...)`` and ``mse_ratio(...,
# 'iid', ...)`` raised ConvergenceError after 30 s: theory.mse forms rho - e^{v^2} with about
# 4 log2(1/v) = 4000 extra bits, and the pair conformity was a quadrature with an incomplete-gamma
# inversion per node at that precision.  theory.pnc now sums the series in t = v^2/2 for small t,
# each moment E[(x1 + x2)^k] one quadrature at the precision its term needs.
#
# Oracles: E[w1^2 w2^2] = 8 int_0^{1/2} P_a^{-1}(u) Q_a^{-1}(u) du computed here with mpmath alone
# (findroot on mpmath's incomplete gamma function, no theory code), which fixes the t^2 coefficient
# of rho - e^{2t} exactly (M/(d(d+2)) - 1); the quadrature route of theory.pnc and the u route
# (pair_conformity_u, two inversions per node) at a v where both routes apply.


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


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of montecarlo (issue 22 item 5, docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestCouplings`` for
# montecarlo/couplings.py, ``TestEstimators`` for estimators.py, ``TestFeatures``, ``TestPnc``, ``TestNormCoupling``.
# Every test checks a documented property against an independent route (a closed form, the formula written out,
# a second sampler path, mpmath, the README's numbers); Monte Carlo comparisons are z-tests at
# paper_checks._compare.Z_CRIT = 4.5 (false alarm 6.8e-6 each, the family bound is stated per test) and show
# their power on a wrong alternative.  Seeds are fixed; no test reads the clock (the progress bar gets a fake one).


class TestPnc:
    """montecarlo/pnc.py: the antithetic partner F^{-1}(1 - F(w)) keeps its accuracy in both tails."""

    @pytest.mark.parametrize("d", [2, 5, 16])
    def test_antithetic_partner_in_both_tails(self, d):
        """F(w') = 1 - F(w) for chi_d norms at tail probabilities 1e-30 ... 0.5, against mpmath (the regularised
        incomplete gamma at 30 digits): relative error < 1e-9 both ways.  Near F = 1 the lower probability rounds to
        1 in double precision, so the upper tail must go through the survival function."""
        with mp.workdps(30):
            half = mp.mpf(d) / 2

            def lower(w):  # F(w) = P(d/2, w^2/2)
                return mp.gammainc(half, 0, mp.mpf(w) ** 2 / 2, regularized=True)

            def upper(w):
                return mp.gammainc(half, mp.mpf(w) ** 2 / 2, mp.inf, regularized=True)

            for p in ("1e-30", "1e-12", "0.01", "0.3"):
                w_low = float(stats.chi.ppf(float(p), d))
                w_high = float(stats.chi.isf(float(p), d))
                # reference partners from mpmath: F(w') = 1 - F(w) means upper(w') = lower(w) and vice versa
                target_high, target_low = lower(w_low), upper(w_high)
                got_high = mc.pnc.antithetic_partner(np.array([w_low]), d)[0]
                got_low = mc.pnc.antithetic_partner(np.array([w_high]), d)[0]
                assert abs(upper(got_high) / target_high - 1) < 1e-9, (d, p, got_high)
                assert abs(lower(got_low) / target_low - 1) < 1e-9, (d, p, got_low)
                assert got_low > 0 and got_high > got_low


# ---------------------------------------------------------------------------------------------------------------
# issue 38: the pair excess rho - e^{+-v^2} as one expectation (registry hooks prf/rff_conformity_excess)


def _excess_hook(kind, d, v):
    """The registry hook of pnc_orthogonal for the excess of ``kind``, called as theory.mse calls it (at the
    caller's precision plus the guard bits), rounded to the caller's precision."""
    with _context.entered() as bits:
        _context.mp.prec = bits + 24
        hook = registry.hook(C, f"{kind}_conformity_excess")
        return _context.to_caller(hook(d, _context.mp.mpf(v)), bits)


@pytest.mark.parametrize("dps", [15, 40])
@pytest.mark.parametrize("kind", ["prf", "rff"])
def test_excess_at_tiny_v_is_the_limit_coefficient(limit_coefficient, kind, dps):
    """At v = 1e-30 and 1e-300 the excess over v^4 is (M/(d(d+2)) - 1)/4 with M by mpmath alone (the O(v^2)
    correction is 1e-60), to dps - 2 digits; power: the ORF pair's coefficient -1/(4(d + 2)) is not."""
    with mp.workdps(dps):
        for v in ("1e-30", "1e-300"):
            got = _excess_hook(kind, D, v) / mp.mpf(v) ** 4
            assert abs(got / limit_coefficient - 1) < mp.mpf(10) ** (2 - dps), (kind, v)
            assert abs(-1 / mp.mpf(4 * (D + 2)) / got - 1) > mp.mpf("0.1")


@pytest.mark.parametrize("d,v", [(2, "0.01"), (3, "0.3"), (8, "1"), (3, "2")])
@pytest.mark.parametrize("kind", ["prf", "rff"])
def test_excess_against_the_u_route(kind, d, v):
    """rho - e^{+-v^2} at 20 digits against the u route (mpmath's incomplete gamma inversions and hyp0f1, no code
    shared with the excess integrand) at 20 + 4 log10(1/v) + 10 digits minus the exponential, to 18 digits;
    power: the same difference at 20 digits (the route theory.mse took before, without its extra bits) misses it
    at v = 0.01."""
    sign = 1 if kind == "prf" else -1
    with mp.workdps(15):
        vv = mp.mpf(v)  # one binary value for every route (read exactly at any precision)
    with mp.workdps(20):
        got = _excess_hook(kind, d, vv)
    extra = max(0, int(-4 * mp.log10(vv))) + 10
    with mp.workdps(20 + extra):
        ref = pnc.pair_conformity_u(d, vv, kind=kind) - mp.exp(sign * vv * vv)
    with mp.workdps(20):
        assert abs(got / ref - 1) < mp.mpf(10) ** -18, (kind, d, v)
        if v == "0.01":
            conf = theory.conformity(C, d, vv) if sign > 0 else theory.rff_conformity(C, d, vv)
            naive = conf - mp.exp(sign * vv * vv)
            assert not abs(naive / ref - 1) < mp.mpf(10) ** -18


def test_excess_raises_its_guard_where_the_difference_cancels_more(monkeypatch, limit_coefficient):
    """With 12 guard bits (no allowance for the difference's loss) the excess is redone with the bits lost + 16
    and is still the limit coefficient's at 30 digits (two expectations, not one); with one try it raises
    ConvergenceError naming the cancellation."""
    calls = []
    expect = pnc._expect

    def counting(*args, **kwargs):
        calls.append(args[2])
        return expect(*args, **kwargs)

    monkeypatch.setattr(pnc, "_expect", counting)
    monkeypatch.setattr(pnc, "_excess_guard", lambda d: 12)
    with mp.workdps(30):
        got = _excess_hook("prf", D, "1e-30") / mp.mpf("1e-30") ** 4
        assert abs(got / limit_coefficient - 1) < mp.mpf(10) ** -28
    assert len(calls) == 2 and "PNC PRF pair excess (d = 8" in calls[0]
    monkeypatch.setattr(pnc, "EXCESS_TRIES", 1)
    with pytest.raises(theory.ConvergenceError, match="cancels by .* bits beyond 1 raises"):
        _excess_hook("rff", D, "1e-30")


def test_kernel_mse_takes_the_excess_hook_once(monkeypatch):
    """theory.kernel_mse under pnc_orthogonal forms each pair excess with one expectation over one rule at d =
    1024 and small z (before: the v^4 coefficient, then the conformity at 4 log2(1/v) more bits, then again
    at 25 more bits for the cancelling sum Var + pairs; three rules); power: theory.mse's difference route (the
    excess hooks hidden) builds more than one."""
    from theory import mse

    def call():
        with mp.workdps(15):
            theory.kernel_mse(C, 1024, "1e-8", kind="rff")
            theory.kernel_mse(C, 1024, "0.01", x_norm="0.005", y_norm="0.005")

    tiers, builds = pnc_rule_builds(monkeypatch, call)
    assert len(tiers) == 1 and builds == 1, (tiers, builds)
    monkeypatch.setattr(mse, "has_hook", lambda coupling, name: False)
    tiers, builds = pnc_rule_builds(monkeypatch, call)
    assert builds > 1, (tiers, builds)
