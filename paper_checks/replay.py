r"""Replay certificates from their JSON alone: ``python -m paper_checks.replay DIR [FILE ...]``.

What the checker recomputes and checks: :ref:`guide-paper_checks.replay` (``docs/guide/certificates.rst``).
"""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from pathlib import Path

__all__ = ["FORMAT", "ReplayError", "main", "replay", "replay_file"]

#: Version tag of the format this checker reads (docs/guide/certificates.rst).
FORMAT = "simplex-rf certificate 1"
#: Precision (bits) this checker starts from, and the most it tries on an undecided cell.
BASE_PREC = 128
MAX_PREC = 1 << 14


class ReplayError(Exception):
    """A certificate does not replay (the message says where and why)."""


def _flint():
    try:
        import flint
    except ImportError as exc:  # pragma: no cover
        raise ReplayError("the replay needs python-flint (pip install python-flint)") from exc
    return flint


class _Prec:
    def __init__(self, bits):
        self.bits = int(bits)

    def __enter__(self):
        flint = _flint()
        self.old, flint.ctx.prec = flint.ctx.prec, self.bits

    def __exit__(self, *exc):
        _flint().ctx.prec = self.old


def _frac(text, what):
    if not isinstance(text, str):
        raise ReplayError(f"{what} must be a string that fractions.Fraction parses, got {text!r}")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError) as exc:
        raise ReplayError(f"{what}: {text!r} is not an exact decimal or fraction") from exc


def _q(q):
    from flint import arb

    return arb(q.numerator) / q.denominator


def _recorded(obj, what):
    """The exact interval [mid - rad, mid + rad] (Fractions) of a recorded {"mid", "rad"}."""
    if not isinstance(obj, dict) or set(obj) != {"mid", "rad"}:
        raise ReplayError(f"{what} must be {{'mid': ..., 'rad': ...}}, got {obj!r}")
    mid, rad = _frac(obj["mid"], what + ".mid"), _frac(obj["rad"], what + ".rad")
    if rad < 0:
        raise ReplayError(f"{what}: negative radius")
    return mid - rad, mid + rad


def _show(q):
    """A short decimal of an exact Fraction (for messages; no float overflow)."""
    with _Prec(64):
        return _q(q).str(4, radius=False)


def _recorded_gap(c, cw):
    """The recorded enclosure of a cell's gap G (its "rhs"), after checking that the cell records 0 < G
    ("lhs" exactly 0, "rhs" above 0)."""
    lhs = _recorded(_need(c, "lhs", dict, cw), cw + " lhs")
    rhs = _recorded(_need(c, "rhs", dict, cw), cw + " rhs")
    if lhs != (0, 0) or not rhs[0] > 0:
        raise ReplayError(f"{cw}: the recorded sides do not show 0 < G (lhs {c['lhs']}, rhs {c['rhs']})")
    return rhs


def _check_meets(ball, rhs, c, cw):
    """The recomputed enclosure ``ball`` of a cell's gap must meet the recorded one ``rhs``."""
    if ball[0] > rhs[1] or ball[1] < rhs[0]:
        raise ReplayError(f"{cw}: the recorded enclosure {c['rhs']} misses the recomputed one "
                          f"[{_show(ball[0])}, {_show(ball[1])}]")


def _exact(point):
    man, exp = point.man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def _ends(ball):
    """Exact ends of an arb ball (ReplayError if it is not finite)."""
    if not ball.is_finite():
        raise ReplayError(f"an enclosure is not finite ({ball})")
    return _exact(ball.lower()), _exact(ball.upper())


def _sum_interval(terms):
    """Exact ends of sum g [p1, p2] over the corners."""
    from flint import arb

    lo, hi = arb(0), arb(0)
    for g, p1, p2 in terms:
        a, b = g * p1, g * p2
        lo += a.lower().min(b.lower())
        hi += a.upper().max(b.upper())
    return _exact(lo.lower()), _exact(hi.upper())


# ----------------------------------------------------------------------------- coefficient routes


