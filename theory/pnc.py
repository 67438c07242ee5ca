r"""Pairwise norm-coupled orthogonal random features (PNC-ORFs), beyond the paper.

The coupling, the quadrature and the series, and the domain: :ref:`guide-theory.pnc`
(``docs/guide/derivations.rst``).
"""

from __future__ import annotations

import functools
import math

import mpmath

from ._context import mp

from ._antithetic import Cancellation, PairRule, exp_excess, expect, hyp0f1, hyp0f1_excess
from ._checks import check_dimension, check_nonnegative, guarded, half_square
from ._context import check_time
from ._series import quad_checked
from .errors import ConvergenceError
from .registry import register
from .validation import check_choice, show_int

__all__ = ["pair_conformity", "pair_conformity_u", "pair_norm_product_moment", "rff_pair_conformity"]

#: Newton iterations allowed per incomplete-gamma inversion.
MAX_NEWTON = 80

#: Largest d of the closed forms (d = 2^20 takes about 1 s at 15 digits: the incomplete gamma series at the
#: nodes take about sqrt(d p) terms); beyond, ConvergenceError naming d.
D_REACH = 2 ** 20


def _gammainc(a, lo, hi):
    """The regularised incomplete gamma function of mpmath; its failures (mpmath's series does not
    converge for a = d/2 beyond about 10^7) as ConvergenceError naming d."""
    try:
        return mp.gammainc(a, lo, hi, regularized=True)
    except (mpmath.libmp.NoConvergence, ValueError) as exc:
        raise ConvergenceError(
            f"the incomplete gamma function at a = d/2 = {mp.nstr(a, 10)} is beyond mpmath's reach ({exc}); "
            f"the PNC closed forms reach d <= {D_REACH} (see theory.pnc)") from exc


def _log_gamma_density(a, x):
    return (a - 1) * mp.log(x) - x - mp.loggamma(a)


def _invert(a, target_log, upper, x0):
    r"""x with :math:`\log P_a(x)` (or :math:`\log Q_a(x)` if ``upper``) equal to ``target_log``.

    Safeguarded Newton on the logarithm (well conditioned in both tails),
    started at x0: a step that leaves the bracket known to hold the root is
    replaced by bisection in :math:`\log x`.  The incomplete gamma function is
    evaluated 20 bits above the working precision so that rounding noise stays
    below the stopping tolerance.
    """
    tol = mp.mpf(2) ** (4 - mp.prec)
    x = mp.mpf(x0)
    lo, hi = mp.mpf(0), mp.inf
    what = f"incomplete-gamma inversion at a = d/2 = {mp.nstr(a, 8)}"
    with mp.workprec(mp.prec + 20):
        for _ in range(MAX_NEWTON):
            check_time(what, units=40)  # mpmath's gammainc: 100-1000 us (the u route, the tests' reference)
            if upper:
                tail = _gammainc(a, x, mp.inf)
            else:
                tail = _gammainc(a, 0, x)
            g = mp.log(tail) - target_log if tail > 0 else -mp.inf
            # log P increases with x, log Q decreases: is the root above x?
            above = (g < 0) if not upper else (g > 0)
            if above:
                lo = x
            else:
                hi = x
            slope = mp.exp(_log_gamma_density(a, x) - mp.log(tail)) if tail > 0 else mp.mpf(0)
            x_new = x - g / (-slope if upper else slope) if slope and mp.isfinite(g) else mp.nan
            if mp.isfinite(x_new) and abs(x_new - x) <= tol * abs(x_new):
                return +x_new
            if not (lo <= x_new <= hi):  # outside the bracket (or no usable slope): bisect in log x
                x_new = mp.sqrt(lo * hi) if lo > 0 and mp.isfinite(hi) else (x * 4 if above else x / 4)
            x = x_new
    raise ConvergenceError(f"incomplete-gamma inversion (a = {mp.nstr(a, 6)}, log target {mp.nstr(target_log, 6)}) "
                           f"did not converge in {MAX_NEWTON} Newton steps; lower the precision")


