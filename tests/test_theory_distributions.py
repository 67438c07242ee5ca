"""Lemmas 4.1 and 4.2: densities of w_ij = ||w_i + w_j|| against independent routes."""

import numpy as np
import pytest
from mpmath import mp

import theory
from paper_checks._compare import agrees




@pytest.mark.parametrize("d,c,w", [
    (2, -1, "0.01"), (2, -1, "1"), (2, "-0.9", "0.5"), (3, "-0.5", "1"), (3, "-0.5", "10"),
    (64, "simplex", "10"), (64, "simplex", "1"), (16, 0, "3"), (4, 1, "3"), (5, "0.3", "0.5"),
])
def test_lemma_4_2_pdf_against_change_of_variables(d, c, w):
    """The printed polar-angle integral (eq. theta_proby_dist) against a direct
    change of variables in (w_i, w_j) -- two different one-dimensional integrals."""
    with mp.workdps(25):
        if c == "simplex":
            c = mp.mpf(-1) / (d - 1)
        a = theory.pdf_wij(w, d, c)
        b = theory.pdf_wij_convolution(w, d, c)
        assert agrees(a, b, 20), (a, b)


@pytest.mark.parametrize("d", [2, 3, 16, 64])
@pytest.mark.parametrize("w", ["0.5", "2", "10"])
def test_orthogonal_pdf_reduces_to_chi_2d(d, w):
    """App. A.6: at theta = pi/2 the density is chi with 2d degrees of freedom."""
    with mp.workdps(25):
        assert agrees(theory.pdf_wij(w, d, 0), theory.pdf_chi(w, 2 * d), 20)


def test_reduction_check_has_power():
    with mp.workdps(25):
        assert not agrees(theory.pdf_wij(2, 16, 0), theory.pdf_chi(2, 31), 5)
        assert not agrees(theory.pdf_wij(2, 16, "-0.0666"), theory.pdf_chi(2, 32), 5)


@pytest.mark.parametrize("d", [1, 2, 5, 64])
@pytest.mark.parametrize("w", ["0.3", "1", "7"])
def test_iid_pdf_is_scaled_chi(d, w):
    """Lemma 4.1: w_i + w_j ~ N(0, 2 I), so w_ij / sqrt(2) ~ chi_d."""
    with mp.workdps(30):
        expected = theory.pdf_chi(mp.mpf(w) / mp.sqrt(2), d) / mp.sqrt(2)
        assert agrees(theory.pdf_wij_iid(w, d), expected, 28)


@pytest.mark.parametrize("d", [1, 3, 64])
def test_iid_pdf_normalised_with_exact_moments(d):
    with mp.workdps(20):
        for n in (0, 1, 2):
            q = mp.quad(lambda w: w ** (2 * n) * theory.pdf_wij_iid(w, d), [0, mp.sqrt(2 * d), mp.inf])
            assert agrees(q, theory.wij_moment_iid(n, d), 15)


@pytest.mark.slow
def test_lemma_4_2_pdf_normalised_with_exact_moments():
    """Normalisation and the first two even moments of the printed density,
    by Gauss-Legendre quadrature over w, against the multinomial moments."""
    d, c = 3, mp.mpf("-0.5")
    with mp.workdps(12):
        top = 12  # p(12) < 1e-30: the truncated tail is negligible at 6 digits
        t, wt = np.polynomial.legendre.leggauss(48)
        pts = [(top * (float(ti) + 1) / 2, top * float(wi) / 2) for ti, wi in zip(t, wt)]
        vals = [(mp.mpf(x), mp.mpf(wgt), theory.pdf_wij(x, d, c)) for x, wgt in pts]
        for n in (0, 1, 2):
            q = mp.fsum(wgt * x ** (2 * n) * p for x, wgt, p in vals)
            assert agrees(q, theory.wij_moment(n, d, c), 6), (n, q)


@pytest.mark.parametrize("d", [2, 3, 7, 64])
@pytest.mark.parametrize("c", ["-1", "-0.4", "0", "0.6"])
def test_second_moment_closed_form(d, c):
    """E[w_ij^2] = 2d + 2c E[chi_d]^2 (independent norms)."""
    with mp.workdps(30):
        mu1 = mp.sqrt(2) * mp.gamma(mp.mpf(d + 1) / 2) / mp.gamma(mp.mpf(d) / 2)
        assert agrees(theory.wij_moment(1, d, c), 2 * d + 2 * mp.mpf(c) * mu1 ** 2, 28)
        assert theory.wij_moment(0, d, c) == 1


@pytest.mark.parametrize("d", [2, 5, 64])
def test_footnote_fourth_to_second_moment_orthogonal(d):
    """Footnote of Sec. 3.2: E(w^4)/E(w^2) = 2 G(d/2+2)/G(d/2+1) + 2 G(d/2+1)/G(d/2) = 2d + 2."""
    with mp.workdps(30):
        ratio = theory.wij_moment(2, d, 0) / theory.wij_moment(1, d, 0)
        h = mp.mpf(d) / 2
        printed = 2 * mp.gamma(h + 2) / mp.gamma(h + 1) + 2 * mp.gamma(h + 1) / mp.gamma(h)
        assert agrees(ratio, printed, 28)
        assert agrees(ratio, mp.mpf(2 * d + 2), 28)


def test_simplex_pdf_at_zero_for_d_2():
    """d = 2 simplex: w_ij = |w_i - w_j|, density at 0 is 2 int p_chi^2 = sqrt(pi)/2."""
    with mp.workdps(25):
        assert agrees(theory.pdf_wij(0, 2, -1), mp.sqrt(mp.pi) / 2, 24)
        assert agrees(theory.pdf_wij("1e-8", 2, -1), mp.sqrt(mp.pi) / 2, 7)
        assert theory.pdf_wij(0, 5, 0) == 0


def test_coupling_pdf_dispatch_and_bad_input():
    with mp.workdps(20):
        assert theory.coupling_pdf("iid", 1, 4) == theory.pdf_wij_iid(1, 4)
        assert agrees(theory.coupling_pdf("simplex", 1, 4), theory.pdf_wij(1, 4, mp.mpf(-1) / 3), 18)
    with pytest.raises(ValueError, match="w must be >= 0"):
        theory.pdf_wij(-1, 4, 0)
    with pytest.raises(ValueError, match="cos_theta must lie in"):
        theory.pdf_wij(1, 4, -2)
    with pytest.raises(ValueError, match="coupling must be one of"):
        theory.coupling_pdf("simplex_plus", 1, 4)
    with pytest.raises(ValueError, match="d must be an integer >= 2 for the simplex coupling"):
        theory.coupling_pdf("simplex", 1, 1)