def _printed_angle_coefficients(d, c, K, parity=None):
    r"""x^k coefficients (x = v^2/2) of rho at cos theta = c by the printed form of eq. simrf_conformity
    (general c): sqrt(pi)/(Gamma(d/2) 2^{d-1}) Gamma(k+d)/Gamma(k+d/2) sum_p c^p Gamma((d+p)/2)/Gamma((d+p+1)/2)
    / ((k-p)! p!), the p restricted to one parity when asked."""
    from flint import arb, arb_poly

    inner = []
    cp, pf = arb(1), arb(1)
    gam = [(arb(d) / 2).gamma(), (arb(d + 1) / 2).gamma()]  # Gamma((d+p)/2), p = 0, 1; then Gamma(x+1) = x Gamma(x)
    for p in range(K + 2):
        if p >= 2:
            gam.append(gam[p - 2] * (arb(d + p - 2) / 2))
    for p in range(K + 1):
        if parity is None or p % 2 == parity:
            inner.append(cp * gam[p] / gam[p + 1] / pf)
        else:
            inner.append(arb(0))
        cp, pf = cp * c, pf * (p + 1)
    inv_fact = []
    f = arb(1)
    for k in range(K + 1):
        inv_fact.append(1 / f)
        f = f * (k + 1)
    conv = (arb_poly(inner) * arb_poly(inv_fact)).coeffs()
    pre = arb.pi().sqrt() / ((arb(d) / 2).gamma() * arb(2) ** (d - 1))
    return [pre * g * conv[k] for k, g in enumerate(_gamma_ratios(d, K))]


def _gamma_ratios(d, K):
    """Gamma(k+d)/Gamma(k+d/2) for k = 0..K (Gamma at k = 0, then Gamma(x+1) = x Gamma(x))."""
    from flint import arb

    out, r = [], arb(d).gamma() / (arb(d) / 2).gamma()
    for k in range(K + 1):
        out.append(r)
        r = r * (k + d) / (arb(k) + arb(d) / 2)
    return out


def _printed_orf_coefficients(d, K):
    """eq. orf_conformity: Gamma(d/2)/Gamma(d) Gamma(k+d)/Gamma(k+d/2)/k!."""
    from flint import arb

    pre = (arb(d) / 2).gamma() / arb(d).gamma()
    return [pre * g / arb.fac_ui(k) for k, g in enumerate(_gamma_ratios(d, K))]


def _coef_cor33(d, K):
    from flint import arb

    orf = _printed_orf_coefficients(d, K)
    sim = _printed_angle_coefficients(d, arb(-1) / (d - 1), K)
    return [o - s for o, s in zip(orf, sim)]


def _coef_cor44(d, K):
    """App. A.8: the x^k coefficient 2^k/k! (1 - prod_{j<k} (d+j)/(d+2j))."""
    from flint import arb

    out, prod = [], arb(1)
    for k in range(K + 1):
        out.append(arb(2) ** k / arb.fac_ui(k) * (1 - prod))
        prod = prod * (d + k) / (d + 2 * k)
    return out


def _coef_hyperbolic(d, K):
    from flint import arb

    orf = _printed_orf_coefficients(d, K)
    even = _printed_angle_coefficients(d, arb(-1) / (d - 1), K, parity=0)
    return [e - o for e, o in zip(even, orf)]


def _coef_equal_norms(d, K):
    """0F1(;d/2; u^2 s/4) at s = 2 minus s = 2(d-2)/(d-1): Gamma(d/2)/(Gamma(k+d/2) k!) (2^k - s^k), X = u^2/4."""
    from flint import arb

    s = arb(2 * (d - 2)) / (d - 1)
    g = (arb(d) / 2).gamma()
    return [g / (arb(k) + arb(d) / 2).gamma() / arb.fac_ui(k) * (arb(2) ** k - s ** k) for k in range(K + 1)]


