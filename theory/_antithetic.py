r"""The antithetic Gamma pair of :mod:`theory.pnc`, fast (a private module).

The construction, its arithmetic and its caches: :ref:`guide-theory._antithetic`
(``docs/guide/theory_design.rst``).
"""

from __future__ import annotations

import functools
import math

from mpmath.libmp import (from_float, from_int, from_man_exp, mpf_add, mpf_div, mpf_exp, mpf_log, mpf_mul, mpf_neg,
                          mpf_pos, mpf_shift, mpf_sub, round_nearest, to_fixed, to_float)
from mpmath.libmp.libelefun import exp_basecase, ln2_fixed

from ._context import check_time, mp
from .errors import ConvergenceError
from .validation import show_int

#: Steps allowed per inversion (each one evaluation of Q_a): the fourth-order step from scipy's start
#: needs one at up to ~190 bits; the safeguarded fall-back (bracket and bisection in log x) more.
MAX_STEPS = 60

#: Integer a = d/2 up to this value evaluate Q_a by its finite sum (a terms); larger a by 1 - P_a (at d = 256
#: the finite sum made the call 2.6x faster; at d = 1024 the two cost the same).
FINITE_SUM_MAX = 512


def _fixed(x, bits):
    return to_fixed(x._mpf_, bits)


def _from_fixed(n, bits):
    return mp.make_mpf(from_man_exp(n, -bits))


@functools.lru_cache(maxsize=256)
def _log_gammas(d, prec):
    """(log Gamma(a), log Gamma(a + 1)) at ``prec`` bits, a = d/2."""
    with mp.workprec(prec):
        a = mp.mpf(d) / 2
        lg = mp.loggamma(a)
        return lg._mpf_, (lg + mp.log(a))._mpf_


def _lg(d):
    lg, lg1 = _log_gammas(d, mp.prec)
    return mp.make_mpf(lg), mp.make_mpf(lg1)


def _lower_series(d, x, bits):
    r""":math:`S = \sum_{k\ge0} x^k/(a+1)_k` (a = d/2, x >= 0 an mpf) as a fixed-point integer at scale 2^bits
    (:func:`_lower_series_fixed`)."""
    return _lower_series_fixed(d, _fixed(x, bits), bits, x._mpf_)


def _lower_series_fixed(d, X, bits, x):
    r""":math:`S = \sum_{k\ge0} x^k/(a+1)_k` (a = d/2) for x >= 0 given as the fixed-point integer X at scale
    2^bits, as a fixed-point integer at the same scale (``x``: the mpf tuple, for messages).

    Every term is positive and truncated (at most one unit each); the loop stops at the first term
    below one unit, which comes after the terms start to decrease (ratio x/(a+k) < 1), so that the rest
    is below :math:`1/(1 - x/(a+k))` units.  :data:`SERIES_GUARD` guard bits cover both for up to
    :math:`2^{12}` terms (the callers' x are at most a few times a + the precision); every 128 terms are
    charged :data:`SERIES_UNITS` units of work (:func:`theory._context.check_time`)."""
    total = term = 1 << bits
    x2 = X << 1
    j = d + 2  # 2 (a + k)
    while True:  # blocks of 128 terms (about sqrt(a p) of them near the median), each charged
        for j in range(j, j + 256, 2):
            term = (term * x2 >> bits) // j
            if not term:
                return total
            total += term
        j += 2
        check_time(f"the incomplete gamma series at a = d/2 = {show_int(d)}/2", units=SERIES_UNITS)


#: Guard bits of the fixed-point series (:func:`_lower_series`).
SERIES_GUARD = 24

#: Units of work (theory._context.check_time) charged per 128 terms of the fixed-point series (measured about
#: 0.25-0.4 us per term at 150-250 bits, one unit being one mpmath exp at 53 bits, about 10 us).
SERIES_UNITS = 4

#: Units charged per node of a rule (two fixed-point exponentials, the start of the series, the partner's
#: step and its exponential: about 40-60 us at 150-250 bits).
NODE_UNITS = 5

#: Units charged per evaluation of an integrand at a node (a 0F1 series or an exponential and a few products).
INTEGRAND_UNITS = 2


#: The pieces of a rule at d >= this value take the node's series S by :func:`_lower_series_local` (one Taylor
#: expansion per piece) where its error bound allows; below, :func:`_lower_series_fixed` per node (at d = 8 the
#: two cost the same on a piece of 48 nodes; at d = 64 the expansion is 2x faster, at d = 1024 6x).
LOCAL_MIN_D = 32

#: Error allowed to :func:`_lower_series_local` (units of 2^-bits, the bound propagated through its recurrence
#: and Horner's rule): 12 of the 24 guard bits of :func:`piece_nodes`, as the direct series' 2^12 terms.
LOCAL_MAX_UNITS = 2.0 ** 12

#: Coefficients one expansion of :func:`_lower_series_local` may take before it gives up (a direct series near
#: the median takes about sqrt(2 a p ln 2): 360 at a = 512, p = 184).
LOCAL_MAX_TERMS = 160

#: Halvings of a piece's x range :func:`_lower_series_local` tries where one expansion's error bound fails (far
#: from the median the homogeneous solution :math:`x^{-a}e^x` of the equation grows fast across the range).
LOCAL_SPLITS = 2


def _lower_series_local(d, xs, bits, splits=LOCAL_SPLITS):
    r""":math:`S(x) = \sum_{k\ge0}x^k/(a+1)_k` (a = d/2) at every fixed-point x of ``xs`` (scale 2^bits, 0 < x < a),
    as a list of fixed-point integers, from Taylor expansions of S about the middle of their range instead of
    one series per node; None where the error bound below exceeds :data:`LOCAL_MAX_UNITS` units even on
    ``splits`` halvings of the range.

    S solves :math:`xS' = (x - a)S + a` (from :math:`(x - a)S` term by term), so its Taylor coefficients about
    :math:`x_c` satisfy :math:`s_{n+1} = ((x_c - a - n)s_n + s_{n-1} + a[n = 0])/(x_c(n + 1))`,
    :math:`s_{-1} = 0`, :math:`s_0 = S(x_c)` (:func:`_lower_series_fixed` at 16 more bits).  With the half width H
    of the range, :math:`\sigma_n = s_nH^n` and :math:`u = (x - x_c)/H \in [-1, 1]`:
    :math:`\sigma_{n+1} = c_n\sigma_n + e_n\sigma_{n-1}` (+ the constant at n = 0),
    :math:`|c_n| = |x_c - a - n|H/(x_c(n + 1))`, :math:`e_n = H^2/(x_c(n + 1))`.

    Errors (units of 2^-bits): each coefficient is rounded once (its division: one unit; its two factors, each to a
    unit, times :math:`|\sigma_n|, |\sigma_{n-1}|` over :math:`x_c(n+1)`) and carries the errors of the two before
    it scaled by :math:`|c_n|` and :math:`e_n` (a bound propagated in doubles from 2 units for :math:`\sigma_0`);
    Horner's rule at :math:`|u| \le 1` adds a unit a step, and the rounding of u (a unit) moves the value by at most
    :math:`\sum n|\sigma_n|` units.  The bound is held to :data:`LOCAL_MAX_UNITS` units of the smallest S on the
    range (at least :math:`\sigma_0 - \sum_{n\ge1}|\sigma_n|`, and S >= 1): a relative bound.  Truncation: for m >= n,
    :math:`|c_m| \le c = \max(1, (a - x_c + n)/(n + 1))H/x_c` and :math:`e_m \le e = H^2/(x_c(n + 1))`; with
    :math:`\rho^2 = c\rho + e` the quantity :math:`\max(|\sigma_m|, \rho|\sigma_{m-1}|)` falls by at least
    :math:`\rho` a step, so the rest of the series is at most :math:`\max(|\sigma_n|, \rho|\sigma_{n-1}|)
    \rho/(1 - \rho)`: the loop stops once that is below one unit (with :math:`\rho < 1/2`; the computed
    :math:`\sigma_n, \sigma_{n-1}` stand for the exact ones up to their error bounds, added once more).

    Where it is taken: the Gauss-Legendre pieces of :func:`piece_nodes` at d >= :data:`LOCAL_MIN_D`, whose x lie
    below the median, near it for large d (d = 1024, 30 digits: the three finite pieces by 1, 1 and 4 expansions
    of 43-76 coefficients, against about 360 terms of the series a node); the values of the benchmark grid are
    bit-identical to the series' (their nodes are rounded to the rule's precision, 24 bits below these)."""
    lo, hi = min(xs), max(xs)
    XC = (lo + hi) >> 1
    H = hi - XC
    if H <= 0:
        return [_lower_series_fixed(d, x, bits, None) for x in xs]
    sig = _local_coefficients(d, XC, H, bits)
    if sig is None:
        if splits <= 0:
            return None
        left = [x for x in xs if x <= XC]
        right = [x for x in xs if x > XC]
        parts = {}
        for group in (left, right):
            if group:
                vals = _lower_series_local(d, group, bits, splits - 1)
                if vals is None:
                    return None
                parts.update(zip(group, vals))
        return [parts[x] for x in xs]
    return [_horner(sig[0], XC, H, X, bits) for X in xs]


def _local_coefficients(d, XC, H, bits, first=None, inhomogeneous=None):
    """(the scaled Taylor coefficients sigma_n of :func:`_lower_series_local` about XC with half width H, a bound
    on the error of a value from them in units), or None where that bound exceeds :data:`LOCAL_MAX_UNITS` units of
    the smallest value on the range.

    The equation :math:`xf' = (x - b)f + g(x)` with b = ``d``/2: the recurrence
    :math:`\\sigma_{n+1} = ((x_c - b - n)H\\sigma_n + H^2\\sigma_{n-1} + g_n)/(x_c(n + 1))`; by default S
    (b = a, :math:`g_0 = aH`, :math:`\\sigma_0` by the series); :func:`_upper_local` passes b = a - 1, its
    ``first`` value (2 units at most off) and ``inhomogeneous`` {n: g_n at scale 2^(2 bits)} (the majorant of the
    rest applies beyond the last of them)."""
    scale = 2.0 ** -bits
    fxc, fh, fb = XC * scale, H * scale, d / 2
    H2 = (H * H) >> bits
    if inhomogeneous is None:
        first = _lower_series_fixed(d, XC << 16, bits + 16, None) >> 16
        inhomogeneous = {0: (d * H) << (bits - 1)}  # a H
    prev, cur = 0, first
    last = max(inhomogeneous)
    coeffs = [cur]
    e_prev, e_cur = 0.0, 2.0
    errs = e_cur
    size = cur * scale
    n = 0
    while True:
        # ((x_c - b - n) H) sig_n + H^2 sig_(n-1)
        num = ((XC - ((d + 2 * n) << (bits - 1))) * H >> bits) * cur + H2 * prev
        num += inhomogeneous.get(n, 0)
        # (the products' roundings, a unit of the factors times sigma_n, sigma_(n-1), and the division's unit)
        rounding = 1 + (abs(cur) + abs(prev)) * scale / (fxc * (n + 1)) + 1
        prev, cur = cur, num // (XC * (n + 1))
        e_prev, e_cur = e_cur, (abs(fxc - fb - n) * fh / (fxc * (n + 1)) * e_cur + fh * fh / (fxc * (n + 1)) * e_prev
                                + rounding)
        coeffs.append(cur)
        errs += e_cur
        size += abs(cur) * scale
        n += 1
        if errs > LOCAL_MAX_UNITS * max(1.0, coeffs[0] * scale) or n > LOCAL_MAX_TERMS:
            return None
        if n > last:  # |c_m| <= c, e_m <= e for every m >= n (|x_c - b - m| <= |x_c - b| + m)
            c = max(1.0, (abs(fb - fxc) + n) / (n + 1)) * fh / fxc
            e = fh * fh / (fxc * (n + 1))
            rho = (c + math.sqrt(c * c + 4 * e)) / 2
            if rho < 0.5 and max(abs(cur), abs(prev) * rho) * rho / (1 - rho) < 1:
                break
        if not n % 32:
            check_time(f"a Taylor expansion of the incomplete gamma function (b = {show_int(d)}/2)", units=SERIES_UNITS)
    # + Horner's roundings (a unit a step; the rounding of u moves the value by at most sum n |sigma_n| units);
    # + the truncated rest: one unit, and the errors of the two last coefficients carried by it
    slope = sum(k * abs(c) for k, c in enumerate(coeffs)) * scale
    err = errs + (n + 1) + slope + 1 + e_cur + e_prev
    low = coeffs[0] * scale - (size - coeffs[0] * scale)  # f >= sigma_0 - sum_(n>=1) |sigma_n| on the range
    if err > LOCAL_MAX_UNITS * max(1.0, low):
        return None
    return coeffs, err


