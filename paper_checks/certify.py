r"""Certificates over continuous domains: the paper's inequalities proved for every d in [2, D] and every
argument in (0, V], written as JSON that an outside checker replays (issue 40).

What a certificate proves, the enclosures and the budgets: :ref:`guide-paper_checks.certify`
(``docs/guide/certificates.rst``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from fractions import Fraction

from theory.errors import CertificationError

__all__ = ["FORMAT", "MAX_CELLS", "MAX_PREC", "MIN_WIDTH_BITS", "NotCertified", "SPECS", "Spec", "ball_json",
           "certifiable", "certify", "interval_json", "positive_fraction", "qstr", "run", "write"]

#: Version tag of the JSON format (``docs/guide/certificates.rst``).
FORMAT = "simplex-rf certificate 1"
#: Precision of a cell's evaluation (bits) before any increase.
START_PREC = 128
#: Largest precision (bits) any evaluation may use.
MAX_PREC = 1 << 14
#: Largest number of cells one (inequality, d) may take.
MAX_CELLS = 1 << 14
#: A cell narrower than 2**-MIN_WIDTH_BITS times the domain's end is not bisected further.
MIN_WIDTH_BITS = 40
#: Bits of the dyadic enclosure [z_lo, z_hi] of z_crit (its width is about z 2**-ROOT_BITS).
ROOT_BITS = 30


class NotCertified(CertificationError):
    """A certificate could not be completed: the negation was proved on a cell (``refuted``), or a cell
    stayed undecided within the work budget.  ``cell`` holds (d, lo, hi) as exact fractions."""

    def __init__(self, message, cell=None, refuted=False):
        super().__init__(message)
        self.cell = cell
        self.refuted = refuted


def _flint():
    try:
        import flint
    except ImportError as exc:  # pragma: no cover - python-flint is a test dependency
        raise ImportError("certificates need python-flint (arb ball arithmetic): pip install python-flint") from exc
    return flint


# ----------------------------------------------------------------------------- exact numbers and balls


def qstr(q):
    """An exact Fraction as the string of the JSON format: ``'3'`` or ``'3/1024'``."""
    q = Fraction(q)
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def _arb_q(q):
    """Ball of an exact fraction (exact when the denominator is a power of two and the precision holds it)."""
    from flint import arb

    q = Fraction(q)
    return arb(q.numerator) / q.denominator


def _exact(point):
    """The exact Fraction of an arb point (a ball of radius 0, e.g. ``b.lower()``)."""
    man, exp = point.man_exp()
    man, exp = int(man), int(exp)
    return Fraction(man) * (Fraction(2) ** exp)


def _ends(b):
    """The exact ends (Fractions) of an arb ball."""
    if not b.is_finite():
        raise NotCertified(f"an enclosure is not finite ({b})")
    return _exact(b.lower()), _exact(b.upper())


def _show(q):
    """A short decimal of an exact Fraction (for messages)."""
    m, e = _decimal(Fraction(q), 3, False)
    return f"{m}e{e}"


def _decimal(q, digits, up):
    """q rounded to ``digits`` significant decimals (toward +inf if ``up`` else toward -inf): (int, exp)."""
    if q == 0:
        return 0, 0
    a = abs(q)
    e = int((a.numerator.bit_length() - a.denominator.bit_length()) * 0.30103) - digits  # 10^e ~ a / 10^digits
    while a / Fraction(10) ** e >= 10 ** digits:
        e += 1
    while a / Fraction(10) ** e < 10 ** (digits - 1):
        e -= 1
    scaled = q / Fraction(10) ** e
    n = math.ceil(scaled) if up else math.floor(scaled)
    return n, e


def interval_json(lo, hi):
    """``{"mid": ..., "rad": ...}``: decimal strings (Fraction-parsable) of a ball that contains [lo, hi]
    (exact Fractions), with enough digits that an interval of one sign keeps its sign."""
    for digits in (20, 40, 80, 160, 320, 640, 1280):
        m, e = _decimal((lo + hi) / 2, digits, False)
        mid = Fraction(m) * Fraction(10) ** e
        r, re = _decimal(max(hi - mid, mid - lo), digits, True)
        rad = Fraction(r) * Fraction(10) ** re
        if not ((lo > 0 and mid - rad <= 0) or (hi < 0 and mid + rad >= 0)):
            break
    return {"mid": f"{m}e{e}" if m else "0", "rad": f"{r}e{re}" if r else "0"}


def ball_json(b):
    """:func:`interval_json` of an arb ball."""
    return interval_json(*_ends(b))


def _interval_terms(terms):
    """Exact ends (Fractions) of sum_k g_k P_k with g_k a ball and P_k in [P1_k, P2_k]: the interval sum of
    the corner products, rounded outward (no 30-bit radius in between: an interval from 1 to 1e30 keeps
    its lower end)."""
    from flint import arb

    lo, hi = arb(0), arb(0)
    for g, p1, p2 in terms:
        a, b = g * p1, g * p2
        lo += a.lower().min(b.lower())
        hi += a.upper().max(b.upper())
    return _exact(lo.lower()), _exact(hi.upper())


def _quotient(num, den_lo, den_hi):
    """Exact ends of num / den for num in [num[0], num[1]] (Fractions) and den in [den_lo, den_hi] (balls,
    den_lo proved > 0), over the corners."""
    if not den_lo > 0:
        raise NotCertified(f"a denominator is not proved positive ({den_lo})")
    d1, d2 = _exact(den_lo.lower()), _exact(den_hi.upper())
    c = [num[0] / d1, num[0] / d2, num[1] / d1, num[1] / d2]
    return min(c), max(c)


#: The side 0 of an inequality 0 < G, as an exact interval.
_ZERO = (Fraction(0), Fraction(0))


def _positive(b):
    return bool(b > 0)


# ----------------------------------------------------------------------------- coefficient series (PRF family)


def _moment_series(d, c, K, parity=None):
    r"""Polynomial :math:`\sum_{p\le K} c^pR_p x^p/p!` (R_p = E[sin^p phi], density sin^{d-1} on (0, pi)),
    only the even or odd p when ``parity`` is 0 or 1; R_0 = 1, R_1 from :func:`theory.certified`, and
    R_{p+2} = R_p (d+p)/(d+p+1)."""
    from flint import arb

    from theory.certified import _sin_moment_first

    out = []
    r_prev, r_cur = arb(1), _sin_moment_first(d)
    term = arb(1)  # c^p / p!
    for p in range(K + 1):
        out.append(term * r_prev if parity is None or p % 2 == parity else arb(0))
        term = term * c / (p + 1)
        r_prev, r_cur = r_cur, r_prev * (d + p) / (d + p + 1)
    return out


def _exp_series(K):
    from flint import arb

    out, term = [], arb(1)
    for k in range(K + 1):
        out.append(term)
        term = term / (k + 1)
    return out


def _convolve(a, b, K):
    """Coefficients 0..K of the product of two coefficient lists (arb_poly, rigorous)."""
    from flint import arb, arb_poly

    prod = (arb_poly(a) * arb_poly(b)).coeffs()
    return [prod[k] if k < len(prod) else arb(0) for k in range(K + 1)]


def _rising_ratio(d, K):
    """(d)_k / (d/2)_k for k = 0..K."""
    from flint import arb

    out, r = [], arb(1)
    h = arb(d) / 2
    for k in range(K + 1):
        out.append(r)
        r = r * (d + k) / (h + k)
    return out


def _angle_moment_excess(d, c, K, parity):
    r""":math:`(d)_k/(d/2)_k\,[x^k]\,e^x\,(T(x) - 1)`, T the moment series of the given parity (all p:
    ``None``): the x^k coefficient of :math:`\rho_c - \rho_0` (all p) or of
    :math:`\frac12(\rho_c + \rho_{-c}) - \rho_0` (even p), in x = v^2/2."""
    m = _moment_series(d, c, K, parity)
    m[0] = m[0] - 1  # exact: R_0 = 1
    conv = _convolve(_exp_series(K), m, K)
    return [r * g for r, g in zip(_rising_ratio(d, K), conv)]


def _terms_for(alpha, x_max):
    """Series length for arguments up to x_max: the majorant term (alpha X)^K/K! is below 2^-K e^{-2 alpha X}."""
    return int(2 * math.e * alpha * x_max) + 64


@dataclass
class _SeriesQuantity:
    """G(X) = sum_k g_k X^k with |g_k| <= C alpha^k/k!; g_k = 0 exactly for k < L."""

    name: str
    scale: Fraction  # X = scale * s^2
    L: int
    C: int
    alpha: int
    build: object  # (d, K) -> list of coefficient balls
    zero_reason: str
    majorant_reason: str
    lhs: str = "0"
    rhs: str = ""
    ratio_of: str | None = None  # Fig. 6: rhs = (d - 1) G / (e^{v^2}(e^{v^2} - 1))


def _cor33(d, K):
    from flint import arb

    g = _angle_moment_excess(d, arb(-1) / (d - 1), K, None)
    return [-x for x in g]  # rho_ORF - rho_SimRF


def _cor44(d, K):
    from flint import arb

    two_k = _exp_series(K)  # 1/k!, then 2^k/k!
    a = [r * e for r, e in zip(_rising_ratio(d, K), two_k)]
    return [arb(2) ** k * e - ak for k, (e, ak) in enumerate(zip(two_k, a))]


def _hyperbolic(d, K):
    from flint import arb

    return _angle_moment_excess(d, arb(-1) / (d - 1), K, 0)


def _equal_norms(d, K):
    from flint import arb

    s = arb(2 * (d - 2)) / (d - 1)
    out, inv = [], arb(1)  # 1/(k! (d/2)_k)
    h = arb(d) / 2
    for k in range(K + 1):
        out.append(inv * (arb(2) ** k - s ** k))
        inv = inv / ((k + 1) * (h + k))
    return out


_RHO = "rho_c = 1F1-type conformity of eq. theta_conformity (x = v^2/2)"
SERIES = {
    "prf_gap_orf_simplex": _SeriesQuantity(
        "prf_gap_orf_simplex", Fraction(1, 2), 1, 2, 2, _cor33,
        "g_0 = a_0 (1 - J_0) = 0 (J_0 = 1)",
        "g_k = a_k (1 - J_k), a_k = (d)_k/((d/2)_k k!) <= 2^k/k! and |J_k| <= 1 (|1 + c sin phi| <= 1)",
        rhs="rho_ORF(d, v) - rho_SimRF(d, v)"),
    "prf_gap_iid_orf": _SeriesQuantity(
        "prf_gap_iid_orf", Fraction(1, 2), 2, 2, 2, _cor44,
        "g_0 = 1 - 1 = 0, g_1 = 2 - d/(d/2) = 0",
        "g_k = 2^k/k! - a_k with 0 < a_k <= 2^k/k!",
        rhs="e^{v^2} - rho_ORF(d, v)"),
    "mse_ratio_gap_orf_simplex": _SeriesQuantity(
        "mse_ratio_gap_orf_simplex", Fraction(1, 2), 1, 2, 2, _cor33,
        "as prf_gap_orf_simplex (the ratio gap is (m-1) G / Var with Var > 0)",
        "as prf_gap_orf_simplex", rhs="MSE_ORF/MSE_IID - MSE_SimRF/MSE_IID (m = d)",
        ratio_of="prf_gap_orf_simplex"),
    "mse_ratio_gap_iid_orf": _SeriesQuantity(
        "mse_ratio_gap_iid_orf", Fraction(1, 2), 2, 2, 2, _cor44,
        "as prf_gap_iid_orf (the ratio gap is (m-1) G / Var with Var > 0)",
        "as prf_gap_iid_orf", rhs="1 - MSE_ORF/MSE_IID (m = d)", ratio_of="prf_gap_iid_orf"),
    "hyperbolic_pair_gap_simplex_orf": _SeriesQuantity(
        "hyperbolic_pair_gap_simplex_orf", Fraction(1, 2), 2, 2, 4, _hyperbolic,
        "g_0 = 0, g_1 = a_1 (E[(1 + c s) + (1 - c s)]/2 - 1) = 0",
        "g_k = a_k (E[((1+cs)^k + (1-cs)^k)/2] - 1) with |1 +- c s| <= 2",
        rhs="(rho_SimRF-angle(c) + rho(-c))/2 - rho_ORF, c = -1/(d-1) (hyperbolic pair terms)"),
    "equal_norm_gap_orf_simplex": _SeriesQuantity(
        "equal_norm_gap_orf_simplex", Fraction(1, 4), 1, 1, 2, _equal_norms,
        "g_0 = 1 - 1 = 0",
        "g_k = (2^k - s_d^k)/(k! (d/2)_k) with 0 <= s_d < 2 and (d/2)_k >= 1",
        rhs="0F1(;d/2;u^2/2) - 0F1(;d/2;u^2 (d-2)/(2(d-1))) (equal norms: ORF minus the simplex bound)"),
}


def _majorant_tail(C, alpha, X, K):
    """Ball [0 +- bound] of sum_{k > K} C alpha^k X^k / k! (X an arb upper end, alpha X < K + 2)."""
    from flint import arb

    aX = alpha * X
    q = aX / (K + 2)
    if not q < 1:
        raise NotCertified(f"series tail: alpha X = {aX.mid().str(5, radius=False)} needs more than {K} terms")
    bound = C * aX ** (K + 1) / arb.fac_ui(K + 1) / (1 - q)
    return arb(0, bound.upper())


class _SeriesEvaluator:
    """One series quantity at one d: the coefficients (computed once) and cell enclosures."""

    def __init__(self, q, d, s_max):
        from flint import arb

        self.q, self.d = q, d
        self.x_max = q.scale * Fraction(s_max) ** 2
        self.K = _terms_for(q.alpha, float(self.x_max))
        c_abs = 1 / (d - 1)
        self.coef_prec = START_PREC + int(self.K * math.log2(1 + max(c_abs, 1e-300))) + 64 + 2 * d.bit_length()
        with _prec(self.coef_prec):
            g = q.build(d, self.K)
        for k in range(q.L):  # identities (zero_reason), not rounding results
            g[k] = arb(0)
        self.coeffs = g
        self.prec = START_PREC

    def check_coefficients(self):
        """All g_k (L <= k <= K) proved > 0: the sign the all-d argument asserts, checked at this d."""
        bad = [k for k in range(self.q.L, self.K + 1) if not _positive(self.coeffs[k])]
        return bad

    def small(self, s_max):
        """Largest s_0 = 2^-j <= min(s_max, 1/2) with g_L - R(X_0) > 0; the small_v entry."""
        from flint import arb

        q, L = self.q, self.q.L
        with _prec(self.prec):
            lead = self.coeffs[L]
            if not _positive(lead):
                raise NotCertified(f"{q.name} at d = {self.d}: leading coefficient g_{L} = {lead} is not positive",
                                   (self.d, Fraction(0), Fraction(0)), refuted=bool(lead < 0))
            s0 = Fraction(1, 2)
            while s0 > s_max:
                s0 /= 2
            for _ in range(200):
                X0 = _arb_q(q.scale * s0 * s0)
                aX = q.alpha * X0
                if not aX < L + 2:
                    s0 /= 2
                    continue
                rem = q.C * arb(q.alpha) ** (L + 1) * X0 / arb.fac_ui(L + 1) / (1 - aX / (L + 2))  # R(X_0)
                margin = lead - rem
                if _positive(margin):
                    return s0, {"d": self.d, "v_hi": qstr(s0), "variable": f"X = {qstr(q.scale)} s^2",
                                "leading_power": L, "leading": ball_json(lead), "majorant_C": q.C,
                                "majorant_alpha": q.alpha, "remainder": ball_json(rem),
                                "margin": ball_json(margin), "prec": self.prec}
                s0 /= 2
        raise NotCertified(f"{q.name} at d = {self.d}: no small-argument cell found")

    def cell(self, lo, hi, prec):
        """(lhs, rhs) enclosures of the inequality over v in [lo, hi]."""
        from flint import arb

        q = self.q
        with _prec(prec):
            X_lo, X_hi = _arb_q(q.scale * lo * lo), _arb_q(q.scale * hi * hi)
            aX = q.alpha * X_hi
            s_lo, s_hi = arb(0), arb(0)
            p_lo, p_hi, major = arb(1), arb(1), arb(q.C)  # X_lo^k, X_hi^k, C (alpha X_hi)^k / k!
            tail = None
            for k, g in enumerate(self.coeffs):
                if k:
                    p_lo, p_hi, major = p_lo * X_lo, p_hi * X_hi, major * aX / k
                a, b = g * p_lo, g * p_hi
                s_lo += a.lower().min(b.lower())
                s_hi += a.upper().max(b.upper())
                if k % 8 == 7 and k + 3 > 2 * aX:  # the terms after k: at most major aX/(k+1) / (1 - aX/(k+2))
                    bound = major * aX / (k + 1) / (1 - aX / (k + 2))
                    size = s_lo.lower() if s_lo > 0 else (-s_hi).lower() if s_hi < 0 else arb(0)  # |sum| >= size
                    if bound < size * arb(2) ** -96:
                        tail = bound
                        break
            if tail is None:
                tail = _majorant_tail(q.C, q.alpha, X_hi, self.K)
            tail = _exact(tail.upper())
            total = (_exact(s_lo.lower()) - tail, _exact(s_hi.upper()) + tail)
            if q.ratio_of is not None:  # Fig. 6: (m - 1) G / (e^{v^2} (e^{v^2} - 1)), m = d
                w_lo, w_hi = 2 * X_lo, 2 * X_hi  # exp and expm1 are increasing: Var in [Var(w_lo), Var(w_hi)]
                total = _quotient(((self.d - 1) * total[0], (self.d - 1) * total[1]),
                                  w_lo.exp() * w_lo.expm1(), w_hi.exp() * w_hi.expm1())
            return _ZERO, total, prec


# ----------------------------------------------------------------------------- RFF gap (Sec. 4.2)


def _kummer_neg_half(d, b_shift, y):
    r""":math:`M(-\frac d2, \frac d2 + b, y)` for y > 0 (a ball at the current precision): a polynomial for
    even d; for odd d the series with the tail bound |t_K| q/(1 - q), q = y/(K+1) (the term ratios are at
    most y/(k+1) once k > d/2)."""
    from flint import arb

    a = -arb(d) / 2
    b = arb(d) / 2 + b_shift
    total, term = arb(0), arb(1)
    prec_tiny = arb(2) ** (-2 * _flint().ctx.prec)
    k = 0
    while True:
        total += term
        if d % 2 == 0 and k == d // 2:
            return total
        term = term * (a + k) / (b + k) * y / (k + 1)
        k += 1
        if k > d / 2 + 1 and k + 1 > 2 * y:
            qk = y / (k + 1)
            bound = abs(term) / (1 - qk)
            if bound < prec_tiny:
                return total + arb(0, bound.upper())
        if k > 10 ** 6:
            raise NotCertified(f"Kummer series at d = {d}, y = {y} did not terminate")


class _RffEvaluator:
    r"""G(y) = e^{-2y} - M(d, d/2, -y), y = z^2/2 (the RFF orthogonality gap over P/m^2), by Taylor models.

    At the centre :math:`y_m` of a cell, :math:`F_0 = M(d, \frac d2, -y_m) = e^{-y_m}M(-\frac d2, \frac d2, y_m)`
    and :math:`F_1 = 2e^{-y_m}M(-\frac d2, \frac d2 + 1, y_m)` (Kummer's transformation; the series of
    :func:`_kummer_neg_half`), the higher :math:`S_j = F_j/j!` (u-derivatives, u = -y) from Kummer's equation
    :math:`u(j+2)(j+1)S_{j+2} + (b+j-u)(j+1)S_{j+1} - (a+j)S_j = 0`, and
    :math:`G(y_m + t) = \sum_j (e^{-2y_m}(-2)^j/j! - (-1)^jS_j)t^j + R_J` with
    :math:`|R_J| \le (2^{J+1}e^{-2y_{lo}} + \frac{(d)_{J+1}}{(d/2)_{J+1}}B)\,r^{J+1}/(J+1)!`, B = e^{-y_lo/2}
    for even d and 1 for odd d (the derivative bounds of :func:`theory.conformities._rff_even_taylor`)."""

    q = _SeriesQuantity("rff_gap_iid_orf", Fraction(1, 2), 2, 2, 2, _cor44,
                        "g_0 = 0, g_1 = 0 (the Cor 4.4 coefficients at -y)",
                        "|(-1)^k g_k| <= 2 2^k/k! (Cor 4.4's majorant)", rhs="e^{-z^2} - 1F1(d; d/2; -z^2/2)")

    def __init__(self, d, s_max):
        self.d = d
        self.series = _SeriesEvaluator(_RffEvaluator.q, d, min(Fraction(s_max), Fraction(1)))
        self.prec = START_PREC

    def small(self, s_max):
        return self.series.small(s_max)

    def _start(self, y_m):
        """(F_0, F_1, e^{-2 y_m}, y_m ball) at the current precision: the expensive part of a Taylor model."""
        y = _arb_q(y_m)
        ey = (-y).exp()
        return ey * _kummer_neg_half(self.d, 0, y), 2 * ey * _kummer_neg_half(self.d, 1, y), (-2 * y).exp(), y

    def _coefficients(self, start, J):
        """Taylor coefficients g_0..g_J of G at y_m from the start values."""
        from flint import arb

        F0, F1, e2, y = start
        a, b, u = arb(self.d), arb(self.d) / 2, -y
        S = [F0, F1]
        for j in range(J - 1):
            S.append(((a + j) * S[j] - (b + j - u) * (j + 1) * S[j + 1]) / (u * (j + 1) * (j + 2)))
        g, fac = [], arb(1)
        for j in range(J + 1):
            if j:
                fac = fac * (-2) / j
            g.append(e2 * fac - (S[j] if j % 2 == 0 else -S[j]))
        return g

    def _remainders(self, y_lo, r, order):
        """Yield (J, bound of max |G^{(J+1+order)}| r^{J+1}/(J+1)! on the cell) for J = 1, 2, ...: the bound is
        2^n e^{-2 y_lo} + (d)_n/(d/2)_n B with n = J + 1 + order, B = e^{-y_lo/2} for even d (Szego) and 1 for
        odd d (Bessel), times r^{J+1}/(J+1)!."""
        from flint import arb

        yl, rr = _arb_q(y_lo), _arb_q(r)
        B = (-yl / 2).exp() if self.d % 2 == 0 else arb(1)
        h = arb(self.d) / 2
        two_n, ratio = arb(1), arb(1)
        for k in range(1 + order):
            two_n, ratio = two_n * 2, ratio * (self.d + k) / (h + k)
        e2, power = (-2 * yl).exp(), rr  # power = r^{J+1}/(J+1)! at J = 0
        J = 0
        while True:
            yield J, ((two_n * e2 + ratio * B) * power).upper()
            n = J + 1 + order
            two_n, ratio = two_n * 2, ratio * (self.d + n) / (h + n)
            J += 1
            power = power * rr / (J + 1)

    def enclose(self, y_lo, y_hi, prec, order=0):
        """(ball of G (order 0) or dG/dy (order 1) over [y_lo, y_hi], the value g_0 at the centre)."""
        from flint import arb

        r = (y_hi - y_lo) / 2
        with _prec(prec):
            start = self._start((y_lo + y_hi) / 2)
            g0 = self._coefficients(start, 1)[0]
            if r == 0:
                if order:
                    raise ValueError("a derivative enclosure needs a cell of positive width")
                return g0, g0
            scale = abs(g0).upper() * arb(2) ** -48
            for J, rem in self._remainders(y_lo, r, order):
                if J >= 2 and rem < scale or J >= 4000:
                    break
            g = self._coefficients(start, J + order)
            t = arb(0, _arb_q(r))
            total, tp = arb(0), arb(1)
            for j in range(order, J + order + 1):
                total += (j if order else 1) * g[j] * tp
                tp = tp * t
            return total + arb(0, rem), g0

    def cell(self, lo, hi, prec):

        y_lo, y_hi = lo * lo / 2, hi * hi / 2
        prec = max(prec, START_PREC + int(2.9 * float(y_hi)) + 64)
        while True:
            total, g0 = self.enclose(y_lo, y_hi, prec)
            if (total.is_finite() and not g0.rad() * 16 > abs(g0.mid())) or prec >= MAX_PREC:
                with _prec(prec):  # the ends at the working precision, not flint's default
                    return _ZERO, _ends(total), prec
            prec *= 2

    def root(self, z_guess):
        """[z_lo, z_hi] (dyadic) with G(z_lo) > 0 > G(z_hi) and dG/dy < 0 between: one simple root."""
        bits = ROOT_BITS - max(0, int(math.floor(math.log2(z_guess))))
        den = 1 << bits
        z_c = Fraction(math.floor(z_guess * den), den)
        for widen in range(8):
            half = Fraction(1 << widen, den)
            z_lo, z_hi = z_c - half, z_c + half
            y_lo, y_hi = z_lo * z_lo / 2, z_hi * z_hi / 2
            prec = START_PREC + int(2.9 * float(y_hi)) + 64
            lo_val = self.enclose(y_lo, y_lo, prec)[0]
            hi_val = self.enclose(y_hi, y_hi, prec)[0]
            deriv = self.enclose(y_lo, y_hi, prec, order=1)[0]
            if lo_val > 0 and hi_val < 0 and deriv < 0:
                with _prec(prec):
                    return z_lo, z_hi, {"d": self.d, "z_lo": qstr(z_lo), "z_hi": qstr(z_hi), "prec": prec,
                                        "gap_at_z_lo": ball_json(lo_val), "gap_at_z_hi": ball_json(hi_val),
                                        "derivative_dG_dy": ball_json(deriv)}
        raise NotCertified(f"rff_gap_iid_orf at d = {self.d}: no certified simple root near z = {z_guess}",
                           (self.d, z_lo, z_hi))


# ----------------------------------------------------------------------------- eq. binexp_main


class _BinexpEvaluator:
    r"""G_k(t) = 1 - J_k(-t) = 1 - E[(1 - t sin phi)^k] (I_k(0) - I_k(-t) over I_k(0)), t = -cos theta in (0, 1],
    in the Bernstein basis: :math:`\sum_{j\ge1}\binom kj(1-t)^{k-j}t^j(1-\mu_j)`, :math:`\mu_j = E[(1-\sin\phi)^j]`."""

    def __init__(self, d, K):
        from flint import arb

        self.d, self.K = d, K
        self.prec = START_PREC
        with _prec(START_PREC + K + 64):
            m = _moment_series(d, arb(-1), K)
            m[0] = m[0] - 1
            conv = _convolve(_exp_series(K), m, K)
            fac = arb(1)
            out = []
            for j in range(K + 1):
                if j:
                    fac = fac * j
                out.append(-fac * conv[j])  # 1 - mu_j
            out[0] = arb(0)  # identity: mu_0 = 1
            self.one_minus_mu = out
            from theory.certified import _sin_moment_first

            self.R1 = _sin_moment_first(d)

    def check_coefficients(self):
        return [j for j in range(1, self.K + 1) if not _positive(self.one_minus_mu[j])]

    def small(self, k):

        with _prec(self.prec):
            lead = k * self.R1
            t0 = Fraction(1, 2)
            for _ in range(200):
                t = _arb_q(t0)
                rem = ((1 + t) ** k - 1 - k * t) / t
                margin = lead - rem
                if _positive(margin):
                    return t0, {"d": self.d, "k": k, "v_hi": qstr(t0), "variable": "t", "leading_power": 1,
                                "leading": ball_json(lead), "majorant": "binomial",
                                "remainder": ball_json(rem), "margin": ball_json(margin),
                                "prec": self.prec}
                t0 /= 2
        raise NotCertified(f"binexp at d = {self.d}, k = {k}: no small-argument cell found")

    def cell(self, k, lo, hi, prec):

        with _prec(prec):
            t_lo, t_hi = _arb_q(lo), _arb_q(hi)
            terms = []
            for j in range(1, k + 1):  # t^j in [t_lo^j, t_hi^j], (1-t)^(k-j) in [(1-t_hi)^(k-j), (1-t_lo)^(k-j)]
                p1 = t_lo ** j * (1 - t_hi) ** (k - j)
                p2 = t_hi ** j * (1 - t_lo) ** (k - j)
                terms.append((math.comb(k, j) * self.one_minus_mu[j], p1, p2))
            return _ZERO, _interval_terms(terms), prec


# ----------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Spec:
    """A certifiable claim: its registry id, argument, full domain and inequalities (quantity names)."""

    claim_id: str
    kind: str  # "series", "rff", "binexp", "winners"
    variable: str
    variable_meaning: str
    quantities: tuple
    d_full: int
    s_full: Fraction | None
    d_min: int = 2
    fixed_d: int | None = None
    k_max: int | None = None
    all_d: dict | None = None
    notes: str = ""
    s_capped: bool = True  # whether --v-max caps the argument
    winner_kinds: tuple = ()  # "winners": the kinds of the map's winners this row certifies


_WINNERS_V = ("v = |x + y| (the map's x = y, |x| = |y| = v/2; every positive kind has the prefactor "
              "e^{-2(|x|^2+|y|^2)}, so the ordering holds for every x, y with the same |x + y|)")
_WINNERS_NOTES = ("the map of figures.winners (python -m figures --only winners) at its grid d in EFFORT['ds'], v in "
                  "EFFORT['vs'], m = d (m = 4d: the same scaled MSE); per map cell the winner's scaled MSE is proved "
                  "below every contestant listed in 'against' on [v_lo, v_hi], which contains the grid v; "
                  "'not_against' names the comparisons left to the map's points, with the reason (paper_checks."
                  "certify_winners)")

SPECS = {
    "cor3.3": Spec(
        "cor3.3", "series", "v", "v = |x + y|", ("prf_gap_orf_simplex",), 1024, Fraction(8),
        all_d={"statement": "rho_ORF - rho_SimRF > 0 for every d >= 2 and every v > 0",
               "argument": "the x^k coefficient (x = v^2/2) of rho_ORF - rho_SimRF is "
                           "a_k E[1 - (1 - sin(phi)/(d-1))^k] "
                           "with a_k = (d)_k/((d/2)_k k!) > 0 and 0 <= 1 - sin(phi)/(d-1) < 1 for phi in (0, pi): "
                           "every coefficient k >= 1 is positive (eq. binexp_main; a proof by hand, not by machine)",
               "checked": "the coefficients k = 1..k_max are proved > 0 by arb at every d of the domain (the "
                          "certifier by the angle moments, the replay by the printed eq. orf_conformity and "
                          "eq. simrf_conformity)"}),
    "cor4.4": Spec(
        "cor4.4", "series", "v", "v = |x + y|", ("prf_gap_iid_orf",), 1024, Fraction(8),
        all_d={"statement": "e^{v^2} - rho_ORF > 0 for every d >= 2 and every v > 0 (the corrected gap, with the 2^k "
                            "of eq. orf_conformity)",
               "argument": "the x^k coefficient (x = v^2/2) is (2^k - prod_{j<k} (d+j)/(d/2+j))/k!, and (d+j)/(d/2+j) "
                           "< 2 for j >= 1: positive for every k >= 2 (App. A.8; a proof by hand)",
               "checked": "the coefficients k = 2..k_max are proved > 0 by arb at every d of the domain (the "
                          "replay by App. A.8's product form)"}),
    "fig6.ordering": Spec(
        "fig6.ordering", "series", "v", "v = |x + y|", ("mse_ratio_gap_orf_simplex", "mse_ratio_gap_iid_orf"),
        64, Fraction(8), d_min=64, fixed_d=64,
        notes="m = d = 64; the ratio gaps are (m-1) G / (e^{v^2}(e^{v^2}-1)) with G the Cor 3.3 and Cor 4.4 gaps"),
    "beyond.hyperbolic_orthogonal": Spec(
        "beyond.hyperbolic_orthogonal", "series", "v", "v = |x + y|", ("hyperbolic_pair_gap_simplex_orf",), 1024,
        Fraction(8),
        all_d={"statement": "the hyperbolic pair term of SimRFs exceeds the ORF one for every d >= 2 and v > 0",
               "argument": "the x^k coefficient is a_k E[((1+cs)^k + (1-cs)^k)/2 - 1] = a_k sum_{p even >= 2} "
                           "C(k,p) c^p R_p >= 0, > 0 for k >= 2 (g(c) = (rho(c)+rho(-c))/2 is even and convex; "
                           "a proof by hand)",
               "checked": "the coefficients k = 2..k_max are proved > 0 by arb at every d of the domain"}),
    "thm3.4": Spec(
        "thm3.4", "series", "u", "u = v w, the common norm w of the equal-norm ensemble (Lemma A.2) times v",
        ("equal_norm_gap_orf_simplex",), 1024, Fraction(8),
        all_d={"statement": "for equal norms the simplex conformity f(2(d-2)/(d-1)) (Lemma A.2's bound, attained) is "
                            "below the orthogonal f(2), every d >= 2, u > 0",
               "argument": "f(s) = 0F1(;d/2;u^2 s/4) has positive Taylor coefficients in s, so it is increasing, and "
                           "2(d-2)/(d-1) < 2 (a proof by hand)",
               "checked": "the coefficients k = 1..k_max are proved > 0 by arb at every d of the domain"},
        notes="Lemma A.2's inequality between closed forms: the Jensen bound m(m-1) f(2(m-2)/(m-1)), m = d, attained "
              "by the simplex, against the orthogonal geometry with the same norms; the bound over all geometries "
              "is Jensen's inequality (by hand)"),
    "eq.binexp": Spec(
        "eq.binexp", "binexp", "t", "t = -cos(theta) in (0, 1]", ("binexp_gap",), 1024, Fraction(1), k_max=32,
        s_capped=False,
        all_d={"statement": "I_k(cos theta) < I_k(0) for every d >= 2, k >= 1 and cos theta in [-1, 0)",
               "argument": "0 <= 1 + sin(phi) cos(theta) < 1 for phi in (0, pi), so the integrands are ordered "
                           "pointwise (a proof by hand)",
               "checked": "1 - mu_j = E[1 - (1 - sin phi)^j] > 0 for j = 1..k_max by arb at every d of the domain"}),
    "sec4.2.zcrit": Spec(
        "sec4.2.zcrit", "rff", "z", "z = |x - y|", ("rff_gap_iid_orf",), 256, Fraction(16),
        notes="for d >= 3 the cells cover (0, min(z_lo, V)] and, where z_crit <= V, 'root' holds [z_lo, z_hi] with "
              "the gap positive at z_lo, negative at z_hi and strictly decreasing between: exactly one simple root, "
              "the first sign change z_crit; d = 2 has no root (the gap e^{-y}(e^{-y} - 1 + y) > 0) and is covered "
              "to V; the growth of z_crit with d is checked at points"),
    "beyond.winners_small_v": Spec(
        "beyond.winners_small_v", "winners", "v", _WINNERS_V, ("winners_gap",), 1024, None,
        winner_kinds=("hyperbolic",), notes=_WINNERS_NOTES),
    "beyond.winners_large_v": Spec(
        "beyond.winners_large_v", "winners", "v", _WINNERS_V, ("winners_gap",), 1024, None,
        winner_kinds=("oprf", "prf"), notes=_WINNERS_NOTES),
}
#: Names the command line accepts for several claims at once.
ALIASES = {"winners": ("beyond.winners_small_v", "beyond.winners_large_v")}

QUANTITY_TEXT = {name: (q.lhs, q.rhs) for name, q in SERIES.items()}
QUANTITY_TEXT["rff_gap_iid_orf"] = ("0", _RffEvaluator.q.rhs)
QUANTITY_TEXT["binexp_gap"] = ("0", "1 - E[(1 - t sin phi)^k] = (I_k(0) - I_k(-t))/I_k(0)")
QUANTITY_TEXT["winners_gap"] = ("0", "lower bound of the loser's scaled MSE - upper bound of the winner's")


def certifiable():
    """The claim ids that have certificates."""
    return list(SPECS)


def expand(claims):
    """Claim ids with the :data:`ALIASES` replaced by their claims (order kept, no repeats); ValueError naming an
    unknown one."""
    out = []
    for c in claims:
        if c not in SPECS and c not in ALIASES:
            raise ValueError(f"claim must be one of {', '.join(list(SPECS) + list(ALIASES))}, got {c!r}")
        for cid in ALIASES.get(c, (c,)):
            if cid not in out:
                out.append(cid)
    return out


def positive_fraction(text):
    """argparse ``type=`` of ``--v-max``: an exact positive rational ('8', '0.5', '3/2')."""
    import argparse

    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected an exact number such as '8', '0.5' or '3/2', got {text!r}") \
            from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


class _prec:
    """flint precision for a block, under the theory lock (theory.certified._Prec)."""

    def __init__(self, bits):
        from theory.certified import _Prec

        self.inner = _Prec(int(bits))

    def __enter__(self):
        self.inner.__enter__()

    def __exit__(self, *exc):
        self.inner.__exit__(*exc)


def _octaves(s0, end):
    """Initial partition of [s0, end]: dyadic octaves [s0, 2 s0], [2 s0, 4 s0], ..., the last ending at end."""
    out, lo = [], Fraction(s0)
    while lo < end:
        hi = min(2 * lo, Fraction(end))
        out.append((lo, hi))
        lo = hi
    return out


def _tile(cell_fn, d, start, end, label, stats):
    """Cells covering [start, end]: each decided by ``cell_fn(lo, hi, prec) -> (lhs, rhs)``, bisected when
    undecided; raises NotCertified when refuted or out of budget."""
    cells = []
    stack = list(reversed(_octaves(start, end)))
    min_width = Fraction(end) / (1 << MIN_WIDTH_BITS)
    count = 0
    while stack:
        lo, hi = stack.pop()
        prec = START_PREC
        while True:
            lhs, rhs, used = cell_fn(lo, hi, prec)
            count += 1
            if lhs[1] < rhs[0]:
                break
            if rhs[1] < lhs[0]:
                raise NotCertified(f"{label} at d = {d}: the reverse inequality holds on [{qstr(lo)}, {qstr(hi)}] "
                                   f"(G in [{_show(rhs[0])}, {_show(rhs[1])}])", (d, lo, hi), refuted=True)
            if hi - lo <= min_width and prec < MAX_PREC:
                prec *= 4
                continue
            break
        if not lhs[1] < rhs[0]:
            if hi - lo <= min_width or count > MAX_CELLS:
                raise NotCertified(f"{label} at d = {d}: undecided on [{qstr(lo)}, {qstr(hi)}] within the budget "
                                   f"({count} cells, width >= 2^-{MIN_WIDTH_BITS} of the domain, {prec} bits)",
                                   (d, lo, hi))
            mid = (lo + hi) / 2
            stack += [(mid, hi), (lo, mid)]
            continue
        stats["max_prec"] = max(stats["max_prec"], used)
        cells.append({"lo": lo, "hi": hi, "prec": used, "lhs": lhs, "rhs": rhs})
    stats["evaluations"] += count
    return cells


def _cell_json(index, d, c, k=None):
    out = {"inequality": index, "d": d}
    if k is not None:
        out["k"] = k
    out.update({"v_lo": qstr(c["lo"]), "v_hi": qstr(c["hi"]), "prec": c["prec"], "lhs": interval_json(*c["lhs"]),
                "rhs": interval_json(*c["rhs"])})
    return out


def _small_cell(index, d, s0, k=None):
    out = {"inequality": index, "d": d}
    if k is not None:
        out["k"] = k
    out.update({"v_lo": "0", "v_hi": qstr(s0), "method": "small_v"})
    return out


def _progress(message, quiet):
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def certify(claim_id, d_max=None, v_max=None, quiet=True):
    """Build the certificate of one claim (a JSON-ready dict) on d in [d_min, min(D, d_max)], argument in
    (0, min(V, v_max)]; None when the shrunk domain leaves the claim out (Fig. 6 under d_max < 64).

    Raises :class:`NotCertified` when a cell is refuted or stays undecided within the work budget."""
    from paper_checks.registry import CLAIMS_BY_ID

    _flint()  # a clear ImportError without python-flint
    if claim_id not in SPECS:
        raise ValueError(f"claim must be one of {', '.join(SPECS)}, got {claim_id!r}")
    spec = SPECS[claim_id]
    if v_max is not None and not Fraction(v_max) > 0:
        raise ValueError(f"v_max must be > 0, got {v_max!r}")
    if spec.kind == "winners":
        return _winners_certificate(spec, d_max, v_max, quiet)
    D = spec.d_full if d_max is None else min(spec.d_full, int(d_max))
    S = spec.s_full
    if v_max is not None and spec.s_capped:
        S = min(S, Fraction(v_max))
    if spec.fixed_d is not None and D < spec.fixed_d or D < spec.d_min:
        return None
    if S <= 0:
        raise ValueError(f"v_max must be > 0, got {v_max!r}")
    ds = [spec.fixed_d] if spec.fixed_d is not None else list(range(spec.d_min, D + 1))
    started, cpu = time.perf_counter(), time.process_time()
    stats = {"max_prec": START_PREC, "evaluations": 0, "max_terms": 0}
    cells, small, roots, coef_checks = [], [], [], []
    for d in ds:
        if d == ds[0] or d % 64 == 0:
            _progress(f"certify {claim_id}: d = {d} of {ds[-1]}", quiet)
        for index, name in enumerate(spec.quantities):
            if spec.kind == "series":
                ev = _SeriesEvaluator(SERIES[name], d, S)
                stats["max_terms"] = max(stats["max_terms"], ev.K)
                stats["max_prec"] = max(stats["max_prec"], ev.coef_prec)
                if spec.all_d is not None:
                    bad = ev.check_coefficients()
                    if bad:
                        raise NotCertified(f"{claim_id} at d = {d}: coefficient g_{bad[0]} not proved > 0",
                                           (d, Fraction(0), S), refuted=bool(ev.coeffs[bad[0]] < 0))
                    coef_checks.append({"d": d, "k_max": ev.K})
                s0, entry = ev.small(S)
                small.append({"inequality": index, **entry})
                cells.append(_small_cell(index, d, s0))
                cells += [_cell_json(index, d, c) for c in _tile(ev.cell, d, s0, S, name, stats)]
            elif spec.kind == "rff":
                ev = _RffEvaluator(d, S)
                end, root = S, None
                if d >= 3:
                    z_guess = _z_crit_guess(d)
                    if z_guess < S:
                        z_lo, z_hi, root = ev.root(z_guess)
                        end = z_lo
                        stats["max_prec"] = max(stats["max_prec"], root["prec"])
                if root is not None:
                    roots.append(root)
                s0, entry = ev.small(end)
                small.append({"inequality": index, **entry})
                cells.append(_small_cell(index, d, s0))
                cells += [_cell_json(index, d, c) for c in _tile(ev.cell, d, s0, end, name, stats)]
            else:  # binexp
                ev = _BinexpEvaluator(d, spec.k_max)
                bad = ev.check_coefficients()
                if bad:
                    raise NotCertified(f"{claim_id} at d = {d}: 1 - mu_{bad[0]} not proved > 0", (d, 0, 1))
                coef_checks.append({"d": d, "k_max": spec.k_max})
                for k in range(1, spec.k_max + 1):
                    t0, entry = ev.small(k)
                    small.append({"inequality": index, **entry})
                    cells.append(_small_cell(index, d, t0, k))
                    fn = (lambda kk: lambda lo, hi, prec: ev.cell(kk, lo, hi, prec))(k)
                    cells += [_cell_json(index, d, c, k) for c in _tile(fn, d, t0, S, f"{name} (k = {k})", stats)]
    claim = CLAIMS_BY_ID[claim_id]
    domain = {"d_min": ds[0], "d_max": ds[-1], "variable": spec.variable, "meaning": spec.variable_meaning,
              "v_min_exclusive": "0", "v_max": qstr(S)}
    if spec.k_max is not None:
        domain.update({"k_min": 1, "k_max": spec.k_max})
    cert = {
        "format": FORMAT,
        "claim": claim.ref,
        "claim_id": claim_id,
        "statement": claim.claim,
        "domain": domain,
        "inequalities": [{"index": i, "quantity": n, "lhs": QUANTITY_TEXT[n][0], "rhs": QUANTITY_TEXT[n][1]}
                         for i, n in enumerate(spec.quantities)],
        "cells": cells,
        "small_v": {
            "statement": ("G(X) = sum_{k >= L} g_k X^k with g_k = 0 exactly for k < L and |g_k| <= C alpha^k / k!; "
                          "for 0 < X <= X_0: G(X) >= X^L (g_L - R), R = C alpha^{L+1} X_0 / ((L+1)! (1 - alpha X_0 "
                          "/ (L+2))); binexp: |g_p| <= C(k, p), R = ((1 + t_0)^k - 1 - k t_0) / t_0"),
            "entries": small},
        "all_d": None if spec.all_d is None else {**spec.all_d, "coefficients": coef_checks},
        "notes": spec.notes,
    }
    if spec.kind == "rff":
        cert["root"] = roots
    import flint

    cert["work"] = {"cells": sum(1 for c in cells if "method" not in c), "small_v_cells": len(small),
                    "evaluations": stats["evaluations"], "max_prec_bits": stats["max_prec"],
                    "max_terms": stats["max_terms"], "wall_seconds": round(time.perf_counter() - started, 2),
                    "cpu_seconds": round(time.process_time() - cpu, 2),
                    "python_flint": flint.__version__}
    return cert


def _winners_certificate(spec, d_max, v_max, quiet, winners=None):
    """:func:`certify` for a row of the winners map (:mod:`paper_checks.certify_winners`); ``winners`` replaces
    the map's winners ({(d, v string): contestant}, for the tests' wrong winners)."""
    from paper_checks import certify_winners as cw
    from paper_checks.registry import CLAIMS_BY_ID

    got = cw.certify_winners(spec, d_max, v_max, quiet, winners)
    if got is None:
        return None
    claim = CLAIMS_BY_ID[spec.claim_id]
    ds = sorted({e["d"] for e in got["entries"]})
    stats = got["stats"]
    import flint

    return {
        "format": FORMAT,
        "claim": claim.ref,
        "claim_id": spec.claim_id,
        "statement": claim.claim,
        "domain": {"d_min": ds[0], "d_max": ds[-1], "ds": got["ds"], "vs": got["vs"], "variable": "v",
                   "meaning": spec.variable_meaning, "v_max": None if v_max is None else qstr(Fraction(v_max)),
                   "m": "m = d (m = 4d has the same scaled MSE: the same coupled pairs per feature)"},
        "quantity": "S = m e^{2(|x|^2+|y|^2)} MSE (figures.winners.scaled_mse), Gaussian kernel, m = d; X = v^2/2; "
                    "S = sum_c weight_c * component_c(X) - gain * D(v)",
        "components": cw.COMPONENTS,
        "gain": "D(v) = e^{2v^2}(1 - e^{-t}), t = -8A v^2/(1-8A) - (d/2) log1p(16A^2/(1-8A)) at "
                "A = A* = -s/(1 - 2s + sqrt((2s+1)^2 + 8s)), s = v^2/d; nondecreasing in v",
        "contestants": {n: cw.bounds(n, ds[0])[2] for n in cw.CONTESTANTS},
        "lemmas": list(cw.LEMMAS),
        "inequalities": got["inequalities"],
        "map": got["entries"],
        "cells": got["cells"],
        "small_v": {"statement": "none: every interval lies inside the grid's range [v_0 (v_0/v_1)^(1/2), v_n "
                                 "(v_n/v_(n-1))^(1/2)], away from 0", "entries": []},
        "all_d": None,
        "notes": spec.notes,
        "work": {"cells": len(got["cells"]), "map_cells": len(got["entries"]), "small_v_cells": 0,
                 "evaluations": stats["evaluations"], "max_prec_bits": stats["max_prec"],
                 "max_terms": stats["max_terms"], "wall_seconds": round(time.perf_counter() - got["started"], 2),
                 "cpu_seconds": round(time.process_time() - got["cpu"], 2), "python_flint": flint.__version__},
    }


def _z_crit_guess(d):
    """z_crit(d) from theory.z_crit (a guide only: the certificate checks the root it brackets)."""
    import theory
    from mpmath import mp

    from theory.errors import NoConvergence

    try:
        with mp.workdps(20):
            return float(theory.z_crit(d))
    except NoConvergence as exc:
        raise NotCertified(f"rff_gap_iid_orf at d = {d}: no guide to z_crit ({exc})") from exc


def write(cert, folder):
    """Write ``cert`` as ``folder/<claim id>.json`` (atomically; compact JSON); returns the path."""
    from pathlib import Path

    from theory.cli import atomic_write

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cert['claim_id']}.json"
    text = json.dumps(cert, separators=(",", ":"))
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))
    return path


def run(claims, out, d_max=None, v_max=None, quiet=False):
    """The ``--certify`` command: certify ``claims`` (all when empty) into ``out``; returns the exit status
    (0 every certificate written, 1 one could not be completed)."""
    status = 0
    for claim_id in expand(claims) or certifiable():
        t0 = time.perf_counter()
        try:
            cert = certify(claim_id, d_max, v_max, quiet=quiet)
        except NotCertified as exc:
            print(f"{claim_id}: NOT CERTIFIED: {exc}", file=sys.stderr)
            status = 1
            continue
        if cert is None:
            spec = SPECS[claim_id]
            if spec.kind == "winners":
                print(f"{claim_id}: skipped (no map cell with a winner of kind {' or '.join(spec.winner_kinds)} "
                      f"within --d-max {d_max}, --v-max {v_max})")
            else:
                print(f"{claim_id}: skipped (its domain d = {spec.fixed_d or spec.d_min} lies outside --d-max "
                      f"{d_max})")
            continue
        path = write(cert, out)
        w, dom = cert["work"], cert["domain"]
        if "map" in cert:
            print(f"{claim_id}: proved at {w['map_cells']} map cells (d in {dom['ds']}, grid v up to "
                  f"{dom['vs'][-1]}), each on an interval around its grid v: {w['cells']} cells, "
                  f"{w['max_prec_bits']} bits at most, {time.perf_counter() - t0:.1f} s ({w['cpu_seconds']:.1f} s "
                  f"of CPU) -> {path}")
            continue
        print(f"{claim_id}: proved on d in [{dom['d_min']}, {dom['d_max']}], {dom['variable']} in (0, {dom['v_max']}]"
              f"{' (capped at z_lo)' if cert.get('root') else ''}: {w['cells']} cells + {w['small_v_cells']} "
              f"small-argument cells, {w['max_prec_bits']} bits at most, {time.perf_counter() - t0:.1f} s "
              f"({w['cpu_seconds']:.1f} s of CPU) -> {path}")
    return status