#: quantity -> (coefficient route, X = scale s^2, L, majorant C, alpha, ratio): this checker's own table.
SERIES = {
    "prf_gap_orf_simplex": (_coef_cor33, Fraction(1, 2), 1, 2, 2, False),
    "prf_gap_iid_orf": (_coef_cor44, Fraction(1, 2), 2, 2, 2, False),
    "mse_ratio_gap_orf_simplex": (_coef_cor33, Fraction(1, 2), 1, 2, 2, True),
    "mse_ratio_gap_iid_orf": (_coef_cor44, Fraction(1, 2), 2, 2, 2, True),
    "hyperbolic_pair_gap_simplex_orf": (_coef_hyperbolic, Fraction(1, 2), 2, 2, 4, False),
    "equal_norm_gap_orf_simplex": (_coef_equal_norms, Fraction(1, 4), 1, 1, 2, False),
}
#: The RFF gap's small-argument series: Cor 4.4's coefficients at -y (same L, C, alpha).
RFF_SMALL = (_coef_cor44, Fraction(1, 2), 2, 2, 2)


class _Series:
    """Coefficients of one series quantity at one d, enough for X up to x_max."""

    def __init__(self, route, scale, L, C, alpha, d, s_max):
        from flint import arb

        self.scale, self.L, self.C, self.alpha, self.d = scale, L, C, alpha, d
        x_max = float(scale * s_max * s_max)
        self.K = int(2 * math.e * alpha * x_max) + 72
        prec = BASE_PREC + int(self.K * math.log2(1 + 1 / (d - 1))) + 96 + 2 * d.bit_length()
        with _Prec(prec):
            self.coeffs = route(d, self.K)
        for k in range(L):
            if not self.coeffs[k].contains(0):
                raise ReplayError(f"d = {d}: the coefficient g_{k} = {self.coeffs[k]} should vanish identically")
            self.coeffs[k] = arb(0)

    def leading(self):
        return self.coeffs[self.L]

    def remainder(self, X0):
        from flint import arb

        aX = self.alpha * X0
        if not aX < self.L + 2:
            return None
        return self.C * arb(self.alpha) ** (self.L + 1) * X0 / arb.fac_ui(self.L + 1) / (1 - aX / (self.L + 2))

    def enclose(self, X_lo, X_hi, ratio):
        from flint import arb

        aX = self.alpha * X_hi
        if not aX < self.K + 2:
            raise ReplayError("the cell lies beyond the series' range")
        s1, s2 = arb(0), arb(0)
        p1, p2, m = arb(1), arb(1), arb(self.C)  # X_lo^k, X_hi^k and the majorant term C (alpha X_hi)^k/k!
        tail = None
        for k, g in enumerate(self.coeffs):
            if k:
                p1, p2, m = p1 * X_lo, p2 * X_hi, m * aX / k
            a, b = g * p1, g * p2
            s1 += a.lower().min(b.lower())
            s2 += a.upper().max(b.upper())
            if k % 16 == 15 and k + 4 > 2 * aX:
                bound = m * aX / (k + 1) / (1 - aX / (k + 2))  # sum of the majorant after k
                size = s1.lower() if s1 > 0 else (-s2).lower() if s2 < 0 else arb(0)  # a lower bound of |sum|
                if bound < size * arb(2) ** -100:
                    tail = bound
                    break
        if tail is None:
            tail = m * aX / (self.K + 1) / (1 - aX / (self.K + 2))
        tail = _exact(tail.upper())
        lo, hi = _exact(s1.lower()) - tail, _exact(s2.upper()) + tail
        if ratio:  # (d - 1) G / (e^w (e^w - 1)), w = v^2 = 2X: both factors increasing in w
            w1, w2 = 2 * X_lo, 2 * X_hi
            v1, v2 = w1.exp() * w1.expm1(), w2.exp() * w2.expm1()
            if not v1 > 0:
                raise ReplayError("the variance factor is not proved positive")
            a, b = _exact(v1.lower()), _exact(v2.upper())
            c = [(self.d - 1) * x / y for x in (lo, hi) for y in (a, b)]
            lo, hi = min(c), max(c)
        return lo, hi


