"""Hyperbolic PRFs end to end through the feature-kind record (issue 18 item 4).

Closed forms against independent routes (a two-dimensional quadrature over the chi_d norms of Lemma 4.2, the
second quadrature route of the norm-coupled pairs), the small-v limit against its formula, the ordering theorem
of theory.hyperbolic on a grid (and by certified balls), the feature map against the formula written out, and
Monte Carlo against the closed forms with asserted power (|z| <= 4.5 each, false alarm 6.8e-6)."""

import math

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from paper_checks._compare import agrees, point_pair, rel_diff, Z_CRIT
from theory import feature_kinds as fk
from theory.hyperbolic import hyperbolic_ordering, hyperbolic_pair_term
from theory.registry import MissingHookError


def _pair_term_by_norm_quadrature(d, v, c):
    r""":math:`\frac12\sum_\pm\mathbb E[{}_0F_1(;\frac d2;\frac{v^2}{4}(r_1^2+r_2^2\pm2cr_1r_2))]` over i.i.d.
    :math:`\chi_d` norms (Lemma 4.2: w_i + w_j has a uniform direction independent of its norm), by scipy's
    adaptive two-dimensional quadrature in double precision (an independent route: no series, no mpmath)."""
    from scipy import integrate, special, stats

    chi = stats.chi(d)

    def f(r2, r1):
        s, t = r1 * r1 + r2 * r2, 2 * c * r1 * r2
        return chi.pdf(r1) * chi.pdf(r2) * (special.hyp0f1(d / 2, v * v * (s + t) / 4)
                                             + special.hyp0f1(d / 2, v * v * (s - t) / 4)) / 2

    top = math.sqrt(d) + 10 + 2 * v
    val, err = integrate.dblquad(f, 0, top, 0, top, epsabs=0, epsrel=1e-10)
    return val


@pytest.mark.parametrize("d,v", [(3, 0.5), (8, 2.0)])
@pytest.mark.parametrize("coupling", ["orthogonal", "simplex"])
def test_pair_term_against_a_quadrature_over_the_norms(coupling, d, v):
    """9 digits (double-precision quadrature); power: the PRF pair term of the simplex coupling differs."""
    c = 0.0 if coupling == "orthogonal" else -1.0 / (d - 1)
    ref = _pair_term_by_norm_quadrature(d, v, c)
    with mp.workdps(20):
        assert agrees(hyperbolic_pair_term(coupling, d, v), ref, 9)
        if coupling == "simplex":
            assert not agrees(theory.conformity(coupling, d, v), ref, 3)


def test_pair_term_of_norm_coupled_pairs_by_the_second_route():
    """pnc_orthogonal's coupled pairs: the hyperbolic pair term is the PRF one (u_j -> -u_j is a symmetry),
    checked against the uniform-variable quadrature of theory.pnc."""
    import theory.pnc as pnc

    with mp.workdps(25):
        for d, v in ((4, "0.5"), (8, "2")):
            assert agrees(hyperbolic_pair_term("pnc_orthogonal", d, v), pnc.pair_conformity_u(d, v), 21)


def test_the_issue_numbers():
    """d = 8, v = 2: 36.08 (simplex) against 33.15 (orthogonal), as measured when the issue was filed."""
    with mp.workdps(15):
        assert abs(hyperbolic_pair_term("simplex", 8, 2) - mp.mpf("36.08")) < 0.005
        assert abs(hyperbolic_pair_term("orthogonal", 8, 2) - mp.mpf("33.15")) < 0.005
        assert hyperbolic_pair_term("iid", 8, 2) == mp.exp(4)


@pytest.mark.parametrize("v", ["1e-3", "0.5", "2"])
def test_single_direction_variance_is_a_fraction_of_the_prf_one(v):
    """m = 1 (no pairs): MSE_hyp / MSE_prf = (1 - e^{-v^2}) / 2 for both target kernels."""
    with mp.workdps(30):
        vv = mp.mpf(v)
        for kernel in ("gaussian", "softmax"):
            kw = dict(x_norm=vv / 2, y_norm=vv / 2, m=1, kernel=kernel)
            ratio = theory.kernel_mse("iid", 4, v, kind="hyperbolic", **kw) / theory.kernel_mse("iid", 4, v, **kw)
            assert agrees(ratio, -mp.expm1(-vv * vv) / 2, 25)