def _horner(coeffs, XC, H, X, bits):
    """sum sigma_n u^n at u = (X - XC)/H (fixed point at scale 2^bits)."""
    U = ((X - XC) << bits) // H
    acc = coeffs[-1]
    for s in reversed(coeffs[:-1]):
        acc = s + ((acc * U) >> bits)
    return acc


#: The partners of a rule's pieces at d >= this value take :math:`Q_a` by :func:`_upper_local` (one Taylor
#: expansion over the piece's partners) where its error bound allows; below, :func:`_upper_fixed` per step.
UPPER_LOCAL_MIN_D = 128

#: Bits beyond the nodes' that :func:`_upper_local` computes its expansion with (its error bound, up to
#: :data:`LOCAL_MAX_UNITS` units there, is then at most 16 units of the nodes' 2^-bits: within the 64 units the
#: partner's step allows for :math:`Q_a`).
UPPER_LOCAL_GUARD = 8


def _upper_local(d, lo, hi, bits, lost, splits=LOCAL_SPLITS):
    """:func:`_upper_expansion` over [lo, hi], its halves where it fails (at most ``splits`` times; a part whose
    expansion fails even so is left to :func:`_upper_fixed`: its function returns None there)."""
    whole = _upper_expansion(d, lo, hi, bits, lost)
    if whole is not None or splits <= 0:
        return whole
    mid = (lo + hi) >> 1
    left, right = (_upper_local(d, a, b, bits, lost, splits - 1) for a, b in ((lo, mid), (mid, hi)))
    if left is None and right is None:
        return None

    def upper(X):
        part = left if X <= mid else right
        return part(X) if part is not None else None

    return upper


