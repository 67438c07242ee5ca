"""Series summation with rigorous tail bounds and cancellation control.

The closed forms of the paper are power series whose successive term ratios
are bounded by non-increasing functions of the index.  :func:`sum_series` sums
such a series until a *proved* bound on the remainder is below the working
precision, and repeats the sum with more bits when the terms cancel
(alternating series, e.g. the RFF forms where v**2 -> -z**2).  Failure is loud:
``mpmath.NoConvergence`` with a message saying what to change.
"""

from __future__ import annotations

import math

from ._context import mp

from ._context import check_time
from .errors import ConvergenceError

#: Default cap on the number of terms of a single series.
MAX_TERMS = 200_000


def log2abs(x):
    """log2 |x| as a float (-inf for 0), read from the binary exponent and mantissa of the mpf.

    A float is all the callers need (bits lost to cancellation, the size of a term), so no
    logarithm is taken at the working precision: at :math:`10^5` bits ``mp.log`` costs seconds
    and cannot be interrupted by the budget.  ``math.log2`` of the integer mantissa (any
    size) is accurate to a few units in the last place of a double, so the result is within a few
    ulps of the true value for any exponent, also far beyond the float range.
    """
    raw = getattr(x, "_mpf_", None)
    _sign, man, exp, _bc = raw if raw is not None else mp.mpf(x)._mpf_  # mpfs of any context, unrounded
    if not man:  # 0, +-inf or nan
        return float("-inf") if not x else float(abs(x))
    return float(exp) + math.log2(man)


def sum_series(make_terms, ratio_bound=None, *, remainder=None, what, max_terms=MAX_TERMS, extra_bits=10):
    r"""Sum a series with a proved remainder bound and cancellation control.

    Parameters
    ----------
    make_terms : callable
        ``make_terms()`` returns an iterator over the terms :math:`t_0, t_1,
        \ldots`, computed at the working precision in force when it is called
        (it is called again, at higher precision, if cancellation is detected).
    ratio_bound : callable
        ``ratio_bound(k)`` returns :math:`q_k` with
        :math:`|t_{j+1}/t_j| \le q_k` for every :math:`j \ge k`.  Once
        :math:`q_k < 1`, the remainder after :math:`t_k` is at most
        :math:`|t_k|\,q_k/(1-q_k)` (geometric majorant); summation stops when
        this is below :math:`2^{-p}|S|` at the working precision ``p``.
    remainder : callable, optional
        Instead of ``ratio_bound``: ``remainder(k)`` returns a proved bound on
        :math:`|\sum_{j>k}t_j|` (used when the terms themselves do not have
        monotone ratios but a majorant series does).
    what : str
        Name used in error messages.
    max_terms : int
        Raise ``mpmath.NoConvergence`` after this many terms.

    Returns
    -------
    mpf
        The sum, correct to the working precision.
    """
    prec = mp.prec
    guard = extra_bits
    lost = float("nan")
    for _attempt in range(10):
        with mp.workprec(prec + guard):
            total, biggest = _sum_once(make_terms(), ratio_bound, remainder, what, max_terms)
        lost = log2abs(biggest) - log2abs(total)
        if total and lost <= guard - 6:
            return +total
        guard = 2 * guard + 64 if not total else int(lost) + 32
    raise ConvergenceError(
        f"{what}: catastrophic cancellation could not be controlled "
        f"(last attempt lost {lost:.0f} bits); the argument is too large for this series"
    )


def _sum_once(terms, ratio_bound, remainder, what, max_terms):
    eps = mp.mpf(2) ** (-mp.prec)
    total = mp.mpf(0)
    biggest = mp.mpf(0)
    for k, term in enumerate(terms):
        if k >= max_terms:
            break
        if k % 16 == 0:
            check_time(what, units=16)  # 16 terms of a few products
        total += term
        a = abs(term)
        if a > biggest:
            biggest = a
        if remainder is not None:
            if total and remainder(k) <= eps * abs(total):
                return total, biggest
            continue
        q = ratio_bound(k)
        if q < 1 and a * q <= eps * abs(total) * (1 - q):
            return total, biggest
    raise ConvergenceError(
        f"{what}: series did not converge within {max_terms} terms; "
        "use a smaller argument or raise max_terms"
    )