@pytest.mark.parametrize("d,m", [(3, 3), (8, 8), (8, 21)])
def test_small_v_limit(d, m):
    r"""The v -> 0 ratio: :math:`(\frac12 + \frac Pm b_c)/(\frac12 + \frac Pm b_o)`,
    :math:`b_\theta = (d\cos^2\theta - 1)/(2(d+2))`, and the ratio at v = 1e-6 tends to it."""
    with mp.workdps(30):
        p_over_m = mp.mpf(theory.coupled_pairs(d, m)) / m
        b = lambda c: (d * c * c - 1) / (2 * mp.mpf(d + 2))  # noqa: E731
        expected = (mp.mpf(1) / 2 + p_over_m * b(mp.mpf(-1) / (d - 1))) / (mp.mpf(1) / 2 + p_over_m * b(0))
        limit = theory.kernel_mse_ratio("simplex", "orthogonal", d, 0, kind="hyperbolic", m=m)
        assert agrees(limit, expected, 28)
        assert agrees(theory.kernel_mse_ratio("simplex", "orthogonal", d, "1e-6", kind="hyperbolic", m=m), limit, 10)
        assert agrees(theory.kernel_mse_ratio("simplex", "orthogonal", d, "1e-300", kind="hyperbolic", m=m), limit,
                      28)


def test_orthogonal_beats_simplex_and_norm_coupling_beats_orthogonal():
    """The theorem of theory.hyperbolic on a grid (every d, v): SimRF/ORF > 1; and PNC/ORF < 1 (measured)."""
    with mp.workdps(15):
        for d in (2, 3, 8, 64):
            for v in ("1e-3", "0.5", "2"):
                assert theory.kernel_mse_ratio("simplex", "orthogonal", d, v, kind="hyperbolic") > 1, (d, v)
                if d in (2, 8):  # (quadrature: slower)
                    assert theory.kernel_mse_ratio("pnc_orthogonal", "orthogonal", d, v, kind="hyperbolic") < 1
        # and, for the paper's PRFs, the opposite order of simplex and orthogonal (Thm 3.4): the map decides
        assert theory.kernel_mse_ratio("simplex", "orthogonal", 8, 1) < 1


@pytest.mark.skipif(not __import__("theory.certified").certified.available(), reason="needs python-flint")
def test_certified_ordering():
    certs = hyperbolic_ordering([2, 3, 8, 64], ["0.01", "1", "3"])
    assert all(c.certified is True for c in certs), certs


def _points(d, seed, xn=0.5, dist=0.3):
    return point_pair(d, seed, xn, dist)


@pytest.mark.parametrize("coupling", ["iid", "orthogonal", "simplex", "pnc_orthogonal"])
@pytest.mark.parametrize("m", [6, 15])
def test_monte_carlo_agrees_with_the_closed_form(coupling, m):
    """Empirical MSE of the sampler (fast path) against kernel_mse(kind='hyperbolic'), m = d and an ensemble
    with a truncated block; power: the PRF MSE of the same coupling is rejected, and for the simplex coupling the
    ORF hyperbolic MSE too (the ordering is resolved)."""
    d = 6
    x, y = _points(d, 3)
    xn, yn, v = (float(np.linalg.norm(a)) for a in (x, y, x + y))
    est = mc.empirical_mse(coupling, x, y, m, 200_000, kind="hyperbolic", rng=5)
    with mp.workdps(15):
        expected = float(theory.kernel_mse(coupling, d, v, kind="hyperbolic", x_norm=xn, y_norm=yn, m=m))
        prf = float(theory.kernel_mse(coupling, d, v, kind="prf", x_norm=xn, y_norm=yn, m=m))
        orf = float(theory.kernel_mse("orthogonal", d, v, kind="hyperbolic", x_norm=xn, y_norm=yn, m=m))
    assert abs(est.z(expected)) <= Z_CRIT, (est, expected)
    assert abs(est.z(prf)) > Z_CRIT
    if coupling == "simplex":
        assert abs(est.z(orf)) > Z_CRIT


@pytest.mark.filterwarnings("ignore::montecarlo.FastCouplingBiasWarning")
@pytest.mark.parametrize("coupling", ["simplex_plus", "fast_orthogonal", "fast_simplex"])
def test_couplings_without_a_closed_form(coupling):
    """No closed form: a ValueError naming the couplings that have one; Monte Carlo runs (and is unbiased for
    the exact simplex_plus coupling)."""
    with pytest.raises(MissingHookError, match="pnc_orthogonal"):
        theory.kernel_mse(coupling, 8, 1, kind="hyperbolic", x_norm=0.5, y_norm=0.5)
    x, y = _points(8, 4)
    est = mc.kernel_estimate(coupling, x, y, 8, 20_000, kind="hyperbolic", rng=2)
    if coupling == "simplex_plus":
        assert abs(est.z(mc.exact_kernel(x, y))) <= Z_CRIT


