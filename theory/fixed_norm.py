r"""Fixed-norm orthogonal random features: the bias and MSE of a scheme libraries ship (beyond the paper).

The scheme, its bias and MSE, the small-v limit and the domain: :ref:`guide-theory.fixed_norm`
(``docs/guide/derivations.rst``).
"""

from __future__ import annotations

import functools
from fractions import Fraction

from ._checks import check_dimension, check_int, check_norms_and_v, guarded, rational, square
from ._context import check_time, mp
from ._series import log2abs
from .conformities import check_v
from .errors import ConvergenceError
from .feature_kinds import check_kind, kernel_c
from .kernels import coupled_pairs, norm_exponent
from .validation import show_int

__all__ = ["fixed_norm_bias", "fixed_norm_mean", "fixed_norm_mse"]


def _f(d, t):
    # one mpmath hyp0f1 at the parameter d/2: its cost grows like the cube of d's bit length k at the precision
    # the callers raise by dimension_bits (measured: fixed_norm_mse 0.3 s of CPU at k = 250, 2.9 s at 400, minutes
    # beyond 1 000 inside that one call), charged before the call so that a d beyond reach is refused at once
    k = int(d).bit_length()
    check_time(f"the fixed-norm closed forms at d = {show_int(d)} (mpmath's 0F1 at the parameter d/2)",
               units=1 + k ** 3 // 5000)
    return mp.hyp0f1(mp.mpf(d) / 2, t)


def _means(kind, d, vv):
    """(mu, mu_0): the fixed-norm and the Gaussian mean of one direction's statistic, 'prf' (t = v) or 'rff'
    (t = z)."""
    v2 = square(vv)
    sign = 1 if kind == "prf" else -1
    return _f(d, sign * d * v2 / 4), mp.exp(sign * v2 / 2)


def _moments(kind, d, vv):
    """(mu, E b^2, pair term within a block, mu_0) for 'prf' (t = v) or 'rff' (t = z)."""
    v2 = square(vv)
    mu, mu0 = _means(kind, d, vv)
    if kind == "prf":
        second, pair = _f(d, d * v2), _f(d, d * v2 / 2)
    else:
        second, pair = (1 + _f(d, -d * v2)) / 2, _f(d, -d * v2 / 2)
    return mu, second, pair, mu0


@functools.lru_cache(maxsize=64)
def _coefficients(kind, d, p, n):
    r"""Exact Taylor coefficients in :math:`s = v^2`, orders 0..n, of (bias, D, V):
    :math:`\mu e^{\mp s/2} - 1`, :math:`D = \mu - \mu_0` and :math:`V = (\mathbb E b^2 - \mu^2) + p(\rho - \mu^2)`."""
    sigma = 1 if kind == "prf" else -1
    b = Fraction(d, 2)

    def hyp(alpha):  # 0F1(; d/2; alpha s)
        out = [Fraction(1)]
        for k in range(n):
            out.append(out[-1] * alpha / ((b + k) * (k + 1)))
        return out

    def ex(beta):  # e^{beta s}
        out = [Fraction(1)]
        for k in range(n):
            out.append(out[-1] * beta / (k + 1))
        return out

    def mul(f, g):
        out = []
        for k in range(n + 1):
            check_time("fixed-norm small-v series coefficients")
            out.append(sum(f[j] * g[k - j] for j in range(k + 1)))
        return out

    mu = hyp(Fraction(sigma * d, 4))
    bias = mul(mu, ex(Fraction(-sigma, 2)))
    bias[0] -= 1
    diff = [a - e for a, e in zip(mu, ex(Fraction(sigma, 2)))]
    mu2 = mul(mu, mu)
    if kind == "prf":
        second = hyp(Fraction(d))
    else:
        second = [(c + (k == 0)) / 2 for k, c in enumerate(hyp(Fraction(-d)))]
    pair = hyp(Fraction(sigma * d, 2))
    var = [s2 - m2 + p * (pr - m2) for s2, m2, pr in zip(second, mu2, pair)]
    return {"bias": tuple(bias), "D": tuple(diff), "V": tuple(var)}


def _exp_tail(lam, n, s):
    r"""Bound of :math:`\sum_{k>n}(\lambda s)^k/k!` (geometric majorant of the ratios, :math:`\lambda s < n + 2`)."""
    x = lam * s
    return x ** (n + 1) / mp.factorial(n + 1) / (1 - x / (n + 2))


def _series_value(kind, d, s, p, what):
    """``what`` ('bias', 'D' or 'V') at s = v^2 from its Taylor series, or None where the series would need
    more than 64 terms (or 128 could not prove the working precision): then the closed forms are used."""
    prec = mp.prec
    per_term = -log2abs(s) - 1  # bits gained per term by the slowest majorant, e^{2s}
    n = 8 + int((prec + 40) / max(per_term, 1)) + 1
    if n > 64:
        return None  # v^2 > 2^{-prec/50}: the closed forms lose at most prec/6 bits
    while n <= 128:
        check_time("fixed-norm small-v series")
        coeffs = _coefficients(kind, d, p, n)[what]
        # majorants of the coefficients: bias <= e^{s/2} e^{s/2}, D <= 2 e^{s/2}, V <= e^{2s} + (1 + 2p) e^{s}
        if what == "bias":
            tail = _exp_tail(1, n, s)
        elif what == "D":
            tail = 2 * _exp_tail(mp.mpf(1) / 2, n, s)
        else:
            tail = _exp_tail(2, n, s) + (1 + 2 * rational(p)) * _exp_tail(1, n, s)
        wp = prec + 20
        with mp.workprec(wp):
            total = mp.mpf(0)
            absum = mp.mpf(0)
            power = mp.mpf(1)
            for c in coeffs:
                if c:
                    term = rational(c) * power
                    total += term
                    absum += abs(term)
                power *= s
            err = (2 * len(coeffs) + 8) * absum * mp.mpf(2) ** (-wp) + tail
        if total and err <= abs(total) * mp.mpf(2) ** (-prec - 2):
            return +total
        n *= 2
    return None


def _closed_forms(kind, d, vv, p, whats):
    """The parts ``whats`` (a tuple of 'bias', 'D', 'V') from the closed forms, as a dict, evaluated again with
    more bits while a difference lost more bits than the guard had."""
    guard = 2 * max(0, -4 * int(mp.mag(vv))) + 24  # v^8 against 1: the RFF full-block variance
    lost = float("nan")
    for _attempt in range(10):
        check_time(f"fixed-norm {'/'.join(whats)} (differences of nearly equal 0F1 values)")
        out, worst = {}, float("-inf")
        with mp.workprec(mp.prec + guard):
            if "V" in whats:
                mu, second, pair, mu0 = _moments(kind, d, vv)
            else:
                mu, mu0 = _means(kind, d, vv)
            for what in whats:
                if what == "bias":
                    ratio = mu / mu0
                    value, scale = ratio - 1, max(abs(ratio), 1)
                elif what == "D":
                    value, scale = mu - mu0, max(abs(mu), abs(mu0))
                else:
                    pp = rational(p)
                    mu2 = mu * mu
                    value = (second - mu2) + pp * (pair - mu2)
                    scale = max(abs(second), mu2, pp * abs(pair), pp * mu2)
                    if value <= 0:  # a variance: nothing of it is left at this precision
                        value = mp.mpf(0)
                out[what] = value
                worst = max(worst, log2abs(scale) - log2abs(value))
        lost = worst
        if lost <= guard - 8:
            return {k: +x for k, x in out.items()}
        # a value with a dozen correct bits left measures its loss; one of noise (or 0) only bounds it
        guard = int(lost) + 24 if lost < guard + mp.prec - 12 else 2 * guard + 64
    raise ConvergenceError(
        f"fixed-norm {'/'.join(whats)} at d = {show_int(d)}, v = {mp.nstr(vv, 5)}: a difference cancels beyond 10 "
        f"increases of the precision (last attempt lost {lost:.0f} bits); lower the working precision or move v")


def _small_v_parts(kind, d, vv, p, whats):
    """The parts ``whats`` (:ref:`guide-theory.fixed_norm`: 'bias', 'D', 'V') to the working precision, as a tuple: by the
    series at small v, else by the closed forms."""
    out = {}
    for what in whats:
        if not vv or (what == "V" and kind == "rff" and d == 1):
            out[what] = mp.mpf(0)  # v = 0; or d = 1: cos(+-z) = cos z, the statistic is deterministic
        else:
            value = _series_value(kind, d, square(vv), p, what)
            if value is not None:
                out[what] = value
    rest = tuple(w for w in whats if w not in out)
    if rest:
        out.update(_closed_forms(kind, d, vv, p, rest))
    return tuple(out[w] for w in whats)


def _kind(kind):
    check_kind(kind)
    if kind not in ("prf", "rff"):
        raise ValueError(f"kind must be 'prf' or 'rff' for the fixed-norm closed forms, got {kind!r}")
    return kind


@guarded(grid=("d", "v"))
def fixed_norm_mean(d, v, *, kind="prf"):
    r"""Mean of one direction's statistic, :math:`{}_0F_1(;\frac d2;\pm\frac{dv^2}{4})` (PRF: +,
    :math:`v = \|x + y\|`; RFF: -, :math:`v = \|x - y\|`), against :math:`e^{\pm v^2/2}` for Gaussian rows."""
    kind = _kind(kind)
    d = check_dimension(d)
    vv = check_v(v, "v" if kind == "prf" else "z")
    return _means(kind, d, vv)[0]


@guarded(grid=("d", "v"))
def fixed_norm_bias(d, v, *, kind="prf"):
    r"""Relative bias of the fixed-norm estimate, :math:`\mathbb E\hat K/K - 1 = \mu/\mu_0 - 1` (independent of m,
    of the target kernel and of the norms of x and y): -0.0222 for PRFs at d = 8, v = 1; to relative accuracy
    also at small v, :math:`-\frac{v^4}{4(d+2)}(1 + O(v^2))` (-2.5e-82 at d = 8, v = 1e-20; :ref:`guide-theory.fixed_norm`)."""
    kind = _kind(kind)
    d = check_dimension(d)
    vv = check_v(v, "v" if kind == "prf" else "z")
    return _small_v_parts(kind, d, vv, Fraction(0), ("bias",))[0]


@guarded(grid=("d", "v", "m", "x_norm", "y_norm"))
def fixed_norm_mse(d, v, *, kind="prf", x_norm=None, y_norm=None, m=None, kernel="gaussian"):
    r"""MSE of the fixed-norm orthogonal estimator (variance plus squared bias, :ref:`guide-theory.fixed_norm`), to relative
    accuracy also at small v, where it is :math:`O(v^2)` for PRFs and, for RFFs with full blocks, :math:`O(z^8)`
    (1.7361e-27 at d = m = 8, z = 1e-3; section "Small v" of :ref:`guide-theory.fixed_norm`).

    Parameters
    ----------
    d : int >= 1
    v : real >= 0
        :math:`\|x + y\|` (PRF) or :math:`z = \|x - y\|` (RFF).
    kind : {'prf', 'rff'}, keyword-only
    x_norm, y_norm : real >= 0, keyword-only
        Required for PRFs, None for RFFs.
    m : int >= 1, keyword-only
        Default d.
    kernel : {'gaussian', 'softmax'}, keyword-only
    """
    kind = _kind(kind)
    d = check_dimension(d)
    m = d if m is None else check_int(m, "m", 1)
    if kind == "prf":
        if x_norm is None or y_norm is None:
            raise ValueError("x_norm and y_norm are required for kind='prf', got None")
        xn, yn, vv = check_norms_and_v(x_norm, y_norm, v)
        log_pref = norm_exponent(xn, yn, -2 * kernel_c(kind, kernel))  # exactly: exp magnifies a rounding by |x|^2
    else:
        for name, value in (("x_norm", x_norm), ("y_norm", y_norm)):
            if value is not None:
                raise ValueError(f"{name} must be None for kind='rff', got {value!r}")
        kernel_c(kind, kernel)
        vv, log_pref = check_v(v, "z"), mp.mpf(0)
    p_over_m = Fraction(coupled_pairs(d, m), m)
    var, diff = _small_v_parts(kind, d, vv, p_over_m, ("V", "D"))
    return mp.exp(log_pref) * (var / m + diff * diff)