def sum_ratio_series(ratio, x, *, what, first=1, max_terms=MAX_TERMS):
    r"""Sum :math:`\sum_k t_k`, :math:`t_0` = ``first``, :math:`t_{k+1} = t_k\,x\,\mathrm{ratio}(k)`.

    The caller guarantees that :math:`|\mathrm{ratio}(k)|` is non-increasing
    in k, so :math:`q_k = |x\,\mathrm{ratio}(k)|` bounds all later term ratios
    (see :func:`sum_series`).
    """

    k = 1
    while k <= max_terms and not abs(x * ratio(k)) < mp.mpf(1) / 2:
        k *= 2
    if k > max_terms:
        raise ConvergenceError(
            f"{what}: the terms only start to decrease after about {k // 2}-{k} terms, more than the "
            f"budget of {max_terms}; use a smaller argument (this route is meant for moderate ones)")

    def make_terms():
        xx = mp.mpf(x)
        term = mp.mpf(first)
        k = 0
        while True:
            yield term
            term = term * xx * ratio(k)
            k += 1

    return sum_series(make_terms, lambda k: abs(x * ratio(k)), what=what, max_terms=max_terms)


def quad_checked(f, points, *, what, maxdegree=None, units=1):
    """``mpmath.quad`` piece by piece, with each piece's error estimate checked.

    mpmath stops refining a piece once its estimated *absolute* error is
    below :math:`2^{-p}`, which is not enough for a piece whose integral is
    tiny.  Each piece [a, b] is therefore rescaled by a sampled magnitude
    (length times the largest sampled |f|) before integration, so that its
    stopping rule acts relative to its own size, and the summed error
    estimate is required to be below :math:`2^{10-p}` relative to the total.

    Raises ``mpmath.NoConvergence`` naming ``what`` and suggesting a larger
    ``maxdegree`` or a lower precision.  ``units``: the work of one evaluation of ``f`` in units of
    work (:func:`theory._context.check_time`), charged at every node.
    """
    kwargs = {"error": True}
    g = f

    def f(t):
        check_time(what, units)
        return g(t)

    if maxdegree is not None:
        if not isinstance(maxdegree, int) or maxdegree < 2:
            # with a single degree mpmath has no error estimate at all
            raise ValueError(f"maxdegree must be an integer >= 2, got {maxdegree!r}")
        kwargs["maxdegree"] = maxdegree
    total = mp.mpf(0)
    err_total = mp.mpf(0)
    for a, b in zip(points[:-1], points[1:]):
        if a == b:
            continue
        if mp.isinf(b):
            probes = [a + t for t in (mp.mpf("0.25"), 1, 2, 4, 8)]
            length = mp.mpf(1)
        else:
            probes = [a + (b - a) * t for t in (mp.mpf("0.05"), mp.mpf("0.3"), mp.mpf("0.5"),
                                                mp.mpf("0.7"), mp.mpf("0.95"))]
            length = b - a
        scale = length * max(abs(f(t)) for t in probes)
        if not scale:
            scale = mp.mpf(1)
        value, err = mp.quad(lambda t: f(t) / scale, [a, b], **kwargs)
        if value and err > mp.mpf(2) ** (4 - mp.prec) * abs(value):
            # the sampled magnitude overestimated the piece: rescale by its integral
            scale = abs(value * scale)
            value, err = mp.quad(lambda t: f(t) / scale, [a, b], **kwargs)
        total += value * scale
        err_total += err * scale
    tol = mp.mpf(2) ** (10 - mp.prec) * abs(total)
    if not err_total <= tol:
        raise ConvergenceError(
            f"{what}: quadrature error estimate {mp.nstr(err_total, 3)} exceeds the tolerance "
            f"{mp.nstr(tol, 3)} at {mp.prec} bits; pass a larger maxdegree (now "
            f"{maxdegree or 'default'}) or lower the working precision"
        )
    return total


