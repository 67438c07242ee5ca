r"""New figure: who wins where -- the best (feature kind x coupling) over (d, v), at m = d and m = 4d.

The contestants, what is compared, and the closed forms and bounds: :ref:`guide-figures.winners`
(``docs/guide/experiments.rst``).
"""

from __future__ import annotations

import math

import numpy as np
from mpmath import mp

import theory
from theory.errors import ConvergenceError

from .style import PAGE_WIDTH

#: Feature kinds and couplings of the contest (kernel: Gaussian; every kind positive).
KINDS = ("prf", "hyperbolic", "oprf")
COUPLINGS = ("iid", "orthogonal", "simplex", "pnc_orthogonal")
#: Couplings whose closed forms cost milliseconds for every kind (no quadrature).
CHEAP = ("iid", "orthogonal", "simplex")
#: The paper's estimator: every ratio is to it.
BASELINE = "prf/simplex"
#: ``|z|`` above which a Monte Carlo comparison counts as resolved (paper_checks._compare.Z_CRIT).
RESOLVED_Z = 4.5
#: Main job and quick settings: dimensions, ``v = |x + y|`` (decimal strings, exact in mpmath), the multiples of d
#: for m, whether every pnc_orthogonal contestant is evaluated exactly (``full``), the simplex_plus Monte Carlo
#: points (d, v) and draws.
EFFORT = {"ds": (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
          "vs": ("0.05", "0.1", "0.2", "0.35", "0.5", "0.75", "1", "1.5", "2", "3", "5"),
          "m_over_d": (1, 4), "full": False,
          "mc_points": ((8, "0.5"), (8, "1"), (4, "1.5")), "mc_draws": 10_000}
QUICK = {"ds": (2, 8, 64), "vs": ("0.1", "1", "3"), "m_over_d": (1, 4), "full": False,
         "mc_points": ((8, "1"),), "mc_draws": 4000}
#: Display names of the kinds.
KIND_LABEL = {"prf": "PRF", "hyperbolic": "hyperbolic PRF", "oprf": "OPRF"}
COUPLING_LABEL = {"iid": "IID", "orthogonal": "ORF", "simplex": "SimRF", "pnc_orthogonal": "PNC"}
#: A colour family per kind, a shade per coupling.
KIND_CMAP = {"prf": "Blues", "hyperbolic": "Oranges", "oprf": "Greens"}


def key(kind, coupling):
    """``'oprf/simplex'`` for the (kind, coupling) pair (the keys of the JSON)."""
    return f"{kind}/{coupling}"


CONTESTANTS = tuple(key(k, c) for k in KINDS for c in COUPLINGS)


def contestant_color(name):
    """The colour of a contestant: its kind's colour family, darker for the later couplings."""
    import matplotlib

    kind, coupling = name.split("/")
    shade = 0.2 + 0.12 * COUPLINGS.index(coupling)  # light enough for black text (contrast >= 4.5)
    return matplotlib.colormaps[KIND_CMAP[kind]](shade)


def pnc_weight(d, m):
    """Norm-coupled ordered pairs per feature of pnc_orthogonal (m features in blocks of d rows)."""
    q, r = divmod(m, d)
    n_c = q * theory.registry.block_pair_split("pnc_orthogonal", d, d)[0]
    if r:
        n_c += theory.registry.block_pair_split("pnc_orthogonal", d, r)[0]
    return mp.mpf(n_c) / m


def scaled_mse(kind, coupling, d, v, m, **params):
    r""":math:`m\,e^{2c(\|x\|^2+\|y\|^2)}\,\mathrm{MSE}` of one contestant at :math:`\|x\| = \|y\| = v/2`
    (Gaussian kernel, c = 1), through :func:`theory.kernel_mse` at the working precision."""
    vv = mp.mpf(v)
    return m * mp.exp(vv * vv) * theory.kernel_mse(coupling, d, vv, kind=kind, x_norm=vv / 2, y_norm=vv / 2, m=m,
                                                    **params)


def pnc_bracket(orth_scaled, d, v, m):
    r"""Proven bracket of ``scaled_mse`` of pnc_orthogonal for 'prf' and 'hyperbolic' from the ORF value
    of the same kind (:ref:`guide-figures.winners`): ``(orth - w (rho_ORF - 0F1(d/2; d v^2/2)), orth)``."""
    vv = mp.mpf(v)
    rho = theory.conformity("orthogonal", d, vv)
    jensen = mp.hyp0f1(mp.mpf(d) / 2, d * vv * vv / 2)
    return orth_scaled - pnc_weight(d, m) * (rho - jensen), orth_scaled


def cell(d, v, m, full=False):
    """Every contestant at one (d, v, m): exact values or proven brackets, and the winner.

    The closed forms of iid, orthogonal and simplex are evaluated for every kind; pnc_orthogonal
    ('prf', 'hyperbolic') enters as the bracket of :func:`pnc_bracket` and is evaluated exactly only
    while the brackets leave the winner open (or everywhere with ``full``); OPRF x pnc_orthogonal only
    with ``full``.  A contestant a proof places above another (kind/orthogonal above kind/pnc_orthogonal,
    convex order) never wins.

    Returns
    -------
    dict
        ``lower`` / ``upper`` (contestant -> bounds of the scaled MSE, equal when exact; None when not
        evaluated), ``status`` (contestant -> 'exact', 'bracket', 'not evaluated' or 'failed: ...'),
        ``winner``, ``decided`` (no evaluated contestant's bracket reaches below the winner's upper
        bound), ``ratio`` (winner / SimRF-PRF, None unless exact), ``ratio_bounds``, ``runner_up`` and
        ``margin`` (the runner-up's lower bound over the winner's upper bound, minus 1: a guaranteed
        margin; when kind/pnc_orthogonal wins, kind/orthogonal, proven worse, is left out), ``A_star``
        (FAVOR++'s :math:`A^*(v^2/d)`, the optimal A of the theorem couplings).  A contestant whose closed
        form did not converge is left out (its status says why; a pnc_orthogonal bracket needs its
        orthogonal value); without the baseline the cell raises ConvergenceError naming d and v.
    """
    lower, upper, status = {}, {}, {}

    def exact(name):
        kind, coupling = name.split("/")
        try:
            lower[name] = upper[name] = scaled_mse(kind, coupling, d, v, m)
            status[name] = "exact"
        except ConvergenceError as exc:
            status[name] = f"failed: {' '.join(str(exc).split())}"
            return False
        return True

    for kind in KINDS:
        for c in CHEAP:
            exact(key(kind, c))
    pending = []
    for kind in ("prf", "hyperbolic"):
        name = key(kind, "pnc_orthogonal")
        orth = upper.get(key(kind, "orthogonal"))
        if orth is None:  # its bracket needs kind/orthogonal's value, which failed: exact or nothing
            lower[name] = upper[name] = None
            status[name] = f"not evaluated (its bracket needs {key(kind, 'orthogonal')}, which failed)"
            if full:
                exact(name)
            continue
        lower[name], upper[name] = pnc_bracket(orth, d, v, m)
        status[name] = "bracket"
        if full:
            exact(name)
        else:
            pending.append(name)
    name = key("oprf", "pnc_orthogonal")
    if full:
        if not exact(name):
            lower[name] = upper[name] = None
    else:
        lower[name] = upper[name] = None
        status[name] = "not evaluated"
    dominated = {key(kind, "orthogonal") for kind in ("prf", "hyperbolic")}
    if upper.get(BASELINE) is None:  # (the map's ratios are to the baseline: nothing to draw without it)
        raise ConvergenceError(f"the winners' map has no cell at d = {d}, v = {v}: the baseline {BASELINE} "
                               f"{status[BASELINE]}")
    while True:
        known = [n for n in CONTESTANTS if upper.get(n) is not None]
        top = min(upper[n] for n in known)
        candidates = [n for n in known if n not in dominated and lower[n] <= top]
        open_ = [n for n in candidates if status[n] == "bracket" and n in pending]
        if len(candidates) == 1 or not open_:
            break
        n = max(open_, key=lambda n: upper[n] - lower[n])
        pending.remove(n)
        exact(n)
    winner = min(candidates, key=lambda n: (upper[n], n))
    sibling = key(winner.split("/")[0], "orthogonal") if winner.endswith("/pnc_orthogonal") else None
    others = {n: lower[n] for n in known if n not in (winner, sibling)}
    runner_up = min(others, key=others.get) if others else None  # (None: no other contestant evaluated)
    base = upper[BASELINE]
    if not math.isfinite(float(base)):  # (the map's values are float64: e^{v^2}-sized MSEs overflow near v = 19)
        raise ValueError(f"v = {v} is too large for the winners' map at d = {d}: the scaled MSEs ({BASELINE}: "
                         f"{mp.nstr(base, 5)}) exceed float64's range; use smaller v")
    return {
        "lower": {n: None if lower.get(n) is None else float(lower[n]) for n in CONTESTANTS},
        "upper": {n: None if upper.get(n) is None else float(upper[n]) for n in CONTESTANTS},
        "status": status,
        "winner": winner,
        "decided": len(candidates) == 1,
        "ratio": float(upper[winner] / base) if status[winner] == "exact" else None,
        "ratio_bounds": [float(lower[winner] / base), float(upper[winner] / base)],
        "runner_up": runner_up,
        "margin": None if runner_up is None else float(others[runner_up] / upper[winner] - 1),
        "A_star": float(theory.oprf.optimal_a(mp.mpf(v) ** 2 / d)),
    }


def check_m_multiple(d, v, k, ref):
    """``scaled_mse`` at m = k d equals the m = d value for the baseline and the best theorem contestant
    (relative 1e-12), and pnc_orthogonal has as many norm-coupled pairs per feature; else RuntimeError."""
    worst = mp.mpf(0)
    best_cheap = min((n for n in CONTESTANTS if n.split("/")[1] in CHEAP), key=lambda n: ref["upper"][n])
    for name in sorted({BASELINE, best_cheap}):
        kind, coupling = name.split("/")
        a = scaled_mse(kind, coupling, d, v, k * d)
        worst = max(worst, abs(a / ref["upper"][name] - 1))
    if worst > mp.mpf(10) ** -12 or pnc_weight(d, k * d) != pnc_weight(d, d):
        raise RuntimeError(f"the map at m = {k}d differs from m = d at d = {d}, v = {v} (relative "
                           f"{float(worst):.3g}); the pair weights per feature are not those of one block")
    return float(worst)


def compute(ds, vs, *, m_over_d=(1, 4), full=False, progress=None):
    """The map: :func:`cell` at m = d for every (d, v), checked at the other multiples of d (one v per d).

    Returns
    -------
    dict
        ``cells`` (``[i_d][i_v]`` dicts of :func:`cell`) and ``m_check_max_rel`` (the largest relative
        difference of :func:`check_m_multiple`).
    """
    cells, worst = [], 0.0
    for d in ds:
        row = []
        for j, v in enumerate(vs):
            c, w = checked_cell(d, v, m_over_d if j == len(vs) // 2 else (), full)
            worst = max(worst, w)
            row.append(c)
            if progress is not None:
                progress.update()
        cells.append(row)
    return {"cells": cells, "m_check_max_rel": worst}


def checked_cell(d, v, m_over_d, full):
    """:func:`cell` at m = d and, for each k != 1 of ``m_over_d``, :func:`check_m_multiple` (P/m does not
    depend on v: one v per d suffices): ``(cell, largest relative difference)`` (a unit of the figures'
    sweep)."""
    c, worst = cell(d, v, d, full), 0.0
    for k in m_over_d:
        if k != 1:
            worst = max(worst, check_m_multiple(d, v, k, c))
    return c, worst


def simplex_plus_points(ctx, points, cells, ds, vs, n_draws, estimates=None):
    """Monte Carlo MSE of simplex_plus with the kind that wins each point's cell, against the winner's bounds.

    ``z_upper`` = (estimate - winner's upper bound) / s.e.: above :data:`RESOLVED_Z` simplex_plus is
    resolved worse; ``z_lower`` (against the lower bound) below -RESOLVED_Z: resolved better.  ``estimates``:
    ``{(d, v, kind): figures.mse.empirical_mse_cell(...)}`` already computed (else computed here).  The
    SimRF+ update's warnings (blocks whose passes did not converge) are recorded with the point.
    """
    out = []
    for d, v in points:
        c = cells[ds.index(d)][vs.index(v)]
        kind = c["winner"].split("/")[0]
        vf = float(v)
        est = (estimates or {}).get((d, v, kind))
        if est is None:
            est = _simplex_plus_mse(d, v, kind, n_draws, ctx.rng(f"winners-{d}-{v}"))
        to_mse = math.exp(-vf * vf) / d
        lo, hi = c["lower"][c["winner"]] * to_mse, c["upper"][c["winner"]] * to_mse
        mean, se = est["mean"], est["stderr"]
        z_up, z_lo = (mean - hi) / se, (mean - lo) / se
        out.append({"d": d, "v": vf, "kind": kind, "contestant": key(kind, "simplex_plus"), "mse": mean,
                    "stderr": se, "n_draws": n_draws, "winner": c["winner"], "winner_mse_bounds": [lo, hi],
                    "z_upper": z_up, "z_lower": z_lo, "resolved": z_up > RESOLVED_Z or z_lo < -RESOLVED_Z,
                    "simplex_plus_wins": z_lo < -RESOLVED_Z, "sampler_warnings": est["warnings"]})
    return out


def _simplex_plus_mse(d, v, kind, n_draws, rng):
    """The Monte Carlo MSE of simplex_plus with ``kind`` at x = y = v/2 e_1 (a unit of the figures' sweep)."""
    from .mse import empirical_mse_cell

    x = np.zeros(d)
    x[0] = float(v) / 2
    return empirical_mse_cell("simplex_plus", x, x.copy(), d, n_draws, kind, rng, "numpy")


def _fmt(r):
    """Two significant digits, without an exponent down to 0.001."""
    if r >= 0.0995:
        return f"{r:.2f}"
    if r >= 0.000995:
        return f"{r:.2g}" if r >= 0.00995 else f"{r:.4f}".rstrip("0")
    return f"{r:.1e}".replace("e-0", "e-")


def cell_text(c):
    """The text of a map cell: the winner's MSE over SimRF-PRF's; ``≤x`` where the winner is PNC, bounded
    above by the same kind's ORF value (proven; not evaluated by quadrature), and ``?`` where the proven bounds
    leave the winner undecided."""
    if c["ratio"] is not None:
        text = _fmt(c["ratio"])
    else:
        text = "≤" + _fmt(c["ratio_bounds"][1])
    return text + ("" if c["decided"] else "?")


#: Font size of the map's cell text (points, at the saved size).
CELL_FONTSIZE = 7
#: The profile panel's lower limit: smaller ratios are marked at the axis with their value.
PROFILE_FLOOR = 2e-3


def _text_color(rgba):
    """Black or white, whichever has the larger contrast ratio with the background colour (WCAG relative
    luminance L: (1.05) / (L + 0.05) for white, (L + 0.05) / 0.05 for black)."""
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3])
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "k" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "w"