def test_the_optimal_sampled_coupling():
    """Among the couplings the toolkit samples, at d = 8, v = 1.15 (m = d): PNC < ORF (also the fast one, up to
    noise) < SimRF < SimRF+ < IID for hyperbolic PRFs; the two orderings the docstring states are resolved."""
    d = 8
    x, y = _points(d, 7)
    est = {c: mc.empirical_mse(c, x, y, d, 200_000, kind="hyperbolic", rng=3) for c in
           ("orthogonal", "simplex", "simplex_plus", "pnc_orthogonal")}

    def z(a, b):
        return (est[b].mean - est[a].mean) / math.hypot(est[a].stderr, est[b].stderr)

    assert z("simplex", "simplex_plus") > 3.09  # SimRFs+ (built for PRFs) is worse still
    assert z("orthogonal", "simplex") > 3.09
    assert z("pnc_orthogonal", "orthogonal") > 3.09


def test_feature_map_written_out():
    """random_features(kind='hyperbolic') = e^{-c|x|^2} [e^{Wx}, e^{-Wx}] / sqrt(2m), and phi(x).phi(y) is
    e^{-c|x|^2-c|y|^2} mean_i cosh(w_i.(x + y)); float32 agrees to its precision."""
    W = mc.sample_weights("simplex", 5, 7, rng=1)
    X = np.random.default_rng(2).standard_normal((4, 5)) * 0.4
    for kernel, c in (("gaussian", 1.0), ("softmax", 0.5)):
        phi = mc.random_features(X, W, kind="hyperbolic", kernel=kernel)
        p = X @ W.T
        ref = np.exp(np.concatenate([p, -p], axis=1) - c * np.sum(X * X, axis=1)[:, None]) / math.sqrt(14)
        assert phi.shape == (4, 14) and np.allclose(phi, ref, rtol=1e-13, atol=0)
        k = phi @ phi.T
        cosh = np.cosh((X[:, None, :] + X[None, :, :]) @ W.T).mean(axis=-1)
        sq = np.sum(X * X, axis=1)
        assert np.allclose(k, np.exp(-c * (sq[:, None] + sq[None, :])) * cosh, rtol=1e-12)
        f32 = mc.random_features(X.astype(np.float32), W.astype(np.float32), kind="hyperbolic", kernel=kernel)
        assert f32.dtype == np.float32 and np.allclose(f32, ref, rtol=1e-5)
    logs, off = mc.random_features(X * 40, W, kind="hyperbolic", stabilize="row")
    assert np.all(np.isfinite(logs)) and np.all(logs.max(axis=1) == 1.0)


def test_gram_and_conformity_estimates():
    """gram_estimate(kind='hyperbolic') is unbiased; empirical_conformity estimates mean_conformity."""
    X = np.random.default_rng(0).standard_normal((3, 5)) * 0.3
    est, _ = mc.gram_estimate("orthogonal", X, 5, 4000, kind="hyperbolic", rng=1)
    exact = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=-1))
    assert np.max(np.abs((est.mean - exact) / est.stderr)) <= Z_CRIT
    conf = mc.empirical_conformity("simplex", 5, 0.8, m=5, n_draws=100_000, kind="hyperbolic", rng=2)
    with mp.workdps(15):
        expected = float(theory.mean_conformity("simplex", 5, 0.8, kind="hyperbolic"))
        wrong = float(theory.mean_conformity("simplex", 5, 0.8, kind="prf"))
    assert abs(conf.z(expected)) <= Z_CRIT and abs(conf.z(wrong)) > Z_CRIT


# ---------------------------------------------------------------------------
# theory, third exploration round: the kind MSEs at huge d, the kernel prefactor at huge norms, the OPRF variance at
# small A, the default m of mean_conformity, the grids of hyperbolic_ordering.
#
# Every reference is independent of the code under test:
#
# * the pair terms at huge d by a term-by-term series written out here: given the norms r_i, r_j (i.i.d. chi_d) and
#   the angle c, E e^{(w_i + w_j).v} = 0F1(; d/2; v^2 S / 4), S = r_i^2 + r_j^2 + 2 c r_i r_j, so
#   rho(c) = sum_k (v^2/4)^k E[S^k] / ((d/2)_k k!) with E[S^k] from the multinomial expansion and the chi_d moments
#   E r^{2j} = 2^j (d/2)_j, E r^{2j+1} = 2^{j+1/2} (d/2 + 1/2)_j Gamma((d+1)/2)/Gamma(d/2) (the package sums 1F1s and
#   quadratures instead); the RFF pair term is the same series at v^2 -> -z^2;
# * the kernel prefactors as exp(-2c(X^2 + Y^2)) at 300 digits from the exact binary norms, times the inner factor
#   written out with mpmath's hyp1f1 / hyp0f1;
# * the OPRF moments as (1-4A)^d (1-8A)^(-d/2) e^{2(1-4A)v^2/(1-8A)} - e^{v^2} at 700 digits (600 for large v).


