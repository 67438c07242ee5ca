r"""Certificates of the winners map (figure ``new_winners_map``, :mod:`figures.winners`): where the map names a
winner at a grid point (d, v), its scaled MSE is proved below every other contestant's on a continuous
v-interval around v (issue 40).  Driven by :func:`paper_checks.certify.certify` (claims
``beyond.winners_small_v`` and ``beyond.winners_large_v``, the alias ``winners``); replayed by
:mod:`paper_checks.replay_winners`.  The format and the lemmas are in ``docs/guide/certificates.rst``.

The quantity, the inequalities and the interval of a map cell: :ref:`guide-paper_checks.certify_winners`
(``docs/guide/certificates.rst``).
"""

from __future__ import annotations

import functools
import math
import time
from fractions import Fraction

from paper_checks.certify import (START_PREC, NotCertified, _arb_q, _convolve, _exact, _exp_series, _moment_series,
                                  _prec, _progress, _rising_ratio, _SeriesEvaluator, _SeriesQuantity, _ZERO,
                                  interval_json, qstr)

__all__ = ["COMPONENTS", "CONTESTANTS", "GRID_BITS", "LEMMAS", "MAX_SIDE_EVALUATIONS", "MIN_WIDTH_BITS", "bounds",
           "certify_winners", "gap_form", "oprf_gain", "targets"]

#: The map's contestants (figures.winners.CONTESTANTS, in its order).
KINDS = ("prf", "hyperbolic", "oprf")
COUPLINGS = ("iid", "orthogonal", "simplex", "pnc_orthogonal")
CONTESTANTS = tuple(f"{k}/{c}" for k in KINDS for c in COUPLINGS)
#: A side of a map cell's interval stops at an undecided cell narrower than 2**-MIN_WIDTH_BITS of the side.
MIN_WIDTH_BITS = 16
#: Work budget of one side of one inequality: evaluations of the gap (a side that spends it stops there).
MAX_SIDE_EVALUATIONS = 1 << 12
#: Significant bits of the dyadic ends of the target intervals (the rounded geometric midpoints).
GRID_BITS = 12
#: Precisions (bits) tried at the grid point and at a side's narrowest cell.
POINT_PRECS = (START_PREC, 4 * START_PREC, 16 * START_PREC)
#: The series in X = v^2/2 a scaled MSE is formed from (name -> definition; every coefficient is at most 4^k/k! in
#: absolute value).
COMPONENTS = {
    "exp4": "e^{4X} (4^k/k!)",
    "exp2": "e^{2X} (2^k/k!)",
    "one": "1",
    "rho_orth": "rho_ORF = 1F1(d; d/2; X): (d)_k/((d/2)_k k!) <= 2^k/k!",
    "rho_simplex": "rho(c), c = -1/(d-1): (d)_k/(d/2)_k [X^k] e^X sum_p c^p R_p X^p/p!, |.| <= 2^k/k!",
    "hyp_simplex": "(rho(c) + rho(-c))/2: the even p only, |.| <= (2(1 + |c|))^k/k! <= 4^k/k!",
    "jensen": "0F1(; d/2; d X): d^k/((d/2)_k k!) <= 2^k/k!",
}
#: The lemmas (proofs by hand) a certificate of the map rests on, besides interval arithmetic.
LEMMAS = (
    "S = m e^{2(|x|^2+|y|^2)} MSE at m = d is Var[b] + (d - 1)(E[b_i b_j] - e^{v^2}) for the couplings with i.i.d. "
    "norms (theory.kernel_mse); the prefactor is common to every kind, and m = 4d has the same pairs per feature",
    "hyperbolic: Var = (e^{v^2} - 1)^2/2, pair term (rho(c) + rho(-c))/2 (c = 0: rho_ORF; iid: e^{v^2})",
    "OPRF (theorem couplings): the pair term is the PRF one for every A (theory.oprf); Var_A = e^{v^2} expm1(X(A)) "
    "with X(A) = d log(1-4A) - (d/2) log(1-8A) + v^2/(1-8A); X'(A) has the sign of -(16A^2 - (2-4s)A - s), "
    "s = v^2/d, whose roots are A* = -s/(1 - 2s + sqrt((2s+1)^2 + 8s)) <= 0 and a root > 1/8 (the quadratic is "
    "-s/2 < 0 at A = 1/8): X decreases then increases on (-inf, 1/8), so min_A Var_A = Var at A*",
    "D = Var_0 - Var_{A*} = e^{2v^2}(1 - e^{-t}), t = v^2 - X(A*) = max_{A<=0} (v^2 (-8A)/(1-8A) - (d/2) "
    "log1p(16A^2/(1-8A))): a max of functions nondecreasing in v, so t and D are nondecreasing in v; and "
    "e^{2v^2 - t} = e^{2v^2} - D = e^{v^2 + min_A X(A)} is nondecreasing (X(A) increases with v^2 for every A)",
    "pnc_orthogonal (PRF, hyperbolic): the pair term E[0F1(; d/2; v^2 s/2)] over the antithetic norm sum s "
    "(mean d) lies in [0F1(; d/2; d v^2/2), rho_ORF]: Jensen below, and the countermonotone sum is the least in "
    "convex order above (0F1 is convex); the hyperbolic PNC pair term is the PRF one (flipping u_j); w_c = "
    "2 floor(d/2)/d of the d - 1 pairs per feature are norm-coupled, the rest are ORF pairs",
    "OPRF x pnc_orthogonal at its optimal A is at most its value at A = 0, PRF-PNC, at most PRF-ORF",
    "majorant: every component's X^k coefficient is at most 4^k/k! in absolute value, so |g_k| <= C 4^k/k! with C "
    "the sum of the absolute weights, and the tail after K terms on X <= X_hi is at most "
    "C (4 X_hi)^{K+1}/(K+1)! / (1 - 4 X_hi/(K+2))",
)


