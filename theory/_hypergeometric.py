r"""Kummer's function :math:`M(a, b, x) = {}_1F_1(a; b; x)` for the closed forms of the paper.

Where the closed forms use it and which route serves which arguments: :ref:`guide-theory._hypergeometric`
(``docs/guide/theory_design.rst``).
"""

from __future__ import annotations

import math

import mpmath

from ._context import check_time, mp
from .errors import ConvergenceError

__all__ = ["hyp1f1_neg", "hyp1f1_pos", "laguerre_scan"]

#: Term budget of one mpmath hyp1f1 call.
MAX_TERMS = 20_000

#: Precision retries of the recurrence before giving up (near an exact zero).
MAX_RETRIES = 6


def _half_split(a, b):
    """(n, f) with a - b = n + f, n >= 0 an int, f in {0, 1/2}; ValueError otherwise."""
    two = 2 * (a - b)
    t = int(two)
    if t != two or t < 0:
        raise ValueError(f"a - b must be a non-negative integer or half-integer, got {a - b}")
    return t // 2, mp.mpf(t % 2) / 2


def _mpmath(a, b, x, what, maxprec=None, zeroprec=None):
    """mpmath's hyp1f1 with a term budget; None when it gives up.

    Its series runs uninterrupted, so it is charged first, by its cost as measured at 15 and 50 digits:
    with s = min(|x|, max(|a|, |b|)) (beyond the parameters mpmath's asymptotic expansion takes over, about
    0.1-0.3 ms whatever x), about s^1.5/4 units for x < 0 (the cancellation raises mpmath's precision: 1 ms
    at a = 64, x = -40; 37-50 ms at a = 512 or 1024, x = -600; 0.2-1.3 s at a = 2048-4096, x = -2000 to -5000)
    and s/4 for x > 0, plus 20 (a call at a small argument)."""
    s = float(min(abs(x), max(abs(a), abs(b)), mp.mpf(10) ** 6))
    check_time(what, units=20 + int(min(s ** 1.5 / 4 if x < 0 else s / 4, 250_000)))
    try:
        kwargs = {"maxterms": MAX_TERMS}
        if maxprec is not None:
            kwargs["maxprec"] = maxprec
        if zeroprec is not None:
            kwargs["zeroprec"] = zeroprec
        return mp.hyp1f1(a, b, x, **kwargs)
    except mpmath.libmp.NoConvergence:
        return None
    except ValueError as exc:  # "hypsum() failed to converge": cancellation beyond maxprec
        if "hypsum" in str(exc):
            return None
        raise


def hyp1f1_pos(a, b, x, what="1F1"):
    r""":math:`M(a, b, x)` for :math:`x \ge 0` and :math:`a - b \in \frac12\mathbb Z_{\ge0}`, :math:`b > 0`.

    mpmath first; if it runs out of terms, for an integer :math:`a - b` the
    finite Kummer sum of positive terms, for a half-integer one the forward
    recurrence in a (dominant for x > 0, checked at two precisions).
    """
    if not x:
        return mp.mpf(1)
    n, f = _half_split(a, b)
    if f == 0 and n <= 4 * MAX_TERMS and (n < 64 or x > n / 4):
        # cheaper and safer than the series once x is comparable with n
        return _kummer_positive(n, b, x, what)
    if f == 0 and x >= MAX_TERMS and not x > 4 * (a + 1) ** 2 + 2 * mp.prec:
        # the series needs more than x terms (its term ratio is >= x/(k+1)) and mpmath's asymptotic
        # expansion is not in reach: one futile mpmath call would run for seconds past the budget
        return _kummer_positive(n, b, x, what)
    r = _mpmath(a, b, x, what)
    if r is not None:
        return r
    if f == 0:
        return _kummer_positive(n, b, x, what)
    return _positive_recurrence_checked(n, b, x, what)


