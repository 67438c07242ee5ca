"""The fixed-norm orthogonal coupling (issue 19 item 6): performer-pytorch's scaling=1 rows of norm sqrt(d) are
biased; closed-form bias and MSE (theory.fixed_norm) against an independent Bessel route and Monte Carlo (with
power), and the audit reporting a fixed-norm sampler's bias against the closed form."""

import numpy as np
import pytest
from mpmath import mp

import montecarlo as mc
import theory
from montecarlo.audit import audit
from paper_checks._compare import Z_CRIT, agrees, point_pair


def test_the_issue_numbers_and_the_bessel_route():
    """PRF mean 0F1(; d/2; d v^2/4) = 1.612 against e^{1/2} = 1.649 at d = 8, v = 1; the RFF mean equals the
    Bessel kernel Gamma(d/2) (2/t)^{d/2-1} J_{d/2-1}(t), t = sqrt(d) z (mpmath's besselj, another route)."""
    fn = theory.fixed_norm
    with mp.workdps(30):
        assert abs(fn.fixed_norm_mean(8, 1) - mp.mpf("1.612")) < 5e-4
        assert abs(fn.fixed_norm_bias(8, 1) - (fn.fixed_norm_mean(8, 1) / mp.exp(0.5) - 1)) < mp.mpf(10) ** -28
        for d, z in ((3, "0.7"), (8, "1"), (64, "2.5")):
            t = mp.sqrt(d) * mp.mpf(z)
            bessel = mp.gamma(mp.mpf(d) / 2) * (2 / t) ** (mp.mpf(d) / 2 - 1) * mp.besselj(mp.mpf(d) / 2 - 1, t)
            assert agrees(fn.fixed_norm_mean(d, z, kind="rff"), bessel, 25)


def _points(d, seed, xn=0.5, dist=0.5):
    return point_pair(d, seed, xn, dist)


@pytest.mark.parametrize("kind", ["prf", "rff"])
@pytest.mark.parametrize("m", [8, 20])
def test_monte_carlo_mse_and_bias(kind, m):
    """Empirical MSE and mean of the registered sampler against the closed forms; power: the unbiased ORF MSE
    (and for the mean, the exact kernel) is rejected."""
    d = 8
    x, y = _points(d, 1)
    xn, yn = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    t = float(np.linalg.norm(x + y) if kind == "prf" else np.linalg.norm(x - y))
    est = mc.empirical_mse("fixed_orthogonal", x, y, m, 200_000, kind=kind, rng=3)
    mean = mc.kernel_estimate("fixed_orthogonal", x, y, m, 200_000, kind=kind, rng=4)
    norms = dict(x_norm=xn, y_norm=yn) if kind == "prf" else {}
    with mp.workdps(15):
        expected = float(theory.fixed_norm.fixed_norm_mse(d, t, kind=kind, m=m, **norms))
        orf = float(theory.kernel_mse("orthogonal", d, t, kind=kind, m=m, **norms))
        bias = float(theory.fixed_norm.fixed_norm_bias(d, t, kind=kind))
    k = mc.exact_kernel(x, y)
    assert abs(est.z(expected)) <= Z_CRIT and abs(est.z(orf)) > Z_CRIT
    assert abs(mean.z(k * (1 + bias))) <= Z_CRIT and abs(mean.z(k)) > Z_CRIT


def test_squared_bias_does_not_shrink_with_m():
    """For m large the fixed-norm PRF MSE stays above the squared bias while the ORF MSE goes to 0."""
    with mp.workdps(20):
        kw = dict(x_norm="0.5", y_norm="0.5", m=4096)
        fixed = theory.fixed_norm.fixed_norm_mse(8, 1, **kw)
        sq_bias = (theory.fixed_norm.fixed_norm_mean(8, 1) - mp.exp(0.5)) ** 2 * mp.exp(-2 * mp.mpf("0.5"))
        assert fixed > sq_bias > theory.kernel_mse("orthogonal", 8, 1, **kw)


def test_audit_reports_the_bias_of_a_fixed_norm_sampler():
    """The registered fixed-norm sampler: the audit's fixed_norm check passes (its bias is the closed form's)
    while row_norms and the unbiasedness checks fail; power: a fixed-norm sampler whose directions come from an
    unsigned QR is biased differently and fails fixed_norm; a chi-norm sampler skips the check."""
    rep = audit(lambda d, m, rng: mc.sample_weights("fixed_orthogonal", d, m, rng=rng), d=8, n_draws=4000, rng=0)
    assert rep.check("fixed_norm").passed is True and rep.check("row_norms").passed is False
    assert rep.check("rff_unbiased").passed is False

    def unsigned_qr_fixed(d, m, rng):
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        return np.sqrt(d) * q.T[:m]

    assert audit(unsigned_qr_fixed, d=8, n_draws=4000, rng=1).check("fixed_norm").passed is False
    chi = audit(lambda d, m, rng: mc.sample_weights("orthogonal", d, m, rng=rng), d=8, n_draws=200, rng=2)
    assert chi.check("fixed_norm").passed is None


def test_audit_of_performer_pytorch_scaling_1():
    """performer-pytorch's own gaussian_orthogonal_random_matrix(scaling=1): rows of norm sqrt(d) from an
    unsigned QR, so its bias is the fixed-norm one plus the sign bias of the first mistake of montecarlo.audit:
    fixed_norm and marginals fail (500 draws suffice)."""
    torch = pytest.importorskip("torch")
    pp = pytest.importorskip("performer_pytorch.performer_pytorch")

    def performer_fixed(m, d, seed):
        torch.manual_seed(seed)
        return pp.gaussian_orthogonal_random_matrix(m, d, scaling=1).double().numpy()

    rep = audit(performer_fixed, d=8, n_draws=500, rng=0, call="m,d,seed")
    assert rep.check("fixed_norm").passed is False and rep.check("marginals").passed is False


def test_bad_input():
    with pytest.raises(ValueError, match="kind must be 'prf' or 'rff'"):
        theory.fixed_norm.fixed_norm_bias(8, 1, kind="hyperbolic")
    with pytest.raises(ValueError, match="x_norm and y_norm are required"):
        theory.fixed_norm.fixed_norm_mse(8, 1)
    with pytest.raises(ValueError, match="x_norm must be None"):
        theory.fixed_norm.fixed_norm_mse(8, 1, kind="rff", x_norm=1)
