"""Issue 22, item 1: the budget reaches every loop of theory whose trip count an argument sets.

Each call below provably needs far more work than its budget allows (the trip counts are in the
comments: 10^7 to 10^18 iterations, against a work budget of 20 000 units, about 0.2 s; issue 38 made
the budget a count of work instead of seconds), so the expiry is certain, the same on every machine,
and no clock is read.  Each must raise theory.errors.ConvergenceError (an mpmath.NoConvergence) naming
the argument that makes the loop long.  Before the fix the first of them ran forever
(``for j in range(d // 2)`` without a check).
"""

import itertools

import mpmath
import pytest

import theory
from theory import _context

SMALL = 20_000


def small_budget():
    return theory.budget(work=SMALL)


def raises_budget(match):
    return pytest.raises(theory.ConvergenceError, match=rf"(?s){match}.*work budget of {SMALL} units exhausted")


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


def test_wij_moment_double_sum():
    # n^2/2 = 5e9 terms
    with small_budget(), raises_budget(r"wij_moment at n = 100000"):
        theory.wij_moment(10**5, 8, "-0.1")


def test_laguerre_scan():
    # d/2 = 5e7 recurrence steps (the scan of theory.z_crit), inside a theory call's budget
    from theory._hypergeometric import laguerre_scan

    with small_budget(), raises_budget(r"laguerre_scan at d = 100000000"), _context.entered():
        laguerre_scan(10**8, [1.0, 2.0, 3.0])


class _Endless:
    """A 1-D sequence of 10^9 ones that is never materialised (len() and iteration only)."""

    ndim = 1

    def __len__(self):
        return 10**9

    def __iter__(self):
        return itertools.repeat(1.0, 10**9)


def test_simplex_apply_over_a_long_vector():
    with small_budget(), raises_budget(r"simplex_apply at len\(x\) = 1000000000"):
        theory.simplex_apply(_Endless())


def test_simplex_plus_objective_over_many_vectors():
    # m (m - 1) = 4e6 pair norms (each a 0F1 series) for m = 2000 vectors
    vectors = [[1.0, float(i)] for i in range(2000)]
    with small_budget(), pytest.raises(theory.ConvergenceError, match=rf"work budget of {SMALL} units exhausted"):
        theory.exact_objective(vectors, 1)


def test_certify_ordering_over_a_long_grid():
    pytest.importorskip("flint")
    from theory import certified

    # 10^6 grid points, each three arb enclosures; the message names the grid point it reached
    named = (r"(certify_ordering at d = \d+|certified.conformity\('\w+', \d+, '0.5'\)"
             r"|certified Taylor series at d = \d+|certified 1F1 series at a = \d+)")
    with small_budget(), raises_budget(named):
        certified.certify_ordering(range(2, 10**6), ["0.5"])


def test_work_count_counts_the_checks_of_the_loops():
    """work_count() is the clock-free measure the regression tests bound: it grows with the trip
    count (the Kummer sum checks every 256 terms) and not with anything else; work_used() sums the
    charges (256 units per check of 256 terms at up to 256 bits)."""
    w0, u0 = _context.work_count(), _context.work_used()
    theory.orf_conformity_kummer(2 * 256 * 10, "0.5")  # d/2 = 2560 terms: 10 checks
    w1, u1 = _context.work_count(), _context.work_used()
    theory.orf_conformity_kummer(2 * 256 * 40, "0.5")  # 10240 terms: 40 checks
    w2, u2 = _context.work_count(), _context.work_used()
    assert (w1 - w0, w2 - w1) == (10, 40)
    assert (u1 - u0, u2 - u1) == (2560, 10240)
