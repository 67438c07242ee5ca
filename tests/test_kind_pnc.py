"""Pairwise norm-coupled orthogonal features (coupling 'pnc_orthogonal', ICLR 2025), added through the registry.

Closed forms (theory.pnc, quadrature in the gamma variable) are checked against a second quadrature
in the uniform variable at 30 digits, against a float64 scipy route, against their small-argument
coefficients, and against Monte Carlo from the sampler (montecarlo.pnc) on both projection paths.
Monte Carlo comparisons use |z| <= Z_CRIT = 4.5 (two-sided false alarm 6.8e-6 each; 10 comparisons:
6.8e-5 family-wise); every one has a power check against the ORF prediction it must reject.
"""

import numpy as np
import pytest
from mpmath import mp
from scipy import integrate, special, stats

import montecarlo as mc
import theory
import theory.pnc as pnc
from montecarlo.audit import CLAIMABLE_COUPLINGS, audit
from paper_checks._compare import Z_CRIT, assert_agree
from theory import registry

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