# ----------------------------------------------------------------------------- RFF gap


def _direct_1f1_neg(a, b, y):
    """M(a, b, -y) for a <= 2b, y > 0 by its power series; tail |t_K| q/(1-q), q = 2y/(K+1) (ratios <= 2y/(k+1))."""
    from flint import arb

    total, term, k = arb(0), arb(1), 0
    tiny = arb(2) ** (-2 * _flint().ctx.prec)
    while True:
        total += term
        term = term * (a + k) / (b + k) * (-y) / (k + 1)
        k += 1
        if k + 1 > 4 * y:
            q = 2 * y / (k + 1)
            bound = abs(term) / (1 - q)
            if bound < tiny:
                return total + arb(0, bound.upper())
        if k > 10 ** 6:
            raise ReplayError("a 1F1 series did not terminate")


def _rff_model(d, y_lo, y_hi, order):
    """Ball of G = e^{-2y} - M(d, d/2, -y) (order 0) or dG/dy (order 1) on [y_lo, y_hi] (exact fractions)."""
    from flint import arb

    y_m, r = (y_lo + y_hi) / 2, (y_hi - y_lo) / 2
    y = _q(y_m)
    a, b, u = arb(d), arb(d) / 2, -y
    F0 = _direct_1f1_neg(a, b, y)
    F1 = a / b * _direct_1f1_neg(a + 1, b + 1, y)
    e2 = (-2 * y).exp()

    def coefficients(J):
        S = [F0, F1]
        for j in range(J - 1):
            S.append(((a + j) * S[j] - (b + j - u) * (j + 1) * S[j + 1]) / (u * (j + 1) * (j + 2)))
        out, fac = [], arb(1)
        for j in range(J + 1):
            if j:
                fac = fac * (-2) / j
            out.append(e2 * fac - (S[j] if j % 2 == 0 else -S[j]))
        return out

    if r == 0:
        return _ends(coefficients(1)[0])
    g0 = coefficients(1)[0]
    target = abs(g0).upper() * arb(2) ** -48
    rr, yl = _q(r), _q(y_lo)
    e2lo = (-2 * yl).exp()
    J, power = 0, rr  # r^{J+1}/(J+1)!
    two_n, ratio = arb(2) ** (1 + order), arb(1)
    for k in range(1 + order):
        ratio = ratio * (d + k) / (b + k)
    while True:
        rem = ((two_n * e2lo + ratio) * power).upper()  # Bessel bound: |Q^{(n)}| <= (d)_n/(d/2)_n
        if (J >= 2 and rem < target) or J >= 6000:
            break
        n = J + 1 + order
        two_n, ratio = two_n * 2, ratio * (d + n) / (b + n)
        J += 1
        power = power * rr / (J + 1)
    g = coefficients(J + order)
    t = arb(0, rr)
    total, tp = arb(0), arb(1)
    for j in range(order, J + order + 1):
        total += (j if order else 1) * g[j] * tp
        tp = tp * t
    return _ends(total + arb(0, rem))


# ----------------------------------------------------------------------------- binexp


class _Binexp:
    def __init__(self, d, K):
        from flint import arb

        with _Prec(BASE_PREC + 2 * K + 96):
            half_g = (arb(d) / 2).gamma()
            g1 = (arb(d + 1) / 2).gamma()
            R = [(arb(d + i) / 2).gamma() * g1 / (half_g * (arb(d + i + 1) / 2).gamma()) for i in range(K + 1)]
            self.R1 = R[1]
            self.one_minus_mu = [arb(0)] + [-sum((arb(math.comb(j, i)) * (-1) ** i * R[i] for i in range(1, j + 1)),
                                                 arb(0)) for j in range(1, K + 1)]

    def enclose(self, k, t_lo, t_hi):
        terms = []
        for j in range(1, k + 1):
            p1 = t_lo ** j * (1 - t_hi) ** (k - j)
            p2 = t_hi ** j * (1 - t_lo) ** (k - j)
            terms.append((math.comb(k, j) * self.one_minus_mu[j], p1, p2))
        return _sum_interval(terms)


