"""Issue 22, item 3: the pair densities at d = 2**63, at cos_theta = -1, and at large w.

pdf_wij (Lemma 4.2) broke its integral at a fixed partition: at cos_theta = -1 and d >= 10^5 the
peak (width 1/(2 sqrt d) in log delta) fell between breakpoints and the value was silently wrong
(1.107 instead of 0.798 at d = 10^5, w = 0.01); at d = 2**63 the log-integrand, of size d, lost 63
bits and the call raised a ConvergenceError that named neither d nor cos_theta.  pdf_chi (the
closed form at cos_theta = 0) lost log2(k) bits the same way (0.2% off at k = 2**64), and the
convolution route missed its peak at d >= 1024, cos_theta = -1 (0.98 instead of 0.259).

Oracles: at cos_theta = -1, w_ij = |w_i - w_j| and p(w) = 2 int chi_d(r) chi_d(r + w) dr,
computed here with mpmath alone around the analytic peak r (r + w) = d - 1; at cos_theta = 0 the
chi_2d density, whose value at its mode tends to 1/sqrt(pi) (the normal limit, error O(1/d));
the convolution route (theory.pdf_wij_convolution) elsewhere.
"""

import mpmath
import pytest
from mpmath import mp

import theory


def pdf_minus_one(w, d, dps):
    """p(w) at cos_theta = -1 by mpmath alone: 2 int_0^inf chi_d(r) chi_d(r + w) dr, broken around the
    peak r0 (r0 (r0 + w) = d - 1) on its scale sigma (the integrand is log-concave)."""
    with mp.workdps(dps + 20 + len(str(d))):
        w = mp.mpf(w)
        lognorm = -(mp.mpf(d) / 2 - 1) * mp.log(2) - mp.loggamma(mp.mpf(d) / 2)

        def logf(r):
            return (d - 1) * (mp.log(r) + mp.log(r + w)) - (r * r + (r + w) ** 2) / 2 + 2 * lognorm

        r0 = 2 * (d - 1) / (w + mp.sqrt(w * w + 4 * (d - 1)))
        sig = 1 / mp.sqrt((d - 1) * (1 / r0 ** 2 + 1 / (r0 + w) ** 2) + 2)
        peak = logf(r0)
        pts = sorted({mp.mpf(0)} | {r0 + k * sig for k in range(-60, 61, 2) if r0 + k * sig > 0})
        val = mp.quad(lambda r: mp.exp(logf(r) - peak) if r > 0 else mp.mpf(0), pts + [pts[-1] * 2 + 10])
        return 2 * mp.exp(peak) * val


@pytest.mark.parametrize("d,w", [(1024, "1e-10"), (10**5, "0.01"), (10**5, "1.5"), (10**8, "1"), (10**8, "10"),
                                 (2**63, "1e-10"), (2**63, "1")])
def test_pdf_at_cos_minus_one_against_the_convolution_oracle(d, w):
    with mp.workdps(20):
        got = theory.pdf_wij(w, d, -1)
    ref = pdf_minus_one(w, d, 20)
    with mp.workdps(20):
        assert abs(got / ref - 1) < mp.mpf(10) ** -18
    # power: the normal limit 2 phi(w) of |w_i - w_j| is close but not equal at d = 10^5
    if d == 10**5:
        with mp.workdps(20):
            ww = mp.mpf(w)
            assert abs(2 * mp.npdf(ww) / ref - 1) > mp.mpf(10) ** -8


def test_pdf_at_cos_zero_and_d_2_to_the_63_against_the_closed_form():
    """cos_theta = 0: Lemma 4.2 reduces to the chi_2d density (eq. chi_2d_dist); at its mode both tend to
    1/sqrt(pi) with an O(1/d) = 1e-19 error, so both are checked against that limit too."""
    d = 2**63
    w = 2**32  # the mode of chi_{2^64} is sqrt(2^64 - 1), 1.2e-10 away
    with mp.workdps(15):
        lemma = theory.pdf_wij(w, d, 0)
        closed = theory.pdf_chi(w, 2 * d)
        orth = theory.coupling_pdf("orthogonal", w, d)
        limit = 1 / mp.sqrt(mp.pi)
        for value in (lemma, closed, orth):
            assert abs(value / limit - 1) < mp.mpf(10) ** -14
    # power: the old pdf_chi, without the log2(k) extra bits, was 2e-3 off here
    assert abs(mp.mpf("0.565348739610614") / limit - 1) > 1e-3


@pytest.mark.slow
def test_simplex_pdf_at_d_2_to_the_63_against_the_convolution_route():
    d = 2**63
    w = 2**32
    with mp.workdps(15), theory.budget(work=40_000_000):  # a generous budget: the oracle takes 10-25 s
        got = theory.coupling_pdf("simplex", w, d)
        ref = theory.pdf_wij_convolution(w, d, mp.mpf(-1) / (d - 1))
        assert abs(got / ref - 1) < mp.mpf(10) ** -13


@pytest.mark.parametrize("w,c", [("1e10", 1), ("1e10", -1), ("1e3", "-0.5"), ("30", "0.3"), ("1e-300", "-1")])
def test_large_and_tiny_w_against_the_convolution_route(w, c):
    """Large w puts the mass at phi ~ d / w^2 (10^-19 at w = 1e10), which the fixed partition could not
    resolve; w = 1e-300 at cos_theta = -1 puts it at delta ~ 1e-300."""
    with mp.workdps(20), theory.budget(work=40_000_000):  # generous: the convolution takes up to 15 s at w = 1e10
        got = theory.pdf_wij(w, 8, c)
        ref = theory.pdf_wij_convolution(w, 8, c)
        assert got > 0 and abs(got / ref - 1) < mp.mpf(10) ** -18


def test_convolution_route_at_cos_minus_one_and_large_d_against_the_oracle():
    with mp.workdps(20):
        got = theory.pdf_wij_convolution("1.5", 10**5, -1)
    ref = pdf_minus_one("1.5", 10**5, 20)
    with mp.workdps(20):
        assert abs(got / ref - 1) < mp.mpf(10) ** -18


def test_errors_name_the_arguments_and_the_reachable_range():
    """w = 1e300 needs 2000-bit arithmetic (5 to 30 s); a budget of 20 000 units of work (at 2000 bits, a few
    dozen steps) certainly runs out, and the message says which arguments and what the reachable domain is."""
    with theory.budget(work=20_000), pytest.raises(theory.ConvergenceError) as info:
        theory.pdf_wij("1e300", 2**63, "-0.5")
    msg = str(info.value)
    assert "w = 1.0e+300, d = 9223372036854775808, cos_theta = -0.5" in msg
    assert "reachable domain within the default budget is w <= 1.0e+100" in msg
    assert isinstance(info.value, mpmath.libmp.NoConvergence)
