r"""Replay of the winners map's certificates (:mod:`paper_checks.certify_winners`) from the JSON alone.

Part of the outside checker :mod:`paper_checks.replay` (which dispatches here for the quantity
``winners_gap``): it imports neither :mod:`theory`, :mod:`figures` nor the certifier, only the standard library,
python-flint and the replay's own printed-form routes, and it holds its own table of the contestants.

Its routes: the components' coefficients by the printed Gamma-function forms (eq. ``orf_conformity``, eq.
``simrf_conformity`` at :math:`\pm c`, the 0F1 series with :math:`\Gamma(d/2)/\Gamma(k + d/2)`); the OPRF optimum by
the printed :math:`A^* = (1 - 2s - \sqrt{(2s+1)^2 + 8s})/16` and the printed exponent
:math:`X(A) = d\log(1-4A) - \frac d2\log(1-8A) + \frac{v^2}{1-8A}` (the certifier uses the product form of A* and
log1p); each scaled MSE written as the variance plus the weighted pair excesses.

What it checks: every map entry's interval [v_lo, v_hi] contains its grid v; the contestants listed
``against`` and ``not_against`` and the winner are the twelve of the map, once each; a contestant may be left
out only where this checker's table has no proved lower bound for it, or the winner's upper bound is that
contestant's own value, or one of the two sides is a bound rather than the closed form; for every
contestant ``against`` the cells of its inequality tile [v_lo, v_hi] and, recomputed, prove the winner's upper
bound below the contestant's lower bound on each cell (the recorded enclosures must be positive and meet
the recomputed ones); no cell is left over.
"""

from __future__ import annotations

import math
from fractions import Fraction

from paper_checks.replay import (BASE_PREC, ReplayError, _decide, _exact, _frac, _need, _printed_angle_coefficients,
                                 _printed_orf_coefficients, _q, _recorded, _recorded_gap, _check_meets,
                                 _Series, _show)

__all__ = ["replay_winners"]

KINDS = ("prf", "hyperbolic", "oprf")
COUPLINGS = ("iid", "orthogonal", "simplex", "pnc_orthogonal")
CONTESTANTS = tuple(f"{k}/{c}" for k in KINDS for c in COUPLINGS)


def _coefficients(d, K):
    """{component: X^k coefficients, k = 0..K} by the printed forms (X = v^2/2)."""
    from flint import arb

    c = arb(-1) / (d - 1)
    g = (arb(d) / 2).gamma()
    return {
        "e4": [arb(4) ** k / arb.fac_ui(k) for k in range(K + 1)],
        "e2": [arb(2) ** k / arb.fac_ui(k) for k in range(K + 1)],
        "1": [arb(1)] + [arb(0)] * K,
        "orf": _printed_orf_coefficients(d, K),
        "sim": _printed_angle_coefficients(d, c, K),
        "sim_even": _printed_angle_coefficients(d, c, K, parity=0),
        "f01": [g / (arb(k) + arb(d) / 2).gamma() * arb(d) ** k / arb.fac_ui(k) for k in range(K + 1)],
    }


def _variance(kind):
    """Per-direction variance as {component: weight} (OPRF: the PRF one, the gain enters separately)."""
    if kind == "hyperbolic":  # (e^{v^2} - 1)^2 / 2
        return {"e4": Fraction(1, 2), "e2": Fraction(-1), "1": Fraction(1, 2)}
    return {"e4": Fraction(1), "e2": Fraction(-1)}  # e^{v^2}(e^{v^2} - 1)


def _pair(kind, coupling):
    """The component of E[b_i b_j] for a coupling with i.i.d. norms."""
    if coupling == "iid":
        return "e2"
    if coupling == "orthogonal":
        return "orf"
    return "sim_even" if kind == "hyperbolic" else "sim"


def _mse(kind, coupling, d):
    """(weights, gain): S = Var + (d - 1)(pair - e^{v^2}), minus the OPRF gain once for OPRFs."""
    out = dict(_variance(kind))
    for comp, w in ((_pair(kind, coupling), d - 1), ("e2", -(d - 1))):
        out[comp] = out.get(comp, 0) + w
    return out, (1 if kind == "oprf" else 0)


