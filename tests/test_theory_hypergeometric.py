"""Issue 22, item 1: the budget reaches every loop of theory whose trip count an argument sets.

Each call below provably needs far more work than its budget allows (the trip counts are in the
comments: 10^7 to 10^18 iterations, against a work budget of 20 000 units, about 0.2 s; issue 38 made
the budget a count of work instead of seconds), so the expiry is certain, the same on every machine,
and no clock is read.  Each must raise theory.errors.ConvergenceError (an mpmath.NoConvergence) naming
the argument that makes the loop long.  Before the fix the first of them ran forever
(``for j in range(d // 2)`` without a check).
"""


import mpmath
import pytest
from mpmath import mp

import theory
from _support import raises_budget, small_budget
from theory import _context


@pytest.mark.parametrize("d", [2**63, 10**8])
def test_kummer_sum_at_huge_d(d):
    # d/2 terms: 4.6e18 or 5e7
    with small_budget(), raises_budget(rf"orf_conformity_kummer at d = {d} \(a finite sum of d/2 = {d // 2}"):
        theory.orf_conformity_kummer(d, 0.5)


def test_the_error_is_mpmaths_no_convergence():
    with small_budget(), pytest.raises(mpmath.libmp.NoConvergence):
        theory.orf_conformity_kummer(2**63, 0.5)


def test_positive_kummer_route_of_1f1():
    # conformity_orthogonal at d = 10^8, v = 10^4: Kummer's finite sum of d/2 + 1 terms
    with small_budget(), raises_budget(r"ORF conformity 1F1\(d; d/2; v\^2/2\) at d = 100000000"):
        theory.conformity_orthogonal(10**8, 10**4)


def test_negative_recurrence_route_of_1f1():
    # rff_conformity('orthogonal', 2^63, 1e5): the recurrence in a has d/2 = 4.6e18 steps
    with small_budget(), raises_budget(r"recurrence in a over a - b = 4611686018427387904 steps"):
        theory.rff_conformity("orthogonal", 2**63, 10**5)


def test_laguerre_scan():
    # d/2 = 5e7 recurrence steps (the scan of theory.z_crit), inside a theory call's budget
    from theory._hypergeometric import laguerre_scan

    with small_budget(), raises_budget(r"laguerre_scan at d = 100000000"), _context.entered():
        laguerre_scan(10**8, [1.0, 2.0, 3.0])


# ---------------------------------------------------------------------------
# Beyond the paper: simplex coupling (and any angle) for random Fourier features.


def test_szego_bound_used_by_the_taylor_remainder():
    """The even-d remainder of the Taylor route (and of its certified twin) uses
    |M(d+p, d/2+p, -y)| <= e^{-y/2} (Kummer + Szego's Laguerre bound, DLMF 18.14.8).  Checked
    against mpmath's 1F1 at 60 digits over d, p and y spanning the oscillating and decaying
    ranges; power: the stronger (false) bound e^{-y} fails on the same grid."""
    worst, wrong_fails = mp.mpf(0), False
    with mp.workdps(60):
        for d in (2, 4, 8, 64, 1024):
            h = mp.mpf(d) / 2
            for p in (0, 1, 2, 5):
                for y in ("0.01", "0.7", "10.3", "100.3", "1000.3", "5000.3"):  # not y = 1: M(2, 1, -1) = 0
                    yy = mp.mpf(y)
                    m = mp.hyp1f1(d + p, h + p, -yy, maxterms=10 ** 6, maxprec=40000)
                    worst = max(worst, abs(m) * mp.exp(yy / 2))
                    wrong_fails = wrong_fails or abs(m) > mp.exp(-yy)
    assert worst <= 1
    assert wrong_fails


@pytest.mark.parametrize("d,y,p", [(2, "3.5", 2), (7, "40", 4), (64, "50", 2), (64, "900", 6), (1024, "5000", 4)])
def test_recurrence_tail_bounds_the_true_tail_and_follows_its_size(d, y, p):
    """The Taylor route's value-following remainder (DLMF 13.3.7 majorant from the computed
    f_{p-1}, f_p) bounds the true tail sum_{k>p} (|c|t)^k/k! (d)_k/(d/2)_k |f_k| (computed here term
    by term at 40 digits from theory's 1F1 values, checked elsewhere, up to k = p + 40: the terms
    beyond add at most 2e-12 of it at these arguments), and stays
    within 10^4 of it, where the a-priori bound (d)_k/(d/2)_k e^{-t/2} exceeds it by up to 10^700."""
    from theory._hypergeometric import hyp1f1_neg
    from theory.conformities import _recurrence_tail

    with mp.workdps(40):
        t, h, cabs = mp.mpf(y), mp.mpf(d) / 2, mp.mpf(1) / (d - 1)

        def f(k):
            return hyp1f1_neg(mp.mpf(d + k), h + k, t, "test")

        cap = mp.exp(-t / 2) if d % 2 == 0 else mp.mpf(1)
        cf, true_tail = mp.mpf(1), mp.mpf(0)
        for k in range(p + 41):
            if k == p:
                cf_p = cf
            if k > p:
                true_tail += cf * abs(f(k))  # R_k <= 1 is used by the bound: compare with R_k = 1
            cf = cf * cabs * t / (k + 1) * (d + k) / (h + k)
        bound = _recurrence_tail(d, h, t, cabs, p, cf_p, f(p - 1), f(p), cap)
        assert true_tail <= bound <= 10 ** 4 * true_tail, (mp.nstr(true_tail, 5), mp.nstr(bound, 5))