def _positive_recurrence(n, b, x, prec, what="1F1"):
    """M(b + n + 1/2, b, x), x > 0, by the recurrence in a (DLMF 13.3.1), forward from
    M(b - 1/2, b, x) and M(b + 1/2, b, x): M grows with a for x > 0, the dominant direction."""
    what = f"{what}: recurrence in a over a - b = {n} + 1/2 steps (x > 0)"
    with mp.workprec(prec):
        half = mp.mpf(1) / 2
        check_time(what, units=20 + int(min(float(min(x, mp.mpf(10) ** 6)) / 2, 500_000)))  # two series, first
        m0 = mp.hyp1f1(b - half, b, x, maxterms=10 ** 6)
        m1 = mp.hyp1f1(b + half, b, x, maxterms=10 ** 6)
        a = b + half
        for k in range(n):
            if k % 256 == 0:
                check_time(what, units=min(256, n - k))  # up to 256 steps of a few products
            m0, m1 = m1, ((2 * a - b + x) * m1 + (b - a) * m0) / a
            a += 1
        return m1


def _positive_recurrence_checked(n, b, x, what):
    prec = mp.prec
    guard = 16 + int(math.log2(n + 2))
    for _ in range(3):
        try:
            r1 = _positive_recurrence(n, b, x, prec + guard, what)
            r2 = _positive_recurrence(n, b, x, prec + guard + 32, what)
        except mpmath.libmp.NoConvergence:
            break
        if abs(r1 - r2) <= abs(r2) * mp.mpf(2) ** (-prec - 2):
            return +r2
        guard = 2 * guard + 32
    raise ConvergenceError(
        f"{what}: 1F1({mp.nstr(_a_of(n, b), 8)}; {mp.nstr(b, 8)}; {mp.nstr(x, 8)}) could not be evaluated to the "
        "working precision (odd d, series and recurrence both failed); use a smaller v or lower precision")


def _a_of(n, b):
    return b + n + mp.mpf(1) / 2


def _kummer_positive(n, b, x, what):
    """e^x sum_{j<=n} C(n, j) x^j / (b)_j (all terms positive, rounding error < (n+2) ulp)."""
    what = f"{what}: Kummer's finite sum of a - b + 1 = {n + 1} terms"
    with mp.workprec(mp.prec + int(math.log2(n + 2)) + 8):
        term = mp.mpf(1)
        total = mp.mpf(1)
        for j in range(n):
            if j % 512 == 0:
                check_time(what, units=min(512, n - j))  # up to 512 terms of a few products
            term = term * (n - j) / ((j + 1) * (b + j)) * x
            total += term
        return mp.exp(x) * total


def hyp1f1_neg(a, b, y, what="1F1", absolute=False):
    r""":math:`M(a, b, -y)` for :math:`y \ge 0`, :math:`a - b \in \frac12\mathbb Z_{\ge0}`, :math:`b > 0`,
    with relative accuracy (ConvergenceError within the budget where none can be had, e.g. at
    an exact zero).

    The recurrence route costs O(a - b) operations for any y; the power
    series (mpmath) costs about :math:`2ey` terms and :math:`2.9y` extra bits,
    so the series is used while that is cheaper, the recurrence otherwise,
    and mpmath's asymptotic expansion for very large y.

    With ``absolute=True`` (integrands of quadratures) the accuracy asked for
    is :math:`2^{-p}` relative to the function's natural scale (the largest
    term of the recurrence times :math:`e^{-y}`) rather than to its value,
    which may then be 0 or lose relative digits near a zero.
    """
    if not y:
        return mp.mpf(1)
    n, f = _half_split(a, b)
    series_cost = y * (1 + y / (mp.prec + 64))
    # mpmath's asymptotic expansion converges fast once y >> a (a - b + 1)
    big = y > 4 * (a + 1) ** 2 + 2 * mp.prec
    # the series' terms grow until k >= y - 1 (term ratio >= y/(k+1)): beyond MAX_TERMS it cannot
    # succeed, and one futile mpmath call can run for seconds past the budget (maxprec ~ 8y bits)
    if big or (series_cost < 2 * n + 8 and y < MAX_TERMS):
        r = _mpmath(a, b, -y, what, maxprec=8 * mp.prec + 8 * int(y) + 256,
                    zeroprec=(2 * mp.prec + 16 + int(y / mp.ln2)) if absolute else None)
        if r is not None:
            return r
    return _recurrence_checked(n, f, b, y, what, absolute)