# ----------------------------------------------------------------------------- the forms


def _form(kind, coupling, d):
    """S of a contestant with i.i.d. norms as (weights {component: Fraction}, gain): sum weight * component -
    gain * D."""
    w = Fraction(d - 1)
    if kind == "hyperbolic":
        comps = {"exp4": Fraction(1, 2), "exp2": Fraction(-1), "one": Fraction(1, 2)}
    else:
        comps = {"exp4": Fraction(1), "exp2": Fraction(-1)}
    pair = {"iid": None, "orthogonal": "rho_orth",
            "simplex": "hyp_simplex" if kind == "hyperbolic" else "rho_simplex"}[coupling]
    if pair is not None:
        comps[pair] = comps.get(pair, 0) + w
        comps["exp2"] -= w
    return comps, 1 if kind == "oprf" else 0


def bounds(name, d):
    """(upper, lower, how) of contestant ``name`` at d: forms (``_form``) bounding its scaled MSE from
    above and below (None: no proved bound) and a sentence saying why."""
    kind, coupling = name.split("/")
    if coupling != "pnc_orthogonal":
        f = _form(kind, coupling, d)
        return f, f, "closed form"
    if kind == "oprf":
        return _form("prf", "orthogonal", d), None, ("at most PRF-ORF (A = 0 is an OPRF; convex order); no proved "
                                                     "lower bound (its pair term depends on A)")
    upper = _form(kind, "orthogonal", d)
    wc = Fraction(2 * (d // 2), d)
    comps = dict(upper[0])
    comps["rho_orth"] -= wc
    comps["jensen"] = wc
    return upper, (comps, 0), f"between {kind}/orthogonal - w_c (rho_ORF - 0F1(; d/2; d v^2/2)) (Jensen) and " \
                              f"{kind}/orthogonal (convex order)"


def gap_form(winner, loser, d):
    """The form of lower(loser) - upper(winner) (None when a bound is missing); zero weights dropped."""
    up, lo = bounds(winner, d)[0], bounds(loser, d)[1]
    if up is None or lo is None:
        return None
    comps = {k: lo[0].get(k, 0) - up[0].get(k, 0) for k in set(lo[0]) | set(up[0])}
    return {k: v for k, v in comps.items() if v}, up[1] - lo[1]


def _exact_form(name, d):
    up, lo, _ = bounds(name, d)
    return up is not None and up == lo


# ----------------------------------------------------------------------------- evaluation


def _components(d, K):
    """The coefficients 0..K of every component (balls at the current precision)."""
    from flint import arb

    inv_fact = _exp_series(K)
    ratio = _rising_ratio(d, K)
    c = arb(-1) / (d - 1)
    rho_s = _convolve(inv_fact, _moment_series(d, c, K), K)
    hyp_s = _convolve(inv_fact, _moment_series(d, c, K, 0), K)
    h = arb(d) / 2
    jensen, j = [], arb(1)
    for k in range(K + 1):
        jensen.append(j)
        j = j * d / ((h + k) * (k + 1))
    four = [f * arb(4) ** k for k, f in enumerate(inv_fact)]
    two = [f * arb(2) ** k for k, f in enumerate(inv_fact)]
    return {"exp4": four, "exp2": two, "one": [arb(1)] + [arb(0)] * K,
            "rho_orth": [r * f for r, f in zip(ratio, inv_fact)],
            "rho_simplex": [r * g for r, g in zip(ratio, rho_s)],
            "hyp_simplex": [r * g for r, g in zip(ratio, hyp_s)], "jensen": jensen}


def oprf_gain(d, v, prec):
    """Balls of the OPRF gain D(v) = e^{2v^2}(1 - e^{-t}) and of e^{2v^2 - t} = e^{2v^2} - D (the OPRF variance
    plus e^{v^2}) at an exact v (:ref:`guide-paper_checks.certify_winners`), at ``prec`` bits; both are nondecreasing in v."""
    with _prec(prec):
        vv = _arb_q(Fraction(v))
        v2 = vv * vv
        s = v2 / d
        a = -s / (1 - 2 * s + ((2 * s + 1) ** 2 + 8 * s).sqrt())
        t = -8 * a * v2 / (1 - 8 * a) - (d * (16 * a * a / (1 - 8 * a)).log1p()) / 2
        return (2 * v2).exp() * -((-t).expm1()), (2 * v2 - t).exp()


def _series(d, comps, s_max, cache, name):
    """A _SeriesEvaluator of sum weight * component (weights combined exactly; majorant C 4^k/k!)."""
    C = max(1, math.ceil(sum(abs(w) for w in comps.values())))

    def build(dd, K):
        from flint import arb

        if (dd, K) not in cache:
            cache[dd, K] = _components(dd, K)
        table = cache[dd, K]
        out = [arb(0)] * (K + 1)
        for comp, w in sorted(comps.items()):
            wb = arb(w.numerator) / w.denominator
            out = [o + wb * g for o, g in zip(out, table[comp])]
        return out

    return _SeriesEvaluator(_SeriesQuantity(name, Fraction(1, 2), 0, C, 4, build, "", "|g_k| <= C 4^k/k!"), d,
                            s_max)


def _shift(lo, hi, g, ends):
    """[lo, hi] + g [a, b] (g an integer, a <= b)."""
    a, b = ends
    return (lo + g * a, hi + g * b) if g > 0 else (lo + g * b, hi + g * a)


class _Gap:
    """G = lower(loser) - upper(winner) at one d, a series in X plus g D (g the gain coefficient).

    Where g != 0 G has two forms: the series plus g [D(v_lo), D(v_hi)] (narrow at small v, where D is small),
    and, with D = e^{2v^2} - e^{2v^2 - t}, the series with g more e^{4X} minus g [e^{2v^2-t}] at the ends
    (narrow at large v, where the OPRF variance is far below e^{2v^2}); the second is formed only when the
    first does not decide the cell, and the enclosure is the intersection."""

    def __init__(self, d, winner, loser, s_max, cache):
        self.d, self.winner, self.loser = d, winner, loser
        comps, self.gain = gap_form(winner, loser, d)
        name = f"winners_gap {winner} < {loser}"
        self.series = _series(d, comps, s_max, cache, name)
        self.shifted = None
        if self.gain:
            comps = dict(comps)
            comps["exp4"] = comps.get("exp4", 0) + self.gain
            self.shifted = _series(d, {k: w for k, w in comps.items() if w}, s_max, cache, name)
        self.gains = cache.setdefault(("gain", d), {})

    def _gain(self, v, prec):
        if (v, prec) not in self.gains:
            self.gains[v, prec] = oprf_gain(self.d, v, prec)
        return self.gains[v, prec]

    def _ends(self, lo, hi, prec, which):
        """Exact ends of D (which = 0) or e^{2v^2 - t} (1) over [lo, hi] (both nondecreasing in v)."""
        a, b = self._gain(lo, prec)[which], self._gain(hi, prec)[which]
        with _prec(prec):  # (the ends rounded at this precision, not flint's default)
            return _exact(a.lower()), _exact(b.upper())

    def cell(self, lo, hi, prec):
        """(lhs, rhs, prec): 0 and the exact ends of an enclosure of G over v in [lo, hi]."""
        _, (g_lo, g_hi), _ = self.series.cell(lo, hi, prec)
        if self.gain:
            g_lo, g_hi = _shift(g_lo, g_hi, self.gain, self._ends(lo, hi, prec, 0))
            if not (g_lo > 0 or g_hi < 0):
                _, (s_lo, s_hi), _ = self.shifted.cell(lo, hi, prec)
                s_lo, s_hi = _shift(s_lo, s_hi, -self.gain, self._ends(lo, hi, prec, 1))
                g_lo, g_hi = max(g_lo, s_lo), min(g_hi, s_hi)
                if g_lo > g_hi:
                    raise NotCertified(f"{self.winner} < {self.loser} at d = {self.d}: the two enclosures of the gap "
                                       f"on [{qstr(lo)}, {qstr(hi)}] are disjoint (a defect of the certifier)")
        return _ZERO, (g_lo, g_hi), prec


def _point(gap, v):
    """(verdict, enclosure, prec) of G at the single point v: 'proved', 'refuted' or 'undecided'."""
    for prec in POINT_PRECS:
        _, (lo, hi), _ = gap.cell(v, v, prec)
        if lo > 0:
            return "proved", (lo, hi), prec
        if hi < 0:
            return "refuted", (lo, hi), prec
    return "undecided", (lo, hi), prec


def _side(gap, start, end, stats):
    """Cells from ``start`` toward ``end`` (either order) on each of which G > 0 is proved, in order: returns
    (reach, cells, why the side stopped short or None)."""
    if start == end:
        return start, [], None
    up = end > start
    min_width = abs(end - start) / (1 << MIN_WIDTH_BITS)
    stack, cells, reach, spent = [(min(start, end), max(start, end))], [], start, 0
    while stack:
        lo, hi = stack.pop()
        if spent >= MAX_SIDE_EVALUATIONS:
            return reach, cells, f"work budget spent ({spent} evaluations) before [{qstr(lo)}, {qstr(hi)}]"
        for prec in POINT_PRECS[:2]:
            _, (g_lo, g_hi), used = gap.cell(lo, hi, prec)
            stats["evaluations"] += 1
            spent += 1
            if g_lo > 0 or g_hi < 0 or hi - lo > min_width:
                break
        if g_lo > 0:
            cells.append({"lo": lo, "hi": hi, "prec": used, "lhs": _ZERO, "rhs": (g_lo, g_hi)})
            stats["max_prec"] = max(stats["max_prec"], used)
            reach = hi if up else lo
            continue
        if g_hi < 0:
            return reach, cells, f"reversed on [{qstr(lo)}, {qstr(hi)}]"
        if hi - lo <= min_width:
            return reach, cells, f"undecided on [{qstr(lo)}, {qstr(hi)}]"
        mid = (lo + hi) / 2
        stack += [(mid, hi), (lo, mid)] if up else [(lo, mid), (mid, hi)]
    return reach, cells, None


def _round_dyadic(x):
    e = math.floor(math.log2(x)) - GRID_BITS + 1
    return Fraction(round(x / 2.0 ** e)) * Fraction(2) ** e


def targets(vs):
    """{v: (lo, hi)}: each grid v's range between the geometric midpoints with its neighbours (outward at the
    ends, with the same ratio as the nearest pair), rounded to GRID_BITS significant bits (exact Fractions)."""
    vs = sorted(Fraction(v) for v in vs)
    if len(vs) < 2:
        raise ValueError(f"the winners map needs at least two grid values of v, got {len(vs)}")
    mids = [_round_dyadic(math.sqrt(a * b)) for a, b in zip(vs, vs[1:])]
    first = _round_dyadic(float(vs[0]) * math.sqrt(vs[0] / vs[1]))
    last = _round_dyadic(float(vs[-1]) * math.sqrt(vs[-1] / vs[-2]))
    ends = [first] + mids + [last]
    return {v: (ends[j], ends[j + 1]) for j, v in enumerate(vs)}


@functools.lru_cache(maxsize=8)
def _map_winners(ds, vs):
    """{(d, v): (winner, decided)} of figures.winners.cell at m = d and the figure's 20 digits (tuples ds, vs;
    kept for the other row of the same run)."""
    from mpmath import mp

    from figures import winners

    out = {}
    with mp.workdps(20):
        for d in ds:
            for v in vs:
                c = winners.cell(d, v, d)
                out[d, v] = (c["winner"], bool(c["decided"]))
    return out


def certify_winners(spec, d_max=None, v_max=None, quiet=True, winners=None):
    """The certificate of one winners row (``spec.winner_kinds``): every map cell whose winner has one of those
    kinds, on d in the map's grid up to ``d_max`` and grid v up to ``v_max`` (None when no cell remains).

    ``winners`` ({(d, v string): winner}) replaces the map's winners (a test's deliberately wrong winner)."""
    from figures.winners import EFFORT

    ds = [d for d in EFFORT["ds"] if d_max is None or d <= d_max]
    grid = [v for v in EFFORT["vs"] if v_max is None or Fraction(v) <= Fraction(v_max)]
    if not ds or not grid:
        return None
    started, cpu = time.perf_counter(), time.process_time()
    named = _map_winners(tuple(ds), tuple(grid)) if winners is None else {k: (w, None) for k, w in winners.items()}
    ranges = targets(EFFORT["vs"])
    stats = {"max_prec": START_PREC, "evaluations": 0, "max_terms": 0}
    inequalities, index, cells, entries = [], {}, [], []
    cache = {}
    top = max(hi for _, hi in ranges.values())  # the series' reach (one length per d)
    if v_max is not None:
        top = min(top, Fraction(v_max))
    for d in ds:
        mine = [(v, named[d, v][0], named[d, v][1]) for v in grid
                if (d, v) in named and named[d, v][0].split("/")[0] in spec.winner_kinds]
        if not mine:
            continue
        _progress(f"certify {spec.claim_id}: d = {d} ({len(mine)} map cells)", quiet)
        for v_text, winner, decided in mine:
            v = Fraction(v_text)
            lo_t, hi_t = ranges[v]
            if v_max is not None:
                hi_t = min(hi_t, Fraction(v_max))
            if bounds(winner, d)[0] is None:
                raise NotCertified(f"{spec.claim_id}: the winner {winner} at d = {d}, v = {v_text} has no proved "
                                   "upper bound", (d, v, v))
            against, not_against, gaps, points = [], {}, {}, {}
            for loser in CONTESTANTS:
                if loser == winner:
                    continue
                form = gap_form(winner, loser, d)
                if form is None:
                    not_against[loser] = f"no proved lower bound of {loser} ({bounds(loser, d)[2]}); the map does " \
                                         "not evaluate it by default (figures.winners)"
                    continue
                if not form[0] and not form[1]:
                    not_against[loser] = f"{winner} is at most {loser} (its upper bound: {bounds(winner, d)[2]}); " \
                                         "the strict inequality is the map's, at points (quadrature)"
                    continue
                gap = _Gap(d, winner, loser, top, cache)
                stats["max_terms"] = max(stats["max_terms"], gap.series.K)
                verdict, enc, prec = _point(gap, v)
                exact = _exact_form(winner, d) and _exact_form(loser, d)
                if verdict == "proved":
                    against.append(loser)
                    gaps[loser], points[loser] = gap, {"prec": prec, "gap": interval_json(*enc)}
                elif exact:
                    raise NotCertified(f"{spec.claim_id}: the map's winner {winner} at d = {d}, v = {v_text} is "
                                       f"{'refuted' if verdict == 'refuted' else 'not proved'} against {loser} "
                                       f"(G in [{float(enc[0]):.4g}, {float(enc[1]):.4g}] at {prec} bits)",
                                       (d, v, v), refuted=verdict == "refuted")
                else:
                    not_against[loser] = f"the proved bounds do not separate at v = {v_text} ({winner}: " \
                                         f"{bounds(winner, d)[2]}; {loser}: {bounds(loser, d)[2]}); the map " \
                                         "compares them at points (quadrature)"
            # the sides: the most binding inequality first, each capped by the reach so far
            order = sorted(against, key=lambda n: Fraction(points[n]["gap"]["mid"]))
            reach_hi, reach_lo, stops, sides = hi_t, lo_t, {}, {}
            for loser in order:
                r_hi, up_cells, why_hi = _side(gaps[loser], v, reach_hi, stats)
                r_lo, down_cells, why_lo = _side(gaps[loser], v, reach_lo, stats)
                reach_hi, reach_lo = min(reach_hi, r_hi), max(reach_lo, r_lo)
                sides[loser] = list(reversed(down_cells)) + up_cells
                for side, why in (("above", why_hi), ("below", why_lo)):
                    if why:
                        stops.setdefault(side, []).append(f"{loser}: {why}")
            if not reach_lo < reach_hi:
                raise NotCertified(f"{spec.claim_id}: no interval around v = {v_text} at d = {d} is proved for "
                                   f"{winner} ({stops})", (d, v, v))
            for loser in against:
                key = (winner, loser)
                if key not in index:
                    index[key] = len(inequalities)
                    inequalities.append({"index": index[key], "quantity": "winners_gap", "winner": winner,
                                         "loser": loser, "lhs": "0",
                                         "rhs": f"lower bound of S[{loser}] - upper bound of S[{winner}]"})
                for c in sides[loser]:
                    lo, hi = max(c["lo"], reach_lo), min(c["hi"], reach_hi)
                    if lo < hi:
                        cells.append({"inequality": index[key], "d": d, "v": v_text, "v_lo": qstr(lo),
                                      "v_hi": qstr(hi), "prec": c["prec"], "lhs": interval_json(*c["lhs"]),
                                      "rhs": interval_json(*c["rhs"])})
            entries.append({"d": d, "v": v_text, "winner": winner, "map_decided": decided,
                            "target": {"v_lo": qstr(lo_t), "v_hi": qstr(hi_t)},
                            "v_lo": qstr(reach_lo), "v_hi": qstr(reach_hi), "against": against,
                            "not_against": not_against, "at_v": points,
                            "stopped": {side: "; ".join(s) for side, s in stops.items()
                                        if (reach_hi < hi_t if side == "above" else reach_lo > lo_t)}})
    if not entries:
        return None
    return {"entries": entries, "inequalities": inequalities, "cells": cells, "ds": ds, "vs": grid,
            "stats": stats, "started": started, "cpu": cpu}