# ----------------------------------------------------------------------------- the checker


def _need(obj, key, kind, what):
    if not isinstance(obj, dict) or key not in obj:
        raise ReplayError(f"{what}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ReplayError(f"{what}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _decide(evaluate, prec0, what):
    """evaluate() -> exact ends (lo, hi); returned once lo > 0 (the precision raised up to MAX_PREC)."""
    prec = max(int(prec0), BASE_PREC)
    while True:
        with _Prec(prec):
            lo, hi = evaluate()
        if lo > 0:
            return lo, hi
        if prec >= MAX_PREC:
            raise ReplayError(f"{what}: the recomputed enclosure [{_show(lo)}, {_show(hi)}] does not prove "
                              "the inequality")
        prec *= 2


def replay(cert):
    """Check one certificate (a parsed JSON dict); returns a summary dict, raises ReplayError."""
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise ReplayError(f"not a certificate of format {FORMAT!r}")
    _need(cert, "claim", str, "certificate")
    if any(isinstance(i, dict) and i.get("quantity") == "winners_gap" for i in cert.get("inequalities") or []):
        from paper_checks.replay_winners import replay_winners

        return replay_winners(cert)
    dom = _need(cert, "domain", dict, "certificate")
    d_min, d_max = _need(dom, "d_min", int, "domain"), _need(dom, "d_max", int, "domain")
    v_max = _frac(_need(dom, "v_max", str, "domain"), "domain.v_max")
    if not (2 <= d_min <= d_max) or v_max <= 0:
        raise ReplayError(f"domain: d in [{d_min}, {d_max}], v_max {v_max} is not a domain")
    ks = [None]
    if "k_max" in dom:
        ks = list(range(_need(dom, "k_min", int, "domain"), _need(dom, "k_max", int, "domain") + 1))
    quantities = []
    for i, ineq in enumerate(_need(cert, "inequalities", list, "certificate")):
        name = _need(ineq, "quantity", str, f"inequality {i}")
        if _need(ineq, "index", int, f"inequality {i}") != i:
            raise ReplayError(f"inequality {i}: index out of order")
        if name not in SERIES and name not in ("rff_gap_iid_orf", "binexp_gap"):
            raise ReplayError(f"inequality {i}: unknown quantity {name!r}")
        if name == "binexp_gap" and ks == [None]:
            raise ReplayError("binexp_gap needs k_min/k_max in the domain")
        quantities.append(name)
    if not quantities:
        raise ReplayError("no inequality")
    roots = {}
    for entry in cert.get("root") or []:
        d = _need(entry, "d", int, "root")
        roots[d] = (_frac(_need(entry, "z_lo", str, "root"), "root.z_lo"),
                    _frac(_need(entry, "z_hi", str, "root"), "root.z_hi"), entry)
    small = {}
    for entry in _need(_need(cert, "small_v", dict, "certificate"), "entries", list, "small_v"):
        key = (_need(entry, "inequality", int, "small_v"), _need(entry, "d", int, "small_v"), entry.get("k"))
        small[key] = entry
    groups = {}
    for n, c in enumerate(_need(cert, "cells", list, "certificate")):
        key = (_need(c, "inequality", int, f"cell {n}"), _need(c, "d", int, f"cell {n}"), c.get("k"))
        lo, hi = _frac(_need(c, "v_lo", str, f"cell {n}"), f"cell {n}.v_lo"), _frac(
            _need(c, "v_hi", str, f"cell {n}"), f"cell {n}.v_hi")
        groups.setdefault(key, []).append((lo, hi, c))
    expected = {(i, d, k) for i in range(len(quantities)) for d in range(d_min, d_max + 1) for k in ks}
    if set(groups) != expected:
        missing = sorted(expected - set(groups), key=str)[:3]
        extra = sorted(set(groups) - expected, key=str)[:3]
        raise ReplayError(f"the cells do not cover the domain's (inequality, d, k): missing {missing}, extra {extra}")
    n_cells, cache = 0, {}
    for (i, d, k), cells in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        name = quantities[i]
        where = f"inequality {i} ({name}), d = {d}" + (f", k = {k}" if k is not None else "")
        end = v_max
        if name == "rff_gap_iid_orf" and d in roots:
            end = roots[d][0]
            if not (0 < end < roots[d][1]) or end > v_max:
                raise ReplayError(f"{where}: root enclosure [{end}, {roots[d][1]}] is not inside (0, v_max]")
        cells.sort(key=lambda t: t[0])
        prev = Fraction(0)
        for lo, hi, _ in cells:
            if lo != prev or not hi > lo:
                raise ReplayError(f"{where}: the cells do not tile: [{lo}, {hi}] follows {prev}")
            prev = hi
        if prev != end:
            raise ReplayError(f"{where}: the cells end at {prev}, not at {end}")
        first = cells[0]
        if first[2].get("method") != "small_v" or any(c.get("method") for _, _, c in cells[1:]):
            raise ReplayError(f"{where}: the first cell (and only it) must be the small-argument cell")
        entry = small.get((i, d, k))
        if entry is None or _frac(entry.get("v_hi"), f"{where} small_v.v_hi") != first[1]:
            raise ReplayError(f"{where}: no small-argument certificate for (0, {first[1]}]")
        # route for this (quantity, d)
        if name in SERIES:
            route, scale, L, C, alpha, ratio = SERIES[name]
            if (name, d) not in cache:
                cache[name, d] = _Series(route, scale, L, C, alpha, d, v_max)
            series = cache[name, d]
        elif name == "rff_gap_iid_orf":
            route, scale, L, C, alpha = RFF_SMALL
            series = _Series(route, scale, L, C, alpha, d, min(v_max, Fraction(1)))
        else:
            series = None
            if (name, d) not in cache:
                cache[name, d] = _Binexp(d, ks[-1])
            binexp = cache[name, d]
        # the small-argument cell
        s0 = first[1]
        with _Prec(BASE_PREC + 64):
            if series is not None:
                X0 = _q(series.scale * s0 * s0)
                lead, rem = series.leading(), series.remainder(X0)
                if rem is None or not lead - rem > 0:
                    raise ReplayError(f"{where}: small-argument cell (0, {s0}]: g_L - R = {lead} - {rem} not > 0")
            else:
                t0 = _q(s0)
                lead, rem = k * binexp.R1, ((1 + t0) ** k - 1 - k * t0) / t0
                if not lead - rem > 0:
                    raise ReplayError(f"{where}: small-argument cell (0, {s0}]: k R_1 - R = {lead} - {rem} not > 0")
            rec = _recorded(_need(entry, "leading", dict, where), where + " small_v.leading")
            got = _ends(lead)
            if got[0] > rec[1] or got[1] < rec[0]:
                raise ReplayError(f"{where}: the recorded leading coefficient misses the recomputed {lead}")
        # the other cells
        for lo, hi, c in cells[1:]:
            n_cells += 1
            cw = f"{where}, cell [{lo}, {hi}]"
            rhs = _recorded_gap(c, cw)
            if series is not None and name != "rff_gap_iid_orf":
                ball = _decide(lambda: series.enclose(_q(series.scale * lo * lo), _q(series.scale * hi * hi), ratio),
                               c.get("prec", BASE_PREC), cw)
            elif name == "rff_gap_iid_orf":
                ball = _decide(lambda: _rff_model(d, lo * lo / 2, hi * hi / 2, 0),
                               BASE_PREC + 5.8 * float(hi * hi / 2) + 64, cw)
            else:
                ball = _decide(lambda: binexp.enclose(k, _q(lo), _q(hi)), c.get("prec", BASE_PREC), cw)
            _check_meets(ball, rhs, c, cw)
        # the root enclosure
        if name == "rff_gap_iid_orf" and d in roots:
            z_lo, z_hi, _entry = roots[d]
            y_lo, y_hi = z_lo * z_lo / 2, z_hi * z_hi / 2
            with _Prec(BASE_PREC + 5.8 * float(y_hi) + 64):
                at_lo, at_hi = _rff_model(d, y_lo, y_lo, 0), _rff_model(d, y_hi, y_hi, 0)
                slope = _rff_model(d, y_lo, y_hi, 1)
                if not (at_lo[0] > 0 and at_hi[1] < 0 and slope[1] < 0):
                    raise ReplayError(f"d = {d}: [{z_lo}, {z_hi}] is not a certified simple root")
    # the all-d coefficient checks
    all_d = cert.get("all_d")
    if all_d is not None:
        entries = {_need(e, "d", int, "all_d"): _need(e, "k_max", int, "all_d")
                   for e in _need(all_d, "coefficients", list, "all_d")}
        if set(entries) != set(range(d_min, d_max + 1)):
            raise ReplayError("all_d: the coefficient checks do not cover every d of the domain")
        for d, k_max in entries.items():
            for i, name in enumerate(quantities):
                if name in SERIES:
                    L = SERIES[name][2]
                    series = cache.get((name, d))
                    if series is None or series.K < k_max:
                        route, scale, L, C, alpha, _ = SERIES[name]
                        series = _Series(route, scale, L, C, alpha, d, v_max)
                        if series.K < k_max:
                            raise ReplayError(f"all_d: k_max = {k_max} beyond what the domain needs ({series.K})")
                    bad = [k for k in range(L, k_max + 1) if not series.coeffs[k] > 0]
                else:
                    b = cache.get((name, d))
                    if b is None or len(b.one_minus_mu) <= k_max:
                        b = _Binexp(d, k_max)
                    bad = [j for j in range(1, k_max + 1) if not b.one_minus_mu[j] > 0]
                if bad:
                    raise ReplayError(f"all_d: d = {d}: coefficient {bad[0]} of {name} is not proved > 0")
    return {"claim": cert["claim"], "claim_id": cert.get("claim_id", "?"), "d_min": d_min, "d_max": d_max,
            "variable": dom.get("variable", "v"), "v_max": v_max, "cells": n_cells, "small_cells": len(groups),
            "roots": len(roots)}


def replay_file(path):
    """Replay one certificate file; returns the summary dict (ReplayError on any failure)."""
    try:
        with open(path, encoding="utf-8") as fh:
            cert = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ReplayError(f"cannot read {path}: {exc}") from exc
    return replay(cert)


def main(argv=None):
    """``python -m paper_checks.replay DIR [FILE ...]``; returns the exit status."""
    import time

    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[0] + "\n\nusage: python -m paper_checks.replay DIR [FILE ...]\n"
              "Replays every *.json certificate in DIR (or the named files in DIR).")
        return 0 if args else 2
    folder = Path(args[0])
    if not folder.is_dir():
        print(f"python -m paper_checks.replay: error: {str(folder)!r} is not a folder", file=sys.stderr)
        return 2
    files = [folder / name for name in args[1:]] or sorted(p for p in folder.glob("*.json") if p.name != "report.json")
    if not files:
        print(f"python -m paper_checks.replay: error: no certificate (*.json) in {str(folder)!r}", file=sys.stderr)
        return 2
    status = 0
    for path in files:
        t0 = time.perf_counter()
        try:
            s = replay_file(path)
        except ReplayError as exc:
            print(f"FAIL {path.name}: {exc}")
            status = 1
            continue
        if "text" in s:
            print(f"PASS {path.name}: {s['claim']}: {s['text']}: {s['cells']} cells replayed "
                  f"({time.perf_counter() - t0:.1f} s)")
            continue
        print(f"PASS {path.name}: {s['claim']}: d in [{s['d_min']}, {s['d_max']}], {s['variable']} in (0, "
              f"{s['v_max']}]{', capped at z_lo' if s['roots'] else ''}: {s['cells']} cells and {s['small_cells']} "
              f"small-argument cells replayed ({time.perf_counter() - t0:.1f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