def _recurrence(n, f, b, y, prec, what="1F1"):
    """M(b + f + n, b, -y) by the recurrence in a, at ``prec`` bits (see :ref:`guide-theory._hypergeometric`)."""
    what = f"{what}: recurrence in a over a - b = {n}{' + 1/2' if f else ''} steps (x < 0)"
    with mp.workprec(prec):
        yy = y  # keep every bit of y: e^{-y} below needs it in absolute terms
        if f == 0:
            m0, m1 = mp.mpf(1), 1 - yy / b  # e^y M(b, b, -y), e^y M(b + 1, b, -y)
            a = b + 1
            steps = n - 1
        else:
            zp = 2 * prec + 32
            # two series of about y terms at this precision, uninterrupted: charged first
            check_time(what, units=20 + int(min(float(min(yy, mp.mpf(10) ** 6)) / 2, 500_000)))
            m0 = mp.hyp1f1(mp.mpf(1) / 2, b, yy, zeroprec=zp)  # e^y M(b - 1/2, b, -y)
            m1 = mp.hyp1f1(-mp.mpf(1) / 2, b, yy, zeroprec=zp)  # e^y M(b + 1/2, b, -y)
            a = b + f
            steps = n
        scale = max(abs(m0), abs(m1))
        if n == 0:
            out = m0 if f == 0 else m1
        else:
            for k in range(steps):
                if k % 32 == 0:
                    check_time(what, units=min(32, steps - k))  # up to 32 steps of a few products
                m0, m1 = m1, ((2 * a - b - yy) * m1 + (b - a) * m0) / a
                a += 1
                if abs(m1) > scale:
                    scale = abs(m1)
            out = m1
        e = mp.exp(-yy)
        return out * e, scale * e


#: Largest guard (bits) the recurrence may use: for odd d beyond the oscillation range the
#: recurrence amplifies rounding errors by up to e^y, so about 1.45 y bits are needed (the
#: starting values then cost about e y series terms at that precision, mpmath's own loop).
MAX_GUARD_BITS = 16_000


def _recurrence_checked(n, f, b, y, what, absolute=False):
    prec = mp.prec
    guard = 16 + int(math.log2(n + 2))
    if f and y > 2 * b:
        # half-integer degree, y past the turning point: the sequence is no longer the dominant
        # solution, and rounding errors grow like e^y (measured); start with enough bits for that
        guard = max(guard, int(1.45 * float(y) - 2.9 * float(b)) + 64)
    if guard > MAX_GUARD_BITS:
        raise ConvergenceError(
            f"{what}: 1F1 at y = {mp.nstr(y, 8)} with half-integer a - b needs about {guard} guard bits "
            f"(beyond {MAX_GUARD_BITS}); outside the reachable domain (odd d with d << z^2/2 << d^2): "
            "use an even d nearby")
    for _ in range(MAX_RETRIES):
        r1, _ = _recurrence(n, f, b, y, prec + guard, what)
        r2, scale = _recurrence(n, f, b, y, prec + guard + 32, what)
        ref = scale if absolute else abs(r2)
        if ref and abs(r1 - r2) <= ref * mp.mpf(2) ** (-prec - 2):
            return +r2
        guard = min(2 * guard + 32, MAX_GUARD_BITS)
    raise ConvergenceError(
        f"{what}: no relative accuracy at {prec} bits after {MAX_RETRIES} precision increases "
        f"(y = {mp.nstr(y, 12)} is at or extremely close to a zero of the function); "
        "perturb the argument or lower the working precision")