def test_simplex_ratio_hyperbolic_at_tiny_v_tends_to_the_limit():
    """At v = 1e-300 the ratio equals its v -> 0 limit (4d - 3)/((d - 1)(d + 2)) (from the v^4 coefficients
    1/2 and (d c^2 - 1)/(2(d + 2)), c = -1/(d - 1)) to the working precision; it was 6.47e-5 instead of 4e-20."""
    d = 10 ** 20
    limit = mp.mpf(4 * d - 3) / ((d - 1) * (d + 2))
    assert rel_diff(theory.kernel_mse_ratio("simplex", "iid", d, "1e-300", kind="hyperbolic"), limit) < 1e-14
    assert rel_diff(theory.kernel_mse_ratio("simplex", "iid", d, 0, kind="hyperbolic"), limit) < 1e-14


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


# ---------------------------------------------------------------------------
# Tests added against the surviving formula mutants of the feature-kind code (issue 22 item 5,
# docs/guide/mutation.rst).
#
# Each class is the addition to one target's mutation command (tests/mutation_targets.py): ``TestRegistry``
# (theory/feature_kinds.py), ``TestHyperbolicMap`` (montecarlo/hyperbolic.py), ``TestOprfMap``
# (montecarlo/oprf.py), ``TestHyperbolicTheory`` (theory/hyperbolic.py), ``TestOprfTheory`` (theory/oprf.py),
# ``TestKernelMse`` (the kind hooks of theory/mse.py).  Each test compares two independent computations (a formula
# written out here, brute force over pairs, numerical differentiation, another route to the same limit, a
# certified ball) and shows its power on a wrong alternative where one exists.


class TestHyperbolicMap:
    """montecarlo/hyperbolic.py: the statistic log cosh without overflow."""

    def test_log_cosh_statistic_against_mpmath(self):
        """The hook's log cosh(p) against mpmath at p = 0, 1e-8, 0.3, -2, 30, -800 (where cosh overflows float64),
        to 4 ulps of max(1, |log cosh p|), so e^stat = cosh(p) to that relative accuracy (what the estimator uses);
        power: log(e^p + e^-p) without the 1/2 is rejected."""
        stat = fk.hook("hyperbolic", "statistic")
        p = np.array([0.0, 1e-8, 0.3, -2.0, 30.0, -800.0])
        got = stat(p.copy(), np)
        with mp.workdps(30):
            ref = [mp.log(mp.cosh(mp.mpf(t))) for t in p]
        assert np.all(np.isfinite(got))
        for g, r in zip(got, ref):  # a few ulps of max(1, |log cosh|): e^stat / cosh - 1 within 1e-15 |log cosh|
            assert abs(g - float(r)) <= 4e-16 * max(1.0, abs(float(r))), (g, r)
        assert abs(float(got[2]) - float(ref[2] + mp.log(2))) > 0.1


class TestHyperbolicTheory:
    """theory/hyperbolic.py: the certified ordering doubles its precision and stops at the first decision."""

    @pytest.mark.skipif(not theory.certified.available(), reason="needs python-flint")
    def test_certified_ordering_doubles_the_precision(self):
        """Documented: 'The precision doubles from prec to max_prec while the balls overlap'.  At d = 8,
        v = 0.01, starting at 32 bits the balls overlap (undecided when capped at 32) and one doubling decides
        (certified at 64 bits, the first power-of-two multiple); at v = 1 the first precision decides, and at
        d = 2, v = 20 a wide (valid) enclosure decides at once."""
        from theory.hyperbolic import hyperbolic_ordering

        (capped,) = hyperbolic_ordering([8], ["0.01"], prec=32, max_prec=32)
        assert capped.certified is None and capped.prec == 32
        (cert,) = hyperbolic_ordering([8], ["0.01"], prec=32)
        assert cert.certified is True and cert.prec == 64
        (easy,) = hyperbolic_ordering([8], ["1"], prec=32)
        assert easy.certified is True and easy.prec == 32
        # a valid but wide enclosure decides too: at d = 2, v = 20 the simplex pair term's ball has fewer than one
        # correct digit at 16 bits (and at 256), yet it lies above the orthogonal one
        (wide,) = hyperbolic_ordering([2], ["20"], prec=16)
        assert wide.certified is True and wide.prec == 16