def _effort(ctx, effort):
    eff = {**(QUICK if ctx.quick else EFFORT), **(effort or {})}
    unknown = set(eff) - set(EFFORT)
    if unknown:
        raise ValueError(f"effort keys must be among {', '.join(EFFORT)}, got {', '.join(sorted(unknown))}")
    ds, vs = tuple(int(d) for d in eff["ds"]), tuple(str(v) for v in eff["vs"])
    return eff, ds, vs, mc_points_in(eff["mc_points"], ds, vs)


def mc_points_in(mc_points, ds, vs):
    """The simplex_plus Monte Carlo points (d, v) that lie in the grid, each v as the grid writes it (1 and 1.0
    are the same point)."""
    out = []
    for d, v in mc_points:
        same = [x for x in vs if float(x) == float(v)]
        if int(d) in ds and same:
            out.append((int(d), same[0]))
    return out


#: The kinds whose simplex_plus Monte Carlo MSE is computed at each point with the cells (the kinds that can win a
#: cell: PRFs never win strictly, A = 0 being an OPRF; a PRF winner's estimate would be computed at drawing).
MC_KINDS = ("hyperbolic", "oprf")


def new_winners_map_parts(ctx, effort=None):
    """Every cell (d, v) of the map (:func:`checked_cell`; the m = 4d check at the middle v of each d), and the
    simplex_plus Monte Carlo MSE of each positive kind at the Monte Carlo points (the render picks the kind that
    wins the cell)."""
    from ._sweep import Cell

    eff, ds, vs, points = _effort(ctx, effort)
    full, m_over_d = bool(eff["full"]), tuple(eff["m_over_d"])
    parts = {("cell", d, v): Cell(checked_cell, (d, v, m_over_d if j == len(vs) // 2 else (), full),
                                  cost=3.0 if full else 0.3, dps=ctx.dps)
             for d in ds for j, v in enumerate(vs)}
    for d, v in points:
        for kind in MC_KINDS:
            parts["mc", d, v, kind] = Cell(_simplex_plus_mse, (d, v, kind, int(eff["mc_draws"]),
                                                               ctx.rng(f"winners-{d}-{v}")), cost=0.3)
    return parts


def new_winners_map(ctx, effort=None):
    """Who wins where: the best (kind x coupling) over (d, v) at m = d and m = 4d (:ref:`guide-figures.winners`).

    Parameters
    ----------
    ctx : figures._context.Context
    effort : dict, optional
        Any of ``ds``, ``vs``, ``m_over_d``, ``full``, ``mc_points``, ``mc_draws`` (the rest from
        :data:`EFFORT`, ``QUICK`` with ``--quick``).
    """
    new_winners_map_render(ctx, ctx.compute(new_winners_map_parts(ctx, effort), "new winners map"), effort)


def new_winners_map_render(ctx, res, effort=None):
    """Draw and save the winners' map from :func:`new_winners_map_parts`."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    eff, ds, vs, points = _effort(ctx, effort)
    got = [[res["cell", d, v] for v in vs] for d in ds]
    cells = [[c for c, _ in row] for row in got]
    grid = {"cells": cells, "m_check_max_rel": max(w for row in got for _, w in row)}
    estimates = {k[1:]: v for k, v in res.items() if k[0] == "mc"}
    mcs = simplex_plus_points(ctx, points, cells, ds, vs, int(eff["mc_draws"]), estimates)
    winners = [[c["winner"] for c in row] for row in cells]

    present = [n for n in CONTESTANTS if any(n in row for row in winners)]
    index = np.array([[present.index(w) for w in row] for row in winners])
    fig, (ax, az) = plt.subplots(2, 1, figsize=(PAGE_WIDTH, 7.4), gridspec_kw={"height_ratios": [3, 2]})
    colors = [contestant_color(n) for n in present]
    cmap = ListedColormap(colors)
    ax.pcolormesh(np.arange(len(vs)), np.arange(len(ds)), index, cmap=cmap, vmin=-0.5, vmax=len(present) - 0.5,
                  shading="nearest")
    texts = [[cell_text(c) for c in row] for row in cells]
    for i, row in enumerate(cells):
        for j, c in enumerate(row):
            ax.text(j, i, texts[i][j], ha="center", va="center", fontsize=CELL_FONTSIZE,
                    color=_text_color(colors[index[i, j]]))
    for p in mcs:
        ax.plot(vs.index(next(v for v in vs if float(v) == p["v"])), ds.index(p["d"]), marker="o", markersize=16,
                markerfacecolor="none", markeredgecolor="m" if p["resolved"] else "0.5", markeredgewidth=1.2)
    ax.set_xticks(np.arange(len(vs)), vs)
    ax.set_yticks(np.arange(len(ds)), [str(d) for d in ds])
    ax.set_xlabel(r"$v = \|\mathbf{x} + \mathbf{y}\|_2$")
    ax.set_ylabel(r"$d$   ($m = d$ and $m = 4d$: the same map)")
    unevaluated = [n for n in CONTESTANTS
                   if all(str(c["status"][n]).startswith("not evaluated") for row in cells for c in row)]
    ax.set_title("lowest kernel MSE; text: its MSE / MSE of SimRF-PRF"
                 + ("\nnot evaluated in this run: " + ", ".join(f"{KIND_LABEL[n.split('/')[0]]} x "
                                                               f"{COUPLING_LABEL[n.split('/')[1]]}"
                                                               for n in unevaluated)
                    + " (figures.reproduce winners --full: every contestant)" if unevaluated else
                    "\nevery contestant evaluated"), fontsize=8)
    handles = [Patch(color=contestant_color(n), label=f"{KIND_LABEL[n.split('/')[0]]}, "
                     f"{COUPLING_LABEL[n.split('/')[1]]}") for n in present]
    handles.append(plt.Line2D([], [], linestyle="none", label="\u2264x: PNC at most its ORF value (proven "
                              "bound; not evaluated)"))
    if any(not c["decided"] for row in cells for c in row):
        handles.append(plt.Line2D([], [], linestyle="none", label="?: the bounds leave the winner open"))
    if mcs:
        handles.append(plt.Line2D([], [], marker="o", markersize=7, markerfacecolor="none", markeredgecolor="m",
                                  linestyle="none", label=r"SimRF$^+$ (Monte Carlo) resolved worse"))
        if not all(p["resolved"] for p in mcs):
            handles.append(plt.Line2D([], [], marker="o", markersize=7, markerfacecolor="none",
                                      markeredgecolor="0.5", linestyle="none", label=r"SimRF$^+$ not resolved"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=7)

    # below: each kind's best against v, relative to SimRF-PRF, at up to three dimensions
    vf = np.array([float(v) for v in vs])
    profile_ds = [d for d in (4, 64, 1024) if d in ds] or [ds[0]]
    dashes = dict(zip(profile_ds, ("-", "--", ":")))
    profiles = []
    banded = False
    clipped = []
    for d in profile_ds:
        i = ds.index(d)
        for kind in KINDS:
            lo, hi, names = [], [], []
            for c in cells[i]:
                mine = [n for n in CONTESTANTS if n.startswith(kind + "/") and c["upper"][n] is not None]
                best = min(mine, key=lambda n: c["upper"][n])
                base = c["upper"][BASELINE]
                lo.append(min(c["lower"][n] for n in mine) / base)
                hi.append(c["upper"][best] / base)
                names.append(best)
            profiles.append({"d": d, "kind": kind, "v": vf, "lower": lo, "upper": hi, "best_upper": names})
            color = contestant_color(key(kind, "simplex"))
            shown = np.maximum(np.array(hi), PROFILE_FLOOR)
            az.plot(vf, shown, color=color, linestyle=dashes[d], lw=1.0, marker="o", markersize=2.5,
                    label=f"{KIND_LABEL[kind]}, $d = {d}$")
            if np.any(np.array(lo) < np.array(hi)):
                banded = True
                az.fill_between(vf, np.maximum(lo, PROFILE_FLOOR), shown, color=color, alpha=0.3, lw=0)
            below = np.array(hi) < PROFILE_FLOOR
            if below.any():
                k = int(np.argmax(below))
                clipped.append(f"{KIND_LABEL[kind]}, d = {d}: {_fmt(hi[k])} at v = {vs[k]}"
                               + (f", {_fmt(min(hi))} at v = {vs[int(np.argmin(hi))]}" if int(np.argmin(hi)) != k
                                  else ""))
    az.axhline(1.0, color="0.5", lw=0.6)
    az.set_xscale("log")
    az.set_yscale("log")
    az.set_ylim(PROFILE_FLOOR, None)
    az.set_xlabel(r"$v$")
    az.set_ylabel("best MSE of the kind\n/ MSE of SimRF-PRF")
    az.set_title("each kind at its best coupling (markers: the map's v)"
                 + ("; band: PNC between its proven bounds" if banded else ""), fontsize=8)
    if clipped:
        az.text(0.01, 0.02, f"below the axis ({PROFILE_FLOOR:g}):\n" + "\n".join(clipped), transform=az.transAxes,
                fontsize=7, va="bottom", ha="left", color="0.25")
    az.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2))

    data = {
        "name": "new_winners_map",
        "paper_label": None,
        "caption": ("Beyond the paper: the (feature kind x coupling) with the lowest kernel MSE (Gaussian kernel) "
                    "over d and v = |x + y|, at m = d and m = 4d (the same map: P/m = d - 1 coupled pairs per "
                    "feature either way; checked at one v per d), among {PRF, hyperbolic PRF, OPRF at each "
                    "coupling's optimal A} x {IID, ORF, SimRF, PNC}. Text: the winner's MSE over the paper's "
                    "SimRF-PRF; '\u2264x' where the winner is PNC, whose MSE lies between a convex-order/Jensen "
                    "lower bound and the same kind's ORF value x (proven; not evaluated by quadrature: the bounds "
                    "already decide the winner; both bounds in 'ratio_bounds'); '?' where they leave it open. PNC "
                    "is evaluated by quadrature only where the bounds leave the winner open"
                    + ("; OPRF x PNC is not evaluated in this run (python -m figures.reproduce winners --full)"
                       if unevaluated else "; every contestant evaluated (--full)")
                    + ". Circles: SimRF+ by Monte Carlo with the winning kind. Below: each kind at its best "
                    f"coupling against v at d = {', '.join(map(str, profile_ds))} (band: PNC between its bounds; "
                    f"ratios below {PROFILE_FLOOR:g} marked at the axis with their value)."
                    + "".join(f" SimRF+ at d = {p['d']}, v = {p['v']:g}: sampler warning recorded in "
                              "'simplex_plus_monte_carlo' (the unconverged blocks keep their last iterate; their "
                              "rows stay exactly Gaussian)." for p in mcs if p["sampler_warnings"])),
        "ds": list(ds), "vs": [float(v) for v in vs], "vs_text": list(vs), "m_over_d": list(eff["m_over_d"]),
        "contestants": list(CONTESTANTS), "baseline": BASELINE,
        "quantity": "scaled_mse = m e^{2(|x|^2+|y|^2)} MSE at |x| = |y| = v/2 (Gaussian kernel); the MSE of "
                    "x = y is scaled_mse e^{-v^2} / m",
        "winner": winners,
        "cell_text": texts,
        "not_evaluated": unevaluated,
        "decided": [[c["decided"] for c in row] for row in cells],
        "ratio": [[c["ratio"] for c in row] for row in cells],
        "ratio_bounds": [[c["ratio_bounds"] for c in row] for row in cells],
        "runner_up": [[c["runner_up"] for c in row] for row in cells],
        "margin": [[c["margin"] for c in row] for row in cells],
        "A_star": [[c["A_star"] for c in row] for row in cells],
        "scaled_mse_lower": {n: [[c["lower"][n] for c in row] for row in cells] for n in CONTESTANTS},
        "scaled_mse_upper": {n: [[c["upper"][n] for c in row] for row in cells] for n in CONTESTANTS},
        "status": {n: [[c["status"][n] for c in row] for row in cells] for n in CONTESTANTS},
        "m_check_max_rel": grid["m_check_max_rel"],
        "full": bool(eff["full"]),
        "simplex_plus_monte_carlo": mcs, "resolved_z": RESOLVED_Z,
        "profiles": profiles,
        "source": "theory.kernel_mse(coupling, d, v, kind=kind, x_norm=v/2, y_norm=v/2, m=m) (A=None for oprf); "
                  "bounds: theory.conformity('orthogonal', d, v) and mpmath.hyp0f1(d/2, d v^2/2); "
                  "montecarlo.empirical_mse('simplex_plus', ...)",
    }
    ctx.save(fig, "new_winners_map", data)