def _start(a, log_u, upper):
    """A float starting point for the inversion (scipy where representable, else the tail asymptotics)."""
    from scipy import special

    u = float(mp.exp(log_u))
    if u > 1e-290:
        x0 = float(special.gammainccinv(float(a), u) if upper else special.gammaincinv(float(a), u))
        if 0 < x0 < float("inf"):
            return x0
    if not upper:  # P_a(x) ~ x^a e^-x / Gamma(a + 1)
        return float(mp.exp((log_u + mp.loggamma(a + 1)) / a))
    lg, fa, lu = float(mp.loggamma(a)), float(a), float(log_u)
    x = max(fa, -lu)
    for _ in range(50):  # Q_a(x) ~ x^(a-1) e^-x / Gamma(a), a contraction for x > a - 1
        x = max(fa, -lu - lg + (fa - 1) * float(mp.log(x)))
    return x


@functools.lru_cache(maxsize=64)
def _pair_rule(d, extra=()):
    """The quadrature rule of the pair for d (:class:`theory._antithetic.PairRule`; ``extra``: more split
    points in y = -ln x, floats): its nodes and partners do not depend on the integrand, so the PRF, RFF and
    OPRF pair terms, their A-derivatives and the moments share them, within a call and across calls at the
    same d and a precision up to the rule's (a curve over v inverts the incomplete gamma function once per
    node, not once per node and point)."""
    return PairRule(d, extra)


#: The memo of the nodes and partners (``_partner_cached.cache_clear()`` empties it, as before).
_partner_cached = _pair_rule


def clear_caches():
    """Forget every memoised rule, partner and moment of this module (for cold-start measurements)."""
    _pair_rule.cache_clear()
    _sum_moment_cached.cache_clear()
    _float_rule.cache_clear()
    from . import _antithetic

    _antithetic._log_gammas.cache_clear()


def _check_reach(d):
    if d > D_REACH:
        raise ConvergenceError(
            f"the incomplete gamma function at a = d/2 = {mp.nstr(mp.mpf(d) / 2, 10)} is beyond the reach of the "
            f"PNC quadrature (its series at the nodes take about sqrt(d p) terms); the PNC closed forms reach "
            f"d <= {D_REACH} (see theory.pnc)")


def _expect(d, g, what, peak=None, cancel=0, start=None):
    r""":math:`\mathbb E[g(x_1, x_2)]` over an antithetic pair (x = w^2/2), to the working precision: an
    :class:`theory._antithetic.Expectation`.

    ``peak``: None, or (y*, w) where the integrand in :math:`y = -\ln x` has its small-x peak at y* with
    width w (large v: y* = v^2/d, w = 2v/d for the PRF conformity, the maximum of
    :math:`-a y + v\sqrt{2ay}`, the integrand's logarithm as x -> 0).  A peak beyond the 0.05 quantile of
    the norms and beyond y = 4 (x < 0.018; d = 2: v > 2.8, d = 64: v > 16) spreads over orders of
    magnitude of x; the rule is then also split at y* + k w (k = -4, 0, 4, 12), and its tail starts beyond.

    Where the terms cancel (the RFF integrands, whose values are far below their O(1) terms at large z), the
    sum is redone with the bits its rounding took (measured: the sum of the absolute values of the terms
    over the value), up to :data:`MAX_CANCELLATION_BITS` more.  ``cancel``: bits of cancellation the caller
    has added to the working precision already (the value is then wanted to that many bits fewer).  ``start``:
    the bits the pieces' first rungs are chosen for (:func:`theory._antithetic.expect`)."""
    _check_reach(d)
    rule = _pair_rule(d)
    if peak is not None:
        rule.ensure(what)
        ystar, w = peak
        if _peak_in_tail(ystar, rule.y05):
            rule = _pair_rule(d, tuple(float(ystar + k * w) for k in (-4, 0, 4, 12)))
    extra, goal = 0, mp.prec - cancel
    while True:
        with mp.workprec(goal + cancel + extra):
            try:
                return expect(rule, g, what, goal=goal, start=start)
            except Cancellation as exc:
                lost = exc.lost
        need = lost + 8 - cancel
        if lost > MAX_CANCELLATION_BITS or need <= extra:
            raise ConvergenceError(f"{what}: the terms of the quadrature cancel by {lost} bits (more than "
                                   f"{MAX_CANCELLATION_BITS}, or beyond the bits added); lower the argument")
        extra = need