def _upper_expansion(d, lo, hi, bits, lost):
    r"""A function X -> (Q, hx) of :func:`_upper_fixed`'s form for fixed-point X in [lo, hi] (None outside), from
    one Taylor expansion of :math:`T = Q_a/\gamma_a` (:math:`\gamma_a(X) = X^{a-1}e^{-X}/\Gamma(a)`) about the
    middle of the range; None where its error bound fails (:func:`_local_coefficients`).

    :math:`Q_a' = -\gamma_a` and :math:`X\gamma_a' = (a - 1 - X)\gamma_a` give :math:`XT' = (X - (a - 1))T - X`:
    the equation of :func:`_local_coefficients` with b = a - 1 and :math:`g(X) = -X`, i.e.
    :math:`g_0 = -X_cH`, :math:`g_1 = -H^2`; :math:`T(X_c) = X_c/hx` by :func:`_upper_fixed` at 24 more bits.
    The expansion at :data:`UPPER_LOCAL_GUARD` more bits; per X: :math:`\gamma_a(X)` by one logarithm and one
    exponential in fixed point (as :func:`_finite_upper_down`), Q = :math:`\gamma_aT`, hx = X/T (T >= 1 for
    a >= 1: :math:`\Gamma(a, X) \ge X^{a-1}e^{-X}`)."""
    wb = bits + UPPER_LOCAL_GUARD
    XC = (lo + hi) >> 1
    H = hi - XC
    if H <= 0 or XC <= 0:
        return None
    ww = bits + 24
    centre = _upper_fixed(d, XC << 24, ww, ln2_fixed(ww), lost)
    if centre is None:
        return None
    first = ((XC << (24 + wb)) // centre[1])  # T = X / hx at scale 2^wb
    sh = wb - bits
    XCw, Hw = XC << sh, H << sh
    got = _local_coefficients(d - 2, XCw, Hw, wb, first, {0: -(XCw * Hw), 1: -(Hw * Hw)})
    if got is None:
        return None
    coeffs = got[0]
    n = d // 2
    wl = bits + n.bit_length() + 8
    lg = to_fixed(_log_gammas(d, wl + 8)[0], wl)  # ln Gamma(a)
    ln2 = ln2_fixed(wl)

    def upper(X):
        if not lo <= X <= hi:
            return None
        T = _horner(coeffs, XCw, Hw, X << sh, wb)
        lx = to_fixed(mpf_log(from_man_exp(X, -bits), wl), wl)
        em, en = _exp_pair((((d - 2) * lx) >> 1) - (X << (wl - bits)) - lg, wl, ln2)  # gamma_a(X) = em 2^(en - wl)
        return ((em * T) >> (wl + sh), en), (X << (bits + sh)) // T

    return upper


def _finite_upper(n, x, bits):
    r"""(S, t) as fixed-point integers at scale 2^bits: :math:`S = \sum_{k<n}x^k/k!` and its last term
    :math:`t = x^{n-1}/(n-1)!` (positive terms, each truncated by at most one unit)."""
    X = _fixed(x, bits)
    total = term = 1 << bits
    for k in range(1, n):
        term = ((term * X) >> bits) // k
        total += term
    return total, term


def lower(d, x, log_x):
    r"""(:math:`P_a(x)`, :math:`\gamma_a(x)`): the lower regularised incomplete gamma function and the Gamma(a)
    density at x > 0 (a = d/2; ``log_x`` = ln x), both to a relative accuracy of the working precision."""
    a = mp.mpf(d) / 2
    with mp.workprec(mp.prec + 8):
        pref = mp.exp(a * log_x - x - _lg(d)[1])  # x^a e^-x / Gamma(a + 1)
        bits = mp.prec + SERIES_GUARD
        s = _from_fixed(_lower_series(d, x, bits), bits)
        return pref * s, pref * a / x


def upper(d, x, lost=0):
    r"""(:math:`Q_a(x)`, :math:`\gamma_a(x)`) at x >= a - 1 (a = d/2), both to a relative accuracy of the working
    precision.

    Integer a <= :data:`FINITE_SUM_MAX`: :math:`Q_a(x) = e^{-x}\sum_{k<a}x^k/k!` and
    :math:`\gamma_a(x) = e^{-x}x^{a-1}/(a-1)!` (its last term): positive terms, one exp.  Else
    :math:`1 - P_a(x)` with ``lost`` + 8 more bits (``lost``: a guess of :math:`\log_2(1/Q)`, from the target
    of an inversion), checked: a cancellation beyond the guess is redone with the bits it took."""
    if d % 2 == 0 and d // 2 <= FINITE_SUM_MAX:
        with mp.workprec(mp.prec + 8):
            bits = mp.prec + 8 + (d // 2).bit_length()
            total, last = _finite_upper(d // 2, x, bits)
            ex = mp.exp(-x)
            return ex * _from_fixed(total, bits), ex * _from_fixed(last, bits)
    a = mp.mpf(d) / 2
    extra = max(0, int(lost)) + 8
    for _ in range(4):
        with mp.workprec(mp.prec + extra + 8):
            pref = mp.exp(a * mp.log(x) - x - _lg(d)[1])
            bits = mp.prec + SERIES_GUARD
            q = 1 - pref * _from_fixed(_lower_series(d, x, bits), bits)
            took = -int(mp.mag(q)) if q > 0 else extra + 64
            if took <= extra - 4:
                return +q, pref * a / x
        extra = took + 16
    raise ConvergenceError(f"Q_a(x) at a = d/2 = {show_int(d)}/2, x = {mp.nstr(x, 8)}: cancellation in 1 - P_a(x) "
                           f"beyond {extra} bits")


def _steps(d, x, value, sigma, target, tol, what):
    r"""Root of :math:`T(x) = u` (``target``; T = P_a for ``sigma`` = 1, Q_a for -1) from x; ``value(x)``
    gives (T(x), :math:`\gamma_a(x)`).

    Each step evaluates T once and takes the series reversion of :math:`\phi(x + \delta) = \log u`,
    :math:`\phi = \log T` (well conditioned in both tails), to third order in the Newton step
    :math:`\eta = -(\phi(x) - \log u)/\phi'(x)`: :math:`\delta = \eta - q_2\eta^2 + (2q_2^2 - q_3)\eta^3`
    with :math:`q_k = \phi^{(k)}/(k!\,\phi')`, exact from :math:`\phi' = \sigma h`, :math:`h = \gamma_a/T`,
    :math:`h' = hg`, :math:`g = \ell' - \sigma h` (:math:`\ell = \log\gamma_a`, whose derivatives are
    elementary), evaluated in double precision relative to x (they multiply :math:`\eta^2` and
    :math:`\eta^3`).  The residual :math:`\log(T/u) = \mathrm{log1p}(\epsilon)` is summed from
    :math:`\epsilon = (T - u)/u` near the root (no logarithm at the working precision).  The new point's
    error is :math:`|5q_2^3 - 5q_2q_3 + q_4|\,\eta^4` to leading order, bounded here by twice the sum of the
    absolute values plus the double-precision rounding of the correction; a step whose bound is below
    ``tol`` (relative) is the last (from scipy's start one step, up to about 190 bits).  A step outside the
    bracket known to hold the root, or with :math:`|q_2\eta| > 1/8` (outside the series' reach), is
    replaced by bisection in log x."""
    fa1 = d / 2 - 1
    lo, hi = mp.mpf(0), mp.inf
    cut = mp.mpf(2) ** -20
    for _ in range(MAX_STEPS):
        check_time(what, units=NODE_UNITS)
        t, g = value(x)
        r = t - target
        if not r:
            return x
        if (r < 0) == (sigma > 0):  # P increases, Q decreases with x: the root is above x
            lo = x
        else:
            hi = x
        eps = r / target
        if abs(eps) < cut:  # log1p(eps), a term per 20 bits
            resid, power, k = eps, eps, 1
            while abs(power) > tol / 64:
                power = -power * eps
                k += 1
                resid += power / k
        elif t > 0:
            resid = mp.log(t / target)
        else:
            resid = None
        new = None
        if resid is not None:
            hx = g * x / t  # h x
            step = -sigma * resid / hx  # eta / x
            # x-scaled derivatives: L_k = l^(k) x^k, H_k = h^(k) x^(k+1), G_k = g^(k) x^(k+1)
            fh = float(hx)
            l1 = fa1 - float(x)
            gg = l1 - sigma * fh
            h1 = fh * gg
            g1 = -fa1 - sigma * h1
            h2 = h1 * gg + fh * g1
            g2 = 2 * fa1 - sigma * h2
            h3 = h2 * gg + 2 * h1 * g1 + fh * g2
            q2, q3, q4 = gg / 2, h2 / (6 * fh), h3 / (24 * fh)
            u = float(step)
            if math.isfinite(u) and abs(q2 * u) <= 0.125:
                # the eta^2 term at the working precision (q2 in double would limit the step to ~150 bits)
                cubic = u ** 3 * (2 * q2 * q2 - q3)
                new = x * (1 + step - ((fa1 - x) - sigma * hx) / 2 * step * step + cubic)
                if lo < new < hi:
                    bound = 2 * u ** 4 * (5 * abs(q2) ** 3 + 5 * abs(q2 * q3) + abs(q4)) + abs(cubic) * 2.0 ** -50
                    if bound <= tol:
                        return new
                    x = new
                    continue
                new = None
            else:
                new = x * mp.exp(step) if abs(u) < 50 else None
        if new is None or not (lo < new < hi):
            new = mp.sqrt(lo * hi) if lo > 0 and hi < mp.inf else (x * 4 if hi == mp.inf else x / 4)
        x = new
    raise ConvergenceError(f"{what}: no convergence in {MAX_STEPS} steps (target {mp.nstr(target, 8)}); "
                           "lower the working precision")


def float_start(d, log_u, upper_tail):
    """A float x with log P_a(x) (log Q_a(x) if ``upper_tail``) near ``log_u``: scipy where representable, else
    the tail asymptotics."""
    from scipy import special

    fa = d / 2
    lu = float(log_u)
    if lu > -690:
        u = math.exp(lu)
        x0 = float(special.gammainccinv(fa, u) if upper_tail else special.gammaincinv(fa, u))
        if 0 < x0 < math.inf:
            return x0
    lg = math.lgamma(fa)
    if not upper_tail:  # P_a(x) ~ x^a e^-x / Gamma(a + 1)
        return math.exp((lu + lg + math.log(fa)) / fa)
    x = max(fa, -lu)
    for _ in range(60):  # Q_a(x) ~ x^(a-1) e^-x / Gamma(a), a contraction for x > a - 1
        x = max(fa, -lu - lg + (fa - 1) * math.log(x))
    return x


def cut_y(d, log_u):
    r"""y = -ln x of the lower quantile :math:`e^{\log u}` of Gamma(a), a = d/2, about: a split point of the lower
    half in :class:`PairRule` (any point serves, the median excepted: it bounds the domain; near the quantile,
    each piece holds about the share of the mass its first rung assumes).  scipy's float where representable,
    else the tail asymptotics :math:`P_a(x) \approx x^a/\Gamma(a+1)` in y (no underflow at any precision),
    rounded to 24 significant bits (an exact dyadic number, the same on every platform but where scipy's last
    bits straddle a rounding boundary); before, each cut was an inversion at the working precision (14 % of a
    PRF pair term at d = 8)."""
    from scipy import special

    fa, lu = d / 2, float(log_u)
    y = None
    if lu > -690:
        x0 = float(special.gammaincinv(fa, math.exp(lu)))
        if 0 < x0 < math.inf:
            y = -math.log(x0)
    if y is None:
        y = -(lu + math.lgamma(fa) + math.log(fa)) / fa
    m, e = math.frexp(y)
    return mp.mpf(math.ldexp(round(m * 2 ** 24), e - 24))


def invert_lower(d, log_u, what="incomplete-gamma inversion"):
    """x with log P_a(x) = ``log_u`` (a = d/2), to the working precision."""
    tol = 2.0 ** -(mp.prec + 4)
    with mp.workprec(mp.prec + 20):
        x = mp.mpf(float_start(d, log_u, False))
        r = _steps(d, x, lambda x: lower(d, x, mp.log(x)), 1, mp.exp(log_u), tol, what)
    return +r


def invert_upper(d, u, start=None, what="incomplete-gamma inversion"):
    """x with Q_a(x) = u (a = d/2), to the working precision (``start``: a float start, or None)."""
    tol = 2.0 ** -(mp.prec + 4)
    lost = max(0, -int(mp.mag(u)))
    with mp.workprec(mp.prec + 20):
        x = mp.mpf(float_start(d, mp.log(u), True) if start is None else start)
        r = _steps(d, x, lambda x: upper(d, x, lost), -1, u, tol, what)
    return +r


# ---------------------------------------------------------------------------
# Gauss rules


def _tier(prec):
    """Precision at which a rule is computed: ``prec`` rounded up to a multiple of 64 bits (a rule serves
    every precision up to its own)."""
    return 64 * (prec // 64 + 1)


@functools.lru_cache(maxsize=64)
def _legendre_rule(n, prec):
    r"""(nodes, weights) of the n-point Gauss-Legendre rule on [-1, 1] at ``prec`` bits (as mpf tuples of
    prec + 16 bits): Newton on :math:`P_n` by its three-term recurrence in fixed point at W = prec + 24 +
    2 log2(n) bits (stable on [-1, 1]: each of its n steps adds about one unit), from scipy's
    double-precision nodes, until the step is below :math:`2^{-prec-8}` (2-3 steps; 3-5x faster than the
    same Newton in mpf arithmetic from the asymptotic starts :math:`\cos(\pi(i - 1/4)/(n + 1/2))`);
    :math:`w = 2/((1 - x^2)P_n'(x)^2)`, :math:`P_n' = n(xP_n - P_{n-1})/(x^2 - 1)`."""
    from scipy import special

    W = prec + 24 + 2 * n.bit_length()
    one = 1 << W
    tol = 1 << max(0, W - prec - 8)

    def derivative(X):  # P_n'(X) at scale 2^W (and n P_n(X), for the step)
        p0, p1 = one, X
        for k in range(2, n + 1):
            p0, p1 = p1, ((2 * k - 1) * ((X * p1) >> W) - (k - 1) * p0) // k
        return p1, (n * (((X * p1) >> W) - p0) << W) // (((X * X) >> W) - one)

    xs = [mpf_pos(from_man_exp(0, 0), prec + 16, round_nearest)] if n % 2 else []
    nodes, weights = [], []
    for x0 in sorted((float(t) for t in special.roots_legendre(n)[0] if t > 0), reverse=True):
        X = int(math.ldexp(x0, 62)) << (W - 62)
        for _ in range(30):
            p, dp = derivative(X)
            step = (p << W) // dp
            X -= step
            if abs(step) <= tol:
                break
        else:  # pragma: no cover - Newton from scipy's nodes converges in 2-3 steps
            raise ConvergenceError(f"Gauss-Legendre nodes (n = {n}) did not converge")
        _, dp = derivative(X)
        x = mpf_pos(from_man_exp(X, -W), prec + 16, round_nearest)
        w = mpf_div(from_man_exp(2, 3 * W), from_int((one - ((X * X) >> W)) * dp * dp), prec + 16, round_nearest)
        nodes += [x, mpf_neg(x)]
        weights += [w, w]
    if n % 2:  # the node 0: P_n'(0) = n P_{n-1}(0)
        _, dp = derivative(0)
        nodes += xs
        weights.append(mpf_div(from_man_exp(2, 2 * W), from_int(dp * dp), prec + 16, round_nearest))
    return tuple(nodes), tuple(weights)


def legendre(n):
    """The n-point Gauss-Legendre rule on [-1, 1] at the working precision: (nodes, weights) lists of mpf."""
    xs, ws = _legendre_rule(n, _tier(mp.prec))
    return [mp.make_mpf(x) for x in xs], [mp.make_mpf(w) for w in ws]


def _tail_indices(n):
    """The Legendre degrees whose coefficients :func:`spectral_error` reads for an n-point rule: the top pair
    (n - 1, n - 2), the pair m/2 below and the pair m below, m = max(2, n // 4)."""
    m = max(2, n // 4)
    return m, tuple(sorted({n - 1, n - 2, n - 1 - m // 2, n - 2 - m // 2, n - 1 - m, n - 2 - m}))


@functools.lru_cache(maxsize=64)
def _legendre_values(n, prec):
    r"""{k: (P_k(t_i) for the nodes t_i of :func:`legendre` (n) at ``prec`` bits, as fixed-point integers at
    scale 2^(prec + 8))} for the degrees k of :func:`_tail_indices` (the three-term recurrence in fixed point at
    prec + 8 + 2 log2(n) bits: stable on [-1, 1], a unit a step; n^2 steps, 1 ms at n = 48, memoised per
    32-bit tier of the precision by :func:`spectral_error`).  The nodes are those of :func:`legendre` at any
    precision of the tier (its tables are per 64-bit tier; a node differs from the exact one far below the
    coefficients' levels that matter, 2^-p/2 of the terms)."""
    _, ks = _tail_indices(n)
    B = prec + 8
    W = B + 2 * n.bit_length()
    one = 1 << W
    xs, _ = _legendre_rule(n, _tier(prec))
    out = {k: [] for k in ks}
    for x in xs:
        t = to_fixed(x, W)
        p0, p1 = one, t
        vals = {0: p0, 1: p1}
        for k in range(2, n):
            p0, p1 = p1, ((2 * k - 1) * ((t * p1) >> W) - (k - 1) * p0) // k
            if k in out:
                vals[k] = p1
        for k in ks:
            out[k].append(vals[k] >> (W - B))
    return {k: tuple(v) for k, v in out.items()}


#: The spectral estimate of a Gauss-Legendre piece (:func:`spectral_error`) accepts a decay rate of the
#: Legendre coefficients of at most this ratio per degree, from a top coefficient at most 2^-8 of the terms'
#: absolute sum, and multiplies its extrapolation by this safety factor.
SPECTRAL_MAX_RATE = 0.8
SPECTRAL_SAFETY = 256


def spectral_error(terms, n, s):
    r"""The error of the n-point Gauss-Legendre sum of ``terms`` (:math:`T_i = hw_ig(t_i)` on a piece of half
    width h, in the order of :func:`legendre`; ``s`` = :math:`\sum|T_i|`) from the Legendre coefficients of its
    integrand g, as mpf; None where no decay is seen.

    With :math:`g = \sum_kc_kP_k`, the n-point rule is exact for degrees < 2n, so its error is
    :math:`h\sum_{k\ge2n}c_k(G_n(P_k) - \int P_k)`, at most :math:`2\sum_{k\ge2n}|C_k|`,
    :math:`C_k = hc_k = \frac{2k+1}2\sum_iT_iP_k(t_i)` (the discrete coefficients, exact up to aliasing from
    degrees > 2n - 1 - k).  For g analytic around the piece :math:`|C_k|` decays geometrically; read at the top
    degrees (the level :math:`L_k = \max(|C_k|, |C_{k-1}|)`, against parity) with the rate r the slowest of
    :math:`(L_{n-1}/L_{n-1-m})^{1/m}` and its two halves, the error is estimated as
    :data:`SPECTRAL_SAFETY` :math:`L_{n-1}r^{n+1}/(1-r)`, if :math:`r \le` :data:`SPECTRAL_MAX_RATE` and
    :math:`L_{n-1} \le 2^{-8}s`; a top level within 4 units of the terms' rounding (:math:`n2^{2-p}s`) is
    resolved: that level.  Calibrated against the rules with 64 nodes on the finite pieces of the first
    expectation of kernel_mse (the pair excess, or the OPRF optimum's derivative: prf, rff and oprf at
    d = 2 .. 1024, v = 1e-8 .. 6, 15 and 30 digits; rungs 8 .. 48): 2 683 of 3 492 rungs accepted, one whose
    true error exceeded the estimate beyond the terms' rounding, by 3.7 bits (2^-105 of the terms at 141 bits;
    the expectation's tolerance has 10 bits to spare); the two-rung comparison's estimate (before),
    reconstructed from the same data, was exceeded on 18 rungs by up to 7 bits.  With a perfect first rung the
    same pieces need 31-32 % fewer nodes when a rung need not be compared with the one below.  Tests: the
    Gauss errors near a pole, of an entire function, at a kink and of a polynomial
    (tests/test_theory_antithetic.py)."""
    p = mp.prec
    if not s:
        return mp.mpf(0)
    m, ks = _tail_indices(n)
    tier = 32 * ((p + 31) // 32)  # (a table serves every precision of its 32-bit tier)
    table = _legendre_values(n, tier)
    B = tier + 8
    shift = -int(mp.mag(s))  # terms scaled to |T| <= ~1
    fixed = [to_fixed(mpf_shift(t._mpf_, shift), B) for t in terms]
    scale = float(mp.mpf(2) ** -shift / s)  # (s = scale^-1 2^-shift: levels relative to s)
    level = {}
    for k in ks:
        c = abs(sum(a * b for a, b in zip(fixed, table[k]))) * (2 * k + 1) // 2
        level[k] = c
    def lv(k):
        c = max(level[k], level[k - 1])
        return math.log2(c) - 2 * B + math.log2(scale) if c else -math.inf
    noise = math.log2(n) + 2 - p
    top = lv(n - 1)
    if top <= noise + 2:
        return s * mp.mpf(2) ** (noise + 2)
    lo, mid = lv(n - 1 - m), lv(n - 1 - m // 2)
    if lo == -math.inf or mid == -math.inf or top > -8:
        return None
    rate = max((top - lo) / m, (mid - lo) / (m // 2), (top - mid) / (m - m // 2))  # log2 per degree
    if not rate <= math.log2(SPECTRAL_MAX_RATE):
        return None
    est = math.log2(SPECTRAL_SAFETY) + top + rate * (n + 1) - math.log2(1 - 2.0 ** rate)
    return s * mp.mpf(2) ** est


@functools.lru_cache(maxsize=64)
def _laguerre_rule(n, prec):
    r"""(nodes, weights) of the n-point Gauss-Laguerre rule (weight :math:`e^{-t}` on [0, inf)) at ``prec``
    bits (mpf tuples of prec + 16 bits): Newton on :math:`L_n` by its recurrence in fixed point at
    W = prec + 24 + 2 log2(n) + n/4 bits (the n/4: the recurrence's values grow to about :math:`e^{x/2}`
    at the largest nodes, x < 4n, while :math:`L_n` vanishes there), from scipy's double-precision nodes,
    until the step is below :math:`2^{-prec-8}` relative; :math:`w = x/((n + 1)^2L_{n+1}(x)^2)` (as an mpf:
    the weights fall to ~1e-155 at n = 96)."""
    from scipy import special

    W = prec + 24 + 2 * n.bit_length() + n // 4
    one = 1 << W

    def values(X):  # (L_n(X), L_{n-1}(X)) at scale 2^W
        p0, p1 = one, one - X
        for k in range(2, n + 1):
            p0, p1 = p1, (((((2 * k - 1) << W) - X) * p1 >> W) - (k - 1) * p0) // k
        return p1, p0

    nodes, weights = [], []
    for x0 in (float(t) for t in special.roots_laguerre(n)[0]):
        X = int(math.ldexp(x0, 62 - math.frexp(x0)[1])) << (W - 62 + math.frexp(x0)[1])
        for _ in range(30):
            p1, p0 = values(X)
            step = (p1 * X) // (n * (p1 - p0))  # L_n / L_n', L_n' = n (L_n - L_(n-1)) / x
            X -= step
            if abs(step) << (prec + 8) <= X:
                break
        else:  # pragma: no cover - Newton from scipy's nodes converges in 2-3 steps
            raise ConvergenceError(f"Gauss-Laguerre nodes (n = {n}) did not converge")
        p1, p0 = values(X)
        p2 = (((((2 * n + 1) << W) - X) * p1 >> W) - n * p0) // (n + 1)  # L_(n+1)
        nodes.append(mpf_pos(from_man_exp(X, -W), prec + 16, round_nearest))
        weights.append(mpf_div(from_man_exp(X, W), from_int((n + 1) ** 2 * p2 * p2), prec + 16, round_nearest))
    return tuple(nodes), tuple(weights)


def laguerre(n):
    """The n-point Gauss-Laguerre rule at the working precision: (nodes, weights) lists of mpf."""
    xs, ws = _laguerre_rule(n, _tier(mp.prec))
    return [mp.make_mpf(x) for x in xs], [mp.make_mpf(w) for w in ws]


# ---------------------------------------------------------------------------
# nodes of the pair


def _float_starts(d, ps):
    """scipy's float partners for a list of P values (floats; one vectorised call), None where not representable."""
    import numpy as np
    from scipy import special

    fp = np.array(ps, dtype=float)
    ok = fp > 1e-300
    out = np.full(fp.shape, np.nan)
    if ok.any():
        out[ok] = special.gammainccinv(d / 2, fp[ok])
    return [float(v) if 0 < v < math.inf else None for v in out]


def _exp_pair(t, bits, ln2):
    """exp(t) for a fixed-point t (scale 2^bits) as (m, n): the value m 2^(n - bits), 2^bits <= m < 2^(bits+1)."""
    n, r = divmod(t, ln2)
    return exp_basecase(r, bits), n


def _pair_float(m, e):
    """m 2^e as a float (0.0 or inf beyond the double range)."""
    k = max(0, m.bit_length() - 60)
    try:
        return math.ldexp(m >> k, e + k)
    except OverflowError:
        return math.inf


def _upper_fixed(d, X, bits, ln2, lost):
    r"""(Q, hx) for the fixed-point X (scale 2^bits): :math:`Q = Q_a(X)` as (m, e) with value
    :math:`m 2^{e - bits}` and :math:`hx = \gamma_a(X)X/Q_a(X)` fixed at scale 2^bits (a = d/2), both to about
    bits - 8 bits; None where :math:`1 - P_a` cancels beyond ``lost`` + 8 bits.

    Integer a <= :data:`FINITE_SUM_MAX`: :math:`Q_a(X) = e^{-X}\sum_{k<a}X^k/k!` (positive terms; its last term
    is :math:`\gamma_a(X)/e^{-X}`).  Else :math:`1 - P_a(X)` at ``lost`` + 8 more bits (``lost``:
    :math:`\log_2(1/Q)` as the target gives it), :math:`P_a(X) = X^ae^{-X}S(X)/\Gamma(a+1)` with the series S
    (:func:`_lower_series_fixed`) and :math:`\gamma_a(X)X = aX^ae^{-X}/\Gamma(a+1)`."""
    one = 1 << bits
    if d % 2 == 0 and DOWNWARD_MIN <= d // 2 <= FINITE_SUM_MAX and X >= (d // 2 - 1) << bits:
        return _finite_upper_down(d // 2, X, bits)
    if d % 2 == 0 and d // 2 <= FINITE_SUM_MAX:
        total = last = one
        for k in range(1, d // 2):
            last = (last * X >> bits) // k
            total += last
            if not k & 127:
                check_time(f"the finite incomplete gamma sum at a = d/2 = {d // 2}", units=SERIES_UNITS)
        em, en = _exp_pair(-X, bits, ln2)
        return ((em * total) >> bits, en), (last * X) // total
    if X >= (d + bits // CF_MIN_X_BITS) << bits:
        cf = _upper_cf(d, X, bits)
        if cf is not None:
            return cf
    wide = 32 * ((bits + lost + 8) // 32 + 1)  # (steps of 32 bits: few precisions for the memoised log Gamma)
    Xw = X << (wide - bits)
    lx = to_fixed(mpf_log(from_man_exp(X, -bits), wide), wide)
    # X^a e^-X / Gamma(a + 1) = fm 2^(fe - wide), kept as such (a fixed-point prefactor would lose its
    # -log2 of bits: 110 at d = 65, X = 155)
    fm, fe = _exp_pair(((d * lx) >> 1) - Xw - to_fixed(_log_gammas(d, wide + 8)[1], wide), wide, ln2_fixed(wide))
    ps = fm * _lower_series_fixed(d, Xw, wide, None)  # P = ps 2^(fe - 2 wide)
    q = (1 << wide) - (ps >> (wide - fe) if wide >= fe else ps << (fe - wide))
    if q <= 0 or q.bit_length() < bits + 4:
        return None
    sh = fe + bits - 1  # hx = gamma X / Q = a pref / Q = d fm 2^(fe - 1) / q, at scale 2^bits
    return (q, -wide + bits), ((fm * d) << sh) // q if sh >= 0 else ((fm * d) >> -sh) // q


#: Non-integer a = d/2 evaluate :math:`Q_a(X)` by its continued fraction (:func:`_upper_cf`) from
#: X >= 2a + p / this value on (p: the bits; the series of 1 - P_a runs about X + sqrt(2 X p ln 2) terms of
#: p + log2(1/Q) bits, the fraction about p^2/(32 X) levels of p bits: measured at d = 3, the fraction is as
#: fast at X = 30 (152 bits) and 35 (216 bits), 1.5x faster at X = 40-60 and 4-6x at X = 100).
CF_MIN_X_BITS = 5

#: Levels of the continued fraction allowed before the series route takes over.
CF_MAX_LEVELS = 400


def _upper_cf(d, X, bits):
    r"""(Q, hx) of :func:`_upper_fixed` for non-integer a = d/2 and X > a - 1 (used from X >= 2a + bits /
    :data:`CF_MIN_X_BITS` on) by the continued fraction (Abramowitz & Stegun 6.5.31)
    :math:`\Gamma(a,x) = e^{-x}x^aF`,
    :math:`F = \cfrac{1}{x + \cfrac{1-a}{1 + \cfrac{1}{x + \cfrac{2-a}{1 + \cfrac{2}{x + \cdots}}}}}`,
    i.e. :math:`F = K(c_j/\beta_j)` with :math:`\beta_j = x` (j odd), 1 (j even), :math:`c_1 = 1`,
    :math:`c_{2k} = k - a`, :math:`c_{2k+1} = k`; then :math:`Q_a = e^{-x}x^aF/\Gamma(a)` and
    :math:`hx = \gamma_a(x)x/Q_a(x) = 1/F`.  None where it needs more than :data:`CF_MAX_LEVELS` levels (or
    the evaluation's error bound fails).

    Truncation: from the index d on every :math:`c_j > 0`, so the approximants of that tail alternate
    around it (a Stieltjes fraction), and F is a Moebius function of the tail, monotone for tails >= 0
    (for x > a - 1 every level of the head is positive): two consecutive approximants :math:`F_{n-1}, F_n`,
    n > d, bracket F, and :math:`|F - F_n| \le D_n = |F_n - F_{n-1}| = \prod_{j\le n}|c_j|/|B_nB_{n-1}|`;
    D_n from the ratios :math:`h_j = B_j/B_{j-1}` in doubles (each a few ulps: far inside the margin), n the
    first even index > d with :math:`D_n < 2^{-bits-8}/(x + 1) \le 2^{-bits-8}F`.  Evaluation of
    :math:`F_n`: its even contraction (Legendre's J-fraction, n/2 levels,
    :math:`F = 1/(b_1 + a_2/(b_2 + \cdots))`, :math:`b_k = x + 2k - 1 - a`, :math:`a_{k+1} = k(a - k)`)
    bottom-up in fixed point at W = bits + 16 bits, :math:`t_k = b_k + a_{k+1}/t_{k+1}`, each level
    truncated by one unit and the error of :math:`t_{k+1}` carried by :math:`|a_{k+1}|/t_{k+1}^2` (summed
    in doubles, required below :math:`2^{-bits-4}` of :math:`t_1`).  Prefactor: one exponential of
    :math:`a\ln x - x - \ln\Gamma(a)` at bits + log2(a x) + 12 bits.  Q and hx to about 2^(2 - bits)."""
    fa = d / 2
    x = math.ldexp(X >> max(0, X.bit_length() - 60), max(0, X.bit_length() - 60) - bits)
    # the number of levels: D_j = |F_j - F_(j-1)| = prod_(i<=j) |c_i| / |B_j B_(j-1)| by the ratios
    # h_j = B_j / B_(j-1) = beta_j + c_j / h_(j-1) (doubles), D_j = D_(j-1) |c_j| / (h_j h_(j-1)), D_1 = 1/x;
    # against F >= 1 / (x + 1) (F = 1/(x + (1 - a)/(1 + ...)), the level below x at most 1 - a + a = 1)
    limit = 2.0 ** -(bits + 8) / (x + 1)
    h_prev, dist, n = x, 1 / x, 0
    for j in range(2, CF_MAX_LEVELS + 1):
        c = (j // 2 - fa) if j % 2 == 0 else float(j // 2)
        h = (x if j % 2 else 1.0) + c / h_prev
        dist *= abs(c / (h * h_prev))
        h_prev = h
        if j > d and not j % 2 and dist < limit:
            n = j
            break
        if not j % 64:
            # (64 levels in doubles and 32 of the fixed-point evaluation after them: about 30 us, 2 units)
            check_time(f"the incomplete gamma continued fraction at a = d/2 = {show_int(d)}/2", units=SERIES_UNITS)
    if not n:
        return None
    W = bits + 16
    xw = X << (W - bits)
    sh = 2 * W - 1
    # F_n, n = 2K, by the even contraction (Legendre's J-fraction, K levels):
    # F = 1/(b_1 + a_2/(b_2 + ...)), b_k = x + 2k - 1 - a, a_(k+1) = k (a - k)
    K = n // 2
    t = xw + ((2 * K - 1) << W) - (d << (W - 1))  # t_K = b_K
    tf = x + 2 * K - 1 - fa  # t_k in doubles, for the error's growth
    err = 1.0  # a bound on the error of t_k, units of 2^-W
    for k in range(K - 1, 0, -1):
        a2 = k * (d - 2 * k)  # 2 a_(k+1)
        err = 1.0 + abs(a2) / (2 * tf * tf) * err
        t = xw + ((2 * k - 1) << W) - (d << (W - 1)) + (a2 << sh) // t
        tf = x + 2 * k - 1 - fa + a2 / (2 * tf)
    if t <= 0 or not err < 2.0 ** (t.bit_length() - 1 - bits - 4):
        return None
    # prefactor e^-x x^a / Gamma(a) = em 2^(en - wl)
    wl = bits + (int(fa * x) + 2).bit_length() + 12
    lx = to_fixed(mpf_log(from_man_exp(X, -bits), wl), wl)
    em, en = _exp_pair(((d * lx) >> 1) - (X << (wl - bits)) - to_fixed(_log_gammas(d, wl + 8)[0], wl), wl,
                       ln2_fixed(wl))
    # F = 2^W / t (c_1 = 1): Q = em 2^(en - wl) F = m 2^(e - bits), hx = 1 / F = t at scale 2^bits
    return ((em << W) // t, en - wl + bits), t >> (W - bits)


#: Integer a = d/2 from this value on sum :math:`Q_a`'s finite sum downward from its last term
#: (:func:`_finite_upper_down`: about sqrt(2 a p ln 2) terms of p bits, plus a logarithm and an
#: exponential); below, upward (a terms of up to p + 1.44 a bits, one exponential): measured at 150-220
#: bits, the upward sum is faster up to a = 128-192, the downward 2-2.5x faster at a = 512.
DOWNWARD_MIN = 192


def _finite_upper_down(n, X, bits):
    r"""(Q, hx) of :func:`_upper_fixed` for integer a = n and X >= n - 1 (fixed point at scale 2^bits):
    :math:`Q_n(X) = \gamma_n(X)\,S`, :math:`\gamma_n(X) = e^{-X}X^{n-1}/(n-1)!`,
    :math:`S = \sum_{k<n}X^{k-n+1}(n-1)!/k!`, summed downward from its last term (1; the ratio of a term to
    the one above is k/X <= 1) and stopped once the rest, at most :math:`t_k\,k/(X - k)` after the term
    :math:`t_k` (each further ratio is smaller), is below one unit: about :math:`\sqrt{2Xp\ln2}` terms
    (d = 1024, 150 bits: ~300 of the 512, each a number of p bits instead of up to ~740 more), then
    :math:`hx = \gamma_n(X)X/Q_n(X) = X/S`.

    Error: the sum at ``wb`` = bits + 2 log2(n) + 4 bits, each of its at most n terms truncated by one unit,
    which reaches the later terms scaled by ratios <= 1 (at most n^2/2 units), the reciprocal 1/X to
    2^-wb relative (at most n of them in a term), and the rest of the sum (one unit): S to
    2^(-bits-2) relative.  The prefactor by one exponential of
    :math:`(n-1)\ln X - X - \ln\Gamma(n)` in fixed point at bits + log2(n) + 8 bits (an exponent of size
    up to n ln X, each of its parts to one unit): 2^(-bits-4) relative."""
    m = n - 1
    wb = bits + 2 * n.bit_length() + 4
    xb = X.bit_length() - bits + 1  # 2^xb > X
    inv = (1 << (wb + xb + bits)) // X  # 1/X at scale 2^(wb + xb): 2^-wb relative
    sh = wb + xb
    total = term = 1 << wb
    k = m
    # (blocks of 8 terms; after each, stop once the rest t_k k / (X - k) is below one unit)
    while k > 0 and not (term * k << bits) < X - (k << bits):
        stop = max(k - 8, 0)
        while k > stop:
            term = (term * k * inv) >> sh
            total += term
            k -= 1
        if k % 128 < 8:
            check_time(f"the finite incomplete gamma sum at a = d/2 = {n}", units=SERIES_UNITS)
    wl = bits + n.bit_length() + 8
    lx = to_fixed(mpf_log(from_man_exp(X, -bits), wl), wl)
    lg = to_fixed(_log_gammas(2 * n, wl + 8)[0], wl)  # ln Gamma(n)
    em, en = _exp_pair(m * lx - (X << (wl - bits)) - lg, wl, ln2_fixed(wl))  # gamma_n(X) = em 2^(en - wl)
    return ((em * total) >> (wl + wb - bits), en), (X << wb) // total


def _lost_bits(pm, pe, bits):
    """log2(1/p) (at least 0) for p = pm 2^(pe - bits): the bits 1 - P_a loses at a partner whose Q_a is p."""
    return max(0, bits - pe - pm.bit_length())


def _fixed_partner(d, pm, pe, x0, bits, ln2, tol, upper=None):
    r"""The partner X of the node whose :math:`P_a(x) = p_m 2^{p_e - bits}` (a = d/2), as a fixed-point integer
    at scale 2^bits: the steps of :func:`_steps` (log form) in fixed-point integer arithmetic (about 5x faster
    than mpf arithmetic), the series reversion taken one order further (to :math:`\eta^4`, coefficients at the
    fixed precision; error :math:`|14q_2^4 - 21q_2^2q_3 + 6q_2q_4 + 3q_3^2 - q_5|\eta^5` to leading order,
    bounded by twice the sum of the absolute values, plus 64 units: one step from scipy's start up to about
    250 bits), from scipy's float start ``x0``,
    with :math:`Q_a` by :func:`_upper_fixed`; None where a step leaves the reach of the series
    (:math:`|q_2\eta| > 1/8`, a relative residual above 2^-20), Q needs more bits, or three steps do not meet
    the bound (the caller then takes :func:`invert_upper`, which brackets the root)."""
    one = 1 << bits
    X = int(math.ldexp(x0, 60)) << (bits - 60)
    fa1 = d / 2 - 1
    FA1 = (d - 2) << (bits - 1)
    scale = 2.0 ** -bits
    lost = _lost_bits(pm, pe, bits)
    for _ in range(3):
        qh = upper(X) if upper is not None else None  # (the piece's expansion, None outside its range)
        if qh is None:
            qh = _upper_fixed(d, X, bits, ln2, lost)
        if qh is None:
            return None
        (qm, qe), hx = qh
        sh = qe - pe
        if sh >= 0:
            num, den = (qm << sh) - pm, pm
        else:
            num, den = qm - (pm << -sh), pm << -sh
        eps = (num << bits) // den  # (Q - p) / p
        if not abs(eps * scale) < 2.0 ** -20:
            return None
        resid, power, k = eps, eps, 1
        while power:  # log1p(eps) at the fixed precision (|eps| < 2^-20: a term per 20 bits), truncated to 0
            prod = -power * eps
            power = prod >> bits if prod >= 0 else -(-prod >> bits)
            k += 1
            resid += power // k if power >= 0 else -(-power // k)
        step = (resid << bits) // hx  # eta / X (sigma = -1)
        # x-scaled derivatives (H_k = h^(k) X^(k+1), G_k = g^(k) X^(k+1), g = l' + h), fixed point to H_2, then double
        g0 = FA1 - X + hx
        h1 = (hx * g0) >> bits
        g1 = h1 - FA1
        h2 = (h1 * g0 + hx * g1) >> bits
        h3 = (h2 * g0 + 2 * h1 * g1 + hx * (2 * FA1 + h2)) >> bits
        q2 = g0 >> 1  # q_k X^(k-1) = H_(k-1) / (k! H_0)
        q3 = (h2 << bits) // (6 * hx)
        q4 = (h3 << bits) // (24 * hx)
        fq2, fq3, fq4, fh, u = q2 * scale, q3 * scale, q4 * scale, hx * scale, step * scale
        fg0, fh1, fg1, fh2, fh3 = g0 * scale, h1 * scale, g1 * scale, h2 * scale, h3 * scale
        fh4 = fh3 * fg0 + 3 * fh2 * fg1 + 3 * fh1 * (2 * fa1 + fh2) + fh * (fh3 - 6 * fa1)
        fq5 = fh4 / (120 * fh)
        if not abs(fq2 * u) <= 0.125:
            return None
        # series reversion to the eta^4 term (coefficients at the fixed precision), error O(eta^5)
        c3 = ((2 * q2 * q2) >> bits) - q3
        c4 = ((5 * q2 * (q3 - ((q2 * q2) >> bits))) >> bits) - q4
        s2 = (step * step) >> bits
        s3 = (s2 * step) >> bits
        corr = step - ((q2 * s2) >> bits) + ((c3 * s3) >> bits) + ((c4 * ((s3 * step) >> bits)) >> bits)
        X += (X * corr) >> bits
        c5 = (14 * fq2 ** 4 + 21 * fq2 * fq2 * abs(fq3) + 6 * abs(fq2 * fq4) + 3 * fq3 * fq3 + abs(fq5))
        if 2 * abs(u) ** 5 * c5 + 64 * scale <= tol:
            return X
    return None


def piece_nodes(d, kind, lo, hi, n, what):
    """[(W, x, X)] of the n-point rule on one piece: W = 2 x (weight) x (Gamma(a) density) x (Jacobian),
    x the node, X its antithetic partner.  ``kind``: ``"y"`` (y = -ln x from lo to hi, Gauss-Legendre) or
    ``"tail"`` (y from lo to infinity, Gauss-Laguerre in (a - x_lo)(y - lo), a = d/2; ``hi`` unused).

    Per node, in fixed-point integer arithmetic at 24 bits beyond the working precision: x = e^{-y}, the
    prefactor :math:`x^ae^{-x}/\\Gamma(a+1)` (two exponentials), the series of :math:`P_a`; then the partner
    (:func:`_fixed_partner`, or :func:`invert_upper` where it declines)."""
    prec = mp.prec
    bits = prec + 24
    ln2 = ln2_fixed(bits)
    lg1 = to_fixed(_log_gammas(d, bits + 8)[1], bits)
    if kind == "tail":
        ts, ws = laguerre(n)
        # gamma(x) x dy = e^{-a y - x} / Gamma(a) dy decays at the rate lam = a - x_lo at y = lo: the Laguerre
        # weight e^{-t} in t = lam (y - lo) leaves a factor that decays (like a Gaussian in t for large a)
        lam = mp.mpf(d) / 2 - mp.exp(-lo)
        pts = [(to_fixed((lo + t / lam)._mpf_, bits), (w / lam * mp.exp(t))._mpf_) for t, w in zip(ts, ws)]
    else:  # y = mid + half t in fixed point (at bits: 7 us a node less than three mpf operations)
        ts, ws = _legendre_rule(n, _tier(prec))
        mid, half = ((lo + hi) / 2)._mpf_, ((hi - lo) / 2)._mpf_
        MID, HALF = to_fixed(mid, bits), to_fixed(half, bits)
        pts = [(MID + (HALF * to_fixed(t, bits) >> bits), mpf_mul(half, w, prec, round_nearest))
               for t, w in zip(ts, ws)]
    xs, pms, pes, weights, pfloats = [], [], [], [], []
    check_time(what, units=NODE_UNITS * len(pts))  # (the rule's nodes, charged at once: 1.5 us a call)
    exps = [_exp_pair(-y, bits, ln2) for y, _ in pts]
    fixed_xs = [xm << xn if xn >= 0 else xm >> -xn for xm, xn in exps]  # x, fixed
    series = _lower_series_local(d, fixed_xs, bits) if kind == "y" and d >= LOCAL_MIN_D else None
    if series is None:
        series = [_lower_series_fixed(d, x, bits, None) for x in fixed_xs]
    for (y, j), (xm, xn), x, sx in zip(pts, exps, fixed_xs, series):
        fm, pn = _exp_pair(-((d * y) >> 1) - x - lg1, bits, ln2)  # x^a e^-x / Gamma(a + 1) = fm 2^(pn - bits)
        pm = (fm * sx) >> bits  # P = pm 2^(pn - bits)
        pms.append(pm)
        pes.append(pn)
        pfloats.append(_pair_float(pm, pn - bits))
        weights.append(from_man_exp(j[1] * fm * d, j[2] + pn - bits))  # 2 j gamma(x) x = 2 a j x^a e^-x / Gamma(a+1)
        xs.append(from_man_exp(xm, xn - bits))
    starts = _float_starts(d, pfloats)
    tol = 2.0 ** -(prec + 4)
    upper = None
    if kind == "y" and d >= UPPER_LOCAL_MIN_D and all(starts):
        # one expansion of Q_a over the partners' range (scipy's starts, widened by 2^-12: the steps move them
        # by about 2^-50); lost: log2 of 1 / the smallest Q the partners take
        X_lo = int(math.ldexp(min(starts) * (1 - 2.0 ** -12), 60)) << (bits - 60)
        X_hi = int(math.ldexp(max(starts) * (1 + 2.0 ** -12), 60)) << (bits - 60)
        upper = _upper_local(d, X_lo, X_hi, bits, max(_lost_bits(pm, pn, bits) for pm, pn in zip(pms, pes)))
    out = []
    for x, pm, pn, W, x0 in zip(xs, pms, pes, weights, starts):
        X = None
        if x0 is not None:
            X = _fixed_partner(d, pm, pn, x0, bits, ln2, tol, upper)
            X = None if X is None else from_man_exp(X, -bits)
        if X is None:  # (its steps charge their own work)
            X = invert_upper(d, mp.make_mpf(from_man_exp(pm, pn - bits)), x0, what)._mpf_
        out.append((mp.make_mpf(mpf_pos(W, prec, round_nearest)), mp.make_mpf(mpf_pos(x, prec, round_nearest)),
                    mp.make_mpf(mpf_pos(X, prec, round_nearest))))
    return out


# ---------------------------------------------------------------------------
# expectations over the pair

#: Node counts of the Gauss rules of a piece, in increasing order: a piece's value from one count is
#: checked against the one before.
LADDER = (6, 8, 12, 16, 24, 32, 48, 64, 96)

#: Lower quantiles of Gamma(a) at which the lower half [0, median] is split (the median first); beyond the
#: last one the tail is a Gauss-Laguerre piece.
QUANTILES = ("0.5", "0.05", "1e-6")

#: Node evaluations one expectation may add to its rule (refinements) before ConvergenceError.
MAX_NODES = 6000


class Piece:
    """One piece of the lower half in y = -ln x: from lo to hi (Gauss-Legendre), or from lo to infinity
    (``hi`` None, Gauss-Laguerre in (a - x_lo)(y - lo)); its node lists per rung of :data:`LADDER`, computed
    lazily at the rule's precision.  ``off``: log2 of 1/(the Gamma(a) mass below lo), at least (the piece
    holds at most that share of the mass: its first rung is chosen for that many fewer bits)."""

    __slots__ = ("lo", "hi", "off", "span", "nodes")

    def __init__(self, lo, hi, off, span=0):
        self.lo, self.hi, self.off, self.span = lo, hi, off, span
        self.nodes = {}

    def rule(self, d, n, what, prec):
        if n not in self.nodes:
            with mp.workprec(prec):
                self.nodes[n] = piece_nodes(d, "y" if self.hi is not None else "tail", self.lo, self.hi, n, what)
        return self.nodes[n]

    def halves(self):
        mid = (self.lo + self.hi) / 2
        return Piece(self.lo, mid, self.off, self.span / 2), Piece(mid, self.hi, self.off, self.span / 2)


def rule_precision(prec):
    """The precision a rule is built at for a request at ``prec`` bits: the next multiple of 16 bits above
    prec + 4, at least 96, so that the expectations of one call at nearby precisions share one set of nodes
    (their rungs still follow each request's own precision; a call whose expectations ask for different
    precisions sets the rule to the highest first: theory.oprf's optimum and pair excess).  Before: 32-bit steps
    from 128 bits (a 15-digit pnc excess at 89-100 bits paid for 152-bit nodes, 136 now: 10 % of the full
    benchmark grid's median at 15 digits), and before that 64-bit steps from 192 bits."""
    return max(96, 16 * ((prec + 4) // 16 + 1))


class PairRule:
    """The pieces of the lower half for one d (split at :data:`QUANTILES` and at ``extra`` points in y),
    their nodes and partners: shared by every integrand at every precision up to the rule's (a request at
    a higher precision rebuilds them, at :func:`rule_precision`)."""

    def __init__(self, d, extra=()):
        self.d, self.extra = d, tuple(extra)
        self.prec = 0
        self.pieces = []
        self.y05 = None

    def ensure(self, what, prec=None):
        prec = mp.prec if prec is None else prec
        if self.pieces and self.prec >= prec:
            return
        self.prec = rule_precision(prec)
        with mp.workprec(self.prec):
            us = [mp.mpf(u) for u in QUANTILES] + [mp.mpf(2) ** -(prec // 2)]
            us = [u for i, u in enumerate(us) if i < len(QUANTILES) or u < us[len(QUANTILES) - 1]]
            # the median bounds the lower half (the domain: exact); the other quantiles only split it (cut_y)
            cuts = [(-mp.log(invert_lower(self.d, mp.log(us[0]), what)) if i == 0 else cut_y(self.d, mp.log(u)),
                     int(-mp.log(u, 2))) for i, u in enumerate(us)]
            self.y05 = cuts[QUANTILES.index("0.05")][0]  # (where a PRF peak starts to need its own pieces)
            extra = [y for y in map(mp.mpf, self.extra) if y > cuts[0][0]]
            cuts += [(y, max(off for c, off in cuts if c <= y)) for y in extra]
            cuts.sort(key=lambda c: c[0])
            # from the first extra cut (a PRF peak's y* - 4w or y*) on, the integrand, not the density, holds the
            # mass: those pieces are wanted to the full goal (off 0), each spanning at least PEAK_SPAN bits
            peak = min(extra, default=mp.inf)
            pieces = [Piece(lo, hi, off, hi_off - off) for (lo, off), (hi, hi_off) in zip(cuts, cuts[1:])]
            pieces.append(Piece(cuts[-1][0], None, cuts[-1][1]))
            for piece in pieces:
                if piece.lo >= peak:
                    piece.off = 0
                    piece.span = max(PEAK_SPAN, piece.span) if piece.hi is not None else 0
            self.pieces = pieces


#: Bits a piece of a peak rule (:class:`PairRule` with ``extra`` cuts: theory.pnc's PRF at large v) spans at
#: least: each covers about 4 widths of the integrand's peak, over which it falls by about e^-8 (11.5 bits).
#: With the density's offsets and spans instead, the pieces beyond the peak started 2-4 rungs low (the
#: integrand's mass there is far above the density's): prf at v = 3, 6, d = 2 .. 8, 15 and 30 digits built
#: 4 464 nodes, 3 646 now (at v = 6, 30 digits, d = 5: 480 -> 320).
PEAK_SPAN = 12


#: Nodes the first rung of a piece adds per square root of its span in bits (:func:`_start_rung`).
SPAN_NODES = 3.0


def _start_rung(prec, span=0):
    """Index in :data:`LADDER` of the first rung of a piece at ``prec`` bits whose mass falls by 2^``span`` from
    its upper to its lower end (0: unknown, a split or peak piece, or the tail): about 6 bits per node, plus
    :data:`SPAN_NODES` sqrt(span) (a Gauss-Legendre rule for a density that falls like e^{-a y} over the piece
    needs more nodes the more e-folds it spans; and the spectral estimate of a finite piece
    (:func:`spectral_error`) sees the fast late decay of such a piece's coefficients only from a rung above it).
    Nodes built over the pnc benchmark grid (prf, oprf, rff; d = 2 .. 1024; 7 v from 1e-300 to 6; 15 and 30
    digits): 63 230 with the two-rung comparison (coefficient 1.6), 54 596 with the spectral estimate at 1.6,
    47 972 at 3.0 (2.2 .. 5 and per-bit 1/4.5 .. 1/10: 47 544 - 55 560, the ladder's steps make it bumpy); the
    values are checked as before (the start only decides which rungs are built below the one the estimate
    accepts)."""
    want = prec / 6 + SPAN_NODES * math.sqrt(span)
    for i in range(1, len(LADDER)):
        if LADDER[i] >= want:
            return i
    return len(LADDER) - 1


class Cancellation(ConvergenceError):
    """The terms of an expectation cancel below its tolerance at this precision (``lost`` bits): the caller
    may redo it with more bits."""

    def __init__(self, what, lost):
        super().__init__(f"{what}: the terms of the quadrature cancel by {lost} bits at {mp.prec} bits; "
                         "raise the working precision")
        self.lost = lost


class Expectation:
    """Result of :func:`expect`: ``value``, ``error`` (the estimate) and ``magnitude`` (the sum of the
    absolute values of the terms: ``magnitude / |value|`` is the cancellation in the sum)."""

    __slots__ = ("value", "error", "magnitude")

    def __init__(self, value, error, magnitude):
        self.value, self.error, self.magnitude = value, error, magnitude


def expect(rule, f, what, absolute=None, goal=None, start=None):
    r""":math:`\mathbb E[f(x_1, x_2)]` over the antithetic pair by the pieces of ``rule`` (a :class:`PairRule`),
    to a relative error :math:`2^{10-p}` at p bits (``goal`` bits if given, computing at the working
    precision; or to ``absolute``); an :class:`Expectation`.  ``start``: the bits each piece's first rung is
    chosen for (default ``goal``; higher where a later expectation on the same rule will ask for more bits, so
    that this one does not build lower rungs that one will not use: theory.oprf's optimum before its excess).

    Each finite piece is integrated by the Gauss-Legendre rule of one rung n of :data:`LADDER` and its error
    estimated from the decay of its integrand's Legendre coefficients (:func:`spectral_error`; the sum of the
    absolute values S where no decay is seen yet); the Gauss-Laguerre tail by two successive rungs n < n', its
    error the difference D (its convergence is not geometric from n = 0: measured).  Each estimate gets the
    rounding :math:`2^{4-p}S` (16 units of the last place per term: the weight, the integrand and its argument's
    partner each to a few units).  The piece with the largest estimate goes up one rung until the estimates sum
    to at most the tolerance; beyond the last rung a finite piece is split in two.  (Before: every piece by two
    successive rungs, the n'-rule's error :math:`16S(D/S)^{n'/n}` where D < S/256: 1.3x the nodes over the pnc
    benchmark grid.)  ConvergenceError naming ``what`` after :data:`MAX_NODES` more nodes (or a tail piece beyond
    the last rung)."""
    d = rule.d
    rule.ensure(what)
    p = mp.prec
    goal = p if goal is None else goal
    tol = mp.mpf(2) ** (10 - goal)
    eps = mp.mpf(2) ** (4 - p)

    sums = {}

    def piece_sum(piece, n):
        key = (piece, n)  # (the piece itself: an id could be reused once a split piece is dropped)
        if key not in sums:
            nodes = piece.rule(d, n, what, rule.prec)
            check_time(what, units=INTEGRAND_UNITS * len(nodes))  # (the piece's integrands, charged at once)
            terms = [W * f(x, X) for W, x, X in nodes]
            sums[key] = (mp.fsum(terms), mp.fsum(abs(t) for t in terms), terms)
        return sums[key]

    def evaluate(piece, k):
        n1 = LADDER[k]
        v1, s, terms = piece_sum(piece, n1)
        if piece.hi is not None:  # a Gauss-Legendre piece: its own rung's spectral estimate
            err = spectral_error(terms, n1, s)
            if err is None:  # (no decay seen yet: the next rung)
                err = s
        else:  # the Gauss-Laguerre tail: the rung below (its convergence is not geometric from n = 0: measured)
            diff = abs(v1 - piece_sum(piece, LADDER[k - 1])[0])
            err = diff
        return [piece, k, v1, err + eps * s, s]

    start = goal if start is None else max(goal, start)
    state = [evaluate(piece, _start_rung(start - piece.off, piece.span)) for piece in rule.pieces]
    added = 0
    while True:
        total = mp.fsum(st[2] for st in state)
        err = mp.fsum(st[3] for st in state)
        target = absolute if absolute is not None else tol * abs(total)
        if err <= target:
            return Expectation(total, err, mp.fsum(st[4] for st in state))
        magnitude = mp.fsum(st[4] for st in state)
        if eps * magnitude > target / 4:  # the rounding of the terms alone: more nodes cannot help
            lost = int(mp.mag(magnitude)) - (int(mp.mag(total)) if total else -p)
            raise Cancellation(what, lost)
        if added > MAX_NODES:
            raise ConvergenceError(f"{what}: quadrature error estimate {mp.nstr(err, 3)} above the tolerance "
                                   f"{mp.nstr(target, 3)} after {added} more nodes at {p} bits; lower the working "
                                   "precision or the argument")
        worst = max(range(len(state)), key=lambda i: state[i][3])
        piece, k = state[worst][0], state[worst][1]
        if k + 1 < len(LADDER):
            added += LADDER[k + 1]
            state[worst] = evaluate(piece, k + 1)
        elif piece.hi is not None:
            halves = piece.halves()
            idx = rule.pieces.index(piece)
            rule.pieces[idx:idx + 1] = list(halves)
            starts = [_start_rung(goal - h.off, h.span) for h in halves]
            state[worst:worst + 1] = [evaluate(h, k) for h, k in zip(halves, starts)]
            added += sum(LADDER[k] for k in starts)
        else:
            raise ConvergenceError(f"{what}: the tail piece of the quadrature (beyond the 2^-{p // 2} quantile) did "
                                   f"not converge with {LADDER[-1]} nodes at {p} bits")


# ---------------------------------------------------------------------------
# the integrands' Bessel-type function

def hyp0f1(b2, z):
    r""":math:`{}_0F_1(;b;z) = \sum_k z^k/((b)_k\,k!)` with b = ``b2``/2 (``b2`` an integer >= 1), to a relative
    accuracy of the working precision.

    z >= 0 (the integrands of the PRF and OPRF pair terms): the positive series in fixed point (about
    :math:`2\sqrt z` + p/log2 terms; each truncation at most one unit, covered by the guard bits), as fast
    as mpmath's at small b and 40x faster at b = 512 (where mpmath takes its asymptotic expansion).  z < 0
    (the RFF pair terms): the alternating series in fixed point with the bits its cancellation takes and an
    a-posteriori error bound (:func:`_hyp0f1_negative`; 5-10x faster than mpmath's at 2 sqrt(-z) = 10-70),
    mpmath's where that bound fails (near a zero)."""
    zt = z._mpf_
    if zt[0] and zt[1]:
        value = _hyp0f1_negative(b2, mpf_neg(zt))
        return value if value is not None else mp.hyp0f1(mp.mpf(b2) / 2, z)
    return _hyp0f1_positive(b2, zt, 0)


def exp_excess(x):
    r"""e^x - 1 - x without cancellation.

    For |x| < 1/2: :math:`x^2\sum_{k\ge0}x^k/(k+2)!`, the sum (in [0.42, 0.61]) in fixed point at 16 bits
    beyond the working precision: its term ratios are at most 1/6, each term is truncated by at most one
    unit and the loop stops at the first term below one unit, so the sum is exact to a few units.  (Written
    out: it runs at every quadrature node of the pnc routes; one home for theory.oprf and theory.pnc.)"""
    xt = x._mpf_
    if not xt[1] or xt[2] + xt[3] <= -1:  # |x| < 1/2 (0 included): its exponent and bit count
        return mp.make_mpf(mpf_mul(mpf_mul(xt, xt), _fixed_sum(x, 6, None, 2)._mpf_, mp.prec, round_nearest))
    with mp.workprec(mp.prec + 4):
        return mp.expm1(x) - x


def _fixed_sum(x, q2, m, first):
    r""":math:`\sum_{k\ge0} c_kx^k` with :math:`c_0 = 1/` ``first`` and :math:`c_{k+1} = 2c_k/((q_2 + 2k)(m + k))`
    (no second factor for ``m`` None), for |x| < 1/2 and term ratios below 1/6 (the tails of exp: q2 = 6,
    ratio 1/(k+3); of 0F1: q2 = 2h + 4, m = 3), in fixed point at 16 bits beyond the working precision
    (:func:`fixed_series`); an mpf."""
    bits = mp.prec + 16
    return mp.make_mpf(from_man_exp(fixed_series(to_fixed(x._mpf_, bits), bits, q2, m, first), -bits))


def fixed_series(X, bits, q2, m, first):
    r"""The sum of :func:`_fixed_sum` for x given as the fixed-point integer X (scale 2^``bits``), as one: each
    term truncated toward zero by at most one unit (the signs alternate for x < 0), the loop stopping at the
    first zero term (also theory.oprf's fixed-point integrands)."""
    neg = X < 0
    X = -X if neg else X
    total = term = (1 << bits) // first
    k = 0
    while term:
        term = ((term * X) >> bits) * 2 // ((q2 + 2 * k) * (1 if m is None else m + k))
        total += -term if neg and k % 2 == 0 else term
        k += 1
    return total


def hyp0f1_excess(b2, z):
    r""":math:`{}_0F_1(;b;z) - 1 - z/b = \sum_{k\ge2} z^k/((b)_k\,k!)` (b = ``b2``/2, ``b2`` an integer >= 1) for
    any real z, to a relative accuracy of the working precision, tiny z included (the series from its k = 2
    term :math:`t_2 = z^2/(2b(b+1))`, which leads it: the ratios of :func:`hyp0f1`'s fixed-point loops, started
    at k = 2 with :math:`t_2` as the unit): the integrand of the pnc pair excesses
    (:func:`theory.pnc._pair_excess`), whose expectation is :math:`\rho - 1 \mp v^2` without cancellation at
    small v.  z < 0 where the alternating series' a-posteriori bound fails (near a zero of the sum): mpmath's
    hyp0f1 with the bits the subtraction of 1 - |z|/b takes, checked."""
    zt = z._mpf_
    if not zt[1] and not zt[2]:  # z = 0
        return mp.mpf(0)
    prec = mp.prec
    # t_2 = 2 z^2 / (b2 (b2 + 2)): z^2 exact, one rounding of the division, one of the product with the sum
    lead = mpf_div(mpf_shift(mpf_mul(zt, zt), 1), from_int(b2 * (b2 + 2)), prec + 8, round_nearest)
    if not zt[0]:
        return mp.make_mpf(mpf_mul(lead, _hyp0f1_positive(b2, zt, 2, raw=True), prec, round_nearest))
    value = _hyp0f1_negative(b2, mpf_neg(zt), 2, raw=True)
    if value is not None:
        return mp.make_mpf(mpf_mul(lead, value, prec, round_nearest))
    extra = 16
    for _ in range(NEGATIVE_TRIES + 2):  # mpmath's hyp0f1 to relative accuracy, minus 1 - |z|/b: measured loss
        with mp.workprec(prec + extra):
            lin = 1 + z * 2 / b2
            value = mp.hyp0f1(mp.mpf(b2) / 2, z) - lin
        lost = (max(int(mp.mag(lin)), 0) - int(mp.mag(value))) if value else prec + extra
        if lost <= extra - 8:
            return +value
        extra = lost + 16
    raise ConvergenceError("the 0F1 excess of a pnc pair integrand cancels beyond its retries; lower the argument")


def _hyp0f1_positive(b2, zt, k0, raw=False):
    r"""The positive series of :func:`hyp0f1` (z >= 0, ``zt`` its mpf tuple) from its term k0 (0 or 2) on, that
    term as 1: :math:`\sum_{k\ge k_0} t_k/t_{k_0}` (:func:`hyp0f1_excess` scales it by :math:`t_2`); ``raw``: as
    an mpf tuple unrounded (the fixed-point sum, for one rounding of the caller's product)."""
    prec = mp.prec
    bits = prec + 16 + (int(to_float(zt)) + prec).bit_length()
    Z = to_fixed(zt, bits)
    total = term = 1 << bits
    z2, b2m2, k = Z << 1, b2 - 2, k0 + 1
    while term:  # blocks of 256 terms, each charged
        for k in range(k, k + 256):
            term = (term * z2 >> bits) // ((b2m2 + 2 * k) * k)  # z / ((b + k - 1) k)
            if not term:
                break
            total += term
        else:
            k += 1
            # the terms grow to ~2.9 sqrt(z) bits, each step costs ~ their length in words: ~1 unit per 32 bits (bench_work)
            check_time("the 0F1 series of a pair integrand",
                       units=SERIES_UNITS * 2 * (1 + total.bit_length() // 256))
    if raw:
        return from_man_exp(total, -bits)
    return mp.make_mpf(mpf_pos(from_man_exp(total, -bits), prec, round_nearest))


#: Tries of the alternating series of :func:`_hyp0f1_negative` (each with the bits its a-posteriori bound
#: asked for) before mpmath's hyp0f1 takes over (near a zero of the Bessel function the value is far below
#: its terms).
NEGATIVE_TRIES = 3


def _negative_cancellation(b2, w, k0):
    r"""An a-priori estimate (float w > 0) of the bits the alternating series of :func:`_hyp0f1_negative` cancels:
    log2 of its largest term over the term k0 (the index k* with k*(b + k* - 1) <= w, by log-gamma) minus log2 of
    the sum's size: for k0 = 0 from :math:`{}_0F_1(;b;-w) = \Gamma(b)(x/2)^{1-b}J_{b-1}(x)`, x = 2 sqrt(w), with
    Debye's :math:`J_\nu(x) \approx e^{\nu(\tanh\alpha - \alpha)}/\sqrt{2\pi\nu\tanh\alpha}`,
    :math:`\cosh\alpha = \nu/x`, below the turning point x < nu = b - 1 (the value falls far below the terms at
    large b) and the envelope :math:`\sqrt{2/(\pi x)}` beyond; for k0 = 2 (:func:`hyp0f1_excess`) the excess
    :math:`{}_0F_1 - 1 + w/b` at least :math:`|w/b - 1|` (w >= 2b) or its leading term.  Only the start of the
    bits: the a-posteriori bound checks the sum and raises them where a zero of J (or the estimate) falls short.
    Before: :math:`\log_2\cosh 2\sqrt w` whatever b (at b = 512, w = 18 432: 392 bits for a loss of 100)."""
    b = b2 / 2
    if not w > 1e-200 or (k0 == 2 and w < b2):  # (the terms fall from the first and the excess is led by it)
        return 2
    k = max(k0, int((-(b - 1) + math.sqrt((b - 1) ** 2 + 4 * w)) / 2))

    def log_term(j):  # ln t_j, t_j = w^j / ((b)_j j!)
        return j * math.log(w) + math.lgamma(b) - math.lgamma(b + j) - math.lgamma(j + 1)

    top = log_term(k) - log_term(k0)
    if k0 == 0:
        nu, x = b - 1, 2 * math.sqrt(w)
        if nu > 0 and x < nu:
            alpha = math.acosh(nu / x)
            th = max(math.tanh(alpha), 1e-3)
            log_j = nu * (th - alpha) - 0.5 * math.log(2 * math.pi * nu * th)
        else:
            log_j = 0.5 * math.log(2 / (math.pi * x))
        size = math.lgamma(b) + (1 - b) * math.log(x / 2) + min(log_j, 0.0)
    else:
        size = (math.log(abs(w / b - 1)) if w >= 2 * b else log_term(2)) - log_term(2)
    return max(0, int((top - min(size, 0.0)) / math.log(2))) + 2


def _hyp0f1_negative(b2, wt, k0=0, raw=False):
    r""":math:`{}_0F_1(;b;-w)` for w > 0 (``wt``: the mpf tuple of w; b = ``b2``/2 >= 1/2) by its alternating
    series in fixed point, to a relative accuracy of the working precision; None where the a-posteriori bound
    does not give that within :data:`NEGATIVE_TRIES` tries (the caller then takes mpmath's, which raises its
    precision as far as it needs).  ``k0`` = 2: the series from its k = 2 term on, that term as 1
    (:math:`\sum_{k\ge2}t_k/t_2`, for :func:`hyp0f1_excess`); ``raw``: the sum as an unrounded mpf tuple.

    Error bound, at scale 2^B with K terms (j = k - k0 the power of w in a term relative to the first): w to
    one unit, a relative :math:`2^{-B}/w` that reaches the term j times, in all at most
    :math:`\sum_j j|T_j|/W` units (T the terms and W = w at the scale; summed as the loop goes; 2 units where
    W = 0, all later terms then below one unit); each term truncated twice (2 units), carried to the later
    terms by their ratios: up to the largest term (the terms grow from 1) at most 2M units each (M the sum of
    the terms' absolute values), after it (ratios below 1) at most 2K units each; the rest after the first
    zero term (alternating, decreasing) one unit.  In all at most :math:`2KM + 2K^2 + \sum_j j|T_j|/W + 1`
    units, checked against :math:`2^{-p-4}` of the sum's absolute value.  B starts at p + 20 +
    :math:`2\sqrt w\log_2e` (the largest term's bits: the cancellation) + 2 log2(K)."""
    prec = mp.prec
    wf = to_float(wt)
    if not wf < 1e12:  # (the largest term alone beyond 2^(2.9e6) bits)
        return None
    lost = _negative_cancellation(b2, wf, k0)
    n_est = int(2.8 * math.sqrt(wf) + prec / 4) + 8
    B = prec + 20 + lost + 2 * n_est.bit_length()
    for _ in range(NEGATIVE_TRIES):
        W = to_fixed(wt, B)
        total = absum = term = 1 << B
        jsum = 0
        w2, b2m2, k = W << 1, b2 - 2, k0 + 1
        while term:  # blocks of 256 terms (an even number: the signs alternate from k = k0 + 1 in each), each charged
            for k in range(k, k + 256, 2):
                term = (term * w2 >> B) // ((b2m2 + 2 * k) * k)  # the term of odd k - k0: subtracted
                absum += term
                jsum += (k - k0) * term
                total -= term
                term = (term * w2 >> B) // ((b2m2 + 2 * k + 2) * (k + 1))
                absum += term
                jsum += (k + 1 - k0) * term
                total += term
                if not term:
                    break
            else:
                k += 2
                check_time("the 0F1 series of a pair integrand",
                           units=SERIES_UNITS * 2 * (1 + absum.bit_length() // 256))
        k += 2 - k0  # (the terms summed: at most k)
        err = 2 * k * ((absum >> B) + 1) + 2 * k * k + (jsum // W + 1 if W else 2) + 1  # units of 2^-B
        short = err.bit_length() + prec + 5 - abs(total).bit_length()  # (err 2^(p+4) <= |total|)
        if short <= 0:
            value = from_man_exp(total, -B)
            return value if raw else mp.make_mpf(mpf_pos(value, prec, round_nearest))
        B += short + 8
    return None


def hyp0f1_pair(b2, z):
    r"""(:math:`{}_0F_1(;b;z)`, :math:`{}_0F_1(;b+1;z)`) for z >= 0, b = ``b2``/2, from one fixed-point loop (the
    terms of the second are those of the first times b/(b+k)); as :func:`hyp0f1`, relative accuracy."""
    total, total1, bits = hyp0f1_pair_fixed(b2, z._mpf_)
    prec = mp.prec
    return (mp.make_mpf(mpf_pos(from_man_exp(total, -bits), prec, round_nearest)),
            mp.make_mpf(mpf_pos(from_man_exp(total1, -bits), prec, round_nearest)))


def hyp0f1_pair_fixed(b2, zt, extra=0):
    r"""The loop of :func:`hyp0f1_pair` for the mpf tuple ``zt`` (z >= 0): (F0, F1, bits), the two sums as
    fixed-point integers at scale 2^bits, bits = p + ``extra`` + 16 + log2(z + p) (each term truncated by at most
    one unit; the terms grow to about 2.9 sqrt(z) bits before they fall: the log2 covers their count); also
    theory.oprf's fixed-point integrands."""
    if zt[0] and zt[1]:
        raise ValueError("hyp0f1_pair takes z >= 0")
    prec = mp.prec + extra
    bits = prec + 16 + (int(to_float(zt)) + prec).bit_length()
    Z = to_fixed(zt, bits)
    total = total1 = term = 1 << bits
    z2, k = Z << 1, 1
    while term:  # blocks of 256 terms, each charged
        for k in range(k, k + 256):
            j = b2 + 2 * k - 2  # 2 (b + k - 1)
            term = (term * z2 >> bits) // (j * k)
            if not term:
                break
            total += term
            total1 += term * b2 // (j + 2)  # b / (b + k) = b2 / (2 (b + k - 1) + 2)
        else:
            k += 1
            # the terms grow to ~2.9 sqrt(z) bits, each step costs ~ their length in words: ~1 unit per 32 bits (bench_work)
            check_time("the 0F1 series of a pair integrand",
                       units=SERIES_UNITS * 2 * (1 + total.bit_length() // 256))
    return total, total1, bits


def exp_affine(c, k):
    r"""s -> :math:`e^{c + ks}` (mpf c, k; s >= 0 an mpf) as an exact mpf tuple, to a relative 2^-(p+13) at the
    working precision p of the call: the exponent in fixed point at W = p + 16 bits (c and k to a unit, ks to
    two, whatever its size: a relative error of the exponential of a few units of 2^-W), then
    :func:`_exp_pair`.  (mpf's exp of c + ks rounded to p bits errs by 2^-p |c + ks| relative: 2^(10 - p) at
    |c + ks| ~ 1000.)  The pnc integrands of theory.oprf."""
    ct, kt, consts = c._mpf_, k._mpf_, {}

    def value(s):
        W = mp.prec + 16
        if W not in consts:
            consts[W] = to_fixed(ct, W), to_fixed(kt, W), ln2_fixed(W)
        C, K, ln2 = consts[W]
        m, n = _exp_pair(C + (K * to_fixed(s._mpf_, W) >> W), W, ln2)
        return from_man_exp(m, n - W)

    return value