def _bound(name, d, side):
    """This checker's proved upper (side = 1) or lower (side = -1) bound of a contestant's S, or None."""
    kind, coupling = name.split("/")
    if coupling != "pnc_orthogonal":
        return _mse(kind, coupling, d)
    if kind == "oprf":  # at most its A = 0 value, PRF-PNC, at most PRF-ORF; no lower bound
        return _mse("prf", "orthogonal", d) if side > 0 else None
    weights, gain = _mse(kind, "orthogonal", d)  # convex order above
    if side < 0:  # Jensen below: w_c of the pairs at 0F1(; d/2; d v^2/2) instead of rho_ORF
        wc = Fraction(2 * (d // 2), d)
        weights = dict(weights)
        weights["orf"] -= wc
        weights["f01"] = weights.get("f01", 0) + wc
    return weights, gain


def _closed(name):
    return not name.endswith("/pnc_orthogonal")


def _gain(d, v):
    """(D, e^{v^2 + min_A X(A)}) balls at an exact v, by the printed A* and X(A)."""
    vv = _q(v)
    v2 = vv * vv
    s = v2 / d
    a = (1 - 2 * s - ((2 * s + 1) ** 2 + 8 * s).sqrt()) / 16
    x = d * (1 - 4 * a).log() - d * (1 - 8 * a).log() / 2 + v2 / (1 - 8 * a)
    return (2 * v2).exp() - (v2 + x).exp(), (v2 + x).exp()


class _GapRoute:
    """lower(loser) - upper(winner): series parts (two forms where the gain enters) and the gain coefficient."""

    def __init__(self, d, winner, loser, v_max, cache):
        up, lo = _bound(winner, d, 1), _bound(loser, d, -1)
        self.d = d
        weights = {k: lo[0].get(k, 0) - up[0].get(k, 0) for k in set(lo[0]) | set(up[0])}
        self.gain = up[1] - lo[1]
        self.forms = [self._series(weights, v_max, cache)]
        if self.gain:
            shifted = dict(weights)
            shifted["e4"] = shifted.get("e4", 0) + self.gain  # D = e^{2v^2} - e^{v^2 + min X}
            self.forms.append(self._series(shifted, v_max, cache))

    def _series(self, weights, v_max, cache):
        weights = {k: w for k, w in weights.items() if w}
        C = max(1, math.ceil(sum(abs(w) for w in weights.values())))

        def route(d, K):
            from flint import arb

            if (d, K) not in cache:
                cache[d, K] = _coefficients(d, K)
            table = cache[d, K]
            return [sum((arb(w.numerator) / w.denominator * table[k][j] for k, w in sorted(weights.items())), arb(0))
                    for j in range(K + 1)]

        return _Series(route, Fraction(1, 2), 0, C, 4, self.d, v_max)

    def enclose(self, lo, hi):
        """Exact ends of an enclosure of the gap over v in [lo, hi] at the current precision."""
        X_lo, X_hi = _q(lo * lo / 2), _q(hi * hi / 2)
        if not self.gain:
            return self.forms[0].enclose(X_lo, X_hi, False)
        (d_lo, e_lo), (d_hi, e_hi) = _gain(self.d, lo), _gain(self.d, hi)  # both nondecreasing in v
        out = []
        for series, (a, b), sign in ((self.forms[0], (d_lo, d_hi), 1), (self.forms[1], (e_lo, e_hi), -1)):
            s_lo, s_hi = series.enclose(X_lo, X_hi, False)
            g = sign * self.gain
            a, b = _exact(a.lower()), _exact(b.upper())
            out.append((s_lo + g * a, s_hi + g * b) if g > 0 else (s_lo + g * b, s_hi + g * a))
        return max(out[0][0], out[1][0]), min(out[0][1], out[1][1])


def replay_winners(cert):
    """Check a winners certificate (parsed JSON); returns the summary dict of :func:`paper_checks.replay.replay`."""
    dom = _need(cert, "domain", dict, "certificate")
    ds = _need(dom, "ds", list, "domain")
    if not ds or any(not isinstance(d, int) or isinstance(d, bool) or d < 2 for d in ds):
        raise ReplayError(f"domain.ds must be a list of integers >= 2, got {ds!r}")
    ineqs = []
    for i, ineq in enumerate(_need(cert, "inequalities", list, "certificate")):
        if _need(ineq, "index", int, f"inequality {i}") != i or ineq.get("quantity") != "winners_gap":
            raise ReplayError(f"inequality {i}: index out of order or not a winners_gap")
        w, l_ = _need(ineq, "winner", str, f"inequality {i}"), _need(ineq, "loser", str, f"inequality {i}")
        if w not in CONTESTANTS or l_ not in CONTESTANTS or w == l_:
            raise ReplayError(f"inequality {i}: {w!r} < {l_!r} is not a pair of the map's contestants")
        ineqs.append((w, l_))
    index = {pair: i for i, pair in enumerate(ineqs)}
    groups = {}
    for n, c in enumerate(_need(cert, "cells", list, "certificate")):
        key = (_need(c, "inequality", int, f"cell {n}"), _need(c, "d", int, f"cell {n}"),
               _frac(_need(c, "v", str, f"cell {n}"), f"cell {n}.v"))
        groups.setdefault(key, []).append((_frac(_need(c, "v_lo", str, f"cell {n}"), f"cell {n}.v_lo"),
                                           _frac(_need(c, "v_hi", str, f"cell {n}"), f"cell {n}.v_hi"), c))
    used, n_cells, cache, routes = set(), 0, {}, {}
    entries = _need(cert, "map", list, "certificate")
    if not entries:
        raise ReplayError("the certificate has no map cell")
    top = {}  # the largest v per d: one series length per d
    for e in entries:
        d = _need(e, "d", int, "map entry")
        top[d] = max(top.get(d, Fraction(0)), _frac(_need(e, "v_hi", str, "map entry"), "map entry v_hi"))
    for e in entries:
        d, v = _need(e, "d", int, "map entry"), _frac(_need(e, "v", str, "map entry"), "map entry v")
        winner = _need(e, "winner", str, "map entry")
        where = f"d = {d}, v = {e['v']}, winner {winner}"
        lo, hi = _frac(_need(e, "v_lo", str, where), where + " v_lo"), _frac(_need(e, "v_hi", str, where),
                                                                               where + " v_hi")
        if d not in ds or winner not in CONTESTANTS or not (0 < lo <= v <= hi and lo < hi):
            raise ReplayError(f"{where}: not a map cell of the domain with an interval [{lo}, {hi}] around v")
        if _bound(winner, d, 1) is None:
            raise ReplayError(f"{where}: the winner has no proved upper bound")
        against = _need(e, "against", list, where)
        skipped = _need(e, "not_against", dict, where)
        named = [winner] + against + list(skipped)
        if sorted(named) != sorted(CONTESTANTS):
            raise ReplayError(f"{where}: the winner, 'against' and 'not_against' must name each of the twelve "
                              f"contestants once, got {named}")
        for loser in skipped:  # only where a bound, not a closed form, stands for one of the two
            if _bound(loser, d, -1) is not None and _closed(winner) and _closed(loser):
                raise ReplayError(f"{where}: {loser} is left out although both MSEs are closed forms")
        for loser in against:
            if _bound(loser, d, -1) is None:
                raise ReplayError(f"{where}: {loser} has no proved lower bound here, so it cannot be 'against'")
            if (winner, loser) not in index:
                raise ReplayError(f"{where}: no inequality {winner} < {loser}")
            key = (index[winner, loser], d, v)
            cells = sorted(groups.get(key, []), key=lambda t: t[0])
            used.add(key)
            prev = lo
            for c_lo, c_hi, _ in cells:
                if c_lo != prev or not c_hi > c_lo:
                    raise ReplayError(f"{where}, {loser}: the cells do not tile [{lo}, {hi}]: [{c_lo}, {c_hi}] "
                                      f"follows {prev}")
                prev = c_hi
            if prev != hi:
                raise ReplayError(f"{where}, {loser}: the cells end at {prev}, not at {hi}")
            if (d, winner, loser) not in routes:
                routes[d, winner, loser] = _GapRoute(d, winner, loser, top[d], cache)
            route = routes[d, winner, loser]
            for c_lo, c_hi, c in cells:
                n_cells += 1
                cw = f"{where}, {loser}, cell [{c_lo}, {c_hi}]"
                rhs = _recorded_gap(c, cw)
                ball = _decide(lambda: route.enclose(c_lo, c_hi), c.get("prec", BASE_PREC), cw)
                _check_meets(ball, rhs, c, cw)
    if set(groups) - used:
        raise ReplayError(f"cells that no map entry uses: {sorted(set(groups) - used, key=str)[:3]}")
    return {"claim": cert["claim"], "claim_id": cert.get("claim_id", "?"), "d_min": min(ds), "d_max": max(ds),
            "variable": "v", "v_max": max(top.values()), "cells": n_cells, "small_cells": 0, "roots": 0,
            "map_cells": len(entries),
            "text": f"{len(entries)} map cells (d in {sorted({e['d'] for e in entries})}), each on its interval"}