def peak_in_log(lam, u_hi, what, fine=False, scan=None):
    r"""(u*, lambda(u*)): the maximum of a unimodal log-integrand ``lam(u)`` over :math:`u \le u_{hi}`.

    A scan of u (uniform in :math:`e^u` just below :math:`e^{u_{hi}}`, then steps growing by 1.25
    towards :math:`-\infty`) until lambda has dropped far below its best sample (or levels off far
    out: a plateau, as for the sine-weighted average at d = 1, holds no peak), then golden
    section between the best sample's neighbours (they bracket the maximum of a unimodal function).
    The section stops once the bracket is below :math:`10^{-3}(1 + |u|)` (the breakpoints of a
    quadrature need the peak's place, not its digits); with ``fine=True`` it goes on until lambda is
    within 1/20 of its maximum across the bracket, i.e. the bracket is well inside a peak of any
    width (:math:`10^{-10}` in u for :func:`theory.pdf_wij` at :math:`d = 2^{63}`), and also returns
    the bracket's final width (a lower bound of the peak's scale, a start for :func:`drop_scale`).
    With ``scan`` (a list of u, e.g. uniform over a finite interval) those samples replace the scan.
    """
    us = [u_hi + mp.log(mp.mpf(1) - mp.mpf(j) / 40) for j in range(0, 36)] if scan is None else list(scan)
    u = us[-1]
    step = mp.mpf(1) / 2
    best_u, best = max(((t, lam(t)) for t in us), key=lambda p: p[1])
    floor_gap = 4 * mp.prec + 200
    values = {t: None for t in us}
    prev = None
    while scan is None:
        check_time(what, units=30)  # one evaluation of lambda (its callers' log-integrands: 100-450 us)
        u -= step
        val = lam(u)
        values[u] = val
        if prev is not None and abs(val - prev) < mp.mpf(1) / 1000 and u < u_hi - 100:
            break  # a plateau towards e^u -> 0 (no peak there: the integrand is flat in e^u), e.g. d = 1
        prev = val
        if val > best:
            best_u, best = u, val
        elif val < best - floor_gap:
            break
        step *= mp.mpf("1.25")
        if u < -10 ** 7:
            raise ConvergenceError(f"{what}: the integrand's peak could not be located")
    cand = sorted(values)
    j = cand.index(best_u)
    lo = cand[max(j - 1, 0)]
    hi = cand[min(j + 1, len(cand) - 1)]
    g = (mp.sqrt(5) - 1) / 2
    a, b = lo, hi
    fa, fb = (lam(a), lam(b)) if fine else (None, None)
    c1, c2 = b - g * (b - a), a + g * (b - a)
    f1, f2 = lam(c1), lam(c2)
    for _ in range(2 * mp.prec + 100 if fine else 60):  # fine: down to the resolution of u
        check_time(what, units=30)  # an evaluation of lambda
        if fine:
            if max(f1, f2) - min(fa, fb) < mp.mpf(1) / 20 or b - a <= mp.eps * (1 + abs(a)):
                break
        elif b - a < mp.mpf(10) ** -3 * (1 + abs(a)):
            break
        if f1 < f2:
            a, fa, c1, f1 = c1, f1, c2, f2
            c2 = a + g * (b - a)
            f2 = lam(c2)
        else:
            b, fb, c2, f2 = c2, f2, c1, f1
            c1 = b - g * (b - a)
            f1 = lam(c1)
    u_star, val = (c1, f1) if f1 > f2 else (c2, f2)
    if best > val:
        u_star, val = best_u, best
    if fine:
        return min(u_star, u_hi), val, b - a
    return min(u_star, u_hi), val


def drop_scale(lam, u0, l0, side, u_hi, start=None, what="the width of an integrand's peak"):
    """Distance in u from the peak u0 (value l0) to where lambda has dropped by 2 on ``side``
    (-1 left, +1 right): doubling from ``start`` (default 1/64), then four bisections."""
    w = mp.mpf(1) / 64 if start is None else start
    for _ in range(60 if start is None else 2 * mp.prec + 100):  # from start ~ eps up to O(1)
        check_time(what, units=30)  # an evaluation of lambda
        u = u0 + side * w
        if side > 0 and u >= u_hi:
            return u_hi - u0
        if lam(u) < l0 - 2:
            break
        w *= 2
    lo, hi = w / 2, w
    for _ in range(4):
        mid = (lo + hi) / 2
        if lam(u0 + side * mid) < l0 - 2:
            hi = mid
        else:
            lo = mid
    return hi
