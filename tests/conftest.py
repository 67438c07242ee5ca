"""Shared fixtures of the unit tests.

* Statistical thresholds and the digit/z comparisons live in one place,
  :mod:`paper_checks._compare` (``Z_CRIT`` = 4.5, two-sided false alarm 6.8e-6
  per comparison; ``Z_ONE_SIDED`` = 3.09, one-sided 1e-3 for ordering claims;
  ``assert_agree`` for digits); import them from there.
* ``routes``: independent computations of the plotted MSE ratios (other
  conformity routes than the ones the figures use, and the MSE formulas of
  Thm 3.2 / App. A.5 assembled here), so that figure tests verify numbers
  instead of comparing a function with itself.
* An autouse guard: no test may leave mpmath's global precision changed
  (theory promises never to write the caller's context).
* Hypothesis examples depend only on the test's own source: its "local
  constants" (mined from every project module imported so far) are switched
  off, see :func:`_hypothesis_examples_independent_of_imports`.
"""

from __future__ import annotations

import mpmath
import pytest
from mpmath import mp

import theory


@pytest.fixture(autouse=True)
def _global_precision_unchanged():
    before = mpmath.mp.prec
    yield
    assert mpmath.mp.prec == before, f"the test left mpmath.mp.prec at {mpmath.mp.prec} (was {before})"


@pytest.fixture(autouse=True, scope="session")
def _hypothesis_examples_independent_of_imports():
    """Hypothesis (>= 6.131) also draws constants mined from the source of every *project*
    module imported so far.  The derandomized examples of a test then depended on which other
    tests ran first in the same process and on edits anywhere in the project: with
    ``import montecarlo`` done before it, tests/test_theory.py::test_rff_conformity drew
    other examples (z = 5.000e-2 instead of 5.000e-39 as its third) and ran 434 s instead of
    0.1 s, so a CI worker and a local run exercised different cases.  With the local pool
    empty, the examples depend on the test's source and Hypothesis's fixed global constants only.

    This touches a private name of Hypothesis; if it moves, the patch is skipped (the examples
    are still derandomized, only no longer independent of imports)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        yield
        return
    if not hasattr(providers, "_get_local_constants") or not hasattr(providers, "CONSTANTS_CACHE"):
        yield
        return
    empty = Constants()
    patch = pytest.MonkeyPatch()
    patch.setattr(providers, "_get_local_constants", lambda: empty)
    providers.CONSTANTS_CACHE.cache.clear()
    yield
    patch.undo()
    providers.CONSTANTS_CACHE.cache.clear()


class IndependentRoutes:
    """MSE ratios from routes other than those :func:`theory.mse_ratio` / :func:`theory.rff_mse_ratio` use.

    PRF conformities: ORF by the printed series of eq. ``orf_conformity``
    (:func:`theory.orf_conformity_series`, vs 1F1 in theory.conformity), SimRF by
    the 1-D integral of eq. ``theta_conformity`` (:func:`theory.conformity_at_angle_quad`,
    vs the Taylor route).  RFF: ORF by Thm 4.5's series as printed
    (:func:`theory.rff_orf_conformity_series`), SimRF by quadrature
    (:func:`theory.rff_conformity_at_angle_quad`).  The MSE of m = d features
    is assembled here: PRF :math:`e^{v^2}(e^{v^2}-1) + (m-1)(\\rho-e^{v^2})`,
    RFF :math:`(1-e^{-z^2})^2/2 + (m-1)(\\rho-e^{-z^2})`, up to common factors.
    Call at a working precision of 20-30 digits.
    """

    @staticmethod
    def prf_conformity(coupling, d, v):
        v = mp.mpf(v)
        if coupling == "iid":
            return mp.exp(v * v)
        if coupling == "orthogonal":
            return theory.orf_conformity_series(d, v)
        if coupling == "simplex":
            return theory.conformity_at_angle_quad(d, v, mp.mpf(-1) / (d - 1))
        raise ValueError(f"no independent route for {coupling!r}")

    @staticmethod
    def rff_conformity(coupling, d, z):
        z = mp.mpf(z)
        if coupling == "iid":
            return mp.exp(-z * z)
        if coupling == "orthogonal":
            return theory.rff_orf_conformity_series(d, z)
        if coupling == "simplex":
            return theory.rff_conformity_at_angle_quad(d, z, mp.mpf(-1) / (d - 1))
        raise ValueError(f"no independent route for {coupling!r}")

    def prf_ratio(self, coupling, baseline, d, v):
        """MSE_coupling / MSE_baseline at m = d (v > 0)."""
        v = mp.mpf(v)
        e = mp.exp(v * v)

        def mse(c):
            return e * (e - 1) + (d - 1) * (self.prf_conformity(c, d, v) - e)

        return mse(coupling) / mse(baseline)

    def rff_ratio(self, coupling, baseline, d, z):
        """RFF MSE_coupling / MSE_baseline at m = d (z > 0)."""
        z = mp.mpf(z)
        e = mp.exp(-z * z)

        def mse(c):
            return (1 - e) ** 2 / 2 + (d - 1) * (self.rff_conformity(c, d, z) - e)

        return mse(coupling) / mse(baseline)


@pytest.fixture(scope="session")
def routes():
    """Independent routes for the plotted ratios (see :class:`IndependentRoutes`)."""
    return IndependentRoutes()