def laguerre_scan(d, ys):
    r"""Sturm count and log-magnitude of :math:`e^yM(d, \frac d2, -y)` at many y, in double precision.

    Runs the recurrence of :func:`hyp1f1_neg` on the sequence
    :math:`S_k(y) = e^yM(b+f+k, b, -y) = M(-f-k, b, y)` (``b = d/2``; numpy
    vectorised over y, rescaled to stay in range) up to :math:`S_K = e^yM(d, b, -y)`.

    Parameters
    ----------
    d : int >= 1
    ys : array_like of float >= 0

    Returns
    -------
    count : ndarray of int
        Sign changes of :math:`S_0, \ldots, S_K`.  For even d the :math:`S_k`
        are positive multiples of the Laguerre polynomials
        :math:`L^{(d/2-1)}_k(y)`, a Sturm sequence: the count is the number of
        zeros of :math:`M(d, \frac d2, -t)` in :math:`0 < t < y`.  For odd d
        (Laguerre functions of half-integer degree) the same count is an
        empirical device, checked against dense high-precision scans in the
        tests for :math:`y \le 2d`.
    log_abs : ndarray of float
        :math:`\log|S_K|` (natural log; -inf where :math:`S_K = 0`).
    sign : ndarray of int
    ratio : ndarray of float
        :math:`S_{K-1}/S_K`, for the derivative
        :math:`y\,S_K' = -\frac d2(S_{K-1} - S_K)` (from the contiguous relation
        :math:`zM'(a,b,z) = a(M(a+1,b,z) - M(a,b,z))`, DLMF section 13.3(ii)).
    """
    import numpy as np

    ys = np.atleast_1d(np.asarray(ys, dtype=float))
    what = f"laguerre_scan at d = {d} (a recurrence of d/2 steps over {ys.size} points y)"
    b = d / 2.0
    n = d // 2
    logs = np.zeros_like(ys)
    if d % 2 == 0:
        m0 = np.ones_like(ys)
        m1 = 1.0 - ys / b
        a = b + 1
        steps = n - 1
    else:
        m0 = np.empty_like(ys)
        m1 = np.empty_like(ys)
        with mp.workprec(64):
            for i, y in enumerate(ys):
                check_time(f"laguerre_scan at d = {d} (starting values at {ys.size} points y)", units=4)
                yy = mp.mpf(float(y))
                s0 = mp.hyp1f1(mp.mpf(1) / 2, mp.mpf(d) / 2, yy, zeroprec=200)
                s1 = mp.hyp1f1(-mp.mpf(1) / 2, mp.mpf(d) / 2, yy, zeroprec=200)
                e = int(mp.mag(s0))
                m0[i] = float(mp.ldexp(s0, -e))
                m1[i] = float(mp.ldexp(s1, -e))
                logs[i] = e * math.log(2)
        a = b + 0.5
        steps = n
    count = ((m0 < 0) != (m1 < 0)).astype(np.int64)
    for k in range(steps):
        nxt = ((2 * a - b - ys) * m1 + (b - a) * m0) / a
        count += ((nxt < 0) != (m1 < 0)) & (nxt != 0)
        m0, m1 = m1, nxt
        a += 1
        if k % 8 == 7:
            check_time(what, units=16 + ys.size // 32)  # 8 steps of about 8 numpy operations each
            big = np.maximum(np.abs(m0), np.abs(m1))
            fix = (big > 1e100) | ((big < 1e-100) & (big > 0))
            if fix.any():
                e = np.frexp(big[fix])[1]
                m0[fix] = np.ldexp(m0[fix], -e)
                m1[fix] = np.ldexp(m1[fix], -e)
                logs[fix] += e * math.log(2)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_abs = np.log(np.abs(m1)) + logs
        ratio = m0 / m1
    return count, log_abs, np.sign(m1).astype(np.int64), ratio
