"""Tests of :mod:`theory._series`."""

import math

from mpmath import mp

from theory import _context
from theory._series import log2abs


# ---------------------------------------------------------------------------
# Small v: relative accuracy where the closed forms are differences of nearly equal numbers, and the time
# budget at tiny v (found by an exploration helper).
#
# theory.fixed_norm formed mu/mu0 - 1, E b^2 - mu^2 and rho - mu^2 at the working precision: silent zeros and
# negative MSEs at small v (fixed_norm_bias(8, 1e-20) = 0.0, the RFF full-block MSE -4.1e-24 at z = 1e-3).
# theory._series.log2abs took a full-precision logarithm (8 s at 266k bits, not interruptible) to read an
# exponent: theory.mse_ratio at v = 1e-20000 ran 10-18 s under a 3 s budget (1.1 s after; checked structurally,
# not by the clock: log2abs must not call the logarithm).
#
# The references are independent of the module: the same moments through mpmath's Bessel functions in the
# global context at several hundred to a few thousand digits (enough for the cancellation), and leading orders
# derived by hand (in the docstrings).


def test_log2abs_reads_the_exponent_without_a_logarithm(monkeypatch):
    """log2abs(1e-100000) = -100000 log2(10) to 1e-12 relative (float arithmetic, independent), and other
    magnitudes against mpmath's log at 60 digits.  Power: with the private context's log disabled the old
    implementation (float(mp.log(|x|, 2)), 8 s at 266k bits) raises; the exponent route does not need it."""

    def no_log(*args, **kwargs):
        raise AssertionError("log2abs took a working-precision logarithm")

    monkeypatch.setattr(_context.mp, "log", no_log)
    x = _context.mp.mpf("1e-100000")
    assert abs(log2abs(x) / (-100000 * math.log2(10)) - 1) < 1e-12
    with _context.mp.workprec(266_000):
        big = _context.mp.mpf(1) / 3 * _context.mp.mpf(2) ** -66_000  # a 266k-bit mantissa
        assert abs(log2abs(big) - (-66_000 - math.log2(3))) < 1e-9
    monkeypatch.undo()
    with mp.workdps(60):
        for s in ("1e-300", "0.75", "-3", "12345.678", "-1e+5000"):
            ref = float(mp.log(abs(mp.mpf(s)), 2))
            assert abs(log2abs(mp.mpf(s)) - ref) <= 1e-13 * (1 + abs(ref))
    assert log2abs(mp.mpf(0)) == float("-inf") and log2abs(mp.inf) == float("inf") and math.isnan(log2abs(mp.nan))