#: Nodes per piece of :func:`_float_rule` (Gauss-Legendre) and of its tail (Gauss-Laguerre).
FLOAT_RULE_NODES = (32, 24)


@functools.lru_cache(maxsize=4)
def _float_gauss(n, nt):
    """numpy's n-point Gauss-Legendre and nt-point Gauss-Laguerre rules (read-only arrays), memoised as the
    working-precision tables are (not by :func:`clear_caches`): numpy builds each from an eigenproblem, 0.7 ms,
    which was half of a cold :func:`_float_rule`."""
    import numpy as np

    rules = (np.polynomial.legendre.leggauss(n), np.polynomial.laguerre.laggauss(nt))
    for rule in rules:
        for arr in rule:
            arr.flags.writeable = False
    return rules


@functools.lru_cache(maxsize=64)
def _float_rule(d):
    r"""(W, x1, x2) as float64 arrays: a double-precision model of the pair's law, for starting points of
    searches (theory.oprf's optimal A), never for returned values.

    All in float64 with scipy (no incomplete-gamma function at the working precision: before, the model took the
    finest rung of each piece of the working-precision rule, built for it by a quadrature to 53 bits, 10-20 % of
    an OPRF call and 20 ms at d = 1024): the lower half in y = -ln x split at the Gamma(a) quantiles 0.5, 0.05,
    1e-6 and 1e-12 (scipy's gammaincinv), :data:`FLOAT_RULE_NODES` Gauss-Legendre nodes per piece and
    Gauss-Laguerre nodes in :math:`(a - x_{lo})(y - y_{lo})` beyond, the weight 2 x (the rule's weight) x
    :math:`x^ae^{-x}/\Gamma(a)`, normalised to a total mass of 1, the partner :math:`Q_a^{-1}(P_a(x))` by
    scipy's gammaincc inverse (weights without a finite partner, below 1e-300 of the mass, dropped).  Measured
    against the quadrature at 127 bits: the mass and E[(x1 + x2)^2] to 1e-15 at d <= 8 and 2.5e-13 at d = 1024
    before the normalisation (tests/test_theory_antithetic.py)."""
    import numpy as np
    from scipy import special

    a = d / 2
    lg = math.lgamma(a)
    xs = [float(special.gammaincinv(a, u)) for u in (0.5, 0.05, 1e-6, 1e-12)]
    ys = [-math.log(x) for x in xs]
    n, nt = FLOAT_RULE_NODES
    (tl, wl), (tg, wg) = _float_gauss(n, nt)
    weights, nodes = [], []
    for y0, y1 in zip(ys[:-1], ys[1:]):
        mid, half = (y0 + y1) / 2, (y1 - y0) / 2
        x = np.exp(-(mid + half * tl))
        weights.append(2 * half * wl * np.exp(a * np.log(x) - x - lg))
        nodes.append(x)
    lam = a - xs[-1]
    x = np.exp(-(ys[-1] + tg / lam))
    weights.append(2 * wg / lam * np.exp(tg + a * np.log(x) - x - lg))
    nodes.append(x)
    W, x1 = np.concatenate(weights), np.concatenate(nodes)
    with np.errstate(all="ignore"):
        x2 = special.gammainccinv(a, special.gammainc(a, x1))
    ok = np.isfinite(x2) & np.isfinite(W)
    W = np.where(ok, W, 0.0)
    W = W / W.sum()
    x2 = np.where(ok, x2, 0.0)
    for arr in (W, x1, x2):
        arr.flags.writeable = False  # (memoised: shared by every caller)
    return W, x1, x2


