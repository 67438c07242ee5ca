"""Tests of :mod:`theory.errors`: one family of failures."""

import mpmath
import pytest

import theory
from theory import _context, certified as C


# ---------------------------------------------------------------------------
# Regression tests for the findings of issue 11, one block per item, each against an
# independent computation (mpmath's own series at high precision, arb balls from
# python-flint, a dense scan, or a closed form).


def test_one_failure_family(monkeypatch):
    with pytest.raises(theory.ConvergenceError):
        C.conformity("simplex", 17, "40", max_prec=128)
    with pytest.raises(theory.CertificationError):
        C.conformity("simplex", 17, "40", max_prec=128)
    assert issubclass(theory.CertificationError, mpmath.libmp.NoConvergence)

    def failing(*args, **kwargs):
        raise ValueError("hypsum() failed to converge to the requested 80 bits of accuracy")

    monkeypatch.setattr(_context.mp, "hyp1f1", failing)
    with pytest.raises(theory.ConvergenceError, match="mpmath could not reach"):
        theory.conformity_orthogonal(9, "0.5")  # odd d: mpmath's hyp1f1 is called