#: Bits a cancelling pair expectation may add to the working precision (:func:`_expect`).
MAX_CANCELLATION_BITS = 2048


def _expect_over_lower_half(d, f, what, peak=None, cancel=0, start=None):
    r""":math:`\mathbb E[f(x_1 + x_2)]` over an antithetic pair (:func:`_expect`)."""
    return _expect(d, lambda x, X: f(x + X), what, peak, cancel, start).value


def _prf_peak(a, vv):
    r"""(y*, w) of the PRF pair integrand's small-x peak in :math:`y = -\ln x`: the maximum of
    :math:`-a y + v\sqrt{2ay}` (its logarithm as x -> 0), y* = v^2/(2a) = v^2/d, width w = v/a."""
    return vv * vv / (2 * a), vv / a


def _peak_in_tail(ystar, y05):
    """Whether a small-x peak at y* = -ln x lies beyond the 0.05 quantile (at y = ``y05``) and beyond y = 4."""
    return ystar > max(y05, 4)


def _lower_half_points(a):
    """Split points of [0, median] at lower quantiles 1e-12, 1e-6, 1e-3, 0.05, 0.2 of Gamma(a):
    each piece holds a known share of the mass, whatever a (the mass concentrates near the median
    with width sqrt(a) for large a, near 0 for small a)."""
    pts = [mp.mpf(0)]
    for u in ("1e-12", "1e-6", "1e-3", "0.05", "0.2", "0.5"):
        lu = mp.log(mp.mpf(u))
        pts.append(_invert(a, lu, False, _start(a, lu, False)))
    return pts


def _prf_pair(d, vv):
    t = half_square(vv)
    if _series_terms(t) is not None:
        return _pair_series(d, t, 1)
    a = mp.mpf(d) / 2
    return _expect_over_lower_half(d, lambda s: hyp0f1(d, vv * vv * s / 2),
                                   f"PNC PRF pair conformity (d = {show_int(d)}, v = {mp.nstr(vv, 6)})",
                                   peak=_prf_peak(a, vv))


#: Oscillations of the RFF pair integrand over the bulk of the pair's law (:func:`_rff_oscillations`) beyond
#: which its quadrature is refused at once: it fails beyond about 25-35 anyway (its tail piece, or its node
#: limit, after seconds of work: 3-6 s at z = 1000 before), so that z = 1000 raises in microseconds.
RFF_MAX_OSCILLATIONS = 64


def _rff_oscillations(d, zz):
    r"""About how many periods the RFF pair integrand :math:`{}_0F_1(;a;-z^2s/2) \propto J_{a-1}(z\sqrt{2s})/(\ldots)`
    has over the pair's law: :math:`z(\sqrt{2s_{hi}} - \sqrt{2s_{lo}})/(2\pi)`, s from twice the median (its
    minimum) to its value at the :math:`2^{-p/2}` quantile (floats; an estimate for the refusal only)."""
    from scipy import special

    a = d / 2
    u = 2.0 ** -min(mp.prec // 2, 990)
    s_lo = 2 * float(special.gammaincinv(a, 0.5))
    s_hi = float(special.gammaincinv(a, u)) + float(special.gammainccinv(a, u))
    if not math.isfinite(s_hi) or s_hi <= s_lo:
        return 0.0
    return float(zz) * (math.sqrt(2 * s_hi) - math.sqrt(2 * s_lo)) / (2 * math.pi)


def _rff_pair(d, zz):
    t = half_square(zz)
    if _series_terms(t) is not None:
        return _pair_series(d, t, -1)
    _check_reach(d)
    n = _rff_oscillations(d, zz)
    if n > RFF_MAX_OSCILLATIONS:
        raise ConvergenceError(
            f"PNC RFF pair conformity (d = {show_int(d)}, z = {mp.nstr(zz, 6)}): its integrand oscillates about {n:.0f} times "
            f"over the norms' range, beyond the quadrature's reach ({RFF_MAX_OSCILLATIONS}; it resolves about 25: "
            f"z <= 20 at d <= 8, z <= 30 at d = 64); use a smaller z (or Monte Carlo: montecarlo.empirical_mse)")
    # the terms are O(1) and the value smaller: _expect carries the bits its sum loses
    return _expect_over_lower_half(d, lambda s: hyp0f1(d, -zz * zz * s / 2),
                                   f"PNC RFF pair conformity (d = {show_int(d)}, z = {mp.nstr(zz, 6)})")


#: The series in v^2 (:func:`_pair_series`) is used for :math:`t = v^2/2 \le 2^{-17}` (v <= 2^{-8} = 0.0039),
#: where its moments need at least 32 bits fewer than the quadrature of the whole integrand (they
#: share one set of incomplete-gamma inversions, so beyond that the quadrature is the cheaper
#: route), and while it needs at most :data:`SERIES_MAX_TERMS` terms at the working precision.
SERIES_T_MAX = mp.mpf(2) ** -17
SERIES_MAX_TERMS = 16


def _series_terms(t):
    r"""K such that the series of :func:`_pair_series` truncated after :math:`t^K` is within
    :math:`2^{-p-4}` (p the working precision) of its sum; None where the quadrature route is used
    (:math:`t >` :data:`SERIES_T_MAX`, or K > :data:`SERIES_MAX_TERMS`).

    The bound: :math:`\mathbb E[s^k] \le 2^{k-1}(\mathbb E[x_1^k] + \mathbb E[x_2^k]) = 2^k(a)_k`
    (convexity; each :math:`x_i \sim \mathrm{Gamma}(a)`), so the k-th term is at most
    :math:`(2t)^k/k!` and the remainder after K at most :math:`\frac{(2t)^{K+1}}{(K+1)!}\frac{1}{1 - 2t/(K+2)}`.
    """
    if not t:
        return 0
    if t > SERIES_T_MAX:
        return None
    tol = mp.mpf(2) ** (-mp.prec - 4)
    term = mp.mpf(1)
    for k in range(SERIES_MAX_TERMS + 1):
        term = term * 2 * t / (k + 1)  # (2t)^{k+1}/(k+1)!
        q = 2 * t / (k + 2)
        if q < 1 and term / (1 - q) <= tol:
            return k
    return None


def _pair_series(d, t, sign):
    r""":math:`\mathbb E[{}_0F_1(;a;\pm t s)] = \sum_k \frac{(\pm t)^k\,\mathbb E[s^k]}{(a)_k\,k!}`,
    :math:`s = x_1 + x_2`, :math:`a = d/2`, for small :math:`t = v^2/2` (or :math:`z^2/2`).

    :math:`\mathbb E[s^0] = 1` and :math:`\mathbb E[s] = 2a = d` are exact; each
    :math:`\mathbb E[s^k]`, k >= 2, is one quadrature over the antithetic pair
    (:func:`_pair_sum_moment`, all at one precision, so that they share the incomplete-gamma
    inversions at the nodes).  The k-th term is at most :math:`(2t)^k/k!` (:func:`_series_terms`),
    so the moments need :math:`p + \log_2(2t^2)` bits (the k = 2 term, the largest) plus guards to
    give the sum to :math:`2^{-p}` absolutely.  At :math:`v = 10^{-300}` and p = 4100 bits (what the
    difference :math:`\rho - e^{v^2}` needs; :mod:`theory.mse` takes :func:`_pair_excess` instead) that is
    about 160 bits and the sum stops after the :math:`t^2` term; the quadrature route would invert the
    incomplete gamma function at 4100 bits at every node.
    """
    K = _series_terms(t)
    prec = mp.prec
    a = mp.mpf(d) / 2
    with mp.workprec(prec + 8):
        total = 1 + sign * 2 * t  # k = 0, 1: E[s] / a = 2
        if K >= 2:
            log2_term2 = 2 * float(mp.log(2 * t, 2)) - 1  # (2t)^2 / 2!
            bits = max(int(prec + log2_term2) + 24 + (K + 1).bit_length(), 53)
            # steps of 32 bits (nearby t share the memoised moments), each 5 below a multiple of 32, whose rule
            # (rule_precision) is that multiple: 160 bits at v = 1e-4 (15 digits) instead of 192
            bits = 32 * ((bits + 4) // 32 + 1) - 5
        coef = sign * t / a  # (+-t)^k / ((a)_k k!) at k = 1
        for k in range(2, K + 1):
            coef = coef * sign * t / ((a + k - 1) * k)
            total += coef * _pair_sum_moment(d, k, bits)
    return +total


def _pair_sum_moment(d, k, bits):
    r""":math:`\mathbb E[(x_1 + x_2)^k]` over an antithetic pair, to ``bits`` bits (memoised)."""
    return mp.make_mpf(_sum_moment_cached(d, k, bits))


@functools.lru_cache(maxsize=4096)
def _sum_moment_cached(d, k, bits):
    with mp.workprec(bits):
        return _expect_over_lower_half(d, lambda s: s ** k,
                                       f"PNC pair moment E[(x1 + x2)^{k}] (d = {show_int(d)}, {bits} bits)")._mpf_


#: The RFF pair excess is taken from the expectation of :func:`theory._antithetic.hyp0f1_excess` for
#: :math:`t = z^2/2` up to this value (z <= 1); beyond, the expectation of the conformity's own integrand,
#: which is O(1) where :math:`\rho - 1 + 2t` is O(t) (at z = 3 the excess route's difference would cancel by
#: about 17 bits more).
RFF_EXCESS_T_MAX = mp.mpf(1) / 2

#: Times :func:`_pair_excess` raises its guard bits when its difference cancels more than they allow.
EXCESS_TRIES = 3


def _excess_guard(d):
    r"""Guard bits of :func:`_pair_excess`: its difference :math:`\mathbb E[h] - (e^{\pm 2t} - 1 \mp 2t)` cancels
    by about log2(d/2) bits at small t (the v^4 coefficients :math:`\mathbb E[s^2]/(2a(a+1))` and 2 differ by
    :math:`(\mathrm{Var}\,s - 4a)/(2a(a+1))`, of relative order 1/a), less at larger t; 12 more for the error of
    the quadrature (:math:`2^{10-p}` relative) and the roundings."""
    return d.bit_length() + 12


def _pair_excess(d, vv, sign):
    r""":math:`\rho - e^{\pm 2t}` of one norm-coupled orthogonal pair (the PRF excess :math:`\rho - e^{v^2}` for
    sign = +1, ``vv`` = v; the RFF excess :math:`\rho^{RFF} - e^{-z^2}` for sign = -1, ``vv`` = z; t = vv^2/2
    exactly), to a relative accuracy of the working precision, without the bits a difference of order
    :math:`v^4` against 1 would take.

    :math:`\mathbb E[s] = 2a = d` exactly (s = x_1 + x_2, a = d/2), so
    :math:`\rho - e^{\pm 2t} = \mathbb E[h(\pm ts)] - (e^{\pm 2t} - 1 \mp 2t)` with
    :math:`h(z) = {}_0F_1(;a;z) - 1 - z/a = \sum_{k\ge2}z^k/((a)_kk!)` (:func:`theory._antithetic.hyp0f1_excess`,
    :math:`\ge 0` for both signs: 0F1(;a;-w) >= 1 - w/a), both of order :math:`t^2`: one quadrature at the
    working precision plus :func:`_excess_guard` bits, for any t > 0 (the PRF at every v; the RFF for
    :math:`t \le` :data:`RFF_EXCESS_T_MAX`, beyond which the conformity's own quadrature, whose terms are O(1),
    minus :math:`e^{-2t}`).  The difference's loss is measured: beyond the guard's allowance (guard - 12 bits) it
    is redone with the bits lost + 16, at most :data:`EXCESS_TRIES` times, then ConvergenceError.

    Before (``theory.mse``'s difference route): the conformity at :math:`p + 4\log_2(1/v) + 2\log_2 d + 24`
    bits, or at small v the moments of :func:`_pair_series` at about p + 100 bits after the v^4 coefficient
    at p + 2 log2(d) + 16: two sets of nodes (a precision tier each) where this takes one."""
    t = half_square(vv)
    if not t:
        return mp.mpf(0)
    a = mp.mpf(d) / 2
    name = "PRF" if sign > 0 else "RFF"
    what = f"PNC {name} pair excess (d = {show_int(d)}, {'v' if sign > 0 else 'z'} = {mp.nstr(vv, 6)})"
    route = sign > 0 or t <= RFF_EXCESS_T_MAX
    if route:
        _check_reach(d)
    guard = _excess_guard(d)
    for _ in range(EXCESS_TRIES):
        with mp.workprec(mp.prec + guard):
            if route:
                st = sign * t
                e = _expect(d, lambda x, X: hyp0f1_excess(d, st * (x + X)), what,
                            peak=_prf_peak(a, vv) if sign > 0 else None).value
                c = exp_excess(2 * st)
            else:
                e, c = _rff_pair(d, vv), mp.exp(-2 * t)
            r = e - c
        size = max(int(mp.mag(e)) if e else -mp.inf, int(mp.mag(c)) if c else -mp.inf)
        lost = size - int(mp.mag(r)) if r else guard + 2 * mp.prec
        if lost <= guard - 12:
            return r
        guard = lost + 16
    raise ConvergenceError(f"{what}: the difference of its expectation and e^(2t) cancels by {lost} bits beyond "
                           f"{EXCESS_TRIES} raises of the precision; lower the working precision")


def _prf_pair_excess(d, vv):
    return _pair_excess(d, vv, 1)


def _rff_pair_excess(d, zz):
    return _pair_excess(d, zz, -1)


def _cancellation_bits(zz):
    """Extra bits for an RFF expectation ~ e^{-z^2} of an O(1) integrand, in steps of 16 bits: the u route's
    (:func:`pair_conformity_u`) a-priori bound (the x route measures its cancellation instead)."""
    return 16 * (int(zz * zz * 1.5 + 8) // 16 + 1)


def _norm_product_moment(d):
    r""":math:`M = \mathbb E[w_1^2w_2^2] = 4\,\mathbb E[x_1x_2]` over an antithetic pair."""
    return _expect(d, lambda x, X: 4 * x * X, f"PNC norm product moment (d = {show_int(d)})").value


@guarded(grid=("d", "v"))
def pair_conformity(d, v):
    r"""PRF conformity :math:`\mathbb E[e^{(w_1 + w_2)^\top v}]` of one norm-coupled orthogonal pair.

    Parameters
    ----------
    d : int >= 2 (or a sequence / numpy array of them)
    v : real >= 0 (or a sequence / numpy array of them)
        :math:`\|x + y\|`.

    Returns
    -------
    mpf, or a numpy object array of mpf of the broadcast shape of d and v
        :math:`\mathbb E[{}_0F_1(;\frac d2;\frac{v^2}{2}(x_1+x_2))]` (:ref:`guide-theory.pnc`).

    Raises
    ------
    theory.errors.ConvergenceError
        When the quadrature misses its error bound at the working precision.
    """
    d = check_dimension(d, "pnc_orthogonal")
    return _prf_pair(d, check_nonnegative(v, "v"))


@guarded(grid=("d", "z"))
def rff_pair_conformity(d, z):
    r"""RFF conformity :math:`\mathbb E[\cos(w_1^\top z)\cos(w_2^\top z)]` of one norm-coupled orthogonal pair.

    Parameters
    ----------
    d : int >= 2 (or a sequence / numpy array of them)
    z : real >= 0 (or a sequence / numpy array of them)
        :math:`\|x - y\|`.

    Returns
    -------
    mpf, or a numpy object array of mpf of the broadcast shape of d and z
    """
    d = check_dimension(d, "pnc_orthogonal")
    return _rff_pair(d, check_nonnegative(z, "z"))


#: The kinds :func:`pair_conformity_u` computes.
U_ROUTE_KINDS = ("prf", "rff")


@guarded(grid=("d", "v"))
def pair_conformity_u(d, v, kind="prf"):
    r"""The pair conformity by the second route: :math:`2\int_0^{1/2} f(P_a^{-1}(u) + Q_a^{-1}(u))\,du`.

    Two incomplete-gamma inversions per node in the uniform variable, against
    one per node in the gamma variable for :func:`pair_conformity`; the tests
    compare the two.  Domain: for the PRF kind, v with v^2/d at most 4 or the
    0.05 quantile's -ln x (whichever is larger), where the fixed split points
    resolve the integrand; beyond, :class:`~theory.errors.ConvergenceError` (it
    returned values 3.7e-14 off at d = 2, v = 6, 15 digits).

    Parameters
    ----------
    d : int >= 2 (or a sequence / numpy array of them)
    v : real >= 0 (or a sequence / numpy array of them)
        :math:`\|x + y\|` for ``kind="prf"``, :math:`\|x - y\|` for ``kind="rff"``.
    kind : {'prf', 'rff'}
        Which conformity: :func:`pair_conformity` or :func:`rff_pair_conformity` (any other value,
        "PRF" or None included, is refused: it used to give the RFF value).

    Returns
    -------
    mpf, or a numpy object array of mpf of the broadcast shape of d and v
    """
    kind = check_choice(kind, "kind", U_ROUTE_KINDS)
    d = check_dimension(d, "pnc_orthogonal")
    vv = check_nonnegative(v, "v")
    a = mp.mpf(d) / 2
    sign = 1 if kind == "prf" else -1

    ystar = _prf_peak(a, vv)[0]
    if kind == "prf" and _peak_in_tail(ystar, -mp.log(_lower_half_points(a)[4])):
        raise ConvergenceError(
            f"the u route of the PNC PRF pair conformity (d = {show_int(d)}, v = {mp.nstr(vv, 6)}) does not resolve "
            f"the integrand's peak at u ~ e^(-v^2/2) (v^2/d = {mp.nstr(ystar, 4)} beyond 4 and the 0.05 quantile); "
            "use pair_conformity (theory.conformity), which integrates that tail in -ln x")

    def integrand(u):
        if u <= 0:
            return mp.mpf(0)
        lu = mp.log(u)
        s = _invert(a, lu, False, _start(a, lu, False)) + _invert(a, lu, True, _start(a, lu, True))
        return mp.hyp0f1(a, sign * vv * vv * s / 2)

    points = [mp.mpf(0)] + [mp.mpf(u) for u in ("1e-12", "1e-6", "1e-3", "0.05", "0.2", "0.5")]
    with mp.workprec(mp.prec + (_cancellation_bits(vv) if kind == "rff" else 0)):
        return 2 * quad_checked(integrand, points,
                                what=f"PNC pair conformity, u route (d = {show_int(d)}, v = {mp.nstr(vv, 6)})")


@guarded(grid=("d",))
def pair_norm_product_moment(d):
    r""":math:`M = \mathbb E[w_1^2 w_2^2]` for an antithetic pair of :math:`\chi_d` norms (:math:`d^2` if independent).

    ``d``: an int >= 2, or a sequence / numpy array of them (then a numpy object array of mpf of its shape)."""
    return _norm_product_moment(check_dimension(d, "pnc_orthogonal"))


def _block_pair_weights(d, b):
    coupled = 2 * (b // 2)
    return coupled, b * (b - 1) - coupled


register("pnc_orthogonal", "prf_conformity", _prf_pair)
register("pnc_orthogonal", "rff_conformity", _rff_pair)
register("pnc_orthogonal", "prf_conformity_excess", _prf_pair_excess)
register("pnc_orthogonal", "rff_conformity_excess", _rff_pair_excess)
register("pnc_orthogonal", "prf_conformity_v2", lambda d: mp.mpf(1))
register("pnc_orthogonal", "rff_conformity_z4", lambda d: _norm_product_moment(d) / (4 * d * (d + 2)) - mp.mpf(1) / 4)
register("pnc_orthogonal", "block_pair_weights", _block_pair_weights)
